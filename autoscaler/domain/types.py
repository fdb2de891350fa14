"""Value types of the capacity planner: the policy, what is known now, and the explained decision.

Why a module of its own: the planner, the simulator, the controller loop and the ``explain`` command
all exchange these objects. Their invariants (min <= max, capacity > 0, non-negative counts) are
checked once, here, so that every consumer can trust them; a bad value fails with a one-line
``ValueError`` naming the field.

Per Deployment, not per cluster (docs/ARCHITECTURE.md, "Per Deployment first, then the whole cluster"):
this module holds one Deployment's part (``WorkloadState`` -> ``ScalingDecision``); the cluster-wide
money stage has its own types (``autoscaler.domain.cost``, ``nodes``, ``money``).

A ``ScalingDecision`` carries ``steps``: every rule that touched the replica count, in order, with
the numbers it used (after llm-d's variant autoscaler), so ``explain`` and the published status
can say *why* a count was chosen, and ``recommendations``: the stabilisation history the caller
passes back in the next ``WorkloadState`` (the planner keeps no state of its own).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any, Literal

from autoscaler.domain.stabilize import CheckedHistory
from autoscaler.domain.values import quick_init

__all__ = ["ScalingDecision", "ScalingPolicy", "Step", "WarmPoolAs", "WorkloadState", "point_label"]

WarmPoolAs = Literal["replicas", "nodes"]


def point_label(warm_pool_quantile: int, utilisation: float, lead_only: bool) -> str:
    """An operating point as the tuner's reports name it: ``hpa@0.7+lead`` for the HPA's own point (the HPA at that
    target, started early), ``q90`` for a band, ``q80/u0.85`` for a band with a utilisation floor below 1."""
    if lead_only:
        return f"hpa@{utilisation:g}+lead"
    return f"q{warm_pool_quantile}" + ("" if utilisation == 1 else f"/u{utilisation:g}")


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ValueError(message)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class ScalingPolicy:
    """How one workload is scaled. Validated on construction."""

    capacity_per_replica: float
    min_replicas: int = 1
    max_replicas: int = 100
    level: int = 90
    warm_pool: int | None = None
    warm_pool_as: WarmPoolAs = "replicas"
    lookahead_window_seconds: int = 300
    scale_down_stabilization_seconds: int = 600
    max_scale_up_step: int | None = None
    max_scale_down_fraction: float = 0.5
    # Added: the band the automatic warm pool covers up to (the highest band in (level, warm_pool_level]
    # present in the forecast; without one, the spread band(level) - mean stands in, see capacity.py). The
    # default is the config profile's ``warm_pool_quantile`` default, chosen on the simulate benchmark.
    warm_pool_level: int = 95
    # Added: the utilisation the reactive floor sizes observed demand at (1.0: exactly what it needs now). Below 1
    # the floor keeps an HPA-like headroom over what is observed (``ceil(demand / (capacity * target))``), which a
    # bursty service with an objective in seconds needs on top of what a forecast can see.
    reactive_utilisation: float = 1.0
    # Added: the forecast adds only the lead. The replicas are the HPA's, ``ceil(demand / (capacity *
    # reactive_utilisation))``, on the observed demand scaled by the rise of the median forecast from now to the
    # look-ahead window at the lead (at least 1; ``domain.planner``): a reactive autoscaler that starts early, with
    # no band, warm pool, surprise headroom or lead gap.
    # Why: where the forecast's bands buy nothing, the self-tuner must still be able to run what the HPA runs.
    lead_only: bool = False

    @cached_property
    def lead_only_sizing(self) -> ScalingPolicy:
        """What a lead-only point sizes its forecast with: the median at the HPA's utilisation. Made once per policy
        (a self-tuning replay decides tens of thousands of times on one)."""
        return replace(self, level=50, capacity_per_replica=self.capacity_per_replica * self.reactive_utilisation)

    @property
    def point_label(self) -> str:
        """The operating point this policy runs, as the tuner names it (``point_label``)."""
        return point_label(self.warm_pool_level, self.reactive_utilisation, self.lead_only)

    def __post_init__(self) -> None:
        cap = self.capacity_per_replica
        _require(
            isinstance(cap, int | float) and math.isfinite(cap) and cap > 0,
            f"ScalingPolicy.capacity_per_replica must be a finite number > 0, got {cap!r}",
        )
        _require(
            _is_int(self.min_replicas) and self.min_replicas >= 0,
            f"ScalingPolicy.min_replicas must be an integer >= 0, got {self.min_replicas!r}",
        )
        _require(
            _is_int(self.max_replicas) and self.max_replicas >= 1,
            f"ScalingPolicy.max_replicas must be an integer >= 1, got {self.max_replicas!r}",
        )
        _require(
            self.min_replicas <= self.max_replicas,
            f"ScalingPolicy.min_replicas ({self.min_replicas}) must be <= max_replicas ({self.max_replicas})",
        )
        _require(
            _is_int(self.level) and 0 < self.level < 100,
            f"ScalingPolicy.level must be a percentile in (0, 100), got {self.level!r}",
        )
        _require(
            _is_int(self.warm_pool_level) and self.level <= self.warm_pool_level < 100,
            f"ScalingPolicy.warm_pool_level must be an integer in [level, 100), got {self.warm_pool_level!r}",
        )
        _require(
            self.warm_pool is None or (_is_int(self.warm_pool) and self.warm_pool >= 0),
            f"ScalingPolicy.warm_pool must be None (auto) or an integer >= 0, got {self.warm_pool!r}",
        )
        _require(
            self.warm_pool_as in ("replicas", "nodes"),
            f"ScalingPolicy.warm_pool_as must be 'replicas' or 'nodes', got {self.warm_pool_as!r}",
        )
        _require(
            _is_int(self.lookahead_window_seconds) and self.lookahead_window_seconds >= 0,
            f"ScalingPolicy.lookahead_window_seconds must be an integer >= 0, got {self.lookahead_window_seconds!r}",
        )
        _require(
            _is_int(self.scale_down_stabilization_seconds) and self.scale_down_stabilization_seconds >= 0,
            "ScalingPolicy.scale_down_stabilization_seconds must be an integer >= 0, "
            f"got {self.scale_down_stabilization_seconds!r}",
        )
        _require(
            self.max_scale_up_step is None or (_is_int(self.max_scale_up_step) and self.max_scale_up_step >= 1),
            f"ScalingPolicy.max_scale_up_step must be None (unlimited) or an integer >= 1, "
            f"got {self.max_scale_up_step!r}",
        )
        util = self.reactive_utilisation
        _require(
            isinstance(util, int | float) and math.isfinite(util) and 0 < util <= 1,
            f"ScalingPolicy.reactive_utilisation must be in (0, 1], got {util!r}",
        )
        frac = self.max_scale_down_fraction
        _require(
            isinstance(frac, int | float) and math.isfinite(frac) and 0 < frac <= 1,
            f"ScalingPolicy.max_scale_down_fraction must be in (0, 1], got {frac!r}",
        )


@quick_init
@dataclass(frozen=True)
class WorkloadState:
    """What is known about one workload at decision time."""

    current_replicas: int
    ready_replicas: int
    current_demand: float | None
    free_gpus: int = 0
    gpus_per_replica: int = 1
    recommendations: tuple[tuple[int, int], ...] = ()

    def __post_init__(self) -> None:
        # Built at every decision: plain ints and a float pass at once, and the messages are formatted only when a
        # check fails.
        c, r, f, g = self.current_replicas, self.ready_replicas, self.free_gpus, self.gpus_per_replica
        if not (type(c) is int and type(r) is int and type(f) is int and type(g) is int
                and c >= 0 and r >= 0 and f >= 0 and g >= 0):
            for name in ("current_replicas", "ready_replicas", "free_gpus", "gpus_per_replica"):
                value = getattr(self, name)
                if not (_is_int(value) and value >= 0):
                    raise ValueError(f"WorkloadState.{name} must be an integer >= 0, got {value!r}")
        demand = self.current_demand
        if type(demand) is float:
            if demand < 0 and math.isfinite(demand):
                raise ValueError(f"WorkloadState.current_demand must be None, NaN (missing) or a rate >= 0, "
                                 f"got {demand!r}")
        elif demand is not None:
            try:
                value = float(demand)
            except (TypeError, ValueError):
                value = -1.0
            if (math.isfinite(value) and value < 0) or isinstance(demand, bool | str):
                raise ValueError(f"WorkloadState.current_demand must be None, NaN (missing) or a rate >= 0, "
                                 f"got {demand!r}")
            object.__setattr__(self, "current_demand", value)
        recs = self.recommendations
        if type(recs) is CheckedHistory:  # what the planner handed back: checked when it was built
            return
        # Anything else (a test's, a restored one): a tuple of int pairs, checked cheaply, without negative counts.
        if not (type(recs) is tuple and all(type(e) is tuple and len(e) == 2 and type(e[0]) is int
                                            and type(e[1]) is int for e in recs)):
            recs = tuple((int(t), int(r)) for t, r in recs)
        negative = next(((t, r) for t, r in recs if r < 0), None)
        _require(negative is None, f"WorkloadState.recommendations entry {negative} has a negative replica count")
        object.__setattr__(self, "recommendations", recs)

    @property
    def demand_known(self) -> bool:
        """Whether ``current_demand`` is a usable observation (not None, not NaN/inf)."""
        return self.current_demand is not None and math.isfinite(self.current_demand)


class Step:
    """One rule applied to the replica count: its name, the count after it, and why, with the numbers.

    ``detail`` is the text. ``Step.lazy(name, replicas, render, *args)`` keeps ``render`` and its arguments and
    writes the text only when it is first read. Why: the planner explains every rule of every decision, and a
    self-tuning replay makes tens of thousands of decisions whose text nobody reads (only ``explain``, the status,
    Events and logs do); formatting it was most of a decision's cost. ``render`` must be a pure function of its
    arguments, and they must be immutable values, so the text read later is the text that would have been written
    at once. Equality, hashing, ``repr`` and pickling go through the text, so a lazy step equals the same step
    given as text. A value: nothing assigns to a step after it is made (a plain slotted class rather than a frozen
    dataclass, whose guarded assignments cost more than the text they would save).
    """

    __slots__ = ("_args", "_detail", "_render", "name", "replicas")

    def __init__(self, name: str, replicas: int, detail: str) -> None:
        self.name = name
        self.replicas = replicas
        self._detail: str | None = detail
        self._render: Callable[..., str] | None = None
        self._args: tuple[Any, ...] = ()

    @classmethod
    def lazy(cls, name: str, replicas: int, render: Callable[..., str], *args: Any) -> Step:
        """A step whose text is ``render(*args)``, written when first read."""
        step = cls.__new__(cls)
        step.name = name
        step.replicas = replicas
        step._detail = None
        step._render = render
        step._args = args
        return step

    @property
    def detail(self) -> str:
        text = self._detail
        if text is None:
            assert self._render is not None
            text = self._detail = self._render(*self._args)
            self._render, self._args = None, ()
        return text

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        assert isinstance(other, Step)
        return (self.name, self.replicas, self.detail) == (other.name, other.replicas, other.detail)

    def __hash__(self) -> int:
        return hash((self.name, self.replicas, self.detail))

    def __repr__(self) -> str:
        return f"Step(name={self.name!r}, replicas={self.replicas!r}, detail={self.detail!r})"

    def __reduce__(self) -> tuple[type[Step], tuple[str, int, str]]:
        return Step, (self.name, self.replicas, self.detail)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "replicas": self.replicas, "detail": self.detail}


def _json_float(value: float | None) -> float | None:
    if value is None or not math.isfinite(value):
        return None
    return round(float(value), 6)


@quick_init
@dataclass(frozen=True)
class ScalingDecision:
    """The planner's answer for one workload at ``now``, with the trail of steps that produced it."""

    desired_replicas: int
    forecast_demand: float | None
    lead_seconds: float
    warm_pool_replicas: int
    warm_pool_as: WarmPoolAs
    reactive_replicas: int
    steps: tuple[Step, ...]
    recommendations: tuple[tuple[int, int], ...]
    now: int
    # Added fields (all defaulted):
    needs_node: bool = False  # the lead includes node provisioning (free_gpus < gpus_per_replica)
    forecast_replicas: int | None = None  # ceil(forecast_demand / capacity); None without a usable forecast
    raw_replicas: int = 0  # max(forecast + warm pool, reactive floor) before stabilisation, limits and clamp
    missing_metrics: tuple[str, ...] = field(default=())  # why evidence was missing (empty = none missing)
    scale_up_blocked: int = 0  # replicas wanted but withheld by max_scale_up_step or max_replicas

    def to_dict(self) -> dict[str, Any]:
        """A JSON-safe dict (plain ints, floats, strings, lists): for the published status and ``--dry-run``."""
        return {
            "desired_replicas": int(self.desired_replicas),
            "forecast_demand": _json_float(self.forecast_demand),
            "forecast_replicas": self.forecast_replicas,
            "lead_seconds": _json_float(self.lead_seconds),
            "needs_node": bool(self.needs_node),
            "warm_pool_replicas": int(self.warm_pool_replicas),
            "warm_pool_as": str(self.warm_pool_as),
            "reactive_replicas": int(self.reactive_replicas),
            "raw_replicas": int(self.raw_replicas),
            "missing_metrics": list(self.missing_metrics),
            "scale_up_blocked": int(self.scale_up_blocked),
            "steps": [step.to_dict() for step in self.steps],
            "recommendations": [[int(t), int(r)] for t, r in self.recommendations],
            "now": int(self.now),
        }
