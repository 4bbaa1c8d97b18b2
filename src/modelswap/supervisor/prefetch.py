"""Read a model's weight files into the page cache while something else still runs.

A swap to B waits for A to drain and stop; B's own start then reads its weights from disk. A
:class:`Prefetch` reads them during that wait, in a thread, so B finds them cached. It only
reads (never holds memory of its own): each chunk is announced with
``posix_fadvise(WILLNEED)`` one chunk ahead, so the disk works while the thread waits on the
current one, then read into one reused buffer. It stops between chunks when cancelled, and
never reads more than the memory available minus :func:`memory_margin`.

The I/O is here; when to prefetch, and what, is the swap owner's decision (the router).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import psutil

CHUNK_BYTES = 4 * 1024 * 1024
MIN_MARGIN_BYTES = 1024**3


def memory_margin(total_bytes: int) -> int:
    """Memory a prefetch leaves alone: 1 GiB or a tenth of RAM, whichever is larger.

    MemAvailable counts the page cache as free, so reading up to it would push out everyone
    else's cached files (and the evicted model's, which may be wanted back next); and B needs
    memory of its own beyond its weights as it starts (KV cache and buffers on the host, a
    copy of what it does not mmap). The margin keeps room for both."""
    return max(MIN_MARGIN_BYTES, total_bytes // 10)


def memory_budget() -> int:
    """Bytes a prefetch may read now: MemAvailable minus the margin (0 when none is left)."""
    mem = psutil.virtual_memory()
    return max(0, int(mem.available) - memory_margin(int(mem.total)))


@dataclass
class PrefetchRecord:
    """What one prefetch did, for the last-swap record. ``outcome``: ``running``, ``done`` (every
    planned byte read), ``stopped`` (cancelled, ``why`` says by what), ``skipped`` (nothing
    read, ``why``) or ``failed`` (``why``: the OS error)."""

    files: int = 0
    planned_bytes: int = 0
    bytes: int = 0
    seconds: float = 0.0
    outcome: str = "running"
    why: str | None = None
    limited: str | None = None  # fewer bytes planned than the files hold, and why
    budget_bytes: int | None = None
    files_read: int = 0
    cut_files: list[str] = field(default_factory=list)

    def summary(self) -> str:
        """One phrase for the swap's log line."""
        if self.outcome == "skipped":
            return f"skipped ({self.why})"
        text = (
            f"{self.outcome}: {_mib(self.bytes)} of {_mib(self.planned_bytes)} from "
            f"{self.files_read} of {self.files} file(s) in {self.seconds:.3f} s"
        )
        notes = [note for note in (self.why, self.limited) if note]
        return text + (f" ({'; '.join(notes)})" if notes else "")

    def as_dict(self) -> dict[str, object]:
        data: dict[str, object] = {
            "outcome": self.outcome,
            "files": self.files,
            "files_read": self.files_read,
            "bytes": self.bytes,
            "planned_bytes": self.planned_bytes,
            "seconds": round(self.seconds, 4),
        }
        if self.why is not None:
            data["why"] = self.why
        if self.limited is not None:
            data["limited"] = self.limited
        if self.budget_bytes is not None:
            data["budget_bytes"] = self.budget_bytes
        if self.cut_files:
            data["cut_files"] = list(self.cut_files)
        return data


class Prefetch:
    """One prefetch of ``files``, running in a thread from :meth:`start` until it is done or
    :meth:`cancel`\\ led. ``budget`` answers the bytes it may read (default: :func:`memory_budget`,
    asked once, at start)."""

    def __init__(self, files: Sequence[Path], *, budget: Callable[[], int] = memory_budget) -> None:
        self._files = tuple(files)
        self._budget = budget
        self._cancelled = threading.Event()
        self._stop_why: str | None = None
        self._lock = threading.Lock()
        self.record = PrefetchRecord(files=len(self._files))
        self._task: asyncio.Future[None] | None = None

    @classmethod
    def skipped(cls, why: str) -> PrefetchRecord:
        """The record of a prefetch that was decided against."""
        return PrefetchRecord(outcome="skipped", why=why)

    def start(self) -> None:
        """Begin reading in the loop's default executor; returns at once."""
        if self._task is None:
            self._task = asyncio.get_running_loop().run_in_executor(None, self._run)

    def cancel(self, why: str) -> None:
        """Stop at the next chunk (idempotent; the first reason is kept). Never waits."""
        with self._lock:
            if self._stop_why is None:
                self._stop_why = why
            self._cancelled.set()

    async def wait(self) -> PrefetchRecord:
        """Until the thread has finished (done, stopped or failed)."""
        if self._task is not None:
            await asyncio.shield(self._task)
        return self.snapshot()

    def snapshot(self) -> PrefetchRecord:
        with self._lock:
            return dataclasses.replace(self.record, cut_files=list(self.record.cut_files))

    # ---- the thread ------------------------------------------------------------------------

    def _run(self) -> None:
        began = time.monotonic()
        try:
            self._read_all(began)
        except OSError as exc:
            self._finish(began, "failed", f"{type(exc).__name__}: {exc.strerror or exc}")
        else:
            if self._cancelled.is_set() and self.record.bytes < self.record.planned_bytes:
                self._finish(began, "stopped", self._stop_why)
            elif self.record.planned_bytes == 0:
                self._finish(began, "skipped", "no memory to spare" if self._files else "no files")
            else:
                self._finish(began, "done", None)

    def _finish(self, began: float, outcome: str, why: str | None) -> None:
        with self._lock:
            self.record.seconds = time.monotonic() - began
            self.record.outcome = outcome
            if why is not None:
                self.record.why = why

    def _read_all(self, began: float) -> None:
        budget = self._budget()
        sizes = [(path, path.stat().st_size) for path in self._files]
        total = sum(size for _, size in sizes)
        plan: list[tuple[Path, int]] = []
        left = budget
        for path, size in sizes:
            take = min(size, left)
            if take > 0:
                plan.append((path, take))
            if take < size:
                self.record.cut_files.append(path.name)
            left -= take
        with self._lock:
            self.record.budget_bytes = budget
            self.record.planned_bytes = sum(take for _, take in plan)
            if total > budget:
                self.record.limited = (
                    f"memory: {budget} bytes may be read (MemAvailable minus the margin), "
                    f"the files hold {total}"
                )
        buffer = bytearray(CHUNK_BYTES)
        for path, length in plan:
            if self._cancelled.is_set():
                return
            self._read_file(path, length, memoryview(buffer))
            with self._lock:
                self.record.files_read += 1
                self.record.seconds = time.monotonic() - began

    def _read_file(self, path: Path, length: int, buffer: memoryview) -> None:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        try:
            _advise(fd, 0, CHUNK_BYTES)
            offset = 0
            while offset < length and not self._cancelled.is_set():
                size = min(CHUNK_BYTES, length - offset)
                _advise(fd, offset + size, min(CHUNK_BYTES, length - offset - size))
                got = os.preadv(fd, [buffer[:size]], offset)
                if got <= 0:
                    return  # the file shrank meanwhile
                offset += got
                with self._lock:
                    self.record.bytes += got
        finally:
            os.close(fd)


def _advise(fd: int, offset: int, length: int) -> None:
    """Ask the kernel to start reading ``length`` bytes at ``offset`` (where it can)."""
    if length > 0 and hasattr(os, "posix_fadvise"):
        # a filesystem without readahead advice: the reads still do the work
        with contextlib.suppress(OSError):
            os.posix_fadvise(fd, offset, length, os.POSIX_FADV_WILLNEED)


def _mib(count: int) -> str:
    return f"{count / 1024**2:.1f} MiB"
