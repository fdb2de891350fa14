"""The engine's decision on one tick's observation: pods waiting for a node, an unknown capacity, free GPUs.

Why: this is the step both the controller and the simulator call, so its rules are pinned here once: a pod
waiting for the node Karpenter is provisioning for it is the normal path of a scale-up, a pod no node came for
(longer than a node start-up) is a shortage that holds further scale-ups.
"""

from __future__ import annotations

import numpy as np
import pytest

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


def test_a_pod_no_node_came_for_holds_the_scale_up() -> None:
    decided = decide(rising(), observed(waiting=(200.0, 300.0)), POLICY, COLD, NOW, ())
    assert decided.stuck == 1
    assert decided.decision.desired_replicas == 4
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


def test_an_unknown_capacity_holds_the_replicas_within_bounds() -> None:
    policy = ScalingPolicy(capacity_per_replica=1.0, min_replicas=6, max_replicas=50, level=90, warm_pool=0)
    decided = decide(rising(), observed(), policy, COLD, NOW, (), capacity_unknown="2 of 6 saturated hours")
    assert decided.decision.desired_replicas == 6  # held at 4, clamped up to min 6: never sized on a guess
    assert [s.name for s in decided.decision.steps] == ["capacity_unknown", "min_max_clamp"]
    assert decided.decision.missing_metrics == ("capacity not learned yet: 2 of 6 saturated hours",)


def free(replicas: int = 4, free_gpus: int | None = 8) -> Observed:
    return Observed(replicas=replicas, ready=replicas, demand=4.0, gpus_per_replica=1, free_gpus=free_gpus)


def step_up_at(minutes: int) -> Forecast:
    """A p90 band of 4 replicas that rises to 10 ``minutes`` after the forecast's start, for two hours."""
    band = np.full(120, 4.0)
    band[minutes:] = 10.0
    return forecast(band, start=1_000_000_000)


def test_free_gpus_for_every_new_replica_plan_with_the_pod_lead_alone() -> None:
    # the rise lands 9 minutes out: past the pod lead + look-ahead (2 + 5 min), within the node lead's (6 + 5)
    early = step_up_at(9)
    blind = decide(early, free(free_gpus=None), POLICY, COLD, NOW, ())
    no_room = decide(early, free(free_gpus=0), POLICY, COLD, NOW, ())
    room = decide(early, free(free_gpus=8), POLICY, COLD, NOW, ())
    assert blind.decision.desired_replicas == no_room.decision.desired_replicas == 10  # a node lead ahead
    assert blind.decision.needs_node
    assert blind.decision.lead_seconds == COLD.lead_seconds(True)
    assert room.decision.desired_replicas == 4  # a pod start-up is enough: it asks later
    assert not room.decision.needs_node
    assert room.decision.lead_seconds == COLD.lead_seconds(False)
    assert "8 free GPU(s) >= 1 per replica" in room.decision.steps[0].detail


def test_more_new_replicas_than_free_gpus_keep_the_node_lead() -> None:
    # 6 new replicas wanted a node lead ahead, 5 fit: the sixth waits for a node, so the whole plan keeps that lead
    early = step_up_at(9)
    short = decide(early, free(free_gpus=5), POLICY, COLD, NOW, ())
    assert short.decision.desired_replicas == 10
    assert short.decision.needs_node
    two_gpu = Observed(replicas=4, ready=4, demand=4.0, gpus_per_replica=2, free_gpus=11)  # 5 replicas of 2 fit
    assert decide(early, two_gpu, POLICY, COLD, NOW, ()).decision.needs_node


def test_unread_free_gpus_plan_as_no_free_gpu() -> None:
    # not read (no NodePool named, or the read failed) is the assumption made before nodes were read: a node is needed
    band = np.full(120, 10.0)
    band[4:] = 2.0
    for fc in (step_up_at(9), forecast(band, start=1_000_000_000)):
        history = ((NOW - 4000, 2),)
        blind = decide(fc, free(replicas=6, free_gpus=None), POLICY, COLD, NOW, history)
        assert decide(fc, free(replicas=6, free_gpus=0), POLICY, COLD, NOW, history).decision == blind.decision
        assert blind.decision.needs_node


def test_free_gpus_are_never_negative() -> None:
    with pytest.raises(ValueError, match="free_gpus"):
        Observed(replicas=1, ready=1, demand=1.0, gpus_per_replica=1, free_gpus=-1)


def test_new_replicas_claim_the_free_gpus_they_land_on() -> None:
    # 6 new replicas on 8 free GPUs take 6; on 3 free GPUs they take the 3 (the rest wait for a node); none read, none
    rise = rising()
    assert decide(rise, free(free_gpus=8), POLICY, COLD, NOW, ()).claimed_gpus == 6
    assert decide(rise, free(free_gpus=3), POLICY, COLD, NOW, ()).claimed_gpus == 3
    assert decide(rise, free(free_gpus=None), POLICY, COLD, NOW, ()).claimed_gpus == 0
    two = Observed(replicas=4, ready=4, demand=4.0, gpus_per_replica=2, free_gpus=16)
    assert decide(rise, two, POLICY, COLD, NOW, ()).claimed_gpus == 12
    held = decide(forecast(np.full(120, 4.0), start=1_000_000_000), free(free_gpus=8), POLICY, COLD, NOW, ())
    assert held.decision.desired_replicas == 4
    assert held.claimed_gpus == 0
