"""The grammar, parsed by recursive descent into :mod:`modelswap.policy.nodes`.

::

    program    = [ clause { NEWLINE clause } ] EOF
    clause     = action [ "when" condition ]
    action     = "default" wpath "to" value | "set" wpath "to" value | "remove" wpath
               | "apply" IDENT | "deny" [ NUMBER ] STRING        (* status 400..599 *)
    value      = scalar | "[" [ value { "," value } ] "]" | OBJECT
    scalar     = STRING | NUMBER | "true" | "false" | "null"
    condition  = and { "or" and }
    and        = not { "and" not }
    not        = "not" not | "(" condition ")" | predicate
    predicate  = rpath ( "=" | "==" | "!=" | "<" | "<=" | ">" | ">=" ) scalar
               | rpath "matches" REGEX | rpath "is" ( "present" | "missing" )
               | rpath "in" "[" [ scalar { "," scalar } ] "]"
    path       = IDENT { "." IDENT | "[" integer "]" }

A path's first word picks its namespace: ``body.`` (explicit), ``context.<key>``,
``auth.key``, ``request.model|path|method|header.<name>``; anything else (and a namespace word
alone) is a body path. Only body and context paths can be written. Syntax errors, a regular
expression RE2 refuses and a path that cannot be are :class:`PolicyError` with the line:column
of the offending token.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace

from modelswap.policy.lexer import MAX_NESTING, T, Token, lex
from modelswap.policy.nodes import (
    Action,
    AllOf,
    AnyOf,
    Clause,
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
from modelswap.policy.program_errors import PolicyError
from modelswap.policy.regex import Regex, RegexError

MAX_INDEX = 999_999
"""Largest array index a path may name: a write past an array's end pads it with nulls (as
llama-swap's JSON library does), so an index is a size too."""

_INTEGER_RE = re.compile(r"-?[0-9]+")
_ACTIONS = "an action (default, set, remove, apply, deny)"
_OPS = {T.EQ: Op.EQ, T.NE: Op.NE, T.LT: Op.LT, T.LE: Op.LE, T.GT: Op.GT, T.GE: Op.GE}
_REQUEST_FIELDS = ("model", "path", "method")


def parse(source: str, *, name: str = "") -> Program:
    """Parse ``source``. Raises :class:`PolicyError` (with line:column). ``name`` (where it is
    written: a config key) and ``source``'s lines are what a ``deny`` that fires quotes."""
    program = _Parser(lex(source)).program()
    return replace(program, name=name, lines=tuple(source.splitlines()))


def _json_text(value: str) -> str:
    return json.dumps(value, ensure_ascii=False)


def _number(text: str) -> int | float:
    if _INTEGER_RE.fullmatch(text):
        return int(text)
    return float(text)


