"""KV bytes per token, per-sequence state and vLLM's block geometry, against the worked figures
of docs/backends.md §20 and the capacity lines of real startup logs."""

from __future__ import annotations

import pytest
from tests.unit.planner.conftest import GIB, KIB, MIB, model

from modelswap.planner import kv
from modelswap.planner.shape import ModelShape


def test_27b_hybrid_kv_per_token(q27: ModelShape) -> None:
    # 2 × 16 full-attention layers × 4 KV heads × 256 × dtype (docs/backends.md §14).
    assert kv.kv_bytes_per_token(q27, "bfloat16") == 64 * KIB
    assert kv.kv_bytes_per_token(q27, "fp8") == 32 * KIB
    assert kv.kv_bytes_per_token(q27, "q8_0") == 34 * KIB
    # A dense 64-layer model with the same heads would need 4× more.
    assert q27.full is not None
    assert q27.full.layers == 16
    assert q27.linear is not None
    assert q27.linear.layers == 48


def test_27b_gdn_state_per_sequence(q27: ModelShape) -> None:
    # conv_dim 10,240; conv 3·10,240·2 B; SSM 48·128·128·4 B; 3,207,168 B per layer.
    assert q27.linear is not None
    assert q27.linear.conv_dim() == 10_240
    assert kv.gdn_layer_bytes(q27, "vllm") == 3_207_168
    assert kv.state_bytes_per_sequence(q27, "vllm") == 48 * 3_207_168
    assert kv.state_bytes_per_sequence(q27, "vllm") / MIB == pytest.approx(146.8, abs=0.05)
    # llama.cpp keeps conv in f32: R 5.62 MiB + S 144.00 MiB = 149.62 MiB (the real log).
    assert kv.state_bytes_per_sequence(q27, "llamacpp") / MIB == pytest.approx(149.625)


def test_27b_speculative_tokens_enlarge_the_conv_state(q27: ModelShape) -> None:
    plain = kv.gdn_layer_bytes(q27, "vllm")
    assert kv.gdn_layer_bytes(q27, "vllm", spec_tokens=2) == plain + 2 * 10_240 * 2


def test_27b_vllm_block_geometry(q27: ModelShape) -> None:
    bf16 = kv.paged_geometry(q27, "bfloat16")
    assert bf16.block_size == 784  # "Setting attention block size to 784 tokens"
    assert bf16.page_bytes == 3_211_264  # the Mamba page padded by 0.13 %
    assert (bf16.page_bytes / 3_207_168 - 1) * 100 == pytest.approx(0.13, abs=0.005)
    assert [g.kind for g in bf16.groups] == ["full", "linear", "linear", "linear"]
    assert bf16.block_bytes == 49 * MIB  # one block across a 16-layer group
    fp8 = kv.paged_geometry(q27, "fp8")
    assert fp8.block_size == 1568  # "Setting attention block size to 1568 tokens"
    assert fp8.page_bytes == 3_211_264


def test_27b_seven_gib_single_sequence_is_vllm_exact(q27: ModelShape) -> None:
    bf16 = kv.paged_geometry(q27, "bfloat16")
    assert bf16.num_blocks(7 * GIB) == 146
    assert bf16.max_len(7 * GIB) == (146 - 3) * 784 == 112_112
    assert kv.paged_geometry(q27, "fp8").max_len(7 * GIB) == (146 - 3) * 1568 == 224_224
    # The simple division, for comparison: 114,688 tokens.
    assert 7 * GIB // kv.kv_bytes_per_token(q27, "bfloat16") == 114_688
    # At max_model_len 65,536: ceil(65536/784)+3 = 87 blocks per request, 146/87 = 1.68x.
    assert bf16.blocks_per_request(65_536) == 87
    assert round(146 / 87, 2) == 1.68


def test_27b_fp8_mamba_blocks_match_the_real_error() -> None:
    # Qwen3.6-27B-FP8, bf16 KV, "Available KV cache memory: 41.02 GiB", then
    # "max_num_seqs (1024) exceeds available Mamba cache blocks (856)"
    # (tests/data/startup-logs/vllm-mamba-cache-blocks.log). Block 0 is the pool's null block.
    geometry = kv.paged_geometry(model("qwen3.6-27b"), "bfloat16")
    assert geometry.num_blocks(41.02 * GIB) - 1 == 856


