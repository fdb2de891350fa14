"""The queue in front of the Ready replicas, the queue-driven HPA and how bins are spread over ticks.

Hand-checked cases use 15 s ticks, 1-minute bins, a capacity of 1 req/s (one replica) and a 60 s
timeout, unless a test says otherwise.
"""

from __future__ import annotations

import math
from collections import deque

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autoscaler.simulation.cluster import Cluster, ClusterConfig
from autoscaler.simulation.engine import SimulationConfig, run_closed_loop, score, simulate
from autoscaler.simulation.queue import FluidQueue, QueueConfig, Segments, replay
from autoscaler.simulation.reactive import QueueHPA
from autoscaler.simulation.traffic import resolve, spread
from models.types import TrafficSeries

TICK = 15

# 0.5 req/s, then 2 req/s for 3 minutes (from t = 60 s to 240 s), then 0.5 req/s for 6 minutes
STEP_BINS = [0.5, 2, 2, 2, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5]


def _step_rate() -> np.ndarray:
    return np.repeat(np.asarray(STEP_BINS, dtype=np.float64), 4)


# -- the queue against hand-computed cases ---------------------------------------------------------


def test_a_step_above_capacity_for_three_minutes_by_hand() -> None:
    # Arrivals: 30 before the step, 360 in it, 180 after: 570. The server does 1 req/s throughout.
    # t = 60..180: the backlog grows at 2 - 1 = 1 req/s; the request arriving s seconds into the step
    #   starts at 2s (the server has done s... 2s of work), so it waits s: waits 0..60 s for the first 60 s
    #   of the step (120 requests).
    # t = 180: the head is 60 s old, the backlog 120 = everything that arrived in the last 60 s. From here
    #   the head leaves at the timeout: the 2 req/s that arrived 60 s earlier leave at 2 req/s, 1 starts
    #   (after exactly 60 s) and 1 is dropped, until t = 300 (arrivals of t = 120..240): 120 dropped.
    # t = 240..300: arrivals 0.5 req/s, the backlog falls with the ceiling to 30 at t = 300.
    # t = 300..360: the head is younger than the timeout, the backlog drains at 1 - 0.5 req/s: 0 at t = 360.
    #   The 60 requests that arrived in t = 240..360 waited 60 s down to 0 s.
    rate = _step_rate()
    out = replay(Segments(rate, TICK, 60), np.ones(rate.size))
    assert out.total == pytest.approx(570)
    assert out.dropped == pytest.approx(120)
    assert out.dropped_fraction == pytest.approx(120 / 570)
    backlog = [0] * 4 + [15, 30, 45, 60, 75, 90, 105, 120] + [120] * 4 + [97.5, 75, 52.5, 30, 22.5, 15, 7.5, 0]
    assert out.backlog_end_of_tick.tolist() == pytest.approx(backlog + [0] * 16)
    assert out.peak_backlog == pytest.approx(120)
    # within 2 s: the 30 before, 2/60 of the 120 early step requests, 2/60 of the 60 after, the last 120
    assert out.attainment(2.0) == pytest.approx((30 + 4 + 2 + 120) / 570)
    # waits: 150 at 0 s, 180 uniform on 0..60 s, 240 at 60 s (120 started then, 120 dropped)
    assert out.wait_quantile(0.5) == pytest.approx(45.0, abs=1e-4)  # 150 + 180 * w / 60 = 285
    assert out.wait_quantile(0.99) == pytest.approx(60.0)
    assert out.wait_quantile(0.2) == 0.0
    # a looser objective than the timeout counts the 120 that started at 60 s, never the dropped ones
    assert out.attainment(60.0) == pytest.approx(450 / 570)
    assert out.attainment(1e6) == pytest.approx(450 / 570)


