"""Server-sent event streams modelswap itself writes (events, logs, start progress)."""

from __future__ import annotations

from aiohttp import web

SSE_HEADERS = {
    "Content-Type": "text/event-stream; charset=utf-8",
    "Cache-Control": "no-cache",
    "X-Accel-Buffering": "no",  # tell any proxy in front not to buffer it
}


def event_stream() -> web.StreamResponse:
    """A 200 event-stream response, not yet prepared."""
    return web.StreamResponse(status=200, headers=SSE_HEADERS)
