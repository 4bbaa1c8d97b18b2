"""Eviction policies as tables (issue 6): llama-swap groups, memory budgets, and both combined.

Each is a pure function from "target + running set (+ busy set)" to "what must stop" — or None
when the target cannot start whatever is stopped.
"""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from modelswap.routing.swappers import (
    BudgetSwapper,
    CombinedSwapper,
    ExclusiveSwapper,
    GroupSpec,
    GroupSwapper,
)

NONE: frozenset[str] = frozenset()
GIB = 1024**3


def evicts(
    swapper: GroupSwapper | BudgetSwapper | CombinedSwapper,
    target: str,
    running: set[str],
    busy: set[str] | None = None,
) -> frozenset[str] | None:
    eviction = swapper.eviction_for(target, frozenset(running), frozenset(busy or ()))
    return None if eviction is None else eviction.models


# ---- groups: every flag combination ---------------------------------------------------------

# Group g1 = {a1, a2} with the flags under test; group g2 = {b1, b2} with the defaults
# (swap, exclusive, not persistent). Columns: flags of g1; what starting a1 evicts from
# {a2, b1}; what starting b1 evicts from {b2, a1}.
FLAG_TABLE = [
    # swap, exclusive, persistent, start a1, start b1
    (True, True, False, {"a2", "b1"}, {"b2", "a1"}),
    (True, True, True, {"a2", "b1"}, {"b2"}),
    (True, False, False, {"a2"}, {"b2", "a1"}),
    (True, False, True, {"a2"}, {"b2"}),
    (False, True, False, {"b1"}, {"b2", "a1"}),
    (False, True, True, {"b1"}, {"b2"}),
    (False, False, False, set(), {"b2", "a1"}),
    (False, False, True, set(), {"b2"}),
]


@pytest.mark.parametrize(
    ("swap", "exclusive", "persistent", "for_a1", "for_b1"),
    FLAG_TABLE,
    ids=[f"swap={r[0]}-exclusive={r[1]}-persistent={r[2]}" for r in FLAG_TABLE],
)
def test_group_flags(
    swap: bool, exclusive: bool, persistent: bool, for_a1: set[str], for_b1: set[str]
) -> None:
    g1 = GroupSpec("g1", ["a1", "a2"], swap=swap, exclusive=exclusive, persistent=persistent)
    g2 = GroupSpec("g2", ["b1", "b2"])
    swapper = GroupSwapper([g1, g2], ["a1", "a2", "b1", "b2"])
    assert evicts(swapper, "a1", {"a2", "b1"}) == for_a1
    assert evicts(swapper, "b1", {"b2", "a1"}) == for_b1


@pytest.mark.parametrize("persistent", [False, True])
def test_group_persistent_members_still_swap_among_themselves(persistent: bool) -> None:
    g = GroupSpec("g", ["a", "b"], swap=True, exclusive=True, persistent=persistent)
    swapper = GroupSwapper([g], ["a", "b"])
    assert evicts(swapper, "b", {"a"}) == {"a"}


def test_group_defaults_are_swap_exclusive_not_persistent() -> None:
    g = GroupSpec("g", ["a"])
    assert (g.swap, g.exclusive, g.persistent) == (True, True, False)


def test_group_target_already_running_evicts_nothing_of_itself() -> None:
    swapper = GroupSwapper([GroupSpec("g", ["a", "b"])], ["a", "b"])
    assert evicts(swapper, "a", {"a"}) == NONE
    assert evicts(swapper, "a", {"a", "b"}) == {"b"}


def test_group_busy_models_are_still_named_the_scheduler_drains_them() -> None:
    swapper = GroupSwapper([GroupSpec("g", ["a", "b"])], ["a", "b"])
    assert evicts(swapper, "b", {"a"}, busy={"a"}) == {"a"}


# ---- groups: a model in several groups ------------------------------------------------------


def several() -> GroupSwapper:
    """m is in g1 (swaps, not exclusive) and g2 (no swap, not exclusive, persistent); c is in
    an exclusive g3; z is in no group."""
    return GroupSwapper(
        [
            GroupSpec("g1", ["m", "a"], swap=True, exclusive=False),
            GroupSpec("g2", ["m", "b"], swap=False, exclusive=False, persistent=True),
            GroupSpec("g3", ["c"], swap=True, exclusive=True),
        ],
        ["m", "a", "b", "c", "z"],
    )


