"""The connection counts (shares per client network, the total cap, nothing left behind) and the
refusal answer's bytes. The site itself on real sockets: tests/integration/test_guarded_site.py."""

from __future__ import annotations

import json

from modelswap.http.server.connections import (
    AT_WORK,
    AT_WORK_KEPT_ALIVE,
    IDLE,
    NEW,
    RETRY_AFTER,
    ConnectionCounts,
    refusal,
)


def test_a_client_gets_its_share_and_the_others_the_rest() -> None:
    connection_counts = ConnectionCounts(max_total=5, max_per_client=2)
    assert connection_counts.admit("10.0.0.1") is None
    assert connection_counts.admit("10.0.0.1") is None
    over = connection_counts.admit("10.0.0.1")
    assert over is not None
    assert "10.0.0.1" in over
    assert "limits.maxConnectionsPerClient: 2" in over
    assert connection_counts.of("10.0.0.1").held == 2  # a refusal is not counted
    for client in ("10.0.0.2", "10.0.0.2", "10.0.0.3"):
        assert connection_counts.admit(client) is None
    full = connection_counts.admit("10.0.0.4")
    assert full is not None
    assert "limits.maxConnections: 5" in full
    assert (
        connection_counts.admit("10.0.0.1") is not None
    )  # its own share is still the first reason
    assert (connection_counts.total, connection_counts.clients) == (5, 3)


def test_releasing_every_connection_leaves_nothing_behind() -> None:
    connection_counts = ConnectionCounts(max_total=10_000, max_per_client=64)
    admitted = []
    for n in range(3000):
        client = f"10.0.{n % 300 // 256}.{n % 300 % 256}"
        if connection_counts.admit(client) is None:
            admitted.append(client)
    assert len(admitted) == 3000
    assert connection_counts.clients == 300
    for client in admitted:
        connection_counts.release(client)
    assert (connection_counts.total, connection_counts.clients) == (0, 0)
    assert connection_counts.admit("10.0.0.1") is None


def test_the_refusal_is_a_whole_503_with_retry_after_in_the_openai_envelope() -> None:
    raw = refusal("Too many connections to modelswap (limits.maxConnections: 3).")
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    assert lines[0] == "HTTP/1.1 503 Service Unavailable"
    headers = dict(line.split(": ", 1) for line in lines[1:])
    assert headers["Retry-After"] == str(RETRY_AFTER)
    assert headers["Connection"] == "close"
    assert headers["X-Modelswap-Error"] == "1"
    assert int(headers["Content-Length"]) == len(body)
    assert json.loads(body) == {
        "error": {
            "message": "Too many connections to modelswap (limits.maxConnections: 3).",
            "type": "service_unavailable",
            "code": "too_many_connections",
            "param": None,
        }
    }


def test_a_connection_at_work_leaves_the_share_and_idle_ones_have_their_own() -> None:
    connection_counts = ConnectionCounts(max_total=10, max_per_client=2)
    assert connection_counts.admit("10.0.0.1") is None
    assert connection_counts.admit("10.0.0.1") is None
    assert connection_counts.over_share("10.0.0.1")
    connection_counts.move("10.0.0.1", NEW, AT_WORK)  # its head is in and it is served
    assert not connection_counts.over_share("10.0.0.1")
    assert connection_counts.admit("10.0.0.1") is None
    assert connection_counts.over_share("10.0.0.1")
    connection_counts.move("10.0.0.1", NEW, AT_WORK)
    assert (connection_counts.of("10.0.0.1").held, connection_counts.of("10.0.0.1").new) == (3, 1)
    for _ in range(2):  # two answers promise to keep their connection alive; a third cannot
        assert connection_counts.may_keep("10.0.0.1")
        connection_counts.move("10.0.0.1", AT_WORK, AT_WORK_KEPT_ALIVE)
    assert not connection_counts.may_keep("10.0.0.1")
    connection_counts.move("10.0.0.1", AT_WORK_KEPT_ALIVE, IDLE)
    assert (connection_counts.of("10.0.0.1").new, connection_counts.of("10.0.0.1").kept) == (1, 2)
    assert connection_counts.admit("10.0.0.1") is None  # idle connections do not take the new share
    assert connection_counts.admit("10.0.0.1") is not None
    connection_counts.move(
        "10.0.0.1", IDLE, AT_WORK
    )  # an idle one at work again: its keep-alive anew
    assert connection_counts.may_keep("10.0.0.1")
    for standing in (NEW, NEW, AT_WORK, AT_WORK_KEPT_ALIVE):
        connection_counts.release("10.0.0.1", standing)
    assert (connection_counts.total, connection_counts.clients) == (0, 0)
