"""A discrete-time model of one GPU Deployment on an autoscaled node pool.

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
  replicas first (the one furthest from Ready first), then Ready replicas, newest first.
* Nodes: an empty node is removed ``consolidate_after_seconds`` after it became empty (Karpenter's
  ``consolidationPolicy: WhenEmpty`` with ``consolidateAfter``); a replica placed on it before then
  cancels the removal and starts without node provisioning.
* Billing: a replica's GPUs are paid from the moment the replica is asked for until it is released
  (Ready or not: a starting replica holds its GPU). Idle GPUs on nodes that hold no replica of this
  Deployment are *not* charged to it: the node pool is shared, and what this Deployment costs is
  the GPUs it holds. Because asks and releases happen on ticks, GPU-seconds are
  ``sum(requested replicas per tick) * tick * gpus_per_replica``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class ClusterConfig:
    """Start-up delays and the node shape. All durations in seconds."""

    pod_startup_seconds: int = 120
    node_startup_seconds: int = 180
    gpus_per_replica: int = 1
    gpus_per_node: int = 8
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
        self.used = 0  # replicas placed on it
        self.empty_since: int | None = None


class _Replica:
    __slots__ = ("ask_tick", "node", "ready_tick")

    def __init__(self, ask_tick: int, ready_tick: int, node: _Node) -> None:
        self.ask_tick = ask_tick
        self.ready_tick = ready_tick
        self.node = node


class Cluster:
    """The replicas of one Deployment and the nodes they sit on, advanced tick by tick.

    Time is an integer tick index; ``advance(k)`` must be called with non-decreasing ``k`` before
    ``scale_to(k, n)``. Counters: ``requested`` (asked for, Ready or starting), ``ready``.
    """

    def __init__(self, config: ClusterConfig, initial_ready: int) -> None:
        if initial_ready < 0:
            raise ValueError(f"initial replicas must be >= 0, got {initial_ready}")
        self.config = config
        self._consolidate_ticks = config.ticks(config.consolidate_after_seconds)
        self._per_node = config.replicas_per_node
        self.nodes: list[_Node] = []
        self.ready_replicas: list[_Replica] = []  # in ask order: newest last
        self.starting: list[_Replica] = []
        self.nodes_created = 0
        self.pod_startups: list[int] = []  # ticks from ask to Ready, one per replica that became Ready
        for _ in range(initial_ready):
            node = self._node_with_room(0)
            if node is None:
                node = self._new_node(ready_seconds=0.0)
            node.used += 1
            self.ready_replicas.append(_Replica(0, 0, node))
        self.nodes_created = 0  # the initial nodes were there before the simulation

    # -- counters -------------------------------------------------------------------------------
    @property
    def ready(self) -> int:
        return len(self.ready_replicas)

    @property
    def requested(self) -> int:
        return len(self.ready_replicas) + len(self.starting)

    def free_gpus(self) -> int:
        """GPUs free on nodes that exist or are being provisioned (where a new replica needs no new node)."""
        return sum(self._per_node - n.used for n in self.nodes) * self.config.gpus_per_replica

    def waiting_for_node(self, k: int) -> tuple[float, ...]:
        """The ages at tick ``k`` (seconds since asked) of the replicas whose node is still provisioning: what the
        API server shows as pods Pending unschedulable until Karpenter's node joins."""
        now = k * self.config.tick_seconds
        return tuple(float(now - r.ask_tick * self.config.tick_seconds)
                     for r in self.starting if r.node.ready_seconds > now)

    def slots(self, include_empty: bool = True) -> int:
        """Replicas the current nodes can hold; ``include_empty=False`` leaves out nodes due for removal."""
        return sum(self._per_node for n in self.nodes if include_empty or n.used > 0)

    # -- time -----------------------------------------------------------------------------------
    def advance(self, k: int) -> None:
        """Move to tick ``k``: replicas whose start-up is over become Ready; empty nodes past their delay go."""
        if self.starting:
            still = []
            for r in self.starting:
                if r.ready_tick <= k:
                    self.ready_replicas.append(r)
                    self.pod_startups.append(r.ready_tick - r.ask_tick)
                else:
                    still.append(r)
            if len(still) != len(self.starting):
                # keep ready_replicas in ask order so "newest first" stays true on scale-down
                self.ready_replicas.sort(key=lambda r: r.ask_tick)
                self.starting = still
        if self.nodes:
            self.nodes = [
                n for n in self.nodes if n.empty_since is None or k - n.empty_since < self._consolidate_ticks
            ]

    def scale_to(self, k: int, desired: int) -> None:
        """Set the Deployment's replica count at tick ``k``."""
        desired = max(0, int(desired))
        n = self.requested
        if desired > n:
            for _ in range(desired - n):
                self._add(k)
        elif desired < n:
            for _ in range(n - desired):
                self._remove(k)

    # -- internals ------------------------------------------------------------------------------
    def _new_node(self, ready_seconds: float) -> _Node:
        node = _Node(ready_seconds)
        self.nodes.append(node)
        self.nodes_created += 1
        return node

    def _node_with_room(self, k: int) -> _Node | None:
        """A Ready node before a provisioning one (the replica serves sooner), then the fullest (bin-packing)."""
        best: _Node | None = None
        best_key = (False, -1)
        now = k * self.config.tick_seconds
        for node in self.nodes:
            if node.used < self._per_node:
                key = (node.ready_seconds <= now, node.used)
                if best is None or key > best_key:
                    best, best_key = node, key
        return best

    def _add(self, k: int) -> None:
        cfg = self.config
        now = k * cfg.tick_seconds
        node = self._node_with_room(k)
        if node is None:
            node = self._new_node(ready_seconds=now + cfg.node_startup_seconds)
        # Ready one pod start-up after both the ask and the node, observed at the next tick
        ready_at = k + cfg.ticks(max(0.0, node.ready_seconds - now) + cfg.pod_startup_seconds)
        node.used += 1
        node.empty_since = None
        self.starting.append(_Replica(k, ready_at, node))

    def _remove(self, k: int) -> None:
        if self.starting:
            # the replica furthest from Ready goes first
            idx = max(range(len(self.starting)), key=lambda i: (self.starting[i].ready_tick, self.starting[i].ask_tick))
            victim = self.starting.pop(idx)
        else:
            victim = self.ready_replicas.pop()
        node = victim.node
        node.used -= 1
        if node.used == 0:
            node.empty_since = k
