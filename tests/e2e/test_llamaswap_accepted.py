"""The configs llama-swap accepts that modelswap used to refuse (issue 17), served: each fixture
of tests/data/llamaswap/accepted/ run by ``python -m modelswap serve`` against the fake
backend, with requests through the gateway."""

from __future__ import annotations

import base64
import json
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from tests.e2e.conftest import (
    FAKE_BACKEND,
    REPO,
    Gateway,
    Reply,
    chat_body,
    free_port_range,
    launch_gateway,
    request,
    stop_gateway,
)

pytestmark = pytest.mark.e2e

ACCEPTED = REPO / "tests" / "data" / "llamaswap" / "accepted"
ENV = {
    "FAKE_PYTHON": sys.executable,
    "FAKE_BACKEND": str(FAKE_BACKEND),
    "PEER_API_KEY": "peer-key",
    "FAKE_GLOBAL_TTL": "120",
}
Serve = Callable[[str], tuple[Gateway, int]]


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Serve]:
    """``serve(fixture)`` -> (gateway, the startPort it was given)."""
    started: list[Gateway] = []

    def start(name: str) -> tuple[Gateway, int]:
        start_port = free_port_range(4)
        text = (ACCEPTED / name).read_text().replace("port: 5800", f"port: {start_port}")
        if not re.search(r"(?m)^startPort:", text):
            text = f"startPort: {start_port}\n{text}"
        config = tmp_path / name
        config.write_text(f"stateDir: {tmp_path / 'state'}\n{text}")
        log_path = tmp_path / f"{name}.log"
        return launch_gateway(config, log_path, started, env=ENV), start_port

    yield start
    for gw in started:
        stop_gateway(gw)


def chat(gw: Gateway, model: str) -> Reply:
    headers = {"Content-Type": "application/json"}
    return request(gw, "POST", "/v1/chat/completions", chat_body(model, max_tokens=2), headers)


def echoed(gw: Gateway, body: dict[str, Any]) -> dict[str, Any]:
    """What the backend received for ``body`` (the fake echoes /v1/responses)."""
    headers = {"Content-Type": "application/json"}
    reply = request(gw, "POST", "/v1/responses", json.dumps(body).encode(), headers)
    assert reply.status == 200, reply.body
    received = json.loads(base64.b64decode(reply.json()["body_b64"]))
    assert isinstance(received, dict)
    return received


@pytest.mark.parametrize(
    "name",
    [
        "anchors-key.yaml",
        "macro-numbers.yaml",
        "cmd-stop-snake.yaml",
        "alias-is-own-id.yaml",
        "group-no-members.yaml",
        "preload-selector.yaml",
        "env-inside-string.yaml",
    ],
)
def test_fixture_serves_its_model(serve: Serve, name: str) -> None:
    gw, _ = serve(name)
    reply = chat(gw, "model1")
    assert reply.status == 200, reply.body


def test_set_params_by_id_with_port_applies_to_that_name(serve: Serve) -> None:
    gw, start_port = serve("port-in-set-params-by-id.yaml")
    name = f"model1-{start_port}"
    assert echoed(gw, {"model": name, "input": "x"})["temperature"] == 0.1
    assert "temperature" not in echoed(gw, {"model": "model1", "input": "x"})


def test_a_remote_proxy_serves_with_a_warning_and_a_security_entry(serve: Serve) -> None:
    gw, _ = serve("remote-proxy.yaml")
    assert chat(gw, "model1").status == 200
    warning = [line for line in gw.log().splitlines() if "models.bridged.proxy" in line]
    assert warning, gw.log()
    assert "172.17.0.1" in warning[0]
    assert "WARNING" in warning[0]
    switches = gw.get_json("/api/security")["open_switches"]
    assert isinstance(switches, list)
    assert any("'bridged'" in s and "172.17.0.1" in s for s in switches), switches


@pytest.mark.parametrize("name", ["peers-only.yaml", "models-null.yaml"])
def test_a_gateway_without_models_serves_its_listing(serve: Serve, name: str) -> None:
    gw, _ = serve(name)
    reply = request(gw, "GET", "/v1/models")
    assert reply.status == 200, reply.body
    assert reply.json()["object"] == "list"


# ---- the same behaviour as llama-swap on the same config ------------------------------------


