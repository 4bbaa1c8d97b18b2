"""llama-swap's ``globalConcurrencyLimit``: how many requests routed to a model (any model,
a peer's included) are served at once across the gateway. One more is answered at once with
429 and ``Retry-After`` — never queued — so a client backs off and retries, as it does after
llama-swap's own 429. A model's ``concurrencyLimit`` and ``maxInFlight`` keep extra requests
waiting instead; this limit sits in front of them.

0 (the default): nothing is counted — the middleware returns to the handler after one
comparison, so a config without the key pays nothing for it.

A refusal says which limit refused it (issue 41): ``error.limit`` is ``{"name":
"globalConcurrencyLimit", "value": 2, "in_flight": 2}``, and the model the request named is
read from its body (a declared length up to :data:`MODEL_READ_CAP` only: a refusal must stay
cheap) into the request's observation, so its activity row names the model.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web

from modelswap.errors import BadRequestError
from modelswap.http.error_responses import error_response
from modelswap.http.relay.extract import extract_model
from modelswap.http.request_obs import OBS
from modelswap.http.route_table import model_routed

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

CODE = "concurrency_limit"
RETRY_AFTER = "1"  # seconds: a slot frees as soon as any request in flight ends
NAME = "globalConcurrencyLimit"
MODEL_READ_CAP = 1024 * 1024  # bytes of a refused body read to name its model in the record


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
            await _note_model(request)
            response = error_response(
                f"Too many requests: {limit} are being served already ({NAME}); retry later.",
                429,
                code=CODE,
                limit={"name": NAME, "value": limit, "in_flight": self.in_flight},
            )
            response.headers["Retry-After"] = RETRY_AFTER
            return response
        self.in_flight += 1
        try:
            return await handler(request)
        finally:
            self.in_flight -= 1


async def _note_model(request: web.Request) -> None:
    """The model a refused request named, into its observation (what its row shows): read
    only from a body of declared length up to :data:`MODEL_READ_CAP`, never waited for
    longer; a body without one, or with no readable ``model``, leaves the row without."""
    obs = request.get(OBS)
    length = request.content_length
    if obs is None or obs.requested is not None or not length or length > MODEL_READ_CAP:
        return
    try:
        body = await request.read()
        obs.requested = extract_model(request.headers.get("Content-Type", ""), body)
    except (BadRequestError, web.HTTPException, ConnectionError):
        return
