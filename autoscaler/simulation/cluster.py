"""A discrete-time model of GPU Deployments on autoscaled node pools.

Why it exists: a scaling policy is only as good as the capacity it has *Ready* when requests land,
and readiness lags a decision by the pod start-up (image pull + model load) and, when no node has a
free GPU, by node provisioning too. This module replays exactly that lag, for any policy, so the
simulator can charge every policy the same start-up delays and the same bill.

The model (the ``simulate`` command documents the same rules to users):

* Time advances in ticks of ``tick_seconds`` (15 s, the HPA sync period). A replica asked for at
  ``t`` is Ready at ``t + pod_startup`` when a node (existing, or already being provisioned) has
  ``gpus_per_replica`` free GPUs, else a node is provisioned for it and it is Ready at
  ``t + node_startup + pod_startup``. A replica placed on a node that is still provisioning is Ready
  ``pod_startup`` after that node is. Readiness is observed at tick resolution (rounded up).
* Placement: a Ready node with a free GPU before one still provisioning, then the fullest node first
  (bin-packing, like the scheduler's ``MostAllocated`` scoring), so scale-in empties whole nodes.
* Scale-down removes replicas in the Kubernetes ReplicaSet order that matters here: not-yet-Ready
  replicas first (the one furthest from Ready first), then Ready replicas, newest first
  (``NEWEST_FIRST``). A Deployment whose pods the controller marks before a scale-down (``pod-deletion-cost``,
  ``autoscaler.domain.scaledown``: our policy, ``scale_in`` of the policy) loses its Ready replicas on the emptiest
  nodes first, the most recently Ready among equals (``EMPTIEST_NODE_FIRST``), so nodes empty and are consolidated.
* Nodes: an empty node is removed ``consolidate_after_seconds`` after it became empty (Karpenter's
  ``consolidationPolicy: WhenEmpty`` with ``consolidateAfter``); a replica placed on it before then
  cancels the removal and starts without node provisioning.
* Billing: a replica's GPUs are paid from the moment the replica is asked for until it is released
  (Ready or not: a starting replica holds its GPU). Idle GPUs on nodes that hold no replica of this
  Deployment are *not* charged to it: the node pool is shared, and what this Deployment costs is
  the GPUs it holds. Because asks and releases happen on ticks, GPU-seconds are
  ``sum(requested replicas per tick) * tick * gpus_per_replica``.

Shared nodes (the fleet, ``autoscaler.simulation.fleet``): a ``NodePool`` holds the nodes of one Karpenter
NodePool, and every Deployment on it is a ``Cluster`` built on that pool, so their pods share nodes (placed
by GPUs: a node holds any mix of replicas whose GPUs fit). A ``Cluster`` built without a pool gets a private
one, which is the single-Deployment model above, unchanged. A pool may refuse a new node (its GPU limit, or
the fleet's cost ceiling as billed, ``NodePool.may_add_node``): the pod then stays Pending, holds no GPU,
and is placed, first in first out, when room frees or a node may be added. A pool may also keep
``reserve`` empty nodes from consolidation (the fleet's forecast-sized headroom) and provision empty nodes
ahead of pods (``NodePool.provision``); a reserved node's ``consolidateAfter`` starts when it stops being
reserved, as when Karpenter sees its placeholder pods go.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from autoscaler.ports import PoolGpus

# GPUs per node where nothing says otherwise: a p4d/p5-class node (also what a self-tuning replay assumes for a
# Deployment that names no NodePool, or one whose shape the controller could not read)
DEFAULT_GPUS_PER_NODE = 8

# Which Ready replica a scale-down removes (``Cluster.scale_in``): the ReplicaSet's own order (no pod marked: the HPA's
# Deployments), or the controller's marks, which rank pods by the GPUs in use on their node, fewest first
# (``autoscaler.domain.scaledown``; the simulated pods carry equal loads, so the tie-break is the most recently Ready)
ScaleIn = Literal["newest", "emptiest-node"]
NEWEST_FIRST: ScaleIn = "newest"
EMPTIEST_NODE_FIRST: ScaleIn = "emptiest-node"


@dataclass(frozen=True)
class ClusterConfig:
    """Start-up delays and the node shape. All durations in seconds."""

    pod_startup_seconds: int = 120
    node_startup_seconds: int = 180
    gpus_per_replica: int = 1
    gpus_per_node: int = DEFAULT_GPUS_PER_NODE
    consolidate_after_seconds: int = 60
    tick_seconds: int = 15

    def __post_init__(self) -> None:
        for name in ("pod_startup_seconds", "node_startup_seconds", "consolidate_after_seconds"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 0:
                raise ValueError(f"ClusterConfig.{name} must be an integer >= 0, got {value!r}")
        if not isinstance(self.tick_seconds, int) or self.tick_seconds <= 0:
            raise ValueError(f"ClusterConfig.tick_seconds must be an integer > 0, got {self.tick_seconds!r}")
        if not isinstance(self.gpus_per_replica, int) or self.gpus_per_replica < 1:
            raise ValueError(f"gpus per replica must be an integer >= 1, got {self.gpus_per_replica!r}")
        if not isinstance(self.gpus_per_node, int) or self.gpus_per_node < 1:
            raise ValueError(f"gpus per node must be an integer >= 1, got {self.gpus_per_node!r}")
        if self.gpus_per_replica > self.gpus_per_node:
            raise ValueError(
                f"a replica needs {self.gpus_per_replica} GPUs but a node holds only {self.gpus_per_node}: "
                "it could never be scheduled"
            )

    @property
    def replicas_per_node(self) -> int:
        return self.gpus_per_node // self.gpus_per_replica

    def ticks(self, seconds: float) -> int:
        """A duration in whole ticks, rounded up (readiness is observed at tick resolution)."""
        return math.ceil(seconds / self.tick_seconds - 1e-9)


class _Node:
    __slots__ = ("empty_since", "ready_seconds", "used")

    def __init__(self, ready_seconds: float) -> None:
        self.ready_seconds = ready_seconds  # since the simulation's start, exact (not rounded to ticks)
        self.used = 0  # GPUs held by the replicas placed on it
        self.empty_since: int | None = None


class _Replica:
    __slots__ = ("ask_tick", "gpus", "node", "ready_tick")

    def __init__(self, ask_tick: int, ready_tick: int | None, node: _Node | None, gpus: int) -> None:
        self.ask_tick = ask_tick
        self.ready_tick = ready_tick  # None while Pending (no node yet)
        self.node = node
        self.gpus = gpus


_NEVER = 1 << 62


class NodePool:
    """The nodes of one NodePool, shared by the ``Cluster`` of every Deployment placed on it.

    ``max_nodes`` is the pool's limit in whole nodes (None: unlimited); ``may_add_node`` (called with no
    argument each time a node would be created) may refuse one more node, e.g. above a cost ceiling as billed.
    """

    def __init__(self, gpus_per_node: int, node_startup_seconds: int, consolidate_after_seconds: int,
                 tick_seconds: int, max_nodes: int | None = None,
                 may_add_node: Callable[[], bool] | None = None, name: str | None = None) -> None:
        if gpus_per_node < 1:
            raise ValueError(f"gpus per node must be an integer >= 1, got {gpus_per_node!r}")
        self.gpus_per_node = gpus_per_node
        self.node_startup_seconds = node_startup_seconds
        self.tick_seconds = tick_seconds
        self.consolidate_ticks = math.ceil(consolidate_after_seconds / tick_seconds - 1e-9)
        self.max_nodes = max_nodes
        self.may_add_node = may_add_node
        # the Karpenter NodePool's name (None: a Deployment's private pool, which names no NodePool, so the
        # controller reads no free GPUs for it: ``ready_free_gpus`` is what it would read of a named one)
        self.name = name
        self._claimed = (-1, 0)  # (tick, free GPUs the decisions of that tick took: ``claim``)
        self.nodes: list[_Node] = []
        self.pending: list[tuple[_Replica, int]] = []  # (replica, pod start-up seconds), oldest first
        self.nodes_created = 0
        self.reserve = 0  # empty nodes kept from consolidation (headroom)
        self.lent = 0  # GPUs its spare replicas hold (``engine.spare``; set by the fleet at each lending)
        self._advanced = -1

    @classmethod
    def for_config(cls, config: ClusterConfig) -> NodePool:
        """A private pool for one Deployment, as ``config`` describes it."""
        return cls(config.gpus_per_node, config.node_startup_seconds, config.consolidate_after_seconds,
                   config.tick_seconds)

    # -- counters -------------------------------------------------------------------------------
    @property
    def node_count(self) -> int:
        """Nodes that exist or are being provisioned (what Karpenter bills)."""
        return len(self.nodes)

    def empty_nodes(self) -> int:
        return sum(1 for n in self.nodes if n.used == 0)

    def used_gpus(self) -> int:
        return sum(n.used for n in self.nodes)

    def free_gpus_for(self, gpus_per_replica: int) -> int:
        """GPUs on existing or provisioning nodes usable by replicas of ``gpus_per_replica`` GPUs."""
        g = self.gpus_per_node
        return sum((g - n.used) // gpus_per_replica for n in self.nodes) * gpus_per_replica

    def ready_free_gpus(self, k: int, gpus_per_replica: int) -> int:
        """What the controller shows a decision of the pool at tick ``k``: free GPUs on the nodes that are Ready (a node
        still provisioning is no Node object yet), usable by replicas of ``gpus_per_replica`` GPUs, less what this
        tick's decisions claimed, plus the GPUs its spare replicas hold (``lent``: given back when a plan needs
        them, ``engine.spare``)."""
        lent = self.lent // gpus_per_replica * gpus_per_replica
        return max(0, self._ready_free(k, gpus_per_replica) + lent - self._taken(k))

    def _ready_free(self, k: int, gpus_per_replica: int) -> int:
        g, now = self.gpus_per_node, k * self.tick_seconds
        return sum((g - n.used) // gpus_per_replica for n in self.nodes if n.ready_seconds <= now) * gpus_per_replica

    def _taken(self, k: int) -> int:
        return self._claimed[1] if self._claimed[0] == k else 0

    def pool_gpus(self, k: int) -> PoolGpus:
        """What the controller reads of the pool at tick ``k`` (``ports.PoolNodes.pool_gpus``): on the Ready nodes (a
        node still provisioning is no Node object yet) the free GPUs less what this tick's decisions claimed, the
        nodes where replicas hold GPUs and the free GPUs on them; and every node, provisioning ones included (what
        Karpenter bills). Reserved headroom nodes are empty here, as our placeholders hold no GPU in the read."""
        g, now = self.gpus_per_node, k * self.tick_seconds
        ready = [n for n in self.nodes if n.ready_seconds <= now]
        busy = [n for n in ready if n.used > 0]
        partial = sum(g - n.used for n in busy)
        free = max(0, self._ready_free(k, 1) - self._taken(k))
        return PoolGpus(free=free, busy_nodes=len(busy), partial_free=partial, nodes=len(self.nodes))

    def claim(self, k: int, gpus: int) -> None:
        """Free GPUs a decision at tick ``k`` took (``engine.deciding.Decided.claimed_gpus``): not shown to the next
        Deployment deciding at ``k``, as the controller's tick takes them off before planning the next one."""
        taken = self._claimed[1] if self._claimed[0] == k else 0
        self._claimed = (k, taken + max(0, gpus))

    def can_add_node(self) -> bool:
        if self.max_nodes is not None and len(self.nodes) >= self.max_nodes:
            return False
        return self.may_add_node is None or self.may_add_node()

    # -- time -----------------------------------------------------------------------------------
    def advance(self, k: int) -> None:
        """Move to tick ``k`` (once per tick, whichever Deployment asks first): reserved empty nodes stay, other
        empty nodes past ``consolidateAfter`` go, and Pending pods are placed where they now fit."""
        if k <= self._advanced:
            return
        self._advanced = k
        if self.nodes:
            kept: set[int] = set()
            if self.reserve > 0:
                # the Ready (earliest) empty nodes are the reserve: they serve a scale-up soonest; their
                # consolidateAfter starts afresh when they leave it
                empty = sorted((n for n in self.nodes if n.used == 0), key=lambda n: n.ready_seconds)
                for n in empty[: self.reserve]:
                    n.empty_since = k
                    kept.add(id(n))
            self.nodes = [
                n for n in self.nodes
                if n.empty_since is None or k - n.empty_since < self.consolidate_ticks or id(n) in kept
            ]
        if self.pending:
            self.place_pending(k)

    def place_pending(self, k: int) -> None:
        """Place Pending pods, oldest first, where they fit (or on a new node when one may be added)."""
        still: list[tuple[_Replica, int]] = []
        blocked = False
        for replica, pod_startup in self.pending:
            if blocked or not self._place(k, replica, pod_startup):
                blocked = True  # first in, first out: a later pod does not jump a blocked one
                still.append((replica, pod_startup))
        self.pending = still

    def provision(self, k: int, count: int) -> int:
        """Create up to ``count`` empty nodes at tick ``k`` (headroom ahead of pods); returns how many were."""
        made = 0
        now = k * self.tick_seconds
        for _ in range(count):
            if not self.can_add_node():
                break
            node = self.new_node(now + self.node_startup_seconds)
            node.empty_since = k
            made += 1
        return made

    def hold_idle(self, k: int, nodes: int) -> None:
        """What Karpenter does with ``nodes`` whole-node placeholders at tick ``k``: that many empty nodes are kept
        from consolidation and provisioned when missing; the rest are left to consolidate."""
        self.reserve = nodes
        empty = self.empty_nodes()
        if empty < nodes:
            self.provision(k, nodes - empty)

    # -- placement ------------------------------------------------------------------------------
    def new_node(self, ready_seconds: float) -> _Node:
        node = _Node(ready_seconds)
        self.nodes.append(node)
        self.nodes_created += 1
        return node

    def node_with_room(self, k: int, gpus: int) -> _Node | None:
        """A Ready node before a provisioning one (the replica serves sooner), then the fullest (bin-packing)."""
        best: _Node | None = None
        best_key = (False, -1)
        now = k * self.tick_seconds
        room = self.gpus_per_node - gpus
        for node in self.nodes:
            if node.used <= room:
                key = (node.ready_seconds <= now, node.used)
                if best is None or key > best_key:
                    best, best_key = node, key
        return best

    def _place(self, k: int, replica: _Replica, pod_startup_seconds: int) -> bool:
        now = k * self.tick_seconds
        node = self.node_with_room(k, replica.gpus)
        if node is None:
            if not self.can_add_node():
                return False
            node = self.new_node(ready_seconds=now + self.node_startup_seconds)
        # Ready one pod start-up after both the placement and the node, observed at the next tick
        replica.ready_tick = k + math.ceil(
            (max(0.0, node.ready_seconds - now) + pod_startup_seconds) / self.tick_seconds - 1e-9)
        replica.node = node
        node.used += replica.gpus
        node.empty_since = None
        return True

    def add(self, k: int, replica: _Replica, pod_startup_seconds: int) -> None:
        """A new pod at tick ``k``: placed now, or Pending behind the pods already waiting."""
        if self.pending or not self._place(k, replica, pod_startup_seconds):
            self.pending.append((replica, pod_startup_seconds))

    def release(self, k: int, replica: _Replica) -> None:
        """A pod removed at tick ``k``: its GPUs are freed (or it leaves the Pending queue)."""
        node = replica.node
        if node is None:
            self.pending = [(r, s) for r, s in self.pending if r is not replica]
            return
        node.used -= replica.gpus
        replica.node = None
        if node.used == 0:
            node.empty_since = k


