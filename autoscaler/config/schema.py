"""The operator's configuration as values: what every key means, its default, and the frozen dataclasses the rest of
the program reads (``Config`` and its sections).

Why it exists: the controller runs for weeks and its settings (forecast profiles, cold-start priors, PromQL) are
edited by people, usually through a ConfigMap. Every key is optional and defaults to the packaged
``default-config.yaml`` (built into the dataclass defaults below; a test keeps the two equal), so an operator's
file holds only changes; named profiles inherit the keys they leave out from ``profiles.default``. The ``pricing``
and ``ceilings`` sections are the domain's own values (``autoscaler.domain.cost.PriceTable`` and ``Ceilings``), so
the controller and the simulator price plans with exactly what was validated.

The configuration is three pieces: this schema, ``autoscaler.config.parser`` (YAML text to these values, every
mistake reported with its key path) and ``autoscaler.config.store`` (the file re-read while running).

Where the defaults live (docs/ARCHITECTURE.md, "Default configuration"): the file is shipped inside the package
(``autoscaler/data/default-config.yaml``) so an installed controller finds it; ``config/default.yaml`` is a symlink
to it, one source for both.
"""

from __future__ import annotations

import difflib
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal

from autoscaler import promql
from autoscaler.domain.cost import (
    Ceilings,
    InstanceType,
    PriceTable,
)
from autoscaler.domain.demand import TokenWeights
from autoscaler.domain.types import ScalingPolicy
from autoscaler.errors import UserError

log = logging.getLogger("autoscaler.config")


DEFAULT_CONFIG_PATH = Path(str(resources.files("autoscaler") / "data" / "default-config.yaml"))
"""The packaged defaults (``config/default.yaml`` in the source tree links here)."""

CONFIGMAP_KEY = "config.yaml"
"""The file read when the configured path is a directory (a mounted ConfigMap)."""

# A local copy, not an import of models.registry: loading a config must not import statsmodels and
# Prophet (the registry imports the model modules). tests/test_config.py keeps the two equal.
MODEL_NAMES: tuple[str, ...] = ("default", "persistence", "seasonal_naive", "holt_winters", "prophet")

PROMQL_PLACEHOLDERS: frozenset[str] = frozenset(
    {promql.NAMESPACE_PLACEHOLDER, promql.FLEET_PLACEHOLDER, "pods", *promql.DURATION_PLACEHOLDERS}
)
"""Placeholders a configured PromQL template may use (those ``autoscaler.promql.render`` fills)."""
HTTP_URL = re.compile(r"^https?://[^/\s:]+(:\d+)?(/\S*)?$")
LABEL_VALUE = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
DNS_SUBDOMAIN = re.compile(r"^(?=.{1,253}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")

WarmPool = int | Literal["auto"]
HeadroomSetting = Literal["auto", "capacitybuffer", "placeholder", "off"]
HEADROOM_SETTINGS: tuple[str, ...] = ("auto", "capacitybuffer", "placeholder", "off")


class ConfigError(UserError, ValueError):
    """A configuration that cannot be used. ``errors`` holds one ``key.path: problem`` line per mistake."""

    def __init__(self, source: str, errors: list[str] | tuple[str, ...]) -> None:
        self.source = source
        self.errors = tuple(_cut(e) for e in errors)
        detail = self.errors[0] if len(self.errors) == 1 else f"{len(self.errors)} errors: " + "; ".join(self.errors)
        super().__init__(f"{source}: {detail}" if source else detail)


ERROR_CHARS = 300  # one problem as a person reads it: a value quoted in it is cut, never the whole of a large one


def _cut(message: str, limit: int = ERROR_CHARS) -> str:
    """``message`` cut to ``limit`` characters (a quoted value can be anything a file holds)."""
    return message if len(message) <= limit else message[: limit - 25] + f"... ({len(message):,} characters)"


