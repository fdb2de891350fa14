"""A fleet in the simulator: many Deployments on shared NodePools, under cluster and team ceilings as billed.

Why it exists: the single-Deployment replay (``engine.simulate``) gives each Deployment a node pool of its own, so
it cannot show what a cluster pays (whole nodes shared by many Deployments), what a ceiling does when several
teams compete for it, or what forecast-sized node headroom (``autoscaler.engine.headroom``) is worth against the
baseline most clusters run: one HPA per Deployment and Karpenter buying a node when a pod does not fit.

Each Deployment is a ``cluster.Cluster`` on its NodePool's shared ``cluster.NodePool`` and runs its own policy
(``TickPolicy``: the project's ``predictive.PredictivePolicy`` built by its ``factory``, or the HPA of
``reactive.ReactiveHPA``), unchanged. Every tick, in this order:

1. every Deployment's pods that finished starting become Ready; each pool consolidates empty nodes past its
   ``consolidateAfter`` (reserved headroom nodes excepted) and places Pending pods where they now fit;
2. every Deployment's policy decides (its own clock: its trace's start + tick); a policy with ``prepare(k)`` (the
   predictive one) is first asked to prepare on every Deployment (its forecast, and the self-tuning replay that
   falls due started, in a worker process when its tuner has a pool), so the replays due at one tick run at once;
3. when the fleet's asks, priced in whole nodes per pool (perfect packing, ``domain.cost.GpuPrices``), break the
   cluster or a team ceiling, ``engine.money.money_step`` (the controller's money step) cuts them by priority;
4. with headroom on, at each decision of the predictive policy (every ``headroom_every`` ticks), each pool's idle
   whole nodes are sized by ``engine.money.pools_headroom`` on the plan and on what the controller observes
   (``engine.money.observe_pools`` of the pool's nodes as read before the tick's decisions, ``NodePool.pool_gpus``,
   and of each Deployment's forecast, node lead and observed demand): the controller's money stage calls the same two
   functions;
5. each pool lends its paid, idle GPUs (the last node's remainder, and the headroom's room) to spare replicas of our
   policy's Deployments (``engine.spare.lend``, as the money stage does); the Deployments scale, decreases first;
   the idle nodes the spares left empty are held: empty nodes are provisioned, others reserved from consolidation,
   the rest left to consolidate;
6. the bill: nodes that exist or are starting, per pool (Karpenter bills a node from launch).

The ceiling *as billed* is a hard rule: a pool may not create a node when the fleet's nodes, at their prices, plus
that node would exceed the cluster ceiling (the pod waits Pending, as under a NodePool limit). A team's bill is its
pods' GPUs at its pool's GPU price (a share of the nodes, what a chargeback attributes, as ``domain.cost``);
``ceiling_breaches`` counts ticks where the cluster's billed nodes or a team's share exceeded its ceiling (only
minimum replicas kept above a ceiling can do that).

Scores per Deployment (``engine.score``: the same queue and objective as ``simulate``): GPU-hours of the GPUs its
placed pods hold, SLO attainment at its own objective, p99 wait, drops. Fleet: node-hours and dollars as billed
(whole nodes, idle ones included), replica GPU-hours, billed GPU-hours (node-hours x GPUs per node), SLO
attainment weighted by each Deployment's work (replica-hours of demand; ``FleetRun.slo_attainment`` says why) and
over all requests, and the requests that missed their objective.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

import numpy as np

from autoscaler.domain.annotations import MAX_PRIORITY
from autoscaler.domain.cost import Ceilings, GpuPrices, WorkloadAsk, fits_ceilings
from autoscaler.engine.headroom import (
    DEFAULT_MIN_RESIDUALS,
    HeadroomDecision,
    PooledResiduals,
)
from autoscaler.engine.money import (
    HeadroomMember,
    MoneySnapshot,
    MoneyState,
    PoolTerms,
    money_step,
    observe_pools,
    pools_headroom,
    within_commitment,
)
from autoscaler.engine.spare import PoolCount, lend
from autoscaler.ports import PoolGpus
from autoscaler.simulation.cluster import Cluster, ClusterConfig, NodePool
from autoscaler.simulation.engine import (
    IntArray,
    PolicyResult,
    SimulationConfig,
    TickPolicy,
    decides_of,
    need_per_tick,
    scale_in_of,
    score,
    tick_seconds_for,
)
from autoscaler.simulation.predictive import LEGEND_NOTE, legend_once
from autoscaler.simulation.queue import QueueConfig, Segments
from autoscaler.simulation.traffic import resolve, spread
from models.types import FloatArray, TrafficSeries

# Karpenter v1's NodePool CRD defaults ``spec.disruption.consolidateAfter`` to 0s (../shared/crds, karpenter.sh
# NodePool): an empty node is removed at once unless the NodePool says otherwise.
KARPENTER_CONSOLIDATE_AFTER_SECONDS = 0


@dataclass(frozen=True)
class PoolSpec:
    """One Karpenter NodePool: node shape and price, node start-up, consolidation delay, GPU limit."""

    name: str
    gpus_per_node: int = 8
    node_usd_per_hour: float = 24.0
    node_startup_seconds: int = 180
    consolidate_after_seconds: int = KARPENTER_CONSOLIDATE_AFTER_SECONDS
    gpu_limit: int | None = None

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("a NodePool needs a name")
        if self.gpus_per_node < 1:
            raise ValueError(f"NodePool {self.name}: gpus_per_node must be an integer >= 1, got {self.gpus_per_node}")
        if not (math.isfinite(self.node_usd_per_hour) and self.node_usd_per_hour > 0):
            raise ValueError(f"NodePool {self.name}: usd_per_node_hour must be a number > 0, "
                             f"got {self.node_usd_per_hour}")
        for what in ("node_startup_seconds", "consolidate_after_seconds"):
            if getattr(self, what) < 0:
                raise ValueError(f"NodePool {self.name}: {what} must be >= 0")
        if self.gpu_limit is not None and self.gpu_limit < self.gpus_per_node:
            raise ValueError(f"NodePool {self.name}: gpu_limit {self.gpu_limit} is less than one node "
                             f"({self.gpus_per_node} GPUs)")

    @property
    def gpu_usd_per_hour(self) -> float:
        return self.node_usd_per_hour / self.gpus_per_node

    @property
    def max_nodes(self) -> int | None:
        return None if self.gpu_limit is None else self.gpu_limit // self.gpus_per_node


@dataclass(frozen=True)
class DeploymentSpec:
    """One inference Deployment of the fleet: its traffic, sizing, objective and where it runs."""

    name: str
    series: TrafficSeries
    pool: str
    capacity_per_replica: float
    gpus_per_replica: int = 1
    min_replicas: int = 1
    max_replicas: int = 100
    team: str = "default"
    priority: int = 100
    slo_wait_seconds: float = 2.0
    slo_attainment: float = 0.99
    pod_startup_seconds: int = 120

    def __post_init__(self) -> None:
        n = self.name
        if not (math.isfinite(self.capacity_per_replica) and self.capacity_per_replica > 0):
            raise ValueError(f"{n}: capacity_per_replica must be a number > 0, got {self.capacity_per_replica}")
        if self.gpus_per_replica < 1:
            raise ValueError(f"{n}: gpus_per_replica must be an integer >= 1, got {self.gpus_per_replica}")
        if not 0 <= self.min_replicas <= self.max_replicas or self.max_replicas < 1:
            raise ValueError(f"{n}: need 0 <= min_replicas ({self.min_replicas}) <= max_replicas "
                             f"({self.max_replicas}) and max_replicas >= 1")
        if not 0 <= self.priority <= MAX_PRIORITY:
            raise ValueError(f"{n}: priority must be 0..{MAX_PRIORITY}, got {self.priority}")
        if not (math.isfinite(self.slo_wait_seconds) and self.slo_wait_seconds > 0):
            raise ValueError(f"{n}: slo wait must be > 0 seconds, got {self.slo_wait_seconds}")
        if not 0 < self.slo_attainment < 1:
            raise ValueError(f"{n}: slo attainment must be in (0, 1), got {self.slo_attainment}")
        if self.pod_startup_seconds < 0:
            raise ValueError(f"{n}: pod start-up must be >= 0 seconds")


@dataclass(frozen=True)
class FleetConfig:
    """The whole fleet: Deployments, NodePools, ceilings ($/h as billed), the queue timeout and the headroom."""

    deployments: tuple[DeploymentSpec, ...]
    pools: tuple[PoolSpec, ...]
    cluster_ceiling: float | None = None
    team_ceilings: Mapping[str, float] = field(default_factory=dict)
    timeout_seconds: float = 60.0
    bin_shape: str = "auto"
    headroom_quantile: float | None = None  # None: each pool's Deployments' strictest objective (the controller's)
    headroom_min_residuals: int = DEFAULT_MIN_RESIDUALS
    spare_replicas: bool = True  # the controller's ``karpenter.spare_replicas`` (``engine.spare``)

    def __post_init__(self) -> None:
        if not self.deployments:
            raise ValueError("a fleet needs at least one Deployment")
        names = [d.name for d in self.deployments]
        dup = next((x for x in names if names.count(x) > 1), None)
        if dup is not None:
            raise ValueError(f"Deployment {dup!r} is listed twice")
        pools = {p.name: p for p in self.pools}
        if len(pools) != len(self.pools):
            raise ValueError("a NodePool is listed twice")
        for d in self.deployments:
            pool = pools.get(d.pool)
            if pool is None:
                raise ValueError(f"{d.name}: NodePool {d.pool!r} is not defined (have: {', '.join(pools) or 'none'})")
            if d.gpus_per_replica > pool.gpus_per_node:
                raise ValueError(f"{d.name}: a replica needs {d.gpus_per_replica} GPUs but a node of NodePool "
                                 f"{pool.name} holds {pool.gpus_per_node}: it could never be scheduled")
            if d.slo_wait_seconds >= self.timeout_seconds:
                raise ValueError(f"{d.name}: slo wait {d.slo_wait_seconds:g}s is not shorter than the timeout "
                                 f"{self.timeout_seconds:g}s")
        for what, value in (("cluster", self.cluster_ceiling), *self.team_ceilings.items()):
            if value is not None and not (math.isfinite(value) and value > 0):
                raise ValueError(f"ceiling {what}: must be a number of dollars per hour > 0, got {value}")
        if self.headroom_quantile is not None and not 0 < self.headroom_quantile < 1:
            raise ValueError(f"headroom quantile must be in (0, 1), got {self.headroom_quantile}")

    def pool(self, name: str) -> PoolSpec:
        return next(p for p in self.pools if p.name == name)

    @property
    def tick_seconds(self) -> int:
        tick = 15
        for d in self.deployments:
            tick = tick_seconds_for(d.series.step_seconds, tick)
        return tick

    def ticks(self) -> int:
        """Ticks replayed: the shortest Deployment's trace (every Deployment is replayed over the same span)."""
        tick = self.tick_seconds
        return min(len(d.series) * (d.series.step_seconds // tick) for d in self.deployments)

    def prices(self) -> GpuPrices:
        return GpuPrices(by_pool={p.name: p.gpu_usd_per_hour for p in self.pools},
                         default=max(p.gpu_usd_per_hour for p in self.pools),
                         gpus_per_node={p.name: p.gpus_per_node for p in self.pools})

    def cluster_config(self, d: DeploymentSpec) -> ClusterConfig:
        p = self.pool(d.pool)
        return ClusterConfig(pod_startup_seconds=d.pod_startup_seconds, node_startup_seconds=p.node_startup_seconds,
                             gpus_per_replica=d.gpus_per_replica, gpus_per_node=p.gpus_per_node,
                             consolidate_after_seconds=p.consolidate_after_seconds, tick_seconds=self.tick_seconds)

    def simulation_config(self, d: DeploymentSpec) -> SimulationConfig:
        """What a single-Deployment ``simulate`` of ``d`` would run with (the factories take it)."""
        return SimulationConfig(capacity_per_replica=d.capacity_per_replica, cluster=self.cluster_config(d),
                                gpu_hour_price=self.pool(d.pool).gpu_usd_per_hour, min_replicas=d.min_replicas,
                                max_replicas=d.max_replicas, policies=("predictive",),
                                queue=QueueConfig(timeout_seconds=self.timeout_seconds,
                                                  slo_wait_seconds=d.slo_wait_seconds), bin_shape=self.bin_shape)


# (index, Deployment, its SimulationConfig, its ClusterConfig) -> its policy
PolicyBuilder = Callable[[int, DeploymentSpec, SimulationConfig, ClusterConfig], TickPolicy]


@dataclass(frozen=True)
class DeploymentRun:
    spec: DeploymentSpec
    result: PolicyResult  # gpu_hours: GPUs its placed pods held; cost_usd: that share at the pool's GPU price
    requests: float  # requests (or tokens) that arrived
    decisions: IntArray = field(repr=False)  # what the policy decided each tick (before any ceiling)
    node_waits: IntArray | None = field(default=None, repr=False)  # replicas without a Ready node, each tick

    @property
    def work_hours(self) -> float:
        """Its demand in replica-hours (requests / capacity per replica): what weighs it in the fleet's attainment."""
        return self.requests / self.spec.capacity_per_replica / 3600.0


@dataclass(frozen=True)
class FleetRun:
    """One policy over the whole fleet."""

    name: str
    tick_seconds: int
    deployments: tuple[DeploymentRun, ...]
    nodes: Mapping[str, IntArray] = field(repr=False)  # per pool: nodes billed per tick
    team_usd: Mapping[str, FloatArray] = field(repr=False)  # per team ($/h per tick, share of nodes); "(idle)"
    node_hours: float = 0.0
    cost_usd: float = 0.0  # whole nodes, as billed
    billed_gpu_hours: float = 0.0  # node-hours x GPUs per node
    ceiling_breaches: int = 0
    # idle nodes held empty (the forecast-sized ones spare replicas did not fill), per tick
    headroom_nodes: Mapping[str, IntArray] = field(default_factory=dict, repr=False)
    seconds: float = 0.0
    notes: tuple[str, ...] = ()

    @property
    def gpu_hours(self) -> float:
        """Replica GPU-hours (what the pods held), summed over the Deployments."""
        return sum(d.result.gpu_hours for d in self.deployments)

    @property
    def requests(self) -> float:
        return sum(d.requests for d in self.deployments)

    @property
    def slo_misses(self) -> float:
        """Requests that did not start within their Deployment's SLO wait (dropped ones included)."""
        return sum(d.requests * (1.0 - d.result.slo_attainment) for d in self.deployments)

    @property
    def slo_attainment(self) -> float:
        """The share of the fleet's work (replica-hours of demand) whose requests started within their objective's
        wait. Weighted by work, not by requests: Deployments count requests of very different sizes (a chat turn,
        an embedding, a 10-minute ServeGen bin of a million), and a request-weighted share would be the busiest
        counter's alone; per replica-hour of demand, a Deployment weighs what it costs to serve."""
        total = sum(d.work_hours for d in self.deployments)
        if total <= 0:
            return 1.0
        return sum(d.work_hours * d.result.slo_attainment for d in self.deployments) / total

    @property
    def requests_slo_attainment(self) -> float:
        """The share of all requests that started within their objective (weighted by request counts)."""
        total = self.requests
        return 1.0 - self.slo_misses / total if total > 0 else 1.0

    @property
    def objectives_met(self) -> int:
        return sum(d.result.slo_attainment >= d.spec.slo_attainment for d in self.deployments)

    def as_policy_result(self) -> PolicyResult:
        """The fleet's totals as one ``PolicyResult`` (GPU-hours as billed), for the frontier helpers of ``engine``."""
        empty = np.zeros(0, dtype=np.int64)
        return PolicyResult(name=self.name, gpu_hours=self.billed_gpu_hours, cost_usd=self.cost_usd,
                            unserved_fraction=0.0, cold_start_requests=0.0, scale_events=0, max_replicas=0,
                            requested=empty, ready=empty, seconds=self.seconds, ceiling_breaches=self.ceiling_breaches,
                            slo_attainment=self.slo_attainment)

    def to_json(self) -> dict[str, Any]:
        return {
            "policy": self.name,
            "fleet": {
                "gpu_hours": round(self.gpu_hours, 4), "billed_gpu_hours": round(self.billed_gpu_hours, 4),
                "node_hours": round(self.node_hours, 4), "cost_usd": round(self.cost_usd, 2),
                "slo_attainment": round(self.slo_attainment, 8),
                "requests_slo_attainment": round(self.requests_slo_attainment, 8),
                "slo_misses": round(self.slo_misses, 1),
                "objectives_met": self.objectives_met, "deployments": len(self.deployments),
                "ceiling_breaches": self.ceiling_breaches,
                "node_hours_by_pool": {p: round(float(n.sum()) * self.tick_seconds / 3600.0, 4)
                                       for p, n in self.nodes.items()},
            },
            "deployments": {
                d.spec.name: {"team": d.spec.team, "nodepool": d.spec.pool, "priority": d.spec.priority,
                              "slo_objective": {"wait_seconds": d.spec.slo_wait_seconds,
                                                "attainment": d.spec.slo_attainment},
                              "objective_met": d.result.slo_attainment >= d.spec.slo_attainment,
                              **d.result.metrics()}
                for d in self.deployments
            },
            "seconds": round(self.seconds, 2),
            "notes": list(self.notes),
        }


class _Bill:
    """Billed dollars per hour of the fleet's nodes, kept as counts so the ceiling check is O(pools)."""

    def __init__(self, pools: Mapping[str, NodePool], specs: Mapping[str, PoolSpec]) -> None:
        self.pools = pools
        self.specs = specs

    def usd_per_hour(self) -> float:
        return sum(p.node_count * self.specs[n].node_usd_per_hour for n, p in self.pools.items())


def tuning_notes(runs: Sequence[FleetRun]) -> list[str]:
    """What each Deployment's self-tuning ran, one note each, then the points' legend: from the first self-tuned run
    of ``runs`` (runs with and without node headroom tune alike: each replay is of its Deployment alone)."""
    tuned = next((r for r in runs if any("self-tuned" in n for n in r.notes)), None)
    return [] if tuned is None else [n for n in tuned.notes if "self-tuned" in n or n == LEGEND_NOTE]


def run_fleet(config: FleetConfig, build: PolicyBuilder, name: str, headroom: bool = False,
              headroom_every: int = 2, progress: Callable[[int, int], None] | None = None) -> FleetRun:
    """Replay the fleet under the policies ``build`` makes (one per Deployment), with or without node headroom.

    ``headroom_every``: ticks between headroom decisions (2: every 30 s at 15 s ticks, the controller's loop
    interval). ``progress(done, total)`` is called every 1000 ticks.
    """
    t0 = time.perf_counter()
    tick = config.tick_seconds
    n_ticks = config.ticks()
    ceiling = config.cluster_ceiling
    specs = {p.name: p for p in config.pools}
    pools: dict[str, NodePool] = {}
    bill = _Bill(pools, specs)

    def guard(node_price: float) -> Callable[[], bool]:
        if ceiling is None:
            return lambda: True
        return lambda: bill.usd_per_hour() + node_price <= ceiling + 1e-9

    for p in config.pools:
        pools[p.name] = NodePool(p.gpus_per_node, p.node_startup_seconds, p.consolidate_after_seconds, tick,
                                 max_nodes=p.max_nodes, may_add_node=guard(p.node_usd_per_hour), name=p.name)
    prices = config.prices()
    ceilings = Ceilings(cluster=ceiling, teams=dict(config.team_ceilings))
    deps = config.deployments
    demands: list[FloatArray] = []
    for d in deps:
        per_bin = d.series.step_seconds // tick
        demands.append(spread(d.series.values, per_bin, resolve(config.bin_shape, d.series.step_seconds))[:n_ticks])
    # warm start, as simulate: the replicas demand needs over the first node + pod start-up, within the ceilings
    initial: list[int] = []
    for d, dem in zip(deps, demands, strict=True):
        cfg = config.cluster_config(d)
        need = need_per_tick(dem, d.capacity_per_replica, d.min_replicas)
        full = cfg.ticks(cfg.node_startup_seconds + cfg.pod_startup_seconds)
        initial.append(min(int(need[: full + 1].max()) if need.size else d.min_replicas, d.max_replicas))
    if ceilings.any:
        initial = _within_ceilings(deps, initial, ceilings, prices)
    # initial pods are Ready on nodes that were there before the replay (no limit or guard applies to them)
    policies = [build(i, d, config.simulation_config(d), config.cluster_config(d)) for i, d in enumerate(deps)]
    clusters = [Cluster(config.cluster_config(d), n0, pools[d.pool], scale_in_of(pol))
                for d, n0, pol in zip(deps, initial, policies, strict=True)]

    requested = np.zeros((len(deps), n_ticks), dtype=np.int64)
    ready = np.zeros((len(deps), n_ticks), dtype=np.int64)
    placed = np.zeros((len(deps), n_ticks), dtype=np.int64)
    decided = np.zeros((len(deps), n_ticks), dtype=np.int64)
    node_waits = np.zeros((len(deps), n_ticks), dtype=np.int64)
    nodes = {p: np.zeros(n_ticks, dtype=np.int64) for p in pools}
    idle_held = {p: np.zeros(n_ticks, dtype=np.int64) for p in pools}
    teams = sorted({d.team for d in deps})
    team_usd = {t: np.zeros(n_ticks, dtype=np.float64) for t in (*teams, "(idle)")}
    breaches = 0
    residuals = {p: PooledResiduals() for p in pools}
    terms = {p.name: PoolTerms(p.gpus_per_node, p.node_usd_per_hour, p.max_nodes) for p in config.pools}
    by_pool = {p: [i for i, d in enumerate(deps) if d.pool == p] for p in pools}
    starts = [d.series.start for d in deps]
    gpr = [d.gpus_per_replica for d in deps]
    caps = [d.capacity_per_replica for d in deps]
    gpu_price = [specs[d.pool].gpu_usd_per_hour for d in deps]
    team_of = [d.team for d in deps]
    notes: list[str] = []
    capped_notes: dict[str, HeadroomDecision] = {}
    demand_cols = [dem.tolist() for dem in demands]
    prepares = [f for pol in policies if callable(f := getattr(pol, "prepare", None))]
    deciders = [decides_of(pol) for pol in policies]
    lenders = [_Lender(str(i), getattr(pol, "spare_room", None) if d.team not in config.team_ceilings else None,
                       getattr(pol, "lent", None)) for i, (d, pol) in enumerate(zip(deps, policies, strict=True))]
    # our controller's Deployments (an HPA's have no spare room); it lends them spares when ``spare_replicas`` is on
    ours = any(callable(getattr(pol, "spare_room", None)) for pol in policies)
    lending = config.spare_replicas and ours

    for k in range(n_ticks):
        if progress is not None and k % 1000 == 0:
            progress(k, n_ticks)
        for c in clusters:
            c.advance(k)
        # every policy's forecast first, and the self-tuning replays due at this tick started (they may run in
        # worker processes, all at once); each Deployment's decision then waits for its own replay
        for prepare in prepares:
            prepare(k)
        sizing = headroom and k % headroom_every == 0
        # what the controller reads of the pools' nodes, once per tick before its decisions (``ports.PoolNodes``)
        reads = {pname: pool.pool_gpus(k) for pname, pool in pools.items()} if sizing else {}
        # the spares' GPUs at the read (engine.spare): room the pool's headroom counts
        lent = {pname: pool.lent for pname, pool in pools.items()} if sizing else {}
        wanted = []
        for i, (pol, c) in enumerate(zip(policies, clusters, strict=True)):
            w = pol.decide(k, c, demand_cols[i][k])
            wanted.append(w)
        decided[:, k] = wanted
        allowed = wanted
        if ceilings.any:
            warm = [int(getattr(pol, "warm_pool_replicas", 0)) for pol in policies]
            allowed = _within_ceilings(deps, wanted, ceilings, prices, warm)
        sized: dict[str, HeadroomDecision] = {}
        if sizing:
            # the pools' node headroom on the plan (the replicas the ceilings leave, spares not yet lent), as the
            # controller's money step sizes it
            members = {pname: [_member(k, deps[i], specs[pname], policies[i], allowed[i], starts[i], tick, caps[i],
                                       gpr[i], demand_cols[i][k]) for i in by_pool[pname]]
                       for pname in pools}
            observations = observe_pools(reads, members, terms, config.cluster_ceiling,
                                         quantile=config.headroom_quantile,
                                         min_residuals=config.headroom_min_residuals, lent=lent)
            if ceiling is not None:  # what the plan commits, as the controller's money step prices it
                kept: dict[str | None, int] = {}
                for i, w in enumerate(allowed):
                    kept[deps[i].pool] = kept.get(deps[i].pool, 0) + w * gpr[i]
                observations = within_commitment(observations, ceiling, prices.bill(kept))
            sized = pools_headroom(observations, residuals, k * tick)
        idle_left = {pname: d.idle_nodes for pname, d in sized.items()}
        if lending:
            allowed = _with_spares(k, allowed, by_pool, pools, specs, lenders, clusters, deciders, reads, sized,
                                   idle_left)
        # our controller writes its scale-downs first (``runtime.loop``, spares lent or not), so that a GPU one of its
        # Deployments gives back is there for a replica another adds in the same tick; HPAs act each on its own (in
        # the fleet's order)
        order = (sorted(range(len(clusters)), key=lambda j: allowed[j] - clusters[j].requested) if ours
                 else range(len(clusters)))
        for i in order:
            if allowed[i] != clusters[i].requested:
                clusters[i].scale_to(k, allowed[i])
        if sizing:
            for pname, decision in sized.items():
                pools[pname].hold_idle(k, idle_left[pname])
                idle_held[pname][k] = idle_left[pname]
                if decision.capped_by is not None:
                    capped_notes.setdefault(pname, decision)
        elif headroom and k:
            for pname in pools:
                idle_held[pname][k] = idle_held[pname][k - 1]
        # the bill and the record
        for pname, pool in pools.items():
            nodes[pname][k] = pool.node_count
        shared = 0.0
        for i, c in enumerate(clusters):
            requested[i, k] = c.requested
            ready[i, k] = c.ready
            if c.starting:
                node_waits[i, k] = len(c.waiting_for_node(k))
            held = c.placed
            placed[i, k] = held
            usd = held * gpr[i] * gpu_price[i]
            team_usd[team_of[i]][k] += usd
            shared += usd
        billed = bill.usd_per_hour()
        team_usd["(idle)"][k] = max(0.0, billed - shared)
        breach = ceiling is not None and billed > ceiling + 1e-6
        for t, limit in config.team_ceilings.items():
            if t in team_usd and team_usd[t][k] > limit + 1e-6:
                breach = True
        breaches += int(breach)
    if progress is not None:
        progress(n_ticks, n_ticks)

    runs: list[DeploymentRun] = []
    for i, d in enumerate(deps):
        queue = QueueConfig(timeout_seconds=config.timeout_seconds, slo_wait_seconds=d.slo_wait_seconds)
        segments = Segments(demands[i], tick, queue.timeout_seconds)
        r = score(f"{name}/{d.name}", demands[i], requested[i], ready[i], d.capacity_per_replica, tick,
                  d.gpus_per_replica, gpu_price[i], queue=queue, segments=segments)
        gpu_hours = float(placed[i].sum()) * d.gpus_per_replica * tick / 3600.0
        r = replace(r, gpu_hours=gpu_hours, cost_usd=gpu_hours * gpu_price[i])
        total = float(np.nan_to_num(demands[i], nan=0.0).sum()) * tick
        runs.append(DeploymentRun(d, r, total, decided[i], node_waits[i]))
        describe = getattr(policies[i], "notes", None)
        if callable(describe):
            notes.extend(f"{d.name}: {n}" for n in describe())
    node_hours = {p: float(n.sum()) * tick / 3600.0 for p, n in nodes.items()}
    notes = legend_once(notes)
    for decision in capped_notes.values():
        notes.append(f"headroom capped at least once: {decision.detail}")
    return FleetRun(
        name=name, tick_seconds=tick, deployments=tuple(runs), nodes=nodes, team_usd=team_usd,
        node_hours=sum(node_hours.values()),
        cost_usd=sum(h * specs[p].node_usd_per_hour for p, h in node_hours.items()),
        billed_gpu_hours=sum(h * specs[p].gpus_per_node for p, h in node_hours.items()),
        ceiling_breaches=breaches, headroom_nodes=idle_held if headroom else {},
        seconds=time.perf_counter() - t0, notes=tuple(notes),
    )


class _Lender(NamedTuple):
    """A Deployment of the fleet as its pool's lending sees it (``_with_spares``): its key, its policy's
    ``spare_room`` (None: it takes no spares: an HPA, or a team under a ceiling, since a spare is billed to its team)
    and ``lent`` (told what it was lent, so that its decisions plan on its own replicas)."""

    key: str
    room: Callable[[int, int, int], tuple[int, float]] | None
    tell: Callable[[int, int], None] | None


def _with_spares(k: int, allowed: Sequence[int], by_pool: Mapping[str, Sequence[int]], pools: Mapping[str, NodePool],
                 specs: Mapping[str, PoolSpec], lenders: Sequence[_Lender], clusters: Sequence[Cluster],
                 deciders: Sequence[Callable[[int], bool]], reads: Mapping[str, PoolGpus],
                 sized: Mapping[str, HeadroomDecision], idle_left: dict[str, int]) -> list[int]:
    """``allowed`` plus the spare replicas each pool lends on its paid, idle GPUs (``engine.spare.lend``, as the
    controller's ``engine.money.lend_spares`` does; each driver counts its own world), from the read of its nodes
    before this tick's decisions (``reads``, when the headroom took it); the GPUs lent are what the pool's next
    decisions are shown free on top of the read (``NodePool.lent``), as the controller shows them. A pool lends only
    at a tick where all its Deployments decide (between decisions they hold their counts, spares included). With node
    headroom (``sized``), the spares may fill the room it keeps, and ``idle_left`` is set to the idle nodes they
    leave empty (what the pool's placeholders hold, as the controller's ``headroom_wants`` are)."""
    out = list(allowed)

    def terms(c: PoolCount) -> tuple[int, float]:
        room = lenders[int(c.key)].room
        return (0, 0.0) if room is None else room(k, c.planned, c.requested)

    for pname, idxs in by_pool.items():
        if not all(deciders[i](k) for i in idxs):
            continue
        pool = pools[pname]
        waiting = sum(len(clusters[i].waiting_for_node(k)) for i in idxs if clusters[i].starting)
        counts = [PoolCount(lenders[i].key, clusters[i].config.gpus_per_replica, out[i], clusters[i].requested)
                  for i in idxs]
        read = reads[pname] if pname in reads else pool.pool_gpus(k)  # the tick's read, taken before its decisions
        pool.lent = 0
        headroom = sized.get(pname)
        got = lend(read, specs[pname].gpus_per_node, counts, waiting, terms,
                   *((headroom.buffer_gpus, headroom.idle_nodes) if headroom is not None else ()))
        if headroom is not None:
            idle_left[pname] = got.idle_nodes
        for i in idxs:
            n = got.spares.get(lenders[i].key, 0)
            tell = lenders[i].tell
            if tell is not None:
                tell(out[i], n)
            out[i] += n
            pool.lent += n * clusters[i].config.gpus_per_replica
    return out


def _asks(deps: Sequence[DeploymentSpec], wanted: Sequence[int], warm: Sequence[int]) -> tuple[WorkloadAsk, ...]:
    """The asks as the controller makes them (``WorkloadAsk.from_decision``): the warm-pool replicas of a decision
    rank after every Deployment's serving replicas."""
    out = []
    for d, w, h in zip(deps, wanted, warm, strict=True):
        low = min(d.min_replicas, w)
        out.append(WorkloadAsk(key=d.name, team=d.team, priority=d.priority, gpus_per_replica=d.gpus_per_replica,
                               min_replicas=low, desired_replicas=w, warm_pool_replicas=max(0, min(h, w - low)),
                               nodepool=d.pool))
    return tuple(out)


def _within_ceilings(deps: Sequence[DeploymentSpec], wanted: Sequence[int], ceilings: Ceilings,
                     prices: GpuPrices, warm: Sequence[int] | None = None) -> list[int]:
    """The controller's money decision (``engine.money.money_step``): the replicas each Deployment keeps (at once
    when the plan fits every ceiling, ``domain.cost.fits_ceilings``, the test ``enforce_ceilings`` starts with)."""
    asks = _asks(deps, wanted, [0] * len(deps) if warm is None else warm)
    if fits_ceilings(asks, (), ceilings, prices):
        return list(wanted)
    plan, _ = money_step(MoneySnapshot(now=0, horizon_seconds=0, node_startup_seconds=0.0, ceilings=ceilings,
                                       prices=prices, asks=asks, pools=None), MoneyState())
    return [plan.allowed(d.name, w) for d, w in zip(deps, wanted, strict=True)]


def _member(k: int, d: DeploymentSpec, pool: PoolSpec, policy: TickPolicy, planned: int, start: int, tick: int,
            capacity: float, gpus_per_replica: int, demand: float) -> HeadroomMember:
    """Deployment ``d`` as the controller shows it to its pool's node headroom at tick ``k``: the forecast its
    decision read, its node lead (the decision's; the spec's start-ups before the first), the demand its decision
    observed (the trace's for a policy that observes none) and the replicas its pods will request after the
    ceilings (``planned``; spares are lent after the headroom is sized)."""
    decided = getattr(policy, "decided", None)
    lead = (decided.node_lead_seconds if decided is not None
            else float(pool.node_startup_seconds + d.pod_startup_seconds))
    return HeadroomMember(getattr(policy, "forecast", None), start + k * tick, lead, capacity, gpus_per_replica,
                          float(getattr(policy, "demand_seen", demand)), planned, objective=d.slo_attainment)
