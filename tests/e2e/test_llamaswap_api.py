"""llama-swap's API beside the model routes (issue 17): the in-flight table and its cancel,
captures, the activity metrics and the pass-through prefixes, each with llama-swap's status
codes and body shapes, through ``python -m modelswap serve`` and the fake backend."""

from __future__ import annotations

import asyncio
import base64
import json
import re
import sys
import threading
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import openai
import pytest
from tests.e2e import test_llamaswap_compat as compat
from tests.e2e.conftest import (
    Gateway,
    Reply,
    fake_cmd,
    held_cmd,
    next_event,
    open_stream,
    request,
)
from tests.e2e.test_llamaswap_compat import Serve, post

pytestmark = pytest.mark.e2e
serve = compat.serve  # the fixture: a tests/data/llamaswap/ config served on free ports
RFC3339 = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(Z|[+-]\d\d:\d\d)"

StartGateway = Callable[..., Gateway]


def model(name: str, *flags: str, extra: str = "") -> str:
    return f"  {name}:\n    cmd: {fake_cmd('--load-delay', '0', *flags)}\n{extra}"


def inflight(gw: Gateway) -> list[dict[str, Any]]:
    body = gw.get_json("/api/inflight")
    assert body["operation"] == "snapshot"
    rows = body["requests"]
    assert isinstance(rows, list)
    return rows


def backend_stats(gw: Gateway, name: str) -> dict[str, Any]:
    proxy = gw.running()[name]["proxy"]
    with urllib.request.urlopen(f"{proxy}/stats", timeout=10) as resp:
        data = json.loads(resp.read())
    assert isinstance(data, dict)
    return data


def activity(gw: Gateway) -> list[dict[str, Any]]:
    rows = gw.get_json("/api/activity")["data"]
    assert isinstance(rows, list)
    return rows


def test_a_streaming_request_is_listed_and_cancelled(gateway: StartGateway, tmp_path: Any) -> None:
    never = tmp_path / "never"
    gw = gateway(model("held", "--stall-after", "1", "--stall-until", str(never)))
    with open_stream(gw, "held") as resp:
        assert resp.status == 200
        assert next_event(resp) is not None  # the first token: the stream is in flight
        rows = inflight(gw)
        assert len(rows) == 1
        row = rows[0]
        assert row["id"] == "1"  # llama-swap's ids: a counter from 1
        assert (row["model"], row["req_path"], row["method"]) == (
            "held",
            "/v1/chat/completions",
            "POST",
        )
        assert row["remote_ip"] == "127.0.0.1"
        assert row["resp_headers"]["Content-Type"].startswith("text/event-stream")
        assert row["resp_bytes"] > 0
        assert row["elapsed_ms"] >= 0
        assert row["state"] == "relaying"
        assert row["request_id"]
        assert {"timestamp", "req_headers"} <= set(row)

        cancelled = gw.post("/api/inflight/1/cancel", b"")
        assert (cancelled[0], json.loads(cancelled[2])) == (200, {"msg": "ok"})
        while next_event(resp) is not None:  # the stream ends where it was
            pass
    gw.wait_for(lambda: backend_stats(gw, "held")["disconnected"] == 1)  # upstream closed
    gw.wait_for(lambda: not inflight(gw))
    gw.wait_for(lambda: bool(activity(gw)))
    row = activity(gw)[0]
    assert (row["status"], row["error_code"]) == (499, "request_cancelled")


