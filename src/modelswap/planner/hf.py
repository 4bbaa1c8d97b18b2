"""Read a Hugging Face model folder: ``config.json``, and the weights' exact size from the
safetensors headers (or the index's ``total_size``) — never the tensors themselves.

A safetensors file starts with an 8-byte little-endian length and a JSON header naming every
tensor's dtype, shape and byte range; only that header is read (bounded). Without headers or
an index, the weights are estimated from the config (``params.py``).
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from modelswap.planner.params import detect_quantization, estimate_weights
from modelswap.planner.shape import ModelShape, Weights, shape_from_config

MAX_CONFIG_BYTES = 4 * 1024 * 1024
MAX_HEADER_BYTES = 100 * 1024 * 1024  # safetensors' own limit
INDEX_NAME = "model.safetensors.index.json"


class ModelReadError(ValueError):
    """The path is not a model the planner can read (with the reason)."""


def read_json(path: Path, limit: int = MAX_CONFIG_BYTES) -> dict[str, Any]:
    try:
        with path.open("rb") as f:
            data = f.read(limit + 1)
    except OSError as exc:
        raise ModelReadError(f"cannot read {path}: {exc.strerror or exc}") from exc
    if len(data) > limit:
        raise ModelReadError(f"{path} is larger than {limit} bytes")
    try:
        parsed = json.loads(data)
    except ValueError as exc:
        raise ModelReadError(f"{path} is not valid JSON: {exc}") from exc
    if not isinstance(parsed, dict):
        raise ModelReadError(f"{path} does not hold a JSON object")
    return parsed


def safetensors_header(path: Path) -> dict[str, Any]:
    """The JSON header of one safetensors file (the first 8 + N bytes only)."""
    try:
        with path.open("rb") as f:
            head = f.read(8)
            if len(head) != 8:
                raise ModelReadError(f"{path} is too short to be a safetensors file")
            (size,) = struct.unpack("<Q", head)
            if size > MAX_HEADER_BYTES:
                raise ModelReadError(f"{path}: header of {size} bytes is implausibly large")
            raw = f.read(size)
    except OSError as exc:
        raise ModelReadError(f"cannot read {path}: {exc.strerror or exc}") from exc
    try:
        header = json.loads(raw)
    except ValueError as exc:
        raise ModelReadError(f"{path}: the safetensors header is not JSON") from exc
    if not isinstance(header, dict):
        raise ModelReadError(f"{path}: the safetensors header is not an object")
    return header


def exact_weights(folder: Path, *, skip_prefixes: tuple[str, ...] = ()) -> Weights | None:
    """Bytes per dtype summed over every tensor in the folder's safetensors headers; else the
    index's ``metadata.total_size``; else None. Tensors whose name starts with one of
    ``skip_prefixes`` (e.g. an MTP head vLLM does not load) are left out."""
    files = sorted(folder.glob("*.safetensors"))
    if files:
        by_dtype: dict[str, int] = {}
        skipped = 0
        for file in files:
            for name, info in safetensors_header(file).items():
                if name == "__metadata__" or not isinstance(info, Mapping):
                    continue
                begin, end = info.get("data_offsets", (0, 0))
                nbytes = int(end) - int(begin)
                if skip_prefixes and name.startswith(skip_prefixes):
                    skipped += nbytes
                    continue
                dtype = str(info.get("dtype", "?"))
                by_dtype[dtype] = by_dtype.get(dtype, 0) + nbytes
        how = f"exact: safetensors headers of {len(files)} file(s)"
        if skipped:
            how += f", less {skipped / 2**30:.2f} GiB of MTP tensors (loaded only for MTP)"
        return Weights(sum(by_dtype.values()), exact=True, how=how, by_dtype=by_dtype)
    index = folder / INDEX_NAME
    if index.is_file():
        meta = read_json(index, MAX_HEADER_BYTES).get("metadata")
        total = meta.get("total_size") if isinstance(meta, Mapping) else None
        if isinstance(total, int) and total > 0:
            return Weights(total, exact=True, how=f"exact: {INDEX_NAME} total_size")
    return None


def read_hf_folder(
    folder: Path, *, quantization: str | None = None, with_mtp: bool = False
) -> ModelShape:
    """The shape of the model in ``folder`` (which holds ``config.json``)."""
    config_path = folder / "config.json"
    if not config_path.is_file():
        raise ModelReadError(f"{folder} has no config.json")
    config = read_json(config_path)
    hf_quant = folder / "hf_quant_config.json"  # older ModelOpt checkpoints
    if "quantization_config" not in config and hf_quant.is_file():
        quant_section = read_json(hf_quant).get("quantization")
        if isinstance(quant_section, Mapping):
            config = {
                **config,
                "quantization_config": {"quant_method": "modelopt", **quant_section},
            }
    weights = None
    if quantization is None:
        skip = () if with_mtp else ("mtp.", "model.mtp.")
        weights = exact_weights(folder, skip_prefixes=skip)
    if weights is None:
        quant = detect_quantization(config, quantization)
        weights = estimate_weights(config, quant, with_mtp=with_mtp)
    return shape_from_config(config, name=folder.name, source=str(folder), weights=weights)
