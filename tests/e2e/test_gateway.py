"""End to end with fake backends: ``python -m modelswap serve`` as a subprocess, real HTTP clients
(urllib/http.client, aiohttp), real child processes checked with psutil."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import http.client
import json
import re
import shlex
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

import aiohttp
import psutil
import pytest
from tests.e2e.conftest import (
    HANG,
    Door,
    Gateway,
    Reply,
    chat,
    chat_body,
    fake_cmd,
    fake_cmd_text,
    held_cmd,
    load_model,
    next_event,
    open_stream,
    pid_alive,
    queue_depth,
    request,
    stream_tokens,
    wait_dead,
)
from tests.e2e.test_observability import sse_payloads, usage_only_chunks

pytestmark = pytest.mark.e2e

StartGateway = Callable[..., Gateway]
JSON = {"Content-Type": "application/json"}
ENVELOPE_KEYS = {"message", "type", "code", "param"}


def gateway_error(reply: Reply, status: int, code: str) -> dict[str, object]:
    """Assert ``reply`` is an error modelswap authored; return its ``error`` object."""
    assert reply.status == status, reply.body
    assert reply.headers["X-Modelswap-Error"] == "1"
    assert reply.headers.get_content_type() == "application/json"
    error = reply.json()["error"]
    assert set(error) >= ENVELOPE_KEYS
    assert error["code"] == code
    assert isinstance(error["message"], str)
    assert error["message"]
    return error  # type: ignore[no-any-return]


def fake_pid(reply: Reply) -> int:
    assert reply.status == 200, reply.body
    return int(reply.headers["X-Fake-Pid"])


def backend_pid(gw: Gateway, model: str) -> int:
    """The pid of ``model``'s running fake backend, from the line it prints as it starts (the
    last one in the model's log). Unlike the X-Fake-Pid header, there for a stream whichever
    way it began: one whose start outlasted the first loading comment gets the gateway's own
    early 200, without the backend's headers."""
    found = re.findall(
        r"fake backend starting: pid=(\d+)", request(gw, "GET", f"/logs/{model}").body.decode()
    )
    assert found, f"no start line in the log of {model}"
    return int(found[-1])


def starts(gw: Gateway, model: str) -> int:
    """How many times modelswap began starting ``model`` (from its own log)."""
    return gw.log().count(f"model {model}: stopped -> starting") + gw.log().count(
        f"model {model}: failed -> starting"
    )


def send_only(
    gw: Gateway, body: bytes, path: str = "/v1/chat/completions"
) -> http.client.HTTPConnection:
    """Send a request now, read the response later with ``conn.getresponse()``."""
    conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=60)
    conn.request("POST", path, body, JSON)
    return conn


def read_reply(conn: http.client.HTTPConnection) -> Reply:
    try:
        resp = conn.getresponse()
        return Reply(resp.status, resp.headers, resp.read())
    finally:
        conn.close()


EXPECTED_20 = [f"tok{i} " for i in range(20)]


def model(model_id: str, *flags: str, delay: float = 0.2, **keys: str) -> str:
    """One model's YAML: the fake backend with ``flags``; ``keys`` are more YAML keys."""
    lines = [f"  {model_id}:"]
    lines += [f"    {key}: {value}" for key, value in keys.items()]
    lines.append(f"    cmd: {fake_cmd('--load-delay', str(delay), *flags)}")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- starting and swapping


async def test_concurrent_requests_for_a_stopped_model_start_it_once(
    gateway: StartGateway,
) -> None:
    gw = gateway(model("a", delay=0.5))

    async def one(session: aiohttp.ClientSession) -> tuple[int, str]:
        async with session.post(gw.url("/v1/chat/completions"), data=chat_body("a")) as resp:
            await resp.read()
            return resp.status, resp.headers["X-Fake-Pid"]

    async with aiohttp.ClientSession(headers=JSON) as session:
        results = await asyncio.gather(*(one(session) for _ in range(8)))

    assert [status for status, _ in results] == [200] * 8
    pids = {pid for _, pid in results}
    assert len(pids) == 1
    assert starts(gw, "a") == 1
    assert gw.running()["a"]["state"] == "ready"
    stats = request(gw, "GET", "/upstream/a/stats").json()
    assert stats["pid"] == int(pids.pop())
    assert stats["requests"] == 8
    assert stats["completed"] == 8


