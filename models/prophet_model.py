"""Prophet (daily + weekly seasonality) as a forecaster that is cheap to call every tick.

Why it exists: Prophet is what many operators already try for traffic forecasting; the backtest
has to be able to say, on their own history, how it compares with persistence and our default.

Named ``prophet_model.py``, not ``prophet.py``, so the module never shadows the
``prophet`` package in tools that put ``models/`` on ``sys.path``.

How it departs from calling Prophet directly:
- it is fitted on at most the last ``history_seconds`` (14 days) aggregated to ``agg_seconds``
  (10-minute) means: ~2,000 points, so a fit is ~0.4-1 s instead of many seconds at 1-minute
  resolution. Weekly seasonality is switched on only with at least two weeks of history (less
  cannot separate a weekday from noise); yearly is off; ``uncertainty_samples=0``.
- a fitted Prophet's mean is a deterministic function of time, so the fit caches it for
  ``cache_seconds`` (2 days) at the series' native step; ``predict`` slices the cache (extending
  it lazily from the model if a caller asks past its end) and ``update`` only advances the
  position. Prophet does not condition on recent observations, which is why it is a baseline and
  not our default.
- bands come from its in-sample errors at the native step over the last week, in sqrt space
  (``models._residuals``); they do not grow with the horizon (the error of a function of time is
  the same for every origin), except through the shared monotone-in-horizon rule. In-sample errors
  flatter Prophet when its trend extrapolation goes wrong: on ServeGen m_mid (fit on 10 days, 3
  days after, 20 minutes ahead) its p90 band covered 25% of outcomes, against 0.89 on NASA and 0.92 on
  m_small. A one-day holdout refit was tried (twice the fit cost) and was no better on balance
  (0.55 / 0.98 / 0.22), so it was dropped.
- cmdstanpy's INFO chatter is silenced for the duration of the fit; warnings are recorded in
  ``warnings`` and in the state.
- state is ``prophet.serialize.model_to_json`` plus the cache, so a restored model predicts the same
  numbers without refitting.
"""

from __future__ import annotations

import logging
import warnings as _warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Self

import numpy as np
import pandas as pd
from prophet import Prophet
from prophet.serialize import model_from_json, model_to_json

from models._residuals import (
    ErrorBands,
    IntArray,
    bands_from_path,
    check_horizon,
    check_state,
    floats_from_json,
    floats_to_json,
)
from models.base import DEFAULT_LEVELS, InsufficientHistoryError, NotFittedError
from models.clean import continuation, sanitize
from models.types import SECONDS_PER_DAY, SECONDS_PER_WEEK, FloatArray, Forecast, TrafficSeries

HISTORY_SECONDS = 14 * SECONDS_PER_DAY
AGG_SECONDS = 600
CACHE_SECONDS = 2 * SECONDS_PER_DAY
BAND_WINDOW_SECONDS = 7 * SECONDS_PER_DAY
BAND_MAX_K_SECONDS = 6 * 3600  # the error does not depend on k; a few hours of horizons suffice
_QUIET_LOGGERS = ("cmdstanpy", "prophet")


@contextmanager
def _quiet(record: list[str]) -> Iterator[None]:
    """Silence cmdstanpy/prophet INFO logs and collect warnings into ``record`` while fitting."""
    # a filter, not setLevel: cmdstanpy resets its logger's level to DEBUG on first use
    loggers = [logging.getLogger(name) for name in _QUIET_LOGGERS]
    for logger in loggers:
        logger.addFilter(_drop_info)
    try:
        with _warnings.catch_warnings(record=True) as caught:
            _warnings.simplefilter("always")
            yield
        for w in caught:
            text = f"{w.category.__name__}: {str(w.message).splitlines()[0]}"
            if text not in record:
                record.append(text)
    finally:
        for logger in loggers:
            logger.removeFilter(_drop_info)


def _drop_info(record: logging.LogRecord) -> bool:
    return record.levelno >= logging.WARNING


def _frame(timestamps: IntArray | FloatArray) -> pd.DataFrame:
    return pd.DataFrame({"ds": pd.to_datetime(timestamps, unit="s")})


