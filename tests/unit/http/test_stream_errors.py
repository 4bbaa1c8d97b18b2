"""Errors inside a 200 event stream: which lines are a backend's error event (recorded as the
request's error), the hint carried inside the event when headers are gone, and what the request's
observation keeps of them."""

from __future__ import annotations

import json

from modelswap.http.relay.relay import holds_error_event, with_hint
from modelswap.http.request_obs import RequestObs
from modelswap.redact import Redactor

HINT = "start vLLM with --enable-auto-tool-choice --tool-call-parser <parser>"


def test_a_backends_error_event_is_told_from_content_that_mentions_error() -> None:
    error = b'data: {"error": {"message": "CUDA out of memory", "code": 500}}\n\n'
    assert holds_error_event(b'data: {"choices": []}\n\n' + error)
    assert holds_error_event(b'event: error\ndata: {"type": "error", "error": {"x": 1}}\n\n')
    # A tool named "error", text quoting "error", a cut line: not error events.
    tool = {"choices": [{"delta": {"tool_calls": [{"function": {"name": "error"}}]}}]}
    assert not holds_error_event(b"data: " + json.dumps(tool).encode() + b"\n\n")
    text = {"choices": [{"delta": {"content": 'say "error"'}}]}
    assert not holds_error_event(b"data: " + json.dumps(text).encode() + b"\n\n")
    assert not holds_error_event(b'data: {"error": {"message": "cut sh')
    assert not holds_error_event(b'data: {"error": null}\n\n')


def test_the_hint_goes_beside_the_message_and_at_its_end() -> None:
    body = {"error": {"message": "tools need a parser", "type": "BadRequestError", "code": 400}}
    out = json.loads(with_hint(body, HINT, Redactor()))
    assert out["error"]["hint"] == HINT
    assert out["error"]["message"] == f"tools need a parser Hint: {HINT}."
    assert (out["error"]["type"], out["error"]["code"]) == ("BadRequestError", 400)
    assert body["error"]["message"] == "tools need a parser"  # the input is left alone
    flat = json.loads(with_hint({"error": "tools need a parser"}, HINT, Redactor()))
    assert flat == {"error": f"tools need a parser Hint: {HINT}.", "hint": HINT}


def test_the_first_error_event_is_the_requests_error_and_its_bytes_are_counted() -> None:
    obs = RequestObs(response_limit=1000)
    obs.wrote(b": loading model m\n\n")
    obs.error_event("utilization_guard")
    obs.error_event("upstream_error")  # a later one does not replace it
    obs.wrote(b'data: {"error": {}}\n\n')
    assert obs.error_code == "utilization_guard"
    assert obs.bytes_out == len(b': loading model m\n\ndata: {"error": {}}\n\n')
    assert bytes(obs.response_body).startswith(b": loading model m")
    unnamed = RequestObs()
    unnamed.error_event(None)
    assert unnamed.error_code == "upstream_error"
