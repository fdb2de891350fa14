"""The SLO frontier: the predictive policy's cost/attainment curve against the HPA's, and the self-tuned default.

``python -m benchmarks.frontier`` (writes the ``frontier`` section of docs/BENCHMARKS.md; ``--traces NAME`` runs
only matching traces, ``--shapes none`` leaves out the synthetic shapes, and either writes nothing). On every
multi-day trace in ``../shared/traces`` (its first ``DAYS`` days) and on the four seeded synthetic shapes of
``benchmarks.backtest.synthetic_traces`` (diurnal web, two LLM-serving series without a daily cycle in 10-minute bins,
a bursty social stream; 14 days each: shapes the hidden traces we are judged on have and the shared ones lack), under
the queue of ``autoscaler.simulation.queue`` (2 s objective, 60 s timeout, bins replayed as ``simulate --bin-shape
auto``), replicas sized so the trace's peak needs 20, pod start-up 120 s (``--pod-startup``), node start-up 180 s:

* the predictive curve: the default profile pinned at each operating point in ``POINTS`` (a ``warm_pool_quantile``,
  the replicas' own band at the lower of it and the profile's ``quantile``, and a ``reactive_utilisation``), the
  points self-tuning chooses from;
* the HPA's curve: the faithful HPA on utilisation at each target in ``TARGETS``; beside it the HPAs users run on
  vLLM's queue (``hpa-queue@10``, the GKE tutorial's; ``prodstack-queue@1`` and ``keda-queue@5``, vLLM
  production-stack's HPA and KEDA ScaledObject; ``autoscaler/simulation/reactive.py``) and the last-value planner
  (``predictive-persistence``);
* the self-tuned default: the default profile as the controller runs it (``self_tune: true``), re-choosing its
  operating point after every daily refit for a 99% / 2 s objective;
* the oracle.

Reported: (1) GPU-hours saved at the HPA's attainment at targets 0.6, 0.7 and 0.8 (the predictive curve
interpolated at that attainment); (2) SLO misses cut at equal GPU-hours (the HPA's curve interpolated at each
predictive point's GPU-hours); (3) whether an HPA point dominates a point of the predictive curve (no more
GPU-hours and no less attainment, one of them strictly; the curve is the points no other predictive point
dominates, the ones self-tuning can end on) or the self-tuned run; (4) the self-tuned default's attainment
against 99% and its GPU-hours over the oracle's.

``--pod-startup 30s,60s,120s,300s`` runs the whole frontier at each pod start-up (30 s: a node with the weights
cached; 300 s: a cold pull of a large model) and writes the ``start-up sensitivity`` section (per trace and
start-up: the self-tuned default, the cheapest HPA target that meets the objective, GPU-hours saved at its
attainment and misses cut at equal GPU-hours); the 120 s run also writes the ``frontier`` section. Why: the
forecast buys time that a faster start makes cheaper, so where it pays depends on the start-up.

``--draws 1,2`` runs the four synthetic shapes again at other seeds (``synthetic_traces(draw)``; the self-tuned
default, the HPA targets and the oracle) and writes the ``other draws`` section. Why: every rule the tuner follows
was read on one series of each shape; a rule that holds there and not on the next draw of the same shape was fitted
to the series, and the project is judged on traffic it has not seen.
"""

from __future__ import annotations

import argparse
import math
import pickle
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from autoscaler.config.schema import ForecastProfile
from autoscaler.simulation.engine import (
    PolicyResult,
    PredictiveFactory,
    SimulationConfig,
    hpa_a_user_picks,
    simulate,
)
from autoscaler.simulation.predictive import factory, legend_once
from autoscaler.simulation.tuning import operating_points, retuner
from autoscaler.traces import Trace, load_trace, parse_duration
from benchmarks.backtest import DRAW_SEED_STEP, draw_numbers, synthetic_traces
from benchmarks.report import machine, require_traces, update_section
from benchmarks.simulate import PEAK_REPLICAS, TRACES, multi_day
from models import registry
from models.clean import prepare
from models.types import SECONDS_PER_DAY, TrafficSeries

