"""The streaming reverse proxy into a backend.

The lease is released when the body has been relayed or the client went away (the handler is
cancelled on disconnect; ``finally`` closes the upstream response, which cancels the backend's
work, and releases the lease) — never when the handler merely returns.
"""

from __future__ import annotations

import asyncio
import json
import logging

import aiohttp
from aiohttp import web
from multidict import CIMultiDict, CIMultiDictProxy

from modelswap.config import ModelConfig, Timeouts
from modelswap.errors import UpstreamError, UpstreamTimeoutError, UpstreamUnreachableError
from modelswap.http.errors import envelope
from modelswap.routing.local import Lease, LocalRouter

log = logging.getLogger(__name__)

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


def request_headers(headers: CIMultiDictProxy[str]) -> CIMultiDict[str]:
    out: CIMultiDict[str] = CIMultiDict()
    for name, value in headers.items():
        if name.lower() not in _NOT_FORWARDED:
            out.add(name, value)
    return out


def _response_headers(upstream: aiohttp.ClientResponse) -> CIMultiDict[str]:
    out: CIMultiDict[str] = CIMultiDict()
    for name, value in upstream.headers.items():
        if name.lower() not in _NOT_FORWARDED:
            out.add(name, value)
    if upstream.content_type == "text/event-stream":
        out["X-Accel-Buffering"] = "no"
        out.setdefault("Cache-Control", "no-cache")
    return out


async def _open_upstream(
    session: aiohttp.ClientSession,
    lease: Lease,
    method: str,
    path_qs: str,
    headers: CIMultiDict[str],
    body: bytes,
    timeouts: Timeouts,
) -> aiohttp.ClientResponse:
    url = lease.process.config.proxy + path_qs
    try:
        async with asyncio.timeout(timeouts.first_byte):
            return await session.request(
                method,
                url,
                data=body if body else None,
                headers=headers,
                allow_redirects=False,
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=timeouts.connect),
            )
    except TimeoutError as exc:
        if isinstance(exc, aiohttp.ConnectionTimeoutError):
            raise UpstreamTimeoutError(lease.model, "connection", timeouts.connect) from exc
        raise UpstreamTimeoutError(lease.model, "response", timeouts.first_byte) from exc
    except aiohttp.ClientConnectorError as exc:
        raise UpstreamUnreachableError(lease.model, str(exc) or type(exc).__name__) from exc
    except aiohttp.ClientError as exc:
        raise UpstreamError(lease.model, str(exc) or type(exc).__name__) from exc


async def send_to_model(
    request: web.Request,
    router: LocalRouter,
    session: aiohttp.ClientSession,
    model: ModelConfig,
    *,
    path_qs: str,
    body: bytes,
) -> web.StreamResponse:
    """Wait for ``model`` to be ready, then :func:`forward` to it.

    A refused connection means the request never reached the backend. If the backend has just
    died (its exit not yet noticed), the model is marked failed and the request is tried once
    more, which starts it again — a request right after a crash is not lost.
    """
    for attempt in (1, 2):
        lease = await router.acquire(model.id)
        process = lease.process
        try:
            return await forward(
                request, session, lease, path_qs=path_qs, body=body, timeouts=model.timeouts
            )
        except UpstreamUnreachableError:
            if attempt == 2 or not await process.confirm_exit():
                raise
            log.info("model %s: backend had died; starting it again for this request", model.id)
    raise AssertionError("unreachable")


async def forward(
    request: web.Request,
    session: aiohttp.ClientSession,
    lease: Lease,
    *,
    path_qs: str,
    body: bytes,
    timeouts: Timeouts,
) -> web.StreamResponse:
    """Send the request to the lease's backend and relay the answer as it arrives.

    Always releases ``lease``. Raises UpstreamError / UpstreamTimeoutError when nothing was sent
    to the client yet; after that, a broken backend ends the stream (with an SSE error event
    for event streams).
    """
    try:
        async with asyncio.timeout(timeouts.total):
            upstream = await _open_upstream(
                session,
                lease,
                request.method,
                path_qs,
                request_headers(request.headers),
                body,
                timeouts,
            )
            try:
                return await _relay(request, upstream, lease, timeouts)
            finally:
                upstream.close()
    except TimeoutError as exc:
        if timeouts.total is None:
            raise UpstreamTimeoutError(lease.model, "response", timeouts.first_byte) from exc
        raise UpstreamTimeoutError(lease.model, "complete response", timeouts.total) from exc
    finally:
        lease.release()


async def _relay(
    request: web.Request,
    upstream: aiohttp.ClientResponse,
    lease: Lease,
    timeouts: Timeouts,
) -> web.StreamResponse:
    response = web.StreamResponse(status=upstream.status, reason=upstream.reason)
    response.headers.update(_response_headers(upstream))
    if upstream.content_length is not None:
        response.content_length = upstream.content_length
    await response.prepare(request)
    is_sse = upstream.content_type == "text/event-stream"
    failure: str | None = None
    try:
        while True:
            async with asyncio.timeout(timeouts.idle_between_chunks):
                chunk = await upstream.content.readany()
            if not chunk:
                break
            await response.write(chunk)
    except TimeoutError:
        failure = (
            f"Backend for model `{lease.model}` sent nothing for "
            f"{timeouts.idle_between_chunks:g} s; the response was cut."
        )
    except (aiohttp.ClientPayloadError, aiohttp.ClientConnectionError) as exc:
        failure = f"Backend for model `{lease.model}` broke the response: {exc or type(exc)}"
    if failure is None:
        await response.write_eof()
        return response
    log.warning("%s", failure)
    if not is_sse:
        # A truncated body with a Content-Length (or an unfinished chunked body) tells the
        # client the answer is incomplete; closing the connection makes sure it notices.
        raise ConnectionAbortedError(failure)
    code = "upstream_timeout" if "sent nothing" in failure else "upstream_error"
    status = 504 if code == "upstream_timeout" else 502
    event = json.dumps(envelope(failure, status, code=code))
    await response.write(f"\n\ndata: {event}\n\n".encode())
    await response.write_eof()
    return response
