"""The one relay: a request sent to a backend or peer and its answer relayed to the client, for
both doors — aiohttp's routes and the raw HTTP/1.1 fast door
(:mod:`modelswap.http.server.fast_door`).

Each door hands it a bytes-native :class:`Outgoing` request, an :class:`Upstream` (whose
:class:`~modelswap.http.relay.transport.Transport` reaches the backend or peer) and a
:class:`Sink`, the client's side: ``head``, ``write``, ``drained``, ``end``, ``abort``. A
stream opened early while its model loaded (:mod:`modelswap.http.relay.loading_stream`) is a
sink whose head already went out: the answer goes into it, an error answer as its final event.

Owned here, once: the headers sent up and down (:data:`NOT_SENT_UP`, :data:`NOT_SENT_DOWN`),
usage injection (:func:`observe_payload`) and its read (:func:`relayed_chunk`), the
stale-connection retry (:func:`_open`), the chunk loop (:func:`_copy`), a backend's error answer
with its hint, and the deadlines (:class:`~modelswap.http.relay.transport.Deadlines`).

Errors are redacted on the way through, successful answers never touched: a non-2xx body (a
backend's 500 may quote its own command line and environment) and every error event inside a
stream (an event line holding an ``"error"`` key) pass through the runtime's redactor.

An error that reaches the client as an event inside a 200 stream is recorded as the request's
error (:meth:`RequestObs.error_event`): the gateway's own (``upstream_error``,
``upstream_timeout``), and a backend's error event or error answer relayed into a stream whose
headers had already gone out. A known misconfiguration's hint, which a plain answer carries in
the ``X-Modelswap-Hint`` header, then travels inside the error event (``hint``, and appended to
``message``).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from modelswap import jsonsafe
from modelswap.backends.diagnose import tool_choice_hint
from modelswap.config import Timeouts
from modelswap.errors import (
    UpstreamError,
    UpstreamStatusError,
    UpstreamTimeoutError,
    UpstreamUnreachableError,
)
from modelswap.http.error_responses import HINT_HEADER, backend_explained, envelope
from modelswap.http.reading import HEADER as REQUEST_ID_HEADER
from modelswap.http.relay.extract import salted
from modelswap.http.relay.sse import error_event
from modelswap.http.relay.transport import (
    CONNECT,
    FIRST_BYTE,
    IDLE,
    NEVER,
    BackendBrokeError,
    BackendClosedError,
    BackendConnectTimeoutError,
    BackendRefusedError,
    Body,
    Deadlines,
    ResponseHead,
    Transport,
    said,
)
from modelswap.http.request_obs import RequestObs
from modelswap.http.route_table import USAGE_PATHS
from modelswap.observe.usage import UsageTracker, request_usage_injection
from modelswap.redact import Redactor

log = logging.getLogger(__name__)

TOOL_CHOICE_CODE = "tool_choice_unsupported"  # the preflight's code, for vLLM's own refusal
MAX_ERROR_BODY = 1024 * 1024
# How often a request is asked again when the backend closed its connection before answering
# (a stale pooled one). Each try discards the connection it used; a pool seldom holds more than
# a few that the backend closed at once, and a fresh connection is never stale.
STALE_RETRIES = 2

HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "trailers",
        "transfer-encoding",
        "upgrade",
    }
)
# Never sent up: hop-by-hop headers, the framing (written anew), the client's credentials (they
# are for modelswap; a backend that needs a key gets its own) and the request id (one per
# request, chosen by the gateway).
NOT_SENT_UP = HOP_BY_HOP | {
    "host",
    "content-length",
    "authorization",
    "x-api-key",
    "api-key",
    REQUEST_ID_HEADER.lower(),
}
# Never sent down: hop-by-hop headers, the framing, the request id (ours) and ``Date`` (the
# gateway's); nor any ``Access-Control-*`` (the gateway owns CORS: llama.cpp sends an empty
# ``Access-Control-Allow-Origin`` even with ours off).
NOT_SENT_DOWN = HOP_BY_HOP | {"host", "content-length", REQUEST_ID_HEADER.lower(), "date"}
_UP = frozenset(name.encode() for name in NOT_SENT_UP)
_DOWN = frozenset(name.encode() for name in NOT_SENT_DOWN)
_HINT = HINT_HEADER.encode()


# (Per request: not frozen, which would cost ~2 µs more to build each.)
@dataclass(slots=True)
class Outgoing:
    """A request as the relay sends it, as both doors hold it: bytes as they came."""

    method: str
    path: str  # the route (for the error event's shape and the log)
    target: str  # the path and query the backend or peer gets, escaped as the client sent them
    headers: Sequence[tuple[bytes, bytes]]  # the client's, as they came
    request_id: str
    body: bytes


@dataclass(slots=True)
class Upstream:
    """Where one attempt goes: a local backend (under a lease) or a peer, and its way there."""

    label: str  # the model as messages name it: a model id, or peerID/model
    transport: Transport
    api_key: str | None
    timeouts: Timeouts
    release: Callable[[], None]
    # With a fallback after this one, a 5xx is raised (UpstreamStatusError), not relayed.
    raise_5xx: bool = False
    extra_headers: tuple[tuple[bytes, bytes], ...] = ()
    on_status: Callable[[int], None] | None = None  # told the status as soon as it arrives


class Sink(Protocol):
    """The client's side of a relayed answer, as a door writes it."""

    @property
    def started(self) -> bool:
        """Whether a head went out (or is on its way): an early stream's, or the answer's."""

    @property
    def backlogged(self) -> bool:
        """Whether the client's side holds more than it should before :meth:`drained`."""

    def head(
        self, status: int, reason: bytes, headers: list[tuple[bytes, bytes]], length: int | None
    ) -> None:
        """The answer's head (``length`` None: framed as it comes)."""

    def write(self, data: bytes) -> None:
        """Body bytes, sent at the latest by the next :meth:`flush` or :meth:`drained`."""

    def flush(self) -> None:
        """Send what was written where that needs no wait (a door whose writes are awaited
        says :attr:`backlogged` instead)."""

    async def drained(self) -> None:
        """Send what was written; return once the client can take more."""

    async def end(self) -> None:
        """The answer is whole: send the rest and its end."""

    def abort(self, reason: str) -> None:
        """Cut the answer: the client must see it is incomplete."""


