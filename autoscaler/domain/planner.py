"""The capacity planner: forecast + cold start + current state -> an explained replica count.

Why a module of its own: this is the one pure function the controller loop, the trace-driven
simulator and ``explain`` all call, so the order of the rules is written down exactly once:

1. ``lead_time``      lead = pod start-up (+ node start-up when fewer GPUs are free than one replica needs);
2. ``forecast``       need = ceil(max band(level) over [now + lead, now + lead + window] / capacity);
3. ``warm_pool``      + spare replicas for the forecast tail (or a fixed N); kept as nodes they are
                      reported but not added to the replica count;
4. ``reactive_floor`` max with ceil(observed demand / capacity): a spike the forecast missed is answered;
   ``surprise``       and with ceil((observed + the forecast's top-band spread at the lead) / capacity):
                      a burst that has left the forecast behind keeps the forecast's headroom while the
                      replicas it needs start (``capacity.surprise_floor``; never binds while forecasts hold);
   ``lead_gap``       keep min(current, band need over [now, now + lead]): a replica removed now could not
                      return before now + lead, so demand inside the lead blocks removing it (never adds);
5. ``stabilization``  up at once, down only to the max raw recommendation of the window
                      (or ``hold_missing_metrics``: with missing metrics, never below the current count);
6. ``step_limit``     replicas added / removed per decision;
7. ``min_max_clamp``  min_replicas and max_replicas always win, last.

The HPA's own operating point (``ScalingPolicy.lead_only``, a self-tuning candidate: the HPA at a utilisation target
started early) plans differently in steps 2-4: no band, no warm pool, no surprise floor, no lead gap; the reactive
floor at its utilisation on the observed demand scaled by the rise of the median forecast from now to the lead (at
least 1). Why the rise and not the median's level: an HPA sized on the median at the lead held the level of every
burst the forecast had just absorbed and of every forecast that lagged a fall, and cost 4-8% more GPU-hours than the
HPA at the same target for a few hundredths of a point of attainment (measured on the synthetic LLM-serving and
diurnal shapes of ``benchmarks/backtest.py``); the rise keeps what the forecast adds to the HPA (starting a scale-up
one lead early on a ramp it sees coming) and nothing else. A fall is left to the stabilisation window, as the HPA
leaves it. Measured and not adopted (2026-11-26): sizing that demand with the HPA's 10% tolerance (the count held while
the usage ratio over the Ready replicas is within it, starting replicas counted as idle) made the point without a lead
the HPA to 0.2% of GPU-hours and 0.03 points of attainment (the 30 s decision against the HPA's 15 s sync), and with
the lead 1% dearer for +-0.01-0.03 points on the synthetic diurnal and LLM-serving shapes: the lead buys about what the
HPA's own curve sells. The self-tuned default was then dominated by an HPA target on 14 of 36 recorded runs instead of
6 (``benchmarks/tuner_rules.py`` on the synthetic shapes' draws 0-8): a point that ties the HPA loses every tie.

Every rule appends a ``Step`` with the count after it and the numbers it used (unless the caller asks for no
steps: ``explain=False``, as a self-tuning replay does). The function reads no clock (``now`` is an argument) and
keeps no state: the stabilisation history travels in ``WorkloadState.recommendations`` and comes back in
``ScalingDecision.recommendations``.
While metrics are missing the *held* count is recorded in that history (not the lower evidence), so
once metrics return a scale-down still waits a full stabilisation window: one fresh sample after an
outage is not enough to give GPUs back. An *empty* history (a first decision, or a restart that lost
it) counts the current replica count as recommended now, for the same reason; a caller that never
passes the history back therefore never scales down, which is the safe way to get it wrong.

Per Deployment, not per cluster (docs/ARCHITECTURE.md, "Per Deployment first, then the whole cluster"):
the loop calls ``plan_replicas`` for each Deployment, and the money stage then takes every
``ScalingDecision`` (``needs_node``, ``warm_pool_replicas``) and holds the whole plan under the cost
ceilings; node pools and cost ceilings are not folded in here.
"""

from __future__ import annotations

