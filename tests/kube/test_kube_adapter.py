"""KubeCluster over real HTTP: what the official client sends, and how answers become plain views.

The fake API server records every request, so these tests assert on the wire: paths, query strings,
patch content types and bodies, Event payloads, and the retry sequence after injected conflicts.
"""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest
from kubernetes import client

from autoscaler.adapters.kube import (
    MERGE_PATCH,
    KubeCluster,
    KubeConfigError,
    KubeReadError,
    KubeWriteError,
    api_client_from_config,
    render_selector,
)
from autoscaler.domain.annotations import ENABLED_LABEL, STATUS_ANNOTATION, event_payloads, parse_workload
from autoscaler.domain.status import STATUS_DATA_KEY
from autoscaler.ports import Cluster, ScalerView
from tests.kube.conftest import T0, deployment, hpa, pod
from tests.kube.fake_rbac import CONTROLLER
from tests.kube.fakeapi import CONTROLLER_TOKEN, FakeKubeAPI


def test_kube_cluster_satisfies_the_port(cluster: KubeCluster) -> None:
    port: Cluster = cluster  # mypy checks the structural match
    assert port is cluster


def test_list_workloads_filters_by_label_and_returns_plain_views(fake_api: FakeKubeAPI, cluster: KubeCluster) -> None:
    fake_api.add("deployments", deployment("ml", "llama", replicas=3, gpus=2))
    fake_api.add("deployments", deployment("web", "frontend", enabled=False))
    fake_api.add("deployments", deployment("ml", "mistral", replicas=1))

    views = cluster.list_workloads()

    (call,) = fake_api.calls("GET", r"^/apis/apps/v1/deployments$")
    assert call.query["labelSelector"] == [f"{ENABLED_LABEL}=true"]
    assert [(v.namespace, v.name) for v in views] == [("ml", "llama"), ("ml", "mistral")]
    llama = views[0]
    stored = fake_api.get("deployments", "ml", "llama")
    assert stored is not None
    assert llama.uid == stored["metadata"]["uid"]
    assert llama.resource_version == stored["metadata"]["resourceVersion"]
    assert (llama.replicas, llama.ready_replicas) == (3, 2)
    assert llama.selector == "app=llama"
    assert llama.labels[ENABLED_LABEL] == "true"
    assert type(llama.annotations) is dict
    # The template arrives as API JSON (camelCase), which the pure parser reads directly.
    result = parse_workload(llama.namespace, llama.name, llama.labels, llama.annotations, llama.pod_template)
    assert result.spec is not None
    assert result.spec.gpus_per_replica == 2


def test_list_workloads_follows_continue_tokens(fake_api: FakeKubeAPI, api_client: client.ApiClient) -> None:
    for i in range(7):
        fake_api.add("deployments", deployment("ml", f"d{i}", gpus=0))
    views = KubeCluster(api_client, page_size=3).list_workloads()
    assert [v.name for v in views] == [f"d{i}" for i in range(7)]
    pages = fake_api.calls("GET", r"/deployments$")
    assert [p.query.get("continue") for p in pages] == [None, ["3"], ["6"]]
    assert all(p.query["limit"] == ["3"] for p in pages)


def test_list_scalers_reads_every_hpa_and_its_target_as_the_controller_may(
    fake_api: FakeKubeAPI, admin_client: client.ApiClient, api_client: client.ApiClient
) -> None:
    # created as a team would, listed as the controller (held to deploy/rbac.yaml), across namespaces and pages
    made = client.AutoscalingV2Api(admin_client)
    for ns, obj in (("ml", hpa("ml", "llama-cpu", "llama")), ("web", hpa("web", "keda-hpa-front", "front")),
                    ("ml", hpa("ml", "set", "db", kind="StatefulSet"))):
        typed = client.V2HorizontalPodAutoscaler.from_dict(obj)
        assert typed is not None
        made.create_namespaced_horizontal_pod_autoscaler(ns, typed)

    views = KubeCluster(api_client, page_size=2).list_scalers()

    assert sorted(views, key=lambda v: (v.namespace, v.name)) == [
        ScalerView("ml", "llama-cpu", "apps/v1", "Deployment", "llama"),
        ScalerView("ml", "set", "apps/v1", "StatefulSet", "db"),
        ScalerView("web", "keda-hpa-front", "apps/v1", "Deployment", "front"),
    ]
    pages = fake_api.calls("GET", r"^/apis/autoscaling/v2/horizontalpodautoscalers$")
    assert [p.query.get("continue") for p in pages] == [None, ["2"]]


