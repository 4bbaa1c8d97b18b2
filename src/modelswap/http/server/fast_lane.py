"""The fast lane: the hot path of inference on a raw asyncio protocol, in front of aiohttp.

Every accepted connection (within its client's share) starts here. A request whose every step
is the common one — a JSON ``POST`` to an OpenAI inference route, one local model that is ready
and free now, no filters, no policy, no CORS, no capture, a valid key or none configured — is
served here: its head parsed by httptools (llhttp, in C), its model leased at once, its body
written to a pooled backend connection (:mod:`modelswap.http.relay.backend_pool`) and the
answer relayed as it arrives, with the same usage read, error masking, request id, in-flight
entry, drain count and activity record as aiohttp's path. Anything else — a model that must
start or that is busy, a key that is wrong, a body to filter, a backend that refused the
connection before answering — is *handed over*: the connection, with every byte the client
sent from the start of that request, goes to aiohttp's handler as if it had been there from the
first byte, and aiohttp's path (waiting comments, restarts, fallbacks, peers, every error
shape) does what it always did. Nothing has reached the client or been recorded by then.

It exists for speed: a request on aiohttp's path costs ~400 µs of CPU here, on the lane ~160 µs
(wrk c=32, same run; docs/PERFORMANCE.md, "Against llama-swap").
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

from modelswap.backends.diagnose import tool_choice_hint
from modelswap.config.resolved import ApiKey
from modelswap.errors import ModelswapError, UpstreamError, UpstreamTimeoutError
from modelswap.http.app_keys import AUTHORISED, CLIENT, Client
from modelswap.http.error_responses import (
    HINT_HEADER,
    error_code_of,
    error_response,
    response_for,
)
from modelswap.http.middleware.auth import match_key
from modelswap.http.middleware.draining import DRAIN, Drain
from modelswap.http.middleware.inflight_registry import (
    CANCELLED_CODE,
    INFLIGHT,
    RESPONSE,
    InflightRegistry,
)
from modelswap.http.middleware.observing import CLIENT_CLOSED, record_request
from modelswap.http.reading import HEADER as REQUEST_ID_HEADER
from modelswap.http.reading import presented_key, request_id
from modelswap.http.relay.backend_pool import (
    BackendBrokeError,
    BackendClosedError,
    BackendConnection,
    BackendPool,
    ResponseHead,
)
from modelswap.http.relay.dispatch import HOPS_HEADER, preflight, prepare_body
from modelswap.http.relay.extract import RequestBody, parse_request, salted
from modelswap.http.relay.proxy import (
    MAX_ERROR_BODY,
    STALE_RETRIES,
    TOOL_CHOICE_CODE,
    broke_message,
    final_error_event,
    redact_error_body,
    relayed_chunk,
    stalled_message,
)
from modelswap.http.request_obs import OBS, RequestObs
from modelswap.http.route_table import INFERENCE, USAGE_PATHS
from modelswap.http.server.ledger import IDLE, PROMISED, WORK, ConnectionLedger, Standing
from modelswap.jsonsafe import loads
from modelswap.observe.usage import UsageTracker, request_usage_injection
from modelswap.routing.local import Lease
from modelswap.runtime import LocalTarget, Runtime

log = logging.getLogger("modelswap")

# The routes served here: JSON bodies naming their model, relayed to the same path.
FAST_PATHS = frozenset(
    {
        "/v1/chat/completions",
        "/v1/completions",
        "/v1/embeddings",
        "/v1/responses",
        "/v1/rerank",
        "/v1/reranking",
        "/rerank",
        "/reranking",
        "/completion",
        "/infill",
    }
)
SWEEP = 0.25  # seconds between looks at the deadlines (header, body, backend timeouts)
MAX_FAST_BODY = 1 << 20  # larger bodies go to aiohttp's path (read as they arrive)
MAX_HEAD = 64 * 1024  # no end of head by then: aiohttp's parser judges it
PAUSE_AT = 4 * MAX_FAST_BODY  # bytes buffered while a request is served, before reading pauses
# Headers a backend's request never carries from the client: hop-by-hop ones, the framing
# (written anew), the client's credentials (a backend that needs a key gets its own) and the
# request id (one per request, chosen here).
_NOT_SENT_UP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"proxy-connection",
        b"te",
        b"trailer",
        b"trailers",
        b"transfer-encoding",
        b"upgrade",
        b"host",
        b"content-length",
        b"authorization",
        b"x-api-key",
        b"api-key",
        b"x-request-id",
    }
)
# Down: the framing, hop-by-hop headers and the request id are written anew, and ``Date`` is
# the gateway's (as aiohttp's path sends one).
_NOT_SENT_DOWN = (_NOT_SENT_UP - {b"authorization", b"x-api-key", b"api-key"}) | {b"date"}
_REQUEST_ID = REQUEST_ID_HEADER.encode()
# Seen in a request head, each sends the request to aiohttp's path.
_HANDED_HEADERS = frozenset(
    {"transfer-encoding", "expect", "upgrade", "origin", HOPS_HEADER.lower()}
)


class Site(Protocol):
    """The guarded site, as the lane's connections use it (http/server/connections.py)."""

    ledger: ConnectionLedger

    def moved(self, network: str, old: Standing, new: Standing) -> None: ...

    def gone(self, network: str, standing: Standing) -> None: ...

    def handler_for(self, network: str, standing: Standing) -> asyncio.Protocol: ...


