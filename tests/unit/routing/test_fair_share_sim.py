"""The fairness promises of docs/sharing.md, proven on a virtual clock (tests/fakes/
virtual_clock.py): the real scheduler, simulated requests and swaps, no sleeps, no wall time.

Where a promise is about doing better than before, the scheduler as it was before per-key
fair queues (tests/fakes/scheduler_before_fairshare.py) runs the same trace in the same test.
"""

from __future__ import annotations

import random

import pytest
from tests.fakes.scheduler_before_fairshare import SchedulerBeforeFairShare
from tests.fakes.virtual_clock import MakeScheduler, Request, Sim

from modelswap.routing.clients import Client
from modelswap.routing.scheduler import Scheduler, SchedulerPolicy
from modelswap.routing.swappers import ExclusiveSwapper

SERVICE = 1.0  # seconds a request holds its model
SWAP = 5.0  # seconds a start takes

ALICE = Client("alice")
BOB = Client("bob")
HARNESS = Client("harness", priority="batch")
PERSON = Client("person", priority="interactive")


def sim(make: MakeScheduler = Scheduler, **policy: object) -> Sim:
    base: dict[str, object] = {"concurrency": {"x": 1, "y": 1, "z": 1}, "max_queue_wait": 600.0}
    base.update(policy)
    return Sim(make, ExclusiveSwapper(), SchedulerPolicy(**base), swap_seconds=SWAP)  # type: ignore[arg-type]


def share(s: Sim, client: Client, others: list[Client], since: float) -> float:
    mine = s.served(client, since)
    return mine / (mine + sum(s.served(o, since) for o in others))


# ---- share of service ------------------------------------------------------------------------


def test_two_equal_keys_saturating_one_model_each_get_half_within_five_percent() -> None:
    # The measurement: one key keeps twelve in flight, the other two. Before, the
    # second got a share in proportion to what it queued (2 of 14); now it gets half.
    results = {}
    for name, make in (("before", SchedulerBeforeFairShare), ("fair", Scheduler)):
        s = sim(make)  # type: ignore[arg-type]
        s.keep(12, "x", SERVICE, ALICE)
        s.keep(2, "x", SERVICE, BOB)
        s.run(until=1000.0)
        results[name] = share(s, BOB, [ALICE], since=SWAP)
    assert results["fair"] == pytest.approx(0.5, abs=0.05 * 0.5)
    assert results["before"] < 0.2  # the test tells the two apart


@pytest.mark.parametrize(("weight_a", "weight_b"), [(3.0, 1.0), (1.0, 4.0), (2.5, 1.5)])
def test_unequal_weights_share_in_proportion(weight_a: float, weight_b: float) -> None:
    a, b = Client("a", weight=weight_a), Client("b", weight=weight_b)
    s = sim()
    s.keep(8, "x", SERVICE, a)
    s.keep(8, "x", SERVICE, b)
    s.run(until=2000.0)
    expected = weight_a / (weight_a + weight_b)
    assert share(s, a, [b], since=SWAP) == pytest.approx(expected, rel=0.05)


def test_three_keys_with_different_backlogs_share_equally() -> None:
    clients = [Client(f"k{i}") for i in range(3)]
    s = sim()
    for backlog, client in zip((1, 5, 40), clients, strict=True):
        s.keep(backlog, "x", SERVICE, client)
    s.run(until=1500.0)
    for client in clients:
        others = [c for c in clients if c != client]
        assert share(s, client, others, since=SWAP) == pytest.approx(1 / 3, rel=0.05)


def test_a_key_that_was_idle_gets_no_credit_for_its_idle_time() -> None:
    # Bob sends nothing for 300 s while Alice is served, then floods: from then on they
    # share, Bob does not take the model until he has "caught up".
    s = sim()
    s.keep(4, "x", SERVICE, ALICE)
    s.keep(40, "x", SERVICE, BOB, start=300.0)
    s.run(until=400.0)
    assert share(s, BOB, [ALICE], since=302.0) == pytest.approx(0.5, rel=0.05)


# ---- how long another key's backlog can delay a request ----------------------------------------


