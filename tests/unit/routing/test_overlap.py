"""When a swap's start may begin beside what it evicts (issue 38): only when the budgets show
it fits with everything that holds memory now."""

from __future__ import annotations

from collections.abc import Mapping

from modelswap.routing.overlap import start_may_overlap

GIB = 1024**3
USES = {"a": {"ram": 2 * GIB}, "b": {"ram": 1 * GIB}, "c": {"ram": 1 * GIB}, "u": {"ram": 0}}


def uses(model: str) -> Mapping[str, int]:
    return USES[model]


def proxy(model: str) -> str:
    return f"http://127.0.0.1:{9000 + ord(model[0])}"


def may(target: str, evict: set[str], holding: set[str], ram: int) -> bool:
    return start_may_overlap(target, evict, holding, {"ram": ram * GIB}, uses, proxy)


def test_it_may_when_everything_fits_together() -> None:
    assert may("b", {"a"}, {"a"}, 3)
    assert may("b", {"a"}, {"a", "c"}, 4)


def test_it_may_not_when_the_eviction_makes_the_room() -> None:
    assert not may("b", {"a"}, {"a"}, 2)
    assert not may("b", {"a"}, {"a", "c"}, 3)  # another model holds memory too


def test_it_may_not_without_budgets_or_known_uses() -> None:
    assert not start_may_overlap("b", {"a"}, {"a"}, {}, uses, proxy)
    assert not may("u", {"a"}, {"a"}, 64)  # u's use is unknown: it might need everything
    assert not may("b", {"u"}, {"u"}, 64)
    assert not may("b", set(), set(), 64)  # nothing evicted: nothing to overlap


def test_it_may_not_when_they_share_a_port() -> None:
    same = start_may_overlap(
        "b", {"a"}, {"a"}, {"ram": 64 * GIB}, uses, lambda _m: "http://127.0.0.1:9000"
    )
    assert not same
