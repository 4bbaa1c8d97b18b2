"""``modelswap plan --config FILE MODEL`` and ``--together``: the load dry run and co-residency
without a gateway (issue 39; docs/predicting-swaps.md).

Built from the config and what earlier runs measured (``<stateDir>/stats.json``), with the
same swapper builder (``routing/swapper_from_config.py``), scheduler state (a
``SchedulerSnapshot`` of what ``--running`` names) and prediction (``routing/prediction.py``)
the gateway uses, so the offline answer is the one the gateway would give in that state.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from modelswap.config import Config, load_config
from modelswap.errors import ConfigError
from modelswap.model_stats import DEFAULT_START_SECONDS, StatsStore
from modelswap.planner.command import EXIT_FITS, EXIT_NO_FIT, EXIT_USAGE
from modelswap.planner.from_config import plan_command
from modelswap.planner.gpu import detect_gpu, parse_gpu
from modelswap.planner.hf import ModelReadError
from modelswap.planner.memory import Plan
from modelswap.planner.weights import prefetch_summary
from modelswap.routing.prediction import (
    LoadPrediction,
    ModelFacts,
    PlannerFigure,
    planner_figure,
    predict,
)
from modelswap.routing.scheduler import SchedulerSnapshot
from modelswap.routing.swapper_from_config import build_swapper, policy_name
from modelswap.routing.together import Coresidency, as_yaml, together

HOST = "ram"


def wants_offline(args: argparse.Namespace) -> bool:
    """``--together``, or ``--config FILE`` with a model id where ``plan`` takes a path."""
    if getattr(args, "together", False):
        return True
    return bool(args.config and args.path and not args.model and not Path(args.path).exists())


class Offline:
    """What a gateway would know at its start: the config, stats.json, the planner."""

    def __init__(self, config: Config, gpu: tuple[int, str] | None) -> None:
        self.config = config
        sched = config.scheduling
        state = Path(sched.state_dir).expanduser() if sched.state_dir != ":memory:" else None
        self.stats = StatsStore(state / "stats.json" if state else None)
        self._gpu = gpu
        self._plans: dict[str, Plan | None] = {}
        self.sources: dict[str, dict[str, str]] = {}  # model -> resource -> where from

    def plan(self, model_id: str) -> Plan | None:
        if model_id not in self._plans:
            overrides = {"gpu_bytes": self._gpu[0], "gpu_source": self._gpu[1]} if self._gpu else {}
            try:
                found = plan_command(self.config.models[model_id].cmd, overrides)
            except (ModelReadError, ValueError, OSError, KeyError, TypeError):
                found = None
            self._plans[model_id] = found
        return self._plans[model_id]

    def planner(self, model_id: str) -> PlannerFigure | None:
        plan = self.plan(model_id)
        return planner_figure(plan) if plan is not None else None

    def uses(self, model_id: str) -> Mapping[str, int]:
        """As the gateway counts it (declared, else measured), else the planner's estimate of
        the accelerator's memory — what a model never run here will take."""
        model = self.config.models[model_id]
        measured = self.stats.peaks(model_id)
        out: dict[str, int] = {}
        where: dict[str, str] = {}
        for resource in self.config.scheduling.resources:
            if resource in model.uses:
                out[resource], where[resource] = model.uses[resource], "declared"
            elif measured.get(resource):
                out[resource], where[resource] = measured[resource], "measured"
            elif resource != HOST and (figure := self.planner(model_id)) is not None:
                out[resource], where[resource] = figure.total_bytes, "planner"
            else:
                out[resource], where[resource] = 0, "unknown"
        self.sources[model_id] = where
        return out

    def cost(self, model_id: str) -> float:
        return self.stats.median_start(model_id) * self.config.models[model_id].evict_cost

    def facts(self, model_id: str, running: frozenset[str]) -> ModelFacts:
        model = self.config.models[model_id]
        return ModelFacts(
            declared=model.uses,
            peaks=self.stats.peaks(model_id),
            run_peaks=self.stats.run_peaks(model_id),
            starts=self.stats.start_samples(model_id),
            default_start=DEFAULT_START_SECONDS,
            state="ready" if model_id in running else "stopped",
            planner=self.planner(model_id),
            prefetch=prefetch_summary(model.cmd, model.prefetch),
        )

    def predict(self, model_id: str, running: frozenset[str]) -> LoadPrediction:
        sched = self.config.scheduling
        swapper = build_swapper(self.config, self.uses, self.cost)
        snapshot = SchedulerSnapshot(
            swapper=swapper,
            running=running,
            in_flight={},
            queued={},
            swapping=None,
            stopping=frozenset(),
            unload_requested=frozenset(),
            drain_timeout=sched.drain_timeout,
        )
        return predict(
            model_id,
            snapshot,
            lambda m: self.facts(m, running),
            sched.resources,
            policy=policy_name(self.config),
        )

    def together(self) -> Coresidency:
        swapper = build_swapper(self.config, self.uses, self.cost)
        return together(list(self.config.models), swapper)


