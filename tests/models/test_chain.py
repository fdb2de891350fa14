"""FallbackChain: which model forecasts, and that every substitution is written down."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any, Self

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from models.base import DEFAULT_LEVELS, Forecaster, InsufficientHistoryError, NotFittedError
from models.chain import ChainExhaustedError, FallbackChain
from models.clean import prepare
from models.ets import HoltWinters
from models.naive import Persistence, SeasonalNaive
from models.registry import from_state, make_chain
from models.types import Forecast, TrafficSeries
from tests.models._synthetic import DAY0, check_forecast, daily


class Broken:
    """A forecaster that breaks where it is told to (a real class, written for this test)."""

    alias = "broken"

    def __init__(self, where: str) -> None:
        self.where = where

    def min_history(self, step_seconds: int) -> int:
        return 1

    def fit(self, series: TrafficSeries) -> Self:
        if self.where == "fit":
            raise RuntimeError("boom in fit")
        self._end = series.end
        self._step = series.step_seconds
        return self

    def update(self, new: TrafficSeries) -> Self:
        if self.where == "update":
            raise ValueError("cannot absorb")
        self._end = new.end
        return self

    def predict(self, h: int, levels: Sequence[int] = DEFAULT_LEVELS) -> Forecast:
        if self.where == "predict-later" and self._end > DAY0 + 3600:
            raise ArithmeticError("diverged")
        value = {"nan": np.nan, "negative": -1.0}.get(self.where, 1.0)
        mean = np.full(h, value)
        return Forecast(self._end, self._step, mean, {q: mean for q in levels}, self.alias)

    def to_state(self) -> dict[str, Any]:
        return {"model": self.alias}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> Self:
        return cls("never")


def test_the_test_double_satisfies_the_protocol() -> None:
    assert isinstance(Broken("fit"), Forecaster)


def test_short_history_falls_back_by_min_history_and_says_so() -> None:
    chain = FallbackChain([HoltWinters(), SeasonalNaive(), Persistence()])
    fc = chain.fit(TrafficSeries(np.full(60, 4.0), 60, DAY0)).predict(5)
    assert fc.model == "persistence"
    assert fc.fallbacks == ("holt_winters: needs 2880 bins, has 60", "seasonal_naive: needs 1440 bins, has 60")
    assert chain.alias == "holt_winters"
    assert np.array_equal(fc.mean, np.full(5, 4.0))


def test_history_is_counted_in_observed_bins() -> None:
    values = np.full(1500, 3.0)
    values[:200] = np.nan
    fc = FallbackChain([SeasonalNaive(), Persistence()]).fit(TrafficSeries(values, 60, DAY0)).predict(2)
    assert fc.fallbacks == ("seasonal_naive: needs 1440 bins, has 1300",)


def test_enough_history_uses_the_first_model_with_no_fallbacks() -> None:
    fc = FallbackChain([HoltWinters(), Persistence()]).fit(daily(3, 600)).predict(12)
    assert fc.model == "holt_winters"
    assert fc.fallbacks == ()
    check_forecast(fc, 12)


@pytest.mark.parametrize(
    ("where", "note"),
    [
        ("fit", "broken: RuntimeError: boom in fit"),
        ("nan", "broken: forecast is not finite"),
        ("negative", "broken: forecast is negative"),
    ],
)
def test_a_failing_model_falls_through_with_its_error(where: str, note: str) -> None:
    chain = FallbackChain([Broken(where), Persistence()]).fit(TrafficSeries(np.full(10, 2.0), 60, DAY0))
    fc = chain.predict(3)
    assert fc.model == "persistence"
    assert fc.fallbacks == (note,)
    assert chain.active is chain.models[1]


def test_a_model_failing_later_in_predict_falls_through_at_once() -> None:
    chain = FallbackChain([Broken("predict-later"), Persistence()]).fit(TrafficSeries(np.full(10, 2.0), 60, DAY0))
    assert chain.predict(1).model == "broken"
    chain.update(TrafficSeries(np.full(60, 5.0), 60, DAY0 + 600))
    fc = chain.predict(2)
    assert fc.model == "persistence"
    assert fc.fallbacks == ("broken: ArithmeticError: diverged",)
    assert np.array_equal(fc.mean, [5.0, 5.0])  # the fallback was kept up to date


def test_a_model_failing_in_update_leaves_the_chain() -> None:
    chain = FallbackChain([Broken("update"), Persistence()]).fit(TrafficSeries(np.full(10, 2.0), 60, DAY0))
    chain.update(TrafficSeries(np.array([6.0]), 60, DAY0 + 600))
    fc = chain.predict(1)
    assert fc.model == "persistence"
    assert fc.fallbacks == ("broken: ValueError: cannot absorb (in update)",)


def test_no_observation_at_all_raises_with_every_reason() -> None:
    chain = FallbackChain([SeasonalNaive(), Persistence()])
    with pytest.raises(InsufficientHistoryError, match=r"seasonal_naive: needs 1440 bins, has 0.*persistence: needs 1"):
        chain.fit(TrafficSeries(np.full(30, np.nan), 60, DAY0))


def test_every_model_failing_in_predict_raises() -> None:
    chain = FallbackChain([Broken("predict-later")]).fit(TrafficSeries(np.ones(2), 60, DAY0))
    chain.update(TrafficSeries(np.ones(60), 60, DAY0 + 120))
    with pytest.raises(ChainExhaustedError, match="diverged"):
        chain.predict(1)


def test_outage_zeros_are_cleaned_before_fitting_and_while_updating() -> None:
    busy = daily(2, 60, low=20, high=40, seed=5)
    values = busy.values.copy()
    values[-30:] = 0.0  # the metrics pipeline went dark for half an hour
    chain = FallbackChain([Persistence()]).fit(TrafficSeries(values, 60, DAY0))
    assert chain.predict(1).mean[0] > 10  # not 0: the zeros were outage, not demand
    chain.update(TrafficSeries(np.zeros(5), 60, busy.end))
    assert chain.predict(1).mean[0] > 10


def test_real_quiet_is_kept() -> None:
    values = np.concatenate([np.random.default_rng(1).poisson(0.5, 600) / 60, np.zeros(20)])
    chain = FallbackChain([Persistence()]).fit(TrafficSeries(values, 60, DAY0))
    assert chain.predict(1).mean[0] == 0.0


def test_use_before_fit_and_empty_chain() -> None:
    with pytest.raises(ValueError, match="at least one model"):
        FallbackChain([])
    with pytest.raises(NotFittedError):
        FallbackChain([Persistence()]).predict(1)


def test_min_history_is_the_least_demanding_member() -> None:
    assert FallbackChain([HoltWinters(), SeasonalNaive(), Persistence()]).min_history(60) == 1
    assert FallbackChain([HoltWinters(), SeasonalNaive()]).min_history(600) == 144


def test_chain_state_round_trips_with_its_notes() -> None:
    chain = FallbackChain([HoltWinters(), SeasonalNaive(), Persistence()])
    chain.fit(daily(1.5, 600, seed=3))
    state = json.loads(json.dumps(chain.to_state(), allow_nan=False))
    restored = from_state(state)
    assert isinstance(restored, FallbackChain)
    new = TrafficSeries(np.array([5.0, 0.0, 6.0]), 600, daily(1.5, 600).end)
    a, b = chain.update(new).predict(24), restored.update(new).predict(24)
    assert a.model == b.model == "seasonal_naive"
    assert a.fallbacks == b.fallbacks == ("holt_winters: needs 288 bins, has 216",)
    assert np.array_equal(a.mean, b.mean)
    assert all(np.array_equal(a.quantiles[k], b.quantiles[k]) for k in a.quantiles)


@settings(max_examples=30, deadline=None)
@given(
    values=st.lists(
        st.one_of(st.just(math.nan), st.floats(min_value=0, max_value=1e4, allow_nan=False)), min_size=1, max_size=400
    ).filter(lambda v: any(not math.isnan(x) for x in v)),
    h=st.integers(min_value=1, max_value=40),
)
def test_a_registry_chain_always_forecasts_and_explains_short_history(values: list[float], h: int) -> None:
    series = TrafficSeries(np.array(values), 600, DAY0)
    chain = make_chain("holt_winters")
    try:
        chain.fit(series)
    except InsufficientHistoryError:
        # only possible when cleaning removed every observation (all of them implausible zeros)
        assert not np.isfinite(prepare(series).values).any()
        return
    fc = chain.predict(h)
    check_forecast(fc, h)
    observed = int(np.isfinite(prepare(series).values).sum())
    if observed < 288:
        assert fc.fallbacks[0] == f"holt_winters: needs 288 bins, has {observed}"
    assert fc.model in {"holt_winters", "seasonal_naive", "persistence"}
