"""Macros across the whole YAML tree, before types are checked (as llama-swap reads them).

llama-swap substitutes macros and ``${env.NAME}`` wherever they are written, so
``startPort: ${port}``, ``ttl: "${MODEL_TTL}"`` or ``apiKey: "Bearer-${env.KEY}"`` are valid
there. This pass runs on the parsed YAML, before llama-swap's spellings are rewritten and before
validation:

* a value that is one reference to a macro (``${ctx}``) takes the macro's value with its type;
  to an environment variable or a text macro, the text is read as a YAML number or boolean when
  the key is one that takes numbers (``ttl``, ``startPort``, ``timeouts.connect`` ...);
* in a longer string, each reference to a macro or a set variable is replaced by its text.

Built-ins (``${PORT}``, ``${MODEL_ID}``, ``${PID}``) and unknown names are left as written, for
the per-model expansion (which reports unknown ones, with a did-you-mean). The fields that
per-model expansion handles itself (``cmd``, ``proxy``, ``env``, ``name``, ``metadata`` ...) and
the macro definitions are not touched here, so their escapes and secrets keep their rules.
"""

from __future__ import annotations

import re
import types
import typing
from collections.abc import Mapping
from typing import Any

import yaml
from pydantic import BaseModel

from modelswap.config import schema, schema_sched
from modelswap.config.macros import ENV_PREFIX, MAX_DEPTH, MacroSyntaxError, Ref, parse, ref

# Fields expanded per model, later, with their own rules (escapes, ${PID}, secrets, types).
_LATER = frozenset(
    {
        "cmd",
        "cmdStop",
        "cmd_stop",
        "proxy",
        "env",
        "checkEndpoint",
        "useModelName",
        "name",
        "description",
        "metadata",
        "apiKey",
        "macros",
    }
)
_TOP_LATER = frozenset({"macros", "apiKeys"})
_WHOLE_ENV_RE = re.compile(r"\$\{env\.[A-Za-z_][A-Za-z0-9_]*\}")


def _numeric_keys() -> frozenset[str]:
    """YAML keys that take a number or a boolean and never a string, in every schema model."""
    numeric: set[str] = set()
    textual: set[str] = set()
    for module in (schema, schema_sched):
        for value in vars(module).values():
            if not (isinstance(value, type) and issubclass(value, BaseModel)):
                continue
            if value is BaseModel:
                continue
            for name, info in value.model_fields.items():
                key = info.alias or name
                kinds = _kinds(info.annotation)
                if str in kinds:
                    textual.add(key)
                elif kinds & {int, float, bool}:
                    numeric.add(key)
    return frozenset(numeric - textual)


def _kinds(annotation: object) -> set[object]:
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _kinds(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        return {k for arg in typing.get_args(annotation) for k in _kinds(arg)}
    if origin is typing.Literal:
        return {type(arg) for arg in typing.get_args(annotation)}
    return {annotation}


NUMERIC_KEYS = _numeric_keys()


def expand_tree(data: dict[Any, Any], environ: Mapping[str, str]) -> set[str]:
    """Expand macros in ``data`` in place; return the environment values used (secrets)."""
    secrets: set[str] = set()
    top = _macros(data.get("macros"))
    for key, value in list(data.items()):
        if key in _TOP_LATER:
            continue
        if key == "models" and isinstance(value, dict):
            for model in value.values():
                if isinstance(model, dict):
                    scope = {**top, **_macros(model.get("macros"))}
                    _walk(model, scope, environ, secrets, skip=_LATER)
            continue
        data[key] = _value(key, value, top, environ, secrets)
    return secrets


def _macros(value: object) -> dict[str, object]:
    if not isinstance(value, dict):
        return {}
    return {k: v for k, v in value.items() if isinstance(k, str)}


def _walk(
    node: dict[Any, Any] | list[Any],
    scope: Mapping[str, object],
    environ: Mapping[str, str],
    secrets: set[str],
    skip: frozenset[str] = frozenset(),
) -> None:
    items = list(node.items()) if isinstance(node, dict) else list(enumerate(node))
    for key, value in items:
        if isinstance(key, str) and key in skip:
            continue
        node[key] = _value(key, value, scope, environ, secrets)


def _value(
    key: object,
    value: object,
    scope: Mapping[str, object],
    environ: Mapping[str, str],
    secrets: set[str],
) -> object:
    if isinstance(value, dict | list):
        # a peer's apiKey is read here (it has no later expansion); a model's is read later
        _walk(value, scope, environ, secrets)
        return value
    if not isinstance(value, str) or "${" not in value or "$${" in value:
        return value
    if key == "apiKey" and _WHOLE_ENV_RE.fullmatch(value.strip()):
        return value  # a peer's ${env.NAME} key: compat reads it as apiKeyEnv
    try:
        parts = parse(value)
    except MacroSyntaxError:
        return value  # reported where the string is used
    if len(parts) == 1 and isinstance(parts[0], Ref) and parts[0].name in scope:
        typed = _typed_macro(parts[0].name, scope, environ, secrets, ())
        if isinstance(typed, str) and key in NUMERIC_KEYS:
            return _scalar(typed)
        return typed
    text = "".join(_text(part, scope, environ, secrets, ()) for part in parts)
    if len(parts) == 1 and key in NUMERIC_KEYS:
        return _scalar(text)
    return text


def _typed_macro(
    name: str,
    scope: Mapping[str, object],
    environ: Mapping[str, str],
    secrets: set[str],
    stack: tuple[str, ...],
) -> object:
    value = scope[name]
    if not isinstance(value, str):
        return value
    if name in stack or len(stack) >= MAX_DEPTH:
        return ref(name)  # a cycle: left for the per-model expansion to report
    try:
        parts = parse(value)
    except MacroSyntaxError:
        return value
    return "".join(_text(part, scope, environ, secrets, (*stack, name)) for part in parts)


def _text(
    part: str | Ref,
    scope: Mapping[str, object],
    environ: Mapping[str, str],
    secrets: set[str],
    stack: tuple[str, ...],
) -> str:
    if isinstance(part, str):
        return part
    name = part.name
    if name.startswith(ENV_PREFIX) and name[len(ENV_PREFIX) :] in environ:
        found = environ[name[len(ENV_PREFIX) :]]
        if found:
            secrets.add(found)
        return found
    if name in scope:
        typed = _typed_macro(name, scope, environ, secrets, stack)
        if isinstance(typed, bool):
            return "true" if typed else "false"
        return str(typed)
    return ref(name)


def _scalar(text: str) -> object:
    """``"300"`` -> 300, ``"0.5"`` -> 0.5, ``"true"`` -> True; anything else stays text."""
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        return text
    return value if isinstance(value, int | float) else text
