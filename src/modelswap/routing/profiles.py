"""Profiles (llama-swap's): named sets of models pinned together, switched at runtime.

Pure: :class:`PinnedSwapper` wraps any swapper and never evicts a pinned model, so the models
of the active profile stay loaded side by side whatever else swaps around them. Which profile
is active is the runtime's state; this module only reads the set it is given.
"""

from __future__ import annotations

from collections.abc import Callable, Set

from modelswap.routing.protocols import Eviction, Swapper


class PinnedSwapper:
    """``inner``'s evictions minus the models ``pinned()`` names (read at every decision)."""

    def __init__(self, inner: Swapper, pinned: Callable[[], frozenset[str]]) -> None:
        self._inner = inner
        self._pinned = pinned

    def eviction_for(self, target: str, running: Set[str], busy: Set[str]) -> Eviction | None:
        eviction = self._inner.eviction_for(target, running, busy)
        if eviction is None:
            return None
        pinned = self._pinned()
        kept = eviction.models & pinned
        if not kept:
            return eviction
        kept_text = ", ".join(sorted(kept))
        reason = f"{eviction.reason}; kept (pinned by the active profile): {kept_text}"
        why = {m: w for m, w in eviction.why.items() if m not in pinned}
        return Eviction(eviction.models - pinned, reason, why)
