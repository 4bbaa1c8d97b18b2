"""The Swap Policy Language end to end (issue 29): llama-swap's page config
(tests/data/llamaswap/newest/swap-policy-language.yaml) served by ``python -m modelswap
serve`` in front of the fake backend and a recording peer. Shown on what the backend received,
what the client got (OpenAI's and Anthropic's error shapes), the activity log, a live reload,
and ``modelswap check`` refusing a program with its line:column."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.e2e.conftest import (
    FAKE_BACKEND,
    REPO,
    Gateway,
    Reply,
    free_port,
    free_port_range,
    launch_gateway,
    request,
    stop_gateway,
)
from tests.e2e.test_cli import modelswap
from tests.e2e.test_peers import RECORDER, Recorder, _wait_listening

pytestmark = pytest.mark.e2e

PAGE = REPO / "tests" / "data" / "llamaswap" / "newest" / "swap-policy-language.yaml"
JSON = {"Content-Type": "application/json"}
KEY = {"Authorization": "Bearer any-key"}  # no apiKeys: any key is a key to auth.key
APPLIED = "config reloaded from"
REJECTED = "config reload rejected"
Serve = Callable[..., Gateway]


@pytest.fixture
def peer(tmp_path: Path) -> Iterator[Recorder]:
    """A recording peer serving ``far`` (tests/fakes/recording_peer.py)."""
    port = free_port()
    record = tmp_path / "peer.jsonl"
    cmd = [sys.executable, str(RECORDER), "--port", str(port), "--record", str(record)]
    proc = subprocess.Popen([*cmd, "--models", "far"], stdin=subprocess.DEVNULL)
    _wait_listening(port, proc)
    yield Recorder(proc, port, record)
    proc.terminate()  # by handle: only what this fixture started
    proc.wait(timeout=30)


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Serve]:
    """``serve(peer=None, *args, text=None)``: modelswap serving the page's config (or
    ``text``), the peer pointed at ``peer``, the fake backend's paths in the environment."""
    started: list[Gateway] = []

    def start(peer: Recorder | None = None, *args: str, text: str | None = None) -> Gateway:
        body = PAGE.read_text() if text is None else text
        if peer is not None:
            body = body.replace("http://127.0.0.1:9", peer.url)
        config = tmp_path / f"spl-{len(started)}.yaml"
        config.write_text(
            f"stateDir: {tmp_path / 'state'}\nstartPort: {free_port_range(2)}\n{body}"
        )
        log_path = tmp_path / f"spl-{len(started)}.log"
        fake = {"FAKE_PYTHON": sys.executable, "FAKE_BACKEND": str(FAKE_BACKEND)}
        return launch_gateway(config, log_path, started, *args, env=fake)

    yield start
    for gw in started:
        stop_gateway(gw)


def post(gw: Gateway, path: str, body: dict[str, Any], **headers: str) -> Reply:
    return request(gw, "POST", path, json.dumps(body).encode(), {**JSON, **headers})


def received(reply: Reply) -> dict[str, Any]:
    """The body the fake backend received (it echoes /v1/responses and /v1/messages)."""
    assert reply.status == 200, reply.body
    data = json.loads(base64.b64decode(reply.json()["body_b64"]))
    assert isinstance(data, dict)
    return data


def started_models(gw: Gateway) -> set[str]:
    return {model for model, row in gw.running().items() if row["state"] != "stopped"}


CHAT = {"model": "private-coder", "messages": [{"role": "user", "content": "hi"}]}


# The page's `authenticated` deny, reached through the hook's `apply` on its line 4.
DENIED_BY = {
    "program": "policies.authenticated",
    "line": 1,
    "rule": 'deny 401 "API key required"\nwhen auth.key is missing',
    "applied_by": ["hooks.on_request line 4"],
}


