"""The two baselines every forecaster must beat: persistence and seasonal naive.

Why they exist: on the project's traces, repeating the last value is the bar to beat 15-20 minutes
ahead (WAPE 0.12-0.16, see ../shared/traces/SOURCES.md), and repeating yesterday is what a
"seasonal" model degrades to. They are also the tail of every fallback chain: ``Persistence``
works from a single observation, so a Deployment with one minute of history still gets a
forecast, and it never fails except when there is no observation at all
(``InsufficientHistoryError``: forecasting 0 there would scale a live service to nothing).

Both take their bands from their own replayed k-step errors (``models._residuals``). NaN input
is missing data: persistence repeats the last *observed* value; seasonal naive keeps the latest
observed value per phase of the day and, for a phase never observed, repeats the last value.
The phase is absolute (``(timestamp // step) % season``), so fit, update and a restored state agree.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Self

import numpy as np

from models._residuals import (
    BAND_HISTORY_SECONDS,
    ErrorBands,
    IntArray,
    band_max_k,
    bands_from_path,
    check_horizon,
    check_state,
    floats_from_json,
    floats_to_json,
)
from models.base import DEFAULT_LEVELS, InsufficientHistoryError, NotFittedError
from models.clean import continuation, sanitize
from models.types import SECONDS_PER_DAY, FloatArray, Forecast, TrafficSeries


def _recent(series: TrafficSeries) -> tuple[FloatArray, int]:
    """Sanitized values of the last ``BAND_HISTORY_SECONDS`` and the start of that window."""
    keep = max(1, BAND_HISTORY_SECONDS // series.step_seconds)
    values = sanitize(series.values)
    if values.shape[0] > keep:
        cut = values.shape[0] - keep
        return values[cut:], series.start + cut * series.step_seconds
    return values, series.start


def _ffill(values: FloatArray) -> FloatArray:
    """Forward fill NaN (leading NaN stay NaN)."""
    idx = np.where(np.isfinite(values), np.arange(values.shape[0]), -1)
    idx = np.maximum.accumulate(idx)
    out = np.where(idx >= 0, values[np.maximum(idx, 0)], np.nan)
    return np.asarray(out, dtype=np.float64)


class Persistence:
    """Forecast = the last observed value, flat over the horizon."""

    alias = "persistence"

    def __init__(self) -> None:
        self._last: float | None = None
        self._step = 0
        self._end = 0
        self._bands = ErrorBands.zero()

    def min_history(self, step_seconds: int) -> int:
        return 1

    def fit(self, series: TrafficSeries) -> Self:
        values, _ = _recent(series)
        observed = np.flatnonzero(np.isfinite(values))
        if observed.size == 0:
            raise InsufficientHistoryError(f"persistence: no observed value in {len(series)} bins (all missing)")
        filled = _ffill(values)

        def forecast_at(origins: IntArray, ks: IntArray) -> FloatArray:
            return np.repeat(filled[origins][:, None], ks.shape[0], axis=1)

        self._bands = bands_from_path(
            values, forecast_at, band_max_k(values.shape[0], series.step_seconds), int(observed[0])
        )
        self._last = float(values[observed[-1]])
        self._step = series.step_seconds
        self._end = series.end
        return self

    def update(self, new: TrafficSeries) -> Self:
        if self._last is None:
            raise NotFittedError("persistence: update() before fit()")
        values = continuation(self._end, self._step, new)
        observed = np.flatnonzero(np.isfinite(values))
        if observed.size:
            self._last = float(values[observed[-1]])
        self._end = new.end
        return self

    def predict(self, h: int, levels: Sequence[int] = DEFAULT_LEVELS) -> Forecast:
        if self._last is None:
            raise NotFittedError("persistence: predict() before fit()")
        h = check_horizon(h)
        mean = np.full(h, max(self._last, 0.0))
        return Forecast(self._end, self._step, mean, self._bands.apply(mean, levels), self.alias)

    def to_state(self) -> dict[str, Any]:
        if self._last is None:
            raise NotFittedError("persistence: to_state() before fit()")
        return {
            "model": self.alias,
            "last": self._last,
            "step_seconds": self._step,
            "end": self._end,
            "bands": self._bands.to_state(),
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> Self:
        check_state(state, cls.alias)
        model = cls()
        try:
            model._last = float(state["last"])
            model._step = int(state["step_seconds"])
            model._end = int(state["end"])
            model._bands = ErrorBands.from_state(state["bands"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"persistence: invalid state: {exc}") from None
        return model


class SeasonalNaive:
    """Forecast = the value one season (a day by default) earlier."""

    alias = "seasonal_naive"

    def __init__(self, period_seconds: int = SECONDS_PER_DAY) -> None:
        if period_seconds <= 0:
            raise ValueError(f"period_seconds must be positive, got {period_seconds}")
        self.period_seconds = period_seconds
        self._buffer: FloatArray | None = None  # latest observed value per phase; NaN = never observed
        self._last = 0.0
        self._step = 0
        self._end = 0
        self._bands = ErrorBands.zero()

    def season(self, step_seconds: int) -> int:
        return max(1, self.period_seconds // step_seconds)

    def min_history(self, step_seconds: int) -> int:
        return self.season(step_seconds)

    def _phase(self, timestamp: int) -> int:
        assert self._buffer is not None
        return int((timestamp // self._step) % self._buffer.shape[0])

    def fit(self, series: TrafficSeries) -> Self:
        values, start = _recent(series)
        observed = np.flatnonzero(np.isfinite(values))
        if observed.size == 0:
            raise InsufficientHistoryError(f"seasonal_naive: no observed value in {len(series)} bins (all missing)")
        step = series.step_seconds
        m = self.season(step)
        n = values.shape[0]
        phases = (start // step + np.arange(n)) % m
        buffer = np.full(m, np.nan)
        rev = observed[::-1]
        uniq, first = np.unique(phases[rev], return_index=True)  # first in reversed order = latest
        buffer[uniq] = values[rev[first]]

        # in-sample replay: a missing bin is replaced by the value a season before (as the buffer does)
        filled = values.copy()
        for i in range(m, n):
            if not np.isfinite(filled[i]):
                filled[i] = filled[i - m]
        last_obs = _ffill(values)

        def forecast_at(origins: IntArray, ks: IntArray) -> FloatArray:
            seasons_back = -(-ks // m)  # ceil(k / m)
            src = origins[:, None] + ks[None, :] - m * seasons_back[None, :]
            out = np.where(src >= 0, filled[np.maximum(src, 0)], np.nan)
            return np.where(np.isfinite(out), out, last_obs[origins][:, None])

        self._bands = bands_from_path(values, forecast_at, band_max_k(n, step), max(m - 1, int(observed[0])))
        self._buffer = buffer
        self._last = float(values[observed[-1]])
        self._step = step
        self._end = series.end
        return self

    def update(self, new: TrafficSeries) -> Self:
        if self._buffer is None:
            raise NotFittedError("seasonal_naive: update() before fit()")
        values = continuation(self._end, self._step, new)
        t0 = new.end - values.shape[0] * self._step
        for i, v in enumerate(values):
            if np.isfinite(v):
                self._buffer[self._phase(t0 + i * self._step)] = v
                self._last = float(v)
        self._end = new.end
        return self

    def predict(self, h: int, levels: Sequence[int] = DEFAULT_LEVELS) -> Forecast:
        if self._buffer is None:
            raise NotFittedError("seasonal_naive: predict() before fit()")
        h = check_horizon(h)
        m = self._buffer.shape[0]
        phases = (self._end // self._step + np.arange(h)) % m
        mean = self._buffer[phases]
        mean = np.maximum(np.where(np.isfinite(mean), mean, self._last), 0.0)
        return Forecast(self._end, self._step, mean, self._bands.apply(mean, levels), self.alias)

    def to_state(self) -> dict[str, Any]:
        if self._buffer is None:
            raise NotFittedError("seasonal_naive: to_state() before fit()")
        return {
            "model": self.alias,
            "period_seconds": self.period_seconds,
            "buffer": floats_to_json(self._buffer),
            "last": self._last,
            "step_seconds": self._step,
            "end": self._end,
            "bands": self._bands.to_state(),
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> Self:
        check_state(state, cls.alias)
        try:
            model = cls(int(state["period_seconds"]))
            model._buffer = floats_from_json(state["buffer"])
            model._last = float(state["last"])
            model._step = int(state["step_seconds"])
            model._end = int(state["end"])
            model._bands = ErrorBands.from_state(state["bands"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"seasonal_naive: invalid state: {exc}") from None
        return model
