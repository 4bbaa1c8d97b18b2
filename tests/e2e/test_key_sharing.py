"""Fair sharing per client key, on the request path (issue 40; docs/sharing.md): a key over a
limit is answered 429 with ``Retry-After`` in the route's own error shape, every answer of a
limited key carries the ``x-ratelimit-*`` headers OpenAI's clients read, a client that leaves
gives its place back, and a waiting request is told its place (an SSE comment on a stream,
``X-Modelswap-Queue`` on an answer) and is listed and measured under its key's name.

Driven with the real ``openai`` SDK where it reads what we send (its RateLimitError, the raw
headers); the raw stream with http.client, since SDKs drop SSE comments. Both doors.
"""

from __future__ import annotations

import http.client
import json
import re
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families
from tests.e2e.conftest import (
    HANG,
    Door,
    Gateway,
    Reply,
    chat_body,
    fake_cmd,
    held_cmd,
    next_event,
    request,
)

pytestmark = pytest.mark.e2e

StartGateway = Callable[..., Gateway]
PHONE_KEY = "sk-share-phone-0123456789"
BEN_KEY = "sk-share-ben-0123456789ab"
ANA_KEY = "sk-share-ana-0123456789ab"
PHONE = {"Authorization": f"Bearer {PHONE_KEY}"}
BEN = {"Authorization": f"Bearer {BEN_KEY}"}
ANA = {"Authorization": f"Bearer {ANA_KEY}"}
JSON = {"Content-Type": "application/json"}
KEYS = (
    "apiKeys:\n"
    f"  - {{key: {ANA_KEY}, name: ana, scopes: [inference, read, admin]}}\n"
    f"  - {{key: {BEN_KEY}, name: ben, scopes: [inference, read]}}\n"
    f"  - key: {PHONE_KEY}\n"
    "    name: phone\n"
    "    scopes: [inference]\n"
    "    quota: {concurrency: 1, requestsPerMinute: 3, tokensPerDay: 100000}\n"
)
MESSAGES: list[Any] = [{"role": "user", "content": "hello there"}]


def sdk(gw: Gateway, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.url("/v1"), api_key=key, max_retries=0, timeout=HANG)


def key_row(gw: Gateway, name: str) -> dict[str, Any]:
    """The key's standing in ``GET /api/queue``."""
    reply = request(gw, "GET", "/api/queue", headers=BEN)
    assert reply.status == 200, reply.body
    rows = {row["key"]: row for row in reply.json()["keys"]}
    row: dict[str, Any] = rows[name]
    return row


def load(gw: Gateway, model: str) -> None:
    reply = request(gw, "POST", f"/api/models/load/{model}", headers=ANA)
    assert reply.status == 200, reply.body


