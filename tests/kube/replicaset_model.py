"""What kube-controller-manager does when a Deployment is scaled down: a model for the offline suite.

Why it exists: the controller only writes ``pod-deletion-cost`` marks and ``spec.replicas``; which pods go is
decided by two other controllers. A test that stops at "the marks were written" cannot tell whether the pods it
meant to remove are the ones removed (in a real cluster, during a rollout, they were not). So the
tests run this model over the fake API server's pods after each tick and assert on the pods that *go*.

Modelled from kube-controller-manager's documented behaviour (``pkg/controller``), as plain functions over the
API JSON of pods:

* **The ReplicaSet controller's ranking** (``ActivePodsWithRanks.Less`` in ``controller_utils.go``, used by
  ``getPodsToDelete`` in ``replica_set.go``) deletes the first ``diff`` pods of this order:

  1. unassigned (no ``spec.nodeName``) before assigned;
  2. phase ``Pending`` < ``Unknown`` < ``Running``;
  3. not Ready before Ready;
  4. lower ``controller.kubernetes.io/pod-deletion-cost`` first (an int32 annotation; absent or invalid: 0);
  5. more colocated: the pod whose node runs more active pods of the same Deployment (its ReplicaSets' pods,
     ``getPodsRankedByRelatedPodsOnSameNode``) first;
  6. both Ready: the more recently Ready first, compared by the whole power of two of the nanoseconds since
     Ready (``LogarithmicScaleDown``, on by default since 1.22, GA in 1.31); same power: by UID (random);
  7. more container restarts first;
  8. newer creation first.

* **The Deployment controller's proportional scaling** (``scale`` in ``deployment/sync.go`` with
  ``GetReplicaSetProportion`` / ``getReplicaSetFraction`` in ``deployment/util``): with one active ReplicaSet
  (``spec.replicas`` > 0) it gets the whole count. With more (a rollout), the Deployment's allowed size is
  ``replicas + maxSurge``; the difference to the ReplicaSets' total is split across the active ReplicaSets,
  sorted by size, largest first (ties: the older first when scaling down, the newer when scaling up): each gets
  ``round(rs.replicas * allowed / max-replicas-annotation) - rs.replicas`` (rounded half away from zero; the
  annotation is the allowed size when it was last scaled, else ``status.replicas``), bounded by what is still to
  be added or removed, and the leftover goes to the first (largest). Each ReplicaSet then deletes its share in
  its own order (above). The "new ReplicaSet saturated" shortcut (old ReplicaSets to 0) is not modelled: the
  tests scale only mid-rollout, before the new one is saturated.

ReplicaSets are not served by the fake API server, so the model keeps their ``spec.replicas`` and max-replicas
annotation itself (:class:`DeploymentModel`), seeded from the pods; pods it deletes are given a
``deletionTimestamp`` in the fake (as the API server does while a pod terminates), which the controller treats as
gone.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeVar

from tests.kube.fakeapi import FakeKubeAPI

DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"
PHASE_ORDINAL = {"Pending": 0, "Unknown": 1, "Running": 2}

Pod = Mapping[str, Any]
P = TypeVar("P", bound=Pod)


def _time(text: str | None) -> datetime | None:
    return None if not text else datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)


def is_active(pod: Pod) -> bool:
    """``controller.IsPodActive``: not finished and not being deleted."""
    return (pod.get("status", {}).get("phase") not in ("Succeeded", "Failed")
            and not pod["metadata"].get("deletionTimestamp"))


def is_ready(pod: Pod) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in pod.get("status", {}).get("conditions") or [])


def ready_time(pod: Pod) -> datetime | None:
    for c in pod.get("status", {}).get("conditions") or []:
        if c.get("type") == "Ready" and c.get("status") == "True":
            return _time(c.get("lastTransitionTime"))
    return None


def deletion_cost(pod: Pod) -> int:
    """The annotation as an int32; absent or invalid counts as 0 (the ranking ignores the parse error)."""
    raw = (pod["metadata"].get("annotations") or {}).get(DELETION_COST)
    try:
        value = int(raw) if raw is not None else 0
    except ValueError:
        return 0
    return value if -(2**31) <= value < 2**31 else 0


def node_of(pod: Pod) -> str:
    return str(pod.get("spec", {}).get("nodeName") or "")


def restarts(pod: Pod) -> int:
    return max((cs.get("restartCount") or 0 for cs in pod.get("status", {}).get("containerStatuses") or []),
               default=0)


def _after_or_zero(t1: datetime | None, t2: datetime | None) -> bool:
    """``afterOrZero``: an unset time counts as the latest."""
    if t1 is None or t2 is None:
        return t1 is None
    return t1 > t2


def _log_rank(t: datetime, now: datetime) -> int:
    nanoseconds = (now - t).total_seconds() * 1e9
    return int(math.log2(nanoseconds)) if nanoseconds > 0 else -1


def ranked_for_deletion(pods: Sequence[P], related: Sequence[Pod], now: datetime) -> list[P]:
    """``pods`` (one ReplicaSet's active pods) in the order its controller deletes them, first to go first."""
    on_node: dict[str, int] = {}
    for p in related:
        if is_active(p):
            on_node[node_of(p)] = on_node.get(node_of(p), 0) + 1
    rank = {id(p): on_node.get(node_of(p), 0) for p in pods}

    def less(a: P, b: P) -> bool:
        if node_of(a) != node_of(b) and (not node_of(a) or not node_of(b)):
            return not node_of(a)
        pa, pb = (PHASE_ORDINAL.get(p.get("status", {}).get("phase", ""), 0) for p in (a, b))
        if pa != pb:
            return pa < pb
        if is_ready(a) != is_ready(b):
            return not is_ready(a)
        if deletion_cost(a) != deletion_cost(b):
            return deletion_cost(a) < deletion_cost(b)
        if rank[id(a)] != rank[id(b)]:
            return rank[id(a)] > rank[id(b)]
        if is_ready(a) and is_ready(b):
            ta, tb = ready_time(a), ready_time(b)
            if ta != tb:
                if ta is None or tb is None:
                    return _after_or_zero(ta, tb)
                diff = _log_rank(ta, now) - _log_rank(tb, now)
                if diff == 0:
                    return str(a["metadata"].get("uid", "")) < str(b["metadata"].get("uid", ""))
                return diff < 0
        if restarts(a) != restarts(b):
            return restarts(a) > restarts(b)
        ca, cb = _time(a["metadata"].get("creationTimestamp")), _time(b["metadata"].get("creationTimestamp"))
        if ca != cb:
            return _after_or_zero(ca, cb)
        return False

    def compare(a: P, b: P) -> int:
        return -1 if less(a, b) else 1 if less(b, a) else 0

    return sorted(pods, key=functools.cmp_to_key(compare))


def pods_to_delete(pods: Sequence[P], diff: int, related: Sequence[Pod], now: datetime) -> list[P]:
    """``getPodsToDelete``: the ``diff`` pods a ReplicaSet with these active ``pods`` deletes."""
    if diff >= len(pods):
        return list(pods)
    return ranked_for_deletion(pods, related, now)[:diff]


@dataclass
class ReplicaSetState:
    """What the model keeps of one ReplicaSet: ``spec.replicas``, its ``deployment.kubernetes.io/max-replicas``
    annotation (None: absent) and when it was created (the tie-break of the size sort)."""

    name: str
    replicas: int
    max_replicas: int | None
    created: float


def _round(x: float) -> int:
    """``math.Round`` of Go: half away from zero."""
    return math.floor(abs(x) + 0.5) * (1 if x >= 0 else -1)


def proportional_sizes(
    replicasets: Sequence[ReplicaSetState], replicas: int, max_surge: int, status_replicas: int,
) -> dict[str, int]:
    """The ReplicaSet sizes the Deployment controller sets when the Deployment is scaled to ``replicas``."""
    active = [rs for rs in replicasets if rs.replicas > 0]
    sizes = {rs.name: rs.replicas for rs in replicasets}
    if len(active) <= 1:
        target = active[0] if active else max(replicasets, key=lambda rs: (rs.created, rs.name))
        sizes[target.name] = replicas
        return sizes
    allowed = replicas + max_surge if replicas > 0 else 0
    to_add = allowed - sum(rs.replicas for rs in active)
    if to_add > 0:
        active.sort(key=lambda rs: (-rs.replicas, -rs.created, rs.name))
    elif to_add < 0:
        active.sort(key=lambda rs: (-rs.replicas, rs.created, rs.name))

    def fraction(rs: ReplicaSetState) -> int:
        if replicas == 0:
            return -rs.replicas
        before = rs.max_replicas or status_replicas
        if before == 0:
            return 0
        return _round(rs.replicas * allowed / before) - rs.replicas

    added = 0
    for rs in active:
        if to_add == 0 or to_add == added:
            continue
        left = to_add - added
        proportion = min(fraction(rs), left) if to_add > 0 else max(fraction(rs), left)
        sizes[rs.name] = rs.replicas + proportion
        added += proportion
    if to_add != 0:
        first = active[0].name
        sizes[first] = max(0, sizes[first] + to_add - added)
    return sizes


def owner(pod: Pod) -> str | None:
    return next((o["name"] for o in pod["metadata"].get("ownerReferences") or []
                 if o.get("controller") and o.get("kind") == "ReplicaSet"), None)


@dataclass
class DeploymentModel:
    """The Deployment and ReplicaSet controllers for one Deployment of the fake API server.

    :meth:`settle` is what the two controllers do after a tick: when ``spec.replicas`` changed, resize the
    ReplicaSets (one active: the whole count; more: proportionally) and let each delete its surplus pods in its
    own order; it returns the names of the pods deleted, and keeps the Deployment's ``status`` counts in step.
    """

    fake: FakeKubeAPI
    namespace: str
    name: str
    max_surge: int
    replicasets: dict[str, ReplicaSetState] = field(default_factory=dict)
    replicas: int = 0
    deleted: list[str] = field(default_factory=list)

    @classmethod
    def from_pods(cls, fake: FakeKubeAPI, namespace: str, name: str, *, max_surge: int) -> DeploymentModel:
        """Seeded from the pods as they are: each ReplicaSet's ``spec.replicas`` is its active pods, and its
        max-replicas annotation the Deployment's current allowed size (``replicas + maxSurge``)."""
        dep = fake.get("deployments", namespace, name)
        assert dep is not None
        model = cls(fake, namespace, name, max_surge, replicas=int(dep["spec"]["replicas"]))
        for pod in model.pods():
            rs = owner(pod)
            assert rs is not None, f"pod {pod['metadata']['name']} has no controlling ReplicaSet"
            created = _time(pod["metadata"].get("creationTimestamp"))
            stamp = created.timestamp() if created is not None else 0.0
            state = model.replicasets.setdefault(rs, ReplicaSetState(rs, 0, model.replicas + max_surge, stamp))
            state.replicas += 1
            state.created = min(state.created, stamp)
        return model

    def pods(self, replicaset: str | None = None) -> list[dict[str, Any]]:
        """The Deployment's active pods (of one ReplicaSet), as the fake holds them now."""
        return [p for p in self.fake.all("pods", self.namespace)
                if is_active(p) and (rs := owner(p)) is not None and rs.startswith(f"{self.name}-")
                and (replicaset is None or rs == replicaset)]

    def settle(self, now: datetime) -> list[str]:
        """React to the Deployment's ``spec.replicas`` as the two controllers would; the pods deleted now."""
        dep = self.fake.get("deployments", self.namespace, self.name)
        assert dep is not None
        wanted = int(dep["spec"]["replicas"])
        gone: list[str] = []
        if wanted != self.replicas:
            sizes = proportional_sizes(list(self.replicasets.values()), wanted, self.max_surge,
                                       int(dep.get("status", {}).get("replicas") or len(self.pods())))
            related = self.pods()
            for name, size in sizes.items():
                state = self.replicasets[name]
                state.replicas, state.max_replicas = size, wanted + self.max_surge
                mine = self.pods(name)
                for pod in pods_to_delete(mine, max(0, len(mine) - size), related, now):
                    self._delete(pod, now)
                    gone.append(pod["metadata"]["name"])
            self.replicas = wanted
        self._status()
        self.deleted.extend(gone)
        return gone

    def _delete(self, pod: dict[str, Any], now: datetime) -> None:
        pod["metadata"]["deletionTimestamp"] = now.strftime("%Y-%m-%dT%H:%M:%SZ")
        self.fake.add("pods", pod)

    def _status(self) -> None:
        dep = self.fake.get("deployments", self.namespace, self.name)
        assert dep is not None
        active = self.pods()
        dep.setdefault("status", {}).update(replicas=len(active), readyReplicas=sum(is_ready(p) for p in active))
        self.fake.add("deployments", dep)
