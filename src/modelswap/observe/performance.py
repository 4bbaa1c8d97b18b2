"""The system monitor behind ``GET /api/performance``: CPU, memory, network and GPUs.

Sampled every ``performance.every`` seconds while the gateway serves (``Runtime.start`` runs
:meth:`PerformanceMonitor.run`), kept for the last hour in bounded ring buffers and answered in
llama-swap's shape (``enabled``, ``sys_stats``, ``gpu_stats``, its field names), plus fields of
modelswap's own (``cpu_percent``, ``net_recv_bps``, ``gpu``). A sample is a few psutil reads
(``/proc``) and, when ``nvidia-smi`` is on PATH, one short ``nvidia-smi --query-gpu`` run; the
cost is measured by ``bench/perf_sampler.py`` (docs/PERFORMANCE.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import shutil
import time
from collections import deque
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import psutil

RETAINED_SECONDS = 3600.0  # as llama-swap: an hour of samples, whatever the interval
GPU_FIELDS = (
    "index",
    "name",
    "uuid",
    "utilization.gpu",
    "memory.used",
    "memory.total",
    "power.draw",
    "temperature.gpu",
)
GPU_TIMEOUT = 10.0
MIB = 1024**2
Sample = dict[str, Any]


def rfc3339(epoch: float) -> str:
    """Go's RFC 3339 form, as llama-swap writes it: UTC with a ``Z``."""
    stamp = datetime.fromtimestamp(epoch, UTC).isoformat(timespec="milliseconds")
    return stamp.replace("+00:00", "Z")


