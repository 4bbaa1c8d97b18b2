"""llama-swap as it is today (issue 29): one config per page of its knowledge base
(tests/data/llamaswap/newest/), each run by ``python -m modelswap serve`` against the fake
backend or a recording peer, and each doing what the page says — shown on what the backend
received (bodies, headers, connections) and on what the client got."""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.e2e.conftest import (
    FAKE_BACKEND,
    REPO,
    Gateway,
    Reply,
    chat,
    free_port,
    free_port_range,
    launch_gateway,
    load_model,
    next_event,
    open_stream,
    request,
    serve_command,
    stop_gateway,
)
from tests.e2e.test_peers import RECORDER, Recorder, _wait_listening

pytestmark = pytest.mark.e2e

NEWEST = REPO / "tests" / "data" / "llamaswap" / "newest"
JSON = {"Content-Type": "application/json"}
Serve = Callable[..., Gateway]


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Serve]:
    """``serve(fixture, (old, new), ..., **env)``: modelswap serving that fixture (with those
    texts replaced), ``${env.NAME}`` from ``env`` plus the fake backend's paths, its models on
    free ports."""
    started: list[Gateway] = []

    def start(name: str, *edits: tuple[str, str], **env: str) -> Gateway:
        text = (NEWEST / name).read_text()
        for old, new in edits:
            assert old in text
            text = text.replace(old, new)
        config = tmp_path / name
        config.write_text(
            f"stateDir: {tmp_path / 'state'}\nstartPort: {free_port_range(4)}\n{text}"
        )
        log_path = tmp_path / f"{name}.log"
        fake = {"FAKE_PYTHON": sys.executable, "FAKE_BACKEND": str(FAKE_BACKEND)}
        return launch_gateway(config, log_path, started, env={**fake, **env})

    yield start
    for gw in started:
        stop_gateway(gw)


@pytest.fixture
def peer(tmp_path: Path) -> Iterator[Callable[..., Recorder]]:
    """``peer(*flags)``: a recording peer (tests/fakes/recording_peer.py) on a free port."""
    started: list[subprocess.Popen[bytes]] = []

    def start(*flags: str) -> Recorder:
        port = free_port()
        record = tmp_path / f"peer-{len(started)}.jsonl"
        cmd = [sys.executable, str(RECORDER), "--port", str(port), "--record", str(record)]
        proc = subprocess.Popen([*cmd, *flags], stdin=subprocess.DEVNULL)
        started.append(proc)
        _wait_listening(port, proc)
        return Recorder(proc, port, record)

    yield start
    for proc in started:  # by handle: only what this fixture started
        proc.terminate()
        proc.wait(timeout=30)


def at(recorder: Recorder) -> tuple[str, str]:
    """The edit that points a fixture's peer (http://127.0.0.1:9) at ``recorder``."""
    return ("http://127.0.0.1:9", recorder.url)


def post(gw: Gateway, path: str, body: dict[str, Any], **headers: str) -> Reply:
    return request(gw, "POST", path, json.dumps(body).encode(), {**JSON, **headers})


def received(gw: Gateway, body: dict[str, Any]) -> dict[str, Any]:
    """The body the backend received for ``body`` (the fake echoes /v1/responses)."""
    reply = post(gw, "/v1/responses", body)
    assert reply.status == 200, reply.body
    data = json.loads(base64.b64decode(reply.json()["body_b64"]))
    assert isinstance(data, dict)
    return data


# ---- api-integration/soft-defaults.md -------------------------------------------------------


def test_soft_defaults_fill_only_what_the_request_lacks(
    serve: Serve, peer: Callable[..., Recorder]
) -> None:
    gw = serve("soft-defaults.yaml", at(peer("--models", "far")))
    sent = {"model": "qwen", "input": "x", "top_k": 99}
    assert received(gw, sent) == {
        "model": "qwen",
        "input": "x",
        "top_k": 20,  # stripped first: the default fills it again
        "seed": 7,
        "temperature": 0.7,
        "max_tokens": 100,  # the hard spelling won over max_tokens?
        "reasoning_effort": "low",
    }
    # A value present counts as sent, whatever it is: null, 0, false, "".
    for value in (None, 0, False, ""):
        got = received(gw, {"model": "qwen", "input": "x", "temperature": value})
        assert "temperature" in got, got
        assert got["temperature"] == value, got
    # Never the literal key: the backend sees no name ending in "?".
    assert not [k for k in received(gw, sent) if k.endswith("?")]


