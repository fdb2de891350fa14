"""Dollars per hour, and cost ceilings enforced by priority: who keeps GPUs when the plan costs too much.

Why a module of its own: the planner sizes each workload on its own; only here are all the GPU
claims of a tick (inference replicas, warm pools, training gangs) priced together and held under
the operator's ceilings (dollars per hour for the cluster and per team). Every tick,
``enforce_ceilings`` projects the cost of the plan; when it is over a ceiling, GPUs are taken back
in a configurable *keep order* and every cut is written down (a ``cost_ceiling`` step on the
workload's decision trail, and a line in the ``CostReport``), because a limiter that blocks
scale-up must be loud.

The rules, in the order they are applied:

1. ``min_replicas`` of every workload are kept, even above a ceiling; that ceiling is then reported
   as unmeetable (``CostReport.unmeetable``) and nothing else in its scope gets GPUs.
2. Every other claim is a *unit*: one replica above the minimum, one warm-pool replica, or one whole
   gang. Units are ranked by the keep order (default: production inference, admitted training,
   production warm pools, other inference, other warm pools, pending training; see
   ``DEFAULT_KEEP_ORDER``), then by priority (higher
   first), then replica by replica across workloads of equal rank (so equal workloads lose replicas
   evenly rather than one losing all).
3. Units are granted in rank order while they fit under the cluster ceiling and their team's
   ceiling. A *replica* unit that does not fit closes the ceiling it broke: no lower-ranked unit in
   that scope gets GPUs afterwards, so a higher priority is never cut while a lower one holds GPUs.
   A *gang* that does not fit is deferred whole (never a part of its GPUs) and does not close the
   scope: smaller lower-ranked units may still use the budget it could not. That is the only way a
   lower rank keeps GPUs a higher one lost, and the price of all-or-nothing.

Consequences the tests check as properties: the projected cost is under every ceiling whose minimum
fits; no gang is split; nothing goes below its minimum; more cluster budget never gives anyone fewer
GPUs when no gang is involved, and with gangs the grant in rank order only improves
lexicographically (the highest-ranked unit whose grant changes gains). Why not the simpler
promise "more budget never gives fewer GPUs to anyone": it cannot hold together with all-or-nothing gangs
and using the budget a deferred gang leaves (budget 7: a 8-GPU gang is deferred and 7 one-GPU
replicas run; budget 8: the gang runs and the replicas do not), so the exact form is stated above.

Dollars are what Karpenter bills: whole nodes. The cluster ceiling is checked against
``sum over pools of ceil(GPUs / GPUs per node) x node price`` (``GpuPrices``: the node price is the
pricing config's instance-type price, or the GPU price x GPUs per node; derived from the pool's shape in
``autoscaler.domain.nodes``), so a replica that needs a new node costs the whole node and one that fits on
a node already paid for costs nothing more; when that cuts replicas the trail says so (``whole nodes:
NodePool p4d: 18 GPU(s) need 3 node(s) of 8 = $98.31/h > $73.74/h: 16 GPU(s) on 2 node(s)``). Packing is
assumed perfect per pool (the GPUs of a pool's pods fill its nodes; Karpenter's own simulation does the
real packing). Team ceilings charge a team its GPUs' share of the nodes (GPUs x the pool's GPU-hour
price): teams share nodes, and a share is what a chargeback can attribute. Money is
handled internally in integer micro-dollars so that "under the ceiling" is exact, not a float
comparison that drifts with the order of additions. "Over the horizon" means each ask is the
plan's peak over the horizon (the planner's desired count already sizes for the peak of its
look-ahead window), so holding the peak under a ceiling holds every step under it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from types import MappingProxyType
from typing import Any, Literal, NamedTuple

from autoscaler.domain.annotations import MAX_PRIORITY, PRIORITY_TIERS, WorkloadSpec
from autoscaler.domain.gangs import Gang
from autoscaler.domain.types import ScalingDecision, Step, WarmPoolAs

__all__ = [
    "DEFAULT_KEEP_ORDER",
    "CapacityType",
    "Ceilings",
    "CostReport",
    "Cut",
    "GangOutcome",
    "GpuPrices",
    "GpuType",
    "InstanceType",
    "KeepClass",
    "NodePoolPricing",
    "PriceTable",
    "WorkloadAsk",
    "WorkloadOutcome",
    "enforce_ceilings",
]

CapacityType = Literal["on-demand", "spot"]
UnitKind = Literal["inference", "warm_pool", "training_admitted", "training_pending"]
UNIT_KINDS: tuple[UnitKind, ...] = ("inference", "warm_pool", "training_admitted", "training_pending")
_MICRO = 1_000_000
_NO_POOL = ""


def _positive_price(value: float, what: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise ValueError(f"{what} must be a finite number of dollars per hour >= 0, got {value!r}")


def _micro(dollars: float) -> int:
    return round(dollars * _MICRO)


def _dollars(micro: int) -> float:
    return micro / _MICRO


# ---------------------------------------------------------------------------------------------- prices


@dataclass(frozen=True)
class InstanceType:
    """A node type: its GPUs and its price per node-hour (``spot`` None = not known; on-demand is used)."""

    name: str
    gpus: int
    on_demand: float
    spot: float | None = None

    def __post_init__(self) -> None:
        if isinstance(self.gpus, bool) or not isinstance(self.gpus, int) or self.gpus < 1:
            raise ValueError(f"instance type {self.name}: gpus must be an integer >= 1, got {self.gpus!r}")
        _positive_price(self.on_demand, f"instance type {self.name}: on_demand")
        if self.spot is not None:
            _positive_price(self.spot, f"instance type {self.name}: spot")

    def node_hour(self, capacity_type: CapacityType) -> float:
        return self.spot if capacity_type == "spot" and self.spot is not None else self.on_demand

    def gpu_hour(self, capacity_type: CapacityType) -> float:
        return self.node_hour(capacity_type) / self.gpus


@dataclass(frozen=True)
class GpuType:
    """A GPU model's price per GPU-hour, for pools that name a GPU (``karpenter.k8s.aws/instance-gpu-name``)."""

    name: str
    on_demand: float
    spot: float | None = None

    def __post_init__(self) -> None:
        _positive_price(self.on_demand, f"GPU type {self.name}: on_demand")
        if self.spot is not None:
            _positive_price(self.spot, f"GPU type {self.name}: spot")

    def gpu_hour(self, capacity_type: CapacityType) -> float:
        return self.spot if capacity_type == "spot" and self.spot is not None else self.on_demand


