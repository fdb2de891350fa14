"""Sqrt-space empirical bands: ordering and floor invariants for any errors, and their state."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from models._residuals import ErrorBands, horizon_grid

errors_strategy = arrays(
    np.float64,
    st.tuples(st.integers(0, 40), st.integers(1, 6)),
    elements=st.one_of(st.just(np.nan), st.floats(-50, 50, allow_nan=False)),
)


@settings(max_examples=80, deadline=None)
@given(
    errors=errors_strategy,
    mean=arrays(np.float64, st.integers(1, 30), elements=st.floats(0, 1e6, allow_nan=False)),
    levels=st.lists(st.integers(1, 99), min_size=1, max_size=6),
)
def test_bands_are_ordered_and_never_below_the_mean_at_or_above_p50(
    errors: np.ndarray, mean: np.ndarray, levels: list[int]
) -> None:
    horizons = list(range(1, errors.shape[1] + 1))
    bands = ErrorBands.from_errors(errors, horizons).apply(mean, levels)
    ordered = sorted(bands)
    assert ordered == sorted(set(levels))
    for lo, hi in itertools.pairwise(ordered):
        assert np.all(bands[hi] >= bands[lo])
    for level in ordered:
        assert np.all(np.isfinite(bands[level]))
        assert np.all(bands[level] >= 0)
        if level >= 50:
            assert np.all(bands[level] >= mean)


def test_offsets_grow_with_horizon_and_band_width_with_level_of_traffic() -> None:
    rng = np.random.default_rng(0)
    errors = rng.normal(size=(400, 3)) * np.array([0.5, 1.0, 2.0])
    eb = ErrorBands.from_errors(errors, [1, 5, 20])
    q = eb.offsets_for(90, 20)
    assert np.all(np.diff(q) >= 0)
    assert q[0] == pytest.approx(np.quantile(errors[:, 0], 0.9), rel=1e-9)
    low, high = eb.apply(np.full(3, 1.0), [90])[90], eb.apply(np.full(3, 100.0), [90])[90]
    assert high[0] - 100.0 > 5 * (low[0] - 1.0)


def test_no_usable_errors_give_zero_width() -> None:
    eb = ErrorBands.from_errors(np.full((3, 2), np.nan), [1, 2])
    assert eb == ErrorBands.zero()
    mean = np.array([0.0, 4.0])
    assert all(np.array_equal(b, mean) for b in eb.apply(mean, [50, 99]).values())


def test_state_round_trip_and_validation() -> None:
    eb = ErrorBands.from_errors(np.random.default_rng(1).normal(size=(50, 2)), [1, 3])
    assert ErrorBands.from_state(json.loads(json.dumps(eb.to_state()))) == eb
    with pytest.raises(ValueError, match="invalid error-band state"):
        ErrorBands.from_state({"levels": []})
    with pytest.raises(ValueError, match="percentile"):
        eb.offsets_for(100, 3)


@pytest.mark.parametrize(("max_k", "first", "last"), [(1, 1, 1), (10, 1, 10), (1440, 1, 1440)])
def test_horizon_grid(max_k: int, first: int, last: int) -> None:
    grid = horizon_grid(max_k)
    assert grid[0] == first
    assert grid[-1] == last
    assert list(grid) == sorted(set(grid))
    assert len(grid) <= 45
