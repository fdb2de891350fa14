"""The self-tuning schedule: when a Deployment's operating point is re-chosen (daily, after a refit, when its
objective changes), resuming the state a previous controller left, running the due replays once the tick's plans are
written (within their budget, or in the background in worker processes), and the metrics and Events that say what was
chosen.

Why a module of its own: the replays (``autoscaler.simulation.tuning``) are the costliest work a tick does after
fitting, and when they run is a policy of its own, separate from reading, deciding and applying.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping
from functools import partial

from autoscaler.config.schema import ForecastProfile
from autoscaler.domain.annotations import WorkloadSpec
from autoscaler.domain.coldstart import ColdStartProfile
from autoscaler.domain.types import ScalingPolicy
from autoscaler.engine.retuning import tuning_due
from autoscaler.ports import WorkloadView
from autoscaler.runtime.replay_pool import ReplayPool
from autoscaler.runtime.state import (
    LOGGER,
    ControllerBase,
    Key,
    Memory,
    Replay,
    objective,
)
from autoscaler.simulation.cluster import DEFAULT_GPUS_PER_NODE
from autoscaler.simulation.tuning import (
    DEFAULT_HPA_TARGETS,
    DEFAULT_TIMEOUT_SECONDS,
    TuneJob,
    TuneSettings,
    Tuning,
    candidate_policy,
    running_point,
    start_policy,
    versus_hpa,
)
from models.registry import make_chain
from models.types import TrafficSeries

log = logging.getLogger(LOGGER)

# Replays a tick hands one worker at most (``loop.replay_workers``): a loop interval's worth of the short daily ones,
# while each waits in the workers' queue with the history it was handed (at most about a tick old).
MAX_HANDED_PER_WORKER = 16


class TuningSchedule(ControllerBase):
    """When and how each Deployment is re-tuned."""

    # where the replays run (``loop.replay_workers``), each tagged with its job and the tuning it continues
    replay_pool: ReplayPool[tuple[Replay, Tuning | None]]

    def _tuned(
        self, view: WorkloadView, spec: WorkloadSpec, profile: ForecastProfile, policy: ScalingPolicy,
    ) -> ScalingPolicy:
        """``policy`` at the Deployment's self-tuned operating point (``autoscaler.simulation.tuning``), what this
        tick forecasts and plans with (``_queue_replay`` then queues a replay when one is due).

        Without self-tuning (the profile's ``self_tune: false``, or a fixed warm pool), ``policy`` as it is; before a
        replay has chosen a point for this objective and sizing, the tuner's start point
        (``simulation.tuning.start_policy``: the HPA's own point started early), as the simulator runs it.
        """
        key = (view.namespace, view.name)
        memory = self._memory[key]
        if not profile.self_tune or policy.warm_pool is not None:
            memory.tuning = None
            return policy
        if not memory.tuning_read and memory.status_read:
            memory.tuning_read = True
            self._resume_tuning(view, memory)
        last = memory.tuning
        if last is None or last.chosen is None or _inputs(spec, profile, policy) != memory.tuning_inputs:
            return start_policy(policy)  # nothing chosen yet for this objective and sizing
        return candidate_policy(policy, last.chosen, last.chosen_utilisation)

    def _queue_replay(
        self, view: WorkloadView, spec: WorkloadSpec, profile: ForecastProfile, policy: ScalingPolicy,
        cold: ColdStartProfile, now: float,
    ) -> None:
        """Queue a self-tuning replay of the Deployment for ``_replay_due`` when one is due (``policy``: its own,
        untuned). Due daily, after a refit of its model and when its objective or sizing changes. Asked after this
        tick's forecast, so a refit made by it is seen at once, as the simulator sees it (``PredictivePolicy``); the
        replay runs after the tick's plans, in what is left of its budgets, and its choice applies from the next
        tick."""
        if not profile.self_tune or policy.warm_pool is not None:
            return
        key = (view.namespace, view.name)
        memory = self._memory[key]
        inputs = _inputs(spec, profile, policy)
        last = memory.tuning
        refit_at = memory.keeper.fitted_at if memory.keeper is not None else -math.inf
        due = tuning_due(now, memory.tuning_tried, last is not None and last.chosen is not None, refit_at)
        if due or inputs != memory.tuning_inputs:
            gpus_per_replica = max(1, spec.gpus_per_replica)
            self._replays.append(Replay(key, policy, cold, profile, gpus_per_replica, inputs, spec.nodepool,
                                        max(0, view.replicas) * gpus_per_replica))

    def _resume_tuning(self, view: WorkloadView, memory: Memory) -> None:
        """Continue from the self-tuning state the saved status holds (written by this controller before a restart, or
        by the previous leader, in the status object or an older version's annotation): its pooled days, error
        budget and choice, for the objective and sizing it was made for. A replay this controller already ran is
        kept unless the saved one is newer (a standby that replayed while another replica led takes over the leader's
        record, which knows what ran). A state that cannot be read is logged and tuning starts over, as it would
        without one."""
        try:
            saved = memory.saved_tuning
            if not saved or saved.get("chosen") is None:
                return
            if memory.tuning is not None and memory.tuning.at > float(saved["at"]):
                return
            tuning = Tuning.from_dict(saved)
            inputs = tuple(float(v) for v in saved["inputs"])
            tried = float(saved["tried"])
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            log.warning("%s/%s: the self-tuning state in the status cannot be read (%s); tuning starts over",
                        view.namespace, view.name, exc)
            return
        memory.tuning, memory.tuning_inputs, memory.tuning_tried = tuning, inputs, tried
        # the Events for this state were posted by whoever chose it
        memory.notices.set("slo", tuning.slo_state)
        memory.notices.set("lead-only", any(c.lead_only and c.point == (tuning.chosen, tuning.chosen_utilisation)
                                            for c in tuning.candidates))
        self._note_tuning((view.namespace, view.name), memory, tuning)

    def _replay_due(self, now: float, errors: list[str], gpus_per_node: Mapping[str, int]) -> None:
        """Run the self-tuning replays queued by this tick's plans, least recently tuned first (of those, the one whose
        replicas hold the most GPUs: a large fleet's first tunings take hours, and the dearest Deployments save the
        most), once the tick's plans are written, and only in what the fits left of the fitting budget (fits come
        first). ``gpus_per_node``: per NodePool whose shape the money stage knows (a Deployment naming none, or one
        not known, is replayed on ``DEFAULT_GPUS_PER_NODE``-GPU nodes, as ``simulate`` replays by default).

        In the loop's process (``loop.replay_workers`` 0), a tick's first replay needs nothing more (so a tuning
        budget shorter than one replay still tunes one Deployment a tick); another starts only if it should end
        within the tuning budget, by the replays' running mean duration; the rest wait for a later tick. With N
        workers (``runtime.replay_pool``) the tick takes back the replays that finished since the last one and hands
        over the next ones due, and waits for none: they run in the background. It hands each worker about a loop
        interval's worth (by the replays' running mean CPU time; one each until a replay has come back), so the
        workers stay busy until the next tick, and a replay runs on a history at most about a tick old."""
        cfg = self._config()
        if not self._acted:  # a standby: the leader tunes, and its record is read back at a takeover (``tick``)
            self._replays = []
            self.replay_pool.resize(0)  # its workers, had it led before, are stopped
            self.metrics.replays_waiting.set(0)
            self.metrics.replays_in_workers.set(0)
            return
        workers = cfg.loop.replay_workers
        self.replay_pool.resize(workers)
        for _, (job, previous), result in self.replay_pool.finished():
            if isinstance(result, Tuning):
                self._time_replay(result.cpu_seconds)
            self._take_tuning(job, previous, result, now, errors)
        running = self.replay_pool.running()
        ready: list[tuple[Replay, Memory, TrafficSeries]] = []
        for job in sorted(self._replays, key=lambda j: (self._memory[j.key].tuning_tried, -j.gpus, j.key)):
            memory = self._memory[job.key]  # queued by this tick's plans, so its memory is there (the sort read it)
            history, keeper = memory.history, memory.keeper
            if history is None or len(history) < 2 or keeper is None or keeper.model is None:
                continue  # no model yet: it is fitted (this or a later tick) before it is tuned
            if job.key not in running:  # a worker has its replay already
                ready.append((job, memory, history))
        self._replays = []
        if workers:
            each = math.ceil(cfg.loop.interval_seconds / self._replay_seconds) if self._replay_seconds else 1
            room = workers * min(each, MAX_HANDED_PER_WORKER) - len(running)
            handed = max(0, room) if time.perf_counter() <= self._fit_deadline else 0  # a pickle each, not a replay
            for job, memory, history in ready[:handed]:
                call, previous = self._replay_call(job, memory, history, gpus_per_node)
                self.replay_pool.submit(job.key, call, (job, previous), workers)
            self.metrics.replays_waiting.set(max(0, len(ready) - handed))
            self.metrics.replays_in_workers.set(len(self.replay_pool.running()))
            return
        self.metrics.replays_in_workers.set(0)
        deadline = min(self._fit_deadline, self._tune_deadline)
        ran = 0
        for job, memory, history in ready:
            # the first replay of a tick needs only what the fits left; the next ones must also end in time
            started = time.perf_counter()
            if started > self._fit_deadline or (ran and started + self._replay_seconds > deadline):
                break
            ran += 1
            call, previous = self._replay_call(job, memory, history, gpus_per_node)
            (result,) = self.replay_pool.run([call])
            if isinstance(result, Tuning):
                self._time_replay(time.perf_counter() - started)
            self._take_tuning(job, previous, result, now, errors)
        self.metrics.replays_waiting.set(len(ready) - ran)

    def _time_replay(self, seconds: float) -> None:
        """Fold one replay's duration into the running mean the next ones are planned by."""
        self._replay_seconds = seconds if not self._replay_seconds else 0.8 * self._replay_seconds + 0.2 * seconds

    def _take_tuning(self, job: Replay, previous: Tuning | None, result: Tuning | Exception, now: float,
                     errors: list[str]) -> None:
        """Keep what a replay of ``job`` chose (from the next tick), or report that it failed."""
        memory = self._memory.get(job.key)
        if memory is None:  # the Deployment left while its replay ran
            return
        if not isinstance(result, Tuning):  # a replay bug must not stop the fleet: keep the last point
            self.metrics.errors.labels("tuning").inc()
            errors.append(f"{job.key[0]}/{job.key[1]}: self-tuning failed ({type(result).__name__}: {result}); "
                          "keeping the last operating point")
            memory.tuning_tried = now
            return
        memory.tuning_tried, memory.tuning_inputs = now, job.inputs
        if result.chosen is not None or previous is None or previous.chosen is None:
            memory.tuning = result
        self._note_tuning(job.key, memory, result)

    @staticmethod
    def _replay_call(job: Replay, memory: Memory, history: TrafficSeries,
                     gpus_per_node: Mapping[str, int]) -> tuple[TuneJob, Tuning | None]:
        """The replay ``job`` asks for, and the tuning it continues (None: it starts afresh)."""
        last = memory.tuning
        # the days replayed before are pooled with this one while the objective and sizing stay the same
        previous = last if last is not None and job.inputs == memory.tuning_inputs else None
        wait, target = job.inputs[0], job.inputs[1]
        settings = TuneSettings(
            partial(make_chain, job.profile.model), tuple(job.profile.tune_quantiles), wait, target,
            tuple(job.profile.tune_utilisations), DEFAULT_HPA_TARGETS,
            gpus_per_node.get(job.nodepool or "", DEFAULT_GPUS_PER_NODE), job.profile.history_seconds,
            DEFAULT_TIMEOUT_SECONDS, job.profile.horizon_seconds,
        )
        # what ran during the day about to be replayed: the error budget counts its replay as lived
        return TuneJob(settings, history.slice(0, len(history) - 1), job.policy, job.cold, job.gpus_per_replica,
                       previous, running_point(previous, job.policy)), previous

    def _note_tuning(self, key: Key, memory: Memory, result: Tuning) -> None:
        """Export a replay's outcome and queue an Event when the objective becomes unreachable, or is run below by
        the self-check (or is met again): one per transition, not per replay."""
        if result.chosen is None:
            return
        chosen = next(c for c in result.candidates if c.point == (result.chosen, result.chosen_utilisation))
        self.metrics.tuned_quantile.labels(*key).set(result.chosen)
        self.metrics.tuned_utilisation.labels(*key).set(result.chosen_utilisation)
        self.metrics.slo_met.labels(*key).set(1 if result.met else 0)
        self.metrics.replay_attainment.labels(*key).set(chosen.slo_attainment)
        # the record against the HPA's own points: a new set of labels each time (the points replayed can change)
        for gauge in (self.metrics.record_gpu_hours, self.metrics.record_attainment):
            self.metrics.forget_series(gauge, *key)
        versus = versus_hpa(result.days)
        if versus is not None:
            for point, gpu_hours, attained in (("ran", versus.gpu_hours, versus.attainment),
                                               *((c.label, c.gpu_hours, c.slo_attainment) for c in versus.hpa)):
                self.metrics.record_gpu_hours.labels(*key, point).set(gpu_hours)
                self.metrics.record_attainment.labels(*key, point).set(attained)
        self.metrics.beaten_by_hpa.labels(*key).set(1 if versus is not None and versus.beaten else 0)
        # Told when this tick publishes (``_publish``), once per transition (reachable is assumed before anything was
        # told). Where the forecast's bands buy nothing, the controller runs as the HPA started early: said once, and
        # once more when the forecast earns its place again.
        memory.tuning_state = (result.slo_state, chosen.lead_only, result.reason)


def _inputs(spec: WorkloadSpec, profile: ForecastProfile, policy: ScalingPolicy) -> tuple[float, ...]:
    """What a tuning was made for: (SLO wait, attainment, capacity, min, max); a change re-tunes and restarts the
    pooled days."""
    wait, target = objective(spec, profile)
    return (wait, target, policy.capacity_per_replica, policy.min_replicas, policy.max_replicas)
