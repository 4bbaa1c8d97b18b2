"""A scheduler run on a virtual clock: requests take the service time they are given, swaps
the start time, and nothing sleeps (tests/unit/routing/test_fair_share_sim.py).

:class:`SimEffects` is the recording ``Effects`` (tests/fakes/effects.py) that also *acts*: a
granted request finishes ``service`` seconds later (``on_serve_done``), a swap ends
``swap_seconds`` later (``on_swap_done``), a stop at once. Events at the same instant run in
the order they were scheduled. Clients are closed loops (:meth:`Sim.keep`): one that keeps
``n`` requests outstanding sends the next as soon as one is answered, as a benchmark harness
or an agent does.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Set
from dataclasses import dataclass, field
from typing import Protocol

from tests.fakes.effects import RecordingEffects

from modelswap.routing import protocols
from modelswap.routing.clients import ANONYMOUS, Client
from modelswap.routing.scheduler import SchedulerPolicy


@dataclass(eq=False)
class Request:
    """One simulated request (an Admission): whose, for which model, and what became of it."""

    model: str
    client: Client
    arrived: float
    service: float
    granted: float | None = None
    finished: float | None = None
    gone: bool = False

    @property
    def waited(self) -> float:
        assert self.granted is not None, f"{self!r} was never granted"
        return self.granted - self.arrived

    def __repr__(self) -> str:
        return f"<{self.client.name}:{self.model}@{self.arrived:g}>"


class AnyScheduler(Protocol):
    def on_request(self, admission: protocols.Admission) -> None: ...
    def on_swap_done(self, target: str, error: Exception | None) -> None: ...
    def on_serve_done(self, model: str) -> None: ...
    def on_stop_done(self, models: Set[str]) -> None: ...
    def on_tick(self) -> None: ...


MakeScheduler = Callable[
    [protocols.Swapper, protocols.Effects, SchedulerPolicy | None], AnyScheduler
]


@dataclass(order=True)
class _Event:
    at: float
    seq: int
    run: Callable[[], None] = field(compare=False)


class Sim(RecordingEffects):
    """The virtual clock, the effects and the clients of one simulated gateway."""

    def __init__(
        self,
        make: MakeScheduler,
        swapper: protocols.Swapper,
        policy: SchedulerPolicy,
        *,
        swap_seconds: float = 5.0,
        tick: float = 1.0,
    ) -> None:
        super().__init__()
        self.scheduler = make(swapper, self, policy)
        self.swap_seconds = swap_seconds
        self.requests: list[Request] = []
        self._events: list[_Event] = []
        self._seq = itertools.count()
        self._tick = tick
        self._loops: dict[int, Callable[[], None]] = {}  # id(request) -> send the next

    # ---- the clock ---------------------------------------------------------------------------

    def at(self, when: float, run: Callable[[], None]) -> None:
        heapq.heappush(self._events, _Event(when, next(self._seq), run))

    def run(self, until: float) -> None:
        """Run every event up to ``until`` (and a tick each ``tick`` seconds: the starvation
        bound is checked on ticks, as the router's ticker does)."""
        next_tick = self.clock + self._tick
        while self._events and self._events[0].at <= until:
            if next_tick < self._events[0].at:
                self.clock = next_tick
                next_tick += self._tick
                self.scheduler.on_tick()
                continue
            event = heapq.heappop(self._events)
            self.clock = max(self.clock, event.at)
            event.run()
        self.clock = until

    # ---- clients -----------------------------------------------------------------------------

    def send(
        self,
        model: str,
        service: float,
        client: Client = ANONYMOUS,
        then: Callable[[], None] | None = None,
    ) -> Request:
        request = Request(model, client, self.clock, service)
        self.requests.append(request)
        if then is not None:
            self._loops[id(request)] = then
        self.scheduler.on_request(request)
        return request

    def keep(
        self, n: int, model: str, service: float, client: Client, *, start: float = 0.0
    ) -> None:
        """``client`` keeps ``n`` requests to ``model`` outstanding from ``start`` on."""

        def one() -> None:
            self.send(model, service, client, then=one)

        for _ in range(n):
            self.at(start, one)

    def served(self, client: Client, since: float = 0.0) -> int:
        """Requests of ``client`` answered after ``since``."""
        return sum(
            1
            for r in self.requests
            if r.client == client and r.finished is not None and r.finished > since
        )

    # ---- the effects act ---------------------------------------------------------------------

    def grant(self, admission: protocols.Admission) -> bool:
        ok = super().grant(admission)
        assert isinstance(admission, Request)
        admission.granted = self.clock
        if ok:
            self.at(self.clock + admission.service, lambda: self._finish(admission))
        return ok

    def _finish(self, request: Request) -> None:
        request.finished = self.clock
        self.scheduler.on_serve_done(request.model)
        then = self._loops.pop(id(request), None)
        if then is not None:
            then()

    def start_swap(self, target: str, evict: Set[str], reason: str) -> None:
        super().start_swap(target, evict, reason)
        self.at(self.clock + self.swap_seconds, lambda: self.scheduler.on_swap_done(target, None))

    def stop(self, models: Set[str]) -> None:
        super().stop(models)
        self.at(self.clock, lambda: self.scheduler.on_stop_done(frozenset(models)))
