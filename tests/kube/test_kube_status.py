"""KubeCluster's status object over real HTTP: the ConfigMap beside each Deployment (``autoscaler.domain.status``).

What the wire shows: a write creates or replaces that one ConfigMap (labels, owner reference, ``status.json``) and
never touches the Deployment, so its ReplicaSets' copy of its annotations never changes; a replace carries the
resourceVersion last read or written, a conflict re-reads the object (a field-selected list, no ``get``) and retries;
an unchanged status sends nothing; a ConfigMap of that name that is not ours is never overwritten; the old
annotation goes in one merge patch with null.
"""

from __future__ import annotations

import json

import pytest
from kubernetes import client

from autoscaler.adapters.kube import MERGE_PATCH, KubeCluster, KubeReadError, KubeWriteError
from autoscaler.domain.annotations import STATUS_ANNOTATION
from autoscaler.domain.status import (
    DEPLOYMENT_LABEL,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    STATUS_DATA_KEY,
    STATUS_SELECTOR,
    status_object_name,
)
from tests.kube.conftest import deployment, stored_status
from tests.kube.fakeapi import FakeKubeAPI

CM_PATH = "/api/v1/namespaces/ml/configmaps"
OBJ = "llama-predictive-autoscaler"


def _uid(fake: FakeKubeAPI, name: str = "llama") -> str:
    dep = fake.add("deployments", deployment("ml", name, annotations={"team.io/owner": "alice"}))
    return str(dep["metadata"]["uid"])


def test_a_write_creates_the_deployments_configmap_and_leaves_the_deployment_alone(
    fake_api: FakeKubeAPI, cluster: KubeCluster
) -> None:
    uid = _uid(fake_api)
    before = fake_api.get("deployments", "ml", "llama")
    status = {"desiredReplicas": 5, "forecast": {"p90": 61.5}, "mode": "scale"}

    result = cluster.write_status("ml", "llama", uid, status, None)

    assert result.written
    (create,) = fake_api.writes()
    assert (create.method, create.path) == ("POST", CM_PATH)
    cm = fake_api.get("configmaps", "ml", OBJ)
    assert cm is not None
    assert cm["metadata"]["labels"] == {MANAGED_BY_LABEL: MANAGED_BY, DEPLOYMENT_LABEL: "llama"}
    assert cm["metadata"]["ownerReferences"] == [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "llama",
                                                  "uid": uid, "controller": False, "blockOwnerDeletion": False}]
    assert list(cm["data"]) == [STATUS_DATA_KEY]
    assert stored_status(fake_api, "ml", "llama") == status
    assert (result.stored.name, result.stored.owner_uid) == (OBJ, uid)
    assert result.stored.resource_version == cm["metadata"]["resourceVersion"]
    assert fake_api.get("deployments", "ml", "llama") == before, "the Deployment is not written"


def test_an_unchanged_status_sends_nothing_and_a_changed_one_replaces_with_the_last_version(
    fake_api: FakeKubeAPI, cluster: KubeCluster
) -> None:
    uid = _uid(fake_api)
    status = {"desiredReplicas": 5, "mode": "scale", "steps": [1, 2]}
    first = cluster.write_status("ml", "llama", uid, status, None)
    calls = len(fake_api.requests)

    same = cluster.write_status("ml", "llama", uid, dict(reversed(status.items())), first.stored)
    assert not same.written
    assert same.stored == first.stored
    assert len(fake_api.requests) == calls, "compared with what was last written: no read, no write"

    changed = cluster.write_status("ml", "llama", uid, {**status, "desiredReplicas": 6}, first.stored)
    assert changed.written
    (put,) = fake_api.calls("PUT")
    assert put.path == f"{CM_PATH}/{OBJ}"
    assert put.body["metadata"]["resourceVersion"] == first.stored.resource_version
    assert stored_status(fake_api, "ml", "llama")["desiredReplicas"] == 6
    assert changed.stored.resource_version != first.stored.resource_version
    assert fake_api.calls(path=r"/deployments") == []


