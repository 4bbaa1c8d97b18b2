"""WaitingStream.acquire: a lease granted just as the client goes away is released, not leaked.

Found by the reliability suite's disconnect storm (tests/reliability/test_disconnect_storm.py):
a model kept one request "in flight" forever. Here the race is made exact with a router whose
``acquire`` returns at once: the outer wait is cancelled after the grant, before it resumed.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from modelswap.http.waiting import WaitingStream


class FakeLease:
    def __init__(self) -> None:
        self.released = 0

    def release(self) -> None:
        self.released += 1


class ImmediateRouter:
    """``acquire`` grants at once (a model that is ready and idle)."""

    def __init__(self, lease: FakeLease) -> None:
        self.lease = lease
        self.granted = asyncio.Event()

    async def acquire(self, model: str) -> FakeLease:
        self.granted.set()
        return self.lease


async def test_a_lease_granted_as_the_client_leaves_is_released() -> None:
    lease = FakeLease()
    router = ImmediateRouter(lease)
    waiting = WaitingStream(request=None)  # type: ignore[arg-type]  # never opened early
    handler = asyncio.ensure_future(waiting.acquire(router, "m"))  # type: ignore[arg-type]
    for _ in range(10):  # bounded: the grant takes one or two loop turns
        if router.granted.is_set():
            break
        await asyncio.sleep(0)
    assert router.granted.is_set()
    assert not handler.done()  # it has not seen the grant yet...
    handler.cancel()  # ...when the client disconnects
    with pytest.raises(asyncio.CancelledError):
        await handler
    assert lease.released == 1


async def test_a_lease_returned_to_the_caller_is_not_released() -> None:
    lease = FakeLease()
    waiting = WaitingStream(request=None)  # type: ignore[arg-type]
    got: Any = await waiting.acquire(ImmediateRouter(lease), "m")  # type: ignore[arg-type]
    assert got is lease
    assert lease.released == 0
