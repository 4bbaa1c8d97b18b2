"""llama-swap configs served as-is (issue 9): each fixture in tests/data/llamaswap/ is a
llama-swap ``config.yaml`` run by ``python -m modelswap serve`` against the fake backend, with
chat requests through the gateway; every llama-swap key modelswap does not implement is warned
about exactly once in the gateway's log."""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from tests.e2e.conftest import (
    FAKE_BACKEND,
    REPO,
    Gateway,
    Reply,
    chat_body,
    free_port,
    free_port_range,
    request,
    serve_command,
    stop_gateway,
    wait_healthy,
)

from modelswap.config import load_config_text
from modelswap.config.compat import warning_text

pytestmark = pytest.mark.e2e

FIXTURES = REPO / "tests" / "data" / "llamaswap"
API_KEY_1 = "sk-from-the-environment"
PEER_API_KEY = "peer-secret-key"
ENV = {
    "FAKE_PYTHON": sys.executable,
    "FAKE_BACKEND": str(FAKE_BACKEND),
    "API_KEY_1": API_KEY_1,
    "PEER_API_KEY": PEER_API_KEY,
}


@dataclass
class FixtureGateway(Gateway):
    start_port: int = 0


Serve = Callable[..., FixtureGateway]


def fixture_text(name: str, start_port: int, replace: dict[str, str] | None = None) -> str:
    """A fixture with ``startPort`` set to free ports (and any other text replaced)."""
    text = (FIXTURES / name).read_text()
    for old, new in (replace or {}).items():
        text = text.replace(old, new)
    if re.search(r"(?m)^startPort:", text):
        return re.sub(r"(?m)^startPort: *\d+", f"startPort: {start_port}", text)
    return f"startPort: {start_port}\n{text}"


def expected_warnings(text: str) -> list[str]:
    """What loading ``text`` warns about, one line per llama-swap key (computed in-process)."""
    config = load_config_text(text, environ={**os.environ, **ENV})
    return [warning_text(m) for m in config.compat if m.warning]


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Serve]:
    """Factory: ``serve(fixture_name)`` starts modelswap on that fixture, on free ports."""
    started: list[Gateway] = []

    def start(name: str, *, replace: dict[str, str] | None = None) -> FixtureGateway:
        start_port = free_port_range(6)
        text = fixture_text(name, start_port, replace)
        config = tmp_path / name
        config.write_text(text)
        port = free_port()
        log_path = tmp_path / f"{name}.log"
        env = {
            **os.environ,
            **ENV,
            "PYTHONUNBUFFERED": "1",
            "XDG_STATE_HOME": str(tmp_path / "state"),
        }
        with log_path.open("wb") as log_file:
            proc = subprocess.Popen(
                serve_command(config, f"127.0.0.1:{port}"),
                stdout=log_file,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                cwd=REPO,
            )
        gw = FixtureGateway(proc, port, log_path, start_port=start_port)
        started.append(gw)
        wait_healthy(gw)
        return gw

    yield start
    for gw in started:
        stop_gateway(gw)


def post(gw: Gateway, path: str, body: dict[str, Any], key: str | None = None) -> Reply:
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    return request(gw, "POST", path, json.dumps(body).encode(), headers)


def chat(gw: Gateway, model: str, key: str | None = None) -> Reply:
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    return request(gw, "POST", "/v1/chat/completions", chat_body(model, max_tokens=2), headers)


def echoed(gw: Gateway, body: dict[str, Any], key: str | None = None) -> dict[str, Any]:
    """What the backend received for ``body`` (the fake echoes /v1/responses)."""
    reply = post(gw, "/v1/responses", body, key)
    assert reply.status == 200, reply.body
    echo = reply.json()
    received = json.loads(base64.b64decode(echo["body_b64"]))
    assert isinstance(received, dict)
    return {"body": received, "headers": echo["headers"]}


def listed(gw: Gateway, key: str | None = None) -> dict[str, dict[str, Any]]:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    reply = request(gw, "GET", "/v1/models", headers=headers)
    assert reply.status == 200, reply.body
    return {row["id"]: row for row in reply.json()["data"]}


def running(gw: Gateway, key: str | None = None) -> set[str]:
    """Listed models that are ready (from /v1/models: llama-swap's string keys have the
    inference scope only, which /running needs more than)."""
    rows = listed(gw, key).values()
    return {row["id"] for row in rows if row.get("state") == "ready" and "alias_for" not in row}


