"""Peer pools: a peer with ``discover: {dns: NAME, port: P}`` stands for every address NAME
resolves to. Each address is a *member*, a peer of its own (``<pool>@<address>``, at
``scheme://address:P``, with its own model list and its own breaker); the pool's settings (key,
timeouts, filters, breaker thresholds) apply to each.

Pure but for :func:`is_local_address`, which asks the kernel whether it may bind an address.
"""

from __future__ import annotations

import socket
from collections.abc import Sequence
from dataclasses import replace

from modelswap.config.resolved import DnsDiscovery, Peer
from modelswap.routing.breaker import CircuitBreaker

MAX_MEMBERS = 256


def member_id(pool_id: str, address: str) -> str:
    return f"{pool_id}@{address}"


def member_url(dns: DnsDiscovery, address: str) -> str:
    host = f"[{address}]" if ":" in address else address
    return f"{dns.scheme}://{host}:{dns.port}"


def member_peer(pool: Peer, address: str) -> Peer:
    """The member at ``address``: the pool's settings, its own id and URL."""
    assert pool.dns is not None, "only a pool has members"
    return replace(
        pool,
        id=member_id(pool.id, address),
        proxy=member_url(pool.dns, address),
        discover=True,
        models=(),
        dns=None,
        pool=pool.id,
    )


def is_local_address(address: str) -> bool:
    """Whether ``address`` is one of this machine's (the kernel lets us bind it)."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_DGRAM) as sock:
            sock.bind((address, 0))
    except OSError:
        return False
    return True


def member_addresses(
    addresses: Sequence[str], port: int, own_port: int | None
) -> tuple[list[str], list[str]]:
    """The addresses that become members (at most ``MAX_MEMBERS``), and those skipped as this
    gateway itself: one of this machine's addresses at the port it listens on — a headless
    Service lists every ready pod, the asking one included."""
    members: list[str] = []
    itself: list[str] = []
    for address in addresses:
        if own_port == port and is_local_address(address):
            itself.append(address)
        elif len(members) < MAX_MEMBERS:
            members.append(address)
    return members, itself


def choose_member(
    candidates: Sequence[tuple[Peer, CircuitBreaker]], now: float, turn: int
) -> Peer | None:
    """One of the members that serve a model, in turns: those whose breaker is closed first,
    then those due for a probe, else any (its open breaker answers 503 at once)."""
    if not candidates:
        return None
    closed = [peer for peer, breaker in candidates if breaker.state == "closed"]
    due = [peer for peer, breaker in candidates if breaker.retry_in(now) == 0.0]
    pool = closed or due or [peer for peer, _ in candidates]
    return pool[turn % len(pool)]
