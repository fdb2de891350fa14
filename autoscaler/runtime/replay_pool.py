"""Where the controller's self-tuning replays run: in the loop's own process, or in worker processes in the background.

Why it exists: a replay is the costliest thing a tick does after fitting (a Deployment's first one also replays up to
a week of the history it had before: about 7 s of CPU). In the loop's process the replays run one a tick at least,
more while they fit in the tuning budget, so a fleet of 1,000 Deployments annotated at once is tuned one a tick, over
about eight hours (``python -m benchmarks.fleet``), each on the start point until then. The replays are pure Python,
so threads would share one core; with ``loop.replay_workers: N`` they run in N worker processes, **in the background**:
a tick hands the workers the next replays due (about a loop interval's worth each: ``runtime.tuning_schedule``) and
takes back the ones that finished since, and never waits for one. So the workers are busy between ticks too, no tick
waits for a replay, and the fleet's first tunings take about the replays' CPU divided by N (measured at 1,000
Deployments with two workers on two cores: about 1.2 h, the ticks 0.5 s).
The choices are the same: a worker runs the same ``tuning.TuneJob`` (``tune``), pickled, as the simulator's fleet runs
its replays in worker processes.

The workers are started with ``spawn`` (the controller has threads: a forked copy of a held lock would hang), the
first time a tick has replays, and again when ``replay_workers`` changes (the replays running then are dropped and
asked again by a later tick) or a worker died (its replays, and those of the other workers, are reported as failed
replays are, and tried again at a later tick).
"""

from __future__ import annotations

import multiprocessing
import pickle
from collections.abc import Hashable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any, Generic, TypeVar

from autoscaler.simulation.tuning import TuneJob, Tuning, run_pickled_job

__all__ = ["ReplayPool"]

T = TypeVar("T")  # what the caller tags a replay with, handed back with its outcome


def _attempt(job: TuneJob) -> Tuning | Exception:
    try:
        return job.run()[1]
    except Exception as exc:  # a replay bug must not stop the fleet: the caller reports it
        return exc


class ReplayPool(Generic[T]):
    """The worker processes of ``loop.replay_workers`` (none: replays run in the caller's process, ``run``)."""

    def __init__(self) -> None:
        self._executor: ProcessPoolExecutor | None = None
        self._workers = 0
        # the replays handed to the workers and not taken back yet: key -> (future, what the caller tagged it with)
        self._running: dict[Hashable, tuple[Future[tuple[Any, Tuning]], T]] = {}

    @property
    def started(self) -> int:
        """The worker processes started (0: none, the replays run in the caller's process)."""
        return self._workers if self._executor is not None else 0

    def run(self, jobs: Sequence[TuneJob]) -> list[Tuning | Exception]:
        """Each replay's outcome, in order, run here one after the other: its tuning, or the exception it raised."""
        return [_attempt(job) for job in jobs]

    def running(self) -> frozenset[Hashable]:
        """The keys of the replays the workers hold (running, or finished and not taken back by ``finished``)."""
        return frozenset(self._running)

    def resize(self, workers: int) -> None:
        """Keep ``workers`` worker processes: the ones started are stopped when their number differs (0: the replays
        run in the caller's process, ``run``); new ones start with the next ``submit``."""
        if self._executor is not None and self._workers != workers:
            self.close()

    def submit(self, key: Hashable, job: TuneJob, tag: T, workers: int) -> None:
        """Hand ``job`` to ``workers`` worker processes (started now if they are not) and return at once: it runs when
        one of them is free, and ``finished`` gives back its outcome with ``tag``. A pool that cannot take it (a worker
        died) gives it back as failed."""
        executor = self._ensure(workers)
        # Pickled here, before the tick goes on: nothing a job holds may change while a feeder thread pickles it.
        payload = pickle.dumps(job)
        try:
            self._running[key] = (executor.submit(run_pickled_job, payload), tag)
        except (BrokenProcessPool, RuntimeError) as exc:
            failed: Future[tuple[Any, Tuning]] = Future()
            failed.set_exception(exc)
            self._running[key] = (failed, tag)

    def finished(self) -> list[tuple[Hashable, T, Tuning | Exception]]:
        """The replays that ended since the last call, in the order they were handed over: key, tag, and the tuning
        or the exception (a dead worker's too: the workers are then stopped, and ``submit`` starts new ones)."""
        out: list[tuple[Hashable, T, Tuning | Exception]] = []
        for key, (future, tag) in list(self._running.items()):
            if not future.done():
                continue
            del self._running[key]
            try:
                out.append((key, tag, future.result()[1]))
            except Exception as exc:  # BrokenProcessPool when a worker died, or what the replay raised
                out.append((key, tag, exc))
        if any(isinstance(o, BrokenProcessPool) for _, _, o in out):
            self.close()
        return out

    def _ensure(self, workers: int) -> ProcessPoolExecutor:
        self.resize(workers)
        if self._executor is None:
            self._executor = ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"))
            self._workers = workers
        return self._executor

    def close(self) -> None:
        """Stop the worker processes (none started: nothing to do); the replays they held are dropped."""
        for future, _ in self._running.values():
            future.cancel()
        self._running.clear()
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
            self._executor = None
            self._workers = 0
