"""What real third-party clients found (issue 18), driven with those clients: the ``openai``
SDK's ``models.retrieve``, request ids end to end, and the gateway owning CORS.

Backends and peers here are the fakes (``openai_backend.py``, ``recording_peer.py``); the
``anthropic`` SDK against the real llama.cpp server is in ``test_anthropic.py``.
"""

from __future__ import annotations

import http.client
import json
import shlex
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from tests.e2e.conftest import (
    HANG,
    REPO,
    Door,
    Gateway,
    chat_body,
    fake_cmd,
    free_port,
    load_model,
    request,
)

pytestmark = pytest.mark.e2e

RECORDER = REPO / "tests" / "fakes" / "recording_peer.py"
ALL_KEY = "sk-clients-all-0123456789"
ORG_KEY = "sk-clients-org-0123456789"


class Peer:
    def __init__(self, port: int, record: Path) -> None:
        self.port, self.record = port, record
        self.url = f"http://127.0.0.1:{port}"

    def requests(self, path: str) -> list[dict[str, object]]:
        if not self.record.exists():
            return []
        rows = [json.loads(line) for line in self.record.read_text().splitlines()]
        return [row for row in rows if row["path"] == path]


@pytest.fixture
def peer(tmp_path: Path) -> Iterator[Callable[..., Peer]]:
    started: list[subprocess.Popen[bytes]] = []

    def start(*flags: str) -> Peer:
        port, record = free_port(), tmp_path / f"peer-{len(started)}.jsonl"
        cmd = [sys.executable, str(RECORDER), "--port", str(port), "--record", str(record)]
        proc = subprocess.Popen([*cmd, *flags], stdin=subprocess.DEVNULL)
        started.append(proc)
        _wait_serving(f"http://127.0.0.1:{port}/health", proc)
        return Peer(port, record)

    yield start
    for proc in started:  # by handle: only what this fixture started
        proc.terminate()
        try:
            proc.wait(timeout=HANG)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _wait_serving(url: str, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + HANG
    while time.monotonic() < deadline:
        assert proc.poll() is None, "the recording peer exited"
        try:
            with urllib.request.urlopen(url, timeout=10):
                return
        except OSError:
            time.sleep(0.02)
    raise AssertionError(f"{url} did not answer")


@pytest.fixture
def sdk() -> Iterator[Callable[..., openai.OpenAI]]:
    """Factory: an ``openai`` client for a gateway and key, closed after the test."""
    made: list[openai.OpenAI] = []

    def make(gw: Gateway, key: str = ALL_KEY) -> openai.OpenAI:
        made.append(openai.OpenAI(base_url=gw.url("/v1"), api_key=key, max_retries=0, timeout=HANG))
        return made[-1]

    yield make
    for client in made:
        client.close()


def test_models_retrieve_answers_listed_ids_aliases_and_peer_models_the_key_may_use(
    gateway: Callable[..., Gateway], peer: Callable[..., Peer], sdk: Callable[..., openai.OpenAI]
) -> None:
    box = peer("--models", "beta")
    gw = gateway(
        f"  org/smol:\n    cmd: {fake_cmd()}\n    aliases: [smol]\n"
        f"  other:\n    cmd: {fake_cmd()}\n"
        f"  hidden:\n    cmd: {fake_cmd()}\n    unlisted: true\n",
        extra_top=(
            f"apiKeys:\n  - {ALL_KEY}\n  - {{key: {ORG_KEY}, name: org, models: ['org/*']}}\n"
            f"peers:\n  box:\n    proxy: {box.url}\n    models: [beta]\n"
        ),
    )
    client = sdk(gw)
    model = client.models.retrieve("org/smol")  # the SDK sends org%2Fsmol
    assert (model.id, model.object, model.owned_by) == ("org/smol", "model", "modelswap")
    listed = {row.id: row for row in client.models.list()}
    assert model.model_dump() == listed["org/smol"].model_dump()  # exactly what the list says
    alias = client.models.retrieve("smol")
    assert alias.id == "smol"
    assert alias.model_dump()["alias_for"] == "org/smol"
    remote = client.models.retrieve("box/beta")
    assert (remote.id, remote.owned_by) == ("box/beta", "box")

    for missing, key in (("hidden", ALL_KEY), ("nothing", ALL_KEY), ("other", ORG_KEY)):
        with pytest.raises(openai.NotFoundError) as info:
            sdk(gw, key).models.retrieve(missing)
        error = info.value.response.json()["error"]
        assert error["code"] == "model_not_found", missing
        assert error["type"] == "invalid_request_error"
        assert missing in info.value.message
    assert sdk(gw, ORG_KEY).models.retrieve("org/smol").id == "org/smol"
    with pytest.raises(openai.AuthenticationError):
        sdk(gw, "sk-wrong-key-000000000").models.retrieve("org/smol")
    plain = request(gw, "GET", "/v1/models/org/smol", headers={"x-api-key": ALL_KEY})
    assert plain.status == 200  # an unencoded slash names the same id
    assert plain.json()["id"] == "org/smol"


def _events_until(resp: http.client.HTTPResponse, kind: str) -> dict[str, Any]:
    """The data of the next server-sent event of ``kind``."""
    current = None
    while line := resp.readline():
        text = line.decode().rstrip("\r\n")
        if text.startswith("event: "):
            current = text[len("event: ") :]
        elif text.startswith("data: ") and current == kind:
            data: dict[str, Any] = json.loads(text[len("data: ") :])
            return data
    raise AssertionError(f"the event stream ended before a {kind} event")


def test_request_id_is_kept_or_made_and_follows_the_request_end_to_end(
    door_gateway: Callable[..., Gateway],
    door: Door,
    peer: Callable[..., Peer],
    sdk: Callable[..., openai.OpenAI],
) -> None:
    box = peer("--models", "beta")
    gw = door_gateway(
        f"  local:\n    cmd: {fake_cmd()}\n",
        extra_top=f"peers:\n  box:\n    proxy: {box.url}\n    models: [beta]\n",
    )
    events = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=HANG)
    events.request("GET", "/api/events")
    stream = events.getresponse()
    try:
        own = "trace-7f3a:b.c_d"
        reply = request(
            gw,
            "POST",
            "/v1/chat/completions",
            chat_body("box/beta"),
            {"Content-Type": "application/json", "X-Request-Id": own},
        )
        assert reply.status == 200, reply.body
        assert reply.headers["X-Request-Id"] == own  # the client's own id, kept
        [sent] = box.requests("/v1/chat/completions")
        headers = {k.lower(): v for k, v in sent["headers"].items()}  # type: ignore[union-attr]
        assert headers["x-request-id"] == own  # forwarded upstream
        finished = _events_until(stream, "request.finished")
        assert (finished["request_id"], finished["model"]) == (own, "box/beta")
    finally:
        events.close()
    assert f"request {own} /v1/chat/completions box/beta -> 200" in gw.log()
    [row] = gw.get_json(f"/api/activity?request_id={own}")["data"]  # type: ignore[misc]
    assert (row["request_id"], row["model"], row["status"]) == (own, "box/beta", 200)

    load_model(gw, "local")  # ready: the fast door serves what follows itself
    watch = door.watch(gw)
    made: set[str] = set()
    for bad in ("", "x" * 129, "two words", "a\u00e9b", "new\\nline"):
        reply = request(
            gw,
            "POST",
            "/v1/chat/completions",
            chat_body("local"),
            {"Content-Type": "application/json", "X-Request-Id": bad},
        )
        assert reply.status == 200
        fresh = reply.headers["X-Request-Id"]
        assert fresh != bad
        assert len(fresh) == 32  # a new one, never the insane one
        made.add(fresh)
    assert len(made) == 5
    watch.answered(5)
    # Every response has one: errors, the model list, the gateway's own routes.
    for method, path in (("GET", "/health"), ("GET", "/v1/models"), ("GET", "/nowhere")):
        assert request(gw, method, path).headers["X-Request-Id"]
    missing = request(
        gw,
        "POST",
        "/v1/chat/completions",
        chat_body("nothing"),
        {"Content-Type": "application/json"},
    )
    assert missing.status == 404
    assert missing.headers["X-Request-Id"]
    with sdk(gw).chat.completions.with_streaming_response.create(
        model="local", messages=[{"role": "user", "content": "hi"}], stream=True
    ) as streamed:
        assert streamed.headers["x-request-id"]  # streamed answers too


