"""Spare replicas on a NodePool's paid, idle GPUs (``autoscaler.engine.spare``) and their place in the money step."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from autoscaler.engine.spare import (
    SPARE_STEP,
    Lent,
    PoolCount,
    SpareMember,
    exposure,
    held_spares,
    lend,
    lent_in,
    member_terms,
    pool_slack,
    slack_gpus,
    spare_replicas,
)
from autoscaler.ports import PoolGpus
from models.types import Forecast

NOW = 1_700_000_000


def _member(key: str, planned: int, exposure: float, requested: int | None = None, room: int = 10,
            gpus: int = 1) -> SpareMember:
    return SpareMember(key, gpus, planned, planned if requested is None else requested, room, exposure)


def test_the_slack_is_the_last_nodes_remainder_within_the_nodes_that_hold_pods() -> None:
    assert slack_gpus(8, 11, busy_nodes=2, waiting_pods=0) == 5  # 16 - 11
    assert slack_gpus(8, 16, busy_nodes=2, waiting_pods=0) == 0  # whole nodes: nothing idle to lend
    # three half-used nodes: only the remainder is lent, so the emptiest node can still empty
    assert slack_gpus(8, 12, busy_nodes=3, waiting_pods=0) == 4
    # the plan needs more than the busy nodes hold: its new pods take the room, a node is coming
    assert slack_gpus(8, 17, busy_nodes=2, waiting_pods=0) == 0
    assert slack_gpus(8, 11, busy_nodes=2, waiting_pods=1) == 0  # a pod waits for a node: the pool is short
    assert slack_gpus(8, 0, busy_nodes=0, waiting_pods=0) == 0


def test_with_node_headroom_the_slack_is_its_room_rounded_to_whole_nodes_on_busy_and_ready_idle_nodes() -> None:
    # 13 GPUs held on two 8-GPU nodes; the headroom keeps room for 6 GPUs more: 19 -> 3 whole nodes, 11 to lend
    assert slack_gpus(8, 13, busy_nodes=2, waiting_pods=0, room_gpus=6.0, idle_nodes=1) == 11
    assert slack_gpus(8, 13, busy_nodes=2, waiting_pods=0, room_gpus=6.0, idle_nodes=0) == 3  # its node not Ready
    assert slack_gpus(8, 13, busy_nodes=2, waiting_pods=0, room_gpus=2.0, idle_nodes=1) == 3  # the room fits: 2 nodes
    assert slack_gpus(8, 13, busy_nodes=2, waiting_pods=0, room_gpus=20.0, idle_nodes=1) == 11  # within the nodes
    assert slack_gpus(8, 13, busy_nodes=2, waiting_pods=2, room_gpus=6.0, idle_nodes=1) == 0
    # three half-used nodes and room for 4: the remainder and the room, both on the busy nodes
    assert slack_gpus(8, 12, busy_nodes=3, waiting_pods=0, room_gpus=4.0) == 4
    assert slack_gpus(8, 12, busy_nodes=3, waiting_pods=0, room_gpus=9.0) == 12


def test_spares_on_the_headrooms_idle_nodes_leave_it_fewer_nodes_to_hold_empty() -> None:
    # two busy 8-GPU nodes hold 13 GPUs (3 free on them); one idle headroom node is Ready (its 8 GPUs free)
    read = PoolGpus(free=11, busy_nodes=2, partial_free=3, nodes=3)
    plans = [PoolCount("a", 1, 6, 6), PoolCount("b", 1, 7, 7)]

    def terms(room: int) -> Callable[[PoolCount], tuple[int, float]]:
        return lambda c: (room, 1.0) if c.key == "a" else (0, 0.0)

    # the headroom keeps 6 GPUs of room (one idle node): a takes the 3 free GPUs and the whole idle node
    assert lend(read, 8, plans, 0, terms(20), room_gpus=6.0, idle_nodes=1) == Lent({"a": 11}, 0, 0)
    # a may take 5: the busy nodes' 3 and 2 on the idle node, which is then no longer empty
    assert lend(read, 8, plans, 0, terms(5), room_gpus=6.0, idle_nodes=1) == Lent({"a": 5}, 0, 0)
    # a may take 2: they stand on the busy nodes, the idle node stays empty (1 GPU free on the busy nodes)
    assert lend(read, 8, plans, 0, terms(2), room_gpus=6.0, idle_nodes=1) == Lent({"a": 2}, 1, 1)
    # without headroom only the last node's remainder is lent, and no idle node is counted
    assert lend(read, 8, plans, 0, terms(20)) == Lent({"a": 3}, 0, 0)
    # a's plan grows by 4: 1 GPU of its scale-up goes on the idle node, and the room left is lent there
    grows = [PoolCount("a", 1, 10, 6), PoolCount("b", 1, 7, 7)]
    assert lend(read, 8, grows, 0, terms(20), room_gpus=6.0, idle_nodes=1) == Lent({"a": 7}, 0, 0)


def test_spares_go_to_the_most_exposed_deployment_within_its_room() -> None:
    members = [_member("a", 4, exposure=0.5), _member("b", 6, exposure=2.5, room=2), _member("c", 3, exposure=1.0)]
    out = spare_replicas(5, members)
    # b first (2.5, then 1.5, room 2), then c (1.0) and a (0.5), then c again (0.0 against a's -0.5)
    assert out == {"b": 2, "c": 2, "a": 1}
    assert sum(out.values()) == 5


def test_spares_already_held_stay_where_they_are() -> None:
    # a holds 2 replicas above its plan: they stay although b is more exposed (a move throws away a model load)
    members = [_member("a", 4, exposure=0.0, requested=6), _member("b", 4, exposure=3.0)]
    assert spare_replicas(3, members) == {"a": 2, "b": 1}
    # the slack shrank (a plan took GPUs): a keeps what still fits, b gets none
    assert spare_replicas(1, members) == {"a": 1}


def test_a_deployment_without_room_counts_but_takes_none_and_wide_replicas_need_the_gpus() -> None:
    members = [_member("a", 4, exposure=5.0, room=0), _member("b", 2, exposure=1.0, gpus=2)]
    assert spare_replicas(3, members) == {"b": 1}  # one 2-GPU replica fits in 3 GPUs, a second does not
    assert spare_replicas(1, members) == {}


def test_a_pool_read_before_the_plan_lends_what_the_plan_leaves() -> None:
    read = PoolGpus(free=5, busy_nodes=2, partial_free=5, nodes=2)  # 11 of 16 GPUs held
    assert pool_slack(read, 8, change_gpus=2, waiting_pods=0) == 3  # a plan adds 2: 13 held
    grows = [_member("a", 6, exposure=1.0, requested=4), _member("b", 7, exposure=0.0)]
    assert spare_replicas(3, grows) == {"a": 2, "b": 1}
    # a plan removes 2: 9 held, 7 GPUs of the second node idle once they go; a keeps its two as spares, then 5 more
    assert pool_slack(read, 8, change_gpus=-2, waiting_pods=0) == 7
    shrinks = [_member("a", 2, exposure=1.0, requested=4), _member("b", 7, exposure=0.0)]
    assert spare_replicas(7, shrinks)["a"] >= 2
    assert pool_slack(read, 8, change_gpus=2, waiting_pods=2) == 0


def test_lend_asks_for_room_and_exposure_only_when_the_pool_has_slack() -> None:
    asked: list[str] = []

    def terms(c: PoolCount) -> tuple[int, float]:
        asked.append(c.key)
        return (10, 1.0) if c.key == "a" else (0, 0.0)  # b: no forecast, it counts in the GPUs and takes none

    read = PoolGpus(free=5, busy_nodes=2, partial_free=5, nodes=2)  # 11 of 16 GPUs held
    counts = [PoolCount("a", 1, 6, 4), PoolCount("b", 1, 7, 7)]  # a's plan adds 2: 13 held, 3 to lend
    assert lend(read, 8, counts, 0, terms).spares == {"a": 3}
    assert sorted(asked) == ["a", "b"]
    asked.clear()
    full = [PoolCount("a", 1, 9, 4), PoolCount("b", 1, 7, 7)]  # a's plan fills the second node: nothing to lend
    assert lend(read, 8, full, 0, terms).spares == {}
    assert lend(read, 8, counts, 1, terms).spares == {}  # a pod waits for a node
    assert asked == []


@given(
    gpn=st.sampled_from([1, 4, 8]),
    busy=st.integers(0, 6),
    held=st.lists(st.tuples(st.integers(0, 8), st.integers(0, 3), st.integers(0, 4), st.integers(1, 2),
                            st.floats(-5, 5)), min_size=1, max_size=4),
    room=st.one_of(st.just(0.0), st.floats(0, 30)),
    idle=st.integers(0, 3),
)
def test_spares_never_ask_for_a_node_and_stay_within_room(gpn: int, busy: int,
                                                          held: list[tuple[int, int, int, int, float]],
                                                          room: float, idle: int) -> None:
    members = [SpareMember(str(i), g, p, p + r, rm, e) for i, (p, r, rm, g, e) in enumerate(held)]
    used = sum(m.planned * m.gpus_per_replica for m in members)
    out = spare_replicas(slack_gpus(gpn, used, busy, 0, room, idle), members)
    lent = sum(n * members[int(k)].gpus_per_replica for k, n in out.items())
    assert lent <= max(0, (busy + idle) * gpn - used)  # on the nodes that hold pods and the headroom's Ready ones
    # never a node more than the pods' and the headroom's room need (without headroom: than the pods' alone)
    assert lent == 0 or math.ceil((used + lent) / gpn) <= math.ceil((used + room) / gpn - 1e-9)
    for k, n in out.items():
        assert 0 < n <= members[int(k)].room


def _forecast(top: list[float]) -> Forecast:
    mean = np.asarray(top) * 0.8
    return Forecast(start=NOW, step_seconds=60, mean=mean, quantiles={50: mean, 95: np.asarray(top)}, model="t")


def test_exposure_is_the_top_bands_need_over_the_lead_above_the_plan() -> None:
    f = _forecast([10.0, 30.0, 12.0, 90.0])
    # replicas of 5 req/s: the p95 peaks at 30 within the next 2 minutes (6 replicas); the plan asks 4
    assert exposure(f, NOW, 120.0, 5.0, 4) == 2.0
    assert exposure(f, NOW, 120.0, 5.0, 8) == -2.0
    assert exposure(None, NOW, 120.0, 5.0, 4) is None
    assert exposure(f, NOW, 120.0, 0.0, 4) is None


def test_a_member_without_exposure_takes_none_but_keeps_its_spares_while_its_decision_holds_on_missing_data() -> None:
    assert member_terms(1.5, max_replicas=20, planned=6, requested=8, holding=False) == (14, 1.5)
    assert member_terms(None, max_replicas=20, planned=6, requested=8, holding=False) == (0, 0.0)
    # no forecast because the metrics are gone: the two spares it holds stay (no scale-down on missing data)
    assert member_terms(None, max_replicas=20, planned=6, requested=8, holding=True) == (2, 0.0)
    assert member_terms(None, max_replicas=7, planned=6, requested=8, holding=True) == (1, 0.0)  # max_replicas wins
    assert member_terms(None, max_replicas=20, planned=8, requested=8, holding=True) == (0, 0.0)


def test_the_spares_held_now_are_those_lent_still_above_the_plan() -> None:
    assert held_spares(requested=12, planned=10, spares=2) == 2
    assert held_spares(requested=11, planned=10, spares=2) == 1  # one went (a write not yet applied, a pod removed)
    assert held_spares(requested=10, planned=10, spares=2) == 0
    assert held_spares(requested=15, planned=10, spares=2) == 2  # the rest is a scale-down in progress, not spares


def test_the_spares_a_decision_lent_are_read_back_from_its_steps() -> None:
    trail = [("lead_time", 3), ("forecast", 4), ("min_max_clamp", 4), (SPARE_STEP, 8)]
    assert lent_in(trail) == (4, 4)
    assert lent_in(trail[:-1]) == (0, 0)  # none lent
    assert lent_in([(SPARE_STEP, 8)]) == (0, 0)  # no count before it: nothing to read
    assert lent_in([("min_max_clamp", None), (SPARE_STEP, 8)]) == (0, 0)  # an older status without counts
    assert lent_in([("min_max_clamp", 8), (SPARE_STEP, 8)]) == (0, 0)
