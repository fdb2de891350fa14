"""Persistence and seasonal naive: their forecasts, gaps, updates and empirical bands."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from models.base import InsufficientHistoryError, NotFittedError
from models.naive import Persistence, SeasonalNaive
from models.types import TrafficSeries
from tests.models._synthetic import DAY0, check_forecast, daily, same_forecast


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ([1.0, 2.0, 3.0], 3.0),
        ([1.0, 2.0, math.nan], 2.0),
        ([math.nan, 4.0, math.nan, math.nan], 4.0),
        ([5.0, math.inf], 5.0),
        ([5.0, -1.0], 5.0),
        ([0.0, 0.0], 0.0),
    ],
)
def test_persistence_repeats_last_observed_value(values: list[float], expected: float) -> None:
    fc = Persistence().fit(TrafficSeries(np.array(values), 60, DAY0)).predict(4)
    assert np.array_equal(fc.mean, np.full(4, expected))
    assert fc.start == DAY0 + 60 * len(values)
    assert fc.model == "persistence"


def test_persistence_min_history_is_one_bin() -> None:
    assert Persistence().min_history(60) == 1
    assert Persistence().min_history(600) == 1


def test_persistence_refuses_a_series_without_observations() -> None:
    with pytest.raises(InsufficientHistoryError, match="no observed value"):
        Persistence().fit(TrafficSeries(np.full(10, np.nan), 60, DAY0))


@pytest.mark.parametrize("model", [Persistence(), SeasonalNaive()])
def test_use_before_fit_raises(model: Persistence | SeasonalNaive) -> None:
    with pytest.raises(NotFittedError):
        model.predict(3)
    with pytest.raises(NotFittedError):
        model.update(TrafficSeries(np.ones(2), 60, DAY0))


@pytest.mark.parametrize("h", [0, -1, 2.5, True])
def test_bad_horizon_is_rejected(h: object) -> None:
    model = Persistence().fit(TrafficSeries(np.ones(5), 60, DAY0))
    with pytest.raises(ValueError, match="horizon"):
        model.predict(h)  # type: ignore[arg-type]


def test_persistence_update_follows_new_observations_and_skips_missing() -> None:
    model = Persistence().fit(TrafficSeries(np.ones(30), 60, DAY0))
    model.update(TrafficSeries(np.array([7.0, np.nan]), 60, DAY0 + 30 * 60))
    fc = model.predict(2)
    assert np.array_equal(fc.mean, [7.0, 7.0])
    assert fc.start == DAY0 + 32 * 60


def test_update_after_a_gap_pads_it_and_moves_the_origin() -> None:
    model = Persistence().fit(TrafficSeries(np.ones(30), 60, DAY0))
    model.update(TrafficSeries(np.array([3.0]), 60, DAY0 + 40 * 60))
    assert model.predict(1).start == DAY0 + 41 * 60
    assert model.predict(1).mean[0] == 3.0


@pytest.mark.parametrize(
    ("start_offset", "step", "message"),
    [(-60, 60, "before the end"), (30, 60, "off the"), (0, 600, "step")],
)
def test_misaligned_update_is_rejected(start_offset: int, step: int, message: str) -> None:
    model = Persistence().fit(TrafficSeries(np.ones(30), 60, DAY0))
    with pytest.raises(ValueError, match=message):
        model.update(TrafficSeries(np.ones(2), step, DAY0 + 30 * 60 + start_offset))


@pytest.mark.parametrize("step", [60, 600])
def test_seasonal_naive_repeats_yesterday(step: int) -> None:
    m = 86_400 // step
    values = np.arange(2 * m, dtype=np.float64)  # every bin distinct
    fc = SeasonalNaive().fit(TrafficSeries(values, step, DAY0)).predict(m + 3)
    assert np.array_equal(fc.mean[:m], values[m:])
    assert np.array_equal(fc.mean[m:], values[m : m + 3])  # beyond a season: the same day again
    assert SeasonalNaive().min_history(step) == m


def test_seasonal_naive_fills_missing_phase_from_the_season_before() -> None:
    step, m = 600, 144
    values = np.arange(2 * m, dtype=np.float64)
    values[m + 5] = np.nan
    fc = SeasonalNaive().fit(TrafficSeries(values, step, DAY0)).predict(10)
    assert fc.mean[5] == values[5]
    assert fc.mean[4] == values[m + 4]


def test_seasonal_naive_never_observed_phase_uses_last_value() -> None:
    step, m = 600, 144
    values = np.full(m, 3.0)
    values[:10] = np.nan
    values[-1] = 8.0
    fc = SeasonalNaive().fit(TrafficSeries(values, step, DAY0)).predict(12)
    assert np.array_equal(fc.mean[:10], np.full(10, 8.0))
    assert np.array_equal(fc.mean[10:], [3.0, 3.0])


def test_seasonal_naive_update_overwrites_the_phase() -> None:
    step, m = 600, 144
    model = SeasonalNaive().fit(TrafficSeries(np.ones(m), step, DAY0))
    model.update(TrafficSeries(np.array([9.0, np.nan]), step, DAY0 + m * step))
    fc = model.predict(m)
    # after the update the origin is 2 bins later; bin 0 of tomorrow (=9) is m-2 steps ahead
    assert fc.mean[m - 2] == 9.0
    assert fc.mean[m - 1] == 1.0  # the NaN kept yesterday's value


@pytest.mark.parametrize("cls", [Persistence, SeasonalNaive])
@pytest.mark.parametrize("step", [60, 600])
def test_constant_and_all_zero_series_give_zero_width_bands(cls: type[Persistence | SeasonalNaive], step: int) -> None:
    n = 2 * 86_400 // step
    for level in (0.0, 4.0):
        fc = cls().fit(TrafficSeries(np.full(n, level), step, DAY0)).predict(20)
        check_forecast(fc, 20)
        assert np.array_equal(fc.mean, np.full(20, level))
        for band in fc.quantiles.values():
            assert np.array_equal(band, fc.mean)


def test_bands_are_wider_at_high_traffic_than_at_low() -> None:
    """Sqrt-space errors: the same fitted bands give a wider absolute band at the daily peak."""
    series = daily(3, 60)
    model = Persistence().fit(series)

    def width_after(value: float) -> float:
        copy = Persistence.from_state(model.to_state())
        fc = copy.update(TrafficSeries(np.array([value]), 60, series.end)).predict(5)
        return float(fc.quantiles[90][4] - fc.mean[4])

    assert width_after(20.0) > 2 * width_after(2.0)


def test_persistence_band_covers_about_its_level() -> None:
    """Calibration on held-out data: the p90 band of a 10-step forecast covers 80-97% of outcomes."""
    series = daily(6, 60, seed=3)
    fit_n, h = 4 * 1440, 10
    model = Persistence().fit(series.head(fit_n))
    covered = total = 0
    seen = fit_n
    for origin in range(fit_n + 1, len(series) - h, 37):
        model.update(series.slice(seen, origin))
        seen = origin
        fc = model.predict(h, [90])
        covered += int(np.sum(series.values[origin : origin + h] <= fc.quantiles[90]))
        total += h
    assert 0.8 <= covered / total <= 0.97


finite_or_nan = st.one_of(st.just(math.nan), st.floats(min_value=0, max_value=1e6, allow_nan=False))


@settings(max_examples=60, deadline=None)
@given(
    values=st.lists(finite_or_nan, min_size=1, max_size=300).filter(lambda v: any(not math.isnan(x) for x in v)),
    step=st.sampled_from([60, 600, 3600]),
    h=st.integers(min_value=1, max_value=50),
    levels=st.lists(st.integers(min_value=1, max_value=99), min_size=1, max_size=4),
)
def test_naive_forecasts_are_valid_on_any_input(values: list[float], step: int, h: int, levels: list[int]) -> None:
    series = TrafficSeries(np.array(values), step, DAY0)
    for cls in (Persistence, SeasonalNaive):
        model = cls().fit(series)
        fc = model.predict(h, levels)
        check_forecast(fc, h, levels)
        assert same_forecast(fc, model.predict(h, levels))  # predict is pure
        assert same_forecast(fc, cls.from_state(model.to_state()).predict(h, levels))
