"""Rolling-origin backtest: known answers, no look-ahead, and the scoring alignment.

The forecasters here are small real implementations of the ``Forecaster`` protocol (a last-value
model, an oracle that knows the true series, a spy that records what it was shown), so every
expected number can be worked out by hand.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Self

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from models.base import DEFAULT_LEVELS, Forecaster, InsufficientHistoryError
from models.evaluation import BacktestConfig, ModelResult, backtest, rolling_origin, score
from models.types import Forecast, TrafficSeries


class LastValue:
    """Persistence: the last non-NaN value, flat; the band is ``(1 + spread)`` times it."""

    alias = "last_value"

    def __init__(self, spread: float = 0.0, need: int = 1) -> None:
        self.spread = spread
        self.need = need
        self.last = math.nan
        self.end = 0
        self.step = 0

    def min_history(self, step_seconds: int) -> int:
        return self.need

    def _absorb(self, series: TrafficSeries) -> None:
        finite = series.values[~np.isnan(series.values)]
        if finite.size:
            self.last = float(finite[-1])
        self.end = series.end
        self.step = series.step_seconds

    def fit(self, series: TrafficSeries) -> Self:
        self._absorb(series)
        return self

    def update(self, new: TrafficSeries) -> Self:
        assert new.start == self.end, "update must continue where the model left off"
        self._absorb(new)
        return self

    def predict(self, h: int, levels: Sequence[int] = DEFAULT_LEVELS) -> Forecast:
        mean = np.full(h, self.last)
        return Forecast(self.end, self.step, mean, {lv: mean * (1 + self.spread) for lv in levels}, self.alias)

    def to_state(self) -> dict[str, Any]:
        return {"last": self.last, "end": self.end, "step": self.step}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> Self:
        model = cls()
        model.last, model.end, model.step = state["last"], state["end"], state["step"]
        return model


class Oracle(LastValue):
    """Knows the whole true series (by closure, not from the engine): perfect if scored aligned."""

    alias = "oracle"

    def __init__(self, truth: TrafficSeries, fallback_note: str | None = None) -> None:
        super().__init__()
        self.truth = truth
        self.note = fallback_note

    def predict(self, h: int, levels: Sequence[int] = DEFAULT_LEVELS) -> Forecast:
        i = (self.end - self.truth.start) // self.truth.step_seconds
        mean = self.truth.values[i : i + h].copy()
        notes = (self.note,) if self.note else ()
        return Forecast(self.end, self.step, mean, {lv: mean for lv in levels}, self.alias, notes)


class Spy(LastValue):
    """Records the end of every series it was shown and the start of every forecast asked of it."""

    alias = "spy"

    def __init__(self, log: list[tuple[str, int]]) -> None:
        super().__init__()
        self.log = log

    def fit(self, series: TrafficSeries) -> Self:
        self.log.append(("fit", series.end))
        return super().fit(series)

    def update(self, new: TrafficSeries) -> Self:
        self.log.append(("update", new.end))
        return super().update(new)

    def predict(self, h: int, levels: Sequence[int] = DEFAULT_LEVELS) -> Forecast:
        self.log.append(("predict", self.end))
        return super().predict(h, levels)


def ramp(n: int, step: int = 60, start: int = 1_000) -> TrafficSeries:
    return TrafficSeries(np.arange(1, n + 1, dtype=np.float64), step, start)


def test_protocol_doubles_are_forecasters() -> None:
    assert isinstance(LastValue(), Forecaster)


def test_persistence_on_a_ramp_matches_hand_computation() -> None:
    # values 1..10; first origin 2, horizon 3 -> origins 2..7, each scores bin o+2 (actual o+3)
    # against the last seen value (o): error 3 each, actuals 5..10 sum to 45.
    cfg = BacktestConfig(horizon_steps=3, refit_every_steps=100, min_train_steps=2)
    result = rolling_origin(ramp(10), LastValue, cfg)
    assert result.n_forecasts == 6
    assert result.n_fits == 1  # so every later origin relied on update() to see the new bins
    assert result.wape == pytest.approx(18 / 45)
    assert result.bias == pytest.approx(-18 / 45)
    assert result.coverage == 0.0
    # pinball at q=0.9 of an upper band 3 below every actual: 0.9*3 per point, over mean actual 7.5
    assert result.pinball == pytest.approx(0.9 * 3 / 7.5)
    assert result.actual.tolist() == [5, 6, 7, 8, 9, 10]
    assert result.point.tolist() == [2, 3, 4, 5, 6, 7]
    assert result.target_timestamps.tolist() == [1_000 + 60 * b for b in range(4, 10)]
    assert result.fallbacks == 0


@pytest.mark.parametrize(
    ("origin_every", "refit_every", "expected_origins", "expected_fits"),
    [
        (1, 1, [2, 3, 4, 5, 6, 7], 6),
        (1, 3, [2, 3, 4, 5, 6, 7], 2),  # refits at 2 and 5
        (2, 3, [2, 4, 6], 2),  # refits at 2 and 6 (first origin >= 3 steps after the last fit)
        (5, 1, [2, 7], 2),
    ],
)
def test_origin_and_refit_cadence(
    origin_every: int, refit_every: int, expected_origins: list[int], expected_fits: int
) -> None:
    cfg = BacktestConfig(
        horizon_steps=3, refit_every_steps=refit_every, origin_every_steps=origin_every, min_train_steps=2
    )
    result = rolling_origin(ramp(10), LastValue, cfg)
    assert result.n_fits == expected_fits
    assert result.actual.tolist() == [o + 3 for o in expected_origins]
    # persistence stays exactly h behind whatever the cadence, because update() fills the gaps
    assert result.wape == pytest.approx(3 * len(expected_origins) / sum(o + 3 for o in expected_origins))


def test_no_look_ahead_and_windowed_fits() -> None:
    series = ramp(50)
    log: list[tuple[str, int]] = []
    cfg = BacktestConfig(
        horizon_steps=4, refit_every_steps=7, origin_every_steps=3, min_train_steps=10, history_window_steps=8
    )
    rolling_origin(series, lambda: Spy(log), cfg)
    horizon_seen = 0
    for event, end in log:
        if event == "predict":
            # the forecast is asked exactly at the end of what the model saw: the origin
            horizon_seen = end
        else:
            assert end > horizon_seen  # data only moves forward
    origins = [end for event, end in log if event == "predict"]
    assert origins == [series.start + 60 * o for o in range(10, 47, 3)]
    # every series shown ends at an origin; nothing past it is ever handed over
    shown = [end for event, end in log if event != "predict"]
    assert set(shown) <= set(origins)


def test_fit_window_is_bounded() -> None:
    seen: list[int] = []

    class Counting(LastValue):
        def fit(self, series: TrafficSeries) -> Self:
            seen.append(len(series))
            return super().fit(series)

    cfg = BacktestConfig(
        horizon_steps=1, refit_every_steps=5, min_train_steps=3, history_window_steps=6, origin_every_steps=1
    )
    rolling_origin(ramp(30), Counting, cfg)
    assert seen[0] == 3
    assert max(seen) == 6
    assert seen[-1] == 6


def test_a_model_that_loses_track_of_time_is_rejected() -> None:
    class Stale(LastValue):
        def update(self, new: TrafficSeries) -> Self:
            return self  # forgets to advance: its forecast would start in the past

    cfg = BacktestConfig(horizon_steps=2, refit_every_steps=10, min_train_steps=3)
    with pytest.raises(ValueError, match="starts at"):
        rolling_origin(ramp(20), Stale, cfg)


@settings(max_examples=60, deadline=None)
@given(
    values=st.lists(st.floats(0.0, 1e4, allow_nan=False), min_size=8, max_size=80),
    h=st.integers(1, 5),
    origin_every=st.integers(1, 4),
    refit_every=st.integers(1, 9),
    level=st.integers(1, 99),
)
def test_oracle_scores_perfectly(values: list[float], h: int, origin_every: int, refit_every: int, level: int) -> None:
    values[-1] += 1.0  # at least one positive actual so the ratios are defined
    truth = TrafficSeries(np.asarray(values), 30, 5_000)
    cfg = BacktestConfig(horizon_steps=h, refit_every_steps=refit_every, origin_every_steps=origin_every, level=level)
    result = rolling_origin(truth, lambda: Oracle(truth), cfg)
    scored = [o + h - 1 for o in cfg.resolved(truth, [LastValue()]).origins(len(truth))]
    assert result.n_forecasts == len(scored)
    assert result.actual.tolist() == [values[b] for b in scored]
    if result.actual.sum() > 0:
        assert result.wape == 0.0
        assert result.bias == 0.0
        assert result.pinball == 0.0
    assert result.coverage == 1.0


@settings(max_examples=40, deadline=None)
@given(
    values=st.lists(st.floats(0.1, 1e3, allow_nan=False), min_size=10, max_size=60),
    h=st.integers(1, 4),
    spread=st.floats(0.0, 2.0),
)
def test_metrics_agree_with_their_definitions(values: list[float], h: int, spread: float) -> None:
    series = TrafficSeries(np.asarray(values), 60)
    cfg = BacktestConfig(horizon_steps=h, refit_every_steps=3, level=80)
    r = rolling_origin(series, lambda: LastValue(spread), cfg)
    a, p, u = r.actual, r.point, r.upper
    np.testing.assert_allclose(u, p * (1 + spread))
    assert r.wape == pytest.approx(np.abs(a - p).sum() / a.sum())
    assert r.bias == pytest.approx((p.sum() - a.sum()) / a.sum())
    assert r.coverage == pytest.approx(np.mean(a <= u))
    loss = [0.8 * (x - q) if x >= q else 0.2 * (q - x) for x, q in zip(a, u, strict=True)]
    assert r.pinball == pytest.approx(np.mean(loss) / np.mean(a))
    assert 0.0 <= r.coverage <= 1.0
    assert r.wape >= 0.0
    assert r.pinball >= 0.0


def test_nan_actuals_are_skipped_and_nan_history_is_tolerated() -> None:
    values = np.arange(1, 21, dtype=np.float64)
    values[[6, 11, 12]] = np.nan
    series = TrafficSeries(values, 60)
    cfg = BacktestConfig(horizon_steps=1, refit_every_steps=100, min_train_steps=4)
    r = rolling_origin(series, LastValue, cfg)
    # origins 4..19 score bins 4..19, three of which are missing
    assert r.n_forecasts == 16 - 3
    assert not np.isnan(r.actual).any()
    # after the gap at 11-12, persistence carries 11's predecessor (bin 10 = 11.0) forward
    assert r.point[r.actual.tolist().index(14.0)] == 11.0


def test_fallbacks_are_counted() -> None:
    truth = ramp(30)
    cfg = BacktestConfig(horizon_steps=2, refit_every_steps=5, min_train_steps=5)
    r = rolling_origin(truth, lambda: Oracle(truth, "primary: needs 100 bins, has 5"), cfg)
    assert r.fallbacks == r.n_forecasts == 24
    assert r.fallback_reasons == ("primary: needs 100 bins, has 5",)
    assert rolling_origin(truth, lambda: Oracle(truth), cfg).fallbacks == 0


def test_backtest_runs_models_on_the_same_origins_and_reports_progress() -> None:
    series = ramp(40)
    ticks: list[int] = []
    cfg = BacktestConfig(horizon_steps=2, refit_every_steps=4)
    results = backtest(
        series, {"persistence": LastValue, "slow_starter": lambda: LastValue(need=25)}, cfg, ticks.append
    )
    assert list(results) == ["persistence", "slow_starter"]
    a, b = results["persistence"], results["slow_starter"]
    assert isinstance(a, ModelResult)
    assert a.name == "persistence"
    # the shared first origin is the larger need (25, above the default of half of 40 - 2): origins 25..38
    assert a.target_timestamps.tolist() == b.target_timestamps.tolist()
    assert a.n_forecasts == 38 - 25 + 1
    assert ticks == list(range(1, 2 * a.n_forecasts + 1))
    assert a.fit_seconds > 0
    assert a.predict_seconds > 0
    assert a.elapsed_seconds >= a.fit_seconds


def test_default_first_origin_is_two_days_when_the_series_allows() -> None:
    step = 600
    day = 86_400 // step
    cfg = BacktestConfig(horizon_steps=2, refit_every_steps=day)
    long = cfg.resolved(TrafficSeries(np.ones(10 * day), step), [LastValue()])
    assert long.min_train_steps == 2 * day
    assert long.history_window_steps == 14 * day
    short = cfg.resolved(TrafficSeries(np.ones(40), step), [LastValue()])
    assert short.min_train_steps == 19  # half of what the horizon leaves


@pytest.mark.parametrize(
    ("n", "kwargs", "needle"),
    [
        (10, {"horizon_steps": 15}, "too little history"),
        (20, {"horizon_steps": 5, "min_train_steps": 16}, "needs at least 21 bins"),
        (100, {"horizon_steps": 5, "min_train_steps": 3}, "shorter than the models need"),
        (100, {"horizon_steps": 5, "history_window_steps": 4}, "shorter than the models need"),
    ],
)
def test_insufficient_history_is_one_clear_line(n: int, kwargs: dict[str, int], needle: str) -> None:
    cfg = BacktestConfig(refit_every_steps=10, **kwargs)
    with pytest.raises(InsufficientHistoryError, match=needle) as info:
        cfg.resolved(TrafficSeries(np.ones(n), 60), [LastValue(need=8)])
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"horizon_steps": 0, "refit_every_steps": 1}, "horizon_steps"),
        ({"horizon_steps": 1, "refit_every_steps": 0}, "refit_every_steps"),
        ({"horizon_steps": 1, "refit_every_steps": 1, "origin_every_steps": -1}, "origin_every_steps"),
        ({"horizon_steps": 1, "refit_every_steps": 1, "level": 100}, "level"),
        ({"horizon_steps": 1, "refit_every_steps": 1, "level": 0}, "level"),
        ({"horizon_steps": 1, "refit_every_steps": 1, "min_train_steps": 0}, "min_train_steps"),
    ],
)
def test_bad_config_is_rejected(kwargs: dict[str, int], needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        BacktestConfig(**kwargs)


def test_score_of_zero_actuals_is_undefined_not_a_crash() -> None:
    zeros = np.zeros(3)
    s = score(zeros, np.ones(3), np.ones(3), 90)
    assert math.isnan(s["wape"])
    assert math.isnan(s["bias"])
    assert math.isnan(s["pinball"])
    assert s["coverage"] == 1.0


def test_separate_actuals_are_scored_while_the_model_sees_the_raw_series() -> None:
    raw = ramp(20)
    masked = raw.values.copy()
    masked[[10, 15]] = np.nan  # e.g. outage bins marked missing for scoring only
    actuals = TrafficSeries(masked, raw.step_seconds, raw.start)
    log: list[tuple[str, int]] = []
    cfg = BacktestConfig(horizon_steps=1, refit_every_steps=100, min_train_steps=5)
    r = rolling_origin(raw, lambda: Spy(log), cfg, actuals=actuals)
    assert r.n_forecasts == 15 - 2
    assert 11.0 not in r.actual.tolist()
    # bin 15 (value 16) is not scored, but the model saw it: at origin 16 it repeats it
    assert 16.0 not in r.actual.tolist()
    assert r.point[r.actual.tolist().index(17.0)] == 16.0
    with pytest.raises(ValueError, match="do not match"):
        rolling_origin(raw, LastValue, cfg, actuals=raw.head(10))