class _Parser:
    def __init__(self, tokens: list[Token]) -> None:
        self.tokens = tokens
        self.pos = 0
        self.depth = 0

    # -- tokens ------------------------------------------------------------------------------

    def peek(self) -> Token:
        return self.tokens[self.pos]

    def next(self) -> Token:
        token = self.tokens[self.pos]
        if token.kind is not T.EOF:
            self.pos += 1
        return token

    def expect(self, kind: T, what: str) -> Token:
        token = self.peek()
        if token.kind is not kind:
            raise _unexpected(token, what)
        return self.next()

    def expect_word(self, word: str) -> None:
        token = self.peek()
        if not token.is_word(word):
            raise _unexpected(token, f"'{word}'")
        self.next()

    def deeper(self, token: Token) -> None:
        self.depth += 1
        if self.depth > MAX_NESTING:
            raise PolicyError(token.line, token.col, f"nested deeper than {MAX_NESTING} levels")

    # -- clauses -----------------------------------------------------------------------------

    def program(self) -> Program:
        clauses: list[Clause] = []
        while self.peek().kind is not T.EOF:
            clause = self.clause()
            clauses.append(replace(clause, end_line=self.tokens[self.pos - 1].line))
            token = self.peek()
            if token.kind is T.NEWLINE:
                self.next()
            elif token.kind is not T.EOF:
                raise _unexpected(token, "end of line")
        return Program(tuple(clauses))

    def clause(self) -> Clause:
        token = self.peek()
        if token.kind is not T.IDENT:
            raise _unexpected(token, _ACTIONS)
        word = token.text
        if word in ("default", "set"):
            self.next()
            path = self.path(write=True)
            self.expect_word("to")
            value = self.value()
            clause = Clause(Action(word), token.line, token.col, path=path, value=value)
        elif word == "remove":
            self.next()
            clause = Clause(Action.REMOVE, token.line, token.col, path=self.path(write=True))
        elif word == "apply":
            self.next()
            name = self.expect(T.IDENT, "a policy name")
            clause = Clause(Action.APPLY, name.line, name.col, policy=name.text)
        elif word == "deny":
            self.next()
            status = 403
            if self.peek().kind is T.NUMBER:
                number = self.next()
                if not _INTEGER_RE.fullmatch(number.text) or not 400 <= int(number.text) <= 599:
                    raise PolicyError(
                        number.line,
                        number.col,
                        "deny status must be an integer between 400 and 599",
                    )
                status = int(number.text)
            message = self.expect(T.STRING, "a quoted message")
            clause = Clause(Action.DENY, token.line, token.col, status=status, message=message.text)
        else:
            raise _unexpected(token, _ACTIONS)
        if self.peek().is_word("when"):
            self.next()
            return replace(clause, when=self.condition())
        return clause

    # -- paths -------------------------------------------------------------------------------

    def path(self, *, write: bool) -> Path:
        first = self.expect(T.IDENT, "a field path")
        segments = [Segment(key=first.text)]
        text = first.text
        while True:
            token = self.peek()
            if token.kind is T.DOT:
                self.next()
                name = self.expect(T.IDENT, "a field name after '.'")
                segments.append(Segment(key=name.text))
                text += "." + name.text
            elif token.kind is T.LBRACKET:
                self.next()
                number = self.expect(T.NUMBER, "an array index")
                if not _INTEGER_RE.fullmatch(number.text):
                    raise PolicyError(number.line, number.col, "array index must be an integer")
                index = int(number.text)
                if abs(index) > MAX_INDEX:
                    raise PolicyError(
                        number.line, number.col, f"array index is larger than {MAX_INDEX}"
                    )
                self.expect(T.RBRACKET, "']'")
                segments.append(Segment(index=index))
                text += f"[{number.text}]"
            else:
                return _classify(segments, text, first, write=write)

    # -- values ------------------------------------------------------------------------------

    def value(self) -> Literal:
        token = self.peek()
        if token.kind is T.OBJECT:
            self.next()
            return Literal(Kind.OBJECT, token.value, token.text)
        if token.kind is T.LBRACKET:
            self.deeper(token)
            self.next()
            items: list[Literal] = []
            while self.peek().kind is not T.RBRACKET:
                if items:
                    self.expect(T.COMMA, "',' or ']'")
                items.append(self.value())
            self.next()
            self.depth -= 1
            raw = "[" + ",".join(item.raw for item in items) + "]"
            return Literal(Kind.ARRAY, [item.value for item in items], raw)
        return self.scalar()

    def scalar(self) -> Literal:
        token = self.peek()
        if token.kind is T.STRING:
            self.next()
            return Literal(Kind.STRING, token.text, _json_text(token.text))
        if token.kind is T.NUMBER:
            self.next()
            return Literal(Kind.NUMBER, _number(token.text), token.text)
        if token.kind is T.IDENT and token.text in ("true", "false"):
            self.next()
            return Literal(Kind.BOOL, token.text == "true", token.text)
        if token.is_word("null"):
            self.next()
            return Literal(Kind.NULL, None, "null")
        if token.kind in (T.OBJECT, T.LBRACKET):
            raise PolicyError(
                token.line,
                token.col,
                "object and array literals are only allowed in set and default values",
            )
        raise _unexpected(token, "a value (string, number, true, false, null)")

    # -- conditions --------------------------------------------------------------------------

    def condition(self) -> Condition:
        items = [self.conjunction()]
        while self.peek().is_word("or"):
            self.next()
            items.append(self.conjunction())
        return items[0] if len(items) == 1 else AnyOf(tuple(items))

    def conjunction(self) -> Condition:
        items = [self.negation()]
        while self.peek().is_word("and"):
            self.next()
            items.append(self.negation())
        return items[0] if len(items) == 1 else AllOf(tuple(items))

    def negation(self) -> Condition:
        token = self.peek()
        if token.is_word("not"):
            self.deeper(token)
            self.next()
            inner = self.negation()
            self.depth -= 1
            return Not(inner)
        if token.kind is T.LPAREN:
            self.deeper(token)
            self.next()
            inner = self.condition()
            self.expect(T.RPAREN, "')'")
            self.depth -= 1
            return inner
        return self.predicate()

    def predicate(self) -> Condition:
        path = self.path(write=False)
        token = self.peek()
        if token.kind in _OPS:
            self.next()
            return Compare(path, _OPS[token.kind], self.scalar())
        if token.is_word("is"):
            self.next()
            word = self.peek()
            if word.is_word("present") or word.is_word("missing"):
                self.next()
                return Presence(path, word.text == "present")
            raise _unexpected(word, "'present' or 'missing'")
        if token.is_word("matches"):
            self.next()
            pattern = self.expect(T.REGEX, "a /regex/")
            try:
                regex = Regex(pattern.text)
            except RegexError as exc:
                raise PolicyError(pattern.line, pattern.col, f"invalid regex: {exc}") from None
            return Matches(path, regex)
        if token.is_word("in"):
            self.next()
            self.expect(T.LBRACKET, "'['")
            values: list[Literal] = []
            while self.peek().kind is not T.RBRACKET:
                if values:
                    self.expect(T.COMMA, "',' or ']'")
                values.append(self.scalar())
            self.next()
            return In(path, tuple(values))
        raise _unexpected(token, "a comparison operator, 'is', 'matches' or 'in'")


