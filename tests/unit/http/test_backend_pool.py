"""The fast lane's pooled backend connections (http/relay/backend_pool.py) against a small real
HTTP/1.1 server on 127.0.0.1 that answers each request with the bytes a test gives it: reuse
after an answer read to its end, ``Connection: close``, chunked framing, a pooled connection the
server closed, ``finish(reusable=False)`` and an answer that breaks off."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import pytest

from modelswap.http.relay import backend_pool
from modelswap.http.relay.backend_pool import BackendConnection, BackendPool
from modelswap.http.relay.transport import BackendBrokeError, BackendClosedError

HANG = 30.0  # the ceiling of a wait: it only ends a hang
REQUEST = b"POST /v1/chat/completions HTTP/1.1\r\nHost: test\r\nContent-Length: 2\r\n\r\n{}"
OK = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\nok"

# What the server does with the n-th request (from 0) of a connection: the bytes to answer,
# and whether to close the connection after them. None: close without answering.
Script = Callable[[int], tuple[bytes, bool] | None]


@dataclass
class Server:
    """A real server on 127.0.0.1: ``connections`` accepted, ``closed`` connections seen
    closed (by either side), every request head it read."""

    port: int = 0
    script: Script = lambda _n: (OK, False)
    connections: int = 0
    heads: list[bytes] = field(default_factory=list)
    closed: asyncio.Event = field(default_factory=asyncio.Event)
    writers: list[asyncio.StreamWriter] = field(default_factory=list)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.writers.append(writer)
        try:
            for n in range(1000):  # bounded: no test sends that many
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return  # the client closed
                self.heads.append(head)
                length = 0
                for line in head.split(b"\r\n"):
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                await reader.readexactly(length)
                answer = self.script(n)
                if answer is None:
                    return
                data, close = answer
                writer.write(data)
                await writer.drain()
                if close:
                    return
        finally:
            writer.close()
            self.closed.set()


@pytest.fixture
async def server() -> AsyncIterator[Server]:
    found = Server()
    listener = await asyncio.start_server(found.handle, "127.0.0.1", 0)
    found.port = listener.sockets[0].getsockname()[1]
    try:
        yield found
    finally:
        listener.close()
        for writer in found.writers:
            writer.close()
        await listener.wait_closed()


@pytest.fixture
async def pool() -> AsyncIterator[BackendPool]:
    made = BackendPool()
    try:
        yield made
    finally:
        made.close()


async def exchange(connection: BackendConnection) -> tuple[int, bytes]:
    """One request on ``connection``: the answer's status and its whole body."""
    connection.send(REQUEST)
    head = await asyncio.wait_for(connection.head(), HANG)
    body = b""
    for _ in range(10_000):  # bounded: the answers here are a few chunks
        chunk = await asyncio.wait_for(connection.read(), HANG)
        if not chunk:
            return head.status, body
        body += chunk
    raise AssertionError("the answer never ended")


async def until(predicate: Callable[[], bool]) -> None:
    """Wait (with a ceiling) for a state this event loop will reach."""
    async with asyncio.timeout(HANG):
        while not predicate():  # noqa: ASYNC110 - the connection offers no event for it
            await asyncio.sleep(0.01)


async def test_a_connection_read_to_its_end_is_reused(server: Server, pool: BackendPool) -> None:
    first = await pool.connect("127.0.0.1", server.port)
    assert not first.reused
    assert await exchange(first) == (200, b"ok")
    assert first.complete
    first.finish(reusable=True)
    assert pool.idle == 1

    again = await pool.connect("127.0.0.1", server.port)
    assert again is first
    assert again.reused
    assert pool.idle == 0
    assert await exchange(again) == (200, b"ok")
    again.finish(reusable=True)
    assert server.connections == 1
    assert len(server.heads) == 2


async def test_an_answer_with_connection_close_is_not_reused(
    server: Server, pool: BackendPool
) -> None:
    closing = OK.replace(b"Content-Length", b"Connection: close\r\nContent-Length")
    server.script = lambda _n: (closing, False)  # the server keeps it; the header decides
    first = await pool.connect("127.0.0.1", server.port)
    connection = first
    connection.send(REQUEST)
    head = await asyncio.wait_for(connection.head(), HANG)
    assert not head.keep_alive
    assert await asyncio.wait_for(connection.read(), HANG) == b"ok"
    assert await asyncio.wait_for(connection.read(), HANG) == b""
    connection.finish(reusable=True)
    assert pool.idle == 0
    await asyncio.wait_for(server.closed.wait(), HANG)  # closed by the pool's side

    second = await pool.connect("127.0.0.1", server.port)
    assert second is not first
    assert not second.reused
    assert await exchange(second) == (200, b"ok")
    assert server.connections == 2


