"""What choosing an HPA target per Deployment alone could cut (``benchmarks/fleet_simulate.py``'s
``allocation_bound``): the mix search and its reading of real HPA runs of a small fleet."""

from __future__ import annotations

import itertools
import random

import pytest

from autoscaler.commands.simulate_fleet import hpa_builder
from autoscaler.simulation.fleet import DeploymentSpec, FleetConfig, PoolSpec, run_fleet
from autoscaler.synth import synth_trace
from benchmarks.fleet_simulate import allocation_bound, allocation_text, best_mix, uniform_miss_share_at


def test_the_mix_spends_where_misses_are_cheap_to_cut() -> None:
    # A misses 5 at 10 and none at 20; B misses 1 at 10 and none at 20: with 30 to spend, A gets the dearer option
    options = [[(10.0, 5.0), (20.0, 0.0)], [(10.0, 1.0), (20.0, 0.0)]]
    assert best_mix(options, 30.0) == pytest.approx((30.0, 1.0))
    assert best_mix(options, 40.0) == pytest.approx((40.0, 0.0))
    assert best_mix(options, 20.0) == pytest.approx((20.0, 6.0))
    assert best_mix(options, 19.0) is None  # the cheapest choice costs more
    assert best_mix([], 10.0) is None


def test_the_mix_is_the_best_choice_within_the_budget() -> None:
    rng = random.Random(7)
    for _ in range(40):
        options = [[(rng.uniform(1, 10), rng.uniform(0, 5)) for _ in range(3)] for _ in range(4)]
        budget = rng.uniform(10, 35)
        feasible = [(sum(g for g, _ in c), sum(m for _, m in c)) for c in itertools.product(*options)
                    if sum(g for g, _ in c) <= budget]
        got = best_mix(options, budget)
        if not feasible:
            assert got is None
            continue
        assert got is not None
        assert got[0] <= budget + 1e-9
        fewest = min(m for _, m in feasible)
        assert got[1] == pytest.approx(fewest)
        assert got[0] == pytest.approx(min(g for g, m in feasible if m <= fewest + 1e-9))


def test_real_hpa_runs_one_target_fleet_wide_is_one_of_the_mixes() -> None:
    deps = tuple(DeploymentSpec(f"d{i}", synth_trace(days=0.25, seed=i + 1, shape=shape, tokens=False).requests, "p",
                                capacity_per_replica=0.5, max_replicas=60)
                 for i, shape in enumerate(("bursty", "flat", "diurnal")))
    config = FleetConfig(deps, (PoolSpec("p", 8, 10.0),))
    hpa = [run_fleet(config, hpa_builder(t), f"reactive@{t:g}") for t in (0.5, 0.7, 0.9)]
    for run in hpa:
        work = sum(d.work_hours for d in run.deployments)
        own = sum(d.work_hours * (1 - d.result.slo_attainment) for d in run.deployments)
        assert uniform_miss_share_at(hpa, run.gpu_hours) == pytest.approx(own / work)
        bound = allocation_bound(hpa, run.gpu_hours)
        assert bound is not None
        assert bound[0] <= run.gpu_hours + 1e-9
        assert bound[1] <= own + 1e-9  # the same target for every Deployment is one of the choices
    cheapest = min(hpa, key=lambda r: r.gpu_hours)
    assert allocation_bound(hpa, 0.5 * cheapest.gpu_hours) is None
    assert allocation_bound([], cheapest.gpu_hours) is None
    text = allocation_text(hpa[1], hpa)
    assert text is not None
    assert text.startswith("reactive@0.7: at its ")
    assert "for one HPA target fleet-wide (0% cut); the HPA targets chosen per Deployment with hindsight" in text
