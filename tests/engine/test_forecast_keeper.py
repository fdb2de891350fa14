"""The forecast keeper's cadence for a Deployment seen for the first time: refitted as its history doubles, then daily.

Why: a model fitted on a Deployment's first minutes would otherwise forecast its whole first day; the controller and
the simulator share this rule through ``ForecastKeeper`` (the sameness test holds them to it).
"""

from __future__ import annotations

import itertools

import numpy as np

from autoscaler.engine.forecasting import ForecastKeeper, has_evidence
from models.naive import Persistence
from models.types import SECONDS_PER_DAY, TrafficSeries

STEP = 60
START = 1_700_000_000


def history_at(now: int, first_observed: int = START) -> TrafficSeries:
    """The bins ended by ``now`` from ``START``, missing before ``first_observed`` (metrics not yet there)."""
    n = (now - START) // STEP
    times = START + STEP * np.arange(n)
    values = np.where(times >= first_observed, 5.0 + (np.arange(n) % 7), np.nan)
    return TrafficSeries(values, STEP, START)


def fit_times(keeper: ForecastKeeper, first_observed: int, until: int) -> list[int]:
    fits: list[int] = []
    for now in range(START + 2 * STEP, until, STEP):
        history, before = history_at(now, first_observed), keeper.fits
        if not has_evidence(history):  # as ``forecast`` does: nothing to fit before the first observed bin
            continue
        keeper.advance(history, now)
        if keeper.fits > before:
            fits.append(now)
    return fits


def test_a_young_history_is_refitted_each_time_it_doubles_then_daily() -> None:
    keeper = ForecastKeeper(Persistence)
    fits = fit_times(keeper, START, START + 3 * SECONDS_PER_DAY)

    settled = [(t - START) // STEP - 1 for t in fits]  # settled bins the model was fitted on
    young = [n for n in settled if n * STEP < SECONDS_PER_DAY]
    assert young == [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]
    later = [t for t in fits if (t - START) // STEP - 1 >= SECONDS_PER_DAY // STEP]
    assert later, "fitted again once the history reached a day"
    assert all(b - a == SECONDS_PER_DAY for a, b in itertools.pairwise(later)), "then daily"


def test_doubling_counts_observed_history_not_the_missing_bins_before_it() -> None:
    first = START + 6 * 3600  # the Deployment's metrics begin six hours into the window
    fits = fit_times(ForecastKeeper(Persistence), first, first + 4 * 3600)
    observed = [(t - first) // STEP - 1 for t in fits]
    assert observed[:4] == [1, 2, 4, 8]