def test_swap_stops_the_old_backend_and_collates_a_b_a_b(
    gateway: StartGateway, tmp_path: Path
) -> None:
    release = tmp_path / "release-c"
    held_c = f"  c:\n    cmd: {held_cmd(release, '--load-delay', '0.2')}\n"
    gw = gateway(model("a") + model("b") + held_c)
    pid_a = fake_pid(chat(gw, "a"))
    pid_b = fake_pid(chat(gw, "b"))
    assert pid_a != pid_b
    assert not pid_alive(pid_a)
    assert pid_alive(pid_b)
    assert set(gw.running()) == {"b"}
    assert gw.running()["b"]["state"] == "ready"

    # c starts (held until the test lets it go); A B A B arrive while it is starting.
    conn_c = send_only(gw, chat_body("c"))
    gw.wait_for(lambda: gw.running().get("c", {}).get("state") == "starting")
    order = ("a", "b", "a", "b")
    conns = [send_only(gw, chat_body(name)) for name in order]
    gw.wait_for(lambda: (queue_depth(gw, "a"), queue_depth(gw, "b")) == (2, 2))
    assert gw.running()["c"]["state"] == "starting", "the test needs A B A B queued during c"
    release.touch()
    reply_c = read_reply(conn_c)
    replies = [read_reply(conn) for conn in conns]

    fake_pid(reply_c)
    by_model: dict[str, set[int]] = {"a": set(), "b": set()}
    for name, reply in zip(order, replies, strict=True):
        by_model[name].add(fake_pid(reply))
    assert len(by_model["a"]) == 1
    assert len(by_model["b"]) == 1
    assert pid_a not in by_model["a"]
    assert pid_b not in by_model["b"]
    # One start each before, one more each for A B A B: two further starts, not four.
    assert starts(gw, "a") == 2
    assert starts(gw, "b") == 2
    assert starts(gw, "c") == 1


def test_a_swap_waits_for_the_in_flight_stream(
    door_gateway: StartGateway, door: Door, tmp_path: Path
) -> None:
    # a's stream stops after 18 tokens until the test lets it go: it is surely in flight
    # while the test looks, however slowly a loaded machine lets the test look.
    release = tmp_path / "release-a"
    held = ("--stall-after", "18", "--stall-until", shlex.quote(str(release)))
    gw = door_gateway(model("a", "--tps", "20", "--tokens", "20", *held) + model("b"))
    answered: list[tuple[float, Reply]] = []
    load_model(gw, "a")  # the stream then gets the backend's own headers
    watch = door.watch(gw)
    with open_stream(gw, "a") as resp:
        assert resp.status == 200
        pid_a = int(resp.headers["X-Fake-Pid"])
        assert next_event(resp) is not None  # the role chunk
        conn_b = send_only(gw, chat_body("b"))  # b arrives mid-stream

        def wait_b() -> None:
            reply = read_reply(conn_b)
            answered.append((time.monotonic(), reply))

        waiter = threading.Thread(target=wait_b)
        waiter.start()
        try:
            tokens: list[str] = []
            for i in range(18):  # until the stall, a is surely still streaming
                event = next_event(resp)
                assert event is not None
                assert f'"tok{i} "' in event
                tokens.append(f"tok{i} ")
                running = gw.running()
                assert set(running) == {"a"}, "b started while a was serving"
                assert running["a"]["in_flight"] == 1
            gw.wait_for(lambda: queue_depth(gw, "b") == 1)
            assert set(gw.running()) == {"a"}, "b started while a was serving"
            assert answered == [], "b was answered while a was serving"
            release.touch()
            rest, events = stream_tokens(resp)
            finished = time.monotonic()
        finally:
            waiter.join(timeout=30)
    assert tokens + rest == EXPECTED_20
    assert events[-1] == "[DONE]"
    assert len(answered) == 1
    when_b, reply_b = answered[0]
    assert when_b > finished
    assert fake_pid(reply_b) != pid_a
    assert not pid_alive(pid_a)
    assert set(gw.running()) == {"b"}
    watch.handed_over("not_ready", served=1)  # a's stream by the door; b waited for its start