def test_deny_answers_in_openais_shape_before_anything_starts(serve: Serve) -> None:
    gw = serve()
    refused = post(gw, "/v1/chat/completions", CHAT)  # private-*: a key is required
    assert refused.status == 401, refused.body
    assert refused.headers["X-Modelswap-Error"] == "1"
    assert refused.json() == {
        "error": {
            "message": "API key required",
            "type": "authentication_error",
            "code": "policy_denied",
            "param": None,
            "policy": DENIED_BY,  # where the deny is written (issue 41)
        }
    }
    missing = post(gw, "/v1/chat/completions", {"model": "qwen-coder"}, **KEY)
    assert missing.status == 400, missing.body
    assert missing.json()["error"]["message"] == "messages is required"
    assert started_models(gw) == set()  # refused before the model was started or asked
    allowed = post(gw, "/v1/chat/completions", CHAT, **KEY)
    assert allowed.status == 200, allowed.body
    assert started_models(gw) == {"qwen-coder"}


def test_deny_answers_in_anthropics_shape_on_its_routes(serve: Serve) -> None:
    gw = serve()
    body = {"model": "private-coder", "max_tokens": 5, "messages": CHAT["messages"]}
    refused = post(gw, "/v1/messages", body)
    assert refused.status == 401, refused.body
    assert refused.json() == {
        "type": "error",
        "error": {
            "type": "authentication_error",
            "message": "API key required",
            "details": {"error_code": "policy_denied", "policy": DENIED_BY},
        },
    }
    # Anthropic's SDK sends its key as x-api-key: that is auth.key too.
    allowed = post(gw, "/v1/messages", body, **{"x-api-key": "sk-ant"})
    assert received(allowed)["model"] == "private-coder"


def test_filters_then_hook_then_the_models_policy_reach_the_backend(serve: Serve) -> None:
    gw = serve()
    sent = {
        "model": "qwen-coder",
        "input": "x",
        "top_k": 99,
        "reasoning_effort": "high",
        "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "my PASSWORD is hunter2"},
        ],
    }
    got = received(post(gw, "/v1/responses", sent))
    assert got == {
        "model": "qwen-coder",
        "input": "x",
        "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "[redacted]"},  # messages[-1], matched by RE2
        ],
        "temperature": 0.2,  # the hook applied coding-defaults (request.model matches /coder/)
        "max_tokens": 4096,  # the model's own policy
        "top_k": 40,  # stripParams ran first, so the policy's default filled it
    }
    # A value the client sent wins over a default.
    mine = received(post(gw, "/v1/responses", {**sent, "temperature": 0.9, "max_tokens": 7}))
    assert (mine["temperature"], mine["max_tokens"]) == (0.9, 7)


def test_context_is_written_into_the_activity_record(serve: Serve) -> None:
    gw = serve()
    ok = post(gw, "/v1/responses", {"model": "qwen-coder", "input": "x"}, **{"X-Team": "t"})
    assert ok.status == 200, ok.body
    refused = post(gw, "/v1/chat/completions", CHAT)
    assert refused.status == 401

    def rows() -> list[dict[str, Any]]:
        data = gw.get_json("/api/activity")["data"]
        assert isinstance(data, list)
        return data

    gw.wait_for(lambda: len(rows()) >= 2)
    denied, served = rows()[:2]
    assert served["metadata"] == {
        "workload": "coding",
        "team": "tagged",
        "model_id": "qwen-coder",
    }
    assert (served["status"], served["model"]) == (200, "qwen-coder")
    assert denied["status"] == 401
    assert denied["error_code"] == "policy_denied"
    assert "metadata" not in denied  # the deny fired before the hook tagged anything
    [entry] = [
        e
        for e in gw.get_json("/api/metrics/activity")["data"]  # type: ignore[union-attr]
        if e["id"] == served["id"]
    ]
    assert entry["metadata"] == served["metadata"]  # llama-swap's shape carries it too