def test_a_backlog_delays_another_keys_request_by_at_most_one_service() -> None:
    s = sim()
    s.keep(50, "x", SERVICE, ALICE)
    s.run(until=20.3)  # mid-way through one of Alice's answers
    probes = []
    for moment in (20.3, 33.7, 41.0):
        s.run(until=moment)
        probes.append(s.send("x", SERVICE, BOB))
        s.run(until=moment + SERVICE)  # Bob's answer is out before his next question
    s.run(until=60.0)
    for probe in probes:
        assert probe.waited <= SERVICE, probe


def test_a_request_needing_a_swap_waits_one_service_and_its_own_swap_not_the_backlog() -> None:
    # Alice keeps x busy and queues for y as well, the older waiter; Bob asks for z. Bob's
    # request waits for x to finish the answer it serves, then for z's start: Alice's y
    # backlog (and y's start) do not go first.
    s = sim()
    s.keep(20, "x", SERVICE, ALICE)
    s.run(until=10.5)
    for _ in range(20):
        s.send("y", SERVICE, ALICE)
    s.run(until=10.6)
    bob = s.send("z", SERVICE, BOB)
    s.run(until=120.0)
    assert bob.waited <= SERVICE + SWAP
    assert ("start_swap", "z", frozenset({"x"})) in s.calls


def test_a_batch_flood_of_200_does_not_delay_an_interactive_request_behind_it() -> None:
    s = sim()
    for _ in range(200):
        s.send("x", SERVICE, HARNESS)
    s.run(until=30.5)
    person = s.send("x", SERVICE, PERSON)
    s.run(until=31.0)
    other_model = s.send("y", SERVICE, PERSON)
    s.run(until=400.0)
    assert person.waited <= SERVICE
    # One that needs a swap waits for x's answer in progress and its own start, no more.
    assert other_model.waited <= SERVICE + SWAP + SERVICE  # behind the person's first answer
    harness_done = [r.finished for r in s.requests if r.client == HARNESS and r.finished]
    assert len(harness_done) == 200  # and the flood is served in the end


def test_an_interactive_key_with_a_backlog_of_its_own_still_goes_before_batch() -> None:
    # Fair share alone would alternate the two keys; the class puts the person first for as
    # long as it has waiters (until maxQueueWait ages a batch request).
    s = sim(max_queue_wait=600.0)
    for _ in range(200):
        s.send("x", SERVICE, HARNESS)
    s.keep(3, "x", SERVICE, PERSON, start=10.0)
    s.run(until=300.0)
    assert share(s, PERSON, [HARNESS], since=12.0) >= 0.99
    # and where the two need different models, the person's model is started first
    s2 = sim(max_queue_wait=600.0)
    s2.keep(3, "x", SERVICE, PERSON)
    s2.run(until=50.0)  # the person's share so far is far ahead of the harness's (none)
    s2.keep(50, "z", SERVICE, HARNESS, start=50.0)
    s2.run(until=50.5)
    late = s2.send("y", SERVICE, PERSON)
    s2.run(until=80.0)
    assert late.waited <= SERVICE + SWAP


def test_the_batch_flood_against_the_scheduler_before_delays_the_person_for_minutes() -> None:
    # The same trace on the scheduler before fair queues: the bound above is not a given.
    s = sim(SchedulerBeforeFairShare)  # type: ignore[arg-type]
    for _ in range(200):
        s.send("x", SERVICE, HARNESS)
    s.run(until=30.5)
    person = s.send("x", SERVICE, PERSON)
    s.run(until=400.0)
    assert person.waited > 100 * SERVICE


# ---- nothing waits for ever ----------------------------------------------------------------


def test_no_batch_request_waits_past_max_queue_wait_under_an_interactive_flood() -> None:
    max_wait = 30.0
    s = sim(max_queue_wait=max_wait)
    s.keep(6, "x", SERVICE, PERSON)
    s.keep(6, "x", SERVICE, Client("colleague"))
    s.run(until=5.0)
    batch: list[Request] = []
    for moment in range(5, 200, 7):
        s.run(until=float(moment))
        batch.append(s.send("x", SERVICE, HARNESS))
    s.run(until=400.0)
    # aged at max_wait (seen at the next tick), then granted when x's one place frees
    for request in batch:
        assert request.waited <= max_wait + 1.0 + SERVICE, request
    assert all(r.granted is not None for r in batch)


