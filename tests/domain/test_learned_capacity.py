"""The capacity estimator (``autoscaler.domain.learned_capacity``) on synthetic vLLM histories of known capacity.

The histories come from a queueing model (``tests/synthetic_vllm.py``): with overload spells the estimate is within
10% of the true capacity; without saturation, or with saturation too rare or too confined to trust, it says "not
enough evidence" and why, and never turns the unsaturated (lower-bound) rates into an estimate.
"""

from __future__ import annotations

import numpy as np
import pytest

from autoscaler.domain.learned_capacity import CapacityInputs, EvidenceRules, estimate_capacity
from tests.synthetic_vllm import DeploymentHistory, deployment_history

TWO_DAYS = 2 * 1440


def inputs_of(history: DeploymentHistory, *, signals: tuple[str, ...] = ("waiting", "kv_cache", "ttft")
              ) -> CapacityInputs:
    completed = history.completed_rate()
    n = len(completed)
    nan = np.full(n, np.nan)
    return CapacityInputs(
        start=0, step_seconds=60, completed=completed, replicas=np.full(n, float(len(history.pods))),
        waiting=history.waiting() if "waiting" in signals else nan,
        kv_cache=history.kv_cache() if "kv_cache" in signals else nan,
        ttft=history.ttft_p90() if "ttft" in signals else nan,
    )


@pytest.mark.parametrize(("capacity", "replicas", "seed"), [(0.5, 1, 1), (3.0, 2, 2), (12.0, 3, 3), (40.0, 4, 4)])
def test_saturation_spells_give_the_true_capacity_within_ten_percent(capacity: float, replicas: int,
                                                                      seed: int) -> None:
    history = deployment_history(TWO_DAYS, capacity=capacity, replicas=replicas, peak_load=0.7, bursts=6, seed=seed)
    got = estimate_capacity(inputs_of(history))
    assert got.enough, got.reason
    assert got.estimate is not None
    assert abs(got.estimate - capacity) / capacity < 0.10, (got.estimate, capacity)
    assert got.episodes >= 6
    assert got.saturated_bins >= 6 * 30
    assert got.lower_bound is not None
    assert got.lower_bound < capacity  # what replicas served unsaturated is below what they can
    assert 0 < got.confidence <= 1
    assert got.reason.startswith(f"{got.estimate:.3g} req/s per replica from ")


@pytest.mark.parametrize("signal", ["waiting", "kv_cache", "ttft"])
def test_each_saturation_signal_alone_is_enough(signal: str) -> None:
    history = deployment_history(TWO_DAYS, capacity=4.0, replicas=2, peak_load=0.7, bursts=5, seed=7)
    got = estimate_capacity(inputs_of(history, signals=(signal,)), EvidenceRules(slo_wait_seconds=2.0))
    assert got.estimate is not None, got.reason
    assert abs(got.estimate - 4.0) / 4.0 < 0.10
    assert dict(got.signals)[signal] == got.saturated_bins
    assert all(n == 0 for name, n in got.signals if name != signal)


def test_no_saturation_is_not_enough_evidence_and_the_lower_bound_is_never_the_estimate() -> None:
    history = deployment_history(TWO_DAYS, capacity=5.0, replicas=2, peak_load=0.6, bursts=0, seed=11)
    got = estimate_capacity(inputs_of(history))
    assert got.estimate is None
    assert not got.enough
    assert got.reason.startswith("not enough evidence")
    assert "never saturated" in got.reason
    assert got.saturated_bins == 0
    assert got.confidence == 0
    assert got.lower_bound is not None
    assert got.lower_bound < 5.0 * 0.7  # at most the peak it was offered: a lower bound, far from the truth
    assert f"{got.lower_bound:.3g} req/s each (a lower bound)" in got.reason


def test_rates_without_any_saturation_signal_prove_nothing() -> None:
    history = deployment_history(TWO_DAYS, capacity=5.0, replicas=2, peak_load=0.7, bursts=6, seed=12)
    got = estimate_capacity(inputs_of(history, signals=()))  # completions and replicas, but no signal series
    assert got.estimate is None
    assert got.lower_bound is None  # not even a lower bound is claimed: nothing says whether they were saturated
    assert got.reason.startswith("not enough evidence")


def test_one_overload_is_not_enough_evidence_however_long() -> None:
    history = deployment_history(TWO_DAYS, capacity=3.0, replicas=2, peak_load=0.6, bursts=1, seed=13)
    got = estimate_capacity(inputs_of(history))
    assert got.estimate is None
    assert got.candidate is not None
    assert abs(got.candidate - 3.0) / 3.0 < 0.10  # shown to people, never used
    assert got.episodes == 1
    assert "1 saturation episode(s), 3 needed" in got.reason


def test_too_few_saturated_bins_is_not_enough_evidence() -> None:
    history = deployment_history(TWO_DAYS, capacity=3.0, replicas=1, peak_load=0.6, bursts=4, seed=14)
    rules = EvidenceRules(min_saturated_bins=1000)
    got = estimate_capacity(inputs_of(history), rules)
    assert got.estimate is None
    assert "saturated, 16.7 h needed" in got.reason


def test_unsaturated_bins_serving_more_than_saturated_ones_distrust_the_signals() -> None:
    n = 600
    completed = np.full(n, 10.0)
    waiting = np.zeros(n)
    for start in range(0, n, 100):  # six "saturated" spells at 2 req/s, the rest serves 10 req/s unsaturated
        completed[start : start + 20] = 2.0
        waiting[start : start + 20] = 50.0
    got = estimate_capacity(CapacityInputs(0, 60, completed, np.ones(n), waiting, np.full(n, np.nan),
                                           np.full(n, np.nan)), EvidenceRules(min_saturated_bins=60))
    assert got.estimate is None
    assert "more without saturation" in got.reason


def test_missing_bins_and_replica_changes_are_handled() -> None:
    history = deployment_history(TWO_DAYS, capacity=6.0, replicas=3, peak_load=0.7, bursts=6, seed=15)
    base = inputs_of(history)
    completed = base.completed.copy()
    completed[::7] = np.nan  # scrape gaps
    replicas = base.replicas.copy()
    replicas[:100] = 0  # no pod serving yet: unusable, not infinite capacity
    got = estimate_capacity(CapacityInputs(0, 60, completed, replicas, base.waiting, base.kv_cache, base.ttft))
    assert got.estimate is not None
    assert abs(got.estimate - 6.0) / 6.0 < 0.10
    assert got.usable_bins == int((np.isfinite(completed) & (replicas >= 1)).sum())


def test_no_usable_bin_and_mismatched_arrays() -> None:
    got = estimate_capacity(CapacityInputs.empty(0, 60, 10))
    assert got.estimate is None
    assert got.usable_bins == 0
    assert got.reason.startswith("not enough evidence: no interval")
    with pytest.raises(ValueError, match="waiting has 3 bins, completed has 2"):
        CapacityInputs(0, 60, np.ones(2), np.ones(2), np.ones(3), np.ones(2), np.ones(2))


def test_to_dict_is_json_ready() -> None:
    history = deployment_history(TWO_DAYS, capacity=3.0, replicas=2, peak_load=0.7, bursts=6, seed=2)
    d = estimate_capacity(inputs_of(history)).to_dict()
    assert d["enough_evidence"] is True
    assert set(d["signals"]) == {"waiting", "kv_cache", "ttft"}
    assert isinstance(d["estimate"], float)
    assert isinstance(d["reason"], str)
