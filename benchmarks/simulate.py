"""Benchmark: does the predictive policy beat the reactive HPA, and how close is it to the oracle?

Run ``python -m benchmarks.simulate``. On every multi-day trace in ``../shared/traces`` it simulates
the predictive policy (default model, the planner's defaults), the oracle and the Kubernetes HPA at
utilisation targets 0.3..0.9, with the CLI's defaults (replicas sized so the trace's peak needs 20,
pod start-up 120 s, node start-up 180 s, 1 GPU per replica, 8 per node). Then:

* **unserved cut**: the HPA's unserved fraction interpolated (between targets) at the predictive
  policy's GPU-hours, against the predictive policy's. Target: predictive unserves >= 90 % less;
* **GPU-hours vs oracle**: target <= 1.15x. For context the table also gives a *hindsight floor*:
  the GPU-hours of holding, each tick, the largest need within 5 minutes either side (the planner's
  look-ahead window), i.e. what knowing the future exactly but not to the minute would still cost;
* **speed**: a week of 1-minute traffic (the first 7 days of the NASA trace) through the predictive
  policy including forecasting, CPU seconds of this process (one core). Target < 10 s.

Results go to the "simulate" section of docs/BENCHMARKS.md (``--no-write`` to only print).
"""

from __future__ import annotations

import argparse
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from autoscaler.simulation.engine import (
    PolicyResult,
    SimulationConfig,
    SimulationResult,
    forward_max,
    need_per_tick,
    reactive_at,
    simulate,
)
from autoscaler.simulation.predictive import factory
from autoscaler.traces import load_trace
from benchmarks.report import machine, update_section
from models import registry
from models.types import SECONDS_PER_DAY, TrafficSeries

