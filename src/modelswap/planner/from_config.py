"""Plan a configured model: find the model its command line serves, and read the planner's
inputs (context, KV dtype, utilisation, TP …) from the same flags the backend will read.

Only local paths are planned (a folder with ``config.json`` or a ``.gguf`` file that exists);
a Hugging Face id the backend would download is not.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from modelswap.backends.configured import flag_values, parse_configured
from modelswap.backends.registry import memory_model, memory_model_for

if TYPE_CHECKING:
    from modelswap.planner.memory import Plan
    from modelswap.planner.shape import ModelShape

# The readers and the arithmetic are imported once a command line names a local model:
# `modelswap check` asks every configured model, and most name none (a hub id, a remote URL).

_MODEL_FLAGS = {"-m": "model", "--model": "model", "--model-path": "model"}
_FLAGS = {
    "--gpu-memory-utilization": "utilization",
    "--kv-cache-dtype": "kv_dtype",
    "-ctk": "kv_dtype",
    "--cache-type-k": "kv_dtype",
    "--tensor-parallel-size": "tp",
    "-tp": "tp",
    "--max-num-batched-tokens": "batched",
    "--mamba-ssm-cache-dtype": "ssm_dtype",
    "--speculative-config": "speculative",
    "--quantization": "quantization",
}


def load_shape(
    path: Path, *, quantization: str | None = None, with_mtp: bool = False
) -> ModelShape:
    """The shape of a model folder (``config.json``) or a ``.gguf`` file."""
    from modelswap.planner.hf import ModelReadError, read_hf_folder

    if path.is_dir():
        return read_hf_folder(path, quantization=quantization, with_mtp=with_mtp)
    if path.is_file():
        # Imported here: the gguf package brings numpy, which HF folders do not need.
        from modelswap.planner.gguf_reader import shape_from_gguf

        return shape_from_gguf(path)
    raise ModelReadError(f"{path}: no such model folder or GGUF file")


def is_model_path(path: Path) -> bool:
    return (path.is_dir() and (path / "config.json").is_file()) or (
        path.is_file() and path.suffix.lower() == ".gguf"
    )


def find_model_path(argv: Sequence[str]) -> Path | None:
    """The local model a command line serves: ``-m``/``--model``/``--model-path``, the argument
    after ``serve`` (``vllm serve PATH``), else any argument that is a local model."""
    candidates: list[str] = []
    named = flag_values(argv, _MODEL_FLAGS).get("model")
    if named:
        candidates.append(named)
    for index, arg in enumerate(argv[:-1]):
        if arg == "serve":
            candidates.append(argv[index + 1])
    candidates.extend(argv)
    for text in candidates:
        if not text or text.startswith("-"):
            continue
        path = Path(os.path.expanduser(text))
        if is_model_path(path):
            return path
    return None


def engine_of(argv: Sequence[str], path: Path) -> str:
    """The memory model of the server ``argv`` starts (its adapter's), else the file's."""
    return memory_model_for(argv, path).engine


def inputs_from_argv(argv: Sequence[str], engine: str) -> dict[str, Any]:
    """PlanInputs fields the command line sets (only those it sets)."""
    limits = parse_configured(argv)
    values = flag_values(argv, _FLAGS)
    out: dict[str, Any] = {"engine": engine}
    if not memory_model(engine).paged:  # llama.cpp's cells: -c over -np slots (default 1)
        if limits.ctx_size:
            out["max_model_len"] = limits.ctx_size
        out["max_num_seqs"] = limits.parallel or 1
    else:
        if limits.max_model_len:
            out["max_model_len"] = limits.max_model_len
        if limits.max_num_seqs:
            out["max_num_seqs"] = limits.max_num_seqs
    for key, field, kind in (
        ("utilization", "utilization", float),
        ("tp", "tensor_parallel", int),
        ("batched", "max_batched_tokens", int),
    ):
        try:
            if key in values:
                out[field] = kind(values[key])
        except ValueError:
            continue
    if values.get("kv_dtype"):
        out["kv_dtype"] = values["kv_dtype"]
    if values.get("ssm_dtype") and values["ssm_dtype"] != "auto":
        out["ssm_dtype"] = values["ssm_dtype"]
    spec = _speculative_tokens(values.get("speculative", ""))
    if spec:
        out["spec_tokens"] = spec
    return out


def _speculative_tokens(text: str) -> int:
    try:
        data = json.loads(text) if text else None
    except ValueError:
        return 0
    value = data.get("num_speculative_tokens") if isinstance(data, dict) else None
    return value if isinstance(value, int) and value > 0 else 0


def plan_command(argv: Sequence[str], overrides: Mapping[str, Any] | None = None) -> Plan | None:
    """The plan for the model ``argv`` serves, with ``overrides`` (PlanInputs fields) applied
    over what the command line says; None when it names no local model."""
    path = find_model_path(argv)
    if path is None:
        return None
    from modelswap.planner.memory import PlanInputs, make_plan

    fields = inputs_from_argv(argv, engine_of(argv, path))
    fields.update(overrides or {})
    inputs = PlanInputs(**fields)
    quantization = flag_values(argv, _FLAGS).get("quantization")
    shape = load_shape(
        path,
        quantization="fp8" if quantization == "fp8" else None,
        with_mtp=inputs.spec_tokens > 0,
    )
    return make_plan(shape, inputs)


def check_line(argv: Sequence[str], gpu: tuple[int, str] | None = None) -> str | None:
    """One line for ``modelswap check``: what the planner says about this command's model.
    Never raises: a model it cannot read gets a short reason instead."""
    try:
        overrides = {"gpu_bytes": gpu[0], "gpu_source": gpu[1]} if gpu else {}
        plan = plan_command(argv, overrides)
    except Exception as exc:  # planning is optional: check must never fail because of it
        return f"not planned ({exc})"
    if plan is None:
        return None
    from modelswap.planner.render import _size

    text = (
        f"weights {_size(plan.weights_bytes)}, KV {_size(plan.kv_bytes_per_token)}/token "
        f"({plan.kv_dtype}), {_size(plan.kv_bytes_at_context)} at {plan.context:,} tokens"
    )
    if plan.state_bytes_per_seq:
        text += f", state {_size(plan.state_bytes_per_seq)}/sequence"
    if plan.fits is not None:
        text += f"; {plan.verdict} in {_size(plan.inputs.gpu_bytes)} × {plan.utilization:g}"
        if plan.fixes:
            text += f" ({plan.fixes[0]})"
    return text
