"""Replay a trace through the cluster model under each policy, and score the policies the same way.

Why it exists: operators tune a forecast config on their own history before they let the
controller act, and the project has to show its policy beats the HPA they run today. Both need one
harness that feeds every policy the same traffic, start-up delays and bill.

Traffic: ticks are 15 s (the HPA sync period) when the bin size is a multiple of 15 s, else the
largest divisor of 15 s that divides the bin. Inside a bin the per-second rate is spread over the
ticks as ``SimulationConfig.bin_shape`` says (``autoscaler.simulation.traffic``: ``flat``, the
library default, or ``linear``; the CLI and the benchmark use ``auto``), the same for every policy.
A missing bin (NaN) carries no demand that can be scored, and policies see it as a missing metric
(the HPA holds, the planner holds).

Scores, per policy (``PolicyResult``):

* ``gpu_hours``: GPUs held by the Deployment's replicas, from ask to release (see ``cluster``);
  ``cost_usd`` = ``gpu_hours`` * the GPU-hour price;
* ``slo_attainment``, ``wait_p99_seconds``, ``dropped_fraction``: what users feel behind a FIFO
  queue in front of the Ready replicas, with a timeout (``SimulationConfig.queue``; the model and the
  exact definitions are in ``autoscaler.simulation.queue``): the share of requests that started
  within the SLO wait (dropped ones are misses), the 99th percentile wait (a dropped request counted
  at the timeout) and the share dropped at the timeout;
* ``unserved_fraction``: requests that arrived above Ready capacity, over all requests
  (``sum_t max(0, demand - ready * capacity) / sum_t demand``): the capacity shortfall, with no
  queue (kept as it was so that older results stay comparable);
* ``cold_start_requests``: the part of those unserved requests that replicas already asked for
  but still starting would have served, i.e. ``sum_t min(shortfall, starting * capacity)`` in
  requests: demand lost to start-up latency rather than to under-asking;
* ``scale_events``: ticks at which the replica count changed; ``max_replicas``: the most replicas
  held (Ready or starting) at once.

* ``ceiling_breaches``, ``gangs_split``, ``gang_wait_hours``, ``ceiling_unserved_fraction`` (and
  ``gangs_missed``, ``gangs_preempted``): what a cost ceiling and training gangs did
  (``SimulationConfig.money``; defined in ``autoscaler.simulation.money``). They are always in the
  JSON, 0 when the run has no ceiling and no gangs, so consumers can rely on the key set. With gangs,
  ``gpu_hours`` and ``cost_usd`` include the gangs' GPUs; ``max_replicas`` and the unserved scores
  are about the inference Deployment only.

The simulation starts warm: every policy begins with the replicas that demand needs over the first
node + pod start-up, Ready, on nodes that already exist (a ceiling then cuts them at the first tick).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, cast

import numpy as np
from numpy.typing import NDArray

from autoscaler.simulation.cluster import NEWEST_FIRST, Cluster, ClusterConfig, NodePool, ScaleIn
from autoscaler.simulation.money import MoneyConfig, MoneyLedger, MoneyOutcome
from autoscaler.simulation.oracle import oracle_schedule
from autoscaler.simulation.queue import P99, FluidQueue, QueueConfig, Segments, replay
from autoscaler.simulation.reactive import ExternalAverageHPA, ObjectValueHPA, QueueHPA, ReactiveHPA
from autoscaler.simulation.traffic import resolve, spread
from models.types import FloatArray, TrafficSeries

IntArray = NDArray[np.int64]
METRIC_KEYS = (
    "gpu_hours", "cost_usd", "slo_attainment", "wait_p99_seconds", "dropped_fraction", "unserved_fraction",
    "cold_start_requests", "scale_events", "max_replicas",
    "ceiling_breaches", "gangs_split", "gang_wait_hours", "ceiling_unserved_fraction", "gangs_missed",
    "gangs_preempted",
)
DEFAULT_REACTIVE_TARGETS = (0.5, 0.6, 0.7, 0.8, 0.9)
DEFAULT_QUEUE_TARGETS = (10.0,)  # vllm:num_requests_waiting averageValue, as the GKE vLLM tutorial deploys it
DEFAULT_PRODSTACK_TARGETS = (1.0,)  # Object metric sum(vllm:num_requests_waiting), target Value (production-stack)
DEFAULT_KEDA_THRESHOLDS = (5.0,)  # KEDA prometheus scaler threshold on the same sum (production-stack's ScaledObject)
POLICY_NAMES = ("predictive", "reactive", "oracle", "hpa-queue", "predictive-persistence", "prodstack-queue",
                "keda-queue")
_CEIL_TOLERANCE = 1e-9


class TickPolicy(Protocol):
    """A closed-loop policy: reads the cluster and the current demand metric each tick, returns replicas."""

    name: str

    def decide(self, k: int, cluster: Cluster, demand: float) -> int: ...


def decides_of(policy: TickPolicy) -> Callable[[int], bool]:
    """The policy's ``decides(k)`` (whether tick ``k`` is one of its decisions), every tick when it has none."""
    found = getattr(policy, "decides", None)
    if callable(found):
        return found  # type: ignore[no-any-return]
    return lambda k: True


