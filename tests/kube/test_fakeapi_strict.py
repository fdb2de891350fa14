"""The fake API server is as strict as the real one: schemas, CEL rules, RBAC, and the Status bodies it answers.

Why it exists: the real-API-server suite runs only when binaries or a cluster are given, so the everyday suite
leans on ``FakeKubeAPI`` to refuse what a real server refuses. Each test here sends real requests through the
official client (as the controller's ServiceAccount unless it says otherwise) and asserts the refusal and its
body, with a control that the same request done right passes, so a fake that stopped checking would fail here.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypeVar

import kubernetes_validate
import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes_validate import utils as kv_utils

from autoscaler.adapters.kube import MERGE_PATCH
from tests.kube import fake_cel, fake_validation
from tests.kube.conftest import T0, deployment, fake_client, hpa, nodepool, pod
from tests.kube.fake_rbac import CONTROLLER, Rbac, User, request_info
from tests.kube.fakeapi import ADMIN_TOKEN, FakeKubeAPI, load_crd
from tests.kubeserver import metadata
from tests.shared import require_shared

NS = "ml"
CONTROLLER_NS = "predictive-autoscaler"
SA = "system:serviceaccount:predictive-autoscaler:predictive-autoscaler"
M = TypeVar("M")


def status_of(exc: ApiException) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(exc.body or "{}")
    return body


def model(cls: type[M], data: dict[str, Any]) -> M:
    """A typed client model from API JSON (what a typed method takes)."""
    obj = cls.from_dict(data)  # type: ignore[attr-defined]
    assert obj is not None
    return obj  # type: ignore[no-any-return]


def raw(api: client.ApiClient, method: str, path: str, body: Any = None,
        query: list[tuple[str, str]] | None = None) -> tuple[int, dict[str, Any]]:
    """A request the typed methods would refuse to build (a wrong type, an unknown field, ``watch``), sent by the
    official client's own request layer with its credentials: (status, parsed answer)."""
    _, url, headers, data, _ = api.param_serialize(
        method, path, query_params=query or [], body=body, auth_settings=["BearerToken"],
        header_params={"Content-Type": "application/json", "Accept": "application/json"},
    )
    response = api.call_api(method, url, header_params=headers, body=data)
    response.read()  # type: ignore[no-untyped-call]
    answer: dict[str, Any] = json.loads(response.data or b"{}")
    return response.status, answer


def refused(call: Any, *args: Any, **kwargs: Any) -> tuple[int, dict[str, Any]]:
    with pytest.raises(ApiException) as err:
        call(*args, **kwargs)
    return err.value.status, status_of(err.value)


@pytest.fixture
def crds() -> Path:
    return require_shared("crds")


@pytest.fixture
def apps(api_client: client.ApiClient) -> client.AppsV1Api:
    return client.AppsV1Api(api_client)


