"""Issue 41, the recording side: a row says why — its method, the error's message and the rule
that refused it — a client's own stop is ``stopped`` (no error), a CORS preflight is counted
apart; the store keeps all of it (schema v10, older rows judged again), the metrics and the
request's log line say the same."""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Mapping
from contextlib import closing
from dataclasses import replace
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from modelswap.events import EventBus
from modelswap.observe.activity import MIGRATIONS, ActivityLog
from modelswap.observe.metrics import Metrics, ModelView
from modelswap.observe.observer import Observer
from modelswap.observe.records import RequestRecord

NOW = 1_750_000_000.0
POLICY = {
    "kind": "policy",
    "program": "hooks.on_request",
    "line": 1,
    "rule": 'deny 400 "messages is required" when messages is missing',
}
LIMIT = {"kind": "limit", "name": "globalConcurrencyLimit", "value": 2, "in_flight": 2}
CORS = {"kind": "cors", "origin": "https://evil.example", "allowed": False}


def rec(**changes: object) -> RequestRecord:
    base = RequestRecord(
        at=NOW,
        key_name=None,
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
        method="POST",
    )
    return replace(base, **changes)  # type: ignore[arg-type]


def no_views() -> Mapping[str, ModelView]:
    return {}


def test_the_outcome_of_a_stop_a_cancel_and_a_preflight() -> None:
    assert rec(status=499, completion_tokens=7).outcome == "stopped"
    assert rec(status=499, error_code="request_cancelled").outcome == "error"
    assert rec(status=499, error_code="upstream_error").outcome == "error"
    assert rec(status=204, method="OPTIONS").outcome == "preflight"
    assert rec(status=403, method="OPTIONS", rule=CORS).outcome == "preflight"
    assert rec(status=200, method=None).outcome == "ok"  # a row from before v10


def test_the_why_fields_round_trip_through_the_store(tmp_path: Path) -> None:
    log = ActivityLog(tmp_path / "state" / "activity.db")
    denied = rec(
        status=400,
        error_code="policy_denied",
        error_message="messages is required",
        rule=POLICY,
        completion_tokens=None,
    )
    refused = rec(
        status=429,
        model=None,
        requested="qwen",
        error_code="concurrency_limit",
        error_message="Too many requests",
        rule=LIMIT,
    )
    preflight = rec(status=403, model=None, method="OPTIONS", rule=CORS, streamed=False)
    stopped = rec(status=499, completion_tokens=7)
    for row in (denied, refused, preflight, stopped):
        log.record(row)
    assert log.flush_now() == 4
    rows = log.query()
    for stored, sent in zip(rows, (stopped, preflight, refused, denied), strict=True):
        assert {k: v for k, v in stored.items() if k != "id"} == sent.as_dict()
    assert [r["outcome"] for r in rows] == ["stopped", "preflight", "error", "error"]
    assert rows[3]["rule"] == POLICY
    assert [r["id"] for r in log.query(outcome="stopped")] == [rows[0]["id"]]
    assert [r["method"] for r in log.query(outcome="preflight")] == ["OPTIONS"]
    log.close_now()


def test_a_version_9_database_gains_the_why_columns_and_its_499s_become_stopped(
    tmp_path: Path,
) -> None:
    path = tmp_path / "v9.db"
    with closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT)")
        for step in MIGRATIONS[:9]:
            step(conn)
        conn.execute("INSERT INTO meta VALUES ('schema_version', '9')")
        for status, code, outcome in (
            (499, None, "error"),  # a client's stop, stored as an error before v10
            (499, "request_cancelled", "error"),  # an operator's cancel
            (200, None, "ok"),
        ):
            conn.execute(
                "INSERT INTO requests (at, route, status, streamed, duration, bytes_in,"
                " bytes_out, error_code, outcome) VALUES (?, '/v1/chat/completions', ?, 1,"
                " 1.0, 0, 0, ?, ?)",
                (NOW, status, code, outcome),
            )
    log = ActivityLog(path)
    rows = log.query()
    log.close_now()
    assert [(r["status"], r["error_code"], r["outcome"]) for r in rows] == [
        (200, None, "ok"),
        (499, "request_cancelled", "error"),
        (499, None, "stopped"),
    ]
    assert all((r["method"], r["error_message"], r["rule"]) == (None, None, None) for r in rows)


def samples(metrics: Metrics) -> dict[str, dict[frozenset[tuple[str, str]], float]]:
    out: dict[str, dict[frozenset[tuple[str, str]], float]] = {}
    for family in text_string_to_metric_families(metrics.exposition().decode()):
        for s in family.samples:
            out.setdefault(s.name, {})[frozenset(s.labels.items())] = s.value
    return out


def test_a_preflight_is_counted_apart_and_a_stop_is_no_error() -> None:
    metrics = Metrics(no_views)
    metrics.request_finished(rec(status=204, method="OPTIONS", rule={**CORS, "allowed": True}))
    metrics.request_finished(rec(status=403, method="OPTIONS", rule=CORS))
    metrics.request_finished(rec(status=499, completion_tokens=7))
    seen = samples(metrics)
    preflights = seen["modelswap_cors_preflights_total"]
    chat = "/v1/chat/completions"
    assert preflights == {
        frozenset({("route", chat), ("allowed", "true")}): 1,
        frozenset({("route", chat), ("allowed", "false")}): 1,
    }
    requests = seen["modelswap_requests_total"]
    assert list(requests.values()) == [1]  # the stop; no preflight among the requests
    [labels] = requests
    assert ("outcome", "stopped") in labels
    completion = frozenset({("model", "qwen"), ("kind", "completion"), ("key", "anonymous")})
    assert seen["modelswap_tokens_total"][completion] == 7  # what it received counts


@pytest.mark.parametrize(
    ("row", "said"),
    [
        (
            rec(status=400, error_code="policy_denied", rule=POLICY),
            "-> 400 policy_denied in 2.500 s: denied by hooks.on_request line 1: deny 400 "
            '"messages is required" when messages is missing',
        ),
        (
            rec(
                status=429, model=None, requested="qwen", error_code="concurrency_limit", rule=LIMIT
            ),
            "/v1/chat/completions qwen -> 429 concurrency_limit in 2.500 s: "
            "globalConcurrencyLimit 2 (2 in flight)",
        ),
    ],
)
def test_the_request_log_line_names_the_rule(
    row: RequestRecord, said: str, caplog: pytest.LogCaptureFixture
) -> None:
    observer = Observer(Metrics(no_views), None, EventBus())
    with caplog.at_level(logging.INFO, logger="modelswap.observe.observer"):
        observer.request_finished(row)
    [line] = [r.getMessage() for r in caplog.records]
    assert line.endswith(said), line
