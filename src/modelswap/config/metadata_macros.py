"""A model's ``metadata``: any JSON data, with macros expanded in its strings (llama-swap's rule).

A string that is exactly one reference, ``${NAME}``, becomes the value with its type: ``${PORT}``
an integer, a macro written as a number or a boolean that number or boolean. Every other string
is expanded as text. Keys are never expanded.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from modelswap.config.macros import Scope, expand
from modelswap.config.paths import Problems, key_path

MacroValue = str | int | float | bool

_WHOLE_REF_RE = re.compile(r"\$\{([^${}]*)\}")


def macro_text(value: MacroValue) -> str:
    """The text a macro value stands for: booleans as YAML writes them (``true``/``false``)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def resolve_metadata(
    metadata: Mapping[str, object],
    scope: Scope,
    typed_macros: Mapping[str, MacroValue],
    base: tuple[str | int, ...],
    problems: Problems,
) -> dict[str, object]:
    """``metadata`` with every string expanded. ``typed_macros`` are the model's macros over
    the top-level ones, as written (before they became text)."""

    def walk(item: object, where: tuple[str | int, ...]) -> object:
        if isinstance(item, str):
            return _string(item, scope, typed_macros, where, problems)
        if isinstance(item, list):
            return [walk(entry, (*where, index)) for index, entry in enumerate(item)]
        if isinstance(item, dict):
            return {key: walk(entry, (*where, key)) for key, entry in item.items()}
        return item

    return {key: walk(value, (*base, key)) for key, value in metadata.items()}


def _string(
    text: str,
    scope: Scope,
    typed_macros: Mapping[str, MacroValue],
    where: tuple[str | int, ...],
    problems: Problems,
) -> object:
    whole = _WHOLE_REF_RE.fullmatch(text)
    name = whole.group(1) if whole else None
    if name == "PORT" and "PORT" in scope.builtins:
        return int(scope.builtins["PORT"])
    if name is not None and name not in scope.builtins:
        typed = typed_macros.get(name)
        if typed is not None and not isinstance(typed, str):
            return typed
    result, found = expand(text, scope)
    problems.extend((key_path(*where), message) for message in found)
    return result
