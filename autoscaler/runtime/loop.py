"""The control loop: one tick = snapshot -> forecast -> plan -> money -> apply -> self-tuning replays -> statuses.

Why it is shaped this way (kopf's and Karpenter's lessons): every tick first *reads* (Deployments,
their start-up times, one fleet-wide Prometheus query), then *decides* with pure functions
(``parse_workload``, the forecaster, ``plan_replicas``), and only at the end *applies* the plan
through the ``Cluster`` port. Planning is two passes: every workload is planned on its own, then the
money stage (``autoscaler.runtime.money``) prices the whole plan, holds it under the cost ceilings (a
``cost_ceiling`` step on each decision it touches), reserves training gangs, and keeps NodePool limits,
GPU headroom and alerts in step (and places scheduled training gangs on the median forecasts of the cached
models, which the loop lends it as ``_GangForecasts``: no refit, only when such gangs exist); only then is each
decision applied. So ``--dry-run`` is the same tick
with the writes replaced by printing, and a test can drive ticks with a fake clock, a recording
cluster and a real Prometheus. The self-tuning replays due come after the writes (``tuning_schedule``): a replay
takes seconds and must not hold a scale-up back; what they choose applies from the next tick, and is in the statuses
published last (``apply._publish``).

The controller is split by concern: this module is the tick (read, plan each Deployment through the engine, the
money stage, apply); ``reads`` holds the snapshot reads and what they tell, ``tuning_schedule`` when self-tuning
replays run, ``apply`` every write of the plan, ``export`` the metrics, ``state`` what they share, ``notices`` the
once-per-transition latch.

What the loop remembers between ticks (``state.Memory``, per Deployment): the fetched history (so a
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

import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from autoscaler.adapters.kube import KubeError
from autoscaler.config.schema import Config, ForecastProfile
from autoscaler.domain.annotations import WorkloadSpec
from autoscaler.domain.coldstart import ColdStartProfile
from autoscaler.domain.contention import CONTENDED_NOTE
from autoscaler.domain.gangs import sum_points
from autoscaler.domain.money import PlannedWorkload
from autoscaler.domain.types import ScalingPolicy
from autoscaler.engine.deciding import Observed, decide
from autoscaler.engine.forecasting import ForecastKeeper, has_evidence
from autoscaler.engine.money import HeadroomMember
from autoscaler.engine.spare import held_spares
from autoscaler.ports import Cluster, PoolGpus, WorkloadView
from autoscaler.runtime.apply import PlanApplier
from autoscaler.runtime.metrics import ControllerMetrics
from autoscaler.runtime.money import MoneyOutcome, MoneyStage, PoolsRead
from autoscaler.runtime.reads import SnapshotReads
from autoscaler.runtime.replay_pool import ReplayPool
from autoscaler.runtime.state import (
    FIT_BUDGET_SHARE,
    FORECAST_ONLY_CAPACITY,
    MIN_FIT_BUDGET_SECONDS,
    TUNE_BUDGET_SHARE,
    Key,
    Memory,
    MetricsSource,
    Plan,
    Replay,
    WorkloadOutcome,
    objective,
    policy_for,
)
from autoscaler.runtime.tuning_schedule import TuningSchedule
from models.registry import make_chain
from models.types import Forecast

log = logging.getLogger(__name__)




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


class _GangForecasts:
    """``money.GangForecasts`` over one tick's plans and the loop's cached, already-fitted forecasters.

    A pool's points are the sum over its Deployments of the median forecast (the mean when a model has no
    p50) as replicas x GPUs per replica, from each model's own state, never refitted; a Deployment without a
    model counts its current replicas for the whole span. Called by the money stage only when scheduled gangs
    exist and their placements are due, because a forecast of up to ``MAX_PLACEMENT_SECONDS`` per Deployment
    is the costly part of placing.
    """

    def __init__(self, plans: Sequence[Plan], memory: Mapping[Key, Memory], metrics: ControllerMetrics,
                 errors: list[str]) -> None:
        self._plans = plans
        self._memory = memory
        self._metrics = metrics
        self._errors = errors

    def _members(self, pool: str | None) -> list[Plan]:
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


class Controller(SnapshotReads, TuningSchedule, PlanApplier):
    """Runs ticks. Holds per-Deployment memory; all I/O goes through ``cluster``, ``source`` and ``money``'s ports.
    The parts of a tick are its bases, one concern each (``SnapshotReads``, ``TuningSchedule``, ``PlanApplier`` with
    ``MetricsExport``), over the state of ``ControllerBase``; the tick, the forecast and the plan are here.

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
        self._memory: dict[Key, Memory] = {}
        # per tick; None = FIT_BUDGET_SHARE of the loop interval, at least MIN_FIT_BUDGET_SECONDS
        self.fit_budget_seconds: float | None = None
        self._fit_deadline = math.inf  # set per tick: fitting stops being started after it
        # per tick; None = TUNE_BUDGET_SHARE of the loop interval: self-tuning replays stop being started after it
        self.tune_budget_seconds: float | None = None
        self._tune_deadline = math.inf
        self._replays: list[Replay] = []  # self-tuning replays this tick's plans found due
        self._replay_seconds = 0.0  # running mean duration of one replay (0: none run yet; ``_time_replay``)
        self._acted = False  # the last tick acted: a tick that acts after one that did not takes over (``tick``)
        self.replay_pool = ReplayPool()  # the worker processes of loop.replay_workers (none by default)
        self._deferred_fits = 0
        self._swept_at = -math.inf  # when the pods with marks of ours were last listed (MARK_SWEEP_SECONDS)
        self._free_gpus: dict[str, int] = {}  # this tick's free GPUs per NodePool, less what plans claimed
        self._lent: dict[str, int] = {}  # this tick's GPUs per NodePool its spare replicas hold (engine.spare)
        self._held: dict[Key, int] = {}  # this tick's spare replicas each Deployment holds (engine.spare)
        self._pool_reads: dict[str, PoolGpus] | None = {}  # this tick's read of the NodePools' nodes (None: not read)
        self._pools_unread = ""  # why they were not read
        self._node_gpus: dict[str, int] | None = None  # this tick's GPUs in use per node read (None: none read)

    def close(self) -> None:
        """Stop what the controller started besides its ticks: the replay workers (``loop.replay_workers``)."""
        self.replay_pool.close()

    # ------------------------------------------------------------------ tick

    def tick(self, now: float, *, acting: bool = True) -> TickReport:
        """One pass over the fleet at ``now``. ``acting`` is False on a standby replica."""
        started = time.perf_counter()
        cfg = self._config()
        write = acting and not self.dry_run
        self.metrics.leader.set(1 if acting else 0)
        if acting and not self._acted:
            # A standby taking over (a lost lease, an upgrade): what the last leader told, chose and wrote is in the
            # statuses, not in this replica's memory (it wrote nothing, told nothing): read them again this tick.
            for memory in self._memory.values():
                memory.status_read = memory.tuning_read = False
        self._acted = acting
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
        # before contention: a restarted controller knows from the status which HPA it already told about
        self._read_statuses(views, write, errors)
        valid, contended = self._contend(valid, now, write, errors)
        self.metrics.workloads.labels("managed").set(len(valid))
        self.metrics.workloads.labels("invalid").set(len(views) - len(valid))
        self.metrics.workloads.labels("contended").set(len(contended))
        if write:
            advisory = {(v.namespace, v.name) for v, s, _ in valid if s.advisory}
            in_care = {(v.namespace, v.name) for v, _, _ in valid} - advisory
            listed = {(v.namespace, v.name): "its annotations are invalid" for v in views}
            listed.update(dict.fromkeys(advisory, "it is advisory (mode: advisory)"))
            listed.update(dict.fromkeys(contended, CONTENDED_NOTE))
            self._sweep_marks(cfg, in_care, listed, now, errors)
        self._forget({(v.namespace, v.name) for v in views})
        self._pool_reads, self._pools_unread = self._read_pool_gpus(cfg, valid, errors)
        # the GPUs the pools' spare replicas hold are shown free: a plan that needs one takes it back (engine.spare)
        lent: dict[str, int] = {}
        self._held = {}
        for view, spec, _ in valid:
            if spec.nodepool:
                mem = self._memory[(view.namespace, view.name)]
                held = self._held[(view.namespace, view.name)] = held_spares(view.replicas, mem.spares_planned,
                                                                             mem.spares_lent)
                lent[spec.nodepool] = lent.get(spec.nodepool, 0) + held * spec.gpus_per_replica
        self._free_gpus = {pool: read.free + lent.get(pool, 0) for pool, read in (self._pool_reads or {}).items()}
        self._lent = lent
        # GPUs in use per node of the pools read, by node name: what a scale-down's marks rank pods by
        self._node_gpus = {node: used for read in (self._pool_reads or {}).values()
                           for node, used in read.node_gpus.items()} or None

        metrics_ok = self._fetch(cfg, valid, int(now), errors)
        if metrics_ok:
            self._read_current_demand(cfg, valid, now, errors)
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
        plans = [planned[i] for i in range(len(valid))]
        self.metrics.deferred_fits.set(self._deferred_fits)
        horizon = max((p.horizon_seconds for _, _, p in valid), default=cfg.profile("default").horizon_seconds)
        money = self.money.run(
            [PlannedWorkload(p.view, p.spec, p.decision, p.blocked) for p in plans], cfg, now,
            write=write, horizon_seconds=horizon, metrics=self.metrics, errors=errors,
            gang_forecasts=_GangForecasts(plans, self._memory, self.metrics, errors),
            pools=PoolsRead(self._pool_reads, self._pools_unread, {
                f"{p.view.namespace}/{p.view.name}": self._headroom_member(p, int(now)) for p in plans}, self._lent),
        )
        decisions = [money.decisions.get(f"{p.view.namespace}/{p.view.name}", p.decision) for p in plans]
        for p, d in zip(plans, decisions, strict=True):
            mem = self._memory[(p.view.namespace, p.view.name)]
            mem.spares_lent = money.spares.get(f"{p.view.namespace}/{p.view.name}", 0)
            mem.spares_planned = d.desired_replicas - mem.spares_lent
        downs = {p.view.namespace for p, d in zip(plans, decisions, strict=True)
                 if not p.spec.advisory and d.desired_replicas < p.view.replicas}
        loads = self._pod_loads(downs, now, errors) if downs and (write or self.dry_run) else None
        # scale-downs first: a GPU a spare gives back is free for a replica another plan adds (engine.spare)
        order = sorted(range(len(plans)), key=lambda i: decisions[i].desired_replicas - plans[i].view.replicas)
        concluded = {i: self._conclude(plans[i], decisions[i], now, write, errors, loads) for i in order}
        # The self-tuning replays run last, once this tick's plans are written (a replay never delays a scale-up),
        # their choices applying from the next tick; on nodes of the size the money stage read for each Deployment's
        # NodePool, as the simulator's cluster has them. Then the statuses, with what the replays found.
        self._tune_deadline = time.perf_counter() + (  # replays get their own time, after the writes
            cfg.loop.interval_seconds * TUNE_BUDGET_SHARE if self.tune_budget_seconds is None
            else self.tune_budget_seconds)
        try:
            self._replay_due(now, errors, money.gpus_per_node)
        except Exception as exc:  # a bug in scheduling the replays must not cost the tick its statuses
            self.metrics.errors.labels("tuning").inc()
            errors.append(f"self-tuning replays not run this tick ({type(exc).__name__}: {exc})")
        outcomes.extend(self._publish(plans[i].view, concluded[i], now, write, errors) for i in range(len(plans)))
        return self._finish(now, acting, metrics_ok, tuple(outcomes), errors, started, money)

    @staticmethod
    def _headroom_member(plan: Plan, now: int) -> HeadroomMember:
        """What one plan shows its pool's node headroom (``engine.money.pools_headroom``): its forecast, node lead,
        capacity and the demand observed now. A capacity not learned yet sizes nothing: no forecast and no demand,
        so it counts as the replicas it holds (never a need derived from a guessed capacity)."""
        if plan.capacity is None:
            return HeadroomMember(None, now, plan.node_lead_seconds, 1.0, plan.spec.gpus_per_replica, math.nan,
                                  plan.view.replicas, waiting_for_node=plan.waiting_for_node, objective=plan.objective)
        return HeadroomMember(plan.forecast, now, plan.node_lead_seconds, plan.capacity, plan.spec.gpus_per_replica,
                              plan.current if plan.current is not None else math.nan, plan.view.replicas,
                              waiting_for_node=plan.waiting_for_node, objective=plan.objective)

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

    # ------------------------------------------------------------------ decide

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

    def _plan(
        self, view: WorkloadView, spec: WorkloadSpec, profile: ForecastProfile, cfg: Config, now: float,
        metrics_ok: bool, errors: list[str],
    ) -> Plan:
        """First pass: forecast and plan one workload on its own (no writes)."""
        key = (view.namespace, view.name)
        memory = self._memory[key]
        capacity = self._capacity_of(spec, memory)
        policy = policy_for(spec, profile, capacity if capacity is not None else FORECAST_ONLY_CAPACITY)
        startups = self._startups(view, now, errors)
        cold = ColdStartProfile(
            prior_seconds=spec.cold_start_seconds,
            node_prior_seconds=float(cfg.cold_start.node_startup_seconds),
            samples=startups.durations,
            percentile=float(cfg.cold_start.percentile),
            min_samples=cfg.cold_start.min_samples,
        )
        untuned = policy
        if capacity is not None:  # a replay at a guessed capacity would tune on a guess
            policy = self._tuned(view, spec, profile, policy)
        forecast = self._forecast(key, profile, policy, cold, int(now), errors) if metrics_ok else None
        if capacity is not None:
            self._queue_replay(view, spec, profile, untuned, cold, now)
        demand: float | None = None
        if metrics_ok and memory.history is not None and len(memory.history):
            last = float(memory.history.values[-1])
            demand = last if math.isfinite(last) else None
        current = memory.current_demand if metrics_ok and memory.current_demand is not None else demand
        spares = self._held.get(key, 0)  # its spare replicas are the pool's (engine.spare): it plans on its own
        observed = Observed(
            replicas=view.replicas - spares, ready=max(0, view.ready_replicas - spares), demand=current,
            gpus_per_replica=spec.gpus_per_replica,
            waiting_for_node=tuple(p.age_seconds for p in startups.not_ready if not p.scheduled),
            free_gpus=self._free_gpus.get(spec.nodepool) if spec.nodepool else None,
        )
        decided = decide(forecast, observed, policy, cold, int(now), memory.recommendations,
                         capacity_unknown=None if capacity is not None else self._capacity_reason(memory, spec))
        decision = decided.decision
        memory.recommendations = decision.recommendations
        if decided.claimed_gpus and spec.nodepool:  # the pool's next Deployment is not shown the GPUs this one takes
            self._free_gpus[spec.nodepool] -= decided.claimed_gpus
        if decided.stuck and decision.steps[-1].name == "gpus_unavailable":
            self.metrics.errors.labels("gpu_unavailable").inc()
        summary = self._forecast_summary(forecast, profile, now)
        self._track(memory, summary, demand, now)
        return Plan(view, spec, decision, summary, demand, decided.stuck, capacity, forecast, current,
                    decided.node_lead_seconds, len(observed.waiting_for_node), objective(spec, profile)[1])

    # ------------------------------------------------------------------ apply

    # ------------------------------------------------------------------ learned capacity
