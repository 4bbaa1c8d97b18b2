"""Macro expansion: pure string functions, no I/O.

A reference is ``${NAME}``; ``$${`` is an escape that produces a literal ``${``. Names resolve,
in order of precedence, to built-ins (``PORT``, ``MODEL_ID``, ``PID``), the model's macros, the
top-level macros (both already merged into :attr:`Scope.macros` by the caller) and
``${env.NAME}`` (the environment captured at load time). Macro values may reference other
macros; they are expanded recursively, with cycle detection and a depth cap. The expanded value
of a macro is inserted verbatim: it is never rescanned, so an escape inside a macro value stays a
literal ``${``.

Expansion never raises for a bad reference: it returns the text it could build and the list of
problems, so a loader can report every problem at once.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

MAX_DEPTH = 32
"""Deepest chain of macros referencing macros that expansion follows."""

BUILTINS = ("PORT", "MODEL_ID", "PID")
"""Names modelswap defines itself; a user macro may not redefine them."""

ENV_PREFIX = "env."

MACRO_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*")
ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

# Order matters: the escape first, then a complete reference, then an unterminated one.
_TOKEN_RE = re.compile(r"\$\$\{|\$\{([^${}]*)\}|\$\{")


class MacroSyntaxError(ValueError):
    """The text holds a ``${`` that does not start a well-formed reference."""


@dataclass(frozen=True, slots=True)
class Ref:
    """One ``${name}`` reference in a parsed text."""

    name: str


@dataclass(frozen=True, slots=True)
class Scope:
    """Everything a reference may resolve to, for one field of one model.

    ``keep`` names are emitted verbatim as ``${NAME}`` (``PID`` in ``cmdStop``, substituted by the
    supervisor at stop time). ``unavailable`` maps names that exist but may not be used here to
    the reason (``PID`` outside ``cmdStop``).
    """

    builtins: Mapping[str, str]
    macros: Mapping[str, str]
    environ: Mapping[str, str]
    keep: frozenset[str] = frozenset()
    unavailable: Mapping[str, str] = field(default_factory=dict)
    # Collects every value taken from the environment: they are treated as secrets.
    secrets: set[str] = field(default_factory=set)


def ref(name: str) -> str:
    """The reference syntax for ``name``: ``ref("PORT") == "${PORT}"``."""
    return "${" + name + "}"


def parse(text: str) -> list[str | Ref]:
    """Split ``text`` into literal strings and references; escapes become literal ``${``.

    Raises :class:`MacroSyntaxError` for a ``${`` without a closing ``}``.
    """
    parts: list[str | Ref] = []
    pos = 0
    for match in _TOKEN_RE.finditer(text):
        if match.start() > pos:
            parts.append(text[pos : match.start()])
        token = match.group(0)
        if token == "$${":
            parts.append("${")
        elif match.group(1) is not None:
            parts.append(Ref(match.group(1)))
        else:
            raise MacroSyntaxError(
                f"unterminated ${{ at offset {match.start()} (write $${{ for a literal ${{)"
            )
        pos = match.end()
    if pos < len(text):
        parts.append(text[pos:])
    return parts


def references(text: str) -> list[str]:
    """Names referenced directly by ``text``, in order, without duplicates; lenient on syntax."""
    names: list[str] = []
    for match in _TOKEN_RE.finditer(text):
        name = match.group(1)
        if name is not None and name not in names:
            names.append(name)
    return names


def transitive_references(texts: Iterable[str], macros: Mapping[str, str]) -> set[str]:
    """Every name ``texts`` reference, directly or through the values of ``macros``.

    Unknown names are included (they reference nothing further); cycles are tolerated.
    """
    seen: set[str] = set()
    pending = [name for text in texts for name in references(text)]
    while pending:
        name = pending.pop()
        if name in seen:
            continue
        seen.add(name)
        if name in macros:
            pending.extend(references(macros[name]))
    return seen


def name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a user macro's name, or ``None`` if it can."""
    if name in BUILTINS:
        return f"{ref(name)} is built in and cannot be redefined"
    if name.startswith(ENV_PREFIX):
        return f"macro names may not start with {ENV_PREFIX!r} (that prefix reads the environment)"
    if not MACRO_NAME_RE.fullmatch(name):
        return (
            f"{name!r} is not a valid macro name (use letters, digits, '_', '.', '-'; "
            "start with a letter or '_')"
        )
    return None


def did_you_mean(word: str, choices: Iterable[str]) -> str | None:
    """The closest of ``choices`` to ``word`` (case/underscore-insensitive first), or ``None``."""
    options = list(choices)
    folded = {_fold(c): c for c in options}
    if _fold(word) in folded:
        return folded[_fold(word)]
    close = difflib.get_close_matches(word, options, n=1, cutoff=0.6)
    return close[0] if close else None


def _fold(text: str) -> str:
    return text.lower().replace("_", "").replace("-", "")


def expand(text: str, scope: Scope) -> tuple[str, list[str]]:
    """Expand every reference in ``text``; return the result and the problems found (no raise).

    On a problem the offending reference expands to the empty string, so the returned text is
    only meaningful when the problem list is empty.
    """
    problems: list[str] = []
    result = _expand(text, scope, (), problems)
    unique = list(dict.fromkeys(problems))
    return result, unique


def _expand(text: str, scope: Scope, stack: tuple[str, ...], problems: list[str]) -> str:
    try:
        parts = parse(text)
    except MacroSyntaxError as exc:
        problems.append(_within(stack) + str(exc))
        return ""
    out: list[str] = []
    for part in parts:
        if isinstance(part, Ref):
            out.append(_resolve(part.name, scope, stack, problems))
        else:
            out.append(part)
    return "".join(out)


def _resolve(name: str, scope: Scope, stack: tuple[str, ...], problems: list[str]) -> str:
    if name in scope.keep:
        return ref(name)
    if name in scope.builtins:
        return scope.builtins[name]
    if name in scope.unavailable:
        problems.append(_within(stack) + f"{ref(name)} {scope.unavailable[name]}")
        return ""
    if name.startswith(ENV_PREFIX):
        return _resolve_env(name, scope, stack, problems)
    if name in scope.macros:
        if name in stack:
            cycle = (*stack[stack.index(name) :], name)
            problems.append("macro cycle: " + " -> ".join(ref(n) for n in cycle))
            return ""
        if len(stack) >= MAX_DEPTH:
            problems.append(f"macros are nested deeper than {MAX_DEPTH} levels at {ref(name)}")
            return ""
        return _expand(scope.macros[name], scope, (*stack, name), problems)
    known = [*(n for n in BUILTINS if n not in scope.unavailable), *scope.macros]
    suggestion = did_you_mean(name, known)
    hint = f" (did you mean {ref(suggestion)}?)" if suggestion else ""
    problems.append(_within(stack) + f"{ref(name)} is not a known macro{hint}")
    return ""


def _resolve_env(name: str, scope: Scope, stack: tuple[str, ...], problems: list[str]) -> str:
    var = name[len(ENV_PREFIX) :]
    if not ENV_NAME_RE.fullmatch(var):
        problems.append(_within(stack) + f"{ref(name)}: {var!r} is not a valid variable name")
        return ""
    if var not in scope.environ:
        problems.append(_within(stack) + f"{ref(name)}: environment variable {var} is not set")
        return ""
    value = scope.environ[var]
    scope.secrets.add(value)
    return value


def _within(stack: tuple[str, ...]) -> str:
    return f"in macro {ref(stack[-1])}: " if stack else ""


def clean_command(text: str) -> str:
    """Prepare a multi-line command string for splitting, the way llama-swap does.

    Drops lines whose first non-blank character is ``#`` and turns a trailing backslash
    (line continuation) into a space. Newlines that remain are whitespace to ``shlex``.
    """
    lines: list[str] = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            lines.append(line.rstrip()[:-1] + " ")
        else:
            lines.append(line)
    return "\n".join(lines)
