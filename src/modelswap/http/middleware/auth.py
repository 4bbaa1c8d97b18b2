"""Client authentication and authorisation: keys with scopes, compared in constant time.

The scope each route needs is declared with it (:func:`modelswap.http.route_table.declare`).
With no ``apiKeys`` configured every route is open — modelswap then listens on loopback only (the
exposure policy in ``config.security``).

A wrong key is answered 401 after a wait that grows with recent failures
(:mod:`modelswap.http.tracking.failure_limiter`); a valid key is answered at once, whatever came
before it. A request served with a valid key, or with no keys configured, is marked
``AUTHORISED``: its connection is then at work, out of its client's connection share
(``http/server/connections.py``); an open route reached without a key is not.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web
from aiohttp.typedefs import Middleware

from modelswap.config.resolved import ApiKey
from modelswap.http.app_keys import AUTHORISED, CLIENT, Client
from modelswap.http.error_responses import error_response
from modelswap.http.reading import match_key, presented_key
from modelswap.http.route_table import ANY, OPEN, scope_of
from modelswap.http.tracking.failure_limiter import FailureLimiter
from modelswap.http.tracking.scope import SCOPE

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


KeySource = tuple[ApiKey, ...] | Callable[[], tuple[ApiKey, ...]]


def auth_middleware(keys: KeySource, limiter: FailureLimiter) -> Middleware:
    """``keys``: the keys, or a function returning the current ones (a reload changes them)."""
    current = keys if callable(keys) else lambda: keys

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        request[CLIENT] = Client(None)
        needed = scope_of(request)
        keys = current()
        if not keys:
            request[AUTHORISED] = True
            return await handler(request)
        if needed == OPEN:
            return await handler(request)
        presented = presented_key(request.headers)
        key = match_key(keys, presented) if presented else None
        if key is None:
            # Only a wrong key is a guess; a missing one tells a client nothing.
            wait = limiter.failed(request.remote) if presented is not None else 0.0
            if wait > 0:
                await limiter.sleep(wait)
            response = error_response(
                "Missing API key." if presented is None else "Invalid API key.",
                401,
                code="invalid_api_key",
            )
            response.headers["WWW-Authenticate"] = 'Bearer realm="modelswap"'
            return response
        if needed != ANY and needed not in key.scopes:
            return error_response(
                f"This key ({key.name}) lacks the `{needed}` scope for {request.path}.",
                403,
                code="insufficient_scope",
            )
        request[CLIENT] = Client(key)
        request[AUTHORISED] = True
        scope = request.get(SCOPE)
        if scope is not None:
            scope.key = key
        return await handler(request)

    return middleware
