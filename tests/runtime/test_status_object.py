"""The controller's status lives in a ConfigMap beside each Deployment, not on the Deployment.

Why these tests: the Deployment controller copies a Deployment's annotations onto its ReplicaSet, so a status
written on the Deployment was also a ReplicaSet update every time a decision changed. Here ticks run against the
fake API server and the real Prometheus, and the wire shows what each did: the status object created, replaced
only when the decision changed, owned by its Deployment; the Deployment's own metadata never patched for a status,
whether the decision stayed or changed; the status objects listed once per namespace when Deployments are first
seen, never again in steady state; a conflicting write re-read and retried; a failed list reported, and no status
written over what it would have shown.
"""

from __future__ import annotations

from typing import Any

import pytest

from autoscaler.domain.annotations import PREFIX, STATUS_ANNOTATION
from autoscaler.domain.status import (
    DEPLOYMENT_LABEL,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    STATUS_DATA_KEY,
    status_object_name,
)
from autoscaler.runtime.loop import TickReport
from tests.kube.conftest import stored_status
from tests.kube.fakeapi import FakeKubeAPI, Recorded
from tests.runtime.conftest import FLEET, Rig
from tests.servers import PrometheusServer

pytestmark = pytest.mark.prometheus


@pytest.fixture
def now0(prometheus_server: PrometheusServer) -> int:
    return prometheus_server.now - 1800


def metadata_patches(fake: FakeKubeAPI, since: int = 0) -> list[Recorded]:
    """PATCHes of a Deployment itself (not its scale subresource): its metadata, where the status used to go."""
    return [c for c in fake.requests[since:] if c.method == "PATCH" and "/deployments/" in c.path
            and not c.path.endswith("/scale")]


def configmap_calls(fake: FakeKubeAPI, since: int = 0) -> list[Recorded]:
    return [c for c in fake.requests[since:] if "/configmaps" in c.path]


def written(report: TickReport) -> set[str]:
    return {w.name for w in report.workloads if "status written" in w.actions}


def test_ticks_write_the_status_object_and_never_the_deployments_metadata(rig: Rig, now0: int) -> None:
    fake = rig.fake
    annotations = {(ns, name): dict((fake.get("deployments", ns, name) or {})["metadata"]["annotations"])
                   for ns, name, _, _ in FLEET}

    first = rig.controller.tick(now0)
    assert first.ok, first.errors
    # First sight: one label-selected list per namespace, then one create per Deployment.
    calls = configmap_calls(fake)
    lists = [c for c in calls if c.method == "GET"]
    assert sorted(c.path for c in lists) == ["/api/v1/namespaces/research/configmaps",
                                             "/api/v1/namespaces/serving/configmaps"]
    assert all(c.query["labelSelector"] == [f"{MANAGED_BY_LABEL}={MANAGED_BY},{DEPLOYMENT_LABEL}"] for c in lists)
    assert sorted(c.body["metadata"]["name"] for c in calls if c.method == "POST") == sorted(
        status_object_name(name) for _, name, _, _ in FLEET)
    assert written(first) == {name for _, name, _, _ in FLEET}
    for ns, name, replicas, _ in FLEET:
        dep = fake.get("deployments", ns, name)
        assert dep is not None
        cm = fake.get("configmaps", ns, status_object_name(name))
        assert cm is not None
        # Owned by its Deployment, so the garbage collector deletes it with the Deployment (no delete grant).
        assert cm["metadata"]["ownerReferences"] == [
            {"apiVersion": "apps/v1", "kind": "Deployment", "name": name, "uid": dep["metadata"]["uid"],
             "controller": False, "blockOwnerDeletion": False}]
        assert cm["metadata"]["labels"] == {MANAGED_BY_LABEL: MANAGED_BY, DEPLOYMENT_LABEL: name}
        assert stored_status(fake, ns, name)["currentReplicas"] == replicas

    # The next ticks: whatever each decides, the Deployments' metadata is never written, and the status objects
    # are never read again (each write's answer is what the next compares with).
    mark = len(fake.requests)
    reports = [rig.controller.tick(now0 + 60 * k) for k in (1, 2, 3)]
    assert all(r.ok for r in reports), [r.errors for r in reports]
    assert not [c for c in configmap_calls(fake, mark) if c.method == "GET"]
    # A decision that stayed the same is not written; one that changed is one replace, with the last version.
    unchanged = [name for r in reports for name in {w.name for w in r.workloads} - written(r)]
    assert unchanged, "some tick held a decision"
    puts = [c for c in configmap_calls(fake, mark) if c.method == "PUT"]
    assert len(puts) == sum(len(written(r)) for r in reports)
    assert all(c.body["metadata"]["resourceVersion"] for c in puts)

    # A team changes an input: the decision changes (one more replica at least), the status follows it, and the
    # Deployment is still written only through its scale subresource.
    dep = fake.get("deployments", "serving", "mistral-code")
    assert dep is not None
    dep["metadata"]["annotations"][PREFIX + "min-replicas"] = "3"
    fake.add("deployments", dep)
    annotations[("serving", "mistral-code")][PREFIX + "min-replicas"] = "3"
    mark = len(fake.requests)
    changed = rig.controller.tick(now0 + 240)
    assert changed.ok, changed.errors
    assert "mistral-code" in written(changed)
    assert stored_status(fake, "serving", "mistral-code")["desiredReplicas"] == 3
    assert len([c for c in configmap_calls(fake, mark) if c.method == "PUT"
                and c.path.endswith(status_object_name("mistral-code"))]) == 1

    assert metadata_patches(fake) == [], "no status write touched a Deployment (nor, so, its ReplicaSets)"
    for (ns, name), before in annotations.items():
        after = fake.get("deployments", ns, name)
        assert after is not None
        assert after["metadata"]["annotations"] == before
        assert STATUS_ANNOTATION not in after["metadata"]["annotations"]


