"""The count of requests being answered, and the shutdown's wait for it.

On SIGTERM/SIGINT ``serving.serve`` calls :meth:`Drain.drain`. From then on every request gets
503 ``shutting_down`` (:mod:`modelswap.http.middleware.draining`; the fast door hands every
request to aiohttp's path then) while the requests already being answered run to their end, for
at most the drain's timeout. Watch streams (``/api/events``, ``/logs/stream``) never end by
themselves: they are not waited for, and :meth:`Drain.end_watches` ends them.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable

from aiohttp import web


class Drain:
    """Counts the requests being answered; :meth:`drain` turns new ones away and waits."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self.answering = 0
        self.watches: set[asyncio.Task[object]] = set()
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
        for task in list(self.watches):
            task.cancel()

    def begin(self) -> None:
        """One more request is being answered."""
        self.answering += 1

    def end(self) -> None:
        self.answering -= 1
        if not self.answering:
            self._settled.set()


DRAIN: web.AppKey[Drain] = web.AppKey("drain", Drain)
