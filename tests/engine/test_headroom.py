"""The forecast-sized node headroom (autoscaler.engine.headroom): pooled error, whole nodes, limit and ceiling."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from autoscaler.engine.headroom import (
    DEFAULT_QUANTILE,
    MAX_MARGIN,
    MAX_QUANTILE,
    PooledResiduals,
    PoolForecast,
    objective_quantile,
    pool_headroom,
    pooled_error_gpus,
    upper_quantile,
)


def test_pooled_error_of_independent_deployments_is_smaller_than_the_sum_of_their_own() -> None:
    rng = np.random.default_rng(7)
    errors = rng.normal(0.0, 4.0, size=(5000, 6))  # six Deployments, independent errors of 4 GPUs
    own = sum(upper_quantile(errors[:, i].tolist(), 0.95) for i in range(6))
    pooled, source = pooled_error_gpus(errors.sum(axis=1).tolist(), (), 0.95, min_residuals=100)
    assert source == "residuals"
    assert pooled < 0.6 * own  # sqrt(6)/6 ~ 0.41 of the sum for independent errors


def test_the_prior_pools_band_variances_before_there_are_residuals() -> None:
    sigmas = (3.0, 4.0)
    pooled, source = pooled_error_gpus([1.0] * 5, sigmas, 0.95, min_residuals=10)
    assert source == "prior"
    each = [pooled_error_gpus([], (s,), 0.95)[0] for s in sigmas]
    assert pooled < sum(each)
    assert math.isclose(pooled, math.hypot(*each))


def test_perfectly_correlated_residuals_pool_to_the_sum() -> None:
    base = np.random.default_rng(1).normal(0.0, 2.0, size=2000)
    own = 3 * upper_quantile(base.tolist(), 0.9)
    pooled, _ = pooled_error_gpus((3 * base).tolist(), (), 0.9, min_residuals=10)
    assert math.isclose(pooled, own, rel_tol=1e-9)


@given(
    median=st.floats(0, 200), error_sigma=st.floats(0, 30), held=st.integers(0, 300), gpn=st.integers(1, 16),
    partial=st.integers(0, 15), busy=st.integers(0, 40), limit=st.none() | st.integers(0, 60),
    slack=st.none() | st.floats(-50, 500), price=st.floats(1, 100),
)
def test_headroom_is_whole_nodes_inside_the_limit_and_the_ceiling(
    median: float, error_sigma: float, held: int, gpn: int, partial: int, busy: int, limit: int | None,
    slack: float | None, price: float,
) -> None:
    d = pool_headroom(PoolForecast("p", gpn, median, band_sigmas=(error_sigma,), held_gpus=held,
                                   current_gpus=median / 2,
                                   partial_free_gpus=partial, busy_nodes=busy, max_nodes=limit,
                                   node_usd_per_hour=price, ceiling_slack_usd_per_hour=slack))
    assert isinstance(d.idle_nodes, int)
    assert 0 <= d.idle_nodes <= d.wanted_nodes
    if limit is not None:
        assert busy + d.idle_nodes <= max(limit, busy)
    if slack is not None:
        assert d.idle_nodes * price <= max(0.0, slack) + 1e-6
    if d.capped_by is None:  # uncapped: the idle nodes cover the buffer, and one node fewer would not
        assert d.idle_nodes * gpn + partial >= d.buffer_gpus - 1e-6
        assert d.idle_nodes == 0 or (d.idle_nodes - 1) * gpn + partial < d.buffer_gpus


def test_a_fall_forecast_beyond_its_error_leaves_no_buffer() -> None:
    d = pool_headroom(PoolForecast("p", 8, median_gpus=30, band_sigmas=(2.0,), held_gpus=60, current_gpus=40))
    assert (d.idle_nodes, d.buffer_gpus) == (0, 0.0)


def test_a_rise_asks_whole_nodes_for_what_the_pods_will_ask_with_their_margin() -> None:
    d = pool_headroom(PoolForecast("p", 8, median_gpus=45, residuals=(0.0,) * 99 + (6.0,), held_gpus=60,
                                   current_gpus=40, min_residuals=50, quantile=0.5))
    assert d.source == "residuals"
    assert d.buffer_gpus == 7.5  # a rise of 5 GPUs of need, held at 1.5x need
    assert d.idle_nodes == 1
    wider = pool_headroom(replace(d_input := PoolForecast("p", 8, median_gpus=45, held_gpus=60, current_gpus=40,
                                                         residuals=(6.0,) * 100, min_residuals=50, quantile=0.5),
                                  gpus_per_node=4))
    assert wider.idle_nodes == math.ceil((45 + 6 - 40) * 1.5 / 4)
    assert d_input.partial_free_gpus == 0
    partly = pool_headroom(replace(d_input, partial_free_gpus=16))
    assert partly.idle_nodes == 1  # 16.5 GPUs of buffer, 16 of them free on busy nodes: one node more


def test_residuals_meet_the_actual_need_when_they_are_due() -> None:
    r = PooledResiduals()
    r.forecast(100.0, 10.0)
    r.forecast(130.0, 12.0)
    r.observe(99.0, 50.0)
    assert r.snapshot() == ()
    r.observe(100.0, 11.0)
    assert r.snapshot() == (1.0,)
    r.observe(200.0, 9.0)
    assert r.snapshot() == (-3.0, 1.0)  # sorted


def test_a_need_near_zero_does_not_inflate_the_buffer() -> None:
    d = pool_headroom(PoolForecast("p", 8, median_gpus=2.0, residuals=(0.0,) * 100, held_gpus=80, current_gpus=0.0,
                                   min_residuals=50, quantile=0.5))
    assert d.buffer_gpus == 2.0 * MAX_MARGIN
    assert d.idle_nodes == 1


def test_a_pools_headroom_covers_the_strictest_objective_of_its_deployments() -> None:
    assert objective_quantile([0.95, 0.99, 0.9]) == 0.99
    assert objective_quantile([0.9]) == 0.9
    assert objective_quantile([0.999]) == MAX_QUANTILE  # beyond it the quantile of a day's residuals is a burst
    assert objective_quantile([]) == DEFAULT_QUANTILE  # none stated
    # the decision says which quantile it covered
    f = PoolForecast("l4", 1, 2.0, (0.5,), (), 2, quantile=objective_quantile([0.99]))
    assert pool_headroom(f).detail.startswith("NodePool l4: pooled p99 error ")
