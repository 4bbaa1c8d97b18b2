"""Readiness: detected, not waited for (a swap should cost the backend's start, not ours).

Two signals, cheapest first. Until the backend's port accepts connections, a non-blocking
``connect()`` to it (:func:`connect_now`; loopback answers at once: ~20 µs of CPU, where
reading ``/proc/net/tcp`` costs milliseconds on a busy host) — made by the listen watcher's
thread (``supervisor/listening.py``), which then asks the plain-HTTP health endpoint over that
connection (llama.cpp answers 503 "Loading model" from the moment it binds until it is ready)
and wakes the start's loop only when the backend is ready. An https health endpoint is asked
from the loop, every LOOP_HEALTH_INTERVAL once the port listens. A backend reached through a
non-loopback address, or one without a port, falls back to health polls backing off from
FIRST_INTERVAL to MAX_INTERVAL. Output from the backend wakes the loop at once either way
(:class:`Waker`), but it looks no more often than every MIN_LOOK_GAP.
"""

from __future__ import annotations

import asyncio
import errno
import ipaddress
import select
import socket
from collections.abc import Iterator
from typing import Any

import aiohttp

MIN_LOOK_GAP = 0.01  # between the loop's looks woken by output
LOOP_HEALTH_INTERVAL = 0.02  # https health, asked from the loop
FIRST_INTERVAL = 0.02
MAX_INTERVAL = 0.25
BACKOFF = 1.5
PROBE_TIMEOUT = 2.0


class Waker:
    """The readiness loop's sleep: until a timeout, the backend's output (:meth:`output`), or
    its exit — one future and one timer per wait. (An ``Event.wait()`` task raced against the
    exit under ``asyncio.wait`` costs twice the CPU, and the loop waits ~100 times a second.)"""

    def __init__(self) -> None:
        self._fut: asyncio.Future[None] | None = None
        self._on_output = False
        self.by_output = False  # the last wait ended because the backend printed

    def output(self) -> None:
        """The backend printed a line: end the current wait, if it wakes on output."""
        if self._on_output and self._fut is not None and not self._fut.done():
            self.by_output = True
            self._fut.set_result(None)

    async def wait(
        self,
        seconds: float,
        exited: asyncio.Future[int],
        *,
        on_output: bool,
        also: asyncio.Future[Any] | None = None,
    ) -> None:
        """Until ``seconds`` pass, ``exited`` or ``also`` (the port listening) is done, or —
        ``on_output`` — the backend prints."""
        self.by_output = False
        if exited.done() or (also is not None and also.done()):
            return
        loop = asyncio.get_running_loop()
        fut = self._fut = loop.create_future()
        self._on_output = on_output
        timer = loop.call_later(seconds, self._ring)
        exited.add_done_callback(self._ring_for)
        if also is not None:
            also.add_done_callback(self._ring_for)
        try:
            await fut
        finally:
            timer.cancel()
            exited.remove_done_callback(self._ring_for)
            if also is not None:
                also.remove_done_callback(self._ring_for)
            self._fut = None

    def _ring(self) -> None:
        if self._fut is not None and not self._fut.done():
            self._fut.set_result(None)

    def _ring_for(self, _: asyncio.Future[Any]) -> None:
        self._ring()


def intervals() -> Iterator[float]:
    """20 ms, 30 ms, 45 ms … capped at 250 ms."""
    interval = FIRST_INTERVAL
    while True:
        yield interval
        interval = min(interval * BACKOFF, MAX_INTERVAL)


async def is_healthy(session: aiohttp.ClientSession, url: str) -> bool:
    """True on a 2xx answer. Refused connections and 503 "Loading model" mean: not yet."""
    try:
        async with session.get(
            url, timeout=aiohttp.ClientTimeout(total=PROBE_TIMEOUT), allow_redirects=False
        ) as response:
            await response.read()
            return is_ready_status(response.status)
    except (TimeoutError, aiohttp.ClientError, OSError):
        return False


def is_ready_status(status: int) -> bool:
    """A health answer that means ready: 2xx. A redirect is not followed (a login page is not
    a ready backend); 503 is llama.cpp loading."""
    return 200 <= status < 300


def probe_target(host: str | None, port: int | None) -> tuple[str, int] | None:
    """Where a listen probe may look: a loopback address and a port, else None."""
    if host is None or port is None:
        return None
    if host == "localhost":
        return "127.0.0.1", port
    try:
        loopback = ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return None
    return (host.strip("[]"), port) if loopback else None


def is_listening(target: tuple[str, int]) -> bool:
    """Whether something accepts connections on ``target`` now (a loopback address). The
    connection is closed at once; a refused one costs the backend nothing."""
    listening, sock = connect_now(target)
    if sock is not None:
        sock.close()
    return listening


def connect_now(target: tuple[str, int]) -> tuple[bool, socket.socket | None]:
    """One non-blocking ``connect()`` to ``target`` (a loopback address): whether something
    accepts there, and the connected socket when it is one (the caller owns it; None when
    refused, or when the backlog is full and the connection still pending)."""
    host, port = target
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setblocking(False)
        code = sock.connect_ex((host, port))
        if code in (errno.EINPROGRESS, errno.EAGAIN, errno.EWOULDBLOCK):
            # Loopback settles within microseconds: refused or accepted by the time we look.
            # Still pending means a full backlog, which only a listening socket has.
            poller = select.poll()  # not select(): a busy gateway has fds past FD_SETSIZE
            poller.register(sock, select.POLLOUT)
            if not poller.poll(0):
                sock.close()
                return True, None
            code = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
    except BaseException:
        sock.close()
        raise
    if code != 0:
        sock.close()
        return False, None
    return True, sock
