"""Forecast-sized node headroom: how many whole idle nodes a NodePool keeps, from the *pooled* forecast error.

Why it exists: a replica that finds a free GPU is Ready one pod start-up after it is asked for; one that needs a
new node waits for the node too (minutes on GPU instances). A buffer of idle nodes turns the second case into the
first, but idle nodes are billed whole. Sizing the buffer per Deployment (each one's upper band above its median)
overpays: the Deployments sharing a pool do not all exceed their forecast at once, so the pool's error is smaller
than the sum of theirs. This module sizes one buffer per pool from the error of the *summed* forecast, which
carries exactly as much correlation as the Deployments really have. Karpenter's ``CapacityBuffer`` (and the
placeholder pods of ``autoscaler.domain.nodes``) hold a fixed count; nobody sizes it from a forecast
(../shared/ANCHORS.md).

The rule (``pool_headroom``), in GPUs at the node lead time ``L`` (node start-up + pod start-up):

* ``need = sum of the Deployments' median forecasts at now + L`` (GPUs: demand / capacity x GPUs per replica);
* ``error`` = the ``quantile`` (the strictest latency objective of the pool's Deployments, ``objective_quantile``)
  of the pool's realised errors (``actual - need`` measured ``L`` later, the
  fleet-level residual, ``PooledResiduals``) once ``min_residuals`` of them exist; before that the prior
  ``z(quantile) x sqrt(sum of per-Deployment band variances)`` (independent errors: the smallest pooled error
  the bands allow; the residuals replace it as soon as there is evidence);
* ``rise = max(0, need + error - now)``, where ``now`` is the pool's need at the current demand: how much more the
  pool may need within ``L``. The planners hold a margin above need (warm pools, a utilisation target): the pods
  hold ``held`` GPUs for ``now`` GPUs of need, so a rise of ``rise`` GPUs of need makes them ask
  ``buffer = rise x margin`` GPUs more, ``margin = held / max(1, now)`` between 1 and ``MAX_MARGIN`` (a need near
  zero, a scale-to-zero Deployment's minimum, would otherwise make any rise look enormous). Those GPUs must be on
  nodes already when they are asked for;
* idle nodes = ``ceil((buffer - free GPUs on partly used nodes) / GPUs per node)``, whole nodes, then capped by
  the pool's node limit (nodes holding pods count against it first) and by the cost ceiling as billed (the
  whole-node price against the slack the caller computed). Nodes above the answer are released: the caller lets
  Karpenter consolidate them after ``consolidateAfter``.

Pure: no clock, no I/O. Time is passed in (``PooledResiduals.observe(now, ...)``), so the controller's money
stage and the simulator call the same code.
"""

from __future__ import annotations

import bisect
import math
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Literal

__all__ = [
    "DEFAULT_MIN_RESIDUALS",
    "DEFAULT_QUANTILE",
    "MAX_MARGIN",
    "MAX_QUANTILE",
    "HeadroomDecision",
    "PoolForecast",
    "PooledResiduals",
    "objective_quantile",
    "pool_headroom",
    "pooled_error_gpus",
    "upper_quantile",
]

DEFAULT_QUANTILE = 0.95  # a pool none of whose Deployments states an objective (``objective_quantile``)
MAX_QUANTILE = 0.99  # the most a pool's headroom covers, whatever its objectives (``objective_quantile``)
DEFAULT_MIN_RESIDUALS = 60  # 30 minutes of 30 s decisions before the residuals replace the prior
MAX_MARGIN = 4.0  # GPUs held per GPU of need, at most (an HPA at 0.25 utilisation holds 4x)
_EPS = 1e-9


