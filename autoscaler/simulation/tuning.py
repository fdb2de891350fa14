"""Self-tuning: find the cheapest operating point that meets a Deployment's latency objective on its own history.

Why it exists: inference teams state an objective ("99% of requests start within 2 s"), not a quantile. Which
``warm_pool_quantile`` meets that objective at the least GPU cost depends on the Deployment's traffic (how
forecastable it is, how bursty) and on its start-up time, so it cannot be one number for every Deployment.
No anchor answers it: Dynamo Planner needs an offline profiling run, KEDA, WVA and AIBrix have no notion
of what an objective costs. Here the controller (``autoscaler.runtime.loop``) and the simulator's own
predictive policy (``autoscaler.simulation.predictive``) replay the Deployment's recent history through the
same planner and queue model as ``simulate``, at a few operating points, and keep the cheapest that meets
the objective, on the days replayed and at the next day's lower quartile.

How, and why it is cheap enough to run daily per Deployment:

* the forecasts are the controller's own: a ``ForecastKeeper`` (``autoscaler.engine.forecasting``) is fed the
  history as the running Deployment's keeper is, so it is fitted on the history before the replay window (never
  on the window itself: the replay must not know its future), absorbs the window bin by bin with ``update`` (each
  bin once it is no longer the newest, as the controller does), and refits where the controller would. Its
  forecasts (with every band any candidate needs, as far as the farthest looks) are computed **once** and shared
  by every candidate, because the operating points differ only in the planner's knobs (``ScalingPolicy.level``
  and ``warm_pool_level``). Before, the replay forecast with its own loop, which had absorbed one bin more than
  the controller ever has: on 10-minute bins its forecast points looked ten minutes fresher than they run;
* each candidate then runs the planner in closed loop against the simulated cluster (pod start-up = the
  Deployment's learned lead, node start-up likewise) with the FIFO queue of ``autoscaler.simulation.queue``;
* each day's replay is pooled with the previous days' (up to ``DEFAULT_POOL_DAYS``, the window an SLO is
  usually stated over): a candidate's attainment is its on-time requests over its requests on all pooled days,
  its cost their GPU-hours. Why: one day is a small sample of a bursty service, and a point chosen because
  yesterday was calm misses tomorrow (measured: choosing on the last day alone left ServeGen m_small at 98.7%
  against a 99% objective, pooled over a week it holds). Pooling costs no CPU: each day replays only the newest
  day;
* the error budget (``budget_requirement``): an objective is a share over a window, so the days behind count.
  What users got on each pooled day is the replay of the point that ran that day; when those days have spent part
  of the window's error budget, the next day's requirement rises above the objective until the bad day leaves the
  window, as an SRE spends an error budget. Measured: without it, a regime change on ServeGen m_small (the cheapest
  point served 100% on days 4-9 and 91.7% on day 9) left the fortnight at 98.85%. Once the days behind have missed
  more than the whole window may (the window is lost), the requirement falls back to the objective: every window
  that holds the bad day is missed whatever runs next, so paying for the safest point until it leaves buys nothing.
  Measured: chasing a lost window ran the dearest HPA-like point for five days on m_small, and the fortnight cost
  more than a fixed HPA target that attained more (the self-tuned row was dominated by the HPA at 0.7);
* the choice (``choose``): among candidates whose next day, predicted from the pooled days' day-to-day variation,
  still reaches ``target`` at its lower quartile (``meets``: ``NEXT_DAY_Z`` prediction standard errors below the
  pooled attainment, so the pooled attainment reaches it too; a ``margin`` may ask the replay for more, ``target +
  margin * (1 - target)``, and by default asks nothing more: ``DEFAULT_MARGIN``), the one with the fewest GPU-hours
  of those that also reached ``target`` on **every** pooled day (``holds``), else of all of them. Why a prediction
  bound and not the mean's: the point chosen runs one new day, which is not one of the replayed days, and the
  cheapest of several noisy estimates that clear a bar is biased towards having been lucky on them. Why every day
  first: one bad day among six calm ones is a small spread, so the quartile still passes a point that missed on the
  day the traffic turned, and a day like that comes again. Measured (``benchmarks/frontier``, 120 s start-up): with
  the quartile alone ServeGen m_small's tuner passed p90 again although it had missed on an earlier day, p90 ran
  into the burst, and (with the lost window chased) the fortnight was 1.39x the oracle at 99.43%, dominated by the
  HPA at 0.7; preferring points that held every day (and holding a lost window to the objective) moved it to the
  HPA-like points that held through the burst, 1.25x at 99.67% on the same engine, and 1.27x at 99.68% (dominated by
  no HPA target) on the engine whose reactive floor reads the last minute's arrival rate. Why not every day alone:
  where days swing without a regime change no point may hold on all seven days, and requiring it would run the
  safest point; the quartile still finds the cheapest that meets the objective then. When none meets it, the safest
  point (the most attainment; the fewest GPU-hours among ties) is chosen and the flag is False, so the caller can
  say so; but a safest point that is not one of the HPA's own points runs only if it attained at least as much as
  the safest of them on every pooled day (else that HPA point runs: ``choose``);
* the self-check, before that choice (``decide``): the tuner keeps a record of up to ``DEFAULT_RECORD_DAYS`` replayed
  days, each with the point that ran on it, and when one of the HPA's own points did strictly better over the record
  than what ran (``beaten_by``: no more GPU-hours, no more misses, one of them fewer), the one of them with the
  fewest misses runs, unless the pooled days are spending the error budget (then ``choose`` decides, so a change in
  the traffic can move the point). Why: re-choosing daily on bursty traffic mixes points, cheap before a burst and
  dear after it, and on the HPA's bending curve a mix costs more than the fixed target that attains as much, which is
  what a user compares us with. The price, measured (``benchmarks/tuner_rules.py``): on bursty shapes it settles on
  an HPA point that beat a poor record and attains a little under the objective where the rule without it paid a
  fifth more GPU-hours to meet it.

Before any replay has chosen a point, a self-tuned Deployment runs the start point (``start_policy``: the HPA's own
point at the middle target), in the controller and in the simulator alike, and until the record holds
``MIN_BAND_DAYS`` replayed days ``choose`` picks among the HPA's own points only (``decide``). A replay also replays
the whole days before its own that the record lacks, up to a pool's worth (``tune``'s ``backfill_days``): a
Deployment whose history is in Prometheus when the controller first tunes it chooses on a week at once, and its
self-check reads those days as running what this rule would have run there (``assume``), so it checks the daily
re-choice from the first tuning on.

Properties the tests hold it to: a looser objective never chooses a point that costs more within a tier (the set
of points that meet it, and of those that hold it, only grows; a looser objective can move the choice from a point
that merely meets the objective to a dearer one that held it every day, which is the point of the tiers); the choice
is a pure function of its inputs (no clock reads: the history carries its own time).
"""

from __future__ import annotations

import math
import pickle
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from autoscaler.config.schema import ForecastProfile
from autoscaler.domain.coldstart import ColdStartProfile
from autoscaler.domain.types import ScalingPolicy, point_label
from autoscaler.engine.forecasting import ForecastKeeper, forecast_levels, forecast_steps
from autoscaler.simulation.cluster import DEFAULT_GPUS_PER_NODE, Cluster, ClusterConfig
from autoscaler.simulation.engine import (
    DEFAULT_REACTIVE_TARGETS,
    run_closed_loop,
    scale_in_of,
    score,
    tick_seconds_for,
)
from autoscaler.simulation.predictive import FORECAST_ERRORS, PendingTuning, PredictivePolicy, Retune
from autoscaler.simulation.queue import QueueConfig, Segments
from autoscaler.simulation.reactive import SCALE_DOWN_STABILIZATION_SECONDS
from autoscaler.simulation.traffic import resolve, spread
from models.base import Forecaster
from models.types import SECONDS_PER_DAY, FloatArray, Forecast, TrafficSeries

