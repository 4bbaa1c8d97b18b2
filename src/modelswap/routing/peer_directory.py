"""Peers: which models each one serves (listed, or discovered from its ``/v1/models``), how a
request name maps to a peer, and each peer's circuit breaker. A pool of peers found in DNS
(``discover: {dns: NAME, port: P}``) has one member peer per address (``pools.py``, ``dns.py``).

Discovery is bounded (``DISCOVER_TIMEOUT`` seconds, ``DISCOVER_MAX_BYTES``), periodic and cached:
a failed read keeps the last list. Rows a peer itself lists as *its* peers' models (rows with a
``peer`` field) are skipped, so two gateways that discover each other do not loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial

import aiohttp

from modelswap import jsonsafe
from modelswap.bounded_read import BodyOverLimitError, read_capped
from modelswap.config.resolved import DnsDiscovery, Filters, Peer, Timeouts
from modelswap.errors import AmbiguousModelError, PeerUnavailableError
from modelswap.policy import PolicySet, Program
from modelswap.routing.breaker import CircuitBreaker
from modelswap.routing.dns import DnsError, resolve_addresses
from modelswap.routing.passage import Acquire
from modelswap.routing.pools import choose_member, member_addresses, member_peer

log = logging.getLogger(__name__)

DISCOVER_TIMEOUT = 5.0
DISCOVER_MAX_BYTES = 1024 * 1024
MAX_DISCOVERED = 10_000

Resolver = Callable[[DnsDiscovery], Awaitable[tuple[str, ...]]]


@dataclass(frozen=True, slots=True)
class PeerRoute:
    """A request name resolved to a model on a peer."""

    peer: Peer
    model: str  # the name the peer knows it by

    @property
    def label(self) -> str:
        return f"{self.peer.id}/{self.model}"

    def body_edits(self) -> tuple[tuple[Filters, ...], str]:
        """The peer's filters, and the name the peer knows the model by."""
        filters = self.peer.filters
        return ((filters,) if filters else ()), self.model

    def tool_choice_refusal(self) -> None:
        """None: the peer's own gateway judges its backends."""

    @property
    def fallback(self) -> tuple[str, ...]:
        """None: the peer's own gateway falls back as it is configured to."""
        return ()

    def programs(self, policies: PolicySet) -> list[Program]:
        """The Swap Policy Language's programs for a request here: the hook, the peer's own
        (a pool's, for a member)."""
        return policies.programs_for(peer=self.peer.pool or self.peer.id)

    async def reach(self, acquire: Acquire, peers: PeerDirectory) -> PeerPassage:
        """Through the peer's circuit breaker: an open one refuses at once."""
        breaker = peers.breaker(self.peer.id)
        if not breaker.admit(peers.now()):
            raise PeerUnavailableError(self.peer.id, breaker.retry_in(peers.now()))
        return PeerPassage(self.peer, breaker, peers.now)


@dataclass(slots=True)
class PeerPassage:
    """A peer, reached with its own key (never the client's); each attempt's end is counted
    by its breaker."""

    peer: Peer
    breaker: CircuitBreaker
    now: Callable[[], float]

    @property
    def url(self) -> str:
        return self.peer.proxy

    @property
    def api_key(self) -> str | None:
        return self.peer.api_key

    @property
    def timeouts(self) -> Timeouts:
        return self.peer.timeouts

    @property
    def counts_hops(self) -> bool:
        return True

    def release(self) -> None:
        """Nothing: a peer holds no lease."""

    def settle(self, status: int | None, failed: bool) -> None:
        if status is None:
            if failed:
                self.breaker.failure(self.now())
            else:
                self.breaker.abandon()  # the client left before the peer answered
        elif status >= 500:
            self.breaker.failure(self.now())
        else:
            self.breaker.success()

    async def died(self) -> bool:
        return False


