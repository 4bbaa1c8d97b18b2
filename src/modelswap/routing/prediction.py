"""The load dry run: what starting a model would do now, decided without doing it (issue 39).

Pure. :func:`predict` takes a :class:`~modelswap.routing.scheduler.SchedulerSnapshot` — a copy
of the state the scheduler decides over, holding the scheduler's own swapper — and what is known
about each model (:class:`ModelFacts`: declared ``uses``, measured peaks and start times, the
planner's estimate). The eviction comes from ``snapshot.eviction_for``: the same swapper call the
scheduler makes before a real swap, so the prediction and the swap cannot drift apart. The rest
is arithmetic on measurements, each figure with where it came from and the spread seen so far.

:func:`compare` sets a prediction beside the swap that followed (the last-swap record).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from modelswap.planner.memory import Plan
from modelswap.routing.protocols import Eviction
from modelswap.routing.scheduler import SchedulerSnapshot

# A measured start's band: the runs' min..max, widened by this share of the median (and at
# least START_SLACK_SECONDS): a handful of starts understates the spread of the next one.
START_SLACK = 0.5
START_SLACK_SECONDS = 0.5
# Memory measured on earlier runs: the runs' min..max peak, widened by this share.
MEASURED_ERROR = 0.10
# The planner's error when this model's plan was never compared with a receipt (docs/
# predicting-swaps.md): it sizes weights and KV exactly from the files, the allowance for
# activations and graphs is a default taken from real logs.
PLANNER_ERROR = 0.15


def _median(values: Sequence[float]) -> float:
    return float(statistics.median(values))


@dataclass(frozen=True, slots=True)
class PlannerFigure:
    """The fit planner's estimate from the model's files (``planner/memory.py``)."""

    total_bytes: int
    weights_bytes: int
    kv_bytes: int
    allowance_bytes: int
    fits: bool | None
    verdict: str
    problems: tuple[str, ...] = ()
    fixes: tuple[str, ...] = ()
    error_pct: float = PLANNER_ERROR * 100  # stated: |plan_error_pct| once compared
    error_source: str = "default (never compared with a receipt)"

    def as_dict(self) -> dict[str, Any]:
        return {
            "total_bytes": self.total_bytes,
            "weights_bytes": self.weights_bytes,
            "kv_bytes": self.kv_bytes,
            "allowance_bytes": self.allowance_bytes,
            "fits": self.fits,
            "verdict": self.verdict,
            "problems": list(self.problems),
            "fixes": list(self.fixes),
            "error_pct": self.error_pct,
            "error_source": self.error_source,
        }


def planner_figure(plan: Plan, error_pct: float | None = None) -> PlannerFigure:
    """The planner's estimate of what ``plan`` will hold on the GPU. A paged engine (vLLM)
    takes its whole budget (utilisation × GPU) whatever the model; llama.cpp takes the weights,
    the allowance and the KV cache and state at its context. ``error_pct``: the error this
    model's plan showed against its last receipt (``plan_error_pct``), when compared."""
    seqs_state = plan.state_bytes_per_seq * plan.max_num_seqs
    total = plan.weights_bytes + plan.allowance_bytes + plan.kv_bytes_at_context + seqs_state
    if plan.geometry is not None and plan.budget_bytes is not None:
        total = plan.budget_bytes
    stated = (
        (abs(error_pct), "this model's last plan against its receipt")
        if error_pct is not None
        else (PLANNER_ERROR * 100, "default (never compared with a receipt)")
    )
    return PlannerFigure(
        total_bytes=int(total),
        weights_bytes=plan.weights_bytes,
        kv_bytes=plan.kv_bytes_at_context + seqs_state,
        allowance_bytes=plan.allowance_bytes,
        fits=plan.fits,
        verdict=plan.verdict,
        problems=plan.problems,
        fixes=plan.fixes,
        error_pct=max(stated[0], 1.0),
        error_source=stated[1],
    )


@dataclass(frozen=True, slots=True)
class ModelFacts:
    """What is known about one model, gathered by the runtime (or, offline, from the config
    and ``stats.json``)."""

    declared: Mapping[str, int] = field(default_factory=dict)  # its `uses`
    peaks: Mapping[str, int] = field(default_factory=dict)  # the highest ever measured
    run_peaks: Mapping[str, Sequence[int]] = field(default_factory=dict)  # each run's peak
    starts: Sequence[float] = ()  # measured start seconds
    default_start: float = 10.0  # the cost assumed for a model never started here
    served: Sequence[float] = ()  # how long its last requests held their lease (seconds)
    state: str = "stopped"
    planner: PlannerFigure | None = None
    prefetch: Mapping[str, Any] | None = None  # will its weights be read ahead, and what
    prompt_cache: Mapping[str, Any] | None = None  # what a start would restore
    stop_seconds: float | None = None  # its last swap's stop of what it evicted


