"""Profiles pin models (routing/profiles.py): the wrapped swapper never evicts them."""

from __future__ import annotations

from modelswap.routing.profiles import PinnedSwapper
from modelswap.routing.protocols import Eviction
from modelswap.routing.swappers import ExclusiveSwapper


def test_pinned_models_are_never_evicted() -> None:
    pinned: set[str] = {"a", "b"}
    swapper = PinnedSwapper(ExclusiveSwapper(), lambda: frozenset(pinned))
    eviction = swapper.eviction_for("c", {"a", "b", "d"}, set())
    assert eviction is not None
    assert eviction.models == {"d"}
    assert "kept (pinned by the active profile): a, b" in eviction.reason
    pinned.clear()  # another profile: read at every decision
    eviction = swapper.eviction_for("c", {"a", "b", "d"}, set())
    assert eviction is not None
    assert eviction.models == {"a", "b", "d"}


def test_nothing_pinned_is_the_inner_decision() -> None:
    inner = ExclusiveSwapper()
    swapper = PinnedSwapper(inner, frozenset)
    assert swapper.eviction_for("a", {"b"}, set()) == inner.eviction_for("a", {"b"}, set())


def test_no_start_possible_stays_none() -> None:
    class Never:
        def eviction_for(self, target: str, running: object, busy: object) -> Eviction | None:
            return None

    assert PinnedSwapper(Never(), lambda: frozenset({"a"})).eviction_for("b", {"a"}, set()) is None
