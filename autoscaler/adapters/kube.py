"""``Cluster`` over the official ``kubernetes`` client: list opted-in Deployments (and the HorizontalPodAutoscalers,
which may scale them too), read pod start-ups, scale,
publish status (a ConfigMap per Deployment, ``autoscaler.domain.status``), post Events, annotate pods (the
``pod-deletion-cost`` marks of a scale-down).

Why it exists: this is the one place that knows the Kubernetes wire format. Everything it returns is a
plain view from ``autoscaler.ports``; every write either succeeds or raises ``KubeWriteError`` with one
line naming the object, the HTTP status and the API server's message (a limiter or a write that fails
silently would leave operators trusting a plan that never happened; docs/ARCHITECTURE.md, "Limits are
loud").

Choices, and why:

* Patches are sent as ``application/merge-patch+json``. The client (v37) picks
  ``application/json-patch+json`` first from the endpoint's list and then, because our body is a dict,
  rewrites it to ``strategic-merge-patch+json`` (``kubernetes/client/rest.py``). Strategic merge works for
  built-in kinds but not for custom resources and has list-merge semantics nobody needs for one
  annotation or one integer, so we pass ``_content_type`` explicitly: RFC 7386, same on every kind.
* Every write to someone else's object (the scale, a NodePool's limit) reads first and is skipped when the
  object already has the value, so a steady state writes nothing (no resourceVersion churn for GitOps tools and
  watchers). The patch itself carries no resourceVersion precondition: the controller owns that one field, so
  "last writer wins" is right, and a precondition would only turn the deployment controller's frequent status
  updates into conflicts.
  The status object (``autoscaler.domain.status``) is the controller's own, so it is not read before each write:
  it is compared with what the controller last read or wrote of it (one label-selected list per namespace when its
  Deployments are first seen, then each write's answer) and replaced whole with that resourceVersion (optimistic
  concurrency: whoever else changed it meanwhile makes the write a ``409``, which re-reads it and retries; one
  deleted meanwhile is created again; a ConfigMap of that name without our label is never overwritten). No
  ``get``: that re-read is a list with a field selector, so ``list``, ``create`` and ``update`` on ConfigMaps are
  all the status needs, each used in ordinary ticks.
  Pod annotations are the exception to "read first": the loop decides from the pods it has just listed, and a
  ``get`` per pod would be one more verb on pods in the RBAC for nothing (``patch`` is the only one added). The
  read that shows the marks in place before a scale is the next list of the Deployment's pods (the same grant).
* ``409 Conflict`` (the API server gave up its internal retries, or an admission webhook reported a
  conflict) is retried a bounded number of times: re-read, compare, patch again. Anything else, and
  running out of retries, raises ``KubeWriteError``.
* Events use ``generateName`` (``<deployment>.``) so two Events in the same tick never collide on a name
  derived from the (injected, possibly frozen) clock.
* Start-up durations are ``Ready.lastTransitionTime - creationTimestamp`` for Ready pods whose containers
  never restarted: after a restart the Ready transition time measures the restart, not the start-up.
* The GPUs of a NodePool's nodes (``pool_gpus``: the free GPUs give the engine's lead, since a replica that finds a
  free GPU waits for no node; the busy nodes, the free GPUs on them and the node count size the pool's node headroom)
  are counted as the scheduler counts them: a Ready, schedulable node's allocatable ``nvidia.com/gpu`` minus the
  requests of the pods bound to it (terminating ones included: they hold their GPUs until they are gone; our own
  headroom placeholders excepted: real replicas preempt them). Nodes are found by Karpenter's
  ``karpenter.sh/nodepool`` label, their pods by ``spec.nodeName`` (one list per node, not every pod of the
  cluster); ``list`` on nodes is the one grant this adds.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from autoscaler.domain.annotations import ENABLED_LABEL, GPU_RESOURCE, STATUS_ANNOTATION, fit_event_message
from autoscaler.domain.scaledown import MARK_LABEL
from autoscaler.domain.status import (
    DEPLOYMENT_LABEL,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    STATUS_DATA_KEY,
    STATUS_SELECTOR,
    deployment_label,
    encode_status,
    status_object_name,
)
from autoscaler.ports import (
    EventType,
    NotReadyPod,
    PodStartups,
    PodView,
    PoolGpus,
    ScalerView,
    StatusObject,
    StatusWrite,
    WorkloadView,
)

MERGE_PATCH = "application/merge-patch+json"
NODEPOOL_LABEL = "karpenter.sh/nodepool"  # Karpenter puts it on every node it launches for a NodePool
COMPONENT = "predictive-autoscaler"
NAME_LABEL = "app.kubernetes.io/name"
PLACEHOLDER_NAME = "predictive-autoscaler-headroom"  # the name label of our headroom placeholders (karpenter.py)
ENABLED_SELECTOR = f"{ENABLED_LABEL}=true"

T = TypeVar("T")


class KubeError(Exception):
    """A Kubernetes API failure the controller cannot paper over; the message is one line."""


class KubeReadError(KubeError):
    """Listing or reading failed: the tick has no trustworthy snapshot and must not act."""


class KubeWriteError(KubeError):
    """A write (scale, status, Event) failed after bounded retries."""


class KubeConfigError(KubeError):
    """No usable kubeconfig or in-cluster service account."""


def _check_config_exists(kubeconfig: str | Path | None) -> None:
    """A one-line ``KubeConfigError`` when the config to load is not there (the client would say "Invalid
    kube-config file" about a file that does not exist)."""
    if kubeconfig is not None:
        path = Path(kubeconfig).expanduser()
        if path.is_dir():
            raise KubeConfigError(f"kubeconfig {kubeconfig} is a directory, not a file")
        if not path.exists():
            raise KubeConfigError(f"kubeconfig {kubeconfig} does not exist")
        return
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        return  # in a pod: the service account is used
    env = os.environ.get("KUBECONFIG", "")
    files = [f for f in env.split(os.pathsep) if f.strip()]
    if files:
        if not any(Path(f).expanduser().is_file() for f in files):
            which = "which does not exist" if len(files) == 1 else "none of which exists"
            raise KubeConfigError(f"$KUBECONFIG is {env}, {which}; fix it or pass --kubeconfig PATH")
    elif not Path("~/.kube/config").expanduser().is_file():
        raise KubeConfigError(
            "no Kubernetes config: not running in a cluster, $KUBECONFIG is not set and ~/.kube/config does not "
            "exist; pass --kubeconfig PATH"
        )


def api_client_from_config(kubeconfig: str | Path | None = None, context: str | None = None) -> client.ApiClient:
    """An ApiClient from a kubeconfig path, or in-cluster config when running in a pod and no path is given.

    Without a path and outside a pod, ``$KUBECONFIG`` / ``~/.kube/config`` are used. Token refreshes are not
    written back into the file (``persist_config=False``): the controller never edits a user's kubeconfig.
    """
    _check_config_exists(kubeconfig)
    cfg = client.Configuration()
    try:
        if kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
            config.load_incluster_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
        else:
            config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=None if kubeconfig is None else str(kubeconfig),
                context=context,
                client_configuration=cfg,
                persist_config=False,
            )
    except (config.ConfigException, OSError, TypeError, ValueError) as exc:
        where = str(kubeconfig) if kubeconfig is not None else os.environ.get("KUBECONFIG", "~/.kube/config")
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise KubeConfigError(f"cannot load Kubernetes config from {where}: {detail}") from exc
    return client.ApiClient(cfg)