def format_duration(seconds: int) -> str:
    """The shortest exact spelling of ``seconds`` in the config's duration syntax (``parse_duration`` inverts it)."""
    for unit, size in (("w", 604_800), ("d", 86_400), ("h", 3_600), ("m", 60)):
        if seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def did_you_mean(word: str, candidates: Mapping[str, Any] | tuple[str, ...] | frozenset[str]) -> str:
    close = difflib.get_close_matches(word, list(candidates), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


# ---------------------------------------------------------------------------------------------- values


@dataclass(frozen=True)
class LoopConfig:
    """The control loop's cadence and how much history each tick fetches."""

    interval_seconds: int = 30
    history_seconds: int = 14 * 86_400
    step_seconds: int = 60
    # Worker processes the self-tuning replays run in, in the background (0: in the loop's own process, one after the
    # other). Why: a fleet annotated at once is tuned one Deployment a tick (``autoscaler.runtime.replay_pool``).
    replay_workers: int = 0


@dataclass(frozen=True)
class ForecastProfile:
    """How a workload is forecast and sized; workloads select one by name."""

    name: str = "default"
    model: str = "default"
    horizon_seconds: int = 15 * 60
    history_seconds: int = 14 * 86_400
    refit_seconds: int = 86_400
    quantile: int = 90
    warm_pool: WarmPool = "auto"
    # The band the automatic warm pool (and the surprise floor) covers up to. Why a key: with an automatic pool
    # the replicas + pool cover this band, so it, not ``quantile``, sets how much is held; a fixed pool (or 0)
    # replaces it and the surprise floor then uses ``quantile``'s own band (see ``scaling_policy``).
    warm_pool_quantile: int = 95
    scale_down_stabilization_seconds: int = 10 * 60
    look_ahead_seconds: int = 5 * 60
    # The latency objective a Deployment on this profile gets unless its annotations state its own: a request
    # should start within ``slo_wait_seconds``, for ``slo_attainment`` of requests (a fraction in (0, 1)).
    slo_wait_seconds: int = 2
    slo_attainment: float = 0.99
    # Self-tuning (autoscaler.simulation.tuning): each day the controller replays a Deployment's own recent
    # history at these ``warm_pool_quantile`` values and runs the cheapest that meets its objective with a
    # margin. ``self_tune: false`` pins ``warm_pool_quantile`` (the operator's cost knob, still available).
    self_tune: bool = True
    tune_quantiles: tuple[int, ...] = (80, 90, 95, 99)
    # The reactive floor's utilisation (1: observed demand at 100%); self-tuning also tries the lowest tune quantile
    # with each of ``tune_utilisations`` (a margin over observed demand, which bursty traffic needs).
    reactive_utilisation: float = 1.0
    tune_utilisations: tuple[float, ...] = (0.85, 0.75, 0.65)
    # A Deployment sized on tokens/s (annotation demand-unit: tokens): the weights of prompt (input) and generated
    # (output) tokens in its demand, ``autoscaler.domain.demand``.
    token_weights: TokenWeights = field(default_factory=TokenWeights)

    def scaling_policy(
        self, capacity_per_replica: float, min_replicas: int, max_replicas: int, warm_pool: int | None = None
    ) -> ScalingPolicy:
        """The planner's policy for a workload on this profile; ``warm_pool`` (the workload's own setting, e.g.
        its annotation) overrides the profile's. One mapping for the controller and ``simulate``, so that what an
        operator tunes in the simulator is what the controller runs."""
        warm = warm_pool if warm_pool is not None else (None if self.warm_pool == "auto" else int(self.warm_pool))
        return ScalingPolicy(
            capacity_per_replica=capacity_per_replica,
            min_replicas=min_replicas,
            max_replicas=max_replicas,
            level=self.quantile,
            warm_pool=warm,
            warm_pool_level=self.warm_pool_quantile if warm is None else self.quantile,
            lookahead_window_seconds=self.look_ahead_seconds,
            scale_down_stabilization_seconds=self.scale_down_stabilization_seconds,
            reactive_utilisation=self.reactive_utilisation,
        )


@dataclass(frozen=True)
class ColdStartConfig:
    """Start-up priors (seconds) used until a workload's own start-ups have been observed."""

    pod_startup_seconds: int = 180
    node_startup_seconds: int = 240
    percentile: int = 90
    min_samples: int = 5


def _default_queries() -> Mapping[str, str]:
    return MappingProxyType(dict(promql.DEFAULT_QUERIES))  # the built-in templates live with the renderer


@dataclass(frozen=True)
class PrometheusConfig:
    """Where metrics come from and the named PromQL templates the controller runs."""

    url: str = "http://prometheus-operated.monitoring.svc:9090"
    bearer_token_file: str | None = None
    ca_file: str | None = None
    timeout_seconds: int = 30
    retries: int = 3
    arrival_rate_query: str = "arrival_rate"
    queries: Mapping[str, str] = field(default_factory=_default_queries)

    @property
    def arrival_rate_template(self) -> str:
        return self.queries[self.arrival_rate_query]


@dataclass(frozen=True)
class LeaderElectionConfig:
    """The Lease that makes one replica of the controller the only one acting."""

    lease_name: str = "predictive-autoscaler"
    lease_namespace: str = "predictive-autoscaler"
    lease_duration_seconds: int = 15


@dataclass(frozen=True)
class BasicAuthConfig:
    """HTTP basic auth for Alertmanager; the password stays in its file (a mounted Secret), read per push."""

    username: str
    password_file: str


@dataclass(frozen=True)
class AlertsConfig:
    """Where the controller pushes its cost and capacity alerts (``alertmanager_url`` None: nowhere).

    ``bearer_token_file`` and ``basic_auth`` are the two ways to authenticate (at most one); ``ca_file`` is a
    CA bundle for an https Alertmanager with a private certificate; ``timeout_seconds`` None: the sink's own.
    """

    alertmanager_url: str | None = None
    cluster: str = "default"
    expire_after_seconds: int = 120
    bearer_token_file: str | None = None
    ca_file: str | None = None
    basic_auth: BasicAuthConfig | None = None
    timeout_seconds: int | None = None


@dataclass(frozen=True)
class KarpenterConfig:
    """GPU NodePools: whether to read and manage them, how to hold headroom, where placeholder pods live."""

    enabled: bool = True
    headroom: HeadroomSetting = "auto"
    namespace: str = "predictive-autoscaler"
    # lend a NodePool's paid, idle GPUs (its last node's free ones, its headroom's room) to spare replicas
    # (``engine.spare``)
    spare_replicas: bool = True
    # the quantile of a pool's pooled forecast error its headroom covers; None: the strictest latency objective of the
    # pool's Deployments, at most p99 (``engine.headroom.objective_quantile``). A cost knob: lower holds fewer nodes.
    headroom_quantile: float | None = None


DEFAULT_INSTANCE_TYPES: Mapping[str, InstanceType] = MappingProxyType({
    t.name: t
    for t in (
        InstanceType("g5.xlarge", 1, 1.006),
        InstanceType("g5.12xlarge", 4, 5.672),
        InstanceType("g5.48xlarge", 8, 16.288),
        InstanceType("g6.xlarge", 1, 0.8048),
        InstanceType("g6.12xlarge", 4, 4.6016),
        InstanceType("g6.48xlarge", 8, 13.3504),
        InstanceType("p4d.24xlarge", 8, 32.7726),
        InstanceType("p5.48xlarge", 8, 98.32),
    )
})
"""The packaged instance-type table (GPUs per node, on-demand $/h); ``pricing.instance_types`` adds to it."""


def default_pricing() -> PriceTable:
    return PriceTable(instance_types=DEFAULT_INSTANCE_TYPES)


def _default_profiles() -> Mapping[str, ForecastProfile]:
    return MappingProxyType({"default": ForecastProfile()})


@dataclass(frozen=True)
class Config:
    """The whole validated configuration. ``warnings`` are legal but doubtful settings, worth a log line."""

    loop: LoopConfig = field(default_factory=LoopConfig)
    profiles: Mapping[str, ForecastProfile] = field(default_factory=_default_profiles)
    cold_start: ColdStartConfig = field(default_factory=ColdStartConfig)
    prometheus: PrometheusConfig = field(default_factory=PrometheusConfig)
    namespaces: tuple[str, ...] = ()
    leader_election: LeaderElectionConfig = field(default_factory=LeaderElectionConfig)
    pricing: PriceTable = field(default_factory=default_pricing)
    ceilings: Ceilings = field(default_factory=Ceilings)
    alerts: AlertsConfig = field(default_factory=AlertsConfig)
    karpenter: KarpenterConfig = field(default_factory=KarpenterConfig)
    warnings: tuple[str, ...] = field(default=(), compare=False)

    def profile(self, name: str) -> ForecastProfile:
        """The profile called ``name``; ``ConfigError`` naming the known ones when there is none."""
        try:
            return self.profiles[name]
        except KeyError:
            known = ", ".join(sorted(self.profiles))
            raise ConfigError("", [f"unknown forecast profile {name!r}{did_you_mean(name, self.profiles)}; "
                                   f"defined: {known}"]) from None

    def allows_namespace(self, namespace: str) -> bool:
        """Whether the controller may act in ``namespace`` (an empty list allows all)."""
        return not self.namespaces or namespace in self.namespaces

    def to_dict(self) -> dict[str, Any]:
        """The configuration as YAML-ready plain data in the file's own spelling (``load`` inverts it)."""
        return {
            "loop": {
                "interval": format_duration(self.loop.interval_seconds),
                "history": format_duration(self.loop.history_seconds),
                "step": format_duration(self.loop.step_seconds),
                "replay_workers": self.loop.replay_workers,
            },
            "profiles": {
                name: {
                    "model": p.model,
                    "horizon": format_duration(p.horizon_seconds),
                    "history": format_duration(p.history_seconds),
                    "refit": format_duration(p.refit_seconds),
                    "quantile": p.quantile,
                    "warm_pool": p.warm_pool,
                    "warm_pool_quantile": p.warm_pool_quantile,
                    "scale_down_stabilization": format_duration(p.scale_down_stabilization_seconds),
                    "look_ahead": format_duration(p.look_ahead_seconds),
                    "slo_wait": format_duration(p.slo_wait_seconds),
                    "slo_attainment": round(p.slo_attainment * 100, 6),
                    "self_tune": p.self_tune,
                    "tune_quantiles": list(p.tune_quantiles),
                    "reactive_utilisation": p.reactive_utilisation,
                    "tune_utilisations": list(p.tune_utilisations),
                    "token_weights": {"input": p.token_weights.input, "output": p.token_weights.output},
                }
                for name, p in self.profiles.items()
            },
            "cold_start": {
                "pod_startup": format_duration(self.cold_start.pod_startup_seconds),
                "node_startup": format_duration(self.cold_start.node_startup_seconds),
                "percentile": self.cold_start.percentile,
                "min_samples": self.cold_start.min_samples,
            },
            "prometheus": {
                "url": self.prometheus.url,
                "bearer_token_file": self.prometheus.bearer_token_file,
                "ca_file": self.prometheus.ca_file,
                "timeout": format_duration(self.prometheus.timeout_seconds),
                "retries": self.prometheus.retries,
                "arrival_rate_query": self.prometheus.arrival_rate_query,
                "queries": dict(self.prometheus.queries),
            },
            "namespaces": list(self.namespaces),
            "leader_election": {
                "lease_name": self.leader_election.lease_name,
                "lease_namespace": self.leader_election.lease_namespace,
                "lease_duration": format_duration(self.leader_election.lease_duration_seconds),
            },
            "pricing": {
                "default_gpu_hour": self.pricing.default_gpu_hour,
                "capacity_type": self.pricing.capacity_type,
                "instance_types": {
                    t.name: {"gpus": t.gpus, "on_demand": t.on_demand, "spot": t.spot}
                    for t in self.pricing.instance_types.values()
                },
                "gpu_types": {
                    g.name: {"on_demand": g.on_demand, "spot": g.spot} for g in self.pricing.gpu_types.values()
                },
                "nodepools": {
                    name: {k: v for k, v in (("instance_type", n.instance_type), ("gpus_per_node", n.gpus_per_node),
                                             ("capacity_type", n.capacity_type), ("gpu_hour", n.gpu_hour))
                           if v is not None}
                    for name, n in self.pricing.nodepools.items()
                },
            },
            "ceilings": {
                "cluster": self.ceilings.cluster,
                "teams": dict(self.ceilings.teams),
                "keep_order": [str(k) for k in self.ceilings.keep_order],
            },
            "alerts": {
                "alertmanager_url": self.alerts.alertmanager_url,
                "cluster": self.alerts.cluster,
                "expire_after": format_duration(self.alerts.expire_after_seconds),
                "bearer_token_file": self.alerts.bearer_token_file,
                "ca_file": self.alerts.ca_file,
                "basic_auth": None if self.alerts.basic_auth is None else {
                    "username": self.alerts.basic_auth.username,
                    "password_file": self.alerts.basic_auth.password_file,
                },
                "timeout": (None if self.alerts.timeout_seconds is None
                            else format_duration(self.alerts.timeout_seconds)),
            },
            "karpenter": {
                "enabled": self.karpenter.enabled,
                "headroom": self.karpenter.headroom,
                "namespace": self.karpenter.namespace,
                "spare_replicas": self.karpenter.spare_replicas,
                "headroom_quantile": self.karpenter.headroom_quantile,
            },
        }
