"""The scheduler: one pure, synchronous decision-maker for every request.

It decides; :class:`~modelswap.routing.protocols.Effects` acts (and is its only clock). Every
``on_*`` method is a plain ``def`` that runs to completion on the event loop, so no lock is
needed and tests drive it directly with a recording ``Effects`` (no sleeps, no sockets).

Rules, in the order ``_pump`` applies them (docs/architecture.md, "Scheduler rules"):

1. A model whose unload was asked for is stopped once its in-flight requests drain.
2. The *next target* is chosen among the models of queued requests that are not running: the
   model of any request that has waited ``max_queue_wait`` (oldest first) — the starvation
   bound — else by the request's client class (interactive before batch), then the model's
   ``priority``, then fair share across clients (``routing/fairshare.py``), then the oldest
   request. What the swapper would evict for it is *blocked*: it finishes what it serves but
   takes no new request, so a busy model cannot starve a waiting one.
3. Queued requests for running, unblocked models are granted, within each model's
   ``concurrency_limit`` and the global ``max_in_flight``, in fair-queue order: aged first,
   then class, then the client furthest behind its weighted share (the rest wait).
4. With no swap and no stop under way, the swap starts once every model to evict has drained —
   or once ``drain_timeout`` has passed since it became due (the evicted model's requests then
   end with an error). While it waits, ``Effects.prepare_swap`` is told once (the router
   prefetches the target's weights), and ``abandon_swap`` if another target becomes due.
5. When a swap ends, every request queued for its target is granted together (collation):
   ``A B A B`` queued during a swap costs two starts, not four — within its limits, in
   fair-queue order.

A request beyond ``queue_limit`` is refused at once (QueueFullError, 429). A start whose every
waiter left is cancelled when another model has waiters.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Set
from dataclasses import dataclass, field

from modelswap.errors import QueueFullError, ShuttingDownError
from modelswap.routing.fairshare import FairShare, client_of
from modelswap.routing.protocols import Admission, Effects, Eviction, Swapper

# What a queued request can wait for (``Scheduler.waits_for``): its model's start under way;
# a swap not begun (another start or stop first, or its model is to stop for another); the
# models its start evicts finishing their answers; its model's ``concurrencyLimit``; the
# gateway's ``maxInFlight``; its turn (room was just made: the next decision grants it).
WAITS_FOR = ("start", "swap", "drain", "concurrencyLimit", "maxInFlight", "turn")


@dataclass(frozen=True, slots=True)
class SchedulerPolicy:
    queue_limit: int = 1000
    max_queue_wait: float = 60.0
    drain_timeout: float = 600.0
    max_in_flight: int = 0  # 0: no limit
    priorities: Mapping[str, int] = field(default_factory=dict)
    concurrency: Mapping[str, int] = field(default_factory=dict)  # 0/absent: no limit
    retry_after: float = 5.0


@dataclass(frozen=True, slots=True)
class SchedulerSnapshot:
    """A copy of what the scheduler decides over, for a dry run (``routing/prediction.py``):
    deciding on it with ``swapper`` is deciding as the scheduler would now."""

    swapper: Swapper
    running: frozenset[str]
    in_flight: Mapping[str, int]
    queued: Mapping[str, int]
    swapping: str | None
    stopping: frozenset[str]
    unload_requested: frozenset[str]
    drain_timeout: float

    @property
    def busy(self) -> frozenset[str]:
        return frozenset(m for m in self.running if self.in_flight.get(m, 0))

    def eviction_for(self, model: str) -> Eviction | None:
        """What the scheduler's own swapper would stop to start ``model`` from this state."""
        return self.swapper.eviction_for(model, self.running, self.busy)