class ProphetForecaster:
    """Prophet with daily (and, given two weeks, weekly) seasonality, served from a cache."""

    alias = "prophet"

    def __init__(
        self,
        *,
        history_seconds: int = HISTORY_SECONDS,
        agg_seconds: int = AGG_SECONDS,
        cache_seconds: int = CACHE_SECONDS,
    ) -> None:
        for name, value in (("history_seconds", history_seconds), ("agg_seconds", agg_seconds)):
            if value <= 0:
                raise ValueError(f"{name} must be positive, got {value}")
        if cache_seconds <= 0:
            raise ValueError(f"cache_seconds must be positive, got {cache_seconds}")
        self.history_seconds = history_seconds
        self.agg_seconds = agg_seconds
        self.cache_seconds = cache_seconds
        self.warnings: list[str] = []
        self.weekly = False
        self._model: Prophet | None = None
        self._model_json: str | None = None
        self._cache: FloatArray = np.zeros(0)
        self._cache_start = 0  # timestamp of cache[0] (the end of the fitted history)
        self._pos = 0  # bins absorbed by update() since the fit
        self._step = 0
        self._bands = ErrorBands.zero()

    def min_history(self, step_seconds: int) -> int:
        return max(2, 2 * SECONDS_PER_DAY // step_seconds)

    def _yhat(self, timestamps: IntArray) -> FloatArray:
        model = self._prophet()
        with _quiet(self.warnings):
            out = model.predict(_frame(timestamps))["yhat"].to_numpy(dtype=np.float64)
        return np.asarray(out, dtype=np.float64)

    def _prophet(self) -> Prophet:
        if self._model is None:
            if self._model_json is None:
                raise NotFittedError("prophet: used before fit()")
            with _quiet(self.warnings):
                self._model = model_from_json(self._model_json)
        return self._model

    def fit(self, series: TrafficSeries) -> Self:
        step = series.step_seconds
        values = sanitize(series.values)
        keep = max(1, self.history_seconds // step)
        start = series.start
        if values.shape[0] > keep:
            cut = values.shape[0] - keep
            values, start = values[cut:], start + cut * step
        n = values.shape[0]
        agg = max(1, self.agg_seconds // step)
        usable = (n // agg) * agg
        offset = n - usable  # aggregate whole groups ending at the last bin
        groups = values[offset:].reshape(-1, agg)
        counts = np.isfinite(groups).sum(axis=1)
        sums = np.nansum(groups, axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            means = np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)
        # a group mean is labelled at the centre of its bins, so the fitted curve is not shifted half a group
        group_ts = start + (offset + np.arange(groups.shape[0]) * agg + (agg - 1) / 2) * step
        ok = np.isfinite(means)
        if int(ok.sum()) < 2:
            have = int(ok.sum())
            raise InsufficientHistoryError(f"prophet: needs at least 2 observed {agg * step}s points, has {have}")
        self.warnings = []
        self.weekly = n * step >= 2 * SECONDS_PER_WEEK
        df = _frame(group_ts[ok])
        df["y"] = means[ok]
        model = Prophet(
            daily_seasonality=True,
            weekly_seasonality=self.weekly,
            yearly_seasonality=False,
            uncertainty_samples=0,
        )
        with _quiet(self.warnings):
            model.fit(df)
            self._model_json = model_to_json(model)
        self._model = model
        self._step = step
        self._cache_start = start + n * step
        self._pos = 0
        cache_bins = max(1, self.cache_seconds // step)
        band_bins = min(n, max(1, BAND_WINDOW_SECONDS // step))
        ts = start + np.arange(n - band_bins, n + cache_bins, dtype=np.int64) * step
        yhat = self._yhat(ts)
        fitted, self._cache = yhat[:band_bins], np.maximum(yhat[band_bins:], 0.0)
        recent = values[n - band_bins :]

        def forecast_at(origins: IntArray, ks: IntArray) -> FloatArray:
            target = origins[:, None] + ks[None, :]
            inside = target < band_bins
            out = np.full(target.shape, np.nan)
            out[inside] = fitted[target[inside]]
            return out

        max_k = max(1, min(BAND_MAX_K_SECONDS // step, band_bins // 2))
        self._bands = bands_from_path(recent, forecast_at, max_k, 0)
        return self

    def update(self, new: TrafficSeries) -> Self:
        if self._model_json is None:
            raise NotFittedError("prophet: update() before fit()")
        values = continuation(self._cache_start + self._pos * self._step, self._step, new)
        self._pos += values.shape[0]
        return self

    def predict(self, h: int, levels: Sequence[int] = DEFAULT_LEVELS) -> Forecast:
        if self._model_json is None:
            raise NotFittedError("prophet: predict() before fit()")
        h = check_horizon(h)
        need = self._pos + h
        if need > self._cache.shape[0]:
            extra = max(need - self._cache.shape[0], self.cache_seconds // self._step)
            first = self._cache.shape[0]
            ts = self._cache_start + np.arange(first, first + extra, dtype=np.int64) * self._step
            self._cache = np.concatenate([self._cache, np.maximum(self._yhat(ts), 0.0)])
        mean = self._cache[self._pos : need].copy()
        if not np.all(np.isfinite(mean)):
            raise ValueError("prophet: forecast is not finite")
        start = self._cache_start + self._pos * self._step
        return Forecast(start, self._step, mean, self._bands.apply(mean, levels), self.alias)

    def to_state(self) -> dict[str, Any]:
        if self._model_json is None:
            raise NotFittedError("prophet: to_state() before fit()")
        return {
            "model": self.alias,
            "history_seconds": self.history_seconds,
            "agg_seconds": self.agg_seconds,
            "cache_seconds": self.cache_seconds,
            "weekly": self.weekly,
            "prophet_json": self._model_json,
            "cache": floats_to_json(self._cache),
            "cache_start": self._cache_start,
            "pos": self._pos,
            "step_seconds": self._step,
            "bands": self._bands.to_state(),
            "warnings": list(self.warnings),
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> Self:
        check_state(state, cls.alias)
        try:
            model = cls(
                history_seconds=int(state["history_seconds"]),
                agg_seconds=int(state["agg_seconds"]),
                cache_seconds=int(state["cache_seconds"]),
            )
            model.weekly = bool(state["weekly"])
            model._model_json = str(state["prophet_json"])
            model._cache = floats_from_json(state["cache"])
            model._cache_start = int(state["cache_start"])
            model._pos = int(state["pos"])
            model._step = int(state["step_seconds"])
            model._bands = ErrorBands.from_state(state["bands"])
            model.warnings = [str(w) for w in state.get("warnings", [])]
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"prophet: invalid state: {exc}") from None
        return model
