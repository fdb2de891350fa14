"""KubeCluster and pods for a scale-down: the plain ``PodView`` of each listed pod (owner ReplicaSet, template hash,
readiness, termination, annotations, labels), the merge patch of the ``pod-deletion-cost`` marks and their label,
the label-selected list that finds every marked pod, and a Deployment's stuck rollout, on the wire."""

from __future__ import annotations

from datetime import timedelta

import pytest
from kubernetes import client

from autoscaler.adapters.kube import MERGE_PATCH, KubeCluster, KubeWriteError
from autoscaler.domain.scaledown import DELETION_COST_ANNOTATION, MARK_ANNOTATION, MARK_LABEL
from tests.kube.conftest import T0, deployment, pod
from tests.kube.fakeapi import FakeKubeAPI


@pytest.fixture
def cluster(api_client: client.ApiClient) -> KubeCluster:
    return KubeCluster(api_client, instance="controller-0", sleep=lambda _: None)


def owned(obj: dict[str, object], rs: str, template_hash: str) -> dict[str, object]:
    meta = obj["metadata"]
    assert isinstance(meta, dict)
    meta["labels"]["pod-template-hash"] = template_hash
    meta["ownerReferences"] = [
        {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": rs, "uid": "u1", "controller": True},
        {"apiVersion": "v1", "kind": "ConfigMap", "name": "not-the-controller", "uid": "u2"},
    ]
    return obj


def test_pod_startups_lists_every_pod_as_a_plain_view(fake_api: FakeKubeAPI, cluster: KubeCluster) -> None:
    ready = owned(pod("ml", "llama-7d9f-aaaaa", "llama", created=T0, ready_at=T0 + timedelta(seconds=90)),
                  "llama-7d9f", "7d9f")
    ready["metadata"]["annotations"] = {DELETION_COST_ANNOTATION: "-1"}  # type: ignore[index]
    ready["spec"]["nodeName"] = "gpu-node-1"  # type: ignore[index]
    leaving = owned(pod("ml", "llama-7d9f-bbbbb", "llama", created=T0, ready_at=T0), "llama-7d9f", "7d9f")
    leaving["metadata"]["deletionTimestamp"] = "2025-03-01T12:10:00Z"  # type: ignore[index]
    for obj in (ready, leaving, pod("ml", "llama-bare", "llama", created=T0)):
        fake_api.add("pods", obj)

    views = {p.name: p for p in cluster.pod_startups("ml", "app=llama", T0 + timedelta(seconds=600)).pods}

    assert set(views) == {"llama-7d9f-aaaaa", "llama-7d9f-bbbbb", "llama-bare"}
    a = views["llama-7d9f-aaaaa"]
    assert (a.owner_replicaset, a.template_hash, a.terminating, a.phase) == ("llama-7d9f", "7d9f", False, "Running")
    assert (a.created, a.ready_since) == (T0.timestamp(), T0.timestamp() + 90)
    assert a.ready
    assert dict(a.annotations) == {DELETION_COST_ANNOTATION: "-1"}
    assert a.node == "gpu-node-1"  # the node it is bound to: a scale-down ranks pods by how full theirs is
    assert views["llama-7d9f-bbbbb"].terminating
    bare = views["llama-bare"]
    assert (bare.owner_replicaset, bare.template_hash, bare.ready_since, bare.node) == (None, None, None, None)


def test_patch_pod_annotations_is_one_merge_patch_without_a_read(fake_api: FakeKubeAPI, cluster: KubeCluster) -> None:
    fake_api.add("pods", pod("ml", "llama-7d9f-aaaaa", "llama", created=T0))
    cluster.patch_pod_annotations("ml", "llama-7d9f-aaaaa", {DELETION_COST_ANNOTATION: "-2", MARK_ANNOTATION: "{}"})
    cluster.patch_pod_annotations("ml", "llama-7d9f-aaaaa", {DELETION_COST_ANNOTATION: None})
    cluster.patch_pod_annotations("ml", "llama-7d9f-aaaaa", {})  # nothing to change: nothing sent

    assert [c.method for c in fake_api.calls(path="/pods/")] == ["PATCH", "PATCH"], "no GET: RBAC grants patch only"
    first, second = fake_api.calls("PATCH", "/pods/")
    assert first.path == "/api/v1/namespaces/ml/pods/llama-7d9f-aaaaa"
    assert first.content_type == MERGE_PATCH
    assert first.body == {"metadata": {"annotations": {DELETION_COST_ANNOTATION: "-2", MARK_ANNOTATION: "{}"}}}
    assert second.body == {"metadata": {"annotations": {DELETION_COST_ANNOTATION: None}}}
    stored = fake_api.get("pods", "ml", "llama-7d9f-aaaaa")
    assert stored is not None
    assert stored["metadata"]["annotations"] == {MARK_ANNOTATION: "{}"}


def test_a_failed_pod_patch_is_a_write_error_naming_the_pod(cluster: KubeCluster) -> None:
    with pytest.raises(KubeWriteError, match=r"annotate pod ml/gone: HTTP 404"):
        cluster.patch_pod_annotations("ml", "gone", {DELETION_COST_ANNOTATION: "-1"})


def test_a_mark_and_its_label_go_in_one_merge_patch(fake_api: FakeKubeAPI, cluster: KubeCluster) -> None:
    fake_api.add("pods", pod("ml", "llama-7d9f-aaaaa", "llama", created=T0))
    cluster.patch_pod_annotations("ml", "llama-7d9f-aaaaa", {DELETION_COST_ANNOTATION: "-1"}, {MARK_LABEL: "true"})
    (patch,) = fake_api.calls("PATCH", "/pods/")
    assert patch.body == {"metadata": {"annotations": {DELETION_COST_ANNOTATION: "-1"}, "labels": {MARK_LABEL: "true"}}}
    stored = fake_api.get("pods", "ml", "llama-7d9f-aaaaa")
    assert stored is not None
    assert stored["metadata"]["labels"] == {"app": "llama", MARK_LABEL: "true"}


def test_marked_pods_are_found_by_one_label_selected_list(fake_api: FakeKubeAPI, cluster: KubeCluster) -> None:
    for ns, name, marked in (("ml", "llama-7d9f-aaaaa", True), ("ml", "llama-7d9f-bbbbb", False),
                             ("research", "chat-1a2b-ccccc", True)):
        obj = owned(pod(ns, name, name.split("-")[0], created=T0, ready_at=T0), name.rsplit("-", 1)[0],
                    name.split("-")[1])
        if marked:
            obj["metadata"]["labels"][MARK_LABEL] = "true"  # type: ignore[index]
        fake_api.add("pods", obj)

    everywhere = cluster.list_marked_pods([])
    assert sorted((p.namespace, p.name) for p in everywhere) == [("ml", "llama-7d9f-aaaaa"),
                                                                 ("research", "chat-1a2b-ccccc")]
    assert all(p.labels[MARK_LABEL] == "true" and p.owner_replicaset is not None for p in everywhere)
    (listed,) = fake_api.calls("GET", r"^/api/v1/pods$")
    assert listed.query["labelSelector"] == [MARK_LABEL]

    confined = cluster.list_marked_pods(["research"])
    assert [p.name for p in confined] == ["chat-1a2b-ccccc"]
    assert fake_api.calls("GET", r"^/api/v1/namespaces/research/pods$")[0].query["labelSelector"] == [MARK_LABEL]


def test_a_rollout_the_deployment_controller_reports_stuck_is_seen(fake_api: FakeKubeAPI, cluster: KubeCluster) -> None:
    stuck = deployment("ml", "llama")
    stuck["status"]["conditions"] = [
        {"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable"},
        {"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded",
         "message": 'ReplicaSet "llama-7d9f" has timed out progressing.'},
    ]
    fake_api.add("deployments", stuck)
    progressing = deployment("ml", "chat")
    progressing["status"]["conditions"] = [{"type": "Progressing", "status": "True", "reason": "ReplicaSetUpdated"}]
    fake_api.add("deployments", progressing)
    views = {v.name: v for v in cluster.list_workloads()}
    assert views["llama"].rollout_stuck == \
        'ProgressDeadlineExceeded: ReplicaSet "llama-7d9f" has timed out progressing.'
    assert views["chat"].rollout_stuck is None