def test_ttl_unloads_after_the_last_request_ends_not_during_it(
    gateway: StartGateway, tmp_path: Path
) -> None:
    release = tmp_path / "release-a"
    held = ("--stall-after", "14", "--stall-until", shlex.quote(str(release)))
    gw = gateway(model("a", "--tps", "10", "--tokens", "15", *held, ttl="1"))
    # Not loaded first: with a 1 s ttl it could be gone again before the stream arrives. The
    # stream may begin during the start (the gateway's early 200, without the backend's
    # headers), so the backend's pid comes from its log, once it is answering.
    with open_stream(gw, "a") as resp:
        assert resp.status == 200
        # The stream stops after 14 tokens until the test lets it go: until then the request
        # is surely in flight.
        for i in range(14):
            event = next_event(resp)
            while event is not None and "tok" not in event:  # the role chunk
                event = next_event(resp)
            assert event is not None
            assert f"tok{i} " in event
            asked = time.monotonic()  # before the gateway answers: it was in flight then
            row = gw.running()["a"]
            assert row["state"] == "ready"
            assert row["in_flight"] == 1
            assert "unload_in" not in row, "the idle timer runs while a request is in flight"
            busy_at = asked
        pid = backend_pid(gw, "a")
        release.touch()
        tokens, events = stream_tokens(resp)
    assert tokens == ["tok14 "]
    assert events[-1] == "[DONE]"
    gw.wait_for(lambda: "a" not in gw.running())
    # Unloaded, and not before the ttl had passed since a moment the request was in flight
    # (a lower bound: the behaviour itself, which load cannot break).
    assert time.monotonic() - busy_at >= 1.0
    assert not pid_alive(pid)


JSON_ACCEPT = {"Accept": "application/json"}


def test_unload_all_and_one(gateway: StartGateway) -> None:
    gw = gateway(model("a", aliases="[alias-a]") + model("b"))
    pid = fake_pid(chat(gw, "a"))
    reply = request(gw, "POST", "/api/models/unload/a")
    assert (reply.status, reply.body) == (200, b"OK")  # llama-swap's answer
    assert gw.running() == {}
    assert not pid_alive(pid)

    pid = fake_pid(chat(gw, "a"))
    reply = request(gw, "POST", "/api/models/unload/a", headers=JSON_ACCEPT)
    assert reply.status == 200
    assert reply.json() == {"msg": "ok", "unloaded": ["a"]}  # modelswap's, asked for JSON
    assert gw.running() == {}
    assert not pid_alive(pid)

    pid = fake_pid(chat(gw, "a"))
    reply = request(gw, "POST", "/api/models/unload/alias-a", headers=JSON_ACCEPT)
    assert reply.json() == {"msg": "ok", "unloaded": ["a"]}
    assert not pid_alive(pid)

    pid = fake_pid(chat(gw, "b"))
    reply = request(gw, "POST", "/api/models/unload")
    assert reply.status == 200
    assert reply.json() == {"msg": "ok", "unloaded": ["b"]}
    assert gw.running() == {}
    assert not pid_alive(pid)

    pid = fake_pid(chat(gw, "a"))
    reply = request(gw, "GET", "/unload")  # llama-swap's
    assert (reply.status, reply.body) == (200, b"OK")
    assert gw.running() == {}
    assert not pid_alive(pid)

    assert request(gw, "POST", "/api/models/unload").json() == {"msg": "ok", "unloaded": []}
    unload_b = request(gw, "POST", "/api/models/unload/b", headers=JSON_ACCEPT)
    assert unload_b.json() == {"msg": "ok", "unloaded": []}
    error = gateway_error(request(gw, "POST", "/api/models/unload/nope"), 404, "model_not_found")
    assert "nope" in str(error["message"])


# ---------------------------------------------------------------- forwarding


def test_use_model_name_rewrites_the_model_for_the_backend(
    door_gateway: StartGateway, door: Door
) -> None:
    gw = door_gateway(
        model(
            "my-model",
            "--strict-model",
            "--model",
            "served-name",
            aliases="[mine]",
            useModelName="served-name",
        )
    )
    load_model(gw, "my-model")  # ready: the fast door serves what follows itself
    watch = door.watch(gw)
    reply = chat(gw, "my-model")
    assert reply.status == 200, reply.body
    assert reply.json()["model"] == "served-name"

    sent = b'{"model": "my-model", "query": "q", "documents": ["x"]}'
    echo = request(gw, "POST", "/v1/rerank", sent, JSON).json()
    assert echo["echo"] is True
    assert echo["path"] == "/v1/rerank"
    assert json.loads(base64.b64decode(echo["body_b64"])) == {
        "model": "served-name",
        "query": "q",
        "documents": ["x"],
    }

    reply = chat(gw, "mine")
    assert reply.status == 200, reply.body
    assert reply.json()["model"] == "served-name"
    watch.answered(3)


