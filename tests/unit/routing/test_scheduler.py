"""The scheduler, driven directly with a recording Effects.

The rules under test are in docs/architecture.md, "Scheduler rules"; the layout in "Tests".

Each test feeds events to the scheduler and asserts the exact sequence of effects it asked for,
step by step (``fx.take()`` returns the calls made since the previous ``take``).
"""

from __future__ import annotations

from tests.fakes.effects import Admission, RecordingEffects

from modelswap.errors import Diagnosis, ShuttingDownError, StartError
from modelswap.routing.scheduler import Scheduler, SchedulerPolicy
from modelswap.routing.swappers import ExclusiveSwapper

NONE: frozenset[str] = frozenset()


def make() -> tuple[Scheduler, RecordingEffects]:
    fx = RecordingEffects()
    return Scheduler(ExclusiveSwapper(), fx), fx


def bring_up(s: Scheduler, fx: RecordingEffects, model: str) -> None:
    """Make ``model`` the running, idle model (evicting whatever idle model ran), then forget
    the calls this made."""
    warm = Admission(model, f"warm-{model}")
    s.on_request(warm)
    s.on_swap_done(model, None)
    s.on_serve_done(model)
    assert fx.take()[-1] == ("grant", warm)
    assert s.running == {model}
    assert s.in_flight(model) == 0
    assert s.swapping is None


def start_error(model: str) -> StartError:
    return StartError(model, Diagnosis(code="oom", summary="CUDA out of memory."))


# ---- serving and starting -------------------------------------------------------------------


def test_scheduler_first_request_starts_swap_and_is_granted_after_it() -> None:
    s, fx = make()
    a1 = Admission("a", "a1")

    s.on_request(a1)
    assert fx.take() == [("start_swap", "a", NONE)]
    assert s.swapping == "a"
    assert s.running == NONE
    assert s.queued("a") == 1
    assert s.in_flight("a") == 0

    s.on_swap_done("a", None)
    assert fx.take() == [("grant", a1)]
    assert s.swapping is None
    assert s.running == {"a"}
    assert s.queued("a") == 0
    assert s.in_flight("a") == 1

    s.on_serve_done("a")
    assert fx.take() == []
    assert s.in_flight("a") == 0
    assert s.running == {"a"}


def test_scheduler_running_model_is_granted_at_once() -> None:
    s, fx = make()
    bring_up(s, fx, "a")
    a1, a2 = Admission("a", "a1"), Admission("a", "a2")

    s.on_request(a1)
    assert fx.take() == [("grant", a1)]
    s.on_request(a2)
    assert fx.take() == [("grant", a2)]
    assert s.in_flight("a") == 2
    assert s.queued("a") == 0

    s.on_serve_done("a")
    s.on_serve_done("a")
    assert fx.take() == []
    assert s.in_flight("a") == 0


def test_scheduler_requests_during_a_start_join_it() -> None:
    s, fx = make()
    reqs = [Admission("a", f"a{i}") for i in range(1, 6)]

    s.on_request(reqs[0])
    assert fx.take() == [("start_swap", "a", NONE)]
    for adm in reqs[1:]:
        s.on_request(adm)
    assert fx.take() == []
    assert s.queued("a") == 5

    s.on_swap_done("a", None)
    assert fx.take() == [("grant", adm) for adm in reqs]
    assert fx.starts() == [("a", NONE)]
    assert s.in_flight("a") == 5


def test_scheduler_swap_evicts_an_idle_model_at_once() -> None:
    s, fx = make()
    bring_up(s, fx, "a")
    b1 = Admission("b", "b1")

    s.on_request(b1)
    assert fx.take() == [("start_swap", "b", frozenset({"a"}))]
    assert s.running == NONE
    assert s.swapping == "b"

    s.on_swap_done("b", None)
    assert fx.take() == [("grant", b1)]
    assert s.running == {"b"}