def test_render_selector_keeps_match_expressions() -> None:
    selector = {
        "matchLabels": {"app": "llm", "tier": "gpu"},
        "matchExpressions": [
            {"key": "track", "operator": "In", "values": ["stable", "canary"]},
            {"key": "shadow", "operator": "DoesNotExist"},
            {"key": "zone", "operator": "NotIn", "values": ["b"]},
            {"key": "model", "operator": "Exists"},
        ],
    }
    assert render_selector(selector) == "app=llm,tier=gpu,track in (canary,stable),!shadow,zone notin (b),model"
    with pytest.raises(ValueError, match="unknown label selector operator 'Near'"):
        render_selector({"matchExpressions": [{"key": "k", "operator": "Near", "values": []}]})


def test_pod_startups_measures_ready_pods_and_reports_waiting_ones(fake_api: FakeKubeAPI, cluster: KubeCluster) -> None:
    fake_api.add("pods", pod("ml", "llama-a", "llama", created=T0, ready_at=T0 + timedelta(seconds=240)))
    fake_api.add("pods", pod("ml", "llama-b", "llama", created=T0, ready_at=T0 + timedelta(seconds=95)))
    # restarted: its Ready time measures the restart, not the start-up
    fake_api.add("pods", pod("ml", "llama-c", "llama", created=T0, ready_at=T0 + timedelta(hours=3), restarts=2))
    fake_api.add("pods", pod("ml", "llama-d", "llama", created=T0 + timedelta(seconds=600), phase="Pending",
                             scheduled=False))  # fmt: skip
    fake_api.add("pods", pod("ml", "llama-e", "llama", created=T0 + timedelta(seconds=900)))  # loading the model
    fake_api.add("pods", pod("ml", "other", "mistral", created=T0, ready_at=T0 + timedelta(seconds=5)))
    now = T0 + timedelta(seconds=1000)

    result = cluster.pod_startups("ml", "app=llama", now)

    (call,) = fake_api.calls("GET", r"^/api/v1/namespaces/ml/pods$")
    assert call.query["labelSelector"] == ["app=llama"]
    assert sorted(result.durations) == [95.0, 240.0]
    by_name = {p.name: p for p in result.not_ready}
    assert set(by_name) == {"llama-d", "llama-e"}
    waiting = by_name["llama-d"]
    assert waiting.age_seconds == 400.0
    assert not waiting.scheduled
    assert waiting.phase == "Pending"
    assert waiting.reason == "Unschedulable"
    assert waiting.message is not None
    assert "nvidia.com/gpu" in waiting.message
    assert by_name["llama-e"].scheduled
    assert by_name["llama-e"].age_seconds == 100.0
    assert result.pending_unschedulable == 1


def test_scale_patches_the_scale_subresource_with_a_merge_patch(fake_api: FakeKubeAPI, cluster: KubeCluster) -> None:
    fake_api.add("deployments", deployment("ml", "llama", replicas=2))

    assert cluster.scale("ml", "llama", 5) is True

    (patch,) = fake_api.calls("PATCH")
    assert patch.path == "/apis/apps/v1/namespaces/ml/deployments/llama/scale"
    assert patch.content_type == MERGE_PATCH
    assert patch.body == {"spec": {"replicas": 5}}
    assert patch.query["fieldManager"] == ["predictive-autoscaler"]
    stored = fake_api.get("deployments", "ml", "llama")
    assert stored is not None
    assert stored["spec"]["replicas"] == 5


def test_scale_to_the_current_value_writes_nothing(fake_api: FakeKubeAPI, cluster: KubeCluster) -> None:
    fake_api.add("deployments", deployment("ml", "llama", replicas=4))
    assert cluster.scale("ml", "llama", 4) is False
    assert fake_api.writes() == []


