"""llama-swap's timeouts.keepalive and idleConn on the sessions to backends (issue 17): a real
connection to a real loopback server, its socket options read back."""

from __future__ import annotations

import asyncio
import socket

from aiohttp import web
from aiohttp.test_utils import TestServer

from modelswap.upstream_sessions import PooledSessions, _socket_factory, make_session


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


async def test_a_relayed_request_carries_only_the_headers_it_was_given() -> None:
    """No User-Agent, Accept, Accept-Encoding or default Content-Type added by aiohttp: the
    backend gets the client's headers as they came (read from the raw request bytes)."""
    heads: list[bytes] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(
            (
                int(line[15:])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length:")
            ),
            0,
        )
        heads.append(head + await reader.readexactly(length))
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    session = make_session(keepalive=None, idle_conn=None)
    try:
        sent: list[tuple[str, bytes | None, dict[str, str]]] = [
            ("POST", b"raw", {}),
            ("GET", None, {"Accept": "text/plain", "User-Agent": "me"}),
        ]
        for method, body, headers in sent:
            async with session.request(
                method, f"http://127.0.0.1:{port}/v1/x", data=body, headers=headers
            ) as resp:
                assert await resp.read() == b"ok"
    finally:
        await session.close()
        server.close()
        await server.wait_closed()
    assert heads[0] == (
        f"POST /v1/x HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 3\r\n\r\nraw".encode()
    )
    assert heads[1] == (
        f"GET /v1/x HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAccept: text/plain\r\n"
        "User-Agent: me\r\n\r\n".encode()
    )
