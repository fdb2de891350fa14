"""Draw one day of the main job: the forecast, the replicas and the nodes the predictive policy held.

The README's picture, docs/img/a-day.png, is made by this script, from the repository root:

    .venv/bin/python scripts/plot_a_day.py -o docs/img/a-day.png

It runs the real ``predictive-autoscaler simulate`` command (the same argument parsing, configuration, forecaster,
planner, self-tuning and simulated cluster) on the embedded synthetic traffic with only the predictive policy, and
records, while it runs, what the table does not keep: the forecast the policy held at each bin and the GPU nodes
of the simulated cluster. Two hooks make that possible without changing the command: ``factory`` (which builds
the predictive policy) is wrapped so the policy it builds is observed, and ``simulate`` (the engine) is wrapped so
its result is kept. Then one day is drawn in three panels that share the time axis:

1. demand (requests/s per minute) and the forecast made one cold start earlier: its median and its band;
2. replicas: asked for (billed from the ask) and Ready, against the replicas the demand needed at that moment;
3. GPU nodes in the simulated cluster (Ready or provisioning).

The same command gives the same picture (the traffic is seeded); it takes about half a minute.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import math
import sys
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

DAY = 86_400
# Thursday 2024-03-14: a weekday after the synthetic traffic's level shift, with the forecaster on 10 days of history.
DEFAULT_DAY = "2024-03-14"


class Recorder:
    """Wraps the predictive policy ``simulate`` builds: forwards every call, and notes the forecast it holds at
    each bin and the nodes of the cluster at each tick."""

    def __init__(self, inner: Any, lead_seconds: int) -> None:
        self.inner = inner
        self.lead_seconds = lead_seconds
        self.nodes: list[int] = []
        self.forecast: dict[int, tuple[float, float, int]] = {}  # target time -> (median, upper band, level)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def decide(self, k: int, cluster: Any, demand: float) -> int:
        self.nodes.append(len(cluster.nodes))
        desired = int(self.inner.decide(k, cluster, demand))
        inner = self.inner
        if k % inner.per_bin == 0 and inner.forecast is not None:
            fc = inner.forecast
            h = min(fc.horizon - 1, max(0, math.ceil(self.lead_seconds / fc.step_seconds) - 1))
            level = max(q for q in fc.quantiles if q != 50) if len(fc.quantiles) > 1 else 50
            median = fc.quantiles.get(50, fc.mean)
            target = int(fc.start + h * fc.step_seconds)
            self.forecast[target] = (float(median[h]), float(fc.quantiles[level][h]), level)
        return desired


@contextlib.contextmanager
def observed() -> Iterator[dict[str, Any]]:
    """While inside: every predictive policy ``simulate`` builds is a :class:`Recorder`, and the engine's result
    is kept; yields ``{"recorder": ..., "result": ..., "cluster": ...}``."""
    from autoscaler.simulation import engine, predictive

    seen: dict[str, Any] = {}
    real_factory, real_simulate = predictive.factory, engine.simulate

    def factory(*args: Any, **kwargs: Any) -> Callable[..., Any]:
        build = real_factory(*args, **kwargs)

        def wrapped(series: Any, config: Any, cluster: Any) -> Any:
            lead = cluster.pod_startup_seconds + cluster.node_startup_seconds
            seen["recorder"] = Recorder(build(series, config, cluster), lead)
            seen["cluster"] = cluster
            return seen["recorder"]

        return wrapped

    def simulate(*args: Any, **kwargs: Any) -> Any:
        seen["result"] = real_simulate(*args, **kwargs)
        return seen["result"]

    predictive.factory, engine.simulate = factory, simulate
    try:
        yield seen
    finally:
        predictive.factory, engine.simulate = real_factory, real_simulate


def run_simulate(argv: list[str]) -> dict[str, Any]:
    """``predictive-autoscaler simulate ARGV`` with the policy observed; its table goes to stderr."""
    from autoscaler.cli import main

    with observed() as seen, contextlib.redirect_stdout(io.StringIO()) as out:
        code = main(["simulate", *argv])
    print(out.getvalue(), file=sys.stderr)
    if code != 0 or "result" not in seen:
        raise SystemExit(f"simulate failed (exit {code})")
    return seen


def draw(seen: dict[str, Any], day: str, path: Path) -> None:
    from matplotlib import dates as mdates
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    result, rec, cluster = seen["result"], seen["recorder"], seen["cluster"]
    run = result.policies["predictive"]
    tick = result.tick_seconds
    start = int(datetime.fromisoformat(day).replace(tzinfo=UTC).timestamp())
    lo = (start - result.start) // tick
    hi = lo + DAY // tick
    if lo < 0 or hi > result.demand.shape[0]:
        raise SystemExit(f"{day} is not a whole day of the simulated trace")
    times = result.start + tick * np.arange(lo, hi)
    # matplotlib date numbers (days since its epoch), which its date locator and formatter below read
    epoch = float(mdates.date2num(np.datetime64(0, "s")))  # type: ignore[no-untyped-call]
    x = epoch + times.astype(np.float64) / DAY
    cap = result.capacity_per_replica
    demand = np.nan_to_num(result.demand[lo:hi], nan=0.0)

    fc_times = sorted(t for t in rec.forecast if start <= t < start + DAY)
    fx = epoch + np.asarray(fc_times, dtype=np.float64) / DAY
    median = np.array([rec.forecast[t][0] for t in fc_times])
    upper = np.array([rec.forecast[t][1] for t in fc_times])
    levels = sorted({rec.forecast[t][2] for t in fc_times})
    lead_min = rec.lead_seconds / 60

    fig = Figure(figsize=(11, 7.2), dpi=90, layout="constrained")
    gs = fig.add_gridspec(3, 1, height_ratios=(1.5, 1.3, 0.6))
    ax_d = fig.add_subplot(gs[0])
    ax_r = fig.add_subplot(gs[1], sharex=ax_d)
    ax_n = fig.add_subplot(gs[2], sharex=ax_d)

    ax_d.plot(x, demand, color="#555555", lw=0.6, label="demand (requests/s)")
    band = "/".join(f"p{v}" for v in levels)
    ax_d.fill_between(fx, median, upper, step="post", color="#1f77b4", alpha=0.25, lw=0,
                      label=f"forecast band, median to {band}")
    ax_d.plot(fx, median, drawstyle="steps-post", color="#1f77b4", lw=1.2,
              label=f"forecast median, made {lead_min:g} min earlier (the cold start)")
    ax_d.set_ylabel("requests/s")
    ax_d.set_ylim(bottom=0)
    ax_d.set_title(f"One day of predictive-autoscaler simulate ({result.trace}, {day}): forecast, replicas, nodes",
                   loc="left", fontsize=11)
    ax_d.legend(loc="upper left", fontsize=8)

    needed = np.ceil(demand / cap)
    ax_r.plot(x, needed, drawstyle="steps-post", color="#999999", lw=0.7, label="replicas the demand needed then")
    ax_r.plot(x, run.requested[lo:hi], drawstyle="steps-post", color="#ff7f0e", lw=1.2,
              label="replicas asked for (billed)")
    ax_r.plot(x, run.ready[lo:hi], drawstyle="steps-post", color="#2ca02c", lw=1.2, label="replicas Ready")
    ax_r.set_ylabel("replicas")
    ax_r.set_ylim(bottom=0)
    ax_r.legend(loc="upper left", fontsize=8)

    nodes = np.asarray(rec.nodes[lo:hi])
    ax_n.plot(x, nodes, drawstyle="steps-post", color="#9467bd", lw=1.4,
              label=f"GPU nodes ({cluster.gpus_per_node} GPUs each, Ready or provisioning)")
    ax_n.set_ylabel("nodes")
    ax_n.set_ylim(0, max(1, int(nodes.max())) + 1)
    ax_n.legend(loc="upper left", fontsize=8)
    ax_n.set_xlabel("time (UTC)")

    locator = mdates.HourLocator(byhour=range(0, 24, 3), tz=UTC)  # type: ignore[no-untyped-call]
    ax_n.xaxis.set_major_locator(locator)
    ax_n.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M", tz=UTC))  # type: ignore[no-untyped-call]
    for ax in (ax_d, ax_r, ax_n):
        ax.grid(True, alpha=0.3)
    ax_d.set_xlim(x[0], x[-1])
    FigureCanvasAgg(fig)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format=path.suffix.lstrip(".") or "png")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("-o", "--output", type=Path, default=Path("docs/img/a-day.png"))
    parser.add_argument("--day", default=DEFAULT_DAY, help="the UTC day to draw, YYYY-MM-DD (default %(default)s)")
    args = parser.parse_args(argv)
    seen = run_simulate(["--policies", "predictive"])
    draw(seen, args.day, args.output)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
