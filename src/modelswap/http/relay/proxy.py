"""The streaming reverse proxy into a backend.

The lease is released when the body has been relayed or the client went away (the handler is
cancelled on disconnect; ``finally`` closes the upstream response, which cancels the backend's
work, and releases the lease) — never when the handler merely returns.

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
import contextlib
import functools
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass

import aiohttp
from aiohttp import web
from multidict import CIMultiDict, CIMultiDictProxy

from modelswap import jsonsafe
from modelswap.backends.diagnose import tool_choice_hint
from modelswap.config import ModelConfig, Timeouts
from modelswap.errors import (
    ModelswapError,
    UpstreamError,
    UpstreamStatusError,
    UpstreamTimeoutError,
    UpstreamUnreachableError,
)
from modelswap.http.error_responses import HINT_HEADER, envelope
from modelswap.http.reading import HEADER as REQUEST_ID_HEADER
from modelswap.http.reading import request_id
from modelswap.http.relay.sse import error_event
from modelswap.http.relay.waiting import WaitingStream, fail_or_raise
from modelswap.http.request_obs import OBS, RequestObs
from modelswap.redact import Redactor
from modelswap.routing.local import Lease
from modelswap.runtime import Runtime

log = logging.getLogger(__name__)

TOOL_CHOICE_CODE = "tool_choice_unsupported"  # the preflight's code, for vLLM's own refusal
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
_NOT_FORWARDED = HOP_BY_HOP | {"host", "content-length"}
# The client's credentials are for modelswap; a backend that needs a key gets its own.
_CLIENT_CREDENTIALS = frozenset({"authorization", "x-api-key", "api-key"})
# The response being relayed, once its headers went out (a timeout then ends it, not a 504).
RELAYING: web.RequestKey[web.StreamResponse] = web.RequestKey("relaying", web.StreamResponse)
MAX_ERROR_BODY = 1024 * 1024


@dataclass(frozen=True, slots=True)
class Upstream:
    """Where one attempt goes: a local backend (under a lease) or a peer."""

    label: str  # the model as messages name it: a model id, or peerID/model
    base_url: str
    api_key: str | None
    timeouts: Timeouts
    release: Callable[[], None]
    # With a fallback after this one, a 5xx is raised (UpstreamStatusError), not relayed.
    raise_5xx: bool = False
    extra_headers: tuple[tuple[str, str], ...] = ()
    on_status: Callable[[int], None] | None = None  # told the status as soon as it arrives

    @classmethod
    def local(cls, lease: Lease, model: ModelConfig, *, raise_5xx: bool = False) -> Upstream:
        config = lease.config
        return cls(
            lease.model,
            config.proxy,
            config.upstream_api_key,
            model.timeouts,
            lease.release,
            raise_5xx,
        )


def request_headers(
    headers: CIMultiDictProxy[str], upstream_key: str | None = None
) -> CIMultiDict[str]:
    out: CIMultiDict[str] = CIMultiDict()
    for name, value in headers.items():
        lowered = name.lower()
        if lowered not in _NOT_FORWARDED and lowered not in _CLIENT_CREDENTIALS:
            out.add(name, value)
    if upstream_key:
        out["Authorization"] = f"Bearer {upstream_key}"
    return out


def _response_headers(upstream: aiohttp.ClientResponse) -> CIMultiDict[str]:
    """The backend's headers the client gets: not hop-by-hop ones, and no CORS — the gateway
    owns CORS (llama.cpp sends an empty ``Access-Control-Allow-Origin`` even with ours off)."""
    out: CIMultiDict[str] = CIMultiDict()
    for name, value in upstream.headers.items():
        lowered = name.lower()
        if lowered not in _NOT_FORWARDED and not lowered.startswith("access-control-"):
            out.add(name, value)
    if upstream.content_type == "text/event-stream":
        out["X-Accel-Buffering"] = "no"
        out.setdefault("Cache-Control", "no-cache")
    return out


# How often a request is asked again when the backend closed its connection before answering
# (a stale pooled one). Each try discards the connection it used; a pool seldom holds more than
# a few that the backend closed at once, and a fresh connection is never stale.
STALE_RETRIES = 2


@functools.lru_cache(maxsize=64)
def _client_timeout(connect: float | None) -> aiohttp.ClientTimeout:
    """The connect timeout as aiohttp takes it (built once per value, not per request)."""
    return aiohttp.ClientTimeout(total=None, sock_connect=connect)


def _ceiling(seconds: float | None) -> contextlib.AbstractAsyncContextManager[object]:
    """``asyncio.timeout(seconds)``; nothing at all without a ceiling (the common case)."""
    return asyncio.timeout(seconds) if seconds is not None else contextlib.nullcontext()


async def _open_upstream(
    session: aiohttp.ClientSession,
    upstream: Upstream,
    method: str,
    path_qs: str,
    headers: CIMultiDict[str],
    body: bytes,
) -> aiohttp.ClientResponse:
    url = upstream.base_url + path_qs
    timeouts = upstream.timeouts
    label = upstream.label
    connect = timeouts.connect or None  # 0: no limit (llama-swap's)
    if connect and timeouts.tls_handshake and url.startswith("https:"):  # timed as one
        connect += timeouts.tls_handshake
    try:
        async with _ceiling(timeouts.first_byte or None):
            closed: aiohttp.ClientError | None = None
            for attempt in range(STALE_RETRIES + 1):
                try:
                    return await session.request(
                        method,
                        url,
                        data=body if body else None,
                        headers=headers,
                        allow_redirects=False,
                        timeout=_client_timeout(connect),
                    )
                except (aiohttp.ServerDisconnectedError, aiohttp.ClientConnectionResetError) as exc:
                    # Closed before a byte of answer came: a pooled connection the backend had
                    # given up on (llama.cpp's server closes one past its keep-alive time). The
                    # request was not answered, so it goes again, on another connection.
                    if attempt == STALE_RETRIES:
                        raise
                    closed = closed or exc
                    log.debug("%s closed a connection unanswered: asking again", label)
                except aiohttp.ClientConnectorError:
                    if closed is not None:
                        # Not a stale connection: the backend itself is gone (it crashed on this
                        # request). Said as the first failure said; never a restart and replay.
                        raise closed from None
                    raise
        raise AssertionError("unreachable")
    except TimeoutError as exc:
        if isinstance(exc, aiohttp.ConnectionTimeoutError):
            raise UpstreamTimeoutError(label, "connection", connect or 0.0) from exc
        raise UpstreamTimeoutError(label, "response", timeouts.first_byte) from exc
    except aiohttp.ClientConnectorError as exc:
        raise UpstreamUnreachableError(label, str(exc) or type(exc).__name__) from exc
    except aiohttp.ClientError as exc:
        raise UpstreamError(label, str(exc) or type(exc).__name__) from exc


async def send_to_model(
    request: web.Request,
    runtime: Runtime,
    model: ModelConfig,
    *,
    path_qs: str,
    body: bytes,
    stream: bool = False,
) -> web.StreamResponse:
    """Wait for ``model`` to be ready, then :func:`forward` to it.

    A streaming request that waits long gets its event stream opened early, with progress
    comments (:mod:`modelswap.http.relay.waiting`); errors then arrive as a final ``data:`` event.
    """
    waiting = WaitingStream(request, runtime) if stream else None
    try:
        return await attempt_local(
            request, runtime, model, path_qs=path_qs, body=body, waiting=waiting
        )
    except ModelswapError as exc:
        return await fail_or_raise(waiting, exc)


async def attempt_local(
    request: web.Request,
    runtime: Runtime,
    model: ModelConfig,
    *,
    path_qs: str,
    body: bytes,
    waiting: WaitingStream | None,
    raise_5xx: bool = False,
) -> web.StreamResponse:
    """One target's attempt: acquire ``model`` (through ``waiting`` for streams), forward.
    Raises ModelswapError when nothing but waiting comments reached the client.

    A refused connection means the request never reached the backend. If the backend has just
    died (its exit not yet noticed), the model is marked failed and the request is tried once
    more, which starts it again — a request right after a crash is not lost.
    """
    for attempt in (1, 2):
        if waiting is not None:
            lease = await waiting.acquire(model.id)
        else:
            lease = await runtime.acquire(model.id)
        try:
            return await forward(
                request,
                runtime,
                Upstream.local(lease, model, raise_5xx=raise_5xx),
                path_qs=path_qs,
                body=body,
                into=waiting.response if waiting is not None else None,
            )
        except UpstreamUnreachableError:
            if attempt == 2 or not await lease.confirm_exit():
                raise
            log.info("model %s: backend had died; starting it again", model.id)
    raise AssertionError("unreachable")


async def forward(
    request: web.Request,
    runtime: Runtime,
    target: Upstream,
    *,
    path_qs: str,
    body: bytes,
    into: web.StreamResponse | None = None,
) -> web.StreamResponse:
    """Send the request to ``target`` and relay the answer as it arrives (into an
    already-open event stream when ``into`` is given).

    Always releases ``target``. Raises UpstreamError / UpstreamTimeoutError when nothing was
    sent to the client yet; after that, a broken backend ends the stream (with an SSE error
    event for event streams).
    """
    obs = request.get(OBS)
    timeouts = target.timeouts
    redactor = runtime.redactor
    # The proxy session, or (llama-swap's keepalive / idleConn) one with its own connections
    session = runtime.session_for(timeouts)
    try:
        async with _ceiling(timeouts.total):
            headers = request_headers(request.headers, target.api_key)
            headers[REQUEST_ID_HEADER] = request_id(request)  # one id, end to end
            for name, value in target.extra_headers:
                headers[name] = value
            upstream = await _open_upstream(session, target, request.method, path_qs, headers, body)
            if target.on_status is not None:
                target.on_status(upstream.status)
            try:
                if target.raise_5xx and upstream.status >= 500:
                    raise UpstreamStatusError(
                        target.label, upstream.status, await _read_bounded(upstream)
                    )
                if obs is not None:
                    obs.first_byte()
                    obs.status = upstream.status
                if into is not None:
                    return await _relay_into(into, upstream, target, redactor, obs, request.path)
                return await _relay(request, upstream, target, redactor, obs)
            finally:
                upstream.close()
    except TimeoutError as exc:
        if timeouts.total is None:
            raise UpstreamTimeoutError(target.label, "response", timeouts.first_byte) from exc
        error = UpstreamTimeoutError(target.label, "complete response", timeouts.total)
        started = into if into is not None else request.get(RELAYING)
        if started is None or not started.prepared:
            raise error from exc
        # The ceiling passed mid-answer: end what the client already has, as a cut would.
        log.warning("%s", error)
        if started.content_type != "text/event-stream":
            raise ConnectionAbortedError(str(error)) from exc
        return await _end_with_error_event(
            started, 504, str(error), redactor, request.path, obs=obs
        )
    finally:
        target.release()


async def _relay(
    request: web.Request,
    upstream: aiohttp.ClientResponse,
    target: Upstream,
    redactor: Redactor,
    obs: RequestObs | None = None,
) -> web.StreamResponse:
    response = web.StreamResponse(status=upstream.status, reason=upstream.reason)
    response.headers.update(_response_headers(upstream))
    if upstream.status >= 400:
        return await _relay_error(request, response, upstream, redactor)
    if upstream.content_length is not None and not _strips(obs):
        response.content_length = upstream.content_length
    await response.prepare(request)
    request[RELAYING] = response
    failure = await _copy(upstream, response, target, redactor, obs)
    if failure is None:
        await response.write_eof()
        return response
    if upstream.content_type != "text/event-stream":
        # A truncated body with a Content-Length (or an unfinished chunked body) tells the
        # client the answer is incomplete; closing the connection makes sure it notices.
        raise ConnectionAbortedError(failure[1])
    return await _end_with_error_event(response, *failure, redactor, request.path, obs=obs)


async def _relay_into(
    response: web.StreamResponse,
    upstream: aiohttp.ClientResponse,
    target: Upstream,
    redactor: Redactor,
    obs: RequestObs | None = None,
    path: str = "",
) -> web.StreamResponse:
    """Relay into an event stream whose headers were already sent (see ``waiting``). An error
    answer becomes the stream's final event; a hint that would have been a header goes into
    it (the header can no longer be sent)."""
    if upstream.status >= 400:
        body = await _read_bounded(upstream)
        hint = tool_choice_hint(upstream.status, body)
        data = json_object_with_error(body)
        if data is None:
            text = body.decode("utf-8", errors="replace")[:1000]
            message = f"Backend for model `{target.label}` answered {upstream.status}: {text}"
            status = 502 if hint is None else 400  # as the preflight answers, with the hint
            return await _end_with_error_event(
                response, status, message, redactor, path, lead=b"", obs=obs, hint=hint
            )
        if obs is not None:
            obs.error_event(TOOL_CHOICE_CODE if hint is not None else "upstream_error")
        if hint is not None:
            body = _with_hint(data, hint, redactor)
        else:
            body = redact_error_body(body, redactor)
        # One event: an SSE data line cannot hold a newline.
        event = b"data: " + body.replace(b"\r", b"").replace(b"\n", b" ") + b"\n\n"
        if obs is not None:
            obs.wrote(event)
        await response.write(event)
        await response.write_eof()
        return response
    failure = await _copy(upstream, response, target, redactor, obs)
    if failure is not None:
        return await _end_with_error_event(response, *failure, redactor, path, obs=obs)
    await response.write_eof()
    return response


def _with_hint(data: dict[str, object], hint: str, redactor: Redactor) -> bytes:
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


async def _relay_error(
    request: web.Request,
    response: web.StreamResponse,
    upstream: aiohttp.ClientResponse,
    redactor: Redactor,
) -> web.StreamResponse:
    """Backend errors keep their status and meaning, with secrets masked; a known
    misconfiguration adds a hint header. An error body longer than MAX_ERROR_BODY is cut
    there (what it means is at its start; masking needs the whole text in hand)."""
    body = await _read_bounded(upstream)
    hint = tool_choice_hint(upstream.status, body)
    if hint is not None:
        response.headers[HINT_HEADER] = hint
    if not upstream.content.at_eof():
        log.warning(
            "%s: the backend's %d body is longer than %d bytes; relayed cut there",
            request.path,
            upstream.status,
            MAX_ERROR_BODY,
        )
        body = body[:MAX_ERROR_BODY]
    body = redact_error_body(body, redactor)
    response.content_length = len(body)
    await response.prepare(request)
    await response.write(body)
    await response.write_eof()
    return response


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
    for line in chunk.split(b"\n"):
        line = line.strip()
        if line.startswith(b"data:") and b'"error"' in line:
            payload = line[len(b"data:") :].strip()
            try:
                data = jsonsafe.loads(payload)
            except ValueError:
                continue
            if isinstance(data, dict) and data.get("error"):
                return True
    return False


async def _read_bounded(upstream: aiohttp.ClientResponse) -> bytes:
    """At most about MAX_ERROR_BODY bytes of the body; the rest stays unread."""
    body = bytearray()
    while len(body) <= MAX_ERROR_BODY and (chunk := await upstream.content.readany()):
        body += chunk
    return bytes(body)


def json_object_with_error(body: bytes) -> dict[str, object] | None:
    try:
        data = jsonsafe.loads(body)
    except ValueError:  # too deep and UnicodeDecodeError included
        return None
    return data if isinstance(data, dict) and "error" in data else None


def _strips(obs: RequestObs | None) -> bool:
    """Whether the relayed body may differ in length from the backend's (usage stripping)."""
    return obs is not None and obs.usage is not None and obs.usage.strips


