"""Connection shares: a cap in all, a share per client network of the connections that are not
at work, and a clean 503 for the rest.

aiohttp serves every connection it accepts until ``headerTimeout``. So that one client cannot
take the whole ``limits.maxConnections`` with slow headers or idle connections, each client
network (an IPv4 address, an IPv6 /64: :mod:`modelswap.http.tracking.clients`) may hold
``maxConnectionsPerClient`` *new* connections — not at work since they opened: their request
head not complete yet, or their request answered without being served (a missing or wrong key
where keys are configured, a CORS preflight, the shutdown's 503) — and as many *idle* ones, kept
alive between requests. A connection whose request is served (its head complete and past
authentication with a valid key, or with no keys configured: :func:`at_work`, the middleware
after authentication) counts in neither: in-flight work is
bounded by the scheduler (``queueLimit``, ``maxInFlight``) and by ``maxConnections``, not by a
client's share. An answer keeps its connection alive for the next request only while the
client's idle connections, with the answers already promised so, number under the share
(:func:`keep_within_share`); past it, it says ``Connection: close``. So the share never closes
an idle connection that its client may be reusing.

A new connection over its client's share waits, unread, for a place (one of that client's new
connections going to work or closing) for at most REFUSAL_READ_TIMEOUT seconds: a burst of real
requests, each new until its head is in, is served whole. One that gets no place is answered
503 with ``Retry-After`` then; one over ``maxConnections`` once its request line has been read
(at most REFUSAL_READ_TIMEOUT). Either is then half-closed and drained briefly before it is
closed, since closing a socket with unread bytes sends a reset that discards the answer. Waiting
and refusing cost bounded descriptors and time: at most MAX_REFUSING at once, each for at most
REFUSAL_READ_TIMEOUT + REFUSAL_DRAIN_TIMEOUT seconds and REFUSAL_MAX_BYTES bytes read; past
that a connection gets the 503 written and is closed at once.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import time
from collections.abc import Callable
from typing import cast

from aiohttp import hdrs, web

from modelswap.http.app_keys import AUTHORISED
from modelswap.http.error_responses import GATEWAY_ERROR_HEADER, envelope
from modelswap.http.route_table import Handler
from modelswap.http.server.acceptor import Acceptor, listening_sockets
from modelswap.http.server.bad_requests import EnvelopeRequestHandler
from modelswap.http.server.connection_counts import (
    AT_WORK,
    AT_WORK_KEPT_ALIVE,
    IDLE,
    NEW,
    ConnectionCounts,
    ConnectionState,
)
from modelswap.http.server.fast_door import DoorConnection, FastDoor
from modelswap.http.tracking.clients import client_network

log = logging.getLogger("modelswap")

REFUSAL_READ_TIMEOUT = 5.0  # seconds one over a cap waits (for a place, else its request line)
REFUSAL_DRAIN_TIMEOUT = 2.0  # seconds to read what follows the answer, until the client closes
REFUSAL_MAX_BYTES = 65536  # read and discarded per refused connection, at most
MAX_REFUSING = 2048  # connections over a cap waiting or being refused at once
RETRY_AFTER = 1  # seconds: connections come and go quickly
EPISODE_GAP = 60.0  # seconds without a refusal that end a refusal episode (for the log)


def refusal(message: str) -> bytes:
    """A whole HTTP/1.1 503 in the OpenAI error envelope, closing the connection."""
    error = envelope(message, 503, code="too_many_connections")
    body = json.dumps(error, separators=(",", ":")).encode()
    head = (
        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
        f"Connection: close\r\nRetry-After: {RETRY_AFTER}\r\n{GATEWAY_ERROR_HEADER}: 1\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


class CountedHandler(EnvelopeRequestHandler):
    """aiohttp's connection handler that keeps its state in the connection counts: NEW when
    admitted, AT_WORK while a request is served (:meth:`at_work`), AT_WORK_KEPT_ALIVE or
    AT_WORK as its answer is prepared (:meth:`keep_alive_after`), IDLE after an answer that
    keeps it open; released when it closes."""

    def __init__(self, server: web.Server, site: GuardedSite, network: str) -> None:
        super().__init__(server, loop=asyncio.get_running_loop(), **server._kwargs)
        self._site: GuardedSite | None = site
        self._network = network
        self._standing = NEW

    def _move(self, new: ConnectionState) -> None:
        if self._site is not None:
            old, self._standing = self._standing, new
            self._site.moved(self._network, old, new)

    def at_work(self) -> None:
        """Its request is served (its head is in, and it passed authentication): it counts
        toward neither of its client's shares until its answer is prepared."""
        if self._standing is NEW or self._standing is IDLE:  # keep-alive is decided anew
            self._move(AT_WORK)

    def keep_alive_after(self) -> bool:
        """As an answer is prepared: whether the connection may stay open after it. One at work
        may while its client's idle connections, with those promised, number under the share;
        one not at work (a new or idle one answered without being served) is counted already
        and stays as it is."""
        if self._standing is not AT_WORK:
            return True
        if self._site is None or not self._site.connection_counts.may_keep(self._network):
            return False
        self._move(AT_WORK_KEPT_ALIVE)
        return True

    async def finish_response(
        self, request: web.BaseRequest, resp: web.StreamResponse, start_time: float | None
    ) -> tuple[web.StreamResponse, bool]:
        try:
            return await super().finish_response(request, resp, start_time)
        finally:
            # The answer has ended: a connection that stays open is idle (counted) until its
            # next request is at work; one at work without the promise is about to close.
            if self._standing is AT_WORK_KEPT_ALIVE or (
                self._standing is AT_WORK and resp.keep_alive
            ):
                self._move(IDLE)

    def connection_lost(self, exc: BaseException | None) -> None:
        site, self._site = self._site, None
        if site is not None:
            site.gone(self._network, self._standing)
        super().connection_lost(exc)


