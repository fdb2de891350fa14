"""Fixtures for the Kubernetes adapter tests: the recording fake over real HTTP, and a real API server.

``fake_api``/``api_client``: our ``FakeKubeAPI`` on 127.0.0.1 with the official client pointed at it as the
controller's ServiceAccount (bearer ``CONTROLLER_TOKEN``), so every request is authorized against
``deploy/rbac.yaml`` and every write checked as the real server checks it (see ``fakeapi.py``, and for why not
kmock). ``admin_client``: the same server as an admin (``ADMIN_TOKEN``, never refused), for state a test sets up
over HTTP. ``fake_api`` fails the test at teardown if the fake refused a request (401/403/400/422) or dropped an
unknown field, unless the test called ``fake_api.expect_refusals()``: a controller that reports a failed write
and carries on must not hide it. ``real_api_client``/``real_namespace``: for ``@pytest.mark.kube`` tests, the
session's real kube-apiserver (``tests/kubeserver.py``), in a fresh namespace.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from autoscaler.adapters.karpenter import GPU
from autoscaler.adapters.kube import KubeCluster
from autoscaler.domain.annotations import ENABLED_LABEL, PREFIX
from autoscaler.domain.status import STATUS_DATA_KEY, decode_status, status_object_name
from tests.kube.fakeapi import ADMIN_TOKEN, CONTROLLER_TOKEN, FakeKubeAPI, load_crd, schema_errors
from tests.kubeserver import KubeServer, ensure_namespace
from tests.shared import CRDS, require_shared

NODEPOOL_CRD = CRDS / "karpenter.sh_nodepools.yaml"  # the CRDs the workspace ships, from ../shared/crds

T0 = datetime(2025, 3, 1, 12, 0, 0, tzinfo=UTC)


@pytest.fixture
def fake_api() -> Iterator[FakeKubeAPI]:
    api = FakeKubeAPI()
    api.start()
    yield api
    api.stop()
    unexpected = api.unexpected()
    assert not unexpected, (
        "the fake API server refused requests or dropped fields (fake_api.expect_refusals() if the test means "
        "it):\n" + "\n".join(unexpected)
    )


def fake_client(fake: FakeKubeAPI, token: str = CONTROLLER_TOKEN) -> client.ApiClient:
    """An official client of the fake, authenticated with ``token`` (the controller's ServiceAccount by default)."""
    cfg = client.Configuration()
    cfg.host = fake.url
    cfg.api_key = {"authorization": token}
    cfg.api_key_prefix = {"authorization": "Bearer"}
    return client.ApiClient(cfg)


@pytest.fixture
def api_client(fake_api: FakeKubeAPI) -> Iterator[client.ApiClient]:
    """The controller's client: requests as its ServiceAccount, held to deploy/rbac.yaml."""
    with fake_client(fake_api) as api:
        yield api


@pytest.fixture
def admin_client(fake_api: FakeKubeAPI) -> Iterator[client.ApiClient]:
    """An admin's client of the same fake (never refused by RBAC), for setting state up over HTTP."""
    with fake_client(fake_api, ADMIN_TOKEN) as api:
        yield api


@pytest.fixture
def sleeps() -> list[float]:
    """The back-off sleeps a client under test asked for (it is given ``sleeps.append`` instead of sleeping)."""
    return []


@pytest.fixture
def cluster(api_client: client.ApiClient, sleeps: list[float]) -> KubeCluster:
    """The controller's ``KubeCluster`` on the fake, recording its back-off sleeps instead of sleeping."""
    return KubeCluster(api_client, instance="controller-0", sleep=sleeps.append)


def deployment(
    namespace: str,
    name: str,
    *,
    replicas: int = 2,
    enabled: bool = True,
    annotations: dict[str, str] | None = None,
    gpus: int = 1,
    match_expressions: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    labels = {"app": name, **({ENABLED_LABEL: "true"} if enabled else {})}
    selector: dict[str, Any] = {"matchLabels": {"app": name}}
    if match_expressions:
        selector["matchExpressions"] = match_expressions
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": labels,
            "annotations": {
                PREFIX + "min-replicas": "1",
                PREFIX + "max-replicas": "10",
                PREFIX + "capacity-per-replica": "5",
                **(annotations or {}),
            },
        },
        "spec": {
            "replicas": replicas,
            "selector": selector,
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "containers": [
                        {
                            "name": "server",
                            "image": "vllm/vllm-openai:v0.6.0",
                            "resources": {"limits": {"nvidia.com/gpu": str(gpus)}} if gpus else {},
                        }
                    ]
                },
            },
        },
        "status": {"replicas": replicas, "readyReplicas": max(0, replicas - 1)},
    }


