"""The snapshot reads of a tick and what they tell: the fleet's annotations, the newest bins of every demand series,
the statuses left by a previous controller, the pods' start-ups, the per-pod load a scale-down ranks by, the
evidence a replica's capacity is learned from, and the Events and log lines once per transition about them
(a malformed annotation, a metrics outage, a degraded demand formula, a capacity not learned yet).

Why a module of its own: a tick reads first and writes last (``loop``); everything that talks to Prometheus or
lists from the API server before the decisions is here, so the decisions in between see one snapshot.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from functools import partial

import numpy as np

from autoscaler import promql
from autoscaler.adapters.kube import KubeError
from autoscaler.adapters.prometheus import FleetHistory, PrometheusError, PrometheusUnavailable
from autoscaler.config.schema import Config, ForecastProfile
from autoscaler.domain.annotations import (
    PREFIX,
    STATUS_ANNOTATION,
    AnnotationError,
    Mode,
    WorkloadSpec,
    event_payloads,
    parse_workload,
)
from autoscaler.domain.contention import (
    EVENT_REASON_CONTENDED,
    EVENT_REASON_RESOLVED,
    contended_message,
    resolved_message,
    scalers_of,
)
from autoscaler.domain.demand import DemandUnit, token_demand
from autoscaler.domain.learned_capacity import CapacityInputs, EvidenceRules, estimate_capacity
from autoscaler.domain.status import DeploymentStatus, first_sight, status_object_name
from autoscaler.engine.deciding import (
    CURRENT_DEMAND_RESOLUTION_SECONDS,
    CURRENT_DEMAND_WIDE_WINDOW_SECONDS,
    CURRENT_DEMAND_WINDOW_SECONDS,
)
from autoscaler.engine.spare import lent_in
from autoscaler.history import TOKEN_QUERIES, fetch_fleet, history_window, read_capacity_inputs, series_of
from autoscaler.ports import EventType, PodStartups, PoolGpus, PoolNodes, ScalerView, WorkloadView
from autoscaler.runtime.state import (
    CAPACITY_BATCH,
    CAPACITY_EVERY_SECONDS,
    CAPACITY_HISTORY_SECONDS,
    CAPACITY_RETRY_SECONDS,
    LOGGER,
    POD_LOAD_QUERY,
    REFETCH_BINS,
    RESUMED_NOTICES,
    STARTUP_RECHECK_SECONDS,
    ControllerBase,
    CurrentDemandSource,
    Key,
    Memory,
    PodLoadSource,
    demand_key,
    is_degraded,
    log_demand_source,
    objective,
    splice,
)
from models.types import TrafficSeries

log = logging.getLogger(LOGGER)


class SnapshotReads(ControllerBase):
    """The reads of a tick and the notices about them."""

    def _parse(
        self, view: WorkloadView, cfg: Config
    ) -> tuple[WorkloadSpec | None, ForecastProfile | None, list[AnnotationError]]:
        result = parse_workload(view.namespace, view.name, view.labels, view.annotations, view.pod_template)
        problems = list(result.problems)
        spec = result.spec
        if spec is None:
            return None, None, problems
        if spec.forecast_profile not in cfg.profiles:
            known = ", ".join(sorted(cfg.profiles))
            problems.append(
                AnnotationError(
                    PREFIX + "forecast-profile", spec.forecast_profile, f"no such profile in the config ({known})"
                )
            )
            return None, None, problems
        if PREFIX + "cold-start" not in view.annotations:
            spec = replace(spec, cold_start_seconds=float(cfg.cold_start.pod_startup_seconds))
        return spec, cfg.profiles[spec.forecast_profile], problems

    def _contend(
        self, valid: list[tuple[WorkloadView, WorkloadSpec, ForecastProfile]], now: float, write: bool,
        errors: list[str],
    ) -> tuple[list[tuple[WorkloadView, WorkloadSpec, ForecastProfile]], set[Key]]:
        """``valid`` with every Deployment another HorizontalPodAutoscaler also scales run as advisory, and their keys
        (``autoscaler.domain.contention``); a Warning Event when one starts to, a Normal one when it no longer does
        (once per transition). One list of the HPAs per tick (an advisory Deployment's are published too: ``explain``
        names them); on a failed read the last good one holds (a Deployment an HPA scaled is not scaled by both
        because a list failed)."""
        if not valid:
            return valid, set()
        try:
            scalers: list[ScalerView] | None = self.cluster.list_scalers()
        except KubeError as exc:
            scalers = None
            self.metrics.errors.labels("kube_read").inc()
            errors.append(f"listing HorizontalPodAutoscalers failed (the last read holds; retried next tick): {exc}")
        out: list[tuple[WorkloadView, WorkloadSpec, ForecastProfile]] = []
        contended: set[Key] = set()
        for view, spec, profile in valid:
            key = (view.namespace, view.name)
            memory = self._memory[key]
            if scalers is not None:
                memory.scalers = scalers_of(view.namespace, view.name, scalers)
            if spec.advisory:  # annotated so: the HPA beside it is what the mode is for, and nothing is to be said
                memory.notices.forget("contention")
                out.append((view, spec, profile))
                continue
            names = memory.scalers
            if write:
                kind: EventType = "Warning" if names else "Normal"
                reason, message = ((EVENT_REASON_CONTENDED, contended_message(names)) if names else
                                   (EVENT_REASON_RESOLVED, resolved_message()))
                memory.notices.tell("contention", names, partial(self._event, view, kind, reason, message[:1000], now,
                                                                 errors), quiet=())
            if names:
                contended.add(key)
                spec = replace(spec, mode=Mode.ADVISORY)
            out.append((view, spec, profile))
        return out, contended

    def _report_problems(
        self, view: WorkloadView, problems: list[AnnotationError], now: float, write: bool, errors: list[str]
    ) -> None:
        """A Warning Event per problem not reported before; a fixed problem that comes back is reported again.

        A problem counts as reported only once its Event landed, so a failed post is retried next tick, and a
        standby (``write`` False) leaves them all to the leader.
        """
        memory = self._memory.setdefault((view.namespace, view.name), Memory())
        texts = frozenset(str(p) for p in problems)
        memory.reported &= texts
        fresh_errors = {str(p) for p in problems if p.severity == "error"} - memory.counted
        if fresh_errors:
            self.metrics.errors.labels("invalid_annotation").inc(len(fresh_errors))
        memory.counted = (memory.counted & texts) | fresh_errors
        if not write:
            return
        for p in problems:
            if str(p) in memory.reported:
                continue
            ((reason, message),) = event_payloads([p])
            if self._event(view, "Warning", reason, message, now, errors):
                memory.reported |= {str(p)}

    def _fetch(
        self, cfg: Config, valid: list[tuple[WorkloadView, WorkloadSpec, ForecastProfile]], now: int, errors: list[str]
    ) -> bool:
        """One fleet query for the newest bins; one more for Deployments seen for the first time.

        With a Deployment sized on tokens (``demand-unit: tokens``) among them, one more fleet query per token
        series (``prompt_token_rate``, ``generation_token_rate``) over the namespaces of such Deployments; their
        history is the weighted tokens/s (``autoscaler.domain.demand``), missing where a weighted series is.
        """
        if not valid:
            self.metrics.metrics_up.set(1)
            return True
        step = cfg.loop.step_seconds
        end = history_window(now, step, 0)[1]
        query = cfg.prometheus.arrival_rate_query
        fresh: list[tuple[WorkloadView, WorkloadSpec, ForecastProfile]] = []
        known: list[tuple[WorkloadView, WorkloadSpec, ForecastProfile]] = []
        for view, spec, profile in valid:
            memory = self._memory[(view.namespace, view.name)]
            unit = demand_key(spec, profile)
            if memory.demand_key != unit:
                if memory.demand_key is not None:  # another unit or weights: the history and model start afresh
                    memory.history, memory.keeper, memory.track = None, None, []
                    memory.tuning, memory.tuning_inputs = None, None
                    # a learned capacity is in requests/s: learned again (from now) if the unit is requests again
                    memory.capacity, memory.capacity_checked = None, -math.inf
                    memory.notices.forget("capacity")
                memory.demand_key = unit
            h = memory.history
            (known if h is not None and h.step_seconds == step else fresh).append((view, spec, profile))
        plans: list[tuple[list[tuple[WorkloadView, WorkloadSpec, ForecastProfile]], int]] = []
        if fresh:
            # the history a model fits on is of settled bins: one more, the newest ended bin, is kept on top of it
            window = max(max(p.history_seconds for _, _, p in fresh), cfg.loop.history_seconds) + step
            plans.append((fresh, history_window(now, step, window)[0]))
        if known:
            oldest = min(self._history_end(v) for v, _, _ in known)
            plans.append((known, max(oldest - REFETCH_BINS * step, end - (cfg.loop.history_seconds // step) * step)))
        try:
            for group, start in plans:
                if start >= end:
                    continue
                namespaces = sorted({v.namespace for v, _, _ in group})
                # The read `export`/`backtest --deployment` make too (autoscaler.history): the same series.
                answer = fetch_fleet(self.source, query, namespaces, start, end, step)
                on_tokens = sorted({v.namespace for v, s, _ in group if s.demand_unit is DemandUnit.TOKENS})
                tokens = {column: fetch_fleet(self.source, name, on_tokens, start, end, step)
                          for column, name in TOKEN_QUERIES.items()} if on_tokens else {}
                for view, spec, profile in group:
                    key = (view.namespace, view.name)
                    memory = self._memory[key]
                    keep = max(profile.history_seconds, cfg.loop.history_seconds) + step  # as ``window`` above
                    if spec.demand_unit is DemandUnit.TOKENS:
                        prompt = series_of(tokens["input_tokens"], key, start, end, step).values
                        generated = series_of(tokens["output_tokens"], key, start, end, step).values
                        got = TrafficSeries(token_demand(prompt, generated, profile.token_weights), step, start)
                        memory.history = splice(memory.history, got, keep)
                        memory.demand_source = None  # the token counters: no completions-only fallback to report
                        continue
                    got = series_of(answer, key, start, end, step)
                    memory.history = splice(memory.history, got, keep)
                    found, source = (
                        answer.latest_source(key) if isinstance(answer, FleetHistory)
                        else (bool(np.isfinite(got.values).any()), None)
                    )
                    if found:
                        memory.demand_source = source
        except PrometheusError as exc:
            kind = "metrics_unavailable" if isinstance(exc, PrometheusUnavailable) else "metrics_query"
            self.metrics.errors.labels(kind).inc()
            self.metrics.metrics_up.set(0)
            errors.append(f"metrics fetch failed, holding replicas: {exc}")
            return False
        self.metrics.metrics_up.set(1)
        return True

    def _read_current_demand(
        self, cfg: Config, valid: list[tuple[WorkloadView, WorkloadSpec, ForecastProfile]], now: float,
        errors: list[str],
    ) -> None:
        """The demand over the last minute at ``now`` for the Deployments sized on requests: one fleet instant query
        of the arrival rate (``engine.deciding``: the reactive floor's evidence, as fresh as an HPA's metric), and
        one over two minutes for those it leaves unanswered (scrapes a minute apart leave one sample in a minute).
        A Deployment neither answers, one sized on tokens, or every one when the read fails (counted and reported)
        is planned on its newest ended bin instead, as before this read existed."""
        for view, _, _ in valid:
            self._memory[(view.namespace, view.name)].current_demand = None
        pending = [view for view, spec, _ in valid if spec.demand_unit is DemandUnit.REQUESTS]
        if not pending or not isinstance(self.source, CurrentDemandSource):
            return
        for window in (CURRENT_DEMAND_WINDOW_SECONDS, CURRENT_DEMAND_WIDE_WINDOW_SECONDS):
            try:
                answer = self.source.fleet_instant(
                    cfg.prometheus.arrival_rate_query, sorted({v.namespace for v in pending}), now,
                    window_seconds=window, resolution_seconds=CURRENT_DEMAND_RESOLUTION_SECONDS)
            except PrometheusError as exc:
                self.metrics.errors.labels("metrics_query").inc()
                errors.append(f"reading the demand of the last {window}s failed ({exc}); the newest bins stand in")
                return
            unanswered = []
            for view in pending:
                value = answer.get((view.namespace, view.name))
                if value is not None and math.isfinite(value) and value >= 0:
                    self._memory[(view.namespace, view.name)].current_demand = float(value)
                else:
                    unanswered.append(view)
            if not unanswered:
                return
            pending = unanswered

    def _read_pool_gpus(self, cfg: Config, valid: list[tuple[WorkloadView, WorkloadSpec, ForecastProfile]],
                        errors: list[str]) -> tuple[dict[str, PoolGpus] | None, str]:
        """The GPUs of every NodePool a GPU Deployment of the tick names (``ports.PoolNodes``): the free GPUs let the
        engine plan a replica that fits on one with the pod start-up alone (``engine.deciding``), and the pool's
        busy nodes, their free GPUs and its node count size its node headroom (``engine.money``). Returns the reads
        (empty: no pool named) or None with why they were not read: by a cluster port without the read, by a
        controller confined to some namespaces (its RoleBindings grant no cluster-scoped ``list`` on nodes), and
        when the read fails (counted as ``kube_read`` and reported). Not read, every new replica is planned as
        waiting for a node and no node headroom is sized or changed."""
        pools = sorted({s.nodepool for _, s, _ in valid if s.nodepool and s.gpus_per_replica > 0})
        if not pools:
            return {}, ""
        if cfg.namespaces:
            return None, "the controller is confined to namespaces (no cluster-wide list on nodes)"
        if not isinstance(self.cluster, PoolNodes):
            return None, "the cluster port reads no nodes"
        try:
            return dict(self.cluster.pool_gpus(pools)), ""
        except KubeError as exc:
            self.metrics.errors.labels("kube_read").inc()
            errors.append(f"reading the nodes of NodePool(s) {', '.join(pools)} failed ({exc}); new replicas are "
                          "planned as waiting for a node and no node headroom is changed this tick")
            return None, f"reading their nodes failed ({exc})"

    def _history_end(self, view: WorkloadView) -> int:
        h = self._memory[(view.namespace, view.name)].history
        assert h is not None
        return h.end

    def _report_outage(
        self, valid: list[tuple[WorkloadView, WorkloadSpec, ForecastProfile]], ok: bool, now: float, write: bool,
        errors: list[str],
    ) -> None:
        """MetricsUnavailable once per workload when an outage starts, MetricsRecovered once when it ends.

        Tracked per workload (not fleet-wide) so a Deployment that appears mid-outage is told too, and an
        Event that failed to post is retried on the next tick instead of being lost.
        """
        if not write:
            return
        for view, _, _ in valid:
            memory = self._memory[(view.namespace, view.name)]
            said: tuple[EventType, str, str] = (
                ("Warning", "MetricsUnavailable", "cannot read traffic metrics; replicas are held (never scaled down "
                 "on missing data) until they return") if not ok else
                ("Normal", "MetricsRecovered", "metrics are back; forecasting and scaling resume"))
            memory.notices.tell("outage", not ok, partial(self._event, view, *said, now, errors), quiet=False)

    def _report_demand_source(
        self, valid: list[tuple[WorkloadView, WorkloadSpec, ForecastProfile]], now: float, write: bool,
        errors: list[str],
    ) -> None:
        """A log line and an Event when a Deployment's demand falls back to completions alone, and when it is back.

        Once per transition, not per tick: the built-in arrival query answers completions alone for a Deployment
        whose vLLM queue gauges are absent (``demand_source`` says which), instead of nothing, so the Deployment
        is still forecast and scaled, on a demand that reads low when requests queue.
        """
        for view, _, _ in valid:
            memory = self._memory[(view.namespace, view.name)]
            degraded = is_degraded(memory.demand_source)
            memory.notices.tell("degraded-log", degraded,
                                partial(log_demand_source, view, degraded, memory.demand_source), quiet=False)
            if not write:
                continue
            said: tuple[EventType, str, str] = (
                ("Warning", "DemandDegraded", f"demand is read from the completion rate alone ({memory.demand_source})"
                 ": requests still queued are not counted, so it reads low when the server saturates; the full formula "
                 "(completions + growth of waiting + running) resumes by itself once the gauges are scraped")
                if degraded else
                ("Normal", "DemandRestored",
                 "demand is read from the full formula again (completions + growth of waiting + running)"))
            memory.notices.tell("degraded", degraded, partial(self._event, view, *said, now, errors), quiet=False)

    def _read_statuses(self, views: Sequence[WorkloadView], write: bool, errors: list[str]) -> None:
        """Read the status each Deployment seen for the first time left, and move an older version's annotation off
        the Deployment (``autoscaler.domain.status``). What a restarted controller resumes from it: the self-tuning
        record, the last scale-down, the HPAs it told of (``scaledBy``) and the spares its pool lent (the ``spare``
        step, while the Deployment still requests what that status decided).

        One label-selected list of status objects per namespace with such Deployments (not a read per Deployment):
        in steady state no tick reads them, each write's answer is what the next one compares with. A failed list
        is counted and reported; those Deployments' statuses are neither resumed from nor written until a later
        tick's list succeeds. When acting, a Deployment that carries the annotation has its status copied to the
        object (when the annotation's is the newer) and then the annotation removed, in one merge patch: from then
        on the ReplicaSets' copy of it no longer changes. A rollback that copies the annotation back from an old
        ReplicaSet has it removed again the same way.
        """
        unread = [v for v in views if not self._memory[(v.namespace, v.name)].status_read]
        for namespace in sorted({v.namespace for v in unread}):
            try:
                stored = self.cluster.list_statuses(namespace)
            except KubeError as exc:
                self.metrics.errors.labels("kube_read").inc()
                errors.append(f"listing the status objects in namespace {namespace} failed: {exc}; the statuses of "
                              "its Deployments seen for the first time are written once a list succeeds")
                continue
            for view in (v for v in unread if v.namespace == namespace):
                memory = self._memory[(view.namespace, view.name)]
                found = stored.get(status_object_name(view.name))
                sight = first_sight(view.uid, view.annotations.get(STATUS_ANNOTATION),
                                    None if found is None else found.text, None if found is None else found.owner_uid)
                problems = list(sight.problems)
                saved = None
                try:
                    saved = None if sight.saved is None else DeploymentStatus.from_dict(sight.saved)
                except ValueError as exc:
                    problems.append(f"the status it left cannot be read ({exc})")
                for problem in problems:
                    log.warning("%s/%s: %s; it starts over", view.namespace, view.name, problem)
                memory.status_read, memory.status_object, memory.status_copy = True, found, sight.copy
                if saved is not None:
                    memory.saved_tuning = saved.tuning
                    if saved.scaled_by:  # the controller that wrote it saw these HPAs and told of them (``_contend``)
                        memory.notices.set("contention", saved.scaled_by)
                        memory.scalers = memory.scalers or saved.scaled_by  # the last read, should this tick's fail
                    for subject, state in (saved.told or {}).items():  # what its Events told (``RESUMED_NOTICES``)
                        if subject in RESUMED_NOTICES:
                            memory.notices.set(subject, state)
                    memory.last_scale_down = saved.scale_down  # the last scale-down outlives a restart too
                    if saved.desired_replicas == view.replicas:  # the spares it names are the ones standing now
                        memory.spares_planned, memory.spares_lent = lent_in(
                            [(step.name, step.replicas) for step in saved.steps])
        if not write:
            return
        for view in views:
            memory = self._memory[(view.namespace, view.name)]
            if memory.status_read and STATUS_ANNOTATION in view.annotations:
                self._migrate_status(view, memory, errors)

    def _migrate_status(self, view: WorkloadView, memory: Memory, errors: list[str]) -> None:
        """Copy the annotation's status to the status object when it is the newer, then remove the annotation; a
        failure is counted and reported, and the next tick tries again (the annotation is still there)."""
        try:
            if memory.status_copy is not None:
                result = self.cluster.write_status(view.namespace, view.name, view.uid, memory.status_copy,
                                                   memory.status_object)
                memory.status_object, memory.status_copy = result.stored, None
            self.cluster.remove_status_annotation(view.namespace, view.name)
        except KubeError as exc:
            self.metrics.errors.labels("kube_write").inc()
            errors.append(f"{view.namespace}/{view.name}: moving the status annotation to configmap "
                          f"{status_object_name(view.name)} failed: {exc}")
            return
        log.info("%s/%s: the status annotation was moved to configmap %s", view.namespace, view.name,
                 status_object_name(view.name))

    def _startups(self, view: WorkloadView, now: float, errors: list[str]) -> PodStartups:
        memory = self._memory[(view.namespace, view.name)]
        stale = now - memory.startups_checked >= STARTUP_RECHECK_SECONDS
        if stale or view.ready_replicas != view.replicas or memory.startups.not_ready or memory.marks_seen:
            self._list_pods(view, memory, now, errors)
        return memory.startups

    def _pod_loads(self, namespaces: set[str], now: float, errors: list[str]) -> Mapping[Key, float] | None:
        """In-flight requests per pod, now, in the namespaces of this tick's scale-downs (one query); None when
        unknown (the source cannot say, or the query failed: then pods are marked by node alone where the NodePool
        was read, else none, and the tick says so)."""
        if not isinstance(self.source, PodLoadSource):
            return None
        try:
            return self.source.pod_instant(POD_LOAD_QUERY, sorted(namespaces), now)
        except (PrometheusError, promql.TemplateError) as exc:
            self.metrics.errors.labels("pod_load").inc()
            errors.append(f"in-flight requests per pod unknown, scale-downs mark no pod: {exc}")
            return None

    def _learn_capacity(
        self, cfg: Config, valid: list[tuple[WorkloadView, WorkloadSpec, ForecastProfile]], now: int, errors: list[str]
    ) -> None:
        """Re-estimate the capacity of the Deployments due (never estimated, a day ago, or for another latency
        objective than theirs now: within ``CAPACITY_RETRY_SECONDS`` of the change), annotated or not.

        One fleet query per evidence series (``autoscaler.history.read_capacity_inputs``, the ``capacity``
        command's read) over the last ``CAPACITY_HISTORY_SECONDS`` (at most ``loop.history``); each Deployment
        judged against its own latency objective (``slo-wait``, else its profile's). A failed read is counted
        (``capacity_estimate``) and reported; the last estimates stand and the read is retried in
        ``CAPACITY_RETRY_SECONDS``.
        """
        if not self.learn_capacity:
            return

        def is_due(memory: Memory, wait: float) -> bool:
            age = now - memory.capacity_checked
            changed = memory.capacity_wait is not None and memory.capacity_wait != wait
            return age >= CAPACITY_EVERY_SECONDS or (changed and age >= CAPACITY_RETRY_SECONDS)

        due = [(v, s, p) for v, s, p in valid if s.demand_unit is DemandUnit.REQUESTS  # learned in requests/s only
               and is_due(self._memory[(v.namespace, v.name)], objective(s, p)[0])]
        if not due:
            return
        # Whole namespaces (one fleet query covers a namespace), stalest first, taken until CAPACITY_BATCH Deployments
        # are reached: the evidence of a thousand Deployments at once would hold ~400 MB of series in memory.
        due.sort(key=lambda d: self._memory[(d[0].namespace, d[0].name)].capacity_checked)
        per_namespace: dict[str, int] = {}
        for view, _, _ in due:
            per_namespace[view.namespace] = per_namespace.get(view.namespace, 0) + 1
        namespaces: set[str] = set()
        taken = 0
        for view, _, _ in due:
            if view.namespace in namespaces:
                continue
            if taken >= CAPACITY_BATCH:
                break
            namespaces.add(view.namespace)
            taken += per_namespace[view.namespace]
        due = [d for d in due if d[0].namespace in namespaces]
        step = cfg.loop.step_seconds
        start, end = history_window(now, step, min(CAPACITY_HISTORY_SECONDS, cfg.loop.history_seconds))
        if start >= end:
            return
        try:
            answer = read_capacity_inputs(self.source, cfg.prometheus, namespaces, start, end, step)
        except PrometheusError as exc:
            self.metrics.errors.labels("capacity_estimate").inc()
            text = " ".join(str(exc).split())
            errors.append(f"reading the capacity evidence failed (the last estimates stand; retried in "
                          f"{CAPACITY_RETRY_SECONDS // 60}m): {text}")
            for view, _, _ in due:
                memory = self._memory[(view.namespace, view.name)]
                memory.capacity_checked = now - CAPACITY_EVERY_SECONDS + CAPACITY_RETRY_SECONDS
                memory.capacity_error = text
            return
        for view, spec, profile in due:
            key = (view.namespace, view.name)
            memory = self._memory[key]
            wait = objective(spec, profile)[0]
            inputs = answer.get(key) or CapacityInputs.empty(start, step, (end - start) // step)
            memory.capacity = estimate_capacity(inputs, EvidenceRules(slo_wait_seconds=wait))
            memory.capacity_at = memory.capacity_checked = now
            memory.capacity_error, memory.capacity_wait = None, wait

    def _report_capacity(
        self, valid: list[tuple[WorkloadView, WorkloadSpec, ForecastProfile]], now: float, write: bool,
        errors: list[str],
    ) -> None:
        """For a Deployment with capacity auto: a Warning Event when it is held for want of a learned capacity, a
        Normal one when it has one; once per transition (an Event counts once it landed), not per tick."""
        for view, spec, _ in valid:
            memory = self._memory[(view.namespace, view.name)]
            if spec.capacity_per_replica is not None:
                memory.notices.forget("capacity")
                continue
            learned = self._capacity_of(spec, memory)
            if not write:
                continue
            if learned is not None:
                message = (f"capacity learned: {learned:.4g} req/s per replica, now planned with "
                           f"({self._capacity_reason(memory, spec)})")
                memory.notices.tell("capacity", True, partial(
                    self._event, view, "Normal", "CapacityLearned", message[:1000], now, errors))
            else:
                message = (f"capacity-per-replica is auto and not learned yet: {self._capacity_reason(memory, spec)}; "
                           f"replicas are held at {view.replicas}, never scaled on a guess, until the evidence is "
                           "enough (or annotate capacity-per-replica)")
                memory.notices.tell("capacity", False, partial(
                    self._event, view, "Warning", "CapacityNotLearned", message[:1000], now, errors))
