"""Narrow Protocols for the outside world, and the plain values that cross them.

Why it exists: the control loop, the simulator and the tests talk to "the cluster" through one small
interface (Karpenter's ``CloudProvider`` lesson), so the loop can run against the real API server
(``autoscaler.adapters.kube.KubeCluster``), a recording fake or the simulator without knowing which.
No Kubernetes client object crosses this boundary: views are frozen dataclasses of plain Python
values, and pod templates are the JSON dicts the API serves (camelCase keys), which is what
``autoscaler.domain.annotations`` parses.

Time is data here too: methods that need "now" (pending-pod ages, Event timestamps) take it as an
argument instead of reading a clock.

Other ports sit next to ``Cluster``: ``NodeCapacity`` (Karpenter NodePools and headroom), ``TrainingGangs``
(raw Kueue Workloads and Volcano PodGroups for ``autoscaler.domain.gangs``, and the PriorityClasses PodGroups
rank by) and ``AlertSink`` (Alertmanager).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, Protocol, runtime_checkable

EventType = Literal["Normal", "Warning"]


@dataclass(frozen=True)
class WorkloadView:
    """One opted-in Deployment as the controller sees it at list time."""

    namespace: str
    name: str
    uid: str
    resource_version: str
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    replicas: int  # spec.replicas (the API defaults it to 1)
    ready_replicas: int  # status.readyReplicas (absent = 0)
    selector: str  # spec.selector rendered as a label-selector query, e.g. "app=llm,tier in (a,b)"
    pod_template: Mapping[str, Any] = field(default_factory=dict)  # spec.template as API JSON
    # Why the Deployment controller reports its rollout stuck (condition Progressing False, reason
    # ProgressDeadlineExceeded: no progress for progressDeadlineSeconds), None when it does not.
    rollout_stuck: str | None = None


@dataclass(frozen=True)
class NotReadyPod:
    """A pod of the workload that is not Ready yet: how long it has waited and whether it is scheduled.

    ``unschedulable`` with a reason like ``Unschedulable`` is how "no free GPU" shows up; the planner
    feeds it back instead of piling up more Pending replicas.
    """

    name: str
    age_seconds: float
    phase: str
    scheduled: bool
    reason: str | None = None
    message: str | None = None


@dataclass(frozen=True)
class PodView:
    """One pod matching a workload's selector, as ``autoscaler.domain.scaledown`` needs it (plain values).

    ``owner_replicaset``: the name of the ReplicaSet that controls it (None: no controlling ReplicaSet);
    ``template_hash``: its ``pod-template-hash`` label. Times are Unix seconds; ``ready_since`` is the Ready
    condition's last transition when Ready, else None. ``annotations`` and ``labels`` are the pod's own; ``node``
    is the node it is bound to (``spec.nodeName``; None: not scheduled).
    """

    name: str
    created: float
    ready_since: float | None
    phase: str
    terminating: bool
    owner_replicaset: str | None = None
    template_hash: str | None = None
    annotations: Mapping[str, str] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    namespace: str = ""
    node: str | None = None

    @property
    def ready(self) -> bool:
        return self.ready_since is not None


@dataclass(frozen=True)
class StatusObject:
    """A Deployment's status object (``autoscaler.domain.status``) as last read or written: its name, the JSON it
    holds, the uid of the Deployment that owns it ("" when no owner reference names one) and its
    ``resourceVersion``, which the next write sends so that a change by anyone else is a conflict, not lost."""

    name: str
    text: str
    owner_uid: str
    resource_version: str


@dataclass(frozen=True)
class StatusWrite:
    """A status write's result: the object as it now is, and whether anything was written (False: it already held
    exactly this status for this Deployment)."""

    stored: StatusObject
    written: bool


@dataclass(frozen=True)
class PodStartups:
    """Observed start-up durations (creation -> Ready, seconds), the pods still starting, and every pod listed
    (``pods``: for choosing which pods a scale-down removes, and clearing those marks afterwards)."""

    durations: tuple[float, ...] = ()
    not_ready: tuple[NotReadyPod, ...] = ()
    pods: tuple[PodView, ...] = ()

    @property
    def pending_unschedulable(self) -> int:
        return sum(1 for p in self.not_ready if not p.scheduled)


@dataclass(frozen=True)
class ScalerView:
    """One HorizontalPodAutoscaler and what it scales (``spec.scaleTargetRef``): another autoscaler writing the
    replicas of a Deployment the controller would scale (``autoscaler.domain.contention``). KEDA's ScaledObjects
    scale through an HPA of their own (``keda-hpa-<name>``), so they show here too."""

    namespace: str
    name: str
    target_api_version: str  # e.g. "apps/v1"
    target_kind: str  # e.g. "Deployment"
    target_name: str


class Cluster(Protocol):
    """What the controller needs from Kubernetes. Writes raise on failure; they are never dropped."""

    def list_workloads(self) -> list[WorkloadView]:
        """Every Deployment labelled ``predictive-autoscaler.io/enabled=true``, in all namespaces."""
        ...

    def list_scalers(self) -> list[ScalerView]:
        """Every HorizontalPodAutoscaler (``autoscaling/v2``) in all namespaces, with its scale target. Raises on
        failure."""
        ...

    def pod_startups(self, namespace: str, selector: str, now: datetime) -> PodStartups:
        """Start-up durations of the Ready pods matching ``selector`` and the ages of those not Ready."""
        ...

    def scale(self, namespace: str, name: str, replicas: int) -> bool:
        """Set spec.replicas through the scale subresource; False when it already had that value."""
        ...

    def patch_pod_annotations(
        self, namespace: str, name: str, annotations: Mapping[str, str | None],
        labels: Mapping[str, str | None] | None = None,
    ) -> None:
        """Merge-patch annotations (and ``labels``) of one pod, in one write (None removes one): the
        ``pod-deletion-cost`` marks of a scale-down and the controller's record and label of them
        (``autoscaler.domain.scaledown``). No read first: ``patch`` on pods is all the controller's RBAC grants
        beyond ``list``; the caller decides from the pods it listed."""
        ...

    def list_marked_pods(self, namespaces: Sequence[str]) -> list[PodView]:
        """Every pod carrying the controller's scale-down mark label, in ``namespaces`` (empty: all namespaces),
        whichever Deployment it belongs to: how marks of a Deployment that left the controller's care are found,
        after a restart too. One label-selected list (per namespace when confined)."""
        ...

    def list_statuses(self, namespace: str) -> Mapping[str, StatusObject]:
        """The status objects in ``namespace``, by object name: one label-selected list, made when Deployments there
        are first seen (what they left is resumed from), not a read per Deployment."""
        ...

    def write_status(
        self, namespace: str, name: str, uid: str, status: Mapping[str, Any], last: StatusObject | None,
    ) -> StatusWrite:
        """Write ``status`` as the JSON of Deployment ``name``'s status object (owned by the Deployment ``uid``).

        ``last``: the object as last read or written (None: none known, it is created). Nothing is written when it
        already holds exactly this JSON for this Deployment. The write carries ``last``'s resourceVersion: a
        conflict re-reads the object and retries, within the adapter's bounded retries.
        """
        ...

    def remove_status_annotation(self, namespace: str, name: str) -> None:
        """Remove the ``predictive-autoscaler.io/status`` annotation older versions wrote on the Deployment (one
        merge patch; nothing happens when it is not there)."""
        ...

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
        """Record an Event on the Deployment (``kubectl describe`` shows it to the team)."""
        ...


@dataclass(frozen=True)
class PoolGpus:
    """What the nodes of one Karpenter NodePool hold, as one read sees them (``PoolNodes.pool_gpus``).

    ``free``: GPUs free on its Ready, schedulable nodes (allocatable ``nvidia.com/gpu`` minus the GPUs requested by
    the pods bound there; our own headroom placeholders excepted: every real replica preempts them); ``busy_nodes``:
    those of its Ready, schedulable nodes where pods hold GPUs; ``partial_free``: the GPUs free on them (room without
    an idle node); ``nodes``: every node of the pool in any state (what Karpenter bills); ``node_gpus``: the GPUs the
    pods bound to each of its Ready, schedulable nodes request, by node name (what a scale-down that empties whole
    nodes ranks pods by, ``autoscaler.domain.scaledown``).
    """

    free: int = 0
    busy_nodes: int = 0
    partial_free: int = 0
    nodes: int = 0
    node_gpus: Mapping[str, int] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        for name in ("free", "busy_nodes", "partial_free", "nodes"):
            if getattr(self, name) < 0:
                raise ValueError(f"PoolGpus.{name} must be >= 0, got {getattr(self, name)}")


@runtime_checkable
class PoolNodes(Protocol):
    """The GPUs on the nodes of Karpenter NodePools (``KubeCluster`` implements it; a cluster port without it reads
    none: the engine then plans every new replica as waiting for a node, and no node headroom is sized)."""

    def pool_gpus(self, pools: Sequence[str]) -> Mapping[str, PoolGpus]:
        """Per NodePool of ``pools`` (nodes labelled ``karpenter.sh/nodepool=<name>``): ``PoolGpus`` (all zero: no
        such node). Raises on failure."""
        ...


# ---- GPU node capacity (Karpenter NodePools, headroom) ----------------------------------------------


@dataclass(frozen=True)
class NodeRequirement:
    """One ``NodePool.spec.template.spec.requirements`` entry (a node selector requirement)."""

    key: str
    operator: str  # In, NotIn, Exists, DoesNotExist, Gt, Lt, Gte, Lte
    values: tuple[str, ...] = ()
    min_values: int | None = None


@dataclass(frozen=True)
class NodeTaint:
    """A taint Karpenter puts on the pool's nodes; pods placed there need a matching toleration."""

    key: str
    effect: str  # NoSchedule, PreferNoSchedule, NoExecute
    value: str | None = None


