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


def test_a_step_explained_when_read_is_the_step_explained_at_once() -> None:
    # The planner writes a step's text only when something reads it (a self-tuning replay never does): it must then
    # be the text, and compare, hash and pickle as the step written at once would.
    import pickle

    rendered: list[tuple[int, int]] = []

    def render(a: int, b: int) -> str:
        rendered.append((a, b))
        return f"{a} + {b} -> {a + b}"

    lazy = Step.lazy("forecast", 3, render, 1, 2)
    assert rendered == []  # nothing written yet
    eager = Step("forecast", 3, "1 + 2 -> 3")
    assert lazy == eager
    assert hash(lazy) == hash(eager)
    assert lazy != Step("forecast", 3, "1 + 2 -> 4")
    assert lazy != Step("forecast", 4, "1 + 2 -> 3")
    assert lazy.detail == "1 + 2 -> 3"
    assert lazy.to_dict() == eager.to_dict()
    assert rendered == [(1, 2)]  # written once, then kept
    assert pickle.loads(pickle.dumps(Step.lazy("forecast", 3, render, 1, 2))) == eager
    assert repr(lazy) == repr(eager)


def test_a_planned_decision_reads_the_same_every_time_and_as_json() -> None:
    policy = ScalingPolicy(capacity_per_replica=10.0, min_replicas=1, max_replicas=50)
    state = WorkloadState(current_replicas=4, ready_replicas=4, current_demand=25.0, recommendations=((950, 6),))
    decision = plan_replicas(forecast([30.0, 60.0, 90.0, 40.0] * 10, start=0, step=60), state, policy,
                             ColdStartProfile(prior_seconds=120.0), now=1000)
    first = [s.detail for s in decision.steps]
    assert all(first)
    assert [s.detail for s in decision.steps] == first
    assert json.loads(json.dumps(decision.to_dict()))["steps"] == [
        {"name": s.name, "replicas": s.replicas, "detail": d} for s, d in zip(decision.steps, first, strict=True)]


def test_values_filled_at_once_are_still_frozen_dataclasses() -> None:
    # ``quick_init``: the same signature and defaults, __post_init__ still checks, the instance stays frozen
    import dataclasses

    from autoscaler.domain.values import quick_init

    @quick_init
    @dataclasses.dataclass(frozen=True)
    class Point:
        x: int
        y: int = 2

        def __post_init__(self) -> None:
            if self.x < 0:
                raise ValueError("x must be >= 0")

    p = Point(1)
    assert (p.x, p.y) == (1, 2)
    assert p == Point(x=1, y=2)
    assert dataclasses.replace(p, y=5) == Point(1, 5)
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.x = 3  # type: ignore[misc]
    with pytest.raises(ValueError, match="x must be"):
        Point(-1)
    with pytest.raises(TypeError):
        quick_init(dataclasses.make_dataclass("Slotted", [("a", int)], frozen=True, slots=True))
