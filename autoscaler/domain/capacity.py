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
from typing import NamedTuple

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


class WindowSelection(NamedTuple):
    """Which forecast steps the look-ahead window selected (always a run of consecutive steps, ``first`` up to but
    not including ``stop``), and whether the forecast fell short."""

    first: int
    stop: int
    lo: float  # window start, absolute seconds
    hi: float  # window end, absolute seconds
    note: str  # empty when the forecast covers the window; otherwise what was used instead

    @property
    def indices(self) -> NDArray[np.int64]:
        """The selected steps' indices."""
        return np.arange(self.first, self.stop, dtype=np.int64)

    def max_of(self, values: list[float]) -> float:
        """The largest of ``values`` (a band as ``Forecast.band_list`` gives it) over the selected steps."""
        return max(values[self.first:self.stop])


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
    forecast_end = float(forecast.start + horizon * step)
    if first <= last and forecast_end > hi and forecast.start <= lo:  # covered: the usual case, nothing to say
        return WindowSelection(first, last + 1, lo, hi, "")
    span = min(horizon, int(window_seconds // step) + 1)
    if first > last and forecast_end <= lo:
        note = (
            f"forecast ends at {_rel(forecast_end, now)}, before the window [{_rel(lo, now)}, {_rel(hi, now)}]: "
            f"used its last {span} step(s); ask for a longer horizon"
        )
        return WindowSelection(horizon - span, horizon, lo, hi, note)
    if first > last:
        note = (
            f"forecast starts at {_rel(float(forecast.start), now)}, after the window "
            f"[{_rel(lo, now)}, {_rel(hi, now)}]: used its first {span} step(s)"
        )
        return WindowSelection(0, span, lo, hi, note)
    notes = []
    if forecast_end <= hi:
        notes.append(f"forecast ends at {_rel(forecast_end, now)}, short of the window end {_rel(hi, now)}")
    if forecast.start > lo:
        notes.append(f"forecast starts at {_rel(float(forecast.start), now)}, after the window start {_rel(lo, now)}")
    note = "; ".join(notes) + ": used the covered part" if notes else ""
    return WindowSelection(first, last + 1, lo, hi, note)


# The ``detail`` texts below are written when read (``Step.lazy``: a replay's decisions are never read), from the
# numbers the result keeps; ``policy`` is a frozen value.


class ForecastNeed(NamedTuple):
    """Band demand over the window and the replicas it needs."""

    demand: float  # max of band(level) over the selected steps, req/s
    replicas: int
    window: WindowSelection
    policy: ScalingPolicy
    now: int

    @property
    def detail(self) -> str:
        window, now = self.window, self.now
        detail = (
            f"p{self.policy.level} demand {self.demand:.1f} req/s over [{_rel(window.lo, now)}, "
            f"{_rel(window.hi, now)}] / {self.policy.capacity_per_replica:g} req/s per replica -> {self.replicas}"
        )
        if window.note:
            detail += f" ({window.note})"
        return detail


def forecast_need(forecast: Forecast, policy: ScalingPolicy, now: int, lead_seconds: float) -> ForecastNeed:
    """``ceil(max band(level) over the look-ahead window / capacity)``. Raises ``KeyError`` without the band."""
    band = forecast.band_list(policy.level)
    window = select_window(forecast, now, lead_seconds, policy.lookahead_window_seconds)
    demand = max(0.0, window.max_of(band))
    replicas = replicas_for(demand, policy.capacity_per_replica)
    return ForecastNeed(demand, replicas, window, policy, now)


class LeadGap(NamedTuple):
    """Replicas the forecast needs *before* ``now + lead``: the ones a scale-down must not remove."""

    demand: float
    replicas: int
    window: WindowSelection
    level: int
    now: int

    @property
    def detail(self) -> str:
        detail = (f"p{self.level} demand {self.demand:.1f} req/s over [t+0s, {_rel(self.window.hi, self.now)}] "
                  f"-> {self.replicas}")
        if self.window.note:
            detail += f" ({self.window.note})"
        return detail


def lead_gap_need(forecast: Forecast, policy: ScalingPolicy, now: int, lead_seconds: float) -> LeadGap:
    """``ceil(max band(level) over [now, now + lead] / capacity)``.

    A replica removed now cannot serve again before ``now + lead``, so demand inside the lead is a
    reason to *keep* replicas, though never to add them (an added one would arrive too late). This
    closes a gap of the plain look-ahead window when the lead is longer than the stabilisation
    window: the recommendations that once covered ``[now, now + lead]`` have already expired.
    """
    band = forecast.band_list(policy.level)
    window = select_window(forecast, now, 0.0, lead_seconds)
    demand = max(0.0, window.max_of(band))
    replicas = replicas_for(demand, policy.capacity_per_replica)
    return LeadGap(demand, replicas, window, policy.level, now)


class WarmPool(NamedTuple):
    """Spare replicas for the forecast's tail, and what they were sized on (for ``detail``)."""

    replicas: int
    level: int
    warm_pool_level: int
    tail_level: int | None = None  # the band the tail was read from; None: the p(level) - mean spread stood in
    tail_demand: float = 0.0
    tail_replicas: int = 0
    need_replicas: int = 0

    @property
    def detail(self) -> str:
        level = self.level
        if self.warm_pool_level <= level:
            return f"auto: covers up to p{self.warm_pool_level}, no tail above the p{level} need -> 0"
        if self.tail_level is not None:
            source = f"p{self.tail_level} demand"
        else:
            source = f"no band above p{level}; p{level} + (p{level} - mean) spread"
        return (
            f"auto: {source} {self.tail_demand:.1f} req/s over the window -> {self.tail_replicas} replicas, "
            f"minus the p{level} need {self.need_replicas} -> {self.replicas} spare"
        )


def tail_band_level(forecast: Forecast, policy: ScalingPolicy) -> int | None:
    """The highest band in ``(level, warm_pool_level]`` the forecast has, or None."""
    above = [k for k in forecast.quantiles if policy.level < k <= policy.warm_pool_level]
    return max(above) if above else None


def auto_warm_pool(forecast: Forecast, policy: ScalingPolicy, need: ForecastNeed) -> WarmPool:
    """Spare replicas for the forecast's tail above ``band(level)`` over the same window (see module doc)."""
    if policy.warm_pool_level <= policy.level:
        return WarmPool(0, policy.level, policy.warm_pool_level)
    first, stop = need.window.first, need.window.stop
    band = forecast.band_list(policy.level)[first:stop]
    tail_level = tail_band_level(forecast, policy)
    # the largest of the elementwise max(tail band, band), or of band + max(band - mean, 0): on floats, as numpy
    # would compute them element by element
    if tail_level is not None:
        tail = max(max(forecast.band_list(tail_level)[first:stop]), max(band))
    else:
        tail = max(b + max(b - m, 0.0) for b, m in zip(band, forecast.band_list(None)[first:stop], strict=True))
    tail_demand = max(0.0, tail)
    tail_replicas = replicas_for(tail_demand, policy.capacity_per_replica)
    warm = max(0, tail_replicas - need.replicas)
    return WarmPool(warm, policy.level, policy.warm_pool_level, tail_level, tail_demand, tail_replicas, need.replicas)


def reactive_floor(current_demand: float, capacity_per_replica: float) -> int:
    """Replicas the demand observed right now needs: answers a spike the forecast missed."""
    return replicas_for(current_demand, capacity_per_replica)


class Surprise(NamedTuple):
    """The reactive floor carried forward with the forecast's spread (see ``surprise_floor``)."""

    replicas: int
    current_demand: float
    top_level: int
    spread: float
    demand: float

    @property
    def detail(self) -> str:
        return (
            f"observed {self.current_demand:.1f} req/s + the forecast's p{self.top_level} spread at the lead "
            f"({self.spread:.1f}) -> {self.demand:.1f} req/s -> {self.replicas}"
        )


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
    i_lead = int(min(max((now + lead_seconds - forecast.start) // step, 0), forecast.horizon - 1))
    spread = forecast.band_list(top_level)[i_lead] - forecast.band_list(None)[i_lead]
    if not math.isfinite(spread) or spread <= 0:
        return None
    demand = current_demand + spread
    replicas = replicas_for(demand, policy.capacity_per_replica)
    return Surprise(replicas, current_demand, top_level, spread, demand)
