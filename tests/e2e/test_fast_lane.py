"""The fast door (http/server/fast_door.py) end to end: ``python -m modelswap serve`` with the
fake backends and real clients (http.client, raw sockets). A request the lane may serve is
served there; everything else is handed to aiohttp's path and behaves as it always did. Each
test proves which lane answered with ``modelswap_fast_lane_requests_total`` (``served``, or
``handed_over`` by reason) in /metrics."""

from __future__ import annotations

import contextlib
import http.client
import io
import json
import shlex
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.e2e.conftest import (
    HANG,
    Gateway,
    Lane,
    Reply,
    chat,
    chat_body,
    held_cmd,
    lane_counts,
    load_model,
    next_event,
    open_stream,
    request,
    stream_tokens,
)
from tests.e2e.test_gateway import gateway_error, model
from tests.e2e.test_llamaswap_api import backend_stats, inflight
from tests.e2e.test_observability import activity, sse_payloads, usage_only_chunks

pytestmark = pytest.mark.e2e

StartGateway = Callable[..., Gateway]
CHAT = "/v1/chat/completions"
JSON = {"Content-Type": "application/json"}
PROMPT_WORDS = 2  # chat_body's "hello there": the fake reports prompt tokens = words
KEY = "sk-fast-lane-test-key-0123456789"
ORIGIN = "https://app.example"


def post(gw: Gateway, body: bytes, headers: dict[str, str] | None = None) -> Reply:
    return request(gw, "POST", CHAT, body, {**JSON, **(headers or {})})


def in_flight(gw: Gateway, name: str) -> object:
    return gw.running()[name]["in_flight"]


def newest_activity(gw: Gateway, count: int) -> dict[str, Any]:
    """The newest activity row, once there are ``count`` rows."""
    gw.wait_for(lambda: len(activity(gw)) >= count)
    rows = activity(gw)
    assert len(rows) == count, rows
    return rows[0]


class _Kept(io.BufferedReader):
    """A socket's reader that http.client's response cannot close: the next response on the
    same connection is read from what it buffered (:meth:`release` closes it)."""

    def close(self) -> None:
        pass

    def release(self) -> None:
        super().close()


class RawConnection:
    """A client connection on a raw socket: the test writes the bytes it wants (a head in
    parts, two requests at once) and reads the replies one after another with http.client,
    from one buffer (so nothing of a reply that follows is lost)."""

    def __init__(self, gw: Gateway) -> None:
        self.sock = socket.create_connection(("127.0.0.1", gw.port), timeout=HANG)
        self._reader = _Kept(socket.SocketIO(self.sock, "rb"))

    def makefile(self, *_args: object, **_kwargs: object) -> io.BufferedReader:
        return self._reader  # what http.client.HTTPResponse reads from

    def reply(self) -> Reply:
        resp = http.client.HTTPResponse(self)  # type: ignore[arg-type]
        resp.begin()
        return Reply(resp.status, resp.headers, resp.read())

    def closed_by_peer(self) -> bool:
        """Read until the gateway closes (True), or until the socket's timeout (False)."""
        try:
            for _ in range(10_000):  # bounded: the gateway sends nothing here
                if not self.sock.recv(65536):
                    return True
        except ConnectionResetError:
            return True
        except TimeoutError:
            return False
        return False

    def close(self) -> None:
        self._reader.release()
        self.sock.close()


@contextlib.contextmanager
def raw_connection(gw: Gateway) -> Iterator[RawConnection]:
    conn = RawConnection(gw)
    try:
        yield conn
    finally:
        conn.close()