@dataclass(frozen=True)
class NodePoolView:
    """One Karpenter NodePool as plain values.

    ``gpu_limit`` is ``spec.limits["nvidia.com/gpu"]`` (None: the pool has no GPU cap); ``gpus_in_use`` is
    ``status.resources["nvidia.com/gpu"]`` (None: Karpenter has not reported it). ``gpus_per_node`` is read from
    a GPU-count requirement with a single value (see ``autoscaler.adapters.karpenter.GPU_COUNT_LABELS``), None
    when the pool allows several counts. Pods land on the pool with ``node_selector`` and ``tolerations``.
    ``static``: ``spec.replicas`` is set (Karpenter's static NodePools): a fixed node count, where the CRD allows
    no limit but ``limits.nodes``.
    """

    name: str
    resource_version: str
    gpu_limit: int | None
    gpus_in_use: int | None
    nodes: int
    limits: Mapping[str, str]
    requirements: tuple[NodeRequirement, ...]
    taints: tuple[NodeTaint, ...]
    labels: Mapping[str, str]  # spec.template.metadata.labels: put on every node of the pool
    instance_types: tuple[str, ...]  # node.kubernetes.io/instance-type In values (empty: any)
    gpus_per_node: int | None
    weight: int | None = None
    static: bool = False

    @property
    def node_selector(self) -> dict[str, str]:
        return {"karpenter.sh/nodepool": self.name}

    @property
    def tolerations(self) -> list[dict[str, str]]:
        """Tolerations (API JSON) for every taint of the pool."""
        out: list[dict[str, str]] = []
        for t in self.taints:
            tol = {"key": t.key, "effect": t.effect}
            tol.update({"operator": "Equal", "value": t.value} if t.value is not None else {"operator": "Exists"})
            out.append(tol)
        return out


