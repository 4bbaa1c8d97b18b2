"""llama-swap's speed histogram, as its store computes it (internal/store/store.go)."""

from __future__ import annotations

import pytest

from modelswap.observe.histogram import histogram, percentile


def test_no_values_is_null() -> None:
    assert histogram([]) is None


def test_equal_values_are_one_bin_of_width_zero() -> None:
    assert histogram([7.0, 7.0, 7.0]) == {
        "bins": [3],
        "binSize": 0.0,
        "min": 7.0,
        "max": 7.0,
        "p50": 7.0,
        "p95": 7.0,
        "p99": 7.0,
    }


@pytest.mark.parametrize(("count", "bins"), [(2, 5), (16, 5), (17, 6), (1000, 11), (10**6, 20)])
def test_bin_count_is_sturges_clamped_to_5_and_20(count: int, bins: int) -> None:
    shape = histogram([float(i) for i in range(count)])
    assert shape is not None
    assert len(shape["bins"]) == bins  # type: ignore[arg-type]
    assert sum(shape["bins"]) == count  # type: ignore[arg-type]


def test_the_largest_value_falls_in_the_last_bin() -> None:
    shape = histogram([0.0, 1.0, 2.0, 3.0, 10.0])
    assert shape is not None
    assert shape["bins"] == [2, 2, 0, 0, 1]  # [0, 2), [2, 4), ..., [8, 10]
    assert shape["binSize"] == 2.0


def test_percentiles_interpolate_between_ranks() -> None:
    assert percentile([10.0, 20.0], 50) == 15.0
    assert percentile([1.0, 2.0, 3.0, 4.0, 5.0], 95) == pytest.approx(4.8)
    assert percentile([], 50) == 0.0
