"""ColdStartProfile: the prior until enough evidence, then the observed percentile; newest samples kept."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from autoscaler.domain.coldstart import ColdStartProfile


def test_prior_used_until_min_samples() -> None:
    profile = ColdStartProfile(prior_seconds=300.0, min_samples=5)
    for seconds in (60.0, 70.0, 80.0, 90.0):
        profile = profile.observe(seconds)
        # Fast samples below min_samples do not lower the prior.
        assert profile.pod_lead_seconds() == 300.0
    profile = profile.observe(100.0)
    # Now 5 samples: the empirical p90 ("higher" method: an observed value), not the prior.
    assert profile.pod_lead_seconds() == 100.0


def test_slow_sample_raises_lead_before_min_samples() -> None:
    profile = ColdStartProfile(prior_seconds=120.0, min_samples=5).observe(400.0)
    assert profile.pod_lead_seconds() == 400.0


def test_percentile_of_samples() -> None:
    samples = tuple(float(s) for s in range(1, 101))  # 1..100 s
    profile = ColdStartProfile(prior_seconds=1000.0, samples=samples, percentile=90.0, max_samples=100)
    assert profile.pod_lead_seconds() == pytest.approx(np.percentile(samples, 90, method="higher"))
    assert 90.0 <= profile.pod_lead_seconds() <= 91.0
    median = ColdStartProfile(prior_seconds=1000.0, samples=samples, percentile=50.0, max_samples=100)
    assert median.pod_lead_seconds() < profile.pod_lead_seconds()


def test_newest_max_samples_kept() -> None:
    profile = ColdStartProfile(prior_seconds=10.0, min_samples=2, max_samples=3)
    for seconds in (500.0, 500.0, 20.0, 30.0, 40.0):
        profile = profile.observe(seconds)
    assert profile.samples == (20.0, 30.0, 40.0)
    # The old slow start-ups have aged out of the estimate.
    assert profile.pod_lead_seconds() == 40.0
    # Also applied to samples given at construction.
    assert ColdStartProfile(10.0, samples=(1.0, 2.0, 3.0, 4.0), min_samples=1, max_samples=2).samples == (3.0, 4.0)


def test_node_lead_added_only_when_a_node_is_needed() -> None:
    profile = ColdStartProfile(prior_seconds=120.0, node_prior_seconds=240.0)
    assert profile.lead_seconds(needs_node=False) == 120.0
    assert profile.lead_seconds(needs_node=True) == 360.0
    observed = profile
    for seconds in (100.0, 110.0, 120.0, 130.0, 600.0):
        observed = observed.observe_node(seconds)
    assert observed.node_lead_seconds() == 600.0
    assert observed.pod_lead_seconds() == 120.0  # node samples do not touch the pod estimate
    assert observed.lead_seconds(needs_node=True) == 720.0


def test_observe_returns_new_value() -> None:
    profile = ColdStartProfile(prior_seconds=60.0)
    assert profile.observe(10.0) is not profile
    assert profile.samples == ()


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"prior_seconds": -1.0}, "prior_seconds"),
        ({"prior_seconds": float("nan")}, "prior_seconds"),
        ({"prior_seconds": 1.0, "node_prior_seconds": float("inf")}, "node_prior_seconds"),
        ({"prior_seconds": 1.0, "percentile": 0.0}, "percentile"),
        ({"prior_seconds": 1.0, "percentile": 101.0}, "percentile"),
        ({"prior_seconds": 1.0, "min_samples": 0}, "min_samples"),
        ({"prior_seconds": 1.0, "min_samples": 10, "max_samples": 5}, "max_samples"),
        ({"prior_seconds": 1.0, "samples": (1.0, -2.0)}, "samples"),
    ],
)
def test_invalid_profile_names_the_field(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        ColdStartProfile(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [-1.0, float("nan"), float("inf")])
def test_observe_rejects_bad_durations(bad: float) -> None:
    with pytest.raises(ValueError, match="observed pod start-up"):
        ColdStartProfile(prior_seconds=1.0).observe(bad)
    with pytest.raises(ValueError, match="observed node start-up"):
        ColdStartProfile(prior_seconds=1.0).observe_node(bad)


@given(
    prior=st.floats(0, 3600),
    samples=st.lists(st.floats(0, 3600), max_size=80),
    min_samples=st.integers(1, 10),
)
def test_lead_is_within_what_is_known(prior: float, samples: list[float], min_samples: int) -> None:
    profile = ColdStartProfile(prior_seconds=prior, min_samples=min_samples, max_samples=50)
    for s in samples:
        profile = profile.observe(s)
    kept = samples[-50:]
    lead = profile.pod_lead_seconds()
    if len(kept) < min_samples:
        assert lead == max([prior, *kept])
    else:
        assert min(kept) <= lead <= max(kept)
        assert lead in kept


@given(
    samples=st.lists(st.floats(0, 3600), min_size=1, max_size=50),
    percentile=st.floats(0.01, 100.0) | st.sampled_from([50.0, 90.0, 95.0, 99.0, 100.0]),
)
def test_percentile_matches_numpy_higher_rule(samples: list[float], percentile: float) -> None:
    profile = ColdStartProfile(prior_seconds=0.0, samples=tuple(samples), percentile=percentile, min_samples=1)
    assert profile.pod_lead_seconds() == np.percentile(samples, percentile, method="higher")


def test_profiles_with_equal_fields_are_equal_after_use() -> None:
    a = ColdStartProfile(prior_seconds=10.0, samples=(1.0, 2.0))
    b = ColdStartProfile(prior_seconds=10.0, samples=(1.0, 2.0))
    a.lead_seconds(needs_node=True)  # caches the estimate on ``a`` only
    assert a == b
    assert hash(a) == hash(b)


def test_round_trips_through_json() -> None:
    profile = ColdStartProfile(prior_seconds=120.0, node_prior_seconds=300.0, min_samples=2).observe(90.0)
    profile = profile.observe(150.0).observe_node(200.0)
    restored = ColdStartProfile.from_dict(json.loads(json.dumps(profile.to_dict(), allow_nan=False)))
    assert restored == profile
    assert restored.lead_seconds(needs_node=True) == profile.lead_seconds(needs_node=True)


@pytest.mark.parametrize(
    ("data", "match"),
    [
        ({"prior_seconds": 1.0, "prior": 2.0}, "unknown key"),
        ({"node_prior_seconds": 1.0}, "prior_seconds"),
        ({"prior_seconds": 1.0, "samples": ["x"]}, "samples entry"),
    ],
)
def test_from_dict_rejects_bad_input(data: dict[str, object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        ColdStartProfile.from_dict(data)
