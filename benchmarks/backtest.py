"""Forecasting benchmark: every model on every multi-day public trace, 15 minutes ahead, p90 band.

Why it exists: the default forecaster is only worth its complexity if, on real traffic, it beats
repeating the last value (persistence) and the classic seasonal models (Holt-Winters, Prophet)
at the horizon the controller uses, with an honest p90 band, at a fraction of Prophet's cost.
This command measures exactly that with the same engine and defaults as
``predictive-autoscaler backtest`` and writes the "backtest" section of docs/BENCHMARKS.md.

Run: ``python -m benchmarks.backtest`` (from the repository root; about 15-25 minutes on two
cores). ``--traces NAME[,NAME]`` restricts to some trace files (for a quick look; the page is only
rewritten by a full run unless ``--write`` is given).

Every figure is a ratio against anchors measured in the same run (persistence, Holt-Winters,
Prophet), so the verdicts do not depend on the machine.
"""

from __future__ import annotations

import argparse
import logging
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from pathlib import Path

from autoscaler.commands.backtest import DEFAULT_ORIGIN_EVERY_STEPS
from autoscaler.traces import Trace, load_trace
from benchmarks.report import machine, update_section
from models import registry
from models.base import Forecaster
from models.clean import prepare
from models.evaluation import BacktestConfig, ModelResult, backtest
from models.prophet_model import ProphetForecaster
from models.types import SECONDS_PER_DAY

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
NASA_MARGIN = 0.85  # default WAPE at least 15% below persistence on NASA
COVERAGE_RANGE = (0.85, 0.95)
SPEEDUP = 20.0


@dataclass(frozen=True)
class TraceRun:
    trace: Trace
    results: dict[str, ModelResult]
    horizon_seconds: int
    origin_every_seconds: int
    wall_seconds: float
    # seconds for one fit plus one forecast of each bare model on the same cleaned 14-day series (best of
    # FIT_PREDICT_REPEATS): the brief's "fit + predict" speed target, without the fallback chain's shared costs
    fit_predict_seconds: dict[str, float]


FIT_PREDICT_REPEATS = 5  # best of 5: one run on a busy machine must not decide a verdict
FIT_PREDICT_BUDGET_SECONDS = 20.0  # ... unless one fit is that slow (Prophet on 20,000 one-minute bins)
PROPHET_SAME_SERIES = "prophet (same series)"


def fit_predict_seconds(trace: Trace, models: tuple[str, ...], horizon_steps: int) -> dict[str, float]:
    """Best-of-N wall time of ``make(name).fit(window).predict(h)`` per model, all on the same series.

    The series is the trace's last 14 days, outage-cleaned once beforehand (the chain does this for every
    model alike, so it is not part of any one model's cost). Two Prophet anchors: the registry's wrapper
    (fitted on 10-minute means, the product's choice for speed) and ``PROPHET_SAME_SERIES``, Prophet fitted
    on the series at its own resolution -- the brief's "Prophet on the same series". Each is the best of
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


def run_trace(trace: Trace, models: tuple[str, ...]) -> TraceRun:
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
    wall = time.perf_counter() - started
    return TraceRun(
        trace,
        results,
        config.horizon_steps * step,
        origin_every * step,
        wall,
        fit_predict_seconds(trace, models, config.horizon_steps),
    )


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
        f"Command: `{COMMAND}` · date: {today} · machine: {machine()} · total wall time {total_seconds / 60:.1f} min.",
        "",
        f"Rolling origin on the request rate of every trace in `shared/traces/` longer than one day: a forecast at "
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
    lines += [
        "",
        "Ratios for the default model (WAPE ratio < 1: default is more accurate). Speed-up = Prophet seconds / "
        "default seconds. **Fit + predict** is one fit and one forecast of the bare model on the same cleaned 14-day "
        "series (best of 5): against Prophet fitted on that series (the brief's target) and against our Prophet "
        "wrapper, which fits on 10-minute means to be cheap. The other three are through the fallback chain over the "
        "whole backtest: in total, per fit, and per forecast including the updates before it:",
        "",
        "| trace | WAPE / persistence | WAPE / holt_winters | WAPE / prophet | fit + predict vs Prophet on the same "
        "series | fit + predict vs our Prophet wrapper | backtest total | per fit | per forecast |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    checks: list[tuple[str, bool]] = []
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
        if name == NASA and "persistence" in res:
            checks.append(
                (
                    f"{name}: default WAPE at least 15% below persistence (ratio {_f(ratios['persistence'])} "
                    f"<= {NASA_MARGIN})",
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
    passed = sum(ok for _, ok in checks)
    lines += ["", f"Targets: {passed} of {len(checks)} pass.", "", "| check | result |", "|---|---|"]
    lines += [f"| {text} | {_verdict(ok)} |" for text, ok in checks]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--traces", default=None, help="comma-separated trace file names (default: all > 1 day)")
    parser.add_argument("--models", default=",".join(registry.MODEL_NAMES))
    parser.add_argument("--write", action="store_true", help="write docs/BENCHMARKS.md even for a partial run")
    args = parser.parse_args(argv)
    logging.getLogger("prophet.plot").setLevel(logging.CRITICAL)  # "Importing plotly failed": we never use it
    wanted = None if args.traces is None else {t.strip() for t in args.traces.split(",")}
    models = tuple(m.strip() for m in args.models.split(",") if m.strip())
    for m in models:
        registry.make_chain(m)  # unknown names fail before any work
    started = time.perf_counter()
    runs: list[TraceRun] = []
    for path in sorted(TRACES_DIR.glob("*.csv")):
        if wanted is not None and path.name not in wanted:
            continue
        trace = load_trace(path)
        if trace.duration_seconds <= SECONDS_PER_DAY:
            print(f"skip {path.name}: spans {trace.duration_seconds / 3600:.1f}h (needs > 1 day)", file=sys.stderr)
            continue
        runs.append(run_trace(trace, models))
    total = time.perf_counter() - started
    text = render(runs, total)
    print(text)
    full = wanted is None and models == tuple(registry.MODEL_NAMES)
    if full or args.write:
        update_section("backtest", text)
        print("\nwrote section 'backtest' of docs/BENCHMARKS.md", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
