"""GPU memory: ``--gpu 32GiB`` as given, or the first GPU's total from ``nvidia-smi``.

Detection is bounded (2 s) and optional: no ``nvidia-smi``, a failure or junk output all mean
"unknown", and the planner then gives sizes without a verdict.
"""

from __future__ import annotations

import shutil
import subprocess

MIB = 1024**2
TIMEOUT = 2.0


def parse_gpu(text: str) -> int:
    """Bytes from ``32GiB``, ``24 GB``, ``81559MiB`` or a plain number of bytes."""
    # Here, not at the top: importing modelswap.config loads the whole config (pydantic, YAML),
    # which `modelswap plan FILE` and `modelswap diagnose` (whose parser names plan's flags)
    # do not need.
    from modelswap.config.scheduling import parse_size

    value = parse_size(text.strip())
    if value <= 0:
        raise ValueError("GPU memory must be positive")
    return value


def detect_gpu() -> tuple[int, str] | None:
    """``(bytes, source)`` of GPU 0 as nvidia-smi reports its total memory, else None."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        done = subprocess.run(
            [exe, "--query-gpu=memory.total,name", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    first = done.stdout.strip().splitlines()[0] if done.stdout.strip() else ""
    total, _, name = first.partition(",")
    try:
        mib = int(float(total))
    except ValueError:
        return None
    if done.returncode != 0 or mib <= 0:
        return None
    return mib * MIB, f"nvidia-smi: {name.strip() or 'GPU 0'}"
