"""Rolling-origin backtest: replay a series as if each model had been running live, and score it.

Why it exists: the controller scales on a forecast made ``h`` steps ahead (the time a new GPU
replica needs to become ready), so the only accuracy that matters is the accuracy at step ``h``
of forecasts made with the data that existed at the time. Operators run this (through
``predictive-autoscaler backtest``) on their own history before trusting a model, and the
benchmarks run it on the public traces.

Semantics (one pass per model):

- Origins are bin indices ``o = first, first + origin_every, ...`` while ``o + h - 1`` is still in
  the series. At origin ``o`` the model has seen only bins ``< o``: every series handed to
  ``fit``/``update`` ends at or before the origin, and the forecast must start exactly at the
  origin (checked; a model that loses track of time raises instead of being scored misaligned).
- Step ``h`` of the forecast (bin ``o + h - 1``) is scored against the actual; origins whose
  actual is NaN (missing) are skipped without calling ``predict``. The actuals are the series
  itself unless a separate ``actuals`` series is given: the CLI passes the series with collection
  outages marked missing (``models.clean.prepare``), so a forecast of real demand is not scored
  against a zero that only means "the metrics were down"; the models still see the raw series.
- Every ``refit_every_steps`` the model is rebuilt from its factory and fitted on at most the last
  ``history_window_steps`` bins (a fresh instance, so nothing from an earlier fit leaks across).
  Between refits the bins that arrived since the previous origin are given to ``update``, as a
  live controller would do every tick.

Metrics, over scored origins (``a`` actual, ``p`` point forecast, ``u`` the ``level``% upper band):

- ``wape = sum|a - p| / sum a`` (scale-free, robust to near-zero bins, unlike MAPE);
- ``pinball``: mean pinball (quantile) loss of ``u`` at ``q = level/100``, divided by the mean
  actual so it is scale-free and comparable across traces and series (requests/s, tokens/s);
- ``coverage``: share of actuals ``<= u`` (ideal: ``level/100``);
- ``bias = (sum p - sum a) / sum a`` (negative = under-forecast = under-provisioned);
- ``fit_seconds``: mean wall time of one fit (including building the model);
  ``predict_seconds``: mean wall time per scored forecast, *including* the ``update`` calls that
  fed it the bins since the previous origin (what a live tick costs);
- ``fallbacks``: forecasts whose ``Forecast.fallbacks`` is non-empty (a fallback chain answered
  with another model than the one asked for).

When the actuals sum to zero, ratios are undefined and reported as NaN.

The default first origin is two days (Holt-Winters
needs two daily seasons), the same for every model; if a few of those bins are missing, a model
that needs two days of *observed* bins is answered by its fallback until the next refit, and the
``fallbacks`` count says so (the benchmark starts at three days for that reason).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace

import numpy as np
from numpy.typing import NDArray

from models.base import Forecaster, InsufficientHistoryError
from models.types import SECONDS_PER_DAY, FloatArray, TrafficSeries

DEFAULT_WINDOW_SECONDS = 14 * SECONDS_PER_DAY
DEFAULT_FIRST_ORIGIN_SECONDS = 2 * SECONDS_PER_DAY

Progress = Callable[[int], None]


@dataclass(frozen=True, kw_only=True)
class BacktestConfig:
    """How to replay a series. Steps are bins of the series being backtested.

    ``min_train_steps``: the first origin (bins of history before the first forecast). ``None``:
    the largest ``min_history`` of the models, and at least two days when the series is long
    enough (otherwise half of what the horizon leaves).
    ``history_window_steps``: fit on at most this many recent bins; ``None``: 14 days (or the
    models' ``min_history`` if larger).
    """

    horizon_steps: int
    refit_every_steps: int
    level: int = 90
    origin_every_steps: int = 1
    min_train_steps: int | None = None
    history_window_steps: int | None = None

    def __post_init__(self) -> None:
        for name in ("horizon_steps", "refit_every_steps", "origin_every_steps"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        for name in ("min_train_steps", "history_window_steps"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ValueError(f"{name} must be a positive integer or None, got {value!r}")
        if not isinstance(self.level, int) or not 1 <= self.level <= 99:
            raise ValueError(f"level must be an integer percentile in 1..99, got {self.level!r}")

    def resolved(self, series: TrafficSeries, models: Iterable[Forecaster]) -> BacktestConfig:
        """This config with ``None`` fields filled for ``series`` and ``models``.

        Raises ``InsufficientHistoryError`` (one line: what is needed, what there is) when the
        series cannot hold one training window plus one horizon.
        """
        step = series.step_seconds
        n, h = len(series), self.horizon_steps
        required = max([1, *(m.min_history(step) for m in models)])
        first = self.min_train_steps
        if first is None:
            preferred = max(1, DEFAULT_FIRST_ORIGIN_SECONDS // step)
            first = max(required, min(preferred, (n - h) // 2))
        elif first < required:
            raise InsufficientHistoryError(
                f"min_train_steps={first} is shorter than the models need: {required} bins ({_span(required, step)})"
            )
        need = first + h
        if n < need:
            raise InsufficientHistoryError(
                f"too little history: backtesting a {_span(h, step)} horizon needs at least {need} bins "
                f"({_span(need, step)}: {_span(first, step)} of training + the horizon), the series has {n} "
                f"({_span(n, step)})"
            )
        window = self.history_window_steps
        if window is None:
            window = max(required, DEFAULT_WINDOW_SECONDS // step)
        elif window < required:
            raise InsufficientHistoryError(
                f"history_window_steps={window} is shorter than the models need: {required} bins "
                f"({_span(required, step)})"
            )
        return replace(self, min_train_steps=first, history_window_steps=window)

    def origins(self, n_bins: int) -> range:
        """Origins of a resolved config over a series of ``n_bins`` bins."""
        if self.min_train_steps is None:
            raise ValueError("origins() needs a resolved config (call resolved() first)")
        return range(self.min_train_steps, n_bins - self.horizon_steps + 1, self.origin_every_steps)


@dataclass(frozen=True)
class ModelResult:
    """Scores of one model, plus the scored points (for plots and further analysis).

    ``target_timestamps[i]`` is the start of the bin scored by the ``i``-th forecast; ``actual``,
    ``point`` and ``upper`` are that bin's actual rate, point forecast and ``level``% band.
    ``elapsed_seconds`` is all fit + update + predict time; ``n_fits`` the number of fits.
    """

    name: str
    wape: float
    pinball: float
    coverage: float
    bias: float
    fit_seconds: float
    predict_seconds: float
    fallbacks: int
    n_forecasts: int
    target_timestamps: NDArray[np.int64]
    actual: FloatArray
    point: FloatArray
    upper: FloatArray
    n_fits: int = 0
    elapsed_seconds: float = 0.0
    fallback_reasons: tuple[str, ...] = ()


def _span(bins: int, step: int) -> str:
    seconds = bins * step
    for unit, size in (("d", 86_400), ("h", 3_600), ("m", 60)):
        if seconds >= size:
            value = seconds / size
            return f"{value:.1f}{unit}" if value != int(value) else f"{int(value)}{unit}"
    return f"{seconds}s"


def _ratio(num: float, den: float) -> float:
    return num / den if den > 0 else math.nan


def score(actual: FloatArray, point: FloatArray, upper: FloatArray, level: int) -> dict[str, float]:
    """WAPE, normalised pinball loss, coverage and bias of aligned arrays (no NaN in ``actual``)."""
    if actual.size == 0:
        return {"wape": math.nan, "pinball": math.nan, "coverage": math.nan, "bias": math.nan}
    total = float(np.sum(actual))
    q = level / 100.0
    diff = actual - upper
    pinball = float(np.mean(np.maximum(q * diff, (q - 1.0) * diff)))
    return {
        "wape": _ratio(float(np.sum(np.abs(actual - point))), total),
        "pinball": _ratio(pinball, float(np.mean(actual))),
        "coverage": float(np.mean(actual <= upper)),
        "bias": _ratio(float(np.sum(point)) - total, total),
    }


def rolling_origin(
    series: TrafficSeries,
    factory: Callable[[], Forecaster],
    config: BacktestConfig,
    progress: Progress | None = None,
    name: str | None = None,
    actuals: TrafficSeries | None = None,
) -> ModelResult:
    """Backtest one model; see the module docstring for the exact semantics.

    ``progress``, when given, is called after each origin with the number of origins done so far
    (out of ``len(config.resolved(...).origins(len(series)))``). ``actuals`` (same grid as
    ``series``) are the values scored; default: ``series``.
    """
    _check_same_grid(series, actuals)
    probe = factory()
    label = name or probe.alias
    cfg = config.resolved(series, [probe])
    assert cfg.history_window_steps is not None  # resolved() fills it
    h, level, step = cfg.horizon_steps, cfg.level, series.step_seconds
    values = (series if actuals is None else actuals).values
    origins = cfg.origins(len(series))

    targets: list[int] = []
    actual: list[float] = []
    point: list[float] = []
    upper: list[float] = []
    fallbacks = 0
    reasons: list[str] = []
    fit_time = 0.0
    tick_time = 0.0  # update + predict
    n_fits = 0
    model: Forecaster | None = None
    last_fit = -1
    seen = 0  # bins the current model has seen (exclusive end)

    for done, o in enumerate(origins, start=1):
        if model is None or o - last_fit >= cfg.refit_every_steps:
            t0 = time.perf_counter()
            model = factory()
            model.fit(series.slice(max(0, o - cfg.history_window_steps), o))
            fit_time += time.perf_counter() - t0
            n_fits += 1
            last_fit = seen = o
        target = o + h - 1
        a = float(values[target])
        if not math.isnan(a):
            t0 = time.perf_counter()
            if seen < o:
                model.update(series.slice(seen, o))
                seen = o
            forecast = model.predict(h, (level,))
            tick_time += time.perf_counter() - t0
            expected_start = series.start + o * step
            if forecast.start != expected_start or forecast.horizon != h:
                raise ValueError(
                    f"{label}: forecast at origin {expected_start} starts at {forecast.start} with "
                    f"{forecast.horizon} steps; expected {h} steps from the origin"
                )
            targets.append(series.start + target * step)
            actual.append(a)
            point.append(float(forecast.mean[h - 1]))
            upper.append(float(forecast.band(level)[h - 1]))
            if forecast.fallbacks:
                fallbacks += 1
                for reason in forecast.fallbacks:
                    if reason not in reasons and len(reasons) < 5:
                        reasons.append(reason)
        if progress is not None:
            progress(done)

    a_arr = np.asarray(actual, dtype=np.float64)
    p_arr = np.asarray(point, dtype=np.float64)
    u_arr = np.asarray(upper, dtype=np.float64)
    n = len(actual)
    return ModelResult(
        name=label,
        **score(a_arr, p_arr, u_arr, level),
        fit_seconds=fit_time / n_fits if n_fits else math.nan,
        predict_seconds=tick_time / n if n else math.nan,
        fallbacks=fallbacks,
        n_forecasts=n,
        target_timestamps=np.asarray(targets, dtype=np.int64),
        actual=a_arr,
        point=p_arr,
        upper=u_arr,
        n_fits=n_fits,
        elapsed_seconds=fit_time + tick_time,
        fallback_reasons=tuple(reasons),
    )


def backtest(
    series: TrafficSeries,
    factories: Mapping[str, Callable[[], Forecaster]],
    config: BacktestConfig,
    progress: Progress | None = None,
    actuals: TrafficSeries | None = None,
) -> dict[str, ModelResult]:
    """Backtest several models on the same origins (the config is resolved once for all of them).

    ``progress`` receives the number of origins done across all models so far (out of
    ``len(factories) * len(origins)``); models run in the order of ``factories``.
    """
    _check_same_grid(series, actuals)
    cfg = config.resolved(series, [make() for make in factories.values()])
    per_model = len(cfg.origins(len(series)))
    results: dict[str, ModelResult] = {}
    for i, (name, make) in enumerate(factories.items()):
        sub = None if progress is None else _shifted(progress, i * per_model)
        results[name] = rolling_origin(series, make, cfg, sub, name=name, actuals=actuals)
    return results


def _check_same_grid(series: TrafficSeries, actuals: TrafficSeries | None) -> None:
    if actuals is None:
        return
    grid = (len(series), series.step_seconds, series.start)
    other = (len(actuals), actuals.step_seconds, actuals.start)
    if grid != other:
        raise ValueError(f"actuals (bins, step, start) = {other} do not match the series {grid}")


def _shifted(progress: Progress, offset: int) -> Progress:
    def report(done: int) -> None:
        progress(offset + done)

    return report
