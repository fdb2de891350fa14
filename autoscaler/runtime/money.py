"""The money stage of a tick: price the whole plan, hold it under the cost ceilings, and make the GPUs real.

Why a stage of its own: the planner sizes each Deployment alone, but GPUs are bought for the whole cluster.
Between planning every workload and applying the plans, ``Controller.tick`` hands all decisions to
``MoneyStage.run``, which

1. reads the GPU NodePools (``NodeCapacity``) and training gangs (``TrainingGangs``: Kueue Workloads,
   Volcano PodGroups) and turns them into pool shapes and ``Gang`` values (``autoscaler.domain``);
2. prices the plan over the horizon and enforces the cluster and team ceilings by priority
   (``enforce_ceilings``): lower-priority replicas are cut first, never below ``min_replicas``, gangs are
   reserved whole or deferred whole, and every adjusted decision gets a ``cost_ceiling`` step;
3. keeps each NodePool's ``spec.limits["nvidia.com/gpu"]`` at what the cluster ceiling allows (never below
   the GPUs its nodes already have);
4. asks Karpenter for spare nodes *ahead* of the pod scale-up: the replicas the forecast needs by
   ``now + node start-up + lead`` (``ahead_replicas``), as far as the ceiling allows, minus what the pods
   already request and the pool's nodes already provide, as a CapacityBuffer per Deployment or
   placeholder pods per pool; headroom nobody needs any more (the replicas landed, the forecast passed,
   the Deployment is gone) is removed;
5. exports the cost metrics and pushes alerts (projected breach *before* cuts, cuts hitting inference,
   GPUs unavailable) to Alertmanager, resolving each when its condition clears.

The decisions are pure (the helpers below call the domain functions; all I/O goes through the injected
ports). Without a port the stage skips what needs it: with none at all it only prices the plan and
applies the ceilings, which is what ``run --dry-run`` and the tests without Karpenter see. A standby or a
dry run reads but never writes: no limits, no headroom, no alerts.

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
Workload the user created held (``spec.active: false``) is activated (``spec.active: true``) once ``now`` has
reached its planned start and the ceiling reserves it whole. Volcano PodGroups have no such switch: they are
placed, reserved and annotated, but start when Volcano says (their owner may read the annotation).

Departures from DESIGN.md (why): the placement capacity is the *cluster* ceiling in the gang's pool (team
ceilings and other pools' spend are left to ``enforce_ceilings`` at the time), so "fits" is optimistic when
other pools spend much of the budget. The NodePool limit is per pool while the ceiling is cluster-wide: each pool may
grow to its kept GPUs plus the *whole* remaining budget (``nodes.ceiling_gpus``), so the limits together
can exceed the ceiling; the controller's own plan stays under it, and the limit only stops Karpenter from
buying far past it.

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
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Protocol

from autoscaler.config import Config, HeadroomSetting
from autoscaler.domain.annotations import WorkloadSpec
from autoscaler.domain.capacity import forecast_need
from autoscaler.domain.cost import Ceilings, CostReport, GpuPrices, PriceTable, WorkloadAsk, enforce_ceilings
from autoscaler.domain.gangs import (
    ACTIVATED_ANNOTATION,
    MAX_PLACEMENT_SECONDS,
    PLANNED_START_ANNOTATION,
    Gang,
    GangError,
    holds_gpus,
    parse_gang,
    place_gangs,
    placement_window,
    scheduled,
)
from autoscaler.domain.nodes import (
    GPU_COUNT_KEY,
    NodePoolError,
    PoolShape,
    ceiling_gpus,
    gpu_prices,
    headroom_plan,
    nodepool_limit,
    pool_shape,
)
from autoscaler.domain.types import ScalingDecision, ScalingPolicy
from autoscaler.ports import (
    Alert,
    AlertSink,
    DeploymentHeadroom,
    HeadroomTarget,
    HeadroomView,
    NodeCapacity,
    NodePoolView,
    PoolHeadroom,
    PriorityClasses,
    TrainingGangs,
    WorkloadView,
)
from autoscaler.runtime.clock import utc
from autoscaler.runtime.metrics import ControllerMetrics
from models.types import Forecast

log = logging.getLogger(__name__)

# The alert names deploy/prometheusrule.yaml also raises (autoscaler.adapters.alertmanager.ALERT_NAMES); spelled
# here so this module does not import an HTTP adapter, and tests/runtime/test_money.py keeps the two equal.
PROJECTED_BREACH = "GPUCostCeilingProjectedBreach"
CUTTING_INFERENCE = "GPUCostCeilingCuttingInference"
GPUS_UNAVAILABLE = "GPUsUnavailable"

HeadroomKind = Literal["capacitybuffer", "placeholder"]
PLACEMENT_REFRESH_SECONDS = 900  # a placement is recomputed at least this often (the forecast moves)
PRIORITY_CLASS_REFRESH_SECONDS = 300  # PriorityClasses are re-read at most this often (module docstring)


# ---------------------------------------------------------------------------------------------- inputs


@dataclass(frozen=True)
class PlannedWorkload:
    """One Deployment's plan as the money stage needs it (built by the loop after ``plan_replicas``).

    ``ahead_replicas``: the replicas the plan needs by ``now + node start-up + lead`` (``ahead_replicas()``),
    what headroom is asked for; ``unschedulable``: its pods Pending unschedulable right now.
    """

    view: WorkloadView
    spec: WorkloadSpec
    decision: ScalingDecision
    ahead_replicas: int
    unschedulable: int = 0

    @property
    def key(self) -> str:
        return f"{self.view.namespace}/{self.view.name}"


def ahead_replicas(
    forecast: Forecast | None, policy: ScalingPolicy, decision: ScalingDecision, node_lead_seconds: float, now: int
) -> int:
    """Replicas the forecast needs one node start-up beyond the plan's own lead: the peak over
    ``[now + lead + node start-up, + look-ahead]`` plus the warm pool kept as replicas, never below the
    decision and clamped to ``[min, max]`` of the policy. Without a usable forecast: the decision."""
    desired = decision.desired_replicas
    if forecast is None or decision.missing_metrics or policy.level not in forecast.quantiles:
        return desired
    try:
        need = forecast_need(forecast, policy, now, decision.lead_seconds + max(0.0, node_lead_seconds))
    except (KeyError, ValueError):
        return desired
    warm = decision.warm_pool_replicas if decision.warm_pool_as == "replicas" else 0
    return max(desired, min(max(need.replicas + warm, policy.min_replicas), policy.max_replicas))


# ---------------------------------------------------------------------------------------------- pure helpers


def scope_of(team: str, ceilings: Ceilings) -> tuple[str, ...]:
    return ("cluster", f"team {team}") if team in ceilings.teams else ("cluster",)


def asked_by_scope(
    asks: Iterable[WorkloadAsk], gangs: Iterable[Gang], prices: GpuPrices
) -> dict[str, float]:
    """$/h the plan asks for *before* the ceilings: ``"cluster"`` and ``"team NAME"`` for every team seen."""
    out: dict[str, float] = {"cluster": 0.0}

    def add(team: str, dollars: float) -> None:
        out["cluster"] += dollars
        out[f"team {team}"] = out.get(f"team {team}", 0.0) + dollars

    for a in asks:
        add(a.team, (a.base_replicas + a.warm_units) * a.gpus_per_replica * prices.per_gpu_hour(a.nodepool))
    for g in gangs:
        if not g.inactive:
            add(g.team, g.gpus * prices.per_gpu_hour(g.nodepool))
    return {k: round(v, 6) for k, v in out.items()}


def breaches(asked: Mapping[str, float], ceilings: Ceilings) -> dict[str, tuple[float, float]]:
    """Scopes whose asked $/h exceeds their ceiling: ``scope -> (asked, ceiling)``."""
    limits: dict[str, float] = {f"team {t}": v for t, v in ceilings.teams.items()}
    if ceilings.cluster is not None:
        limits["cluster"] = ceilings.cluster
    return {s: (asked.get(s, 0.0), lim) for s, lim in sorted(limits.items()) if asked.get(s, 0.0) > lim + 1e-6}


def nodepool_as_dict(view: NodePoolView) -> dict[str, Any]:
    """The part of a NodePool ``pool_shape`` reads, rebuilt from the adapter's plain view.

    ``NodeCapacity`` hands out ``NodePoolView`` values while ``nodes.pool_shape`` reads the API dict; a GPU
    count the view found only in the template's labels is added as a requirement so both agree.
    """
    reqs = [{"key": r.key, "operator": r.operator, "values": list(r.values)} for r in view.requirements]
    if view.gpus_per_node is not None and not any(r["key"] == GPU_COUNT_KEY for r in reqs):
        reqs.append({"key": GPU_COUNT_KEY, "operator": "In", "values": [str(view.gpus_per_node)]})
    return {"metadata": {"name": view.name}, "spec": {"template": {"spec": {"requirements": reqs}}}}


def pool_shapes(
    views: Sequence[NodePoolView], prices: PriceTable, wanted: Iterable[str] = ()
) -> tuple[dict[str, PoolShape], list[str]]:
    """Shapes of the cluster's pools, of the pools only the config describes, and the problems found.

    A pool whose GPUs per node cannot be known is a problem only when it matters: a workload or gang names
    it, the config prices it, or it has GPUs (a limit or GPUs in use); otherwise it is a CPU pool.
    """
    wanted = set(wanted)
    shapes: dict[str, PoolShape] = {}
    problems: list[str] = []
    for v in views:
        try:
            shapes[v.name] = pool_shape(v.name, nodepool_as_dict(v), prices)
        except NodePoolError as exc:
            if v.name in wanted or v.name in prices.nodepools or v.gpu_limit is not None or (v.gpus_in_use or 0):
                problems.append(str(exc))
    for name in sorted({*prices.nodepools, *wanted} - set(shapes) - {v.name for v in views}):
        try:
            shapes[name] = pool_shape(name, None, prices)
        except NodePoolError as exc:
            if name in prices.nodepools:
                problems.append(str(exc))
    return shapes, problems


class GangForecasts(Protocol):
    """What the money stage needs to place scheduled gangs; the loop implements it from its cached models.

    ``points``: the inference GPUs the pool's Deployments are forecast to hold over ``[start, end]`` as
    ``(time, GPUs)`` points (None when nothing can be said); ``version``: a number that changes when a model
    in the pool was refit (the cached placements of that pool are then recomputed).
    """

    def points(self, pool: str | None, start: int, end: int) -> Sequence[tuple[int, float]] | None: ...

    def version(self, pool: str | None) -> int: ...


@dataclass(frozen=True)
class GangPlacement:
    """Where a scheduled gang was placed, for the report, the annotation, the metric and the activation."""

    key: str
    team: str
    start: int
    peak_gpus: float
    fits: bool
    capacity_gpus: float
    frozen: bool
    counts_from: int  # start - node start-up: from then on its GPUs count in the ceiling and in headroom
    detail: str

    def to_dict(self, now: int, held: bool) -> dict[str, Any]:
        return {
            "planned_start": utc(self.start).isoformat(),
            "planned_start_unix": self.start,
            "counts_from": utc(self.counts_from).isoformat(),
            "peak_gpus": round(self.peak_gpus, 6),
            "capacity_gpus": None if math.isinf(self.capacity_gpus) else round(self.capacity_gpus, 6),
            "fits": self.fits,
            "frozen": self.frozen,
            "counting": now >= self.counts_from,
            "held": held,
            "detail": self.detail,
        }


def _latest_start(gang: Gang, now: int, fixed: Mapping[str, int]) -> int:
    window = placement_window(gang, now)
    return window[1] if window is not None else fixed.get(gang.key, now)


def placement_capacity(pool: str | None, ceilings: Ceilings, prices: GpuPrices) -> float:
    """GPUs the cluster ceiling buys in ``pool`` (unbounded without a cluster ceiling or with free GPUs)."""
    price = prices.per_gpu_hour(pool)
    if ceilings.cluster is None or price <= 0:
        return math.inf
    return ceilings.cluster / price


def pool_limits(
    report: CostReport, shapes: Mapping[str, PoolShape], views: Sequence[NodePoolView]
) -> dict[str, tuple[int, str]]:
    """``pool -> (GPU limit, why)`` for every pool with a shape, when there is a cluster ceiling.

    A static NodePool (``spec.replicas``) gets none: it keeps a fixed node count, does not provision on demand,
    and its CRD refuses any limit but ``limits.nodes`` (a GPU limit would be a 422 on every tick).
    """
    out: dict[str, tuple[int, str]] = {}
    for v in views:
        shape = shapes.get(v.name)
        if shape is None or v.static:
            continue
        allowed = ceiling_gpus(report, shape)
        if allowed is None:
            continue
        running = v.gpus_in_use or 0
        limit = nodepool_limit(shape, allowed, running)
        out[v.name] = (limit, f"ceiling allows {allowed} GPU(s) at ${shape.gpu_hour:,.2f}/GPU-h; nodes have "
                              f"{running}; {shape.gpus_per_node} per node -> limit {limit}")
    return out


@dataclass(frozen=True)
class HeadroomWant:
    """Headroom the plan wants: a target, its amount (buffer replicas or placeholder nodes), and why."""

    target: HeadroomTarget
    amount: int
    detail: str

    @property
    def ident(self) -> tuple[str, str]:
        if isinstance(self.target, DeploymentHeadroom):
            return ("CapacityBuffer", f"{self.target.namespace}/{self.target.deployment}")
        return ("Deployment", self.target.pool.name)


def plan_headroom(
    planned: Sequence[PlannedWorkload],
    decisions: Mapping[str, ScalingDecision],
    allowed_ahead: Mapping[str, int],
    shapes: Mapping[str, PoolShape],
    views: Sequence[NodePoolView],
    gangs: Sequence[Gang],
    limits: Mapping[str, int],
    kind: HeadroomKind,
) -> tuple[list[HeadroomWant], dict[str, int]]:
    """The headroom to hold now, and per workload the extra replicas it was asked for.

    Per workload, extra = ``allowed_ahead - max(spec.replicas, desired now)`` (advisory workloads and
    workloads without GPUs ask nothing). Per pool, the GPUs those extras need beyond what the pods request
    and the pool's nodes already have (``headroom_plan``, capped by the pool's limit) become placeholder
    nodes, or are shared out as CapacityBuffer replicas, higher priority first. A workload whose pool is
    unknown gets its whole extra as a buffer (its node size is unknown, a buffer of pods is still right).
    ``gangs`` are the reserved ones that count now: an admitted gang's GPUs are requested by its pods, a
    pending one's (placed, within one node start-up of its start) are planned but not yet requested, so
    placeholder nodes are held for it, in both modes (a CapacityBuffer needs a workload to scale).
    """
    by_view = {v.name: v for v in views}
    extra: dict[str, int] = {}
    planned_gpus: dict[str, int] = {}
    requested: dict[str, int] = {}
    members: dict[str, list[PlannedWorkload]] = {}
    for p in planned:
        gpr = p.spec.gpus_per_replica
        pool = p.spec.nodepool or ""
        now_count = max(p.view.replicas, decisions[p.key].desired_replicas)
        wanted = 0 if p.spec.advisory or gpr == 0 else max(0, allowed_ahead.get(p.key, 0) - now_count)
        extra[p.key] = wanted
        planned_gpus[pool] = planned_gpus.get(pool, 0) + (now_count + wanted) * gpr
        requested[pool] = requested.get(pool, 0) + now_count * gpr
        if wanted:
            members.setdefault(pool, []).append(p)
    for g in gangs:  # an admitted gang's pods request its GPUs; a pending one has no pods yet: nodes ahead
        pool = g.nodepool or ""
        planned_gpus[pool] = planned_gpus.get(pool, 0) + g.gpus
        if g.admitted:
            requested[pool] = requested.get(pool, 0) + g.gpus
    have = {pool: max(gpus, by_view[pool].gpus_in_use or 0) if pool in by_view else gpus
            for pool, gpus in requested.items()}
    known = {pool: s for pool, s in shapes.items() if pool in planned_gpus}
    plan = headroom_plan(known, planned_gpus, have, dict(limits))
    wants: list[HeadroomWant] = []
    if kind == "placeholder":
        for pool, room in plan.items():
            if room.spare_nodes > 0 and pool in by_view:
                wants.append(HeadroomWant(PoolHeadroom(by_view[pool], room.gpus_per_node), room.spare_nodes,
                                          room.detail))
        return wants, extra
    # CapacityBuffer mode: a buffer scales a Deployment's pods, and a pending gang has no workload to point one at,
    # so its nodes are held as placeholder pods on its pool (whole nodes, first: the ceiling has already reserved
    # the gang whole, and an inference buffer can use what is left).
    gang_nodes: dict[str, int] = {}
    for g in gangs:
        pool = g.nodepool or ""
        h = plan.get(pool)
        if not g.admitted and h is not None and h.spare_nodes > 0 and pool in by_view:
            gang_nodes[pool] = gang_nodes.get(pool, 0) + math.ceil(g.gpus / h.gpus_per_node)
    for pool, nodes in sorted(gang_nodes.items()):
        h = plan[pool]
        nodes = min(nodes, h.spare_nodes)
        gang_nodes[pool] = nodes
        wants.append(HeadroomWant(PoolHeadroom(by_view[pool], h.gpus_per_node), nodes,
                                  f"{nodes} node(s) for pending gang(s) placed to start within one node start-up; "
                                  f"{h.detail}"))
    for pool, ps in members.items():
        h = plan.get(pool)
        remaining = None if h is None else h.spare_gpus if h.spare_nodes > 0 else 0
        if remaining is not None and h is not None:
            remaining = max(0, remaining - gang_nodes.get(pool, 0) * h.gpus_per_node)
        for p in sorted(ps, key=lambda q: (-q.spec.priority, q.key)):
            amount = extra[p.key]
            if remaining is not None:
                amount = min(amount, math.ceil(remaining / p.spec.gpus_per_replica))
                remaining = max(0, remaining - amount * p.spec.gpus_per_replica)
            if amount > 0:
                why = (f"{extra[p.key]} replica(s) needed by now + node start-up + lead; "
                       + (h.detail if h is not None else "pool unknown: whole extra buffered"))
                wants.append(HeadroomWant(DeploymentHeadroom(p.view.namespace, p.view.name, p.view.uid or None),
                                          amount, why))
    return wants, extra


def unavailable_gpus(
    planned: Sequence[PlannedWorkload],
    decisions: Mapping[str, ScalingDecision],
    gangs: Sequence[Gang],
    limits: Mapping[str, int],
) -> dict[str, int]:
    """GPUs each workload waits for: its unschedulable pods, or its share of a pool's demand above the limit.

    A pool's shortfall (plan GPUs - limit) is attributed to the not-yet-ready replicas of its workloads,
    lowest priority first (they are the ones the scheduler leaves Pending).
    """
    out = {p.key: p.unschedulable * p.spec.gpus_per_replica for p in planned}
    demand: dict[str, int] = {}
    for p in planned:
        pool = p.spec.nodepool or ""
        demand[pool] = demand.get(pool, 0) + max(p.view.replicas, decisions[p.key].desired_replicas) * \
            p.spec.gpus_per_replica
    for g in gangs:
        demand[g.nodepool or ""] = demand.get(g.nodepool or "", 0) + g.gpus
    for pool, limit in limits.items():
        short = demand.get(pool, 0) - limit
        if short <= 0:
            continue
        for p in sorted((p for p in planned if (p.spec.nodepool or "") == pool),
                        key=lambda q: (q.spec.priority, q.key)):
            waiting = max(0, decisions[p.key].desired_replicas - p.view.ready_replicas) * p.spec.gpus_per_replica
            take = min(short, waiting)
            out[p.key] = max(out[p.key], take)
            short -= take
            if short <= 0:
                break
    return out


def alerts_for(
    report: CostReport,
    asked: Mapping[str, float],
    ceilings: Ceilings,
    unavailable: Mapping[str, int],
    teams: Mapping[str, str],
) -> list[Alert]:
    """The alerts the tick's state calls for (identity = name + labels; ``teams``: cut key -> team)."""
    alerts: list[Alert] = []
    for scope, (want, ceiling) in breaches(asked, ceilings).items():
        team = scope.removeprefix("team ") if scope.startswith("team ") else ""
        who = f"team {team}" if team else "the cluster"
        labels = {"scope": "team", "team": team} if team else {"scope": "cluster"}
        alerts.append(Alert(
            PROJECTED_BREACH, "warning",
            f"Projected GPU spend of {who} is above its ceiling: ${want:,.2f}/h > ${ceiling:,.2f}/h",
            f"The plan needs ${want:,.2f}/h within the next {report.horizon_seconds}s; the {scope} ceiling is "
            f"${ceiling:,.2f}/h. Lower-priority replicas, warm pools and gangs are held back to fit.",
            labels,
        ))
    cut_by_team: dict[str, list[str]] = {}
    for c in report.cuts:
        if c.kind == "replicas":
            cut_by_team.setdefault(teams.get(c.key, ""), []).append(
                f"{c.key} -{c.count} replica(s) ({c.gpus} GPU, ${c.dollars_per_hour:,.2f}/h, {c.ceiling} ceiling)")
    for team, lines in sorted(cut_by_team.items()):
        alerts.append(Alert(
            CUTTING_INFERENCE, "critical",
            f"The cost ceiling is cutting inference replicas of team {team}",
            "Withheld: " + "; ".join(lines) + ". Latency objectives are at risk: raise the ceiling or stop "
            "lower-priority work.",
            {"team": team},
        ))
    for key, gpus in sorted(unavailable.items()):
        if gpus > 0:
            namespace, name = key.split("/", 1)
            alerts.append(Alert(
                GPUS_UNAVAILABLE, "warning", f"{key} is waiting for {gpus} GPU(s)",
                f"Replicas of {key} cannot get GPUs (pods Pending unschedulable or the NodePool at its limit); "
                "the controller stops adding Pending replicas.",
                {"namespace": namespace, "deployment": name},
            ))
    return alerts


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
    ahead: Mapping[str, tuple[int, int]] = field(default_factory=dict)  # key -> (ahead replicas, ceiling allows)
    alerts: tuple[str, ...] = ()
    actions: tuple[str, ...] = ()
    placements: Mapping[str, GangPlacement] = field(default_factory=dict)
    held: frozenset[str] = frozenset()  # keys of held (not yet activated) Kueue Workloads
    now: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.report.to_dict(),
            "asked_by_scope": dict(sorted(self.asked.items())),
            "breaches": {s: {"asked": a, "ceiling": c} for s, (a, c) in self.breaches.items()},
            "gpus_unavailable": {k: v for k, v in sorted(self.gpus_unavailable.items()) if v},
            "nodepool_limits": dict(sorted(self.limits.items())),
            "headroom": dict(sorted(self.headroom.items())),
            "ahead": {k: {"replicas": a, "allowed": b} for k, (a, b) in sorted(self.ahead.items())},
            "gang_placements": {k: p.to_dict(self.now, k in self.held) for k, p in sorted(self.placements.items())},
            "alerts": list(self.alerts),
            "actions": list(self.actions),
        }