def render_selector(selector: Mapping[str, Any] | None) -> str:
    """A LabelSelector (API JSON) as a label-selector query string.

    ``matchExpressions`` are rendered too: dropping them would select pods of other workloads.
    """
    if not selector:
        return ""
    parts = [f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items())]
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], sorted(expr.get("values") or [])
        if op == "In":
            parts.append(f"{key} in ({','.join(values)})")
        elif op == "NotIn":
            parts.append(f"{key} notin ({','.join(values)})")
        elif op == "Exists":
            parts.append(key)
        elif op == "DoesNotExist":
            parts.append(f"!{key}")
        else:
            raise ValueError(f"unknown label selector operator {op!r} for key {key!r}")
    return ",".join(parts)


def core_event(
    api_version: str, kind: str, namespace: str, name: str, uid: str, type: EventType, reason: str, message: str,
    now: datetime, instance: str,
) -> client.CoreV1Event:
    """A core/v1 Event on one object from this controller (``instance``: the replica that posts it), its message
    cut to the API server's limit; the Deployments' Events and the training gangs' share it."""
    if type not in ("Normal", "Warning"):
        raise ValueError(f"event type must be 'Normal' or 'Warning', got {type!r}")
    if now.tzinfo is None:
        raise ValueError(f"event time must be timezone-aware (UTC), got naive {now.isoformat()}")
    return client.CoreV1Event(
        metadata=client.V1ObjectMeta(generate_name=f"{name}.", namespace=namespace),
        involved_object=client.V1ObjectReference(api_version=api_version, kind=kind, name=name, namespace=namespace,
                                                 uid=uid or None),
        type=type,
        reason=reason,
        message=fit_event_message(message),
        source=client.V1EventSource(component=COMPONENT),
        reporting_component=COMPONENT,
        reporting_instance=instance[:128],
        first_timestamp=now,
        last_timestamp=now,
        count=1,
    )


