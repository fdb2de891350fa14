"""The engine's decision on one tick's observation: pods waiting for a node, an unknown capacity, the headroom ahead.

Why: this is the step both the controller and the simulator call, so its rules are pinned here once: a pod
waiting for the node Karpenter is provisioning for it is the normal path of a scale-up, a pod no node came for
(longer than a node start-up) is a shortage that holds further scale-ups.
"""

from __future__ import annotations

import numpy as np

from autoscaler.domain.coldstart import ColdStartProfile
from autoscaler.domain.types import ScalingPolicy
from autoscaler.engine.deciding import Observed, decide
from models.types import Forecast
from tests.domain.builders import forecast

NOW = 1_000_000_020  # inside the forecast's first bin
COLD = ColdStartProfile(prior_seconds=120.0, node_prior_seconds=240.0)
POLICY = ScalingPolicy(capacity_per_replica=1.0, min_replicas=1, max_replicas=50, level=90, warm_pool=0)


def rising() -> Forecast:
    """A p90 band that needs 10 replicas from the first bin on, for two hours."""
    return forecast(np.full(120, 10.0), start=1_000_000_000)


def observed(waiting: tuple[float, ...] = (), demand: float | None = 4.0) -> Observed:
    return Observed(replicas=4, ready=4 - len(waiting), demand=demand, gpus_per_replica=1, waiting_for_node=waiting)


def test_a_pod_waiting_for_its_node_less_than_a_node_start_up_does_not_hold_the_scale_up() -> None:
    free = decide(rising(), observed(), POLICY, COLD, NOW, ())
    waiting = decide(rising(), observed(waiting=(200.0,)), POLICY, COLD, NOW, ())
    assert free.decision.desired_replicas == 10
    assert waiting.decision.desired_replicas == 10
    assert waiting.stuck == 0
    assert "gpus_unavailable" not in [s.name for s in waiting.decision.steps]


def test_a_pod_no_node_came_for_holds_the_scale_up_and_the_headroom_ahead() -> None:
    decided = decide(rising(), observed(waiting=(200.0, 300.0)), POLICY, COLD, NOW, ())
    assert decided.stuck == 1
    assert decided.decision.desired_replicas == 4
    assert decided.ahead == 4
    last = decided.decision.steps[-1]
    assert last.name == "gpus_unavailable"
    assert "1 pod(s) Pending unschedulable for longer than a node start-up (240s)" in last.detail
    assert "instead of 10" in last.detail


def test_a_stuck_pod_does_not_stop_a_scale_down() -> None:
    low = forecast(np.full(120, 1.0), start=1_000_000_000)
    decided = decide(low, Observed(replicas=8, ready=7, demand=1.0, gpus_per_replica=1, waiting_for_node=(900.0,)),
                     POLICY, COLD, NOW, ((NOW - 400, 1),))
    assert decided.stuck == 1
    assert decided.decision.desired_replicas < 8
    assert "gpus_unavailable" not in [s.name for s in decided.decision.steps]


def test_an_unknown_capacity_holds_the_replicas_within_bounds_and_asks_for_nothing_ahead() -> None:
    policy = ScalingPolicy(capacity_per_replica=1.0, min_replicas=6, max_replicas=50, level=90, warm_pool=0)
    decided = decide(rising(), observed(), policy, COLD, NOW, (), capacity_unknown="2 of 6 saturated hours")
    assert decided.decision.desired_replicas == 6  # held at 4, clamped up to min 6: never sized on a guess
    assert [s.name for s in decided.decision.steps] == ["capacity_unknown", "min_max_clamp"]
    assert decided.decision.missing_metrics == ("capacity not learned yet: 2 of 6 saturated hours",)
    assert decided.ahead == 6


def test_the_headroom_ahead_looks_one_node_start_up_past_the_plan() -> None:
    band = np.full(120, 3.0)
    band[13:] = 12.0  # 13 minutes out: past the plan (6 min lead + 5 min look-ahead), within one more node start-up
    decided = decide(forecast(band, start=1_000_000_000), observed(), POLICY, COLD, NOW, ())
    assert decided.decision.desired_replicas < 12
    assert decided.ahead == 12
