"""The scheduler's policies (issue 6): collation, priority, the starvation bound, the queue limit,
disconnects, cancelled starts, drains and their timeout, restore on a failed swap, concurrency
limits and co-resident starts.

Driven with a recording Effects and no sleeps: time passes by moving ``fx.clock`` and calling
``on_tick()``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from tests.fakes.effects import Admission, RecordingEffects

from modelswap.errors import Diagnosis, QueueFullError, StartError
from modelswap.routing.protocols import Swapper
from modelswap.routing.scheduler import Scheduler, SchedulerPolicy
from modelswap.routing.swappers import BudgetSwapper, ExclusiveSwapper, GroupSpec, GroupSwapper

NONE: frozenset[str] = frozenset()
GIB = 1024**3


def make(swapper: Swapper | None = None, **policy: Any) -> tuple[Scheduler, RecordingEffects]:
    fx = RecordingEffects()
    return Scheduler(swapper or ExclusiveSwapper(), fx, SchedulerPolicy(**policy)), fx


def together(*models: str) -> GroupSwapper:
    """Every model may run with every other (one group that neither swaps nor excludes)."""
    return GroupSwapper([GroupSpec("all", models, swap=False, exclusive=False)], list(models))


def bring_up(s: Scheduler, fx: RecordingEffects, model: str) -> None:
    """Make ``model`` running and idle (whatever the swapper evicts for it), then forget the
    calls this made."""
    warm = Admission(model, f"warm-{model}", arrived=fx.clock)
    s.on_request(warm)
    assert fx.calls[-1][:2] == ("start_swap", model), fx.calls
    s.on_swap_done(model, None)
    s.on_serve_done(model)
    assert fx.take()[-1] == ("grant", warm)
    assert model in s.running
    assert s.in_flight(model) == 0
    assert s.swapping is None


def busy(s: Scheduler, fx: RecordingEffects, model: str, name: str | None = None) -> Admission:
    """Bring ``model`` up and give it one request in flight."""
    bring_up(s, fx, model)
    adm = Admission(model, name or f"{model}-busy", arrived=fx.clock)
    s.on_request(adm)
    assert fx.take() == [("grant", adm)]
    assert s.in_flight(model) == 1
    return adm


def adm(model: str, name: str, arrived: float = 0.0) -> Admission:
    return Admission(model, name, arrived=arrived)


def start_error(model: str) -> StartError:
    return StartError(model, Diagnosis(code="oom", summary="CUDA out of memory."))


def serve_all(s: Scheduler, model: str) -> None:
    for _ in range(s.in_flight(model)):
        s.on_serve_done(model)


# ---- collation ------------------------------------------------------------------------------


def test_interleaved_abcabc_behind_a_busy_model_costs_three_starts() -> None:
    s, fx = make()
    busy(s, fx, "x")
    reqs = [adm(m, f"{m}{n}", arrived=float(n)) for n, m in enumerate("abcabc")]
    assert [r.model for r in reqs] == list("abcabc")
    for r in reqs:
        s.on_request(r)
    assert fx.take() == []

    s.on_serve_done("x")
    for model, evicted in (("a", "x"), ("b", "a"), ("c", "b")):
        assert fx.take() == [("start_swap", model, frozenset({evicted}))]
        s.on_swap_done(model, None)
        mine = [r for r in reqs if r.model == model]
        assert fx.take() == [("grant", r) for r in mine]  # both of them, together
        serve_all(s, model)
    assert fx.take() == []
    assert [target for target, _ in fx.starts()] == ["x", "a", "b", "c"]
    assert s.queue_length == 0


def test_interleaved_abcabc_from_cold_costs_three_starts() -> None:
    s, fx = make()
    reqs = [adm(m, f"{m}{n}", arrived=float(n)) for n, m in enumerate("abcabc")]
    for r in reqs:
        s.on_request(r)
    assert fx.take() == [("start_swap", "a", NONE)]  # the first request starts at once
    for model in "abc":
        if model != "a":
            assert fx.take()[0][:2] == ("start_swap", model)
        s.on_swap_done(model, None)
        assert fx.take() == [("grant", r) for r in reqs if r.model == model]
        serve_all(s, model)
    assert [target for target, _ in fx.starts()] == ["a", "b", "c"]


def test_requests_arriving_for_the_model_being_started_join_its_start() -> None:
    s, fx = make()
    busy(s, fx, "x")
    a1, b1 = adm("a", "a1"), adm("b", "b1")
    s.on_request(a1)
    s.on_request(b1)
    s.on_serve_done("x")
    assert fx.take() == [("start_swap", "a", frozenset({"x"}))]
    late = [adm("a", f"a-late{i}", arrived=1.0) for i in range(3)]
    for r in late:
        s.on_request(r)
    assert fx.take() == []
    s.on_swap_done("a", None)
    assert fx.take() == [("grant", a1)] + [("grant", r) for r in late]


# ---- priority and the starvation bound ------------------------------------------------------


@pytest.mark.parametrize(
    ("arrivals", "expected"),
    [
        # (model, arrived) in arrival order -> the order the models are started in
        ([("a", 0), ("b", 1), ("c", 2)], ["b", "c", "a"]),  # b, c outrank a; b, c tie: oldest
        ([("a", 0), ("c", 1), ("b", 2)], ["c", "b", "a"]),
        ([("c", 0), ("a", 1), ("b", 2), ("a", 3)], ["c", "b", "a"]),
        ([("a", 0), ("d", 1), ("b", 2)], ["d", "b", "a"]),  # d: priority 9
    ],
)
def test_higher_priority_waiters_go_first_ties_to_the_oldest(
    arrivals: list[tuple[str, float]], expected: list[str]
) -> None:
    s, fx = make(priorities={"b": 5, "c": 5, "d": 9})
    busy(s, fx, "x")
    reqs = [adm(m, f"{m}@{t}", arrived=t) for m, t in arrivals]
    for r in reqs:
        s.on_request(r)
    assert fx.take() == []
    s.on_serve_done("x")
    order = []
    for _ in expected:
        call = fx.take()
        assert len(call) == 1
        assert call[0][0] == "start_swap"
        model = str(call[0][1])
        order.append(model)
        s.on_swap_done(model, None)
        assert fx.take() == [("grant", r) for r in reqs if r.model == model]
        serve_all(s, model)
    assert order == expected
    assert fx.take() == []


def test_priority_does_not_preempt_a_swap_already_under_way() -> None:
    s, fx = make(priorities={"b": 5})
    a1, b1 = adm("a", "a1"), adm("b", "b1", arrived=1.0)
    s.on_request(a1)
    s.on_request(b1)
    assert fx.take() == [("start_swap", "a", NONE)]
    s.on_swap_done("a", None)
    assert fx.take() == [("grant", a1)]
    s.on_serve_done("a")
    assert fx.take() == [("start_swap", "b", frozenset({"a"}))]


@pytest.mark.parametrize(("now", "first"), [(59.0, "b"), (60.0, "a"), (61.0, "a")])
def test_starvation_bound_lets_an_old_low_priority_waiter_go_next(now: float, first: str) -> None:
    s, fx = make(priorities={"b": 10}, max_queue_wait=60.0)
    busy(s, fx, "x")
    a1, b1 = adm("a", "a1", arrived=0.0), adm("b", "b1", arrived=10.0)
    s.on_request(a1)
    s.on_request(b1)
    fx.clock = now
    s.on_tick()
    assert fx.take() == []  # x still serves: nothing starts before it drained
    s.on_serve_done("x")
    assert fx.take() == [("start_swap", first, frozenset({"x"}))]


def test_starvation_bound_serves_starving_models_oldest_first_whatever_the_priority() -> None:
    s, fx = make(priorities={"b": 20, "c": 10}, max_queue_wait=60.0)
    busy(s, fx, "x")
    a1, c1, b1 = adm("a", "a1", 0.0), adm("c", "c1", 5.0), adm("b", "b1", 50.0)
    for r in (b1, c1, a1):  # the queue order must not matter, only `arrived`
        s.on_request(r)
    fx.clock = 70.0  # a (70 s) and c (65 s) starve, b (20 s) does not
    s.on_tick()
    s.on_serve_done("x")
    order = []
    for _ in range(3):
        (call,) = fx.take()
        model = str(call[1])
        order.append(model)
        s.on_swap_done(model, None)
        fx.take()
        serve_all(s, model)
    assert order == ["a", "c", "b"]


def test_starvation_bound_is_checked_on_tick_while_a_drain_is_awaited() -> None:
    """The target chosen while x drains changes when a waiter crosses the bound: the running
    model the first choice would have evicted is no longer blocked for it."""
    # y and x run together; b (high priority) needs y evicted, a needs x evicted.
    swapper = GroupSwapper(
        [
            GroupSpec("gx", ["x", "a"], swap=True, exclusive=False),
            GroupSpec("gy", ["y", "b"], swap=True, exclusive=False),
        ],
        ["x", "y", "a", "b"],
    )
    s, fx = make(swapper, priorities={"b": 10}, max_queue_wait=60.0)
    bring_up(s, fx, "x")
    bring_up(s, fx, "y")
    assert s.running == {"x", "y"}
    x1, y1 = adm("x", "x1"), adm("y", "y1")
    s.on_request(x1)
    s.on_request(y1)
    assert fx.take() == [("grant", x1), ("grant", y1)]
    a1, b1 = adm("a", "a1", 0.0), adm("b", "b1", 10.0)
    s.on_request(a1)
    s.on_request(b1)
    x2 = adm("x", "x2", 11.0)
    s.on_request(x2)
    assert fx.take() == [("grant", x2)]  # b is the target: only y is blocked
    fx.clock = 61.0
    s.on_tick()
    s.on_request(adm("x", "x3", 61.0))
    assert fx.take() == []  # a starves now: x is blocked for it
    s.on_request(y2 := adm("y", "y2", 61.0))
    assert fx.take() == [("grant", y2)]  # and y is not blocked any more
    serve_all(s, "x")
    assert fx.take() == [("start_swap", "a", frozenset({"x"}))]
    assert s.queued("x") == 1  # x3 waits for x to come back


# ---- queue limit ----------------------------------------------------------------------------


def test_queue_limit_refuses_with_queue_full_and_retry_after() -> None:
    s, fx = make(queue_limit=2, retry_after=7.0)
    busy(s, fx, "x")
    a1, a2, a3, b1 = adm("a", "a1"), adm("a", "a2"), adm("a", "a3"), adm("b", "b1")
    s.on_request(a1)
    s.on_request(a2)
    assert fx.take() == []
    s.on_request(a3)
    s.on_request(b1)
    calls = fx.take()
    assert [c[:2] for c in calls] == [("grant_error", a3), ("grant_error", b1)]
    for call in calls:
        error = call[2]
        assert isinstance(error, QueueFullError)
        assert error.retry_after == 7.0
    assert s.queue_length == 2

    s.on_serve_done("x")
    assert fx.take() == [("start_swap", "a", frozenset({"x"}))]
    s.on_swap_done("a", None)
    assert fx.take() == [("grant", a1), ("grant", a2)]
    assert s.queue_length == 0
    s.on_request(a4 := adm("a", "a4"))  # room again once the queue emptied
    assert fx.take() == [("grant", a4)]


def test_queue_limit_counts_the_first_request_waiting_for_its_start() -> None:
    s, fx = make(queue_limit=1)
    a1, a2 = adm("a", "a1"), adm("a", "a2")
    s.on_request(a1)
    s.on_request(a2)
    calls = fx.take()
    assert calls[0] == ("start_swap", "a", NONE)
    assert calls[1][:2] == ("grant_error", a2)
    assert isinstance(calls[1][2], QueueFullError)


def test_queue_limit_does_not_refuse_a_request_its_model_can_serve_at_once() -> None:
    """queueLimit bounds *waiting* requests ("Waiting requests beyond this get 429"); a request
    for a running, idle model is served at once and never waits, so a queue full of other
    models' waiters must not turn it away."""
    s, fx = make(together("a", "b"), queue_limit=2, concurrency={"b": 1})
    bring_up(s, fx, "a")
    busy(s, fx, "b")
    b2, b3 = adm("b", "b2"), adm("b", "b3")
    s.on_request(b2)
    s.on_request(b3)
    assert fx.take() == []  # b is at its concurrency limit: both wait
    assert s.queue_length == 2
    a1 = adm("a", "a1")
    s.on_request(a1)
    assert fx.take() == [("grant", a1)]


