"""The self-tuning replays in worker processes (``loop.replay_workers``): the same choices as in the loop's process,
a failed replay reported as one, and the workers stopped with the controller."""

from __future__ import annotations

import multiprocessing
import os
import signal
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


def test_workers_choose_what_the_loops_process_chooses_and_a_failure_is_returned() -> None:
    calls = [call(seed=1), call(seed=2), call(quantiles=())]  # no operating point to replay: tune raises
    pool = ReplayPool()
    try:
        here = pool.run(calls, workers=0)
        there = pool.run(calls, workers=2)
        assert pool.started == 2  # started for the round, kept for the next tick
    finally:
        pool.close()
    assert pool.started == 0
    assert [comparable(t) for t in there[:2]] == [comparable(t) for t in here[:2]]
    assert comparable(there[0])["chosen"] is not None
    assert comparable(there[0]) != comparable(there[1])  # two Deployments' own days
    # the bad call fails in the worker as it does here: returned, not raised, so the rest of the fleet goes on
    assert isinstance(here[2], Exception)
    assert isinstance(there[2], Exception)
    assert type(there[2]) is type(here[2])
    assert str(there[2]) == str(here[2])


def test_no_workers_starts_no_process() -> None:
    pool = ReplayPool()
    assert isinstance(pool.run([call()], workers=0)[0], Tuning)
    assert pool.started == 0


@pytest.mark.parametrize("workers", [1, 3])
def test_a_change_of_workers_restarts_the_pool(workers: int) -> None:
    pool = ReplayPool()
    try:
        pool.run([], workers=2)
        assert pool.started == 2
        pool.run([], workers=workers)
        assert pool.started == workers
        pool.run([], workers=0)  # back to the loop's process: the workers are stopped
        assert pool.started == 0
    finally:
        pool.close()


def test_a_worker_that_dies_fails_its_replays_and_the_next_round_starts_new_ones() -> None:
    pool = ReplayPool()
    try:
        assert isinstance(pool.run([call()], workers=1)[0], Tuning)
        for worker in multiprocessing.active_children():  # killed (the pod's memory limit, say)
            os.kill(worker.pid or 0, signal.SIGKILL)
            worker.join(timeout=10)
        (failed,) = pool.run([call()], workers=1)
        assert isinstance(failed, Exception)  # reported as a failed replay; the fleet goes on
        assert pool.started == 0
        assert isinstance(pool.run([call()], workers=1)[0], Tuning)  # a later tick: new workers
    finally:
        pool.close()
