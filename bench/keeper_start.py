"""Spawn -> first output byte of a trivial command: direct, under the keeper, under the keeper in
a cgroup of its own, and from a spare keeper (started ahead, its child already in its cgroup:
only the hand-over is timed). Rounds alternate the variants; each timed start follows a quiet
moment (PAUSE), as a cold start does. Also prints what a waiting spare costs in memory."""

import asyncio
import os
import statistics
import sys
import time

import psutil

from modelswap.supervisor import keeper_client
from modelswap.supervisor.containment import detect

RUNS = int(sys.argv[1]) if len(sys.argv) > 1 else 12
CMD, CONTAINMENT = ["/bin/echo", "ready"], detect()
PAUSE = 0.2  # seconds of quiet before each timed start


async def timed(spawn) -> float:
    t = time.perf_counter()
    proc = await spawn()
    await proc.stdout.read(1)
    took = time.perf_counter() - t
    await proc.wait()
    return took


def direct():
    return asyncio.create_subprocess_exec(
        *CMD,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        start_new_session=True,
    )


def memory(spare: keeper_client.Spare) -> tuple[float, float]:
    """(RSS, PSS) in MiB of the spare keeper and its waiting child together (they share most
    pages since the fork: USS would undercount, RSS counts the shared ones twice)."""
    keeper = psutil.Process(spare.keeper_pid)
    procs = [keeper, *keeper.children()]
    infos = [p.memory_full_info() for p in procs]
    return sum(i.rss for i in infos) / 2**20, sum(i.pss for i in infos) / 2**20


async def main() -> None:
    variants = {"direct": direct, "keeper": lambda: keeper_client.spawn(CMD, env=os.environ)}
    if CONTAINMENT.cgroup_base is not None:
        variants["keeper+cgroup"] = lambda: keeper_client.spawn(
            CMD, env=os.environ, cgroup=CONTAINMENT.new_cgroup("measure")
        )
    variants["spare"] = lambda: None  # made ahead in each round, below
    runs: dict[str, list[float]] = {name: [] for name in variants}
    sizes = []
    for round_ in range(RUNS + 1):  # the first round warms up, untimed
        for name, spawn in variants.items():
            if name == "spare":
                spare = await keeper_client.spawn_spare(CONTAINMENT.new_cgroup("spare"))
                sizes.append(memory(spare))
                spawn = lambda spare=spare: spare.use(CMD, env=os.environ)  # noqa: E731
            await asyncio.sleep(PAUSE)
            took = await timed(spawn)
            if round_:
                runs[name].append(took * 1000)
    for name, times in runs.items():
        print(
            f"{name}: median {statistics.median(times):.1f} ms, min {min(times):.1f}, "
            f"max {max(times):.1f} (n={RUNS})"
        )
    rss, pss = statistics.median(s[0] for s in sizes), statistics.median(s[1] for s in sizes)
    print(f"a waiting spare (keeper + child): RSS {rss:.1f} MiB, PSS {pss:.1f} MiB")
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


asyncio.run(main())
