"""One Deployment's forecaster and its cadence: when it is fitted, what it has absorbed, how far it forecasts.

Why one keeper: the controller and the simulator each used to decide these on their own, and the copies had
drifted (the simulator refit more often while history was short, forecast from one bin more, and not as far
ahead), so the simulator scored a controller that does not exist. Both now hold a ``ForecastKeeper`` per
Deployment and ask it for the forecast; the rules below are the controller's.

The rules, given ``history``, the bins that have *ended* by ``now`` (oldest first):

* the newest ended bin may still change (a late scrape, a rate window still filling), so it is the demand
  the planner sees now but is not absorbed by the model; the model has absorbed every bin before it;
* the model is fitted on the newest ``history_seconds`` of those settled bins, from the first observed one (bins
  missing before a Deployment's metrics began are not history: the controller's range read returns them as
  missing, a trace has none), the first time there are any,
  and again once ``refit_seconds`` (daily) have passed since the last fit, and whenever the history no longer
  reaches back to what the model last saw (a gap longer than the history kept). While the observed history is
  shorter than the refit interval, it is also refitted each time that history has doubled since the last fit
  (2, 4, 8, ... bins up to a day): a Deployment seen for the first time would otherwise be forecast for its
  whole first day by a model of its first minutes (the chain falls back to a model the short history supports,
  and re-chooses as the history grows); these fits are of short series, cheap, and under the caller's fit
  budget like any other. In between, each newly settled bin is absorbed with ``update``;
* a training gang is placed around the median forecast of the model as it is (``gpu_points``), from the same
  state in both drivers;
* a forecast reaches the planner's horizon (lead time + look-ahead, ``required_horizon_steps``) plus one node
  start-up (the money stage orders nodes that much further ahead), and at least the profile's horizon (what
  the status and the metrics report), whichever is longer.

The budget for fitting (how many fits one tick may start) is the caller's: the controller spreads a fleet's
daily refits over ticks, stalest first, by asking ``needs_fit`` and passing ``may_fit=False`` when over budget;
the simulator has one Deployment and never defers.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Sequence

import numpy as np

from autoscaler.domain.capacity import required_horizon_steps
from autoscaler.domain.coldstart import ColdStartProfile
from autoscaler.domain.gangs import MAX_PLACEMENT_SECONDS, replica_gpu_points
from autoscaler.domain.types import ScalingPolicy
from models.base import Forecaster
from models.types import SECONDS_PER_DAY, Forecast, TrafficSeries


def forecast_steps(policy: ScalingPolicy, cold: ColdStartProfile, step_seconds: int, horizon_seconds: int) -> int:
    """How many bins a forecast covers: the planner's horizon plus one node start-up, at least ``horizon_seconds``
    (the profile's horizon, reported in the status and the metrics) and one step beyond it."""
    return max(required_horizon_steps(policy, cold, step_seconds)
               + math.ceil(cold.node_lead_seconds() / step_seconds),
               math.ceil(horizon_seconds / step_seconds) + 1)


def forecast_levels(policy: ScalingPolicy) -> tuple[int, ...]:
    """The quantiles a forecast carries: the median (gang placement), the planner's level and the warm pool's."""
    return tuple(sorted({50, policy.level, policy.warm_pool_level}))


def has_evidence(history: TrafficSeries | None) -> bool:
    """Whether ``history`` can be forecast from: at least one settled bin with an observed value."""
    if history is None or len(history) < 2:
        return False
    values = history.values
    # the newest settled bin first: observed nearly always, and asked at every decision over up to 14 days of bins
    return math.isfinite(values[-2]) or bool(np.any(np.isfinite(values[:-1])))


class ForecastKeeper:
    """The fitted forecaster of one Deployment and its cadence (see the module docstring for the rules).

    ``key`` names what the model was built for (e.g. the model alias and history length): a caller whose
    configuration changes compares it and starts a new keeper. Methods that touch the model drop it when the
    forecaster raises and re-raise, so the next call fits afresh and the caller decides how to report it.
    """

    def __init__(self, make_model: Callable[[], Forecaster], *, refit_seconds: int = SECONDS_PER_DAY,
                 history_seconds: int = 14 * SECONDS_PER_DAY, key: Hashable = None) -> None:
        self.make_model = make_model
        self.refit_seconds = refit_seconds
        self.history_seconds = history_seconds
        self.key = key
        self.model: Forecaster | None = None
        self.fitted_at = 0  # the ``now`` of the last fit
        self.fitted_span = 0  # seconds of observed history the last fit saw (from its first observed bin)
        self.first_observed = 0  # start of the first observed bin the last fit trained on
        self.seen_until = 0  # end of the newest bin the model has absorbed: where its forecasts start
        self.fits = 0
        self._version = 0  # bumped by every fit and update: a cached forecast is reused only within one version
        self._cached: tuple[tuple[int, int, tuple[int, ...]], Forecast] | None = None
        self.last: Forecast | None = None  # what ``forecast`` last returned (what the planner got)

    def must_fit(self, history: TrafficSeries) -> bool:
        """No model can forecast from ``history``: none yet, or it last saw bins older than all of it."""
        return self.model is None or self.seen_until < history.start

    def needs_fit(self, history: TrafficSeries, now: int) -> bool:
        """A fit is due at ``now``: ``must_fit``, the refit interval has passed since the last fit, or a young
        history (shorter than the refit interval at the last fit) has doubled since."""
        if self.must_fit(history) or now - self.fitted_at >= self.refit_seconds:
            return True
        if self.fitted_span >= self.refit_seconds:
            return False
        # O(1) per tick: the first observed bin is known from the last fit (the history only grows or slides on)
        span = history.end - history.step_seconds - max(self.first_observed, history.start)
        return span >= 2 * self.fitted_span

    def fit(self, history: TrafficSeries, now: int) -> None:
        """Fit a fresh model on the newest ``history_seconds`` of the settled bins of ``history``."""
        step = history.step_seconds
        window = min(len(history) - 1, self.history_seconds // step)
        train = history.slice(len(history) - 1 - window, len(history) - 1)
        observed = np.flatnonzero(np.isfinite(train.values))
        if observed.size:
            train = train.slice(int(observed[0]), len(train))
        self.model = None
        try:
            model = self.make_model().fit(train)
        finally:
            self._bump()
        self.model, self.fitted_at, self.seen_until = model, now, history.end - step
        self.first_observed = train.start
        self.fitted_span = max(self.seen_until - train.start, step)
        self.fits += 1

    def update(self, history: TrafficSeries) -> None:
        """Absorb the bins of ``history`` that settled since the model last saw one."""
        settled_end = history.end - history.step_seconds
        if self.model is None or settled_end <= self.seen_until:
            return
        lo = (self.seen_until - history.start) // history.step_seconds
        try:
            self.model.update(history.slice(lo, len(history) - 1))
        except BaseException:
            self.model = None
            raise
        finally:
            self._bump()
        self.seen_until = settled_end

    def advance(self, history: TrafficSeries, now: int, *, may_fit: bool = True) -> bool:
        """Bring the model up to date at ``now``: fit it when due and ``may_fit``, else absorb the newly settled
        bins. False when there is no model to forecast with (none yet and fitting not allowed)."""
        if self.needs_fit(history, now):
            if may_fit:
                self.fit(history, now)
                return True
            if self.must_fit(history):
                return False
        self.update(history)
        return self.model is not None

    def predict(self, steps: int, levels: Sequence[int]) -> Forecast:
        """The current model's forecast of ``steps`` bins from ``seen_until``. The same forecast object while the
        model has not changed: the controller asks every tick, the model changes once per bin."""
        if self.model is None:
            raise ValueError("no fitted model to forecast with")
        key = (self._version, steps, tuple(levels))
        if self._cached is not None and self._cached[0] == key:
            return self._cached[1]
        try:
            forecast = self.model.predict(steps, list(levels))
        except BaseException:
            self.model = None
            self._bump()
            raise
        self._cached = (key, forecast)
        return forecast

    def forecast(self, history: TrafficSeries | None, now: int, policy: ScalingPolicy, cold: ColdStartProfile,
                 horizon_seconds: int, *, may_fit: bool = True) -> Forecast | None:
        """The forecast the planner gets at ``now`` from ``history`` (the bins ended by ``now``): the model
        advanced (``advance``), then ``forecast_steps`` bins at ``forecast_levels``. None without evidence or
        without a model (fitting deferred)."""
        self.last = None
        if history is None:
            return None
        self.last = self.forecast_at(history, now, forecast_steps(policy, cold, history.step_seconds,
                                                                  horizon_seconds), forecast_levels(policy),
                                     may_fit=may_fit)
        return self.last

    def forecast_at(self, history: TrafficSeries, now: int, steps: int, levels: Sequence[int], *,
                    may_fit: bool = True) -> Forecast | None:
        """``forecast`` for ``steps`` bins at ``levels`` chosen by the caller (a self-tuning replay asks every band
        its operating points plan on, as far as the farthest of them looks), without touching ``last``."""
        if not has_evidence(history) or not self.advance(history, now, may_fit=may_fit):
            return None
        return self.predict(steps, levels)

    def gpu_points(self, start: int, end: int, step_seconds: int, *, capacity_per_replica: float, min_replicas: int,
                   max_replicas: int, gpus_per_replica: int) -> list[tuple[int, float]]:
        """The GPUs the Deployment's replicas hold from ``start`` to ``end`` (at least one bin, at most
        ``MAX_PLACEMENT_SECONDS``), from the *median* forecast of the model as it is (never refitted for this), as
        ``(time, GPUs)`` change points: what a training gang is placed around. Why the median and not the planning
        band: the upper band widens with the lead time, so over a day it rates the earliest start best whatever
        the day looks like; the median finds the trough, and the ceiling, enforced every tick, still protects
        inference if it is wrong. Raises ValueError without a model; a forecaster's own error propagates."""
        model = self.model
        if model is None:
            raise ValueError("no fitted model to forecast with")
        span = min(max(end, start + step_seconds), start + MAX_PLACEMENT_SECONDS) - self.seen_until
        forecast = model.predict(max(1, math.ceil(span / step_seconds) + 1), [50])
        band = forecast.quantiles.get(50, forecast.mean)
        return replica_gpu_points(
            forecast.timestamps().tolist(), band.tolist(), capacity_per_replica=capacity_per_replica,
            min_replicas=min_replicas, max_replicas=max_replicas, gpus_per_replica=gpus_per_replica,
        )

    def _bump(self) -> None:
        self._version += 1
        self._cached = None
