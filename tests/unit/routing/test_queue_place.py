"""A waiter's place for people (issue 40): ordinals, the estimate only when there is one, the SSE
comment and the header; what the scheduler says each waiter waits for; the queue's rows."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from tests.fakes.effects import RecordingEffects

from modelswap.routing.clients import ANONYMOUS, Client
from modelswap.routing.queue_place import (
    QUEUE_HEADER,
    WaitFacts,
    estimate_wait,
    ordinal,
    place_comment,
    place_header,
    place_of,
    place_words,
    waiters,
)
from modelswap.routing.scheduler import WAITS_FOR, Scheduler, SchedulerPolicy
from modelswap.routing.swappers import ExclusiveSwapper


@dataclass(eq=False)
class Waiting:
    model: str
    arrived: float = 0.0
    client: Client = ANONYMOUS


@pytest.mark.parametrize(
    ("n", "text"),
    [
        (1, "1st"),
        (2, "2nd"),
        (3, "3rd"),
        (4, "4th"),
        (11, "11th"),
        (12, "12th"),
        (13, "13th"),
        (21, "21st"),
        (22, "22nd"),
        (101, "101st"),
        (111, "111th"),
        (112, "112th"),
    ],
)
def test_ordinals(n: int, text: str) -> None:
    assert ordinal(n) == text


def test_the_estimate_is_said_only_when_there_is_one() -> None:
    assert place_words(3, "qwen", 12.4) == "queued 3rd for qwen, ~12 s"
    assert place_words(1, "qwen", None) == "queued 1st for qwen"
    assert place_words(2, "qwen", 0.2) == "queued 2nd for qwen, ~1 s"  # never "~0 s"
    assert place_words(2, "qwen", float("inf")) == "queued 2nd for qwen"


def test_comment_and_header_say_the_same() -> None:
    assert place_comment(3, "qwen", 12.0) == b": queued 3rd for qwen, ~12 s\n\n"
    assert place_header(3, "qwen", 12.0) == (QUEUE_HEADER, "queued 3rd for qwen, ~12 s")
    assert QUEUE_HEADER == "X-Modelswap-Queue"


def test_a_line_break_in_a_model_id_cannot_end_the_comment() -> None:
    comment = place_comment(1, "a\nb\r", None)
    assert comment == b": queued 1st for a b \n\n"
    assert "\n" not in place_header(1, "a\nb", None)[1]


def test_estimates() -> None:
    served = WaitFacts(slots=2, service=4.0)
    assert estimate_wait("concurrencyLimit", 1, served) == 4.0
    assert estimate_wait("concurrencyLimit", 2, served) == 4.0
    assert estimate_wait("concurrencyLimit", 3, served) == 8.0  # the second round
    assert estimate_wait("maxInFlight", 5, served) == 12.0
    assert estimate_wait("concurrencyLimit", 1, WaitFacts(slots=2)) is None  # never served
    starting = WaitFacts(slots=1, service=3.0, start_left=10.0)
    assert estimate_wait("start", 1, starting) == 10.0
    assert estimate_wait("start", 3, starting) == 16.0
    assert estimate_wait("start", 5, WaitFacts(slots=0, start_left=10.0)) == 10.0  # all at once
    assert estimate_wait("start", 2, WaitFacts(slots=1, start_left=10.0)) is None
    assert estimate_wait("start", 1, WaitFacts()) is None  # overdue: no figure
    assert estimate_wait("drain", 1, WaitFacts(due_seconds=30.0)) == 30.0
    assert estimate_wait("swap", 1, WaitFacts(service=1.0, start_left=1.0, due_seconds=1.0)) is None


def make(**policy: object) -> tuple[Scheduler, RecordingEffects]:
    fx = RecordingEffects()
    return Scheduler(ExclusiveSwapper(), fx, SchedulerPolicy(**policy)), fx  # type: ignore[arg-type]


def test_what_each_waiter_waits_for() -> None:
    s, _fx = make(concurrency={"a": 1})
    first = Waiting("a")
    s.on_request(first)  # a starts
    assert s.waits_for(first) == "start"
    s.on_swap_done("a", None)  # granted: a has one in flight, its limit
    second = Waiting("a", arrived=1.0)
    s.on_request(second)
    assert s.waits_for(second) == "concurrencyLimit"
    other = Waiting("b", arrived=2.0)
    s.on_request(other)  # b's start is due, and waits for a's answer to end
    assert s.waits_for(other) == "drain"
    assert s.waits_for(second) == "swap"  # a is to stop for b: its waiter waits for the swap
    assert set(WAITS_FOR) >= {"start", "drain", "swap", "concurrencyLimit"}


def test_max_in_flight_is_named() -> None:
    s, _fx = make(max_in_flight=1)
    s.on_request(Waiting("a"))
    s.on_swap_done("a", None)
    late = Waiting("a", arrived=1.0)
    s.on_request(late)
    assert s.waits_for(late) == "maxInFlight"


def test_rows_in_serving_order_with_places_per_model() -> None:
    s, fx = make(concurrency={"a": 1})
    ann, bob = Client("ann"), Client("bob", priority="batch", weight=2.0)
    s.on_request(Waiting("a", 0.0, ann))
    s.on_swap_done("a", None)  # ann's first is served
    for i, who in enumerate((bob, ann, bob)):
        s.on_request(Waiting("a", 1.0 + i, who))
    fx.clock = 10.0
    asked: list[str] = []

    def facts(model: str) -> WaitFacts:
        asked.append(model)
        return WaitFacts(slots=1, service=5.0)

    rows = waiters(s, fx.clock, facts)
    assert [(r.key, r.priority, r.place) for r in rows] == [
        ("ann", "interactive", 1),  # interactive before batch
        ("bob", "batch", 2),
        ("bob", "batch", 3),
    ]
    assert asked == ["a"]  # once per model
    assert rows[0].waited == 8.0
    assert [r.estimate for r in rows] == [5.0, 10.0, 15.0]
    row = rows[1].as_dict()
    assert (row["key"], row["class"], row["weight"]) == ("bob", "batch", 2.0)
    assert row["waits_for"] == "concurrencyLimit"
    assert row["says"] == "queued 2nd for a, ~10 s"


def test_a_waiters_place_is_what_it_is_told_until_it_is_granted() -> None:
    s, fx = make(concurrency={"a": 1})
    s.on_request(Waiting("a"))
    s.on_swap_done("a", None)
    first, second = Waiting("a", 1.0), Waiting("a", 2.0)
    s.on_request(first)
    s.on_request(second)
    facts = lambda _model: WaitFacts(slots=1, service=6.0)  # noqa: E731
    place = place_of(s, second, facts)
    assert place is not None
    assert place.words() == "queued 2nd for a, ~12 s"
    assert place.comment() == b": queued 2nd for a, ~12 s\n\n"
    assert place.header() == ("X-Modelswap-Queue", "queued 2nd for a, ~12 s")
    s.on_serve_done("a")  # the first waiter is granted: the second moves up
    assert fx.take()[-1] == ("grant", first)
    moved = place_of(s, second, facts)
    assert moved is not None
    assert moved.words() == "queued 1st for a, ~6 s"
    s.on_serve_done("a")
    assert place_of(s, second, facts) is None  # granted: it waits no more
