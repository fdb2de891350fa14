"""Validation of the planner's value types and the JSON safety of a decision."""

from __future__ import annotations

import json

import pytest

from autoscaler.domain.coldstart import ColdStartProfile
from autoscaler.domain.planner import plan_replicas
from autoscaler.domain.types import ScalingDecision, ScalingPolicy, Step, WorkloadState
from tests.domain.builders import forecast


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"capacity_per_replica": 0.0}, "capacity_per_replica"),
        ({"capacity_per_replica": -3.0}, "capacity_per_replica"),
        ({"capacity_per_replica": float("nan")}, "capacity_per_replica"),
        ({"capacity_per_replica": 1.0, "min_replicas": 5, "max_replicas": 4}, "min_replicas"),
        ({"capacity_per_replica": 1.0, "min_replicas": -1}, "min_replicas"),
        ({"capacity_per_replica": 1.0, "max_replicas": 0}, "max_replicas"),
        ({"capacity_per_replica": 1.0, "level": 100}, "level"),
        ({"capacity_per_replica": 1.0, "level": 0}, "level"),
        ({"capacity_per_replica": 1.0, "warm_pool": -1}, "warm_pool"),
        ({"capacity_per_replica": 1.0, "warm_pool_as": "pods"}, "warm_pool_as"),
        ({"capacity_per_replica": 1.0, "lookahead_window_seconds": -5}, "lookahead_window_seconds"),
        ({"capacity_per_replica": 1.0, "scale_down_stabilization_seconds": -1}, "scale_down_stabilization_seconds"),
        ({"capacity_per_replica": 1.0, "max_scale_up_step": 0}, "max_scale_up_step"),
        ({"capacity_per_replica": 1.0, "max_scale_down_fraction": 0.0}, "max_scale_down_fraction"),
        ({"capacity_per_replica": 1.0, "max_scale_down_fraction": 1.5}, "max_scale_down_fraction"),
        ({"capacity_per_replica": 1.0, "level": 95, "warm_pool_level": 90}, "warm_pool_level"),
    ],
)
def test_policy_validation_names_the_field(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(ValueError, match=f"ScalingPolicy.{field}"):
        ScalingPolicy(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"current_replicas": -1, "ready_replicas": 0, "current_demand": 1.0}, "current_replicas"),
        ({"current_replicas": 1, "ready_replicas": -1, "current_demand": 1.0}, "ready_replicas"),
        ({"current_replicas": 1, "ready_replicas": 1, "current_demand": -0.5}, "current_demand"),
        ({"current_replicas": 1, "ready_replicas": 1, "current_demand": "5"}, "current_demand"),
        ({"current_replicas": 1, "ready_replicas": 1, "current_demand": 1.0, "free_gpus": -2}, "free_gpus"),
        (
            {"current_replicas": 1, "ready_replicas": 1, "current_demand": 1.0, "gpus_per_replica": -1},
            "gpus_per_replica",
        ),
        (
            {"current_replicas": 1, "ready_replicas": 1, "current_demand": 1.0, "recommendations": ((0, -1),)},
            "recommendations",
        ),
    ],
)
def test_state_validation_names_the_field(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(ValueError, match=f"WorkloadState.{field}"):
        WorkloadState(**kwargs)  # type: ignore[arg-type]


def test_nan_demand_is_missing_not_an_error() -> None:
    assert not WorkloadState(1, 1, float("nan")).demand_known
    assert not WorkloadState(1, 1, None).demand_known
    assert WorkloadState(1, 1, 0.0).demand_known


def test_to_dict_is_json_safe_and_complete() -> None:
    decision = plan_replicas(
        forecast([10.0] * 30, p99=[14.0] * 30, mean=[8.0] * 30),
        WorkloadState(current_replicas=2, ready_replicas=2, current_demand=9.0, free_gpus=4),
        ScalingPolicy(capacity_per_replica=3.0),
        ColdStartProfile(prior_seconds=90.0),
        now=0,
    )
    data = decision.to_dict()
    text = json.dumps(data, allow_nan=False)
    assert json.loads(text) == data
    assert data["desired_replicas"] == decision.desired_replicas
    assert [s["name"] for s in data["steps"]] == [s.name for s in decision.steps]
    assert data["recommendations"] == [[0, decision.raw_replicas]]


def test_to_dict_maps_non_finite_floats_to_null() -> None:
    decision = ScalingDecision(
        desired_replicas=1,
        forecast_demand=float("nan"),
        lead_seconds=float("inf"),
        warm_pool_replicas=0,
        warm_pool_as="nodes",
        reactive_replicas=0,
        steps=(Step("forecast", 1, "x"),),
        recommendations=(),
        now=5,
    )
    data = decision.to_dict()
    json.dumps(data, allow_nan=False)
    assert data["forecast_demand"] is None
    assert data["lead_seconds"] is None