@pytest.fixture
def core(api_client: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(api_client)


@pytest.fixture
def custom(api_client: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api_client)


@pytest.fixture
def admin(admin_client: client.ApiClient) -> client.AppsV1Api:
    return client.AppsV1Api(admin_client)


@pytest.fixture
def pools(fake_api: FakeKubeAPI, crds: Path) -> FakeKubeAPI:
    fake_api.install_crd(crds / "karpenter.sh_nodepools.yaml")
    fake_api.add("nodepools.karpenter.sh", nodepool("gpu"))
    return fake_api


# ---------------------------------------------------------------------------------------------- built-in schemas


def test_the_kubernetes_version_is_the_newest_kubernetes_validate_ships() -> None:
    newest = kv_utils.major_minor(kv_utils.latest_version())
    assert newest == fake_validation.KUBERNETES_VERSION


@pytest.mark.parametrize(
    ("api_version", "kind", "obj"),
    [
        ("apps/v1", "Deployment", deployment(NS, "llama")),
        ("apps/v1", "Deployment", {**deployment(NS, "llama"), "spec": {"replicas": 1}}),  # no selector/template
        ("apps/v1", "Deployment", {**deployment(NS, "llama"), "extra": 1}),  # unknown field
        ("apps/v1", "Deployment", {**deployment(NS, "llama"), "metadata": {"name": "x", "labels": {"a": 1}}}),
        ("v1", "Pod", pod(NS, "p", "llama", created=T0)),
        ("v1", "Event", {"apiVersion": "v1", "kind": "Event", "metadata": {"name": "e"},
                         "involvedObject": {"kind": "Deployment", "name": "llama"}, "count": 1}),
        ("v1", "Event", {"apiVersion": "v1", "kind": "Event", "metadata": {"name": "e"}}),  # no involvedObject
        ("coordination.k8s.io/v1", "Lease", {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                                             "metadata": {"name": "l"}, "spec": {"leaseDurationSeconds": "15"}}),
        ("scheduling.k8s.io/v1", "PriorityClass", {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                                                   "metadata": {"name": "p"}, "value": -10}),
    ],
)
def test_the_cached_validator_is_kubernetes_validate(api_version: str, kind: str, obj: dict[str, Any]) -> None:
    """The fake keeps one validator per kind instead of calling ``kubernetes_validate.validate`` (which re-reads
    1.8 MB of definitions per call); both must agree on every object."""
    try:
        kubernetes_validate.validate(obj, fake_validation.KUBERNETES_VERSION, strict=True)
        library_ok = True
    except kubernetes_validate.ValidationError:
        library_ok = False
    errors = list(fake_validation.builtin_validator(api_version, kind).iter_errors(obj))
    assert (errors == []) is library_ok


def test_a_deployment_patch_with_an_invalid_annotation_key_is_422(
    fake_api: FakeKubeAPI, apps: client.AppsV1Api
) -> None:
    fake_api.expect_refusals()
    fake_api.add("deployments", deployment(NS, "llama"))
    before = fake_api.get("deployments", NS, "llama")
    code, body = refused(apps.patch_namespaced_deployment, "llama", NS,
                         {"metadata": {"annotations": {"predictive-autoscaler.io/bad key": "x"}}},
                         _content_type=MERGE_PATCH)
    assert code == 422
    assert {k: body[k] for k in ("kind", "apiVersion", "status", "reason", "code")} == {
        "kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Invalid", "code": 422}
    assert body["message"].startswith(
        'Deployment.apps "llama" is invalid: metadata.annotations: Invalid value: "predictive-autoscaler.io/bad key": '
        "name part must consist of alphanumeric characters")
    assert body["details"]["name"] == "llama"
    assert body["details"]["group"] == "apps"
    assert body["details"]["kind"] == "Deployment"
    assert body["details"]["causes"][0]["field"] == "metadata.annotations"
    assert fake_api.get("deployments", NS, "llama") == before, "nothing stored"
    # control: the same patch with a valid key is stored
    apps.patch_namespaced_deployment("llama", NS, {"metadata": {"annotations": {"predictive-autoscaler.io/ok": "x"}}},
                                     _content_type=MERGE_PATCH)
    stored = fake_api.get("deployments", NS, "llama")
    assert stored is not None
    assert stored["metadata"]["annotations"]["predictive-autoscaler.io/ok"] == "x"


def test_annotations_over_256_kib_and_bad_label_values_are_422(fake_api: FakeKubeAPI, apps: client.AppsV1Api) -> None:
    fake_api.expect_refusals()
    fake_api.add("deployments", deployment(NS, "llama"))
    code, body = refused(apps.patch_namespaced_deployment, "llama", NS,
                         {"metadata": {"annotations": {"predictive-autoscaler.io/status": "x" * (256 * 1024)}}},
                         _content_type=MERGE_PATCH)
    assert (code, body["reason"]) == (422, "Invalid")
    assert "metadata.annotations: Too long: may not be more than 262144 bytes" in body["message"]
    code, body = refused(apps.patch_namespaced_deployment, "llama", NS,
                         {"metadata": {"labels": {"team": "x" * 64}}}, _content_type=MERGE_PATCH)
    assert code == 422
    assert "metadata.labels[team]: Invalid value: " in body["message"]
    assert "must be no more than 63 characters" in body["message"]
    code, body = refused(apps.patch_namespaced_deployment, "llama", NS,
                         {"metadata": {"labels": {"team": "-ml"}}}, _content_type=MERGE_PATCH)
    assert code == 422
    assert "a valid label must be an empty string or consist of alphanumeric characters" in body["message"]
    apps.patch_namespaced_deployment("llama", NS, {"metadata": {"labels": {"team": "x" * 63}}},
                                     _content_type=MERGE_PATCH)


def test_deployment_rules_beyond_the_schema(fake_api: FakeKubeAPI, admin: client.AppsV1Api) -> None:
    fake_api.expect_refusals()
    fake_api.add("deployments", deployment(NS, "llama"))
    code, body = refused(admin.patch_namespaced_deployment, "llama", NS,
                         {"spec": {"selector": {"matchLabels": {"app": "other"}}}}, _content_type=MERGE_PATCH)
    assert code == 422
    assert "spec.template.metadata.labels: Invalid value: " in body["message"]
    assert "`selector` does not match template `labels`" in body["message"]
    assert "spec.selector: Invalid value: " in body["message"]
    assert "field is immutable" in body["message"]
    toleration = {"key": "nvidia.com/gpu", "operator": "Exists", "value": "true", "effect": "NoSchedule"}
    code, body = refused(admin.patch_namespaced_deployment, "llama", NS,
                         {"spec": {"template": {"spec": {"tolerations": [toleration]}}}}, _content_type=MERGE_PATCH)
    assert code == 422
    assert "value must be empty when `operator` is 'Exists'" in body["message"]
    gpus = {"requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "2"}}
    dep = deployment(NS, "mistral")
    dep.pop("status")
    dep["spec"]["template"]["spec"]["containers"][0]["resources"] = gpus
    code, body = refused(admin.create_namespaced_deployment, NS, model(client.V1Deployment, dep))
    assert code == 422
    assert "must be equal to nvidia.com/gpu limit of 2" in body["message"]
    dep["spec"]["template"]["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "two"}}
    code, body = refused(admin.create_namespaced_deployment, NS, model(client.V1Deployment, dep))
    assert (code, body["reason"]) == (400, "BadRequest"), "a quantity that does not parse cannot be decoded"
    dep["spec"]["template"]["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "2"}}
    admin.create_namespaced_deployment(NS, model(client.V1Deployment, dep))


def test_a_scale_below_zero_is_422_and_a_string_is_400(fake_api: FakeKubeAPI, apps: client.AppsV1Api) -> None:
    fake_api.expect_refusals()
    fake_api.add("deployments", deployment(NS, "llama", replicas=2))
    code, body = refused(apps.patch_namespaced_deployment_scale, "llama", NS, {"spec": {"replicas": -1}},
                         _content_type=MERGE_PATCH)
    assert code == 422
    assert body["message"] == ('Scale.autoscaling "llama" is invalid: spec.replicas: Invalid value: -1: must be '
                               "greater than or equal to 0")
    code, body = refused(apps.patch_namespaced_deployment_scale, "llama", NS, {"spec": {"replicas": "3"}},
                         _content_type=MERGE_PATCH)
    assert (code, body["reason"]) == (400, "BadRequest")
    assert body["message"].startswith('Scale in version "v1" cannot be handled as a Scale: spec.replicas: ')
    apps.patch_namespaced_deployment_scale("llama", NS, {"spec": {"replicas": 3}}, _content_type=MERGE_PATCH)
    stored = fake_api.get("deployments", NS, "llama")
    assert stored is not None
    assert stored["spec"]["replicas"] == 3


def test_pod_deletion_cost_must_be_a_32_bit_integer_and_the_pod_spec_cannot_change(
    fake_api: FakeKubeAPI, core: client.CoreV1Api
) -> None:
    fake_api.expect_refusals()
    fake_api.add("pods", pod(NS, "llama-1", "llama", created=T0))
    cost = "controller.kubernetes.io/pod-deletion-cost"
    for bad in ("+5", "007", "abc", str(2**31)):
        code, body = refused(core.patch_namespaced_pod, "llama-1", NS, {"metadata": {"annotations": {cost: bad}}},
                             _content_type=MERGE_PATCH)
        assert code == 422, bad
        assert f"metadata.annotations[{cost}]: Invalid value: {json.dumps(bad)}: must be a 32bit integer" in (
            body["message"])
    for good in ("-3", "0", "2147483647"):
        core.patch_namespaced_pod("llama-1", NS, {"metadata": {"annotations": {cost: good}}},
                                  _content_type=MERGE_PATCH)
    code, body = refused(core.patch_namespaced_pod, "llama-1", NS, {"spec": {"nodeName": "elsewhere"}},
                         _content_type=MERGE_PATCH)
    assert code == 422
    assert body["message"].startswith('Pod "llama-1" is invalid: spec: Forbidden: pod updates may not change fields')


def event(**extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "v1", "kind": "Event", "metadata": {"generateName": "llama.", "namespace": NS},
        "involvedObject": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "llama", "namespace": NS},
        "reason": "Scaled", "message": "scaled to 3", "type": "Normal", "source": {"component": "x"},
    }
    body.update(extra)
    return body


def test_an_event_with_a_bad_field_is_422(fake_api: FakeKubeAPI, core: client.CoreV1Api) -> None:
    fake_api.expect_refusals()
    other = event(involvedObject={"apiVersion": "apps/v1", "kind": "Deployment", "name": "llama",
                                  "namespace": "other"})
    code, body = refused(core.create_namespaced_event, NS, model(client.CoreV1Event, other))
    assert code == 422
    assert re.fullmatch(r'Event "llama\.[bcdfghjklmnpqrstvwxz2456789]{5}" is invalid: involvedObject\.namespace: '
                        r'Invalid value: "other": does not match event\.namespace', body["message"]), body["message"]
    assert body["details"]["kind"] == "Event"
    assert "group" not in body["details"], "the core group is empty, and omitted as the server omits it"
    # An Event with eventTime is a "new" Event: its reporting fields and the 1024-character message are checked.
    new_style = event(eventTime="2025-03-01T12:00:00.000000Z", message="m" * 1025)
    code, body = refused(core.create_namespaced_event, NS, model(client.CoreV1Event, new_style))
    assert code == 422
    for needed in ("reportingComponent: Required value", "reportingInstance: Required value",
                   "action: Required value", "message: Invalid value: \"\": can have at most 1024 characters"):
        assert needed in body["message"]
    # A value of the wrong type cannot be decoded (400); an unknown field is 400 under Strict, dropped otherwise.
    events = f"/api/v1/namespaces/{NS}/events"
    api = core.api_client
    code, body = raw(api, "POST", events, event(count="three"))
    assert (code, body["reason"]) == (400, "BadRequest")
    assert body["message"].startswith('Event in version "v1" cannot be handled as a Event: count: ')
    code, body = raw(api, "POST", events, event(colour="red"), [("fieldValidation", "Strict")])
    assert code == 400
    assert body["message"] == ('Event in version "v1" cannot be handled as a Event: strict decoding error: unknown '
                               'field "colour"')
    code, created = raw(api, "POST", events, event(colour="red"))
    assert code == 201
    assert created["metadata"]["name"].startswith("llama.")
    assert "colour" not in created
    assert [w for _, w in fake_api.warnings] == ['unknown field "colour"']


def test_generate_name_is_cut_to_58_characters(fake_api: FakeKubeAPI, core: client.CoreV1Api) -> None:
    created = core.create_namespaced_event(NS, model(client.CoreV1Event,
                                                     event(metadata={"generateName": "d" * 100 + "."})))
    assert created.metadata is not None
    assert created.metadata.name is not None
    assert len(created.metadata.name) == 63
    assert created.metadata.name.startswith("d" * 58)


def test_lease_and_priority_class_rules(fake_api: FakeKubeAPI, api_client: client.ApiClient) -> None:
    fake_api.expect_refusals()
    leases = client.CoordinationV1Api(api_client)
    body = {"metadata": {"name": "predictive-autoscaler"}, "spec": {"leaseDurationSeconds": 0}}
    code, answer = refused(leases.create_namespaced_lease, CONTROLLER_NS, model(client.V1Lease, body))
    assert code == 422
    assert answer["message"] == ('Lease.coordination.k8s.io "predictive-autoscaler" is invalid: '
                                 "spec.leaseDurationSeconds: Invalid value: 0: must be greater than 0")
    scheduling = client.SchedulingV1Api(api_client)
    pc = {"metadata": {"name": "huge"}, "value": 2_000_000_000, "preemptionPolicy": "Sometimes"}
    code, answer = refused(scheduling.create_priority_class, model(client.V1PriorityClass, pc))
    assert code == 422
    assert "value: Forbidden: maximum allowed value of a user defined priority is 1000000000" in answer["message"]
    assert 'preemptionPolicy: Unsupported value: "Sometimes"' in answer["message"]
    scheduling.create_priority_class(model(client.V1PriorityClass, {"metadata": {"name": "low"}, "value": -10,
                                                                    "preemptionPolicy": "Never"}))


# ---------------------------------------------------------------------------------------------- CEL rules


def test_a_nodepool_violating_a_cel_rule_is_422_with_the_rules_message(
    pools: FakeKubeAPI, custom: client.CustomObjectsApi
) -> None:
    pools.expect_refusals()
    before = pools.get("nodepools.karpenter.sh", "", "gpu")
    patch = {"spec": {"template": {"metadata": {"labels": {"karpenter.sh/nodepool": "other"}}}}}
    code, body = refused(custom.patch_cluster_custom_object, "karpenter.sh", "v1", "nodepools", "gpu", patch,
                         _content_type=MERGE_PATCH)
    assert code == 422
    assert body["message"] == ('NodePool.karpenter.sh "gpu" is invalid: spec.template.metadata.labels: Invalid value: '
                               '"object": label "karpenter.sh/nodepool" is restricted')
    assert body["details"] == {
        "name": "gpu", "group": "karpenter.sh", "kind": "NodePool",
        "causes": [{"reason": "FieldValueInvalid", "field": "spec.template.metadata.labels",
                    "message": 'Invalid value: "object": label "karpenter.sh/nodepool" is restricted'}],
    }
    assert pools.get("nodepools.karpenter.sh", "", "gpu") == before
    # a static NodePool (replicas) may only limit nodes, has no weight, and cannot be made from a dynamic one
    code, body = refused(custom.patch_cluster_custom_object, "karpenter.sh", "v1", "nodepools", "gpu",
                         {"spec": {"replicas": 2}}, _content_type=MERGE_PATCH)
    assert code == 422
    for message in ("Cannot transition NodePool between static (replicas set) and dynamic (replicas unset) "
                    "provisioning modes", "only 'limits.nodes' is supported on static NodePools",
                    "'weight' is not supported on static NodePools"):
        assert f'spec: Invalid value: "object": {message}' in body["message"]
    # control: what the controller writes (the GPU limit) passes every rule
    custom.patch_cluster_custom_object("karpenter.sh", "v1", "nodepools", "gpu",
                                       {"spec": {"limits": {"nvidia.com/gpu": "32"}}}, _content_type=MERGE_PATCH,
                                       field_validation="Strict")
    stored = pools.get("nodepools.karpenter.sh", "", "gpu")
    assert stored is not None
    assert stored["spec"]["limits"]["nvidia.com/gpu"] == "32"


def test_transition_rules_run_on_update_only_and_unchanged_values_are_ratcheted(
    pools: FakeKubeAPI, custom: client.CustomObjectsApi, crds: Path
) -> None:
    pools.expect_refusals()
    code, body = refused(custom.patch_cluster_custom_object, "karpenter.sh", "v1", "nodepools", "gpu",
                         {"spec": {"template": {"spec": {"nodeClassRef": {"group": "other.example.com"}}}}},
                         _content_type=MERGE_PATCH)
    assert code == 422
    assert ('spec.template.spec.nodeClassRef: Invalid value: "object": nodeClassRef.group is immutable'
            in body["message"])
    # created with any group: no oldSelf, no transition rule
    fresh = nodepool("fresh")
    fresh.pop("status")
    fresh["spec"]["template"]["spec"]["nodeClassRef"]["group"] = "other.example.com"
    with fake_client(pools, ADMIN_TOKEN) as admin:
        client.CustomObjectsApi(admin).create_cluster_custom_object("karpenter.sh", "v1", "nodepools", fresh)
    # a pool stored in breach of a rule (by someone else, before the rule existed) can still get its limit...
    legacy = nodepool("legacy")
    legacy["spec"]["template"]["metadata"]["labels"]["karpenter.sh/team"] = "ml"
    pools.add("nodepools.karpenter.sh", legacy)
    custom.patch_cluster_custom_object("karpenter.sh", "v1", "nodepools", "legacy",
                                       {"spec": {"limits": {"nvidia.com/gpu": "24"}}}, _content_type=MERGE_PATCH)
    # ...but a change of the breaching value is held to the rule
    code, body = refused(custom.patch_cluster_custom_object, "karpenter.sh", "v1", "nodepools", "legacy",
                         {"spec": {"template": {"metadata": {"labels": {"karpenter.sh/team": "ai"}}}}},
                         _content_type=MERGE_PATCH)
    assert code == 422
    assert 'label domain "karpenter.sh" is restricted' in body["message"]


def test_capacity_buffer_and_workload_rules(fake_api: FakeKubeAPI, custom: client.CustomObjectsApi,
                                            crds: Path) -> None:
    fake_api.expect_refusals()
    fake_api.install_crd(crds / "autoscaling.x-k8s.io_capacitybuffers.yaml")
    both = {"apiVersion": "autoscaling.x-k8s.io/v1beta1", "kind": "CapacityBuffer", "metadata": {"name": "b"},
            "spec": {"scalableRef": {"kind": "Deployment", "name": "llama"}, "podTemplateRef": {"name": "t"},
                     "replicas": 1}}
    code, body = refused(custom.create_namespaced_custom_object, "autoscaling.x-k8s.io", "v1beta1", NS,
                         "capacitybuffers", both)
    assert code == 422
    assert body["message"] == ('CapacityBuffer.autoscaling.x-k8s.io "b" is invalid: spec: Invalid value: "object": '
                               "You must define either PodTemplateRef or ScalableRef, but not both")
    from tests.kube.test_training import workload  # a module that needs ../shared/crds: imported once they are here

    fake_api.install_crd(crds / "kueue.x-k8s.io_workloads.yaml")
    fake_api.add("workloads.kueue.x-k8s.io", workload(NS, "nightly"))
    code, body = refused(custom.patch_namespaced_custom_object, "kueue.x-k8s.io", "v1beta1", NS, "workloads",
                         "nightly", {"spec": {"priority": None}}, _content_type=MERGE_PATCH)
    assert code == 422
    assert body["message"].endswith('spec: Invalid value: "object": priority should not be nil when '
                                    "priorityClassName is set")
    custom.patch_namespaced_custom_object("kueue.x-k8s.io", "v1beta1", NS, "workloads", "nightly",
                                          {"spec": {"active": False}}, _content_type=MERGE_PATCH)


def test_rules_the_fake_cannot_evaluate_are_counted_and_skipped(crds: Path) -> None:
    """How many rules of the shared CRDs the fake evaluates, computed: the rules of the objects the controller
    writes (NodePool, CapacityBuffer, Workload) are all evaluated; the others are skipped only for a named reason."""
    evaluated: dict[str, int] = {}
    skipped: dict[str, list[str]] = {}
    for path in sorted(crds.glob("*.yaml")):
        for crd in load_crd(path):
            key = f"{crd.kind}/{crd.version}"
            rules = fake_cel.census(crd.schema or {})
            evaluated[key] = sum(r.skipped is None for _, r in rules)
            skipped[key] = [f"{where}: {r.rule} ({r.skipped})" for where, r in rules if r.skipped is not None]
            assert evaluated[key] + len(skipped[key]) == len(rules)
            assert all("cel-python" in reason for reason in skipped[key])
    for written in ("NodePool/v1", "CapacityBuffer/v1beta1", "Workload/v1beta1"):
        assert evaluated[written] > 0
        assert skipped[written] == [], f"{written}: a rule the controller's writes are subject to is skipped"
    assert sum(evaluated.values()) > 0
    # the skipping itself: a Kubernetes-only function, optional syntax
    assert fake_cel.compile_rule("quantity(self.cpu).isGreaterThan(quantity('1'))").skipped == (
        "calls isGreaterThan, quantity, which cel-python lacks")
    assert (fake_cel.compile_rule("self.?foo.orValue('') == ''").skipped or "").startswith("does not parse")
    assert fake_cel.compile_rule("self.all(x, x.find('^a') == '')").skipped is None
    tree = fake_cel.build({"type": "object", "x-kubernetes-validations": [
        {"rule": "quantity(self.cpu).isGreaterThan(quantity('1'))", "message": "never evaluated"},
        {"rule": "self.cpu != 'none'", "message": "cpu must not be none"}]})
    assert [str(e) for e in fake_cel.validate(tree, {"cpu": "none"})] == [
        '<nil>: Invalid value: "object": cpu must not be none']


def test_a_rule_that_cannot_be_evaluated_is_422_like_the_server() -> None:
    tree = fake_cel.build({"type": "object", "properties": {"spec": {"type": "object", "x-kubernetes-validations": [
        {"rule": "self.count >= 0", "message": "count must be >= 0"}]}}})
    (error,) = fake_cel.validate(tree, {"spec": {}})
    assert error.field == "spec"
    assert "evaluating rule: self.count >= 0" in str(error)
    (error,) = fake_cel.validate(tree, {"spec": {"count": -1}})
    assert str(error) == 'spec: Invalid value: "object": count must be >= 0'
    assert fake_cel.validate(tree, {"spec": {"count": 1}}) == []


# ---------------------------------------------------------------------------------------------- RBAC


def test_a_request_rbac_yaml_does_not_grant_is_403_and_the_granted_one_passes(
    fake_api: FakeKubeAPI, apps: client.AppsV1Api, core: client.CoreV1Api, api_client: client.ApiClient
) -> None:
    fake_api.expect_refusals()
    fake_api.add("deployments", deployment(NS, "llama"))
    scale = apps.read_namespaced_deployment_scale("llama", NS)  # get deployments/scale: granted
    apps.patch_namespaced_deployment_scale("llama", NS, {"spec": {"replicas": 3}}, _content_type=MERGE_PATCH)
    code, body = refused(apps.replace_namespaced_deployment_scale, "llama", NS, scale)  # update: not granted
    assert code == 403
    assert body == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": f'deployments.apps "llama" is forbidden: User "{SA}" cannot update resource "deployments/scale" '
                   f'in API group "apps" in the namespace "{NS}"',
        "reason": "Forbidden", "details": {"name": "llama", "group": "apps", "kind": "deployments"}, "code": 403,
    }
    code, body = refused(core.list_namespaced_secret, NS)  # never granted (and not even served: RBAC comes first)
    assert (code, body["message"]) == (403, f'secrets is forbidden: User "{SA}" cannot list resource "secrets" in '
                                            f'API group "" in the namespace "{NS}"')
    assert body["details"] == {"kind": "secrets"}
    code, body = refused(core.delete_namespaced_pod, "llama-1", NS)
    assert code == 403
    assert 'cannot delete resource "pods"' in body["message"]
    code, body = raw(api_client, "GET", "/apis/apps/v1/deployments", query=[("watch", "true")])
    assert (code, body["message"]) == (403, f'deployments.apps is forbidden: User "{SA}" cannot watch resource '
                                            '"deployments" in API group "apps" at the cluster scope')
    assert [(r.request.method, r.code) for r in fake_api.denied()] == [
        ("PUT", 403), ("GET", 403), ("DELETE", 403), ("GET", 403)]


def test_nodes_may_be_listed_as_deploy_rbac_grants_and_nothing_more(
    fake_api: FakeKubeAPI, core: client.CoreV1Api
) -> None:
    fake_api.expect_refusals()
    fake_api.add("nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu-1"}})
    assert [metadata(n).name for n in core.list_node().items] == ["gpu-1"]  # list nodes: granted (a pool's GPUs)
    code, body = refused(core.read_node, "gpu-1")  # get: not granted
    assert (code, body["message"]) == (403, f'nodes "gpu-1" is forbidden: User "{SA}" cannot get resource "nodes" in '
                                            'API group "" at the cluster scope')
    code, _ = refused(core.patch_node, "gpu-1", {"metadata": {"labels": {"x": "y"}}})
    assert code == 403