def scale_in_of(policy: object) -> ScaleIn:
    """The order in which a scale-down of ``policy``'s Deployment removes Ready replicas (``Cluster.scale_in``): its
    ``scale_in`` (our policy's: the controller's marks), else the ReplicaSet's own."""
    return cast(ScaleIn, getattr(policy, "scale_in", NEWEST_FIRST))  # checked by ``Cluster``


def tick_seconds_for(step_seconds: int, sync_seconds: int = 15) -> int:
    """15 s when the bin is a multiple of it; else the largest divisor of 15 s that divides the bin."""
    return math.gcd(step_seconds, sync_seconds)


def need_per_tick(demand: FloatArray, capacity_per_replica: float, min_replicas: int) -> IntArray:
    """Replicas demand needs on each tick: ``max(min_replicas, ceil(demand / capacity))``."""
    raw = np.ceil(np.nan_to_num(demand, nan=0.0) / capacity_per_replica - _CEIL_TOLERANCE)
    return np.maximum(raw, min_replicas).astype(np.int64)


def forward_max(values: IntArray, window: int) -> IntArray:
    """``out[k] = max(values[k : k + window + 1])`` (the window is cut at the end of the array)."""
    n = int(values.shape[0])
    if n == 0 or window <= 0:
        return values.copy()
    padded = np.concatenate((values, np.full(window, values.min(), dtype=values.dtype)))
    view = np.lib.stride_tricks.sliding_window_view(padded, window + 1)
    out: IntArray = view.max(axis=1)[:n].astype(np.int64)
    return out


@dataclass(frozen=True)
class PolicyResult:
    """One policy's run: its scores and the replica counts it held on every tick."""

    name: str
    gpu_hours: float
    cost_usd: float
    unserved_fraction: float
    cold_start_requests: float
    scale_events: int
    max_replicas: int
    requested: IntArray = field(repr=False)
    ready: IntArray = field(repr=False)
    seconds: float = 0.0  # wall-clock time the run took (not part of the scores)
    ceiling_breaches: int = 0
    gangs_split: int = 0
    gang_wait_hours: float = 0.0
    ceiling_unserved_fraction: float = 0.0
    gangs_missed: int = 0
    gangs_preempted: int = 0
    wanted: IntArray | None = field(default=None, repr=False)  # replicas the policy asked for before the ceiling
    gang_gpus: IntArray | None = field(default=None, repr=False)  # GPUs held by gangs per tick
    slo_attainment: float = 1.0
    wait_p99_seconds: float = 0.0
    dropped_fraction: float = 0.0
    waiting: FloatArray | None = field(default=None, repr=False)  # requests waiting at the end of each tick

    def metrics(self) -> dict[str, float | int]:
        """The scores (``METRIC_KEYS``), JSON-safe, in the documented key order."""
        return {
            "gpu_hours": round(self.gpu_hours, 4),
            "cost_usd": round(self.cost_usd, 2),
            "slo_attainment": round(self.slo_attainment, 8),
            "wait_p99_seconds": round(self.wait_p99_seconds, 3),
            "dropped_fraction": round(self.dropped_fraction, 8),
            "unserved_fraction": round(self.unserved_fraction, 8),
            "cold_start_requests": round(self.cold_start_requests, 2),
            "scale_events": int(self.scale_events),
            "max_replicas": int(self.max_replicas),
            "ceiling_breaches": int(self.ceiling_breaches),
            "gangs_split": int(self.gangs_split),
            "gang_wait_hours": round(self.gang_wait_hours, 4),
            "ceiling_unserved_fraction": round(self.ceiling_unserved_fraction, 8),
            "gangs_missed": int(self.gangs_missed),
            "gangs_preempted": int(self.gangs_preempted),
        }