@dataclass(frozen=True)
class DeploymentHeadroom:
    """Spare capacity shaped like a Deployment's pods (a ``CapacityBuffer`` with ``scalableRef``).

    ``amount`` for this target counts replicas of the Deployment. ``uid`` (optional) makes the buffer owned by
    the Deployment, so the garbage collector deletes it with the Deployment.
    """

    namespace: str
    deployment: str
    uid: str | None = None


@dataclass(frozen=True)
class PoolHeadroom:
    """Spare whole nodes in a NodePool, held by low-priority placeholder pods.

    ``amount`` for this target counts nodes; each placeholder pod requests ``gpus_per_node`` GPUs.
    """

    pool: NodePoolView
    gpus_per_node: int


HeadroomTarget = DeploymentHeadroom | PoolHeadroom
HeadroomMode = Literal["capacitybuffer", "placeholder"]


@dataclass(frozen=True)
class HeadroomView:
    """Headroom the controller created earlier and that still exists (so stale headroom can be removed)."""

    kind: Literal["CapacityBuffer", "Deployment"]
    namespace: str
    name: str
    target: str  # "namespace/deployment" for a CapacityBuffer, the NodePool name for placeholders
    amount: int  # buffer replicas or placeholder pods (= nodes)


class NodeCapacity(Protocol):
    """Karpenter NodePools and headroom. Writes raise on failure; they are never dropped."""

    def list_node_pools(self) -> list[NodePoolView]: ...

    def set_gpu_limit(self, pool: str, gpus: int) -> bool:
        """Set ``spec.limits["nvidia.com/gpu"]``; False when it already had that value.

        Refuses (raises) a value below the GPUs the pool already runs.
        """
        ...

    def headroom_mode(self) -> HeadroomMode:
        """``capacitybuffer`` when the API server serves ``autoscaling.x-k8s.io/v1beta1`` CapacityBuffers."""
        ...

    def ensure_headroom(self, target: HeadroomTarget, amount: int) -> bool:
        """Make the target's headroom exactly ``amount`` (0 removes it); False when nothing changed."""
        ...

    def remove_headroom(self, target: HeadroomTarget) -> bool:
        """Delete the target's headroom; False when there was none."""
        ...

    def list_headroom(self) -> list[HeadroomView]: ...


