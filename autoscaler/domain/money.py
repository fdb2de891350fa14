"""The money decisions of a tick, as pure functions of data: what the plan asks, which ceilings it breaks,
which gangs count, each NodePool's GPU limit, the headroom objects to hold, the GPUs workloads wait for, the alerts.

Why a module of its own: ``autoscaler.runtime.money.MoneyStage`` reads the NodePools and the training gangs,
calls these functions and applies what they return (limits, headroom, gang patches, alerts), the way the replica
planner (``autoscaler.domain.planner``) is kept apart from the loop that scales, and Karpenter keeps ``Solve``
apart from acting. Everything here is deterministic and reads no clock; the plain values that cross the ports
(``autoscaler.ports``: ``WorkloadView``, ``NodePoolView``, the headroom targets, ``Alert``) are stdlib-only
dataclasses, so this module may use them without importing any I/O.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from autoscaler.domain.annotations import WorkloadSpec
from autoscaler.domain.cost import Ceilings, CostReport, GpuPrices, PriceTable, WorkloadAsk, enforce_ceilings
from autoscaler.domain.gangs import Gang, holds_gpus, placement_window, scheduled
from autoscaler.domain.kueue import KueueQueues, admission_block
from autoscaler.domain.nodes import (
    GPU_COUNT_KEY,
    NodePoolError,
    PoolShape,
    ceiling_gpus,
    nodepool_limit,
    pool_shape,
)
from autoscaler.domain.types import ScalingDecision
from autoscaler.ports import Alert, DeploymentHeadroom, HeadroomTarget, NodePoolView, PoolHeadroom, WorkloadView

# The alert names deploy/prometheusrule.yaml also raises (autoscaler.adapters.alertmanager.ALERT_NAMES); spelled
# here so the domain does not import an HTTP adapter, and tests/runtime/test_money.py keeps the two equal.
PROJECTED_BREACH = "GPUCostCeilingProjectedBreach"
CUTTING_INFERENCE = "GPUCostCeilingCuttingInference"
GPUS_UNAVAILABLE = "GPUsUnavailable"

HeadroomKind = Literal["capacitybuffer", "placeholder"]


def utc(ts: float) -> datetime:
    """A Unix timestamp as an aware UTC datetime (a conversion, not a clock read)."""
    return datetime.fromtimestamp(ts, tz=UTC)


# ---------------------------------------------------------------------------------------------- inputs


@dataclass(frozen=True)
class PlannedWorkload:
    """One Deployment's plan as the money stage needs it (built by the loop from ``engine.deciding.decide``).

    ``unschedulable``: its pods Pending unschedulable for longer than a node start-up (no node is coming for them;
    younger ones wait for the node being provisioned).
    """

    view: WorkloadView
    spec: WorkloadSpec
    decision: ScalingDecision
    unschedulable: int = 0

    @property
    def key(self) -> str:
        return f"{self.view.namespace}/{self.view.name}"


# ---------------------------------------------------------------------------------------------- pure helpers


def scope_of(team: str, ceilings: Ceilings) -> tuple[str, ...]:
    return ("cluster", f"team {team}") if team in ceilings.teams else ("cluster",)


def asked_by_scope(
    asks: Iterable[WorkloadAsk], gangs: Iterable[Gang], prices: GpuPrices
) -> dict[str, float]:
    """$/h the plan asks for *before* the ceilings: ``"cluster"`` (whole nodes per pool, as billed) and
    ``"team NAME"`` (the team's GPUs' share) for every team seen."""
    out: dict[str, float] = {}
    pool_gpus: dict[str | None, int] = {}

    def add(team: str, pool: str | None, gpus: int) -> None:
        out[f"team {team}"] = out.get(f"team {team}", 0.0) + gpus * prices.per_gpu_hour(pool)
        pool_gpus[pool or None] = pool_gpus.get(pool or None, 0) + gpus

    for a in asks:
        add(a.team, a.nodepool, (a.base_replicas + a.warm_units) * a.gpus_per_replica)
    for g in gangs:
        if not g.inactive:
            add(g.team, g.nodepool, g.gpus)
    return {"cluster": round(prices.bill(pool_gpus), 6), **{k: round(v, 6) for k, v in out.items()}}


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
            "peak_gpus": round(self.peak_gpus, 1),
            "capacity_gpus": None if math.isinf(self.capacity_gpus) else round(self.capacity_gpus, 1),
            "fits": self.fits,
            "frozen": self.frozen,
            "counting": now >= self.counts_from,
            "held": held,
            "detail": self.detail,
        }


def latest_start(gang: Gang, now: int, fixed: Mapping[str, int]) -> int:
    """The latest start a scheduled gang may get at ``now`` (its frozen start once its window is gone)."""
    window = placement_window(gang, now)
    return window[1] if window is not None else fixed.get(gang.key, now)


def counting_gangs(
    gangs: Iterable[Gang], placements: Mapping[str, GangPlacement], now: int, horizon_seconds: int,
    node_startup_seconds: float,
) -> list[Gang]:
    """The gangs whose GPUs count at ``now`` (``domain.gangs.holds_gpus``; a placed gang from its planned start
    minus one node start-up)."""
    return [g for g in gangs if holds_gpus(g, now, horizon_seconds,
                                           placements[g.key].start if g.key in placements else None,
                                           node_startup_seconds)]


def unplaced_deferred(
    asks: Iterable[WorkloadAsk], gangs: Sequence[Gang], ceilings: Ceilings, prices: GpuPrices, now: int,
    horizon_seconds: int,
) -> frozenset[str]:
    """Keys of the pending gangs without a placement (no window to place them in) that the ceilings defer now.

    Scheduled gangs are placed on top of the other live gangs of their pool; a pending gang the plan defers holds
    no GPUs, so it must not be counted there as always running (counted so, a deferred 16-GPU gang kept a held
    gang from ever fitting under a binding ceiling). Which pending gangs the plan runs is what ``enforce_ceilings``
    decides for the inference asks, the admitted gangs and those pending gangs, before any scheduled gang counts.
    Empty without a ceiling or without a scheduled gang to place."""
    live = [g for g in gangs if not g.inactive]
    unplaced = [g for g in live if not g.admitted and not scheduled(g) and holds_gpus(g, now, horizon_seconds)]
    if not ceilings.any or not unplaced or not any(scheduled(g) for g in live):
        return frozenset()
    report = enforce_ceilings(asks, [g for g in live if g.admitted] + unplaced, ceilings, prices)
    pending = {g.key for g in unplaced}
    return frozenset(g.key for g in report.gangs_deferred if g.key in pending)


@dataclass(frozen=True)
class GangHeadroom:
    """Which reserved gangs nodes are held for (``held``), which not and why (``blocked``), and the pending gangs
    whose held nodes ran past the time limit at this tick (``expired``, also in ``blocked``)."""

    held: tuple[Gang, ...]
    blocked: Mapping[str, str]
    expired: tuple[Gang, ...] = ()


def gang_headroom(
    gangs: Sequence[Gang], queues: KueueQueues | str | None, now: int, held_since: Mapping[str, int],
    limit_seconds: float,
) -> GangHeadroom:
    """The gangs to hold nodes for, of the reserved ones that count now (no idle nodes for a gang that will not
    start: they cost as much as nodes that run).

    An admitted gang's pods request its GPUs: always kept (Karpenter provisions for them; the headroom plan only
    subtracts them). A pending Kueue Workload gets nodes only when Kueue can admit it now (``domain.kueue``:
    its LocalQueue exists, its ClusterQueue has the quota free); ``queues`` None = not checked (Kueue's queues are
    not served), a string = they could not be read (the reason; no nodes for pending Workloads). A pending gang
    whose nodes have been held since ``held_since[key]`` for more than ``limit_seconds`` without it starting gets
    none any more (``expired``). PodGroups are not checked against Volcano's queues."""
    held: list[Gang] = []
    blocked: dict[str, str] = {}
    expired: list[Gang] = []
    for g in gangs:
        if g.admitted or g.inactive:
            held.append(g)
            continue
        why: str | None = None
        if g.kind == "Workload" and isinstance(queues, KueueQueues):
            why = admission_block(g, queues)
        elif g.kind == "Workload" and isinstance(queues, str):
            why = queues
        if why is None and g.key in held_since and now - held_since[g.key] > limit_seconds:
            why = (f"nodes held since {utc(held_since[g.key]).isoformat()} ({(now - held_since[g.key]) / 3600:.1f} h) "
                   f"and it has not started: released after {limit_seconds / 3600:.1f} h")
            expired.append(g)
        if why is None:
            held.append(g)
        else:
            blocked[g.key] = why
    return GangHeadroom(tuple(held), blocked, tuple(expired))