def test_a_conflict_re_reads_by_name_and_retries(
    fake_api: FakeKubeAPI, cluster: KubeCluster, sleeps: list[float]
) -> None:
    uid = _uid(fake_api)
    first = cluster.write_status("ml", "llama", uid, {"desiredReplicas": 1}, None)

    def someone_edits(api: FakeKubeAPI) -> None:
        cm = api.objects[("configmaps", "ml", OBJ)]
        api.store_unlocked("configmaps", {**cm, "data": {STATUS_DATA_KEY: '{"edited":true}'}})

    fake_api.before("PUT", rf"/configmaps/{OBJ}$", someone_edits)
    result = cluster.write_status("ml", "llama", uid, {"desiredReplicas": 2}, first.stored)

    assert result.written
    assert [c.method for c in fake_api.calls(path=r"/configmaps")][1:] == ["PUT", "GET", "PUT"]
    (reread,) = fake_api.calls("GET", r"/configmaps$")
    assert reread.query["fieldSelector"] == [f"metadata.name={OBJ}"]
    assert stored_status(fake_api, "ml", "llama") == {"desiredReplicas": 2}
    assert len(sleeps) == 1


def test_conflicts_past_the_bound_are_a_write_error(fake_api: FakeKubeAPI, api_client: client.ApiClient) -> None:
    uid = _uid(fake_api)
    cluster = KubeCluster(api_client, max_conflict_retries=1, sleep=lambda _: None)
    first = cluster.write_status("ml", "llama", uid, {"desiredReplicas": 1}, None)
    fake_api.fail("PUT", rf"/configmaps/{OBJ}$", 409, times=2)
    with pytest.raises(KubeWriteError, match=rf"configmap ml/{OBJ} of deployment ml/llama: HTTP 409.*2 attempts"):
        cluster.write_status("ml", "llama", uid, {"desiredReplicas": 2}, first.stored)


def test_one_deleted_meanwhile_is_created_again(fake_api: FakeKubeAPI, cluster: KubeCluster) -> None:
    uid = _uid(fake_api)
    first = cluster.write_status("ml", "llama", uid, {"desiredReplicas": 1}, None)
    del fake_api.objects[("configmaps", "ml", OBJ)]

    result = cluster.write_status("ml", "llama", uid, {"desiredReplicas": 2}, first.stored)

    assert result.written
    assert [c.method for c in fake_api.calls(path=r"/configmaps")] == ["POST", "PUT", "POST"]
    assert stored_status(fake_api, "ml", "llama") == {"desiredReplicas": 2}


def test_an_existing_object_unknown_to_this_controller_is_taken_over_after_a_re_read(
    fake_api: FakeKubeAPI, api_client: client.ApiClient, cluster: KubeCluster
) -> None:
    """Another replica created it (a standby that took over knows nothing yet): AlreadyExists, re-read, replace."""
    uid = _uid(fake_api)
    KubeCluster(api_client).write_status("ml", "llama", uid, {"desiredReplicas": 1}, None)

    assert not cluster.write_status("ml", "llama", uid, {"desiredReplicas": 1}, None).written
    assert cluster.write_status("ml", "llama", uid, {"desiredReplicas": 3}, None).written
    assert [c.method for c in fake_api.calls(path=r"/configmaps")] == ["POST", "POST", "GET", "POST", "GET", "PUT"]
    assert stored_status(fake_api, "ml", "llama") == {"desiredReplicas": 3}


def test_the_object_of_an_earlier_deployment_of_that_name_is_taken_over(
    fake_api: FakeKubeAPI, cluster: KubeCluster
) -> None:
    """Deleted and created again before the garbage collector came by: same text, new owner, so it is replaced."""
    uid = _uid(fake_api)
    first = cluster.write_status("ml", "llama", "0b1d-earlier", {"desiredReplicas": 1}, None)
    result = cluster.write_status("ml", "llama", uid, {"desiredReplicas": 1}, first.stored)
    assert result.written
    cm = fake_api.get("configmaps", "ml", OBJ)
    assert cm is not None
    assert [o["uid"] for o in cm["metadata"]["ownerReferences"]] == [uid]


