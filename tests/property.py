"""How many examples a property test draws: its own number in `make test` (derandomized, the
same on every run: tests/conftest.py), ten times it in `make test-property` (random seeds)."""

from __future__ import annotations

import os

RANDOM = os.environ.get("MODELSWAP_PROPERTY_RANDOM") == "1"
RANDOM_FACTOR = 10


def examples(n: int) -> int:
    """``n`` in the derandomized run; more where the run draws new examples every time."""
    return n * RANDOM_FACTOR if RANDOM else n
