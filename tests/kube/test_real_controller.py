"""``predictive-autoscaler run --once`` on a real kube-apiserver, as the controller's own ServiceAccount.

Why it exists: every other controller test talks to the recording fake (``tests/kube/fakeapi.py``), which
cannot say whether the real server accepts what the controller sends (CRD schemas, subresources, RBAC) nor
whether ``deploy/rbac.yaml`` grants what the code needs -- and nothing more. Here the shipped ``deploy/``
manifests are applied server-side onto a kube-apiserver serving the real Karpenter, CapacityBuffer, Kueue and
Volcano CRDs, and each tick runs through ``autoscaler.cli.main`` with a kubeconfig holding a TokenRequest token
of ``predictive-autoscaler/predictive-autoscaler``, against the real Prometheus fixture with ``--at`` inside
its backfill (time is data). The fleet is ``tests/kube/real_fleet.py``'s.

The server is private to this module and started with an audit policy logging every request of that
ServiceAccount, so a test can list exactly what the controller did (and prove what it did not):
``test_rbac_grants_exactly_what_the_controller_uses`` compares those uses with the grants, both ways.
Each test starts from a reset fleet (``reset_fleet`` + ``seed_fleet``), so every create path is taken again.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import pytest
from kubernetes import client

from autoscaler.adapters.karpenter import DEFAULT_PAUSE_IMAGE, SPEC_HASH_ANNOTATION
from autoscaler.domain.annotations import EVENT_REASON_INVALID, PREFIX, STATUS_ANNOTATION
from autoscaler.domain.contention import EVENT_REASON_CONTENDED, EVENT_REASON_RESOLVED
from autoscaler.domain.gangs import ACTIVATED_ANNOTATION, PLANNED_START_ANNOTATION
from autoscaler.domain.scaledown import DELETION_COST_ANNOTATION, MARK_ANNOTATION
from autoscaler.domain.status import STATUS_DATA_KEY, status_object_name
from tests.kube.conftest import hpa
from tests.kube.real_fleet import (
    BUFFER,
    BUFFERS,
    CONTROLLER_NAMESPACE,
    GPU,
    KARPENTER,
    KUEUE,
    LEASE,
    LLAMA_HASH,
    PLACEHOLDER,
    PLACEHOLDER_CLASS,
    PODGROUP,
    POOL,
    POOL_LIMIT,
    RESEARCH,
    SA_USER,
    SERVICE_ACCOUNT,
    SERVING,
    TRAINING,
    VOLCANO,
    WORKLOAD,
    CliResult,
    as_dict,
    audit_args,
    audit_events,
    audit_size,
    audit_uses,
    authorizes,
    bound_grants,
    changes,
    replicaset_pods,
    reset_fleet,
    run_cli,
    run_cli_process,
    sa_controller,
    seed_fleet,
    set_ready,
    snapshot,
    write_config,
)
from tests.kubeserver import (
    KubeServer,
    apply,
    deploy_objects,
    ensure_namespace,
    install_crds,
    metadata,
    name_of,
    running_kube_server,
)
from tests.servers import PrometheusServer

pytestmark = [pytest.mark.kube, pytest.mark.prometheus]


def utc_iso(t: int) -> str:
    """How the controller writes a time (``datetime.isoformat`` of an aware UTC time)."""
    return datetime.fromtimestamp(t, tz=UTC).isoformat()


@dataclass(frozen=True)
class ControllerCluster:
    """The module's API server with ``deploy/`` applied, its audit log and the ServiceAccount's kubeconfig."""

    server: KubeServer
    audit_log: Path
    sa_kubeconfig: Path


@pytest.fixture(scope="module")
def controller_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControllerCluster]:
    root = tmp_path_factory.mktemp("controller-cluster")
    args, log = audit_args(root / "audit")
    for server in running_kube_server(root / "state", args):
        with server.admin() as api:
            install_crds(api)
            apply(api, deploy_objects())
        sa = server.kubeconfig_as(CONTROLLER_NAMESPACE, SERVICE_ACCOUNT, root / "controller.kubeconfig")
        yield ControllerCluster(server, log, sa)


@dataclass
class Scene:
    """A freshly seeded fleet and the times of this test: ticks at ``t1``; the held Kueue Workload's planned
    start is ``workload_start`` (t1 + 30 min), the PodGroup's ``podgroup_start`` (t1 + 6 h)."""

    cluster: ControllerCluster
    api: client.ApiClient  # admin
    prometheus: PrometheusServer
    tmp: Path
    t1: int
    workload_start: int
    podgroup_start: int
    audit_offset: int

    def config(self, *, headroom: str = "capacitybuffer", lease_namespace: str = CONTROLLER_NAMESPACE) -> Path:
        return write_config(self.tmp / f"config-{headroom}-{lease_namespace}.yaml", self.prometheus.url,
                            headroom=headroom, lease_namespace=lease_namespace)

    def argv(self, at: int, config: Path | None, kubeconfig: Path | None, *extra: str) -> list[str]:
        return ["run", "--once", "--kubeconfig", str(kubeconfig or self.cluster.sa_kubeconfig),
                "--config", str(config or self.config()), "--at", str(at), *extra]

    def once(self, at: int, *, config: Path | None = None, identity: str = "ctl-test") -> CliResult:
        result = run_cli(*self.argv(at, config, None, "--identity", identity))
        assert (result.code, result.err) == (0, ""), f"run --once at {at} failed: {result.err}"
        return result

    def dry_run(self, at: int, *, config: Path | None = None) -> dict[str, Any]:
        result = run_cli(*self.argv(at, config, None, "--dry-run"))
        assert (result.code, result.err) == (0, ""), f"run --once --dry-run at {at} failed: {result.err}"
        return result.plan()

    def apps(self) -> client.AppsV1Api:
        return client.AppsV1Api(self.api)

    def custom(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self.api)

    def serialized(self, obj: object) -> dict[str, Any]:
        """A client model object as JSON (``ApiClient.sanitize_for_serialization``)."""
        out: dict[str, Any] = self.api.sanitize_for_serialization(obj)  # type: ignore[no-untyped-call]  # unannotated
        return out

    def deployment(self, namespace: str, name: str) -> dict[str, Any]:
        return self.serialized(self.apps().read_namespaced_deployment(name, namespace))

    def scale_replicas(self, namespace: str, name: str) -> int:
        """``spec.replicas`` of the Deployment's scale subresource."""
        spec = self.apps().read_namespaced_deployment_scale(name, namespace).spec
        assert spec is not None
        assert spec.replicas is not None
        return spec.replicas

    def status(self, namespace: str, name: str) -> dict[str, Any]:
        """What the controller published for Deployment ``name``: its status object's JSON."""
        cm = client.CoreV1Api(self.api).read_namespaced_config_map(status_object_name(name), namespace)
        assert cm.data is not None
        found: dict[str, Any] = json.loads(cm.data[STATUS_DATA_KEY])
        return found

    def events(self, namespace: str) -> list[client.CoreV1Event]:
        # CoreV1Api: EventsV1Api fails on core/v1 Events without eventTime (../shared/kube/README.md).
        items: list[client.CoreV1Event] = client.CoreV1Api(self.api).list_namespaced_event(namespace).items
        return items

    def refused(self) -> list[tuple[str, str, int]]:
        """Requests of the ServiceAccount since the test began that the server refused (401/403)."""
        return [(e["verb"], e["requestURI"], e["responseStatus"]["code"])
                for e in audit_events(self.cluster.audit_log, offset=self.audit_offset)
                if e["user"]["username"] == SA_USER and e["responseStatus"]["code"] in (401, 403)]


