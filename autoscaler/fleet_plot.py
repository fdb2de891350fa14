"""A picture of a fleet replay: nodes and dollars per hour over time, per NodePool and per team.

Why it exists: the fleet table says what each policy paid in total; the picture says *when* (nights, peaks, the
headroom held ahead of rises) and *who* (which team's pods the nodes carried, and how much was idle). One column
per policy run drawn (the predictive runs and the HPA + Karpenter target closest to the predictive run in billed
GPU-hours), two rows: nodes billed per NodePool (stacked), and $/h as billed stacked by team, with the idle part
of the nodes on top. Hourly means, so two weeks stay readable. Drawn with ``matplotlib.figure.Figure`` on the Agg
canvas (no ``pyplot``), like ``autoscaler.sim_plot``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from autoscaler.plot_files import image_format
from autoscaler.simulation.fleet import FleetConfig, FleetRun
from models.types import FloatArray

_PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf", "#bcbd22")
_IDLE = "#c7c7c7"


def _hourly(values: FloatArray, tick_seconds: int) -> FloatArray:
    per = max(1, 3600 // tick_seconds)
    n = len(values) // per
    if n == 0:
        return np.asarray(values, dtype=np.float64)
    out: FloatArray = values[: n * per].reshape(n, per).mean(axis=1)
    return out


def _chosen(runs: list[FleetRun]) -> list[FleetRun]:
    ours = [r for r in runs if not r.name.startswith("reactive@")]
    hpa = [r for r in runs if r.name.startswith("reactive@")]
    if hpa:
        ref = ours[0].billed_gpu_hours if ours else float(np.median([r.billed_gpu_hours for r in hpa]))
        ours.append(min(hpa, key=lambda r: abs(r.billed_gpu_hours - ref)))
    return ours


def plot_fleet(runs: list[FleetRun], config: FleetConfig, path: str | Path) -> None:
    """Write the figure to ``path`` (format from its extension)."""
    chosen = _chosen(runs)
    fig = Figure(figsize=(5.5 * len(chosen) + 1, 7.5), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(2, len(chosen), squeeze=False, sharex=True)
    top_nodes = 0.0
    top_usd = 0.0
    for col, r in enumerate(chosen):
        hours = None
        ax_n, ax_d = axes[0][col], axes[1][col]
        stacks = [_hourly(r.nodes[p.name].astype(np.float64), r.tick_seconds) for p in config.pools]
        hours = np.arange(len(stacks[0]))
        ax_n.stackplot(hours, *stacks, labels=[p.name for p in config.pools], colors=_PALETTE[: len(stacks)])
        top_nodes = max(top_nodes, float(np.sum(stacks, axis=0).max()) if stacks else 0.0)
        teams = [t for t in r.team_usd if t != "(idle)"]
        usd = [_hourly(r.team_usd[t], r.tick_seconds) for t in (*teams, "(idle)")]
        ax_d.stackplot(hours, *usd, labels=[*teams, "idle (billed, no pod)"],
                       colors=[*_PALETTE[: len(teams)], _IDLE])
        top_usd = max(top_usd, float(np.sum(usd, axis=0).max()) if usd else 0.0)
        if config.cluster_ceiling is not None:
            ax_d.axhline(config.cluster_ceiling, color="black", lw=0.8, ls="--", label="cluster ceiling")
        ax_n.set_title(f"{r.name}: {r.node_hours:,.0f} node-h, ${r.cost_usd:,.0f}, "
                       f"{100 * r.slo_attainment:.2f}% in SLO", fontsize=9)
        ax_d.set_xlabel("hours since the start")
        if col == 0:
            ax_n.set_ylabel("nodes billed (hourly mean)")
            ax_d.set_ylabel("$/h as billed, by team (hourly mean)")
            ax_n.legend(loc="upper left", fontsize=7)
            ax_d.legend(loc="upper left", fontsize=7)
    for col in range(len(chosen)):
        axes[0][col].set_ylim(0, top_nodes * 1.1 + 1)
        axes[1][col].set_ylim(0, max(top_usd, config.cluster_ceiling or 0.0) * 1.1 + 1)
    fig.savefig(str(path), format=image_format(path), dpi=110)
