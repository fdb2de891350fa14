"""NodePool shapes from CRD-valid NodePools, whole-node demand and GPU limits."""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any

import jsonschema
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from autoscaler.domain.cost import (
    Ceilings,
    GpuType,
    InstanceType,
    NodePoolPricing,
    PriceTable,
    WorkloadAsk,
    enforce_ceilings,
)
from autoscaler.domain.gangs import Gang
from autoscaler.domain.nodes import (
    NodePoolError,
    PoolShape,
    ceiling_gpus,
    gpu_prices,
    nodepool_limit,
    nodes_for,
    pool_demand,
    pool_shape,
)
from tests.shared import require_shared

PRICES = PriceTable(
    default_gpu_hour=3.0,
    instance_types={
        "p4d.24xlarge": InstanceType("p4d.24xlarge", 8, 32.0, 12.0),
        "g6.12xlarge": InstanceType("g6.12xlarge", 4, 4.8),
        "g6.xlarge": InstanceType("g6.xlarge", 1, 0.8),
    },
    gpu_types={"h100": GpuType("h100", 6.0, 2.5)},
    nodepools={"pinned": NodePoolPricing(gpus_per_node=2, gpu_hour=9.0)},
)


@cache
def nodepool_validator() -> Any:
    crd = yaml.safe_load((require_shared("crds") / "karpenter.sh_nodepools.yaml").read_text())
    (ver,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    schema = ver["schema"]["openAPIV3Schema"]
    return jsonschema.validators.validator_for(schema)(schema)


def nodepool(name: str, *requirements: tuple[str, list[str]]) -> dict[str, Any]:
    obj = {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": name},
        "spec": {
            "template": {"spec": {
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "requirements": [{"key": k, "operator": "In", "values": v} for k, v in requirements],
                "taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}],
            }},
            "limits": {"nvidia.com/gpu": "64"},
        },
    }
    nodepool_validator().validate(obj)
    return obj


IT = "node.kubernetes.io/instance-type"
CT = "karpenter.sh/capacity-type"


@pytest.mark.parametrize(
    ("make", "gpus_per_node", "gpu_hour", "capacity"),
    [
        (lambda: nodepool("a100", (IT, ["p4d.24xlarge"])), 8, 4.0, "on-demand"),
        (lambda: nodepool("a100-spot", (IT, ["p4d.24xlarge"]), (CT, ["spot"])), 8, 1.5, "spot"),
        (lambda: nodepool("a100-any", (IT, ["p4d.24xlarge"]), (CT, ["spot", "on-demand"])), 8, 4.0, "on-demand"),
        # several types: the smallest node and the dearest GPU (never under-count nodes or dollars)
        (lambda: nodepool("l4", (IT, ["g6.12xlarge", "g6.xlarge", "unknown.type"])), 1, 1.2, "on-demand"),
        (lambda: nodepool("h100", ("karpenter.k8s.aws/instance-gpu-name", ["h100"]),
                          ("karpenter.k8s.aws/instance-gpu-count", ["8", "4"]), (CT, ["spot"])), 4, 2.5, "spot"),
        (lambda: nodepool("generic", ("karpenter.k8s.aws/instance-gpu-count", ["2"])), 2, 3.0, "on-demand"),
        (lambda: nodepool("pinned", (IT, ["p4d.24xlarge"])), 2, 9.0, "on-demand"),  # config wins
    ],
)
def test_pool_shape_from_requirements_and_config(make: Callable[[], dict[str, Any]], gpus_per_node: int,
                                                 gpu_hour: float, capacity: str) -> None:
    obj = make()  # built (and validated against ../shared/crds) in the test: without the CRDs, it skips
    shape = pool_shape(obj["metadata"]["name"], obj, PRICES)
    assert shape.gpus_per_node == gpus_per_node
    assert shape.gpu_hour == pytest.approx(gpu_hour)
    assert shape.capacity_type == capacity
    assert shape.source


def test_config_alone_can_describe_a_pool() -> None:
    prices = PriceTable(nodepools={"x": NodePoolPricing(instance_type="p4d.24xlarge", capacity_type="spot")},
                        instance_types=PRICES.instance_types)
    shape = pool_shape("x", None, prices)
    assert (shape.gpus_per_node, shape.gpu_hour, shape.capacity_type) == (8, 1.5, "spot")
    assert shape.node_hour == pytest.approx(12.0)


@pytest.mark.parametrize(
    ("make", "prices", "message"),
    [
        (lambda: nodepool("cpu", (IT, ["m7i.large"])), PRICES, "NodePool cpu: GPUs per node unknown"),
        (lambda: {"spec": {}}, PRICES, "spec.template.spec.requirements: missing"),
        (lambda: nodepool("bad", ("karpenter.k8s.aws/instance-gpu-count", ["many"])), PRICES, "are not integers"),
        (lambda: None, PriceTable(nodepools={"p": NodePoolPricing(instance_type="nope")}),
         "pricing.nodepools.p.instance_type: 'nope' is not in pricing.instance_types"),
    ],
)
def test_unknown_shapes_are_clear_errors(make: Callable[[], dict[str, Any] | None], prices: PriceTable,
                                        message: str) -> None:
    obj = make()
    with pytest.raises(NodePoolError, match=message):
        pool_shape("p" if obj is None else obj.get("metadata", {}).get("name", "p"), obj, prices)


SHAPES = {
    "a100": PoolShape("a100", 8, 4.0, "on-demand"),
    "l4": PoolShape("l4", 1, 0.8, "on-demand"),
}


def test_pool_demand_counts_replicas_warm_nodes_and_gangs_in_whole_nodes() -> None:
    asks = [
        WorkloadAsk("ml/chat", "ml", 100, 2, 1, 5, 1, "replicas", "a100"),  # warm inside the 5 replicas: 10 GPUs
        WorkloadAsk("ml/rag", "ml", 100, 1, 1, 2, 3, "nodes", "a100"),  # 2 + 3 warm as nodes
        WorkloadAsk("ml/ocr", "ml", 50, 1, 0, 3, 0, "replicas", "l4"),
        WorkloadAsk("ml/cpu", "ml", 50, 0, 0, 3, 0, "replicas", None),
    ]
    gangs = [Gang("Workload", "ml", "ft", 8, 1, True, 50, nodepool="a100"),
             Gang("Workload", "ml", "old", 8, 1, True, 50, nodepool="a100", inactive=True)]
    demand = pool_demand(asks, gangs, SHAPES)
    a100 = demand["a100"]
    assert (a100.replica_gpus, a100.warm_gpus, a100.gang_gpus, a100.gpus, a100.nodes) == (12, 3, 8, 23, 3)
    assert (demand["l4"].gpus, demand["l4"].nodes) == (3, 3)
    assert (demand[""].gpus, demand[""].nodes) == (0, None)  # no pool named: GPUs counted, node size unknown


def test_nodepool_limit_follows_the_ceiling_but_never_below_what_runs() -> None:
    shape = SHAPES["a100"]
    assert nodepool_limit(shape, allowed_gpus=20, running_gpus=8) == 24
    assert nodepool_limit(shape, allowed_gpus=0, running_gpus=16) == 16
    assert nodepool_limit(shape, allowed_gpus=16, running_gpus=0) == 16
    with pytest.raises(ValueError, match="GPU counts must be >= 0"):
        nodepool_limit(shape, -1, 0)


def test_ceiling_gpus_adds_the_whole_nodes_the_remaining_budget_buys() -> None:
    asks = [WorkloadAsk("ml/chat", "ml", 100, 1, 0, 4, 0, "replicas", "a100")]
    prices = gpu_prices(SHAPES.values(), PRICES)
    # 4 GPUs kept on one $32 node of 8; $38 left buys one more node (not 9 more GPUs at $4).
    report = enforce_ceilings(asks, [], Ceilings(cluster=70.0), prices)
    assert report.cluster_dollars_per_hour == 32.0
    assert ceiling_gpus(report, SHAPES["a100"]) == 8 + 8
    assert ceiling_gpus(report, SHAPES["l4"]) == 0 + 47  # $38 / $0.80 per 1-GPU node
    # Below one node's price nothing fits: the 4 GPUs would cost a whole $32 node.
    report = enforce_ceilings(asks, [], Ceilings(cluster=30.0), prices)
    assert report.gpus_by_pool["a100"] == 0
    assert ceiling_gpus(report, SHAPES["a100"]) == 0
    assert ceiling_gpus(enforce_ceilings(asks, [], Ceilings(), prices), SHAPES["a100"]) is None


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 10_000), st.integers(1, 16))
def test_nodes_are_the_ceiling_of_gpus_over_gpus_per_node(gpus: int, per_node: int) -> None:
    nodes = nodes_for(gpus, per_node)
    assert nodes * per_node >= gpus
    assert (nodes - 1) * per_node < gpus or nodes == 0
    assert nodes == -(-gpus // per_node)


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 200), st.integers(0, 200), st.integers(0, 400), st.sampled_from([1, 2, 4, 8]))
def test_limit_properties(allowed: int, running: int, planned: int, per_node: int) -> None:
    shape = PoolShape("p", per_node, 1.0, "on-demand")
    limit = nodepool_limit(shape, allowed, running)
    assert limit >= running
    assert limit >= allowed
    assert limit == running or limit % per_node == 0
    assert limit - per_node < max(allowed, running)
