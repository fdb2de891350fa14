"""The simulator decides as the controller: one synthetic trace replayed through both, tick by tick.

Why: every number ``simulate`` publishes is read as a statement about the controller, so the two must not
drift. One side is ``PredictivePolicy`` (what ``simulate`` runs) over the trace; the other is the controller's
own ``Controller.tick`` against in-process ports backed by the same trace: a metrics source that answers the
trace's bins up to the tick's time (missing before the trace began, as Prometheus answers) and the rate over the
last two minutes (its instant query), and a cluster backed by
a simulated cluster of its own, whose replicas follow what was applied, turn Ready after the pod (and node)
start-up, and show as Pending unschedulable while their node is provisioning. At every decision (the loop
interval) both must hold the same forecast (start, model, mean and every band) and the same decision (replicas,
every step and its explanation, the stabilisation history), and at every tick both clusters the same replicas. A
side that changes when it refits, what it has absorbed, how far it forecasts, what it observes or how it decides
on its own fails this test. Under a cluster cost ceiling (the controller's money stage on one side, the simulator's
ledger on the other) the cut counts must be equal too. A small fleet on one shared NodePool (``run_fleet`` against
the controller's tick) must also size the same node headroom for the pool at every decision (both through
``engine.money.pools_headroom``), the idle nodes held by the controller's placeholders on one side and the fleet's
reserved nodes on the other.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from functools import partial
from typing import Any, NamedTuple

import numpy as np
import pytest

from autoscaler.config.parser import parse_config_text
from autoscaler.domain.annotations import ENABLED_LABEL, PREFIX, PRIORITY_TIERS
from autoscaler.domain.coldstart import ColdStartProfile
from autoscaler.domain.gangs import ACTIVATED_ANNOTATION
from autoscaler.domain.scaledown import plan_marks
from autoscaler.domain.status import encode_status, status_object_name
from autoscaler.ports import (
    CustomObjects,
    EventType,
    HeadroomMode,
    HeadroomTarget,
    HeadroomView,
    NodePoolView,
    NotReadyPod,
    PodStartups,
    PodView,
    PoolGpus,
    PoolHeadroom,
    PriorityClasses,
    ScalerView,
    StatusObject,
    StatusWrite,
    WorkloadView,
)
from autoscaler.runtime.loop import Controller
from autoscaler.runtime.money import MoneyStage
from autoscaler.simulation.cluster import EMPTIEST_NODE_FIRST, ClusterConfig, NodePool
from autoscaler.simulation.cluster import Cluster as SimCluster
from autoscaler.simulation.engine import SimulationConfig, tick_seconds_for
from autoscaler.simulation.fleet import DeploymentSpec, FleetConfig, PoolSpec, run_fleet
from autoscaler.simulation.money import SIM_NAMESPACE, GangSpec, MoneyConfig, MoneyLedger
from autoscaler.simulation.money import MoneyOutcome as LedgerOutcome
from autoscaler.simulation.predictive import PredictivePolicy, scaling_policy_for
from autoscaler.simulation.traffic import resolve, spread
from autoscaler.simulation.tuning import Tuning, retuner
from autoscaler.synth import synth_trace
from models.registry import make_chain
from models.types import Forecast, TrafficSeries

NS, NAME = "serving", "chat"
STEP = 300  # 5-minute bins: two days are 576 of them, cheap to fit on the shared test machine
DECISION = 60  # the loop interval, and the simulator's decision interval
POD_STARTUP, NODE_STARTUP = 120, 180
CAPACITY = 2.0
GPUS_PER_NODE = 4  # the simulated cluster's nodes: scale-ups often need a node
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


class FleetSource:
    """``MetricsSource`` over one trace per Deployment: the bins that ended by the tick's time, missing before the
    trace began; and the rate over the last minute (an instant query), from the per-tick demand the simulator
    replays (the missing samples are not there, summed as the simulator sums them, so the two agree to the last
    bit)."""

    def __init__(self, series: Mapping[str, TrafficSeries], per_tick: Mapping[str, np.ndarray], tick: int) -> None:
        self.series = series
        self.per_tick = per_tick
        self.tick = tick
        self.now = 0

    def fleet_instant(self, query: str, namespaces: Iterable[str], at: float, *, window_seconds: int = 60,
                      resolution_seconds: int | None = None) -> Mapping[tuple[str, str], float]:
        out = {}
        for name, series in self.series.items():
            k = (int(at) - series.start) // self.tick
            last = [float(v) for v in self.per_tick[name][max(0, k - window_seconds // self.tick):k] if np.isfinite(v)]
            if NS in namespaces and last:
                out[(NS, name)] = sum(last) / len(last)
        return out

    def fleet_history(
        self, query: str, namespaces: Iterable[str], start: int, end: int, step_seconds: int
    ) -> Mapping[tuple[str, str], TrafficSeries]:
        assert end <= self.now
        if NS not in namespaces:
            return {}
        out = {}
        for name, series in self.series.items():
            times = np.arange(start, end, step_seconds)
            idx = (times - series.start) // step_seconds
            ok = (idx >= 0) & (idx < len(series))
            values = np.full(len(times), np.nan)
            values[ok] = series.values[idx[ok]]
            out[(NS, name)] = TrafficSeries(values, step_seconds, start)
        return out


class TraceCluster:
    """``Cluster`` with one Deployment, backed by a simulated cluster (``simulation.cluster``) of its own: replicas are
    what was applied, Ready after the pod start-up (and the node's, when none had room), and pods whose node is
    still provisioning show as Pending unschedulable, as the API server shows them until the node joins."""

    def __init__(self, sim: SimCluster) -> None:
        self.sim = sim
        self.k = 0
        self.statuses: dict[str, StatusObject] = {}
        self.free_reads = 0

    def pool_gpus(self, pools: Sequence[str]) -> Mapping[str, PoolGpus]:
        """``ports.PoolNodes``: the simulated cluster's pool (the only one) as the API server shows its nodes."""
        self.free_reads += 1
        return {p: self.sim.pool.pool_gpus(self.k) for p in pools}

    def list_scalers(self) -> list[ScalerView]:
        return []  # no other autoscaler scales the simulated Deployments

    def list_workloads(self) -> list[WorkloadView]:
        return [WorkloadView(
            namespace=NS, name=NAME, uid="uid-chat", resource_version="1",
            labels={"app": NAME, ENABLED_LABEL: "true"},
            annotations={PREFIX + "min-replicas": "1", PREFIX + "max-replicas": "40",
                         PREFIX + "priority": "production", PREFIX + "capacity-per-replica": str(CAPACITY),
                         PREFIX + "cold-start": f"{POD_STARTUP}s",
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


class TraceGangs:
    """``TrainingGangs`` with one Kueue Workload, backed by the life cycle a cluster gives it (the simulator's ledger
    keeps the same one): created held (``spec.active: false``) with its window when the scenario submits it; started
    by the controller's patch (``spec.active: true``), it is admitted; it runs once the nodes reserved for it are up
    (one node start-up after the ceiling first reserved it) for its run time, then finishes; a running gang the
    ceiling no longer reserves is preempted (its run is lost) and waits held again, as in the ledger."""

    def __init__(self, spec: GangSpec, start: int, tick: int, lead_ticks: int) -> None:
        self.spec = spec
        self.start = start
        self.tick = tick
        self.lead = lead_ticks
        self.k = 0
        self.state = "waiting"  # waiting -> reserved -> running -> done; running -> waiting (preempted)
        self.reserved_tick = -1
        self.end_tick = -1
        self.reserved: list[tuple[str, int]] = []
        self.preempted: list[tuple[str, int]] = []

    @property
    def key(self) -> str:
        return f"Workload/{SIM_NAMESPACE}/{self.spec.name}"

    def _object(self) -> dict[str, Any]:
        g = self.spec
        annotations = {PREFIX + "start-after": str(self.start + g.at_seconds),
                       PREFIX + "deadline": str(self.start + g.at_seconds + g.window_seconds),
                       PREFIX + "duration": f"{g.run_seconds}s"}
        obj: dict[str, Any] = {
            "apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "Workload",
            "metadata": {"name": g.name, "namespace": SIM_NAMESPACE, "uid": "uid-gang", "annotations": annotations},
            "spec": {"queueName": "gpu", "priority": g.priority, "active": self.state not in ("waiting", "reserved"),
                     "podSets": [{"name": "workers", "count": g.gpus, "template": {"spec": {"containers": [
                         {"name": "trainer", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}}]},
        }
        if self.state in ("running", "done"):
            annotations[ACTIVATED_ANNOTATION] = "started"
            conditions = [{"type": "Admitted", "status": "True", "reason": "Admitted", "message": "admitted",
                           "lastTransitionTime": "2023-11-21T00:00:00Z"}]
            if self.state == "done":
                conditions.append({"type": "Finished", "status": "True", "reason": "Succeeded", "message": "done",
                                   "lastTransitionTime": "2023-11-21T00:00:00Z"})
            obj["status"] = {"admission": {"clusterQueue": "gpu",
                                           "podSetAssignments": [{"name": "workers", "count": g.gpus}]},
                             "conditions": conditions}
        return obj

    def advance(self, k: int) -> None:
        self.k = k
        if self.state == "running" and k >= self.end_tick:
            self.state = "done"

    def list_kueue_workloads(self) -> CustomObjects:
        submitted = self.k * self.tick >= self.spec.at_seconds
        return CustomObjects("kueue.x-k8s.io/v1beta1", "Workload", items=(self._object(),) if submitted else ())

    def list_volcano_podgroups(self) -> CustomObjects:
        return CustomObjects("scheduling.volcano.sh/v1beta1", "PodGroup", installed=False)

    def priority_classes(self) -> PriorityClasses:
        return PriorityClasses()

    def patch_gang(self, kind: str, namespace: str, name: str, patch: Mapping[str, Any]) -> None:
        if patch.get("spec", {}).get("active") is True:  # started: reserved by this very tick's ceiling at the latest
            assert self.state in ("waiting", "reserved"), f"started while {self.state}"
            self.ceiling(True)
            self.state = "running"
            run_tick = max(self.k, self.reserved_tick + self.lead)
            self.end_tick = run_tick + -(-self.spec.run_seconds // self.tick)

    def list_kueue_queues(self) -> tuple[CustomObjects, CustomObjects]:
        return (CustomObjects("kueue.x-k8s.io/v1beta1", "LocalQueue", installed=False),
                CustomObjects("kueue.x-k8s.io/v1beta1", "ClusterQueue", installed=False))

    def post_gang_event(self, kind: str, namespace: str, name: str, uid: str, type: EventType, reason: str,
                        message: str, now: datetime) -> None:
        """Events are not what is compared."""

    def ceiling(self, reserved: bool) -> None:
        """What the cluster does with the money stage's verdict on the gang (after the tick's writes)."""
        if reserved and self.state == "waiting":
            self.state, self.reserved_tick = "reserved", self.k
            self.reserved.append((self.spec.name, self.k))
        elif not reserved and self.state == "reserved":
            self.state = "waiting"
        elif not reserved and self.state == "running":
            self.state = "waiting"
            self.preempted.append((self.spec.name, self.k))


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


class Replayed(NamedTuple):
    """What ``_replay`` compared."""

    decisions: int
    forecasts: int
    models: set[str]
    deciding: set[str]  # the steps that set a count
    cuts: int  # decisions the ceiling cut
    money: LedgerOutcome | None
    troughs: int  # decisions that placed the gang later than it could first start (in the forecast's trough)
    needs_node: set[bool]  # whether decisions planned with a node lead
    tuned: tuple[tuple[int | None, float], ...] = ()  # the points the self-tuning replays chose, in order


def _replay(days: float, ceiling: float | None = None, gang: GangSpec | None = None,
            series: TrafficSeries | None = None, nodepool: str | None = None, tuned: bool = False) -> Replayed:
    """Replay ``days`` of the synthetic trace through both sides and say what was compared. Fails at the first decision
    whose forecasts or decisions differ, or the first tick at which the two simulated clusters hold different replicas.

    ``ceiling``: a cluster ceiling in $/h, held by the controller's money stage on one side and by the simulator's
    (``simulation.money.MoneyLedger``) on the other, both pricing GPUs at the default $4/GPU-hour (the controller
    reads no NodePool here, so neither bills whole nodes).

    ``gang``: a training gang with a window, a held Kueue Workload (``TraceGangs``) on the controller's side and the
    ledger's gang on the simulator's; both must place it at the same start at every decision, reserve and start it
    at the same decisions, and preempt it at the same ones.

    ``nodepool``: the Deployment names this NodePool, so the controller reads its free GPUs (``ports.PoolNodes``, here
    the Ready nodes of its simulated cluster) and the simulator's pool carries the name, so it observes the same."""
    text = CONFIG if ceiling is None else CONFIG + f"ceilings:\n  cluster: {ceiling}\n"
    if nodepool is not None:  # the controller knows the pool's node size (its replays run on such nodes)
        text += f"pricing:\n  nodepools:\n    {nodepool}: {{gpus_per_node: {GPUS_PER_NODE}}}\n"
    if tuned:
        text = text.replace("self_tune: false", "self_tune: true")
    cfg = parse_config_text(text, "sameness.yaml")
    profile = cfg.profile("default")
    if series is None:
        series = synth_trace(days=days, seed=7, step_seconds=STEP).requests
    tick = tick_seconds_for(STEP)
    sim_cfg = SimulationConfig(capacity_per_replica=CAPACITY, min_replicas=1, max_replicas=40)
    # nodes of 4 GPUs: scale-ups often need a node, so pods wait for one (Pending unschedulable) on both sides
    cluster_cfg = ClusterConfig(pod_startup_seconds=POD_STARTUP, node_startup_seconds=NODE_STARTUP,
                                gpus_per_replica=1, gpus_per_node=GPUS_PER_NODE, tick_seconds=tick)
    policy = PredictivePolicy(
        series, partial(make_chain, profile.model), scaling_policy_for(sim_cfg, profile=profile),
        ColdStartProfile(prior_seconds=POD_STARTUP, node_prior_seconds=NODE_STARTUP), cluster_cfg, DECISION,
        refit_seconds=profile.refit_seconds, history_seconds=profile.history_seconds,
        horizon_seconds=profile.horizon_seconds,
        retune=None if not tuned else retuner(
            partial(make_chain, profile.model), quantiles=profile.tune_quantiles,
            utilisations=profile.tune_utilisations, slo_wait_seconds=profile.slo_wait_seconds,
            slo_attainment=profile.slo_attainment, warmup_seconds=profile.history_seconds,
            horizon_seconds=profile.horizon_seconds, gpus_per_node=cluster_cfg.gpus_per_node),
    )

    def simulated() -> SimCluster:
        pool = NodePool.for_config(cluster_cfg)
        pool.name = nodepool
        return SimCluster(cluster_cfg, 1, pool, EMPTIEST_NODE_FIRST)  # the ReplicaSet removes the pods marked

    sim = simulated()
    ledger = None if ceiling is None and gang is None else MoneyLedger(
        MoneyConfig(ceiling_usd_per_hour=ceiling, gangs=() if gang is None else (gang,)), policy_name="predictive",
        gpu_hour_price=cfg.pricing.default_gpu_hour, gpus_per_replica=1, gpus_per_node=cluster_cfg.gpus_per_node,
        min_replicas=1, tick_seconds=tick, node_startup_ticks=cluster_cfg.ticks(NODE_STARTUP), start=series.start,
        placer=policy, node_startup_seconds=float(NODE_STARTUP))
    gangs = None if gang is None else TraceGangs(gang, series.start, tick, cluster_cfg.ticks(NODE_STARTUP))
    placed = troughs = 0
    cuts = 0
    demand = np.repeat(series.values, STEP // tick)
    source, kube = FleetSource({NAME: series}, {NAME: demand}, tick), TraceCluster(simulated())
    needs_node: set[bool] = set()
    controller = Controller(kube, source, lambda: cfg, money=MoneyStage(training=gangs))
    controller.fit_budget_seconds = float("inf")  # one Deployment: no fit is ever deferred
    controller.tune_budget_seconds = float("inf")  # nor a self-tuning replay
    decisions = forecasts = 0
    models: set[str] = set()
    deciding: set[str] = set()
    keeper = None
    for k, d in enumerate(demand.tolist()):
        sim.advance(k)
        kube.sim.advance(k)
        kube.k = k
        if gangs is not None:
            gangs.advance(k)
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
            # the one error a gang may bring: no start of its window fits (the ledger notes the same placement)
            assert all(gangs is not None and e.startswith(f"{gangs.key}: no start") for e in report.errors), \
                report.errors
            if gangs is not None:
                assert report.money is not None
                assert ledger is not None
                plan = ledger.plan  # None: the ledger had no gang to place and its plan fitted
                mine = {key: p.start for key, p in report.money.placements.items()}
                theirs_placed = {} if plan is None else {key: p.start for key, p in plan.placements.items()}
                assert mine == theirs_placed, f"placements at t+{k * tick}s"
                reserved = {g.key for g in report.money.report.gangs_reserved}
                assert reserved == ({g.key for g in plan.reserved} if plan else set()), f"reserved at t+{k * tick}s"
                gangs.ceiling(gangs.key in reserved)
                placed += bool(mine)
                troughs += any(start > now + NODE_STARTUP + STEP for start in mine.values())
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
    money = None if ledger is None else ledger.outcome()
    if gangs is not None:
        assert money is not None
        assert (gangs.reserved, gangs.preempted) == (list(money.reserved_ticks), list(money.preempted_ticks))
        assert placed > 0, "the gang was never placed: nothing was compared"
        assert gangs.reserved, "the gang was never reserved: nothing was compared"
    assert (kube.free_reads > 0) == (nodepool is not None)
    memory = controller._memory[(NS, NAME)]
    if tuned:  # the controller's last replay is the simulator's last (the days it pooled included)
        assert memory.tuning is not None
        assert policy.tunings
        assert isinstance(policy.tunings[-1], Tuning)  # what the retuner replays (a TuningOutcome to the policy)
        assert memory.tuning.to_dict() | {"cpu_seconds": 0} == policy.tunings[-1].to_dict() | {"cpu_seconds": 0}
    return Replayed(decisions, forecasts, models, deciding, cuts, money, troughs, needs_node,
                    tuple((t.chosen, t.chosen_utilisation) for t in policy.tunings))


@pytest.mark.timeout(600)
def test_the_simulator_and_the_controller_forecast_the_same_at_every_decision_over_two_days() -> None:
    replayed = _replay(days=2.0)
    decisions, forecasts, models, deciding = replayed.decisions, replayed.forecasts, replayed.models, replayed.deciding
    needs_node = replayed.needs_node
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
    replayed = _replay(days=1.0, ceiling=28.0)
    decisions, cuts = replayed.decisions, replayed.cuts
    assert decisions == 86_400 // DECISION
    assert cuts > 0


@pytest.mark.timeout(600)
def test_a_gang_with_a_window_is_placed_reserved_started_and_preempted_the_same_on_both_sides() -> None:
    # $28/h at $4 a GPU-hour: 7 GPUs. A 4-GPU gang submitted at 20:00 with until 06:00 to start and 2 h to run: it
    # fits only where inference needs at most 3 replicas. The production Deployment outranks it, so the evening's
    # wobbles take its budget back (preempted, re-placed, reserved again) until it runs to its end in the night.
    gang = GangSpec(gpus=4, at_seconds=20 * 3600, run_seconds=2 * 3600, window_seconds=10 * 3600,
                    priority=PRIORITY_TIERS["standard"], name="train")
    replayed = _replay(days=1.5, ceiling=28.0, gang=gang)
    decisions, money = replayed.decisions, replayed.money
    assert decisions == 36 * 3600 // DECISION
    assert money is not None
    assert len(money.reserved_ticks) >= 2
    assert money.preempted_ticks
    assert money.gangs_missed == 0  # it ran to its end


@pytest.mark.timeout(600)
def test_a_gang_submitted_at_the_peak_is_placed_in_the_forecasts_trough_the_same_on_both_sides() -> None:
    # A clean daily cycle (2 to 10 req/s, peak at 15:00), whose shape the model refitted on the third day (on two
    # days of history) forecasts, and a gang submitted at 20:00 that day with 12 h to start: inference still needs
    # more than 3 of the 7 GPUs until late evening, so both sides place it hours ahead, in the median forecast's
    # night trough, and re-place it as the forecast moves: the trough choice, not only the window's start, is
    # compared.
    t = np.arange(int(3.5 * 86_400) // STEP) * STEP
    rng = np.random.default_rng(3)
    values = (6.0 + 4.0 * np.cos(2 * np.pi * (t - 15 * 3600) / 86_400)) * rng.normal(1.0, 0.02, t.size)
    gang = GangSpec(gpus=4, at_seconds=68 * 3600, run_seconds=2 * 3600, window_seconds=12 * 3600,
                    priority=PRIORITY_TIERS["standard"], name="train")
    replayed = _replay(days=3.5, ceiling=28.0, gang=gang, series=TrafficSeries(values, STEP, 1_709_510_400))
    assert replayed.troughs > 0, "the gang was never placed later than its first possible start"
    assert replayed.money is not None
    assert replayed.money.reserved_ticks


# ---------------------------------------------------------------------------------------------- a small fleet

FLEET_POOL = "gpu"
FLEET = (("chat", "web", "production", 7), ("search", "data", "standard", 11))  # name, team, priority, trace seed


class FleetKube(TraceCluster):
    """``Cluster`` with the fleet's Deployments on one shared simulated NodePool (``TraceCluster`` for a fleet)."""

    def __init__(self, sims: Mapping[str, SimCluster]) -> None:
        self.sims = sims
        self.k = 0
        self.statuses: dict[str, StatusObject] = {}
        self.free_reads = 0

    def pool_gpus(self, pools: Sequence[str]) -> Mapping[str, PoolGpus]:
        """``ports.PoolNodes``: the shared pool's nodes as the API server shows them."""
        self.free_reads += 1
        pool = next(iter(self.sims.values())).pool
        return {p: pool.pool_gpus(self.k) for p in pools}


    def list_scalers(self) -> list[ScalerView]:
        return []  # no other autoscaler scales the simulated Deployments

    def list_workloads(self) -> list[WorkloadView]:
        return [WorkloadView(
            namespace=NS, name=name, uid=f"uid-{name}", resource_version="1",
            labels={"app": name, ENABLED_LABEL: "true"},
            annotations={PREFIX + "min-replicas": "1", PREFIX + "max-replicas": "40", PREFIX + "team": team,
                         PREFIX + "priority": priority, PREFIX + "nodepool": FLEET_POOL,
                         PREFIX + "capacity-per-replica": str(CAPACITY), PREFIX + "cold-start": f"{POD_STARTUP}s"},
            replicas=self.sims[name].requested, ready_replicas=self.sims[name].ready, selector=f"app={name}",
            pod_template={"spec": {"containers": [{"name": "server",
                                                   "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}},
        ) for name, team, priority, _ in FLEET]

    def pod_startups(self, namespace: str, selector: str, now: datetime) -> PodStartups:
        name = selector.removeprefix("app=")
        waiting = self.sims[name].waiting_for_node(self.k)
        return PodStartups(not_ready=tuple(NotReadyPod(f"{name}-{i}", age, "Pending", scheduled=False,
                                                       reason="Unschedulable") for i, age in enumerate(waiting)))

    def scale(self, namespace: str, name: str, replicas: int) -> bool:
        changed = replicas != self.sims[name].requested
        self.sims[name].scale_to(self.k, replicas)
        return changed


class FleetCapacity:
    """``NodeCapacity`` over the fleet's shared simulated NodePool: the NodePool as Karpenter reports it (no GPU
    limit: the ceiling as billed guards its nodes, as in ``run_fleet``), placeholder headroom whose whole-node count
    the cluster applies after the tick (``hold``, what Karpenter does with the placeholders), and limit writes that
    change nothing (the pool has none to follow)."""

    def __init__(self, pool: NodePool) -> None:
        self.pool = pool
        self.held = 0
        self.writes = 0

    def list_node_pools(self) -> list[NodePoolView]:
        return [NodePoolView(FLEET_POOL, "1", None, self.pool.used_gpus(), self.pool.node_count, {}, (), (), {}, (),
                             self.pool.gpus_per_node)]

    def set_gpu_limit(self, pool: str, gpus: int) -> bool:
        return False

    def headroom_mode(self) -> HeadroomMode:
        return "placeholder"

    def ensure_headroom(self, target: HeadroomTarget, amount: int) -> bool:
        assert isinstance(target, PoolHeadroom)
        assert target.pool.name == FLEET_POOL
        assert target.gpus_per_node == self.pool.gpus_per_node
        changed, self.held = amount != self.held, amount
        self.writes += changed
        return changed

    def remove_headroom(self, target: HeadroomTarget) -> bool:
        return self.ensure_headroom(target, 0)

    def list_headroom(self) -> list[HeadroomView]:
        return [HeadroomView("Deployment", "predictive-autoscaler", "headroom", FLEET_POOL, self.held)] if self.held \
            else []

    def hold(self, k: int) -> None:
        self.pool.hold_idle(k, self.held)


def _fleet_replay(days: float, ceiling: float) -> tuple[int, int, set[int], int, int]:
    """Replay a fleet of two Deployments sharing one NodePool of 4-GPU nodes under a cluster ceiling, with
    forecast-sized node headroom, through the fleet simulator (``simulation.fleet.run_fleet``, the code of
    ``simulate --fleet``) and through the controller's tick on ports backed by the same simulated cluster (one shared
    ``NodePool``, nodes refused past the ceiling as billed, as ``run_fleet`` builds it; the controller's placeholder
    nodes held by it as Karpenter holds them); the replicas must be equal at every tick, and the decisions (after the
    ceiling) and the pool's headroom nodes at every decision. Returns (decisions compared, decisions the ceiling cut,
    the headroom node counts seen, the decisions with spare replicas lent, those of them on the headroom's idle
    nodes)."""
    text = CONFIG + (f"ceilings:\n  cluster: {ceiling}\nkarpenter:\n  headroom: placeholder\n"
                     f"pricing:\n  nodepools:\n    {FLEET_POOL}: {{gpus_per_node: 4, gpu_hour: 4.0}}\n")
    cfg = parse_config_text(text, "sameness-fleet.yaml")
    profile = cfg.profile("default")
    series = {name: synth_trace(days=days, seed=seed, step_seconds=STEP).requests for name, _, _, seed in FLEET}
    deps = tuple(DeploymentSpec(name, series[name], FLEET_POOL, CAPACITY, min_replicas=1, max_replicas=40, team=team,
                                priority=PRIORITY_TIERS[priority], pod_startup_seconds=POD_STARTUP)
                 for name, team, priority, _ in FLEET)
    pool = PoolSpec(FLEET_POOL, gpus_per_node=4, node_usd_per_hour=16.0, node_startup_seconds=NODE_STARTUP)
    fleet = FleetConfig(deps, (pool,), cluster_ceiling=ceiling)
    tick = fleet.tick_seconds

    def build(i: int, d: DeploymentSpec, sim_cfg: SimulationConfig, cluster_cfg: ClusterConfig) -> PredictivePolicy:
        return PredictivePolicy(
            d.series, partial(make_chain, profile.model), scaling_policy_for(sim_cfg, profile=profile),
            ColdStartProfile(prior_seconds=POD_STARTUP, node_prior_seconds=NODE_STARTUP), cluster_cfg, DECISION,
            refit_seconds=profile.refit_seconds, history_seconds=profile.history_seconds,
            horizon_seconds=profile.horizon_seconds,
        )

    run = run_fleet(fleet, build, "predictive", headroom=True, headroom_every=DECISION // tick)
    ran = {r.spec.name: r for r in run.deployments}
    sized = run.headroom_nodes[FLEET_POOL]

    # the controller's side: the same simulated NodePool, refusing a node past the ceiling as billed (run_fleet's rule)
    shared: list[NodePool] = []
    shared.append(NodePool(pool.gpus_per_node, pool.node_startup_seconds, pool.consolidate_after_seconds, tick,
                           may_add_node=lambda: shared[0].node_count * pool.node_usd_per_hour
                           + pool.node_usd_per_hour <= ceiling + 1e-9))
    # a scale-down removes the pods the controller's marks choose, those of the emptiest nodes first (as run_fleet
    # models our policy's Deployments): this side's ports list no pods, so the marks' choice is modelled here too
    sims = {name: SimCluster(fleet.cluster_config(d), int(ran[name].result.requested[0]), shared[0],
                             EMPTIEST_NODE_FIRST)
            for name, d in zip(series, deps, strict=True)}
    # the demand the simulated traffic serves each tick, as run_fleet spreads each bin over its ticks
    per_tick = {name: spread(s.values, STEP // tick, resolve(fleet.bin_shape, STEP)) for name, s in series.items()}
    source, kube = FleetSource(series, per_tick, tick), FleetKube(sims)
    capacity = FleetCapacity(shared[0])
    controller = Controller(kube, source, lambda: cfg, money=MoneyStage(capacity=capacity))
    controller.fit_budget_seconds = float("inf")
    start = next(iter(series.values())).start
    decisions = cuts = lent = filled = 0
    idle: set[int] = set()
    for k in range(fleet.ticks()):
        for sim in sims.values():
            sim.advance(k)
        kube.k = k
        if k % (DECISION // tick) == 0:
            source.now = start + k * tick
            report = controller.tick(float(source.now))
            assert report.ok, report.errors
            for outcome in report.workloads:
                assert outcome.decision is not None
                fleet_side = ran[outcome.name]
                assert outcome.decision.desired_replicas == fleet_side.result.requested[k], \
                    f"{outcome.name}: decision at t+{k * tick}s"
                steps = outcome.decision.steps
                at = next(i for i, step in enumerate(steps) if step.name == "cost_ceiling")
                planned, allowed = steps[at - 1].replicas, steps[at].replicas
                assert report.money is not None
                spare = report.money.spares.get(f"{NS}/{outcome.name}", 0)
                # what follows the ceiling is the spares the pool lent on its paid, idle GPUs (engine.spare)
                assert steps[at + 1:] == (() if not spare else (steps[-1],))
                assert allowed + spare == outcome.decision.desired_replicas
                assert (planned > allowed) == (fleet_side.decisions[k] > fleet_side.result.requested[k] - spare), \
                    f"{outcome.name}: cut at t+{k * tick}s"
                cuts += planned > allowed
                lent += spare > 0
                filled += spare > 0 and "idle headroom node" in steps[-1].detail
            # the pool's node headroom: the same idle nodes, sized by pools_headroom on both sides
            assert report.money is not None
            assert report.money.pool_headroom.get(FLEET_POOL, 0) == sized[k], f"headroom at t+{k * tick}s"
            assert capacity.held == sized[k], f"placeholders at t+{k * tick}s"
            idle.add(int(sized[k]))
            capacity.hold(k)  # Karpenter keeps (and provisions) the placeholders' nodes after the tick's writes
            decisions += 1
        for name, sim in sims.items():
            assert (sim.requested, sim.ready) == (ran[name].result.requested[k], ran[name].result.ready[k]), \
                f"{name}: tick t+{k * tick}s"
    return decisions, cuts, idle, lent, filled


@pytest.mark.timeout(600)
def test_a_small_fleet_under_a_cluster_ceiling_decides_and_holds_headroom_the_same_through_the_controller_and_run_fleet(
) -> None:
    # two Deployments on one pool of 4-GPU nodes at $16/node-hour; $96/h buys 6 nodes, which the two peaks exceed
    decisions, cuts, idle, lent, filled = _fleet_replay(days=1.0, ceiling=96.0)
    assert decisions == 86_400 // DECISION
    assert cuts > 0
    assert 0 < lent < 2 * decisions  # the two Deployments' decisions with spare replicas on paid GPUs and without
    assert filled > 0  # some spares stood on the headroom's idle nodes, which its placeholders then left to them
    assert 0 in idle  # decisions with no idle node and with some were both compared
    assert max(idle) > 0


@pytest.mark.timeout(600)
def test_a_deployment_naming_its_nodepool_is_planned_on_the_same_free_gpus_by_both() -> None:
    # both read the free GPUs of the pool's Ready nodes: decisions with the pod lead alone (room for every new
    # replica) and with the node lead (not enough room) are both compared
    replayed = _replay(days=1.0, nodepool="gpu")
    decisions, needs_node = replayed.decisions, replayed.needs_node
    assert decisions == 86_400 // DECISION
    assert needs_node == {False, True}


@pytest.mark.timeout(900)
def test_self_tuning_chooses_and_runs_the_same_points_on_both_sides() -> None:
    # Three days: a day to fit on, a day replayed, and the tuned points run on both sides from the same decision.
    # The Deployment names its NodePool (4-GPU nodes): both replay on nodes of that size.
    replayed = _replay(days=3.0, tuned=True, nodepool="gpu")
    assert replayed.decisions == 3 * 86_400 // DECISION
    assert replayed.tuned, "no replay chose a point: nothing was compared"


def test_the_simulated_scale_in_removes_the_replicas_the_controllers_marks_choose() -> None:
    """Which replicas a scale-down of our policy removes is the controller's call (``domain.scaledown.plan_marks``:
    the emptiest nodes first, then the idlest, then the most recently Ready); the simulator's cluster removes them in
    its own loop (``Cluster.scale_in``). On a shared pool where three Deployments came and went, each step down of
    ``a`` removes exactly the replicas the marks would, the pods shown to ``plan_marks`` as the simulator holds them
    (equal loads: a simulated pod carries no load of its own)."""
    cfg = ClusterConfig(pod_startup_seconds=30, node_startup_seconds=60, gpus_per_node=4, consolidate_after_seconds=0)
    pool = NodePool.for_config(cfg)
    a = SimCluster(cfg, 0, pool, EMPTIEST_NODE_FIRST)
    b, c = SimCluster(cfg, 0, pool), SimCluster(cfg, 0, pool)
    k = 0

    def settle() -> None:
        nonlocal k
        for _ in range(8):
            k += 1
            for cl in (a, b, c):
                cl.advance(k)

    for cl, n in ((a, 3), (b, 2), (a, 5), (c, 3), (a, 8), (b, 5), (a, 10)):
        cl.scale_to(k, n)
        settle()
    b.scale_to(k, 1)
    c.scale_to(k, 1)
    settle()
    names = {id(n): f"node-{i}" for i, n in enumerate(pool.nodes)}
    removed_total = 0
    while a.requested > 2:
        # named so that names sort newest first: the simulator breaks exact ties (same node, same Ready tick) by
        # the newer ask, as the controller breaks them by name (``plan_marks``'s last tie-break)
        replicas = {f"a-h-{99 - i:02d}": r for i, r in enumerate(a.ready_replicas)}
        pods = [PodView(name, created=r.ask_tick * 15.0, ready_since=float(r.ready_tick or 0) * 15.0, phase="Running",
                        terminating=False, owner_replicaset="a-h", template_hash="h",
                        node=names[id(r.node)] if r.node is not None else None) for name, r in replicas.items()]
        used = {names[id(n)]: n.used for n in pool.nodes}
        marks = plan_marks("a", pods, 2, dict.fromkeys(replicas, 0.0), now=k * 15.0, node_gpus=used)
        chosen = {id(replicas[m.pod]) for m in marks.marks}
        before = {id(r) for r in a.ready_replicas}
        a.scale_to(k, a.requested - 2)
        assert before - {id(r) for r in a.ready_replicas} == chosen, f"step down to {a.requested}"
        removed_total += 2
        settle()
    assert removed_total == 8