def raw_post(body: bytes, extra: str = "") -> bytes:
    return (
        f"POST {CHAT} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"{extra}Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body


# ------------------------------------------------------------------- served on the lane


def test_a_chat_to_a_ready_model_is_served_on_the_lane(gateway: StartGateway) -> None:
    gw = gateway(model("m", "--echo-id", "--tokens", "5"))
    load_model(gw, "m")
    lane = Lane(gw)
    own = "my-own.request:id-42"
    reply = post(gw, chat_body("m"), {"X-Request-Id": own})
    assert reply.status == 200, reply.body
    assert lane.delta() == {"served": 1}
    body = reply.json()
    assert body["object"] == "chat.completion"
    assert body["choices"][0]["message"]["content"] == "".join(f"tok{i} " for i in range(5))
    assert body["usage"] == {"prompt_tokens": 2, "completion_tokens": 5, "total_tokens": 7}
    assert reply.headers.get_content_type() == "application/json"
    assert int(reply.headers["Content-Length"]) == len(reply.body)
    assert "X-Modelswap-Error" not in reply.headers
    assert reply.headers.get_all("X-Request-Id") == [own]  # once, the client's own
    assert body["id"] == f"chatcmpl-fake-{own}"  # and the backend was sent it (--echo-id)

    row = newest_activity(gw, 1)
    assert (row["model"], row["status"], row["route"]) == ("m", 200, CHAT)
    assert (row["prompt_tokens"], row["completion_tokens"]) == (PROMPT_WORDS, 5)
    assert row["request_id"] == own
    assert row["streamed"] is False
    assert row["bytes_in"] == len(chat_body("m"))
    assert row["error_code"] is None
    assert in_flight(gw, "m") == 0


def test_an_insane_request_id_is_replaced_on_the_lane(gateway: StartGateway) -> None:
    gw = gateway(model("m", "--echo-id"))
    load_model(gw, "m")
    lane = Lane(gw)
    reply = post(gw, chat_body("m"), {"X-Request-Id": "no spaces/or slashes"})
    assert reply.status == 200, reply.body
    assert lane.delta() == {"served": 1}
    chosen = reply.headers["X-Request-Id"]
    assert chosen != "no spaces/or slashes"
    assert reply.json()["id"] == f"chatcmpl-fake-{chosen}"  # the backend got the same one


def test_a_stream_on_the_lane_hides_the_injected_usage_and_records_it(
    gateway: StartGateway, tmp_path: Path
) -> None:
    models = model("m", "--tokens", "6")
    lane_gw = gateway(models)
    own_state = f"stateDir: {json.dumps(str(tmp_path / 'full-path-state'))}\n"  # its activity
    full_gw = gateway(models, extra_top=own_state + "limits: {fastLane: false}\n")
    seen: dict[str, list[dict[str, Any] | str]] = {}
    for name, gw in (("lane", lane_gw), ("full", full_gw)):
        load_model(gw, "m")
        lane = Lane(gw)
        reply = post(gw, chat_body("m", stream=True))
        assert reply.status == 200, reply.body
        assert lane.delta() == ({"served": 1} if name == "lane" else {"off": 1})
        assert reply.headers.get_content_type() == "text/event-stream"
        assert reply.headers["X-Accel-Buffering"] == "no"
        assert reply.headers["Cache-Control"] == "no-cache"
        payloads = sse_payloads(reply.body)
        assert payloads[-1] == "[DONE]"
        assert usage_only_chunks(payloads) == [], f"{name}: the injected usage chunk was shown"
        events: list[dict[str, Any] | str] = []
        for payload in payloads:
            if payload == "[DONE]":
                events.append(payload)
                continue
            event = json.loads(payload)
            event.pop("created")  # the fake's clock
            events.append(event)
        seen[name] = events
        row = newest_activity(gw, 1)
        assert (row["model"], row["status"], row["streamed"]) == ("m", 200, True)
        assert (row["prompt_tokens"], row["completion_tokens"]) == (PROMPT_WORDS, 6)
    assert seen["lane"] == seen["full"]  # the same events, in the same order
    assert len(seen["lane"]) == 1 + 6 + 1 + 1  # role, tokens, finish, [DONE]


def test_a_stream_that_asked_for_usage_gets_it_once_on_the_lane(gateway: StartGateway) -> None:
    gw = gateway(model("m", "--tokens", "4"))
    load_model(gw, "m")
    lane = Lane(gw)
    body = chat_body("m", stream=True, stream_options={"include_usage": True})
    reply = post(gw, body)
    assert reply.status == 200, reply.body
    assert lane.delta() == {"served": 1}
    [chunk] = usage_only_chunks(sse_payloads(reply.body))
    assert chunk["usage"]["completion_tokens"] == 4
    assert newest_activity(gw, 1)["completion_tokens"] == 4


def test_requests_on_one_keep_alive_connection_are_all_served_on_the_lane(
    gateway: StartGateway,
) -> None:
    gw = gateway(model("m", "--tokens", "3"))
    load_model(gw, "m")
    lane = Lane(gw)
    conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=HANG)
    try:
        conn.connect()
        sock = conn.sock
        for n in range(4):
            stream = n % 2 == 1
            conn.request("POST", CHAT, chat_body("m", stream=stream, max_tokens=n + 1), JSON)
            resp = conn.getresponse()
            data = resp.read()
            assert resp.status == 200, data
            assert resp.getheader("Connection") != "close"
            assert conn.sock is sock, f"request {n} closed the connection"
            if stream:
                assert sse_payloads(data)[-1] == "[DONE]"
            else:
                assert json.loads(data)["usage"]["completion_tokens"] == n + 1
    finally:
        conn.close()
    assert lane.delta() == {"served": 4}


