from __future__ import annotations

import asyncio
import logging
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import closing
from dataclasses import replace
from pathlib import Path

import pytest

from modelswap.observe.activity import (
    MAX_QUERY_LIMIT,
    SCHEMA_VERSION,
    ActivityError,
    ActivityLog,
)
from modelswap.observe.records import RequestRecord

NOW = 1_750_000_000.0
DAY = 86_400.0


def rec(**changes: object) -> RequestRecord:
    base = RequestRecord(
        at=NOW,
        key_name="alice",
        model="qwen",
        route="/v1/chat/completions",
        status=200,
        streamed=True,
        prompt_tokens=12,
        completion_tokens=40,
        ttft=0.5,
        duration=2.5,
        bytes_in=300,
        bytes_out=4000,
        error_code=None,
    )
    return replace(base, **changes)  # type: ignore[arg-type]


@pytest.fixture
def mem() -> Iterator[ActivityLog]:
    log = ActivityLog(":memory:")
    yield log
    log.close_now()


class Trace:
    """Every SQL statement the log's connection runs, with the thread that ran it."""

    def __init__(self, log: ActivityLog) -> None:
        self.statements: list[tuple[str, int]] = []
        self.committed = threading.Event()
        self.deleted = threading.Event()
        assert log._conn is not None
        log._conn.set_trace_callback(self._seen)

    def _seen(self, sql: str) -> None:
        self.statements.append((sql, threading.get_ident()))
        if sql == "COMMIT":
            self.committed.set()
        if sql.startswith("DELETE"):
            self.deleted.set()


def schema_version(path: Path) -> str:
    with closing(sqlite3.connect(path)) as conn:
        return str(conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0])


# -- records ---------------------------------------------------------------------------------


def test_activity_tokens_per_second_uses_generation_time() -> None:
    # Streamed: the tokens after the first, over the time after the first token.
    assert rec().tokens_per_second == pytest.approx(39 / 2.0)
    # A cold start's load is neither TTFT nor generation time.
    assert rec(load=10.0, duration=12.5).tokens_per_second == pytest.approx(39 / 2.0)
    # Not streamed: the first byte arrives after generation, so the whole duration counts.
    assert rec(streamed=False, ttft=2.4).tokens_per_second == pytest.approx(40 / 2.5)
    assert rec(streamed=False, load=0.5, ttft=2.0).tokens_per_second == pytest.approx(40 / 2.0)
    assert rec(completion_tokens=None).tokens_per_second is None
    assert rec(completion_tokens=1).tokens_per_second is None  # one token: no generation time
    assert rec(ttft=None).tokens_per_second is None
    assert rec(ttft=2.5).tokens_per_second is None
    assert rec(streamed=False, duration=0.0, ttft=0.0).tokens_per_second is None


def test_activity_as_dict_is_json_ready_and_omits_absent_bodies() -> None:
    d = rec(first_byte=0.2, load=None).as_dict()
    assert d["tokens_per_second"] == pytest.approx(19.5)
    assert (d["ttft"], d["first_byte"], d["load"]) == (0.5, 0.2, None)
    assert "request_body" not in d
    assert "response_body" not in d
    assert rec(request_body="{}", response_body="ok").as_dict()["response_body"] == "ok"


# -- round trip, filters, paging -------------------------------------------------------------


def test_activity_round_trips_every_field(tmp_path: Path) -> None:
    log = ActivityLog(tmp_path / "state" / "activity.db")
    full = rec(request_body='{"messages": []}', response_body='{"choices": []}')
    bare = rec(
        key_name=None,
        model=None,
        route="/v1/embeddings",
        status=499,
        streamed=False,
        prompt_tokens=None,
        completion_tokens=None,
        ttft=None,
        duration=0.25,
        bytes_in=0,
        bytes_out=0,
        error_code="model_not_found",
    )
    log.record(full)
    log.record(bare)
    assert log.flush_now() == 2
    newest, oldest = log.query()
    log.close_now()

    assert {k: v for k, v in oldest.items() if k != "id"} == full.as_dict()
    assert {k: v for k, v in newest.items() if k != "id"} == bare.as_dict()
    assert oldest["streamed"] is True
    assert newest["streamed"] is False
    assert oldest["tokens_per_second"] == pytest.approx(19.5)
    assert isinstance(oldest["id"], int)
    assert isinstance(newest["id"], int)
    assert newest["id"] > oldest["id"]


