"""What modelswap learns about each model by running it: start times and peak memory.

Remembered in ``<stateDir>/stats.json`` so the eviction policy knows, from the first request
after a restart, what each model costs to start and how much memory it holds. GPU memory comes
from ``nvidia-smi`` where present (per process, summed over the model's process tree); host
memory is the tree's resident set size.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import shutil
import statistics
from collections.abc import Callable, Mapping
from pathlib import Path

import psutil

from modelswap.statefile import write_json
from modelswap.states import ProcessState

log = logging.getLogger(__name__)

KEEP_STARTS = 20
MIN_PROMPT_SAMPLE = 32  # uncached prompt tokens below which a request's prefill is not timed
DEFAULT_START_SECONDS = 10.0  # the cost of a model never started here yet
SAMPLE_SECONDS = 2.0
SAVE_DELAY = 0.5
NVIDIA_TIMEOUT = 5.0


class StatsStore:
    """Per model: the last start times (start -> ready, start -> its port listening, and its
    port listening -> ready) and the peak memory per resource (bytes)."""

    def __init__(self, path: Path | None) -> None:
        self._path = path
        self._starts: dict[str, list[float]] = {}
        self._listens: dict[str, list[float]] = {}
        self._listen_to_ready: dict[str, list[float]] = {}
        self._peaks: dict[str, dict[str, int]] = {}
        self._prompt_rates: dict[str, list[float]] = {}  # uncached prompt tokens per second
        self._held: dict[str, int | None] = {}  # tokens each running model's slots hold
        self._save_timer: asyncio.TimerHandle | None = None
        self._load()

    def _load(self) -> None:
        if self._path is None or not self._path.is_file():
            return
        try:
            data = json.loads(self._path.read_text())
            for model, entry in data.get("models", {}).items():
                starts = [float(x) for x in entry.get("start_seconds", [])][-KEEP_STARTS:]
                peaks = {str(k): int(v) for k, v in entry.get("peak_bytes", {}).items()}
                self._starts[model], self._peaks[model] = starts, peaks
                listens = [float(x) for x in entry.get("listen_seconds", [])][-KEEP_STARTS:]
                if listens:
                    self._listens[model] = listens
                after = [float(x) for x in entry.get("listen_to_ready_seconds", [])]
                if after:
                    self._listen_to_ready[model] = after[-KEEP_STARTS:]
                rates = [float(x) for x in entry.get("prompt_tokens_per_second", [])]
                if rates:
                    self._prompt_rates[model] = rates[-KEEP_STARTS:]
        except (OSError, ValueError, TypeError, AttributeError) as exc:
            log.warning("ignoring unreadable %s: %s", self._path, exc)

    def save_soon(self) -> None:
        """Save within SAVE_DELAY, off the path of what runs now (a start's READY is followed
        by the requests that waited for it; a file write there is a millisecond of theirs)."""
        if self._path is None or self._save_timer is not None:
            return
        self._save_timer = asyncio.get_running_loop().call_later(SAVE_DELAY, self.save)

    def save(self) -> None:
        if self._save_timer is not None:
            self._save_timer.cancel()
            self._save_timer = None
        if self._path is None:
            return
        models: dict[str, dict[str, object]] = {}
        known = set(self._starts) | set(self._peaks) | set(self._listens) | set(self._prompt_rates)
        for m in sorted(known):
            entry: dict[str, object] = {"start_seconds": self._starts.get(m, [])}
            if m in self._listens:
                entry["listen_seconds"] = self._listens[m]
            if m in self._listen_to_ready:
                entry["listen_to_ready_seconds"] = self._listen_to_ready[m]
            entry["peak_bytes"] = self._peaks.get(m, {})
            if m in self._prompt_rates:
                entry["prompt_tokens_per_second"] = self._prompt_rates[m]
            models[m] = entry
        data = {"version": 1, "models": models}
        try:
            write_json(self._path, data, prefix=".stats-")
        except OSError as exc:
            log.warning("cannot save %s: %s", self._path, exc)

    def record_start(self, model: str, seconds: float) -> None:
        starts = self._starts.setdefault(model, [])
        starts.append(round(seconds, 3))
        del starts[:-KEEP_STARTS]

    def record_listen(self, model: str, seconds: float, to_ready: float | None = None) -> None:
        """A start's seconds to its port listening, and (``to_ready``) from then to ready."""
        for history, value in ((self._listens, seconds), (self._listen_to_ready, to_ready)):
            if value is not None:
                values = history.setdefault(model, [])
                values.append(round(value, 4))
                del values[:-KEEP_STARTS]

    def readiness(self, model: str, last: int) -> tuple[list[float], list[float]]:
        """The ``last`` starts' seconds to listening, and from listening to ready: where the
        listen watcher looks hardest in the next start (``supervisor/listening.py``)."""
        return self._listens.get(model, [])[-last:], self._listen_to_ready.get(model, [])[-last:]

    def record_prompt(self, model: str, tokens: int, seconds: float) -> None:
        """One request's prefill: ``tokens`` prompt tokens not taken from the cache, in
        ``seconds`` (its time to first token). Short prompts say little and are skipped."""
        if tokens < MIN_PROMPT_SAMPLE or seconds <= 0:
            return
        rates = self._prompt_rates.setdefault(model, [])
        rates.append(round(tokens / seconds, 1))
        del rates[:-KEEP_STARTS]

    def prompt_rate(self, model: str) -> float | None:
        """Median prompt tokens per second of the last requests (None: none measured)."""
        rates = self._prompt_rates.get(model)
        return statistics.median(rates) if rates else None

    def record_held(self, model: str, tokens: int | None) -> None:
        """The tokens ``model``'s slots hold now (None: unknown). Not kept across restarts:
        the slots die with the process."""
        self._held[model] = tokens

    def held(self, model: str) -> int | None:
        return self._held.get(model)

    def median_start(self, model: str) -> float:
        starts = self._starts.get(model)
        return statistics.median(starts) if starts else DEFAULT_START_SECONDS

    def record_peak(self, model: str, resource: str, used: int) -> bool:
        """Remember ``used`` if it is a new peak; True when it was."""
        peaks = self._peaks.setdefault(model, {})
        if used > peaks.get(resource, 0):
            peaks[resource] = used
            return True
        return False

    def peaks(self, model: str) -> Mapping[str, int]:
        return dict(self._peaks.get(model, {}))


