"""The baselines every predictive autoscaler must beat: the Kubernetes HPA (autoscaling/v2) as users configure it.

Why it exists: "better than reactive" only means something against the autoscalers operators actually run,
with their real defaults, not a strawman. This re-implements the parts of kube-controller-manager's
``horizontal.go`` / ``replica_calculator.go`` that decide the replica count, for the HPA with no ``behavior``
field, which is how the GKE vLLM tutorial, vLLM production-stack and KEDA (unless
``advanced.horizontalPodAutoscalerConfig.behavior`` is set) create it:

* sync every 15 s (``--horizontal-pod-autoscaler-sync-period``);
* tolerance 10 %: no change while ``|usage_ratio - 1| <= 0.1``;
* no Ready pod (no metric) or a missing sample: the HPA reports an error and does not scale; we do the same
  (hold the current count, record no recommendation). This only happens before the first replica is Ready,
  because scale-down removes starting replicas first;
* normalisation without ``behavior`` (``normalizeDesiredReplicas``; the API server fills the behaviour
  defaults only into an HPA that has a ``behavior`` field): the recommendation is the **largest** of the
  recommendations of the last 300 s (``--horizontal-pod-autoscaler-downscale-stabilization``), this sync's
  included, and the first sync records the replica count it found; then it is clamped to
  ``[min, min(max, max(2 * current, 4))]`` (``calculateScaleUpLimit``: ``scaleUpLimitFactor`` 2,
  ``scaleUpLimitMinimum`` 4). So a scale-up goes on towards a recent larger recommendation even while the
  metric holds, and a scale-down has no rate limit once the window has passed. (With a ``behavior`` field the
  defaults differ: scale-up max(+100 %, +4 pods) per 15 s towards the current recommendation only.)

The metrics, one class each:

* ``ReactiveHPA`` (``reactive@T``): per-pod utilisation ``demand / (Ready replicas * capacity_per_replica)``
  against a target; only Ready pods report it. Without starting pods ``desired = ceil(usage_ratio * ready)``;
  with starting (not Ready) pods and a scale-up, they count as 0 % and the ratio is recomputed over all pods;
  if that flips the direction or falls inside the tolerance, the count is held (the HPA does not pile up
  replicas while earlier ones still load the model).
* ``QueueHPA`` (``hpa-queue@N``): the HPA as the GKE vLLM tutorial configures it, a ``Pods`` metric
  ``vllm:num_requests_waiting`` with ``target.averageValue`` N (10 there). The same algorithm
  (``calcPlainMetricReplicas``): the waiting requests averaged over the Ready pods (the simulated queue,
  ``autoscaler.simulation.queue``, as it stands at the sync; Ready pods share it evenly behind the Service)
  over the target, so ``desired = ceil(waiting / N)`` outside the tolerance, with the same treatment of
  starting pods.
* ``ObjectValueHPA`` (``prodstack-queue@V``): vLLM production-stack's HPA, an ``Object`` metric on the
  Namespace, ``sum(vllm:num_requests_waiting)`` (its prometheus-adapter rule), with ``target.type: Value``,
  ``value: V`` (1 there). ``GetObjectMetricReplicas`` / ``getUsageRatioReplicaCount``: usage ratio =
  metric / V; inside the tolerance the count holds, else ``desired = ceil(ratio * ready)`` with ``ready`` the
  Running and Ready pods; starting pods get no special treatment. So with about one request waiting (0.9 to 1.1)
  nothing changes, with 3 waiting the Deployment asks for three times its Ready pods (the scale-up limit then caps it),
  and with none it asks for 0, i.e. min replicas once the 300 s window has passed.
* ``ExternalAverageHPA`` (``keda-queue@T``): KEDA's ``prometheus`` scaler with ``threshold: T`` (5 in
  production-stack's ScaledObject) on the same sum (its tutorial queries the bare gauge, which the scaler refuses
  once it returns one series per pod: "returned multiple elements"; the sum is what works). KEDA's default
  ``metricType`` is ``AverageValue`` and it hands the HPA an ``External`` metric;
  ``GetExternalPerPodMetricReplicas``: usage ratio = metric / (T * the pods that exist, starting ones included);
  inside the tolerance the count holds, else ``desired = ceil(metric / T)``. KEDA's ``activationThreshold`` (default
  0) and ``cooldownPeriod`` (default 300 s) only decide 0 <-> 1 replicas; with ``minReplicaCount: 1`` (as
  production-stack deploys it) the HPA does all the scaling, and KEDA's metrics server runs the query when the HPA
  asks (every sync).

With no queue the three queue metrics are 0, and their recommendation is the minimum: they scale on backlog,
never ahead of it.

What the utilisation HPA reads: the arrival rate over the last minute before the sync
(``engine.deciding.CURRENT_DEMAND_WINDOW_SECONDS``), which is what a prometheus-adapter rule over ``rate(...[1m])``
serves and exactly what our controller's reactive floor reads, so both policies see the same evidence and differ
only in what they do with it. Before, it read the demand of the tick in progress, which no metric pipeline serves
(a scrape, a rate window and the adapter come between the traffic and the HPA): it saw a rise up to a minute before
our controller could, and on 10-minute traces (bins spread linearly) it read the very second. Without a minute of
samples (the first minute) it has no metric and holds, as the HPA does on a metric error. The queue HPAs read the
queue at the sync (a gauge: no rate window, only the scrape, which is left out).
"""

