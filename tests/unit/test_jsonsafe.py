"""jsonsafe: JSON from outside parsed with bounded depth, top-level duplicates refused."""

from __future__ import annotations

import json

import pytest

from modelswap import jsonsafe
from modelswap.jsonsafe import DuplicateKeyError, JSONTooDeepError, loads, nesting_depth


@pytest.mark.parametrize(
    ("text", "depth"),
    [
        ("1", 0),
        ('"[[[["', 0),  # brackets inside a string do not nest
        ('{"a": "]]]]", "b": [1, [2]]}', 3),
        ('["\\"[", ["\\\\", [[]]]]', 4),  # escaped quotes and backslashes end no string early
        ("[]" * 1000, 1),
        ("[" * 300 + "]" * 300, 300),
        ('{"k": {"k": {"k": {}}}}', 4),
    ],
)
def test_nesting_depth_counts_brackets_outside_strings(text: str, depth: int) -> None:
    assert nesting_depth(text) == depth
    assert nesting_depth(text.encode()) == depth


def test_deep_json_is_a_value_error_not_a_recursion_error() -> None:
    hostile = b"[" * 30_000 + b"]" * 30_000
    with pytest.raises(JSONTooDeepError) as caught:
        loads(hostile)
    assert isinstance(caught.value, ValueError)
    assert caught.value.limit == jsonsafe.MAX_DEPTH


def test_depth_limit_is_exact() -> None:
    at_limit = "[" * jsonsafe.MAX_DEPTH + "]" * jsonsafe.MAX_DEPTH
    assert loads(at_limit) == json.loads(at_limit)
    with pytest.raises(JSONTooDeepError):
        loads("[" + at_limit + "]")
    with pytest.raises(JSONTooDeepError):
        loads('{"a": ' * 10 + "1" + "}" * 10, max_depth=9)


def test_many_shallow_brackets_are_fine() -> None:
    wide = json.dumps({"model": "m", "messages": [{"role": "user", "content": "[{"}] * 500})
    assert loads(wide) == json.loads(wide)


def test_top_level_duplicate_is_refused_only_when_asked() -> None:
    body = b'{"model": "a", "stream": true, "model": "b"}'
    assert loads(body) == {"model": "b", "stream": True}  # plain json semantics otherwise
    with pytest.raises(DuplicateKeyError) as caught:
        loads(body, top_level_duplicates=True)
    assert caught.value.key == "model"


def test_nested_duplicates_keep_last_wins() -> None:
    body = b'{"model": "a", "metadata": {"x": 1, "x": 2}}'
    assert loads(body, top_level_duplicates=True) == {"model": "a", "metadata": {"x": 2}}


def test_a_duplicate_inside_an_earlier_object_is_not_taken_for_the_top_level() -> None:
    body = b'{"tools": [{"name": "a", "name": "b"}], "model": "m"}'
    assert loads(body, top_level_duplicates=True)["model"] == "m"  # type: ignore[index]


def test_top_level_array_with_duplicate_objects_inside() -> None:
    assert loads(b'[{"a": 1, "a": 2}]', top_level_duplicates=True) == [{"a": 2}]


def test_invalid_json_stays_a_value_error() -> None:
    for bad in (b"{bad", b"\xff\xfe", b""):
        with pytest.raises(ValueError, match=r"\w"):  # json's own message, or decoding's
            loads(bad)