@dataclass(frozen=True, slots=True)
class Evicted:
    model: str
    why: str
    busy: bool
    in_flight: int
    drain_seconds: float | None  # the wait for its requests to end (None: unknown)

    def as_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "why": self.why,
            "busy": self.busy,
            "in_flight": self.in_flight,
            "drain_seconds": self.drain_seconds,
        }


@dataclass(frozen=True, slots=True)
class MemoryFigure:
    """One resource: the bytes predicted, where the figure comes from, its band."""

    resource: str
    bytes: int | None
    source: str  # declared | measured | planner | unknown
    low: int | None = None
    high: int | None = None
    runs: int = 0
    error_pct: float | None = None
    counted_bytes: int = 0  # what the scheduler counts against the budget
    budget: int | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "bytes": self.bytes,
            "source": self.source,
            "low": self.low,
            "high": self.high,
            "runs": self.runs,
            "error_pct": self.error_pct,
            "counted_bytes": self.counted_bytes,
            "budget": self.budget,
        }


@dataclass(frozen=True, slots=True)
class TimeFigure:
    drain_seconds: float
    stop_seconds: float
    stop_source: str
    start_seconds: float
    start_source: str  # measured | default | running | asleep
    start_low: float
    start_high: float
    start_samples: int
    prefetch: Mapping[str, Any] | None
    prompt_cache: Mapping[str, Any] | None

    @property
    def total_seconds(self) -> float:
        return self.drain_seconds + self.stop_seconds + self.start_seconds

    def as_dict(self) -> dict[str, Any]:
        fixed = self.drain_seconds + self.stop_seconds
        return {
            "drain_seconds": round(self.drain_seconds, 3),
            "stop_seconds": round(self.stop_seconds, 3),
            "stop_source": self.stop_source,
            "start_seconds": round(self.start_seconds, 3),
            "start_source": self.start_source,
            "start_spread": {
                "low": round(self.start_low, 3),
                "high": round(self.start_high, 3),
                "samples": self.start_samples,
            },
            "prefetch": dict(self.prefetch) if self.prefetch is not None else None,
            "prompt_cache": dict(self.prompt_cache) if self.prompt_cache is not None else None,
            "total_seconds": round(self.total_seconds, 3),
            "range": [round(fixed + self.start_low, 3), round(fixed + self.start_high, 3)],
        }


@dataclass(frozen=True, slots=True)
class LoadPrediction:
    """What loading ``model`` now would do (``GET /api/models/{id}/dry-run``)."""

    model: str
    state: str
    running: bool
    can_start: bool  # the scheduler would start it (now, or once what it evicts drains)
    fits_now: bool  # it would start at once: nothing busy to drain, no swap under way
    blocked: str | None
    evict: tuple[Evicted, ...]
    reason: str | None  # the swapper's own words
    policy: str
    memory: tuple[MemoryFigure, ...]
    planner: PlannerFigure | None
    time: TimeFigure
    fits_machine: bool | None
    problems: tuple[str, ...]
    fixes: tuple[str, ...]
    waiting_ahead: tuple[str, ...] = ()

    @property
    def evicted(self) -> frozenset[str]:
        return frozenset(e.model for e in self.evict)

    def summary(self) -> str:
        if self.running:
            return f"{self.model} is running: loading it changes nothing."
        if not self.can_start:
            return f"{self.model} cannot start now: {self.blocked}."
        evicts = ", ".join(f"{e.model} ({e.why}{'; busy' if e.busy else ''})" for e in self.evict)
        text = f"loading {self.model} evicts {evicts}" if evicts else f"{self.model} fits now"
        text += f"; about {self.time.total_seconds:.1f} s"
        if self.blocked:
            text += f" (after: {self.blocked})"
        if self.fits_machine is False:
            text += "; it does not fit this machine: " + "; ".join(self.problems)
        return text + "."

    def to_json(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "state": self.state,
            "running": self.running,
            "can_start": self.can_start,
            "fits_now": self.fits_now,
            "blocked": self.blocked,
            "evict": [e.as_dict() for e in self.evict],
            "reason": self.reason,
            "policy": self.policy,
            "waiting_ahead": list(self.waiting_ahead),
            "memory": {
                "resources": {m.resource: m.as_dict() for m in self.memory},
                "planner": self.planner.as_dict() if self.planner is not None else None,
            },
            "time": self.time.as_dict(),
            "fits_machine": {
                "fits": self.fits_machine,
                "problems": list(self.problems),
                "fixes": list(self.fixes),
            },
            "summary": self.summary(),
        }


