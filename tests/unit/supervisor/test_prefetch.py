"""Prefetch reads real files in a thread: what it counts, what it may read, when it stops.

Whether the pages ended up cached is the kernel's business (Python has no ``mincore``); these
tests assert the record: bytes and files read, the memory budget, cancellation, failures.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from modelswap.supervisor.prefetch import (
    CHUNK_BYTES,
    MIN_MARGIN_BYTES,
    Prefetch,
    memory_budget,
    memory_margin,
)

HANG = 60.0
UNLIMITED = 1 << 62


def _write(path: Path, size: int) -> Path:
    with path.open("wb") as fh:
        fh.write(os.urandom(min(size, 1 << 16)) * (size // (1 << 16)) + b"x" * (size % (1 << 16)))
    return path


async def _run(prefetch: Prefetch) -> dict[str, object]:
    prefetch.start()
    return (await asyncio.wait_for(prefetch.wait(), HANG)).as_dict()


async def test_prefetch_reads_every_byte_of_every_file_and_counts_them(tmp_path: Path) -> None:
    a = _write(tmp_path / "a.gguf", 2 * CHUNK_BYTES + 123)
    b = _write(tmp_path / "b.gguf", 1000)
    record = await _run(Prefetch([a, b], budget=lambda: UNLIMITED))
    assert record["outcome"] == "done"
    assert record["files"] == record["files_read"] == 2
    assert record["bytes"] == record["planned_bytes"] == 2 * CHUNK_BYTES + 123 + 1000
    assert "limited" not in record
    assert "cut_files" not in record


async def test_prefetch_never_reads_more_than_its_budget(tmp_path: Path) -> None:
    a = _write(tmp_path / "a.gguf", CHUNK_BYTES)
    b = _write(tmp_path / "b.gguf", CHUNK_BYTES)
    c = _write(tmp_path / "c.gguf", CHUNK_BYTES)
    budget = CHUNK_BYTES + CHUNK_BYTES // 2
    record = await _run(Prefetch([a, b, c], budget=lambda: budget))
    assert record["outcome"] == "done"
    assert record["bytes"] == record["planned_bytes"] == budget == record["budget_bytes"]
    assert record["files_read"] == 2  # a whole, the first half of b; c not at all
    assert record["cut_files"] == ["b.gguf", "c.gguf"]
    assert "MemAvailable" in str(record["limited"])


async def test_prefetch_with_no_memory_to_spare_reads_nothing(tmp_path: Path) -> None:
    a = _write(tmp_path / "a.gguf", 1000)
    record = await _run(Prefetch([a], budget=lambda: 0))
    assert record["outcome"] == "skipped"
    assert record["bytes"] == 0
    assert record["why"] == "no memory to spare"


async def test_a_prefetch_cancelled_before_its_first_chunk_reads_nothing(tmp_path: Path) -> None:
    a = _write(tmp_path / "a.gguf", 2 * CHUNK_BYTES)
    prefetch: Prefetch

    def budget() -> int:  # runs in the reading thread, just before the first chunk
        prefetch.cancel("the start began")
        return UNLIMITED

    prefetch = Prefetch([a], budget=budget)
    record = await _run(prefetch)
    assert record["outcome"] == "stopped"
    assert record["why"] == "the start began"
    assert record["bytes"] == 0
    assert record["files_read"] == 0


async def test_cancelling_a_running_prefetch_stops_its_reading(tmp_path: Path) -> None:
    size = 128 * CHUNK_BYTES  # sparse: nothing on disk, 128 chunks to read
    big = tmp_path / "big.gguf"
    with big.open("wb") as fh:
        fh.truncate(size)
    prefetch = Prefetch([big], budget=lambda: UNLIMITED)
    prefetch.start()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + HANG
    while prefetch.snapshot().bytes == 0 and prefetch.snapshot().outcome == "running":
        assert loop.time() < deadline, "the prefetch never read a chunk"
        await asyncio.sleep(0)
    prefetch.cancel("the swap was cancelled")
    prefetch.cancel("a second reason is ignored")
    record = (await asyncio.wait_for(prefetch.wait(), HANG)).as_dict()
    assert record["outcome"] == "stopped"
    assert record["why"] == "the swap was cancelled"
    assert 0 < int(str(record["bytes"])) < size
    fd = os.open(big, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)  # give the page cache back
    finally:
        os.close(fd)


async def test_a_file_that_cannot_be_read_fails_the_prefetch_with_the_os_error(
    tmp_path: Path,
) -> None:
    record = await _run(Prefetch([tmp_path / "gone.gguf"], budget=lambda: UNLIMITED))
    assert record["outcome"] == "failed"
    assert "FileNotFoundError" in str(record["why"])


async def test_the_summary_names_the_outcome_bytes_and_files(tmp_path: Path) -> None:
    a = _write(tmp_path / "a.gguf", CHUNK_BYTES)
    prefetch = Prefetch([a], budget=lambda: UNLIMITED)
    prefetch.start()
    record = await asyncio.wait_for(prefetch.wait(), HANG)
    assert record.summary().startswith("done: 4.0 MiB of 4.0 MiB from 1 of 1 file(s) in ")
    assert Prefetch.skipped("prefetch: false").summary() == "skipped (prefetch: false)"


def test_the_margin_is_a_gib_or_a_tenth_of_memory_and_the_budget_leaves_it() -> None:
    assert memory_margin(4 * 1024**3) == MIN_MARGIN_BYTES
    assert memory_margin(100 * 1024**3) == 10 * 1024**3
    assert memory_budget() >= 0