def test_scheduler_collates_requests_queued_during_a_swap() -> None:
    s, fx = make()
    x1 = Admission("x", "x1")
    a1, b1, a2, b2 = (
        Admission(m, n) for m, n in [("a", "a1"), ("b", "b1"), ("a", "a2"), ("b", "b2")]
    )

    s.on_request(x1)
    assert fx.take() == [("start_swap", "x", NONE)]
    for adm in (a1, b1, a2, b2):
        s.on_request(adm)
    assert fx.take() == []

    s.on_swap_done("x", None)
    assert fx.take() == [("grant", x1)]  # a waits for x1 to drain
    s.on_serve_done("x")
    assert fx.take() == [("start_swap", "a", frozenset({"x"}))]

    s.on_swap_done("a", None)
    assert fx.take() == [("grant", a1), ("grant", a2)]
    s.on_serve_done("a")
    assert fx.take() == []  # a2 still in flight
    s.on_serve_done("a")
    assert fx.take() == [("start_swap", "b", frozenset({"a"}))]

    s.on_swap_done("b", None)
    assert fx.take() == [("grant", b1), ("grant", b2)]
    assert fx.starts() == [("x", NONE), ("a", frozenset({"x"})), ("b", frozenset({"a"}))]


def test_scheduler_swap_waits_for_the_evicted_model_to_drain() -> None:
    s, fx = make()
    bring_up(s, fx, "a")
    a1, b1 = Admission("a", "a1"), Admission("b", "b1")

    s.on_request(a1)
    assert fx.take() == [("grant", a1)]
    s.on_request(b1)
    assert fx.take() == []
    assert s.swapping is None
    assert s.running == {"a"}
    assert s.queued("b") == 1

    s.on_serve_done("a")
    assert fx.take() == [("start_swap", "b", frozenset({"a"}))]
    assert s.running == NONE
    assert s.swapping == "b"

    s.on_swap_done("b", None)
    assert fx.take() == [("grant", b1)]


def test_scheduler_a_swap_that_waits_for_a_drain_is_prepared_once_then_started() -> None:
    s, fx = make()
    bring_up(s, fx, "a")
    a1, b1, b2 = Admission("a", "a1"), Admission("b", "b1"), Admission("b", "b2")
    s.on_request(a1)
    s.on_request(b1)
    s.on_request(b2)
    s.on_tick()
    assert fx.preparations == [("prepare", "b")]  # once, however often it is re-checked
    s.on_serve_done("a")
    assert fx.take()[-1] == ("start_swap", "b", frozenset({"a"}))
    assert fx.preparations == [("prepare", "b")]  # the swap took over what was prepared


def test_scheduler_a_prepared_swap_nobody_waits_for_is_abandoned() -> None:
    s, fx = make()
    bring_up(s, fx, "a")
    a1, b1 = Admission("a", "a1"), Admission("b", "b1")
    s.on_request(a1)
    s.on_request(b1)
    s.on_cancel(b1)
    assert fx.preparations == [("prepare", "b"), ("abandon", "b")]
    assert fx.take() == [("grant", a1)]


def test_scheduler_a_higher_priority_target_replaces_the_prepared_one() -> None:
    fx = RecordingEffects()
    s = Scheduler(ExclusiveSwapper(), fx, SchedulerPolicy(priorities={"c": 5}))
    bring_up(s, fx, "a")
    a1, b1, c1 = Admission("a", "a1"), Admission("b", "b1"), Admission("c", "c1")
    s.on_request(a1)
    s.on_request(b1)
    s.on_request(c1)
    assert fx.preparations == [("prepare", "b"), ("abandon", "b"), ("prepare", "c")]
    s.on_serve_done("a")
    assert fx.take()[-1] == ("start_swap", "c", frozenset({"a"}))


def test_scheduler_busy_model_cannot_starve_a_waiting_one() -> None:
    s, fx = make()
    bring_up(s, fx, "a")
    a1, b1, a2, a3 = (
        Admission(m, n) for m, n in [("a", "a1"), ("b", "b1"), ("a", "a2"), ("a", "a3")]
    )

    s.on_request(a1)
    assert fx.take() == [("grant", a1)]
    s.on_request(b1)
    s.on_request(a2)  # a is running, but it is about to be evicted for b: blocked
    assert fx.take() == []
    assert s.queued("a") == 1
    assert s.in_flight("a") == 1

    s.on_serve_done("a")
    assert fx.take() == [("start_swap", "b", frozenset({"a"}))]
    s.on_request(a3)  # joins a2 behind b
    assert fx.take() == []

    s.on_swap_done("b", None)
    assert fx.take() == [("grant", b1)]
    s.on_serve_done("b")
    assert fx.take() == [("start_swap", "a", frozenset({"b"}))]
    s.on_swap_done("a", None)
    assert fx.take() == [("grant", a2), ("grant", a3)]


