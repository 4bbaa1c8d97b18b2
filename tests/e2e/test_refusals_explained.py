"""Issue 41: Activity answers "why" for every non-2xx and every error outcome — a code, a
message and, for a refusal of the gateway's own, the rule behind it — driven through the real
gateway (``python -m modelswap serve``, fake backends that answer as llama.cpp does) and read
back from ``GET /api/activity``.

The backend's errors, the gateway's own 404/400/503 and a client's own stop run on both doors
(the ``door`` fixture); a policy's deny, ``globalConcurrencyLimit`` and CORS preflights, which
aiohttp's door alone serves (the fast door hands such a gateway's requests over), run once with
a capture on.
"""

from __future__ import annotations

import http.client
import json
from collections.abc import Callable
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from tests.e2e.conftest import (
    HANG,
    Door,
    Gateway,
    chat_body,
    fake_cmd,
    load_model,
    next_event,
    request,
)

pytestmark = pytest.mark.e2e

StartGateway = Callable[..., Gateway]
JSON = {"Content-Type": "application/json"}
CHAT = "/v1/chat/completions"
STALL_AFTER = 3  # the tokens a stopped client receives before the stream stalls
ORIGIN = "https://app.example"


def models() -> str:
    return (
        f"  ok:\n    cmd: {fake_cmd('--load-delay', '0.1', '--llamacpp-errors')}\n"
        f"  slow:\n    cmd: {fake_cmd('--stall-after', str(STALL_AFTER), '--tokens', '50')}\n"
        f"  broken:\n    cmd: {fake_cmd('--fail-start')}\n"
        f"  crashy:\n    cmd: {fake_cmd('--crash-after', '1')}\n"
    )


def post(gw: Gateway, path: str, body: dict[str, Any] | bytes) -> int:
    sent = body if isinstance(body, bytes) else json.dumps(body).encode()
    return request(gw, "POST", path, sent, JSON).status


def rows_when(gw: Gateway, count: int) -> list[dict[str, Any]]:
    """The activity log's rows, oldest first, once it holds ``count`` (written in batches)."""

    def rows() -> list[dict[str, Any]]:
        data = gw.get_json("/api/activity?limit=100")["data"]
        assert isinstance(data, list)
        return list(reversed(data))

    gw.wait_for(lambda: len(rows()) >= count)
    return rows()


def stop_mid_stream(gw: Gateway, model: str) -> http.client.HTTPConnection:
    """A streaming chat to ``model`` (which stalls after STALL_AFTER tokens) whose client has
    read every token it sent; the caller closes the connection: the client's own stop."""
    conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=HANG)
    conn.request("POST", CHAT, chat_body(model, stream=True), JSON)
    resp = conn.getresponse()
    assert resp.status == 200
    tokens = 0
    while tokens < STALL_AFTER:
        event = next_event(resp)
        assert event is not None
        assert event != "[DONE]"
        delta = json.loads(event)["choices"][0]["delta"]
        tokens += bool(delta.get("content"))
    return conn


def explained(row: dict[str, Any]) -> None:
    """A row that answers why: an error outcome with a code and a message."""
    assert row["outcome"] == "error", row
    assert row["error_code"], row
    assert row["error_message"], row


def test_backend_and_gateway_errors_and_a_stop_explained_on_both_doors(
    door_gateway: StartGateway, door: Door
) -> None:
    gw = door_gateway(models())
    load_model(gw, "ok")  # (one model at a time: each load swaps the one before out)
    watch = door.watch(gw)
    assert post(gw, CHAT, {"model": "ok", "messages": "notalist"}) == 400
    assert post(gw, "/v1/embeddings", {"model": "ok", "input": "hi"}) == 501
    watch.answered(2)  # the fast door served the backend's errors itself
    assert post(gw, "/v1/images/generations", {"model": "ok", "prompt": "a cat"}) == 404
    load_model(gw, "crashy")
    watch = door.watch(gw)
    assert post(gw, CHAT, {"model": "crashy", "messages": []}) == 502
    watch.answered(1)  # the fast door's own error answer, recorded as aiohttp's door does
    assert post(gw, CHAT, {"model": "nope", "messages": []}) == 404
    assert post(gw, CHAT, b'{"model": "ok", "messages": [') == 400
    assert post(gw, CHAT, {"model": "broken", "messages": []}) == 503
    load_model(gw, "slow")
    stop_mid_stream(gw, "slow").close()

    rows = rows_when(gw, 8)
    assert [(r["route"], r["status"]) for r in rows] == [
        (CHAT, 400),
        ("/v1/embeddings", 501),
        ("/v1/images/generations", 404),
        (CHAT, 502),
        (CHAT, 404),
        (CHAT, 400),
        (CHAT, 503),
        (CHAT, 499),
    ]
    not_a_list, embeddings, images, crashed, unknown, bad_json, start, stopped = rows
    for row in rows[:-1]:
        explained(row)
        assert row["method"] == "POST"
        assert row["rule"] is None  # no rule of the gateway's refused these
    # The backend's own words: llama.cpp's type for its number, its message as it wrote it.
    assert not_a_list["error_code"] == "invalid_request_error"
    assert not_a_list["error_message"] == "`messages` must be a list"
    assert embeddings["error_code"] == "not_supported_error"
    assert "Start it with `--embeddings`" in embeddings["error_message"]
    assert (images["error_code"], images["error_message"]) == ("not_found_error", "File Not Found")
    assert all(r.get("response_body") is None for r in rows)  # no capture: no body
    assert crashed["error_code"] == "upstream_error"
    assert "crashy" in crashed["error_message"]
    assert unknown["error_code"] == "model_not_found"
    assert "`nope`" in unknown["error_message"]
    assert bad_json["error_code"]
    assert "JSON" in bad_json["error_message"]
    assert start["error_code"] not in (None, "internal_error")
    assert "broken" in start["error_message"]
    # The client's own stop: no error, and the tokens it received counted.
    assert stopped["outcome"] == "stopped"
    assert stopped["error_code"] is None
    assert stopped["completion_tokens"] == STALL_AFTER


