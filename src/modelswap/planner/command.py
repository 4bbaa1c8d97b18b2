"""``modelswap plan``: the arguments and the command (``cli.py`` only wires it in).

Exit codes: 0 fits (or sizes only, without GPU memory), 1 does not fit, 2 bad usage or a
model that cannot be read.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from modelswap.backends.registry import default_memory
from modelswap.planner.names import ENGINES, QUANT_NAMES

if TYPE_CHECKING:
    from modelswap.planner.memory import Plan

# The planner itself is imported by the functions that plan: the CLI adds these arguments to
# its parser on every start, and `check` or `diagnose` must not load the planner to do so.

EXIT_FITS, EXIT_NO_FIT, EXIT_USAGE = 0, 1, 2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "path",
        nargs="?",
        help="a model folder (config.json) or a .gguf file; with --config, a configured "
        "model's id or alias: the load dry run",
    )
    parser.add_argument("--config", help="YAML config file, to plan one of its models (--model)")
    parser.add_argument("--model", help="the configured model to plan (its command line's path)")
    parser.add_argument("--gpu", help="GPU memory, e.g. 32GiB (default: nvidia-smi, if present)")
    parser.add_argument("--utilization", type=float, help="vLLM --gpu-memory-utilization")
    parser.add_argument(
        "--max-model-len", "--ctx-size", dest="max_model_len", type=int, help="context (tokens)"
    )
    parser.add_argument("--kv-dtype", help="KV cache dtype: auto, bfloat16, fp8, f16, q8_0 …")
    parser.add_argument("--max-num-seqs", type=int, help="sequences at once (llama.cpp: -np)")
    parser.add_argument("--tensor-parallel-size", type=int, dest="tp", help="GPUs per replica")
    parser.add_argument("--engine", choices=ENGINES, help="default: llamacpp for GGUF, else vllm")
    parser.add_argument(
        "--quantization", choices=QUANT_NAMES, help="size the weights as this scheme"
    )
    parser.add_argument("--weights", help="weights' size if known, e.g. 22.07GiB")
    parser.add_argument("--allowance", help="activations/graphs/non-torch allowance, e.g. 2GiB")
    parser.add_argument(
        "--together",
        action="store_true",
        help="with --config: which models run side by side, printed as llama-swap YAML",
    )
    parser.add_argument(
        "--as",
        dest="as_form",
        choices=("groups", "matrix"),
        help="--together's YAML: groups (when the sets do not overlap) or matrix",
    )
    parser.add_argument(
        "--running", help="the dry run's state: models running now, comma-separated"
    )
    parser.add_argument("--json", action="store_true", help="print the plan as JSON")
    parser.add_argument("--svg", help="also write the memory basin as an SVG file")


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    from modelswap.planner.gpu import detect_gpu, parse_gpu

    out: dict[str, Any] = {}
    for field, value in (
        ("utilization", args.utilization),
        ("max_model_len", args.max_model_len),
        ("kv_dtype", args.kv_dtype),
        ("max_num_seqs", args.max_num_seqs),
        ("tensor_parallel", args.tp),
        ("engine", args.engine),
    ):
        if value is not None:
            out[field] = value
    if args.allowance:
        out["allowance_bytes"] = parse_gpu(args.allowance)
    gpu = (parse_gpu(args.gpu), "--gpu") if args.gpu else detect_gpu()
    if gpu is not None:
        out["gpu_bytes"], out["gpu_source"] = gpu
    return out


def build_plan(args: argparse.Namespace) -> Plan:
    """The plan the arguments ask for (raises ModelReadError, ConfigError, ValueError)."""
    from modelswap.planner.from_config import load_shape, plan_command
    from modelswap.planner.gpu import parse_gpu
    from modelswap.planner.hf import ModelReadError
    from modelswap.planner.memory import PlanInputs, make_plan

    overrides = _overrides(args)
    if args.model:
        from modelswap.config import load_config  # only with --config: `plan FILE` needs none

        config = load_config(args.config) if args.config else None
        if config is None:
            from modelswap.config import demo_config

            config = demo_config()
        model = config.resolve(args.model)
        if model is None:
            raise ModelReadError(f"no model {args.model!r} in {config.source}")
        plan = plan_command(model.cmd, overrides)
        if plan is None:
            raise ModelReadError(f"the command line of {model.id} names no local model path")
    else:
        if not args.path:
            raise ModelReadError("give a model folder or GGUF file, or --model ID")
        path = Path(args.path).expanduser()
        shape = load_shape(path, quantization=args.quantization)
        if "engine" not in overrides:
            overrides["engine"] = default_memory(gguf=shape.fmt == "gguf").engine
        plan = make_plan(shape, PlanInputs(**overrides))
    if args.weights:
        weights = parse_gpu(args.weights)
        shape = replace(
            plan.shape,
            weights=replace(plan.shape.weights, bytes=weights, exact=False, how="--weights"),
        )
        plan = make_plan(shape, plan.inputs)
    return plan


def run(args: argparse.Namespace) -> int:
    from modelswap.errors import ConfigError
    from modelswap.planner.hf import ModelReadError
    from modelswap.planner.render import plan_dict, svg, table

    try:
        plan = build_plan(args)
    except (ModelReadError, ConfigError, ValueError) as exc:
        print(f"modelswap plan: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.json:
        print(json.dumps(plan_dict(plan), indent=2))
    else:
        print(table(plan))
    if args.svg:
        Path(args.svg).write_text(svg(plan))
    return EXIT_NO_FIT if plan.fits is False else EXIT_FITS
