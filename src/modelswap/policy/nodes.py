"""The syntax tree of a program: clauses, paths, literals, conditions. Immutable."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from modelswap.policy.regex import Regex


class Namespace(enum.Enum):
    BODY = "body"  # the JSON request body (a bare path, or body.<path>)
    CONTEXT = "context"  # context.<key>: a bag of strings, written into the activity record
    AUTH = "auth"  # auth.key: the API key the client sent (read-only)
    REQUEST = "request"  # request.model|path|method|header.<name> (read-only)


class Kind(enum.Enum):
    """A JSON value's kind; ``=`` and the ordering operators compare within one kind only."""

    NULL = "null"
    BOOL = "bool"
    NUMBER = "number"
    STRING = "string"
    OBJECT = "object"
    ARRAY = "array"


@dataclass(frozen=True, slots=True)
class Segment:
    """``.name`` (``key`` set) or ``[index]`` (``key`` None; a negative index counts from the
    end of the array)."""

    key: str | None = None
    index: int = 0


@dataclass(frozen=True, slots=True)
class Path:
    namespace: Namespace
    segments: tuple[Segment, ...]  # after the namespace word (body: the body path itself)
    text: str  # as written, for messages
    line: int
    col: int
    negative: bool = False  # some index is negative: resolved against the body at run time

    @property
    def first_key(self) -> str | None:
        """The body key a body path starts with (what ``model``'s protection looks at)."""
        if self.namespace is not Namespace.BODY or not self.segments:
            return None
        return self.segments[0].key


@dataclass(frozen=True, slots=True)
class Literal:
    """A value written in the program. ``value`` is what a body write puts in (copied each
    time when it is a list or object); ``raw`` is its compact JSON as written (numbers keep
    their spelling), what a ``context.<key>`` write stores for anything but a string."""

    kind: Kind
    value: object
    raw: str


# -- conditions ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AllOf:
    """``a and b and ...`` (a chain is one node, so a long one costs no recursion)."""

    items: tuple[Condition, ...]


@dataclass(frozen=True, slots=True)
class AnyOf:
    """``a or b or ...``."""

    items: tuple[Condition, ...]


@dataclass(frozen=True, slots=True)
class Not:
    inner: Condition


class Op(enum.Enum):
    EQ = "="
    NE = "!="
    LT = "<"
    LE = "<="
    GT = ">"
    GE = ">="


@dataclass(frozen=True, slots=True)
class Compare:
    path: Path
    op: Op
    value: Literal


@dataclass(frozen=True, slots=True)
class Matches:
    path: Path
    regex: Regex


@dataclass(frozen=True, slots=True)
class Presence:
    path: Path
    present: bool  # ``is present`` (True) or ``is missing`` (False)


@dataclass(frozen=True, slots=True)
class In:
    path: Path
    values: tuple[Literal, ...]


Condition = AllOf | AnyOf | Not | Compare | Matches | Presence | In


# -- clauses ---------------------------------------------------------------------------------


class Action(enum.Enum):
    DEFAULT = "default"
    SET = "set"
    REMOVE = "remove"
    APPLY = "apply"
    DENY = "deny"


@dataclass(frozen=True, slots=True)
class Clause:
    """One ``ACTION [when CONDITION]``; which fields are set depends on the action."""

    action: Action
    line: int
    col: int
    path: Path | None = None  # default, set, remove
    value: Literal | None = None  # default, set
    policy: str = ""  # apply
    status: int = 403  # deny
    message: str = ""  # deny
    when: Condition | None = None
    end_line: int = field(default=0, compare=False)  # its last line (a condition may go on)


@dataclass(frozen=True, slots=True)
class Program:
    """Its clauses; ``name`` (the config key it came from, ``hooks.on_request``) and ``lines``
    (its text as written) only say where a ``deny`` fired: they never change what it does."""

    clauses: tuple[Clause, ...]
    name: str = field(default="", compare=False)
    lines: tuple[str, ...] = field(default=(), compare=False)

    def rule(self, clause: Clause) -> str:
        """``clause`` as written: its lines, each stripped (empty when the text is unknown)."""
        last = max(clause.line, clause.end_line)
        return "\n".join(line.strip() for line in self.lines[clause.line - 1 : last])

    @property
    def applies(self) -> tuple[str, ...]:
        """The policies ``apply`` names, in order, each once."""
        return tuple(dict.fromkeys(c.policy for c in self.clauses if c.action is Action.APPLY))

    def __len__(self) -> int:
        return len(self.clauses)
