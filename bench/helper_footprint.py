"""What an idle gateway and each helper process it starts cost in memory.

``python -m modelswap serve`` with one placeholder model (never started), measured after it has
been idle SECONDS. Per process: RSS, PSS and USS (psutil's ``memory_full_info``). Per helper: the
memory its processes alone hold, the pages no process outside them maps (``/proc/PID/pagemap``
against ``/proc/kpagecount``; root only), which is what the system gets back when it exits. USS
would miss the pages the spare keeper shares, copy-on-write, with the process it forked; RSS
counts the interpreter's shared pages in every process again.

    .venv/bin/python -m bench.helper_footprint [SECONDS]
"""

from __future__ import annotations

import collections
import json
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from bench.procs import free_port, http_status, stop
from bench.targets import PYTHON, fake_backend_cmd

MIB = 1024 * 1024
PAGE = 4096
PRESENT = 1 << 63
PFN_MASK = (1 << 55) - 1


def _frames(pid: int) -> list[int]:
    """The page frames ``pid`` maps that are in memory."""
    found: list[int] = []
    with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/pagemap", "rb") as pagemap:
        for line in maps:
            start, end = (int(part, 16) for part in line.split()[0].split("-"))
            if line.rstrip().endswith("[vsyscall]"):
                continue
            pagemap.seek(start // PAGE * 8)
            for (entry,) in struct.iter_unpack("<Q", pagemap.read((end - start) // PAGE * 8)):
                if entry & PRESENT:
                    found.append(entry & PFN_MASK)
    return found


def held_alone(pids: list[int]) -> float | None:
    """MiB of pages that only ``pids`` map (None without root)."""
    tally: collections.Counter[int] = collections.Counter()
    try:
        for pid in pids:
            tally.update(_frames(pid))
        with open("/proc/kpagecount", "rb") as counts:
            alone = 0
            for frame, mapped_here in tally.items():
                counts.seek(frame * 8)
                alone += struct.unpack("<Q", counts.read(8))[0] <= mapped_here
    except PermissionError:
        return None
    return alone * PAGE / MIB


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
            gateway = psutil.Process(proc.pid)
            helpers = gateway.children(recursive=True)
            print(f"{'pid':>8}    RSS    PSS    USS  (MiB)")
            for process in [gateway, *helpers]:
                memory = process.memory_full_info()
                sizes = " ".join(f"{s / MIB:6.1f}" for s in (memory.rss, memory.pss, memory.uss))
                print(f"{process.pid:>8} {sizes}  {' '.join(process.cmdline()[1:4])[:70]}")
            kinds = {
                "gateway": [proc.pid],
                "orphan watchdog": [p.pid for p in helpers if "reaper" in " ".join(p.cmdline())],
                "spare keeper and its fork": [
                    p.pid for p in helpers if "keeper_program" in " ".join(p.cmdline())
                ],
                "gateway and its helpers": [proc.pid, *(p.pid for p in helpers)],
            }
            for name, pids in kinds.items():
                alone = held_alone(pids)
                shown = "? (needs root)" if alone is None else f"{alone:.1f} MiB"
                print(f"held by the {name} alone: {shown}")
        finally:
            stop(proc)


if __name__ == "__main__":
    main()
