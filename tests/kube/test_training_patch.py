"""TrainingReader.patch_gang over real HTTP: the merge patch the money stage sends to a scheduled gang (its
planned start; ``spec.active: true`` on a held Workload) lands on the object; a failure is a one-line error."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from kubernetes import client

from autoscaler.adapters.kube import KubeWriteError
from autoscaler.adapters.training import TrainingReader
from tests.kube.fakeapi import FakeKubeAPI
from tests.kube.test_training import KUEUE_CRD, VOLCANO_CRD, podgroup, workload

PLANNED = "predictive-autoscaler.io/planned-start"


def test_a_held_workload_is_activated_and_annotated_by_a_merge_patch(
    fake_api: FakeKubeAPI, api_client: client.ApiClient
) -> None:
    fake_api.install_crd(KUEUE_CRD)
    held = workload("ml", "nightly", admitted=False)
    held["spec"]["active"] = False
    fake_api.add("workloads.kueue.x-k8s.io", held)
    TrainingReader(api_client).patch_gang("Workload", "ml", "nightly", {
        "metadata": {"annotations": {PLANNED: "2026-02-01T03:00:00+00:00"}}, "spec": {"active": True}})
    (call,) = fake_api.calls("PATCH", r"/apis/kueue\.x-k8s\.io/v1beta1/namespaces/ml/workloads/nightly$")
    assert call.content_type == "application/merge-patch+json"
    stored = fake_api.get("workloads.kueue.x-k8s.io", "ml", "nightly")
    assert stored is not None
    assert stored["spec"]["active"] is True
    assert stored["metadata"]["annotations"] == {PLANNED: "2026-02-01T03:00:00+00:00"}
    assert stored["spec"]["podSets"] == held["spec"]["podSets"]  # a merge patch, not a replacement


def test_a_podgroup_gets_its_annotation_and_failures_name_the_object(
    fake_api: FakeKubeAPI, api_client: client.ApiClient
) -> None:
    fake_api.install_crd(VOLCANO_CRD)
    fake_api.add("podgroups.scheduling.volcano.sh", podgroup("ml", "pg"))
    reader = TrainingReader(api_client)
    reader.patch_gang("PodGroup", "ml", "pg", {"metadata": {"annotations": {PLANNED: "x"}}})
    stored = fake_api.get("podgroups.scheduling.volcano.sh", "ml", "pg")
    assert stored is not None
    assert stored["metadata"]["annotations"] == {PLANNED: "x"}
    fake_api.fail("PATCH", r"/podgroups/pg$", 500)
    with pytest.raises(KubeWriteError, match=r"^patch scheduling\.volcano\.sh/v1beta1 podgroups ml/pg: "):
        reader.patch_gang("PodGroup", "ml", "pg", {"metadata": {"annotations": {PLANNED: "y"}}})
    with pytest.raises(KubeWriteError, match="podgroups ml/gone"):
        reader.patch_gang("PodGroup", "ml", "gone", {"metadata": {"annotations": {PLANNED: "y"}}})
    with pytest.raises(ValueError, match="unknown gang kind 'Job'"):
        reader.patch_gang("Job", "ml", "pg", {})


def test_a_gang_event_names_its_workload_or_podgroup_and_is_cut_to_the_servers_limit(
    fake_api: FakeKubeAPI, api_client: client.ApiClient
) -> None:
    reader = TrainingReader(api_client)
    now = datetime(2026, 2, 1, 3, 0, tzinfo=UTC)
    reader.post_gang_event("Workload", "ml", "nightly", "uid-1", "Warning", "GangHeld", "x" * 5000, now)
    reader.post_gang_event("PodGroup", "ml", "pg", "", "Normal", "GangPlaced", "placed at 03:00", now)
    events = {e["reason"]: e for e in fake_api.all("events", "ml")}
    held, placed = events["GangHeld"], events["GangPlaced"]
    assert held["involvedObject"] == {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "Workload",
                                      "name": "nightly", "namespace": "ml", "uid": "uid-1"}
    assert (held["type"], len(held["message"].encode()), held["message"][-3:]) == ("Warning", 1024, "...")
    assert placed["involvedObject"]["apiVersion"] == "scheduling.volcano.sh/v1beta1"
    assert "uid" not in placed["involvedObject"]  # unknown: left out, not sent empty
    assert placed["message"] == "placed at 03:00"
    with pytest.raises(ValueError, match="unknown gang kind 'Job'"):
        reader.post_gang_event("Job", "ml", "j", "", "Normal", "X", "y", now)
    with pytest.raises(ValueError, match="timezone-aware"):
        reader.post_gang_event("Workload", "ml", "nightly", "", "Normal", "X", "y", now.replace(tzinfo=None))
