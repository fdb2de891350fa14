"""KarpenterCapacity over real HTTP: NodePool views and GPU limits, CapacityBuffer or placeholder headroom.

The fake API server serves the real CRDs from ../shared/crds and checks every object written against
the CRD's ``openAPIV3Schema`` (strictly, because the adapter sends ``fieldValidation=Strict``); the tests
also check the CRD's CEL rules that matter here, and validate built-in objects (PriorityClass, Deployment)
against the Kubernetes schemas of ``kubernetes-validate``.
"""

from __future__ import annotations

import copy
import json
import logging
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from autoscaler.adapters.karpenter import (
    DO_NOT_DISRUPT,
    GPU,
    MANAGED_BY,
    SPEC_HASH_ANNOTATION,
    HeadroomError,
    KarpenterCapacity,
    NodePoolLimitError,
    buffer_name,
    merge_patch_to,
    node_pool_view,
    placeholder_name,
)
from autoscaler.adapters.kube import MERGE_PATCH, KubeReadError, KubeWriteError
from autoscaler.ports import DeploymentHeadroom, NodeCapacity, NodeTaint, PoolHeadroom
from tests.kube.conftest import crd_schema, deployment, nodepool
from tests.kube.fakeapi import FakeKubeAPI, merge_patch, schema_errors
from tests.shared import require_shared

CRDS = require_shared("crds")  # the real CRDs, from ../shared/crds; without them the module skips
NODEPOOL_CRD = CRDS / "karpenter.sh_nodepools.yaml"
BUFFER_CRD = CRDS / "autoscaling.x-k8s.io_capacitybuffers.yaml"
CONTROLLER_NS = "predictive-autoscaler"
KUBERNETES_VERSION = "1.29"


class Ticker:
    """A monotonic clock the test moves by hand (discovery cache)."""

    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def ticker() -> Ticker:
    return Ticker()


@pytest.fixture
def karpenter_api(fake_api: FakeKubeAPI) -> FakeKubeAPI:
    fake_api.install_crd(NODEPOOL_CRD)
    fake_api.add("nodepools.karpenter.sh", nodepool("h100", gpu_limit=16, gpus_in_use=8, nodes=1))
    fake_api.add("nodepools.karpenter.sh", nodepool("a10", gpu_limit=None, gpus_in_use=None, nodes=0,
                                                    gpu_counts=("1", "4"), taints=[]))
    return fake_api


@pytest.fixture
def with_buffers(karpenter_api: FakeKubeAPI) -> FakeKubeAPI:
    karpenter_api.install_crd(BUFFER_CRD)
    return karpenter_api


@pytest.fixture
def capacity(api_client: client.ApiClient, sleeps: list[float], ticker: Ticker) -> KarpenterCapacity:
    return KarpenterCapacity(api_client, namespace=CONTROLLER_NS, sleep=sleeps.append, monotonic=ticker)


def test_adapter_satisfies_the_port(capacity: KarpenterCapacity) -> None:
    port: NodeCapacity = capacity
    assert port is capacity


# ---------------------------------------------------------------------------------------------- NodePools


def test_list_node_pools_returns_plain_views(karpenter_api: FakeKubeAPI, capacity: KarpenterCapacity) -> None:
    a10, h100 = capacity.list_node_pools()
    (call,) = karpenter_api.calls("GET", r"^/apis/karpenter\.sh/v1/nodepools$")
    assert call.query == {}
    assert (h100.name, h100.gpu_limit, h100.gpus_in_use, h100.nodes, h100.gpus_per_node) == ("h100", 16, 8, 1, 8)
    assert h100.limits == {"cpu": "1000", GPU: "16"}
    assert h100.instance_types == ("p5.48xlarge", "p4d.24xlarge")
    assert h100.taints == (NodeTaint(GPU, "NoSchedule", "true"),)
    assert h100.tolerations == [{"key": GPU, "effect": "NoSchedule", "operator": "Equal", "value": "true"}]
    assert h100.node_selector == {"karpenter.sh/nodepool": "h100"}
    assert h100.labels == {"team": "ml"}
    assert h100.weight == 10
    assert [r.key for r in h100.requirements][-1] == "karpenter.k8s.aws/instance-gpu-count"
    assert h100.resource_version == karpenter_api.get("nodepools.karpenter.sh", "", "h100")["metadata"][  # type: ignore[index]
        "resourceVersion"
    ]
    # No GPU limit (unbounded), no reported usage, several GPU counts allowed: all None, not guessed.
    assert (a10.gpu_limit, a10.gpus_in_use, a10.gpus_per_node, a10.tolerations) == (None, None, None, [])


