"""Our policy in the simulator: the controller's engine (forecast keeper and decision), on trace time.

Why it exists: the simulation is only evidence for the controller if it runs the same code. This
module drives the engine (``autoscaler.engine``) exactly as the controller loop does, with the trace
standing in for Prometheus:

* the forecast comes from the controller's own ``ForecastKeeper`` (``autoscaler.engine.forecasting``), asked at
  every decision as the controller asks at every tick, with the bins that have ended by then: the newest of
  them is not absorbed yet (it may still change), the model is fitted at the first decision with one settled
  bin and refit daily on the newest ``history_seconds`` (14 days), absorbing each settled bin with ``update``
  in between, and it forecasts the planner's horizon plus one node start-up. A test replays a trace through
  this policy and through the controller's tick and requires the same forecasts at every tick;
* each decision is the engine's (``autoscaler.engine.deciding.decide``, the function the controller's tick
  calls) on what the controller would observe: the replicas, the demand over the last minute as the reactive
  floor (what the controller's instant rate query answers: the ticks before this one, not the bin in progress,
  which the trace knows and Prometheus does not; the newest ended bin when that is missing), the free GPUs on the
  Ready nodes of its NodePool when the cluster's pool is a named one (a fleet's: the controller reads them for a
  Deployment that names its NodePool; a single replay's private pool names none, so a new replica is planned as
  waiting for a node there, as the controller plans a Deployment without the annotation) and the pods waiting for a
  node (Pending unschedulable, as the API server shows them until the node joins); its stabilisation history is
  passed back in, as the controller stores it between ticks. A test replays a trace through this policy and
  through the controller's tick on a simulated cluster and requires the same decision at every tick;
* with a training gang that has a window (``autoscaler.simulation.money``), ``inference_gpus_ahead`` gives
  ``place_gang`` the inference GPUs to place it around: the keeper's ``gpu_points`` (the median forecast over the
  window + run), as the controller's money stage asks them, when the gang is submitted (and again if it is
  preempted);
* with ``retune`` (the profile's ``self_tune``, on by default, as in the controller), a self-tuning replay of the
  history so far (``autoscaler.simulation.tuning``) runs on the controller's schedule (``engine.retuning``: hourly
  until a point can be chosen, then daily and after each refit): the policy then runs at the operating point chosen
  for its latency objective from the next decision on, as the controller runs it (its replay runs after the
  tick's plans; the sameness test holds the two equal with self-tuning on), and before the first choice at the
  tuner's start point (``simulation.tuning.start_policy``);
* the cold-start profile is the configured pod and node start-ups. The simulated start-ups are
  exactly those, so feeding them back through ``observe`` would change nothing; the controller does
  feed real ones back.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import Any, Protocol

import numpy as np

from autoscaler.config.schema import ForecastProfile
from autoscaler.domain.coldstart import ColdStartProfile
from autoscaler.domain.types import ScalingDecision, ScalingPolicy
from autoscaler.engine.deciding import CURRENT_DEMAND_WINDOW_SECONDS, Decided, Observed, decide
from autoscaler.engine.forecasting import ForecastKeeper
from autoscaler.engine.retuning import tuning_due
from autoscaler.engine.spare import exposure, held_spares, member_terms
from autoscaler.simulation.cluster import EMPTIEST_NODE_FIRST, Cluster, ClusterConfig, ScaleIn
from autoscaler.simulation.engine import PredictiveFactory, SimulationConfig
from models.base import Forecaster
from models.types import SECONDS_PER_DAY, Forecast, TrafficSeries


class TuningOutcome(Protocol):
    """What this policy reads of a self-tuning replay (``autoscaler.simulation.tuning.Tuning`` is one; declared here so
    the policy does not import the tuner, which imports the policy to replay it)."""

    @property
    def chosen(self) -> int | None: ...
    @property
    def chosen_utilisation(self) -> float: ...
    @property
    def met(self) -> bool: ...
    @property
    def cpu_seconds(self) -> float: ...
    @property
    def slo_attainment(self) -> float: ...
    @property
    def slo_wait_seconds(self) -> float: ...
    @property
    def chosen_label(self) -> str | None: ...


# A self-tuning replay under way: calling it waits for it and returns the policy to run and the replay's outcome.
PendingTuning = Callable[[], tuple[ScalingPolicy, TuningOutcome]]


class Retune(Protocol):
    """Self-tuning hook (``autoscaler.simulation.tuning.retuner`` builds one).

    Called with the history so far, the untuned policy, the start-ups, the GPUs per replica and the last tuning it
    returned, it answers the replay, started. Why started and not done: a fleet starts the replays that fall due at
    one tick on every Deployment before it waits for the first (they may run in worker processes meanwhile), and runs
    each chosen point from the next decision, as one Deployment alone would. ``start``: the policy to run before any
    replay has chosen a point (the controller's too)."""

    def __call__(self, history: TrafficSeries, base: ScalingPolicy, cold_start: ColdStartProfile,
                 gpus_per_replica: int, previous: Any) -> PendingTuning: ...

    def start(self, base: ScalingPolicy) -> ScalingPolicy: ...


# What the labels of the points a self-tuned run names mean (``domain.types.point_label``, as ``explain`` names them).
POINT_LEGEND = "hpa@U+lead: the HPA at target U, started early; qN: the forecast's pN band"
LEGEND_NOTE = f"points: {POINT_LEGEND}"  # the legend as a note of its own (``legend_once``)


def legend_once(notes: Iterable[str]) -> list[str]:
    """``notes`` with the points' legend said once, at the end, instead of on every line that names points (a fleet's
    or a frontier's notes name the points of many runs)."""
    inline = f" ({POINT_LEGEND})"
    lines = list(notes)
    out = [n.replace(inline, "") for n in lines]
    return [*out, LEGEND_NOTE] if any(inline in n for n in lines) else out


# Failures a forecaster may legitimately raise on odd history (too short, all missing, singular fit).
FORECAST_ERRORS = (ValueError, ArithmeticError, np.linalg.LinAlgError, RuntimeError)


class PredictivePolicy:
    """Forecast + ``plan_replicas`` every tick, on one Deployment's trace."""

    name = "predictive"
    # the controller marks the pods a scale-down removes: those on the emptiest nodes first (``domain.scaledown``)
    scale_in: ScaleIn = EMPTIEST_NODE_FIRST
    # whether its decisions keep the planner's steps (``explain=False``: a fleet's and a self-tuning replay's are never
    # read, only their counts and numbers)
    explains = True

    def __init__(
        self,
        series: TrafficSeries,
        make_model: Callable[[], Forecaster],
        policy: ScalingPolicy,
        cold_start: ColdStartProfile,
        cluster: ClusterConfig,
        decision_interval_seconds: int = 30,
        refit_seconds: int = SECONDS_PER_DAY,
        history_seconds: int = 14 * SECONDS_PER_DAY,
        name: str = "predictive",
        retune: Retune | None = None,
        horizon_seconds: int = ForecastProfile().horizon_seconds,
        explain: bool = True,
        taken_over_seconds: int = 0,
    ) -> None:
        if taken_over_seconds < 0:
            raise ValueError(f"taken_over_seconds must be >= 0, got {taken_over_seconds}")
        self.name = name
        # when the controller takes the Deployment over (trace time): no self-tuning replay before it, and the first
        # one after it finds the history before it, as a Deployment an HPA scaled finds its history in Prometheus
        self.taken_over_at = series.start + taken_over_seconds
        if not explain:
            self.explains = False
        self.base_policy = policy
        self.retune = retune
        self.tunings: list[TuningOutcome] = []  # every self-tuning replay, in order
        self.tuned_at = -math.inf  # when the last self-tuning replay ran (trace time) and whether it chose a point
        self.chose = False
        self.series = series
        self.make_model = make_model
        # self-tuning runs its start point until a replay chooses one, as the controller does
        self.policy = policy if retune is None else retune.start(policy)
        # what ran before the first replay chose a point, and when that was (trace time): the report says so, as a
        # new Deployment's first days run it
        self.started_as = self.policy.point_label
        self.first_chosen_at: int | None = None
        self.cold_start = cold_start
        self.tick = cluster.tick_seconds
        self.gpus_per_replica = cluster.gpus_per_replica
        step = series.step_seconds
        if step % self.tick:
            raise ValueError(f"tick {self.tick}s does not divide the trace's {step}s bins")
        self.per_bin = step // self.tick
        if decision_interval_seconds <= 0:
            raise ValueError(f"decision interval must be positive, got {decision_interval_seconds}s")
        self.decide_every = max(1, round(decision_interval_seconds / self.tick))
        self.history_bins = max(1, history_seconds // step)
        self.horizon_seconds = horizon_seconds
        self.keeper = ForecastKeeper(make_model, refit_seconds=refit_seconds, history_seconds=history_seconds)
        self.forecast: Forecast | None = None
        self.recommendations: tuple[tuple[int, int], ...] = ()
        self.warm_pool_replicas = 0  # of the last decision (the money stage ranks them after admitted training)
        self.spares_planned = self.spares_lent = 0  # the fleet's last lending to it: its plan, its spares
        self.decision: ScalingDecision | None = None  # the last decision, every step explained
        # the per-tick demand of the last minute before the current tick (the controller's instant rate query)
        self._recent: deque[float] = deque(maxlen=max(1, math.ceil(CURRENT_DEMAND_WINDOW_SECONDS / self.tick)))
        self.demand_seen = math.nan  # the demand the last decision observed (what node headroom reads of it)
        self.decided: Decided | None = None  # the last decision (its node lead is what pool headroom reads)
        self.errors: list[str] = []  # forecaster failures, "bin N: message" (the planner fell back to reactive)
        self.models_used: dict[str, int] = {}  # forecast model alias -> bins it served
        # wall seconds spent in the forecaster (fit/update/predict) and in plan_replicas, for benchmarks
        self.timings: dict[str, float] = {"forecast": 0.0, "plan": 0.0, "tune": 0.0}
        self._prepared = -1  # the decision tick ``prepare`` last ran for
        self._tuning: PendingTuning | None = None  # the replay started at this decision, run from the next

    @property
    def model(self) -> Forecaster | None:
        """The fitted forecaster (None before the first fit, or after it failed)."""
        return self.keeper.model

    @property
    def fits(self) -> int:
        return self.keeper.fits

    def prepare(self, k: int) -> None:
        """The first half of decision tick ``k``: the keeper's forecast, and the self-tuning replay started when it
        is due (``decide`` waits for it after its decision; the point chosen runs from the next decision). A fleet
        calls this on every Deployment before any decides, so the replays that fall due at one tick run at once;
        ``decide`` calls it when no one did. Other ticks: nothing."""
        if k % self.decide_every or self._prepared == k:
            return
        self._prepared = k
        t0 = time.perf_counter()
        self._refresh(k)
        self.timings["forecast"] += time.perf_counter() - t0

    def _refresh(self, k: int) -> None:
        """Decision tick ``k``: the keeper's forecast from the bins ended by then (``[0, b)``), and a self-tuning
        replay started after a refit (``_start_tuning``)."""
        b = k // self.per_bin
        now = self.series.start + k * self.tick
        # The newest history_seconds of bins and the one not yet settled: what the keeper fits on, and more than
        # it needs to see that the model has seen them (the controller keeps at least as much).
        history = self.series.slice(max(0, b - self.history_bins - 1), b)
        try:
            forecast = self.keeper.forecast(history, now, self.policy, self.cold_start, self.horizon_seconds)
        except FORECAST_ERRORS as exc:
            self.errors.append(f"bin {b}: {exc}")
            self.forecast = None
            return
        if forecast is not None and forecast is not self.forecast:
            self.models_used[forecast.model] = self.models_used.get(forecast.model, 0) + 1
        self.forecast = forecast
        if self.retune is not None and self.keeper.model is not None and now >= self.taken_over_at and tuning_due(
                now, self.tuned_at, self.chose, self.keeper.fitted_at):
            self._start_tuning(b, now)

    def _start_tuning(self, b: int, now: int) -> None:
        """Start a replay of the history so far (when ``engine.retuning.tuning_due`` says, as the controller's
        schedule does); ``_finish_tuning`` runs the point it chooses."""
        if self.retune is None:
            return
        self.tuned_at = now
        t0 = time.perf_counter()
        # the settled bins: the newest ended bin may still change, and the controller replays without it too
        pending = self.retune(self.series.slice(max(0, b - 1 - self.history_bins), max(0, b - 1)), self.base_policy,
                              self.cold_start, self.gpus_per_replica, self.tunings[-1] if self.tunings else None)
        self.timings["tune"] += time.perf_counter() - t0
        self._tuning = pending

    def _finish_tuning(self) -> None:
        """Wait for the replay started at this tick, if any, and run the point it chose from the next decision on,
        as the controller does (its replay runs after the tick's plans; the next tick plans, and forecasts the
        bands, at the point chosen)."""
        if self._tuning is None:
            return
        pending = self._tuning
        self._tuning = None
        t0 = time.perf_counter()
        policy, tuning = pending()
        self.timings["tune"] += time.perf_counter() - t0
        self.chose = tuning.chosen is not None
        if tuning.chosen is None:
            return  # too little history yet: retried an hour later (``engine.retuning``)
        if self.first_chosen_at is None:
            self.first_chosen_at = int(self.tuned_at)
        self.tunings.append(tuning)
        self.policy = policy

    def notes(self) -> list[str]:
        """What the forecaster did: models used (bins served) and failures, for the report."""
        used = ", ".join(f"{m} {n} bins" for m, n in sorted(self.models_used.items(), key=lambda kv: -kv[1]))
        out = [f"{self.name} forecasts: {used or 'none'} ({self.fits} fits)"]
        if self.tunings:
            chosen: dict[str, int] = {}
            for t in self.tunings:
                if (label := t.chosen_label) is not None:
                    chosen[label] = chosen.get(label, 0) + 1
            met = sum(t.met for t in self.tunings)
            cpu = sum(t.cpu_seconds for t in self.tunings) / len(self.tunings)
            picks = ", ".join(f"{label} x{n}" for label, n in sorted(chosen.items(), key=lambda kv: -kv[1]))
            start = ""
            if self.first_chosen_at is not None:
                taken = (self.taken_over_at - self.series.start) / SECONDS_PER_DAY
                why = ("no day of history to replay yet" if taken == 0 else
                       f"the controller took it over on day {taken:g}")
                start = (f"the start point {self.started_as} for its first "
                         f"{(self.first_chosen_at - self.series.start) / SECONDS_PER_DAY:.1f} days ({why}), then ")
            out.append(f"{self.name} self-tuned daily ({len(self.tunings)} replays, objective "
                       f"{self.tunings[-1].slo_attainment * 100:g}% within {self.tunings[-1].slo_wait_seconds:g}s): "
                       f"ran {start}{picks} ({POINT_LEGEND}); met on {met}; {cpu:.2f} s CPU per replay")
        if self.errors:
            out.append(
                f"{self.name}: {len(self.errors)} forecaster failure(s), planner fell back; first: {self.errors[0]}"
            )
        return out

    def decides(self, k: int) -> bool:
        """Whether tick ``k`` is a decision (every ``decision_interval``); other ticks hold the count."""
        return k % self.decide_every == 0

    def inference_gpus_ahead(self, k: int, seconds: int) -> list[tuple[int, float]] | None:
        """The replica GPUs the model forecasts from tick ``k`` for ``seconds``, as ``(unix time, GPUs)`` change
        points: the keeper's ``gpu_points``, as the controller's money stage asks them; None without a model."""
        if self.keeper.model is None:
            return None
        now = self.series.start + k * self.tick
        t0 = time.perf_counter()
        try:
            return self.keeper.gpu_points(
                now, now + seconds, self.series.step_seconds, capacity_per_replica=self.policy.capacity_per_replica,
                min_replicas=self.policy.min_replicas, max_replicas=self.policy.max_replicas,
                gpus_per_replica=self.gpus_per_replica,
            )
        except FORECAST_ERRORS as exc:
            self.errors.append(f"tick {k}: long forecast for a gang: {exc}")
            return None
        finally:
            self.timings["forecast"] += time.perf_counter() - t0

    def observed(self, k: int, cluster: Cluster) -> Observed:
        """What the controller's tick would see at tick ``k``: the replicas, the demand over the last minute (the
        ticks before ``k``: what its instant rate query answers), else the newest *ended* bin's (the bin in
        progress is what no Prometheus query can answer yet), and the pods waiting for a node."""
        recent = [d for d in self._recent if math.isfinite(d)]
        if recent:
            demand = sum(recent) / len(recent)
        else:
            b = k // self.per_bin
            demand = float(self.series.values[b - 1]) if b > 0 else math.nan
        pool = cluster.pool
        spares = held_spares(cluster.requested, self.spares_planned, self.spares_lent)  # the pool's (engine.spare)
        return Observed(replicas=cluster.requested - spares, ready=max(0, cluster.ready - spares),
                        demand=demand if math.isfinite(demand) else None, gpus_per_replica=self.gpus_per_replica,
                        waiting_for_node=cluster.waiting_for_node(k),
                        free_gpus=None if pool.name is None else pool.ready_free_gpus(k, self.gpus_per_replica))

    def lent(self, planned: int, spares: int) -> None:
        """The fleet's pool lent this Deployment ``spares`` replicas on top of its plan of ``planned``
        (``engine.spare``): the next decisions plan on its own replicas, as the controller's (``observed``)."""
        self.spares_planned, self.spares_lent = planned, spares

    def spare_room(self, k: int, planned: int, requested: int) -> tuple[int, float]:
        """What the fleet's pool may lend this Deployment at tick ``k`` when its plan asks ``planned`` replicas and it
        requests ``requested``: the spares it may take and its exposure (``engine.spare.member_terms``), as the
        controller's money step reads them from the plan."""
        now = self.series.start + k * self.tick
        expo = exposure(self.forecast, now, self.cold_start.node_lead_seconds(), self.policy.capacity_per_replica,
                        planned)
        holding = self.decision is not None and bool(self.decision.missing_metrics)
        return member_terms(expo, self.policy.max_replicas, planned, requested, holding)

    def decide(self, k: int, cluster: Cluster, demand: float) -> int:
        """The count at tick ``k``: the engine's decision on what the controller would observe (``observed``; the
        trace's ``demand`` of the bin in progress is not shown to it), held between decisions."""
        if k % self.decide_every:
            self._recent.append(demand)
            return cluster.requested
        self.prepare(k)
        t0 = time.perf_counter()
        now = self.series.start + k * self.tick
        observed = self.observed(k, cluster)
        self.demand_seen = math.nan if observed.demand is None else observed.demand
        decided = decide(self.forecast, observed, self.policy, self.cold_start, now, self.recommendations,
                         explain=self.explains)
        decision = self.decision = decided.decision
        self.decided = decided
        if decided.claimed_gpus:
            cluster.pool.claim(k, decided.claimed_gpus)
        self.recommendations = decision.recommendations
        self.warm_pool_replicas = decision.warm_pool_replicas if decision.warm_pool_as == "replicas" else 0
        self.timings["plan"] += time.perf_counter() - t0
        self._recent.append(demand)
        self._finish_tuning()  # after this tick's decision: the point chosen runs from the next one
        return decision.desired_replicas


def scaling_policy_for(
    config: SimulationConfig, overrides: Mapping[str, Any] | None = None, profile: ForecastProfile | None = None
) -> ScalingPolicy:
    """The planner policy the simulator runs: the sizing from ``config``, the rest from ``profile`` (the
    operator's forecast profile, mapped exactly as the controller maps it; default: the built-in profile).

    ``overrides`` sets other ``ScalingPolicy`` fields (level, warm_pool, lookahead_window_seconds, ...).
    """
    base = (profile or ForecastProfile()).scaling_policy(
        config.capacity_per_replica, config.min_replicas, config.max_replicas
    )
    return replace(base, **dict(overrides or {}))


def factory(
    make_model: Callable[[], Forecaster],
    decision_interval_seconds: int = 30,
    policy_overrides: Mapping[str, Any] | None = None,
    profile: ForecastProfile | None = None,
    name: str = "predictive",
    retune: Retune | None = None,
    explain: bool = True,
    taken_over_seconds: int | None = None,
) -> PredictiveFactory:
    """Build the predictive policy for ``simulate``: ``make_model`` gives a fresh forecaster per refit;
    ``profile`` is the operator's forecast profile (sizing knobs, refit interval and history length);
    ``policy_overrides`` are ``ScalingPolicy`` fields (see ``scaling_policy_for``). ``name`` names the
    run (``predictive-persistence`` for the last-value planner: ``make_model`` = persistence); ``retune`` makes it
    self-tune after each daily refit (``autoscaler.simulation.tuning.retuner``); ``explain=False``: its decisions keep
    no planner steps (the same counts; a fleet reads none). ``taken_over_seconds``: the controller takes the
    Deployment over this long after the trace starts (until then it runs its start point, the HPA's own point, and
    tunes nothing; its first tuning then replays the history before it at once, as a Deployment an HPA scaled finds
    its history in Prometheus); None, the default: the simulation's (``SimulationConfig.taken_over_seconds``); 0 runs
    it as a new Deployment from the trace's start whenever its scores start."""
    chosen = profile or ForecastProfile()

    def build(series: TrafficSeries, config: SimulationConfig, cluster: ClusterConfig) -> PredictivePolicy:
        cold_start = ColdStartProfile(
            prior_seconds=float(cluster.pod_startup_seconds),
            node_prior_seconds=float(cluster.node_startup_seconds),
        )
        policy = scaling_policy_for(config, policy_overrides, chosen)
        return PredictivePolicy(
            series, make_model, policy, cold_start, cluster, decision_interval_seconds,
            refit_seconds=chosen.refit_seconds, history_seconds=chosen.history_seconds, name=name, retune=retune,
            horizon_seconds=chosen.horizon_seconds, explain=explain,
            taken_over_seconds=config.taken_over_seconds if taken_over_seconds is None else taken_over_seconds,
        )

    return build
