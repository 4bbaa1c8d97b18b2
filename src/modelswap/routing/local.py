"""LocalRouter: the scheduler's Effects over real ManagedProcesses, and leases for requests.

``acquire(model)`` returns a :class:`Lease` once the scheduler grants the request; the lease
must be released exactly once, when the response body has finished or the client went away —
not when the handler returns (docs/architecture.md, "Scheduler rules"). Releasing is idempotent.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable, Coroutine, Iterable, Mapping, Set
from dataclasses import dataclass, field, replace

from modelswap.config import ModelConfig
from modelswap.errors import Diagnosis, StartError
from modelswap.events import Event, EventBus
from modelswap.planner.weights import weight_files
from modelswap.routing.clients import ANONYMOUS, Client
from modelswap.routing.prefill import EvictionPrice
from modelswap.routing.protocols import Admission, Swapper
from modelswap.routing.scheduler import Scheduler, SchedulerPolicy
from modelswap.routing.swappers import ExclusiveSwapper
from modelswap.states import ProcessState
from modelswap.supervisor.prefetch import Prefetch, PrefetchRecord
from modelswap.supervisor.process import ManagedProcess
from modelswap.supervisor.promptcache import CacheReport
from modelswap.supervisor.stops import IDLE, UNLOADED, StopRecord, evicted

log = logging.getLogger(__name__)

RETIRE_ROUNDS = 5
SERVED_HISTORY = 50  # requests per model whose service time a dry run's drain estimate reads
# The last-swap record waits this long at most for a cancelled prefetch's thread to finish
# its chunk.
PREFETCH_SETTLE_SECONDS = 1.0
_IDLE_STATES = frozenset({ProcessState.STOPPED, ProcessState.FAILED, ProcessState.SHUTDOWN})

ABORTED = Diagnosis(
    "start_aborted",
    "The start was cancelled: every request waiting for it went away.",
    fix="send the request again.",
)


@dataclass(eq=False)
class PendingLease:
    """One request's place with the scheduler; ``future`` gets the Lease (or the error)."""

    model: str
    future: asyncio.Future[Lease]
    arrived: float
    client: Client = ANONYMOUS  # whose request: its class and share in the fair queue
    queued: bool = False  # not granted at once: it waited in the scheduler's queue


@dataclass(eq=False)
class Lease:
    """Permission to send requests to ``process`` until :meth:`release`."""

    process: ManagedProcess
    _router: LocalRouter
    granted_at: float = field(default_factory=time.monotonic)
    _released: bool = False

    @property
    def model(self) -> str:
        return self.process.model

    @property
    def config(self) -> ModelConfig:
        """The configuration the leased process runs (its address, its upstream key)."""
        return self.process.config

    async def confirm_exit(self) -> bool:
        """Whether the leased backend has died (its exit noticed now, the model marked failed)."""
        return await self.process.confirm_exit()

    def release(self) -> None:
        if not self._released:
            self._released = True
            self._router._release(self.model, time.monotonic() - self.granted_at)