def test_body_and_headers_are_forwarded_byte_for_byte(
    door_gateway: StartGateway, door: Door
) -> None:
    gw = door_gateway(model("raw-model"))
    load_model(gw, "raw-model")  # ready: the fast door serves a plain request itself
    sent = (
        b'{  "query" : "caf\xc3\xa9\\u00e9",\n\t"model":"raw-model" ,'
        b'"documents":[ "a","b" ],"top_n":1.50e0 ,"z":null}'
    )
    for query in ("", "x=1&y=%20z"):
        watch = door.watch(gw)
        reply = request(
            gw,
            "POST",
            f"/v1/rerank?{query}" if query else "/v1/rerank",
            sent,
            {"Content-Type": "application/json", "X-Custom": "hello, world"},
        )
        assert reply.status == 200
        assert "X-Modelswap-Error" not in reply.headers
        echo = reply.json()
        assert base64.b64decode(echo["body_b64"]) == sent
        assert echo["body_sha256"] == hashlib.sha256(sent).hexdigest()
        assert echo["method"] == "POST"
        assert echo["path"] == "/v1/rerank"
        assert echo["query"] == query
        headers = echo["headers"]
        assert headers["x-custom"] == "hello, world"
        assert headers["content-type"] == "application/json"
        assert headers["content-length"] == str(len(sent))
        assert headers["host"] != f"127.0.0.1:{gw.port}"
        assert re.fullmatch(r"127\.0\.0\.1:\d+", headers["host"])
        if query:  # a query string: the fast door hands the request to aiohttp's routes
            watch.handed_over("head")
        else:
            watch.answered(1)


def multipart(model: str, boundary: str = "----modelswapBoundary7MA4YWxk") -> bytes:
    audio = bytes(range(256)) * 4 + b"\r\n--not-a-boundary\r\n" + b"\x00\xff" * 100
    parts = [
        f"--{boundary}\r\n"
        'Content-Disposition: form-data; name="file"; filename="a.wav"\r\n'
        "Content-Type: audio/wav\r\n\r\n".encode()
        + audio
        + b"\r\n",
        f'--{boundary}\r\nContent-Disposition: form-data; name="model"\r\n\r\n{model}\r\n'.encode(),
        f'--{boundary}\r\nContent-Disposition: form-data; name="language"\r\n\r\nen\r\n'.encode(),
        f"--{boundary}--\r\n".encode(),
    ]
    return b"".join(parts)


def test_multipart_is_routed_by_its_model_field_and_forwarded_intact(
    gateway: StartGateway,
) -> None:
    gw = gateway(
        model("chat-model")
        + model("whisper", aliases="[stt]", useModelName="whisper-1")
        + model("whisper-1")
    )
    content_type = "multipart/form-data; boundary=----modelswapBoundary7MA4YWxk"
    fake_pid(chat(gw, "chat-model"))

    # The id equals the upstream name: no rewrite, the bytes arrive unchanged.
    sent = multipart("whisper-1")
    reply = request(gw, "POST", "/v1/audio/transcriptions", sent, {"Content-Type": content_type})
    assert reply.status == 200, reply.body
    echo = reply.json()
    assert echo["path"] == "/v1/audio/transcriptions"
    assert echo["body_sha256"] == hashlib.sha256(sent).hexdigest()
    assert echo["headers"]["content-type"] == content_type
    assert set(gw.running()) == {"whisper-1"}

    # Through an alias with useModelName: only the model part changes.
    reply = request(
        gw, "POST", "/v1/audio/transcriptions", multipart("stt"), {"Content-Type": content_type}
    )
    assert reply.status == 200, reply.body
    assert base64.b64decode(reply.json()["body_b64"]) == multipart("whisper-1")
    assert set(gw.running()) == {"whisper"}


