"""Holt-Winters: our recursion against statsmodels, gaps, updates between refits, recorded warnings."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from statsmodels.tsa.holtwinters import ExponentialSmoothing

from models.base import InsufficientHistoryError, NotFittedError
from models.ets import HoltWinters
from models.types import TrafficSeries
from tests.models._synthetic import DAY0, check_forecast, daily, same_forecast

HOUR = 3600


@pytest.mark.parametrize("trend", [None, "add", "damped"])
def test_recursion_reproduces_statsmodels_forecast(trend: str | None) -> None:
    series = daily(4, 600, seed=1)
    model = HoltWinters(trend).fit(series)  # type: ignore[arg-type]
    reference = ExponentialSmoothing(
        series.values,
        trend=None if trend is None else "add",
        damped_trend=trend == "damped",
        seasonal="add",
        seasonal_periods=144,
        initialization_method="heuristic",
    ).fit(use_brute=False)
    expected = np.maximum(reference.forecast(200), 0.0)
    np.testing.assert_allclose(model.predict(200).mean, expected, rtol=1e-9, atol=1e-9)


def test_update_runs_the_fitted_recursion_over_new_data() -> None:
    """fit(head).update(tail) == statsmodels filtering head+tail with the head's fitted parameters."""
    series = daily(4, 600, seed=9)
    head, tail = series.head(3 * 144), series.slice(3 * 144, 4 * 144)
    model = HoltWinters().fit(head).update(tail)
    fitted = ExponentialSmoothing(
        head.values, seasonal="add", seasonal_periods=144, initialization_method="heuristic"
    ).fit(use_brute=False)
    p = fitted.params
    reference = ExponentialSmoothing(
        series.values,
        seasonal="add",
        seasonal_periods=144,
        initialization_method="known",
        initial_level=p["initial_level"],
        initial_seasonal=p["initial_seasons"],
    ).fit(smoothing_level=p["smoothing_level"], smoothing_seasonal=p["smoothing_seasonal"], optimized=False)
    np.testing.assert_allclose(model.predict(50).mean, np.maximum(reference.forecast(50), 0), rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize(("step", "bins"), [(60, 2880), (600, 288), (3600, 48)])
def test_needs_two_full_days(step: int, bins: int) -> None:
    assert HoltWinters().min_history(step) == bins
    with pytest.raises(InsufficientHistoryError, match=f"needs {bins} bins"):
        HoltWinters().fit(TrafficSeries(np.ones(bins - 1), step, DAY0))


def test_use_before_fit_raises() -> None:
    with pytest.raises(NotFittedError):
        HoltWinters().predict(1)


@pytest.mark.parametrize("bad", [{"trend": "mul"}, {"period_seconds": 0}, {"initialization_method": "known"}])
def test_bad_hyper_parameters_are_rejected(bad: dict[str, object]) -> None:
    with pytest.raises(ValueError, match=next(iter(bad))):
        HoltWinters(**bad)  # type: ignore[arg-type]


def test_missing_observation_updates_state_with_the_one_step_forecast() -> None:
    """With no trend, absorbing a NaN leaves the forecast path exactly where it was."""
    series = daily(3, 600, seed=2)
    model = HoltWinters().fit(series)
    before = model.predict(10).mean
    model.update(TrafficSeries(np.array([np.nan]), 600, series.end))
    after = model.predict(9).mean
    np.testing.assert_allclose(after, before[1:], rtol=1e-12)


def test_update_conditions_on_fresh_data_without_refit() -> None:
    series = daily(3, 600, seed=4)
    model = HoltWinters().fit(series)
    base = model.predict(6).mean
    surge = TrafficSeries(np.full(6, 3 * float(np.nanmax(series.values))), 600, series.end)
    model.update(surge)
    assert model.predict(1).start == surge.end
    assert np.all(model.predict(6).mean > base)


def test_update_in_chunks_equals_one_update() -> None:
    """update() is a filter: feeding the same bins in two chunks or one gives the same state."""
    series = daily(4, 600, seed=5)
    head = series.head(3 * 144)
    model = HoltWinters().fit(head)
    chunked = HoltWinters.from_state(model.to_state())
    model.update(series.slice(3 * 144, 4 * 144))
    chunked.update(series.slice(3 * 144, 3 * 144 + 50)).update(series.slice(3 * 144 + 50, 4 * 144))
    assert same_forecast(model.predict(30), chunked.predict(30))


def test_gaps_in_the_history_are_tolerated() -> None:
    series = daily(3, 600, seed=6)
    values = series.values.copy()
    values[100:130] = np.nan
    values[-5:] = np.nan
    model = HoltWinters().fit(TrafficSeries(values, 600, DAY0))
    fc = model.predict(36)
    check_forecast(fc, 36)
    truth = daily(4, 600, seed=6).values[len(values) : len(values) + 36]
    assert np.mean(np.abs(fc.mean - truth)) / np.mean(truth) < 0.3


@pytest.mark.parametrize("step", [60, 600])
@pytest.mark.parametrize("level", [0.0, 7.5])
def test_constant_and_all_zero_series(step: int, level: float) -> None:
    n = 2 * 86_400 // step
    model = HoltWinters().fit(TrafficSeries(np.full(n, level), step, DAY0))
    fc = model.predict(30)
    check_forecast(fc, 30)
    np.testing.assert_allclose(fc.mean, level, atol=1e-9)
    for band in fc.quantiles.values():
        np.testing.assert_allclose(band, fc.mean, atol=1e-9)
    assert all(isinstance(w, str) for w in model.warnings)
    assert model.to_state()["warnings"] == model.warnings


def test_captures_the_daily_shape() -> None:
    series = daily(4, 600, seed=7)
    fc = HoltWinters().fit(series.head(3 * 144)).predict(144)
    truth = series.values[3 * 144 :]
    assert np.corrcoef(fc.mean, truth)[0, 1] > 0.9
    check_forecast(fc, 144)


def test_uses_at_most_the_history_window() -> None:
    series = daily(5, 600, seed=8)
    short = HoltWinters(history_seconds=2 * 86_400).fit(series)
    tail = HoltWinters(history_seconds=2 * 86_400).fit(series.slice(len(series) - 288, len(series)))
    assert same_forecast(short.predict(20), tail.predict(20))


@settings(max_examples=25, deadline=None)
@given(
    values=st.lists(
        st.one_of(st.just(math.nan), st.floats(min_value=0, max_value=1e5, allow_nan=False)), min_size=48, max_size=96
    ).filter(lambda v: sum(not math.isnan(x) for x in v) >= 2),
    h=st.integers(min_value=1, max_value=60),
)
def test_forecasts_are_valid_on_any_hourly_input(values: list[float], h: int) -> None:
    model = HoltWinters().fit(TrafficSeries(np.array(values), HOUR, DAY0))
    fc = model.predict(h)
    check_forecast(fc, h)
    assert same_forecast(fc, model.predict(h))
    assert same_forecast(fc, HoltWinters.from_state(model.to_state()).predict(h))
