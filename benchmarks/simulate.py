"""Benchmark: does the predictive policy beat the reactive HPA, and how close is it to the oracle?

Run ``python -m benchmarks.simulate``. On every multi-day trace in ``../shared/traces`` it simulates
the predictive policy (the default forecast profile), the oracle and the Kubernetes HPA at
utilisation targets 0.3..0.9, with the CLI's defaults (replicas sized so the trace's peak needs 20,
pod start-up 120 s, node start-up 180 s, 1 GPU per replica, 8 per node). Then:

* **unserved cut**: the HPA's unserved fraction interpolated (between targets) at the predictive
  policy's GPU-hours, against the predictive policy's. Target: predictive unserves >= 90 % less;
* **GPU-hours vs oracle**: target <= 1.15x. For context the table also gives a *hindsight floor*:
  the GPU-hours of holding, each tick, the largest need within 5 minutes either side (the planner's
  look-ahead window), i.e. what knowing the future exactly but not to the minute would still cost;
* **speed**: a week of 1-minute traffic (the first 7 days of the NASA trace) through the predictive
  policy including forecasting, CPU seconds of this process (one core). Target < 10 s;
* **under the queue** (``autoscaler/simulation/queue.py``: FIFO in front of the Ready replicas, 60 s
  timeout, SLO = a start within 2 s): SLO attainment, p99 wait and dropped share for the predictive
  policy, the last-value planner (``predictive-persistence``), the HPA on ``vllm:num_requests_waiting``
  at ``averageValue: 10`` (``hpa-queue@10``), the utilisation HPA's targets and the oracle; and the
  predictive policy's SLO misses against the utilisation HPA's at the same GPU-hours. Every run replays
  bins as the CLI does (``--bin-shape auto``: the 10-minute ServeGen bins spread linearly, keeping each
  bin's count; 1-minute bins flat).

Results go to the "simulate" section of docs/BENCHMARKS.md (``--no-write`` to only print).

``python -m benchmarks.simulate --money`` runs the money scenario instead and writes the "simulate-money"
section: on every multi-day trace, replicas of 2 GPUs sized so the peak needs 20 (40 GPUs, so that a
16-GPU gang is 40 % of the peak), a cost ceiling at 80 % of the unconstrained predictive policy's peak
$/h (measured by a run without ceiling or gangs), and one 16-GPU, 4-hour gang per week with a 24-hour
window (the first asked on day 2 at 00:00 trace time, then every 7 days while its window and run fit in
the trace), over the first 14 days of each trace (two gangs; the whole run stays under 5 minutes). Per
policy: ``ceiling_breaches`` and ``gangs_split`` (both must be 0), ``gang_wait_hours``,
``ceiling_unserved_fraction``, missed and preempted gangs, how often the ceiling cut, and the unserved
fraction and cost for context.
"""

from __future__ import annotations

import argparse
import math
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from autoscaler.config.schema import ForecastProfile
from autoscaler.simulation.engine import (
    POLICY_NAMES,
    PolicyResult,
    SimulationConfig,
    SimulationResult,
    forward_max,
    need_per_tick,
    reactive_at,
    reactive_metric_at,
    simulate,
)
from autoscaler.simulation.money import GangSpec, MoneyConfig
from autoscaler.simulation.predictive import factory
from autoscaler.simulation.tuning import retuner
from autoscaler.traces import load_trace
from benchmarks.report import machine, require_traces, update_section
from models import registry
from models.clean import prepare
from models.types import SECONDS_PER_DAY, TrafficSeries