def test_namespace_scope_and_resource_names_follow_the_roles(
    fake_api: FakeKubeAPI, api_client: client.ApiClient, admin: client.AppsV1Api
) -> None:
    fake_api.expect_refusals()
    leases = client.CoordinationV1Api(api_client)
    body = {"metadata": {"name": "predictive-autoscaler"}, "spec": {"holderIdentity": "a",
                                                                     "leaseDurationSeconds": 15}}
    leases.create_namespaced_lease(CONTROLLER_NS, model(client.V1Lease, body))  # Role: create in its own namespace
    leases.read_namespaced_lease("predictive-autoscaler", CONTROLLER_NS)  # get: its own Lease by name
    code, answer = refused(leases.read_namespaced_lease, "someone-else", CONTROLLER_NS)  # resourceNames
    assert code == 403
    assert answer["message"] == (f'leases.coordination.k8s.io "someone-else" is forbidden: User "{SA}" cannot get '
                                 f'resource "leases" in API group "coordination.k8s.io" in the namespace '
                                 f'"{CONTROLLER_NS}"')
    code, _ = refused(leases.create_namespaced_lease, NS, model(client.V1Lease, body))  # bound in its namespace only
    assert code == 403
    placeholder = deployment(CONTROLLER_NS, "headroom-gpu")
    placeholder.pop("status")
    apps = client.AppsV1Api(api_client)
    apps.create_namespaced_deployment(CONTROLLER_NS, model(client.V1Deployment, placeholder))  # headroom Role: there
    elsewhere = copy.deepcopy(placeholder)
    elsewhere["metadata"]["namespace"] = NS
    code, answer = refused(apps.create_namespaced_deployment, NS, model(client.V1Deployment, elsewhere))
    assert code == 403
    assert answer["message"] == (f'deployments.apps is forbidden: User "{SA}" cannot create resource "deployments" '
                                 f'in API group "apps" in the namespace "{NS}"')
    admin.create_namespaced_deployment(NS, model(client.V1Deployment, elsewhere))  # an admin is never refused
    assert fake_api.get("deployments", NS, "headroom-gpu") is not None
    with fake_client(fake_api, "a-token-nobody-issued") as unknown:
        code, answer = refused(client.AppsV1Api(unknown).list_deployment_for_all_namespaces)
    assert (code, answer["reason"]) == (401, "Unauthorized")


