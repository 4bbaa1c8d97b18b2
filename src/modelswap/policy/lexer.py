"""Tokens of a program, each with its line:column.

Newlines separate clauses, except inside ``( )`` and ``[ ]`` (and an object literal), after a
blank or comment-only line, and before a line that starts with ``when``, ``and`` or ``or``,
which continues the clause above. ``#`` starts a comment that runs to the end of the line.
"""

from __future__ import annotations

import enum
import json
import re
from dataclasses import dataclass

from modelswap.policy.program_errors import PolicyError

MAX_NESTING = 64
"""Deepest nesting of brackets and braces a program may use (parsing recurses on them)."""

_NUMBER_RE = re.compile(r"-?[0-9]+(\.[0-9]*)?([eE][+-]?[0-9]+)?")
_SURROGATE_RE = re.compile("[\ud800-\udfff]")


class T(enum.Enum):
    EOF = "end of program"
    NEWLINE = "end of line"
    IDENT = "identifier"
    NUMBER = "number"  # text: as written
    STRING = "string"  # text: the decoded value
    REGEX = "regex"  # text: the pattern (``\/`` already read as ``/``)
    OBJECT = "object"  # text: the compact JSON as written; value: parsed
    DOT = "."
    LBRACKET = "["
    RBRACKET = "]"
    LPAREN = "("
    RPAREN = ")"
    COMMA = ","
    EQ = "="
    NE = "!="
    LT = "<"
    LE = "<="
    GT = ">"
    GE = ">="


@dataclass(frozen=True, slots=True)
class Token:
    kind: T
    text: str
    line: int
    col: int
    value: object = None  # OBJECT: the parsed object

    def describe(self) -> str:
        """The token as an error message names it."""
        if self.kind is T.EOF:
            return "end of program"
        if self.kind is T.NEWLINE:
            return "end of line"
        if self.kind is T.REGEX:
            return f"/{self.text}/"
        if self.kind is T.OBJECT:
            return "object literal"
        return f'"{self.text}"'

    def is_word(self, word: str) -> bool:
        """Whether this is the identifier ``word``. Keywords are keywords only where one is
        expected, so a body key named ``set`` or ``in`` is still a path segment."""
        return self.kind is T.IDENT and self.text == word


CONTINUATIONS = ("when", "and", "or")
_PUNCTUATION = {
    ".": T.DOT,
    "[": T.LBRACKET,
    "]": T.RBRACKET,
    "(": T.LPAREN,
    ")": T.RPAREN,
    ",": T.COMMA,
}


def _ident_start(ch: str) -> bool:
    return ch == "_" or ("a" <= ch <= "z") or ("A" <= ch <= "Z")


def _ident_char(ch: str) -> bool:
    return _ident_start(ch) or ("0" <= ch <= "9") or ch == "-"


def _digit(ch: str) -> bool:
    return "0" <= ch <= "9"


