"""The words and numbers of each known failure: one explainer per ``diagnose.RULES`` entry.

An explainer gets the rule's match, the log around it and the rule's default wording, and
returns the :class:`Cause` a user reads: one or two plain sentences with the numbers the
backend printed, and the fix (with the value to use, where the backend gave one).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from modelswap.backends.logtext import gib, to_float, to_int
from modelswap.backends.progress import last_progress

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


@dataclass(frozen=True, slots=True)
class Cause:
    summary: str
    fix: str
    numbers: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Context:
    """The log's messages (prefixes and headers stripped) and the index of the matched one."""

    messages: Sequence[str]
    index: int

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
        progress = last_progress(self.messages[: self.index])
        return None if progress is None else progress.phase


Explain = Callable[[re.Match[str], Context, Cause], Cause]


def _round_down(value: float) -> float:
    return math.floor(value * 100) / 100


def utilization_guard(m: re.Match[str], ctx: Context, default: Cause) -> Cause:
    g = m.groupdict()
    if not g.get("free"):
        return default
    free, total = to_float(g["free"]), to_float(g["total"])
    util, requested = to_float(g["util"]), to_float(g["requested"])
    where = f"on {g['device']}" if g.get("device") else "on the GPU"
    at_most = _round_down(free / total) if total > 0 else 0.0
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


_LLAMA_N_CTX = re.compile(
    r"\b(?:llama_context|llama_new_context_with_model|llama_init_from_model)"
    r":\s+n_ctx\s*=\s*(\d+)"
)
_ALLOCATING = re.compile(r"allocating (\d+(?:\.\d+)?) MiB on device (\d+): cudaMalloc failed")


def kv_cache_too_small(m: re.Match[str], ctx: Context, default: Cause) -> Cause:
    g = m.groupdict()
    if g.get("needed"):
        return _kv_vllm(g, default)
    if g.get("tokens"):
        max_len, tokens = to_int(g["max_len"]), to_int(g["tokens"])
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
    return _kv_llamacpp(ctx)


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


def _kv_vllm(g: dict[str, str | None], default: Cause) -> Cause:
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


def _kv_llamacpp(ctx: Context) -> Cause:
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


def mamba_cache_blocks(m: re.Match[str], ctx: Context, default: Cause) -> Cause:
    seqs, blocks = to_int(m["seqs"]), to_int(m["blocks"])
    return Cause(
        f"max_num_seqs is {seqs} but only {blocks} Mamba cache blocks fit in GPU memory, and "
        "every running sequence needs one.",
        f"restart with --max-num-seqs {blocks}, or raise --gpu-memory-utilization.",
        {"max_num_seqs": float(seqs), "blocks": float(blocks)},
    )


_WEIGHTS = re.compile(r"Model loading took (\d+(?:\.\d+)?) ?GiB")
_KV_GIB = re.compile(r"Available KV cache memory:\s*(-?\d+(?:\.\d+)?) GiB")


def no_kv_cache_memory(m: re.Match[str], ctx: Context, default: Cause) -> Cause:
    numbers: dict[str, float] = {}
    summary = "After loading the weights"
    if w := ctx.find_before(_WEIGHTS):
        numbers["weights_gib"] = float(w[1])
        summary += f" ({w[1]} GiB)"
    summary += " and profiling, no GPU memory is left for the KV cache"
    if kv := ctx.find_before(_KV_GIB):
        numbers["kv_cache_gib"] = float(kv[1])
        summary += f" ({kv[1]} GiB available)"
    return Cause(summary + ".", default.fix, numbers)


_TRIED = re.compile(r"Tried to allocate (\d+(?:\.\d+)?) ([KMG]iB)")
_CAPACITY = re.compile(
    r"total capacity of (\d+(?:\.\d+)?) ([KMG]iB) of which (\d+(?:\.\d+)?) ([KMG]iB) is free"
)
_BUFFER = re.compile(r"buffer of size (\d+)")
_GGML = re.compile(r"^(?:llama|ggml|load_tensors|alloc_tensor_range|graph_reserve|common)_?\w*:")


def cuda_oom(m: re.Match[str], ctx: Context, default: Cause) -> Cause:
    numbers: dict[str, float] = {}
    detail: list[str] = []
    if t := ctx.find_any(_TRIED):
        numbers["tried_mib"] = round(gib(float(t[1]), t[2]) * 1024, 2)
        detail.append(f"tried to allocate {t[1]} {t[2]}")
    if c := ctx.find_any(_CAPACITY):
        numbers["gpu_total_gib"] = round(gib(float(c[1]), c[2]), 2)
        numbers["gpu_free_mib"] = round(gib(float(c[3]), c[4]) * 1024, 2)
        detail.append(f"{c[3]} {c[4]} of {c[1]} {c[2]} was free")
    vllm_load = "not enough GPU memory" in m.group(0)
    # "cudaMalloc failed", "unable to allocate CUDA0 buffer" are ggml's; "CUDA error: out of
    # memory" is either, so it counts as ggml's only in a llama.cpp log.
    ggml = not vllm_load and (
        "out of memory" not in m.group(0).lower()
        or any(_GGML.search(text) for text in ctx.messages)
    )
    phase = "loading weights" if vllm_load else ctx.phase()
    if ggml:
        if a := ctx.find_any(_ALLOCATING):
            numbers["alloc_mib"] = float(a[1])
            detail.insert(0, f"{a[1]} MiB on device {a[2]}")
        elif b := ctx.find_any(_BUFFER):
            numbers["alloc_mib"] = round(int(b[1]) / 2**20, 2)
            detail.insert(0, f"{numbers['alloc_mib']:.2f} MiB")
        fix = (
            "offload fewer layers (-ngl), lower the context (-c) or use a smaller "
            "quantization, or free GPU memory used by other processes."
        )
    elif phase == "capturing graphs":
        fix = (
            "lower --gpu-memory-utilization a little, or start with --enforce-eager to skip "
            "CUDA-graph capture."
        )
    else:
        fix = (
            "lower --gpu-memory-utilization or --max-model-len, use --quantization or more "
            "GPUs (--tensor-parallel-size), or free GPU memory used by other processes."
        )
    summary = "The GPU ran out of memory" + (f" while {phase}" if phase else "")
    summary += f" ({'; '.join(detail)})." if detail else "."
    return Cause(summary, fix, numbers)


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


_PORT = re.compile(r"\bport:?\s*(\d{1,5})\b|\('[^']*',\s*(\d{1,5})\)")


def port_in_use(m: re.Match[str], ctx: Context, default: Cause) -> Cause:
    p = _PORT.search(m.string)
    if p is None:
        return default
    port = p[1] or p[2]
    return Cause(
        f"The backend could not bind port {port}: another process is listening there.",
        default.fix,
        {"port": float(port)},
    )


def model_load_error(m: re.Match[str], ctx: Context, default: Cause) -> Cause:
    text = m.string
    if m.group(0).startswith("error loading model: "):
        why = text[m.end() :].strip().rstrip(".")
        return Cause(
            f"llama.cpp could not load the model: {why}.",
            "check the model path in cmd and that the file is a complete GGUF this llama.cpp "
            "build supports (a new architecture needs a newer build).",
        )
    g = m.groupdict()
    if "path" in g:  # the HF_MISSING pattern
        name = g.get("name") or g.get("path")
        which = f" {name}" if name else ""
        return Cause(
            f"vLLM could not find the model{which}: it is neither a local directory with a "
            "config.json nor a Hugging Face model id it can access.",
            "check --model (the path or id) in cmd; for a gated or private model set HF_TOKEN.",
        )
    return default
