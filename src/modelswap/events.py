"""A tiny in-process event bus. Publishers never block; slow subscribers drop old events."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

DROPPED = "subscriber.dropped"


@dataclass(frozen=True, slots=True)
class Event:
    kind: str
    data: dict[str, Any]
    at: float = field(default_factory=time.time)


class EventBus:
    """Fan-out of :class:`Event` to any number of subscribers.

    ``publish`` is synchronous and never blocks: each subscriber has a bounded queue, and one
    whose queue is full is dropped (it receives a final ``subscriber.dropped`` event), so one
    stuck reader can never stall a state transition or grow without bound.
    """

    def __init__(self, queue_size: int = 1000) -> None:
        self._queue_size = queue_size
        self._subscribers: set[asyncio.Queue[Event]] = set()
        self._listeners: list[Callable[[Event], None]] = []

    def add_listener(self, listener: Callable[[Event], None]) -> None:
        """Call ``listener`` synchronously on every event (it must be quick and never raise)."""
        self._listeners.append(listener)

    def publish(self, kind: str, **data: Any) -> None:
        event = Event(kind, data)
        for listener in self._listeners:
            listener(event)
        for queue in list(self._subscribers):
            if queue.full():
                # A subscriber this far behind is dropped: it gets one last "dropped" event
                # (its stream then ends) and nothing more. Publishing never waits.
                self._subscribers.discard(queue)
                while not queue.empty():
                    queue.get_nowait()
                queue.put_nowait(Event(DROPPED, {"reason": "too slow to keep up"}))
                continue
            queue.put_nowait(event)

    def subscriber_queue(self) -> asyncio.Queue[Event]:
        """A queue that receives every event from now on; pair with :meth:`unsubscribe`."""
        queue: asyncio.Queue[Event] = asyncio.Queue(self._queue_size)
        self._subscribers.add(queue)
        return queue

    def unsubscribe(self, queue: asyncio.Queue[Event]) -> None:
        self._subscribers.discard(queue)
