"""What one backend kind knows, behind one protocol: :class:`BackendAdapter`.

Each kind is one module beside this one (``vllm``, ``llamacpp``, ``sglang``, ``ollama``,
``generic``); :mod:`modelswap.backends.registry` lists them and picks the one for a model. The
shared engines ask every adapter (or the model's own) and keep no backend's text themselves:

* the log reader (``capacity``, ``progress``): :attr:`~BackendAdapter.progress_phases`,
  :attr:`~BackendAdapter.progress_bars` and :meth:`~BackendAdapter.read_receipt`, the
  allocator's receipt;
* the diagnosis engine (``diagnose``): :meth:`~BackendAdapter.failure_rules`, each a known
  failure cause with its fix, tried in the engine's root-cause order, and
  :attr:`~BackendAdapter.wrapper_lines`, never taken for a cause;
* the metadata probe (``probe``, its bounded reader): :meth:`~BackendAdapter.read_metadata`
  and :meth:`~BackendAdapter.capability_report`;
* the hints (``hints``): :meth:`~BackendAdapter.error_hint`,
  :meth:`~BackendAdapter.tool_choice_preflight`, :meth:`~BackendAdapter.command_warning`,
  :meth:`~BackendAdapter.start_notices`;
* the planner: :attr:`~BackendAdapter.memory`; the prompt cache kept across a swap:
  :attr:`~BackendAdapter.saves_slots`.

The adapter modules import nothing heavy at load (``modelswap check`` and ``diagnose`` load
them all): what needs the log helpers, the causes or the reported data imports it where used.

Adding a backend is one module (a :class:`BaseAdapter` subclass), its log corpus
(``tests/data/startup-logs``) and its tests; then one line in the registry.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from modelswap.backends.metadata import (
    model_rows,
    positive_int,
    row_context,
    row_n_ctx_train,
    select_row,
)

if TYPE_CHECKING:  # plain data; at run time only where a probe builds it
    from modelswap.reported import CacheHazard, CapabilityReport, ModelMetadata

# The phases a start goes through, as progress names them (docs/backends.md §9).
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


# ---- failure causes --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Cause:
    summary: str
    fix: str
    numbers: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Context:
    """The log's messages (prefixes and headers stripped) and the index of the matched one;
    ``phase_before`` names what the backend was last doing before a given index."""

    messages: Sequence[str]
    index: int
    phase_before: Callable[[Sequence[str]], str | None] = lambda _messages: None

    def find_before(self, pattern: re.Pattern[str]) -> re.Match[str] | None:
        """The latest match of ``pattern`` at or before the matched line."""
        for i in range(self.index, -1, -1):
            if m := pattern.search(self.messages[i]):
                return m
        return None

    def find_any(self, pattern: re.Pattern[str]) -> re.Match[str] | None:
        """A match on the matched line itself, else the latest one anywhere in the log."""
        if m := pattern.search(self.messages[self.index]):
            return m
        for text in reversed(self.messages):
            if m := pattern.search(text):
                return m
        return None

    def phase(self) -> str | None:
        """What the backend was last doing before the matched line, e.g. "capturing graphs"."""
        return self.phase_before(self.messages[: self.index])


Explain = Callable[[re.Match[str], Context, Cause], Cause]


@dataclass(frozen=True, slots=True)
class Rule:
    """A known failure: ``patterns`` in priority order (the root-cause line first, wrapper
    lines last). ``explain`` (when set) turns the match into a summary, fix and numbers.
    Rules of several adapters may share a ``code``: the engine tries them in its root-cause
    order of codes, then in the registry's order of adapters."""

    code: str
    patterns: tuple[re.Pattern[str], ...]
    summary: str
    fix: str
    explain: Explain | None = None


def patterns(*texts: str) -> tuple[re.Pattern[str], ...]:
    return tuple(re.compile(p, re.I) for p in texts)


# ---- the metadata probe ----------------------------------------------------------------------


class Unavailable(Exception):
    """An endpoint did not answer usefully (status, size, connection): the metadata is
    unavailable, and this says why."""


