"""The baseline every predictive autoscaler must beat: a faithful Kubernetes HPA (autoscaling/v2).

Why it exists: "better than reactive" only means something against the HPA operators actually run,
with its real defaults, not a strawman. This re-implements the parts of kube-controller-manager's
``horizontal.go`` / ``replica_calculator.go`` that decide the replica count:

* sync every 15 s (``--horizontal-pod-autoscaler-sync-period``);
* the metric is per-pod utilisation ``demand / (Ready replicas * capacity_per_replica)`` against a
  target (``--reactive-targets``); only Ready pods report it;
* tolerance 10 %: no change while ``|usage_ratio - 1| <= 0.1``;
* without starting pods: ``ceil(usage_ratio * ready)``. With starting (not Ready) pods and a
  scale-up, they count as 0 % utilisation and the ratio is recomputed over all pods; if that flips
  the direction or falls inside the tolerance, the count is held (so the HPA does not pile up
  replicas while earlier ones are still loading the model);
* no Ready pod (no metric) or a missing sample: the HPA reports an error and does not scale; we do
  the same (hold the current count, record no recommendation). This only happens before the first
  replica is Ready, because scale-down removes starting replicas first;
* behaviour defaults: scale-up stabilisation 0 s, policies max(+100 %, +4 pods) per 15 s;
  scale-down stabilisation 300 s (the max recommendation over the window), policy 100 % per 15 s;
  clamp to [min, max] replicas.

Where it is generous to the HPA: it reads the current bin's demand with no scrape or ``rate()``
window lag. A real HPA sees demand tens of seconds late, so real reactive results are worse.

``QueueHPA`` is the HPA as the reference deployments of vLLM configure it: a ``Pods`` metric,
``vllm:num_requests_waiting``, with ``target.averageValue`` (10 in the reference). It runs the same
algorithm (``calcPlainMetricReplicas``): the usage ratio is the waiting requests averaged over the
Ready pods (the simulated queue, ``autoscaler.simulation.queue``, as it stands at the sync; Ready
pods share it evenly behind the Service) over the target, so ``desired = ceil(ready * avg / target)``
= ``ceil(waiting / target)`` outside the 10% tolerance, with the same treatment of starting pods
(pending: left out, and counted as 0 on a scale-up), the same stabilisation windows and rate
limits. With no queue the metric is 0 and the recommendation is 0 (then min replicas once the
300 s scale-down window has passed): the reference HPA scales on backlog, never ahead of it.
"""

from __future__ import annotations

import math
from collections import deque

from autoscaler.simulation.cluster import Cluster

_CEIL_TOLERANCE = 1e-9


class _HPA:
    """The replica calculation, stabilisation and rate limits of kube-controller-manager's HPA, for one metric.

    Subclasses give the usage ratio (metric over target, averaged over Ready pods) and a name.
    """

    name: str

    def __init__(
        self,
        tick_seconds: int,
        min_replicas: int = 1,
        max_replicas: int = 100,
        tolerance: float = 0.1,
        sync_seconds: int = 15,
        scale_down_stabilization_seconds: int = 300,
    ) -> None:
        self.min_replicas = min_replicas
        self.max_replicas = max_replicas
        self.tolerance = tolerance
        self._sync_ticks = max(1, round(sync_seconds / tick_seconds))
        self._window_ticks = math.ceil(scale_down_stabilization_seconds / tick_seconds)
        self._recs: deque[tuple[int, int]] = deque()

    def _ratio(self, ready: int, demand: float) -> float:  # pragma: no cover - abstract
        raise NotImplementedError

    def _recommend(self, current: int, ready: int, ratio: float) -> int:
        """``ratio`` is the usage ratio over the Ready pods (metric / target)."""
        starting = current - ready
        if starting > 0 and ratio > 1.0:
            # scale-up with unready pods: they count as 0 and the ratio is taken over all pods
            new_ratio = ratio * ready / current
            if abs(1.0 - new_ratio) <= self.tolerance or new_ratio < 1.0:
                return current
            return max(current, math.ceil(new_ratio * current - _CEIL_TOLERANCE))
        if abs(1.0 - ratio) <= self.tolerance:
            return current
        return math.ceil(ratio * ready - _CEIL_TOLERANCE)

    def decides(self, k: int) -> bool:
        """Whether tick ``k`` is a sync (every 15 s); other ticks hold the count."""
        return k % self._sync_ticks == 0

    def decide(self, k: int, cluster: Cluster, demand: float) -> int:
        current = cluster.requested
        if k % self._sync_ticks:
            return current
        ready = cluster.ready
        if ready == 0 or not math.isfinite(demand):
            return current
        rec = self._recommend(current, ready, self._ratio(ready, demand))
        recs = self._recs
        recs.append((k, rec))
        cutoff = k - self._window_ticks
        while recs and recs[0][0] <= cutoff:
            recs.popleft()
        # stabilisation: up at once (window 0), down only to the max recommendation of the window
        stabilized = max(current, rec)
        down = max(r for _, r in recs)
        stabilized = min(stabilized, down)
        # rate limits: up max(+100 %, +4) per 15 s; down 100 % per 15 s
        if stabilized > current:
            stabilized = min(stabilized, max(2 * current, current + 4))
        return min(max(stabilized, self.min_replicas), self.max_replicas)


class ReactiveHPA(_HPA):
    """One HorizontalPodAutoscaler with a utilisation target in (0, 1]."""

    def __init__(
        self,
        target: float,
        capacity_per_replica: float,
        tick_seconds: int,
        min_replicas: int = 1,
        max_replicas: int = 100,
        tolerance: float = 0.1,
        sync_seconds: int = 15,
        scale_down_stabilization_seconds: int = 300,
    ) -> None:
        if not (math.isfinite(target) and 0 < target <= 1):
            raise ValueError(f"reactive target utilisation must be in (0, 1], got {target!r}")
        super().__init__(tick_seconds, min_replicas, max_replicas, tolerance, sync_seconds,
                         scale_down_stabilization_seconds)
        self.name = f"reactive@{target:g}"
        self.target = float(target)
        self.capacity = float(capacity_per_replica)

    def _ratio(self, ready: int, demand: float) -> float:
        return demand / (ready * self.capacity) / self.target  # utilisation over Ready pods / target


class QueueHPA(_HPA):
    """The HPA on the ``Pods`` metric ``vllm:num_requests_waiting`` with ``averageValue: target``.

    The engine shows it the queue before each decision (``observe_queue``).
    """

    def __init__(
        self,
        target: float,
        tick_seconds: int,
        min_replicas: int = 1,
        max_replicas: int = 100,
        tolerance: float = 0.1,
        sync_seconds: int = 15,
        scale_down_stabilization_seconds: int = 300,
    ) -> None:
        if not (math.isfinite(target) and target > 0):
            raise ValueError(f"waiting-requests target must be a number > 0, got {target!r}")
        super().__init__(tick_seconds, min_replicas, max_replicas, tolerance, sync_seconds,
                         scale_down_stabilization_seconds)
        self.name = f"hpa-queue@{target:g}"
        self.target = float(target)
        self.waiting = 0.0

    def observe_queue(self, waiting: float) -> None:
        """Requests waiting in the Deployment's queue now (vLLM's gauge, summed over its pods)."""
        self.waiting = max(0.0, float(waiting))

    def _ratio(self, ready: int, demand: float) -> float:
        return self.waiting / ready / self.target  # average over the Ready pods / averageValue