class PeerDirectory:
    """Every peer's models and breaker. A pool (``discover: {dns: …}``) is resolved at its
    interval; each address is a member peer with its own list and breaker (``pools.py``)."""

    def __init__(
        self,
        peers: Mapping[str, Peer],
        session_factory: Callable[[], aiohttp.ClientSession],
        clock: Callable[[], float] = time.monotonic,
        *,
        own_port: int | None = None,
        resolver: Resolver = resolve_addresses,
    ) -> None:
        self._session_factory = session_factory
        self._clock = clock
        self._own_port = own_port
        self._resolve = resolver
        self._peers: dict[str, Peer] = {}  # as configured, pools included
        self._members: dict[str, dict[str, Peer]] = {}  # pool id -> member id -> member
        self._addresses: dict[str, tuple[str, ...]] = {}  # pool id -> its members' addresses
        self._turns: dict[str, int] = {}  # pool id -> the next member's turn
        self._discovered: dict[str, tuple[str, ...]] = {}  # peer or member id -> its models
        self.discovered_at: dict[str, float] = {}
        self.discover_errors: dict[str, str] = {}
        self.dns_errors: dict[str, str] = {}
        self.resolved_at: dict[str, float] = {}
        self._breakers: dict[str, CircuitBreaker] = {}  # peer or member id
        self._wake = asyncio.Event()
        self.reconfigure(peers)

    def reconfigure(self, peers: Mapping[str, Peer]) -> None:
        """Apply a new peer set (live reload): breakers and discovered lists of peers whose
        address did not change are kept — and a pool's members while its name stays."""
        old = self._peers
        self._peers = dict(peers)
        reset: set[str] = set()
        for peer_id, peer in peers.items():
            before = old.get(peer_id)
            if peer.dns is None:
                if before is None or before.proxy != peer.proxy or before.dns is not None:
                    reset.add(peer_id)
                continue
            if before is None or before.dns != peer.dns:
                reset.update(self._members.get(peer_id, {}))
                self._addresses[peer_id] = ()
                self.dns_errors.pop(peer_id, None)
            self._members[peer_id] = {
                member.id: member
                for member in (member_peer(peer, a) for a in self._addresses.get(peer_id, ()))
            }
        for pool_id in set(self._members) - {p.id for p in peers.values() if p.dns is not None}:
            del self._members[pool_id]
            self._addresses.pop(pool_id, None)
            self.dns_errors.pop(pool_id, None)
        self._sync_breakers(reset)
        self._wake.set()

    def _sync_breakers(self, reset: set[str]) -> None:
        """One breaker per plain peer and member (new for ``reset`` ids), none for others."""
        live = {p.id: p for p in self._peers.values() if p.dns is None}
        for members in self._members.values():
            live.update(members)
        for peer_id, peer in live.items():
            breaker = self._breakers.get(peer_id)
            if peer_id in reset or breaker is None:
                self._breakers[peer_id] = CircuitBreaker(
                    peer.breaker_failures, peer.breaker_cooldown
                )
                self._forget(peer_id)
            else:
                breaker.threshold, breaker.cooldown = peer.breaker_failures, peer.breaker_cooldown
        for peer_id in set(self._breakers) - set(live):
            del self._breakers[peer_id]
            self._forget(peer_id)

    def _forget(self, peer_id: str) -> None:
        self._discovered.pop(peer_id, None)
        self.discovered_at.pop(peer_id, None)
        self.discover_errors.pop(peer_id, None)

    @property
    def peers(self) -> Mapping[str, Peer]:
        return self._peers

    def members(self, pool_id: str) -> Mapping[str, Peer]:
        """A pool's members now, by member id (empty for a plain peer)."""
        return self._members.get(pool_id, {})

    def _current(self, peer_id: str) -> Peer | None:
        """The plain peer or the member with this id, as configured now."""
        peer = self._peers.get(peer_id)
        if peer is not None:
            return peer if peer.dns is None else None
        pool_id, at, _ = peer_id.rpartition("@")
        return self._members.get(pool_id, {}).get(peer_id) if at else None

    def models(self, peer_id: str) -> tuple[str, ...]:
        """What a peer serves: its list, or what it last reported; a pool: what any member
        does (each name once)."""
        if peer_id in self._members:
            names = (
                n for member in self._members[peer_id] for n in self._discovered.get(member, ())
            )
            return tuple(dict.fromkeys(names))
        peer = self._current(peer_id)
        if peer is None:
            raise KeyError(peer_id)
        return self._discovered.get(peer_id, ()) if peer.discover else peer.models

    def breaker(self, peer_id: str) -> CircuitBreaker:
        return self._breakers[peer_id]

    def now(self) -> float:
        return self._clock()

    def lookup(self, name: str) -> PeerRoute | None:
        """``peerID/model`` (a pool's id: one of its members that serves the model, in turns;
        a member's id ``pool@address``: that member), or a bare name exactly one peer or pool
        serves. Local names are checked by the caller first (local ids win). Raises
        AmbiguousModelError for a bare name several peers serve."""
        peer_id, slash, rest = name.partition("/")
        if slash and (route := self._route(peer_id, rest)) is not None:
            return route
        owners = [p for p in self._peers if name in self.models(p)]
        if len(owners) > 1:
            raise AmbiguousModelError(name, [f"{p}/{name}" for p in owners])
        return self._route(owners[0], name) if owners else None

    def _route(self, peer_id: str, model: str) -> PeerRoute | None:
        if peer_id in self._members:
            return self._pick(peer_id, model)
        peer = self._current(peer_id)
        if peer is None or model not in self.models(peer_id):
            return None
        return PeerRoute(peer, model)

    def _pick(self, pool_id: str, model: str) -> PeerRoute | None:
        serving = [
            (member, self._breakers[member_id])
            for member_id, member in self._members[pool_id].items()
            if model in self._discovered.get(member_id, ())
        ]
        turn = self._turns.get(pool_id, 0)
        chosen = choose_member(serving, self.now(), turn)
        if chosen is None:
            return None
        self._turns[pool_id] = turn + 1
        return PeerRoute(chosen, model)

    def routes(self) -> list[PeerRoute]:
        """One route per peer model, as listed: a pool's models once, named ``pool/model``."""
        return [PeerRoute(peer, m) for pid, peer in self._peers.items() for m in self.models(pid)]

    def status(self) -> list[dict[str, object]]:
        """Per peer: address, breaker, models, last discovery (no key). A pool: its DNS name,
        members and their models, then one row per member (``pool`` names the pool)."""
        now = self.now()
        out: list[dict[str, object]] = []
        for peer_id, peer in self._peers.items():
            if peer.dns is None:
                out.append(self._peer_row(peer, now))
                continue
            row: dict[str, object] = {
                "id": peer_id,
                "proxy": peer.proxy,
                "dns": peer.dns.name,
                "port": peer.dns.port,
                "members": list(self._members[peer_id]),
                "models": list(self.models(peer_id)),
                "discover": True,
            }
            if peer_id in self.dns_errors:
                row["dns_error"] = self.dns_errors[peer_id]
            out.append(row)
            for member in self._members[peer_id].values():
                member_row = self._peer_row(member, now)
                member_row["pool"] = peer_id
                out.append(member_row)
        return out

    def _peer_row(self, peer: Peer, now: float) -> dict[str, object]:
        breaker = self._breakers[peer.id]
        row: dict[str, object] = {
            "id": peer.id,
            "proxy": peer.proxy,
            "breaker": breaker.state,
            "consecutive_failures": breaker.consecutive_failures,
            "models": list(self.models(peer.id)),
            "discover": peer.discover,
        }
        if breaker.state == "open":
            row["retry_in"] = round(breaker.retry_in(now), 1)
        if peer.id in self.discover_errors:
            row["discover_error"] = self.discover_errors[peer.id]
        return row

    # ---- discovery -------------------------------------------------------------------------

    async def run(self) -> None:
        """Resolve every pool and read every discovering peer's (and member's) models now,
        then each again at its interval; a new member is read as soon as it appears."""
        next_due: dict[tuple[str, str], float] = {}
        while True:
            self._wake.clear()
            jobs = self._jobs()
            now = self.now()
            due = {key: job for key, (job, _) in jobs.items() if next_due.get(key, 0.0) <= now}
            await asyncio.gather(*(job() for job in due.values()))
            for key in due:
                next_due[key] = self.now() + jobs[key][1]
            for key in set(next_due) - set(jobs):
                del next_due[key]
            waits = [t - self.now() for t in next_due.values()]
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), max(0.05, min(waits, default=3600.0)))

    def _jobs(self) -> dict[tuple[str, str], tuple[Callable[[], Awaitable[None]], float]]:
        """Every periodic read now due or not, keyed, with its interval."""
        jobs: dict[tuple[str, str], tuple[Callable[[], Awaitable[None]], float]] = {}
        for peer in self._peers.values():
            if peer.dns is not None:
                jobs["dns", peer.id] = (partial(self.resolve_pool, peer), peer.dns.interval)
                for member in self._members[peer.id].values():
                    jobs["models", member.id] = (
                        partial(self.discover, member),
                        peer.discover_interval,
                    )
            elif peer.discover:
                jobs["models", peer.id] = (partial(self.discover, peer), peer.discover_interval)
        return jobs

    async def resolve_pool(self, pool: Peer) -> None:
        """Resolve a pool's name and make its addresses its members; a failure keeps them."""
        assert pool.dns is not None, "only a pool is resolved"
        try:
            addresses = await self._resolve(pool.dns)
        except DnsError as exc:
            detail = str(exc)
            if self.dns_errors.get(pool.id) != detail:
                kept = len(self._members.get(pool.id, {}))
                log.warning("peer pool %s: %s (its %d members are kept)", pool.id, detail, kept)
            self.dns_errors[pool.id] = detail
            return
        if self._peers.get(pool.id) is not pool:
            return  # reconfigured meanwhile
        self.dns_errors.pop(pool.id, None)
        self.resolved_at[pool.id] = time.time()
        self.set_members(pool, addresses)

    def set_members(self, pool: Peer, addresses: Sequence[str]) -> None:
        """The pool's members are now these addresses (but this gateway's own)."""
        assert pool.dns is not None, "only a pool has members"
        members, itself = member_addresses(addresses, pool.dns.port, self._own_port)
        if tuple(members) == self._addresses.get(pool.id):
            return
        before = set(self._members.get(pool.id, {}))
        self._addresses[pool.id] = tuple(members)
        self._members[pool.id] = {m.id: m for m in (member_peer(pool, a) for a in members)}
        joined = [m for m in self._members[pool.id] if m not in before]
        left = sorted(before - set(self._members[pool.id]))
        log.info(
            "peer pool %s: %d members%s%s%s",
            pool.id,
            len(members),
            f"; joined: {', '.join(joined)}" if joined else "",
            f"; left: {', '.join(left)}" if left else "",
            f"; skipped as this gateway: {', '.join(itself)}" if itself else "",
        )
        self._sync_breakers(set())
        if joined:
            self._wake.set()  # read the new members' models now

    async def discover(self, peer: Peer) -> None:
        try:
            names = await self._read_models(peer)
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            detail = str(exc) or type(exc).__name__
            if self._current(peer.id) is not peer:
                return
            if self.discover_errors.get(peer.id) != detail:
                log.warning("peer %s: cannot read its model list: %s", peer.id, detail)
            self.discover_errors[peer.id] = detail
            return
        self.record_models(peer, names)

    def record_models(self, peer: Peer, names: tuple[str, ...]) -> None:
        """What ``peer`` (a discovering peer or a member) just said it serves; ignored if it
        was reconfigured, or left its pool, meanwhile."""
        if self._current(peer.id) is not peer:
            return
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
    """Model ids from an OpenAI ``/v1/models`` body, and a modelswap peer's ``aliases`` (it
    lists alias rows only with includeAliasesInList); rows for the peer's own peers skipped."""
    data = jsonsafe.loads(body)
    rows = data.get("data") if isinstance(data, dict) else None
    if not isinstance(rows, list):
        raise ValueError("/v1/models has no `data` list")
    names: list[str] = []
    for row in rows[:MAX_DISCOVERED]:
        if not isinstance(row, dict) or "peer" in row:
            continue
        aliases = row.get("aliases")
        for name in (row.get("id"), *(aliases if isinstance(aliases, list) else ())):
            if isinstance(name, str) and name and len(name) <= 256:
                names.append(name)
    return tuple(dict.fromkeys(names))[:MAX_DISCOVERED]
