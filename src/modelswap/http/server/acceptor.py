"""The listening sockets and their accept loop, the same on asyncio's loop and on uvloop.

uvloop leaves accepting to libuv, which, when the process is out of descriptors, accepts each
waiting connection and closes it at once (its "EMFILE trick"): the client sees a reset. asyncio
instead stops accepting for a second and lets connections wait in the kernel's queue, so a
burst past the descriptor limit is served as descriptors free (tests/reliability: a low
descriptor limit is survived). This loop keeps asyncio's behaviour on both: it accepts with
``socket.accept`` from a reader callback, and on EMFILE, ENFILE, ENOBUFS or ENOMEM logs once
per episode and pauses for ACCEPT_RETRY seconds. Each accepted socket gets its transport from
``loop.connect_accepted_socket``.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
from collections.abc import Callable

log = logging.getLogger("modelswap")

ACCEPT_RETRY = 1.0  # seconds without accepting once descriptors (or buffers) ran out
ACCEPT_BATCH = 128  # connections accepted per wake-up, at most (others wait their turn)
_OUT_OF_RESOURCES = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM}


def listening_sockets(host: str | None, port: int, backlog: int) -> list[socket.socket]:
    """Bound, listening, non-blocking sockets for ``host`` (every address it resolves to, as
    asyncio's create_server binds them): SO_REUSEADDR, and IPV6_V6ONLY on IPv6 ones."""
    infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    sockets: list[socket.socket] = []
    seen: set[tuple[int, object]] = set()
    try:
        for family, kind, proto, _, address in infos:
            if (family, address) in seen:
                continue
            seen.add((family, address))
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6 and hasattr(socket, "IPPROTO_IPV6"):
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
            sock.listen(backlog)
            sock.setblocking(False)
    except BaseException:
        for sock in sockets:
            sock.close()
        raise
    return sockets


class Acceptor:
    """Accepts on ``sockets`` and hands each connection's transport to ``protocol()``'s
    protocol. ``close()`` stops accepting and closes the listening sockets (what aiohttp's
    site calls on its server)."""

    def __init__(
        self, sockets: list[socket.socket], protocol: Callable[[], asyncio.BaseProtocol]
    ) -> None:
        self.sockets = sockets
        self._protocol = protocol
        self._loop = asyncio.get_running_loop()
        self._pending: set[asyncio.Task[object]] = set()
        self._paused = False
        self._closed = False
        for sock in sockets:
            self._loop.add_reader(sock.fileno(), self._accept, sock)

    def _accept(self, sock: socket.socket) -> None:
        for _ in range(ACCEPT_BATCH):
            try:
                conn, _ = sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno in _OUT_OF_RESOURCES:
                    self._pause(exc)
                    return
                if exc.errno in (errno.ECONNABORTED, errno.EPROTO):
                    continue  # the client left before we took it
                log.warning("accept() on %s failed: %s", sock.getsockname(), exc)
                return
            conn.setblocking(False)
            task = self._loop.create_task(self._loop.connect_accepted_socket(self._protocol, conn))
            self._pending.add(task)
            task.add_done_callback(self._connected(conn))

    def _connected(self, conn: socket.socket) -> Callable[[asyncio.Task[object]], None]:
        def done(task: asyncio.Task[object]) -> None:
            self._pending.discard(task)
            if task.cancelled() or task.exception() is not None:
                conn.close()  # no transport was made: the descriptor is ours to close

        return done

    def _pause(self, exc: OSError) -> None:
        """Out of descriptors (or buffers): stop accepting for a while, as asyncio does; what
        arrives meanwhile waits in the kernel's accept queue."""
        if not self._paused:
            log.error(
                "socket.accept() out of system resource (%s): accepting again in %g s",
                exc.strerror or exc,
                ACCEPT_RETRY,
            )
        self._paused = True
        for sock in self.sockets:
            self._loop.remove_reader(sock.fileno())
        self._loop.call_later(ACCEPT_RETRY, self._resume)

    def _resume(self) -> None:
        if self._closed or not self._paused:
            return
        self._paused = False
        for sock in self.sockets:
            self._loop.add_reader(sock.fileno(), self._accept, sock)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for sock in self.sockets:
            self._loop.remove_reader(sock.fileno())
            sock.close()