TRACES = Path(__file__).resolve().parents[2] / "shared" / "traces"
PEAK_REPLICAS = 20
TARGETS = (0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
CUT_TARGET = 0.90
ORACLE_TARGET = 1.15
SPEED_TARGET_SECONDS = 10.0
SPEED_TRACE = "nasa_http_1995_jul_1min.csv"
HINDSIGHT_SECONDS = 300  # the planner's default look-ahead window

# Measured while choosing the defaults (see the section text); kept next to the code that prints it.
READING = """
Reading the table. *Cold-start share* is the part of the predictive policy's unserved requests that replicas it
had already asked for would have served had they been Ready: where it is ~100%, the planner always asked for enough
(its reactive floor answers a burst at the next decision) and every miss is a rise that came faster than the forecast
band within one start-up (120 s, 300 s when a node is needed). No planner knob closes that gap at equal GPU-hours:
trying level 90/95, look-ahead 0/60/300 s, scale-down stabilisation 300/600 s and warm pool auto/0 on the bundled
NASA and ServeGen m_small traces moved the cut by at most 3 points (warm pool 0 lowers GPU-hours to 1.12x oracle on
m_small but the cut falls from 46% to 30%), so the simulator runs the planner's defaults. What would move it: bands
for the *maximum* over the start-up lead rather than per-bin quantiles (bursts look multiplicative, while
square-root-space bands are narrowest in relative terms at peaks: our reading, not yet measured), a warm pool sized
from the trace's own burst statistics, and shorter start-ups (warm nodes). The 1.15x-oracle target is near the floor
already: knowing the future exactly but holding each 5-minute neighbourhood's peak (the planner's look-ahead window)
costs 1.03-1.17x; the p99 warm pool and the 10-minute scale-down stabilisation add the rest. On the sparse LoRA trace
(70% empty minutes, peak 20x the typical minute) sizing by the peak leaves 1 replica idling most of the time, and
misses are isolated bursts no forecast sees.
"""


@dataclass(frozen=True)
class Row:
    trace: str
    days: float
    step: int
    pred_gpu_hours: float
    oracle_gpu_hours: float
    pred_unserved: float
    reactive_unserved: float
    between: str
    extrapolated: bool
    noise_floor: float  # hindsight: the largest need within 5 min either side, GPU-hours / oracle's
    seconds: float
    notes: tuple[str, ...]
    cold_share: float  # of the predictive policy's unserved requests, those its starting replicas would have served

    @property
    def cut(self) -> float:
        if self.reactive_unserved <= 0:
            return math.nan
        return 1.0 - self.pred_unserved / self.reactive_unserved

    @property
    def oracle_ratio(self) -> float:
        return self.pred_gpu_hours / self.oracle_gpu_hours


def _config(series: TrafficSeries) -> SimulationConfig:
    peak = float(np.nanmax(series.values))
    return SimulationConfig(
        capacity_per_replica=peak / PEAK_REPLICAS, reactive_targets=TARGETS, max_replicas=4 * PEAK_REPLICAS
    )


def run_trace(path: Path, overrides: dict[str, Any] | None = None) -> Row:
    trace = load_trace(path)
    series = trace.requests
    config = _config(series)
    t0 = time.perf_counter()
    predictive = factory(lambda: registry.make_chain("default"), policy_overrides=overrides)
    result = simulate(series, config, trace.name, predictive=predictive)
    seconds = time.perf_counter() - t0
    pred, oracle = result.policies["predictive"], result.policies["oracle"]
    same = reactive_at(pred.gpu_hours, result.reactive())
    assert same is not None
    need = need_per_tick(result.demand, config.capacity_per_replica, config.min_replicas)
    half = HINDSIGHT_SECONDS // result.tick_seconds
    floor = np.roll(forward_max(need, 2 * half), half)
    floor[:half] = need[:half]
    tick_hours = result.tick_seconds / 3600
    return Row(
        trace=trace.name,
        days=trace.duration_seconds / SECONDS_PER_DAY,
        step=series.step_seconds,
        pred_gpu_hours=pred.gpu_hours,
        oracle_gpu_hours=oracle.gpu_hours,
        pred_unserved=pred.unserved_fraction,
        reactive_unserved=same.unserved_fraction,
        between=f"{same.between[0]}..{same.between[1]}" if not same.extrapolated else f"~{same.between[0]}",
        extrapolated=same.extrapolated,
        noise_floor=float(floor.sum()) * tick_hours / oracle.gpu_hours,
        seconds=seconds,
        notes=result.notes,
        cold_share=pred.cold_start_requests / unserved if (unserved := _unserved_requests(result, pred)) > 0 else 0.0,
    )


def _unserved_requests(result: SimulationResult, run: PolicyResult) -> float:
    total = float(np.nansum(result.demand)) * result.tick_seconds
    return run.unserved_fraction * total


def time_week(path: Path) -> tuple[float, float, dict[str, float]]:
    """(CPU s, wall s, wall s by part) to simulate the predictive policy over the first 7 days of ``path``."""
    series = load_trace(path).requests
    week = series.head(7 * SECONDS_PER_DAY // series.step_seconds)
    config = SimulationConfig(
        capacity_per_replica=float(np.nanmax(week.values)) / PEAK_REPLICAS, policies=("predictive",)
    )
    registry.make_chain("default")  # import the model modules outside the timed region
    cpu0, wall0 = time.process_time(), time.perf_counter()
    result = simulate(week, config, path.name, predictive=factory(lambda: registry.make_chain("default")))
    return time.process_time() - cpu0, time.perf_counter() - wall0, result.timings


def multi_day(path: Path) -> bool:
    trace = load_trace(path)
    return trace.duration_seconds >= 2 * SECONDS_PER_DAY


def _verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def markdown(rows: list[Row], cpu: float, wall: float, parts: dict[str, float]) -> str:
    lines = [
        "## simulate",
        "",
        "`python -m benchmarks.simulate`: each multi-day trace through the simulated cluster (replicas sized so the "
        f"peak needs {PEAK_REPLICAS}; pod start-up 120 s, node start-up 180 s, 1 GPU/replica, 8 GPUs/node; "
        "predictive = default model + planner defaults, deciding every 30 s; HPA targets "
        f"{', '.join(f'{t:g}' for t in TARGETS)}). *HPA at same GPU-h* is the HPA's unserved fraction interpolated "
        "between targets at the predictive policy's GPU-hours. *5-min hindsight* is the GPU-hours, over the oracle's, "
        "of holding the largest need within 5 minutes either side (the planner's look-ahead window) with perfect "
        "knowledge: the price of not knowing the minute a burst lands in.",
        "",
        "| trace | days | predictive unserved (cold-start share) | HPA at same GPU-h | cut (target >= 90%) "
        "| predictive / oracle GPU-h (target <= 1.15) | 5-min hindsight / oracle | sim s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        cut = "n/a (HPA served all)" if math.isnan(r.cut) else f"{100 * r.cut:.0f}% {_verdict(r.cut >= CUT_TARGET)}"
        extra = " (extrapolated)" if r.extrapolated else ""
        lines.append(
            f"| {r.trace} | {r.days:.1f} | {100 * r.pred_unserved:.3f}% ({100 * r.cold_share:.0f}%) | "
            f"{100 * r.reactive_unserved:.3f}% "
            f"({r.between}){extra} | {cut} | {r.oracle_ratio:.2f}x {_verdict(r.oracle_ratio <= ORACLE_TARGET)} | "
            f"{r.noise_floor:.2f}x | {r.seconds:.0f} |"
        )
    lines += [
        "",
        f"Speed: one week of 1-minute traffic ({SPEED_TRACE}, first 7 days), predictive policy including "
        f"forecasting: **{cpu:.1f} s CPU** ({wall:.1f} s wall on a shared machine), target < "
        f"{SPEED_TARGET_SECONDS:.0f} s: {_verdict(cpu < SPEED_TARGET_SECONDS)}. Of the wall time, the forecaster "
        f"(daily fit, one update and one predict per bin) took {parts.get('predictive_forecast', math.nan):.1f} s and "
        f"the planner (one call per 30 s) {parts.get('predictive_plan', math.nan):.1f} s; the rest is the cluster "
        f"model. Machine: {machine()}.",
        "",
        " ".join(READING.split()),
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--traces", default=None, help="only trace files whose name contains this")
    parser.add_argument("--no-write", action="store_true", help="print the section without writing the doc")
    args = parser.parse_args(argv)
    paths = sorted(p for p in TRACES.glob("*.csv") if multi_day(p) and (args.traces is None or args.traces in p.name))
    rows: list[Row] = []
    for path in paths:
        row = run_trace(path)
        rows.append(row)
        print(
            f"{row.trace}: cut {100 * row.cut:.0f}%, {row.oracle_ratio:.2f}x oracle, 5-min hindsight "
            f"{row.noise_floor:.2f}x, {row.seconds:.0f}s; {'; '.join(row.notes)}",
            flush=True,
        )
    cpu, wall, parts = time_week(TRACES / SPEED_TRACE)
    text = markdown(rows, cpu, wall, parts)
    print(text)
    if not args.no_write and args.traces is None:
        update_section("simulate", text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