DEFAULT_REPLAY_SECONDS = SECONDS_PER_DAY
# Of the error budget (1 - target), kept in hand on the replay on top of the next day's lower quartile (``meets``).
# None by default since 2026-11-27: the quartile and the every-day tier (``holds``) already hold a day's noise, and a
# quarter (99.25% for a 99% objective), the default before, bought no objective met: replayed on 128 recorded
# fortnights (``benchmarks/tuner_rules.py``: the synthetic shapes' draws 1-16 at 120 s pod start-up, draws 1-8 at 30 s
# and at 300 s), an HPA target dominated 21 of them instead of 25, the objective was met on as many (82 of 96), for
# 0.5% fewer GPU-hours; the four trace files made the same choices.
DEFAULT_MARGIN = 0.0
DEFAULT_POOL_DAYS = 7  # replayed days a choice is made on (the newest and the ones before it)
# replayed days kept, each with the point that ran on it: the self-check's record (``beaten_by``), the SRE workbook's
# four-week SLO window
DEFAULT_RECORD_DAYS = 28
# Replayed days the record must hold before a point other than the HPA's own may be chosen as the cheapest meeting the
# objective (``decide``): that choice reads a point's attainment and its day-to-day spread, and one or two days show
# neither. Until then ``choose`` picks among the HPA's own points, as the start point is one.
MIN_BAND_DAYS = 3
OVERLAP_SHARE = 0.25  # a pooled day may overlap the newest replay by this share of it (tuned a little early)
# History before the replay window the forecaster is fitted on, so a new Deployment's first tuning comes after two days
# (the start point runs until then). Why not sooner (measured 2026-11-27, not adopted): with 6 h, the first tuning
# comes after 30 h (a day replayed, its forecaster fitted on the 6 h before it); on the frontier's settings (120 s pod
# start-up, the first 14 days) the four trace files, the synthetic shapes' draw 0 and three shapes of draw 1 were
# dominated by no HPA target either way and met the objective on 8 of 11 either way, but two of the trace files lost
# attainment: the Alibaba LoRA trace 98.65% -> 94.43% (for 24% fewer GPU-hours), ServeGen m_small 99.60% -> 98.11%,
# below the objective.
MIN_WARMUP_SECONDS = SECONDS_PER_DAY
DEFAULT_TIMEOUT_SECONDS = 60.0
DECISION_INTERVAL_SECONDS = 30  # the controller's loop period
MIN_OBSERVED_SHARE = 0.5  # of the replay window: a day mostly missing says nothing about the objective
# The next day must meet the objective at its lower quartile (the normal's 25th percentile, 0.6745 standard errors
# of prediction below the pooled attainment): the odds of a day that holds are 3 in 4 before the error budget. Among
# the points that pass it, one that met the objective on every pooled day is preferred (``holds``).
NEXT_DAY_Z = 0.6745
# When no point meets the objective, a forecast band point runs as the safest only if it misses at most this share of
# what the safest of the HPA's own points misses on the pooled days (``choose``): a band that buys less is paid for at
# a price the HPA's curve beats.
BAND_MISS_SHARE = 0.75
# The HPA's own operating points: quantile 50 with a utilisation u is the HPA at target u started early, the
# forecast adding only the lead (``ScalingPolicy.lead_only``: the median forecast at the lead, sized like the
# observed demand at u; no band, no warm pool). Why: a replay then always holds what the HPA would have done, so
# the choice is never dominated by it (the same targets as simulate's reactive@ rows).
LEAD_ONLY_QUANTILE = 50
# Why they stop at 0.5 although the benchmarks' HPA curves go down to 0.3 (measured 2026-11-27, not adopted): with
# the HPA at 0.3 and 0.4 among them, a fleet whose bursty Deployments only the HPA at 0.3 holds at 99% gained
# (``benchmarks.fleet_simulate --perf``'s 20 synthetic Deployments, with node headroom: objectives met on 20 of 20
# instead of 17, 31% fewer GPU-hours than HPA + Karpenter at equal attainment instead of 26%), but single Deployments
# paid for them in the error budget's chase after a burst, where the safest point runs: on the synthetic shapes'
# draws 1-8 (``benchmarks/tuner_rules.py``, recorded with them) dominated by an HPA target on 14 of 32 runs instead
# of 7 (10 of 32 when they may run only once no other point meets the objective), the objective met on 23 of 24
# instead of 21. Measured again with the rules of 2026-11-27's end (the self-check reading assumed days, no margin),
# on draws 1-8 recorded with 0.3 and 0.4 among the points: 12 of 32 dominated against 3 without them; 0.4 alone 5;
# the two only when no other point meets the objective on the pool 7 (met on 22 of 24 against 21); only when cheaper
# than a choice that misses the objective, never (the bursty runs' band points are cheaper than the HPA at 0.4).
# Buying attainment beyond the objective costs the same way (among the points that meet it and cost at least the
# choice, the least of GPU-hours / the choice's + k x missed share): k 50, 100, 200 gave 5, 8, 11 of 32 (met on
# 22-23 of 24). On these shapes the points lie on the HPA's curve or a hair below it, so attainment bought beyond the
# objective is what the HPA's lower targets sell for as little. A finer grid, 0.5-0.9 by 0.05 (a third more replays),
# recorded on draws 1-16 the same day (start point 0.7): dominated on 9 of 64 fortnights against 8, the objective met
# on 43 of 48 against 44, 1.1% fewer GPU-hours (1.7% fewer on draws 1-8, 0.4% on 9-16); on simulate's default traffic
# it still ran the HPA at 0.5 started early on most days (2,751.6 GPU-h at 99.424% against 2,779.0 at 99.433%).
DEFAULT_HPA_TARGETS: tuple[float, ...] = DEFAULT_REACTIVE_TARGETS


@dataclass(frozen=True)
class Candidate:
    """One operating point as replayed: its knob, what it cost and what users would have felt."""

    warm_pool_quantile: int
    gpu_hours: float
    slo_attainment: float
    wait_p99_seconds: float
    dropped_fraction: float
    requests: float = 0.0  # requests replayed (the weight when days are pooled)
    reactive_utilisation: float = 1.0  # the reactive floor's utilisation target (1: none of its own headroom)
    # The standard error of predicting the next day's attainment from the pooled days' day-to-day variation: their
    # standard deviation times sqrt(1 + 1/days) (0 with fewer than two days). Reported, not chosen on.
    spread: float = 0.0
    # The worst pooled day's attainment (None: one replay, its own attainment).
    worst: float | None = None

    @property
    def worst_day(self) -> float:
        """The lowest attainment of any pooled day (the attainment itself for one day)."""
        return self.slo_attainment if self.worst is None else self.worst

    def to_dict(self) -> dict[str, Any]:
        return {
            "warm_pool_quantile": self.warm_pool_quantile,
            "reactive_utilisation": self.reactive_utilisation,
            "gpu_hours": round(self.gpu_hours, 3),
            "slo_attainment": round(self.slo_attainment, 6),
            "wait_p99_seconds": round(self.wait_p99_seconds, 3),
            "dropped_fraction": round(self.dropped_fraction, 6),
            "requests": round(self.requests, 1),
            "spread": round(self.spread, 6),
            "worst_day": round(self.worst_day, 6),
        }

    @property
    def point(self) -> tuple[int, float]:
        return self.warm_pool_quantile, self.reactive_utilisation

    @property
    def lead_only(self) -> bool:
        """The HPA's own point: the forecast adds only the lead (see ``LEAD_ONLY_QUANTILE``)."""
        return self.warm_pool_quantile == LEAD_ONLY_QUANTILE

    @property
    def label(self) -> str:
        """``q90``, ``q80/u0.85`` with a utilisation floor below 1, ``hpa@0.7+lead`` for the HPA's own point."""
        return point_label(self.warm_pool_quantile, self.reactive_utilisation, self.lead_only)