@pytest.fixture
def scene(controller_cluster: ControllerCluster, prometheus_server: PrometheusServer,
          tmp_path: Path) -> Iterator[Scene]:
    t1 = prometheus_server.now - 3600
    with controller_cluster.server.admin() as api:
        reset_fleet(api)
        seed_fleet(api, workload_start=t1 + 1800, podgroup_start=t1 + 6 * 3600)
        yield Scene(controller_cluster, api, prometheus_server, tmp_path, t1, t1 + 1800, t1 + 6 * 3600,
                    audit_size(controller_cluster.audit_log))


def by_name(plan: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {w["name"]: w for w in plan["workloads"]}


@dataclass(frozen=True)
class Shrinking:
    """llama-chat at 4 replicas that need 2 (capacity 100 req/s per replica, ``min-replicas`` 2, no warm pool), with
    the pods of ReplicaSet ``llama-chat-7d9f8b6c5d``: the two backfilled ones (their in-flight requests are in
    Prometheus; ``idle`` has fewer than ``busy`` at t1), ``unknown`` Ready for an hour without a series,
    ``starting`` scheduled but not Ready, and ``leaving`` Terminating."""

    idle: str
    busy: str
    unknown: str
    starting: str
    leaving: str
    config: Path


def shrink_llama_chat(scene: Scene) -> Shrinking:
    apps = scene.apps()
    apps.patch_namespaced_deployment("llama-chat", SERVING, {"metadata": {"annotations": {
        PREFIX + "capacity-per-replica": "100", PREFIX + "min-replicas": "2", PREFIX + "warm-pool": "0"}}})
    apps.patch_namespaced_deployment_scale("llama-chat", SERVING, {"spec": {"replicas": 4}})
    set_ready(scene.api, SERVING, "llama-chat", 4)
    t1, backfill = scene.t1, scene.prometheus.backfill
    ready = {"x7k2p": t1 - 7200, "q9w4z": t1 - 5400, "n3wpd": t1 - 3600, "f5g6h": None, "t3rmn": t1 - 9000}
    names = replicaset_pods(scene.api, SERVING, "llama-chat", LLAMA_HASH, ready, terminating=["t3rmn"])
    k = (t1 - backfill.start) // 60
    load = {p.pod: int(p.waiting[k] + p.running[k]) for p in backfill.pods_of(SERVING, "llama-chat")}
    # Fewest in flight first; on a tie the most recently Ready (q9w4z).
    idle, busy = sorted((names["q9w4z"], names["x7k2p"]), key=lambda n: load[n])
    return Shrinking(idle, busy, names["n3wpd"], names["f5g6h"], names["t3rmn"],
                     write_config(scene.tmp / "config-shrinking.yaml", scene.prometheus.url, stabilization="1m"))


def pod_annotations(scene: Scene, name: str) -> dict[str, str]:
    pod = client.CoreV1Api(scene.api).read_namespaced_pod(name, SERVING)
    return dict(metadata(pod).annotations or {})


def pod_versions(scene: Scene) -> dict[str, str | None]:
    return {name_of(p): metadata(p).resource_version
            for p in client.CoreV1Api(scene.api).list_namespaced_pod(SERVING).items}


# ---------------------------------------------------------------------------------------------- a full tick


def test_a_full_tick_as_the_service_account_does_what_the_plan_says(scene: Scene) -> None:
    """One tick, RBAC enforced: the vLLM Deployment is scaled ahead of its rising forecast, its status and
    Events are written, the malformed one is reported and left alone, the NodePool limit, the CapacityBuffer (the
    pool's forecast-sized idle nodes, as its top Deployment's pods) and the gang annotations are accepted by the real
    schemas, and nothing else is written."""
    before = snapshot(scene.api)
    plan = scene.dry_run(scene.t1)
    assert changes(before, snapshot(scene.api)) == {"created": [], "changed": [], "deleted": []}, \
        "--dry-run writes nothing (no Lease either)"

    assert plan["errors"] == []
    assert plan["metrics_ok"] is True
    workloads = by_name(plan)
    llama, mistral, qwen = workloads["llama-chat"], workloads["mistral-code"], workloads["qwen-eval"]
    desired = llama["desired_replicas"]
    assert desired > llama["current_replicas"] == 2, "the backfill's demand needs more than 2 replicas"
    assert llama["actions"] == [f"would scale 2 -> {desired}"]
    assert (mistral["desired_replicas"], mistral["actions"]) == (1, [])
    assert qwen["desired_replicas"] is None
    assert any(p.startswith(PREFIX + "min-replicas='5'") for p in qwen["problems"]), qwen["problems"]
    cost = plan["cost"]
    # the pool's forecast-sized idle nodes, held as a CapacityBuffer of its top Deployment's pods (1 GPU each)
    idle = cost["pool_headroom"][POOL]
    assert idle > 0, "the pooled forecast one node lead further out rises"
    buffered = cost["headroom"].get(f"CapacityBuffer {SERVING}/llama-chat", 0)
    assert buffered >= idle  # room for whole idle nodes of the pool's GPUs (no node is up here: no kubelet)
    limit = cost["nodepool_limits"][POOL]
    assert limit != POOL_LIMIT
    placements = cost["gang_placements"]
    assert placements[f"Workload/{TRAINING}/{WORKLOAD}"]["planned_start_unix"] == scene.workload_start
    assert placements[f"Workload/{TRAINING}/{WORKLOAD}"]["held"] is True
    assert placements[f"PodGroup/{TRAINING}/{PODGROUP}"]["planned_start_unix"] == scene.podgroup_start
    qwen_before = scene.deployment(RESEARCH, "qwen-eval")

    scene.once(scene.t1)

    after = snapshot(scene.api)
    events = {ns: scene.events(ns) for ns in (SERVING, RESEARCH)}
    event_keys = sorted(("Event", ns, e.metadata.name) for ns, es in events.items() for e in es)
    assert changes(before, after) == {
        "created": sorted([("CapacityBuffer", SERVING, BUFFER), ("Lease", CONTROLLER_NAMESPACE, LEASE),
                           ("ConfigMap", SERVING, status_object_name("llama-chat")),
                           ("ConfigMap", SERVING, status_object_name("mistral-code")), *event_keys]),
        # mistral-code is held: its status is in its ConfigMap, so the Deployment (and its ReplicaSet) is untouched
        "changed": sorted([("Deployment", SERVING, "llama-chat"),
                           ("NodePool", "", POOL), ("PodGroup", TRAINING, PODGROUP),
                           ("Workload", TRAINING, WORKLOAD)]),
        "deleted": [],
    }
    assert scene.refused() == [], "RBAC refused nothing"

    # Scaled through the scale subresource, to exactly the plan.
    assert scene.scale_replicas(SERVING, "llama-chat") == desired
    llama_obj = scene.deployment(SERVING, "llama-chat")
    assert STATUS_ANNOTATION not in llama_obj["metadata"]["annotations"]
    status = scene.status(SERVING, "llama-chat")
    assert status["desiredReplicas"] == desired
    assert (status["currentReplicas"], status["readyReplicas"], status["mode"]) == (2, 2, "scale")
    assert status["time"] == utc_iso(scene.t1)
    assert status["forecast"]["at"] == scene.t1 + 1800  # the profile's horizon
    assert status["steps"] == llama["decision"]["steps"], "the tick acted on the plan --dry-run printed"
    assert status["track"][-1]["t"] == scene.t1
    mistral_status = scene.status(SERVING, "mistral-code")
    assert mistral_status["desiredReplicas"] == mistral_status["currentReplicas"] == 1
    assert scene.scale_replicas(SERVING, "mistral-code") == 1

    # Events, as `kubectl describe deployment` shows them.
    scaled = [(e.type, e.reason, e.involved_object.name, e.involved_object.uid) for e in events[SERVING]]
    assert scaled == [("Normal", "ScaledUp", "llama-chat", llama_obj["metadata"]["uid"])]
    (up,) = events[SERVING]
    assert up.message is not None
    assert up.source is not None
    assert up.message.startswith(f"replicas 2 -> {desired} (")
    assert (up.source.component, up.reporting_component) == ("predictive-autoscaler", "predictive-autoscaler")
    (warning,) = events[RESEARCH]
    assert (warning.type, warning.reason, warning.involved_object.name) == ("Warning", EVENT_REASON_INVALID,
                                                                            "qwen-eval")
    assert warning.message is not None
    assert PREFIX + "min-replicas='5'" in warning.message
    assert "max-replicas 2" in warning.message
    assert scene.deployment(RESEARCH, "qwen-eval") == qwen_before, "the malformed Deployment is left as it is"

    # The NodePool's GPU limit, through Karpenter's schema; its other limits are kept.
    pool = as_dict(scene.custom().get_cluster_custom_object(*KARPENTER, POOL))
    assert pool["spec"]["limits"] == {"cpu": "1000", GPU: str(limit)}

    # Headroom: a CapacityBuffer shaped like llama-chat's pods, owned by it.
    buffer = as_dict(scene.custom().get_namespaced_custom_object(*BUFFERS[:2], SERVING, BUFFERS[2], BUFFER))
    assert buffer["spec"] == {"scalableRef": {"apiGroup": "apps", "kind": "Deployment", "name": "llama-chat"},
                              "replicas": buffered,
                              "provisioningStrategy": "buffer.x-k8s.io/active-capacity"}  # the CRD's default
    assert [(o["kind"], o["name"], o["uid"]) for o in buffer["metadata"]["ownerReferences"]] == [
        ("Deployment", "llama-chat", llama_obj["metadata"]["uid"])]
    assert buffer["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "predictive-autoscaler"

    # Gangs: placed and annotated; the held Workload stays held until its planned start.
    workload = as_dict(scene.custom().get_namespaced_custom_object(*KUEUE[:2], TRAINING, KUEUE[2], WORKLOAD))
    assert workload["metadata"]["annotations"][PLANNED_START_ANNOTATION] == utc_iso(scene.workload_start)
    assert workload["spec"]["active"] is False
    assert ACTIVATED_ANNOTATION not in workload["metadata"]["annotations"]
    podgroup = as_dict(scene.custom().get_namespaced_custom_object(*VOLCANO[:2], TRAINING, VOLCANO[2], PODGROUP))
    assert podgroup["metadata"]["annotations"][PLANNED_START_ANNOTATION] == utc_iso(scene.podgroup_start)

    lease = client.CoordinationV1Api(scene.api).read_namespaced_lease(LEASE, CONTROLLER_NAMESPACE)
    assert lease.spec is not None
    assert lease.spec.holder_identity is None, "released on exit"


def test_a_held_kueue_workload_is_activated_at_its_planned_start(scene: Scene) -> None:
    """Placed (and left held) at t1, started at its planned start: ``spec.active: true`` and ``activated-at``
    through Kueue's schema. Its nodes are asked for one node start-up ahead; with CapacityBuffers a pending gang
    has no Deployment to point one at, so they are placeholder pods on its pool, created in the same tick."""
    scene.once(scene.t1)
    set_ready(scene.api, SERVING, "llama-chat", scene.scale_replicas(SERVING, "llama-chat"))
    plan = scene.dry_run(scene.workload_start)
    placement = plan["cost"]["gang_placements"][f"Workload/{TRAINING}/{WORKLOAD}"]
    assert (placement["planned_start_unix"], placement["held"], placement["counting"]) == (
        scene.workload_start, True, True)
    gang_nodes = plan["cost"]["headroom"].get(f"Deployment {POOL}", 0)
    assert gang_nodes >= 1, plan["cost"]["headroom"]

    scene.once(scene.workload_start)

    workload = as_dict(scene.custom().get_namespaced_custom_object(*KUEUE[:2], TRAINING, KUEUE[2], WORKLOAD))
    assert workload["spec"]["active"] is True
    annotations = workload["metadata"]["annotations"]
    assert annotations[ACTIVATED_ANNOTATION] == utc_iso(scene.workload_start)
    assert annotations[PLANNED_START_ANNOTATION] == utc_iso(scene.workload_start)
    placeholder = scene.apps().read_namespaced_deployment(PLACEHOLDER, CONTROLLER_NAMESPACE)
    assert placeholder.spec.replicas == gang_nodes
    podgroup = as_dict(scene.custom().get_namespaced_custom_object(*VOLCANO[:2], TRAINING, VOLCANO[2], PODGROUP))
    assert podgroup["metadata"]["annotations"][PLANNED_START_ANNOTATION] == utc_iso(scene.podgroup_start)
    assert scene.refused() == []


# ---------------------------------------------------------------------------------------------- steady state


def test_a_second_tick_changes_only_what_changed_and_dry_run_writes_nothing(scene: Scene) -> None:
    """What "needs no change" means (``autoscaler/runtime/loop.py``): every write is read-compare-write, so an
    object is written only when its desired content differs. After the first tick the deployment controller
    rolls llama-chat out (written here); the next tick at the same ``--at`` therefore rewrites llama-chat's
    status object (its current/ready replicas moved) and nothing else, not the Deployment; the tick after that
    writes nothing at all. Two things are written by every ``--once`` and are not changes of the fleet: the Lease
    (taken, released) and the Warning Event of a still-malformed Deployment (a one-shot has no memory of having
    reported it; a running controller reports it once)."""
    scene.once(scene.t1)
    desired = scene.scale_replicas(SERVING, "llama-chat")
    set_ready(scene.api, SERVING, "llama-chat", desired)
    llama_before = scene.deployment(SERVING, "llama-chat")
    old = scene.status(SERVING, "llama-chat")
    before = snapshot(scene.api)

    scene.once(scene.t1)

    after = snapshot(scene.api)
    diff = changes(before, after)
    assert diff["changed"] == [("ConfigMap", SERVING, status_object_name("llama-chat")),
                               ("Lease", CONTROLLER_NAMESPACE, LEASE)]
    assert diff["deleted"] == []
    assert [key[:2] for key in diff["created"]] == [("Event", RESEARCH)]
    (warning,) = [e for e in scene.events(RESEARCH) if e.metadata.name == diff["created"][0][2]]
    assert (warning.reason, warning.involved_object.name) == (EVENT_REASON_INVALID, "qwen-eval")
    llama_after = scene.deployment(SERVING, "llama-chat")
    assert llama_after["spec"] == llama_before["spec"], "no scale: it is at the plan"
    assert llama_after["metadata"] == llama_before["metadata"], "the status is not on the Deployment"
    new = scene.status(SERVING, "llama-chat")
    assert (old["currentReplicas"], old["readyReplicas"]) == (2, 2)
    assert (new["currentReplicas"], new["readyReplicas"], new["desiredReplicas"]) == (desired, desired, desired)

    steady = snapshot(scene.api)
    scene.once(scene.t1)
    diff = changes(steady, snapshot(scene.api))
    assert diff["changed"] == [("Lease", CONTROLLER_NAMESPACE, LEASE)]
    assert [key[:2] for key in diff["created"]] == [("Event", RESEARCH)]
    assert diff["deleted"] == []

    steady = snapshot(scene.api)
    plan = scene.dry_run(scene.t1)
    assert changes(steady, snapshot(scene.api)) == {"created": [], "changed": [], "deleted": []}, \
        "--dry-run writes nothing: no scale, no status, no Event, no headroom, no gang, no Lease"
    assert [w["actions"] for w in plan["workloads"]] == [[], [], []]
    assert scene.refused() == []


def test_placeholder_pods_pass_admission_and_drift_is_put_back(scene: Scene) -> None:
    """Placeholder headroom on the real server: the pods its Deployment would create pass the admission of the
    controller's namespace (Pod Security "restricted", as deploy/namespace.yaml enforces it, and the Priority
    plugin resolving the placeholder PriorityClass), checked by a server-side dry run. Then drift is repaired:
    a placeholder Deployment resized and with another template (an older controller's, say) is patched back,
    and a NodePool GPU limit someone raised is lowered again, with the resourceVersion precondition."""
    placeholder_config = scene.config(headroom="placeholder")
    plan = scene.dry_run(scene.t1, config=placeholder_config)
    nodes = plan["cost"]["headroom"][f"Deployment {POOL}"]
    limit = plan["cost"]["nodepool_limits"][POOL]
    assert nodes >= 1
    scene.once(scene.t1, config=placeholder_config)

    apps = scene.apps()
    placeholder = apps.read_namespaced_deployment(PLACEHOLDER, CONTROLLER_NAMESPACE)
    assert placeholder.spec.replicas == nodes
    template = scene.serialized(placeholder.spec.template)
    ensure_namespace(scene.api, CONTROLLER_NAMESPACE)  # pod admission looks its default ServiceAccount up
    pod = {"apiVersion": "v1", "kind": "Pod", "spec": template["spec"],
           "metadata": {"generateName": f"{PLACEHOLDER}-", **template["metadata"]}}
    core = client.CoreV1Api(scene.api)
    admitted = core.create_namespaced_pod(CONTROLLER_NAMESPACE, cast(Any, pod), dry_run="All")  # validated into V1Pod
    assert admitted.spec is not None
    assert admitted.spec.priority == -10, "the Priority plugin resolved the placeholder PriorityClass"
    careless = json.loads(json.dumps(pod))
    del careless["spec"]["securityContext"]
    with pytest.raises(client.exceptions.ForbiddenException, match="violates PodSecurity"):
        core.create_namespaced_pod(CONTROLLER_NAMESPACE, careless, dry_run="All")  # control: "restricted" is enforced

    apps.patch_namespaced_deployment(PLACEHOLDER, CONTROLLER_NAMESPACE, {
        "metadata": {"annotations": {SPEC_HASH_ANNOTATION: "0123456789abcdef"}},
        "spec": {"replicas": nodes + 3,
                 "template": {"spec": {"containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.9"}]}}},
    })
    scene.custom().patch_cluster_custom_object(*KARPENTER, POOL, {"spec": {"limits": {GPU: "1000"}}},
                                               _content_type="application/merge-patch+json")

    scene.once(scene.t1, config=placeholder_config)

    repaired = scene.serialized(apps.read_namespaced_deployment(PLACEHOLDER, CONTROLLER_NAMESPACE))
    assert repaired["spec"]["replicas"] == nodes
    assert repaired["spec"]["template"]["spec"]["containers"][0]["image"] == DEFAULT_PAUSE_IMAGE
    placeholder_annotations = metadata(placeholder).annotations
    assert placeholder_annotations is not None
    assert repaired["metadata"]["annotations"][SPEC_HASH_ANNOTATION] == placeholder_annotations[SPEC_HASH_ANNOTATION]
    assert repaired["spec"]["template"] == template, "the template is the controller's again"
    pool = as_dict(scene.custom().get_cluster_custom_object(*KARPENTER, POOL))
    assert pool["spec"]["limits"][GPU] == str(limit)
    assert scene.refused() == []


