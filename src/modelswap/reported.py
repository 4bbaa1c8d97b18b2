"""What a running backend reported about itself: its metadata, its allocator's receipt (the one
meaning of "receipt" in this tree), and the progress of its start. Plain data (stdlib only), so
``supervisor`` can hold what ``backends`` parses without importing it."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass(frozen=True, slots=True)
class ModelMetadata:
    """Read back from the backend's own API after it became ready (never from the config).

    ``context_length`` is what one request can use: vLLM/SGLang ``max_model_len``, llama.cpp's
    per-slot ``n_ctx``, Ollama's ``context_length``. ``source`` names the endpoint it came from.
    ``inputs`` and ``tools``: what llama.cpp's ``/props`` says the model takes and whether its
    chat template carries tools (None: not said); kept as its capabilities (issue 30), and
    left out of equality, which compares the context receipt.
    """

    backend: str
    context_length: int | None = None
    n_ctx_train: int | None = None
    total_slots: int | None = None
    source: str | None = None
    inputs: tuple[str, ...] | None = field(default=None, compare=False)
    tools: bool | None = field(default=None, compare=False)

    def as_dict(self) -> dict[str, object]:
        return {k: v for k, v in asdict(self).items() if v is not None}


@dataclass(frozen=True, slots=True)
class CapacityReceipt:
    """The allocator's receipt, as the backend printed it at startup. Absent values were not
    printed (and are omitted from :meth:`as_dict`)."""

    # vLLM
    kv_cache_tokens: int | None = None
    max_concurrency: float | None = None
    concurrency_tokens_per_request: int | None = None
    kv_cache_gib: float | None = None
    weights_gib: float | None = None
    # llama.cpp
    n_ctx: int | None = None
    n_ctx_seq: int | None = None
    kv_cache_mib: float | None = None
    kv_cells: int | None = None

    def as_dict(self) -> dict[str, object]:
        return {k: v for k, v in asdict(self).items() if v is not None}


@dataclass(frozen=True, slots=True)
class Progress:
    """One recognised sign of life during a start: a phase and, where a bar gives it, a count."""

    phase: str
    done: int | None = None
    total: int | None = None

    @property
    def fraction(self) -> float | None:
        if self.done is None or not self.total:
            return None
        return max(0.0, min(1.0, self.done / self.total))

    def label(self) -> str:
        """``"autotuning 7/16"`` or ``"loading weights"``."""
        if self.done is not None and self.total:
            return f"{self.phase} {self.done}/{self.total}"
        return self.phase


NO_SLOTS_API = "the server has no slots API"
"""How a ``GET /slots`` that the server does not serve (404, 405, 501) begins its error: not
llama.cpp, or started with ``--no-slots`` (``backends/slots.py``)."""


@dataclass(frozen=True, slots=True)
class SlotState:
    """One llama.cpp slot as ``GET /slots`` lists it (issue 30: the prompt cache kept across a
    swap). ``tokens``: what its cache holds, None when the server does not say (a slot no task
    has used since the start, or a restore); ``task``: its last task's id (larger: more recent).
    """

    id: int
    processing: bool = False
    tokens: int | None = None
    task: int | None = None


@dataclass(frozen=True, slots=True)
class SlotFileAction:
    """What ``POST /slots/{id}?action=save|restore`` answered: tokens saved or restored
    (``n_saved``/``n_restored``), bytes written or read (``n_written``/``n_read``), the server's
    own milliseconds; ``error`` (the rest then 0) when it refused or could not be asked."""

    slot: int
    tokens: int = 0
    bytes: int = 0
    ms: float | None = None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class CapabilityReport:
    """What of a probe's :class:`ModelMetadata` is kept as the model's capabilities (the
    backend's adapter decides): the input and output modalities, whether it calls tools, its
    context and slots. None: not said."""

    backend: str
    endpoint: str | None
    inputs: tuple[str, ...] | None = None
    outputs: tuple[str, ...] | None = None
    tools: bool | None = None
    context: int | None = None
    total_slots: int | None = None


@dataclass(frozen=True, slots=True)
class CacheHazard:
    """A known reason why a model's prompt cache kept across a swap may not work, read from
    its command line, its start's log and ``/props`` (issue 38): ``code`` (``mmproj``,
    ``swa``, ``hybrid``, ``salted``), the sentence that says why, and the fix."""

    code: str
    reason: str
    fix: str

    def as_dict(self) -> dict[str, str]:
        return {"code": self.code, "reason": self.reason, "fix": self.fix}