def api_message(exc: ApiException) -> str:
    body = exc.body
    message = ""
    if isinstance(body, str) and body:
        try:
            parsed = json.loads(body)
            message = str(parsed.get("message", "")) if isinstance(parsed, dict) else ""
        except ValueError:
            message = body.strip().splitlines()[0][:300]
    reason = exc.reason or ""
    return f"HTTP {exc.status} {reason}".strip() + (f": {message}" if message else "")


def api_read(host: str, what: str, call: Callable[[], T]) -> T:
    """Run one API read; any failure becomes a ``KubeReadError`` naming ``what`` (shared by every adapter)."""
    try:
        return call()
    except ApiException as exc:
        raise KubeReadError(f"{what}: {api_message(exc)}") from exc
    except urllib3.exceptions.HTTPError as exc:
        raise KubeReadError(f"{what}: cannot reach the API server at {host}") from exc


def list_all(host: str, what: str, page_of: Callable[[str | None], Any]) -> Iterator[Any]:
    """Every item of a paged list, read a page at a time: ``page_of(token)`` asks for one page (``limit`` and
    ``_continue=token``), each read through ``api_read``; the next token is the page's ``metadata.continue``, which the
    generated model names ``var_continue`` (``continue`` is a Python keyword). Shared by every adapter."""
    token: str | None = None
    while True:
        page = api_read(host, what, lambda token=token: page_of(token))  # type: ignore[misc]
        yield from page.items or []
        token = getattr(page.metadata, "var_continue", None) if page.metadata is not None else None
        if not token:
            return


def api_write(
    host: str,
    what: str,
    attempt_once: Callable[[], bool],
    *,
    retries: int,
    backoff_seconds: float,
    sleep: Callable[[float], None],
) -> bool:
    """Run read-compare-patch; retry a 409 Conflict ``retries`` times with growing back-off; any other failure
    (or conflicts beyond that) raises ``KubeWriteError``: a write is retried or reported, never dropped."""
    for attempt in range(retries + 1):
        try:
            return attempt_once()
        except ApiException as exc:
            if exc.status == 409 and attempt < retries:
                sleep(backoff_seconds * (attempt + 1))
                continue
            suffix = f" (after {attempt + 1} attempts)" if exc.status == 409 else ""
            raise KubeWriteError(f"{what}: {api_message(exc)}{suffix}") from exc
        except urllib3.exceptions.HTTPError as exc:
            raise KubeWriteError(f"{what}: cannot reach the API server at {host}") from exc
    raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises


