"""llama-swap's speed histogram (``/api/metrics/stats``): pure over a list of numbers.

Bins by Sturges' rule, clamped to 5–20, equal width from the smallest value to the largest
(all values equal: one bin of width 0); percentiles interpolate linearly between the closest
ranks. The same numbers llama-swap's own store computes from the same speeds.
"""

from __future__ import annotations

import math

MIN_BINS, MAX_BINS = 5, 20


def percentile(ordered: list[float], p: float) -> float:
    """The ``p``-th percentile (0–100) of ``ordered`` (sorted), linearly interpolated."""
    if not ordered:
        return 0.0
    rank = p / 100 * (len(ordered) - 1)
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (rank - low) * (ordered[high] - ordered[low])


def histogram(values: list[float]) -> dict[str, object] | None:
    """``{"bins", "min", "max", "binSize", "p50", "p95", "p99"}``, or None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    low, high = ordered[0], ordered[-1]
    shape: dict[str, object] = {"min": low, "max": high}
    shape.update({f"p{p}": percentile(ordered, p) for p in (50, 95, 99)})
    if low == high:
        return {"bins": [len(values)], "binSize": 0.0, **shape}
    count = min(MAX_BINS, max(MIN_BINS, math.ceil(math.log2(len(values))) + 1))
    width = (high - low) / count
    bins = [0] * count
    for value in values:
        bins[min(math.floor((value - low) / width), count - 1)] += 1
    return {"bins": bins, "binSize": width, **shape}
