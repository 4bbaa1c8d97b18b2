"""What several backends share in their failure causes: the wording of the causes more than
one adapter knows (``kv_cache_too_small``, ``cuda_oom``, ``model_load_error``), and the
explainer of a GPU out-of-memory, which reads from the log whether torch (vLLM, SGLang) or ggml
(llama.cpp) said it.

An explainer gets the rule's match, the log around it and the rule's default wording, and
returns the :class:`Cause` a user reads: one or two plain sentences with the numbers the
backend printed, and the fix (with the value to use, where the backend gave one). Each
backend's own explainers live in its adapter module.
"""

from __future__ import annotations

import re

from modelswap.backends.adapter import Cause, Context, Explain
from modelswap.backends.numbers import gib, round_down

__all__ = [
    "ALLOCATING",
    "KV_CACHE_TOO_SMALL",
    "MODEL_LOAD_ERROR",
    "MODEL_LOAD_ERROR_FIX",
    "OUT_OF_MEMORY",
    "OUT_OF_MEMORY_CODES",
    "OUT_OF_MEMORY_FIX",
    "Cause",
    "Context",
    "Explain",
    "gpu_out_of_memory",
    "round_down",
]

# The diagnoses that mean "it does not fit": a start failing with one of these answers with the
# load dry run's prediction and fixes (issue 39).
OUT_OF_MEMORY_CODES = frozenset(
    {
        "cuda_oom",
        "kv_cache_too_small",
        "no_kv_cache_memory",
        "utilization_guard",
        "mamba_cache_blocks",
        "cpu_kv_cache_space",
    }
)

KV_CACHE_TOO_SMALL = "the KV cache does not fit in the memory left for it."
OUT_OF_MEMORY = "the GPU ran out of memory."
OUT_OF_MEMORY_FIX = (
    "use a smaller quantization or context, or free GPU memory used by other processes."
)
MODEL_LOAD_ERROR = "the backend could not load the model."
MODEL_LOAD_ERROR_FIX = (
    "check the model path in cmd and that the file is a complete, supported model."
)


ALLOCATING = re.compile(r"allocating (\d+(?:\.\d+)?) MiB on device (\d+): cudaMalloc failed")


_TRIED = re.compile(r"Tried to allocate (\d+(?:\.\d+)?) ([KMG]iB)")
_CAPACITY = re.compile(
    r"total capacity of (\d+(?:\.\d+)?) ([KMG]iB) of which (\d+(?:\.\d+)?) ([KMG]iB) is free"
)
_BUFFER = re.compile(r"buffer of size (\d+)")
_GGML = re.compile(r"^(?:llama|ggml|load_tensors|alloc_tensor_range|graph_reserve|common)_?\w*:")


def gpu_out_of_memory(m: re.Match[str], ctx: Context, default: Cause) -> Cause:
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
        if a := ctx.find_any(ALLOCATING):
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
