"""HTTP client sessions to backends and peers whose connections follow llama-swap's
``timeouts.keepalive`` and ``timeouts.idleConn``: one session per distinct pair, made on first
use and closed with the runtime. Models that set neither share the runtime's proxy session.

``keepalive``: SO_KEEPALIVE with TCP_KEEPIDLE and TCP_KEEPINTVL at that many seconds (Go's
``Dialer.KeepAlive``), 0 for no probes. ``idleConn``: the pool's keep-alive time of an idle
connection (Go's ``IdleConnTimeout``), 0 for no limit.
"""

from __future__ import annotations

import socket
from collections.abc import Callable

import aiohttp
from aiohappyeyeballs import AddrInfoType

Pooled = tuple[float | None, float | None]


def _socket_factory(keepalive: float) -> Callable[[AddrInfoType], socket.socket]:
    seconds = max(1, round(keepalive))

    def make(addr_info: AddrInfoType) -> socket.socket:
        family, kind, proto, _, _ = addr_info
        sock = socket.socket(family=family, type=kind, proto=proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        for option in ("TCP_KEEPIDLE", "TCP_KEEPINTVL"):  # Linux names; others keep defaults
            if hasattr(socket, option):
                sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, option), seconds)
        return sock

    return make


def make_session(keepalive: float | None, idle_conn: float | None) -> aiohttp.ClientSession:
    """A session as the proxy's (bytes relayed as they came, no pool limit) with these
    connection settings."""
    options: dict[str, object] = {"limit": 0}
    if idle_conn is not None:
        options["keepalive_timeout"] = idle_conn if idle_conn > 0 else None
    if keepalive:
        options["socket_factory"] = _socket_factory(keepalive)
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(**options),  # type: ignore[arg-type]
        auto_decompress=False,
        skip_auto_headers=("User-Agent", "Accept-Encoding", "Accept", "Content-Type"),
    )


class PooledSessions:
    """The sessions by (keepalive, idleConn); used on the event loop only."""

    def __init__(self) -> None:
        self._sessions: dict[Pooled, aiohttp.ClientSession] = {}

    def get(self, pooled: Pooled) -> aiohttp.ClientSession:
        session = self._sessions.get(pooled)
        if session is None or session.closed:
            session = self._sessions[pooled] = make_session(*pooled)
        return session

    def opened(self) -> list[Pooled]:
        return list(self._sessions)

    async def close(self) -> None:
        sessions, self._sessions = list(self._sessions.values()), {}
        for session in sessions:
            await session.close()
