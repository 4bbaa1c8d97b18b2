"""The connection counts: how many connections each client network holds, by state (new, at
work, at work and kept alive, idle), and whether one more may be admitted or kept. Read and
moved by the guarded site's connections (:mod:`modelswap.http.server.connections`) and the fast
door's (:mod:`modelswap.http.server.fast_door`); the rule is stated in the first.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ConnectionState:
    """Where one admitted connection stands: whether it counts toward its client's share of
    new connections (``new``) or of idle ones (``kept``); at work, toward neither."""

    name: str
    new: int
    kept: int


NEW = ConnectionState("new", 1, 0)  # not at work since it opened (its head not in, or not served)
AT_WORK = ConnectionState("at work", 0, 0)  # its request is served; closed after the answer
# served; its answer keeps it open after
AT_WORK_KEPT_ALIVE = ConnectionState("at work, kept alive", 0, 1)
IDLE = ConnectionState("idle", 0, 1)  # kept alive between requests


@dataclass(slots=True)
class ClientConnections:
    """One client network's connections (read them, never change them)."""

    held: int = 0  # admitted and open
    new: int = 0  # of them NEW
    kept: int = 0  # of them idle, or promised to be: IDLE and AT_WORK_KEPT_ALIVE


class ConnectionCounts:
    """Connections held, in all and per client network, by :class:`ConnectionState`. Every
    :meth:`admit` that returns None is paired with one :meth:`release` (when that connection
    closes, with its standing then); :meth:`move` follows it in between."""

    def __init__(self, max_total: int, max_per_client: int) -> None:
        self.max_total = max_total
        self.max_per_client = max_per_client
        self.total = 0
        self._clients: dict[str, ClientConnections] = {}

    def over_share(self, network: str) -> bool:
        """Whether ``network`` holds its whole share of new connections."""
        client = self._clients.get(network)
        return client is not None and client.new >= self.max_per_client

    def share_reason(self, network: str) -> str:
        return (
            f"Too many connections from {network} to modelswap "
            f"(limits.maxConnectionsPerClient: {self.max_per_client})."
        )

    def reason(self, network: str) -> str | None:
        """Why a new connection from ``network`` cannot be admitted now (None: it can)."""
        if self.over_share(network):
            return self.share_reason(network)
        if self.total >= self.max_total:
            return f"Too many connections to modelswap (limits.maxConnections: {self.max_total})."
        return None

    def admit(self, network: str) -> str | None:
        """Count a new connection from ``network`` in (as NEW); or why it cannot be (then
        uncounted)."""
        reason = self.reason(network)
        if reason is None:
            client = self._clients.setdefault(network, ClientConnections())
            client.held += 1
            client.new += 1
            self.total += 1
        return reason

    def move(self, network: str, old: ConnectionState, new: ConnectionState) -> None:
        client = self._clients[network]
        client.new += new.new - old.new
        client.kept += new.kept - old.kept

    def may_keep(self, network: str) -> bool:
        """Whether one more of ``network``'s connections may be kept alive after its answer."""
        client = self._clients.get(network)
        return client is None or client.kept < self.max_per_client

    def release(self, network: str, standing: ConnectionState = NEW) -> None:
        client = self._clients[network]
        client.held -= 1
        client.new -= standing.new
        client.kept -= standing.kept
        if client.held <= 0:
            del self._clients[network]
        self.total -= 1

    def of(self, network: str) -> ClientConnections:
        return self._clients.get(network) or ClientConnections()

    @property
    def clients(self) -> int:
        """Client networks holding at least one connection."""
        return len(self._clients)
