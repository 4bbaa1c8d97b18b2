"""Read a GGUF file's header — metadata and tensor table — and never its weights.

The key names, value types and per-type block sizes come from the ``gguf`` package (the
llama.cpp project's own definitions). The header is walked over a read-only memory map, so
only the pages it occupies are read; large arrays (the tokenizer's 150k strings) are skipped
rather than decoded, which keeps a read in the tens of milliseconds where
``gguf.GGUFReader`` (which decodes every array element) takes seconds. Files this reader
does not understand fall back to ``gguf.GGUFReader``.
"""

from __future__ import annotations

import functools
import mmap
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from modelswap.planner._gguf_constants import (
    GGML_QUANT_SIZES,
    GGUF_MAGIC,
    GGMLQuantizationType,
    GGUFValueType,
    Keys,
)
from modelswap.planner.hf import ModelReadError
from modelswap.planner.shape import Attention, LinearState, ModelShape, Weights

_SCALARS: dict[GGUFValueType, str] = {
    GGUFValueType.UINT8: "B",
    GGUFValueType.INT8: "b",
    GGUFValueType.UINT16: "H",
    GGUFValueType.INT16: "h",
    GGUFValueType.UINT32: "I",
    GGUFValueType.INT32: "i",
    GGUFValueType.FLOAT32: "f",
    GGUFValueType.BOOL: "?",
    GGUFValueType.UINT64: "Q",
    GGUFValueType.INT64: "q",
    GGUFValueType.FLOAT64: "d",
}
MAX_KEPT_ARRAY = 4096  # per-layer arrays are kept; longer ones (vocabularies) are skipped

# llama.cpp hard-codes the sliding-window layout of these architectures (src/llama-model.cpp):
# every Nth layer is full attention, the rest use the window.
_SWA_PATTERN = {"gemma2": 2, "gemma3": 6, "gpt-oss": 2, "cohere2": 4}


@dataclass(frozen=True, slots=True)
class GGUFHeader:
    """Metadata (large arrays replaced by their length) and tensor sizes in bytes."""

    metadata: Mapping[str, Any]
    tensor_bytes: Mapping[str, int]
    tensor_types: Mapping[str, str]


class _Cursor:
    def __init__(self, buf: mmap.mmap, order: str) -> None:
        self.buf, self.order, self.pos = buf, order, 0

    def unpack(self, fmt: str) -> Any:
        value = struct.unpack_from(self.order + fmt, self.buf, self.pos)[0]
        self.pos += struct.calcsize(fmt)
        return value

    def string(self) -> str:
        size = self.unpack("Q")
        raw = self.buf[self.pos : self.pos + size]
        self.pos += size
        return raw.decode("utf-8", errors="replace")

    def skip_strings(self, count: int) -> None:
        """Step over ``count`` length-prefixed strings (a vocabulary: 50k-250k of them), in one
        tight loop with locals: this loop is most of a header read."""
        length_at = struct.Struct(self.order + "Q").unpack_from
        buf, pos = self.buf, self.pos
        for _ in range(count):
            pos += 8 + length_at(buf, pos)[0]
        self.pos = pos

    def value(self, vtype: GGUFValueType) -> Any:
        if vtype is GGUFValueType.STRING:
            return self.string()
        if vtype is GGUFValueType.ARRAY:
            return self.array()
        fmt = _SCALARS.get(vtype)
        if fmt is None:
            raise ModelReadError(f"unknown GGUF value type {vtype}")
        return self.unpack(fmt)

    def array(self) -> Any:
        itype = GGUFValueType(self.unpack("I"))
        count = self.unpack("Q")
        if count > MAX_KEPT_ARRAY:
            if itype is GGUFValueType.STRING:
                self.skip_strings(count)
            elif itype in _SCALARS:
                self.pos += count * struct.calcsize(_SCALARS[itype])
            else:
                raise ModelReadError("nested GGUF arrays are not supported")
            return count
        return [self.value(itype) for _ in range(count)]