class HandOver(Exception):
    """Serve this request on aiohttp's path instead (nothing reached the client yet)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


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


class LaneRequest(dict[object, object]):
    """What the in-flight listing, the request id and the activity record read of a request
    (aiohttp's ``web.Request`` offers the same): its path, method, headers and peer, and keys
    set on it as on aiohttp's."""

    __slots__ = ("headers", "method", "path", "remote")

    def __init__(self, path: str, headers: CIMultiDictProxy[str], remote: str | None) -> None:
        super().__init__()
        self.path = path
        self.method = "POST"
        self.headers = headers
        self.remote = remote


class _Sent:
    """The response whose head went out, as the in-flight listing reads it (its headers
    decoded only when read)."""

    __slots__ = ("_raw",)

    def __init__(self, raw: list[tuple[bytes, bytes]]) -> None:
        self._raw = raw

    @property
    def headers(self) -> CIMultiDict[str]:
        return CIMultiDict[str](
            (name.decode("latin-1"), value.decode("latin-1")) for name, value in self._raw
        )


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


class _LaneCollector:
    """``modelswap_fast_lane_requests_total``: requests served on the lane, and requests handed
    to aiohttp's path by reason (``head``: not a JSON POST to a lane route, or a header that
    needs the full path; ``other``: not an inference request at all, counted per connection
    handed; ``off``: the lane is off, or the gateway drains, limits globally, runs policies
    or captures; ``key``; ``body``; ``model``: a selector, an alias with fallbacks, filters,
    the tool-choice preflight; ``not_ready``: starting, busy, asleep, or a backend address or
    connection setting the lane does not handle; ``backend``: refused the connection;
    ``slow_body``; ``eof``)."""

    def __init__(self, counts: collections.Counter[str]) -> None:
        self._counts = counts

    def collect(self) -> list[Metric]:
        family = CounterMetricFamily(
            "modelswap_fast_lane_requests",
            "Requests served on the fast lane (outcome=served) or handed to the full path "
            "(outcome=handed_over, with the reason)",
            labels=["outcome", "reason"],
        )
        for reason, count in sorted(self._counts.items()):
            if reason == "served":
                family.add_metric(["served", ""], count)
            else:
                family.add_metric(["handed_over", reason], count)
        return [family]


class FastLane:
    """What every fast-lane connection shares: the runtime, the app's drain and in-flight
    table, the backend pool. Made by the site; closed with it."""

    def __init__(self, app: web.Application, runtime: Runtime) -> None:
        self.runtime = runtime
        self.drain: Drain = app[DRAIN]
        self.registry: InflightRegistry = app[INFLIGHT]
        self.pool = BackendPool()
        self.date = _Date()
        self.connections: set[LaneConnection] = set()
        self._addresses: dict[str, tuple[str, int] | None] = {}
        self._sweeper: asyncio.TimerHandle | None = None
        self.counts: collections.Counter[str] = collections.Counter()  # "served" or a reason
        runtime.add_collector(_LaneCollector(self.counts))

    def watch(self, connection: LaneConnection) -> None:
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

    def open_now(self) -> bool:
        """Whether a request may take the lane at all now: what the gateway is configured to
        do to every request (a shutdown's drain, a global limit, policies, captures) is done on
        aiohttp's path."""
        config = self.runtime.config
        return (
            config.limits.fast_lane
            and not self.drain.draining
            and not config.scheduling.global_concurrency_limit
            and not config.policies
            and not config.observability.capture
        )

    def address(self, url: str) -> tuple[str, int] | None:
        """(host, port) of a plain ``http://`` backend URL with no path; else None."""
        found = self._addresses.get(url, ())
        if found == ():
            parsed = urllib.parse.urlsplit(url)
            plain = parsed.scheme == "http" and not parsed.path and parsed.hostname
            found = (parsed.hostname or "", parsed.port or 80) if plain else None
            if len(self._addresses) < 4096:
                self._addresses[url] = found
        return cast("tuple[str, int] | None", found)

    def close(self) -> None:
        """The listener closes: idle connections close now, busy ones after their answer (the
        drain has waited for them already; what still runs is cut)."""
        self.pool.close()
        for connection in list(self.connections):
            connection.close_when_idle()


class LaneConnection(asyncio.Protocol):
    """One client connection on the fast lane until it is handed over (or closed)."""

    def __init__(self, lane: FastLane, site: Site, network: str, standing: Standing) -> None:
        self._lane = lane
        self._site = site
        self._network = network
        self._standing = standing
        self._transport: asyncio.Transport | None = None
        self._buffer = bytearray()
        self._task: asyncio.Task[None] | None = None
        self._deadline = float("inf")  # of the head (or the body) awaited, when no task runs
        self._awaiting = "head"
        self._exchange: _Exchange | None = None
        self._head: _Head | None = None
        self._body_at = 0  # where the body of the request being read starts in the buffer
        self._paused = False
        self._write_ready: asyncio.Future[None] | None = None
        self._closing = False
        self._eof = False
        self._served = b""  # the request being served, as the client sent it

    # -- the connection

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's are not its subclasses
        self._lane.watch(self)
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
        self._lane.connections.discard(self)
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
        timeout = self._lane.runtime.config.limits.header_timeout
        self._deadline = asyncio.get_running_loop().time() + timeout

    def check(self, now: float) -> None:
        """The sweep: no complete head in headerTimeout closes the connection, as aiohttp's
        handler would; a body slow to follow its head goes to aiohttp's handler, which waits
        for the rest. A request being served checks its backend's timeouts."""
        if self._task is not None:
            if self._exchange is not None:
                self._exchange.check(now)
        elif now >= self._deadline and self._transport is not None:
            self._deadline = float("inf")
            if self._awaiting == "body":
                self._hand_over("slow_body")
            else:
                self._close()

    def _move(self, new: Standing) -> None:
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
            if head is None or not self._lane.open_now():
                self._hand_over("head" if head is None else "off")
                return
            self._head, self._body_at = head, end + 4
            self._await("body")
        assert head.length is not None
        whole = self._body_at + head.length
        if len(self._buffer) < whole:
            return
        self._deadline = float("inf")
        self._head = None
        try:
            refused = self._start(head, bytes(self._buffer[self._body_at : whole]))
        except HandOver as exc:
            refused = exc.reason
        if refused is not None:
            self._hand_over(refused)
            return
        self._lane.counts["served"] += 1
        self._served = bytes(self._buffer[:whole])  # for a hand-over before any answer
        del self._buffer[:whole]

    def _parse_head(self, size: int) -> _Head | None:
        """The head if this lane may serve its request (judged on the head alone)."""
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
            or head.url not in _FAST_URLS
        ):
            return None
        head.keep_alive = parser.should_keep_alive()
        length = None
        for name, value in head.raw_headers:
            lowered = name.lower().decode("latin-1")
            if lowered in _HANDED_HEADERS:
                return None
            if lowered == "content-length":
                if length is not None or not value.isdigit():
                    return None
                length = int(value)
        if length is None or length > MAX_FAST_BODY:
            return None
        head.length = length
        return head

    def _start(self, head: _Head, raw_body: bytes) -> str | None:
        """Lease the model and start the task that serves the request; or why aiohttp's path
        must serve it (returned, or raised as HandOver)."""
        lane = self._lane
        runtime = lane.runtime
        headers = CIMultiDict[str](
            (name.decode("latin-1"), value.decode("latin-1")) for name, value in head.raw_headers
        )
        content_type = headers.get("Content-Type", "application/json")
        if not content_type.lower().startswith("application/json"):
            return "body"
        if len(raw_body) > runtime.config.max_request_body_bytes:
            return "body"  # aiohttp's 413
        path = head.url.decode("latin-1")
        peer = self._transport.get_extra_info("peername") if self._transport else None
        request = LaneRequest(
            path, CIMultiDictProxy(headers), peer[0] if isinstance(peer, tuple) else None
        )
        key = self._key(request)
        try:
            body = parse_request(content_type, raw_body)
        except ModelswapError:
            return "body"  # aiohttp's path answers the error in its shape
        # Runtime.target's first steps, without its side effects: a selector's choice and a
        # peer pool's turn are taken on aiohttp's path only, once.
        config = runtime.config
        if body.model in config.selectors:
            return "model"
        local = config.resolve(body.model)
        if local is None or local.fallback or (key is not None and not key.allows(local)):
            return "model"
        target = LocalTarget(local, body.model)
        try:
            payload, data = prepare_body(target, body)
            preflight(target, body)
        except ModelswapError:
            return "model"
        model = runtime.find_model(target.model.id)
        if model is None or not model.ready or target.model.timeouts.pooled is not None:
            return "not_ready"
        pending = runtime.admit(target.model.id)
        future = pending.future
        if not future.done() or future.cancelled() or future.exception() is not None:
            runtime.withdraw(pending)  # it would wait (or fail): aiohttp's path waits
            return "not_ready"
        lease = future.result()
        address = lane.address(lease.config.proxy)
        if address is None:
            lease.release()
            return "not_ready"
        request[CLIENT] = Client(key)
        request[AUTHORISED] = True
        if self._standing.new or self._standing.kept:  # at work now (connections.at_work)
            self._move(WORK)
        exchange = _Exchange(self, request, target, body, payload, data, lease, address)
        exchange.url, exchange.raw_headers = head.url, head.raw_headers
        exchange.keep_alive = head.keep_alive
        self._exchange = exchange
        self._task = exchange.task = asyncio.get_running_loop().create_task(exchange.run())
        return None

    def _key(self, request: LaneRequest) -> ApiKey | None:
        """The client's key (None when no keys are configured); HandOver for a missing,
        wrong or out-of-scope one: aiohttp's path answers it (401, 403, the throttle)."""
        keys = self._lane.runtime.config.api_keys
        if not keys:
            return None
        presented = presented_key(cast(web.Request, request))
        key = match_key(keys, presented) if presented else None
        if key is None or INFERENCE not in key.scopes:
            raise HandOver("key")
        return key

    def _hand_over(self, reason: str) -> asyncio.Protocol | None:
        """aiohttp's handler serves this connection from now on, from the start of the
        request at the buffer's start (``reason``: counted for /metrics)."""
        self._lane.counts[reason] += 1
        transport = self._transport
        self._deadline = float("inf")
        self._head = None
        if transport is None:
            return None
        self._transport = None
        self._lane.connections.discard(self)
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
        self._exchange = None
        if self._transport is None:
            return
        if handed:
            if self._standing is PROMISED:
                self._move(WORK)
            self._buffer[:0] = self._served
            self._served = b""
            self._lane.counts["served"] -= 1
            self._hand_over(handed)
            return
        self._served = b""
        if not keep_alive or self._closing or self._eof:
            self._close()
            return
        if self._standing is PROMISED or self._standing is WORK:
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
        if self._closing or self._lane.drain.draining:
            return False
        if self._standing is not WORK:
            return True
        if not self._site.ledger.may_keep(self._network):
            return False
        self._move(PROMISED)
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


