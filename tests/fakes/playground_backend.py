"""A fake backend for the web UI's Playground tabs: every OpenAI API the tabs use, answered
with deterministic content. A real program, started by the gateway as a model's ``cmd``:

    python tests/fakes/playground_backend.py --port 8081 --model fake

* ``POST /v1/chat/completions`` (streamed or not): the answer is an echo of what arrived
  (``system: …``, the content part types, ``image_url`` prefixes and sizes, the last user text),
  or the text of ``--answer-file``; ``--reasoning TEXT`` sends ``reasoning_content`` deltas first;
  ``--token-delay S`` waits between deltas (a stream to stop).
* ``POST /v1/images/generations``: ``n`` PNGs of the asked ``size`` (``b64_json``), coloured by
  the prompt.
* ``POST /v1/audio/speech``: a short WAV tone whose pitch follows the input; the asked voice and
  format are echoed in ``X-Fake-Voice`` / ``X-Fake-Format``.
* ``POST /v1/audio/transcriptions`` (multipart): ``{"text": "<file name>: <size> bytes, model
  <model>"}``.
* ``POST /v1/rerank`` (also ``/rerank``, ``/v1/reranking``): documents scored by the share of
  query words they contain, best first.

``--serves chat,images,…`` limits what it answers; anything else gets a 404 in OpenAI's error
shape, as a backend that does not serve that API would. Only the standard library and aiohttp.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import hashlib
import json
import math
import struct
import sys
import time
import zlib
from pathlib import Path
from typing import Any

from aiohttp import web

APIS = {
    "/v1/chat/completions": "chat",
    "/v1/images/generations": "images",
    "/v1/audio/speech": "speech",
    "/v1/audio/transcriptions": "transcription",
    "/v1/rerank": "rerank",
    "/v1/reranking": "rerank",
    "/rerank": "rerank",
}
ALL = ("chat", "images", "speech", "transcription", "rerank")
SAMPLE_RATE = 8000


def error(status: int, message: str, kind: str = "invalid_request_error") -> web.Response:
    body = {"error": {"message": message, "type": kind, "code": status}}
    return web.json_response(body, status=status)


def png(rgb: tuple[int, int, int], size: int = 32) -> bytes:
    """A ``size``×``size`` PNG: ``rgb`` fading to black from top to bottom."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        crc = zlib.crc32(kind + data) & 0xFFFFFFFF
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)

    rows = b"".join(
        b"\x00" + bytes(c * (size - y) // size for c in rgb) * size for y in range(size)
    )
    header = struct.pack(">IIBBBBB", size, size, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


def wav(frequency: float, seconds: float = 0.4) -> bytes:
    """A mono 16-bit PCM WAV tone."""
    frames = int(SAMPLE_RATE * seconds)
    samples = b"".join(
        struct.pack("<h", int(8000 * math.sin(2 * math.pi * frequency * i / SAMPLE_RATE)))
        for i in range(frames)
    )
    fmt = struct.pack("<HHIIHH", 1, 1, SAMPLE_RATE, SAMPLE_RATE * 2, 2, 16)
    data = b"fmt " + struct.pack("<I", len(fmt)) + fmt
    data += b"data" + struct.pack("<I", len(samples)) + samples
    return b"RIFF" + struct.pack("<I", 4 + len(data)) + b"WAVE" + data


def words(text: str) -> set[str]:
    return {w.strip(".,;:!?").lower() for w in text.split() if w.strip(".,;:!?")}


def echo_answer(body: dict[str, Any]) -> str:
    """What arrived, in words: the tests read it in the answer bubble."""
    messages = body.get("messages") or []
    system = [m.get("content") for m in messages if m.get("role") == "system"]
    parts: list[str] = []
    last = ""
    for m in messages:
        if m.get("role") != "user":
            continue
        content = m.get("content")
        if isinstance(content, str):
            parts.append("text")
            last = content
            continue
        for part in content or []:
            parts.append(str(part.get("type")))
            if part.get("type") == "text":
                last = str(part.get("text"))
            if part.get("type") == "image_url":
                url = str((part.get("image_url") or {}).get("url", ""))
                head, _, data = url.partition(",")
                parts[-1] += f" {head} ({len(base64.b64decode(data or ''))} bytes)"
    sys_text = system[0] if system else "none"
    return f"system: {sys_text} · turns: {len(messages)} · parts: {', '.join(parts)} · last: {last}"


class Backend:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.serves = set(args.serves.split(","))
        self.answer = Path(args.answer_file).read_text() if args.answer_file else None

    async def dispatch(self, request: web.Request) -> web.StreamResponse:
        path = request.path
        if request.method == "GET" and path == "/health":
            return web.json_response({"status": "ok"})
        if request.method == "GET" and path in ("/v1/models", "/models"):
            row = {"id": self.args.model, "object": "model", "owned_by": "fake"}
            return web.json_response({"object": "list", "data": [row]})
        api = APIS.get(path)
        if request.method != "POST" or api is None or api not in self.serves:
            return error(404, f"this server does not serve {request.method} {path}", "not_found")
        if api == "transcription":
            return await self.transcription(request)
        try:
            body = await request.json()
        except ValueError:
            return error(400, "the body is not JSON")
        handler = getattr(self, api)
        response: web.StreamResponse = await handler(request, body)
        return response

    async def chat(self, request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
        text = self.answer if self.answer is not None else echo_answer(body)
        pieces = [p + " " for p in text.split(" ")]
        pieces[-1] = pieces[-1][:-1]
        reasoning = [p + " " for p in self.args.reasoning.split(" ")] if self.args.reasoning else []
        max_tokens = int(body.get("max_tokens") or 10_000)
        finish = "length" if len(pieces) > max_tokens else "stop"
        pieces = pieces[:max_tokens]
        model = body.get("model", self.args.model)
        usage = {
            "prompt_tokens": 5,
            "completion_tokens": len(pieces) + len(reasoning),
            "total_tokens": 5 + len(pieces) + len(reasoning),
        }
        if not body.get("stream"):
            message = {"role": "assistant", "content": "".join(pieces)}
            if reasoning:
                message["reasoning_content"] = "".join(reasoning).strip()
            choice = {"index": 0, "message": message, "finish_reason": finish}
            return web.json_response(
                {
                    "id": "chatcmpl-fake",
                    "object": "chat.completion",
                    "model": model,
                    "choices": [choice],
                    "usage": usage,
                }
            )
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)

        async def send(delta: dict[str, Any], finish_reason: str | None = None) -> None:
            event = {
                "id": "chatcmpl-fake",
                "object": "chat.completion.chunk",
                "created": int(time.time()),
                "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
            }
            await resp.write(f"data: {json.dumps(event)}\n\n".encode())

        await send({"role": "assistant", "content": ""})
        for kind, piece in [("reasoning_content", r) for r in reasoning] + [
            ("content", p) for p in pieces
        ]:
            if self.args.token_delay:
                await asyncio.sleep(self.args.token_delay)
            await send({kind: piece})
        await send({}, finish)
        if (body.get("stream_options") or {}).get("include_usage"):
            tail = {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "model": model}
            await resp.write(
                f"data: {json.dumps({**tail, 'choices': [], 'usage': usage})}\n\n".encode()
            )
        await resp.write(b"data: [DONE]\n\n")
        return resp

    async def images(self, _request: web.Request, body: dict[str, Any]) -> web.Response:
        prompt = body.get("prompt")
        if not isinstance(prompt, str) or not prompt.strip():
            return error(400, "`prompt` is required")
        digest = hashlib.sha256(prompt.encode()).digest()
        n = int(body.get("n") or 1)
        width = str(body.get("size") or "256x256").split("x")[0]
        size = min(1024, int(width)) if width.isdigit() else 256
        data = [
            {
                "b64_json": base64.b64encode(
                    png((digest[i], digest[i + 1], digest[i + 2]), size)
                ).decode(),
                "revised_prompt": prompt,
            }
            for i in range(n)
        ]
        return web.json_response({"created": int(time.time()), "data": data})

    async def speech(self, _request: web.Request, body: dict[str, Any]) -> web.Response:
        text = body.get("input")
        if not isinstance(text, str) or not text.strip():
            return error(400, "`input` is required")
        frequency = 220 + hashlib.sha256(text.encode()).digest()[0] * 2
        headers = {
            "X-Fake-Voice": str(body.get("voice", "")),
            "X-Fake-Format": str(body.get("response_format", "")),
        }
        return web.Response(body=wav(frequency), content_type="audio/wav", headers=headers)

    async def transcription(self, request: web.Request) -> web.Response:
        form = await request.post()
        upload = form.get("file")
        if not isinstance(upload, web.FileField):
            return error(400, "the form has no `file` part")
        size = len(upload.file.read())
        model = form.get("model")
        text = f"{upload.filename}: {size} bytes, model {model if isinstance(model, str) else '?'}"
        if form.get("response_format") == "text":
            return web.Response(text=text)
        return web.json_response({"text": text})

    async def rerank(self, _request: web.Request, body: dict[str, Any]) -> web.Response:
        query, documents = body.get("query"), body.get("documents")
        if not isinstance(query, str) or not isinstance(documents, list) or not documents:
            return error(400, "`query` (a string) and `documents` (a non-empty list) are required")
        asked = words(query)
        results: list[dict[str, Any]] = [
            {
                "index": i,
                "relevance_score": round(len(asked & words(str(d))) / max(1, len(asked)), 4),
                "document": {"text": str(d)},
            }
            for i, d in enumerate(documents)
        ]
        results.sort(key=lambda r: (-r["relevance_score"], r["index"]))
        if isinstance(body.get("top_n"), int):
            results = results[: body["top_n"]]
        usage = {"prompt_tokens": len(asked), "total_tokens": len(asked)}
        return web.json_response({"model": body.get("model"), "results": results, "usage": usage})


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--model", default="fake")
    p.add_argument("--serves", default=",".join(ALL), help=f"comma list of {', '.join(ALL)}")
    p.add_argument("--answer-file", default=None, help="answer every chat with this text")
    p.add_argument("--reasoning", default="", help="reasoning_content sent before the answer")
    p.add_argument("--token-delay", type=float, default=0.0, help="seconds between deltas")
    args = p.parse_args(argv)
    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_route("*", "/{tail:.*}", Backend(args).dispatch)
    print(f"playground fake listening on {args.host}:{args.port}", flush=True)
    web.run_app(app, host=args.host, port=args.port, print=None, access_log=None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
