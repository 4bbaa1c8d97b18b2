"""Peers: which models each one serves (listed, or discovered from its ``/v1/models``), how a
request name maps to a peer, and each peer's circuit breaker.

Discovery is bounded (``DISCOVER_TIMEOUT`` seconds, ``DISCOVER_MAX_BYTES``), periodic and cached:
a failed read keeps the last list. Rows a peer itself lists as *its* peers' models (rows with a
``peer`` field) are skipped, so two gateways that discover each other do not loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import aiohttp

from modelswap import jsonsafe
from modelswap.capped import BodyOverLimitError, read_capped
from modelswap.config.resolved import Peer
from modelswap.errors import AmbiguousModelError
from modelswap.routing.breaker import CircuitBreaker

log = logging.getLogger(__name__)

DISCOVER_TIMEOUT = 5.0
DISCOVER_MAX_BYTES = 1024 * 1024
MAX_DISCOVERED = 10_000


@dataclass(frozen=True, slots=True)
class PeerRoute:
    """A request name resolved to a model on a peer."""

    peer: Peer
    model: str  # the name the peer knows it by

    @property
    def label(self) -> str:
        return f"{self.peer.id}/{self.model}"


class PeerDirectory:
    def __init__(
        self,
        peers: Mapping[str, Peer],
        session_factory: Callable[[], aiohttp.ClientSession],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._session_factory = session_factory
        self._clock = clock
        self._peers: dict[str, Peer] = {}
        self._discovered: dict[str, tuple[str, ...]] = {}
        self.discovered_at: dict[str, float] = {}
        self.discover_errors: dict[str, str] = {}
        self._breakers: dict[str, CircuitBreaker] = {}
        self._wake = asyncio.Event()
        self.reconfigure(peers)

    def reconfigure(self, peers: Mapping[str, Peer]) -> None:
        """Apply a new peer set (live reload): breakers and discovered lists of peers whose
        address did not change are kept."""
        old = self._peers
        self._peers = dict(peers)
        for peer_id, peer in peers.items():
            before = old.get(peer_id)
            same = before is not None and before.proxy == peer.proxy
            breaker = self._breakers.get(peer_id)
            if not same or breaker is None:
                self._breakers[peer_id] = CircuitBreaker(
                    peer.breaker_failures, peer.breaker_cooldown
                )
                self._discovered.pop(peer_id, None)
            else:
                breaker.threshold, breaker.cooldown = peer.breaker_failures, peer.breaker_cooldown
        for peer_id in set(self._breakers) - set(peers):
            del self._breakers[peer_id]
            self._discovered.pop(peer_id, None)
        self._wake.set()

    @property
    def peers(self) -> Mapping[str, Peer]:
        return self._peers

    def models(self, peer_id: str) -> tuple[str, ...]:
        peer = self._peers[peer_id]
        return self._discovered.get(peer_id, ()) if peer.discover else peer.models

    def breaker(self, peer_id: str) -> CircuitBreaker:
        return self._breakers[peer_id]

    def now(self) -> float:
        return self._clock()

    def lookup(self, name: str) -> PeerRoute | None:
        """``peerID/model``, or a bare name exactly one peer serves. Local names are checked
        by the caller first (local ids win). Raises AmbiguousModelError for a bare name
        several peers serve."""
        peer_id, slash, rest = name.partition("/")
        if slash and peer_id in self._peers and rest in self.models(peer_id):
            return PeerRoute(self._peers[peer_id], rest)
        owners = [p for p in self._peers if name in self.models(p)]
        if len(owners) > 1:
            raise AmbiguousModelError(name, [f"{p}/{name}" for p in owners])
        return PeerRoute(self._peers[owners[0]], name) if owners else None

    def routes(self) -> list[PeerRoute]:
        return [PeerRoute(peer, m) for pid, peer in self._peers.items() for m in self.models(pid)]

    def status(self) -> list[dict[str, object]]:
        """Per peer: address, breaker, model count, last discovery (no key)."""
        now = self.now()
        out: list[dict[str, object]] = []
        for peer_id, peer in self._peers.items():
            breaker = self._breakers[peer_id]
            row: dict[str, object] = {
                "id": peer_id,
                "proxy": peer.proxy,
                "breaker": breaker.state,
                "consecutive_failures": breaker.consecutive_failures,
                "models": list(self.models(peer_id)),
                "discover": peer.discover,
            }
            if breaker.state == "open":
                row["retry_in"] = round(breaker.retry_in(now), 1)
            if peer_id in self.discover_errors:
                row["discover_error"] = self.discover_errors[peer_id]
            out.append(row)
        return out

    # ---- discovery -------------------------------------------------------------------------

    async def run(self) -> None:
        """Discover every ``discover: true`` peer now, then each at its interval."""
        next_due: dict[str, float] = {}
        while True:
            self._wake.clear()
            now = self.now()
            due = [p for p in self._peers.values() if p.discover and next_due.get(p.id, 0.0) <= now]
            await asyncio.gather(*(self.discover(p) for p in due))
            for peer in due:
                next_due[peer.id] = self.now() + peer.discover_interval
            waits = [t - self.now() for pid, t in next_due.items() if pid in self._peers]
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), max(0.05, min(waits, default=3600.0)))

    async def discover(self, peer: Peer) -> None:
        try:
            names = await self._read_models(peer)
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            detail = str(exc) or type(exc).__name__
            if self.discover_errors.get(peer.id) != detail:
                log.warning("peer %s: cannot read its model list: %s", peer.id, detail)
            self.discover_errors[peer.id] = detail
            return
        if self._peers.get(peer.id) is not peer:
            return  # reconfigured meanwhile
        self.discover_errors.pop(peer.id, None)
        if names != self._discovered.get(peer.id):
            log.info("peer %s serves %d models", peer.id, len(names))
        self._discovered[peer.id] = names
        self.discovered_at[peer.id] = time.time()

    async def _read_models(self, peer: Peer) -> tuple[str, ...]:
        headers = {"Authorization": f"Bearer {peer.api_key}"} if peer.api_key else {}
        session = self._session_factory()
        async with (
            asyncio.timeout(DISCOVER_TIMEOUT),
            session.get(peer.proxy + "/v1/models", headers=headers, allow_redirects=False) as resp,
        ):
            if resp.status != 200:
                raise ValueError(f"/v1/models answered {resp.status}")
            try:
                body = await read_capped(resp.content.iter_any(), DISCOVER_MAX_BYTES)
            except BodyOverLimitError as exc:
                raise ValueError(f"/v1/models is larger than {DISCOVER_MAX_BYTES} bytes") from exc
        return parse_model_list(body)


def parse_model_list(body: bytes) -> tuple[str, ...]:
    """Model ids from an OpenAI ``/v1/models`` body; rows for the peer's own peers skipped."""
    data = jsonsafe.loads(body)
    rows = data.get("data") if isinstance(data, dict) else None
    if not isinstance(rows, list):
        raise ValueError("/v1/models has no `data` list")
    names: list[str] = []
    for row in rows[:MAX_DISCOVERED]:
        if not isinstance(row, dict) or "peer" in row:
            continue
        model_id = row.get("id")
        if isinstance(model_id, str) and model_id and len(model_id) <= 256:
            names.append(model_id)
    return tuple(dict.fromkeys(names))
