"""Scale-down that drops no request: which pods a scale-down removes, written as ``pod-deletion-cost`` marks.

Why it exists: scaling a Deployment down through its scale subresource lets the ReplicaSet controller pick the
pods to delete, and it knows nothing about the requests each vLLM replica is generating. Its ranking
(``ActivePodsWithRanks`` in kube-controller-manager) deletes, in order: unscheduled before scheduled, Pending
before Running, not Ready before Ready, then **lower ``controller.kubernetes.io/pod-deletion-cost`` first**
(an int32, 0 when absent), then pods doubled up on a node, then the most recently Ready. So before a scale-down
of ``n`` replicas the controller gives the ``n`` idlest pods a *negative* cost and leaves every other pod
unmarked (cost 0): the ReplicaSet then removes exactly the pods that carry the least work, and a pod it keeps
is never written. Marking only the ``n`` (instead of a cost on every pod) is ``n`` writes per scale-down, and
the marked pods mostly disappear with the scale-down itself.

Which pods count as idle (pure: the loop passes the pods it listed and the per-pod in-flight numbers):

* only the Deployment's own pods: controlled by a ReplicaSet named ``<deployment>-<pod-template-hash>`` (the
  Deployment controller's naming), not terminating, not finished (the ReplicaSet ignores those too);
* in flight = ``vllm:num_requests_running + vllm:num_requests_waiting`` of the pod, now;
* a pod that is **not Ready** is the best to remove (it is out of the Service's endpoints, serving nothing new;
  the ReplicaSet removes it first anyway): ranked first;
* a Ready pod **without a series** that turned Ready less than :data:`UNSCRAPED_GRACE_SECONDS` ago has just
  started and was not scraped yet: counted as idle (0 in flight); one Ready for longer has an **unknown** load
  (its metrics are not scraped): it is never marked (left to the ReplicaSet's own order, like an unmarked pod);
* ties: the most recently Ready first (it has the coldest caches; the ReplicaSet's own tie-break), then name;
* when the in-flight query failed, nothing is marked (the load of every pod is unknown) and the plan says so;
* when a pod of the Deployment carries a deletion cost the controller did not set (a team's own, e.g. in the
  pod template), nothing is marked: that order is theirs.

The ``k`` chosen pods get costs ``-k .. -1``, idlest lowest. Each marked pod also carries :data:`MARK_ANNOTATION`
(``{"cost": c, "markedAt": unix}``) so the controller recognises its own marks after a restart or a leader
change, and never removes a cost it did not write. Marks are cleared (both annotations) once the scale-down
has landed (no more active pods than replicas: the ReplicaSet removed what it was asked to), when the tick
scales up instead, or after :data:`MARK_TTL_SECONDS` whatever happens (a stalled rollout must not keep
steering later scale-downs); a later scale-down re-decides every mark, clearing the ones it does not keep.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from autoscaler.domain.annotations import PREFIX
from autoscaler.ports import PodView

DELETION_COST_ANNOTATION = "controller.kubernetes.io/pod-deletion-cost"
MARK_ANNOTATION = PREFIX + "scale-down-mark"
UNSCRAPED_GRACE_SECONDS = 120  # two scrapes at a 60 s interval: Ready for less, and no series yet = just started
MARK_TTL_SECONDS = 600

Patch = Mapping[str, str | None]


@dataclass(frozen=True)
class PodMark:
    """One pod a scale-down should remove: the cost it gets, its in-flight requests (None: not Ready, unknown)."""

    pod: str
    cost: int
    in_flight: float | None
    why: str

    def to_dict(self) -> dict[str, Any]:
        return {"pod": self.pod, "cost": self.cost, "in_flight": self.in_flight, "why": self.why}


@dataclass(frozen=True)
class ScaleDownMarks:
    """What to write on the pods of one Deployment: marks to set and marks of ours to clear.

    ``patches`` are the merge patches of ``metadata.annotations`` per pod (None removes one), only for pods whose
    annotations must change. ``unknown`` lists Ready pods of unknown load (never marked); ``note`` says why fewer
    pods than asked were marked, or why marks of ours are kept.
    """

    marks: tuple[PodMark, ...] = ()
    clear: tuple[str, ...] = ()
    unknown: tuple[str, ...] = ()
    note: str | None = None
    patches: Mapping[str, Patch] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "marked": [m.to_dict() for m in self.marks],
            "cleared": list(self.clear),
            "unknown_load": list(self.unknown),
            "note": self.note,
        }

    @property
    def empty(self) -> bool:
        return not (self.marks or self.clear or self.unknown or self.note)


def owned_by(deployment: str, pod: PodView) -> bool:
    """The pod is controlled by one of the Deployment's ReplicaSets (``<deployment>-<pod-template-hash>``)."""
    return (pod.owner_replicaset is not None and pod.template_hash is not None
            and pod.owner_replicaset == f"{deployment}-{pod.template_hash}")


def active_pods(deployment: str, pods: Sequence[PodView]) -> list[PodView]:
    """The Deployment's pods a ReplicaSet may still delete: its own, not terminating, not finished."""
    return [p for p in pods if not p.terminating and p.phase not in ("Succeeded", "Failed") and owned_by(deployment, p)]


def read_mark(pod: PodView) -> tuple[int, float] | None:
    """``(cost, markedAt)`` of the controller's mark on ``pod``; None when absent or unreadable."""
    raw = pod.annotations.get(MARK_ANNOTATION)
    if raw is None:
        return None
    try:
        data = json.loads(raw)
        cost, at = data["cost"], data["markedAt"]
    except (ValueError, TypeError, KeyError):
        return None
    if isinstance(cost, bool) or not isinstance(cost, int) or isinstance(at, bool) or not isinstance(at, int | float):
        return None
    return cost, float(at)


