"""The model of the ReplicaSet and Deployment controllers (``tests/kube/replicaset_model.py``) against Kubernetes'
own documented examples, so the scale-down tests that run it assert on what a real cluster would delete."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from tests.kube.conftest import T0, deployment, pod
from tests.kube.fakeapi import FakeKubeAPI
from tests.kube.replicaset_model import (
    DELETION_COST,
    DeploymentModel,
    ReplicaSetState,
    pods_to_delete,
    proportional_sizes,
    ranked_for_deletion,
)


def rs_pod(name: str, *, rs: str = "web-aaaa", ready_ago: float | None = 3600.0, node: str | None = "n1",
           cost: int | None = None, phase: str = "Running", created_ago: float = 7200.0,
           restarts: int = 0) -> dict[str, Any]:
    ready_at = None if ready_ago is None else T0 - timedelta(seconds=ready_ago)
    obj = pod("ml", name, "web", created=T0 - timedelta(seconds=created_ago), ready_at=ready_at, phase=phase,
              restarts=restarts)
    obj["metadata"]["uid"] = name
    obj["metadata"]["labels"]["pod-template-hash"] = rs.rsplit("-", 1)[1]
    obj["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": rs,
                                           "uid": rs, "controller": True}]
    if node is not None:
        obj["spec"]["nodeName"] = node
    if cost is not None:
        obj["metadata"]["annotations"] = {DELETION_COST: str(cost)}
    return obj


def names(pods: list[dict[str, Any]]) -> list[str]:
    return [p["metadata"]["name"] for p in pods]


def test_the_ranking_follows_active_pods_with_ranks() -> None:
    """Unassigned, then Pending, then not Ready, then the lowest deletion cost, then doubled up on a node, then
    the most recently Ready, then more restarts, then the newest."""
    pods = [
        rs_pod("old", ready_ago=20_000, node="n1"),
        rs_pod("recent", ready_ago=100, node="n2"),
        rs_pod("cheap", ready_ago=20_000, node="n3", cost=-5),
        rs_pod("notready", ready_ago=None, node="n4"),
        rs_pod("pending", ready_ago=None, node="n5", phase="Pending"),
        rs_pod("unassigned", ready_ago=None, node=None, phase="Pending"),
        rs_pod("dear", ready_ago=10, node="n6", cost=10),
    ]
    order = names(ranked_for_deletion(pods, pods, T0))
    assert order == ["unassigned", "pending", "notready", "cheap", "recent", "old", "dear"]


def test_a_pod_doubled_up_on_a_node_goes_before_the_ready_time_decides() -> None:
    pods = [rs_pod("alone", ready_ago=100, node="n1"), rs_pod("shared1", ready_ago=20_000, node="n2"),
            rs_pod("shared2", ready_ago=30_000, node="n2", rs="web-bbbb")]
    assert names(ranked_for_deletion(pods[:2], pods, T0)) == ["shared1", "alone"]


def test_ready_times_in_the_same_power_of_two_tie_and_the_uid_decides() -> None:
    """LogarithmicScaleDown: 3000 s and 3500 s since Ready are the same bucket (2^41 ns): not the more recent
    one first, but the lower UID."""
    pods = [rs_pod("b-recent", ready_ago=3000), rs_pod("a-older", ready_ago=3500)]
    assert names(ranked_for_deletion(pods, pods, T0)) == ["a-older", "b-recent"]
    assert names(pods_to_delete(pods, 2, pods, T0)) == ["b-recent", "a-older"], "all of them: not sorted"


def test_proportional_scaling_as_the_deployment_documentation_shows_it() -> None:
    """kubernetes.io, Deployments, "Proportional scaling": 10 replicas, maxSurge 3, a rollout stuck with 8 old and
    5 new pods; scaled to 15, the 5 more go 3 to the old ReplicaSet and 2 to the new one."""
    old = ReplicaSetState("web-old", 8, 13, 0.0)
    new = ReplicaSetState("web-new", 5, 13, 100.0)
    assert proportional_sizes([old, new], 15, 3, 13) == {"web-old": 11, "web-new": 7}


def test_a_scale_down_during_a_rollout_cuts_every_replicaset_and_can_remove_more_pods_than_replicas() -> None:
    """6 replicas (maxSurge 25% = 2): 5 old and 3 new pods. Scaled to 4 (maxSurge 1), the allowed size drops from 8
    to 5: three pods go for a cut of two replicas, from both ReplicaSets."""
    old = ReplicaSetState("web-old", 5, 8, 0.0)
    new = ReplicaSetState("web-new", 3, 8, 100.0)
    sizes = proportional_sizes([old, new], 4, 1, 8)
    assert sum(sizes.values()) == 5
    assert sizes["web-old"] < 5
    assert sizes["web-new"] < 3


def test_one_active_replicaset_gets_the_whole_count() -> None:
    sizes = proportional_sizes([ReplicaSetState("web-old", 0, 4, 0.0), ReplicaSetState("web-new", 4, 5, 1.0)], 2, 1, 4)
    assert sizes == {"web-old": 0, "web-new": 2}


def test_the_model_deletes_on_the_fake_api_server_and_keeps_the_status(fake_api: FakeKubeAPI) -> None:
    fake_api.add("deployments", deployment("ml", "web", replicas=3))
    for p in (rs_pod("web-aaaa-1", ready_ago=10_000, node="n1"), rs_pod("web-aaaa-2", ready_ago=100, node="n2"),
              rs_pod("web-aaaa-3", ready_ago=20_000, node="n3", cost=-1)):
        fake_api.add("pods", p)
    model = DeploymentModel.from_pods(fake_api, "ml", "web", max_surge=1)
    assert model.settle(T0) == []
    dep = fake_api.get("deployments", "ml", "web")
    assert dep is not None
    dep["spec"]["replicas"] = 1
    fake_api.add("deployments", dep)
    assert sorted(model.settle(T0)) == ["web-aaaa-2", "web-aaaa-3"], "the marked pod, then the most recently Ready"
    gone = fake_api.get("pods", "ml", "web-aaaa-3")
    assert gone is not None
    assert gone["metadata"]["deletionTimestamp"]
    after = fake_api.get("deployments", "ml", "web")
    assert after is not None
    assert after["status"]["replicas"] == 1
