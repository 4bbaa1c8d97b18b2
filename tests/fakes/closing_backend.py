"""A backend that closes a kept-alive connection instead of answering its next request.

    python tests/fakes/closing_backend.py --port N

Each connection gets one answer, sent with keep-alive (no ``Connection: close``); the next
request on that connection is read and the socket closed without a reply — what llama.cpp's
server does to a connection past its keep-alive time, and any server may do to an idle
connection a client's pool still holds. ``GET /health`` answers 200; ``POST`` anything answers a
one-word chat completion. ``GET /served`` says how many requests were answered and how many
connections were closed unanswered. Only the standard library.
"""

from __future__ import annotations

import argparse
import asyncio
import json

COUNTS = {"answered": 0, "closed_unanswered": 0}
COMPLETION = {
    "id": "chatcmpl-closing",
    "object": "chat.completion",
    "created": 0,
    "model": "closing",
    "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}
    ],
    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
}


async def read_request(reader: asyncio.StreamReader) -> tuple[str, str] | None:
    """(method, path) of one request, its body read and dropped; None at end of file."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, ConnectionError):
        return None
    lines = head.decode("latin-1").split("\r\n")
    method, path, _ = lines[0].split(" ", 2)
    length = 0
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            length = int(value.strip())
    if length:
        await reader.readexactly(length)
    return method, path


async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        first = await read_request(reader)
        if first is None:
            return
        method, path = first
        if path == "/served":
            body = json.dumps(COUNTS).encode()
        elif method == "GET":
            body = b"{}" if path == "/health" else b'{"object": "list", "data": []}'
        else:
            body = json.dumps(COMPLETION).encode()
            COUNTS["answered"] += 1
        head = (
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nKeep-Alive: timeout=60\r\n\r\n"
        )
        writer.write(head.encode() + body)
        await writer.drain()
        if await read_request(reader) is not None:  # kept alive, then closed unanswered
            COUNTS["closed_unanswered"] += 1
    except ConnectionError:
        pass
    finally:
        writer.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    server = await asyncio.start_server(serve, "127.0.0.1", args.port)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main())
