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
* a Ready pod **with a series** is ranked by its in-flight requests, fewest first;
* a Ready pod **without a series** that turned Ready less than :data:`UNSCRAPED_GRACE_SECONDS` ago has just
  started and was not scraped yet. Its load is unknown, not zero: it joined the Service's endpoints and may be
  serving already, so it is ranked as if it carried the Deployment's mean in-flight load (of its Ready pods with
  a series; among pods of that load, the most recently Ready first): a pod *measured* idle always goes before
  it, a pod measured busier than the mean after it. One Ready for longer without a series has an unknown load
  for good (its metrics are not scraped): it is never marked (left to the ReplicaSet's own order, like an
  unmarked pod);
* ties: the most recently Ready first (it has the coldest caches; the ReplicaSet's own tie-break), then name;
* when the in-flight query failed, the load of every pod is unknown: with the Deployment's NodePool read on the tick,
  the pods are marked by node alone (below: the emptiest nodes first, a not Ready pod before them, the most recently
  Ready first among equals; a Ready pod on a node the read did not cover is not marked), which is no blinder to the
  load than the ReplicaSet's own order (newest first) and lets nodes empty; without the read nothing is marked.
  Either way the plan says so (``unmarked`` = ``no_pod_loads``);
* when a pod of the Deployment carries a deletion cost the controller did not set (a team's own, e.g. in the
  pod template), nothing is marked: that order is theirs. The plan says so (``unmarked``), and the loop puts it
  in the ``ScaledDown`` Event, the status, the log and a counter.

**Whole nodes first.** A cluster pays for whole nodes, and Karpenter removes a node only once no pod holds it, so
a scale-down that takes one pod from each of several nodes frees GPUs that are still billed. When the Deployment's
NodePool was read on the tick (``ports.PoolGpus.node_gpus``: the GPUs the pods on each node request), Ready pods are
ranked by the GPUs in use on their node, fewest first, and by load only among pods on equally used nodes: the
scale-down takes the pods of the emptiest nodes, the mirror of the scheduler's bin-packing, so the nodes that
empty are consolidated (the fleet simulator removes replicas in the same order for our policy,
``simulation.cluster``). A busier pod on an emptier node may so go before an idler one on a full node: like any
removed pod, it finishes its requests in its ``preStop`` hook (the example Deployment's). A pod on a node the read
did not cover (no NodePool, not Ready) ranks after every pod on a node it did. Without the read (a Deployment naming
no NodePool, a failed read) the order is by load alone.

**During a rollout the marks cannot choose** (:func:`guard_scale_down`). While more than one ReplicaSet of the
Deployment has pods, the Deployment controller splits a scale-down across them in proportion to their sizes
(``scale`` in its ``sync.go``), and each ReplicaSet deletes its share in its own order: a ReplicaSet whose share
is larger than the marked pods it has deletes unmarked, possibly busy, pods while marked idle pods of another
survive. So a scale-down is held while a rollout is under way (a ``rollout_hold`` step; scale-ups are never
held). A rollout that does not finish must not hold it for ever: once the Deployment controller reports the
rollout stuck (its ``Progressing`` condition with reason ``ProgressDeadlineExceeded``, after the Deployment's
``progressDeadlineSeconds`` without progress) or it has overlapped for :data:`ROLLOUT_HOLD_MAX_SECONDS` (a
paused or slowly progressing rollout never reports that), the scale-down goes ahead (a ``rollout_stuck`` step)
with the idlest pods of *each* ReplicaSet marked, up to ``n`` per ReplicaSet: whatever share the split gives a
ReplicaSet (at most ``n``), it removes its own idlest pods first. That is the best the marks can do then; which
ReplicaSet loses how many is the Deployment controller's choice, and the plan says so (``unmarked`` =
``rollout``).

The ``k`` chosen pods get costs ``-k .. -1``, idlest lowest. Each marked pod also carries :data:`MARK_ANNOTATION`
(``{"cost": c, "markedAt": unix}``) so the controller recognises its own marks after a restart or a leader
change, and never removes a cost it did not write, and the label :data:`MARK_LABEL`, so one label-selected list
finds every pod it marked, whichever Deployment it belongs to now (:func:`release_marks`). Marks are cleared
(both annotations and the label) once the scale-down has landed (no more active pods than replicas: the
ReplicaSet removed what it was asked to), when the tick scales up or holds for a rollout instead, after
:data:`MARK_TTL_SECONDS` whatever happens (a stalled rollout must not keep steering later scale-downs), and as
soon as the Deployment leaves the controller's care (opted out, advisory, invalid annotations, a namespace the
configuration excludes): a later ``kubectl scale`` must not be steered by marks nobody maintains. A later
scale-down re-decides every mark, clearing the ones it does not keep.

