"""The seam between the relay and the wire to a backend or peer: one upstream protocol
(:class:`Transport`, whose answer is a :class:`ResponseHead` and a :class:`Body`), two
implementations — aiohttp's client session (:mod:`modelswap.http.relay.client_transport`: TLS,
peers, llama-swap's per-model connection settings) and the pooled raw connection
(:mod:`modelswap.http.relay.backend_pool`: plain ``http://`` to a local backend). Each maps its
own failures into the few below, which the relay turns into the project's upstream errors.

The per-request deadlines (connect, first byte, idle between chunks, total) live here too: one
scheme for both transports and both doors, swept every SWEEP seconds rather than a timer armed
and cancelled per request; a deadline that passes cancels the task serving the request and says
which (the relay tells a timeout from a client that left by it).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from modelswap.config import Timeouts

SWEEP = 0.25  # seconds between looks at the deadlines (a timeout ends up to this late)
NEVER = float("inf")
# What a deadline waits on (and, once passed, what expired)
CONNECT, FIRST_BYTE, IDLE, TOTAL = "connect", "first byte", "idle", "total"


def said(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


class BackendClosedError(ConnectionError):
    """The connection closed before any byte of the answer: a reused one the backend had
    given up on (``stale``), or the backend itself dropping it. Asked again, within a bound."""

    def __init__(self, stale: bool, reason: str) -> None:
        super().__init__(reason)
        self.stale = stale


class BackendRefusedError(ConnectionError):
    """No connection could be made: the request never reached the backend."""


class BackendBrokeError(ConnectionError):
    """The answer broke off, or could not be parsed, after it had begun."""


class BackendConnectTimeoutError(ConnectionError):
    """The transport's own connect timeout passed (aiohttp's, which alone sees the connect)."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"no connection within {seconds:g} s")
        self.seconds = seconds


@dataclass(slots=True)
class ResponseHead:
    """An answer's head as it came (names and values as bytes, in order)."""

    status: int
    reason: bytes
    headers: Sequence[tuple[bytes, bytes]]
    content_length: int | None
    keep_alive: bool
    event_stream: bool  # Content-Type: text/event-stream (with or without parameters)


class Body(Protocol):
    """An answer's body as it arrives: :meth:`read` until ``b""``, then :meth:`finish`."""

    @property
    def has_data(self) -> bool:
        """Whether :meth:`read` returns without waiting."""

    @property
    def complete(self) -> bool:
        """Whether the body was read to its end."""

    async def read(self) -> bytes:
        """What arrived since the last read; ``b""`` at the end. Raises BackendBrokeError."""

    def finish(self, reusable: bool) -> None:
        """The exchange is over: the connection kept for another when ``reusable`` and read
        whole, else closed (a backend still generating stops)."""


class Transport(Protocol):
    """One way to a backend or peer."""

    async def open(
        self,
        method: str,
        target: str,
        headers: list[tuple[bytes, bytes]],
        body: bytes,
        deadlines: Deadlines,
    ) -> tuple[ResponseHead, Body]:
        """Send the request (``target``: its path and query; ``headers`` without Host and
        framing) and wait for the answer's head. Raises the errors above; moves
        ``deadlines`` from CONNECT to FIRST_BYTE once connected."""


class Deadlines:
    """One request's upstream deadlines, checked by the sweep while it is watched."""

    __slots__ = (
        "_sweep",
        "_task",
        "connect_by",
        "expired",
        "first_byte_by",
        "idle",
        "next_chunk_by",
        "phase",
        "total_by",
    )

    def __init__(self, timeouts: Timeouts) -> None:
        loop = asyncio.get_running_loop()
        now = loop.time()
        self.phase = CONNECT
        self.connect_by = now + timeouts.connect if timeouts.connect else NEVER
        self.first_byte_by = now + timeouts.first_byte if timeouts.first_byte else NEVER
        self.total_by = now + timeouts.total if timeouts.total else NEVER
        self.idle = timeouts.idle_between_chunks
        self.next_chunk_by = NEVER
        self.expired: str | None = None
        self._task = asyncio.current_task()
        self._sweep = _sweep_for(loop)
        self._sweep.watch(self)

    def check(self, now: float) -> None:
        """A deadline that passed cancels the task, saying which (in ``expired``)."""
        if self.expired is not None:
            return
        phase = self.phase
        if now >= self.total_by:
            self.expired = TOTAL
        elif phase is CONNECT and now >= min(self.connect_by, self.first_byte_by):
            self.expired = CONNECT if self.connect_by <= self.first_byte_by else FIRST_BYTE
        elif phase is FIRST_BYTE and now >= self.first_byte_by:
            self.expired = FIRST_BYTE
        elif phase is IDLE and now >= self.next_chunk_by:
            self.expired = IDLE
        if self.expired is not None and self._task is not None:
            self._task.cancel()

    def uncancel(self) -> None:
        """The cancel was this deadline's, not a client's: take it back."""
        if self._task is not None:
            self._task.uncancel()

    def close(self) -> None:
        self._sweep.watched.discard(self)


class _Sweep:
    """The deadlines watched on one event loop, looked at every SWEEP seconds while any is."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.watched: set[Deadlines] = set()
        self._handle: asyncio.TimerHandle | None = None

    def watch(self, deadlines: Deadlines) -> None:
        self.watched.add(deadlines)
        if self._handle is None:
            self._handle = self.loop.call_later(SWEEP, self._run)

    def _run(self) -> None:
        now = self.loop.time()
        for deadlines in list(self.watched):
            deadlines.check(now)
        self._handle = self.loop.call_later(SWEEP, self._run) if self.watched else None


_sweeps: list[_Sweep] = []  # the one of the running loop (a new loop gets a new one)


def _sweep_for(loop: asyncio.AbstractEventLoop) -> _Sweep:
    if not _sweeps or _sweeps[0].loop is not loop:
        _sweeps[:] = [_Sweep(loop)]
    return _sweeps[0]
