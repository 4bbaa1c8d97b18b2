"""CORS, off unless ``security.corsOrigins`` lists origins. Preflights are answered before
authentication (browsers send them without credentials); every response to an allowed origin,
streamed ones included, gets ``Access-Control-Allow-Origin`` as its headers go out."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

ALLOW_HEADERS = "Authorization, Content-Type, x-api-key, anthropic-version, OpenAI-Beta"
ALLOW_METHODS = "GET, POST, OPTIONS"
MAX_AGE = "600"
# What a page may read of an answer beyond the basics: the id to quote, whose error it is.
EXPOSE_HEADERS = "X-Request-Id, X-Modelswap-Error, X-Modelswap-Hint, Retry-After"


class Cors:
    def __init__(self, origins: tuple[str, ...] | Callable[[], tuple[str, ...]]) -> None:
        """``origins``, or a function returning the current ones (a reload changes them)."""
        self._origins = origins if callable(origins) else lambda: origins

    def allowed_origin(self, request: web.Request) -> str | None:
        origin = request.headers.get("Origin")
        allowed = self._origins()
        if not origin or not allowed:
            return None
        return origin if origin in allowed or "*" in allowed else None

    @web.middleware
    async def preflight(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.method != "OPTIONS" or "Access-Control-Request-Method" not in request.headers:
            return await handler(request)
        origin = self.allowed_origin(request)
        if origin is None:
            return web.Response(status=403, text="CORS origin not allowed")
        return web.Response(
            status=204,
            headers={
                "Access-Control-Allow-Origin": origin,
                "Access-Control-Allow-Methods": ALLOW_METHODS,
                "Access-Control-Allow-Headers": ALLOW_HEADERS,
                "Access-Control-Max-Age": MAX_AGE,
                "Vary": "Origin",
            },
        )

    async def on_prepare(self, request: web.Request, response: web.StreamResponse) -> None:
        origin = self.allowed_origin(request)
        if origin is not None:
            response.headers["Access-Control-Allow-Origin"] = origin
            response.headers["Access-Control-Expose-Headers"] = EXPOSE_HEADERS
            response.headers["Vary"] = "Origin"
