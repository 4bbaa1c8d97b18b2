"""A backend that closes a kept-alive connection instead of answering the next request on it
(llama.cpp's server does, past its keep-alive time): the gateway asks again on another
connection, so the client never sees the 502 that relaying the closed connection's error gave.
The backend (``tests/fakes/closing_backend.py``) answers exactly one request per connection and
counts the connections it closed unanswered, so the test knows the stale path was taken. Both
doors keep connections to backends (aiohttp's client session; the fast lane's backend pool), so
the test runs through each."""

from __future__ import annotations

import http.client
import json
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from tests.e2e.conftest import Door, Gateway, chat, free_port

pytestmark = pytest.mark.e2e

CLOSING = Path(__file__).resolve().parents[1] / "fakes" / "closing_backend.py"
REQUESTS = 6


def test_a_connection_the_backend_closed_unanswered_is_asked_again(
    door_gateway: Callable[..., Gateway], door: Door
) -> None:
    port = free_port()
    cmd = json.dumps(f'"{sys.executable}" "{CLOSING}" --port {port}')
    gw = door_gateway(
        f"  closing:\n    cmd: {cmd}\n    proxy: http://127.0.0.1:{port}\n"
        "    checkEndpoint: /health\n"
    )
    first = chat(gw, "closing")  # starts it: aiohttp's routes on both doors
    assert first.status == 200, first.body
    watch = door.watch(gw)
    for n in range(1, REQUESTS):  # one after another: each may take the connection the last left
        reply = chat(gw, "closing")
        assert reply.status == 200, (n, reply.status, reply.body)
        assert json.loads(reply.body)["choices"][0]["message"]["content"] == "ok"
    watch.answered(REQUESTS - 1)
    served = json.loads(request_backend(port, "/served"))
    assert served["answered"] == REQUESTS
    assert served["closed_unanswered"] >= 1  # the gateway did reuse a connection it had kept


def request_backend(port: int, path: str) -> bytes:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("GET", path)
        return conn.getresponse().read()
    finally:
        conn.close()
