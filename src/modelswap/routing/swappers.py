"""Eviction policies: pure functions from "target + running set" to "set to evict"."""

from __future__ import annotations

from collections.abc import Set


class ExclusiveSwapper:
    """One model at a time: starting any model evicts every other running model."""

    def eviction_for(self, target: str, running: Set[str]) -> frozenset[str]:
        return frozenset(m for m in running if m != target)