def test_a_request_cancelled_before_its_answer_gets_a_502(gateway: StartGateway) -> None:
    gw = gateway(model("hung", "--hang"))
    replies: list[Reply] = []
    body = json.dumps({"model": "hung", "messages": [{"role": "user", "content": "x"}]})
    headers = {
        "Content-Type": "application/json",
        "X-Request-Id": "cancel-me",
        "Authorization": "Bearer sk-never-listed",
    }
    thread = threading.Thread(
        target=lambda: replies.append(
            request(gw, "POST", "/v1/chat/completions", body.encode(), headers, timeout=120)
        )
    )
    thread.start()
    try:
        gw.wait_for(lambda: backend_stats_or_none(gw, "hung") == 1)
        [row] = inflight(gw)
        assert row["state"] == "waiting"
        assert row["resp_headers"] == {}
        sent = {name.lower(): value for name, value in row["req_headers"].items()}
        assert sent["x-request-id"] == "cancel-me"
        assert "sk-never-listed" not in json.dumps(row)  # credentials masked
        # by the X-Request-Id too, beside llama-swap's id
        status, _, raw = gw.post("/api/inflight/cancel-me/cancel", b"")
        assert (status, json.loads(raw)) == (200, {"msg": "ok"})
    finally:
        gw.post("/api/inflight/cancel-me/cancel", b"")  # never leave the request hanging
        thread.join(120)
    [reply] = replies
    assert reply.status == 502
    assert reply.json()["error"]["code"] == "request_cancelled"
    assert reply.headers["X-Request-Id"] == "cancel-me"
    gw.wait_for(lambda: backend_stats(gw, "hung")["disconnected"] == 1)
    gw.wait_for(lambda: bool(activity(gw)))
    assert (activity(gw)[0]["status"], activity(gw)[0]["error_code"]) == (502, "request_cancelled")


def backend_stats_or_none(gw: Gateway, name: str) -> int | None:
    """The backend's in-flight count once it runs (None before)."""
    if name not in gw.running():
        return None
    try:
        return int(backend_stats(gw, name)["in_flight"])
    except OSError:
        return None


def test_cancel_of_an_unknown_request_is_llamaswaps_404(gateway: StartGateway) -> None:
    gw = gateway(model("m"))
    status, _, raw = gw.post("/api/inflight/42/cancel", b"")
    assert status == 404
    assert json.loads(raw)["error"]["message"] == "inflight request not found"
    assert inflight(gw) == []


def echo_of(reply: Reply) -> dict[str, Any]:
    """What the fake backend saw (it echoes every path it does not serve itself)."""
    assert reply.status == 200, reply.body
    seen = reply.json()
    assert seen["echo"] is True, seen
    return {**seen, "body": json.loads(base64.b64decode(seen["body_b64"]) or b"null")}


def test_pass_through_prefixes_route_by_model(serve: Serve) -> None:
    gw = serve("passthrough.yaml")
    txt2img = echo_of(post(gw, "/sdapi/v1/txt2img", {"model": "image", "prompt": "a cat"}))
    assert (txt2img["path"], txt2img["body"]) == (
        "/sdapi/v1/txt2img",
        {"model": "image", "prompt": "a cat"},
    )
    assert echo_of(post(gw, "/sdapi/v1/img2img", {"model": "image"}))["path"] == "/sdapi/v1/img2img"
    loras = echo_of(request(gw, "GET", "/sdapi/v1/loras?model=image"))
    assert (loras["method"], loras["path"], loras["query"]) == (
        "GET",
        "/sdapi/v1/loras",
        "model=image",
    )
    voices = echo_of(request(gw, "GET", "/v1/audio/voices?model=audio"))
    assert (voices["path"], voices["query"]) == ("/v1/audio/voices", "model=audio")
    task = echo_of(post(gw, "/audioapi/v1/tasks/run", {"model": "audio", "task": "tts"}))
    assert (task["path"], task["body"]["task"]) == ("/v1/tasks/run", "tts")  # prefix dropped

    # /v/: sent without the /v, onto a proxy URL that ends in /v1 -> the backend's /v1/...
    reply = request(
        gw,
        "POST",
        "/v/chat/completions",
        json.dumps({"model": "remote", "messages": [{"role": "user", "content": "hi"}]}).encode(),
        {"Content-Type": "application/json"},
    )
    assert reply.status == 200, reply.body
    assert reply.json()["choices"][0]["message"]["content"]
    echoed = echo_of(post(gw, "/v/embeddings?x=1", {"model": "image", "input": "x"}))
    assert (echoed["path"], echoed["query"]) == ("/embeddings", "x=1")
    # The query goes on as the client escaped it: %26 stays data, not a separator.
    escaped = echo_of(post(gw, "/v/embeddings?x=a%26b%20c", {"model": "image", "input": "x"}))
    assert escaped["query"] == "x=a%26b%20c"

    missing = request(gw, "GET", "/sdapi/v1/loras")
    assert missing.status == 400
    assert missing.json()["error"]["param"] == "model"
    unknown = post(gw, "/sdapi/v1/txt2img", {"model": "nope"})
    assert unknown.status == 404
    rows = activity(gw)
    assert {"/sdapi/v1/txt2img", "/audioapi/v1/tasks/run", "/v/chat/completions"} <= {
        row["route"] for row in rows
    }