# ---------------------------------------------------------------------------------------------- scale-down


def test_a_scale_down_marks_the_idlest_pods_first_and_clears_the_marks_once_it_landed(scene: Scene) -> None:
    """As the ServiceAccount, on pods made as the controllers would make them: the dry run marks nothing and says
    what it would mark; the tick gives the not-Ready pod and then the pod with the fewest in-flight requests a
    negative ``pod-deletion-cost`` (Ready pods without a series, the busier pod and the Terminating one are not
    written) before scaling 4 -> 2; the marks stay while the ReplicaSet still has pods to remove and are cleared
    once it has removed them."""
    shrinking = shrink_llama_chat(scene)
    dry, dry_source = sa_controller(scene.cluster.sa_kubeconfig, shrinking.config, dry_run=True)
    ctl, source = sa_controller(scene.cluster.sa_kubeconfig, shrinking.config)
    with dry_source, source:
        before = snapshot(scene.api)
        dry.tick(scene.t1 - 120)
        plan = dry.tick(scene.t1).to_dict()
        assert changes(before, snapshot(scene.api)) == {"created": [], "changed": [], "deleted": []}, \
            "--dry-run marks no pod"
        llama = by_name(plan)["llama-chat"]
        assert plan["errors"] == []
        assert llama["desired_replicas"] == 2
        marks = llama["scale_down_marks"]
        assert [(m["pod"], m["cost"]) for m in marks["marked"]] == [(shrinking.starting, -2), (shrinking.idle, -1)]
        assert marks["unknown_load"] == [shrinking.unknown]
        assert llama["actions"][:2] == [f"would mark pod {shrinking.starting} -2 (not Ready)",
                                        f"would mark pod {shrinking.idle} -1 ({marks['marked'][1]['why']})"]

        report = ctl.tick(scene.t1 - 120)  # the first decision holds
        assert report.ok, report.errors
        versions = pod_versions(scene)
        report = ctl.tick(scene.t1)
        assert report.ok, report.errors
        assert scene.scale_replicas(SERVING, "llama-chat") == 2
        for name, cost in ((shrinking.starting, "-2"), (shrinking.idle, "-1")):
            annotations = pod_annotations(scene, name)
            assert annotations[DELETION_COST_ANNOTATION] == cost
            assert json.loads(annotations[MARK_ANNOTATION]) == {"cost": int(cost), "markedAt": scene.t1}
        after = pod_versions(scene)
        assert {n for n in versions if versions[n] != after[n]} == {shrinking.starting, shrinking.idle}, \
            "the busier pod, the one of unknown load and the Terminating one are not written"
        (event,) = [e for e in scene.events(SERVING) if e.reason == "ScaledDown"]
        assert event.message is not None
        assert f"idlest pods marked for removal: {shrinking.starting} (not Ready), {shrinking.idle} (" in event.message

        # The ReplicaSet has not acted yet (4 pods for 2 replicas): the marks stay.
        report = ctl.tick(scene.t1 + 60)
        assert report.ok, report.errors
        assert pod_versions(scene) == after

        # It removes the starting pod and the one of unknown load (as a ReplicaSet may, e.g. when that one failed
        # its readiness probe meanwhile): the surviving mark is cleared; nothing else is written.
        core = client.CoreV1Api(scene.api)
        for name in (shrinking.starting, shrinking.unknown):
            core.delete_namespaced_pod(name, SERVING)
        set_ready(scene.api, SERVING, "llama-chat", 2)
        report = ctl.tick(scene.t1 + 120)
        assert report.ok, report.errors
        cleared = pod_versions(scene)
        assert {n for n in cleared if cleared[n] != after[n]} == {shrinking.idle}
        assert DELETION_COST_ANNOTATION not in pod_annotations(scene, shrinking.idle)
        assert MARK_ANNOTATION not in pod_annotations(scene, shrinking.idle)
        report = ctl.tick(scene.t1 + 180)
        assert report.ok, report.errors
        assert pod_versions(scene) == cleared, "nothing left to clear"
    assert scene.refused() == []