def headers_up(
    headers: Sequence[tuple[bytes, bytes]],
    api_key: str | None,
    request_id: str,
    extra: tuple[tuple[bytes, bytes], ...] = (),
) -> list[tuple[bytes, bytes]]:
    """The headers a backend or peer gets: the client's as they came, less NOT_SENT_UP (and
    those ``extra`` sets anew); the backend's own key, the request id, ``extra``."""
    skip = _UP if not extra else _UP | {name.lower() for name, _ in extra}
    out = [(name, value) for name, value in headers if name.lower() not in skip]
    if api_key:
        out.append((b"Authorization", f"Bearer {api_key}".encode("latin-1", "replace")))
    out.append((b"X-Request-Id", request_id.encode()))
    out.extend(extra)
    return out


def headers_down(head: ResponseHead) -> list[tuple[bytes, bytes]]:
    """The headers the client gets of the backend's answer: less NOT_SENT_DOWN and CORS; an
    event stream told not to be buffered or cached on the way."""
    out = [
        (name, value)
        for name, value in head.headers
        if (lowered := name.lower()) not in _DOWN and not lowered.startswith(b"access-control-")
    ]
    if head.event_stream:
        out.append((b"X-Accel-Buffering", b"no"))
        if not any(name.lower() == b"cache-control" for name, _ in out):
            out.append((b"Cache-Control", b"no-cache"))
    return out


def observe_payload(
    obs: RequestObs | None,
    label: str,
    path: str,
    payload: bytes,
    data: Mapping[str, object] | None,
    *,
    streamed: bool,
) -> bytes:
    """Record what goes up, and ask a usage route's backend for its usage (the chunk it adds
    is read and stripped on the way down: :func:`relayed_chunk`). The body to send."""
    if obs is None:
        return payload
    obs.model, obs.bytes_in = label, len(payload)
    obs.salted = salted(data)
    if obs.request_limit:
        obs.request_body = payload[: obs.request_limit]
    injected = None
    if data is not None and path in USAGE_PATHS:
        injected = request_usage_injection(payload, data)
    obs.usage = UsageTracker(streamed=streamed, strip_usage_chunk=injected is not None)
    return payload if injected is None else injected


