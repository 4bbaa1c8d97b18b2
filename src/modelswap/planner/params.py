"""Weights without weight files: parameters counted from ``config.json``, times the bytes per
parameter of each part's storage (docs/backends.md §18).

Used only when a model folder has no safetensors headers and no index to read the exact size
from. The count covers the big matrices (embeddings, attention, GDN projections, MLP or
experts, the vision tower, MTP layers); norms and biases are left out (well under 0.1 %).
Quantized checkpoints keep some parts in BF16 — ``quantization_config`` says which (its
``ignore`` / ``modules_to_not_convert`` / ``exclude_modules`` patterns, matched against
representative module names); when the scheme is given rather than read from a config
(``--quantization``), the rule of docs/backends.md §18 applies: embeddings, ``lm_head``, the
vision tower, the MTP head, GDN ``conv1d`` and the MoE router stay BF16.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from modelswap.planner.names import QUANT_BYTES, QUANT_NAMES
from modelswap.planner.shape import Weights, layer_kinds, text_config

# Parts a checkpoint keeps in 16 bits unless its config says otherwise (docs/backends.md §18).
DEFAULT_UNQUANTIZED = ("embed", "lm_head", "vision", "mtp", "conv1d", "router")

# Representative module names per part: an ignore pattern that matches any of them keeps
# that part unquantized.
_LAYER_PREFIXES = (
    "model.layers.0.",
    "model.language_model.layers.0.",
    "language_model.model.layers.0.",
)
_PART_MODULES: dict[str, tuple[str, ...]] = {
    "lm_head": ("lm_head",),
    "embed": ("model.embed_tokens", "model.language_model.embed_tokens"),
    "attention": tuple(p + "self_attn.q_proj" for p in _LAYER_PREFIXES),
    "gdn": tuple(p + "linear_attn.in_proj_qkvz" for p in _LAYER_PREFIXES),
    "conv1d": tuple(p + "linear_attn.conv1d" for p in _LAYER_PREFIXES),
    "mlp": tuple(p + "mlp.down_proj" for p in _LAYER_PREFIXES),
    "experts": tuple(p + "mlp.experts.0.down_proj" for p in _LAYER_PREFIXES),
    "shared_expert": tuple(p + "mlp.shared_expert.down_proj" for p in _LAYER_PREFIXES),
    "router": tuple(p + s for p in _LAYER_PREFIXES for s in ("mlp.gate", "mlp.router")),
    "vision": ("model.visual.blocks.0.attn.qkv", "visual.blocks.0.attn.qkv"),
    "mtp": ("mtp.layers.0.self_attn.q_proj", "model.mtp.layers.0.self_attn.q_proj"),
}


@dataclass(frozen=True, slots=True)
class Quantization:
    """A weight storage scheme and the parts it leaves in 16 bits."""

    scheme: str  # a QUANT_BYTES key, or "none"
    unquantized: frozenset[str]
    source: str

    @property
    def bytes_per_param(self) -> float:
        return QUANT_BYTES.get(self.scheme, 2.0)


def detect_quantization(config: Mapping[str, Any], override: str | None = None) -> Quantization:
    """The scheme of ``quantization_config`` (or ``override``, a QUANT_NAMES value)."""
    if override:
        if override not in QUANT_NAMES:
            raise ValueError(f"unknown quantization {override!r}; one of {', '.join(QUANT_NAMES)}")
        return Quantization(override, frozenset(DEFAULT_UNQUANTIZED), f"--quantization {override}")
    qc = config.get("quantization_config") or text_config(config).get("quantization_config")
    if not isinstance(qc, Mapping):
        return Quantization("none", frozenset(), "no quantization_config")
    method = str(qc.get("quant_method", "")).lower()
    scheme = _scheme(method, qc)
    patterns = [
        str(p)
        for key in ("ignore", "modules_to_not_convert", "exclude_modules", "ignored_layers")
        for p in (qc.get(key) or [])
    ]
    kept = {part for part, names in _PART_MODULES.items() if _ignored(names, patterns)}
    kept |= {"embed", "conv1d"}  # not Linear layers: no scheme here quantizes them
    return Quantization(scheme, frozenset(kept), f"quantization_config ({method or 'unnamed'})")


def _scheme(method: str, qc: Mapping[str, Any]) -> str:
    algo = str(qc.get("quant_algo", "")).lower()
    fmt = str(qc.get("format", "")).lower()
    if "nvfp4" in (algo + fmt) or method == "modelopt_fp4":
        return "nvfp4"
    if method in ("mxfp4",):
        return "mxfp4"
    if method in ("fp8", "fbgemm_fp8", "ptpc_fp8") or "fp8" in algo or "float-quantized" in fmt:
        return "fp8"
    if method in ("awq", "gptq", "auto-round", "awq_marlin", "gptq_marlin", "hqq"):
        return "int8" if qc.get("bits") == 8 else "int4"
    if method == "bitsandbytes":
        return "int8" if qc.get("load_in_8bit") else "int4"
    if method == "compressed-tensors":
        bits = _group_weight_bits(qc)
        return {4: "int4", 8: "int8"}.get(bits or 0, "none")
    return "none"


def _group_weight_bits(qc: Mapping[str, Any]) -> int | None:
    groups = qc.get("config_groups")
    if not isinstance(groups, Mapping):
        return None
    for group in groups.values():
        weights = group.get("weights") if isinstance(group, Mapping) else None
        if isinstance(weights, Mapping) and isinstance(weights.get("num_bits"), int):
            return int(weights["num_bits"])
    return None


def _ignored(names: Sequence[str], patterns: Sequence[str]) -> bool:
    for pattern in patterns:
        for name in names:
            if pattern.startswith("re:"):
                if re.match(pattern[3:], name):
                    return True
            elif "*" in pattern or "?" in pattern:
                if fnmatch.fnmatchcase(name, pattern) or fnmatch.fnmatchcase(name, pattern + ".*"):
                    return True
            elif pattern and (name == pattern or pattern in name):
                return True
    return False


def count_params(config: Mapping[str, Any], *, with_mtp: bool = False) -> dict[str, int]:
    """Parameters per part (the keys of ``_PART_MODULES``); zero parts are left out."""
    cfg = text_config(config)
    g = _getter(cfg)
    hidden, vocab = g("hidden_size"), g("vocab_size")
    heads, head_dim = g("num_attention_heads", 1), g("head_dim")
    head_dim = head_dim or (hidden // heads)
    kv = g("num_key_value_heads") or heads
    kinds = layer_kinds(cfg)
    q_out = heads * head_dim * (2 if cfg.get("attn_output_gate") else 1)
    attention = hidden * q_out + 2 * hidden * kv * head_dim + heads * head_dim * hidden
    parts: dict[str, int] = {"embed": vocab * hidden}
    if not (cfg.get("tie_word_embeddings") or config.get("tie_word_embeddings")):
        parts["lm_head"] = vocab * hidden
    n_attn = sum(1 for k in kinds if k != "linear")
    parts["attention"] = n_attn * attention
    n_lin = kinds.count("linear")
    if n_lin and g("linear_num_value_heads"):
        # in_proj_qkvz (q, k, v, z), in_proj_ba (b, a per value head), out_proj.
        kd = g("linear_num_key_heads") * g("linear_key_head_dim")
        vd = g("linear_num_value_heads") * g("linear_value_head_dim")
        proj = hidden * (2 * kd + 2 * vd) + hidden * 2 * g("linear_num_value_heads") + vd * hidden
        parts["gdn"] = n_lin * proj
        parts["conv1d"] = n_lin * (2 * kd + vd) * (g("linear_conv_kernel_dim") or 4)
    _mlp_params(cfg, len(kinds), hidden, parts)
    vision = config.get("vision_config")
    if isinstance(vision, Mapping) and text_config(config) is not config:
        parts["vision"] = _vision_params(vision)
    mtp_layers = g("mtp_num_hidden_layers") or g("num_nextn_predict_layers")
    if with_mtp and mtp_layers:
        per_layer = attention + parts.get("mlp", 0) // max(1, len(kinds))
        parts["mtp"] = mtp_layers * (per_layer + 2 * hidden * hidden)
    return {part: count for part, count in parts.items() if count > 0}


def _mlp_params(cfg: Mapping[str, Any], layers: int, hidden: int, parts: dict[str, int]) -> None:
    g = _getter(cfg)
    experts = g("num_experts") or g("num_local_experts") or g("n_routed_experts")
    dense = 3 * hidden * g("intermediate_size")
    if not experts:
        parts["mlp"] = layers * dense
        return
    moe_layers = [i for i in range(layers) if _is_moe_layer(cfg, i)]
    expert_size = g("moe_intermediate_size") or g("intermediate_size")
    parts["experts"] = len(moe_layers) * experts * 3 * hidden * expert_size
    parts["router"] = len(moe_layers) * hidden * experts
    shared = g("shared_expert_intermediate_size") or g("n_shared_experts") * expert_size
    if shared:
        parts["shared_expert"] = len(moe_layers) * 3 * hidden * shared
    parts["mlp"] = (layers - len(moe_layers)) * dense


def _is_moe_layer(cfg: Mapping[str, Any], index: int) -> bool:
    if index in (cfg.get("mlp_only_layers") or []):
        return False
    first_dense = cfg.get("first_k_dense_replace")
    if isinstance(first_dense, int) and index < first_dense:
        return False
    step = cfg.get("decoder_sparse_step")
    return not (isinstance(step, int) and step > 1 and (index + 1) % step != 0)


def _vision_params(vision: Mapping[str, Any]) -> int:
    g = _getter(vision)
    hidden = g("hidden_size") or g("embed_dim")
    depth = g("depth") or g("num_hidden_layers")
    inter = g("intermediate_size") or 4 * hidden
    merged = hidden * (g("spatial_merge_size") or 2) ** 2
    merger = merged * merged + merged * (g("out_hidden_size") or hidden)
    return depth * (4 * hidden * hidden + 2 * hidden * inter) + merger


def _getter(cfg: Mapping[str, Any]) -> Callable[..., int]:
    def get(key: str, default: int = 0) -> int:
        value = cfg.get(key)
        return int(value) if isinstance(value, int) and not isinstance(value, bool) else default

    return get


def estimate_weights(
    config: Mapping[str, Any], quant: Quantization, *, with_mtp: bool = False
) -> Weights:
    """Parameters × bytes per parameter, part by part, with the sentence that says so."""
    parts = count_params(config, with_mtp=with_mtp)
    model_dtype = str(text_config(config).get("dtype") or config.get("torch_dtype") or "")
    wide = 4.0 if "32" in model_dtype else 2.0
    total = 0.0
    quantized = 0
    for part, count in parts.items():
        keep = quant.scheme == "none" or part in quant.unquantized
        total += count * (wide if keep else quant.bytes_per_param)
        quantized += 0 if keep else count
    params = sum(parts.values())
    how = f"estimated: {params / 1e9:.2f}B parameters counted from config.json"
    if quant.scheme != "none":
        how += (
            f", {quantized / 1e9:.2f}B of them at {quant.scheme} "
            f"({quant.bytes_per_param:.4g} B/param, {quant.source}), the rest 16-bit"
        )
    else:
        how += f" × {wide:g} B/param"
    return Weights(int(total), exact=False, how=how, params=params)