@pytest.mark.parametrize(
    ("limit", "used", "expected"),
    [("16", "8", (16, 8)), (16, 8, (16, 8)), ("1k", "1500m", (1000, 2)), ("0", "0", (0, 0))],
)
def test_gpu_quantities_are_parsed_as_kubernetes_quantities(limit: Any, used: Any, expected: tuple[int, int]) -> None:
    obj = nodepool("p")
    obj["spec"]["limits"][GPU] = limit
    obj["status"]["resources"][GPU] = used
    view = node_pool_view(obj)
    assert (view.gpu_limit, view.gpus_in_use) == expected


def test_taints_without_a_value_are_tolerated_with_exists() -> None:
    obj = nodepool("p", taints=[{"key": "gpu-only", "effect": "NoExecute"},
                                {"key": "team", "value": "ml", "effect": "PreferNoSchedule"}])
    assert node_pool_view(obj).tolerations == [
        {"key": "gpu-only", "effect": "NoExecute", "operator": "Exists"},
        {"key": "team", "effect": "PreferNoSchedule", "operator": "Equal", "value": "ml"},
    ]


def test_a_gpu_count_label_on_the_template_pins_gpus_per_node() -> None:
    obj = nodepool("p", gpu_counts=())
    assert node_pool_view(obj).gpus_per_node is None
    obj["spec"]["template"]["metadata"]["labels"]["nvidia.com/gpu.count"] = "4"
    assert node_pool_view(obj).gpus_per_node == 4


def test_raising_the_gpu_limit_is_one_merge_patch(karpenter_api: FakeKubeAPI, capacity: KarpenterCapacity) -> None:
    assert capacity.set_gpu_limit("h100", 24) is True
    (patch,) = karpenter_api.calls("PATCH")
    assert patch.path == "/apis/karpenter.sh/v1/nodepools/h100"
    assert patch.content_type == MERGE_PATCH
    assert patch.query["fieldValidation"] == ["Strict"]
    assert patch.query["fieldManager"] == ["predictive-autoscaler"]
    assert patch.body == {"spec": {"limits": {GPU: "24"}}}  # raising needs no precondition
    stored = karpenter_api.get("nodepools.karpenter.sh", "", "h100")
    assert stored is not None
    assert stored["spec"]["limits"] == {"cpu": "1000", GPU: "24"}  # the other limits are untouched
    assert schema_errors(stored, crd_schema(NODEPOOL_CRD, "v1"), strict=True) == []
    # Steady state writes nothing.
    assert capacity.set_gpu_limit("h100", 24) is False
    assert len(karpenter_api.writes()) == 1


def test_lowering_carries_a_resource_version_precondition(
    karpenter_api: FakeKubeAPI, capacity: KarpenterCapacity
) -> None:
    before = karpenter_api.get("nodepools.karpenter.sh", "", "h100")
    assert before is not None
    assert capacity.set_gpu_limit("h100", 8) is True  # == usage: allowed
    (patch,) = karpenter_api.calls("PATCH")
    rv = before["metadata"]["resourceVersion"]
    assert patch.body == {"spec": {"limits": {GPU: "8"}}, "metadata": {"resourceVersion": rv}}
    # A pool without a GPU limit gets one: that is lowering from "unbounded" too.
    assert capacity.set_gpu_limit("a10", 4) is True
    assert "resourceVersion" in karpenter_api.calls("PATCH")[-1].body["metadata"]


def test_a_limit_below_the_running_gpus_is_refused(karpenter_api: FakeKubeAPI, capacity: KarpenterCapacity) -> None:
    with pytest.raises(NodePoolLimitError, match=r"NodePool h100 to 7: refused, the pool already runs 8 GPUs"):
        capacity.set_gpu_limit("h100", 7)
    assert karpenter_api.writes() == []
    with pytest.raises(ValueError, match="must be >= 0"):
        capacity.set_gpu_limit("h100", -1)


