"""The ``gguf`` package's ``constants`` module — key names, value types, block sizes —
loaded on its own, without the package.

``import gguf.constants`` runs ``gguf/__init__.py`` first, which imports the readers, the
writers and numpy (tens of MB, ~0.2 s) — none of which the header walk needs. The constants
module itself imports only ``enum`` and ``typing``, so it is executed here from its file, under
a private name; ``gguf`` and numpy stay unloaded until a file needs ``gguf.GGUFReader``.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

_NAME = "modelswap.planner._gguf_constants_module"


def _load() -> ModuleType:
    loaded = sys.modules.get("gguf.constants") or sys.modules.get(_NAME)
    if loaded is not None:
        return loaded
    package = importlib.util.find_spec("gguf")  # finds the package without running it
    if package is None or not package.submodule_search_locations:
        raise ImportError("the gguf package is not installed")
    path = Path(next(iter(package.submodule_search_locations))) / "constants.py"
    spec = importlib.util.spec_from_file_location(_NAME, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[_NAME] = module  # enum and dataclass machinery look the module up by name
    spec.loader.exec_module(module)
    return module


if TYPE_CHECKING:
    from gguf.constants import (
        GGML_QUANT_SIZES,
        GGUF_MAGIC,
        GGMLQuantizationType,
        GGUFValueType,
        Keys,
    )
else:
    _constants = _load()
    GGML_QUANT_SIZES = _constants.GGML_QUANT_SIZES
    GGUF_MAGIC = _constants.GGUF_MAGIC
    GGMLQuantizationType = _constants.GGMLQuantizationType
    GGUFValueType = _constants.GGUFValueType
    Keys = _constants.Keys

__all__ = ["GGML_QUANT_SIZES", "GGUF_MAGIC", "GGMLQuantizationType", "GGUFValueType", "Keys"]
