"""A GPU fleet on the real kube-apiserver, the controller's ServiceAccount, and its audit trail.

Why it exists: ``tests/kube/test_real_controller.py`` runs ``predictive-autoscaler run --once`` exactly as the
shipped manifests deploy it (``deploy/`` applied server-side, a TokenRequest token of the controller's own
ServiceAccount, so RBAC is what the API server enforces) against a cluster that serves Karpenter NodePools,
CapacityBuffers, Kueue and Volcano. This module holds what those tests share:

* :func:`audit_args`: kube-apiserver flags and an audit policy logging every request of the controller's
  ServiceAccount (and nobody else's), and :func:`audit_uses` reading the log back as RBAC-shaped uses;
* :func:`bound_grants` / :func:`authorizes`: what ``deploy/rbac.yaml`` grants that ServiceAccount, rule by rule,
  and RBAC's matching of a use against a grant (group, resource/subresource, verb, namespace, resourceNames);
* :func:`seed_fleet`: the objects a tick acts on. The Deployments are named like the backfilled vLLM pods of
  ``tests/servers.py`` (``serving/llama-chat`` has eight days of history, ``serving/mistral-code`` two hours), so
  the forecasts come from real Prometheus answers; ``research/qwen-eval`` carries a contradictory annotation;
  a GPU NodePool; a held, scheduled Kueue Workload and a scheduled Volcano PodGroup;
* :func:`snapshot`: every object's resourceVersion, to prove what a tick did *not* write;
* :func:`run_cli` / :func:`run_cli_process`: the CLI in this process (fast) or as a child process (real stderr);
* :func:`replicaset_pods` (a ReplicaSet and its pods, with the status a kubelet would write) and
  :func:`sa_controller` (the loop as the ServiceAccount, keeping its memory between ticks): a scale-down and the
  ``pod-deletion-cost`` marks it sets on the idlest pods.

There is no controller-manager: the Deployments' ``status`` is written here, as a rollout would.
"""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import yaml
from kubernetes import client
from kubernetes.dynamic import DynamicClient

from autoscaler.adapters.kube import MERGE_PATCH, KubeCluster, api_client_from_config
from autoscaler.adapters.prometheus import PrometheusSource
from autoscaler.cli import main
from autoscaler.config.parser import load_config
from autoscaler.domain.annotations import PREFIX
from autoscaler.domain.status import STATUS_SELECTOR
from autoscaler.runtime.loop import Controller
from tests.kube.conftest import deployment, nodepool
from tests.kubeserver import REPO, ensure_namespace, metadata, name_of

CONTROLLER_NAMESPACE = "predictive-autoscaler"
SERVICE_ACCOUNT = "predictive-autoscaler"
SA_USER = f"system:serviceaccount:{CONTROLLER_NAMESPACE}:{SERVICE_ACCOUNT}"
LEASE = "predictive-autoscaler"
GPU = "nvidia.com/gpu"

SERVING, RESEARCH, TRAINING = "serving", "research", "training"
POOL = "gpu-pool"
POOL_LIMIT = 8  # the NodePool's GPU limit before the controller manages it
WORKLOAD = "nightly-finetune"  # held Kueue Workload (spec.active: false)
PODGROUP = "rl-gang"  # Volcano PodGroup
BUFFER = "llama-chat-headroom"  # the CapacityBuffer the controller names after llama-chat
PLACEHOLDER = f"headroom-{POOL}"  # the placeholder Deployment for the pool
PLACEHOLDER_CLASS = "predictive-autoscaler-headroom"
KUEUE = ("kueue.x-k8s.io", "v1beta1", "workloads")
LOCAL_QUEUES = ("kueue.x-k8s.io", "v1beta1", "localqueues")
CLUSTER_QUEUES = ("kueue.x-k8s.io", "v1beta1", "clusterqueues")
VOLCANO = ("scheduling.volcano.sh", "v1beta1", "podgroups")
KARPENTER = ("karpenter.sh", "v1", "nodepools")
BUFFERS = ("autoscaling.x-k8s.io", "v1beta1", "capacitybuffers")


