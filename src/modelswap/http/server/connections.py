"""Connection shares: a cap in all, a cap per client network, and a clean 503 for the rest.

aiohttp serves every connection it accepts until ``headerTimeout``. So that one client cannot
take the whole ``limits.maxConnections`` with slow headers, each client network (an IPv4
address, an IPv6 /64: :mod:`modelswap.http.middleware.clients`) may hold
``maxConnectionsPerClient`` of
them. A connection over either cap is answered 503 with ``Retry-After`` — after its request line
has been read, since closing a socket with unread bytes sends a reset that discards the answer —
then half-closed, drained briefly and closed. The refusing costs bounded descriptors and time:
at most MAX_REFUSING refusals at once, each for at most REFUSAL_READ_TIMEOUT +
REFUSAL_DRAIN_TIMEOUT seconds and REFUSAL_MAX_BYTES bytes; past that a connection gets the 503
written and is closed at once.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from typing import cast

from aiohttp import web

from modelswap.http.errors import GATEWAY_ERROR_HEADER, envelope
from modelswap.http.middleware.clients import client_network
from modelswap.http.server.bad_requests import EnvelopeRequestHandler

log = logging.getLogger("modelswap")

REFUSAL_READ_TIMEOUT = 5.0  # seconds to wait for the request line of a refused connection
REFUSAL_DRAIN_TIMEOUT = 2.0  # seconds to read what follows the answer, until the client closes
REFUSAL_MAX_BYTES = 65536  # read and discarded per refused connection, at most
MAX_REFUSING = 2048  # refusals in progress at once
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


class ConnectionLedger:
    """Connections held, in all and per client network. Every :meth:`admit` that returns None
    is paired with one :meth:`release` (when that connection closes)."""

    def __init__(self, max_total: int, max_per_client: int) -> None:
        self.max_total = max_total
        self.max_per_client = max_per_client
        self.total = 0
        self._held: dict[str, int] = {}

    def admit(self, network: str) -> str | None:
        """Count a new connection from ``network`` in; or why it cannot be (then uncounted)."""
        held = self._held.get(network, 0)
        if held >= self.max_per_client:
            return (
                f"Too many connections from {network} to modelswap "
                f"(limits.maxConnectionsPerClient: {self.max_per_client})."
            )
        if self.total >= self.max_total:
            return f"Too many connections to modelswap (limits.maxConnections: {self.max_total})."
        self._held[network] = held + 1
        self.total += 1
        return None

    def release(self, network: str) -> None:
        held = self._held.pop(network, 0) - 1
        if held > 0:
            self._held[network] = held
        self.total -= 1

    def held_by(self, network: str) -> int:
        return self._held.get(network, 0)

    @property
    def clients(self) -> int:
        """Client networks holding at least one connection."""
        return len(self._held)


class CountedHandler(EnvelopeRequestHandler):
    """aiohttp's connection handler that gives its place in the ledger back when it closes."""

    def __init__(self, server: web.Server, release: Callable[[], None]) -> None:
        super().__init__(server, loop=asyncio.get_running_loop(), **server._kwargs)
        self._release: Callable[[], None] | None = release

    def connection_lost(self, exc: BaseException | None) -> None:
        release, self._release = self._release, None
        if release is not None:
            release()
        super().connection_lost(exc)


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


class RefuseNow(asyncio.Protocol):
    """Refusals are at their cap: the answer is written and the connection closed at once."""

    def __init__(self, answer: bytes) -> None:
        self._answer = answer

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport = cast(asyncio.WriteTransport, transport)
        transport.write(self._answer)
        transport.close()


class _Doorman(asyncio.Protocol):
    """The first protocol of every accepted connection: hands it to whoever handles it."""

    def __init__(self, place: Callable[[asyncio.Transport], None]) -> None:
        self._place = place

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport = cast(asyncio.Transport, transport)  # uvloop's are not its subclasses
        self._place(transport)


class GuardedSite(web.TCPSite):
    """A TCP site that serves a connection only within its client's share and the total cap."""

    def __init__(
        self, runner: web.AppRunner, host: str, port: int, ledger: ConnectionLedger
    ) -> None:
        super().__init__(runner, host, port)
        self.ledger = ledger
        self._refusing: set[Refusal] = set()
        self._last_refusal = float("-inf")

    @property
    def refusing(self) -> int:
        """Refused connections still being answered or drained."""
        return len(self._refusing)

    async def start(self) -> None:
        await web.BaseSite.start(self)
        self._server = await asyncio.get_running_loop().create_server(
            lambda: _Doorman(self._place), self._host, self._port, backlog=self._backlog
        )

    async def stop(self) -> None:
        await super().stop()
        for refusing in list(self._refusing):
            refusing.close()

    def _place(self, transport: asyncio.Transport) -> None:
        server = self._runner.server
        assert server is not None
        peer = transport.get_extra_info("peername")
        network = client_network(peer[0] if isinstance(peer, tuple) else None)
        reason = self.ledger.admit(network)
        protocol: asyncio.BaseProtocol
        if reason is None:
            protocol = CountedHandler(server, lambda: self.ledger.release(network))
        else:
            self._log_refusal(network, reason)
            if len(self._refusing) < MAX_REFUSING:
                protocol = Refusal(refusal(reason), self._refusing.discard)
                self._refusing.add(protocol)
            else:
                protocol = RefuseNow(refusal(reason))
        transport.set_protocol(protocol)
        protocol.connection_made(transport)

    def _log_refusal(self, network: str, reason: str) -> None:
        """One line when refusing begins (not per connection): who holds what."""
        now = time.monotonic()
        if now - self._last_refusal > EPISODE_GAP:
            log.warning(
                "refusing connections with 503: %s (%s holds %d; %d open from %d clients)",
                reason,
                network,
                self.ledger.held_by(network),
                self.ledger.total,
                self.ledger.clients,
            )
        self._last_refusal = now
