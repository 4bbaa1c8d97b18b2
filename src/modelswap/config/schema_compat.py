"""The published JSON schema accepts what ``check`` accepts: llama-swap's spellings too.

``RawConfig`` describes a file *after* :mod:`modelswap.config.compat` rewrote llama-swap's
spellings and :mod:`modelswap.config.tree_macros` expanded macros. An editor validates the file
as written, so :func:`accept_llamaswap` widens the generated schema by exactly what those two
passes read: a macro (``${name}``) wherever a number goes; llama-swap's keys, each with the shape
compat takes (the keys it ignores: any value, described by why); top-level keys that hold YAML
anchors only (``defaults``, ``defs``, ``x-...``), which JSON cannot tell apart from others, so
they are allowed by name.
"""

from __future__ import annotations

import copy
from typing import Any

from modelswap.config.compat_keys import (
    CAPTURE_BUFFER,
    METRICS_WINDOW,
    MODEL_IGNORED,
    TIMEOUTS_IGNORED,
    TOP_IGNORED,
)

Schema = dict[str, Any]

MACRO_PATTERN = r"\$\{[^}]+\}"
# Names used for a key that only holds anchors (any other unknown key is still a typo).
ANCHOR_KEYS = r"^(x-.*|\..*|defs|defaults|anchors|templates|common|shared|base)$"
STRINGS: Schema = {"type": "array", "items": {"type": "string"}}
BOOLEAN: Schema = {"type": "boolean"}
ALIAS_OBJECT: Schema = {
    "type": "object",
    "properties": {"id": {"type": "string"}, "name": {"type": "string"}, "unlisted": {}},
    "required": ["id"],
}


def _ignored(reason: str) -> Schema:
    return {"description": f"llama-swap's; not acted on: {reason}"}


def _llamaswap(description: str, *options: Schema) -> Schema:
    return {"description": f"llama-swap's: {description}", "anyOf": list(options)}


def _widen(prop: Schema, *options: Schema) -> Schema:
    """``prop`` or any of ``options``, keeping its title, description and default."""
    meta: Schema = {k: prop[k] for k in ("title", "description", "default") if k in prop}
    inner = {k: v for k, v in prop.items() if k not in meta}
    return {**meta, "anyOf": [inner, *options]}


def accept_llamaswap(generated: Schema) -> Schema:
    schema: Schema = _macros_for_numbers(copy.deepcopy(generated))
    defs = schema["$defs"]
    top = schema["properties"]
    for key, reason in TOP_IGNORED.items():
        top.setdefault(key, _ignored(reason))
    top["store"] = _llamaswap("store.path is activity.path", {"type": "object"})
    integer = {"type": ["integer", "string"], "pattern": MACRO_PATTERN}
    top["metricsMaxInMemory"] = _llamaswap(f"activity.maxRows: {METRICS_WINDOW}", integer)
    top["captureBuffer"] = _llamaswap(f"activity.captureBytes: {CAPTURE_BUFFER}", integer)
    top["routing"] = _llamaswap("routing.router.settings.groups, scheduler priorities", {})
    top["models"] = _widen(top["models"], {"type": "null"})
    streams = r"(proxy|upstream|http)"
    lists = {"type": "string", "pattern": rf"^\s*{streams}(\s*,\s*{streams})*\s*$"}
    top["logToStdout"] = _widen(top["logToStdout"], lists)  # llama-swap's newest: a list
    top["selectors"]["additionalProperties"] = {
        "anyOf": [{"$ref": "#/$defs/RawSelector"}, {"type": "object"}]  # others warn
    }
    top["matrix"] = _widen(top["matrix"], {"type": "object"})  # spelled otherwise: warns
    schema["patternProperties"] = {ANCHOR_KEYS: {"description": "YAML anchors only"}}
    model = defs["RawModel"]["properties"]
    for key, reason in MODEL_IGNORED.items():
        model.setdefault(key, _ignored(reason))
    model["ttl"] = _widen(model["ttl"], {"const": -1})  # -1: globalTTL
    for where in (top, model):  # 0: the top level's, then the default (compat drops it)
        where["unloadTimeout"] = _widen(where["unloadTimeout"], {"const": 0})
    performance = defs["RawPerformance"]["properties"]
    performance["enable"] = _llamaswap("its first spelling of disabled (inverted)", BOOLEAN)
    for key in ("maxAge", "gc"):
        performance[key] = _ignored("llama-swap's first performance keys, fixed since")
    model["aliases"]["items"] = {"anyOf": [{"type": "string"}, ALIAS_OBJECT]}
    filters = defs["RawFilters"]["properties"]
    filters["stripParams"] = _widen(filters["stripParams"], {"type": "string"})
    filters["strip_params"] = _llamaswap("stripParams", STRINGS, {"type": "string"})
    filters["setParamsByID"] = _llamaswap("aliasFilters by name", {"type": "object"})
    timeouts = defs["RawTimeouts"]["properties"]
    for key, reason in TIMEOUTS_IGNORED.items():
        timeouts.setdefault(key, _ignored(reason))
    number = {"type": ["number", "string"], "minimum": 0, "pattern": MACRO_PATTERN}
    timeouts["responseHeader"] = _llamaswap("firstByte", number)
    for key in ("connect", "firstByte"):  # 0: no timeout in llama-swap (modelswap's default)
        timeouts[key] = _widen(timeouts[key], {"const": 0})
    hooks = defs["RawHooks"]["properties"]
    startup = {"type": "object", "properties": {"preload": STRINGS, "profile": {}}}
    hooks["on_startup"] = _llamaswap("onStartup", startup)
    defs["RawPeer"]["properties"].setdefault("tailcatKey", _ignored(TOP_IGNORED["tailcat"]))
    return schema


def _macros_for_numbers(node: Any) -> Any:
    """Every number may also be a string with a ``${macro}`` (expanded before types are
    checked). ``minimum`` applies to numbers only and ``pattern`` to strings only."""
    if isinstance(node, list):
        return [_macros_for_numbers(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: _macros_for_numbers(value) for key, value in node.items()}
    if out.get("type") in ("integer", "number"):
        out["type"] = [out["type"], "string"]
        out["pattern"] = MACRO_PATTERN
    return out