def assert_warned_once(gw: Gateway, name: str) -> None:
    warnings = expected_warnings(fixture_text(name, 20000))
    assert warnings
    log = gw.log()
    for line in warnings:
        assert log.count(line) == 1, (line, log)
    assert log.count("llama-swap key ") == len(warnings), log


def test_minimal_config_serves_both_models(serve: Serve) -> None:
    gw = serve("minimal.yaml")
    for model in ("model1", "model2"):
        reply = chat(gw, model)
        assert reply.status == 200, reply.body
        assert reply.json()["choices"][0]["message"]["content"]
    assert "llama-swap key" not in gw.log()


def test_kitchen_sink_runs_with_every_documented_key(serve: Serve) -> None:
    gw = serve("kitchen-sink.yaml")
    key = "sk-hunter2"
    assert chat(gw, "gpt-oss-120b").status == 401  # apiKeys apply
    assert chat(gw, "gpt-oss-120b", API_KEY_1).status == 200  # ${env.API_KEY_1}
    # hooks.on_startup.preload names an alias: its model is loaded at startup
    gw.wait_for(lambda: "llama" in running(gw, key))

    rows = listed(gw, key)
    assert "qwen-unlisted" not in rows
    assert {"gpt-4o-mini", "gpt-oss-120b:high", "gpt-oss-120b:low", "llama-3"} <= set(rows)
    row = rows["gpt-oss-120b"]
    assert (row["name"], row["description"]) == ("gpt-oss 120B", "A thinking model from OpenAI")
    start = gw.start_port
    assert row["meta"]["llamaswap"] == {
        "port": start,
        "temperature": 0.7,
        "note": f"The gpt-oss-120b is running on port {start} temp=0.7, context=16384",
        "a_list": [1, 1.23, "macros are OK in list and dictionary types: gpt-oss-120b"],
        "an_obj": {"a": "1", "b": 2, "c": [0.7, False, "model: gpt-oss-120b"]},
    }

    # useModelName (the fake is --strict-model), stripParams string, setParams, setParamsByID;
    # messages: hooks.on_request denies a request without it (the Swap Policy Language)
    sent = {"input": "x", "messages": [], "temperature": 1.5, "top_p": 0.1, "top_k": 3, "seed": 1}
    by_name = {
        name: echoed(gw, {**sent, "model": name}, key)["body"]
        for name in ("gpt-oss-120b", "gpt-oss-120b:high", "gpt-4o-mini")
    }
    for body in by_name.values():
        assert body["model"] == "openai/gpt-oss-120B"
        assert (body["temperature"], body["top_p"], body["seed"]) == (0.7, 0.9, 1)
        assert "top_k" not in body
    assert by_name["gpt-oss-120b"]["chat_template_kwargs"] == {"reasoning_effort": "medium"}
    assert by_name["gpt-oss-120b:high"]["chat_template_kwargs"] == {"reasoning_effort": "high"}
    assert "chat_template_kwargs" not in by_name["gpt-4o-mini"]
    # filters.strip_params (the old spelling) on another model
    assert "seed" not in echoed(gw, {**sent, "model": "llama-3"}, key)["body"]
    # The Swap Policy Language: the hook's deny, the model's own filters.policy
    refused = post(gw, "/v1/responses", {"model": "llama-3", "input": "x"}, key)
    assert (refused.status, refused.json()["error"]["message"]) == (400, "messages is required")
    effort = {**sent, "model": "gpt-oss-120b", "reasoning_effort": "high"}
    assert "reasoning_effort" not in echoed(gw, effort, key)["body"]

    for model in ("gpt-oss-120b:low", "qwen-unlisted", "docker-llama", "llama-3"):
        reply = chat(gw, model, key)
        assert reply.status == 200, (model, reply.body)
    assert "gpt-oss-120b" in running(gw, key)  # persistent group: never unloaded by others
    assert_warned_once(gw, "kitchen-sink.yaml")


def test_macros_keep_their_types_in_metadata(serve: Serve) -> None:
    gw = serve("macros.yaml")
    reply = chat(gw, "chat")
    assert reply.status == 200, reply.body
    row = listed(gw)["chat"]
    assert row["name"] == "chat with 8192 tokens of context"
    assert row["description"] == "thinking=true"
    assert row["meta"]["llamaswap"] == {
        "port": gw.start_port,
        "ctx": 8192,
        "thinking": True,
        "temperature": 0.25,
        "label": "ctx=8192 thinking=true",
        "nested": {"list": [0.25, "chat", 1, None]},
    }
    assert "meta" not in listed(gw)["small"]
    assert chat(gw, "small").status == 200