def placement_capacity(pool: str | None, ceilings: Ceilings, prices: GpuPrices) -> float:
    """GPUs the cluster ceiling buys in ``pool``, in whole nodes (unbounded without a cluster ceiling or with free
    GPUs)."""
    node = prices.node_hour(pool)
    if ceilings.cluster is None or node <= 0:
        return math.inf
    return float(math.floor(ceilings.cluster / node + 1e-9) * prices.per_node(pool))


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
        out[v.name] = (limit, f"ceiling allows {allowed // shape.gpus_per_node} node(s) of {shape.gpus_per_node} "
                              f"GPU(s) at ${shape.node_hour:,.2f}/node-h; nodes have {running} GPU(s) -> limit {limit}")
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


@dataclass(frozen=True)
class BufferHolder:
    """The Deployment a NodePool's idle nodes are held as a CapacityBuffer of (``headroom_wants``), and the room its
    pool's busy nodes already have (a buffer is satisfied there first)."""

    target: DeploymentHeadroom
    gpus_per_replica: int
    partial_free_gpus: int = 0


def buffer_holders(planned: Sequence[PlannedWorkload], partial_free: Mapping[str, int]) -> dict[str, BufferHolder]:
    """Per NodePool, its highest-priority Deployment that we scale and whose pods hold GPUs (ties: by key)."""
    out: dict[str, BufferHolder] = {}
    ranked = sorted(planned, key=lambda p: (-p.spec.priority, p.key))
    for p in ranked:
        pool = p.spec.nodepool
        if not pool or pool in out or p.spec.advisory or p.spec.gpus_per_replica <= 0:
            continue
        out[pool] = BufferHolder(DeploymentHeadroom(p.view.namespace, p.view.name, p.view.uid or None),
                                 p.spec.gpus_per_replica, partial_free.get(pool, 0))
    return out


