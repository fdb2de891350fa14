"""A picture of a simulation: when each policy had capacity Ready, against the demand it had to meet.

Why it exists: the table says how many requests each policy dropped; the picture says *when*
(morning ramps, spikes, nights) and how early the predictive policy moves compared with the HPA.
Two weeks of 15-second ticks are unreadable as lines, so the figure has:

1. an overview of the whole trace: demand (hourly max and mean) with the zoom window shaded;
2. a two-day zoom around the busiest bin (after the first days, when the forecaster has history):
   demand and each policy's Ready capacity (Ready replicas x requests/s per replica);
3. the same two days: replicas held (Ready or starting) per policy, sharing the time axis with 2;
4. the same two days: requests waiting in each policy's queue (what users feel as delay).

Policies drawn: predictive, oracle, one reactive target (the one whose GPU-hours are closest to
the predictive policy's, i.e. the fair comparison) and the queue-driven HPA when it ran, so the
lines stay distinguishable.
Drawing uses ``matplotlib.figure.Figure`` with the Agg canvas (no ``pyplot``): headless, no global state.
"""

from __future__ import annotations

from datetime import UTC
from pathlib import Path

import numpy as np
from matplotlib import dates as mdates
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from autoscaler.plot_files import image_format
from autoscaler.simulation.engine import PolicyResult, SimulationResult
from models.types import FloatArray

# Timestamps below this are offsets from the trace start (ServeGen, Mooncake), not Unix time.
_ABSOLUTE_AFTER = 100_000_000
_STYLE = {
    "predictive": {"color": "#1f77b4", "lw": 1.6, "ls": "-"},
    "oracle": {"color": "#2ca02c", "lw": 0.9, "ls": "-"},
}
_QUEUE_HPA_STYLE = {"color": "#9467bd", "lw": 0.7, "ls": "-", "alpha": 0.45}
_REACTIVE_COLORS = ("#d62728", "#ff7f0e")
# Matplotlib date numbers are days since its epoch (1970-01-01 unless rcParams say otherwise).
_UNIX_EPOCH_IN_MPL_DAYS = float(mdates.date2num(np.datetime64(0, "s")))  # type: ignore[no-untyped-call]