# ---------------------------------------------------------------------------------------------- RBAC


def test_a_deployment_an_hpa_also_scales_is_left_to_it_until_the_hpa_is_gone(scene: Scene) -> None:
    """The HPA a team already runs on llama-chat (``autoscaling/v2``, accepted by the real schema; nothing acts on
    it here, no controller-manager runs): a tick as the ServiceAccount writes no replicas there, publishes it as
    advisory and posts one Warning Event naming the HPA, which the next process does not post again (the status says it
    was told); once the HPA is deleted the next tick scales it and says so."""
    made = client.V2HorizontalPodAutoscaler.from_dict(hpa(SERVING, "llama-chat-cpu", "llama-chat"))
    assert made is not None
    hpas = client.AutoscalingV2Api(scene.api)
    hpas.create_namespaced_horizontal_pod_autoscaler(SERVING, made)
    before = scene.scale_replicas(SERVING, "llama-chat")

    scene.once(scene.t1)

    assert scene.scale_replicas(SERVING, "llama-chat") == before
    status = scene.status(SERVING, "llama-chat")
    assert (status["mode"], status["scaledBy"]) == ("advisory", ["llama-chat-cpu"])
    told = [e for e in scene.events(SERVING) if e.reason == EVENT_REASON_CONTENDED]
    assert [(e.type, e.involved_object.name) for e in told] == [("Warning", "llama-chat")]
    assert (told[0].message or "").startswith("HorizontalPodAutoscaler llama-chat-cpu also scales this Deployment")
    assert scene.refused() == []
    # the next process (each --once is one) reads from the status that the HPA was told of: not told again
    scene.once(scene.t1 + 30)
    assert scene.scale_replicas(SERVING, "llama-chat") == before
    assert len([e for e in scene.events(SERVING) if e.reason == EVENT_REASON_CONTENDED]) == 1

    hpas.delete_namespaced_horizontal_pod_autoscaler("llama-chat-cpu", SERVING)
    scene.once(scene.t1 + 60)
    assert scene.scale_replicas(SERVING, "llama-chat") > before
    assert scene.status(SERVING, "llama-chat")["mode"] == "scale"
    gone = [e for e in scene.events(SERVING) if e.reason == EVENT_REASON_RESOLVED]
    assert [(e.type, e.involved_object.name) for e in gone] == [("Normal", "llama-chat")]


