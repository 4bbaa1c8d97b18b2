"""EventBus: fan-out, listeners, and a stalled subscriber dropped (never waited for)."""

from __future__ import annotations

import asyncio

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
    for i in range(20_000):
        # Synchronous: returns without awaiting anyone (a publish that waited for a reader
        # would never return here, with no reader running: the suite's timeout would say so).
        bus.publish("tick", n=i)
    for queue in stalled:
        assert queue.qsize() == 1
        assert queue.get_nowait().kind == DROPPED


async def test_subscriber_queue_receives_events_until_unsubscribed() -> None:
    bus = EventBus()
    queue = bus.subscriber_queue()
    bus.publish("one")
    bus.publish("last")
    assert [queue.get_nowait().kind, queue.get_nowait().kind] == ["one", "last"]
    bus.unsubscribe(queue)
    bus.publish("after")  # the queue left the bus: nothing delivered to it
    assert queue.empty()


async def test_a_full_subscriber_queue_is_dropped_with_one_final_event() -> None:
    bus = EventBus(queue_size=2)
    queue = bus.subscriber_queue()
    for i in range(3):  # nobody reads: the queue fills and the subscriber is dropped
        bus.publish("tick", n=i)
    assert queue.get_nowait().kind == DROPPED
    bus.publish("after")
    assert queue.empty()