def test_comfyui_is_the_comfyui_auto_model(serve: Serve) -> None:
    gw = serve("passthrough.yaml")
    root = request(gw, "GET", "/comfyui?tab=1")
    assert (root.status, root.headers["Location"]) == (301, "/comfyui/?tab=1")
    # Escapes stay escaped: decoded, %1F would be a control character in Location (the fuzz
    # suite's find: the connection was dropped without an answer) and %26 a separator.
    escaped = request(gw, "POST", "/comfyui?a=%1F%26b")
    assert (escaped.status, escaped.headers["Location"]) == (308, "/comfyui/?a=%1F%26b")
    assert request(gw, "POST", "/comfyui", b"{}").status == 308
    early = request(gw, "GET", "/comfyui/api/queue")  # only the root may start it
    assert early.status == 409
    assert early.json()["error"]["message"] == (
        "model comfyui_auto is not loaded; only /comfyui/ can start it"
    )
    assert "comfyui_auto" not in gw.running()
    assert echo_of(request(gw, "GET", "/comfyui/"))["path"] == "/"
    queued = echo_of(
        request(
            gw,
            "POST",
            "/comfyui/api/prompt?client=7",
            b'{"prompt": {}}',
            {"Content-Type": "application/json"},
        )
    )
    assert (queued["path"], queued["query"], queued["body"]) == (
        "/api/prompt",
        "client=7",
        {"prompt": {}},
    )
    history = echo_of(request(gw, "GET", "/comfyui/api/history?q=a%26b%0A"))
    assert history["query"] == "q=a%26b%0A"
    assert request(gw, "GET", "/comfyui/../api").status in (400, 404)


def test_comfyui_without_the_model_is_404(gateway: StartGateway) -> None:
    gw = gateway(model("m"))
    reply = request(gw, "GET", "/comfyui/")
    assert reply.status == 404
    assert reply.json()["error"]["message"] == "local model comfyui_auto not found"


