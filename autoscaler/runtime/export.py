"""The controller's metrics for one Deployment (its decision, forecast bands, capacity, tuning) and the forecast
track ``explain`` plots, and forgetting the series of Deployments that left.

Why a module of its own: what is exported is read by dashboards and alerts; keeping it apart from deciding and
applying keeps the names and labels in one place.
"""

from __future__ import annotations

import contextlib
import math
from typing import Any

import numpy as np

from autoscaler.config.schema import ForecastProfile
from autoscaler.domain.annotations import WorkloadSpec
from autoscaler.domain.demand import DemandUnit
from autoscaler.domain.types import ScalingDecision
from autoscaler.ports import WorkloadView
from autoscaler.runtime.clock import utc
from autoscaler.runtime.state import (
    TRACK_EVERY_SECONDS,
    TRACK_LENGTH,
    ControllerBase,
    Key,
    Memory,
    finite,
    is_degraded,
)
from models.types import Forecast


class MetricsExport(ControllerBase):
    """Metrics and the forecast track of each Deployment."""

    def _export(
        self, key: Key, view: WorkloadView, decision: ScalingDecision, summary: dict[str, Any] | None,
        demand: float | None, spec: WorkloadSpec,
    ) -> None:
        m = self.metrics
        m.desired.labels(*key).set(decision.desired_replicas)
        m.current.labels(*key).set(view.replicas)
        m.ready.labels(*key).set(view.ready_replicas)
        m.lead.labels(*key).set(decision.lead_seconds)
        m.warm_pool.labels(*key).set(decision.warm_pool_replicas)
        # Without a value the series is removed, not left at its last value: a stale demand or forecast
        # during an outage would look like live data on a dashboard.
        # Removal is by exact labels (this Deployment's bands exported last tick), never by scanning the
        # metric: a scan per Deployment per tick is quadratic in the fleet (18 s a tick at 1,000).
        if demand is not None:
            m.demand.labels(*key).set(demand)
            m.demand_degraded.labels(*key).set(1 if is_degraded(self._memory[key].demand_source) else 0)
        else:
            for gauge in (m.demand, m.demand_degraded):
                with contextlib.suppress(KeyError):
                    gauge.remove(*key)
        values: dict[str, float] = {}
        if summary is not None:
            if summary["mean"] is not None:
                values["mean"] = summary["mean"]
            values.update({band: v for band, v in summary["bands"].items() if v is not None})
        memory = self._memory[key]
        unit = spec.demand_unit.value
        if memory.exported_unit not in (None, unit):
            with contextlib.suppress(KeyError):
                m.demand_unit.remove(*key, memory.exported_unit)
        m.demand_unit.labels(*key, unit).set(1)
        memory.exported_unit = unit
        for band in memory.exported_bands - values.keys():
            with contextlib.suppress(KeyError):
                m.forecast.remove(*key, band)
        for band, value in values.items():
            m.forecast.labels(*key, band).set(value)
        memory.exported_bands = frozenset(values)

    def _export_capacity(self, key: Key, spec: WorkloadSpec, used: float | None) -> None:
        """The capacity gauges: by source (annotation, learned), whether the Deployment is held for want of one,
        and the last estimate's evidence; a value that is gone is removed, never left standing."""
        m = self.metrics
        learned = self._memory[key].capacity
        values = {"annotation": spec.capacity_per_replica, "learned": None if learned is None else learned.estimate}
        for source, value in values.items():
            if value is not None:
                m.capacity.labels(*key, source).set(value)
            else:
                with contextlib.suppress(KeyError):
                    m.capacity.remove(*key, source)
        m.capacity_unknown.labels(*key).set(1 if used is None else 0)
        if learned is not None:
            m.capacity_saturated_bins.labels(*key).set(learned.saturated_bins)
            m.capacity_confidence.labels(*key).set(learned.confidence)
        else:
            for gauge in (m.capacity_saturated_bins, m.capacity_confidence):
                with contextlib.suppress(KeyError):
                    gauge.remove(*key)

    @staticmethod
    def _forecast_summary(forecast: Forecast | None, profile: ForecastProfile, now: float) -> dict[str, Any] | None:
        """The forecast at the profile's horizon: the numbers a person checks first."""
        if forecast is None:
            return None
        target = now + profile.horizon_seconds
        i = int(np.clip(math.ceil((target - forecast.start) / forecast.step_seconds) - 1, 0, forecast.horizon - 1))
        return {
            "model": forecast.model,
            "fallbacks": list(forecast.fallbacks),
            "at": int(forecast.start + (i + 1) * forecast.step_seconds),
            "horizon_seconds": profile.horizon_seconds,
            "mean": finite(float(forecast.mean[i])),
            "bands": {f"p{k}": finite(float(v[i])) for k, v in sorted(forecast.quantiles.items())},
        }

    @staticmethod
    def _track(memory: Memory, summary: dict[str, Any] | None, demand: float | None, now: float) -> None:
        if memory.track and now - memory.track[-1]["t"] < TRACK_EVERY_SECONDS:
            return
        entry: dict[str, Any] = {"t": int(now), "actual": None if demand is None else finite(demand)}
        if summary is not None:
            bands = [v for v in summary["bands"].values() if v is not None]
            entry.update(at=summary["at"], mean=summary["mean"], upper=max(bands, default=None))
        memory.track = [*memory.track, entry][-TRACK_LENGTH:]

    def _capacity_status(self, spec: WorkloadSpec, memory: Memory) -> dict[str, Any]:
        used = self._capacity_of(spec, memory)
        learned = memory.capacity
        source = "annotation" if spec.capacity_per_replica is not None else "learned" if used is not None else None
        return {
            "perReplica": finite(used) if used is not None else None,
            "source": source,
            "learned": None if learned is None else {**learned.to_dict(), "at": utc(memory.capacity_at).isoformat()},
            "note": None if used is not None else f"capacity not learned yet: {self._capacity_reason(memory, spec)}",
            "unit": "tokens/s" if spec.demand_unit is DemandUnit.TOKENS else "requests/s",
        }

    def _forget(self, present: set[Key]) -> None:
        for key in list(self._memory):
            if key not in present:
                del self._memory[key]
                self.metrics.forget(*key)
