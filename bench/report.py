"""Tables (Markdown) of medians with min–max and ratios to direct, and the issue's goals
checked side by side. Pure over the results dict (``--json`` writes the same dict)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from bench import extras, prompt_cache

MiB = 1024 * 1024
MS = 1000.0
US = 1_000_000.0


@dataclass(frozen=True)
class Metric:
    label: str
    scale: float
    digits: int
    ratio: bool = True  # show ×direct


METRICS = {
    "p50": Metric("p50 ms", MS, 3),
    "p99": Metric("p99 ms", MS, 3),
    "added_p50": Metric("added p50 ms (− direct)", MS, 3, ratio=False),
    "added_p99": Metric("added p99 ms (− direct)", MS, 3, ratio=False),
    "rps": Metric("req/s", 1.0, 0),
    "cpu_per_request": Metric("CPU µs/req", US, 0, ratio=False),
    "chunks_per_s": Metric("chunks/s", 1.0, 0),
    "ttfc_p50": Metric("first chunk p50 ms", MS, 2),
    "gap_p99": Metric("inter-chunk p99 ms", MS, 2),
    "cpu_per_chunk": Metric("CPU µs/chunk", US, 1, ratio=False),
    "seconds": Metric("ms per request", MS, 1),
    "peak_rss": Metric("peak RSS MiB", 1 / MiB, 1, ratio=False),
    "healthy": Metric("backend alone: spawn → healthy ms", MS, 1, ratio=False),
    "first_request": Metric("backend alone: 1st request ms", MS, 1, ratio=False),
    "cold_ttfb": Metric("cold request → first byte ms", MS, 1, ratio=False),
    "share": Metric("gateway's share ms", MS, 1, ratio=False),
    "idle": Metric("idle RSS MiB", 1 / MiB, 1, ratio=False),
    "idle_cpu": Metric("idle CPU ms per s", MS, 2, ratio=False),
    "load_peak": Metric("peak RSS under 128 streams MiB", 1 / MiB, 1, ratio=False),
    "growth": Metric("RSS growth over the runs MiB", 1 / MiB, 2, ratio=False),
}

TITLES = {
    "latency": "1. Added latency: non-streaming chat, concurrency 1, small body",
    "throughput": "2. Throughput: non-streaming chat",
    "streams": "3. Streaming: paced (50 chunks/s per stream) and unpaced",
    "bodies": "4. Large request bodies (non-streaming)",
    "cold": "5. Cold swap: request to first byte for a stopped model",
    "footprint": "6. Footprint: gateway RSS",
}


def median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def figure(
    results: dict[str, Any], scenario: str, case: str, target: str, metric: str
) -> float | None:
    cell = results["scenarios"].get(scenario, {}).get(case, {}).get(target)
    if cell is None:
        return None
    return median(cell["metrics"].get(metric, []))


def _num(value: float, digits: int) -> str:
    return f"{value:,.{digits}f}"


def cell_text(cell: dict[str, Any] | None, metric: str, direct: float | None) -> str:
    if cell is None or not cell["metrics"].get(metric):
        return "—"
    meta = METRICS[metric]
    values = [v * meta.scale for v in cell["metrics"][metric]]
    text = _num(statistics.median(values), meta.digits)
    if len(values) > 1:
        text += f" ({_num(min(values), meta.digits)}–{_num(max(values), meta.digits)})"
    mid = statistics.median(cell["metrics"][metric])
    if meta.ratio and direct and mid is not None:
        ratio = mid / direct
        text += f" ×{ratio:.2f}" if ratio >= 0.1 else f" ×{ratio:.3f}"
    return text


def check_text(cell: dict[str, Any] | None) -> str:
    if cell is None:
        return "—"
    ok = cell["checked"] - cell["failed"]
    mark = "✓" if cell["failed"] == 0 and cell["checked"] else "✗"
    return f"{mark} {ok:,}/{cell['checked']:,}"


def scenario_table(results: dict[str, Any], scenario: str, targets: list[str]) -> list[str]:
    cases = results["scenarios"].get(scenario, {})
    if not cases:
        return []
    info = results.get("info", {}).get(scenario, {})
    lines = [f"### {TITLES[scenario]}", ""]
    if info.get("client"):
        lines.append(f"Client: {info['client']}. " + _plan_text(scenario, info))
        lines.append("")
    cols = [t for t in targets if any(t in c for c in cases.values())]
    if scenario == "cold":
        cols = ["direct", *[t for t in cols if t != "direct"]]
    lines.append("| | " + " | ".join(cols) + " |")
    lines.append("|---|" + "---|" * len(cols))
    for case, by_target in cases.items():
        metrics: list[str] = []
        for cell in by_target.values():
            metrics += [m for m in cell["metrics"] if m not in metrics and m in METRICS]
        for metric in metrics:
            direct = median(by_target.get("direct", {}).get("metrics", {}).get(metric, []))
            row = [cell_text(by_target.get(t), metric, direct) for t in cols]
            lines.append(f"| {case}: {METRICS[metric].label} | " + " | ".join(row) + " |")
        if any(c["checked"] for c in by_target.values()):
            row = [check_text(by_target.get(t)) for t in cols]
            lines.append(f"| {case}: answers correct | " + " | ".join(row) + " |")
    lines.append("")
    return lines


def _plan_text(scenario: str, info: dict[str, Any]) -> str:
    if scenario == "latency":
        return (
            f"{info['rounds']} rounds × {info['requests']} requests "
            f"({info['body_bytes']}-byte body); per round p50/p99, then median (min–max) "
            "over rounds."
        )
    if scenario == "throughput":
        return f"{info['rounds']} rounds × {info['seconds']:g} s per concurrency."
    if scenario == "streams":
        paced, unpaced = info["paced"], info["unpaced"]["chunks"]
        per = ", ".join(f"c={k}: {v}" for k, v in unpaced.items())
        return (
            f"{info['rounds']} rounds; c = concurrent workers, each running "
            f"{info['per_worker']} stream(s) back to back; paced: {paced['chunks']} chunks at "
            f"{paced['rate']:g}/s per stream, workers starting spread over one stream's "
            f"length (steady arrivals, not a burst); unpaced: all at once, chunks per stream "
            f"{per}. chunks/s = all chunks ÷ (first request → last stream's end). CPU = the "
            "gateway's own processes (scheduler time of every thread)."
        )
    if scenario == "bodies":
        return f"{info['rounds']} rounds × {info['reps']} requests; peak RSS = VmHWM."
    if scenario == "cold":
        return (
            f"{info['rounds']} rounds, alternating: the backend started alone (polled every "
            "2 ms), then the same model through the gateway while stopped. Share = cold "
            "first byte − (alone: spawn → healthy + its first request)."
        )
    return ""


# -- goals ---------------------------------------------------------------------------------


@dataclass
class Goal:
    goal: str
    target: str
    value: str
    verdict: str  # pass, FAIL, n/a


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def goals(results: dict[str, Any]) -> list[Goal]:
    ran = [t for t, s in results["targets"].items() if s.get("skipped") is None]
    out: list[Goal] = []
    for ms in [t for t in ran if t.startswith("modelswap")]:
        out += _goals_for(results, ms)
        if "llama-swap" in ran:
            out += _llama_swap_goals(results, ms)
    return out + _extra_goals(results.get("extras", {}))


def _extra_goals(extras: dict[str, Any]) -> list[Goal]:
    """Issue 21's and issue 30's goals, from the scenarios that bring their own gateway."""
    cache = extras.get("promptcache", {})
    kept = (
        [
            Goal(goal, "modelswap", value, _verdict(met))
            for goal, value, met in prompt_cache.goals(cache)
        ]
        if "rounds" in cache
        else []
    )
    return kept + _issue21_goals(extras)


def _issue21_goals(extras: dict[str, Any]) -> list[Goal]:
    silent = extras.get("silent", {})
    if "share" not in silent:
        return []
    share = statistics.median(silent["share"])
    measured = [silent, *([silent["llamacpp"]] if "llamacpp" in silent else [])]
    # What waiting adds: the gateway's CPU per second of a start, less its CPU while idle.
    repeated = max(m["poll_cpu"] / m["poll_wall"] - m["idle_cpu_share"] for m in measured)
    first = max(m["first_poll_cpu"] / m["first_poll_wall"] - m["idle_cpu_share"] for m in measured)
    return [
        Goal(
            "silent backend: gateway's share ≤ 10 ms median (issue 21)",
            "modelswap",
            f"{share * MS:.1f} ms",
            _verdict(share <= 0.010),
        ),
        Goal(
            "silent or 503-while-loading backend: polling ≤ 2 % of a core while a start runs "
            "(issue 21; above the idle gateway's own; the worse of the two; a model with "
            "starts in stats.json)",
            "modelswap",
            f"{repeated * 100:.2f} %",
            _verdict(repeated <= 0.02),
        ),
        Goal(
            "the same, a model's first start ever (no history to aim by)",
            "modelswap",
            f"{first * 100:.2f} %",
            _verdict(first <= 0.02),
        ),
    ]


def _verdict(ok: bool | None) -> str:
    return "n/a" if ok is None else ("pass" if ok else "FAIL")


def _goals_for(r: dict[str, Any], ms: str) -> list[Goal]:
    out: list[Goal] = []

    def add(goal: str, value: str, ok: bool | None) -> None:
        out.append(Goal(goal, ms, value, _verdict(ok)))

    share = figure(r, "cold", "fake backend", ms, "share")
    add(
        "cold swap: gateway's share ≤ 30 ms median (fake backend)",
        f"{share * MS:.1f} ms" if share is not None else "not run",
        None if share is None else share <= 0.030,
    )
    share_ll = figure(r, "cold", "llama.cpp backend", ms, "share")
    if share_ll is not None:
        add(
            "cold swap, realism check: share ≤ 30 ms (llama.cpp + SmolLM2)",
            f"{share_ll * MS:.1f} ms",
            share_ll <= 0.030,
        )

    added = figure(r, "latency", "c1", ms, "added_p50")
    floor = figure(r, "latency", "c1", "floor", "added_p50")
    lite = figure(r, "latency", "c1", "litellm", "added_p50")
    ratio = _ratio(added, floor)
    add(
        "added latency p50 ≤ 1.15× floor's",
        f"{added * MS:.3f} vs {floor * MS:.3f} ms = ×{ratio:.2f}"
        if added is not None and floor is not None and ratio is not None
        else "not run",
        None if ratio is None else ratio <= 1.15,
    )
    lower = _ratio(lite, added)
    add(
        "added latency p50 ≥ 30× lower than LiteLLM's",
        f"{lite * MS:.2f} / {added * MS:.3f} ms = {lower:.0f}×"
        if lite is not None and added is not None and lower is not None
        else "not run",
        None if lower is None else lower >= 30,
    )

    for c in (1, 32, 128):
        case = f"paced c{c}"
        rel = _ratio(
            figure(r, "streams", case, ms, "chunks_per_s"),
            figure(r, "streams", case, "direct", "chunks_per_s"),
        )
        add(
            f"paced c={c}: chunks/s ≥ 0.99× direct",
            f"×{rel:.3f}" if rel is not None else "not run",
            None if rel is None else rel >= 0.99,
        )
        mine, base = (
            figure(r, "streams", case, ms, "ttfc_p50"),
            figure(r, "streams", case, "direct", "ttfc_p50"),
        )
        diff = mine - base if mine is not None and base is not None else None
        add(
            f"paced c={c}: first chunk ≤ direct + 1 ms",
            f"+{diff * MS:.2f} ms" if diff is not None else "not run",
            None if diff is None else diff <= 0.001,
        )
        mine, base = (
            figure(r, "streams", case, ms, "gap_p99"),
            figure(r, "streams", case, "direct", "gap_p99"),
        )
        diff = mine - base if mine is not None and base is not None else None
        add(
            f"paced c={c}: inter-chunk p99 ≤ direct + 1.5 ms",
            f"{diff * MS:+.2f} ms" if diff is not None else "not run",
            None if diff is None else diff <= 0.0015,
        )
    for c in (1, 32, 128):
        case = f"unpaced c{c}"
        rel = _ratio(
            figure(r, "streams", case, ms, "chunks_per_s"),
            figure(r, "streams", case, "floor", "chunks_per_s"),
        )
        add(
            f"unpaced c={c}: chunks/s ≥ 0.95× floor",
            f"×{rel:.2f}" if rel is not None else "not run",
            None if rel is None else rel >= 0.95,
        )
        rel = _ratio(
            figure(r, "streams", case, ms, "cpu_per_chunk"),
            figure(r, "streams", case, "floor", "cpu_per_chunk"),
        )
        add(
            f"unpaced c={c}: CPU per chunk ≤ 1.2× floor's",
            f"×{rel:.2f}" if rel is not None else "not run",
            None if rel is None else rel <= 1.2,
        )

    rps = figure(r, "throughput", "c32", ms, "rps")
    rel = _ratio(rps, figure(r, "throughput", "c32", "floor", "rps"))
    add(
        "throughput c=32 ≥ 0.9× floor",
        f"×{rel:.2f}" if rel is not None else "not run",
        None if rel is None else rel >= 0.9,
    )
    rel = _ratio(rps, figure(r, "throughput", "c32", "litellm", "rps"))
    add(
        "throughput c=32 ≥ 50× LiteLLM",
        f"{rel:.0f}×" if rel is not None else "not run",
        None if rel is None else rel >= 50,
    )

    idle = figure(r, "footprint", "rss", ms, "idle")
    add(
        "RSS idle ≤ 60 MB (57.2 MiB)",
        f"{idle / MiB:.1f} MiB" if idle is not None else "not run",
        None if idle is None else idle <= 60e6,
    )
    peak = figure(r, "footprint", "rss", ms, "load_peak")
    add(
        "RSS under 128 streams ≤ 150 MB (143.1 MiB)",
        f"{peak / MiB:.1f} MiB" if peak is not None else "not run",
        None if peak is None else peak <= 150e6,
    )
    growth = figure(r, "footprint", "rss", ms, "growth")
    runs = r.get("info", {}).get("footprint", {}).get("runs", 0)
    add(
        f"no RSS growth across {runs} repeated runs (≤ 2 MiB)",
        f"{growth / MiB:+.2f} MiB" if growth is not None else "not run",
        None if growth is None else growth <= 2 * MiB,
    )
    return out


def _llama_swap_goals(r: dict[str, Any], ms: str) -> list[Goal]:
    """Issue 28's relay goals: each a ratio to llama-swap in the same run (none without it)."""
    ls = "llama-swap"
    out: list[Goal] = []

    def add(goal: str, mine: float | None, theirs: float | None, *, higher: bool) -> None:
        rel = _ratio(mine, theirs)
        ok = None if rel is None else (rel >= 1.0 if higher else rel <= 1.0)
        out.append(Goal(goal, ms, f"×{rel:.2f}" if rel is not None else "not run", _verdict(ok)))

    def fig(scenario: str, case: str, target: str, metric: str) -> float | None:
        return figure(r, scenario, case, target, metric)

    add(
        "throughput c=32: req/s ≥ 1.0× llama-swap's",
        fig("throughput", "c32", ms, "rps"),
        fig("throughput", "c32", ls, "rps"),
        higher=True,
    )
    add(
        "throughput c=32: gateway CPU per request ≤ llama-swap's",
        fig("throughput", "c32", ms, "cpu_per_request"),
        fig("throughput", "c32", ls, "cpu_per_request"),
        higher=False,
    )
    add(
        "added latency p50 at c=1 ≤ llama-swap's",
        fig("latency", "c1", ms, "added_p50"),
        fig("latency", "c1", ls, "added_p50"),
        higher=False,
    )
    for c in (32, 128):
        case = f"unpaced c{c}"
        add(
            f"streamed c={c}: chunks/s ≥ 1.0× llama-swap's",
            fig("streams", case, ms, "chunks_per_s"),
            fig("streams", case, ls, "chunks_per_s"),
            higher=True,
        )
        add(
            f"streamed c={c}: CPU per chunk ≤ llama-swap's",
            fig("streams", case, ms, "cpu_per_chunk"),
            fig("streams", case, ls, "cpu_per_chunk"),
            higher=False,
        )
        add(
            f"streamed c={c}: first chunk p50 ≤ llama-swap's",
            fig("streams", case, ms, "ttfc_p50"),
            fig("streams", case, ls, "ttfc_p50"),
            higher=False,
        )
    return out


