"""Cold start of a backend that prints nothing when it binds: the gateway's share, and what
watching for readiness costs the gateway while the backend loads.

    .venv/bin/python bench/silent_start.py [--rounds 7] [--load-delay 0.3]

The backend is the fake (tests/fakes/openai_backend.py --flavor vllm --quiet-loading
--silent-bind): it prints one line, loads for --load-delay seconds in silence, binds and is
ready at once — many servers behave so (they log before binding, or not at all), so waking
on output cannot help. Alternating in one run:

* direct: spawn it, poll (connect + GET /health every 1 ms) until 200 — its own
  spawn-to-healthy time; then one chat request's time to first byte, warm;
* gateway: modelswap serving the same command, the model stopped; one chat request's time to
  first byte, cold.

The fake writes when its Python began running, when it listened and when the first request
reached it (``--timestamps``: CLOCK_MONOTONIC, one clock for the whole machine). The gateway's
share of a cold start = its extra spawn time (request in -> backend running, against direct
spawn -> running) + its extra listening -> request reaching the backend (against the direct
client's: a 1 ms poll, the health answer, the request) + its extra reply time.
What the backend does itself (running -> listening: imports and the load, ±300 ms on a busy
machine) is in none of the three, so the share is resolved to milliseconds; the end-to-end
difference (cold first byte - direct healthy - direct warm first byte) is printed too.
Medians over the rounds. Then the polling cost: the gateway's own CPU (every thread) per
second of waiting for a start, the difference between a long and a short silent start — each
model's second start (the gateway has seen when its port listens) and, printed too, its first —
and the gateway's CPU while idle for comparison.
Loopback only; every loop is bounded.
"""

from __future__ import annotations

import argparse
import http.client
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

if __package__ in (None, ""):  # run as a script: make the bench package importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.cold_start import unload
from bench.procs import cpu_seconds, free_port, http_status, start_port, stop, wait_until

FAKE = Path(__file__).resolve().parents[1] / "tests" / "fakes" / "openai_backend.py"
# The fake is run by a line that stamps when Python began running, then runs it: compiling the
# fake's 900 lines (~20 ms, ±10 ms with the load) is then the backend's own start, as its imports
# are, and not noise in the spawn part of the share.
STAMP_FIRST = (
    "import os,runpy,sys,time;os.environ['FAKE_RAN_AT']=repr(time.monotonic());"
    "sys.argv=sys.argv[1:];runpy.run_path(sys.argv[0],run_name='__main__')"
)


def fake_cmd(
    port: int | str, load_delay: float, stamps: Path | None = None, flavor: str = "vllm"
) -> list[str]:
    cmd = [
        sys.executable, "-c", STAMP_FIRST, str(FAKE), "--port", str(port), "--flavor", flavor,
        "--quiet-loading", "--silent-bind", "--load-delay", str(load_delay),
    ]  # fmt: skip
    return [*cmd, "--timestamps", str(stamps)] if stamps is not None else cmd


def first_byte(port: int, model: str = "silent") -> tuple[float, float]:
    """(monotonic) when one chat request was sent, and when its first byte came back."""
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": "hi"}]})
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    sent = time.monotonic()
    try:
        conn.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        resp.read(1)
        got = time.monotonic()
        assert resp.status == 200, resp.status
        resp.read()
        return sent, got
    finally:
        conn.close()


def first_byte_seconds(port: int) -> float:
    sent, got = first_byte(port)
    return got - sent


def read_stamps(path: Path) -> dict[str, float]:
    """The fake's ``--timestamps``: ran, listen, request (monotonic, this machine's clock)."""
    stamps: dict[str, float] = {}
    for line in path.read_text().splitlines():
        entry = json.loads(line)
        stamps.setdefault(entry["event"], entry["t"])
    return stamps