def parity(serve: Serve) -> Gateway:
    gw, _ = serve("../parity.yaml")
    return gw


def test_aliases_are_forwarded_as_sent_and_not_listed(serve: Serve) -> None:
    gw = parity(serve)
    assert echoed(gw, {"model": "gpt-4o-mini", "input": "x"})["model"] == "gpt-4o-mini"
    assert echoed(gw, {"model": "model1", "input": "x"})["model"] == "model1"
    assert echoed(gw, {"model": "m2", "input": "x"})["model"] == "served-2"  # useModelName
    rows = request(gw, "GET", "/v1/models").json()["data"]
    assert [row["id"] for row in rows] == ["model1", "model2"]
    assert rows[0]["aliases"] == ["gpt-4o-mini"]
    one = request(gw, "GET", "/v1/models/gpt-4o-mini").json()  # still retrievable
    assert one["alias_for"] == "model1"


def test_running_unload_version_upstream_and_props(serve: Serve) -> None:
    gw = parity(serve)
    assert chat(gw, "model1").status == 200
    (row,) = gw.get_json("/running")["running"]  # type: ignore[misc]
    assert row["model"] == "model1"
    # the command line, redacted: the paths came from ${env.…}, which are secrets
    assert row["cmd"].endswith(f"--port {row['proxy'].rsplit(':', 1)[1]}")
    assert sys.executable not in row["cmd"]
    assert row["proxy"].startswith("http://127.0.0.1:")
    assert (row["name"], row["description"]) == ("Model One", "the first")
    reply = request(gw, "GET", "/unload")
    assert (reply.status, reply.body) == (200, b"OK")
    assert gw.running() == {}
    version = request(gw, "GET", "/api/version")
    assert version.status == 200
    assert set(version.json()) >= {"version", "commit", "build_date"}
    page = request(gw, "GET", "/upstream")
    assert page.status == 200
    assert page.headers["Content-Type"].startswith("text/html")
    assert b'href="/upstream/model1/"' in page.body
    props = request(gw, "GET", "/props?model=gpt-4o-mini")
    assert props.status == 200, props.body
    assert isinstance(props.json(), dict)
    assert set(gw.running()) == {"model1"}
    missing = request(gw, "GET", "/props")
    assert missing.status == 400
    assert missing.json()["error"]["param"] == "model"


def test_unload_timeout_is_the_grace_before_sigkill(serve: Serve) -> None:
    gw, _ = serve("unload-timeout.yaml")
    assert chat(gw, "model1").status == 200
    assert request(gw, "GET", "/unload").body == b"OK"
    assert gw.running() == {}
    logs = request(gw, "GET", "/logs/model1").body.decode()
    assert "no exit 1.5 s after the stop request: SIGKILL" in logs, logs


# ---- selectors ------------------------------------------------------------------------------


def test_selectors_are_listed_and_resolved_per_request(serve: Serve) -> None:
    gw, _ = serve("../selectors.yaml")
    rows = {row["id"]: row for row in request(gw, "GET", "/v1/models").json()["data"]}
    assert rows["coding-model"]["selector"] == {"strategy": "warm", "targets": ["small", "big"]}
    assert rows["coding-model"]["name"] == "Whatever coder is warm"
    assert {"pinned", "spill"} <= set(rows)
    # pin: always the first target; the backend gets the target's name
    assert echoed(gw, {"model": "pinned", "input": "x"})["model"] == "big"
    assert set(gw.running()) == {"big"}
    # warm: the ready target, although another comes first (no swap)
    assert echoed(gw, {"model": "coding-model", "input": "x"})["model"] == "big"
    assert set(gw.running()) == {"big"}
    assert request(gw, "GET", "/unload").body == b"OK"
    # nothing ready: warm starts its first target
    assert echoed(gw, {"model": "coding-model", "input": "x"})["model"] == "small"
    assert set(gw.running()) == {"small"}
    # spillover: room on the first target (2 reservations), so it serves
    assert echoed(gw, {"model": "spill", "input": "x"})["model"] == "small"


