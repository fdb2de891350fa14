"""Synthetic vLLM histories with a known true capacity, from a simple queueing model (for the capacity tests).

Why a module of its own: the estimator's unit tests (``tests/domain/test_learned_capacity.py``) and the
end-to-end tests through the real Prometheus (``tests/test_cli_capacity.py``, ``tests/runtime/...``) must judge the
estimate against the *same* truth. Each pod is a queue, minute by minute: requests arrive (Poisson, a daily cycle
with overload bursts when ``peak_load`` > 1), the pod completes at most its capacity per minute (``capacity`` req/s,
Poisson noise around it), and what it cannot complete waits. From that: ``vllm:request_success_total`` increments,
``vllm:num_requests_waiting`` / ``_running``, KV-cache usage (running over the batch size, nearly full while
requests wait) and a time-to-first-token histogram (prefill plus the time the queue ahead takes to drain).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pytest

from tests.servers import BACKFILL_START, Backfill, FakePod, PrometheusServer, pytest_cache, serve_backfill

TTFT_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0)  # seconds, +Inf implied
BATCH = 32  # max_num_seqs: requests running at once at most
PREFILL_SECONDS = 0.15


@dataclass(frozen=True)
class PodHistory:
    """One pod's minute-by-minute truth (index ``k`` = minute ``k``; counters are increments over ``(k-1, k]``)."""

    completions: np.ndarray  # int, completed in the minute
    waiting: np.ndarray  # int, at the end of the minute
    running: np.ndarray  # int
    kv_cache: np.ndarray  # 0..1
    ttft_buckets: np.ndarray  # int, shape (minutes, len(TTFT_BUCKETS) + 1): cumulative-by-le increments (+Inf last)
    ttft_sum: np.ndarray  # float, seconds added to the histogram's _sum in the minute


def demand_per_pod(minutes: int, *, capacity: float, peak_load: float, bursts: int, rng: np.random.Generator,
                   burst_minutes: int = 40) -> np.ndarray:
    """Requests/s arriving at one pod: a daily cycle peaking at ``peak_load`` x ``capacity`` with ``bursts`` overload
    spells (2.5 x capacity, ``burst_minutes`` each) spread over the history when ``bursts`` > 0."""
    minute = np.arange(minutes)
    daily = 0.55 + 0.45 * np.sin(2 * np.pi * minute / 1440)  # 0.1 .. 1.0
    rate = capacity * peak_load * daily
    if bursts:
        starts = np.linspace(minutes * 0.1, minutes * 0.9, bursts).astype(int) + rng.integers(0, 30, bursts)
        for s in starts.tolist():
            rate[s : s + burst_minutes] = 2.5 * capacity
    return np.asarray(rate, dtype=np.float64)


def simulate_pod(rate: np.ndarray, capacity: float, rng: np.random.Generator) -> PodHistory:
    """The queue of one pod under ``rate`` (requests/s per minute) with true capacity ``capacity`` req/s."""
    n = len(rate)
    arrivals = rng.poisson(rate * 60)
    service = rng.poisson(capacity * 60, n)
    completions = np.zeros(n, dtype=np.int64)
    backlog = np.zeros(n, dtype=np.int64)
    queue = 0
    for k in range(n):
        total = queue + int(arrivals[k])
        done = min(total, int(service[k]))
        completions[k] = done
        queue = total - done
        backlog[k] = queue
    busy = completions / np.maximum(service, 1)  # share of the minute's capacity used
    running = np.where(backlog > 0, BATCH, np.minimum(BATCH, np.rint(busy * BATCH))).astype(np.int64)
    waiting = np.maximum(backlog - (BATCH - running), 0)
    kv_cache = np.clip(np.where(waiting > 0, 0.97, 0.9 * running / BATCH), 0.0, 1.0)
    edges = np.array([*TTFT_BUCKETS, np.inf])
    buckets = np.zeros((n, len(edges)), dtype=np.int64)
    sums = np.zeros(n)
    for k in range(n):
        c = int(completions[k])
        if c == 0:
            continue
        queued = backlog[k - 1] if k else 0  # what was ahead when the minute's requests arrived
        wait = queued / capacity  # seconds for the queue ahead to drain
        ttft = PREFILL_SECONDS + rng.exponential(0.05, c) + wait * rng.uniform(0.5, 1.0, c)
        buckets[k] = (ttft[:, None] <= edges[None, :]).sum(axis=0)
        sums[k] = float(ttft.sum())
    return PodHistory(completions, waiting, running, kv_cache, buckets, sums)


