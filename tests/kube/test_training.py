"""TrainingReader over real HTTP: Kueue Workloads and Volcano PodGroups come back as raw API JSON, paged,
namespace-confined, and a missing CRD is an empty answer with a note (not a crash); other errors are raised.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from autoscaler.adapters.kube import KubeReadError
from autoscaler.adapters.training import KUEUE, VOLCANO, TrainingReader
from autoscaler.ports import TrainingGangs
from tests.kube.fakeapi import FakeKubeAPI, load_crd, schema_errors
from tests.shared import require_shared

CRDS = require_shared("crds")  # the real CRDs, from ../shared/crds; without them the module skips
KUEUE_CRD = CRDS / "kueue.x-k8s.io_workloads.yaml"
VOLCANO_CRD = CRDS / "scheduling.volcano.sh_podgroups.yaml"


def schema(path: Path, version: str) -> dict[str, Any]:
    (crd,) = [c for c in load_crd(path) if c.version == version]
    assert crd.schema is not None
    return crd.schema


def workload(namespace: str, name: str, *, gpus: int = 8, count: int = 4, admitted: bool = True) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "Workload",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "queueName": "gpu-queue",
            "priorityClassName": "training-low",
            "priority": 50,  # Kueue copies the class's value; the CRD's CEL rule wants it with priorityClassName
            "podSets": [
                {
                    "name": "workers",
                    "count": count,
                    "template": {
                        "spec": {
                            "containers": [
                                {
                                    "name": "trainer",
                                    "image": "nvcr.io/nvidia/pytorch:24.05-py3",
                                    "resources": {"requests": {"nvidia.com/gpu": str(gpus)},
                                                  "limits": {"nvidia.com/gpu": str(gpus)}},
                                }
                            ]
                        }
                    },
                }
            ],
        },
    }
    if admitted:
        obj["status"] = {
            "admission": {
                "clusterQueue": "gpu-cluster-queue",
                "podSetAssignments": [{"name": "workers", "count": count, "flavors": {"nvidia.com/gpu": "h100"}}],
            }
        }
    assert schema_errors(obj, schema(KUEUE_CRD, "v1beta1"), strict=False) == []
    return obj


def podgroup(namespace: str, name: str, *, min_member: int = 8, gpus: int = 64) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"minMember": min_member, "minResources": {"nvidia.com/gpu": str(gpus)}, "queue": "training"},
        "status": {"phase": "Running", "running": min_member},
    }
    assert schema_errors(obj, schema(VOLCANO_CRD, "v1beta1"), strict=True) == []
    return obj


@pytest.fixture
def reader(api_client: client.ApiClient) -> TrainingReader:
    return TrainingReader(api_client)


def test_reader_satisfies_the_port(reader: TrainingReader) -> None:
    port: TrainingGangs = reader
    assert port is reader


def test_workloads_and_podgroups_come_back_as_api_json(fake_api: FakeKubeAPI, reader: TrainingReader) -> None:
    fake_api.install_crd(KUEUE_CRD)
    fake_api.install_crd(VOLCANO_CRD)
    stored = [workload("research", "llm-pretrain"), workload("vision", "vit", gpus=1, count=2, admitted=False)]
    for w in stored:
        fake_api.add("workloads.kueue.x-k8s.io", w)
    fake_api.add("podgroups.scheduling.volcano.sh", podgroup("research", "rl-gang"))

    kueue = reader.list_kueue_workloads()
    assert (kueue.api_version, kueue.kind, kueue.installed, kueue.note) == (
        "kueue.x-k8s.io/v1beta1", "Workload", True, None
    )
    assert [(w["metadata"]["namespace"], w["metadata"]["name"]) for w in kueue.items] == [
        ("research", "llm-pretrain"), ("vision", "vit")
    ]
    first = dict(kueue.items[0])
    assert first["apiVersion"] == "kueue.x-k8s.io/v1beta1"
    assert first["kind"] == "Workload"
    assert first["spec"] == stored[0]["spec"]  # raw: nothing parsed, renamed or dropped
    assert first["status"] == stored[0]["status"]
    assert "status" not in kueue.items[1]
    (call,) = fake_api.calls("GET", r"workloads")
    assert call.path == "/apis/kueue.x-k8s.io/v1beta1/workloads"
    assert call.query["limit"] == ["500"]

    volcano = reader.list_volcano_podgroups()
    (pg,) = volcano.items
    assert (volcano.api_version, volcano.kind) == ("scheduling.volcano.sh/v1beta1", "PodGroup")
    assert pg["spec"] == {"minMember": 8, "minResources": {"nvidia.com/gpu": "64"}, "queue": "training"}
    assert fake_api.calls("GET", r"podgroups")[0].path == "/apis/scheduling.volcano.sh/v1beta1/podgroups"


def test_missing_crds_give_an_empty_answer_with_a_note(fake_api: FakeKubeAPI, reader: TrainingReader) -> None:
    kueue = reader.list_kueue_workloads()
    volcano = reader.list_volcano_podgroups()
    assert (kueue.items, kueue.installed) == ((), False)
    assert kueue.note is not None
    assert "kueue.x-k8s.io/v1beta1 workloads is not served" in kueue.note
    assert "Kueue" in kueue.note
    assert (volcano.items, volcano.installed) == ((), False)
    assert volcano.note is not None
    assert "Volcano" in volcano.note
    # A CRD that serves only another version is "not installed" for the version we read, too.
    fake_api.install_crd(KUEUE_CRD, versions=("v1beta2",))
    assert reader.list_kueue_workloads().installed is False


def test_an_installed_crd_with_no_objects_is_installed_and_empty(fake_api: FakeKubeAPI, reader: TrainingReader) -> None:
    fake_api.install_crd(VOLCANO_CRD)
    answer = reader.list_volcano_podgroups()
    assert (answer.items, answer.installed, answer.note) == ((), True, None)


@pytest.mark.parametrize(("status", "message"), [(403, "HTTP 403 Forbidden"), (500, "HTTP 500")])
def test_other_errors_are_raised_not_mistaken_for_absence(
    fake_api: FakeKubeAPI, reader: TrainingReader, status: int, message: str
) -> None:
    fake_api.install_crd(KUEUE_CRD)
    fake_api.fail("GET", r"/workloads$", status)
    with pytest.raises(KubeReadError, match=rf"list kueue.x-k8s.io/v1beta1 workloads in all namespaces: {message}"):
        reader.list_kueue_workloads()


def test_unreachable_server_is_a_read_error() -> None:
    from tests.servers import free_port

    cfg = client.Configuration()
    cfg.host = f"http://127.0.0.1:{free_port()}"
    cfg.retries = 0
    with client.ApiClient(cfg) as api, pytest.raises(KubeReadError, match="cannot reach the API server"):
        TrainingReader(api, request_timeout_seconds=2).list_volcano_podgroups()


def test_pages_are_followed(fake_api: FakeKubeAPI, api_client: client.ApiClient) -> None:
    fake_api.install_crd(VOLCANO_CRD)
    for i in range(5):
        fake_api.add("podgroups.scheduling.volcano.sh", podgroup("research", f"pg{i}"))
    answer = TrainingReader(api_client, page_size=2).list_volcano_podgroups()
    assert [p["metadata"]["name"] for p in answer.items] == [f"pg{i}" for i in range(5)]
    assert [c.query.get("continue") for c in fake_api.calls("GET", r"podgroups")] == [None, ["2"], ["4"]]


def test_namespaces_confine_the_reads(fake_api: FakeKubeAPI, api_client: client.ApiClient) -> None:
    fake_api.install_crd(KUEUE_CRD)
    for ns in ("research", "vision", "secret-lab"):
        fake_api.add("workloads.kueue.x-k8s.io", workload(ns, "job"))
    answer = TrainingReader(api_client, namespaces=["vision", "research", "vision"]).list_kueue_workloads()
    assert [w["metadata"]["namespace"] for w in answer.items] == ["research", "vision"]
    assert [c.path for c in fake_api.calls("GET", r"workloads")] == [
        "/apis/kueue.x-k8s.io/v1beta1/namespaces/research/workloads",
        "/apis/kueue.x-k8s.io/v1beta1/namespaces/vision/workloads",
    ]


def test_constants_match_the_shipped_crds() -> None:
    for path, (group, version, plural, kind) in ((KUEUE_CRD, KUEUE), (VOLCANO_CRD, VOLCANO)):
        crds = {c.version: c for c in load_crd(path)}
        assert version in crds
        assert (crds[version].group, crds[version].plural, crds[version].kind) == (group, plural, kind)


@pytest.mark.kube
def test_real_server_lists_or_reports_absence(real_api_client: client.ApiClient) -> None:
    reader = TrainingReader(real_api_client)
    for answer in (reader.list_kueue_workloads(), reader.list_volcano_podgroups()):
        if answer.installed:
            assert answer.note is None
            assert all(item["kind"] == answer.kind for item in answer.items)
        else:
            assert answer.items == ()
            assert answer.note is not None