# ---- disconnects and cancelled starts -------------------------------------------------------


def test_disconnect_while_queued_behind_a_busy_model_causes_no_start() -> None:
    s, fx = make()
    busy(s, fx, "x")
    a1, b1 = adm("a", "a1", 0.0), adm("b", "b1", 1.0)
    s.on_request(a1)
    s.on_request(b1)
    s.on_cancel(a1)
    assert fx.take() == []
    s.on_serve_done("x")
    assert fx.take() == [("start_swap", "b", frozenset({"x"}))]  # not a
    s.on_swap_done("b", None)
    assert fx.take() == [("grant", b1)]
    assert [t for t, _ in fx.starts()] == ["x", "b"]


def test_disconnect_of_the_only_waiter_leaves_the_busy_model_running() -> None:
    s, fx = make()
    busy(s, fx, "x")
    a1 = adm("a", "a1")
    s.on_request(a1)
    s.on_request(x2 := adm("x", "x2"))
    assert fx.take() == []  # x is blocked for a
    s.on_cancel(a1)
    assert fx.take() == [("grant", x2)]
    serve_all(s, "x")
    assert fx.take() == []
    assert s.running == {"x"}
    assert [t for t, _ in fx.starts()] == ["x"]


def test_start_whose_every_waiter_left_is_cancelled_when_another_model_waits() -> None:
    s, fx = make()
    a1, a2, b1 = adm("a", "a1"), adm("a", "a2"), adm("b", "b1", 1.0)
    s.on_request(a1)
    s.on_request(a2)
    s.on_request(b1)
    assert fx.take() == [("start_swap", "a", NONE)]
    s.on_cancel(a1)
    assert fx.take() == []  # a2 still waits for a
    s.on_cancel(a2)
    assert fx.take() == [("cancel_swap", "a")]

    # The router stops the starting process; the start then reports its failure.
    s.on_swap_done("a", start_error("a"))
    assert fx.take() == [("start_swap", "b", NONE)]
    s.on_swap_done("b", None)
    assert fx.take() == [("grant", b1)]