def test_upstream_passthrough_starts_the_model(gateway: StartGateway) -> None:
    gw = gateway(model("lc", "--ctx", "4096"))
    assert gw.running() == {}
    reply = request(gw, "GET", "/upstream/lc/props")
    assert reply.status == 200, reply.body
    assert reply.json()["default_generation_settings"]["n_ctx"] == 4096
    assert gw.running()["lc"]["state"] == "ready"

    echo = request(gw, "PUT", "/upstream/lc/some/path?q=1", b"abc", {"X-Custom": "v"}).json()
    assert echo["method"] == "PUT"
    assert echo["path"] == "/some/path"
    assert echo["query"] == "q=1"
    escaped = request(gw, "GET", "/upstream/lc/some/path?q=a%26b%0A%1F").json()
    assert escaped["query"] == "q=a%26b%0A%1F"  # as the client escaped it
    assert base64.b64decode(echo["body_b64"]) == b"abc"
    assert echo["headers"]["x-custom"] == "v"

    gateway_error(request(gw, "GET", "/upstream/nope/props"), 404, "model_not_found")


# ---------------------------------------------------------------- errors


def test_gateway_errors_are_enveloped_and_marked(door_gateway: StartGateway, door: Door) -> None:
    gw = door_gateway(
        model("a")
        + model("wrong-name", "--strict-model", "--model", "served", useModelName="not-served"),
        extra_top="maxRequestBodyBytes: 1000",
    )
    big = chat_body("a", padding="x" * 2000)
    error = gateway_error(
        request(gw, "POST", "/v1/chat/completions", big, JSON), 413, "request_too_large"
    )
    assert set(error) == ENVELOPE_KEYS
    assert "1000" in str(error["message"])

    # Chunked (no Content-Length): the limit holds while reading, too.
    conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=60)
    try:
        conn.request(
            "POST",
            "/v1/chat/completions",
            body=iter([big[:600], big[600:1200], big[1200:]]),
            headers=JSON,
            encode_chunked=True,
        )
        resp = conn.getresponse()
        chunked = Reply(resp.status, resp.headers, resp.read())
    finally:
        conn.close()
    gateway_error(chunked, 413, "request_too_large")

    no_model = json.dumps({"messages": []}).encode()
    error = gateway_error(
        request(gw, "POST", "/v1/chat/completions", no_model, JSON), 400, "invalid_request"
    )
    assert set(error) == ENVELOPE_KEYS
    assert error["param"] == "model"
    assert error["type"] == "invalid_request_error"

    not_str = json.dumps({"model": 123, "messages": []}).encode()
    error = gateway_error(
        request(gw, "POST", "/v1/chat/completions", not_str, JSON), 400, "invalid_request"
    )
    assert error["param"] == "model"

    error = gateway_error(request(gw, "GET", "/v1/nope"), 404, "http_404")
    assert set(error) == ENVELOPE_KEYS
    error = gateway_error(request(gw, "GET", "/v1/chat/completions"), 405, "http_405")
    assert set(error) == ENVELOPE_KEYS
    assert gw.running() == {}, "no request above named a usable model"

    # The backend's own errors pass through unchanged and unmarked (its model ready: the
    # fast door relays them itself).
    load_model(gw, "a")
    watch = door.watch(gw)
    reply = chat(gw, "a", max_tokens="many")
    assert reply.status == 400
    assert "X-Modelswap-Error" not in reply.headers
    assert reply.json() == {
        "error": {
            "message": "`max_tokens` must be a non-negative integer",
            "type": "invalid_request_error",
            "code": 400,
        }
    }
    watch.answered(1)
    load_model(gw, "wrong-name")
    watch = door.watch(gw)
    reply = chat(gw, "wrong-name")
    assert reply.status == 404
    assert "X-Modelswap-Error" not in reply.headers
    assert reply.json()["error"]["message"] == "The model `not-served` does not exist."
    assert reply.json()["error"]["type"] == "NotFoundError"
    watch.answered(1)


