"""Where the controller's self-tuning replays run: in the loop's own process, or in worker processes.

Why it exists: a replay is the costliest thing a tick does after fitting (a Deployment's first one also replays up to
a week of the history it had before: about 7 s of CPU), and the loop runs one a tick at least, more while they fit in
the tuning budget. A fleet of 1,000 Deployments annotated at once is tuned one a tick, over about eight hours
(``python -m benchmarks.fleet``), each on the start point until then. The replays are pure Python, so threads would
share one core; with ``loop.replay_workers: N`` they run N at a time in worker processes, a round of N in about the
time of one, so the fleet's first tunings take about N times less (the controller's pod then needs N more cores
while they run). The choices are the same: a worker runs the same ``tuning.TuneJob`` (``tune``), pickled, as the
simulator's fleet runs its replays in worker processes.

The workers are started with ``spawn`` (the controller has threads: a forked copy of a held lock would hang), the
first time a tick has replays, and again when ``replay_workers`` changes or a worker died (the failed replays are
reported as any failed replay is, and tried again at a later tick).
"""

from __future__ import annotations

import multiprocessing
import pickle
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from autoscaler.simulation.tuning import TuneJob, Tuning, run_pickled_job

__all__ = ["ReplayPool"]


def _attempt(job: TuneJob) -> Tuning | Exception:
    try:
        return job.run()[1]
    except Exception as exc:  # a replay bug must not stop the fleet: the caller reports it
        return exc


class ReplayPool:
    """The worker processes of ``loop.replay_workers`` (none: replays run in the caller's process)."""

    def __init__(self) -> None:
        self._executor: ProcessPoolExecutor | None = None
        self._workers = 0

    @property
    def started(self) -> int:
        """The worker processes started (0: none, the replays run in the caller's process)."""
        return self._workers if self._executor is not None else 0

    def run(self, jobs: Sequence[TuneJob], workers: int) -> list[Tuning | Exception]:
        """Each replay's outcome, in order: its tuning, or the exception it raised (a dead worker's too). With
        ``workers`` 0 they run here one after the other; else in that many worker processes at once."""
        if workers <= 0:
            self.close()
            return [_attempt(job) for job in jobs]
        executor = self._ensure(workers)
        # Pickled here, before the tick goes on: nothing a job holds may change while a feeder thread pickles it.
        payloads = [pickle.dumps(job) for job in jobs]
        try:
            futures = [executor.submit(run_pickled_job, payload) for payload in payloads]
        except (BrokenProcessPool, RuntimeError) as exc:
            self.close()
            return [exc for _ in jobs]
        out: list[Tuning | Exception] = []
        for future in futures:
            try:
                out.append(future.result()[1])
            except BrokenProcessPool as exc:  # a worker died (killed, out of memory): new ones next time
                out.append(exc)
            except Exception as exc:
                out.append(exc)
        if any(isinstance(o, BrokenProcessPool) for o in out):
            self.close()
        return out

    def _ensure(self, workers: int) -> ProcessPoolExecutor:
        if self._executor is None or self._workers != workers:
            self.close()
            self._executor = ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"))
            self._workers = workers
        return self._executor

    def close(self) -> None:
        """Stop the worker processes (none started: nothing to do)."""
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
            self._executor = None
            self._workers = 0