def test_a_timeout_between_ticks_by_hand() -> None:
    # The same step with a 50 s timeout (the segments are cut inside ticks): the head reaches 50 s at
    # t = 160 and is dropped at 1 req/s until t = 290 (arrivals up to 240): 130 dropped; the backlog is 25
    # at t = 290 and drains at 0.5 req/s to 0 at t = 340.
    rate = _step_rate()
    out = replay(Segments(rate, TICK, 50), np.ones(rate.size))
    assert out.dropped == pytest.approx(130)
    # within 2 s: 30 + 2/50 of 100 + 2/50 of 50 + 130
    assert out.attainment(2.0) == pytest.approx((30 + 4 + 2 + 130) / 570)
    # waits: 160 at 0, 150 uniform on 0..50, 260 at 50
    assert out.wait_quantile(0.5) == pytest.approx(125 / 3, abs=1e-4)
    assert out.wait_quantile(0.99) == pytest.approx(50.0)


def test_no_queue_when_capacity_covers_every_tick() -> None:
    rate = _step_rate()
    out = replay(Segments(rate, TICK, 60), np.full(rate.size, 2.0))
    assert out.attainment(0.0) == pytest.approx(1.0)
    assert out.wait_quantile(0.99) == 0.0
    assert out.dropped == 0.0
    assert out.peak_backlog == 0.0


def test_no_capacity_drops_everything_after_the_timeout() -> None:
    rate = np.full(8, 3.0)
    out = replay(Segments(rate, TICK, 30), np.zeros(8))
    assert out.dropped_fraction == pytest.approx(1.0)
    assert out.attainment(1e9) == pytest.approx(0.0)
    assert out.wait_quantile(0.01) == pytest.approx(30.0)


def test_missing_ticks_carry_no_arrivals_and_no_traffic_is_full_attainment() -> None:
    out = replay(Segments(np.full(4, np.nan), TICK, 60), np.zeros(4))
    assert out.total == 0.0
    assert out.attainment(2.0) == 1.0
    assert out.wait_quantile(0.99) == 0.0
    rate = np.asarray([np.nan, 2.0, np.nan, 2.0])
    assert replay(Segments(rate, TICK, 60), np.full(4, 2.0)).total == pytest.approx(60.0)


def test_the_queue_stepped_tick_by_tick_is_the_one_scored() -> None:
    rate = _step_rate()
    seg = Segments(rate, TICK, 50)
    queue = FluidQueue(seg)
    seen = []
    for k in range(rate.size):
        seen.append(queue.waiting)
        queue.advance(k, 1.0)
    out = replay(seg, np.ones(rate.size))
    assert seen[1:] == pytest.approx(out.backlog_end_of_tick[:-1].tolist())
    with pytest.raises(ValueError, match="in order"):
        queue.advance(3, 1.0)


def _brute_force(rate: np.ndarray, cap: np.ndarray, timeout: float, slo: float, sub: int = 150) -> tuple[float, float]:
    """(attainment, dropped fraction) by moving small parcels of requests through a FIFO queue."""
    h = TICK / sub
    drain = math.ceil(timeout / TICK) + 1
    rates = np.concatenate((rate, np.zeros(drain)))
    caps = np.concatenate((cap, np.full(drain, cap[-1])))
    queue: deque[list[float]] = deque()  # [arrival time, mass]
    met = dropped = total = 0.0
    for k in range(rates.size):
        for j in range(sub):
            t = k * TICK + j * h
            if rates[k] > 0:
                queue.append([t + h / 2, rates[k] * h])
                total += rates[k] * h
            now = t + h / 2
            while queue and now - queue[0][0] > timeout:
                dropped += queue.popleft()[1]
            budget = caps[k] * h
            while queue and budget > 1e-12:
                take = min(budget, queue[0][1])
                if now - queue[0][0] <= slo:
                    met += take
                queue[0][1] -= take
                budget -= take
                if queue[0][1] <= 1e-12:
                    queue.popleft()
    return met / total, dropped / total


