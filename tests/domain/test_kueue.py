"""Whether Kueue can admit a pending Workload (its LocalQueue, its ClusterQueue, the GPU quota there), from
CRD-valid LocalQueues and ClusterQueues, and which gangs nodes are held for (none for one Kueue will not admit)."""

from __future__ import annotations

from functools import cache
from typing import Any

import jsonschema
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from autoscaler.domain.gangs import Gang
from autoscaler.domain.kueue import KueueQueues, admission_block, parse_queues
from autoscaler.domain.money import gang_headroom
from tests.shared import require_shared

CRDS = require_shared("crds")  # the examples are validated at collection: without the CRDs, the module skips
NOW = 1_700_000_000


@cache
def validator(kind: str) -> Any:
    crd = yaml.safe_load((CRDS / f"kueue.x-k8s.io_{kind}.yaml").read_text())
    (ver,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1beta1"]
    schema = ver["schema"]["openAPIV3Schema"]
    return jsonschema.validators.validator_for(schema)(schema)


def local_queue(namespace: str, name: str, cluster_queue: str, *, stop: str | None = None) -> dict[str, Any]:
    obj: dict[str, Any] = {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "LocalQueue",
                           "metadata": {"namespace": namespace, "name": name},
                           "spec": {"clusterQueue": cluster_queue}}
    if stop:
        obj["spec"]["stopPolicy"] = stop
    validator("localqueues").validate(obj)
    return obj


def cluster_queue(name: str, gpus: int | None, *, reserved: int = 0, cohort: str | None = None,
                  borrowing: int | None = None, stop: str | None = None) -> dict[str, Any]:
    resources: list[dict[str, Any]] = [{"name": "cpu", "nominalQuota": "100"}]
    if gpus is not None:
        gpu: dict[str, Any] = {"name": "nvidia.com/gpu", "nominalQuota": str(gpus)}
        if borrowing is not None:
            gpu["borrowingLimit"] = str(borrowing)
        resources.append(gpu)
    obj: dict[str, Any] = {
        "apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ClusterQueue", "metadata": {"name": name},
        "spec": {"namespaceSelector": {},
                 "resourceGroups": [{"coveredResources": [r["name"] for r in resources],
                                     "flavors": [{"name": "default", "resources": resources}]}]},
        "status": {"flavorsReservation": [{"name": "default", "resources": [
            {"name": "nvidia.com/gpu", "total": str(reserved), "borrowed": "0"}]}]},
    }
    if cohort:
        obj["spec"]["cohort"] = cohort
    if stop:
        obj["spec"]["stopPolicy"] = stop
    validator("clusterqueues").validate(obj)
    return obj


def workload(gpus: int = 16, *, queue: str | None = "gpu-queue", admitted: bool = False, name: str = "ft") -> Gang:
    return Gang("Workload", "training", name, gpus, 2, admitted, 50, team="ml", nodepool="p4d", queue=queue)


def queues(*cqs: dict[str, Any], lqs: tuple[dict[str, Any], ...] | None = None) -> KueueQueues:
    parsed, problems = parse_queues(lqs if lqs is not None else (local_queue("training", "gpu-queue", "gpu"),), cqs)
    assert problems == []
    return parsed


def test_a_workload_kueue_can_admit_now_is_not_blocked() -> None:
    assert admission_block(workload(), queues(cluster_queue("gpu", 32))) is None
    assert admission_block(workload(admitted=True), KueueQueues()) is None  # admitted: nothing to check
    podgroup = Gang("PodGroup", "training", "pg", 16, 2, False, 50)
    assert admission_block(podgroup, KueueQueues()) is None  # not Kueue's


@pytest.mark.parametrize(("gang", "qs", "why"), [
    (workload(queue=None), (cluster_queue("gpu", 32),), "no spec.queueName"),
    (workload(), (), "LocalQueue training/gpu-queue does not exist"),
    (workload(queue="other"), (cluster_queue("gpu", 32),), "LocalQueue training/other does not exist"),
    (workload(), (cluster_queue("cpu-only", 8),), "ClusterQueue gpu (of LocalQueue training/gpu-queue) does not exist"),
    (workload(), (cluster_queue("gpu", None),), "ClusterQueue gpu has no nvidia.com/gpu quota"),
    (workload(), (cluster_queue("gpu", 8),), "ClusterQueue gpu can admit at most 8 GPU(s)"),
    (workload(), (cluster_queue("gpu", 32, reserved=24),), "ClusterQueue gpu has 8 of 32 GPU(s) free"),
    (workload(), (cluster_queue("gpu", 32, stop="Hold"),), "ClusterQueue gpu is stopped"),
])
def test_why_kueue_would_not_admit_a_workload(gang: Gang, qs: tuple[dict[str, Any], ...], why: str) -> None:
    lqs = (local_queue("training", "gpu-queue", "gpu"),) if qs else ()  # no queues at all: no LocalQueue either
    got = admission_block(gang, queues(*qs, lqs=lqs))
    assert got is not None
    assert got.startswith(why), got


def test_a_stopped_local_queue_admits_nothing() -> None:
    qs = queues(cluster_queue("gpu", 32), lqs=(local_queue("training", "gpu-queue", "gpu", stop="HoldAndDrain"),))
    assert admission_block(workload(), qs) == "LocalQueue training/gpu-queue is stopped"


def test_a_cohort_lends_its_unreserved_quota_up_to_the_borrowing_limit() -> None:
    lender = cluster_queue("lender", 16, cohort="all")
    assert admission_block(workload(), queues(cluster_queue("gpu", 8, cohort="all"), lender)) is None
    capped = queues(cluster_queue("gpu", 8, cohort="all", borrowing=4), lender)
    assert admission_block(workload(), capped) == ("ClusterQueue gpu can admit at most 12 GPU(s) (nvidia.com/gpu "
                                                   "quota), the gang needs 16: never admitted")
    busy = queues(cluster_queue("gpu", 8, cohort="all"), cluster_queue("lender", 16, cohort="all", reserved=12))
    assert admission_block(workload(), busy) == ("ClusterQueue gpu has 12 of 24 GPU(s) free, the gang needs 16: it "
                                                 "waits for quota")


def test_unreadable_queues_are_reported_and_skipped() -> None:
    bad = {"metadata": {"name": "gpu"}, "spec": {"resourceGroups": [{"flavors": [{"name": "f", "resources": [
        {"name": "nvidia.com/gpu", "nominalQuota": "lots"}]}]}]}}
    parsed, problems = parse_queues([{"metadata": {"namespace": "training", "name": "q"}, "spec": {}}], [bad])
    assert parsed.local == {}
    assert parsed.cluster == {}
    assert problems[0] == "LocalQueue training/q: needs metadata.namespace, metadata.name and spec.clusterQueue"
    assert problems[1].startswith("ClusterQueue gpu: spec.resourceGroups[0].flavors[0].resources[0].nominalQuota")


# ---------------------------------------------------------------------------------------------- gang headroom


def test_nodes_are_held_only_for_gangs_kueue_can_admit_and_only_for_a_limited_time() -> None:
    ok, lost, running = workload(name="ok"), workload(name="lost", queue="missing"), workload(name="run", admitted=True)
    qs = queues(cluster_queue("gpu", 64))
    got = gang_headroom([ok, lost, running], qs, NOW, {}, 7200)
    assert got.held == (ok, running)
    assert got.blocked == {lost.key: "LocalQueue training/missing does not exist"}
    assert got.expired == ()
    # Queues not served: not checked. Queues unreadable: no nodes for pending Workloads (admitted ones still count).
    assert gang_headroom([ok, lost], None, NOW, {}, 7200).held == (ok, lost)
    unread = gang_headroom([ok, running], "Kueue's queues could not be read: 503", NOW, {}, 7200)
    assert unread.held == (running,)
    assert unread.blocked == {ok.key: "Kueue's queues could not be read: 503"}
    # Held since NOW - 2 h: at the limit still held, past it released (and said why).
    assert gang_headroom([ok], qs, NOW, {ok.key: NOW - 7200}, 7200).held == (ok,)
    late = gang_headroom([ok], qs, NOW + 1, {ok.key: NOW - 7200}, 7200)
    assert (late.held, late.expired) == ((), (ok,))
    assert "has not started: released after 2.0 h" in late.blocked[ok.key]
    # An admitted gang never expires (its pods request the GPUs).
    assert gang_headroom([running], qs, NOW, {running.key: NOW - 10**6}, 7200).held == (running,)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 64), st.sampled_from(["gpu-queue", "missing", None]), st.booleans()),
                max_size=6),
       st.integers(0, 128), st.integers(0, 128))
def test_no_headroom_is_held_for_a_gang_kueue_cannot_admit(
    specs: list[tuple[int, str | None, bool]], quota: int, reserved: int
) -> None:
    gangs = [workload(gpus, queue=queue, admitted=admitted, name=f"g{i}")
             for i, (gpus, queue, admitted) in enumerate(specs)]
    qs = queues(cluster_queue("gpu", quota, reserved=min(reserved, quota)))
    got = gang_headroom(gangs, qs, NOW, {}, 7200)
    for g in got.held:
        assert g.admitted or admission_block(g, qs) is None
        assert g.admitted or (g.queue == "gpu-queue" and g.gpus <= quota - min(reserved, quota))
    assert {g.key for g in got.held} | set(got.blocked) == {g.key for g in gangs}