def test_two_pipelined_requests_are_both_answered_in_order(gateway: StartGateway) -> None:
    gw = gateway(model("m", "--echo-id"))
    load_model(gw, "m")
    lane = Lane(gw)
    first = raw_post(chat_body("m", max_tokens=2), "X-Request-Id: first\r\n")
    second = raw_post(chat_body("m", max_tokens=3), "X-Request-Id: second\r\n")
    with raw_connection(gw) as conn:
        conn.sock.sendall(first + second)  # one write: the second waits behind the first
        replies = [conn.reply(), conn.reply()]
    assert [r.status for r in replies] == [200, 200]
    assert [r.headers["X-Request-Id"] for r in replies] == ["first", "second"]
    assert [r.json()["id"] for r in replies] == ["chatcmpl-fake-first", "chatcmpl-fake-second"]
    assert [r.json()["usage"]["completion_tokens"] for r in replies] == [2, 3]
    assert lane.delta() == {"served": 2}


def test_a_request_pipelined_behind_a_served_one_may_be_handed_over(
    gateway: StartGateway,
) -> None:
    gw = gateway(model("m", "--echo-id"))
    load_model(gw, "m")
    lane = Lane(gw)
    served = raw_post(chat_body("m", max_tokens=2), "X-Request-Id: first\r\n")
    unknown = raw_post(chat_body("ghost"), "X-Request-Id: second\r\n")
    with raw_connection(gw) as conn:
        conn.sock.sendall(served + unknown)
        first, second = conn.reply(), conn.reply()
    assert (first.status, first.headers["X-Request-Id"]) == (200, "first")
    assert first.json()["id"] == "chatcmpl-fake-first"
    assert (second.status, second.headers["X-Request-Id"]) == (404, "second")
    assert second.json()["error"]["code"] == "model_not_found"
    assert lane.delta() == {"served": 1, "model": 1}


def test_the_model_may_be_named_by_an_alias_on_the_lane(gateway: StartGateway) -> None:
    gw = gateway(model("m", aliases="[other-name]"))
    load_model(gw, "m")
    lane = Lane(gw)
    reply = chat(gw, "other-name")
    assert reply.status == 200, reply.body
    assert lane.delta() == {"served": 1}
    assert newest_activity(gw, 1)["model"] == "m"


# ------------------------------------------------------------------------- handed over


def test_a_model_not_started_yet_is_started_on_the_full_path(gateway: StartGateway) -> None:
    gw = gateway(model("m"))
    lane = Lane(gw)
    reply = chat(gw, "m", max_tokens=2)
    assert reply.status == 200, reply.body
    assert reply.json()["usage"]["completion_tokens"] == 2
    assert lane.delta() == {"not_ready": 1}
    assert gw.running()["m"]["state"] == "ready"
    again = Lane(gw)
    assert chat(gw, "m").status == 200
    assert again.delta() == {"served": 1}  # ready now: the lane's