@dataclass(frozen=True)
class Day:
    """One replayed day: when it ended, every point's replay, and the point that actually ran that day (None:
    unknown, or not one of the points): its replay is what users got, which the error budget counts. ``assumed``: for a
    day whose running point is unknown (history replayed before the controller ran the Deployment), the point the
    tuner's own rule would have run on it (``assume``): the self-check reads its replay as what ran (``checked``), the
    error budget does not (it counts what users got)."""

    end: int
    candidates: tuple[Candidate, ...]
    ran: tuple[int, float] | None = None
    assumed: tuple[int, float] | None = None

    def realised(self) -> Candidate | None:
        return self._replay(self.ran)

    def checked(self) -> Candidate | None:
        """The replay the self-check reads for this day: the point that ran, else the one assumed (None: neither)."""
        return self._replay(self.ran if self.ran is not None else self.assumed)

    def _replay(self, point: tuple[int, float] | None) -> Candidate | None:
        return next((c for c in self.candidates if c.point == point), None)

    def to_dict(self) -> dict[str, Any]:
        """Compact (one row per point: quantile, utilisation, GPU-h, attainment, p99 wait, dropped, requests): a week
        of these rides in the Deployment's status (``autoscaler.domain.status``)."""
        out: dict[str, Any] = {
            "end": self.end,
            "ran": None if self.ran is None else [self.ran[0], self.ran[1]],
            "points": [[c.warm_pool_quantile, c.reactive_utilisation, round(c.gpu_hours, 4),
                        round(c.slo_attainment, 7), round(c.wait_p99_seconds, 3), round(c.dropped_fraction, 7),
                        round(c.requests, 1)] for c in self.candidates],
        }
        if self.assumed is not None:  # only on the days replayed before the controller ran (and absent before them)
            out["assumed"] = [self.assumed[0], self.assumed[1]]
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Day:
        ran = data["ran"]
        points = []
        for row in data["points"]:
            q, u, gpu_hours, attained, wait, dropped, requests = row
            if not (isinstance(q, int) and 0 < q < 100 and 0 < float(u) <= 1 and 0 <= float(attained) <= 1):
                raise ValueError(f"operating point {row!r} out of range")
            points.append(Candidate(q, float(gpu_hours), float(attained), float(wait), float(dropped),
                                    float(requests), float(u)))
        assumed = data.get("assumed")
        return cls(int(data["end"]), tuple(points), None if ran is None else (int(ran[0]), float(ran[1])),
                   None if assumed is None else (int(assumed[0]), float(assumed[1])))


def budget_requirement(days: Sequence[Day], target: float) -> float:
    """The attainment the next day needs so that the pooled window, the next day included, still meets ``target``:
    at least ``target`` itself, more once the days behind have spent part of the error budget (their realised
    misses, from the replay of the point that ran). Why: an objective is a share over a window, and a bad day (a
    burst the tuning could not foresee) is paid back by running safer until it leaves the window, as an SRE spends
    an error budget. ``target`` again once the days behind missed more than the whole window may (nothing that runs
    next can win that window back; paying for the safest point until the bad day leaves only costs)."""
    left = _budget_left(days, target)
    if left is None or left[0] <= 0:
        return target  # nothing lived yet, or the window is lost: hold the objective, do not chase it
    return min(1.0, max(target, 1.0 - left[0] / left[1]))


def budget_lost(days: Sequence[Day], target: float) -> bool:
    """Whether the days behind missed more than the window (them and the next day) may miss at ``target``."""
    left = _budget_left(days, target)
    return left is not None and left[0] <= 0


def _budget_left(days: Sequence[Day], target: float) -> tuple[float, float] | None:
    """(requests the window may still miss, the next day's requests sized like the days behind); None when no
    pooled day says what ran."""
    lived = [(c.requests, c.slo_attainment) for d in days if (c := d.realised()) is not None and c.requests > 0]
    if not lived:
        return None
    past = sum(r for r, _ in lived)
    missed = sum(r * (1.0 - a) for r, a in lived)
    upcoming = past / len(lived)
    return (1.0 - target) * (past + upcoming) - missed, upcoming


def pool(days: Sequence[Sequence[Candidate]]) -> tuple[Candidate, ...]:
    """Each operating point over several replayed days: GPU-hours and requests summed, attainment and drops
    weighted by requests, the p99 wait the worst day's. Points missing from a day are pooled over the others."""
    out: list[Candidate] = []
    for point in sorted({c.point for day in days for c in day}, key=lambda p: (p[0], -p[1])):
        runs = [c for day in days for c in day if c.point == point]
        requests = sum(c.requests for c in runs)
        if requests > 0:
            attained = sum(c.slo_attainment * c.requests for c in runs) / requests
            dropped = sum(c.dropped_fraction * c.requests for c in runs) / requests
        else:
            attained, dropped = 1.0, 0.0
        daily = [c.slo_attainment for c in runs if c.requests > 0]
        # Of the next day, not of the mean: the chosen point runs a day that is not one of these.
        spread = float(np.std(daily, ddof=1)) * math.sqrt(1 + 1 / len(daily)) if len(daily) >= 2 else 0.0
        worst = min((c.worst_day for c in runs if c.requests > 0), default=attained)
        out.append(Candidate(point[0], sum(c.gpu_hours for c in runs), attained,
                             max(c.wait_p99_seconds for c in runs), dropped, requests, point[1], spread, worst))
    return tuple(out)


