"""The HPAs users run, held to kube-controller-manager's rules for an HPA without ``behavior``
(``normalizeDesiredReplicas``, ``calculateScaleUpLimit``) and to the metric each one reads: vLLM production-stack's
Object metric with a Value target (``getUsageRatioReplicaCount``) and KEDA's External metric with an AverageValue
target (``GetExternalPerPodMetricReplicas``). Every expected count is worked out by hand from those formulas."""

from __future__ import annotations

import numpy as np
import pytest

from autoscaler.simulation.cluster import Cluster, ClusterConfig
from autoscaler.simulation.engine import SimulationConfig, simulate
from autoscaler.simulation.reactive import ExternalAverageHPA, ObjectValueHPA, QueueHPA, ReactiveHPA, scale_up_limit
from models.types import TrafficSeries

TICK = 15
CFG = ClusterConfig(pod_startup_seconds=120, node_startup_seconds=180, gpus_per_node=64)


def _cluster(ready: int, starting: int = 0) -> Cluster:
    cluster = Cluster(CFG, initial_ready=ready)
    cluster.advance(0)
    if starting:
        cluster.scale_to(0, ready + starting)
    return cluster


def test_scale_up_limit_is_twice_the_count_or_four_without_behavior() -> None:
    assert [scale_up_limit(n) for n in (0, 1, 2, 3, 4, 10)] == [4, 4, 4, 6, 8, 20]


def test_the_utilisation_hpa_reads_the_rate_of_the_minute_before_the_sync() -> None:
    # What the engine's reactive floor reads too (engine.deciding.CURRENT_DEMAND_WINDOW_SECONDS): the tick in
    # progress is seen from the next tick on, averaged over the minute (4 ticks of 15 s) before the sync.
    hpa = ReactiveHPA(1.0, capacity_per_replica=1.0, tick_seconds=TICK)
    cluster = _cluster(1)
    assert hpa.decide(0, cluster, 9.0) == 1  # the tick's own 9 req/s is not read yet: no metric, it holds
    cluster.advance(1)
    assert hpa.decide(1, cluster, 1.0) == 4  # now it is: 9 req/s on one replica, limited to max(2 * 1, 4)
    for k in (2, 3):
        cluster.advance(k)
        hpa.decide(k, cluster, 1.0)
    assert hpa.metric() == pytest.approx((9.0 + 1.0 + 1.0 + 1.0) / 4)  # the mean of the minute's four ticks
    cluster.advance(4)
    hpa.decide(4, cluster, 1.0)
    assert hpa.metric() == pytest.approx(1.0)  # the 9 has left the minute


def test_a_scale_up_goes_on_towards_the_largest_recommendation_of_the_window() -> None:
    hpa = ReactiveHPA(1.0, capacity_per_replica=1.0, tick_seconds=TICK, read_seconds=0)
    cluster = _cluster(1)
    # sync 0: 1 Ready at 10 req/s -> recommends 10, limited to max(2, 4) = 4
    cluster.scale_to(0, hpa.decide(0, cluster, 10.0))
    assert cluster.requested == 4
    # sync 1: demand 1.5 over 1 Ready (ratio 1.5) but 0.375 over all 4 pods: the metric says hold (4); the window
    # still holds the 10, so the HPA asks for min(10, max(2 * 4, 4)) = 8
    cluster.advance(1)
    cluster.scale_to(1, hpa.decide(1, cluster, 1.5))
    assert cluster.requested == 8
    # sync 2: the same 10 in the window, limited to min(10, 16)
    cluster.advance(2)
    assert hpa.decide(2, cluster, 1.5) == 10


def test_the_first_sync_records_the_count_it_found() -> None:
    hpa = ReactiveHPA(1.0, capacity_per_replica=1.0, tick_seconds=TICK, read_seconds=0)
    cluster = _cluster(6)
    counts = []
    for k in range(22):
        cluster.advance(k)
        cluster.scale_to(k, hpa.decide(k, cluster, 2.0))  # 2 req/s needs 2 replicas from the first sync on
        counts.append(cluster.requested)
    # the 6 found at sync 0 stays in the 300 s window (20 syncs); then the count drops to 2 at once (no rate limit)
    assert counts[:20] == [6] * 20
    assert counts[20:] == [2, 2]


def _once(hpa: QueueHPA | ObjectValueHPA | ExternalAverageHPA, waiting: float, ready: int, starting: int = 0) -> int:
    hpa.observe_queue(waiting)
    return hpa.decide(0, _cluster(ready, starting), 1.0)


