"""Which pods a scale-down marks (``pod-deletion-cost``) and when the marks are cleared: pure, table-driven."""

from __future__ import annotations

import json
from typing import Any

import pytest

from autoscaler.domain.scaledown import (
    DELETION_COST_ANNOTATION,
    MARK_ANNOTATION,
    MARK_TTL_SECONDS,
    UNSCRAPED_GRACE_SECONDS,
    active_pods,
    plan_clear,
    plan_marks,
    read_mark,
)
from autoscaler.ports import PodView

NOW = 1_700_000_000.0
DEP = "llama"
HASH = "7d9f8b6c5d"


def pod(suffix: str, *, ready_for: float | None = 3600.0, age: float = 7200.0, phase: str = "Running",
        terminating: bool = False, owner: str | None = f"{DEP}-{HASH}", template_hash: str | None = HASH,
        annotations: dict[str, str] | None = None) -> PodView:
    return PodView(
        name=f"{DEP}-{HASH}-{suffix}", created=NOW - age,
        ready_since=None if ready_for is None else NOW - ready_for, phase=phase, terminating=terminating,
        owner_replicaset=owner, template_hash=template_hash, annotations=annotations or {},
    )


def name(suffix: str) -> str:
    return f"{DEP}-{HASH}-{suffix}"


def ours(cost: int, at: float = NOW - 60) -> dict[str, str]:
    return {DELETION_COST_ANNOTATION: str(cost), MARK_ANNOTATION: json.dumps({"cost": cost, "markedAt": int(at)})}


def marked(plan: Any) -> list[tuple[str, int]]:
    return [(m.pod, m.cost) for m in plan.marks]


def test_the_n_idlest_ready_pods_get_negative_costs_idlest_lowest_and_the_rest_no_write() -> None:
    pods = [pod("aaaaa"), pod("bbbbb"), pod("ccccc"), pod("ddddd")]
    loads = {name("aaaaa"): 7.0, name("bbbbb"): 0.0, name("ccccc"): 3.0, name("ddddd"): 12.0}
    plan = plan_marks(DEP, pods, 2, loads, NOW)
    assert marked(plan) == [(name("bbbbb"), -2), (name("ccccc"), -1)]
    assert [m.in_flight for m in plan.marks] == [0.0, 3.0]
    assert set(plan.patches) == {name("bbbbb"), name("ccccc")}, "pods that stay are not written"
    patch = plan.patches[name("bbbbb")]
    assert patch[DELETION_COST_ANNOTATION] == "-2"
    assert json.loads(str(patch[MARK_ANNOTATION])) == {"cost": -2, "markedAt": int(NOW)}
    assert plan.note is None
    assert plan.clear == ()
    assert plan.unknown == ()


def test_ties_go_to_the_most_recently_ready_then_by_name() -> None:
    pods = [pod("old01", ready_for=5000), pod("new01", ready_for=900), pod("new02", ready_for=900), pod("busy1")]
    loads = {name("old01"): 1.0, name("new01"): 1.0, name("new02"): 1.0, name("busy1"): 5.0}
    plan = plan_marks(DEP, pods, 3, loads, NOW)
    assert marked(plan) == [(name("new01"), -3), (name("new02"), -2), (name("old01"), -1)]


def test_not_ready_pods_go_first_and_just_started_unscraped_ones_count_as_idle() -> None:
    pods = [
        pod("idle0"),  # Ready long ago, 0 in flight
        pod("start", ready_for=UNSCRAPED_GRACE_SECONDS / 2),  # Ready just now, not scraped yet
        pod("loads", ready_for=None, phase="Pending"),  # not Ready (starting)
        pod("busy1"),
    ]
    loads = {name("idle0"): 0.0, name("busy1"): 9.0}
    plan = plan_marks(DEP, pods, 3, loads, NOW)
    assert marked(plan) == [(name("loads"), -3), (name("start"), -2), (name("idle0"), -1)]
    assert plan.marks[0].why == "not Ready"
    assert "not scraped yet" in plan.marks[1].why
    assert plan.marks[1].in_flight is None


def test_a_ready_pod_without_metrics_for_long_is_unknown_and_never_marked() -> None:
    pods = [pod("nomet"), pod("idle0"), pod("busy1")]
    loads = {name("idle0"): 2.0, name("busy1"): 9.0}
    plan = plan_marks(DEP, pods, 3, loads, NOW)
    assert marked(plan) == [(name("idle0"), -2), (name("busy1"), -1)]
    assert plan.unknown == (name("nomet"),)
    assert plan.note is not None
    assert "2 of 3" in plan.note
    assert "unknown load" in plan.note


def test_n_larger_than_the_pods_marks_every_eligible_pod() -> None:
    pods = [pod("aaaaa"), pod("bbbbb")]
    plan = plan_marks(DEP, pods, 5, {name("aaaaa"): 4.0, name("bbbbb"): 1.0}, NOW)
    assert marked(plan) == [(name("bbbbb"), -2), (name("aaaaa"), -1)]
    assert plan.note is not None
    assert "2 of 5" in plan.note