class LocalRouter:
    """Owns the model → ManagedProcess map and implements the scheduler's Effects."""

    def __init__(
        self,
        processes: Mapping[str, ManagedProcess],
        events: EventBus,
        swapper: Swapper | None = None,
        policy: SchedulerPolicy | None = None,
        *,
        tick_seconds: float = 1.0,
        explain_failure: Callable[[str, StartError], None] | None = None,
        before_cold_start: Callable[[str], None] | None = None,
        overlap: Callable[[str, frozenset[str]], bool] | None = None,
    ) -> None:
        self.processes = dict(processes)
        # Completes a failed start's error before its waiters hear it (the dry run of a model
        # that does not fit): called once per failed start.
        self._explain_failure = explain_failure
        # Told of the first request for a model that is not running, before the scheduler
        # decides on it: the runtime records its dry run, to set beside the swap that follows.
        self._before_cold_start = before_cold_start
        # Whether a swap's start may begin while what it evicts saves and stops (routing/overlap)
        self._overlap = overlap or (lambda _target, _evict: False)
        self._events = events
        self.scheduler = Scheduler(swapper or ExclusiveSwapper(), self, policy)
        self._tick_seconds = tick_seconds
        self._swap_tasks: dict[str, asyncio.Task[None]] = {}
        self._aborted: set[str] = set()
        self._ticker: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._idle_timers: dict[str, asyncio.TimerHandle] = {}
        self._stop_waiters: dict[str, list[asyncio.Future[None]]] = {}
        self.last_used: dict[str, float] = {}
        # How long each model's last requests held their lease: a dry run's drain estimate.
        self.served_seconds: dict[str, deque[float]] = {}
        self._settle_waiters: dict[str, list[asyncio.Future[None]]] = {}
        self._prefetches: dict[str, Prefetch | PrefetchRecord] = {}  # a record: decided against
        self._due_at: dict[str, float] = {}  # target -> when its swap began to wait (drain)
        self._stop_why: dict[str, tuple[str, str]] = {}  # model -> its stop's reason, in words
        # What evicting a model throws away (start + prefill to redo; the runtime sets it).
        self.eviction_price: Callable[[str], EvictionPrice] | None = None
        self._evicted_work: dict[str, dict[str, dict[str, object]]] = {}  # target -> prices
        # Told of each grant to a request that queued: (its model, its client's name, seconds
        # waited); the runtime observes the queue-wait metric. Never for one granted at once.
        self.on_waited: Callable[[str, str, float], None] | None = None
        events.add_listener(self._on_event)

    # ---- for request handlers --------------------------------------------------------------

    def admit(self, model: str, client: Client = ANONYMOUS) -> PendingLease:
        """Ask for a lease without waiting: the future is already done when the scheduler
        grants (or refuses) at once — a ready, free model. Whoever stops waiting before it is
        done, or without using it, calls :meth:`withdraw`. ``client``: whose request it is
        (its class and weight order the queue; docs/sharing.md)."""
        loop = asyncio.get_running_loop()
        pending = PendingLease(model, loop.create_future(), self.now(), client)
        if self._before_cold_start is not None and self._cold(model):
            try:
                self._before_cold_start(model)
            except Exception:  # a report must never refuse a request
                log.exception("model %s: no dry run before its start", model)
        self.scheduler.on_request(pending)
        if not pending.future.done():
            pending.queued = True
            self._ensure_ticking()  # it waits: the scheduler needs the time
        return pending

    def _cold(self, model: str) -> bool:
        """Not running, no start under way for it, nobody waiting for it yet."""
        scheduler = self.scheduler
        return (
            not scheduler.runs(model)
            and scheduler.swapping != model
            and not scheduler.queued(model)
        )

    def withdraw(self, pending: PendingLease) -> None:
        """The waiter left: leave the queue (causing no start), or give back a lease that was
        granted just as it left."""
        fut = pending.future
        if fut.done() and not fut.cancelled() and fut.exception() is None:
            fut.result().release()
        else:
            fut.cancel()
            self.scheduler.on_cancel(pending)

    async def acquire(self, model: str, client: Client = ANONYMOUS) -> Lease:
        """Wait until ``model`` may serve this request. Raises StartError and friends."""
        pending = self.admit(model, client)
        try:
            return await pending.future
        except asyncio.CancelledError:
            self.withdraw(pending)
            raise

    async def unload(
        self, models: Iterable[str] | None = None, *, why: str = "unloaded"
    ) -> list[str]:
        """Stop these models (all when None) once their in-flight requests finish; ``why``
        is what their ``last_stop`` says."""
        wanted = set(self.processes) if models is None else set(models)
        for model in wanted & self.scheduler.running:
            self._stop_why[model] = (UNLOADED, why)
        loop = asyncio.get_running_loop()
        waiters: list[asyncio.Future[None]] = []
        for model in wanted:
            fut: asyncio.Future[None] = loop.create_future()
            self._stop_waiters.setdefault(model, []).append(fut)
            waiters.append(fut)
        accepted = self.scheduler.on_unload(wanted)
        cleared: list[str] = []
        for model in wanted - accepted:
            self._resolve_stop_waiters(model)
            process = self.processes.get(model)
            if process is not None and process.state is ProcessState.FAILED:
                failure = process.last_failure
                await process.stop()  # an explicit unload clears a failure (and its backoff)
                # Its stop reason says what was cleared (issue 41 #8).
                code = failure.code if failure is not None and failure.code else "error"
                process.record_stop(
                    StopRecord(UNLOADED, time.time(), f"{why} after a failed start ({code})")
                )
                cleared.append(model)
        await asyncio.gather(*waiters)
        return sorted([*accepted, *cleared])

    async def load(self, model: str) -> None:
        """Make ``model`` ready, as a request would (respecting groups and budgets), without
        keeping it busy. Raises StartError and friends."""
        lease = await self.acquire(model)
        lease.release()

    # ---- live reload -----------------------------------------------------------------------

    def reconfigure(
        self, swapper: Swapper, policy: SchedulerPolicy, added: Mapping[str, ManagedProcess]
    ) -> None:
        """New models join (stopped); new groups, budgets and limits apply from now on."""
        self.processes.update(added)
        self.scheduler.on_reconfigure(swapper, policy)

    async def retire(self, model: str, *, remove: bool) -> None:
        """Stop ``model`` once its in-flight requests have finished (a start under way is let
        finish first). Then either forget it (``remove``: it left the config) or, if it was
        running and can start again without evicting anything, start it with its new
        command. Requests that arrive meanwhile are served by the running backend."""
        was_running = model in self.scheduler.running
        for _ in range(RETIRE_ROUNDS):
            process = self.processes[model]
            if process.state is ProcessState.STARTING:
                await self._settled(model)
                continue
            if process.state is ProcessState.SLEEPING:
                await process.stop()  # asleep: nothing is served, nothing to drain
            await self.unload([model], why="its config changed (live reload)")
            if self.processes[model].state in _IDLE_STATES and not self.scheduler.queued(model):
                break
        if remove:
            if self.scheduler.in_flight(model) or self.scheduler.queued(model):
                log.warning("model %s left the config but still has requests", model)
                return
            self._cancel_idle_timer(model)
            del self.processes[model]
            self.last_used.pop(model, None)
            log.info("model %s removed", model)
            return
        if was_running and self.scheduler.evictions_for(model) == frozenset():
            log.info("model %s: starting again with its new command", model)
            try:
                await self.load(model)
            except StartError as exc:
                log.warning("model %s did not start again: %s", model, exc)

    async def _settled(self, model: str) -> None:
        """Until ``model``'s next state change out of STARTING."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._settle_waiters.setdefault(model, []).append(fut)
        await fut

    async def close(self) -> None:
        """Refuse new requests, abort swaps, stop every backend."""
        self.scheduler.on_shutdown()
        for target in list(self._prefetches):
            self._stop_prefetch(target, "the gateway is shutting down")
        for timer in self._idle_timers.values():
            timer.cancel()
        self._idle_timers.clear()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await asyncio.gather(
            *(p.shutdown() for p in self.processes.values()), return_exceptions=True
        )
        for model in list(self._stop_waiters):
            self._resolve_stop_waiters(model)

    def in_flight(self, model: str) -> int:
        return self.scheduler.in_flight(model)

    def queued(self, model: str) -> int:
        return self.scheduler.queued(model)

    # ---- Effects ---------------------------------------------------------------------------

    def start_swap(self, target: str, evict: Set[str], reason: str) -> None:
        prices = {m: self.eviction_price(m) for m in sorted(evict)} if self.eviction_price else {}
        self._evicted_work[target] = {m: price.as_dict() for m, price in prices.items()}
        lost = "; ".join(f"{m}: {p.summary()}" for m, p in prices.items() if p.prefill_seconds)
        log.info("swap: %s%s", reason, f"; work thrown away: {lost}" if lost else "")
        self._events.publish("swap", target=target, evict=sorted(evict), reason=reason)
        due_at = self._due_at.pop(target, None)
        task = self._spawn_task(self._swap(target, frozenset(evict), due_at), f"swap:{target}")
        self._swap_tasks[target] = task

    def cancel_swap(self, target: str) -> None:
        """Nobody waits for ``target`` any more and others wait: abort its start — before it
        begins (the swap may still be stopping what it evicts) or while it runs."""
        task = self._swap_tasks.get(target)
        if task is not None and not task.done():
            log.info("swap: cancelling the start of %s: every waiter left", target)
            self._aborted.add(target)
            self._stop_prefetch(target, "the swap was cancelled")
            self._spawn_task(self._abort_start(target), f"abort:{target}")

    def prepare_swap(self, target: str) -> None:
        """The swap to ``target`` waits for what it evicts to drain: read its weights now."""
        self._due_at[target] = time.monotonic()
        self._begin_prefetch(target)

    def abandon_swap(self, target: str) -> None:
        self._due_at.pop(target, None)
        if target in self._swap_tasks:
            return
        prefetch = self._prefetches.pop(target, None)
        if isinstance(prefetch, Prefetch):
            prefetch.cancel("the swap is no longer due")
            self._spawn_task(self._report_abandoned(target, prefetch), f"abandon:{target}")

    async def _report_abandoned(self, target: str, prefetch: Prefetch) -> None:
        record = await self._settle(prefetch)
        log.info("swap to %s: no longer due; prefetch %s", target, record.summary())

    async def _abort_start(self, target: str) -> None:
        await self.processes[target].stop()  # ensure_ready in the swap task then fails

    def now(self) -> float:
        return asyncio.get_running_loop().time()

    def grant(self, admission: Admission) -> bool:
        assert isinstance(admission, PendingLease)
        if admission.future.done():
            return False
        self._cancel_idle_timer(admission.model)
        admission.future.set_result(Lease(self.processes[admission.model], self))
        self.last_used[admission.model] = time.time()
        if admission.queued and self.on_waited is not None:
            try:
                self.on_waited(
                    admission.model, admission.client.name, self.now() - admission.arrived
                )
            except Exception:  # a metric must never refuse a grant
                log.exception("model %s: queue wait not observed", admission.model)
        return True

    def grant_error(self, admission: Admission, error: Exception) -> None:
        assert isinstance(admission, PendingLease)
        if not admission.future.done():
            admission.future.set_exception(error)

    def stop(self, models: Set[str]) -> None:
        self._spawn_task(self._stop(frozenset(models)), f"stop:{','.join(sorted(models))}")

    # ---- the work behind the effects -------------------------------------------------------

    async def _swap(self, target: str, evict: frozenset[str], due_at: float | None) -> None:
        error: Exception | None = None
        began = time.monotonic()
        # One time for the swap on every card (issue 41 #10): the evicted model's "evicted to
        # start B at T" and B's "last swap at T" are both when it began.
        began_at = time.time()
        drained = began - due_at if due_at is not None else None
        stopped = began
        overlapped: float | None = None  # the stop's own seconds, when the start overlapped it
        try:
            if evict and self._overlap(target, evict):
                stop_took: list[float] = []  # filled once the stop is done, a failed start too
                try:
                    await self._stop_beside_start(target, evict, began, began_at, stop_took)
                finally:
                    overlapped = stop_took[0] if stop_took else None
            else:
                if evict:
                    self._begin_prefetch(target)
                    await self._stop_processes(evict, sleep=True)
                    self._evicted(target, evict, began_at)
                stopped = time.monotonic()
                await self._start(target)
        except StartError as exc:
            error = exc
            self._explained(target, exc)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug must not leave waiters hanging
            log.exception("swap to %s failed", target)
            error = exc
        self._swap_tasks.pop(target, None)
        self._aborted.discard(target)
        self._eviction_outcome(evict, target, error)
        self.scheduler.on_swap_done(target, error)
        ended = time.monotonic()
        if error is None:
            self._maybe_arm_idle_timer(target)
        try:  # the last-swap record is a report: it must never keep waiters from their answer
            prefetched = await self._settled_prefetch(target)
            clock = (began, stopped, ended)
            self._publish_last_swap(
                target, evict, drained, clock, error, prefetched, began_at, overlapped
            )
        except Exception:
            log.exception("swap to %s: no last-swap record", target)

    def _evicted(self, target: str, evict: frozenset[str], began_at: float) -> None:
        for model in evict:
            self._stop_why.pop(model, None)  # an unload asked for: the eviction did it
            self.processes[model].record_stop(evicted(target, began_at))

    async def _start(self, target: str) -> None:
        # From here the backend reads its own weights; the prefetch has done its part.
        self._stop_prefetch(target, "the start began")
        if target in self._aborted:
            raise StartError(target, ABORTED)
        await self.processes[target].ensure_ready()

    async def _stop_beside_start(
        self,
        target: str,
        evict: frozenset[str],
        began: float,
        began_at: float,
        took: list[float],
    ) -> None:
        """The budgets show ``target`` fits beside what it evicts (routing/overlap.py): its
        start begins while they save their prompt caches and stop; the swap is done when both
        are. The stop's own seconds go into ``took``. A failed start raises once the stop is
        done."""
        stopping = asyncio.ensure_future(self._stop_processes(evict, sleep=True))
        stopped_at = began

        def done(_: object) -> None:
            nonlocal stopped_at
            stopped_at = time.monotonic()

        stopping.add_done_callback(done)
        try:
            await self._start(target)
        finally:
            await stopping
            self._evicted(target, evict, began_at)
            took.append(stopped_at - began)

    def _explained(self, target: str, error: StartError) -> None:
        if self._explain_failure is None:
            return
        try:
            self._explain_failure(target, error)
        except Exception:  # an explanation must never keep waiters from their answer
            log.exception("swap to %s: could not explain the failure", target)

    def _eviction_outcome(
        self, evict: frozenset[str], target: str, error: Exception | None
    ) -> None:
        """Each model evicted for ``target`` says how that start went (issue 32 #2): its
        ``last_stop`` and the last line of its log, before anyone hears the swap is done."""
        code = None
        if error is not None:
            code = error.diagnosis.code if isinstance(error, StartError) else "error"
        for model in evict:
            process = self.processes[model]
            record = process.last_stop
            if record is None or record.target != target or record.outcome is not None:
                continue  # started again meanwhile, or another swap's record
            outcome = "started" if error is None else "failed"
            process.record_stop(replace(record, outcome=outcome, code=code))

    # ---- prefetch: the next model's weights, read while the evicted ones stop --------------

    def _begin_prefetch(self, target: str) -> None:
        """Read ``target``'s weight files into the page cache beside the wait for what it
        evicts to drain and stop (once per swap; a model with ``prefetch: false`` or no local
        weights is recorded as skipped, with why)."""
        if target in self._prefetches:
            return
        process = self.processes[target]
        config = process.config
        if not config.prefetch:
            self._prefetches[target] = Prefetch.skipped("prefetch: false")
            return
        if process.state is ProcessState.SLEEPING:
            self._prefetches[target] = Prefetch.skipped("asleep: its weights are in its memory")
            return
        files = weight_files(config.cmd)
        if not files:
            self._prefetches[target] = Prefetch.skipped("the command names no local weight files")
            return
        prefetch = Prefetch(files)
        prefetch.start()
        self._prefetches[target] = prefetch
        log.info("swap to %s: prefetching %d weight file(s)", target, len(files))

    def _stop_prefetch(self, target: str, why: str) -> None:
        prefetch = self._prefetches.get(target)
        if isinstance(prefetch, Prefetch):
            prefetch.cancel(why)

    async def _settled_prefetch(self, target: str) -> PrefetchRecord | None:
        """This swap's prefetch record, once its thread has let go (bounded: a stuck read
        leaves the record as it stands)."""
        prefetch = self._prefetches.pop(target, None)
        if not isinstance(prefetch, Prefetch):
            return prefetch
        prefetch.cancel("the swap ended")
        return await self._settle(prefetch)

    @staticmethod
    async def _settle(prefetch: Prefetch) -> PrefetchRecord:
        try:
            return await asyncio.wait_for(prefetch.wait(), PREFETCH_SETTLE_SECONDS)
        except TimeoutError:
            return prefetch.snapshot()

    def _publish_last_swap(
        self,
        target: str,
        evict: frozenset[str],
        drained: float | None,
        clock: tuple[float, float, float],
        error: Exception | None,
        prefetched: PrefetchRecord | None,
        began_at: float | None = None,
        overlapped: float | None = None,
    ) -> None:
        """Where a swap's time went, as the ``swap.done`` event and one log line: stopping
        what it evicted (until each whole process tree was gone), then the target's own
        start — spawn to listening, listening to healthy (0 when it was running already) —
        and what was prefetched meanwhile. ``drained``: how long the swap waited, before it
        began, for what it evicts to finish serving (None: it did not wait). ``clock``: began,
        stopped, ended (monotonic); ``began_at``: when it began (epoch seconds), the time its
        evictions' stop records carry. ``overlapped``: the stop's own seconds when the start
        began beside it (``stop_overlapped``: the start's phases then count from the swap's
        beginning)."""
        process = self.processes[target]
        began, stopped, now = clock
        record: dict[str, object] = {
            "target": target,
            "evict": sorted(evict),
            **({"drain_seconds": round(drained, 4)} if drained is not None else {}),
            "stop_seconds": round(stopped - began, 4),
            "start_seconds": round(now - stopped, 4),
            "total_seconds": round(now - began, 4),
        }
        if began_at is not None:
            record["began_at"] = round(began_at, 3)
        spawned, listening = process.start_clock()
        if spawned is not None and listening is not None and spawned >= stopped:  # this swap
            record["spawn_to_listening_seconds"] = round(listening - spawned, 4)
            record["listening_to_ready_seconds"] = round(now - listening, 4)
        if overlapped is not None:
            record["stop_seconds"] = round(overlapped, 4)
            record["stop_overlapped"] = True
        if error is not None:
            record["error"] = str(error)
        if prefetched is not None:
            record["prefetch"] = prefetched.as_dict()
        evicted_work = self._evicted_work.pop(target, None)
        if evicted_work:
            record["evicted_work"] = evicted_work
        saved, restored = self._prompt_caches(target, evict, began, stopped)
        if saved or restored is not None:
            record["prompt_cache"] = {
                **({"saved": [r.as_dict() for r in saved]} if saved else {}),
                **({"restored": restored.as_dict()} if restored is not None else {}),
            }
        self._events.publish("swap.done", **record)
        parts = ", ".join(
            f"{key.removesuffix('_seconds').replace('_', ' ')} {value:.3f} s"
            for key, value in record.items()
            if key.endswith("_seconds") and key != "total_seconds" and isinstance(value, float)
        )
        outcome = "failed" if error is not None else "done"
        tail = f"; prefetch {prefetched.summary()}" if prefetched is not None else ""
        for model, price in (evicted_work or {}).items():
            if price.get("prefill_seconds"):
                tail += f"; evicting {model} lost {price['prefill_seconds']} s of prefill"
        for report in (*saved, *([restored] if restored is not None else [])):
            tail += f"; prompt cache of {report.model}: {report.summary()}"
        log.info("swap to %s %s in %.3f s (%s)%s", target, outcome, now - began, parts, tail)

    def _prompt_caches(
        self, target: str, evict: frozenset[str], began: float, stopped: float
    ) -> tuple[list[CacheReport], CacheReport | None]:
        """What this swap saved of the prompt caches it evicted, and restored of the target's
        (issue 30): the reports their processes kept, if made during this swap."""
        saved = [
            report
            for model in sorted(evict)
            if (report := self.processes[model].cache_saved) is not None and report.began >= began
        ]
        restored = self.processes[target].cache_restored
        if restored is not None and restored.began < stopped:
            restored = None  # the last start's, not this swap's
        return saved, restored

    async def _stop(self, models: frozenset[str]) -> None:
        try:
            await self._stop_processes(models)
            for model in models:
                reason, why = self._stop_why.pop(model, (UNLOADED, "unloaded"))
                self.processes[model].record_stop(StopRecord(reason, time.time(), why))
        finally:
            for model in models:
                self._stop_why.pop(model, None)
            self.scheduler.on_stop_done(models)

    async def _stop_processes(self, models: frozenset[str], *, sleep: bool = False) -> None:
        """Stop ``models``; when evicting (``sleep``), sleep-mode models sleep instead."""
        for model in models:
            self._cancel_idle_timer(model)
        await asyncio.gather(
            *(
                self.processes[m].sleep()
                if sleep and self.processes[m].config.sleep_mode
                else self.processes[m].stop()
                for m in models
            )
        )
        for model in models:
            self._resolve_stop_waiters(model)

    def _spawn_task(self, coro: Coroutine[object, object, None], name: str) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def _ensure_ticking(self) -> None:
        """While anything waits, give the scheduler the time (starvation, drain timeouts)."""
        if self._ticker is None or self._ticker.done():
            self._ticker = self._spawn_task(self._tick(), "scheduler-tick")

    async def _tick(self) -> None:
        while self.scheduler.queue_length or self.scheduler.swapping:
            await asyncio.sleep(self._tick_seconds)
            self.scheduler.on_tick()

    # ---- leases and idle timers ------------------------------------------------------------

    def _release(self, model: str, held: float) -> None:
        self.last_used[model] = time.time()
        served = self.served_seconds.setdefault(model, deque(maxlen=SERVED_HISTORY))
        served.append(held)
        self.scheduler.on_serve_done(model)
        self._maybe_arm_idle_timer(model)

    def _maybe_arm_idle_timer(self, model: str) -> None:
        process = self.processes.get(model)
        if process is None:
            return  # removed from the config meanwhile
        ttl = process.config.ttl
        if ttl <= 0 or self.scheduler.in_flight(model) or model not in self.scheduler.running:
            return
        self._cancel_idle_timer(model)
        loop = asyncio.get_running_loop()
        self._idle_timers[model] = loop.call_later(ttl, self._idle_expired, model)

    def _idle_expired(self, model: str) -> None:
        self._idle_timers.pop(model, None)
        if self.scheduler.in_flight(model) == 0:
            log.info("model %s: idle for its ttl, unloading", model)
            ttl = self.processes[model].config.ttl
            self._stop_why[model] = (IDLE, f"idle for its ttl ({ttl:g} s)")
            self.scheduler.on_unload({model})

    def _cancel_idle_timer(self, model: str) -> None:
        timer = self._idle_timers.pop(model, None)
        if timer is not None:
            timer.cancel()

    def idle_deadline(self, model: str) -> float | None:
        """Loop time at which the idle TTL unloads ``model``, if a timer is armed."""
        timer = self._idle_timers.get(model)
        return timer.when() if timer is not None else None

    def _resolve_stop_waiters(self, model: str) -> None:
        for fut in self._stop_waiters.pop(model, []):
            if not fut.done():
                fut.set_result(None)

    def _on_event(self, event: Event) -> None:
        if event.kind != "process.state":
            return
        model = str(event.data["model"])
        if event.data["new"] is not ProcessState.STARTING:
            for fut in self._settle_waiters.pop(model, []):
                if not fut.done():
                    fut.set_result(None)
        if event.data["old"] is ProcessState.READY and event.data["new"] is ProcessState.FAILED:
            self._cancel_idle_timer(model)
            self.scheduler.on_process_exited(model)
