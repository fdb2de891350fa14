"""GPU demand -> whole nodes per Karpenter NodePool: the shape of a pool, the headroom to ask for, its limit.

Why a module of its own: pods ask for GPUs, but Karpenter buys nodes, and a node takes minutes to
start. Three questions follow, each a pure function here so the controller, the simulator and the
tests answer them the same way:

* ``pool_shape``: how many GPUs a node of this NodePool has and what a GPU-hour costs there, read
  from the NodePool's ``spec.template.spec.requirements`` (``node.kubernetes.io/instance-type``,
  ``karpenter.k8s.aws/instance-gpu-count``, ``karpenter.k8s.aws/instance-gpu-name``,
  ``karpenter.sh/capacity-type``) and the ``pricing`` config, whose ``nodepools`` entries win.
  When a pool allows several instance types the *smallest* GPU count and the *highest* GPU-hour
  price are used: more nodes and more dollars than reality, never fewer, so a ceiling is never
  broken by a guess.
* ``pool_demand``: GPUs per pool (replicas x GPUs per replica + warm pools kept as nodes + reserved gangs) in
  whole nodes (``ceil(gpus / gpus_per_node)``). The spare nodes asked of Karpenter *before* the pods exist are
  sized from the pooled forecast error (``autoscaler.engine.headroom``) in whole nodes, held as a CapacityBuffer or
  as low-priority placeholder pods of one whole node each (a preempted placeholder frees a node, not a fragment).
* ``nodepool_limit``: the ``spec.limits["nvidia.com/gpu"]`` value that lets the pool grow to what the
  cost ceiling allows and no further, but never below what is running (a limit under the current
  capacity would not remove nodes; it would only make the controller's own plan look impossible).

A simplification, and why (docs/ARCHITECTURE.md, "Whole nodes"): the node arithmetic assumes GPUs pack
onto nodes (no fragmentation between replicas of different sizes); Karpenter's own simulation does the
real packing, and a buffer of whole nodes absorbs the error. No I/O: the NodePool arrives as a plain dict.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from autoscaler.domain.cost import CapacityType, CostReport, GpuPrices, PriceTable, WorkloadAsk
from autoscaler.domain.gangs import Gang

__all__ = [
    "CAPACITY_TYPE_KEY",
    "GPU_COUNT_KEY",
    "GPU_NAME_KEY",
    "INSTANCE_TYPE_KEY",
    "NodePoolError",
    "PoolDemand",
    "PoolShape",
    "ceiling_gpus",
    "gpu_prices",
    "nodepool_limit",
    "nodes_for",
    "pool_demand",
    "pool_shape",
]

INSTANCE_TYPE_KEY = "node.kubernetes.io/instance-type"
GPU_COUNT_KEY = "karpenter.k8s.aws/instance-gpu-count"
GPU_NAME_KEY = "karpenter.k8s.aws/instance-gpu-name"
CAPACITY_TYPE_KEY = "karpenter.sh/capacity-type"


class NodePoolError(ValueError):
    """A NodePool whose GPUs per node cannot be known, or a malformed one; the message says what to set."""


def nodes_for(gpus: int, gpus_per_node: int) -> int:
    """Whole nodes for ``gpus``: ``ceil(gpus / gpus_per_node)`` (0 GPUs -> 0 nodes)."""
    if gpus_per_node < 1:
        raise ValueError(f"gpus_per_node must be >= 1, got {gpus_per_node}")
    if gpus < 0:
        raise ValueError(f"gpus must be >= 0, got {gpus}")
    return -(-gpus // gpus_per_node)


@dataclass(frozen=True)
class PoolShape:
    """One NodePool as the money side sees it. ``source`` says where the numbers came from (for ``explain``)."""

    name: str
    gpus_per_node: int
    gpu_hour: float
    capacity_type: CapacityType
    instance_types: tuple[str, ...] = ()
    source: str = ""

    @property
    def node_hour(self) -> float:
        return self.gpu_hour * self.gpus_per_node


def _requirements(name: str, nodepool: Mapping[str, Any]) -> dict[str, tuple[str, tuple[str, ...]]]:
    """``key -> (operator, values)`` from ``spec.template.spec.requirements``."""
    spec = nodepool.get("spec")
    template = spec.get("template") if isinstance(spec, Mapping) else None
    tspec = template.get("spec") if isinstance(template, Mapping) else None
    reqs = tspec.get("requirements") if isinstance(tspec, Mapping) else None
    if not isinstance(reqs, Sequence) or isinstance(reqs, str):
        raise NodePoolError(f"NodePool {name}: spec.template.spec.requirements: missing or not a list")
    out: dict[str, tuple[str, tuple[str, ...]]] = {}
    for i, req in enumerate(reqs):
        if not (isinstance(req, Mapping) and isinstance(req.get("key"), str) and isinstance(req.get("operator"), str)):
            raise NodePoolError(f"NodePool {name}: spec.template.spec.requirements[{i}]: needs a key and an operator")
        values = req.get("values") or []
        out[req["key"]] = (req["operator"], tuple(str(v) for v in values))
    return out


def _allowed(req: tuple[str, tuple[str, ...]] | None) -> tuple[str, ...] | None:
    """The values an ``In`` requirement allows (None = not restricted to a list)."""
    if req is None or req[0] != "In":
        return None
    return req[1]


def pool_shape(name: str, nodepool: Mapping[str, Any] | None, prices: PriceTable) -> PoolShape:
    """GPUs per node and $/GPU-hour of NodePool ``name`` (``nodepool`` = the object, None when only config knows it).

    Precedence for GPUs per node: ``pricing.nodepools.NAME.gpus_per_node``; the configured instance
    type; the smallest GPU count among the pool's ``In`` instance types known to ``pricing``; the
    smallest ``instance-gpu-count`` value. For the price: ``pricing.nodepools.NAME.gpu_hour``; the
    highest GPU-hour price among the known instance types; among the GPU names; ``default_gpu_hour``.
    """
    override = prices.nodepools.get(name)
    reqs = _requirements(name, nodepool) if nodepool is not None else {}
    cap_values = _allowed(reqs.get(CAPACITY_TYPE_KEY)) or ()
    capacity: CapacityType
    if override is not None and override.capacity_type is not None:
        capacity = override.capacity_type
    elif cap_values and set(cap_values) == {"spot"}:
        capacity = "spot"
    elif cap_values and set(cap_values) == {"on-demand"}:
        capacity = "on-demand"
    else:
        capacity = prices.capacity_type

    if override is not None and override.instance_type is not None:
        type_names: tuple[str, ...] = (override.instance_type,)
    else:
        type_names = _allowed(reqs.get(INSTANCE_TYPE_KEY)) or ()
    known = [prices.instance_types[t] for t in type_names if t in prices.instance_types]
    if override is not None and override.instance_type is not None and not known:
        raise NodePoolError(f"pricing.nodepools.{name}.instance_type: {override.instance_type!r} is not in "
                            f"pricing.instance_types")

    sources: list[str] = []
    gpus: int | None = None
    if override is not None and override.gpus_per_node is not None:
        gpus = override.gpus_per_node
        sources.append("gpus_per_node from config")
    elif known:
        gpus = min(t.gpus for t in known)
        sources.append(f"gpus_per_node from {', '.join(t.name for t in known)}")
    else:
        counts = _allowed(reqs.get(GPU_COUNT_KEY))
        if counts:
            try:
                values = [int(c) for c in counts]
            except ValueError:
                bad = list(counts)
                raise NodePoolError(f"NodePool {name}: {GPU_COUNT_KEY} values {bad} are not integers") from None
            if min(values) >= 1:
                gpus = min(values)
                sources.append(f"gpus_per_node from {GPU_COUNT_KEY}")
    if gpus is None:
        raise NodePoolError(
            f"NodePool {name}: GPUs per node unknown: list its instance types in pricing.instance_types, require "
            f"{GPU_COUNT_KEY} In [...], or set pricing.nodepools.{name}.gpus_per_node"
        )

    gpu_names = _allowed(reqs.get(GPU_NAME_KEY)) or ()
    known_gpus = [prices.gpu_types[g] for g in gpu_names if g in prices.gpu_types]
    if override is not None and override.gpu_hour is not None:
        price = override.gpu_hour
        sources.append("price from config")
    elif known:
        price = max(t.gpu_hour(capacity) for t in known)
        sources.append(f"price from instance type(s) ({capacity})")
    elif known_gpus:
        price = max(g.gpu_hour(capacity) for g in known_gpus)
        sources.append(f"price from GPU type(s) ({capacity})")
    else:
        price = prices.default_gpu_hour
        sources.append("default GPU-hour price")
    return PoolShape(name, gpus, price, capacity, tuple(type_names), "; ".join(sources))


def gpu_prices(shapes: Iterable[PoolShape], prices: PriceTable) -> GpuPrices:
    """The $/GPU-hour table ``enforce_ceilings`` needs, from the pools' shapes."""
    shapes = list(shapes)
    return GpuPrices(by_pool={s.name: s.gpu_hour for s in shapes}, default=prices.default_gpu_hour,
                     gpus_per_node={s.name: s.gpus_per_node for s in shapes})