def test_a_limited_key_gets_its_headers_then_a_429_in_the_routes_shape(
    door_gateway: StartGateway, door: Door
) -> None:
    gw = door_gateway(f"  fake:\n    cmd: {fake_cmd()}\n", extra_top=KEYS)
    load(gw, "fake")
    watch = door.watch(gw, BEN)
    phone = sdk(gw, PHONE_KEY)

    first = phone.chat.completions.with_raw_response.create(model="fake", messages=MESSAGES)
    assert first.parse().choices[0].message.content
    h = first.headers
    assert h["x-ratelimit-limit-requests"] == "3"
    assert h["x-ratelimit-remaining-requests"] == "2"  # as its admission left the bucket
    assert h["x-ratelimit-reset-requests"].endswith("s")  # "20s", "19.9s"
    assert (h["x-ratelimit-limit-concurrency"], h["x-ratelimit-remaining-concurrency"]) == (
        "1",
        "0",
    )
    assert h["x-ratelimit-limit-tokens-day"] == "100000"
    assert "x-modelswap-queue" not in h  # it did not wait
    second = phone.chat.completions.with_raw_response.create(model="fake", messages=MESSAGES)
    assert second.headers["x-ratelimit-remaining-requests"] == "1"
    streamed = phone.chat.completions.with_raw_response.create(
        model="fake", messages=MESSAGES, stream=True
    )
    assert streamed.headers["x-ratelimit-remaining-requests"] == "0"
    assert [chunk for chunk in streamed.parse()]  # the stream as the SDK reads it
    if door.fast:  # (with the lane off, the count is per connection: the SDK keeps one)
        watch.answered(3)  # by the door itself

    watch = door.watch(gw, BEN)
    with pytest.raises(openai.RateLimitError) as info:
        phone.chat.completions.create(model="fake", messages=MESSAGES)
    refused = info.value.response
    assert refused.status_code == 429
    assert 1 <= int(refused.headers["retry-after"]) <= 20  # a request's refill: 20 s
    assert int(refused.headers["retry-after-ms"]) >= 1
    assert refused.headers["x-ratelimit-remaining-requests"] == "0"
    error = refused.json()["error"]
    assert (error["type"], error["code"], error["limit"]) == (
        "rate_limit_error",
        "rate_limited",
        "requests",
    )
    assert "'phone' is over its requests limit (3)" in error["message"]
    if door.fast:
        watch.handed_over("quota")  # the fast door hands it to aiohttp's path, which answers

    # Anthropic's route answers in Anthropic's envelope, with the same headers.
    body = json.dumps({"model": "fake", "max_tokens": 8, "messages": MESSAGES}).encode()
    anthropic = request(gw, "POST", "/v1/messages", body, {**PHONE, **JSON})
    assert anthropic.status == 429, anthropic.body
    assert anthropic.json()["type"] == "error"
    assert anthropic.json()["error"]["type"] == "rate_limit_error"
    assert int(anthropic.headers["Retry-After"]) >= 1
    assert anthropic.headers["x-ratelimit-limit-requests"] == "3"

    # A model request refused before admission (no such model) still says where the key is.
    missing = request(gw, "POST", "/v1/chat/completions", chat_body("nope"), {**PHONE, **JSON})
    assert missing.status == 404
    assert missing.headers["x-ratelimit-limit-requests"] == "3"

    # Another key is not limited by phone's, and a key without a quota gets no headers.
    other = sdk(gw, BEN_KEY).chat.completions.with_raw_response.create(
        model="fake", messages=MESSAGES
    )
    assert not [name for name in other.headers if name.startswith("x-ratelimit")]

    row = key_row(gw, "phone")
    assert (row["requests"], row["in_flight"]) == (3, 0)  # refusals take nothing
    assert row["tokens"] > 0  # the backend's usage, charged at each answer's end


def test_a_client_that_leaves_mid_stream_gives_its_place_back(
    door_gateway: StartGateway, door: Door
) -> None:
    gw = door_gateway(
        f"  slow:\n    cmd: {fake_cmd('--tps', '4', '--tokens', '400')}\n", extra_top=KEYS
    )
    load(gw, "slow")
    conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=HANG)
    try:
        conn.request(
            "POST", "/v1/chat/completions", chat_body("slow", stream=True), {**PHONE, **JSON}
        )
        stream = conn.getresponse()
        assert stream.status == 200
        assert stream.headers["x-ratelimit-remaining-concurrency"] == "0"
        assert next_event(stream) is not None  # the answer is under way
        # the in-flight listing shows the headers the answer went out with (either door)
        [row] = request(gw, "GET", "/api/inflight", None, ANA).json()["requests"]
        assert row["resp_headers"]["x-ratelimit-remaining-concurrency"] == "0"
        assert row["resp_headers"]["x-ratelimit-limit-tokens-day"] == "100000"
        busy = request(gw, "POST", "/v1/chat/completions", chat_body("slow"), {**PHONE, **JSON})
        assert busy.status == 429, busy.body  # its one place is taken
        assert busy.json()["error"]["limit"] == "concurrency"
        assert busy.headers["Retry-After"] == "1"
    finally:
        conn.close()  # the client leaves mid-stream
    gw.wait_for(lambda: key_row(gw, "phone")["in_flight"] == 0)
    short = chat_body("slow", max_tokens=2)  # two tokens at 4 a second
    again = request(gw, "POST", "/v1/chat/completions", short, {**PHONE, **JSON})
    assert again.status == 200, again.body