def test_request_after_a_cancelled_start_waits_for_a_fresh_start_not_the_cancel_error() -> None:
    s, fx = make()
    a1, b1 = adm("a", "a1"), adm("b", "b1", 1.0)
    s.on_request(a1)
    s.on_request(b1)
    s.on_cancel(a1)
    assert fx.take() == [("start_swap", "a", NONE), ("cancel_swap", "a")]
    a2 = adm("a", "a2", 2.0)
    s.on_request(a2)  # arrives while the cancelled start is winding down
    assert fx.take() == []
    s.on_swap_done("a", start_error("a"))  # the abort, as the router reports it
    assert fx.take() == [("start_swap", "b", NONE)]  # b waited longest; a2 is not failed
    assert s.queued("a") == 1
    s.on_swap_done("b", None)
    assert fx.take() == [("grant", b1)]
    serve_all(s, "b")
    assert fx.take() == [("start_swap", "a", frozenset({"b"}))]
    s.on_swap_done("a", None)
    assert fx.take() == [("grant", a2)]


def test_cancelled_start_that_won_the_race_is_evicted_for_the_waiting_model() -> None:
    s, fx = make()
    a1, b1 = adm("a", "a1"), adm("b", "b1", 1.0)
    s.on_request(a1)
    s.on_request(b1)
    s.on_cancel(a1)
    assert fx.take() == [("start_swap", "a", NONE), ("cancel_swap", "a")]
    s.on_swap_done("a", None)  # it became ready before the abort took effect
    assert fx.take() == [("start_swap", "b", frozenset({"a"}))]


