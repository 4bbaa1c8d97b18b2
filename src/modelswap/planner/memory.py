"""The memory basin: budget = GPU total × utilisation; weights, an allowance for activations,
CUDA graphs and non-torch memory, KV and per-sequence state; the verdict and its fix.

Pure: :func:`make_plan` takes a :class:`ModelShape` and :class:`PlanInputs` and returns a
:class:`Plan`. The verdict mirrors the checks the backend makes at startup, with the same fix
wording its diagnosis gives (``backends/causes.py``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from modelswap.backends.adapter import MemoryModel
from modelswap.backends.registry import default_memory, memory_model
from modelswap.planner import kv
from modelswap.planner.shape import ModelShape, dtype_bytes

GIB = 1024**3
MIB = 1024**2


@dataclass(frozen=True, slots=True)
class PlanInputs:
    """What to plan for. ``gpu_bytes`` None means unknown (sizes only, no verdict)."""

    # The memory model (``modelswap plan --engine``): the adapters' ``MemoryModel``s give the
    # default allowance and where it comes from, the utilization, KV dtype and sequences
    # (backends/vllm.py, backends/llamacpp.py; docs/backends.md §19). Default: paged blocks.
    engine: str = default_memory(gguf=False).engine
    gpu_bytes: int | None = None
    gpu_source: str = "not given"
    utilization: float | None = None  # default: 0.9 (vLLM) / 1.0 (llama.cpp)
    max_model_len: int | None = None  # default: the model's max position embeddings
    kv_dtype: str = "auto"
    max_num_seqs: int | None = None  # vLLM: default 256 (<70 GiB) / 1024; llama.cpp: -np
    tensor_parallel: int = 1
    allowance_bytes: int | None = None
    spec_tokens: int = 0
    ssm_dtype: str | None = None
    max_batched_tokens: int = 8192

    def resolved_kv_dtype(self, shape: ModelShape) -> str:
        if self.kv_dtype in ("auto", ""):
            return memory_model(self.engine).kv_dtype or shape.dtype or "bfloat16"
        return self.kv_dtype


@dataclass(frozen=True, slots=True)
class Plan:
    shape: ModelShape
    inputs: PlanInputs
    kv_dtype: str
    context: int
    kv_bytes_per_token: float
    state_bytes_per_seq: int
    weights_bytes: int
    allowance_bytes: int
    allowance_source: str
    utilization: float
    max_num_seqs: int
    kv_bytes_at_context: int  # one sequence at ``context`` (attention only)
    geometry: kv.PagedGeometry | None = None
    budget_bytes: int | None = None
    kv_budget_bytes: int | None = None
    max_context: int | None = None
    max_concurrency: float | None = None
    kv_cache_tokens: int | None = None
    mamba_blocks: int | None = None
    fits: bool | None = None
    problems: tuple[str, ...] = ()
    fixes: tuple[str, ...] = ()
    margin_bytes: int | None = None
    utilization_needed: float | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def verdict(self) -> str:
        if self.fits is None:
            return "unknown (no GPU memory given: sizes only)"
        return "fits" if self.fits else "does not fit"


def _default_seqs(inputs: PlanInputs, model: MemoryModel) -> int:
    if inputs.max_num_seqs:
        return inputs.max_num_seqs
    big = inputs.gpu_bytes is not None and inputs.gpu_bytes >= 70 * GIB
    return model.seqs[1] if big else model.seqs[0]


def make_plan(shape: ModelShape, inputs: PlanInputs) -> Plan:
    """Everything the planner can say about ``shape`` under ``inputs``."""
    model = memory_model(inputs.engine)  # ValueError for an engine no adapter models
    kv_dtype = inputs.resolved_kv_dtype(shape)
    dtype_bytes(kv_dtype)  # unknown dtypes fail here, with the list of known ones
    tp = max(1, inputs.tensor_parallel)
    context = inputs.max_model_len or shape.max_position or 4096
    allowance = inputs.allowance_bytes
    source = "given" if allowance is not None else ""
    if allowance is None:
        allowance, source = model.allowance_bytes, model.allowance_source
    util = inputs.utilization if inputs.utilization is not None else model.utilization
    per_token = kv.kv_bytes_per_token(shape, kv_dtype, tp)
    state = kv.state_bytes_per_sequence(
        shape, inputs.engine, tp=tp, spec_tokens=inputs.spec_tokens, ssm_dtype=inputs.ssm_dtype
    )
    seqs = _default_seqs(inputs, model)
    if not model.paged:
        at_context = kv.llama_kv_bytes(shape, context, kv_dtype, seqs=seqs, tp=tp)
        geometry = None
    else:
        geometry = kv.paged_geometry(
            shape,
            kv_dtype,
            tp=tp,
            spec_tokens=inputs.spec_tokens,
            ssm_dtype=inputs.ssm_dtype,
            max_batched_tokens=inputs.max_batched_tokens,
        )
        at_context = geometry.blocks_per_request(context) * geometry.block_bytes
        at_context -= geometry.count("linear") * geometry.block_bytes
    notes = list(shape.notes)
    if shape.max_position and context > shape.max_position:
        notes.append(
            f"the context ({context}) is longer than the model's max_position_embeddings "
            f"({shape.max_position}); vLLM refuses that unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1"
        )
    plan = Plan(
        shape=shape,
        inputs=inputs,
        kv_dtype=kv_dtype,
        context=context,
        kv_bytes_per_token=per_token,
        state_bytes_per_seq=state,
        weights_bytes=shape.weights.bytes // tp,
        allowance_bytes=allowance,
        allowance_source=source,
        utilization=util,
        max_num_seqs=seqs,
        kv_bytes_at_context=int(at_context),
        geometry=geometry,
        notes=tuple(notes),
    )
    if inputs.gpu_bytes is None:
        return plan
    return _judge(plan, inputs.gpu_bytes)


def _judge(plan: Plan, gpu: int) -> Plan:
    budget = math.ceil(gpu * plan.utilization)
    kv_budget = budget - plan.weights_bytes - plan.allowance_bytes
    if plan.geometry is not None:
        return _judge_paged(plan, gpu, budget, kv_budget, plan.geometry)
    return _judge_cells(plan, gpu, budget, kv_budget)


def _judge_paged(plan: Plan, gpu: int, budget: int, kv_budget: int, geo: kv.PagedGeometry) -> Plan:
    limit = plan.shape.max_position or 2**31
    blocks = geo.num_blocks(kv_budget)
    per_request = geo.blocks_per_request(plan.context)
    need = per_request * geo.block_bytes
    max_len = geo.max_len(kv_budget, max(limit, plan.context)) if kv_budget > 0 else 0
    concurrency = blocks / per_request if per_request else 0.0
    problems: list[str] = []
    fixes: list[str] = []
    mamba = blocks - 1 if geo.count("linear") else None  # block 0 is the pool's null block
    fixed = plan.weights_bytes + plan.allowance_bytes
    util_needed = (fixed + need) / gpu
    if kv_budget <= 0:
        problems.append(
            "No available memory for the cache blocks: weights and the allowance exceed the "
            f"budget ({_gib(fixed)} of {_gib(budget)} GiB)."
        )
        fixes.append(
            f"{_raise_util(util_needed)[:-1]}, quantize the weights, or split them with "
            "--tensor-parallel-size."
        )
    elif need > kv_budget:
        problems.append(
            f"To serve one request at {plan.context} tokens, {_gib(need)} GiB of KV cache is "
            f"needed, more than the {_gib(kv_budget)} GiB available."
        )
        fixes.append(f"restart with --max-model-len {max_len}, or {_raise_util(util_needed)}")
    if mamba is not None and kv_budget > 0 and plan.max_num_seqs > mamba:
        problems.append(
            f"max_num_seqs ({plan.max_num_seqs}) exceeds available Mamba cache blocks ({mamba})."
        )
        fixes.append(
            f"restart with --max-num-seqs {max(mamba, 0)}, or raise --gpu-memory-utilization."
        )
    if problems and plan.kv_dtype not in ("fp8", "fp8_e4m3", "fp8_e5m2") and kv_budget > 0:
        fp8 = kv.paged_geometry(
            plan.shape,
            "fp8",
            tp=max(1, plan.inputs.tensor_parallel),
            spec_tokens=plan.inputs.spec_tokens,
            ssm_dtype=plan.inputs.ssm_dtype,
            max_batched_tokens=plan.inputs.max_batched_tokens,
        )
        fp8_len = fp8.max_len(kv_budget, max(limit, plan.context))
        if fp8_len >= plan.context:
            fixes.append(
                f"or keep the context: with --kv-cache-dtype fp8 one request fits up to "
                f"{fp8_len} tokens."
            )
    return replace(
        plan,
        budget_bytes=budget,
        kv_budget_bytes=kv_budget,
        max_context=max_len,
        max_concurrency=round(concurrency, 2),
        kv_cache_tokens=int(concurrency * plan.context),
        mamba_blocks=mamba,
        fits=not problems,
        problems=tuple(problems),
        fixes=tuple(fixes),
        margin_bytes=kv_budget - need,
        utilization_needed=round(util_needed, 4),
    )


def _judge_cells(plan: Plan, gpu: int, budget: int, kv_budget: int) -> Plan:
    state = plan.state_bytes_per_seq * plan.max_num_seqs
    need = plan.kv_bytes_at_context + state
    free = kv_budget - state
    per_cell = plan.kv_bytes_per_token
    max_ctx = int(free // per_cell) // kv.LLAMA_PAD * kv.LLAMA_PAD if per_cell and free > 0 else 0
    fixed = plan.weights_bytes + plan.allowance_bytes
    util_needed = (fixed + need) / gpu
    problems: list[str] = []
    fixes: list[str] = []
    if need > kv_budget:
        problems.append(
            f"llama.cpp needs {_mib(need)} MiB for the KV cache and state at -c {plan.context}, "
            f"but only {_mib(max(kv_budget, 0))} MiB is left after the weights and compute buffer."
        )
        fixes.append(
            f"lower -c to {max_ctx} (the context size) or use a smaller KV cache type "
            "(-ctk q8_0 -ctv q8_0); offloading fewer layers (-ngl) also frees GPU memory."
        )
    return replace(
        plan,
        budget_bytes=budget,
        kv_budget_bytes=kv_budget,
        max_context=max_ctx,
        max_concurrency=float(plan.max_num_seqs),
        kv_cache_tokens=kv.llama_cells(plan.context),
        fits=not problems,
        problems=tuple(problems),
        fixes=tuple(fixes),
        margin_bytes=kv_budget - need,
        utilization_needed=round(util_needed, 4),
    )


def _raise_util(needed: float) -> str:
    """vLLM's "raise --gpu-memory-utilization", with the value that would do."""
    if needed <= 1.0:
        return f"raise --gpu-memory-utilization to {math.ceil(needed * 100) / 100:.2f}."
    return f"use a bigger GPU (even --gpu-memory-utilization 1.0 falls short: {needed:.2f} needed)."


def _gib(value: float) -> str:
    return f"{value / GIB:.2f}"


def _mib(value: float) -> str:
    return f"{value / MIB:.2f}"