@web.middleware
async def at_work(request: web.Request, handler: Handler) -> web.StreamResponse:
    """The middleware after authentication: a request it authorised (a valid key, or no keys
    configured) is served, so its connection leaves its client's shares
    (:meth:`CountedHandler.at_work`). One on an open route without a key stays counted."""
    connection = request.protocol
    if request.get(AUTHORISED, False) and isinstance(connection, CountedHandler):
        connection.at_work()
    return await handler(request)


async def keep_within_share(request: web.BaseRequest, response: web.StreamResponse) -> None:
    """``on_response_prepare``: an answer that would leave its client more idle connections
    than its share closes its connection (``Connection: close``, so the client does not reuse
    it) instead of keeping it alive."""
    connection = request.protocol
    if (
        response.keep_alive
        and isinstance(connection, CountedHandler)
        and not connection.keep_alive_after()
    ):
        response.force_close()
        response.headers[hdrs.CONNECTION] = "close"


class Refusal(asyncio.Protocol):
    """A connection over a cap: read its request line (bounded), answer, half-close, drain
    until the client closes (bounded), close."""

    def __init__(self, answer: bytes, done: Callable[[Refusal], None]) -> None:
        self._answer = answer
        self._done = done
        self._transport: asyncio.Transport | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._answered = False
        self._received = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport = cast(asyncio.Transport, transport)  # uvloop's are not its subclasses
        self._transport = transport
        loop = asyncio.get_running_loop()
        self._timer = loop.call_later(REFUSAL_READ_TIMEOUT, self._respond)

    def data_received(self, data: bytes) -> None:
        self._received += len(data)
        if self._received > REFUSAL_MAX_BYTES:
            self.close()
        elif not self._answered and b"\n" in data:  # the request line is in
            self._respond()

    def eof_received(self) -> bool:
        self._respond()  # the client sent all it will: answer (if not yet), then close
        self.close()
        return True

    def _respond(self) -> None:
        transport = self._transport
        if self._answered or transport is None or transport.is_closing():
            return
        self._answered = True
        if self._timer is not None:
            self._timer.cancel()
        transport.write(self._answer)
        if transport.can_write_eof():
            transport.write_eof()
        self._timer = asyncio.get_running_loop().call_later(REFUSAL_DRAIN_TIMEOUT, self.close)

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()

    def connection_lost(self, exc: BaseException | None) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._transport = None
        self._done(self)


