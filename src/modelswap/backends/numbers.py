"""Numbers as backends print them: thousands separators, units. Pure and light (the adapters
import it at load)."""

from __future__ import annotations

import math


def to_int(text: str) -> int:
    """``"211,936"`` → 211936 (thousands separators and underscores removed)."""
    return int(text.replace(",", "").replace("_", "").strip())


def to_float(text: str) -> float:
    """``"1,024.50"`` → 1024.5."""
    return float(text.replace(",", "").replace("_", "").strip())


def gib(value: float, unit: str) -> float:
    """``value`` in ``unit`` (B, KiB, MiB, GiB, TiB; case-insensitive) as GiB."""
    scale = {"b": 1 / 2**30, "kib": 1 / 2**20, "mib": 1 / 2**10, "gib": 1.0, "tib": 2.0**10}
    return value * scale[unit.lower()]


def round_down(value: float) -> float:
    """Down to two decimals (a fraction to suggest that surely fits)."""
    return math.floor(value * 100) / 100
