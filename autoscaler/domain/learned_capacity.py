"""How many requests/s one Ready replica serves, learned from the Deployment's own vLLM history.

Why it exists: the planner turns demand into replicas with ``capacity-per-replica``, and for an LLM nobody knows
that number in advance (it moves with prompt and output lengths, the model, the GPU and the engine's settings).
A guess is worse than no number: too high and the Deployment is starved at its peak; too low and GPUs idle. So
the capacity is *measured*, from the intervals where the replicas were demonstrably saturated: requests were
waiting, or the KV cache was (nearly) full, or time-to-first-token was over the latency objective. In such an
interval a replica was serving as fast as it could, so the completions per replica are its capacity. Intervals
without saturation only show what the replicas *did* serve, a lower bound on what they *could*: they are never
used as the estimate (a quiet Deployment would otherwise look slow and be given too many GPUs, or, worse, a
busy one would be sized on an unsaturated rate and starved).

An estimate is used only with enough evidence (:class:`EvidenceRules`): enough saturated intervals, in enough
separate episodes (one long overload is one workload mix, and one incident), with a small enough spread, and no
unsaturated interval that served clearly more per replica than the saturated ones did (then the saturation
signals are misread, e.g. requests queued behind something else than the GPU). Below that, the result says "not
enough evidence" and why, and the controller holds the Deployment's replicas instead of scaling on a guess.

Pure: arrays in, a frozen result out; no clock, no I/O. The series come from
``autoscaler.history.read_capacity_inputs`` (the controller's and the ``capacity`` command's read path).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from models.types import FloatArray

__all__ = ["CapacityInputs", "EvidenceRules", "LearnedCapacity", "estimate_capacity"]


@dataclass(frozen=True)
class CapacityInputs:
    """One Deployment's aligned per-bin series (NaN = missing), bin ``i`` covering ``[start + i*step, ...)``.

    ``completed``: requests/s completed (all replicas); ``replicas``: replicas serving (pods exporting vLLM's
    metrics); ``waiting``: requests waiting in the bin (all replicas, averaged over the bin); ``kv_cache``: KV-cache
    usage summed over the replicas (each 0..1, averaged over the bin; the estimator divides by ``replicas``);
    ``ttft``: a high quantile of time-to-first-token, seconds. The last three may be all NaN (a metric the engine
    does not export): each is one saturation signal among three. Sums, not means, because that is what one
    Prometheus query per series answers for the whole fleet, and a mean per replica is then one division here.
    """

    start: int
    step_seconds: int
    completed: FloatArray
    replicas: FloatArray
    waiting: FloatArray
    kv_cache: FloatArray
    ttft: FloatArray

    def __post_init__(self) -> None:
        n = len(self.completed)
        for name in ("replicas", "waiting", "kv_cache", "ttft"):
            if len(getattr(self, name)) != n:
                raise ValueError(f"{name} has {len(getattr(self, name))} bins, completed has {n}")
        if self.step_seconds <= 0:
            raise ValueError(f"step_seconds must be positive, got {self.step_seconds}")

    @classmethod
    def empty(cls, start: int, step_seconds: int, n: int) -> CapacityInputs:
        """All missing: what a Deployment without any of the series has."""
        nan = np.full(n, np.nan)
        return cls(start, step_seconds, nan, nan.copy(), nan.copy(), nan.copy(), nan.copy())


@dataclass(frozen=True)
class EvidenceRules:
    """When a bin counts as saturated, and how much saturation evidence an estimate needs before it is used.

    ``waiting_per_replica``: requests waiting per replica (averaged over the bin) at or above which the replicas
    were saturated (a queue that persists through a bin means no replica had a free slot); ``kv_cache_high``:
    KV-cache usage at or above which new requests cannot be admitted; a time-to-first-token quantile over
    ``slo_wait_seconds`` (the latency objective) is the third signal. ``min_saturated_bins`` and ``min_episodes``
    (runs of saturated bins separated by at least ``episode_gap_bins`` unsaturated ones) are the minimum of
    evidence; ``max_spread`` the largest relative interquartile range of the saturated per-replica rates;
    ``max_conflict`` how far the unsaturated bins' 95th percentile may exceed the estimate before the saturation
    signals are distrusted.
    """

    slo_wait_seconds: float = 2.0
    waiting_per_replica: float = 1.0
    kv_cache_high: float = 0.9
    min_saturated_bins: int = 30
    min_episodes: int = 3
    episode_gap_bins: int = 5
    max_spread: float = 0.5
    max_conflict: float = 1.25


@dataclass(frozen=True)
class LearnedCapacity:
    """The estimate (requests/s per replica) and its evidence; ``estimate`` is None: not enough evidence.

    ``candidate``: the median of the saturated bins even when it is not enough to use (for people, never for
    scaling); ``lower_bound``: the 95th percentile of what replicas served per second in bins without saturation
    (None: no such bin); ``signals``: saturated bins per signal (``waiting``, ``kv_cache``, ``ttft``; a bin may
    have several); ``confidence``: 0..1, grows with the saturated bins and episodes, shrinks with the spread.
    """

    estimate: float | None
    candidate: float | None
    saturated_bins: int
    episodes: int
    usable_bins: int
    lower_bound: float | None
    spread: float | None
    confidence: float
    signals: tuple[tuple[str, int], ...]
    step_seconds: int
    reason: str

    @property
    def enough(self) -> bool:
        return self.estimate is not None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (the published status, ``capacity --json``)."""

        def r(x: float | None) -> float | None:
            return None if x is None else round(x, 6)

        return {
            "estimate": r(self.estimate),
            "candidate": r(self.candidate),
            "enough_evidence": self.enough,
            "saturated_bins": self.saturated_bins,
            "episodes": self.episodes,
            "usable_bins": self.usable_bins,
            "step_seconds": self.step_seconds,
            "lower_bound": r(self.lower_bound),
            "spread": r(self.spread),
            "confidence": round(self.confidence, 3),
            "signals": dict(self.signals),
            "reason": self.reason,
        }


