"""What an idle gateway and each helper process it starts cost in memory.

``python -m modelswap serve`` with one placeholder model (never started), measured after it has
been idle SECONDS: per process its RSS, PSS and USS (psutil's ``memory_full_info``). USS is the
memory the process alone holds, given back when it exits, so it is the helper's cost; RSS counts
the interpreter's shared pages in every process again; PSS shares them out, so it moves with
whatever else on the machine maps the same files.

    .venv/bin/python -m bench.helper_footprint [SECONDS]
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from bench.procs import free_port, http_status, stop
from bench.targets import PYTHON, fake_backend_cmd

MIB = 1024 * 1024


def main() -> None:
    idle = float(sys.argv[1]) if len(sys.argv) > 1 else 8.0
    port = free_port()
    with tempfile.TemporaryDirectory() as workdir:
        config = Path(workdir) / "config.yaml"
        cmd = " ".join(fake_backend_cmd("${PORT}", "placeholder"))
        config.write_text(json.dumps({"models": {"placeholder": {"cmd": cmd}}}))
        argv = [PYTHON, "-m", "modelswap", "serve", "--config", str(config)]
        proc = subprocess.Popen(
            [*argv, "--listen", f"127.0.0.1:{port}"],
            cwd=workdir,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            deadline = time.monotonic() + 60
            while http_status(port, "/health", timeout=1) != 200:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit("the gateway did not start")
                time.sleep(0.05)
            time.sleep(idle)
            main_process = psutil.Process(proc.pid)
            totals = [0, 0, 0]
            for process in [main_process, *main_process.children(recursive=True)]:
                memory = process.memory_full_info()
                sizes = (memory.rss, memory.pss, memory.uss)
                totals = [a + b for a, b in zip(totals, sizes, strict=True)]
                shown = " ".join(f"{s / MIB:6.1f}" for s in sizes)
                print(f"{process.pid:>8} {shown}  {' '.join(process.cmdline()[1:4])[:70]}")
            print(f"{'total':>8} {' '.join(f'{s / MIB:6.1f}' for s in totals)}  (MiB: RSS PSS USS)")
        finally:
            stop(proc)


if __name__ == "__main__":
    main()
