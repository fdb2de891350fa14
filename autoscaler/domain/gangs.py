"""Training gangs: Kueue Workloads and Volcano PodGroups as one all-or-nothing GPU claim, and when to run them.

Why a module of its own: training jobs share the GPU nodes (and the cost ceiling) with inference, but
they differ in one way that matters for every decision: a gang of N pods is useless with N-1 of them.
Kueue and Volcano both encode that, in different shapes, so this module reads both shapes (plain
dicts, as the API server serves them) into one value, ``Gang``, whose ``gpus`` is the unit that is
reserved whole or not at all by ``autoscaler.domain.cost``. It also places a gang that has a time
window in the trough of the inference forecast (``place_gang``), so that training soaks up the GPUs
inference leaves idle instead of adding to the peak.

What is read (field names from the upstream Kueue and Volcano CRDs, which the tests validate against):

* Kueue ``Workload`` (v1beta1 and v1beta2): GPUs = sum over ``spec.podSets`` of ``count`` x the pod
  template's ``nvidia.com/gpu`` (limits, else requests; containers + sidecars, at least the largest
  init container: the scheduler's effective request). Once admitted with a partial count
  (``status.admission.podSetAssignments[].count``, Kueue's partial admission) the admitted count is
  what is reserved, so it is used instead of the spec count. ``admitted`` = condition ``Admitted``
  is True (``QuotaReserved`` alone is not enough: the pods do not run until admission checks pass,
  so deferring such a workload evicts nothing). Priority = ``spec.priority``. Inactive (the
  ``Finished`` condition is True, or ``spec.active`` is false): it holds and will hold no GPUs --
  except a *held* scheduled Workload: ``spec.active: false`` together with our ``start-after``
  annotation is how a user submits a gang for the controller to start at its planned time
  (``held=True``, pending). Once the controller has activated it (it writes ``activated-at``), a
  later ``spec.active: false`` is someone else's (Kueue's requeue limit, a user) and means inactive
  again, so the controller never fights a deactivation.
  Run time: ``spec.maximumExecutionTimeSeconds`` when set.
* Volcano ``PodGroup`` (v1beta1): GPUs = ``spec.minResources["nvidia.com/gpu"]``; without it,
  ``spec.minMember`` x a per-pod count the caller supplies (the PodGroup itself does not say; the
  adapter reads it from the job's pod template). ``admitted`` = ``status.phase`` is ``Inqueue`` or
  ``Running`` (Volcano's enqueue step has accepted it); ``Completed`` = inactive. Priority = the
  value of ``spec.priorityClassName`` in a caller-supplied map of PriorityClass values (the money stage reads
  the cluster's PriorityClasses and, as Volcano does, gives a PodGroup without a known class the
  ``globalDefault`` class's value by naming that class before parsing); neither: ``standard``.

Our own annotations on either object (prefix ``predictive-autoscaler.io/``) add what neither API
has: ``team`` (default: the namespace, as for Deployments), ``priority`` (a tier name or 0..1000;
overrides the API's value), ``nodepool`` (default: the pod template's ``karpenter.sh/nodepool``
node selector), ``start-after`` and ``deadline`` (RFC 3339 or Unix seconds: the window a scheduled
gang may run in) and ``duration`` (its run time, e.g. ``6h``).

Priorities from Kueue/PriorityClasses can be any int32 (``100000`` is common); they are clamped to
our 0..1000 scale so that a gang compares with inference tiers. Set the annotation to say exactly
where a gang stands relative to the inference tiers.

Placement (``place_gang``, ``place_gangs``): a pending gang with a window and a run time is placed where the
inference GPU forecast of its NodePool (a step function of ``(time, GPUs)`` points, e.g. from
``replica_gpu_points``) plus the gangs already placed there peaks lowest; ``holds_gpus`` then counts its
GPUs only from one node start-up before that start (so its nodes are asked for ahead, like an inference
replica's) instead of from ``start-after``. The controller (``autoscaler.runtime.money``) and the simulator
(``autoscaler.simulation``) both place with these functions.

Malformed objects raise ``GangError`` naming the object and the field (``Workload ml/llama-ft:
spec.podSets[0].count: expected an integer >= 0, got '2'``), so one bad object is reported and
skipped by the caller instead of failing the tick. The module reads no clock: times are data.
"""