# ---------------------------------------------------------------------------------------------- demand


@dataclass(frozen=True)
class PoolDemand:
    """GPUs one pool must hold, by source, and the whole nodes that takes (None when the pool's shape is unknown)."""

    pool: str
    replica_gpus: int
    warm_gpus: int  # warm pools kept as nodes (warm replicas kept as pods are in replica_gpus)
    gang_gpus: int
    gpus_per_node: int | None
    nodes: int | None

    @property
    def gpus(self) -> int:
        return self.replica_gpus + self.warm_gpus + self.gang_gpus


def pool_demand(
    asks: Iterable[WorkloadAsk], gangs: Iterable[Gang], shapes: Mapping[str, PoolShape]
) -> dict[str, PoolDemand]:
    """GPUs and nodes per NodePool for a plan (``""`` collects workloads that name no pool).

    ``asks`` should be the plan *after* the ceilings (``WorkloadAsk.from_decision`` on the decisions
    ``CostReport.apply`` returned) and ``gangs`` the reserved ones (``CostReport.gangs_reserved``)
    that run at the time asked about (``place_gang`` says when). Inactive gangs are ignored.
    """
    parts: dict[str, list[int]] = {}
    for a in asks:
        entry = parts.setdefault(a.nodepool or "", [0, 0, 0])
        entry[0] += a.desired_replicas * a.gpus_per_replica
        if a.warm_pool_as == "nodes":
            entry[1] += a.warm_pool_replicas * a.gpus_per_replica
    for g in gangs:
        if not g.inactive:
            parts.setdefault(g.nodepool or "", [0, 0, 0])[2] += g.gpus
    out: dict[str, PoolDemand] = {}
    for pool, (rep, warm, gang) in sorted(parts.items()):
        shape = shapes.get(pool)
        gpn = shape.gpus_per_node if shape is not None else None
        out[pool] = PoolDemand(pool, rep, warm, gang, gpn, nodes_for(rep + warm + gang, gpn) if gpn else None)
    return out