def test_a_peers_policy_runs_for_its_models(serve: Serve, peer: Recorder) -> None:
    gw = serve(peer)
    chat = {"model": "far", "messages": [{"role": "user", "content": "hi"}]}
    assert post(gw, "/v1/chat/completions", chat).status == 200
    refused = post(gw, "/v1/chat/completions", {**chat, "tier": "free"}, **{"X-Team": "t"})
    assert refused.status == 402, refused.body
    assert refused.json()["error"]["message"] == "payment required"
    [row] = peer.requests()  # the refused one never reached the peer
    assert json.loads(str(row["body"])) == {
        **chat,
        "provider": {"zdr": True, "order": ["a", "b"]},
    }
    # What the hook wrote before the peer's policy refused is in the refused request's row.
    gw.wait_for(lambda: len(gw.get_json("/api/activity")["data"]) >= 2)  # type: ignore[arg-type]
    newest = gw.get_json("/api/activity")["data"][0]  # type: ignore[index]
    assert (newest["status"], newest["metadata"]) == (402, {"team": "tagged"})


def test_multipart_bodies_pass_as_they_are(serve: Serve) -> None:
    text = PAGE.read_text().replace(
        "  on_request: |\n", '  on_request: |\n    deny "JSON bodies only"\n', 1
    )
    gw = serve(None, text=text)
    assert post(gw, "/v1/responses", {"model": "qwen-coder", "input": "x"}).status == 403
    boundary = "----splBoundary"
    sent = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="model"\r\n\r\nqwen-coder\r\n'
        f"--{boundary}--\r\n"
    ).encode()
    content_type = f"multipart/form-data; boundary={boundary}"
    reply = request(gw, "POST", "/v1/audio/transcriptions", sent, {"Content-Type": content_type})
    assert reply.status == 200, reply.body
    assert base64.b64decode(reply.json()["body_b64"]) == sent


def test_policies_reload_with_the_config(serve: Serve) -> None:
    gw = serve(None, "--watch-config")
    assert gw.config_path is not None
    body = {"model": "qwen-coder", "input": "x"}
    assert received(post(gw, "/v1/responses", body))["max_tokens"] == 4096
    text = gw.config_path.read_text()
    gw.config_path.write_text(text.replace("default max_tokens to 4096", "set max_tokens to 8"))
    gw.wait_for(lambda: APPLIED in gw.log())
    assert received(post(gw, "/v1/responses", body))["max_tokens"] == 8
    # A program that cannot be honoured is refused whole: the running one stays.
    gw.config_path.write_text(text.replace("default max_tokens to 4096", "set max_tokens 9"))
    gw.wait_for(lambda: REJECTED in gw.log())
    assert "models.qwen-coder.filters.policy: line 2:16: unexpected" in gw.log()
    assert received(post(gw, "/v1/responses", body))["max_tokens"] == 8


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        (
            "default max_tokens to 4096",
            "default max_tokens 4096",
            "models.qwen-coder.filters.policy: line 2:20: unexpected \"4096\", expected 'to'",
        ),
        (
            "apply authenticated\n",
            "apply authenticatd\n",
            'hooks.on_request: line 4:7: apply references unknown policy "authenticatd"',
        ),
        (
            'set context.workload to "coding"',
            "apply coding-defaults",
            "policies: cycle detected: coding-defaults -> coding-defaults",
        ),
        (
            "deny 402",
            "deny 200",
            "peers.remote.filters.policy: line 2:6: deny status must be an integer between "
            "400 and 599",
        ),
        (
            "/^private-/",
            "/^(?=private)/",
            "hooks.on_request: line 5:30: invalid regex: invalid perl operator: (?=",
        ),
    ],
)
def test_check_refuses_a_program_with_its_key_and_line_column(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, old: str, new: str, message: str
) -> None:
    text = PAGE.read_text()
    assert old in text
    config = tmp_path / "bad.yaml"
    config.write_text(text.replace(old, new, 1))
    monkeypatch.setenv("FAKE_PYTHON", sys.executable)  # the fixture's ${env.*}
    monkeypatch.setenv("FAKE_BACKEND", str(FAKE_BACKEND))
    done = modelswap("check", str(config))
    assert done.returncode == 2, done.stderr
    assert message in done.stderr, done.stderr
    ok = modelswap("check", str(PAGE))
    assert ok.returncode == 0, ok.stderr
