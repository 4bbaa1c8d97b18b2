"""The swap matrix (routing/matrix_swapper.py): expressions expanded, the least-cost set chosen."""

from __future__ import annotations

import pytest

from modelswap.config.matrix import MatrixError, all_alternatives, expand
from modelswap.routing.matrix_swapper import MatrixSwapper

VARS = {"g": "gemma", "q": "qwen", "v": "voxtral", "e": "embed"}


def alts(expression: str, sets: dict[str, str] | None = None) -> set[frozenset[str]]:
    return set(expand(expression, VARS, sets or {}))


def s(*names: str) -> frozenset[str]:
    return frozenset(names)


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("g", {s("gemma")}),
        ("g & v", {s("gemma", "voxtral")}),
        ("g | q", {s("gemma"), s("qwen")}),
        ("(g | q) & v", {s("gemma", "voxtral"), s("qwen", "voxtral")}),
        ("g | q & v", {s("gemma"), s("qwen", "voxtral")}),  # & binds tighter
        (
            "(g | q) & (v | e)",
            {s("gemma", "voxtral"), s("gemma", "embed"), s("qwen", "voxtral"), s("qwen", "embed")},
        ),
        ("g & g", {s("gemma")}),
        ("((g))", {s("gemma")}),
        ("  g&v  ", {s("gemma", "voxtral")}),
    ],
)
def test_expressions_expand_to_their_alternatives(
    expression: str, expected: set[frozenset[str]]
) -> None:
    assert alts(expression) == expected


def test_a_reference_expands_another_set() -> None:
    sets = {"chat": "g | q", "voice": "+chat & v"}
    assert alts("+chat & v", sets) == {s("gemma", "voxtral"), s("qwen", "voxtral")}
    assert all_alternatives(VARS, sets) == (
        s("gemma"),
        s("qwen"),
        s("gemma", "voxtral"),
        s("qwen", "voxtral"),
    )


@pytest.mark.parametrize(
    ("expression", "sets", "words"),
    [
        ("x", {}, "not one of the vars"),
        ("g &", {}, "ends too early"),
        ("(g | q", {}, "not closed"),
        ("g q", {}, "unexpected"),
        ("+nope", {}, "not a set"),
        ("+a", {"a": "+b", "b": "+a"}, "refers to itself"),
        ("g $ q", {}, "cannot read"),
    ],
)
def test_bad_expressions_are_errors(expression: str, sets: dict[str, str], words: str) -> None:
    with pytest.raises(MatrixError, match=words):
        expand(expression, VARS, sets, ("a",) if "a" in sets else ())


def swapper(costs: dict[str, float] | None = None) -> MatrixSwapper:
    sets = {"standard": "(g | q) & v", "full": "g & q & e"}
    return MatrixSwapper(all_alternatives(VARS, sets), costs or {})


@pytest.mark.parametrize(
    ("target", "running", "busy", "costs", "evicted"),
    [
        ("gemma", set(), set(), {}, set()),
        ("voxtral", {"gemma"}, set(), {}, set()),  # {g, v} holds both
        ("qwen", {"gemma", "voxtral"}, set(), {}, {"gemma"}),  # {q, v}: evict g only (cost 1)
        # gemma is dear to evict: {g, q, e} (evicts v, cost 1) beats {q, v} (evicts g, cost 50)
        ("qwen", {"gemma", "voxtral"}, set(), {"gemma": 50}, {"voxtral"}),
        ("qwen", {"gemma", "voxtral"}, set(), {"voxtral": 50}, {"gemma"}),
        # equal costs: the earliest alternative ({q, v}, of the first set)
        ("qwen", {"gemma", "voxtral"}, set(), {"gemma": 50, "voxtral": 50}, {"gemma"}),
        ("embed", {"gemma", "qwen", "voxtral"}, set(), {}, {"voxtral"}),
        ("qwen", {"gemma", "voxtral"}, {"gemma"}, {}, {"voxtral"}),  # tie: spare the busy one
    ],
)
def test_the_least_cost_alternative_is_chosen(
    target: str, running: set[str], busy: set[str], costs: dict[str, float], evicted: set[str]
) -> None:
    eviction = swapper(costs).eviction_for(target, running, busy)
    assert eviction is not None
    assert eviction.models == evicted, eviction.reason


def test_a_model_in_no_set_runs_alone() -> None:
    eviction = swapper().eviction_for("other", {"gemma", "voxtral"}, set())
    assert eviction is not None
    assert eviction.models == {"gemma", "voxtral"}
    assert "runs alone" in eviction.reason