TRACES = Path(__file__).resolve().parents[2] / "shared" / "traces"
PEAK_REPLICAS = 20
TARGETS = (0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
CUT_TARGET = 0.90
ORACLE_TARGET = 1.15
SPEED_TARGET_SECONDS = 10.0
SPEED_TRACE = "nasa_http_1995_jul_1min.csv"
HINDSIGHT_SECONDS = 300  # the planner's default look-ahead window
# Operating points of the default profile (its ``warm_pool_quantile``; the default's own is the main row): the
# predictive policy's cost/risk curve, each point set against the HPA at its own GPU-hours.
POINTS = (90, 95, 99)
DEFAULT_POINT = ForecastProfile().warm_pool_quantile

# Measured while choosing the defaults (see the section text); kept next to the code that prints it.
READING = """
Reading the table (written for flat replay, before the queue: the ServeGen figures quoted here moved on 2026-11-23
when 10-minute bins began to be spread linearly, see the tables above).
*Cold-start share* is the part of the predictive policy's unserved requests that replicas it
had already asked for would have served had they been Ready: at ~100% the planner always asked for enough, and every
miss is a rise that came faster than the forecast band within one start-up (120 s, 300 s when a node is needed).
Metrics-outage zeros (ServeGen's collection gaps) are replayed as missing data for every policy, as in the backtest.

Where we stand: no operating point meets both targets on any trace. The operating-points table is the predictive
policy's cost/risk curve, and along it the cut against the HPA at the same spend behaves differently per trace:
it rises with spend on NASA (80% at 1.47x the oracle, 96% at 1.77x: the daily ramps the HPA meets late are
forecastable), stays flat on ServeGen m_mid (44-53%) and on the sparse LoRA trace (20-24%), and falls with spend on
ServeGen m_small (20% at 1.14x, -35% at 1.38x). So the 90% cut is reached only where the spend is 1.57x the oracle
or more, and the one point under 1.15x (m_small at p90) is only 20% better than the HPA. On ServeGen the misses are
bursts no forecast sees: sums over clients jump by up to 85% in one 10-minute bin and persistence is nearly as good
as any model (default WAPE only 2-9% below it), so the HPA's flat headroom (1/target - 1 above current demand) is
about as good a hedge as a forecast band. The 1.15x-oracle target is below what knowledge of the future to within
5 minutes buys on the 1-minute traces (holding each 5-minute neighbourhood's peak with perfect knowledge costs
1.10x on the LoRA trace and 1.17x on NASA), and the oracle re-scales every minute (thousands of scale events)
where a real Deployment cannot.

What moved the curve, each chosen on all four traces, not one: the default model picks the power of its band
transform by held-out pinball loss (sqrt for count noise, near-log for multiplicative noise); the planner's
*surprise* floor keeps the forecast's spread above observed demand once a burst has left the forecast behind (NASA
81% -> 96% at p99). What moved along it: the default profile's `warm_pool_quantile`, 95 since 2026-11-21 (it was an
implicit 99, and the profile's `quantile` did not change cost at all under the automatic warm pool): 11-29% fewer
GPU-hours on every trace, the cut within 3 points or better (m_small -35% -> +11%), NASA still >= 90%; and shorter
scale-down stabilisation (NASA at p99, 600 -> 300 s: 1.77x -> 1.69x, cut 96% -> 93%). Tried without moving it:
look-ahead 0/60/300 s, fixed warm pools, and letting the model see the current (partial) bin before forecasting
(ServeGen m_mid: 1.40x at a 49% cut, on the same curve). The sparse LoRA trace (70% empty minutes, peak 20x the
typical minute) leaves 1 replica idling most of the time when sized by its peak, and its misses are isolated bursts.
"""


@dataclass(frozen=True)
class Point:
    """The predictive policy at one ``warm_pool_quantile``, scored like the main row."""

    quantile: int
    oracle_ratio: float
    pred_unserved: float
    reactive_unserved: float
    pred_attainment: float = math.nan
    reactive_attainment: float = math.nan  # the HPA's SLO attainment at the same GPU-hours

    @property
    def cut(self) -> float:
        return math.nan if self.reactive_unserved <= 0 else 1.0 - self.pred_unserved / self.reactive_unserved

    @property
    def miss_cut(self) -> float:
        """How many fewer SLO misses than the HPA at the same GPU-hours (1 = none of them)."""
        hpa = 1.0 - self.reactive_attainment
        return math.nan if not hpa > 0 else 1.0 - (1.0 - self.pred_attainment) / hpa


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
    points: tuple[Point, ...] = ()
    runs: tuple[PolicyResult, ...] = ()  # every policy of the main run, under the queue
    bin_shape: str = "flat"
    pred_attainment: float = math.nan
    reactive_attainment: float = math.nan  # the HPA's, interpolated at the predictive policy's GPU-hours

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


def _queue_config(series: TrafficSeries) -> SimulationConfig:
    """The "simulate" section's runs: every anchor, bins replayed as the CLI replays them."""
    return replace(_config(series), policies=POLICY_NAMES, bin_shape="auto")


def run_trace(path: Path, overrides: dict[str, Any] | None = None) -> Row:
    trace = load_trace(path)
    series = prepare(trace.requests)  # metrics-outage zeros are missing data, as in the CLI's default
    config = _queue_config(series)
    t0 = time.perf_counter()
    predictive = factory(lambda: registry.make_chain("default"), policy_overrides=overrides)
    persistence = factory(lambda: registry.make_chain("persistence"), policy_overrides=overrides,
                          profile=replace(ForecastProfile(), model="persistence"), name="predictive-persistence")
    result = simulate(series, config, trace.name, predictive=predictive, persistence=persistence)
    seconds = time.perf_counter() - t0
    pred, oracle = result.policies["predictive"], result.policies["oracle"]
    same = reactive_at(pred.gpu_hours, result.reactive())
    assert same is not None
    need = need_per_tick(result.demand, config.capacity_per_replica, config.min_replicas)
    half = HINDSIGHT_SECONDS // result.tick_seconds
    floor = np.roll(forward_max(need, 2 * half), half)
    floor[:half] = need[:half]
    tick_hours = result.tick_seconds / 3600
    points: list[Point] = []
    for q in [q for q in POINTS if q != DEFAULT_POINT] if overrides is None else ():
        profile = replace(ForecastProfile(), warm_pool_quantile=q)
        run = simulate(series, replace(config, policies=("predictive",)), trace.name,
                       predictive=factory(lambda: registry.make_chain("default"), profile=profile))
        other = run.policies["predictive"]
        at = reactive_at(other.gpu_hours, result.reactive())
        assert at is not None
        points.append(Point(q, other.gpu_hours / oracle.gpu_hours, other.unserved_fraction, at.unserved_fraction,
                            other.slo_attainment,
                            reactive_metric_at(other.gpu_hours, result.reactive(), "slo_attainment") or math.nan))
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
        points=tuple(points),
        runs=tuple(result.policies.values()),
        bin_shape=result.bin_shape,
        pred_attainment=pred.slo_attainment,
        reactive_attainment=reactive_metric_at(pred.gpu_hours, result.reactive(), "slo_attainment") or math.nan,
    )


