"""``NodeCapacity`` over the official client: Karpenter NodePools, their GPU limits, and warm GPU headroom.

Why it exists: inference replicas that need a GPU wait minutes for a node. The cost feature caps what a pool
may provision (``NodePool.spec.limits["nvidia.com/gpu"]``) and keeps spare nodes warm ahead of a forecast
rise. This module is the only place that knows the wire format of those objects; the arithmetic (GPUs ->
nodes, which ceiling, how much headroom) is pure and lives in ``autoscaler.domain``.

Headroom, two ways, whichever the cluster serves (docs/ARCHITECTURE.md, "Headroom"):

* ``CapacityBuffer`` (``autoscaling.x-k8s.io/v1beta1``), when the API server serves it: one per Deployment,
  ``spec.scalableRef`` -> the Deployment and ``spec.replicas`` = spare replicas. Karpenter / Cluster
  Autoscaler then keep room for that many more pods *of that exact shape* (GPUs, tolerations, affinity),
  which is more faithful than anything we could build. The buffer lives in the Deployment's namespace
  (``scalableRef`` has no namespace) and, given the Deployment's uid, is owned by it, so it is
  garbage-collected with it.
* Placeholder pods otherwise: a ``PriorityClass`` below every real workload (value -10, ``preemptionPolicy:
  Never``, not the global default) and, per NodePool, a ``pause`` Deployment in the controller's namespace
  whose pods each ask for one whole node's GPUs, select the pool (``karpenter.sh/nodepool``), tolerate its
  taints and carry ``karpenter.sh/do-not-disrupt: "true"`` (consolidation must not remove the warm node).
  Real replicas preempt them; the Deployment then re-creates them, which asks Karpenter for another node.
  ``strategy: Recreate``: a rolling update would surge extra whole-node pods.

Which one applies is found by API discovery (``GET /apis/autoscaling.x-k8s.io/v1beta1``), cached for a few
minutes so a CRD installed later is picked up. The choice can also be forced. A CRD removed meanwhile shows as a
``404`` on the buffer list: the cache is corrected at once (placeholders from the next tick, one warning logged)
rather than failing every tick until it expires.

Writes follow ``autoscaler.adapters.kube``: read, compare, write only on a difference (steady state writes
nothing); ``application/merge-patch+json``; ``fieldValidation=Strict`` so a misspelt field is an error
instead of being pruned silently; ``409`` retried a bounded number of times; everything else raises a
one-line ``KubeWriteError``. Objects that exist under our name but carry no ``managed-by`` label of ours are
never touched. Lowering a NodePool's GPU limit is sent with a ``resourceVersion`` precondition: the usage we
checked it against must still be the usage when the write lands (Karpenter updates the status often, so a
conflict is re-read and re-checked).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import time
from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import Any, Literal, TypeVar

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.utils import parse_quantity

from autoscaler.adapters.kube import (
    COMPONENT,
    MERGE_PATCH,
    NAME_LABEL,
    PLACEHOLDER_NAME,
    KubeReadError,
    KubeWriteError,
    api_message,
    api_read,
    api_write,
)
from autoscaler.ports import (
    DeploymentHeadroom,
    HeadroomMode,
    HeadroomTarget,
    HeadroomView,
    NodePoolView,
    NodeRequirement,
    NodeTaint,
    PoolHeadroom,
)

T = TypeVar("T")

log = logging.getLogger(__name__)

GPU = "nvidia.com/gpu"
KARPENTER = ("karpenter.sh", "v1", "nodepools")
BUFFERS = ("autoscaling.x-k8s.io", "v1beta1", "capacitybuffers")
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
# Node labels that carry the number of GPUs per node (AWS, Azure, GKE, NVIDIA GPU feature discovery).
GPU_COUNT_LABELS = (
    "karpenter.k8s.aws/instance-gpu-count",
    "karpenter.azure.com/sku-gpu-count",
    "cloud.google.com/gke-accelerator-count",
    "nvidia.com/gpu.count",
)
DO_NOT_DISRUPT = "karpenter.sh/do-not-disrupt"
MANAGED_BY = "app.kubernetes.io/managed-by"
POOL_LABEL = "predictive-autoscaler.io/headroom-pool"
TARGET_ANNOTATION = "predictive-autoscaler.io/headroom-for"
SPEC_HASH_ANNOTATION = "predictive-autoscaler.io/headroom-spec-hash"
DEFAULT_PAUSE_IMAGE = "registry.k8s.io/pause:3.10"
DEFAULT_PRIORITY_CLASS = "predictive-autoscaler-headroom"
DEFAULT_PRIORITY = -10

ModeSetting = Literal["auto", "capacitybuffer", "placeholder"]


class NodePoolLimitError(KubeWriteError):
    """Refused: the requested GPU limit is below what the pool already runs."""


class HeadroomError(KubeWriteError):
    """Headroom cannot be written as asked (API not served, a foreign object in the way, a bad PriorityClass)."""


def _quantity(value: Any) -> Decimal | None:
    if value is None:
        return None
    try:
        return Decimal(parse_quantity(value))  # type: ignore[no-untyped-call]
    except ValueError as exc:
        raise KubeReadError(f"cannot parse quantity {value!r}: {exc}") from exc


def _as_dict(value: object, what: str) -> dict[str, Any]:
    """Custom-object calls return decoded JSON typed as ``object``; anything but a JSON object is an API fault."""
    if not isinstance(value, dict):
        raise KubeReadError(f"{what}: expected a JSON object from the API server, got {type(value).__name__}")
    return value


def _bounded_name(name: str, limit: int) -> str:
    """``name`` if it fits ``limit`` characters, else a prefix plus a stable hash (names are keys: deterministic)."""
    if len(name) <= limit:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:10]
    return f"{name[: limit - 11].rstrip('-.')}-{digest}"


def buffer_name(deployment: str) -> str:
    return _bounded_name(f"{deployment}-headroom", 253)


def placeholder_name(pool: str) -> str:
    return _bounded_name(f"headroom-{pool}", 63)


def merge_patch_to(current: Any, desired: Any) -> Any:
    """An RFC 7386 patch turning ``current`` into ``desired`` (keys only in ``current`` become null)."""
    if not (isinstance(current, dict) and isinstance(desired, dict)):
        return desired
    patch: dict[str, Any] = {k: None for k in current if k not in desired}
    for k, v in desired.items():
        if k not in current:
            patch[k] = v
        elif current[k] != v:
            patch[k] = merge_patch_to(current[k], v)
    return patch


def node_pool_view(obj: Mapping[str, Any]) -> NodePoolView:
    """A NodePool (API JSON) as a plain view."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    template = spec.get("template") or {}
    tspec = template.get("spec") or {}
    labels = dict((template.get("metadata") or {}).get("labels") or {})
    name = meta.get("name", "")
    requirements = tuple(
        NodeRequirement(
            key=r["key"],
            operator=r["operator"],
            values=tuple(str(v) for v in r.get("values") or ()),
            min_values=r.get("minValues"),
        )
        for r in tspec.get("requirements") or []
    )
    taints = tuple(NodeTaint(key=t["key"], effect=t["effect"], value=t.get("value")) for t in tspec.get("taints") or [])
    limits = {str(k): str(v) for k, v in (spec.get("limits") or {}).items()}
    limit = _quantity((spec.get("limits") or {}).get(GPU))
    used = _quantity((status.get("resources") or {}).get(GPU))
    instance_types: tuple[str, ...] = ()
    for r in requirements:
        if r.key == INSTANCE_TYPE_LABEL and r.operator == "In":
            instance_types = r.values
    return NodePoolView(
        name=name,
        resource_version=meta.get("resourceVersion", ""),
        gpu_limit=None if limit is None else math.floor(limit),
        gpus_in_use=None if used is None else math.ceil(used),
        nodes=int(status.get("nodes") or 0),
        limits=limits,
        requirements=requirements,
        taints=taints,
        labels=labels,
        instance_types=instance_types,
        gpus_per_node=_gpus_per_node(requirements, labels),
        weight=spec.get("weight"),
        static=spec.get("replicas") is not None,
    )


