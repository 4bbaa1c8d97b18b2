"""KV-cache arithmetic (docs/backends.md §14–§17): bytes per token, fixed state per sequence,
and how vLLM and llama.cpp lay the cache out.

Pure functions over a :class:`ModelShape`. vLLM:

* KV bytes/token = 2 (K, V) × full-attention layers × KV heads (÷ TP) × head dim × dtype.
* GDN state per layer = conv ``(kernel-1+spec)·conv_dim/TP`` in the model dtype + SSM
  ``(v_heads/TP)·v_dim·k_dim`` in ``mamba_ssm_dtype``.
* One block pool for every layer kind. Layers are grouped by kind into groups of the smallest
  kind's size (``_get_kv_cache_groups_uniform_page_size``); a block holds one page in each of
  ``group_size`` tensors. For hybrids the attention block size is raised to
  ``16·ceil(mamba_page / (16·attn_bytes_per_token_per_layer))`` and the Mamba page padded.
* A request needs ``ceil(len/block)`` blocks per full-attention group, ``ceil(min(window-1+
  batched, len)/block)+1`` per sliding group and one block per GDN group.

llama.cpp: cells = ``-c`` (padded to 256); K and V in ``-ctk``/``-ctv``; sliding layers keep
``min(cells, window·seqs + ubatch)`` cells; recurrent layers keep R and S in f32 per sequence.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from modelswap.backends.registry import default_memory, memory_model
from modelswap.planner.shape import ModelShape, dtype_bytes

VLLM_BLOCK = 16  # vLLM's default attention block size (tokens)
LLAMA_PAD = 256  # llama.cpp pads the context (cells) to a multiple of this
LLAMA_UBATCH = 512  # llama.cpp's default -ub


def kv_bytes_per_token(shape: ModelShape, kv_dtype: str, tp: int = 1) -> float:
    """Full-attention K+V bytes of one token (the part that grows with the context)."""
    return shape.full.bytes_per_token(dtype_bytes(kv_dtype), tp) if shape.full else 0.0


def sliding_bytes_per_token(shape: ModelShape, kv_dtype: str, tp: int = 1) -> float:
    return shape.sliding.bytes_per_token(dtype_bytes(kv_dtype), tp) if shape.sliding else 0.0


def gdn_layer_bytes(
    shape: ModelShape,
    engine: str,
    *,
    tp: int = 1,
    spec_tokens: int = 0,
    ssm_dtype: str | None = None,
) -> int:
    """Fixed state of one linear-attention layer for one sequence (0 without such layers).
    vLLM keeps the conv state in the model dtype; llama.cpp keeps both in f32 (the engine's
    ``MemoryModel.state_f32``, from its adapter)."""
    lin = shape.linear
    if lin is None:
        return 0
    if memory_model(engine).state_f32:
        conv_b = ssm_b = 4.0
    else:
        conv_b = dtype_bytes(shape.dtype)
        ssm_b = dtype_bytes(ssm_dtype or lin.ssm_dtype)
    conv = lin.conv_elements(tp, spec_tokens) * conv_b
    return int(conv + lin.ssm_elements(tp) * ssm_b)


def state_bytes_per_sequence(
    shape: ModelShape,
    engine: str,
    *,
    tp: int = 1,
    spec_tokens: int = 0,
    ssm_dtype: str | None = None,
) -> int:
    layers = shape.linear.layers if shape.linear else 0
    return layers * gdn_layer_bytes(
        shape, engine, tp=tp, spec_tokens=spec_tokens, ssm_dtype=ssm_dtype
    )


@dataclass(frozen=True, slots=True)
class Group:
    kind: str  # "full", "sliding" or "linear"
    layers: int


@dataclass(frozen=True, slots=True)
class PagedGeometry:
    """How vLLM carves its KV budget into blocks for this model."""

    block_size: int  # tokens per attention block
    page_bytes: int  # one block of one layer
    group_size: int  # layers per group = tensors sharing each block
    groups: tuple[Group, ...]
    window: int | None
    max_batched_tokens: int

    @property
    def block_bytes(self) -> int:
        """One block across a group (what the budget is divided by)."""
        return self.page_bytes * self.group_size

    def count(self, kind: str) -> int:
        return sum(1 for g in self.groups if g.kind == kind)

    def blocks_per_request(self, tokens: int) -> int:
        full = self.count("full") * math.ceil(tokens / self.block_size)
        sliding = 0
        if self.count("sliding") and self.window:
            held = min(self.window - 1 + self.max_batched_tokens, tokens)
            sliding = self.count("sliding") * (math.ceil(held / self.block_size) + 1)
        return full + sliding + self.count("linear")

    def num_blocks(self, kv_budget: float) -> int:
        return max(0, int(kv_budget // self.block_bytes)) if self.block_bytes else 0

    def max_len(self, kv_budget: float, limit: int = 2**31) -> int:
        """Longest single request whose blocks fit in ``kv_budget`` (vLLM's estimate of the
        maximum model length: ``max_memory_usage_bytes`` ≤ the available memory)."""
        blocks = self.num_blocks(kv_budget)
        if self.blocks_per_request(1) > blocks:
            return 0
        lo, hi = 1, limit
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.blocks_per_request(mid) <= blocks:
                lo = mid
            else:
                hi = mid - 1
        return lo


def paged_geometry(
    shape: ModelShape,
    kv_dtype: str,
    *,
    tp: int = 1,
    spec_tokens: int = 0,
    ssm_dtype: str | None = None,
    max_batched_tokens: int = 8192,
) -> PagedGeometry:
    counts = {
        "full": shape.full.layers if shape.full else 0,
        "sliding": shape.sliding.layers if shape.sliding else 0,
        "linear": shape.linear.layers if shape.linear else 0,
    }
    present = {kind: n for kind, n in counts.items() if n}
    group_size = min(present.values()) if present else 1
    if present and max(present.values()) < group_size * 1.25:
        group_size = max(present.values())
    groups = tuple(
        Group(kind, min(group_size, n - start))
        for kind, n in present.items()
        for start in range(0, n, group_size)
    )
    attn = shape.full or shape.sliding
    per_layer_token = attn.bytes_per_token(dtype_bytes(kv_dtype), tp) / attn.layers if attn else 0
    block = VLLM_BLOCK
    paged = default_memory(gguf=False).engine
    mamba_page = gdn_layer_bytes(shape, paged, tp=tp, spec_tokens=spec_tokens, ssm_dtype=ssm_dtype)
    if mamba_page and per_layer_token:
        block = VLLM_BLOCK * math.ceil(mamba_page / (VLLM_BLOCK * per_layer_token))
    page = int(block * per_layer_token) if per_layer_token else mamba_page
    page = max(page, mamba_page)
    window = shape.sliding.window if shape.sliding else None
    return PagedGeometry(block, page, group_size, groups, window, max_batched_tokens)


def llama_cells(ctx: int) -> int:
    """The KV cells llama.cpp allocates for ``-c ctx`` (padded up to a multiple of 256)."""
    return LLAMA_PAD * math.ceil(ctx / LLAMA_PAD)


def llama_kv_bytes(
    shape: ModelShape, ctx: int, kv_dtype: str, *, seqs: int = 1, tp: int = 1
) -> int:
    """What llama.cpp logs as ``llama_kv_cache: size = … MiB`` for ``-c ctx``: every cell in
    every full-attention layer, plus the sliding layers' smaller cache."""
    return llama_kv_bytes_for_cells(shape, llama_cells(ctx), kv_dtype, seqs=seqs, tp=tp)


def llama_kv_bytes_for_cells(
    shape: ModelShape, cells: int, kv_dtype: str, *, seqs: int = 1, tp: int = 1
) -> int:
    size = cells * kv_bytes_per_token(shape, kv_dtype, tp)
    if shape.sliding and shape.sliding.window:
        swa_cells = min(cells, llama_cells(shape.sliding.window * seqs + LLAMA_UBATCH))
        size += swa_cells * sliding_bytes_per_token(shape, kv_dtype, tp)
    return int(size)