def _unserved_requests(result: SimulationResult, run: PolicyResult) -> float:
    total = float(np.nansum(result.demand)) * result.tick_seconds
    return run.unserved_fraction * total


def time_week(path: Path, tuned: bool = False) -> tuple[float, float, dict[str, float]]:
    """(CPU s, wall s, wall s by part) to simulate the predictive policy over the first 7 days of ``path``: pinned,
    or ``tuned`` (the default profile as the controller runs it, self-tuning daily for its objective)."""
    series = load_trace(path).requests
    week = series.head(7 * SECONDS_PER_DAY // series.step_seconds)
    config = SimulationConfig(
        capacity_per_replica=float(np.nanmax(week.values)) / PEAK_REPLICAS, policies=("predictive",),
        bin_shape="auto",
    )
    registry.make_chain("default")  # import the model modules outside the timed region
    retune = None
    if tuned:
        profile = ForecastProfile()
        retune = retuner(lambda: registry.make_chain("default"), quantiles=profile.tune_quantiles,
                         utilisations=profile.tune_utilisations, slo_wait_seconds=config.queue.slo_wait_seconds,
                         slo_attainment=profile.slo_attainment, warmup_seconds=profile.history_seconds,
                         gpus_per_node=config.cluster.gpus_per_node, timeout_seconds=config.queue.timeout_seconds)
    cpu0, wall0 = time.process_time(), time.perf_counter()
    result = simulate(week, config, path.name, predictive=factory(lambda: registry.make_chain("default"),
                                                                  retune=retune))
    return time.process_time() - cpu0, time.perf_counter() - wall0, result.timings


def multi_day(path: Path) -> bool:
    trace = load_trace(path)
    return trace.duration_seconds >= 2 * SECONDS_PER_DAY


def _verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


# Measured 2026-11-23 with the runs above; kept next to the code that prints it.
QUEUE_READING = """
Reading the queue. A shortfall of a minute mostly waits instead of being lost: every policy drops far fewer requests
than its unserved fraction (NASA: the predictive policy's 0.017% unserved becomes 0.000% dropped and 99.89% started
within 2 s), so the misses that remain are the long ones, a cold start during a rise. Against the utilisation HPA at
the same GPU-hours the predictive policy cuts SLO misses by 89% on NASA (95% at its p99 point), 22% on the LoRA
trace and 37% on ServeGen m_mid, about what it cut in unserved requests; on m_small it is level with the HPA (-1%),
and where it loses (ServeGen m_small at p99) it does with both. Since 2026-11-25 the simulator forecasts through the
controller's own forecast keeper (``autoscaler/engine``): like the controller it no longer feeds the model the
newest bin, which may still change, so on the 10-minute ServeGen traces each forecast starts a bin (10 minutes)
earlier than before; m_small's predictive row moved from 99.27% at 1.20x (14% fewer misses) to 99.49% at 1.23x, on
the HPA's own line. That is the controller's real behaviour at that resolution (its own bins are a minute).
The HPA as the GKE vLLM tutorial deploys it (`hpa-queue@10`) is the worst anchor by far: it
scales on backlog only, so with no queue it recommends 0 and falls to min replicas once the 300 s window has passed,
then meets the next backlog a pod start-up late; it oscillates (13-25 thousand scale events on NASA and ServeGen)
and 32-61% of requests start within 2 s. Its `averageValue: 10` is in requests, so how hard it swings depends on a
replica's request rate: on ServeGen a replica serves 50-190 req/s, 10 waiting per pod is a fraction of a second of
work, and each backlog sends it to max replicas (6-10x the oracle's GPU-hours) while it still drops 12-14%; on the
sparse LoRA trace it rarely sees 10 waiting and sits at one replica (0.85x the oracle, 17% dropped). vLLM
production-stack's HPA (`prodstack-queue@1`) and its KEDA ScaledObject (`keda-queue@5`), in the table since
2026-11-26, are no better: 40-65% of requests within 2 s at 0.9-15x the oracle's GPU-hours (production-stack's
`ceil(waiting x Ready pods)` overshoots most: 14.8x on NASA). The last-value
planner (`predictive-persistence`, our planner with a persistence forecast) is close to the default model on
ServeGen (m_small 99.33% at 1.24x against 99.49% at 1.23x; m_mid 99.89% at 1.41x against 99.77% at 1.37x) and holds
more on the 1-minute traces (NASA 1.88x, LoRA 1.67x) for more attainment: a different point on its own curve, to be
compared at equal GPU-hours on the frontier. Spreading the 10-minute ServeGen bins linearly instead of replaying them
flat cut every policy's shortfall by more than half (predictive m_mid 0.055% -> 0.020%, m_small 0.128% -> 0.049%;
the HPA at the same GPU-hours 0.113% -> 0.035%, 0.144% -> 0.059%): most of what flat replay counted there were the
cliffs at bin edges. The 1-minute traces are replayed flat, as before.
"""


def queue_markdown(rows: list[Row]) -> list[str]:
    """The anchors under the queue: one row per policy and trace."""
    lines = [
        "Under the queue (`autoscaler/simulation/queue.py`): requests above Ready capacity wait first in first out "
        "and are dropped after 60 s; *SLO attained* is the share of requests that started within 2 s (dropped ones "
        "are misses), *wait p99* the 99th percentile wait (a dropped request counts at the 60 s timeout), "
        "*unserved* the capacity shortfall without a queue (as above). Anchors: `hpa-queue@10` is the HPA as the "
        "GKE vLLM tutorial deploys it (`Pods` metric `vllm:num_requests_waiting`, `averageValue: 10`), "
        "`prodstack-queue@1` vLLM production-stack's HPA (`Object` metric `sum(vllm:num_requests_waiting)`, "
        "`value: 1`), `keda-queue@5` its KEDA ScaledObject (threshold 5 on the same sum), "
        "`predictive-persistence` our planner with a last-value forecast. Bins are replayed as the CLI's "
        "`--bin-shape auto` does (10-minute bins spread linearly keeping each bin's count, 1-minute bins flat; "
        "`autoscaler/simulation/traffic.py`), the same for every policy. *SLO misses cut*: the predictive "
        "policy's misses against the utilisation HPA's interpolated at the same GPU-hours.",
        "",
        "| trace | policy | GPU-h / oracle | SLO attained (2 s) | wait p99 s | dropped | unserved | scale events |",
        "|---|---|---|---|---|---|---|---|",
    ]
    order = ("predictive", "predictive-persistence", "oracle")
    for r in rows:
        runs = {run.name: run for run in r.runs}
        oracle = runs.get("oracle")
        names = [n for n in order if n in runs]
        for family in ("hpa-queue@", "prodstack-queue@", "keda-queue@", "reactive@"):
            names += sorted((n for n in runs if n.startswith(family)), key=lambda n: float(n.split("@")[1]))
        first = True
        for name in names:
            run = runs[name]
            ratio = f"{run.gpu_hours / oracle.gpu_hours:.2f}x" if oracle is not None and oracle.gpu_hours > 0 else "-"
            head = f"{r.trace} ({r.bin_shape})" if first else ""
            lines.append(
                f"| {head} | {name} | {ratio} | {100 * run.slo_attainment:.3f}% | {run.wait_p99_seconds:.1f} | "
                f"{100 * run.dropped_fraction:.3f}% | {100 * run.unserved_fraction:.3f}% | {run.scale_events} |"
            )
            first = False
    lines += [""]
    for r in rows:
        point = Point(DEFAULT_POINT, r.oracle_ratio, r.pred_unserved, r.reactive_unserved, r.pred_attainment,
                      r.reactive_attainment)
        cut = "n/a (the HPA met the SLO for all)" if math.isnan(point.miss_cut) else f"{100 * point.miss_cut:.0f}%"
        lines.append(
            f"- {r.trace}: predictive {100 * r.pred_attainment:.3f}% attained at {r.oracle_ratio:.2f}x the oracle's "
            f"GPU-hours, the utilisation HPA {100 * r.reactive_attainment:.3f}% at the same GPU-hours: SLO misses "
            f"cut {cut}."
        )
    if QUEUE_READING:
        lines += ["", " ".join(QUEUE_READING.split())]
    return lines


def markdown(rows: list[Row], cpu: float, wall: float, parts: dict[str, float],
             tuned: tuple[float, float, dict[str, float]] | None = None) -> str:
    lines = [
        "## simulate",
        "",
        "`python -m benchmarks.simulate`: each multi-day trace through the simulated cluster (replicas sized so the "
        f"peak needs {PEAK_REPLICAS}; pod start-up 120 s, node start-up 180 s, 1 GPU/replica, 8 GPUs/node; "
        "predictive = the default profile pinned (default model, p90 replicas, automatic warm pool to p95, no "
        "self-tuning: the self-tuned default is in the frontier section), deciding every "
        "30 s; HPA targets "
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
    lines += ["", *queue_markdown(rows)]
    lines += [
        "",
        "Operating points: the same runs with the default profile's `warm_pool_quantile` (the band the replicas plus "
        f"the automatic warm pool cover, and the surprise floor's spread) at {', '.join(map(str, POINTS))} (default "
        f"{DEFAULT_POINT}: the row above), each set against the HPA at its own GPU-hours. "
        "`simulate --sweep warm_pool_quantile=90,95,99` prints the same rows "
        "for any trace.",
        "",
        "| trace | warm_pool_quantile | predictive / oracle GPU-h | predictive unserved | HPA at same GPU-h | cut "
        "| both targets | SLO attained | HPA SLO attained at same GPU-h | SLO misses cut |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        main_row = Point(DEFAULT_POINT, r.oracle_ratio, r.pred_unserved, r.reactive_unserved, r.pred_attainment,
                         r.reactive_attainment)
        for pt in sorted((*r.points, main_row), key=lambda pt: pt.quantile):
            both = pt.cut >= CUT_TARGET and pt.oracle_ratio <= ORACLE_TARGET
            cut = "n/a" if math.isnan(pt.cut) else f"{100 * pt.cut:.0f}%"
            label = f"{pt.quantile} (default)" if pt is main_row else str(pt.quantile)
            miss_cut = "n/a" if math.isnan(pt.miss_cut) else f"{100 * pt.miss_cut:.0f}%"
            lines.append(
                f"| {r.trace} | {label} | {pt.oracle_ratio:.2f}x | {100 * pt.pred_unserved:.3f}% | "
                f"{100 * pt.reactive_unserved:.3f}% | {cut} | {_verdict(both)} | {100 * pt.pred_attainment:.3f}% | "
                f"{100 * pt.reactive_attainment:.3f}% | {miss_cut} |"
            )
    lines += [
        "",
        f"Speed: one week of 1-minute traffic ({SPEED_TRACE}, first 7 days), predictive policy including "
        f"forecasting: **{cpu:.1f} s CPU** ({wall:.1f} s wall on a shared machine), target < "
        f"{SPEED_TARGET_SECONDS:.0f} s: {_verdict(cpu < SPEED_TARGET_SECONDS)}. Of the wall time, the forecaster "
        f"(daily fit, one update and one predict per bin) took {parts.get('predictive_forecast', math.nan):.1f} s and "
        f"the planner (one call per 30 s) {parts.get('predictive_plan', math.nan):.1f} s; the rest is the cluster "
        f"model and the queue." + ("" if tuned is None else (
            f" Self-tuned (the default profile as the controller runs it: daily replays of its own history at "
            f"every operating point, the cheapest meeting its objective): **{tuned[0]:.1f} s CPU** ({tuned[1]:.1f} s "
            f"wall), {_verdict(tuned[0] < SPEED_TARGET_SECONDS)}; of the wall time the replays took "
            f"{tuned[2].get('predictive_tune', math.nan):.1f} s.")) + f" Machine: {machine()}.",
        "",
        " ".join(READING.split()),
    ]
    return "\n".join(lines)


MONEY_TARGETS = (0.5, 0.7, 0.9)
MONEY_GPUS_PER_REPLICA = 2
CEILING_DEMAND_SHARE = 0.85  # the ceiling buys this share of the replicas the demand's own peak needs
GANG_GPUS = 16
GANG_HOURS = 4
GANG_WINDOW_HOURS = 24
GANG_EVERY_DAYS = 7
GANG_FIRST_DAY = 2
MONEY_DAYS = 14  # the first two weeks of each trace: two gangs each, and the whole run stays under 5 minutes


@dataclass(frozen=True)
class MoneyRun:
    trace: str
    days: float
    ceiling: float  # $/h
    unconstrained_peak: float  # $/h held by the predictive policy without ceiling or gangs
    gangs: int
    results: dict[str, PolicyResult]  # billed in whole nodes (the controller's rule)
    per_gpu: dict[str, PolicyResult]  # the same run billed per GPU (the rule before whole-node pricing)
    seconds: float
    notes: tuple[str, ...]
    ceiling_nodes: int  # whole nodes the ceiling buys
    tick_seconds: int
    gpus_per_node: int
    gpu_hour_price: float


def weekly_gangs(duration_seconds: int) -> tuple[GangSpec, ...]:
    """One 16-GPU gang per week, from day 2, while its window and run fit in the trace."""
    gangs: list[GangSpec] = []
    at = GANG_FIRST_DAY * SECONDS_PER_DAY
    while at + (GANG_WINDOW_HOURS + GANG_HOURS) * 3600 <= duration_seconds:
        gangs.append(GangSpec(gpus=GANG_GPUS, at_seconds=at, run_seconds=GANG_HOURS * 3600,
                              window_seconds=GANG_WINDOW_HOURS * 3600, name=f"week{len(gangs) + 1}"))
        at += GANG_EVERY_DAYS * SECONDS_PER_DAY
    return tuple(gangs)


def money_trace(path: Path) -> MoneyRun:
    trace = load_trace(path)
    series = prepare(trace.requests).head(MONEY_DAYS * SECONDS_PER_DAY // trace.step_seconds)
    duration = len(series.values) * series.step_seconds
    base = replace(
        _config(series), reactive_targets=MONEY_TARGETS,
        cluster=replace(_config(series).cluster, gpus_per_replica=MONEY_GPUS_PER_REPLICA),
    )
    t0 = time.perf_counter()
    predictive = factory(lambda: registry.make_chain("default"))
    free = simulate(series, replace(base, policies=("predictive",)), trace.name, predictive=predictive)
    run = free.policies["predictive"]
    peak = float(run.requested.max()) * MONEY_GPUS_PER_REPLICA * base.gpu_hour_price
    # A ceiling that binds on served demand: the cost of 85% of the replicas the trace's peak needs (a gang fits
    # only where inference leaves room: in the troughs).
    need = math.ceil(float(np.nanmax(series.values)) / base.capacity_per_replica - 1e-9)
    ceiling_gpus = math.ceil(CEILING_DEMAND_SHARE * need) * MONEY_GPUS_PER_REPLICA
    money = MoneyConfig(ceiling_usd_per_hour=round(ceiling_gpus * base.gpu_hour_price, 2),
                        gangs=weekly_gangs(duration), whole_nodes=True)
    result = simulate(series, replace(base, money=money), trace.name, predictive=predictive)
    per_gpu = simulate(series, replace(base, money=replace(money, whole_nodes=False)), trace.name,
                       predictive=predictive)
    node_price = base.cluster.gpus_per_node * base.gpu_hour_price
    for note in result.notes:
        if " placed at " in note:
            print(f"  {trace.name}: {note}", flush=True)
    return MoneyRun(
        trace=trace.name,
        days=duration / SECONDS_PER_DAY,
        ceiling=float(money.ceiling_usd_per_hour or 0.0),
        unconstrained_peak=peak,
        gangs=len(money.gangs),
        results=dict(result.policies),
        per_gpu=dict(per_gpu.policies),
        seconds=time.perf_counter() - t0,
        notes=tuple(n for n in result.notes if " placed at " not in n and "forecasts:" not in n),
        ceiling_nodes=math.floor(float(money.ceiling_usd_per_hour or 0.0) / node_price + 1e-9),
        tick_seconds=result.tick_seconds,
        gpus_per_node=base.cluster.gpus_per_node,
        gpu_hour_price=base.gpu_hour_price,
    )


def billed_per_hour(run: PolicyResult, m: MoneyRun) -> np.ndarray:
    """$/h Karpenter bills at each tick: the replicas' whole nodes plus each gang's own whole nodes."""
    replica_nodes = -(-run.requested.astype(np.int64) * MONEY_GPUS_PER_REPLICA // m.gpus_per_node)
    gangs = run.gang_gpus if run.gang_gpus is not None else np.zeros_like(run.requested)
    gang_nodes = -(-gangs.astype(np.int64) // m.gpus_per_node)  # each gang (GANG_GPUS) is whole nodes of its own
    return np.asarray((replica_nodes + gang_nodes) * m.gpus_per_node * m.gpu_hour_price, dtype=np.float64)


def billed_usd(run: PolicyResult, m: MoneyRun) -> float:
    return float(billed_per_hour(run, m).sum()) * m.tick_seconds / 3600


def over_bill_share(run: PolicyResult, m: MoneyRun) -> float:
    """The share of ticks at which the nodes held cost more than the ceiling."""
    billed = billed_per_hour(run, m)
    return float(np.count_nonzero(billed > m.ceiling + 1e-6)) / max(1, billed.size)


MONEY_READING = """
Reading the table (measured 2026-11-23, first two weeks of each trace). What whole-node billing changed: the
ceiling, $102/h, is 34 GPUs at $3 but 4.25 nodes of 8 GPUs ($24 each), and Karpenter bills the 5th node whole. The
per-GPU rule (last column, the run as it was) held 17 replicas = 5 nodes = $120/h at the peaks, so the bill went
over the ceiling on 0.4% (NASA) to 36% (servegen-mid) of the predictive policy's ticks, and up to 76% of the HPA's
at target 0.5; in whole nodes it is 0 everywhere, checked on every tick from the nodes held. The price is one
replica at the peaks: 4 nodes hold 16 replicas, so the demand the ceiling leaves unserved rises from 0.005% to
0.013% (NASA), 0.03% to 0.05% (servegen-small), 0.06% to 0.13% (LoRA) and 0.40% to 0.71% (servegen-mid, whose broad
peaks spend the most time at the ceiling; the predictive policy is cut there 32% of the time, the oracle 4%). A
16-GPU gang is two whole nodes of its own, so it fits only where inference needs at most 2 nodes (8 replicas,
against 9 GPU-counted): gangs wait longer (predictive 6.7 h to 7.0 h on LoRA, 16.6 h to 20.0 h on servegen-small,
46.1 h to 47.7 h on servegen-mid; the HPA at target 0.5 on servegen-small 22.7 h to 43.3 h, and it misses one gang
more there, 2 instead of 1; no other policy misses more). The bill itself (*billed $*: whole nodes per tick, the
replicas' nodes plus each gang's own) falls against the per-GPU run, by 0.1-5% on NASA, LoRA and servegen-small and
by 2-16% on servegen-mid (predictive 9%), because the node the ceiling does not buy is no longer held; *GPU cost $*
counts only the GPUs in use, so it is below the bill by the idle GPUs of partly filled nodes. Placement still
matters most for gangs: the HPA, reserving at the first fit, lost 0-24 runs per trace to preemption, the predictive
policy 0-4, the oracle only on servegen-mid (8). Breaches and split gangs stay 0: the ceiling is enforced at every
decision. Re-measured 2026-11-25, once the simulator forecast through the controller's own forecast keeper (no
newest, still-changing bin; one node start-up further): the predictive policy's figures above moved by a few percent
(servegen-mid cut at the ceiling 38% of the time instead of 32%; gang waits per-GPU to whole nodes 6.5 h to 7.0 h on
LoRA, 20.6 h to 21.3 h on servegen-small, 47.7 h to 48.0 h on servegen-mid; up to 6 preemptions on servegen-small),
the other policies not at all; breaches and split gangs are still 0. Re-measured 2026-11-25 once the simulator's
ledger decided through the controller's money step (`engine.money.money_step`; before, it placed a gang once, at
submission, and reserved it at the placed tick): a placement is now the gang's start, refreshed every 15 minutes and
after a refit, its GPUs count one node start-up before it, and a gang whose window closed waits one node start-up
more (the controller's grace for an activation at the deadline). Gang waits moved by at most 1.0 h (NASA predictive
2.4 h to 1.5 h, servegen-small's per-GPU run 19.4 h to 18.4 h), the oracle on servegen-mid lost one run more (9),
bills and GPU cost moved by at most 0.25% (servegen-small's per-GPU run, over the bill 2.7% to 2.9% of the ticks
there); cuts and unserved shares did not.
"""


def _cut_share(run: PolicyResult) -> float:
    """The share of ticks at which the ceiling held fewer replicas than the policy asked for."""
    if run.wanted is None or run.requested.size == 0:
        return 0.0
    return float(np.count_nonzero(run.wanted > run.requested)) / run.requested.size


def money_markdown(runs: list[MoneyRun], seconds: float) -> str:
    lines = [
        "## simulate-money",
        "",
        "`python -m benchmarks.simulate --money`: each multi-day trace under a cost ceiling and training gangs "
        "(rules: `autoscaler/simulation/money.py`). Replicas of "
        f"{MONEY_GPUS_PER_REPLICA} GPUs sized so the peak needs {PEAK_REPLICAS}; pod start-up 120 s, node start-up "
        "180 s, 8 GPUs/node, $3/GPU-hour, billed as Karpenter bills and the controller prices it: whole nodes "
        "(the replicas' GPUs rounded up to 8-GPU nodes, each gang on whole nodes of its own). Ceiling: the cost of "
        f"{100 * CEILING_DEMAND_SHARE:.0f}% of the replicas the demand's own peak needs, so it binds on served "
        "demand at the peaks and a gang fits only in the troughs (the predictive policy's peak $/h without ceiling "
        "or gangs is shown for comparison). Gangs: "
        f"{GANG_GPUS} GPUs for {GANG_HOURS} h, one per {GANG_EVERY_DAYS} days from day {GANG_FIRST_DAY}, "
        f"{GANG_WINDOW_HOURS} h window, priority standard (the production Deployment outranks them: a running gang "
        "is preempted whole when inference needs its budget). Gangs are placed, counted, reserved and started by the "
        "controller's own money step (`engine.money.money_step`): the predictive policy places them in its "
        "forecast's trough, the oracle in the real one, the HPA (no forecast) at the earliest start, retried at "
        "every decision until it fits. "
        "*ceiling-unserved*: requests unserved because of the ceiling (between the capacity it allowed and the "
        "capacity the policy asked for), over all requests; *unserved* includes it. *ceiling cut (time)*: share of "
        "ticks at which the ceiling held fewer replicas than the policy asked for. *breaches* and *split* must "
        "be 0. *GPU cost $*: GPU-hours held (the gangs' included) x $3; *billed $*: whole nodes per tick x $24. "
        "*per GPU (before)*: the same run with the ceiling checked per GPU, as before whole-node pricing; *over the "
        "bill*: share of ticks at which its nodes cost more than the ceiling.",
        "",
        "| trace | ceiling | policy | breaches | split | gang wait h | missed / preempted | ceiling cut (time) "
        "| ceiling-unserved | unserved | GPU cost $ | billed $ | per GPU (before): over the bill (time) / unserved / "
        "gang wait h / missed / billed $ |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    ok = True
    for m in runs:
        first = True
        for name, r in m.results.items():
            ok = ok and r.ceiling_breaches == 0 and r.gangs_split == 0 and over_bill_share(r, m) == 0
            head = (f"{m.trace} ({m.days:.0f} d, {m.gangs} gangs)",
                    f"${m.ceiling:,.0f}/h = {m.ceiling_nodes} nodes (peak ${m.unconstrained_peak:,.0f}/h)")
            b = m.per_gpu[name]
            lines.append(
                f"| {head[0] if first else ''} | {head[1] if first else ''} | {name} | {r.ceiling_breaches} | "
                f"{r.gangs_split} | {r.gang_wait_hours:.1f} | {r.gangs_missed} / {r.gangs_preempted} | "
                f"{100 * _cut_share(r):.1f}% | {100 * r.ceiling_unserved_fraction:.3f}% | "
                f"{100 * r.unserved_fraction:.3f}% | {r.cost_usd:,.0f} | {billed_usd(r, m):,.0f} | "
                f"{100 * over_bill_share(b, m):.1f}% / {100 * b.unserved_fraction:.3f}% / {b.gang_wait_hours:.1f} / "
                f"{b.gangs_missed} / {billed_usd(b, m):,.0f} |"
            )
            first = False
    notes = sorted({n for m in runs for n in m.notes})
    lines += ["", " ".join(MONEY_READING.split())]
    lines += [
        "",
        "Ceiling breaches, bills over the ceiling and split gangs (whole nodes): "
        f"{'none, PASS' if ok else 'FOUND, FAIL'}. "
        f"Whole run: {seconds:.0f} s (each trace simulated three times: unconstrained for the peak, under the ceiling "
        f"in whole nodes, and per GPU as before). Machine: {machine()}.",
    ]
    if notes:
        lines += ["", "Notes: " + "; ".join(notes[:12]) + ("; ..." if len(notes) > 12 else "")]
    return "\n".join(lines)


def money_main(args: argparse.Namespace, paths: list[Path]) -> int:
    t0 = time.perf_counter()
    runs: list[MoneyRun] = []
    for path in paths:
        run = money_trace(path)
        runs.append(run)
        print(f"{run.trace}: ceiling ${run.ceiling:,.0f}/h, {run.gangs} gangs, {run.seconds:.0f}s", flush=True)
    text = money_markdown(runs, time.perf_counter() - t0)
    print(text)
    if not args.no_write and args.traces is None:
        update_section("simulate-money", text)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--traces", default=None, help="only trace files whose name contains this")
    parser.add_argument("--no-write", action="store_true", help="print the section without writing the doc")
    parser.add_argument("--money", action="store_true", help="run the ceiling + gangs scenario (simulate-money)")
    args = parser.parse_args(argv)
    require_traces(TRACES, "python -m benchmarks.simulate")
    paths = sorted(p for p in TRACES.glob("*.csv") if multi_day(p) and (args.traces is None or args.traces in p.name))
    if args.money:
        return money_main(args, paths)
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
    text = markdown(rows, cpu, wall, parts, time_week(TRACES / SPEED_TRACE, tuned=True))
    print(text)
    if not args.no_write and args.traces is None:
        update_section("simulate", text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
