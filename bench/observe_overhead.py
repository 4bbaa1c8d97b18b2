"""What metrics + the activity log cost on the proxy's hot path.

    .venv/bin/python bench/observe_overhead.py [--rounds 5] [--requests 300]

Two modelswap instances in front of the same fast fake backend (one per instance): one with
metrics and the activity log on (the defaults), one with both off (``metrics.enabled: false``,
``activity.enabled: false``), plus the backend directly. Rounds alternate between the three;
each round sends the same number of sequential non-streamed chat requests over one keep-alive
connection and the per-request latency is recorded. Reported: medians, the gateway's added
latency (gateway − direct), and the on/off ratio of that added latency. Loopback only.
"""

from __future__ import annotations

import argparse
import http.client
import json
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the bench package importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.procs import free_port

REPO = Path(__file__).resolve().parents[1]
FAKE = REPO / "tests" / "fakes" / "openai_backend.py"
BODY = json.dumps(
    {"model": "fake", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
).encode()


def wait_ok(port: int, path: str, deadline: float) -> None:
    while time.monotonic() < deadline:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
        try:
            conn.request("GET", path)
            if conn.getresponse().status == 200:
                return
        except OSError:
            pass
        finally:
            conn.close()
        time.sleep(0.05)
    raise RuntimeError(f"port {port} never answered {path}")


def latencies(port: int, count: int) -> list[float]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    out: list[float] = []
    try:
        for _ in range(count):
            started = time.perf_counter()
            conn.request("POST", "/v1/chat/completions", BODY, {"Content-Type": "application/json"})
            resp = conn.getresponse()
            resp.read()
            assert resp.status == 200, resp.status
            out.append(time.perf_counter() - started)
    finally:
        conn.close()
    return out


def start_gateway(tmp: Path, name: str, observe: bool) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    switches = "" if observe else "metrics: {enabled: false}\nactivity: {enabled: false}\n"
    cmd = json.dumps(f'"{sys.executable}" "{FAKE}" --port ${{PORT}}')
    config = tmp / f"{name}.yaml"
    config.write_text(
        f"startPort: {free_port()}\nstateDir: {tmp / name}\n{switches}"
        f"models:\n  fake:\n    cmd: {cmd}\n"
    )
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "modelswap",
            "serve",
            "--config",
            str(config),
            "--listen",
            f"127.0.0.1:{port}",
            "--log-level",
            "warn",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wait_ok(port, "/health", time.monotonic() + 30)
    latencies(port, 3)  # starts the backend
    return proc, port


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--requests", type=int, default=300)
    args = parser.parse_args()
    direct_port = free_port()
    backend = subprocess.Popen(
        [sys.executable, str(FAKE), "--port", str(direct_port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    procs: list[subprocess.Popen[bytes]] = [backend]
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        try:
            wait_ok(direct_port, "/health", time.monotonic() + 30)
            on, on_port = start_gateway(tmp, "on", observe=True)
            off, off_port = start_gateway(tmp, "off", observe=False)
            procs += [on, off]
            samples: dict[str, list[float]] = {"direct": [], "off": [], "on": []}
            ports = {"direct": direct_port, "off": off_port, "on": on_port}
            for _ in range(args.rounds):
                for name, port in ports.items():
                    samples[name] += latencies(port, args.requests)
        finally:
            for proc in procs:
                proc.send_signal(signal.SIGTERM)
            for proc in procs:
                proc.wait(30)
    med = {name: statistics.median(values) * 1000 for name, values in samples.items()}
    added_on = med["on"] - med["direct"]
    added_off = med["off"] - med["direct"]
    total = args.rounds * args.requests
    print(f"{total} requests per target, medians:")
    for name in ("direct", "off", "on"):
        print(f"  {name:<6} {med[name]:7.3f} ms")
    print(f"gateway adds: {added_off:.3f} ms with metrics+activity off, {added_on:.3f} ms on")
    print(f"on/off ratio of the gateway's added latency: {added_on / added_off:.2f}")
    print(f"on/off ratio of the whole request latency:   {med['on'] / med['off']:.3f}")


if __name__ == "__main__":
    main()
