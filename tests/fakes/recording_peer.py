"""A fake peer (any OpenAI-compatible server) that records every request it receives.

Each request is appended to ``--record`` as one JSON line: method, path, headers, body. Chat
answers say ``from-peer:<model>`` so a test can tell who answered. ``--status`` makes every
chat request fail with that status; ``--break-after N`` sends N stream chunks, then drops the
connection; ``--cors`` adds CORS headers of its own to every answer.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path

from aiohttp import web


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1", help="e.g. 127.0.0.2: one port, many peers")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--models", default="", help="comma-separated ids for /v1/models")
    parser.add_argument("--record", required=True)
    parser.add_argument("--status", type=int, default=200)
    parser.add_argument("--break-after", type=int, default=-1)
    parser.add_argument("--peer-row", action="store_true", help="list a row of its own peers")
    parser.add_argument(
        "--cors", action="store_true", help="send CORS headers of its own on every answer"
    )
    args = parser.parse_args()
    record = Path(args.record)

    def remember(request: web.Request, body: bytes) -> None:
        entry = {
            "method": request.method,
            "path": request.path_qs,
            "headers": dict(request.headers),
            "body": body.decode("utf-8", errors="replace"),
        }
        with record.open("a") as out:
            out.write(json.dumps(entry) + "\n")

    async def models(request: web.Request) -> web.Response:
        remember(request, b"")
        rows: list[dict[str, object]] = [
            {"id": m, "object": "model", "owned_by": "someone"} for m in args.models.split(",") if m
        ]
        if args.peer_row:
            rows.append({"id": "other/far", "object": "model", "owned_by": "other", "peer": "o"})
        return web.json_response({"object": "list", "data": rows})

    async def chat(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        remember(request, body)
        if args.status != 200:
            return web.json_response({"error": {"message": "peer is broken"}}, status=args.status)
        data = json.loads(body)
        text = f"from-peer:{data.get('model')}"
        if not data.get("stream"):
            return web.json_response(
                {
                    "id": "peer-1",
                    "object": "chat.completion",
                    "model": data.get("model"),
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": text}}],
                }
            )
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for index, token in enumerate([text, " and", " more", " words"]):
            if index == args.break_after:
                assert request.transport is not None
                request.transport.abort()
                return response
            chunk = {"id": "peer-1", "choices": [{"index": 0, "delta": {"content": token}}]}
            await response.write(f"data: {json.dumps(chunk)}\n\n".encode())
            await asyncio.sleep(0.01)
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    async def health(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def own_cors(request: web.Request, response: web.StreamResponse) -> None:
        response.headers["Access-Control-Allow-Origin"] = "*"
        response.headers["Access-Control-Allow-Credentials"] = "true"

    app = web.Application()
    if args.cors:
        app.on_response_prepare.append(own_cors)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/health", health)
    app.router.add_post("/v1/chat/completions", chat)
    web.run_app(app, host=args.host, port=args.port, print=None, handle_signals=True)


if __name__ == "__main__":
    main()
