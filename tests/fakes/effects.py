"""A recording :class:`~modelswap.routing.protocols.Effects` for the scheduler's unit tests.

Every call is appended to :attr:`RecordingEffects.calls` in order, as a plain tuple:

* ``("start_swap", target, frozenset(evict))`` (the reason text is kept in ``reasons``)
* ``("cancel_swap", target)``
* ``("grant", admission)``
* ``("grant_error", admission, error)``
* ``("stop", frozenset(models))``

``prepare_swap`` and ``abandon_swap`` are advice, not decisions: they go to ``preparations``
(``("prepare", target)``, ``("abandon", target)``), not into ``calls``, so the decision
sequences the tests assert stay the same.

``grant`` answers False for an :class:`Admission` marked ``gone`` (its client went away), as the
router's real ``Effects`` does. Answering one admission twice (two grants, or a grant and an
error) is always a scheduler bug, so the recorder fails the test on the spot.
"""

from __future__ import annotations

from collections.abc import Set
from dataclasses import dataclass

from modelswap.routing import protocols

Call = tuple[object, ...]


@dataclass(eq=False)
class Admission:
    """One test request. Compared by identity, like the router's real admissions."""

    model: str
    name: str
    gone: bool = False
    arrived: float = 0.0

    def __repr__(self) -> str:
        return f"<{self.name}{' gone' if self.gone else ''}>"


class RecordingEffects:
    def __init__(self) -> None:
        self.calls: list[Call] = []
        self._taken = 0
        self._starts: list[tuple[str, frozenset[str]]] = []
        self._granted: list[protocols.Admission] = []
        self._errors: list[tuple[protocols.Admission, Exception]] = []
        self._stops: list[frozenset[str]] = []
        self._answered: dict[int, protocols.Admission] = {}  # keeps them alive: ids stay unique
        self.reasons: list[str] = []
        self.preparations: list[Call] = []
        self.clock = 0.0  # what now() answers; tests move it forward

    # ---- the Effects protocol --------------------------------------------------------------

    def start_swap(self, target: str, evict: Set[str], reason: str) -> None:
        self._starts.append((target, frozenset(evict)))
        self.reasons.append(reason)
        self.calls.append(("start_swap", target, frozenset(evict)))

    def cancel_swap(self, target: str) -> None:
        self.calls.append(("cancel_swap", target))

    def prepare_swap(self, target: str) -> None:
        self.preparations.append(("prepare", target))

    def abandon_swap(self, target: str) -> None:
        self.preparations.append(("abandon", target))

    def now(self) -> float:
        return self.clock

    def grant(self, admission: protocols.Admission) -> bool:
        self._answer(admission)
        self._granted.append(admission)
        self.calls.append(("grant", admission))
        return not getattr(admission, "gone", False)

    def grant_error(self, admission: protocols.Admission, error: Exception) -> None:
        self._answer(admission)
        self._errors.append((admission, error))
        self.calls.append(("grant_error", admission, error))

    def stop(self, models: Set[str]) -> None:
        self._stops.append(frozenset(models))
        self.calls.append(("stop", frozenset(models)))

    # ---- accessors -------------------------------------------------------------------------

    def take(self) -> list[Call]:
        """The calls recorded since the previous ``take`` (or since the start)."""
        new = self.calls[self._taken :]
        self._taken = len(self.calls)
        return new

    def granted(self) -> list[protocols.Admission]:
        """Every admission passed to ``grant``, in order (including those whose client was gone)."""
        return list(self._granted)

    def errors(self) -> list[tuple[protocols.Admission, Exception]]:
        """Every ``(admission, error)`` passed to ``grant_error``, in order."""
        return list(self._errors)

    def starts(self) -> list[tuple[str, frozenset[str]]]:
        """Every ``(target, evict)`` passed to ``start_swap``, in order."""
        return list(self._starts)

    def stops(self) -> list[frozenset[str]]:
        """Every model set passed to ``stop``, in order."""
        return list(self._stops)

    def _answer(self, admission: protocols.Admission) -> None:
        if id(admission) in self._answered:
            raise AssertionError(f"{admission!r} was answered twice: {self.calls!r}")
        self._answered[id(admission)] = admission