def test_a_waiting_request_is_told_its_place_and_listed_by_its_key(
    door_gateway: StartGateway, tmp_path: Path
) -> None:
    release = tmp_path / "release"
    gw = door_gateway(f"  slow:\n    cmd: {held_cmd(release)}\n", extra_top=KEYS)
    lines: list[bytes] = []
    answers: list[Reply] = []

    def stream() -> None:  # ana's stream, read raw: the SDK drops comments
        conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=HANG)
        try:
            conn.request(
                "POST", "/v1/chat/completions", chat_body("slow", stream=True), {**ANA, **JSON}
            )
            resp = conn.getresponse()
            while line := resp.readline():
                lines.append(line)
        finally:
            conn.close()

    def plain() -> None:  # ben's, not streamed
        answers.append(
            request(gw, "POST", "/v1/chat/completions", chat_body("slow"), {**BEN, **JSON})
        )

    streamer = threading.Thread(target=stream)
    streamer.start()
    gw.wait_for(lambda: len(queue_rows(gw)) == 1)
    sender = threading.Thread(target=plain)
    sender.start()
    try:
        gw.wait_for(lambda: len(queue_rows(gw)) == 2)
        assert sorted(row["key"] for row in queue_rows(gw)) == ["ana", "ben"]  # by name
        gw.wait_for(lambda: any(line.startswith(b": queued 1st for slow") for line in lines))
    finally:
        release.touch()
        streamer.join(timeout=120)
        sender.join(timeout=120)
    assert not streamer.is_alive()
    assert not sender.is_alive()
    assert b"data: [DONE]\n" in lines  # the answer followed its comments
    [answer] = answers
    assert answer.status == 200, answer.body
    assert re.fullmatch(
        r"queued (1st|2nd) for slow(, ~\d+ s)?", answer.headers["X-Modelswap-Queue"]
    )

    waited = samples(gw, "modelswap_queue_wait_seconds_count")
    assert waited[(("key", "ana"), ("model", "slow"))] == 1
    assert waited[(("key", "ben"), ("model", "slow"))] == 1


def queue_rows(gw: Gateway) -> list[dict[str, Any]]:
    reply = request(gw, "GET", "/api/queue", headers=BEN)
    assert reply.status == 200, reply.body
    rows: list[dict[str, Any]] = reply.json()["waiting"]
    return rows


def samples(gw: Gateway, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    reply = request(gw, "GET", "/metrics", headers=BEN)
    assert reply.status == 200
    found: dict[tuple[tuple[str, str], ...], float] = {}
    for family in text_string_to_metric_families(reply.body.decode()):
        for sample in family.samples:
            if sample.name == name:
                found[tuple(sorted(sample.labels.items()))] = sample.value
    return found


def test_a_request_waiting_for_a_busy_model_is_counted_once(
    door_gateway: StartGateway, door: Door
) -> None:
    # The fast door lets phone's request in, finds the model busy and hands it to aiohttp's
    # path, which lets it in again: the first admission is given back, so it counts once.
    models = (
        f"  slow:\n    cmd: {fake_cmd('--tps', '20', '--tokens', '40')}\n    concurrencyLimit: 1\n"
    )
    gw = door_gateway(models, extra_top=KEYS)
    load(gw, "slow")
    watch = door.watch(gw, BEN)
    conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=HANG)
    answers: list[Reply] = []
    sender = threading.Thread(
        target=lambda: answers.append(
            request(gw, "POST", "/v1/chat/completions", chat_body("slow"), {**PHONE, **JSON})
        )
    )
    try:  # ben's stream holds the model's one place (two seconds of tokens)
        conn.request(
            "POST", "/v1/chat/completions", chat_body("slow", stream=True), {**BEN, **JSON}
        )
        stream = conn.getresponse()
        assert next_event(stream) is not None
        sender.start()
        gw.wait_for(lambda: [row["key"] for row in queue_rows(gw)] == ["phone"])
        [row] = queue_rows(gw)
        assert row["waits_for"] in ("concurrencyLimit", "turn")
        while next_event(stream) is not None:  # ben's answer ends: phone's turn
            pass
    finally:
        conn.close()
        sender.join(timeout=120)
    assert not sender.is_alive()
    [answer] = answers
    assert answer.status == 200, answer.body
    assert answer.headers["X-Modelswap-Queue"].startswith("queued 1st for slow")
    assert answer.headers["x-ratelimit-remaining-requests"] == "2"  # counted once
    phone = key_row(gw, "phone")
    assert (phone["requests"], phone["in_flight"]) == (1, 0)
    if door.fast:
        watch.handed_over("not_ready", served=1)  # ben's stream served, phone's handed over