def test_usage_that_grows_between_read_and_write_is_rechecked(
    karpenter_api: FakeKubeAPI, capacity: KarpenterCapacity, sleeps: list[float]
) -> None:
    """Karpenter launches a node between our read and our patch: the stale precondition fails, we re-read and
    then refuse, instead of writing a limit below what now runs."""

    def karpenter_scales_up(api: FakeKubeAPI) -> None:
        obj = api.objects[("nodepools.karpenter.sh", "", "h100")]
        grown = copy.deepcopy(obj)
        grown["status"]["resources"][GPU] = "16"
        api.store_unlocked("nodepools.karpenter.sh", grown)

    karpenter_api.before("PATCH", r"/nodepools/h100$", karpenter_scales_up)
    with pytest.raises(NodePoolLimitError, match="already runs 16 GPUs"):
        capacity.set_gpu_limit("h100", 12)
    assert sleeps == [0.1]
    stored = karpenter_api.get("nodepools.karpenter.sh", "", "h100")
    assert stored is not None
    assert stored["spec"]["limits"][GPU] == 16


def test_missing_pool_and_api_errors_are_one_line(karpenter_api: FakeKubeAPI, capacity: KarpenterCapacity) -> None:
    with pytest.raises(KubeWriteError, match=r"set nvidia.com/gpu limit of NodePool nope to 4: HTTP 404"):
        capacity.set_gpu_limit("nope", 4)
    karpenter_api.fail("GET", r"/nodepools$", 403)
    with pytest.raises(KubeReadError, match=r"list karpenter.sh/v1 nodepools: HTTP 403"):
        capacity.list_node_pools()


# ---------------------------------------------------------------------------------------------- discovery


def test_mode_follows_api_discovery_and_is_cached(
    karpenter_api: FakeKubeAPI, capacity: KarpenterCapacity, ticker: Ticker
) -> None:
    assert capacity.headroom_mode() == "placeholder"
    assert [c.path for c in karpenter_api.calls("GET", r"^/apis/autoscaling")] == ["/apis/autoscaling.x-k8s.io/v1beta1"]
    karpenter_api.install_crd(BUFFER_CRD)
    ticker.t += 299
    assert capacity.headroom_mode() == "placeholder"  # cached
    assert len(karpenter_api.calls("GET", r"^/apis/autoscaling")) == 1
    ticker.t += 2
    assert capacity.headroom_mode() == "capacitybuffer"  # a CRD installed later is picked up
    assert len(karpenter_api.calls("GET", r"^/apis/autoscaling")) == 2


def test_the_fallback_to_placeholders_when_the_crd_vanishes_is_logged_once(
    karpenter_api: FakeKubeAPI, capacity: KarpenterCapacity, ticker: Ticker, caplog: pytest.LogCaptureFixture
) -> None:
    karpenter_api.install_crd(BUFFER_CRD)
    assert capacity.headroom_mode() == "capacitybuffer"
    karpenter_api.uninstall_crd("autoscaling.x-k8s.io", "capacitybuffers")
    with caplog.at_level(logging.WARNING, logger="autoscaler.adapters.karpenter"):
        for _ in range(3):
            ticker.t += 301
            assert capacity.headroom_mode() == "placeholder"
    (record,) = caplog.records
    assert record.getMessage() == ("autoscaling.x-k8s.io/v1beta1 capacitybuffers are no longer served: headroom is "
                                   "held as placeholder pods from now on")


def test_discovery_errors_other_than_404_are_reported(karpenter_api: FakeKubeAPI, capacity: KarpenterCapacity) -> None:
    karpenter_api.fail("GET", r"^/apis/autoscaling\.x-k8s\.io/v1beta1$", 503)
    with pytest.raises(KubeReadError, match=r"discover autoscaling.x-k8s.io/v1beta1: HTTP 503"):
        capacity.headroom_mode()