@dataclass(frozen=True)
class NodePoolPricing:
    """Explicit settings for one NodePool; each one set wins over what the NodePool object says."""

    instance_type: str | None = None
    gpus_per_node: int | None = None
    capacity_type: CapacityType | None = None
    gpu_hour: float | None = None

    def __post_init__(self) -> None:
        if self.gpus_per_node is not None and (isinstance(self.gpus_per_node, bool) or self.gpus_per_node < 1):
            raise ValueError(f"gpus_per_node must be an integer >= 1, got {self.gpus_per_node!r}")
        if self.gpu_hour is not None:
            _positive_price(self.gpu_hour, "gpu_hour")


def _frozen_map(value: Mapping[str, Any]) -> Mapping[str, Any]:
    return MappingProxyType(dict(value))


@dataclass(frozen=True)
class PriceTable:
    """The ``pricing`` section of the operator config.

    ``capacity_type`` is the price used when a NodePool allows both on-demand and spot (Karpenter
    prefers spot but may fall back; on-demand is the conservative guess for a ceiling).
    ``default_gpu_hour`` prices GPUs of pools whose instance type and GPU type are both unknown.
    """

    default_gpu_hour: float = 4.0
    capacity_type: CapacityType = "on-demand"
    instance_types: Mapping[str, InstanceType] = field(default_factory=dict)
    gpu_types: Mapping[str, GpuType] = field(default_factory=dict)
    nodepools: Mapping[str, NodePoolPricing] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _positive_price(self.default_gpu_hour, "pricing.default_gpu_hour")
        if self.capacity_type not in ("on-demand", "spot"):
            raise ValueError(f"capacity_type must be 'on-demand' or 'spot', got {self.capacity_type!r}")
        for name in ("instance_types", "gpu_types", "nodepools"):
            object.__setattr__(self, name, _frozen_map(getattr(self, name)))



