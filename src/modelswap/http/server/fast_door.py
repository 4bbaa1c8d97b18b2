"""The fast door: the raw HTTP/1.1 door of inference, on an asyncio protocol in front of
aiohttp. It is only a door: the request is relayed by the one relay
(:mod:`modelswap.http.relay.relay`) and kept by the one request scope
(:mod:`modelswap.http.tracking.scope`), as on aiohttp's door.

Every accepted connection (within its client's share) starts here. Its head is parsed by
httptools (llhttp, in C); a request that :meth:`FastDoor.admit` lets in — the common case: a
JSON ``POST`` to one of route_table's fast routes, one local model ready and free now — has its
model leased at once and goes up on a pooled backend connection
(:class:`~modelswap.http.relay.backend_pool.PooledTransport`). Any other is *handed over*: the
connection, with every byte the client sent from the start of that request, goes to aiohttp's
handler as if it had been there from the first byte. Nothing has reached the client or been
recorded by then. It exists for speed: ~160 µs of CPU per request, against ~400 µs on
aiohttp's door (docs/PERFORMANCE.md, "Against llama-swap").
"""

from __future__ import annotations

import asyncio
import collections
import email.utils
import logging
import time
import urllib.parse
from typing import Protocol, cast

import httptools
from aiohttp import web
from multidict import CIMultiDict, CIMultiDictProxy
from prometheus_client.core import CounterMetricFamily
from prometheus_client.metrics_core import Metric

from modelswap.errors import ModelswapError, RateLimitedError
from modelswap.http.reading import HEADER as REQUEST_ID_HEADER
from modelswap.http.reading import match_key, presented_key
from modelswap.http.relay.backend_pool import BackendPool, PooledTransport
from modelswap.http.relay.dispatch import HOPS_HEADER, preflight, prepare_body
from modelswap.http.relay.extract import parse_request
from modelswap.http.relay.relay import Upstream
from modelswap.http.route_table import FAST_PATHS, INFERENCE
from modelswap.http.server.connection_counts import (
    AT_WORK,
    AT_WORK_KEPT_ALIVE,
    IDLE,
    ConnectionCounts,
    ConnectionState,
)
from modelswap.http.server.door_answer import Admitted, Answer
from modelswap.http.tracking.drain import DRAIN, Drain
from modelswap.http.tracking.inflight import INFLIGHT, InflightRegistry
from modelswap.runtime import Runtime

log = logging.getLogger("modelswap")

SWEEP = 0.25  # seconds between looks at the deadlines of a head or a body awaited
MAX_FAST_BODY = 1 << 20  # larger bodies go to aiohttp's path (read as they arrive)
MAX_HEAD = 64 * 1024  # no end of head by then: aiohttp's parser judges it
PAUSE_AT = 4 * MAX_FAST_BODY  # bytes buffered while a request is served, before reading pauses
_REQUEST_ID = REQUEST_ID_HEADER.encode()
_FAST_URLS = frozenset(path.encode() for path in FAST_PATHS)
# A body framed otherwise than by Content-Length, or a protocol switch: aiohttp's to read.
_UNFRAMED = frozenset({b"transfer-encoding", b"expect", b"upgrade"})
# Seen in a request head, each sends the request to aiohttp's path (CORS, a peer's hops).
_HANDED_HEADERS = frozenset({b"origin", HOPS_HEADER.lower().encode()})


class Site(Protocol):
    """The guarded site, as the fast door's connections use it (http/server/connections.py)."""

    connection_counts: ConnectionCounts

    def moved(self, network: str, old: ConnectionState, new: ConnectionState) -> None: ...

    def gone(self, network: str, standing: ConnectionState) -> None: ...

    def handler_for(self, network: str, standing: ConnectionState) -> asyncio.Protocol: ...


