"""Whole-node pricing: the cost ceiling is checked as Karpenter bills, whole nodes per NodePool.

The worked numbers are from a real kube-apiserver run: p4d.24xlarge nodes (8 GPUs, $32.77/h), a
$73.74/h cluster ceiling (the plan kept 18 GPUs = 3 nodes = $98.31/h and wrote a limit of 24 GPUs) and a $245.80/h
one (a limit of 64 GPUs = 8 nodes = $262.16/h)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import cast

from hypothesis import given, settings
from hypothesis import strategies as st

from autoscaler.domain.cost import (
    Ceilings,
    CostReport,
    GpuPrices,
    InstanceType,
    PriceTable,
    WorkloadAsk,
    enforce_ceilings,
)
from autoscaler.domain.gangs import Gang
from autoscaler.domain.money import asked_by_scope, placement_capacity, pool_limits
from autoscaler.domain.nodes import PoolShape, ceiling_gpus, gpu_prices, nodes_for, pool_shape
from autoscaler.engine.headroom import PoolForecast, pool_headroom
from autoscaler.ports import NodePoolView, NodeRequirement

P4D = PriceTable(instance_types={"p4d.24xlarge": InstanceType("p4d.24xlarge", 8, 32.77)})
POOL = {"spec": {"template": {"spec": {"requirements": [
    {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["p4d.24xlarge"]}]}}}}
SHAPE = pool_shape("p4d", POOL, P4D)
PRICES = gpu_prices([SHAPE], P4D)


def view(running: int = 0, *, static: bool = False) -> NodePoolView:
    return NodePoolView("p4d", "1", None, running, nodes_for(running, 8), {},
                        (NodeRequirement("node.kubernetes.io/instance-type", "In", ("p4d.24xlarge",)),), (), {},
                        ("p4d.24xlarge",), 8, static=static)


def chat(desired: int, *, gpus: int = 2, lo: int = 1, prio: int = 100) -> WorkloadAsk:
    return WorkloadAsk("serving/chat", "ml", prio, gpus, lo, desired, nodepool="p4d")


def billed(report: CostReport, prices: GpuPrices) -> float:
    """The kept plan's bill, recomputed from its GPUs per pool: whole nodes x node price."""
    return sum(prices.nodes(pool or None, gpus) * prices.node_hour(pool or None)
               for pool, gpus in report.gpus_by_pool.items())


def test_the_pool_prices_whole_p4d_nodes() -> None:
    assert (SHAPE.gpus_per_node, round(SHAPE.node_hour, 6)) == (8, 32.77)
    assert PRICES.nodes("p4d", 18) == 3
    assert round(PRICES.bill({"p4d": 18}), 2) == 98.31
    assert round(PRICES.bill({"p4d": 16}), 2) == 65.54


def test_18_gpus_need_3_nodes_over_the_73_74_ceiling_so_16_gpus_on_2_nodes_are_kept() -> None:
    report = enforce_ceilings([chat(9)], [], Ceilings(cluster=73.74), PRICES)
    outcome = report.outcome("serving/chat")
    assert outcome is not None
    # Per GPU, 18 x $4.09625 = $73.73 "fit"; as billed, 18 GPUs are 3 nodes = $98.31: one replica goes.
    assert (outcome.allowed_replicas, outcome.gpus) == (8, 16)
    assert report.cluster_dollars_per_hour == 65.54
    assert billed(report, PRICES) <= 73.74
    assert "whole nodes: NodePool p4d: 18 GPU(s) need 3 node(s) of 8 = $98.31/h > $73.74/h: 16 GPU(s) on 2 node(s)" \
        in outcome.detail
    assert asked_by_scope([chat(9)], [], PRICES)["cluster"] == 98.31
    # The NodePool limit is the 2 nodes the ceiling buys, not 24 GPUs (3 nodes, $98.31/h).
    assert pool_limits(report, {"p4d": SHAPE}, [view()])["p4d"][0] == 16


def test_at_245_80_the_limit_is_7_nodes_not_8() -> None:
    report = enforce_ceilings([chat(9)], [], Ceilings(cluster=245.80), PRICES)
    assert report.outcome("serving/chat").allowed_replicas == 9  # type: ignore[union-attr]
    assert report.cluster_dollars_per_hour == 98.31  # 18 GPUs on 3 nodes
    limit, why = pool_limits(report, {"p4d": SHAPE}, [view(24)])["p4d"]
    # $245.80 buys 7 whole nodes ($229.39); the old limit of 64 GPUs was 8 nodes, $262.16/h.
    assert limit == 56
    assert limit // 8 * 32.77 <= 245.80
    assert "7 node(s) of 8" in why
    # Never below what runs: 9 nodes running keep a limit of 72 (a limit cannot remove nodes).
    assert pool_limits(report, {"p4d": SHAPE}, [view(72)])["p4d"][0] == 72


def test_a_gang_is_reserved_whole_only_when_its_nodes_fit() -> None:
    gang = Gang("Workload", "ml", "ft", 16, 2, False, 50, nodepool="p4d")
    # 2 inference GPUs take a node ($32.77); the 16-GPU gang would add 2 more nodes ($98.31 > $73.74): deferred.
    report = enforce_ceilings([chat(1)], [gang], Ceilings(cluster=73.74), PRICES)
    assert report.gangs_deferred == (gang,)
    assert "would go over: $32.77/h spent + $65.54/h > $73.74/h" in report.gangs[0].reason
    # At $98.31 the gang's two nodes fit beside the inference node.
    report = enforce_ceilings([chat(1)], [gang], Ceilings(cluster=98.31), PRICES)
    assert report.gangs_reserved == (gang,)
    assert report.cluster_dollars_per_hour == 98.31