from __future__ import annotations

import bisect
import math
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from autoscaler.domain.annotations import (
    DEFAULT_PRIORITY_TIER,
    GPU_RESOURCE,
    MAX_PRIORITY,
    PREFIX,
    PRIORITY_TIERS,
    parse_duration_seconds,
)

__all__ = [
    "ADMISSION_GATE",
    "ADMISSION_GATED_BY",
    "NODEPOOL_LABEL",
    "Gang",
    "GangError",
    "GangKind",
    "Placement",
    "add_interval",
    "compress_points",
    "format_gpus",
    "holds_gpus",
    "parse_gang",
    "parse_kueue_workload",
    "parse_volcano_podgroup",
    "place_gang",
    "place_gangs",
    "placement_window",
    "replica_gpu_points",
    "scheduled",
    "sum_points",
]

PLANNED_START_ANNOTATION = PREFIX + "planned-start"
# Kueue's admission gate (KEP-6915; feature gate AdmissionGatedBy: alpha in Kueue 0.17, beta and on by default from
# 0.19): a comma-separated list of controller names; Kueue does not admit the Workload while any is left. Ours is
# ADMISSION_GATE: the controller removes it at the planned start.
ADMISSION_GATED_BY = "kueue.x-k8s.io/admission-gated-by"
ADMISSION_GATE = PREFIX + "gang-scheduler"
ACTIVATED_ANNOTATION = PREFIX + "activated-at"
MAX_PLACEMENT_SECONDS = 7 * 86400  # how far ahead a placement looks (a forecast further out is guesswork)

GangKind = Literal["Workload", "PodGroup"]
NODEPOOL_LABEL = "karpenter.sh/nodepool"
KUEUE_GROUP = "kueue.x-k8s.io"
VOLCANO_GROUP = "scheduling.volcano.sh"

_UINT = re.compile(r"^[0-9]+$")


class GangError(ValueError):
    """A Workload or PodGroup that cannot be read; the message names the object and the field."""


@dataclass(frozen=True)
class Gang:
    """One training job's GPU claim: all ``gpus`` at once, or none.

    ``start_after``/``deadline`` are Unix seconds (None = no bound); a gang with a ``deadline`` and a
    ``duration_seconds`` is a *scheduled* gang that ``place_gang`` may move inside its window.
    ``inactive`` gangs (finished, deactivated, completed) hold and need no GPUs; the cost and node
    functions ignore them. ``held``: a Kueue Workload created with ``spec.active: false`` and a
    ``start-after``, waiting for the controller to activate it at its planned start. ``planned_start_note``:
    the ``planned-start`` annotation as last written (None when absent or unreadable).
    """

    kind: GangKind
    namespace: str
    name: str
    gpus: int
    pods: int
    admitted: bool
    priority: int
    team: str = ""
    nodepool: str | None = None
    start_after: int | None = None
    deadline: int | None = None
    duration_seconds: int | None = None
    inactive: bool = False
    held: bool = False
    planned_start_note: int | None = None
    queue: str | None = None  # a Workload's spec.queueName (its LocalQueue); None for a PodGroup
    uid: str = ""
    gates: tuple[str, ...] = ()  # the Workload's kueue.x-k8s.io/admission-gated-by names (ADMISSION_GATE: ours)
    deactivated: bool = False  # spec.active is false (a held one is activated at its start)

    @property
    def gated(self) -> bool:
        """Held by our name in Kueue's admission gate (Kueue admits it once the controller removes it)."""
        return ADMISSION_GATE in self.gates

    def __post_init__(self) -> None:
        for name in ("gpus", "pods"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"Gang.{name} must be an integer >= 0, got {value!r}")
        if not isinstance(self.priority, int) or not 0 <= self.priority <= MAX_PRIORITY:
            raise ValueError(f"Gang.priority must be an integer 0..{MAX_PRIORITY}, got {self.priority!r}")
        if self.start_after is not None and self.deadline is not None and self.deadline < self.start_after:
            raise ValueError(f"Gang {self.key}: deadline {self.deadline} is before start-after {self.start_after}")
        if self.duration_seconds is not None and self.duration_seconds <= 0:
            raise ValueError(f"Gang.duration_seconds must be > 0, got {self.duration_seconds!r}")
        if not self.team:
            object.__setattr__(self, "team", self.namespace)

    @property
    def key(self) -> str:
        """``Kind/namespace/name``: unique across both APIs."""
        return f"{self.kind}/{self.namespace}/{self.name}"