def test_mode_can_be_forced(karpenter_api: FakeKubeAPI, api_client: client.ApiClient) -> None:
    forced = KarpenterCapacity(api_client, namespace=CONTROLLER_NS, mode="placeholder")
    karpenter_api.install_crd(BUFFER_CRD)
    assert forced.headroom_mode() == "placeholder"
    assert karpenter_api.calls("GET", r"^/apis/autoscaling") == []
    with pytest.raises(ValueError, match="below 0"):
        KarpenterCapacity(api_client, namespace=CONTROLLER_NS, priority=0)
    with pytest.raises(ValueError, match="headroom mode"):
        KarpenterCapacity(api_client, namespace=CONTROLLER_NS, mode="buffers")  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------- CapacityBuffer


def check_buffer_rules(obj: dict[str, Any]) -> None:
    """The CRD's CEL rules (x-kubernetes-validations on spec), which jsonschema does not evaluate."""
    spec = obj["spec"]
    assert ("podTemplateRef" in spec) != ("scalableRef" in spec), "exactly one of podTemplateRef, scalableRef"
    if "podTemplateRef" in spec:
        assert "replicas" in spec or "limits" in spec


def test_capacity_buffer_is_created_per_deployment(with_buffers: FakeKubeAPI, capacity: KarpenterCapacity) -> None:
    target = DeploymentHeadroom("serving", "llama", uid="1f2e-uid")
    assert capacity.headroom_mode() == "capacitybuffer"
    assert capacity.ensure_headroom(target, 3) is True

    (post,) = with_buffers.calls("POST")
    assert post.path == "/apis/autoscaling.x-k8s.io/v1beta1/namespaces/serving/capacitybuffers"
    assert post.query["fieldValidation"] == ["Strict"]
    assert post.body == capacity.buffer_object(target, 3)
    stored = with_buffers.get("capacitybuffers.autoscaling.x-k8s.io", "serving", "llama-headroom")
    assert stored is not None
    assert schema_errors(stored, crd_schema(BUFFER_CRD, "v1beta1"), strict=True) == []
    check_buffer_rules(stored)
    assert stored["spec"] == {"scalableRef": {"apiGroup": "apps", "kind": "Deployment", "name": "llama"}, "replicas": 3}
    assert stored["metadata"]["ownerReferences"] == [
        {"apiVersion": "apps/v1", "kind": "Deployment", "name": "llama", "uid": "1f2e-uid"}
    ]
    assert stored["metadata"]["labels"][MANAGED_BY] == "predictive-autoscaler"

    assert capacity.ensure_headroom(target, 3) is False  # idempotent: no write
    assert len(with_buffers.writes()) == 1
    assert capacity.ensure_headroom(target, 5) is True
    patch = with_buffers.calls("PATCH")[-1]
    assert patch.content_type == MERGE_PATCH
    assert patch.body["spec"]["replicas"] == 5
    stored = with_buffers.get("capacitybuffers.autoscaling.x-k8s.io", "serving", "llama-headroom")
    assert stored is not None
    assert stored["spec"]["replicas"] == 5
    check_buffer_rules(stored)

    (view,) = capacity.list_headroom()
    assert (view.kind, view.namespace, view.name, view.target, view.amount) == (
        "CapacityBuffer", "serving", "llama-headroom", "serving/llama", 5
    )

    assert capacity.ensure_headroom(target, 0) is True  # 0 removes it
    assert with_buffers.calls("DELETE")[-1].path.endswith("/namespaces/serving/capacitybuffers/llama-headroom")
    assert with_buffers.get("capacitybuffers.autoscaling.x-k8s.io", "serving", "llama-headroom") is None
    assert capacity.remove_headroom(target) is False
    assert capacity.list_headroom() == []


def test_an_edited_buffer_is_put_back_to_our_shape(with_buffers: FakeKubeAPI, capacity: KarpenterCapacity) -> None:
    target = DeploymentHeadroom("serving", "llama")
    capacity.ensure_headroom(target, 2)
    stored = with_buffers.get("capacitybuffers.autoscaling.x-k8s.io", "serving", "llama-headroom")
    assert stored is not None
    assert "ownerReferences" not in stored["metadata"]  # no uid given: no owner
    stored["spec"]["percentage"] = 50
    with_buffers.add("capacitybuffers.autoscaling.x-k8s.io", stored)
    assert capacity.ensure_headroom(target, 2) is True
    fixed = with_buffers.get("capacitybuffers.autoscaling.x-k8s.io", "serving", "llama-headroom")
    assert fixed is not None
    assert fixed["spec"] == {"scalableRef": {"apiGroup": "apps", "kind": "Deployment", "name": "llama"}, "replicas": 2}