def test_the_rbac_model_reads_bindings_like_the_authorizer() -> None:
    rbac = Rbac.from_documents([
        {"kind": "ClusterRole", "metadata": {"name": "reader"},
         "rules": [{"apiGroups": [""], "resources": ["pods", "*/status"], "verbs": ["get", "list"]}]},
        {"kind": "RoleBinding", "metadata": {"name": "b", "namespace": "team"},
         "roleRef": {"kind": "ClusterRole", "name": "reader"},
         "subjects": [{"kind": "ServiceAccount", "name": "predictive-autoscaler",
                       "namespace": "predictive-autoscaler"}]},
        {"kind": "ClusterRoleBinding", "metadata": {"name": "g"}, "roleRef": {"kind": "ClusterRole", "name": "reader"},
         "subjects": [{"kind": "Group", "name": "auditors"}]},
    ])

    def allowed(method: str, path: str, user: Any = CONTROLLER) -> bool:
        return rbac.allows(user, request_info(method, path, {}))

    assert allowed("GET", "/api/v1/namespaces/team/pods")  # a ClusterRole bound in one namespace...
    assert not allowed("GET", "/api/v1/namespaces/other/pods")  # ...grants there only
    assert not allowed("GET", "/api/v1/pods")  # nor across namespaces
    assert allowed("GET", "/api/v1/namespaces/team/pods/p/status")  # */status
    assert not allowed("PATCH", "/api/v1/namespaces/team/pods/p")
    assert allowed("GET", "/apis/apps/v1")  # discovery: every authenticated user
    auditor = User("jane", ("auditors", "system:authenticated"))
    assert allowed("GET", "/api/v1/pods", auditor)
    assert not allowed("GET", "/api/v1/pods", User("bob"))
    # the real manifests: what the controller needs is granted, a neighbour's is not
    real = Rbac.from_manifest()
    assert real.allows(CONTROLLER, request_info("PATCH", "/apis/apps/v1/namespaces/x/deployments/d/scale", {}))
    assert not real.allows(CONTROLLER, request_info("DELETE", "/apis/apps/v1/namespaces/x/deployments/d", {}))
    assert real.allows(CONTROLLER, request_info("DELETE", f"/apis/apps/v1/namespaces/{CONTROLLER_NS}/deployments/d",
                                                {}))


