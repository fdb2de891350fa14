"""The simulator decides as the controller: one synthetic trace replayed through both, tick by tick.

Why: every number ``simulate`` publishes is read as a statement about the controller, so the two must not
drift. One side is ``PredictivePolicy`` (what ``simulate`` runs) over the trace; the other is the controller's
own ``Controller.tick`` against in-process ports backed by the same trace: a metrics source that answers the
trace's bins up to the tick's time (missing before the trace began, as Prometheus answers) and the rate over the
last two minutes (its instant query), and a cluster backed by
a simulated cluster of its own, whose replicas follow what was applied, turn Ready after the pod (and node)
start-up, and show as Pending unschedulable while their node is provisioning. At every decision (the loop
interval) both must hold the same forecast (start, model, mean and every band) and the same decision (replicas,
every step and its explanation, the stabilisation history) and the same replicas one node start-up ahead (what node
headroom is kept for), and at every tick both clusters the same replicas. A
side that changes when it refits, what it has absorbed, how far it forecasts, what it observes or how it decides
on its own fails this test. Under a cluster cost ceiling (the controller's money stage on one side, the simulator's
ledger on the other) the cut counts must be equal too.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from functools import partial
from typing import Any

import numpy as np
import pytest

from autoscaler.config.parser import parse_config_text
from autoscaler.domain.annotations import ENABLED_LABEL, PREFIX
from autoscaler.domain.coldstart import ColdStartProfile
from autoscaler.domain.status import encode_status, status_object_name
from autoscaler.ports import EventType, NotReadyPod, PodStartups, PodView, StatusObject, StatusWrite, WorkloadView
from autoscaler.runtime.loop import Controller
from autoscaler.simulation.cluster import Cluster as SimCluster
from autoscaler.simulation.cluster import ClusterConfig, NodePool
from autoscaler.simulation.engine import SimulationConfig, tick_seconds_for
from autoscaler.simulation.money import MoneyConfig, MoneyLedger
from autoscaler.simulation.predictive import PredictivePolicy, scaling_policy_for
from autoscaler.synth import synth_trace
from models.registry import make_chain
from models.types import Forecast, TrafficSeries

NS, NAME = "serving", "chat"
STEP = 300  # 5-minute bins: two days are 576 of them, cheap to fit on the shared test machine
DECISION = 60  # the loop interval, and the simulator's decision interval
POD_STARTUP, NODE_STARTUP = 120, 180
CAPACITY = 2.0
CONFIG = f"""\
loop:
  interval: {DECISION}s
  history: 2d
  step: {STEP}s
profiles:
  default:
    history: 2d
    horizon: 30m
    self_tune: false
cold_start:
  node_startup: {NODE_STARTUP}s
prometheus:
  url: http://prometheus.invalid