def _gpus_per_node(requirements: tuple[NodeRequirement, ...], labels: Mapping[str, str]) -> int | None:
    """The GPU count when the pool pins one (a label, or an ``In`` requirement whose values are all equal)."""
    for key in GPU_COUNT_LABELS:
        if key in labels and labels[key].isdigit():
            return int(labels[key])
    for r in requirements:
        if r.key in GPU_COUNT_LABELS and r.operator == "In" and r.values and all(v.isdigit() for v in r.values):
            counts = {int(v) for v in r.values}
            if len(counts) == 1:
                return counts.pop()
    return None


class KarpenterCapacity:
    """The ``NodeCapacity`` port over one ``ApiClient``.

    ``namespace`` is the controller's own namespace: placeholder Deployments live there (a namespaced Role
    lets the controller create and delete Deployments only there).
    """

    def __init__(
        self,
        api_client: client.ApiClient,
        *,
        namespace: str,
        mode: ModeSetting = "auto",
        priority_class: str = DEFAULT_PRIORITY_CLASS,
        priority: int = DEFAULT_PRIORITY,
        pause_image: str = DEFAULT_PAUSE_IMAGE,
        discovery_ttl_seconds: float = 300.0,
        max_conflict_retries: int = 3,
        conflict_backoff_seconds: float = 0.1,
        request_timeout_seconds: float = 30.0,
        sleep: Callable[[float], None] = time.sleep,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        if mode not in ("auto", "capacitybuffer", "placeholder"):
            raise ValueError(f"headroom mode must be auto, capacitybuffer or placeholder, got {mode!r}")
        if priority >= 0:
            raise ValueError(f"placeholder priority must be below 0 (below every real workload), got {priority}")
        if not namespace:
            raise ValueError("the controller namespace for placeholder Deployments must not be empty")
        self._api = api_client
        self._custom = client.CustomObjectsApi(api_client)
        self._apps = client.AppsV1Api(api_client)
        self._scheduling = client.SchedulingV1Api(api_client)
        self.namespace = namespace
        self._mode = mode
        self._pc_name = priority_class
        self._priority = priority
        self._pause = pause_image
        self._ttl = discovery_ttl_seconds
        self._retries = max_conflict_retries
        self._backoff = conflict_backoff_seconds
        self._timeout = request_timeout_seconds
        self._sleep = sleep
        self._monotonic = monotonic
        self._served: tuple[float, bool] | None = None
        self._pc_checked: float | None = None  # when the PriorityClass was last seen right

    # ---- plumbing --------------------------------------------------------------------------------

    def _read(self, what: str, call: Callable[[], T]) -> T:
        return api_read(self._api.configuration.host, what, call)

    def _write(self, what: str, attempt_once: Callable[[], bool]) -> bool:
        return api_write(
            self._api.configuration.host, what, attempt_once,
            retries=self._retries, backoff_seconds=self._backoff, sleep=self._sleep,
        )

    def _get_or_none(self, call: Callable[[], T]) -> T | None:
        try:
            return call()
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    # ---- NodePools -------------------------------------------------------------------------------

    def list_node_pools(self) -> list[NodePoolView]:
        group, version, plural = KARPENTER
        what = "list karpenter.sh/v1 nodepools"
        answer = _as_dict(self._read(
            what,
            lambda: self._custom.list_cluster_custom_object(group, version, plural, _request_timeout=self._timeout),
        ), what)
        return sorted((node_pool_view(o) for o in answer.get("items") or []), key=lambda v: v.name)

    def set_gpu_limit(self, pool: str, gpus: int) -> bool:
        if gpus < 0:
            raise ValueError(f"GPU limit must be >= 0, got {gpus} for NodePool {pool}")
        group, version, plural = KARPENTER
        what = f"set {GPU} limit of NodePool {pool} to {gpus}"

        def once() -> bool:
            obj = _as_dict(
                self._custom.get_cluster_custom_object(group, version, plural, pool, _request_timeout=self._timeout),
                what,
            )
            view = node_pool_view(obj)
            if view.gpus_in_use is not None and gpus < view.gpus_in_use:
                raise NodePoolLimitError(
                    f"{what}: refused, the pool already runs {view.gpus_in_use} GPUs (status.resources); "
                    "a lower limit would not remove them and hides what is running"
                )
            if view.gpu_limit == gpus and view.limits.get(GPU) == str(gpus):
                return False
            patch: dict[str, Any] = {"spec": {"limits": {GPU: str(gpus)}}}
            if view.gpu_limit is None or gpus < view.gpu_limit:
                patch["metadata"] = {"resourceVersion": view.resource_version}
            self._custom.patch_cluster_custom_object(
                group, version, plural, pool, patch,
                field_manager=COMPONENT, field_validation="Strict",
                _content_type=MERGE_PATCH, _request_timeout=self._timeout,
            )
            return True

        return self._write(what, once)

    # ---- headroom: which kind --------------------------------------------------------------------

    def capacity_buffers_served(self) -> bool:
        """Whether ``autoscaling.x-k8s.io/v1beta1`` serves ``capacitybuffers`` (discovery, cached ``ttl``)."""
        now = self._monotonic()
        if self._served is not None and now - self._served[0] < self._ttl:
            return self._served[1]
        group, version, plural = BUFFERS
        try:
            resources = self._custom.get_api_resources(group, version, _request_timeout=self._timeout)
            served = any(r.name == plural for r in resources.resources or [])
        except ApiException as exc:
            if exc.status != 404:
                raise KubeReadError(f"discover {group}/{version}: {api_message(exc)}") from exc
            served = False
        except urllib3.exceptions.HTTPError as exc:
            raise KubeReadError(f"discover {group}/{version}: cannot reach the API server") from exc
        self._set_served(now, served)
        return served

    def _set_served(self, now: float, served: bool) -> None:
        """Cache a discovery answer; a change of answer is logged once (the headroom kind changes with it)."""
        if self._served is not None and self._served[1] != served:
            group, version, plural = BUFFERS
            log.warning("%s/%s %s %s: headroom is held as %s from now on", group, version, plural,
                        "are served now" if served else "are no longer served",
                        "CapacityBuffers" if served else "placeholder pods")
        self._served = (now, served)

    def headroom_mode(self) -> HeadroomMode:
        if self._mode != "auto":
            return self._mode
        return "capacitybuffer" if self.capacity_buffers_served() else "placeholder"

    # ---- headroom: write -------------------------------------------------------------------------

    def ensure_headroom(self, target: HeadroomTarget, amount: int) -> bool:
        if amount < 0:
            raise ValueError(f"headroom amount must be >= 0, got {amount} for {_describe(target)}")
        if amount == 0:
            return self.remove_headroom(target)
        if isinstance(target, DeploymentHeadroom):
            return self._ensure_buffer(target, amount)
        return self._ensure_placeholders(target, amount)

    def remove_headroom(self, target: HeadroomTarget) -> bool:
        if isinstance(target, DeploymentHeadroom):
            if not self.capacity_buffers_served():
                return False
            group, version, plural = BUFFERS
            ns, name = target.namespace, buffer_name(target.deployment)

            def once() -> bool:
                obj = self._get_or_none(
                    lambda: self._custom.get_namespaced_custom_object(group, version, ns, plural, name,
                                                                      _request_timeout=self._timeout)
                )
                if obj is None:
                    return False
                self._check_ours(_as_dict(obj, name), f"CapacityBuffer {ns}/{name}")
                self._custom.delete_namespaced_custom_object(group, version, ns, plural, name,
                                                             _request_timeout=self._timeout)
                return True

            return self._write(f"delete CapacityBuffer {ns}/{name}", self._tolerate_gone(once))

        name = placeholder_name(target.pool.name)

        def once_placeholder() -> bool:
            dep = self._get_or_none(
                lambda: self._apps.read_namespaced_deployment(name, self.namespace, _request_timeout=self._timeout)
            )
            if dep is None:
                return False
            self._check_ours(self._api.sanitize_for_serialization(dep), f"Deployment {self.namespace}/{name}")  # type: ignore[no-untyped-call]
            self._apps.delete_namespaced_deployment(name, self.namespace, propagation_policy="Background",
                                                    _request_timeout=self._timeout)
            return True

        what = f"delete placeholder Deployment {self.namespace}/{name}"
        return self._write(what, self._tolerate_gone(once_placeholder))

    @staticmethod
    def _tolerate_gone(once: Callable[[], bool]) -> Callable[[], bool]:
        """Someone else deleted it between our read and our delete: it is gone, which is what we wanted."""

        def run() -> bool:
            try:
                return once()
            except ApiException as exc:
                if exc.status == 404:
                    return False
                raise

        return run

    @staticmethod
    def _check_ours(obj: Mapping[str, Any], what: str) -> None:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        if labels.get(MANAGED_BY) != COMPONENT:
            raise HeadroomError(
                f"{what} exists but is not managed by {COMPONENT} (label {MANAGED_BY}); refusing to change it"
            )

    def _ensure_buffer(self, target: DeploymentHeadroom, replicas: int) -> bool:
        group, version, plural = BUFFERS
        if not self.capacity_buffers_served():
            raise HeadroomError(
                f"CapacityBuffer for deployment {target.namespace}/{target.deployment}: {group}/{version} "
                f"{plural} is not served by this API server; set karpenter.headroom to placeholder (or auto, which "
                f"falls back to placeholder pods by itself)"
            )
        ns, name = target.namespace, buffer_name(target.deployment)
        desired = self.buffer_object(target, replicas)

        def once() -> bool:
            found = self._get_or_none(
                lambda: self._custom.get_namespaced_custom_object(group, version, ns, plural, name,
                                                                  _request_timeout=self._timeout)
            )
            if found is None:
                self._custom.create_namespaced_custom_object(
                    group, version, ns, plural, desired,
                    field_manager=COMPONENT, field_validation="Strict", _request_timeout=self._timeout,
                )
                return True
            current = _as_dict(found, f"CapacityBuffer {ns}/{name}")
            self._check_ours(current, f"CapacityBuffer {ns}/{name}")
            spec = current.get("spec") or {}
            want = desired["spec"]
            if spec.get("scalableRef") == want["scalableRef"] and spec.get("replicas") == replicas and not (
                {"podTemplateRef", "percentage", "limits"} & set(spec)
            ):
                return False
            patch = {
                "metadata": {"resourceVersion": current["metadata"]["resourceVersion"]},
                "spec": {**want, "podTemplateRef": None, "percentage": None, "limits": None},
            }
            self._custom.patch_namespaced_custom_object(
                group, version, ns, plural, name, patch,
                field_manager=COMPONENT, field_validation="Strict",
                _content_type=MERGE_PATCH, _request_timeout=self._timeout,
            )
            return True

        return self._write(f"ensure CapacityBuffer {ns}/{name} with {replicas} replicas", once)

    def buffer_object(self, target: DeploymentHeadroom, replicas: int) -> dict[str, Any]:
        """The CapacityBuffer (API JSON) this adapter writes for ``target``."""
        group, version, _ = BUFFERS
        meta: dict[str, Any] = {
            "name": buffer_name(target.deployment),
            "namespace": target.namespace,
            "labels": {MANAGED_BY: COMPONENT, NAME_LABEL: PLACEHOLDER_NAME},
            "annotations": {TARGET_ANNOTATION: f"{target.namespace}/{target.deployment}"},
        }
        if target.uid:
            meta["ownerReferences"] = [
                {"apiVersion": "apps/v1", "kind": "Deployment", "name": target.deployment, "uid": target.uid}
            ]
        return {
            "apiVersion": f"{group}/{version}",
            "kind": "CapacityBuffer",
            "metadata": meta,
            "spec": {"scalableRef": {"apiGroup": "apps", "kind": "Deployment", "name": target.deployment},
                     "replicas": replicas},
        }

    def _ensure_priority_class(self) -> None:
        """Create the PriorityClass if missing; re-checked every discovery TTL (someone may delete it, and pods
        naming a missing PriorityClass are rejected at admission)."""
        now = self._monotonic()
        if self._pc_checked is not None and now - self._pc_checked < self._ttl:
            return
        name = self._pc_name

        def once() -> bool:
            pc = self._get_or_none(
                lambda: self._scheduling.read_priority_class(name, _request_timeout=self._timeout)
            )
            if pc is None:
                body = client.V1PriorityClass.from_dict(self.priority_class_object())
                assert body is not None
                self._scheduling.create_priority_class(body, field_manager=COMPONENT, _request_timeout=self._timeout)
                return True
            if pc.value != self._priority or pc.preemption_policy != "Never" or pc.global_default:
                raise HeadroomError(
                    f"PriorityClass {name} exists with value {pc.value}, preemptionPolicy {pc.preemption_policy}, "
                    f"globalDefault {bool(pc.global_default)}; placeholders need value {self._priority}, Never, "
                    "false so that real replicas always preempt them (PriorityClass values are immutable: "
                    "delete it or configure another name)"
                )
            return False

        self._write(f"ensure PriorityClass {name}", once)
        self._pc_checked = now

    def priority_class_object(self) -> dict[str, Any]:
        return {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": self._pc_name, "labels": {MANAGED_BY: COMPONENT}},
            "value": self._priority,
            "preemptionPolicy": "Never",
            "globalDefault": False,
            "description": "Placeholder pods of predictive-autoscaler that keep warm GPU nodes; every real "
            "workload preempts them.",
        }

    def placeholder_object(self, target: PoolHeadroom, nodes: int) -> dict[str, Any]:
        """The placeholder Deployment (API JSON) for ``nodes`` spare nodes in ``target.pool``."""
        if target.gpus_per_node < 1:
            raise ValueError(f"gpus_per_node must be >= 1, got {target.gpus_per_node} for NodePool {target.pool.name}")
        pool = target.pool
        selector = {NAME_LABEL: PLACEHOLDER_NAME, POOL_LABEL: _bounded_name(pool.name, 63)}
        gpus = str(target.gpus_per_node)
        pod_spec: dict[str, Any] = {
            "priorityClassName": self._pc_name,
            "terminationGracePeriodSeconds": 0,
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "nodeSelector": pool.node_selector,
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": 65535,
                "runAsGroup": 65535,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "containers": [
                {
                    "name": "pause",
                    "image": self._pause,
                    "resources": {
                        "requests": {GPU: gpus, "cpu": "10m", "memory": "16Mi"},
                        "limits": {GPU: gpus, "memory": "16Mi"},
                    },
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "readOnlyRootFilesystem": True,
                        "capabilities": {"drop": ["ALL"]},
                    },
                }
            ],
        }
        if pool.tolerations:
            pod_spec["tolerations"] = pool.tolerations
        template = {
            "metadata": {"labels": {**selector, MANAGED_BY: COMPONENT}, "annotations": {DO_NOT_DISRUPT: "true"}},
            "spec": pod_spec,
        }
        digest = hashlib.sha256(json.dumps(template, sort_keys=True).encode()).hexdigest()[:16]
        return {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {
                "name": placeholder_name(pool.name),
                "namespace": self.namespace,
                "labels": {**selector, MANAGED_BY: COMPONENT},
                "annotations": {TARGET_ANNOTATION: pool.name, SPEC_HASH_ANNOTATION: digest},
            },
            "spec": {
                "replicas": nodes,
                "selector": {"matchLabels": selector},
                "strategy": {"type": "Recreate"},
                "revisionHistoryLimit": 1,
                "template": template,
            },
        }

    def _ensure_placeholders(self, target: PoolHeadroom, nodes: int) -> bool:
        desired = self.placeholder_object(target, nodes)
        name = desired["metadata"]["name"]
        self._ensure_priority_class()

        def once() -> bool:
            dep = self._get_or_none(
                lambda: self._apps.read_namespaced_deployment(name, self.namespace, _request_timeout=self._timeout)
            )
            if dep is None:
                body = client.V1Deployment.from_dict(desired)
                assert body is not None
                self._apps.create_namespaced_deployment(
                    self.namespace, body, field_manager=COMPONENT, field_validation="Strict",
                    _request_timeout=self._timeout,
                )
                return True
            current: dict[str, Any] = self._api.sanitize_for_serialization(dep)  # type: ignore[no-untyped-call]
            what = f"Deployment {self.namespace}/{name}"
            self._check_ours(current, what)
            annotations = current["metadata"].get("annotations") or {}
            same_template = annotations.get(SPEC_HASH_ANNOTATION) == desired["metadata"]["annotations"][
                SPEC_HASH_ANNOTATION
            ]
            if same_template and (current.get("spec") or {}).get("replicas") == nodes:
                return False
            patch: dict[str, Any] = {"spec": {"replicas": nodes}}
            if not same_template:
                patch["metadata"] = {"annotations": desired["metadata"]["annotations"]}
                patch["spec"]["template"] = merge_patch_to(current["spec"]["template"], desired["spec"]["template"])
            self._apps.patch_namespaced_deployment(
                name, self.namespace, patch, field_manager=COMPONENT, field_validation="Strict",
                _content_type=MERGE_PATCH, _request_timeout=self._timeout,
            )
            return True

        return self._write(f"ensure placeholder Deployment {self.namespace}/{name} with {nodes} pods", once)

    # ---- headroom: read --------------------------------------------------------------------------

    def list_headroom(self) -> list[HeadroomView]:
        selector = f"{MANAGED_BY}={COMPONENT},{NAME_LABEL}={PLACEHOLDER_NAME}"
        views: list[HeadroomView] = []
        if self.capacity_buffers_served():
            group, version, plural = BUFFERS
            what = f"list {group}/{version} {plural}"
            try:
                buffers = _as_dict(self._read(
                    what,
                    lambda: self._custom.list_custom_object_for_all_namespaces(
                        group, version, plural, label_selector=selector, _request_timeout=self._timeout
                    ),
                ), what)
            except KubeReadError as exc:
                if getattr(exc.__cause__, "status", None) != 404:
                    raise
                # A list of a resource 404s only when it is not served: its CRD was removed since discovery.
                self._set_served(self._monotonic(), False)
                buffers = {}
            for b in buffers.get("items") or []:
                meta = b.get("metadata") or {}
                views.append(HeadroomView(
                    "CapacityBuffer", meta.get("namespace", ""), meta.get("name", ""),
                    (meta.get("annotations") or {}).get(TARGET_ANNOTATION, ""),
                    int((b.get("spec") or {}).get("replicas") or 0),
                ))
        deps = self._read(
            f"list placeholder deployments in {self.namespace}",
            lambda: self._apps.list_namespaced_deployment(self.namespace, label_selector=selector,
                                                          _request_timeout=self._timeout),
        )
        for d in deps.items or []:
            meta = d.metadata or client.V1ObjectMeta()
            views.append(HeadroomView(
                "Deployment", meta.namespace or "", meta.name or "",
                (meta.annotations or {}).get(TARGET_ANNOTATION, ""),
                int(d.spec.replicas if d.spec is not None and d.spec.replicas is not None else 1),
            ))
        return views


def _describe(target: HeadroomTarget) -> str:
    if isinstance(target, DeploymentHeadroom):
        return f"deployment {target.namespace}/{target.deployment}"
    return f"NodePool {target.pool.name}"
