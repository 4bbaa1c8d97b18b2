"""Budgets, verdicts and fixes: the 27B / 200,001 tokens / 32 GiB question, dense and llama.cpp
plans, and the same fix wording the backend's own diagnosis gives."""

from __future__ import annotations

import pytest
from tests.unit.planner.conftest import GIB, MIB, model

from modelswap.backends.vllm import MEMORY
from modelswap.planner.memory import PlanInputs, make_plan
from modelswap.planner.render import plan_dict

VLLM_ALLOWANCE = MEMORY.allowance_bytes  # the vLLM adapter's default allowance


def question(**changes: object) -> PlanInputs:
    base: dict[str, object] = {
        "gpu_bytes": 32 * GIB,
        "gpu_source": "--gpu",
        "utilization": 0.98,
        "max_model_len": 200_001,
    }
    base.update(changes)
    return PlanInputs(**base)  # type: ignore[arg-type]


def test_27b_nvfp4_at_200001_tokens_on_32_gib_bf16_kv_does_not_fit() -> None:
    plan = make_plan(model("qwen3.6-27b", quantization="nvfp4"), question())
    assert plan.budget_bytes == pytest.approx(0.98 * 32 * GIB, abs=1)
    assert plan.kv_budget_bytes == plan.budget_bytes - plan.weights_bytes - VLLM_ALLOWANCE
    assert plan.kv_bytes_per_token == 64 * 1024
    assert plan.geometry is not None
    assert plan.geometry.blocks_per_request(200_001) == 256 + 3
    assert plan.fits is False
    assert plan.max_context == 174_832  # (226 blocks - 3) × 784
    assert plan.max_context % 784 == 0
    assert plan.margin_bytes is not None
    assert plan.margin_bytes < 0
    assert plan.utilization_needed is not None
    assert plan.utilization_needed > 1
    assert plan.fixes[0].startswith("restart with --max-model-len 174832, or ")
    # 256 sequences by default below 70 GiB; only 225 Mamba blocks fit.
    assert plan.mamba_blocks == 225
    assert "restart with --max-num-seqs 225" in plan.fixes[1]
    assert "--kv-cache-dtype fp8" in plan.fixes[2]


def test_27b_with_fp8_kv_and_few_sequences_fits() -> None:
    shape = model("qwen3.6-27b", quantization="nvfp4")
    plan = make_plan(shape, question(kv_dtype="fp8", max_num_seqs=8))
    assert plan.fits is True
    assert plan.problems == ()
    assert plan.fixes == ()
    assert plan.geometry is not None
    assert plan.geometry.block_size == 1568
    # 226 blocks of 49 MiB (one of them the pool's null block); 131 blocks per request.
    assert plan.mamba_blocks == 225
    assert plan.max_concurrency == round(226 / 131, 2)
    assert plan.margin_bytes is not None
    assert plan.margin_bytes > 4 * GIB
    # The same plan with the weights vLLM reported for nvidia/Qwen3.6-27B-NVFP4 (22.07 GiB).
    from dataclasses import replace

    heavier = replace(shape, weights=replace(shape.weights, bytes=int(22.07 * GIB)))
    tight = make_plan(heavier, question(kv_dtype="fp8", max_num_seqs=8))
    assert tight.fits is True
    assert tight.mamba_blocks == 147
    too_many = make_plan(heavier, question(kv_dtype="fp8"))
    assert too_many.fits is False
    assert too_many.fixes == (
        "restart with --max-num-seqs 147, or raise --gpu-memory-utilization.",
    )


def test_no_memory_left_for_the_cache() -> None:
    plan = make_plan(model("qwen3.6-27b"), question())  # bf16 weights: 50.9 GiB > 32 GiB
    assert plan.fits is False
    assert plan.kv_budget_bytes is not None
    assert plan.kv_budget_bytes < 0
    assert plan.problems[0].startswith("No available memory for the cache blocks")
    assert "--tensor-parallel-size" in plan.fixes[0]


def test_dense_plan_reproduces_a_real_vllm_profile() -> None:
    # vllm-old-success.log: total_gpu_memory (79.19GiB) x gpu_memory_utilization (0.90) =
    # 71.27GiB; weights 14.99GiB; non_torch 0.09GiB; activation peak 1.67GiB; KV 54.52GiB.
    plan = make_plan(
        model("llama-3.1-8b"),
        PlanInputs(
            gpu_bytes=int(79.19 * GIB),
            utilization=0.9,
            max_model_len=16_384,
            allowance_bytes=int((0.09 + 1.67) * GIB),
        ),
    )
    assert plan.budget_bytes is not None
    assert plan.budget_bytes / GIB == pytest.approx(71.27, abs=0.01)
    assert plan.kv_budget_bytes is not None
    assert plan.kv_budget_bytes / GIB == pytest.approx(54.52, rel=0.002)
    assert plan.kv_cache_tokens == pytest.approx(446_624, rel=0.002)
    assert plan.max_concurrency == pytest.approx(27.26, abs=0.05)
    assert plan.fits is True
    assert plan.mamba_blocks is None  # no GDN layers


def test_llamacpp_plan_and_its_fix() -> None:
    shape = model("qwen3.6-27b", quantization="nvfp4")
    inputs = PlanInputs(engine="llamacpp", kv_dtype="q8_0", max_model_len=131_072)
    sizes = make_plan(shape, inputs)
    assert sizes.fits is None
    assert sizes.verdict.startswith("unknown")
    assert sizes.kv_bytes_at_context == 4352 * MIB
    assert sizes.state_bytes_per_seq / MIB == pytest.approx(149.625)
    small = make_plan(
        shape,
        PlanInputs(engine="llamacpp", kv_dtype="q8_0", max_model_len=131_072, gpu_bytes=20 * GIB),
    )
    assert small.fits is False
    assert small.fixes[0].startswith(f"lower -c to {small.max_context} ")
    assert small.max_context is not None
    assert 0 < small.max_context < 131_072


def test_without_gpu_memory_there_are_sizes_but_no_verdict() -> None:
    plan = make_plan(model("llama-3.1-8b"), PlanInputs(max_model_len=8192))
    assert plan.fits is None
    assert plan.budget_bytes is None
    assert plan.max_context is None
    assert plan.kv_bytes_at_context == 8192 * 128 * 1024
    assert "fits" not in plan_dict(plan)


def test_context_beyond_the_model_is_noted() -> None:
    plan = make_plan(model("qwen3-30b-a3b"), PlanInputs(max_model_len=65_536))
    assert any("max_position_embeddings (40960)" in note for note in plan.notes)


def test_unknown_kv_dtype_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown dtype 'fp6'"):
        make_plan(model("llama-3.1-8b"), PlanInputs(kv_dtype="fp6"))
