"""What every part of the controller shares: the per-Deployment memory kept between ticks, the plan of one
Deployment between the passes of a tick, the tuning replays queued, the loop's constants, and the helpers and
state (``ControllerBase``) the parts use.

Why a module of its own: the controller is split by concern (``reads``, ``tuning``, ``apply``, ``export``, and
``loop`` for the tick itself), and those parts all read and write one Deployment's memory; keeping it here is
what lets each part import it without importing the tick.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np

from autoscaler import promql
from autoscaler.adapters.kube import KubeError
from autoscaler.config.schema import Config, ForecastProfile
from autoscaler.domain.annotations import WorkloadSpec
from autoscaler.domain.coldstart import ColdStartProfile
from autoscaler.domain.demand import DemandUnit
from autoscaler.domain.learned_capacity import LearnedCapacity
from autoscaler.domain.scaledown import ScaleDownMarks, has_marks
from autoscaler.domain.status import DeploymentStatus
from autoscaler.domain.types import ScalingDecision, ScalingPolicy, Step
from autoscaler.engine.forecasting import ForecastKeeper
from autoscaler.ports import Cluster, EventType, PodStartups, StatusObject, WorkloadView
from autoscaler.runtime.clock import utc
from autoscaler.runtime.metrics import ControllerMetrics
from autoscaler.runtime.money import MoneyStage
from autoscaler.runtime.notices import Notices
from autoscaler.simulation.tuning import Tuning
from models.types import Forecast, TrafficSeries

# The controller's log lines carry one logger name, whichever part of the tick says them (operators filter on it).
LOGGER = "autoscaler.runtime.loop"
log = logging.getLogger(LOGGER)


Key = tuple[str, str]

STARTUP_RECHECK_SECONDS = 300

# How often the pods carrying a scale-down mark of ours are listed across the controller's namespaces (one
# label-selected list), besides the first tick and a tick in which a Deployment with marks leaves its care: marks
# nothing maintains any more (a restart while its Deployment was opted out, say) are cleared within this time.
MARK_SWEEP_SECONDS = 300
STATUS_REFRESH_SECONDS = 300

# Share of the loop interval a tick may spend fitting forecasters. Every model falls due for its daily refit
# in the same tick (they were all fitted in the first one): without a budget a 1,000-Deployment fleet spends
# minutes refitting in one tick while nothing is planned; with it, refits spread over the next ticks.
FIT_BUDGET_SHARE = 1 / 3
MIN_FIT_BUDGET_SECONDS = 5.0  # whatever the interval, a tick makes real progress on its fits
TRACK_EVERY_SECONDS = 300
TRACK_LENGTH = 48  # 4 hours of forecast-vs-actual points at 5-minute spacing, for `explain`
REFETCH_BINS = 2  # the newest bins may still change as late scrapes land: fetch them again

# Learned capacity (capacity-per-replica auto; autoscaler.domain.learned_capacity): re-estimated this often, from
# this much history (at most loop.history), and retried this soon after a failed read. Daily, not every tick: the
# estimate reads five series over days and moves only as the workload's mix does.
CAPACITY_EVERY_SECONDS = 86_400
CAPACITY_HISTORY_SECONDS = 7 * 86_400
CAPACITY_RETRY_SECONDS = 600
CAPACITY_BATCH = 100  # Deployments a tick reads the evidence of (whole namespaces, until reached; _learn_capacity)

# A Deployment whose capacity is not learned yet is still forecast (for its status and track), with a policy whose
# capacity shapes nothing: no replica count is derived from it (the plan is a hold, engine.deciding.capacity_hold).
FORECAST_ONLY_CAPACITY = 1.0

# The Events whose last told state the status keeps (``DeploymentStatus.told``) and a restarted controller resumes,
# so it tells only what changed while it was away (a metrics outage that ended, GPUs that came): the metrics outage,
# the demand formula's fallback, pods waiting for GPUs, a capacity not learned, a rollout holding a scale-down,
# another writer setting the replicas back. The HPAs it told of and the self-tuning state resume from their own parts
# of the status (``scaledBy``, ``tuning``).
RESUMED_NOTICES = ("outage", "degraded", "gpus", "capacity", "rollout", "overwritten")

# A replay costs about 1.5 s of CPU: a tick starts replays for at most this share of the loop interval (and only in
# what its fits left of theirs), so a fleet's daily replays spread over many ticks instead of stretching some.
TUNE_BUDGET_SHARE = 1 / 10


class MetricsSource(Protocol):
    """What the loop needs from the metrics backend (``PrometheusSource`` implements it)."""

    def fleet_history(
        self, query: str, namespaces: Iterable[str], start: int, end: int, step_seconds: int
    ) -> Mapping[Key, TrafficSeries]: ...


@runtime_checkable
class PodLoadSource(Protocol):
    """Per-pod current values (``PrometheusSource`` implements it): the in-flight requests a scale-down ranks by.

    A source without it (the fleet benchmark's synthetic one) marks no pod: the ReplicaSet's default order applies.
    """

    def pod_instant(self, query: str, namespaces: Iterable[str], at: float) -> Mapping[tuple[str, str], float]: ...


POD_LOAD_QUERY = "pod_in_flight"


@runtime_checkable
class CurrentDemandSource(Protocol):
    """Per-Deployment rates now (``PrometheusSource`` implements it): the reactive floor's evidence, as fresh as the
    HPA's own metric. A source without it (the fleet benchmark's synthetic one) leaves the newest ended bin to it."""

    def fleet_instant(
        self, query: str, namespaces: Iterable[str], at: float, *, window_seconds: int = 60,
        resolution_seconds: int | None = None,
    ) -> Mapping[tuple[str, str], float]: ...


def demand_key(spec: WorkloadSpec, profile: ForecastProfile) -> tuple[str, float, float]:
    """What a Deployment's history is counted in (unit and token weights): a change starts it afresh."""
    if spec.demand_unit is DemandUnit.REQUESTS:
        return (spec.demand_unit.value, 0.0, 0.0)
    return (spec.demand_unit.value, profile.token_weights.input, profile.token_weights.output)


