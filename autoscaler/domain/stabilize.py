"""Scale up early, scale down late: the stabilisation window and the per-decision step limits.

Why a module of its own: a forecast that dips for one tick must not tear down GPU replicas that take
minutes to come back. This is the Kubernetes HPA's ``behavior`` logic, kept separate from the
capacity arithmetic so each can be tested on its own:

* the caller keeps a history of *raw* recommendations ``(timestamp, replicas)``; entries older
  than the stabilisation window are dropped, and so are entries stamped after ``now`` (a clock that
  went backwards must not pin the count forever);
* a raw recommendation at or above the current count is applied at once (scale up early);
* below it, the count only falls to the maximum raw recommendation of the window (which includes the
  current one, so never below the reactive floor inside it): a scale-down happens only after every
  recommendation of a full window agreed with it;
* ``max_scale_up_step`` caps replicas added per decision, ``max_scale_down_fraction`` caps the share
  removed (at least one replica, so a fraction never freezes a small Deployment).

Same as HPA: an entry counts while ``timestamp > now - window``. Departure from HPA: scale-up has no
stabilisation window, because a late scale-up of a GPU workload costs an SLO breach for the whole
cold start, while an early one costs minutes of one idle replica.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

History = tuple[tuple[int, int], ...]


class CheckedHistory(tuple[tuple[int, int], ...]):
    """A history ``update_history`` built: ``(int time, int replicas >= 0)`` pairs. ``WorkloadState`` trusts it
    instead of checking every entry again at each of the planner's decisions (a self-tuning replay makes tens of
    thousands of them)."""

    __slots__ = ()


def update_history(history: History, now: int, raw: int, window_seconds: int) -> History:
    """History with ``(now, raw)`` added (replacing an entry at the same ``now``) and stale entries dropped."""
    if type(raw) is not int or raw < 0 or type(now) is not int:
        raise ValueError(f"a recommendation is (int time, int replicas >= 0), got ({now!r}, {raw!r})")
    cutoff = now - window_seconds
    if type(history) is not CheckedHistory:
        history = tuple((int(t), int(r)) for t, r in history)
    kept = [e for e in history if cutoff < e[0] < now]
    kept.append((now, raw))
    return CheckedHistory(kept)


@dataclass(frozen=True)
class Stabilized:
    replicas: int
    detail: str


def stabilize(raw: int, current: int, history: History, window_seconds: int) -> Stabilized:
    """Apply a scale-up at once; hold a scale-down at the window's maximum raw recommendation.

    ``history`` must already contain the current raw recommendation (see :func:`update_history`).
    """
    if raw >= current:
        verb = "scale up" if raw > current else "no change"
        return Stabilized(raw, f"{verb}: raw {raw} >= current {current}, applied at once")
    window_max = max((r for _, r in history), default=raw)
    target = min(current, max(raw, window_max))
    if target == raw:
        detail = f"scale down {current} -> {raw}: no higher recommendation in the last {window_seconds}s"
    elif target == current:
        detail = f"hold {current}: raw {raw} is lower, but the last {window_seconds}s recommended up to {window_max}"
    else:
        detail = (
            f"scale down {current} -> {target} only: max recommendation of the last {window_seconds}s (raw now {raw})"
        )
    return Stabilized(target, detail)


@dataclass(frozen=True)
class Limited:
    replicas: int
    detail: str
    blocked: int  # replicas of a scale-up withheld by the limit


def limit_step(target: int, current: int, max_scale_up_step: int | None, max_scale_down_fraction: float) -> Limited:
    """Cap the change per decision: at most ``max_scale_up_step`` added, at most the fraction removed."""
    if target > current:
        if max_scale_up_step is not None and target - current > max_scale_up_step:
            limited = current + max_scale_up_step
            return Limited(
                limited,
                f"SCALE-UP LIMITED: +{target - current} wanted, max_scale_up_step {max_scale_up_step} "
                f"allows {current} -> {limited}; {target - limited} replicas withheld",
                target - limited,
            )
        limit = "unlimited" if max_scale_up_step is None else str(max_scale_up_step)
        return Limited(target, f"+{target - current} within max_scale_up_step ({limit})", 0)
    if target < current:
        max_removal = max(1, math.floor(current * max_scale_down_fraction + 1e-9))
        if current - target > max_removal:
            limited = current - max_removal
            return Limited(
                limited,
                f"-{current - target} wanted, max_scale_down_fraction {max_scale_down_fraction:g} of {current} "
                f"allows -{max_removal}: {current} -> {limited}",
                0,
            )
        return Limited(target, f"-{current - target} within max_scale_down_fraction {max_scale_down_fraction:g}", 0)
    return Limited(target, "no change", 0)
