"""Scheduled gangs, the pure part: held Kueue Workloads, when a placed gang's GPUs count, joint placement per pool,
and the step-function helpers the controller builds its pool forecast with."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autoscaler.domain.gangs import (
    Gang,
    add_interval,
    compress_points,
    holds_gpus,
    parse_gang,
    place_gang,
    place_gangs,
    placement_window,
    replica_gpu_points,
    scheduled,
    sum_points,
)
from tests.domain.test_gangs import DAY, pod, workload

H = 3600
P = "predictive-autoscaler.io/"
T0 = 1_800_000_000


def gang(name: str = "g", gpus: int = 8, *, start_after: int | None = 0, deadline: int | None = 20 * H,
         duration: int | None = 3 * H, priority: int = 50, pool: str | None = "h100", admitted: bool = False,
         held: bool = False) -> Gang:
    return Gang("Workload", "ml", name, gpus, 1, admitted, priority, nodepool=pool, start_after=start_after,
                deadline=deadline, duration_seconds=duration, held=held)


# ---------------------------------------------------------------------------------------------- parsing


def test_a_held_workload_with_a_start_after_is_scheduled_not_inactive() -> None:
    window = {P + "start-after": "2026-01-31T22:00:00Z", P + "deadline": "2026-02-01T22:00:00Z", P + "duration": "4h"}
    held = parse_gang(workload(("w", 2, pod(4)), active=False, annotations=window))
    assert (held.held, held.inactive, held.admitted) == (True, False, False)
    assert scheduled(held)
    # Without our start-after, spec.active false is a deactivated Workload: it holds no GPUs.
    plain = parse_gang(workload(("w", 2, pod(4)), active=False))
    assert (plain.held, plain.inactive) == (False, True)
    # Once we activated it, a later spec.active false is someone else's deactivation: inactive, never restarted.
    again = parse_gang(workload(("w", 2, pod(4)), active=False,
                                annotations={**window, P + "activated-at": "2026-02-01T03:00:00Z"}))
    assert (again.held, again.inactive) == (False, True)
    # A finished held Workload is finished.
    done = parse_gang(workload(("w", 2, pod(4)), active=False, annotations=window, conditions=(("Finished", "True"),)))
    assert (done.held, done.inactive) == (False, True)
    active = parse_gang(workload(("w", 2, pod(4)), annotations=window))
    assert (active.held, active.inactive) == (False, False)


def test_the_planned_start_annotation_is_read_back_and_a_garbled_one_is_ignored() -> None:
    noted = parse_gang(workload(("w", 1, pod(1)), annotations={P + "planned-start": "2026-02-01T03:00:00Z"}))
    assert noted.planned_start_note == 1769914800
    garbled = parse_gang(workload(("w", 1, pod(1)), annotations={P + "planned-start": "soon"}))
    assert garbled.planned_start_note is None


# ---------------------------------------------------------------------------------------------- windows and counting


def test_placement_window() -> None:
    assert placement_window(gang(start_after=2 * H, deadline=10 * H), now=0) == (2 * H, 10 * H)
    assert placement_window(gang(start_after=2 * H, deadline=10 * H), now=5 * H) == (5 * H, 10 * H)
    assert placement_window(gang(start_after=2 * H, deadline=10 * H), now=11 * H) is None
    assert placement_window(gang(start_after=2 * H, deadline=None), now=0) == (2 * H, 2 * H)
    assert placement_window(gang(start_after=None, deadline=10 * H), now=H) == (H, 10 * H)
    assert not scheduled(gang(duration=None))
    assert not scheduled(gang(start_after=None, deadline=None))
    assert not scheduled(gang(admitted=True))


def test_a_placed_gang_counts_from_one_node_start_up_before_its_start() -> None:
    g = gang(start_after=0, deadline=20 * H)
    startup = 1800.0
    planned = 10 * H
    assert not holds_gpus(g, planned - 1801, 900, planned, startup)  # horizon does not pull it earlier
    assert holds_gpus(g, planned - 1800, 900, planned, startup)
    assert holds_gpus(g, planned + 5 * H, 900, planned, startup)  # still pending after its start: still counted
    # Never started: it stops counting one node start-up after its deadline.
    assert holds_gpus(g, 20 * H + 1800, 900, planned, startup)
    assert not holds_gpus(g, 20 * H + 1801, 900, planned, startup)
    # Unplaced (today's rule): from start-after minus the horizon.
    assert holds_gpus(gang(start_after=2 * H), 2 * H - 900, 900)
    assert not holds_gpus(gang(start_after=2 * H), 2 * H - 901, 900)
    assert holds_gpus(gang(admitted=True), 0, 0, planned, startup)


# ---------------------------------------------------------------------------------------------- joint placement


def test_place_gangs_uses_the_trough_and_does_not_stack_two_gangs_in_it() -> None:
    a = gang("a", 8, priority=100)
    b = gang("b", 8, priority=10)
    placed = place_gangs([a, b], {"h100": DAY}, {"h100": 30}, now=0)
    assert placed[a.key].start == 2 * H  # the 01:00-05:00 trough, alone
    # b goes where the forecast plus a's run peaks lowest: not on top of a.
    with_a = add_interval(DAY, 2 * H, 5 * H, 8)
    assert placed[b.key] == place_gang(b, with_a, 30, 0, 20 * H)
    assert place_gang(b, DAY, 30, 0, 20 * H).start == 2 * H  # placed alone it would stack on a ...
    assert placed[b.key].start != 2 * H  # ... placed jointly it does not
    assert placed[b.key].peak_gpus <= place_gang(b, with_a, 30, 2 * H, 2 * H).peak_gpus  # ties go earliest


def test_place_gangs_keeps_fixed_starts_counts_other_gangs_and_reports_no_fit() -> None:
    a = gang("a", 8)
    running = gang("r", 4, admitted=True)
    placed = place_gangs([a, running, gang("elsewhere", 4, pool="a10")], {"h100": DAY}, {"h100": 13}, now=0,
                         fixed={a.key: 7 * H})
    assert placed[a.key].start == 7 * H  # frozen: kept even though the trough is earlier
    assert placed[a.key].peak_gpus == max(g for t, g in DAY if 7 * H <= t < 10 * H) + 8 + 4  # + the admitted gang
    assert placed[a.key].fits is False  # 26 > 13
    assert set(placed) == {a.key, gang("elsewhere", 4, pool="a10").key}  # the admitted gang is not placed
    # A pool with no forecast: placed at the start of its window.
    assert placed[gang("elsewhere", pool="a10").key].start == 0


def test_place_gangs_skips_gangs_whose_window_is_over_unless_fixed() -> None:
    late = gang("late", start_after=0, deadline=H)
    assert place_gangs([late], {}, {}, now=2 * H) == {}
    assert place_gangs([late], {}, {}, now=2 * H, fixed={late.key: H})[late.key].start == H


# ---------------------------------------------------------------------------------------------- step functions


def test_replica_gpu_points_clamps_and_compresses() -> None:
    pts = replica_gpu_points([0, 60, 120, 180, 240], [0.0, float("nan"), 2.5, 2.6, 100.0], capacity_per_replica=1.0,
                             min_replicas=1, max_replicas=5, gpus_per_replica=2)
    assert pts == [(0, 2.0), (120, 6.0), (240, 10.0)]
    with pytest.raises(ValueError, match="capacity_per_replica"):
        replica_gpu_points([0], [1.0], capacity_per_replica=0, min_replicas=0, max_replicas=1, gpus_per_replica=1)


def test_sum_points_holds_each_value_until_its_next_point() -> None:
    assert sum_points([[(0, 1.0), (10, 3.0)], [(5, 2.0)]]) == [(0, 3.0), (10, 5.0)]
    assert sum_points([]) == []
    assert add_interval([(0, 1.0), (10, 2.0)], 5, 15, 4) == [(0, 1.0), (5, 5.0), (10, 6.0), (15, 2.0)]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 100), st.integers(0, 9)), min_size=1, max_size=8),
       st.lists(st.tuples(st.integers(0, 100), st.integers(0, 9)), min_size=1, max_size=8),
       st.integers(0, 120))
def test_sum_points_is_the_pointwise_sum(a: list[tuple[int, int]], b: list[tuple[int, int]], t: int) -> None:
    def at(points: list[tuple[int, float]], when: int) -> float:
        pts = sorted(points)
        before = [g for s, g in pts if s <= when]
        return before[-1] if before else pts[0][1]

    fa = [(x, float(y)) for x, y in dict(a).items()]
    fb = [(x, float(y)) for x, y in dict(b).items()]
    assert math.isclose(at(sum_points([fa, fb]), t), at(fa, t) + at(fb, t))
    assert compress_points([0, 1, 2], [1.0, 1.0, 2.0]) == [(0, 1.0), (2, 2.0)]


def test_an_unplaced_gang_counts_from_its_start_after_and_not_after_its_window() -> None:
    pending = Gang("Workload", "t", "g", 8, 1, False, 50, start_after=T0 + 3600)
    assert not holds_gpus(pending, T0, 900)
    assert holds_gpus(pending, T0, 3600)
    late = Gang("Workload", "t", "g", 8, 1, False, 50, start_after=T0 - 7200, deadline=T0 - 60,
                duration_seconds=600)
    assert not holds_gpus(late, T0, 900)
    admitted = Gang("Workload", "t", "g", 8, 1, True, 50, deadline=T0 - 60, duration_seconds=60)
    assert holds_gpus(admitted, T0, 900)  # admitted: it runs, whatever its window said
    assert not holds_gpus(Gang("Workload", "t", "g", 8, 1, True, 50, inactive=True), T0, 900)