def test_rbac_grants_exactly_what_the_controller_uses(scene: Scene) -> None:
    """Least privilege, measured: the audit log of every request the ServiceAccount made over ticks that take
    every path (first Lease, scale, status, Events, NodePool limit, CapacityBuffer create / resize / delete,
    placeholder PriorityClass and Deployment create / delete, gang annotations with PodGroups ranked by
    PriorityClass, a scale-down marking the idlest pod and clearing the mark) is compared with what
    deploy/rbac.yaml grants: each grant must be used, each use granted."""
    custom = scene.custom()
    scene.once(scene.t1)  # capacitybuffer mode: the buffer is created
    custom.patch_namespaced_custom_object(*BUFFERS[:2], SERVING, BUFFERS[2], BUFFER, {"spec": {"replicas": 99}},
                                          _content_type="application/merge-patch+json")
    scene.once(scene.t1)  # someone resized it: the controller puts it back (get + patch)
    buffer = as_dict(custom.get_namespaced_custom_object(*BUFFERS[:2], SERVING, BUFFERS[2], BUFFER))
    assert buffer["spec"]["replicas"] != 99

    scene.once(scene.t1, config=scene.config(headroom="placeholder"))  # buffer deleted, placeholders created
    with pytest.raises(client.exceptions.NotFoundException):
        custom.get_namespaced_custom_object(*BUFFERS[:2], SERVING, BUFFERS[2], BUFFER)
    placeholder = scene.apps().read_namespaced_deployment(PLACEHOLDER, CONTROLLER_NAMESPACE)
    pod = placeholder.spec.template.spec
    assert pod is not None
    assert pod.priority_class_name == PLACEHOLDER_CLASS
    assert pod.node_selector == {"karpenter.sh/nodepool": POOL}
    resources = pod.containers[0].resources
    assert resources is not None
    assert resources.requests is not None
    assert resources.requests[GPU] == "8", "one whole node of the pool per placeholder pod"
    assert placeholder.spec.replicas is not None
    assert placeholder.spec.replicas >= 1
    priority_class = client.SchedulingV1Api(scene.api).read_priority_class(PLACEHOLDER_CLASS)
    assert (priority_class.value, priority_class.preemption_policy, bool(priority_class.global_default)) == (
        -10, "Never", False)

    scene.once(scene.t1)  # back to capacitybuffer: the placeholder Deployment is deleted, the buffer re-created
    with pytest.raises(client.exceptions.NotFoundException):
        scene.apps().read_namespaced_deployment(PLACEHOLDER, CONTROLLER_NAMESPACE)
    custom.get_namespaced_custom_object(*BUFFERS[:2], SERVING, BUFFERS[2], BUFFER)

    # A scale-down (the loop in this process: a first decision holds, so it takes two ticks of one memory): the
    # pod-deletion-cost marks are set, then cleared once the ReplicaSet removed pods -- patch on pods, no get.
    shrinking = shrink_llama_chat(scene)
    ctl, source = sa_controller(scene.cluster.sa_kubeconfig, shrinking.config)
    with source:
        ctl.tick(scene.t1 - 120)
        assert ctl.tick(scene.t1).ok
        assert pod_annotations(scene, shrinking.idle)[DELETION_COST_ANNOTATION] == "-1"
        for name in (shrinking.starting, shrinking.unknown):
            client.CoreV1Api(scene.api).delete_namespaced_pod(name, SERVING)
        set_ready(scene.api, SERVING, "llama-chat", 2)
        assert ctl.tick(scene.t1 + 120).ok
        assert DELETION_COST_ANNOTATION not in pod_annotations(scene, shrinking.idle)

    events = audit_events(scene.cluster.audit_log, offset=scene.audit_offset)
    uses, discovery = audit_uses(events)
    assert uses, "the audit log recorded the ServiceAccount's requests"
    assert set(discovery) == {"/apis/autoscaling.x-k8s.io/v1beta1"}, "API discovery: granted to every user"
    assert scene.refused() == []
    grants = bound_grants(deploy_objects())
    unused = sorted({g.row() for g in grants if not any(authorizes(g, u) for u in uses)})
    ungranted = sorted({u.row() for u in uses if not any(authorizes(g, u) for g in grants)})
    used = "\n".join(" ".join(row) for row in sorted({u.row() for u in uses}))
    assert unused == [], f"deploy/rbac.yaml grants what no tick uses: {unused}\nused:\n{used}"
    assert ungranted == [], f"the controller uses what deploy/rbac.yaml does not grant: {ungranted}"