def nvidia_smi_args(fields: tuple[str, ...]) -> list[str]:
    return [f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"]


def csv_number(text: str) -> float | None:
    """One ``nounits`` CSV value; ``[N/A]``, ``[Not Supported]`` and the like are unknown."""
    try:
        value = float(text.strip())
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def parse_gpu_lines(text: str, epoch: float) -> list[Sample]:
    """``nvidia-smi --query-gpu=GPU_FIELDS`` output as llama-swap's ``GpuStat`` rows (a line
    that does not have every field is skipped; an unknown number is null)."""
    rows: list[Sample] = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != len(GPU_FIELDS):
            continue
        index, name, uuid, util, used, total, power, temp = parts
        position = csv_number(index)
        used_mb, total_mb = csv_number(used), csv_number(total)
        rows.append(
            {
                "timestamp": rfc3339(epoch),
                "t": epoch,
                "id": int(position) if position is not None else len(rows),
                "name": name,
                "uuid": uuid,
                "gpu_util_pct": csv_number(util),
                "mem_used_mb": int(used_mb) if used_mb is not None else None,
                "mem_total_mb": int(total_mb) if total_mb is not None else None,
                "mem_util_pct": round(used_mb / total_mb * 100, 1)
                if used_mb is not None and total_mb
                else None,
                "power_draw_w": csv_number(power),
                "temp_c": csv_number(temp),
            }
        )
    return rows


async def run_nvidia_smi(binary: str, fields: tuple[str, ...]) -> tuple[str | None, str]:
    """(stdout, "") when it answered, else (None, why): its own first line of error."""
    try:
        proc = await asyncio.create_subprocess_exec(
            binary,
            *nvidia_smi_args(fields),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
    except OSError as exc:
        return None, f"{binary} could not run: {exc}"
    try:
        async with asyncio.timeout(GPU_TIMEOUT):
            out, err = await proc.communicate()
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()  # the child we started, by its pid
        await proc.wait()
        return None, f"nvidia-smi did not answer within {GPU_TIMEOUT:.0f} s"
    if proc.returncode != 0:
        first = (err or out).decode("utf-8", "replace").strip().splitlines()
        return None, f"nvidia-smi failed: {first[0] if first else f'exit {proc.returncode}'}"
    return out.decode("utf-8", "replace"), ""


class PerformanceMonitor:
    """Owns the ring buffers; ``every`` is read at each tick, so a reload applies at once."""

    def __init__(
        self,
        every: Callable[[], float],
        *,
        enabled: Callable[[], bool] = lambda: True,
        nvidia_smi: str | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._every = every
        self._enabled = enabled
        self._clock = clock
        self.nvidia_smi = nvidia_smi if nvidia_smi is not None else shutil.which("nvidia-smi")
        self.gpu_reason = "" if self.nvidia_smi else "no GPU: nvidia-smi is not on PATH"
        self.sys_stats: deque[Sample] = deque(maxlen=self._capacity())
        self.gpu_stats: deque[list[Sample]] = deque(maxlen=self._capacity())
        self._last_net: tuple[float, int, int] | None = None
        self.samples = 0

    def _capacity(self) -> int:
        return max(1, math.ceil(RETAINED_SECONDS / max(self._every(), 1.0)))

    async def run(self) -> None:
        """Sample until cancelled (the runtime's close)."""
        psutil.cpu_percent(percpu=True)  # the first call only starts psutil's CPU clock
        while True:
            await asyncio.sleep(self._every() if self.samples else min(self._every(), 1.0))
            if self._enabled():
                await self.sample()

    async def sample(self) -> None:
        capacity = self._capacity()
        if capacity != self.sys_stats.maxlen:
            self.sys_stats = deque(self.sys_stats, maxlen=capacity)
            self.gpu_stats = deque(self.gpu_stats, maxlen=capacity)
        now = round(self._clock(), 3)  # to the millisecond, as the RFC 3339 text
        self.sys_stats.append(self.system_sample(now))
        if self.nvidia_smi:
            out, why = await run_nvidia_smi(self.nvidia_smi, GPU_FIELDS)
            rows = parse_gpu_lines(out, now) if out is not None else []
            if out is not None and not rows:
                why = "no GPU: nvidia-smi listed none"
            self.gpu_reason = why
            if rows:
                self.gpu_stats.append(rows)
        self.samples += 1

    def system_sample(self, now: float) -> Sample:
        """llama-swap's ``SysStat`` fields, plus the whole CPU and the network's bytes/s."""
        per_core = psutil.cpu_percent(percpu=True)
        memory = psutil.virtual_memory()
        swap = psutil.swap_memory()
        load = psutil.getloadavg()
        nics = psutil.net_io_counters(pernic=True)
        recv = sum(c.bytes_recv for n, c in nics.items() if n != "lo")
        sent = sum(c.bytes_sent for n, c in nics.items() if n != "lo")
        recv_bps = sent_bps = None
        if self._last_net is not None and now > self._last_net[0]:
            span = now - self._last_net[0]
            recv_bps = max(0.0, (recv - self._last_net[1]) / span)
            sent_bps = max(0.0, (sent - self._last_net[2]) / span)
        self._last_net = (now, recv, sent)
        return {
            "timestamp": rfc3339(now),
            "t": now,
            "cpu_util_per_core": per_core,
            "cpu_percent": round(sum(per_core) / len(per_core), 1) if per_core else None,
            "mem_total_mb": memory.total // MIB,
            "mem_used_mb": (memory.total - memory.available) // MIB,
            "mem_free_mb": memory.free // MIB,
            "mem_available_mb": memory.available // MIB,
            "swap_total_mb": swap.total // MIB,
            "swap_used_mb": swap.used // MIB,
            "load_avg_1": load[0],
            "load_avg_5": load[1],
            "load_avg_15": load[2],
            "net_io": [
                {"name": n, "bytes_recv": c.bytes_recv, "bytes_sent": c.bytes_sent}
                for n, c in sorted(nics.items())
            ],
            "net_recv_bps": recv_bps,
            "net_sent_bps": sent_bps,
        }

    def view(self, after: float | None = None) -> dict[str, Any]:
        """The buffers (samples after ``after``, unix seconds, when given), oldest first."""
        # Times are kept to the millisecond: one within half of it is the same moment.
        floor = -math.inf if after is None else after + 0.0005
        sys_rows = [s for s in self.sys_stats if s["t"] > floor]
        gpu_rows = [g for snap in self.gpu_stats for g in snap if g["t"] > floor]
        return {
            "enabled": self._enabled(),
            "every": self._every(),
            "retained_seconds": RETAINED_SECONDS,
            "sys_stats": sys_rows,
            "gpu_stats": gpu_rows,
            "gpu": {
                "available": bool(self.gpu_stats) and not self.gpu_reason,
                "tool": "nvidia-smi" if self.nvidia_smi else None,
                "reason": self.gpu_reason or None,
            },
        }