from autoscaler.domain.capacity import (
    ForecastNeed,
    LeadGap,
    Surprise,
    WarmPool,
    auto_warm_pool,
    forecast_need,
    lead_gap_need,
    reactive_floor,
    select_window,
    surprise_floor,
)
from autoscaler.domain.coldstart import ColdStartProfile
from autoscaler.domain.stabilize import Limited, Stabilized, limit_step, stabilize, update_history
from autoscaler.domain.types import ScalingDecision, ScalingPolicy, Step, WorkloadState
from models.types import Forecast

__all__ = ["explain_lines", "plan_replicas"]


def _usable_forecast(forecast: Forecast | None, policy: ScalingPolicy) -> str | None:
    """None when the forecast can be used; otherwise why not (one phrase)."""
    if forecast is None:
        return "no forecast"
    if forecast.horizon == 0:
        return "forecast has no steps"
    if policy.level not in forecast.quantiles:
        return f"forecast has no p{policy.level} band (has {sorted(forecast.quantiles)})"
    if not forecast.is_finite:
        return f"forecast from {forecast.model} has non-finite values"
    return None


def _lead_rise(forecast: Forecast, need: ForecastNeed, now: int, level: int) -> tuple[float, float]:
    """The lead-only point's rise: the median (``level``) over the look-ahead window after the lead (``need``) over
    the median now, at least 1 (a forecast fall is left to the stabilisation window, as the HPA leaves it); and the
    median now."""
    here = max(0.0, select_window(forecast, now, 0.0, 0.0).max_of(forecast.band_list(level)))
    return (max(1.0, need.demand / here) if here > 0 else 1.0), here


def _rise_text(need: ForecastNeed, rise: float, here: float) -> str:
    return (f"{need.detail}; the median rises x{rise:.3f} from now ({here:.1f} req/s) to the lead: observed demand "
            "scaled by it")