class Cluster:
    """The replicas of one Deployment and the nodes they sit on, advanced tick by tick.

    Time is an integer tick index; ``advance(k)`` must be called with non-decreasing ``k`` before
    ``scale_to(k, n)``. Counters: ``requested`` (asked for, Ready or starting), ``ready``. With ``pool`` the
    nodes are shared with the other Deployments built on it; without, the Deployment has a pool of its own.
    """

    def __init__(self, config: ClusterConfig, initial_ready: int, pool: NodePool | None = None,
                 scale_in: ScaleIn = NEWEST_FIRST) -> None:
        if initial_ready < 0:
            raise ValueError(f"initial replicas must be >= 0, got {initial_ready}")
        if pool is not None and pool.gpus_per_node < config.gpus_per_replica:
            raise ValueError(f"a replica needs {config.gpus_per_replica} GPUs but a node holds only "
                             f"{pool.gpus_per_node}: it could never be scheduled")
        if scale_in not in (NEWEST_FIRST, EMPTIEST_NODE_FIRST):
            raise ValueError(f"scale_in must be {NEWEST_FIRST!r} or {EMPTIEST_NODE_FIRST!r}, got {scale_in!r}")
        self.config = config
        self.scale_in = scale_in
        self.pool = pool if pool is not None else NodePool.for_config(config)
        self._gpr = config.gpus_per_replica
        self.ready_replicas: list[_Replica] = []  # in ask order: newest last
        self.starting: list[_Replica] = []  # starting or Pending
        self.pod_startups: list[int] = []  # ticks from ask to Ready, one per replica that became Ready
        created = self.pool.nodes_created
        for _ in range(initial_ready):
            node = self.pool.node_with_room(0, self._gpr)
            if node is None:
                node = self.pool.new_node(ready_seconds=0.0)
            node.used += self._gpr
            node.empty_since = None
            self.ready_replicas.append(_Replica(0, 0, node, self._gpr))
        self.pool.nodes_created = created  # the initial nodes were there before the simulation

    # -- counters -------------------------------------------------------------------------------
    @property
    def nodes(self) -> list[_Node]:
        """The nodes of the pool (shared with the other Deployments on it, if any)."""
        return self.pool.nodes

    @property
    def nodes_created(self) -> int:
        return self.pool.nodes_created

    @property
    def ready(self) -> int:
        return len(self.ready_replicas)

    @property
    def requested(self) -> int:
        return len(self.ready_replicas) + len(self.starting)

    @property
    def placed(self) -> int:
        """Replicas that hold GPUs (Ready or starting on a node; not Pending)."""
        return len(self.ready_replicas) + sum(1 for r in self.starting if r.node is not None)

    def free_gpus(self) -> int:
        """GPUs free on nodes that exist or are being provisioned (where a new replica needs no new node)."""
        return self.pool.free_gpus_for(self._gpr)

    def waiting_for_node(self, k: int) -> tuple[float, ...]:
        """The ages at tick ``k`` (seconds since asked) of the replicas without a Ready node: their node is still
        provisioning, or none could be had (a NodePool limit, a ceiling): what the API server shows as pods Pending
        unschedulable until a node joins."""
        now = k * self.config.tick_seconds
        return tuple(float(now - r.ask_tick * self.config.tick_seconds)
                     for r in self.starting if r.node is None or r.node.ready_seconds > now)

    def slots(self, include_empty: bool = True) -> int:
        """Replicas the current nodes can hold; ``include_empty=False`` leaves out nodes due for removal."""
        per_node = self.pool.gpus_per_node // self._gpr
        return sum(per_node for n in self.nodes if include_empty or n.used > 0)

    # -- time -----------------------------------------------------------------------------------
    def advance(self, k: int) -> None:
        """Move to tick ``k``: replicas whose start-up is over become Ready; empty nodes past their delay go."""
        if self.starting:
            still = []
            for r in self.starting:
                if r.ready_tick is not None and r.ready_tick <= k:
                    self.ready_replicas.append(r)
                    self.pod_startups.append(r.ready_tick - r.ask_tick)
                else:
                    still.append(r)
            if len(still) != len(self.starting):
                # keep ready_replicas in ask order so "newest first" stays true on scale-down
                self.ready_replicas.sort(key=lambda r: r.ask_tick)
                self.starting = still
        self.pool.advance(k)

    def scale_to(self, k: int, desired: int) -> None:
        """Set the Deployment's replica count at tick ``k``."""
        desired = max(0, int(desired))
        n = self.requested
        if desired > n:
            for _ in range(desired - n):
                replica = _Replica(k, None, None, self._gpr)
                self.starting.append(replica)
                self.pool.add(k, replica, self.config.pod_startup_seconds)
        elif desired < n:
            for _ in range(n - desired):
                self._remove(k)

    # -- internals ------------------------------------------------------------------------------
    def _remove(self, k: int) -> None:
        if self.starting:
            # the replica furthest from Ready goes first (a Pending one before any placed one)
            def key(i: int) -> tuple[int, int]:
                r = self.starting[i]
                return (_NEVER if r.ready_tick is None else r.ready_tick, r.ask_tick)

            victim = self.starting.pop(max(range(len(self.starting)), key=key))
        elif self.scale_in == EMPTIEST_NODE_FIRST:
            ready = self.ready_replicas

            def emptiest(i: int) -> tuple[int, int, int]:
                r = ready[i]
                return (r.node.used if r.node is not None else 0, -(r.ready_tick or 0), -i)

            victim = ready.pop(min(range(len(ready)), key=emptiest))
        else:
            victim = self.ready_replicas.pop()
        self.pool.release(k, victim)
