"""The default model's self-check: it tracks, online, its own step-h error and that of
persistence (and of mixtures of the two) and forecasts with the mixture that has been best, so it
is never meaningfully worse than the last value, and keeps its lead where the series has structure.

Known answers: on a series shaped like the trace on which the model once did worse than persistence (weak daily
cycle, a level wandering over days, a daily collection gap, timestamps not starting at midnight) the default must be
no worse than persistence at 15 minutes, with a calibrated p90 band; on strongly seasonal traffic it must stay well
ahead; when the structure it was fitted on disappears after the fit, the self-check must move the forecast to
persistence without a refit."""

from __future__ import annotations

import json

import numpy as np

from models import registry
from models.clean import prepare
from models.default import PERSISTENCE_WEIGHTS, DefaultForecaster
from models.evaluation import BacktestConfig, ModelResult, backtest
from models.types import SECONDS_PER_DAY, TrafficSeries
from tests.models._synthetic import daily, lag_day_autocorrelation, wandering

MIN = 60
DAY = SECONDS_PER_DAY // MIN


def _backtest(series: TrafficSeries, every: int) -> dict[str, ModelResult]:
    """The benchmark's protocol: 15 minutes ahead, p90, daily refit on <= 14 days, first origin at 3 days."""
    day = SECONDS_PER_DAY // series.step_seconds
    config = BacktestConfig(
        horizon_steps=max(1, -(-900 // series.step_seconds)),
        level=90,
        refit_every_steps=day,
        origin_every_steps=every,
        history_window_steps=14 * day,
        min_train_steps=3 * day,
    )
    factories = {name: (lambda name=name: registry.make_chain(name)) for name in ("default", "persistence")}
    return backtest(series, factories, config, actuals=prepare(series))


def test_the_synthetic_trace_has_the_failing_traces_shape() -> None:
    series = wandering(seed=4)
    assert len(series) == 22 * DAY
    assert series.start % SECONDS_PER_DAY != 0
    missing = ~np.isfinite(series.values)
    assert missing.sum() == 22 * 30  # 30 minutes a day, always at the same time
    assert 0.2 <= lag_day_autocorrelation(series) <= 0.45


def test_not_worse_than_persistence_on_a_weak_cycle_with_a_wandering_level_and_daily_gaps() -> None:
    for seed in (4, 5):
        res = _backtest(wandering(seed=seed), every=15)
        default, persistence = res["default"], res["persistence"]
        assert default.wape <= 1.00 * persistence.wape, (seed, default.wape, persistence.wape)
        assert 0.85 <= default.coverage <= 0.95, (seed, default.coverage)


def test_well_ahead_of_persistence_on_strongly_seasonal_traffic() -> None:
    series = daily(8, MIN, low=2.0, high=20.0, seed=3)
    res = _backtest(series, every=5)
    default, persistence = res["default"], res["persistence"]
    assert default.wape <= 0.85 * persistence.wape, (default.wape, persistence.wape)
    assert 0.85 <= default.coverage <= 0.95


def test_switches_to_persistence_when_the_fitted_structure_disappears() -> None:
    # Fitted on four days of a strong, smooth daily cycle; then the cycle stops and the level walks
    # (high counts, so the last value is nearly the best forecast). Without a refit, the self-check
    # must move the weight to persistence and end up no worse than it over the last day.
    h = 15
    fitted = daily(4, MIN, low=50.0, high=500.0, seed=7)
    rng = np.random.default_rng(8)
    walk = 300.0 * np.exp(np.cumsum(rng.normal(0.0, 0.02, 3 * DAY)))
    after = TrafficSeries(rng.poisson(walk * MIN) / MIN, MIN, fitted.end)
    model = DefaultForecaster().fit(fitted)
    assert model.params["persistence_weight"] == 0.0  # the cycle is worth following while it lasts
    points: list[float] = []
    for i in range(len(after) - h + 1):
        if i:
            model.update(after.slice(i - 1, i))
        points.append(float(model.predict(h, (90,)).mean[h - 1]))
    assert model.params["persistence_weight"] >= 0.5
    actual = after.values[h - 1 :]
    last = np.r_[fitted.values[-1], after.values[: len(after) - h]]
    tail = slice(len(points) - DAY, len(points))
    model_mae = np.mean(np.abs(actual[tail] - np.array(points)[tail]))
    persistence_mae = np.mean(np.abs(actual[tail] - last[tail]))
    assert model_mae <= 1.02 * persistence_mae
    # the tracked state survives JSON exactly and keeps tracking identically
    restored = DefaultForecaster.from_state(json.loads(json.dumps(model.to_state(), allow_nan=False)))
    assert restored.to_state() == model.to_state()
    more = TrafficSeries(np.full(3, 300.0), MIN, model.predict(1).start)
    assert restored.update(more).to_state() == model.update(more).to_state()


def test_chunked_and_bin_by_bin_updates_track_identically() -> None:
    series = wandering(days=5, seed=9)
    n0 = 3 * DAY + 7
    chunk = series.slice(n0, n0 + 500)
    whole = DefaultForecaster().fit(series.head(n0)).update(chunk)
    by_bin = DefaultForecaster().fit(series.head(n0))
    for i in range(len(chunk)):
        by_bin.update(chunk.slice(i, i + 1))
    assert whole.to_state() == by_bin.to_state()
    # a gap before an update advances the self-check's clock like missing bins
    gap = DefaultForecaster().fit(series.head(n0)).update(series.slice(n0 + 20, n0 + 40))
    padded = TrafficSeries(np.r_[np.full(20, np.nan), series.values[n0 + 20 : n0 + 40]], MIN, series.start + n0 * MIN)
    assert gap.to_state() == DefaultForecaster().fit(series.head(n0)).update(padded).to_state()
    assert len(whole.to_state()["tracked_errors"]) == 2 * len(PERSISTENCE_WEIGHTS)
