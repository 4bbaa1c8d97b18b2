"""Recognise signs of life in a starting backend's output: which phase it is in, and how far.

:func:`recognise_progress` runs on every line a starting backend prints, so it is one pass of
plain regexes: a cheap tqdm check, then a single alternation of every adapter's progress lines
whose matching group names the phase. Lines that only prove the process is alive (routes,
random INFO) are not progress.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from modelswap.backends.adapter import (
    AUTOTUNING,
    BUSY,
    CAPTURING_GRAPHS,
    COMPILING,
    INITIALIZING_KV_CACHE,
    LOADING_TENSORS,
    LOADING_WEIGHTS,
    PROFILING,
    STARTING_SERVER,
    WARMING_UP,
)
from modelswap.backends.logtext import last_segment, message
from modelswap.backends.registry import progress_bars, progress_phases
from modelswap.reported import Progress

__all__ = [
    "AUTOTUNING",
    "BUSY",
    "CAPTURING_GRAPHS",
    "COMPILING",
    "INITIALIZING_KV_CACHE",
    "LOADING_TENSORS",
    "LOADING_WEIGHTS",
    "PROFILING",
    "STARTING_SERVER",
    "WARMING_UP",
    "last_progress",
    "recognise_progress",
]

# "<desc>:  45%|████▌     | 23/51 [00:03<00:04, 6.1it/s]" and vLLM's shard bar
# "Loading safetensors checkpoint shards:  50% Completed | 2/4 [00:01<00:01,  1.50it/s]".
_TQDM = re.compile(
    r"^(?P<desc>.*?):?\s*(?P<pct>\d{1,3})%\s*(?:\|[^|]*\||Completed\s*\|)\s*"
    r"(?P<done>\d+)/(?P<total>\d+)\b"
)

# A bar's description → a named phase (every adapter's, first match wins); other descriptions
# are their own phase, lowercased.
_BAR_PHASES: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(pattern, re.I), phase) for phase, pattern in progress_bars()
)

# Every adapter's lines (registry order, each adapter's in its own priority order); where two
# alternatives match at the same place, the first wins.
_LINE_PHASES: tuple[tuple[str, str], ...] = progress_phases()
_LINE = re.compile(
    "|".join(f"(?P<p{i}>{pattern})" for i, (_, pattern) in enumerate(_LINE_PHASES)), re.I
)


def _bar(text: str) -> Progress | None:
    match = _TQDM.search(text)
    if match is None:
        return None
    desc = match["desc"].strip().rstrip(":").strip()
    phase = next((name for pattern, name in _BAR_PHASES if pattern.search(desc)), None)
    if phase is None:
        phase = re.sub(r"\s+", " ", desc.strip("[]: ")).lower() or "working"
    return Progress(phase, int(match["done"]), int(match["total"]))


def recognise_progress(line: str) -> Progress | None:
    """The phase (and count, for bars) that ``line`` shows, or None for an ordinary line.

    ``line`` is one output line; if it still holds ``\\r`` redraws, the last one counts. ANSI
    colours and vLLM's process prefix / logging header are ignored.
    """
    text = message(last_segment(line))
    if not text:
        return None
    if "%" in text:
        bar = _bar(text)
        if bar is not None:
            return bar
    match = _LINE.search(text)
    if match is None or match.lastgroup is None:
        return None
    return Progress(_LINE_PHASES[int(match.lastgroup[1:])][0])


def last_progress(lines: Sequence[str]) -> Progress | None:
    """The latest progress shown in ``lines`` (a log tail), or None."""
    for line in reversed(lines):
        progress = recognise_progress(line)
        if progress is not None:
            return progress
    return None
