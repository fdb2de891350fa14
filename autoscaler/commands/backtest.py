"""``predictive-autoscaler backtest``: judge the forecasters on the operator's own history.

Why it exists: before letting a forecast pre-scale GPUs, an operator needs to know how far ahead
it is right on *their* traffic, how often the upper band holds, and whether it beats simply
repeating the last value. This command replays a trace with ``models.evaluation`` (rolling
origins, no look-ahead) through each model's fallback chain from ``models.registry`` (so the
number of forecasts that fell back is reported), and prints a table, JSON, or a plot. With
``--deployment NS/NAME`` the history is read from Prometheus through ``autoscaler.history``: the
series the controller forecasts for that Deployment.

Defaults: a forecast at every bin, refit daily on the last 14 days, updated in between. Measured
on the 4-week 1-minute NASA trace (39,693 bins, 36,799 forecasts per model), all five models:
1 min 45 s wall, 77 s CPU, on the shared 2-core machine (load average ~4). Fits dominate (Holt-
Winters and Prophet, 26 each); forecasting every 5 minutes instead (``--origin-every 5m``) took
1 min 25 s and moved no WAPE by more than 0.001, so every bin is the default.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

from autoscaler.cli import add_demand_arguments, demand_flags, duration_flag, plot_flag, warn
from autoscaler.domain.demand import DemandUnit
from autoscaler.errors import UserError
from autoscaler.history import add_arguments, check_source_flags, parse_args, trace_from_args, wants_prometheus
from autoscaler.progress import progress_for
from autoscaler.runtime.clock import SystemClock
from autoscaler.traces import (
    MOSTLY_MISSING,
    TOKEN_COLUMNS,
    demand_series,
    format_span,
    gaps,
    iso_time,
    load_trace,
)
from models.base import Forecaster, InsufficientHistoryError
from models.evaluation import BacktestConfig, ModelResult, backtest
from models.types import TrafficSeries

SERIES = ("requests", *TOKEN_COLUMNS)
DEFAULT_ORIGIN_EVERY_STEPS = 1  # a forecast at every bin (measured affordable, see the module docstring)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "backtest",
        help="score forecasters on a trace (rolling origin, no look-ahead)",
        description=(
            "Replay a trace as if each model had been forecasting live: at every origin the model has seen only "
            "the past, forecasts --horizon ahead, and step h is scored against what happened "
            "(WAPE, pinball loss and coverage of the upper band, bias, time per fit and per forecast)."
        ),
    )
    parser.add_argument(
        "--trace", type=Path, default=None,
        help="CSV timestamp,requests[,input_tokens,output_tokens] (default: two weeks of synthetic traffic, "
        "autoscaler/synth.py; or Prometheus with --deployment)",
    )
    parser.add_argument(
        "--series", default="requests", help=f"which column to forecast: {'|'.join(SERIES)} (default requests)"
    )
    add_demand_arguments(parser)
    parser.add_argument("--horizon", default="15m", help="how far ahead to score, e.g. 15m (rounded up to whole bins)")
    parser.add_argument("--models", default=None, help="comma-separated model names (default: all)")
    parser.add_argument("--levels", default="90", help="upper band percentile to score, integer in 1..99 (default 90)")
    parser.add_argument("--refit-every", default="1d", help="refit cadence (default 1d); updates in between")
    parser.add_argument(
        "--origin-every",
        default=None,
        help="forecast cadence (default: every bin); e.g. 5m for a quicker look at a long trace",
    )
    parser.add_argument("--window", default="14d", help="fit on at most this much recent history (default 14d)")
    parser.add_argument(
        "--min-train", default=None, help="history before the first forecast (default: 2d, less on short traces)"
    )
    parser.add_argument(
        "--score-outages",
        action="store_true",
        help="also score bins that look like metrics outages (zero amid traffic); by default they are not scored",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    parser.add_argument(
        "--plot", type=Path, default=None, metavar="OUT.png",
        help="also draw the forecasts against the actuals; the suffix picks the format (.png, .svg, .pdf, .jpg, .webp)",
    )
    add_arguments(parser)
    parser.set_defaults(handler=run)


def _steps(flag: str, text: str, step: int) -> int:
    return max(1, math.ceil(duration_flag(flag, text) / step))


def _level(text: str) -> int:
    try:
        level = int(text.strip())
    except ValueError:
        raise UserError(f"--levels: {text!r} is not an integer percentile in 1..99 (e.g. --levels 90)") from None
    if not 1 <= level <= 99:
        raise UserError(f"--levels: {level} is out of range; must be an integer percentile in 1..99")
    return level


def _factories(spec: str | None) -> dict[str, Callable[[], Forecaster]]:
    # Prophet logs "Importing plotly failed" at ERROR on import (Python's last-resort handler prints it on
    # stderr); we never use its interactive plots, and stderr must stay one line on errors.
    logging.getLogger("prophet.plot").setLevel(logging.CRITICAL)
    from models import registry  # deferred: model modules import statsmodels/prophet

    names = list(registry.MODEL_NAMES) if spec is None else [n.strip() for n in spec.split(",") if n.strip()]
    if not names:
        raise UserError(f"--models: no model named; valid names: {', '.join(registry.MODEL_NAMES)}")
    factories: dict[str, Callable[[], Forecaster]] = {}
    for name in names:
        try:
            registry.make_chain(name)
        except registry.UnknownModelError as exc:
            raise UserError(f"--models: {exc}") from None

        def factory(name: str = name) -> Forecaster:
            return registry.make_chain(name)

        factories[name] = factory
    return factories


def _series(trace_series: dict[str, TrafficSeries], which: str, trace_name: str) -> TrafficSeries:
    if which not in SERIES:
        raise UserError(f"--series: {which!r} is not one of {', '.join(SERIES)}")
    if which not in trace_series:
        have = ", ".join(trace_series)
        raise UserError(f"--series {which}: trace {trace_name} has no {which} column (it has: {have})")
    return trace_series[which]


def _nan_to_none(value: float) -> float | None:
    return None if math.isnan(value) else value


def _human(seconds: int) -> str:
    """``900 -> '15m'``, ``86400 -> '1d'``, ``2381580 -> '27.6d'``: whole units when exact, else one decimal."""
    for unit, size in (("d", 86_400), ("h", 3_600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}" if seconds % size == 0 else f"{seconds / size:.1f}{unit}"
    return f"{seconds}s"


def _table(results: dict[str, ModelResult], level: int) -> str:
    header = (
        f"{'model':<16}{'WAPE':>8}{'pinball':>9}{f'p{level} cover':>11}{'bias':>8}"
        f"{'fit s':>9}{'predict ms':>12}{'fallbacks':>11}"
    )
    lines = [header, "-" * len(header)]

    def num(value: float, fmt: str) -> str:
        return "n/a" if math.isnan(value) else format(value, fmt)

    for name, r in results.items():
        lines.append(
            f"{name:<16}{num(r.wape, '.3f'):>8}{num(r.pinball, '.3f'):>9}{num(r.coverage, '.3f'):>11}"
            f"{num(r.bias, '+.3f'):>8}{num(r.fit_seconds, '.3f'):>9}{num(r.predict_seconds * 1e3, '.2f'):>12}"
            f"{r.fallbacks:>11}"
        )
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    level = _level(args.levels)
    horizon_s = duration_flag("--horizon", args.horizon)
    for flag, value in (
        ("--refit-every", args.refit_every),
        ("--origin-every", args.origin_every),
        ("--window", args.window),
        ("--min-train", args.min_train),
    ):
        if value is not None:
            duration_flag(flag, value)  # every duration checked before the trace and the models load
    if args.plot is not None:
        plot_flag(args.plot)
    check_source_flags(args, args.trace)
    from_prometheus = wants_prometheus(args)
    if from_prometheus:
        parse_args(args, now=0)  # every Prometheus flag checked before the models load
    elif args.config is not None:
        raise UserError("--config is read for --prometheus-url/--deployment only (queries, auth, TLS); with a trace "
                        "it has no effect")
    if args.series not in SERIES:
        raise UserError(f"--series: {args.series!r} is not one of {', '.join(SERIES)}")
    unit, weights = demand_flags(args)
    tokens_demand = unit is DemandUnit.TOKENS
    if tokens_demand and args.series != "requests":
        raise UserError(f"--demand tokens forecasts the weighted token demand; --series {args.series} picks a single "
                        "column instead: give one or the other")
    label = f"tokens ({weights.describe()})" if tokens_demand else args.series
    factories = _factories(args.models)
    if from_prometheus:
        trace, url = trace_from_args(args, now=SystemClock().now(),
                                     tokens=tokens_demand or args.series in TOKEN_COLUMNS, title="fetch")
        source = f"{trace.name} from Prometheus at {url}"
    elif args.trace is not None:
        trace, source = load_trace(args.trace), str(args.trace)
    else:
        from autoscaler.synth import synth_trace

        trace = synth_trace()
        source = trace.name
    if tokens_demand:
        series = demand_series(trace, unit, weights, source=source)
    else:
        series = _series({"requests": trace.requests, **trace.tokens}, args.series, trace.name)
    if trace.nan_values:
        warn("backtest", f"{source}: {trace.nan_values:,} values are NaN; they are read as missing data (gaps, not "
                         "scored), not as zeros")
    holes = gaps(series)
    if holes.share > MOSTLY_MISSING:
        raise UserError(f"{source}: {holes.describe()}; too little of it has data to backtest: cut the trace to the "
                        "part with data")
    step = series.step_seconds
    config = BacktestConfig(
        horizon_steps=max(1, math.ceil(horizon_s / step)),
        level=level,
        refit_every_steps=_steps("--refit-every", args.refit_every, step),
        origin_every_steps=(
            DEFAULT_ORIGIN_EVERY_STEPS
            if args.origin_every is None
            else _steps("--origin-every", args.origin_every, step)
        ),
        history_window_steps=_steps("--window", args.window, step),
        min_train_steps=None if args.min_train is None else _steps("--min-train", args.min_train, step),
    )
    try:
        resolved = config.resolved(series, [make() for make in factories.values()])
    except InsufficientHistoryError as exc:
        found = f" (read from Prometheus at {url}, first to last bin with a value)" if from_prometheus else ""
        raise UserError(f"{trace.name}: {exc}{found}") from None
    window = resolved.history_window_steps
    assert window is not None
    if holes.longest_bins >= window:
        raise UserError(f"{source}: the longest gap is {format_span(holes.longest_seconds)}, from "
                        f"{iso_time(holes.longest_start)}, as long as the fit window ({_human(window * step)}, "
                        "--window): after it a model would have no history to fit; cut the trace at the gap (or widen "
                        "--window)")
    n_origins = len(resolved.origins(len(series)))
    if args.score_outages:
        actuals, n_outage = series, 0
    else:
        from models.clean import prepare  # deferred: pandas, paid only by this command

        actuals = prepare(series)
        n_outage = int(np.sum(np.isnan(actuals.values) & ~np.isnan(series.values)))

    bar = progress_for(n_origins * len(factories), list(factories), sys.stderr, "backtest")
    try:
        results = backtest(series, factories, resolved, bar, actuals=actuals)
    except InsufficientHistoryError as exc:  # a window without data the checks above did not foresee
        raise UserError(f"{trace.name}: {exc}") from None
    finally:
        bar.close()

    scored_horizon = config.horizon_steps * step
    if args.json:
        payload = {
            "trace": source,
            **({"demand": "tokens", "token_weights": {"input": weights.input, "output": weights.output}}
               if tokens_demand else {}),
            "horizon_seconds": scored_horizon,
            "level": level,
            "models": {
                name: {
                    "wape": _nan_to_none(r.wape),
                    "pinball": _nan_to_none(r.pinball),
                    "coverage": _nan_to_none(r.coverage),
                    "bias": _nan_to_none(r.bias),
                    "fit_seconds": _nan_to_none(r.fit_seconds),
                    "predict_seconds": _nan_to_none(r.predict_seconds),
                    "fallbacks": r.fallbacks,
                }
                for name, r in results.items()
            },
        }
        print(json.dumps(payload, allow_nan=False), flush=True)
        return _plot(args, results, f"{trace.name} ({label})", scored_horizon, level, list(factories),
                     "tokens/s" if tokens_demand else "requests/s" if args.series == "requests"
                     else f"{args.series.replace('_', ' ')}/s")

    assert resolved.min_train_steps is not None
    assert resolved.history_window_steps is not None
    if not from_prometheus and args.trace is None:
        from autoscaler.synth import describe

        print(describe(trace))
        print()
    rounded = "" if scored_horizon == horizon_s else f" ({_human(horizon_s)} rounded up to whole {_human(step)} bins)"
    print(
        f"Backtest of {label} in {trace.name}: {len(series)} bins of {_human(step)} "
        f"({_human(len(series) * step)}), "
        f"horizon {_human(scored_horizon)}{rounded}, p{level} upper band"
    )
    print(
        f"{n_origins} origins per model, every {_human(resolved.origin_every_steps * step)} after the first "
        f"{_human(resolved.min_train_steps * step)}; refit every {_human(resolved.refit_every_steps * step)} "
        f"on at most the last {_human(resolved.history_window_steps * step)}, updated in between"
    )
    print()
    print(_table(results, level))
    print()
    print(
        "WAPE = sum|actual - forecast| / sum actual; pinball = quantile loss of the band / mean actual; "
        f"p{level} cover = share of actuals at or below the band (ideal {level / 100:.2f}); "
        "bias < 0 = under-forecast; predict ms includes the updates between forecasts."
    )
    if n_outage:
        print(
            f"{n_outage} bins look like metrics outages (zero amid traffic, models.clean.prepare) and are not scored; "
            "--score-outages scores them."
        )
    for name, r in results.items():
        if r.fallbacks:
            print(f"{name}: {r.fallbacks} of {r.n_forecasts} forecasts fell back ({'; '.join(r.fallback_reasons)})")
    sys.stdout.flush()
    return _plot(args, results, f"{trace.name} ({label})", scored_horizon, level, list(factories),
                 "tokens/s" if tokens_demand else "requests/s" if args.series == "requests"
                 else f"{args.series.replace('_', ' ')}/s", say=True)


def _plot(args: argparse.Namespace, results: dict[str, ModelResult], trace_name: str, horizon_seconds: int,
          level: int, models: list[str], unit: str, say: bool = False) -> int:
    """Draw ``--plot`` (if given) after the results are printed, so that a plot that cannot be written (checked
    before the run, but a disk can fill or a directory go away since) costs the picture, not the scores: the error
    is one line on stderr and the exit status 1. ``say``: print where it was written."""
    if args.plot is None:
        return 0
    from autoscaler.plotting import plot_backtest  # deferred: matplotlib is slow to import

    try:
        plot_backtest(results, args.plot, trace_name=trace_name, horizon_seconds=horizon_seconds, level=level,
                      show=None if args.models is None else models, unit=unit)
    except OSError as exc:
        print(f"predictive-autoscaler backtest: error: --plot: cannot write {args.plot}: {exc.strerror or exc}",
              file=sys.stderr)
        return 1
    if say:
        print(f"plot written to {args.plot}")
    return 0