def score(
    name: str,
    demand: FloatArray,
    requested: IntArray,
    ready: IntArray,
    capacity_per_replica: float,
    tick_seconds: int,
    gpus_per_replica: int,
    gpu_hour_price: float,
    seconds: float = 0.0,
    money: MoneyOutcome | None = None,
    queue: QueueConfig | None = None,
    segments: Segments | None = None,
) -> PolicyResult:
    """Score a run from per-tick demand (req/s, NaN = missing) and replica counts (and what the money stage did).

    The queue scores use ``queue`` (default ``QueueConfig()``); ``segments`` may pass the arrivals' cut
    (``Segments(demand, tick_seconds, queue.timeout_seconds)``) when several runs share it.
    """
    d = np.nan_to_num(demand, nan=0.0)
    q_cfg = queue or QueueConfig()
    if segments is None:
        segments = Segments(demand, tick_seconds, q_cfg.timeout_seconds)
    waits = replay(segments, ready.astype(np.float64) * capacity_per_replica)
    shortfall = np.maximum(d - ready * capacity_per_replica, 0.0)
    total = float(d.sum()) * tick_seconds
    unserved = float(shortfall.sum()) * tick_seconds
    starting = (requested - ready) * capacity_per_replica
    cold = float(np.minimum(shortfall, starting).sum()) * tick_seconds
    gpu_ticks = float(requested.sum()) * gpus_per_replica
    extra: dict[str, Any] = {}
    if money is not None:
        wanted = np.asarray(money.wanted, dtype=np.int64)
        gang_gpus = np.asarray(money.gang_gpus, dtype=np.int64)
        gpu_ticks += float(gang_gpus.sum())
        # of the requests that found no Ready replica, those between the allowed and the asked capacity
        cut = np.maximum(np.minimum(d, wanted * capacity_per_replica) - requested * capacity_per_replica, 0.0)
        by_ceiling = float(np.minimum(shortfall, cut).sum()) * tick_seconds
        extra = {
            "ceiling_breaches": money.ceiling_breaches,
            "gangs_split": money.gangs_split,
            "gang_wait_hours": money.gang_wait_hours,
            "ceiling_unserved_fraction": by_ceiling / total if total > 0 else 0.0,
            "gangs_missed": money.gangs_missed,
            "gangs_preempted": money.gangs_preempted,
            "wanted": wanted,
            "gang_gpus": gang_gpus,
        }
    gpu_hours = gpu_ticks * tick_seconds / 3600.0
    return PolicyResult(
        name=name,
        gpu_hours=gpu_hours,
        cost_usd=gpu_hours * gpu_hour_price,
        unserved_fraction=unserved / total if total > 0 else 0.0,
        cold_start_requests=cold,
        scale_events=int(np.count_nonzero(np.diff(requested))),
        max_replicas=int(requested.max()) if requested.size else 0,
        requested=requested,
        ready=ready,
        seconds=seconds,
        slo_attainment=waits.attainment(q_cfg.slo_wait_seconds),
        wait_p99_seconds=waits.wait_quantile(P99),
        dropped_fraction=waits.dropped_fraction,
        waiting=waits.backlog_end_of_tick,
        **extra,
    )


