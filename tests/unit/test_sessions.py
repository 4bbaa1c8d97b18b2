"""llama-swap's timeouts.keepalive and idleConn on the sessions to backends (issue 17): a real
connection to a real loopback server, its socket options read back."""

from __future__ import annotations

import socket

from aiohttp import web
from aiohttp.test_utils import TestServer

from modelswap.sessions import PooledSessions, _socket_factory, make_session


async def ok(request: web.Request) -> web.Response:
    return web.Response(text="ok")


def test_the_socket_factory_turns_tcp_keepalive_on() -> None:
    make = _socket_factory(7)
    sock = make((socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", ("127.0.0.1", 1)))
    try:
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
        if hasattr(socket, "TCP_KEEPIDLE"):
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == 7
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL) == 7
    finally:
        sock.close()


async def test_a_session_with_both_serves_requests() -> None:
    app = web.Application()
    app.router.add_get("/", ok)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    session = make_session(keepalive=7, idle_conn=42)
    try:
        assert session.connector is not None
        assert session.connector._keepalive_timeout == 42  # type: ignore[attr-defined]
        for _ in range(2):  # the second one reuses the pooled connection
            async with session.get(server.make_url("/")) as resp:
                assert await resp.text() == "ok"
    finally:
        await session.close()
        await server.close()


async def test_zero_means_no_probes_and_no_idle_limit() -> None:
    session = make_session(keepalive=0, idle_conn=0)
    try:
        assert session.connector is not None
        assert session.connector._keepalive_timeout is None  # type: ignore[attr-defined]
    finally:
        await session.close()


async def test_one_session_per_pair_closed_together() -> None:
    pooled = PooledSessions()
    first = pooled.get((30.0, 90.0))
    assert pooled.get((30.0, 90.0)) is first
    assert pooled.get((None, 90.0)) is not first
    assert pooled.opened() == [(30.0, 90.0), (None, 90.0)]
    await pooled.close()
    assert first.closed
