"""Applying a tick's plan: hold a scale-down during a rollout, mark the idlest pods and confirm the marks before a
scale-down, scale through the scale subresource, publish the status ``explain`` reads, post the Events of the
decision, and sweep the marks nothing maintains any more.

Why a module of its own: every write of a tick happens here, after the decisions, so a standby or ``--dry-run``
runs the same tick and only this part behaves differently.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import replace
from functools import partial
from typing import Any

from autoscaler.adapters.kube import KubeError
from autoscaler.config.schema import Config
from autoscaler.domain.annotations import WorkloadSpec
from autoscaler.domain.contention import (
    EVENT_REASON_OVERWRITTEN,
    OVERWRITES_TO_WARN,
    overwritten_message,
    recent_overwrites,
)
from autoscaler.domain.demand import DemandUnit
from autoscaler.domain.scaledown import (
    MARKS_UNCONFIRMED,
    NO_POD_LOADS,
    PODS_UNREAD,
    RolloutGuard,
    ScaleDownMarks,
    check_marks,
    deployment_of,
    guard_scale_down,
    label_patch,
    plan_clear,
    plan_marks,
    release_marks,
    rollout_of,
)
from autoscaler.domain.status import DeploymentStatus, StatusStep
from autoscaler.domain.types import ScalingDecision
from autoscaler.ports import EventType, PodView, WorkloadView
from autoscaler.runtime.clock import utc
from autoscaler.runtime.export import MetricsExport
from autoscaler.runtime.state import (
    LOGGER,
    MARK_SWEEP_SECONDS,
    RESUMED_NOTICES,
    STATUS_REFRESH_SECONDS,
    Key,
    Memory,
    Plan,
    PodLoadSource,
    WorkloadOutcome,
    deciding_step,
    finite,
    is_degraded,
)

log = logging.getLogger(LOGGER)


# The Event for each ``Tuning.slo_state``: met, run below by the self-check's choice, out of reach of every point.
SLO_EVENTS = {"met": "SLOReachable", "below": "SelfCheckBelowSLO", "unreachable": "SLOUnreachable"}


class PlanApplier(MetricsExport):
    """The writes of a tick (after ``MetricsExport``: a Deployment is exported once its decision is applied)."""

    def _conclude(self, plan: Plan, decision: ScalingDecision, now: float, write: bool,
                  errors: list[str], loads: Mapping[Key, float] | None = None) -> WorkloadOutcome:
        """Second pass: apply ``decision`` (the plan after the money stage) and export it."""
        view, spec = plan.view, plan.spec
        memory = self._memory[(view.namespace, view.name)]
        decision, guard = self._guard_rollout(view, spec, decision, now, write, errors)
        marks = None
        if write or self.dry_run:
            marks = self._marks(view, spec, decision, loads, now, write, errors, guard)
        if write and marks is not None and decision.desired_replicas < view.replicas and not spec.advisory:
            decision, marks = self._confirm_marks(view, decision, marks, now, errors)
        else:
            memory.marks_waiting_since = None
        actions = self._apply(view, spec, decision, plan.summary, plan.blocked, now, write, errors, marks)
        self._export((view.namespace, view.name), view, decision, plan.summary, plan.demand, spec)
        self._export_capacity((view.namespace, view.name), spec, plan.capacity)
        return WorkloadOutcome(
            view.namespace, view.name, view.replicas, view.ready_replicas, str(spec.mode), decision, plan.summary,
            actions=tuple(actions), demand_source=self._memory[(view.namespace, view.name)].demand_source,
            scale_down_marks=marks if marks is not None and not marks.empty else None,
        )

    def _tell_tuning(self, view: WorkloadView, memory: Memory, now: float, errors: list[str]) -> None:
        """The Events of the self-tuning state (``Memory.tuning_state``): once per transition, not per replay."""
        if memory.tuning_state is None:
            return
        slo, lead_only, why = memory.tuning_state
        kind: EventType = "Normal" if slo == "met" else "Warning"
        reason = SLO_EVENTS[slo]
        memory.notices.tell("slo", slo, partial(self._event, view, kind, reason, why, now, errors), quiet="met")
        reason = "ForecastAddsOnlyLead" if lead_only else "ForecastInUse"
        memory.notices.tell("lead-only", lead_only, partial(self._event, view, "Normal", reason, why, now, errors),
                            quiet=False)

    def _guard_rollout(
        self, view: WorkloadView, spec: WorkloadSpec, decision: ScalingDecision, now: float, write: bool,
        errors: list[str],
    ) -> tuple[ScalingDecision, RolloutGuard | None]:
        """Hold a scale-down while more than one ReplicaSet of the Deployment has pods (a rollout), from a pod
        listing of this tick (``autoscaler.domain.scaledown.guard_scale_down``); a scale-up is never held.

        One Event per transition (not per tick): ``ScaleDownHeld`` when a rollout first holds a scale-down,
        ``ScaleDownDuringRollout`` (Warning) when a rollout that is not finishing no longer holds it; the state
        resets once a listing shows one ReplicaSet again. When the pods cannot be listed nothing is held (the
        marks path says so, and the scale-down goes ahead unmarked, as without this check).
        """
        memory = self._memory[(view.namespace, view.name)]
        guard = None
        if (write or self.dry_run) and not spec.advisory and decision.desired_replicas < view.replicas and (
                memory.startups_checked == now or self._list_pods(view, memory, now, errors)):
            guard = guard_scale_down(view.name, memory.startups.pods, view.replicas, decision.desired_replicas, now,
                                     view.rollout_stuck)
        if guard is None:
            if memory.startups_checked == now and rollout_of(view.name, memory.startups.pods) is None:
                memory.notices.forget("rollout")
            return decision, None
        if write and guard.held:
            memory.notices.tell("rollout", "held", partial(
                self._event, view, "Normal", "ScaleDownHeld", guard.message, now, errors))
        elif write and memory.notices.tell("rollout", "stuck", partial(
                self._event, view, "Warning", "ScaleDownDuringRollout", guard.message, now, errors)):
            log.warning("%s/%s: %s", view.namespace, view.name, guard.message)
        return replace(decision, desired_replicas=guard.step.replicas, steps=(*decision.steps, guard.step)), guard

    def _marks(self, view: WorkloadView, spec: WorkloadSpec, decision: ScalingDecision,
               loads: Mapping[Key, float] | None, now: float, write: bool, errors: list[str],
               guard: RolloutGuard | None = None) -> ScaleDownMarks | None:
        """Which pods get (or lose) a ``pod-deletion-cost`` mark; written here unless ``write`` is False.

        A scale-down marks the idlest pods *before* the scale write, from a pod list of this tick (per ReplicaSet
        when it goes ahead during a rollout that is not finishing); any other tick clears marks of ours once the
        last scale-down landed, or at once when it holds a scale-down for a rollout
        (``autoscaler.domain.scaledown``). An advisory Deployment's marks are cleared by ``_sweep_marks``. A failed
        patch is counted (``pod_mark``) and reported; whether the scale waits for it is ``_confirm_marks``'s call.
        """
        memory = self._memory[(view.namespace, view.name)]
        if spec.advisory:
            return None
        desired = decision.desired_replicas
        if desired < view.replicas:
            if loads is None and not memory.marks_seen and not self._node_gpus:
                # nothing to mark from (no load, no node read), no mark of ours known: no pod read
                why = "the query failed" if isinstance(self.source, PodLoadSource) else "no per-pod query"
                return ScaleDownMarks(note=f"in-flight requests per pod unknown ({why}): no pod marked, the "
                                           "ReplicaSet's default order applies", unmarked=NO_POD_LOADS)
            if memory.startups_checked != now and not self._list_pods(view, memory, now, errors):
                return ScaleDownMarks(note="pods could not be listed: no pod marked", unmarked=PODS_UNREAD)
            pods = memory.startups.pods
            mine = None if loads is None else {pod: v for (ns, pod), v in loads.items() if ns == view.namespace}
            marks = plan_marks(view.name, pods, view.replicas - desired, mine, now,
                               per_replicaset=guard is not None and not guard.held, node_gpus=self._node_gpus,
                               pod_gpus=max(1, spec.gpus_per_replica))
        elif memory.marks_seen:
            scaling_up = desired > view.replicas
            marks = plan_clear(view.name, memory.startups.pods, view.replicas, now, scaling_up=scaling_up,
                               held=guard is not None and guard.held)
        else:
            return None
        if write:
            for pod, patch in marks.patches.items():
                try:
                    self.cluster.patch_pod_annotations(view.namespace, pod, patch, label_patch(patch))
                except KubeError as exc:
                    self.metrics.errors.labels("pod_mark").inc()
                    errors.append(f"{view.namespace}/{view.name}: marking pod {pod} for the scale-down failed: {exc}")
                else:
                    memory.marks_seen = True  # list the pods next tick: clear the marks once the scale-down landed
        return marks

    def _confirm_marks(
        self, view: WorkloadView, decision: ScalingDecision, marks: ScaleDownMarks, now: float, errors: list[str],
    ) -> tuple[ScalingDecision, ScaleDownMarks]:
        """Scale only once a read shows the marks in place: the Deployment's pods are listed again after the
        patches (unless nothing was written: this tick's listing already shows them), and the scale-down waits a
        tick for a mark the read does not show, for at most ``MARK_CONFIRM_SECONDS``; then it goes ahead without
        relying on the marks, and says so (``autoscaler.domain.scaledown.check_marks``)."""
        memory = self._memory[(view.namespace, view.name)]
        if not marks.marks:
            memory.marks_waiting_since = None
            return decision, marks
        read_ok = not marks.patches or self._list_pods(view, memory, now, errors)
        pods = memory.startups.pods if read_ok else ()
        check = check_marks(marks, pods, view.replicas, decision.desired_replicas, memory.marks_waiting_since, now)
        if not check.missing:
            memory.marks_waiting_since = None
            return decision, marks
        if memory.marks_waiting_since is None:
            memory.marks_waiting_since = now
        assert check.step is not None
        decision = replace(decision, desired_replicas=check.step.replicas, steps=(*decision.steps, check.step))
        if check.hold:
            return decision, replace(marks, note=check.step.detail)
        return decision, replace(marks, note=check.step.detail, unmarked=MARKS_UNCONFIRMED)

    def _check_overwrite(self, view: WorkloadView, spec: WorkloadSpec, memory: Memory, now: float,
                         errors: list[str]) -> None:
        """Count replicas its last scale wrote that a list now shows changed by someone else (the metric, each time),
        and say it with a Warning Event once it happened ``OVERWRITES_TO_WARN`` times within the hour; the latch
        resets, silently, once an hour passes without one (``autoscaler.domain.contention``). An advisory Deployment's
        replicas are someone else's to write: nothing is counted for it."""
        memory.overwrites = recent_overwrites(memory.overwrites, now)
        if spec.advisory:
            memory.written = None
        elif memory.written is not None and view.replicas != memory.written:
            self.metrics.replicas_overwritten.labels(view.namespace, view.name).inc()
            memory.overwrites = (*memory.overwrites, now)
            log.info("%s/%s: spec.replicas set to %d by someone else after this controller set %d", view.namespace,
                     view.name, view.replicas, memory.written)
            if len(memory.overwrites) >= OVERWRITES_TO_WARN:
                message = overwritten_message(view.replicas, memory.written, len(memory.overwrites))
                memory.notices.tell("overwritten", True, partial(
                    self._event, view, "Warning", EVENT_REASON_OVERWRITTEN, message[:1000], now, errors))
            memory.written = None
        if not memory.overwrites:
            memory.notices.tell("overwritten", False, lambda: True, quiet=False)

    def _apply(
        self, view: WorkloadView, spec: WorkloadSpec, decision: ScalingDecision, summary: dict[str, Any] | None,
        blocked: int, now: float, write: bool, errors: list[str], marks: ScaleDownMarks | None = None,
    ) -> list[str]:
        memory = self._memory[(view.namespace, view.name)]
        desired = decision.desired_replicas
        actions: list[str] = []
        if spec.advisory:
            outcome = "advisory"
        else:
            outcome = "up" if desired > view.replicas else "down" if desired < view.replicas else "hold"
        self.metrics.decisions.labels(view.namespace, view.name, outcome).inc()
        verb = "" if write else "would "
        if marks is not None:
            actions.extend(f"{verb}mark pod {m.pod} {m.cost} ({m.why})" for m in marks.marks)
            actions.extend(f"{verb}clear the mark of pod {pod}" for pod in marks.clear)
        if not write:
            if outcome in ("up", "down"):
                actions.append(f"would scale {view.replicas} -> {desired}")
            return actions
        self._check_overwrite(view, spec, memory, now, errors)
        if blocked:
            memory.notices.tell("gpus", True, partial(
                self._event, view, "Warning", "GPUsUnavailable",
                f"{blocked} pod(s) Pending unschedulable for longer than a node start-up; scale-up held at "
                f"{view.replicas}", now, errors,
            ))
        else:
            memory.notices.forget("gpus")
        if outcome in ("up", "down"):
            try:
                changed = self.cluster.scale(view.namespace, view.name, desired)
            except KubeError as exc:
                self.metrics.errors.labels("kube_write").inc()
                errors.append(f"{view.namespace}/{view.name}: scaling to {desired} failed: {exc}")
            else:
                memory.written = desired
                if changed:
                    actions.append(f"scaled {view.replicas} -> {desired}")
                    why = deciding_step(decision)
                    chosen = ""
                    if outcome == "down":
                        chosen = self._scaled_down(view, desired, marks, now)
                    message = f"replicas {view.replicas} -> {desired} ({why.name}: {why.detail}){chosen}"
                    self._event(view, "Normal", "ScaledUp" if outcome == "up" else "ScaledDown", message, now, errors)
                    log.info("%s/%s: %s", view.namespace, view.name, message)  # a decision, logged when it acts
                else:  # someone set it between our list and our write: nothing happened, nothing to announce
                    actions.append(f"already at {desired}")
        status = DeploymentStatus(
            mode=str(spec.mode),
            desired_replicas=desired,
            current_replicas=view.replicas,
            ready_replicas=view.ready_replicas,
            lead_seconds=finite(decision.lead_seconds),
            warm_pool_replicas=decision.warm_pool_replicas,
            warm_pool_as=decision.warm_pool_as,
            steps=tuple(StatusStep(s.name, s.replicas, s.detail) for s in decision.steps),
            forecast=summary,
            demand_source=memory.demand_source,
            demand_degraded=is_degraded(memory.demand_source),
            demand_unit=spec.demand_unit.value,
            token_weights=(None if spec.demand_unit is DemandUnit.REQUESTS
                           else {"input": memory.demand_key[1], "output": memory.demand_key[2]}
                           if memory.demand_key is not None else None),
            track=tuple(memory.track),
            # Requests/s per replica planned with, where it came from (annotation, learned; null: not learned yet, the
            # replicas held) and the learned estimate with its evidence (also beside an annotation, for comparison).
            capacity=self._capacity_status(spec, memory),
            tuning=_tuning_status(memory),
            # The last scale-down applied: the pods marked for removal, or why the marks did not choose them.
            scale_down=memory.last_scale_down,
            scaled_by=memory.scalers,  # the HPAs that scale it too (autoscaler.domain.contention)
        )
        memory.status_built = status  # written by ``_publish``, after the tick's replays
        return actions

    def _write_status(self, view: WorkloadView, memory: Memory, status: DeploymentStatus, now: float,
                      errors: list[str]) -> bool:
        """Write ``status`` when it is due; True when the server's copy changed.

        Written when the decision changes (``DeploymentStatus.decided``) and otherwise every STATUS_REFRESH_SECONDS:
        the forecast's numbers move every bin, and a write per Deployment per tick would be a thousand writes every
        30 s on a large fleet for nothing anyone acts on. Not before the status it left was read (a failed list,
        reported): this one would replace it, self-tuning days and all."""
        decided = status.decided()
        due = decided != memory.status_written or now - memory.status_written_at >= STATUS_REFRESH_SECONDS
        if not (due and memory.status_read):
            return False
        try:
            result = self.cluster.write_status(view.namespace, view.name, view.uid,
                                               replace(status, time=utc(now).isoformat()).to_dict(),
                                               memory.status_object)
        except KubeError as exc:
            self.metrics.errors.labels("kube_write").inc()
            errors.append(f"{view.namespace}/{view.name}: writing status failed: {exc}")
            return False
        memory.status_object, memory.status_copy = result.stored, None  # newer than any copy left to make
        memory.status_written, memory.status_written_at = decided, now
        return result.written

    def _publish(self, view: WorkloadView, outcome: WorkloadOutcome, now: float, write: bool,
                 errors: list[str]) -> WorkloadOutcome:
        """Publish what this tick's ``_apply`` made of the Deployment, once the tick's replays have run (they come
        last, so as not to hold a scale-up back): its status, with the self-tuning state as it stands now, and the
        Events of that state. So a replay's record and choice are published by the tick that ran it, not the next
        one, which a process that stops after this tick (``run --once``, a lost lease) would never run; and the
        status is still written at most once a tick."""
        memory = self._memory.get((view.namespace, view.name))
        if memory is None or memory.status_built is None:
            return outcome
        status, memory.status_built = memory.status_built, None
        if write:
            self._tell_tuning(view, memory, now, errors)
        told = memory.notices.states(RESUMED_NOTICES) or None
        if self._write_status(view, memory, replace(status, tuning=_tuning_status(memory), told=told), now, errors):
            return replace(outcome, actions=(*outcome.actions, "status written"))
        return outcome

    def _scaled_down(self, view: WorkloadView, desired: int, marks: ScaleDownMarks | None, now: float) -> str:
        """Record how the pods of a scale-down just applied were chosen (the status's ``scaleDown``), count and log
        one the marks did not all choose (``scale_down_unmarked_total{reason}``), and return the ``ScaledDown``
        Event's account of it."""
        memory = self._memory[(view.namespace, view.name)]
        marked = [] if marks is None else [{"pod": m.pod, "cost": m.cost, "why": m.why} for m in marks.marks]
        reason = None if marks is None else marks.unmarked
        note = None if marks is None else marks.note
        memory.last_scale_down = {"at": utc(now).isoformat(), "from": view.replicas, "to": desired,
                                  "marked": marked, "unmarked": reason, "note": note}
        text = ""
        if reason is None:  # steered by the marks: the next unmarked scale-down is news again
            memory.notices.forget("scale_down_unmarked")
        if marked and reason is None:
            return "; idlest pods marked for removal: " + ", ".join(f"{m['pod']} ({m['why']})" for m in marked)
        if marked:
            text = "; pods marked for removal: " + ", ".join(f"{m['pod']} ({m['why']})" for m in marked)
        if reason is not None:
            self.metrics.scale_down_unmarked.labels(view.namespace, view.name, reason).inc()

            def warn() -> bool:
                log.warning("%s/%s: scale-down %d -> %d not (fully) steered by the marks (%s): %s; said once until "
                            "the reason changes (the ScaledDown Event and scale_down_unmarked_total count each one)",
                            view.namespace, view.name, view.replicas, desired, reason, note)
                return True

            # a Deployment without a per-pod query is unmarked at every scale-down: one log line per reason, not one
            # per scale-down (a thousand-Deployment fleet would write hundreds a tick)
            memory.notices.tell("scale_down_unmarked", reason, warn)
            text += f"; the marks do not choose {'all ' if marked else ''}the pods removed ({reason}): {note}"
        elif not marked:
            text = f"; no pod marked: {note}" if note else "; no pod marked"
        return text

    def _sweep_marks(
        self, cfg: Config, in_care: set[Key], listed: Mapping[Key, str], now: float, errors: list[str],
    ) -> None:
        """Clear the marks of ours on pods whose Deployment is not in the controller's care (opted out, advisory,
        invalid annotations, a namespace the configuration excludes, gone): nothing maintains them any more, and a
        later ``kubectl scale`` would still delete those pods first. For Deployments in its care, a mark found
        makes the loop list their pods every tick until it is cleared (``plan_clear``).

        One label-selected list of the pods carrying the mark label (all namespaces, or the configured ones and
        those of the Deployments leaving): on the first tick (a restart, a new leader), every
        ``MARK_SWEEP_SECONDS``, and in a tick in which a Deployment known to have marks leaves the controller's care.
        ``listed``: why each Deployment listed but not in ``in_care`` is not (for the log).
        """
        leaving = {key for key, m in self._memory.items() if m.marks_seen and key not in in_care}
        if not leaving and now - self._swept_at < MARK_SWEEP_SECONDS:
            return
        namespaces = sorted(set(cfg.namespaces) | {ns for ns, _ in leaving}) if cfg.namespaces else []
        try:
            pods = self.cluster.list_marked_pods(namespaces)
        except KubeError as exc:
            self.metrics.errors.labels("kube_read").inc()
            errors.append(f"listing the pods with scale-down marks failed (retried next tick): {exc}")
            self._swept_at = -math.inf  # the Deployments leaving now are forgotten this tick: sweep again next tick
            return
        self._swept_at = now
        groups: dict[Key, list[PodView]] = {}
        for pod in pods:
            groups.setdefault((pod.namespace, deployment_of(pod) or ""), []).append(pod)
        for key in leaving:
            self._memory[key].marks_seen = False
        for key, group in sorted(groups.items()):
            if key in in_care:
                self._memory[key].marks_seen = True
                continue
            why = listed.get(key) or self._why_not_listed(key, cfg)
            plan = release_marks(group, why)
            for pod_name, patch in plan.patches.items():
                try:
                    self.cluster.patch_pod_annotations(key[0], pod_name, patch, label_patch(patch))
                except KubeError as exc:
                    self.metrics.errors.labels("pod_mark").inc()
                    errors.append(f"{key[0]}/{key[1] or '?'}: clearing the scale-down mark of pod {pod_name} failed "
                                  f"(retried next tick): {exc}")
                    self._swept_at = -math.inf
            if plan.clear:
                log.info("%s/%s: scale-down marks cleared on %s: %s", key[0], key[1] or "?", ", ".join(plan.clear), why)

    @staticmethod
    def _why_not_listed(key: Key, cfg: Config) -> str:
        """Why a Deployment with marks of ours is not among the ones the controller looks after (for the log)."""
        if not key[1]:
            return "the pod belongs to no Deployment's ReplicaSet"
        if not cfg.allows_namespace(key[0]):
            return f"namespace {key[0]} is not in the configuration's namespaces"
        return "the Deployment is not opted in (no enabled label) or is gone"


def _tuning_status(memory: Memory) -> dict[str, Any] | None:
    """The status's self-tuned operating point: the candidates replayed, their GPU-hours and attainment, the choice;
    with the objective and sizing it was made for and when it ran, so a restarted controller continues it."""
    if memory.tuning is None:
        return None
    return {**memory.tuning.to_dict(), "inputs": list(memory.tuning_inputs or ()), "tried": memory.tuning_tried}
