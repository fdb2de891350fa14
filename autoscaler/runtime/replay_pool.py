"""Where the controller's self-tuning replays run: in the loop's own process, or in worker processes.

Why it exists: a replay is the costliest thing a tick does after fitting (a Deployment's first one also replays up to
a week of the history it had before: about 7 s of CPU), and the loop runs one a tick at least, more while they fit in
the tuning budget. A fleet of 1,000 Deployments annotated at once is tuned one a tick, over about eight hours
(``python -m benchmarks.fleet``), each on the start point until then. The replays are pure Python, so threads would
share one core; with ``loop.replay_workers: N`` they run N at a time in worker processes, and a tick waits for as
many as before, so the fleet's first tunings take about N times less (the controller's pod then needs N more cores
while they run). The choices are the same: a worker runs the same ``tuning.tune`` on the same arguments, pickled.

The workers are started with ``spawn`` (the controller has threads: a forked copy of a held lock would hang), the
first time a tick has replays, and again when ``replay_workers`` changes or a worker died (the failed replays are
reported as any failed replay is, and tried again at a later tick).
"""

from __future__ import annotations

import multiprocessing
import pickle
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from functools import partial

from autoscaler.domain.coldstart import ColdStartProfile
from autoscaler.domain.types import ScalingPolicy
from autoscaler.simulation.tuning import Tuning, tune
from models.registry import make_chain
from models.types import TrafficSeries

__all__ = ["ReplayCall", "ReplayPool"]


@dataclass(frozen=True)
class ReplayCall:
    """One self-tuning replay: ``tuning.tune``'s arguments (picklable, for a worker process)."""

    history: TrafficSeries
    policy: ScalingPolicy
    cold: ColdStartProfile
    model: str  # the profile's model chain (``models.registry.make_chain``)
    quantiles: tuple[int, ...]
    utilisations: tuple[float, ...]
    slo_wait_seconds: float
    slo_attainment: float
    gpus_per_replica: int
    gpus_per_node: int
    warmup_seconds: int
    previous: Tuning | None
    running: tuple[int, float]
    horizon_seconds: int

    def run(self) -> Tuning:
        return tune(
            self.history, self.policy, self.cold, partial(make_chain, self.model), quantiles=self.quantiles,
            utilisations=self.utilisations, slo_wait_seconds=self.slo_wait_seconds,
            slo_attainment=self.slo_attainment, gpus_per_replica=self.gpus_per_replica,
            gpus_per_node=self.gpus_per_node, warmup_seconds=self.warmup_seconds, previous=self.previous,
            running=self.running, horizon_seconds=self.horizon_seconds,
        )


def _run_pickled(payload: bytes) -> Tuning:
    """``ReplayCall.run`` of a pickled call, in a worker process."""
    call: ReplayCall = pickle.loads(payload)  # written by ``ReplayPool.run`` in the controller a moment before
    return call.run()


def _attempt(run: Callable[[], Tuning]) -> Tuning | Exception:
    try:
        return run()
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

    def run(self, calls: Sequence[ReplayCall], workers: int) -> list[Tuning | Exception]:
        """Each call's outcome, in order: its tuning, or the exception it raised (a dead worker's too). With
        ``workers`` 0 they run here one after the other; else in that many worker processes at once."""
        if workers <= 0:
            self.close()
            return [_attempt(call.run) for call in calls]
        executor = self._ensure(workers)
        # Pickled here, before the tick goes on: nothing a call holds may change while a feeder thread pickles it.
        payloads = [pickle.dumps(call) for call in calls]
        try:
            futures = [executor.submit(_run_pickled, payload) for payload in payloads]
        except (BrokenProcessPool, RuntimeError) as exc:
            self.close()
            return [exc for _ in calls]
        out: list[Tuning | Exception] = []
        for future in futures:
            try:
                out.append(future.result())
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