def test_soft_defaults_by_name_yield_to_the_client_and_to_set_params(serve: Serve) -> None:
    gw = serve("soft-defaults.yaml")  # the peer is not asked: only the local model is used
    got = received(gw, {"model": "qwen:extraction", "input": "x", "temperature": 1.5})
    assert got["temperature"] == 0.2  # forced for this name
    assert got["top_p"] == 0.9  # this name's default
    assert got["reasoning_effort"] == "low"  # setParams's default came first: a no-op here
    mine = received(gw, {"model": "qwen:extraction", "input": "x", "top_p": 0.5})
    assert mine["top_p"] == 0.5  # the client's value wins over the name's default
    plain = received(gw, {"model": "qwen", "input": "x"})
    assert "top_p" not in plain  # only for the name that sets it


def test_soft_defaults_on_a_peer(serve: Serve, peer: Callable[..., Recorder]) -> None:
    far = peer("--models", "far")
    gw = serve("soft-defaults.yaml", at(far))
    chat = {"model": "far", "messages": [{"role": "user", "content": "hi"}]}
    assert post(gw, "/v1/chat/completions", chat).status == 200
    assert post(gw, "/v1/chat/completions", {**chat, "max_tokens": 3}).status == 200
    bodies = [json.loads(str(row["body"])) for row in far.requests()]
    assert [b.get("max_tokens") for b in bodies] == [64, 3]
    assert not [k for b in bodies for k in b if re.search(r"\?$", k)]


# ---- routing/capacity-and-queues.md ---------------------------------------------------------


def test_global_concurrency_limit_answers_429_at_once_beyond_it(
    serve: Serve, tmp_path: Path
) -> None:
    release = tmp_path / "release"
    gw = serve("capacity-and-queues.yaml", ("release.flag", str(release)))
    for model in ("model1", "model2"):
        load_model(gw, model)
    # Two streams, one per model, held open by the backends: the limit (2) is reached.
    with open_stream(gw, "model1") as first, open_stream(gw, "model2") as second:
        assert next_event(first) is not None
        assert next_event(second) is not None
        for model in ("model1", "model2"):  # across every model combined, for each of them
            refused = chat(gw, model, max_tokens=1)
            assert refused.status == 429, refused.body
            assert refused.headers["Retry-After"] == "1"
            assert refused.json()["error"]["code"] == "concurrency_limit"
        # The gateway's own routes are not inference: served as ever.
        assert request(gw, "GET", "/v1/models").status == 200
        assert request(gw, "GET", "/running").status == 200
        release.touch()
        while next_event(first) is not None:
            pass
        while next_event(second) is not None:
            pass
    gw.wait_for(lambda: chat(gw, "model1", max_tokens=1).status == 200)
    # Nothing was queued: each backend saw its stream and the last request only.
    stats = [request(gw, "GET", f"/upstream/{m}/stats").json() for m in ("model1", "model2")]
    assert [s["requests"] for s in stats] == [2, 1], stats


def test_global_concurrency_limit_zero_counts_nothing(serve: Serve, tmp_path: Path) -> None:
    release = tmp_path / "release"
    gw = serve(
        "capacity-and-queues.yaml",
        ("globalConcurrencyLimit: 2", "globalConcurrencyLimit: 0"),
        ("release.flag", str(release)),
    )
    load_model(gw, "model1")
    with (
        open_stream(gw, "model1") as one,
        open_stream(gw, "model1") as two,
        open_stream(gw, "model1") as three,
    ):
        for stream in (one, two, three):
            assert stream.status == 200
            assert next_event(stream) is not None
        release.touch()


# ---- api-integration/cors.md ----------------------------------------------------------------

DASHBOARD = "https://dashboard.example.com"
KEY = {"Authorization": "Bearer sk-dashboard-0001"}