def test_production_stack_object_value_hpa_multiplies_the_ready_pods_by_the_queue() -> None:
    # 4 Ready, 3 waiting against value 1: ratio 3 -> ceil(3 * 4) = 12, limited to max(2 * 4, 4) = 8
    assert _once(ObjectValueHPA(1.0, TICK), 3.0, 4) == 8
    # 1.05 waiting: ratio 1.05, inside the 10% tolerance: hold
    assert _once(ObjectValueHPA(1.0, TICK), 1.05, 4) == 4
    # 10 Ready, 1.5 waiting: ceil(1.5 * 10) = 15 (under the limit of 20)
    assert _once(ObjectValueHPA(1.0, TICK), 1.5, 10) == 15
    # starting pods get no special treatment: 2 Ready + 2 starting, 3 waiting -> ceil(3 * 2) = 6
    assert _once(ObjectValueHPA(1.0, TICK), 3.0, 2, starting=2) == 6
    # a value of 2: 5 Ready, 3 waiting -> ratio 1.5 -> ceil(7.5) = 8
    assert _once(ObjectValueHPA(2.0, TICK), 3.0, 5) == 8
    assert ObjectValueHPA(1.0, TICK).name == "prodstack-queue@1"


def test_production_stack_hpa_falls_to_min_replicas_once_the_queue_is_gone_for_the_window() -> None:
    hpa = ObjectValueHPA(1.0, TICK)
    cluster = _cluster(5)
    counts = []
    for k in range(23):
        cluster.advance(k)
        hpa.observe_queue(0.5 if k == 0 else 0.0)  # ratio 0.5 -> ceil(0.5 * 5) = 3; then 0 -> 0
        cluster.scale_to(k, hpa.decide(k, cluster, 1.0))
        counts.append(cluster.requested)
    # the 5 found at sync 0 holds for the window; then the largest left is 3 (sync 0's) until it leaves too,
    # then 0 -> min replicas 1
    assert counts[:20] == [5] * 20
    assert counts[20:] == [1, 1, 1]


def test_keda_average_value_hpa_divides_the_queue_by_the_threshold() -> None:
    # 3 pods, 100 waiting against threshold 5: ceil(100 / 5) = 20, limited to max(2 * 3, 4) = 6
    assert _once(ExternalAverageHPA(5.0, TICK), 100.0, 3) == 6
    # 8 pods, 60 waiting: ratio 60 / (5 * 8) = 1.5 -> ceil(60 / 5) = 12
    assert _once(ExternalAverageHPA(5.0, TICK), 60.0, 8) == 12
    # the ratio counts every pod, starting ones included: 2 Ready + 2 starting, 21 waiting -> 21 / 20 = 1.05, hold
    assert _once(ExternalAverageHPA(5.0, TICK), 21.0, 2, starting=2) == 4
    # ... and 30 waiting -> 30 / 20 = 1.5 -> ceil(30 / 5) = 6
    assert _once(ExternalAverageHPA(5.0, TICK), 30.0, 2, starting=2) == 6
    assert ExternalAverageHPA(5.0, TICK).name == "keda-queue@5"
    with pytest.raises(ValueError, match="target"):
        ExternalAverageHPA(0.0, TICK)


def test_the_queue_baselines_run_in_simulate_and_react_to_the_queue_one_sync_after_it_forms() -> None:
    # 2 h at 0.5 req/s, then 3.5 req/s; one replica serves 1 req/s (pod start-up 120 s, nodes of 64 GPUs).
    values = np.asarray([0.5] * 120 + [3.5] * 60)
    config = SimulationConfig(capacity_per_replica=1.0, cluster=ClusterConfig(gpus_per_node=64),
                              policies=("prodstack-queue", "keda-queue"))
    result = simulate(TrafficSeries(values, 60, 0), config)
    assert set(result.policies) == {"prodstack-queue@1", "keda-queue@5"}
    k0 = 120 * 4
    for name in result.policies:
        run = result.policies[name]
        assert run.requested[k0] == 1, name  # no queue yet at the step's first sync
        # 37.5 waiting on 1 pod: prodstack ceil(37.5 * 1) = 38, KEDA ceil(37.5 / 5) = 8, both limited to 4
        assert run.requested[k0 + 1] == 4, name
        # 75 waiting, 1 Ready of 4: prodstack ceil(75 * 1) = 75, KEDA 75 / (5 * 4) = 3.75 -> 15; both limited to 8
        assert run.requested[k0 + 2] == 8, name
        assert run.ready[k0 + 9] == 4, name
        assert run.slo_attainment < 1.0, name


def test_simulate_rejects_a_non_positive_queue_target() -> None:
    with pytest.raises(ValueError, match="keda-queue"):
        SimulationConfig(capacity_per_replica=1.0, keda_thresholds=(0.0,))