def test_scale_retries_conflicts_then_succeeds(
    fake_api: FakeKubeAPI, cluster: KubeCluster, sleeps: list[float]
) -> None:
    fake_api.add("deployments", deployment("ml", "llama", replicas=2))
    fake_api.fail("PATCH", r"/scale$", 409, times=2)

    assert cluster.scale("ml", "llama", 6) is True

    sequence = [(r.method, r.path.rsplit("/", 1)[-1]) for r in fake_api.calls(path="/deployments/llama")]
    assert sequence == [("GET", "scale"), ("PATCH", "scale")] * 3  # re-read before every retry
    assert len(sleeps) == 2
    assert sleeps[0] < sleeps[1]  # backs off
    stored = fake_api.get("deployments", "ml", "llama")
    assert stored is not None
    assert stored["spec"]["replicas"] == 6


def test_scale_gives_up_after_bounded_conflicts(fake_api: FakeKubeAPI, cluster: KubeCluster) -> None:
    fake_api.add("deployments", deployment("ml", "llama", replicas=2))
    fake_api.fail("PATCH", r"/scale$", 409, times=10)
    with pytest.raises(KubeWriteError, match=r"scale deployment ml/llama to 6: HTTP 409 .*\(after 4 attempts\)"):
        cluster.scale("ml", "llama", 6)
    assert len(fake_api.calls("PATCH")) == 4


@pytest.mark.parametrize("status", [403, 500])
def test_other_write_errors_raise_at_once_naming_the_object(
    fake_api: FakeKubeAPI, cluster: KubeCluster, status: int
) -> None:
    fake_api.add("deployments", deployment("ml", "llama", replicas=2))
    fake_api.fail("PATCH", r"/scale$", status)
    with pytest.raises(KubeWriteError, match=rf"scale deployment ml/llama to 3: HTTP {status} .*injected {status}"):
        cluster.scale("ml", "llama", 3)
    assert len(fake_api.calls("PATCH")) == 1


def test_missing_deployment_is_a_write_error(cluster: KubeCluster) -> None:
    with pytest.raises(KubeWriteError, match=r'ml/ghost.*HTTP 404.*"ghost" not found'):
        cluster.scale("ml", "ghost", 3)


def test_post_event_references_the_deployment(fake_api: FakeKubeAPI, cluster: KubeCluster) -> None:
    stored = fake_api.add("deployments", deployment("ml", "llama", annotations={"predictive-autoscaler.io/mode": "x"}))
    uid = stored["metadata"]["uid"]
    view = cluster.list_workloads()[0]
    result = parse_workload(view.namespace, view.name, view.labels, view.annotations, view.pod_template)
    ((reason, message),) = event_payloads(result.problems)

    cluster.post_event("ml", "llama", uid, "Warning", reason, message, T0)
    cluster.post_event("ml", "llama", uid, "Warning", reason, message, T0)  # same tick: no name clash

    posts = fake_api.calls("POST", r"^/api/v1/namespaces/ml/events$")
    assert len(posts) == 2
    body = posts[0].body
    assert body["involvedObject"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": "llama",
        "namespace": "ml",
        "uid": uid,
    }
    assert body["type"] == "Warning"
    assert body["reason"] == "InvalidAnnotation"
    assert body["message"] == "predictive-autoscaler.io/mode='x': unknown mode (expected 'scale' or 'advisory')"
    assert body["reportingComponent"] == "predictive-autoscaler"
    assert body["reportingInstance"] == "controller-0"
    assert body["source"] == {"component": "predictive-autoscaler"}
    assert body["metadata"]["generateName"] == "llama."
    assert body["firstTimestamp"].startswith("2025-03-01T12:00:00")
    assert body["count"] == 1
    names = {e["metadata"]["name"] for e in fake_api.all("events", "ml")}
    assert len(names) == 2
    assert all(n.startswith("llama.") for n in names)


def test_post_event_truncates_long_messages_and_checks_type(fake_api: FakeKubeAPI, cluster: KubeCluster) -> None:
    cluster.post_event("ml", "llama", "u-1", "Normal", "ScaledUp", "é" * 2000, T0)
    (post,) = fake_api.calls("POST")
    assert len(post.body["message"].encode()) <= 1024
    with pytest.raises(ValueError, match="event type must be 'Normal' or 'Warning'"):
        cluster.post_event("ml", "llama", "u-1", "Error", "X", "m", T0)  # type: ignore[arg-type]


