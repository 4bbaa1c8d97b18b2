"""Anthropic's API through the gateway, driven by the ``anthropic`` SDK: real llama.cpp
(SmolLM2) answers ``/v1/messages`` plain and streamed and ``count_tokens``; every error the
gateway itself authors — unknown model, auth, scope, a start that fails mid-stream — arrives
in Anthropic's shape, so the SDK's exception says what went wrong (issue 18)."""

from __future__ import annotations

import http.client
import json
from collections.abc import Callable, Iterator

import anthropic
import pytest
from tests.e2e.conftest import HANG, Gateway, fake_cmd, llamacpp_cmd

pytestmark = pytest.mark.e2e

KEY = "sk-anthropic-inference-0123456"
READ_ONLY = "sk-anthropic-read-only-0123456"
MODELS = f"""
  smollm2:
    cmd: {llamacpp_cmd(2048)}
  broken:
    cmd: {fake_cmd("--load-delay", "1.5", "--fail-start")}
"""
KEYS = (
    f"apiKeys:\n  - {{key: {KEY}, name: app, scopes: [inference]}}\n"
    f"  - {{key: {READ_ONLY}, name: ops, scopes: [read]}}\n"
)
SAY = [{"role": "user", "content": "Name one colour."}]


@pytest.fixture
def client() -> Iterator[Callable[..., anthropic.Anthropic]]:
    made: list[anthropic.Anthropic] = []

    def make(gw: Gateway, key: str = KEY) -> anthropic.Anthropic:
        made.append(
            anthropic.Anthropic(base_url=gw.url(""), api_key=key, max_retries=0, timeout=HANG)
        )
        return made[-1]

    yield make
    for each in made:
        each.close()


@pytest.fixture
def gw(gateway: Callable[..., Gateway]) -> Gateway:
    return gateway(MODELS, extra_top=KEYS)


def test_messages_plain_streamed_and_count_tokens_through_llamacpp(
    gw: Gateway, client: Callable[..., anthropic.Anthropic]
) -> None:
    sdk = client(gw)
    raw = sdk.messages.with_raw_response.create(
        model="smollm2",
        max_tokens=12,
        extra_body={"temperature": 0},
        messages=SAY,  # type: ignore[arg-type]
    )
    # llama.cpp sends CORS headers of its own (an empty Allow-Origin); the gateway owns CORS.
    assert not [name for name in raw.headers if name.lower().startswith("access-control-")]
    assert raw.headers["x-request-id"]
    plain = raw.parse()
    text = "".join(block.text for block in plain.content if block.type == "text")
    assert text.strip()
    assert plain.usage.output_tokens > 0
    with sdk.messages.stream(
        model="smollm2",
        max_tokens=12,
        extra_body={"temperature": 0},
        messages=SAY,  # type: ignore[arg-type]
    ) as stream:
        streamed = stream.get_final_text()
    assert streamed == text  # temperature 0: the same answer, relayed event by event
    counted = sdk.messages.count_tokens(model="smollm2", messages=SAY)  # type: ignore[arg-type]
    assert counted.input_tokens > 0


def _fails_both_ways(sdk: anthropic.Anthropic, model: str) -> list[anthropic.APIStatusError]:
    """The error of ``messages.create`` and of ``messages.count_tokens`` for ``model``."""
    errors: list[anthropic.APIStatusError] = []
    try:
        sdk.messages.create(model=model, max_tokens=4, messages=SAY)  # type: ignore[arg-type]
    except anthropic.APIStatusError as exc:
        errors.append(exc)
    try:
        sdk.messages.count_tokens(model=model, messages=SAY)  # type: ignore[arg-type]
    except anthropic.APIStatusError as exc:
        errors.append(exc)
    assert len(errors) == 2, "both calls must fail"
    return errors


def test_gateway_errors_are_anthropic_shaped(
    gw: Gateway, client: Callable[..., anthropic.Anthropic]
) -> None:
    cases: list[tuple[anthropic.Anthropic, str, type[anthropic.APIStatusError], str, str]] = [
        (client(gw), "smolm2", anthropic.NotFoundError, "not_found_error", "smolm2"),
        (
            client(gw, "sk-wrong-0000000000"),
            "smollm2",
            anthropic.AuthenticationError,
            "authentication_error",
            "Invalid API key",
        ),
        (
            client(gw, READ_ONLY),
            "smollm2",
            anthropic.PermissionDeniedError,
            "permission_error",
            "lacks the `inference` scope",
        ),
    ]
    for sdk, model, kind, error_type, says in cases:
        for error in _fails_both_ways(sdk, model):
            assert isinstance(error, kind)
            assert error.type == error_type, error.body
            assert error.api_message is not None  # what the body's error.message says
            assert says in error.api_message
            body = error.body
            assert isinstance(body, dict)
            assert body["type"] == "error"
            assert set(body["error"]) <= {"type", "message", "details"}
            assert error.response.headers["x-modelswap-error"] == "1"
            assert error.request_id == error.response.headers["x-request-id"]  # ours, as its own
    details = _fails_both_ways(client(gw), "smolm2")[0].body["error"]["details"]  # type: ignore[index]
    assert details["error_code"] == "model_not_found"
    assert "smollm2" in details["suggestions"]


def test_a_request_the_http_parser_refuses_is_anthropic_shaped_on_anthropic_routes(
    gateway: Callable[..., Gateway],
) -> None:
    """An unknown method is refused by the HTTP parser before any route runs; the error still
    takes the shape of the API its path speaks (the fuzz suite found it on /v1/messages)."""
    gw = gateway(f"  fake:\n    cmd: {fake_cmd()}\n")
    for path, anthropic_route in (
        ("/v1/messages", True),
        ("/v/messages/count_tokens?beta=true", True),
        ("/v1/chat/completions", False),
    ):
        conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=HANG)
        try:
            conn.request("FOO", path)
            resp = conn.getresponse()
            status, data = resp.status, json.loads(resp.read())
            assert resp.headers["X-Modelswap-Error"] == "1"
        finally:
            conn.close()
        assert status == 400, data
        if anthropic_route:
            assert data["type"] == "error", data
            assert data["error"]["type"] == "invalid_request_error"
            assert data["error"]["details"]["error_code"] == "http_400"
        else:
            assert data["error"]["code"] == "http_400", data


def test_a_start_that_fails_mid_stream_ends_with_anthropic_error_event(
    gw: Gateway, client: Callable[..., anthropic.Anthropic]
) -> None:
    """The start takes longer than a second, so the stream opened (200) with waiting comments:
    the failure is its final ``event: error``, which the SDK raises as an API error."""
    stream = client(gw).messages.stream(model="broken", max_tokens=4, messages=SAY)  # type: ignore[arg-type]
    with pytest.raises(anthropic.APIStatusError) as info, stream as events:
        events.get_final_text()
    body = info.value.body
    assert isinstance(body, dict), body
    assert body["type"] == "error"
    assert body["error"]["type"] == "overloaded_error"
    assert "broken" in body["error"]["message"]
