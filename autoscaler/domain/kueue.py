"""Whether Kueue can admit a pending Workload: its LocalQueue, its ClusterQueue and the GPU quota there.

Why a module of its own: nodes held ahead for a gang (placeholder headroom) cost the same as nodes that run, and
a Workload Kueue will not admit holds them for nothing, for as long as it stays pending (an unscheduled
Workload whose LocalQueue did not exist once kept two idle p4d nodes, $65.55/h). Kueue admits a Workload only through
``spec.queueName`` -> a ``LocalQueue`` in its namespace -> that queue's ``spec.clusterQueue`` -> a ``ClusterQueue``
whose quota for the Workload's resources has room. This module reads those two objects (plain API dicts, field
names from the upstream Kueue CRDs, ``kueue.x-k8s.io`` v1beta1 and v1beta2 alike) into ``KueueQueues`` and
says, per gang, why Kueue would not admit it now (``admission_block``), so the money stage holds no nodes for it.

The quota rule (GPUs only: ``nvidia.com/gpu``, summed over the ClusterQueue's flavors): *capacity* is the nominal
quota plus what it may borrow from its cohort (``borrowingLimit``, at most the other members' nominal quota);
*free* is the capacity minus the GPUs its admitted and reserving Workloads hold (``status.flavorsReservation``,
and within a cohort at most the cohort's unreserved nominal quota). A gang needing more than the capacity is never
admitted; one needing more than is free waits until quota is released, and nodes are held for it only then. A
stopped queue (``spec.stopPolicy`` other than ``None``) admits nothing. Departure (why): lending limits, fair
sharing, preemption and admission checks are not modelled; they can only delay an admission this module allows,
which the money stage's time limit on held headroom covers. No I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from autoscaler.domain.annotations import GPU_RESOURCE
from autoscaler.domain.gangs import Gang

__all__ = ["ClusterQueueQuota", "KueueQueues", "QueueError", "admission_block", "parse_queues"]


class QueueError(ValueError):
    """A LocalQueue or ClusterQueue that cannot be read; the message names the object and the field."""


@dataclass(frozen=True)
class ClusterQueueQuota:
    """One ClusterQueue as admission sees it: GPU quota (None: it covers no ``nvidia.com/gpu``), GPUs reserved."""

    name: str
    nominal_gpus: int | None
    borrowing_limit_gpus: int | None = None  # None: unlimited within the cohort
    reserved_gpus: int = 0
    cohort: str | None = None
    stopped: bool = False


@dataclass(frozen=True)
class KueueQueues:
    """The cluster's LocalQueues (``namespace/name`` -> ClusterQueue name) and ClusterQueues."""

    local: Mapping[str, str] = field(default_factory=dict)
    stopped_local: frozenset[str] = frozenset()
    cluster: Mapping[str, ClusterQueueQuota] = field(default_factory=dict)

    def cohort(self, name: str) -> list[ClusterQueueQuota]:
        return [q for q in self.cluster.values() if q.cohort == name]

    def capacity(self, cq: ClusterQueueQuota) -> int:
        """GPUs Kueue may ever admit through ``cq`` at once: nominal + what it may borrow from its cohort."""
        own = cq.nominal_gpus or 0
        if cq.cohort is None:
            return own
        others = sum(q.nominal_gpus or 0 for q in self.cohort(cq.cohort) if q.name != cq.name)
        borrow = others if cq.borrowing_limit_gpus is None else min(cq.borrowing_limit_gpus, others)
        return own + borrow

    def free(self, cq: ClusterQueueQuota) -> int:
        """GPUs ``cq`` could admit now: its capacity minus its reservations, within the cohort's unreserved quota."""
        free = self.capacity(cq) - cq.reserved_gpus
        if cq.cohort is not None:
            members = self.cohort(cq.cohort)
            free = min(free, sum(q.nominal_gpus or 0 for q in members) - sum(q.reserved_gpus for q in members))
        return max(0, free)