def goals_table(results: dict[str, Any]) -> list[str]:
    rows = goals(results)
    if not rows:
        return []
    lines = [
        "### Goals (issues 10, 21 and 28), side by side",
        "",
        "| goal | target | measured | verdict |",
        "|---|---|---|---|",
    ]
    for g in rows:
        lines.append(f"| {g.goal} | {g.target} | {g.value} | {g.verdict} |")
    lines.append("")
    return lines


def render(results: dict[str, Any]) -> str:
    meta = results["meta"]
    targets = list(results["targets"])
    lines = ["## Results", ""]
    lines.append(
        f"Command: `{meta['command']}` — {meta['mode']} run, {meta['elapsed']:.0f} s, "
        f"{meta['date']}."
    )
    lines.append(f"Machine: {meta['machine']}.")
    lines.append("")
    if results["targets"]:  # none when only the scenarios with their own gateways ran
        lines.append("| target | what |")
        lines.append("|---|---|")
        for name, state in results["targets"].items():
            what = state.get("description") or ""
            if state.get("skipped"):
                what = f"**skipped**: {state['skipped']}"
            lines.append(f"| {name} | {what} |")
        lines.append("")
        lines.append(
            "Cells: median over rounds (min–max) and ×ratio to direct where it means "
            "something. ✓ ok/checked counts every answer checked for status and content."
        )
        lines.append("")
    for scenario in TITLES:
        lines += scenario_table(results, scenario, targets)
    info = results.get("info", {}).get("footprint", {})
    if info.get("watchdog_rss"):
        parts = ", ".join(f"{k}: {v / MiB:.1f} MiB" for k, v in info["watchdog_rss"].items())
        lines.append(
            f"modelswap's orphan watchdog (a separate process, not counted above): {parts}."
        )
        lines.append("")
    lines += extras.render(results.get("extras", {}))
    lines += goals_table(results)
    problems = results.get("problems", [])
    if problems:
        lines.append("### Wrong answers")
        lines.append("")
        lines += [f"* {p}" for p in problems]
        lines.append("")
    return "\n".join(lines)
