"""``matches /re/``: Go's RE2 dialect, matched by RE2 itself (google-re2), in linear time.

llama-swap compiles an SPL regular expression with Go's ``regexp`` (RE2 syntax). modelswap
compiles it with RE2's own library, so a pattern means the same thing and takes time linear in
the text, whatever it is: there are no backreferences, lookarounds, possessive or atomic groups
(RE2 refuses them), and no pattern backtracks. The rule, then:

* accepted: what RE2 compiles, minus ``\\C`` (any single byte), which C++ RE2 has and Go's
  ``regexp`` refuses;
* refused at load, with RE2's reason: everything else (``(?=``, ``(?<=``, ``\\1``, ``a*+``,
  ``(?>``, ``a{1001}``, ``\\Z``, ...), and a pattern that is not valid UTF-8.

A text is matched as UTF-8; a lone surrogate (which JSON allows as ``\\ud800``) is passed
through as its three bytes, which RE2 reads as one character (llama-swap's JSON reader makes
it one replacement character). Python's ``re`` is never used: with it, even ``.*x`` takes time
quadratic in the text, and two adjacent stars cubic.
"""

from __future__ import annotations

import functools
from typing import Any


@functools.cache
def _re2() -> tuple[Any, Any]:
    """RE2 and its options, imported with the first pattern (~2 MiB a gateway without a
    policy's ``matches`` never needs)."""
    import re2

    options = re2.Options()
    options.log_errors = False  # the refusal is reported with the program's line:column
    options.never_capture = True  # only whether it matches is asked
    return re2, options


class RegexError(ValueError):
    """Why a pattern is refused."""


class Regex:
    """A compiled pattern; ``search`` says whether it matches anywhere in a text."""

    __slots__ = ("_compiled", "pattern")

    def __init__(self, pattern: str) -> None:
        _no_any_byte(pattern)
        try:
            encoded = pattern.encode("utf-8")
        except UnicodeEncodeError:
            raise RegexError("the pattern is not valid UTF-8") from None
        re2, options = _re2()
        try:
            self._compiled: Any = re2.compile(encoded, options)
        except re2.error as exc:
            reason = exc.args[0] if exc.args else exc
            text = reason.decode("utf-8", "replace") if isinstance(reason, bytes) else str(reason)
            raise RegexError(text) from None
        self.pattern = pattern

    def search(self, text: str) -> bool:
        return self._compiled.search(text.encode("utf-8", "surrogatepass")) is not None

    def __repr__(self) -> str:
        return f"Regex({self.pattern!r})"


def _no_any_byte(pattern: str) -> None:
    """Refuse ``\\C``: C++ RE2 reads it as any byte; Go's RE2 refuses it (an escape it does
    not know). Text between ``\\Q`` and ``\\E`` is literal, so a ``\\C`` there is not one."""
    index, quoted = 0, False
    while index < len(pattern):
        if quoted:
            if pattern.startswith("\\E", index):
                quoted = False
                index += 2
            else:
                index += 1
            continue
        if pattern[index] == "\\" and index + 1 < len(pattern):
            following = pattern[index + 1]
            if following == "C":
                raise RegexError("invalid escape sequence: \\C")
            quoted = following == "Q"
            index += 2
            continue
        index += 1