def hpa(namespace: str, name: str, target: str, kind: str = "Deployment",
        api_version: str = "apps/v1") -> dict[str, Any]:
    """An ``autoscaling/v2`` HorizontalPodAutoscaler of ``target`` on CPU, as a team deploys one."""
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "scaleTargetRef": {"apiVersion": api_version, "kind": kind, "name": target},
            "minReplicas": 1,
            "maxReplicas": 10,
            "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": {
                "type": "Utilization", "averageUtilization": 70}}}],
        },
    }


def stored_status(fake: FakeKubeAPI, namespace: str, name: str) -> dict[str, Any]:
    """The status the controller published for Deployment ``namespace/name``: the JSON of its status object (the
    ConfigMap ``autoscaler.domain.status`` names). Fails the test when there is none."""
    obj = fake.get("configmaps", namespace, status_object_name(name))
    assert obj is not None, f"no status object for deployment {namespace}/{name}"
    return decode_status(obj["data"][STATUS_DATA_KEY])


def pod(
    namespace: str,
    name: str,
    app: str,
    *,
    created: datetime,
    ready_at: datetime | None = None,
    phase: str = "Running",
    scheduled: bool = True,
    unschedulable_message: str = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.",
    restarts: int = 0,
) -> dict[str, Any]:
    def ts(t: datetime) -> str:
        return t.strftime("%Y-%m-%dT%H:%M:%SZ")

    conditions: list[dict[str, Any]] = []
    if scheduled:
        conditions.append({"type": "PodScheduled", "status": "True", "lastTransitionTime": ts(created)})
    else:
        conditions.append(
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": unschedulable_message,
                "lastTransitionTime": ts(created),
            }
        )
    ready_cond: dict[str, Any] = {"type": "Ready", "status": "False", "lastTransitionTime": ts(created)}
    if ready_at is not None:
        ready_cond = {"type": "Ready", "status": "True", "lastTransitionTime": ts(ready_at)}
    conditions.append(ready_cond)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": app}, "creationTimestamp": ts(created)},
        "spec": {"containers": [{"name": "server", "image": "vllm/vllm-openai:v0.6.0"}]},
        "status": {
            "phase": phase,
            "conditions": conditions,
            "containerStatuses": [
                {
                    "name": "server",
                    "image": "vllm/vllm-openai:v0.6.0",
                    "imageID": "",
                    "ready": ready_at is not None,
                    "restartCount": restarts,
                }
            ],
        },
    }


# ---- a real API server (KUBECONFIG) ----------------------------------------------------------------


@pytest.fixture
def real_api_client(kube_server: KubeServer) -> Iterator[client.ApiClient]:
    """An admin client of the session's real API server (``kube_server``)."""
    with kube_server.admin() as api:
        yield api


@pytest.fixture
def real_namespace(kube_server: KubeServer, real_api_client: client.ApiClient) -> str:
    """A fresh namespace (with its ``default`` ServiceAccount). Not deleted by the test: on a bare API server a
    namespace never finishes deleting (the server is thrown away at the end of the session); a shared cluster
    deletes it then (``KubeServer.clean_up``)."""
    return ensure_namespace(real_api_client, f"pa-test-{uuid.uuid4().hex[:8]}", record=kube_server)


def crd_schema(path: Path, version: str) -> dict[str, Any]:
    (crd,) = [c for c in load_crd(path) if c.version == version]
    assert crd.schema is not None
    return crd.schema


def nodepool(
    name: str,
    *,
    gpu_limit: int | str | None = 16,
    gpus_in_use: int | None = 8,
    nodes: int = 1,
    gpu_counts: tuple[str, ...] = ("8",),
    taints: list[dict[str, str]] | None = None,
    instance_types: tuple[str, ...] = ("p5.48xlarge", "p4d.24xlarge"),
) -> dict[str, Any]:
    """A Karpenter v1 NodePool as the API server serves it, checked against the CRD's schema (skips without
    ../shared/crds)."""
    requirements: list[dict[str, Any]] = [
        {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": list(instance_types)},
        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
    ]
    if gpu_counts:
        count = "karpenter.k8s.aws/instance-gpu-count"
        requirements.append({"key": count, "operator": "In", "values": list(gpu_counts)})
    obj: dict[str, Any] = {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": name},
        "spec": {
            "template": {
                "metadata": {"labels": {"team": "ml"}},
                "spec": {
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "gpu"},
                    "requirements": requirements,
                    "taints": taints if taints is not None else [{"key": GPU, "value": "true", "effect": "NoSchedule"}],
                },
            },
            "weight": 10,
        },
        "status": {"nodes": nodes, "resources": {"cpu": "192", "memory": "2Ti"}},
    }
    if gpu_limit is not None:
        obj["spec"]["limits"] = {"cpu": "1000", GPU: gpu_limit}
    if gpus_in_use is not None:
        obj["status"]["resources"][GPU] = str(gpus_in_use)
    assert schema_errors(obj, crd_schema(require_shared("crds", NODEPOOL_CRD.name), "v1"), strict=True) == []
    return obj