Ask = Callable[[str], Awaitable[bytes]]
"""``GET`` a path of the backend (``/props``) through the probe's bounded reader: the body of a
200 answer; raises :class:`Unavailable` (or aiohttp's errors) otherwise."""


class ModelList:
    """``/v1/models``, asked at most once per probe, and the row of the model we serve."""

    def __init__(self, ask: Ask, upstream_name: str) -> None:
        self._ask = ask
        self._name = upstream_name
        self._row: Mapping[str, Any] | None = None
        self._asked = False

    async def row(self) -> Mapping[str, Any] | None:
        """The row whose ``id`` is the name we send upstream, else the only row, else None;
        raises :class:`Unavailable` when ``/v1/models`` does not answer."""
        if not self._asked:
            self._asked = True
            self._row = select_row(model_rows(await self._ask("/v1/models")), self._name)
        return self._row

    async def max_model_len(self, backend: str) -> ModelMetadata | None:
        """The row's ``max_model_len`` as the context (only that: it is what one request can
        use), as vLLM's and SGLang's rows carry it; None without one."""
        from modelswap.reported import ModelMetadata

        row = await self.row()
        context = positive_int(row.get("max_model_len")) if row is not None else None
        if row is None or context is None:
            return None
        return ModelMetadata(backend, context, row_n_ctx_train(row), source="/v1/models")


# ---- the planner -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MemoryModel:
    """How a backend lays out GPU memory, for the fit planner (``modelswap plan``).

    ``engine``: the planner's name for this model (``--engine``, ``PlanInputs.engine``);
    ``paged``: KV in fixed-size blocks shared by all sequences (vLLM's geometry), else one KV
    cell per token of each slot (llama.cpp); ``kv_dtype``: the default KV dtype (None: the
    model's own); ``utilization``: the default share of the GPU; ``allowance_bytes`` and its
    source: what is neither weights nor KV; ``state_f32``: linear-attention state kept in f32
    (else conv state in the model dtype, SSM state in its own); ``seqs``: default sequences
    at once (below, at or above 70 GiB of GPU memory)."""

    engine: str
    paged: bool
    kv_dtype: str | None
    utilization: float
    allowance_bytes: int
    allowance_source: str
    state_f32: bool
    seqs: tuple[int, int]


# ---- the protocol ----------------------------------------------------------------------------


