"""The planner's named choices — engines and quantization schemes — apart from the arithmetic.

``modelswap plan``'s arguments offer them (argparse ``choices``), and the CLI builds every
subcommand's parser on each start: ``check`` and ``diagnose`` read them without loading the
planner (``memory``, ``params``, ``shape``).
"""

from __future__ import annotations

from modelswap.backends.registry import MEMORY_MODELS

# The memory models the backends' adapters give the planner (backends/registry.py).
ENGINES = tuple(MEMORY_MODELS)

# Bytes per parameter of quantized storage (values plus their scales).
QUANT_BYTES: dict[str, float] = {
    "nvfp4": 4.5 / 8,  # E2M1 + one FP8 scale per 16 values (docs/backends.md §18)
    "mxfp4": 4.25 / 8,  # E2M1 + one E8M0 scale per 32 values (OCP MX spec)
    "fp8": 1.0,
    "int8": 1.0,
    "int4": 0.5 + 2 / 128,  # 4-bit values + an FP16 scale per group of 128 (AWQ/GPTQ)
}
QUANT_NAMES = ("none", *QUANT_BYTES)