# ---------------------------------------------------------------------------------------------- Status bodies


def test_stale_resource_version_is_409_conflict_with_the_servers_status(
    pools: FakeKubeAPI, custom: client.CustomObjectsApi, api_client: client.ApiClient
) -> None:
    stored = pools.get("nodepools.karpenter.sh", "", "gpu")
    assert stored is not None
    stale = stored["metadata"]["resourceVersion"]
    custom.patch_cluster_custom_object("karpenter.sh", "v1", "nodepools", "gpu",
                                       {"spec": {"limits": {"nvidia.com/gpu": "24"}}}, _content_type=MERGE_PATCH)
    code, body = refused(custom.patch_cluster_custom_object, "karpenter.sh", "v1", "nodepools", "gpu",
                         {"metadata": {"resourceVersion": stale}, "spec": {"limits": {"nvidia.com/gpu": "8"}}},
                         _content_type=MERGE_PATCH)
    assert code == 409
    assert body == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": 'Operation cannot be fulfilled on nodepools.karpenter.sh "gpu": the object has been modified; '
                   "please apply your changes to the latest version and try again",
        "reason": "Conflict", "details": {"name": "gpu", "group": "karpenter.sh", "kind": "nodepools"}, "code": 409,
    }
    leases = client.CoordinationV1Api(api_client)
    body_ = {"metadata": {"name": "predictive-autoscaler"}, "spec": {"holderIdentity": "a"}}
    created = leases.create_namespaced_lease(CONTROLLER_NS, model(client.V1Lease, body_))
    assert created.metadata is not None
    version = created.metadata.resource_version
    code, body = refused(leases.create_namespaced_lease, CONTROLLER_NS, model(client.V1Lease, body_))
    assert (code, body["reason"], body["message"], body["details"]) == (
        409, "AlreadyExists", 'leases.coordination.k8s.io "predictive-autoscaler" already exists',
        {"name": "predictive-autoscaler", "group": "coordination.k8s.io", "kind": "leases"})
    leases.replace_namespaced_lease("predictive-autoscaler", CONTROLLER_NS, model(client.V1Lease, {
        "metadata": {"name": "predictive-autoscaler", "resourceVersion": version}, "spec": {"holderIdentity": "b"}}))
    stale = model(client.V1Lease, {"metadata": {"name": "predictive-autoscaler", "resourceVersion": version},
                                   "spec": {"holderIdentity": "c"}})
    code, body = refused(leases.replace_namespaced_lease, "predictive-autoscaler", CONTROLLER_NS, stale)
    assert (code, body["reason"], body["details"]) == (
        409, "Conflict", {"name": "predictive-autoscaler", "group": "coordination.k8s.io", "kind": "leases"})
    code, body = refused(client.AppsV1Api(api_client).read_namespaced_deployment, "ghost", NS)
    assert (code, body["reason"], body["message"], body["details"]) == (
        404, "NotFound", 'deployments.apps "ghost" not found',
        {"name": "ghost", "group": "apps", "kind": "deployments"})


