"""A fake ComfyUI server for modelswap's ``/comfyui/`` tests: a real program.

    python tests/fakes/comfyui_server.py --port 8188

``GET /health`` answers ok, ``/ws`` is a websocket that sends ``{"type": "status"}`` first and
then echoes every text and binary message (``"close"`` makes it close), and every other path
echoes the request (method, path, query) as JSON. Only the standard library and aiohttp.
"""

from __future__ import annotations

import argparse
import json

from aiohttp import WSMsgType, web


async def health(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def websocket(request: web.Request) -> web.WebSocketResponse:
    ws = web.WebSocketResponse()
    await ws.prepare(request)
    await ws.send_str(json.dumps({"type": "status", "sid": request.query.get("clientId", "")}))
    async for msg in ws:
        if msg.type == WSMsgType.TEXT:
            if msg.data == "close":
                break
            await ws.send_str(msg.data)
        elif msg.type == WSMsgType.BINARY:
            await ws.send_bytes(msg.data)
    await ws.close()
    return ws


async def echo(request: web.Request) -> web.Response:
    body = await request.read()
    return web.json_response(
        {
            "method": request.method,
            "path": request.path,
            "query": request.query_string,
            "body": body.decode("utf-8", "replace"),
        }
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    app = web.Application()
    app.router.add_get("/health", health)
    app.router.add_get("/ws", websocket)
    app.router.add_route("*", "/{tail:.*}", echo)
    web.run_app(app, host="127.0.0.1", port=args.port, print=None)


if __name__ == "__main__":
    main()
