"""Who goes next among waiting requests: the scheduler's fair queue. Pure; it gets ``now``.

The order, for every choice the scheduler makes (the next request granted a model's free
place, the next swap target):

1. **Aging** — a request that has waited ``maxQueueWait`` goes first, oldest first, whatever
   its class: nothing waits for ever.
2. **Class** — interactive before batch (``Client.rank``).
3. **Fair share** — among the clients waiting in a class, start-time fair queuing (SFQ), the
   equivalent of deficit round robin for requests of one unit each: every client has a
   *finish tag*, the virtual time its service so far reaches at its weight; the waiter whose
   client's tag is lowest goes next, and a grant moves that client's tag on by
   ``1 / weight``. A client that comes back after waiting for nothing starts at the class's
   virtual time (the tag of the last grant), never behind it: it cannot hoard credit, and
   its first request passes every backlogged client's second.
4. Arrival, oldest first (one client's requests keep their order).

A request counts as one unit of service: the length of an answer is not known when it is
granted. Two clients whose requests cost alike get equal service; the token quotas
(``routing/quota.py``) bound a client whose answers are long.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Sequence
from typing import TypeVar

from modelswap.routing.clients import ANONYMOUS, Client
from modelswap.routing.protocols import Admission

A = TypeVar("A", bound=Admission)


def client_of(admission: Admission) -> Client:
    """The admission's client (an Admission that names none is the anonymous client's)."""
    client = getattr(admission, "client", ANONYMOUS)
    return client if type(client) is Client else ANONYMOUS


class FairShare:
    """The fair-share clocks of one scheduler: a finish tag per client, a virtual time per
    class. Bounded by the number of clients (configured keys and the anonymous one)."""

    def __init__(self) -> None:
        self._finish: dict[str, float] = {}
        self._virtual: dict[int, float] = {}

    def tag(self, client: Client) -> float:
        """Where ``client``'s next request stands in its class (lower goes first)."""
        return max(self._finish.get(client.name, 0.0), self._virtual.get(client.rank, 0.0))

    def charge(self, client: Client, units: float = 1.0) -> None:
        """``client`` was granted ``units`` of service."""
        rank = client.rank
        start = max(self._finish.get(client.name, 0.0), self._virtual.get(rank, 0.0))
        self._finish[client.name] = start + units / client.weight
        self._virtual[rank] = start

    def serve(self, waiting: Sequence[A], now: float, max_wait: float) -> Iterator[A]:
        """``waiting`` in the order to serve them (the rules in the module doc). The clocks
        are read at each step: :meth:`charge` what is granted before taking the next. A
        caller may skip one (its model is full): it keeps its place for the next time."""
        aged = [a for a in waiting if now - a.arrived >= max_wait]
        yield from sorted(aged, key=lambda a: a.arrived)
        lanes: dict[str, tuple[Client, deque[A]]] = {}
        for adm in sorted(waiting, key=lambda a: a.arrived):
            if now - adm.arrived < max_wait:
                client = client_of(adm)
                lanes.setdefault(client.name, (client, deque()))[1].append(adm)
        while lanes:
            name = min(lanes, key=lambda n: self._lane_key(*lanes[n]))
            lane = lanes[name][1]
            adm = lane.popleft()
            if not lane:
                del lanes[name]
            yield adm

    def _lane_key(self, client: Client, lane: deque[A]) -> tuple[float, float, float]:
        return (client.rank, self.tag(client), lane[0].arrived)

    def order(self, waiting: Sequence[A], now: float, max_wait: float) -> list[A]:
        """``waiting`` in the order they would be served if each were granted in turn (a
        snapshot for places in the queue; this scheduler's clocks are not moved)."""
        shadow = FairShare()
        shadow._finish = dict(self._finish)
        shadow._virtual = dict(self._virtual)
        ordered: list[A] = []
        for adm in shadow.serve(waiting, now, max_wait):
            ordered.append(adm)
            shadow.charge(client_of(adm))
        return ordered
