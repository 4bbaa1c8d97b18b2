"""The gateway's OpenAI error envelope in Anthropic's shape (issue 18)."""

from __future__ import annotations

import json

from modelswap.http.error_responses import anthropic_envelope, envelope, error_code_of
from modelswap.http.relay.sse import error_event


def test_each_status_gets_anthropics_type_and_the_code_goes_into_details() -> None:
    openai = envelope(
        "No model `x`.", 404, code="model_not_found", param="model", suggestions=["y"]
    )
    shaped = anthropic_envelope(openai, 404)
    assert shaped == {
        "type": "error",
        "error": {
            "type": "not_found_error",
            "message": "No model `x`.",
            "details": {"error_code": "model_not_found", "param": "model", "suggestions": ["y"]},
        },
    }
    assert error_code_of(shaped) == error_code_of(openai) == "model_not_found"
    types = {
        status: anthropic_envelope(envelope("m", status), status)["error"]["type"]  # type: ignore[index]
        for status in (400, 401, 403, 413, 429, 500, 502, 503, 504)
    }
    assert types == {
        400: "invalid_request_error",
        401: "authentication_error",
        403: "permission_error",
        413: "request_too_large",
        429: "rate_limit_error",
        500: "api_error",
        502: "api_error",
        503: "overloaded_error",
        504: "timeout_error",
    }


def test_stream_error_event_is_anthropics_on_its_routes_only() -> None:
    openai = envelope("backend broke", 502, code="upstream_error")
    anthropic = error_event("/v1/messages", openai, 502)
    assert anthropic.startswith(b"event: error\ndata: ")
    assert anthropic.endswith(b"\n\n")
    assert json.loads(anthropic.split(b"data: ", 1)[1])["error"]["type"] == "api_error"
    assert error_event("/v1/chat/completions", openai, 502) == (
        b"data: " + json.dumps(openai).encode() + b"\n\n"
    )
