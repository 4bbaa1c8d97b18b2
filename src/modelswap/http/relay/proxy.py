"""aiohttp's door into the relay (:mod:`modelswap.http.relay.relay`): a route's request to a
local model or a peer, with its answer written through a :class:`ResponseSink`.

The lease is released when the body has been relayed or the client went away (the handler is
cancelled on disconnect; the relay closes the upstream answer, which cancels the backend's work,
and releases the lease) — never when the handler merely returns.
"""

from __future__ import annotations

import logging

from aiohttp import web

from modelswap.config import ModelConfig
from modelswap.errors import ModelswapError, UpstreamUnreachableError
from modelswap.http.reading import request_id
from modelswap.http.relay.client_transport import ClientTransport
from modelswap.http.relay.relay import Outgoing, Upstream, relay
from modelswap.http.relay.response_sink import ResponseSink
from modelswap.http.relay.waiting import WaitingStream, fail_or_raise
from modelswap.http.request_obs import OBS
from modelswap.routing.local import Lease
from modelswap.runtime import Runtime

log = logging.getLogger(__name__)


def local_upstream(
    runtime: Runtime, lease: Lease, model: ModelConfig, *, raise_5xx: bool = False
) -> Upstream:
    """A leased local backend, reached on aiohttp's client."""
    config = lease.config
    timeouts = model.timeouts
    return Upstream(
        lease.model,
        ClientTransport(runtime.session_for(timeouts), config.proxy, timeouts),
        config.upstream_api_key,
        timeouts,
        lease.release,
        raise_5xx,
    )


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
    sink = ResponseSink(request)
    waiting = WaitingStream(request, runtime, sink) if stream else None
    try:
        return await attempt_local(
            request, runtime, model, path_qs=path_qs, body=body, sink=sink, waiting=waiting
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
    sink: ResponseSink,
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
        upstream = local_upstream(runtime, lease, model, raise_5xx=raise_5xx)
        try:
            return await forward(request, runtime, upstream, path_qs=path_qs, body=body, sink=sink)
        except UpstreamUnreachableError:
            if attempt == 2 or not await lease.confirm_exit():
                raise
            log.info("model %s: backend had died; starting it again", model.id)
    raise AssertionError("unreachable")


async def forward(
    request: web.Request,
    runtime: Runtime,
    upstream: Upstream,
    *,
    path_qs: str,
    body: bytes,
    sink: ResponseSink,
) -> web.StreamResponse:
    """Relay the request to ``upstream``, its answer into ``sink`` (see :func:`relay`)."""
    outgoing = Outgoing(
        request.method, request.path, path_qs, request.raw_headers, request_id(request), body
    )
    await relay(outgoing, upstream, sink, runtime.redactor, request.get(OBS))
    if sink.cut is not None:
        raise ConnectionAbortedError(sink.cut)  # aiohttp closes the connection
    assert sink.response is not None
    return sink.response