def plan_replicas(
    forecast: Forecast | None,
    state: WorkloadState,
    policy: ScalingPolicy,
    cold_start: ColdStartProfile,
    now: int,
    *,
    explain: bool = True,
) -> ScalingDecision:
    """Decide the replica count for one workload at ``now`` (see the module docstring for the rules).

    ``explain=False``: the decision carries no ``steps`` (the same count and numbers). Why: a self-tuning replay
    makes tens of thousands of decisions that nothing reads, and making the steps was a fifth of each."""
    now = int(now)
    current = state.current_replicas
    steps: list[Step] = []
    missing: list[str] = []

    # 1. lead time
    needs_node = state.free_gpus < state.gpus_per_replica
    lead = cold_start.lead_seconds(needs_node)
    if explain:
        steps.append(Step.lazy("lead_time", current, _lead_text, lead, cold_start, needs_node, state.free_gpus,
                               state.gpus_per_replica, state.ready_replicas, current))

    # 2. forecast need
    need: ForecastNeed | None = None
    # lead only: the median forecast sized at the HPA's utilisation (a reactive autoscaler that starts early)
    sizing = policy.lead_only_sizing if policy.lead_only else policy
    problem = _usable_forecast(forecast, sizing)
    rise = 1.0
    if problem is None and forecast is not None:
        need = forecast_need(forecast, sizing, now, lead)
        if policy.lead_only:
            rise, here = _lead_rise(forecast, need, now, sizing.level)
            if explain:
                steps.append(Step.lazy("forecast", need.replicas, _rise_text, need, rise, here))
        elif explain:
            steps.append(Step.lazy("forecast", need.replicas, _detail_of, need))
    else:
        missing.append(problem or "no forecast")
        if explain:
            steps.append(Step("forecast", current, f"unavailable: {problem}; no forecast evidence"))

    # 3. warm pool
    warm = 0
    forecast_total: int | None = None
    if need is not None and forecast is not None:
        pool: WarmPool | None = None
        if policy.lead_only:
            warm = 0
        elif policy.warm_pool is None:
            pool = auto_warm_pool(forecast, policy, need)
            warm = pool.replicas
        else:
            warm = policy.warm_pool
        # the lead-only point holds not the forecast's level, only its rise over the lead (the reactive floor below)
        forecast_total = (0 if policy.lead_only else
                          need.replicas + warm if policy.warm_pool_as == "replicas" else need.replicas)
        if explain:
            steps.append(Step.lazy("warm_pool", forecast_total, _warm_text, policy, pool, warm, need.replicas,
                                   state.gpus_per_replica, forecast_total))
    elif policy.warm_pool is not None:
        # A fixed pool does not depend on the forecast: keep honouring it.
        warm = policy.warm_pool
        if explain:
            steps.append(Step("warm_pool", current, f"fixed: {warm} spare; not added without a forecast"))
    else:
        if explain:
            steps.append(Step("warm_pool", current, "auto: needs a forecast; none"))

    # 4. reactive floor
    reactive = 0
    if state.demand_known and state.current_demand is not None:
        util = policy.reactive_utilisation
        observed = state.current_demand * rise if policy.lead_only else state.current_demand
        reactive = reactive_floor(observed, policy.capacity_per_replica * util)
        base = forecast_total if forecast_total is not None else 0
        raw = max(base, reactive)
        if explain:
            steps.append(Step.lazy("reactive_floor", raw, _reactive_text, state.current_demand,
                                   policy.capacity_per_replica, util, reactive, base, raw, rise))
        surprise = (
            surprise_floor(forecast, policy, now, lead, state.current_demand)
            if forecast is not None and need is not None and not policy.lead_only
            else None
        )
        if surprise is not None and surprise.replicas > raw:
            raw = surprise.replicas
            reactive = max(reactive, surprise.replicas)
            if explain:
                steps.append(Step.lazy("surprise", raw, _detail_of, surprise))
    else:
        missing.append("no current demand metric")
        raw = forecast_total if forecast_total is not None else current
        if explain:
            steps.append(Step("reactive_floor", raw, "unavailable: no current demand metric"))

    # 4b. lead gap: do not remove replicas the forecast needs before a replacement could be ready
    if need is not None and forecast is not None and raw < current and not missing and not policy.lead_only:
        gap = lead_gap_need(forecast, sizing, now, lead)
        kept = max(raw, min(current, gap.replicas))
        if explain:
            steps.append(Step.lazy("lead_gap", kept, _lead_gap_text, gap, lead, raw, current, kept))
        raw = kept

    # 5. stabilisation, or hold on missing metrics
    window = policy.scale_down_stabilization_seconds
    if missing:
        held = max(current, raw)
        history = update_history(state.recommendations, now, held, window)
        if explain:
            steps.append(
                Step(
                    "hold_missing_metrics",
                    held,
                    f"{'; '.join(missing)}: never scale down on missing evidence; "
                    f"max(current {current}, evidence {raw}) = {held}",
                )
            )
        target = held
    else:
        history = update_history(state.recommendations, now, raw, window)
        seeded = not state.recommendations and window > 0 and raw < current
        if seeded:
            # No history at all (first decision, or a restart that lost it): nothing shows that the
            # window agreed with a scale-down, so the current count stands as recommended now. Stamped one
            # second earlier so that re-planning at the same ``now`` does not replace it.
            history = ((now - 1, current), *history)
        stab = stabilize(raw, current, history, window)
        if explain:
            steps.append(Step.lazy("stabilization", stab.replicas, _stabilized_text, stab, seeded))
        target = stab.replicas

    # 6. step limits
    limited = limit_step(target, current, policy.max_scale_up_step, policy.max_scale_down_fraction)
    if explain:
        steps.append(Step.lazy("step_limit", limited.replicas, _detail_of, limited))

    # 7. min/max clamp
    desired = min(max(limited.replicas, policy.min_replicas), policy.max_replicas)
    # Replicas a scale-up wanted but did not get (step limit or max_replicas): reported loudly.
    blocked = max(0, target - max(desired, current))
    if explain:
        steps.append(Step.lazy("min_max_clamp", desired, _clamp_text, desired, limited.replicas, policy.min_replicas,
                               policy.max_replicas, blocked))

    return ScalingDecision(
        desired_replicas=desired,
        forecast_demand=need.demand if need is not None else None,
        lead_seconds=lead,
        warm_pool_replicas=warm,
        warm_pool_as=policy.warm_pool_as,
        reactive_replicas=reactive,
        steps=tuple(steps),
        recommendations=history,
        now=now,
        needs_node=needs_node,
        forecast_replicas=need.replicas if need is not None else None,
        raw_replicas=raw,
        missing_metrics=tuple(missing),
        scale_up_blocked=blocked,
    )