# ---------------------------------------------------------------------------------------------- parsing


class _Reader:
    def __init__(self, kind: str, obj: Any) -> None:
        if not isinstance(obj, Mapping):
            raise GangError(f"{kind}: expected an object (a mapping), got {type(obj).__name__}")
        meta = obj.get("metadata")
        if not isinstance(meta, Mapping):
            raise GangError(f"{kind}: metadata: expected a mapping")
        self.namespace = meta.get("namespace")
        self.name = meta.get("name")
        if not isinstance(self.name, str) or not self.name:
            raise GangError(f"{kind}: metadata.name: missing")
        if not isinstance(self.namespace, str) or not self.namespace:
            raise GangError(f"{kind} {self.name}: metadata.namespace: missing")
        self.where = f"{kind} {self.namespace}/{self.name}"
        uid = meta.get("uid")
        self.uid = uid if isinstance(uid, str) else ""
        annotations = meta.get("annotations") or {}
        if not isinstance(annotations, Mapping):
            self.fail("metadata.annotations", "expected a mapping of strings")
        self.annotations: Mapping[str, Any] = annotations

    def fail(self, path: str, message: str) -> None:
        raise GangError(f"{self.where}: {path}: {message}")

    def mapping(self, parent: Mapping[str, Any], key: str, path: str, *, required: bool = False) -> Mapping[str, Any]:
        value = parent.get(key)
        if value is None:
            if required:
                self.fail(path, "missing")
            return {}
        if not isinstance(value, Mapping):
            self.fail(path, f"expected a mapping, got {type(value).__name__}")
        mapping: Mapping[str, Any] = value
        return mapping

    def count(self, value: Any, path: str) -> int:
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
        self.fail(path, f"expected an integer >= 0, got {value!r}")
        raise AssertionError  # pragma: no cover - fail raises

    def quantity(self, value: Any, path: str) -> int:
        """A whole GPU count; Kubernetes serves quantities as ints or strings (``"8"``)."""
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
        if isinstance(value, str) and _UINT.match(value.strip()):
            return int(value.strip())
        self.fail(path, f"expected a whole number of GPUs, got {value!r}")
        raise AssertionError  # pragma: no cover

    def annotation(self, short: str) -> str | None:
        value = self.annotations.get(PREFIX + short)
        if value is None:
            return None
        if not isinstance(value, str):
            self.fail(f"metadata.annotations[{PREFIX}{short}]", f"expected a string, got {value!r}")
        return str(value).strip()

    def gates(self) -> tuple[str, ...]:
        """The names in Kueue's ``kueue.x-k8s.io/admission-gated-by`` annotation (comma-separated), in order."""
        raw = self.annotations.get(ADMISSION_GATED_BY)
        if raw is None:
            return ()
        if not isinstance(raw, str):
            self.fail(f"metadata.annotations[{ADMISSION_GATED_BY}]", f"expected a string, got {raw!r}")
        return tuple(name.strip() for name in str(raw).split(",") if name.strip())

    def timestamp(self, short: str) -> int | None:
        raw = self.annotation(short)
        if raw is None:
            return None
        if _UINT.match(raw):
            return int(raw)
        try:
            parsed = datetime.fromisoformat(raw.replace("Z", "+00:00"))
        except ValueError:
            parsed = None
        if parsed is None or parsed.tzinfo is None:
            self.fail(f"metadata.annotations[{PREFIX}{short}]",
                      f"expected RFC 3339 with a zone (2026-01-31T02:00:00Z) or Unix seconds, got {raw!r}")
            raise AssertionError  # pragma: no cover
        return int(parsed.timestamp())

    def duration(self) -> int | None:
        raw = self.annotation("duration")
        if raw is None:
            return None
        try:
            seconds = parse_duration_seconds(raw)
        except ValueError as exc:
            self.fail(f"metadata.annotations[{PREFIX}duration]", f"{exc}, got {raw!r}")
            raise AssertionError from None  # pragma: no cover
        if seconds <= 0:
            self.fail(f"metadata.annotations[{PREFIX}duration]", f"must be > 0, got {raw!r}")
        return math.ceil(seconds)

    def priority(self, api_value: int | None) -> int:
        raw = self.annotation("priority")
        if raw is not None:
            low = raw.lower()
            if low in PRIORITY_TIERS:
                return PRIORITY_TIERS[low]
            if _UINT.match(low) and int(low) <= MAX_PRIORITY:
                return int(low)
            self.fail(f"metadata.annotations[{PREFIX}priority]",
                      f"expected 0..{MAX_PRIORITY} or one of {', '.join(PRIORITY_TIERS)}, got {raw!r}")
        if api_value is None:
            return PRIORITY_TIERS[DEFAULT_PRIORITY_TIER]
        return min(max(api_value, 0), MAX_PRIORITY)

    def pod_gpus(self, template: Any, path: str) -> tuple[int, str | None]:
        """(GPUs of one pod, its ``karpenter.sh/nodepool`` node selector) from a pod template."""
        if not isinstance(template, Mapping):
            self.fail(path, "expected a pod template (a mapping)")
        spec = self.mapping(template, "spec", f"{path}.spec", required=True)
        total = 0
        init_peak = 0
        for kind in ("containers", "initContainers"):
            containers = spec.get(kind) or []
            if not isinstance(containers, Sequence) or isinstance(containers, str):
                self.fail(f"{path}.spec.{kind}", "expected a list")
            for i, ctr in enumerate(containers):
                where = f"{path}.spec.{kind}[{i}]"
                if not isinstance(ctr, Mapping):
                    self.fail(where, "expected a container (a mapping)")
                n = self.container_gpus(ctr, where)
                if kind == "containers" or ctr.get("restartPolicy") == "Always":
                    total += n  # containers and sidecars run for the pod's whole life
                else:
                    init_peak = max(init_peak, n)
        selector = spec.get("nodeSelector") or {}
        pool = selector.get(NODEPOOL_LABEL) if isinstance(selector, Mapping) else None
        return max(total, init_peak), pool if isinstance(pool, str) and pool else None

    def container_gpus(self, ctr: Mapping[str, Any], path: str) -> int:
        resources = self.mapping(ctr, "resources", f"{path}.resources")
        found: dict[str, int] = {}
        for section in ("limits", "requests"):
            values = self.mapping(resources, section, f"{path}.resources.{section}")
            if GPU_RESOURCE in values:
                found[section] = self.quantity(values[GPU_RESOURCE], f"{path}.resources.{section}[{GPU_RESOURCE}]")
        if "limits" in found and "requests" in found and found["limits"] != found["requests"]:
            self.fail(f"{path}.resources", f"{GPU_RESOURCE} requests {found['requests']} != limits {found['limits']}")
        return found.get("limits", found.get("requests", 0))


