"""llama-swap's swap matrix, the language: which models may run together.

Pure. ``vars`` name models (``g: gemma-model``); each of ``sets`` is an expression over them:
``&`` (run together), ``|`` (one or the other), parentheses, and ``+name`` (another set's
expression). :func:`expand` turns an expression into its alternatives: the sets of models that
may run at once (``(g | q) & v`` -> ``{g, v}``, ``{q, v}``). ``&`` binds tighter than ``|``.
The solver that chooses among them is ``routing/matrix_swapper.py``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

Alternatives = tuple[frozenset[str], ...]
MAX_ALTERNATIVES = 4096  # an expression that expands further is refused (bounded work)
_TOKEN = re.compile(r"\s*(?:(?P<op>[&|()])|\+(?P<ref>[A-Za-z0-9_.-]+)|(?P<var>[A-Za-z0-9_.-]+))")


class MatrixError(ValueError):
    """An expression that does not parse, names an unknown var or set, or refers to itself."""


def expand(
    expression: str,
    variables: Mapping[str, str],
    sets: Mapping[str, str],
    _seen: tuple[str, ...] = (),
) -> Alternatives:
    """The alternatives ``expression`` allows, as sets of model ids (vars resolved)."""
    tokens = _tokens(expression)
    parser = _Parser(tokens, variables, sets, _seen)
    result = parser.union()
    if parser.pos != len(tokens):
        raise MatrixError(f"unexpected {tokens[parser.pos][1]!r} in {expression!r}")
    return result


def _tokens(text: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    pos = 0
    text = text.rstrip()
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None or match.end() == pos:
            raise MatrixError(f"cannot read {text[pos:]!r}")
        kind = match.lastgroup or "op"
        out.append((kind, match.group(kind)))
        pos = match.end()
    return out


class _Parser:
    def __init__(
        self,
        tokens: list[tuple[str, str]],
        variables: Mapping[str, str],
        sets: Mapping[str, str],
        seen: tuple[str, ...],
    ) -> None:
        self.tokens, self.variables, self.sets, self.seen = tokens, variables, sets, seen
        self.pos = 0

    def peek(self) -> tuple[str, str] | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def union(self) -> Alternatives:
        found = list(self.product())
        while self.peek() == ("op", "|"):
            self.pos += 1
            found += [alt for alt in self.product() if alt not in found]
        return tuple(found)

    def product(self) -> Alternatives:
        found = self.atom()
        while self.peek() == ("op", "&"):
            self.pos += 1
            right = self.atom()
            found = tuple(dict.fromkeys(a | b for a in found for b in right))
            if len(found) > MAX_ALTERNATIVES:
                raise MatrixError(f"expands to more than {MAX_ALTERNATIVES} alternatives")
        return found

    def atom(self) -> Alternatives:
        token = self.peek()
        if token is None:
            raise MatrixError("the expression ends too early")
        self.pos += 1
        kind, text = token
        if token == ("op", "("):
            inner = self.union()
            if self.peek() != ("op", ")"):
                raise MatrixError("a '(' is not closed")
            self.pos += 1
            return inner
        if kind == "ref":
            if text not in self.sets:
                raise MatrixError(f"+{text} is not a set")
            if text in self.seen:
                raise MatrixError(f"+{text} refers to itself")
            return expand(self.sets[text], self.variables, self.sets, (*self.seen, text))
        if kind == "var":
            if text not in self.variables:
                raise MatrixError(f"{text!r} is not one of the vars")
            return (frozenset({self.variables[text]}),)
        raise MatrixError(f"unexpected {text!r}")


def all_alternatives(variables: Mapping[str, str], sets: Mapping[str, str]) -> Alternatives:
    """Every set's alternatives, in the file's order, without repeats."""
    found: list[frozenset[str]] = []
    for name, expression in sets.items():
        for alt in expand(expression, variables, sets, (name,)):
            if alt not in found:
                found.append(alt)
    return tuple(found)
