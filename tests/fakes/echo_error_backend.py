"""A fake backend whose errors quote its own command line and environment, for modelswap's
redaction tests.

    python tests/fakes/echo_error_backend.py --port 8081 --api-key SECRET --hf-token TOKEN

``GET /health`` answers 200. A chat completion is answered by ``--mode``:

* ``status`` (default): HTTP 500 with a JSON error whose message and extra fields hold
  ``sys.argv`` and ``os.environ`` (as careless servers do in a debug traceback);
* ``event``: HTTP 200 event stream: one content event whose text mentions a secret-shaped
  string (the model's own answer, which must reach the client unchanged), then an error event
  quoting the argv and environment, then ``[DONE]``;
* ``text``: HTTP 500 with a plain-text traceback holding the same.

Unknown flags are accepted (a real server's configuration), so ``--api-key`` and ``--hf-token``
need no meaning here; ``--load-delay S`` waits S seconds before listening (a slow start, so
a streaming client gets its event stream opened early). Only the standard library and aiohttp
are used.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from aiohttp import web

# What the model "said": secret-shaped, but an answer's content is never altered.
ANSWER_TEXT = "Your example key could look like sk-EXAMPLEexampleEXAMPLEexample0000."


def _leak() -> dict[str, object]:
    return {"argv": sys.argv, "environ": dict(os.environ)}


def make_app(mode: str) -> web.Application:
    async def health(request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def models(request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "echo", "object": "model"}]})

    async def chat(request: web.Request) -> web.StreamResponse:
        await request.read()
        if mode == "text":
            text = f"Traceback: server started as {' '.join(sys.argv)}\nenv: {dict(os.environ)}"
            return web.Response(status=500, text=text)
        if mode == "status":
            leak = _leak()
            error = {"message": f"internal error; argv={sys.argv}", "type": "server_error"}
            return web.json_response({"error": {**error, **leak}}, status=500)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        content = {"choices": [{"index": 0, "delta": {"content": ANSWER_TEXT}}]}
        await response.write(f"data: {json.dumps(content)}\n\n".encode())
        error = {"error": {"message": f"engine died; argv={sys.argv}", **_leak()}}
        await response.write(f"data: {json.dumps(error)}\n\n".encode())
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_get("/health", health)
    app.router.add_get("/v1/models", models)
    app.router.add_post("/v1/chat/completions", chat)
    return app


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--mode", choices=("status", "event", "text"), default="status")
    parser.add_argument("--load-delay", type=float, default=0.0, help="seconds before serving")
    args, _ = parser.parse_known_args()
    print("loading", flush=True)
    time.sleep(args.load_delay)
    web.run_app(make_app(args.mode), host="127.0.0.1", port=args.port, print=None)


if __name__ == "__main__":
    main()