# Measured while building self-tuning (see the section text); kept next to the code that prints it.
READING = """Reading the frontier (measured 2026-11-26 and 2026-11-27 on the one engine; the four synthetic shapes are \
on this page since the first of them). *GPU-h saved*: the predictive curve interpolated at the attainment the HPA \
reaches at a target; ">=" where the curve's cheapest point already attains more than the HPA (its saving is then a \
lower bound); n/a where the curve does not reach that attainment. **What changed in this run, and why** (2026-11-27): \
when no point meets the objective, a forecast band runs as the safest point only if it cuts at least a quarter of the \
misses of the HPA's safest point on the pooled days (`simulation.tuning.choose`, `BAND_MISS_SHARE`; measured first on \
recorded fortnights, section tuner rules). Here only the Alibaba LoRA trace moved: one day of p80 with the floor at \
0.75 became the HPA's 0.5 started early, 98.70% to 98.65% at 3.28x the oracle; the seven other traces made the same \
choices. Later that day, without the margin (a replay need not reach a quarter of the error budget more than the \
objective at the next day's lower quartile: `simulation.tuning.DEFAULT_MARGIN`; measured first on 128 recorded \
fortnights, section tuner rules) only the diurnal shape moved, from 1.83x at 99.53% to 1.81x at 99.51% (the HPA's 0.6 \
started early on six tunings instead of four); the traces made the same choices. The run before: *the first two \
replays choose the cheapest point meeting the objective among the HPA's own points only* (`simulation.tuning.decide`, \
`MIN_BAND_DAYS`: that choice reads a point's day-to-day spread, which one or two replayed days do not show; when no \
point meets the objective, the safest runs as before). Measured first on 108 recorded fortnights of the synthetic \
shapes (section tuner rules). Here it moved NASA from 1.53x at 99.69% to 1.57x at 99.70% (the HPA at 0.6 started early \
on the first three tunings, where p90 ran before), the social stream from 1.09x at 89.04% to 1.04x at 88.20% (the HPA \
at 0.7 on twelve tunings, where p99 ran one day before), the series turning volatile from 99.81% to 99.82% at 1.15x; \
the other five traces did not move. The run before added the self-check (`beaten_by`: when one of the HPA's own points \
would have done strictly better over the four weeks of replayed days than what ran, that point runs, unless the week \
is spending its error budget). **The self-tuned default is dominated by no HPA target and no anchor on any of the \
eight traces**: NASA 1.57x the oracle at 99.70% (p95 on ten tunings, the HPA at 0.6 on three; 68% fewer misses than \
the HPA at its GPU-hours, 72% before), ServeGen m_mid 1.34x at 99.42% (between the HPA at 0.8, 1.29x at 99.15%, and \
0.7, 1.47x at 99.85%), m_small 1.28x at 99.60% (0.8: 1.21x at 99.06%; 0.7: 1.38x at 99.91%; 30% fewer misses), LoRA \
3.28x at 98.65% (no HPA target passes 95.2%), the synthetic LLM series with bursts 1.179x at 98.953% (the HPA at 0.8: \
1.182x at 98.976%, a hair dearer for a hair more; 0.7: 1.32x at 99.31%), the series turning volatile 1.15x at 99.82%, \
the social stream 1.04x at 88.20% (the HPA at 0.7: 1.04x at 88.25%, a hair dearer for a hair more; no point reaches \
99% there) and the diurnal shape 1.81x at 99.51%. On traffic without a daily cycle the engine's points lie on the \
HPA's curve, not above it, and the self-tuned run lands on it too (misses cut at equal GPU-hours: 1% on the LLM series \
with bursts, -0% on the social stream). The pinned curve is dominated at its cheap end on four shapes (`predictive@90` \
by the HPA at 0.8 on m_small, `predictive@80/u0.85` on the series turning volatile, every cheap point on the social \
stream, `predictive@80` and `predictive@95` on the diurnal shape); the self-tuned run avoids those points on those \
days. **The HPAs users run on vLLM's queue are far worse than every other policy on every trace** (`hpa-queue@10`, \
`prodstack-queue@1`, `keda-queue@5`: a queue only forms once replicas are already short). **Not met**: >= 90% fewer \
SLO misses at equal GPU-hours on LoRA (46%), m_small (66%) and the diurnal shape (14%; NASA 93%); >= 30% fewer \
GPU-hours at equal attainment on any trace (NASA 12%); the self-tuned default within 1.3x the oracle on NASA (1.57x: \
knowing the future to within 5 minutes already costs 1.17x, see simulate) and the diurnal shape (1.81x); 99% on LoRA, \
the social stream and (by 0.05 points) the LLM series with bursts. Self-tuning cost 0.70-1.11 s of CPU per replay (one \
day of bins, twelve points) in this run, once a day per Deployment."""

