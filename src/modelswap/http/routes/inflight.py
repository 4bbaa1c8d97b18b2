"""``GET /api/inflight`` and ``POST /api/inflight/{id}/cancel`` (llama-swap's in-flight table).

llama-swap sends the table only as ``inflight`` events of ``/api/events``
(``{"operation": "snapshot", "requests": [...]}``); modelswap serves that same snapshot object
on a GET. Cancelling answers llama-swap's ``{"msg": "ok"}``, or 404 ``inflight request not
found``; see :mod:`modelswap.http.tracking.inflight` for what a cancel does.
"""

from __future__ import annotations

from aiohttp import web

from modelswap.http.app_keys import RUNTIME
from modelswap.http.error_responses import error_response
from modelswap.http.route_table import ADMIN, READ, declare
from modelswap.http.tracking.inflight import INFLIGHT, describe


async def inflight(request: web.Request) -> web.Response:
    runtime = request.app[RUNTIME]
    rows = []
    for entry in request.app[INFLIGHT].entries():
        obs = entry.request.obs
        key = entry.request.key
        rows.append(
            describe(
                entry,
                runtime.redactor,
                model=obs.model,
                requested=obs.requested,
                bytes_out=obs.bytes_out,
                key_name=key.name if key is not None else None,
                # the backend's status arrived (an event stream opened early is still waiting)
                relaying=obs.status is not None,
                error_code=obs.error_code,
            )
        )
    return web.json_response({"operation": "snapshot", "requests": rows})


async def cancel(request: web.Request) -> web.Response:
    """By llama-swap's id (``1``, ``2``, …) or by the request's ``X-Request-Id``."""
    runtime = request.app[RUNTIME]
    wanted = request.match_info["id"]
    entry = request.app[INFLIGHT].cancel(wanted)
    if entry is None:
        return error_response("inflight request not found", 404, code="not_found")
    runtime.publish("request.cancelled", id=entry.id, request_id=entry.request.request_id)
    return web.json_response({"msg": "ok"})


def add_routes(app: web.Application) -> None:
    declare(app, "GET", "/api/inflight", inflight, READ)
    declare(app, "POST", "/api/inflight/{id}/cancel", cancel, ADMIN)  # a read key cannot cancel
