"""Synthetic series and forecast checks shared by the model tests (plain data, no fakes).

``daily`` builds a count process with a day/night cycle, the shape the models are for; the
others are the awkward inputs every model must survive.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np

from models.base import DEFAULT_LEVELS
from models.types import SECONDS_PER_DAY, Forecast, TrafficSeries

DAY0 = 1_700_006_400  # a UTC midnight, so phases line up with bins


def daily(days: float, step: int, *, low: float = 2.0, high: float = 20.0, seed: int = 0) -> TrafficSeries:
    """Poisson counts around a sinusoidal daily rate between ``low`` and ``high`` requests/s."""
    n = int(days * SECONDS_PER_DAY // step)
    t = np.arange(n) * step
    rate = low + (high - low) * 0.5 * (1 - np.cos(2 * np.pi * t / SECONDS_PER_DAY))
    counts = np.random.default_rng(seed).poisson(rate * step)
    return TrafficSeries(counts / step, step, DAY0)


def check_forecast(fc: Forecast, h: int, levels: Sequence[int] = DEFAULT_LEVELS) -> None:
    """The invariants every forecast of every model must satisfy."""
    assert fc.horizon == h
    assert fc.is_finite
    assert np.all(fc.mean >= 0)
    assert sorted(fc.quantiles) == sorted(set(levels))
    ordered = sorted(fc.quantiles)
    for lo, hi in itertools.pairwise(ordered):
        assert np.all(fc.quantiles[hi] >= fc.quantiles[lo])
    for level in ordered:
        assert np.all(fc.quantiles[level] >= 0)
        if level >= 50:
            assert np.all(fc.quantiles[level] >= fc.mean)


def same_forecast(a: Forecast, b: Forecast) -> bool:
    return (
        a.start == b.start
        and a.model == b.model
        and np.array_equal(a.mean, b.mean)
        and sorted(a.quantiles) == sorted(b.quantiles)
        and all(np.array_equal(a.quantiles[k], b.quantiles[k]) for k in a.quantiles)
    )


def wandering(
    days: float = 22,
    step: int = 60,
    *,
    mean: float = 1000.0,
    daily_amp: float = 0.1,
    drift_15min: float = 0.05,
    revert_days: float = 2.0,
    start_offset: int = 13 * 3600 + 37 * 60,
    gap_at: int = 3 * 3600 + 10 * 60,
    gap_seconds: int = 1800,
    gap_reads_zero: bool = False,
    seed: int = 0,
) -> TrafficSeries:
    """The shape of the trace on which the default model once did worse than persistence: Poisson counts per bin
    around a level that wanders over days (a log random walk, reverting over ``revert_days``), a weak daily cycle
    (``daily_amp``), a collection gap of ``gap_seconds`` at the same time every day (rows absent: NaN), and a first
    timestamp that is not a midnight (``start_offset`` after one). ``gap_reads_zero``: the daily gap is an outage
    that the metric reports as zero requests instead of absent rows."""
    rng = np.random.default_rng(seed)
    n = int(days * SECONDS_PER_DAY // step)
    start = DAY0 + start_offset
    t = start + step * np.arange(n)
    steps = rng.normal(0.0, drift_15min * np.sqrt(step / 900.0), n)
    keep = np.exp(-step / (revert_days * SECONDS_PER_DAY))
    level = np.empty(n)
    level[0] = 0.0
    for i in range(1, n):
        level[i] = keep * level[i - 1] + steps[i]
    tod = (t % SECONDS_PER_DAY) / SECONDS_PER_DAY
    rate = mean * np.exp(level) * (1.0 + daily_amp * np.sin(2 * np.pi * (tod - 0.3)))
    counts = rng.poisson(rate * step / 60.0).astype(np.float64)
    sec = t % SECONDS_PER_DAY
    counts[(sec >= gap_at) & (sec < gap_at + gap_seconds)] = 0.0 if gap_reads_zero else np.nan
    return TrafficSeries(counts / step, step, int(start))


def lag_day_autocorrelation(series: TrafficSeries) -> float:
    """Correlation of each observed bin with the bin one day earlier."""
    x = series.values
    p = SECONDS_PER_DAY // series.step_seconds
    a, b = x[:-p], x[p:]
    ok = np.isfinite(a) & np.isfinite(b)
    return float(np.corrcoef(a[ok], b[ok])[0, 1])


def bursty_stream(
    days: float = 10,
    step: int = 60,
    *,
    base: float = 2.0,
    bursts_per_day: float = 20.0,
    tail: float = 0.8,
    decay_minutes: float = 20.0,
    seed: int = 0,
) -> TrafficSeries:
    """A social-stream-like series: Poisson arrivals around a slowly wandering base rate (requests/s) with a weak
    daily cycle, plus bursts at Poisson times that multiply the rate by ``1 + size``, ``size`` Pareto with tail
    index ``tail`` (below 1: a few bursts dwarf all the others; capped at 200), each decaying exponentially over
    about ``decay_minutes``."""
    rng = np.random.default_rng(seed)
    n = int(days * SECONDS_PER_DAY // step)
    t = DAY0 + step * np.arange(n)
    keep = np.exp(-step / (0.5 * SECONDS_PER_DAY))
    walk = np.empty(n)
    walk[0] = 0.0
    shocks = rng.normal(0.0, 0.03 * np.sqrt(step / 60), n)
    for i in range(1, n):
        walk[i] = keep * walk[i - 1] + shocks[i]
    rate = base * np.exp(walk) * (1.0 + 0.3 * np.sin(2 * np.pi * ((t % SECONDS_PER_DAY) / SECONDS_PER_DAY - 0.3)))
    k = rng.poisson(bursts_per_day * days)
    onsets = rng.integers(0, n, k)
    sizes = np.minimum(rng.pareto(tail, k) + 1.0, 200.0)
    decays = np.maximum(rng.exponential(decay_minutes, k), 1.0) * 60 / step
    factor = np.ones(n)
    for onset, size, decay in zip(onsets.tolist(), sizes.tolist(), decays.tolist(), strict=True):
        end = min(n, onset + int(10 * decay) + 1)
        factor[onset:end] += size * np.exp(-np.arange(end - onset) / decay)
    counts = rng.poisson(rate * factor * step).astype(np.float64)
    return TrafficSeries(counts / step, step, DAY0)


def calm_then_volatile(
    days: float = 14,
    step: int = 600,
    *,
    per_minute: float = 400.0,
    drift_15min: tuple[float, float] = (0.03, 0.12),
    gap_at: int = 3 * 3600 + 10 * 60,
    seed: int = 0,
) -> TrafficSeries:
    """LLM serving without a daily cycle at coarse bins: Poisson counts around a level that wanders (a log random walk
    reverting over a day) with a 15-minute volatility of ``drift_15min[0]`` for the first half of the span and
    ``drift_15min[1]`` after, and a daily 30-minute collection outage that the metric reports as zeros."""
    rng = np.random.default_rng(seed)
    n = int(days * SECONDS_PER_DAY // step)
    start = DAY0 + 13 * 3600 + 37 * 60
    keep = np.exp(-step / SECONDS_PER_DAY)
    sd = np.where(np.arange(n) < n // 2, drift_15min[0], drift_15min[1]) * np.sqrt(step / 900.0)
    shocks = rng.normal(0.0, 1.0, n) * sd
    level = np.empty(n)
    level[0] = 0.0
    for i in range(1, n):
        level[i] = keep * level[i - 1] + shocks[i]
    counts = rng.poisson(per_minute * step / 60.0 * np.exp(level)).astype(np.float64)
    sec = (start + step * np.arange(n)) % SECONDS_PER_DAY
    counts[(sec >= gap_at) & (sec < gap_at + 1800)] = 0.0
    return TrafficSeries(counts / step, step, start)
