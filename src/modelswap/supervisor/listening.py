"""Noticing the moment a starting backend's port listens, without waking the event loop.

The kernel has no event for "a socket entered LISTEN", so something must look. Looking is cheap
(a refused loopback ``connect()``: ~20 µs); the wake-up to look is not: on a VM a timed wake of
the asyncio loop costs 200–500 µs of CPU, a sleeping thread's 40 % less (measured on a 2-core
VM, ``docs/PERFORMANCE.md``). So one daemon thread probes every port that a start waits for
and tells the start's event loop only when one accepts — the loop sleeps through the misses.
The thread runs only while some start waits; with none it blocks on a condition.

How often it looks follows what the model did before (``due``: the window in which its port
listened in its last starts): every SLOW before that window, every FAST inside it, every
INTERVAL after it or when there is no history — so a repeated start is noticed within ~1 ms
while the seconds of loading before it cost a few wake-ups. When the port listens the thread
also asks the health URL once, at once (a 200 then needs no round trip through the loop).
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import threading
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from modelswap.supervisor.health import is_listening

INTERVAL = 0.01  # no history: ~5 ms of detection delay on average
FAST = 0.002  # inside the window where the port listened before
SLOW = 0.05  # before that window
HEALTH_TIMEOUT = 0.5  # the thread's one health request; the loop's polls take over after

Target = tuple[str, int]


@dataclass(frozen=True)
class Seen:
    """When the port was first seen accepting (monotonic), and whether the health URL then
    answered 2xx at once."""

    listening_at: float
    healthy: bool


@dataclass(eq=False)
class _Watch:
    target: Target
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[Seen]
    health_url: str | None
    due: tuple[float, float] | None
    next_at: float = field(default=0.0)

    def interval(self, now: float) -> float:
        if self.due is None or now > self.due[1]:
            return INTERVAL
        if now >= self.due[0]:
            return FAST
        return min(SLOW, max(FAST, self.due[0] - now))


def due_window(started: float, history: list[float]) -> tuple[float, float] | None:
    """Where (monotonic) this start's port is likely to listen, from the seconds that the
    last starts took to listen: their range, widened by 10 % and 20–50 ms for a busier host."""
    if not history:
        return None
    return started + min(history) * 0.9 - 0.02, started + max(history) * 1.1 + 0.05


def healthy_now(url: str) -> bool:
    """One plain-HTTP GET of ``url``: True on 2xx. Anything else (https, an error, a slow
    answer) is False, and the loop's own health polls decide."""
    parts = urlsplit(url)
    if parts.scheme != "http" or parts.hostname is None:
        return False
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    conn = http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=HEALTH_TIMEOUT)
    try:
        conn.request("GET", path)
        with conn.getresponse() as response:
            response.read(65536)
            return 200 <= response.status < 300
    except (OSError, http.client.HTTPException):
        return False
    finally:
        conn.close()


def _resolve(future: asyncio.Future[Seen], seen: Seen) -> None:
    if not future.done():
        future.set_result(seen)


class ListenWatcher:
    """:meth:`watch` a loopback target: a future that resolves to :class:`Seen`. Cancel the
    future to stop watching."""

    def __init__(self) -> None:
        self._watches: list[_Watch] = []
        self._changed = threading.Condition()
        self._thread: threading.Thread | None = None

    def watch(
        self,
        target: Target,
        *,
        health_url: str | None = None,
        due: tuple[float, float] | None = None,
    ) -> asyncio.Future[Seen]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Seen] = loop.create_future()
        with self._changed:
            self._watches.append(_Watch(target, loop, future, health_url, due))
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="modelswap-listen-watch", daemon=True
                )
                self._thread.start()
            self._changed.notify()
        return future

    def watching(self) -> int:
        """How many targets are watched now."""
        with self._changed:
            return len(self._watches)

    def _run(self) -> None:
        while True:
            with self._changed:
                # Futures are only read here, never set: done() is a plain attribute read.
                self._watches = [w for w in self._watches if not w.future.done()]
                while not self._watches:
                    self._changed.wait()
                watches = list(self._watches)
            now = time.monotonic()
            for watch in watches:
                if watch.next_at > now or watch.future.done():
                    continue
                if is_listening(watch.target):
                    seen_at = time.monotonic()
                    url = watch.health_url
                    self._tell(watch, Seen(seen_at, url is not None and healthy_now(url)))
                else:
                    watch.next_at = now + watch.interval(now)
            with self._changed:
                pending = [w.next_at for w in self._watches if not w.future.done()]
                if pending:  # a new watch notifies: its first look is at once
                    self._changed.wait(max(0.0, min(pending) - time.monotonic()))

    def _tell(self, watch: _Watch, seen: Seen) -> None:
        with self._changed, contextlib.suppress(ValueError):
            self._watches.remove(watch)
        with contextlib.suppress(RuntimeError):  # that loop is closed: nobody waits
            watch.loop.call_soon_threadsafe(_resolve, watch.future, seen)


WATCHER = ListenWatcher()
