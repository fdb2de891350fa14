"""HPA-style stabilisation and per-decision step limits."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autoscaler.domain.stabilize import CheckedHistory, limit_step, stabilize, update_history


def test_history_drops_stale_future_and_same_time_entries() -> None:
    history = ((100, 9), (401, 7), (1000, 3), (1000, 4), (1200, 50))
    updated = update_history(history, now=1000, raw=5, window_seconds=600)
    # 100 is older than the window (cutoff 400, exclusive), 1200 is in the future, 1000 is replaced.
    assert updated == ((401, 7), (1000, 5))


def test_zero_window_keeps_only_now() -> None:
    assert update_history(((990, 9),), now=1000, raw=2, window_seconds=0) == ((1000, 2),)


@pytest.mark.parametrize(
    ("raw", "current", "history", "expected"),
    [
        (10, 4, ((0, 10),), 10),  # scale up at once
        (4, 4, ((0, 4),), 4),
        (2, 8, ((0, 8), (60, 2)), 8),  # a recent 8 holds the count
        (2, 8, ((0, 5), (60, 2)), 5),  # falls to the window max only
        (2, 8, ((60, 2),), 2),  # whole window agrees: scale down
        (2, 4, ((0, 9), (60, 2)), 4),  # never above current on the way down
    ],
)
def test_stabilize(raw: int, current: int, history: tuple[tuple[int, int], ...], expected: int) -> None:
    assert stabilize(raw, current, history, 600).replicas == expected


@pytest.mark.parametrize(
    ("target", "current", "up", "frac", "expected", "blocked"),
    [
        (20, 4, None, 0.5, 20, 0),
        (20, 4, 5, 0.5, 9, 11),
        (6, 4, 5, 0.5, 6, 0),
        (1, 10, None, 0.5, 5, 0),
        (1, 10, None, 0.25, 8, 0),  # floor(2.5) = 2
        (0, 1, None, 0.1, 0, 0),  # at least one replica may always go
        (5, 2, None, 0.1, 5, 0),
        (7, 10, None, 0.3, 7, 0),  # 0.3 * 10 must be 3, not 2.999...
    ],
)
def test_limit_step(target: int, current: int, up: int | None, frac: float, expected: int, blocked: int) -> None:
    limited = limit_step(target, current, up, frac)
    assert limited.replicas == expected
    assert limited.blocked == blocked
    if blocked:
        assert "LIMITED" in limited.detail


@given(
    times=st.lists(st.integers(0, 2_000), max_size=30),
    raws=st.lists(st.integers(0, 50), min_size=30, max_size=30),
    now=st.integers(0, 2_000),
    window=st.integers(0, 900),
    raw=st.integers(0, 50),
)
@settings(deadline=None)
def test_a_checked_history_is_updated_as_any_history(times: list[int], raws: list[int], now: int, window: int,
                                                     raw: int) -> None:
    # a history the planner built is in time order; dropping its expired entries from the front must keep exactly
    # what filtering every entry keeps
    ordered = tuple(zip(sorted(times), raws, strict=False))
    fast = update_history(CheckedHistory(ordered), now, raw, window)
    plain = update_history(ordered, now, raw, window)
    assert type(fast) is CheckedHistory
    assert fast == plain
    assert fast == (*(e for e in ordered if now - window < e[0] < now), (now, raw))


def test_a_history_out_of_time_order_is_not_marked_checked() -> None:
    out = update_history(((100, 3), (90, 2)), 110, 1, 600)
    assert out == ((100, 3), (90, 2), (110, 1))
    assert type(out) is not CheckedHistory
