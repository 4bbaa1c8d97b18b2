"""Scenario 3: a backend hangs — never accepts, accepts and never answers, stops mid-stream, or
is just too slow. Each per-model timeout (``connect``, ``firstByte``, ``idleBetweenChunks``,
``total``) ends the request with a 504 (or, once the stream has begun, a final 504 error event)
and the right message, and the lease is freed: nothing stays in flight, the model unloads.

Each clock under test is short and the test asserts that it fired and why (the 504, its
message), and that it did not fire before it ran out (a lower bound, which load cannot break);
never how soon after it the answer came.
"""

from __future__ import annotations

import json
import time

import pytest
from tests.e2e.conftest import chat, fake_cmd, open_stream, stream_tokens
from tests.reliability.conftest import Launched, LaunchFn, Report, log_problems

pytestmark = pytest.mark.reliability

MODELS = (
    f"  blackhole:\n    cmd: {fake_cmd('--blackhole-after-ready')}\n"
    "    timeouts: {connect: 1}\n"
    f"  hang:\n    cmd: {fake_cmd('--hang')}\n"
    "    timeouts: {firstByte: 1}\n"
    f"  stall:\n    cmd: {fake_cmd('--stall-after', '3', '--tokens', '10')}\n"
    "    timeouts: {idleBetweenChunks: 1}\n"
    f"  slow:\n    cmd: {fake_cmd('--tokens', '20', '--tps', '5')}\n"
    "    timeouts: {total: 1.5}\n"
)
GROUPS = "groups:\n  all:\n    members: [blackhole, hang, stall, slow]\n    swap: false\n"


def gateway_error(body: bytes) -> dict[str, object]:
    error = json.loads(body)["error"]
    assert isinstance(error, dict)
    assert set(error) >= {"message", "type", "code", "param"}
    return error


def assert_freed(gw: Launched, model: str) -> None:
    """No request of ``model`` is in flight or queued, and it unloads (an unload waits for
    in-flight requests, up to the 600 s drainTimeout, so a leaked lease would hang it past the
    post's own timeout, which raises)."""
    row = gw.running()[model]
    assert row["in_flight"] == 0, row
    assert row["queued"] == 0, row
    status, _, body = gw.post(f"/api/models/unload/{model}", b"")
    assert status == 200, body
    assert model not in gw.running()


def timed_chat(gw: Launched, model: str, **extra: object) -> tuple[int, bytes, float, bool]:
    started = time.monotonic()
    reply = chat(gw, model, **extra)
    took = time.monotonic() - started
    return reply.status, reply.body, took, reply.headers.get("X-Modelswap-Error") == "1"


def test_each_timeout_ends_the_request_with_504_and_frees_the_lease(
    launch: LaunchFn, report: Report
) -> None:
    gw = launch(MODELS, extra_top=GROUPS)
    for model in ("blackhole", "hang", "stall", "slow"):
        assert gw.post(f"/api/models/load/{model}", b"")[0] == 200
    gw.wait_for(lambda: "blackhole on" in gw.get_text("/logs/blackhole"))
    took: dict[str, float] = {}

    # connect: the backend's listen queue is full; the SYN is dropped, connect() hangs.
    status, body, took["connect"], ours = timed_chat(gw, "blackhole")
    assert (status, ours) == (504, True), body
    error = gateway_error(body)
    assert error["code"] == "upstream_timeout"
    assert error["message"] == "Backend for model `blackhole` timed out: no connection within 1 s."
    assert took["connect"] >= 0.9  # not before its second was up

    # firstByte: accepted, never answered.
    status, body, took["firstByte"], ours = timed_chat(gw, "hang")
    assert (status, ours) == (504, True), body
    error = gateway_error(body)
    assert error["code"] == "upstream_timeout"
    assert error["message"] == "Backend for model `hang` timed out: no response within 1 s."
    assert took["firstByte"] >= 0.9

    # idleBetweenChunks: three tokens, then silence; the stream ends with a 504 error event.
    started = time.monotonic()
    with open_stream(gw, "stall") as resp:
        assert resp.status == 200
        tokens, events = stream_tokens(resp)
    took["idleBetweenChunks"] = time.monotonic() - started
    assert tokens == ["tok0 ", "tok1 ", "tok2 "]
    error = json.loads(events[-1])["error"]
    assert error["code"] == "upstream_timeout"
    assert error["message"] == (
        "Backend for model `stall` sent nothing for 1 s; the response was cut."
    )
    assert took["idleBetweenChunks"] >= 0.9

    # total, before the answer began: 20 tokens at 5/s take 4 s; the ceiling is 1.5 s.
    status, body, took["total"], ours = timed_chat(gw, "slow")
    assert (status, ours) == (504, True), body
    error = gateway_error(body)
    assert error["code"] == "upstream_timeout"
    assert error["message"] == (
        "Backend for model `slow` timed out: no complete response within 1.5 s."
    )
    assert took["total"] >= 1.4

    for model in ("blackhole", "hang", "stall", "slow"):
        assert_freed(gw, model)
    assert not log_problems(gw.log()), log_problems(gw.log())
    report(timeouts_s={k: round(v, 2) for k, v in took.items()})


def test_total_timeout_mid_stream_ends_with_a_504_error_event(
    launch: LaunchFn, report: Report
) -> None:
    """Once the stream has begun, ``total`` cannot turn into a 504 status any more: the client
    gets the tokens so far, then a final 504 error event, as for every other mid-stream break."""
    gw = launch(MODELS, extra_top=GROUPS)
    started = time.monotonic()
    with open_stream(gw, "slow") as resp:
        assert resp.status == 200
        tokens, events = stream_tokens(resp)
    took = time.monotonic() - started
    assert 1 <= len(tokens) < 20, tokens
    assert events[-1] != "[DONE]"
    last = json.loads(events[-1])
    assert "error" in last, f"the stream ended without an error event after {tokens}"
    assert last["error"]["code"] == "upstream_timeout"
    assert "no complete response within 1.5 s" in last["error"]["message"], last
    assert took >= 1.4
    assert_freed(gw, "slow")
    assert not log_problems(gw.log()), log_problems(gw.log())
    report(tokens_before_cut=len(tokens), cut_after_s=round(took, 2))