def test_failed_start_is_a_503_with_the_diagnosis(gateway: StartGateway, tmp_path: Path) -> None:
    # `serve` refuses a command that cannot run, so this one exists at startup and is gone
    # by the time it is needed (uninstalled while modelswap runs).
    ghost = tmp_path / "gone" / "llama-server"
    ghost.parent.mkdir()
    ghost.write_text("#!/bin/sh\nexit 1\n")
    ghost.chmod(0o755)
    gw = gateway(
        model("bad", "--fail-start", failureBackoff="0")
        + model("again", "--fail-start", failureBackoff="30")
        + f'  ghost:\n    cmd: "{ghost} --port ${{PORT}}"\n'
    )
    ghost.unlink()
    error = gateway_error(chat(gw, "bad"), 503, "model_load_error")
    diagnosis = error["diagnosis"]
    assert isinstance(diagnosis, dict)
    assert diagnosis["code"] == "model_load_error"
    assert diagnosis["summary"] in str(error["message"])
    assert "Fix:" in str(error["message"])
    assert diagnosis["fix"] in str(error["message"])
    row = gw.running()["bad"]
    assert row["state"] == "failed"
    assert isinstance(row["last_failure"], dict)
    assert row["last_failure"]["code"] == "model_load_error"
    assert row["last_failure"]["evidence"] == diagnosis["evidence"]
    models = {m["id"]: m for m in gw.get_json("/v1/models")["data"]}  # type: ignore[union-attr]
    assert models["bad"]["state"] == "failed"
    # With failureBackoff 0, a failed model is tried again by the next request.
    gateway_error(chat(gw, "bad"), 503, "model_load_error")
    assert starts(gw, "bad") == 2
    # Within the backoff, the next request gets the same diagnosis at once: no start loop.
    first = gateway_error(chat(gw, "again"), 503, "model_load_error")
    second = gateway_error(chat(gw, "again"), 503, "model_load_error")
    assert second["diagnosis"] == first["diagnosis"]
    assert starts(gw, "again") == 1  # answered from memory, without a start

    error = gateway_error(chat(gw, "ghost"), 503, "executable_not_found")
    assert str(ghost) in str(error["message"])
    assert gw.running()["ghost"]["state"] == "failed"

    # The evidence is the root cause the backend printed (it says *why*), not the wrapper
    # line llama.cpp prints after it ("main: exiting due to model loading error").
    assert diagnosis["evidence"] == "llama_model_load: error loading model: simulated failure"


def test_backend_crash_mid_response_is_a_502_then_the_next_request_restarts_it(
    door_gateway: StartGateway,
    door: Door,
) -> None:
    gw = door_gateway(model("plain", "--crash-after", "2"))
    first = fake_pid(chat(gw, "plain"))
    watch = door.watch(gw)
    error = gateway_error(chat(gw, "plain"), 502, "upstream_error")
    assert "plain" in str(error["message"])
    assert set(error) == ENVELOPE_KEYS
    watch.answered(1)  # the 502: the relay's, on the door under test
    gw.wait_for(lambda: gw.running()["plain"]["state"] == "failed")
    assert not pid_alive(first)
    again = fake_pid(chat(gw, "plain"))
    assert again != first
    assert starts(gw, "plain") == 2


# What a backend says its answers are: the fake's bare types (and its own Cache-Control on a
# stream), or what vLLM and SGLang send (FastAPI's StreamingResponse): a charset parameter and
# no Cache-Control. The relay must read both as what they are.
BACKEND_TYPES = {
    "bare": (),
    "charset": (
        "--content-type-params",
        shlex.quote("; charset=utf-8"),
        "--no-stream-cache-control",
    ),
}


@pytest.mark.parametrize("backend", list(BACKEND_TYPES))
def test_a_stream_is_relayed_as_a_stream_whatever_its_content_type_parameters(
    door_gateway: StartGateway, door: Door, backend: str
) -> None:
    gw = door_gateway(model("m", "--tokens", "4", *BACKEND_TYPES[backend]))
    load_model(gw, "m")
    watch = door.watch(gw)
    plain = chat(gw, "m")
    assert plain.status == 200, plain.body
    assert plain.headers.get_content_type() == "application/json"
    assert "X-Accel-Buffering" not in plain.headers
    assert plain.json()["usage"]["completion_tokens"] == 4
    with open_stream(gw, "m") as resp:
        assert resp.status == 200
        assert resp.headers.get_content_type() == "text/event-stream"
        # Said by the gateway to any proxy in front of it, whatever the backend sent.
        assert resp.headers["X-Accel-Buffering"] == "no"
        assert resp.headers["Cache-Control"] == "no-cache"
        raw = resp.read()
    payloads = sse_payloads(raw)
    assert payloads[-1] == "[DONE]"
    assert usage_only_chunks(payloads) == [], "the usage chunk the relay asked for was shown"
    assert [json.loads(p)["choices"][0]["delta"].get("content") for p in payloads[1:5]] == [
        f"tok{i} " for i in range(4)
    ]
    watch.answered(2)