def test_a_waiter_for_another_model_is_not_starved_by_a_higher_class_on_the_running_one() -> None:
    max_wait = 40.0
    s = sim(max_queue_wait=max_wait)
    s.keep(4, "x", SERVICE, PERSON)
    s.run(until=10.0)
    batch = s.send("y", SERVICE, HARNESS)
    s.run(until=200.0)
    # x is never idle, and interactive goes first: only aging starts y for the batch key
    assert batch.waited <= max_wait + 1.0 + SERVICE + SWAP


# ---- swaps: collation is kept -------------------------------------------------------------------


def _trace(seed: int, n: int) -> list[tuple[float, str, Client]]:
    """Requests from four keys (two batch) to three models, arriving at random (fixed seed)."""
    rng = random.Random(seed)
    keys = [ALICE, BOB, HARNESS, Client("nightly", priority="batch", weight=2.0)]
    favourite = {ALICE: "x", BOB: "y", HARNESS: "z", keys[3]: "x"}
    at, trace = 0.0, []
    for _ in range(n):
        at += rng.expovariate(1.2)  # a little faster than one model serves: queues form
        key = rng.choice(keys)
        model = favourite[key] if rng.random() < 0.7 else rng.choice("xyz")
        trace.append((at, model, key))
    return trace


def _swaps_on(make: MakeScheduler, trace: list[tuple[float, str, Client]]) -> tuple[int, int]:
    s = Sim(make, ExclusiveSwapper(), SchedulerPolicy(max_queue_wait=60.0), swap_seconds=SWAP)
    for at, model, key in trace:
        s.at(at, lambda model=model, key=key: s.send(model, SERVICE, key))
    s.run(until=trace[-1][0] + 10_000.0)
    assert all(r.finished is not None for r in s.requests)
    return len(s.starts()), len(s.requests)


def test_swaps_per_thousand_requests_are_no_worse_than_before() -> None:
    # The same open-loop traces (12 seeds x 1200 requests, 4 keys, 3 models) on both
    # schedulers. Fair share changes *which* waiting model goes next, not how waiters collate,
    # so the counts match but for a swap here or there either way: measured 2002 before and
    # 2004 with fair queues in all (+0.1 %). The promise: no worse than 1 % over the whole.
    before = fair = n = 0
    worst = 0
    for seed in range(1, 13):
        trace = _trace(seed, 1200)
        old, count = _swaps_on(SchedulerBeforeFairShare, trace)  # type: ignore[arg-type]
        new, _ = _swaps_on(Scheduler, trace)
        before, fair, n = before + old, fair + new, n + count
        worst = max(worst, new - old)
    per_thousand_before, per_thousand_fair = 1000 * before / n, 1000 * fair / n
    assert per_thousand_fair <= per_thousand_before * 1.01
    assert worst <= 1  # and no single trace costs more than one swap more


def test_interleaved_keys_and_models_during_a_swap_cost_one_start_per_model() -> None:
    s = sim(concurrency={})
    first = s.send("x", SERVICE, ALICE)
    for client in (ALICE, BOB, ALICE, BOB):
        s.send("y", SERVICE, client)
        s.send("x", SERVICE, client)
    s.run(until=200.0)
    assert first.finished is not None
    assert [target for target, _ in s.starts()] == ["x", "y"]
    assert all(r.finished is not None for r in s.requests)


def test_with_one_client_the_scheduler_decides_exactly_as_before() -> None:
    # Today's callers (no client given: the anonymous one) get today's decisions, call by call.
    trace = [(at, model, Client()) for at, model, _ in _trace(7, 600)]
    runs = []
    for make in (SchedulerBeforeFairShare, Scheduler):
        s = Sim(make, ExclusiveSwapper(), SchedulerPolicy(concurrency={"x": 2}), swap_seconds=SWAP)  # type: ignore[arg-type]
        for at, model, key in trace:
            s.at(at, lambda model=model, key=key, s=s: s.send(model, SERVICE, key))
        s.run(until=trace[-1][0] + 10_000.0)
        runs.append([(c[0], getattr(c[1], "arrived", c[1])) for c in s.calls])
    assert runs[0] == runs[1]
