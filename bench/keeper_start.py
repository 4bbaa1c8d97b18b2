"""Spawn -> first output byte of a trivial command, direct vs. under the keeper (12 runs each)."""

import asyncio
import os
import statistics
import time

from modelswap.supervisor import kept
from modelswap.supervisor.containment import detect

RUNS, CMD, CONTAINMENT = 12, ["/bin/echo", "ready"], detect()


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


async def main() -> None:
    variants = [("direct", direct), ("keeper", lambda: kept.spawn(CMD, env=os.environ))]
    if CONTAINMENT.cgroup_base is not None:
        variants.append(
            (
                "keeper+cgroup",
                lambda: kept.spawn(CMD, env=os.environ, cgroup=CONTAINMENT.new_cgroup("measure")),
            )
        )
    for name, spawn in variants:
        await timed(spawn)
        runs = [await timed(spawn) * 1000 for _ in range(RUNS)]
        print(
            f"{name}: median {statistics.median(runs):.1f} ms, min {min(runs):.1f}, "
            f"max {max(runs):.1f} (n={RUNS})"
        )


asyncio.run(main())
