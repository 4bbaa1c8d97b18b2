"""``GET /api/peers``: each peer's address, breaker state and models (never its key)."""

from __future__ import annotations

from aiohttp import web

from modelswap.http.app_keys import RUNTIME
from modelswap.http.route_table import READ, declare


async def peers(request: web.Request) -> web.Response:
    return web.json_response({"peers": request.app[RUNTIME].peer_status()})


def add_routes(app: web.Application) -> None:
    declare(app, "GET", "/api/peers", peers, READ)
