"""KubeCluster's read of a NodePool's GPUs, on the wire: the pool's nodes (Karpenter's ``karpenter.sh/nodepool``
label), and on its Ready, schedulable ones the GPUs the pods bound to each request, as the scheduler counts them (our
headroom placeholders excepted); under the controller's own RBAC (the fake authorizes every request against
deploy/rbac.yaml)."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from autoscaler.adapters.kube import COMPONENT, NAME_LABEL, NODEPOOL_LABEL, PLACEHOLDER_NAME, KubeCluster, KubeReadError
from autoscaler.domain.status import MANAGED_BY_LABEL
from autoscaler.ports import PoolGpus, PoolNodes
from tests.kube.conftest import T0, pod
from tests.kube.fakeapi import FakeKubeAPI


@pytest.fixture
def cluster(api_client: client.ApiClient) -> KubeCluster:
    return KubeCluster(api_client, instance="controller-0", sleep=lambda _: None)


def node(name: str, pool: str | None, gpus: str | None = "8", *, ready: bool = True, cordoned: bool = False,
         deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": {} if pool is None else {NODEPOOL_LABEL: pool}}
    if deleting:
        meta["deletionTimestamp"] = "2025-03-01T12:10:00Z"
    return {
        "apiVersion": "v1", "kind": "Node", "metadata": meta,
        "spec": {"unschedulable": True} if cordoned else {},
        "status": {"allocatable": {} if gpus is None else {"nvidia.com/gpu": gpus},
                   "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


def bound(namespace: str, name: str, node_name: str, gpus: int, *, phase: str = "Running", init: int = 0,
          limit_only: bool = False) -> dict[str, Any]:
    obj = pod(namespace, name, "llm", created=T0, phase=phase)
    resources = {"limits": {"nvidia.com/gpu": str(gpus)}} if limit_only else {
        "requests": {"nvidia.com/gpu": str(gpus)}, "limits": {"nvidia.com/gpu": str(gpus)}}
    obj["spec"]["containers"][0]["resources"] = resources
    if init:
        obj["spec"]["initContainers"] = [{"name": "warm", "image": "busybox",
                                          "resources": {"limits": {"nvidia.com/gpu": str(init)}}}]
    obj["spec"]["nodeName"] = node_name
    return obj


def test_pool_gpus_are_allocatable_minus_what_bound_pods_request_on_ready_nodes(
        fake_api: FakeKubeAPI, cluster: KubeCluster) -> None:
    for n in (node("a1", "gpu"), node("a2", "gpu"), node("a3", "gpu", ready=False), node("a4", "gpu", cordoned=True),
              node("a5", "gpu", deleting=True), node("b1", "other"), node("c1", None), node("a6", "gpu", gpus=None)):
        fake_api.add("nodes", n)
    for p in (bound("ml", "p1", "a1", 2), bound("ml", "p2", "a1", 1, limit_only=True),  # a limit alone is the request
              bound("web", "p3", "a1", 1, init=4),  # an init container's 4 outweigh its container's 1
              bound("ml", "p4", "a1", 8, phase="Succeeded"),  # finished: holds nothing
              bound("ml", "p5", "a2", 3), bound("ml", "p6", "b1", 8)):
        fake_api.add("pods", p)

    assert isinstance(cluster, PoolNodes)
    read = cluster.pool_gpus(["gpu", "other", "empty"])

    # a1: 8 - (2 + 1 + 4) = 1; a2: 8 - 3 = 5, both busy; not Ready, cordoned, deleting or GPU-less nodes count
    # nothing free, but every node of the pool is billed
    assert read == {"gpu": PoolGpus(free=6, busy_nodes=2, partial_free=6, nodes=6),
                    "other": PoolGpus(free=0, busy_nodes=1, partial_free=0, nodes=1), "empty": PoolGpus()}
    # the GPUs in use on each node read (what a scale-down that empties whole nodes ranks pods by)
    assert dict(read["gpu"].node_gpus) == {"a1": 7, "a2": 3}
    assert dict(read["other"].node_gpus) == {"b1": 8}
    nodes_listed = [r for r in fake_api.requests if r.path == "/api/v1/nodes"]
    assert len(nodes_listed) == 1
    assert nodes_listed[0].query["labelSelector"] == [f"{NODEPOOL_LABEL} in (empty,gpu,other)"]
    per_node = sorted(r.query["fieldSelector"][0] for r in fake_api.requests if r.path == "/api/v1/pods")
    assert per_node == ["spec.nodeName=a1", "spec.nodeName=a2", "spec.nodeName=b1"]  # Ready, schedulable, in a pool
    # every list is answered from the API server's watch cache, not by a read of etcd (which scans every pod per node)
    assert {r.query.get("resourceVersion", [""])[0] for r in fake_api.requests
            if r.path in ("/api/v1/nodes", "/api/v1/pods")} == {"0"}


def test_our_placeholders_hold_no_gpu_their_node_is_idle_headroom(fake_api: FakeKubeAPI,
                                                                   cluster: KubeCluster) -> None:
    fake_api.add("nodes", node("h1", "gpu"))
    fake_api.add("nodes", node("h2", "gpu"))
    placeholder = bound("predictive-autoscaler", "headroom-0", "h1", 8)
    placeholder["metadata"]["labels"] = {NAME_LABEL: PLACEHOLDER_NAME, MANAGED_BY_LABEL: COMPONENT}
    lookalike = bound("ml", "not-ours", "h2", 2)
    lookalike["metadata"]["labels"] = {NAME_LABEL: PLACEHOLDER_NAME}  # not managed by us: a real pod
    fake_api.add("pods", placeholder)
    fake_api.add("pods", lookalike)
    # a real replica preempts the placeholder: its 8 GPUs are free to it, and h1 holds no pod of a Deployment
    read = cluster.pool_gpus(["gpu"])
    assert read == {"gpu": PoolGpus(free=14, busy_nodes=1, partial_free=6, nodes=2)}
    assert dict(read["gpu"].node_gpus) == {"h1": 0, "h2": 2}


def test_no_pools_asked_reads_nothing(fake_api: FakeKubeAPI, cluster: KubeCluster) -> None:
    assert cluster.pool_gpus([]) == {}
    assert not [r for r in fake_api.requests if r.path in ("/api/v1/nodes", "/api/v1/pods")]


def test_a_failed_node_list_raises_one_line(fake_api: FakeKubeAPI, cluster: KubeCluster) -> None:
    fake_api.fail("GET", r"/api/v1/nodes$", 500, times=1)
    with pytest.raises(KubeReadError, match="list nodes with label"):
        cluster.pool_gpus(["gpu"])
