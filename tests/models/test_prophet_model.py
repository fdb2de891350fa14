"""Prophet wrapper: two small fits (~0.5 s each), then cache slicing, updates and persistence."""

from __future__ import annotations

import json

import numpy as np
import pytest

from models.base import NotFittedError
from models.prophet_model import ProphetForecaster
from models.types import TrafficSeries
from tests.models._synthetic import DAY0, check_forecast, daily, same_forecast


@pytest.fixture(scope="module")
def fitted() -> tuple[ProphetForecaster, TrafficSeries]:
    series = daily(4, 600, seed=11)
    values = series.values.copy()
    values[200:220] = np.nan  # a gap in the history
    history = TrafficSeries(values[: 3 * 144], 600, DAY0)
    return ProphetForecaster().fit(history), series


def test_follows_the_daily_shape(fitted: tuple[ProphetForecaster, TrafficSeries]) -> None:
    model, series = fitted
    fc = model.predict(144)
    check_forecast(fc, 144)
    assert fc.start == DAY0 + 3 * 86_400
    assert np.corrcoef(fc.mean, series.values[3 * 144 :])[0, 1] > 0.9
    assert model.weekly is False  # three days of history: no weekly component


def test_predict_is_pure_and_update_only_advances(fitted: tuple[ProphetForecaster, TrafficSeries]) -> None:
    model, series = fitted
    copy = ProphetForecaster.from_state(model.to_state())
    long = copy.predict(40)
    assert same_forecast(long, copy.predict(40))
    copy.update(series.slice(3 * 144, 3 * 144 + 10))
    later = copy.predict(30)
    assert later.start == long.start + 10 * 600
    assert np.array_equal(later.mean, long.mean[10:])


def test_state_is_json_and_round_trips_beyond_the_cache(fitted: tuple[ProphetForecaster, TrafficSeries]) -> None:
    model, _ = fitted
    state = json.loads(json.dumps(model.to_state(), allow_nan=False))
    restored = ProphetForecaster.from_state(state)
    h = 2 * 288 + 5  # past the two-day cache: extended lazily from the deserialized Prophet
    a, b = ProphetForecaster.from_state(model.to_state()).predict(h), restored.predict(h)
    assert same_forecast(a, b)
    check_forecast(b, h)
    assert all(isinstance(w, str) for w in restored.warnings)


def test_all_zero_series_with_gaps_forecasts_zero() -> None:
    values = np.zeros(2 * 144)
    values[10:30] = np.nan
    model = ProphetForecaster().fit(TrafficSeries(values, 600, DAY0))
    fc = model.predict(20)
    check_forecast(fc, 20)
    np.testing.assert_allclose(fc.mean, 0.0, atol=1e-9)
    for band in fc.quantiles.values():
        np.testing.assert_allclose(band, 0.0, atol=1e-9)


def test_misuse_is_reported() -> None:
    with pytest.raises(NotFittedError):
        ProphetForecaster().predict(3)
    with pytest.raises(ValueError, match="agg_seconds"):
        ProphetForecaster(agg_seconds=0)
    with pytest.raises(ValueError, match="not 'prophet'"):
        ProphetForecaster.from_state({"model": "persistence"})
