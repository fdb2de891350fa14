"""The money stage of a tick: price the whole plan, hold it under the cost ceilings, and make the GPUs real.

Why a stage of its own: the planner sizes each Deployment alone, but GPUs are bought for the whole cluster.
Between planning every workload and applying the plans, ``Controller.tick`` hands all decisions to
``MoneyStage.run``, which

1. reads the GPU NodePools (``NodeCapacity``) and training gangs (``TrainingGangs``: Kueue Workloads,
   Volcano PodGroups) and turns them into pool shapes and ``Gang`` values (``autoscaler.domain``);
2. prices the plan over the horizon as Karpenter bills it, whole nodes per NodePool, and enforces the cluster
   and team ceilings by priority (``enforce_ceilings``): lower-priority replicas are cut first, never below
   ``min_replicas``, gangs are reserved whole or deferred whole, and every adjusted decision gets a
   ``cost_ceiling`` step;
3. keeps each NodePool's ``spec.limits["nvidia.com/gpu"]`` at the whole nodes the cluster ceiling buys (never
   below the GPUs its nodes already have; none on a static pool);
4. asks Karpenter for spare whole nodes *ahead* of the pod scale-up, per NodePool: the idle nodes its
   forecast-sized headroom asks for (``engine.money.pools_headroom``, the function the fleet simulator calls too:
   the pooled error of the summed forecasts of the pool's Deployments at its node lead, on the pool's nodes as the
   loop read them, ``ports.PoolNodes``, capped by the pool's GPU limit and the ceiling as billed), plus nodes for
   reserved pending gangs Kueue can admit now (``domain.money.gang_headroom``: its LocalQueue and ClusterQueue
   quota, read with ``TrainingGangs.list_kueue_queues``), for at most ``GANG_HEADROOM_LIMIT_STARTUPS`` node
   start-ups (then released, with a ``GangHeadroomExpired`` Event on the gang and a metric). Held as placeholder
   pods of one whole node each, or, where CapacityBuffers are served, as a CapacityBuffer of the pool's
   highest-priority Deployment's pods filling the same idle nodes (a gang's nodes stay placeholders). When the
   pools' nodes were not read (the read failed, the controller is confined to namespaces, the cluster port has no
   such read) no headroom is sized or lowered that tick (the gangs' nodes may still raise it), and why is told
   once (a log line; a failed read is also a tick error, counted); a GPU Deployment that names no NodePool has no
   pool to hold nodes in, also told once. Headroom nobody needs any more is removed;
5. exports the cost metrics and pushes alerts (projected breach *before* cuts, cuts hitting inference,
   GPUs unavailable) to Alertmanager, resolving each when its condition clears.

The decisions are pure and made once, by ``autoscaler.engine.money.money_step`` (over ``autoscaler.domain.money`` and
the domain modules it calls), the same step the simulator's ledger and the fleet simulator call; this stage reads
its inputs and applies its plan, all I/O through the injected ports. Without a port the stage skips what needs
it: with none at all it only prices the plan and applies the ceilings, which is what ``run --dry-run`` and the tests
without Karpenter see. A standby or a dry run reads but never writes: no limits, no headroom, no alerts.

Failure policy, as in ``autoscaler.runtime.loop``: a failed read or write is counted
(``predictive_autoscaler_errors_total{kind}``) and returned in the tick's errors, never dropped; a failed
NodePool read plans with prices from the config and writes no limits or headroom that tick; a failed
gang read reuses the gangs of the last good read (planning as if they had vanished would hand their
GPUs to others); an alert that could not be delivered is re-sent next tick (firing alerts are re-sent
every tick anyway; a failed *resolve* is kept and retried). A malformed gang or an unpriceable NodePool
is reported once (an error line and a count) and skipped.

Scheduled gangs (a ``start-after``/``deadline`` window and a ``duration``): before the ceilings, each pending
one is placed in the trough of its NodePool's inference GPU forecast (``domain.gangs.place_gangs``; the points
come from the loop through ``GangForecasts``: the median forecast of the pool's Deployments from their cached
models, up to 7 days, never a refit), with the GPUs the cluster ceiling buys in that pool as capacity. Placements
are cached and recomputed only when the scheduled gangs or their windows change, a model of the pool was refit,
or every ``PLACEMENT_REFRESH_SECONDS``; one node start-up before its start a placement is frozen. The gang's GPUs
count (ceiling and headroom) from ``planned start - node start-up`` (``domain.gangs.holds_gpus``), so its nodes
are asked for ahead like an inference replica's. A gang no start of whose window fits is placed at the lowest
peak and reported (an error line and ``errors_total{kind="gang_placement"}``, once per placement). When
writing, the planned start is written on the object (``predictive-autoscaler.io/planned-start``) and a Kueue
Workload the user created held is started once ``now`` has reached its planned start and the ceiling reserves it
whole: held by Kueue's admission gate (``kueue.x-k8s.io/admission-gated-by`` naming
``predictive-autoscaler.io/gang-scheduler``), the controller removes its name from the gate; held by
``spec.active: false``, it sets ``spec.active: true``. Volcano PodGroups have no such switch: they are
placed, reserved and annotated, but start when Volcano says (their owner may read the annotation).

Two approximations, and why (docs/ARCHITECTURE.md, "Gangs and NodePool limits"): the placement capacity is the
whole nodes the *cluster* ceiling buys in the gang's pool, with the pending gangs the ceiling defers left out
(``domain.money.unplaced_deferred``) (team ceilings and other pools' spend are left to ``enforce_ceilings`` at the
time), so "fits" is optimistic when other pools spend much of the budget. The NodePool limit is per pool while the
ceiling is cluster-wide: each pool may grow to its kept GPUs plus the *whole* remaining budget
(``nodes.ceiling_gpus``), so the limits together can exceed the ceiling; the controller's own plan stays under it,
and the limit only stops Karpenter from buying far past it.

Gang priorities: a Kueue Workload carries its value (``spec.priority``); a Volcano PodGroup ranks as Volcano ranks
it, by the value of its ``spec.priorityClassName`` when that PriorityClass exists, else the ``globalDefault``
class's value (``TrainingGangs.priority_classes``), clamped to 0..1000; our ``predictive-autoscaler.io/priority``
annotation overrides either. Departure: with neither a known class nor a global default a PodGroup is
``standard``, not Volcano's 0 (which would rank every plain PodGroup below ``batch`` inference). PriorityClasses
change rarely, so the map is read only when there are PodGroups, and at most every
``PRIORITY_CLASS_REFRESH_SECONDS`` (a new class counts from the next refresh). A failed read keeps the last good map,
is counted (``errors_total{kind="kube_read"}``) and reported, and is retried next tick; a ``403`` (the ClusterRole
lacks ``list`` on ``priorityclasses``) is a standing problem: reported once until a read succeeds, and retried only
every refresh period.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

from autoscaler.config.schema import Config, HeadroomSetting
from autoscaler.domain.annotations import PREFIX
from autoscaler.domain.cost import Ceilings, CostReport
from autoscaler.domain.gangs import (
    ACTIVATED_ANNOTATION,
    ADMISSION_GATE,
    ADMISSION_GATED_BY,
    PLANNED_START_ANNOTATION,
    Gang,
    GangError,
    parse_gang,
)
from autoscaler.domain.kueue import KueueQueues, parse_queues
from autoscaler.domain.money import (
    GangHeadroom,
    GangPlacement,
    HeadroomKind,
    HeadroomWant,
    PlannedWorkload,
    pool_shapes,
)
from autoscaler.domain.nodes import PoolShape, gpu_prices
from autoscaler.domain.types import ScalingDecision
from autoscaler.engine.headroom import PooledResiduals
from autoscaler.engine.money import (
    GANG_HEADROOM_LIMIT_STARTUPS,
    GangForecasts,
    HeadroomMember,
    MoneySnapshot,
    MoneyState,
    PoolObservation,
    PoolTerms,
    money_step,
    observe_pools,
)
from autoscaler.ports import (
    Alert,
    AlertSink,
    DeploymentHeadroom,
    HeadroomTarget,
    HeadroomView,
    NodeCapacity,
    NodePoolView,
    PoolGpus,
    PoolHeadroom,
    PriorityClasses,
    TrainingGangs,
)
from autoscaler.runtime.clock import utc
from autoscaler.runtime.metrics import ControllerMetrics
from autoscaler.runtime.notices import Notices

log = logging.getLogger(__name__)

PRIORITY_CLASS_REFRESH_SECONDS = 300  # PriorityClasses are re-read at most this often (module docstring)


# ---------------------------------------------------------------------------------------------- the stage


@dataclass(frozen=True)
class MoneyOutcome:
    """What the money stage decided and did in one tick."""

    decisions: Mapping[str, ScalingDecision]  # "namespace/name" -> decision after the ceilings
    report: CostReport
    asked: Mapping[str, float]
    breaches: Mapping[str, tuple[float, float]]
    gpus_unavailable: Mapping[str, int]
    limits: Mapping[str, int] = field(default_factory=dict)
    headroom: Mapping[str, int] = field(default_factory=dict)  # "CapacityBuffer ns/dep" / "Deployment pool" -> n
    # NodePool -> the forecast-sized idle nodes held empty (those spare replicas fill are not: ``engine.spare``)
    pool_headroom: Mapping[str, int] = field(default_factory=dict)
    alerts: tuple[str, ...] = ()
    actions: tuple[str, ...] = ()
    placements: Mapping[str, GangPlacement] = field(default_factory=dict)
    gang_headroom_blocked: Mapping[str, str] = field(default_factory=dict)  # gang -> why no nodes are held for it
    held: frozenset[str] = frozenset()  # keys of held (not yet activated) Kueue Workloads
    now: int = 0
    gpus_per_node: Mapping[str, int] = field(default_factory=dict)  # NodePool -> GPUs per node (where known)
    spares: Mapping[str, int] = field(default_factory=dict)  # "namespace/name" -> spare replicas lent (engine.spare)

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.report.to_dict(),
            "asked_by_scope": dict(sorted(self.asked.items())),
            "breaches": {s: {"asked": a, "ceiling": c} for s, (a, c) in self.breaches.items()},
            "gpus_unavailable": {k: v for k, v in sorted(self.gpus_unavailable.items()) if v},
            "nodepool_limits": dict(sorted(self.limits.items())),
            "headroom": dict(sorted(self.headroom.items())),
            "pool_headroom": dict(sorted(self.pool_headroom.items())),
            "spare_replicas": dict(sorted(self.spares.items())),
            "gang_placements": {k: p.to_dict(self.now, k in self.held) for k, p in sorted(self.placements.items())},
            "gang_headroom_blocked": dict(sorted(self.gang_headroom_blocked.items())),
            "alerts": list(self.alerts),
            "actions": list(self.actions),
        }


def _alert_id(alert: Alert) -> tuple[str, tuple[tuple[str, str], ...]]:
    return alert.name, tuple(sorted(alert.labels.items()))


def _not_found(exc: BaseException) -> bool:
    """Whether a read failed with 404 (the API group is not served: Karpenter not installed)."""
    cause = exc.__cause__
    return getattr(cause, "status", None) == 404


@dataclass(frozen=True)
class PoolsRead:
    """What the loop read of the NodePools' nodes this tick, and what each plan shows their node headroom.

    ``reads``: per NodePool a Deployment names (``ports.PoolNodes``), None when not read (``why_not`` says why);
    ``members``: per Deployment ("namespace/name") its forecast, node lead, capacity and observed demand."""

    reads: Mapping[str, PoolGpus] | None
    why_not: str
    members: Mapping[str, HeadroomMember]
    lent: Mapping[str, int] = field(default_factory=dict)  # per pool: GPUs its spare replicas hold (engine.spare)


class MoneyStage:
    """Cost ceilings, gangs, NodePool limits, headroom, cost metrics and alerts; adapters are optional.

    The ports are public attributes so ``run`` can swap them when the configuration changes; the stage's
    memory (alerts sent, problems reported, the last gangs read) survives the swap.
    """

    def __init__(
        self,
        *,
        capacity: NodeCapacity | None = None,
        training: TrainingGangs | None = None,
        alerts: AlertSink | None = None,
    ) -> None:
        self.capacity = capacity
        self.training = training
        self.alerts = alerts
        self._gangs: list[Gang] = []
        self._notices = Notices()  # standing problems and notes told once; the gangs whose expired headroom was told
        self._active: dict[tuple[str, tuple[tuple[str, str], ...]], Alert] = {}
        self._unresolved: dict[tuple[str, tuple[tuple[str, str], ...]], Alert] = {}
        self._karpenter_missing = False
        self._state = MoneyState()  # the money step's memory: placements, gang headroom clocks, ahead counts
        self._classes = PriorityClasses()  # the last good PriorityClass read
        self._classes_read_at = -math.inf  # when it was last read (or refused with 403)
        self._classes_forbidden = False  # a 403 was reported and no read has succeeded since
        self._queues: KueueQueues | None = None  # the last good read of Kueue's queues
        self._residuals: dict[str, PooledResiduals] = {}  # per NodePool: its realised forecast errors (headroom)

    # ------------------------------------------------------------------ reads

    def _once(self, message: str, kind: str, metrics: ControllerMetrics, errors: list[str]) -> None:
        """Report a standing problem (bad object, unpriceable pool) once, not every tick."""
        if self._notices.once(message, partial(metrics.errors.labels(kind).inc)):
            errors.append(message)

    def _read_pools(self, cfg: Config, metrics: ControllerMetrics, errors: list[str]) -> list[NodePoolView] | None:
        """The cluster's NodePools; None when they could not be read (then nothing is written to them)."""
        if self.capacity is None or not cfg.karpenter.enabled:
            return []
        try:
            pools = self.capacity.list_node_pools()
        except Exception as exc:
            if _not_found(exc):
                if not self._karpenter_missing:
                    log.info("karpenter.sh/v1 NodePools are not served (Karpenter not installed?): pricing from the "
                             "config only; set karpenter.enabled: false to stop looking")
                self._karpenter_missing = True
                return []
            metrics.errors.labels("kube_read").inc()
            errors.append(f"reading NodePools failed (prices from the config; no limits or headroom this tick): {exc}")
            return None
        self._karpenter_missing = False
        return pools

    def _read_gangs(self, metrics: ControllerMetrics, errors: list[str], now: int) -> list[Gang]:
        """Every parseable gang; on a failed read, the gangs of the last good read. PodGroups rank by their
        PriorityClass (Volcano's rule, module docstring)."""
        if self.training is None:
            return []
        try:
            lists = (self.training.list_kueue_workloads(), self.training.list_volcano_podgroups())
        except Exception as exc:
            metrics.errors.labels("kube_read").inc()
            errors.append(f"reading training gangs failed; planning with the {len(self._gangs)} gang(s) of the "
                          f"last good read: {exc}")
            return self._gangs
        classes = self._read_priority_classes(now, metrics, errors) if lists[1].items else PriorityClasses()
        gangs: list[Gang] = []
        for objects in lists:
            if objects.note:
                self._notices.once(objects.note, partial(log.info, "%s", objects.note))
            for obj in objects.items:
                spec = obj.get("spec")
                if objects is lists[1] and classes.global_default is not None and isinstance(spec, Mapping):
                    name = spec.get("priorityClassName")
                    if not (isinstance(name, str) and name in classes.values):  # Volcano: the default's value
                        obj = {**obj, "spec": {**spec, "priorityClassName": classes.global_default}}
                try:
                    gangs.append(parse_gang(obj, priority_classes=classes.values))
                except (GangError, ValueError) as exc:
                    self._once(f"training gang skipped: {exc}", "invalid_gang", metrics, errors)
        self._gangs = gangs
        return gangs

    def _read_queues(self, gangs: Sequence[Gang], metrics: ControllerMetrics,
                     errors: list[str]) -> KueueQueues | str | None:
        """Kueue's queues, read only while headroom is managed and a Workload is pending: ``KueueQueues``; None when
        Kueue's queues are not served (not checked); on a failed read the last good one, else the reason (no nodes
        for pending Workloads: idle nodes held on a guess cost as much as nodes that run)."""
        if self.training is None or not any(g.kind == "Workload" and not g.admitted and not g.inactive for g in gangs):
            return None
        try:
            local, cluster = self.training.list_kueue_queues()
        except Exception as exc:
            metrics.errors.labels("kube_read").inc()
            kept = "using the last good read" if self._queues is not None else "no nodes for pending Workloads"
            errors.append(f"reading Kueue LocalQueues/ClusterQueues failed ({kept}; retried next tick): {exc}")
            return self._queues if self._queues is not None else f"Kueue's queues could not be read: {exc}"
        if not (local.installed and cluster.installed):
            note = local.note or cluster.note or "Kueue's queues are not served"
            self._notices.once(note, partial(log.info, "%s; pending Workloads are not checked against their queues",
                                             note))
            return None
        queues, problems = parse_queues(local.items, cluster.items)
        for problem in problems:
            self._once(f"Kueue queue skipped: {problem}", "invalid_gang", metrics, errors)
        self._queues = queues
        return queues

    def _report_expired(self, gh: GangHeadroom, now: int, metrics: ControllerMetrics, errors: list[str]) -> list[str]:
        """Once per gang: a Warning Event on it, the metric and a log line when its held nodes were released."""
        actions: list[str] = []
        for g in gh.expired:
            if not self._notices.once(("expired", g.key), lambda: None):
                continue
            why = gh.blocked.get(g.key, "")
            message = f"No more nodes held ahead for this gang ({g.gpus} GPU(s)): {why}"
            log.warning("%s: %s", g.key, message)
            metrics.gang_headroom_expired.labels(g.team).inc()
            actions.append(f"{g.key}: headroom released ({why})")
            if self.training is None:
                continue
            try:
                self.training.post_gang_event(g.kind, g.namespace, g.name, g.uid, "Warning", "GangHeadroomExpired",
                                              message, utc(now))
            except Exception as exc:
                metrics.errors.labels("kube_write").inc()
                errors.append(f"{g.key}: the GangHeadroomExpired Event could not be written: {exc}")
        return actions

    def _read_priority_classes(self, now: int, metrics: ControllerMetrics, errors: list[str]) -> PriorityClasses:
        """The cached PriorityClasses, re-read when due; on a failed read the last good map (module docstring)."""
        if self.training is None or now - self._classes_read_at < PRIORITY_CLASS_REFRESH_SECONDS:
            return self._classes
        try:
            classes = self.training.priority_classes()
        except Exception as exc:
            kept = f"ranking PodGroups with the {len(self._classes.values)} PriorityClass(es) of the last good read"
            if getattr(exc.__cause__, "status", None) == 403:
                self._classes_read_at = now  # standing: retried every refresh period, reported once
                if not self._classes_forbidden:
                    self._classes_forbidden = True
                    metrics.errors.labels("kube_read").inc()
                    errors.append(f"reading PriorityClasses is forbidden (grant list on scheduling.k8s.io "
                                  f"priorityclasses, deploy/rbac.yaml); {kept}; reported once: {exc}")
                return self._classes
            metrics.errors.labels("kube_read").inc()
            errors.append(f"reading PriorityClasses failed (retried next tick); {kept}: {exc}")
            return self._classes
        self._classes, self._classes_read_at, self._classes_forbidden = classes, now, False
        return classes

    def _observe(self, planned: Sequence[PlannedWorkload], pools: PoolsRead | None, shapes: Mapping[str, PoolShape],
                 views: Sequence[NodePoolView], cfg: Config) -> list[PoolObservation] | None:
        """The NodePools observed for forecast-sized headroom and spare replicas (``engine.money.observe_pools``); None
        when some pool has Deployments but its nodes were not read (told once: headroom is then neither sized nor
        lowered, never sized as if the pools were empty, and no spares are lent). A GPU Deployment that names no
        NodePool has no pool to hold nodes in: told once (a log line). Advisory Deployments are left out (their
        replicas are never ours to scale)."""
        wanted: dict[str, list[PlannedWorkload]] = {}
        for p in planned:
            if p.spec.gpus_per_replica <= 0 or p.spec.advisory:
                continue  # an advisory Deployment is never scaled by us: no nodes are held ahead of its forecast
            if not p.spec.nodepool:  # a choice, not a fault: told once in the log, not as a tick error
                note = (f"{p.key} names no NodePool ({PREFIX}nodepool): no node headroom is sized for it, and no "
                        "spare replicas are lent to it")
                self._notices.once(note, partial(log.info, "%s", note))
                continue
            wanted.setdefault(p.spec.nodepool, []).append(p)
        if not wanted:
            return []
        if pools is None or pools.reads is None:
            why = "no read of the NodePools' nodes" if pools is None else pools.why_not
            self._notices.once(f"node headroom: {why}", partial(log.warning, "node headroom is neither sized nor "
                                                                "lowered, and no spare replicas are lent, while %s",
                                                                why))
            return None
        members = {pool: [replace(pools.members[p.key], key=p.key) for p in ps if p.key in pools.members]
                   for pool, ps in wanted.items()}
        by_view = {v.name: v for v in views}
        terms = {}
        for pool in members:
            view, shape = by_view.get(pool), shapes.get(pool)
            if view is None or shape is None or view.static:  # not served, or Karpenter adds no node to it
                continue
            limit = None if view.gpu_limit is None else view.gpu_limit // shape.gpus_per_node
            terms[pool] = PoolTerms(shape.gpus_per_node, shape.node_hour, limit)
            self._residuals.setdefault(pool, PooledResiduals())
        return observe_pools(pools.reads, members, terms, cfg.ceilings.cluster,
                             quantile=cfg.karpenter.headroom_quantile, lent=pools.lent)

    # ------------------------------------------------------------------ the tick

    def run(
        self,
        planned: Sequence[PlannedWorkload],
        cfg: Config,
        now: float,
        *,
        write: bool,
        horizon_seconds: int,
        metrics: ControllerMetrics,
        errors: list[str],
        gang_forecasts: GangForecasts | None = None,
        pools: PoolsRead | None = None,
    ) -> MoneyOutcome:
        """Read, decide with ``engine.money.money_step``, then (when ``write``) set limits, headroom, gangs and alerts.

        ``gang_forecasts`` gives the inference GPU forecasts scheduled gangs are placed on; without it they
        are placed as if the pools had no inference (at the earliest start of their window). ``pools``: the nodes of
        the NodePools the Deployments name and what each plan shows node headroom (``PoolsRead``); without it no
        node headroom is sized or changed."""
        t = int(now)
        views = self._read_pools(cfg, metrics, errors)
        pools_known = views is not None
        wanted_pools = {p.spec.nodepool for p in planned if p.spec.nodepool}
        shapes, problems = pool_shapes(views or [], cfg.pricing, wanted_pools)
        for problem in problems:
            self._once(f"NodePool not priced (default GPU-hour price used): {problem}", "nodepool", metrics, errors)
        prices = gpu_prices(shapes.values(), cfg.pricing)
        all_gangs = self._read_gangs(metrics, errors, t)
        node_startup = float(cfg.cold_start.node_startup_seconds)

        setting: HeadroomSetting = cfg.karpenter.headroom
        kind: HeadroomKind | None = None
        if self.capacity is not None and cfg.karpenter.enabled and pools_known and setting != "off":
            try:
                kind = self.capacity.headroom_mode() if setting == "auto" else setting
            except Exception as exc:
                metrics.errors.labels("kube_read").inc()
                errors.append(f"CapacityBuffer discovery failed; no headroom changes this tick: {exc}")
        queues = self._read_queues(all_gangs, metrics, errors) if kind is not None else None
        spares = cfg.karpenter.spare_replicas and cfg.karpenter.enabled and pools_known
        observations = self._observe(planned, pools, shapes, views or [], cfg) if kind or spares else ()
        snapshot = MoneySnapshot(
            now=t, horizon_seconds=horizon_seconds, node_startup_seconds=node_startup, ceilings=cfg.ceilings,
            prices=prices, planned=tuple(planned), gangs=tuple(all_gangs), pools=views, shapes=shapes,
            headroom=kind, queues=queues, pool_observations=observations, residuals=self._residuals,
            gang_forecasts=gang_forecasts,
            track_gang_headroom=write,
            gang_headroom_limit_seconds=GANG_HEADROOM_LIMIT_STARTUPS * max(node_startup, 60.0),
            spare_replicas=spares,
        )
        plan, state = money_step(snapshot, self._state)
        for key in set(self._state.gang_held_since) - set(state.gang_held_since):
            self._notices.forget(("expired", key))  # it started, went away or cannot be admitted: told afresh
        self._state = state
        for problem in plan.placement_problems:
            metrics.errors.labels("gang_placement").inc()
            errors.append(problem)
        gh = plan.gang_headroom
        placements = plan.placements
        actions: list[str] = []
        self._export(metrics, cfg.ceilings, plan.asked, plan.report, plan.teams, plan.reserved, plan.unavailable,
                     plan.planned, plan.spares)
        for d in plan.headroom.values():  # idle nodes a pool's headroom wanted that the ceiling does not buy
            if d.capped_by == "ceiling" and d.wanted_nodes > d.idle_nodes:
                metrics.ceiling_cuts.labels("", "headroom").inc(d.wanted_nodes - d.idle_nodes)
        metrics.gang_planned_start.clear()
        for placement in placements.values():
            metrics.gang_planned_start.labels(placement.key, placement.team).set(placement.start)
        metrics.gang_headroom_blocked.clear()
        for key in gh.blocked:
            metrics.gang_headroom_blocked.labels(key, plan.teams.get(key, "")).set(1)
        if write:
            if pools_known and self.capacity is not None and cfg.karpenter.enabled:
                actions += self._write_limits(views or [], plan.limits, metrics, errors)
                if kind is not None:  # the pools' nodes not read: the gangs' nodes only raise what is held
                    actions += self._write_headroom(plan.wants, views or [], metrics, errors,
                                                    floor=not plan.headroom_sized)
            actions += self._write_gangs(all_gangs, placements, set(plan.activate), t, metrics, errors)
            actions += self._report_expired(gh, t, metrics, errors)
            actions += self._send_alerts(plan.alerts, now, metrics, errors)
        return MoneyOutcome(
            decisions=plan.decisions, report=plan.report, asked=plan.asked, breaches=plan.breaches,
            gpus_unavailable=plan.unavailable, limits={name: limit for name, (limit, _) in plan.limits.items()},
            headroom={f"{w.ident[0]} {w.ident[1]}": w.amount for w in plan.wants},
            pool_headroom=dict(plan.idle_nodes),
            alerts=tuple(f"{a.name}{dict(sorted(a.labels.items()))}" for a in plan.alerts), actions=tuple(actions),
            placements=dict(placements), held=frozenset(g.key for g in all_gangs if g.held), now=t,
            gang_headroom_blocked=dict(gh.blocked),
            gpus_per_node={name: shape.gpus_per_node for name, shape in shapes.items()},
            spares=dict(plan.spares),
        )

    # ------------------------------------------------------------------ writes

    def _write_limits(
        self, views: Sequence[NodePoolView], plan: Mapping[str, tuple[int, str]], metrics: ControllerMetrics,
        errors: list[str],
    ) -> list[str]:
        assert self.capacity is not None
        actions: list[str] = []
        for v in views:
            if v.name not in plan:
                continue
            limit, why = plan[v.name]
            if v.gpu_limit == limit and v.limits.get("nvidia.com/gpu") == str(limit):
                continue
            try:
                if self.capacity.set_gpu_limit(v.name, limit):
                    actions.append(f"NodePool {v.name}: GPU limit {v.gpu_limit} -> {limit} ({why})")
            except Exception as exc:
                metrics.errors.labels("kube_write").inc()
                errors.append(f"NodePool {v.name}: setting the GPU limit to {limit} failed: {exc}")
        return actions

    def _write_gangs(
        self, gangs: Sequence[Gang], placements: Mapping[str, GangPlacement], activate: set[str], now: int,
        metrics: ControllerMetrics, errors: list[str],
    ) -> list[str]:
        """Write each placed gang's planned start when it changed; activate a held Workload whose start has come
        and that the ceiling reserved whole. A failure is reported; the next tick sees the same state and retries."""
        if self.training is None:
            return []
        actions: list[str] = []
        for g in sorted(gangs, key=lambda g: g.key):
            p = placements.get(g.key)
            if p is None and g.gated and not g.held and not g.admitted and not g.inactive:
                # our gate on a Workload the controller cannot schedule (no start-after): not ours to keep closed
                actions += self._release_gate(g, now, metrics, errors)
                continue
            if p is None:
                continue
            annotations: dict[str, str | None] = {}
            if g.planned_start_note != p.start:
                annotations[PLANNED_START_ANNOTATION] = utc(p.start).isoformat()
            starts = g.key in activate  # engine.money: its planned start came and the ceiling reserves it whole
            patch: dict[str, Any] = {}
            if starts:
                annotations[ACTIVATED_ANNOTATION] = utc(now).isoformat()
                if g.gated:  # our name leaves Kueue's admission gate; other controllers' names stay
                    annotations[ADMISSION_GATED_BY] = ",".join(n for n in g.gates if n != ADMISSION_GATE) or None
                if not g.gated or g.deactivated:
                    patch["spec"] = {"active": True}
            if not annotations:
                continue
            patch["metadata"] = {"annotations": annotations}
            what = "activating" if starts else "writing the planned start of"
            try:
                self.training.patch_gang(g.kind, g.namespace, g.name, patch)
            except Exception as exc:
                metrics.errors.labels("kube_write").inc()
                errors.append(f"{what} {g.key} failed (retried next tick): {exc}")
                continue
            if starts:
                actions.append(f"{g.key} activated at its planned start {utc(p.start).isoformat()} (reserved whole)")
            else:
                actions.append(f"{g.key}: planned start {utc(p.start).isoformat()} written")
        return actions

    def _release_gate(self, g: Gang, now: int, metrics: ControllerMetrics, errors: list[str]) -> list[str]:
        assert self.training is not None
        rest = ",".join(n for n in g.gates if n != ADMISSION_GATE) or None
        patch = {"metadata": {"annotations": {ADMISSION_GATED_BY: rest, ACTIVATED_ANNOTATION: utc(now).isoformat()}}}
        try:
            self.training.patch_gang(g.kind, g.namespace, g.name, patch)
        except Exception as exc:
            metrics.errors.labels("kube_write").inc()
            errors.append(f"releasing the admission gate of {g.key} failed (retried next tick): {exc}")
            return []
        return [f"{g.key}: admission gate {ADMISSION_GATE} released at once (no start-after: nothing to schedule it "
                f"by)"]

    def _write_headroom(
        self, wants: Sequence[HeadroomWant], views: Sequence[NodePoolView], metrics: ControllerMetrics,
        errors: list[str], *, floor: bool = False,
    ) -> list[str]:
        """Bring the headroom objects to ``wants``: create/resize what differs, remove what nobody wants. ``floor``:
        ``wants`` is a lower bound only (the pools' nodes were not read, so the inference part is unknown): what is
        held is raised to it, never lowered or removed."""
        assert self.capacity is not None
        try:
            existing = self.capacity.list_headroom()
        except Exception as exc:
            metrics.errors.labels("kube_read").inc()
            errors.append(f"listing headroom failed; no headroom changes this tick: {exc}")
            return []
        have: dict[tuple[str, str], HeadroomView] = {(h.kind, h.target): h for h in existing}
        want = {w.ident: w for w in wants}
        by_view = {v.name: v for v in views}
        actions: list[str] = []
        for ident, w in sorted(want.items()):
            if ident in have and (have[ident].amount == w.amount or (floor and have[ident].amount > w.amount)):
                continue
            try:
                self.capacity.ensure_headroom(w.target, w.amount)
                actions.append(f"headroom {ident[0]} for {ident[1]}: {w.amount} ({w.detail})")
            except Exception as exc:
                metrics.errors.labels("kube_write").inc()
                errors.append(f"headroom {ident[0]} for {ident[1]} ({w.amount}) failed: {exc}")
        for ident, h in sorted(have.items()):
            if ident in want or floor:
                continue
            target: HeadroomTarget
            if h.kind == "CapacityBuffer":
                namespace, _, name = h.target.partition("/")
                target = DeploymentHeadroom(namespace, name)
            else:
                pool = by_view.get(h.target) or NodePoolView(h.target, "", None, None, 0, {}, (), (), {}, (), None)
                target = PoolHeadroom(pool, max(1, pool.gpus_per_node or 1))
            try:
                self.capacity.remove_headroom(target)
                actions.append(f"headroom {h.kind} for {h.target} removed (no longer needed)")
            except Exception as exc:
                metrics.errors.labels("kube_write").inc()
                errors.append(f"removing headroom {h.kind} for {h.target} failed: {exc}")
        return actions

    def _send_alerts(self, alerts: Sequence[Alert], now: float, metrics: ControllerMetrics,
                     errors: list[str]) -> list[str]:
        """Fire every current alert (again), resolve those that cleared; failures are reported, resolves retried."""
        if self.alerts is None:
            return []
        at = utc(now)
        current: dict[tuple[str, tuple[tuple[str, str], ...]], Alert] = {}
        for a in alerts:
            ident = _alert_id(a)
            began = self._active[ident].starts_at if ident in self._active else at
            current[ident] = replace(a, starts_at=began if began is not None and began <= at else at)
        for ident, a in self._active.items():
            if ident not in current:
                self._unresolved[ident] = a
        for ident in current:
            self._unresolved.pop(ident, None)
        actions: list[str] = []
        if current:
            try:
                self.alerts.fire(list(current.values()), at)
                actions.append("alerts fired: " + ", ".join(sorted({a.name for a in current.values()})))
            except Exception as exc:
                metrics.errors.labels("alert").inc()
                errors.append(f"alerts not delivered (re-sent next tick): {exc}")
        self._active = current
        if self._unresolved:
            gone = list(self._unresolved.values())
            try:
                self.alerts.resolve(gone, at)
                actions.append("alerts resolved: " + ", ".join(sorted({a.name for a in gone})))
                self._unresolved = {}
            except Exception as exc:
                metrics.errors.labels("alert").inc()
                errors.append(f"alert resolutions not delivered (retried next tick): {exc}")
        return actions

    # ------------------------------------------------------------------ metrics

    @staticmethod
    def _export(
        m: ControllerMetrics, ceilings: Ceilings, asked: Mapping[str, float], report: CostReport,
        teams: Mapping[str, str], reserved: Sequence[Gang], unavailable: Mapping[str, int],
        planned: Sequence[PlannedWorkload], spares: Mapping[str, int],
    ) -> None:
        m.projected_cost.clear()
        for scope, dollars in asked.items():
            if scope == "cluster":
                m.projected_cost.labels("cluster", "").set(dollars)
            else:
                m.projected_cost.labels("team", scope.removeprefix("team ")).set(dollars)
        m.cost_ceiling.clear()
        if ceilings.cluster is not None:
            m.cost_ceiling.labels("cluster", "").set(ceilings.cluster)
        for team, value in ceilings.teams.items():
            m.cost_ceiling.labels("team", team).set(value)
        kinds = {"replicas": "inference", "warm_pool": "warm_pool", "gang": "training"}
        for c in report.cuts:
            m.ceiling_cuts.labels(teams.get(c.key, ""), kinds[c.kind]).inc(c.count)
        m.gang_reserved_gpus.set(sum(g.gpus for g in reserved))
        for p in planned:
            m.spare_replicas.labels(p.view.namespace, p.view.name).set(spares.get(p.key, 0))
            m.gpus_unavailable.labels(p.view.namespace, p.view.name).set(unavailable.get(p.key, 0))