class _Lexer:
    def __init__(self, source: str) -> None:
        self.src = source.replace("\r\n", "\n")
        self.pos = 0
        self.line = 1
        self.col = 1
        self.depth = 0  # inside ( ) and [ ]: newlines are not separators
        self.tokens: list[Token] = []

    def peek(self, offset: int = 0) -> str:
        at = self.pos + offset
        return self.src[at] if at < len(self.src) else ""

    def advance(self) -> str:
        ch = self.src[self.pos]
        self.pos += 1
        if ch == "\n":
            self.line += 1
            self.col = 1
        else:
            self.col += 1
        return ch

    def emit(self, kind: T, text: str, line: int, col: int, value: object = None) -> None:
        self.tokens.append(Token(kind, text, line, col, value))

    def run(self) -> list[Token]:
        while self.pos < len(self.src):
            ch = self.peek()
            line, col = self.line, self.col
            if ch == "\n":
                self.advance()
                if self.depth == 0:
                    self.emit(T.NEWLINE, "\n", line, col)
            elif ch in " \t":
                self.advance()
            elif ch == "#":
                while self.pos < len(self.src) and self.peek() != "\n":
                    self.advance()
            elif ch == '"':
                self.string()
            elif ch == "/":
                self.regex()
            elif ch == "{":
                self.json_object()
            elif _digit(ch) or (ch == "-" and _digit(self.peek(1))):
                self.number()
            elif _ident_start(ch):
                start = self.pos
                while self.pos < len(self.src) and _ident_char(self.peek()):
                    self.advance()
                self.emit(T.IDENT, self.src[start : self.pos], line, col)
            else:
                self.operator(ch, line, col)
        return self.finish()

    def operator(self, ch: str, line: int, col: int) -> None:
        self.advance()
        if ch in _PUNCTUATION:
            kind = _PUNCTUATION[ch]
            if kind in (T.LBRACKET, T.LPAREN):
                self.depth += 1
                if self.depth > MAX_NESTING:
                    raise PolicyError(line, col, f"nested deeper than {MAX_NESTING} levels")
            elif kind in (T.RBRACKET, T.RPAREN) and self.depth > 0:
                self.depth -= 1
            self.emit(kind, ch, line, col)
        elif ch == "=":
            if self.peek() == "=":
                self.advance()
            self.emit(T.EQ, "=", line, col)
        elif ch == "!":
            if self.peek() != "=":
                raise PolicyError(line, col, 'unexpected character "!"')
            self.advance()
            self.emit(T.NE, "!=", line, col)
        elif ch in "<>":
            if self.peek() == "=":
                self.advance()
                self.emit(T.LE if ch == "<" else T.GE, ch + "=", line, col)
            else:
                self.emit(T.LT if ch == "<" else T.GT, ch, line, col)
        else:
            raise PolicyError(line, col, f"unexpected character {ch!r}")

    def string(self) -> None:
        """A double-quoted string with JSON's escapes."""
        line, col = self.line, self.col
        start = self.pos
        self.advance()
        while True:
            if self.pos >= len(self.src) or self.peek() == "\n":
                raise PolicyError(line, col, "unterminated string")
            ch = self.advance()
            if ch == "\\":
                if self.pos >= len(self.src) or self.peek() == "\n":
                    raise PolicyError(line, col, "unterminated string")
                self.advance()
            elif ch == '"':
                break
        try:
            decoded = json.loads(self.src[start : self.pos])
        except ValueError as exc:
            raise PolicyError(line, col, f"invalid string literal: {_reason(exc)}") from None
        # A lone surrogate (\ud800) is read as Go reads it: the replacement character.
        self.emit(T.STRING, _SURROGATE_RE.sub("\ufffd", decoded), line, col)

    def regex(self) -> None:
        """``/pattern/``: ``\\/`` is a slash; every other escape goes to RE2 as written."""
        line, col = self.line, self.col
        self.advance()
        out: list[str] = []
        while True:
            if self.pos >= len(self.src) or self.peek() == "\n":
                raise PolicyError(line, col, "unterminated regex")
            ch = self.advance()
            if ch == "\\":
                if self.pos >= len(self.src) or self.peek() == "\n":
                    raise PolicyError(line, col, "unterminated regex")
                following = self.advance()
                out.append("/" if following == "/" else "\\" + following)
            elif ch == "/":
                break
            else:
                out.append(ch)
        self.emit(T.REGEX, "".join(out), line, col)

    def json_object(self) -> None:
        """A ``{...}`` JSON object: balanced braces, strings respected; it must be valid JSON
        (no NaN or Infinity, which JSON does not have). Newlines inside are not separators."""
        line, col = self.line, self.col
        compact: list[str] = []
        braces = nesting = 0
        in_string = False
        while self.pos < len(self.src):
            ch = self.advance()
            if in_string:
                compact.append(ch)
                if ch == "\\" and self.pos < len(self.src):
                    compact.append(self.advance())
                elif ch == '"':
                    in_string = False
                continue
            if ch in " \t\r\n":
                continue
            compact.append(ch)
            if ch == '"':
                in_string = True
            elif ch in "{[":
                braces += ch == "{"
                nesting += 1
                if nesting > MAX_NESTING:
                    raise PolicyError(line, col, f"nested deeper than {MAX_NESTING} levels")
            elif ch in "}]":
                nesting -= 1
                braces -= ch == "}"
                if ch == "}" and braces == 0:
                    text = "".join(compact)
                    self.emit(T.OBJECT, text, line, col, _json_value(text, line, col))
                    return
        raise PolicyError(line, col, "unterminated object literal")

    def number(self) -> None:
        line, col = self.line, self.col
        start = self.pos
        if self.peek() == "-":
            self.advance()
        while self.pos < len(self.src):
            ch = self.peek()
            exponent_sign = ch in "+-" and self.src[self.pos - 1] in "eE"
            if not (_digit(ch) or ch in ".eE" or exponent_sign):
                break
            self.advance()
        text = self.src[start : self.pos]
        if not _NUMBER_RE.fullmatch(text) or float(text) in (float("inf"), float("-inf")):
            raise PolicyError(line, col, f'invalid number "{text}"')
        self.emit(T.NUMBER, text, line, col)

    def finish(self) -> list[Token]:
        """Drop the newlines that separate nothing: leading, repeated, trailing, and those
        before a continuation word. Then the end-of-program token."""
        out: list[Token] = []
        for index, token in enumerate(self.tokens):
            if token.kind is T.NEWLINE:
                if not out or out[-1].kind is T.NEWLINE:
                    continue
                following = self.tokens[index + 1] if index + 1 < len(self.tokens) else None
                if following is not None and any(following.is_word(w) for w in CONTINUATIONS):
                    continue
            out.append(token)
        if out and out[-1].kind is T.NEWLINE:
            out.pop()
        out.append(Token(T.EOF, "", self.line, self.col))
        return out


def _reject_constant(name: str) -> object:
    raise ValueError(f"{name} is not JSON")


def _json_value(text: str, line: int, col: int) -> object:
    try:
        value = json.loads(text, parse_constant=_reject_constant)
    except (ValueError, RecursionError):
        raise PolicyError(line, col, "invalid JSON object literal") from None
    return _no_surrogates(value)


def _no_surrogates(value: object) -> object:
    """Lone surrogates in a literal become the replacement character (as Go reads them), so
    a body written with it can always be sent as UTF-8."""
    if isinstance(value, str):
        return _SURROGATE_RE.sub("\ufffd", value)
    if isinstance(value, list):
        return [_no_surrogates(item) for item in value]
    if isinstance(value, dict):
        return {_SURROGATE_RE.sub("\ufffd", k): _no_surrogates(v) for k, v in value.items()}
    return value


def _reason(exc: ValueError) -> str:
    return exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)


def lex(source: str) -> list[Token]:
    """The tokens of ``source``, ending with ``EOF``. Raises :class:`PolicyError`."""
    return _Lexer(source).run()