def upper_quantile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile of ``values`` (linear interpolation between order statistics, as numpy's default)."""
    if not values:
        raise ValueError("no values")
    if not 0 < q < 1:
        raise ValueError(f"quantile must be in (0, 1), got {q!r}")
    ordered = sorted(values)
    pos = q * (len(ordered) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def objective_quantile(objectives: Iterable[float]) -> float:
    """The quantile of the pool's error its headroom covers: the strictest latency objective (attainment share) of
    its Deployments, at most ``MAX_QUANTILE``; ``DEFAULT_QUANTILE`` when none states one.

    Why the objective: the headroom is what lets a scale-up inside the node lead find a node, and a pool whose
    Deployments promise 99% of requests on time cannot run short of nodes in one lead window of twenty (a p95
    buffer). Measured (``benchmarks/fleet_simulate.py``, 14 days, every objective 99%): on the traces' fleet the
    self-tuned default with headroom cut 94% / 89% / 81% of the HPA + Karpenter curve's misses at equal GPU-hours on
    8-, 4- and 2-GPU nodes with a p95 buffer, and 96% / 94% / 92% with p99 (at least 38% / 37% / 34% fewer
    GPU-hours at equal attainment, from 43% / 43% / 40%). Why a cap: beyond p99 the quantile of a day's residuals is
    a handful of the largest, and the buffer would follow single bursts."""
    strictest = max(objectives, default=None)
    if strictest is None:
        return DEFAULT_QUANTILE
    return min(MAX_QUANTILE, max(0.5, float(strictest)))


def pooled_error_gpus(residuals: Sequence[float], band_sigmas: Sequence[float], quantile: float,
                      min_residuals: int = DEFAULT_MIN_RESIDUALS) -> tuple[float, Literal["residuals", "prior"]]:
    """The pool's upper error at the node lead (GPUs): the residuals' ``quantile`` once ``min_residuals`` exist,
    else ``z(quantile) x sqrt(sum sigma^2)`` over the Deployments' bands."""
    if len(residuals) >= max(1, min_residuals):
        return upper_quantile(residuals, quantile), "residuals"
    z = NormalDist().inv_cdf(quantile)
    return z * math.sqrt(sum(max(0.0, s) ** 2 for s in band_sigmas)), "prior"


@dataclass(frozen=True)
class PoolForecast:
    """One NodePool at one decision: its shape, what the forecasts say at the node lead, what it holds, its caps."""

    pool: str
    gpus_per_node: int
    median_gpus: float  # sum over the pool's Deployments of the median need at now + node lead (GPUs)
    band_sigmas: tuple[float, ...] = ()  # per Deployment: one standard deviation of its need at the lead (GPUs)
    residuals: tuple[float, ...] = ()  # the pool's realised errors at the lead (actual - median), GPUs
    held_gpus: int = 0  # GPUs the pool's pods request now (Ready, starting or Pending)
    current_gpus: float = 0.0  # the pool's need at the current demand (GPUs: demand / capacity x GPUs per replica)
    partial_free_gpus: int = 0  # free GPUs on nodes that hold pods (usable without an idle node)
    busy_nodes: int = 0  # nodes holding pods (they count against the limit first)
    max_nodes: int | None = None  # the NodePool's limit in whole nodes
    node_usd_per_hour: float = 0.0
    ceiling_slack_usd_per_hour: float | None = None  # ceiling - billed spend of everything but this pool's idle nodes
    quantile: float = DEFAULT_QUANTILE
    min_residuals: int = DEFAULT_MIN_RESIDUALS

    def __post_init__(self) -> None:
        if self.gpus_per_node < 1:
            raise ValueError(f"NodePool {self.pool}: gpus per node must be >= 1, got {self.gpus_per_node}")
        if not 0 < self.quantile < 1:
            raise ValueError(f"NodePool {self.pool}: headroom quantile must be in (0, 1), got {self.quantile}")
        for name in ("held_gpus", "partial_free_gpus", "busy_nodes", "current_gpus"):
            if getattr(self, name) < 0:
                raise ValueError(f"NodePool {self.pool}: {name} must be >= 0, got {getattr(self, name)}")


@dataclass(frozen=True)
class HeadroomDecision:
    """Idle whole nodes one pool keeps now, and why."""

    pool: str
    idle_nodes: int  # after the caps
    wanted_nodes: int  # before the caps
    buffer_gpus: float  # GPUs the pods may ask within the node lead: rise x margin (>= 0)
    error_gpus: float
    source: Literal["residuals", "prior"]
    capped_by: Literal["limit", "ceiling"] | None
    quantile: float = DEFAULT_QUANTILE  # of the pooled error covered (``objective_quantile``)

    @property
    def detail(self) -> str:
        cap = f", capped by the {self.capped_by}" if self.capped_by else ""
        return (f"NodePool {self.pool}: pooled p{100 * self.quantile:g} error {self.error_gpus:.1f} GPU(s) "
                f"({self.source}), buffer "
                f"{self.buffer_gpus:.1f} GPU(s) -> {self.idle_nodes} idle node(s){cap}")


def pool_headroom(f: PoolForecast) -> HeadroomDecision:
    """Whole idle nodes for one pool (module docstring: the rule, the caps)."""
    error, source = pooled_error_gpus(f.residuals, f.band_sigmas, f.quantile, f.min_residuals)
    rise = max(0.0, f.median_gpus + error - f.current_gpus)
    margin = min(MAX_MARGIN, max(1.0, f.held_gpus / max(1.0, f.current_gpus)))  # a need under one GPU counts as one
    buffer = rise * margin
    wanted = max(0, math.ceil((buffer - f.partial_free_gpus) / f.gpus_per_node - _EPS))
    idle = wanted
    capped: Literal["limit", "ceiling"] | None = None
    if f.max_nodes is not None and idle > max(0, f.max_nodes - f.busy_nodes):
        idle, capped = max(0, f.max_nodes - f.busy_nodes), "limit"
    if f.ceiling_slack_usd_per_hour is not None and f.node_usd_per_hour > 0:
        affordable = max(0, math.floor(f.ceiling_slack_usd_per_hour / f.node_usd_per_hour + _EPS))
        if idle > affordable:
            idle, capped = affordable, "ceiling"
    return HeadroomDecision(f.pool, idle, wanted, buffer, error, source, capped, f.quantile)


class PooledResiduals:
    """The realised error of a pool's summed median forecast at the node lead: forecasts wait until they are due,
    then meet the actual need. Time is passed in (seconds, any epoch); ``maxlen`` keeps the newest errors."""

    def __init__(self, maxlen: int = 2880) -> None:
        if maxlen < 1:
            raise ValueError(f"maxlen must be >= 1, got {maxlen}")
        self._due: deque[tuple[float, float]] = deque()  # (due time, forecast GPUs), in due order
        self.errors: deque[float] = deque()  # newest last
        self._sorted: list[float] = []  # the same errors, sorted (a quantile per decision stays cheap)
        self.maxlen = maxlen

    def forecast(self, due: float, gpus: float) -> None:
        """A pooled median forecast of ``gpus`` for time ``due``."""
        if self._due and due < self._due[-1][0]:
            raise ValueError(f"forecasts must be added in due order: {due} after {self._due[-1][0]}")
        self._due.append((due, gpus))

    def observe(self, now: float, actual_gpus: float) -> None:
        """The pool's actual need at ``now``: every forecast due by then becomes an error (actual - forecast)."""
        while self._due and self._due[0][0] <= now:
            _, predicted = self._due.popleft()
            error = actual_gpus - predicted
            self.errors.append(error)
            bisect.insort(self._sorted, error)
            if len(self.errors) > self.maxlen:
                old = self.errors.popleft()
                del self._sorted[bisect.bisect_left(self._sorted, old)]

    def snapshot(self) -> tuple[float, ...]:
        """The errors kept, sorted (what ``PoolForecast.residuals`` takes; order does not matter to a quantile)."""
        return tuple(self._sorted)
