"""Request filters end to end: the fake backend echoes what it received on every JSON route it
does not serve itself, so the body modelswap forwarded is checked exactly."""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Callable
from typing import Any

import pytest
from tests.e2e.conftest import Gateway, chat, fake_cmd, request

pytestmark = pytest.mark.e2e

StartGateway = Callable[..., Gateway]
JSON = {"Content-Type": "application/json"}

# Every JSON inference route the fake backend echoes.
ECHO_ROUTES = (
    "/v1/responses",
    "/v1/rerank",
    "/v1/reranking",
    "/rerank",
    "/reranking",
    "/v1/messages",
    "/v1/messages/count_tokens",
    "/completion",
    "/infill",
)

MODELS = f"""\
  qwen:
    cmd: {fake_cmd("--load-delay", "0")}
    aliases: ["qwen:think", "qwen:fast", plain]
    filters:
      stripParams: [top_k]
      defaultParams: {{temperature: 0.6, max_tokens: 3}}
      setParams: {{seed: 42}}
    aliasFilters:
      "qwen:think":
        setParams: {{chat_template_kwargs: {{enable_thinking: true}}}}
      "qwen:fast":
        stripParams: [seed]
        setParams: {{chat_template_kwargs: {{enable_thinking: false}}, temperature: 0.2}}
  raw:
    cmd: {fake_cmd("--load-delay", "0")}
"""


def echoed(gw: Gateway, path: str, sent: bytes, content_type: str = "application/json") -> bytes:
    reply = request(gw, "POST", path, sent, {"Content-Type": content_type})
    assert reply.status == 200, reply.body
    echo = reply.json()
    assert echo["path"] == path
    body = base64.b64decode(echo["body_b64"])
    assert echo["body_sha256"] == hashlib.sha256(body).hexdigest()
    return body


def body(model: str, **extra: Any) -> bytes:
    return json.dumps({"model": model, "query": "q", **extra}).encode()


@pytest.mark.parametrize("path", ECHO_ROUTES)
def test_filters_apply_on_every_json_route(gateway: StartGateway, path: str) -> None:
    gw = gateway(MODELS)
    sent = body("qwen", top_k=40, temperature=0.9, seed=1)
    assert json.loads(echoed(gw, path, sent)) == {
        "model": "qwen",
        "query": "q",
        "temperature": 0.9,  # the client's value: defaults only fill gaps
        "seed": 42,
        "max_tokens": 3,
    }


def test_alias_presets_layer_on_the_models_filters(gateway: StartGateway) -> None:
    gw = gateway(MODELS)
    think = json.loads(echoed(gw, "/v1/responses", body("qwen:think", top_k=1)))
    assert think == {
        "model": "qwen:think",  # as llama-swap: the name the client sent (no useModelName)
        "query": "q",
        "temperature": 0.6,
        "max_tokens": 3,
        "seed": 42,
        "chat_template_kwargs": {"enable_thinking": True},
    }
    fast = json.loads(echoed(gw, "/v1/messages", body("qwen:fast", temperature=0.9)))
    assert fast == {
        "model": "qwen:fast",
        "query": "q",
        "temperature": 0.2,
        "max_tokens": 3,
        "chat_template_kwargs": {"enable_thinking": False},
    }
    # An alias without its own filters gets the model's only; all three are one process.
    plain = json.loads(echoed(gw, "/v1/rerank", body("plain")))
    assert plain == {
        "model": "plain",
        "query": "q",
        "temperature": 0.6,
        "max_tokens": 3,
        "seed": 42,
    }
    assert set(gw.running()) == {"qwen"}


def test_unchanged_bodies_are_forwarded_byte_for_byte(gateway: StartGateway) -> None:
    gw = gateway(MODELS)
    # Every filter is already satisfied: nothing changes, the odd spacing survives.
    sent = b'{ "model" : "qwen",\n "temperature":0.9, "max_tokens" : 3, "seed":42 }'
    for path in ECHO_ROUTES:
        assert echoed(gw, path, sent) == sent
    # A model without filters.
    sent = b'{"query" : "caf\xc3\xa9", "model":"raw", "top_k": 40 }'
    assert echoed(gw, "/v1/rerank", sent) == sent


def test_multipart_bodies_are_not_filtered(gateway: StartGateway) -> None:
    gw = gateway(MODELS)
    boundary = "----filtersBoundary"
    sent = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="model"\r\n\r\nqwen\r\n'
        f'--{boundary}\r\nContent-Disposition: form-data; name="top_k"\r\n\r\n40\r\n'
        f"--{boundary}--\r\n"
    ).encode()
    content_type = f"multipart/form-data; boundary={boundary}"
    assert echoed(gw, "/v1/audio/transcriptions", sent, content_type) == sent


def test_filters_reach_chat_completions(gateway: StartGateway) -> None:
    # The fake answers chat itself; its usage shows the max_tokens it was sent.
    gw = gateway(MODELS)
    reply = chat(gw, "qwen")
    assert reply.status == 200, reply.body
    assert reply.json()["usage"]["completion_tokens"] == 3
    reply = chat(gw, "raw", max_tokens=5)
    assert reply.json()["usage"]["completion_tokens"] == 5


def test_exported_config_shows_filters(gateway: StartGateway) -> None:
    gw = gateway(MODELS)
    models = gw.get_json("/api/config")["models"]
    assert isinstance(models, dict)
    qwen = models["qwen"]
    assert qwen["filters"] == {
        "stripParams": ["top_k"],
        "setParams": {"seed": 42},
        "defaultParams": {"temperature": 0.6, "max_tokens": 3},
    }
    assert qwen["aliasFilters"]["qwen:fast"]["stripParams"] == ["seed"]