def _condition_true(status: Mapping[str, Any], kind: str) -> bool:
    conditions = status.get("conditions") or []
    if not isinstance(conditions, Sequence):
        return False
    return any(isinstance(c, Mapping) and c.get("type") == kind and c.get("status") == "True" for c in conditions)


def parse_kueue_workload(obj: Mapping[str, Any]) -> Gang:
    """A Kueue ``Workload`` (v1beta1 or v1beta2) -> ``Gang``. ``GangError`` names the bad field."""
    r = _Reader("Workload", obj)
    spec = r.mapping(obj, "spec", "spec", required=True)
    status = r.mapping(obj, "status", "status")
    pod_sets = spec.get("podSets")
    if not isinstance(pod_sets, Sequence) or isinstance(pod_sets, str) or not pod_sets:
        r.fail("spec.podSets", "expected a non-empty list of pod sets")
        raise AssertionError  # pragma: no cover
    admitted = _condition_true(status, "Admitted")
    assigned: dict[str, int] = {}
    if admitted:
        admission = r.mapping(status, "admission", "status.admission")
        for i, psa in enumerate(admission.get("podSetAssignments") or []):
            if isinstance(psa, Mapping) and "count" in psa and isinstance(psa.get("name"), str):
                assigned[psa["name"]] = r.count(psa["count"], f"status.admission.podSetAssignments[{i}].count")
    gpus = pods = 0
    pools: set[str] = set()
    for i, ps in enumerate(pod_sets):
        path = f"spec.podSets[{i}]"
        if not isinstance(ps, Mapping):
            r.fail(path, "expected a pod set (a mapping)")
        count = r.count(ps.get("count", 1), f"{path}.count")  # the schema's default is 1
        name = ps.get("name", "main")
        count = assigned.get(name, count) if isinstance(name, str) else count
        if "template" not in ps:
            r.fail(f"{path}.template", "missing")
        per_pod, pool = r.pod_gpus(ps["template"], f"{path}.template")
        gpus += count * per_pod
        pods += count
        if pool is not None:
            pools.add(pool)
    priority = spec.get("priority")
    if priority is not None and (not isinstance(priority, int) or isinstance(priority, bool)):
        r.fail("spec.priority", f"expected an integer, got {priority!r}")
    duration = r.duration()
    if duration is None and spec.get("maximumExecutionTimeSeconds") is not None:
        duration = r.count(spec["maximumExecutionTimeSeconds"], "spec.maximumExecutionTimeSeconds") or None
    queue = spec.get("queueName")
    return _gang(r, "Workload", gpus, pods, admitted, r.priority(priority), pools, duration,
                 inactive=_condition_true(status, "Finished"), deactivated=spec.get("active") is False,
                 queue=queue if isinstance(queue, str) and queue else None)


