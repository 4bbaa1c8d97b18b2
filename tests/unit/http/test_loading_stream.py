"""LoadingStream.acquire with the real LocalRouter and scheduler: a ready model's lease comes at
once; a lease granted just as the client goes away is released, not leaked (found by the
reliability suite's disconnect storm: a model kept one request "in flight" forever); a client
that leaves while queued leaves nothing behind.

The process behind the router is a stand-in that is ready at once (no subprocess): what is
tested is the lease bookkeeping between LoadingStream, LocalRouter and the Scheduler.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from modelswap.events import EventBus
from modelswap.http.relay.loading_stream import LoadingStream
from modelswap.routing.local import LocalRouter
from modelswap.states import ProcessState


class InstantProcess:
    """Starts instantly; all LocalRouter needs of a ManagedProcess."""

    def __init__(self, model: str) -> None:
        self.model = model
        self.config = SimpleNamespace(ttl=0, sleep_mode=False)
        self.state = ProcessState.STOPPED
        self.starts = 0

    async def ensure_ready(self) -> None:
        self.starts += 1
        self.state = ProcessState.READY

    async def stop(self) -> None:
        self.state = ProcessState.STOPPED

    async def shutdown(self) -> None:
        self.state = ProcessState.STOPPED

    def start_clock(self) -> tuple[float | None, float | None]:
        return None, None


class QueueOnly:
    """The part of the Runtime LoadingStream uses here: its admit and withdraw commands."""

    def __init__(self, router: LocalRouter) -> None:
        self.admit = router.admit
        self.withdraw = router.withdraw


def loading_stream(router: LocalRouter) -> LoadingStream:
    """A stream never opened early (no request), over ``router``'s queue."""
    return LoadingStream(request=None, runtime=QueueOnly(router))  # type: ignore[arg-type]


def make_router() -> tuple[LocalRouter, InstantProcess]:
    process = InstantProcess("m")
    router = LocalRouter({"m": process}, EventBus())  # type: ignore[dict-item]
    return router, process


async def test_a_ready_free_model_is_leased_without_waiting() -> None:
    router, _ = make_router()
    (await router.acquire("m")).release()  # started; now ready and free
    pending = router.admit("m")
    assert pending.future.done()  # granted inside admit: no loop turn needed
    pending.future.result().release()
    lease = await loading_stream(router).acquire("m")
    assert router.in_flight("m") == 1
    lease.release()
    assert router.in_flight("m") == 0
    await router.close()


async def test_a_lease_granted_as_the_client_leaves_is_released() -> None:
    router, process = make_router()
    loading = loading_stream(router)
    handler = asyncio.ensure_future(loading.acquire("m"))
    for _ in range(50):  # bounded: the start and the grant take a few loop turns
        if router.in_flight("m"):
            break
        await asyncio.sleep(0)
    assert router.in_flight("m") == 1  # granted …
    assert not handler.done()  # … but the handler has not resumed yet …
    handler.cancel()  # … when the client disconnects
    with pytest.raises(asyncio.CancelledError):
        await handler
    assert router.in_flight("m") == 0  # given back, not leaked
    assert process.starts == 1
    await router.close()


async def test_a_client_leaving_while_queued_leaves_nothing_behind() -> None:
    router, _ = make_router()
    handler = asyncio.ensure_future(loading_stream(router).acquire("m"))
    await asyncio.sleep(0)  # admitted: the start is under way
    assert router.queued("m") == 1
    handler.cancel()
    with pytest.raises(asyncio.CancelledError):
        await handler
    assert router.queued("m") == 0
    for _ in range(50):  # the start it caused may finish; nobody holds a lease
        await asyncio.sleep(0)
    assert router.in_flight("m") == 0
    await router.close()