_FAST_URLS = frozenset(path.encode() for path in FAST_PATHS)
_NEVER = float("inf")


class _Exchange:
    """One request served on the lane: backend, relay, record."""

    def __init__(
        self,
        connection: LaneConnection,
        request: LaneRequest,
        target: LocalTarget,
        body: RequestBody,
        payload: bytes,
        data: object,
        lease: Lease,
        address: tuple[str, int],
    ) -> None:
        self.connection = connection
        self.request = request
        self.target = target
        self.body = body
        self.payload = payload
        self.data = data
        self.lease = lease
        self.address = address
        self.keep_alive = True
        self.head_sent = False
        self.chunked = False
        self.sse = False
        self.code: str | None = None  # of an error the gateway answered itself
        self.upstream: BackendConnection | None = None
        self.task: asyncio.Task[None] | None = None
        self._out: list[bytes] = []  # what goes to the client at the next flush
        self.url = b""  # the path, as the client sent it
        self.raw_headers: list[tuple[bytes, bytes]] = []  # the client's, as they came
        # The backend's timeouts, checked by the lane's sweep: the phase waited on and its end
        # (connect, first byte, the next chunk), and the whole answer's.
        timeouts = target.model.timeouts
        now = asyncio.get_running_loop().time()
        self.phase = "connect"
        self.first_byte_by = now + timeouts.first_byte if timeouts.first_byte else _NEVER
        self.connect_by = now + timeouts.connect if timeouts.connect else _NEVER
        self.next_chunk_by = _NEVER
        self.total_by = now + timeouts.total if timeouts.total else _NEVER
        self.expired: str | None = None

    def check(self, now: float) -> None:
        """The lane's sweep: a timeout that passed cancels the task, saying which."""
        if self.expired is not None or self.task is None:
            return
        if now >= self.total_by:
            self.expired = "total"
        elif self.phase == "connect" and now >= min(self.connect_by, self.first_byte_by):
            self.expired = "connect" if self.connect_by <= self.first_byte_by else "first byte"
        elif self.phase == "head" and now >= self.first_byte_by:
            self.expired = "first byte"
        elif self.phase == "body" and now >= self.next_chunk_by:
            self.expired = "idle"
        if self.expired is not None:
            self.task.cancel()

    async def run(self) -> None:
        connection = self.connection
        lane = connection._lane
        runtime = lane.runtime
        request = self.request
        obs = RequestObs() if runtime.observing else None
        inflight = None
        if obs is not None:
            request[OBS] = obs
            obs.requested = self.body.model
            inflight = lane.registry.add(cast(web.Request, request), self.task)
        lane.drain.begin()
        status, code, handed = 500, None, None
        try:
            status = await self._serve(obs)
        except HandOver as exc:
            handed = exc.reason
        except asyncio.CancelledError:
            if self.expired is not None and self.task is not None:
                self.task.uncancel()  # the lane's own deadline, not a disconnect
                status = self._timed_out(obs)
            elif inflight is not None and inflight.cancelled and not self.head_sent:
                status, code = 502, CANCELLED_CODE
                self._error(
                    f"Request {inflight.id} was cancelled (POST /api/inflight/{inflight.id}"
                    "/cancel) before its answer began.",
                    502,
                    CANCELLED_CODE,
                )
            elif inflight is not None and inflight.cancelled:
                status, code = CLIENT_CLOSED, CANCELLED_CODE
                connection.abort()
            else:
                done = obs is not None and obs.done_sent and obs.status
                status = obs.status if done and obs is not None and obs.status else CLIENT_CLOSED
                self.keep_alive = False
        except Exception:
            log.exception("fast lane: request to %s failed", self.target.label)
            self.keep_alive = False
            if not self.head_sent:
                self._error("modelswap failed to handle the request (see its log).", 500, None)
            else:
                connection.abort()
        finally:
            upstream, self.upstream = self.upstream, None
            if upstream is not None:
                upstream.close()  # unread answer: the backend stops generating
            self.lease.release()
            if inflight is not None:
                lane.registry.remove(inflight)
            lane.drain.end()
            if obs is not None and handed is None:
                record_request(
                    runtime,
                    cast(web.Request, request),
                    obs,
                    status,
                    code or self.code or obs.error_code,
                    None,  # a capture's (captures are served on aiohttp's path)
                )
            connection.finished(self.keep_alive, handed)

    async def _serve(self, obs: RequestObs | None) -> int:
        target = self.target
        payload = self.payload
        if obs is not None:
            obs.model, obs.bytes_in = target.label, len(payload)
            obs.salted = salted(self.body.data)
            injected = None
            if self.data is not None and self.request.path in USAGE_PATHS:
                injected = request_usage_injection(payload, self.body.data)
            if injected is not None:
                payload = injected
            obs.usage = UsageTracker(
                streamed=self.body.stream, strip_usage_chunk=injected is not None
            )
        try:
            upstream, head = await self._send(payload)
        except ModelswapError as exc:  # nothing went out yet: answered as aiohttp's path does
            response = response_for(exc, self.connection._lane.runtime.redactor)
            self._write_response(response)
            return response.status
        if obs is not None:
            obs.first_byte()
            obs.status = head.status
        if head.status >= 400:
            await self._relay_error(upstream, head)
        else:
            await self._relay(upstream, head, obs)
        return head.status

    async def _send(self, payload: bytes) -> tuple[BackendConnection, ResponseHead]:
        """The request written to a pooled connection, and the answer's head."""
        lane = self.connection._lane
        host, port = self.address
        head = self._upstream_head(len(payload), host, port)
        label = self.target.label
        closed: BackendClosedError | None = None
        for _ in range(STALE_RETRIES + 1):
            self.phase = "connect"
            try:
                upstream = await lane.pool.connect(host, port)
            except OSError as exc:
                if closed is not None:
                    # Not a stale connection: the backend itself is gone (it crashed on this
                    # request). Said as the first failure said; never a restart and replay.
                    raise UpstreamError(label, str(closed)) from None
                # Refused at once: aiohttp's path notices a dead backend and starts it again.
                raise HandOver("backend") from exc
            self.upstream = upstream
            self.phase = "head"
            upstream.send(head + payload)
            try:
                return upstream, await upstream.head()
            except BackendClosedError as exc:
                # Closed before a byte of answer came: a pooled connection the backend had
                # given up on; asked again on another (a fresh one is never stale).
                self.upstream = None
                upstream.close()
                closed = closed or exc
            except BackendBrokeError as exc:
                raise UpstreamError(label, str(exc)) from None
        assert closed is not None
        raise UpstreamError(label, str(closed))

    def _upstream_head(self, length: int, host: str, port: int) -> bytes:
        """The request's head as the backend gets it: the client's headers as they came, but
        hop-by-hop ones, its credentials and the framing; the backend's own key, the request
        id, the new length."""
        request = self.request
        named = f"[{host}]" if ":" in host else host  # an IPv6 address, bracketed
        lines = [b"POST %b HTTP/1.1\r\nHost: %b:%d\r\n" % (self.url, named.encode(), port)]
        lines.extend(
            b"%b: %b\r\n" % (name, value)
            for name, value in self.raw_headers
            if name.lower() not in _NOT_SENT_UP
        )
        key = self.lease.config.upstream_api_key
        if key:
            lines.append(f"Authorization: Bearer {key}\r\n".encode("latin-1"))
        lines.append(f"{REQUEST_ID_HEADER}: {request_id(cast(web.Request, request))}\r\n".encode())
        lines.append(b"Content-Length: %d\r\n\r\n" % length)
        return b"".join(lines)

    def _response_head(
        self, status: int, reason: bytes, headers: list[tuple[bytes, bytes]], length: int | None
    ) -> bytes:
        """The answer's head, as aiohttp's path sends it (``headers`` as they go, the request
        id, the framing, the keep-alive decision added); chunked without a length."""
        connection = self.connection
        if not connection.may_keep():
            self.keep_alive = False
        headers.append((_REQUEST_ID, request_id(cast(web.Request, self.request)).encode()))
        if length is not None:
            headers.append((b"Content-Length", b"%d" % length))
        else:
            headers.append((b"Transfer-Encoding", b"chunked"))
            self.chunked = True
        if not self.keep_alive:
            headers.append((b"Connection", b"close"))
        self.request[RESPONSE] = _Sent(headers)
        self.head_sent = True
        lines = [b"HTTP/1.1 %d %b\r\n" % (status, reason)]
        lines.extend(b"%b: %b\r\n" % pair for pair in headers)
        lines.append(connection._lane.date.header())
        lines.append(b"\r\n")
        return b"".join(lines)

    @staticmethod
    def _passed_down(head: ResponseHead) -> list[tuple[bytes, bytes]]:
        """The backend's headers the client gets: not hop-by-hop ones, not the framing (written
        anew), not the request id (ours), and no CORS: the gateway owns CORS."""
        return [
            (name, value)
            for name, value in head.headers
            if (lowered := name.lower()) not in _NOT_SENT_DOWN
            and not lowered.startswith(b"access-control-")
        ]

    def _write(self, data: bytes) -> None:
        """Body bytes for the client (framed when chunked), written at the next flush."""
        if not data:
            return
        if self.chunked:
            self._out.append(b"%x\r\n%b\r\n" % (len(data), data))
        else:
            self._out.append(data)

    def _end(self) -> None:
        if self.chunked:
            self._out.append(b"0\r\n\r\n")

    def _flush(self) -> None:
        out = self._out
        if out:
            self.connection.write(out[0] if len(out) == 1 else b"".join(out))
            out.clear()

    async def _relay(
        self, upstream: BackendConnection, head: ResponseHead, obs: RequestObs | None
    ) -> None:
        headers = self._passed_down(head)
        self.sse = sse = head.event_stream
        if sse:
            headers.append((b"X-Accel-Buffering", b"no"))
            if not any(name.lower() == b"cache-control" for name, _ in headers):
                headers.append((b"Cache-Control", b"no-cache"))
        strips = obs is not None and obs.usage is not None and obs.usage.strips
        length = head.content_length if not strips else None
        if head.status in (204, 304):
            length = 0  # no body may follow
        connection = self.connection
        # The head waits for the body's first bytes when they are in already (one write, one
        # system call, for a whole small answer); else it goes at once (a stream's first token
        # may be seconds away).
        self._out.append(self._response_head(head.status, head.reason, headers, length))
        redactor = connection._lane.runtime.redactor
        loop = asyncio.get_running_loop()
        idle = self.target.model.timeouts.idle_between_chunks
        self.phase = "body"
        failure: tuple[int, str] | None = None
        while True:
            self.next_chunk_by = loop.time() + idle
            if not upstream.has_data:
                self._flush()
            try:
                chunk = await upstream.read()
            except BackendBrokeError as exc:
                failure = (502, broke_message(self.target.label, exc))
                break
            if not chunk:
                if obs is not None and (rest := obs.finish()):
                    self._write(rest)
                break
            self._write(relayed_chunk(chunk, obs, redactor))
            if connection._write_ready is not None:
                self._flush()
                self.next_chunk_by = _NEVER  # a slow client is not a stalled backend
                await connection.drained()
        if failure is None:
            self._end()
            self._flush()
            self.upstream = None
            upstream.finish(reusable=True)
            return
        log.warning("%s", failure[1])
        if not sse:
            self.keep_alive = False
            connection.abort()  # a cut body: the client must notice
            return
        self._error_event(*failure, obs)

    def _error_event(self, status: int, message: str, obs: RequestObs | None) -> None:
        """End a stream with the gateway's error event (as aiohttp's path ends one)."""
        redactor = self.connection._lane.runtime.redactor
        self._write(final_error_event(status, message, redactor, self.request.path, obs=obs))
        self._end()
        self._flush()

    async def _relay_error(self, upstream: BackendConnection, head: ResponseHead) -> None:
        """A backend's error keeps its status and meaning, secrets masked, a known
        misconfiguration's hint in a header (as proxy._relay_error)."""
        body = bytearray()
        while len(body) <= MAX_ERROR_BODY and (chunk := await upstream.read()):
            body += chunk
        if not upstream.complete:
            log.warning(
                "%s: the backend's %d body is longer than %d bytes; relayed cut there",
                self.request.path,
                head.status,
                MAX_ERROR_BODY,
            )
            del body[MAX_ERROR_BODY:]
        else:
            self.upstream = None
            upstream.finish(reusable=True)
        redactor = self.connection._lane.runtime.redactor
        hint = tool_choice_hint(head.status, bytes(body))
        out = redact_error_body(bytes(body), redactor)
        headers = self._passed_down(head)
        if hint is not None:
            headers.append((HINT_HEADER.encode(), hint.encode("latin-1", "replace")))
        obs = self.request.get(OBS)
        if isinstance(obs, RequestObs):
            obs.wrote(out)
            if hint is not None:
                obs.error_event(TOOL_CHOICE_CODE)
        self.connection.write(self._response_head(head.status, head.reason, headers, len(out)))
        self.connection.write(out)

    def _timed_out(self, obs: RequestObs | None) -> int:
        """A backend timeout passed (:meth:`check`): a 504 before the answer began, as
        aiohttp's path answers; after, the end of what the client has (an error event in a
        stream, else a cut connection)."""
        timeouts = self.target.model.timeouts
        label = self.target.label
        message: str
        if self.expired == "connect":
            error = UpstreamTimeoutError(label, "connection", timeouts.connect)
        elif self.expired == "first byte":
            error = UpstreamTimeoutError(label, "response", timeouts.first_byte)
        elif self.expired == "idle":
            error = None
            message = stalled_message(label, timeouts.idle_between_chunks)
        else:
            error = UpstreamTimeoutError(label, "complete response", timeouts.total or 0.0)
        if error is not None:
            message = str(error)
        if not self.head_sent:
            assert error is not None  # the answer's head is in before the idle timeout runs
            self._write_response(response_for(error, self.connection._lane.runtime.redactor))
            return 504
        log.warning("%s", message)
        if self.sse:
            self._error_event(504, message, obs)
        else:
            self.keep_alive = False
            self.connection.abort()
        return obs.status if obs is not None and obs.status else 200

    def _error(self, message: str, status: int, code: str | None) -> None:
        self._write_response(error_response(message, status, code=code))

    def _write_response(self, response: web.Response) -> None:
        """A whole gateway-authored answer (an error), before anything else went out."""
        body = response.body if isinstance(response.body, bytes) else b""
        headers = [
            (name.encode("latin-1"), value.encode("latin-1", "replace"))
            for name, value in response.headers.items()
            if name.lower() not in ("content-length", "x-request-id")
        ]
        if "Content-Type" not in response.headers:
            headers.append((b"Content-Type", f"{response.content_type}; charset=utf-8".encode()))
        obs = self.request.get(OBS)
        if isinstance(obs, RequestObs):
            obs.wrote(body)
        try:
            data = loads(body)
            self.code = error_code_of(data) if isinstance(data, dict) else None
        except ValueError:
            self.code = None
        reason = (response.reason or "").encode("latin-1", "replace")
        self.connection.write(self._response_head(response.status, reason, headers, len(body)))
        self.connection.write(body)