def test_scheduler_serves_models_in_order_of_their_first_queued_request() -> None:
    s, fx = make()
    bring_up(s, fx, "a")
    a1, c1, b1, a2 = (
        Admission(m, n) for m, n in [("a", "a1"), ("c", "c1"), ("b", "b1"), ("a", "a2")]
    )

    s.on_request(a1)
    assert fx.take() == [("grant", a1)]
    for adm in (c1, b1, a2):
        s.on_request(adm)
    assert fx.take() == []

    s.on_serve_done("a")
    assert fx.take() == [("start_swap", "c", frozenset({"a"}))]
    s.on_swap_done("c", None)
    assert fx.take() == [("grant", c1)]
    s.on_serve_done("c")
    assert fx.take() == [("start_swap", "b", frozenset({"c"}))]
    s.on_swap_done("b", None)
    assert fx.take() == [("grant", b1)]
    s.on_serve_done("b")
    assert fx.take() == [("start_swap", "a", frozenset({"b"}))]
    s.on_swap_done("a", None)
    assert fx.take() == [("grant", a2)]


# ---- start failure --------------------------------------------------------------------------


def test_scheduler_start_failure_fails_every_waiter_and_starts_the_next_model() -> None:
    s, fx = make()
    a1, a2, b1, a3 = (
        Admission(m, n) for m, n in [("a", "a1"), ("a", "a2"), ("b", "b1"), ("a", "a3")]
    )
    err = start_error("a")

    s.on_request(a1)
    assert fx.take() == [("start_swap", "a", NONE)]
    for adm in (a2, b1, a3):
        s.on_request(adm)
    assert fx.take() == []

    s.on_swap_done("a", err)
    assert fx.take() == [
        ("grant_error", a1, err),
        ("grant_error", a2, err),
        ("grant_error", a3, err),
        ("start_swap", "b", NONE),
    ]
    assert all(e is err for _, e in fx.errors())
    assert s.running == NONE
    assert s.in_flight("a") == 0
    assert s.queued("a") == 0

    s.on_swap_done("b", None)
    assert fx.take() == [("grant", b1)]


def test_scheduler_start_failure_after_eviction_leaves_nothing_running() -> None:
    s, fx = make()
    bring_up(s, fx, "x")
    a1, a2 = Admission("a", "a1"), Admission("a", "a2")
    err = start_error("a")

    s.on_request(a1)
    assert fx.take() == [("start_swap", "a", frozenset({"x"}))]
    s.on_swap_done("a", err)
    assert fx.take() == [("grant_error", a1, err)]
    assert s.running == NONE
    assert s.swapping is None

    s.on_request(a2)  # a later request retries the start
    assert fx.take() == [("start_swap", "a", NONE)]
    s.on_swap_done("a", None)
    assert fx.take() == [("grant", a2)]


# ---- cancel and gone clients ----------------------------------------------------------------


def test_scheduler_cancelled_queued_request_is_never_granted_and_starts_nothing() -> None:
    s, fx = make()
    bring_up(s, fx, "a")
    a1, b1 = Admission("a", "a1"), Admission("b", "b1")

    s.on_request(a1)
    s.on_request(b1)
    assert fx.take() == [("grant", a1)]

    s.on_cancel(b1)
    assert fx.take() == []
    assert s.queued("b") == 0

    s.on_serve_done("a")
    assert fx.take() == []
    assert s.running == {"a"}
    assert s.swapping is None


def test_scheduler_cancel_of_the_next_target_unblocks_the_running_model() -> None:
    s, fx = make()
    bring_up(s, fx, "a")
    a1, b1, a2 = Admission("a", "a1"), Admission("b", "b1"), Admission("a", "a2")

    s.on_request(a1)
    s.on_request(b1)
    s.on_request(a2)
    assert fx.take() == [("grant", a1)]

    s.on_cancel(b1)
    assert fx.take() == [("grant", a2)]
    assert s.in_flight("a") == 2


def test_scheduler_cancel_while_joining_a_start_drops_only_that_request() -> None:
    s, fx = make()
    a1, a2, a3 = Admission("a", "a1"), Admission("a", "a2"), Admission("a", "a3")

    s.on_request(a1)
    s.on_request(a2)
    s.on_request(a3)
    s.on_cancel(a2)
    assert fx.take() == [("start_swap", "a", NONE)]

    s.on_swap_done("a", None)
    assert fx.take() == [("grant", a1), ("grant", a3)]
    assert s.in_flight("a") == 2


