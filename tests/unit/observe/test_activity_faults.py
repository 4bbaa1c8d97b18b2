"""The activity log is never off for the rest of the run (issue 38), on real faults: a disk
that is full when it starts (a small tmpfs, filled) leaves it unavailable, its rows dropped and
counted, and it opens the database by itself once space returns; a database found corrupt (its
pages overwritten) is moved aside, kept, and a fresh one started (a file of garbage bytes:
tests/unit/observe/test_activity.py)."""

from __future__ import annotations

import asyncio
import logging
import os
import stat
import time
from pathlib import Path

import pytest
from tests.full_disk import fill, free, small_disk
from tests.unit.observe.test_activity import rec

from modelswap.observe import activity
from modelswap.observe.activity import ActivityLog

HANG = 30.0


async def wait_until(what: str, check: object) -> None:
    deadline = time.monotonic() + HANG
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.01)


async def test_a_full_disk_at_start_drops_counted_rows_and_recording_resumes_by_itself(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(activity, "REOPEN_FIRST", 0.05)  # the backoff's start, not the fault
    with small_disk(tmp_path / "disk") as disk:
        filler = fill(disk)
        path = disk / "state" / "activity.sqlite3"
        with caplog.at_level(logging.WARNING):
            log = ActivityLog(path, batch_seconds=0.02)
        assert log.state == "unavailable"
        assert log.problem is not None
        assert "full" in log.problem
        writer = asyncio.create_task(log.run())
        try:
            log.record(rec(model="lost"))
            await wait_until("the row counted", lambda: log.dropped_by().get("unavailable"))
            assert log.query() == []  # nothing to read, and no error either
            assert log.stats()["rows"] == 0
            free(filler)
            await wait_until("reopened", lambda: log.state == "recording")
            log.record(rec(model="kept", at=time.time()))
            await wait_until("written", lambda: [r["model"] for r in log.query()] == ["kept"])
        finally:
            await log.close()
            writer.cancel()
        assert log.dropped_by() == {"unavailable": 1}
        assert caplog.text.count("rows are dropped") == 1  # said once, not at every try
        assert "recording again" in caplog.text
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        assert stat.S_IMODE(os.stat(path.parent).st_mode) == 0o700


async def test_a_database_found_corrupt_at_start_is_moved_aside_and_restarted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(activity, "REOPEN_FIRST", 0.05)
    path = tmp_path / "activity.sqlite3"
    log = ActivityLog(path, batch_seconds=0.02)
    log.record(rec(model="before"))
    assert log.flush_now() == 1
    log.close_now()  # checkpointed into the file, then its pages overwritten
    with path.open("r+b") as db:
        db.write(b"\xa5" * 4096)
    log = ActivityLog(path, batch_seconds=0.02)  # a new gateway on the broken file
    writer = asyncio.create_task(log.run())
    try:
        log.record(rec(model="after", at=time.time()))  # kept by the retention
        await wait_until("written", lambda: [r["model"] for r in log.query()] == ["after"])
    finally:
        await log.close()
        writer.cancel()
    [kept] = log.moved_aside
    assert kept == str(path) + ".corrupt-" + kept.rsplit(".corrupt-", 1)[1]
    with open(kept, "rb") as found:  # noqa: ASYNC230 - the test's own file, once
        assert found.read(16) == b"\xa5" * 16
