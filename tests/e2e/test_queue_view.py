"""``GET /api/queue`` end to end (issue 40): a request really waiting in the scheduler (its
model held in ``starting`` by a fake backend that starts only when the test says), each key's
use against its limits by name, the read scope, and the per-key series of ``/metrics``."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from tests.e2e.conftest import Gateway, Reply, chat_body, held_cmd, request

pytestmark = pytest.mark.e2e

StartGateway = Callable[..., Gateway]
READER = {"Authorization": "Bearer sk-queue-reader-0001"}
ANA = {"Authorization": "Bearer sk-queue-ana-000001"}
KEYS = (
    "apiKeys:\n"
    "  - {key: sk-queue-reader-0001, name: reader, scopes: [read]}\n"
    "  - key: sk-queue-ana-000001\n"
    "    name: ana\n"
    "    scopes: [inference]\n"
    "    quota: {concurrency: 2, requestsPerMinute: 30, tokensPerDay: 100000}\n"
    "  - {key: sk-queue-evals-0001, name: evals, scopes: [inference], priority: batch,"
    " weight: 3}\n"
)


def queue(gw: Gateway, headers: dict[str, str] = READER) -> dict[str, Any]:
    reply = request(gw, "GET", "/api/queue", headers=headers)
    assert reply.status == 200, reply.body
    assert b"sk-queue" not in reply.body  # names, never keys
    data: dict[str, Any] = reply.json()
    return data


def test_a_request_waiting_for_its_model_is_listed_with_its_place(
    gateway: StartGateway, tmp_path: Path
) -> None:
    release = tmp_path / "release"
    gw = gateway(f"  slow:\n    cmd: {held_cmd(release)}\n", extra_top=KEYS)
    assert request(gw, "GET", "/api/queue", headers=ANA).status == 403  # an inference key
    empty = queue(gw)
    assert empty["waiting"] == []
    assert [k["key"] for k in empty["keys"]] == ["reader", "ana", "evals"]

    answers: list[Reply] = []
    body = chat_body("slow")
    sender = threading.Thread(
        target=lambda: answers.append(request(gw, "POST", "/v1/chat/completions", body, ANA))
    )
    sender.start()
    try:
        gw.wait_for(lambda: bool(queue(gw)["waiting"]))
        [row] = queue(gw)["waiting"]
        # The waiter is its key's, by name (ana's class and weight: the defaults).
        assert (row["key"], row["class"], row["weight"]) == ("ana", "interactive", 1.0)
        assert (row["model"], row["waits_for"], row["place"]) == ("slow", "start", 1)
        assert row["waited_seconds"] >= 0
        # Never started here: the default start time, less what the start has run.
        assert row["estimate_seconds"] is None or 0 < row["estimate_seconds"] <= 10
        assert row["says"].startswith("queued 1st for slow")
        # The same view through the MCP endpoint (llama-swap's stateless POST form).
        call = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": "queue__show_queue", "arguments": {}},
        }
        mcp_headers = {
            **READER,
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            "Mcp-Protocol-Version": "2026-07-28",
            "Mcp-Method": "tools/call",
            "Mcp-Name": "queue__show_queue",
        }
        reply = request(gw, "POST", "/api/mcp", json.dumps(call).encode(), mcp_headers)
        assert reply.status == 200, reply.body
        result = reply.json()["result"]
        assert not result.get("isError"), result
        assert '"waits_for": "start"' in result["content"][0]["text"]
    finally:
        release.touch()
        sender.join(timeout=120)
    assert not sender.is_alive()
    assert [a.status for a in answers] == [200]
    assert queue(gw)["waiting"] == []

    keys = {k["key"]: k for k in queue(gw)["keys"]}
    assert keys["evals"]["class"] == "batch"
    assert keys["evals"]["weight"] == 3.0
    assert keys["evals"]["limits"] == []
    ana = {w["limit"]: w["value"] for w in keys["ana"]["limits"]}
    assert ana == {"concurrency": 2, "requests": 30, "tokens-day": 100000}
    # Its one request counted once (waiting never counts again), its place given back, and
    # the backend's usage charged (the buckets refill meanwhile: their levels are not exact).
    assert (keys["ana"]["requests"], keys["ana"]["in_flight"]) == (1, 0)
    assert keys["ana"]["tokens"] > 0

    metrics = request(gw, "GET", "/metrics", headers=READER)
    assert metrics.status == 200
    found: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(metrics.body.decode()):
        for sample in family.samples:
            labels = tuple(sorted(sample.labels.items()))
            found.setdefault(sample.name, {})[labels] = sample.value
    remaining = found["modelswap_key_quota_remaining"]
    assert 29 <= remaining[(("key", "ana"), ("limit", "requests"))] <= 30
    assert not any(dict(labels)["key"] == "evals" for labels in remaining)  # no quota
    waited = found["modelswap_queue_wait_seconds_count"]
    assert waited[(("key", "ana"), ("model", "slow"))] == 1
    requests = found["modelswap_requests_total"]
    assert any(("key", "ana") in labels for labels in requests)  # the request's key's name
