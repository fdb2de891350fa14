"""The control loop: one tick = snapshot -> forecast -> plan -> money -> apply.

Why it is shaped this way (kopf's and Karpenter's lessons): every tick first *reads* (Deployments,
their start-up times, one fleet-wide Prometheus query), then *decides* with pure functions
(``parse_workload``, the forecaster, ``plan_replicas``), and only at the end *applies* the plan
through the ``Cluster`` port. Planning is two passes: every workload is planned on its own, then the
money stage (``autoscaler.runtime.money``) prices the whole plan, holds it under the cost ceilings (a
``cost_ceiling`` step on each decision it touches), reserves training gangs, and keeps NodePool limits,
GPU headroom and alerts in step (and places scheduled training gangs on the median forecasts of the cached
models, which the loop lends it as ``_GangForecasts``: no refit, only when such gangs exist); only then is each
decision applied. So ``--dry-run`` is the same tick
with the last phase replaced by printing, and a test can drive ticks with a fake clock, a recording
cluster and a real Prometheus.

What the loop remembers between ticks (``_Memory``, per Deployment): the fetched history (so a
tick fetches only the newest bins, not two weeks), the fitted forecaster (refit on the profile's
cadence, ``update`` in between), the stabilisation history, the learned start-up samples, and
which problems were already reported (an Event per *new* problem, not one every 30 seconds).

Failure policy (nothing is lost, nothing scales down blindly):
- a malformed annotation: a Warning Event naming key and value on that Deployment; it is left as it
  is; the others go on;
- Prometheus unreachable or the query failing: every workload is planned with *no* evidence, which
  the planner turns into "hold" (never down); a Warning Event on each workload when the outage
  starts, ``metrics_source_up`` = 0 until a fetch succeeds again;
- Pods Pending unschedulable for longer than a node start-up (no node is coming for them): no further
  scale-up piles on, a Warning Event (``engine.deciding``);
- a Deployment whose pods lack vLLM's queue gauges: the arrival query answers its completion rate alone
  (labelled ``demand_source``), so it is planned, not held; its status says so (``demandSource``),
  ``demand_degraded`` is 1, and a ``DemandDegraded``/``DemandRestored`` Event marks each transition;
- a failed write (scale, status, Event): retried by the adapter on conflicts, then counted, logged
  and returned in the tick report (``run --once`` exits non-zero); the next tick re-plans and
  retries by construction. An Event counts as told only once it landed (per workload and
  problem), so a failed post is retried next tick and a standby leaves every Event to the leader.
- a scale-down first marks the idlest pods (``pod-deletion-cost``, from one per-pod in-flight query for the
  tick's scale-downs; ``autoscaler.domain.scaledown``), re-reads the pods and scales only once that read shows
  the marks; later ticks clear the marks. While more than one ReplicaSet has pods (a rollout) a scale-down is
  held (``rollout_hold``), never a scale-up, with one ``ScaleDownHeld`` Event; a rollout that is stuck or too long
  no longer holds it (``rollout_stuck``, one ``ScaleDownDuringRollout`` Warning). When that query fails
  (``pod_load``), a pod carries a team's own deletion cost, or a mark is still not in place after
  ``MARK_CONFIRM_SECONDS`` (``pod_mark`` counts failed patches), the Deployment is scaled anyway, in the
  ReplicaSet's default order (no worse than without marks), and the ``ScaledDown`` Event, the status
  (``scaleDown``), the log and ``scale_down_unmarked_total{reason}`` say so. Marks of a Deployment that left the
  controller's care (opted out, advisory, invalid, namespace excluded) are found by their label and cleared. A
  dry run marks nothing and lists what it would mark in ``scale_down_marks``.
- ``capacity-per-replica: auto`` (or absent): the capacity is learned from the Deployment's own vLLM history
  (``autoscaler.domain.learned_capacity``, read at start and then daily when ``learn_capacity`` is on, as ``run``
  sets it); until the evidence is enough its replicas are held (a ``capacity_unknown`` step says why), never scaled
  on a guess, with one ``CapacityNotLearned``/``CapacityLearned`` Event per transition. A failed evidence read is
  counted (``capacity_estimate``) and reported; the last estimates stand and it is retried ten minutes later.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, Protocol, runtime_checkable

import numpy as np

from autoscaler import promql
from autoscaler.adapters.kube import KubeError
from autoscaler.adapters.prometheus import FleetHistory, PrometheusError, PrometheusUnavailable
from autoscaler.config import Config, ForecastProfile
from autoscaler.domain.annotations import (
    PREFIX,
    STATUS_ANNOTATION,
    AnnotationError,
    WorkloadSpec,
    event_payloads,
    parse_workload,
)
from autoscaler.domain.coldstart import ColdStartProfile
from autoscaler.domain.demand import DemandUnit, token_demand
from autoscaler.domain.gangs import sum_points
from autoscaler.domain.learned_capacity import CapacityInputs, EvidenceRules, LearnedCapacity, estimate_capacity
from autoscaler.domain.money import PlannedWorkload
from autoscaler.domain.scaledown import (
    MARKS_UNCONFIRMED,
    NO_POD_LOADS,
    PODS_UNREAD,
    RolloutGuard,
    ScaleDownMarks,
    check_marks,
    deployment_of,
    guard_scale_down,
    has_marks,
    label_patch,
    plan_clear,
    plan_marks,
    release_marks,
    rollout_of,
)
from autoscaler.domain.status import first_sight, status_object_name
from autoscaler.domain.types import ScalingDecision, ScalingPolicy, Step
from autoscaler.engine.deciding import Observed, decide
from autoscaler.engine.forecasting import ForecastKeeper, has_evidence
from autoscaler.history import TOKEN_QUERIES, fetch_fleet, history_window, read_capacity_inputs, series_of
from autoscaler.ports import Cluster, EventType, PodStartups, PodView, StatusObject, WorkloadView
from autoscaler.runtime.clock import utc
from autoscaler.runtime.metrics import ControllerMetrics
from autoscaler.runtime.money import MoneyOutcome, MoneyStage
from autoscaler.runtime.notices import Notices
from autoscaler.simulation.tuning import Tuning, candidate_policy, tune
from models.registry import make_chain
from models.types import Forecast, TrafficSeries

log = logging.getLogger(__name__)

Key = tuple[str, str]
STARTUP_RECHECK_SECONDS = 300
# How often the pods carrying a scale-down mark of ours are listed across the controller's namespaces (one
# label-selected list), besides the first tick and a tick in which a Deployment with marks leaves its care: marks
# nothing maintains any more (a restart while its Deployment was opted out, say) are cleared within this time.
MARK_SWEEP_SECONDS = 300
STATUS_REFRESH_SECONDS = 300
# Share of the loop interval a tick may spend fitting forecasters. Every model falls due for its daily refit
# in the same tick (they were all fitted in the first one): without a budget a 1,000-Deployment fleet spends
# minutes refitting in one tick while nothing is planned; with it, refits spread over the next ticks.
FIT_BUDGET_SHARE = 1 / 3
MIN_FIT_BUDGET_SECONDS = 5.0  # whatever the interval, a tick makes real progress on its fits
TRACK_EVERY_SECONDS = 300
TRACK_LENGTH = 48  # 4 hours of forecast-vs-actual points at 5-minute spacing, for `explain`
REFETCH_BINS = 2  # the newest bins may still change as late scrapes land: fetch them again
# Learned capacity (capacity-per-replica auto; autoscaler.domain.learned_capacity): re-estimated this often, from
# this much history (at most loop.history), and retried this soon after a failed read. Daily, not every tick: the
# estimate reads five series over days and moves only as the workload's mix does.
CAPACITY_EVERY_SECONDS = 86_400
CAPACITY_HISTORY_SECONDS = 7 * 86_400
CAPACITY_RETRY_SECONDS = 600
CAPACITY_BATCH = 100  # Deployments a tick reads the evidence of (whole namespaces, until reached; _learn_capacity)
# A Deployment whose capacity is not learned yet is still forecast (for its status and track), with a policy whose
# capacity shapes nothing: no replica count is derived from it (the plan is a hold, _capacity_hold).
FORECAST_ONLY_CAPACITY = 1.0
# Self-tuning (autoscaler.simulation.tuning): a Deployment's operating point is re-chosen this often, after each
# refit of its model, and when its objective changes; an attempt that could not replay (too little history)
# is retried after TUNE_RETRY_SECONDS.
TUNE_EVERY_SECONDS = 86_400
TUNE_RETRY_SECONDS = 3_600
# A replay costs about 1.5 s of CPU: a tick starts replays for at most this share of the loop interval (and only in
# what its fits left of theirs), so a fleet's daily replays spread over many ticks instead of stretching some.
TUNE_BUDGET_SHARE = 1 / 10


class MetricsSource(Protocol):
    """What the loop needs from the metrics backend (``PrometheusSource`` implements it)."""

    def fleet_history(
        self, query: str, namespaces: Iterable[str], start: int, end: int, step_seconds: int
    ) -> Mapping[Key, TrafficSeries]: ...


@runtime_checkable
class PodLoadSource(Protocol):
    """Per-pod current values (``PrometheusSource`` implements it): the in-flight requests a scale-down ranks by.

    A source without it (the fleet benchmark's synthetic one) marks no pod: the ReplicaSet's default order applies.
    """

    def pod_instant(self, query: str, namespaces: Iterable[str], at: float) -> Mapping[tuple[str, str], float]: ...


POD_LOAD_QUERY = "pod_in_flight"


def _demand_key(spec: WorkloadSpec, profile: ForecastProfile) -> tuple[str, float, float]:
    """What a Deployment's history is counted in (unit and token weights): a change starts it afresh."""
    if spec.demand_unit is DemandUnit.REQUESTS:
        return (spec.demand_unit.value, 0.0, 0.0)
    return (spec.demand_unit.value, profile.token_weights.input, profile.token_weights.output)


@dataclass
class _Memory:
    # The demand series forecast and planned on: requests/s, or weighted tokens/s (``demand_key`` says which).
    history: TrafficSeries | None = None
    demand_key: tuple[str, float, float] | None = None
    # The fitted forecaster and its cadence (autoscaler.engine.forecasting): the simulator keeps its forecasts
    # the same way. None: no model yet (or the demand unit changed).
    keeper: ForecastKeeper | None = None
    recommendations: tuple[tuple[int, int], ...] = ()
    startups: PodStartups = field(default_factory=PodStartups)
    startups_checked: float = -math.inf
    reported: frozenset[str] = frozenset()  # annotation problems already posted as Events
    counted: frozenset[str] = frozenset()  # annotation errors already counted in the errors metric
    # What was told of this Deployment, once per transition (autoscaler.runtime.notices): "outage", "gpus",
    # "degraded" (Event) and "degraded-log", "rollout", "capacity", "slo", "lead-only".
    notices: Notices = field(default_factory=Notices)
    status_written: dict[str, Any] | None = None
    status_written_at: float = -math.inf
    # The status it left (autoscaler.domain.status): looked for (its namespace's status objects listed; until then
    # no status is written, which would drop the self-tuning days it may hold), the object as last read or written
    # (None: none known), the status to resume from, and one an older version's annotation holds that is to be
    # copied to the object before the annotation is removed.
    status_read: bool = False
    status_object: StatusObject | None = None
    saved_tuning: Any = None  # the saved status's self-tuning state (only this part of it is resumed)
    status_copy: dict[str, Any] | None = None
    track: list[dict[str, Any]] = field(default_factory=list)
    exported_bands: frozenset[str] = frozenset()  # forecast bands on /metrics for this Deployment
    exported_unit: str | None = None  # the unit label of its demand_unit_info series
    # The query's demand_source label of the newest bin with a value (None: the query does not say): "full",
    # or why a fallback (completions alone) gave it. Kept over bins without a value.
    demand_source: str | None = None
    # The last pod listing showed scale-down marks of ours (or we just wrote some): pods are listed every tick
    # until they are cleared (autoscaler.domain.scaledown), instead of every STARTUP_RECHECK_SECONDS.
    marks_seen: bool = False
    # When a scale-down first found its marks not in place on the read after writing them (None: it did not).
    marks_waiting_since: float | None = None
    # The last scale-down applied and how its pods were chosen (the status's scaleDown).
    last_scale_down: dict[str, Any] | None = None
    # Learned capacity: the last estimate (None: none yet) and when it was made, when the evidence was last read
    # (or a failed read is to be retried), and why the last read failed.
    capacity: LearnedCapacity | None = None
    capacity_at: float = -math.inf
    capacity_checked: float = -math.inf
    capacity_error: str | None = None
    capacity_wait: float | None = None  # the latency objective the estimate was made for (a change re-estimates)
    # Self-tuning: the last replay (``chosen`` None: it could not replay), when it was tried and for what
    # objective and sizing, and the state its Events are to tell (met, why; whether the forecast adds only the lead).
    tuning: Tuning | None = None
    tuning_tried: float = -math.inf
    tuning_inputs: tuple[float, ...] | None = None  # objective and sizing it was tuned for: a change re-tunes
    tuning_state: tuple[bool, bool, str] | None = None
    tuning_read: bool = False  # the state a previous controller left in the status was looked for


@dataclass(frozen=True)
class WorkloadOutcome:
    """One Deployment's part of a tick: what was seen, decided and done."""

    namespace: str
    name: str
    current_replicas: int
    ready_replicas: int
    mode: str | None = None
    decision: ScalingDecision | None = None
    forecast: dict[str, Any] | None = None
    problems: tuple[str, ...] = ()
    actions: tuple[str, ...] = ()
    demand_source: str | None = None  # see _Memory.demand_source
    scale_down_marks: ScaleDownMarks | None = None  # pod-deletion-cost marks set / cleared (or, dry run, planned)

    def to_dict(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "name": self.name,
            "mode": self.mode,
            "current_replicas": self.current_replicas,
            "ready_replicas": self.ready_replicas,
            "desired_replicas": None if self.decision is None else self.decision.desired_replicas,
            "demand_source": self.demand_source,
            "forecast": self.forecast,
            "decision": None if self.decision is None else self.decision.to_dict(),
            "problems": list(self.problems),
            "actions": list(self.actions),
            "scale_down_marks": None if self.scale_down_marks is None else self.scale_down_marks.to_dict(),
        }


@dataclass(frozen=True)
class TickReport:
    now: int
    acting: bool
    dry_run: bool
    metrics_ok: bool
    workloads: tuple[WorkloadOutcome, ...]
    errors: tuple[str, ...]
    money: MoneyOutcome | None = None

    @property
    def ok(self) -> bool:
        """The tick did everything it meant to: metrics fetched, every write landed."""
        return self.metrics_ok and not self.errors

    def to_dict(self) -> dict[str, Any]:
        return {
            "now": self.now,
            "acting": self.acting,
            "dry_run": self.dry_run,
            "metrics_ok": self.metrics_ok,
            "errors": list(self.errors),
            "workloads": [w.to_dict() for w in self.workloads],
            "cost": None if self.money is None else self.money.to_dict(),
        }


def _degraded(source: str | None) -> bool:
    """The demand came from a fallback formula (the query labelled it so), not the full one."""
    return source is not None and source != promql.SOURCE_FULL


def _log_demand_source(view: WorkloadView, degraded: bool, source: str | None) -> bool:
    if degraded:
        log.warning("%s/%s: demand is the completion rate alone (%s)", view.namespace, view.name, source)
    else:
        log.info("%s/%s: demand is the full formula again", view.namespace, view.name)
    return True


def _finite(x: float) -> float | None:
    return round(float(x), 6) if math.isfinite(x) else None


def _splice(old: TrafficSeries | None, new: TrafficSeries, keep_seconds: int) -> TrafficSeries:
    """``old`` extended/overwritten by ``new`` (same step), trimmed to the newest ``keep_seconds``."""
    step = new.step_seconds
    if old is None or old.step_seconds != step or new.start > old.end:
        merged = new
    else:
        head = old.values[: max(0, (new.start - old.start) // step)]
        merged = TrafficSeries(np.concatenate([head, new.values]), step, old.start)
    keep = max(1, keep_seconds // step)
    return merged.slice(len(merged) - keep, len(merged)) if len(merged) > keep else merged


def _fitted_since(memory: _Memory, when: float) -> bool:
    """Whether the Deployment's model was (re)fitted after ``when``: a refit re-tunes."""
    return memory.keeper is not None and memory.keeper.fitted_at > when


def _deciding_step(decision: ScalingDecision) -> Step:
    """The rule that set the final count: the first step after which the count no longer changed."""
    steps = decision.steps
    last_other = max((i for i, s in enumerate(steps) if s.replicas != decision.desired_replicas), default=-1)
    return steps[min(last_other + 1, len(steps) - 1)]


def _objective(spec: WorkloadSpec, profile: ForecastProfile) -> tuple[float, float]:
    """The Deployment's latency objective, (wait seconds, attainment share): its annotations', else its profile's."""
    wait = spec.slo_wait_seconds if spec.slo_wait_seconds is not None else float(profile.slo_wait_seconds)
    target = spec.slo_attainment if spec.slo_attainment is not None else profile.slo_attainment
    return wait, target


def _policy(spec: WorkloadSpec, profile: ForecastProfile, capacity: float) -> ScalingPolicy:
    """The profile's policy for this Deployment at ``capacity`` req/s per replica (the annotation's or the learned
    one): the one mapping ``simulate --config`` also uses."""
    return profile.scaling_policy(capacity, spec.min_replicas, spec.max_replicas, spec.warm_pool)


@dataclass(frozen=True)
class _Replay:
    """A self-tuning replay one Deployment's plan found due (``Controller._replay_due`` runs it after the plans)."""

    key: Key
    policy: ScalingPolicy  # the profile's own, untuned
    cold: ColdStartProfile
    profile: ForecastProfile
    gpus_per_replica: int
    inputs: tuple[float, ...]  # (slo wait, attainment, capacity, min, max): a change re-tunes and restarts the pool


@dataclass(frozen=True)
class _Plan:
    """One workload planned on its own (first pass), waiting for the money stage and then to be applied."""

    view: WorkloadView
    spec: WorkloadSpec
    decision: ScalingDecision
    summary: dict[str, Any] | None
    demand: float | None
    blocked: int
    ahead: int
    capacity: float | None = None  # req/s per replica planned with (None: not learned yet, the replicas held)


class _GangForecasts:
    """``money.GangForecasts`` over one tick's plans and the loop's cached, already-fitted forecasters.

    A pool's points are the sum over its Deployments of the median forecast (the mean when a model has no
    p50) as replicas x GPUs per replica, from each model's own state, never refitted; a Deployment without a
    model counts its current replicas for the whole span. Called by the money stage only when scheduled gangs
    exist and their placements are due, because a forecast of up to ``MAX_PLACEMENT_SECONDS`` per Deployment
    is the costly part of placing.
    """

    def __init__(self, plans: Sequence[_Plan], memory: Mapping[Key, _Memory], metrics: ControllerMetrics,
                 errors: list[str]) -> None:
        self._plans = plans
        self._memory = memory
        self._metrics = metrics
        self._errors = errors

    def _members(self, pool: str | None) -> list[_Plan]:
        return [p for p in self._plans if (p.spec.nodepool or None) == pool and p.spec.gpus_per_replica > 0]

    def version(self, pool: str | None) -> int:
        """Changes when a model of the pool was (re)fitted or the pool's Deployments changed."""
        stamp = []
        for p in self._members(pool):
            m = self._memory.get((p.view.namespace, p.view.name))
            k = None if m is None else m.keeper
            stamp.append((p.view.namespace, p.view.name, -1 if k is None or k.model is None else k.fitted_at))
        return hash(tuple(sorted(stamp)))

    def points(self, pool: str | None, start: int, end: int) -> list[tuple[int, float]] | None:
        series: list[list[tuple[int, float]]] = []
        for p in self._members(pool):
            key = (p.view.namespace, p.view.name)
            gpr = p.spec.gpus_per_replica
            memory = self._memory.get(key)
            keeper = None if memory is None else memory.keeper
            model = None if keeper is None else keeper.model
            if memory is None or keeper is None or model is None or memory.history is None or p.capacity is None:
                series.append([(start, float(p.view.replicas * gpr))])
                continue
            try:
                series.append(keeper.gpu_points(
                    start, end, memory.history.step_seconds, capacity_per_replica=p.capacity,
                    min_replicas=p.spec.min_replicas, max_replicas=p.spec.max_replicas, gpus_per_replica=gpr,
                ))
            except Exception as exc:  # a forecaster bug must not stop placing: this one counts as it is now
                self._metrics.errors.labels("forecast").inc()
                self._errors.append(f"{key[0]}/{key[1]}: long forecast for gang placement failed "
                                    f"({type(exc).__name__}: {exc}); its current replicas are assumed")
                series.append([(start, float(p.view.replicas * gpr))])
        return sum_points(series) or None


class Controller:
    """Runs ticks. Holds per-Deployment memory; all I/O goes through ``cluster``, ``source`` and ``money``'s ports.

    ``money`` defaults to a stage without adapters: the plan is priced and held under the ceilings, and
    nothing is read from or written to Karpenter, Kueue/Volcano or Alertmanager.
    """

    def __init__(
        self,
        cluster: Cluster,
        source: MetricsSource,
        config: Callable[[], Config],
        *,
        metrics: ControllerMetrics | None = None,
        dry_run: bool = False,
        money: MoneyStage | None = None,
        learn_capacity: bool = False,
    ) -> None:
        self.cluster = cluster
        # Whether capacities are learned from the metrics source (the capacity evidence queries, daily): ``run``
        # turns it on; off, a Deployment without a capacity annotation is held, and says why.
        self.learn_capacity = learn_capacity
        self.money = money if money is not None else MoneyStage()
        self.source = source
        self._config = config
        self.metrics = metrics if metrics is not None else ControllerMetrics()
        self.dry_run = dry_run
        self._memory: dict[Key, _Memory] = {}
        # per tick; None = FIT_BUDGET_SHARE of the loop interval, at least MIN_FIT_BUDGET_SECONDS
        self.fit_budget_seconds: float | None = None
        self._fit_deadline = math.inf  # set per tick: fitting stops being started after it
        # per tick; None = TUNE_BUDGET_SHARE of the loop interval: self-tuning replays stop being started after it
        self.tune_budget_seconds: float | None = None
        self._tune_deadline = math.inf
        self._replays: list[_Replay] = []  # self-tuning replays this tick's plans found due
        self._replay_seconds = 0.0  # running mean wall time of one replay (0: none run yet)
        self._deferred_fits = 0
        self._swept_at = -math.inf  # when the pods with marks of ours were last listed (MARK_SWEEP_SECONDS)

    # ------------------------------------------------------------------ tick

    def tick(self, now: float, *, acting: bool = True) -> TickReport:
        """One pass over the fleet at ``now``. ``acting`` is False on a standby replica."""
        started = time.perf_counter()
        cfg = self._config()
        write = acting and not self.dry_run
        self.metrics.leader.set(1 if acting else 0)
        errors: list[str] = []
        try:
            views = [v for v in self.cluster.list_workloads() if cfg.allows_namespace(v.namespace)]
        except KubeError as exc:
            self.metrics.errors.labels("kube_read").inc()
            return self._finish(now, acting, False, (), [f"listing Deployments failed: {exc}"], started)

        outcomes: list[WorkloadOutcome] = []
        valid: list[tuple[WorkloadView, WorkloadSpec, ForecastProfile]] = []
        for view in views:
            spec, profile, problems = self._parse(view, cfg)
            self._report_problems(view, problems, now, write, errors)
            if spec is None or profile is None:
                outcomes.append(
                    WorkloadOutcome(
                        view.namespace, view.name, view.replicas, view.ready_replicas,
                        problems=tuple(str(p) for p in problems if p.severity == "error"),
                    )
                )
                continue
            valid.append((view, spec, profile))
        self.metrics.workloads.labels("managed").set(len(valid))
        self.metrics.workloads.labels("invalid").set(len(views) - len(valid))
        if write:
            advisory = {(v.namespace, v.name) for v, s, _ in valid if s.advisory}
            in_care = {(v.namespace, v.name) for v, _, _ in valid} - advisory
            listed = {(v.namespace, v.name): "its annotations are invalid" for v in views}
            listed.update(dict.fromkeys(advisory, "it is advisory (mode: advisory)"))
            self._sweep_marks(cfg, in_care, listed, now, errors)
        self._forget({(v.namespace, v.name) for v in views})
        self._read_statuses(views, write, errors)

        metrics_ok = self._fetch(cfg, valid, int(now), errors)
        self._report_outage(valid, metrics_ok, now, write, errors)
        self._report_demand_source(valid, now, write, errors)
        if metrics_ok:
            self._learn_capacity(cfg, valid, int(now), errors)
        self._report_capacity(valid, now, write, errors)
        budget = self.fit_budget_seconds
        self._fit_deadline = time.perf_counter() + (
            max(cfg.loop.interval_seconds * FIT_BUDGET_SHARE, MIN_FIT_BUDGET_SECONDS) if budget is None else budget
        )
        self._deferred_fits = 0
        # Stalest models first, so a deferred refit is the first one served by the next tick's budget.
        order = sorted(range(len(valid)), key=lambda i: self._staleness(valid[i][0]))
        planned = {i: self._plan(*valid[i], cfg, now, metrics_ok, errors) for i in order}
        self._tune_deadline = time.perf_counter() + (  # replays get their own time, after the plans
            cfg.loop.interval_seconds * TUNE_BUDGET_SHARE if self.tune_budget_seconds is None
            else self.tune_budget_seconds)
        self._replay_due(now, errors)
        plans = [planned[i] for i in range(len(valid))]
        self.metrics.deferred_fits.set(self._deferred_fits)
        horizon = max((p.horizon_seconds for _, _, p in valid), default=cfg.profile("default").horizon_seconds)
        money = self.money.run(
            [PlannedWorkload(p.view, p.spec, p.decision, p.ahead, p.blocked) for p in plans], cfg, now,
            write=write, horizon_seconds=horizon, metrics=self.metrics, errors=errors,
            gang_forecasts=_GangForecasts(plans, self._memory, self.metrics, errors),
        )
        decisions = [money.decisions.get(f"{p.view.namespace}/{p.view.name}", p.decision) for p in plans]
        downs = {p.view.namespace for p, d in zip(plans, decisions, strict=True)
                 if not p.spec.advisory and d.desired_replicas < p.view.replicas}
        loads = self._pod_loads(downs, now, errors) if downs and (write or self.dry_run) else None
        for plan, decision in zip(plans, decisions, strict=True):
            outcomes.append(self._conclude(plan, decision, now, write, errors, loads))
        return self._finish(now, acting, metrics_ok, tuple(outcomes), errors, started, money)

    def _finish(
        self, now: float, acting: bool, metrics_ok: bool, outcomes: tuple[WorkloadOutcome, ...],
        errors: list[str], started: float, money: MoneyOutcome | None = None,
    ) -> TickReport:
        self.metrics.tick_seconds.observe(time.perf_counter() - started)
        self.metrics.last_tick.set(now)
        for e in errors:
            log.warning("%s", e)
        return TickReport(int(now), acting, self.dry_run, metrics_ok, outcomes, tuple(errors), money)

    # ------------------------------------------------------------------ read & validate

    def _parse(
        self, view: WorkloadView, cfg: Config
    ) -> tuple[WorkloadSpec | None, ForecastProfile | None, list[AnnotationError]]:
        result = parse_workload(view.namespace, view.name, view.labels, view.annotations, view.pod_template)
        problems = list(result.problems)
        spec = result.spec
        if spec is None:
            return None, None, problems
        if spec.forecast_profile not in cfg.profiles:
            known = ", ".join(sorted(cfg.profiles))
            problems.append(
                AnnotationError(
                    PREFIX + "forecast-profile", spec.forecast_profile, f"no such profile in the config ({known})"
                )
            )
            return None, None, problems
        if PREFIX + "cold-start" not in view.annotations:
            spec = replace(spec, cold_start_seconds=float(cfg.cold_start.pod_startup_seconds))
        return spec, cfg.profiles[spec.forecast_profile], problems

    def _report_problems(
        self, view: WorkloadView, problems: list[AnnotationError], now: float, write: bool, errors: list[str]
    ) -> None:
        """A Warning Event per problem not reported before; a fixed problem that comes back is reported again.

        A problem counts as reported only once its Event landed, so a failed post is retried next tick, and a
        standby (``write`` False) leaves them all to the leader.
        """
        memory = self._memory.setdefault((view.namespace, view.name), _Memory())
        texts = frozenset(str(p) for p in problems)
        memory.reported &= texts
        fresh_errors = {str(p) for p in problems if p.severity == "error"} - memory.counted
        if fresh_errors:
            self.metrics.errors.labels("invalid_annotation").inc(len(fresh_errors))
        memory.counted = (memory.counted & texts) | fresh_errors
        if not write:
            return
        for p in problems:
            if str(p) in memory.reported:
                continue
            ((reason, message),) = event_payloads([p])
            if self._event(view, "Warning", reason, message, now, errors):
                memory.reported |= {str(p)}

    def _fetch(
        self, cfg: Config, valid: list[tuple[WorkloadView, WorkloadSpec, ForecastProfile]], now: int, errors: list[str]
    ) -> bool:
        """One fleet query for the newest bins; one more for Deployments seen for the first time.

        With a Deployment sized on tokens (``demand-unit: tokens``) among them, one more fleet query per token
        series (``prompt_token_rate``, ``generation_token_rate``) over the namespaces of such Deployments; their
        history is the weighted tokens/s (``autoscaler.domain.demand``), missing where a weighted series is.
        """
        if not valid:
            self.metrics.metrics_up.set(1)
            return True
        step = cfg.loop.step_seconds
        end = history_window(now, step, 0)[1]
        query = cfg.prometheus.arrival_rate_query
        fresh: list[tuple[WorkloadView, WorkloadSpec, ForecastProfile]] = []
        known: list[tuple[WorkloadView, WorkloadSpec, ForecastProfile]] = []
        for view, spec, profile in valid:
            memory = self._memory[(view.namespace, view.name)]
            unit = _demand_key(spec, profile)
            if memory.demand_key != unit:
                if memory.demand_key is not None:  # another unit or weights: the history and model start afresh
                    memory.history, memory.keeper, memory.track = None, None, []
                    memory.tuning, memory.tuning_inputs = None, None
                    # a learned capacity is in requests/s: learned again (from now) if the unit is requests again
                    memory.capacity, memory.capacity_checked = None, -math.inf
                    memory.notices.forget("capacity")
                memory.demand_key = unit
            h = memory.history
            (known if h is not None and h.step_seconds == step else fresh).append((view, spec, profile))
        plans: list[tuple[list[tuple[WorkloadView, WorkloadSpec, ForecastProfile]], int]] = []
        if fresh:
            window = max(max(p.history_seconds for _, _, p in fresh), cfg.loop.history_seconds)
            plans.append((fresh, history_window(now, step, window)[0]))
        if known:
            oldest = min(self._history_end(v) for v, _, _ in known)
            plans.append((known, max(oldest - REFETCH_BINS * step, end - (cfg.loop.history_seconds // step) * step)))
        try:
            for group, start in plans:
                if start >= end:
                    continue
                namespaces = sorted({v.namespace for v, _, _ in group})
                # The read `export`/`backtest --deployment` make too (autoscaler.history): the same series.
                answer = fetch_fleet(self.source, query, namespaces, start, end, step)
                on_tokens = sorted({v.namespace for v, s, _ in group if s.demand_unit is DemandUnit.TOKENS})
                tokens = {column: fetch_fleet(self.source, name, on_tokens, start, end, step)
                          for column, name in TOKEN_QUERIES.items()} if on_tokens else {}
                for view, spec, profile in group:
                    key = (view.namespace, view.name)
                    memory = self._memory[key]
                    keep = max(profile.history_seconds, cfg.loop.history_seconds)
                    if spec.demand_unit is DemandUnit.TOKENS:
                        prompt = series_of(tokens["input_tokens"], key, start, end, step).values
                        generated = series_of(tokens["output_tokens"], key, start, end, step).values
                        got = TrafficSeries(token_demand(prompt, generated, profile.token_weights), step, start)
                        memory.history = _splice(memory.history, got, keep)
                        memory.demand_source = None  # the token counters: no completions-only fallback to report
                        continue
                    got = series_of(answer, key, start, end, step)
                    memory.history = _splice(memory.history, got, keep)
                    found, source = (
                        answer.latest_source(key) if isinstance(answer, FleetHistory)
                        else (bool(np.isfinite(got.values).any()), None)
                    )
                    if found:
                        memory.demand_source = source
        except PrometheusError as exc:
            kind = "metrics_unavailable" if isinstance(exc, PrometheusUnavailable) else "metrics_query"
            self.metrics.errors.labels(kind).inc()
            self.metrics.metrics_up.set(0)
            errors.append(f"metrics fetch failed, holding replicas: {exc}")
            return False
        self.metrics.metrics_up.set(1)
        return True

    def _history_end(self, view: WorkloadView) -> int:
        h = self._memory[(view.namespace, view.name)].history
        assert h is not None
        return h.end

    def _report_outage(
        self, valid: list[tuple[WorkloadView, WorkloadSpec, ForecastProfile]], ok: bool, now: float, write: bool,
        errors: list[str],
    ) -> None:
        """MetricsUnavailable once per workload when an outage starts, MetricsRecovered once when it ends.

        Tracked per workload (not fleet-wide) so a Deployment that appears mid-outage is told too, and an
        Event that failed to post is retried on the next tick instead of being lost.
        """
        if not write:
            return
        for view, _, _ in valid:
            memory = self._memory[(view.namespace, view.name)]
            said: tuple[EventType, str, str] = (
                ("Warning", "MetricsUnavailable", "cannot read traffic metrics; replicas are held (never scaled down "
                 "on missing data) until they return") if not ok else
                ("Normal", "MetricsRecovered", "metrics are back; forecasting and scaling resume"))
            memory.notices.tell("outage", not ok, partial(self._event, view, *said, now, errors), quiet=False)

    def _report_demand_source(
        self, valid: list[tuple[WorkloadView, WorkloadSpec, ForecastProfile]], now: float, write: bool,
        errors: list[str],
    ) -> None:
        """A log line and an Event when a Deployment's demand falls back to completions alone, and when it is back.

        Once per transition, not per tick: the built-in arrival query answers completions alone for a Deployment
        whose vLLM queue gauges are absent (``demand_source`` says which), instead of nothing, so the Deployment
        is still forecast and scaled, on a demand that reads low when requests queue.
        """
        for view, _, _ in valid:
            memory = self._memory[(view.namespace, view.name)]
            degraded = _degraded(memory.demand_source)
            memory.notices.tell("degraded-log", degraded,
                                partial(_log_demand_source, view, degraded, memory.demand_source), quiet=False)
            if not write:
                continue
            said: tuple[EventType, str, str] = (
                ("Warning", "DemandDegraded", f"demand is read from the completion rate alone ({memory.demand_source})"
                 ": requests still queued are not counted, so it reads low when the server saturates; the full formula "
                 "(completions + growth of waiting + running) resumes by itself once the gauges are scraped")
                if degraded else
                ("Normal", "DemandRestored",
                 "demand is read from the full formula again (completions + growth of waiting + running)"))
            memory.notices.tell("degraded", degraded, partial(self._event, view, *said, now, errors), quiet=False)

    # ------------------------------------------------------------------ decide

    def _read_statuses(self, views: Sequence[WorkloadView], write: bool, errors: list[str]) -> None:
        """Read the status each Deployment seen for the first time left, and move an older version's annotation off
        the Deployment (``autoscaler.domain.status``).

        One label-selected list of status objects per namespace with such Deployments (not a read per Deployment):
        in steady state no tick reads them, each write's answer is what the next one compares with. A failed list
        is counted and reported; those Deployments' statuses are neither resumed from nor written until a later
        tick's list succeeds. When acting, a Deployment that carries the annotation has its status copied to the
        object (when the annotation's is the newer) and then the annotation removed, in one merge patch: from then
        on the ReplicaSets' copy of it no longer changes. A rollback that copies the annotation back from an old
        ReplicaSet has it removed again the same way.
        """
        unread = [v for v in views if not self._memory[(v.namespace, v.name)].status_read]
        for namespace in sorted({v.namespace for v in unread}):
            try:
                stored = self.cluster.list_statuses(namespace)
            except KubeError as exc:
                self.metrics.errors.labels("kube_read").inc()
                errors.append(f"listing the status objects in namespace {namespace} failed: {exc}; the statuses of "
                              "its Deployments seen for the first time are written once a list succeeds")
                continue
            for view in (v for v in unread if v.namespace == namespace):
                memory = self._memory[(view.namespace, view.name)]
                found = stored.get(status_object_name(view.name))
                sight = first_sight(view.uid, view.annotations.get(STATUS_ANNOTATION),
                                    None if found is None else found.text, None if found is None else found.owner_uid)
                for problem in sight.problems:
                    log.warning("%s/%s: %s; it starts over", view.namespace, view.name, problem)
                memory.status_read, memory.status_object = True, found
                saved = sight.saved or {}
                memory.saved_tuning, memory.status_copy = saved.get("tuning"), sight.copy
                memory.last_scale_down = saved.get("scaleDown")  # the last scale-down outlives a restart too
        if not write:
            return
        for view in views:
            memory = self._memory[(view.namespace, view.name)]
            if memory.status_read and STATUS_ANNOTATION in view.annotations:
                self._migrate_status(view, memory, errors)

    def _migrate_status(self, view: WorkloadView, memory: _Memory, errors: list[str]) -> None:
        """Copy the annotation's status to the status object when it is the newer, then remove the annotation; a
        failure is counted and reported, and the next tick tries again (the annotation is still there)."""
        try:
            if memory.status_copy is not None:
                result = self.cluster.write_status(view.namespace, view.name, view.uid, memory.status_copy,
                                                   memory.status_object)
                memory.status_object, memory.status_copy = result.stored, None
            self.cluster.remove_status_annotation(view.namespace, view.name)
        except KubeError as exc:
            self.metrics.errors.labels("kube_write").inc()
            errors.append(f"{view.namespace}/{view.name}: moving the status annotation to configmap "
                          f"{status_object_name(view.name)} failed: {exc}")
            return
        log.info("%s/%s: the status annotation was moved to configmap %s", view.namespace, view.name,
                 status_object_name(view.name))

    def forecast_keeper(self, namespace: str, name: str) -> ForecastKeeper | None:
        """The Deployment's forecast keeper (None: none yet): what its last tick forecast, for inspection."""
        memory = self._memory.get((namespace, name))
        return None if memory is None else memory.keeper

    def _staleness(self, view: WorkloadView) -> float:
        memory = self._memory.get((view.namespace, view.name))
        keeper = None if memory is None else memory.keeper
        return -math.inf if keeper is None or keeper.model is None else float(keeper.fitted_at)

    def _forecast(
        self, key: Key, profile: ForecastProfile, policy: ScalingPolicy, cold: ColdStartProfile, now: int,
        errors: list[str],
    ) -> Forecast | None:
        """The forecast of ``key`` at ``now`` from its ``ForecastKeeper`` (the cadence the simulator runs too);
        what stays here is the fleet's fitting budget: a fit due once the budget is spent is deferred."""
        memory = self._memory[key]
        series = memory.history
        if series is None or not has_evidence(series):
            return None
        model_key = (profile.model, profile.history_seconds, series.step_seconds)  # a new step: a new model
        keeper = memory.keeper
        if keeper is None or keeper.key != model_key:
            keeper = memory.keeper = ForecastKeeper(partial(make_chain, profile.model), key=model_key,
                                                    history_seconds=profile.history_seconds)
        keeper.refit_seconds = profile.refit_seconds
        may_fit = True
        if time.perf_counter() > self._fit_deadline and keeper.needs_fit(series, now):
            # Over this tick's fitting budget: a model that is merely due keeps updating until a later tick
            # refits it; one that has no usable model yet waits (the planner holds its replicas).
            self._deferred_fits += 1
            may_fit = False
        try:
            forecast = keeper.forecast(series, now, policy, cold, profile.horizon_seconds, may_fit=may_fit)
        except Exception as exc:  # a forecaster bug must not stop the fleet: hold this one, report it
            self.metrics.errors.labels("forecast").inc()
            errors.append(f"{key[0]}/{key[1]}: forecast failed ({type(exc).__name__}: {exc}); holding replicas")
            return None
        if forecast is not None and forecast.fallbacks:
            self.metrics.fallbacks.labels(*key).inc()
        return forecast

    def _startups(self, view: WorkloadView, now: float, errors: list[str]) -> PodStartups:
        memory = self._memory[(view.namespace, view.name)]
        stale = now - memory.startups_checked >= STARTUP_RECHECK_SECONDS
        if stale or view.ready_replicas != view.replicas or memory.startups.not_ready or memory.marks_seen:
            self._list_pods(view, memory, now, errors)
        return memory.startups

    def _list_pods(self, view: WorkloadView, memory: _Memory, now: float, errors: list[str]) -> bool:
        """List the workload's pods (start-ups, and the pods a scale-down marks); False when the read failed."""
        try:
            memory.startups = self.cluster.pod_startups(view.namespace, view.selector, utc(now))
        except KubeError as exc:
            self.metrics.errors.labels("kube_read").inc()
            errors.append(f"{view.namespace}/{view.name}: reading pod start-ups failed: {exc}")
            return False
        memory.startups_checked = now
        memory.marks_seen = has_marks(memory.startups.pods)
        return True

    def _sweep_marks(
        self, cfg: Config, in_care: set[Key], listed: Mapping[Key, str], now: float, errors: list[str],
    ) -> None:
        """Clear the marks of ours on pods whose Deployment is not in the controller's care (opted out, advisory,
        invalid annotations, a namespace the configuration excludes, gone): nothing maintains them any more, and a
        later ``kubectl scale`` would still delete those pods first. For Deployments in its care, a mark found
        makes the loop list their pods every tick until it is cleared (``plan_clear``).

        One label-selected list of the pods carrying the mark label (all namespaces, or the configured ones and
        those of the Deployments leaving): on the first tick (a restart, a new leader), every
        ``MARK_SWEEP_SECONDS``, and in a tick in which a Deployment known to have marks leaves the controller's care.
        ``listed``: why each Deployment listed but not in ``in_care`` is not (for the log).
        """
        leaving = {key for key, m in self._memory.items() if m.marks_seen and key not in in_care}
        if not leaving and now - self._swept_at < MARK_SWEEP_SECONDS:
            return
        namespaces = sorted(set(cfg.namespaces) | {ns for ns, _ in leaving}) if cfg.namespaces else []
        try:
            pods = self.cluster.list_marked_pods(namespaces)
        except KubeError as exc:
            self.metrics.errors.labels("kube_read").inc()
            errors.append(f"listing the pods with scale-down marks failed (retried next tick): {exc}")
            self._swept_at = -math.inf  # the Deployments leaving now are forgotten this tick: sweep again next tick
            return
        self._swept_at = now
        groups: dict[Key, list[PodView]] = {}
        for pod in pods:
            groups.setdefault((pod.namespace, deployment_of(pod) or ""), []).append(pod)
        for key in leaving:
            self._memory[key].marks_seen = False
        for key, group in sorted(groups.items()):
            if key in in_care:
                self._memory[key].marks_seen = True
                continue
            why = listed.get(key) or self._why_not_listed(key, cfg)
            plan = release_marks(group, why)
            for pod_name, patch in plan.patches.items():
                try:
                    self.cluster.patch_pod_annotations(key[0], pod_name, patch, label_patch(patch))
                except KubeError as exc:
                    self.metrics.errors.labels("pod_mark").inc()
                    errors.append(f"{key[0]}/{key[1] or '?'}: clearing the scale-down mark of pod {pod_name} failed "
                                  f"(retried next tick): {exc}")
                    self._swept_at = -math.inf
            if plan.clear:
                log.info("%s/%s: scale-down marks cleared on %s: %s", key[0], key[1] or "?", ", ".join(plan.clear), why)

    @staticmethod
    def _why_not_listed(key: Key, cfg: Config) -> str:
        """Why a Deployment with marks of ours is not among the ones the controller looks after (for the log)."""
        if not key[1]:
            return "the pod belongs to no Deployment's ReplicaSet"
        if not cfg.allows_namespace(key[0]):
            return f"namespace {key[0]} is not in the configuration's namespaces"
        return "the Deployment is not opted in (no enabled label) or is gone"

    def _pod_loads(self, namespaces: set[str], now: float, errors: list[str]) -> Mapping[Key, float] | None:
        """In-flight requests per pod, now, in the namespaces of this tick's scale-downs (one query); None when
        unknown (the source cannot say, or the query failed: then no pod is marked, and the tick says so)."""
        if not isinstance(self.source, PodLoadSource):
            return None
        try:
            return self.source.pod_instant(POD_LOAD_QUERY, sorted(namespaces), now)
        except (PrometheusError, promql.TemplateError) as exc:
            self.metrics.errors.labels("pod_load").inc()
            errors.append(f"in-flight requests per pod unknown, scale-downs mark no pod: {exc}")
            return None

    def _plan(
        self, view: WorkloadView, spec: WorkloadSpec, profile: ForecastProfile, cfg: Config, now: float,
        metrics_ok: bool, errors: list[str],
    ) -> _Plan:
        """First pass: forecast and plan one workload on its own (no writes)."""
        key = (view.namespace, view.name)
        memory = self._memory[key]
        capacity = self._capacity_of(spec, memory)
        policy = _policy(spec, profile, capacity if capacity is not None else FORECAST_ONLY_CAPACITY)
        startups = self._startups(view, now, errors)
        cold = ColdStartProfile(
            prior_seconds=spec.cold_start_seconds,
            node_prior_seconds=float(cfg.cold_start.node_startup_seconds),
            samples=startups.durations,
            percentile=float(cfg.cold_start.percentile),
            min_samples=cfg.cold_start.min_samples,
        )
        if capacity is not None:  # a replay at a guessed capacity would tune on a guess
            policy = self._tuned(view, spec, profile, policy, cold, now)
        forecast = self._forecast(key, profile, policy, cold, int(now), errors) if metrics_ok else None
        demand: float | None = None
        if metrics_ok and memory.history is not None and len(memory.history):
            last = float(memory.history.values[-1])
            demand = last if math.isfinite(last) else None
        observed = Observed(
            replicas=view.replicas, ready=view.ready_replicas, demand=demand, gpus_per_replica=spec.gpus_per_replica,
            waiting_for_node=tuple(p.age_seconds for p in startups.not_ready if not p.scheduled),
        )
        decided = decide(forecast, observed, policy, cold, int(now), memory.recommendations,
                         capacity_unknown=None if capacity is not None else self._capacity_reason(memory, spec))
        decision = decided.decision
        memory.recommendations = decision.recommendations
        if decided.stuck and decision.steps[-1].name == "gpus_unavailable":
            self.metrics.errors.labels("gpu_unavailable").inc()
        summary = self._forecast_summary(forecast, profile, now)
        self._track(memory, summary, demand, now)
        return _Plan(view, spec, decision, summary, demand, decided.stuck, decided.ahead, capacity)

    def _tuned(
        self, view: WorkloadView, spec: WorkloadSpec, profile: ForecastProfile, policy: ScalingPolicy,
        cold: ColdStartProfile, now: float,
    ) -> ScalingPolicy:
        """``policy`` at the Deployment's self-tuned operating point (``autoscaler.simulation.tuning``), and a replay
        queued for ``_replay_due`` when one is due.

        Due daily, after a refit of its model and when its objective or sizing changes; the replay runs after this
        tick's plans, in what is left of its budgets, and its choice applies from the next tick. Without self-tuning
        (the profile's ``self_tune: false``, or a fixed warm pool), ``policy`` as it is; before the first replay
        too (the profile's own operating point).
        """
        key = (view.namespace, view.name)
        memory = self._memory[key]
        if not profile.self_tune or policy.warm_pool is not None:
            memory.tuning = None
            return policy
        if not memory.tuning_read and memory.status_read:
            memory.tuning_read = True
            self._resume_tuning(view, memory)
        wait, target = _objective(spec, profile)
        inputs: tuple[float, ...] = (wait, target, policy.capacity_per_replica, policy.min_replicas,
                                     policy.max_replicas)
        last = memory.tuning
        if last is None or last.chosen is None:
            due = now - memory.tuning_tried >= TUNE_RETRY_SECONDS
        else:
            due = (now - memory.tuning_tried >= TUNE_EVERY_SECONDS or _fitted_since(memory, memory.tuning_tried))
        if due or inputs != memory.tuning_inputs:
            self._replays.append(_Replay(key, policy, cold, profile, max(1, spec.gpus_per_replica), inputs))
        if last is None or last.chosen is None or inputs != memory.tuning_inputs:
            return policy  # nothing chosen yet for this objective and sizing
        return candidate_policy(policy, last.chosen, last.chosen_utilisation)

    def _resume_tuning(self, view: WorkloadView, memory: _Memory) -> None:
        """Continue from the self-tuning state the saved status holds (written by this controller before a restart, or
        by the previous leader, in the status object or an older version's annotation): its pooled days, error
        budget and choice, for the objective and sizing it was made for. A replay this controller already ran is
        kept. A state that cannot be read is logged and tuning starts over, as it would without one."""
        if memory.tuning is not None:
            return
        try:
            saved = memory.saved_tuning
            if not saved or saved.get("chosen") is None:
                return
            tuning = Tuning.from_dict(saved)
            inputs = tuple(float(v) for v in saved["inputs"])
            tried = float(saved["tried"])
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            log.warning("%s/%s: the self-tuning state in the status cannot be read (%s); tuning starts over",
                        view.namespace, view.name, exc)
            return
        memory.tuning, memory.tuning_inputs, memory.tuning_tried = tuning, inputs, tried
        # the Events for this state were posted by whoever chose it
        memory.notices.set("slo", tuning.met)
        memory.notices.set("lead-only", any(c.lead_only and c.point == (tuning.chosen, tuning.chosen_utilisation)
                                            for c in tuning.candidates))
        self._note_tuning((view.namespace, view.name), memory, tuning)

    def _replay_due(self, now: float, errors: list[str]) -> None:
        """Run the self-tuning replays queued by this tick's plans, least recently tuned first, after the plans and
        only in what the fits left of the fitting budget (fits come first). A tick's first replay needs nothing
        more (so a tuning budget shorter than one replay still tunes one Deployment a tick); another starts only if
        it should end within the tuning budget, counted from the end of the plans, by the replays' running mean
        duration. The rest wait for a later tick."""
        deadline = min(self._fit_deadline, self._tune_deadline)
        ran = 0
        for job in sorted(self._replays, key=lambda j: self._memory[j.key].tuning_tried):
            memory = self._memory.get(job.key)
            history = memory.history if memory is not None else None
            keeper = None if memory is None else memory.keeper
            if memory is None or history is None or len(history) < 2 or keeper is None or keeper.model is None:
                continue  # no model yet: it is fitted (this or a later tick) before it is tuned
            # the first replay of a tick needs only what the fits left; the next ones must also end in time
            if (time.perf_counter() > self._fit_deadline
                    or (ran and time.perf_counter() + self._replay_seconds > deadline)):
                break
            ran += 1
            started = time.perf_counter()
            last = memory.tuning
            # the days replayed before are pooled with this one while the objective and sizing stay the same
            previous = last if last is not None and job.inputs == memory.tuning_inputs else None
            wait, target = job.inputs[0], job.inputs[1]
            # what ran during the day about to be replayed: the error budget counts its replay as lived
            running = (
                (previous.chosen, previous.chosen_utilisation) if previous is not None and previous.chosen is not None
                else (job.policy.warm_pool_level, job.policy.reactive_utilisation))
            try:
                result = tune(
                    history.slice(0, len(history) - 1), job.policy, job.cold, partial(make_chain, job.profile.model),
                    quantiles=job.profile.tune_quantiles, utilisations=job.profile.tune_utilisations,
                    slo_wait_seconds=wait, slo_attainment=target, gpus_per_replica=job.gpus_per_replica,
                    warmup_seconds=job.profile.history_seconds, previous=previous, running=running,
                )
                took = time.perf_counter() - started
                self._replay_seconds = took if not self._replay_seconds else 0.8 * self._replay_seconds + 0.2 * took
            except Exception as exc:  # a replay bug must not stop the fleet: keep the last operating point
                self.metrics.errors.labels("tuning").inc()
                errors.append(f"{job.key[0]}/{job.key[1]}: self-tuning failed ({type(exc).__name__}: {exc}); "
                              "keeping the last operating point")
                memory.tuning_tried = now
                continue
            memory.tuning_tried, memory.tuning_inputs = now, job.inputs
            if result.chosen is not None or previous is None or previous.chosen is None:
                memory.tuning = result
            self._note_tuning(job.key, memory, result)
        self._replays = []

    def _note_tuning(self, key: Key, memory: _Memory, result: Tuning) -> None:
        """Export a replay's outcome and queue an Event when the objective becomes unreachable (or reachable
        again): one per transition, not per replay."""
        if result.chosen is None:
            return
        chosen = next(c for c in result.candidates if c.point == (result.chosen, result.chosen_utilisation))
        self.metrics.tuned_quantile.labels(*key).set(result.chosen)
        self.metrics.tuned_utilisation.labels(*key).set(result.chosen_utilisation)
        self.metrics.slo_met.labels(*key).set(1 if result.met else 0)
        self.metrics.replay_attainment.labels(*key).set(chosen.slo_attainment)
        # Told by the next applied tick, once per transition (reachable is assumed before anything was told). Where
        # the forecast's bands buy nothing, the controller runs as the HPA started early: said once, and once more
        # when the forecast earns its place again.
        memory.tuning_state = (result.met, chosen.lead_only, result.reason)

    def _conclude(self, plan: _Plan, decision: ScalingDecision, now: float, write: bool,
                  errors: list[str], loads: Mapping[Key, float] | None = None) -> WorkloadOutcome:
        """Second pass: apply ``decision`` (the plan after the money stage) and export it."""
        view, spec = plan.view, plan.spec
        memory = self._memory[(view.namespace, view.name)]
        if write and memory.tuning_state is not None:
            met, lead_only, why = memory.tuning_state
            kind: EventType = "Normal" if met else "Warning"
            reason = "SLOReachable" if met else "SLOUnreachable"
            memory.notices.tell("slo", met, partial(self._event, view, kind, reason, why, now, errors), quiet=True)
            reason = "ForecastAddsOnlyLead" if lead_only else "ForecastInUse"
            memory.notices.tell("lead-only", lead_only, partial(self._event, view, "Normal", reason, why, now, errors),
                                quiet=False)
        decision, guard = self._guard_rollout(view, spec, decision, now, write, errors)
        marks = None
        if write or self.dry_run:
            marks = self._marks(view, spec, decision, loads, now, write, errors, guard)
        if write and marks is not None and decision.desired_replicas < view.replicas and not spec.advisory:
            decision, marks = self._confirm_marks(view, decision, marks, now, errors)
        else:
            memory.marks_waiting_since = None
        actions = self._apply(view, spec, decision, plan.summary, plan.blocked, now, write, errors, marks)
        self._export((view.namespace, view.name), view, decision, plan.summary, plan.demand, spec)
        self._export_capacity((view.namespace, view.name), spec, plan.capacity)
        return WorkloadOutcome(
            view.namespace, view.name, view.replicas, view.ready_replicas, str(spec.mode), decision, plan.summary,
            actions=tuple(actions), demand_source=self._memory[(view.namespace, view.name)].demand_source,
            scale_down_marks=marks if marks is not None and not marks.empty else None,
        )

    def _guard_rollout(
        self, view: WorkloadView, spec: WorkloadSpec, decision: ScalingDecision, now: float, write: bool,
        errors: list[str],
    ) -> tuple[ScalingDecision, RolloutGuard | None]:
        """Hold a scale-down while more than one ReplicaSet of the Deployment has pods (a rollout), from a pod
        listing of this tick (``autoscaler.domain.scaledown.guard_scale_down``); a scale-up is never held.

        One Event per transition (not per tick): ``ScaleDownHeld`` when a rollout first holds a scale-down,
        ``ScaleDownDuringRollout`` (Warning) when a rollout that is not finishing no longer holds it; the state
        resets once a listing shows one ReplicaSet again. When the pods cannot be listed nothing is held (the
        marks path says so, and the scale-down goes ahead unmarked, as without this check).
        """
        memory = self._memory[(view.namespace, view.name)]
        guard = None
        if (write or self.dry_run) and not spec.advisory and decision.desired_replicas < view.replicas and (
                memory.startups_checked == now or self._list_pods(view, memory, now, errors)):
            guard = guard_scale_down(view.name, memory.startups.pods, view.replicas, decision.desired_replicas, now,
                                     view.rollout_stuck)
        if guard is None:
            if memory.startups_checked == now and rollout_of(view.name, memory.startups.pods) is None:
                memory.notices.forget("rollout")
            return decision, None
        if write and guard.held:
            memory.notices.tell("rollout", "held", partial(
                self._event, view, "Normal", "ScaleDownHeld", guard.message, now, errors))
        elif write and memory.notices.tell("rollout", "stuck", partial(
                self._event, view, "Warning", "ScaleDownDuringRollout", guard.message, now, errors)):
            log.warning("%s/%s: %s", view.namespace, view.name, guard.message)
        return replace(decision, desired_replicas=guard.step.replicas, steps=(*decision.steps, guard.step)), guard

    def _marks(self, view: WorkloadView, spec: WorkloadSpec, decision: ScalingDecision,
               loads: Mapping[Key, float] | None, now: float, write: bool, errors: list[str],
               guard: RolloutGuard | None = None) -> ScaleDownMarks | None:
        """Which pods get (or lose) a ``pod-deletion-cost`` mark; written here unless ``write`` is False.

        A scale-down marks the idlest pods *before* the scale write, from a pod list of this tick (per ReplicaSet
        when it goes ahead during a rollout that is not finishing); any other tick clears marks of ours once the
        last scale-down landed, or at once when it holds a scale-down for a rollout
        (``autoscaler.domain.scaledown``). An advisory Deployment's marks are cleared by ``_sweep_marks``. A failed
        patch is counted (``pod_mark``) and reported; whether the scale waits for it is ``_confirm_marks``'s call.
        """
        memory = self._memory[(view.namespace, view.name)]
        if spec.advisory:
            return None
        desired = decision.desired_replicas
        if desired < view.replicas:
            if loads is None and not memory.marks_seen:  # nothing to mark from, no mark of ours known: no pod read
                why = "the query failed" if isinstance(self.source, PodLoadSource) else "no per-pod query"
                return ScaleDownMarks(note=f"in-flight requests per pod unknown ({why}): no pod marked, the "
                                           "ReplicaSet's default order applies", unmarked=NO_POD_LOADS)
            if memory.startups_checked != now and not self._list_pods(view, memory, now, errors):
                return ScaleDownMarks(note="pods could not be listed: no pod marked", unmarked=PODS_UNREAD)
            pods = memory.startups.pods
            mine = None if loads is None else {pod: v for (ns, pod), v in loads.items() if ns == view.namespace}
            marks = plan_marks(view.name, pods, view.replicas - desired, mine, now,
                               per_replicaset=guard is not None and not guard.held)
        elif memory.marks_seen:
            scaling_up = desired > view.replicas
            marks = plan_clear(view.name, memory.startups.pods, view.replicas, now, scaling_up=scaling_up,
                               held=guard is not None and guard.held)
        else:
            return None
        if write:
            for pod, patch in marks.patches.items():
                try:
                    self.cluster.patch_pod_annotations(view.namespace, pod, patch, label_patch(patch))
                except KubeError as exc:
                    self.metrics.errors.labels("pod_mark").inc()
                    errors.append(f"{view.namespace}/{view.name}: marking pod {pod} for the scale-down failed: {exc}")
                else:
                    memory.marks_seen = True  # list the pods next tick: clear the marks once the scale-down landed
        return marks

    def _confirm_marks(
        self, view: WorkloadView, decision: ScalingDecision, marks: ScaleDownMarks, now: float, errors: list[str],
    ) -> tuple[ScalingDecision, ScaleDownMarks]:
        """Scale only once a read shows the marks in place: the Deployment's pods are listed again after the
        patches (unless nothing was written: this tick's listing already shows them), and the scale-down waits a
        tick for a mark the read does not show, for at most ``MARK_CONFIRM_SECONDS``; then it goes ahead without
        relying on the marks, and says so (``autoscaler.domain.scaledown.check_marks``)."""
        memory = self._memory[(view.namespace, view.name)]
        if not marks.marks:
            memory.marks_waiting_since = None
            return decision, marks
        read_ok = not marks.patches or self._list_pods(view, memory, now, errors)
        pods = memory.startups.pods if read_ok else ()
        check = check_marks(marks, pods, view.replicas, decision.desired_replicas, memory.marks_waiting_since, now)
        if not check.missing:
            memory.marks_waiting_since = None
            return decision, marks
        if memory.marks_waiting_since is None:
            memory.marks_waiting_since = now
        assert check.step is not None
        decision = replace(decision, desired_replicas=check.step.replicas, steps=(*decision.steps, check.step))
        if check.hold:
            return decision, replace(marks, note=check.step.detail)
        return decision, replace(marks, note=check.step.detail, unmarked=MARKS_UNCONFIRMED)

    @staticmethod
    def _forecast_summary(forecast: Forecast | None, profile: ForecastProfile, now: float) -> dict[str, Any] | None:
        """The forecast at the profile's horizon: the numbers a person checks first."""
        if forecast is None:
            return None
        target = now + profile.horizon_seconds
        i = int(np.clip(math.ceil((target - forecast.start) / forecast.step_seconds) - 1, 0, forecast.horizon - 1))
        return {
            "model": forecast.model,
            "fallbacks": list(forecast.fallbacks),
            "at": int(forecast.start + (i + 1) * forecast.step_seconds),
            "horizon_seconds": profile.horizon_seconds,
            "mean": _finite(float(forecast.mean[i])),
            "bands": {f"p{k}": _finite(float(v[i])) for k, v in sorted(forecast.quantiles.items())},
        }

    @staticmethod
    def _track(memory: _Memory, summary: dict[str, Any] | None, demand: float | None, now: float) -> None:
        if memory.track and now - memory.track[-1]["t"] < TRACK_EVERY_SECONDS:
            return
        entry: dict[str, Any] = {"t": int(now), "actual": None if demand is None else _finite(demand)}
        if summary is not None:
            bands = [v for v in summary["bands"].values() if v is not None]
            entry.update(at=summary["at"], mean=summary["mean"], upper=max(bands, default=None))
        memory.track = [*memory.track, entry][-TRACK_LENGTH:]

    # ------------------------------------------------------------------ apply

    def _event(
        self, view: WorkloadView, kind: EventType, reason: str, message: str, now: float, errors: list[str]
    ) -> bool:
        """Post an Event; True when it landed (a failure is counted and reported, and the caller retries)."""
        try:
            self.cluster.post_event(view.namespace, view.name, view.uid, kind, reason, message, utc(now))
        except KubeError as exc:
            self.metrics.errors.labels("kube_write").inc()
            errors.append(f"{view.namespace}/{view.name}: posting Event {reason} failed: {exc}")
            return False
        return True

    def _apply(
        self, view: WorkloadView, spec: WorkloadSpec, decision: ScalingDecision, summary: dict[str, Any] | None,
        blocked: int, now: float, write: bool, errors: list[str], marks: ScaleDownMarks | None = None,
    ) -> list[str]:
        memory = self._memory[(view.namespace, view.name)]
        desired = decision.desired_replicas
        actions: list[str] = []
        if spec.advisory:
            outcome = "advisory"
        else:
            outcome = "up" if desired > view.replicas else "down" if desired < view.replicas else "hold"
        self.metrics.decisions.labels(view.namespace, view.name, outcome).inc()
        verb = "" if write else "would "
        if marks is not None:
            actions.extend(f"{verb}mark pod {m.pod} {m.cost} ({m.why})" for m in marks.marks)
            actions.extend(f"{verb}clear the mark of pod {pod}" for pod in marks.clear)
        if not write:
            if outcome in ("up", "down"):
                actions.append(f"would scale {view.replicas} -> {desired}")
            return actions
        if blocked:
            memory.notices.tell("gpus", True, partial(
                self._event, view, "Warning", "GPUsUnavailable",
                f"{blocked} pod(s) Pending unschedulable for longer than a node start-up; scale-up held at "
                f"{view.replicas}", now, errors,
            ))
        else:
            memory.notices.forget("gpus")
        if outcome in ("up", "down"):
            try:
                changed = self.cluster.scale(view.namespace, view.name, desired)
            except KubeError as exc:
                self.metrics.errors.labels("kube_write").inc()
                errors.append(f"{view.namespace}/{view.name}: scaling to {desired} failed: {exc}")
            else:
                if changed:
                    actions.append(f"scaled {view.replicas} -> {desired}")
                    why = _deciding_step(decision)
                    chosen = ""
                    if outcome == "down":
                        chosen = self._scaled_down(view, desired, marks, now)
                    message = f"replicas {view.replicas} -> {desired} ({why.name}: {why.detail}){chosen}"
                    self._event(view, "Normal", "ScaledUp" if outcome == "up" else "ScaledDown", message, now, errors)
                    log.info("%s/%s: %s", view.namespace, view.name, message)  # a decision, logged when it acts
                else:  # someone set it between our list and our write: nothing happened, nothing to announce
                    actions.append(f"already at {desired}")
        status = {
            "mode": str(spec.mode),
            "desiredReplicas": desired,
            "currentReplicas": view.replicas,
            "readyReplicas": view.ready_replicas,
            "leadSeconds": _finite(decision.lead_seconds),
            "warmPool": {"replicas": decision.warm_pool_replicas, "as": decision.warm_pool_as},
            "forecast": summary,
            # Where the current demand came from: "full", or the fallback and why (null: the query does not say).
            "demandSource": memory.demand_source,
            "demandDegraded": _degraded(memory.demand_source),
            # What the demand, forecast, track and capacity are counted in: requests (/s) or tokens (/s).
            "demandUnit": spec.demand_unit.value,
            "tokenWeights": (None if spec.demand_unit is DemandUnit.REQUESTS
                             else {"input": memory.demand_key[1], "output": memory.demand_key[2]}
                             if memory.demand_key is not None else None),
            "steps": [s.to_dict() for s in decision.steps],
            "track": memory.track,
            # Requests/s per replica planned with, where it came from (annotation, learned; null: not learned yet, the
            # replicas held) and the learned estimate with its evidence (also beside an annotation, for comparison).
            "capacity": self._capacity_status(spec, memory),
            # The self-tuned operating point: the candidates replayed, their GPU-hours and attainment, the choice.
            # With the objective and sizing it was made for and when it ran, a restarted controller continues it.
            "tuning": ({**memory.tuning.to_dict(), "inputs": list(memory.tuning_inputs or ()),
                        "tried": memory.tuning_tried} if memory.tuning is not None else None),
            # The last scale-down applied: the pods marked for removal, or why the marks did not choose them.
            "scaleDown": memory.last_scale_down,
        }
        # Written when the decision changes (replica counts, mode, warm pool, which rules set which count) and
        # otherwise every
        # STATUS_REFRESH_SECONDS: the forecast's numbers move every bin, and a PATCH per Deployment per
        # tick would be a thousand writes every 30 s on a large fleet for nothing anyone acts on.
        decided = {k: status[k] for k in ("mode", "desiredReplicas", "currentReplicas", "readyReplicas", "warmPool",
                                          "demandSource", "tuning", "capacity", "demandUnit", "tokenWeights",
                                          "scaleDown")}
        decided["trail"] = [(step.name, step.replicas) for step in decision.steps]
        # Not before the status it left was read (a failed list, reported): this one would replace it, self-tuning days
        # and all.
        due = decided != memory.status_written or now - memory.status_written_at >= STATUS_REFRESH_SECONDS
        if due and memory.status_read:
            try:
                result = self.cluster.write_status(view.namespace, view.name, view.uid,
                                                   {**status, "time": utc(now).isoformat()}, memory.status_object)
            except KubeError as exc:
                self.metrics.errors.labels("kube_write").inc()
                errors.append(f"{view.namespace}/{view.name}: writing status failed: {exc}")
            else:
                memory.status_object, memory.status_copy = result.stored, None  # newer than any copy left to make
                memory.status_written, memory.status_written_at = decided, now
                if result.written:
                    actions.append("status written")
        return actions

    def _scaled_down(self, view: WorkloadView, desired: int, marks: ScaleDownMarks | None, now: float) -> str:
        """Record how the pods of a scale-down just applied were chosen (the status's ``scaleDown``), count and log
        one the marks did not all choose (``scale_down_unmarked_total{reason}``), and return the ``ScaledDown``
        Event's account of it."""
        memory = self._memory[(view.namespace, view.name)]
        marked = [] if marks is None else [{"pod": m.pod, "cost": m.cost, "why": m.why} for m in marks.marks]
        reason = None if marks is None else marks.unmarked
        note = None if marks is None else marks.note
        memory.last_scale_down = {"at": utc(now).isoformat(), "from": view.replicas, "to": desired,
                                  "marked": marked, "unmarked": reason, "note": note}
        text = ""
        if marked and reason is None:
            return "; idlest pods marked for removal: " + ", ".join(f"{m['pod']} ({m['why']})" for m in marked)
        if marked:
            text = "; pods marked for removal: " + ", ".join(f"{m['pod']} ({m['why']})" for m in marked)
        if reason is not None:
            self.metrics.scale_down_unmarked.labels(view.namespace, view.name, reason).inc()
            log.warning("%s/%s: scale-down %d -> %d not (fully) steered by the marks (%s): %s", view.namespace,
                        view.name, view.replicas, desired, reason, note)
            text += f"; the marks do not choose {'all ' if marked else ''}the pods removed ({reason}): {note}"
        elif not marked:
            text = f"; no pod marked: {note}" if note else "; no pod marked"
        return text

    def _export(
        self, key: Key, view: WorkloadView, decision: ScalingDecision, summary: dict[str, Any] | None,
        demand: float | None, spec: WorkloadSpec,
    ) -> None:
        m = self.metrics
        m.desired.labels(*key).set(decision.desired_replicas)
        m.current.labels(*key).set(view.replicas)
        m.ready.labels(*key).set(view.ready_replicas)
        m.lead.labels(*key).set(decision.lead_seconds)
        m.warm_pool.labels(*key).set(decision.warm_pool_replicas)
        # Without a value the series is removed, not left at its last value: a stale demand or forecast
        # during an outage would look like live data on a dashboard.
        # Removal is by exact labels (this Deployment's bands exported last tick), never by scanning the
        # metric: a scan per Deployment per tick is quadratic in the fleet (18 s a tick at 1,000).
        if demand is not None:
            m.demand.labels(*key).set(demand)
            m.demand_degraded.labels(*key).set(1 if _degraded(self._memory[key].demand_source) else 0)
        else:
            for gauge in (m.demand, m.demand_degraded):
                with contextlib.suppress(KeyError):
                    gauge.remove(*key)
        values: dict[str, float] = {}
        if summary is not None:
            if summary["mean"] is not None:
                values["mean"] = summary["mean"]
            values.update({band: v for band, v in summary["bands"].items() if v is not None})
        memory = self._memory[key]
        unit = spec.demand_unit.value
        if memory.exported_unit not in (None, unit):
            with contextlib.suppress(KeyError):
                m.demand_unit.remove(*key, memory.exported_unit)
        m.demand_unit.labels(*key, unit).set(1)
        memory.exported_unit = unit
        for band in memory.exported_bands - values.keys():
            with contextlib.suppress(KeyError):
                m.forecast.remove(*key, band)
        for band, value in values.items():
            m.forecast.labels(*key, band).set(value)
        memory.exported_bands = frozenset(values)

    # ------------------------------------------------------------------ learned capacity

    @staticmethod
    def _capacity_of(spec: WorkloadSpec, memory: _Memory) -> float | None:
        """Requests/s (tokens/s for ``demand-unit: tokens``) per replica to plan with: the annotation's, else the
        learned estimate once it has enough evidence, else None (not learned yet: the replicas are held). Capacity
        is learned in requests/s only: a Deployment on tokens needs the annotation."""
        if spec.capacity_per_replica is not None:
            return spec.capacity_per_replica
        if spec.demand_unit is not DemandUnit.REQUESTS:
            return None
        return None if memory.capacity is None else memory.capacity.estimate

    def _capacity_reason(self, memory: _Memory, spec: WorkloadSpec | None = None) -> str:
        """Why there is no learned capacity to plan with (one line)."""
        if spec is not None and spec.demand_unit is DemandUnit.TOKENS:
            return ("capacity is learned in requests/s only, and this Deployment is sized on tokens (demand-unit: "
                    "tokens): annotate capacity-per-replica with the tokens/s one replica serves")
        if memory.capacity is not None:
            return memory.capacity.reason
        if memory.capacity_error is not None:
            return f"its evidence could not be read ({memory.capacity_error})"
        if not self.learn_capacity:
            return "this controller does not learn capacities; annotate capacity-per-replica"
        return "no estimate yet (the evidence is read once metrics are)"

    def _learn_capacity(
        self, cfg: Config, valid: list[tuple[WorkloadView, WorkloadSpec, ForecastProfile]], now: int, errors: list[str]
    ) -> None:
        """Re-estimate the capacity of the Deployments due (never estimated, a day ago, or for another latency
        objective than theirs now: within ``CAPACITY_RETRY_SECONDS`` of the change), annotated or not.

        One fleet query per evidence series (``autoscaler.history.read_capacity_inputs``, the ``capacity``
        command's read) over the last ``CAPACITY_HISTORY_SECONDS`` (at most ``loop.history``); each Deployment
        judged against its own latency objective (``slo-wait``, else its profile's). A failed read is counted
        (``capacity_estimate``) and reported; the last estimates stand and the read is retried in
        ``CAPACITY_RETRY_SECONDS``.
        """
        if not self.learn_capacity:
            return

        def is_due(memory: _Memory, wait: float) -> bool:
            age = now - memory.capacity_checked
            changed = memory.capacity_wait is not None and memory.capacity_wait != wait
            return age >= CAPACITY_EVERY_SECONDS or (changed and age >= CAPACITY_RETRY_SECONDS)

        due = [(v, s, p) for v, s, p in valid if s.demand_unit is DemandUnit.REQUESTS  # learned in requests/s only
               and is_due(self._memory[(v.namespace, v.name)], _objective(s, p)[0])]
        if not due:
            return
        # Whole namespaces (one fleet query covers a namespace), stalest first, taken until CAPACITY_BATCH Deployments
        # are reached: the evidence of a thousand Deployments at once would hold ~400 MB of series in memory.
        due.sort(key=lambda d: self._memory[(d[0].namespace, d[0].name)].capacity_checked)
        per_namespace: dict[str, int] = {}
        for view, _, _ in due:
            per_namespace[view.namespace] = per_namespace.get(view.namespace, 0) + 1
        namespaces: set[str] = set()
        taken = 0
        for view, _, _ in due:
            if view.namespace in namespaces:
                continue
            if taken >= CAPACITY_BATCH:
                break
            namespaces.add(view.namespace)
            taken += per_namespace[view.namespace]
        due = [d for d in due if d[0].namespace in namespaces]
        step = cfg.loop.step_seconds
        start, end = history_window(now, step, min(CAPACITY_HISTORY_SECONDS, cfg.loop.history_seconds))
        if start >= end:
            return
        try:
            answer = read_capacity_inputs(self.source, cfg.prometheus, namespaces, start, end, step)
        except PrometheusError as exc:
            self.metrics.errors.labels("capacity_estimate").inc()
            text = " ".join(str(exc).split())
            errors.append(f"reading the capacity evidence failed (the last estimates stand; retried in "
                          f"{CAPACITY_RETRY_SECONDS // 60}m): {text}")
            for view, _, _ in due:
                memory = self._memory[(view.namespace, view.name)]
                memory.capacity_checked = now - CAPACITY_EVERY_SECONDS + CAPACITY_RETRY_SECONDS
                memory.capacity_error = text
            return
        for view, spec, profile in due:
            key = (view.namespace, view.name)
            memory = self._memory[key]
            wait = _objective(spec, profile)[0]
            inputs = answer.get(key) or CapacityInputs.empty(start, step, (end - start) // step)
            memory.capacity = estimate_capacity(inputs, EvidenceRules(slo_wait_seconds=wait))
            memory.capacity_at = memory.capacity_checked = now
            memory.capacity_error, memory.capacity_wait = None, wait

    def _report_capacity(
        self, valid: list[tuple[WorkloadView, WorkloadSpec, ForecastProfile]], now: float, write: bool,
        errors: list[str],
    ) -> None:
        """For a Deployment with capacity auto: a Warning Event when it is held for want of a learned capacity, a
        Normal one when it has one; once per transition (an Event counts once it landed), not per tick."""
        for view, spec, _ in valid:
            memory = self._memory[(view.namespace, view.name)]
            if spec.capacity_per_replica is not None:
                memory.notices.forget("capacity")
                continue
            learned = self._capacity_of(spec, memory)
            if not write:
                continue
            if learned is not None:
                message = (f"capacity learned: {learned:.4g} req/s per replica, now planned with "
                           f"({self._capacity_reason(memory, spec)})")
                memory.notices.tell("capacity", True, partial(
                    self._event, view, "Normal", "CapacityLearned", message[:1000], now, errors))
            else:
                message = (f"capacity-per-replica is auto and not learned yet: {self._capacity_reason(memory, spec)}; "
                           f"replicas are held at {view.replicas}, never scaled on a guess, until the evidence is "
                           "enough (or annotate capacity-per-replica)")
                memory.notices.tell("capacity", False, partial(
                    self._event, view, "Warning", "CapacityNotLearned", message[:1000], now, errors))

    def _capacity_status(self, spec: WorkloadSpec, memory: _Memory) -> dict[str, Any]:
        used = self._capacity_of(spec, memory)
        learned = memory.capacity
        source = "annotation" if spec.capacity_per_replica is not None else "learned" if used is not None else None
        return {
            "perReplica": _finite(used) if used is not None else None,
            "source": source,
            "learned": None if learned is None else {**learned.to_dict(), "at": utc(memory.capacity_at).isoformat()},
            "note": None if used is not None else f"capacity not learned yet: {self._capacity_reason(memory, spec)}",
            "unit": "tokens/s" if spec.demand_unit is DemandUnit.TOKENS else "requests/s",
        }

    def _export_capacity(self, key: Key, spec: WorkloadSpec, used: float | None) -> None:
        """The capacity gauges: by source (annotation, learned), whether the Deployment is held for want of one,
        and the last estimate's evidence; a value that is gone is removed, never left standing."""
        m = self.metrics
        learned = self._memory[key].capacity
        values = {"annotation": spec.capacity_per_replica, "learned": None if learned is None else learned.estimate}
        for source, value in values.items():
            if value is not None:
                m.capacity.labels(*key, source).set(value)
            else:
                with contextlib.suppress(KeyError):
                    m.capacity.remove(*key, source)
        m.capacity_unknown.labels(*key).set(1 if used is None else 0)
        if learned is not None:
            m.capacity_saturated_bins.labels(*key).set(learned.saturated_bins)
            m.capacity_confidence.labels(*key).set(learned.confidence)
        else:
            for gauge in (m.capacity_saturated_bins, m.capacity_confidence):
                with contextlib.suppress(KeyError):
                    gauge.remove(*key)

    def _forget(self, present: set[Key]) -> None:
        for key in list(self._memory):
            if key not in present:
                del self._memory[key]
                self.metrics.forget(*key)
