"""Behaviour of the default forecaster: accuracy where the answer is known, calibrated bands,
messy input (gaps, outages, constants, zeros, short and 10-minute series), exact update and
persistence semantics."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from models.base import Forecaster, InsufficientHistoryError, NotFittedError
from models.default import LONG_HALF_LIFE_SECONDS, SCALAR_UPDATE_BINS, DefaultForecaster, horizon_steps
from models.types import SECONDS_PER_DAY, TrafficSeries

MIN = 60
DAY = SECONDS_PER_DAY // MIN  # 1-minute bins per day
START = 1_700_000_000 - 1_700_000_000 % SECONDS_PER_DAY  # a UTC midnight


def daily_mean(n: int, base: float, amp: float, step: int = MIN, start: int = START) -> np.ndarray:
    """Expected requests per bin of a sinusoidal daily cycle."""
    t = start + step * np.arange(n)
    return base * (1.0 + amp * np.sin(2 * np.pi * (t % SECONDS_PER_DAY) / SECONDS_PER_DAY))


def poisson_series(mean_counts: np.ndarray, seed: int, step: int = MIN, start: int = START) -> TrafficSeries:
    counts = np.random.default_rng(seed).poisson(mean_counts).astype(np.float64)
    return TrafficSeries(counts / step, step, start)


def rolling_step_h(
    model: DefaultForecaster, series: TrafficSeries, train: int, h: int, levels: tuple[int, ...]
) -> tuple[np.ndarray, dict[int, np.ndarray], np.ndarray]:
    """Fit on ``train`` bins, then update bin by bin; the step-h point and bands at every origin."""
    model.fit(series.head(train))
    points: list[float] = []
    bands: dict[int, list[float]] = {p: [] for p in levels}
    targets: list[int] = []
    for o in range(train, len(series) - h + 1):
        if o > train:
            model.update(series.slice(o - 1, o))
        f = model.predict(h, levels)
        assert f.start == series.start + o * series.step_seconds
        points.append(f.mean[h - 1])
        for p in levels:
            bands[p].append(f.band(p)[h - 1])
        targets.append(o + h - 1)
    return np.array(points), {p: np.array(v) for p, v in bands.items()}, np.array(targets)


def test_satisfies_the_forecaster_protocol() -> None:
    model = DefaultForecaster()
    assert isinstance(model, Forecaster)
    assert model.alias == "default"
    assert horizon_steps(60) == 15
    assert horizon_steps(600) == 2
    assert model.min_history(60) == 15
    assert model.min_history(600) == 3


def test_beats_persistence_and_nears_the_oracle_on_seasonal_poisson_traffic() -> None:
    # Poisson around a known daily cycle: the best possible point forecast is the true mean, whose
    # mean absolute error is the Poisson noise alone; persistence pays the noise twice (last bin
    # and target) plus 15 minutes of drift along the cycle.
    h = 15
    expected = daily_mean(5 * DAY, base=40.0, amp=0.6)
    series = poisson_series(expected, seed=1)
    point, _, targets = rolling_step_h(DefaultForecaster(), series, 4 * DAY, h, (90,))
    counts = series.values[targets] * MIN
    model_mae = np.mean(np.abs(counts - point * MIN))
    persistence_mae = np.mean(np.abs(counts - series.values[targets - h] * MIN))
    oracle_mae = np.mean(np.abs(counts - expected[targets]))
    assert model_mae < 0.8 * persistence_mae
    assert model_mae < 1.1 * oracle_mae


def test_p90_band_is_calibrated_on_poisson_traffic() -> None:
    h = 15
    series = poisson_series(daily_mean(5 * DAY, base=20.0, amp=0.5), seed=2)
    _, bands, targets = rolling_step_h(DefaultForecaster(), series, 4 * DAY, h, (50, 90, 99))
    actual = series.values[targets]
    assert 0.86 <= np.mean(actual <= bands[90]) <= 0.94
    assert np.mean(actual <= bands[99]) >= 0.97
    assert 0.4 <= np.mean(actual <= bands[50]) <= 0.7


def test_bands_are_ordered_by_level_non_negative_and_above_the_point() -> None:
    series = poisson_series(daily_mean(3 * DAY, base=5.0, amp=0.9), seed=3)
    f = DefaultForecaster().fit(series).predict(40, (10, 50, 75, 90, 95, 99))
    assert np.all(f.mean >= 0)
    for lo, hi in [(10, 50), (50, 75), (75, 90), (90, 95), (95, 99)]:
        assert np.all(f.band(lo) <= f.band(hi) + 1e-12)
    for p in (50, 75, 90, 95, 99):
        assert np.all(f.band(p) >= f.mean - 1e-12)
    # the margin over the point (in square-root count space) never shrinks with the step
    margin = np.sqrt(f.band(90) * MIN) - np.sqrt(f.mean * MIN)
    assert np.all(np.diff(margin) >= -1e-9)
    assert f.is_finite
    assert f.horizon == 40  # beyond the tuned 2h = 30 steps the band keeps growing
    assert f.band(99)[-1] > f.mean[-1]


def test_learns_the_daily_shape_when_it_pays() -> None:
    # Smooth traffic with a strong cycle: the in-sample choice must use the profile, and the
    # forecast must move along the cycle (rise during the morning ramp) rather than stay flat.
    series = poisson_series(daily_mean(4 * DAY, base=400.0, amp=0.8), seed=4)
    ramp_origin = 3 * DAY - 30  # 23:30, the cycle rises steepest around midnight
    model = DefaultForecaster().fit(series.head(ramp_origin))
    assert model.params["profile_weight"] > 0
    f = model.predict(60)  # the true mean rises 23% from 23:30 to 00:29
    assert f.mean[-1] > f.mean[0] * 1.15


def test_anticipates_a_daily_batch_job_before_it_lands() -> None:
    # 20 requests/minute, plus 200 more every day from 02:00 to 02:30: forecast from 01:50, the
    # jump must appear around the 10th step (02:00; the profile is smoothed over a few minutes),
    # not after it has happened.
    minute = np.arange(4 * DAY) % DAY
    expected = 20.0 + 200.0 * ((minute >= 120) & (minute < 150))
    series = poisson_series(expected, seed=18)
    f = DefaultForecaster().fit(series.head(3 * DAY + 110)).predict(15)
    assert np.all(f.mean[:7] * MIN < 40)
    assert np.all(f.mean[12:] * MIN > 180)
    assert np.all(f.band(90)[12:] * MIN > 200)


def test_flat_noise_picks_a_long_memory_and_no_profile() -> None:
    series = poisson_series(np.full(4 * DAY, 3.0), seed=5)
    model = DefaultForecaster().fit(series)
    assert model.params["half_life_bins"] >= 32
    f = model.predict(15)
    assert f.mean == pytest.approx(np.full(15, 3.0 / MIN), rel=0.25)


def test_constant_series_gives_that_constant_and_zero_width_bands() -> None:
    series = TrafficSeries(np.full(3 * DAY, 7.5), MIN, START)
    f = DefaultForecaster().fit(series).predict(15)
    np.testing.assert_allclose(f.mean, 7.5, rtol=1e-9)
    for p in (50, 90, 99):
        np.testing.assert_allclose(f.band(p), 7.5, rtol=1e-6)


def test_all_zero_series_gives_zeros_without_nan() -> None:
    model = DefaultForecaster().fit(TrafficSeries(np.zeros(2 * DAY), MIN, START))
    f = model.predict(15)
    assert f.is_finite
    assert np.all(f.mean == 0)
    assert all(np.all(f.band(p) == 0) for p in (50, 90, 99))
    model.update(TrafficSeries(np.zeros(5), MIN, START + 2 * DAY * MIN))
    assert model.predict(15).is_finite


def test_sparse_series_stays_finite_and_covers() -> None:
    # 80% empty minutes with bursts: no division blow-up, a band that covers most minutes.
    h = 15
    rng = np.random.default_rng(6)
    counts = np.where(rng.random(4 * DAY) < 0.2, rng.poisson(4.0, 4 * DAY), 0).astype(np.float64)
    series = TrafficSeries(counts / MIN, MIN, START)
    point, bands, targets = rolling_step_h(DefaultForecaster(), series, 3 * DAY, h, (90,))
    assert np.all(np.isfinite(point))
    assert np.all(np.isfinite(bands[90]))
    assert np.mean(series.values[targets] <= bands[90]) >= 0.85
    assert np.mean(point) == pytest.approx(np.mean(counts) / MIN, rel=0.3)


def test_nan_gaps_are_skipped_and_state_is_held() -> None:
    values = poisson_series(np.full(600, 30.0), seed=7).values.copy()
    values[100:250] = np.nan
    values[-20:] = np.nan
    model = DefaultForecaster().fit(TrafficSeries(values, MIN, START))
    before = model.predict(15)
    assert before.is_finite
    model.update(TrafficSeries(np.full(30, np.nan), MIN, START + 600 * MIN))
    after = model.predict(15)
    assert after.start == before.start + 30 * MIN
    # under a day of history there is no profile, so holding the state means the same numbers
    np.testing.assert_array_equal(after.mean, before.mean)
    np.testing.assert_array_equal(after.band(90), before.band(90))


def test_a_gap_before_an_update_counts_as_missing_bins() -> None:
    series = poisson_series(daily_mean(3 * DAY, 50.0, 0.5), seed=8)
    fitted = series.head(2 * DAY)
    new = series.slice(2 * DAY + 10, 2 * DAY + 40)
    padded = TrafficSeries(np.r_[np.full(10, np.nan), new.values], MIN, fitted.end)
    a = DefaultForecaster().fit(fitted).update(new).predict(15)
    b = DefaultForecaster().fit(fitted).update(padded).predict(15)
    np.testing.assert_array_equal(a.mean, b.mean)
    np.testing.assert_array_equal(a.band(90), b.band(90))


def test_update_rejects_misaligned_or_bad_input() -> None:
    model = DefaultForecaster().fit(poisson_series(np.full(100, 10.0), seed=9))
    end = START + 100 * MIN
    with pytest.raises(ValueError, match="must start at"):
        model.update(TrafficSeries(np.ones(3), MIN, end - MIN))
    with pytest.raises(ValueError, match="must start at"):
        model.update(TrafficSeries(np.ones(3), MIN, end + 30))
    with pytest.raises(ValueError, match="step 600s"):
        model.update(TrafficSeries(np.ones(3), 600, end))
    with pytest.raises(ValueError, match="negative or infinite"):
        model.update(TrafficSeries(np.array([1.0, -1.0]), MIN, end))
    with pytest.raises(ValueError, match="negative or infinite"):
        model.update(TrafficSeries(np.full(SCALAR_UPDATE_BINS + 1, np.inf), MIN, end))
    # a rejected update leaves the model untouched
    assert model.predict(1).start == end


def test_update_is_exact_whatever_the_chunking() -> None:
    series = poisson_series(daily_mean(3 * DAY, 80.0, 0.7), seed=10)
    n0 = 2 * DAY + 17
    new = series.slice(n0, n0 + 200)
    one_chunk = DefaultForecaster().fit(series.head(n0)).update(new)  # vectorised path
    by_bin = DefaultForecaster().fit(series.head(n0))
    for i in range(200):  # scalar path
        by_bin.update(new.slice(i, i + 1))
    mixed = DefaultForecaster().fit(series.head(n0)).update(new.slice(0, 3)).update(new.slice(3, 200))
    ref = one_chunk.predict(20, (50, 90, 99))
    for other in (by_bin, mixed):
        f = other.predict(20, (50, 90, 99))
        np.testing.assert_array_equal(f.mean, ref.mean)
        for p in (50, 90, 99):
            np.testing.assert_array_equal(f.band(p), ref.band(p))
    assert one_chunk.to_state() == by_bin.to_state()


def test_update_continues_the_fitted_filter_without_refitting() -> None:
    # Documented behaviour: update() runs the fitted filters over the new bins with the parameters
    # chosen at fit time. Under a day of history there is no profile, so the point forecast is
    # (1 - beta) * EWMA(chosen half-life) + beta * EWMA(long half-life) of all observed values,
    # which we recompute by hand.
    rng = np.random.default_rng(11)
    values = rng.poisson(25.0, 400).astype(np.float64) / MIN
    model = DefaultForecaster().fit(TrafficSeries(values[:300], MIN, START))
    fitted = ("half_life_bins", "profile_weight", "profile_smooth_seconds", "long_weight", "band_power")
    chosen = {k: model.params[k] for k in fitted}
    model.update(TrafficSeries(values[300:], MIN, START + 300 * MIN))
    assert {k: model.params[k] for k in fitted} == chosen  # no re-selection (only the self-check's errors move)
    assert model.params["persistence_weight"] == 0.0
    hl, beta = chosen["half_life_bins"], chosen["long_weight"]
    a = 0.0 if hl == 0 else 2.0 ** (-1.0 / hl)
    a_long = 2.0 ** (-MIN / LONG_HALF_LIFE_SECONDS)
    short = long = values[0] * MIN
    for v in values[1:]:
        short = (1 - a) * v * MIN + a * short
        long = (1 - a_long) * v * MIN + a_long * long
    expected = ((1 - beta) * short + beta * long) / MIN
    np.testing.assert_allclose(model.predict(15).mean, expected, rtol=1e-9)


def test_outage_zeros_do_not_drag_the_level_down() -> None:
    rng = np.random.default_rng(12)
    counts = rng.poisson(daily_mean(3 * DAY, 100.0, 0.3)).astype(np.float64)
    with_zeros, with_nan = counts.copy(), counts.copy()
    with_zeros[-30:] = 0.0  # a 30-minute collection outage that reads as zero
    with_nan[-30:] = np.nan
    outage = DefaultForecaster().fit(TrafficSeries(with_zeros / MIN, MIN, START)).predict(15, (50, 90))
    missing = DefaultForecaster().fit(TrafficSeries(with_nan / MIN, MIN, START)).predict(15, (50, 90))
    # the point reports what the metric reads while the outage lasts ...
    assert np.all(outage.mean == 0)
    # ... but the bands keep the demand it hides: the same as if the bins were simply missing
    np.testing.assert_allclose(outage.band(90), missing.band(90), rtol=0.05)
    assert np.all(outage.band(50) > 50 / MIN)
    # once data is back, the forecast starts from the pre-outage level, not from zero
    model = DefaultForecaster().fit(TrafficSeries(with_zeros / MIN, MIN, START))
    model.update(TrafficSeries(np.array([100.0 / MIN]), MIN, START + 3 * DAY * MIN))
    assert model.predict(15).mean[0] > 60 / MIN


def test_real_quiet_periods_are_not_outages() -> None:
    # A few requests per minute: an empty minute is ordinary and must lower the level.
    counts = np.r_[np.full(200, 3.0), np.zeros(100)]
    f = DefaultForecaster().fit(TrafficSeries(counts / MIN, MIN, START)).predict(15)
    assert f.mean[0] < 1.0 / MIN


def test_outage_rule_can_be_turned_off_for_non_count_series() -> None:
    # Token rates: thousands of tokens per request, so an empty minute is ordinary even though
    # the rate is high. With the rule off, empty minutes count as zero demand.
    rng = np.random.default_rng(19)
    requests = rng.poisson(1.0, 2 * DAY)
    tokens = requests * 2000.0 / MIN
    series = TrafficSeries(tokens, MIN, START)
    off = DefaultForecaster(detect_outages=False).fit(series)
    on = DefaultForecaster().fit(series)
    assert off.predict(15).mean.mean() == pytest.approx(2000.0 / MIN, rel=0.3)
    # with the rule on, the empty minutes would be skipped as outages: demand biased up
    assert on.predict(15).band(50).mean() > 1.2 * off.predict(15).band(50).mean()
    restored = DefaultForecaster.from_state(json.loads(json.dumps(off.to_state())))
    assert restored.detect_outages is False
    np.testing.assert_array_equal(restored.predict(15).mean, off.predict(15).mean)


def test_ten_minute_bins() -> None:
    step = 600
    day = SECONDS_PER_DAY // step
    expected = daily_mean(8 * day, base=5000.0, amp=0.5, step=step)
    series = poisson_series(expected, seed=13, step=step)
    h = horizon_steps(step)
    point, bands, targets = rolling_step_h(DefaultForecaster(), series, 6 * day, h, (90,))
    counts = series.values[targets] * step
    persistence = series.values[targets - h] * step
    assert np.mean(np.abs(counts - point * step)) < np.mean(np.abs(counts - persistence))
    assert 0.8 <= np.mean(series.values[targets] <= bands[90]) <= 0.98


def test_short_history() -> None:
    model = DefaultForecaster()
    with pytest.raises(InsufficientHistoryError, match="needs 15 bins"):
        model.fit(TrafficSeries(np.ones(5), MIN, START))
    with pytest.raises(InsufficientHistoryError, match="0 observed"):
        model.fit(TrafficSeries(np.full(30, np.nan), MIN, START))
    rng = np.random.default_rng(14)
    f = model.fit(TrafficSeries(rng.poisson(20.0, 20) / MIN, MIN, START)).predict(15)
    assert f.is_finite
    assert f.mean == pytest.approx(np.full(15, 20.0 / MIN), rel=0.4)
    assert np.all(f.band(90) > f.mean)


def test_json_round_trip_is_exact() -> None:
    series = poisson_series(daily_mean(3 * DAY, 60.0, 0.6), seed=15)
    model = DefaultForecaster().fit(series)
    state = model.to_state()
    restored = DefaultForecaster.from_state(json.loads(json.dumps(state, allow_nan=False)))
    assert restored.to_state() == state
    a, b = model.predict(30, (50, 90, 99)), restored.predict(30, (50, 90, 99))
    np.testing.assert_array_equal(a.mean, b.mean)
    for p in (50, 90, 99):
        np.testing.assert_array_equal(a.band(p), b.band(p))
    new = TrafficSeries(np.full(5, 1.0), MIN, series.end)
    np.testing.assert_array_equal(model.update(new).predict(15).mean, restored.update(new).predict(15).mean)


def test_from_state_rejects_foreign_or_broken_state() -> None:
    state = DefaultForecaster().fit(poisson_series(np.full(100, 10.0), seed=16)).to_state()
    with pytest.raises(ValueError, match="expected 'default'"):
        DefaultForecaster.from_state({**state, "alias": "prophet"})
    with pytest.raises(ValueError, match="malformed state"):
        DefaultForecaster.from_state({k: v for k, v in state.items() if k != "level"})
    with pytest.raises(ValueError, match="band_quantiles"):
        DefaultForecaster.from_state({**state, "band_quantiles": [[[0.0]]]})
    with pytest.raises(ValueError, match="tracked_errors"):
        DefaultForecaster.from_state({**state, "tracked_errors": [0.0]})


def test_is_deterministic_and_predict_is_pure() -> None:
    series = poisson_series(daily_mean(3 * DAY, 30.0, 0.5), seed=17)
    a, b = DefaultForecaster().fit(series), DefaultForecaster().fit(series)
    assert a.to_state() == b.to_state()
    f1, f2 = a.predict(15), a.predict(15)
    np.testing.assert_array_equal(f1.mean, f2.mean)


def test_errors_are_one_clear_line() -> None:
    model = DefaultForecaster()
    with pytest.raises(NotFittedError):
        model.predict(15)
    with pytest.raises(NotFittedError):
        model.update(TrafficSeries(np.ones(3), MIN, START))
    with pytest.raises(ValueError, match="negative rates"):
        model.fit(TrafficSeries(np.r_[np.ones(20), -1.0], MIN, START))
    model.fit(TrafficSeries(np.ones(20), MIN, START))
    with pytest.raises(ValueError, match="positive integer"):
        model.predict(0)
    with pytest.raises(ValueError, match="percentile"):
        model.predict(5, (100,))
    assert not math.isnan(model.predict(5).mean[0])


@settings(max_examples=40, deadline=None)
@given(
    values=st.lists(
        st.one_of(st.just(math.nan), st.just(0.0), st.floats(min_value=0.0, max_value=1e6)),
        min_size=15,
        max_size=400,
    ),
    new=st.lists(st.one_of(st.just(math.nan), st.floats(min_value=0.0, max_value=1e6)), max_size=40),
)
def test_any_valid_input_gives_finite_ordered_non_negative_forecasts(values: list[float], new: list[float]) -> None:
    series = TrafficSeries(np.array(values), MIN, START)
    assume(np.isfinite(series.values).any())
    model = DefaultForecaster().fit(series)
    model.update(TrafficSeries(np.array(new, dtype=np.float64), MIN, series.end))
    f = model.predict(20, (50, 90, 99))
    assert f.is_finite
    assert np.all(f.mean >= 0)
    assert np.all(f.band(50) >= f.mean * (1 - 1e-12))
    assert np.all(f.band(90) >= f.band(50) * (1 - 1e-12))
    assert np.all(f.band(99) >= f.band(90) * (1 - 1e-12))