def parse_volcano_podgroup(
    obj: Mapping[str, Any],
    *,
    gpus_per_pod: int | None = None,
    priority_classes: Mapping[str, int] | None = None,
) -> Gang:
    """A Volcano ``PodGroup`` -> ``Gang``.

    ``gpus_per_pod`` is used only when ``spec.minResources`` has no ``nvidia.com/gpu``;
    ``priority_classes`` maps PriorityClass names to their values (``spec.priorityClassName``).
    """
    r = _Reader("PodGroup", obj)
    spec = r.mapping(obj, "spec", "spec", required=True)
    status = r.mapping(obj, "status", "status")
    min_member = r.count(spec.get("minMember", 0), "spec.minMember")
    resources = r.mapping(spec, "minResources", "spec.minResources")
    if GPU_RESOURCE in resources:
        gpus = r.quantity(resources[GPU_RESOURCE], f"spec.minResources[{GPU_RESOURCE}]")
    elif gpus_per_pod is not None:
        if gpus_per_pod < 0:
            raise ValueError(f"gpus_per_pod must be >= 0, got {gpus_per_pod}")
        gpus = min_member * gpus_per_pod
    else:
        r.fail(f"spec.minResources[{GPU_RESOURCE}]",
               "missing, and no per-pod GPU count was given to multiply spec.minMember by")
        raise AssertionError  # pragma: no cover
    phase = status.get("phase", "Pending")
    if phase not in ("Pending", "Running", "Unknown", "Inqueue", "Completed"):
        r.fail("status.phase", f"unknown phase {phase!r}")
    class_name = spec.get("priorityClassName")
    api_priority = (priority_classes or {}).get(class_name) if isinstance(class_name, str) else None
    return _gang(r, "PodGroup", gpus, min_member, phase in ("Inqueue", "Running"), r.priority(api_priority),
                 set(), r.duration(), inactive=phase == "Completed")


