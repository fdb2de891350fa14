"""The look-ahead window, the warm pool and the replica arithmetic, checked against hand-computed cases."""

from __future__ import annotations

import math

import numpy as np
import pytest

from autoscaler.domain.capacity import (
    auto_warm_pool,
    forecast_need,
    lead_gap_need,
    replicas_for,
    required_horizon_seconds,
    required_horizon_steps,
    select_window,
)
from autoscaler.domain.coldstart import ColdStartProfile
from autoscaler.domain.types import ScalingPolicy
from tests.domain.builders import forecast, peak_at


@pytest.mark.parametrize(
    ("rate", "capacity", "expected"),
    [
        (0.0, 5.0, 0),
        (-3.0, 5.0, 0),
        (float("nan"), 5.0, 0),
        (0.1, 5.0, 1),
        (5.0, 5.0, 1),
        (5.0000001, 5.0, 2),
        (41.2, 5.0, 9),
        (0.3 * 3, 0.3, 3),  # 0.8999999999999999 / 0.3 noise must not buy a 4th replica
        (10.000000000002, 5.0, 2),
    ],
)
def test_replicas_for(rate: float, capacity: float, expected: int) -> None:
    assert replicas_for(rate, capacity) == expected


def test_window_selects_bins_overlapping_lead_window() -> None:
    fc = forecast(np.arange(20, dtype=float), start=1000, step=60)
    sel = select_window(fc, now=1000, lead_seconds=300, window_seconds=120)
    # window [1300, 1420]: bins starting at 1300, 1360, 1420 overlap; the bin [1240, 1300) does not.
    assert list(sel.indices) == [5, 6, 7]
    assert sel.note == ""


def test_window_bin_under_way_at_window_start_counts() -> None:
    fc = forecast(np.arange(20, dtype=float), start=1000, step=60)
    sel = select_window(fc, now=1000, lead_seconds=330, window_seconds=60)
    # window [1330, 1390]: bin [1300, 1360) is under way at the start, bin [1360, 1420) starts inside.
    assert list(sel.indices) == [5, 6]


def test_forecast_ending_before_the_window_uses_its_last_steps_and_says_so() -> None:
    fc = forecast([1.0, 2.0, 3.0, 4.0, 5.0], start=0, step=60)  # ends at 300
    sel = select_window(fc, now=0, lead_seconds=600, window_seconds=120)
    assert list(sel.indices) == [2, 3, 4]  # 120 s spans 3 bins
    assert "before the window" in sel.note
    assert "longer horizon" in sel.note


def test_forecast_covering_part_of_the_window_says_so() -> None:
    fc = forecast([1.0] * 6, start=0, step=60)  # ends at 360
    sel = select_window(fc, now=0, lead_seconds=300, window_seconds=300)
    assert list(sel.indices) == [5]
    assert "short of the window end" in sel.note


def test_forecast_starting_after_the_window_uses_its_first_steps() -> None:
    fc = forecast([7.0, 1.0, 1.0, 1.0], start=10_000, step=60)
    sel = select_window(fc, now=0, lead_seconds=60, window_seconds=60)
    assert list(sel.indices) == [0, 1]
    assert "after the window" in sel.note


def test_empty_forecast_is_rejected() -> None:
    with pytest.raises(ValueError, match="no steps"):
        select_window(forecast([]), now=0, lead_seconds=0, window_seconds=60)


def test_forecast_need_detail_has_the_numbers() -> None:
    policy = ScalingPolicy(capacity_per_replica=5.0, lookahead_window_seconds=300)
    need = forecast_need(peak_at(360, 41.2, base=1.0), policy, now=0, lead_seconds=300)
    assert need.demand == pytest.approx(41.2)
    assert need.replicas == 9
    assert need.detail == "p90 demand 41.2 req/s over [t+300s, t+600s] / 5 req/s per replica -> 9"


def test_lead_gap_sees_only_demand_before_the_lead() -> None:
    policy = ScalingPolicy(capacity_per_replica=1.0)
    early = peak_at(120, 8.0, base=1.0)
    assert lead_gap_need(early, policy, now=0, lead_seconds=300).replicas == 8
    late = peak_at(420, 8.0, base=1.0)
    assert lead_gap_need(late, policy, now=0, lead_seconds=300).replicas == 1


def test_auto_warm_pool_covers_the_p99_tail() -> None:
    policy = ScalingPolicy(capacity_per_replica=5.0, warm_pool_level=99)
    fc = forecast([20.0] * 20, mean=[15.0] * 20, p99=[33.0] * 20)
    need = forecast_need(fc, policy, now=0, lead_seconds=60)
    pool = auto_warm_pool(fc, policy, need)
    assert need.replicas == 4
    assert pool.replicas == math.ceil(33.0 / 5.0) - 4 == 3
    assert "p99" in pool.detail


def test_auto_warm_pool_without_a_higher_band_uses_the_spread() -> None:
    policy = ScalingPolicy(capacity_per_replica=5.0)
    fc = forecast([20.0] * 20, mean=[12.0] * 20)
    need = forecast_need(fc, policy, now=0, lead_seconds=60)
    pool = auto_warm_pool(fc, policy, need)
    # tail = 20 + (20 - 12) = 28 -> 6 replicas, need 4 -> 2 spare
    assert pool.replicas == 2
    assert "spread" in pool.detail


def test_auto_warm_pool_is_zero_without_uncertainty() -> None:
    policy = ScalingPolicy(capacity_per_replica=5.0)
    fc = forecast([20.0] * 20)  # mean == p90, no higher band
    need = forecast_need(fc, policy, now=0, lead_seconds=60)
    assert auto_warm_pool(fc, policy, need).replicas == 0


def test_auto_warm_pool_ignores_bands_above_warm_pool_level() -> None:
    policy = ScalingPolicy(capacity_per_replica=5.0, warm_pool_level=95)
    fc = forecast([20.0] * 20, p99=[100.0] * 20)  # p99 is above the configured p95: not used
    need = forecast_need(fc, policy, now=0, lead_seconds=60)
    assert auto_warm_pool(fc, policy, need).replicas == 0


def test_auto_warm_pool_covering_only_the_replicas_band_is_zero() -> None:
    # warm_pool_level == level: the operator asked for no tail above the band, not for the spread stand-in
    policy = ScalingPolicy(capacity_per_replica=5.0, warm_pool_level=90)
    fc = forecast([20.0] * 20, mean=[12.0] * 20, p99=[40.0] * 20)
    need = forecast_need(fc, policy, now=0, lead_seconds=60)
    pool = auto_warm_pool(fc, policy, need)
    assert pool.replicas == 0
    assert "no tail above the p90 need" in pool.detail
    wider = auto_warm_pool(fc, ScalingPolicy(capacity_per_replica=5.0, warm_pool_level=99), need)
    assert wider.replicas == 8 - 4  # the same forecast with a p99 pool


def test_required_horizon_covers_the_worst_case_window() -> None:
    policy = ScalingPolicy(capacity_per_replica=1.0, lookahead_window_seconds=300)
    cold = ColdStartProfile(prior_seconds=150.5, node_prior_seconds=200.0)
    assert required_horizon_seconds(policy, cold) == 651
    steps = required_horizon_steps(policy, cold, step_seconds=60)
    assert steps == 12
    # A forecast of that many steps starting at now reaches past the window even with a node to wait for.
    fc = forecast([1.0] * steps, start=0, step=60)
    assert select_window(fc, 0, cold.lead_seconds(needs_node=True), 300).note == ""
    with pytest.raises(ValueError, match="step_seconds"):
        required_horizon_steps(policy, cold, step_seconds=0)