async def test_a_chunked_answer_is_decoded(server: Server, pool: BackendPool) -> None:
    chunked = (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n"
        b"\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"
    )
    server.script = lambda _n: (chunked, False)
    connection = await pool.connect("127.0.0.1", server.port)
    connection.send(REQUEST)
    head = await asyncio.wait_for(connection.head(), HANG)
    assert head.status == 200
    assert head.content_length is None
    assert head.keep_alive
    body = b""
    for _ in range(100):  # bounded
        chunk = await asyncio.wait_for(connection.read(), HANG)
        if not chunk:
            break
        body += chunk
    assert body == b"hello world"  # the framing is gone
    assert connection.complete
    connection.finish(reusable=True)
    assert pool.idle == 1  # a chunked answer read to its end keeps the connection too


async def test_a_pooled_connection_the_server_closed_is_stale_on_its_next_use(
    server: Server, pool: BackendPool
) -> None:
    # As llama.cpp past its keep-alive time: the next request on the kept connection is read
    # and the socket closed unanswered.
    server.script = lambda n: (OK, False) if n == 0 else None
    first = await pool.connect("127.0.0.1", server.port)
    assert await exchange(first) == (200, b"ok")
    first.finish(reusable=True)

    again = await pool.connect("127.0.0.1", server.port)
    assert again is first
    again.send(REQUEST)
    with pytest.raises(BackendClosedError) as raised:
        await asyncio.wait_for(again.head(), HANG)
    assert raised.value.stale is True
    assert pool.idle == 0


async def test_a_fresh_connection_closed_unanswered_is_not_stale(
    server: Server, pool: BackendPool
) -> None:
    server.script = lambda _n: None
    connection = await pool.connect("127.0.0.1", server.port)
    connection.send(REQUEST)
    with pytest.raises(BackendClosedError) as raised:
        await asyncio.wait_for(connection.head(), HANG)
    assert raised.value.stale is False  # the backend itself dropped it: not worth a retry


async def test_a_connection_the_server_closed_while_idle_leaves_the_pool(
    server: Server, pool: BackendPool
) -> None:
    server.script = lambda _n: (OK, True)  # answers with keep-alive, then closes
    first = await pool.connect("127.0.0.1", server.port)
    assert await exchange(first) == (200, b"ok")
    first.finish(reusable=True)
    await until(lambda: first.transport is None)  # its close came in while it sat idle
    assert pool.idle == 0
    second = await pool.connect("127.0.0.1", server.port)
    assert second is not first
    assert not second.reused


async def test_finish_not_reusable_closes_the_connection(server: Server, pool: BackendPool) -> None:
    connection = await pool.connect("127.0.0.1", server.port)
    assert await exchange(connection) == (200, b"ok")
    connection.finish(reusable=False)
    assert pool.idle == 0
    await asyncio.wait_for(server.closed.wait(), HANG)  # the server saw it close
    await until(lambda: connection.transport is None)
    again = await pool.connect("127.0.0.1", server.port)
    assert again is not connection
    assert server.connections == 2


async def test_an_answer_cut_mid_body_is_broken(server: Server, pool: BackendPool) -> None:
    cut = b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly ten b"
    server.script = lambda _n: (cut, True)
    connection = await pool.connect("127.0.0.1", server.port)
    connection.send(REQUEST)
    head = await asyncio.wait_for(connection.head(), HANG)
    assert head.content_length == 100
    got = b""
    for _ in range(100):  # bounded: what came is delivered, then the break
        try:
            chunk = await asyncio.wait_for(connection.read(), HANG)
        except BackendBrokeError:
            break
        assert chunk, "a cut answer must not read as a whole one"
        got += chunk
    else:
        raise AssertionError("the cut answer never broke")
    assert got == b"only ten b"  # what came is delivered before the break
    assert not connection.complete
    connection.finish(reusable=True)  # a broken answer is never pooled
    assert pool.idle == 0


async def test_an_unreadable_answer_is_broken(server: Server, pool: BackendPool) -> None:
    server.script = lambda _n: (b"this is not HTTP\r\n\r\n", False)
    connection = await pool.connect("127.0.0.1", server.port)
    connection.send(REQUEST)
    with pytest.raises(BackendBrokeError):
        await asyncio.wait_for(connection.head(), HANG)
    await until(lambda: connection.transport is None)  # closed: never reused


async def test_a_closed_pool_keeps_nothing(server: Server) -> None:
    pool = BackendPool()
    connection = await pool.connect("127.0.0.1", server.port)
    assert await exchange(connection) == (200, b"ok")
    pool.close()
    connection.finish(reusable=True)
    assert pool.idle == 0
    await asyncio.wait_for(server.closed.wait(), HANG)


async def test_a_connection_idle_past_its_time_is_closed(
    server: Server, pool: BackendPool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A backend's count of open connections goes back to none when no one asks (as aiohttp's
    # pool did, after its keep-alive time); the time shortened so the test need not wait 15 s.
    monkeypatch.setattr(backend_pool, "IDLE_CLOSE", 0.2)
    connection = await pool.connect("127.0.0.1", server.port)
    assert await exchange(connection) == (200, b"ok")
    connection.finish(reusable=True)
    assert pool.idle == 1
    await asyncio.wait_for(server.closed.wait(), HANG)  # the server saw it close
    assert pool.idle == 0
    await until(lambda: connection.transport is None)