def _alert_id(alert: Alert) -> tuple[str, tuple[tuple[str, str], ...]]:
    return alert.name, tuple(sorted(alert.labels.items()))


def _not_found(exc: BaseException) -> bool:
    """Whether a read failed with 404 (the API group is not served: Karpenter not installed)."""
    cause = exc.__cause__
    return getattr(cause, "status", None) == 404


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
        self._reported: set[str] = set()
        self._active: dict[tuple[str, tuple[tuple[str, str], ...]], Alert] = {}
        self._unresolved: dict[tuple[str, tuple[tuple[str, str], ...]], Alert] = {}
        self._karpenter_missing = False
        self._placements: dict[str, GangPlacement] = {}
        self._placement_sig: dict[str, tuple[Any, ...]] = {}
        self._placement_versions: dict[str | None, int] = {}
        self._placed_at = -math.inf
        self._no_fit: dict[str, int] = {}  # gang -> the start reported as not fitting (reported once per start)
        self._classes = PriorityClasses()  # the last good PriorityClass read
        self._classes_read_at = -math.inf  # when it was last read (or refused with 403)
        self._classes_forbidden = False  # a 403 was reported and no read has succeeded since

    # ------------------------------------------------------------------ placement

    def _place(
        self, gangs: Sequence[Gang], cfg: Config, prices: GpuPrices, now: int, node_startup: float,
        forecasts: GangForecasts | None, metrics: ControllerMetrics, errors: list[str],
    ) -> dict[str, GangPlacement]:
        """The cached placements of the scheduled gangs, recomputed when due (module docstring)."""
        keep = dict(self._placements)
        candidates = [g for g in gangs if scheduled(g) and (placement_window(g, now) is not None or
                                                            (g.key in keep and keep[g.key].frozen))]
        if not candidates:
            self._placements, self._placement_sig = {}, {}
            return {}
        sig = {g.key: (g.start_after, g.deadline, g.duration_seconds, g.gpus, g.nodepool, g.priority)
               for g in candidates}
        keep = {k: p for k, p in keep.items() if k in sig and self._placement_sig.get(k) == sig[k]}
        keep = {k: replace(p, frozen=True) if not p.frozen and p.start - now <= node_startup else p
                for k, p in keep.items()}
        pools = sorted({g.nodepool for g in candidates}, key=lambda p: p or "")
        versions = {pool: forecasts.version(pool) if forecasts is not None else 0 for pool in pools}
        due = (set(sig) != set(keep) or versions != self._placement_versions
               or now - self._placed_at >= PLACEMENT_REFRESH_SECONDS)
        if not due:
            self._placements = keep
            return keep
        fixed = {k: p.start for k, p in keep.items() if p.frozen}
        inference: dict[str | None, Sequence[tuple[int, float]]] = {}
        capacity: dict[str | None, float] = {}
        for pool in pools:
            members = [g for g in candidates if g.nodepool == pool]
            end = max(_latest_start(g, now, fixed) + (g.duration_seconds or 0) for g in members)
            end = min(max(end, now + 1), now + MAX_PLACEMENT_SECONDS)
            inference[pool] = (forecasts.points(pool, now, end) if forecasts is not None else None) or []
            capacity[pool] = placement_capacity(pool, cfg.ceilings, prices)
        placed = place_gangs(gangs, inference, capacity, now, fixed)
        out: dict[str, GangPlacement] = {}
        for g in candidates:
            pl = placed.get(g.key)
            if pl is None:
                continue
            cap = capacity.get(g.nodepool, math.inf)
            out[g.key] = GangPlacement(
                key=g.key, team=g.team, start=pl.start, peak_gpus=pl.peak_gpus, fits=pl.fits, capacity_gpus=cap,
                frozen=g.key in fixed or pl.start - now <= node_startup,
                counts_from=math.floor(pl.start - node_startup), detail=pl.detail,
            )
            if not pl.fits and self._no_fit.get(g.key) != pl.start:
                self._no_fit[g.key] = pl.start
                metrics.errors.labels("gang_placement").inc()
                errors.append(f"{g.key}: no start in its window fits the {cap:g} GPU(s) the ceiling buys in NodePool "
                              f"{g.nodepool or '(none)'}; placed at the lowest peak, {pl.peak_gpus:g} GPU(s) at "
                              f"{utc(pl.start).isoformat()}")
            elif pl.fits:
                self._no_fit.pop(g.key, None)
        self._placements, self._placement_sig = out, sig
        self._placement_versions, self._placed_at = versions, now
        return out

    # ------------------------------------------------------------------ reads

    def _once(self, message: str, kind: str, metrics: ControllerMetrics, errors: list[str]) -> None:
        """Report a standing problem (bad object, unpriceable pool) once, not every tick."""
        if message in self._reported:
            return
        self._reported.add(message)
        metrics.errors.labels(kind).inc()
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
            if objects.note and objects.note not in self._reported:
                self._reported.add(objects.note)
                log.info("%s", objects.note)
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
    ) -> MoneyOutcome:
        """Adjust the decisions to the ceilings, then (when ``write``) set limits, headroom, gangs and alerts.

        ``gang_forecasts`` gives the inference GPU forecasts scheduled gangs are placed on; without it they
        are placed as if the pools had no inference (at the earliest start of their window)."""
        t = int(now)
        views = self._read_pools(cfg, metrics, errors)
        pools_known = views is not None
        views = views or []
        wanted_pools = {p.spec.nodepool for p in planned if p.spec.nodepool}
        shapes, problems = pool_shapes(views, cfg.pricing, wanted_pools)
        for problem in problems:
            self._once(f"NodePool not priced (default GPU-hour price used): {problem}", "nodepool", metrics, errors)
        prices = gpu_prices(shapes.values(), cfg.pricing)
        all_gangs = self._read_gangs(metrics, errors, t)
        node_startup = float(cfg.cold_start.node_startup_seconds)
        placements = self._place(all_gangs, cfg, prices, t, node_startup, gang_forecasts, metrics, errors)
        gangs = [g for g in all_gangs if holds_gpus(
            g, t, horizon_seconds, placements[g.key].start if g.key in placements else None, node_startup)]

        asks = [WorkloadAsk.from_decision(p.spec, p.decision) for p in planned]
        report = enforce_ceilings(asks, gangs, cfg.ceilings, prices, horizon_seconds=horizon_seconds)
        decisions = {p.key: report.apply(p.key, p.decision) for p in planned}
        asked = asked_by_scope(asks, gangs, prices)
        over = breaches(asked, cfg.ceilings)
        reserved = list(report.gangs_reserved)
        teams = {a.key: a.team for a in asks} | {g.key: g.team for g in gangs}

        limit_plan = pool_limits(report, shapes, views) if pools_known else {}
        limits = {name: limit for name, (limit, _) in limit_plan.items()}
        effective_limits = {v.name: v.gpu_limit for v in views if v.gpu_limit is not None} | limits
        unavailable = unavailable_gpus(planned, decisions, reserved, effective_limits)

        setting: HeadroomSetting = cfg.karpenter.headroom
        kind: HeadroomKind | None = None
        actions: list[str] = []
        wants: list[HeadroomWant] = []
        if self.capacity is not None and cfg.karpenter.enabled and pools_known and setting != "off":
            try:
                kind = self.capacity.headroom_mode() if setting == "auto" else setting
            except Exception as exc:
                metrics.errors.labels("kube_read").inc()
                errors.append(f"CapacityBuffer discovery failed; no headroom changes this tick: {exc}")
        # Headroom is held only for what the ceiling would allow at the ahead count (priced only when headroom is
        # managed, and a second time only when some workload looks further ahead than it asks now).
        allowed_ahead = {p.key: p.ahead_replicas for p in planned}
        if kind is not None:
            ahead_asks = [replace(a, desired_replicas=max(a.desired_replicas, p.ahead_replicas))
                          for a, p in zip(asks, planned, strict=True)]
            ahead_report = report
            if any(a.desired_replicas > b.desired_replicas for a, b in zip(ahead_asks, asks, strict=True)):
                ahead_report = enforce_ceilings(ahead_asks, gangs, cfg.ceilings, prices,
                                                horizon_seconds=horizon_seconds)
            for a in ahead_asks:
                outcome = ahead_report.outcome(a.key)
                allowed_ahead[a.key] = a.desired_replicas if outcome is None else outcome.allowed_replicas
            wants, _ = plan_headroom(planned, decisions, allowed_ahead, shapes, views, reserved, effective_limits,
                                     kind)

        self._export(metrics, cfg.ceilings, asked, report, teams, reserved, unavailable, planned, allowed_ahead)
        metrics.gang_planned_start.clear()
        for p in placements.values():
            metrics.gang_planned_start.labels(p.key, p.team).set(p.start)
        alerts = alerts_for(report, asked, cfg.ceilings, unavailable, teams)
        if write:
            if pools_known and self.capacity is not None and cfg.karpenter.enabled:
                actions += self._write_limits(views, limit_plan, metrics, errors)
                if kind is not None:
                    actions += self._write_headroom(wants, views, metrics, errors)
            actions += self._write_gangs(all_gangs, placements, report, t, metrics, errors)
            actions += self._send_alerts(alerts, now, metrics, errors)
        return MoneyOutcome(
            decisions=decisions, report=report, asked=asked, breaches=over, gpus_unavailable=unavailable,
            limits=limits, headroom={f"{w.ident[0]} {w.ident[1]}": w.amount for w in wants},
            ahead={p.key: (p.ahead_replicas, allowed_ahead[p.key]) for p in planned},
            alerts=tuple(f"{a.name}{dict(sorted(a.labels.items()))}" for a in alerts), actions=tuple(actions),
            placements=dict(placements), held=frozenset(g.key for g in all_gangs if g.held), now=t,
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
        self, gangs: Sequence[Gang], placements: Mapping[str, GangPlacement], report: CostReport, now: int,
        metrics: ControllerMetrics, errors: list[str],
    ) -> list[str]:
        """Write each placed gang's planned start when it changed; activate a held Workload whose start has come
        and that the ceiling reserved whole. A failure is reported; the next tick sees the same state and retries."""
        if self.training is None:
            return []
        reserved = {g.key for g in report.gangs_reserved}
        actions: list[str] = []
        for g in sorted(gangs, key=lambda g: g.key):
            p = placements.get(g.key)
            if p is None:
                continue
            annotations: dict[str, str] = {}
            if g.planned_start_note != p.start:
                annotations[PLANNED_START_ANNOTATION] = utc(p.start).isoformat()
            activate = g.kind == "Workload" and g.held and now >= p.start and g.key in reserved
            patch: dict[str, Any] = {}
            if activate:
                annotations[ACTIVATED_ANNOTATION] = utc(now).isoformat()
                patch["spec"] = {"active": True}
            if not annotations:
                continue
            patch["metadata"] = {"annotations": annotations}
            what = "activating" if activate else "writing the planned start of"
            try:
                self.training.patch_gang(g.kind, g.namespace, g.name, patch)
            except Exception as exc:
                metrics.errors.labels("kube_write").inc()
                errors.append(f"{what} {g.key} failed (retried next tick): {exc}")
                continue
            if activate:
                actions.append(f"{g.key} activated at its planned start {utc(p.start).isoformat()} (reserved whole)")
            else:
                actions.append(f"{g.key}: planned start {utc(p.start).isoformat()} written")
        return actions

    def _write_headroom(
        self, wants: Sequence[HeadroomWant], views: Sequence[NodePoolView], metrics: ControllerMetrics,
        errors: list[str],
    ) -> list[str]:
        """Bring the headroom objects to ``wants``: create/resize what differs, remove what nobody wants."""
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
            if ident in have and have[ident].amount == w.amount:
                continue
            try:
                self.capacity.ensure_headroom(w.target, w.amount)
                actions.append(f"headroom {ident[0]} for {ident[1]}: {w.amount} ({w.detail})")
            except Exception as exc:
                metrics.errors.labels("kube_write").inc()
                errors.append(f"headroom {ident[0]} for {ident[1]} ({w.amount}) failed: {exc}")
        for ident, h in sorted(have.items()):
            if ident in want:
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
        planned: Sequence[PlannedWorkload], allowed_ahead: Mapping[str, int],
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
        for p in planned:  # replicas ahead of this tick's own ask that the ceiling will not buy nodes for
            withheld = p.ahead_replicas - max(allowed_ahead.get(p.key, p.ahead_replicas), p.decision.desired_replicas)
            if withheld > 0 and not p.spec.advisory and p.spec.gpus_per_replica:
                m.ceiling_cuts.labels(teams.get(p.key, ""), "headroom").inc(withheld)
        m.gang_reserved_gpus.set(sum(g.gpus for g in reserved))
        for p in planned:
            m.gpus_unavailable.labels(p.view.namespace, p.view.name).set(unavailable.get(p.key, 0))