def iso(t: int) -> str:
    return datetime.fromtimestamp(t, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# ---- the controller's configuration -------------------------------------------------------------------

CONFIG = """\
loop:
  interval: 1m
  history: 1d
  step: 1m
profiles:
  default:
    history: 1d
    horizon: 30m
    scale_down_stabilization: {stabilization}
prometheus:
  url: {url}
  retries: 0
  timeout: 10s
leader_election:
  lease_name: {lease}
  lease_namespace: {lease_namespace}
  lease_duration: 15s
cold_start:
  node_startup: 20m
ceilings:
  cluster: {ceiling}
karpenter:
  enabled: true
  headroom: {headroom}
  namespace: {namespace}
"""


def write_config(path: Path, prometheus_url: str, *, headroom: str = "capacitybuffer",
                 lease_namespace: str = CONTROLLER_NAMESPACE, ceiling: float = 1000.0,
                 stabilization: str = "10m") -> Path:
    """The operator configuration of these tests: one day of 1-minute history, a 30-minute horizon (longer than
    the cold start, pod + node), a cluster ceiling (so NodePool limits are managed), headroom as asked, the
    Lease and placeholder pods in the controller's namespace.

    A 20-minute node start-up: headroom is asked for the replicas needed one node start-up beyond the plan's
    own lead, and over 20 minutes of the backfill's daily cycle the forecast rises by more than a replica.

    ``stabilization``: the scale-down window (a first decision never scales down, so a scale-down needs two ticks
    of one controller more than the window apart: :func:`sa_controller`)."""
    path.write_text(CONFIG.format(url=prometheus_url, lease=LEASE, lease_namespace=lease_namespace,
                                  ceiling=ceiling, headroom=headroom, namespace=CONTROLLER_NAMESPACE,
                                  stabilization=stabilization),
                    encoding="utf-8")
    return path


# ---- running the CLI ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CliResult:
    code: int
    out: str
    err: str

    def plan(self) -> dict[str, Any]:
        """The ``--dry-run`` plan printed on stdout."""
        parsed: dict[str, Any] = json.loads(self.out)
        return parsed


def run_cli(*argv: str) -> CliResult:
    """``predictive-autoscaler ARGV`` through ``autoscaler.cli.main`` in this process (stdout/stderr captured;
    log records go to pytest's handlers, not to the captured stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return CliResult(code, out.getvalue(), err.getvalue())


def run_cli_process(*argv: str, timeout: float = 300.0) -> CliResult:
    """``python -m autoscaler.cli ARGV`` as a child process: what a user sees on stderr, logging included."""
    done = subprocess.run([sys.executable, "-m", "autoscaler.cli", *argv], cwd=REPO, capture_output=True,
                          text=True, timeout=timeout, check=False)
    return CliResult(done.returncode, done.stdout, done.stderr)


# ---- the fleet --------------------------------------------------------------------------------------------


def _gpu_deployment(namespace: str, name: str, replicas: int, annotations: Mapping[str, str]) -> dict[str, Any]:
    obj = deployment(namespace, name, replicas=replicas, annotations=dict(annotations))
    obj.pop("status")
    (container,) = obj["spec"]["template"]["spec"]["containers"]
    container["resources"] = {"requests": {GPU: "1"}, "limits": {GPU: "1"}}
    return obj


def as_dict(obj: object) -> dict[str, Any]:
    """A custom object as ``CustomObjectsApi`` returns it: its JSON dict (the client's signatures say ``object``)."""
    return cast(dict[str, Any], obj)


def set_ready(api: client.ApiClient, namespace: str, name: str, replicas: int) -> None:
    """Write what the deployment controller would after a finished rollout: every replica Ready."""
    client.AppsV1Api(api).patch_namespaced_deployment_status(name, namespace, {"status": {
        "replicas": replicas, "readyReplicas": replicas, "availableReplicas": replicas, "updatedReplicas": replicas,
    }})


def gang_annotations(start: int, duration: str) -> dict[str, str]:
    """A scheduled gang whose window is the single instant ``start``: its planned start is exactly ``start``."""
    return {PREFIX + "start-after": iso(start), PREFIX + "deadline": iso(start), PREFIX + "duration": duration}


def seed_fleet(api: client.ApiClient, *, workload_start: int, podgroup_start: int) -> None:
    """Create the fleet (as admin): namespaces, the GPU NodePool (no nodes yet), three annotated vLLM
    Deployments (one malformed) with their status, a held scheduled Kueue Workload and a Volcano PodGroup."""
    for namespace in (SERVING, RESEARCH, TRAINING):
        ensure_namespace(api, namespace)
    custom = client.CustomObjectsApi(api)
    pool = nodepool(POOL, gpu_limit=POOL_LIMIT, gpus_in_use=0, nodes=0)
    status = pool.pop("status")
    custom.create_cluster_custom_object(*KARPENTER, pool)
    custom.patch_cluster_custom_object_status(*KARPENTER, POOL, {"status": status}, _content_type=MERGE_PATCH)

    apps = client.AppsV1Api(api)
    fleet = (
        # ~2.5 req/s at 0.2 req/s per replica: the forecast needs far more than 2 replicas.
        (_gpu_deployment(SERVING, "llama-chat", 2, {PREFIX + "capacity-per-replica": "0.2",
                                                    PREFIX + "max-replicas": "40", PREFIX + "nodepool": POOL}), 2),
        # < 1 req/s at 5 req/s per replica: one replica holds.
        (_gpu_deployment(SERVING, "mistral-code", 1, {PREFIX + "capacity-per-replica": "5",
                                                      PREFIX + "max-replicas": "20", PREFIX + "nodepool": POOL}), 1),
        # min > max: a Warning Event naming the key, and the Deployment is left alone.
        (_gpu_deployment(RESEARCH, "qwen-eval", 1, {PREFIX + "min-replicas": "5", PREFIX + "max-replicas": "2"}), 1),
    )
    for obj, replicas in fleet:
        meta = obj["metadata"]
        apps.create_namespaced_deployment(meta["namespace"], cast(Any, obj))  # cast: the client validates a dict
        set_ready(api, meta["namespace"], meta["name"], replicas)

    trainer = {"name": "trainer", "image": "nvcr.io/nvidia/pytorch:24.05-py3",
               "resources": {"requests": {GPU: "8"}, "limits": {GPU: "8"}}}
    workload = {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "Workload",
        "metadata": {"name": WORKLOAD, "namespace": TRAINING, "annotations": gang_annotations(workload_start, "4h")},
        "spec": {
            "active": False,  # held: the controller starts it at its planned start
            "queueName": "gpu-queue",
            "podSets": [{"name": "workers", "count": 1, "template": {"spec": {
                "nodeSelector": {"karpenter.sh/nodepool": POOL}, "restartPolicy": "Never", "containers": [trainer],
            }}}],
        },
    }
    custom.create_namespaced_custom_object(*KUEUE[:2], TRAINING, KUEUE[2], workload)
    seed_queues(custom)
    podgroup = {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": PODGROUP, "namespace": TRAINING,
                     "annotations": {**gang_annotations(podgroup_start, "2h"), PREFIX + "nodepool": POOL}},
        "spec": {"minMember": 2, "minResources": {GPU: "16"}, "queue": "training"},
        "status": {"phase": "Pending"},
    }
    custom.create_namespaced_custom_object(*VOLCANO[:2], TRAINING, VOLCANO[2], podgroup)


def seed_queues(custom: client.CustomObjectsApi, *, gpus: int = 16) -> None:
    """Kueue's queues for the held Workload's ``spec.queueName``: LocalQueue ``training/gpu-queue`` -> ClusterQueue
    ``gpu`` with ``gpus`` of GPU quota, so Kueue could admit it (and nodes may be held for it ahead)."""
    custom.create_cluster_custom_object(*CLUSTER_QUEUES, {
        "apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ClusterQueue", "metadata": {"name": "gpu"},
        "spec": {"namespaceSelector": {}, "resourceGroups": [{"coveredResources": [GPU], "flavors": [
            {"name": "default-flavor", "resources": [{"name": GPU, "nominalQuota": gpus}]}]}]},
    })
    custom.create_namespaced_custom_object(*LOCAL_QUEUES[:2], TRAINING, LOCAL_QUEUES[2], {
        "apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "LocalQueue",
        "metadata": {"name": "gpu-queue", "namespace": TRAINING}, "spec": {"clusterQueue": "gpu"},
    })


# ---- pods of a Deployment (no controller-manager: a ReplicaSet and its pods are created here) ----------------

LLAMA_HASH = "7d9f8b6c5d"  # the backfilled llama-chat pods are llama-chat-7d9f8b6c5d-{x7k2p,q9w4z}
HOLD_FINALIZER = "predictive-autoscaler.io/test-hold"  # keeps a deleted pod Terminating (reset_fleet drops it)


def replicaset_pods(api: client.ApiClient, namespace: str, deployment: str, template_hash: str,
                    pods: Mapping[str, int | None], *, terminating: Sequence[str] = ()) -> dict[str, str]:
    """A ReplicaSet ``<deployment>-<template_hash>`` and its pods, as the Deployment and ReplicaSet controllers
    would make them: labels matching the Deployment's selector plus ``pod-template-hash``, a controlling
    ownerReference, and the status a kubelet would write. ``pods`` maps a pod-name suffix to the Unix time it
    turned Ready (None: scheduled, still starting). Suffixes in ``terminating`` are deleted at once (held by a
    finalizer, so they stay Terminating). Returns suffix -> pod name."""
    apps, core = client.AppsV1Api(api), client.CoreV1Api(api)
    labels = {"app": deployment, "pod-template-hash": template_hash}
    rs_name = f"{deployment}-{template_hash}"
    container = {"name": "server", "image": "vllm/vllm-openai:v0.6.0"}
    rs = apps.create_namespaced_replica_set(namespace, cast(Any, {  # cast: the client validates a dict into its model
        "metadata": {"name": rs_name, "labels": labels},
        "spec": {"replicas": len(pods), "selector": {"matchLabels": labels},
                 "template": {"metadata": {"labels": labels}, "spec": {"containers": [container]}}},
    }))
    owner = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": rs_name, "uid": metadata(rs).uid,
             "controller": True, "blockOwnerDeletion": True}
    names: dict[str, str] = {}
    for suffix, ready_at in pods.items():
        name = names[suffix] = f"{rs_name}-{suffix}"
        meta: dict[str, Any] = {"name": name, "labels": labels, "ownerReferences": [owner]}
        if suffix in terminating:
            meta["finalizers"] = [HOLD_FINALIZER]
        core.create_namespaced_pod(namespace, cast(Any, {"metadata": meta, "spec": {"containers": [container]}}))
        scheduled = {"type": "PodScheduled", "status": "True", "lastTransitionTime": iso(ready_at or 0)}
        ready = {"type": "Ready", "status": "True" if ready_at is not None else "False",
                 "lastTransitionTime": iso(ready_at or 0)}
        core.patch_namespaced_pod_status(name, namespace, {"status": {
            "phase": "Running" if ready_at is not None else "Pending", "conditions": [scheduled, ready]}})
        if suffix in terminating:
            core.delete_namespaced_pod(name, namespace)
    return names


