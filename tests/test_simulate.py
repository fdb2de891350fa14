"""The simulator on traces small enough to check by hand: a step, a ramp, a spike, zeros, the bill.

Constants used below: 1-minute bins, 15 s ticks (4 per bin), capacity 1 req/s per replica, pod
start-up 120 s (8 ticks), node start-up 180 s (12 ticks), so a replica asked at tick k is Ready at
k + 8 when a node has a free GPU, and at k + 20 when a node must be provisioned.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autoscaler.engine.deciding import CURRENT_DEMAND_WINDOW_SECONDS
from autoscaler.simulation.cluster import Cluster, ClusterConfig
from autoscaler.simulation.engine import (
    PolicyResult,
    PredictiveFactory,
    SimulationConfig,
    SimulationResult,
    forward_max,
    need_per_tick,
    reactive_at,
    run_closed_loop,
    score,
    simulate,
)
from autoscaler.simulation.oracle import oracle_schedule
from autoscaler.simulation.predictive import factory
from autoscaler.simulation.reactive import ReactiveHPA
from models import registry
from models.types import TrafficSeries

STEP = 60
TICK = 15
POD = 120
NODE = 180
CAP = 1.0
DAY = 86_400


def _series(values: list[float] | np.ndarray, start: int = 0) -> TrafficSeries:
    return TrafficSeries(np.asarray(values, dtype=np.float64), STEP, start)


def _config(policies: tuple[str, ...], targets: tuple[float, ...] = (1.0,), gpus_per_node: int = 8,
            gpus_per_replica: int = 1, price: float = 3.0) -> SimulationConfig:
    return SimulationConfig(
        capacity_per_replica=CAP,
        cluster=ClusterConfig(pod_startup_seconds=POD, node_startup_seconds=NODE, gpus_per_node=gpus_per_node,
                              gpus_per_replica=gpus_per_replica),
        gpu_hour_price=price,
        min_replicas=1,
        max_replicas=100,
        reactive_targets=targets,
        policies=policies,
    )


def _predictive(model: str = "default") -> PredictiveFactory:
    return factory(lambda: registry.make_chain(model))


class _Scripted:
    """A policy that holds a replica count given per tick (to check the cluster and the bill)."""

    name = "scripted"

    def __init__(self, counts: list[int]) -> None:
        self.counts = counts

    def decide(self, k: int, cluster: Cluster, demand: float) -> int:
        return self.counts[k]


# -- the bill --------------------------------------------------------------------------------------


def test_gpu_hours_two_replicas_by_hand() -> None:
    # 2 replicas for the first hour, 1 for the second: 3 replica-hours; 2 GPUs each -> 6 GPU-hours.
    cfg = ClusterConfig(pod_startup_seconds=POD, node_startup_seconds=NODE, gpus_per_replica=2, gpus_per_node=8)
    ticks_per_hour = 3600 // TICK
    counts = [2] * ticks_per_hour + [1] * ticks_per_hour
    demand = np.full(2 * ticks_per_hour, 0.5)
    requested, ready = run_closed_loop(_Scripted(counts), demand, Cluster(cfg, initial_ready=2))
    result = score("scripted", demand, requested, ready, CAP, TICK, gpus_per_replica=2, gpu_hour_price=3.0)
    assert result.gpu_hours == pytest.approx(6.0)
    assert result.cost_usd == pytest.approx(18.0)
    assert result.scale_events == 1
    assert result.max_replicas == 2
    assert result.unserved_fraction == 0.0


def test_starting_replica_is_billed_from_ask_and_ready_after_pod_startup() -> None:
    # one replica Ready; at tick 0 a second is asked: it fits on the node, so Ready at tick 8, billed from tick 0.
    cfg = ClusterConfig(pod_startup_seconds=POD, node_startup_seconds=NODE)
    counts = [2] * 40
    demand = np.full(40, 1.5)
    requested, ready = run_closed_loop(_Scripted(counts), demand, Cluster(cfg, initial_ready=1))
    assert requested.tolist() == [2] * 40
    assert ready.tolist() == [1] * 8 + [2] * 32
    result = score("scripted", demand, requested, ready, CAP, TICK, 1, 3.0)
    assert result.gpu_hours == pytest.approx(2 * 40 * TICK / 3600)
    # 0.5 req/s above Ready capacity for 8 ticks, all of it waiting on the starting replica
    assert result.cold_start_requests == pytest.approx(0.5 * 8 * TICK)
    assert result.unserved_fraction == pytest.approx(0.5 * 8 / (1.5 * 40))


def test_a_replica_waits_for_a_node_when_no_gpu_is_free() -> None:
    cfg = ClusterConfig(pod_startup_seconds=POD, node_startup_seconds=NODE, gpus_per_node=2)
    cluster = Cluster(cfg, initial_ready=2)  # one full node
    cluster.advance(0)
    cluster.scale_to(0, 4)  # two more: one new node, Ready after node + pod = 300 s = 20 ticks
    assert cluster.free_gpus() == 0
    cluster.advance(19)
    assert cluster.ready == 2
    cluster.advance(20)
    assert cluster.ready == 4


def test_scale_down_releases_starting_replicas_first_and_empty_nodes_later() -> None:
    cfg = ClusterConfig(pod_startup_seconds=POD, node_startup_seconds=NODE, gpus_per_node=1,
                        consolidate_after_seconds=60)
    cluster = Cluster(cfg, initial_ready=2)
    cluster.advance(0)
    cluster.scale_to(0, 3)
    cluster.advance(1)
    cluster.scale_to(1, 2)  # the starting one goes, not a Ready one
    assert (cluster.requested, cluster.ready) == (2, 2)
    cluster.scale_to(1, 1)  # a Ready one goes; its node stays 60 s (4 ticks), then is removed
    assert len(cluster.nodes) == 3  # two in use or empty-but-kept, plus the one provisioned for the starting replica
    cluster.advance(5)
    assert len(cluster.nodes) == 1


# -- a step ----------------------------------------------------------------------------------------


def _step_trace() -> TrafficSeries:
    # 2 hours at 0.5 req/s (needs 1 replica), then 2 hours at 3.5 req/s (needs 4)
    return _series([0.5] * 120 + [3.5] * 120)


def test_reactive_hpa_reads_the_last_minute_and_lags_a_step_by_it_and_the_pod_startup() -> None:
    result = simulate(_step_trace(), _config(("reactive",), targets=(1.0,)))
    hpa = result.policies["reactive@1"]
    k0 = 120 * 4  # the step's first tick
    # at k0 the HPA's metric is the minute before the step (0.5 req/s: one replica, as it has); over the next four
    # syncs the step fills its one-minute rate (1.25, 2.0, 2.75, 3.5 req/s) and it asks 2, then holds (2.0 over
    # 1 Ready and 1 starting is ratio 1), then 3 and 4
    assert hpa.requested[k0 - 1:k0 + 5].tolist() == [1, 1, 2, 2, 3, 4]
    # each Ready one pod start-up (8 ticks) after it was asked
    assert hpa.ready[k0:k0 + 13].tolist() == [1] * 9 + [2, 2, 3, 4]
    unserved = ((3.5 - 1.0) * 9 + (3.5 - 2.0) * 2 + (3.5 - 3.0) * 1) * TICK
    total = (0.5 + 3.5) * 120 * STEP
    assert hpa.unserved_fraction == pytest.approx(unserved / total)
    # the tick the HPA had not yet read the step, nothing was starting: that shortfall is no cold start
    assert 0 < hpa.cold_start_requests <= unserved - (3.5 - 1.0) * TICK


def test_oracle_never_unserves_a_step_and_asks_one_lead_ahead() -> None:
    result = simulate(_step_trace(), _config(("oracle",)))
    oracle = result.policies["oracle"]
    need = need_per_tick(result.demand, CAP, 1)
    assert oracle.unserved_fraction == 0.0
    assert np.all(oracle.ready >= need)
    k0 = 120 * 4
    # replicas 2..4 share the first node, so only the pod start-up (8 ticks) is needed
    assert oracle.requested[k0 - 9] == 1
    assert oracle.requested[k0 - 8] == 4
    assert oracle.requested[-1] == 4
    # the oracle's bill is the least: 1 replica for 2 h, 4 for 2 h, plus 3 replicas x 120 s of start-up
    assert oracle.gpu_hours == pytest.approx(1 * 2 + 4 * 2 + 3 * POD / 3600)


def test_oracle_pays_the_node_startup_when_the_step_needs_a_new_node() -> None:
    result = simulate(_step_trace(), _config(("oracle",), gpus_per_node=2))
    oracle = result.policies["oracle"]
    k0 = 120 * 4
    assert oracle.unserved_fraction == 0.0
    # replica 3 opens a second node, node + pod = 20 ticks ahead; a Deployment is a count, so replica 2
    # (which alone would need only 8 ticks on the first node's free GPU) is held from then too.
    # Replica 4 finds the second node up: 8 ticks ahead.
    assert oracle.requested[k0 - 21] == 1
    assert oracle.requested[k0 - 20] == 3
    assert oracle.requested[k0 - 9] == 3
    assert oracle.requested[k0 - 8] == 4


def test_predictive_has_replicas_ready_before_a_daily_step() -> None:
    # 3 days: 0.5 req/s, except 09:00-12:00 every day at 6.5 req/s (needs 7). The step repeats daily,
    # so once the forecaster has a day of history it sees it coming; the HPA never does. Seasonal naive
    # repeats yesterday exactly, so this checks the simulator and planner timing, not a model's smoothing.
    minutes = np.arange(3 * 1440)
    tod = minutes % 1440
    values = np.where((tod >= 540) & (tod < 720), 6.5, 0.5)
    result = simulate(
        _series(values), _config(("predictive", "reactive")), predictive=_predictive("seasonal_naive")
    )
    pred, hpa = result.policies["predictive"], result.policies["reactive@1"]
    last_step = (2 * 1440 + 540) * 4
    assert pred.ready[last_step] >= 7, "the foreseeable step found predictive capacity still starting"
    assert hpa.ready[last_step] < 7
    last_day = slice(2 * 1440 * 4, None)
    d = np.nan_to_num(result.demand[last_day])
    pred_short = np.maximum(d - pred.ready[last_day] * CAP, 0).sum()
    hpa_short = np.maximum(d - hpa.ready[last_day] * CAP, 0).sum()
    assert pred_short == 0.0
    assert hpa_short > 0.0


# -- a ramp ----------------------------------------------------------------------------------------


def test_ramp_oracle_asks_exactly_one_pod_startup_ahead_and_hpa_falls_behind() -> None:
    # 0 -> 10 req/s over 2 hours, then flat; nodes of 64 GPUs, so no node is ever provisioned
    values = list(np.linspace(0.0, 10.0, 120)) + [10.0] * 60
    result = simulate(_series(values), _config(("oracle", "reactive"), targets=(0.8,), gpus_per_node=64))
    oracle, hpa = result.policies["oracle"], result.policies["reactive@0.8"]
    need = need_per_tick(result.demand, CAP, 1)
    pod_ticks = POD // TICK
    expected = forward_max(need, pod_ticks)
    first = 21  # after the warm start (the first node + pod lead)
    assert oracle.requested[first:].tolist() == expected[first:].tolist()
    assert oracle.unserved_fraction == 0.0
    assert hpa.unserved_fraction > 0.0
    assert hpa.cold_start_requests > 0.0


# -- a spike ---------------------------------------------------------------------------------------


def test_reactive_floor_answers_an_unforeseeable_spike() -> None:
    # flat 2 req/s for 6 hours with one 5-minute spike to 9 req/s the forecast cannot know about
    values = np.full(360, 2.0)
    values[300:305] = 9.0
    # nodes of 64 GPUs: the answer waits only for the pod start-up
    result = simulate(_series(values), _config(("predictive",), gpus_per_node=64), predictive=_predictive())
    pred = result.policies["predictive"]
    k0 = 300 * 4
    per_bin = STEP // TICK
    seen = CURRENT_DEMAND_WINDOW_SECONDS // TICK  # ticks until the floor's window holds only the spike
    # the reactive floor reads the demand of the last minute (the controller's instant rate query), never the
    # tick in progress: nothing moves at the spike's first tick; once the window holds only the spike, within one
    # decision (every 30 s, 2 ticks), the floor asks for 9
    assert pred.requested[k0] < 9
    assert max(pred.requested[k0 : k0 + seen + 2]) >= 9
    # and they are Ready one pod start-up later, still inside the spike
    assert pred.ready[k0 + seen + 2 + POD // TICK] >= 9
    assert k0 + seen + 2 + POD // TICK < k0 + 5 * per_bin


# -- zeros and missing data ------------------------------------------------------------------------


def test_zero_traffic_holds_min_replicas_without_dividing_by_zero() -> None:
    result = simulate(_series(np.zeros(240)), _config(("predictive", "reactive", "oracle"), targets=(0.5, 0.9)),
                      predictive=_predictive())
    for name, run in result.policies.items():
        assert run.unserved_fraction == 0.0, name
        assert run.requested.min() >= 1, name
        assert run.max_replicas == 1, name
        assert run.gpu_hours == pytest.approx(240 * STEP / 3600), name


def test_missing_bins_are_not_scored_and_the_hpa_holds() -> None:
    values = np.full(120, 3.0)
    values[60:90] = np.nan
    result = simulate(_series(values), _config(("reactive",), targets=(1.0,)))
    hpa = result.policies["reactive@1"]
    assert set(hpa.requested[60 * 4 : 90 * 4].tolist()) == {3}
    assert hpa.unserved_fraction == 0.0


# -- the HPA's own rules ---------------------------------------------------------------------------


def test_hpa_tolerance_and_scale_up_limit() -> None:
    cfg = ClusterConfig(pod_startup_seconds=POD, node_startup_seconds=NODE, gpus_per_node=64)
    # 10 Ready at 5.4 req/s: utilisation 0.54 vs target 0.5 -> ratio 1.08, inside the 10% tolerance
    hpa = ReactiveHPA(0.5, capacity_per_replica=1.0, tick_seconds=TICK, read_seconds=0)  # the tick's own demand
    assert hpa.decide(0, Cluster(cfg, 10), 5.4) == 10
    # 2 Ready at 20 req/s: wants ceil(20 / 0.5) = 40; without behavior limited to max(2 * 2, 4) = 4 per sync
    hpa = ReactiveHPA(0.5, capacity_per_replica=1.0, tick_seconds=TICK, read_seconds=0)
    assert hpa.decide(0, Cluster(cfg, 2), 20.0) == 4


def test_hpa_scale_down_waits_for_the_stabilisation_window() -> None:
    cfg = ClusterConfig(pod_startup_seconds=POD, node_startup_seconds=NODE, gpus_per_node=64)
    hpa = ReactiveHPA(1.0, capacity_per_replica=1.0, tick_seconds=TICK, read_seconds=0)
    cluster = Cluster(cfg, initial_ready=8)
    counts = []
    for k in range(30):
        cluster.advance(k)
        cluster.scale_to(k, hpa.decide(k, cluster, 8.0 if k == 0 else 2.0))
        counts.append(cluster.requested)
    # the 8 recommended at tick 0 holds for 300 s (20 ticks), then the count drops to 2 at once
    assert counts[:20] == [8] * 20
    assert counts[20] == 2


def test_hpa_does_not_pile_up_while_replicas_start() -> None:
    cfg = ClusterConfig(pod_startup_seconds=POD, node_startup_seconds=NODE, gpus_per_node=64)
    hpa = ReactiveHPA(1.0, capacity_per_replica=1.0, tick_seconds=TICK, read_seconds=0)
    cluster = Cluster(cfg, initial_ready=1)
    for k in range(8):
        cluster.advance(k)
        cluster.scale_to(k, hpa.decide(k, cluster, 3.5))
    # asked 4 at tick 0; the starting ones count as 0 % so the ratio over all pods is 3.5/4 < 1: hold
    assert cluster.requested == 4


# -- comparison helpers ----------------------------------------------------------------------------


def _run(name: str, gpu_hours: float, unserved: float) -> PolicyResult:
    empty = np.zeros(1, dtype=np.int64)
    return PolicyResult(name, gpu_hours, 0.0, unserved, 0.0, 0, 0, empty, empty)


def test_reactive_curve_is_interpolated_at_equal_gpu_hours() -> None:
    runs = [_run("reactive@0.5", 200.0, 0.01), _run("reactive@0.9", 100.0, 0.05)]
    same = reactive_at(150.0, runs)
    assert same is not None
    assert same.unserved_fraction == pytest.approx(0.03)
    assert not same.extrapolated
    outside = reactive_at(250.0, runs)
    assert outside is not None
    assert outside.extrapolated
    assert outside.unserved_fraction == pytest.approx(0.01)


def test_json_has_the_scores_per_policy_and_zero_money_keys_without_a_ceiling() -> None:
    result = simulate(_step_trace(), _config(("reactive", "oracle"), targets=(0.6, 0.8)))
    out = result.to_json()
    assert isinstance(result, SimulationResult)
    assert set(out) == {"trace", "queue", "policies"}
    assert out["queue"] == {"slo_wait_seconds": 2.0, "timeout_seconds": 60.0, "bin_shape": "flat"}
    assert list(out["policies"]) == ["oracle", "reactive@0.6", "reactive@0.8"]
    for scores in out["policies"].values():
        assert list(scores) == [
            "gpu_hours", "cost_usd", "slo_attainment", "wait_p99_seconds", "dropped_fraction", "unserved_fraction",
            "cold_start_requests", "scale_events", "max_replicas",
            "ceiling_breaches", "gangs_split", "gang_wait_hours", "ceiling_unserved_fraction", "gangs_missed",
            "gangs_preempted",
        ]
        assert all(isinstance(v, int | float) and math.isfinite(v) for v in scores.values())
        # no ceiling and no gangs: the money keys are there, and zero
        assert [scores[k] for k in ("ceiling_breaches", "gangs_split", "gangs_missed", "gangs_preempted")] == [0] * 4
        assert scores["gang_wait_hours"] == 0.0
        assert scores["ceiling_unserved_fraction"] == 0.0


# -- the oracle is a schedule the cluster can actually deliver -----------------------------------


@settings(max_examples=150, deadline=None)
@given(
    levels=st.lists(st.integers(1, 30), min_size=5, max_size=80),
    pod=st.integers(1, 300),
    node=st.integers(0, 300),
    gpus_per_node=st.integers(1, 8),
    consolidate=st.integers(0, 600),
)
def test_oracle_schedule_replayed_through_the_cluster_is_never_short(
    levels: list[int], pod: int, node: int, gpus_per_node: int, consolidate: int
) -> None:
    need = np.repeat(np.asarray(levels, dtype=np.int64), 4)
    cfg = ClusterConfig(pod_startup_seconds=pod, node_startup_seconds=node, gpus_per_node=gpus_per_node,
                        consolidate_after_seconds=consolidate)
    counts = oracle_schedule(need, cfg)
    initial = int(need[: cfg.ticks(node + pod) + 1].max())
    requested, ready = run_closed_loop(_Scripted(counts.tolist()), need.astype(np.float64), Cluster(cfg, initial))
    assert requested.tolist() == counts.tolist()
    assert np.all(ready >= need)
    # and it never holds more than asking everything one full (node + pod) lead ahead would
    assert counts.sum() <= forward_max(need, cfg.ticks(node + pod)).sum()


def test_bins_that_are_not_a_multiple_of_15s_get_finer_ticks() -> None:
    # 10-second bins -> 5-second ticks; the HPA still syncs every 15 s (3 ticks); a 100 s start-up is 20 ticks
    values = np.asarray([1.0] * 60 + [3.0] * 60)
    series = TrafficSeries(values, 10, 0)
    cfg = SimulationConfig(
        capacity_per_replica=1.0,
        cluster=ClusterConfig(pod_startup_seconds=100, node_startup_seconds=50),
        reactive_targets=(1.0,),
        policies=("reactive", "oracle"),
    )
    result = simulate(series, cfg)
    assert result.tick_seconds == 5
    hpa, oracle = result.policies["reactive@1"], result.policies["oracle"]
    k0 = 60 * 2  # the step's first tick; 120 is a multiple of 3, so the HPA syncs on it
    # its metric is the last minute's rate (12 ticks): at its syncs k0 + 3, k0 + 6 and k0 + 9 it reads 1.5, 2.0 and
    # 2.5 req/s, so it asks 2, holds (2.0 over 1 Ready and 1 starting is ratio 1) and asks 3
    assert hpa.requested[k0:k0 + 12].tolist() == [1, 1, 1, 2, 2, 2, 2, 2, 2, 3, 3, 3]
    assert hpa.ready[k0 + 3 + 19] == 1  # 100 s (20 ticks) after each ask
    assert hpa.ready[k0 + 3 + 20] == 2
    assert hpa.ready[k0 + 9 + 20] == 3
    assert oracle.requested[k0 - 21] == 1
    assert oracle.requested[k0 - 20] == 3
    assert oracle.unserved_fraction == 0.0


def test_a_takeover_scores_every_policy_on_the_ticks_after_it() -> None:
    from dataclasses import replace

    from autoscaler.synth import synth_trace

    series = synth_trace(days=2, seed=3, tokens=False).requests
    config = SimulationConfig(capacity_per_replica=float(np.nanmax(series.values)) / 10,
                              policies=("reactive", "oracle"), reactive_targets=(0.7,))
    whole = simulate(series, config, "t")
    day = 86_400
    after = simulate(series, replace(config, taken_over_seconds=day), "t")
    first = day // whole.tick_seconds
    for name, run in whole.policies.items():
        # the same run (a policy that does not tune does not know of the takeover), scored from the takeover on
        assert np.array_equal(after.policies[name].requested, np.asarray(run.requested)[first:])
        assert after.policies[name].gpu_hours == pytest.approx(
            float(np.asarray(run.requested)[first:].sum()) * whole.tick_seconds / 3600)
        assert 0 < after.policies[name].gpu_hours < run.gpu_hours
    assert after.start == whole.start + day
    assert after.demand.size == whole.demand.size - first
    # from the trace's start it is the whole run's score
    again = simulate(series, replace(config, taken_over_seconds=0), "t")
    assert again.policies["reactive@0.7"].slo_attainment == whole.policies["reactive@0.7"].slo_attainment
    with pytest.raises(ValueError, match="at or after the trace's end"):
        simulate(series, replace(config, taken_over_seconds=2 * day), "t")
    with pytest.raises(ValueError, match="at or after the trace's start"):
        replace(config, taken_over_seconds=-1)