def _gang(r: _Reader, kind: GangKind, gpus: int, pods: int, admitted: bool, priority: int, pools: set[str],
          duration: int | None, *, inactive: bool, deactivated: bool = False, queue: str | None = None) -> Gang:
    pool = r.annotation("nodepool")
    if pool is None and len(pools) > 1:
        r.fail("spec.podSets[*].template.spec.nodeSelector",
               f"pod sets select different NodePools ({', '.join(sorted(pools))}); "
               f"set {PREFIX}nodepool to say which one the gang is accounted to")
    team = r.annotation("team") or ""
    start_after = r.timestamp("start-after")
    deadline = r.timestamp("deadline")
    if start_after is not None and deadline is not None and deadline < start_after:
        r.fail(f"metadata.annotations[{PREFIX}deadline]", f"{deadline} is before start-after {start_after}")
    # spec.active false: held for us to start (scheduled, never activated by us yet), else deactivated for good
    # or our name in Kueue's admission gate (the preferred hold, Kueue >= 0.19): held the same way
    gates = r.gates() if kind == "Workload" else ()
    held = (deactivated or ADMISSION_GATE in gates) and not inactive and start_after is not None \
        and r.annotation("activated-at") is None
    try:
        note = r.timestamp("planned-start")
    except GangError:
        note = None  # our own annotation, garbled: it is simply written again
    return Gang(
        kind=kind,
        namespace=str(r.namespace),
        name=str(r.name),
        gpus=gpus,
        pods=pods,
        admitted=admitted,
        priority=priority,
        team=team,
        nodepool=pool or (next(iter(pools)) if pools else None),
        start_after=start_after,
        deadline=deadline,
        duration_seconds=duration,
        inactive=inactive or (deactivated and not held),
        held=held,
        planned_start_note=note,
        queue=queue,
        uid=r.uid,
        gates=gates,
        deactivated=deactivated,
    )


def parse_gang(obj: Mapping[str, Any], **volcano: Any) -> Gang:
    """Dispatch on ``apiVersion``/``kind``; keyword arguments go to ``parse_volcano_podgroup``."""
    api = str(obj.get("apiVersion", "")) if isinstance(obj, Mapping) else ""
    kind = obj.get("kind") if isinstance(obj, Mapping) else None
    if api.startswith(KUEUE_GROUP + "/") and kind == "Workload":
        return parse_kueue_workload(obj)
    if api.startswith(VOLCANO_GROUP + "/") and kind == "PodGroup":
        return parse_volcano_podgroup(obj, **volcano)
    raise GangError(f"not a gang: apiVersion {api!r} kind {kind!r} (expected kueue.x-k8s.io Workload "
                    f"or scheduling.volcano.sh PodGroup)")


# ---------------------------------------------------------------------------------------------- placement


def format_gpus(gpus: float) -> str:
    """A GPU count for people: forecast GPUs are fractional (``18.0004``), so one decimal at most (``18``, ``12.5``)."""
    if math.isinf(gpus):
        return "unlimited"
    return f"{round(gpus, 1):g}"



@dataclass(frozen=True)
class Placement:
    """Where a gang runs: ``start`` (Unix s), the peak GPUs (inference + gang) over its run, and whether
    that peak fits under ``capacity``. ``detail`` explains the choice in one line (for logs and ``explain``)."""

    start: int
    peak_gpus: float
    fits: bool
    detail: str


def place_gang(
    gang: Gang,
    forecast_gpus_by_time: Sequence[tuple[int, float]],
    capacity: float,
    earliest: int,
    latest: int,
) -> Placement:
    """The start in ``[earliest, latest]`` that minimises the peak of inference + gang GPUs over the run.

    ``forecast_gpus_by_time`` is the inference GPU forecast as ``(time, gpus)`` points; each value
    holds until the next point, and the last one holds past the end (the forecast says nothing
    later, and assuming the trough continues would be the optimistic mistake). Candidate starts are
    ``earliest`` and every forecast point inside the window: the peak only changes there. Ties go
    to the earliest start (finish sooner, free the GPUs sooner). Among starts, those whose peak fits
    ``capacity`` win; if none fits, the lowest peak is still returned with ``fits=False``.
    The run length is ``gang.duration_seconds`` (``ValueError`` without one).
    """
    if gang.duration_seconds is None:
        raise ValueError(f"{gang.key}: cannot place a gang without a run time (set {PREFIX}duration)")
    if latest < earliest:
        raise ValueError(f"{gang.key}: empty window: latest {latest} < earliest {earliest}")
    points = sorted((int(t), float(g)) for t, g in forecast_gpus_by_time)
    if not points:
        raise ValueError(f"{gang.key}: empty GPU forecast")
    if any(not math.isfinite(g) for _, g in points):
        raise ValueError(f"{gang.key}: GPU forecast has non-finite values")
    times = [t for t, _ in points]
    duration = gang.duration_seconds

    def inference_peak(start: int) -> float:
        end = start + duration
        # the point in force at ``start`` (the first point if the forecast starts later), then every later one
        first = max(0, bisect.bisect_right(times, start) - 1)
        return max([points[first][1], *(g for t, g in points[first + 1 :] if t < end)])

    candidates = sorted({earliest, *(t for t in times if earliest < t <= latest)})
    best: tuple[bool, float, int] | None = None
    for start in candidates:
        peak = inference_peak(start) + gang.gpus
        key = (peak > capacity, peak, start)
        if best is None or key < best:
            best = key
    assert best is not None
    over, peak, start = best
    verdict = "fits" if not over else f"EXCEEDS capacity {format_gpus(capacity)} at every start"
    return Placement(
        start=start,
        peak_gpus=peak,
        fits=not over,
        detail=(f"{gang.key}: {gang.gpus} GPU(s) for {duration}s; start {start} in [{earliest}, {latest}] "
                f"({len(candidates)} candidates) gives the lowest peak {format_gpus(peak)} GPU(s); {verdict}"),
    )



