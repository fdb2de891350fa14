"""The money decisions (``autoscaler.domain.money``), as pure functions: asked cost and breaches, which pools are
priced, the placeholder nodes wanted, GPUs unavailable."""

from __future__ import annotations

from autoscaler.domain.annotations import Mode, WorkloadSpec
from autoscaler.domain.cost import Ceilings, GpuPrices, PriceTable, WorkloadAsk
from autoscaler.domain.gangs import Gang
from autoscaler.domain.money import (
    PlannedWorkload,
    asked_by_scope,
    breaches,
    buffer_holders,
    headroom_wants,
    pool_shapes,
    unavailable_gpus,
)
from autoscaler.domain.nodes import PoolShape
from autoscaler.domain.types import ScalingDecision, Step
from autoscaler.ports import NodePoolView, NodeRequirement, PoolHeadroom, WorkloadView

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


def planned(name: str, *, replicas: int, desired: int, ready: int | None = None,
            unschedulable: int = 0, **kw: object) -> PlannedWorkload:
    view = WorkloadView("serving", name, f"uid-{name}", "1", {}, {}, replicas,
                        replicas if ready is None else ready, f"app={name}")
    return PlannedWorkload(view, spec(name, **kw), decision(desired), unschedulable)  # type: ignore[arg-type]


def pool_view(name: str, *, gpus_in_use: int | None = None, limit: int | None = None,
              gpu_count: str | None = "1", labels: dict[str, str] | None = None) -> NodePoolView:
    reqs = [NodeRequirement("node.kubernetes.io/instance-type", "In", ("g6.xlarge",))] if gpu_count else []
    return NodePoolView(name, "1", limit, gpus_in_use, 0, {}, tuple(reqs), (), labels or {},
                        ("g6.xlarge",) if gpu_count else (), int(gpu_count) if gpu_count else None)


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


def test_the_pools_idle_nodes_are_held_as_placeholder_nodes_with_why() -> None:
    wants = headroom_wants({"l4": (2, "pooled error 1.5 GPU(s)")}, [], {"l4": L4}, [pool_view("l4", gpus_in_use=4)],
                           {})
    (want,) = wants
    assert isinstance(want.target, PoolHeadroom)
    assert (want.target.pool.name, want.target.gpus_per_node, want.amount) == ("l4", 1, 2)
    assert want.detail == "pooled error 1.5 GPU(s)"
    # none asked, none held; a pool that was not read (no view) or not priced (no shape) gets none
    assert headroom_wants({"l4": (0, "none")}, [], {"l4": L4}, [pool_view("l4")], {}) == []
    assert headroom_wants({"l4": (2, "x")}, [], {"l4": L4}, [], {}) == []
    assert headroom_wants({"l4": (2, "x")}, [], {}, [pool_view("l4")], {}) == []


def test_a_pending_gangs_nodes_are_added_within_the_pools_limit_and_an_admitted_gang_gets_none() -> None:
    pending = Gang("Workload", "t", "ft", 12, 2, False, 50, nodepool="g8")  # placed: counts, no pods yet
    view = pool_view("g8", gpus_in_use=1, gpu_count="8")
    # 12 GPUs on nodes of 8: two whole nodes, on top of the pool's one idle node
    (want,) = headroom_wants({"g8": (1, "pooled")}, [pending], {"g8": G8}, [view], {})
    assert want.amount == 3
    assert "pending gang" in want.detail
    assert want.detail.startswith("pooled; ")
    # the pool's limit caps the gang's nodes: 17 GPUs with 1 in use leave room for 2 nodes, 9 for one
    assert [w.amount for w in headroom_wants({}, [pending], {"g8": G8}, [view], {"g8": 17})] == [2]
    assert [w.amount for w in headroom_wants({}, [pending], {"g8": G8}, [view], {"g8": 9})] == [1]
    assert headroom_wants({}, [pending], {"g8": G8}, [view], {"g8": 8}) == []
    admitted = Gang("Workload", "t", "ft", 12, 2, True, 50, nodepool="g8")  # its pods request its GPUs
    assert headroom_wants({}, [admitted], {"g8": G8}, [view], {}) == []


def test_gpus_unavailable_counts_unschedulable_pods_and_a_pools_shortfall_lowest_priority_first() -> None:
    plans = [planned("hi", replicas=2, desired=4, ready=2, priority=100, gpus=2),
             planned("lo", replicas=2, desired=3, ready=2, priority=10, gpus=2),
             planned("stuck", replicas=3, desired=3, ready=1, unschedulable=2, pool="other", gpus=4)]
    decisions = {p.key: p.decision for p in plans}
    # l4 demand: 4*2 + 3*2 = 14 GPUs against a limit of 10: 4 short. lo waits for 2, then hi for the other 2.
    got = unavailable_gpus(plans, decisions, [], {"l4": 10})
    assert got == {"serving/hi": 2, "serving/lo": 2, "serving/stuck": 8}
    assert unavailable_gpus(plans, decisions, [], {"l4": 14})["serving/lo"] == 0


def test_as_capacity_buffers_the_pools_idle_nodes_are_room_for_its_top_deployments_pods() -> None:
    plans = [planned("low", replicas=1, desired=1, priority=10, pool="g8", gpus=2),
             planned("high", replicas=1, desired=1, priority=100, pool="g8", gpus=2),
             planned("watch", replicas=1, desired=1, priority=1000, pool="g8", mode="advisory"),
             planned("nopool", replicas=1, desired=1, priority=1000, pool=None)]
    holders = buffer_holders(plans, {"g8": 4})
    assert set(holders) == {"g8"}  # an advisory Deployment is not ours to scale; one naming no pool holds none
    assert (holders["g8"].target.deployment, holders["g8"].target.uid, holders["g8"].gpus_per_replica) == (
        "high", "uid-high", 2)
    pending = Gang("Workload", "t", "ft", 8, 2, False, 50, nodepool="g8")
    view = pool_view("g8", gpus_in_use=12, gpu_count="8")
    buffer, placeholder = headroom_wants({"g8": (2, "pooled")}, [pending], {"g8": G8}, [view], {}, holders)
    # two idle nodes of 8 GPUs and the 4 free on busy nodes: room for 10 pods of 2 GPUs; the gang's node stays a
    # placeholder (a buffer needs a workload to scale)
    assert (buffer.ident, buffer.amount) == (("CapacityBuffer", "serving/high"), 10)
    assert buffer.detail.startswith("pooled (room for 10 pod(s)")
    assert (placeholder.ident, placeholder.amount) == (("Deployment", "g8"), 1)
    # no idle node asked: no buffer
    assert [w.ident for w in headroom_wants({"g8": (0, "x")}, [], {"g8": G8}, [view], {}, holders)] == []


def test_a_static_pool_gets_no_placeholder_nodes() -> None:
    static = NodePoolView("l4", "1", None, 4, 4, {"nodes": "4"}, (), (), {}, ("g6.xlarge",), 1, static=True)
    assert headroom_wants({"l4": (2, "x")}, [], {"l4": L4}, [static], {}) == []  # Karpenter adds no node there
    dynamic = NodePoolView("l4", "1", None, 4, 4, {}, (), (), {}, ("g6.xlarge",), 1)
    assert [w.amount for w in headroom_wants({"l4": (2, "x")}, [], {"l4": L4}, [dynamic], {})] == [2]