@pytest.mark.parametrize(
    ("target", "running", "expected"),
    [
        ("m", {"a", "b", "c"}, {"a"}),  # g1 swaps m with a; g2 keeps b; nothing exclusive
        ("a", {"m", "b", "c"}, {"m"}),  # g1 swaps a with m, persistent or not (same group)
        ("b", {"m", "a", "c"}, NONE),  # g2 neither swaps nor excludes
        ("c", {"m", "a", "b"}, {"a"}),  # g3 exclusive: m and b are persistent (via g2)
        ("z", {"m", "a", "b", "c"}, {"a", "c"}),  # ungrouped: alone but for the persistent
    ],
)
def test_group_model_in_several_groups_follows_every_group_rule(
    target: str, running: set[str], expected: set[str]
) -> None:
    assert evicts(several(), target, running) == expected


def test_group_model_in_an_exclusive_and_a_shared_group_keeps_both_groups_members() -> None:
    swapper = GroupSwapper(
        [
            GroupSpec("solo", ["m", "x"], swap=True, exclusive=True),
            GroupSpec("shared", ["m", "y"], swap=False, exclusive=False),
        ],
        ["m", "x", "y", "o"],
    )
    # x: same swapping group; y: shares a group with m; o: another group, m's group excludes it
    assert evicts(swapper, "m", {"x", "y", "o"}) == {"x", "o"}


# ---- groups: ungrouped models ---------------------------------------------------------------


def test_ungrouped_model_starts_alone() -> None:
    swapper = GroupSwapper([GroupSpec("g", ["a", "b"], swap=False, exclusive=False)], list("abz"))
    assert evicts(swapper, "z", {"a", "b"}) == {"a", "b"}


def test_ungrouped_models_evict_each_other() -> None:
    swapper = GroupSwapper([GroupSpec("g", ["a"])], ["a", "y", "z"])
    assert evicts(swapper, "z", {"y"}) == {"y"}
    assert evicts(swapper, "y", {"z"}) == {"z"}


def test_ungrouped_model_is_evicted_by_an_exclusive_group() -> None:
    swapper = GroupSwapper([GroupSpec("g", ["a", "b"], swap=False)], ["a", "b", "z"])
    assert evicts(swapper, "a", {"b", "z"}) == {"z"}


def test_ungrouped_model_does_not_evict_a_persistent_group() -> None:
    swapper = GroupSwapper([GroupSpec("p", ["p"], persistent=True)], ["p", "z"])
    assert evicts(swapper, "z", {"p"}) == NONE


def test_persistent_group_is_never_evicted_by_any_other_group() -> None:
    swapper = GroupSwapper(
        [
            GroupSpec("p", ["p1", "p2"], swap=False, persistent=True),
            GroupSpec("e1", ["e1"], exclusive=True),
            GroupSpec("e2", ["e2", "e3"], swap=True, exclusive=True),
        ],
        ["p1", "p2", "e1", "e2", "e3", "z"],
    )
    for target in ("e1", "e2", "e3", "z"):
        evicted = evicts(swapper, target, {"p1", "p2", "e1", "e2", "e3", "z"} - {target})
        assert evicted is not None
        assert not evicted & {"p1", "p2"}, target


def test_group_reason_names_the_rule() -> None:
    swapper = GroupSwapper(
        [GroupSpec("g1", ["a1", "a2"]), GroupSpec("g2", ["b1"])], ["a1", "a2", "b1"]
    )
    eviction = swapper.eviction_for("a1", frozenset({"a2", "b1"}), NONE)
    assert eviction is not None
    assert "a2 (same group g1)" in eviction.reason
    assert "b1 (group g1 is exclusive)" in eviction.reason


def test_group_swapper_never_returns_none() -> None:
    swapper = several()
    everything = {"m", "a", "b", "c", "z"}
    for target in everything:
        assert swapper.eviction_for(target, frozenset(everything), frozenset(everything))


# ---- budgets --------------------------------------------------------------------------------