def headroom_wants(
    idle: Mapping[str, tuple[int, str]],
    gangs: Sequence[Gang],
    shapes: Mapping[str, PoolShape],
    views: Sequence[NodePoolView],
    limits: Mapping[str, int],
    buffers: Mapping[str, BufferHolder] | None = None,
) -> list[HeadroomWant]:
    """The headroom objects to hold now, per NodePool.

    ``idle``: pool -> (idle nodes, why), what the pool's forecast-sized headroom asks for its Deployments
    (``engine.money.pools_headroom``, already capped by the pool's limit and the ceiling as billed); plus whole nodes
    for each reserved pending gang of the pool (``gangs``: the reserved ones that count now; an admitted gang's pods
    request its GPUs, a pending one has no pods yet, so nodes are held ahead for it), capped by the room under the
    pool's GPU limit (``limits``) beyond the GPUs it runs. Placeholder pods of one whole node each, unless
    ``buffers`` names a holder for the pool (the CapacityBuffer kind): then the pool's idle nodes are a CapacityBuffer
    of its holder's pods, as many as fill the idle nodes and the room its busy nodes already have (Karpenter and
    Cluster Autoscaler keep room for pods of that exact shape, on the same pool, for any of its Deployments' pods);
    a gang's nodes stay placeholders (a buffer needs a workload to scale). A static NodePool (``spec.replicas``:
    Karpenter adds no node) and a pool that was not read get none.
    """
    by_view = {v.name: v for v in views}
    for_gangs: dict[str, int] = {}
    for g in gangs:
        pool = g.nodepool or ""
        if g.admitted or pool not in shapes:
            continue
        for_gangs[pool] = for_gangs.get(pool, 0) + math.ceil(g.gpus / shapes[pool].gpus_per_node)
    wants: list[HeadroomWant] = []
    for pool in sorted(set(idle) | set(for_gangs)):
        view = by_view.get(pool)
        if view is None or view.static or pool not in shapes:
            continue
        per_node = shapes[pool].gpus_per_node
        gang_nodes = for_gangs.get(pool, 0)
        if gang_nodes and pool in limits:
            gang_nodes = min(gang_nodes, max(0, (limits[pool] - (view.gpus_in_use or 0)) // per_node))
        nodes, why = idle.get(pool, (0, ""))
        gang_why = f"{gang_nodes} node(s) for pending gang(s) placed to start within one node start-up"
        holder = (buffers or {}).get(pool)
        if holder is not None and nodes > 0:
            replicas = math.ceil((nodes * per_node + holder.partial_free_gpus) / holder.gpus_per_replica)
            room = f"room for {replicas} pod(s) of this shape, {holder.partial_free_gpus} GPU(s) of it on busy nodes"
            wants.append(HeadroomWant(holder.target, replicas, f"{why} ({room})"))
            nodes = 0
        parts = ([why] if nodes else []) + ([gang_why] if gang_nodes else [])
        if nodes + gang_nodes > 0:
            wants.append(HeadroomWant(PoolHeadroom(view, per_node), nodes + gang_nodes, "; ".join(parts)))
    return wants


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
