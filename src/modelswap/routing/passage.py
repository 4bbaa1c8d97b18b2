"""How a request reaches its target, whatever the target's kind: each kind (a local model,
``runtime.LocalTarget``; a peer's model, ``peer_directory.PeerRoute``) opens a
:class:`Passage` with ``reach``, so the relay's dispatch has no branch per kind. A local model
is reached under a lease (waiting for its start); a peer through its circuit breaker.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol

from modelswap.config.resolved import Timeouts
from modelswap.routing.local import Lease

# How a local model is leased for one request: the runtime's acquire, or the SSE loading
# stream's (which sends progress comments while the model starts).
Acquire = Callable[[str], Awaitable[Lease]]


class Passage(Protocol):
    """One attempt's way to its target: where it goes, with which key and deadlines, and what
    the attempt's end tells whoever keeps the target (a lease, a breaker)."""

    @property
    def url(self) -> str:
        """The backend's or peer's base URL."""

    @property
    def api_key(self) -> str | None:
        """The key sent up (the target's own; never the client's)."""

    @property
    def timeouts(self) -> Timeouts: ...

    @property
    def counts_hops(self) -> bool:
        """Whether the target is another gateway, told how many gateways the request passed."""

    def release(self) -> None:
        """Once the answer was relayed or the client left: ends a lease."""

    def settle(self, status: int | None, failed: bool) -> None:
        """The attempt's end: its answer's status (None: none came), and whether it failed
        before one came (refused, broken, timed out) rather than the client leaving."""

    async def died(self) -> bool:
        """After a refused connection: whether the backend had just died (then asking again
        starts it anew)."""