def test_the_gateway_owns_cors_backend_and_peer_cors_headers_never_reach_the_client(
    gateway: Callable[..., Gateway], peer: Callable[..., Peer]
) -> None:
    box = peer("--models", "beta", "--cors")
    top = f"peers:\n  box:\n    proxy: {box.url}\n    models: [beta]\n"
    plain = {"Content-Type": "application/json", "Origin": "https://app.example"}

    def cors_headers(gw: Gateway, stream: bool) -> dict[str, str]:
        reply = request(
            gw, "POST", "/v1/chat/completions", chat_body("box/beta", stream=stream), plain
        )
        assert reply.status == 200, reply.body
        return {
            k.lower(): v
            for k, v in reply.headers.items()
            if k.lower().startswith("access-control-")
        }

    off = gateway(f"  local:\n    cmd: {fake_cmd()}\n", extra_top=top)
    assert cors_headers(off, stream=False) == {}  # the peer's `*` is gone: CORS is off here
    assert cors_headers(off, stream=True) == {}
    on = gateway(
        f"  local:\n    cmd: {fake_cmd()}\n",
        extra_top=top
        + f"apiKeys: [{ALL_KEY}]\nsecurity:\n  corsOrigins: ['https://app.example']\n",
    )
    plain["Authorization"] = f"Bearer {ALL_KEY}"
    for stream in (False, True):
        got = cors_headers(on, stream)
        assert got["access-control-allow-origin"] == "https://app.example"  # ours, not `*`
        assert "access-control-allow-credentials" not in got
        assert "X-Request-Id" in got["access-control-expose-headers"]


