"""Graceful shutdown, aiohttp's side: every request after the drain began gets 503
``shutting_down`` with ``Retry-After`` and ``Connection: close`` — ``/health`` too, so that a
load balancer stops sending; every request answered is counted in the :class:`Drain`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from aiohttp import web
from aiohttp.typedefs import Middleware

from modelswap.http.error_responses import GATEWAY_ERROR_HEADER, envelope
from modelswap.http.tracking.drain import Drain

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

WATCH_PATHS = ("/api/events", "/logs/stream")


def shutting_down(request: web.Request, retry_after: int) -> web.Response:
    """503 ``shutting_down`` in the OpenAI envelope; ``/health`` also says ``status``."""
    body: dict[str, object] = envelope("modelswap is shutting down.", 503, code="shutting_down")
    if request.path == "/health":
        body = {"status": "shutting_down", **body}
    response = web.json_response(
        body,
        status=503,
        headers={GATEWAY_ERROR_HEADER: "1", "Retry-After": str(retry_after)},
    )
    response.force_close()
    return response


def drain_middleware(drain: Drain) -> Middleware:
    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if drain.draining:
            return shutting_down(request, drain.retry_after())
        task = asyncio.current_task()
        if request.path.startswith(WATCH_PATHS) and task is not None:
            drain.watches.add(task)
            try:
                return await handler(request)
            finally:
                drain.watches.discard(task)
        drain.begin()
        try:
            return await handler(request)
        finally:
            drain.end()

    return middleware
