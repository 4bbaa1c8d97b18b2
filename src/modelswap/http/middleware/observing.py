"""Per-request observation on aiohttp's side: a thin adapter over
:class:`~modelswap.http.tracking.scope.RequestScope` (one per model request, inference and
``/upstream``), which the fast door uses directly.

The relay fills in what only it knows through :class:`RequestObs`: the model, the time to the
backend's first byte, the bytes relayed and the token usage — and, when the answer was an error
*event* inside a 200 stream (a stream opened early with loading comments, or cut mid-answer),
that error's code, so the record says "error" and not "200 ok".
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from aiohttp import web

from modelswap import jsonsafe
from modelswap.errors import echo
from modelswap.http.app_keys import RUNTIME, client_key
from modelswap.http.error_responses import GATEWAY_ERROR_HEADER, explained
from modelswap.http.middleware.cors import PREFLIGHT, Preflight
from modelswap.http.reading import request_id
from modelswap.http.request_obs import OBS
from modelswap.http.tracking.inflight import INFLIGHT
from modelswap.http.tracking.scope import SCOPE, RequestScope, observed

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def explain(scope: RequestScope, response: web.StreamResponse) -> None:
    """The gateway's own error answer, read into ``scope``: its code, its message and the rule
    behind it (a policy's, a limit's), in OpenAI's envelope or Anthropic's."""
    if GATEWAY_ERROR_HEADER not in response.headers or not isinstance(response, web.Response):
        return
    try:
        body = response.body
        why = explained(jsonsafe.loads(body if isinstance(body, bytes) else b"{}"))
    except ValueError:
        return
    if why is not None:
        scope.code, scope.error_message, scope.rule = why.code, why.message, why.rule


@web.middleware
async def observe_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    runtime = request.app[RUNTIME]
    if not runtime.observing or not observed(request.path):
        return await handler(request)
    scope = RequestScope(
        runtime,
        request.path,
        method=request.method,
        request_id=request_id(request),
        remote=request.remote,
        headers=request.headers,
        registry=request.app.get(INFLIGHT),
    )
    request[SCOPE] = scope
    request[OBS] = scope.obs
    response = None
    try:
        response = await handler(request)
        scope.status = response.status
        explain(scope, response)
        if preflight := request.get(PREFLIGHT):  # a browser's CORS check: its origin, echoed
            origin = echo(preflight.origin) if preflight.origin is not None else None
            scope.rule = Preflight(origin, preflight.allowed).rule()
        return response
    except asyncio.CancelledError:
        response = scope.cancelled(answered=scope.response_headers is not None)
        if response is None:
            raise
        return response
    except web.HTTPException as exc:
        scope.status = exc.status
        raise
    finally:
        obs = scope.obs
        if response is not None and not obs.bytes_out and isinstance(response, web.Response):
            obs.bytes_out = response.content_length or 0
        if scope.response_headers is None and response is not None:
            scope.response_headers = response.headers  # a Response returned is prepared after us
        scope.key = client_key(request)
        scope.finish()


async def on_prepare(request: web.Request, response: web.StreamResponse) -> None:
    """The response whose headers go out, for the in-flight listing (once per request)."""
    scope = request.get(SCOPE)
    if scope is not None:
        scope.response_headers = response.headers
