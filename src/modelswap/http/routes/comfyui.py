"""llama-swap's ComfyUI pass-through: ``/comfyui/<path>`` is ``<path>`` of the model
``comfyui_auto``'s server, any method, body and query as they came.

As in llama-swap: ``/comfyui`` redirects to ``/comfyui/`` (301 for GET and HEAD, else 308, the
query kept); without a model ``comfyui_auto`` every path is 404; and only the root
``/comfyui/`` may start the model — any other path while it is not ready is 409, so a browser
tab left open on ComfyUI's assets or API never loads it again after it was unloaded.
Its websocket (``/comfyui/ws``) is relayed while the model is ready.
"""

from __future__ import annotations

import asyncio

import aiohttp
from aiohttp import web

from modelswap.http.app_keys import RUNTIME
from modelswap.http.error_responses import error_response
from modelswap.http.reading import body_limit, check_upstream_path, raw_query, read_body
from modelswap.http.relay.dispatch import send_to_model
from modelswap.http.route_table import ADMIN, COMFYUI_MODEL, declare


async def comfyui_root(request: web.Request) -> web.Response:
    location = "/comfyui/" + raw_query(request)
    moved = request.method in ("GET", "HEAD")
    return web.Response(status=301 if moved else 308, headers={"Location": location})


async def comfyui(request: web.Request) -> web.StreamResponse:
    runtime = request.app[RUNTIME]
    model = runtime.config.models.get(COMFYUI_MODEL)
    if model is None:
        return error_response(f"local model {COMFYUI_MODEL} not found", 404, code="not_found")
    rest = request.match_info["rest"]
    if rest:
        check_upstream_path(request.raw_path, rest)
        if not runtime.model(model.id).ready:
            return error_response(
                f"model {COMFYUI_MODEL} is not loaded; only /comfyui/ can start it",
                409,
                code="conflict",
            )
    path = "/" + rest + raw_query(request)
    if rest and _is_websocket(request):  # ComfyUI's /ws: progress and queue updates
        base = runtime.model(model.id).config.proxy
        return await relay_websocket(request, runtime.proxy_session, base + path)
    content_type = request.headers.get("Content-Type", "")
    body = await read_body(request, body_limit(runtime, content_type))
    return await send_to_model(request, runtime, model, path_qs=path, body=body)


def _is_websocket(request: web.Request) -> bool:
    upgrade = request.headers.get("Upgrade", "").lower()
    return upgrade == "websocket" and "upgrade" in request.headers.get("Connection", "").lower()


async def relay_websocket(
    request: web.Request, session: aiohttp.ClientSession, url: str
) -> web.StreamResponse:
    """Relay messages both ways until either side closes. Like llama-swap (its
    ``ignoreWebsockets`` for comfyui_auto), an open websocket holds no lease: it never keeps
    the model from being unloaded, and it ends when the server goes."""
    try:
        upstream = await session.ws_connect(url, timeout=aiohttp.ClientWSTimeout(ws_close=5))
    except (aiohttp.ClientError, OSError) as exc:
        return error_response(f"ComfyUI websocket: {exc}", 502, code="upstream_error")
    client = web.WebSocketResponse()
    await client.prepare(request)

    async def pump(
        source: web.WebSocketResponse | aiohttp.ClientWebSocketResponse,
        target: web.WebSocketResponse | aiohttp.ClientWebSocketResponse,
    ) -> None:
        async for msg in source:
            if msg.type == aiohttp.WSMsgType.TEXT:
                await target.send_str(msg.data)
            elif msg.type == aiohttp.WSMsgType.BINARY:
                await target.send_bytes(msg.data)

    try:
        tasks = [
            asyncio.ensure_future(pump(client, upstream)),
            asyncio.ensure_future(pump(upstream, client)),
        ]
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    finally:
        await upstream.close()
        await client.close()
    return client


def add_routes(app: web.Application) -> None:
    declare(app, "*", "/comfyui", comfyui_root, ADMIN)
    declare(app, "*", "/comfyui/{rest:.*}", comfyui, ADMIN)