def test_a_stream_for_a_starting_model_gets_the_loading_comments(
    gateway: StartGateway, tmp_path: Path
) -> None:
    release = tmp_path / "release"
    gw = gateway(f"  held:\n    cmd: {held_cmd(release, '--tokens', '3')}\n")
    lane = Lane(gw)
    conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=HANG)
    try:
        conn.request("POST", CHAT, chat_body("held", stream=True), JSON)
        # The start is held until the file exists: the stream opens early (its head comes
        # before any backend is there), and only then is the start let go.
        resp = conn.getresponse()
        assert resp.status == 200
        assert resp.headers.get_content_type() == "text/event-stream"
        assert gw.running()["held"]["state"] == "starting"
        release.touch()
        raw = resp.read()
    finally:
        conn.close()
    assert b": loading model held" in raw
    payloads = sse_payloads(raw)
    assert payloads[-1] == "[DONE]"
    assert len(payloads) == 1 + 3 + 1 + 1
    assert lane.delta() == {"not_ready": 1}


def test_an_unknown_model_is_the_full_paths_404(gateway: StartGateway) -> None:
    gw = gateway(model("m"))
    load_model(gw, "m")
    lane = Lane(gw)
    error = gateway_error(chat(gw, "ghost"), 404, "model_not_found")
    assert "ghost" in str(error["message"])
    assert lane.delta() == {"model": 1}


def test_malformed_json_is_the_full_paths_400(gateway: StartGateway) -> None:
    gw = gateway(model("m"))
    load_model(gw, "m")
    lane = Lane(gw)
    reply = post(gw, b'{"model": "m", "messages": [')
    assert reply.status == 400, reply.body
    assert reply.headers["X-Modelswap-Error"] == "1"
    assert set(reply.json()["error"]) >= {"message", "type", "code", "param"}
    assert lane.delta() == {"body": 1}
    assert backend_stats(gw, "m")["requests"] == 0  # never reached the backend


def test_a_request_with_origin_gets_cors_on_the_full_path(gateway: StartGateway) -> None:
    gw = gateway(
        model("m", "--tokens", "2"),
        extra_top=f"security:\n  corsOrigins: [{json.dumps(ORIGIN)}]\n",
    )
    load_model(gw, "m")
    lane = Lane(gw)
    reply = post(gw, chat_body("m"), {"Origin": ORIGIN})
    assert reply.status == 200, reply.body
    assert reply.headers["Access-Control-Allow-Origin"] == ORIGIN
    assert reply.json()["usage"]["completion_tokens"] == 2
    assert lane.delta() == {"head": 1}
    plain = post(gw, chat_body("m"))  # the same request without Origin: the lane's
    assert plain.status == 200, plain.body
    assert "Access-Control-Allow-Origin" not in plain.headers
    assert lane.delta() == {"head": 1, "served": 1}


def test_a_wrong_key_is_the_full_paths_401_and_a_right_one_is_served(
    gateway: StartGateway,
) -> None:
    gw = gateway(
        model("m", "--tokens", "2"),
        extra_top=f"apiKeys: [{{key: {KEY}, scopes: [inference, read, admin]}}]\n",
    )
    good = {"Authorization": f"Bearer {KEY}"}
    load_model_reply = request(gw, "POST", "/api/models/load/m", headers=good)
    assert load_model_reply.status == 200, load_model_reply.body
    lane = Lane(gw, good)
    wrong = post(gw, chat_body("m"), {"Authorization": "Bearer sk-wrong-key-000000000000"})
    assert wrong.status == 401, wrong.body
    assert wrong.headers["X-Modelswap-Error"] == "1"
    assert lane.delta() == {"key": 1}
    missing = post(gw, chat_body("m"))
    assert missing.status == 401, missing.body
    assert lane.delta() == {"key": 2}
    right = post(gw, chat_body("m"), good)
    assert right.status == 200, right.body
    assert right.json()["usage"]["completion_tokens"] == 2
    assert lane.delta() == {"key": 2, "served": 1}
    assert KEY not in gw.log()