def test_start_whose_every_waiter_left_goes_on_when_nobody_else_waits() -> None:
    s, fx = make()
    a1 = adm("a", "a1")
    s.on_request(a1)
    assert fx.take() == [("start_swap", "a", NONE)]
    s.on_cancel(a1)
    assert fx.take() == []
    assert ("cancel_swap", "a") not in fx.calls
    s.on_swap_done("a", None)
    assert fx.take() == []
    assert s.running == {"a"}


# ---- drains ---------------------------------------------------------------------------------


def test_never_evicts_a_busy_model_before_it_drained() -> None:
    s, fx = make(drain_timeout=600.0)
    bring_up(s, fx, "a")
    a1, a2 = adm("a", "a1"), adm("a", "a2")
    s.on_request(a1)
    s.on_request(a2)
    assert fx.take() == [("grant", a1), ("grant", a2)]
    s.on_request(b1 := adm("b", "b1"))
    for clock in (1.0, 100.0, 599.0):
        fx.clock = clock
        s.on_tick()
    assert fx.take() == []
    s.on_serve_done("a")
    assert fx.take() == []  # one still in flight
    assert s.running == {"a"}
    s.on_serve_done("a")
    assert fx.take() == [("start_swap", "b", frozenset({"a"}))]
    s.on_swap_done("b", None)
    assert fx.take() == [("grant", b1)]


