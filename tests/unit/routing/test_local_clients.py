"""The fair queue behind the real LocalRouter: a request's client (its key's class and weight)
is an optional argument of ``admit``/``acquire``; without it a request is the anonymous
client's, as every caller's was before (issue 40). The process is a stand-in that is ready at
once: what is tested is the order in which waiting requests get their leases."""

from __future__ import annotations

from types import SimpleNamespace

from modelswap.events import EventBus
from modelswap.routing.clients import ANONYMOUS, Client
from modelswap.routing.local import LocalRouter
from modelswap.routing.scheduler import SchedulerPolicy
from modelswap.states import ProcessState

BATCH = Client("evals", priority="batch")
PERSON = Client("ana")


class InstantProcess:
    """Starts instantly; all LocalRouter needs of a ManagedProcess."""

    def __init__(self, model: str) -> None:
        self.model = model
        self.config = SimpleNamespace(ttl=0, sleep_mode=False)
        self.state = ProcessState.STOPPED
        self.cache_saved = self.cache_restored = None

    async def ensure_ready(self) -> None:
        self.state = ProcessState.READY

    async def stop(self) -> None:
        self.state = ProcessState.STOPPED

    async def shutdown(self) -> None:
        self.state = ProcessState.STOPPED

    def start_clock(self) -> tuple[float | None, float | None]:
        return None, None


def one_at_a_time() -> LocalRouter:
    policy = SchedulerPolicy(concurrency={"m": 1})
    return LocalRouter({"m": InstantProcess("m")}, EventBus(), policy=policy)  # type: ignore[dict-item]


async def test_an_interactive_request_gets_the_next_free_place_before_a_batch_backlog() -> None:
    router = one_at_a_time()
    serving = await router.acquire("m", BATCH)
    backlog = [router.admit("m", BATCH) for _ in range(5)]
    person = router.admit("m", PERSON)
    assert [p.client for p in router.scheduler.waiting()] == [PERSON, *[BATCH] * 5]
    assert router.scheduler.place(person) == 1
    assert [router.scheduler.place(p) for p in backlog] == [2, 3, 4, 5, 6]
    other = router.admit("m", Client("bo"))
    assert router.scheduler.place(other) == 2  # another person: ahead of the batch too
    serving.release()
    assert person.future.done()
    assert router.scheduler.place(person) is None
    assert not any(p.future.done() for p in backlog)
    person.future.result().release()
    assert other.future.done()
    other.future.result().release()
    assert backlog[0].future.done()  # then the backlog, in its order
    backlog[0].future.result().release()
    for pending in router.scheduler.waiting():
        router.withdraw(pending)  # type: ignore[arg-type]
    await router.close()


async def test_a_request_without_a_client_is_the_anonymous_clients_and_waits_in_turn() -> None:
    router = one_at_a_time()
    serving = await router.acquire("m")
    first, second = router.admit("m"), router.admit("m")
    assert first.client is ANONYMOUS
    serving.release()
    assert first.future.done()
    assert not second.future.done()
    first.future.result().release()
    assert second.future.done()
    second.future.result().release()
    await router.close()


async def test_two_keys_alternate_for_one_place_whatever_each_queued() -> None:
    router = one_at_a_time()
    alice, bob = Client("alice"), Client("bob")
    lease = await router.acquire("m", alice)
    queued = [router.admit("m", alice) for _ in range(6)] + [
        router.admit("m", bob) for _ in range(2)
    ]
    order = []
    for _ in queued:
        lease.release()
        granted = next(p for p in queued if p.future.done() and p not in order)
        order.append(granted)
        lease = granted.future.result()
    lease.release()
    assert [p.client.name for p in order[:4]] == ["bob", "alice", "bob", "alice"]
    await router.close()


async def test_the_queue_wait_is_told_for_requests_that_queued_and_only_them() -> None:
    router = one_at_a_time()
    told: list[tuple[str, str, float]] = []
    router.on_waited = lambda model, key, seconds: told.append((model, key, seconds))
    (await router.acquire("m", PERSON)).release()  # it queued for the start
    assert [(model, key) for model, key, _ in told] == [("m", "ana")]
    told.clear()
    serving = await router.acquire("m", PERSON)  # running and free: granted at once
    waiting = router.admit("m", BATCH)
    assert told == []
    serving.release()
    assert waiting.future.done()
    [(model, key, seconds)] = told
    assert (model, key) == ("m", "evals")
    assert seconds >= 0
    waiting.future.result().release()
