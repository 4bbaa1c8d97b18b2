"""Selectors: a virtual model id that names one of several targets, chosen per request.

Pure: :func:`choose` takes the selector and what is true of each target now (ready or not,
requests in flight, local or a peer's) and returns the target's name. The runtime resolves that
name as if the client had sent it. Strategies (llama-swap's):

* ``pin`` — always the first target.
* ``warm`` — the first target that is ready (no swap needed); when none is, the first one.
* ``spillover`` — the first target with fewer than ``reservations`` requests in flight; a
  target that is not ready is started only when every target before it is full. A peer's load
  is not known here, so a peer target counts as having room. When all are full, the target
  with the fewest requests in flight (the earliest of those).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from modelswap.config.resolved import Selector


@dataclass(frozen=True, slots=True)
class TargetState:
    """One target now. ``peer``: a peer's model (its readiness and load are the peer's)."""

    ready: bool = False
    in_flight: int = 0
    peer: bool = False


UNKNOWN = TargetState()


def choose(selector: Selector, states: Mapping[str, TargetState]) -> str:
    """The target ``selector`` sends a request to, given ``states`` (missing: not ready, idle)."""
    targets = selector.targets
    if selector.strategy == "pin" or len(targets) == 1:
        return targets[0]
    if selector.strategy == "warm":
        for name in targets:
            state = states.get(name, UNKNOWN)
            if state.ready and not state.peer:
                return name
        return targets[0]
    return _spillover(selector, states)


def _spillover(selector: Selector, states: Mapping[str, TargetState]) -> str:
    for name in selector.targets:
        state = states.get(name, UNKNOWN)
        if state.peer or state.in_flight < selector.reservations:
            return name
    return min(selector.targets, key=lambda n: states.get(n, UNKNOWN).in_flight)
