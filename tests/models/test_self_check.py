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
from models.default import TRACK_HALF_LIFE_SECONDS, TRACK_LEN, DefaultForecaster, horizon_steps
from models.evaluation import BacktestConfig, ModelResult, backtest
from models.types import SECONDS_PER_DAY, FloatArray, TrafficSeries
from tests.models._synthetic import bursty_stream, daily, lag_day_autocorrelation, wandering

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
    assert len(whole.to_state()["tracked_errors"]) == TRACK_LEN
    # the same through an outage that reads as zero (the second block of the tracker)
    zeros = wandering(
        days=5, seed=9, gap_reads_zero=True, gap_at=(13 * 3600 + 37 * 60 + n0 * MIN + 100 * MIN) % SECONDS_PER_DAY
    )
    chunk = zeros.slice(n0, n0 + 500)
    whole = DefaultForecaster().fit(zeros.head(n0)).update(chunk)
    by_bin = DefaultForecaster().fit(zeros.head(n0))
    for i in range(len(chunk)):
        by_bin.update(chunk.slice(i, i + 1))
    assert whole.to_state() == by_bin.to_state()
    assert sum(whole.to_state()["tracked_errors"][TRACK_LEN // 2 :]) > 0.0  # forecasts made in the outage scored


def _served_and_persistence(
    series: TrafficSeries, every: int
) -> tuple[DefaultForecaster, FloatArray, FloatArray, FloatArray]:
    """Fitted on 14 days, then updated ``every`` bins at a time: the step-h points ``predict`` returned at each
    origin, the last value observed outside an outage there, and the actual (NaN where not demand)."""
    h = horizon_steps(series.step_seconds)
    demand = np.where(series.values > 0, series.values, np.nan)  # the zeros of the daily outage are not demand
    n0 = 14 * DAY
    model = DefaultForecaster().fit(series.head(n0))
    served, last, actual = [], [], []
    for o in range(n0, len(series) - h + 1, every):
        if o > n0:
            model.update(series.slice(o - every, o))
        served.append(float(model.predict(h, (90,)).mean[h - 1]))
        seen = demand[:o]
        last.append(float(seen[np.isfinite(seen)][-1]))
        actual.append(float(demand[o + h - 1]))
    return model, np.array(served), np.array(last), np.array(actual)


def test_the_tracker_ranks_what_predict_serves_across_a_daily_outage_that_reads_zero() -> None:
    # The daily gap is reported as zeros: the model serves the metric's reading as its point while the outage
    # lasts, so forecasts made in its last 15 minutes, for demand after it, are 0. The tracker used to score the
    # model's level there instead, ranked the model ahead of the last value and never moved off it, while what
    # predict returned lost to persistence. Now it scores what was served, sees the loss, and serves a mixture
    # with the last value from inside the outage: the default is no worse than persistence again.
    for seed in (4, 5):
        model, served, last, actual = _served_and_persistence(wandering(seed=seed, gap_reads_zero=True), every=15)
        ok = np.isfinite(actual)
        default_mae = np.mean(np.abs(actual[ok] - served[ok]))
        persistence_mae = np.mean(np.abs(actual[ok] - last[ok]))
        assert default_mae <= 1.00 * persistence_mae, (seed, default_mae, persistence_mae)
        # the model alone, as served (the reading inside the outage), loses, and the tracker says so
        assert model.params["tracked_mae_model"] > model.params["tracked_mae_persistence"]
        assert model.params["persistence_weight_in_outage"] > 0.0
        assert model.params["persistence_weight"] == 0.0  # outside outages the model still leads


def test_the_tracked_error_is_that_of_the_points_predict_returned() -> None:
    # Bin by bin over two days after the fit (the model alone is served throughout on this series): the tracked
    # step-h error of the model is the discounted mean error of exactly the points predict returned h bins earlier.
    series = wandering(days=16, seed=4)
    h, n0 = horizon_steps(MIN), 14 * DAY
    model = DefaultForecaster().fit(series.head(n0))
    points: list[float] = []
    sums: list[float] = []
    for i in range(n0, len(series)):
        assert model.params["persistence_weight"] == 0.0
        points.append(float(model.predict(h, (90,)).mean[h - 1]) * MIN)
        if i == n0 + h - 1:  # the bins before were scored with forecasts made inside the fit
            sums = model.to_state()["tracked_errors"]
        model.update(series.slice(i, i + 1))
    d = 2.0 ** (-MIN / TRACK_HALF_LIFE_SECONDS)
    total, count = sums[0], sums[TRACK_LEN // 2 - 1]
    for k, target in enumerate(range(n0 + h - 1, len(series))):
        a = series.values[target] * MIN
        if np.isfinite(a):
            total, count = abs(a - points[k]) + d * total, 1.0 + d * count
    np.testing.assert_allclose(model.params["tracked_mae_model"], total / count / MIN, rtol=1e-9)


def test_serves_the_last_value_where_it_wins_on_a_bursty_stream() -> None:
    # Heavy-tailed bursts (a few dwarf all the others) on a wandering base: the last value is about the best forecast
    # there. The selection's in-sample choice among its candidates (a smoothed level, a profile, a pull to the
    # six-hour level) used to lose 5% to persistence out of sample on this stream while the tracker's test, swamped
    # by the bursts' few large errors, never moved off it. The fit now keeps a choice only when it beats the last
    # value on its own window by two standard errors, so here it serves the last value from every fit.
    series = bursty_stream(seed=1)
    res = _backtest(series, every=5)
    default, persistence = res["default"], res["persistence"]
    assert default.wape <= 1.00 * persistence.wape, (default.wape, persistence.wape)
    assert 0.85 <= default.coverage <= 0.95, default.coverage
    for days in (4, 7, 9):
        model = DefaultForecaster().fit(prepare(series.head(days * DAY)))
        params = model.params
        assert (params["half_life_bins"], params["profile_weight"], params["long_weight"]) == (0.0, 0.0, 0.0)
        np.testing.assert_allclose(model.predict(15, (90,)).mean, series.values[days * DAY - 1])


def test_keeps_the_model_where_it_beats_the_last_value_by_two_standard_errors() -> None:
    # The same check must not throw away a model that earns its place: a daily cycle under Poisson noise.
    model = DefaultForecaster().fit(daily(6, MIN, low=2.0, high=20.0, seed=5))
    assert model.params["profile_weight"] > 0.0