def test_metrics_down_marks_nothing_says_so_and_clears_old_marks() -> None:
    pods = [pod("aaaaa", annotations=ours(-1)), pod("bbbbb")]
    plan = plan_marks(DEP, pods, 1, None, NOW)
    assert plan.marks == ()
    assert plan.note is not None
    assert "unknown" in plan.note
    assert "no pod marked" in plan.note
    assert plan.patches == {name("aaaaa"): {DELETION_COST_ANNOTATION: None, MARK_ANNOTATION: None}}


def test_only_the_deployments_own_active_pods_are_considered() -> None:
    pods = [
        pod("aaaaa"),
        pod("gone1", terminating=True),
        pod("done1", phase="Succeeded"),
        pod("other", owner="llama-other-5f6g7h8j9k", template_hash="5f6g7h8j9k"),  # Deployment llama-other's
        pod("bare1", owner=None),
        pod("nohsh", template_hash=None),
    ]
    assert [p.name for p in active_pods(DEP, pods)] == [name("aaaaa")]
    loads = {p.name: 0.0 for p in pods}
    assert marked(plan_marks(DEP, pods, 3, loads, NOW)) == [(name("aaaaa"), -1)]


def test_a_deletion_cost_the_controller_did_not_set_wins() -> None:
    pods = [pod("aaaaa", annotations={DELETION_COST_ANNOTATION: "100"}), pod("bbbbb", annotations=ours(-1))]
    plan = plan_marks(DEP, pods, 1, {name("aaaaa"): 0.0, name("bbbbb"): 5.0}, NOW)
    assert plan.marks == ()
    assert plan.note is not None
    assert "did not set" in plan.note
    assert plan.patches == {name("bbbbb"): {DELETION_COST_ANNOTATION: None, MARK_ANNOTATION: None}}


def test_a_retried_scale_down_rewrites_nothing_and_a_new_one_moves_the_marks() -> None:
    pods = [pod("aaaaa", annotations=ours(-1)), pod("bbbbb"), pod("ccccc")]
    same = plan_marks(DEP, pods, 1, {name("aaaaa"): 0.0, name("bbbbb"): 3.0, name("ccccc"): 4.0}, NOW)
    assert marked(same) == [(name("aaaaa"), -1)]
    assert same.patches == {}, "already marked so: no write"
    moved = plan_marks(DEP, pods, 1, {name("aaaaa"): 8.0, name("bbbbb"): 3.0, name("ccccc"): 4.0}, NOW)
    assert marked(moved) == [(name("bbbbb"), -1)]
    assert moved.clear == (name("aaaaa"),)
    assert moved.patches[name("aaaaa")] == {DELETION_COST_ANNOTATION: None, MARK_ANNOTATION: None}


def test_marks_are_cleared_once_the_scale_down_landed() -> None:
    pods = [pod("aaaaa", annotations=ours(-1)), pod("bbbbb"), pod("ccccc", terminating=True, annotations=ours(-2))]
    kept = plan_clear(DEP, [*pods, pod("ddddd")], replicas=2, now=NOW)
    assert kept.patches == {}, "3 active pods > 2 replicas: the ReplicaSet is still removing"
    assert kept.note is not None
    assert "kept" in kept.note
    landed = plan_clear(DEP, pods, replicas=2, now=NOW)
    assert landed.clear == (name("aaaaa"),), "terminating pods are not written"
    assert landed.patches == {name("aaaaa"): {DELETION_COST_ANNOTATION: None, MARK_ANNOTATION: None}}


def test_a_scale_up_or_an_expired_mark_clears_even_before_the_scale_down_landed() -> None:
    pods = [pod("aaaaa", annotations=ours(-1)), pod("bbbbb", annotations=ours(-1, NOW - MARK_TTL_SECONDS)),
            pod("ccccc")]
    assert plan_clear(DEP, pods, replicas=1, now=NOW).clear == (name("bbbbb"),)
    assert plan_clear(DEP, pods, replicas=1, now=NOW, scaling_up=True).clear == (name("aaaaa"), name("bbbbb"))


@pytest.mark.parametrize(("annotations", "patch"), [
    ({DELETION_COST_ANNOTATION: "50", MARK_ANNOTATION: json.dumps({"cost": -1, "markedAt": 1})},
     {MARK_ANNOTATION: None}),  # someone changed the cost since: only our record goes
    ({MARK_ANNOTATION: "not json"}, {MARK_ANNOTATION: None}),
    ({DELETION_COST_ANNOTATION: "7"}, None),  # not ours at all: untouched
])
def test_clearing_never_removes_a_cost_the_controller_did_not_write(annotations: dict[str, str],
                                                                   patch: dict[str, None] | None) -> None:
    plan = plan_clear(DEP, [pod("aaaaa", annotations=annotations)], replicas=1, now=NOW)
    assert plan.patches.get(name("aaaaa")) == patch


def test_read_mark_refuses_malformed_records() -> None:
    assert read_mark(pod("aaaaa", annotations=ours(-3, 123))) == (-3, 123.0)
    for raw in ("[]", '{"cost": "x", "markedAt": 1}', '{"cost": true, "markedAt": 1}', '{"cost": 1}'):
        assert read_mark(pod("aaaaa", annotations={MARK_ANNOTATION: raw})) is None