def _duration(bins: int, step: int) -> str:
    seconds = bins * step
    for unit, size in (("d", 86_400), ("h", 3_600), ("min", 60)):
        if seconds >= size:
            value = seconds / size
            return f"{value:g} {unit}" if value == int(value) else f"{value:.1f} {unit}"
    return f"{seconds} s"


def _episodes(saturated: np.ndarray, usable: np.ndarray, gap: int) -> int:
    """Runs of saturated bins, two runs being one episode unless at least ``gap`` usable unsaturated bins part them."""
    episodes = 0
    quiet = gap  # usable unsaturated bins since the last saturated one (start: as if long quiet)
    for sat, ok in zip(saturated.tolist(), usable.tolist(), strict=True):
        if sat:
            if quiet >= gap:
                episodes += 1
            quiet = 0
        elif ok:
            quiet += 1
    return episodes


def estimate_capacity(inputs: CapacityInputs, rules: EvidenceRules | None = None) -> LearnedCapacity:
    """The requests/s one replica serves, from the bins where the replicas were saturated; see the module doc."""
    rules = rules if rules is not None else EvidenceRules()
    step = inputs.step_seconds
    with np.errstate(invalid="ignore", divide="ignore"):
        completed = np.asarray(inputs.completed, dtype=np.float64)
        replicas = np.asarray(inputs.replicas, dtype=np.float64)
        usable = np.isfinite(completed) & (completed >= 0) & np.isfinite(replicas) & (replicas >= 1)
        per_replica = np.where(usable, completed / np.where(usable, replicas, 1.0), np.nan)
        waiting = np.asarray(inputs.waiting, dtype=np.float64) / np.where(usable, replicas, np.nan)
        by_waiting = usable & np.isfinite(waiting) & (waiting >= rules.waiting_per_replica)
        kv = np.asarray(inputs.kv_cache, dtype=np.float64) / np.where(usable, replicas, np.nan)
        by_kv = usable & np.isfinite(kv) & (kv >= rules.kv_cache_high)
        ttft = np.asarray(inputs.ttft, dtype=np.float64)
        by_ttft = usable & np.isfinite(ttft) & (ttft > rules.slo_wait_seconds)
    saturated = by_waiting | by_kv | by_ttft
    # A bin with no saturation signal at all (none of the three series) is neither: it proves nothing either way.
    signalled = np.isfinite(waiting) | np.isfinite(kv) | np.isfinite(ttft)
    calm = usable & ~saturated & signalled
    n_usable, n_sat = int(usable.sum()), int(saturated.sum())
    episodes = _episodes(saturated, usable, rules.episode_gap_bins)
    signals = (("waiting", int(by_waiting.sum())), ("kv_cache", int(by_kv.sum())), ("ttft", int(by_ttft.sum())))
    lower = float(np.percentile(per_replica[calm], 95)) if calm.any() else None
    candidate = spread = None
    if n_sat:
        rates = per_replica[saturated]
        q25, median, q75 = (float(v) for v in np.percentile(rates, [25, 50, 75]))
        candidate = median
        spread = (q75 - q25) / median if median > 0 else math.inf
    confidence = 0.0
    if candidate is not None and spread is not None and math.isfinite(spread):
        confidence = (min(1.0, n_sat / (2 * rules.min_saturated_bins)) * min(1.0, episodes / (2 * rules.min_episodes))
                      * max(0.0, 1.0 - spread))
    bound = "" if lower is None else (
        f"; without saturation replicas served up to {lower:.3g} req/s each (a lower bound)")
    seen = f"{_duration(n_sat, step)} saturated in {episodes} episode(s) of {_duration(n_usable, step)} with data"

    def result(estimate: float | None, reason: str) -> LearnedCapacity:
        return LearnedCapacity(estimate, candidate, n_sat, episodes, n_usable, lower, spread, confidence, signals,
                               step, reason)

    if n_usable == 0:
        return result(None, "not enough evidence: no interval with both completed requests and serving replicas")
    if candidate is None or spread is None:
        return result(None, f"not enough evidence: the replicas were never saturated (under "
                            f"{rules.waiting_per_replica:g} request waiting per replica, KV cache below "
                            f"{rules.kv_cache_high:.0%}, time-to-first-token within {rules.slo_wait_seconds:g}s) "
                            f"in {_duration(n_usable, step)} with data{bound}")
    if candidate <= 0:
        return result(None, f"not enough evidence: saturated intervals completed no request ({seen})")
    missing = []
    if n_sat < rules.min_saturated_bins:
        missing.append(f"{_duration(n_sat, step)} saturated, {_duration(rules.min_saturated_bins, step)} needed")
    if episodes < rules.min_episodes:
        missing.append(f"{episodes} saturation episode(s), {rules.min_episodes} needed")
    if spread > rules.max_spread:
        missing.append(f"saturated rates spread {spread:.0%}, at most {rules.max_spread:.0%} trusted")
    if lower is not None and lower > candidate * rules.max_conflict:
        missing.append(f"replicas served more without saturation ({lower:.3g} req/s) than saturated ({candidate:.3g})")
    if missing:
        return result(None, f"not enough evidence ({'; '.join(missing)}): {candidate:.3g} req/s per replica so far"
                            f"{bound}")
    return result(candidate, f"{candidate:.3g} req/s per replica from {seen} (spread {spread:.0%}, confidence "
                             f"{confidence:.2f}){bound}")
