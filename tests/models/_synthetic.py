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