def relayed_chunk(chunk: bytes, obs: RequestObs | None, redactor: Redactor) -> bytes:
    """A chunk of the backend's answer as the client gets it (``b""``: nothing of it): counted,
    its usage read (the injected usage chunk stripped), its error events masked and recorded.
    Both relays use it: aiohttp's (:func:`_copy`) and the fast lane's."""
    if obs is not None:
        chunk = obs.tap(chunk)
    if b'"error"' in chunk:
        chunk = redact_error_events(chunk, redactor)
        if obs is not None and holds_error_event(chunk):
            obs.error_event("upstream_error")  # the backend's own, mid-stream
    return chunk


def broke_message(label: str, exc: BaseException) -> str:
    return f"Backend for model `{label}` broke the response: {exc or type(exc)}"


def stalled_message(label: str, idle: float) -> str:
    return f"Backend for model `{label}` sent nothing for {idle:g} s; the response was cut."


async def _copy(
    upstream: aiohttp.ClientResponse,
    response: web.StreamResponse,
    target: Upstream,
    redactor: Redactor,
    obs: RequestObs | None = None,
) -> tuple[int, str] | None:
    """Relay chunks as they arrive; on a broken or stalled backend, ``(status, message)``."""
    timeouts = target.timeouts
    loop = asyncio.get_running_loop()
    idle = timeouts.idle_between_chunks
    moved = loop.time()
    step = min(1.0, idle / 4)  # the deadline moves at most this often (fires ≤ step early)
    try:
        async with asyncio.timeout(idle) as deadline:
            while True:
                try:
                    chunk = await upstream.content.readany()
                except (aiohttp.ClientPayloadError, aiohttp.ClientConnectionError) as exc:
                    # (only the backend's side: a client that left fails the write below,
                    # which is not the backend's doing)
                    message = broke_message(target.label, exc)
                    log.warning("%s", message)
                    return 502, message
                now = loop.time()
                if now - moved > step:
                    deadline.reschedule(now + idle)
                    moved = now
                if not chunk:
                    if obs is not None and (rest := obs.finish()):
                        await response.write(rest)
                    return None
                chunk = relayed_chunk(chunk, obs, redactor)
                if chunk:
                    await response.write(chunk)
    except TimeoutError:
        message = stalled_message(target.label, timeouts.idle_between_chunks)
        log.warning("%s", message)
        return 504, message


async def _end_with_error_event(
    response: web.StreamResponse,
    status: int,
    message: str,
    redactor: Redactor,
    path: str,
    *,
    lead: bytes = b"\n\n",
    obs: RequestObs | None = None,
    hint: str | None = None,
) -> web.StreamResponse:
    """End a stream with the gateway's error event (:func:`final_error_event`)."""
    await response.write(
        final_error_event(status, message, redactor, path, lead=lead, obs=obs, hint=hint)
    )
    await response.write_eof()
    return response


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
        obs.error_event(code)
        obs.wrote(event)
    return event