def _chosen(result: SimulationResult) -> list[PolicyResult]:
    runs: list[PolicyResult] = [result.policies[n] for n in ("predictive", "oracle") if n in result.policies]
    reactive = result.reactive()
    if reactive:
        pred = result.policies.get("predictive")
        picks = [reactive[len(reactive) // 2]]  # the middle target when there is no predictive run
        if pred is not None:
            picks = [min(reactive, key=lambda r: abs(r.gpu_hours - pred.gpu_hours))]
        for r in picks:
            if all(r.name != have.name for have in runs):
                runs.append(r)
    queue_hpa = [r for name, r in result.policies.items() if name.startswith("hpa-queue@")]
    if queue_hpa:
        runs.append(queue_hpa[0])
    return runs[:5]


def zoom_window(result: SimulationResult, days: float = 2.0) -> tuple[int, int]:
    """Tick range ``[lo, hi)`` of about ``days`` around the busiest tick (skipping the first days when possible)."""
    n = int(result.demand.shape[0])
    per_day = 86_400 // result.tick_seconds
    width = min(n, int(days * per_day))
    skip = 3 * per_day if n >= 3 * per_day + width else 0
    demand = np.nan_to_num(result.demand[skip:], nan=-1.0)
    peak = skip + int(np.argmax(demand)) if demand.size else 0
    lo = max(skip if n - skip >= width else 0, min(peak - width // 2, n - width))
    return lo, lo + width


def _step_x(result: SimulationResult, lo: int, hi: int) -> tuple[np.ndarray, bool]:
    """x values for every tick in ``[lo, hi)``: datetimes (absolute traces) or hours since start."""
    ticks = result.start + result.tick_seconds * np.arange(lo, hi, dtype=np.int64)
    if result.start >= _ABSOLUTE_AFTER:
        days: np.ndarray = ticks / 86_400.0 + _UNIX_EPOCH_IN_MPL_DAYS
        return days, True
    return (ticks - result.start) / 3600.0, False


def _hourly(values: FloatArray, per_hour: int) -> tuple[FloatArray, FloatArray]:
    n = values.shape[0] // per_hour * per_hour
    blocks = np.nan_to_num(values[:n], nan=0.0).reshape(-1, per_hour)
    return blocks.mean(axis=1), blocks.max(axis=1)


def _format_time_axis(ax: Axes, absolute: bool, label: bool) -> None:
    if absolute:
        locator = mdates.AutoDateLocator(minticks=4, maxticks=10, tz=UTC)  # type: ignore[no-untyped-call]
        ax.xaxis.set_major_locator(locator)
        ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator, tz=UTC))  # type: ignore[no-untyped-call]
        if label:
            ax.set_xlabel("time (UTC)")
    elif label:
        ax.set_xlabel("hours since trace start")
    ax.grid(True, alpha=0.3)


def plot_simulation(result: SimulationResult, path: Path, zoom_days: float = 2.0, unit: str = "requests/s") -> None:
    """Write the overview + two-day zoom for ``result`` to ``path``, in the format its suffix names."""
    fmt = image_format(path)
    if not result.policies:
        raise ValueError("nothing to plot: no policy was simulated")
    runs = _chosen(result)
    cap = result.capacity_per_replica
    fig = Figure(figsize=(13, 12.5), dpi=110, layout="constrained")
    gs = fig.add_gridspec(4, 1, height_ratios=(1.0, 1.6, 1.2, 1.0))
    ax_all = fig.add_subplot(gs[0])
    ax_cap = fig.add_subplot(gs[1])
    ax_rep = fig.add_subplot(gs[2], sharex=ax_cap)
    ax_wait = fig.add_subplot(gs[3], sharex=ax_cap)

    # 1. overview (hourly blocks; shorter blocks on a trace of less than a couple of hours)
    per_hour = max(1, min(3600 // result.tick_seconds, int(result.demand.shape[0]) // 2))
    mean, peak = _hourly(result.demand, per_hour)
    n_hours = mean.shape[0]
    hx, absolute = _step_x(result, 0, n_hours * per_hour)
    hx = hx[::per_hour][:n_hours]
    ax_all.fill_between(hx, 0, peak, step="post", color="#999999", alpha=0.35, lw=0, label="demand, hourly max")
    ax_all.plot(hx, mean, drawstyle="steps-post", color="black", lw=0.8, label="demand, hourly mean")
    lo, hi = zoom_window(result, zoom_days)
    zx, _ = _step_x(result, lo, hi)
    ax_all.axvspan(zx[0], zx[-1], color="#1f77b4", alpha=0.12, label="zoomed below")
    ax_all.set_ylabel(unit)
    ax_all.set_title(f"{result.trace}: demand over the whole trace", loc="left", fontsize=11)
    ax_all.legend(loc="upper right", fontsize=8, ncol=3)
    _format_time_axis(ax_all, absolute, label=False)
    ax_all.set_xlim(hx[0], hx[-1])

    # 2. zoom: demand vs Ready capacity
    demand = np.nan_to_num(result.demand[lo:hi], nan=0.0)
    ax_cap.fill_between(zx, 0, demand, step="post", color="#888888", alpha=0.45, lw=0, label="demand")
    reactive_i = 0
    for run in runs:
        style = _STYLE.get(run.name)
        if style is None and run.name.startswith("hpa-queue@"):
            style = _QUEUE_HPA_STYLE
        if style is None:
            style = {"color": _REACTIVE_COLORS[reactive_i % 2], "lw": 1.0, "ls": "-"}
            reactive_i += 1
        label = (
            f"{run.name}: {run.gpu_hours:,.0f} GPU-h, SLO attained {100 * run.slo_attainment:.2f}%, "
            f"unserved {100 * run.unserved_fraction:.3f}%"
        )
        ax_cap.plot(zx, run.ready[lo:hi] * cap, drawstyle="steps-post", label=label, **style)  # type: ignore[arg-type]
        ax_rep.plot(zx, run.requested[lo:hi], drawstyle="steps-post", label=run.name, **style)  # type: ignore[arg-type]
        if run.waiting is not None:
            ax_wait.plot(zx, run.waiting[lo:hi], label=f"{run.name}: wait p99 {run.wait_p99_seconds:.1f}s",
                         **style)  # type: ignore[arg-type]
    # the queue-driven HPA can swing between min and max replicas: keep the scale on demand and the others
    steady = [r for r in runs if not r.name.startswith("hpa-queue@")] or runs
    top_cap = max(float(demand.max()) if demand.size else 0.0,
                  max(float(r.ready[lo:hi].max()) * cap for r in steady if r.ready[lo:hi].size))
    if top_cap > 0:
        ax_cap.set_ylim(0, 1.25 * top_cap)
    top_rep = max(int(r.requested[lo:hi].max()) for r in steady if r.requested[lo:hi].size)
    ax_rep.set_ylim(0, 1.25 * top_rep + 1)
    ax_wait.set_yscale("symlog", linthresh=1.0)
    ax_wait.set_ylim(bottom=0)
    ax_cap.set_ylabel(unit)
    ax_cap.set_title(
        f"{zoom_days:g}-day zoom around the busiest bin: Ready capacity (Ready replicas x {cap:.3g} {unit}) "
        "vs demand",
        loc="left",
        fontsize=11,
    )
    ax_cap.legend(loc="upper left", fontsize=8)
    _format_time_axis(ax_cap, absolute, label=False)
    ax_rep.set_ylabel("replicas held (Ready + starting)")
    ax_rep.set_title("replicas held per policy (GPU-hours are the area under these lines)", loc="left", fontsize=11)
    ax_rep.legend(loc="upper left", fontsize=8)
    _format_time_axis(ax_rep, absolute, label=False)
    ax_rep.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax_wait.set_ylabel("requests waiting (symlog)")
    ax_wait.set_title(
        f"requests waiting in the queue (dropped after {result.queue.timeout_seconds:g}s; the SLO is a start within "
        f"{result.queue.slo_wait_seconds:g}s)", loc="left", fontsize=11,
    )
    ax_wait.legend(loc="upper left", fontsize=8)
    _format_time_axis(ax_wait, absolute, label=True)
    ax_wait.set_xlim(zx[0], zx[-1])

    FigureCanvasAgg(fig)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format=fmt)
