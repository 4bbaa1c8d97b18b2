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

The gateway's share of a cold start = gateway cold first byte - (direct healthy + direct warm
first byte); medians over the rounds. Then the polling cost: the gateway's own CPU seconds
(not its children's) while one start with a 3 s silent load runs, as a share of one core.
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
from bench.procs import free_port, http_status, start_port, stop, wait_until

FAKE = Path(__file__).resolve().parents[1] / "tests" / "fakes" / "openai_backend.py"
BODY = json.dumps({"model": "silent", "messages": [{"role": "user", "content": "hi"}]})


def fake_cmd(port: int | str, load_delay: float) -> list[str]:
    return [
        sys.executable, str(FAKE), "--port", str(port), "--flavor", "vllm",
        "--quiet-loading", "--silent-bind", "--load-delay", str(load_delay),
    ]  # fmt: skip


def first_byte_seconds(port: int) -> float:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    started = time.perf_counter()
    try:
        conn.request("POST", "/v1/chat/completions", BODY, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        resp.read(1)
        elapsed = time.perf_counter() - started
        assert resp.status == 200, resp.status
        resp.read()
        return elapsed
    finally:
        conn.close()


def direct_round(load_delay: float) -> tuple[float, float]:
    port = free_port()
    started = time.perf_counter()
    proc = subprocess.Popen(
        fake_cmd(port, load_delay), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        deadline = started + 60
        while http_status(port, "/health", timeout=1.0) != 200:
            assert proc.poll() is None, "the fake exited"
            assert time.perf_counter() < deadline, "the fake did not start"
            time.sleep(0.001)
        healthy = time.perf_counter() - started
        return healthy, first_byte_seconds(port)
    finally:
        stop(proc)


def start_gateway(
    tmp: str, load_delay: float, spare_keeper: bool = True
) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    config = Path(tmp) / f"silent-{load_delay}.yaml"
    cmd = " ".join(json.dumps(a) for a in fake_cmd("${PORT}", load_delay))
    config.write_text(
        f"startPort: {start_port()}\nstateDir: {tmp}/state\n"
        f"spareKeeper: {json.dumps(spare_keeper)}\n"
        f"models:\n  silent:\n    cmd: {json.dumps(cmd)}\n"
    )
    gateway = subprocess.Popen(
        [sys.executable, "-m", "modelswap", "serve", "--config", str(config),
         "--listen", f"127.0.0.1:{port}", "--log-level", "warn"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    wait_until(lambda: http_status(port, "/health") == 200, "the gateway to start", timeout=30)
    return gateway, port


def measure(
    rounds: int = 7, load_delay: float = 0.3, poll_load: float = 3.0, spare_keeper: bool = True
) -> dict[str, Any]:
    """The rounds' figures (seconds) and the polling cost during one ``poll_load`` s start."""
    direct_healthy: list[float] = []
    direct_warm: list[float] = []
    cold: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        gateway, port = start_gateway(tmp, load_delay, spare_keeper)
        try:
            for _ in range(rounds):
                healthy, warm = direct_round(load_delay)
                direct_healthy.append(healthy)
                direct_warm.append(warm)
                unload(port)
                cold.append(first_byte_seconds(port))
        finally:
            stop(gateway)
        shares = [c - h - w for c, h, w in zip(cold, direct_healthy, direct_warm, strict=True)]
        gateway, port = start_gateway(tmp, poll_load, spare_keeper)
        try:
            me = psutil.Process(gateway.pid)
            before = sum(me.cpu_times()[:2])
            began = time.perf_counter()
            first_byte_seconds(port)
            cpu = sum(me.cpu_times()[:2]) - before
            wall = time.perf_counter() - began
        finally:
            stop(gateway)
    return {
        "rounds": rounds,
        "load_delay": load_delay,
        "direct_healthy": direct_healthy,
        "direct_warm": direct_warm,
        "cold": cold,
        "share": shares,
        "poll_load": poll_load,
        "poll_cpu": cpu,
        "poll_wall": wall,
    }


def ms(values: list[float]) -> str:
    return (
        f"median {statistics.median(values) * 1000:.1f} ms "
        f"(min {min(values) * 1000:.1f}, max {max(values) * 1000:.1f})"
    )


def report(r: dict[str, Any]) -> list[str]:
    cpu, wall = r["poll_cpu"], r["poll_wall"]
    return [
        f"rounds: {r['rounds']}, silent load {r['load_delay']} s",
        f"direct spawn -> healthy:   {ms(r['direct_healthy'])}",
        f"direct warm first byte:    {ms(r['direct_warm'])}",
        f"gateway cold first byte:   {ms(r['cold'])}",
        f"gateway's share:           {ms(r['share'])}",
        f"gateway CPU during a {r['poll_load']:g} s silent start: {cpu:.3f} s in {wall:.2f} s "
        f"= {cpu / wall * 100:.1f} % of one core",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--load-delay", type=float, default=0.3)
    parser.add_argument(
        "--no-spare-keeper", action="store_true", help="the gateway with spareKeeper: false"
    )
    args = parser.parse_args()
    figures = measure(args.rounds, args.load_delay, spare_keeper=not args.no_spare_keeper)
    print("\n".join(report(figures)))


if __name__ == "__main__":
    main()