TOOL_FAKE = REPO / "tests" / "fakes" / "tool_error_backend.py"
TOOLS = [{"type": "function", "function": {"name": "now", "parameters": {"type": "object"}}}]


def test_auto_tool_choice_on_a_vllm_without_a_parser_is_400_at_once_before_any_start(
    gateway: Callable[..., Gateway],
) -> None:
    fake = f'"{sys.executable}" "{TOOL_FAKE}" --port ${{PORT}} --shape new'
    # The same fake, its command line naming the flags (sh passes them to nobody).
    flags = "--enable-auto-tool-choice --tool-call-parser hermes"
    flagged = f"sh -c {shlex.quote('exec ' + fake)} sh {flags}"
    gw = gateway(
        f"  bare:\n    backend: vllm\n    cmd: {json.dumps(fake)}\n"
        f"  flagged:\n    backend: vllm\n    cmd: {json.dumps(flagged)}\n"
    )
    json_type = {"Content-Type": "application/json"}
    for stream in (False, True):
        for choice in ({}, {"tool_choice": "auto"}):
            body = chat_body("bare", stream=stream, tools=TOOLS, **choice)
            reply = request(gw, "POST", "/v1/chat/completions", body, json_type)
            assert reply.status == 400, reply.body  # never a 200 stream that is really a 400
            assert reply.headers["X-Modelswap-Error"] == "1"
            hint = reply.headers["X-Modelswap-Hint"]
            assert "--enable-auto-tool-choice --tool-call-parser" in hint
            assert "hermes" in hint
            error = reply.json()["error"]
            assert (error["code"], error["param"], error["hint"]) == (
                "tool_choice_unsupported",
                "tool_choice",
                hint,
            )
    anthropic_body = json.dumps(
        {"model": "bare", "max_tokens": 4, "messages": [], "tools": TOOLS}
    ).encode()
    reply = request(gw, "POST", "/v1/messages", anthropic_body, json_type)
    assert reply.status == 400
    assert reply.json()["error"]["type"] == "invalid_request_error"
    assert reply.headers["X-Modelswap-Hint"]
    assert gw.running() == {}  # nothing was started for any of them

    # Choices vLLM serves without a parser go to the backend (which starts for them).
    named = {"type": "function", "function": {"name": "now"}}
    for choice in ("none", "required", named):
        body = chat_body("bare", tools=TOOLS, tool_choice=choice)
        assert (
            "X-Modelswap-Error"
            not in request(gw, "POST", "/v1/chat/completions", body, json_type).headers
        )
    # With the flags on its command line, the request reaches the backend (here it still
    # refuses: the fake's own 400, relayed with the hint as ever).
    reply = request(
        gw, "POST", "/v1/chat/completions", chat_body("flagged", tools=TOOLS), json_type
    )
    assert reply.status == 400
    assert "X-Modelswap-Error" not in reply.headers
    assert "X-Fake-Pid" in reply.headers
