"""Swaps priced by the work they throw away (routing/prefill.py, BudgetSwapper): the prefill
a model's slots would redo counts in its eviction cost unless its prompt cache keeps it."""

from __future__ import annotations

from pathlib import Path

import pytest

from modelswap.model_stats import StatsStore
from modelswap.routing.prefill import EvictionPrice
from modelswap.routing.swappers import BudgetSwapper

GIB = 1024**3


def test_the_price_is_the_start_plus_the_prefill_to_redo() -> None:
    price = EvictionPrice(start_seconds=8.0, held_tokens=6000, prompt_rate=1500.0)
    assert price.prefill_seconds == pytest.approx(4.0)
    assert price.total == pytest.approx(12.0)
    assert price.summary() == "start 8.0 s + prefill 4.0 s (6000 tokens at 1500 tok/s)"
    assert price.as_dict() == {
        "start_seconds": 8.0,
        "prefill_seconds": 4.0,
        "total_seconds": 12.0,
        "held_tokens": 6000,
        "prompt_tokens_per_second": 1500.0,
    }


def test_a_prompt_cache_that_keeps_the_slots_loses_no_prefill() -> None:
    price = EvictionPrice(8.0, held_tokens=6000, prompt_rate=1500.0, cache_keeps=True)
    assert price.total == 8.0
    assert "prompt cache keeps its 6000 tokens" in price.summary()


def test_unknown_figures_cost_nothing_and_say_so() -> None:
    assert EvictionPrice(3.0).total == 3.0
    unmeasured = EvictionPrice(3.0, held_tokens=500)
    assert unmeasured.total == 3.0
    assert "not measured yet" in unmeasured.summary()


def test_the_budget_evicts_the_model_whose_eviction_throws_less_work_away() -> None:
    # a and b start alike; a's slots hold 20000 tokens of conversation, b's none.
    prices = {
        "a": EvictionPrice(10.0, held_tokens=20_000, prompt_rate=2000.0),
        "b": EvictionPrice(10.0, held_tokens=0, prompt_rate=2000.0),
    }
    uses = {"a": {"gpu": 10 * GIB}, "b": {"gpu": 10 * GIB}, "t": {"gpu": 10 * GIB}}
    swapper = BudgetSwapper(
        {"gpu": 20 * GIB},
        lambda m: uses[m],
        lambda m: prices[m].total,
        explain=lambda m: prices[m].summary(),
    )
    eviction = swapper.eviction_for("t", {"a", "b"}, set())
    assert eviction is not None
    assert eviction.models == {"b"}
    # with a's prompt cache kept across the stop, a costs no more than b: the name decides
    prices["a"] = EvictionPrice(10.0, held_tokens=20_000, prompt_rate=2000.0, cache_keeps=True)
    eviction = swapper.eviction_for("t", {"a", "b"}, set())
    assert eviction is not None
    assert eviction.models == {"a"}
    assert "a (idle, cost 10.0 s: start 10.0 s; prompt cache keeps its 20000 tokens)" in (
        eviction.reason
    )


def test_the_prompt_rate_is_the_median_of_timed_prefills_and_is_remembered(
    tmp_path: Path,
) -> None:
    path = tmp_path / "stats.json"
    stats = StatsStore(path)
    assert stats.prompt_rate("m") is None
    stats.record_prompt("m", 1000, 1.0)
    stats.record_prompt("m", 3000, 1.0)
    stats.record_prompt("m", 2000, 1.0)
    stats.record_prompt("m", 10, 0.001)  # a short prompt says little: not timed
    assert stats.prompt_rate("m") == 2000.0
    stats.record_held("m", 4096)
    stats.save()
    again = StatsStore(path)
    assert again.prompt_rate("m") == 2000.0
    assert again.held("m") is None  # the slots died with the process