class Waiting(Refusal):
    """A new connection over its client's share. It waits for a place for at most
    REFUSAL_READ_TIMEOUT seconds, its reading paused: what it sends stays in the kernel's
    buffer, costing no memory here. Given a place (:meth:`hand_over`), it is served like any
    other connection; else it is answered 503 at once and drained as a :class:`Refusal` is
    (its request line in by then, or never coming)."""

    def __init__(self, site: GuardedSite, network: str, done: Callable[[Refusal], None]) -> None:
        super().__init__(b"", done)
        self._site = site
        self.network = network
        self._kept = bytearray()  # only where a loop delivers data despite the pause

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)  # the deadline
        cast(asyncio.Transport, transport).pause_reading()

    def data_received(self, data: bytes) -> None:
        if self._answered:
            super().data_received(data)  # the drain after the answer
            return
        self._received += len(data)
        self._kept += data
        if self._received > REFUSAL_MAX_BYTES:
            self._refuse()

    def eof_received(self) -> bool:
        if not self._answered:
            self._refuse()  # a half-closed client is not served (aiohttp would close it too)
        return super().eof_received()

    def _respond(self) -> None:
        """The deadline: served if a place freed meanwhile (for the total cap), else refused."""
        if self._answered or not self.open:
            return
        if not self._site.admit_waiting(self):
            self._refuse()

    def _refuse(self) -> None:
        transport = self._transport
        if self._answered or transport is None or transport.is_closing():
            return
        connection_counts = self._site.connection_counts
        reason = connection_counts.reason(self.network) or connection_counts.share_reason(
            self.network
        )
        self._answer = refusal(reason)
        self._site.log_refusal(self.network, reason)
        self._kept = bytearray()
        transport.resume_reading()  # the drain reads what it sent, so the close sends no reset
        super()._respond()

    @property
    def open(self) -> bool:
        return self._transport is not None and not self._transport.is_closing()

    def hand_over(self, protocol: asyncio.Protocol) -> None:
        """Serve this connection with ``protocol``, which reads what it sent from the start."""
        transport = self._transport
        assert transport is not None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._transport = None
        transport.set_protocol(protocol)
        protocol.connection_made(transport)
        transport.resume_reading()  # first: the protocol may pause it again on what it gets
        if self._kept:
            protocol.data_received(bytes(self._kept))
            self._kept = bytearray()


class RefuseNow(asyncio.Protocol):
    """Refusals are at their cap: the answer is written and the connection closed at once."""

    def __init__(self, answer: bytes) -> None:
        self._answer = answer

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport = cast(asyncio.WriteTransport, transport)
        transport.write(self._answer)
        transport.close()


class _FirstProtocol(asyncio.Protocol):
    """The first protocol of every accepted connection: hands it to whoever handles it."""

    def __init__(self, place: Callable[[asyncio.Transport], None]) -> None:
        self._place = place

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport = cast(asyncio.Transport, transport)  # uvloop's are not its subclasses
        self._place(transport)


