"""Forecasting benchmark: every model on every multi-day public trace, 15 minutes ahead, p90 band.

Why it exists: the default forecaster is only worth its complexity if, on real traffic, it beats
repeating the last value (persistence) and the classic seasonal models (Holt-Winters, Prophet)
at the horizon the controller uses, with an honest p90 band, at a fraction of Prophet's cost.
This command measures exactly that with the same engine and defaults as
``predictive-autoscaler backtest`` and writes the "backtest" section of docs/BENCHMARKS.md.

Run: ``python -m benchmarks.backtest`` (from the repository root; about 7.5 minutes on two
cores). ``--traces NAME[,NAME]`` restricts to some trace files (for a quick look; the page is only
rewritten by a full run unless ``--write`` is given); ``--models`` picks the registry models and
``--peers`` the statsforecast peers (``--peers ''`` for none); ``--shapes all|none`` the synthetic shapes
(``synthetic_traces``: shapes of traffic the shared traces lack, seeded; run by default unless ``--traces`` is given).

statsforecast peers (the best-known open-source statistical forecasters, the bar for the default model): MSTL,
AutoETS and DynamicOptimizedTheta behind the Forecaster API (``StatsForecastPeer``, benchmark only), run when
``statsforecast`` is importable and reported as "not installed" otherwise. It is not a project dependency (see
``STATSFORECAST_DECISION``); run them from a separate environment built on the lock (statsforecast 2.0.1 is the
newest release that installs beside its pandas 3.1.1; 2.1.1 requires pandas < 3)::

    python3 -m venv /tmp/sfvenv && /tmp/sfvenv/bin/pip install -c constraints.txt statsforecast .
    PYTHONPATH=. /tmp/sfvenv/bin/python -m benchmarks.backtest

Every figure is a ratio against anchors measured in the same run (persistence, Holt-Winters,
Prophet), so the verdicts do not depend on the machine.

``--draws 1,2`` scores the default model and persistence on the synthetic shapes drawn again with other seeds
(``synthetic_traces(draw)``) and writes the ``backtest on other draws`` section: the targets must hold on traffic
the project has not seen, not only on the one series of each shape they were read on.
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import math
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any, Self

import numpy as np

from autoscaler.commands.backtest import DEFAULT_ORIGIN_EVERY_STEPS
from autoscaler.synth import synth_trace
from autoscaler.traces import Trace, load_trace, trace_from_rates
from benchmarks.report import machine, require_traces, update_section
from models import registry
from models.base import DEFAULT_LEVELS, Forecaster
from models.clean import continuation, prepare
from models.evaluation import BacktestConfig, ModelResult, backtest
from models.prophet_model import ProphetForecaster
from models.types import SECONDS_PER_DAY, FloatArray, Forecast, TrafficSeries

TRACES_DIR = Path(__file__).resolve().parents[2] / "shared" / "traces"
HORIZON_SECONDS = 900
LEVEL = 90
REFIT_SECONDS = SECONDS_PER_DAY
# Three days, not the CLI's two: Holt-Winters and Prophet need two days of *observed* bins, and a trace with a few
# missing minutes in its first two days would have them answered by their fallback for the whole first day.
FIRST_ORIGIN_SECONDS = 3 * SECONDS_PER_DAY
WINDOW_SECONDS = 14 * SECONDS_PER_DAY
COMMAND = "python -m benchmarks.backtest"

# Targets for the default model (from the project brief).
NASA = "nasa_http_1995_jul_1min.csv"
# What the default model must reach: never worse than persistence; at least 15% better on the traces with a
# daily cycle (SOURCES.md: NASA 4x day/night, ServeGen m_small 2.2x); within 0.97x of the best statsforecast peer.
DAILY_CYCLE = (NASA, "servegen_m_small_10min.csv")
NASA_MARGIN = 0.85
PEER_MARGIN = 0.97
COVERAGE_RANGE = (0.85, 0.95)
SPEEDUP = 50.0


@dataclass(frozen=True)
class TraceRun:
    trace: Trace
    results: dict[str, ModelResult]
    horizon_seconds: int
    origin_every_seconds: int
    wall_seconds: float
    # seconds for one fit plus one forecast of each bare model on the same cleaned 14-day series (best of
    # FIT_PREDICT_REPEATS): the "fit + predict" speed target, without the fallback chain's shared costs
    fit_predict_seconds: dict[str, float]
    peers: PeerRun | None = None


FIT_PREDICT_REPEATS = 5  # best of 5: one run on a busy machine must not decide a verdict
FIT_PREDICT_BUDGET_SECONDS = 20.0  # ... unless one fit is that slow (Prophet on 20,000 one-minute bins)
PROPHET_SAME_SERIES = "prophet (same series)"


def fit_predict_seconds(trace: Trace, models: tuple[str, ...], horizon_steps: int) -> dict[str, float]:
    """Best-of-N wall time of ``make(name).fit(window).predict(h)`` per model, all on the same series.

    The series is the trace's last 14 days, outage-cleaned once beforehand (the chain does this for every
    model alike, so it is not part of any one model's cost). Two Prophet anchors: the registry's wrapper
    (fitted on 10-minute means, the product's choice for speed) and ``PROPHET_SAME_SERIES``, Prophet fitted
    on the series at its own resolution -- the fair anchor for "faster than Prophet". Each is the best of
    ``FIT_PREDICT_REPEATS`` runs, stopping early once a model has used ``FIT_PREDICT_BUDGET_SECONDS``.
    """
    window = _steps(WINDOW_SECONDS, trace.step_seconds)
    series = prepare(trace.requests.slice(max(0, len(trace.requests) - window), len(trace.requests)))
    makers: dict[str, Callable[[], Forecaster]] = {name: partial(registry.make, name) for name in models}
    if "prophet" in models:
        makers[PROPHET_SAME_SERIES] = partial(ProphetForecaster, agg_seconds=trace.step_seconds)
    out: dict[str, float] = {}
    for name, make in makers.items():
        best, spent = math.inf, 0.0
        for _ in range(FIT_PREDICT_REPEATS):
            t0 = time.perf_counter()
            make().fit(series).predict(horizon_steps, (LEVEL,))
            took = time.perf_counter() - t0
            best, spent = min(best, took), spent + took
            if spent > FIT_PREDICT_BUDGET_SECONDS:
                break
        out[name] = best
    return out


def _steps(seconds: int, step: int) -> int:
    return max(1, math.ceil(seconds / step))


def run_trace(trace: Trace, models: tuple[str, ...], peers: tuple[str, ...] = ()) -> TraceRun:
    step = trace.step_seconds
    origin_every = DEFAULT_ORIGIN_EVERY_STEPS
    config = BacktestConfig(
        horizon_steps=_steps(HORIZON_SECONDS, step),
        level=LEVEL,
        refit_every_steps=_steps(REFIT_SECONDS, step),
        origin_every_steps=origin_every,
        history_window_steps=_steps(WINDOW_SECONDS, step),
        min_train_steps=_steps(FIRST_ORIGIN_SECONDS, step),
    )
    factories: dict[str, Callable[[], Forecaster]] = {}
    for name in models:

        def factory(name: str = name) -> Forecaster:
            return registry.make_chain(name)

        factories[name] = factory
    results: dict[str, ModelResult] = {}
    started = time.perf_counter()
    # the first origin is resolved once from all models, so every model is scored on the same bins
    resolved = config.resolved(trace.requests, [f() for f in factories.values()])
    actuals = prepare(trace.requests)  # metrics-outage zeros are not scored (as in the CLI's default)
    for name, make in factories.items():
        t0 = time.perf_counter()
        # one model at a time, to log progress
        results[name] = backtest(trace.requests, {name: make}, resolved, actuals=actuals)[name]
        r = results[name]
        print(
            f"  {trace.name:<42} {name:<15} wape {r.wape:.3f} cover {r.coverage:.3f} "
            f"{time.perf_counter() - t0:6.1f}s ({r.n_forecasts} forecasts, {r.n_fits} fits)",
            file=sys.stderr,
            flush=True,
        )
    peer_run = run_peers(trace, results.get("default"), peers) if peers else None
    wall = time.perf_counter() - started
    return TraceRun(
        trace,
        results,
        config.horizon_steps * step,
        origin_every * step,
        wall,
        fit_predict_seconds(trace, models, config.horizon_steps),
        peer_run,
    )


# --- statsforecast peers -----------------------------------------------------------------------------------------
# Nixtla statsforecast (MSTL, AutoETS, DynamicOptimizedTheta) as peers of the default model. Not a project dependency
# (STATSFORECAST_DECISION): they run when the package is importable (a separate benchmark environment, see
# docs/BENCHMARKS.md) and are reported as "not installed" otherwise.
PEERS: tuple[str, ...] = ("sf_mstl", "sf_autoets", "sf_theta")
# A peer fit costs seconds to minutes on 14 days of 1-minute bins (measured in docs/BENCHMARKS.md), so peers are
# refitted weekly on 1-minute traces (daily on coarser ones) and forecast at every h-th bin; between fits they are
# filtered forward over the new bins (``forward``), which is what a live controller could afford. The default model
# is compared with them on exactly the bins they were scored on.
PEER_REFIT_SECONDS = {60: 7 * SECONDS_PER_DAY}
# DynamicOptimizedTheta's fit takes about a minute at 14 days of 1-minute bins: measured, not backtested there.
PEER_SKIP = {("sf_theta", 60)}


STATSFORECAST_DECISION = (
    "**statsforecast: not adopted** (weighed for adoption as the best-known open-source forecasters; the reasoning "
    "is also in `models/default.py`). Accuracy: the default model is ahead of the best peer on every trace, on the "
    "peers' own targets (table above). Cost, measured "
    "separately in one process on the last 14 days of 1-minute NASA on 2026-11-23 (ratios to the default's fit + "
    "predict as it was then, 48 ms, now ~20 ms, and one-bin update + predict, 39 us): AutoETS fit 18x, update "
    "(`forward`, which re-filters the whole history) 38x; "
    "MSTL fit 790x, and its own `forward` re-runs the decomposition (53 s per update: the peer above uses the "
    "cheapest exact alternative, deseasonalise with the fitted components and filter the trend model forward, 49x); "
    "DynamicOptimizedTheta fit 3,400x, update 29,000x (so it is not backtested on the 1-minute traces). Seasonal "
    "ETS/Theta cannot take a 1,440-bin season; only MSTL carries the day at 1 minute. A daily refit of 1,000 "
    "Deployments would cost ~15 CPU-minutes with AutoETS and ~10 CPU-hours with MSTL (the default: under a minute). "
    "Dependency: statsforecast 2.1.1 requires pandas < 3; 2.0.1 installs beside the lock's pandas 3.1.1 and scores "
    "the same here, but brings numba, llvmlite, statsmodels and fugue, which neither the controller nor its tests "
    "use. Recommendation: no runtime dependency and no registry model (it is behind on accuracy and far ahead on "
    "cost); keep it as a benchmark peer in a separate environment built on the lock (`pip install -c "
    "constraints.txt statsforecast .`), not in the project's own install."
)


# Why the targets this section fails are out of reach (measured while tuning the default model; see models/default.py).
NOT_MET = (
    "Why the FAILs stand (measured 2026-11-25). *m_small at 0.911x persistence* (the 0.85 target for daily-cycle "
    "traces): the 20-minute change of that series is mostly not predictable from its past. Linear predictors of it "
    "from the last 24 bins plus the same window on the two days before (and a week before), fitted *in sample* with "
    "hindsight, reach only 0.88-0.90x persistence (0.87 in log space); refitted daily out of sample, 0.93-0.98x; "
    "profiles from the last 2-3 days instead of 14 score 0.95-0.96x; the model's step-h errors are correlated at "
    "lag h (-0.28) but a correction term on them makes it worse. *Fit + predict at 10-minute bins, 43-47x Prophet* "
    "(50x target; ServeGen m_mid 65x, where the fit's check now serves the last value most days): Prophet's fit "
    "shrinks with the series (2,016 points, ~0.15 s), the default's selection does not (15 profile rows x 8 "
    "half-lives x 6 long-level weights scored on ~1,000 origins, ~2 ms of the ~4.5 ms). The fit was made ~1.35x "
    "cheaper without changing any choice (from 19-23x); cutting the grid further would trade accuracy for a ratio. "
    "At 1-minute bins, where the controller's series are, it is over 170x. *Not below persistence on the bursty "
    "social stream and the LLM series turning volatile* (1.000x, equal, which the <= 1.00x target allows): on both "
    "the last value is the best forecast there is, the default's fit finds no choice that beats it by two standard "
    "errors on its window and serves it (before that check: 1.059x and 1.006x persistence)."
)


# --- synthetic shapes ----------------------------------------------------------------------------------------------
# Shapes of traffic the shared traces do not have, made here from a fixed seed (the same series every run): a model
# must hold its targets on them too, or it is tuned to four traces. Each is 14 days, scored like a trace.
SHAPE_DAYS = 14
DRAW_SEED_STEP = 10  # a draw's seeds: each shape's own + 10 x the draw (draw 0: 1, 2, 3, 4; draw 1: 11, 12, 13, 14)
SHAPE_START = 1_700_006_400 + 13 * 3600 + 37 * 60  # not a midnight: the profile's phase must come from the timestamps


def _wandering_level(
    rng: np.random.Generator, n: int, step: int, drift_15min: FloatArray, revert_days: float
) -> FloatArray:
    """A log level that wanders: an AR(1) per bin reverting over ``revert_days``, 15-minute volatility per bin."""
    keep = math.exp(-step / (revert_days * SECONDS_PER_DAY))
    shocks = rng.normal(0.0, 1.0, n) * drift_15min * math.sqrt(step / 900.0)
    level = np.zeros(n)
    for i in range(1, n):
        level[i] = keep * level[i - 1] + shocks[i]
    return level


def _bursts(
    rng: np.random.Generator, n: int, step: int, per_day: float, sizes: Callable[[int], FloatArray], bins: float
) -> FloatArray:
    """1 + the sum of bursts at Poisson times, each ``size`` x exp(-age / decay), decays exponential around ``bins``."""
    k = int(rng.poisson(per_day * n * step / SECONDS_PER_DAY))
    onsets, size = rng.integers(0, n, k), sizes(k)
    decays = np.maximum(rng.exponential(bins, k), 1.0)
    out = np.ones(n)
    for onset, extra, decay in zip(onsets.tolist(), size.tolist(), decays.tolist(), strict=True):
        end = min(n, onset + int(10 * decay) + 1)
        out[onset:end] += extra * np.exp(-np.arange(end - onset) / decay)
    return out


def _lognormal_sizes(rng: np.random.Generator, k: int) -> FloatArray:
    return np.asarray(0.5 * np.exp(0.8 * rng.standard_normal(k)), dtype=np.float64)


def _pareto_sizes(rng: np.random.Generator, k: int) -> FloatArray:
    return np.asarray(np.minimum(rng.pareto(0.8, k) + 1.0, 200.0), dtype=np.float64)


def synthetic_traces(draw: int = 0) -> list[Trace]:
    """The synthetic shapes of the benchmark (see ``SHAPES_TEXT``). ``draw`` > 0: the same shapes drawn again with
    other seeds (each shape's seed + ``DRAW_SEED_STEP`` x ``draw``), named with `` [draw N]``: the traffic a user's
    Deployment of that shape would see, not the one series the benchmarks were read on."""
    shift = DRAW_SEED_STEP * draw
    tag = f" [draw {draw}]" if draw else ""
    out = [synth_trace(days=SHAPE_DAYS, seed=1 + shift, shape="diurnal", step_seconds=60)]
    out[0] = Trace("synthetic: diurnal web (1 min)" + tag, out[0].requests, {})
    step = 600
    n = SHAPE_DAYS * SECONDS_PER_DAY // step
    t = SHAPE_START + step * np.arange(n)
    outage = (t % SECONDS_PER_DAY >= 3 * 3600 + 600) & (t % SECONDS_PER_DAY < 3 * 3600 + 2400)
    for name, seed, drift, bursts in (
        ("synthetic: LLM serving, no daily cycle, bursts (10 min)", 2, np.full(n, 0.06), 3.0),
        ("synthetic: LLM serving, no daily cycle, turning volatile (10 min)", 3, np.where(np.arange(n) < n // 2, 0.03,
                                                                                          0.12), 0.0),
    ):
        rng = np.random.default_rng(seed + shift)
        level = _wandering_level(rng, n, step, drift, 1.0)
        burst = _bursts(rng, n, step, bursts, partial(_lognormal_sizes, rng), 2.0)
        counts = rng.poisson(4000.0 * np.exp(level) * burst).astype(np.float64)
        counts[outage] = 0.0  # a daily 30-minute collection outage that the metric reports as zeros
        out.append(trace_from_rates(name + tag, TrafficSeries(counts / step, step, SHAPE_START)))
    step = 60
    n = SHAPE_DAYS * SECONDS_PER_DAY // step
    t = SHAPE_START + step * np.arange(n)
    rng = np.random.default_rng(4 + shift)
    level = _wandering_level(rng, n, step, np.full(n, 0.12), 0.5)
    daily = 1.0 + 0.3 * np.sin(2 * np.pi * ((t % SECONDS_PER_DAY) / SECONDS_PER_DAY - 0.3))
    burst = _bursts(rng, n, step, 20.0, partial(_pareto_sizes, rng), 20.0)
    counts = rng.poisson(2.0 * step * np.exp(level) * daily * burst).astype(np.float64)
    social = TrafficSeries(counts / step, step, SHAPE_START)
    out.append(trace_from_rates("synthetic: bursty social stream (1 min)" + tag, social))
    return out


SHAPES_TEXT = (
    "**Synthetic shapes** (`synthetic_traces` in `benchmarks/backtest.py`, seeded, 14 days each, scored like the "
    "traces): *diurnal web* is `autoscaler/synth.py`'s diurnal shape (3x day/night, weekends, bursts, a level shift); "
    "the two *LLM serving, no daily cycle* series are Poisson counts around ~4,000 requests per 10 minutes on a level "
    "that wanders (a log random walk reverting over a day, lag-1-day autocorrelation 0.1-0.3), with a daily 30-minute "
    "collection outage that reads as zeros, one with lognormal bursts three times a day, one whose 15-minute "
    "volatility rises from 3% to 12% half-way through; the *bursty social stream* is Poisson arrivals around a "
    "wandering base with a weak daily cycle, plus 20 bursts a day whose sizes are Pareto with tail index 0.8 (a few "
    "dwarf all the others), decaying over ~20 minutes."
)


def _environment() -> str:
    """Which pandas and statsforecast the run used (the peers need a separate environment, see below)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        sf = f"statsforecast {version('statsforecast')}"
    except PackageNotFoundError:
        sf = "statsforecast not installed"
    return f"pandas {version('pandas')}, {sf}"


def statsforecast_available() -> bool:
    return importlib.util.find_spec("statsforecast") is not None


def _fill(values: FloatArray, last: float) -> FloatArray:
    """Forward-filled values (statsforecast takes no NaN); ``last`` before the first observed one."""
    idx = np.maximum.accumulate(np.where(np.isfinite(values), np.arange(values.shape[0]), -1))
    out = np.where(idx >= 0, values[np.maximum(idx, 0)], last)
    return np.asarray(np.where(np.isfinite(out), out, 0.0), dtype=np.float64)


class StatsForecastPeer:
    """A statsforecast model behind the project's Forecaster API (benchmark only).

    ``fit`` cleans like the chain does (``prepare``) and fits on the forward-filled series; ``update`` appends the new
    bins; ``predict`` filters the fitted model forward over everything seen (``forward``: no re-estimation) and
    forecasts ``h`` bins with its own intervals (the ``p``% upper band is the upper end of the ``2p - 100``% interval).
    MSTL's ``forward`` would re-run the decomposition (~30 s at 20,000 bins), so its update is done the way its
    ``predict`` works: the fitted seasonal components continue by period, the new bins are deseasonalised with them,
    and the trend model (AutoETS) is filtered forward over the seasonally adjusted series.
    """

    def __init__(self, kind: str) -> None:
        self.alias = kind
        self.kind = kind
        self._y = np.zeros(0)
        self._step = 0
        self._end = 0
        self._model: object = None
        self._period = 1
        self._sa = np.zeros(0)  # MSTL: seasonally adjusted series seen so far
        self._cycle = np.zeros(0)  # MSTL: the last period of the fitted seasonal components
        self._n_fit = 0

    def min_history(self, step_seconds: int) -> int:
        return 2 * max(1, SECONDS_PER_DAY // step_seconds)

    def fit(self, series: TrafficSeries) -> Self:
        from statsforecast.models import MSTL, AutoETS, DynamicOptimizedTheta  # type: ignore[import-not-found]

        step = series.step_seconds
        self._period = period = max(1, SECONDS_PER_DAY // step)
        y = _fill(prepare(series).values, math.nan)
        # seasonal ETS/Theta only where the season is short enough for them (statsforecast's ETS caps it at 24)
        season = period if period <= 24 else 1
        if self.kind == "sf_mstl":
            model = MSTL(season_length=[period]).fit(y)
            comp = model.model_
            seas = comp[[c for c in comp.columns if str(c).startswith("seasonal")]].sum(axis=1).to_numpy()
            self._cycle = np.asarray(seas[-period:], dtype=np.float64)
            self._sa = np.asarray(y - seas, dtype=np.float64)
            self._n_fit = y.shape[0]
        elif self.kind == "sf_autoets":
            model = AutoETS(season_length=season).fit(y)
        elif self.kind == "sf_theta":
            model = DynamicOptimizedTheta(season_length=season).fit(y)
        else:
            raise ValueError(f"unknown statsforecast peer {self.kind!r}")
        self._model, self._y, self._step, self._end = model, y, step, series.end
        return self

    def update(self, new: TrafficSeries) -> Self:
        values = _fill(continuation(self._end, self._step, new), float(self._y[-1]))
        if self.kind == "sf_mstl" and values.size:
            i = self._y.shape[0] - self._n_fit + np.arange(values.shape[0])
            self._sa = np.concatenate((self._sa, values - self._cycle[i % self._period]))
        self._y = np.concatenate((self._y, values))
        self._end = new.end
        return self

    def predict(self, h: int, levels: Sequence[int] = DEFAULT_LEVELS) -> Forecast:
        widths = sorted({abs(2 * int(p) - 100) for p in levels if int(p) != 50})
        model: Any = self._model
        if self.kind == "sf_mstl":
            out = model.trend_forecaster.forward(y=self._sa, h=h, level=widths or None)
            i = self._y.shape[0] - self._n_fit + np.arange(h)
            seas = self._cycle[i % self._period]
        else:
            out = model.forward(y=self._y, h=h, level=widths or None)
            seas = np.zeros(h)
        mean = np.asarray(out["mean"], dtype=np.float64) + seas
        bands: dict[int, FloatArray] = {}
        for p in levels:
            p = int(p)
            key = "hi" if p > 50 else "lo"
            band = mean if p == 50 else np.asarray(out[f"{key}-{abs(2 * p - 100)}"], dtype=np.float64) + seas
            bands[p] = np.maximum(band, 0.0)
        return Forecast(self._end, self._step, np.maximum(mean, 0.0), bands, self.alias)

    def to_state(self) -> dict[str, Any]:
        raise NotImplementedError("benchmark-only peer: no persisted state")

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> Self:
        raise NotImplementedError("benchmark-only peer: no persisted state")


@dataclass(frozen=True)
class PeerRun:
    """Peers scored on a subset of origins, and the default model's WAPE on exactly those targets."""

    results: dict[str, ModelResult]
    default_wape: dict[str, float]
    notes: dict[str, str]


def run_peers(trace: Trace, default: ModelResult | None, peers: tuple[str, ...]) -> PeerRun:
    step = trace.step_seconds
    h = _steps(HORIZON_SECONDS, step)
    config = BacktestConfig(
        horizon_steps=h,
        level=LEVEL,
        refit_every_steps=_steps(PEER_REFIT_SECONDS.get(step, REFIT_SECONDS), step),
        origin_every_steps=h,
        history_window_steps=_steps(WINDOW_SECONDS, step),
        min_train_steps=_steps(FIRST_ORIGIN_SECONDS, step),
    )
    actuals = prepare(trace.requests)
    results: dict[str, ModelResult] = {}
    default_wape: dict[str, float] = {}
    notes: dict[str, str] = {}
    for name in peers:
        if not statsforecast_available():
            notes[name] = "not installed"
            continue
        if (name, step) in PEER_SKIP:
            notes[name] = "fit too slow to backtest at this bin size (see costs)"
            continue
        t0 = time.perf_counter()
        try:
            make: Callable[[], Forecaster] = partial(StatsForecastPeer, name)
            r = backtest(trace.requests, {name: make}, config, actuals=actuals)[name]
        except Exception as exc:  # a peer that cannot run on a trace is reported, not fatal
            notes[name] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            continue
        results[name] = r
        if default is not None:
            keep = np.isin(default.target_timestamps, r.target_timestamps)
            a, pt = default.actual[keep], default.point[keep]
            default_wape[name] = _ratio(float(np.sum(np.abs(a - pt))), float(np.sum(a)))
        print(
            f"  {trace.name:<42} {name:<15} wape {r.wape:.3f} cover {r.coverage:.3f} "
            f"{time.perf_counter() - t0:6.1f}s ({r.n_forecasts} forecasts, {r.n_fits} fits)",
            file=sys.stderr,
            flush=True,
        )
    return PeerRun(results, default_wape, notes)


def _f(value: float, fmt: str = ".3f") -> str:
    return "n/a" if math.isnan(value) else format(value, fmt)


def _ratio(num: float, den: float) -> float:
    return num / den if den > 0 and not math.isnan(num) and not math.isnan(den) else math.nan


def _verdict(ok: bool) -> str:
    return "PASS" if ok else "**FAIL**"


def _duration(seconds: int) -> str:
    for unit, size in (("d", 86_400), ("h", 3_600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def render(runs: list[TraceRun], total_seconds: float) -> str:
    today = datetime.now(UTC).strftime("%Y-%m-%d")
    lines = [
        "## Forecast accuracy (backtest)",
        "",
        f"Command: `{COMMAND}` · date: {today} · machine: {machine()} · total wall time {total_seconds / 60:.1f} min "
        f"· {_environment()}.",
        "",
        f"Rolling origin on the request rate of every trace in `../shared/traces/` longer than one day, and of the "
        f"synthetic shapes below: a forecast at "
        f"every bin (the CLI's default), scored at step h = ceil(15 min / bin), p{LEVEL} "
        f"upper band; each model (its fallback chain from `models.registry`) refitted daily on at most the last 14 "
        f"days and updated with the new bins in between; the first origin is after 3 days, the same for all "
        f"models (so Holt-Winters and Prophet have their two days of observed history). Bins that look like "
        f"metrics outages "
        f"(`models.clean.prepare`: zero amid traffic) are not scored, as in the CLI's default. "
        f"WAPE = sum|actual - forecast| / sum actual; pinball = mean quantile loss of the p{LEVEL} band / mean actual; "
        f"coverage = share of actuals at or below the band; bias = (sum forecast - sum actual) / sum actual; "
        f"seconds = all fit + update + predict time of the model over the whole backtest.",
        "",
        "| trace | horizon | model | WAPE | p90 coverage | pinball | bias | fit+predict s | forecasts | fallbacks |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for run in runs:
        for name, r in run.results.items():
            lines.append(
                f"| {run.trace.name} | {_duration(run.horizon_seconds)} | {name} | {_f(r.wape)} | {_f(r.coverage)} | "
                f"{_f(r.pinball)} | {_f(r.bias, '+.3f')} | {_f(r.elapsed_seconds, '.1f')} | {r.n_forecasts} | "
                f"{r.fallbacks} |"
            )
    if any(run.trace.name.startswith("synthetic:") for run in runs):
        lines += ["", SHAPES_TEXT]
    lines += [
        "",
        "Ratios for the default model (WAPE ratio < 1: default is more accurate). Speed-up = Prophet seconds / "
        "default seconds. **Fit + predict** is one fit and one forecast of the bare model on the same cleaned 14-day "
        "series (best of 5): against Prophet fitted on that series (the speed target's anchor) and against our Prophet "
        "wrapper, which fits on 10-minute means to be cheap. The other three are through the fallback chain over the "
        "whole backtest: in total, per fit, and per forecast including the updates before it:",
        "",
        "| trace | WAPE / persistence | WAPE / holt_winters | WAPE / prophet | fit + predict vs Prophet on the same "
        "series | fit + predict vs our Prophet wrapper | backtest total | per fit | per forecast |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    checks: list[tuple[str, bool]] = []
    peer_lines: list[str] = []
    for run in runs:
        pr = run.peers
        if pr is None:
            continue
        for name, note in pr.notes.items():
            peer_lines.append(f"| {run.trace.name} | {name} | {note} | | | | | | |")
        d = run.results.get("default")
        for name, r in pr.results.items():
            dw = pr.default_wape.get(name, math.nan)
            fit_x = _ratio(r.fit_seconds, d.fit_seconds) if d else math.nan
            tick_x = _ratio(r.predict_seconds, d.predict_seconds) if d else math.nan
            peer_lines.append(
                f"| {run.trace.name} | {name} | {r.n_forecasts} | {_f(r.wape)} | {_f(dw)} | {_f(_ratio(dw, r.wape))} | "
                f"{_f(r.coverage)} | {_f(r.fit_seconds, '.2f')} ({_f(fit_x, '.0f')}x) | "
                f"{_f(r.predict_seconds * 1e3, '.1f')} ({_f(tick_x, '.0f')}x) |"
            )
        if pr.results:
            best = min(pr.results, key=lambda k: pr.results[k].wape)
            ratio = _ratio(pr.default_wape.get(best, math.nan), pr.results[best].wape)
            checks.append(
                (
                    f"{run.trace.name}: default WAPE <= {PEER_MARGIN}x the best statsforecast peer ({best}, "
                    f"ratio {_f(ratio)} on its targets)",
                    ratio <= PEER_MARGIN,
                )
            )
    for run in runs:
        res = run.results
        if "default" not in res:
            continue
        d = res["default"]
        ratios = {
            n: _ratio(d.wape, res[n].wape) if n in res else math.nan for n in ("persistence", "holt_winters", "prophet")
        }
        p = res.get("prophet")
        fp = run.fit_predict_seconds
        speed = _ratio(fp.get(PROPHET_SAME_SERIES, math.nan), fp.get("default", math.nan))
        wrapper_speed = _ratio(fp.get("prophet", math.nan), fp.get("default", math.nan))
        total_speed = _ratio(p.elapsed_seconds, d.elapsed_seconds) if p else math.nan
        fit_speed = _ratio(p.fit_seconds, d.fit_seconds) if p else math.nan
        tick_speed = _ratio(p.predict_seconds, d.predict_seconds) if p else math.nan
        lines.append(
            f"| {run.trace.name} | {_f(ratios['persistence'])} | {_f(ratios['holt_winters'])} | "
            f"{_f(ratios['prophet'])} | {_f(speed, '.1f')}x | {_f(wrapper_speed, '.1f')}x | "
            f"{_f(total_speed, '.1f')}x | {_f(fit_speed, '.1f')}x | {_f(tick_speed, '.1f')}x |"
        )
        name = run.trace.name
        for ref in ("persistence", "holt_winters", "prophet"):
            if ref in res:
                checks.append(
                    (f"{name}: default WAPE below {ref} ({_f(d.wape)} vs {_f(res[ref].wape)})", ratios[ref] < 1)
                )
        if "persistence" in res:
            checks.append(
                (
                    f"{name}: default WAPE <= 1.00x persistence (ratio {_f(ratios['persistence'])})",
                    ratios["persistence"] <= 1.0,
                )
            )
        if name in DAILY_CYCLE and "persistence" in res:
            checks.append(
                (
                    f"{name} (daily cycle): default WAPE at least 15% below persistence (ratio "
                    f"{_f(ratios['persistence'])} <= {NASA_MARGIN})",
                    ratios["persistence"] <= NASA_MARGIN,
                )
            )
        lo, hi = COVERAGE_RANGE
        checks.append((f"{name}: default p90 coverage in [{lo}, {hi}] ({_f(d.coverage)})", lo <= d.coverage <= hi))
        if "prophet" in res:
            checks.append(
                (
                    f"{name}: default fit + predict at least {SPEEDUP:.0f}x faster than Prophet on the same series "
                    f"({_f(speed, '.1f')}x)",
                    speed >= SPEEDUP,
                )
            )
    if not any(run.trace.name == NASA for run in runs):
        checks.append((f"{NASA} was benchmarked", False))
    lines += [
        "",
        "The backtest totals go through the same fallback chain for every model (outage cleaning and sqrt-space bands "
        "are paid by all, and ~40,000 one-bin updates dominate them), against the project's Prophet wrapper "
        "(`models/prophet_model.py`: fitted on 10-minute means, its curve cached so a forecast is a slice), so they "
        "understate the models' own difference; the fit + predict column isolates it.",
    ]
    if peer_lines:
        lines += [
            "",
            "**statsforecast peers** (Nixtla statsforecast, the version in the command line above: MSTL with a "
            "daily season and an AutoETS trend, AutoETS, DynamicOptimizedTheta; seasonal only where the season is at "
            "most 24 bins, so not at 1 or 10 minutes, where MSTL carries the daily season). It is not a project "
            "dependency (see below): the peers run when it is importable (a separate benchmark environment on the "
            "lock: `python3 -m venv /tmp/sfvenv && /tmp/sfvenv/bin/pip install -c constraints.txt statsforecast .` "
            f"then `PYTHONPATH=. /tmp/sfvenv/bin/{COMMAND}`) and are reported as not installed otherwise. Their "
            "fits cost seconds to minutes at 14 days of 1-minute bins, so they forecast at every h-th origin and "
            "are refitted weekly on 1-minute traces (daily on 10-minute ones), filtered forward over the new bins "
            "in between (no re-estimation); *default on same* is the default model's WAPE on exactly the targets "
            "the peer was scored on. Fit s = mean seconds per peer fit, in brackets / the default chain's mean "
            "fit in the same run (both on up to 14 days); ms per forecast includes the forward filtering of the "
            "bins since the previous forecast, in brackets / the default's per-forecast time (which includes "
            "its one-bin updates):",
            "",
            "| trace | peer | forecasts | WAPE | default on same | default / peer | p90 coverage | fit s (vs default) "
            "| ms per forecast (vs default) |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|",
            *peer_lines,
        ]
    lines += ["", STATSFORECAST_DECISION]
    passed = sum(ok for _, ok in checks)
    lines += ["", f"Targets: {passed} of {len(checks)} pass.", "", "| check | result |", "|---|---|"]
    lines += [f"| {text} | {_verdict(ok)} |" for text, ok in checks]
    if passed < len(checks):
        lines += ["", NOT_MET]
    return "\n".join(lines)


def draw_numbers(spec: str) -> tuple[int, ...]:
    """``--draws 1,2`` (this benchmark's and the frontier's): the draw numbers, each >= 1 (draw 0 is the series the
    benchmark's own section is read on)."""
    try:
        numbers = tuple(sorted({int(x) for x in spec.split(",") if x.strip()}))
    except ValueError:
        raise SystemExit(f"--draws {spec!r}: expected draw numbers such as 1,2") from None
    if not numbers or min(numbers) < 1:
        raise SystemExit(f"--draws {spec!r}: draws are numbered from 1 (draw 0 is the section's own series)")
    return numbers


def render_draws(runs: list[TraceRun], numbers: tuple[int, ...], seconds: float) -> str:
    """The ``backtest on other draws`` section: the default model against persistence on the synthetic shapes drawn
    again, with the targets that must hold on traffic the project has not seen."""
    lo, hi = COVERAGE_RANGE
    lines = [
        "## backtest on other draws",
        "",
        f"`{COMMAND} --draws {','.join(str(n) for n in numbers)}`: the synthetic shapes of the section above drawn "
        f"again with other seeds (`synthetic_traces(draw)`: each shape's seed + {DRAW_SEED_STEP} x the draw), scored "
        "as above (rolling origin at every bin, step h = ceil(15 min / bin), p90 band, daily refits on at most 14 "
        "days; the ratio to four places, since the check is strict). Why: the self-check and the bands were read on "
        "one series of each shape.",
        "",
        "| trace | default WAPE | persistence WAPE | default / persistence | default p90 coverage | "
        f"<= 1.00x persistence | coverage in [{lo:g}, {hi:g}] |",
        "|---|---:|---:|---:|---:|---|---|",
    ]
    passed = total = 0
    for run in runs:
        de, pe = run.results["default"], run.results["persistence"]
        ratio = _ratio(de.wape, pe.wape)
        checks = (ratio <= 1.0, lo <= de.coverage <= hi)
        passed += sum(checks)
        total += len(checks)
        lines.append(f"| {run.trace.name} | {_f(de.wape)} | {_f(pe.wape)} | {ratio:.4f} | {_f(de.coverage)} | "
                     f"{_verdict(checks[0])} | {_verdict(checks[1])} |")
    lines += ["", f"Targets: {passed} of {total} pass. Run time {seconds:.0f} s. Machine: {machine()}.", "",
              READING_DRAWS]
    return "\n".join(lines)


# Measured 2026-11-26 with ``--draws 1,2``; kept next to the code that prints it.
READING_DRAWS = (
    "Reading (measured 2026-11-26): the forecast's targets hold on the other draws but one, by a hair. Where the "
    "last value is the best forecast there is (the LLM series turning volatile and the social stream) the self-check "
    "serves persistence and scores 1.0000x; on the volatile series' draw 2 it served the model at a few origins where "
    "it lost, 1.0002x, so the strict check fails. The p90 coverage stays within 0.883-0.917 on every draw."
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--traces", default=None, help="comma-separated trace file names (default: all > 1 day)")
    parser.add_argument("--models", default=",".join(registry.MODEL_NAMES))
    parser.add_argument("--write", action="store_true", help="write docs/BENCHMARKS.md even for a partial run")
    parser.add_argument(
        "--shapes",
        choices=("all", "none"),
        default=None,
        help="the synthetic shapes too (default: all, or none when --traces is given)",
    )
    parser.add_argument(
        "--peers",
        default=",".join(PEERS),
        help="statsforecast peers to run when statsforecast is importable (empty: none)",
    )
    parser.add_argument("--draws", default=None, metavar="N[,N...]",
                        help="instead, the default model and persistence on the synthetic shapes drawn again with "
                        "other seeds (draws 1, 2, ...); writes the 'backtest on other draws' section")
    args = parser.parse_args(argv)
    logging.getLogger("prophet.plot").setLevel(logging.CRITICAL)  # "Importing plotly failed": we never use it
    if args.draws is not None:
        numbers = draw_numbers(args.draws)
        started = time.perf_counter()
        drawn = [run_trace(trace, ("default", "persistence")) for n in numbers for trace in synthetic_traces(n)]
        text = render_draws(drawn, numbers, time.perf_counter() - started)
        print(text)
        update_section("backtest-draws", text)
        return 0
    wanted = None if args.traces is None else {t.strip() for t in args.traces.split(",")}
    models = tuple(m.strip() for m in args.models.split(",") if m.strip())
    peers = tuple(p.strip() for p in args.peers.split(",") if p.strip())
    for p in peers:
        if p not in PEERS:
            parser.error(f"unknown peer {p!r}; valid: {', '.join(PEERS)}")
    for m in models:
        registry.make_chain(m)  # unknown names fail before any work
    require_traces(TRACES_DIR, COMMAND)
    started = time.perf_counter()
    runs: list[TraceRun] = []
    for path in sorted(TRACES_DIR.glob("*.csv")):
        if wanted is not None and path.name not in wanted:
            continue
        trace = load_trace(path)
        if trace.duration_seconds <= SECONDS_PER_DAY:
            print(f"skip {path.name}: spans {trace.duration_seconds / 3600:.1f}h (needs > 1 day)", file=sys.stderr)
            continue
        runs.append(run_trace(trace, models, peers))
    shapes = args.shapes == "all" or (args.shapes is None and wanted is None)
    for trace in synthetic_traces() if shapes else []:
        runs.append(run_trace(trace, models, peers))
    total = time.perf_counter() - started
    text = render(runs, total)
    print(text)
    full = wanted is None and shapes and models == tuple(registry.MODEL_NAMES)
    if full or args.write:
        update_section("backtest", text)
        print("\nwrote section 'backtest' of docs/BENCHMARKS.md", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