class Scheduled:
    """A policy that holds a replica count fixed in advance per tick (the oracle's, computed offline).

    It knows its own future exactly, so it can place a gang in the real trough (``inference_gpus_ahead``).
    """

    def __init__(self, name: str, counts: IntArray, start: int = 0, tick_seconds: int = 15,
                 gpus_per_replica: int = 1) -> None:
        self.name = name
        self._array = counts
        self._counts = counts.tolist()
        self._start = start
        self._tick = tick_seconds
        self._gpr = gpus_per_replica

    def decide(self, k: int, cluster: Cluster, demand: float) -> int:
        return int(self._counts[k])

    def inference_gpus_ahead(self, k: int, seconds: int) -> list[tuple[int, float]]:
        """Its own replica GPUs from tick ``k`` for ``seconds`` (perfect foresight), as change points."""
        end = min(len(self._counts), k + math.ceil(seconds / self._tick) + 1)
        counts = self._array[k:end]
        if counts.size == 0:
            counts = self._array[-1:]
        change = np.flatnonzero(np.diff(counts)) + 1
        idx = np.concatenate(([0], change))
        return [(self._start + (k + int(i)) * self._tick, float(counts[i] * self._gpr)) for i in idx]


def run_closed_loop(
    policy: TickPolicy, demand: FloatArray, cluster: Cluster, ledger: MoneyLedger | None = None,
    queue: FluidQueue | None = None, capacity_per_replica: float = 1.0,
) -> tuple[IntArray, IntArray]:
    """Drive ``policy`` tick by tick (through the money stage ``ledger`` when there is one);
    returns ``(requested, ready)`` replicas per tick.

    A policy with ``observe_queue(waiting)`` (the queue-driven HPA) is shown ``queue``'s backlog before
    each decision; the queue is served by the Ready replicas (``capacity_per_replica`` req/s each).
    """
    requested: list[int] = []
    ready: list[int] = []
    decide = policy.decide
    decides = decides_of(policy)
    observe = getattr(policy, "observe_queue", None)
    if not callable(observe):
        observe = None
    elif queue is None:
        raise ValueError(f"policy {policy.name} reads the queue: run_closed_loop needs a FluidQueue")
    for k, d in enumerate(demand.tolist()):
        cluster.advance(k)
        if observe is not None and queue is not None:
            observe(queue.waiting)
        desired = decide(k, cluster, d)
        current = cluster.requested
        if ledger is not None:
            warm = int(getattr(policy, "warm_pool_replicas", 0))
            desired = ledger.step(k, current, desired, decides(k), warm)
        if desired != current:
            cluster.scale_to(k, desired)
            current = cluster.requested
        requested.append(current)
        ready.append(cluster.ready)
        if observe is not None and queue is not None:
            queue.advance(k, cluster.ready * capacity_per_replica)
        if ledger is not None:
            ledger.record(k, cluster.requested)
    return np.asarray(requested, dtype=np.int64), np.asarray(ready, dtype=np.int64)


