"""One money step: a tick's plans, gangs and pools in, what the cluster may spend and hold out; pure.

Why it exists: the controller's money stage (``autoscaler.runtime.money.MoneyStage.run``), the simulator's ledger
(``autoscaler.simulation.money.MoneyLedger.step``) and the fleet simulator (``autoscaler.simulation.fleet``) each
composed the money decisions of ``autoscaler.domain`` in their own way (a shortcut "everything fits" here, "the
minimum is kept above the ceiling" there, gangs placed once at submission on one side and re-placed every
quarter hour on the other), so ``simulate-money`` and ``fleet simulate`` measured a second program. ``money_step``
is the one composition all three call: the drivers only read (the NodePools, the gangs, Kueue's queues, or a
simulated cluster) and apply what it returns (scale, limits, headroom objects, gang patches, alerts; or the
simulated cluster's bookkeeping).

What one step decides, in order:

1. scheduled gangs (a window and a run time) are placed in the trough of their NodePool's median inference GPU
   forecast (``domain.gangs.place_gangs``), the placement cached and recomputed only when the scheduled gangs or
   their windows change, a model of the pool was refit (``GangForecasts.version``), the deferred pending gangs
   change, or every ``PLACEMENT_REFRESH_SECONDS``; one node start-up before its start a placement is frozen;
2. the gangs that count now (``domain.money.counting_gangs``: a placed gang from its start minus one node
   start-up) and the asks are held under the cluster and team ceilings by priority
   (``domain.cost.enforce_ceilings``), every cut decision getting its ``cost_ceiling`` step;
3. each NodePool's GPU limit (``domain.money.pool_limits``) and the GPUs workloads wait for
   (``domain.money.unavailable_gpus``);
4. with headroom managed and the pools' nodes read, each NodePool's idle nodes sized from the pooled forecast error at
   its node lead (``pools_headroom``, the function the fleet simulator calls too, on ``observe_pools`` of what the
   driver read), the gangs nodes are held for (``domain.money.gang_headroom``) and the headroom objects wanted
   (``domain.money.headroom_wants``: placeholder nodes, or a CapacityBuffer of the pool's top Deployment); with
   the nodes not read, no headroom is sized or lowered (never from missing data as if the pools were empty);
5. the alerts the state calls for (``domain.money.alerts_for``), and the held Kueue Workloads to start now (their
   planned start has come and the ceiling reserves them whole).

The memory between steps (placements, since when nodes are held for a pending gang) is a ``MoneyState`` value:
passed in, returned anew, never changed in place; the pools' realised forecast errors are an accumulator the driver
keeps (``PooledResiduals``, fed by ``pools_headroom``). Time is ``MoneySnapshot.now``; no clock is
read and nothing is read or written but the arguments. ``GangForecasts`` is asked for points only when a placement
is due (the costly long forecast); the drivers implement it over their cached models.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from statistics import NormalDist
from typing import Any, Protocol

from autoscaler.domain.cost import Ceilings, CostReport, GpuPrices, WorkloadAsk, enforce_ceilings
from autoscaler.domain.gangs import (
    MAX_PLACEMENT_SECONDS,
    Gang,
    format_gpus,
    place_gangs,
    placement_window,
    scheduled,
)
from autoscaler.domain.kueue import KueueQueues
from autoscaler.domain.money import (
    GangHeadroom,
    GangPlacement,
    HeadroomKind,
    HeadroomWant,
    PlannedWorkload,
    alerts_for,
    asked_by_scope,
    breaches,
    buffer_holders,
    counting_gangs,
    gang_headroom,
    headroom_wants,
    latest_start,
    placement_capacity,
    pool_limits,
    unavailable_gpus,
    unplaced_deferred,
    utc,
)
from autoscaler.domain.nodes import PoolShape
from autoscaler.domain.types import ScalingDecision, Step
from autoscaler.engine.headroom import (
    DEFAULT_MIN_RESIDUALS,
    DEFAULT_QUANTILE,
    HeadroomDecision,
    PooledResiduals,
    PoolForecast,
    objective_quantile,
    pool_headroom,
)
from autoscaler.engine.spare import SPARE_STEP, Lent, PoolCount, exposure, lend, member_terms
from autoscaler.ports import Alert, NodePoolView, PoolGpus
from models.types import Forecast

__all__ = [
    "GANG_HEADROOM_LIMIT_STARTUPS",
    "PLACEMENT_REFRESH_SECONDS",
    "GangForecasts",
    "HeadroomMember",
    "MoneyPlan",
    "MoneySnapshot",
    "MoneyState",
    "PlacementCache",
    "PoolObservation",
    "PoolTerms",
    "money_step",
    "observe_pools",
    "place_scheduled",
    "pools_headroom",
    "within_commitment",
]

PLACEMENT_REFRESH_SECONDS = 900  # a placement is recomputed at least this often (the forecast moves)
GANG_HEADROOM_LIMIT_STARTUPS = 2  # nodes held for a pending gang that has not started are released after this many
# node start-ups (the nodes are asked for one start-up ahead; one more is the grace for Kueue to admit it)


class GangForecasts(Protocol):
    """What placing scheduled gangs needs from the drivers' cached models.

    ``points``: the inference GPUs the pool's Deployments are forecast to hold over ``[start, end]`` as
    ``(time, GPUs)`` points (None when nothing can be said); ``version``: a number that changes when a model
    in the pool was refit (the cached placements of that pool are then recomputed).
    """

    def points(self, pool: str | None, start: int, end: int) -> Sequence[tuple[int, float]] | None: ...

    def version(self, pool: str | None) -> int: ...


@dataclass(frozen=True)
class PlacementCache:
    """The placements of the scheduled gangs and what they were computed from (when they are due again)."""

    placements: Mapping[str, GangPlacement] = field(default_factory=dict)
    signature: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)
    versions: Mapping[str | None, int] = field(default_factory=dict)
    absent: frozenset[str] = frozenset()
    placed_at: float = -math.inf
    no_fit: Mapping[str, int] = field(default_factory=dict)  # gang -> the start reported as not fitting


@dataclass(frozen=True)
class HeadroomMember:
    """One Deployment of a NodePool as forecast-sized headroom sees it at one decision.

    ``forecast``: its newest forecast (None: none yet), read at ``now`` (its own clock) + the pool's node lead;
    ``lead_seconds``: its own node lead (node start-up + its pod start-up, ``engine.deciding.Decided``);
    ``demand``: its demand now as the controller observes it (NaN when unknown); ``requested``: the replicas its pods
    request now (after this tick's decision: ``money_step`` puts in the count its ceilings leave to a planned
    Deployment ``key``); ``waiting_for_node``: its pods waiting for a node now (while any do, the pool lends no
    spare replicas, ``engine.spare``); ``objective``: its latency objective's attainment share (the pool's headroom
    covers the strictest, ``engine.headroom.objective_quantile``; None: it states none)."""

    forecast: Forecast | None
    now: int
    lead_seconds: float
    capacity: float
    gpus_per_replica: int
    demand: float
    requested: int
    key: str = ""
    waiting_for_node: int = 0
    objective: float | None = None


@dataclass(frozen=True)
class PoolObservation:
    """One NodePool at one decision: its Deployments and what its nodes hold (``engine.headroom.PoolForecast``)."""

    pool: str
    gpus_per_node: int
    members: tuple[HeadroomMember, ...]
    lead_seconds: int  # the longest node lead of its Deployments (node start-up + pod start-up)
    partial_free_gpus: int = 0  # free GPUs on nodes that hold pods
    busy_nodes: int = 0
    free_gpus: int = 0  # free GPUs on its Ready nodes, idle ones included (spares may fill the headroom's)
    max_nodes: int | None = None
    node_usd_per_hour: float = 0.0
    ceiling_slack_usd_per_hour: float | None = None  # ceiling - billed spend of everything but this pool's idle nodes
    lent_gpus: int = 0  # GPUs its spare replicas held at the read (``engine.spare``): room a scale-up takes back
    quantile: float = DEFAULT_QUANTILE
    min_residuals: int = DEFAULT_MIN_RESIDUALS


@functools.cache
def _z(level: int) -> float:
    """The standard normal's quantile at ``level`` percent (asked for every Deployment at every headroom decision)."""
    return NormalDist().inv_cdf(level / 100.0)