def cors_headers(reply: Reply) -> dict[str, list[str]]:
    """Every Access-Control-* header of ``reply``, each with all its values (a header sent
    twice shows twice)."""
    out: dict[str, list[str]] = {}
    for name, value in reply.headers.items():
        if name.lower().startswith("access-control-"):
            out.setdefault(name.lower(), []).append(value)
    return out


def test_cors_preflight_is_answered_before_auth_for_a_listed_origin(serve: Serve) -> None:
    gw = serve("cors.yaml")
    asked = {
        "Origin": DASHBOARD,
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "content-type, authorization, bad header",
    }
    reply = request(gw, "OPTIONS", "/v1/chat/completions", headers=asked)  # no key
    assert reply.status == 204
    assert cors_headers(reply) == {
        "access-control-allow-origin": [DASHBOARD],
        "access-control-allow-credentials": ["true"],
        "access-control-allow-methods": ["GET, POST, PUT, PATCH, DELETE, OPTIONS"],
        "access-control-allow-headers": ["content-type, authorization"],  # a bad name dropped
        "access-control-max-age": ["600"],
    }
    assert reply.headers["Vary"] == "Origin, Access-Control-Request-Headers"
    # The origin is matched whatever its case, and echoed as the browser sent it.
    upper = request(
        gw, "OPTIONS", "/v1/models", headers={**asked, "Origin": "HTTP://LOCALHOST:5173"}
    )
    assert upper.headers["Access-Control-Allow-Origin"] == "HTTP://LOCALHOST:5173"


