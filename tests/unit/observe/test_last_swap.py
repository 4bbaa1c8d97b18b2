"""LastSwaps (observe/last_swap.py): each model's last swap, with its first request's first byte."""

from __future__ import annotations

from modelswap.events import Event
from modelswap.observe.last_swap import LastSwaps


def done(target: str, at: float, **extra: object) -> Event:
    data: dict[str, object] = {"target": target, "evict": ["a"], "stop_seconds": 0.05, **extra}
    return Event("swap.done", data, at=at)


def finished(model: str, first_byte: float | None, request_id: str = "r1") -> Event:
    data = {"model": model, "first_byte": first_byte, "load": 0.4, "request_id": request_id}
    return Event("request.finished", data)


def test_the_receipt_takes_the_first_request_after_it() -> None:
    swaps = LastSwaps()
    swaps.on_event(finished("b", 9.0, "before"))  # no swap to b yet: nothing to complete
    assert swaps.last("b") is None
    swaps.on_event(done("b", 100.0))
    swaps.on_event(finished("a", 1.0))  # another model's request
    swaps.on_event(finished("b", None))  # no first byte (an error before any): not it
    swaps.on_event(finished("b", 0.42, "first"))
    swaps.on_event(finished("b", 0.01, "second"))
    receipt = swaps.last("b")
    assert receipt == {
        "target": "b",
        "evict": ["a"],
        "stop_seconds": 0.05,
        "at": 100.0,
        "first_byte_seconds": 0.42,
        "first_request_id": "first",
        "first_request_load_seconds": 0.4,
    }


def test_a_newer_swap_replaces_the_last_and_a_failed_one_takes_no_first_byte() -> None:
    swaps = LastSwaps()
    swaps.on_event(done("b", 1.0))
    swaps.on_event(finished("b", 0.3))
    swaps.on_event(done("b", 2.0, error="exit 1"))
    swaps.on_event(finished("b", 0.2))
    receipt = swaps.last("b")
    assert receipt is not None
    assert receipt["at"] == 2.0
    assert "first_byte_seconds" not in receipt


def test_last_is_a_copy() -> None:
    swaps = LastSwaps()
    swaps.on_event(done("b", 1.0))
    copy = swaps.last("b")
    assert copy is not None
    copy["at"] = 0
    assert swaps.last("b")["at"] == 1.0  # type: ignore[index]