def run(args: argparse.Namespace) -> int:
    try:
        config = load_config(args.config) if args.config else None
        if config is None:
            raise ModelReadError("--together and a model's dry run need --config FILE")
        gpu = (parse_gpu(args.gpu), "--gpu") if args.gpu else detect_gpu()
        offline = Offline(config, gpu)
        if args.together:
            return _together(offline, args)
        return _dry_run(offline, args)
    except (ModelReadError, ConfigError, ValueError) as exc:
        print(f"modelswap plan: {exc}", file=sys.stderr)
        return EXIT_USAGE


def _dry_run(offline: Offline, args: argparse.Namespace) -> int:
    config = offline.config
    model = config.resolve(args.path)
    if model is None:
        raise ModelReadError(f"no model {args.path!r} in {config.source}")
    running = frozenset(_names(config, args.running))
    prediction = offline.predict(model.id, running)
    if args.json:
        print(json.dumps(prediction.to_json(), indent=2))
    else:
        print(render(prediction))
    return EXIT_NO_FIT if prediction.fits_machine is False else EXIT_FITS


def _names(config: Config, text: str | None) -> list[str]:
    out: list[str] = []
    for name in (text or "").split(","):
        if not name.strip():
            continue
        model = config.resolve(name.strip())
        if model is None:
            raise ModelReadError(f"--running: no model {name.strip()!r} in {config.source}")
        out.append(model.id)
    return out


def _together(offline: Offline, args: argparse.Namespace) -> int:
    result = offline.together()
    form = args.as_form
    if args.json:
        data: dict[str, Any] = {**result.as_dict(), "memory_sources": offline.sources}
        data["yaml"] = as_yaml(result, form=form)
        print(json.dumps(data, indent=2))
        return EXIT_FITS
    print(render_together(result, offline))
    print(as_yaml(result, form=form), end="")
    return EXIT_FITS


def _mib(n: int | None) -> str:
    if n is None:
        return "unknown"
    return f"{n / 1024**3:.2f} GiB" if n >= 1024**3 else f"{n / 1024**2:.0f} MiB"


def render(p: LoadPrediction) -> str:
    """The dry run as text (``modelswap plan --config FILE MODEL``)."""
    lines = [f"load {p.model}  (policy: {p.policy})", f"  {p.summary()}"]
    for e in p.evict:
        busy = f"; busy, {e.in_flight} in flight" if e.busy else ""
        lines.append(f"  evicts {e.model}: {e.why}{busy}")
    if not p.evict and p.can_start and not p.running:
        lines.append("  evicts nothing")
    for m in p.memory:
        band = f" ({_mib(m.low)} .. {_mib(m.high)}, {m.runs} runs)" if m.low is not None else ""
        budget = f" of {_mib(m.budget)} budget" if m.budget is not None else ""
        figure = f"{_mib(m.bytes)} ({m.source})" if m.bytes is not None else "unknown"
        lines.append(f"  memory {m.resource}: {figure}{band}{budget}")
    if p.planner is not None:
        pl = p.planner
        lines.append(
            f"  planner: {_mib(pl.total_bytes)} on the GPU (weights {_mib(pl.weights_bytes)}, "
            f"KV {_mib(pl.kv_bytes)}, allowance {_mib(pl.allowance_bytes)}; ±{pl.error_pct:g}%"
            f", {pl.error_source}): {pl.verdict}"
        )
    t = p.time
    lines.append(
        f"  time: {t.total_seconds:.1f} s = drain {t.drain_seconds:.1f} + stop "
        f"{t.stop_seconds:.1f} ({t.stop_source}) + start {t.start_seconds:.1f} "
        f"({t.start_source}; {t.start_low:.1f} .. {t.start_high:.1f} s, {t.start_samples} runs)"
    )
    if t.prefetch is not None:
        lines.append(f"  prefetch: {json.dumps(dict(t.prefetch))}")
    verdict = {None: "unknown", True: "yes", False: "NO"}[p.fits_machine]
    lines.append(f"  fits this machine: {verdict}")
    lines += [f"    problem: {text}" for text in p.problems]
    lines += [f"    fix: {text}" for text in p.fixes]
    return "\n".join(lines)


def render_together(result: Coresidency, offline: Offline) -> str:
    lines = [f"co-residency (policy: {policy_name(offline.config)})", "run side by side:"]
    lines += [f"  {{{', '.join(s)}}}" for s in result.sets]
    if result.truncated:
        lines.append("  (search stopped early: too many combinations; the sets are a part)")
    lines.append("starting a model evicts (the other one running):")
    for model, others in result.evicts.items():
        for other, why in others.items():
            lines.append(f"  {model} evicts {other}: {why}")
    sources = {f"{m}.{r}: {s}" for m, per in offline.sources.items() for r, s in per.items()}
    if sources:
        lines.append("memory from: " + ", ".join(sorted(sources)))
    lines.append("# pin it (llama-swap YAML; modelswap reads it as it is):")
    return "\n".join(lines)
