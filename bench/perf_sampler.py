"""What the system monitor (GET /api/performance) costs an idle gateway.

    .venv/bin/python bench/perf_sampler.py [--seconds 60]

Four ``modelswap serve`` instances side by side, idle (one configured model, never loaded),
for the same ``--seconds``: the monitor off (``performance: {disabled: true}``), at the default
interval (5 s) without a GPU tool, at 5 s with a fake ``nvidia-smi`` on PATH
(tests/fakes/nvidia_smi.py: the spawn and the parsing, not a real driver's own time), and at
the minimum interval (1 s) with it. Reported per instance: the gateway's own CPU time over the
window (every thread's scheduler time, bench/procs.cpu_seconds) as a share of one core, the
difference to the instance with the monitor off, and the CPU time of the ``nvidia-smi`` runs it
reaped (children). Loopback only; each instance is stopped by its own pid.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the bench package importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import psutil

from bench.procs import cpu_seconds, free_port, http_status, stop

REPO = Path(__file__).resolve().parents[1]
FAKE = REPO / "tests" / "fakes" / "openai_backend.py"
VARIANTS = {
    "off": ("performance: {disabled: true}\n", False),
    "5s, no GPU tool": ("performance: {every: 5s}\n", False),
    "5s, nvidia-smi": ("performance: {every: 5s}\n", True),
    "1s, nvidia-smi": ("performance: {every: 1s}\n", True),
}


def start(work: Path, name: str, top: str, gpu: bool) -> tuple[subprocess.Popen[bytes], int]:
    directory = work / name.replace(" ", "").replace(",", "-")
    directory.mkdir()
    port = free_port()
    config = directory / "config.yaml"
    config.write_text(
        f"stateDir: {directory / 'state'}\n{top}models:\n"
        f"  idle:\n    cmd: {sys.executable} {FAKE} --port ${{PORT}}\n"
    )
    env = {**os.environ, "PATH": f"/usr/bin{os.pathsep}/bin"}
    if gpu:
        sys.path.insert(0, str(REPO))
        from tests.fakes import nvidia_smi

        env["PATH"] = f"{nvidia_smi.install(directory)}{os.pathsep}{env['PATH']}"
    listen = f"127.0.0.1:{port}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "modelswap", "serve", "--config", str(config), "--listen", listen],
        cwd=REPO,
        env=env,
        stdout=(directory / "log").open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    return proc, port


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=60.0)
    args = parser.parse_args()
    results: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        running = {name: start(Path(tmp), name, *v) for name, v in VARIANTS.items()}
        try:
            deadline = time.monotonic() + 60
            for _proc, port in running.values():
                while http_status(port, "/health") != 200:
                    if time.monotonic() > deadline:
                        raise RuntimeError("a gateway did not become healthy")
                    time.sleep(0.1)
            time.sleep(2.0)  # past startup work (containment probe, leftovers, first sample)
            procs = {name: psutil.Process(proc.pid) for name, (proc, _) in running.items()}
            before = {n: (cpu_seconds([p]), p.cpu_times()) for n, p in procs.items()}
            started = time.monotonic()
            time.sleep(args.seconds)
            span = time.monotonic() - started
            for name, proc in procs.items():
                own = cpu_seconds([proc]) - before[name][0]
                times = proc.cpu_times()
                children = (times.children_user + times.children_system) - (
                    before[name][1].children_user + before[name][1].children_system
                )
                results[name] = {
                    "gateway_core_pct": 100 * own / span,
                    "children_core_pct": 100 * children / span,
                }
        finally:
            for proc, _port in running.values():
                stop(proc)
    base = results["off"]["gateway_core_pct"]
    print(f"idle gateway CPU over {args.seconds:.0f} s (share of one core)")
    print(f"{'monitor':<18} {'gateway':>9} {'vs off':>9} {'nvidia-smi runs':>16}")
    for name, row in results.items():
        extra = row["gateway_core_pct"] - base
        print(
            f"{name:<18} {row['gateway_core_pct']:>8.3f}% {extra:>+8.3f}% "
            f"{row['children_core_pct']:>15.3f}%"
        )
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
