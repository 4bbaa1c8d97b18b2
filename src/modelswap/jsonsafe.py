"""JSON from outside (clients, backends, peers) parsed with bounded work and no crash.

CPython's parser recurses once per nesting level: 30,000 nested brackets end in a
``RecursionError`` (not a ``ValueError``), which escapes every ``except ValueError`` around a
parse. :func:`loads` measures the nesting first, at C speed over the bytes (strings removed,
then the running bracket count), and refuses anything deeper than ``max_depth`` with
:class:`JSONTooDeepError` — a ``ValueError``, so callers that treat bad JSON as "unavailable"
need no new branch. ``top_level_duplicates=True`` also refuses an object whose top-level keys
repeat (:class:`DuplicateKeyError`): parsers disagree on which copy wins, so the gateway, its
filters and the backend could otherwise read different ``model`` values.

A leaf: standard library only.
"""

from __future__ import annotations

import json
import re
from array import array
from itertools import accumulate

__all__ = ["MAX_DEPTH", "DuplicateKeyError", "JSONTooDeepError", "loads", "nesting_depth"]

# Deep enough for any real request (tool schemas nest a dozen levels), far below the depth
# at which CPython's parser or encoder would recurse out of stack.
MAX_DEPTH = 128

_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_AS_STEPS = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")  # +1 / -1 as signed bytes


class JSONTooDeepError(ValueError):
    def __init__(self, limit: int) -> None:
        self.limit = limit
        super().__init__(f"JSON nested deeper than {limit} levels")


class DuplicateKeyError(ValueError):
    def __init__(self, key: str) -> None:
        self.key = key
        super().__init__(f"JSON object repeats the key {key[:64]!r}")


def nesting_depth(raw: bytes | str) -> int:
    """The deepest bracket nesting outside string literals (0 for a scalar). Linear, at C
    speed: no Python work per byte or per bracket."""
    data = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw
    if data.count(b"[") + data.count(b"{") == 0:
        return 0
    steps = _STRING.sub(b"", data).translate(None, _NOT_BRACKETS).translate(_AS_STEPS)
    return max(0, *accumulate(array("b", steps))) if steps else 0


def _fits(data: bytes | str, max_depth: int) -> bool:
    opening = (
        data.count("[") + data.count("{")
        if isinstance(data, str)
        else (data.count(b"[") + data.count(b"{"))
    )
    return opening <= max_depth or nesting_depth(data) <= max_depth


class _TopLevelKeys:
    """An ``object_pairs_hook`` remembering whether the *last* object built repeated a key.
    The parser finishes the outermost object last, so after ``json.loads`` that is the top
    level's answer (nested objects keep last-wins, as every parser does for them)."""

    __slots__ = ("repeated",)

    def __init__(self) -> None:
        self.repeated: str | None = None

    def __call__(self, pairs: list[tuple[str, object]]) -> dict[str, object]:
        built = dict(pairs)
        self.repeated = None
        if len(built) != len(pairs):
            seen: set[str] = set()
            for key, _ in pairs:
                if key in seen:
                    self.repeated = key
                    break
                seen.add(key)
        return built


def loads(
    data: bytes | str, *, max_depth: int = MAX_DEPTH, top_level_duplicates: bool = False
) -> object:
    """``json.loads`` that raises only ``ValueError`` (or ``UnicodeDecodeError``, itself a
    ``ValueError``): :class:`JSONTooDeepError` past ``max_depth``, :class:`DuplicateKeyError`
    for repeated top-level keys when ``top_level_duplicates`` is set."""
    if not _fits(data, max_depth):
        raise JSONTooDeepError(max_depth)
    try:
        if not top_level_duplicates:
            return json.loads(data)
        keys = _TopLevelKeys()
        parsed = json.loads(data, object_pairs_hook=keys)
    except RecursionError as exc:  # unreachable after the depth check; kept as the backstop
        raise JSONTooDeepError(max_depth) from exc
    if isinstance(parsed, dict) and keys.repeated is not None:
        raise DuplicateKeyError(keys.repeated)
    return parsed