def budget(
    uses: Mapping[str, Mapping[str, int]],
    budgets: Mapping[str, int],
    cost: Mapping[str, float] | None = None,
    persistent: set[str] | None = None,
) -> BudgetSwapper:
    costs = cost or {}
    return BudgetSwapper(
        budgets,
        lambda m: uses.get(m, {}),
        lambda m: costs.get(m, 10.0),
        frozenset(persistent or ()),
    )


THREE = {"a": {"ram": 4 * GIB}, "b": {"ram": 4 * GIB}, "c": {"ram": 4 * GIB}}


@pytest.mark.parametrize(
    ("target", "running", "busy", "cost", "persistent", "expected"),
    [
        # fits without eviction
        ("b", {"a"}, set(), {}, set(), NONE),
        ("a", set(), set(), {}, set(), NONE),
        ("a", {"a", "b"}, set(), {}, set(), NONE),  # already running: counted once
        # cheapest first (cost = median start time x evictCost)
        ("c", {"a", "b"}, set(), {"a": 5.0, "b": 2.0}, set(), {"b"}),
        ("c", {"a", "b"}, set(), {"a": 2.0, "b": 5.0}, set(), {"a"}),
        # idle before busy, whatever the cost
        ("c", {"a", "b"}, {"b"}, {"a": 100.0, "b": 1.0}, set(), {"a"}),
        ("c", {"a", "b"}, {"a"}, {"a": 1.0, "b": 100.0}, set(), {"b"}),
        # all busy: still the cheapest (the scheduler drains it first)
        ("c", {"a", "b"}, {"a", "b"}, {"a": 3.0, "b": 1.0}, set(), {"b"}),
        # persistent never, however cheap
        ("c", {"a", "b"}, set(), {"a": 0.1, "b": 50.0}, {"a"}, {"b"}),
        ("c", {"a", "b"}, {"b"}, {"a": 0.1, "b": 50.0}, {"a"}, {"b"}),
        # cannot fit whatever is evicted
        ("c", {"a", "b"}, set(), {}, {"a", "b"}, None),
    ],
)
def test_budget_table(
    target: str,
    running: set[str],
    busy: set[str],
    cost: dict[str, float],
    persistent: set[str],
    expected: frozenset[str] | None,
) -> None:
    swapper = budget(THREE, {"ram": 10 * GIB}, cost, persistent)
    assert evicts(swapper, target, running, busy) == expected


def test_budget_target_alone_over_budget_cannot_start() -> None:
    swapper = budget({"huge": {"gpu0": 40 * GIB}}, {"gpu0": 32 * GIB})
    assert evicts(swapper, "huge", set()) is None
    assert evicts(swapper, "huge", {"other"}) is None


def test_budget_exactly_full_fits() -> None:
    swapper = budget({"a": {"ram": GIB}, "b": {"ram": GIB}}, {"ram": 2 * GIB})
    assert evicts(swapper, "b", {"a"}) == NONE


def test_budget_evicts_as_many_as_needed_cheapest_first() -> None:
    uses = {"a": {"ram": 2 * GIB}, "b": {"ram": 2 * GIB}, "c": {"ram": 2 * GIB}}
    uses["big"] = {"ram": 8 * GIB}
    swapper = budget(uses, {"ram": 10 * GIB}, {"a": 1.0, "b": 2.0, "c": 3.0})
    assert evicts(swapper, "big", {"a", "b", "c"}) == {"a", "b"}


def test_budget_only_evicts_models_that_use_an_exceeded_resource() -> None:
    uses = {
        "cpu-only": {"ram": 8 * GIB},
        "gpu": {"gpu0": 20 * GIB, "ram": 1 * GIB},
        "target": {"gpu0": 20 * GIB},
    }
    swapper = budget(uses, {"gpu0": 32 * GIB, "ram": 64 * GIB}, {"cpu-only": 0.1, "gpu": 99.0})
    assert evicts(swapper, "target", {"cpu-only", "gpu"}) == {"gpu"}


def test_budget_every_resource_must_fit() -> None:
    uses = {
        "a": {"gpu0": 10 * GIB, "ram": 1 * GIB},
        "b": {"gpu0": 1 * GIB, "ram": 30 * GIB},
        "t": {"gpu0": 10 * GIB, "ram": 30 * GIB},
    }
    swapper = budget(uses, {"gpu0": 16 * GIB, "ram": 48 * GIB})
    assert evicts(swapper, "t", {"a", "b"}) == {"a", "b"}