def test_the_fixture_check_sees_what_the_fake_refused() -> None:
    """The ``fake_api`` fixture fails a test on what ``unexpected()`` lists: a refusal must show up there."""
    fake = FakeKubeAPI()
    fake.start()
    try:
        with fake_client(fake) as api:
            with pytest.raises(ApiException):
                client.CoreV1Api(api).list_namespaced_secret(NS)
            assert raw(api, "POST", f"/api/v1/namespaces/{NS}/events", event(colour="red"))[0] == 201
    finally:
        fake.stop()
    problems = fake.unexpected()
    assert len(problems) == 2
    assert problems[0].startswith(f"403 Forbidden for GET /api/v1/namespaces/{NS}/secrets as {SA}")
    assert problems[1] == f'Warning for POST /api/v1/namespaces/{NS}/events: unknown field "colour" (dropped)'
    fake.expect_refusals()
    assert fake.unexpected() == []


@pytest.fixture
def quiet_fake() -> Iterator[FakeKubeAPI]:
    fake = FakeKubeAPI(rbac=None)
    fake.start()
    yield fake
    fake.stop()


def test_rbac_can_be_turned_off(quiet_fake: FakeKubeAPI) -> None:
    with fake_client(quiet_fake) as api:
        assert client.CoreV1Api(api).list_namespaced_event(NS).items == []
        with pytest.raises(ApiException) as err:
            client.CoreV1Api(api).list_namespaced_secret(NS)  # authorized now: the fake just does not serve it
    assert err.value.status == 404