# The steps' texts, written when read (``Step.lazy``): every argument is an immutable value.


def _detail_of(result: ForecastNeed | Surprise | Limited) -> str:
    return result.detail


def _lead_text(lead: float, cold_start: ColdStartProfile, needs_node: bool, free_gpus: int, gpus_per_replica: int,
               ready: int, current: int) -> str:
    gpu_note = (
        f"{free_gpus} free GPU(s) < {gpus_per_replica} per replica: a new replica waits for a node"
        if needs_node
        else f"{free_gpus} free GPU(s) >= {gpus_per_replica} per replica: no node needed"
    )
    return f"lead {lead:.0f}s ({cold_start.source(needs_node)}); {gpu_note}; {ready}/{current} replicas ready"


def _warm_text(policy: ScalingPolicy, pool: WarmPool | None, warm: int, need: int, gpus_per_replica: int,
               forecast_total: int) -> str:
    if policy.lead_only:
        return ("lead only: no warm pool; the forecast's level is not held, only its rise over the lead (the reactive "
                f"floor) -> {forecast_total}")
    warm_detail = pool.detail if pool is not None else f"fixed: {policy.warm_pool} spare"
    if policy.warm_pool_as == "replicas":
        return f"{warm_detail}; kept as ready replicas: {need} + {warm} -> {forecast_total}"
    gpus = warm * gpus_per_replica
    return (
        f"{warm_detail}; kept as ready nodes ({warm} x {gpus_per_replica} GPU = {gpus} GPU(s)), "
        f"not as replicas -> {forecast_total}"
    )


def _reactive_text(demand: float, capacity: float, util: float, reactive: int, base: int, raw: int,
                   rise: float = 1.0) -> str:
    who = "forecast" if base >= reactive else "observed demand"
    at = "" if util == 1 else f" at {util:g} utilisation"
    scaled = f" x{rise:.3f} (the rise to the lead)" if rise > 1 else ""
    return (
        f"observed {demand:.1f} req/s{scaled} / {capacity:g} req/s per replica{at} "
        f"-> {reactive}; max({base}, {reactive}) = {raw} ({who} decides)"
    )


def _lead_gap_text(gap: LeadGap, lead: float, raw: int, current: int, kept: int) -> str:
    verdict = f"keep {kept}" if kept > raw else "nothing to keep"
    return (
        f"{gap.detail}; a replica removed now is back at t+{lead:.0f}s at the earliest: "
        f"max({raw}, min(current {current}, {gap.replicas})) -> {verdict}"
    )


def _stabilized_text(stab: Stabilized, seeded: bool) -> str:
    return stab.detail + ("; no history passed in: the current count counts as recommended now" if seeded else "")


def _clamp_text(desired: int, limited: int, min_replicas: int, max_replicas: int, blocked: int) -> str:
    if desired > limited:
        return f"raised {limited} -> min_replicas {min_replicas}"
    if desired < limited:
        text = f"CAPPED {limited} -> max_replicas {max_replicas}"
        if blocked:
            text += f"; {blocked} replicas of the scale-up withheld in total"
        return text
    return f"{desired} within [{min_replicas}, {max_replicas}]"


def explain_lines(decision: ScalingDecision) -> list[str]:
    """Human-readable lines: a summary, then one line per step (``name -> replicas: detail``)."""
    lines = [f"desired replicas {decision.desired_replicas} at t={decision.now}"]
    if decision.missing_metrics:
        lines[0] += f" (holding: {'; '.join(decision.missing_metrics)})"
    if decision.scale_up_blocked:
        lines[0] += f" ({decision.scale_up_blocked} replicas withheld by limits)"
    width = max(len(step.name) for step in decision.steps) if decision.steps else 0
    for i, step in enumerate(decision.steps, start=1):
        lines.append(f"{i}. {step.name:<{width}} -> {step.replicas:>4}  {step.detail}")
    return lines