class _Head:
    """One request head, as httptools reads it."""

    __slots__ = ("complete", "keep_alive", "length", "raw_headers", "url")

    def __init__(self) -> None:
        self.url = b""
        self.raw_headers: list[tuple[bytes, bytes]] = []
        self.complete = False
        self.keep_alive = True
        self.length: int | None = None

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self.raw_headers.append((name, value))

    def on_headers_complete(self) -> None:
        self.complete = True


class _Date:
    """The ``Date`` header, formatted once a second."""

    def __init__(self) -> None:
        self._second = -1
        self._value = b""

    def header(self) -> bytes:
        now = int(time.time())
        if now != self._second:
            self._second = now
            self._value = b"Date: " + email.utils.formatdate(now, usegmt=True).encode() + b"\r\n"
        return self._value


class _DoorCounter:
    """``modelswap_fast_lane_requests_total`` (named before the door was): requests served on
    the fast door, and requests handed to aiohttp's door by reason — :meth:`FastDoor.admit`'s,
    and ``other`` (not an inference ``POST``, counted per connection), ``head`` (a head the
    door cannot read), ``backend`` (refused the connection), ``slow_body``, ``eof``."""

    def __init__(self, counts: collections.Counter[str]) -> None:
        self._counts = counts

    def collect(self) -> list[Metric]:
        family = CounterMetricFamily(
            "modelswap_fast_lane_requests",
            "Requests served on the fast door (outcome=served) or handed to the full path "
            "(outcome=handed_over, with the reason)",
            labels=["outcome", "reason"],
        )
        for reason, count in sorted(self._counts.items()):
            if reason == "served":
                family.add_metric(["served", ""], count)
            else:
                family.add_metric(["handed_over", reason], count)
        return [family]