def test_activity_filters_by_model_since_and_status(mem: ActivityLog) -> None:
    mem.record(rec(model="a", at=NOW - 10, status=200))
    mem.record(rec(model="b", at=NOW - 5, status=500))
    mem.record(rec(model="a", at=NOW, status=500))
    mem.flush_now()

    def ats(**filters: object) -> list[object]:
        return [row["at"] for row in mem.query(**filters)]  # type: ignore[arg-type]

    assert ats() == [NOW, NOW - 5, NOW - 10]
    assert ats(model="a") == [NOW, NOW - 10]
    assert ats(since=NOW - 5) == [NOW, NOW - 5]
    assert ats(status=500) == [NOW, NOW - 5]
    assert ats(model="a", status=500, since=NOW - 1) == [NOW]
    assert ats(model="nope") == []


def test_activity_outcome_counts_an_error_event_inside_a_200_stream(mem: ActivityLog) -> None:
    """A 200 stream that ended in an error event (a start that failed after the loading
    comments) is an error, like any status >= 400; the errors filter finds it."""
    assert rec().outcome == "ok"
    assert rec(status=404, error_code="model_not_found").outcome == "error"
    assert rec(status=502).outcome == "error"  # a backend's own error, relayed
    assert rec(status=499).outcome == "stopped"  # the client's own stop is no error (issue 41)
    assert rec(status=499, error_code="request_cancelled").outcome == "error"  # an operator's
    failed_stream = rec(status=200, error_code="utilization_guard", completion_tokens=None)
    assert failed_stream.outcome == "error"
    assert failed_stream.as_dict()["outcome"] == "error"
    mem.record(rec(at=NOW - 2))
    mem.record(failed_stream)
    mem.record(rec(at=NOW + 1, status=503, error_code="shutting_down"))
    mem.flush_now()

    def seen(**filters: object) -> list[tuple[object, object, object]]:
        rows = mem.query(**filters)  # type: ignore[arg-type]
        return [(row["status"], row["error_code"], row["outcome"]) for row in rows]

    assert seen(outcome="error") == [
        (503, "shutting_down", "error"),
        (200, "utilization_guard", "error"),
    ]
    assert seen(outcome="ok") == [(200, None, "ok")]
    assert seen(status=200, outcome="error") == [(200, "utilization_guard", "error")]


def test_activity_pages_newest_first_by_before_id(mem: ActivityLog) -> None:
    for i in range(7):
        mem.record(rec(at=NOW + i))
    mem.flush_now()
    seen: list[object] = []
    before: int | None = None
    pages = 0
    while page := mem.query(limit=3, before_id=before):
        pages += 1
        seen += [row["at"] for row in page]
        before = min(int(row["id"]) for row in page)  # type: ignore[call-overload]
    assert pages == 3
    assert seen == [NOW + i for i in reversed(range(7))]


def test_activity_query_limit_is_capped(mem: ActivityLog) -> None:
    for i in range(MAX_QUERY_LIMIT + 5):
        mem.record(rec(at=NOW + i))
    mem.flush_now()
    assert len(mem.query(limit=10**6)) == MAX_QUERY_LIMIT
    assert mem.query(limit=0) == []
    assert mem.query(limit=-1) == []
    assert mem.stats() == {"rows": MAX_QUERY_LIMIT + 5, "dropped": 0, "pending": 0}


# -- storage ---------------------------------------------------------------------------------


def test_activity_file_db_uses_wal_and_is_private(tmp_path: Path) -> None:
    path = tmp_path / "nested" / "dir" / "activity.db"
    log = ActivityLog(path)
    log.record(rec())
    log.flush_now()
    with closing(sqlite3.connect(path)) as other:
        assert other.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert other.execute("SELECT COUNT(*) FROM requests").fetchone()[0] == 1
    log.close_now()
    assert path.stat().st_mode & 0o077 == 0


def test_activity_record_does_no_io_until_a_flush(tmp_path: Path) -> None:
    log = ActivityLog(tmp_path / "a.db")
    trace = Trace(log)
    for i in range(5):
        log.record(rec(at=NOW + i))
    assert trace.statements == []
    assert log.stats() == {"rows": 0, "dropped": 0, "pending": 5}
    trace.statements.clear()

    assert log.flush_now() == 5
    sqls = [sql for sql, _ in trace.statements]
    assert sqls[0] == "BEGIN"  # one transaction for the whole batch
    assert sqls[-1] == "COMMIT"
    assert sqls.count("BEGIN") == 1
    assert log.stats() == {"rows": 5, "dropped": 0, "pending": 0}
    log.close_now()