from __future__ import annotations

import math
from collections import deque

from autoscaler.engine.deciding import CURRENT_DEMAND_WINDOW_SECONDS
from autoscaler.simulation.cluster import Cluster

_CEIL_TOLERANCE = 1e-9
SCALE_UP_LIMIT_FACTOR = 2.0  # horizontal.go scaleUpLimitFactor
SCALE_UP_LIMIT_MINIMUM = 4  # horizontal.go scaleUpLimitMinimum
# --horizontal-pod-autoscaler-downscale-stabilization: the window whose largest recommendation a scale-down goes to
SCALE_DOWN_STABILIZATION_SECONDS = 300


def _ceil(x: float) -> int:
    return math.ceil(x - _CEIL_TOLERANCE)


def scale_up_limit(current: int) -> int:
    """``calculateScaleUpLimit``: the most replicas one sync may ask for without ``behavior``."""
    return int(max(SCALE_UP_LIMIT_FACTOR * current, SCALE_UP_LIMIT_MINIMUM))


class _HPA:
    """The sync, stabilisation and limits of kube-controller-manager's HPA without ``behavior``, for one metric.

    Subclasses give the recommendation of one sync (``_recommendation``) and a name.
    """

    name: str

    def __init__(
        self,
        tick_seconds: int,
        min_replicas: int = 1,
        max_replicas: int = 100,
        tolerance: float = 0.1,
        sync_seconds: int = 15,
        scale_down_stabilization_seconds: int = SCALE_DOWN_STABILIZATION_SECONDS,
    ) -> None:
        self.min_replicas = min_replicas
        self.max_replicas = max_replicas
        self.tolerance = tolerance
        self._sync_ticks = max(1, round(sync_seconds / tick_seconds))
        self._window_ticks = math.ceil(scale_down_stabilization_seconds / tick_seconds)
        self._recs: deque[tuple[int, int]] = deque()

    def _recommendation(self, current: int, ready: int, demand: float) -> int:  # pragma: no cover - abstract
        raise NotImplementedError

    def _within(self, ratio: float) -> bool:
        return abs(1.0 - ratio) <= self.tolerance

    def _plain(self, current: int, ready: int, ratio: float) -> int:
        """``calcPlainMetricReplicas``: ``ratio`` is the usage ratio over the Ready pods (metric / target); on a
        scale-up the starting pods count as 0 and the ratio is taken over all pods."""
        starting = current - ready
        if starting > 0 and ratio > 1.0:
            new_ratio = ratio * ready / current
            if self._within(new_ratio) or new_ratio < 1.0:
                return current
            return max(current, _ceil(new_ratio * current))
        if self._within(ratio):
            return current
        return _ceil(ratio * ready)

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
        recs = self._recs
        if not recs:
            recs.append((k, current))  # recordInitialRecommendation: the count found at the first sync
        cutoff = k - self._window_ticks
        while recs and recs[0][0] <= cutoff:
            recs.popleft()
        rec = self._recommendation(current, ready, demand)
        recs.append((k, rec))
        # stabilizeRecommendation: the largest recommendation of the window, this one included (up or down)
        stabilized = max(r for _, r in recs)
        # convertDesiredReplicasWithRules: [min, min(max, max(2 * current, 4))]
        upper = min(self.max_replicas, scale_up_limit(current))
        return max(self.min_replicas, min(stabilized, upper))


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
        scale_down_stabilization_seconds: int = SCALE_DOWN_STABILIZATION_SECONDS,
        read_seconds: int = CURRENT_DEMAND_WINDOW_SECONDS,
    ) -> None:
        if not (math.isfinite(target) and 0 < target <= 1):
            raise ValueError(f"reactive target utilisation must be in (0, 1], got {target!r}")
        super().__init__(tick_seconds, min_replicas, max_replicas, tolerance, sync_seconds,
                         scale_down_stabilization_seconds)
        self.name = f"reactive@{target:g}"
        self.target = float(target)
        self.capacity = float(capacity_per_replica)
        # the per-tick demand of the ``read_seconds`` before the current tick: the rate the metric pipeline serves
        # (0: the tick's own demand, a metric without lag, which no pipeline serves: the worked examples use it)
        self._recent: deque[float] | None = (
            deque(maxlen=max(1, math.ceil(read_seconds / tick_seconds))) if read_seconds > 0 else None)

    def metric(self) -> float:
        """The demand the metric pipeline serves now: the mean of the window's ticks (NaN before any)."""
        seen = [d for d in self._recent or () if math.isfinite(d)]
        return sum(seen) / len(seen) if seen else math.nan

    def decide(self, k: int, cluster: Cluster, demand: float) -> int:
        """The count at tick ``k``; the tick's own ``demand`` is read from the next tick on (``metric``)."""
        if self._recent is None:
            return super().decide(k, cluster, demand)
        seen = self.metric()
        self._recent.append(demand)
        return super().decide(k, cluster, seen)

    def _recommendation(self, current: int, ready: int, demand: float) -> int:
        return self._plain(current, ready, demand / (ready * self.capacity) / self.target)


