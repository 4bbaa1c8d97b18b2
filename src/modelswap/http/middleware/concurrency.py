"""llama-swap's ``globalConcurrencyLimit``: how many requests routed to a model (any model,
a peer's included) are served at once across the gateway. One more is answered at once with
429 and ``Retry-After`` — never queued — so a client backs off and retries, as it does after
llama-swap's own 429. A model's ``concurrencyLimit`` and ``maxInFlight`` keep extra requests
waiting instead; this limit sits in front of them.

0 (the default): nothing is counted — the middleware returns to the handler after one
comparison, so a config without the key pays nothing for it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web

from modelswap.http.error_responses import error_response
from modelswap.http.route_table import model_routed

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

CODE = "concurrency_limit"
RETRY_AFTER = "1"  # seconds: a slot frees as soon as any request in flight ends


class GlobalLimit:
    """The one shared count of model-routed requests being served (event loop only)."""

    def __init__(self, limit: Callable[[], int]) -> None:
        """``limit``: the current ``globalConcurrencyLimit`` (a reload may change it)."""
        self._limit = limit
        self.in_flight = 0

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        limit = self._limit()
        if not limit or not model_routed(request.path):
            return await handler(request)
        if self.in_flight >= limit:
            response = error_response(
                f"Too many requests: {limit} are being served already "
                "(globalConcurrencyLimit); retry later.",
                429,
                code=CODE,
            )
            response.headers["Retry-After"] = RETRY_AFTER
            return response
        self.in_flight += 1
        try:
            return await handler(request)
        finally:
            self.in_flight -= 1
