"""EventBus: fan-out, listeners, and a stalled subscriber dropped (never waited for)."""

from __future__ import annotations

import asyncio
import time

from modelswap.events import DROPPED, Event, EventBus


def drain(queue: asyncio.Queue[Event]) -> list[Event]:
    out: list[Event] = []
    while not queue.empty():
        out.append(queue.get_nowait())
    return out


async def test_every_subscriber_gets_every_event_in_order() -> None:
    bus = EventBus()
    first, second = bus.subscriber_queue(), bus.subscriber_queue()
    for i in range(5):
        bus.publish("tick", n=i)
    for queue in (first, second):
        events = drain(queue)
        assert [(e.kind, e.data) for e in events] == [("tick", {"n": i}) for i in range(5)]
        assert all(isinstance(e.at, float) for e in events)


async def test_listeners_are_called_synchronously() -> None:
    bus = EventBus()
    seen: list[tuple[str, dict[str, object]]] = []
    bus.add_listener(lambda e: seen.append((e.kind, e.data)))
    bus.publish("swap", target="a", reason="why")
    assert seen == [("swap", {"target": "a", "reason": "why"})]


async def test_unsubscribed_queue_receives_nothing() -> None:
    bus = EventBus()
    queue = bus.subscriber_queue()
    bus.unsubscribe(queue)
    bus.publish("tick")
    assert queue.empty()


async def test_stalled_subscriber_is_dropped_while_another_keeps_receiving() -> None:
    bus = EventBus(queue_size=4)
    stalled = bus.subscriber_queue()  # never read
    live = bus.subscriber_queue()
    received: list[int] = []
    for i in range(20):
        bus.publish("tick", n=i)
        received += [int(e.data["n"]) for e in drain(live)]
        if i < 4:
            assert stalled.qsize() == i + 1  # still within its bound
    assert received == list(range(20))
    # The stalled one got one last event, nothing before or after it.
    left = drain(stalled)
    assert [e.kind for e in left] == [DROPPED]
    assert left[0].data.get("reason")
    bus.publish("tick", n=99)
    assert stalled.empty()
    assert [e.data for e in drain(live)] == [{"n": 99}]


async def test_publish_never_blocks_on_stalled_subscribers() -> None:
    bus = EventBus(queue_size=8)
    stalled = [bus.subscriber_queue() for _ in range(50)]
    began = time.monotonic()
    for i in range(20_000):
        bus.publish("tick", n=i)  # synchronous: returns without awaiting anyone
    assert time.monotonic() - began < 5.0
    for queue in stalled:
        assert queue.qsize() == 1
        assert queue.get_nowait().kind == DROPPED


async def test_subscribe_iterator_receives_events() -> None:
    bus = EventBus()
    received: list[str] = []
    reader_ready = asyncio.Event()

    async def reader() -> None:
        stream = bus.subscribe()
        try:
            first = asyncio.ensure_future(anext(stream))
            await asyncio.sleep(0)  # let the generator register its queue
            reader_ready.set()
            received.append((await first).kind)
            async for event in stream:
                received.append(event.kind)
                if event.kind == "last":
                    break
        finally:
            await stream.aclose()

    task = asyncio.create_task(reader())
    async with asyncio.timeout(5):
        await reader_ready.wait()
        bus.publish("one")
        bus.publish("last")
        await task
    assert received == ["one", "last"]
    bus.publish("after")  # the closed iterator left the bus: nothing to deliver to


async def test_subscribe_iterator_ends_after_it_was_dropped() -> None:
    # "it receives a final subscriber.dropped event (its stream then ends)": an async-for
    # over subscribe() must finish after the dropped event instead of waiting forever.
    bus = EventBus(queue_size=2)
    stream = bus.subscribe()
    first = asyncio.ensure_future(anext(stream))
    await asyncio.sleep(0)  # the generator has registered its queue and waits on it
    bus.publish("one")
    assert (await first).kind == "one"
    for i in range(3):  # nobody reads now: the queue fills and the subscriber is dropped
        bus.publish("tick", n=i)
    seen: list[str] = []
    ended = False
    try:
        async with asyncio.timeout(0.5):
            async for event in stream:
                seen.append(event.kind)
            ended = True
    except TimeoutError:
        pass
    finally:
        await stream.aclose()
    assert seen == [DROPPED]
    assert ended, "subscribe() kept waiting after its final subscriber.dropped event"
