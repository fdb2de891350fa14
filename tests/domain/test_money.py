"""The money decisions (``autoscaler.domain.money``), as pure functions: ahead-of-time replicas, asked cost and
breaches, which pools are priced, headroom sharing, GPUs unavailable."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from autoscaler.domain.annotations import Mode, WorkloadSpec
from autoscaler.domain.cost import Ceilings, GpuPrices, PriceTable, WorkloadAsk
from autoscaler.domain.gangs import Gang
from autoscaler.domain.money import (
    PlannedWorkload,
    ahead_replicas,
    asked_by_scope,
    breaches,
    plan_headroom,
    pool_shapes,
    unavailable_gpus,
)
from autoscaler.domain.nodes import PoolShape
from autoscaler.domain.types import ScalingDecision, ScalingPolicy, Step
from autoscaler.ports import DeploymentHeadroom, NodePoolView, NodeRequirement, PoolHeadroom, WorkloadView
from models.types import Forecast

NOW = 1_700_000_000


def decision(desired: int, *, lead: float = 300.0, missing: tuple[str, ...] = ()) -> ScalingDecision:
    return ScalingDecision(
        desired_replicas=desired, forecast_demand=None, lead_seconds=lead, warm_pool_replicas=0,
        warm_pool_as="replicas", reactive_replicas=0, steps=(Step("min_max_clamp", desired, "test"),),
        recommendations=(), now=NOW, missing_metrics=missing,
    )


def spec(name: str, *, gpus: int = 1, priority: int = 50, pool: str | None = "l4", team: str = "ml",
         min_replicas: int = 1, mode: str = "scale") -> WorkloadSpec:
    return WorkloadSpec("serving", name, min_replicas, 50, 1.0, mode=Mode(mode), team=team, priority=priority,
                        nodepool=pool, gpus_per_replica=gpus)


def planned(name: str, *, replicas: int, desired: int, ahead: int, ready: int | None = None,
            unschedulable: int = 0, **kw: object) -> PlannedWorkload:
    view = WorkloadView("serving", name, f"uid-{name}", "1", {}, {}, replicas,
                        replicas if ready is None else ready, f"app={name}")
    return PlannedWorkload(view, spec(name, **kw), decision(desired), ahead, unschedulable)  # type: ignore[arg-type]


def pool_view(name: str, *, gpus_in_use: int | None = None, limit: int | None = None,
              gpu_count: str | None = "1", labels: dict[str, str] | None = None) -> NodePoolView:
    reqs = [NodeRequirement("node.kubernetes.io/instance-type", "In", ("g6.xlarge",))] if gpu_count else []
    return NodePoolView(name, "1", limit, gpus_in_use, 0, {}, tuple(reqs), (), labels or {},
                        ("g6.xlarge",) if gpu_count else (), int(gpu_count) if gpu_count else None)


# ---------------------------------------------------------------------------------------------- ahead


def ramp(levels: Sequence[float], step: int = 60) -> Forecast:
    band = np.asarray(levels, dtype=np.float64)
    return Forecast(NOW, step, band, {90: band}, "test")


def test_ahead_looks_one_node_start_up_beyond_the_lead_and_is_clamped() -> None:
    # Demand 1 req/s for 10 minutes, then 5 req/s: at lead 5m the window sees 1; one 10m node start-up later, 5.
    forecast = ramp([1.0] * 10 + [5.0] * 20)
    policy = ScalingPolicy(capacity_per_replica=1.0, min_replicas=1, max_replicas=4, lookahead_window_seconds=60)
    assert ahead_replicas(forecast, policy, decision(1, lead=240), 0, NOW) == 1
    assert ahead_replicas(forecast, policy, decision(1, lead=240), 600, NOW) == 4  # 5 needed, max_replicas 4
    # Never below the decision; without a usable forecast (or evidence) it is the decision.
    assert ahead_replicas(ramp([0.5] * 30), policy, decision(3, lead=240), 600, NOW) == 3
    assert ahead_replicas(None, policy, decision(2), 600, NOW) == 2
    assert ahead_replicas(forecast, policy, decision(2, missing=("no forecast",)), 600, NOW) == 2


# ---------------------------------------------------------------------------------------------- cost


def test_asked_cost_counts_every_team_and_gang_before_cuts_and_breaches_compare_with_ceilings() -> None:
    asks = [
        WorkloadAsk("serving/a", "ml", 100, 2, 1, 5),  # 10 GPUs
        WorkloadAsk("serving/b", "web", 50, 1, 1, 3, nodepool="cheap"),  # 3 GPUs at $1
    ]
    gangs = [Gang("Workload", "training", "ft", 8, 2, True, 50, team="ml"),
             Gang("Workload", "training", "old", 64, 8, True, 50, team="ml", inactive=True)]
    asked = asked_by_scope(asks, gangs, GpuPrices({"cheap": 1.0}, default=4.0))
    assert asked == {"cluster": 40.0 + 3.0 + 32.0, "team ml": 72.0, "team web": 3.0}
    over = breaches(asked, Ceilings(cluster=100.0, teams={"ml": 70.0, "web": 3.0}))
    assert over == {"team ml": (72.0, 70.0)}  # web at exactly its ceiling is not over


def test_only_pools_that_matter_are_reported_when_they_cannot_be_priced() -> None:
    prices = PriceTable(instance_types={})
    cpu = pool_view("cpu", gpu_count=None)
    mystery = pool_view("mystery", gpu_count=None, limit=16)
    labelled = NodePoolView("l4-labels", "1", None, None, 0, {}, (), (), {"nvidia.com/gpu.count": "1"}, (), 1)
    shapes, problems = pool_shapes([cpu, labelled, mystery], prices)
    assert set(shapes) == {"l4-labels"}  # the GPU count from the template labels is used
    assert shapes["l4-labels"].gpus_per_node == 1
    assert len(problems) == 1
    assert problems[0].startswith("NodePool mystery: GPUs per node unknown")  # has a GPU limit: it matters


# ---------------------------------------------------------------------------------------------- headroom


L4 = PoolShape("l4", 1, 0.8, "on-demand")
G8 = PoolShape("g8", 8, 2.0, "on-demand")


def test_placeholder_headroom_is_whole_nodes_beyond_what_pods_and_nodes_already_have() -> None:
    plans = [planned("a", replicas=2, desired=3, ahead=6)]
    decisions = {p.key: p.decision for p in plans}
    wants, extra = plan_headroom(plans, decisions, {"serving/a": 6}, {"l4": L4}, [pool_view("l4", gpus_in_use=4)],
                                 [], {}, "placeholder")
    assert extra == {"serving/a": 3}
    (want,) = wants
    assert isinstance(want.target, PoolHeadroom)
    # The plan needs 6 GPUs; the pool's nodes already have 4: two more one-GPU nodes.
    assert (want.target.pool.name, want.target.gpus_per_node, want.amount) == ("l4", 1, 2)
    # Capped by the pool's limit, and nothing for a pool whose nodes already cover the plan.
    wants, _ = plan_headroom(plans, decisions, {"serving/a": 6}, {"l4": L4}, [pool_view("l4", gpus_in_use=4)],
                             [], {"l4": 5}, "placeholder")
    assert [w.amount for w in wants] == [1]
    wants, _ = plan_headroom(plans, decisions, {"serving/a": 6}, {"l4": L4}, [pool_view("l4", gpus_in_use=6)],
                             [], {}, "placeholder")
    assert wants == []


def test_capacity_buffers_share_a_pools_spare_gpus_by_priority() -> None:
    plans = [planned("low", replicas=1, desired=1, ahead=4, priority=10, pool="g8"),
             planned("high", replicas=1, desired=1, ahead=4, priority=100, pool="g8"),
             planned("nopool", replicas=1, desired=1, ahead=3, pool=None),
             planned("advisory", replicas=1, desired=1, ahead=5, pool=None, mode="advisory")]
    decisions = {p.key: p.decision for p in plans}
    allowed = {p.key: p.ahead_replicas for p in plans}
    # g8: pods request 2 GPUs on a node of 8 (gpus_in_use 8); the plan needs 8: the node's room covers it all.
    wants, _ = plan_headroom(plans, decisions, allowed, {"g8": G8}, [pool_view("g8", gpus_in_use=8, gpu_count="8")],
                             [], {}, "capacitybuffer")
    assert {w.ident: w.amount for w in wants} == {("CapacityBuffer", "serving/nopool"): 2}
    # With a 12-GPU gang on the pool and two nodes (16 GPUs) running, the plan needs 20 GPUs = 3 nodes: one
    # more node, and 4 GPUs beyond what the nodes have. The high-priority workload's 3 extra replicas come
    # first; the low one gets the 1 left.
    gang = Gang("Workload", "t", "ft", 12, 2, True, 50, nodepool="g8")
    wants, _ = plan_headroom(plans, decisions, allowed, {"g8": G8}, [pool_view("g8", gpus_in_use=16, gpu_count="8")],
                             [gang], {}, "capacitybuffer")
    amounts = {w.ident[1]: w.amount for w in wants}
    assert amounts == {"serving/high": 3, "serving/low": 1, "serving/nopool": 2}
    assert all(isinstance(w.target, DeploymentHeadroom) and w.target.uid for w in wants)


def test_capacity_buffer_mode_holds_a_pending_gangs_nodes_as_placeholders_before_the_buffers() -> None:
    plans = [planned("high", replicas=1, desired=1, ahead=4, priority=100, pool="g8")]
    decisions = {p.key: p.decision for p in plans}
    allowed = {p.key: p.ahead_replicas for p in plans}
    pending = Gang("Workload", "t", "ft", 12, 2, False, 50, nodepool="g8")  # placed: counts, no pods yet
    # The plan needs 4 + 12 = 16 GPUs = 2 nodes of 8; the pod's 1 GPU already has a node: 1 spare node. A buffer
    # cannot point at a gang, so that node is held by a placeholder for the gang, first; the 15 - 8 = 7 spare
    # GPUs left go to the inference buffer (its 3 extra replicas).
    wants, _ = plan_headroom(plans, decisions, allowed, {"g8": G8}, [pool_view("g8", gpus_in_use=1, gpu_count="8")],
                             [pending], {}, "capacitybuffer")
    placeholder, buffer = wants
    assert isinstance(placeholder.target, PoolHeadroom)
    assert (placeholder.target.pool.name, placeholder.target.gpus_per_node, placeholder.amount) == ("g8", 8, 1)
    assert "pending gang" in placeholder.detail
    assert (buffer.ident, buffer.amount) == (("CapacityBuffer", "serving/high"), 3)
    # The pool's limit caps the gang's placeholders like any headroom: at 8 GPUs there is no room for a node.
    wants, _ = plan_headroom(plans, decisions, allowed, {"g8": G8}, [pool_view("g8", gpus_in_use=1, gpu_count="8")],
                             [pending], {"g8": 8}, "capacitybuffer")
    assert wants == []
    # Once admitted its pods request the GPUs (13 in all = 2 nodes, 3 GPUs free on them): no placeholder, and the
    # extra replicas fit the nodes already there; with one node fewer the buffer is back, still no placeholder.
    admitted = Gang("Workload", "t", "ft", 12, 2, True, 50, nodepool="g8")
    wants, _ = plan_headroom(plans, decisions, allowed, {"g8": G8}, [pool_view("g8", gpus_in_use=13, gpu_count="8")],
                             [admitted], {}, "capacitybuffer")
    assert wants == []
    wants, _ = plan_headroom([planned("high", replicas=1, desired=1, ahead=5, priority=100, pool="g8")], decisions,
                             {"serving/high": 5}, {"g8": G8}, [pool_view("g8", gpus_in_use=13, gpu_count="8")],
                             [admitted], {}, "capacitybuffer")
    assert {w.ident: w.amount for w in wants} == {("CapacityBuffer", "serving/high"): 4}


def test_gpus_unavailable_counts_unschedulable_pods_and_a_pools_shortfall_lowest_priority_first() -> None:
    plans = [planned("hi", replicas=2, desired=4, ahead=4, ready=2, priority=100, gpus=2),
             planned("lo", replicas=2, desired=3, ahead=3, ready=2, priority=10, gpus=2),
             planned("stuck", replicas=3, desired=3, ahead=3, ready=1, unschedulable=2, pool="other", gpus=4)]
    decisions = {p.key: p.decision for p in plans}
    # l4 demand: 4*2 + 3*2 = 14 GPUs against a limit of 10: 4 short. lo waits for 2, then hi for the other 2.
    got = unavailable_gpus(plans, decisions, [], {"l4": 10})
    assert got == {"serving/hi": 2, "serving/lo": 2, "serving/stuck": 8}
    assert unavailable_gpus(plans, decisions, [], {"l4": 14})["serving/lo"] == 0


def test_a_static_pool_gets_no_placeholder_nodes() -> None:
    plans = [planned("a", replicas=2, desired=3, ahead=6)]
    decisions = {p.key: p.decision for p in plans}
    static = NodePoolView("l4", "1", None, 4, 4, {"nodes": "4"}, (), (), {}, ("g6.xlarge",), 1, static=True)
    wants, _ = plan_headroom(plans, decisions, {"serving/a": 6}, {"l4": L4}, [static], [], {}, "placeholder")
    assert wants == []  # Karpenter adds no node to a static pool: placeholders would only hold its own nodes
    dynamic = NodePoolView("l4", "1", None, 4, 4, {}, (), (), {}, ("g6.xlarge",), 1)
    wants, _ = plan_headroom(plans, decisions, {"serving/a": 6}, {"l4": L4}, [dynamic], [], {}, "placeholder")
    assert [w.amount for w in wants] == [2]
