"""The scheduler: one pure, synchronous decision-maker for every request (DESIGN §4).

It decides; :class:`~modelswap.routing.protocols.Effects` acts. Every ``on_*`` method is a plain
``def`` that runs to completion on the event loop, so no lock is needed and tests drive it
directly with a recording ``Effects`` (no sleeps, no sockets).

Rules, in the order ``_pump`` applies them:

1. A model whose unload was asked for is stopped once its in-flight requests drain.
2. The *next target* is the model of the oldest queued request whose model is not running.
   Starting it would evict what the swapper names; those models are *blocked*: they finish what
   they serve but take no new request, so a busy model cannot starve a waiting one.
3. Queued requests for running, unblocked models are granted at once.
4. When no swap and no stop is under way and every model to evict has drained, the swap starts.
5. When a swap ends, every request queued for its target is granted together (collation):
   ``A B A B`` queued during a swap costs two starts, not four.

A request therefore waits for at most one swap per distinct model queued before it, plus the
drain of the model being evicted.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Set

from modelswap.errors import ShuttingDownError
from modelswap.routing.protocols import Admission, Effects, Swapper


class Scheduler:
    def __init__(self, swapper: Swapper, effects: Effects) -> None:
        self._swapper = swapper
        self._effects = effects
        self._queue: list[Admission] = []
        self._running: set[str] = set()
        self._in_flight: Counter[str] = Counter()
        self._swapping: str | None = None
        self._stopping: set[str] = set()
        self._unload_requested: set[str] = set()
        self._shutdown = False

    # ---- snapshots -------------------------------------------------------------------------

    def in_flight(self, model: str) -> int:
        return self._in_flight[model]

    def queued(self, model: str) -> int:
        return sum(1 for adm in self._queue if adm.model == model)

    @property
    def running(self) -> frozenset[str]:
        return frozenset(self._running)

    @property
    def swapping(self) -> str | None:
        return self._swapping

    # ---- events ----------------------------------------------------------------------------

    def on_request(self, admission: Admission) -> None:
        if self._shutdown:
            self._effects.grant_error(admission, ShuttingDownError())
            return
        self._queue.append(admission)
        self._pump()

    def on_cancel(self, admission: Admission) -> None:
        """The client went away while queued. A no-op if it was already granted."""
        if admission in self._queue:
            self._queue.remove(admission)
            self._pump()

    def on_swap_done(self, target: str, error: Exception | None) -> None:
        self._swapping = None
        if error is None:
            self._running.add(target)
            self._grant_all(target)
        else:
            for adm in self._take(target):
                self._effects.grant_error(adm, error)
        self._pump()

    def on_serve_done(self, model: str) -> None:
        if self._in_flight[model] > 0:
            self._in_flight[model] -= 1
        self._pump()

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
        target = self._next_target()
        evict = self._swapper.eviction_for(target, self._running) if target else frozenset()
        blocked = evict | self._unload_requested
        for adm in list(self._queue):
            if adm.model in self._running and adm.model not in blocked:
                self._queue.remove(adm)
                self._grant(adm)
        if (
            target is not None
            and not self._stopping
            and all(self._in_flight[m] == 0 for m in evict)
        ):
            self._swapping = target
            self._running -= evict
            self._effects.start_swap(target, evict)

    def _next_target(self) -> str | None:
        if self._swapping is not None:
            return None
        for adm in self._queue:
            if adm.model not in self._running:
                return adm.model
        return None

    def _grant_all(self, model: str) -> None:
        for adm in self._take(model):
            self._grant(adm)

    def _grant(self, adm: Admission) -> None:
        if self._effects.grant(adm):
            self._in_flight[adm.model] += 1

    def _take(self, model: str) -> list[Admission]:
        taken = [adm for adm in self._queue if adm.model == model]
        self._queue = [adm for adm in self._queue if adm.model != model]
        return taken
