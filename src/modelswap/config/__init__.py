"""Configuration: YAML -> macros -> validated, resolved, immutable :class:`Config`.

This package imports nothing from modelswap but :mod:`modelswap.errors`.
"""

from __future__ import annotations

from modelswap.config.demo import DEMO_CONFIG_NAME, demo_config
from modelswap.config.load import load_config, load_config_text, override_listen
from modelswap.config.resolved import Config, ModelConfig, Timeouts
from modelswap.config.schema import config_json_schema

__all__ = [
    "DEMO_CONFIG_NAME",
    "Config",
    "ModelConfig",
    "Timeouts",
    "config_json_schema",
    "demo_config",
    "load_config",
    "load_config_text",
    "override_listen",
]
