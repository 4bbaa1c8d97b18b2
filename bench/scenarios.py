"""The six scenarios. Each runs its rounds with the targets alternating (the order rotates
every round, so drift and order effects fall on every target alike) and records per-round
figures and every problem found into :class:`Results`."""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from bench import load
from bench.procs import (
    cpu_seconds,
    peak_rss_bytes,
    reset_peak_rss,
)
from bench.targets import Fleet, Target

MiB = 1024 * 1024


@dataclass(frozen=True)
class Plan:
    """How much of everything: bounded counts and durations."""

    latency_rounds: int
    latency_requests: int
    throughput_rounds: int
    throughput_seconds: float
    throughput_concurrency: tuple[int, ...]
    stream_rounds: int
    stream_concurrency: tuple[int, ...]
    streams_per_worker: int
    paced_chunks: int
    paced_rate: float
    unpaced_chunks: dict[int, int]
    body_rounds: int
    body_reps: int
    body_sizes: tuple[int, ...]
    cold_rounds: int
    cold_llamacpp: bool
    footprint_runs: int
    idle_seconds: float


FULL = Plan(
    latency_rounds=5,
    latency_requests=300,
    throughput_rounds=3,
    throughput_seconds=3.0,
    throughput_concurrency=(32, 128),
    stream_rounds=3,
    stream_concurrency=(1, 32, 128),
    streams_per_worker=2,
    paced_chunks=50,
    paced_rate=50.0,
    unpaced_chunks={1: 4000, 32: 250, 128: 100},
    body_rounds=3,
    body_reps=3,
    body_sizes=(1 * MiB, 16 * MiB),
    cold_rounds=5,
    cold_llamacpp=True,
    footprint_runs=10,
    idle_seconds=3.0,
)
QUICK = Plan(
    latency_rounds=1,
    latency_requests=30,
    throughput_rounds=1,
    throughput_seconds=0.3,
    throughput_concurrency=(32, 128),
    stream_rounds=1,
    stream_concurrency=(1, 32, 128),
    streams_per_worker=1,
    paced_chunks=10,
    paced_rate=50.0,
    unpaced_chunks={1: 200, 32: 20, 128: 10},
    body_rounds=1,
    body_reps=1,
    body_sizes=(1 * MiB, 16 * MiB),
    cold_rounds=1,
    cold_llamacpp=False,
    footprint_runs=2,
    idle_seconds=0.5,
)
SCENARIOS = ("latency", "throughput", "streams", "bodies", "cold", "footprint")


class Results:
    """``data[scenario][case][target] = {"metrics": {name: [per round]}, "checked", "failed",
    "errors"}`` plus free-form ``info`` per scenario."""

    def __init__(self) -> None:
        self.data: dict[str, dict[str, dict[str, dict[str, Any]]]] = {}
        self.info: dict[str, dict[str, Any]] = {}

    def cell(self, scenario: str, case: str, target: str) -> dict[str, Any]:
        cases = self.data.setdefault(scenario, {})
        targets = cases.setdefault(case, {})
        return targets.setdefault(target, {"metrics": {}, "checked": 0, "failed": 0, "errors": []})

    def add(self, scenario: str, case: str, target: str, **metrics: float | None) -> None:
        cell = self.cell(scenario, case, target)
        for name, value in metrics.items():
            if value is not None:
                cell["metrics"].setdefault(name, []).append(value)

    def merge(self, scenario: str, case: str, target: str, outcome: load.Outcome) -> None:
        cell = self.cell(scenario, case, target)
        cell["answers"] = True  # this cell counts answers: none checked is a problem
        cell["checked"] += outcome.checked
        cell["failed"] += outcome.failed
        room = load.MAX_ERRORS - len(cell["errors"])
        cell["errors"].extend(outcome.errors[: max(0, room)])

    def problems(self) -> list[str]:
        out = []
        for scenario, cases in self.data.items():
            for case, targets in cases.items():
                for target, cell in targets.items():
                    if cell["failed"] or (cell.get("answers") and not cell["checked"]):
                        first = cell["errors"][0] if cell["errors"] else "nothing was checked"
                        out.append(
                            f"{scenario} {case} {target}: {cell['failed']}/{cell['checked']} "
                            f"wrong; first: {first}"
                        )
        return out