# ---- training gangs (Kueue, Volcano) ----------------------------------------------------------------


@dataclass(frozen=True)
class CustomObjects:
    """Raw custom objects (API JSON dicts) of one kind; ``installed`` False when the API is not served.

    ``note`` says why the list is empty when the CRD is missing (shown once in logs / explain output).
    """

    api_version: str
    kind: str
    items: tuple[Mapping[str, Any], ...] = ()
    installed: bool = True
    note: str | None = None


@dataclass(frozen=True)
class PriorityClasses:
    """``scheduling.k8s.io/v1`` PriorityClass values by name, and the ``globalDefault`` class (None: there is none).

    Volcano ranks a PodGroup by these: the value of its ``spec.priorityClassName`` when that class exists, else the
    global default's value (``autoscaler.runtime.money`` applies that rule before ``autoscaler.domain.gangs`` parses).
    """

    values: Mapping[str, int] = field(default_factory=dict)
    global_default: str | None = None


class TrainingGangs(Protocol):
    """Training jobs that must be scheduled all-or-nothing; parsed by ``autoscaler.domain.gangs``."""

    def list_kueue_workloads(self) -> CustomObjects: ...

    def list_volcano_podgroups(self) -> CustomObjects: ...

    def priority_classes(self) -> PriorityClasses:
        """Every PriorityClass (cluster-scoped): what Volcano PodGroups rank by. Raises on failure."""
        ...

    def patch_gang(self, kind: str, namespace: str, name: str, patch: Mapping[str, Any]) -> None:
        """JSON merge-patch one ``Workload`` or ``PodGroup`` (``kind``): the planned-start annotation, and
        ``spec.active: true`` on a held Kueue Workload at its planned start. Raises on failure."""
        ...

    def list_kueue_queues(self) -> tuple[CustomObjects, CustomObjects]:
        """Kueue's ``LocalQueues`` and ``ClusterQueues`` (whether a pending Workload can be admitted:
        ``autoscaler.domain.kueue``); ``installed`` False when not served. Raises on any other failure."""
        ...

    def post_gang_event(
        self, kind: str, namespace: str, name: str, uid: str, type: EventType, reason: str, message: str,
        now: datetime,
    ) -> None:
        """A core/v1 Event on one ``Workload`` or ``PodGroup`` (``kubectl describe workload``). Raises on failure."""
        ...


# ---- alerts ---------------------------------------------------------------------------------------------

Severity = Literal["info", "warning", "critical"]


@dataclass(frozen=True)
class Alert:
    """One alert for on-call. Identity (what Alertmanager de-duplicates on) is ``name`` plus ``labels``.

    ``starts_at`` is when the condition began (None: now); dollars belong in ``summary``/``description``.
    """

    name: str  # the alertname label, e.g. GPUCostCeilingProjectedBreach
    severity: Severity
    summary: str
    description: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)  # e.g. team, namespace, deployment
    starts_at: datetime | None = None


class AlertSink(Protocol):
    """Where alerts go. Delivery failures raise; they are never dropped silently."""

    def fire(self, alerts: Sequence[Alert], now: datetime) -> None:
        """(Re-)send active alerts; each clears by itself unless sent again within the sink's expiry."""
        ...

    def resolve(self, alerts: Sequence[Alert], now: datetime) -> None:
        """Tell the receiver these conditions ended at ``now``."""
        ...