def test_a_configmap_of_that_name_that_is_not_ours_is_never_overwritten(
    fake_api: FakeKubeAPI, cluster: KubeCluster
) -> None:
    uid = _uid(fake_api)
    theirs = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": OBJ, "namespace": "ml"},
              "data": {"team": "config"}}
    fake_api.add("configmaps", theirs)

    with pytest.raises(KubeWriteError, match=rf"configmap ml/{OBJ} exists and is not the controller's"):
        cluster.write_status("ml", "llama", uid, {"desiredReplicas": 1}, None)
    stored = fake_api.get("configmaps", "ml", OBJ)
    assert stored is not None
    assert stored["data"] == {"team": "config"}


def test_a_status_with_nan_is_refused_before_sending(fake_api: FakeKubeAPI, cluster: KubeCluster) -> None:
    uid = _uid(fake_api)
    with pytest.raises(ValueError, match="Out of range float"):
        cluster.write_status("ml", "llama", uid, {"forecast": float("nan")}, None)
    assert fake_api.writes() == []


def test_list_statuses_is_one_label_selected_list_of_the_namespace(
    fake_api: FakeKubeAPI, cluster: KubeCluster
) -> None:
    uid = _uid(fake_api)
    other = _uid(fake_api, "mistral")
    cluster.write_status("ml", "llama", uid, {"desiredReplicas": 1}, None)
    cluster.write_status("ml", "mistral", other, {"desiredReplicas": 2}, None)
    fake_api.add("configmaps", {"metadata": {"name": "unrelated", "namespace": "ml"}, "data": {"a": "b"}})
    fake_api.add("configmaps", {"metadata": {"name": "elsewhere-predictive-autoscaler", "namespace": "web",
                                             "labels": {MANAGED_BY_LABEL: MANAGED_BY, DEPLOYMENT_LABEL: "x"}}})

    found = cluster.list_statuses("ml")

    (call,) = fake_api.calls("GET", r"/configmaps$")
    assert call.path == CM_PATH
    assert call.query["labelSelector"] == [STATUS_SELECTOR]
    assert sorted(found) == [OBJ, "mistral-predictive-autoscaler"]
    assert json.loads(found[OBJ].text) == {"desiredReplicas": 1}
    assert found[OBJ].owner_uid == uid


def test_a_failed_list_is_a_read_error(fake_api: FakeKubeAPI, cluster: KubeCluster) -> None:
    fake_api.fail("GET", r"/configmaps$", 500)
    with pytest.raises(KubeReadError, match=r"list configmaps in ml with labels .*HTTP 500"):
        cluster.list_statuses("ml")


def test_the_old_annotation_goes_in_one_merge_patch_with_null(fake_api: FakeKubeAPI, cluster: KubeCluster) -> None:
    fake_api.add("deployments", deployment("ml", "llama", annotations={STATUS_ANNOTATION: '{"desiredReplicas":1}',
                                                                       "team.io/owner": "alice"}))

    cluster.remove_status_annotation("ml", "llama")

    (patch,) = fake_api.writes()
    assert (patch.method, patch.path, patch.content_type) == ("PATCH", "/apis/apps/v1/namespaces/ml/deployments/llama",
                                                              MERGE_PATCH)
    assert patch.body == {"metadata": {"annotations": {STATUS_ANNOTATION: None}}}
    dep = fake_api.get("deployments", "ml", "llama")
    assert dep is not None
    assert STATUS_ANNOTATION not in dep["metadata"]["annotations"]
    assert dep["metadata"]["annotations"]["team.io/owner"] == "alice"


def test_a_long_deployment_name_gets_a_valid_unique_object(fake_api: FakeKubeAPI, cluster: KubeCluster) -> None:
    long_a, long_b = "a" * 240 + "-x", "a" * 240 + "-y"
    uid_a, uid_b = _uid(fake_api, long_a), _uid(fake_api, long_b)
    a = cluster.write_status("ml", long_a, uid_a, {"desiredReplicas": 1}, None)
    b = cluster.write_status("ml", long_b, uid_b, {"desiredReplicas": 2}, None)
    assert a.stored.name != b.stored.name
    assert a.stored.name == status_object_name(long_a)
    assert len(a.stored.name) <= 253
    assert stored_status(fake_api, "ml", long_b) == {"desiredReplicas": 2}