READING_STARTUP = """Reading the start-up sensitivity (measured 2026-11-26, and again 2026-11-27 with a band point \
held to a quarter of the HPA's misses when nothing meets the objective, which moved only the Alibaba LoRA trace, by \
under a tenth of a point, and later that day without the margin, which moved NASA at 60 and 300 s and the diurnal \
shape at 120 s by a few hundredths of a point and up to 1.4% of GPU-hours; on all eight traces with the engine and \
tuner of the frontier section, the self-check and the first days' gate included; the 120 s rows are that section's \
run; each ratio is against the oracle at the same start-up). **The self-tuned default is dominated in one of the \
thirty-two runs, by a hair**: the synthetic diurnal shape at 300 s (by the HPA at 0.5: 1.817x at 99.48% against 1.821x \
at 99.38%). Before the gate (the first two replays choose among the HPA's own points) it was dominated in two, that \
one and the social stream at 30 s (by the HPA at 0.6), which now runs the HPA's 0.7 started early at 1.05x and 90.87%; \
before the self-check, in six (ServeGen m_mid at 60 s and m_small at 30 and 60 s by the HPA at 0.8, and the series \
turning volatile at 300 s, too). The gate's price is on the traces where the bands pay from the first days: NASA costs \
1.61x, 1.61x, 1.57x and 1.45x the oracle at 30, 60, 120 and 300 s (from 1.61x, 1.56x, 1.53x and 1.41x), the diurnal \
shape 1.85x at 30 s (from 1.72x). **The forecast pays on the diurnal web trace, and more the slower the start**: on \
NASA the GPU-hours saved at equal attainment grow from 16-18% (30-60 s) to 26-27% (120-300 s), the misses cut at equal \
GPU-hours from 59% to 68-72%, and the self-tuned default costs less the slower the start (1.61x to 1.45x of an oracle \
that itself pays more) while the cheapest HPA target meeting 99% goes from 0.7 to 0.5. On the synthetic diurnal shape \
it does not: the tuner runs the HPA's own point at 0.5 or 0.6 started early and costs 1.81-1.85x, 4-7% more than the \
HPA's curve at its attainment. **On LLM serving without a daily cycle the forecast pays little and only faster starts \
pay much**: on ServeGen the self-tuned default saves -2% to 3% of GPU-hours at equal attainment; on the series turning \
volatile 12% up to 120 s; on the series with bursts 7-8% at 30-60 s and nothing at 120-300 s. 30 s instead of 300 s \
saves 12-20% of the self-tuned default's GPU-hours on ServeGen and 18% on the series with bursts. On the Alibaba LoRA \
trace no HPA target reaches 99% at any start-up (the HPA at 0.3: 97.2% at 30 s, 92.1% at 300 s); the self-tuned \
default (p99 on nearly every day) meets it at 30 s and 60 s (99.22%, 99.06%) and attains more than every HPA target at \
every start-up, for 12-15% more GPU-hours than the HPA at 0.3."""

READING_DRAWS = """Reading the other draws (measured 2026-11-26 with the engine and tuner of the frontier section, the \
self-check and the first days' gate included, draws 1-4; again 2026-11-27 with a forecast band held to a quarter of \
the HPA's misses when nothing meets the objective). **The self-tuned default is dominated by an HPA target in three of \
the sixteen draws**, by 5-6% of GPU-hours on the LLM series with bursts (draw 3: 1.44x the oracle at 99.30% against \
the HPA at 0.7's 1.37x at 99.38%; draw 4: 1.40x at 99.17% against 1.32x at 99.30%) and on the diurnal shape's draw 4 \
(1.87x at 99.43%, by the HPA at 0.5: 1.84x at 99.52%). What the band's share moved: the social stream, where no point \
reaches 99% and p99 ran first days for a few of the HPA's misses, draw 2 from 1.25x at 91.20% (dominated by the HPA at \
0.4 and 0.5: 1.16x at 91.28%) to 1.14x at 91.20%, draw 3 from 2.25x at 89.50% to 1.22x at 88.35%, draw 4 from 1.29x to \
1.19x at 86.80%; the other twelve draws made the same choices. **Before the band's share, in four**: those and the \
social stream's draw 2. **With the self-check and before the gate, in five**: those and the diurnal shape's draw 2, \
which now attains 99.25% at 1.84x (98.81% at 1.63x before: the gate kept it off a cheap band point on its second day, \
and it meets the objective). **Before the self-check, in seven**, by up to 28%: every draw of the LLM series with \
bursts, the volatile series' draw 4, the social stream's draw 2 and the diurnal shape's draw 4. Why: each operating \
point pinned for the fortnight lies on the HPA's curve or above it there, and a tuner that re-chose daily from the \
days behind ran dear points after bursty days and cheap ones before them (draw 3 of the series with bursts: the HPA's \
0.9 after a calm first day, then p80 at 0.85, 0.6, 0.5, 0.6, p80 at 0.65 four times, p90, p80 at 0.75, 0.6), the cost \
of the dear points with the attainment of the cheap ones; the self-check measures that record against each fixed HPA \
point and runs the one that did better. What is left are ties with the HPA's curve within a day's noise: on these \
shapes the forecast adds about nothing to the HPA's own point, which the tuner then runs. **The price is the \
objective** where the record settled on was poor (the series with bursts' draw 2 at 98.84%, neither dominated nor \
meeting 99%). The volatile series' draws stay ahead (16-73% fewer misses at equal GPU-hours). **Without the margin** \
(2026-11-27: a replay need not reach a quarter of the error budget more than the objective at the next day's lower \
quartile, ``tuning.DEFAULT_MARGIN``) one draw moved, the diurnal shape's draw 3, from 1.62x at 99.43% to 1.46x at \
99.30% (1% fewer GPU-hours than the HPA's curve at equal attainment, from 5% more: replayed on its recorded days it \
settles on the HPA's 0.7 started early from the sixth tuning, where the margin moved it on to the HPA's 0.6 and 0.5 \
and to p99); the same three draws are dominated. The rules tried, adopted or not, are in the tuner rules section \
(`benchmarks/tuner_rules.py`)."""