async def test_activity_run_writes_batches_off_the_event_loop(tmp_path: Path) -> None:
    log = ActivityLog(tmp_path / "a.db", batch_seconds=0.01)
    trace = Trace(log)
    task = asyncio.create_task(log.run())
    now = time.time()  # run() applies retention too: the rows must be young
    log.record(rec(at=now))
    log.record(rec(at=now + 1))
    assert log.stats()["pending"] == 2
    assert await asyncio.to_thread(trace.committed.wait, 10)
    assert log.stats() == {"rows": 2, "dropped": 0, "pending": 0}

    loop_thread = threading.get_ident()
    writers = {tid for sql, tid in trace.statements if sql.startswith(("INSERT", "COMMIT"))}
    assert writers
    assert loop_thread not in writers

    await log.close()
    await asyncio.wait_for(task, 10)  # close() ends run()
    assert task.result() is None


async def test_activity_run_applies_retention(tmp_path: Path) -> None:
    log = ActivityLog(tmp_path / "a.db", max_rows=2, batch_seconds=0.01)
    trace = Trace(log)
    for i in range(5):
        log.record(rec(at=time.time() + i))
    task = asyncio.create_task(log.run())
    assert await asyncio.to_thread(trace.deleted.wait, 10)
    await log.close()
    await asyncio.wait_for(task, 10)

    reopened = ActivityLog(tmp_path / "a.db")
    assert len(reopened.query()) == 2
    reopened.close_now()


async def test_activity_close_flushes_and_later_records_are_dropped(tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    log = ActivityLog(path)
    log.record(rec(at=NOW))
    log.record(rec(at=NOW + 1))
    await log.close()
    await log.close()  # idempotent
    log.record(rec())
    assert log._dropped == 1
    with pytest.raises(ActivityError, match="closed"):
        log.query()

    reopened = ActivityLog(path)
    assert [row["at"] for row in reopened.query()] == [NOW + 1, NOW]
    reopened.close_now()


def test_activity_pending_queue_is_bounded_and_drops_the_oldest() -> None:
    log = ActivityLog(":memory:", max_pending=3)
    for i in range(5):
        log.record(rec(at=NOW + i))
    assert log.stats() == {"rows": 0, "dropped": 2, "pending": 3}
    log.flush_now()
    assert [row["at"] for row in log.query()] == [NOW + 4, NOW + 3, NOW + 2]
    assert log.stats() == {"rows": 3, "dropped": 2, "pending": 0}
    log.close_now()


def test_activity_default_pending_bound_is_ten_thousand(mem: ActivityLog) -> None:
    for i in range(10_001):
        mem.record(rec(at=NOW + i))
    assert mem.stats() == {"rows": 0, "dropped": 1, "pending": 10_000}


# -- retention -------------------------------------------------------------------------------


def test_activity_retention_by_age() -> None:
    log = ActivityLog(":memory:", max_age_days=30)
    log.record(rec(at=NOW - 31 * DAY))
    log.record(rec(at=NOW - 29 * DAY))
    log.record(rec(at=NOW))
    log.flush_now()
    assert log.retain(now=NOW) == 1
    assert [row["at"] for row in log.query()] == [NOW, NOW - 29 * DAY]
    log.close_now()


def test_activity_retention_by_row_count_keeps_the_newest(tmp_path: Path) -> None:
    log = ActivityLog(tmp_path / "a.db", max_rows=3)
    for i in range(5):
        log.record(rec(at=NOW + i))
    log.flush_now()
    assert log.retain(now=NOW) == 2
    assert [row["at"] for row in log.query()] == [NOW + 4, NOW + 3, NOW + 2]
    assert log.retain(now=NOW) == 0
    log.close_now()


# -- schema and migrations -------------------------------------------------------------------

V1_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT);
INSERT INTO meta VALUES ('schema_version', '1');
CREATE TABLE requests (id INTEGER PRIMARY KEY, at REAL, key_name TEXT, model TEXT, route TEXT,
  status INTEGER, streamed INTEGER, prompt_tokens INTEGER, completion_tokens INTEGER, ttft REAL,
  duration REAL, bytes_in INTEGER, bytes_out INTEGER, error_code TEXT);
CREATE INDEX requests_at ON requests(at);
CREATE INDEX requests_model ON requests(model);
INSERT INTO requests VALUES (1, 100.0, 'bob', 'llama', '/v1/completions', 200, 0, 5, 7, 0.1,
  1.0, 10, 20, NULL);
INSERT INTO requests VALUES (2, 200.0, NULL, NULL, '/v1/chat/completions', 502, 1, NULL, NULL,
  NULL, 3.0, 11, 0, 'backend_failed');