@pytest.mark.parametrize("seed", range(12))
def test_exact_fluid_waits_match_a_fine_parcel_simulation(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = 24
    rate = rng.gamma(2.0, 1.0, n) * rng.choice([0.0, 1.0], n, p=[0.15, 0.85])
    cap = rng.choice([0.5, 1.5, 2.5, 4.0], n)
    timeout = float(rng.choice([7.0, 30.0, 45.0, 60.0, 95.0]))
    slo = float(rng.choice([0.5, 2.0, 10.0]))
    out = replay(Segments(rate, TICK, timeout), cap)
    attained, dropped = _brute_force(rate, cap, timeout, slo)
    assert out.attainment(slo) == pytest.approx(attained, abs=0.01)
    assert out.dropped_fraction == pytest.approx(dropped, abs=0.01)


# -- properties ------------------------------------------------------------------------------------

rates_st = st.lists(st.floats(0.0, 20.0, allow_nan=False), min_size=1, max_size=40)


@settings(max_examples=150, deadline=None)
@given(rates=rates_st, caps=st.lists(st.floats(0.0, 20.0), min_size=40, max_size=40),
       extra=st.lists(st.floats(0.0, 5.0), min_size=40, max_size=40),
       timeout=st.floats(1.0, 200.0), slo=st.floats(0.0, 100.0))
def test_more_capacity_never_lowers_attainment(rates: list[float], caps: list[float], extra: list[float],
                                               timeout: float, slo: float) -> None:
    rate = np.asarray(rates)
    low = np.asarray(caps[: rate.size])
    high = low + np.asarray(extra[: rate.size])
    seg = Segments(rate, TICK, timeout)
    a, b = replay(seg, low), replay(seg, high)
    assert b.attainment(slo) >= a.attainment(slo) - 1e-9
    assert b.dropped <= a.dropped + 1e-6
    assert b.wait_quantile(0.99) <= a.wait_quantile(0.99) + 1e-4


@settings(max_examples=150, deadline=None)
@given(rates=rates_st, caps=st.lists(st.floats(0.0, 20.0), min_size=40, max_size=40),
       t1=st.floats(1.0, 200.0), t2=st.floats(1.0, 200.0))
def test_a_longer_timeout_never_drops_more(rates: list[float], caps: list[float], t1: float, t2: float) -> None:
    rate = np.asarray(rates)
    cap = np.asarray(caps[: rate.size])
    short, long = sorted((t1, t2))
    assert replay(Segments(rate, TICK, long), cap).dropped <= replay(Segments(rate, TICK, short), cap).dropped + 1e-6


@settings(max_examples=150, deadline=None)
@given(rates=rates_st, caps=st.lists(st.floats(0.0, 20.0), min_size=40, max_size=40),
       timeout=st.floats(1.0, 200.0), w1=st.floats(0.0, 300.0), w2=st.floats(0.0, 300.0))
def test_a_looser_slo_wait_never_lowers_attainment(rates: list[float], caps: list[float], timeout: float,
                                                   w1: float, w2: float) -> None:
    out = replay(Segments(np.asarray(rates), TICK, timeout), np.asarray(caps[: len(rates)]))
    tight, loose = sorted((w1, w2))
    assert out.attainment(loose) >= out.attainment(tight) - 1e-12
    assert 0.0 <= out.attainment(tight) <= 1.0


@settings(max_examples=60, deadline=None)
@given(levels=st.lists(st.integers(1, 6), min_size=4, max_size=30), more=st.integers(1, 3),
       demand=st.lists(st.floats(0.0, 8.0), min_size=120, max_size=120))
def test_more_ready_replicas_never_lower_a_policys_attainment(levels: list[int], more: int,
                                                              demand: list[float]) -> None:
    ready = np.repeat(np.asarray(levels, dtype=np.int64), 4)
    d = np.asarray(demand[: ready.size])
    a = score("a", d, ready, ready, 1.0, TICK, 1, 3.0)
    b = score("b", d, ready + more, ready + more, 1.0, TICK, 1, 3.0)
    assert b.slo_attainment >= a.slo_attainment - 1e-9
    assert b.dropped_fraction <= a.dropped_fraction + 1e-9
    assert b.unserved_fraction <= a.unserved_fraction + 1e-12


def test_score_reports_the_queue_under_the_configured_objective() -> None:
    rate = _step_rate()
    one = np.ones(rate.size, dtype=np.int64)
    tight = score("x", rate, one, one, 1.0, TICK, 1, 3.0, queue=QueueConfig(timeout_seconds=60, slo_wait_seconds=2))
    loose = score("x", rate, one, one, 1.0, TICK, 1, 3.0, queue=QueueConfig(timeout_seconds=60, slo_wait_seconds=60))
    assert tight.slo_attainment == pytest.approx(156 / 570)
    assert loose.slo_attainment == pytest.approx(450 / 570)
    assert tight.dropped_fraction == pytest.approx(120 / 570)
    assert tight.wait_p99_seconds == pytest.approx(60.0)
    # the capacity shortfall keeps its meaning: 1 req/s above capacity for 180 s, over 570 requests
    assert tight.unserved_fraction == pytest.approx(180 / 570)


def test_queue_config_rejects_nonsense() -> None:
    with pytest.raises(ValueError, match="timeout"):
        QueueConfig(timeout_seconds=0)
    with pytest.raises(ValueError, match="SLO wait"):
        QueueConfig(slo_wait_seconds=-1)


# -- the HPA on vllm:num_requests_waiting ----------------------------------------------------------


def _cluster(ready: int, starting: int = 0) -> Cluster:
    cluster = Cluster(ClusterConfig(gpus_per_node=64), initial_ready=ready)
    cluster.advance(0)
    if starting:
        cluster.scale_to(0, ready + starting)
    return cluster


def _decide(waiting: float, ready: int, starting: int = 0, target: float = 10.0) -> int:
    hpa = QueueHPA(target, TICK)
    hpa.observe_queue(waiting)
    return hpa.decide(0, _cluster(ready, starting), 1.0)


def test_queue_hpa_worked_examples() -> None:
    # 3 pods, 45 waiting in total: 15 per pod against 10 -> ceil(3 * 15 / 10) = 5
    assert _decide(45, 3) == 5
    # 31.5 waiting: 10.5 per pod, ratio 1.05, inside the 10% tolerance: no change
    assert _decide(31.5, 3) == 3
    # 27.5 waiting: ratio 0.917, inside the tolerance too
    assert _decide(27.5, 3) == 3
    # 2 pods, 200 waiting: wants ceil(200 / 10) = 20, limited to max(2 * 2, 4) = 4 per sync (no behavior)
    assert _decide(200, 2) == 4
    # a target of 5: 3 pods, 45 waiting -> ceil(3 * 15 / 5) = 9, limited to max(2 * 3, 4) = 6
    assert _decide(45, 3, target=5) == 6
    assert QueueHPA(10, TICK).name == "hpa-queue@10"


def test_queue_hpa_with_starting_pods_counts_them_as_empty_on_a_scale_up() -> None:
    # 2 Ready + 2 starting, 60 waiting: 30 per Ready pod (ratio 3); over all 4 pods 15 (ratio 1.5) ->
    # ceil(1.5 * 4) = 6
    assert _decide(60, 2, starting=2) == 6
    # 24 waiting: ratio 1.2 over Ready pods, 0.6 over all pods: the direction flips, so hold 4
    assert _decide(24, 2, starting=2) == 4


def test_queue_hpa_without_a_queue_scales_down_after_the_window() -> None:
    hpa = QueueHPA(10, TICK)
    cluster = _cluster(5)
    counts = []
    for k in range(25):
        cluster.advance(k)
        hpa.observe_queue(50.0 if k == 0 else 0.0)  # 10 per pod at tick 0 (hold 5), then no queue
        cluster.scale_to(k, hpa.decide(k, cluster, 1.0))
        counts.append(cluster.requested)
    # the 5 recommended at tick 0 holds for the 300 s window (20 ticks), then the recommendation 0 -> min 1
    assert counts[:20] == [5] * 20
    assert counts[20:] == [1] * 5


def test_queue_hpa_holds_without_a_metric() -> None:
    hpa = QueueHPA(10, TICK)
    hpa.observe_queue(500.0)
    assert hpa.decide(0, _cluster(3), math.nan) == 3  # a missing sample: no scaling
    with pytest.raises(ValueError, match="target"):
        QueueHPA(0, TICK)


def test_queue_hpa_reacts_to_the_simulated_queue_one_sync_after_it_forms() -> None:
    # 2 h at 0.5 req/s, then 3.5 req/s; one replica serves 1 req/s (pod start-up 120 s, nodes of 64 GPUs).
    values = np.asarray([0.5] * 120 + [3.5] * 60)
    config = SimulationConfig(capacity_per_replica=1.0, cluster=ClusterConfig(gpus_per_node=64),
                              policies=("hpa-queue",))
    result = simulate(TrafficSeries(values, 60, 0), config)
    hpa = result.policies["hpa-queue@10"]
    k0 = 120 * 4
    # no queue before the step: the HPA sits at min replicas, and at the step's first sync it sees none yet
    assert hpa.requested[k0 - 1] == 1
    assert hpa.requested[k0] == 1
    # one tick later 2.5 req/s x 15 s = 37.5 wait on 1 pod: ratio 3.75 -> 4 replicas, Ready 8 ticks later
    assert hpa.requested[k0 + 1] == 4
    assert hpa.ready[k0 + 8] == 1
    assert hpa.ready[k0 + 9] == 4
    assert result.policies["hpa-queue@10"].slo_attainment < 1.0
    assert hpa.waiting is not None
    assert hpa.waiting[k0] == pytest.approx(37.5)


def test_a_policy_that_reads_the_queue_needs_one() -> None:
    with pytest.raises(ValueError, match="FluidQueue"):
        run_closed_loop(QueueHPA(10, TICK), np.ones(4), Cluster(ClusterConfig(), 1))


# -- traffic inside a bin --------------------------------------------------------------------------


def test_auto_spreads_bins_longer_than_a_minute_and_replays_shorter_ones_flat() -> None:
    assert resolve("auto", 600) == "linear"
    assert resolve("auto", 60) == "flat"
    assert resolve("flat", 600) == "flat"
    with pytest.raises(ValueError, match="bin shape"):
        resolve("wavy", 60)


def test_linear_spread_keeps_every_bins_count_and_has_no_cliff() -> None:
    values = np.asarray([1.0, 1.0, 3.0, 3.0, 0.0, 2.0, np.nan, 2.0])
    ticks = spread(values, 40, "linear").reshape(-1, 40)
    finite = np.isfinite(values)
    assert ticks[finite].mean(axis=1) == pytest.approx(values[finite])
    assert np.all(np.isnan(ticks[~finite]))
    assert np.all(ticks[finite] >= 0)
    assert np.all(ticks[4] == 0)  # an empty bin stays empty
    # a step from 1 to 3 becomes a ramp across the edge, not a jump: no two neighbouring ticks differ by
    # more than a twentieth of the rise (a flat replay jumps by all of it at once)
    step = spread(np.asarray([1.0] * 5 + [3.0] * 5), 40, "linear").reshape(-1, 40)
    assert step.mean(axis=1) == pytest.approx([1.0] * 5 + [3.0] * 5)
    assert np.abs(np.diff(step.ravel())).max() < 0.05 * (3.0 - 1.0)
    # keeping the counts makes it ring, by about a fifth of its height in the bins next to it
    assert step.min() > 1.0 - 0.21 * 2.0
    assert step.max() < 3.0 + 0.21 * 2.0
    assert step[:3].ravel() == pytest.approx(np.ones(120), abs=0.03)  # two bins away: under 3%
    # a linear trend is reproduced exactly
    trend = spread(np.arange(1.0, 21.0), 4, "linear").reshape(-1, 4)  # bin j holds j + 1
    assert trend[8:12].ravel() == pytest.approx(8.5 + (np.arange(16) + 0.5) / 4, abs=1e-4)


def test_flat_spread_repeats_the_bin() -> None:
    assert spread(np.asarray([1.0, 2.0]), 2, "flat").tolist() == [1.0, 1.0, 2.0, 2.0]
    assert spread(np.asarray([1.0, 2.0]), 1, "linear").tolist() == [1.0, 2.0]


def test_every_policy_of_a_run_sees_the_same_spread_traffic() -> None:
    values = np.asarray([1.0, 1.0, 3.0, 3.0, 1.0, 1.0] * 4)
    config = SimulationConfig(capacity_per_replica=1.0, policies=("oracle", "reactive", "hpa-queue"),
                              reactive_targets=(0.8,), bin_shape="auto")
    result = simulate(TrafficSeries(values, 600, 0), config)
    assert result.bin_shape == "linear"
    assert result.demand.reshape(-1, 40).mean(axis=1) == pytest.approx(values)
    assert result.to_json()["queue"]["bin_shape"] == "linear"
    assert result.policies["oracle"].slo_attainment == pytest.approx(1.0)
