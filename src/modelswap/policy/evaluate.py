"""Running a program over one request: conditions read, actions rewrite the body in place.

A missing path is *absent*: it equals nothing and is ordered against nothing (so ``x != 1``
is true when ``x`` is absent: ``!=`` is exactly ``not =``), and only ``is missing`` is true of
it; a JSON ``null`` is present. ``=`` compares within one kind (``"0.7"`` is not ``0.7``;
objects and arrays never compare); numbers compare as 64-bit floats, as llama-swap's do;
strings order byte by byte. ``matches`` is false for anything but a string.

Writes follow llama-swap's JSON library: missing objects on the way are created (an index
after them makes an array), a scalar in the way is replaced, an index past an array's end pads
it with nulls; a negative index that does not resolve (not an array, or too short) makes the
write (and the read) nothing. ``deny`` stops everything: the rest of the program, the policy
that applied it, and every program after it.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from modelswap.policy.nodes import (
    Action,
    AllOf,
    AnyOf,
    Compare,
    Condition,
    In,
    Kind,
    Literal,
    Matches,
    Namespace,
    Not,
    Op,
    Path,
    Presence,
    Program,
    Segment,
)
from modelswap.policy.program_errors import PolicyRuntimeError

MAX_APPLY_DEPTH = 32
"""Deepest chain of ``apply`` (cycles are refused at load; this guards a hand-built set)."""


class _Absent:
    __slots__ = ()

    def __repr__(self) -> str:
        return "ABSENT"


ABSENT = _Absent()


@dataclass(slots=True)
class Request:
    """What a program reads and rewrites. ``context`` changes in place, and so does
    ``body``'s top level; an object or array inside it is copied before it is first changed
    (``owned`` holds the copies), so the caller may pass a shallow copy of a parsed body it
    still needs as it was. ``changed`` says whether the body was written. ``headers`` must
    look names up without regard to case (aiohttp's headers do)."""

    body: dict[str, object]
    context: dict[str, str] = field(default_factory=dict)
    api_key: str | None = None
    model: str = ""
    path: str = ""
    method: str = ""
    headers: Mapping[str, str] = field(default_factory=dict)
    changed: bool = False
    owned: set[int] = field(default_factory=set)


@dataclass(frozen=True, slots=True)
class Denial:
    """A ``deny`` that fired: its status and message, and where it is written (what a person
    needs to find it): the program's name, the clause's line in that program's text, the rule
    as written, and the ``apply`` clauses that led there (``"hooks.on_request line 2"``,
    outermost first). Two denials are equal by status and message alone."""

    status: int
    message: str
    program: str = field(default="", compare=False)
    line: int = field(default=0, compare=False)
    rule: str = field(default="", compare=False)
    applied_by: tuple[str, ...] = field(default=(), compare=False)

    def provenance(self) -> dict[str, object]:
        """Where it fired, JSON-ready: ``{"program", "line", "rule"}`` and, when an ``apply``
        led there, ``"applied_by"``."""
        out: dict[str, object] = {"program": self.program, "line": self.line, "rule": self.rule}
        if self.applied_by:
            out["applied_by"] = list(self.applied_by)
        return out


def run(program: Program, library: Mapping[str, Program], request: Request) -> Denial | None:
    """Run ``program`` over ``request``; a :class:`Denial` when a ``deny`` fired.
    Raises :class:`PolicyRuntimeError` when a rewrite cannot be done."""
    return _run(program, library, request, ())


def _run(
    program: Program,
    library: Mapping[str, Program],
    request: Request,
    applied_by: tuple[str, ...],
) -> Denial | None:
    depth = len(applied_by)
    for clause in program.clauses:
        if clause.when is not None and not _holds(clause.when, request):
            continue
        action = clause.action
        if action is Action.DENY:
            return Denial(
                clause.status,
                clause.message,
                program=program.name,
                line=clause.line,
                rule=program.rule(clause),
                applied_by=applied_by,
            )
        if action is Action.APPLY:
            applied = library.get(clause.policy)
            if applied is None:
                raise PolicyRuntimeError(f"apply {clause.policy}: unknown policy")
            if depth >= MAX_APPLY_DEPTH:
                raise PolicyRuntimeError(
                    f"apply {clause.policy}: policy nesting deeper than {MAX_APPLY_DEPTH}"
                )
            here = f"{program.name or 'program'} line {clause.line}"
            denied = _run(applied, library, request, (*applied_by, here))
            if denied is not None:
                return denied
            continue
        path = clause.path
        assert path is not None  # default, set and remove have one (the parser's rule)
        if action is Action.REMOVE:
            _remove(path, request)
        elif action is Action.SET or read(path, request) is ABSENT:
            assert clause.value is not None
            _write(path, clause.value, request)
    return None


# -- reading ---------------------------------------------------------------------------------


def read(path: Path, request: Request) -> object:
    """The value at ``path``, or :data:`ABSENT`."""
    namespace = path.namespace
    if namespace is Namespace.BODY:
        segments = _resolved(path, request.body)
        return ABSENT if segments is None else _get(request.body, segments)
    if namespace is Namespace.CONTEXT:
        key = path.segments[0].key
        return request.context.get(key, ABSENT) if key is not None else ABSENT
    if namespace is Namespace.AUTH:
        return request.api_key or ABSENT
    field_name = path.segments[0].key
    if field_name == "model":
        text = request.model
    elif field_name == "path":
        text = request.path
    elif field_name == "method":
        text = request.method
    else:  # header.<name>: its first value
        text = request.headers.get(path.segments[1].key or "", "")
    return text or ABSENT


def _get(node: object, segments: tuple[Segment, ...]) -> object:
    for segment in segments:
        if isinstance(node, dict):
            key = segment.key if segment.key is not None else str(segment.index)
            if key not in node:
                return ABSENT
            node = node[key]
        elif isinstance(node, list):
            if segment.key is not None or segment.index >= len(node):
                return ABSENT
            node = node[segment.index]
        else:
            return ABSENT
    return node


def _resolved(path: Path, body: dict[str, object]) -> tuple[Segment, ...] | None:
    """``path``'s segments with negative indexes counted from the end of the arrays they
    index; None when one does not resolve."""
    if not path.negative:
        return path.segments
    out: list[Segment] = []
    for segment in path.segments:
        if segment.key is None and segment.index < 0:
            array = _get(body, tuple(out))
            if not isinstance(array, list) or segment.index + len(array) < 0:
                return None
            segment = Segment(index=segment.index + len(array))
        out.append(segment)
    return tuple(out)


# -- writing ---------------------------------------------------------------------------------


def _write(path: Path, literal: Literal, request: Request) -> None:
    if path.namespace is Namespace.CONTEXT:
        key = path.segments[0].key or ""
        if literal.kind is Kind.NULL:
            request.context.pop(key, None)
        else:
            value = literal.value if literal.kind is Kind.STRING else literal.raw
            request.context[key] = str(value)
        return
    segments = _resolved(path, request.body)
    if segments is None:
        return
    value = literal.value
    if isinstance(value, dict | list):
        value = copy.deepcopy(value)
    _put(request, segments, value, path.text)
    request.changed = True


Container = dict[str, object] | list[object]


def _own(container: Container, owned: set[int]) -> Container:
    """``container``, or a shallow copy of it that this run may change."""
    if id(container) in owned:
        return container
    mine = container.copy()
    owned.add(id(mine))
    return mine


def _put(request: Request, segments: tuple[Segment, ...], value: object, text: str) -> None:
    node: Container = request.body
    last = len(segments) - 1
    for position, segment in enumerate(segments):
        rest = segments[position + 1 :]
        if isinstance(node, dict):
            key = segment.key if segment.key is not None else str(segment.index)
            if position == last:
                node[key] = value
                return
            child = node.get(key)
            if not isinstance(child, dict | list):
                node[key] = _build(rest, value)
                return
            mine = _own(child, request.owned)
            node[key] = mine
            node = mine
            continue
        if segment.key is not None:
            raise PolicyRuntimeError(
                f"set {text}: cannot set array element for non-numeric key '{segment.key}'"
            )
        index = segment.index
        if index >= len(node):
            node.extend([None] * (index - len(node)))
            node.append(value if position == last else _build(rest, value))
            return
        if position == last:
            node[index] = value
            return
        child = node[index]
        if not isinstance(child, dict | list):
            node[index] = _build(rest, value)
            return
        mine = _own(child, request.owned)
        node[index] = mine
        node = mine


def _build(segments: tuple[Segment, ...], value: object) -> object:
    """A new value holding ``value`` at ``segments``: objects, or arrays (null-padded) for
    indexes."""
    for segment in reversed(segments):
        if segment.key is not None:
            value = {segment.key: value}
        else:
            value = [*([None] * segment.index), value]
    return value


def _remove(path: Path, request: Request) -> None:
    if path.namespace is Namespace.CONTEXT:
        request.context.pop(path.segments[0].key or "", None)
        return
    segments = _resolved(path, request.body)
    if segments is None or _get(request.body, segments) is ABSENT:
        return
    parent: Container = request.body
    for step in segments[:-1]:  # each exists (the value does): own the way down to it
        if isinstance(parent, dict):
            key = step.key if step.key is not None else str(step.index)
            mine = _own(parent[key], request.owned)  # type: ignore[arg-type]
            parent[key] = mine
        else:
            mine = _own(parent[step.index], request.owned)  # type: ignore[arg-type]
            parent[step.index] = mine
        parent = mine
    segment = segments[-1]
    if isinstance(parent, dict):
        key = segment.key if segment.key is not None else str(segment.index)
        if key in parent:
            del parent[key]
            request.changed = True
    elif isinstance(parent, list) and segment.key is None and segment.index < len(parent):
        del parent[segment.index]
        request.changed = True


# -- conditions ------------------------------------------------------------------------------


def _holds(condition: Condition, request: Request) -> bool:
    if isinstance(condition, Compare):
        value = read(condition.path, request)
        op = condition.op
        if op is Op.EQ:
            return _equals(value, condition.value)
        if op is Op.NE:
            return not _equals(value, condition.value)
        return _ordered(value, op, condition.value)
    if isinstance(condition, Presence):
        return (read(condition.path, request) is not ABSENT) == condition.present
    if isinstance(condition, Matches):
        value = read(condition.path, request)
        return isinstance(value, str) and condition.regex.search(value)
    if isinstance(condition, In):
        value = read(condition.path, request)
        return any(_equals(value, literal) for literal in condition.values)
    if isinstance(condition, AllOf):
        return all(_holds(item, request) for item in condition.items)
    if isinstance(condition, AnyOf):
        return any(_holds(item, request) for item in condition.items)
    assert isinstance(condition, Not)
    return not _holds(condition.inner, request)


def kind_of(value: object) -> Kind | None:
    """The JSON kind of a body value (None for :data:`ABSENT`)."""
    if value is None:
        return Kind.NULL
    if isinstance(value, bool):
        return Kind.BOOL
    if isinstance(value, int | float):
        return Kind.NUMBER
    if isinstance(value, str):
        return Kind.STRING
    if isinstance(value, dict):
        return Kind.OBJECT
    if isinstance(value, list):
        return Kind.ARRAY
    return None


def _float(value: object) -> float:
    assert isinstance(value, int | float)
    try:
        return float(value)
    except OverflowError:  # an integer beyond float64 reads as an infinity, as in Go
        return math.inf if value > 0 else -math.inf


def _equals(value: object, literal: Literal) -> bool:
    kind = kind_of(value)
    if kind is not literal.kind:
        return False
    if kind is Kind.NUMBER:
        return _float(value) == _float(literal.value)
    if kind in (Kind.OBJECT, Kind.ARRAY):
        return False
    return kind is Kind.NULL or value == literal.value


def _ordered(value: object, op: Op, literal: Literal) -> bool:
    kind = kind_of(value)
    if kind is not literal.kind:
        return False
    if kind is Kind.NUMBER:
        a, b = _float(value), _float(literal.value)
        order = -1 if a < b else 1 if a > b else 0  # NaN: neither, so 0 (as in Go)
    elif isinstance(value, str) and isinstance(literal.value, str):
        # Code point order is UTF-8's byte order, which Go compares.
        order = -1 if value < literal.value else 1 if value > literal.value else 0
    else:
        return False
    if op is Op.LT:
        return order < 0
    if op is Op.LE:
        return order <= 0
    if op is Op.GT:
        return order > 0
    return order >= 0
