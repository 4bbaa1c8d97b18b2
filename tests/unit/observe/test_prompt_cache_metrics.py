"""The prompt cache kept across a swap, counted (issue 30): slots by action and result, bytes,
tokens and failures; the last-swap record's first request shows its cached tokens."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from modelswap.events import Event
from modelswap.observe.last_swap import LastSwaps
from modelswap.observe.metrics import Metrics


def values(metrics: Metrics, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    text = metrics.exposition().decode()
    return {
        tuple(sorted(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name
    }


SAVED = {
    "model": "a",
    "tokens": 1500,
    "slots": 1,
    "bytes": 35_000_000,
    "ms": 180.0,
    "detail": [
        {"slot": 0, "result": "saved", "tokens": 1500, "bytes": 35_000_000},
        {"slot": 1, "result": "skipped", "reason": "not written within saveTimeout"},
    ],
}
RESTORED = {
    "model": "a",
    "tokens": 0,
    "slots": 0,
    "bytes": 0,
    "ms": 3.0,
    "detail": [{"slot": 0, "result": "dropped", "reason": "its bytes differ"}],
}


def test_saves_restores_bytes_and_failures_are_counted() -> None:
    metrics = Metrics(dict)
    metrics.prompt_cache("save", SAVED)
    metrics.prompt_cache("restore", RESTORED)
    metrics.prompt_cache("save", {"model": "b", "error": "GET /slots answered 404"})
    slots = values(metrics, "modelswap_prompt_cache_slots_total")
    assert slots == {
        (("action", "save"), ("model", "a"), ("result", "saved")): 1.0,
        (("action", "save"), ("model", "a"), ("result", "skipped")): 1.0,
        (("action", "restore"), ("model", "a"), ("result", "dropped")): 1.0,
    }
    assert values(metrics, "modelswap_prompt_cache_bytes_total") == {
        (("action", "save"), ("model", "a")): 35_000_000.0
    }
    assert values(metrics, "modelswap_prompt_cache_tokens_total") == {
        (("action", "save"), ("model", "a")): 1500.0
    }
    assert values(metrics, "modelswap_prompt_cache_failures_total") == {
        (("action", "restore"), ("model", "a")): 1.0,
        (("action", "save"), ("model", "b")): 1.0,
    }


def test_the_first_request_after_a_restore_shows_its_cached_tokens() -> None:
    swaps = LastSwaps()
    swaps.on_event(Event("swap.done", {"target": "a", "prompt_cache": {"restored": RESTORED}}))
    data = {"model": "a", "first_byte": 0.2, "request_id": "r1", "cached_tokens": 1499}
    swaps.on_event(Event("request.finished", data))
    receipt = swaps.last("a")
    assert receipt is not None
    assert receipt["first_request_cached_tokens"] == 1499