def predict(
    target: str,
    snapshot: SchedulerSnapshot,
    facts: Callable[[str], ModelFacts],
    budgets: Mapping[str, int],
    *,
    policy: str,
    host_resource: str = "ram",
) -> LoadPrediction:
    """The dry run of loading ``target`` from ``snapshot`` (module docstring)."""
    mine = facts(target)
    running = target in snapshot.running
    eviction = None if running else snapshot.eviction_for(target)
    if snapshot.swapping == target:  # what it evicts is stopped already: it is starting
        eviction = Eviction(frozenset(), f"a start of {target} is under way")
    can_start = running or eviction is not None
    why = eviction.why if eviction is not None else {}
    evict = tuple(
        _evicted(m, why.get(m, "the swapper's choice"), snapshot, facts(m))
        for m in sorted(eviction.models if eviction is not None else ())
    )
    blocked = _blocked(target, snapshot, eviction, evict, running)
    memory = _memory(mine, budgets, host_resource)
    problems, fixes, fits = _machine(mine, memory)
    time_figure = _time(mine, evict, running, snapshot.drain_timeout)
    return LoadPrediction(
        model=target,
        state=mine.state,
        running=running,
        can_start=can_start,
        fits_now=can_start and blocked is None,
        blocked=blocked,
        evict=evict,
        reason=eviction.reason if eviction is not None else None,
        policy=policy,
        memory=memory,
        planner=mine.planner,
        time=time_figure,
        fits_machine=fits,
        problems=problems,
        fixes=fixes,
        waiting_ahead=tuple(
            sorted(m for m in snapshot.queued if m != target and m not in snapshot.running)
        ),
    )


def _evicted(model: str, why: str, snapshot: SchedulerSnapshot, facts: ModelFacts) -> Evicted:
    in_flight = snapshot.in_flight.get(model, 0)
    drain: float | None = 0.0
    if in_flight:
        drain = min(_median(facts.served), snapshot.drain_timeout) if facts.served else None
    return Evicted(model, why, bool(in_flight), in_flight, drain)


def _blocked(
    target: str,
    snapshot: SchedulerSnapshot,
    eviction: Eviction | None,
    evict: tuple[Evicted, ...],
    running: bool,
) -> str | None:
    if running:
        return None
    if eviction is None:
        return (
            "no choice of evictions makes room: models that are never evicted (persistent, "
            "pinned by the active profile) hold the budget"
        )
    waits: list[str] = []
    if snapshot.swapping is not None and snapshot.swapping != target:
        waits.append(f"the swap to {snapshot.swapping} under way")
    if snapshot.stopping:
        waits.append(f"the stop of {', '.join(sorted(snapshot.stopping))}")
    busy = [e.model for e in evict if e.busy]
    if busy:
        waits.append(f"{', '.join(busy)} to finish serving (drain)")
    return "; ".join(waits) or None


def _memory(facts: ModelFacts, budgets: Mapping[str, int], host: str) -> tuple[MemoryFigure, ...]:
    names = list(budgets) or sorted({host, *facts.declared, *facts.peaks, *facts.run_peaks})
    return tuple(_resource(r, facts, budgets.get(r), host) for r in names)


def _resource(name: str, facts: ModelFacts, budget: int | None, host: str) -> MemoryFigure:
    counted = facts.declared.get(name, facts.peaks.get(name, 0))
    if name in facts.declared:
        used = facts.declared[name]
        return MemoryFigure(name, used, "declared", used, used, 0, None, counted, budget)
    runs = [r for r in facts.run_peaks.get(name, ()) if r > 0]
    if runs:
        low, high = min(runs), max(runs)
        return MemoryFigure(
            name,
            int(_median(runs)),
            "measured",
            int(low * (1 - MEASURED_ERROR)),
            int(high * (1 + MEASURED_ERROR)),
            len(runs),
            MEASURED_ERROR * 100,
            counted,
            budget,
        )
    if facts.peaks.get(name):
        peak = facts.peaks[name]
        low, high = int(peak * (1 - MEASURED_ERROR)), int(peak * (1 + MEASURED_ERROR))
        return MemoryFigure(
            name, peak, "measured", low, high, 1, MEASURED_ERROR * 100, counted, budget
        )
    plan = facts.planner
    if plan is not None and name != host:  # the planner sizes accelerator memory
        error = plan.error_pct / 100
        return MemoryFigure(
            name,
            plan.total_bytes,
            "planner",
            int(plan.total_bytes * (1 - error)),
            int(plan.total_bytes * (1 + error)),
            0,
            plan.error_pct,
            counted,
            budget,
        )
    return MemoryFigure(name, None, "unknown", counted_bytes=counted, budget=budget)