def _ours(pod: PodView) -> bool:
    """The pod's deletion cost is the one the controller wrote (its mark records the same value)."""
    mark = read_mark(pod)
    return mark is not None and pod.annotations.get(DELETION_COST_ANNOTATION) == str(mark[0])


def _clear_patch(pod: PodView) -> Patch | None:
    """Remove the controller's mark: the cost too when it is still ours, else only the record (None: no mark)."""
    if MARK_ANNOTATION not in pod.annotations:
        return None
    return {DELETION_COST_ANNOTATION: None, MARK_ANNOTATION: None} if _ours(pod) else {MARK_ANNOTATION: None}


def _marked(pods: Sequence[PodView]) -> list[PodView]:
    return [p for p in pods if not p.terminating and MARK_ANNOTATION in p.annotations]


def _fmt(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def _clear_all(pods: Sequence[PodView], note: str | None) -> ScaleDownMarks:
    patches = {p.name: patch for p in _marked(pods) if (patch := _clear_patch(p)) is not None}
    return ScaleDownMarks(clear=tuple(sorted(patches)), note=note, patches=patches)


def plan_marks(
    deployment: str, pods: Sequence[PodView], remove: int, loads: Mapping[str, float] | None, now: float,
) -> ScaleDownMarks:
    """Marks for a scale-down removing ``remove`` replicas of ``deployment``.

    ``pods``: every pod the Deployment's selector listed; ``loads``: in-flight requests per pod name (None: the
    query failed, every load is unknown); ``now``: Unix seconds. Marks of ours on pods not chosen are cleared.
    """
    if remove <= 0:
        return plan_clear(deployment, pods, replicas=len(active_pods(deployment, pods)), now=now)
    if loads is None:
        return _clear_all(pods, "in-flight requests per pod unknown (the query failed): no pod marked, the "
                                "ReplicaSet's default order applies")
    active = active_pods(deployment, pods)
    foreign = sorted(p.name for p in active if DELETION_COST_ANNOTATION in p.annotations and not _ours(p))
    if foreign:
        return _clear_all(pods, f"{len(foreign)} pod(s) carry a {DELETION_COST_ANNOTATION} the controller did not "
                                f"set ({', '.join(foreign[:3])}{', ...' if len(foreign) > 3 else ''}): no pod "
                                "marked, that order is kept")
    ranked: list[tuple[tuple[int, float, float, str], PodView, float | None, str]] = []
    unknown: list[str] = []
    for p in active:
        load = loads.get(p.name)
        load = load if load is not None and math.isfinite(load) else None
        if p.ready_since is None:
            why = "not Ready" + ("" if load is None else f", {_fmt(load)} in flight")
            ranked.append(((0, load or 0.0, -p.created, p.name), p, load, why))
        elif load is not None:
            ranked.append(((1, load, -p.ready_since, p.name), p, load, f"{_fmt(load)} in flight"))
        elif now - p.ready_since < UNSCRAPED_GRACE_SECONDS:
            why = f"Ready {_fmt(max(0.0, now - p.ready_since))}s ago, not scraped yet"
            ranked.append(((1, 0.0, -p.ready_since, p.name), p, None, why))
        else:
            unknown.append(p.name)
    ranked.sort(key=lambda r: r[0])
    chosen = ranked[:remove]
    k = len(chosen)
    marks = tuple(PodMark(p.name, i - k, load, why) for i, (_, p, load, why) in enumerate(chosen))
    note = None
    if k < remove:
        note = (f"{k} of {remove} pod(s) to remove marked: "
                + (f"{len(unknown)} Ready pod(s) have no in-flight series (unknown load, never marked)"
                   if unknown else "no more active pods")
                + "; the ReplicaSet picks the rest in its default order")
    by_name = {p.name: p for p in pods}
    patches: dict[str, Patch] = {}
    for m in marks:
        pod = by_name[m.pod]
        if _ours(pod) and pod.annotations.get(DELETION_COST_ANNOTATION) == str(m.cost):
            continue  # already marked so (a scale-down retried): no write
        patches[m.pod] = {DELETION_COST_ANNOTATION: str(m.cost),
                          MARK_ANNOTATION: json.dumps({"cost": m.cost, "markedAt": int(now)}, separators=(",", ":"))}
    chosen_names = {m.pod for m in marks}
    cleared: list[str] = []
    for p in _marked(pods):
        if p.name not in chosen_names and (patch := _clear_patch(p)) is not None:
            patches[p.name] = patch
            cleared.append(p.name)
    return ScaleDownMarks(marks, tuple(sorted(cleared)), tuple(sorted(unknown)), note, patches)


def plan_clear(
    deployment: str, pods: Sequence[PodView], replicas: int, now: float, *, scaling_up: bool = False
) -> ScaleDownMarks:
    """Marks of ours to clear on a tick that does not scale ``deployment`` down.

    Cleared when the last scale-down has landed (active pods <= ``replicas``), when the tick scales up, or when a
    mark is older than :data:`MARK_TTL_SECONDS`; kept while the ReplicaSet still has pods to remove.
    """
    marked = _marked(pods)
    if not marked:
        return ScaleDownMarks()
    active = len(active_pods(deployment, pods))
    if scaling_up or active <= replicas:
        return _clear_all(pods, None)
    expired = [p for p in marked if (m := read_mark(p)) is None or now - m[1] >= MARK_TTL_SECONDS]
    patches = {p.name: patch for p in expired if (patch := _clear_patch(p)) is not None}
    kept = len(marked) - len(patches)
    note = (f"{kept} mark(s) kept: {active} active pods > {replicas} replicas, the ReplicaSet is still removing "
            "pods") if kept else None
    return ScaleDownMarks(clear=tuple(sorted(patches)), note=note, patches=patches)