def rotations(targets: list[Target], rounds: int) -> Iterator[tuple[int, list[Target]]]:
    """Round ``r`` visits the targets starting at ``r``: A B C, B C A, C A B …"""
    for r in range(rounds):
        k = r % len(targets) if targets else 0
        yield r, targets[k:] + targets[:k]


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def rss_processes(target: Target) -> list[Any]:
    """The gateway's own process(es) for memory: modelswap's main process (its orphan
    watchdog is reported apart), nginx's master and workers, LiteLLM's whole tree."""
    if target.is_modelswap:
        main = target.main_process()
        return [main] if main is not None else []
    return target.processes()


# -- 1. added latency ----------------------------------------------------------------------


def latency(fleet: Fleet, plan: Plan, results: Results) -> None:
    results.info["latency"] = {
        "client": load.Sequential.client,
        "rounds": plan.latency_rounds,
        "requests": plan.latency_requests,
        "body_bytes": len(load.chat_body("hi")),
    }
    targets = fleet.ready()
    for _, order in rotations(targets, plan.latency_rounds):
        p50: dict[str, float] = {}
        p99: dict[str, float] = {}
        for target in order:
            outcome = load.Outcome()
            seq = load.Sequential(target.port, target.headers)
            try:
                values = seq.latencies(plan.latency_requests, "hi", outcome)
            except OSError as exc:
                outcome.bad(f"{type(exc).__name__}: {exc}")
                values = []
            finally:
                seq.close()
            results.merge("latency", "c1", target.name, outcome)
            if values:
                p50[target.name] = statistics.median(values)
                p99[target.name] = percentile(values, 99) or 0.0
                results.add(
                    "latency", "c1", target.name, p50=p50[target.name], p99=p99[target.name]
                )
        if "direct" in p50:
            for name in p50:
                results.add(
                    "latency",
                    "c1",
                    name,
                    added_p50=p50[name] - p50["direct"],
                    added_p99=p99[name] - p99["direct"],
                )


# -- 2. throughput -------------------------------------------------------------------------


def throughput(fleet: Fleet, plan: Plan, results: Results, client: str) -> None:
    use_wrk = client == "wrk"
    results.info["throughput"] = {
        "client": (load.wrk_version() or "wrk") + " (1 thread)" if use_wrk else load.AIOHTTP_CLIENT,
        "rounds": plan.throughput_rounds,
        "seconds": plan.throughput_seconds,
    }
    targets = fleet.ready()
    for concurrency in plan.throughput_concurrency:
        case = f"c{concurrency}"
        for _, order in rotations(targets, plan.throughput_rounds):
            for target in order:
                outcome = load.Outcome()
                procs = target.processes()
                if use_wrk:
                    cpu0 = cpu_seconds(procs)
                    started = time.perf_counter()
                    rps, _ = load.wrk_throughput(
                        target.port, target.headers, concurrency, plan.throughput_seconds, outcome
                    )
                    elapsed = time.perf_counter() - started
                    cpu = cpu_seconds(procs) - cpu0
                else:
                    # The client's own process is started (and ready) before the bracket.
                    with load.start_throughput(
                        target.port, target.headers, concurrency, plan.throughput_seconds, outcome
                    ) as child:
                        cpu0 = cpu_seconds(procs)
                        started = time.perf_counter()
                        rps = float(child.run().get("rps", 0.0))
                        elapsed = time.perf_counter() - started
                        cpu = cpu_seconds(procs) - cpu0
                results.merge("throughput", case, target.name, outcome)
                requests = rps * elapsed
                results.add(
                    "throughput",
                    case,
                    target.name,
                    rps=rps,
                    cpu_per_request=cpu / requests if procs and requests else None,
                )


