"""Noticing the moment a starting backend is ready, without waking the event loop to look.

The kernel has no event for "a socket entered LISTEN", nor for "the model finished loading",
so something must look. Looking is cheap (a refused loopback ``connect()``: ~20 µs; a health
GET on a kept-alive connection: ~200 µs); the wake-up to look is not: on a VM a timed wake
costs 100–500 µs of CPU (measured on a 2-core VM, ``docs/PERFORMANCE.md``). So one daemon
thread watches every start that waits: first for its loopback port to accept (a connect),
then — with a health URL — for a 2xx answer (llama.cpp answers 503 while it loads), asked over
the connection that saw the port listen, kept alive; and it tells the start's event loop once,
when it is ready. The loop sleeps through the misses. The thread sleeps in ``poll()`` while
no start waits.

How often it looks follows what the model did before, remembered across restarts in
``stats.json``: the window in which its port listened (seconds from the start), then the one
in which its health answered 2xx (seconds from listening: a load after the bind varies far
less than a whole start). Every SLOW (SLOW_HEALTH) until it is near, every INTERVAL
(HEALTH_INTERVAL) while near, every FAST (FAST_HEALTH) inside it, every INTERVAL after it or
with no history — so a repeated start is noticed within a few ms while the seconds of loading
before it cost a few wake-ups.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import math
import os
import select
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Protocol
from urllib.parse import urlsplit

from modelswap.supervisor.health import connect_now, is_ready_status
from modelswap.supervisor.sockdiag import SockDiag

# With no history (a model's first start on this machine) or past the window: a look costs the
# thread a timed wake, 200-400 µs of CPU on a VM (a GET ~1 ms), so these keep waiting under 2 %
# of a core; a line of output still makes the loop look at once (llama.cpp prints when ready).
INTERVAL = 0.02  # connects: ~10 ms of detection delay on average
HEALTH_INTERVAL = 0.05  # health GETs (llama.cpp's 503 while loading): ~25 ms
FAST = 0.002  # connects inside the window where the port listened before
FAST_HEALTH = 0.003  # health GETs inside the window where the backend became healthy before
SLOW = 0.05  # connects before that window
SLOW_HEALTH = 0.1  # health GETs before theirs (one on a kept-alive connection: ~0.2 ms of CPU)
HEALTH_TIMEOUT = 0.5  # one GET; a backend slower than that is asked again
# The kernel's socket table (sockdiag) is asked whether the port listens: ~100 µs a look where a
# refused connect costs ~250 µs. Every TRUTH_EVERY-th look connects anyway, for a port that
# only NAT answers (a container's published port without a proxy process): no listener here.
TRUTH_EVERY = 5

Target = tuple[str, int]
Window = tuple[float, float, float]  # (monotonic) nearing, inside from, inside until


class ListenTable(Protocol):
    """Where the watcher asks whether a port listens (the kernel's socket table, sockdiag):
    True or False, or None when it cannot tell (then it connects)."""

    def listening(self, target: Target) -> bool | None: ...


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
    ready_history: tuple[float, ...] = ()  # seconds from listening to a 2xx, in past starts
    healthy_due: Window | None = None  # when the health URL is likely to answer 2xx
    listening_at: float | None = None
    next_at: float = field(default=0.0)
    looks: int = 0
    asker: HealthAsker | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        if self.health_url is not None:
            self.asker = HealthAsker(self.health_url)

    def interval(self, now: float) -> float:
        if self.listening_at is None:
            return _interval(now, self.due, FAST, SLOW, INTERVAL)
        return _interval(now, self.healthy_due, FAST_HEALTH, SLOW_HEALTH, HEALTH_INTERVAL)

    def look(self, table: ListenTable | None = None) -> Seen | None:
        """One look (the port: in ``table`` where it can tell); what was seen once the start
        is ready, else None."""
        listening_at = self.listening_at
        if listening_at is None:
            self.looks += 1
            if (
                table is not None
                and self.looks % TRUTH_EVERY
                and table.listening(self.target) is False
            ):
                return None
            listening, sock = connect_now(self.target)
            if not listening:
                return None
            listening_at = time.monotonic()
            self.listened(listening_at)
            if self.asker is None:
                if sock is not None:
                    sock.close()
                return Seen(listening_at, None)
            if sock is not None:  # the connection that saw it listen asks the health URL
                self.asker.adopt(sock, self.target)
        if self.asker is None:
            return Seen(listening_at, None)
        if not self.asker.ask():
            return None
        self.end()
        return Seen(listening_at, time.monotonic())

    def listened(self, at: float) -> None:
        """The port was seen listening ``at``: health answered as long after it in past starts
        (llama.cpp loads after it binds; that time varies far less than the whole start's)."""
        self.listening_at = at
        self.healthy_due = due_window(at, list(self.ready_history))

    def end(self) -> None:
        """The watch is over: its kept-alive health connection is closed."""
        if self.asker is not None:
            self.asker.close()


class HealthAsker:
    """Asks one plain-HTTP health URL again and again over one kept-alive connection (the
    one that saw the port listen, at first): a GET on an open connection costs half the CPU
    of one on a fresh connection, here and in the backend — which is loading meanwhile
    (llama.cpp answers 503 until it is ready). Used by one thread; :meth:`close` when done."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.usable = parts.scheme == "http" and parts.hostname is not None
        self._host = parts.hostname or ""
        self._port = parts.port or 80
        path = parts.path or "/"
        self._path = path + "?" + parts.query if parts.query else path
        self._conn: http.client.HTTPConnection | None = None
        self._answered = False  # the connection has carried an answer: it may have gone stale

    def adopt(self, sock: socket.socket, target: Target) -> None:
        """Use ``sock`` (connected to ``target``) for the next GET, if the URL points there."""
        if self._conn is not None or (self._host, self._port) != target:
            sock.close()
            return
        sock.settimeout(HEALTH_TIMEOUT)
        self._connection().sock = sock

    def ask(self) -> bool:
        """One GET: True on a 2xx answer. Refused, an error, a slow answer or another status
        mean: not yet. A kept-alive connection the backend closed meanwhile is opened again
        at once, so a stale connection never costs a look."""
        if not self.usable:
            return False
        for _ in range(2):
            reused = self._answered
            try:
                return self._get()
            except (OSError, http.client.HTTPException):
                self.close()
                if not reused:
                    return False
        return False

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        self._answered = False

    def _connection(self) -> http.client.HTTPConnection:
        if self._conn is None:
            self._conn = http.client.HTTPConnection(self._host, self._port, timeout=HEALTH_TIMEOUT)
        return self._conn

    def _get(self) -> bool:
        conn = self._connection()
        conn.request("GET", self._path)
        with conn.getresponse() as response:
            response.read(65536)
            if not response.isclosed():  # a body past 64 KiB: not worth reading; start afresh
                self.close()
            else:
                self._answered = True
            return is_ready_status(response.status)


def _interval(now: float, due: Window | None, fast: float, slow: float, steady: float) -> float:
    if due is None or now > due[2]:
        return steady
    if now >= due[1]:
        return fast
    if now >= due[0]:  # nearing it: a start a little faster than the last ones is common
        return min(steady, max(fast, due[1] - now))
    return min(slow, max(fast, due[0] - now))


def due_window(since: float, history: list[float]) -> Window | None:
    """Where (monotonic) this start's moment is likely, from the seconds that the last starts
    took to reach it from the same point (``since``): their range, widened by 5 % and 30 ms for
    a busier host; and, from 20 % before it, where it is near (a start after a model's first is
    often faster: its files are in the page cache by then)."""
    if not history:
        return None
    soonest, latest = min(history), max(history)
    return since + soonest * 0.8 - 0.03, since + soonest * 0.95 - 0.03, since + latest * 1.05 + 0.03


def watchable(url: str | None) -> bool:
    """Whether the thread can ask this health URL itself (plain HTTP; else the loop asks)."""
    return url is None or urlsplit(url).scheme == "http"


def _resolve(future: asyncio.Future[Seen], seen: Seen) -> None:
    if not future.done():
        future.set_result(seen)


class ListenWatcher:
    """:meth:`watch` a start: a future that resolves to :class:`Seen` once the loopback
    ``target`` accepts and ``health_url`` (if any, plain HTTP) answers 2xx. Cancel the
    future to stop watching. ``listening_at`` of a watch still running: :meth:`listening`.

    The thread sleeps in ``poll()`` on a pipe that a new watch writes to: a timed wake costs
    it ~50 µs of CPU less than a ``threading.Condition`` wait, and it wakes ~50 times a
    second while a start waits."""

    def __init__(self) -> None:
        self._watches: tuple[_Watch, ...] = ()  # replaced under the lock, never changed
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._wake_r, self._wake_w = -1, -1

    def watch(
        self,
        target: Target,
        *,
        health_url: str | None = None,
        due: Window | None = None,
        ready_history: tuple[float, ...] = (),
    ) -> asyncio.Future[Seen]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Seen] = loop.create_future()
        with self._lock:
            self._watches = (
                *self._watches,
                _Watch(target, loop, future, health_url, due, ready_history),
            )
            if self._thread is None or not self._thread.is_alive():
                if self._wake_r < 0:
                    self._wake_r, self._wake_w = os.pipe()
                    os.set_blocking(self._wake_r, False)
                    os.set_blocking(self._wake_w, False)
                self._thread = threading.Thread(
                    target=self._run, name="modelswap-listen-watch", daemon=True
                )
                self._thread.start()
        with contextlib.suppress(BlockingIOError):  # full: the thread is to wake already
            os.write(self._wake_w, b"w")  # its first look is at once
        return future

    def listening(self, future: asyncio.Future[Seen]) -> float | None:
        """When the port of the watch behind ``future`` was first seen accepting, if yet."""
        for watch in self._watches:
            if watch.future is future:
                return watch.listening_at
        return None

    def watching(self) -> int:
        """How many starts are watched now."""
        return len(self._watches)

    def _run(self) -> None:
        table = SockDiag()  # this thread's: one netlink socket, kept open
        poller = select.poll()
        poller.register(self._wake_r, select.POLLIN)
        while True:
            next_at = math.inf
            now = time.monotonic()
            # Futures are only read here, never set: done() is a plain attribute read.
            for watch in self._watches:
                if watch.future.done():  # cancelled: the start ended or was stopped
                    self._drop(watch)
                    continue
                if watch.next_at <= now:
                    seen = watch.look(table)
                    if seen is not None:
                        self._drop(watch)
                        with contextlib.suppress(RuntimeError):  # that loop is closed
                            watch.loop.call_soon_threadsafe(_resolve, watch.future, seen)
                        continue
                    now = time.monotonic()
                    watch.next_at = now + watch.interval(now)
                next_at = min(next_at, watch.next_at)
            timeout = None if next_at == math.inf else (next_at - time.monotonic()) * 1000
            if poller.poll(None if timeout is None else max(0.0, timeout)):
                with contextlib.suppress(BlockingIOError):
                    os.read(self._wake_r, 4096)

    def _drop(self, watch: _Watch) -> None:
        watch.end()
        with self._lock:
            self._watches = tuple(w for w in self._watches if w is not watch)


WATCHER = ListenWatcher()
