"""Recognise signs of life in a starting backend's output: which phase it is in, and how far.

:func:`recognise_progress` runs on every line a starting backend prints, so it is one pass of
plain regexes: a cheap tqdm check, then a single alternation whose matching group names the
phase. Lines that only prove the process is alive (routes, random INFO) are not progress.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from modelswap.backends.logtext import last_segment, message
from modelswap.reported import Progress

LOADING_WEIGHTS = "loading weights"
LOADING_TENSORS = "loading tensors"
COMPILING = "compiling"
CAPTURING_GRAPHS = "capturing graphs"
AUTOTUNING = "autotuning"
WARMING_UP = "warming up"
PROFILING = "profiling"
BUSY = "busy"
INITIALIZING_KV_CACHE = "initializing KV cache"
STARTING_SERVER = "starting server"

# "<desc>:  45%|████▌     | 23/51 [00:03<00:04, 6.1it/s]" and vLLM's shard bar
# "Loading safetensors checkpoint shards:  50% Completed | 2/4 [00:01<00:01,  1.50it/s]".
_TQDM = re.compile(
    r"^(?P<desc>.*?):?\s*(?P<pct>\d{1,3})%\s*(?:\|[^|]*\||Completed\s*\|)\s*"
    r"(?P<done>\d+)/(?P<total>\d+)\b"
)

# A bar's description → a named phase (first match wins); other descriptions are their own
# phase, lowercased.
_BAR_PHASES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"checkpoint shards|loading weights|loading model", re.I), LOADING_WEIGHTS),
    (re.compile(r"capturing cuda graph", re.I), CAPTURING_GRAPHS),
    (re.compile(r"auto ?tun|\btuning\b", re.I), AUTOTUNING),
    (re.compile(r"warm ?up|warming", re.I), WARMING_UP),
    (re.compile(r"compil", re.I), COMPILING),
)

# Order matters where lines could match twice: the first alternative wins.
_LINE_PHASES: tuple[tuple[str, str], ...] = (
    (STARTING_SERVER, r"init engine \(profile, create kv cache, warmup model\) took"),
    (STARTING_SERVER, r"Starting vLLM (?:API )?server|Application startup complete"),
    (STARTING_SERVER, r"server is listening on|^main: model loaded|Started server process"),
    (BUSY, r"No available shared memory broadcast block found"),
    (AUTOTUNING, r"\[Auto ?Tuner\]|Autotuning process|autotune cache"),
    (CAPTURING_GRAPHS, r"Capturing CUDA graph|Graph capturing finished"),
    (
        PROFILING,
        r"memory profiling|Profiling CUDA graph memory|Estimated CUDA graph memory"
        r"|CUDA graph pool memory",
    ),
    (
        COMPILING,
        r"Dynamo bytecode transform time|Compiling a graph for|torch\.compile takes"
        r"|for vLLM's torch\.compile|Cache the graph of compile range"
        r"|Directly load the compiled graph",
    ),
    (WARMING_UP, r"DeepGEMM warmup|kernel warm ?up|Warming up\b"),
    (
        INITIALIZING_KV_CACHE,
        # "GPU/CPU/XPU/... KV cache size", and the CPU build's "Explicitly set (…) GiB for KV cache"
        r"\b[A-Z]{2,4}(?: \+ host)? KV cache size|Available KV cache memory"
        r"|set \([\d.]+/[\d.]+\) GiB for KV cache",
    ),
    (INITIALIZING_KV_CACHE, r"^llama_(?:kv_cache\w*|context|memory_recurrent):"),
    (
        LOADING_WEIGHTS,
        r"Starting to load model|Loading weights took|Model loading took"
        r"|Loading safetensors checkpoint shards",
    ),
    (LOADING_TENSORS, r"^(?:load_tensors|llama_model_loader):"),
)
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
