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


def test_budget_swapper_counts_sleeping_models_host_memory_only_and_may_stop_them() -> None:
    from modelswap.routing.swappers import BudgetSwapper

    gib = 1024**3
    uses = {"a": {"gpu0": 20 * gib, "ram": 30 * gib}, "b": {"gpu0": 20 * gib, "ram": 30 * gib}}
    asleep: set[str] = {"a"}
    swapper = BudgetSwapper(
        {"gpu0": 24 * gib, "ram": 64 * gib},
        lambda m: uses[m],
        lambda m: 1.0,
        sleeping=lambda: frozenset(asleep),
    )
    # a sleeps: its 20 GiB of GPU memory are free, its 30 GiB of host memory are not.
    fits = swapper.eviction_for("b", frozenset(), frozenset())
    assert fits is not None
    assert fits.models == frozenset()
    # With less host memory, the sleeping model must be stopped for good to fit b.
    tight = BudgetSwapper(
        {"gpu0": 24 * gib, "ram": 40 * gib},
        lambda m: uses[m],
        lambda m: 1.0,
        sleeping=lambda: frozenset(asleep),
    )
    eviction = tight.eviction_for("b", frozenset(), frozenset())
    assert eviction is not None
    assert eviction.models == frozenset({"a"})
    assert "a (asleep" in eviction.reason