@dataclass(frozen=True)
class SimulationConfig:
    """What is simulated: the replica size, the cluster, the price and the policies to compare."""

    capacity_per_replica: float
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    gpu_hour_price: float = 3.0
    min_replicas: int = 1
    max_replicas: int = 100
    reactive_targets: tuple[float, ...] = DEFAULT_REACTIVE_TARGETS
    policies: tuple[str, ...] = ("predictive", "reactive", "oracle")
    money: MoneyConfig = field(default_factory=MoneyConfig)
    queue: QueueConfig = field(default_factory=QueueConfig)
    queue_targets: tuple[float, ...] = DEFAULT_QUEUE_TARGETS  # hpa-queue: waiting requests per pod
    prodstack_targets: tuple[float, ...] = DEFAULT_PRODSTACK_TARGETS  # prodstack-queue: waiting requests in all
    keda_thresholds: tuple[float, ...] = DEFAULT_KEDA_THRESHOLDS  # keda-queue: waiting requests per pod
    bin_shape: str = "flat"  # how a bin's rate is spread over its ticks (``autoscaler.simulation.traffic``)
    # The NodePool the Deployment names (None: none, as ``simulate`` replays it: the controller then reads no free
    # GPUs for it, and our policy plans every new replica as waiting for a node); named, its node pool's free GPUs
    # are observed as the controller reads a named pool's (``cluster.NodePool.ready_free_gpus``).
    nodepool: str | None = None
    # When the controller takes the Deployment over, this long into the trace (0: from its start, a new Deployment).
    # Every policy runs the whole trace and is scored on the ticks after it (the queue empty there); the self-tuned
    # predictive policy tunes nothing before it, and its first tuning replays the history before it at once, as a
    # Deployment an HPA scaled finds its history in Prometheus (``predictive.factory``).
    taken_over_seconds: int = 0

    def __post_init__(self) -> None:
        cap = self.capacity_per_replica
        if self.taken_over_seconds < 0:
            raise ValueError(f"the takeover must be at or after the trace's start, got {self.taken_over_seconds}s")
        if self.taken_over_seconds and self.money.active:
            raise ValueError("a takeover is scored on the days after it; the money stage (ceilings, gangs) is scored "
                             "on the whole trace: run them apart")
        if not (math.isfinite(cap) and cap > 0):
            raise ValueError(f"capacity per replica must be a finite number > 0, got {cap!r}")
        if not (math.isfinite(self.gpu_hour_price) and self.gpu_hour_price >= 0):
            raise ValueError(f"GPU-hour price must be a finite number >= 0, got {self.gpu_hour_price!r}")
        if not 0 <= self.min_replicas <= self.max_replicas:
            raise ValueError(f"need 0 <= min replicas ({self.min_replicas}) <= max replicas ({self.max_replicas})")
        for t in self.reactive_targets:
            if not (math.isfinite(t) and 0 < t <= 1):
                raise ValueError(f"reactive target utilisation must be in (0, 1], got {t!r}")
        for t in self.queue_targets:
            if not (math.isfinite(t) and t > 0):
                raise ValueError(f"hpa-queue target (waiting requests per pod) must be > 0, got {t!r}")
        for t in (*self.prodstack_targets, *self.keda_thresholds):
            if not (math.isfinite(t) and t > 0):
                raise ValueError(f"prodstack-queue / keda-queue target (waiting requests) must be > 0, got {t!r}")
        resolve(self.bin_shape, 60)  # a ValueError naming the choices
        unknown = [p for p in self.policies if p not in POLICY_NAMES]
        if unknown:
            raise ValueError(f"unknown policy {unknown[0]!r} (choose from {', '.join(POLICY_NAMES)})")


@dataclass(frozen=True)
class SimulationResult:
    """Every policy's run over one trace, and the per-tick demand they were scored against."""

    trace: str
    start: int
    tick_seconds: int
    demand: FloatArray = field(repr=False)
    capacity_per_replica: float
    policies: dict[str, PolicyResult]
    notes: tuple[str, ...] = ()  # what a policy wants the reader to know (e.g. forecaster fallbacks)
    timings: dict[str, float] = field(default_factory=dict)  # seconds by part, e.g. predictive forecast/plan
    queue: QueueConfig = field(default_factory=QueueConfig)
    bin_shape: str = "flat"  # as replayed: flat or linear

    def to_json(self) -> dict[str, Any]:
        return {
            "trace": self.trace,
            "queue": {"slo_wait_seconds": self.queue.slo_wait_seconds, "timeout_seconds": self.queue.timeout_seconds,
                      "bin_shape": self.bin_shape},
            "policies": {name: r.metrics() for name, r in self.policies.items()},
        }

    def reactive(self) -> list[PolicyResult]:
        """The reactive runs, from the most GPU-hours to the fewest."""
        runs = [r for name, r in self.policies.items() if name.startswith("reactive@")]
        return sorted(runs, key=lambda r: -r.gpu_hours)


