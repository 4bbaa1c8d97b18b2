"""The composition root: builds every collaborator from a Config; ``start()`` / ``close()``.

Only this module constructs concrete classes (client sessions, the reaper, processes, router);
everything else receives them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import statistics
import sys
import time
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
from prometheus_client.registry import Collector

from modelswap.backends.causes import OUT_OF_MEMORY_CODES
from modelswap.backends.configured import ConfiguredLimits, parse_configured
from modelswap.backends.diagnose import GenericDiagnoser
from modelswap.backends.hints import auto_tool_choice_unsupported
from modelswap.backends.logreader import BackendLogReader
from modelswap.backends.probe import MetadataProbe
from modelswap.backends.registry import cache_hazards, capability_report, why_no_slots
from modelswap.backends.slots import SlotClient, save_path
from modelswap.config import Config, ModelConfig
from modelswap.config.resolved import ApiKey, Filters, Selector, Timeouts
from modelswap.errors import (
    AmbiguousModelError,
    Diagnosis,
    ModelNotFoundError,
    ModelswapError,
    StartError,
)
from modelswap.events import Event, EventBus
from modelswap.model_stats import DEFAULT_START_SECONDS, MemorySampler, StatsStore
from modelswap.observe.activity import ActivityError, ActivityLog
from modelswap.observe.capabilities import (
    CapabilityMemory,
    Observed,
    command_key,
    observed_from,
)
from modelswap.observe.hardware import hardware_snapshot
from modelswap.observe.last_swap import LastSwaps
from modelswap.observe.metrics import KeyQuotaView, Metrics, ModelView, StateCounts
from modelswap.observe.observer import Observer
from modelswap.observe.performance import PerformanceMonitor
from modelswap.observe.records import RequestRecord
from modelswap.planner.accuracy import PlanCache, running_fields
from modelswap.planner.hf import ModelReadError
from modelswap.planner.memory import Plan
from modelswap.planner.weights import prefetch_summary
from modelswap.policy import PolicySet, Program
from modelswap.redact import Redactor
from modelswap.reported import CapacityReceipt, ModelMetadata, Progress
from modelswap.routing.clients import ANONYMOUS, Client
from modelswap.routing.gate import ClientGate
from modelswap.routing.local import Lease, LocalRouter, PendingLease
from modelswap.routing.overlap import start_may_overlap
from modelswap.routing.passage import Acquire
from modelswap.routing.peer_directory import PeerDirectory, PeerRoute
from modelswap.routing.prediction import (
    LoadPrediction,
    ModelFacts,
    PlannerFigure,
    compare,
    planner_figure,
    predict,
)
from modelswap.routing.prefill import EvictionPrice
from modelswap.routing.protocols import Swapper
from modelswap.routing.queue_place import Place, WaitFacts, place_of, waiters
from modelswap.routing.resolve import close_names
from modelswap.routing.scheduler import SchedulerPolicy
from modelswap.routing.selector_choice import TargetState, choose
from modelswap.routing.swapper_from_config import build_swapper, policy_name
from modelswap.statefile import make_private_dir, named_briefly, tighten
from modelswap.states import ProcessState
from modelswap.supervisor.containment import Containment, detect, subreaper_only
from modelswap.supervisor.leftovers import BackendRecord
from modelswap.supervisor.logs import LogBuffer
from modelswap.supervisor.process import LISTEN_HISTORY, ManagedProcess
from modelswap.supervisor.promptcache import PromptCache
from modelswap.supervisor.reaper import Reaper
from modelswap.supervisor.slotstore import SlotStore
from modelswap.supervisor.spare import Launcher
from modelswap.supervisor.stops import StopRecord
from modelswap.upstream_sessions import SKIP_AUTO_HEADERS, PooledSessions, RelayRequest

log = logging.getLogger(__name__)
HELD_EVERY = 5.0  # seconds between two reads of one model's slots (what an eviction loses)
HELD_READ_SECONDS = 1.0


@dataclass(frozen=True, slots=True)
class LocalTarget:
    """A request name resolved to a local model; ``name`` is the name used (an id or alias),
    which picks the alias's filters."""

    model: ModelConfig
    name: str

    @property
    def label(self) -> str:
        return self.model.id

    def body_edits(self) -> tuple[tuple[Filters, ...], str]:
        """The filter layers a body takes on its way here, and the model name the backend
        knows (``useModelName``, else the name as sent, as llama-swap does)."""
        return self.model.filters_for(self.name), self.model.upstream_name_for(self.name)

    def tool_choice_refusal(self) -> str | None:
        """A hint when the backend is known to refuse automatic tool choice (a vLLM started
        without a tool-call parser)."""
        return auto_tool_choice_unsupported(self.model.cmd, self.model.backend)

    @property
    def fallback(self) -> tuple[str, ...]:
        """The names tried next when this one fails before answering."""
        return self.model.fallback

    def programs(self, policies: PolicySet) -> list[Program]:
        """The Swap Policy Language's programs for a request here: the hook, the model's own."""
        return policies.programs_for(model=self.model.id)

    async def reach(self, acquire: Acquire, peers: PeerDirectory) -> LocalPassage:
        """Lease the model (waiting for its start): the request goes to its backend."""
        return LocalPassage(await acquire(self.model.id), self.model.timeouts)


@dataclass(slots=True)
class LocalPassage:
    """A local backend, reached under a lease."""

    lease: Lease
    timeouts: Timeouts

    @property
    def url(self) -> str:
        return self.lease.config.proxy

    @property
    def api_key(self) -> str | None:
        return self.lease.config.upstream_api_key

    @property
    def counts_hops(self) -> bool:
        return False

    def release(self) -> None:
        self.lease.release()

    def settle(self, status: int | None, failed: bool) -> None:
        """Nothing: the scheduler learns of a backend's failures from its process."""

    async def died(self) -> bool:
        return await self.lease.confirm_exit()