**The marks must be in place before the scale.** The loop re-reads the pods after writing the marks and scales
only when the read shows every planned cost (:func:`check_marks`): a read answered after the patches means the
API server serves the marks (and, with consistent reads from its watch cache, that the cache feeding the
ReplicaSet controller's informers holds them) before the scale is even written. A mark not in place (a failed
patch, a webhook or another writer that removed it) holds the scale-down for that tick and it is retried; after
:data:`MARK_CONFIRM_SECONDS` of that, it goes ahead without relying on the marks, and says so.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from autoscaler.domain.annotations import PREFIX
from autoscaler.domain.types import Step
from autoscaler.ports import PodView

DELETION_COST_ANNOTATION = "controller.kubernetes.io/pod-deletion-cost"
MARK_ANNOTATION = PREFIX + "scale-down-mark"
MARK_LABEL = PREFIX + "scale-down-mark"  # "true" on every pod carrying a mark of ours: found by one list
UNSCRAPED_GRACE_SECONDS = 120  # two scrapes at a 60 s interval: Ready for less, and no series yet = just started
MARK_TTL_SECONDS = 600
# A rollout that has overlapped this long no longer holds a scale-down (the marks are then written per
# ReplicaSet): long enough for a GPU Deployment's rollout (minutes per pod to load a model), short enough that a
# paused or crawling rollout does not keep idle GPUs for hours.
ROLLOUT_HOLD_MAX_SECONDS = 3600
# Marks not in place on the read after writing them hold the scale-down this long (a tick or four), then it goes
# ahead without them: a transient write failure costs one tick, a persistent one (a webhook refusing the patch)
# does not block scale-downs for good.
MARK_CONFIRM_SECONDS = 120

# Why a scale-down's marks did not choose every pod it removes (``ScaleDownMarks.unmarked``, the metric's label).
FOREIGN_COST = "foreign_cost"  # a pod carries a deletion cost the controller did not set: that order is kept
NO_POD_LOADS = "no_pod_loads"  # in-flight requests per pod unknown (the query failed, or no per-pod source)
UNSCRAPED_PODS = "unscraped_pods"  # Ready pods without an in-flight series: fewer pods marked than removed
PODS_UNREAD = "pods_unread"  # the Deployment's pods could not be listed
MARKS_UNCONFIRMED = "marks_unconfirmed"  # the marks were not in place on a read after writing them
ROLLOUT = "rollout"  # more than one ReplicaSet has pods: the Deployment controller's split decides
UNMARKED_REASONS = (FOREIGN_COST, NO_POD_LOADS, UNSCRAPED_PODS, PODS_UNREAD, MARKS_UNCONFIRMED, ROLLOUT)

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
    annotations must change (:func:`label_patch` gives the label that goes with each). ``unknown`` lists Ready
    pods of unknown load (never marked); ``note`` says why fewer pods than asked were marked, or why marks of
    ours are kept; ``unmarked`` is the reason code (one of :data:`UNMARKED_REASONS`) when the marks do not choose
    every pod the scale-down removes.
    """

    marks: tuple[PodMark, ...] = ()
    clear: tuple[str, ...] = ()
    unknown: tuple[str, ...] = ()
    note: str | None = None
    patches: Mapping[str, Patch] = field(default_factory=dict)
    unmarked: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "marked": [m.to_dict() for m in self.marks],
            "cleared": list(self.clear),
            "unknown_load": list(self.unknown),
            "note": self.note,
            "unmarked": self.unmarked,
        }

    @property
    def empty(self) -> bool:
        return not (self.marks or self.clear or self.unknown or self.note)


def owned_by(deployment: str, pod: PodView) -> bool:
    """The pod is controlled by one of the Deployment's ReplicaSets (``<deployment>-<pod-template-hash>``)."""
    return (pod.owner_replicaset is not None and pod.template_hash is not None
            and pod.owner_replicaset == f"{deployment}-{pod.template_hash}")


