"""The SLO frontier: the predictive policy's cost/attainment curve against the HPA's, and the self-tuned default.

``python -m benchmarks.frontier`` (writes the ``frontier`` section of docs/BENCHMARKS.md; ``--traces NAME`` runs
only matching traces and writes nothing). On every multi-day trace in ``../shared/traces`` (its first
``DAYS`` days), under the queue of ``autoscaler.simulation.queue`` (2 s objective, 60 s timeout, bins replayed
as ``simulate --bin-shape auto``), replicas sized so the trace's peak needs 20, pod start-up 120 s, node
start-up 180 s:

* the predictive curve: the default profile pinned at each operating point in ``POINTS`` (a ``warm_pool_quantile``,
  the replicas' own band at the lower of it and the profile's ``quantile``, and a ``reactive_utilisation``), the
  points self-tuning chooses from;
* the HPA's curve: the faithful HPA on utilisation at each target in ``TARGETS``; beside it the HPA as the vLLM
  reference deploys it (``hpa-queue@10``) and the last-value planner (``predictive-persistence``);
* the self-tuned default: the default profile as the controller runs it (``self_tune: true``), re-choosing its
  operating point after every daily refit for a 99% / 2 s objective;
* the oracle.

Reported: (1) GPU-hours saved at the HPA's attainment at targets 0.6, 0.7 and 0.8 (the predictive curve
interpolated at that attainment); (2) SLO misses cut at equal GPU-hours (the HPA's curve interpolated at each
predictive point's GPU-hours); (3) whether an HPA point dominates a predictive point (no more GPU-hours and no
less attainment, one of them strictly); (4) the self-tuned default's attainment against 99% and its GPU-hours
over the oracle's.
"""

from __future__ import annotations

import argparse
import math
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from autoscaler.config import ForecastProfile
from autoscaler.simulation.engine import PolicyResult, SimulationConfig, simulate
from autoscaler.simulation.predictive import factory
from autoscaler.simulation.tuning import retuner
from autoscaler.traces import load_trace
from benchmarks.report import machine, update_section
from benchmarks.simulate import PEAK_REPLICAS, TRACES, multi_day
from models import registry
from models.clean import prepare
from models.types import SECONDS_PER_DAY

