"""Issue 40's opening measurement, as a script: two keys on one model with
``concurrencyLimit: 1`` (the fake backend streams each answer in ~100 ms). Key ``person``
keeps one request in flight, key ``harness`` twelve; for ``--seconds`` both loop. A fair
share is half the answers each.

    .venv/bin/python bench/key_share.py [--seconds 10] [--variant NAME=SRC ...]

Each variant is a ``src/`` tree (``git archive REV src``) run as the gateway, one after
another in the same run: e.g. the tree before the fair queue was wired beside this one.
Loopback only; every request has a timeout and the loop a deadline.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the bench package importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.procs import free_port, http_status, start_port, stop, wait_until

REPO = Path(__file__).resolve().parents[1]
FAKE = REPO / "tests" / "fakes" / "openai_backend.py"
KEYS = {"person": "sk-bench-person-0001", "harness": "sk-bench-harness-0001"}
IN_FLIGHT = {"person": 1, "harness": 12}


def _config(tmp: Path) -> Path:
    argv = [sys.executable, str(FAKE), "--port", "${PORT}", "--tps", "100", "--tokens", "10"]
    config = {
        "startPort": start_port(),
        "stateDir": str(tmp / "state"),
        "apiKeys": [
            {"key": secret, "name": name, "scopes": ["inference", "read"]}
            for name, secret in KEYS.items()
        ],
        "models": {"m": {"cmd": " ".join(json.dumps(x) for x in argv), "concurrencyLimit": 1}},
    }
    path = tmp / "share.yaml"
    path.write_text(json.dumps(config))  # JSON is YAML
    return path


def _ask(port: int, secret: str) -> bool:
    messages = [{"role": "user", "content": "x"}]
    body = json.dumps({"model": "m", "stream": True, "messages": messages})
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    try:
        conn.request(
            "POST",
            "/v1/chat/completions",
            body,
            {"Content-Type": "application/json", "Authorization": f"Bearer {secret}"},
        )
        resp = conn.getresponse()
        return resp.status == 200 and b"[DONE]" in resp.read()
    except OSError:
        return False
    finally:
        conn.close()


def measure(src: Path | None, seconds: float) -> dict[str, int]:
    """Answers per key in ``seconds`` with the gateway from ``src`` (None: this tree)."""
    with tempfile.TemporaryDirectory(prefix="modelswap-share-") as tmp_name:
        tmp = Path(tmp_name)
        port = free_port()
        env = dict(os.environ)
        if src is not None:
            env["PYTHONPATH"] = str(src)
        log = (tmp / "gateway.log").open("ab")
        gateway = subprocess.Popen(
            [sys.executable, "-m", "modelswap", "serve", "--config", str(_config(tmp)),
             "--listen", f"127.0.0.1:{port}"],
            stdout=log, stderr=subprocess.STDOUT, env=env,
        )  # fmt: skip
        try:
            wait_until(lambda: http_status(port, "/health") == 200, "the gateway", timeout=60)
            _ask(port, KEYS["person"])  # the model started before the clock runs
            answered = {name: 0 for name in KEYS}
            lock = threading.Lock()
            deadline = time.monotonic() + seconds

            def loop(name: str) -> None:
                while time.monotonic() < deadline:
                    if _ask(port, KEYS[name]) and time.monotonic() < deadline:
                        with lock:
                            answered[name] += 1

            threads = [
                threading.Thread(target=loop, args=(name,), daemon=True)
                for name, count in IN_FLIGHT.items()
                for _ in range(count)
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(timeout=seconds + 130)
            return answered
        finally:
            stop(gateway)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--variant", action="append", default=[], metavar="NAME=SRC")
    args = parser.parse_args()
    runs: list[tuple[str, Path | None]] = [("this tree", None)]
    runs += [(v.split("=", 1)[0], Path(v.split("=", 1)[1])) for v in args.variant]
    for name, src in runs:
        got = measure(src, args.seconds)
        total = sum(got.values()) or 1
        print(
            f"{name}: person {got['person']} of {total} answers "
            f"({100 * got['person'] / total:.0f} %), harness {got['harness']}"
        )


if __name__ == "__main__":
    main()