def test_budget_eviction_waits_for_a_drain_and_prefers_whichever_model_drained() -> None:
    uses = {"a": {"ram": 6 * GIB}, "b": {"ram": 6 * GIB}, "c": {"ram": 6 * GIB}}
    cost = {"a": 1.0, "b": 2.0, "c": 3.0}
    swapper = BudgetSwapper({"ram": 12 * GIB}, uses.__getitem__, cost.__getitem__)
    s, fx = make(swapper)
    bring_up(s, fx, "a")
    bring_up(s, fx, "b")
    assert s.running == {"a", "b"}
    a1, b1 = adm("a", "a1"), adm("b", "b1")
    s.on_request(a1)
    s.on_request(b1)
    fx.take()
    s.on_request(c1 := adm("c", "c1"))
    fx.clock = 100.0
    s.on_tick()
    assert fx.take() == []  # both busy: nothing is evicted mid-answer
    s.on_serve_done("b")  # b is idle now: evicted before the busy (if cheaper) a
    assert fx.take() == [("start_swap", "c", frozenset({"b"}))]
    assert s.running == {"a"}
    assert s.in_flight("a") == 1
    s.on_swap_done("c", None)
    assert fx.take() == [("grant", c1)]
    assert s.running == {"a", "c"}


def test_drain_timeout_lets_the_swap_proceed_and_says_why() -> None:
    s, fx = make(drain_timeout=30.0)
    bring_up(s, fx, "a")
    fx.clock = 100.0
    s.on_request(a1 := adm("a", "a1", 100.0))
    assert fx.take() == [("grant", a1)]
    s.on_request(b1 := adm("b", "b1", 100.0))
    fx.clock = 129.9
    s.on_tick()
    assert fx.take() == []
    fx.clock = 130.0
    s.on_tick()
    assert fx.take() == [("start_swap", "b", frozenset({"a"}))]
    reason = fx.reasons[-1]
    assert "drain timeout" in reason
    assert "a still busy" in reason
    assert "30 s" in reason

    s.on_swap_done("b", None)
    assert fx.take() == [("grant", b1)]
    s.on_serve_done("a")  # the cut request ends later: harmless
    assert fx.take() == []
    assert s.running == {"b"}
    assert s.in_flight("a") == 0