def test_gateway_refusals_name_their_rule(gateway: StartGateway) -> None:
    gw = gateway(
        models(),
        extra_top=(
            "activity:\n  capture: true\n"
            "globalConcurrencyLimit: 1\n"
            f"security:\n  corsOrigins: [{json.dumps(ORIGIN)}]\n"
            "hooks:\n  on_request: |\n"
            '    set context.team to "t" when request.model matches /ok/\n'
            '    deny 403 "no secrets here" when secret is present\n'
        ),
    )
    assert post(gw, CHAT, {"model": "ok", "messages": [], "secret": "x"}) == 403
    preflight = {"Origin": ORIGIN, "Access-Control-Request-Method": "POST"}
    assert request(gw, "OPTIONS", CHAT, headers=preflight).status == 204
    refused = {**preflight, "Origin": "https://elsewhere.example"}
    assert request(gw, "OPTIONS", CHAT, headers=refused).status == 403
    assert post(gw, "/v1/embeddings", {"model": "ok", "input": "hi"}) == 501
    assert post(gw, "/v1/images/generations", {"model": "ok", "prompt": "a cat"}) == 404
    held = stop_mid_stream(gw, "slow")  # one in flight: globalConcurrencyLimit reached
    try:
        assert post(gw, CHAT, {"model": "ok", "messages": []}) == 429
    finally:
        held.close()

    rows = rows_when(gw, 7)
    assert [(r["method"], r["status"]) for r in rows] == [
        ("POST", 403),
        ("OPTIONS", 204),
        ("OPTIONS", 403),
        ("POST", 501),
        ("POST", 404),
        ("POST", 429),
        ("POST", 499),
    ]
    denied, allowed, forbidden, embeddings, images, limited, stopped = rows
    explained(denied)
    assert denied["error_code"] == "policy_denied"
    assert denied["error_message"] == "no secrets here"
    assert denied["rule"] == {
        "kind": "policy",
        "program": "hooks.on_request",
        "line": 2,
        "rule": 'deny 403 "no secrets here" when secret is present',
    }
    assert denied["metadata"] == {"team": "t"}
    # Preflights: a browser's check, with the origin as its rule; never requests.
    assert (allowed["outcome"], allowed["error_code"]) == ("preflight", None)
    assert allowed["rule"] == {"kind": "cors", "origin": ORIGIN, "allowed": True}
    assert forbidden["outcome"] == "preflight"
    assert forbidden["error_code"] == "cors_origin_not_allowed"
    assert "https://elsewhere.example" in forbidden["error_message"]
    assert forbidden["rule"] == {
        "kind": "cors",
        "origin": "https://elsewhere.example",
        "allowed": False,
    }
    # The backend's errors with a capture: the body too, on an image route as well.
    for row, said in ((embeddings, "not_supported_error"), (images, "File Not Found")):
        explained(row)
        assert said in row["response_body"]
        assert row["bytes_out"] == len(row["response_body"])
    explained(limited)
    assert limited["error_code"] == "concurrency_limit"
    assert limited["requested"] == "ok"
    assert limited["rule"] == {
        "kind": "limit",
        "name": "globalConcurrencyLimit",
        "value": 1,
        "in_flight": 1,
    }
    assert (stopped["outcome"], stopped["completion_tokens"]) == ("stopped", STALL_AFTER)

    counted = {"requests": 0.0, "true": 0.0, "false": 0.0}
    metrics = request(gw, "GET", "/metrics").body.decode()
    for family in text_string_to_metric_families(metrics):
        for sample in family.samples:
            if sample.name == "modelswap_requests_total":
                counted["requests"] += sample.value
            elif sample.name == "modelswap_cors_preflights_total":
                counted[sample.labels["allowed"]] += sample.value
    assert counted == {"requests": 5.0, "true": 1.0, "false": 1.0}
