"""The scheduler's seams: what it asks for (Effects) and what it decides over (Admission).

``Effects`` is the scheduler's "syscall table": the only way a decision becomes an action. The
router implements it with real processes and futures; tests implement it with a recorder.
"""

from __future__ import annotations

from collections.abc import Mapping, Set
from dataclasses import dataclass, field
from typing import Protocol


class Admission(Protocol):
    """One request waiting for permission to use a model. Opaque to the scheduler but for
    ``model`` (the resolved model id) and ``arrived`` (the Effects clock when it came)."""

    @property
    def model(self) -> str: ...

    @property
    def arrived(self) -> float: ...


@dataclass(frozen=True, slots=True)
class Eviction:
    """What must stop before a target can start, and why (logged once when committed).
    ``why``: each evicted model's rule in a few words (``group G is exclusive``, ``budget
    ram``, …), for the load dry run (``routing/prediction.py``); absent for none."""

    models: frozenset[str]
    reason: str
    why: Mapping[str, str] = field(default_factory=dict, compare=False, hash=False)


class Effects(Protocol):
    def start_swap(self, target: str, evict: Set[str], reason: str) -> None:
        """Stop ``evict``, then start ``target``; report with ``on_swap_done``."""

    def cancel_swap(self, target: str) -> None:
        """Abort the start of ``target`` (nobody waits for it); ``on_swap_done`` follows."""

    def prepare_swap(self, target: str) -> None:
        """A swap to ``target`` is due but waits (for what it evicts to drain, or for a stop
        to end): work that makes its start cheaper may begin. Said once per due target."""

    def abandon_swap(self, target: str) -> None:
        """The swap ``prepare_swap`` announced will not start now (another target is due, or
        none is); what was prepared for it may stop."""

    def grant(self, admission: Admission) -> bool:
        """Let the request use its model now. False if its client is already gone."""

    def grant_error(self, admission: Admission, error: Exception) -> None:
        """Fail the request with ``error`` (e.g. the start's diagnosis)."""

    def stop(self, models: Set[str]) -> None:
        """Stop idle models (TTL expiry, explicit unload); report with ``on_stop_done``."""

    def now(self) -> float:
        """The clock the scheduler decides by (monotonic seconds)."""


class Swapper(Protocol):
    def eviction_for(self, target: str, running: Set[str], busy: Set[str]) -> Eviction | None:
        """What must stop before ``target`` can start (``busy`` models are serving), or None
        when it cannot start now whatever is stopped. Pure; may be called speculatively, so it
        must not log or act."""