@pytest.mark.parametrize("backend", list(BACKEND_TYPES))
def test_backend_crash_mid_stream_ends_the_stream_with_an_error_event(
    door_gateway: StartGateway, door: Door, backend: str
) -> None:
    flags = ("--crash-after", "2", "--tokens", "6", *BACKEND_TYPES[backend])
    gw = door_gateway(model("streamy", *flags))
    first = fake_pid(chat(gw, "streamy"))
    watch = door.watch(gw)
    with open_stream(gw, "streamy") as resp:  # a stream left hanging fails on its timeout
        assert resp.status == 200
        tokens, events = stream_tokens(resp)
    watch.answered(1)
    assert tokens == ["tok0 ", "tok1 ", "tok2 "]
    assert "[DONE]" not in events
    last = json.loads(events[-1])
    assert set(last) == {"error"}
    assert set(last["error"]) >= ENVELOPE_KEYS
    assert last["error"]["code"] == "upstream_error"
    assert "streamy" in last["error"]["message"]
    assert resp.headers["X-Accel-Buffering"] == "no"  # relayed as a stream, whatever its type
    gw.wait_for(lambda: gw.running()["streamy"]["state"] == "failed")
    again = fake_pid(chat(gw, "streamy"))
    assert again != first
    assert starts(gw, "streamy") == 2


def test_a_request_right_after_a_crash_is_not_sent_to_the_dead_backend(
    door_gateway: StartGateway,
    door: Door,
) -> None:
    # The backend's helper (like vLLM's engine processes) keeps its stdout open for a moment
    # after the server process died; the server itself is gone at once.
    inner = "sleep 3 & exec " + fake_cmd_text("--load-delay", "0.2", "--crash-after", "2")
    gw = door_gateway(f"  helper:\n    cmd: {json.dumps(f'bash -c {shlex.quote(inner)}')}\n")
    first = fake_pid(chat(gw, "helper"))
    watch = door.watch(gw)
    gateway_error(chat(gw, "helper"), 502, "upstream_error")
    watch.answered(1)  # the crash met on the door under test; what follows may be either's
    wait_dead([first])  # (its exit may take a few ms to complete)
    # The client retries at once, as clients do: the dead server must be started again.
    again = chat(gw, "helper")
    assert again.status == 200, f"request right after the crash: {again.status} {again.body!r}"
    assert fake_pid(again) != first


def test_upstream_first_byte_timeout_is_504_and_frees_the_lease(
    door_gateway: StartGateway, door: Door
) -> None:
    gw = door_gateway(model("hung", "--hang", timeouts="{firstByte: 1}"))
    assert request(gw, "GET", "/upstream/hung/health").status == 200  # started and ready
    watch = door.watch(gw)
    began = time.monotonic()
    error = gateway_error(chat(gw, "hung"), 504, "upstream_timeout")
    took = time.monotonic() - began
    assert took >= 0.9, took  # the clock fired (the 504), and not before its second was up
    assert "hung" in str(error["message"])
    row = gw.running()["hung"]
    assert row["in_flight"] == 0
    assert row["state"] == "ready"
    watch.answered(1)


# ---------------------------------------------------------------- listings and logs