# -- 3. streams ----------------------------------------------------------------------------


def streams(fleet: Fleet, plan: Plan, results: Results) -> None:
    results.info["streams"] = {
        "client": load.AIOHTTP_CLIENT,
        "rounds": plan.stream_rounds,
        "per_worker": plan.streams_per_worker,
        "paced": {"chunks": plan.paced_chunks, "rate": plan.paced_rate},
        "unpaced": {"chunks": {str(k): v for k, v in plan.unpaced_chunks.items()}},
    }
    targets = fleet.ready()
    for mode in ("paced", "unpaced"):
        for concurrency in plan.stream_concurrency:
            case = f"{mode} c{concurrency}"
            n = plan.paced_chunks if mode == "paced" else plan.unpaced_chunks[concurrency]
            rate = plan.paced_rate if mode == "paced" else 0.0
            for _, order in rotations(targets, plan.stream_rounds):
                for target in order:
                    stream_round(
                        results, target, case, concurrency, n, rate, plan.streams_per_worker
                    )


def stream_round(
    results: Results,
    target: Target,
    case: str,
    concurrency: int,
    n: int,
    rate: float,
    per_worker: int = 1,
) -> None:
    outcome = load.Outcome()
    procs = target.processes()
    memory = rss_processes(target)
    heavy = concurrency >= 128
    if heavy:
        reset_peak_rss(memory)
    # The client runs in its own fresh process, started (and ready) before the CPU bracket.
    with load.start_streams(
        target.port, target.headers, concurrency, n, rate, outcome, per_worker=per_worker
    ) as child:
        cpu0 = cpu_seconds(procs)
        figures = load.StreamFigures.from_json(child.run())
        cpu = cpu_seconds(procs) - cpu0
    results.merge("streams", case, target.name, outcome)
    if figures.chunks == 0:
        return
    results.add(
        "streams",
        case,
        target.name,
        chunks_per_s=figures.chunks / figures.wall,
        ttfc_p50=statistics.median(figures.ttfc) if figures.ttfc else None,
        gap_p99=percentile(figures.gaps, 99),
        cpu_per_chunk=cpu / figures.chunks if procs else None,
    )
    if heavy and memory:
        results.add("footprint", "rss", target.name, load_peak=peak_rss_bytes(memory))


# -- 4. large bodies -----------------------------------------------------------------------


def bodies(fleet: Fleet, plan: Plan, results: Results) -> None:
    results.info["bodies"] = {
        "client": load.Sequential.client,
        "rounds": plan.body_rounds,
        "reps": plan.body_reps,
    }
    targets = fleet.ready()
    for size in plan.body_sizes:
        case = f"{size // MiB} MiB"
        overhead = len(load.chat_body(""))
        text = "x" * (size - overhead)
        body = load.chat_body(text)
        assert len(body) == size
        for _, order in rotations(targets, plan.body_rounds):
            for target in order:
                outcome = load.Outcome()
                memory = rss_processes(target)
                reset_peak_rss(memory)
                seq = load.Sequential(target.port, target.headers)
                times = []
                try:
                    for _ in range(plan.body_reps):
                        seconds, status, raw = seq.post(body)
                        times.append(seconds)
                        outcome.checked += 1
                        if (problem := load.check_completion(status, raw, text, 4)) is not None:
                            outcome.bad(problem)
                except OSError as exc:
                    outcome.bad(f"{type(exc).__name__}: {exc}")
                finally:
                    seq.close()
                results.merge("bodies", case, target.name, outcome)
                results.add(
                    "bodies",
                    case,
                    target.name,
                    seconds=statistics.median(times) if times else None,
                    peak_rss=peak_rss_bytes(memory) if memory else None,
                )