def test_a_foreign_buffer_with_our_name_is_never_touched(
    with_buffers: FakeKubeAPI, capacity: KarpenterCapacity
) -> None:
    foreign = {
        "apiVersion": "autoscaling.x-k8s.io/v1beta1",
        "kind": "CapacityBuffer",
        "metadata": {"name": "llama-headroom", "namespace": "serving"},
        "spec": {"podTemplateRef": {"name": "big"}, "replicas": 9},
    }
    with_buffers.add("capacitybuffers.autoscaling.x-k8s.io", foreign)
    with pytest.raises(HeadroomError, match=r"CapacityBuffer serving/llama-headroom exists but is not managed by"):
        capacity.ensure_headroom(DeploymentHeadroom("serving", "llama"), 1)
    with pytest.raises(HeadroomError, match="not managed by"):
        capacity.remove_headroom(DeploymentHeadroom("serving", "llama"))
    assert with_buffers.writes() == []


def test_list_headroom_ignores_objects_that_are_not_ours(
    with_buffers: FakeKubeAPI, capacity: KarpenterCapacity
) -> None:
    with_buffers.add("capacitybuffers.autoscaling.x-k8s.io", {
        "apiVersion": "autoscaling.x-k8s.io/v1beta1", "kind": "CapacityBuffer",
        "metadata": {"name": "someone-elses", "namespace": "serving"},
        "spec": {"scalableRef": {"kind": "Deployment", "name": "web"}, "replicas": 2},
    })
    with_buffers.add("deployments", deployment(CONTROLLER_NS, "predictive-autoscaler", enabled=False))
    capacity.ensure_headroom(DeploymentHeadroom("serving", "llama"), 1)
    assert [(v.kind, v.name) for v in capacity.list_headroom()] == [("CapacityBuffer", "llama-headroom")]
    (buffers,) = with_buffers.calls("GET", r"^/apis/autoscaling\.x-k8s\.io/v1beta1/capacitybuffers$")
    assert buffers.query["labelSelector"] == [
        "app.kubernetes.io/managed-by=predictive-autoscaler,app.kubernetes.io/name=predictive-autoscaler-headroom"
    ]


def test_buffers_need_the_api(karpenter_api: FakeKubeAPI, capacity: KarpenterCapacity) -> None:
    with pytest.raises(HeadroomError, match=r"capacitybuffers is not served .* set karpenter.headroom to placeholder"):
        capacity.ensure_headroom(DeploymentHeadroom("serving", "llama"), 1)
    assert capacity.remove_headroom(DeploymentHeadroom("serving", "llama")) is False
    assert karpenter_api.writes() == []


def test_a_conflicting_buffer_write_is_retried(with_buffers: FakeKubeAPI, capacity: KarpenterCapacity,
                                               sleeps: list[float]) -> None:
    target = DeploymentHeadroom("serving", "llama")
    capacity.ensure_headroom(target, 1)
    with_buffers.fail("PATCH", r"/capacitybuffers/llama-headroom$", 409, times=2)
    assert capacity.ensure_headroom(target, 4) is True
    assert sleeps == [0.1, 0.2]
    stored = with_buffers.get("capacitybuffers.autoscaling.x-k8s.io", "serving", "llama-headroom")
    assert stored is not None
    assert stored["spec"]["replicas"] == 4


def test_long_deployment_names_give_bounded_stable_buffer_names() -> None:
    long = "d" * 250
    assert len(buffer_name(long)) <= 253
    assert buffer_name(long) == buffer_name(long) != buffer_name("d" * 251)
    assert len(placeholder_name("p" * 100)) <= 63