@dataclass(frozen=True)
class PoolTerms:
    """What a driver knows of a NodePool beside its nodes: its node shape and price, its limit in whole nodes."""

    gpus_per_node: int
    node_usd_per_hour: float
    max_nodes: int | None = None


def observe_pools(reads: Mapping[str, PoolGpus], members: Mapping[str, Sequence[HeadroomMember]],
                  terms: Mapping[str, PoolTerms], ceiling_usd_per_hour: float | None, *,
                  quantile: float | None = None,
                  min_residuals: int = DEFAULT_MIN_RESIDUALS,
                  lent: Mapping[str, int] | None = None) -> list[PoolObservation]:
    """The observation of each NodePool with members, a read and known terms (a pool missing any of them is not
    observed: no headroom is sized from missing data). The quantile its headroom covers is ``quantile``, else its
    members' strictest objective (``engine.headroom.objective_quantile``). The pool's lead is its members' longest
    node lead; the
    ceiling's slack is the ceiling less what every read pool's nodes bill, this pool's idle nodes (those where no
    pod holds a GPU) excepted. ``lent``: per pool, the GPUs its spare replicas held at the read (``engine.spare``)."""
    billed = sum(r.nodes * terms[p].node_usd_per_hour for p, r in reads.items() if p in terms)
    out: list[PoolObservation] = []
    for pool in sorted(members):
        ms = tuple(members[pool])
        if not ms or pool not in reads or pool not in terms:
            continue
        read, t = reads[pool], terms[pool]
        slack = None
        if ceiling_usd_per_hour is not None:
            slack = ceiling_usd_per_hour - (billed - max(0, read.nodes - read.busy_nodes) * t.node_usd_per_hour)
        out.append(PoolObservation(
            pool, t.gpus_per_node, ms, math.ceil(max(m.lead_seconds for m in ms) - 1e-9),
            partial_free_gpus=read.partial_free, busy_nodes=read.busy_nodes, free_gpus=read.free, max_nodes=t.max_nodes,
            node_usd_per_hour=t.node_usd_per_hour, ceiling_slack_usd_per_hour=slack,
            quantile=quantile if quantile is not None else objective_quantile(
                m.objective for m in ms if m.objective is not None),
            min_residuals=min_residuals, lent_gpus=(lent or {}).get(pool, 0)))
    return out