def sa_controller(kubeconfig: Path, config: Path, *, dry_run: bool = False) -> tuple[Controller, PrometheusSource]:
    """The control loop in this process, as the ServiceAccount of ``kubeconfig`` (RBAC enforced, audited), with the
    configuration at ``config`` and no money-stage adapters. Unlike ``run --once`` it keeps its memory between
    ticks, which a scale-down needs (a first decision holds: nothing shows the stabilisation window agreed).
    Close the source."""
    cfg = load_config(config)
    source = PrometheusSource(cfg.prometheus.url, retries=0, timeout_seconds=10, queries=cfg.prometheus.queries)
    cluster = KubeCluster(api_client_from_config(kubeconfig), instance="sa-controller")
    return Controller(cluster, source, lambda: cfg, dry_run=dry_run), source


def reset_fleet(api: client.ApiClient) -> None:
    """Delete (as admin) everything :func:`seed_fleet` made and everything a tick may have made: the fleet's
    Deployments, Events, HorizontalPodAutoscalers, CapacityBuffers, gangs and NodePool, the placeholder Deployments,
    the placeholder PriorityClass, the leader Lease and the status objects. Nothing holds finalizers here (no
    controllers), so all of it is gone at once and the next test starts from a cluster where every create path is
    taken again."""
    apps, core = client.AppsV1Api(api), client.CoreV1Api(api)
    custom = client.CustomObjectsApi(api)
    for namespace in (SERVING, RESEARCH, TRAINING):
        ensure_namespace(api, namespace)
        apps.delete_collection_namespaced_deployment(namespace)
        for pod in core.list_namespaced_pod(namespace).items:
            if metadata(pod).finalizers:
                core.patch_namespaced_pod(name_of(pod), namespace, {"metadata": {"finalizers": None}})
        core.delete_collection_namespaced_pod(namespace)
        apps.delete_collection_namespaced_replica_set(namespace)
        core.delete_collection_namespaced_event(namespace)
        client.AutoscalingV2Api(api).delete_collection_namespaced_horizontal_pod_autoscaler(namespace)
        # the status objects (no garbage collector runs here to delete them with their Deployments)
        core.delete_collection_namespaced_config_map(namespace, label_selector=STATUS_SELECTOR)
        custom.delete_collection_namespaced_custom_object(*BUFFERS[:2], namespace, BUFFERS[2])
        custom.delete_collection_namespaced_custom_object(*KUEUE[:2], namespace, KUEUE[2])
        custom.delete_collection_namespaced_custom_object(*LOCAL_QUEUES[:2], namespace, LOCAL_QUEUES[2])
        custom.delete_collection_namespaced_custom_object(*VOLCANO[:2], namespace, VOLCANO[2])
    apps.delete_collection_namespaced_deployment(CONTROLLER_NAMESPACE,
                                                 label_selector="app.kubernetes.io/managed-by=predictive-autoscaler")
    core.delete_collection_namespaced_event(CONTROLLER_NAMESPACE)
    custom.delete_collection_cluster_custom_object(*KARPENTER)
    custom.delete_collection_cluster_custom_object(*CLUSTER_QUEUES)
    with contextlib.suppress(client.exceptions.NotFoundException):
        client.SchedulingV1Api(api).delete_priority_class(PLACEHOLDER_CLASS)
    with contextlib.suppress(client.exceptions.NotFoundException):
        client.CoordinationV1Api(api).delete_namespaced_lease(LEASE, CONTROLLER_NAMESPACE)