def test_the_schema_check_in_the_fake_can_fail(with_buffers: FakeKubeAPI, api_client: client.ApiClient) -> None:
    """Control: a misspelt field is rejected under Strict (400: a strict decoding error) and pruned without it
    (with a warning), like the real API server; a value the schema forbids is 422."""
    with_buffers.expect_refusals()
    custom = client.CustomObjectsApi(api_client)
    body = {
        "apiVersion": "autoscaling.x-k8s.io/v1beta1",
        "kind": "CapacityBuffer",
        "metadata": {"name": "x"},
        "spec": {"scalableRef": {"kind": "Deployment", "name": "llama"}, "replica": 2},
    }
    with pytest.raises(ApiException) as err:
        custom.create_namespaced_custom_object("autoscaling.x-k8s.io", "v1beta1", "ns", "capacitybuffers",
                                               body, field_validation="Strict")
    assert err.value.status == 400
    assert err.value.body is not None
    assert 'strict decoding error: unknown field "spec.replica"' in json.loads(err.value.body)["message"]
    created = custom.create_namespaced_custom_object("autoscaling.x-k8s.io", "v1beta1", "ns", "capacitybuffers", body)
    assert isinstance(created, dict)
    assert created["spec"] == {"scalableRef": {"kind": "Deployment", "name": "llama"}}
    bad = copy.deepcopy(body) | {"metadata": {"name": "y"}}
    bad["spec"] = {"scalableRef": {"kind": "Deployment", "name": "llama"}, "replicas": -1}
    with pytest.raises(ApiException) as err:
        custom.create_namespaced_custom_object("autoscaling.x-k8s.io", "v1beta1", "ns", "capacitybuffers", bad)
    assert err.value.status == 422


# ---------------------------------------------------------------------------------------------- placeholders


def k8s_validate(doc: dict[str, Any]) -> None:
    import kubernetes_validate

    kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)


def test_placeholders_hold_whole_nodes_of_the_pool(karpenter_api: FakeKubeAPI, capacity: KarpenterCapacity) -> None:
    (_, h100) = capacity.list_node_pools()
    target = PoolHeadroom(h100, gpus_per_node=8)
    assert capacity.headroom_mode() == "placeholder"
    assert capacity.ensure_headroom(target, 2) is True

    pc_post, dep_post = karpenter_api.calls("POST")
    assert pc_post.path == "/apis/scheduling.k8s.io/v1/priorityclasses"
    assert pc_post.body == capacity.priority_class_object()
    k8s_validate(pc_post.body)
    assert (pc_post.body["value"], pc_post.body["preemptionPolicy"], pc_post.body["globalDefault"]) == (-10, "Never",
                                                                                                        False)

    assert dep_post.path == f"/apis/apps/v1/namespaces/{CONTROLLER_NS}/deployments"
    assert dep_post.query["fieldValidation"] == ["Strict"]
    dep = dep_post.body
    assert dep == capacity.placeholder_object(target, 2)  # nothing lost in the client's model
    k8s_validate(dep)
    assert dep["metadata"]["name"] == "headroom-h100"
    assert dep["spec"]["replicas"] == 2
    assert dep["spec"]["strategy"] == {"type": "Recreate"}
    pod = dep["spec"]["template"]
    assert pod["metadata"]["annotations"] == {DO_NOT_DISRUPT: "true"}
    spec = pod["spec"]
    assert spec["priorityClassName"] == "predictive-autoscaler-headroom"
    assert spec["nodeSelector"] == {"karpenter.sh/nodepool": "h100"}
    assert spec["tolerations"] == [{"key": GPU, "operator": "Equal", "value": "true", "effect": "NoSchedule"}]
    (container,) = spec["containers"]
    assert container["image"].startswith("registry.k8s.io/pause:")
    assert container["resources"]["requests"][GPU] == container["resources"]["limits"][GPU] == "8"
    # The controller's namespace enforces the restricted Pod Security Standard.
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]}
    }

    assert capacity.ensure_headroom(target, 2) is False  # idempotent
    assert len(karpenter_api.writes()) == 2
    assert capacity.ensure_headroom(target, 3) is True
    patch = karpenter_api.calls("PATCH")[-1]
    assert patch.body == {"spec": {"replicas": 3}}  # only the count changes
    assert patch.content_type == MERGE_PATCH
    # The PriorityClass is checked once per discovery TTL, not on every call.
    assert len(karpenter_api.calls("GET", r"priorityclasses")) == 1

    (view,) = capacity.list_headroom()
    assert (view.kind, view.namespace, view.name, view.target, view.amount) == (
        "Deployment", CONTROLLER_NS, "headroom-h100", "h100", 3
    )
    assert capacity.remove_headroom(target) is True
    delete = karpenter_api.calls("DELETE")[-1]
    assert delete.path == f"/apis/apps/v1/namespaces/{CONTROLLER_NS}/deployments/headroom-h100"
    assert delete.query["propagationPolicy"] == ["Background"]  # its ReplicaSet and pods go with it
    assert capacity.remove_headroom(target) is False
    assert capacity.list_headroom() == []