def deployment_of(pod: PodView) -> str | None:
    """The Deployment whose ReplicaSet controls ``pod`` (by the Deployment controller's naming), None: none."""
    owner, suffix = pod.owner_replicaset, pod.template_hash
    if owner is None or not suffix or not owner.endswith("-" + suffix) or len(owner) <= len(suffix) + 1:
        return None
    return owner[: -len(suffix) - 1]


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


def label_patch(patch: Patch) -> dict[str, str | None]:
    """The :data:`MARK_LABEL` change that goes with an annotation patch: set with a mark, removed with it."""
    if MARK_ANNOTATION not in patch:
        return {}
    return {MARK_LABEL: "true" if patch[MARK_ANNOTATION] is not None else None}


def _ours(pod: PodView) -> bool:
    """The pod's deletion cost is the one the controller wrote (its mark records the same value)."""
    mark = read_mark(pod)
    return mark is not None and pod.annotations.get(DELETION_COST_ANNOTATION) == str(mark[0])


def _has_mark(pod: PodView) -> bool:
    return MARK_ANNOTATION in pod.annotations or MARK_LABEL in pod.labels


def _clear_patch(pod: PodView) -> Patch | None:
    """Remove the controller's mark: the cost too when it is still ours, else only the record (None: no mark)."""
    if not _has_mark(pod):
        return None
    return {DELETION_COST_ANNOTATION: None, MARK_ANNOTATION: None} if _ours(pod) else {MARK_ANNOTATION: None}


def _marked(pods: Sequence[PodView]) -> list[PodView]:
    return [p for p in pods if not p.terminating and _has_mark(p)]


def has_marks(pods: Sequence[PodView]) -> bool:
    """Some pod that is not terminating carries a mark of ours (it must be cleared some time)."""
    return bool(_marked(pods))