# ---- state --------------------------------------------------------------------------------------------------

SNAPSHOT_KINDS = (
    ("apps/v1", "Deployment"),
    ("v1", "ConfigMap"),
    ("v1", "Event"),
    ("v1", "Pod"),
    ("coordination.k8s.io/v1", "Lease"),
    ("scheduling.k8s.io/v1", "PriorityClass"),
    ("karpenter.sh/v1", "NodePool"),
    ("autoscaling.x-k8s.io/v1beta1", "CapacityBuffer"),
    ("kueue.x-k8s.io/v1beta1", "Workload"),
    ("scheduling.volcano.sh/v1beta1", "PodGroup"),
)

Key = tuple[str, str, str]  # kind, namespace ("" when cluster-scoped), name


def snapshot(api: client.ApiClient) -> dict[Key, str]:
    """``(kind, namespace, name) -> resourceVersion`` of every object of the kinds a tick could write, except in
    ``kube-system`` (the API server renews its own identity Lease there every few seconds)."""
    dynamic = DynamicClient(api)  # type: ignore[no-untyped-call]  # kubernetes.dynamic is unannotated
    out: dict[Key, str] = {}
    for api_version, kind in SNAPSHOT_KINDS:
        for item in dynamic.resources.get(api_version=api_version, kind=kind).get().items:
            meta = item.metadata
            if meta.namespace != "kube-system":
                out[(kind, meta.namespace or "", meta.name)] = meta.resourceVersion
    return out