async def relay(
    request: Outgoing,
    upstream: Upstream,
    sink: Sink,
    redactor: Redactor,
    obs: RequestObs | None,
) -> int:
    """Send ``request`` to ``upstream`` and relay the answer into ``sink`` as it arrives; the
    status relayed.

    Always releases ``upstream``. Raises UpstreamError / UpstreamTimeoutError while nothing of
    the answer went to the client (UpstreamUnreachableError: the request never reached it);
    after that, a broken or stalled backend ends the answer: with an error event in an event
    stream, else cut.
    """
    deadlines = Deadlines(upstream.timeouts)
    body: Body | None = None
    run = _Run(request, upstream, sink, redactor, obs, deadlines, sink.started)
    reusable = False
    try:
        head, body = await _open(request, upstream, deadlines)
        if upstream.on_status is not None:
            upstream.on_status(head.status)
        if upstream.raise_5xx and head.status >= 500:
            raise UpstreamStatusError(upstream.label, head.status, await _read_bounded(body))
        run.answered = True
        if obs is not None:
            obs.first_byte()
            obs.status = head.status
        deadlines.phase = IDLE
        deadlines.next_chunk_by = asyncio.get_running_loop().time() + deadlines.idle
        if head.status < 400:
            reusable = await run.body(head, body)
        elif sink.started:
            reusable = await run.error_into_stream(head, body)
        else:
            reusable = await run.error(head, body)
        return head.status
    except asyncio.CancelledError:
        if deadlines.expired is None:
            raise  # the client left, or an operator cancelled
        deadlines.uncancel()
        return await run.timed_out(deadlines.expired)
    finally:
        deadlines.close()
        if body is not None:
            body.finish(reusable)
        upstream.release()


async def _open(
    request: Outgoing, upstream: Upstream, deadlines: Deadlines
) -> tuple[ResponseHead, Body]:
    """The request sent, the answer's head back: asked again on another connection when one
    closed before answering (a stale pooled one), at most STALE_RETRIES times."""
    label = upstream.label
    headers = headers_up(
        request.headers, upstream.api_key, request.request_id, upstream.extra_headers
    )
    closed: BackendClosedError | None = None
    for _ in range(STALE_RETRIES + 1):
        try:
            return await upstream.transport.open(
                request.method, request.target, headers, request.body, deadlines
            )
        except BackendClosedError as exc:
            # Closed before a byte of answer came: a pooled connection the backend had given
            # up on (llama.cpp's server closes one past its keep-alive time). The request was
            # not answered, so it goes again, on another connection.
            closed = closed or exc
            log.debug("%s closed a connection unanswered: asking again", label)
        except BackendRefusedError as exc:
            if closed is not None:
                # Not a stale connection: the backend itself is gone (it crashed on this
                # request). Said as the first failure said; never a restart and replay.
                raise UpstreamError(label, said(closed)) from None
            raise UpstreamUnreachableError(label, said(exc)) from None
        except BackendConnectTimeoutError as exc:
            raise UpstreamTimeoutError(label, "connection", exc.seconds) from None
        except BackendBrokeError as exc:
            raise UpstreamError(label, said(exc)) from None
    assert closed is not None
    raise UpstreamError(label, said(closed))