"""


class TraceSource:
    """``MetricsSource`` over one trace: the bins that ended by the tick's time, missing before the trace began; and
    the rate over the last minute (an instant query), from the per-tick demand the simulator replays."""

    def __init__(self, series: TrafficSeries, per_tick: np.ndarray, tick: int) -> None:
        self.series = series
        self.per_tick = per_tick
        self.tick = tick
        self.now = 0

    def fleet_instant(self, query: str, namespaces: Iterable[str], at: float, *, window_seconds: int = 60,
                      resolution_seconds: int | None = None) -> Mapping[tuple[str, str], float]:
        k = (int(at) - self.series.start) // self.tick
        # a rate over the window's samples: the missing ones are not there (summed as the simulator sums them, so
        # the two agree to the last bit)
        last = [float(v) for v in self.per_tick[max(0, k - window_seconds // self.tick):k] if np.isfinite(v)]
        return {(NS, NAME): sum(last) / len(last)} if NS in namespaces and last else {}

    def fleet_history(
        self, query: str, namespaces: Iterable[str], start: int, end: int, step_seconds: int
    ) -> Mapping[tuple[str, str], TrafficSeries]:
        assert step_seconds == self.series.step_seconds
        assert end <= self.now
        if NS not in namespaces:
            return {}
        times = np.arange(start, end, step_seconds)
        idx = (times - self.series.start) // step_seconds
        ok = (idx >= 0) & (idx < len(self.series))
        values = np.full(len(times), np.nan)
        values[ok] = self.series.values[idx[ok]]
        return {(NS, NAME): TrafficSeries(values, step_seconds, start)}


class TraceCluster:
    """``Cluster`` with one Deployment, backed by a simulated cluster (``simulation.cluster``) of its own: replicas are
    what was applied, Ready after the pod start-up (and the node's, when none had room), and pods whose node is
    still provisioning show as Pending unschedulable, as the API server shows them until the node joins."""

    def __init__(self, sim: SimCluster) -> None:
        self.sim = sim
        self.k = 0
        self.statuses: dict[str, StatusObject] = {}
        self.free_reads = 0

    def free_gpus(self, pools: Sequence[str]) -> Mapping[str, int]:
        """``ports.PoolNodes``: the free GPUs on the Ready nodes of the simulated cluster's pool (the only one)."""
        self.free_reads += 1
        return {p: self.sim.pool.ready_free_gpus(self.k, 1) for p in pools}

    def list_workloads(self) -> list[WorkloadView]:
        return [WorkloadView(
            namespace=NS, name=NAME, uid="uid-chat", resource_version="1",
            labels={"app": NAME, ENABLED_LABEL: "true"},
            annotations={PREFIX + "min-replicas": "1", PREFIX + "max-replicas": "40",
                         PREFIX + "capacity-per-replica": str(CAPACITY), PREFIX + "cold-start": f"{POD_STARTUP}s",
                         **({} if self.sim.pool.name is None else {PREFIX + "nodepool": self.sim.pool.name})},
            replicas=self.sim.requested, ready_replicas=self.sim.ready, selector=f"app={NAME}",
            pod_template={"spec": {"containers": [{"name": "server",
                                                   "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}},
        )]

    def pod_startups(self, namespace: str, selector: str, now: datetime) -> PodStartups:
        waiting = self.sim.waiting_for_node(self.k)
        return PodStartups(not_ready=tuple(NotReadyPod(f"{NAME}-{i}", age, "Pending", scheduled=False,
                                                       reason="Unschedulable") for i, age in enumerate(waiting)))

    def scale(self, namespace: str, name: str, replicas: int) -> bool:
        changed = replicas != self.sim.requested
        self.sim.scale_to(self.k, replicas)
        return changed

    def patch_pod_annotations(self, namespace: str, pod: str, annotations: Mapping[str, str | None],
                              labels: Mapping[str, str | None] | None = None) -> None:
        """No pod is ever marked (the source answers no per-pod load)."""

    def list_marked_pods(self, namespaces: Sequence[str]) -> list[PodView]:
        return []

    def list_statuses(self, namespace: str) -> Mapping[str, StatusObject]:
        return dict(self.statuses)

    def write_status(self, namespace: str, name: str, uid: str, status: Mapping[str, Any],
                     last: StatusObject | None) -> StatusWrite:
        stored = StatusObject(status_object_name(name), encode_status(status), uid, "1")
        self.statuses[stored.name] = stored
        return StatusWrite(stored, True)

    def remove_status_annotation(self, namespace: str, name: str) -> None:
        """Never carried the old annotation."""

    def post_event(self, namespace: str, name: str, uid: str, type: EventType, reason: str, message: str,
                   now: datetime) -> None:
        """Events are not what is compared."""


def _same(a: Forecast | None, b: Forecast | None) -> str | None:
    """None when ``a`` and ``b`` are the same forecast, else what differs."""
    if a is None or b is None:
        return None if a is b else f"one side has no forecast ({a is None=}, {b is None=})"
    if (a.start, a.step_seconds, a.model, a.horizon) != (b.start, b.step_seconds, b.model, b.horizon):
        return f"start/model/horizon {(a.start, a.model, a.horizon)} != {(b.start, b.model, b.horizon)}"
    if sorted(a.quantiles) != sorted(b.quantiles):
        return f"bands {sorted(a.quantiles)} != {sorted(b.quantiles)}"
    arrays = [(a.mean, b.mean), *((a.quantiles[q], b.quantiles[q]) for q in a.quantiles)]
    if not all(np.array_equal(x, y, equal_nan=True) for x, y in arrays):
        return "values differ"
    return None


def _replay(days: float, ceiling: float | None = None,
            nodepool: str | None = None) -> tuple[int, int, set[str], set[str], int, set[bool]]:
    """Replay ``days`` of the synthetic trace through both sides; returns (decisions compared, forecasts compared,
    models seen, deciding steps seen, decisions the ceiling cut). Fails at the first decision whose forecasts or
    decisions differ, or the first tick at which the two simulated clusters hold different replicas.

    ``ceiling``: a cluster ceiling in $/h, held by the controller's money stage on one side and by the simulator's
    (``simulation.money.MoneyLedger``) on the other, both pricing GPUs at the default $4/GPU-hour (the controller
    reads no NodePool here, so neither bills whole nodes).

    ``nodepool``: the Deployment names this NodePool, so the controller reads its free GPUs (``ports.PoolNodes``, here
    the Ready nodes of its simulated cluster) and the simulator's pool carries the name, so it observes the same;
    the last value returned is the set of ``needs_node`` seen (whether decisions planned with a node lead)."""
    text = CONFIG if ceiling is None else CONFIG + f"ceilings:\n  cluster: {ceiling}\n"
    cfg = parse_config_text(text, "sameness.yaml")
    profile = cfg.profile("default")
    series = synth_trace(days=days, seed=7, step_seconds=STEP).requests
    tick = tick_seconds_for(STEP)
    sim_cfg = SimulationConfig(capacity_per_replica=CAPACITY, min_replicas=1, max_replicas=40)
    # nodes of 4 GPUs: scale-ups often need a node, so pods wait for one (Pending unschedulable) on both sides
    cluster_cfg = ClusterConfig(pod_startup_seconds=POD_STARTUP, node_startup_seconds=NODE_STARTUP,
                                gpus_per_replica=1, gpus_per_node=4, tick_seconds=tick)
    policy = PredictivePolicy(
        series, partial(make_chain, profile.model), scaling_policy_for(sim_cfg, profile=profile),
        ColdStartProfile(prior_seconds=POD_STARTUP, node_prior_seconds=NODE_STARTUP), cluster_cfg, DECISION,
        refit_seconds=profile.refit_seconds, history_seconds=profile.history_seconds,
        horizon_seconds=profile.horizon_seconds,
    )

    def simulated() -> SimCluster:
        pool = NodePool.for_config(cluster_cfg)
        pool.name = nodepool
        return SimCluster(cluster_cfg, 1, pool)

    sim = simulated()
    ledger = None if ceiling is None else MoneyLedger(
        MoneyConfig(ceiling_usd_per_hour=ceiling), policy_name="predictive",
        gpu_hour_price=cfg.pricing.default_gpu_hour, gpus_per_replica=1, gpus_per_node=cluster_cfg.gpus_per_node,
        min_replicas=1, tick_seconds=tick, node_startup_ticks=cluster_cfg.ticks(NODE_STARTUP), start=series.start)
    cuts = 0
    demand = np.repeat(series.values, STEP // tick)
    source, kube = TraceSource(series, demand, tick), TraceCluster(simulated())
    needs_node: set[bool] = set()
    controller = Controller(kube, source, lambda: cfg)
    controller.fit_budget_seconds = float("inf")  # one Deployment: no fit is ever deferred
    decisions = forecasts = 0
    models: set[str] = set()
    deciding: set[str] = set()
    aheads: set[bool] = set()
    keeper = None
    for k, d in enumerate(demand.tolist()):
        sim.advance(k)
        kube.sim.advance(k)
        kube.k = k
        desired = policy.decide(k, sim, d)
        if ledger is not None:
            desired = ledger.step(k, sim.requested, desired, policy.decides(k), policy.warm_pool_replicas)
        if desired != sim.requested:
            sim.scale_to(k, desired)
        if ledger is not None:
            ledger.record(k, sim.requested)
        if policy.decides(k):
            now = series.start + k * tick
            source.now = now
            report = controller.tick(float(now))
            assert report.ok, report.errors
            keeper = controller.forecast_keeper(NS, NAME)
            theirs = None if keeper is None else keeper.last
            diff = _same(policy.forecast, theirs)
            assert diff is None, f"decision at t+{k * tick}s: {diff}"
            [outcome] = report.workloads
            assert outcome.decision is not None
            assert policy.decision is not None
            if ledger is None:
                assert outcome.decision == policy.decision, f"decision at t+{k * tick}s"
            else:  # the controller's money stage adds its step; the count after it is the ledger's
                *planned, held = outcome.decision.steps
                assert held.name == "cost_ceiling"
                assert tuple(planned) == policy.decision.steps, f"decision at t+{k * tick}s"
                assert outcome.decision.desired_replicas == desired, f"ceiling at t+{k * tick}s"
                cuts += desired < policy.decision.desired_replicas
            # the replicas one node start-up ahead, what the money stage keeps node headroom for (before any ceiling)
            assert report.money is not None
            assert policy.decided is not None
            assert report.money.ahead[f"{NS}/{NAME}"][0] == policy.decided.ahead, f"ahead at t+{k * tick}s"
            aheads.add(policy.decided.ahead > outcome.decision.desired_replicas)
            needs_node.add(outcome.decision.needs_node)
            steps = outcome.decision.steps  # the rule that set the count: the first step after which it held
            last_other = max((i for i, st in enumerate(steps) if st.replicas != outcome.decision.desired_replicas),
                             default=-1)
            deciding.add(steps[min(last_other + 1, len(steps) - 1)].name)
            decisions += 1
            if theirs is not None:
                forecasts += 1
                models.add(theirs.model)
        assert (kube.sim.requested, kube.sim.ready) == (sim.requested, sim.ready), f"tick t+{k * tick}s"
    assert keeper is not None
    assert keeper.fits == policy.fits
    if ceiling is None:
        assert aheads == {False, True}  # the headroom ahead both matched the decision and looked past it
    assert (kube.free_reads > 0) == (nodepool is not None)
    return decisions, forecasts, models, deciding, cuts, needs_node


@pytest.mark.timeout(600)
def test_the_simulator_and_the_controller_forecast_the_same_at_every_decision_over_two_days() -> None:
    decisions, forecasts, models, deciding, _, needs_node = _replay(days=2.0)
    assert decisions == 2 * 86_400 // DECISION
    # all but the first two bins' decisions (one bin ended, none settled) were forecast, by more than one model
    # once the daily refit had a day of history
    assert forecasts >= decisions - 2 * STEP // DECISION
    assert len(models) > 1, models
    assert {"forecast", "reactive_floor"} <= deciding, deciding
    assert needs_node == {True}  # no NodePool named: no free GPUs read, every new replica planned to wait for a node


@pytest.mark.timeout(600)
def test_under_a_cost_ceiling_the_two_cut_the_same_decisions_to_the_same_count() -> None:
    # $28/h at $4 a GPU-hour: 7 replicas, which the day's peaks exceed (they want up to about 12)
    decisions, _, _, _, cuts, _ = _replay(days=1.0, ceiling=28.0)
    assert decisions == 86_400 // DECISION
    assert cuts > 0


@pytest.mark.timeout(600)
def test_a_deployment_naming_its_nodepool_is_planned_on_the_same_free_gpus_by_both() -> None:
    # both read the free GPUs of the pool's Ready nodes: decisions with the pod lead alone (room for every new
    # replica) and with the node lead (not enough room) are both compared
    decisions, _, _, _, _, needs_node = _replay(days=1.0, nodepool="gpu")
    assert decisions == 86_400 // DECISION
    assert needs_node == {False, True}