# ---------------------------------------------------------------------------------------------- the Lease


@pytest.mark.parametrize("who", ["admin, no such namespace", "service account, RBAC refuses"])
def test_once_that_cannot_take_the_lease_says_so_in_one_line_and_fails(scene: Scene, who: str) -> None:
    """A one-shot run that could not take the Lease acted on nothing: it must not exit 0 (it used to, with a
    warning in the log). As admin the Lease's namespace does not exist (404); as the controller's
    ServiceAccount in a namespace where it has no Role, RBAC refuses (403)."""
    if who.startswith("admin"):
        kubeconfig, namespace, answer = scene.cluster.server.kubeconfig, "no-such-namespace", \
            'HTTP 404 Not Found: namespaces "no-such-namespace" not found'
    else:
        kubeconfig, namespace, answer = scene.cluster.sa_kubeconfig, SERVING, "HTTP 403 Forbidden"
    before = snapshot(scene.api)

    result = run_cli_process(*scene.argv(scene.t1, scene.config(lease_namespace=namespace), kubeconfig))

    assert result.code == 1
    assert result.err.count("\n") == 1, f"one line on stderr, got:\n{result.err}"
    assert result.err.startswith("predictive-autoscaler run: error: --once did nothing: could not take the Lease "
                                 f"{namespace}/{LEASE} (")
    assert answer in result.err
    assert result.out == ""
    assert changes(before, snapshot(scene.api)) == {"created": [], "changed": [], "deleted": []}


