"""What modelswap learns about each model by running it: start times and peak memory.

Remembered in ``<stateDir>/stats.json`` so the eviction policy knows, from the first request
after a restart, what each model costs to start and how much memory it holds. GPU memory comes
from ``nvidia-smi`` where present (per process, summed over the model's process tree); host
memory is the tree's resident set size.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import statistics
from collections.abc import Callable, Mapping
from pathlib import Path

import psutil

from modelswap.statefile import StateFile
from modelswap.states import ProcessState
from modelswap.supervisor import tree

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
        # A corrupt file is moved aside, a failed save retried: never off (statefile.py).
        self.file = StateFile(path, prefix=".stats-", what="stats") if path else None
        self._starts: dict[str, list[float]] = {}
        self._listens: dict[str, list[float]] = {}
        self._listen_to_ready: dict[str, list[float]] = {}
        self._peaks: dict[str, dict[str, int]] = {}
        # Each run's own peak (the last KEEP_STARTS runs): the spread a load dry run states.
        self._run_peaks: dict[str, dict[str, list[int]]] = {}
        self._run_of: dict[tuple[str, str], int] = {}  # (model, resource) -> the run sampled
        self._run_count: dict[tuple[str, str], int] = {}  # runs sampled since this start
        self._prompt_rates: dict[str, list[float]] = {}  # uncached prompt tokens per second
        self._held: dict[str, int | None] = {}  # tokens each running model's slots hold
        self._save_timer: asyncio.TimerHandle | None = None
        self._load()

    def _load(self) -> None:
        if self.file is None:
            return
        found = self.file.read(_parsed)
        if found is not None:
            (
                self._starts,
                self._listens,
                self._listen_to_ready,
                self._peaks,
                self._prompt_rates,
                self._run_peaks,
            ) = found

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
        if self.file is None:
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
            if self._run_peaks.get(m):
                entry["run_peak_bytes"] = self._run_peaks[m]
            if m in self._prompt_rates:
                entry["prompt_tokens_per_second"] = self._prompt_rates[m]
            models[m] = entry
        self.file.write({"version": 1, "models": models}, self.save)

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

    def start_samples(self, model: str) -> list[float]:
        """The last starts' seconds (oldest first)."""
        return list(self._starts.get(model, []))

    def record_peak(self, model: str, resource: str, used: int, run: int | None = None) -> bool:
        """Remember ``used`` if it is a new peak; True when it was. Each ``run``'s (the
        backend's pid) own peak is kept too, saved with the next save: a run's peak grows at
        every other sample, which must not write the file each time."""
        if run is not None:
            self._record_run(model, resource, used, run)
        return self._record_peak(model, resource, used)

    def _record_run(self, model: str, resource: str, used: int, run: int) -> None:
        history = self._run_peaks.setdefault(model, {}).setdefault(resource, [])
        if self._run_of.get((model, resource)) != run:
            self._run_of[(model, resource)] = run
            self._run_count[(model, resource)] = self._run_count.get((model, resource), 0) + 1
            history.append(used)
            del history[:-KEEP_STARTS]
        elif used > history[-1]:
            history[-1] = used

    def run_peaks(self, model: str) -> Mapping[str, list[int]]:
        """Each of the last runs' peak per resource (oldest first; the newest may be running)."""
        return {r: list(v) for r, v in self._run_peaks.get(model, {}).items()}

    def runs_sampled(self, model: str) -> dict[str, int]:
        """How many runs of ``model`` were sampled per resource since the gateway started (a
        run's peak in :meth:`run_peaks` is the newest once this count grew past a mark)."""
        return {r: n for (m, r), n in self._run_count.items() if m == model}

    def _record_peak(self, model: str, resource: str, used: int) -> bool:
        peaks = self._peaks.setdefault(model, {})
        if used > peaks.get(resource, 0):
            peaks[resource] = used
            return True
        return False

    def peaks(self, model: str) -> Mapping[str, int]:
        return dict(self._peaks.get(model, {}))


_Seconds = dict[str, list[float]]
_RunPeaks = dict[str, dict[str, list[int]]]
_Parsed = tuple[_Seconds, _Seconds, _Seconds, dict[str, dict[str, int]], _Seconds, _RunPeaks]


def _parsed(data: object) -> _Parsed:
    """``stats.json``'s models: start, listen and listen-to-ready seconds, peaks, prompt
    rates (tokens per second) and each run's peaks. Raises
    ValueError, TypeError or AttributeError on anything malformed (the file is corrupt)."""
    if not isinstance(data, dict):
        raise ValueError("not a stats file")
    starts: _Seconds = {}
    listens: _Seconds = {}
    to_ready: _Seconds = {}
    rates: _Seconds = {}
    peaks: dict[str, dict[str, int]] = {}
    run_peaks: _RunPeaks = {}
    for model, entry in data.get("models", {}).items():
        starts[model] = [float(x) for x in entry.get("start_seconds", [])][-KEEP_STARTS:]
        peaks[model] = {str(k): int(v) for k, v in entry.get("peak_bytes", {}).items()}
        listened = [float(x) for x in entry.get("listen_seconds", [])][-KEEP_STARTS:]
        if listened:
            listens[model] = listened
        after = [float(x) for x in entry.get("listen_to_ready_seconds", [])]
        if after:
            to_ready[model] = after[-KEEP_STARTS:]
        measured = [float(x) for x in entry.get("prompt_tokens_per_second", [])]
        if measured:
            rates[model] = measured[-KEEP_STARTS:]
        runs = entry.get("run_peak_bytes", {})
        run_peaks[model] = {str(k): [int(x) for x in v][-KEEP_STARTS:] for k, v in runs.items()}
    return starts, listens, to_ready, peaks, rates, run_peaks


def tree_rss(pid: int) -> int:
    """Resident bytes of ``pid`` and all its descendants (0 if it is gone). The descendants
    come from /proc/PID/task/*/children (``tree.snapshot``): psutil's ``children`` reads every
    process on the host, milliseconds on the event loop every sample."""
    total = 0
    for member, _ in tree.snapshot(pid):
        with contextlib.suppress(psutil.Error):
            total += psutil.Process(member).memory_info().rss
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
            changed |= self._stats.record_peak(model, "ram", tree_rss(pid), run=pid)
            if gpu:
                pids = {member for member, _ in tree.snapshot(pid)}
                totals: dict[str, int] = {}
                for p in pids:
                    for resource, used in gpu.get(p, {}).items():
                        totals[resource] = totals.get(resource, 0) + used
                for resource, used in totals.items():
                    changed |= self._stats.record_peak(model, resource, used, run=pid)
        if changed:
            self._stats.save()