def test_capabilities_are_shown_in_the_model_list(serve: Serve) -> None:
    gw, _ = serve("capabilities.yaml")
    rows = {row["id"]: row for row in request(gw, "GET", "/v1/models").json()["data"]}
    # llama-swap's shape (issue 30): {in: [text, image], tools: true} as its clients read it
    assert rows["model1"]["capabilities"] == {"vision": True, "function_calling": True}
    assert rows["model1"]["architecture"] == {"input_modalities": ["text", "image"]}
    assert rows["model1"]["supported_parameters"] == ["tools", "tool_choice"]
    assert "capabilities" not in rows["model2"]


def test_a_string_key_serves_and_startup_says_how_to_grant_read_and_admin(serve: Serve) -> None:
    gw, _ = serve("string-key.yaml")
    key = {"Authorization": f"Bearer {ENV['PEER_API_KEY']}", "Content-Type": "application/json"}
    body = chat_body("model1", max_tokens=2)
    assert request(gw, "POST", "/v1/chat/completions", body, key).status == 200
    assert request(gw, "GET", "/running", headers=key).status == 403
    assert gw.log().count("no apiKeys entry has the read or admin scope") == 1
    assert ENV["PEER_API_KEY"] not in gw.log()


# ---- profiles -------------------------------------------------------------------------------


def put_profile(gw: Gateway, name: object) -> Reply:
    body = json.dumps({"name": name}).encode()
    return request(gw, "PUT", "/api/profiles/active", body, {"Content-Type": "application/json"})


def ready(gw: Gateway) -> set[str]:
    return {m for m, row in gw.running().items() if row["state"] == "ready"}


def test_profiles_pin_their_models_and_switch_at_runtime(serve: Serve) -> None:
    gw, _ = serve("../profiles.yaml")
    gw.wait_for(lambda: ready(gw) == {"small", "big"})  # the startup profile, side by side
    listing = request(gw, "GET", "/api/profiles").json()
    assert listing == {
        "profiles": [
            {
                "name": "pair",
                "description": "two at once",
                "pins": {"chat": "small", "code": "big"},
            },
            {"name": "solo", "pins": {"other": "other"}},
        ],
        "active": "pair",
    }
    assert echoed(gw, {"model": "code", "input": "x"})["model"] == "big"  # a pin name
    assert chat(gw, "other").status == 200  # pinned models are kept
    assert set(gw.running()) == {"small", "big", "other"}
    reply = put_profile(gw, "solo")
    assert reply.status == 200, reply.body
    assert reply.json()["active"] == "solo"
    assert request(gw, "GET", "/api/profiles/active").json() == {"active": "solo"}
    assert chat(gw, "code").status == 404  # not a pin of the active profile
    assert chat(gw, "extra").status == 200  # small, big no longer pinned: evicted; other kept
    assert set(gw.running()) == {"extra", "other"}
    bad = put_profile(gw, "ghost")
    assert bad.status == 400
    assert bad.json()["error"]["param"] == "name"
    assert put_profile(gw, None).json()["active"] is None


# ---- sendLoadingState -----------------------------------------------------------------------


def test_send_loading_state_is_reasoning_content_for_the_openai_sdk(serve: Serve) -> None:
    gw, _ = serve("send-loading-state.yaml")
    client = openai.OpenAI(base_url=gw.url("/v1"), api_key="none", timeout=120)
    reasoning, content = [], []
    for chunk in client.chat.completions.create(
        model="slow", messages=[{"role": "user", "content": "hi"}], stream=True
    ):
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        extra = delta.model_extra or {}
        if extra.get("reasoning_content"):
            reasoning.append(extra["reasoning_content"])
        if delta.content:
            content.append(delta.content)
    assert reasoning, "no loading state arrived"
    assert reasoning[0].startswith("loading model slow")
    assert content  # then the answer itself
    quiet = client.chat.completions.create(
        model="quiet", messages=[{"role": "user", "content": "hi"}], stream=True
    )
    chunks = [c for c in quiet if c.choices]
    assert chunks
    assert not any((c.choices[0].delta.model_extra or {}).get("reasoning_content") for c in chunks)


def test_ignore_paths_never_start_a_model(serve: Serve) -> None:
    gw, _ = serve("ignore-paths.yaml")
    reply = request(gw, "GET", "/upstream/model1/props")
    assert reply.status == 503, reply.body
    assert reply.json()["error"]["code"] == "model_not_ready"
    assert gw.running() == {}  # nothing started
    assert chat(gw, "model1").status == 200
    assert request(gw, "GET", "/upstream/model1/props").status == 200  # ready: forwarded