def _fmt(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def _clear_all(pods: Sequence[PodView], note: str | None, unmarked: str | None = None) -> ScaleDownMarks:
    patches = {p.name: patch for p in _marked(pods) if (patch := _clear_patch(p)) is not None}
    return ScaleDownMarks(clear=tuple(sorted(patches)), note=note, patches=patches, unmarked=unmarked)


def release_marks(pods: Sequence[PodView], why: str) -> ScaleDownMarks:
    """Clear every mark of ours on ``pods`` now, whatever its age: their Deployment left the controller's care
    (``why``), so nothing maintains the marks any more and a later manual scale must not be steered by them."""
    return _clear_all(pods, f"marks cleared: {why}")


Rank = tuple[int, float, int, float, str]


def _node_text(pod: PodView, node_gpus: Mapping[str, int] | None) -> str:
    if not node_gpus:
        return ""
    used = node_gpus.get(pod.node or "")
    if used is None:
        return f", its node {pod.node or '(none)'} not read"
    return f", on {pod.node} with {used} GPU(s) in use"


def _ranked(
    active: Sequence[PodView], loads: Mapping[str, float] | None, now: float,
    node_gpus: Mapping[str, int] | None = None,
) -> tuple[list[tuple[Rank, PodView, float | None, str]], list[str]]:
    """The active pods a scale-down may mark, best to remove first by load (``_choose`` puts the emptiest nodes
    first), and the Ready ones of unknown load. ``node_gpus`` names each pod's node in its reason. ``loads`` None
    (the query failed): a Ready pod on a node ``node_gpus`` covers is ranked by node alone (the most recently Ready
    first among equals, the ReplicaSet's own tie-break); every other Ready pod is of unknown load."""

    def load_of(p: PodView) -> float | None:
        value = None if loads is None else loads.get(p.name)
        return value if value is not None and math.isfinite(value) else None

    ranked: list[tuple[Rank, PodView, float | None, str]] = []
    unknown: list[str] = []
    if loads is None:
        for p in active:
            if p.ready_since is None:
                ranked.append(((0, 0.0, 0, -p.created, p.name), p, None, "not Ready"))
            elif node_gpus and (p.node or "") in node_gpus:
                ranked.append(((1, 0.0, 0, -p.ready_since, p.name), p, None,
                               f"load unknown (no in-flight numbers per pod){_node_text(p, node_gpus)}"))
            else:
                unknown.append(p.name)
        ranked.sort(key=lambda r: r[0])
        return ranked, unknown

    measured = [v for p in active if p.ready_since is not None and (v := load_of(p)) is not None]
    typical = sum(measured) / len(measured) if measured else 0.0
    for p in active:
        load = load_of(p)
        where = _node_text(p, node_gpus)
        if p.ready_since is None:
            why = "not Ready" + ("" if load is None else f", {_fmt(load)} in flight")
            ranked.append(((0, load or 0.0, 0, -p.created, p.name), p, load, why))
        elif load is not None:
            ranked.append(((1, load, 0, -p.ready_since, p.name), p, load, f"{_fmt(load)} in flight{where}"))
        elif now - p.ready_since < UNSCRAPED_GRACE_SECONDS:
            why = (f"Ready {_fmt(max(0.0, now - p.ready_since))}s ago, not scraped yet (load unknown, taken as the "
                   f"mean {_fmt(round(typical, 2))} in flight){where}")
            # A pod measured idle goes first; at a busy mean, the ReplicaSet's own tie-break (most recently Ready).
            ranked.append(((1, typical, 1 if typical == 0 else 0, -p.ready_since, p.name), p, None, why))
        else:
            unknown.append(p.name)
    ranked.sort(key=lambda r: r[0])
    return ranked, unknown


def _choose(entries: Sequence[tuple[Rank, PodView, float | None, str]], remove: int,
            node_gpus: Mapping[str, int] | None, pod_gpus: int) -> list[tuple[Rank, PodView, float | None, str]]:
    """The ``remove`` best of ``entries`` (ranked by ``_ranked``). With ``node_gpus`` (GPUs in use per node, as the
    NodePools were read) the Ready pods on the emptiest nodes go first (a node not read after every node that was),
    then by their rank, chosen one at a time: each pod chosen frees its GPUs on its node, so the next is ranked on
    what the nodes would hold then (the pods of a node that starts to empty follow, and it empties whole rather than a
    pod from each of two equal nodes). Without: the first ``remove`` by rank."""
    if not node_gpus:
        return list(entries[:remove])
    used = {node: float(gpus) for node, gpus in node_gpus.items()}
    left = list(entries)
    chosen: list[tuple[Rank, PodView, float | None, str]] = []

    def now_ranked(entry: tuple[Rank, PodView, float | None, str]) -> tuple[int, float, Rank]:
        rank, pod = entry[0], entry[1]
        ready = rank[0] == 1  # not Ready pods go first anyway, whatever their node
        return (rank[0], used.get(pod.node or "", math.inf) if ready else 0.0, rank)

    while left and len(chosen) < remove:
        best = min(left, key=now_ranked)
        left.remove(best)
        chosen.append(best)
        node = best[1].node
        if node is not None and node in used:
            used[node] -= pod_gpus
    return chosen


def plan_marks(
    deployment: str, pods: Sequence[PodView], remove: int, loads: Mapping[str, float] | None, now: float,
    *, per_replicaset: bool = False, node_gpus: Mapping[str, int] | None = None, pod_gpus: int = 1,
) -> ScaleDownMarks:
    """Marks for a scale-down removing ``remove`` replicas of ``deployment``.

    ``pods``: every pod the Deployment's selector listed; ``loads``: in-flight requests per pod name (None: the
    query failed, every load is unknown); ``now``: Unix seconds. Marks of ours on pods not chosen are cleared.
    ``per_replicaset``: the scale-down goes ahead during a rollout (:func:`guard_scale_down`), so the Deployment
    controller splits it across the ReplicaSets: the ``remove`` idlest pods of *each* ReplicaSet are marked, so
    each removes its own idlest first whatever its share. ``node_gpus``: the GPUs in use on each node, by name, as
    the Deployment's NodePool was read this tick (None: not read): the Ready pods on the emptiest nodes go first,
    chosen one at a time as their GPUs (``pod_gpus`` each) leave their node.
    """
    if remove <= 0:
        return plan_clear(deployment, pods, replicas=len(active_pods(deployment, pods)), now=now)
    if loads is None and not node_gpus:
        return _clear_all(pods, "in-flight requests per pod unknown (the query failed): no pod marked, the "
                                "ReplicaSet's default order applies", NO_POD_LOADS)
    active = active_pods(deployment, pods)
    foreign = sorted(p.name for p in active if DELETION_COST_ANNOTATION in p.annotations and not _ours(p))
    if foreign:
        return _clear_all(pods, f"{len(foreign)} pod(s) carry a {DELETION_COST_ANNOTATION} the controller did not "
                                f"set ({', '.join(foreign[:3])}{', ...' if len(foreign) > 3 else ''}): no pod "
                                "marked, that order is kept (the ReplicaSet removes pods in its own order)",
                          FOREIGN_COST)
    ranked, unknown = _ranked(active, loads, now, node_gpus)
    groups: dict[str | None, list[tuple[Rank, PodView, float | None, str]]] = {}
    for entry in ranked:
        groups.setdefault(entry[1].owner_replicaset if per_replicaset else None, []).append(entry)
    marks_list: list[PodMark] = []
    short: list[str] = []
    for _, entries in sorted(groups.items(), key=lambda g: g[0] or ""):
        chosen = _choose(entries, remove, node_gpus, pod_gpus)
        k = len(chosen)
        marks_list.extend(PodMark(p.name, i - k, load, why) for i, (_, p, load, why) in enumerate(chosen))
        if k < remove and not per_replicaset:
            short.append(f"{k} of {remove} pod(s) to remove marked")
    marks = tuple(marks_list)
    note = None
    unmarked = None
    if per_replicaset:
        note = (f"marked per ReplicaSet ({len(groups)} have pods: the Deployment controller splits the scale-down "
                f"across them): up to {remove} idlest pod(s) of each, so each removes its own idlest first")
        unmarked = ROLLOUT
    elif loads is None:
        note = ("in-flight requests per pod unknown: pods marked by node alone, the emptiest nodes first"
                + (f"; {short[0]}, the ReplicaSet picks the rest in its default order" if short else ""))
        unmarked = NO_POD_LOADS
    elif short:
        note = (short[0] + ": "
                + (f"{len(unknown)} Ready pod(s) have no in-flight series (unknown load, never marked)"
                   if unknown else "no more active pods")
                + "; the ReplicaSet picks the rest in its default order")
        unmarked = UNSCRAPED_PODS if unknown else None
    by_name = {p.name: p for p in pods}
    patches: dict[str, Patch] = {}
    for m in marks:
        pod = by_name[m.pod]
        if _ours(pod) and pod.annotations.get(DELETION_COST_ANNOTATION) == str(m.cost) and MARK_LABEL in pod.labels:
            continue  # already marked so (a scale-down retried): no write
        patches[m.pod] = {DELETION_COST_ANNOTATION: str(m.cost),
                          MARK_ANNOTATION: json.dumps({"cost": m.cost, "markedAt": int(now)}, separators=(",", ":"))}
    chosen_names = {m.pod for m in marks}
    cleared: list[str] = []
    for p in _marked(pods):
        if p.name not in chosen_names and (patch := _clear_patch(p)) is not None:
            patches[p.name] = patch
            cleared.append(p.name)
    return ScaleDownMarks(marks, tuple(sorted(cleared)), tuple(sorted(unknown)), note, patches, unmarked)


def plan_clear(
    deployment: str, pods: Sequence[PodView], replicas: int, now: float, *, scaling_up: bool = False,
    held: bool = False,
) -> ScaleDownMarks:
    """Marks of ours to clear on a tick that does not scale ``deployment`` down.

    Cleared when the last scale-down has landed (active pods <= ``replicas``), when the tick scales up, when it
    holds a scale-down for a rollout (``held``: no scale-down of ours is about to happen), or when a mark is
    older than :data:`MARK_TTL_SECONDS`; kept while the ReplicaSet still has pods to remove.
    """
    marked = _marked(pods)
    if not marked:
        return ScaleDownMarks()
    active = len(active_pods(deployment, pods))
    if scaling_up or held or active <= replicas:
        return _clear_all(pods, None)
    expired = [p for p in marked if (m := read_mark(p)) is None or now - m[1] >= MARK_TTL_SECONDS]
    patches = {p.name: patch for p in expired if (patch := _clear_patch(p)) is not None}
    kept = len(marked) - len(patches)
    note = (f"{kept} mark(s) kept: {active} active pods > {replicas} replicas, the ReplicaSet is still removing "
            "pods") if kept else None
    return ScaleDownMarks(clear=tuple(sorted(patches)), note=note, patches=patches)


# ---------------------------------------------------------------------------------------------- rollouts


@dataclass(frozen=True)
class Rollout:
    """More than one of the Deployment's ReplicaSets has active pods: a rollout is under way (or stuck).

    ``replicasets``: active pods per ReplicaSet, oldest first; ``since``: when they began to overlap, as the pods
    tell it (the first pod of the ReplicaSets after the oldest one: survives a controller restart).
    """

    replicasets: tuple[tuple[str, int], ...]
    since: float

    def describe(self) -> str:
        return (f"{len(self.replicasets)} ReplicaSets have pods ("
                + ", ".join(f"{name}: {n}" for name, n in self.replicasets) + ")")


def rollout_of(deployment: str, pods: Sequence[PodView]) -> Rollout | None:
    """The rollout the pods show (None: at most one ReplicaSet has active pods)."""
    first: dict[str, float] = {}
    count: dict[str, int] = {}
    for p in active_pods(deployment, pods):
        assert p.owner_replicaset is not None  # owned_by checked it
        first[p.owner_replicaset] = min(first.get(p.owner_replicaset, math.inf), p.created)
        count[p.owner_replicaset] = count.get(p.owner_replicaset, 0) + 1
    if len(first) < 2:
        return None
    order = sorted(first, key=lambda rs: (first[rs], rs))
    return Rollout(tuple((rs, count[rs]) for rs in order), min(first[rs] for rs in order[1:]))


@dataclass(frozen=True)
class RolloutGuard:
    """What a rollout does to a scale-down: ``held`` (replicas stay) or it goes ahead marked per ReplicaSet.

    ``step`` is recorded in the decision (status, ``explain``); ``message`` is the Event's text.
    """

    held: bool
    step: Step
    message: str
    rollout: Rollout


def _duration(seconds: float) -> str:
    seconds = max(0, int(seconds))
    if seconds >= 3600 and seconds % 3600 == 0:
        return f"{seconds // 3600}h"
    if seconds >= 60:
        return f"{seconds // 60}m" + (f"{seconds % 60}s" if seconds % 60 else "")
    return f"{seconds}s"


def guard_scale_down(
    deployment: str, pods: Sequence[PodView], current: int, desired: int, now: float, stuck: str | None,
) -> RolloutGuard | None:
    """Whether a rollout holds this scale-down (None: no scale-down, or at most one ReplicaSet has pods).

    ``stuck``: the Deployment controller's word that the rollout is stuck (``ProgressDeadlineExceeded``), None
    when it does not say so. Held while the rollout goes on, for at most :data:`ROLLOUT_HOLD_MAX_SECONDS`; then,
    or once it is stuck, the scale-down goes ahead, marked per ReplicaSet.
    """
    if desired >= current:
        return None
    rollout = rollout_of(deployment, pods)
    if rollout is None:
        return None
    age = now - rollout.since
    split = ("the Deployment controller would split a scale-down across them and each would delete its share in "
             "its own order, not the idlest pods")
    if stuck is None and age < ROLLOUT_HOLD_MAX_SECONDS:
        left = _duration(ROLLOUT_HOLD_MAX_SECONDS - age)
        detail = (f"{rollout.describe()}: a rollout is under way, and {split}; holding {current} instead of "
                  f"{desired} until one ReplicaSet is left (at most {left} more, or until the rollout is reported "
                  "stuck)")
        message = (f"scale-down {current} -> {desired} held: {rollout.describe()} (a rollout is under way); {split}. "
                   f"It goes ahead once one ReplicaSet is left, after {_duration(ROLLOUT_HOLD_MAX_SECONDS)} of "
                   "rollout at most, or once the Deployment controller reports the rollout stuck")
        return RolloutGuard(True, Step("rollout_hold", current, detail), message, rollout)
    why = (f"the Deployment controller reports it stuck ({stuck})" if stuck is not None
           else f"it has gone on for {_duration(age)}, over the {_duration(ROLLOUT_HOLD_MAX_SECONDS)} bound")
    detail = (f"{rollout.describe()} and the rollout is not finishing: {why}; scaling {current} -> {desired} anyway: "
              "the Deployment controller splits the cut across them, and each removes its own idlest pods first "
              "(marked per ReplicaSet)")
    message = (f"scale-down {current} -> {desired} during a rollout that is not finishing ({why}): "
               f"{rollout.describe()}; the Deployment controller splits the cut across them and each removes its own "
               "idlest pods first (marked per ReplicaSet), so a busier pod of one may go while an idler pod of "
               "another stays")
    return RolloutGuard(False, Step("rollout_stuck", desired, detail), message, rollout)


# ---------------------------------------------------------------------------------------------- marks seen


@dataclass(frozen=True)
class MarkCheck:
    """The read after writing the marks: the marked pods whose planned cost it does not show (``missing``), and,
    when some are, whether the scale-down waits for them (``hold``) and the step that says so."""

    missing: tuple[str, ...] = ()
    hold: bool = False
    step: Step | None = None


def check_marks(
    marks: ScaleDownMarks, pods: Sequence[PodView], current: int, desired: int, waiting_since: float | None,
    now: float,
) -> MarkCheck:
    """Whether the pods read after writing ``marks`` show every planned cost before the scale is written.

    ``waiting_since``: when a scale-down first found its marks not in place (None: this tick). Held while that
    is less than :data:`MARK_CONFIRM_SECONDS` ago; then it goes ahead without relying on them.
    """
    seen = {p.name: p for p in pods if not p.terminating}
    missing = tuple(m.pod for m in marks.marks
                    if (p := seen.get(m.pod)) is None or p.annotations.get(DELETION_COST_ANNOTATION) != str(m.cost))
    if not missing:
        return MarkCheck()
    names = ", ".join(missing[:3]) + (", ..." if len(missing) > 3 else "")
    waited = 0.0 if waiting_since is None else now - waiting_since
    what = f"{len(missing)} of {len(marks.marks)} mark(s) not in place on the read after writing them ({names})"
    if waited < MARK_CONFIRM_SECONDS:
        return MarkCheck(missing, True, Step(
            "marks_unconfirmed", current,
            f"{what}: holding {current} instead of {desired} this tick, so the ReplicaSet does not remove pods the "
            f"marks did not choose; retried next tick (for at most {_duration(MARK_CONFIRM_SECONDS)}, then scaled "
            "without them)"))
    return MarkCheck(missing, False, Step(
        "marks_unconfirmed", desired,
        f"{what}, for {_duration(waited)}: scaling {current} -> {desired} without relying on them (the ReplicaSet "
        "picks pods without marks in its own order)"))
