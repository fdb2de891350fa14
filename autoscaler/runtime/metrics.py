"""The controller's own Prometheus metrics (served on ``/metrics``).

Why a class with its own registry: tests and the fleet benchmark build several controllers in one
process; a private ``CollectorRegistry`` per controller keeps their numbers apart (the default
global registry would raise on duplicate names).

Operators read these to trust the controller before letting it act (advisory mode): forecast vs
actual demand, desired vs actual replicas, what each decision did, how long ticks take, and every
error by kind. A limiter or an outage is loud here, never silent.
"""

from __future__ import annotations

import contextlib

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

WORKLOAD = ("namespace", "deployment")


class ControllerMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.forecast = Gauge(
            "predictive_autoscaler_forecast_requests_per_second",
            "Forecast arrival rate at the horizon (band=mean or pNN).",
            [*WORKLOAD, "band"],
            registry=r,
        )
        self.demand = Gauge(
            "predictive_autoscaler_demand_requests_per_second",
            "Latest observed arrival rate (the last complete bin).",
            WORKLOAD,
            registry=r,
        )
        self.demand_degraded = Gauge(
            "predictive_autoscaler_demand_degraded",
            "1 when the latest demand is the completion rate alone (the Deployment's vLLM queue gauges "
            "vllm:num_requests_waiting/running are absent, so queued requests are not counted), 0 for the full "
            "formula; why is in the Deployment's status (demandSource). Absent while there is no current demand.",
            WORKLOAD,
            registry=r,
        )
        self.desired = Gauge(
            "predictive_autoscaler_desired_replicas", "Replicas the planner wants.", WORKLOAD, registry=r
        )
        self.current = Gauge("predictive_autoscaler_current_replicas", "spec.replicas seen.", WORKLOAD, registry=r)
        self.ready = Gauge("predictive_autoscaler_ready_replicas", "status.readyReplicas seen.", WORKLOAD, registry=r)
        self.lead = Gauge("predictive_autoscaler_lead_seconds", "Cold-start lead time used.", WORKLOAD, registry=r)
        self.warm_pool = Gauge(
            "predictive_autoscaler_warm_pool_replicas", "Spare replicas kept for forecast error.", WORKLOAD, registry=r
        )
        self.decisions = Counter(
            "predictive_autoscaler_decisions_total",
            "Decisions by outcome (up, down, hold, advisory).",
            [*WORKLOAD, "outcome"],
            registry=r,
        )
        self.replicas_overwritten = Counter(
            "predictive_autoscaler_replicas_overwritten_total",
            "Replicas this controller wrote that the next list showed changed by someone else (a GitOps sync of a "
            "manifest that sets replicas, a script, a person).",
            WORKLOAD,
            registry=r,
        )
        self.fallbacks = Counter(
            "predictive_autoscaler_forecast_fallbacks_total",
            "Forecasts served by a fallback model.",
            WORKLOAD,
            registry=r,
        )
        self.errors = Counter(
            "predictive_autoscaler_errors_total",
            "Errors by kind (metrics_unavailable, metrics_query, kube_read, kube_write, invalid_annotation, "
            "forecast, gpu_unavailable, config, tick, alert, invalid_gang, nodepool, pod_load, pod_mark, "
            "tuning, capacity_estimate).",
            ["kind"],
            registry=r,
        )
        self.metrics_up = Gauge(
            "predictive_autoscaler_metrics_source_up",
            "1 when the last Prometheus fetch succeeded, 0 while replicas are held for missing data.",
            registry=r,
        )
        self.leader = Gauge("predictive_autoscaler_is_leader", "1 on the replica that acts.", registry=r)
        self.workloads = Gauge(
            "predictive_autoscaler_workloads",
            "Opted-in Deployments by state (managed, invalid; contended: managed, and another HorizontalPodAutoscaler "
            "scales it too, so it runs as advisory).",
            ["state"],
            registry=r,
        )
        self.deferred_fits = Gauge(
            "predictive_autoscaler_deferred_fits",
            "Forecaster fits due this tick but left for a later one (over the tick's fitting budget).",
            registry=r,
        )
        self.replays_waiting = Gauge(
            "predictive_autoscaler_tuning_replays_waiting",
            "Self-tuning replays due this tick but left for a later one (over the tick's budgets, or no worker free): "
            "how far the fleet's tunings are behind.",
            registry=r,
        )
        self.replays_in_workers = Gauge(
            "predictive_autoscaler_tuning_replays_in_workers",
            "Self-tuning replays handed to the loop.replay_workers processes and not taken back yet.",
            registry=r,
        )
        self.tick_seconds = Histogram(
            "predictive_autoscaler_tick_duration_seconds",
            "Wall time of one control-loop tick.",
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60),
            registry=r,
        )
        self.last_tick = Gauge(
            "predictive_autoscaler_last_tick_timestamp_seconds", "When the last tick finished.", registry=r
        )
        # Cost and GPU capacity (deploy/prometheusrule.yaml alerts on these). scope is "cluster" (team "") or "team".
        self.projected_cost = Gauge(
            "predictive_autoscaler_projected_cost_dollars_per_hour",
            "Peak GPU spend the plan projects within the forecast horizon, by scope (cluster, team).",
            ["scope", "team"],
            registry=r,
        )
        self.cost_ceiling = Gauge(
            "predictive_autoscaler_cost_ceiling_dollars_per_hour",
            "Configured spend ceiling, by scope (cluster, team); absent when there is none.",
            ["scope", "team"],
            registry=r,
        )
        self.ceiling_cuts = Counter(
            "predictive_autoscaler_ceiling_cuts_total",
            "Replicas or nodes a cost ceiling withheld, by team and kind (inference, headroom, ...).",
            ["team", "kind"],
            registry=r,
        )
        self.gang_reserved_gpus = Gauge(
            "predictive_autoscaler_gang_reserved_gpus",
            "GPUs held by training gangs (Kueue Workloads, Volcano PodGroups), counted whole.",
            registry=r,
        )
        self.gang_planned_start = Gauge(
            "predictive_autoscaler_gang_planned_start_timestamp_seconds",
            "When a scheduled training gang is planned to start (placed in the forecast's trough), Unix seconds.",
            ["gang", "team"],
            registry=r,
        )
        self.gang_headroom_blocked = Gauge(
            "predictive_autoscaler_gang_headroom_blocked",
            "1 for a reserved pending training gang the controller holds no nodes for (Kueue cannot admit it now, "
            "or the nodes held for it ran past the time limit without it starting).",
            ["gang", "team"],
            registry=r,
        )
        self.gang_headroom_expired = Counter(
            "predictive_autoscaler_gang_headroom_expired_total",
            "Nodes held ahead for a pending training gang released because it did not start within the time limit.",
            ["team"],
            registry=r,
        )
        self.spare_replicas = Gauge(
            "predictive_autoscaler_spare_replicas",
            "Spare replicas its NodePool lends the workload on GPUs the pool pays for and no plan uses (its last "
            "node's free GPUs and the room its node headroom keeps); included in the desired replicas, given back "
            "when a plan needs them.",
            WORKLOAD,
            registry=r,
        )
        self.gpus_unavailable = Gauge(
            "predictive_autoscaler_gpus_unavailable",
            "GPUs the workload's replicas are waiting for (pods Pending unschedulable for longer than a node start-up "
            "x GPUs per replica).",
            WORKLOAD,
            registry=r,
        )
        self.tuned_quantile = Gauge(
            "predictive_autoscaler_slo_tuned_quantile",
            "The warm_pool_quantile self-tuning chose for the Deployment: the cheapest operating point whose replay "
            "of its own last days met its latency objective, and at the next day's lower quartile (or the safest, when "
            "none did).",
            WORKLOAD,
            registry=r,
        )
        self.tuned_utilisation = Gauge(
            "predictive_autoscaler_slo_tuned_utilisation",
            "The reactive floor's utilisation self-tuning chose with it (1: observed demand sized at 100%; below 1 a "
            "margin over it, like an HPA target).",
            WORKLOAD,
            registry=r,
        )
        self.slo_met = Gauge(
            "predictive_autoscaler_slo_tuning_met",
            "1 when the chosen operating point met the Deployment's latency objective on the replay of its own last "
            "day, 0 when it did not: no operating point did (the safest one runs, and an SLOUnreachable Event says "
            "so), or an HPA point runs that is short of it while another point meets it: the self-check chose it, or "
            "the record is too young for any other (a SelfCheckBelowSLO Event).",
            WORKLOAD,
            registry=r,
        )
        self.replay_attainment = Gauge(
            "predictive_autoscaler_slo_replay_attainment",
            "Share of requests that started within the objective's wait on the replay, at the chosen point (0..1).",
            WORKLOAD,
            registry=r,
        )
        # The self-tuning record (up to four weeks of replayed days): what ran against the HPA's own points, per point.
        self.record_gpu_hours = Gauge(
            "predictive_autoscaler_slo_record_gpu_hours",
            "GPU-hours over the self-tuning record's replayed days (up to four weeks), by point: ran (the points the "
            "controller ran, each day's replayed; on the history replayed before it ran the Deployment, the points "
            "its rule would have run there) and each of the HPA's own points replayed on the same days "
            "(hpa@U+lead: the HPA at utilisation target U that starts early). What the forecast saved against the HPA "
            "a team would otherwise run.",
            [*WORKLOAD, "point"],
            registry=r,
        )
        self.record_attainment = Gauge(
            "predictive_autoscaler_slo_record_attainment",
            "Share of the record's requests that started within the objective's wait (0..1), by point, as "
            "predictive_autoscaler_slo_record_gpu_hours.",
            [*WORKLOAD, "point"],
            registry=r,
        )
        self.beaten_by_hpa = Gauge(
            "predictive_autoscaler_slo_beaten_by_hpa",
            "1 when one of the HPA's own points did strictly better over the record than what ran (no more "
            "GPU-hours, no more late requests, one of them fewer): the self-check then runs it; 0 otherwise.",
            WORKLOAD,
            registry=r,
        )
        # Capacity per replica (capacity-per-replica, autoscaler.domain.learned_capacity): the annotation's, and the
        # one learned from the Deployment's own vLLM history (exported with enough evidence, for comparison too).
        self.capacity = Gauge(
            "predictive_autoscaler_capacity_per_replica",
            "Requests/s one Ready replica serves within its latency objective, by source: annotation (the "
            "capacity-per-replica annotation) or learned (from the Deployment's saturated intervals, once the "
            "evidence is enough). The controller plans with the annotation when there is one, else the learned value.",
            [*WORKLOAD, "source"],
            registry=r,
        )
        self.capacity_unknown = Gauge(
            "predictive_autoscaler_capacity_unknown",
            "1 while a Deployment with capacity-per-replica auto has no learned capacity yet (too little saturation "
            "evidence): its replicas are held, never scaled on a guess; 0 otherwise.",
            WORKLOAD,
            registry=r,
        )
        self.capacity_saturated_bins = Gauge(
            "predictive_autoscaler_capacity_saturated_bins",
            "Evidence of the last capacity estimate: history bins in which the replicas were saturated.",
            WORKLOAD,
            registry=r,
        )
        self.capacity_confidence = Gauge(
            "predictive_autoscaler_capacity_confidence",
            "Confidence of the last capacity estimate, 0..1 (saturated bins, separate episodes, spread).",
            WORKLOAD,
            registry=r,
        )
        self.demand_unit = Gauge(
            "predictive_autoscaler_demand_unit_info",
            "1, labelled with the unit this Deployment's demand, forecast and capacity series are counted in: "
            "requests, or tokens for demand-unit: tokens (whose *_requests_per_second series then carry weighted "
            "tokens/s). Join on it (* on (namespace, deployment) group_left (unit)) to tell them apart.",
            [*WORKLOAD, "unit"],
            registry=r,
        )
        self.scale_down_unmarked = Counter(
            "predictive_autoscaler_scale_down_unmarked_total",
            "Scale-downs applied whose removed pods the controller's pod-deletion-cost marks did not all choose, by "
            "reason: foreign_cost (a pod carries a deletion cost the controller did not set: that order is kept), "
            "no_pod_loads (in-flight requests per pod unknown), unscraped_pods (Ready pods without an in-flight "
            "series: fewer marked than removed), pods_unread (the pods could not be listed), marks_unconfirmed (the "
            "marks were not in place on the read after writing them), rollout (a rollout that is not finishing: the "
            "Deployment controller splits the cut across ReplicaSets).",
            [*WORKLOAD, "reason"],
            registry=r,
        )
        # The per-Deployment metrics and their label names (to remove a Deployment's series by value).
        self._per_workload_metrics: tuple[Gauge | Counter, ...] = (
            self.forecast, self.demand, self.demand_degraded, self.desired, self.current, self.ready, self.lead,
            self.warm_pool, self.decisions, self.fallbacks, self.gpus_unavailable, self.spare_replicas,
            self.tuned_quantile, self.slo_met, self.replay_attainment, self.tuned_utilisation, self.capacity,
            self.capacity_unknown, self.capacity_saturated_bins, self.capacity_confidence, self.demand_unit,
            self.scale_down_unmarked, self.record_gpu_hours, self.record_attainment, self.beaten_by_hpa,
            self.replicas_overwritten,
        )
        self._per_workload: dict[int, tuple[str, ...]] = {
            id(self.forecast): (*WORKLOAD, "band"),
            id(self.decisions): (*WORKLOAD, "outcome"),
            id(self.capacity): (*WORKLOAD, "source"),
            id(self.demand_unit): (*WORKLOAD, "unit"),
            id(self.scale_down_unmarked): (*WORKLOAD, "reason"),
            id(self.record_gpu_hours): (*WORKLOAD, "point"),
            id(self.record_attainment): (*WORKLOAD, "point"),
            **{id(m): WORKLOAD for m in (self.demand, self.demand_degraded, self.desired, self.current, self.ready,
                                         self.lead, self.warm_pool, self.fallbacks, self.gpus_unavailable,
                                         self.spare_replicas, self.tuned_quantile, self.slo_met, self.replay_attainment,
                                         self.tuned_utilisation, self.capacity_unknown, self.capacity_saturated_bins,
                                         self.capacity_confidence, self.beaten_by_hpa, self.replicas_overwritten)},
        }

    def forget_series(self, metric: Gauge | Counter, namespace: str, deployment: str) -> None:
        """Remove every series of ``metric`` (one of the per-Deployment ones) labelled with this Deployment."""
        names = self._per_workload[id(metric)]
        present = {
            tuple(sample.labels[n] for n in names)
            for family in metric.collect()
            for sample in family.samples
            if sample.labels.get("namespace") == namespace and sample.labels.get("deployment") == deployment
        }
        for values in present:
            with contextlib.suppress(KeyError):
                metric.remove(*values)

    def forget(self, namespace: str, deployment: str) -> None:
        """Drop every series of a Deployment that is gone or opted out (no stale gauges or counters)."""
        for metric in self._per_workload_metrics:
            self.forget_series(metric, namespace, deployment)
