"""Selectors choose a target from the running set (routing/selector_choice.py): pure cases."""

from __future__ import annotations

import pytest

from modelswap.config.resolved import Selector
from modelswap.routing.selector_choice import TargetState, choose

READY = TargetState(ready=True)
PEER = TargetState(peer=True)


def busy(n: int, *, ready: bool = True) -> TargetState:
    return TargetState(ready=ready, in_flight=n)


def sel(strategy: str, *targets: str, reservations: int = 1) -> Selector:
    return Selector("s", tuple(targets), strategy, reservations)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("states", "expected"),
    [
        ({}, "a"),
        ({"a": READY}, "a"),
        ({"b": READY}, "a"),
        ({"b": READY, "c": READY}, "a"),
        ({"c": busy(9)}, "a"),
    ],
)
def test_pin_is_always_the_first(states: dict[str, TargetState], expected: str) -> None:
    assert choose(sel("pin", "a", "b", "c"), states) == expected


@pytest.mark.parametrize(
    ("states", "expected"),
    [
        ({}, "a"),  # nothing ready: the first (it will be started)
        ({"a": READY}, "a"),
        ({"b": READY}, "b"),  # a ready one, no swap
        ({"b": READY, "c": READY}, "b"),  # the earliest ready
        ({"c": READY}, "c"),
        ({"a": TargetState(ready=False, in_flight=0), "c": READY}, "c"),
        ({"b": busy(50)}, "b"),  # warm does not look at the load
        ({"b": PEER}, "a"),  # a peer is never "ready" here: the first local one
    ],
)
def test_warm_picks_a_ready_target(states: dict[str, TargetState], expected: str) -> None:
    assert choose(sel("warm", "a", "b", "c"), states) == expected


@pytest.mark.parametrize(
    ("reservations", "states", "expected"),
    [
        (1, {}, "a"),
        (1, {"a": busy(0)}, "a"),
        (1, {"a": busy(1)}, "b"),  # a is full: the next, started if need be
        (1, {"a": busy(1), "b": busy(1)}, "c"),
        (2, {"a": busy(1)}, "a"),  # fills a to its reservation count first
        (2, {"a": busy(2)}, "b"),
        (2, {"a": busy(2), "b": busy(1)}, "b"),
        (1, {"a": busy(3), "b": busy(1), "c": busy(2)}, "b"),  # all full: the least loaded
        (1, {"a": busy(2), "b": busy(2), "c": busy(2)}, "a"),  # ties: the earliest
    ],
)
def test_spillover_fills_then_starts_the_next(
    reservations: int, states: dict[str, TargetState], expected: str
) -> None:
    assert choose(sel("spillover", "a", "b", "c", reservations=reservations), states) == expected


def test_spillover_to_a_peer() -> None:
    s = sel("spillover", "local", "box/big")
    assert choose(s, {"local": busy(0)}) == "local"
    assert choose(s, {"local": busy(1), "box/big": PEER}) == "box/big"
    assert choose(s, {"local": busy(5), "box/big": PEER}) == "box/big"


@pytest.mark.parametrize("strategy", ["warm", "pin", "spillover"])
def test_one_target_is_always_chosen(strategy: str) -> None:
    assert choose(sel(strategy, "only"), {"only": busy(99)}) == "only"