def test_a_changed_pool_rewrites_the_pod_template(karpenter_api: FakeKubeAPI, capacity: KarpenterCapacity) -> None:
    (_, h100) = capacity.list_node_pools()
    capacity.ensure_headroom(PoolHeadroom(h100, 8), 1)
    # The pool loses its taint and moves to 4-GPU nodes.
    obj = karpenter_api.get("nodepools.karpenter.sh", "", "h100")
    assert obj is not None
    obj["spec"]["template"]["spec"]["taints"] = []
    karpenter_api.add("nodepools.karpenter.sh", obj)
    (_, changed) = capacity.list_node_pools()
    assert capacity.ensure_headroom(PoolHeadroom(changed, 4), 1) is True
    patch = karpenter_api.calls("PATCH")[-1].body
    assert patch["spec"]["template"]["spec"]["tolerations"] is None  # removed, not left behind by the merge
    stored = karpenter_api.get("deployments", CONTROLLER_NS, "headroom-h100")
    assert stored is not None
    desired = capacity.placeholder_object(PoolHeadroom(changed, 4), 1)
    assert stored["spec"]["template"] == desired["spec"]["template"]
    assert stored["metadata"]["annotations"][SPEC_HASH_ANNOTATION] == desired["metadata"]["annotations"][
        SPEC_HASH_ANNOTATION
    ]
    assert capacity.ensure_headroom(PoolHeadroom(changed, 4), 1) is False


def test_a_deleted_priority_class_is_recreated_after_the_ttl(
    karpenter_api: FakeKubeAPI, capacity: KarpenterCapacity, ticker: Ticker
) -> None:
    (_, h100) = capacity.list_node_pools()
    capacity.ensure_headroom(PoolHeadroom(h100, 8), 1)
    del karpenter_api.objects[("priorityclasses", "", "predictive-autoscaler-headroom")]
    ticker.t += 100
    capacity.ensure_headroom(PoolHeadroom(h100, 8), 2)
    assert karpenter_api.get("priorityclasses", "", "predictive-autoscaler-headroom") is None  # cached: not seen
    ticker.t += 300
    capacity.ensure_headroom(PoolHeadroom(h100, 8), 2)
    pc = karpenter_api.get("priorityclasses", "", "predictive-autoscaler-headroom")
    assert pc is not None
    assert pc["value"] == -10


def test_a_priority_class_that_would_not_yield_is_refused(
    karpenter_api: FakeKubeAPI, capacity: KarpenterCapacity
) -> None:
    karpenter_api.add("priorityclasses", {
        "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
        "metadata": {"name": "predictive-autoscaler-headroom"}, "value": 1000, "preemptionPolicy": "Never",
    })
    (_, h100) = capacity.list_node_pools()
    with pytest.raises(HeadroomError, match=r"PriorityClass predictive-autoscaler-headroom exists with value 1000"):
        capacity.ensure_headroom(PoolHeadroom(h100, 8), 1)
    assert karpenter_api.writes() == []


def test_a_foreign_deployment_with_the_placeholder_name_is_never_touched(
    karpenter_api: FakeKubeAPI, capacity: KarpenterCapacity
) -> None:
    karpenter_api.add("deployments", deployment(CONTROLLER_NS, "headroom-h100", enabled=False))
    (_, h100) = capacity.list_node_pools()
    with pytest.raises(HeadroomError, match=r"Deployment predictive-autoscaler/headroom-h100 exists but is not"):
        capacity.ensure_headroom(PoolHeadroom(h100, 8), 1)
    with pytest.raises(HeadroomError):
        capacity.remove_headroom(PoolHeadroom(h100, 8))
    assert [w.method for w in karpenter_api.writes()] == ["POST"]  # only the PriorityClass