def test_budget_models_without_uses_count_as_zero() -> None:
    swapper = budget({"a": {"ram": 9 * GIB}}, {"ram": 10 * GIB})
    assert evicts(swapper, "unknown", {"a"}) == NONE


def test_budget_reason_names_state_cost_and_budget() -> None:
    swapper = budget(THREE, {"ram": 10 * GIB}, {"a": 12.0, "b": 30.0})
    eviction = swapper.eviction_for("c", frozenset({"a", "b"}), frozenset())
    assert eviction is not None
    assert eviction.reason == "evict a (idle, cost 12.0 s) to fit c within ram 10.0 GiB"
    busy = swapper.eviction_for("c", frozenset({"a", "b"}), frozenset({"a", "b"}))
    assert busy is not None
    assert "a (busy, cost 12.0 s)" in busy.reason


# ---- combined -------------------------------------------------------------------------------


def combined(persistent: set[str] | None = None) -> CombinedSwapper:
    """Group "small" = {s1, s2, s3} runs together (no swap, exclusive); "big" is ungrouped.
    Budget ram 10 GiB: small models 4 GiB each (two fit), big 10 GiB."""
    groups = GroupSwapper(
        [GroupSpec("small", ["s1", "s2", "s3"], swap=False, exclusive=True)],
        ["s1", "s2", "s3", "big"],
    )
    uses = {"s1": {"ram": 4 * GIB}, "s2": {"ram": 4 * GIB}, "s3": {"ram": 4 * GIB}}
    uses["big"] = {"ram": 10 * GIB}
    costs = {"s1": 1.0, "s2": 2.0, "s3": 3.0, "big": 9.0}
    return CombinedSwapper(groups, budget(uses, {"ram": 10 * GIB}, costs, persistent))


@pytest.mark.parametrize(
    ("target", "running", "expected"),
    [
        ("s2", {"s1"}, NONE),  # group allows, budget fits
        ("s3", {"s1", "s2"}, {"s1"}),  # group allows, the budget evicts the cheapest
        ("big", {"s1", "s2"}, {"s1", "s2"}),  # the group (ungrouped big runs alone)
        ("s1", {"big"}, {"big"}),  # the exclusive group evicts big
    ],
)
def test_combined_groups_then_budgets(
    target: str, running: set[str], expected: frozenset[str]
) -> None:
    assert evicts(combined(), target, running) == expected


def test_combined_budget_none_wins() -> None:
    swapper = combined(persistent={"s1", "s2"})
    assert evicts(swapper, "s3", {"s1", "s2"}) is None


def test_combined_reason_joins_both_parts() -> None:
    groups = GroupSwapper(
        [GroupSpec("g", ["a", "b"]), GroupSpec("h", ["c", "d"], swap=False, exclusive=False)],
        ["a", "b", "c", "d"],
    )
    uses = {m: {"ram": 4 * GIB} for m in "abcd"}
    swapper = CombinedSwapper(groups, budget(uses, {"ram": 8 * GIB}, {"c": 1.0, "d": 2.0}))
    eviction = swapper.eviction_for("a", frozenset({"b", "c", "d"}), NONE)
    assert eviction is not None
    # group g is exclusive: it evicts b (same group) and c, d (other groups)
    assert eviction.models == {"b", "c", "d"}
    groups_only = CombinedSwapper(
        GroupSwapper([GroupSpec("g", ["a", "b"], exclusive=False)], ["a", "b", "c", "d"]),
        budget(uses, {"ram": 8 * GIB}, {"c": 1.0, "d": 2.0}),
    )
    both = groups_only.eviction_for("a", frozenset({"b", "c", "d"}), NONE)
    assert both is not None
    assert both.models == {"b", "c"}
    assert "same group g" in both.reason
    assert "evict c (idle, cost 1.0 s)" in both.reason


def test_exclusive_swapper_is_the_default_one_at_a_time() -> None:
    assert ExclusiveSwapper().eviction_for("a", {"b", "c"}, NONE).models == {"b", "c"}