Target = LocalTarget | PeerRoute


class ModelStatus:
    """One local model as the HTTP layer reads it: its process's state, start progress, the
    backend's report and the allocator's receipt, the last failure and stop, its load in the
    scheduler, and what the runtime keeps about it (the last swap, the plan, remembered
    capabilities, the configured limits). Read-only: commands go through the Runtime
    (:meth:`Runtime.load`, :meth:`Runtime.unload`, :meth:`Runtime.acquire`)."""

    __slots__ = ("_process", "_runtime")

    def __init__(self, process: ManagedProcess, runtime: Runtime) -> None:
        self._process = process
        self._runtime = runtime

    @property
    def model(self) -> str:
        return self._process.model

    @property
    def config(self) -> ModelConfig:
        """The configuration the process runs (a reload may have changed the config's)."""
        return self._process.config

    @property
    def state(self) -> ProcessState:
        return self._process.state

    @property
    def ready(self) -> bool:
        return self._process.state is ProcessState.READY

    @property
    def since(self) -> float:
        return self._process.since

    @property
    def started_at(self) -> float | None:
        return self._process.started_at

    @property
    def ready_at(self) -> float | None:
        return self._process.ready_at

    @property
    def progress(self) -> Progress | None:
        return self._process.progress

    def phase(self) -> str:
        """What a waiting client is told: the start's phase, or that it waits its turn."""
        if self._process.state is ProcessState.STARTING:
            return self.start_phase()
        return "waiting for its turn"

    def start_phase(self) -> str:
        progress = self._process.progress
        return progress.label() if progress else "starting"

    @property
    def last_progress_at(self) -> float | None:
        return self._process.last_progress_at

    @property
    def last_progress_line(self) -> str | None:
        return self._process.last_progress_line

    @property
    def reported(self) -> ModelMetadata | None:
        """What the backend reported about itself (context, …) once ready."""
        return self._process.metadata

    @property
    def receipt(self) -> CapacityReceipt | None:
        """The allocator's receipt read from the backend's log (weights, KV cache, …)."""
        return self._process.capacity

    @property
    def last_failure(self) -> Diagnosis | None:
        return self._process.last_failure

    @property
    def last_stop(self) -> StopRecord | None:
        return self._process.last_stop

    @property
    def logs(self) -> LogBuffer:
        return self._process.logs

    def in_flight(self) -> int:
        return self._runtime.router.in_flight(self.model)

    def queued(self) -> int:
        return self._runtime.router.queued(self.model)

    def idle_deadline(self) -> float | None:
        """When the ttl unloads it (the event loop's clock), or None."""
        return self._runtime.router.idle_deadline(self.model)

    def configured(self) -> ConfiguredLimits:
        """What its command line asks for (context, parallel slots, …)."""
        return self._runtime.configured[self.model]

    def last_swap(self) -> dict[str, Any] | None:
        """The receipt of the last swap to it (it outlives an unload), with ``prediction``: how
        the dry run taken before it compared."""
        record = self._runtime.swaps.last(self.model)
        if record is None or "predicted" not in record:
            return record
        comparison = self._runtime.swap_comparison(self.model, record)
        del record["predicted"]
        if comparison is not None:
            record["prediction"] = comparison
        return record

    def prompt_cache(self) -> dict[str, object] | None:
        """What its restores proved of its prompt cache (issue 38); None: the cache is off."""
        return self._process.prompt_cache_verdict()

    def plan(self) -> Plan | None:
        """The fit planner's plan for its current start."""
        return self._runtime.plans.get(self.model)


def _private_state_dir(state_dir: Path) -> None:
    """``stateDir`` made 0700 if missing, and what an older modelswap or a backend left in it
    readable by others tightened (0700 folders, 0600 files), said in one line (issue 38)."""
    try:
        make_private_dir(state_dir)
    except OSError as exc:
        log.warning("cannot make stateDir %s: %s", state_dir, exc)
        return
    tightened = tighten(state_dir)
    if tightened:
        log.warning(
            "stateDir %s: others could read or enter %d of its paths; made private to this "
            "user (folders 0700, files 0600): %s",
            state_dir,
            len(tightened),
            named_briefly(tightened),
        )