def test_filters_strip_set_and_set_by_id(serve: Serve) -> None:
    gw = serve("filters.yaml")
    sent = {"input": "x", "top_k": 5, "top_p": 0.5, "temperature": 1.0, "seed": 3}
    plain = echoed(gw, {**sent, "model": "qwen"})["body"]
    assert plain == {
        "model": "qwen",
        "input": "x",
        "seed": 3,
        "temperature": 0.6,
        "stop": ["</s>"],
        "chat_template_kwargs": {"enable_thinking": False},
    }
    thinking = echoed(gw, {**sent, "model": "qwen:thinking"})["body"]
    assert thinking["chat_template_kwargs"] == {"enable_thinking": True}
    assert thinking["model"] == "qwen:thinking"  # as llama-swap: the name the client sent
    fast = echoed(gw, {**sent, "model": "qwen-fast"})["body"]
    assert (fast["max_tokens"], fast["chat_template_kwargs"]) == (2, {"enable_thinking": False})
    legacy = echoed(gw, {**sent, "model": "legacy"})["body"]
    assert legacy == {"model": "legacy", "input": "x", "top_k": 5, "top_p": 0.5, "temperature": 1.0}
    assert chat(gw, "qwen:thinking").status == 200


def test_routing_groups_and_preload(serve: Serve) -> None:
    gw = serve("routing.yaml")
    gw.wait_for(lambda: running(gw) == {"chat"})  # hooks.on_startup.preload
    assert chat(gw, "embed").status == 200
    assert running(gw) == {"chat", "embed"}  # one group, swap: false
    assert chat(gw, "big").status == 200
    gw.wait_for(lambda: running(gw) == {"big"})  # in no group: runs alone
    assert "llama-swap key" not in gw.log()


def test_matrix_keeps_the_least_cost_set_running(serve: Serve) -> None:
    """sets: standard (g | q) & v, full g; evict_costs: v 50 (issue 17)."""
    gw = serve("matrix.yaml")
    assert chat(gw, "gemma-model").status == 200
    assert chat(gw, "voxtral-model").status == 200  # {g, v}: together
    gw.wait_for(lambda: running(gw) == {"gemma-model", "voxtral-model"})
    assert chat(gw, "qwen-model").status == 200  # {q, v}: gemma goes (cost 1)
    gw.wait_for(lambda: running(gw) == {"qwen-model", "voxtral-model"})
    assert chat(gw, "gemma-model").status == 200  # {g, v} (cost 1) beats {g} (cost 51)
    gw.wait_for(lambda: running(gw) == {"gemma-model", "voxtral-model"})
    assert "llama-swap key matrix" not in gw.log()  # read, not warned about


@pytest.fixture
def peer_backend() -> Iterator[int]:
    """A fake backend standing in for another llama-swap: its port."""
    port = free_port()
    proc = subprocess.Popen(
        [
            *(sys.executable, str(FAKE_BACKEND), "--port", str(port), "--load-delay", "0"),
            *("--model", "remote-model", "--tokens", "2"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
    )
    try:
        yield port
    finally:  # by handle: only the process this fixture started
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_peers_are_served_with_their_key_and_filters(serve: Serve, peer_backend: int) -> None:
    gw = serve("peers.yaml", replace={"127.0.0.1:18999": f"127.0.0.1:{peer_backend}"})
    assert chat(gw, "local").status == 200
    rows = listed(gw)
    assert "llama-swap-peer/remote-model" in rows
    assert not any(name.startswith("tailcat-peer") for name in rows)
    gw.wait_for(lambda: chat(gw, "remote-model").status == 200)
    seen = echoed(gw, {"model": "remote-model", "temperature": 1.0, "top_p": 0.5, "input": "x"})
    assert seen["body"] == {
        "model": "remote-model",
        "input": "x",
        "provider": {"data_collection": "deny", "zdr": True},
    }
    assert seen["headers"]["authorization"] == f"Bearer {PEER_API_KEY}"
    assert_warned_once(gw, "peers.yaml")
