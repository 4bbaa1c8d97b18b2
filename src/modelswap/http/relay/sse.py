"""Server-sent event streams modelswap itself writes (events, logs, start progress)."""

from __future__ import annotations

import json

from aiohttp import web

from modelswap.http.error_responses import anthropic_envelope
from modelswap.http.route_table import ANTHROPIC_PATHS

SSE_HEADERS = {
    "Content-Type": "text/event-stream; charset=utf-8",
    "Cache-Control": "no-cache",
    "X-Accel-Buffering": "no",  # tell any proxy in front not to buffer it
}


def event_stream() -> web.StreamResponse:
    """A 200 event-stream response, not yet prepared."""
    return web.StreamResponse(status=200, headers=SSE_HEADERS)


def error_event(path: str, envelope: dict[str, object], status: int) -> bytes:
    """The final event of a stream that fails, in the shape the route's clients read:
    Anthropic's ``event: error`` on its routes, else OpenAI's ``data: {"error": …}``.
    One ``data:`` line (an SSE data line cannot hold a newline; JSON escapes its own)."""
    if path in ANTHROPIC_PATHS:
        return (
            b"event: error\ndata: "
            + json.dumps(anthropic_envelope(envelope, status)).encode()
            + b"\n\n"
        )
    return b"data: " + json.dumps(envelope).encode() + b"\n\n"