def _unexpected(token: Token, expected: str) -> PolicyError:
    return PolicyError(token.line, token.col, f"unexpected {token.describe()}, expected {expected}")


def _classify(segments: list[Segment], text: str, first: Token, *, write: bool) -> Path:
    """The namespace of a path, by its first word; a namespace word alone is a body key."""
    line, col = first.line, first.col
    namespace, rest = Namespace.BODY, segments
    if len(segments) >= 2:
        head, tail = segments[0].key, segments[1:]
        if head == "body":
            rest = tail
        elif head == "context":
            namespace, rest = Namespace.CONTEXT, tail
            if len(tail) != 1 or tail[0].key is None:
                raise PolicyError(line, col, "context paths must be context.<key>")
        elif head == "auth":
            namespace, rest = Namespace.AUTH, tail
            if write:
                raise PolicyError(line, col, "auth.* is read-only")
            if len(tail) != 1 or tail[0].key != "key":
                raise PolicyError(
                    line, col, f'unknown auth field "{text}", only auth.key is available'
                )
        elif head == "request":
            namespace, rest = Namespace.REQUEST, tail
            if write:
                raise PolicyError(line, col, "request.* is read-only")
            keys = [segment.key for segment in tail]
            valid = (len(keys) == 1 and keys[0] in _REQUEST_FIELDS) or (
                len(keys) == 2 and keys[0] == "header" and keys[1] is not None
            )
            if not valid:
                raise PolicyError(
                    line,
                    col,
                    f'unknown request field "{text}", available: request.model, request.path, '
                    "request.method, request.header.<name>",
                )
    negative = any(s.key is None and s.index < 0 for s in rest)
    return Path(namespace, tuple(rest), text, line, col, negative)