class FastDoor:
    """What every fast-door connection shares: the runtime, the app's drain and in-flight
    table, the backend pool. Made by the site; closed with it."""

    def __init__(self, app: web.Application, runtime: Runtime) -> None:
        self.runtime = runtime
        self.drain: Drain = app[DRAIN]
        self.registry: InflightRegistry = app[INFLIGHT]
        self.pool = BackendPool()
        self.date = _Date()
        self.connections: set[DoorConnection] = set()
        self._transports: dict[str, PooledTransport | None] = {}
        self._sweeper: asyncio.TimerHandle | None = None
        self.counts: collections.Counter[str] = collections.Counter()  # "served" or a reason
        runtime.add_collector(_DoorCounter(self.counts))

    def watch(self, connection: DoorConnection) -> None:
        """Keep ``connection``'s deadlines (swept every SWEEP seconds while any is open)."""
        self.connections.add(connection)
        if self._sweeper is None:
            self._sweeper = asyncio.get_running_loop().call_later(SWEEP, self._sweep)

    def _sweep(self) -> None:
        """One look at every connection's deadline: cheaper than a timer armed and cancelled
        per request, at the price of ending a wait up to SWEEP seconds late."""
        loop = asyncio.get_running_loop()
        now = loop.time()
        for connection in list(self.connections):
            connection.check(now)
        self._sweeper = loop.call_later(SWEEP, self._sweep) if self.connections else None

    def admit(self, head: _Head, raw_body: bytes) -> str | Admitted:
        """THE hand-over predicate: the request as the door serves it, or the first reason
        (the ``modelswap_fast_lane_requests_total`` label) aiohttp's path must serve it.
        Nothing is leased unless every condition holds. In order:

        ``off``: the door is off, or what the gateway does to every request is in force (a
        shutdown's drain, the global limit, policies, captures); ``head``: not one of the
        door's routes, or a header that needs the full path (CORS' ``Origin``, a peer's hop
        count); ``body``: not JSON, over the JSON cap, or unreadable; ``key``: missing, wrong
        or out of scope (the 401, 403 and throttle are aiohttp's); ``model``: not one local
        model the key may use without fallbacks (Runtime.direct_target), or its filters or
        the tool-choice preflight refuse; ``quota``: the key is over a limit of its quota
        (docs/sharing.md: aiohttp's path answers the 429); ``not_ready``: not ready, busy (or
        others wait for it: the fair queue orders them), with llama-swap's connection settings,
        or a backend address that is not plain ``http://``. A request handed over after the
        client gate let it in is given back to it (aiohttp's path admits it again).
        """
        runtime = self.runtime
        config = runtime.config
        if (
            not config.limits.fast_lane
            or self.drain.draining
            or config.scheduling.global_concurrency_limit
            or config.policies
            or config.observability.capture
        ):
            return "off"
        if head.url not in _FAST_URLS or any(
            name.lower() in _HANDED_HEADERS for name, _ in head.raw_headers
        ):
            return "head"
        headers = CIMultiDictProxy(
            CIMultiDict[str](
                (name.decode("latin-1"), value.decode("latin-1"))
                for name, value in head.raw_headers
            )
        )
        content_type = headers.get("Content-Type", "application/json")
        if not content_type.lower().startswith("application/json"):
            return "body"
        if len(raw_body) > config.max_request_body_bytes:
            return "body"  # aiohttp's 413
        key = None
        if config.api_keys:
            presented = presented_key(headers)
            key = match_key(config.api_keys, presented) if presented else None
            if key is None or INFERENCE not in key.scopes:
                return "key"
        try:
            body = parse_request(content_type, raw_body)
        except ModelswapError:
            return "body"  # aiohttp's path answers the error in its shape
        target = runtime.direct_target(body.model, key)
        if target is None:
            return "model"
        try:
            payload, parsed = prepare_body(target, body)
            preflight(target, body)
        except ModelswapError:
            return "model"
        model = runtime.find_model(target.model.id)
        if model is None or not model.ready or target.model.timeouts.pooled is not None:
            return "not_ready"
        try:
            let_in = runtime.gate.admit(key)
        except RateLimitedError:
            return "quota"  # aiohttp's path answers the 429 in the route's shape
        pending = runtime.admit(target.model.id, let_in.client)
        future = pending.future
        if not future.done() or future.cancelled() or future.exception() is not None:
            runtime.withdraw(pending)  # it would wait (or fail): aiohttp's path waits
            let_in.refund()  # and admits it again
            return "not_ready"
        lease = future.result()
        transport = self.transport(lease.config.proxy)
        if transport is None:
            lease.release()
            let_in.refund()
            return "not_ready"
        upstream = Upstream(
            target.label,
            transport,
            lease.config.upstream_api_key,
            target.model.timeouts,
            lease.release,
        )
        return Admitted(headers, key, body, payload, parsed, upstream, let_in)

    def transport(self, url: str) -> PooledTransport | None:
        """The pooled transport to a plain ``http://`` backend URL with no path; else None."""
        found = self._transports.get(url, ())
        if found == ():
            parsed = urllib.parse.urlsplit(url)
            plain = parsed.scheme == "http" and not parsed.path and parsed.hostname
            address = (parsed.hostname or "", parsed.port or 80)
            found = PooledTransport(self.pool, *address) if plain else None
            if len(self._transports) < 4096:
                self._transports[url] = found
        return cast("PooledTransport | None", found)

    def close(self) -> None:
        """The listener closes: idle connections close now, busy ones after their answer (the
        drain has waited for them already; what still runs is cut)."""
        self.pool.close()
        for connection in list(self.connections):
            connection.close_when_idle()