"""


def test_activity_migrates_an_empty_database(tmp_path: Path) -> None:
    path = tmp_path / "empty.db"
    sqlite3.connect(path).close()  # an existing, empty SQLite file
    ActivityLog(path).close_now()
    assert SCHEMA_VERSION == 10
    assert schema_version(path) == "10"
    with closing(sqlite3.connect(path)) as conn:
        columns = [r[1] for r in conn.execute("PRAGMA table_info(requests)")]
        indexes = {r[1] for r in conn.execute("PRAGMA index_list(requests)")}
    assert {"tokens_per_second", "request_body", "response_body", "error_code"} <= set(columns)
    assert "request_id" in columns  # v4
    assert "requested" in columns  # v5
    assert "outcome" in columns  # v8
    assert {"method", "error_message", "rule"} <= set(columns)  # v10
    assert {"requests_at", "requests_model", "requests_request_id"} <= indexes


def test_activity_migrates_a_version_1_database_keeping_rows(tmp_path: Path) -> None:
    path = tmp_path / "v1.db"
    with closing(sqlite3.connect(path)) as conn:
        conn.executescript(V1_SCHEMA)
    log = ActivityLog(path)
    assert schema_version(path) == "10"
    newest, oldest = log.query()
    assert oldest == {
        "id": 1,
        "at": 100.0,
        "request_id": None,  # before v4 there was none
        "key_name": "bob",
        "model": "llama",
        "route": "/v1/completions",
        "status": 200,
        "streamed": False,
        "prompt_tokens": 5,
        "completion_tokens": 7,
        "ttft": 0.1,
        "first_byte": 0.1,  # before v3, ttft was the first byte
        "load": None,
        "requested": None,  # before v5 the asked-for name was not kept
        "duration": 1.0,
        "tokens_per_second": None,
        "bytes_in": 10,
        "bytes_out": 20,
        "error_code": None,
        "cached_tokens": None,  # before v7 the cache was not counted
        "outcome": "ok",  # v8 judges older rows by their status and error code
        "method": None,  # before v10 neither the method, the message nor the rule was kept
        "error_message": None,
        "rule": None,
    }
    assert (newest["error_code"], newest["outcome"]) == ("backend_failed", "error")
    assert newest["streamed"] is True
    log.record(rec(request_body="{}"))
    log.flush_now()
    assert log.query(limit=1)[0]["request_body"] == "{}"
    assert log.query(limit=1)[0]["id"] == 3
    log.close_now()
    ActivityLog(path).close_now()  # reopening a current database is a no-op
    assert schema_version(path) == "10"


def test_activity_refuses_a_newer_database_without_touching_it(tmp_path: Path) -> None:
    path = tmp_path / "future.db"
    with closing(sqlite3.connect(path)) as conn:
        conn.executescript(
            "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT);"
            f"INSERT INTO meta VALUES ('schema_version', '{SCHEMA_VERSION + 1}');"
            "CREATE TABLE requests (id INTEGER PRIMARY KEY, whatever BLOB);"
        )
    with pytest.raises(ActivityError, match=rf"schema version {SCHEMA_VERSION + 1}, newer"):
        ActivityLog(path)
    assert schema_version(path) == str(SCHEMA_VERSION + 1)
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"


def test_activity_moves_a_file_that_is_not_a_database_aside_and_starts_afresh(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Never off for the rest of the run (issue 38): the garbage is kept, named with the time.
    path = tmp_path / "junk.db"
    garbage = b"this is not sqlite" * 100
    path.write_bytes(garbage)
    with caplog.at_level(logging.WARNING):
        log = ActivityLog(path)
    [kept] = tmp_path.glob("junk.db.corrupt-*")
    assert kept.read_bytes() == garbage
    assert log.moved_aside == [str(kept)]
    assert log.state == "recording"
    assert caplog.text.count("is corrupt") == 1
    log.record(rec(model="after"))
    assert log.flush_now() == 1
    assert [row["model"] for row in log.query()] == ["after"]
    log.close_now()


def test_activity_rejects_nonsense_limits() -> None:
    with pytest.raises(ValueError, match="max_rows"):
        ActivityLog(":memory:", max_rows=0)
    with pytest.raises(ValueError, match="batch_seconds"):
        ActivityLog(":memory:", batch_seconds=0)


def test_activity_finds_a_request_by_its_id(tmp_path: Path) -> None:
    log = ActivityLog(tmp_path / "ids.db")
    for index in range(3):
        log.record(rec(at=NOW + index, request_id=f"req-{index}"))
    log.flush_now()
    [row] = log.query(request_id="req-1")
    assert (row["request_id"], row["at"]) == ("req-1", NOW + 1)
    assert log.query(request_id="nope") == []
    log.close_now()