class BackendAdapter(Protocol):
    """What modelswap knows about one kind of backend."""

    @property
    def name(self) -> str:
        """The config's ``backend:`` value; ``ModelMetadata.backend`` when this kind answered."""

    @property
    def owned_by(self) -> str | None:
        """The ``owned_by`` of its ``/v1/models`` rows, which names it when ``backend: auto``."""

    @property
    def command_words(self) -> tuple[str, ...]:
        """Words in its command's program names that the planner takes to mean this kind."""

    @property
    def memory(self) -> MemoryModel | None:
        """Its memory layout for the planner; None: the planner does not model it."""

    @property
    def saves_slots(self) -> bool | None:
        """Whether it can save its prompt cache across a swap (llama.cpp's slots API); None:
        only its metadata can say (a generic server may be llama-server)."""

    @property
    def progress_phases(self) -> tuple[tuple[str, str], ...]:
        """``(phase, regex)``: the lines that show its loading progress, in priority order."""

    @property
    def limit_flags(self) -> tuple[tuple[str, str], ...]:
        """``(flag, field)``: the flags of its command line that set a limit (``-c`` →
        ``ctx_size``): what the model was promised, shown as ``configured``
        (``backends/configured.py``)."""

    @property
    def progress_bars(self) -> tuple[tuple[str, str], ...]:
        """``(phase, regex)``: the descriptions of its progress bars that name a phase."""

    @property
    def wrapper_lines(self) -> tuple[str, ...]:
        """Regexes of its lines that only point to a cause printed before them: never the
        evidence of a failure."""

    def failure_rules(self) -> tuple[Rule, ...]:
        """Its known failure causes, each with the fix (compiled when the diagnosis first
        needs them: ``modelswap check`` imports the adapters and never diagnoses)."""

    def recognises(self, argv: Sequence[str]) -> bool:
        """Whether ``argv`` starts this backend (``backend: auto``)."""

    def read_receipt(self, text: str, found: dict[str, Any]) -> None:
        """Put into ``found`` the allocator's figures one log message states (the last one
        wins: a later line overwrites)."""

    async def read_metadata(
        self, ask: Ask, upstream_name: str, models: ModelList
    ) -> ModelMetadata | None:
        """Ask the ready backend what it serves (its context, and what it says of its
        capabilities); None when it says nothing usable. Raises :class:`Unavailable`."""

    def capability_report(self, meta: ModelMetadata) -> CapabilityReport | None:
        """What of its metadata is kept as the model's capabilities; None: nothing."""

    def error_hint(self, status: int, body: bytes) -> str | None:
        """A one-line fix for an error answer it is known to give, else None."""

    def tool_choice_preflight(self, argv: Sequence[str]) -> str | None:
        """Why a request that lets the model choose its tools would fail on ``argv`` before
        the backend is even started (the hint), else None."""

    def command_warning(self, argv: Sequence[str]) -> str | None:
        """For ``modelswap check``: what ``argv`` lacks for tool calls, else None."""

    def start_notices(self, lines: Iterable[str]) -> list[str]:
        """Sentences on changes it made to what was asked (not failures) in a start's log."""

    def cache_hazards(
        self, argv: Sequence[str], meta: ModelMetadata | None, lines: Iterable[str]
    ) -> tuple[CacheHazard, ...]:
        """Why its prompt cache kept across a swap may not work (its command line, its
        metadata, its start's log); empty: nothing known against it."""


class BaseAdapter:
    """The defaults: a backend that says nothing in particular (the generic server)."""

    name = "generic"
    owned_by: str | None = None
    command_words: tuple[str, ...] = ()
    memory: MemoryModel | None = None
    saves_slots: bool | None = False
    progress_phases: tuple[tuple[str, str], ...] = ()
    limit_flags: tuple[tuple[str, str], ...] = ()
    progress_bars: tuple[tuple[str, str], ...] = ()
    wrapper_lines: tuple[str, ...] = ()

    def failure_rules(self) -> tuple[Rule, ...]:
        return ()

    def recognises(self, argv: Sequence[str]) -> bool:
        return False

    def read_receipt(self, text: str, found: dict[str, Any]) -> None:
        return None

    async def read_metadata(
        self, ask: Ask, upstream_name: str, models: ModelList
    ) -> ModelMetadata | None:
        """Any OpenAI-style server: its row's ``max_model_len``, ``context_length`` or
        ``meta.n_ctx``."""
        from modelswap.reported import ModelMetadata

        row = await models.row()
        context = row_context(row) if row is not None else None
        if row is None or context is None:
            return None
        return ModelMetadata(self.name, context, row_n_ctx_train(row), source="/v1/models")

    def capability_report(self, meta: ModelMetadata) -> CapabilityReport | None:
        """Its context, when its ``/v1/models`` row said one: remembered after an unload as
        llama.cpp's and vLLM's are (issue 38). Nothing of modalities or tools: not said."""
        from modelswap.reported import CapabilityReport

        if meta.context_length is None:
            return None
        return CapabilityReport(self.name, meta.source, context=meta.context_length)

    def error_hint(self, status: int, body: bytes) -> str | None:
        return None

    def tool_choice_preflight(self, argv: Sequence[str]) -> str | None:
        return None

    def command_warning(self, argv: Sequence[str]) -> str | None:
        return None

    def start_notices(self, lines: Iterable[str]) -> list[str]:
        return []

    def cache_hazards(
        self, argv: Sequence[str], meta: ModelMetadata | None, lines: Iterable[str]
    ) -> tuple[CacheHazard, ...]:
        return ()