@dataclass(frozen=True)
class ReactiveAtSameCost:
    """The HPA's unserved fraction interpolated (linearly, between targets) at a given GPU-hour spend."""

    gpu_hours: float
    unserved_fraction: float
    between: tuple[str, str]
    extrapolated: bool  # the spend is outside the targets' range: the nearest end is used


def reactive_metric_at(gpu_hours: float, reactive: Sequence[PolicyResult], metric: str) -> float | None:
    """Any score of the reactive curve (e.g. ``slo_attainment``) interpolated linearly at ``gpu_hours``
    (the nearest end outside the targets' range)."""
    if not reactive:
        return None
    runs = sorted(reactive, key=lambda r: r.gpu_hours)
    xs = np.asarray([r.gpu_hours for r in runs])
    ys = np.asarray([float(getattr(r, metric)) for r in runs])
    return float(np.interp(gpu_hours, xs, ys))


def reactive_at(gpu_hours: float, reactive: Sequence[PolicyResult]) -> ReactiveAtSameCost | None:
    """Interpolate the reactive curve (GPU-hours -> unserved fraction) at ``gpu_hours``."""
    if not reactive:
        return None
    runs = sorted(reactive, key=lambda r: r.gpu_hours)
    xs = np.asarray([r.gpu_hours for r in runs])
    ys = np.asarray([r.unserved_fraction for r in runs])
    value = float(np.interp(gpu_hours, xs, ys))
    i = int(np.searchsorted(xs, gpu_hours))
    lo, hi = runs[max(0, i - 1)].name, runs[min(len(runs) - 1, i)].name
    return ReactiveAtSameCost(gpu_hours, value, (lo, hi), bool(gpu_hours < xs[0] or gpu_hours > xs[-1]))


def hpa_a_user_picks(reactive: Sequence[PolicyResult], attainment: float) -> tuple[PolicyResult, bool] | None:
    """The HPA target a user would pick for an objective of ``attainment``: the cheapest run that met it (True), else
    the one that attained most (False; the fewest GPU-hours among ties); None without runs. Why a function of its own:
    it is the comparison a platform team makes before it switches its HPA off (the objective the self-tuned
    controller is held to, against the HPA at the right target), in ``simulate``'s verdict and the benchmarks alike."""
    meeting = [r for r in reactive if r.slo_attainment >= attainment]
    if meeting:
        return min(meeting, key=lambda r: r.gpu_hours), True
    if not reactive:
        return None
    return max(reactive, key=lambda r: (r.slo_attainment, -r.gpu_hours)), False


PredictiveFactory = Callable[[TrafficSeries, SimulationConfig, ClusterConfig], TickPolicy]


