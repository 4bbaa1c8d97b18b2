"""What modelswap measures (issue 6): start times and peak memory, remembered in stats.json;
nvidia-smi output parsing; the resident memory of a process tree."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from modelswap.model_stats import (
    DEFAULT_START_SECONDS,
    KEEP_STARTS,
    MemorySampler,
    StatsStore,
    parse_compute_apps,
    parse_gpu_index,
    tree_rss,
)
from modelswap.states import ProcessState

MIB = 1024**2
ALLOC_MIB = 64

# Allocates ALLOC_MIB and writes to every page (so it is resident), says so, then holds it
# until its stdin closes.
ALLOCATE = f"""
import sys
buf = bytearray({ALLOC_MIB} * 1024 * 1024)
for i in range(0, len(buf), 4096):
    buf[i] = 1
print("allocated", flush=True)
sys.stdin.read()
"""

# Starts ALLOCATE (its argument) as a child and waits: the memory is in a descendant.
SPAWN_ALLOCATOR = """
import subprocess, sys
child = subprocess.Popen([sys.executable, "-c", sys.argv[1]], stdin=subprocess.PIPE)
sys.stdin.read()
child.stdin.close()
child.wait()
"""


# ---- StatsStore -----------------------------------------------------------------------------


def test_stats_round_trip_through_the_state_dir(tmp_path: Path) -> None:
    path = tmp_path / "state" / "stats.json"  # the directory is created on save
    store = StatsStore(path)
    store.record_start("a", 3.25)
    store.record_start("a", 5.0)
    store.record_start("b", 1.0)
    assert store.record_peak("a", "ram", 2 * MIB)
    assert store.record_peak("a", "gpu0", 20 * MIB)
    assert store.record_peak("c", "ram", 7)
    store.save()
    assert path.is_file()

    again = StatsStore(path)
    assert again.median_start("a") == pytest.approx(4.125)
    assert again.median_start("b") == 1.0
    assert again.peaks("a") == {"ram": 2 * MIB, "gpu0": 20 * MIB}
    assert again.peaks("c") == {"ram": 7}
    assert again.median_start("c") == DEFAULT_START_SECONDS

    data = json.loads(path.read_text())
    assert data["version"] == 1
    assert data["models"]["a"] == {
        "start_seconds": [3.25, 5.0],
        "peak_bytes": {"ram": 2 * MIB, "gpu0": 20 * MIB},
    }
    assert sorted(data["models"]) == ["a", "b", "c"]
    assert [p.name for p in path.parent.iterdir()] == ["stats.json"]  # no temp file left


async def test_save_soon_writes_later_once_and_save_writes_what_it_left(tmp_path: Path) -> None:
    # A start's READY records its time; the file is written off the path of the requests that
    # waited for that start, and several READYs close together make one write.
    path = tmp_path / "stats.json"
    store = StatsStore(path)
    store.record_start("a", 1.0)
    store.save_soon()
    store.record_start("a", 2.0)
    store.save_soon()  # coalesced with the first
    assert not path.exists()  # nothing written on the spot
    for _ in range(3000):  # ceiling 30 s: only ends a hang
        if path.exists():
            break
        await asyncio.sleep(0.01)
    assert json.loads(path.read_text())["models"]["a"]["start_seconds"] == [1.0, 2.0]

    store.record_start("a", 3.0)
    store.save_soon()
    store.save()  # the gateway closing: written now, and the pending write is dropped
    assert json.loads(path.read_text())["models"]["a"]["start_seconds"] == [1.0, 2.0, 3.0]


def test_stats_median_start() -> None:
    store = StatsStore(None)
    assert store.median_start("a") == DEFAULT_START_SECONDS
    for seconds in (1.0, 100.0, 3.0):
        store.record_start("a", seconds)
    assert store.median_start("a") == 3.0  # the median, not the mean: one slow start is noise
    store.record_start("a", 5.0)
    assert store.median_start("a") == 4.0


def test_stats_keeps_only_the_last_starts(tmp_path: Path) -> None:
    store = StatsStore(tmp_path / "stats.json")
    for i in range(KEEP_STARTS + 10):
        store.record_start("a", 1000.0 if i < 10 else 1.0)
    assert store.median_start("a") == 1.0
    store.save()
    data = json.loads((tmp_path / "stats.json").read_text())
    assert len(data["models"]["a"]["start_seconds"]) == KEEP_STARTS


def test_stats_peaks_only_increase() -> None:
    store = StatsStore(None)
    assert store.record_peak("a", "ram", 100)
    assert not store.record_peak("a", "ram", 50)
    assert not store.record_peak("a", "ram", 100)
    assert store.peaks("a") == {"ram": 100}
    assert store.record_peak("a", "ram", 150)
    assert store.peaks("a") == {"ram": 150}
    assert not store.record_peak("b", "ram", 0)
    assert store.peaks("b") == {}
    assert store.peaks("never") == {}


def test_stats_peaks_returns_a_copy() -> None:
    store = StatsStore(None)
    store.record_peak("a", "ram", 100)
    peaks = store.peaks("a")
    peaks["ram"] = 1  # type: ignore[index]
    assert store.peaks("a") == {"ram": 100}


@pytest.mark.parametrize(
    "text",
    [
        "{not json",
        "",
        "[]",
        '"a string"',
        '{"models": []}',
        '{"models": {"a": {"start_seconds": ["slow"]}}}',
        '{"models": {"a": {"peak_bytes": {"ram": "lots"}}}}',
        '{"models": {"a": {"peak_bytes": [1, 2]}}}',
        '{"models": {"a": 5}}',
    ],
)
def test_stats_corrupted_file_is_ignored(tmp_path: Path, text: str) -> None:
    path = tmp_path / "stats.json"
    path.write_text(text)
    store = StatsStore(path)
    assert store.median_start("a") == DEFAULT_START_SECONDS
    store.record_start("b", 2.0)
    store.save()  # and a good file replaces it
    assert StatsStore(path).median_start("b") == 2.0


def test_stats_missing_file_and_no_path_are_empty(tmp_path: Path) -> None:
    assert StatsStore(tmp_path / "absent.json").peaks("a") == {}
    store = StatsStore(None)
    store.record_start("a", 1.0)
    store.save()  # a no-op without a path
    assert list(tmp_path.iterdir()) == []


def test_stats_unwritable_state_dir_does_not_raise(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    store = StatsStore(blocker / "stats.json")  # its "directory" is a file
    store.record_start("a", 1.0)
    store.save()
    assert blocker.read_text() == ""


# ---- nvidia-smi parsers ---------------------------------------------------------------------

# `nvidia-smi --query-gpu=index,uuid --format=csv,noheader` on a two-GPU machine
GPU_INDEX = """\
0, GPU-5f3c1a6e-8d2b-11ee-b9d1-0242ac120002
1, GPU-9a7b2c4d-1e3f-4a5b-8c6d-7e8f9a0b1c2d
"""

# `nvidia-smi --query-compute-apps=gpu_uuid,pid,used_memory --format=csv,noheader,nounits`
COMPUTE_APPS = """\
GPU-5f3c1a6e-8d2b-11ee-b9d1-0242ac120002, 41235, 22528
GPU-9a7b2c4d-1e3f-4a5b-8c6d-7e8f9a0b1c2d, 41235, 1024
GPU-5f3c1a6e-8d2b-11ee-b9d1-0242ac120002, 41240, 312
GPU-5f3c1a6e-8d2b-11ee-b9d1-0242ac120002, 41240, 100
GPU-9a7b2c4d-1e3f-4a5b-8c6d-7e8f9a0b1c2d, 50001, [N/A]
GPU-00000000-0000-0000-0000-000000000000, 50002, 4096
"""


def test_parse_gpu_index() -> None:
    assert parse_gpu_index(GPU_INDEX) == {
        "GPU-5f3c1a6e-8d2b-11ee-b9d1-0242ac120002": "gpu0",
        "GPU-9a7b2c4d-1e3f-4a5b-8c6d-7e8f9a0b1c2d": "gpu1",
    }


@pytest.mark.parametrize(
    "text",
    [
        "",
        "No devices were found\n",
        "index, uuid\n",  # a header, had noheader been forgotten
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n",
    ],
)
def test_parse_gpu_index_ignores_non_rows(text: str) -> None:
    assert parse_gpu_index(text) == {}


def test_parse_compute_apps_per_pid_per_gpu_in_bytes() -> None:
    apps = parse_compute_apps(COMPUTE_APPS, parse_gpu_index(GPU_INDEX))
    assert apps == {
        41235: {"gpu0": 22528 * MIB, "gpu1": 1024 * MIB},
        41240: {"gpu0": 412 * MIB},  # two contexts of one process on one GPU add up
    }


@pytest.mark.parametrize(
    "text",
    [
        "",
        "gpu_uuid, pid, used_gpu_memory [MiB]\n",
        "No running processes found\n",
        "GPU-5f3c1a6e-8d2b-11ee-b9d1-0242ac120002, 41235, [Insufficient Permissions]\n",
        "GPU-5f3c1a6e-8d2b-11ee-b9d1-0242ac120002, 41235\n",
    ],
)
def test_parse_compute_apps_ignores_non_rows(text: str) -> None:
    assert parse_compute_apps(text, parse_gpu_index(GPU_INDEX)) == {}


# ---- tree_rss and the sampler ---------------------------------------------------------------


def _started(proc: subprocess.Popen[str], line: str = "allocated") -> None:
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == line


@pytest.fixture
def allocator() -> Iterator[subprocess.Popen[str]]:
    """A child process holding ALLOC_MIB of touched memory until its stdin closes."""
    proc = subprocess.Popen(
        [sys.executable, "-c", ALLOCATE],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        _started(proc)
        yield proc
    finally:
        _close(proc)


def _close(proc: subprocess.Popen[str]) -> None:
    for stream in (proc.stdin, proc.stdout):
        if stream is not None:
            stream.close()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def test_tree_rss_of_a_process_that_allocated_a_known_amount(
    allocator: subprocess.Popen[str],
) -> None:
    rss = tree_rss(allocator.pid)
    assert rss >= ALLOC_MIB * MIB
    assert rss < 10 * ALLOC_MIB * MIB


def test_tree_rss_counts_descendants() -> None:
    parent = subprocess.Popen(
        [sys.executable, "-c", SPAWN_ALLOCATOR, ALLOCATE],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        _started(parent)  # the grandchild's line comes through the shared stdout
        children = psutil.Process(parent.pid).children(recursive=True)
        assert len(children) == 1
        own = psutil.Process(parent.pid).memory_info().rss
        assert own < ALLOC_MIB * MIB
        assert tree_rss(parent.pid) >= ALLOC_MIB * MIB + own
    finally:
        _close(parent)


def test_tree_rss_of_a_gone_process_is_zero() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    assert tree_rss(proc.pid) == 0


async def test_memory_sampler_records_the_peak_of_ready_models(
    tmp_path: Path, allocator: subprocess.Popen[str]
) -> None:
    path = tmp_path / "stats.json"
    store = StatsStore(path)
    snapshot = {
        "big": (ProcessState.READY, allocator.pid),
        "starting": (ProcessState.STARTING, allocator.pid),
        "nopid": (ProcessState.READY, None),
    }
    sampler = MemorySampler(store, lambda: snapshot)
    await sampler.sample()
    assert store.peaks("big")["ram"] >= ALLOC_MIB * MIB
    assert store.peaks("starting") == {}
    assert store.peaks("nopid") == {}
    assert StatsStore(path).peaks("big") == store.peaks("big")  # saved


async def test_memory_sampler_without_ready_models_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "stats.json"
    sampler = MemorySampler(StatsStore(path), lambda: {"a": (ProcessState.STOPPED, None)})
    await sampler.sample()
    assert not path.exists()


async def test_memory_sampler_does_not_save_when_no_peak_grew(
    tmp_path: Path, allocator: subprocess.Popen[str]
) -> None:
    path = tmp_path / "stats.json"
    store = StatsStore(path)
    store.record_peak("big", "ram", 10**15)  # already above anything this process holds
    sampler = MemorySampler(store, lambda: {"big": (ProcessState.READY, allocator.pid)})
    await sampler.sample()
    assert not path.exists()


def test_the_readiness_history_survives_a_restart(tmp_path: Path) -> None:
    # Where the listen watcher looks hardest next time: the last starts' seconds to listening,
    # and from listening to ready, kept in stats.json so a restarted gateway aims from the
    # first start.
    path = tmp_path / "stats.json"
    store = StatsStore(path)
    for listened, ready in ((0.4, 0.9), (0.5, 1.0), (0.45, 0.95)):
        store.record_listen("a", listened, ready - listened)
        store.record_start("a", ready)
    store.record_start("b", 2.0)  # a model reached without a port to watch: no listen times
    store.record_listen("c", 0.3)  # `checkEndpoint: none`: listening is ready
    store.save()
    again = StatsStore(path)
    assert again.readiness("a", 2) == ([0.5, 0.45], [0.5, 0.5])
    assert again.readiness("b", 5) == ([], [])
    assert again.readiness("c", 5) == ([0.3], [])
    assert again.readiness("never", 5) == ([], [])
    saved = json.loads(path.read_text())["models"]
    assert "listen_seconds" not in saved["b"]
    assert "listen_to_ready_seconds" not in saved["c"]


def test_each_runs_own_peak_is_kept_and_survives_a_restart(tmp_path: Path) -> None:
    # The load dry run states the spread of a model's memory over its runs (issue 39): each
    # run (a backend pid) keeps its own peak beside the highest ever.
    path = tmp_path / "stats.json"
    store = StatsStore(path)
    for used in (100, 300, 200):  # one run: its peak is its highest sample
        store.record_peak("a", "ram", used, run=11)
    assert not store.record_peak("a", "ram", 150, run=12)  # a new run, not a new peak
    store.record_peak("a", "ram", 250, run=12)
    assert store.run_peaks("a") == {"ram": [300, 250]}
    assert store.peaks("a") == {"ram": 300}
    assert store.runs_sampled("a") == {"ram": 2}
    store.save()
    again = StatsStore(path)
    assert again.run_peaks("a") == {"ram": [300, 250]}
    assert again.runs_sampled("a") == {}  # counted from this gateway's start
    again.record_peak("a", "ram", 10, run=11)  # a pid reused after the restart: a new run
    assert again.run_peaks("a") == {"ram": [300, 250, 10]}