def test_scheduler_cancel_after_grant_is_a_no_op() -> None:
    s, fx = make()
    bring_up(s, fx, "a")
    a1 = Admission("a", "a1")

    s.on_request(a1)
    assert fx.take() == [("grant", a1)]
    s.on_cancel(a1)
    assert fx.take() == []
    assert s.in_flight("a") == 1


def test_scheduler_grant_to_a_gone_client_does_not_count_in_flight() -> None:
    s, fx = make()
    a1, a2 = Admission("a", "a1", gone=True), Admission("a", "a2")
    b1 = Admission("b", "b1")

    s.on_request(a1)
    s.on_request(a2)
    assert fx.take() == [("start_swap", "a", NONE)]
    s.on_swap_done("a", None)
    assert fx.take() == [("grant", a1), ("grant", a2)]
    assert s.in_flight("a") == 1

    s.on_request(b1)
    assert fx.take() == []  # waits for a2 only
    s.on_serve_done("a")
    assert fx.take() == [("start_swap", "b", frozenset({"a"}))]


def test_scheduler_grant_to_a_gone_client_leaves_the_model_evictable() -> None:
    s, fx = make()
    bring_up(s, fx, "a")
    a1, b1 = Admission("a", "a1", gone=True), Admission("b", "b1")

    s.on_request(a1)
    assert fx.take() == [("grant", a1)]
    assert s.in_flight("a") == 0

    s.on_request(b1)
    assert fx.take() == [("start_swap", "b", frozenset({"a"}))]


def test_scheduler_serve_done_never_drives_in_flight_negative() -> None:
    s, fx = make()
    bring_up(s, fx, "a")
    a1, b1 = Admission("a", "a1"), Admission("b", "b1")

    s.on_serve_done("a")
    s.on_serve_done("a")
    s.on_serve_done("never-started")
    assert s.in_flight("a") == 0
    assert s.in_flight("never-started") == 0
    assert fx.take() == []

    s.on_request(a1)
    assert s.in_flight("a") == 1
    s.on_request(b1)
    assert fx.take() == [("grant", a1)]  # a1 is still in flight: no swap yet

    s.on_serve_done("a")
    assert fx.take() == [("start_swap", "b", frozenset({"a"}))]
    assert s.in_flight("a") == 0


# ---- unload ---------------------------------------------------------------------------------


def test_scheduler_unload_of_an_idle_model_stops_it_at_once() -> None:
    s, fx = make()
    bring_up(s, fx, "a")

    assert s.on_unload({"a", "b"}) == {"a"}
    assert fx.take() == [("stop", frozenset({"a"}))]
    assert s.running == NONE

    s.on_stop_done({"a"})
    assert fx.take() == []


def test_scheduler_unload_of_a_busy_model_stops_it_after_drain() -> None:
    s, fx = make()
    bring_up(s, fx, "a")
    a1 = Admission("a", "a1")

    s.on_request(a1)
    assert fx.take() == [("grant", a1)]
    assert s.on_unload({"a"}) == {"a"}
    assert fx.take() == []
    assert s.running == {"a"}

    s.on_serve_done("a")
    assert fx.take() == [("stop", frozenset({"a"}))]
    assert s.running == NONE


def test_scheduler_unload_of_a_model_not_running_is_ignored() -> None:
    s, fx = make()
    a1 = Admission("a", "a1")

    assert s.on_unload({"a"}) == NONE
    assert fx.take() == []

    s.on_request(a1)
    assert fx.take() == [("start_swap", "a", NONE)]
    assert s.on_unload({"a"}) == NONE  # mid-start: the waiters are served
    assert fx.take() == []

    s.on_swap_done("a", None)
    assert fx.take() == [("grant", a1)]
    s.on_serve_done("a")
    assert fx.take() == []
    assert s.running == {"a"}


def test_scheduler_request_for_a_stopping_model_restarts_it_after_stop_done() -> None:
    s, fx = make()
    bring_up(s, fx, "a")
    a1 = Admission("a", "a1")

    assert s.on_unload({"a"}) == {"a"}
    assert fx.take() == [("stop", frozenset({"a"}))]
    s.on_request(a1)
    assert fx.take() == []  # no start while a stop is under way
    assert s.swapping is None

    s.on_stop_done({"a"})
    assert fx.take() == [("start_swap", "a", NONE)]
    s.on_swap_done("a", None)
    assert fx.take() == [("grant", a1)]


