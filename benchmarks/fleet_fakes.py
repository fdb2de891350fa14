"""An in-memory fleet for benchmarking the control loop: a recording ``Cluster`` and a synthetic ``MetricsSource``.

Why it exists: the fleet benchmark asks what one controller tick costs for 100 to 5,000 Deployments with
two weeks of 1-minute history each. A real API server and a real Prometheus would measure themselves (a
Prometheus answering 1,000 x 20,160 points dominates everything), so the tick is driven through the same
ports (``autoscaler.ports.Cluster`` and the loop's ``MetricsSource``) by in-process parts that do the
least work an honest implementation could: the cluster keeps Deployments as plain views and records every
write (serialising status to JSON, as the real adapter does before it writes the status object); the source answers
fleet
queries from arrays.

The traffic is real: every Deployment's series is one of the public traces in ``../shared/traces``
(NASA-HTTP, ServeGen m_small and m_mid, the sparse Alibaba LoRA trace), rescaled to its own mean rate,
shifted by its own phase (so peaks do not line up) and given its own Poisson-like noise, and repeated
cyclically so any time range can be served. The same (Deployment, bin) always gets the same value, so a
tick that re-fetches the newest bins sees what the previous tick saw, as with a settled Prometheus.

Deliberate simplifications (why): a scaled Deployment is Ready at once (``ready_replicas = replicas``), so
start-ups are re-read on the loop's 5-minute cadence rather than every tick; no Kubernetes latency is
modelled - the benchmark reports the write counts so a per-request cost can be applied to them.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from autoscaler.domain.annotations import ENABLED_LABEL, PREFIX
from autoscaler.domain.status import encode_status, status_object_name
from autoscaler.ports import EventType, PodStartups, PodView, ScalerView, StatusObject, StatusWrite, WorkloadView
from autoscaler.traces import load_trace
from models.types import FloatArray, TrafficSeries

TRACES_DIR = Path(__file__).resolve().parents[2] / "shared" / "traces"
STEP = 60
# (file, share of the fleet): mostly diurnal web/LLM shapes, a tenth sparse scale-to-zero traffic.
SHAPES: tuple[tuple[str, float], ...] = (
    ("nasa_http_1995_jul_1min.csv", 0.4),
    ("servegen_m_small_10min.csv", 0.25),
    ("servegen_m_mid_10min.csv", 0.25),
    ("alibaba_gentd26_lora_diffusion_1min.csv", 0.1),
)
NAMESPACES = 20
NOISE_LENGTH = 100_003  # prime, so a Deployment's noise does not repeat in step with its shape


def _shape(path: Path) -> FloatArray:
    """The trace as a mean-1 rate shape on a 1-minute grid (coarser traces linearly interpolated)."""
    series = load_trace(path).requests
    v = series.values
    if series.step_seconds != STEP:
        factor = series.step_seconds // STEP
        x = np.arange(len(v) * factor) / factor
        v = np.interp(x, np.arange(len(v)), v)  # NaNs (none in these traces) would spread; fine here
    mean = float(np.nanmean(v))
    if not math.isfinite(mean) or mean <= 0:
        raise ValueError(f"{path.name}: no traffic to derive a shape from")
    return np.asarray(v / mean, dtype=np.float64)


@dataclass(frozen=True)
class SyntheticWorkload:
    namespace: str
    name: str
    shape: int  # index into the fleet's shapes
    mean_rate: float  # requests/s
    phase_bins: int
    noise_offset: int
    capacity: float  # requests/s per replica


class SyntheticFleet:
    """``n`` Deployments with real-trace traffic; ``seed`` fixes every random choice."""

    def __init__(self, n: int, *, seed: int = 0, traces_dir: Path = TRACES_DIR) -> None:
        if n < 1:
            raise ValueError(f"fleet size must be at least 1, got {n}")
        rng = np.random.default_rng(seed)
        self.shapes = [_shape(traces_dir / name) for name, _ in SHAPES]
        self.shape_names = [name for name, _ in SHAPES]
        self.noise = rng.standard_normal(NOISE_LENGTH)
        shares = np.array([share for _, share in SHAPES])
        kinds = rng.choice(len(SHAPES), size=n, p=shares / shares.sum())
        means = np.exp(rng.uniform(math.log(0.5), math.log(50.0), size=n))  # 0.5 .. 50 requests/s
        replicas_at_mean = rng.uniform(2.0, 8.0, size=n)
        self.workloads = [
            SyntheticWorkload(
                namespace=f"team-{i % NAMESPACES:02d}",
                name=f"llm-{i:05d}",
                shape=int(kinds[i]),
                mean_rate=float(means[i]),
                phase_bins=int(rng.integers(0, len(self.shapes[int(kinds[i])]))),
                noise_offset=int(rng.integers(0, NOISE_LENGTH)),
                capacity=round(float(means[i] / replicas_at_mean[i]), 3),
            )
            for i in range(n)
        ]

    def values(self, w: SyntheticWorkload, first_bin: int, n_bins: int) -> FloatArray:
        """Per-second rates of ``w`` for absolute 1-minute bins ``first_bin .. first_bin + n_bins - 1``."""
        bins = np.arange(first_bin, first_bin + n_bins, dtype=np.int64)
        shape = self.shapes[w.shape]
        rate = w.mean_rate * shape[(bins + w.phase_bins) % len(shape)]
        z = self.noise[(bins + w.noise_offset) % NOISE_LENGTH]
        return np.maximum(rate + np.sqrt(rate / STEP) * z, 0.0)  # Poisson-like count noise, as a rate


class SyntheticSource:
    """``MetricsSource`` over a ``SyntheticFleet``; counts calls, bins served and seconds spent."""

    def __init__(self, fleet: SyntheticFleet) -> None:
        self.fleet = fleet
        self._by_ns: dict[str, list[SyntheticWorkload]] = {}
        for w in fleet.workloads:
            self._by_ns.setdefault(w.namespace, []).append(w)
        self.calls = 0
        self.bins_served = 0
        self.seconds = 0.0
        self.queries: list[tuple[str, int, int, int]] = []  # (query, start, end, step) per call

    def fleet_history(
        self, query: str, namespaces: Iterable[str], start: int, end: int, step_seconds: int
    ) -> Mapping[tuple[str, str], TrafficSeries]:
        started = time.perf_counter()
        if step_seconds != STEP or start % STEP or end % STEP or end <= start:
            raise ValueError(f"synthetic source serves whole {STEP}s bins, got [{start}, {end}) step {step_seconds}")
        n_bins = (end - start) // STEP
        out: dict[tuple[str, str], TrafficSeries] = {}
        for ns in namespaces:
            for w in self._by_ns.get(ns, ()):
                out[(w.namespace, w.name)] = TrafficSeries(self.fleet.values(w, start // STEP, n_bins), STEP, start)
        self.calls += 1
        self.bins_served += n_bins * len(out)
        self.queries.append((query, start, end, step_seconds))
        self.seconds += time.perf_counter() - started
        return out


def _view(w: SyntheticWorkload, replicas: int) -> WorkloadView:
    return WorkloadView(
        namespace=w.namespace,
        name=w.name,
        uid=f"uid-{w.name}",
        resource_version="1",
        labels={"app": w.name, ENABLED_LABEL: "true"},
        annotations={
            PREFIX + "min-replicas": "1",
            PREFIX + "max-replicas": "64",
            PREFIX + "capacity-per-replica": str(w.capacity),
        },
        replicas=replicas,
        ready_replicas=replicas,
        selector=f"app={w.name}",
        pod_template={
            "spec": {"containers": [{"name": "server", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}
        },
    )


@dataclass
class WriteCounts:
    lists: int = 0
    pod_reads: int = 0
    scales: int = 0
    statuses: int = 0
    status_bytes: int = 0
    events: int = 0

    def since(self, before: WriteCounts) -> WriteCounts:
        return WriteCounts(*(a - b for a, b in zip(self.as_tuple(), before.as_tuple(), strict=True)))

    def as_tuple(self) -> tuple[int, ...]:
        return (self.lists, self.pod_reads, self.scales, self.statuses, self.status_bytes, self.events)

    def copy(self) -> WriteCounts:
        return replace(self)


class RecordingCluster:
    """``Cluster`` over a ``SyntheticFleet``: scaling takes effect at once; every call is counted and timed."""

    def __init__(self, fleet: SyntheticFleet, *, on_status: Callable[[int], None] | None = None) -> None:
        self._workloads = {(w.namespace, w.name): w for w in fleet.workloads}
        self._views = {key: _view(w, replicas=2) for key, w in self._workloads.items()}
        self._statuses: dict[tuple[str, str], StatusObject] = {}
        self._on_status = on_status
        self.counts = WriteCounts()
        self.seconds = 0.0
        self.startups = PodStartups(durations=(150.0, 162.0, 171.0, 158.0, 190.0, 175.0))

    def list_scalers(self) -> list[ScalerView]:
        self.counts.lists += 1
        return []  # no HorizontalPodAutoscaler in the fleet

    def list_workloads(self) -> list[WorkloadView]:
        started = time.perf_counter()
        self.counts.lists += 1
        views = list(self._views.values())
        self.seconds += time.perf_counter() - started
        return views

    def pod_startups(self, namespace: str, selector: str, now: datetime) -> PodStartups:
        self.counts.pod_reads += 1
        return self.startups

    def list_marked_pods(self, namespaces: Sequence[str]) -> list[PodView]:
        """No pod of the synthetic fleet is ever marked (its metrics source answers no per-pod load)."""
        return []

    def patch_pod_annotations(
        self, namespace: str, name: str, annotations: Mapping[str, str | None],
        labels: Mapping[str, str | None] | None = None,
    ) -> None:
        """Nothing to patch: a scale-down marks pods from their per-pod load, which the synthetic source does not
        answer, so no pod of the fleet is ever marked (and ``list_marked_pods`` finds no mark to clear)."""

    def scale(self, namespace: str, name: str, replicas: int) -> bool:
        started = time.perf_counter()
        key = (namespace, name)
        view = self._views[key]
        self.counts.scales += 1
        changed = view.replicas != replicas
        self._views[key] = replace(view, replicas=replicas, ready_replicas=replicas)
        self.seconds += time.perf_counter() - started
        return changed

    def list_statuses(self, namespace: str) -> dict[str, StatusObject]:
        """The status objects written so far in ``namespace``."""
        return {obj.name: obj for (ns, _), obj in self._statuses.items() if ns == namespace}

    def write_status(
        self, namespace: str, name: str, uid: str, status: Mapping[str, Any], last: StatusObject | None,
    ) -> StatusWrite:
        """As ``KubeCluster`` does: serialised, compared with ``last`` (no read), stored with a new version."""
        started = time.perf_counter()
        text = encode_status(status)
        self.counts.statuses += 1
        self.counts.status_bytes += len(text)
        if last is not None and last.text == text and last.owner_uid == uid:
            result = StatusWrite(last, False)
        else:
            stored = StatusObject(status_object_name(name), text, uid, str(self.counts.statuses))
            self._statuses[(namespace, name)] = stored
            result = StatusWrite(stored, True)
        self.seconds += time.perf_counter() - started
        if self._on_status is not None:
            self._on_status(self.counts.statuses)
        return result

    def remove_status_annotation(self, namespace: str, name: str) -> None:
        """The synthetic fleet never carried the old annotation: nothing to remove."""

    def post_event(
        self, namespace: str, name: str, uid: str, type: EventType, reason: str, message: str, now: datetime
    ) -> None:
        self.counts.events += 1

    def replicas(self) -> dict[tuple[str, str], int]:
        return {key: v.replicas for key, v in self._views.items()}
