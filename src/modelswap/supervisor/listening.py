"""Noticing the moment a starting backend is ready, without waking the event loop to look.

The kernel has no event for "a socket entered LISTEN", nor for "the model finished loading",
so something must look. Looking is cheap (a refused loopback ``connect()``: ~20 µs; a health
GET: a few hundred µs); the wake-up to look is not: on a VM a timed wake of the asyncio loop
costs 200–500 µs of CPU, a sleeping thread's ~40 % less (measured on a 2-core VM,
``docs/PERFORMANCE.md``). So one daemon thread watches every start that waits: first for its
loopback port to accept (a connect), then — with a health URL — for a 2xx answer (llama.cpp
answers 503 while it loads), and tells the start's event loop once, when it is ready. The loop
sleeps through the misses. The thread runs only while some start waits; with none it blocks
on a condition.

How often it looks follows what the model did before (``due``: the window in which its port
listened, or its health answered, in its last starts — remembered across restarts in
``stats.json``): every SLOW (SLOW_HEALTH) before that window, every FAST (FAST_HEALTH) inside
it, every INTERVAL (HEALTH_INTERVAL) after it or with no history — so a repeated start is
noticed within a few ms while the seconds of loading before it cost a few wake-ups.
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

# With no history (a model's first start on this machine) or past the window: a look costs the
# thread a timed wake, 200-400 µs of CPU on a VM (a GET ~1 ms), so these keep waiting under 2 %
# of a core; a line of output still makes the loop look at once (llama.cpp prints when ready).
INTERVAL = 0.02  # connects: ~10 ms of detection delay on average
HEALTH_INTERVAL = 0.05  # health GETs (llama.cpp's 503 while loading): ~25 ms
FAST = 0.002  # connects inside the window where the port listened before
FAST_HEALTH = 0.01  # health GETs inside the window where the backend became healthy before
SLOW = 0.05  # connects before that window
SLOW_HEALTH = 0.1  # health GETs before theirs (a GET costs the thread ~0.5 ms of CPU)
HEALTH_TIMEOUT = 0.5  # one GET; a backend slower than that is asked again

Target = tuple[str, int]
Window = tuple[float, float]


@dataclass(frozen=True)
class Seen:
    """When the port was first seen accepting, and when the health URL first answered 2xx
    (monotonic; ``healthy_at`` is None when no health URL was given)."""

    listening_at: float
    healthy_at: float | None


@dataclass(eq=False)
class _Watch:
    target: Target
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[Seen]
    health_url: str | None
    due: Window | None  # when the port is likely to listen
    healthy_due: Window | None  # when the health URL is likely to answer 2xx
    listening_at: float | None = None
    next_at: float = field(default=0.0)

    def interval(self, now: float) -> float:
        if self.listening_at is None:
            return _interval(now, self.due, FAST, SLOW, INTERVAL)
        return _interval(now, self.healthy_due, FAST_HEALTH, SLOW_HEALTH, HEALTH_INTERVAL)

    def look(self) -> Seen | None:
        """One look; what was seen once the start is ready, else None."""
        if self.listening_at is None:
            if not is_listening(self.target):
                return None
            self.listening_at = time.monotonic()
        if self.health_url is None:
            return Seen(self.listening_at, None)
        if not healthy_now(self.health_url):
            return None
        return Seen(self.listening_at, time.monotonic())


def _interval(now: float, due: Window | None, fast: float, slow: float, steady: float) -> float:
    if due is None or now > due[1]:
        return steady
    if now >= due[0]:
        return fast
    return min(slow, max(fast, due[0] - now))


def due_window(started: float, history: list[float]) -> Window | None:
    """Where (monotonic) this start's moment is likely, from the seconds that the last starts
    took to reach it: their range, widened by 5 % and 30 ms for a busier host."""
    if not history:
        return None
    return started + min(history) * 0.95 - 0.03, started + max(history) * 1.05 + 0.03


def healthy_now(url: str) -> bool:
    """One plain-HTTP GET of ``url``: True on 2xx. Refused, an error, a slow answer or another
    status mean: not yet."""
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


def watchable(url: str | None) -> bool:
    """Whether the thread can ask this health URL itself (plain HTTP; else the loop asks)."""
    return url is None or urlsplit(url).scheme == "http"


def _resolve(future: asyncio.Future[Seen], seen: Seen) -> None:
    if not future.done():
        future.set_result(seen)


class ListenWatcher:
    """:meth:`watch` a start: a future that resolves to :class:`Seen` once the loopback
    ``target`` accepts and ``health_url`` (if any, plain HTTP) answers 2xx. Cancel the
    future to stop watching. ``listening_at`` of a watch still running: :meth:`listening`."""

    def __init__(self) -> None:
        self._watches: list[_Watch] = []
        self._changed = threading.Condition()
        self._thread: threading.Thread | None = None

    def watch(
        self,
        target: Target,
        *,
        health_url: str | None = None,
        due: Window | None = None,
        healthy_due: Window | None = None,
    ) -> asyncio.Future[Seen]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Seen] = loop.create_future()
        with self._changed:
            self._watches.append(_Watch(target, loop, future, health_url, due, healthy_due))
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="modelswap-listen-watch", daemon=True
                )
                self._thread.start()
            self._changed.notify()
        return future

    def listening(self, future: asyncio.Future[Seen]) -> float | None:
        """When the port of the watch behind ``future`` was first seen accepting, if yet."""
        with self._changed:
            for watch in self._watches:
                if watch.future is future:
                    return watch.listening_at
        return None

    def watching(self) -> int:
        """How many starts are watched now."""
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
                seen = watch.look()
                if seen is not None:
                    self._tell(watch, seen)
                else:
                    now = time.monotonic()
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