# ---------------------------------------------------------------------------------------------- step functions


def compress_points(times: Sequence[int], gpus: Sequence[float]) -> list[tuple[int, float]]:
    """``(time, gpus)`` points with runs of equal values merged (``place_gang`` only needs the changes)."""
    out: list[tuple[int, float]] = []
    for t, g in zip(times, gpus, strict=True):
        if not out or out[-1][1] != g:
            out.append((int(t), float(g)))
    return out


def replica_gpu_points(
    times: Sequence[int],
    rates: Sequence[float],
    *,
    capacity_per_replica: float,
    min_replicas: int,
    max_replicas: int,
    gpus_per_replica: int,
) -> list[tuple[int, float]]:
    """A demand forecast (req/s per step) as the GPUs its replicas hold: ``ceil(rate / capacity)`` clamped to
    ``[min, max]`` replicas x GPUs per replica, as compressed ``(time, GPUs)`` points. A missing (NaN) or
    negative rate counts as no demand (the minimum replicas)."""
    if capacity_per_replica <= 0:
        raise ValueError(f"capacity_per_replica must be > 0, got {capacity_per_replica}")
    gpus: list[float] = []
    for rate in rates:
        r = float(rate) if math.isfinite(rate) else 0.0
        replicas = math.ceil(max(r, 0.0) / capacity_per_replica - 1e-9)
        gpus.append(float(min(max(replicas, min_replicas), max_replicas) * gpus_per_replica))
    return compress_points([int(t) for t in times], gpus)


def _value_at(points: Sequence[tuple[int, float]], times: Sequence[int], t: int) -> float:
    """The value in force at ``t`` (the first value before the first point: a forecast says nothing earlier)."""
    return points[max(0, bisect.bisect_right(times, t) - 1)][1]


def sum_points(series: Sequence[Sequence[tuple[int, float]]]) -> list[tuple[int, float]]:
    """The sum of step functions (each value holds until its next point, the last one for ever)."""
    parts = [sorted((int(t), float(g)) for t, g in s) for s in series if s]
    if not parts:
        return []
    part_times = [[t for t, _ in p] for p in parts]
    times = sorted({t for p in part_times for t in p})
    return compress_points(times, [sum(_value_at(p, pt, t) for p, pt in zip(parts, part_times, strict=True))
                                   for t in times])


def add_interval(points: Sequence[tuple[int, float]], start: int, end: int, gpus: float) -> list[tuple[int, float]]:
    """``points`` raised by ``gpus`` over ``[start, end)`` (a placed gang's run on top of the forecast)."""
    base = sorted((int(t), float(g)) for t, g in points) or [(start, 0.0)]
    times = [t for t, _ in base]
    grid = sorted({*times, start, end})
    return compress_points(grid, [_value_at(base, times, t) + (gpus if start <= t < end else 0.0) for t in grid])


# ---------------------------------------------------------------------------------------------- scheduled gangs


def scheduled(gang: Gang) -> bool:
    """A gang that is placed: pending (not admitted, not inactive), with a run time and a window bound."""
    return (not gang.inactive and not gang.admitted and gang.duration_seconds is not None
            and (gang.start_after is not None or gang.deadline is not None))


