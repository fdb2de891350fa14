"""The self-tuning replays in worker processes (``loop.replay_workers``): handed over without waiting, the same choices
as in the loop's process, a failed replay reported as one, and the workers stopped with the controller."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from collections.abc import Hashable
from functools import partial
from typing import Any

import pytest

from autoscaler.config.schema import ForecastProfile
from autoscaler.domain.coldstart import ColdStartProfile
from autoscaler.runtime.replay_pool import ReplayPool
from autoscaler.simulation.tuning import DEFAULT_HPA_TARGETS, DEFAULT_TIMEOUT_SECONDS, TuneJob, TuneSettings, Tuning
from autoscaler.synth import synth_trace
from models.registry import make_chain


def call(seed: int = 1, quantiles: tuple[int, ...] = (80, 95, 99)) -> TuneJob:
    """A replay of the last of three synthetic days, as the controller asks one."""
    history = synth_trace(days=3, seed=seed, tokens=False).requests
    policy = ForecastProfile().scaling_policy(capacity_per_replica=2.0, min_replicas=1, max_replicas=40)
    settings = TuneSettings(partial(make_chain, "default"), quantiles, 2.0, 0.99, (0.8,), DEFAULT_HPA_TARGETS, 8,
                            2 * 86_400, DEFAULT_TIMEOUT_SECONDS, 900)
    return TuneJob(settings, history, policy, ColdStartProfile(prior_seconds=180.0, node_prior_seconds=240.0), 1,
                   None, (50, 0.7))


def comparable(t: Tuning | Exception) -> dict[str, Any]:
    assert isinstance(t, Tuning), t
    out = t.to_dict()
    out.pop("cpu_seconds")  # measured where it ran
    return out


def collect(pool: ReplayPool[str], n: int, timeout: float = 240.0) -> dict[Hashable, tuple[str, Tuning | Exception]]:
    """What ``n`` replays handed to ``pool`` came back with, by key (polled as the loop's ticks poll)."""
    out: dict[Hashable, tuple[str, Tuning | Exception]] = {}
    waited = time.monotonic() + timeout
    while len(out) < n and time.monotonic() < waited:
        out.update({key: (tag, outcome) for key, tag, outcome in pool.finished()})
        time.sleep(0.05)
    assert len(out) == n, f"{len(out)} of {n} replays came back within {timeout:.0f} s"
    return out


def test_workers_choose_what_the_loops_process_chooses_and_a_failure_is_returned() -> None:
    calls = [call(seed=1), call(seed=2), call(quantiles=())]  # no operating point to replay: tune raises
    pool: ReplayPool[str] = ReplayPool()
    try:
        here = pool.run(calls)  # in the caller's process
        for key, job in zip("abc", calls, strict=True):
            pool.submit(key, job, f"tag-{key}", workers=2)
        # handed over at once: two run, the third waits for a free worker, and the caller goes on
        assert pool.running() == {"a", "b", "c"}
        assert pool.started == 2
        there = collect(pool, 3)
        assert pool.started == 2  # kept for the next tick
        assert pool.running() == frozenset()
    finally:
        pool.close()
    assert pool.started == 0
    assert {k: tag for k, (tag, _) in there.items()} == {"a": "tag-a", "b": "tag-b", "c": "tag-c"}
    assert [comparable(there[k][1]) for k in "ab"] == [comparable(t) for t in here[:2]]
    assert comparable(there["a"][1])["chosen"] is not None
    assert comparable(there["a"][1]) != comparable(there["b"][1])  # two Deployments' own days
    # the bad call fails in the worker as it does here: returned, not raised, so the rest of the fleet goes on
    failed = there["c"][1]
    assert isinstance(here[2], Exception)
    assert isinstance(failed, Exception)
    assert type(failed) is type(here[2])
    assert str(failed) == str(here[2])


@pytest.mark.parametrize("workers", [1, 3])
def test_a_change_of_workers_restarts_the_pool_and_drops_what_it_held(workers: int) -> None:
    pool: ReplayPool[str] = ReplayPool()
    try:
        pool.submit("a", call(), "a", workers=2)
        assert pool.started == 2
        pool.resize(2)  # the same number: kept, and so is the replay it holds
        assert pool.running() == {"a"}
        pool.resize(workers)  # another number: stopped, and the replay is asked again by a later tick
        assert pool.started == 0
        assert pool.running() == frozenset()
        assert pool.finished() == []
        pool.submit("b", call(), "b", workers=workers)
        assert pool.started == workers
        pool.resize(0)  # back to the loop's process: the workers are stopped
        assert pool.started == 0
    finally:
        pool.close()


def test_a_worker_that_dies_fails_its_replays_and_the_next_round_starts_new_ones() -> None:
    pool: ReplayPool[str] = ReplayPool()
    try:
        pool.submit("a", call(), "a", workers=1)
        assert isinstance(collect(pool, 1)["a"][1], Tuning)
        pool.submit("b", call(seed=2), "b", workers=1)
        for worker in multiprocessing.active_children():  # killed (the pod's memory limit, say)
            os.kill(worker.pid or 0, signal.SIGKILL)
            worker.join(timeout=10)
        assert isinstance(collect(pool, 1)["b"][1], Exception)  # reported as a failed replay; the fleet goes on
        assert pool.started == 0
        pool.submit("b", call(seed=2), "b", workers=1)  # a later tick: new workers
        assert isinstance(collect(pool, 1)["b"][1], Tuning)
    finally:
        pool.close()