@dataclass
class Memory:
    """What the controller remembers of one Deployment between ticks (forgotten when it leaves the fleet)."""

    # The demand series forecast and planned on: requests/s, or weighted tokens/s (``demand_key`` says which).
    history: TrafficSeries | None = None
    demand_key: tuple[str, float, float] | None = None
    # The demand over the last minute, read this tick (None: not read, not answered, or sized on tokens: the newest
    # bin stands in).
    current_demand: float | None = None
    # The fitted forecaster and its cadence (autoscaler.engine.forecasting): the simulator keeps its forecasts
    # the same way. None: no model yet (or the demand unit changed).
    keeper: ForecastKeeper | None = None
    recommendations: tuple[tuple[int, int], ...] = ()
    startups: PodStartups = field(default_factory=PodStartups)
    startups_checked: float = -math.inf
    reported: frozenset[str] = frozenset()  # annotation problems already posted as Events
    counted: frozenset[str] = frozenset()  # annotation errors already counted in the errors metric
    # What was told of this Deployment, once per transition (autoscaler.runtime.notices): "outage", "gpus",
    # "degraded" (Event) and "degraded-log", "rollout", "capacity", "slo", "lead-only", "contention", "overwritten".
    notices: Notices = field(default_factory=Notices)
    # The HorizontalPodAutoscalers last read scaling it too (autoscaler.domain.contention): kept through a failed read.
    scalers: tuple[str, ...] = ()
    # The replicas its last scale wrote, until a list shows them changed by someone else (None: nothing written since),
    # and when that was seen within the last hour (autoscaler.domain.contention).
    written: int | None = None
    overwrites: tuple[float, ...] = ()
    status_written: dict[str, Any] | None = None
    status_written_at: float = -math.inf
    status_built: DeploymentStatus | None = None  # the status this tick's ``_apply`` made, until ``_publish`` writes it
    # The status it left (autoscaler.domain.status): looked for (its namespace's status objects listed; until then
    # no status is written, which would drop the self-tuning days it may hold), the object as last read or written
    # (None: none known), the status to resume from, and one an older version's annotation holds that is to be
    # copied to the object before the annotation is removed.
    status_read: bool = False
    status_object: StatusObject | None = None
    saved_tuning: Mapping[str, Any] | None = None  # the saved status's self-tuning state (only this part is resumed)
    status_copy: dict[str, Any] | None = None
    track: list[dict[str, Any]] = field(default_factory=list)
    exported_bands: frozenset[str] = frozenset()  # forecast bands on /metrics for this Deployment
    exported_unit: str | None = None  # the unit label of its demand_unit_info series
    # The query's demand_source label of the newest bin with a value (None: the query does not say): "full",
    # or why a fallback (completions alone) gave it. Kept over bins without a value.
    demand_source: str | None = None
    # The last pod listing showed scale-down marks of ours (or we just wrote some): pods are listed every tick
    # until they are cleared (autoscaler.domain.scaledown), instead of every STARTUP_RECHECK_SECONDS.
    marks_seen: bool = False
    # When a scale-down first found its marks not in place on the read after writing them (None: it did not).
    marks_waiting_since: float | None = None
    # The spare replicas its NodePool lent it at the last tick, on top of the plan's count then
    # (``engine.spare``): what the pool's next decisions are shown free on top of the read.
    spares_lent: int = 0
    spares_planned: int = 0
    # The last scale-down applied and how its pods were chosen (the status's scaleDown).
    last_scale_down: Mapping[str, Any] | None = None
    # Learned capacity: the last estimate (None: none yet) and when it was made, when the evidence was last read
    # (or a failed read is to be retried), and why the last read failed.
    capacity: LearnedCapacity | None = None
    capacity_at: float = -math.inf
    capacity_checked: float = -math.inf
    capacity_error: str | None = None
    capacity_wait: float | None = None  # the latency objective the estimate was made for (a change re-estimates)
    # Self-tuning: the last replay (``chosen`` None: it could not replay), when it was tried and for what
    # objective and sizing, and the state its Events are to tell (met, why; whether the forecast adds only the lead).
    tuning: Tuning | None = None
    tuning_tried: float = -math.inf
    tuning_inputs: tuple[float, ...] | None = None  # objective and sizing it was tuned for: a change re-tunes
    tuning_state: tuple[str, bool, str] | None = None
    tuning_read: bool = False  # the state a previous controller left in the status was looked for