def read_header(path: Path) -> GGUFHeader:
    """The header of the GGUF file at ``path``; ModelReadError if it is not one. A file read
    before and unchanged since (same size and mtime) is not read again: configs often serve
    one file under several names (contexts, embeddings), and a reload plans them all again."""
    try:
        st = path.stat()
    except OSError as exc:
        raise ModelReadError(f"cannot read {path}: {exc}") from exc
    return _read_header_cached(str(path), st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=32)
def _read_header_cached(path: str, size: int, mtime_ns: int) -> GGUFHeader:
    del size, mtime_ns  # only the cache key: a changed file is read again
    return _read_header(Path(path))


def _read_header(path: Path) -> GGUFHeader:
    try:
        with path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            try:
                return _parse(buf)
            except ModelReadError:
                raise
            except (struct.error, ValueError, KeyError) as exc:
                failed: Exception = exc
    except (OSError, ValueError) as exc:  # mmap of an empty file raises ValueError
        if isinstance(exc, ModelReadError):
            raise
        raise ModelReadError(f"cannot read {path}: {exc}") from exc
    return _fallback(path, failed)


def _parse(buf: mmap.mmap) -> GGUFHeader:
    if struct.unpack_from("<I", buf, 0)[0] != GGUF_MAGIC:
        raise ModelReadError("not a GGUF file (bad magic)")
    version = struct.unpack_from("<I", buf, 4)[0]
    order = "<" if version & 0xFFFF else ">"  # a big-endian file reads as 0x0300_0000
    cursor = _Cursor(buf, order)
    cursor.pos = 4
    if cursor.unpack("I") not in (2, 3):
        raise ModelReadError("unsupported GGUF version")
    n_tensors, n_kv = cursor.unpack("Q"), cursor.unpack("Q")
    metadata: dict[str, Any] = {}
    for _ in range(n_kv):
        key = cursor.string()
        metadata[key] = cursor.value(GGUFValueType(cursor.unpack("I")))
    sizes: dict[str, int] = {}
    types: dict[str, str] = {}
    for _ in range(n_tensors):
        name = cursor.string()
        dims = [cursor.unpack("Q") for _ in range(cursor.unpack("I"))]
        qtype = GGMLQuantizationType(cursor.unpack("I"))
        cursor.unpack("Q")  # data offset: where the weights are, which we never read
        elements = 1
        for dim in dims:
            elements *= dim
        block, type_size = GGML_QUANT_SIZES[qtype]
        sizes[name] = elements * type_size // block
        types[name] = qtype.name
    return GGUFHeader(metadata, sizes, types)


def _fallback(path: Path, exc: Exception) -> GGUFHeader:
    """``gguf.GGUFReader`` (slow, but the reference) for files the fast walk trips over. The
    only place the whole ``gguf`` package (and with it numpy) is loaded; its enums are its own
    copies, hence the comparison by name."""
    from gguf import GGUFReader

    try:
        reader = GGUFReader(path)
    except Exception as err:
        raise ModelReadError(f"{path}: not a readable GGUF file ({exc}; {err})") from err
    metadata: dict[str, Any] = {}
    for key, field in reader.fields.items():
        arrayish = field.types and field.types[0].name == GGUFValueType.ARRAY.name
        metadata[key] = (
            len(field.data) if arrayish and len(field.data) > MAX_KEPT_ARRAY else (field.contents())
        )
    return GGUFHeader(
        metadata,
        {t.name: int(t.n_bytes) for t in reader.tensors},
        {t.name: t.tensor_type.name for t in reader.tensors},
    )


def _get(meta: Mapping[str, Any], template: str, arch: str) -> Any:
    return meta.get(template.format(arch=arch))


def _per_layer(value: Any, n: int) -> list[int]:
    if isinstance(value, list):
        return [int(v) for v in value[:n]] + [0] * (n - len(value))
    return [int(value or 0)] * n