def test_model_listing_and_running_rows(gateway: StartGateway) -> None:
    gw = gateway(
        model("a", name="Model A", description="the first", aliases="[a1, a2]")
        + model("b")
        + model("hidden", unlisted="true"),
        extra_top="includeAliasesInList: true\n",
    )
    pid = fake_pid(chat(gw, "a"))
    for path in ("/v1/models", "/models"):
        listing = gw.get_json(path)
        assert listing["object"] == "list"
        rows = {row["id"]: row for row in listing["data"]}  # type: ignore[union-attr]
        assert list(rows) == ["a", "a1", "a2", "b"]
        assert rows["a"]["state"] == "ready"
        assert rows["a"]["name"] == "Model A"
        assert rows["a"]["description"] == "the first"
        assert rows["a"]["aliases"] == ["a1", "a2"]
        assert rows["a"]["object"] == "model"
        for alias in ("a1", "a2"):
            assert rows[alias]["alias_for"] == "a"
            assert rows[alias]["state"] == "ready"
            assert "aliases" not in rows[alias]
        assert rows["b"]["state"] == "stopped"
        assert "alias_for" not in rows["a"]

    running = gw.get_json("/running")
    text = json.dumps(running)
    assert str(pid) not in text
    for row in running["running"]:  # type: ignore[union-attr]
        assert "pid" not in row
        assert row["model"] == "a"
        # llama-swap's fields beside modelswap's (the command line redacted)
        assert "openai_backend" in row["cmd"]
        assert row["proxy"].startswith("http://127.0.0.1:")
        assert (row["name"], row["description"]) == ("Model A", "the first")

    fake_pid(chat(gw, "hidden"))  # unlisted, still routable
    rows = {row["id"]: row for row in gw.get_json("/v1/models")["data"]}  # type: ignore[union-attr]
    assert "hidden" not in rows
    assert rows["a"]["state"] == "stopped"
    assert set(gw.running()) == {"hidden"}


def test_logs_tail_is_plain_text(gateway: StartGateway) -> None:
    gw = gateway(model("a"))
    fake_pid(chat(gw, "a"))
    full = request(gw, "GET", "/logs/a")
    assert full.status == 200
    assert full.headers.get_content_type() == "text/plain"
    all_lines = full.body.decode().splitlines()
    assert any(line.startswith("fake backend ready on http://127.0.0.1:") for line in all_lines)
    assert "load_tensors: loading model tensors ... 100%" in all_lines
    tail = request(gw, "GET", "/logs/a?lines=5")
    assert tail.status == 200
    assert tail.headers.get_content_type() == "text/plain"
    lines = tail.body.decode().splitlines()
    assert 0 < len(lines) <= 5
    assert lines == all_lines[-len(lines) :]
    gateway_error(request(gw, "GET", "/logs/a?lines=x"), 400, "invalid_request")
    gateway_error(request(gw, "GET", "/logs/nope"), 404, "model_not_found")


# ---------------------------------------------------------------- the gateway's own death


def test_sigterm_finishes_the_stream_then_exits_0(door_gateway: StartGateway, door: Door) -> None:
    gw = door_gateway(model("a", "--tps", "20", "--tokens", "20"))
    load_model(gw, "a")  # the stream then gets the backend's own headers
    watch = door.watch(gw)
    with open_stream(gw, "a") as resp:
        assert resp.status == 200
        pid = int(resp.headers["X-Fake-Pid"])
        assert next_event(resp) is not None
        watch.answered(1)  # the stream the drain must finish is the door's own
        gw.proc.send_signal(signal.SIGTERM)
        tokens, events = stream_tokens(resp)
    assert tokens == EXPECTED_20
    assert events[-1] == "[DONE]"
    assert gw.proc.wait(timeout=HANG) == 0
    wait_dead([pid])


def test_sigkill_of_the_gateway_leaves_no_backend(gateway: StartGateway, tmp_path: Path) -> None:
    pidfile = tmp_path / "grandchild.pid"
    inner = fake_cmd_text("--load-delay", "0.2", "--fork-grandchild", shlex.quote(str(pidfile)))
    wrapped = json.dumps(f"bash -c {shlex.quote(inner + '; true')}")
    gw = gateway(model("plain") + f"  wrapped:\n    cmd: {wrapped}\n")
    plain = fake_pid(chat(gw, "plain"))
    fake = fake_pid(chat(gw, "wrapped"))
    assert not pid_alive(plain)
    bash = psutil.Process(fake).ppid()
    assert psutil.Process(bash).name() == "bash"
    grandchild = int(pidfile.read_text())
    assert pid_alive(grandchild)
    assert psutil.Process(grandchild).pid != fake

    reapers = [
        p.pid
        for p in psutil.Process(gw.proc.pid).children()
        if "modelswap.supervisor.reaper" in " ".join(p.cmdline())
    ]
    assert len(reapers) == 1

    gw.proc.send_signal(signal.SIGKILL)
    gw.proc.wait(timeout=HANG)
    wait_dead([fake, bash, grandchild, *reapers])