def test_cors_answers_carry_the_origin_and_unlisted_origins_get_none(serve: Serve) -> None:
    gw = serve("cors.yaml")
    body = {"model": "model1", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    listed = post(gw, "/v1/chat/completions", body, Origin=DASHBOARD, **KEY)
    assert listed.status == 200, listed.body
    assert cors_headers(listed) == {
        "access-control-allow-origin": [DASHBOARD],
        "access-control-allow-credentials": ["true"],  # exposedHeaders unset: none sent
    }
    assert "Origin" in listed.headers["Vary"]
    refused = request(gw, "GET", "/v1/models", headers={"Origin": DASHBOARD})  # no key
    assert refused.status == 401
    assert refused.headers["Access-Control-Allow-Origin"] == DASHBOARD  # a page reads why
    # An unlisted origin is served as usual, without any CORS header: the browser drops it.
    other = post(gw, "/v1/chat/completions", body, Origin="https://evil.example", **KEY)
    assert other.status == 200
    assert cors_headers(other) == {}
    preflight = {"Origin": "https://evil.example", "Access-Control-Request-Method": "POST"}
    unlisted = request(gw, "OPTIONS", "/v1/chat/completions", headers=preflight)
    assert unlisted.status == 204
    assert cors_headers(unlisted) == {}
    # No Origin (curl, SDKs): no CORS header at all.
    plain = post(gw, "/v1/chat/completions", body, **KEY)
    assert plain.status == 200
    assert cors_headers(plain) == {}


def test_cors_headers_of_a_backend_are_dropped(serve: Serve, peer: Callable[..., Recorder]) -> None:
    far = peer("--models", "far", "--cors")  # it sends Allow-Origin: * and Allow-Credentials
    gw = serve("cors.yaml", at(far))
    body = {"model": "far", "messages": [{"role": "user", "content": "hi"}]}
    listed = post(gw, "/v1/chat/completions", body, Origin=DASHBOARD, **KEY)
    assert listed.status == 200, listed.body
    assert cors_headers(listed) == {  # exactly one of each: the gateway's own
        "access-control-allow-origin": [DASHBOARD],
        "access-control-allow-credentials": ["true"],
    }
    plain = post(gw, "/v1/chat/completions", body, **KEY)
    assert cors_headers(plain) == {}  # not the peer's * either
    assert far.requests()  # the peer did answer


@pytest.mark.parametrize(
    ("edit", "where"),
    [
        (('"http://localhost:5173"', '"http://localhost:5173/"'), "allowedOrigins[1]"),
        (('"http://localhost:5173"', '"http://localhost:5173/app"'), "allowedOrigins[1]"),
        (('"http://localhost:5173"', '"*"'), "allowCredentials"),
    ],
    ids=["trailing-slash", "path", "star-with-credentials"],
)
def test_cors_configs_llama_swap_refuses_are_refused_at_startup(
    tmp_path: Path, edit: tuple[str, str], where: str
) -> None:
    config = tmp_path / "cors.yaml"
    config.write_text((NEWEST / "cors.yaml").read_text().replace(*edit))
    env = {**os.environ, "FAKE_PYTHON": sys.executable, "FAKE_BACKEND": str(FAKE_BACKEND)}
    for command in (
        [sys.executable, "-m", "modelswap", "check", str(config)],
        serve_command(config, f"127.0.0.1:{free_port()}"),
    ):
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode != 0, done.stdout
        assert f"security.cors.{where}" in done.stderr + done.stdout


# ---- connectivity/proxy-timeouts.md ---------------------------------------------------------


def backend_connections(gw: Gateway, model: str) -> int:
    """The connections open to ``model``'s backend (asked of it directly, not through the
    gateway; --count-connections does not count the one asking)."""
    proxy = str(gw.running()[model]["proxy"])
    with urllib.request.urlopen(f"{proxy}/connections", timeout=10) as resp:
        return int(json.loads(resp.read())["open"])


def test_disable_keep_alives_opens_a_connection_per_request(serve: Serve) -> None:
    gw = serve("proxy-timeouts.yaml")
    for model in ("my-model", "pooled", "short-idle"):
        load_model(gw, model)
    for _ in range(3):
        echo = post(gw, "/v1/responses", {"model": "my-model", "input": "x"}).json()
        assert echo["headers"]["connection"] == "close"  # the backend is told so, each time
        kept = post(gw, "/v1/responses", {"model": "pooled", "input": "x"}).json()
        assert kept["headers"].get("connection", "keep-alive") == "keep-alive"
    # Each request's connection was closed after it; the pooled model's one is kept. (The
    # gateway's own health and metadata connections close within 15 s idle: waited out.)
    gw.wait_for(lambda: backend_connections(gw, "my-model") == 0)
    gw.wait_for(lambda: backend_connections(gw, "pooled") == 1)
    # timeouts.idleConn: an idle kept connection is closed after that many seconds.
    post(gw, "/v1/responses", {"model": "short-idle", "input": "x"})
    gw.wait_for(lambda: backend_connections(gw, "short-idle") == 0)
    assert backend_connections(gw, "pooled") == 1  # idleConn: 90 keeps it


def test_response_header_timeout_is_the_wait_for_the_first_byte(serve: Serve) -> None:
    gw = serve("proxy-timeouts.yaml")
    load_model(gw, "slow")
    # The backend never answers: 504 after responseHeader (1 s). With modelswap's default
    # (600 s) the client's own wait (60 s) would end first.
    reply = post(gw, "/v1/chat/completions", {"model": "slow", "messages": []})
    assert reply.status == 504, reply.body
    assert reply.json()["error"]["code"] == "upstream_timeout"
    assert "1 s" in reply.json()["error"]["message"]


# ---- GET /v1/models as clients read it ------------------------------------------------------


def listed(gw: Gateway) -> dict[str, dict[str, Any]]:
    rows = request(gw, "GET", "/v1/models").json()["data"]
    return {row["id"]: row for row in rows}


def test_models_carry_the_routers_status_beside_modelswaps_state(
    serve: Serve, tmp_path: Path
) -> None:
    release = tmp_path / "release"
    gw = serve("model-listings.yaml", ("release.flag", str(release)))
    rows = listed(gw)
    for model in ("model1", "one", "held", "broken"):
        assert rows[model]["status"] == {"value": "unloaded"}, rows[model]
        assert rows[model]["state"] == "stopped"
    assert chat(gw, "one", max_tokens=1).status == 200
    gw.wait_for(lambda: "n_ctx" in listed(gw)["model1"].get("meta", {}))
    rows = listed(gw)
    for model in ("model1", "one"):  # an alias is served by the same process
        assert rows[model]["status"] == {"value": "loaded"}
        assert rows[model]["state"] == "ready"
        assert rows[model]["meta"]["llamaswap"] == {"family": "fake"}
        assert rows[model]["meta"]["n_ctx"] == 2048  # what the backend reported
    assert request(gw, "GET", "/v1/models/one").json()["status"] == {"value": "loaded"}
    # One model at a time here: each start below stops the one before.
    starting = threading.Thread(target=load_model, args=(gw, "held"))
    starting.start()
    try:
        gw.wait_for(lambda: listed(gw)["held"]["status"] == {"value": "loading"})
        assert listed(gw)["held"]["state"] == "starting"
    finally:
        release.touch()
        starting.join()
    assert listed(gw)["held"]["status"] == {"value": "loaded"}
    assert chat(gw, "broken", max_tokens=1).status == 503
    broken = listed(gw)["broken"]
    assert broken["status"] == {"value": "unloaded", "failed": True}
    assert broken["state"] == "failed"


# ---- the August corpus's last refusals ------------------------------------------------------


def test_a_models_unload_timeout_zero_is_the_top_levels(serve: Serve) -> None:
    gw = serve("august-unload-timeout-zero.yaml")
    assert chat(gw, "model1", max_tokens=1).status == 200
    assert request(gw, "GET", "/unload").body == b"OK"
    assert gw.running() == {}
    logs = request(gw, "GET", "/logs/model1").body.decode()
    assert "no exit 1.5 s after the stop request: SIGKILL" in logs, logs


def test_performance_enable_false_turns_the_monitor_off(serve: Serve) -> None:
    gw = serve("august-performance-enable.yaml")
    reply = request(gw, "GET", "/api/performance")
    assert reply.status == 503
    assert reply.json() == {
        "enabled": False,
        "reason": "performance.disabled is true in the config",
    }
    on = serve("august-performance-enable.yaml", ("enable: false", "enable: true"))
    assert request(on, "GET", "/api/performance").status == 200


def test_profile_pins_may_name_a_selector_or_a_peers_model(
    serve: Serve, peer: Callable[..., Recorder]
) -> None:
    far = peer("--models", "far")
    gw = serve("august-profile-pins.yaml", at(far))
    gw.wait_for(lambda: set(gw.running()) == {"model1"})  # the active profile's local pin
    message = [{"role": "user", "content": "hi"}]
    big = post(gw, "/v1/chat/completions", {"model": "big", "messages": message})
    assert big.status == 200, big.body
    assert [json.loads(str(r["body"]))["model"] for r in far.requests()] == ["far"]
    # the selector chooses a ready target: model1, loaded by the profile
    assert received(gw, {"model": "chat", "input": "x"})["model"] == "model1"
    assert received(gw, {"model": "small", "input": "x"})["model"] == "model1"
    assert set(gw.running()) == {"model1"}


# ---- ui.activity.session_id -----------------------------------------------------------------


def test_session_headers_are_recorded_and_filterable(serve: Serve) -> None:
    gw = serve("ui-activity-session.yaml")
    body = {"model": "model1", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
    sent = [
        {"X-Session-ID": "chat-1"},
        {"X-Session-ID": "chat-1", "X-Litellm-Session-Id": "ignored: the first header wins"},
        {"X-Litellm-Session-Id": "lite-7"},
        {},
    ]
    for headers in sent:
        assert post(gw, "/v1/chat/completions", body, **headers).status == 200

    def rows(query: str = "") -> list[dict[str, Any]]:
        data = request(gw, "GET", f"/api/activity{query}").json()["data"]
        assert isinstance(data, list)
        return data

    gw.wait_for(lambda: len(rows()) == 4)
    sessions = [row.get("metadata", {}).get("session_id") for row in reversed(rows())]
    assert sessions == ["chat-1", "chat-1", "lite-7", None]
    assert len(rows("?session_id=chat-1")) == 2
    assert [r["metadata"] for r in rows("?session_id=lite-7")] == [{"session_id": "lite-7"}]
    assert rows("?session_id=nobody") == []
