"""Request filters: strip, default and force keys of a parsed JSON request body. Pure.

Layers apply in order (the model's, then the alias's); within a layer: ``stripParams`` first,
then ``defaultParams`` (only keys the body lacks), then ``setParams`` (forced). The caller
re-serialises the body only when something changed (``http/relay/dispatch.prepare_body``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from modelswap.config.resolved import Filters

PROTECTED = "model"


def _same(a: object, b: object) -> bool:
    """JSON equality (``1`` and ``true`` differ, key order does not matter)."""
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def _apply_layer(data: dict[str, object], layer: Filters) -> bool:
    changed = False
    for key in layer.strip_params:
        if key in data and key != PROTECTED:
            del data[key]
            changed = True
    for key, value in layer.default_params.items():
        if key not in data and key != PROTECTED:
            data[key] = value
            changed = True
    for key, value in layer.set_params.items():
        if key != PROTECTED and (key not in data or not _same(data[key], value)):
            data[key] = value
            changed = True
    return changed


def apply_layers(data: dict[str, object], layers: Iterable[Filters]) -> bool:
    """Apply ``layers`` to a parsed body in place; True if anything changed."""
    changed = False
    for layer in layers:
        changed = _apply_layer(data, layer) or changed
    return changed
