"""The machine behind ``GET /api/hardware``, read once when the gateway starts.

llama-swap's ``HardwareSnapshot`` shape (``architecture``, ``operating_system``, ``cpu``,
``memory``, ``accelerators``) plus modelswap's ``python``, ``gateway`` and ``gpu`` (why there is
none). GPUs come from ``nvidia-smi --query-gpu`` when it is on PATH.
"""

from __future__ import annotations

import os
import platform
import sys
from pathlib import Path
from typing import Any

import psutil

from modelswap import __version__
from modelswap.observe.performance import csv_number, rfc3339, run_nvidia_smi

HW_FIELDS = ("index", "name", "uuid", "driver_version", "memory.total", "power.limit")
MIB = 1024**2


def cpu_model(cpuinfo: str) -> tuple[str | None, str | None, int | None]:
    """(vendor, model, sockets) from /proc/cpuinfo text; unknowns are None."""
    vendor = model = None
    sockets: set[str] = set()
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        key, value = key.strip(), value.strip()
        if key == "vendor_id" and vendor is None:
            vendor = value
        elif key in ("model name", "Model", "Hardware") and model is None and value:
            model = value
        elif key == "physical id":
            sockets.add(value)
    return vendor, model, len(sockets) or None


def parse_accelerators(text: str) -> list[dict[str, Any]]:
    """``nvidia-smi --query-gpu=HW_FIELDS`` output as llama-swap's ``Accelerator`` rows."""
    rows: list[dict[str, Any]] = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != len(HW_FIELDS):
            continue
        index, name, uuid, driver, total, power = parts
        position, total_mib = csv_number(index), csv_number(total)
        rows.append(
            {
                "index": int(position) if position is not None else len(rows),
                "kind": "gpu",
                "vendor": "NVIDIA",
                "model": name or None,
                "uuid": uuid or None,
                "architecture": None,
                "memory": {
                    "kind": "dedicated",
                    "capacity_bytes": int(total_mib * MIB) if total_mib is not None else None,
                },
                "driver": {"name": "nvidia", "version": driver or None},
                "power_limit_watts": csv_number(power),
            }
        )
    return rows


def _os_release() -> dict[str, str]:
    try:
        return platform.freedesktop_os_release()
    except OSError:
        return {}


def _cpuinfo() -> str:
    try:
        return Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        return ""


async def hardware_snapshot(nvidia_smi: str | None, started_at: float) -> dict[str, Any]:
    """What this machine is; ``nvidia_smi`` None: no GPU tool (the snapshot says so)."""
    vendor, model, sockets = cpu_model(_cpuinfo())
    release = _os_release()
    accelerators: list[dict[str, Any]] = []
    reason = "no GPU: nvidia-smi is not on PATH"
    if nvidia_smi:
        out, why = await run_nvidia_smi(nvidia_smi, HW_FIELDS)
        accelerators = parse_accelerators(out) if out is not None else []
        reason = why if out is None else "" if accelerators else "no GPU: nvidia-smi listed none"
    uname = platform.uname()
    return {
        "schema_version": 1,
        "captured_at": rfc3339(started_at),
        "capture": {"scope": "inference_host", "method": "detected", "detector": None},
        "architecture": {"name": platform.machine() or None, "raw_name": uname.machine or None},
        "operating_system": {
            "family": sys.platform,
            "name": release.get("PRETTY_NAME") or release.get("NAME") or uname.system or None,
            "version": release.get("VERSION_ID") or None,
            "kernel": uname.release or None,
        },
        "cpu": {
            "vendor": vendor,
            "model": model or platform.processor() or None,
            "socket_count": sockets,
            "physical_core_count": psutil.cpu_count(logical=False),
            "logical_thread_count": psutil.cpu_count(logical=True),
        },
        "memory": {"capacity_bytes": psutil.virtual_memory().total},
        "accelerators": accelerators,
        "gpu": {"available": bool(accelerators), "reason": reason or None},
        "python": {
            "version": platform.python_version(),
            "implementation": platform.python_implementation(),
        },
        "gateway": {"name": "modelswap", "version": __version__, "pid": os.getpid()},
    }
