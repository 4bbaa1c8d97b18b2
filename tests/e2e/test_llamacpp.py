"""End to end with the real llama.cpp server (xllamacpp) serving SmolLM2, driven by the
``openai`` SDK — the way users run modelswap."""

from __future__ import annotations

import contextlib
import http.client
import json
from collections.abc import Callable, Iterator

import openai
import pytest
from tests.e2e.conftest import Gateway, llamacpp_cmd

pytestmark = pytest.mark.e2e

MODELS = f"""
  smollm2:
    cmd: {llamacpp_cmd(2048)}
  smollm2-long:
    aliases: [smollm2-8k]
    cmd: {llamacpp_cmd(8192)}
  smollm2-embed:
    cmd: {llamacpp_cmd(2048, "--embeddings --pooling mean")}
"""

PROMPT = [{"role": "user", "content": "Name one colour."}]


@pytest.fixture
def gw(gateway: Callable[[str], Gateway]) -> Gateway:
    return gateway(MODELS)


def client(gw: Gateway) -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.url("/v1"), api_key="unused", max_retries=0, timeout=60)


def test_chat_non_stream_is_deterministic_at_temperature_zero(gw: Gateway) -> None:
    c = client(gw)
    answers = [
        c.chat.completions.create(
            model="smollm2",
            messages=PROMPT,
            max_tokens=12,
            temperature=0,  # type: ignore[arg-type]
        )
        for _ in range(2)
    ]
    text = answers[0].choices[0].message.content
    assert text
    assert text.strip()
    assert answers[1].choices[0].message.content == text
    assert answers[0].usage is not None
    assert answers[0].usage.completion_tokens > 0


def test_chat_stream_relays_every_chunk_and_matches_non_stream(gw: Gateway) -> None:
    c = client(gw)
    full = c.chat.completions.create(
        model="smollm2",
        messages=PROMPT,
        max_tokens=12,
        temperature=0,  # type: ignore[arg-type]
    )
    chunks = list(
        c.chat.completions.create(
            model="smollm2",
            messages=PROMPT,  # type: ignore[arg-type]
            max_tokens=12,
            temperature=0,
            stream=True,
        )
    )
    streamed = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert len(chunks) >= 3
    assert streamed == full.choices[0].message.content


@contextlib.contextmanager
def open_stream(gw: Gateway, body: dict[str, object]) -> Iterator[http.client.HTTPResponse]:
    """A raw streaming POST; leaving the block closes the connection (the client goes away)."""
    conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=60)
    try:
        conn.request(
            "POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"}
        )
        yield conn.getresponse()
    finally:
        conn.close()


def test_stream_response_headers_disable_proxy_buffering(gw: Gateway) -> None:
    body = {"model": "smollm2", "messages": PROMPT, "max_tokens": 2, "stream": True}
    with open_stream(gw, body) as resp:
        assert resp.status == 200
        assert resp.headers["content-type"].startswith("text/event-stream")
        assert resp.headers["x-accel-buffering"] == "no"
        lines = [line.strip() for line in resp.read().decode().splitlines() if line.strip()]
    assert lines[-1] == "data: [DONE]"


def test_completions_and_embeddings_routes(gw: Gateway) -> None:
    c = client(gw)
    comp = c.completions.create(model="smollm2", prompt="The sky is", max_tokens=5, temperature=0)
    assert comp.choices[0].text
    emb = c.embeddings.create(model="smollm2-embed", input=["hello", "world"])
    assert len(emb.data) == 2
    assert len(emb.data[0].embedding) == 576  # SmolLM2-135M's hidden size
    assert emb.data[0].embedding != emb.data[1].embedding


def test_swap_between_models_and_back(gw: Gateway) -> None:
    c = client(gw)
    c.chat.completions.create(model="smollm2", messages=PROMPT, max_tokens=2)  # type: ignore[arg-type]
    assert gw.running()["smollm2"]["state"] == "ready"
    pid_a = c.chat.completions.with_raw_response.create(
        model="smollm2",
        messages=PROMPT,
        max_tokens=1,  # type: ignore[arg-type]
    )
    assert pid_a.http_response.status_code == 200
    # The alias names the long model: the first server must stop, the second start.
    c.chat.completions.create(model="smollm2-8k", messages=PROMPT, max_tokens=2)  # type: ignore[arg-type]
    running = gw.running()
    assert set(running) == {"smollm2-long"}
    assert running["smollm2-long"]["state"] == "ready"
    c.chat.completions.create(model="smollm2", messages=PROMPT, max_tokens=2)  # type: ignore[arg-type]
    assert set(gw.running()) == {"smollm2"}
    models = {m.id: m for m in c.models.list()}
    assert models["smollm2"].model_extra is not None
    assert models["smollm2"].model_extra["state"] == "ready"
    assert models["smollm2-long"].model_extra is not None
    assert models["smollm2-long"].model_extra["state"] == "stopped"
    assert "smollm2-8k" not in models  # aliases are rows only with includeAliasesInList
    alias = c.models.retrieve("smollm2-8k")
    assert alias.model_extra is not None
    assert alias.model_extra["alias_for"] == "smollm2-long"


def test_client_disconnect_mid_stream_frees_the_lease(gw: Gateway) -> None:
    body = {
        "model": "smollm2",
        "messages": [{"role": "user", "content": "Write a long story about the sea."}],
        "max_tokens": 400,
        "stream": True,
    }
    with open_stream(gw, body) as resp:
        received = 0
        while received < 3:
            line = resp.readline()
            assert line, "stream ended early"
            if line.startswith(b"data: "):
                received += 1
        assert gw.running()["smollm2"]["in_flight"] == 1
    # Leaving the block closed the connection: the client went away mid-answer.
    # The client went away: the lease is freed, and the request is recorded as cut by the
    # client (499), not as a 400-token answer that ran to its end.
    gw.wait_for(lambda: gw.running()["smollm2"]["in_flight"] == 0)

    def cut_by_the_client() -> int:
        rows = gw.get_json("/api/activity?status=499")["data"]
        assert isinstance(rows, list)
        return len(rows)

    gw.wait_for(lambda: cut_by_the_client() == 1)
    answer = client(gw).chat.completions.create(
        model="smollm2",
        messages=PROMPT,
        max_tokens=2,  # type: ignore[arg-type]
    )
    assert answer.choices[0].message.content is not None


def test_unknown_model_is_404_with_suggestions(gw: Gateway) -> None:
    with pytest.raises(openai.NotFoundError) as info:
        client(gw).chat.completions.create(
            model="smolm2",
            messages=PROMPT,  # type: ignore[arg-type]
        )
    assert info.value.response.headers["x-modelswap-error"] == "1"
    error = info.value.response.json()["error"]
    assert error["code"] == "model_not_found"
    assert "smollm2" in error["suggestions"]


def test_malformed_json_is_400_envelope(gw: Gateway) -> None:
    status, headers, body = gw.post("/v1/chat/completions", b'{"model": "smollm2",')
    assert status == 400
    assert headers["X-Modelswap-Error"] == "1"
    error = json.loads(body)["error"]
    assert error["type"] == "invalid_request_error"
    assert "not valid JSON" in error["message"]
    # Nothing was started for a request that named no usable model.
    assert gw.running() == {}
