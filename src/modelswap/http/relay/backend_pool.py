"""Pooled HTTP/1.1 connections to local backends on raw asyncio protocols, parsed by httptools
(llhttp, the C parser uvicorn uses): the relay's raw transport (:class:`PooledTransport`), used
by the fast door (:mod:`modelswap.http.server.fast_door`).

aiohttp's client costs ~75 µs of Python per request here (a request object, a response object,
a connector lookup, three timeouts); this costs a dictionary lookup, one write and the parser's
callbacks. It does only what the common case needs: plain ``http://`` to a host and port, a whole
request written at once, the answer's head and then its body as it arrives (chunked framing
decoded), a connection kept for the next request only when its answer was read to the end and
both sides allow it. Everything else (TLS, peers, WebSockets, llama-swap's per-model connection
settings) stays on aiohttp's client.
"""

from __future__ import annotations

import asyncio
import collections

import httptools

from modelswap.http.relay.transport import (
    CONNECT,
    FIRST_BYTE,
    BackendBrokeError,
    BackendClosedError,
    BackendRefusedError,
    Deadlines,
    ResponseHead,
    said,
)

HIGH_WATER = 1 << 20  # bytes of answer buffered before the backend's socket is paused
MAX_IDLE = 256  # idle connections kept per backend; more are closed as they come back
IDLE_CLOSE = 15.0  # seconds an idle connection is kept (aiohttp's keep-alive time, as before)


class BackendConnection(asyncio.Protocol):
    """One connection to a backend, serving one exchange at a time: :meth:`send`, then
    :meth:`head`, then :meth:`read` until it returns ``b""``, then :meth:`finish`."""

    def __init__(self, pool: BackendPool, key: tuple[str, int]) -> None:
        self._pool = pool
        self.key = key
        self.transport: asyncio.Transport | None = None
        self.reused = False
        self.idle_since = 0.0
        self._parser = httptools.HttpResponseParser(self)
        self._reset()

    def _reset(self) -> None:
        self._reason = bytearray()
        self._headers: list[tuple[bytes, bytes]] = []
        self._head: ResponseHead | None = None
        self._chunks: collections.deque[bytes] = collections.deque()
        self._buffered = 0
        self._complete = False
        self._error: Exception | None = None
        self._got_bytes = False
        self._waiter: asyncio.Future[None] | None = None
        self._paused = False

    # -- asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's are not subclasses

    def data_received(self, data: bytes) -> None:
        self._got_bytes = True
        try:
            self._parser.feed_data(data)
        except (httptools.HttpParserError, httptools.HttpParserUpgrade) as exc:
            self._fail(BackendBrokeError(f"unreadable answer: {exc}"))
            self.close()

    def connection_lost(self, exc: BaseException | None) -> None:
        self.transport = None
        self._pool.forget(self)
        if not self._complete:
            if self._got_bytes:
                broke = f"the backend closed the connection mid-answer ({exc})"
                self._fail(BackendBrokeError(broke))
            else:
                reason = str(exc) if exc else "Server disconnected"
                self._fail(BackendClosedError(self.reused, reason))

    # -- httptools callbacks

    def on_status(self, reason: bytes) -> None:
        self._reason += reason

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers.append((name, value))

    def on_headers_complete(self) -> None:
        length: int | None = None
        event_stream = False
        for name, value in self._headers:
            if len(name) == 14 and name.lower() == b"content-length" and value.strip().isdigit():
                length = int(value)
            elif len(name) == 12 and name.lower() == b"content-type":
                event_stream = value.split(b";", 1)[0].strip().lower() == b"text/event-stream"
        self._head = ResponseHead(
            self._parser.get_status_code(),
            bytes(self._reason),
            self._headers,
            length,
            self._parser.should_keep_alive(),
            event_stream,
        )
        self._wake()

    def on_body(self, body: bytes) -> None:
        self._chunks.append(body)
        self._buffered += len(body)
        if self._buffered > HIGH_WATER and not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()
        self._wake()

    def on_message_complete(self) -> None:
        self._complete = True
        self._wake()

    # -- the exchange

    def send(self, data: bytes) -> None:
        assert self.transport is not None
        self.transport.write(data)

    async def head(self) -> ResponseHead:
        while self._head is None:
            if self._error is not None:
                raise self._error
            await self._wait()
        return self._head

    async def read(self) -> bytes:
        while not self._chunks:
            if self._complete:
                return b""
            if self._error is not None:
                raise self._error
            await self._wait()
        chunks = self._chunks
        data = chunks.popleft() if len(chunks) == 1 else b"".join(chunks)
        chunks.clear()
        self._buffered = 0
        if self._paused and self.transport is not None:
            self._paused = False
            self.transport.resume_reading()
        return data

    @property
    def complete(self) -> bool:
        return self._complete

    @property
    def has_data(self) -> bool:
        return bool(self._chunks) or self._complete or self._error is not None

    def finish(self, reusable: bool) -> None:
        """The exchange is over: back to the pool when its answer was read whole and both
        sides keep the connection; else closed (a backend still generating stops)."""
        head = self._head
        transport = self.transport
        if (
            reusable
            and self._complete
            and head is not None
            and head.keep_alive
            and transport is not None
            and not transport.is_closing()
        ):
            self._reset()
            self.reused = True
            self._pool.put(self)
            return
        self.close()

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def _fail(self, error: Exception) -> None:
        if self._error is None:
            self._error = error
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def _wait(self) -> None:
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None