def _whole_gpus(raw: Any) -> int:
    """An ``nvidia.com/gpu`` quantity as a whole count (extended resources are whole numbers; junk counts as 0)."""
    try:
        value = float(str(raw))
    except (TypeError, ValueError):
        return 0
    return max(0, int(value)) if value == value else 0


def node_gpus(node: client.V1Node) -> int:
    """The node's allocatable GPUs (0: none advertised)."""
    allocatable = (node.status.allocatable if node.status is not None else None) or {}
    return _whole_gpus(allocatable.get(GPU_RESOURCE, 0))


def node_schedulable(node: client.V1Node) -> bool:
    """Ready, not cordoned and not being deleted: a node a new pod can land on now."""
    if node.metadata is not None and node.metadata.deletion_timestamp is not None:
        return False
    if node.spec is not None and node.spec.unschedulable:
        return False
    conditions = (node.status.conditions if node.status is not None else None) or []
    return any(c.type == "Ready" and c.status == "True" for c in conditions)


def pod_gpus(pod: client.V1Pod) -> int:
    """The GPUs a pod holds on its node: its containers' requests summed (a limit alone is the request, as the API
    server defaults it), or its largest init container's when that is more."""
    def of(containers: Sequence[client.V1Container] | None) -> list[int]:
        out = []
        for c in containers or []:
            res = c.resources
            requests = (res.requests if res is not None else None) or {}
            limits = (res.limits if res is not None else None) or {}
            out.append(_whole_gpus(requests.get(GPU_RESOURCE, limits.get(GPU_RESOURCE, 0))))
        return out

    spec = pod.spec
    if spec is None:
        return 0
    return max(sum(of(spec.containers)), max(of(spec.init_containers), default=0))


def _placeholder(pod: client.V1Pod) -> bool:
    """Whether ``pod`` is one of our headroom placeholders (``autoscaler.adapters.karpenter``)."""
    labels = (pod.metadata.labels if pod.metadata is not None else None) or {}
    return labels.get(NAME_LABEL) == PLACEHOLDER_NAME and labels.get(MANAGED_BY_LABEL) == COMPONENT


