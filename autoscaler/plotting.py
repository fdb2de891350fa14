"""Pictures of backtests: what an operator looks at before trusting a forecaster.

Why it exists: a table of WAPE and coverage says *how much* a model misses, not *when* (peaks,
ramps, nights) nor whether the band is wide where it matters. ``plot_backtest`` draws, for a few
models, the actual demand against the forecast made ``h`` steps earlier with its upper band
shaded, over the last few days of the backtest, next to a bar chart of WAPE for every model.

Drawing uses ``matplotlib.figure.Figure`` with the Agg canvas directly (no ``pyplot``), so it
works headless and leaves no global state behind. Simulation plots live in their own module.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import UTC
from pathlib import Path

import numpy as np
from matplotlib import dates as mdates
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from numpy.typing import NDArray

from autoscaler.plot_files import image_format
from models.evaluation import ModelResult
from models.types import FloatArray

# Timestamps below this are offsets from the trace start (ServeGen, Mooncake), not Unix time.
_ABSOLUTE_AFTER = 100_000_000
_PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2")
_MAX_PANELS = 4
_MAX_POINTS = 1_440  # per panel: a day of 1-minute forecasts; more is a solid smear at this width


def _duration(seconds: int) -> str:
    for unit, size in (("d", 86_400), ("h", 3_600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds // size}{unit}"
    if seconds >= 3_600:
        return f"{seconds / 3_600:.1f}h"
    return f"{seconds // 60}m" if seconds % 60 == 0 else f"{seconds}s"


def plot_backtest(
    results: Mapping[str, ModelResult],
    path: Path,
    *,
    trace_name: str,
    horizon_seconds: int,
    level: int,
    show: Sequence[str] | None = None,
    window_seconds: int = 2 * 86_400,
    unit: str = "requests/s",
) -> None:
    """Write a picture of a backtest to ``path``, in the format its suffix names (``plot_files.PLOT_FORMATS``).

    ``show`` names the models drawn as time panels (at most four; default: ``default`` and
    ``persistence`` when present, else the first two); every model gets a WAPE and a coverage bar.
    The panels show the last ``window_seconds`` (two days), cut to at most 1,440 forecasts (one
    day of 1-minute bins) so the lines stay readable.
    """
    fmt = image_format(path)
    if not results:
        raise ValueError("nothing to plot: no model results")
    names = list(results)
    colors = {name: _PALETTE[i % len(_PALETTE)] for i, name in enumerate(names)}
    if show is None:
        preferred = [n for n in ("default", "persistence") if n in results]
        show = preferred if preferred else names[:2]
    panels = [n for n in show if n in results][:_MAX_PANELS]
    if not panels:
        raise ValueError(f"none of {list(show)} is among the results ({names})")

    fig = Figure(figsize=(14, 1.2 + 3.0 * max(2, len(panels))), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    grid = fig.add_gridspec(len(panels), 2, width_ratios=(4.2, 1.3))
    fig.suptitle(
        f"Backtest of {trace_name}: forecast {_duration(horizon_seconds)} ahead vs actual, p{level} upper band",
        fontsize=13,
        fontweight="bold",
    )

    windows = {name: _window(results[name].target_timestamps, window_seconds, _MAX_POINTS) for name in panels}
    top = _y_top([results[n].actual[windows[n]] for n in panels], [results[n].upper[windows[n]] for n in panels])
    first_ax = None
    for row, name in enumerate(panels):
        r = results[name]
        ax = fig.add_subplot(grid[row, 0], sharex=first_ax, sharey=first_ax)  # same scales: panels compare
        first_ax = first_ax or ax
        keep = windows[name]
        t, actual, point, upper = _with_gaps(r.target_timestamps[keep], r.actual[keep], r.point[keep], r.upper[keep])
        absolute = bool(t.size) and int(t[0]) >= _ABSOLUTE_AFTER
        # matplotlib date numbers are days since its epoch (1970-01-01 unless configured otherwise)
        x = t / 86_400.0 + _epoch_offset_days() if absolute else t / 3_600.0
        color = colors[name]
        ax.fill_between(x, point, upper, color=color, alpha=0.25, lw=0, label=f"band up to p{level}")
        ax.plot(x, actual, color="black", lw=0.7, alpha=0.75, label="actual")
        ax.plot(x, point, color=color, lw=1.3, label=f"forecast made {_duration(horizon_seconds)} earlier")
        ax.set_title(
            f"{name}: WAPE {_fmt(r.wape)}, p{level} coverage {_fmt(r.coverage)}, bias {_fmt(r.bias, signed=True)}"
            f" (whole backtest, {r.n_forecasts} forecasts)",
            fontsize=10,
            loc="left",
        )
        ax.set_ylabel(unit)
        ax.set_ylim(0, top)
        ax.grid(alpha=0.3)
        ax.legend(loc="upper left", fontsize=8, ncol=3, framealpha=0.8)
        if absolute:
            locator = mdates.AutoDateLocator(minticks=4, maxticks=10, tz=UTC)  # type: ignore[no-untyped-call]
            formatter = mdates.ConciseDateFormatter(locator, tz=UTC, show_offset=True)  # type: ignore[no-untyped-call]
            ax.xaxis.set_major_locator(locator)
            ax.xaxis.set_major_formatter(formatter)
        if row == len(panels) - 1:
            ax.set_xlabel("time (UTC)" if absolute else "hours since trace start")
        else:
            ax.tick_params(labelbottom=False)

    right = grid[:, 1].subgridspec(2, 1, hspace=0.1)
    order = sorted(names, key=lambda n: (math.isnan(results[n].wape), results[n].wape))
    reference = results["persistence"].wape if "persistence" in results else math.nan
    _bar_chart(
        fig.add_subplot(right[0]),
        order,
        [results[n].wape for n in order],
        colors,
        title="WAPE, lower is better" + ("\n(dashed: persistence)" if not math.isnan(reference) else ""),
        reference=reference,
    )
    _bar_chart(
        fig.add_subplot(right[1]),
        order,
        [results[n].coverage for n in order],
        colors,
        title=f"p{level} coverage\n(dashed: target {level / 100:.2f})",
        reference=level / 100,
        limit=1.0,
    )

    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format=fmt)


def _window(timestamps: NDArray[np.int64], seconds: int, max_points: int) -> NDArray[np.bool_]:
    """The points in the last ``seconds`` of a backtest, shortened to at most ``max_points`` points
    (the whole backtest, or two days of 1-minute forecasts, is too dense to read)."""
    if timestamps.size == 0:
        return np.zeros(0, dtype=bool)
    if timestamps.size > 1:
        spacing = int(np.min(np.diff(timestamps)))
        seconds = min(seconds, spacing * (max_points - 1))
    return np.asarray(timestamps >= timestamps[-1] - seconds, dtype=bool)


def _with_gaps(t: NDArray[np.int64], *columns: FloatArray) -> tuple[FloatArray, ...]:
    """Put the scored points on their regular grid with NaN where nothing was scored (missing or outage
    actuals), so lines break at a gap instead of drawing a straight segment across it."""
    if t.size < 2:
        return (t.astype(np.float64), *columns)
    spacing = int(np.min(np.diff(t)))
    idx = (t - t[0]) // spacing
    grid_t = (t[0] + spacing * np.arange(int(idx[-1]) + 1)).astype(np.float64)
    out = []
    for col in columns:
        full = np.full(grid_t.shape, np.nan)
        full[idx] = col
        out.append(full)
    return (grid_t, *out)


def _y_top(actuals: Sequence[FloatArray], uppers: Sequence[FloatArray]) -> float:
    """Every actual in view, bands up to their 99th percentile (one wild band must not flatten the plot),
    plus a fifth on top for the legend."""
    a = np.concatenate([np.asarray(x, dtype=np.float64) for x in actuals]) if actuals else np.zeros(0)
    u = np.concatenate([np.asarray(x, dtype=np.float64) for x in uppers]) if uppers else np.zeros(0)
    a, u = a[np.isfinite(a)], u[np.isfinite(u)]
    peak = max(float(a.max()) if a.size else 0.0, float(np.quantile(u, 0.99)) if u.size else 0.0)
    return 1.2 * peak if peak > 0 else 1.0


def _epoch_offset_days() -> float:
    epoch = str(mdates.get_epoch())  # type: ignore[no-untyped-call]
    return float((np.datetime64(0, "s") - np.datetime64(epoch, "s")) / np.timedelta64(1, "D"))


def _bar_chart(
    ax: Axes,
    names: list[str],
    values: list[float],
    colors: Mapping[str, str],
    *,
    title: str,
    reference: float,
    limit: float | None = None,
) -> None:
    shown = [0.0 if math.isnan(v) else v for v in values]
    y = np.arange(len(names))
    ax.barh(y, shown, height=0.6, color=[colors[n] for n in names])
    ax.set_yticks(y, names)
    ax.invert_yaxis()
    top = limit if limit is not None else (max(shown, default=0.0) or 1.0)
    for yi, v, raw in zip(y, shown, values, strict=True):
        ax.text(v + top * 0.02, float(yi), _fmt(raw), va="center", fontsize=9)
    ax.set_xlim(0, top * 1.3)
    if not math.isnan(reference):
        ax.axvline(reference, color="grey", ls="--", lw=1)
    ax.set_title(title, fontsize=10)
    ax.grid(axis="x", alpha=0.3)


def _fmt(value: float, signed: bool = False) -> str:
    if math.isnan(value):
        return "n/a"
    if abs(value) < 0.0005:
        value = 0.0
    return f"{value:+.3f}" if signed else f"{value:.3f}"
