"""The simulator's cost ceiling and training gangs, on traces small enough to check by hand.

Constants as in test_simulate.py: 1-minute bins, 15 s ticks (4 per bin), 1 req/s per replica, pod
start-up 120 s (8 ticks), node start-up 180 s (12 ticks), $3 per GPU-hour, 1 GPU per replica.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autoscaler.simulation.cluster import ClusterConfig
from autoscaler.simulation.engine import PolicyResult, SimulationConfig, SimulationResult, simulate
from autoscaler.simulation.money import GangSpec, MoneyConfig, parse_priority
from autoscaler.simulation.predictive import factory
from models import registry
from models.types import TrafficSeries

STEP = 60
TICK = 15
POD = 120
NODE = 180
PRICE = 3.0
HOUR_TICKS = 3600 // TICK


def _series(values: list[float] | np.ndarray) -> TrafficSeries:
    return TrafficSeries(np.asarray(values, dtype=np.float64), STEP, 0)


def _config(policies: tuple[str, ...], money: MoneyConfig, targets: tuple[float, ...] = (1.0,),
            gpus_per_node: int = 8, min_replicas: int = 1) -> SimulationConfig:
    return SimulationConfig(
        capacity_per_replica=1.0,
        cluster=ClusterConfig(pod_startup_seconds=POD, node_startup_seconds=NODE, gpus_per_node=gpus_per_node),
        gpu_hour_price=PRICE,
        min_replicas=min_replicas,
        max_replicas=100,
        reactive_targets=targets,
        policies=policies,
        money=money,
    )


def per_gpu(**kw: Any) -> MoneyConfig:
    """The scenarios below count GPUs (one-GPU replicas under a ceiling of N GPUs): billed per GPU. Whole-node
    billing (the controller's rule, the benchmark's) is tested at the end."""
    return MoneyConfig(whole_nodes=False, **kw)


def _held_dollars(run: PolicyResult) -> np.ndarray:
    assert run.gang_gpus is not None
    return (run.requested + run.gang_gpus) * PRICE


def _step_trace() -> TrafficSeries:
    # 2 hours at 0.5 req/s (needs 1 replica), then 2 hours at 3.5 req/s (needs 4)
    return _series([0.5] * 120 + [3.5] * 120)


# -- the ceiling -------------------------------------------------------------------------------------


def test_a_ceiling_of_three_replicas_never_holds_four_and_the_cut_is_attributed_to_it() -> None:
    money = per_gpu(ceiling_usd_per_hour=3 * PRICE)  # exactly 3 one-GPU replicas
    result = simulate(_step_trace(), _config(("oracle", "reactive"), money))
    total = (0.5 + 3.5) * 120 * STEP  # requests in the trace
    for run in result.policies.values():
        assert run.max_replicas == 3, run.name
        assert np.all(_held_dollars(run) <= 3 * PRICE), run.name
        assert run.ceiling_breaches == 0
        assert run.wanted is not None
        assert run.wanted.max() == 4, run.name  # what the policy asked for
    oracle = result.policies["oracle"]
    # the oracle's 3 replicas are Ready at the step; 0.5 req/s above them for the 2 hours of the step,
    # all of it between the allowed 3 and the wanted 4 replicas
    assert oracle.unserved_fraction == pytest.approx(0.5 * 120 * STEP / total)
    assert oracle.ceiling_unserved_fraction == pytest.approx(0.5 * 120 * STEP / total)
    hpa = result.policies["reactive@1"]
    # the HPA reads the step as the last minute's rate fills with it, and asks 2 one tick after it and 3 three ticks
    # after (then 4, cut to 3): for 9 ticks only 1 replica is Ready (2.5 req/s short, of which 0.5 above the ceiling's
    # 3 replicas), for 2 ticks 2 (1.5 short); then 3 are Ready and 0.5 req/s is short, all of it the ceiling's
    unserved = (2.5 * 9 + 1.5 * 2 + 0.5 * (120 * 4 - 11)) * TICK
    assert hpa.unserved_fraction == pytest.approx(unserved / total)
    # the ceiling's share starts at the tick it cut the 4 the HPA asked
    assert hpa.ceiling_unserved_fraction == pytest.approx(0.5 * (120 * 4 - 4) * TICK / total)


def test_without_a_ceiling_nothing_is_attributed_to_it_and_results_are_unchanged() -> None:
    plain = simulate(_step_trace(), _config(("oracle", "reactive"), per_gpu()))
    generous = simulate(_step_trace(), _config(("oracle", "reactive"), per_gpu(ceiling_usd_per_hour=1000.0)))
    for name, run in plain.policies.items():
        other = generous.policies[name]
        assert other.requested.tolist() == run.requested.tolist(), name
        assert other.gpu_hours == pytest.approx(run.gpu_hours)
        assert other.ceiling_unserved_fraction == 0.0
        assert run.ceiling_unserved_fraction == 0.0


def test_min_replicas_above_the_ceiling_are_kept_and_every_tick_is_a_breach() -> None:
    money = per_gpu(ceiling_usd_per_hour=PRICE)  # one replica's worth, but min replicas is 2
    result = simulate(_step_trace(), _config(("oracle",), money, min_replicas=2))
    oracle = result.policies["oracle"]
    assert oracle.requested.min() == 2
    assert oracle.max_replicas == 2
    assert oracle.ceiling_breaches == oracle.requested.size
    assert any("cannot be met" in n for n in result.notes)


# -- gangs -------------------------------------------------------------------------------------------


def _daily_step(days: int = 3) -> TrafficSeries:
    # 0.5 req/s, except 09:00-12:00 every day at 6.5 req/s (needs 7 replicas)
    tod = np.arange(days * 1440) % 1440
    return _series(np.where((tod >= 540) & (tod < 720), 6.5, 0.5))


# 10 GPUs of budget: an 8-GPU gang fits next to 1-2 replicas, never next to the 7 of the busy hours.
# Submitted on day 3 at 08:00, 2 hours of run, may be reserved until 14:00.
TROUGH = per_gpu(
    ceiling_usd_per_hour=10 * PRICE,
    gangs=(GangSpec(gpus=8, at_seconds=(2 * 24 + 8) * 3600, run_seconds=2 * 3600, window_seconds=6 * 3600,
                    name="train"),),
)


def test_predictive_places_a_gang_that_fits_only_in_the_trough_there() -> None:
    result = simulate(_daily_step(), _config(("predictive", "reactive"), TROUGH),
                      predictive=factory(lambda: registry.make_chain("seasonal_naive")))
    pred, hpa = result.policies["predictive"], result.policies["reactive@1"]
    day3 = 2 * 24 * HOUR_TICKS
    busy = slice(day3 + 9 * HOUR_TICKS, day3 + 12 * HOUR_TICKS)
    assert pred.gang_gpus is not None
    assert hpa.gang_gpus is not None
    # the forecast (yesterday, exactly) says 09:00-12:00 is busy: placed at 12:00, never reserved before
    assert "predictive: train placed at +60.00h" in " ".join(result.notes)
    assert pred.gang_gpus[: busy.stop].max() == 0
    reserved = int(np.flatnonzero(pred.gang_gpus)[0])
    # reserved once the planner's scale-down leaves room (within 15 min of 12:00), held for node start-up + run
    assert busy.stop <= reserved <= busy.stop + 15 * 60 // TICK
    assert np.count_nonzero(pred.gang_gpus) == NODE // TICK + 2 * HOUR_TICKS
    assert set(pred.gang_gpus.tolist()) == {0, 8}
    assert pred.gangs_preempted == 0
    assert pred.gangs_missed == 0
    assert pred.gang_wait_hours == pytest.approx((reserved - (day3 + 8 * HOUR_TICKS)) * TICK / 3600)
    # the HPA has no forecast: first fit at 08:00, preempted whole when the 09:00 rise needs the budget
    assert hpa.gang_gpus[day3 + 8 * HOUR_TICKS] == 8
    minute = 60 // TICK  # the HPA reads the last minute's rate: the rise reaches it within a minute
    assert hpa.gang_gpus[busy.start + minute:busy.stop].max() == 0
    assert hpa.gangs_preempted == 1
    assert hpa.gangs_missed == 0
    lost = day3 + 8 * HOUR_TICKS + int(np.flatnonzero(hpa.gang_gpus[day3 + 8 * HOUR_TICKS :] == 0)[0])
    restart = lost + int(np.flatnonzero(hpa.gang_gpus[lost:])[0])
    assert busy.start < lost <= busy.start + minute  # preempted by the rise at 09:00, once the HPA reads it
    assert hpa.gang_wait_hours == pytest.approx((restart - lost) * TICK / 3600)
    # the lost hour is paid too: the HPA's gang held more GPU-ticks than the predictive policy's
    assert np.count_nonzero(hpa.gang_gpus) == lost - (day3 + 8 * HOUR_TICKS) + NODE // TICK + 2 * HOUR_TICKS
    for run in (pred, hpa):
        assert run.gangs_split == 0
        assert run.ceiling_breaches == 0
        assert np.all(_held_dollars(run) <= 10 * PRICE)
        # the gang is paid: GPU-hours = replicas + the gang's GPUs while held
        assert run.gang_gpus is not None
        assert run.gpu_hours == pytest.approx((run.requested.sum() + run.gang_gpus.sum()) * TICK / 3600)


def test_a_gang_that_outranks_inference_is_kept_and_inference_is_cut_instead() -> None:
    money = per_gpu(ceiling_usd_per_hour=TROUGH.ceiling_usd_per_hour, gangs=TROUGH.gangs,
                        inference_priority=parse_priority("standard", "x"))
    result = simulate(_daily_step(), _config(("reactive",), money))
    hpa = result.policies["reactive@1"]
    assert hpa.gang_gpus is not None
    day3 = 2 * 24 * HOUR_TICKS
    start = day3 + 8 * HOUR_TICKS
    # an admitted gang ranks above standard inference: reserved at 08:00 and kept for node start-up + 2 h
    assert np.flatnonzero(hpa.gang_gpus).tolist() == list(range(start, start + NODE // TICK + 2 * HOUR_TICKS))
    assert hpa.gangs_preempted == 0
    assert hpa.gang_wait_hours == 0.0
    # meanwhile inference is held at 10 - 8 = 2 replicas: 4.5 req/s of the 09:00 rise is the ceiling's
    gang_end = start + NODE // TICK + 2 * HOUR_TICKS
    assert hpa.requested[day3 + 9 * HOUR_TICKS : gang_end].max() == 2
    assert hpa.ceiling_unserved_fraction > 0
    assert hpa.ceiling_breaches == 0


def test_a_gang_that_never_fits_waits_its_window_and_is_reported_missed() -> None:
    # 16 GPUs never fit under 10 GPUs of budget; asked at 1 h with a 2 h window
    gang = GangSpec.parse("gpus=16,at=1h,hours=1,window=2h", "big")
    money = per_gpu(ceiling_usd_per_hour=10 * PRICE, gangs=(gang,))
    result = simulate(_step_trace(), _config(("oracle", "reactive"), money))
    without = simulate(_step_trace(), _config(("oracle", "reactive"), per_gpu(ceiling_usd_per_hour=10 * PRICE)))
    for name, run in result.policies.items():
        assert run.gangs_missed == 1, name
        assert run.gang_gpus is not None
        assert run.gang_gpus.max() == 0
        # waiting from the tick it is asked to the last tick of its window and one node start-up of grace, both
        # included (the controller counts a placed gang that long: an activation at its deadline may still land)
        assert run.gang_wait_hours == pytest.approx((2 * HOUR_TICKS + NODE // TICK + 1) * TICK / 3600)
        assert run.gpu_hours == pytest.approx(without.policies[name].gpu_hours)


def test_a_gang_without_a_ceiling_starts_at_once_under_first_fit_and_is_paid() -> None:
    money = per_gpu(gangs=(GangSpec.parse("gpus=16,at=30m,hours=1"),))
    result = simulate(_step_trace(), _config(("reactive",), money))
    hpa = result.policies["reactive@1"]
    plain = simulate(_step_trace(), _config(("reactive",), per_gpu())).policies["reactive@1"]
    assert hpa.gang_gpus is not None
    held = np.flatnonzero(hpa.gang_gpus)
    # reserved at 30 min, its two 8-GPU nodes start (180 s), then it runs an hour
    assert held.tolist() == list(range(120, 120 + NODE // TICK + HOUR_TICKS))
    assert hpa.gpu_hours == pytest.approx(plain.gpu_hours + 16 * (NODE + 3600) / 3600)
    assert hpa.cost_usd == pytest.approx(PRICE * hpa.gpu_hours)
    assert hpa.gang_wait_hours == 0.0


# -- never split, never over -------------------------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(
    levels=st.lists(st.integers(0, 12), min_size=6, max_size=24),
    ceiling_gpus=st.integers(1, 30),
    gangs=st.lists(
        st.tuples(st.integers(1, 20), st.integers(0, 5), st.integers(1, 3), st.integers(0, 4), st.integers(0, 1000)),
        max_size=3,
    ),
    gpus_per_node=st.integers(1, 8),
    inference=st.sampled_from(["production", "batch"]),
)
def test_gangs_are_never_split_and_the_ceiling_holds_whenever_the_minimum_fits(
    levels: list[int], ceiling_gpus: int, gangs: list[tuple[int, int, int, int, int]], gpus_per_node: int,
    inference: str,
) -> None:
    # each level holds for 15 minutes; gangs: (gpus, at 15-min steps, 15-min steps of run, window steps, priority)
    values = np.repeat(np.asarray(levels, dtype=np.float64), 15)
    specs = tuple(GangSpec(gpus=g, at_seconds=at * 900, run_seconds=run * 900, window_seconds=w * 900, priority=p,
                           name=f"g{i}") for i, (g, at, run, w, p) in enumerate(gangs))
    money = per_gpu(ceiling_usd_per_hour=ceiling_gpus * PRICE, gangs=specs,
                        inference_priority=parse_priority(inference, "x"))
    result: SimulationResult = simulate(_series(values), _config(("oracle", "reactive"), money, targets=(0.7,),
                                                                 gpus_per_node=gpus_per_node))
    sizes = [g.gpus for g in specs]
    subset_sums = {sum(s for s, bit in zip(sizes, format(m, f"0{len(sizes)}b"), strict=True) if bit == "1")
                   for m in range(2 ** len(sizes))} if sizes else {0}
    for run in result.policies.values():
        assert run.gangs_split == 0
        assert run.gang_gpus is not None
        assert set(run.gang_gpus.tolist()) <= subset_sums  # whole gangs only
        assert run.requested.min() >= 1
        assert run.ceiling_breaches == int(np.count_nonzero(_held_dollars(run) > ceiling_gpus * PRICE + 1e-9))
        assert run.ceiling_breaches == 0  # the ceiling is at least one GPU: min replicas (1) always fits
        assert 0.0 <= run.ceiling_unserved_fraction <= run.unserved_fraction + 1e-12
        assert run.gangs_missed <= len(specs)


# -- parsing -----------------------------------------------------------------------------------------


def test_gang_spec_parses_the_documented_form() -> None:
    g = GangSpec.parse("gpus=16,at=48h,hours=4,window=24h,priority=batch,name=llama")
    assert (g.gpus, g.at_seconds, g.run_seconds, g.window_seconds, g.priority, g.name) == (
        16, 48 * 3600, 4 * 3600, 24 * 3600, 10, "llama")
    assert GangSpec.parse("gpus=1,at=0,hours=0.5").window_seconds == 0


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("gpus=x,at=1h,hours=1", "gpus"),
        ("gpus=0,at=1h,hours=1", "gpus"),
        ("gpus=8,at=1h", "hours"),
        ("gpus=8,at=soon,hours=1", "at"),
        ("gpus=8,at=1h,hours=-1", "hours"),
        ("gpus=8,at=1h,hours=1,window=later", "window"),
        ("gpus=8,at=1h,hours=1,colour=red", "colour"),
        ("gpus=8,at=1h,hours=1,priority=urgent", "priority"),
        ("gpus=8 at=1h hours=1", "KEY=VALUE"),
        ("gpus=8,gpus=9,at=1h,hours=1", "twice"),
    ],
)
def test_bad_gang_specs_name_the_key(text: str, needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        GangSpec.parse(text)


# -- whole nodes (the controller's rule) ------------------------------------------------------------------------


def _billed_dollars(run: PolicyResult, gpus_per_replica: int, gpus_per_node: int) -> np.ndarray:
    """$/h of whole nodes per tick: the replicas' nodes, plus each gang on nodes of its own (16 GPUs = 2 nodes)."""
    assert run.gang_gpus is not None
    replica_nodes = -(-run.requested * gpus_per_replica // gpus_per_node)
    gang_nodes = -(-run.gang_gpus // gpus_per_node)  # the gangs here are whole nodes each
    return (replica_nodes + gang_nodes) * gpus_per_node * PRICE


def test_whole_nodes_cost_replicas_a_per_gpu_ceiling_would_have_kept() -> None:
    # $30/h buys 10 one-GPU replicas per GPU, but on 8-GPU nodes ($24 each) only one node: 8 replicas.
    cfg = _config(("oracle",), MoneyConfig(ceiling_usd_per_hour=10 * PRICE, whole_nodes=True), gpus_per_node=8)
    oracle = simulate(_series([9.5] * 240), cfg).policies["oracle"]
    assert int(oracle.requested.max()) == 8
    per_gpu_run = simulate(_series([9.5] * 240), _config(("oracle",), per_gpu(ceiling_usd_per_hour=10 * PRICE),
                                                         gpus_per_node=8)).policies["oracle"]
    assert int(per_gpu_run.requested.max()) == 10
    assert oracle.ceiling_breaches == 0
    assert np.all(_billed_dollars(oracle, 1, 8) <= 10 * PRICE)


@settings(max_examples=30, deadline=None)
@given(
    levels=st.lists(st.integers(0, 12), min_size=6, max_size=24),
    ceiling_nodes=st.integers(1, 6),
    gangs=st.lists(st.tuples(st.integers(1, 3), st.integers(0, 5), st.integers(1, 3), st.integers(0, 4)), max_size=2),
    gpus_per_node=st.sampled_from([1, 2, 4, 8]),
)
def test_the_bill_in_whole_nodes_stays_under_the_ceiling_whenever_the_minimum_fits(
    levels: list[int], ceiling_nodes: int, gangs: list[tuple[int, int, int, int]], gpus_per_node: int,
) -> None:
    values = np.repeat(np.asarray(levels, dtype=np.float64), 15)
    specs = tuple(GangSpec(gpus=n * gpus_per_node, at_seconds=at * 900, run_seconds=run * 900, window_seconds=w * 900,
                           name=f"g{i}") for i, (n, at, run, w) in enumerate(gangs))
    ceiling = ceiling_nodes * gpus_per_node * PRICE + PRICE / 2  # half a GPU-hour more than whole nodes: unusable
    money = MoneyConfig(ceiling_usd_per_hour=ceiling, gangs=specs, whole_nodes=True)
    result = simulate(_series(values), _config(("oracle", "reactive"), money, targets=(0.7,),
                                               gpus_per_node=gpus_per_node))
    for run in result.policies.values():
        assert run.gangs_split == 0
        billed = _billed_dollars(run, 1, gpus_per_node)
        assert run.ceiling_breaches == int(np.count_nonzero(billed > ceiling + 1e-9))
        if gpus_per_node * PRICE <= ceiling:  # the minimum (one replica = one node) fits
            assert run.ceiling_breaches == 0, run.name