class BackendPool:
    """Idle connections by (host, port), newest first out, each closed after IDLE_CLOSE
    seconds unused (a backend's connection count goes back to none when no one asks); used on
    the event loop only."""

    def __init__(self) -> None:
        self._idle: dict[tuple[str, int], list[BackendConnection]] = {}
        self._closed = False
        self._sweeper: asyncio.TimerHandle | None = None

    async def connect(self, host: str, port: int) -> BackendConnection:
        """An idle connection to (host, port), else a new one (raises OSError; the caller
        bounds the wait)."""
        key = (host, port)
        idle = self._idle.get(key)
        while idle:
            connection = idle.pop()
            if connection.transport is not None and not connection.transport.is_closing():
                return connection
        loop = asyncio.get_running_loop()
        _, protocol = await loop.create_connection(lambda: BackendConnection(self, key), host, port)
        return protocol

    def put(self, connection: BackendConnection) -> None:
        idle = self._idle.setdefault(connection.key, [])
        if self._closed or len(idle) >= MAX_IDLE:
            connection.close()
            return
        loop = asyncio.get_running_loop()
        connection.idle_since = loop.time()
        idle.append(connection)
        if self._sweeper is None:
            self._sweeper = loop.call_later(IDLE_CLOSE / 4, self._sweep)

    def _sweep(self) -> None:
        """Close the connections idle for IDLE_CLOSE seconds (the oldest are first in each
        list); look again while any is left."""
        loop = asyncio.get_running_loop()
        expired = loop.time() - IDLE_CLOSE
        for connections in self._idle.values():
            while connections and connections[0].idle_since <= expired:
                connections.pop(0).close()
        self._sweeper = None
        if any(self._idle.values()):
            self._sweeper = loop.call_later(IDLE_CLOSE / 4, self._sweep)

    def forget(self, connection: BackendConnection) -> None:
        idle = self._idle.get(connection.key)
        if idle and connection in idle:
            idle.remove(connection)

    @property
    def idle(self) -> int:
        return sum(len(connections) for connections in self._idle.values())

    def close(self) -> None:
        self._closed = True
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        idle, self._idle = self._idle, {}
        for connections in idle.values():
            for connection in connections:
                connection.close()


class PooledTransport:
    """The relay's transport to one plain ``http://`` backend, on ``pool``'s connections."""

    __slots__ = ("_host", "_pool", "_port", "_prefix")

    def __init__(self, pool: BackendPool, host: str, port: int) -> None:
        self._pool = pool
        self._host = host
        self._port = port
        named = f"[{host}]" if ":" in host else host  # an IPv6 address, bracketed
        self._prefix = b" HTTP/1.1\r\nHost: %b:%d\r\n" % (named.encode(), port)

    async def open(
        self,
        method: str,
        target: str,
        headers: list[tuple[bytes, bytes]],
        body: bytes,
        deadlines: Deadlines,
    ) -> tuple[ResponseHead, BackendConnection]:
        deadlines.phase = CONNECT
        try:
            connection = await self._pool.connect(self._host, self._port)
        except OSError as exc:
            raise BackendRefusedError(said(exc)) from exc
        deadlines.phase = FIRST_BYTE
        lines = [method.encode(), b" ", target.encode("latin-1"), self._prefix]
        lines.extend(b"%b: %b\r\n" % pair for pair in headers)
        lines.append(b"Content-Length: %d\r\n\r\n" % len(body))
        lines.append(body)
        connection.send(b"".join(lines))
        try:
            return await connection.head(), connection
        except BaseException:
            connection.close()
            raise