def test_27b_llamacpp_kv_matches_the_logged_size(q27: ModelShape) -> None:
    # "llama_kv_cache: size = 4352.00 MiB (131072 cells, 16 layers, 4/1 seqs), K (q8_0)"
    assert kv.llama_kv_bytes(q27, 131_072, "q8_0") == 4352 * MIB
    # And four such sequences (tests/data/startup-logs/llamacpp-success.log): 17408 MiB.
    assert kv.llama_kv_bytes(q27, 524_288, "q8_0") == 17_408 * MIB


def test_qwen3_next_80b() -> None:
    shape = model("qwen3-next-80b-a3b")  # flat config, no layer_types: interval 4
    assert shape.full is not None
    assert shape.full.layers == 12
    assert kv.kv_bytes_per_token(shape, "bfloat16") == 24 * KIB
    assert kv.kv_bytes_per_token(shape, "fp8") == 12 * KIB
    assert 7 * GIB // kv.kv_bytes_per_token(shape, "bfloat16") // 1000 == 305  # ≈ 305k
    assert 7 * GIB // kv.kv_bytes_per_token(shape, "fp8") // 1000 == 611  # ≈ 611k
    # 36 GDN layers: about 74 MiB with an fp32 SSM state, about 38 MiB with bf16.
    fp32 = kv.state_bytes_per_sequence(shape, "vllm", ssm_dtype="float32")
    bf16 = kv.state_bytes_per_sequence(shape, "vllm")  # the config names no mamba_ssm_dtype
    assert round(fp32 / MIB) == 74
    assert round(bf16 / MIB) == 38


def test_dense_llama_block_arithmetic_matches_vllm() -> None:
    # vllm-old-success.log (Llama-3.1-8B, bf16): "the rest of the memory reserved for KV Cache
    # is 54.52GiB" → "GPU KV cache size: 446,624 tokens", "Maximum concurrency for 16,384
    # tokens per request: 27.26x".
    shape = model("llama-3.1-8b")
    assert kv.kv_bytes_per_token(shape, "bfloat16") == 128 * KIB
    geometry = kv.paged_geometry(shape, "bfloat16")
    assert geometry.block_size == 16
    assert geometry.block_bytes == 2 * MIB
    blocks = geometry.num_blocks(54.52 * GIB)
    assert blocks * 16 == 446_624
    assert round(blocks / geometry.blocks_per_request(16_384), 2) == 27.26


def test_sliding_window_layers_are_capped_at_their_window() -> None:
    shape = model("gpt-oss-20b")  # 12 sliding (128 tokens) + 12 full, 8 KV heads × 64
    assert shape.sliding is not None
    assert shape.sliding.window == 128
    assert shape.full is not None
    assert shape.full.layers == 12
    assert kv.kv_bytes_per_token(shape, "bfloat16") == 12 * 8 * 128 * 2
    geometry = kv.paged_geometry(shape, "bfloat16", max_batched_tokens=2048)
    assert [g.kind for g in geometry.groups] == ["full", "sliding"]
    # Full layers grow with the context; sliding ones hold window-1+batch tokens, plus one.
    assert geometry.blocks_per_request(131_072) == 8192 + (-(-(127 + 2048) // 16) + 1)
    assert geometry.blocks_per_request(64) == 4 + 5  # a short request never exceeds itself
    # llama.cpp: sliding layers keep window + ubatch cells, padded to 256.
    full_only = 4096 * kv.kv_bytes_per_token(shape, "f16")
    swa = 768 * 12 * 8 * 128 * 2
    assert kv.llama_kv_bytes(shape, 4096, "f16") == full_only + swa


def test_moe_kv_is_attention_only() -> None:
    shape = model("qwen3-30b-a3b")  # 48 layers × 4 KV heads × 128; experts hold no KV
    assert kv.kv_bytes_per_token(shape, "bfloat16") == 2 * 48 * 4 * 128 * 2 == 96 * KIB
    assert shape.linear is None
    assert shape.sliding is None


def test_tensor_parallel_splits_and_replicates_kv_heads(q27: ModelShape) -> None:
    assert kv.kv_bytes_per_token(q27, "bfloat16", tp=2) == 32 * KIB
    assert kv.kv_bytes_per_token(q27, "bfloat16", tp=4) == 16 * KIB
    # 4 KV heads on 8 GPUs: each GPU still holds one head.
    assert kv.kv_bytes_per_token(q27, "bfloat16", tp=8) == 16 * KIB
    assert kv.gdn_layer_bytes(q27, "vllm", tp=2) == 3_207_168 // 2