def _machine(
    facts: ModelFacts, memory: tuple[MemoryFigure, ...]
) -> tuple[tuple[str, ...], tuple[str, ...], bool | None]:
    """Whether it can fit on this machine at all: alone within each budget, and by the
    planner's verdict on the GPU; the problems and the fixes when not."""
    problems: list[str] = []
    fixes: list[str] = []
    known = False
    for figure in memory:
        if figure.budget is None or figure.bytes is None:
            continue
        known = True
        if figure.bytes > figure.budget:
            problems.append(
                f"{figure.resource}: needs {_size(figure.bytes)} ({figure.source}), more than "
                f"the whole budget of {_size(figure.budget)}"
            )
            fixes.append(f"raise resources.{figure.resource}, or make the model smaller")
    plan = facts.planner
    if plan is not None and plan.fits is not None:
        known = True
        if not plan.fits:
            problems.extend(plan.problems)
            fixes.extend(plan.fixes)
    if not known:
        return (), (), None
    return tuple(problems), tuple(fixes), not problems


def _time(
    facts: ModelFacts, evict: tuple[Evicted, ...], running: bool, drain_timeout: float
) -> TimeFigure:
    busy = [e for e in evict if e.busy]
    drain = max((e.drain_seconds or drain_timeout for e in busy), default=0.0)
    stop, stop_source = 0.0, "nothing to stop"
    if evict:
        stop, stop_source = (
            (facts.stop_seconds, "its last swap's stop")
            if facts.stop_seconds is not None
            else (0.0, "not measured yet")
        )
    if running:
        start, source, low, high, samples = 0.0, "running", 0.0, 0.0, 0
    elif facts.state == "sleeping":
        start, source, low, high, samples = 0.0, "asleep: it wakes", 0.0, 0.0, 0
    elif facts.starts:
        start, samples = _median(facts.starts), len(facts.starts)
        slack = max(START_SLACK_SECONDS, start * START_SLACK)
        low, high = max(0.0, min(facts.starts) - slack), max(facts.starts) + slack
        source = "measured"
    else:
        start, source, samples = facts.default_start, "default (never started here)", 0
        low, high = 0.0, facts.default_start * 3
    prefetch = facts.prefetch if evict and not running else None
    return TimeFigure(
        drain, stop, stop_source, start, source, low, high, samples, prefetch, facts.prompt_cache
    )


def _size(n: int) -> str:
    return f"{n / 1024**3:.2f} GiB" if n >= 1024**3 else f"{n / 1024**2:.0f} MiB"


def compare(
    predicted: Mapping[str, Any], swap: Mapping[str, Any], measured_bytes: Mapping[str, int]
) -> dict[str, Any]:
    """How a prediction (``to_json()``) compared with the swap that followed (its ``swap.done``
    record) and the memory measured of the run it started."""
    pred_evict = sorted(e["model"] for e in predicted.get("evict", []))
    actual_evict = sorted(swap.get("evict", []))
    timing = predicted.get("time", {})
    out: dict[str, Any] = {
        "evict_predicted": pred_evict,
        "evict_equal": pred_evict == actual_evict,
    }
    low, high = timing.get("range", [None, None])
    total = swap.get("total_seconds")
    if isinstance(total, int | float) and low is not None:
        whole = float(total) + float(swap.get("drain_seconds") or 0.0)
        out["time"] = {
            "predicted_seconds": timing.get("total_seconds"),
            "range": [low, high],
            "actual_seconds": round(whole, 4),
            "within": low <= whole <= high,
        }
        start = swap.get("start_seconds")
        spread = timing.get("start_spread", {})
        if isinstance(start, int | float) and "low" in spread:
            out["time"]["start"] = {
                "predicted_seconds": timing.get("start_seconds"),
                "low": spread["low"],
                "high": spread["high"],
                "actual_seconds": start,
                "within": spread["low"] <= start <= spread["high"],
            }
    memory: dict[str, Any] = {}
    resources = predicted.get("memory", {}).get("resources", {})
    for name, figure in resources.items():
        if figure.get("bytes") is None or name not in measured_bytes:
            continue
        used = measured_bytes[name]
        memory[name] = {
            "predicted_bytes": figure["bytes"],
            "source": figure["source"],
            "low": figure["low"],
            "high": figure["high"],
            "actual_bytes": used,
            "within": figure["low"] <= used <= figure["high"],
        }
    out["memory"] = memory
    return out