def test_a_backend_crash_on_the_lane_is_a_502_and_the_next_request_restarts_it(
    gateway: StartGateway,
) -> None:
    gw = gateway(model("crashy", "--crash-after", "2"))
    load_model(gw, "crashy")
    lane = Lane(gw)
    assert chat(gw, "crashy").status == 200
    error = gateway_error(chat(gw, "crashy"), 502, "upstream_error")
    assert "crashy" in str(error["message"])
    assert lane.delta() == {"served": 2}
    gw.wait_for(lambda: gw.running()["crashy"]["state"] == "failed")
    again = Lane(gw)
    assert chat(gw, "crashy").status == 200  # started again on the full path
    assert again.delta() == {"not_ready": 1}
    assert gw.running()["crashy"]["in_flight"] == 0


# ------------------------------------------------------------ disconnects and the in-flight


def test_a_client_gone_mid_stream_frees_the_lease_and_is_a_499(
    gateway: StartGateway, tmp_path: Path
) -> None:
    # The backend stops after two tokens and stays silent (as a long prompt's next token, or a
    # stalled server would): only the client's leaving can end the request.
    release = tmp_path / "release"
    gw = gateway(model("m", "--stall-after", "2", "--stall-until", shlex.quote(str(release))))
    load_model(gw, "m")
    lane = Lane(gw)
    try:
        with open_stream(gw, "m") as resp:  # leaving the block closes the connection
            assert resp.status == 200
            assert next_event(resp) is not None
            assert next_event(resp) is not None
            assert in_flight(gw, "m") == 1
        gw.wait_for(lambda: in_flight(gw, "m") == 0)
        gw.wait_for(lambda: backend_stats(gw, "m")["disconnected"] == 1)  # the backend stops
    finally:
        release.touch()  # never leave the backend stalled (the gateway's stop would wait)
    row = newest_activity(gw, 1)
    assert (row["model"], row["status"], row["streamed"]) == ("m", 499, True)
    assert row["bytes_out"] > 0
    assert lane.delta() == {"served": 1}
    assert chat(gw, "m", max_tokens=1).status == 200  # the model serves on


def test_a_lane_stream_is_listed_in_flight_and_cancelled(
    gateway: StartGateway, tmp_path: Path
) -> None:
    never = tmp_path / "never"
    gw = gateway(model("m", "--stall-after", "1", "--stall-until", shlex.quote(str(never))))
    load_model(gw, "m")
    lane = Lane(gw)
    conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=HANG)
    try:
        conn.request("POST", CHAT, chat_body("m", stream=True), {**JSON, "X-Request-Id": "lane-1"})
        resp = conn.getresponse()
        assert resp.status == 200
        assert next_event(resp) is not None  # the stream is in flight
        [row] = inflight(gw)
        assert (row["model"], row["req_path"], row["method"]) == ("m", CHAT, "POST")
        assert row["request_id"] == "lane-1"
        assert row["state"] == "relaying"
        assert row["remote_ip"] == "127.0.0.1"
        assert row["resp_headers"]["Content-Type"].startswith("text/event-stream")
        assert row["resp_bytes"] > 0
        status, _, raw = gw.post(f"/api/inflight/{row['id']}/cancel", b"")
        assert (status, json.loads(raw)) == (200, {"msg": "ok"})
        rest = [event for _ in range(1000) if (event := next_event(resp)) is not None]
        assert "[DONE]" not in rest  # the stream ends where it was
    finally:
        conn.close()
    gw.wait_for(lambda: not inflight(gw))
    gw.wait_for(lambda: backend_stats(gw, "m")["disconnected"] == 1)
    row = newest_activity(gw, 1)
    assert (row["status"], row["error_code"]) == (499, "request_cancelled")
    assert in_flight(gw, "m") == 0
    assert lane.delta() == {"served": 1, "head": 1}  # head: the cancel's POST


# --------------------------------------------------------------------------- timeouts


