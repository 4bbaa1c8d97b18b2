"""A fake vLLM server started without tool-calling flags, for modelswap's tests.

    python tests/fakes/tool_error_backend.py --port 8081 --shape new

``GET /health`` answers 200. A chat completion that carries ``tools`` is refused the way vLLM
refuses it when it was started without ``--enable-auto-tool-choice --tool-call-parser``: HTTP
400 with the body in vLLM's newer (``--shape new``) or older flat (``--shape old``) error
shape, byte for byte as in :data:`BODIES`. ``--shape other`` answers an unrelated 400 instead.
Any other chat completion gets a small 200 answer. ``--load-delay S`` listens only after S
seconds, a start long enough for a streaming client to get the gateway's loading comments.

Only the standard library and aiohttp are used; the modelswap package is never imported.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from aiohttp import web

AUTO_TOOL_CHOICE = (
    '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set'
)
BODIES: dict[str, bytes] = {
    "new": json.dumps(
        {
            "error": {
                "message": AUTO_TOOL_CHOICE,
                "type": "BadRequestError",
                "param": None,
                "code": 400,
            }
        }
    ).encode(),
    "old": json.dumps(
        {
            "object": "error",
            "message": AUTO_TOOL_CHOICE,
            "type": "BadRequestError",
            "param": None,
            "code": 400,
        }
    ).encode(),
    "other": json.dumps(
        {
            "error": {
                "message": "tools: max_tokens must be at least 1, got 0.",
                "type": "BadRequestError",
                "param": None,
                "code": 400,
            }
        }
    ).encode(),
}


def make_app(shape: str) -> web.Application:
    pid = str(os.getpid())

    async def health(request: web.Request) -> web.Response:
        return web.Response(status=200, headers={"X-Fake-Pid": pid})

    async def chat(request: web.Request) -> web.Response:
        body = await request.json()
        if isinstance(body, dict) and body.get("tools"):
            return web.Response(
                status=400,
                body=BODIES[shape],
                content_type="application/json",
                headers={"X-Fake-Pid": pid},
            )
        answer = {
            "id": "chatcmpl-tools",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model") if isinstance(body, dict) else None,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": "no tools, no problem"},
                    "finish_reason": "stop",
                }
            ],
        }
        return web.json_response(answer, headers={"X-Fake-Pid": pid})

    app = web.Application()
    app.router.add_get("/health", health)
    app.router.add_post("/v1/chat/completions", chat)
    return app


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Fake vLLM without tool-calling flags.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--shape", choices=sorted(BODIES), default="new")
    parser.add_argument("--load-delay", type=float, default=0.0, help="listen after S s")
    args = parser.parse_args(argv)
    print(f"fake backend starting: pid={os.getpid()} shape={args.shape}", flush=True)
    time.sleep(max(0.0, args.load_delay))
    web.run_app(
        make_app(args.shape),
        host=args.host,
        port=args.port,
        print=None,
        access_log=None,
        shutdown_timeout=0.1,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