def direct_round(load_delay: float, stamps: Path, flavor: str = "vllm") -> dict[str, float]:
    """The backend alone: spawned here, polled every 1 ms until healthy, then asked once."""
    stamps.write_text("")
    port = free_port()
    spawned = time.monotonic()
    proc = subprocess.Popen(
        fake_cmd(port, load_delay, stamps, flavor),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = spawned + 60
        while http_status(port, "/health", timeout=1.0) != 200:
            assert proc.poll() is None, "the fake exited"
            assert time.monotonic() < deadline, "the fake did not start"
            time.sleep(0.001)
        healthy = time.monotonic() - spawned
        sent, got = first_byte(port)
        at = read_stamps(stamps)
        return {
            "healthy": healthy,
            "warm": got - sent,
            "spawn": at["ran"] - spawned,  # spawn call -> its Python running
            "detect": at["request"] - at["listen"],  # a 1 ms poll, the health answer, the ask
            "reply": got - at["request"],  # request in the backend -> first byte here
        }
    finally:
        stop(proc)


def gateway_round(port: int, stamps: Path, model: str = "silent") -> dict[str, float]:
    """The same backend cold through the gateway: what of the time is the gateway's."""
    unload(port)
    stamps.write_text("")
    sent, got = first_byte(port, model)
    at = read_stamps(stamps)
    return {
        "cold": got - sent,
        "spawn": at["ran"] - sent,  # request in -> the backend's Python running
        "detect": at["request"] - at["listen"],  # it listens -> the request reaches it
        "reply": got - at["request"],
    }


def start_gateway(
    tmp: str,
    models: dict[str, float],
    stamps: Path,
    spare_keeper: bool = True,
    flavor: str = "vllm",
) -> tuple[subprocess.Popen[bytes], int]:
    """A gateway serving the silent fake as each of ``models`` (name: load delay)."""
    port = free_port()
    config = Path(tmp) / "silent.yaml"
    rows = []
    for name, delay in models.items():
        cmd = " ".join(json.dumps(a) for a in fake_cmd("${PORT}", delay, stamps, flavor))
        rows.append(f"  {name}:\n    cmd: {json.dumps(cmd)}\n")
    config.write_text(
        f"startPort: {start_port()}\nstateDir: {tmp}/state\n"
        f"spareKeeper: {json.dumps(spare_keeper)}\n"
        "models:\n" + "".join(rows)
    )
    gateway = subprocess.Popen(
        [sys.executable, "-m", "modelswap", "serve", "--config", str(config),
         "--listen", f"127.0.0.1:{port}", "--log-level", "warn"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    wait_until(lambda: http_status(port, "/health") == 200, "the gateway to start", timeout=30)
    return gateway, port


def polling_cost(
    gateway: subprocess.Popen[bytes],
    port: int,
    stamps: Path,
    short: float,
    long: float,
    repeats: int = 3,
) -> dict[str, Any]:
    """The gateway's CPU per second of waiting for a start: the difference between a ``long``
    and a ``short`` silent start (what both cost alike — the request, the spawn — cancels),
    ``repeats`` times (models ``short<i>``/``long<i>``; the repetition with the median share is
    reported), and its CPU while idle for as long, for comparison."""
    me = [psutil.Process(gateway.pid)]
    runs: dict[str, list[tuple[float, float]]] = {"first": [], "again": []}
    for i in range(repeats):
        spent = {}
        # Each model's first start (the gateway knows nothing of it yet), then its second (it
        # has seen when that model's port listens, and looks hardest then).
        for start in ("first", "again"):
            for model in (f"short{i}", f"long{i}"):
                unload(port)
                time.sleep(1.0)  # the spare keeper is made 0.5 s after a stop: not in the start
                before, began = cpu_seconds(me), time.monotonic()
                gateway_round(port, stamps, model)
                spent[start, model] = (cpu_seconds(me) - before, time.monotonic() - began)
        for start in runs:
            (cpu_long, wall_long), (cpu_short, wall_short) = (
                spent[start, f"long{i}"],
                spent[start, f"short{i}"],
            )
            runs[start].append((cpu_long - cpu_short, wall_long - wall_short))
    before, began = cpu_seconds(me), time.monotonic()
    time.sleep(long - short)
    idle = (cpu_seconds(me) - before) / (time.monotonic() - began)
    again, first = (_median_run(runs[start]) for start in ("again", "first"))
    return {
        "poll_cpu": again[0],
        "poll_wall": again[1],
        "first_poll_cpu": first[0],
        "first_poll_wall": first[1],
        "idle_cpu_share": idle,
        "poll_shares": [cpu / wall for cpu, wall in runs["again"]],
        "first_poll_shares": [cpu / wall for cpu, wall in runs["first"]],
    }


def _median_run(runs: list[tuple[float, float]]) -> tuple[float, float]:
    """The (cpu, wall) of the repetition whose CPU share is the median one."""
    ordered = sorted(runs, key=lambda run: run[0] / run[1])
    return ordered[len(ordered) // 2]


def measure(
    rounds: int = 7,
    load_delay: float = 0.3,
    poll_load: float = 3.0,
    spare_keeper: bool = True,
    flavor: str = "vllm",
    poll_repeats: int = 3,
) -> dict[str, Any]:
    """The rounds' figures (seconds), alternating direct and gateway, and the polling cost
    between a 0.5 s and a ``poll_load`` + 0.5 s silent start (``poll_repeats`` times).

    The gateway's share of a round = its extra spawn time (request in -> the backend running,
    against a direct spawn -> running) + its extra listen -> request reaching the backend
    (against the direct client's) + its extra reply time (against the direct warm request's).
    The backend's own start (running -> listening, ±300 ms on a busy machine) is in none of
    them, so the share is resolved to a few milliseconds where the end-to-end difference
    (``share_end_to_end``) is not."""
    direct: list[dict[str, float]] = []
    through: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        stamps = Path(tmp) / "stamps.jsonl"
        models = {"silent": load_delay}
        for i in range(poll_repeats):
            models |= {f"short{i}": 0.5, f"long{i}": poll_load + 0.5}
        gateway, port = start_gateway(tmp, models, stamps, spare_keeper, flavor)
        try:
            for _ in range(rounds):
                direct.append(direct_round(load_delay, stamps, flavor))
                time.sleep(0.6)  # the spare keeper for the next start is made 0.5 s after one
                through.append(gateway_round(port, stamps))
            cost = polling_cost(gateway, port, stamps, 0.5, poll_load + 0.5, poll_repeats)
        finally:
            stop(gateway)
    parts = {
        "spawn": [g["spawn"] - d["spawn"] for d, g in zip(direct, through, strict=True)],
        "detect": [g["detect"] - d["detect"] for d, g in zip(direct, through, strict=True)],
        "reply": [g["reply"] - d["reply"] for d, g in zip(direct, through, strict=True)],
    }
    return {
        "rounds": rounds,
        "flavor": flavor,
        "load_delay": load_delay,
        "direct_healthy": [d["healthy"] for d in direct],
        "direct_warm": [d["warm"] for d in direct],
        "cold": [g["cold"] for g in through],
        "share": [sum(p) for p in zip(*parts.values(), strict=True)],
        "share_parts": parts,
        "share_end_to_end": [
            g["cold"] - d["healthy"] - d["warm"] for d, g in zip(direct, through, strict=True)
        ],
        "poll_load": poll_load,
        **cost,
    }


def ms(values: list[float]) -> str:
    return (
        f"median {statistics.median(values) * 1000:.1f} ms "
        f"(min {min(values) * 1000:.1f}, max {max(values) * 1000:.1f})"
    )


def report(r: dict[str, Any]) -> list[str]:
    cpu, wall, idle = r["poll_cpu"], r["poll_wall"], r["idle_cpu_share"]
    first = r["first_poll_cpu"] / r["first_poll_wall"]
    parts = r["share_parts"]
    return [
        f"rounds: {r['rounds']}, silent load {r['load_delay']} s, flavor {r['flavor']}",
        f"direct spawn -> healthy:   {ms(r['direct_healthy'])}",
        f"direct warm first byte:    {ms(r['direct_warm'])}",
        f"gateway cold first byte:   {ms(r['cold'])}",
        f"gateway's share:           {ms(r['share'])}",
        f"  of it, spawn (vs direct): {ms(parts['spawn'])}",
        f"  listen -> request (vs direct): {ms(parts['detect'])}",
        f"  reply (vs direct):        {ms(parts['reply'])}",
        f"end to end (noisy):        {ms(r['share_end_to_end'])}",
        f"gateway CPU per second of a silent start: {cpu:.3f} s in {wall:.2f} s "
        f"= {cpu / wall * 100:.2f} % of one core (idle: {idle * 100:.2f} %; "
        f"polling: {(cpu / wall - idle) * 100:.2f} %)",
        f"  a model's first start:   {first * 100:.2f} % (polling: {(first - idle) * 100:.2f} %)",
        "  (median of "
        + _shares(r.get("poll_shares"), idle)
        + " repeated; "
        + _shares(r.get("first_poll_shares"), idle)
        + " first)",
    ]


def _shares(shares: list[float] | None, idle: float) -> str:
    """The repetitions' polling shares, above idle, in %."""
    return "/".join(f"{(s - idle) * 100:.2f}" for s in shares or [])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--load-delay", type=float, default=0.3)
    parser.add_argument(
        "--no-spare-keeper", action="store_true", help="the gateway with spareKeeper: false"
    )
    parser.add_argument(
        "--flavor",
        choices=("vllm", "llamacpp"),
        default="vllm",
        help="vllm: binds when ready; llamacpp: binds first and answers 503 while it loads",
    )
    parser.add_argument(
        "--poll-repeats", type=int, default=3, help="pairs of starts for the polling cost"
    )
    args = parser.parse_args()
    figures = measure(
        args.rounds,
        args.load_delay,
        spare_keeper=not args.no_spare_keeper,
        flavor=args.flavor,
        poll_repeats=args.poll_repeats,
    )
    print("\n".join(report(figures)))


if __name__ == "__main__":
    main()