def changes(before: Mapping[Key, str], after: Mapping[Key, str]) -> dict[str, list[Key]]:
    """What differs between two snapshots: objects created, changed (resourceVersion) and deleted."""
    return {
        "created": sorted(set(after) - set(before)),
        "changed": sorted(k for k in set(before) & set(after) if before[k] != after[k]),
        "deleted": sorted(set(before) - set(after)),
    }


# ---- audit and RBAC -----------------------------------------------------------------------------------------

AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [
        {"level": "Metadata", "users": [SA_USER]},
        {"level": "None"},
    ],
}


def audit_args(directory: Path) -> tuple[list[str], Path]:
    """kube-apiserver flags that log every request of the controller's ServiceAccount, and the log's path."""
    directory.mkdir(parents=True, exist_ok=True)
    policy = directory / "audit-policy.yaml"
    policy.write_text(yaml.safe_dump(AUDIT_POLICY), encoding="utf-8")
    log = directory / "audit.log"
    return [f"--audit-policy-file={policy}", f"--audit-log-path={log}", "--audit-log-format=json",
            "--audit-log-mode=blocking"], log


def audit_size(log: Path, *, settle_seconds: float = 0.5, timeout: float = 10.0) -> int:
    """The audit log's size once it has stopped growing for ``settle_seconds`` (the server writes an event's
    ResponseComplete stage just after answering): an offset after which only later requests are logged."""
    deadline = time.monotonic() + timeout
    size = -1
    while True:
        now_size = log.stat().st_size if log.exists() else 0
        if now_size == size or time.monotonic() > deadline:
            return now_size
        size = now_size
        time.sleep(settle_seconds)