def test_post_event_failure_is_raised(fake_api: FakeKubeAPI, cluster: KubeCluster) -> None:
    fake_api.fail("POST", r"/events$", 403)
    with pytest.raises(KubeWriteError, match=r"post Warning event CostCeiling on deployment ml/llama: HTTP 403"):
        cluster.post_event("ml", "llama", "u-1", "Warning", "CostCeiling", "blocked", T0)


def test_read_errors_are_kube_read_errors(fake_api: FakeKubeAPI, cluster: KubeCluster) -> None:
    fake_api.fail("GET", r"/deployments$", 500)
    with pytest.raises(KubeReadError, match=r"list deployments .*HTTP 500"):
        cluster.list_workloads()


def test_unreachable_server_is_one_clear_error() -> None:
    cfg = client.Configuration()
    cfg.host = "http://127.0.0.1:9"  # discard port: nothing listens
    cfg.retries = False
    with client.ApiClient(cfg) as api:
        with pytest.raises(KubeWriteError, match=r"cannot reach the API server at http://127.0.0.1:9"):
            KubeCluster(api).scale("ml", "llama", 1)
        with pytest.raises(KubeReadError, match="cannot reach the API server"):
            KubeCluster(api).list_workloads()


def test_api_client_from_kubeconfig(tmp_path: Path, fake_api: FakeKubeAPI) -> None:
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "fake", "cluster": {"server": fake_api.url}}],
                "users": [{"name": "u", "user": {"token": CONTROLLER_TOKEN}}],
                "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "u"}}],
                "current-context": "fake",
            }
        )
    )
    fake_api.add("deployments", deployment("ml", "llama"))
    with api_client_from_config(kubeconfig) as api:
        assert [v.name for v in KubeCluster(api).list_workloads()] == ["llama"]
    assert {r.user for r in fake_api.calls()} == {CONTROLLER.name}  # the kubeconfig's token reached the server
    with pytest.raises(KubeConfigError, match=r"kubeconfig .*missing does not exist"):
        api_client_from_config(tmp_path / "missing")


# ---- against a real API server ------------------------------------------------------------------


@pytest.mark.kube
def test_real_server_scale_status_and_event(real_api_client: client.ApiClient, real_namespace: str) -> None:
    apps = client.AppsV1Api(real_api_client)
    body = deployment(real_namespace, "pa-probe", replicas=0, gpus=0)
    body.pop("status")
    model = client.V1Deployment.from_dict(body)
    assert model is not None
    apps.create_namespaced_deployment(real_namespace, model)
    cluster = KubeCluster(real_api_client, instance="pytest")

    (view,) = [v for v in cluster.list_workloads() if v.namespace == real_namespace]
    assert view.name == "pa-probe"
    assert view.selector == "app=pa-probe"
    assert cluster.scale(real_namespace, "pa-probe", 1) is True
    assert cluster.scale(real_namespace, "pa-probe", 1) is False
    written = cluster.write_status(real_namespace, "pa-probe", view.uid, {"desired": 1}, None)
    assert written.written
    assert not cluster.write_status(real_namespace, "pa-probe", view.uid, {"desired": 1}, written.stored).written
    assert cluster.list_statuses(real_namespace) == {written.stored.name: written.stored}
    cluster.remove_status_annotation(real_namespace, "pa-probe")
    cluster.post_event(real_namespace, "pa-probe", view.uid, "Normal", "ProbeOK", "adapter test", T0)

    dep = apps.read_namespaced_deployment("pa-probe", real_namespace)
    assert dep.spec is not None
    assert dep.spec.replicas == 1
    assert dep.metadata is not None
    assert STATUS_ANNOTATION not in (dep.metadata.annotations or {})
    cm = client.CoreV1Api(real_api_client).read_namespaced_config_map(written.stored.name, real_namespace)
    assert cm.data is not None
    assert json.loads(cm.data[STATUS_DATA_KEY]) == {"desired": 1}
    assert cm.metadata is not None
    assert cm.metadata.owner_references is not None
    (owner,) = cm.metadata.owner_references
    assert (owner.kind, owner.name, owner.uid, owner.block_owner_deletion) == ("Deployment", "pa-probe", view.uid,
                                                                               False)
    events = client.CoreV1Api(real_api_client).list_namespaced_event(real_namespace)
    assert any(e.reason == "ProbeOK" and e.involved_object.uid == view.uid for e in events.items)
