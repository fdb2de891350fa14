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

import itertools
import math
from typing import NamedTuple

History = tuple[tuple[int, int], ...]


class CheckedHistory(tuple[tuple[int, int], ...]):
    """A history ``update_history`` built: ``(int time, int replicas >= 0)`` pairs in time order. ``WorkloadState``
    trusts it instead of checking every entry again at each of the planner's decisions (a self-tuning replay makes
    tens of thousands of them), and ``update_history`` drops its expired entries from the front."""

    __slots__ = ()


def update_history(history: History, now: int, raw: int, window_seconds: int) -> History:
    """History with ``(now, raw)`` added (replacing an entry at the same ``now``) and stale entries dropped."""
    if type(raw) is not int or raw < 0 or type(now) is not int:
        raise ValueError(f"a recommendation is (int time, int replicas >= 0), got ({now!r}, {raw!r})")
    cutoff = now - window_seconds
    if type(history) is CheckedHistory:
        # in time order: the entries kept (``cutoff < time < now``) are one run, after the expired ones and before
        # any at or after ``now``
        lo, hi = 0, len(history)
        while lo < hi and history[lo][0] <= cutoff:
            lo += 1
        while hi > lo and history[hi - 1][0] >= now:
            hi -= 1
        return CheckedHistory((*history[lo:hi], (now, raw)))
    checked = tuple((int(t), int(r)) for t, r in history)
    kept = [e for e in checked if cutoff < e[0] < now]
    kept.append((now, raw))
    if all(a[0] <= b[0] for a, b in itertools.pairwise(kept)):
        return CheckedHistory(kept)
    return tuple(kept)  # out of time order (a hand-made history): checked again when it comes back


# ``detail`` below is written when read, from the numbers each result keeps (a self-tuning replay never reads it).


class Stabilized(NamedTuple):
    replicas: int
    raw: int
    current: int
    window_max: int
    window_seconds: int

    @property
    def detail(self) -> str:
        raw, current, target, window_seconds = self.raw, self.current, self.replicas, self.window_seconds
        if raw >= current:
            verb = "scale up" if raw > current else "no change"
            return f"{verb}: raw {raw} >= current {current}, applied at once"
        if target == raw:
            return f"scale down {current} -> {raw}: no higher recommendation in the last {window_seconds}s"
        if target == current:
            return (f"hold {current}: raw {raw} is lower, but the last {window_seconds}s recommended up to "
                    f"{self.window_max}")
        return (f"scale down {current} -> {target} only: max recommendation of the last {window_seconds}s "
                f"(raw now {raw})")


def stabilize(raw: int, current: int, history: History, window_seconds: int) -> Stabilized:
    """Apply a scale-up at once; hold a scale-down at the window's maximum raw recommendation.

    ``history`` must already contain the current raw recommendation (see :func:`update_history`).
    """
    if raw >= current:
        return Stabilized(raw, raw, current, raw, window_seconds)
    window_max = max([r for _, r in history], default=raw)
    target = min(current, max(raw, window_max))
    return Stabilized(target, raw, current, window_max, window_seconds)


class Limited(NamedTuple):
    replicas: int
    target: int
    current: int
    max_scale_up_step: int | None
    max_scale_down_fraction: float
    blocked: int  # replicas of a scale-up withheld by the limit

    @property
    def detail(self) -> str:
        target, current, limited = self.target, self.current, self.replicas
        up, fraction = self.max_scale_up_step, self.max_scale_down_fraction
        if target > current:
            if limited != target:
                return (f"SCALE-UP LIMITED: +{target - current} wanted, max_scale_up_step {up} "
                        f"allows {current} -> {limited}; {target - limited} replicas withheld")
            limit = "unlimited" if up is None else str(up)
            return f"+{target - current} within max_scale_up_step ({limit})"
        if target < current:
            if limited != target:
                return (f"-{current - target} wanted, max_scale_down_fraction {fraction:g} of {current} "
                        f"allows -{current - limited}: {current} -> {limited}")
            return f"-{current - target} within max_scale_down_fraction {fraction:g}"
        return "no change"


def limit_step(target: int, current: int, max_scale_up_step: int | None, max_scale_down_fraction: float) -> Limited:
    """Cap the change per decision: at most ``max_scale_up_step`` added, at most the fraction removed."""
    limited, blocked = target, 0
    if target > current:
        if max_scale_up_step is not None and target - current > max_scale_up_step:
            limited = current + max_scale_up_step
            blocked = target - limited
    elif target < current:
        max_removal = max(1, math.floor(current * max_scale_down_fraction + 1e-9))
        if current - target > max_removal:
            limited = current - max_removal
    return Limited(limited, target, current, max_scale_up_step, max_scale_down_fraction, blocked)