def test_a_backend_silent_past_first_byte_is_a_504_on_the_lane(gateway: StartGateway) -> None:
    gw = gateway(model("hung", "--hang", timeouts="{firstByte: 1}"))
    load_model(gw, "hung")
    lane = Lane(gw)
    error = gateway_error(chat(gw, "hung"), 504, "upstream_timeout")
    assert error["message"] == "Backend for model `hung` timed out: no response within 1 s."
    assert lane.delta() == {"served": 1}
    row = gw.running()["hung"]
    assert (row["in_flight"], row["state"]) == (0, "ready")
    gw.wait_for(lambda: backend_stats(gw, "hung")["disconnected"] == 1)
    activity_row = newest_activity(gw, 1)
    assert (activity_row["status"], activity_row["error_code"]) == (504, "upstream_timeout")


def test_a_stream_silent_between_chunks_ends_with_an_error_event_on_the_lane(
    gateway: StartGateway,
) -> None:
    gw = gateway(
        model("stall", "--stall-after", "3", "--tokens", "10", timeouts="{idleBetweenChunks: 1}")
    )
    load_model(gw, "stall")
    lane = Lane(gw)
    with open_stream(gw, "stall") as resp:
        assert resp.status == 200
        tokens, events = stream_tokens(resp)
    assert tokens == ["tok0 ", "tok1 ", "tok2 "]
    assert "[DONE]" not in events
    error = json.loads(events[-1])["error"]
    assert error["code"] == "upstream_timeout"
    assert (
        error["message"] == "Backend for model `stall` sent nothing for 1 s; the response was cut."
    )
    assert lane.delta() == {"served": 1}
    gw.wait_for(lambda: in_flight(gw, "stall") == 0)
    row = newest_activity(gw, 1)
    assert (row["status"], row["error_code"]) == (200, "upstream_timeout")


# ----------------------------------------------------------------------- slow clients


def test_a_partial_head_is_closed_after_the_header_timeout(gateway: StartGateway) -> None:
    gw = gateway(model("m"), extra_top="limits: {headerTimeout: 1}\n")
    load_model(gw, "m")
    lane = Lane(gw)
    with raw_connection(gw) as conn:
        conn.sock.sendall(f"POST {CHAT} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Ty".encode())
        assert conn.closed_by_peer(), "the gateway kept a connection with half a head"
    assert lane.delta() == {}  # the lane closed it itself: never handed over
    assert chat(gw, "m").status == 200  # the gateway serves on
    assert lane.delta() == {"served": 1}


def test_a_body_after_the_header_timeout_is_still_answered(gateway: StartGateway) -> None:
    gw = gateway(model("m", "--tokens", "2"), extra_top="limits: {headerTimeout: 1}\n")
    load_model(gw, "m")
    lane = Lane(gw)
    whole = raw_post(chat_body("m"))
    head, _, body = whole.partition(b"\r\n\r\n")
    with raw_connection(gw) as conn:
        conn.sock.sendall(head + b"\r\n\r\n")
        gw.wait_for(lambda: lane.delta().get("slow_body") == 1)  # the lane gave it up
        conn.sock.sendall(body)
        reply = conn.reply()
    assert reply.status == 200, reply.body
    assert reply.json()["usage"]["completion_tokens"] == 2
    assert lane.delta() == {"slow_body": 1}


# ------------------------------------------------------------------------------ off


def test_with_the_lane_off_every_request_takes_the_full_path(gateway: StartGateway) -> None:
    gw = gateway(model("m", "--tokens", "3"), extra_top="limits: {fastLane: false}\n")
    load_model(gw, "m")
    lane = Lane(gw)
    reply = chat(gw, "m")
    assert reply.status == 200, reply.body
    assert reply.json()["usage"]["completion_tokens"] == 3
    with open_stream(gw, "m") as resp:
        tokens, events = stream_tokens(resp)
    assert tokens == ["tok0 ", "tok1 ", "tok2 "]
    assert events[-1] == "[DONE]"
    delta = lane.delta()
    assert delta.get("served", 0) == 0
    assert delta == {"off": 2}
    assert lane_counts(gw).get("served", 0) == 0