class Runtime:
    """Everything one running gateway owns. Use ``await start()`` then ``await close()``."""

    def __init__(
        self,
        config: Config,
        *,
        stop_grace: float = 5.0,
        use_reaper: bool = True,
        allow_unauthenticated_network: bool = False,
    ) -> None:
        self.config = config
        self.allow_unauthenticated_network = allow_unauthenticated_network
        # Per-key quotas at the door (docs/sharing.md); the config is read at each request.
        self.gate = ClientGate(lambda: self.config.key_defaults)
        self.events = EventBus()
        self.started_at = time.time()
        self.redactor = Redactor(config.secrets)
        sched = config.scheduling
        state_dir = Path(sched.state_dir).expanduser() if sched.state_dir != ":memory:" else None
        if state_dir is not None:
            _private_state_dir(state_dir)
        # What each model could do when it was last ready (issue 30), for /v1/models.
        self.capability_memory = CapabilityMemory(
            state_dir / "capabilities.json" if state_dir else None
        )
        self.events.add_listener(self._remember_capabilities)
        # llama.cpp slots saved before a stop, restored after the next start (issue 30).
        self.slot_store = SlotStore(state_dir / "prompt-cache" if state_dir else None)
        self._prompt_cache: PromptCache | None = None  # made by start(): it needs a session
        self.configured: dict[str, ConfiguredLimits] = {}
        self.refresh_configured()
        self.events.add_listener(self._warn_on_context_mismatch)
        # The fit planner: one plan per model start, compared with the allocator's receipt.
        self.plans = PlanCache(
            lambda model_id: getattr(self.config.models.get(model_id), "cmd", None)
        )
        self.events.add_listener(self.plans.on_event)
        self._stop_grace = stop_grace
        self.active_profile = config.scheduling.profile  # its models are pinned
        self._reaper = Reaper() if use_reaper else None
        self._health_session: aiohttp.ClientSession | None = None
        self._proxy_session: aiohttp.ClientSession | None = None
        self._pooled = PooledSessions()  # timeouts.keepalive / idleConn (llama-swap's)
        self._router: LocalRouter | None = None
        # own_port: a pool member at one of this machine's addresses and this port is us.
        self.peers = PeerDirectory(
            config.peers, lambda: self.health_session, own_port=config.listen_port
        )
        self.stats = StatsStore(state_dir / "stats.json" if state_dir else None)
        self.backend_record = BackendRecord(state_dir / "backends" if state_dir else None)
        self.containment: Containment = subreaper_only()  # refined by start()
        # Starts backends' keepers; its spare is made once serve() listens (launcher.begin()).
        self.launcher = Launcher(self.containment, spare=config.spare_keeper)
        self.events.add_listener(self._record_start)
        self._held_read_at: dict[str, float] = {}  # model -> when its slots were last read
        self.events.add_listener(self._measure_prefill)
        self._background: list[asyncio.Task[None]] = []
        self.activity = self._activity_log(state_dir)
        # The gateway's own log lines (the CLI attaches a handler that fills it).
        self.gateway_log = LogBuffer(1000)
        self.observer = Observer(
            Metrics(self.model_views, self.state_counts, self.key_quota_views),
            self.activity,
            self.events,
            count_requests=config.observability.metrics_enabled,
        )
        # CPU, memory, network and GPUs for /api/performance: sampled only while serving.
        self.performance = PerformanceMonitor(
            lambda: self.config.observability.performance_every,
            enabled=lambda: self.config.observability.performance,
        )
        self._hardware: dict[str, object] | None = None
        self.swaps = LastSwaps()  # each model's last-swap record, for /running and the UI
        self.events.add_listener(self.swaps.on_event)
        self._dry_plans: dict[tuple[str, ...], Plan | None] = {}  # dry runs' plans, per cmd
        # The dry run taken as each cold model was first asked for (with its runs sampled so
        # far), set beside its swap's record when it is done.
        self._before_swap: dict[str, tuple[dict[str, Any], dict[str, int]]] = {}
        self.events.add_listener(self._compare_swap)

    def _activity_log(self, state_dir: Path | None) -> ActivityLog | None:
        obs = self.config.observability
        if not obs.activity_enabled:
            return None
        path = obs.activity_path
        if path is None:
            path = str(state_dir / "activity.sqlite3") if state_dir else ":memory:"
        try:
            return ActivityLog(
                Path(path).expanduser() if path != ":memory:" else path,
                max_age_days=obs.max_age_days,
                max_rows=obs.max_rows,
            )
        except ActivityError as exc:  # e.g. an unwritable state directory: serve without it
            log.warning("activity log off: %s", exc)
            return None

    def refresh_configured(self) -> None:
        """Parse each model's command line (again, after a reload); a removed model's entry
        stays while its process drains."""
        for model_id, model in self.config.models.items():
            self.configured[model_id] = parse_configured(model.cmd)
        self.capability_memory.forget_changed(self.config.models)
        self.slot_store.forget_changed(
            {m.id: command_key(m) for m in self.config.models.values() if m.prompt_cache}
        )

    def spawn(self, coro: Coroutine[object, object, None], name: str) -> None:
        """Run ``coro`` in the background until it ends or the runtime closes."""
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._background.append(task)
        task.add_done_callback(self._forget)

    def _forget(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            log.error("background task %s failed", task.get_name(), exc_info=task.exception())
        with contextlib.suppress(ValueError):
            self._background.remove(task)

    def state_counts(self) -> StateCounts:
        """What /metrics says of stateDir's files (issue 38): never off, but counted."""
        files = [
            store.file
            for store in (self.stats, self.capability_memory, self.slot_store)
            if store.file is not None
        ]
        failures = {f.what: f.write_failures for f in files}
        aside = {f.what: f.moved_aside for f in files}
        dropped: dict[str, int] = {}
        if self.activity is not None:
            dropped = self.activity.dropped_by()
            aside["activity"] = len(self.activity.moved_aside)
        return StateCounts(dropped, failures, aside)

    def model_views(self) -> dict[str, ModelView]:
        """What /metrics reads about each model at scrape time."""
        if self._router is None:
            return {}
        views: dict[str, ModelView] = {}
        for model_id, process in self._router.processes.items():
            ready = process.state is ProcessState.READY
            meta = process.metadata if ready else None
            cap = process.capacity if ready else None
            views[model_id] = ModelView(
                state=process.state,
                in_flight=self._router.in_flight(model_id),
                queued=self._router.queued(model_id),
                context_length=meta.context_length if meta else None,
                kv_cache_tokens=cap.kv_cache_tokens if cap else None,
                max_concurrency=cap.max_concurrency if cap else None,
            )
        return views

    def uses(self, model_id: str) -> Mapping[str, int]:
        """Memory per resource: what the model declares, else what was measured."""
        model = self.config.models.get(model_id)  # None: removed, still draining
        declared = model.uses if model is not None else {}
        measured = self.stats.peaks(model_id)
        return {r: declared.get(r, measured.get(r, 0)) for r in self.config.scheduling.resources}

    def evict_cost(self, model_id: str) -> float:
        return self.eviction_price(model_id).total

    def eviction_price(self, model_id: str) -> EvictionPrice:
        """What evicting ``model_id`` throws away: its start again (median × evictCost) and
        the prefill of what its slots hold, unless its prompt cache keeps them
        (routing/prefill.py)."""
        model = self.config.models.get(model_id)
        start = self.stats.median_start(model_id) * (model.evict_cost if model else 1.0)
        return EvictionPrice(
            start,
            self.stats.held(model_id),
            self.stats.prompt_rate(model_id),
            cache_keeps=bool(model and model.prompt_cache),
        )

    def _measure_prefill(self, event: Event) -> None:
        """A finished request: its prefill rate, then (with budgets, where the price chooses
        what is evicted; at most every HELD_EVERY s a model) what the model's llama.cpp slots
        hold now, read in the background."""
        if event.kind == "process.state" and event.data.get("new") is not ProcessState.READY:
            self.stats.record_held(str(event.data["model"]), None)  # its slots are gone
            return
        model, data = event.data.get("model"), event.data
        if event.kind != "request.finished" or not isinstance(model, str):
            return
        prompt, ttft = data.get("prompt_tokens"), data.get("ttft")
        # streamed only: a whole answer's first byte would count its generation as prefill
        if data.get("streamed") is True and isinstance(prompt, int) and isinstance(ttft, float):
            cached = data.get("cached_tokens")
            self.stats.record_prompt(
                model, prompt - (cached if isinstance(cached, int) else 0), ttft
            )
        process = self._router.processes.get(model) if self._router is not None else None
        now = time.monotonic()
        if (
            not self.config.scheduling.resources  # only budgets choose what to evict by cost
            or process is None
            or self._prompt_cache is None
            or not self._prompt_cache.keeps(process.config, process.metadata)
            or now - self._held_read_at.get(model, -HELD_EVERY) < HELD_EVERY
        ):
            return
        self._held_read_at[model] = now
        self.spawn(self._read_held(model, process.config), f"slots:{model}")

    async def _read_held(self, model: str, config: ModelConfig) -> None:
        assert self._health_session is not None
        found = await SlotClient(self._health_session).slots(
            config.proxy, config.upstream_api_key, HELD_READ_SECONDS
        )
        held = None if isinstance(found, str) else sum(slot.tokens or 0 for slot in found)
        self.stats.record_held(model, held)

    def swapper(self) -> Swapper:
        return build_swapper(
            self.config,
            self.uses,
            self.evict_cost,
            self._sleeping,
            self.pinned,
            explain=lambda m: self.eviction_price(m).summary(),
        )

    # ---- the load dry run (issue 39; routing/prediction.py) ---------------------------------

    async def dry_run(self, model_id: str) -> LoadPrediction:
        """What loading ``model_id`` (an id or alias) would do now; starts and stops nothing.
        Plans its files first (in a worker thread, once per command line). Raises
        ModelNotFoundError."""
        model = self.resolve(model_id)
        key = tuple(model.cmd)
        if key not in self._dry_plans and self.plans.get(model.id) is None:
            self._dry_plans[key] = await asyncio.to_thread(self._plan_now, list(model.cmd))
        return self.predict_load(model.id)

    def predict_load(self, model_id: str) -> LoadPrediction:
        """:meth:`dry_run` without the planning: synchronous, reads no model file (a plan made
        before is used). Raises ModelNotFoundError."""
        model = self.resolve(model_id)
        return predict(
            model.id,
            self.router.scheduler.snapshot(),
            self.model_facts,
            self.config.scheduling.resources,
            policy=policy_name(self.config),
        )

    def model_facts(self, model_id: str) -> ModelFacts:
        """What is known about ``model_id`` for a dry run: declared and measured memory, start
        times, how long its requests hold a lease, the planner's estimate, the prefetch and
        the prompt cache a start would use."""
        model = self.config.models.get(model_id)
        process = self.router.processes.get(model_id)
        last = self.swaps.last(model_id)
        return ModelFacts(
            declared=model.uses if model is not None else {},
            peaks=self.stats.peaks(model_id),
            run_peaks=self.stats.run_peaks(model_id),
            starts=self.stats.start_samples(model_id),
            default_start=DEFAULT_START_SECONDS,
            served=tuple(self.router.served_seconds.get(model_id, ())),
            state=process.state.value if process is not None else "stopped",
            planner=self._planner_figure(model_id, process),
            prefetch=prefetch_summary(model.cmd, model.prefetch) if model is not None else None,
            prompt_cache=self._prompt_cache_facts(model) if model is not None else None,
            stop_seconds=last.get("stop_seconds") if last and last.get("evict") else None,
        )

    def _predict_before_start(self, model_id: str) -> None:
        if model_id in self.config.models:
            predicted = self.predict_load(model_id).to_json()
            self._before_swap[model_id] = (predicted, self.stats.runs_sampled(model_id))

    def _compare_swap(self, event: Event) -> None:
        """A swap is done: its record keeps the dry run taken before it (compared when read)."""
        if event.kind != "swap.done":
            return
        target = str(event.data.get("target"))
        before = self._before_swap.pop(target, None)
        if before is not None:
            predicted, runs = before
            self.swaps.annotate(target, "predicted", {"dry_run": predicted, "runs_before": runs})

    def swap_comparison(self, model_id: str, record: Mapping[str, Any]) -> dict[str, Any] | None:
        """How the dry run before ``record``'s swap compared with it: evicted set, time, and
        memory once the run it started has been sampled."""
        predicted = record.get("predicted")
        if not isinstance(predicted, dict):
            return None
        runs_before = predicted.get("runs_before", {})
        peaks = self.stats.run_peaks(model_id)
        measured = {
            resource: peaks[resource][-1]
            for resource, count in self.stats.runs_sampled(model_id).items()
            if count > runs_before.get(resource, 0) and peaks.get(resource)
        }
        return compare(predicted["dry_run"], record, measured)

    def _explain_failure(self, model_id: str, error: StartError) -> None:
        """A start that ran out of memory answers with the dry run (what it needs, whether it
        can fit here at all, the planner's fixes)."""
        if error.diagnosis.code in OUT_OF_MEMORY_CODES and model_id in self.config.models:
            data = self.redactor.data(self.predict_load(model_id).to_json())
            error.prediction = data if isinstance(data, dict) else None

    def _planner_figure(
        self, model_id: str, process: ManagedProcess | None
    ) -> PlannerFigure | None:
        model = self.config.models.get(model_id)
        started = self.plans.get(model_id)  # made at its last start
        plan = started or (self._dry_plans.get(tuple(model.cmd)) if model is not None else None)
        if plan is None:
            return None
        receipt = process.capacity if process is not None else None
        error = running_fields(started, receipt).get("plan_error_pct")
        return planner_figure(plan, error if isinstance(error, int | float) else None)

    def _plan_now(self, argv: list[str]) -> Plan | None:
        """The planner on ``argv`` (None: it names no local model, or cannot be read)."""
        try:
            return self.plans.plan(argv)
        except (ModelReadError, ValueError, OSError, KeyError, TypeError) as exc:
            log.debug("dry run: no plan (%s)", exc)
            return None

    def _prompt_cache_facts(self, model: ModelConfig) -> dict[str, Any] | None:
        if not model.prompt_cache or self.slot_store.root is None:
            return None
        saved = self.slot_store.entries(model.id)
        size = sum(e.bytes for e in saved)
        out: dict[str, Any] = {"saved_slots": len(saved), "bytes": size}
        rates = self.slot_store.rates(model.id)
        if saved and rates is not None and rates.read_bytes_per_second:
            out["restore_seconds"] = round(size / rates.read_bytes_per_second, 3)
        out["note"] = "restored within the start (counted in its measured time)"
        return out

    def pinned(self) -> frozenset[str]:
        """The active profile's models: never evicted while it is active."""
        return frozenset(self._profile_models(self.active_profile))

    def _profile_models(self, name: str | None) -> tuple[str, ...]:
        """The local models ``name`` pins (a selector or a peer's model is only routed to)."""
        pins = self.config.scheduling.profiles.get(name or "", {})
        local = self.config.models
        return tuple(dict.fromkeys(m for m in pins.values() if m is not None and m in local))

    async def switch_profile(self, name: str | None) -> tuple[str, ...]:
        """Make ``name`` the active profile (None: none) and load its models; what the last
        one pinned may be evicted again. Raises KeyError for an unknown profile."""
        profiles = self.config.scheduling.profiles
        if name is not None and name not in profiles:
            raise KeyError(name)
        self.active_profile = name
        log.info("active profile: %s", name or "(none)")
        models = self._profile_models(name)
        for model_id in models:
            await self.router.load(model_id)
        return models

    def _start_may_overlap(self, target: str, evict: frozenset[str]) -> bool:
        """Whether ``target``'s start may begin while ``evict`` save and stop: the budgets show
        it fits beside everything that holds memory now (routing/overlap.py)."""
        models = self.config.models
        if target not in models or any(m not in models for m in evict):
            return False
        holding = frozenset(
            m
            for m, p in self.router.processes.items()
            if p.state not in (ProcessState.STOPPED, ProcessState.FAILED, ProcessState.SHUTDOWN)
        )
        return start_may_overlap(
            target,
            evict,
            holding,
            self.config.scheduling.resources,
            self.uses,
            lambda m: models[m].proxy,
        )

    def _sleeping(self) -> frozenset[str]:
        if self._router is None:
            return frozenset()
        return frozenset(
            m for m, p in self._router.processes.items() if p.state is ProcessState.SLEEPING
        )

    def scheduler_policy(self) -> SchedulerPolicy:
        sched = self.config.scheduling
        models = self.config.models.values()
        return SchedulerPolicy(
            queue_limit=sched.queue_limit,
            max_queue_wait=sched.max_queue_wait,
            drain_timeout=sched.drain_timeout,
            max_in_flight=sched.max_in_flight,
            priorities={m.id: m.priority for m in models if m.priority},
            concurrency={m.id: m.concurrency_limit for m in models if m.concurrency_limit},
        )

    def _record_start(self, event: Event) -> None:
        if event.kind == "process.state" and event.data.get("new") is ProcessState.READY:
            seconds = event.data.get("start_seconds")
            listened = event.data.get("listening_seconds")
            if isinstance(seconds, int | float):
                self.stats.record_start(str(event.data["model"]), float(seconds))
                if isinstance(listened, int | float):
                    to_ready = event.data.get("listening_to_ready_seconds")
                    self.stats.record_listen(
                        str(event.data["model"]),
                        float(listened),
                        float(to_ready) if isinstance(to_ready, int | float) else None,
                    )
                self.stats.save_soon()

    async def start(self) -> None:
        await asyncio.to_thread(self.backend_record.reap_leftovers)  # a killed gateway's backends
        containment = self.containment = await asyncio.to_thread(detect)
        self.launcher.containment = containment
        log.info("process containment: %s (%s)", containment.mechanism, containment.detail)
        if self._reaper is not None:
            self._reaper.start()
        self._health_session = aiohttp.ClientSession()
        # Relay bytes exactly as the backend sent them (no decompression, no pool limit:
        # the scheduler, not the connection pool, decides how much runs at once).
        self._proxy_session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0),
            auto_decompress=False,
            skip_auto_headers=SKIP_AUTO_HEADERS,
            request_class=RelayRequest,
        )
        self._prompt_cache = PromptCache(
            self.slot_store,
            SlotClient(self._health_session),
            identity=command_key,
            save_path_of=save_path,
            why_no_slots=lambda model, meta: why_no_slots(model.backend, model.cmd, meta),
            hazards=lambda model, meta, lines: cache_hazards(model.backend, model.cmd, meta, lines),
            settings=lambda: self.config.prompt_cache,
        )
        processes = {m: self.make_process(model) for m, model in self.config.models.items()}
        self._router = LocalRouter(
            processes,
            self.events,
            self.swapper(),
            self.scheduler_policy(),
            explain_failure=self._explain_failure,
            before_cold_start=self._predict_before_start,
            overlap=self._start_may_overlap,
        )
        self._router.eviction_price = self.eviction_price
        if self.observer.count_requests:
            self._router.on_waited = self.observer.metrics.queue_waited
        sampler = MemorySampler(
            self.stats, lambda: {m: (p.state, p.pid) for m, p in self.router.processes.items()}
        )
        loop = asyncio.get_running_loop()
        self._background = [
            loop.create_task(sampler.run(), name="memory-sampler"),
            loop.create_task(self._keep_warm(), name="keep-warm"),
        ]
        if self.activity is not None:
            self._background.append(loop.create_task(self.activity.run(), name="activity"))
        self._background.append(loop.create_task(self.peers.run(), name="peer-discovery"))
        self._background.append(loop.create_task(self.performance.run(), name="performance"))

    async def hardware(self) -> dict[str, object]:
        """The machine (CPU, memory, GPUs, OS): read at the first ask, then kept."""
        if self._hardware is None:
            self._hardware = await hardware_snapshot(self.performance.nvidia_smi, time.time())
        return self._hardware

    def make_process(self, model: ModelConfig) -> ManagedProcess:
        process = self._new_process(model)
        if self.config.log_to_stdout in ("upstream", "both"):  # llama-swap's logToStdout
            process.logs.add_listener(self._backend_line_to_stdout)
        return process

    def _backend_line_to_stdout(self, line: str) -> None:
        sys.stdout.write(self.redactor.text(line) + "\n")
        sys.stdout.flush()

    def _new_process(self, model: ModelConfig) -> ManagedProcess:
        return ManagedProcess(
            model,
            events=self.events,
            session=self.health_session,
            diagnoser=GenericDiagnoser(),
            log_reader=BackendLogReader(),
            prober=MetadataProbe(self.health_session),
            reaper=self._reaper,
            record=self.backend_record,
            containment=self.containment,
            launcher=self.launcher,
            prompt_cache=self._prompt_cache,
            stop_grace=self._stop_grace if model.stop_grace is None else model.stop_grace,
            readiness_history=self.stats.readiness(model.id, LISTEN_HISTORY),
        )

    async def _keep_warm(self) -> None:
        """Preload at startup; load defaultModel when nothing runs and all is quiet."""
        sched = self.config.scheduling
        pinned = self._profile_models(self.active_profile)
        for model_id in (*sched.preload, *(m for m in pinned if m not in sched.preload)):
            try:
                await self.router.load(model_id)
                log.info("preloaded %s", model_id)
            except ModelswapError as exc:
                log.warning("preloading %s failed: %s", model_id, exc)
        default = sched.default_model
        if default is None:
            return
        while True:
            await asyncio.sleep(min(5.0, sched.default_after))
            router = self.router
            quiet_since = max([self.started_at, *router.last_used.values()])
            if (
                not router.scheduler.running
                and router.scheduler.swapping is None
                and not router.scheduler.queue_length
                and time.time() - quiet_since >= sched.default_after
            ):
                log.info(
                    "idle for %gs with nothing loaded: loading %s", sched.default_after, default
                )
                with contextlib.suppress(ModelswapError):
                    await router.load(default)

    async def close(self) -> None:
        self.stats.save()  # one that save_soon() left pending
        self.capability_memory.flush()
        await self.launcher.close()
        await self.plans.close()
        for task in self._background:
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        if self.activity is not None:
            await self.activity.close()
        if self._router is not None:
            await self._router.close()  # a ready llama.cpp model's slots saved on the way
        if self._prompt_cache is not None:
            await self._prompt_cache.close()  # their digests taken, the index written
        for store in (self.stats, self.capability_memory, self.slot_store):
            if store.file is not None:
                store.file.cancel()  # a save still failing (a full disk) is not tried again
        for session in (self._health_session, self._proxy_session):
            if session is not None:
                await session.close()
        await self._pooled.close()
        if self._reaper is not None:
            self._reaper.close()

    def _remember_capabilities(self, event: Event) -> None:
        """A ready backend's report, kept as what its model can do (keyed by the command the
        process runs, which a reload may already have changed: then it is never listed)."""
        if event.kind != "process.metadata" or self._router is None:
            return
        process = self._router.processes.get(str(event.data["model"]))
        metadata = event.data["metadata"]
        if process is None or not isinstance(metadata, ModelMetadata):
            return
        observed = observed_from(capability_report(metadata), event.at)
        if observed is not None and not process.config.capabilities.disable_auto:
            self.capability_memory.record(process.config, observed)

    def _warn_on_context_mismatch(self, event: Event) -> None:
        if event.kind != "process.metadata":
            return
        model_id = str(event.data["model"])
        reported = getattr(event.data["metadata"], "context_length", None)
        configured = self.configured[model_id].context
        if reported is not None and configured is not None and reported < configured:
            log.warning(
                "model %s: the backend serves %d tokens of context per request, but its command "
                "line asked for %d (a fit/auto-fit reduction, or slots sharing the context)",
                model_id,
                reported,
                configured,
            )

    @property
    def router(self) -> LocalRouter:
        assert self._router is not None, "Runtime.start() was not awaited"
        return self._router

    # ---- what the HTTP layer reads and commands (docs/architecture.md, "Layers") -----------

    def model(self, model_id: str) -> ModelStatus:
        """The local model ``model_id`` (a removed one still draining included). KeyError
        for one that has no process."""
        return ModelStatus(self.router.processes[model_id], self)

    def find_model(self, model_id: str) -> ModelStatus | None:
        process = self.router.processes.get(model_id)
        return ModelStatus(process, self) if process is not None else None

    def models(self) -> list[ModelStatus]:
        """Every local model with a process, in the config's order."""
        return [ModelStatus(process, self) for process in self.router.processes.values()]

    def remembered(self, model: ModelConfig) -> Observed | None:
        """What ``model`` could do when it was last ready (for /v1/models)."""
        return self.capability_memory.get(model)

    async def load(self, model_id: str) -> None:
        """Load a model as a request would (groups and budgets apply)."""
        await self.router.load(model_id)

    async def unload(self, model_ids: list[str] | None) -> list[str]:
        """Stop the models (None: all); the ones stopped."""
        return await self.router.unload(model_ids)

    async def acquire(self, model_id: str, client: Client = ANONYMOUS) -> Lease:
        """Wait until a request may be sent to ``model_id`` (started if needed); ``client``
        orders it in the fair queue (``gate.admit(key).client``)."""
        return await self.router.acquire(model_id, client)

    def admit(self, model_id: str, client: Client = ANONYMOUS) -> PendingLease:
        """A place in the queue for ``model_id``, without waiting (see :meth:`withdraw`)."""
        return self.router.admit(model_id, client)

    def queue_report(self) -> dict[str, Any]:
        """``GET /api/queue``: every waiting request in the order it would be served, what it
        waits for and its estimate; each client key's use against its limits (names only)."""
        rows = waiters(self.router.scheduler, self.router.now(), self._wait_facts)
        keys: list[ApiKey | None] = list(self.config.api_keys) or [None]
        return {
            "waiting": [row.as_dict() for row in rows],
            "keys": [standing.as_dict() for standing in self.gate.standing(keys)],
        }

    def wait_place(self, pending: PendingLease) -> Place | None:
        """Where a waiting request stands, for what it is told while it waits
        (``place.comment()`` on its event stream, ``place.header()`` on its answer); None once
        it waits no more. docs/sharing.md, "Wiring"."""
        return place_of(self.router.scheduler, pending, self._wait_facts)

    def key_quota_views(self) -> list[KeyQuotaView]:
        """Each limited client's quota now, for the scrape (``modelswap_key_quota_*``)."""
        keys: list[ApiKey | None] = list(self.config.api_keys) or [None]
        return [
            KeyQuotaView(
                standing.client.name,
                {w.name: (w.limit, w.remaining) for w in standing.windows},
                standing.in_flight,
            )
            for standing in self.gate.standing(keys)
        ]

    def _wait_facts(self, model_id: str) -> WaitFacts:
        """What :func:`~modelswap.routing.queue_place.estimate_wait` reads of one model."""
        model = self.config.models.get(model_id)
        slots = (model.concurrency_limit if model is not None else 0) or (
            self.config.scheduling.max_in_flight
        )
        served = self.router.served_seconds.get(model_id)
        service = statistics.median(served) if served else None
        scheduler = self.router.scheduler
        process = self.router.processes.get(model_id)
        start_left = due = None
        if scheduler.swapping == model_id:
            start_left = self.stats.median_start(model_id)
            began = process.started_at if process is not None else None
            if began is not None and process is not None and process.state is ProcessState.STARTING:
                start_left -= time.time() - began
            start_left = start_left if start_left > 0 else None  # overdue: no figure
        elif model is not None and not scheduler.runs(model_id):
            try:
                due = self.predict_load(model_id).time.total_seconds
            except Exception:  # an estimate must never cost the queue view
                log.exception("model %s: no dry run for the queue's estimate", model_id)
        return WaitFacts(slots, service, start_left, due)

    def withdraw(self, pending: PendingLease) -> None:
        """Leave the queue (or give back a lease granted but unused)."""
        self.router.withdraw(pending)

    def publish(self, kind: str, **data: Any) -> None:
        """An event on the runtime's bus (``fallback``, ``request.cancelled``, …)."""
        self.events.publish(kind, **data)

    def subscribe(self) -> asyncio.Queue[Event]:
        """A queue of every event from now on; pair with :meth:`unsubscribe`."""
        return self.events.subscriber_queue()

    def unsubscribe(self, queue: asyncio.Queue[Event]) -> None:
        self.events.unsubscribe(queue)

    @property
    def observing(self) -> bool:
        """Whether finished requests are recorded (metrics or the activity log)."""
        return self.observer.enabled

    def request_finished(self, record: RequestRecord) -> None:
        self.observer.request_finished(record)
        if record.model is not None and record.status == 200 and record.error_code is None:
            process = self.router.processes.get(record.model)
            if process is not None:  # the first answer after a restore proves it (issue 38)
                process.answered(record.cached_tokens, record.prompt_tokens, record.salted)

    def metrics_text(self) -> bytes:
        """The gateway's own /metrics exposition."""
        return self.observer.metrics.exposition()

    def add_collector(self, collector: Collector) -> None:
        """One more source of /metrics (the HTTP layer's own counts, read at scrape time)."""
        self.observer.metrics.registry.register(collector)

    def performance_view(self, after: float | None = None) -> dict[str, Any]:
        """The system monitor's samples (after ``after``)."""
        return self.performance.view(after)

    def containment_report(self) -> dict[str, object]:
        """How a backend's whole process tree is kept within reach."""
        return self.containment.as_dict()

    def peer_status(self) -> list[dict[str, object]]:
        return self.peers.status()

    def listening(self) -> None:
        """The gateway's socket listens: the launcher may make its spare keeper now."""
        self.launcher.begin()

    @property
    def health_session(self) -> aiohttp.ClientSession:
        assert self._health_session is not None, "Runtime.start() was not awaited"
        return self._health_session

    @property
    def proxy_session(self) -> aiohttp.ClientSession:
        assert self._proxy_session is not None, "Runtime.start() was not awaited"
        return self._proxy_session

    def session_for(self, timeouts: Timeouts) -> aiohttp.ClientSession:
        """The proxy session, or one whose connections follow ``keepalive``/``idleConn``."""
        pooled = timeouts.pooled
        return self.proxy_session if pooled is None else self._pooled.get(pooled)

    def resolve(self, name: str, key: ApiKey | None = None) -> ModelConfig:
        """The local model a request names (its id or an alias). Raises ModelNotFoundError —
        also for a model the client's key may not use, exactly as if it did not exist."""
        model = self.config.resolve(name)
        if model is None or (key is not None and not key.allows(model)):
            raise ModelNotFoundError(name, close_names(name, self.visible_names(key)))
        return model

    def target(self, name: str, key: ApiKey | None = None) -> Target:
        """Where ``name`` goes: a local model (ids and aliases win), else a selector's choice
        now, else a peer's model (``peerID/model``, or a bare name one peer serves). Raises
        ModelNotFoundError (also for names the key may not use) or AmbiguousModelError."""
        selector = self.config.selectors.get(name)
        if selector is not None:
            return self.target(choose(selector, self._target_states(selector)), key)
        model = self.config.resolve(name)
        if model is None and (pinned := self._pin(name)) is not None:
            return self.target(pinned, key)  # a pin name of the active profile
        if model is not None and (key is None or key.allows(model)):
            return LocalTarget(model, name)
        if model is None:
            try:
                route = self.peers.lookup(name)
            except AmbiguousModelError as exc:
                if key is None:
                    raise
                allowed = [c for c in exc.candidates if key.allows_names((c,))]
                if len(allowed) > 1:
                    raise AmbiguousModelError(name, allowed) from exc
                route = self.peers.lookup(allowed[0]) if allowed else None
            if route is not None and (key is None or key.allows_names((route.label, name))):
                return route
        raise ModelNotFoundError(name, close_names(name, self.visible_names(key)))

    def direct_target(self, name: str, key: ApiKey | None = None) -> LocalTarget | None:
        """The local model ``name`` names when :meth:`target` would choose nothing for it: an
        id or alias of a local model the key may use, without fallbacks. None for a selector,
        a pin, a peer's model, a model with fallbacks or one the key may not use. No side
        effects (a selector's choice and a peer pool's turn are :meth:`target`'s)."""
        if name in self.config.selectors:
            return None
        model = self.config.resolve(name)
        if model is None or model.fallback or (key is not None and not key.allows(model)):
            return None
        return LocalTarget(model, name)

    def _pin(self, name: str) -> str | None:
        """The model the active profile pins under ``name``, if any."""
        pins = self.config.scheduling.profiles.get(self.active_profile or "", {})
        return pins.get(name)

    def _target_states(self, selector: Selector) -> dict[str, TargetState]:
        """What a selector chooses from: each target ready or not, and its requests in flight."""
        states: dict[str, TargetState] = {}
        for name in selector.targets:
            model = self.config.resolve(name)
            if model is None:
                states[name] = TargetState(peer=True)
                continue
            ready = self.router.processes[model.id].state is ProcessState.READY
            states[name] = TargetState(ready=ready, in_flight=self.router.in_flight(model.id))
        return states

    def targets(self, name: str, key: ApiKey | None = None) -> list[Target]:
        """The target for ``name``, then its model's ``fallback`` targets the key may use."""
        first = self.target(name, key)
        chain: list[Target] = [first]
        for other in first.fallback:
            try:
                target = self.target(other, key)
            except ModelswapError:
                continue  # a discovering peer that does not serve it (now), or not allowed
            if all(target.label != seen.label for seen in chain):
                chain.append(target)
        return chain

    def visible_names(self, key: ApiKey | None) -> list[str]:
        """Model ids and aliases ``key`` may use (all of them without keys), then peer models."""
        local = [
            name
            for model in self.config.models.values()
            if key is None or key.allows(model)
            for name in (model.id, *model.aliases)
        ]
        return local + [route.label for route in self.visible_routes(key)]

    def visible_routes(self, key: ApiKey | None) -> list[PeerRoute]:
        """Peer models ``key`` may use (its patterns match the qualified or the bare name)."""
        return [
            route
            for route in self.peers.routes()
            if key is None or key.allows_names((route.label, route.model))
        ]
