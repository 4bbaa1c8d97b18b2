"""llama.cpp's llama-server: its receipt lines, loading progress, failure causes, ``/props``
(its context and capabilities), its ``--fit`` notices, and its memory layout for the planner.

Patterns taken from llama.cpp builds 4534, 6512, 6912, 7104 and 7412 and the xllamacpp wheel
2026.10 (the captured logs in ``tests/data/startup-logs/llamacpp-*``; source files named beside
each pattern).

Its slots API (the prompt cache kept across a swap, issue 30) is spoken by ``slots.py``, kept
apart because it brings an HTTP client: this module stays light enough for ``modelswap check``
and ``diagnose`` to import.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from modelswap.backends.adapter import (
    INITIALIZING_KV_CACHE,
    LOADING_TENSORS,
    STARTING_SERVER,
    Ask,
    BaseAdapter,
    Cause,
    Context,
    MemoryModel,
    ModelList,
    Rule,
    Unavailable,
    patterns,
)
from modelswap.backends.metadata import json_object, positive_int, row_context, row_n_ctx_train
from modelswap.backends.numbers import to_float, to_int

if TYPE_CHECKING:
    from modelswap.reported import CacheHazard, CapabilityReport, ModelMetadata

# ---- the receipt -----------------------------------------------------------------------------

_NUM = r"(\d[\d,]*)"
_DEC = r"(-?\d[\d,]*(?:\.\d+)?)"

# src/llama-context.cpp, src/llama-kv-cache.cpp. ``n_ctx = `` only on the context function's
# own assignment line: not the slot line ``new slot, n_ctx = ``, and not the warning
# ``n_ctx_seq (131072) < n_ctx_train (262144)`` (no ``=``).
_CTX_FUNCS = r"\b(?:llama_context|llama_new_context_with_model|llama_init_from_model):\s+"
_N_CTX = re.compile(rf"{_CTX_FUNCS}n_ctx\s*=\s*{_NUM}")
_N_CTX_SEQ = re.compile(rf"{_CTX_FUNCS}n_ctx_(?:per_)?seq\s*=\s*{_NUM}")
_KV_SIZE = re.compile(rf"\bllama_kv_cache\w*:\s+size\s*=\s*{_DEC} MiB \(\s*{_NUM} cells")
# Older builds: "llama_new_context_with_model: KV self size  = 1024.00 MiB, K (f16): ..."
_KV_SELF = re.compile(rf"\bKV self size\s*=\s*{_DEC} MiB")

# ---- loading progress ------------------------------------------------------------------------

_PHASES: tuple[tuple[str, str], ...] = (
    (STARTING_SERVER, r"server is listening on|^main: model loaded"),
    (INITIALIZING_KV_CACHE, r"^llama_(?:kv_cache\w*|context|memory_recurrent):"),
    (LOADING_TENSORS, r"^(?:load_tensors|llama_model_loader):"),
)

# ---- failure causes --------------------------------------------------------------------------

_LLAMA_N_CTX = re.compile(
    r"\b(?:llama_context|llama_new_context_with_model|llama_init_from_model)"
    r":\s+n_ctx\s*=\s*(\d+)"
)


_ALLOCATING = re.compile(r"allocating (\d+(?:\.\d+)?) MiB on device (\d+): cudaMalloc failed")


def kv_cache_alloc(m: re.Match[str], ctx: Context, default: Cause) -> Cause:
    numbers: dict[str, float] = {}
    summary = "llama.cpp could not allocate its KV cache"
    if n_ctx := ctx.find_before(_LLAMA_N_CTX):
        numbers["n_ctx"] = float(n_ctx[1])
        summary += f" for a context of {n_ctx[1]} tokens"
    if alloc := ctx.find_before(_ALLOCATING):
        numbers["alloc_mib"] = float(alloc[1])
        summary += f" ({alloc[1]} MiB on device {alloc[2]})"
    return Cause(
        summary + ": the GPU has too little free memory for it.",
        "lower -c (the context size) or use a smaller KV cache type (-ctk q8_0 -ctv q8_0); "
        "offloading fewer layers (-ngl) also frees GPU memory.",
        numbers,
    )


def model_load_error(m: re.Match[str], ctx: Context, default: Cause) -> Cause:
    if m.group(0).startswith("error loading model: "):
        why = m.string[m.end() :].strip().rstrip(".")
        return Cause(
            f"llama.cpp could not load the model: {why}.",
            "check the model path in cmd and that the file is a complete GGUF this llama.cpp "
            "build supports (a new architecture needs a newer build).",
        )
    return default


def _rules() -> tuple[Rule, ...]:
    from modelswap.backends import causes  # the shared wording and GPU OOM explainer

    return (
        Rule(
            "kv_cache_too_small",
            patterns(
                r"^llama_kv_cache\w*: failed to allocate buffer for kv cache",
                r"failed to allocate buffer for kv cache|llama_kv_cache_init\(\) failed",
            ),
            causes.KV_CACHE_TOO_SMALL,
            "lower --max-model-len or raise --gpu-memory-utilization.",
            kv_cache_alloc,
        ),
        Rule(
            "cuda_oom",
            # ggml's (causes.gpu_out_of_memory reads the allocation from the log).
            patterns(
                r"cudaMalloc failed",
                r"unable to allocate \S+ buffer|failed to allocate \S+ buffer of size",
                r"failed to allocate compute (?:pp )?buffers",
            ),
            causes.OUT_OF_MEMORY,
            causes.OUT_OF_MEMORY_FIX,
            causes.gpu_out_of_memory,
        ),
        Rule(
            "model_load_error",
            patterns(
                r"error loading model: ",
                r"error loading model\b",
                r"failed to load model|exiting due to model loading error",
            ),
            causes.MODEL_LOAD_ERROR,
            causes.MODEL_LOAD_ERROR_FIX,
            model_load_error,
        ),
    )


# ---- --fit notices ---------------------------------------------------------------------------

_FIT_REDUCED = re.compile(
    r"\b\w*_params_fit\w*: context size reduced from (\d[\d,]*) to (\d[\d,]*)"
    r"(?:\s*(?:->|→)\s*need (\d+) MiB less)?"
)
_FIT_FAILED = re.compile(r"\b\w*_params_fit\w*: failed: (.+)")

# ---- /props ----------------------------------------------------------------------------------


def props_context(body: bytes) -> tuple[int | None, int | None]:
    """``(per-slot n_ctx, total_slots)`` from llama.cpp ``/props``."""
    data = json_object(body)
    if data is None:
        return None, None
    settings = data.get("default_generation_settings")
    n_ctx = positive_int(settings.get("n_ctx")) if isinstance(settings, dict) else None
    return n_ctx, positive_int(data.get("total_slots"))


# llama.cpp's /props ``modalities`` key -> the input modality llama-swap lists (``video`` has
# none: llama-swap's modalities are text, audio and image).
_PROPS_MODALITIES = (("vision", "image"), ("audio", "audio"))


def props_capabilities(body: bytes) -> tuple[tuple[str, ...], bool | None] | None:
    """``(input modalities, tools)`` from llama.cpp ``/props``; None if it is no JSON object.

    Text always (llama-server takes it), then ``image`` and ``audio`` where ``modalities``
    says ``vision`` / ``audio`` is true. Tools: ``chat_template_caps`` must say both
    ``supports_tools`` and ``supports_tool_calls`` (a template that renders a tool list and
    reads calls back); a build without ``chat_template_caps`` is asked whether its
    ``chat_template`` mentions ``tools`` (llama-swap's rule); with neither, None (unknown)."""
    data = json_object(body)
    if data is None:
        return None
    modalities = data.get("modalities")
    said = modalities if isinstance(modalities, dict) else {}
    inputs = ("text", *(name for key, name in _PROPS_MODALITIES if said.get(key) is True))
    caps, template = data.get("chat_template_caps"), data.get("chat_template")
    tools: bool | None = None
    if isinstance(caps, dict) and caps:
        tools = caps.get("supports_tools") is True and caps.get("supports_tool_calls") is True
    elif isinstance(template, str):
        tools = "tools" in template
    return inputs, tools


# ---- the prompt cache kept across a swap (issue 38) ---------------------------------------

# print_info (src/llama-model.cpp): the sliding window of the model's SWA layers (0: none) and
# whether any layer uses one; a recurrent or hybrid model allocates a recurrent memory.
_N_SWA = re.compile(r"\bn_swa\s*=\s*(\d+)")
_IS_SWA = re.compile(r"\bis_swa_any\s*=\s*(\d+)")
_RECURRENT = re.compile(r"\bllama_memory_(?:recurrent|hybrid)\b")
_MMPROJ_FLAGS = ("--mmproj", "-mm", "--mmproj-url", "-mmu")
_SWA_FIX = (
    "add --swa-full to its command (the cache then keeps every token of the window's layers: "
    "more memory), or turn promptCache off for it"
)


def _has_flag(argv: Sequence[str], names: Iterable[str]) -> bool:
    wanted = tuple(names)
    return any(a in wanted or a.startswith(tuple(f"{n}=" for n in wanted)) for a in argv)


def cache_hazards(
    argv: Sequence[str], inputs: Sequence[str] | None, lines: Iterable[str]
) -> tuple[CacheHazard, ...]:
    """Why a restored slot of this llama-server may not be reused, from its command line
    (``--mmproj``, ``--swa-full``), its start's log (``n_swa``, ``is_swa_any``, a recurrent
    memory) and what ``/props`` said it takes (``inputs``: an image or audio input means a
    projector is loaded). Empty: nothing known against it. Pure; never raises."""
    from modelswap.reported import CacheHazard

    found: list[CacheHazard] = []
    projector = _has_flag(argv, _MMPROJ_FLAGS) and "--no-mmproj" not in argv
    if projector or any(kind in ("image", "audio") for kind in inputs or ()):
        found.append(
            CacheHazard(
                "mmproj",
                "a multimodal projector is loaded (--mmproj): llama.cpp cannot save a slot "
                "then (ggml-org/llama.cpp#21133)",
                "serve the model without --mmproj where its prompt cache matters (a second "
                "model entry without it), or turn promptCache off for it",
            )
        )
    if "--swa-full" in argv:
        return tuple(found)
    window, any_swa, recurrent = 0, False, False
    for line in lines:
        if "swa" in line:
            if m := _N_SWA.search(line):
                window = int(m[1])
            if m := _IS_SWA.search(line):
                any_swa = m[1] != "0"
        if "llama_memory_" in line and _RECURRENT.search(line):
            recurrent = True
    if window > 0 or any_swa:
        said = f" of {window} tokens" if window else ""
        found.append(
            CacheHazard(
                "swa",
                f"a sliding-window model{said} started without --swa-full: a restored slot "
                "keeps only the window, so its prefix is evaluated again "
                "(ggml-org/llama.cpp#25913)",
                _SWA_FIX,
            )
        )
    if recurrent:
        found.append(
            CacheHazard(
                "hybrid",
                "a hybrid (recurrent) model started without --swa-full: llama.cpp reuses no "
                "prefix of a restored recurrent state (ggml-org/llama.cpp#28194)",
                _SWA_FIX,
            )
        )
    return tuple(found)


# ---- the planner -----------------------------------------------------------------------------

MIB = 1024**2
# The compute buffer llama.cpp logged for a 27B hybrid, 495 MiB at a 200k context and again
# at 4 × 131,072 cells (llamacpp-success.log). docs/backends.md §19.
MEMORY = MemoryModel(
    engine="llamacpp",
    paged=False,
    kv_dtype="f16",
    utilization=1.0,
    allowance_bytes=495 * MIB,
    allowance_source="default: the 495 MiB compute buffer llama.cpp logged for a 27B at 200k",
    state_f32=True,
    seqs=(1, 1),
)


class LlamaCppAdapter(BaseAdapter):
    name = "llamacpp"
    owned_by = "llamacpp"
    command_words = ("llama",)
    memory = MEMORY
    saves_slots = True
    limit_flags = (
        ("-c", "ctx_size"),
        ("--ctx-size", "ctx_size"),
        ("-np", "parallel"),
        ("--parallel", "parallel"),
    )
    progress_phases = _PHASES

    def failure_rules(self) -> tuple[Rule, ...]:
        return _rules()

    def recognises(self, argv: Sequence[str]) -> bool:
        return any(
            os.path.basename(arg) in ("llama-server", "llama-server.exe")
            or arg == "modelswap.launchers.llamacpp"
            for arg in argv
        )

    def read_receipt(self, text: str, found: dict[str, Any]) -> None:
        if "n_ctx" not in text and "MiB" not in text:
            return
        if m := _N_CTX.search(text):
            found["n_ctx"] = to_int(m[1])
        if m := _N_CTX_SEQ.search(text):
            found["n_ctx_seq"] = to_int(m[1])
        if m := _KV_SIZE.search(text):
            found["kv_cache_mib"] = to_float(m[1])
            found["kv_cells"] = to_int(m[2])
        elif m := _KV_SELF.search(text):
            found["kv_cache_mib"] = to_float(m[1])

    async def read_metadata(
        self, ask: Ask, upstream_name: str, models: ModelList
    ) -> ModelMetadata | None:
        """``/props`` first (per-slot n_ctx, total_slots, input modalities, tools);
        ``/v1/models`` ``meta.n_ctx`` else."""
        from modelswap.reported import ModelMetadata

        try:
            row = await models.row()
        except Unavailable:
            row = None  # llama.cpp still has /props
        n_ctx, slots, caps = None, None, None
        try:
            props = await ask("/props")
            n_ctx, slots = props_context(props)
            caps = props_capabilities(props)
        except Unavailable:
            if row is None:
                raise  # nothing to fall back on: report why
        n_ctx_train = row_n_ctx_train(row) if row is not None else None
        if n_ctx is not None:
            inputs, tools = caps if caps is not None else (None, None)
            return ModelMetadata(
                self.name, n_ctx, n_ctx_train, slots, "/props", inputs=inputs, tools=tools
            )
        if row is not None:
            fallback = row_context(row)
            if fallback is not None:
                return ModelMetadata(self.name, fallback, n_ctx_train, slots, "/v1/models")
        return None

    def capability_report(self, meta: ModelMetadata) -> CapabilityReport | None:
        """Its ``/props`` whole (text output: llama-server writes nothing else); without
        ``/props``, only the context of ``/v1/models``."""
        from modelswap.reported import CapabilityReport

        outputs = ("text",) if meta.inputs is not None else None
        return CapabilityReport(
            self.name,
            meta.source,
            meta.inputs,
            outputs,
            meta.tools,
            meta.context_length,
            meta.total_slots,
        )

    def cache_hazards(
        self, argv: Sequence[str], meta: ModelMetadata | None, lines: Iterable[str]
    ) -> tuple[CacheHazard, ...]:
        return cache_hazards(argv, meta.inputs if meta is not None else None, lines)

    def start_notices(self, lines: Iterable[str]) -> list[str]:
        """Its ``--fit`` changes (not failures: the server still starts, but with parameters
        the user did not ask for)."""
        from modelswap.backends.logtext import logical_lines, message  # reads a log: not check

        notices: list[str] = []
        for line in logical_lines(lines):
            text = message(line)
            if "_params_fit" not in text:
                continue
            if m := _FIT_REDUCED.search(text):
                saved = f", saving {m[3]} MiB" if m[3] else ""
                notices.append(
                    f"llama.cpp's --fit reduced the context from {to_int(m[1])} to "
                    f"{to_int(m[2])} tokens to fit in free device memory{saved}; set -c "
                    "explicitly (or -fit off) to keep the context you asked for."
                )
            elif m := _FIT_FAILED.search(text):
                notices.append(
                    f"llama.cpp's --fit could not fit the model in free device memory: "
                    f"{m[1].strip().rstrip('.')}."
                )
        return notices
