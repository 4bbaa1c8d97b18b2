"""Reading models: config.json (nested text_config), safetensors headers and the index, the
weights estimate and its quantization, and GGUF headers (the real SmolLM2 file)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
from tests.e2e.conftest import smollm2_gguf
from tests.unit.planner.conftest import GIB, PLANNER, model

from modelswap.planner.gguf_reader import read_header, shape_from_gguf
from modelswap.planner.hf import ModelReadError, read_hf_folder
from modelswap.planner.params import count_params, detect_quantization


def write_safetensors(path: Path, tensors: dict[str, tuple[str, list[int], int]]) -> None:
    """A real safetensors file: the 8-byte header length, the JSON header, zeroed data."""
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, (dtype, shape, nbytes) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + b"\0" * offset)


def test_multimodal_config_reads_text_config() -> None:
    shape = model("qwen3.6-27b")
    assert shape.architecture == "Qwen3_5ForConditionalGeneration"
    assert shape.layers == 64
    assert shape.max_position == 262_144
    assert shape.linear is not None
    assert shape.linear.ssm_dtype == "float32"
    assert shape.dtype == "bfloat16"


def test_dense_params_match_the_published_count() -> None:
    # Llama-3.1-8B has 8,030,261,248 parameters; the count leaves out the 266,240 norm weights.
    parts = count_params(json.loads((PLANNER / "llama-3.1-8b" / "config.json").read_text()))
    assert sum(parts.values()) == 8_030_261_248 - (2 * 32 + 1) * 4096
    weights = model("llama-3.1-8b").weights
    assert not weights.exact
    # vLLM loaded it as 14.9889 GiB (tests/data/startup-logs/vllm-old-success.log).
    assert weights.bytes / GIB == pytest.approx(14.9889, rel=0.003)


def test_moe_params_count_every_expert() -> None:
    parts = count_params(json.loads((PLANNER / "qwen3-30b-a3b" / "config.json").read_text()))
    assert parts["experts"] == 48 * 128 * 3 * 2048 * 768
    assert sum(parts.values()) / 1e9 == pytest.approx(30.5, abs=0.1)  # "30.5B"


def test_quantization_config_keeps_its_ignored_parts_wide() -> None:
    config = json.loads((PLANNER / "gpt-oss-20b" / "config.json").read_text())
    quant = detect_quantization(config)
    assert quant.scheme == "mxfp4"
    # modules_to_not_convert: self_attn, mlp.router, embed_tokens, lm_head.
    assert {"attention", "router", "embed", "lm_head"} <= quant.unquantized
    assert "experts" not in quant.unquantized
    weights = model("gpt-oss-20b").weights
    assert weights.bytes / GIB == pytest.approx(12.8, abs=0.1)  # the 13.8 GB checkpoint


def test_nvfp4_override_follows_the_backends_rule() -> None:
    # docs/backends.md §18: NVFP4 at 0.5625 B/param; embeddings, lm_head, vision, MTP, conv1d BF16.
    plain = model("qwen3.6-27b")
    nvfp4 = model("qwen3.6-27b", quantization="nvfp4")
    assert plain.weights.bytes / GIB == pytest.approx(50.9, abs=0.1)
    assert nvfp4.weights.bytes / GIB == pytest.approx(18.35, abs=0.01)
    assert "nvfp4" in nvfp4.weights.how
    assert "estimated" in nvfp4.weights.how
    # Qwen/Qwen3.6-27B-FP8 loaded as 28.92 GiB (vllm-mamba-cache-blocks.log).
    fp8 = model("qwen3.6-27b", quantization="fp8")
    assert fp8.weights.bytes / GIB == pytest.approx(28.92, rel=0.03)


def test_safetensors_headers_give_exact_bytes(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text((PLANNER / "llama-3.1-8b" / "config.json").read_text())
    write_safetensors(
        tmp_path / "model-00001-of-00002.safetensors",
        {"model.embed_tokens.weight": ("BF16", [8, 4], 64), "lm_head.weight": ("BF16", [8, 4], 64)},
    )
    write_safetensors(
        tmp_path / "model-00002-of-00002.safetensors",
        {
            "model.layers.0.mlp.down_proj.weight": ("F8_E4M3", [4, 8], 32),
            "mtp.layers.0.mlp.down_proj.weight": ("BF16", [4, 8], 64),
        },
    )
    shape = read_hf_folder(tmp_path)
    assert shape.weights.exact
    assert shape.weights.bytes == 64 + 64 + 32  # the MTP head is left out without MTP
    assert shape.weights.by_dtype == {"BF16": 128, "F8_E4M3": 32}
    assert read_hf_folder(tmp_path, with_mtp=True).weights.bytes == 224


def test_index_total_size_when_shards_are_absent(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text((PLANNER / "llama-3.1-8b" / "config.json").read_text())
    index = {"metadata": {"total_size": 16_060_522_496}, "weight_map": {}}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    weights = read_hf_folder(tmp_path).weights
    assert weights.exact
    assert weights.bytes == 16_060_522_496


def test_unreadable_models_say_why(tmp_path: Path) -> None:
    with pytest.raises(ModelReadError, match=r"no config\.json"):
        read_hf_folder(tmp_path)
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"NOPE" + b"\0" * 64)
    with pytest.raises(ModelReadError, match="bad magic"):
        shape_from_gguf(bad)


def test_gguf_header_of_the_real_smollm2() -> None:
    path = Path(smollm2_gguf())
    shape = shape_from_gguf(path)
    assert shape.fmt == "gguf"
    assert shape.architecture == "llama"
    assert shape.layers == 30
    assert shape.full is not None
    assert (shape.full.kv_heads, shape.full.head_dim_k) == (3, 64)
    assert shape.max_position == 8192
    # llama.cpp: "load_tensors: CPU_Mapped model buffer size = 92.10 MiB".
    assert round(shape.weights.bytes / 1024**2, 2) == 92.10
    header = read_header(path)
    assert header.metadata["tokenizer.ggml.tokens"] == 49_152  # skipped, only counted


def test_gguf_reader_agrees_with_the_gguf_package() -> None:
    from gguf import GGUFReader

    path = smollm2_gguf()
    reference = GGUFReader(path)
    header = read_header(Path(path))
    assert header.tensor_bytes == {t.name: int(t.n_bytes) for t in reference.tensors}
    for key in ("llama.block_count", "llama.attention.head_count_kv", "general.architecture"):
        assert header.metadata[key] == reference.fields[key].contents()
