"""Forecast -> replicas: which part of the forecast matters, and how much capacity it asks for.

Why a module of its own: the arithmetic that turns a banded forecast into replica counts (the
look-ahead window, the band, the warm pool, the reactive floor) is the part of the planner most
worth testing in isolation, and the simulator and benchmarks reuse it directly.

The look-ahead window. A replica ordered now serves from ``now + lead`` on, so demand before that
cannot be helped by this decision and demand far later will be decided again. The planner sizes for
the *maximum* of the band over ``[now + lead, now + lead + window]`` ("scale up early, scale down
late"). A forecast value is a rate over its bin ``[t_i, t_i + step)``, so a step counts when its bin
*overlaps* the window (for a step no wider than the window this is "its time falls in the window",
widened by the one bin already under way at the window's start); a bin that ends before the window
starts or begins after it ends does not count. When the forecast does not reach the window, its last
steps (as many as the window spans) stand in, and the decision says so.

The automatic warm pool. Replicas are sized at ``band(level)`` (e.g. p90): demand exceeds that one
step in ten. The warm pool covers the tail above it, up to a higher band (``warm_pool_level``, p95
by default, or the highest band in between that the forecast has): ``warm = ceil(tail / capacity) -
need``. Kept as ready *replicas* it answers the tail instantly; kept as ready *nodes* it only saves
the node start-up, at the price of idle GPUs instead of idle replicas. With ``warm_pool_level`` equal
to ``level`` there is no tail to cover and the pool is 0. Without a band above ``level``
the spread ``band(level) - mean`` stands in for the tail above the band: for a roughly normal error
p90 - mean is 1.28 sigma while p99 - p90 is 1.04 sigma, so the stand-in errs on the generous side.
Written as ``max(need, ceil(tail / capacity))`` in total, the pool is monotone: a forecast whose
bands and mean all rise never yields fewer replicas (raising the mean *alone* narrows the spread and
can shrink the stand-in pool; that is a narrower forecast, not more of it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from autoscaler.domain.coldstart import ColdStartProfile
from autoscaler.domain.types import ScalingPolicy
from models.types import Forecast

# Rates divided by capacity land a hair above an integer through float noise (10.000000000002 / 5);
# without this tolerance that noise would buy a whole GPU replica.
_CEIL_TOLERANCE = 1e-9


def replicas_for(rate: float, capacity_per_replica: float) -> int:
    """Replicas needed to serve ``rate`` req/s: ``ceil(rate / capacity)``, never negative."""
    if not math.isfinite(rate) or rate <= 0:
        return 0
    return max(0, math.ceil(rate / capacity_per_replica - _CEIL_TOLERANCE))


def required_horizon_seconds(policy: ScalingPolicy, cold_start: ColdStartProfile) -> int:
    """How far ahead (from ``now``) a forecast must reach for the planner's window to be covered.

    Uses the worst-case lead (a node must be provisioned) so the horizon suffices whatever the GPU
    situation; the controller asks its forecaster for ``ceil(this / step) + 1`` steps (the extra
    step covers a forecast that starts up to one step before ``now``).
    """
    return math.ceil(cold_start.lead_seconds(needs_node=True) + policy.lookahead_window_seconds)


def required_horizon_steps(policy: ScalingPolicy, cold_start: ColdStartProfile, step_seconds: int) -> int:
    """``required_horizon_seconds`` in forecast steps of ``step_seconds``, plus one step of slack."""
    if step_seconds <= 0:
        raise ValueError(f"step_seconds must be positive, got {step_seconds}")
    return math.ceil(required_horizon_seconds(policy, cold_start) / step_seconds) + 1


@dataclass(frozen=True)
class WindowSelection:
    """Which forecast steps the look-ahead window selected, and whether the forecast fell short."""

    indices: NDArray[np.int64]
    lo: float  # window start, absolute seconds
    hi: float  # window end, absolute seconds
    note: str  # empty when the forecast covers the window; otherwise what was used instead


def _rel(t: float, now: int) -> str:
    return f"t+{t - now:.0f}s"


def select_window(forecast: Forecast, now: int, lead_seconds: float, window_seconds: float) -> WindowSelection:
    """The forecast steps whose bins overlap ``[now + lead, now + lead + window]``.

    Falls back to the forecast's last steps (it ends before the window) or first steps (it starts
    after the window), as many as the window spans, and explains the fallback in ``note``.
    """
    if forecast.horizon == 0:
        raise ValueError("forecast has no steps")
    lo = now + lead_seconds
    hi = lo + window_seconds
    step = forecast.step_seconds
    horizon = forecast.horizon
    # bin i covers [start + i*step, start + (i+1)*step): it overlaps the window when it starts at or before hi and
    # ends after lo (arithmetic on the regular grid; the planner asks this on every decision)
    first = max(0, math.floor((lo - forecast.start) / step))
    last = min(horizon - 1, math.floor((hi - forecast.start) / step))
    overlap = np.arange(first, last + 1, dtype=np.int64) if first <= last else np.empty(0, dtype=np.int64)
    span = min(horizon, int(window_seconds // step) + 1)
    forecast_end = float(forecast.start + horizon * step)
    if overlap.size == 0 and forecast_end <= lo:
        idx = np.arange(forecast.horizon - span, forecast.horizon, dtype=np.int64)
        note = (
            f"forecast ends at {_rel(forecast_end, now)}, before the window [{_rel(lo, now)}, {_rel(hi, now)}]: "
            f"used its last {span} step(s); ask for a longer horizon"
        )
        return WindowSelection(idx, lo, hi, note)
    if overlap.size == 0:
        idx = np.arange(0, span, dtype=np.int64)
        note = (
            f"forecast starts at {_rel(float(forecast.start), now)}, after the window "
            f"[{_rel(lo, now)}, {_rel(hi, now)}]: used its first {span} step(s)"
        )
        return WindowSelection(idx, lo, hi, note)
    notes = []
    if forecast_end <= hi:
        notes.append(f"forecast ends at {_rel(forecast_end, now)}, short of the window end {_rel(hi, now)}")
    if forecast.start > lo:
        notes.append(f"forecast starts at {_rel(float(forecast.start), now)}, after the window start {_rel(lo, now)}")
    note = "; ".join(notes) + ": used the covered part" if notes else ""
    return WindowSelection(overlap, lo, hi, note)


@dataclass(frozen=True)
class ForecastNeed:
    """Band demand over the window and the replicas it needs."""

    demand: float  # max of band(level) over the selected steps, req/s
    replicas: int
    window: WindowSelection
    detail: str


def forecast_need(forecast: Forecast, policy: ScalingPolicy, now: int, lead_seconds: float) -> ForecastNeed:
    """``ceil(max band(level) over the look-ahead window / capacity)``. Raises ``KeyError`` without the band."""
    band = forecast.band(policy.level)
    window = select_window(forecast, now, lead_seconds, policy.lookahead_window_seconds)
    demand = max(0.0, float(np.max(band[window.indices])))
    replicas = replicas_for(demand, policy.capacity_per_replica)
    detail = (
        f"p{policy.level} demand {demand:.1f} req/s over [{_rel(window.lo, now)}, {_rel(window.hi, now)}] "
        f"/ {policy.capacity_per_replica:g} req/s per replica -> {replicas}"
    )
    if window.note:
        detail += f" ({window.note})"
    return ForecastNeed(demand, replicas, window, detail)


@dataclass(frozen=True)
class LeadGap:
    """Replicas the forecast needs *before* ``now + lead``: the ones a scale-down must not remove."""

    demand: float
    replicas: int
    detail: str


def lead_gap_need(forecast: Forecast, policy: ScalingPolicy, now: int, lead_seconds: float) -> LeadGap:
    """``ceil(max band(level) over [now, now + lead] / capacity)``.

    A replica removed now cannot serve again before ``now + lead``, so demand inside the lead is a
    reason to *keep* replicas, though never to add them (an added one would arrive too late). This
    closes a gap of the plain look-ahead window when the lead is longer than the stabilisation
    window: the recommendations that once covered ``[now, now + lead]`` have already expired.
    """
    band = forecast.band(policy.level)
    window = select_window(forecast, now, 0.0, lead_seconds)
    demand = max(0.0, float(np.max(band[window.indices])))
    replicas = replicas_for(demand, policy.capacity_per_replica)
    detail = f"p{policy.level} demand {demand:.1f} req/s over [t+0s, {_rel(window.hi, now)}] -> {replicas}"
    if window.note:
        detail += f" ({window.note})"
    return LeadGap(demand, replicas, detail)


@dataclass(frozen=True)
class WarmPool:
    replicas: int
    detail: str


def tail_band_level(forecast: Forecast, policy: ScalingPolicy) -> int | None:
    """The highest band in ``(level, warm_pool_level]`` the forecast has, or None."""
    above = [k for k in forecast.quantiles if policy.level < k <= policy.warm_pool_level]
    return max(above) if above else None


def auto_warm_pool(forecast: Forecast, policy: ScalingPolicy, need: ForecastNeed) -> WarmPool:
    """Spare replicas for the forecast's tail above ``band(level)`` over the same window (see module doc)."""
    if policy.warm_pool_level <= policy.level:
        return WarmPool(0, f"auto: covers up to p{policy.warm_pool_level}, no tail above the p{policy.level} need -> 0")
    idx = need.window.indices
    band = forecast.band(policy.level)[idx]
    tail_level = tail_band_level(forecast, policy)
    if tail_level is not None:
        tail = np.maximum(forecast.band(tail_level)[idx], band)
        source = f"p{tail_level} demand"
    else:
        tail = band + np.maximum(band - forecast.mean[idx], 0.0)
        source = f"no band above p{policy.level}; p{policy.level} + (p{policy.level} - mean) spread"
    tail_demand = max(0.0, float(np.max(tail)))
    tail_replicas = replicas_for(tail_demand, policy.capacity_per_replica)
    warm = max(0, tail_replicas - need.replicas)
    detail = (
        f"auto: {source} {tail_demand:.1f} req/s over the window -> {tail_replicas} replicas, "
        f"minus the p{policy.level} need {need.replicas} -> {warm} spare"
    )
    return WarmPool(warm, detail)


