"""The read of a NodePool's GPUs on a real kube-apiserver, as the controller's own ServiceAccount.

Why: ``KubeCluster.pool_gpus`` lists the pool's nodes (cluster-scoped) and the pods bound to each; the strict fake
authorizes it against deploy/rbac.yaml, and this test holds that to what a real API server enforces: with the
shipped RBAC applied, the ServiceAccount reads the pool (``nodes: list`` granted), and a ServiceAccount bound to the
same rules without that grant is refused (403), so the grant is what lets the read through. Nodes and pods are
written by the admin (no kubelet runs: a Node's status is patched as a kubelet would, a pod is created already
bound by ``spec.nodeName``). Skipped, with the reason, without ``KUBE_BIN_DIR`` or ``PA_E2E_KUBECONFIG``.
"""

from __future__ import annotations

import copy
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
from kubernetes import client

from autoscaler.adapters.kube import NODEPOOL_LABEL, KubeCluster, KubeReadError, api_client_from_config
from autoscaler.ports import PoolGpus
from tests.kubeserver import KubeServer, apply, deploy_objects, ensure_namespace

pytestmark = pytest.mark.kube

GPU = "nvidia.com/gpu"
RBAC_KINDS = {"Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}


def _rbac() -> list[dict[str, Any]]:
    """The shipped manifests' identity and RBAC objects (not the controller's Deployment: nothing runs it here)."""
    return [o for o in deploy_objects() if o["kind"] in RBAC_KINDS]


def _controller_account() -> tuple[str, str]:
    (sa,) = [o for o in _rbac() if o["kind"] == "ServiceAccount"]
    return sa["metadata"]["namespace"], sa["metadata"]["name"]


def _cluster_role() -> dict[str, Any]:
    (role,) = [o for o in _rbac() if o["kind"] == "ClusterRole"]
    return role


@pytest.fixture
def pool(kube_server: KubeServer, tmp_path: Path) -> Iterator[str]:
    """A NodePool of its own (by label): two Ready 8-GPU nodes, and one not Ready; two pods bound to the first."""
    name = f"pool-{uuid.uuid4().hex[:8]}"
    with kube_server.admin() as api:
        apply(api, _rbac())
        core = client.CoreV1Api(api)
        namespace = ensure_namespace(api, f"pa-nodes-{uuid.uuid4().hex[:8]}", record=kube_server)
        for i, ready in ((0, True), (1, True), (2, False)):
            node = f"{name}-{i}"
            # cast: the client's signatures want its model classes; it validates a dict into them
            core.create_node(cast(Any, {"metadata": {"name": node, "labels": {NODEPOOL_LABEL: name}}}))
            core.patch_node_status(node, {"status": {
                "capacity": {GPU: "8", "cpu": "8", "memory": "64Gi", "pods": "110"},
                "allocatable": {GPU: "8", "cpu": "8", "memory": "64Gi", "pods": "110"},
                "conditions": [{"type": "Ready", "status": "True" if ready else "False", "reason": "Test",
                                "message": "written by the test", "lastHeartbeatTime": "2025-03-01T12:00:00Z",
                                "lastTransitionTime": "2025-03-01T12:00:00Z"}]}})
        for pod, gpus in (("llm-0", 3), ("llm-1", 2)):
            core.create_namespaced_pod(namespace, cast(Any, {
                "metadata": {"name": pod},
                "spec": {"nodeName": f"{name}-0", "containers": [{"name": "server", "image": "vllm/vllm-openai:v0.6.0",
                                                                  "resources": {"limits": {GPU: str(gpus)}}}]}}))
        yield name
        for i in range(3):
            core.delete_node(f"{name}-{i}")


def test_the_controllers_service_account_reads_the_pools_gpus_under_the_shipped_rbac(
        kube_server: KubeServer, pool: str, tmp_path: Path) -> None:
    namespace, account = _controller_account()
    kubeconfig = kube_server.kubeconfig_as(namespace, account, tmp_path / "controller.kubeconfig")
    with api_client_from_config(kubeconfig) as api:
        read = KubeCluster(api, instance="nodes-test", sleep=lambda _: None).pool_gpus([pool])
    # node 0: 8 - (3 + 2) free, busy; node 1: 8 free, idle; node 2 not Ready: billed, nothing free
    assert read == {pool: PoolGpus(free=11, busy_nodes=1, partial_free=3, nodes=3)}
    # the GPUs in use per Ready node, which a scale-down ranks pods by (the emptiest nodes' first)
    assert dict(read[pool].node_gpus) == {f"{pool}-0": 5, f"{pool}-1": 0}


def test_without_the_nodes_grant_the_read_is_refused(kube_server: KubeServer, pool: str, tmp_path: Path) -> None:
    namespace, _ = _controller_account()
    account = f"no-nodes-{uuid.uuid4().hex[:6]}"
    role = copy.deepcopy(_cluster_role())
    role["metadata"] = {"name": account}
    role["rules"] = [r for r in role["rules"] if "nodes" not in r.get("resources", ())]
    assert len(role["rules"]) == len(_cluster_role()["rules"]) - 1  # only the nodes rule is taken out
    binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
               "metadata": {"name": account},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": account},
               "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}]}
    with kube_server.admin() as admin:
        client.CoreV1Api(admin).create_namespaced_service_account(namespace, cast(Any, {"metadata": {"name": account}}))
        apply(admin, [role, binding])
    kubeconfig = kube_server.kubeconfig_as(namespace, account, tmp_path / "no-nodes.kubeconfig")
    with api_client_from_config(kubeconfig) as api, pytest.raises(KubeReadError, match="403"):
        KubeCluster(api, instance="nodes-test", sleep=lambda _: None).pool_gpus([pool])