def within_commitment(observations: Sequence[PoolObservation], ceiling_usd_per_hour: float | None,
                      committed_usd_per_hour: float) -> list[PoolObservation]:
    """``observations`` with the ceiling's slack never above what the plan itself leaves (its kept GPUs priced in
    whole nodes, ``committed_usd_per_hour``): nodes not up yet for pods the plan keeps are spent all the same, so
    idle nodes are bought only with what neither the running nodes nor the plan take."""
    if ceiling_usd_per_hour is None:
        return list(observations)
    left = ceiling_usd_per_hour - committed_usd_per_hour
    return [replace(o, ceiling_slack_usd_per_hour=left if o.ceiling_slack_usd_per_hour is None
                    else min(o.ceiling_slack_usd_per_hour, left)) for o in observations]


def _median_and_sigma(forecast: Forecast | None, at: int, capacity: float) -> tuple[float, float] | None:
    """The forecast's median and one standard deviation (from its highest band) at time ``at``, in replicas."""
    if forecast is None or forecast.horizon == 0:
        return None
    i = min(max(0, (at - forecast.start) // forecast.step_seconds), forecast.horizon - 1)
    median_band = forecast.quantiles.get(50, forecast.mean)
    median = float(median_band[i])
    levels = [q for q in forecast.quantiles if q > 50]
    sigma = 0.0
    if levels:
        top = max(levels)
        sigma = max(0.0, float(forecast.quantiles[top][i]) - median) / _z(top)
    if not (math.isfinite(median) and math.isfinite(sigma)):
        return None
    return max(0.0, median) / capacity, sigma / capacity


def pools_headroom(observations: Sequence[PoolObservation], residuals: Mapping[str, PooledResiduals],
                   now: int) -> dict[str, HeadroomDecision]:
    """Whole idle nodes per NodePool, sized from the pooled forecast error at its node lead (``engine.headroom``).

    Per pool: the summed median of its Deployments' forecasts at the lead and their bands; the pool's actual need now
    (demand / capacity x GPUs per replica; a Deployment whose demand is unknown counts its median, else what its pods
    request, and the pool's error is then not measured: a missing bin is no evidence); the realised errors of the
    summed median, kept in ``residuals[pool]`` (an accumulator the caller keeps between decisions: it is fed here,
    ``now`` on one clock for every pool); then ``engine.headroom.pool_headroom`` with the pool's caps."""
    out: dict[str, HeadroomDecision] = {}
    for obs in observations:
        median = 0.0
        sigmas: list[float] = []
        actual = 0.0
        complete = True
        for m in obs.members:
            got = _median_and_sigma(m.forecast, m.now + obs.lead_seconds, m.capacity)
            d = m.demand
            if math.isfinite(d):
                actual += d / m.capacity * m.gpus_per_replica
            else:
                complete = False
                actual += got[0] * m.gpus_per_replica if got is not None else m.requested * m.gpus_per_replica
            if got is None:  # no forecast yet: the current demand, and no band
                median += d / m.capacity * m.gpus_per_replica if math.isfinite(d) else m.requested * m.gpus_per_replica
                continue
            median += got[0] * m.gpus_per_replica
            sigmas.append(got[1] * m.gpus_per_replica)
        pooled = residuals[obs.pool]
        if complete:
            pooled.observe(now, actual)
            pooled.forecast(now + obs.lead_seconds, median)
        held = sum(m.requested * m.gpus_per_replica for m in obs.members)
        out[obs.pool] = pool_headroom(PoolForecast(
            obs.pool, obs.gpus_per_node, median, tuple(sigmas), pooled.snapshot(), held,
            # a spare's GPU is room as a free one is: a scale-up takes it back without a node (``engine.spare``)
            partial_free_gpus=obs.partial_free_gpus + obs.lent_gpus, busy_nodes=obs.busy_nodes, max_nodes=obs.max_nodes,
            node_usd_per_hour=obs.node_usd_per_hour, ceiling_slack_usd_per_hour=obs.ceiling_slack_usd_per_hour,
            quantile=obs.quantile, min_residuals=obs.min_residuals, current_gpus=actual))
    return out


def _idle_after_spares(d: HeadroomDecision, left: int) -> tuple[int, str]:
    """A pool's idle headroom nodes to hold empty, and why, once spares filled ``d.idle_nodes - left`` of them."""
    if left >= d.idle_nodes:
        return d.idle_nodes, d.detail
    return left, f"{d.detail}, {d.idle_nodes - left} of them holding spare replicas"


def lend_spares(planned: Sequence[PlannedWorkload], decisions: Mapping[str, ScalingDecision],
                observations: Sequence[PoolObservation], teams: Mapping[str, str], ceilings: Ceilings,
                sized: Mapping[str, HeadroomDecision]
                ) -> tuple[dict[str, ScalingDecision], dict[str, int], dict[str, Lent]]:
    """``decisions`` with the spare replicas each observed NodePool lends on its paid, idle GPUs (``engine.spare.lend``;
    a ``spare`` step on the trail), the spares per Deployment, and each pool's lending (``engine.spare.Lent``: with
    node headroom, ``sized``, the spares may fill its room, and the lending says what they leave free). A Deployment
    takes none without a forecast and a capacity (its member shows no forecast then), or when its team has a cost
    ceiling (a spare is billed to its team); it still counts in its pool's GPUs."""
    by_key = {p.key: p for p in planned}
    members = {m.key: m for obs in observations for m in obs.members}
    out = dict(decisions)
    lent: dict[str, int] = {}
    by_pool: dict[str, Lent] = {}

    def terms(c: PoolCount) -> tuple[int, float]:
        if teams.get(c.key) in ceilings.teams:  # a spare is billed to its team
            return 0, 0.0
        m = members[c.key]
        return member_terms(exposure(m.forecast, m.now, m.lead_seconds, m.capacity, c.planned),
                            by_key[c.key].spec.max_replicas, c.planned, c.requested,
                            bool(decisions[c.key].missing_metrics))

    for obs in observations:
        ours = {m.key: m for m in obs.members if m.key in by_key and m.key in out}
        counts = [PoolCount(k, m.gpus_per_replica, out[k].desired_replicas, by_key[k].view.replicas)
                  for k, m in ours.items()]
        read = PoolGpus(free=obs.free_gpus, busy_nodes=obs.busy_nodes, partial_free=obs.partial_free_gpus)
        headroom = sized.get(obs.pool)
        got = lend(read, obs.gpus_per_node, counts, sum(m.waiting_for_node for m in ours.values()), terms,
                   *((headroom.buffer_gpus, headroom.idle_nodes) if headroom is not None else ()))
        by_pool[obs.pool] = got
        filled = headroom.idle_nodes - got.idle_nodes if headroom is not None else 0
        where = "its last node's free GPUs" + (f" and {filled} of its idle headroom node(s)" if filled else "")
        for key, n in got.spares.items():
            d = out[key]
            lent[key] = n
            out[key] = replace(d, desired_replicas=d.desired_replicas + n, steps=(*d.steps, Step(
                SPARE_STEP, d.desired_replicas + n,
                f"+{n} spare replica(s) on GPUs NodePool {obs.pool} already pays for ({where}; given back as soon as "
                "a plan needs them)")))
    return out, lent, by_pool


@dataclass(frozen=True)
class MoneyState:
    """The money step's memory between ticks (``money_step`` returns the next one)."""

    placements: PlacementCache = PlacementCache()
    gang_held_since: Mapping[str, int] = field(default_factory=dict)  # pending gang -> when nodes were first held


@dataclass(frozen=True)
class MoneySnapshot:
    """What one money step decides from: the plans (or bare asks), the gangs, the pools, prices and ceilings.

    ``planned``: the Deployments' plans (their decisions are cut, unavailable GPUs are counted for them);
    ``asks``: the inference asks priced and cut, ``WorkloadAsk.from_decision`` of ``planned`` when None (a driver
    without ``ScalingDecision`` values, the simulator's ledger and the fleet, passes asks alone). ``pools``: the
    NodePools read, None when they could not be read (no limits, no headroom). ``headroom``: the kind of headroom
    objects managed, None when off. ``pool_observations``: the NodePools whose nodes were read, observed for
    forecast-sized headroom (``observe_pools``), None when their nodes could not be read (no headroom sized or
    changed: the gangs' nodes only raise what is held); ``residuals``: their realised errors (the driver's
    accumulators, fed by ``pools_headroom``). ``queues``: Kueue's queues for pending Workloads
    (``domain.money.gang_headroom``). ``track_gang_headroom``: whether this step's holds start the clock of
    ``gang_headroom_limit_seconds`` (a standby or dry run holds nothing, so its clock does not run).
    """

    now: int
    horizon_seconds: int
    node_startup_seconds: float
    ceilings: Ceilings
    prices: GpuPrices
    planned: Sequence[PlannedWorkload] = ()
    asks: Sequence[WorkloadAsk] | None = None
    gangs: Sequence[Gang] = ()
    pools: Sequence[NodePoolView] | None = ()
    shapes: Mapping[str, PoolShape] = field(default_factory=dict)
    headroom: HeadroomKind | None = None
    queues: KueueQueues | str | None = None
    pool_observations: Sequence[PoolObservation] | None = ()
    residuals: Mapping[str, PooledResiduals] = field(default_factory=dict)
    gang_forecasts: GangForecasts | None = None
    track_gang_headroom: bool = True
    gang_headroom_limit_seconds: float = 0.0
    spare_replicas: bool = False  # lend the pools' paid, idle GPUs to spare replicas (``engine.spare``)


@dataclass(frozen=True)
class MoneyPlan:
    """What one money step decided (``money_step``); the drivers apply it."""

    decisions: Mapping[str, ScalingDecision]  # "namespace/name" -> decision after the ceilings
    report: CostReport
    asks: tuple[WorkloadAsk, ...]
    counting: tuple[Gang, ...]  # the gangs whose GPUs count now
    asked: Mapping[str, float]
    breaches: Mapping[str, tuple[float, float]]
    teams: Mapping[str, str]  # ask or gang key -> team
    placements: Mapping[str, GangPlacement]
    placement_problems: tuple[str, ...]  # placements that fit nowhere in their window (once per start)
    limits: Mapping[str, tuple[int, str]]  # NodePool -> (GPU limit to write, why)
    effective_limits: Mapping[str, int]  # NodePool -> GPUs it may hold (limits written, read, static nodes)
    unavailable: Mapping[str, int]
    planned: tuple[PlannedWorkload, ...]
    gang_headroom: GangHeadroom
    headroom: Mapping[str, HeadroomDecision]  # NodePool -> its forecast-sized idle nodes (``pools_headroom``)
    wants: tuple[HeadroomWant, ...]
    alerts: tuple[Alert, ...]
    activate: tuple[str, ...] = ()  # held Kueue Workloads to start now: their planned start came, reserved whole
    # False: headroom managed but the pools' nodes not read, so ``wants`` holds only the gangs' nodes: a floor that
    # may raise what is held, never lower or remove it
    headroom_sized: bool = True
    spares: Mapping[str, int] = field(default_factory=dict)  # "namespace/name" -> spare replicas lent (in decisions)
    # NodePool -> the idle nodes held empty for it: the forecast-sized ones spares did not fill (``engine.spare``)
    idle_nodes: Mapping[str, int] = field(default_factory=dict)

    @property
    def reserved(self) -> tuple[Gang, ...]:
        return self.report.gangs_reserved

    def allowed(self, key: str, desired: int) -> int:
        """The replicas ``key`` keeps of ``desired`` under the ceilings."""
        outcome = self.report.outcome(key)
        return desired if outcome is None else outcome.allowed_replicas


def place_scheduled(
    gangs: Sequence[Gang], cache: PlacementCache, *, now: int, node_startup_seconds: float, ceilings: Ceilings,
    prices: GpuPrices, forecasts: GangForecasts | None, absent: frozenset[str] = frozenset(),
) -> tuple[PlacementCache, tuple[str, ...]]:
    """The placements of the scheduled gangs at ``now``, recomputed when due (module docstring), and the problems
    to report (a gang no start of whose window fits, once per start). ``absent``: the pending gangs the ceiling
    defers (``domain.money.unplaced_deferred``), not counted under the placements."""
    keep = dict(cache.placements)
    candidates = [g for g in gangs if scheduled(g) and (placement_window(g, now) is not None or
                                                        (g.key in keep and keep[g.key].frozen))]
    if not candidates:
        return replace(cache, placements={}, signature={}), ()
    sig = {g.key: (g.start_after, g.deadline, g.duration_seconds, g.gpus, g.nodepool, g.priority)
           for g in candidates}
    keep = {k: p for k, p in keep.items() if k in sig and cache.signature.get(k) == sig[k]}
    keep = {k: replace(p, frozen=True) if not p.frozen and p.start - now <= node_startup_seconds else p
            for k, p in keep.items()}
    pools = sorted({g.nodepool for g in candidates}, key=lambda p: p or "")
    versions = {pool: forecasts.version(pool) if forecasts is not None else 0 for pool in pools}
    due = (set(sig) != set(keep) or versions != dict(cache.versions) or absent != cache.absent
           or now - cache.placed_at >= PLACEMENT_REFRESH_SECONDS)
    if not due:
        return replace(cache, placements=keep), ()
    fixed = {k: p.start for k, p in keep.items() if p.frozen}
    inference: dict[str | None, Sequence[tuple[int, float]]] = {}
    capacity: dict[str | None, float] = {}
    for pool in pools:
        members = [g for g in candidates if g.nodepool == pool]
        end = max(latest_start(g, now, fixed) + (g.duration_seconds or 0) for g in members)
        end = min(max(end, now + 1), now + MAX_PLACEMENT_SECONDS)
        inference[pool] = (forecasts.points(pool, now, end) if forecasts is not None else None) or []
        capacity[pool] = placement_capacity(pool, ceilings, prices)
    placed = place_gangs(gangs, inference, capacity, now, fixed, absent)
    out: dict[str, GangPlacement] = {}
    no_fit = dict(cache.no_fit)
    problems: list[str] = []
    for g in candidates:
        pl = placed.get(g.key)
        if pl is None:
            continue
        cap = capacity.get(g.nodepool, math.inf)
        out[g.key] = GangPlacement(
            key=g.key, team=g.team, start=pl.start, peak_gpus=pl.peak_gpus, fits=pl.fits, capacity_gpus=cap,
            frozen=g.key in fixed or pl.start - now <= node_startup_seconds,
            counts_from=math.floor(pl.start - node_startup_seconds), detail=pl.detail,
        )
        if not pl.fits and no_fit.get(g.key) != pl.start:
            no_fit[g.key] = pl.start
            problems.append(f"{g.key}: no start in its window fits the {format_gpus(cap)} GPU(s) the ceiling buys in "
                            f"NodePool {g.nodepool or '(none)'}; placed at the lowest peak, "
                            f"{format_gpus(pl.peak_gpus)} GPU(s) at {utc(pl.start).isoformat()}")
        elif pl.fits:
            no_fit.pop(g.key, None)
    return PlacementCache(out, sig, versions, absent, now, no_fit), tuple(problems)


def money_step(snapshot: MoneySnapshot, state: MoneyState) -> tuple[MoneyPlan, MoneyState]:
    """One tick's money decisions (module docstring) and the memory for the next one."""
    s = snapshot
    t = s.now
    pools_known = s.pools is not None
    views = list(s.pools or [])
    asks = tuple(s.asks) if s.asks is not None else tuple(
        WorkloadAsk.from_decision(p.spec, p.decision) for p in s.planned)
    absent = unplaced_deferred(asks, s.gangs, s.ceilings, s.prices, t, s.horizon_seconds)
    cache, problems = place_scheduled(s.gangs, state.placements, now=t, node_startup_seconds=s.node_startup_seconds,
                                      ceilings=s.ceilings, prices=s.prices, forecasts=s.gang_forecasts, absent=absent)
    placements = cache.placements
    gangs = counting_gangs(s.gangs, placements, t, s.horizon_seconds, s.node_startup_seconds)

    report = enforce_ceilings(asks, gangs, s.ceilings, s.prices, horizon_seconds=s.horizon_seconds)
    decisions = {p.key: report.apply(p.key, p.decision) for p in s.planned}
    asked = asked_by_scope(asks, gangs, s.prices)
    over = breaches(asked, s.ceilings)
    reserved = list(report.gangs_reserved)
    teams = {a.key: a.team for a in asks} | {g.key: g.team for g in gangs}

    limit_plan = pool_limits(report, s.shapes, views) if pools_known else {}
    effective_limits = {v.name: v.gpu_limit for v in views if v.gpu_limit is not None}
    effective_limits |= {name: limit for name, (limit, _) in limit_plan.items()}
    # a static NodePool (spec.replicas) has the capacity of its fixed nodes: no more can be bought there
    effective_limits |= {v.name: max(v.gpus_in_use or 0, v.nodes * s.shapes[v.name].gpus_per_node)
                         for v in views if v.static and v.name in s.shapes}
    planned = list(s.planned)
    unavailable = unavailable_gpus(planned, decisions, reserved, effective_limits)
    gh = GangHeadroom(tuple(reserved), {})
    wants: tuple[HeadroomWant, ...] = ()
    sized: dict[str, HeadroomDecision] = {}
    idle: dict[str, tuple[int, str]] = {}
    held_since = dict(state.gang_held_since)
    kind = s.headroom if pools_known else None
    if kind is not None:
        # every gang that counts is checked (a dry run says why a deferred one would get no nodes either); nodes are
        # held only for those the ceiling reserved
        gh = gang_headroom(gangs, s.queues, t, state.gang_held_since, s.gang_headroom_limit_seconds)
        kept = {g.key for g in reserved}
        gh = replace(gh, held=tuple(g for g in gh.held if g.key in kept))
        if s.track_gang_headroom:  # since when nodes are held for each pending gang (the time limit's clock)
            holding = {g.key for g in gh.held if not g.admitted} | {g.key for g in gh.expired}
            held_since = {k: v for k, v in held_since.items() if k in holding}
            for key in holding:
                held_since.setdefault(key, t)
        if s.pool_observations is not None:
            # a planned Deployment's pods will request what the ceilings leave it (an advisory one's stay as they are)
            after = {p.key: p.view.replicas if p.spec.advisory else decisions[p.key].desired_replicas
                     for p in s.planned}
            observations = [replace(o, members=tuple(replace(m, requested=after[m.key]) if m.key in after else m
                                                     for m in o.members)) for o in s.pool_observations]
            observations = within_commitment(observations, s.ceilings.cluster, report.cluster_dollars_per_hour)
            sized = pools_headroom(observations, s.residuals, t)
    # the spares come after the headroom: they may fill the room it keeps (engine.spare)
    spares: dict[str, int] = {}
    lent: dict[str, Lent] = {}
    if s.spare_replicas and s.pool_observations:
        decisions, spares, lent = lend_spares(planned, decisions, s.pool_observations, teams, s.ceilings, sized)
    if kind is not None:
        idle = {pool: _idle_after_spares(d, lent[pool].idle_nodes if pool in lent else d.idle_nodes)
                for pool, d in sized.items()}
        # a CapacityBuffer keeps room for pods where GPUs are free: not on the GPUs spares took
        partial = {o.pool: lent[o.pool].busy_free if o.pool in lent else o.partial_free_gpus
                   for o in s.pool_observations or ()}
        buffers = buffer_holders(s.planned, partial) if kind == "capacitybuffer" else None
        wants = tuple(headroom_wants(idle, list(gh.held), s.shapes, views, effective_limits, buffers))

    alerts = alerts_for(report, asked, s.ceilings, unavailable, teams)
    kept = {g.key for g in reserved}
    activate = tuple(g.key for g in s.gangs if g.kind == "Workload" and g.held and g.key in placements
                     and t >= placements[g.key].start and g.key in kept)
    plan = MoneyPlan(
        decisions=decisions, report=report, asks=asks, counting=tuple(gangs), asked=asked, breaches=over,
        teams=teams, placements=placements, placement_problems=problems, limits=limit_plan,
        effective_limits=effective_limits, unavailable=unavailable, planned=tuple(planned),
        gang_headroom=gh, headroom=sized, wants=wants, alerts=tuple(alerts), activate=activate,
        headroom_sized=s.pool_observations is not None, spares=spares,
        idle_nodes={pool: n for pool, (n, _) in idle.items()},
    )
    return plan, MoneyState(cache, held_since)
