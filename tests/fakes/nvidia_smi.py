"""A fake ``nvidia-smi`` for the system monitor's tests: a real program that answers
``--query-gpu=FIELDS --format=csv,noheader,nounits`` with one line per fake GPU.

Tests put a one-line ``nvidia-smi`` shell script on PATH (:func:`install`) that runs this file
with its own flags, then the arguments modelswap passes:

    python tests/fakes/nvidia_smi.py --gpus 2 --power '[N/A]' --query-gpu=index,name ...

``--fail TEXT`` prints TEXT on stderr and exits 9 (a driver that is not loaded); ``--gpus 0``
prints nothing (no device). Each call is appended to ``--calls FILE`` when given.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

VALUES = {
    "index": lambda i: str(i),
    "name": lambda i: f"NVIDIA Fake {i}",
    "uuid": lambda i: f"GPU-fake-{i:04d}",
    "utilization.gpu": lambda i: str(37 + i),
    "memory.used": lambda i: str(1024 * (i + 1)),
    "memory.total": lambda i: "24576",
    "temperature.gpu": lambda i: str(55 + i),
    "driver_version": lambda i: "550.54.15",
    "power.limit": lambda i: "350.00",
}


def install(directory: Path, *flags: str) -> Path:
    """Write ``directory/nvidia-smi`` running this fake with ``flags``; returns the directory."""
    script = directory / "nvidia-smi"
    quoted = " ".join(f"'{f}'" for f in flags)
    script.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{__file__}" {quoted} "$@"\n')
    script.chmod(0o755)
    return directory


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--gpus", type=int, default=1)
    parser.add_argument("--power", default="123.45", help="power.draw, e.g. '[N/A]'")
    parser.add_argument("--fail", default=None)
    parser.add_argument("--calls", type=Path, default=None)
    parser.add_argument("--query-gpu", dest="query", default="")
    parser.add_argument("--format", default="")
    args = parser.parse_args()
    if args.calls is not None:
        with args.calls.open("a") as f:
            f.write(f"--query-gpu={args.query} --format={args.format}\n")
    if args.fail:
        print(args.fail, file=sys.stderr)
        return 9
    if args.format != "csv,noheader,nounits":
        print("this fake speaks only --format=csv,noheader,nounits", file=sys.stderr)
        return 2
    fields = [f for f in args.query.split(",") if f]
    for i in range(args.gpus):
        row = [
            args.power if f == "power.draw" else VALUES.get(f, lambda i: "[N/A]")(i) for f in fields
        ]
        print(", ".join(row))
    return 0


if __name__ == "__main__":
    sys.exit(main())