def simulate(
    series: TrafficSeries,
    config: SimulationConfig,
    trace_name: str = "trace",
    predictive: PredictiveFactory | None = None,
    progress: Callable[[str], None] | None = None,
    persistence: PredictiveFactory | None = None,
) -> SimulationResult:
    """Run every policy in ``config.policies`` over ``series`` (per-second rates).

    ``predictive`` builds the predictive policy (``autoscaler.simulation.predictive.factory`` with a
    model and a ``ScalingPolicy``); it is required when "predictive" is among the policies.
    ``persistence`` builds the last-value planner (the same factory with the persistence model, named
    ``predictive-persistence``); it is required when "predictive-persistence" is among them.
    """
    step = series.step_seconds
    tick = tick_seconds_for(step)
    cluster_cfg = replace(config.cluster, tick_seconds=tick)
    per_bin = step // tick
    shape = resolve(config.bin_shape, step)
    demand = spread(series.values, per_bin, shape)
    segments = Segments(demand, tick, config.queue.timeout_seconds)
    need = need_per_tick(demand, config.capacity_per_replica, config.min_replicas)
    full = cluster_cfg.ticks(cluster_cfg.node_startup_seconds + cluster_cfg.pod_startup_seconds)
    initial = min(int(need[: full + 1].max()) if need.size else config.min_replicas, config.max_replicas)
    price = config.gpu_hour_price
    g = cluster_cfg.gpus_per_replica
    first = -(-config.taken_over_seconds // tick)  # the first tick scored: the takeover's, or the next one
    if first >= demand.size:
        raise ValueError(f"the takeover at {config.taken_over_seconds}s is at or after the trace's end "
                         f"({demand.size * tick}s)")
    scored = demand[first:]
    scored_segments = segments if first == 0 else Segments(scored, tick, config.queue.timeout_seconds)

    notes: list[str] = []

    def closed(policy: TickPolicy) -> PolicyResult:
        if progress is not None:
            progress(policy.name)
        t0 = time.perf_counter()
        ledger = None
        if config.money.active:
            placer = policy if callable(getattr(policy, "inference_gpus_ahead", None)) else None
            ledger = MoneyLedger(
                config.money, policy_name=policy.name, gpu_hour_price=price, gpus_per_replica=g,
                gpus_per_node=cluster_cfg.gpus_per_node, min_replicas=config.min_replicas, tick_seconds=tick,
                node_startup_ticks=cluster_cfg.ticks(cluster_cfg.node_startup_seconds), start=series.start,
                placer=placer,  # type: ignore[arg-type]
                node_startup_seconds=float(cluster_cfg.node_startup_seconds),
            )
        queue = FluidQueue(segments) if callable(getattr(policy, "observe_queue", None)) else None
        nodes = NodePool.for_config(cluster_cfg)
        nodes.name = config.nodepool
        requested, ready = run_closed_loop(policy, demand, Cluster(cluster_cfg, initial, nodes, scale_in_of(policy)),
                                           ledger, queue, config.capacity_per_replica)
        money = ledger.outcome() if ledger is not None else None
        if money is not None:
            notes.extend(money.notes)
        return score(policy.name, scored, requested[first:], ready[first:], config.capacity_per_replica, tick, g,
                     price, time.perf_counter() - t0, money, config.queue, scored_segments)

    results: dict[str, PolicyResult] = {}
    timings: dict[str, float] = {}
    for name, build in (("predictive", predictive), ("predictive-persistence", persistence)):
        if name not in config.policies:
            continue
        if build is None:
            raise ValueError(f"the {name} policy needs a factory (autoscaler.simulation.predictive.factory)")
        policy = build(series, config, cluster_cfg)
        results[name] = closed(policy)
        describe = getattr(policy, "notes", None)
        if callable(describe):
            notes.extend(str(n) for n in describe())
        parts = getattr(policy, "timings", None)
        if isinstance(parts, dict):
            timings.update({f"{name}_{k}": float(v) for k, v in parts.items()})
    if "oracle" in config.policies:
        counts = oracle_schedule(np.minimum(need, config.max_replicas), cluster_cfg)
        results["oracle"] = closed(Scheduled("oracle", counts, series.start, tick, g))
    if "reactive" in config.policies:
        for target in config.reactive_targets:
            hpa = ReactiveHPA(target, config.capacity_per_replica, tick, config.min_replicas, config.max_replicas)
            results[hpa.name] = closed(hpa)
    if "hpa-queue" in config.policies:
        for waiting in config.queue_targets:
            qhpa = QueueHPA(waiting, tick, config.min_replicas, config.max_replicas)
            results[qhpa.name] = closed(qhpa)
    for policy_name, targets, cls in (("prodstack-queue", config.prodstack_targets, ObjectValueHPA),
                                      ("keda-queue", config.keda_thresholds, ExternalAverageHPA)):
        if policy_name in config.policies:
            for waiting in targets:
                other = cls(waiting, tick, config.min_replicas, config.max_replicas)
                results[other.name] = closed(other)
    return SimulationResult(
        trace_name, series.start + first * tick, tick, scored, config.capacity_per_replica, results, tuple(notes),
        timings, config.queue, shape,
    )
