"""Every model's state is strict JSON and restores to identical forecasts, also after updates.

Prophet's round trip is in test_prophet_model.py (one shared fit keeps the suite fast).
"""

from __future__ import annotations

import json
from collections.abc import Callable

import numpy as np
import pytest

from models.base import Forecaster
from models.ets import HoltWinters
from models.naive import Persistence, SeasonalNaive
from models.registry import from_state, make_chain
from models.types import TrafficSeries
from tests.models._synthetic import DAY0, daily, same_forecast


def _gappy(step: int) -> TrafficSeries:
    series = daily(2.5, step, seed=21)
    values = series.values.copy()
    values[::17] = np.nan
    values[-3:] = np.nan
    return TrafficSeries(values, step, DAY0)


FACTORIES: dict[str, Callable[[], Forecaster]] = {
    "persistence": Persistence,
    "seasonal_naive": SeasonalNaive,
    "holt_winters": HoltWinters,
    "holt_winters_damped": lambda: HoltWinters("damped"),
    "chain_holt_winters": lambda: make_chain("holt_winters"),
    "chain_default": lambda: make_chain("default"),
}


@pytest.mark.parametrize("step", [60, 600])
@pytest.mark.parametrize("name", sorted(FACTORIES))
def test_state_is_strict_json_and_round_trips_exactly(name: str, step: int) -> None:
    model: Forecaster = FACTORIES[name]()
    series = _gappy(step)
    model.fit(series)
    text = json.dumps(model.to_state(), allow_nan=False)
    restored = from_state(json.loads(text))
    assert same_forecast(model.predict(30, [50, 80, 95]), restored.predict(30, [50, 80, 95]))

    new = TrafficSeries(np.array([3.0, np.nan, 4.5, 0.0]), step, series.end + step)  # after a 1-bin gap
    model.update(new)
    restored.update(new)
    assert same_forecast(model.predict(30), restored.predict(30))
    again = from_state(json.loads(json.dumps(model.to_state(), allow_nan=False)))
    assert same_forecast(model.predict(30), again.predict(30))


@pytest.mark.parametrize("cls", [Persistence, SeasonalNaive, HoltWinters])
def test_state_of_another_model_is_rejected(cls: type[Persistence | SeasonalNaive | HoltWinters]) -> None:
    other = Persistence if cls is not Persistence else SeasonalNaive
    state = other().fit(TrafficSeries(np.ones(3 * 1440), 60, DAY0)).to_state()
    with pytest.raises(ValueError, match=f"not '{cls.alias}'"):
        cls.from_state(state)


@pytest.mark.parametrize("cls", [Persistence, SeasonalNaive, HoltWinters])
def test_damaged_state_is_a_one_line_error(cls: type[Persistence | SeasonalNaive | HoltWinters]) -> None:
    state = cls().fit(TrafficSeries(np.ones(3 * 144), 600, DAY0)).to_state()
    del state["end"]
    with pytest.raises(ValueError, match=f"{cls.alias}: invalid state"):
        cls.from_state(state)