def test_captures_and_activity_metrics_in_llamaswaps_shape(gateway: StartGateway) -> None:
    gw = gateway(model("m"), extra_top="activity:\n  capture: true\n  captureBytes: 4096\n")
    secret = "sk-in-the-body-0123456789"
    for _ in range(3):
        reply = request(
            gw,
            "POST",
            "/v1/chat/completions",
            json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode(),
            {"Content-Type": "application/json", "Authorization": f"Bearer {secret}"},
        )
        assert reply.status == 200, reply.body
    gw.wait_for(lambda: gw.get_json("/api/metrics/activity")["total"] == 3)

    page = gw.get_json("/api/metrics/activity?limit=2")
    assert {k: page[k] for k in ("page", "limit", "total", "total_pages")} == {
        "page": 1,
        "limit": 2,
        "total": 3,
        "total_pages": 2,
    }
    rows = page["data"]
    assert isinstance(rows, list)
    newest = rows[0]
    assert newest["id"] > rows[1]["id"]  # newest first
    assert (newest["model"], newest["req_path"], newest["resp_status_code"]) == (
        "m",
        "/v1/chat/completions",
        200,
    )
    assert newest["tokens"]["output_tokens"] > 0
    assert newest["has_capture"] is True
    assert newest["timestamp"].endswith("Z")
    assert newest["request_id"]
    ascending = gw.get_json("/api/metrics/activity?sort=id&order=asc&page=2&limit=2")["data"]
    assert [row["id"] for row in ascending] == [newest["id"]]  # type: ignore[index]

    for bad, message in (
        ("limit=1000", "limit must be between 1 and 999"),
        ("page=0", "page must be >= 1"),
        ("sort=nope", "invalid sort column"),
        ("order=up", "order must be asc or desc"),
        ("start=yesterday", "invalid 'start' timestamp, use RFC3339 format"),
    ):
        reply = request(gw, "GET", f"/api/metrics/activity?{bad}")
        assert (reply.status, reply.json()["error"]["message"]) == (400, message)

    stats = gw.get_json("/api/metrics/stats?model=m")
    assert stats["total_requests"] == 3
    assert stats["total_output_tokens"] == 3 * newest["tokens"]["output_tokens"]
    every = gw.get_json("/api/metrics/activity")["data"]
    assert stats["total_cache_tokens"] == sum(r["tokens"]["cache_tokens"] for r in every)  # type: ignore[union-attr]
    assert stats["prompt_histogram"] is None
    assert gw.get_json("/api/metrics/stats?model=other")["total_requests"] == 0

    captured = gw.get_json(f"/api/captures/{newest['id']}")
    assert set(captured) >= {
        "id",
        "req_path",
        "req_headers",
        "req_body",
        "resp_headers",
        "resp_body",
    }
    assert captured["id"] == newest["id"]
    sent = json.loads(base64.b64decode(str(captured["req_body"])))
    assert sent["messages"] == [{"role": "user", "content": "hi"}]
    answer = json.loads(base64.b64decode(str(captured["resp_body"])))
    assert answer["choices"][0]["message"]["content"]
    req_headers = {k.lower(): v for k, v in captured["req_headers"].items()}  # type: ignore[union-attr]
    assert req_headers["content-type"] == "application/json"
    assert secret not in json.dumps(captured)  # the client's key is masked
    resp_headers = {k.lower() for k in captured["resp_headers"]}  # type: ignore[union-attr]
    assert "content-type" in resp_headers

    assert request(gw, "GET", "/api/captures/abc").status == 400
    missing = request(gw, "GET", "/api/captures/999")
    assert (missing.status, missing.json()["error"]["message"]) == (404, "capture not found")


def test_no_capture_without_activity_capture(gateway: StartGateway) -> None:
    gw = gateway(model("m"))
    assert (
        request(
            gw,
            "POST",
            "/v1/chat/completions",
            json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode(),
            {"Content-Type": "application/json"},
        ).status
        == 200
    )
    gw.wait_for(lambda: gw.get_json("/api/metrics/activity")["total"] == 1)
    [row] = gw.get_json("/api/metrics/activity")["data"]  # type: ignore[misc]
    assert row["has_capture"] is False
    assert request(gw, "GET", f"/api/captures/{row['id']}").status == 404


COMFYUI_FAKE = Path(__file__).resolve().parents[1] / "fakes" / "comfyui_server.py"


def test_comfyui_websocket_is_relayed_while_ready(gateway: StartGateway) -> None:
    cmd = json.dumps(f'"{sys.executable}" "{COMFYUI_FAKE}" --port ${{PORT}}')
    gw = gateway(f"  comfyui_auto:\n    cmd: {cmd}\n    checkEndpoint: /health\n")
    assert request(gw, "GET", "/comfyui/ws").status == 409  # not loaded: never started by it
    assert request(gw, "GET", "/comfyui/").status == 200  # the root starts it

    async def talk() -> list[object]:
        seen: list[object] = []
        url = gw.url("/comfyui/ws?clientId=abc")
        async with aiohttp.ClientSession() as session, session.ws_connect(url) as ws:
            seen.append(json.loads((await ws.receive(timeout=60)).data))
            await ws.send_str("hello")
            seen.append((await ws.receive(timeout=60)).data)
            await ws.send_bytes(b"\x00\x01")
            seen.append((await ws.receive(timeout=60)).data)
            await ws.send_str("close")  # the server closes: so does the gateway
            seen.append((await ws.receive(timeout=60)).type)
        return seen

    seen = asyncio.run(talk())
    assert seen == [{"type": "status", "sid": "abc"}, "hello", b"\x00\x01", aiohttp.WSMsgType.CLOSE]