def _quantity(value: Any, where: str) -> int:
    """A whole GPU count; the API serves quantities as ints or strings (``"8"``)."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    raise QueueError(f"{where}: expected a whole number of GPUs, got {value!r}")


def _stopped(spec: Mapping[str, Any]) -> bool:
    policy = spec.get("stopPolicy")
    return policy not in (None, "", "None")


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list | tuple) else []


def parse_cluster_queue(obj: Mapping[str, Any]) -> ClusterQueueQuota:
    meta = _mapping(obj.get("metadata"))
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise QueueError("ClusterQueue: metadata.name: missing")
    where = f"ClusterQueue {name}"
    spec = _mapping(obj.get("spec"))
    nominal: int | None = None
    borrowing: int | None = None
    for i, group in enumerate(_list(spec.get("resourceGroups"))):
        for j, flavor in enumerate(_list(_mapping(group).get("flavors"))):
            for k, res in enumerate(_list(_mapping(flavor).get("resources"))):
                res = _mapping(res)
                if res.get("name") != GPU_RESOURCE:
                    continue
                path = f"{where}: spec.resourceGroups[{i}].flavors[{j}].resources[{k}]"
                nominal = (nominal or 0) + _quantity(res.get("nominalQuota", 0), f"{path}.nominalQuota")
                if res.get("borrowingLimit") is not None:
                    borrowing = (borrowing or 0) + _quantity(res["borrowingLimit"], f"{path}.borrowingLimit")
    reserved = 0
    status = _mapping(obj.get("status"))
    for i, flavor in enumerate(_list(status.get("flavorsReservation"))):
        for k, res in enumerate(_list(_mapping(flavor).get("resources"))):
            res = _mapping(res)
            if res.get("name") == GPU_RESOURCE:
                reserved += _quantity(res.get("total", 0), f"{where}: status.flavorsReservation[{i}].resources[{k}]")
    cohort = spec.get("cohort", spec.get("cohortName"))
    return ClusterQueueQuota(name, nominal, borrowing, reserved, cohort if isinstance(cohort, str) and cohort else None,
                             _stopped(spec))


def parse_queues(
    local_queues: Iterable[Mapping[str, Any]], cluster_queues: Iterable[Mapping[str, Any]]
) -> tuple[KueueQueues, list[str]]:
    """``KueueQueues`` from the API's LocalQueues and ClusterQueues, and the objects that could not be read (each
    skipped: a gang of an unreadable queue is then treated as not admittable, which holds no nodes)."""
    problems: list[str] = []
    local: dict[str, str] = {}
    stopped: set[str] = set()
    for obj in local_queues:
        meta = _mapping(obj.get("metadata"))
        ns, name = meta.get("namespace"), meta.get("name")
        spec = _mapping(obj.get("spec"))
        cq = spec.get("clusterQueue")
        if not (isinstance(ns, str) and isinstance(name, str) and isinstance(cq, str) and cq):
            problems.append(f"LocalQueue {ns}/{name}: needs metadata.namespace, metadata.name and spec.clusterQueue")
            continue
        local[f"{ns}/{name}"] = cq
        if _stopped(spec):
            stopped.add(f"{ns}/{name}")
    cluster: dict[str, ClusterQueueQuota] = {}
    for obj in cluster_queues:
        try:
            q = parse_cluster_queue(obj)
        except QueueError as exc:
            problems.append(str(exc))
            continue
        cluster[q.name] = q
    return KueueQueues(local, frozenset(stopped), cluster), problems


def admission_block(gang: Gang, queues: KueueQueues) -> str | None:
    """Why Kueue would not admit ``gang`` now (None: it may; also for anything that is not a pending Workload)."""
    if gang.kind != "Workload" or gang.admitted or gang.inactive:
        return None
    if not gang.queue:
        return "no spec.queueName: Kueue admits no Workload without a LocalQueue"
    local = f"{gang.namespace}/{gang.queue}"
    cq_name = queues.local.get(local)
    if cq_name is None:
        return f"LocalQueue {local} does not exist"
    if local in queues.stopped_local:
        return f"LocalQueue {local} is stopped"
    cq = queues.cluster.get(cq_name)
    if cq is None:
        return f"ClusterQueue {cq_name} (of LocalQueue {local}) does not exist"
    if cq.stopped:
        return f"ClusterQueue {cq_name} is stopped"
    if gang.gpus == 0:
        return None
    if cq.nominal_gpus is None and cq.cohort is None:
        return f"ClusterQueue {cq_name} has no {GPU_RESOURCE} quota"
    capacity = queues.capacity(cq)
    if gang.gpus > capacity:
        return f"ClusterQueue {cq_name} can admit at most {capacity} GPU(s) ({GPU_RESOURCE} quota), the gang needs " \
               f"{gang.gpus}: never admitted"
    free = queues.free(cq)
    if gang.gpus > free:
        return f"ClusterQueue {cq_name} has {free} of {capacity} GPU(s) free, the gang needs {gang.gpus}: it waits " \
               f"for quota"
    return None