def audit_events(log: Path, *, offset: int = 0) -> list[dict[str, Any]]:
    """The ResponseComplete audit events written after byte ``offset``, once the log has settled."""
    audit_size(log)
    if not log.exists():
        return []
    with log.open("rb") as f:
        f.seek(offset)
        data = f.read()
    events = [json.loads(line) for line in data.decode().splitlines() if line.strip()]
    return [e for e in events if e.get("stage") == "ResponseComplete"]


@dataclass(frozen=True, order=True)
class Use:
    """One request as RBAC sees it. ``namespace`` None: a cluster-scoped object or an all-namespaces list."""

    group: str
    resource: str  # "deployments/scale" for a subresource
    verb: str
    namespace: str | None
    name: str | None

    def scope(self) -> str:
        return "cluster-wide" if self.namespace is None else (
            f"namespace {self.namespace}" if self.namespace == CONTROLLER_NAMESPACE else "workload namespaces")

    def row(self) -> tuple[str, str, str, str]:
        return self.group or "core", self.resource, self.verb, self.scope()


def audit_uses(events: Iterable[Mapping[str, Any]], user: str = SA_USER) -> tuple[list[Use], list[str]]:
    """The resource requests of ``user`` as ``Use`` values, and its non-resource paths (API discovery)."""
    uses: list[Use] = []
    paths: list[str] = []
    for e in events:
        if (e.get("user") or {}).get("username") != user:
            continue
        ref = e.get("objectRef")
        if not ref or not ref.get("resource"):
            paths.append(str(e.get("requestURI", "")).partition("?")[0])
            continue
        resource = ref["resource"] + (f"/{ref['subresource']}" if ref.get("subresource") else "")
        uses.append(Use(ref.get("apiGroup") or "", resource, str(e["verb"]), ref.get("namespace") or None,
                        ref.get("name") or None))
    return uses, paths


@dataclass(frozen=True, order=True)
class Grant:
    """One (group, resource, verb[, resourceName]) of a rule, where its binding applies (None: everywhere)."""

    role: str
    namespace: str | None
    group: str
    resource: str
    verb: str
    name: str | None

    def row(self) -> tuple[str, str, str, str]:
        where = "cluster-wide" if self.namespace is None else f"namespace {self.namespace}"
        return self.group or "core", self.resource, self.verb, where + (f", name {self.name}" if self.name else "")


def bound_grants(objects: Sequence[Mapping[str, Any]], namespace: str = CONTROLLER_NAMESPACE,
                 service_account: str = SERVICE_ACCOUNT) -> list[Grant]:
    """Every grant the (Cluster)RoleBindings among ``objects`` give ``namespace/service_account``."""
    roles = {(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]): o for o in objects
             if o["kind"] in ("Role", "ClusterRole")}
    subject = {"kind": "ServiceAccount", "name": service_account, "namespace": namespace}
    grants: list[Grant] = []
    for binding in objects:
        if binding["kind"] not in ("RoleBinding", "ClusterRoleBinding") or subject not in binding.get("subjects", []):
            continue
        where = binding["metadata"].get("namespace") if binding["kind"] == "RoleBinding" else None
        ref = binding["roleRef"]
        role = roles[(ref["kind"], where if ref["kind"] == "Role" else None, ref["name"])]
        for rule in role["rules"]:
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    for verb in rule["verbs"]:
                        for name in rule.get("resourceNames") or [None]:
                            grants.append(Grant(f"{role['kind']}/{ref['name']}", where, group, resource, verb, name))
    return sorted(set(grants))


def authorizes(grant: Grant, use: Use) -> bool:
    """RBAC's rule matching (no wildcards in our rules: the manifest tests forbid them)."""
    return (grant.group == use.group and grant.resource == use.resource and grant.verb == use.verb
            and (grant.namespace is None or grant.namespace == use.namespace)
            and (grant.name is None or grant.name == use.name))