class DoorConnection(asyncio.Protocol):
    """One client connection on the fast door until it is handed over (or closed)."""

    def __init__(self, door: FastDoor, site: Site, network: str, standing: ConnectionState) -> None:
        self._door = door
        self._site = site
        self._network = network
        self._standing = standing
        self._transport: asyncio.Transport | None = None
        self._buffer = bytearray()
        self._task: asyncio.Task[None] | None = None
        self._deadline = float("inf")  # of the head (or the body) awaited, when no task runs
        self._awaiting = "head"
        self._answer: Answer | None = None
        self._head: _Head | None = None
        self._body_at = 0  # where the body of the request being read starts in the buffer
        self._paused = False
        self._write_ready: asyncio.Future[None] | None = None
        self._closing = False
        self._eof = False
        self._served = b""  # the request being served, as the client sent it
        self._peer: str | None = None  # the client's address

    # -- the connection

    @property
    def door(self) -> FastDoor:
        return self._door

    @property
    def backlogged(self) -> bool:
        """Whether the client's socket buffer is over its high-water mark."""
        return self._write_ready is not None

    def date_header(self) -> bytes:
        return self._door.date.header()

    @property
    def peer(self) -> str | None:
        """The client's address (read once per connection: get_extra_info costs ~1.5 µs)."""
        return self._peer if self._transport is not None else None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's are not its subclasses
        peer = transport.get_extra_info("peername")
        self._peer = peer[0] if isinstance(peer, tuple) else None
        self._door.watch(self)
        self._await("head")

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        if self._task is None:
            self._next()
        elif len(self._buffer) > PAUSE_AT and not self._paused and self._transport is not None:
            self._paused = True
            self._transport.pause_reading()

    def eof_received(self) -> bool:
        self._eof = True
        if self._task is None:
            if self._buffer:  # aiohttp answers what it can of a half-sent request
                handler = self._hand_over("eof")
                return bool(handler is not None and handler.eof_received())
            self._close()
            return True
        # While a request is served an EOF is the client leaving, as aiohttp reads it (a
        # half-close cannot be told from a close without writing): the transport closes and
        # connection_lost cancels the request, which ends the backend's work and frees the model.
        return False

    def connection_lost(self, exc: BaseException | None) -> None:
        self._transport = None
        self._door.connections.discard(self)
        if self._task is not None:
            self._task.cancel()
        waiter = self._write_ready
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
        self._site.gone(self._network, self._standing)

    def pause_writing(self) -> None:
        if self._write_ready is None:
            self._write_ready = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        waiter, self._write_ready = self._write_ready, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def close_when_idle(self) -> None:
        self._closing = True
        if self._task is None:
            self._close()

    def _close(self) -> None:
        if self._transport is not None:
            self._transport.close()

    def _await(self, what: str) -> None:
        """Wait at most headerTimeout for the next request's head (or its body)."""
        self._awaiting = what
        timeout = self._door.runtime.config.limits.header_timeout
        self._deadline = asyncio.get_running_loop().time() + timeout

    def check(self, now: float) -> None:
        """The sweep: no complete head in headerTimeout closes the connection, as aiohttp's
        handler would; a body slow to follow its head goes to aiohttp's handler, which waits
        for the rest. (A request's backend deadlines are the relay's.)"""
        if self._task is None and now >= self._deadline and self._transport is not None:
            self._deadline = float("inf")
            if self._awaiting == "body":
                self._hand_over("slow_body")
            else:
                self._close()

    def _move(self, new: ConnectionState) -> None:
        old, self._standing = self._standing, new
        self._site.moved(self._network, old, new)

    # -- reading a request

    def _next(self) -> None:
        """Start serving the request at the buffer's start, if it is all in."""
        if self._transport is None:
            return
        head = self._head
        if head is None:
            if not self._buffer.startswith(b"POST /"[: len(self._buffer)]):
                self._hand_over("other")  # not inference: aiohttp's from its first byte
                return
            end = self._buffer.find(b"\r\n\r\n")
            if end < 0:
                if len(self._buffer) > MAX_HEAD:
                    self._hand_over("head")
                return
            head = self._parse_head(end + 4)
            if head is None:
                self._hand_over("head")
                return
            self._head, self._body_at = head, end + 4
            self._await("body")
        assert head.length is not None
        whole = self._body_at + head.length
        if len(self._buffer) < whole:
            return
        self._deadline = float("inf")
        self._head = None
        refused = self._start(head, bytes(self._buffer[self._body_at : whole]))
        if refused is not None:
            self._hand_over(refused)
            return
        self._door.counts["served"] += 1
        self._served = bytes(self._buffer[:whole])  # for a hand-over before any answer
        del self._buffer[:whole]

    def _parse_head(self, size: int) -> _Head | None:
        """The head, if the door can read its request: a ``POST`` in HTTP/1.1 whose body is
        framed by one ``Content-Length`` of at most MAX_FAST_BODY (whether the door serves
        it is :meth:`FastDoor.admit`'s)."""
        head = _Head()
        parser = httptools.HttpRequestParser(head)
        try:
            parser.feed_data(bytes(self._buffer[:size]))
        except (httptools.HttpParserError, httptools.HttpParserUpgrade):
            return None  # aiohttp answers it (in the envelope), or upgrades it
        if (
            not head.complete
            or parser.get_method() != b"POST"
            or parser.get_http_version() != "1.1"
        ):
            return None
        head.keep_alive = parser.should_keep_alive()
        length = None
        for name, value in head.raw_headers:
            lowered = name.lower()
            if lowered in _UNFRAMED:
                return None
            if lowered == b"content-length":
                if length is not None or not value.isdigit():
                    return None
                length = int(value)
        if length is None or length > MAX_FAST_BODY:
            return None
        head.length = length
        return head

    def _start(self, head: _Head, raw_body: bytes) -> str | None:
        """Start the task that serves the request; or why aiohttp's path must serve it."""
        admitted = self._door.admit(head, raw_body)
        if isinstance(admitted, str):
            return admitted
        if self._standing.new or self._standing.kept:  # at work now (connections.at_work)
            self._move(AT_WORK)
        answer = Answer(self, head.url, head.raw_headers, head.keep_alive, admitted)
        self._answer = answer
        self._task = answer.task = asyncio.get_running_loop().create_task(answer.run())
        return None

    def _hand_over(self, reason: str) -> asyncio.Protocol | None:
        """aiohttp's handler serves this connection from now on, from the start of the
        request at the buffer's start (``reason``: counted for /metrics)."""
        self._door.counts[reason] += 1
        transport = self._transport
        self._deadline = float("inf")
        self._head = None
        if transport is None:
            return None
        self._transport = None
        self._door.connections.discard(self)
        handler = self._site.handler_for(self._network, self._standing)
        transport.set_protocol(handler)
        handler.connection_made(transport)
        if self._paused:
            self._paused = False
            transport.resume_reading()
        if self._buffer:
            data, self._buffer = bytes(self._buffer), bytearray()
            handler.data_received(data)
        return handler

    # -- after an answer

    def finished(self, keep_alive: bool, handed: str | None) -> None:
        """The task is over: hand over, close, or wait for the next request."""
        self._task = None
        self._answer = None
        if self._transport is None:
            return
        if handed:
            if self._standing is AT_WORK_KEPT_ALIVE:
                self._move(AT_WORK)
            self._buffer[:0] = self._served
            self._served = b""
            self._door.counts["served"] -= 1
            self._hand_over(handed)
            return
        self._served = b""
        if not keep_alive or self._closing or self._eof:
            self._close()
            return
        if self._standing is AT_WORK_KEPT_ALIVE or self._standing is AT_WORK:
            self._move(IDLE)
        if self._paused:
            self._paused = False
            self._transport.resume_reading()
        self._await("head")
        if self._buffer:
            self._next()

    def may_keep(self) -> bool:
        """As the answer's head goes out: whether the connection stays open after it (within
        the client's share of idle connections: connections.keep_within_share)."""
        if self._closing or self._door.drain.draining:
            return False
        if self._standing is not AT_WORK:
            return True
        if not self._site.connection_counts.may_keep(self._network):
            return False
        self._move(AT_WORK_KEPT_ALIVE)
        return True

    def write(self, data: bytes) -> None:
        if self._transport is not None:
            self._transport.write(data)

    async def drained(self) -> None:
        """Wait while the client's socket buffer is over its high-water mark."""
        waiter = self._write_ready
        if waiter is not None:
            await waiter
        if self._transport is None:
            raise ConnectionResetError("the client went away")

    def abort(self) -> None:
        if self._transport is not None:
            self._transport.abort()