def test_drain_timeout_restarts_when_a_withdrawn_swap_is_due_again() -> None:
    """b's first waiter leaves; much later b is wanted again while a serves. The drain must
    start over then: a's answers are cut only ``drain_timeout`` after b became due *again*."""
    s, fx = make(drain_timeout=30.0)
    busy(s, fx, "a", "a1")
    s.on_request(b1 := adm("b", "b1", 0.0))
    fx.clock = 5.0
    s.on_cancel(b1)  # the swap to b is no longer due
    assert fx.take() == []
    fx.clock = 100.0
    s.on_request(b2 := adm("b", "b2", 100.0))
    assert fx.take() == []  # a still serves a1, and b has been due for 0 s
    fx.clock = 129.0
    s.on_tick()
    assert fx.take() == []
    fx.clock = 130.0
    s.on_tick()
    assert fx.take() == [("start_swap", "b", frozenset({"a"}))]
    s.on_swap_done("b", None)
    assert fx.take() == [("grant", b2)]


def test_swap_after_a_normal_drain_does_not_mention_the_drain_timeout() -> None:
    s, fx = make(drain_timeout=30.0)
    busy(s, fx, "a")
    s.on_request(adm("b", "b1"))
    fx.clock = 10.0
    s.on_serve_done("a")
    assert fx.take() == [("start_swap", "b", frozenset({"a"}))]
    assert "drain timeout" not in fx.reasons[-1]


# ---- restore on a failed swap ---------------------------------------------------------------


def test_failed_start_restores_the_evicted_model_when_it_has_waiters() -> None:
    s, fx = make()
    busy(s, fx, "a", "a1")
    b1, a2 = adm("b", "b1", 1.0), adm("a", "a2", 2.0)
    s.on_request(b1)
    s.on_request(a2)  # blocked behind b
    s.on_serve_done("a")
    assert fx.take() == [("start_swap", "b", frozenset({"a"}))]
    a3 = adm("a", "a3", 3.0)
    s.on_request(a3)
    err = start_error("b")
    s.on_swap_done("b", err)
    assert fx.take() == [("grant_error", b1, err), ("start_swap", "a", NONE)]
    s.on_swap_done("a", None)
    assert fx.take() == [("grant", a2), ("grant", a3)]
    assert s.running == {"a"}


def test_failed_start_restores_nothing_when_the_evicted_model_has_no_waiters() -> None:
    s, fx = make()
    bring_up(s, fx, "a")
    s.on_request(b1 := adm("b", "b1"))
    assert fx.take() == [("start_swap", "b", frozenset({"a"}))]
    err = start_error("b")
    s.on_swap_done("b", err)
    assert fx.take() == [("grant_error", b1, err)]
    assert s.running == NONE
    assert s.swapping is None


# ---- concurrency ----------------------------------------------------------------------------


def test_concurrency_limit_queues_extra_requests_and_grants_them_on_serve_done() -> None:
    s, fx = make(concurrency={"a": 2})
    bring_up(s, fx, "a")
    reqs = [adm("a", f"a{i}") for i in range(1, 6)]
    for r in reqs:
        s.on_request(r)
    assert fx.take() == [("grant", reqs[0]), ("grant", reqs[1])]
    assert s.queued("a") == 3
    assert not fx.errors()  # waiting, not rejected
    s.on_serve_done("a")
    assert fx.take() == [("grant", reqs[2])]
    s.on_serve_done("a")
    s.on_serve_done("a")
    assert fx.take() == [("grant", reqs[3]), ("grant", reqs[4])]
    assert s.in_flight("a") == 2
    assert s.queued("a") == 0


def test_concurrency_limit_applies_to_requests_collated_during_a_start() -> None:
    s, fx = make(concurrency={"a": 2})
    reqs = [adm("a", f"a{i}") for i in range(1, 4)]
    for r in reqs:
        s.on_request(r)
    assert fx.take() == [("start_swap", "a", NONE)]
    s.on_swap_done("a", None)
    assert fx.take() == [("grant", reqs[0]), ("grant", reqs[1])]
    s.on_serve_done("a")
    assert fx.take() == [("grant", reqs[2])]


