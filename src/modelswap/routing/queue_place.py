"""A waiting request's place in line, for people: its estimate, and the words a waiting client
is told (an SSE comment, a response header) and ``GET /api/queue`` shows. Pure: every figure
comes from the caller (docs/sharing.md, "Watching the queue").

How a wait is estimated (None where it cannot be, never a guess dressed as a figure):

* waiting for a free place (``concurrencyLimit``, ``maxInFlight``, ``turn``): the waiter at
  place ``p`` among its model's waiters, with ``slots`` places serving at once (the model's
  ``concurrencyLimit``, else ``maxInFlight``; one round when neither is set), waits
  ``ceil(p / slots)`` rounds of the model's median time to serve a request (its lease held,
  the last 50 requests); unknown before the model has served one;
* waiting for its model's start under way (``start``): what the start has left (its median
  start time less the time it has run; unknown once it has run longer) plus the rounds above
  beyond the first;
* its model's start is due and waits for what it evicts to finish (``drain``): the model's
  dry run (drain + stop + start), plus the rounds beyond the first;
* behind another start (``swap``): unknown (it depends on starts before it).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from modelswap.routing.fairshare import client_of
from modelswap.routing.protocols import Admission
from modelswap.routing.scheduler import Scheduler

QUEUE_HEADER = "X-Modelswap-Queue"
"""The response header a request that waited carries: the same words as its SSE comment."""

SLOT_WAITS = frozenset({"concurrencyLimit", "maxInFlight", "turn"})


@dataclass(frozen=True, slots=True)
class WaitFacts:
    """What is known about one model's waiters' prospects."""

    slots: int = 0  # requests it serves at once (concurrencyLimit or maxInFlight; 0: no limit)
    service: float | None = None  # median seconds a request holds its lease
    start_left: float | None = None  # seconds its start under way has left
    due_seconds: float | None = None  # the dry run's drain + stop + start, when due


def estimate_wait(waits_for: str, place: int, facts: WaitFacts) -> float | None:
    """Seconds the waiter at ``place`` (1: next) is expected to wait still (module doc)."""
    rounds = math.ceil(max(1, place) / facts.slots) if facts.slots > 0 else 1
    if waits_for in SLOT_WAITS:
        return None if facts.service is None else rounds * facts.service
    if waits_for == "start":
        before = facts.start_left
    elif waits_for == "drain":
        before = facts.due_seconds
    else:
        return None
    if before is None:
        return None
    if rounds == 1:
        return before
    return None if facts.service is None else before + (rounds - 1) * facts.service


def ordinal(n: int) -> str:
    """``1st``, ``2nd``, ``3rd``, ``4th``, ``11th``, ``12th``, ``13th``, ``21st``, ``112th``."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def place_words(place: int, model: str, estimate: float | None = None) -> str:
    """``queued 3rd for qwen, ~12 s``; ``, ~N s`` only when there is an estimate (at least
    1 s: under a second is ``~1 s``)."""
    words = f"queued {ordinal(place)} for {model}"
    if estimate is None or not math.isfinite(estimate):
        return words
    return f"{words}, ~{max(1, round(estimate))} s"


def place_comment(place: int, model: str, estimate: float | None = None) -> bytes:
    """The SSE comment a waiting stream is sent: ``: queued 3rd for qwen, ~12 s`` and the
    blank line that ends it (a comment is ignored by every SSE client)."""
    return f": {_one_line(place_words(place, model, estimate))}\n\n".encode()


def place_header(place: int, model: str, estimate: float | None = None) -> tuple[str, str]:
    """``(QUEUE_HEADER, "queued 3rd for qwen, ~12 s")`` for an answer that waited."""
    return QUEUE_HEADER, _one_line(place_words(place, model, estimate))


def _one_line(text: str) -> str:
    """A model id is config text: no line break may end the comment or split the header."""
    return "".join(c if c.isprintable() else " " for c in text)


@dataclass(frozen=True, slots=True)
class Place:
    """Where one waiting request stands: what its SSE comment and its header say."""

    place: int
    model: str
    estimate: float | None

    def words(self) -> str:
        return place_words(self.place, self.model, self.estimate)

    def comment(self) -> bytes:
        return place_comment(self.place, self.model, self.estimate)

    def header(self) -> tuple[str, str]:
        return place_header(self.place, self.model, self.estimate)


def place_of(
    scheduler: Scheduler, admission: Admission, facts: Callable[[str], WaitFacts]
) -> Place | None:
    """``admission``'s place and estimate now; None once it waits no more (granted, refused,
    withdrawn)."""
    place = scheduler.place(admission)
    if place is None:
        return None
    waits_for = scheduler.waits_for(admission)
    return Place(place, admission.model, estimate_wait(waits_for, place, facts(admission.model)))


@dataclass(frozen=True, slots=True)
class Waiter:
    """One queued request as ``GET /api/queue`` shows it: its client key's name (never the
    key), class and weight, its model, what it waits for, its place among its model's waiters
    (1: next), how long it has waited and the estimate (None: unknown)."""

    key: str
    priority: str
    weight: float
    model: str
    waits_for: str
    place: int
    waited: float
    estimate: float | None

    def as_dict(self) -> dict[str, object]:
        return {
            "key": self.key,
            "class": self.priority,
            "weight": self.weight,
            "model": self.model,
            "waits_for": self.waits_for,
            "place": self.place,
            "waited_seconds": round(self.waited, 3),
            "estimate_seconds": None if self.estimate is None else round(self.estimate, 1),
            "says": place_words(self.place, self.model, self.estimate),
        }


def waiters(scheduler: Scheduler, now: float, facts: Callable[[str], WaitFacts]) -> list[Waiter]:
    """Every queued request in the order the fair queue would serve it, with its place among
    its model's waiters and its estimate; ``facts`` is asked once per model."""
    places: dict[str, int] = {}
    known: dict[str, WaitFacts] = {}
    found: list[Waiter] = []
    blocked = scheduler.blocked()
    for adm in scheduler.waiting():
        model = adm.model
        place = places[model] = places.get(model, 0) + 1
        if model not in known:
            known[model] = facts(model)
        client = client_of(adm)
        waits_for = scheduler.waits_for(adm, blocked)
        found.append(
            Waiter(
                client.name,
                client.priority,
                client.weight,
                model,
                waits_for,
                place,
                max(0.0, now - adm.arrived),
                estimate_wait(waits_for, place, known[model]),
            )
        )
    return found
