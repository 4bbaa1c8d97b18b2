"""The backend adapters, and which one speaks for a model.

A model's adapter is the one its config names (``backend: vllm``); with ``backend: auto``, the
one that recognises its command line (before a start: the tool-choice preflight) or whose
``owned_by`` its ``/v1/models`` row carries (after: the probe); else ``generic``. The engines
that read every backend's text (the log reader, the diagnosis) ask all adapters, in this order.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from modelswap.backends.adapter import BackendAdapter, MemoryModel, Rule
from modelswap.backends.generic import GenericAdapter
from modelswap.backends.llamacpp import LlamaCppAdapter
from modelswap.backends.ollama import OllamaAdapter
from modelswap.backends.sglang import SglangAdapter
from modelswap.backends.vllm import VllmAdapter

if TYPE_CHECKING:
    from modelswap.reported import CacheHazard, CapabilityReport, ModelMetadata

GENERIC: BackendAdapter = GenericAdapter()
ADAPTERS: tuple[BackendAdapter, ...] = (
    VllmAdapter(),
    SglangAdapter(),
    LlamaCppAdapter(),
    OllamaAdapter(),
    GENERIC,
)
_BY_NAME = {adapter.name: adapter for adapter in ADAPTERS}

# The diagnosis engine's root-cause order (docs/backends.md §9): a cause that explains a later
# one comes first. Each adapter's rules of one code are tried in the order of ADAPTERS.
ROOT_CAUSE_ORDER = (
    "utilization_guard",
    "kv_cache_too_small",
    "mamba_cache_blocks",
    "no_kv_cache_memory",
    "cuda_oom",
    "profiling_race",
    "port_in_use",
    "model_load_error",
    "cpu_kv_cache_space",
)


def named(backend: str) -> BackendAdapter:
    """The adapter a config's ``backend:`` names; ``generic`` for ``auto`` (and any other)."""
    return _BY_NAME.get(backend, GENERIC)


def configured(backend: str) -> BackendAdapter | None:
    """The adapter a config's ``backend:`` names, None for ``auto`` and ``generic``: then the
    backend itself says what it is."""
    adapter = _BY_NAME.get(backend)
    return None if adapter is None or adapter is GENERIC else adapter


def recognised(argv: Sequence[str]) -> BackendAdapter:
    """The adapter whose command ``argv`` runs; ``generic`` when none recognises it."""
    return next((a for a in ADAPTERS if a.recognises(argv)), GENERIC)


def for_command(backend: str, argv: Sequence[str]) -> BackendAdapter:
    """A model's adapter before it runs: its config's ``backend:``, or for ``auto`` the one
    that recognises its command line."""
    return recognised(argv) if backend == "auto" else named(backend)


def owning(owned_by: object) -> BackendAdapter | None:
    """The adapter whose ``/v1/models`` rows carry this ``owned_by``."""
    return next((a for a in ADAPTERS if a.owned_by is not None and a.owned_by == owned_by), None)


def failure_rules() -> tuple[Rule, ...]:
    """Every adapter's failure rules, in root-cause order."""
    rules = [rule for adapter in ADAPTERS for rule in adapter.failure_rules()]
    return tuple(sorted(rules, key=lambda rule: ROOT_CAUSE_ORDER.index(rule.code)))


def progress_phases() -> tuple[tuple[str, str], ...]:
    return tuple(phase for adapter in ADAPTERS for phase in adapter.progress_phases)


def limit_flags() -> dict[str, str]:
    """Every adapter's flags that set a configured limit (flag → ``ConfiguredLimits`` field)."""
    return {flag: key for adapter in ADAPTERS for flag, key in adapter.limit_flags}


def progress_bars() -> tuple[tuple[str, str], ...]:
    return tuple(bar for adapter in ADAPTERS for bar in adapter.progress_bars)


def wrapper_lines() -> tuple[str, ...]:
    return tuple(line for adapter in ADAPTERS for line in adapter.wrapper_lines)


def capability_report(meta: ModelMetadata) -> CapabilityReport | None:
    """What of a probe's report its adapter keeps as the model's capabilities."""
    return named(meta.backend).capability_report(meta)


def why_no_slots(backend: str, argv: Sequence[str], reported: ModelMetadata | None) -> str | None:
    """Why a model cannot keep its prompt cache across a swap through llama.cpp's slots API,
    or None when it may: its config's ``backend:`` or its command names a kind without one
    (vLLM and SGLang keep theirs through their own KV connectors: docs/backends.md §21), or
    its probe says it is another server. A generic command whose probe has not answered yet
    may be llama-server: it is asked, and a ``GET /slots`` it does not serve is remembered
    (``supervisor/promptcache.py``)."""
    adapter = for_command(backend, argv)
    if adapter.saves_slots is False:
        return f"a {adapter.name} backend has no slots API to save its prompt cache"
    if reported is not None and named(reported.backend).saves_slots is not True:
        return f"its server says it is {reported.backend}, which has no slots API"
    return None


def cache_hazards(
    backend: str, argv: Sequence[str], reported: ModelMetadata | None, lines: Iterable[str]
) -> tuple[CacheHazard, ...]:
    """Why the model's restored prompt cache may not be reused (its adapter's reading)."""
    name = reported.backend if reported is not None else for_command(backend, argv).name
    return named(name).cache_hazards(argv, reported, lines)


# ---- the planner -----------------------------------------------------------------------------

MEMORY_MODELS: dict[str, MemoryModel] = {
    a.memory.engine: a.memory for a in ADAPTERS if a.memory is not None
}


def memory_model(engine: str) -> MemoryModel:
    """The planner's memory model named ``engine``; ValueError for an unknown name."""
    try:
        return MEMORY_MODELS[engine]
    except KeyError:
        raise ValueError(f"engine must be one of {', '.join(MEMORY_MODELS)}") from None


def memory_model_for(argv: Sequence[str], path: Path) -> MemoryModel:
    """The memory model of the server a configured command line starts: the first adapter
    whose word is in its programs' names, else llama.cpp's for a GGUF, else vLLM's."""
    text = " ".join(os.path.basename(a) for a in argv).lower()
    for adapter in ADAPTERS:
        if adapter.memory is not None and any(w in text for w in adapter.command_words):
            return adapter.memory
    return default_memory(gguf=path.suffix.lower() == ".gguf")


def default_memory(*, gguf: bool) -> MemoryModel:
    """A model file's default: per-token cells (llama.cpp's) for a GGUF, else paged blocks
    (vLLM's)."""
    return next(m for m in MEMORY_MODELS.values() if m.paged is not gguf)
