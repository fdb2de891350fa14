"""Narrow Protocols for the outside world, and the plain values that cross them.

Why it exists: the control loop, the simulator and the tests talk to "the cluster" through one small
interface (Karpenter's ``CloudProvider`` lesson), so the loop can run against the real API server
(``autoscaler.adapters.kube.KubeCluster``), a recording fake or the simulator without knowing which.
No Kubernetes client object crosses this boundary: views are frozen dataclasses of plain Python
values, and pod templates are the JSON dicts the API serves (camelCase keys), which is what
``autoscaler.domain.annotations`` parses.

Time is data here too: methods that need "now" (pending-pod ages, Event timestamps) take it as an
argument instead of reading a clock.

Other ports (MetricsSource, AlertSink, ...) are added next to ``Cluster`` by their owners.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, Protocol

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
class PodStartups:
    """Observed start-up durations (creation -> Ready, seconds) and the pods still starting."""

    durations: tuple[float, ...] = ()
    not_ready: tuple[NotReadyPod, ...] = ()

    @property
    def pending_unschedulable(self) -> int:
        return sum(1 for p in self.not_ready if not p.scheduled)


class Cluster(Protocol):
    """What the controller needs from Kubernetes. Writes raise on failure; they are never dropped."""

    def list_workloads(self) -> list[WorkloadView]:
        """Every Deployment labelled ``predictive-autoscaler.io/enabled=true``, in all namespaces."""
        ...

    def pod_startups(self, namespace: str, selector: str, now: datetime) -> PodStartups:
        """Start-up durations of the Ready pods matching ``selector`` and the ages of those not Ready."""
        ...

    def scale(self, namespace: str, name: str, replicas: int) -> bool:
        """Set spec.replicas through the scale subresource; False when it already had that value."""
        ...

    def write_status(self, namespace: str, name: str, status: Mapping[str, Any]) -> bool:
        """Publish ``status`` as JSON in the ``predictive-autoscaler.io/status`` annotation.

        Returns False when the annotation already held exactly this JSON (no write).
        """
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