DAYS = 14
POINTS = ((80, 1.0), (90, 1.0), (95, 1.0), (99, 1.0), (80, 0.85), (80, 0.7))  # (warm_pool_quantile, utilisation)
TARGETS = (0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
SAVING_AT = (0.6, 0.7, 0.8)
OBJECTIVE = (2.0, 0.99)  # seconds, share
DAILY = ("nasa", "m_small", "lora")  # traces with a daily cycle (issue 10's targets)
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


def _interp(x: float, xs: list[float], ys: list[float]) -> float:
    order = np.argsort(xs)
    return float(np.interp(x, np.asarray(xs)[order], np.asarray(ys)[order]))


def run_trace(path: Path) -> Curve:
    t0 = time.perf_counter()
    trace = load_trace(path)
    series = prepare(trace.requests)
    series = series.slice(0, min(len(series), DAYS * SECONDS_PER_DAY // series.step_seconds))
    peak = float(np.nanmax(series.values))
    base = SimulationConfig(capacity_per_replica=peak / PEAK_REPLICAS, reactive_targets=TARGETS,
                            max_replicas=4 * PEAK_REPLICAS, bin_shape="auto",
                            policies=("reactive", "oracle", "hpa-queue", "predictive-persistence"))
    wait, share = OBJECTIVE
    base = replace(base, queue=replace(base.queue, slo_wait_seconds=wait))
    pinned = replace(ForecastProfile(), self_tune=False)
    persistence = factory(lambda: registry.make_chain("persistence"),
                          profile=replace(pinned, model="persistence"), name="predictive-persistence")
    anchors = simulate(series, base, trace.name, persistence=persistence)
    only = replace(base, policies=("predictive",))
    points = []
    for q, u in POINTS:
        run = simulate(series, only, trace.name, predictive=factory(
            lambda: registry.make_chain("default"),
            profile=replace(pinned, warm_pool_quantile=q, quantile=min(pinned.quantile, q), reactive_utilisation=u)))
        points.append(replace(run.policies["predictive"], name=f"predictive@{q}" + ("" if u == 1 else f"/u{u:g}")))
    profile = ForecastProfile()
    hook = retuner(lambda: registry.make_chain("default"), quantiles=profile.tune_quantiles,
                   utilisations=profile.tune_utilisations, slo_wait_seconds=wait, slo_attainment=share,
                   warmup_seconds=profile.history_seconds)
    tuned_run = simulate(series, only, trace.name,
                         predictive=factory(lambda: registry.make_chain("default"), profile=profile, retune=hook))
    hpa = tuple(r for n, r in anchors.policies.items() if n.startswith("reactive@"))
    others = tuple(r for n, r in anchors.policies.items() if n.startswith(("hpa-queue", "predictive-persistence")))
    return Curve(trace.name, len(series) * series.step_seconds / SECONDS_PER_DAY, tuple(points), hpa, others,
                 replace(tuned_run.policies["predictive"], name="predictive (self-tuned)"),
                 anchors.policies["oracle"], tuple(n for n in tuned_run.notes if "self-tuned" in n),
                 time.perf_counter() - t0)


def saving_at(curve: Curve, target: float) -> tuple[float, float] | None:
    """(HPA attainment at ``target``, GPU-hours saved by the predictive curve at that attainment), or None when
    that attainment is outside the predictive curve (it is not interpolated beyond its ends)."""
    hpa = next((r for r in curve.hpa if r.name == f"reactive@{target}"), None)
    if hpa is None:
        return None
    att = [r.slo_attainment for r in curve.predictive]
    if not min(att) <= hpa.slo_attainment <= max(att):
        return hpa.slo_attainment, math.nan
    gpu = _interp(hpa.slo_attainment, att, [r.gpu_hours for r in curve.predictive])
    return hpa.slo_attainment, 1.0 - gpu / hpa.gpu_hours


def miss_cut(curve: Curve, run: PolicyResult) -> float:
    """SLO misses cut against the HPA's curve interpolated at ``run``'s GPU-hours (nan: outside the curve)."""
    xs = [r.gpu_hours for r in curve.hpa]
    if not min(xs) <= run.gpu_hours <= max(xs):
        return math.nan
    hpa_miss = 1.0 - _interp(run.gpu_hours, xs, [r.slo_attainment for r in curve.hpa])
    return math.nan if hpa_miss <= 0 else 1.0 - (1.0 - run.slo_attainment) / hpa_miss


def dominated(curve: Curve) -> list[str]:
    """Predictive points some HPA point dominates: no more GPU-hours and no less attainment, one strictly."""
    out = []
    for p in curve.predictive:
        for h in curve.hpa:
            if (h.gpu_hours <= p.gpu_hours and h.slo_attainment >= p.slo_attainment
                    and (h.gpu_hours < p.gpu_hours or h.slo_attainment > p.slo_attainment)):
                out.append(f"{p.name} by {h.name}")
                break
    return out


def _pct(x: float, digits: int = 0) -> str:
    return "n/a" if not math.isfinite(x) else f"{100 * x:.{digits}f}%"


def markdown(curves: list[Curve], seconds: float) -> str:
    wait, share = OBJECTIVE
    lines = [
        "## frontier",
        "",
        f"`python -m benchmarks.frontier`: the first {DAYS} days of every multi-day trace, under the queue "
        f"({share * 100:g}% of requests must start within {wait:g} s; 60 s timeout), replicas sized so the peak needs "
        f"{PEAK_REPLICAS}, pod start-up 120 s, node start-up 180 s. Predictive curve: the default profile pinned at "
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
                f"{_pct(cut) if r in (*c.predictive, c.tuned) else ''} |")
            first = False
    lines += ["", "| trace | GPU-h saved at the HPA's attainment (0.6 / 0.7 / 0.8) | best misses cut at equal GPU-h "
              "| HPA dominates | self-tuned: attained (target 99%) | self-tuned GPU-h / oracle |",
              "|---|---|---|---|---|---|"]
    verdicts: list[str] = []
    for c in curves:
        daily = any(k in c.trace for k in DAILY)
        savings = [saving_at(c, t) for t in SAVING_AT]
        shown = " / ".join("n/a" if s is None else (f"{_pct(s[1])} (at {_pct(s[0], 2)})") for s in savings)
        cuts = [miss_cut(c, r) for r in c.predictive]
        best = max((x for x in cuts if math.isfinite(x)), default=math.nan)
        dom = dominated(c)
        ratio = c.tuned.gpu_hours / c.oracle.gpu_hours
        lines.append(f"| {c.trace} | {shown} | {_pct(best)} | {'; '.join(dom) if dom else 'no'} | "
                     f"{_pct(c.tuned.slo_attainment, 3)} | {ratio:.2f}x |")
        verdicts.append(f"{c.trace}: not dominated {'PASS' if not dom else 'FAIL'}; self-tuned meets 99% "
                        f"{'PASS' if c.tuned.slo_attainment >= share else 'FAIL'}" + (
                            f"; misses cut >= 90% {'PASS' if best >= MISS_CUT_TARGET else 'FAIL'}; "
                            f"GPU-h saved >= 30% at equal attainment "
                            f"{'PASS' if any(s and s[1] >= SAVING_TARGET for s in savings) else 'FAIL'}; "
                            f"self-tuned <= 1.3x oracle {'PASS' if ratio <= TUNED_ORACLE_TARGET else 'FAIL'}"
                            if daily else " (no daily cycle: only the first two targets apply)"))
    lines += ["", *[f"- {v}" for v in verdicts], ""]
    for c in curves:
        lines += [f"- {n} ({c.trace})" for n in c.notes]
    lines += ["", f"Whole run: {seconds:.0f} s. Machine: {machine()}."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--traces", default=None, help="only trace files whose name contains this")
    parser.add_argument("--jobs", type=int, default=2, help="traces simulated at once (default 2)")
    args = parser.parse_args(argv)
    paths = sorted(p for p in TRACES.glob("*.csv") if multi_day(p) and (args.traces is None or args.traces in p.name))
    t0 = time.perf_counter()
    with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        curves = list(pool.map(run_trace, paths))
    text = markdown(curves, time.perf_counter() - t0)
    print(text)
    if args.traces is None:
        update_section("frontier", text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