def shape_from_gguf(path: Path) -> ModelShape:
    """The shape of a GGUF model: layers, heads and the exact weight bytes of its tensors."""
    header = read_header(path)
    meta = header.metadata
    arch = str(meta.get(Keys.General.ARCHITECTURE, "llama"))
    n = int(_get(meta, Keys.LLM.BLOCK_COUNT, arch) or 0)
    embd = int(_get(meta, Keys.LLM.EMBEDDING_LENGTH, arch) or 0)
    heads = _per_layer(_get(meta, Keys.Attention.HEAD_COUNT, arch), n)
    kv_heads = _per_layer(_get(meta, Keys.Attention.HEAD_COUNT_KV, arch) or heads, n)
    max_heads = max(heads or [1]) or 1
    k_len = int(_get(meta, Keys.Attention.KEY_LENGTH, arch) or embd // max_heads)
    v_len = int(_get(meta, Keys.Attention.VALUE_LENGTH, arch) or k_len)
    interval = _get(meta, Keys.LLM.FULL_ATTENTION_INTERVAL, arch)
    kinds = _kinds(meta, arch, n, kv_heads, interval)
    window = _get(meta, Keys.Attention.SLIDING_WINDOW, arch)
    kv = max(kv_heads) if kv_heads else 1
    full_n, swa_n, lin_n = (kinds.count(k) for k in ("full", "sliding", "linear"))
    total = sum(header.tensor_bytes.values())
    weights = Weights(
        total, exact=True, how=f"exact: GGUF tensor table ({len(header.tensor_bytes)} tensors)"
    )
    linear = _linear(meta, arch, lin_n) if lin_n else None
    return ModelShape(
        name=str(meta.get(Keys.General.NAME) or path.stem),
        source=str(path),
        fmt="gguf",
        architecture=arch,
        layers=n,
        full=Attention(full_n, kv, k_len, v_len) if full_n else None,
        sliding=Attention(swa_n, kv, k_len, v_len, int(window)) if swa_n and window else None,
        linear=linear,
        dtype="f16",
        weights=weights,
        max_position=int(_get(meta, Keys.LLM.CONTEXT_LENGTH, arch) or 0) or None,
    )


def _kinds(
    meta: Mapping[str, Any], arch: str, n: int, kv_heads: list[int], interval: Any
) -> list[str]:
    if arch in ("mamba", "mamba2", "rwkv6", "rwkv7"):
        return ["linear"] * n
    if isinstance(interval, int) and interval > 0:
        return ["full" if (i + 1) % interval == 0 else "linear" for i in range(n)]
    if any(h == 0 for h in kv_heads):  # hybrids mark recurrent layers with 0 KV heads
        return ["linear" if h == 0 else "full" for h in kv_heads]
    if not _get(meta, Keys.Attention.SLIDING_WINDOW, arch):
        return ["full"] * n
    pattern = _get(meta, Keys.Attention.SLIDING_WINDOW_PATTERN, arch)
    if isinstance(pattern, list) and len(pattern) >= n:
        return ["sliding" if flag else "full" for flag in pattern[:n]]
    every = pattern if isinstance(pattern, int) and pattern > 0 else _SWA_PATTERN.get(arch)
    if every:
        return ["full" if (i + 1) % every == 0 else "sliding" for i in range(n)]
    return ["sliding"] * n


def _linear(meta: Mapping[str, Any], arch: str, layers: int) -> LinearState | None:
    d_state = int(_get(meta, Keys.SSM.STATE_SIZE, arch) or 0)
    d_inner = int(_get(meta, Keys.SSM.INNER_SIZE, arch) or 0)
    groups = int(_get(meta, Keys.SSM.GROUP_COUNT, arch) or 1)
    kernel = int(_get(meta, Keys.SSM.CONV_KERNEL, arch) or 4)
    v_heads = int(_get(meta, Keys.SSM.TIME_STEP_RANK, arch) or 0)
    if not (d_state and d_inner and v_heads):
        return None
    # llama.cpp: n_embd_r = (d_conv-1)·(d_inner + 2·n_group·d_state), n_embd_s = d_state·d_inner.
    return LinearState(layers, groups, v_heads, d_state, d_inner // v_heads, kernel, "float32")