def test_versionless_chat_streams_carry_the_loading_state(serve: Serve) -> None:
    gw = serve("passthrough.yaml")
    client = openai.OpenAI(base_url=gw.url("/v"), api_key="none", timeout=120)
    reasoning, content = [], []
    for chunk in client.chat.completions.create(
        model="slow-remote", messages=[{"role": "user", "content": "hi"}], stream=True
    ):
        if chunk.choices:
            delta = chunk.choices[0].delta
            if (extra := delta.model_extra or {}).get("reasoning_content"):
                reasoning.append(extra["reasoning_content"])
            if delta.content:
                content.append(delta.content)
    assert reasoning, "no loading state arrived"
    assert reasoning[0].startswith("loading model slow-remote")
    assert content


def test_capture_buffer_of_a_llamaswap_config_fills_api_captures(serve: Serve) -> None:
    """logging.yaml sets captureBuffer: 15 (MB), as llama-swap's config.example.yaml does."""
    gw = serve("logging.yaml")
    reply = post(
        gw,
        "/v1/chat/completions",
        {"model": "llama", "messages": [{"role": "user", "content": "x"}]},
    )
    assert reply.status == 200, reply.body
    gw.wait_for(lambda: gw.get_json("/api/metrics/activity")["total"] == 1)
    [row] = gw.get_json("/api/metrics/activity")["data"]  # type: ignore[misc]
    assert row["has_capture"] is True
    captured = gw.get_json(f"/api/captures/{row['id']}")
    assert json.loads(base64.b64decode(str(captured["req_body"])))["model"] == "llama"
    assert re.search(rf"^{RFC3339} INFO", gw.log(), re.MULTILINE)  # logTimeFormat: rfc3339


def test_a_stream_opened_while_its_model_starts_is_waiting_until_cancelled(
    gateway: StartGateway, tmp_path: Path
) -> None:
    release = tmp_path / "release"
    gw = gateway(f"  held:\n    cmd: {held_cmd(release, '--load-delay', '0')}\n")
    try:
        with open_stream(gw, "held") as resp:
            assert resp.status == 200  # the event stream opened early, with progress comments
            gw.wait_for(lambda: bool(inflight(gw)) and bool(inflight(gw)[0]["resp_headers"]))
            [row] = inflight(gw)
            assert row["state"] == "waiting"  # no byte of the backend's yet
            status, _, raw = gw.post(f"/api/inflight/{row['id']}/cancel", b"")
            assert (status, json.loads(raw)) == (200, {"msg": "ok"})
            while next_event(resp) is not None:
                pass
        gw.wait_for(lambda: not inflight(gw))
        gw.wait_for(lambda: bool(activity(gw)))
        assert (activity(gw)[0]["status"], activity(gw)[0]["error_code"]) == (
            499,
            "request_cancelled",
        )
    finally:
        release.touch()  # let the start finish, so that teardown stops a running backend


def test_image_and_audio_bodies_are_not_captured_as_in_llamaswap(gateway: StartGateway) -> None:
    gw = gateway(model("sd"), extra_top="activity:\n  capture: true\n")
    for path in ("/sdapi/v1/txt2img", "/sdapi/v1/img2img", "/v1/chat/completions"):
        reply = request(
            gw,
            "POST",
            path,
            json.dumps({"model": "sd", "prompt": "a cat", "messages": []}).encode(),
            {"Content-Type": "application/json"},
        )
        assert reply.status == 200, (path, reply.body)
    gw.wait_for(lambda: gw.get_json("/api/metrics/activity")["total"] == 3)
    rows = gw.get_json("/api/metrics/activity?sort=id&order=asc")["data"]
    captures = {row["req_path"]: gw.get_json(f"/api/captures/{row['id']}") for row in rows}  # type: ignore[union-attr]
    txt2img, img2img, chat = (
        captures[p] for p in ("/sdapi/v1/txt2img", "/sdapi/v1/img2img", "/v1/chat/completions")
    )
    assert json.loads(base64.b64decode(str(txt2img["req_body"])))["prompt"] == "a cat"
    assert txt2img["resp_body"] == ""  # the image is not kept
    assert (img2img["req_body"], img2img["resp_body"]) == ("", "")  # headers only
    assert img2img["req_headers"]
    assert chat["req_body"]
    assert chat["resp_body"]
