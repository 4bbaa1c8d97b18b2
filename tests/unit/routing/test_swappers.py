"""Eviction policies are pure functions from "target + running set" to "set to evict"."""

from __future__ import annotations

import pytest

from modelswap.routing.swappers import ExclusiveSwapper


@pytest.mark.parametrize(
    ("target", "running", "expected"),
    [
        ("a", set(), frozenset()),
        ("a", {"a"}, frozenset()),
        ("a", {"b"}, frozenset({"b"})),
        ("a", {"a", "b"}, frozenset({"b"})),
        ("a", {"b", "c"}, frozenset({"b", "c"})),
        ("a", {"a", "b", "c"}, frozenset({"b", "c"})),
        ("a", frozenset({"a-large", "A"}), frozenset({"a-large", "A"})),
    ],
)
def test_exclusive_swapper_evicts_every_other_running_model(
    target: str, running: set[str] | frozenset[str], expected: frozenset[str]
) -> None:
    assert ExclusiveSwapper().eviction_for(target, running, frozenset()).models == expected


def test_exclusive_swapper_returns_a_frozenset_and_leaves_running_untouched() -> None:
    running = {"a", "b"}
    evict = ExclusiveSwapper().eviction_for("c", running, frozenset()).models
    assert type(evict) is frozenset
    assert evict == {"a", "b"}
    assert running == {"a", "b"}
