"""The activity record keeps what a Swap Policy Language program wrote into ``context.<key>``
(issue 29): llama-swap's activity ``metadata``, a JSON object of strings."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from dataclasses import replace
from pathlib import Path

from modelswap.http.routes.captures import activity_entry
from modelswap.observe.activity import ActivityLog
from modelswap.observe.records import RequestRecord

BASE = RequestRecord(
    at=1_750_000_000.0,
    key_name=None,
    model="qwen",
    route="/v1/chat/completions",
    status=200,
    streamed=False,
    prompt_tokens=None,
    completion_tokens=None,
    ttft=None,
    duration=0.1,
    bytes_in=10,
    bytes_out=20,
    error_code=None,
)


def test_metadata_round_trips_and_is_absent_when_none_was_written(tmp_path: Path) -> None:
    log = ActivityLog(tmp_path / "activity.db")
    tagged = replace(BASE, metadata={"workload": "coding", "tier": "gold"})
    log.record(tagged)
    log.record(BASE)
    assert log.flush_now() == 2
    plain, stored = log.query()
    log.close_now()
    assert stored["metadata"] == {"tier": "gold", "workload": "coding"}
    assert {k: v for k, v in stored.items() if k != "id"} == tagged.as_dict()
    assert "metadata" not in plain
    assert "metadata" not in BASE.as_dict()
    assert activity_entry(stored)["metadata"] == {"tier": "gold", "workload": "coding"}
    assert "metadata" not in activity_entry(plain)


def test_an_older_database_gains_the_column_and_keeps_its_rows(tmp_path: Path) -> None:
    path = tmp_path / "activity.db"
    log = ActivityLog(path)
    log.record(BASE)
    assert log.flush_now() == 1
    log.close_now()
    with closing(sqlite3.connect(path)) as conn:  # as version 8 left it (metadata is v9)
        for column in ("metadata", "method", "error_message", "rule"):  # v9, v10
            conn.execute(f"ALTER TABLE requests DROP COLUMN {column}")
        conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", ("8",))
        conn.commit()
    log = ActivityLog(path)
    log.record(replace(BASE, metadata={"k": "v"}))
    assert log.flush_now() == 1
    newest, oldest = log.query()
    log.close_now()
    assert newest["metadata"] == {"k": "v"}
    assert "metadata" not in oldest