def test_a_conflicting_status_write_is_re_read_and_retried(rig: Rig, now0: int) -> None:
    fake = rig.fake
    assert rig.controller.tick(now0).ok
    obj = status_object_name("llama-chat")

    def someone_edits(api: FakeKubeAPI) -> None:
        cm = api.objects[("configmaps", "serving", obj)]
        api.store_unlocked("configmaps", {**cm, "data": {STATUS_DATA_KEY: '{"by":"hand"}'}})

    fake.before("PUT", rf"/configmaps/{obj}$", someone_edits)
    mark = len(fake.requests)
    report = rig.controller.tick(now0 + 60)

    assert report.ok, report.errors
    calls = [(c.method, c.query.get("fieldSelector")) for c in configmap_calls(fake, mark)
             if c.path.endswith(obj) or c.query.get("fieldSelector")]
    assert calls == [("PUT", None), ("GET", [f"metadata.name={obj}"]), ("PUT", None)]
    assert "by" not in stored_status(fake, "serving", "llama-chat")


def test_a_failed_list_defers_that_namespaces_statuses_and_is_reported(rig: Rig, now0: int) -> None:
    """Writing without having read would replace what the status object holds (self-tuning days and all)."""
    fake = rig.fake
    fake.fail("GET", r"^/api/v1/namespaces/serving/configmaps$", 500)

    report = rig.controller.tick(now0)

    assert not report.ok
    (error,) = [e for e in report.errors if "status objects" in e]
    assert error.startswith("listing the status objects in namespace serving failed: ")
    assert rig.metric("predictive_autoscaler_errors_total", {"kind": "kube_read"}) == 1
    assert fake.get("configmaps", "serving", status_object_name("llama-chat")) is None
    assert stored_status(fake, "research", "qwen-eval")["desiredReplicas"] == 1
    assert fake.calls("PATCH", r"/deployments/llama-chat/scale$"), "the plan itself is applied"

    again = rig.controller.tick(now0 + 60)
    assert again.ok, again.errors
    lists: list[Any] = [c.path for c in fake.calls("GET", r"/configmaps$")]
    assert lists.count("/api/v1/namespaces/serving/configmaps") == 2
    assert lists.count("/api/v1/namespaces/research/configmaps") == 1, "a namespace read is not read again"
    assert stored_status(fake, "serving", "llama-chat")["desiredReplicas"] >= 3


def test_an_annotation_a_rollback_copies_back_is_removed_and_not_resumed_from(rig: Rig, now0: int) -> None:
    """``kubectl rollout undo`` copies an old ReplicaSet's annotations onto the Deployment, stale status included."""
    fake = rig.fake
    assert rig.controller.tick(now0).ok
    before = stored_status(fake, "serving", "llama-chat")
    dep = fake.get("deployments", "serving", "llama-chat")
    assert dep is not None
    dep["metadata"]["annotations"][STATUS_ANNOTATION] = '{"mode":"scale","time":"2023-01-01T00:00:00+00:00"}'
    fake.add("deployments", dep)
    mark = len(fake.requests)

    assert rig.controller.tick(now0 + 60).ok

    (patch,) = metadata_patches(fake, mark)
    assert patch.body == {"metadata": {"annotations": {STATUS_ANNOTATION: None}}}
    after = stored_status(fake, "serving", "llama-chat")
    assert after["time"] >= before["time"], "the object was not set back to the annotation's"
    assert STATUS_ANNOTATION not in (fake.get("deployments", "serving", "llama-chat") or {})["metadata"]["annotations"]


def test_a_standby_and_a_dry_run_read_the_status_objects_but_write_none(rig: Rig, now0: int) -> None:
    dep = rig.fake.get("deployments", "serving", "llama-chat")
    assert dep is not None
    dep["metadata"]["annotations"][STATUS_ANNOTATION] = '{"mode":"scale","time":"2023-01-01T00:00:00+00:00"}'
    rig.fake.add("deployments", dep)
    rig.controller.tick(now0, acting=False)
    assert len(rig.fake.calls("GET", r"/configmaps$")) == 2
    rig.controller.dry_run = True
    rig.controller.tick(now0 + 60)
    assert fake_writes(rig.fake) == [], "not even the annotation moves"


def fake_writes(fake: FakeKubeAPI) -> list[Recorded]:
    return [c for c in configmap_calls(fake) if c.method != "GET"] + metadata_patches(fake)
