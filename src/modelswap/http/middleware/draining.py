"""Graceful shutdown: the answers in flight finish while new requests are turned away.

On SIGTERM/SIGINT ``serving.serve`` calls :meth:`Drain.drain`. From then on every request gets
503 ``shutting_down`` with ``Retry-After`` and ``Connection: close`` — ``/health`` too, so that a
load balancer stops sending — while the requests already being answered run to their end, for
at most the drain's timeout. Watch streams (``/api/events``, ``/logs/stream``) never end by
themselves: they are not waited for, and :meth:`Drain.end_watches` ends them. Only then does the
listener close.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable

from aiohttp import web
from aiohttp.typedefs import Middleware

from modelswap.http.error_responses import GATEWAY_ERROR_HEADER, envelope

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

WATCH_PATHS = ("/api/events", "/logs/stream")


class Drain:
    """Counts the requests being answered; :meth:`drain` turns new ones away and waits."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self.answering = 0
        self._watches: set[asyncio.Task[object]] = set()
        self._deadline: float | None = None
        self._settled = asyncio.Event()

    @property
    def draining(self) -> bool:
        return self._deadline is not None

    def retry_after(self) -> int:
        """Seconds until the drain is over at the latest (at least 1)."""
        left = (self._deadline or 0.0) - self._clock()
        return max(1, math.ceil(left))

    async def drain(self, within: float, cut: asyncio.Event | None = None) -> int:
        """Turn new requests away and wait until those being answered are done — at most
        ``within`` seconds, or until ``cut`` is set. How many are still running."""
        self._deadline = self._clock() + within
        self._settled.clear()
        if self.answering:
            waits = [asyncio.ensure_future(self._settled.wait())]
            if cut is not None:
                waits.append(asyncio.ensure_future(cut.wait()))
            try:
                await asyncio.wait(waits, timeout=within, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for waiting in waits:
                    waiting.cancel()
        return self.answering

    def end_watches(self) -> None:
        for task in list(self._watches):
            task.cancel()

    async def answer(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if self.draining:
            return shutting_down(request, self.retry_after())
        task = asyncio.current_task()
        if request.path.startswith(WATCH_PATHS) and task is not None:
            self._watches.add(task)
            try:
                return await handler(request)
            finally:
                self._watches.discard(task)
        self.begin()
        try:
            return await handler(request)
        finally:
            self.end()

    def begin(self) -> None:
        """One more request is being answered (the fast lane's too)."""
        self.answering += 1

    def end(self) -> None:
        self.answering -= 1
        if not self.answering:
            self._settled.set()


def shutting_down(request: web.Request, retry_after: int) -> web.Response:
    """503 ``shutting_down`` in the OpenAI envelope; ``/health`` also says ``status``."""
    body: dict[str, object] = envelope("modelswap is shutting down.", 503, code="shutting_down")
    if request.path == "/health":
        body = {"status": "shutting_down", **body}
    response = web.json_response(
        body,
        status=503,
        headers={GATEWAY_ERROR_HEADER: "1", "Retry-After": str(retry_after)},
    )
    response.force_close()
    return response


def drain_middleware(drain: Drain) -> Middleware:
    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        return await drain.answer(request, handler)

    return middleware


DRAIN: web.AppKey[Drain] = web.AppKey("drain", Drain)