def reactive_floor(current_demand: float, capacity_per_replica: float) -> int:
    """Replicas the demand observed right now needs: answers a spike the forecast missed."""
    return replicas_for(current_demand, capacity_per_replica)


@dataclass(frozen=True)
class Surprise:
    """The reactive floor carried forward with the forecast's spread (see ``surprise_floor``)."""

    replicas: int
    detail: str


def surprise_floor(
    forecast: Forecast, policy: ScalingPolicy, now: int, lead_seconds: float, current_demand: float
) -> Surprise | None:
    """Replicas for the observed demand plus the forecast's own uncertainty spread at the lead.

    Why: the plain reactive floor sizes a surprise at 100% of what is observed *now*, so a burst that
    keeps rising (a big client ramping, a traffic shift) is short again one start-up later, while an
    HPA keeps its target's headroom. Replicas asked now land after the lead, and by then demand can
    have moved as far as the forecast's uncertainty says: so the floor is
    ``observed + (band_top - mean)`` at the lead (``band_top`` = the warm-pool band, p95 by default).
    While the forecast holds (observed near its mean) this is below the forecast's own need and
    costs nothing; it binds only when demand has left the forecast behind. It is additive (not
    ``observed x band/mean``) and has no trigger, so it never decreases when the forecast's bands
    shift up or widen: more forecast never means fewer replicas. ``None`` without a usable spread.
    """
    if not math.isfinite(current_demand) or current_demand <= 0 or forecast.horizon == 0:
        return None
    step = forecast.step_seconds
    top_level = tail_band_level(forecast, policy) or policy.level
    i_lead = int(np.clip((now + lead_seconds - forecast.start) // step, 0, forecast.horizon - 1))
    spread = float(forecast.band(top_level)[i_lead]) - float(forecast.mean[i_lead])
    if not math.isfinite(spread) or spread <= 0:
        return None
    demand = current_demand + spread
    replicas = replicas_for(demand, policy.capacity_per_replica)
    detail = (
        f"observed {current_demand:.1f} req/s + the forecast's p{top_level} spread at the lead ({spread:.1f}) "
        f"-> {demand:.1f} req/s -> {replicas}"
    )
    return Surprise(replicas, detail)