def placement_window(gang: Gang, now: int) -> tuple[int, int] | None:
    """``(earliest, latest)`` start of a scheduled gang seen at ``now``; None once its deadline has passed.

    Without a deadline the window is the single start ``max(now, start-after)``: nothing to move, but
    its nodes are still asked for one node start-up ahead."""
    earliest = max(now, gang.start_after if gang.start_after is not None else now)
    if gang.deadline is None:
        return earliest, earliest
    if gang.deadline < earliest:
        return None
    return earliest, gang.deadline


def holds_gpus(
    gang: Gang, now: int, horizon_seconds: int, planned_start: int | None = None, node_startup_seconds: float = 0.0
) -> bool:
    """Whether a gang's GPUs count (in the ceiling and in node headroom) at ``now``.

    Admitted: always; inactive: never. A placed gang (``planned_start``): over
    ``[planned_start - node start-up, ...)`` until it is admitted, so its nodes are asked for one node
    start-up ahead of its start; it stops counting one node start-up after its deadline if it never
    started (the grace lets an activation at the deadline land). Otherwise (no placement): from
    ``start-after - horizon`` until its deadline, as before placement existed.
    """
    if gang.inactive:
        return False
    if gang.admitted:
        return True
    if planned_start is not None:
        if gang.deadline is not None and now > max(gang.deadline, planned_start) + node_startup_seconds:
            return False
        return now >= planned_start - node_startup_seconds
    if gang.deadline is not None and gang.duration_seconds is not None and now > gang.deadline:
        return False  # its window is over: it will not be started for this run
    return gang.start_after is None or gang.start_after <= now + horizon_seconds


def place_gangs(
    gangs: Sequence[Gang],
    inference: Mapping[str | None, Sequence[tuple[int, float]]],
    capacity: Mapping[str | None, float],
    now: int,
    fixed: Mapping[str, int] | None = None,
    absent: Collection[str] = (),
) -> dict[str, Placement]:
    """Place every scheduled gang of ``gangs`` whose window is open (or whose start is ``fixed``), per NodePool.

    ``inference``: per pool, the inference GPU forecast as ``(time, GPUs)`` points (a pool missing or empty
    counts as no inference); ``capacity``: per pool, the GPUs the ceiling allows (missing = unbounded).
    Every other live gang of the pool (admitted, or pending without a window) is added as a constant, except those
    in ``absent`` (gangs the plan does not run: a pending gang the ceiling defers holds no GPUs, and counting it as
    always running would keep every scheduled gang from fitting under a binding ceiling); the
    ``fixed`` starts (frozen placements) are kept and their runs added next; the rest are placed one by one
    with ``place_gang`` -- higher priority first, then earlier deadline, then key -- each on top of the
    runs placed before it, so two gangs do not pile into the same trough. Pure and deterministic.
    """
    fixed = dict(fixed or {})
    out: dict[str, Placement] = {}
    live = [g for g in gangs if not g.inactive]
    placeable = {g.key: g for g in live if scheduled(g) and (g.key in fixed or placement_window(g, now) is not None)}
    for pool in sorted({g.nodepool for g in placeable.values()}, key=lambda p: p or ""):
        points = list(inference.get(pool) or []) or [(now, 0.0)]
        constant = sum(g.gpus for g in live if g.nodepool == pool and g.key not in placeable and g.key not in absent)
        if constant:
            points = [(t, v + constant) for t, v in points]
        cap = capacity.get(pool, math.inf)
        members = [g for g in placeable.values() if g.nodepool == pool]
        order = sorted(members, key=lambda g: (g.key not in fixed, -g.priority,
                                               g.deadline if g.deadline is not None else math.inf, g.key))
        for g in order:
            assert g.duration_seconds is not None
            if g.key in fixed:
                start = fixed[g.key]
                placement = place_gang(g, points, cap, start, start)
            else:
                window = placement_window(g, now)
                assert window is not None
                placement = place_gang(g, points, cap, *window)
            out[g.key] = placement
            points = add_interval(points, placement.start, placement.start + g.duration_seconds, g.gpus)
    return out