def test_concurrency_limit_of_one_model_does_not_hold_back_another() -> None:
    s, fx = make(together("a", "b"), concurrency={"a": 1})
    bring_up(s, fx, "a")
    bring_up(s, fx, "b")
    a1, a2, b1, b2 = adm("a", "a1"), adm("a", "a2"), adm("b", "b1"), adm("b", "b2")
    for r in (a1, a2, b1, b2):
        s.on_request(r)
    assert fx.take() == [("grant", a1), ("grant", b1), ("grant", b2)]
    s.on_serve_done("a")
    assert fx.take() == [("grant", a2)]


def test_max_in_flight_bounds_requests_across_models() -> None:
    s, fx = make(together("a", "b"), max_in_flight=2)
    bring_up(s, fx, "a")
    bring_up(s, fx, "b")
    a1, b1, a2, b2 = adm("a", "a1"), adm("b", "b1"), adm("a", "a2"), adm("b", "b2")
    for r in (a1, b1, a2, b2):
        s.on_request(r)
    assert fx.take() == [("grant", a1), ("grant", b1)]
    assert s.queue_length == 2
    s.on_serve_done("b")
    assert fx.take() == [("grant", a2)]  # the oldest waiter first
    s.on_serve_done("a")
    assert fx.take() == [("grant", b2)]
    assert s.in_flight("a") + s.in_flight("b") == 2


def test_max_in_flight_applies_when_a_start_collates() -> None:
    s, fx = make(max_in_flight=1)
    a1, a2 = adm("a", "a1"), adm("a", "a2")
    s.on_request(a1)
    s.on_request(a2)
    fx.take()
    s.on_swap_done("a", None)
    assert fx.take() == [("grant", a1)]
    s.on_serve_done("a")
    assert fx.take() == [("grant", a2)]


# ---- co-resident models ---------------------------------------------------------------------


def test_co_resident_start_has_an_empty_eviction_and_the_busy_model_keeps_serving() -> None:
    s, fx = make(together("a", "b"))
    busy(s, fx, "a", "a1")
    s.on_request(b1 := adm("b", "b1"))
    assert fx.take() == [("start_swap", "b", NONE)]  # at once: nothing to drain
    s.on_request(a2 := adm("a", "a2"))
    assert fx.take() == [("grant", a2)]  # a keeps serving while b starts
    assert s.in_flight("a") == 2
    s.on_swap_done("b", None)
    assert fx.take() == [("grant", b1)]
    assert s.running == {"a", "b"}


def test_budget_co_residence_two_small_fit_the_big_one_evicts_both() -> None:
    uses: Mapping[str, Mapping[str, int]] = {
        "s1": {"ram": GIB},
        "s2": {"ram": GIB},
        "big": {"ram": 2 * GIB},
    }
    swapper = BudgetSwapper({"ram": 2 * GIB}, uses.__getitem__, lambda m: 1.0)
    s, fx = make(swapper)
    bring_up(s, fx, "s1")
    s.on_request(adm("s2", "s2-1"))
    assert fx.take() == [("start_swap", "s2", NONE)]
    s.on_swap_done("s2", None)
    fx.take()
    serve_all(s, "s2")
    assert s.running == {"s1", "s2"}
    s.on_request(adm("big", "big1"))
    assert fx.take() == [("start_swap", "big", frozenset({"s1", "s2"}))]


def test_a_target_that_cannot_fit_now_is_skipped_for_one_that_can() -> None:
    uses = {"p": {"ram": 6 * GIB}, "a": {"ram": 6 * GIB}, "b": {"ram": 2 * GIB}}
    swapper = BudgetSwapper({"ram": 10 * GIB}, uses.__getitem__, lambda m: 1.0, {"p"})
    s, fx = make(swapper)
    bring_up(s, fx, "p")
    a1, b1 = adm("a", "a1", 0.0), adm("b", "b1", 1.0)
    s.on_request(a1)  # a cannot run next to the persistent p, whatever is evicted
    assert fx.take() == []
    s.on_request(b1)
    assert fx.take() == [("start_swap", "b", NONE)]
    s.on_swap_done("b", None)
    assert fx.take() == [("grant", b1)]
    assert s.queued("a") == 1