class Scheduler:
    def __init__(
        self, swapper: Swapper, effects: Effects, policy: SchedulerPolicy | None = None
    ) -> None:
        self._swapper = swapper
        self._effects = effects
        self._policy = policy or SchedulerPolicy()
        self._queue: list[Admission] = []
        self._running: set[str] = set()
        self._in_flight: Counter[str] = Counter()
        self._swapping: str | None = None
        self._stopping: set[str] = set()
        self._unload_requested: set[str] = set()
        self._due_since: dict[str, float] = {}  # target -> when its swap became due
        self._cancelled: set[str] = set()  # swaps cancelled because every waiter left
        self._preparing: str | None = None  # the due target told to prepare_swap
        self._shutdown = False
        self._fair = FairShare()

    # ---- snapshots -------------------------------------------------------------------------

    def in_flight(self, model: str) -> int:
        return self._in_flight[model]

    def queued(self, model: str) -> int:
        return sum(1 for adm in self._queue if adm.model == model)

    def waiting(self) -> list[Admission]:
        """Every queued request, in the order the fair queue would serve them now (a
        snapshot: places in the queue, ``GET /api/queue``)."""
        return self._fair.order(self._queue, self._effects.now(), self._policy.max_queue_wait)

    def place(self, admission: Admission) -> int | None:
        """``admission``'s place among the requests waiting for its model, 1 for the next
        served (None: it waits no more). For a waiting client's ``queued 3rd for m``."""
        if admission not in self._queue:
            return None
        same = [a for a in self.waiting() if a.model == admission.model]
        return same.index(admission) + 1

    def waits_for(self, admission: Admission, blocked: Set[str] | None = None) -> str:
        """What a queued request waits for, as :data:`WAITS_FOR` names it (``GET /api/queue``),
        read from the state the next decision is made on. ``blocked``: :meth:`blocked`, when
        the caller asks for many."""
        model = admission.model
        if model in self._running:
            if model in (self.blocked() if blocked is None else blocked):
                return "swap"  # its model is to stop: it waits for the swap and a new start
            limit = self._policy.concurrency.get(model, 0)
            if limit and self._in_flight[model] >= limit:
                return "concurrencyLimit"
            return "maxInFlight" if self._gateway_full() else "turn"
        if self._swapping == model:
            return "start"
        if self._swapping is None and not self._stopping and model in self._due_since:
            return "drain"  # its start is due: what it evicts is finishing its answers
        return "swap"

    def blocked(self) -> frozenset[str]:
        """Running models that take no new request: what the next swap evicts, and models
        whose unload waits for their answers to end."""
        _target, eviction = self._next_target()
        return (eviction.models if eviction else frozenset()) | self._unload_requested

    @property
    def queue_length(self) -> int:
        return len(self._queue)

    @property
    def running(self) -> frozenset[str]:
        return frozenset(self._running)

    def runs(self, model: str) -> bool:
        """Whether ``model`` is running (without copying the running set: every admission
        asks)."""
        return model in self._running

    @property
    def swapping(self) -> str | None:
        return self._swapping

    # ---- events ----------------------------------------------------------------------------

    def on_request(self, admission: Admission) -> None:
        if self._shutdown:
            self._effects.grant_error(admission, ShuttingDownError())
            return
        if self._idle() and admission.model in self._running and self._has_room(admission):
            self._grant(admission)  # nobody waits: what _pump would do, without its walk
            return
        self._queue.append(admission)
        self._pump()
        # queueLimit bounds *waiting* requests: one served at once never counts against it.
        if admission in self._queue and len(self._queue) > self._policy.queue_limit:
            self._queue.remove(admission)
            self._effects.grant_error(admission, QueueFullError(self._policy.retry_after))

    def on_cancel(self, admission: Admission) -> None:
        """The client went away while queued: it leaves the queue and causes no start. A no-op
        if it was already granted."""
        if admission not in self._queue:
            return
        self._queue.remove(admission)
        target = self._swapping
        if (
            target is not None
            and admission.model == target
            and not self.queued(target)
            and self._queue  # another model waits: do not keep starting for nobody
        ):
            self._cancelled.add(target)
            self._effects.cancel_swap(target)
        self._pump()

    def on_swap_done(self, target: str, error: Exception | None) -> None:
        self._swapping = None
        self._due_since.pop(target, None)
        cancelled = target in self._cancelled
        self._cancelled.discard(target)
        if error is None:
            self._running.add(target)
            self._grant_all(target)
        elif not cancelled:
            for adm in self._take(target):
                self._effects.grant_error(adm, error)
        # A cancelled start fails nobody: whoever queued for it since came after the cancel,
        # and waits for a fresh start like any other request.
        self._pump()

    def on_serve_done(self, model: str) -> None:
        if self._in_flight[model] > 0:
            self._in_flight[model] -= 1
        if not self._idle():  # (idle: _pump would find nothing to do)
            self._pump()

    def _idle(self) -> bool:
        """Nobody waits and nothing is due: no unload waits for a drain, no swap is
        prepared or timed. Then a request for a running model with room is granted at once
        and an answer's end changes nothing else, exactly as :meth:`_pump` would decide —
        the uncontended request skips the queue's walk (its fair share is still charged)."""
        return not (self._queue or self._unload_requested or self._due_since) and (
            self._preparing is None
        )

    def on_unload(self, models: Set[str]) -> frozenset[str]:
        """Stop these models once idle (TTL expiry or an explicit unload).

        Returns the models that will be stopped: those running now. A model mid-start is not
        affected (the requests waiting for it are served); unload it once it is running.
        """
        accepted = frozenset(set(models) & self._running)
        self._unload_requested |= accepted
        self._pump()
        return accepted

    def on_stop_done(self, models: Set[str]) -> None:
        self._stopping -= set(models)
        self._pump()

    def on_process_exited(self, model: str) -> None:
        """The backend died on its own: it is no longer running (requests restart it)."""
        self._running.discard(model)
        self._unload_requested.discard(model)
        self._pump()

    def on_reconfigure(self, swapper: Swapper, policy: SchedulerPolicy) -> None:
        """A new config (live reload): new groups/budgets and limits apply from now on;
        nothing running is stopped for it."""
        self._swapper = swapper
        self._policy = policy
        self._pump()

    def evictions_for(self, model: str) -> frozenset[str] | None:
        """What starting ``model`` now would stop (None: it cannot start now)."""
        eviction = self.snapshot().eviction_for(model)
        return None if eviction is None else eviction.models

    def snapshot(self) -> SchedulerSnapshot:
        """A copy of the state the next decision is made on (nothing shared with it)."""
        return SchedulerSnapshot(
            swapper=self._swapper,
            running=frozenset(self._running),
            in_flight={m: n for m, n in self._in_flight.items() if n},
            queued=dict(Counter(adm.model for adm in self._queue)),
            swapping=self._swapping,
            stopping=frozenset(self._stopping),
            unload_requested=frozenset(self._unload_requested),
            drain_timeout=self._policy.drain_timeout,
        )

    def on_tick(self) -> None:
        """Time passed: re-check the starvation bound and drain timeouts."""
        self._pump()

    def on_shutdown(self) -> None:
        self._shutdown = True
        queue, self._queue = self._queue, []
        for adm in queue:
            self._effects.grant_error(adm, ShuttingDownError())

    # ---- decisions -------------------------------------------------------------------------

    def _pump(self) -> None:
        if self._shutdown:
            return
        drained = {m for m in self._unload_requested if self._in_flight[m] == 0}
        if drained:
            self._unload_requested -= drained
            self._running -= drained
            self._stopping |= drained
            self._effects.stop(frozenset(drained))
        target, eviction = self._next_target()
        blocked = (eviction.models if eviction else frozenset()) | self._unload_requested
        self._grant_fairly(
            [a for a in self._queue if a.model in self._running and a.model not in blocked]
        )
        if target is None or eviction is None:
            self._due_since.clear()  # nothing is due: a later swap starts its own drain clock
            self._prepare(None)
            return
        if self._stopping:
            self._prepare(target)
            return
        now = self._effects.now()
        due = self._due_since.get(target, now)
        self._due_since = {target: due}  # only the current target's wait counts
        busy = {m for m in eviction.models if self._in_flight[m]}
        reason = eviction.reason
        if busy:
            if now - due < self._policy.drain_timeout:
                self._prepare(target)
                return  # wait for them to finish their answers
            reason += (
                f"; {', '.join(sorted(busy))} still busy after the "
                f"{self._policy.drain_timeout:g} s drain timeout"
            )
        self._swapping = target
        self._running -= eviction.models
        if self._preparing not in (None, target):
            self._effects.abandon_swap(self._preparing)
        self._preparing = None  # what was prepared now belongs to the swap
        self._effects.start_swap(target, eviction.models, reason)

    def _prepare(self, target: str | None) -> None:
        """``target`` is the due swap that waits (None: no swap is due)."""
        if target == self._preparing:
            return
        if self._preparing is not None:
            self._effects.abandon_swap(self._preparing)
        self._preparing = target
        if target is not None:
            self._effects.prepare_swap(target)

    def _has_room(self, adm: Admission) -> bool:
        limit = self._policy.concurrency.get(adm.model, 0)
        if limit and self._in_flight[adm.model] >= limit:
            return False
        return not self._gateway_full()

    def _gateway_full(self) -> bool:
        total = self._policy.max_in_flight
        return bool(total) and sum(self._in_flight.values()) >= total

    def _next_target(self) -> tuple[str | None, Eviction | None]:
        if self._swapping is not None:
            return None, None
        waiting = [adm for adm in self._queue if adm.model not in self._running]
        if not waiting:
            return None, None
        now = self._effects.now()
        order = sorted(waiting, key=lambda a: self._target_rank(a, now))
        busy = {m for m in self._running if self._in_flight[m]}
        seen: set[str] = set()
        for adm in order:
            if adm.model in seen:
                continue
            seen.add(adm.model)
            eviction = self._swapper.eviction_for(adm.model, frozenset(self._running), busy)
            if eviction is not None:
                return adm.model, eviction
        return None, None

    def _target_rank(self, adm: Admission, now: float) -> tuple[float, ...]:
        """Aged requests first (oldest first); then class, the model's priority, fair share
        and arrival."""
        if now - adm.arrived >= self._policy.max_queue_wait:
            return (0.0, adm.arrived)
        client = client_of(adm)
        prio = self._policy.priorities.get(adm.model, 0)
        return (1.0, client.rank, -prio, self._fair.tag(client), adm.arrived)

    def _grant_all(self, model: str) -> None:
        self._grant_fairly([a for a in self._queue if a.model == model])

    def _grant_fairly(self, ready: list[Admission]) -> None:
        """Grant what ``ready`` (queued for running, unblocked models) has room for, one at
        a time in fair-queue order: each grant moves its client's share on."""
        if not ready:
            return
        if len(ready) == 1:  # the common case, a request for a ready model: no choice to make
            adm = ready[0]
            if self._has_room(adm):
                self._queue.remove(adm)
                self._grant(adm)
            return
        full: set[str] = set()  # models with no free place left: their waiters keep waiting
        for adm in self._fair.serve(ready, self._effects.now(), self._policy.max_queue_wait):
            if adm.model in full:
                continue
            if not self._has_room(adm):
                if self._gateway_full():
                    return
                full.add(adm.model)
                continue
            self._queue.remove(adm)
            self._grant(adm)

    def _grant(self, adm: Admission) -> None:
        if self._effects.grant(adm):
            self._in_flight[adm.model] += 1
            self._fair.charge(client_of(adm))

    def _take(self, model: str) -> list[Admission]:
        taken = [adm for adm in self._queue if adm.model == model]
        self._queue = [adm for adm in self._queue if adm.model != model]
        return taken
