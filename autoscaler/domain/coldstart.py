"""How long a new replica takes to serve: the lead time the planner must scale ahead by.

Why a module of its own: a GPU inference replica is not ready when it is created. The image pull
and the model load take minutes, and when no free GPU is on hand a node must be provisioned first.
A forecast is only useful if capacity is ordered at least that long before demand lands, so the
planner looks at demand ``lead`` seconds ahead. The lead is learnt from observed start-ups
(creation -> Ready) but starts from a configured prior, because a fresh controller has seen none.

Estimator (a blend of the prior and the evidence):

* fewer than ``min_samples`` observations: ``max(prior, slowest observation)``. A handful of fast
  start-ups do not prove the prior pessimistic (a cached image is not the common case), but a single
  observed start-up slower than the prior proves the prior optimistic, and sizing with a lead that
  is known to be too short would make every scale-up late;
* ``min_samples`` or more: the ``percentile`` of the newest ``max_samples`` observations, by the
  "higher" rule (``numpy.percentile(..., method="higher")``: the sorted sample at index
  ``ceil((n - 1) * p / 100)``), so the lead is always a start-up time that was actually seen, never an
  interpolation below the tail. The prior no longer matters: once there is
  evidence, a stale prior would only keep the lead wrong in either direction.

Only the newest ``max_samples`` are kept so the lead follows changes (a bigger model, a registry
mirror). The profile is an immutable value: ``observe`` returns a new profile, which the controller
stores between ticks.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from functools import cached_property
from typing import Any


def _check_seconds(name: str, value: float) -> None:
    try:
        ok = math.isfinite(float(value)) and float(value) >= 0
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ValueError(f"{name} must be a finite number of seconds >= 0, got {value!r}")


@dataclass(frozen=True)
class ColdStartProfile:
    """Start-up time knowledge for one workload: priors plus the newest observed samples."""

    prior_seconds: float
    node_prior_seconds: float = 0.0
    samples: tuple[float, ...] = ()
    node_samples: tuple[float, ...] = ()
    percentile: float = 90.0
    min_samples: int = 5
    max_samples: int = 50

    def __post_init__(self) -> None:
        _check_seconds("ColdStartProfile.prior_seconds", self.prior_seconds)
        _check_seconds("ColdStartProfile.node_prior_seconds", self.node_prior_seconds)
        if not (math.isfinite(self.percentile) and 0 < self.percentile <= 100):
            raise ValueError(f"ColdStartProfile.percentile must be in (0, 100], got {self.percentile!r}")
        if self.min_samples < 1:
            raise ValueError(f"ColdStartProfile.min_samples must be >= 1, got {self.min_samples}")
        if self.max_samples < self.min_samples:
            raise ValueError(
                f"ColdStartProfile.max_samples ({self.max_samples}) must be >= min_samples ({self.min_samples})"
            )
        for name in ("samples", "node_samples"):
            for v in getattr(self, name):
                _check_seconds(f"ColdStartProfile.{name} entry", v)
            values = tuple(float(v) for v in getattr(self, name))
            object.__setattr__(self, name, values[-self.max_samples :])

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe fields, so the controller can keep the learnt start-up times across restarts."""
        return {
            "prior_seconds": float(self.prior_seconds),
            "node_prior_seconds": float(self.node_prior_seconds),
            "samples": list(self.samples),
            "node_samples": list(self.node_samples),
            "percentile": float(self.percentile),
            "min_samples": int(self.min_samples),
            "max_samples": int(self.max_samples),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ColdStartProfile:
        """Inverse of :meth:`to_dict`; an unknown key or a bad value is a ``ValueError`` naming it."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"ColdStartProfile: unknown key(s) {unknown} (known: {sorted(known)})")
        if "prior_seconds" not in data:
            raise ValueError("ColdStartProfile: missing key 'prior_seconds'")
        kwargs = dict(data)
        for key in ("samples", "node_samples"):
            if key in kwargs:
                kwargs[key] = tuple(kwargs[key])
        return cls(**kwargs)

    def observe(self, seconds: float) -> ColdStartProfile:
        """A profile that also knows one more pod start-up (creation -> Ready), in seconds."""
        _check_seconds("observed pod start-up", seconds)
        return replace(self, samples=(*self.samples, float(seconds)))

    def observe_node(self, seconds: float) -> ColdStartProfile:
        """A profile that also knows one more node provisioning time, in seconds."""
        _check_seconds("observed node start-up", seconds)
        return replace(self, node_samples=(*self.node_samples, float(seconds)))

    def _estimate(self, prior: float, samples: tuple[float, ...]) -> float:
        if len(samples) < self.min_samples:
            return max(prior, *samples) if samples else prior
        ordered = sorted(samples)
        return ordered[math.ceil((len(ordered) - 1) * (self.percentile / 100.0))]

    # The planner asks for the lead several times per decision; a profile is immutable, so compute once.
    @cached_property
    def _pod_lead(self) -> float:
        return self._estimate(float(self.prior_seconds), self.samples)

    @cached_property
    def _node_lead(self) -> float:
        return self._estimate(float(self.node_prior_seconds), self.node_samples)

    def pod_lead_seconds(self) -> float:
        """Pod start-up lead: the prior (raised by slower observations) until ``min_samples``, then the percentile."""
        return self._pod_lead

    def node_lead_seconds(self) -> float:
        """Node provisioning lead, estimated like :meth:`pod_lead_seconds`."""
        return self._node_lead

    def lead_seconds(self, needs_node: bool) -> float:
        """Time from ordering a replica to it serving: pod start-up, plus node start-up if a node is needed."""
        return self.pod_lead_seconds() + (self.node_lead_seconds() if needs_node else 0.0)

    def source(self, needs_node: bool) -> str:
        """Where the lead comes from, for the decision trail (e.g. ``"p90 of 12 samples"``)."""
        parts = [f"pod {self._describe(self._pod_lead, self.prior_seconds, self.samples)}"]
        if needs_node:
            parts.append(f"node {self._describe(self._node_lead, self.node_prior_seconds, self.node_samples)}")
        return " + ".join(parts)

    def _describe(self, lead: float, prior: float, samples: tuple[float, ...]) -> str:
        if len(samples) >= self.min_samples:
            return f"{lead:.0f}s = p{self.percentile:g} of {len(samples)} observed start-ups"
        if samples and max(samples) > prior:
            return f"{lead:.0f}s = slowest of {len(samples)} observed (above prior {prior:.0f}s)"
        return f"{lead:.0f}s = prior ({len(samples)}/{self.min_samples} samples)"