def test_placement_capacity_is_whole_nodes_under_the_ceiling() -> None:
    assert placement_capacity("p4d", Ceilings(cluster=73.74), PRICES) == 16  # 2 nodes, not 18 GPUs
    assert placement_capacity("p4d", Ceilings(), PRICES) == math.inf


# ---------------------------------------------------------------------------------------------- properties

SHAPES = {"p4d": 8, "g4": 4, "l4": 1}
NODE_PRICES = GpuPrices({"p4d": 32.77 / 8, "g4": 1.3, "l4": 0.8}, default=2.0, gpus_per_node=SHAPES)


@st.composite
def whole_node_plans(draw: st.DrawFn) -> tuple[list[WorkloadAsk], list[Gang]]:
    asks = []
    for i in range(draw(st.integers(0, 5))):
        lo = draw(st.integers(0, 2))
        asks.append(WorkloadAsk(f"ns/w{i}", draw(st.sampled_from("ab")), draw(st.sampled_from([1000, 100, 50, 0])),
                                draw(st.integers(0, 8)), lo, lo + draw(st.integers(0, 8)), draw(st.integers(0, 3)),
                                draw(st.sampled_from(["replicas", "nodes"])),
                                draw(st.sampled_from(["p4d", "g4", "l4", None]))))
    gangs = [Gang("Workload", "ml", f"g{i}", draw(st.integers(0, 32)), 2, draw(st.booleans()),
                  draw(st.sampled_from([1000, 100, 50, 0])), team=draw(st.sampled_from("ab")),
                  nodepool=draw(st.sampled_from(["p4d", "g4", "l4"])))
             for i in range(draw(st.integers(0, 3)))]
    return asks, gangs


@settings(max_examples=200, deadline=None)
@given(whole_node_plans(), st.integers(0, 400).map(float))
def test_every_plan_costs_no_more_than_the_ceiling_as_billed_nodes_when_the_minimums_fit(
    plan: tuple[list[WorkloadAsk], list[Gang]], cluster: float
) -> None:
    asks, gangs = plan
    report = enforce_ceilings(asks, gangs, Ceilings(cluster=cluster), NODE_PRICES)
    minimums: dict[str | None, int] = {}
    for a in asks:
        minimums[a.nodepool] = minimums.get(a.nodepool, 0) + a.min_replicas * a.gpus_per_replica
    if NODE_PRICES.bill(minimums) <= cluster:
        assert billed(report, NODE_PRICES) <= cluster + 1e-6
        assert report.cluster_dollars_per_hour <= cluster + 1e-6
        assert "cluster" not in report.unmeetable
    # the report's total is the bill of what it keeps
    assert abs(report.cluster_dollars_per_hour - billed(report, NODE_PRICES)) < 1e-6
    # no gang is split: each is reserved (all its GPUs counted in its pool) or deferred (none)
    gang_gpus: dict[str, int] = {}
    for g in report.gangs_reserved:
        gang_gpus[g.nodepool or ""] = gang_gpus.get(g.nodepool or "", 0) + g.gpus
    for pool, gpus in report.gpus_by_pool.items():
        inference = sum(o.gpus for o in report.workloads if (o.nodepool or "") == pool)
        assert gpus == inference + gang_gpus.get(pool, 0)
    assert len(report.gangs_reserved) + len(report.gangs_deferred) == len([g for g in gangs if not g.inactive])
    # each pool's limit (kept nodes + the whole nodes the slack buys), with the other pools as kept, fits the ceiling
    if NODE_PRICES.bill(minimums) <= cluster:
        for pool, gpn in SHAPES.items():
            allowed = ceiling_gpus(report, PoolShape(pool, gpn, NODE_PRICES.per_gpu_hour(pool), "on-demand"))
            assert allowed is not None
            assert allowed % gpn == 0
            with_limit = cast(Mapping[str | None, int], {**report.gpus_by_pool, pool: allowed})  # bill only reads it
            assert NODE_PRICES.bill(with_limit) <= cluster + 1e-6


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 64), st.integers(0, 64), st.sampled_from([1, 2, 4, 8]))
def test_headroom_never_holds_more_nodes_than_the_limit(planned_gpus: int, requested: int, gpn: int) -> None:
    busy = nodes_for(requested, gpn)
    limit = nodes_for(max(planned_gpus, requested) // 2, gpn)
    decision = pool_headroom(PoolForecast("p", gpn, float(planned_gpus), (1.0,), held_gpus=requested,
                                          current_gpus=float(requested), busy_nodes=busy, max_nodes=limit))
    assert busy + decision.idle_nodes <= max(limit, busy)


@settings(max_examples=100, deadline=None)
@given(whole_node_plans(), st.integers(0, 300), st.integers(1, 100))
def test_in_whole_nodes_more_budget_never_gives_anyone_fewer_gpus_without_gangs(
    plan: tuple[list[WorkloadAsk], list[Gang]], budget: int, extra: int
) -> None:
    asks, _ = plan
    less = enforce_ceilings(asks, [], Ceilings(cluster=float(budget)), NODE_PRICES)
    more = enforce_ceilings(asks, [], Ceilings(cluster=float(budget + extra)), NODE_PRICES)
    for a in asks:
        lo, hi = less.outcome(a.key), more.outcome(a.key)
        assert lo is not None
        assert hi is not None
        assert hi.gpus >= lo.gpus
    assert more.cluster_dollars_per_hour >= less.cluster_dollars_per_hour