def test_a_horizontalpodautoscaler_is_checked_and_only_listed_by_the_controller(
    fake_api: FakeKubeAPI, admin_client: client.ApiClient, api_client: client.ApiClient
) -> None:
    fake_api.expect_refusals()
    path = "/apis/autoscaling/v2/namespaces/ml/horizontalpodautoscalers"
    broken = hpa("ml", "broken", "llama")
    del broken["spec"]["scaleTargetRef"]
    code, body = raw(admin_client, "POST", path, broken)
    assert code == 422
    assert body["message"] == ('HorizontalPodAutoscaler.autoscaling "broken" is invalid: spec.scaleTargetRef: '
                               "Required value")
    code, body = raw(api_client, "POST", path, hpa("ml", "mine", "llama"))
    assert code == 403
    assert body["message"] == ('horizontalpodautoscalers.autoscaling is forbidden: User "system:serviceaccount:'
                               'predictive-autoscaler:predictive-autoscaler" cannot create resource '
                               '"horizontalpodautoscalers" in API group "autoscaling" in the namespace "ml"')
    assert raw(admin_client, "POST", path, hpa("ml", "cpu", "llama"))[0] == 201
    code, listed = raw(api_client, "GET", "/apis/autoscaling/v2/horizontalpodautoscalers")
    assert code == 200
    assert [(o["kind"], o["metadata"]["name"]) for o in listed["items"]] == [("HorizontalPodAutoscaler", "cpu")]