def test_once_while_another_instance_holds_the_lease_names_it_and_fails(scene: Scene) -> None:
    """Another replica is the leader (its Lease renewed just now, by the wall clock the Lease protocol uses):
    a one-shot run stands by, so it did nothing: exit 1 and one line naming the holder."""
    now = datetime.now(tz=UTC)
    client.CoordinationV1Api(scene.api).create_namespaced_lease(CONTROLLER_NAMESPACE, cast(Any, {  # into V1Lease
        "metadata": {"name": LEASE},
        "spec": {"holderIdentity": "predictive-autoscaler-7f9c-abcde", "leaseDurationSeconds": 3600,
                 "acquireTime": now.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
                 "renewTime": now.strftime("%Y-%m-%dT%H:%M:%S.%fZ")},
    }))
    before = snapshot(scene.api)

    result = run_cli_process(*scene.argv(scene.t1, None, None))

    assert result.code == 1
    assert result.err.count("\n") == 1, f"one line on stderr, got:\n{result.err}"
    assert result.err.startswith(f"predictive-autoscaler run: error: --once did nothing: the Lease "
                                 f"{CONTROLLER_NAMESPACE}/{LEASE} is held by 'predictive-autoscaler-7f9c-abcde'")
    assert changes(before, snapshot(scene.api)) == {"created": [], "changed": [], "deleted": []}