class GuardedSite(web.TCPSite):
    """A TCP site that serves a connection only within its client's share of new connections
    and the total cap; one over its share waits briefly for a place."""

    def __init__(
        self,
        runner: web.AppRunner,
        host: str,
        port: int,
        connection_counts: ConnectionCounts,
        door: FastDoor | None = None,
    ) -> None:
        super().__init__(runner, host, port)
        self.connection_counts = connection_counts
        self._door = door
        self._refusing: set[Refusal] = set()  # waiting ones included
        self._waiting: dict[str, dict[Waiting, None]] = {}  # by network, oldest first
        self._last_refusal = float("-inf")

    @property
    def refusing(self) -> int:
        """Connections over a cap still waiting, being answered or drained."""
        return len(self._refusing)

    @property
    def waiting(self) -> int:
        """Connections over their client's share waiting for a place."""
        return sum(len(queue) for queue in self._waiting.values())

    async def start(self) -> None:
        await web.BaseSite.start(self)
        # The kernel's accept queue as long as it allows (it caps SOMAXCONN at
        # net.core.somaxconn), as Go's and nginx's listeners ask: with aiohttp's 128, a burst of
        # connects overflows it while the loop is busy, and each SYN dropped costs its client a
        # 1 s retransmit; over-cap connections are answered by our counts, not by the kernel.
        # Accepted by our own loop (acceptor.py), not uvloop's libuv, which closes what it
        # accepts once descriptors run out where asyncio waits.
        sockets = listening_sockets(self._host, self._port, socket.SOMAXCONN)
        self._server = Acceptor(sockets, lambda: _FirstProtocol(self._place))  # type: ignore[assignment]

    async def stop(self) -> None:
        await super().stop()
        if self._door is not None:
            self._door.close()
        for refusing in list(self._refusing):
            refusing.close()

    def _handler(self, network: str) -> asyncio.Protocol:
        """A new connection's first protocol: the fast door's, where there is one."""
        if self._door is not None:
            return DoorConnection(self._door, self, network, NEW)
        return self.handler_for(network, NEW)

    def handler_for(self, network: str, standing: ConnectionState) -> CountedHandler:
        """aiohttp's handler for a connection (the fast door hands one over as it stands)."""
        server = self._runner.server
        assert server is not None
        handler = CountedHandler(server, self, network)
        handler._standing = standing
        return handler

    def _place(self, transport: asyncio.Transport) -> None:
        peer = transport.get_extra_info("peername")
        network = client_network(peer[0] if isinstance(peer, tuple) else None)
        reason = self.connection_counts.admit(network)
        protocol: asyncio.BaseProtocol
        if reason is None:
            protocol = self._handler(network)
        elif len(self._refusing) >= MAX_REFUSING:
            self.log_refusal(network, reason)
            protocol = RefuseNow(refusal(reason))
        elif self.connection_counts.over_share(network):
            protocol = Waiting(self, network, self._done)
            self._refusing.add(protocol)
            self._waiting.setdefault(network, {})[protocol] = None
        else:
            self.log_refusal(network, reason)
            protocol = Refusal(refusal(reason), self._done)
            self._refusing.add(protocol)
        transport.set_protocol(protocol)
        protocol.connection_made(transport)

    def _done(self, refused: Refusal) -> None:
        self._refusing.discard(refused)
        if isinstance(refused, Waiting):
            self._unqueue(refused)

    def _unqueue(self, waiter: Waiting) -> None:
        queue = self._waiting.get(waiter.network)
        if queue is not None:
            queue.pop(waiter, None)
            if not queue:
                del self._waiting[waiter.network]

    def admit_waiting(self, waiter: Waiting) -> bool:
        """Serve ``waiter`` if its client has a place now."""
        if not waiter.open or self.connection_counts.admit(waiter.network) is not None:
            return False
        self._refusing.discard(waiter)
        self._unqueue(waiter)
        waiter.hand_over(self._handler(waiter.network))
        return True

    def _promote(self, network: str) -> None:
        """A place may have freed for ``network``: its oldest waiting connections take them."""
        queue = self._waiting.get(network)
        while queue and not self.connection_counts.over_share(network):
            waiter = next(iter(queue))
            if not self.admit_waiting(waiter):
                if waiter.open:
                    return  # the total is full: it waits on (or is refused in time)
                self._unqueue(waiter)  # closing: its connection_lost follows

    def moved(self, network: str, old: ConnectionState, new: ConnectionState) -> None:
        self.connection_counts.move(network, old, new)
        if new.new < old.new:
            self._promote(network)

    def gone(self, network: str, standing: ConnectionState) -> None:
        self.connection_counts.release(network, standing)
        self._promote(network)

    def log_refusal(self, network: str, reason: str) -> None:
        """One line when refusing begins (not per connection): who holds what."""
        now = time.monotonic()
        if now - self._last_refusal > EPISODE_GAP:
            held = self.connection_counts.of(network)
            log.warning(
                "refusing connections with 503: %s (%s holds %d: %d new, %d idle or to be; "
                "%d open from %d clients)",
                reason,
                network,
                held.held,
                held.new,
                held.kept,
                self.connection_counts.total,
                self.connection_counts.clients,
            )
        self._last_refusal = now
