"""A swap A→B under load, and its receipt: where the time went while A was busy.

    .venv/bin/python bench/swap_load.py [--rounds 3] [--clients 8] [--stop-delay 0.5]

A serves ``--clients`` paced streams in a loop (the fake backend, ``--tps 50 --tokens 25``:
0.5 s each); then one request for B arrives. B's swap waits for A's streams in flight to end
(drain), stops A (``--stop-delay``: A takes that long to exit), and starts B (the fake with
``--load-delay 0.3`` that reads SmolLM2's GGUF while loading, when installed, so the swap also
prefetches it). Per round: B's request → first byte as the client sees it, and the receipt of
the ``swap.done`` event (drain, stop, start, spawn → listening, listening → ready, prefetch);
A's clients stop after B has answered. Loopback only; every wait is bounded.
"""

from __future__ import annotations

import argparse
import http.client
import json
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

from bench.prefetch import Receipts, chat
from bench.procs import free_port, http_post, http_status, start_port, stop, wait_until
from bench.targets import llamacpp_gguf

FAKE = Path(__file__).resolve().parents[1] / "tests" / "fakes" / "openai_backend.py"
RECEIPT_KEYS = (
    "drain_seconds",
    "stop_seconds",
    "start_seconds",
    "spawn_to_listening_seconds",
    "listening_to_ready_seconds",
    "total_seconds",
)


def _stream(port: int, model: str) -> str | None:
    """One streamed answer from ``model``: None when it came whole, else what went wrong."""
    body = json.dumps(
        {"model": model, "stream": True, "messages": [{"role": "user", "content": "x"}]}
    )
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    try:
        conn.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        data = resp.read()
        if resp.status == 200 and b"[DONE]" in data:
            return None
        return f"HTTP {resp.status}: {data[:200]!r}"
    except OSError as exc:
        return f"{type(exc).__name__}: {exc}"
    finally:
        conn.close()


def _client(
    port: int, running: threading.Event, served: list[int], failed: list[str], i: int
) -> None:
    """Stream from A until ``running`` is cleared; a failure is noted, then a pause (a client
    that retried at once would spin while A fails, and starve the machine)."""
    while running.is_set():
        error = _stream(port, "a")
        if error is None:
            served[i] += 1
        else:
            failed.append(error)
            time.sleep(0.1)


def start_gateway(tmp: Path, stop_delay: float) -> tuple[subprocess.Popen[bytes], int]:
    def cmd(*flags: str) -> str:
        argv = [sys.executable, str(FAKE), "--port", "${PORT}", *flags]
        return json.dumps(" ".join(json.dumps(x) for x in argv))

    weights = llamacpp_gguf()
    b_flags = ["--load-delay", "0.3", *(["--weights", weights] if weights else [])]
    config = tmp / "swap.yaml"
    config.write_text(
        f"startPort: {start_port()}\nstateDir: {tmp}/state\nmodels:\n"
        f"  a:\n    cmd: {cmd('--tps', '50', '--tokens', '25', '--stop-delay', str(stop_delay))}\n"
        f"  b:\n    cmd: {cmd(*b_flags)}\n"
    )
    port = free_port()
    log = (tmp / "gateway.log").open("ab")
    gateway = subprocess.Popen(
        [sys.executable, "-m", "modelswap", "serve", "--config", str(config),
         "--listen", f"127.0.0.1:{port}"],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    wait_until(lambda: http_status(port, "/health") == 200, "the gateway to start", timeout=60)
    return gateway, port


def measure(rounds: int = 3, clients: int = 8, stop_delay: float = 0.5) -> dict[str, Any]:
    out: dict[str, Any] = {"rounds": [], "clients": clients, "stop_delay": stop_delay}
    with tempfile.TemporaryDirectory(prefix="modelswap-swap-") as tmp:
        gateway, port = start_gateway(Path(tmp), stop_delay)
        receipts = Receipts(port)
        try:
            for _ in range(rounds):
                http_post(port, "/api/models/unload")
                chat(port, "a")  # a is running
                running = threading.Event()
                running.set()
                served = [0] * clients
                failed: list[str] = []
                threads = [
                    threading.Thread(target=_client, args=(port, running, served, failed, i))
                    for i in range(clients)
                ]
                for thread in threads:
                    thread.start()
                time.sleep(0.25)  # a is busy: every client is mid-stream
                seen = len(receipts.events)
                first_byte = chat(port, "b")
                receipt = receipts.next_for("b", seen)
                running.clear()
                for thread in threads:
                    thread.join(300)
                out["rounds"].append(
                    {"first_byte": first_byte, "receipt": receipt, "a_streams": sum(served),
                     "a_failed": len(failed), "a_errors": failed[:3]}
                )  # fmt: skip
        finally:
            receipts.close()
            stop(gateway)
    return out


def _fmt(values: list[float]) -> str:
    return f"{statistics.median(values):.3f} ({min(values):.3f}–{max(values):.3f})"


def render(result: dict[str, Any]) -> list[str]:
    rounds = result["rounds"]
    lines = [
        f"{len(rounds)} rounds; A serves {result['clients']} paced streams (0.5 s each) in a "
        f"loop and takes {result['stop_delay']:g} s to stop; B (fake, 0.3 s load) is asked "
        "for mid-stream. Seconds, median (min–max):",
        "",
        "| B's request → first byte | " + " | ".join(k.removesuffix("_seconds").replace("_", " ")
                                                   for k in RECEIPT_KEYS) + " |",
        "|---" * (len(RECEIPT_KEYS) + 1) + "|",
    ]  # fmt: skip
    cells = [_fmt([r["first_byte"] for r in rounds])]
    for key in RECEIPT_KEYS:
        values = [r["receipt"][key] for r in rounds if key in r["receipt"]]
        cells.append(_fmt(values) if values else "—")
    lines.append("| " + " | ".join(cells) + " |")
    failed = sum(r["a_failed"] for r in rounds)
    errors = [e for r in rounds for e in r.get("a_errors", [])]
    first = f" (first: {errors[0]})" if errors else ""
    lines += [
        "",
        f"A's streams: {sum(r['a_streams'] for r in rounds)} served, {failed} failed{first}. "
        "The last round's receipt (`swap.done`):",
        "",
        "```json",
        json.dumps(rounds[-1]["receipt"], indent=1),
        "```",
    ]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--stop-delay", type=float, default=0.5)
    args = parser.parse_args()
    print("\n".join(render(measure(args.rounds, args.clients, args.stop_delay))))


if __name__ == "__main__":
    main()