@dataclass(slots=True)
class _Run:
    """One relayed answer's state, for its steps below."""

    request: Outgoing
    upstream: Upstream
    sink: Sink
    redactor: Redactor
    obs: RequestObs | None
    deadlines: Deadlines
    stream: bool  # an event stream: one opened early, or the answer
    answered: bool = False  # the backend's head is in

    async def body(self, head: ResponseHead, body: Body) -> bool:
        """A 1xx-3xx answer, relayed as it arrives; whether it was read whole."""
        sink, obs = self.sink, self.obs
        if not sink.started:
            self.stream = head.event_stream
            strips = obs is not None and obs.usage is not None and obs.usage.strips
            length = head.content_length if not strips else None
            sink.head(head.status, head.reason, headers_down(head), length)
        failure = await self._copy(body)
        if failure is None:
            await sink.end()
            return True
        self._end_cut(*failure)
        await self._end_stream(*failure)
        return False

    async def _copy(self, body: Body) -> tuple[int, str] | None:
        """THE chunk loop: relay chunks as they arrive (a whole small answer in one write);
        on a broken backend, ``(status, message)``."""
        sink, obs, redactor, deadlines = self.sink, self.obs, self.redactor, self.deadlines
        loop = asyncio.get_running_loop()
        idle = deadlines.idle
        while True:
            if not body.has_data:
                sink.flush()  # nothing more in hand: what we have goes now
            if sink.backlogged:
                deadlines.next_chunk_by = NEVER  # a slow client is not a stalled backend
                await sink.drained()
            deadlines.next_chunk_by = loop.time() + idle
            try:
                chunk = await body.read()
            except BackendBrokeError as exc:
                return 502, broke_message(self.upstream.label, exc)
            if not chunk:
                if obs is not None and (rest := obs.finish()):
                    sink.write(rest)
                return None
            chunk = relayed_chunk(chunk, obs, redactor)
            if chunk:
                sink.write(chunk)

    def _end_cut(self, status: int, message: str) -> None:
        log.warning("%s", message)
        if not self.stream:
            # A truncated body with a Content-Length (or an unfinished chunked body) tells the
            # client the answer is incomplete; cutting the connection makes sure it notices.
            self.sink.abort(message)

    async def _end_stream(self, status: int, message: str) -> None:
        if self.stream:
            self.sink.write(
                final_error_event(status, message, self.redactor, self.request.path, obs=self.obs)
            )
            await self.sink.end()

    async def error(self, head: ResponseHead, body: Body) -> bool:
        """A backend's error keeps its status and meaning, secrets masked; a known
        misconfiguration adds a hint header. A body longer than MAX_ERROR_BODY is cut there
        (what it means is at its start; masking needs the whole text in hand)."""
        data = await _read_bounded(body)
        if not body.complete:
            log.warning(
                "%s: the backend's %d body is longer than %d bytes; relayed cut there",
                self.request.path,
                head.status,
                MAX_ERROR_BODY,
            )
            data = data[:MAX_ERROR_BODY]
        hint = tool_choice_hint(head.status, data)
        out = redact_error_body(data, self.redactor)
        headers = headers_down(head)
        if hint is not None:
            headers.append((_HINT, hint.encode("latin-1", "replace")))
        obs = self.obs
        if obs is not None:  # its code and message recorded, with a capture its body
            why = backend_explained(head.status, data)
            obs.error_event(TOOL_CHOICE_CODE if hint is not None else why.code, why.message)
            obs.error_body()
            obs.wrote(out)
        sink = self.sink
        sink.head(head.status, head.reason, headers, len(out))
        sink.write(out)
        await sink.end()
        return body.complete

    async def error_into_stream(self, head: ResponseHead, body: Body) -> bool:
        """An error answer into a stream opened early: its final event; a hint that would
        have been a header goes into it (the header can no longer be sent)."""
        data = await _read_bounded(body)
        obs, redactor = self.obs, self.redactor
        hint = tool_choice_hint(head.status, data)
        parsed = json_object_with_error(data)
        if parsed is None:
            text = data.decode("utf-8", errors="replace")[:1000]
            message = f"Backend for model `{self.upstream.label}` answered {head.status}: {text}"
            status = 502 if hint is None else 400  # as the preflight answers, with the hint
            event = final_error_event(
                status, message, redactor, self.request.path, lead=b"", obs=obs, hint=hint
            )
        else:
            if obs is not None:
                code = TOOL_CHOICE_CODE if hint is not None else "upstream_error"
                obs.error_event(code, backend_explained(head.status, data).message)
            if hint is not None:
                data = with_hint(parsed, hint, redactor)
            else:
                data = redact_error_body(data, redactor)
            # One event: an SSE data line cannot hold a newline.
            event = b"data: " + data.replace(b"\r", b"").replace(b"\n", b" ") + b"\n\n"
            if obs is not None:
                obs.wrote(event)
        self.sink.write(event)
        await self.sink.end()
        return body.complete

    async def timed_out(self, which: str) -> int:
        """A deadline passed: UpstreamTimeoutError before the backend's head came (the door
        answers it, or a fallback is tried); after, the end of what the client has."""
        timeouts = self.upstream.timeouts
        label = self.upstream.label
        if which == IDLE:
            message = stalled_message(label, timeouts.idle_between_chunks)
        else:
            if which == CONNECT:
                error = UpstreamTimeoutError(label, "connection", timeouts.connect)
            elif which == FIRST_BYTE:
                error = UpstreamTimeoutError(label, "response", timeouts.first_byte)
            else:
                error = UpstreamTimeoutError(label, "complete response", timeouts.total or 0.0)
            if not self.answered or not self.sink.started:
                raise error
            message = str(error)
        self._end_cut(504, message)
        await self._end_stream(504, message)
        obs = self.obs
        return obs.status if obs is not None and obs.status else 200


async def _read_bounded(body: Body) -> bytes:
    """At most about MAX_ERROR_BODY bytes of the body; the rest stays unread."""
    out = bytearray()
    while len(out) <= MAX_ERROR_BODY and (chunk := await body.read()):
        out += chunk
    return bytes(out)