@dataclass(frozen=True)
class GpuPrices:
    """$/GPU-hour by NodePool name, and the GPUs of one of its nodes; pools not listed (and workloads without a
    pool) pay ``default`` per GPU.

    Karpenter bills whole nodes: a pool listed in ``gpus_per_node`` is billed ``nodes x node_hour`` for the GPUs it
    holds (``nodes = ceil(gpus / gpus_per_node)``, ``node_hour = per GPU-hour x gpus_per_node``, i.e. the instance
    type's price); a pool not listed is billed per GPU (one "node" per GPU), as before whole-node pricing.
    """

    by_pool: Mapping[str, float] = field(default_factory=dict)
    default: float = 4.0
    gpus_per_node: Mapping[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _positive_price(self.default, "default GPU-hour price")
        for pool, price in self.by_pool.items():
            _positive_price(price, f"GPU-hour price of NodePool {pool}")
        for pool, gpn in self.gpus_per_node.items():
            if isinstance(gpn, bool) or not isinstance(gpn, int) or gpn < 1:
                raise ValueError(f"GPUs per node of NodePool {pool} must be an integer >= 1, got {gpn!r}")
        object.__setattr__(self, "by_pool", _frozen_map(self.by_pool))
        object.__setattr__(self, "gpus_per_node", _frozen_map(self.gpus_per_node))

    def per_gpu_hour(self, nodepool: str | None) -> float:
        return self.by_pool.get(nodepool, self.default) if nodepool else self.default

    def per_node(self, nodepool: str | None) -> int:
        """GPUs of one billed node of the pool (1 = billed per GPU)."""
        return self.gpus_per_node.get(nodepool, 1) if nodepool else 1

    def node_hour(self, nodepool: str | None) -> float:
        """$/h of one node of the pool (the instance type's price; per GPU for a pool billed per GPU)."""
        return self.per_gpu_hour(nodepool) * self.per_node(nodepool)

    def nodes(self, nodepool: str | None, gpus: int) -> int:
        """Whole nodes that hold ``gpus`` GPUs of the pool (perfect packing: ``ceil(gpus / gpus_per_node)``)."""
        return -(-max(0, gpus) // self.per_node(nodepool))

    def bill(self, gpus_by_pool: Mapping[str | None, int]) -> float:
        """$/h of whole nodes for ``pool -> GPUs`` (``None``/``""`` = no pool named, billed per GPU)."""
        merged: dict[str, int] = {}
        for pool, gpus in gpus_by_pool.items():
            merged[pool or _NO_POOL] = merged.get(pool or _NO_POOL, 0) + gpus
        return _dollars(self._bill_micro(merged))

    def _node_micro(self, pool: str) -> int:
        return _micro(self.node_hour(pool or None))

    def _bill_micro(self, gpus_by_pool: Mapping[str, int]) -> int:
        return sum(self.nodes(p or None, g) * self._node_micro(p) for p, g in gpus_by_pool.items())


# ---------------------------------------------------------------------------------------------- ceilings


_KEEP_RE = re.compile(r"^\s*([a-z_]+|\*)\s*(?:>=\s*([a-z]+|[0-9]+))?\s*$")


@dataclass(frozen=True)
class KeepClass:
    """One entry of the keep order: a kind of claim (or ``*`` = any), optionally only at ``min_priority`` or above.

    Spelled ``inference>=production``, ``training_admitted``, ``warm_pool``, ``inference``,
    ``training_pending``, ``training`` (both training kinds), ``* >= 100``. A claim belongs to the
    first entry it matches; claims matching none rank after all entries.
    """

    kind: str
    min_priority: int = 0

    def __post_init__(self) -> None:
        if self.kind not in (*UNIT_KINDS, "training", "*"):
            raise ValueError(f"unknown kind {self.kind!r} in the keep order; "
                             f"use one of {', '.join((*UNIT_KINDS, 'training', '*'))}")
        if isinstance(self.min_priority, bool) or not 0 <= self.min_priority <= MAX_PRIORITY:
            raise ValueError(f"priority bound must be 0..{MAX_PRIORITY}, got {self.min_priority!r}")

    @classmethod
    def parse(cls, text: str) -> KeepClass:
        """``'inference>=production'`` -> ``KeepClass('inference', 100)``; ``ValueError`` naming the problem."""
        match = _KEEP_RE.match(text) if isinstance(text, str) else None
        if match is None:
            raise ValueError(f"cannot read keep-order entry {text!r} (expected KIND or KIND>=PRIORITY, "
                             f"e.g. inference>=production)")
        kind, bound = match.group(1), match.group(2)
        if bound is None:
            return cls(kind)
        if bound.isdigit():
            return cls(kind, int(bound))
        if bound not in PRIORITY_TIERS:
            raise ValueError(f"unknown priority tier {bound!r} in {text!r}; use 0..{MAX_PRIORITY} or "
                             f"{', '.join(PRIORITY_TIERS)}")
        return cls(kind, PRIORITY_TIERS[bound])

    def matches(self, kind: UnitKind, priority: int) -> bool:
        kind_ok = self.kind in (kind, "*") or (self.kind == "training" and kind.startswith("training"))
        return kind_ok and priority >= self.min_priority

    def __str__(self) -> str:
        if not self.min_priority:
            return self.kind
        tier = next((n for n, v in PRIORITY_TIERS.items() if v == self.min_priority), str(self.min_priority))
        return f"{self.kind}>={tier}"


DEFAULT_KEEP_ORDER: tuple[KeepClass, ...] = tuple(
    KeepClass.parse(s)
    for s in ("inference>=production", "training_admitted", "warm_pool>=production", "inference", "warm_pool",
              "training_pending")
)
"""Production inference, admitted training, production warm pools, other inference, other warm pools, pending
training. Warm pools are split by tier so that a standard workload's spare replicas never outrank its own
serving replicas ("warm pool, then lower tiers" read as the production warm pool)."""


@dataclass(frozen=True)
class Ceilings:
    """The ``ceilings`` section: $/h for the whole cluster and per team (None / absent = no ceiling)."""

    cluster: float | None = None
    teams: Mapping[str, float] = field(default_factory=dict)
    keep_order: tuple[KeepClass, ...] = DEFAULT_KEEP_ORDER

    def __post_init__(self) -> None:
        if self.cluster is not None:
            _positive_price(self.cluster, "ceilings.cluster")
        for team, value in self.teams.items():
            _positive_price(value, f"ceilings.teams.{team}")
        object.__setattr__(self, "teams", _frozen_map(self.teams))
        object.__setattr__(self, "keep_order", tuple(self.keep_order))


    @property
    def any(self) -> bool:
        return self.cluster is not None or bool(self.teams)


# ---------------------------------------------------------------------------------------------- inputs


@dataclass(frozen=True)
class WorkloadAsk:
    """One inference workload's GPU ask for the horizon (its planned decision, before the ceiling).

    With ``warm_pool_as == "replicas"`` the warm pool is part of ``desired_replicas`` (the top
    ``warm_pool_replicas`` of them, never eating into the minimum); with ``"nodes"`` it is spare node
    capacity on top. Either way every warm replica costs ``gpus_per_replica`` GPUs.
    """

    key: str
    team: str
    priority: int
    gpus_per_replica: int
    min_replicas: int
    desired_replicas: int
    warm_pool_replicas: int = 0
    warm_pool_as: WarmPoolAs = "replicas"
    nodepool: str | None = None

    def __post_init__(self) -> None:
        for name in ("gpus_per_replica", "min_replicas", "desired_replicas", "warm_pool_replicas"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"WorkloadAsk {self.key}: {name} must be an integer >= 0, got {value!r}")
        if not 0 <= self.priority <= MAX_PRIORITY:
            raise ValueError(f"WorkloadAsk {self.key}: priority must be 0..{MAX_PRIORITY}, got {self.priority!r}")
        if self.warm_pool_as not in ("replicas", "nodes"):
            raise ValueError(f"WorkloadAsk {self.key}: warm_pool_as must be 'replicas' or 'nodes'")
        if self.min_replicas > self.desired_replicas:
            raise ValueError(f"WorkloadAsk {self.key}: min_replicas {self.min_replicas} > desired_replicas "
                             f"{self.desired_replicas} (the planner clamps desired to the minimum)")

    @classmethod
    def from_decision(cls, spec: WorkloadSpec, decision: ScalingDecision) -> WorkloadAsk:
        """The ask of a planned workload: ``spec`` says who it belongs to, ``decision`` how much it wants."""
        return cls(
            key=f"{spec.namespace}/{spec.name}",
            team=spec.team or spec.namespace,
            priority=spec.priority,
            gpus_per_replica=spec.gpus_per_replica,
            min_replicas=min(spec.min_replicas, decision.desired_replicas),
            desired_replicas=decision.desired_replicas,
            warm_pool_replicas=decision.warm_pool_replicas,
            warm_pool_as=decision.warm_pool_as,
            nodepool=spec.nodepool,
        )

    @property
    def warm_in_replicas(self) -> int:
        """Warm replicas counted inside ``desired_replicas`` (0 when the pool is kept as nodes)."""
        if self.warm_pool_as != "replicas":
            return 0
        return min(self.warm_pool_replicas, max(0, self.desired_replicas - self.min_replicas))

    @property
    def base_replicas(self) -> int:
        """Replicas serving the forecast (desired minus the warm part), at least the minimum."""
        return max(self.min_replicas, self.desired_replicas - self.warm_in_replicas)

    @property
    def warm_units(self) -> int:
        return self.warm_in_replicas if self.warm_pool_as == "replicas" else self.warm_pool_replicas


# ---------------------------------------------------------------------------------------------- outputs


@dataclass(frozen=True)
class Cut:
    """GPUs taken back from one claim: which claim, what kind, how many GPUs, $/h, and the ceiling that forced it."""

    key: str
    kind: Literal["replicas", "warm_pool", "gang"]
    count: int  # replicas, warm replicas, or 1 gang
    gpus: int
    dollars_per_hour: float
    ceiling: str  # "cluster" or "team <name>"


@dataclass(frozen=True)
class WorkloadOutcome:
    """What one workload may keep. ``allowed_replicas`` includes the allowed warm replicas in replicas mode."""

    key: str
    team: str
    nodepool: str | None
    asked_replicas: int
    allowed_replicas: int
    asked_warm_pool: int
    allowed_warm_pool: int
    gpus: int  # GPUs kept: replicas (+ warm nodes)
    dollars_per_hour: float
    cut_dollars_per_hour: float
    detail: str

    @property
    def cut(self) -> bool:
        return self.allowed_replicas < self.asked_replicas or self.allowed_warm_pool < self.asked_warm_pool


@dataclass(frozen=True)
class GangOutcome:
    """Whether one gang is reserved (all its GPUs) or deferred (none of them), and why."""

    gang: Gang
    reserved: bool
    dollars_per_hour: float
    reason: str


@dataclass(frozen=True)
class CostReport:
    """The priced plan after the ceilings: totals, ceilings, every cut, every gang's fate."""

    cluster_dollars_per_hour: float
    asked_dollars_per_hour: float
    team_dollars_per_hour: Mapping[str, float]
    cluster_ceiling: float | None
    team_ceilings: Mapping[str, float]
    workloads: tuple[WorkloadOutcome, ...]
    gangs: tuple[GangOutcome, ...]
    cuts: tuple[Cut, ...]
    unmeetable: tuple[str, ...]  # ceilings that even the minimum replicas exceed ("cluster", "team x")
    gpus_by_pool: Mapping[str, int]  # kept GPUs per NodePool ("" = no pool named)
    horizon_seconds: int = 0

    @property
    def binds(self) -> bool:
        """Whether any ceiling took GPUs back (or cannot be met)."""
        return bool(self.cuts) or bool(self.unmeetable)

    @property
    def cut_inference(self) -> bool:
        """Whether serving replicas (not just warm pools or training) were cut: the loud case."""
        return any(c.kind == "replicas" for c in self.cuts)

    @property
    def gangs_reserved(self) -> tuple[Gang, ...]:
        return tuple(g.gang for g in self.gangs if g.reserved)

    @property
    def gangs_deferred(self) -> tuple[Gang, ...]:
        return tuple(g.gang for g in self.gangs if not g.reserved)

    @property
    def cluster_slack_dollars_per_hour(self) -> float | None:
        """Budget left under the cluster ceiling (None without one; 0 when it cannot be met)."""
        if self.cluster_ceiling is None:
            return None
        return max(0.0, self.cluster_ceiling - self.cluster_dollars_per_hour)

    @property
    def projected_dollars(self) -> float:
        """The plan's cost over the horizon, at its peak rate."""
        return self.cluster_dollars_per_hour * self.horizon_seconds / 3600

    @cached_property
    def _by_key(self) -> Mapping[str, WorkloadOutcome]:
        return {w.key: w for w in self.workloads}

    def outcome(self, key: str) -> WorkloadOutcome | None:
        return self._by_key.get(key)

    def apply(self, key: str, decision: ScalingDecision) -> ScalingDecision:
        """``decision`` with the allowed counts and a ``cost_ceiling`` step (unchanged without a ceiling in scope)."""
        outcome = self.outcome(key)
        if outcome is None or not outcome.detail:
            return decision
        return replace(
            decision,
            desired_replicas=outcome.allowed_replicas,
            warm_pool_replicas=outcome.allowed_warm_pool,
            steps=(*decision.steps, Step("cost_ceiling", outcome.allowed_replicas, outcome.detail)),
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe summary for logs, ``explain`` and the simulator's output."""
        return {
            "cluster_dollars_per_hour": round(self.cluster_dollars_per_hour, 6),
            "asked_dollars_per_hour": round(self.asked_dollars_per_hour, 6),
            "team_dollars_per_hour": {t: round(v, 6) for t, v in sorted(self.team_dollars_per_hour.items())},
            "cluster_ceiling": self.cluster_ceiling,
            "team_ceilings": dict(sorted(self.team_ceilings.items())),
            "binds": self.binds,
            "cut_inference": self.cut_inference,
            "unmeetable": list(self.unmeetable),
            "cuts": [
                {"key": c.key, "kind": c.kind, "count": c.count, "gpus": c.gpus,
                 "dollars_per_hour": round(c.dollars_per_hour, 6), "ceiling": c.ceiling}
                for c in self.cuts
            ],
            "gangs": [
                {"key": g.gang.key, "gpus": g.gang.gpus, "reserved": g.reserved, "reason": g.reason}
                for g in self.gangs
            ],
            "gpus_by_pool": dict(sorted(self.gpus_by_pool.items())),
        }


# ---------------------------------------------------------------------------------------------- enforcement


class _Unit(NamedTuple):
    """One grantable claim (a NamedTuple: there are one per replica, and a tick may build tens of thousands)."""

    rank: tuple[int, int, int, int, str]
    owner: str  # workload key or gang key
    kind: UnitKind
    team: str
    pool: str
    gpus: int
    micro: int  # $/h in micro-dollars
    gang: Gang | None = None


def _class_index(order: Sequence[KeepClass], kind: UnitKind, priority: int) -> int:
    return next((i for i, c in enumerate(order) if c.matches(kind, priority)), len(order))


def _fmt(micro: int) -> str:
    return f"${_dollars(micro):,.2f}/h"


class _Budget:
    """Spend tracking for the cluster and each team, in micro-dollars; a scope closes when a replica breaks it.

    The cluster is billed as Karpenter bills: whole nodes per pool (``GpuPrices.nodes``), so a unit costs the
    cluster the nodes it adds (0 when it fits on a node already paid for, a whole node when it does not). A team
    is charged its GPUs' share of the nodes (GPUs x the pool's GPU-hour price): teams share nodes, and a share
    is what a chargeback can attribute."""

    def __init__(self, ceilings: Ceilings, prices: GpuPrices) -> None:
        self.prices = prices
        self.limit: dict[str, int | None] = {"cluster": None if ceilings.cluster is None else _micro(ceilings.cluster)}
        for team, value in ceilings.teams.items():
            self.limit[f"team {team}"] = _micro(value)
        self.spent: dict[str, int] = {}
        self.closed: set[str] = set()
        self.pool_gpus: dict[str, int] = {}

    def scopes(self, team: str) -> tuple[str, ...]:
        return ("cluster", f"team {team}") if f"team {team}" in self.limit else ("cluster",)

    def node_cost(self, pool: str, gpus: int) -> int:
        """Micro-dollars of the nodes ``gpus`` more GPUs add to ``pool``."""
        have = self.pool_gpus.get(pool, 0)
        added = self.prices.nodes(pool or None, have + gpus) - self.prices.nodes(pool or None, have)
        return added * self.prices._node_micro(pool)

    def cost(self, scope: str, pool: str, gpus: int, share: int) -> int:
        return self.node_cost(pool, gpus) if scope == "cluster" else share

    def force(self, team: str, pool: str, gpus: int, share: int) -> None:
        for scope in self.scopes(team):
            self.spent[scope] = self.spent.get(scope, 0) + self.cost(scope, pool, gpus, share)
        self.pool_gpus[pool] = self.pool_gpus.get(pool, 0) + gpus

    def blocker(self, team: str, pool: str, gpus: int, share: int) -> str | None:
        """The first scope that is closed or would go over, or None when the unit fits."""
        for scope in self.scopes(team):
            if scope in self.closed:
                return scope
            limit = self.limit.get(scope)
            if limit is not None and self.spent.get(scope, 0) + self.cost(scope, pool, gpus, share) > limit:
                return scope
        return None


def _whole_nodes_note(pool: str, asked_gpus: int, kept_gpus: int, prices: GpuPrices, others_micro: int,
                      limit_micro: int) -> str:
    """"NodePool p4d: 18 GPU(s) need 3 node(s) of 8 = $98.31/h > $73.74/h: 16 GPU(s) on 2 node(s)"."""
    gpn = prices.per_node(pool or None)
    need = prices.nodes(pool or None, asked_gpus)
    keep = prices.nodes(pool or None, kept_gpus)
    asked_micro = need * prices._node_micro(pool)
    others = f" + {_fmt(others_micro)} elsewhere" if others_micro else ""
    return (f"NodePool {pool}: {asked_gpus} GPU(s) need {need} node(s) of {gpn} = {_fmt(asked_micro)}{others} > "
            f"{_fmt(limit_micro)}: {kept_gpus} GPU(s) on {keep} node(s)")


def _reserved(gpus: int, micro: int) -> str:
    """Why a gang was reserved: the same words whether the whole plan fitted at once or unit by unit."""
    return f"reserved: {gpus} GPU(s) = {_fmt(micro)} fit every ceiling"


def fits_ceilings(asks: Iterable[WorkloadAsk], gangs: Iterable[Gang], ceilings: Ceilings, prices: GpuPrices) -> bool:
    """Whether the whole plan, priced exactly as ``enforce_ceilings`` prices it, is under every ceiling: then it cuts
    nothing (a cost only grows with GPUs, so every replica and gang fits in turn). A cheap test for the drivers that
    decide many times a simulated second; ``enforce_ceilings`` uses it too."""
    if not ceilings.any:
        return True
    whole = _Budget(ceilings, prices)
    for a in asks:
        units = a.base_replicas + a.warm_units
        whole.force(a.team, a.nodepool or _NO_POOL, a.gpus_per_replica * units,
                    _micro(prices.per_gpu_hour(a.nodepool) * a.gpus_per_replica) * units)
    for g in gangs:
        if not g.inactive:
            whole.force(g.team, g.nodepool or _NO_POOL, g.gpus, _micro(prices.per_gpu_hour(g.nodepool) * g.gpus))
    return all(lim is None or whole.spent.get(scope, 0) <= lim for scope, lim in whole.limit.items())


def enforce_ceilings(
    asks: Iterable[WorkloadAsk],
    gangs: Iterable[Gang],
    ceilings: Ceilings,
    prices: GpuPrices,
    *,
    horizon_seconds: int = 0,
) -> CostReport:
    """Price the plan and take GPUs back, by the keep order, until it is under every ceiling (module docstring).

    ``asks``: the planned inference workloads (``WorkloadAsk.from_decision``); keys must be unique.
    ``gangs``: training gangs that run within the horizon (inactive ones are ignored). Pure and
    deterministic: the same inputs give the same report.
    """
    ask_list = list(asks)
    keys = [a.key for a in ask_list]
    if len(set(keys)) != len(keys):
        dup = next(k for k in keys if keys.count(k) > 1)
        raise ValueError(f"duplicate workload key {dup!r} in the asks")
    gang_list = [g for g in gangs if not g.inactive]
    gang_keys = [g.key for g in gang_list]
    if len(set(gang_keys)) != len(gang_keys):
        dup = next(k for k in gang_keys if gang_keys.count(k) > 1)
        raise ValueError(f"duplicate gang {dup!r}")
    order = ceilings.keep_order
    budget = _Budget(ceilings, prices)

    units: list[_Unit] = []
    price_micro: dict[str, int] = {}
    asked_gpus: dict[str, int] = {}
    for a in ask_list:
        price_micro[a.key] = _micro(prices.per_gpu_hour(a.nodepool) * a.gpus_per_replica)
    # Everything fits: then every unit fits in turn, so the units need not be made one replica at a time.
    fits = fits_ceilings(ask_list, gang_list, ceilings, prices)
    for a in ask_list:
        pool = a.nodepool or _NO_POOL
        per_replica = price_micro[a.key]
        budget.force(a.team, pool, a.gpus_per_replica * a.min_replicas, per_replica * a.min_replicas)
        asked_gpus[pool] = asked_gpus.get(pool, 0) + a.gpus_per_replica * (a.base_replicas + a.warm_units)
        if fits:
            continue
        cls = _class_index(order, "inference", a.priority)
        for k in range(1, a.base_replicas - a.min_replicas + 1):
            units.append(_Unit((cls, -a.priority, k, 0, a.key), a.key, "inference", a.team, pool,
                               a.gpus_per_replica, per_replica))
        cls = _class_index(order, "warm_pool", a.priority)
        for k in range(1, a.warm_units + 1):
            units.append(_Unit((cls, -a.priority, k, 0, a.key), a.key, "warm_pool", a.team, pool,
                               a.gpus_per_replica, per_replica))
    for g in gang_list:
        kind: UnitKind = "training_admitted" if g.admitted else "training_pending"
        micro = _micro(prices.per_gpu_hour(g.nodepool) * g.gpus)
        asked_gpus[g.nodepool or _NO_POOL] = asked_gpus.get(g.nodepool or _NO_POOL, 0) + g.gpus
        if fits:
            continue
        units.append(_Unit((_class_index(order, kind, g.priority), -g.priority, 0, 1, g.key), g.key, kind,
                           g.team, g.nodepool or _NO_POOL, g.gpus, micro, g))
    units.sort(key=lambda u: u.rank)

    unmeetable = tuple(s for s, lim in budget.limit.items() if lim is not None and budget.spent.get(s, 0) > lim)
    budget.closed.update(unmeetable)

    granted: dict[tuple[str, UnitKind], int] = {}
    refused: dict[tuple[str, UnitKind], tuple[int, str]] = {}  # (owner, kind) -> (units cut, first ceiling)
    gang_fate: dict[str, tuple[bool, str]] = {}
    if fits:
        for a in ask_list:
            granted[(a.key, "inference")] = a.base_replicas - a.min_replicas
            granted[(a.key, "warm_pool")] = a.warm_units
        for g in gang_list:
            gang_fate[g.key] = (True, _reserved(g.gpus, _micro(prices.per_gpu_hour(g.nodepool) * g.gpus)))
    for u in units:
        blocker = budget.blocker(u.team, u.pool, u.gpus, u.micro) if u.micro > 0 else None
        if blocker is None:
            budget.force(u.team, u.pool, u.gpus, u.micro)
            granted[(u.owner, u.kind)] = granted.get((u.owner, u.kind), 0) + 1
            if u.gang is not None:
                gang_fate[u.owner] = (True, _reserved(u.gpus, u.micro))
            continue
        if u.gang is not None:
            why = "is closed (a higher-ranked replica was cut)" if blocker in budget.closed else (
                f"would go over: {_fmt(budget.spent.get(blocker, 0))} spent + "
                f"{_fmt(budget.cost(blocker, u.pool, u.gpus, u.micro))} > "
                f"{_fmt(budget.limit[blocker] or 0)}")
            gang_fate[u.owner] = (False, f"deferred whole: {blocker} ceiling {why}")
        else:
            budget.closed.add(blocker)
        count, first = refused.get((u.owner, u.kind), (0, blocker))
        refused[(u.owner, u.kind)] = (count + 1, first)

    ask_by_key = {a.key: a for a in ask_list}
    gang_by_key = {g.key: g for g in gang_list}
    cuts: list[Cut] = []
    for (owner, kind), (count, scope) in refused.items():
        gang = gang_by_key.get(owner) if kind.startswith("training") else None
        if gang is not None:
            micro = _micro(prices.per_gpu_hour(gang.nodepool) * gang.gpus)
            cuts.append(Cut(owner, "gang", 1, gang.gpus, _dollars(micro), scope))
        else:
            per = ask_by_key[owner].gpus_per_replica
            cuts.append(Cut(owner, "replicas" if kind == "inference" else "warm_pool", count,
                            count * per, _dollars(count * price_micro[owner]), scope))
    cuts.sort(key=lambda c: (c.key, c.kind))

    team_micro: dict[str, int] = {}
    pool_gpus: dict[str, int] = {}
    outcomes: list[WorkloadOutcome] = []
    for a in ask_list:
        base = a.min_replicas + granted.get((a.key, "inference"), 0)
        warm = granted.get((a.key, "warm_pool"), 0)
        kept_units = base + warm
        micro = kept_units * price_micro[a.key]
        team_micro[a.team] = team_micro.get(a.team, 0) + micro
        pool = a.nodepool or _NO_POOL
        pool_gpus[pool] = pool_gpus.get(pool, 0) + kept_units * a.gpus_per_replica
        allowed_replicas = base + (warm if a.warm_pool_as == "replicas" else 0)
        allowed_warm = a.warm_pool_replicas - (a.warm_units - warm)
        asked_units = a.base_replicas + a.warm_units
        outcome = WorkloadOutcome(
            key=a.key, team=a.team, nodepool=a.nodepool,
            asked_replicas=a.desired_replicas, allowed_replicas=allowed_replicas,
            asked_warm_pool=a.warm_pool_replicas,
            allowed_warm_pool=allowed_warm,
            gpus=kept_units * a.gpus_per_replica,
            dollars_per_hour=_dollars(micro),
            cut_dollars_per_hour=_dollars((asked_units - kept_units) * price_micro[a.key]),
            detail="",
        )
        outcomes.append(outcome)
    for g in gang_list:
        if gang_fate.get(g.key, (True, ""))[0]:
            micro = _micro(prices.per_gpu_hour(g.nodepool) * g.gpus)
            team_micro[g.team] = team_micro.get(g.team, 0) + micro
            pool = g.nodepool or _NO_POOL
            pool_gpus[pool] = pool_gpus.get(pool, 0) + g.gpus
    total_micro = prices._bill_micro(pool_gpus)
    asked_micro = prices._bill_micro(asked_gpus)

    def whole_nodes(pool: str) -> str:
        """Why whole nodes cost replicas in ``pool`` under the cluster ceiling ("" for a pool billed per GPU)."""
        if prices.per_node(pool or None) <= 1 or budget.limit["cluster"] is None:
            return ""
        kept = pool_gpus.get(pool, 0)
        others = total_micro - prices._bill_micro({pool: kept})
        return _whole_nodes_note(pool, asked_gpus.get(pool, 0), kept, prices, others, budget.limit["cluster"])

    def scope_note(team: str) -> str:
        notes = []
        if f"team {team}" in budget.limit:
            notes.append(f"team {team} {_fmt(team_micro.get(team, 0))} of {_fmt(budget.limit[f'team {team}'] or 0)}")
        if budget.limit["cluster"] is not None:
            notes.append(f"cluster {_fmt(total_micro)} of {_fmt(budget.limit['cluster'] or 0)}")
        return "; ".join(notes)

    cuts_by_key: dict[str, list[Cut]] = {}
    for c in cuts:
        cuts_by_key.setdefault(c.key, []).append(c)
    final: list[WorkloadOutcome] = []
    for a, o in zip(ask_list, outcomes, strict=True):
        note = scope_note(a.team)
        if not note:  # no ceiling applies to this workload: no step
            final.append(o)
            continue
        per = price_micro[a.key]
        mine = cuts_by_key.get(a.key, [])
        if mine:
            parts = ", ".join(f"{c.count} {'replica' if c.kind == 'replicas' else 'warm replica'}(s) "
                              f"({c.gpus} GPU, ${c.dollars_per_hour:,.2f}/h) by the {c.ceiling} ceiling" for c in mine)
            warm_note = (f", warm pool {o.asked_warm_pool} -> {o.allowed_warm_pool}"
                         if o.allowed_warm_pool < o.asked_warm_pool else "")
            detail = (f"CUT {o.asked_replicas} -> {o.allowed_replicas} replicas{warm_note}: {parts}; "
                      f"keeps {o.gpus} GPU(s) = {_fmt(_micro(o.dollars_per_hour))} at {_fmt(per)} per replica; {note}")
            nodes_note = whole_nodes(a.nodepool or _NO_POOL) if any(c.ceiling == "cluster" for c in mine) else ""
            if nodes_note:
                detail += f"; whole nodes: {nodes_note}"
        else:
            detail = f"within ceilings: {o.gpus} GPU(s) = {_fmt(_micro(o.dollars_per_hour))}; {note}"
        if any(s in unmeetable for s in budget.scopes(a.team)):
            detail += "; ceiling CANNOT be met: the minimum replicas alone exceed it"
        final.append(replace(o, detail=detail))

    gang_outcomes = tuple(
        GangOutcome(
            gang=g,
            reserved=gang_fate[g.key][0],
            dollars_per_hour=_dollars(_micro(prices.per_gpu_hour(g.nodepool) * g.gpus)),
            reason=gang_fate[g.key][1],
        )
        for g in sorted(gang_list, key=lambda g: g.key)
    )
    return CostReport(
        cluster_dollars_per_hour=_dollars(total_micro),
        asked_dollars_per_hour=_dollars(asked_micro),
        team_dollars_per_hour=MappingProxyType({t: _dollars(v) for t, v in sorted(team_micro.items())}),
        cluster_ceiling=ceilings.cluster,
        team_ceilings=ceilings.teams,
        workloads=tuple(final),
        gangs=gang_outcomes,
        cuts=tuple(cuts),
        unmeetable=unmeetable,
        gpus_by_pool=MappingProxyType(dict(sorted(pool_gpus.items()))),
        horizon_seconds=horizon_seconds,
    )