def tree_rss(pid: int) -> int:
    """Resident bytes of ``pid`` and all its descendants (0 if it is gone)."""
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return 0
    total = 0
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            total += proc.memory_info().rss
    return total


def parse_gpu_index(text: str) -> dict[str, str]:
    """``nvidia-smi --query-gpu=index,uuid --format=csv,noheader``: uuid → "gpu<index>"."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 2 and parts[0].isdigit():
            out[parts[1]] = f"gpu{parts[0]}"
    return out


def parse_compute_apps(text: str, gpus: Mapping[str, str]) -> dict[int, dict[str, int]]:
    """``nvidia-smi --query-compute-apps=gpu_uuid,pid,used_memory --format=csv,noheader,
    nounits``: pid → {"gpuN": bytes} (used_memory is in MiB)."""
    out: dict[int, dict[str, int]] = {}
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 3 or not parts[1].isdigit() or not parts[2].isdigit():
            continue
        resource = gpus.get(parts[0])
        if resource is None:
            continue
        per = out.setdefault(int(parts[1]), {})
        per[resource] = per.get(resource, 0) + int(parts[2]) * 1024 * 1024
    return out


async def _run(*argv: str) -> str:
    proc = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL
    )
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), NVIDIA_TIMEOUT)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        return ""
    return out.decode(errors="replace")


async def gpu_usage_by_pid() -> dict[int, dict[str, int]]:
    """GPU memory per process from nvidia-smi; empty where there is no NVIDIA GPU."""
    if shutil.which("nvidia-smi") is None:
        return {}
    gpus = parse_gpu_index(
        await _run("nvidia-smi", "--query-gpu=index,uuid", "--format=csv,noheader")
    )
    apps = await _run(
        "nvidia-smi",
        "--query-compute-apps=gpu_uuid,pid,used_memory",
        "--format=csv,noheader,nounits",
    )
    return parse_compute_apps(apps, gpus)


Snapshot = tuple[ProcessState, int | None]  # a model's state and backend pid


class MemorySampler:
    """Every SAMPLE_SECONDS, the peak memory of each ready model's process tree."""

    def __init__(
        self,
        stats: StatsStore,
        processes: Callable[[], Mapping[str, tuple[ProcessState, int | None]]],
    ) -> None:
        self._stats = stats
        self._processes = processes

    async def run(self) -> None:
        while True:
            await self.sample()
            await asyncio.sleep(SAMPLE_SECONDS)

    async def sample(self) -> None:
        running = {
            m: pid
            for m, (state, pid) in self._processes().items()
            if state is ProcessState.READY and pid is not None
        }
        if not running:
            return
        gpu = await gpu_usage_by_pid()
        changed = False
        for model, pid in running.items():
            changed |= self._stats.record_peak(model, "ram", tree_rss(pid))
            if gpu:
                pids = {pid} | {c.pid for c in _children(pid)}
                totals: dict[str, int] = {}
                for p in pids:
                    for resource, used in gpu.get(p, {}).items():
                        totals[resource] = totals.get(resource, 0) + used
                for resource, used in totals.items():
                    changed |= self._stats.record_peak(model, resource, used)
        if changed:
            self._stats.save()


def _children(pid: int) -> list[psutil.Process]:
    try:
        return list(psutil.Process(pid).children(recursive=True))
    except psutil.Error:
        return []