# ---------------------------------------------------------------------------------------------- limits


def ceiling_gpus(report: CostReport, shape: PoolShape) -> int | None:
    """GPUs the cluster ceiling lets ``shape``'s pool hold, in whole nodes: the nodes the plan keeps there plus the
    whole nodes the remaining budget buys at the pool's node price. None when there is no cluster ceiling (the pool
    is not cost-limited). The plan is billed in whole nodes (``cost.GpuPrices``), so the nodes it keeps are paid for
    and the slack is what is left after them."""
    slack = report.cluster_slack_dollars_per_hour
    if slack is None:
        return None
    kept_nodes = nodes_for(report.gpus_by_pool.get(shape.name, 0), shape.gpus_per_node)
    extra = math.floor(slack / shape.node_hour + 1e-9) if shape.node_hour > 0 else 0
    return (kept_nodes + extra) * shape.gpus_per_node


def nodepool_limit(shape: PoolShape, allowed_gpus: int, running_gpus: int) -> int:
    """``spec.limits["nvidia.com/gpu"]`` for the pool: the allowed GPUs in whole nodes, never below ``running_gpus``.

    ``allowed_gpus`` is what the cost ceiling allows (``ceiling_gpus``); ``running_gpus`` is the GPU
    capacity of the pool's current nodes (Karpenter compares its limits with node capacity, not with
    pod requests). Whole nodes are rounded *up*: the plan's GPUs must fit on nodes, and the at most
    ``gpus_per_node - 1`` GPUs of overshoot are the price of buying nodes, not GPUs.
    """
    if allowed_gpus < 0 or running_gpus < 0:
        raise ValueError(f"GPU counts must be >= 0, got allowed {allowed_gpus}, running {running_gpus}")
    return max(running_gpus, nodes_for(allowed_gpus, shape.gpus_per_node) * shape.gpus_per_node)