class KubeCluster:
    """The ``Cluster`` port (and ``PoolNodes``) over one ``ApiClient``."""

    def __init__(
        self,
        api_client: client.ApiClient,
        *,
        instance: str | None = None,
        max_conflict_retries: int = 3,
        conflict_backoff_seconds: float = 0.1,
        request_timeout_seconds: float = 30.0,
        page_size: int = 500,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if max_conflict_retries < 0:
            raise ValueError(f"max_conflict_retries must be >= 0, got {max_conflict_retries}")
        self._api = api_client
        self._apps = client.AppsV1Api(api_client)
        self._core = client.CoreV1Api(api_client)
        self._autoscaling = client.AutoscalingV2Api(api_client)
        self._instance = instance or os.environ.get("POD_NAME") or os.environ.get("HOSTNAME") or COMPONENT
        self._retries = max_conflict_retries
        self._backoff = conflict_backoff_seconds
        self._timeout = request_timeout_seconds
        self._page_size = page_size
        self._sleep = sleep

    # ---- reads -----------------------------------------------------------------------------------

    def _read(self, what: str, call: Callable[[], T]) -> T:
        return api_read(self._api.configuration.host, what, call)

    def list_workloads(self) -> list[WorkloadView]:
        deployments = list_all(
            self._api.configuration.host, f"list deployments with label {ENABLED_SELECTOR}",
            lambda token: self._apps.list_deployment_for_all_namespaces(
                label_selector=ENABLED_SELECTOR, limit=self._page_size, _continue=token, _request_timeout=self._timeout,
            ),
        )
        return [self._view(self._api.sanitize_for_serialization(dep))  # type: ignore[no-untyped-call]
                for dep in deployments]

    def list_scalers(self) -> list[ScalerView]:
        views: list[ScalerView] = []
        for hpa in list_all(
            self._api.configuration.host, "list horizontalpodautoscalers",
            lambda token: self._autoscaling.list_horizontal_pod_autoscaler_for_all_namespaces(
                limit=self._page_size, _continue=token, _request_timeout=self._timeout,
            ),
        ):
            meta, ref = hpa.metadata, hpa.spec.scale_target_ref if hpa.spec is not None else None
            if meta is not None and ref is not None:
                views.append(ScalerView(meta.namespace or "", meta.name or "", ref.api_version or "", ref.kind or "",
                                        ref.name or ""))
        return views

    @staticmethod
    def _view(d: Mapping[str, Any]) -> WorkloadView:
        meta = d.get("metadata") or {}
        spec = d.get("spec") or {}
        status = d.get("status") or {}
        replicas = spec.get("replicas")
        return WorkloadView(
            namespace=meta.get("namespace", ""),
            name=meta.get("name", ""),
            uid=meta.get("uid", ""),
            resource_version=meta.get("resourceVersion", ""),
            labels=dict(meta.get("labels") or {}),
            annotations=dict(meta.get("annotations") or {}),
            replicas=1 if replicas is None else int(replicas),
            ready_replicas=int(status.get("readyReplicas") or 0),
            selector=render_selector(spec.get("selector")),
            pod_template=spec.get("template") or {},
            rollout_stuck=KubeCluster._rollout_stuck(status),
        )

    @staticmethod
    def _rollout_stuck(status: Mapping[str, Any]) -> str | None:
        """The Deployment controller's verdict that the rollout is stuck: its ``Progressing`` condition False with
        reason ``ProgressDeadlineExceeded`` (no progress for ``progressDeadlineSeconds``), as one line."""
        for cond in status.get("conditions") or []:
            if (cond.get("type") == "Progressing" and cond.get("status") == "False"
                    and cond.get("reason") == "ProgressDeadlineExceeded"):
                message = " ".join(str(cond.get("message") or "").split())
                return "ProgressDeadlineExceeded" + (f": {message}" if message else "")
        return None

    def pod_startups(self, namespace: str, selector: str, now: datetime) -> PodStartups:
        pods = self._read(
            f"list pods in {namespace} with selector {selector!r}",
            lambda: self._core.list_namespaced_pod(namespace, label_selector=selector, _request_timeout=self._timeout),
        )
        durations: list[float] = []
        not_ready: list[NotReadyPod] = []
        views: list[PodView] = []
        for pod in pods.items or []:
            meta, status = pod.metadata, pod.status or client.V1PodStatus()
            created: datetime | None = meta.creation_timestamp if meta is not None else None
            if meta is None or created is None:
                continue
            phase = status.phase or "Pending"
            conditions = {c.type: c for c in (status.conditions or [])}
            ready = conditions.get("Ready")
            views.append(self._pod_view(meta, created, phase, ready, pod.spec))
            if meta.deletion_timestamp is not None or phase in ("Succeeded", "Failed"):
                continue
            if ready is not None and ready.status == "True":
                restarted = any((cs.restart_count or 0) > 0 for cs in (status.container_statuses or []))
                if ready.last_transition_time is not None and not restarted:
                    seconds = (ready.last_transition_time - created).total_seconds()
                    if seconds >= 0:
                        durations.append(seconds)
                continue
            scheduled_cond = conditions.get("PodScheduled")
            scheduled = scheduled_cond is not None and scheduled_cond.status == "True"
            not_ready.append(
                NotReadyPod(
                    name=meta.name or "",
                    age_seconds=max(0.0, (now - created).total_seconds()),
                    phase=phase,
                    scheduled=scheduled,
                    reason=None if scheduled or scheduled_cond is None else scheduled_cond.reason,
                    message=None if scheduled or scheduled_cond is None else scheduled_cond.message,
                )
            )
        return PodStartups(durations=tuple(durations), not_ready=tuple(not_ready), pods=tuple(views))

    def list_marked_pods(self, namespaces: Sequence[str]) -> list[PodView]:
        def listed(namespace: str | None) -> list[Any]:
            where = "all namespaces" if namespace is None else namespace
            page = self._read(
                f"list pods with label {MARK_LABEL} in {where}",
                lambda: (self._core.list_pod_for_all_namespaces(label_selector=MARK_LABEL,
                                                                _request_timeout=self._timeout)
                         if namespace is None else
                         self._core.list_namespaced_pod(namespace, label_selector=MARK_LABEL,
                                                        _request_timeout=self._timeout)),
            )
            return list(page.items or [])

        items = [pod for ns in namespaces for pod in listed(ns)] if namespaces else listed(None)
        views: list[PodView] = []
        for pod in items:
            meta, status = pod.metadata, pod.status or client.V1PodStatus()
            if meta is None or meta.creation_timestamp is None:
                continue
            ready = next((c for c in status.conditions or [] if c.type == "Ready"), None)
            views.append(self._pod_view(meta, meta.creation_timestamp, status.phase or "Pending", ready, pod.spec))
        return views

    @staticmethod
    def _pod_view(meta: client.V1ObjectMeta, created: datetime, phase: str, ready: Any,
                  spec: client.V1PodSpec | None) -> PodView:
        owner = next((o.name for o in meta.owner_references or [] if o.controller and o.kind == "ReplicaSet"), None)
        ready_at = ready.last_transition_time if ready is not None and ready.status == "True" else None
        return PodView(
            name=meta.name or "",
            created=created.timestamp(),
            # Ready without a transition time (never seen from a kubelet): Ready since it was created.
            ready_since=None if ready is None or ready.status != "True" else (ready_at or created).timestamp(),
            phase=phase,
            terminating=meta.deletion_timestamp is not None,
            owner_replicaset=owner,
            template_hash=(meta.labels or {}).get("pod-template-hash"),
            annotations=dict(meta.annotations or {}),
            labels=dict(meta.labels or {}),
            namespace=meta.namespace or "",
            node=(spec.node_name or None) if spec is not None else None,
        )

    def pool_gpus(self, pools: Sequence[str]) -> dict[str, PoolGpus]:
        """The GPUs of each NodePool's nodes (``ports.PoolNodes``): one list of the pools' nodes (label selector),
        then one list of the pods bound to each Ready, schedulable node among them (field selector ``spec.nodeName``).
        Both lists ask ``resourceVersion=0``: the API server answers from its watch cache (the pods' indexed by node)
        instead of a consistent read, which before Kubernetes 1.31's consistent reads from the cache goes to etcd,
        and etcd has no index by node: every per-node list would scan every pod of the cluster, each tick. A cache a
        moment behind etcd is fine for a count re-read every tick. Our headroom placeholder pods hold no GPU here:
        every real replica preempts them, so their GPUs are free to it and their node is idle headroom."""
        counts = {pool: [0, 0, 0, 0] for pool in pools}  # free, busy nodes, free on busy nodes, nodes
        held: dict[str, dict[str, int]] = {pool: {} for pool in pools}  # GPUs requested on each node, by name
        if not counts:
            return {}
        selector = f"{NODEPOOL_LABEL} in ({','.join(sorted(counts))})"
        nodes = self._read(f"list nodes with label {selector!r}",
                           lambda: self._core.list_node(label_selector=selector, resource_version="0",
                                                        _request_timeout=self._timeout))
        for node in nodes.items or []:
            meta = node.metadata
            pool = (meta.labels or {}).get(NODEPOOL_LABEL) if meta is not None else None
            if meta is None or pool not in counts:
                continue
            c = counts[pool]
            c[3] += 1
            allocatable = node_gpus(node)
            if allocatable <= 0 or not node_schedulable(node):
                continue
            name = meta.name
            pods = self._read(
                f"list pods on node {name}",
                lambda name=name: self._core.list_pod_for_all_namespaces(  # type: ignore[misc]
                    field_selector=f"spec.nodeName={name}", resource_version="0", _request_timeout=self._timeout),
            )
            used = sum(pod_gpus(p) for p in pods.items or []
                       if (p.status is None or p.status.phase not in ("Succeeded", "Failed"))
                       and not _placeholder(p))
            free = max(0, allocatable - used)
            held[pool][name or ""] = used
            c[0] += free
            if used > 0:
                c[1] += 1
                c[2] += free
        return {pool: PoolGpus(free=c[0], busy_nodes=c[1], partial_free=c[2], nodes=c[3], node_gpus=held[pool])
                for pool, c in counts.items()}

    # ---- writes ----------------------------------------------------------------------------------

    def _write(self, what: str, attempt_once: Callable[[], bool]) -> bool:
        return api_write(
            self._api.configuration.host, what, attempt_once,
            retries=self._retries, backoff_seconds=self._backoff, sleep=self._sleep,
        )

    def scale(self, namespace: str, name: str, replicas: int) -> bool:
        if replicas < 0:
            raise ValueError(f"replicas must be >= 0, got {replicas} for deployment {namespace}/{name}")

        def once() -> bool:
            current = self._apps.read_namespaced_deployment_scale(name, namespace, _request_timeout=self._timeout)
            if current.spec is not None and current.spec.replicas == replicas:
                return False
            self._apps.patch_namespaced_deployment_scale(
                name,
                namespace,
                {"spec": {"replicas": replicas}},
                field_manager=COMPONENT,
                _content_type=MERGE_PATCH,
                _request_timeout=self._timeout,
            )
            return True

        return self._write(f"scale deployment {namespace}/{name} to {replicas}", once)

    def patch_pod_annotations(
        self, namespace: str, name: str, annotations: Mapping[str, str | None],
        labels: Mapping[str, str | None] | None = None,
    ) -> None:
        if not annotations and not labels:
            return
        metadata: dict[str, Any] = {"annotations": dict(annotations)} if annotations else {}
        if labels:
            metadata["labels"] = dict(labels)

        def once() -> bool:
            self._core.patch_namespaced_pod(
                name,
                namespace,
                {"metadata": metadata},
                field_manager=COMPONENT,
                _content_type=MERGE_PATCH,
                _request_timeout=self._timeout,
            )
            return True

        self._write(f"annotate pod {namespace}/{name}", once)

    def list_statuses(self, namespace: str) -> dict[str, StatusObject]:
        maps = list_all(
            self._api.configuration.host, f"list configmaps in {namespace} with labels {STATUS_SELECTOR}",
            lambda token: self._core.list_namespaced_config_map(
                namespace, label_selector=STATUS_SELECTOR, limit=self._page_size, _continue=token,
                _request_timeout=self._timeout,
            ),
        )
        return {cm.metadata.name: self._status_object(cm) for cm in maps
                if cm.metadata is not None and cm.metadata.name}

    @staticmethod
    def _status_object(cm: client.V1ConfigMap) -> StatusObject:
        meta = cm.metadata or client.V1ObjectMeta()
        owner = next((o.uid for o in meta.owner_references or [] if o.kind == "Deployment" and o.uid), "")
        return StatusObject(name=meta.name or "", text=(cm.data or {}).get(STATUS_DATA_KEY, ""), owner_uid=owner,
                            resource_version=meta.resource_version or "")

    @staticmethod
    def _status_body(
        namespace: str, name: str, uid: str, text: str, resource_version: str | None,
    ) -> client.V1ConfigMap:
        """The whole ConfigMap (a replace sends all of it): labels to find it by, the owner reference that has the
        garbage collector delete it with its Deployment (``blockOwnerDeletion`` false: deleting the Deployment does
        not wait for it, and creating it needs no grant on the Deployment's finalizers), the status."""
        owners = [client.V1OwnerReference(api_version="apps/v1", kind="Deployment", name=name, uid=uid,
                                          controller=False, block_owner_deletion=False)] if uid else None
        return client.V1ConfigMap(
            api_version="v1",
            kind="ConfigMap",
            metadata=client.V1ObjectMeta(
                name=status_object_name(name),
                namespace=namespace,
                labels={MANAGED_BY_LABEL: MANAGED_BY, DEPLOYMENT_LABEL: deployment_label(name)},
                owner_references=owners,
                resource_version=resource_version or None,
            ),
            data={STATUS_DATA_KEY: text},
        )

    def _reread_status(self, namespace: str, obj_name: str, deployment: str) -> StatusObject | None:
        """The status object as it is now (None: there is none), after a conflict. A ConfigMap of that name that is
        not the controller's (no managed-by label) is never overwritten: that is a write error naming it."""
        page = self._core.list_namespaced_config_map(
            namespace, field_selector=f"metadata.name={obj_name}", _request_timeout=self._timeout)
        for cm in page.items or []:
            if cm.metadata is None or cm.metadata.name != obj_name:
                continue
            if (cm.metadata.labels or {}).get(MANAGED_BY_LABEL) != MANAGED_BY:
                raise KubeWriteError(
                    f"write status of deployment {namespace}/{deployment}: configmap {namespace}/{obj_name} exists "
                    f"and is not the controller's (no label {MANAGED_BY_LABEL}={MANAGED_BY}); rename or delete it")
            return self._status_object(cm)
        return None

    def write_status(
        self, namespace: str, name: str, uid: str, status: Mapping[str, Any], last: StatusObject | None,
    ) -> StatusWrite:
        text = encode_status(status)
        obj_name = status_object_name(name)
        known = last
        result: StatusWrite | None = None

        def once() -> bool:
            nonlocal known, result
            while True:
                if known is not None and known.text == text and known.owner_uid == uid:
                    result = StatusWrite(known, False)
                    return False
                body = self._status_body(namespace, name, uid, text, None if known is None else known.resource_version)
                try:
                    if known is None:
                        cm = self._core.create_namespaced_config_map(
                            namespace, body, field_manager=COMPONENT, _request_timeout=self._timeout)
                    else:
                        cm = self._core.replace_namespaced_config_map(
                            obj_name, namespace, body, field_manager=COMPONENT, _request_timeout=self._timeout)
                except ApiException as exc:
                    if exc.status == 404 and known is not None:
                        known = None  # deleted since it was read (by a person, or collected with a predecessor)
                        continue
                    if exc.status == 409:  # changed since it was read, or created by someone: read it, retry
                        known = self._reread_status(namespace, obj_name, name)
                    raise
                result = StatusWrite(self._status_object(cm), True)
                return True

        self._write(f"write status configmap {namespace}/{obj_name} of deployment {namespace}/{name}", once)
        if result is None:  # pragma: no cover - once() sets it whenever it returns
            raise AssertionError("unreachable")
        return result

    def remove_status_annotation(self, namespace: str, name: str) -> None:
        def once() -> bool:
            self._apps.patch_namespaced_deployment(
                name,
                namespace,
                {"metadata": {"annotations": {STATUS_ANNOTATION: None}}},
                field_manager=COMPONENT,
                _content_type=MERGE_PATCH,
                _request_timeout=self._timeout,
            )
            return True

        self._write(f"remove the status annotation from deployment {namespace}/{name}", once)

    def post_event(
        self,
        namespace: str,
        name: str,
        uid: str,
        type: EventType,
        reason: str,
        message: str,
        now: datetime,
    ) -> None:
        event = core_event("apps/v1", "Deployment", namespace, name, uid, type, reason, message, now,
                           self._instance)

        def once() -> bool:
            self._core.create_namespaced_event(namespace, event, _request_timeout=self._timeout)
            return True

        self._write(f"post {type} event {reason} on deployment {namespace}/{name}", once)