def with_hint(data: dict[str, object], hint: str, redactor: Redactor) -> bytes:
    """A backend's ``{"error": …}`` body, masked, with ``hint`` beside its ``message`` and
    appended to it (SDKs show only the message)."""
    error = data.get("error")
    if isinstance(error, dict):
        message = error.get("message")
        hinted = f"{message} Hint: {hint}." if isinstance(message, str) else message
        data = {**data, "error": {**error, "message": hinted, "hint": hint}}
    elif isinstance(error, str):
        data = {**data, "error": f"{error} Hint: {hint}.", "hint": hint}
    return json.dumps(redactor.data(data)).encode()


def json_object_with_error(body: bytes) -> dict[str, object] | None:
    try:
        data = jsonsafe.loads(body)
    except ValueError:  # too deep and UnicodeDecodeError included
        return None
    return data if isinstance(data, dict) and "error" in data else None


def redact_error_body(body: bytes, redactor: Redactor) -> bytes:
    """``body`` with secrets masked (the same bytes when there is nothing to mask)."""
    text = body.decode("utf-8", errors="replace")
    masked = redactor.text(text)
    return body if masked == text else masked.encode()


def redact_error_events(chunk: bytes, redactor: Redactor) -> bytes:
    """The lines of ``chunk`` that hold an ``"error"`` key, redacted; every other line (the
    answer's own content) exactly as it came. A key is never escaped: content that merely
    mentions "error" inside a JSON string reads ``\\"error\\"`` and is left alone."""
    lines = chunk.split(b"\n")
    for index, line in enumerate(lines):
        if b'"error"' in line:
            lines[index] = redact_error_body(line, redactor)
    return b"\n".join(lines)


def holds_error_event(chunk: bytes) -> bool:
    """Whether a line of ``chunk`` is an SSE ``data:`` event whose JSON object has an
    ``"error"`` (a backend's error event; a cut line, unreadable, does not count)."""
    return _event_error(chunk) is not None


def _event_error(chunk: bytes) -> object | None:
    """The ``"error"`` of the first error event in ``chunk``, or None."""
    for line in chunk.split(b"\n"):
        line = line.strip()
        if line.startswith(b"data:") and b'"error"' in line:
            payload = line[len(b"data:") :].strip()
            try:
                data = jsonsafe.loads(payload)
            except ValueError:
                continue
            error: object = data.get("error") if isinstance(data, dict) else None
            if error:
                return error
    return None


def relayed_chunk(chunk: bytes, obs: RequestObs | None, redactor: Redactor) -> bytes:
    """A chunk of the backend's answer as the client gets it (``b""``: nothing of it): counted,
    its usage read (the injected usage chunk stripped), its error events masked and recorded."""
    if obs is not None:
        chunk = obs.tap(chunk)
    if b'"error"' in chunk:
        chunk = redact_error_events(chunk, redactor)
        if obs is not None and (error := _event_error(chunk)) is not None:
            said = error.get("message") if isinstance(error, dict) else error
            # the backend's own, mid-stream
            obs.error_event("upstream_error", said if isinstance(said, str) else None)
    return chunk


def broke_message(label: str, exc: BaseException) -> str:
    return f"Backend for model `{label}` broke the response: {exc or type(exc)}"


def stalled_message(label: str, idle: float) -> str:
    return f"Backend for model `{label}` sent nothing for {idle:g} s; the response was cut."


def final_error_event(
    status: int,
    message: str,
    redactor: Redactor,
    path: str,
    *,
    lead: bytes = b"\n\n",
    obs: RequestObs | None = None,
    hint: str | None = None,
) -> bytes:
    """The gateway's error event that ends a stream (``lead`` ends any event cut short),
    recorded as the request's error. A ``hint`` (of vLLM's tool-choice refusal) goes beside
    the message and at its end."""
    code = "upstream_timeout" if status == 504 else "upstream_error"
    if hint is not None:
        code = TOOL_CHOICE_CODE
    extra = {} if hint is None else {"hint": hint}
    text = message if hint is None else f"{message} Hint: {hint}."
    masked = redactor.data(envelope(text, status, code=code, **extra))
    assert isinstance(masked, dict)
    event = lead + error_event(path, masked, status)
    if obs is not None:
        obs.error_event(code, text)
        obs.wrote(event)
    return event