class _QueueMetric(_HPA):
    """An HPA on vLLM's ``vllm:num_requests_waiting``; the engine shows it the queue before each decision
    (``observe_queue``). ``prefix`` names its runs (``prefix@target``)."""

    prefix: str

    def __init__(
        self,
        target: float,
        tick_seconds: int,
        min_replicas: int = 1,
        max_replicas: int = 100,
        tolerance: float = 0.1,
        sync_seconds: int = 15,
        scale_down_stabilization_seconds: int = SCALE_DOWN_STABILIZATION_SECONDS,
    ) -> None:
        if not (math.isfinite(target) and target > 0):
            raise ValueError(f"waiting-requests target must be a number > 0, got {target!r}")
        super().__init__(tick_seconds, min_replicas, max_replicas, tolerance, sync_seconds,
                         scale_down_stabilization_seconds)
        self.name = f"{self.prefix}@{target:g}"
        self.target = float(target)
        self.waiting = 0.0

    def observe_queue(self, waiting: float) -> None:
        """Requests waiting in the Deployment's queue now (vLLM's gauge, summed over its pods)."""
        self.waiting = max(0.0, float(waiting))


class QueueHPA(_QueueMetric):
    """The HPA on the ``Pods`` metric ``vllm:num_requests_waiting`` with ``averageValue: target``."""

    prefix = "hpa-queue"

    def _recommendation(self, current: int, ready: int, demand: float) -> int:
        return self._plain(current, ready, self.waiting / ready / self.target)  # average over Ready / averageValue


class ObjectValueHPA(_QueueMetric):
    """vLLM production-stack's HPA: the ``Object`` metric ``sum(vllm:num_requests_waiting)`` with ``value: target``."""

    prefix = "prodstack-queue"

    def _recommendation(self, current: int, ready: int, demand: float) -> int:
        ratio = self.waiting / self.target  # getUsageRatioReplicaCount
        return current if self._within(ratio) else _ceil(ratio * ready)


class ExternalAverageHPA(_QueueMetric):
    """KEDA's prometheus scaler with ``threshold: target`` on ``sum(vllm:num_requests_waiting)``: an ``External``
    metric with ``averageValue: target``."""

    prefix = "keda-queue"

    def _recommendation(self, current: int, ready: int, demand: float) -> int:
        # GetExternalPerPodMetricReplicas: the ratio over every pod that exists (status.replicas)
        if self._within(self.waiting / (self.target * current)):
            return current
        return _ceil(self.waiting / self.target)