DAYS = 14
POD_STARTUP_SECONDS = 120  # the frontier section's; --pod-startup gives others
# (warm_pool_quantile, reactive utilisation): the default profile's self-tuning candidates
POINTS = tuple(operating_points(ForecastProfile().tune_quantiles, ForecastProfile().tune_utilisations))
TARGETS = (0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
SAVING_AT = (0.6, 0.7, 0.8)
OBJECTIVE = (2.0, 0.99)  # seconds, share
# traces with a daily cycle: the only ones held to the last three targets
DAILY = ("nasa", "m_small", "lora", "diurnal web")
MISS_CUT_TARGET = 0.90
SAVING_TARGET = 0.30
TUNED_ORACLE_TARGET = 1.3


@dataclass(frozen=True)
class Curve:
    """One trace's runs: each predictive point, each HPA target, the anchors and the self-tuned default."""

    trace: str
    days: float
    predictive: tuple[PolicyResult, ...]
    hpa: tuple[PolicyResult, ...]
    anchors: tuple[PolicyResult, ...]
    tuned: PolicyResult
    oracle: PolicyResult
    notes: tuple[str, ...]
    seconds: float
    pod_startup_seconds: int = POD_STARTUP_SECONDS


def _interp(x: float, xs: list[float], ys: list[float]) -> float:
    order = np.argsort(xs)
    return float(np.interp(x, np.asarray(xs)[order], np.asarray(ys)[order]))


def first_days(trace: Trace, days: int = DAYS) -> TrafficSeries:
    """The trace's request rate, cleaned as the CLI cleans it, over its first ``days``."""
    series = prepare(trace.requests)
    return series.slice(0, min(len(series), days * SECONDS_PER_DAY // series.step_seconds))


def frontier_config(series: TrafficSeries, pod_startup_seconds: int, policies: tuple[str, ...]) -> SimulationConfig:
    """The frontier's simulation settings for ``series``: replicas sized so its peak needs ``PEAK_REPLICAS``, the
    HPA ``TARGETS``, the objective's wait (``OBJECTIVE``), bins replayed as ``--bin-shape auto``."""
    peak = float(np.nanmax(series.values))
    base = SimulationConfig(capacity_per_replica=peak / PEAK_REPLICAS, reactive_targets=TARGETS,
                            max_replicas=4 * PEAK_REPLICAS, bin_shape="auto", policies=policies)
    return replace(base, queue=replace(base.queue, slo_wait_seconds=OBJECTIVE[0]),
                   cluster=replace(base.cluster, pod_startup_seconds=pod_startup_seconds))


def self_tuned(taken_over_seconds: int | None = None) -> PredictiveFactory:
    """The self-tuned default as the controller runs it, for the objective ``OBJECTIVE``; ``taken_over_seconds``: when
    the controller takes the Deployment over (``predictive.factory``; None: the simulation's takeover)."""
    profile = ForecastProfile()
    wait, share = OBJECTIVE
    hook = retuner(lambda: registry.make_chain("default"), quantiles=profile.tune_quantiles,
                   utilisations=profile.tune_utilisations, slo_wait_seconds=wait, slo_attainment=share,
                   warmup_seconds=profile.history_seconds)
    return factory(lambda: registry.make_chain("default"), profile=profile, retune=hook,
                   taken_over_seconds=taken_over_seconds)


def run_trace(source: Path | Trace, pod_startup_seconds: int = POD_STARTUP_SECONDS, whole: bool = True) -> Curve:
    """One trace's frontier (a trace file, or a trace such as a synthetic shape); ``whole=False`` runs only what the
    start-up sensitivity needs (the self-tuned default, the HPA targets and the oracle)."""
    t0 = time.perf_counter()
    trace = source if isinstance(source, Trace) else load_trace(source)
    series = first_days(trace)
    base = frontier_config(series, pod_startup_seconds,
                           ("reactive", "oracle", "hpa-queue", "prodstack-queue", "keda-queue",
                            "predictive-persistence") if whole else ("reactive", "oracle"))
    pinned = replace(ForecastProfile(), self_tune=False)
    persistence = factory(lambda: registry.make_chain("persistence"),
                          profile=replace(pinned, model="persistence"), name="predictive-persistence")
    anchors = simulate(series, base, trace.name, persistence=persistence)
    only = replace(base, policies=("predictive",))
    points = []
    for q, u in POINTS if whole else ():
        run = simulate(series, only, trace.name, predictive=factory(
            lambda: registry.make_chain("default"),
            profile=replace(pinned, warm_pool_quantile=q, quantile=min(pinned.quantile, q), reactive_utilisation=u)))
        points.append(replace(run.policies["predictive"], name=f"predictive@{q}" + ("" if u == 1 else f"/u{u:g}")))
    tuned_run = simulate(series, only, trace.name, predictive=self_tuned())
    hpa = tuple(r for n, r in anchors.policies.items() if n.startswith("reactive@"))
    others = tuple(r for n, r in anchors.policies.items()
                   if n.startswith(("hpa-queue", "prodstack-queue", "keda-queue", "predictive-persistence")))
    return Curve(trace.name, len(series) * series.step_seconds / SECONDS_PER_DAY, tuple(points), hpa, others,
                 replace(tuned_run.policies["predictive"], name="predictive (self-tuned)"),
                 anchors.policies["oracle"], tuple(n for n in tuned_run.notes if "self-tuned" in n),
                 time.perf_counter() - t0, pod_startup_seconds)


def saving_at(curve: Curve, target: float) -> tuple[float, float, bool] | None:
    """(HPA attainment at ``target``, GPU-hours saved by the predictive curve at that attainment, whether that is a
    lower bound), or None without that target. Along the curve the saving is interpolated; below its cheapest
    point (which then attains more than the HPA) the saving of that point is a lower bound; above its dearest it
    is nan (the curve does not reach that attainment)."""
    hpa = next((r for r in curve.hpa if r.name == f"reactive@{target}"), None)
    if hpa is None:
        return None
    att = [r.slo_attainment for r in curve.predictive]
    if hpa.slo_attainment > max(att):
        return hpa.slo_attainment, math.nan, False
    if hpa.slo_attainment < min(att):
        cheapest = min(curve.predictive, key=lambda r: r.gpu_hours)
        return hpa.slo_attainment, 1.0 - cheapest.gpu_hours / hpa.gpu_hours, True
    gpu = _interp(hpa.slo_attainment, att, [r.gpu_hours for r in curve.predictive])
    return hpa.slo_attainment, 1.0 - gpu / hpa.gpu_hours, False


def miss_cut(curve: Curve, run: PolicyResult) -> float:
    """SLO misses cut against the HPA's curve interpolated at ``run``'s GPU-hours (nan: outside the curve)."""
    xs = [r.gpu_hours for r in curve.hpa]
    if not min(xs) <= run.gpu_hours <= max(xs):
        return math.nan
    hpa_miss = 1.0 - _interp(run.gpu_hours, xs, [r.slo_attainment for r in curve.hpa])
    return math.nan if hpa_miss <= 0 else 1.0 - (1.0 - run.slo_attainment) / hpa_miss


def beats(a: PolicyResult, b: PolicyResult) -> bool:
    """``a`` dominates ``b``: no more GPU-hours and no less attainment, one of them strictly."""
    return (a.gpu_hours <= b.gpu_hours and a.slo_attainment >= b.slo_attainment
            and (a.gpu_hours < b.gpu_hours or a.slo_attainment > b.slo_attainment))


def efficient(curve: Curve) -> tuple[PolicyResult, ...]:
    """The predictive curve: the points no other predictive point dominates (the ones self-tuning can end on)."""
    return tuple(p for p in curve.predictive if not any(beats(o, p) for o in curve.predictive if o is not p))


def dominated(curve: Curve) -> list[str]:
    """Points of the predictive curve (``efficient``) that some HPA point dominates, and the self-tuned run if an
    HPA point or any anchor (the queue HPAs, ``predictive-persistence``) dominates it."""
    out = []
    for p in efficient(curve):
        beaten = next((h for h in curve.hpa if beats(h, p)), None)
        if beaten is not None:
            out.append(f"{p.name} by {beaten.name}")
    beaten_by = [h.name for h in (*curve.hpa, *curve.anchors) if beats(h, curve.tuned)]
    if beaten_by:
        out.append(f"{curve.tuned.name} by {', '.join(beaten_by)}")
    return out


def _pct(x: float, digits: int = 0) -> str:
    return "n/a" if not math.isfinite(x) else f"{100 * x:.{digits}f}%"


def _cut(x: float) -> str:
    """Misses cut; a cut below -100% (more than twice the HPA's misses) as how many times the HPA's misses."""
    return f"{1.0 - x:.0f}x more" if math.isfinite(x) and x < -1.0 else _pct(x)


def markdown(curves: list[Curve], seconds: float) -> str:
    wait, share = OBJECTIVE
    lines = [
        "## frontier",
        "",
        f"`python -m benchmarks.frontier`: the first {DAYS} days of every multi-day trace and the four seeded "
        "synthetic shapes of `benchmarks/backtest.py` (`synthetic_traces`: diurnal web, two LLM-serving series "
        "without a daily cycle in 10-minute bins, a bursty social stream), under the queue "
        f"({share * 100:g}% of requests must start within {wait:g} s; 60 s timeout), replicas sized so the peak needs "
        f"{PEAK_REPLICAS}, pod start-up {curves[0].pod_startup_seconds if curves else POD_STARTUP_SECONDS} s, node "
        "start-up 180 s. Predictive curve: the default profile pinned at "
        f"each point self-tuning chooses from (`warm_pool_quantile` {', '.join(str(q) for q, u in POINTS if u == 1)}; "
        f"80 with the reactive floor at utilisation {', '.join(f'{u:g}' for _, u in POINTS if u < 1)}: "
        "`predictive@80/u0.85`); the HPA's curve: targets "
        f"{', '.join(f'{t:g}' for t in TARGETS)}; *self-tuned*: the default profile as the controller runs it, "
        "re-choosing its point after each daily refit by replaying its last day, pooled with the days replayed "
        "before (up to a week; `autoscaler/simulation/tuning.py`).",
        "",
        "| trace | policy | GPU-h / oracle | SLO attained | wait p99 s | dropped | misses cut vs HPA at same GPU-h |",
        "|---|---|---|---|---|---|---|",
    ]
    for c in curves:
        first = True
        for r in (*c.predictive, c.tuned, *c.anchors, *c.hpa):
            cut = miss_cut(c, r) if r in (*c.predictive, c.tuned) else math.nan
            lines.append(
                f"| {c.trace if first else ''} | {r.name} | {r.gpu_hours / c.oracle.gpu_hours:.2f}x | "
                f"{_pct(r.slo_attainment, 3)} | {r.wait_p99_seconds:.1f} | {_pct(r.dropped_fraction, 3)} | "
                f"{_cut(cut) if r in (*c.predictive, c.tuned) else ''} |")
            first = False
    lines += ["", "| trace | GPU-h saved at the HPA's attainment (0.6 / 0.7 / 0.8) | best misses cut at equal GPU-h "
              "| dominated by (HPA targets; the self-tuned run also by the anchors) "
              "| self-tuned: attained (target 99%) | self-tuned GPU-h / oracle |",
              "|---|---|---|---|---|---|"]
    verdicts: list[str] = []
    for c in curves:
        daily = any(k in c.trace for k in DAILY)
        savings = [saving_at(c, t) for t in SAVING_AT]
        shown = " / ".join("n/a" if s is None else (f"{'>= ' if s[2] else ''}{_pct(s[1])} (at {_pct(s[0], 2)})")
                           for s in savings)
        cuts = [miss_cut(c, r) for r in (*c.predictive, c.tuned)]
        best = max((x for x in cuts if math.isfinite(x)), default=math.nan)
        dom = dominated(c)
        ratio = c.tuned.gpu_hours / c.oracle.gpu_hours
        lines.append(f"| {c.trace} | {shown} | {_cut(best)} | {'; '.join(dom) if dom else 'no'} | "
                     f"{_pct(c.tuned.slo_attainment, 3)} | {ratio:.2f}x |")
        curve_dom = [d for d in dom if not d.startswith(c.tuned.name)]
        tuned_dom = [d for d in dom if d.startswith(c.tuned.name)]
        also = f" (the self-tuned run is: {tuned_dom[0]})" if tuned_dom else ""
        verdicts.append(f"{c.trace}: curve not dominated {'PASS' if not curve_dom else 'FAIL'}{also}; "
                        "self-tuned meets 99% "
                        f"{'PASS' if c.tuned.slo_attainment >= share else 'FAIL'}" + (
                            f"; misses cut >= 90% {'PASS' if best >= MISS_CUT_TARGET else 'FAIL'}; "
                            f"GPU-h saved >= 30% at equal attainment "
                            f"{'PASS' if any(s and s[1] >= SAVING_TARGET for s in savings) else 'FAIL'}; "
                            f"self-tuned <= 1.3x oracle {'PASS' if ratio <= TUNED_ORACLE_TARGET else 'FAIL'}"
                            if daily else " (no daily cycle: only the first two targets apply)"))
    lines += ["", *[f"- {v}" for v in verdicts], ""]
    lines += [f"- {n}" for n in legend_once(f"{n} ({c.trace})" for c in curves for n in c.notes)]
    lines += ["", f"Whole run: {seconds:.0f} s. Machine: {machine()}.", "", READING]
    return "\n".join(lines)


def cheapest_meeting(curve: Curve) -> PolicyResult:
    """The HPA target a user would pick: the cheapest that meets the objective (else the one that attains most)."""
    picked = hpa_a_user_picks(curve.hpa, OBJECTIVE[1])
    if picked is None:
        raise ValueError(f"{curve.trace}: no HPA target ran")
    return picked[0]


def hpa_gpu_hours_at(curve: Curve, attainment: float) -> float:
    """The HPA's curve (GPU-hours against attainment, interpolated between targets) at ``attainment``; nan outside
    the targets' range."""
    att = [r.slo_attainment for r in curve.hpa]
    if not min(att) <= attainment <= max(att):
        return math.nan
    return _interp(attainment, att, [r.gpu_hours for r in curve.hpa])


def _against_hpa(c: Curve) -> str:
    """The self-tuned run against the HPA, as the table cells of the start-up sensitivity and the other draws:
    self-tuned GPU-h / oracle, attained, the HPA target a user would pick, its GPU-h / oracle and attainment, GPU-h
    saved at equal attainment, misses cut at equal GPU-h, what dominates the self-tuned run."""
    hpa = cheapest_meeting(c)
    at = hpa_gpu_hours_at(c, c.tuned.slo_attainment)
    top = max(c.hpa, key=lambda r: (r.slo_attainment, -r.gpu_hours))
    if math.isfinite(at):
        saved = _pct(1.0 - c.tuned.gpu_hours / at)
    elif c.tuned.slo_attainment > top.slo_attainment:  # above every target: against the one that attains most
        saved = f">= {_pct(1.0 - c.tuned.gpu_hours / top.gpu_hours)}"
    else:
        saved = "n/a"
    beaten = [d.split(" by ", 1)[1] for d in dominated(c) if d.startswith(c.tuned.name)]
    o = c.oracle.gpu_hours
    return (f"{c.tuned.gpu_hours / o:.2f}x | {_pct(c.tuned.slo_attainment, 3)} | {hpa.name} | "
            f"{hpa.gpu_hours / o:.2f}x | {_pct(hpa.slo_attainment, 3)} | {saved} | {_cut(miss_cut(c, c.tuned))} | "
            f"{beaten[0] if beaten else 'no'}")


def draws(curves: list[Curve], seconds: float, numbers: Sequence[int]) -> str:
    """The ``other draws`` section: the synthetic shapes drawn again with other seeds, the self-tuned default
    against the HPA on each (the start-up sensitivity's columns)."""
    wait, share = OBJECTIVE
    lines = [
        "## other draws",
        "",
        f"`python -m benchmarks.frontier --draws {','.join(str(n) for n in numbers)}`: the four synthetic shapes of "
        "the frontier section drawn again with other seeds (`synthetic_traces(draw)` in `benchmarks/backtest.py`: each "
        f"shape's seed + {DRAW_SEED_STEP} x the draw), the first {DAYS} days, {share * 100:g}% of requests within "
        f"{wait:g} s, pod start-up {POD_STARTUP_SECONDS} s, node start-up 180 s: the self-tuned default, the HPA "
        "targets and the oracle. Why: the frontier was read on one series of each shape, and the project is measured "
        "on traffic it has not seen; a rule that holds on one draw and not on the next was fitted to the draw. "
        "Columns as in the start-up sensitivity.",
        "",
        "| trace | self-tuned GPU-h / oracle | self-tuned attained | HPA | HPA GPU-h / oracle | HPA attained "
        "| GPU-h saved at equal attainment | misses cut at equal GPU-h | self-tuned dominated by |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    lines += [f"| {c.trace} | {_against_hpa(c)} |" for c in sorted(curves, key=lambda c: c.trace)]
    lines += ["", f"Run time ({len(curves)} traces): {seconds:.0f} s. Machine: {machine()}.", "", READING_DRAWS]
    return "\n".join(lines)


def sensitivity(by_startup: dict[int, list[Curve]], seconds: float) -> str:
    """The ``start-up sensitivity`` section: per trace and pod start-up, the self-tuned default against the HPA."""
    wait, share = OBJECTIVE
    startups = sorted(by_startup)
    lines = [
        "## start-up sensitivity",
        "",
        f"`python -m benchmarks.frontier --pod-startup {','.join(f'{s}s' for s in startups)}`: the frontier "
        f"section's runs (the first {DAYS} days of every multi-day trace and of the synthetic shapes, "
        f"{share * 100:g}% of requests within "
        f"{wait:g} s, node start-up 180 s) at each pod start-up; 30 s is a node with the weights cached, 300 s a cold "
        "pull of a large model. *HPA*: the cheapest utilisation target that meets the objective (else the one that "
        "attains most); *GPU-h saved*: by the self-tuned default against the HPA's curve interpolated at the "
        "self-tuned attainment (\">=\" where it attains more than every target: against the one that attains most; "
        "n/a where it attains less than every target); *misses cut*: the self-tuned default's SLO misses "
        "against the HPA's curve interpolated at its GPU-hours; *dominated*: an HPA target (or, where the whole "
        "frontier ran, an anchor) with no more GPU-hours and no less attainment than the self-tuned run.",
        "",
        "| trace | pod start-up | self-tuned GPU-h / oracle | self-tuned attained | HPA | HPA GPU-h / oracle "
        "| HPA attained | GPU-h saved at equal attainment | misses cut at equal GPU-h | self-tuned dominated by |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    traces = sorted({c.trace for curves in by_startup.values() for c in curves})
    for trace in traces:
        first = True
        for startup in startups:
            c = next((x for x in by_startup[startup] if x.trace == trace), None)
            if c is None:
                continue
            lines.append(f"| {trace if first else ''} | {startup} s | {_against_hpa(c)} |")
            first = False
    lines += ["", f"Run time ({len(startups)} start-ups): {seconds:.0f} s. Machine: {machine()}.", "",
              READING_STARTUP]
    return "\n".join(lines)


def _startups(spec: str) -> tuple[int, ...]:
    try:
        values = tuple(dict.fromkeys(parse_duration(v.strip()) for v in spec.split(",") if v.strip()))  # in order
    except ValueError as exc:
        raise SystemExit(f"--pod-startup: {exc}") from None
    if not values or any(v <= 0 for v in values):
        raise SystemExit("--pod-startup: give one or more durations > 0, e.g. 120s or 30s,60s,120s,300s")
    return values


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--traces", default=None,
                        help="only trace files whose name contains one of these (comma-separated); writes nothing")
    parser.add_argument("--shapes", choices=("all", "none"), default="all",
                        help="the seeded synthetic shapes of benchmarks/backtest.py too (default all; --traces "
                        "matches their names as well, e.g. --traces 'LLM serving')")
    parser.add_argument("--jobs", type=int, default=2, help="traces simulated at once (default 2)")
    parser.add_argument("--pod-startup", default=f"{POD_STARTUP_SECONDS}s", metavar="DURATION[,DURATION...]",
                        help=f"pod start-up(s) to run the frontier at (default {POD_STARTUP_SECONDS}s); several write "
                        "the start-up sensitivity section")
    parser.add_argument("--tuned-only", action="store_true",
                        help="run only the self-tuned default, the HPA targets and the oracle (what the start-up "
                        "sensitivity needs); writes nothing")
    parser.add_argument("--draws", default=None, metavar="N[,N...]",
                        help="instead, the synthetic shapes drawn again with other seeds (draws 1, 2, ...: the "
                        "self-tuned default, the HPA targets and the oracle at the default pod start-up); writes the "
                        "other draws section")
    parser.add_argument("--save", type=Path, default=None, metavar="FILE.pkl",
                        help="also keep the runs in FILE (rewritten as each trace finishes)")
    parser.add_argument("--load", type=Path, action="append", default=None, metavar="FILE.pkl",
                        help="render runs kept by --save instead of simulating (repeatable: the runs are merged; "
                        "writes the sections)")
    args = parser.parse_args(argv)
    startups = _startups(args.pod_startup)
    t0 = time.perf_counter()
    if args.draws is not None:
        numbers = draw_numbers(args.draws)
        with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            futures = [pool.submit(run_trace, trace, POD_STARTUP_SECONDS, False)
                       for n in numbers for trace in synthetic_traces(n)]
            curves = []
            for future in as_completed(futures):
                curves.append(future.result())
                print(f"done: {curves[-1].trace} ({curves[-1].seconds:.0f} s)", flush=True)
        text = draws(curves, time.perf_counter() - t0, numbers)
        print(text)
        update_section("other-draws", text)
        return 0
    by_startup: dict[int, list[Curve]] = {}
    seconds = 0.0
    if args.load:
        for kept in args.load:
            took, runs = pickle.loads(kept.read_bytes())
            seconds += took
            for startup, curves in runs.items():
                by_startup.setdefault(startup, []).extend(curves)
        by_startup = {s: sorted(c, key=lambda x: x.trace) for s, c in by_startup.items() if s in startups}
    else:
        require_traces(TRACES, "python -m benchmarks.frontier")
        wanted = None if args.traces is None else [t.strip() for t in args.traces.split(",") if t.strip()]
        sources: list[Path | Trace] = [p for p in sorted(TRACES.glob("*.csv"))
                                       if multi_day(p) and (wanted is None or any(t in p.name for t in wanted))]
        if args.shapes == "all":
            sources += [t for t in synthetic_traces() if wanted is None or any(w in t.name for w in wanted)]
        with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            futures = [pool.submit(run_trace, source, startup, not args.tuned_only)
                       for startup in startups for source in sources]
            for future in as_completed(futures):
                curve = future.result()
                by_startup.setdefault(curve.pod_startup_seconds, []).append(curve)
                seconds = time.perf_counter() - t0
                print(f"done: {curve.trace} at {curve.pod_startup_seconds} s pod start-up ({curve.seconds:.0f} s)",
                      flush=True)
                if args.save is not None:
                    args.save.write_bytes(pickle.dumps((seconds, by_startup)))
        for curves in by_startup.values():
            curves.sort(key=lambda c: c.trace)
    write = bool(args.load) or (args.traces is None and not args.tuned_only and args.shapes == "all")
    for startup, curves in sorted(by_startup.items()):
        if not all(c.predictive for c in curves):
            continue  # a sensitivity-only run: no frontier to show
        per = seconds if len(by_startup) == 1 else sum(c.seconds for c in curves) / max(1, args.jobs)
        text = markdown(curves, per)
        print(text)
        if startup == POD_STARTUP_SECONDS and write:
            update_section("frontier", text)
    if len(by_startup) > 1:
        text = sensitivity(by_startup, seconds)
        print(text)
        if write:
            update_section("startup-sensitivity", text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