def test_bad_headroom_requests_are_refused(karpenter_api: FakeKubeAPI, capacity: KarpenterCapacity) -> None:
    (_, h100) = capacity.list_node_pools()
    with pytest.raises(ValueError, match=r"gpus_per_node must be >= 1, got 0 for NodePool h100"):
        capacity.ensure_headroom(PoolHeadroom(h100, 0), 1)
    with pytest.raises(ValueError, match=r"amount must be >= 0, got -1 for NodePool h100"):
        capacity.ensure_headroom(PoolHeadroom(h100, 8), -1)


def test_merge_patch_to_turns_current_into_desired() -> None:
    current = {"a": 1, "b": {"c": [1, 2], "d": "x"}, "e": None}
    desired = {"a": 1, "b": {"c": [3]}, "f": {"g": 1}}
    assert merge_patch(current, merge_patch_to(current, desired)) == desired


# ---------------------------------------------------------------------------------------------- real API server


@pytest.fixture
def real_capacity(real_api_client: client.ApiClient, real_namespace: str) -> Iterator[KarpenterCapacity]:
    pc = f"pa-test-headroom-{uuid.uuid4().hex[:6]}"
    yield KarpenterCapacity(real_api_client, namespace=real_namespace, priority_class=pc, mode="placeholder")
    try:
        client.SchedulingV1Api(real_api_client).delete_priority_class(pc)
    except ApiException as exc:
        if exc.status != 404:
            raise


@pytest.mark.kube
def test_real_server_placeholder_round_trip(real_capacity: KarpenterCapacity, real_api_client: client.ApiClient,
                                            real_namespace: str) -> None:
    pool = node_pool_view(nodepool("pa-test-pool", taints=[{"key": GPU, "effect": "NoSchedule"}]))
    target = PoolHeadroom(pool, 1)
    assert real_capacity.ensure_headroom(target, 1) is True
    assert real_capacity.ensure_headroom(target, 1) is False
    assert real_capacity.ensure_headroom(target, 2) is True
    dep = client.AppsV1Api(real_api_client).read_namespaced_deployment("headroom-pa-test-pool", real_namespace)
    assert dep.spec is not None
    assert dep.spec.replicas == 2
    (view,) = real_capacity.list_headroom()
    assert view.amount == 2
    assert real_capacity.remove_headroom(target) is True
    assert real_capacity.remove_headroom(target) is False


@pytest.mark.kube
def test_real_server_node_pools_and_buffers_when_installed(real_api_client: client.ApiClient,
                                                           real_namespace: str) -> None:
    capacity = KarpenterCapacity(real_api_client, namespace=real_namespace)
    try:
        pools = capacity.list_node_pools()
    except KubeReadError as exc:
        pytest.skip(f"Karpenter NodePools are not served here: {exc}")
    assert all(p.name for p in pools)
    if capacity.headroom_mode() != "capacitybuffer":
        pytest.skip("CapacityBuffer API not served by this cluster")
    target = DeploymentHeadroom(real_namespace, "pa-probe")
    assert capacity.ensure_headroom(target, 1) is True
    assert capacity.ensure_headroom(target, 1) is False
    assert capacity.remove_headroom(target) is True


def test_crd_files_are_the_versions_the_adapter_speaks() -> None:
    """The adapter's group/version/plural constants match the shipped CRDs (a rename would 404 in production)."""
    from autoscaler.adapters.karpenter import BUFFERS, KARPENTER

    for path, (group, version, plural) in ((NODEPOOL_CRD, KARPENTER), (BUFFER_CRD, BUFFERS)):
        doc = yaml.safe_load(path.read_text())
        assert (doc["spec"]["group"], doc["spec"]["names"]["plural"]) == (group, plural)
        assert version in [v["name"] for v in doc["spec"]["versions"] if v["served"]]