@dataclass(frozen=True)
class DeploymentHistory:
    """Pods of one Deployment under an even split of its demand, and the aggregate series the estimator reads."""

    capacity: float
    pods: tuple[PodHistory, ...]

    def completed_rate(self) -> np.ndarray:
        """Requests/s completed per minute bin, all pods (bin ``i`` = minute ``i+1``'s increment, as rate() reads)."""
        total: np.ndarray = np.sum([p.completions for p in self.pods], axis=0)
        return total[1:] / 60.0

    def waiting(self) -> np.ndarray:
        total: np.ndarray = np.sum([p.waiting for p in self.pods], axis=0)
        return total[1:].astype(np.float64)

    def kv_cache(self) -> np.ndarray:
        """Summed over the pods, as the ``kv_cache_usage`` query answers it."""
        total: np.ndarray = np.sum([p.kv_cache for p in self.pods], axis=0)
        return total[1:]

    def ttft_p90(self) -> np.ndarray:
        """The histogram's 90th percentile per bin, as Prometheus's histogram_quantile interpolates it."""
        counts = np.sum([p.ttft_buckets for p in self.pods], axis=0)[1:]
        out = np.full(len(counts), np.nan)
        edges = [0.0, *TTFT_BUCKETS]
        for i, row in enumerate(counts):
            total = row[-1]
            if total == 0:
                continue
            rank = 0.9 * total
            j = int(np.searchsorted(row, rank))
            if j >= len(TTFT_BUCKETS):
                out[i] = TTFT_BUCKETS[-1]
                continue
            below = row[j - 1] if j else 0
            out[i] = edges[j] + (edges[j + 1] - edges[j]) * (rank - below) / max(row[j] - below, 1)
        return out


def deployment_history(minutes: int, *, capacity: float, replicas: int, peak_load: float, bursts: int,
                       seed: int) -> DeploymentHistory:
    """``replicas`` pods of true capacity ``capacity`` req/s each, the demand split evenly."""
    rng = np.random.default_rng(seed)
    rate = demand_per_pod(minutes, capacity=capacity, peak_load=peak_load, bursts=bursts, rng=rng)
    return DeploymentHistory(capacity, tuple(simulate_pod(rate, capacity, rng) for _ in range(replicas)))


def fake_pods(history: DeploymentHistory, namespace: str, deployment: str, *, model: str = "llama-3-8b",
              kv_cache_metric: str = "vllm:gpu_cache_usage_perc") -> tuple[FakePod, ...]:
    """The Deployment's pods as ``tests.servers.FakePod`` (to backfill the real Prometheus), present throughout."""
    suffixes = ("a1b2c", "d3e4f", "g5h6j", "k7m8n", "p9q2r", "s3t4v")
    out = []
    for i, p in enumerate(history.pods):
        n = len(p.completions)
        out.append(FakePod(
            namespace=namespace, pod=f"{deployment}-6f7c8d9b5-{suffixes[i]}", model=model,
            completions={"stop": p.completions}, waiting=p.waiting, running=p.running, present=np.ones(n, dtype=bool),
            kv_cache=p.kv_cache, kv_cache_metric=kv_cache_metric, ttft_le=TTFT_BUCKETS, ttft_buckets=p.ttft_buckets,
            ttft_sum=p.ttft_sum,
        ))
    return tuple(out)


# The capacity backfill: two days of two Deployments in namespace ``serving`` (see :func:`capacity_prometheus`).
CAPACITY_MINUTES = 2 * 1440
BUSY_CAPACITY = 3.0  # serving/busy-llm: two replicas, six overload spells
CALM_CAPACITY = 5.0  # serving/calm-llm: two replicas, never above 60% of capacity


@dataclass(frozen=True)
class CapacityServer:
    """The real Prometheus serving the capacity backfill, and the truth behind it."""

    server: PrometheusServer
    busy: DeploymentHistory
    calm: DeploymentHistory


@pytest.fixture(scope="session")
def capacity_prometheus(request: pytest.FixtureRequest,
                        tmp_path_factory: pytest.TempPathFactory) -> Iterator[CapacityServer]:
    """A real Prometheus (registered in ``tests/conftest.py``, one for the session) backfilled with
    ``serving/busy-llm`` (capacity :data:`BUSY_CAPACITY`, saturated six times; KV cache under vLLM's older metric
    name) and ``serving/calm-llm`` (capacity :data:`CALM_CAPACITY`, never saturated; the newer name)."""
    busy = deployment_history(CAPACITY_MINUTES, capacity=BUSY_CAPACITY, replicas=2, peak_load=0.7, bursts=6,
                              seed=21)
    calm = deployment_history(CAPACITY_MINUTES, capacity=CALM_CAPACITY, replicas=2, peak_load=0.6, bursts=0,
                              seed=22)
    pods = (*fake_pods(busy, "serving", "busy-llm"),
            *fake_pods(calm, "serving", "calm-llm", kv_cache_metric="vllm:kv_cache_usage_perc"))
    backfill = Backfill(BACKFILL_START, CAPACITY_MINUTES, pods)
    with serve_backfill(backfill, tmp_path_factory.mktemp("prometheus-capacity"), pytest_cache(request)) as server:
        yield CapacityServer(server, busy, calm)