def test_scheduler_swap_to_another_model_waits_for_a_stop_under_way() -> None:
    s, fx = make()
    bring_up(s, fx, "a")
    b1 = Admission("b", "b1")

    s.on_unload({"a"})
    assert fx.take() == [("stop", frozenset({"a"}))]
    s.on_request(b1)
    assert fx.take() == []

    s.on_stop_done({"a"})
    assert fx.take() == [("start_swap", "b", NONE)]


def test_scheduler_request_for_a_model_pending_unload_waits_and_restarts_it() -> None:
    s, fx = make()
    bring_up(s, fx, "a")
    a1, a2 = Admission("a", "a1"), Admission("a", "a2")

    s.on_request(a1)
    assert fx.take() == [("grant", a1)]
    s.on_unload({"a"})
    s.on_request(a2)  # a is running but draining for its unload: no new request
    assert fx.take() == []
    assert s.queued("a") == 1

    s.on_serve_done("a")
    assert fx.take() == [("stop", frozenset({"a"}))]
    s.on_stop_done({"a"})
    assert fx.take() == [("start_swap", "a", NONE)]
    s.on_swap_done("a", None)
    assert fx.take() == [("grant", a2)]


# ---- process exit ---------------------------------------------------------------------------


def test_scheduler_process_exit_makes_the_next_request_start_it_again() -> None:
    s, fx = make()
    bring_up(s, fx, "a")
    a1 = Admission("a", "a1")

    s.on_process_exited("a")
    assert fx.take() == []
    assert s.running == NONE

    s.on_request(a1)
    assert fx.take() == [("start_swap", "a", NONE)]
    s.on_swap_done("a", None)
    assert fx.take() == [("grant", a1)]


def test_scheduler_process_exit_of_the_model_to_evict_lets_the_swap_start() -> None:
    s, fx = make()
    bring_up(s, fx, "a")
    a1, b1 = Admission("a", "a1"), Admission("b", "b1")

    s.on_request(a1)
    s.on_request(b1)
    assert fx.take() == [("grant", a1)]

    s.on_process_exited("a")  # nothing left to drain or evict
    assert fx.take() == [("start_swap", "b", NONE)]


def test_scheduler_process_exit_drops_a_pending_unload() -> None:
    s, fx = make()
    bring_up(s, fx, "a")
    a1, a2 = Admission("a", "a1"), Admission("a", "a2")

    s.on_request(a1)
    assert fx.take() == [("grant", a1)]
    assert s.on_unload({"a"}) == {"a"}
    s.on_process_exited("a")
    s.on_serve_done("a")
    assert fx.take() == []  # no stop for a process that is already gone

    s.on_request(a2)
    assert fx.take() == [("start_swap", "a", NONE)]


# ---- shutdown -------------------------------------------------------------------------------


def test_scheduler_shutdown_fails_queued_and_later_requests() -> None:
    s, fx = make()
    bring_up(s, fx, "a")
    a1, b1, b2, c1 = (
        Admission(m, n) for m, n in [("a", "a1"), ("b", "b1"), ("b", "b2"), ("c", "c1")]
    )

    s.on_request(a1)
    s.on_request(b1)
    s.on_request(b2)
    assert fx.take() == [("grant", a1)]

    s.on_shutdown()
    calls = fx.take()
    assert [c[:2] for c in calls] == [("grant_error", b1), ("grant_error", b2)]
    assert all(type(c[2]) is ShuttingDownError for c in calls)
    assert s.queued("b") == 0

    s.on_request(c1)
    calls = fx.take()
    assert [c[:2] for c in calls] == [("grant_error", c1)]
    assert type(calls[0][2]) is ShuttingDownError

    s.on_serve_done("a")  # a drains: b must not start
    s.on_unload({"a"})
    assert fx.take() == []


def test_scheduler_shutdown_during_a_start_fails_its_waiters_once() -> None:
    s, fx = make()
    a1, a2 = Admission("a", "a1"), Admission("a", "a2")

    s.on_request(a1)
    s.on_request(a2)
    assert fx.take() == [("start_swap", "a", NONE)]

    s.on_shutdown()
    assert [c[:2] for c in fx.take()] == [("grant_error", a1), ("grant_error", a2)]

    s.on_swap_done("a", None)
    assert fx.take() == []
