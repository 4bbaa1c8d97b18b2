"""HTTP client sessions to backends and peers whose connections follow llama-swap's
``timeouts.keepalive``, ``timeouts.idleConn`` and ``disableKeepAlives``: one session per
distinct set, made on first use and closed with the runtime. Models that set none share the
runtime's proxy session.

``keepalive``: SO_KEEPALIVE with TCP_KEEPIDLE and TCP_KEEPINTVL at that many seconds (Go's
``Dialer.KeepAlive``), 0 for no probes. ``idleConn``: the pool's keep-alive time of an idle
connection (Go's ``IdleConnTimeout``), 0 for no limit. ``disableKeepAlives``: every request
on a new connection, closed after it (``Connection: close``; Go's ``DisableKeepAlives``).
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterable

import aiohttp
from aiohappyeyeballs import AddrInfoType
from multidict import CIMultiDict, istr

Pooled = tuple[float | None, float | None, bool]
# Relayed requests carry the client's headers only: aiohttp adds none of its own.
SKIP_AUTO_HEADERS = ("User-Agent", "Accept-Encoding", "Accept", "Content-Type")
_SKIP = frozenset(istr(name) for name in SKIP_AUTO_HEADERS)
_SKIPPED = CIMultiDict((name, None) for name in sorted(_SKIP))
# The shortcut below is exact only where aiohttp keeps the skip set in `_skip_auto_headers`
# and every header it would add automatically is one of ours (else aiohttp's own path).
_SHORTCUT = isinstance(vars(aiohttp.ClientRequest).get("skip_auto_headers"), property) and all(
    name in _SKIP for name in (*aiohttp.ClientRequest.DEFAULT_HEADERS, aiohttp.hdrs.USER_AGENT)
)


class RelayRequest(aiohttp.ClientRequest):
    """``skip_auto_headers=SKIP_AUTO_HEADERS`` without its per-request cost: aiohttp builds a
    multidict of the skipped names and copies the request's headers to apply it, on every
    request; with every automatic header skipped there is nothing to add, and the skip set
    (which aiohttp only reads) is built once."""

    def update_auto_headers(self, skip_auto_headers: Iterable[str] | None) -> None:
        if _SHORTCUT and skip_auto_headers == _SKIP:
            self._skip_auto_headers = _SKIPPED
        else:
            super().update_auto_headers(skip_auto_headers)


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


def make_session(
    keepalive: float | None, idle_conn: float | None, no_reuse: bool = False
) -> aiohttp.ClientSession:
    """A session as the proxy's (bytes relayed as they came, no pool limit) with these
    connection settings."""
    options: dict[str, object] = {"limit": 0}
    if no_reuse:
        options["force_close"] = True  # idleConn has nothing to keep
    elif idle_conn is not None:
        options["keepalive_timeout"] = idle_conn if idle_conn > 0 else None
    if keepalive:
        options["socket_factory"] = _socket_factory(keepalive)
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(**options),  # type: ignore[arg-type]
        auto_decompress=False,
        skip_auto_headers=SKIP_AUTO_HEADERS,
        request_class=RelayRequest,
    )


class PooledSessions:
    """The sessions by (keepalive, idleConn, disableKeepAlives); used on the event loop
    only."""

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
