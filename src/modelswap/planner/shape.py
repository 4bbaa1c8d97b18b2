"""What the planner needs to know about a model, whatever file it came from.

A :class:`ModelShape` is pure data: the layer kinds (full attention, sliding-window attention,
linear attention / GDN), their heads and head sizes, and the weights' size. ``hf.py`` and
``gguf_reader.py`` build it; ``kv.py`` and ``memory.py`` only read it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

# Bytes per element of the dtypes that configs and flags name (docs/backends.md §14).
DTYPE_BYTES: dict[str, float] = {
    "float32": 4,
    "fp32": 4,
    "f32": 4,
    "bfloat16": 2,
    "bf16": 2,
    "float16": 2,
    "fp16": 2,
    "f16": 2,
    "half": 2,
    "fp8": 1,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
    "fp8_ds_mla": 1,
    # llama.cpp cache types: 32 values in a block plus its scale (and minimum).
    "q8_0": 34 / 32,
    "q4_0": 18 / 32,
    "q4_1": 20 / 32,
    "q5_0": 22 / 32,
    "q5_1": 24 / 32,
    "iq4_nl": 18 / 32,
}


def dtype_bytes(name: str) -> float:
    """Bytes per element of ``name`` (``"bfloat16"``, ``"fp8"``, ``"q8_0"`` …); ValueError if
    unknown."""
    key = name.strip().lower().removeprefix("torch.")
    if key not in DTYPE_BYTES:
        raise ValueError(f"unknown dtype {name!r} (known: {', '.join(sorted(DTYPE_BYTES))})")
    return DTYPE_BYTES[key]


@dataclass(frozen=True, slots=True)
class Attention:
    """A set of attention layers that share a shape. ``window`` is None for full attention,
    else the sliding window in tokens."""

    layers: int
    kv_heads: int
    head_dim_k: int
    head_dim_v: int
    window: int | None = None

    def bytes_per_token(self, dtype: float, tp: int = 1) -> float:
        """K and V of one token across these layers, per GPU at tensor parallel ``tp`` (KV
        heads are split, and replicated when there are fewer heads than GPUs)."""
        heads = -(-self.kv_heads // tp)
        return self.layers * heads * (self.head_dim_k + self.head_dim_v) * dtype


@dataclass(frozen=True, slots=True)
class LinearState:
    """Gated DeltaNet (or Mamba-2) layers: a fixed state per sequence, whatever its length.

    Sizes follow vLLM's ``gated_delta_net_state_shape`` and llama.cpp's ``n_embd_r`` /
    ``n_embd_s`` (docs/backends.md §15): conv state ``(kernel-1) × conv_dim``, recurrent state
    ``v_heads × v_dim × k_dim``, with ``conv_dim = 2·k_heads·k_dim + v_heads·v_dim``.
    """

    layers: int
    k_heads: int
    v_heads: int
    k_dim: int
    v_dim: int
    conv_kernel: int
    ssm_dtype: str = "float32"

    def conv_dim(self, tp: int = 1) -> int:
        return (2 * self.k_heads * self.k_dim + self.v_heads * self.v_dim) // tp

    def conv_elements(self, tp: int = 1, spec_tokens: int = 0) -> int:
        """Per layer: (kernel - 1 + speculative tokens) × conv_dim / TP."""
        return (self.conv_kernel - 1 + spec_tokens) * self.conv_dim(tp)

    def ssm_elements(self, tp: int = 1) -> int:
        """Per layer: (v_heads / TP) × v_dim × k_dim."""
        return (self.v_heads // tp) * self.v_dim * self.k_dim


@dataclass(frozen=True, slots=True)
class Weights:
    """The weights' size in bytes and how it was found: ``exact`` (file headers) or an
    estimate (parameters × bytes per parameter), with the sentence that says which."""

    bytes: int
    exact: bool
    how: str
    params: int | None = None
    by_dtype: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ModelShape:
    name: str
    source: str
    fmt: str  # "hf" or "gguf"
    architecture: str
    layers: int
    full: Attention | None
    sliding: Attention | None
    linear: LinearState | None
    dtype: str
    weights: Weights
    max_position: int | None = None
    notes: tuple[str, ...] = ()

    @property
    def hybrid(self) -> bool:
        return self.linear is not None and self.linear.layers > 0

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "source": self.source,
            "format": self.fmt,
            "architecture": self.architecture,
            "layers": self.layers,
            "dtype": self.dtype,
            "weights_bytes": self.weights.bytes,
            "weights_exact": self.weights.exact,
            "weights_source": self.weights.how,
        }
        if self.weights.params is not None:
            out["params"] = self.weights.params
        for key, attn in (("full_attention", self.full), ("sliding_attention", self.sliding)):
            if attn is not None:
                out[key] = {
                    "layers": attn.layers,
                    "kv_heads": attn.kv_heads,
                    "head_dim": attn.head_dim_k,
                    **({"window": attn.window} if attn.window else {}),
                }
        if self.linear is not None:
            lin = self.linear
            out["linear_attention"] = {
                "layers": lin.layers,
                "k_heads": lin.k_heads,
                "v_heads": lin.v_heads,
                "k_dim": lin.k_dim,
                "v_dim": lin.v_dim,
                "conv_kernel": lin.conv_kernel,
                "ssm_dtype": lin.ssm_dtype,
            }
        if self.max_position is not None:
            out["max_position_embeddings"] = self.max_position
        if self.notes:
            out["notes"] = list(self.notes)
        return out


def text_config(config: Mapping[str, Any]) -> Mapping[str, Any]:
    """The language model's config: ``text_config`` (multimodal checkpoints such as
    Qwen3.5/3.6, docs/backends.md §14), else ``llm_config``, else the config itself."""
    for key in ("text_config", "llm_config", "language_config"):
        nested = config.get(key)
        if isinstance(nested, Mapping) and nested.get("num_hidden_layers"):
            return nested
    return config


def _int(cfg: Mapping[str, Any], *keys: str) -> int | None:
    for key in keys:
        value = cfg.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def layer_kinds(cfg: Mapping[str, Any]) -> list[str]:
    """One of ``full``, ``sliding`` or ``linear`` per layer, from ``layer_types`` when the
    config has it, else derived: ``full_attention_interval`` (every Nth layer full, the rest
    linear), Gemma-2 (alternating), Gemma-3 (``sliding_window_pattern``), or a
    ``sliding_window`` that applies to every layer (Mistral-7B-v0.1)."""
    n = _int(cfg, "num_hidden_layers", "num_layers", "n_layer") or 0
    types = cfg.get("layer_types")
    if isinstance(types, list) and len(types) == n:
        return [_kind(str(t)) for t in types]
    interval = _int(cfg, "full_attention_interval")
    if interval and _int(cfg, "linear_num_value_heads"):
        return ["full" if (i + 1) % interval == 0 else "linear" for i in range(n)]
    window = _int(cfg, "sliding_window")
    if window is None or cfg.get("use_sliding_window") is False:
        return ["full"] * n
    model_type = str(cfg.get("model_type", ""))
    if model_type.startswith("gemma2"):
        return ["sliding" if i % 2 == 0 else "full" for i in range(n)]
    pattern = _int(cfg, "sliding_window_pattern")
    if pattern is None and model_type.startswith("gemma3"):
        pattern = 6
    if pattern:
        return ["full" if (i + 1) % pattern == 0 else "sliding" for i in range(n)]
    return ["sliding"] * n


def _kind(layer_type: str) -> str:
    text = layer_type.lower()
    if "sliding" in text or "local" in text or "chunked" in text:
        return "sliding"
    if "linear" in text or "mamba" in text or "deltanet" in text or "recurrent" in text:
        return "linear"
    return "full"


def shape_from_config(
    config: Mapping[str, Any], *, name: str, source: str, weights: Weights
) -> ModelShape:
    """The shape of a Hugging Face ``config.json`` (already parsed)."""
    cfg = text_config(config)
    kinds = layer_kinds(cfg)
    heads = _int(cfg, "num_attention_heads", "n_head") or 1
    hidden = _int(cfg, "hidden_size", "d_model") or 0
    kv_heads = _int(cfg, "num_key_value_heads", "num_kv_heads") or heads
    head_dim = _int(cfg, "head_dim") or (hidden // heads if hidden else 0)
    head_k, head_v = head_dim, head_dim
    notes: list[str] = []
    if _int(cfg, "kv_lora_rank"):  # MLA (DeepSeek-V2/V3): one latent vector per token
        kv_heads = 1
        head_k = (_int(cfg, "kv_lora_rank") or 0) + (_int(cfg, "qk_rope_head_dim") or 0)
        head_v = 0
        notes.append("MLA attention: one compressed latent per token and layer")
    counts = {kind: kinds.count(kind) for kind in ("full", "sliding", "linear")}
    full = Attention(counts["full"], kv_heads, head_k, head_v) if counts["full"] else None
    window = _int(cfg, "sliding_window", "attention_chunk_size")
    sliding = (
        Attention(counts["sliding"], kv_heads, head_k, head_v, window)
        if counts["sliding"] and window
        else None
    )
    linear = None
    if counts["linear"]:
        linear = _linear_state(cfg, counts["linear"])
        if linear is None:
            notes.append(f"{counts['linear']} linear-attention layers of an unknown kind: no state")
    dtype = str(cfg.get("dtype") or cfg.get("torch_dtype") or config.get("torch_dtype") or "")
    return ModelShape(
        name=name,
        source=source,
        fmt="hf",
        architecture=_architecture(config),
        layers=len(kinds),
        full=full,
        sliding=sliding,
        linear=linear,
        dtype=dtype.removeprefix("torch.") or "bfloat16",
        weights=weights,
        max_position=_int(cfg, "max_position_embeddings", "max_sequence_length"),
        notes=tuple(notes),
    )


def _linear_state(cfg: Mapping[str, Any], layers: int) -> LinearState | None:
    v_heads = _int(cfg, "linear_num_value_heads")
    k_heads = _int(cfg, "linear_num_key_heads")
    k_dim = _int(cfg, "linear_key_head_dim")
    v_dim = _int(cfg, "linear_value_head_dim")
    if not (v_heads and k_heads and k_dim and v_dim):
        return None
    kernel = _int(cfg, "linear_conv_kernel_dim", "conv_kernel") or 4
    ssm = str(cfg.get("mamba_ssm_dtype") or cfg.get("dtype") or cfg.get("torch_dtype") or "")
    return LinearState(layers, k_heads, v_heads, k_dim, v_dim, kernel, ssm or "bfloat16")


def _architecture(config: Mapping[str, Any]) -> str:
    archs = config.get("architectures")
    if isinstance(archs, list) and archs:
        return str(archs[0])
    return str(config.get("model_type", "unknown"))