def is_degraded(source: str | None) -> bool:
    """The demand came from a fallback formula (the query labelled it so), not the full one."""
    return source is not None and source != promql.SOURCE_FULL


def log_demand_source(view: WorkloadView, degraded: bool, source: str | None) -> bool:
    if degraded:
        log.warning("%s/%s: demand is the completion rate alone (%s)", view.namespace, view.name, source)
    else:
        log.info("%s/%s: demand is the full formula again", view.namespace, view.name)
    return True


def finite(x: float) -> float | None:
    return round(float(x), 6) if math.isfinite(x) else None


def splice(old: TrafficSeries | None, new: TrafficSeries, keep_seconds: int) -> TrafficSeries:
    """``old`` extended/overwritten by ``new`` (same step), trimmed to the newest ``keep_seconds``."""
    step = new.step_seconds
    if old is None or old.step_seconds != step or new.start > old.end:
        merged = new
    else:
        head = old.values[: max(0, (new.start - old.start) // step)]
        merged = TrafficSeries(np.concatenate([head, new.values]), step, old.start)
    keep = max(1, keep_seconds // step)
    return merged.slice(len(merged) - keep, len(merged)) if len(merged) > keep else merged


def deciding_step(decision: ScalingDecision) -> Step:
    """The rule that set the final count: the first step after which the count no longer changed."""
    steps = decision.steps
    last_other = max((i for i, s in enumerate(steps) if s.replicas != decision.desired_replicas), default=-1)
    return steps[min(last_other + 1, len(steps) - 1)]


def objective(spec: WorkloadSpec, profile: ForecastProfile) -> tuple[float, float]:
    """The Deployment's latency objective, (wait seconds, attainment share): its annotations', else its profile's."""
    wait = spec.slo_wait_seconds if spec.slo_wait_seconds is not None else float(profile.slo_wait_seconds)
    target = spec.slo_attainment if spec.slo_attainment is not None else profile.slo_attainment
    return wait, target


def policy_for(spec: WorkloadSpec, profile: ForecastProfile, capacity: float) -> ScalingPolicy:
    """The profile's policy for this Deployment at ``capacity`` req/s per replica (the annotation's or the learned
    one): the one mapping ``simulate --config`` also uses."""
    return profile.scaling_policy(capacity, spec.min_replicas, spec.max_replicas, spec.warm_pool)


@dataclass(frozen=True)
class Replay:
    """A self-tuning replay one Deployment's plan found due (``Controller._replay_due`` runs it once the plans are
    written)."""

    key: Key
    policy: ScalingPolicy  # the profile's own, untuned
    cold: ColdStartProfile
    profile: ForecastProfile
    gpus_per_replica: int
    inputs: tuple[float, ...]  # (slo wait, attainment, capacity, min, max): a change re-tunes and restarts the pool
    nodepool: str | None  # the NodePool it names: the replay's nodes are that pool's size where it is known
    gpus: int = 0  # the GPUs its replicas hold now: among replays as long due, the dearest Deployment's runs first


@dataclass(frozen=True)
class Plan:
    """One workload planned on its own (first pass), waiting for the money stage and then to be applied."""

    view: WorkloadView
    spec: WorkloadSpec
    decision: ScalingDecision
    summary: dict[str, Any] | None
    demand: float | None
    blocked: int
    capacity: float | None = None  # req/s per replica planned with (None: not learned yet, the replicas held)
    forecast: Forecast | None = None  # the forecast planned on (what the pool's node headroom reads)
    current: float | None = None  # the demand observed now (the instant rate, else the newest bin)
    node_lead_seconds: float = 0.0  # node start-up + pod start-up (``engine.deciding.Decided``)
    waiting_for_node: int = 0  # its pods Pending unschedulable now (while any wait, its pool lends no spares)
    objective: float | None = None  # its objective's attainment share (its pool's headroom covers the strictest)

@dataclass(frozen=True)
class WorkloadOutcome:
    """One Deployment's part of a tick: what was seen, decided and done."""

    namespace: str
    name: str
    current_replicas: int
    ready_replicas: int
    mode: str | None = None
    decision: ScalingDecision | None = None
    forecast: dict[str, Any] | None = None
    problems: tuple[str, ...] = ()
    actions: tuple[str, ...] = ()
    demand_source: str | None = None  # see Memory.demand_source
    scale_down_marks: ScaleDownMarks | None = None  # pod-deletion-cost marks set / cleared (or, dry run, planned)

    def to_dict(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "name": self.name,
            "mode": self.mode,
            "current_replicas": self.current_replicas,
            "ready_replicas": self.ready_replicas,
            "desired_replicas": None if self.decision is None else self.decision.desired_replicas,
            "demand_source": self.demand_source,
            "forecast": self.forecast,
            "decision": None if self.decision is None else self.decision.to_dict(),
            "problems": list(self.problems),
            "actions": list(self.actions),
            "scale_down_marks": None if self.scale_down_marks is None else self.scale_down_marks.to_dict(),
        }


class ControllerBase:
    """The state every part of the controller shares (set by ``Controller.__init__``), and the few helpers they all
    call: posting an Event, listing a Deployment's pods, the capacity a Deployment is planned with."""

    cluster: Cluster
    source: MetricsSource
    money: MoneyStage
    metrics: ControllerMetrics
    dry_run: bool
    learn_capacity: bool
    fit_budget_seconds: float | None
    tune_budget_seconds: float | None
    _config: Callable[[], Config]
    _memory: dict[Key, Memory]
    _replays: list[Replay]
    _replay_seconds: float
    _acted: bool  # this tick acts (this replica leads, or runs dry)
    _fit_deadline: float
    _tune_deadline: float
    _deferred_fits: int
    _swept_at: float
    _node_gpus: dict[str, int] | None

    def _event(
        self, view: WorkloadView, kind: EventType, reason: str, message: str, now: float, errors: list[str]
    ) -> bool:
        """Post an Event; True when it landed (a failure is counted and reported, and the caller retries)."""
        try:
            self.cluster.post_event(view.namespace, view.name, view.uid, kind, reason, message, utc(now))
        except KubeError as exc:
            self.metrics.errors.labels("kube_write").inc()
            errors.append(f"{view.namespace}/{view.name}: posting Event {reason} failed: {exc}")
            return False
        return True

    def _list_pods(self, view: WorkloadView, memory: Memory, now: float, errors: list[str]) -> bool:
        """List the workload's pods (start-ups, and the pods a scale-down marks); False when the read failed."""
        try:
            memory.startups = self.cluster.pod_startups(view.namespace, view.selector, utc(now))
        except KubeError as exc:
            self.metrics.errors.labels("kube_read").inc()
            errors.append(f"{view.namespace}/{view.name}: reading pod start-ups failed: {exc}")
            return False
        memory.startups_checked = now
        memory.marks_seen = has_marks(memory.startups.pods)
        return True

    @staticmethod
    def _capacity_of(spec: WorkloadSpec, memory: Memory) -> float | None:
        """Requests/s (tokens/s for ``demand-unit: tokens``) per replica to plan with: the annotation's, else the
        learned estimate once it has enough evidence, else None (not learned yet: the replicas are held). Capacity
        is learned in requests/s only: a Deployment on tokens needs the annotation."""
        if spec.capacity_per_replica is not None:
            return spec.capacity_per_replica
        if spec.demand_unit is not DemandUnit.REQUESTS:
            return None
        return None if memory.capacity is None else memory.capacity.estimate

    def _capacity_reason(self, memory: Memory, spec: WorkloadSpec | None = None) -> str:
        """Why there is no learned capacity to plan with (one line)."""
        if spec is not None and spec.demand_unit is DemandUnit.TOKENS:
            return ("capacity is learned in requests/s only, and this Deployment is sized on tokens (demand-unit: "
                    "tokens): annotate capacity-per-replica with the tokens/s one replica serves")
        if memory.capacity is not None:
            return memory.capacity.reason
        if memory.capacity_error is not None:
            return f"its evidence could not be read ({memory.capacity_error})"
        if not self.learn_capacity:
            return "this controller does not learn capacities; annotate capacity-per-replica"
        return "no estimate yet (the evidence is read once metrics are)"
