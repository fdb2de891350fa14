"""Messy-series handling: junk values, outage zeros vs real quiet, counters with resets and gaps."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from models import clean
from models.clean import _window_quantile, continuation, counter_to_rate, outage_mask, prepare, prepare_tail
from models.types import TrafficSeries
from tests.models._synthetic import DAY0, daily
from tests.shared import require_shared


def _load(name: str) -> TrafficSeries:
    from autoscaler.traces import load_trace  # tests may use the loader; models/ may not

    require_shared("traces")  # one reason for every trace when ../shared is absent
    return load_trace(require_shared("traces", name)).requests


def test_prepare_turns_junk_into_missing() -> None:
    values = np.array([1.0, math.inf, -2.0, -math.inf, math.nan, 3.0])
    out = prepare(TrafficSeries(values, 60, DAY0))
    assert np.array_equal(np.isnan(out.values), [False, True, True, True, True, False])
    assert out.start == DAY0
    assert out.step_seconds == 60
    assert np.isinf(values[1])  # the input is not modified


def test_outage_zeros_in_busy_traffic_are_marked() -> None:
    series = daily(2, 60, low=5, high=50, seed=1)
    values = series.values.copy()
    values[1000:1240] = 0.0  # a four-hour collection outage
    values[2000] = 0.002 * values[1999]  # a near-zero partial bin
    marked = outage_mask(TrafficSeries(values, 60, DAY0))
    assert marked[1000:1240].all()
    assert marked[2000]
    assert marked.sum() == 241


@pytest.mark.parametrize(
    ("rate", "step", "marked"),
    [
        (0.02, 60, False),  # 1.2 requests a minute: an empty minute is ordinary (P = 0.3)
        (0.2, 60, False),  # 12 a minute: P(0) = 6e-6, not below 1e-6
        (1.0, 60, True),  # 60 a minute: P(0) = 1e-26
        (0.01, 600, False),  # 6 per 10 minutes
        (0.1, 600, True),  # 60 per 10 minutes
    ],
)
def test_zero_is_an_outage_only_when_implausible_at_the_local_rate(rate: float, step: int, marked: bool) -> None:
    n = 86_400 // step
    counts = np.random.default_rng(0).poisson(rate * step, n).astype(np.float64)
    counts[n // 2] = 0.0
    mask = outage_mask(TrafficSeries(counts / step, step, DAY0))
    assert bool(mask[n // 2]) is marked


def test_a_dip_that_is_not_near_zero_is_kept() -> None:
    values = np.full(600, 100.0)
    values[300:310] = 50.0
    assert not outage_mask(TrafficSeries(values, 60, DAY0)).any()


def test_bursty_traffic_keeps_its_empty_minutes() -> None:
    """Bursts with real gaps between them are overdispersed: a zero there is no outage."""
    rng = np.random.default_rng(2)
    counts = np.where(rng.random(720) < 0.7, rng.poisson(300, 720), 0).astype(np.float64)
    assert not outage_mask(TrafficSeries(counts / 60, 60, DAY0)).any()


def test_sparse_series_stays_untouched() -> None:
    rng = np.random.default_rng(3)
    counts = rng.poisson(0.4, 5000).astype(np.float64)  # 67% empty minutes
    series = TrafficSeries(counts / 60, 60, DAY0)
    assert np.array_equal(prepare(series).values, series.values)


@pytest.mark.parametrize(("fraction", "p_max", "message"), [(0.0, 1e-6, "fraction"), (0.05, 1.5, "p_max")])
def test_bad_thresholds_are_rejected(fraction: float, p_max: float, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        outage_mask(TrafficSeries(np.ones(10), 60, DAY0), fraction=fraction, p_max=p_max)


@pytest.mark.parametrize(
    ("trace", "documented"),
    [
        ("servegen_m_mid_10min.csv", 102),  # SOURCES.md: 102 near-zero outage bins
        ("servegen_m_small_10min.csv", 37),  # SOURCES.md: 37
        ("alibaba_gentd26_lora_diffusion_1min.csv", 0),  # 70% empty minutes, all real
    ],
)
def test_real_traces_match_their_documented_outages(trace: str, documented: int) -> None:
    series = _load(trace)
    mask = outage_mask(series)
    assert int(mask.sum()) == documented
    median = np.nanmedian(series.values)
    if documented:
        assert np.all(series.values[mask] < 0.05 * median)


def test_counter_to_rate_steady_counter() -> None:
    t = DAY0 + 60 * np.arange(5)
    out = counter_to_rate(t, [0, 60, 120, 180, 240])
    assert out.step_seconds == 60
    assert out.start == DAY0
    assert np.array_equal(out.values, [1.0, 1.0, 1.0, 1.0])


def test_counter_reset_counts_the_new_value_as_the_increase() -> None:
    out = counter_to_rate([0, 60, 120, 180], [1000, 1600, 30, 630])
    assert np.array_equal(out.values, [10.0, 0.5, 10.0])


@pytest.mark.parametrize(
    ("timestamps", "counters", "expected"),
    [
        ([0, 60, 240], [0, 60, 240], [1.0, 1.0, 1.0, 1.0]),  # 3-bin gap bridged with the average
        ([0, 60, 480], [0, 60, 480], [1.0] + [math.nan] * 7),  # 7-bin gap: too long, missing
        ([0, 60, 120, 180], [0, 60, math.nan, 180], [1.0, 1.0, 1.0]),  # a missed scrape
    ],
)
def test_counter_gaps(timestamps: list[int], counters: list[float], expected: list[float]) -> None:
    out = counter_to_rate(timestamps, counters, max_gap_bins=5)
    np.testing.assert_array_equal(out.values, expected)


@pytest.mark.parametrize(
    ("timestamps", "counters", "message"),
    [
        ([0, 60], [1.0], "equal length"),
        ([60, 0], [1.0, 2.0], "strictly increasing"),
        ([0, 60, 90], [1.0, 2.0, 3.0], "grid"),
        ([0, 60], [1.0, -2.0], ">= 0"),
        ([0], [1.0], "at least two"),
        ([0.5, 60], [1.0, 2.0], "whole numbers"),
    ],
)
def test_counter_bad_input_is_named(timestamps: list[float], counters: list[float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        counter_to_rate(timestamps, counters, step_seconds=60 if message == "grid" else None)


def test_continuation_pads_a_gap_and_sanitizes() -> None:
    new = TrafficSeries(np.array([1.0, -1.0]), 60, DAY0 + 180)
    out = continuation(DAY0 + 60, 60, new)
    np.testing.assert_array_equal(out, [math.nan, math.nan, 1.0, math.nan])


@settings(max_examples=60, deadline=None)
@given(
    context=st.lists(st.one_of(st.floats(0, 50), st.just(float("nan"))), min_size=0, max_size=400),
    new=st.lists(st.one_of(st.floats(0, 50), st.just(0.0), st.just(float("nan"))), min_size=1, max_size=30),
    step=st.sampled_from([60, 600]),
)
def test_prepare_tail_equals_the_full_pass(context: list[float], new: list[float], step: int) -> None:
    ctx, fresh = np.asarray(context, dtype=float), np.asarray(new, dtype=float)
    full = prepare(TrafficSeries(np.concatenate([ctx, fresh]), step, 0)).values[-len(fresh) :]
    np.testing.assert_array_equal(prepare_tail(ctx, fresh, step, 0), full)


def test_prepare_tail_marks_an_outage_in_the_new_bins() -> None:
    rng = np.random.default_rng(3)
    ctx = rng.poisson(3000, 360).astype(float) / 60
    fresh = np.array([0.0, 0.0, 50.0])
    out = prepare_tail(ctx, fresh, 60, 0)
    assert np.isnan(out[:2]).all()
    assert out[2] == 50.0


@settings(max_examples=60, deadline=None)
@given(
    values=st.lists(st.one_of(st.none(), st.floats(0, 1000, allow_nan=False)), min_size=1, max_size=80),
    half=st.integers(1, 12),
    q=st.sampled_from([0.5, 0.75]),
    data=st.data(),
)
def test_the_per_bin_window_quantile_is_pandas_rolling_at_those_bins(
    values: list[float | None], half: int, q: float, data: st.DataObject,
) -> None:
    # outage_mask looks at the few bins that could be outages instead of rolling over the whole series; it must
    # not decide differently from the rolling pass it replaces (gaps, edges and min_periods included)
    x = np.array([math.nan if v is None else v for v in values])
    min_periods = data.draw(st.integers(1, 2 * half + 1))
    idx = np.array(sorted(data.draw(st.sets(st.integers(0, x.size - 1), min_size=1))), dtype=np.intp)
    rolling = pd.Series(x).rolling(2 * half + 1, center=True, min_periods=min_periods)
    expected = (rolling.median() if q == 0.5 else rolling.quantile(q)).to_numpy()[idx]
    got = _window_quantile(x, idx, half, min_periods, q)
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=0, equal_nan=True)


def test_outages_found_bin_by_bin_are_the_rolling_pass_outages() -> None:
    # the same series through both paths: the targeted one (few possible outages) and the rolling one (forced by a
    # budget of zero), with outages of several lengths and a gap
    values = daily(7, 60, seed=3).values.copy()
    outages = ((2000, 1), (4000, 5), (6100, 90), (8000, 240))
    for start, length in outages:
        values[start:start + length] = 0.0
    values[9000:9030] = np.nan
    series = TrafficSeries(values, 60, DAY0)
    targeted = outage_mask(series)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(clean, "TARGETED_VALUES_PER_BIN", 0)
        rolled = outage_mask(series)
    np.testing.assert_array_equal(targeted, rolled)
    for start, length in outages:
        assert targeted[start:start + length].all()