@dataclass(frozen=True)
class Tuning:
    """The outcome of one self-tuning replay.

    ``chosen`` is the ``warm_pool_quantile`` to run (None: nothing could be replayed, keep what runs) and
    ``chosen_utilisation`` the reactive floor's utilisation with it;
    ``met``: the chosen point met the objective on the pooled replays (``meets``); ``reason``: one line
    for the decision trail, the status and ``explain``; ``at``: the end of the replayed history (Unix seconds);
    ``days``: the record, up to ``DEFAULT_RECORD_DAYS`` replayed days (oldest first, each with the point that ran on
    it), which the next call continues (``tune(previous=...)``); ``candidates``: each point pooled over the newest
    ``pool_days`` of them (``pooled_days``); ``budget_attainment``: what the next day needed for the window's error
    budget (the objective itself unless earlier days spent it); ``beaten``: the point was chosen by the self-check
    (``beaten_by``), not by ``choose``.
    """

    chosen: int | None
    met: bool
    candidates: tuple[Candidate, ...]
    slo_wait_seconds: float
    slo_attainment: float
    required_attainment: float
    replay_seconds: int
    at: int
    reason: str
    cpu_seconds: float = 0.0
    days: tuple[Day, ...] = ()
    chosen_utilisation: float = 1.0
    budget_attainment: float | None = None
    pool_days: int = DEFAULT_POOL_DAYS
    beaten: bool = False  # chosen by the self-check (``beaten_by``): an HPA point did better than what ran
    hpa_only: bool = False  # chosen among the HPA's own points alone: the record was too young (``MIN_BAND_DAYS``)

    @property
    def chosen_label(self) -> str | None:
        """The point chosen, as the reports name it (``Candidate.label``); None when nothing was chosen."""
        if self.chosen is None:
            return None
        return point_label(self.chosen, self.chosen_utilisation, self.chosen == LEAD_ONLY_QUANTILE)

    @property
    def slo_state(self) -> str:
        """``met``: the point that runs met the objective on the replays; ``below``: it did not, but the self-check
        chose it over a point that did (an HPA point did better than what ran: cheaper, and the objective traded for
        it), or the record was too young for any point but the HPA's own (``hpa_only``); ``unreachable``: no point
        met it. Why three: the controller's Event must not say the objective is out
        of reach when the self-check chose to run below it."""
        if self.met:
            return "met"
        if (self.beaten or self.hpa_only) and any(meets(c, self.slo_attainment) for c in self.candidates):
            return "below"
        return "unreachable"

    @property
    def pooled_days(self) -> tuple[Day, ...]:
        """The newest ``pool_days`` of the record (``days``): what ``candidates`` pools."""
        return self.days[-max(1, self.pool_days):]

    def to_dict(self) -> dict[str, Any]:
        return {
            "days_pooled": len(self.pooled_days),
            "pool_days": self.pool_days,
            "beaten": self.beaten,
            "hpa_only": self.hpa_only,
            "budget_attainment": None if self.budget_attainment is None else round(self.budget_attainment, 6),
            "chosen": self.chosen,
            "chosen_utilisation": self.chosen_utilisation,
            "met": self.met,
            "slo_wait_seconds": self.slo_wait_seconds,
            "slo_attainment": self.slo_attainment,
            "required_attainment": round(self.required_attainment, 6),
            "replay_seconds": self.replay_seconds,
            "at": self.at,
            "reason": self.reason,
            "cpu_seconds": round(self.cpu_seconds, 3),
            "candidates": [c.to_dict() for c in self.candidates],
            "days": [d.to_dict() for d in self.days],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Tuning:
        """A tuning as ``to_dict`` wrote it into the Deployment's status. Why: the pooled week and the error budget
        are what keeps the choice safe, and a restarted controller (an upgrade, a new leader) that started over
        would choose on one day for a week. The pooled candidates are recomputed from the days, as ``tune`` does.
        ValueError when ``data`` is not such a dict (a hand edit, an older controller's status)."""
        try:
            days = tuple(Day.from_dict(d) for d in data["days"])
            chosen = data["chosen"]
            utilisation = float(data["chosen_utilisation"])
            budget = data["budget_attainment"]
            pool_days = int(data.get("pool_days", DEFAULT_POOL_DAYS))  # absent: written before the record
            if pool_days < 1:
                raise ValueError(f"pool_days {pool_days} < 1")
            tuning = cls(
                None if chosen is None else int(chosen), bool(data["met"]),
                pool([d.candidates for d in days[-pool_days:]]),
                float(data["slo_wait_seconds"]), float(data["slo_attainment"]), float(data["required_attainment"]),
                int(data["replay_seconds"]), int(data["at"]), str(data["reason"]), float(data["cpu_seconds"]), days,
                utilisation, None if budget is None else float(budget), pool_days, bool(data.get("beaten", False)),
                bool(data.get("hpa_only", False)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"malformed self-tuning state ({type(exc).__name__}: {exc})") from None
        if tuning.chosen is not None and (tuning.chosen, utilisation) not in {c.point for c in tuning.candidates}:
            raise ValueError(f"malformed self-tuning state (the chosen point {tuning.chosen}/{utilisation:g} was "
                             "not replayed)")
        return tuning


def required_attainment(target: float, margin: float = DEFAULT_MARGIN) -> float:
    """What a replay must reach for ``target`` to count as met: ``target + margin * (1 - target)``."""
    return target + margin * (1.0 - target)


def meets(candidate: Candidate, target: float, margin: float = DEFAULT_MARGIN) -> bool:
    """Whether a (pooled) candidate meets ``target``: its attainment reaches ``required_attainment`` and the next
    day's, predicted from its day-to-day variation, reaches ``target`` at its lower quartile (``NEXT_DAY_Z``). Why:
    a point that was lucky on the replayed days (one calm week) must not be chosen for a day that is not one of
    them; a bursty service needs more in hand than a calm one."""
    a = candidate.slo_attainment
    return a >= required_attainment(target, margin) and a - NEXT_DAY_Z * candidate.spread >= target


def holds(candidate: Candidate, target: float, margin: float = DEFAULT_MARGIN) -> bool:
    """Whether a (pooled) candidate ``meets`` ``target`` and reached it on every pooled day (``worst_day``). Why: a
    point that missed the objective on one of the last days will miss it on a day like that again, whatever its
    spread says (one bad day among calm ones is a small spread)."""
    return meets(candidate, target, margin) and candidate.worst_day >= target - 1e-12


def _safest(candidates: Sequence[Candidate]) -> Candidate:
    return max(candidates, key=lambda c: (c.slo_attainment, -c.gpu_hours, -c.warm_pool_quantile,
                                          c.reactive_utilisation))


def choose(candidates: Sequence[Candidate], target: float, margin: float = DEFAULT_MARGIN,
           days: Sequence[Day] = ()) -> tuple[Candidate, bool]:
    """The cheapest candidate that ``holds`` ``target``; else the cheapest that ``meets`` it; else the safest one
    (most attainment, then fewest GPU-hours), but with the replayed ``days`` only a safest point that misses at most
    ``BAND_MISS_SHARE`` of what the safest of the HPA's own points misses and attained at least as much on every one
    of them, else that HPA point. The flag says whether the one chosen ``meets`` ``target``. Raises ValueError on no
    candidates.

    Why a share of the misses: where no point reaches the objective, a band point that buys a few of the HPA point's
    misses at a band's price is below the HPA's curve, whose lower targets would buy them for less. Recorded with
    ``benchmarks/tuner_rules.py`` (2026-11-27): on the synthetic social stream's draws 9-16, p99 ran the first days of
    four fortnights, where on the pooled days it attained 0.03-4.7 points more than the HPA at 0.5 started early (less
    than a quarter of its misses) at 1.5-12 times its GPU-hours, and left them dominated by the HPA's targets by up to
    28% of GPU-hours; with the share, 7 of those 32 fortnights dominated instead of 9 and 5 of draws 1-8's 32
    instead of 6, the objective met as often, and the four trace files unchanged (the Alibaba LoRA trace, where p99
    cuts most of the HPA's misses, still runs it).

    Why the HPA's own point when nothing meets the objective: the objective is out of reach, and a point that beats
    the safest HPA point on the pool but not on each day bought its lead on some days and lost it on others, which
    is the noise of bursts, not safety, and it is usually far dearer (measured on the synthetic bursty social stream
    of ``benchmarks/backtest.py``: p99 out-attained the HPA at 0.5 started early on a pool of days at several times
    its GPU-hours, ran for four days and left the fortnight dominated by the HPA at 0.5 to 0.8; on a trace where only
    the forecast's bands reach the attainment, as on the Alibaba LoRA trace, they beat the HPA's points on every day
    and are still chosen)."""
    if not candidates:
        raise ValueError("no operating point to choose from")
    for rule in (holds, meets):
        passing = [c for c in candidates if rule(c, target, margin)]
        if passing:
            return min(passing, key=lambda c: (c.gpu_hours, -c.slo_attainment, c.point)), True
    safest = _safest(candidates)
    hpa = [c for c in candidates if c.lead_only]
    if not days or safest.lead_only or not hpa:
        return safest, False
    best = _safest(hpa)
    if misses(safest) > BAND_MISS_SHARE * misses(best):
        return best, False
    for day in days:
        ours = next((c for c in day.candidates if c.point == safest.point), None)
        theirs = next((c for c in day.candidates if c.point == best.point), None)
        if ours is not None and theirs is not None and ours.requests > 0 and (
                ours.slo_attainment < theirs.slo_attainment - 1e-12):
            return best, False
    return safest, False


def misses(candidate: Candidate) -> float:
    """The requests a (pooled) candidate did not start within the objective's wait."""
    return candidate.requests * (1.0 - candidate.slo_attainment)


def lived(record: Sequence[Day]) -> tuple[float, float, float] | None:
    """What users got over ``record``, from the replay of the point that ran each day: (GPU-hours, missed requests,
    requests); None when a day's running point is unknown or was not replayed."""
    ran = [d.realised() for d in record]
    if any(c is None for c in ran):
        return None
    known = [c for c in ran if c is not None]
    return (sum(c.gpu_hours for c in known), sum(misses(c) for c in known), sum(c.requests for c in known))


def assume(record: Sequence[Day], earlier: Sequence[Day], target: float, start: tuple[int, float], *,
           margin: float = DEFAULT_MARGIN, pool_days: int = DEFAULT_POOL_DAYS, min_band_days: int = MIN_BAND_DAYS,
           replay_seconds: int = DEFAULT_REPLAY_SECONDS, keep: int = DEFAULT_RECORD_DAYS) -> tuple[Day, ...]:
    """``record`` extended by ``earlier``: whole days of history replayed before the controller ran the Deployment
    (``tune``'s backfill), oldest first, what ran on them unknown; each with the point this rule would have run on it
    (``Day.assumed``): ``start`` (the start point) on the first when the record is empty, else ``decide`` on the
    record before it, with the tuning's own settings.

    Why: the self-check measures the rule's record against the HPA's fixed points, and a Deployment taken over with
    history has none; without one the daily re-choice runs unchecked for its first days, and on bursty traffic it
    chased bursts there as the self-check exists to stop (a cheap point before a burst, a dear one for days after
    it). The replayed week says what the rule would have done on it, as the days it runs will. The error budget does
    not read it: it counts what users got, which is not known on those days. Measured 2026-11-27 on recorded
    fortnights (``benchmarks/tuner_rules.py``'s takeover table: the controller first tuning at the end of day 4-9),
    the days after were dominated by one of the HPA's own points (no more GPU-hours, no more late requests, one of
    them fewer) on 43 of 384 takeovers instead of 136 (the synthetic shapes' draws 1-16 at 120 s pod start-up), the
    objective met on 262 instead of 265; at 30 s, 29 of 192 instead of 73 (met on 134 instead of 131); at 300 s, 26
    instead of 50 (met on 95 instead of 104: there the self-check's known price, a cheap HPA point held that beat a
    poor record); on the four trace files, 1 of 24 instead of 5 (met on 22 instead of 16)."""
    out = tuple(record)
    for day in earlier:
        point = decide(out, target, margin, pool_days, min_band_days).best.point if out else start
        out = extend_record(out, replace(day, assumed=point), replay_seconds, keep)
    return out


def extend_record(record: Sequence[Day], day: Day, replay_seconds: int = DEFAULT_REPLAY_SECONDS,
                  keep: int = DEFAULT_RECORD_DAYS) -> tuple[Day, ...]:
    """``record`` with ``day`` appended, the newest ``keep`` kept. A day it overlaps by more than ``OVERLAP_SHARE`` of
    a replay (a re-tune a few hours after the last, on a refit) is dropped rather than counted twice."""
    earlier = tuple(d for d in record if d.end <= day.end - replay_seconds + OVERLAP_SHARE * replay_seconds)
    return (*earlier, day)[-max(1, keep):]


@dataclass(frozen=True)
class Versus:
    """What ran over a record against the HPA's own points on the same days (``versus_hpa``): ``days`` replayed; the
    replays of the points that ran (``gpu_hours``, ``missed`` requests of ``requests``, as ``lived``); ``hpa`` each of
    the HPA's own points pooled over the same days; ``beaten`` those of them that did strictly better than what ran
    (``beaten_by``)."""

    days: int
    gpu_hours: float
    missed: float
    requests: float
    hpa: tuple[Candidate, ...]
    beaten: tuple[Candidate, ...]
    assumed: int = 0  # of ``days``, those replayed before the controller ran: what the rule would have run (``assume``)

    @property
    def attainment(self) -> float:
        """The share of the record's requests that started within the objective's wait, as what ran served them."""
        return 1.0 - self.missed / self.requests if self.requests > 0 else 1.0


def versus_hpa(record: Sequence[Day]) -> Versus | None:
    """What ran over ``record`` against each of the HPA's own points (``Candidate.lead_only``) replayed on the same
    days, the newest days whose running point is known, or assumed, and was replayed (``Day.checked``: on the history
    replayed before the controller ran, what its rule would have run there); None when there is no such day.
    ``beaten`` is empty with fewer than two days (a day's choice is not yet a record).

    Why: what a team compares us with is the HPA it would otherwise run. Every day's replay of every point is at hand,
    so the record says, per Deployment, what the points that ran cost and attained against each fixed HPA point on the
    same days: the self-check reads it (``beaten_by``), the controller exports it (the ``slo_record`` metrics) and
    ``explain`` shows it."""
    record = record[max((i + 1 for i, d in enumerate(record) if d.checked() is None), default=0):]
    ran = [c for d in record if (c := d.checked()) is not None]
    if not ran:
        return None
    gpu, missed = sum(c.gpu_hours for c in ran), sum(misses(c) for c in ran)
    hpa = tuple(c for c in pool([d.candidates for d in record]) if c.lead_only)
    beaten = tuple(c for c in hpa if does_better(c, gpu, missed)) if len(record) >= 2 else ()
    return Versus(len(record), gpu, missed, sum(c.requests for c in ran), hpa, beaten,
                  sum(d.realised() is None for d in record))


def does_better(candidate: Candidate, gpu_hours: float, missed: float) -> bool:
    """Whether ``candidate`` (pooled over some days) did strictly better than ``gpu_hours`` for ``missed`` late
    requests on the same days: no more of either, one of them fewer. Sums of the same replays in another order differ
    in their last bits, so "no more" and "fewer" allow for that: a run that held one point throughout ties with it."""
    g_tol, m_tol = 1e-9 * max(1.0, gpu_hours), 1e-9 * max(1.0, missed)
    c_missed = misses(candidate)
    return (candidate.gpu_hours <= gpu_hours + g_tol and c_missed <= missed + m_tol
            and (candidate.gpu_hours < gpu_hours - g_tol or c_missed < missed - m_tol))


def beaten_by(record: Sequence[Day]) -> tuple[Candidate, ...]:
    """The HPA's own points (``Candidate.lead_only``, pooled over ``record``) that did strictly better than the points
    that ran on those days: no more GPU-hours and no more missed requests than the replays of what ran, one of them
    fewer (``versus_hpa``, over the newest days whose running point is known or assumed). Empty with fewer than two
    such days.

    Why: the self-check. A tuner that re-chooses daily on bursty traffic runs a cheap point before a burst it cannot
    see and, once the burst is in its pool, a dear one for a week, and such a mix of points costs more than one point
    of the HPA's curve that attains as much (the curve bends). Every day's replay of every point is at hand, so what
    ran can be measured against each fixed HPA point on the same days, as the forecast's self-check measures the
    forecast it serves against the last value. Measured 2026-11-26: on the four synthetic shapes at draws 1-8
    (``python -m benchmarks.tuner_rules``) the self-tuned default was dominated by an HPA target on 10 of 32 runs, by
    up to 21% more GPU-hours, and is on 6, by at most 8%; on the frontier's eight traces at pod start-ups of 30-300 s
    (``python -m benchmarks.frontier --pod-startup 30s,60s,120s,300s``) on 6 of 32 runs, and is on 2 (on 1 with the
    first days' gate of ``decide``). Why strictly: what ran *is* a fixed point after days on it, and it must not count
    as beating itself; sums of the same replays in another order differ in their last bits, so "fewer" means by more
    than that."""
    versus = versus_hpa(record)
    return () if versus is None else versus.beaten


@dataclass(frozen=True)
class Decision:
    """What ``decide`` chose and on what: ``days`` (the pooled newest days of the record), ``pooled`` (each point over
    them), ``budget`` (``budget_requirement`` of them), ``best`` (the point chosen, pooled over ``days``),
    ``beaten`` (the HPA point the self-check chose, pooled over the whole record; None: ``choose`` chose),
    ``hpa_only`` (``choose`` chose among the HPA's own points alone: the record is shorter than ``MIN_BAND_DAYS``) and
    ``versus`` (the record against the HPA's own points, when the budget let the self-check read it)."""

    days: tuple[Day, ...]
    pooled: tuple[Candidate, ...]
    budget: float
    best: Candidate
    beaten: Candidate | None
    hpa_only: bool = False  # the record was too short for any point but the HPA's own (``MIN_BAND_DAYS``)
    versus: Versus | None = None  # the record against the HPA's own points (``versus_hpa``) when the self-check read it


def decide(record: Sequence[Day], target: float, margin: float = DEFAULT_MARGIN,
           pool_days: int = DEFAULT_POOL_DAYS, min_band_days: int = MIN_BAND_DAYS) -> Decision:
    """The point to run next, from the record of replayed days (oldest first, each with the point that ran): the
    self-check's HPA point (``beaten_by``, the one of them with the fewest misses) unless the pooled days are spending
    the window's error budget (``budget_requirement`` above the objective; a window already lost holds the objective,
    as ``choose`` does); else ``choose`` on the newest ``pool_days``, held to that requirement, among the HPA's own
    points alone while the record holds fewer than ``min_band_days`` days and some point meets the requirement (when
    none does, ``choose``'s safest point is tested against the HPA's safest on every pooled day). Why the release: a
    point the self-check holds must give way when the traffic changes under it, and a budget being spent is that
    evidence (replayed on the recorded days: without it the self-check held ServeGen m_small at the HPA's 0.8
    through its change of regime, at 300 s pod start-up 97.8% attained against 99.2%). Why the HPA's points first: a
    band point chosen on one or two days' evidence was the first step away from the start point in most of the
    fortnights an HPA target dominated (the day-to-day spread its choice reads is not known yet); replayed on the
    synthetic shapes' draws 0-8 at pod start-ups of 30, 120 and 300 s (108 recorded fortnights,
    ``benchmarks/tuner_rules.py``), dominated on 21 instead of 24 and the objective met on 66 of 81 instead of 62 (2
    days: 22 and 65; 4 days: 23 and 65). Gating the safest point too (when nothing meets) gained nothing there and
    cost the Alibaba LoRA trace, where only the bands come near the objective, 1.4 points of attainment (98.70% to
    97.29%: two days of the HPA's safest point instead of p99). Pure: the tuner and ``benchmarks/tuner_rules.py``
    call the same function.
    Raises ValueError on an empty record."""
    if not record:
        raise ValueError("no replayed day to choose on")
    days = tuple(record[-max(1, pool_days):])
    pooled = pool([d.candidates for d in days])
    budget = budget_requirement(days, target)
    versus = versus_hpa(record) if budget <= target else None
    if versus is not None and versus.beaten:
        fixed = min(versus.beaten, key=lambda c: (misses(c), c.gpu_hours, c.point))
        return Decision(days, pooled, budget, next(c for c in pooled if c.point == fixed.point), fixed, versus=versus)
    if (len(record) < min_band_days and any(c.lead_only for c in pooled)
            and any(meets(c, budget, margin) for c in pooled)):
        hpa = tuple(Day(d.end, tuple(c for c in d.candidates if c.lead_only), d.ran) for d in days)
        # each HPA point pooled over the same days as in ``pooled``: the chosen one is that pooled candidate
        return Decision(days, pooled, budget, choose(pool([d.candidates for d in hpa]), budget, margin, hpa)[0],
                        None, True)
    return Decision(days, pooled, budget, choose(pooled, budget, margin, days)[0], None)


def candidate_policy(base: ScalingPolicy, warm_pool_quantile: int, reactive_utilisation: float = 1.0) -> ScalingPolicy:
    """``base`` at one operating point: the automatic warm pool covers ``warm_pool_quantile``; the replicas'
    own band is the lower of the two (``level <= warm_pool_level`` always holds); the reactive floor sizes
    observed demand at ``reactive_utilisation``. ``LEAD_ONLY_QUANTILE`` is the HPA at ``reactive_utilisation``
    started early: the forecast adds only the lead (``ScalingPolicy.lead_only``)."""
    if warm_pool_quantile == LEAD_ONLY_QUANTILE:
        # the HPA's own point scales in as the HPA does (its 5-minute window), not after the profile's longer one,
        # which would hold it dearer than the HPA it stands for
        return replace(base, warm_pool=None, warm_pool_level=LEAD_ONLY_QUANTILE, level=LEAD_ONLY_QUANTILE,
                       reactive_utilisation=reactive_utilisation, lead_only=True,
                       scale_down_stabilization_seconds=min(base.scale_down_stabilization_seconds,
                                                            SCALE_DOWN_STABILIZATION_SECONDS))
    return replace(base, warm_pool=None, warm_pool_level=warm_pool_quantile,
                   level=min(base.level, warm_pool_quantile), reactive_utilisation=reactive_utilisation,
                   lead_only=False)


def start_policy(base: ScalingPolicy, hpa_targets: Sequence[float] = DEFAULT_HPA_TARGETS) -> ScalingPolicy:
    """What a self-tuned Deployment runs before any replay has chosen a point (its first two days: a day of history to
    fit on, one to replay; and any time its objective or sizing changes): the HPA's own point at the middle one of
    ``hpa_targets`` (0.7 of 0.5-0.9; the more cautious of the two middle ones for an even count; ``base`` itself
    without targets), the HPA started early.

    Why not the profile's own point (p95 bands and no margin over observed demand), as before: nothing says yet that
    the forecast buys anything, and on bursty traffic that point was the dearest mistake of a new Deployment's
    fortnight. On the synthetic social stream of ``benchmarks/backtest.py`` (measured with the frontier's settings,
    2026-11-26) its two days left the fortnight at 1.09x the oracle and 88.64% attained, dominated by the HPA at 0.6
    (1.07x, 88.89%), where starting at this point gave 1.09x and 89.04%; on the LLM-serving shape with bursts
    1.22x at 98.71%, dominated by the HPA at 0.8 (1.18x, 98.98%), against 1.21x at 99.04%. Why the middle target and
    not the most cautious: the HPA at 0.5 for two days costs so much more on calm traffic that the fortnight was
    dominated there (ServeGen m_mid, the synthetic LLM series turning volatile)."""
    target = start_target(hpa_targets)
    return base if target is None else candidate_policy(base, LEAD_ONLY_QUANTILE, target)


def running_point(previous: Tuning | None, base: ScalingPolicy,
                  hpa_targets: Sequence[float] = DEFAULT_HPA_TARGETS) -> tuple[int, float]:
    """The operating point that ran during the day about to be replayed (what the error budget counts as lived): the
    one ``previous`` chose, else the start point."""
    if previous is not None and previous.chosen is not None:
        return previous.chosen, previous.chosen_utilisation
    start = start_policy(base, hpa_targets)
    return start.warm_pool_level, start.reactive_utilisation


def start_target(hpa_targets: Sequence[float] = DEFAULT_HPA_TARGETS) -> float | None:
    """The utilisation target of the start point (``start_policy``): the middle of ``hpa_targets``, the lower of the
    two middle ones for an even count; None without targets."""
    if not hpa_targets:
        return None
    targets = sorted(hpa_targets)
    return targets[(len(targets) - 1) // 2]


def operating_points(
    quantiles: Sequence[int], utilisations: Sequence[float] = (), hpa_targets: Sequence[float] = ()
) -> tuple[tuple[int, float], ...]:
    """The points a tuning replays: every quantile with the plain reactive floor, and the lowest quantile with each
    utilisation floor below 1. Why not every pair: the two knobs buy the same thing (headroom) from different
    evidence, the forecast's bands where the traffic is forecastable and a margin over what is observed where it
    is bursty; the lowest band with a margin spans the bursty side, the bands span the other, at the CPU of
    ``len(quantiles) + len(utilisations)`` replays rather than their product. Then the HPA's own points, one per
    target of ``hpa_targets`` (``LEAD_ONLY_QUANTILE``: the forecast adds only the lead)."""
    qs = sorted({int(q) for q in quantiles if q != LEAD_ONLY_QUANTILE})
    us = sorted({float(u) for u in utilisations if u < 1}, reverse=True)
    hpa = sorted({float(u) for u in hpa_targets}, reverse=True)
    return ((*((q, 1.0) for q in qs), *((qs[0], u) for u in us)) if qs else ()) + tuple(
        (LEAD_ONLY_QUANTILE, u) for u in hpa)


def _replay_only() -> Forecaster:
    """The model factory of a replayed policy, which is fed its forecasts and never fits one."""
    raise RuntimeError("a self-tuning replay uses the forecasts computed before it")


@dataclass(frozen=True)
class _Replay:
    """What every operating point of one tuning replays: the day's forecasts, traffic, queue and cluster."""

    forecasts: tuple[Forecast | None, ...]
    window: TrafficSeries
    cold_start: ColdStartProfile
    cluster: ClusterConfig
    demand: FloatArray
    queue: QueueConfig
    segments: Segments
    capacity: float
    initial: int
    requests: float

    def run(self, jobs: Sequence[tuple[tuple[int, float], ScalingPolicy]]) -> list[Candidate]:
        """Replay each ``((quantile, utilisation), policy)`` in closed loop; the candidates, in order."""
        out: list[Candidate] = []
        tick = self.cluster.tick_seconds
        for (q, u), policy in jobs:
            replayed = _Replayed(self.forecasts, self.window, _replay_only, policy, self.cold_start, self.cluster,
                                 DECISION_INTERVAL_SECONDS)
            requested, ready = run_closed_loop(replayed, self.demand,
                                               Cluster(self.cluster, self.initial, scale_in=scale_in_of(replayed)))
            result = score(f"q{q}/u{u:g}", self.demand, requested, ready, self.capacity, tick,
                           self.cluster.gpus_per_replica, 0.0, queue=self.queue, segments=self.segments)
            out.append(Candidate(q, result.gpu_hours, result.slo_attainment, result.wait_p99_seconds,
                                 result.dropped_fraction, self.requests, u))
        return out


class _Replayed(PredictivePolicy):
    """The simulator's predictive policy fed precomputed forecasts (one per bin) instead of its own model; its
    decisions keep no steps (only their counts are scored)."""

    explains = False

    def __init__(self, forecasts: Sequence[Forecast | None], *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._forecasts = forecasts

    def _refresh(self, k: int) -> None:
        b = k // self.per_bin
        self.forecast = self._forecasts[b] if b < len(self._forecasts) else None


def _forecasts(
    history: TrafficSeries, replay_from: int, make_model: Callable[[], Forecaster], steps: int,
    levels: Sequence[int], history_seconds: int,
) -> list[Forecast | None]:
    """The forecast the controller would have had in each bin of ``history[replay_from:]``, from its own
    ``ForecastKeeper`` fed as the simulator's policy feeds it: in bin ``b`` the bins ended by then (the newest of
    them not yet absorbed), so the model is fitted on the ``history_seconds`` before the window, absorbs the window
    bin by bin, and is refitted where the controller would refit (a young history that doubled). A bin whose
    forecast fails has none (the planner falls back, as the controller's does), and the keeper fits afresh next."""
    keeper = ForecastKeeper(make_model, history_seconds=history_seconds)
    step = history.step_seconds
    kept = max(1, history_seconds // step)
    out: list[Forecast | None] = []
    for b in range(replay_from, len(history)):
        try:
            out.append(keeper.forecast_at(history.slice(max(0, b - kept - 1), b), history.start + b * step,
                                          steps, levels))
        except FORECAST_ERRORS:
            out.append(None)
    return out


def tune(
    history: TrafficSeries,
    base: ScalingPolicy,
    cold_start: ColdStartProfile,
    make_model: Callable[[], Forecaster],
    *,
    quantiles: Sequence[int],
    slo_wait_seconds: float,
    slo_attainment: float,
    utilisations: Sequence[float] = (),
    hpa_targets: Sequence[float] = DEFAULT_HPA_TARGETS,
    gpus_per_replica: int = 1,
    gpus_per_node: int = DEFAULT_GPUS_PER_NODE,
    replay_seconds: int = DEFAULT_REPLAY_SECONDS,
    warmup_seconds: int = 14 * SECONDS_PER_DAY,
    margin: float = DEFAULT_MARGIN,
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS,
    previous: Tuning | None = None,
    pool_days: int = DEFAULT_POOL_DAYS,
    running: tuple[int, float] | None = None,
    record_days: int = DEFAULT_RECORD_DAYS,
    horizon_seconds: int = ForecastProfile().horizon_seconds,
    min_band_days: int = MIN_BAND_DAYS,
    backfill_days: int = DEFAULT_POOL_DAYS - 1,
) -> Tuning:
    """Replay the last ``replay_seconds`` of ``history`` (per-second rates) at each operating point of
    ``operating_points(quantiles, utilisations)`` and choose one (see the module docstring). ``base`` is the
    Deployment's planner policy
    (capacity, min/max replicas, look-ahead, stabilisation); ``cold_start`` its learned start-up leads.

    With less than ``MIN_WARMUP_SECONDS`` of history before a full replay window, nothing is replayed:
    ``chosen`` is None and ``reason`` says how much history there is. ``previous`` (the last tuning for the same
    objective and sizing) carries its record: up to ``record_days`` replayed days, this one included, are kept, and
    the newest ``pool_days`` of them pooled.
    ``running`` is the point that ran during the replayed day (the error budget counts its replay as lived).
    ``horizon_seconds``: the profile's forecast horizon, which the Deployment's keeper forecasts to
    (``engine.forecasting.forecast_steps``); ``min_band_days``: see ``decide``. A fleet runs whole replays in worker
    processes (``retuner``).

    ``backfill_days``: up to this many whole days before the replayed one that the record lacks (none of ``previous``
    overlaps them) are replayed too, oldest first, each as a tuning at its end would have replayed it, with what ran
    on it unknown and what this rule would have run there assumed for the self-check (``assume``). Why: a Deployment
    whose history is in Prometheus when the controller first tunes it (one that ran under an HPA before) would otherwise
    choose on one day and wait days for a record, running the HPA's own points alone (``min_band_days``) and choosing on
    a sample the pooling exists to avoid; with it, its first choice is made on a week. The simulator's tunings, daily
    from the trace's start, leave no whole day out, so it replays the same.
    """
    started = time.process_time()
    qs = sorted({int(q) for q in quantiles})
    if not qs or any(not 0 < q < 100 for q in qs):
        raise ValueError(f"operating points must be percentiles in (0, 100), got {list(quantiles)!r}")
    if any(not (math.isfinite(u) and 0 < u <= 1) for u in utilisations):
        raise ValueError(f"reactive utilisations must be in (0, 1], got {list(utilisations)!r}")
    if any(not (math.isfinite(u) and 0 < u <= 1) for u in hpa_targets):
        raise ValueError(f"HPA targets must be in (0, 1], got {list(hpa_targets)!r}")
    points = operating_points(qs, utilisations, hpa_targets)
    if not points:
        raise ValueError("no operating point to replay")
    if not 0 < slo_attainment < 1:
        raise ValueError(f"SLO attainment must be a fraction in (0, 1), got {slo_attainment!r}")
    step = history.step_seconds
    end = history.start + len(history) * step
    need = required_attainment(slo_attainment, margin)
    replay_bins = max(1, replay_seconds // step)
    replay_from = len(history) - replay_bins
    observed = np.isfinite(history.values)
    have = float(observed.sum()) * step / 3600
    warm = float(observed[: max(0, replay_from)].sum()) * step
    seen = float(observed[max(0, replay_from):].mean()) if len(history) else 0.0

    def nothing(reason: str) -> Tuning:
        return Tuning(None, False, (), slo_wait_seconds, slo_attainment, need, replay_seconds, end, reason,
                      time.process_time() - started)

    # Missing bins are not history: a Deployment whose metrics started two hours ago has two hours, however long
    # the range it was fetched over.
    if replay_from <= 0 or warm < MIN_WARMUP_SECONDS:
        return nothing(f"not enough history to tune: {have:.1f} h observed, needs "
                       f"{(MIN_WARMUP_SECONDS + replay_bins * step) / 3600:.0f} h")
    if seen < MIN_OBSERVED_SHARE:
        return nothing(f"not enough history to tune: only {seen:.0%} of the last {replay_seconds / 3600:g} h "
                       f"observed (needs {MIN_OBSERVED_SHARE:.0%})")
    policies = [candidate_policy(base, q, u) for q, u in points]
    horizon = max(forecast_steps(p, cold_start, step, horizon_seconds) for p in policies)
    levels = sorted({lv for p in policies for lv in forecast_levels(p)})  # every band any point plans on
    tick = tick_seconds_for(step)
    cluster_cfg = ClusterConfig(
        pod_startup_seconds=math.ceil(cold_start.pod_lead_seconds()),
        node_startup_seconds=math.ceil(cold_start.node_lead_seconds()),
        gpus_per_replica=max(1, gpus_per_replica), gpus_per_node=max(gpus_per_node, max(1, gpus_per_replica)),
        tick_seconds=tick,
    )
    queue = QueueConfig(timeout_seconds=timeout_seconds, slo_wait_seconds=slo_wait_seconds)
    jobs = list(zip(points, policies, strict=True))

    def replayed(upto: int) -> tuple[Candidate, ...] | None:
        """Every point's replay of the ``replay_bins`` ending at bin ``upto``, as a tuning at that time would have
        replayed them (its forecaster fitted on the history before them); None when no forecast could be made."""
        before = history.slice(0, upto)
        forecasts = _forecasts(before, upto - replay_bins, make_model, horizon, levels, warmup_seconds)
        if all(f is None for f in forecasts):
            return None
        window = before.slice(upto - replay_bins, upto)
        demand = spread(window.values, step // tick, resolve("auto", step))
        first = demand[: cluster_cfg.ticks(cluster_cfg.pod_startup_seconds) + 1]
        first_finite = [v for v in first.tolist() if math.isfinite(v)]
        initial = min(max(base.min_replicas, math.ceil(max(first_finite, default=0.0) / base.capacity_per_replica
                                                       - 1e-9)), base.max_replicas)
        replay = _Replay(tuple(forecasts), window, cold_start, cluster_cfg, demand, queue,
                         Segments(demand, tick, queue.timeout_seconds), base.capacity_per_replica, initial,
                         float(np.nansum(demand)) * tick)
        return tuple(replay.run(jobs))

    candidates = replayed(len(history))
    if candidates is None:
        return nothing("the forecaster could not be fitted on the history before the replay window")
    # The whole days the record lacks before this one (a Deployment whose history was in Prometheus before the
    # controller tuned it; a controller that was down), replayed now, oldest first, up to a pool's worth: a first
    # choice made on a week, not on one day. What ran on them is not known (``Day.ran`` None: the error budget
    # counts only days whose running point it knows).
    behind = () if previous is None else previous.days
    newest = max((d.end for d in behind), default=-math.inf)
    backfill: list[Day] = []
    for k in range(1, max(0, backfill_days) + 1):
        upto = replay_from - (k - 1) * replay_bins
        day_end = history.start + upto * step
        # a day the record holds (as ``extend_record`` overlaps them), or no history before it to fit on
        if newest > day_end - replay_seconds + OVERLAP_SHARE * replay_seconds or upto - replay_bins <= 0:
            break
        if (float(observed[: upto - replay_bins].sum()) * step < MIN_WARMUP_SECONDS
                or float(observed[upto - replay_bins:upto].mean()) < MIN_OBSERVED_SHARE):
            break
        day = replayed(upto)
        if day is None:
            break
        backfill.insert(0, Day(day_end, day, None))
    record = assume(behind, backfill, slo_attainment, running_point(None, base, hpa_targets), margin=margin,
                    pool_days=pool_days, min_band_days=min_band_days, replay_seconds=replay_seconds,
                    keep=max(pool_days, record_days))
    record = extend_record(record, Day(end, candidates, running), replay_seconds, max(pool_days, record_days))
    decision = decide(record, slo_attainment, margin, pool_days, min_band_days)
    days, pooled, budget, best, fixed = (decision.days, decision.pooled, decision.budget, decision.best,
                                         decision.beaten)
    met = meets(best, slo_attainment, margin)
    objective = f"{slo_attainment * 100:g}% within {slo_wait_seconds:g}s"
    span = f"the last {replay_seconds / 3600:g} h" if len(days) == 1 else f"{len(days)} replayed days"
    spent = ""
    if budget_lost(days, slo_attainment):
        spent = ("; the window's error budget is gone (the days behind missed more than the window may), so the next "
                 "day is held to the objective, not to the safest point")
    if budget > slo_attainment:
        spent = f"; the window's error budget is spent, so the next day needs {budget * 100:.2f}%"
        need = max(need, required_attainment(budget, margin))
    if backfill:
        spent += (f"; {len(backfill)} earlier day(s) of the history replayed at once (the record held none of them; "
                  "what ran on them is not known, and the self-check reads them as running what this rule would "
                  "have chosen)")
    among = sum(c.lead_only for c in pooled) if decision.hpa_only else len(pooled)
    if decision.hpa_only:
        spent += (f"; of the HPA's own points only until {min_band_days} days are replayed (a band point is chosen on "
                  "its day-to-day spread)")
    versus = decision.versus  # read by the self-check: present whenever it fired
    if fixed is not None and versus is not None:
        lived_gpu, attained = versus.gpu_hours, versus.attainment
        short = "" if met else f", short of {objective} at the next day's lower quartile"
        assumed = (f" (on {versus.assumed} of them, replayed before the controller ran it, what this rule would "
                   "have chosen)" if versus.assumed else "")
        reason = (f"{_describe(best)}: self-check: over the last {versus.days} replayed days the points that ran"
                  f"{assumed} cost {lived_gpu:.1f} GPU-h for {attained * 100:.2f}% within {slo_wait_seconds:g}s, "
                  f"and this HPA point would have cost {fixed.gpu_hours:.1f} GPU-h for "
                  f"{fixed.slo_attainment * 100:.2f}%; it runs while it does better "
                  f"({best.slo_attainment * 100:.2f}% on {span}{short})")
    elif met and budget <= slo_attainment:
        reason = (f"{_describe(best, decision.hpa_only)}: cheapest of {among} meeting {objective} on {span} "
                  f"({best.slo_attainment * 100:.2f}% >= {need * 100:.2f}% pooled, at the next day's lower quartile"
                  f"{' and on every day' if holds(best, slo_attainment, margin) else ''}; "
                  f"{best.gpu_hours:.1f} GPU-h){spent}")
    elif met:
        reason = (f"{_describe(best, decision.hpa_only)}: "
                  f"{'cheapest meeting' if meets(best, budget, margin) else 'safest of'} "
                  f"{among} on {span} ({best.slo_attainment * 100:.2f}%, {best.gpu_hours:.1f} GPU-h){spent}")
    else:
        # gated only when some point met the (raised) requirement, so a band point met the objective
        short = "none of the HPA's own points meets" if decision.hpa_only else "no operating point meets"
        reason = (f"{short} {objective} on {span}: safest, {_describe(best, decision.hpa_only)} "
                  f"({best.slo_attainment * 100:.2f}% < {need * 100:.2f}%, {best.gpu_hours:.1f} GPU-h){spent}")
    return Tuning(best.warm_pool_quantile, met, pooled, slo_wait_seconds, slo_attainment, need,
                  replay_seconds, end, reason, time.process_time() - started, record, best.reactive_utilisation,
                  budget, max(1, pool_days), fixed is not None, decision.hpa_only)


def _describe(c: Candidate, gated: bool = False) -> str:
    """The point, for the reason; ``gated``: chosen among the HPA's own points alone (``Decision.hpa_only``), so
    nothing is said of what the bands bought."""
    u = c.reactive_utilisation
    if c.lead_only:
        return (f"a reactive autoscaler at {u:g} utilisation that starts early (the forecast adds only the lead"
                f"{'' if gated else ': its bands bought nothing here'})")
    return f"warm_pool_quantile {c.warm_pool_quantile}" + ("" if u == 1 else f" with reactive utilisation {u:g}")


def retuner(
    make_model: Callable[[], Forecaster], *, quantiles: Sequence[int], slo_wait_seconds: float,
    slo_attainment: float, warmup_seconds: int, utilisations: Sequence[float] = (),
    hpa_targets: Sequence[float] = DEFAULT_HPA_TARGETS, gpus_per_node: int = DEFAULT_GPUS_PER_NODE,
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS, executor: Executor | None = None,
    horizon_seconds: int = ForecastProfile().horizon_seconds,
) -> Retune:
    """The simulator's self-tuning hook (``PredictivePolicy(retune=...)``): ``tune`` on the history so far, and
    the untuned policy at the chosen operating point (``start_policy`` while nothing could be replayed).

    ``executor`` (a pool of worker processes; ``make_model`` must then pickle, e.g. a module-level function or a
    ``functools.partial`` of one): each replay runs there, whole, while the caller goes on, which is how a fleet
    replays the Deployments whose tuning falls due at the same tick at once (the same choices, each run from the
    next decision). None: each replay runs in this process when it is started."""
    return _Retuner(TuneSettings(make_model, tuple(quantiles), slo_wait_seconds, slo_attainment, tuple(utilisations),
                                 tuple(hpa_targets), gpus_per_node, warmup_seconds, timeout_seconds, horizon_seconds),
                    executor)


@dataclass(frozen=True)
class TuneSettings:
    """``tune``'s arguments that stay the same for every replay of one hook (picklable, for a worker process); the
    controller makes one per replay (``runtime.replay_pool``)."""

    make_model: Callable[[], Forecaster]
    quantiles: tuple[int, ...]
    slo_wait_seconds: float
    slo_attainment: float
    utilisations: tuple[float, ...]
    hpa_targets: tuple[float, ...]
    gpus_per_node: int
    warmup_seconds: int
    timeout_seconds: float
    horizon_seconds: int


@dataclass(frozen=True)
class _Retuner:
    """``retuner``'s hook: the start point, and the replays it starts (here or in ``executor``)."""

    settings: TuneSettings
    executor: Executor | None

    def start(self, base: ScalingPolicy) -> ScalingPolicy:
        return start_policy(base, self.settings.hpa_targets)

    def __call__(self, history: TrafficSeries, base: ScalingPolicy, cold_start: ColdStartProfile,
                 gpus_per_replica: int, previous: Tuning | None) -> PendingTuning:
        running = running_point(previous, base, self.settings.hpa_targets)
        job = TuneJob(self.settings, history, base, cold_start, gpus_per_replica, previous, running)
        if self.executor is None:
            done = job.run()
            return lambda: done
        # Pickled here, before the caller goes on: the executor pickles in a feeder thread, and nothing the job holds
        # may change under it (a forecast's band cache filling is a dict changing size under the pickler).
        future = self.executor.submit(run_pickled_job, pickle.dumps(job))
        return future.result


@dataclass(frozen=True)
class TuneJob:
    """One self-tuning replay as the simulator's hook or the controller starts it: ``tune``'s arguments, picklable
    (for a worker process)."""

    settings: TuneSettings
    history: TrafficSeries
    base: ScalingPolicy
    cold_start: ColdStartProfile
    gpus_per_replica: int
    previous: Tuning | None
    running: tuple[int, float]

    def run(self) -> tuple[ScalingPolicy, Tuning]:
        """The replay, and the untuned policy at the point it chose (the start point while nothing could be
        replayed)."""
        s = self.settings
        result = tune(self.history, self.base, self.cold_start, s.make_model, quantiles=s.quantiles,
                      slo_wait_seconds=s.slo_wait_seconds, slo_attainment=s.slo_attainment,
                      utilisations=s.utilisations, hpa_targets=s.hpa_targets, gpus_per_replica=self.gpus_per_replica,
                      gpus_per_node=s.gpus_per_node, warmup_seconds=s.warmup_seconds,
                      timeout_seconds=s.timeout_seconds, previous=self.previous, running=self.running,
                      horizon_seconds=s.horizon_seconds)
        if result.chosen is None:
            return start_policy(self.base, s.hpa_targets), result
        return candidate_policy(self.base, result.chosen, result.chosen_utilisation), result


def run_pickled_job(payload: bytes) -> tuple[ScalingPolicy, Tuning]:
    """``TuneJob.run`` of a pickled job, in a worker process."""
    job: TuneJob = pickle.loads(payload)  # written by the caller in the parent a moment before
    return job.run()
