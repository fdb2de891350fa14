"""Which pods a scale-down marks (``pod-deletion-cost``), when a rollout holds it, whether the marks are in place
before the scale, and when the marks are cleared: pure, table-driven."""

from __future__ import annotations

import json
from typing import Any

import pytest

from autoscaler.domain.scaledown import (
    DELETION_COST_ANNOTATION,
    FOREIGN_COST,
    MARK_ANNOTATION,
    MARK_CONFIRM_SECONDS,
    MARK_LABEL,
    MARK_TTL_SECONDS,
    NO_POD_LOADS,
    ROLLOUT,
    ROLLOUT_HOLD_MAX_SECONDS,
    UNMARKED_REASONS,
    UNSCRAPED_GRACE_SECONDS,
    UNSCRAPED_PODS,
    active_pods,
    check_marks,
    deployment_of,
    guard_scale_down,
    label_patch,
    plan_clear,
    plan_marks,
    read_mark,
    release_marks,
    rollout_of,
)
from autoscaler.ports import PodView

NOW = 1_700_000_000.0
DEP = "llama"
HASH = "7d9f8b6c5d"


def pod(suffix: str, *, ready_for: float | None = 3600.0, age: float = 7200.0, phase: str = "Running",
        terminating: bool = False, owner: str | None = f"{DEP}-{HASH}", template_hash: str | None = HASH,
        annotations: dict[str, str] | None = None, node: str | None = None) -> PodView:
    annotations = annotations or {}
    return PodView(
        name=f"{DEP}-{HASH}-{suffix}", created=NOW - age,
        ready_since=None if ready_for is None else NOW - ready_for, phase=phase, terminating=terminating,
        owner_replicaset=owner, template_hash=template_hash, annotations=annotations,
        labels={MARK_LABEL: "true"} if MARK_ANNOTATION in annotations else {},  # as the controller writes a mark
        node=node,
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


def test_not_ready_pods_go_first_then_pods_measured_idle_before_just_started_unscraped_ones() -> None:
    """A pod Ready for a moment without a series yet may be serving already: its load is unknown, not zero."""
    pods = [
        pod("idle0"),  # Ready long ago, measured at 0 in flight
        pod("start", ready_for=UNSCRAPED_GRACE_SECONDS / 2),  # Ready just now, not scraped yet
        pod("loads", ready_for=None, phase="Pending"),  # not Ready (starting)
        pod("busy1"),
    ]
    loads = {name("idle0"): 0.0, name("busy1"): 9.0}
    plan = plan_marks(DEP, pods, 3, loads, NOW)
    assert marked(plan) == [(name("loads"), -3), (name("idle0"), -2), (name("start"), -1)]
    assert plan.marks[0].why == "not Ready"
    assert "not scraped yet" in plan.marks[2].why
    assert plan.marks[2].in_flight is None
    assert marked(plan_marks(DEP, pods, 2, loads, NOW)) == [(name("loads"), -2), (name("idle0"), -1)]


@pytest.mark.parametrize("measured", [[0.0], [0.0, 0.0, 0.0], [0.0, 5.0, 9.0]])
def test_a_pod_measured_idle_always_goes_before_one_not_scraped_yet(measured: list[float]) -> None:
    """Whatever the others carry, a pod measured at zero is the better one to remove than a pod just Ready whose
    load nobody has measured, however recently that one turned Ready (the ReplicaSet's own tie-break)."""
    fresh = [pod(f"new{i:02d}", ready_for=5.0 + i) for i in range(3)]
    known = [pod(f"old{i:02d}", ready_for=3600.0 + i) for i in range(len(measured))]
    loads = {p.name: v for p, v in zip(known, measured, strict=True)}
    idle = sum(v == 0 for v in measured)
    plan = plan_marks(DEP, [*fresh, *known], idle, loads, NOW)
    assert {m.pod for m in plan.marks} == {p.name for p, v in zip(known, measured, strict=True) if v == 0}


def test_a_pod_not_scraped_yet_is_taken_as_carrying_the_mean_load() -> None:
    """Unknown is not idle and not the busiest either: it goes after pods measured below the Deployment's mean
    in-flight load and before pods measured above it."""
    pods = [pod("light"), pod("heavy"), pod("fresh", ready_for=30.0)]
    loads = {name("light"): 1.0, name("heavy"): 9.0}  # mean 5
    assert marked(plan_marks(DEP, pods, 2, loads, NOW)) == [(name("light"), -2), (name("fresh"), -1)]


def test_with_the_nodes_read_the_pods_of_the_emptiest_nodes_go_first_and_load_decides_among_equals() -> None:
    """The bill is whole nodes: a scale-down that takes the pods of the emptiest nodes lets them be consolidated.
    Two pods alone on a node go before an idle pod on a full node; between the two, the idler goes first."""
    pods = [pod("full0", node="n-full"), pod("sole1", node="n-a"), pod("sole2", node="n-b"),
            pod("pair1", node="n-c"), pod("pair2", node="n-c")]
    loads = {name("full0"): 0.0, name("sole1"): 6.0, name("sole2"): 2.0, name("pair1"): 1.0, name("pair2"): 1.0}
    node_gpus = {"n-full": 8, "n-a": 1, "n-b": 1, "n-c": 2}
    plan = plan_marks(DEP, pods, 2, loads, NOW, node_gpus=node_gpus)
    assert marked(plan) == [(name("sole2"), -2), (name("sole1"), -1)]
    assert "on n-b with 1 GPU(s) in use" in plan.marks[0].why
    # without the read, the same pods rank by load alone, as before
    assert marked(plan_marks(DEP, pods, 2, loads, NOW)) == [(name("full0"), -2), (name("pair1"), -1)]
    assert marked(plan_marks(DEP, pods, 2, loads, NOW, node_gpus={})) == [(name("full0"), -2), (name("pair1"), -1)]
    # four: both pods of the two-GPU node follow, so that node empties too
    assert {m.pod for m in plan_marks(DEP, pods, 4, loads, NOW, node_gpus=node_gpus).marks} == {
        name("sole1"), name("sole2"), name("pair1"), name("pair2")}


def test_with_the_in_flight_query_failed_the_nodes_read_still_choose_so_a_node_empties() -> None:
    """Every load unknown: with the NodePool read, the pods of the emptiest nodes are marked (the most recently Ready
    first among equals, the ReplicaSet's own tie-break), one at a time; a pod on a node the read did not cover is not
    marked; without the read nothing is. The plan says the loads were unknown either way."""
    pods = [pod("full0", node="n-full"), pod("sole1", node="n-a", ready_for=7200.0),
            pod("sole2", node="n-b", ready_for=3600.0), pod("pair1", node="n-c"), pod("pair2", node="n-c"),
            pod("stray", node="n-x")]
    node_gpus = {"n-full": 8, "n-a": 1, "n-b": 1, "n-c": 2}
    plan = plan_marks(DEP, pods, 2, None, NOW, node_gpus=node_gpus)
    assert marked(plan) == [(name("sole2"), -2), (name("sole1"), -1)]
    assert plan.unmarked == NO_POD_LOADS
    assert plan.note is not None
    assert "marked by node alone" in plan.note
    assert "load unknown" in plan.marks[0].why
    assert "on n-b with 1 GPU(s) in use" in plan.marks[0].why
    # six: the two-GPU node's pods follow, then the full node's; the pod on the unread node is never marked
    plan = plan_marks(DEP, pods, 6, None, NOW, node_gpus=node_gpus)
    assert [m.pod for m in plan.marks] == [name(s) for s in ("sole2", "sole1", "pair1", "pair2", "full0")]
    assert plan.note is not None
    assert "5 of 6 pod(s) to remove marked" in plan.note
    # without the read: no pod marked, the ReplicaSet's default order
    assert plan_marks(DEP, pods, 2, None, NOW).marks == ()
    assert plan_marks(DEP, pods, 2, None, NOW, node_gpus={}).marks == ()


def test_pods_are_chosen_one_at_a_time_so_the_node_that_starts_to_empty_empties_whole() -> None:
    """Two equally used nodes, two of this Deployment's pods on each: once the idlest pod is chosen its node holds
    fewer GPUs, so its sibling (busier than a pod on the other node) goes next and the node empties; taking the
    idlest two would leave both nodes billed. ``pod_gpus`` is what each chosen pod frees."""
    pods = [pod("a1idl", node="n-a"), pod("a2bsy", node="n-a"), pod("b1idl", node="n-b"), pod("b2bsy", node="n-b")]
    loads = {name("a1idl"): 0.0, name("a2bsy"): 5.0, name("b1idl"): 1.0, name("b2bsy"): 6.0}
    plan = plan_marks(DEP, pods, 2, loads, NOW, node_gpus={"n-a": 4, "n-b": 4}, pod_gpus=2)
    assert marked(plan) == [(name("a1idl"), -2), (name("a2bsy"), -1)]
    # a node that holds fewer GPUs still goes first: n-b, with 3 in use, loses both its pods before n-a any
    plan = plan_marks(DEP, pods, 3, loads, NOW, node_gpus={"n-a": 4, "n-b": 3}, pod_gpus=1)
    assert marked(plan) == [(name("b1idl"), -3), (name("b2bsy"), -2), (name("a1idl"), -1)]
    # without the read, by load alone: the idlest two, one on each node
    assert marked(plan_marks(DEP, pods, 2, loads, NOW)) == [(name("a1idl"), -2), (name("b1idl"), -1)]


def test_a_pod_on_a_node_the_read_did_not_cover_ranks_after_the_nodes_it_did() -> None:
    """Nothing says removing a pod on an unread node (no NodePool, not Ready) frees anything; not Ready pods still
    go first, whatever their node."""
    pods = [pod("unrd0", node="elsewhere"), pod("full0", node="n-full"), pod("nonde", node=None),
            pod("start", ready_for=None, phase="Pending", node=None)]
    loads = {name("unrd0"): 0.0, name("full0"): 5.0, name("nonde"): 1.0}
    plan = plan_marks(DEP, pods, 3, loads, NOW, node_gpus={"n-full": 8})
    assert marked(plan) == [(name("start"), -3), (name("full0"), -2), (name("unrd0"), -1)]
    assert "its node elsewhere not read" in plan.marks[2].why


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


# ---------------------------------------------------------------------------------------------- rollouts

NEW_HASH = "9a8b7c6d5e"


def new_pod(suffix: str, **kw: Any) -> PodView:
    """A pod of the Deployment's newer ReplicaSet (a rollout), created ``age`` seconds ago (default 300)."""
    kw.setdefault("age", 300.0)
    return pod(suffix, owner=f"{DEP}-{NEW_HASH}", template_hash=NEW_HASH, **kw)


def test_a_scale_down_is_held_while_more_than_one_replicaset_has_pods() -> None:
    pods = [pod("old01"), pod("old02"), new_pod("new01", ready_for=None)]
    guard = guard_scale_down(DEP, pods, current=3, desired=2, now=NOW, stuck=None)
    assert guard is not None
    assert guard.held
    assert (guard.step.name, guard.step.replicas) == ("rollout_hold", 3)
    assert f"{DEP}-{HASH}: 2" in guard.step.detail
    assert f"{DEP}-{NEW_HASH}: 1" in guard.step.detail
    assert "held" in guard.message
    assert guard.rollout.since == NOW - 300, "the overlap began with the newer ReplicaSet's first pod"


@pytest.mark.parametrize("pods", [
    [pod("old01"), pod("old02")],  # one ReplicaSet
    [pod("old01"), new_pod("new01", terminating=True)],  # the other one's pods are all going
    [pod("old01"), new_pod("new01", phase="Failed")],
])
def test_one_replicaset_with_active_pods_holds_nothing(pods: list[PodView]) -> None:
    assert rollout_of(DEP, pods) is None
    assert guard_scale_down(DEP, pods, current=2, desired=1, now=NOW, stuck=None) is None


def test_a_rollout_never_holds_a_scale_up_or_a_hold() -> None:
    pods = [pod("old01"), new_pod("new01")]
    assert guard_scale_down(DEP, pods, current=2, desired=3, now=NOW, stuck=None) is None
    assert guard_scale_down(DEP, pods, current=2, desired=2, now=NOW, stuck=None) is None


def test_a_stuck_or_too_long_rollout_no_longer_holds_the_scale_down() -> None:
    pods = [pod("old01"), pod("old02"), new_pod("new01", ready_for=None)]
    stuck = guard_scale_down(DEP, pods, current=3, desired=2, now=NOW,
                             stuck='ProgressDeadlineExceeded: ReplicaSet "x" has timed out progressing.')
    assert stuck is not None
    assert not stuck.held
    assert (stuck.step.name, stuck.step.replicas) == ("rollout_stuck", 2)
    assert "ProgressDeadlineExceeded" in stuck.step.detail
    long_ago = [pod("old01"), new_pod("new01", age=ROLLOUT_HOLD_MAX_SECONDS + 1)]
    late = guard_scale_down(DEP, long_ago, current=2, desired=1, now=NOW, stuck=None)
    assert late is not None
    assert not late.held
    assert "bound" in late.step.detail
    just_in_time = [pod("old01"), new_pod("new01", age=ROLLOUT_HOLD_MAX_SECONDS - 1)]
    held = guard_scale_down(DEP, just_in_time, current=2, desired=1, now=NOW, stuck=None)
    assert held is not None
    assert held.held


def test_during_a_rollout_that_goes_ahead_each_replicaset_gets_its_own_idlest_marked() -> None:
    """Whatever share of the cut the Deployment controller gives a ReplicaSet (at most the whole cut), the pods it
    removes first are its own idlest: up to ``remove`` marks per ReplicaSet, costs ``-k..-1`` within each."""
    pods = [pod("oldbz"), pod("oldi1"), pod("oldi2"), new_pod("newi1"), new_pod("newbz")]
    loads = {name("oldbz"): 6.0, name("oldi1"): 0.0, name("oldi2"): 1.0, name("newi1"): 0.0, name("newbz"): 4.0}
    plan = plan_marks(DEP, pods, 2, loads, NOW, per_replicaset=True)
    assert sorted(marked(plan)) == sorted([(name("oldi1"), -2), (name("oldi2"), -1),
                                           (name("newi1"), -2), (name("newbz"), -1)])
    assert sorted(marked(plan_marks(DEP, pods, 2, loads, NOW))) == [(name("newi1"), -2), (name("oldi1"), -1)], \
        "without a rollout going ahead: the idlest overall"
    assert plan.unmarked == ROLLOUT
    assert plan.note is not None
    assert "per ReplicaSet" in plan.note


# ---------------------------------------------------------------------------------------------- saying so


def test_every_way_a_scale_down_goes_unsteered_has_a_reason_code() -> None:
    pods = [pod("aaaaa"), pod("bbbbb")]
    assert plan_marks(DEP, pods, 1, None, NOW).unmarked == NO_POD_LOADS
    foreign = [pod("aaaaa", annotations={DELETION_COST_ANNOTATION: "100"}), pod("bbbbb")]
    assert plan_marks(DEP, foreign, 1, {name("aaaaa"): 0.0, name("bbbbb"): 0.0}, NOW).unmarked == FOREIGN_COST
    assert plan_marks(DEP, pods, 2, {name("aaaaa"): 0.0}, NOW).unmarked == UNSCRAPED_PODS
    assert plan_marks(DEP, pods, 2, {name("aaaaa"): 0.0, name("bbbbb"): 1.0}, NOW).unmarked is None
    assert set(UNMARKED_REASONS) >= {NO_POD_LOADS, FOREIGN_COST, UNSCRAPED_PODS, ROLLOUT}


# ---------------------------------------------------------------------------------------------- marks seen


def test_the_scale_goes_ahead_only_once_a_read_shows_every_planned_cost() -> None:
    pods = [pod("aaaaa"), pod("bbbbb"), pod("ccccc")]
    plan = plan_marks(DEP, pods, 2, {name("aaaaa"): 0.0, name("bbbbb"): 1.0, name("ccccc"): 9.0}, NOW)
    read = [pod("aaaaa", annotations=ours(-2)), pod("bbbbb", annotations=ours(-1)), pod("ccccc")]
    assert check_marks(plan, read, 3, 1, None, NOW).missing == ()

    one_missing = [pod("aaaaa", annotations=ours(-2)), pod("bbbbb"), pod("ccccc")]
    first = check_marks(plan, one_missing, 3, 1, None, NOW)
    assert first.missing == (name("bbbbb"),)
    assert first.hold
    assert first.step is not None
    assert (first.step.name, first.step.replicas) == ("marks_unconfirmed", 3)
    later = check_marks(plan, one_missing, 3, 1, NOW - MARK_CONFIRM_SECONDS + 1, NOW)
    assert later.hold
    given_up = check_marks(plan, one_missing, 3, 1, NOW - MARK_CONFIRM_SECONDS, NOW)
    assert not given_up.hold
    assert given_up.step is not None
    assert given_up.step.replicas == 1
    assert "without relying on them" in given_up.step.detail
    wrong_cost = [pod("aaaaa", annotations=ours(-2)), pod("bbbbb", annotations=ours(-7)), pod("ccccc")]
    assert check_marks(plan, wrong_cost, 3, 1, None, NOW).missing == (name("bbbbb"),)


# ---------------------------------------------------------------------------------------------- leaving care


def test_released_marks_lose_both_annotations_and_the_label_whatever_their_age() -> None:
    pods = [pod("aaaaa", annotations=ours(-1, NOW)), pod("bbbbb"),
            pod("ccccc", annotations={DELETION_COST_ANNOTATION: "9", MARK_ANNOTATION: "{}"})]
    plan = release_marks(pods, "the Deployment is advisory")
    assert plan.patches == {name("aaaaa"): {DELETION_COST_ANNOTATION: None, MARK_ANNOTATION: None},
                            name("ccccc"): {MARK_ANNOTATION: None}}, "a cost someone else set stays"
    assert label_patch(plan.patches[name("aaaaa")]) == {MARK_LABEL: None}
    assert plan.note is not None
    assert "advisory" in plan.note
    labelled_only = PodView(name("ddddd"), NOW, NOW, "Running", False, labels={MARK_LABEL: "true"})
    assert release_marks([labelled_only], "gone").patches == {name("ddddd"): {MARK_ANNOTATION: None}}


def test_a_mark_sets_the_label_that_finds_it_and_a_clear_removes_it() -> None:
    plan = plan_marks(DEP, [pod("aaaaa"), pod("bbbbb")], 1, {name("aaaaa"): 0.0, name("bbbbb"): 3.0}, NOW)
    assert label_patch(plan.patches[name("aaaaa")]) == {MARK_LABEL: "true"}
    assert label_patch({DELETION_COST_ANNOTATION: None}) == {}


def test_the_deployment_of_a_pod_is_read_from_its_replicasets_name() -> None:
    assert deployment_of(pod("aaaaa")) == DEP
    assert deployment_of(pod("aaaaa", owner=None)) is None
    assert deployment_of(pod("aaaaa", owner="other-rs", template_hash=HASH)) is None
    assert deployment_of(pod("aaaaa", owner=f"{DEP}-{HASH}", template_hash=None)) is None
