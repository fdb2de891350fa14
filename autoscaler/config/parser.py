"""The operator's YAML, validated into ``autoscaler.config.schema`` values: every mistake reported with its key path.

Why it exists: a silently ignored typo is a setting that never took effect. So every mistake is reported with the
key path that holds it (``profiles.default.horizon: invalid duration 'soon'``), unknown keys included (with a "did
you mean" for near misses), values are cut to what a person reads, YAML aliases that expand past a bound are
refused before they are built, and ``pricing.instance_types`` is *added* to the packaged instance-type table (like
PromQL queries), so an operator lists only their own or discounted types.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Mapping
from dataclasses import fields
from pathlib import Path
from types import MappingProxyType
from typing import Any

import yaml

from autoscaler import promql
from autoscaler.config.schema import (
    CONFIGMAP_KEY,
    DEFAULT_CONFIG_PATH,
    DNS_LABEL,
    DNS_SUBDOMAIN,
    HEADROOM_SETTINGS,
    HTTP_URL,
    LABEL_VALUE,
    MODEL_NAMES,
    PROMQL_PLACEHOLDERS,
    AlertsConfig,
    BasicAuthConfig,
    ColdStartConfig,
    Config,
    ConfigError,
    ForecastProfile,
    KarpenterConfig,
    LeaderElectionConfig,
    LoopConfig,
    PrometheusConfig,
    WarmPool,
    default_pricing,
    did_you_mean,
    format_duration,
)
from autoscaler.domain.cost import (
    DEFAULT_KEEP_ORDER,
    Ceilings,
    GpuType,
    InstanceType,
    KeepClass,
    NodePoolPricing,
    PriceTable,
)
from autoscaler.domain.demand import TokenWeights
from autoscaler.traces import parse_duration

log = logging.getLogger("autoscaler.config")


# ---------------------------------------------------------------------------------------------- parsing


class _Parser:
    """Walks the YAML data once, collecting every error with its key path instead of stopping at the first."""

    def __init__(self) -> None:
        self.errors: list[str] = []
        self.warnings: list[str] = []

    def error(self, path: str, message: str) -> None:
        self.errors.append(f"{path}: {message}")

    def section(self, data: Mapping[str, Any], key: str, allowed: tuple[str, ...], path: str = "") -> dict[str, Any]:
        """``data[key]`` as a mapping (empty when absent), with unknown keys reported."""
        where = f"{path}{key}"
        raw = data.get(key)
        if raw is None:
            return {}
        if not isinstance(raw, dict):
            self.error(where, f"expected a mapping, got {_describe(raw)}")
            return {}
        self.unknown_keys(raw, allowed, where)
        return raw

    def unknown_keys(self, raw: Mapping[Any, Any], allowed: tuple[str, ...], path: str) -> None:
        for key in raw:
            if key not in allowed:
                prefix = f"{path}." if path else ""
                self.error(f"{prefix}{key}", f"unknown key{did_you_mean(str(key), allowed)}; "
                                             f"allowed: {', '.join(allowed)}")

    def duration(self, raw: Mapping[str, Any], key: str, path: str, default: int) -> int:
        if key not in raw:
            return default
        value = raw[key]
        where = f"{path}.{key}"
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            self.error(where, f"invalid duration {value!r} (use e.g. 90s, 15m, 2h, 1d)")
            return default
        try:
            return parse_duration(str(value))
        except ValueError as exc:
            self.error(where, str(exc))
            return default

    def integer(self, raw: Mapping[str, Any], key: str, path: str, default: int, lo: int, hi: int | None) -> int:
        if key not in raw:
            return default
        value = raw[key]
        where = f"{path}.{key}"
        span = f"between {lo} and {hi}" if hi is not None else f">= {lo}"
        if isinstance(value, bool) or not isinstance(value, int):
            self.error(where, f"expected an integer {span}, got {_describe(value)}")
            return default
        if value < lo or (hi is not None and value > hi):
            self.error(where, f"must be {span}, got {value}")
            return default
        return value

    def string(self, raw: Mapping[str, Any], key: str, path: str, default: str) -> str:
        if key not in raw:
            return default
        value = raw[key]
        if not isinstance(value, str) or not value.strip():
            self.error(f"{path}.{key}", f"expected a non-empty string, got {_describe(value)}")
            return default
        return value

    def optional_path(self, raw: Mapping[str, Any], key: str, path: str) -> str | None:
        if raw.get(key) is None:
            return None
        value = raw[key]
        if not isinstance(value, str) or not value.strip():
            self.error(f"{path}.{key}", f"expected a file path or null, got {_describe(value)}")
            return None
        return value

    def name(self, raw: Mapping[str, Any], key: str, path: str, default: str, pattern: re.Pattern[str]) -> str:
        value = self.string(raw, key, path, default)
        if value != default and not pattern.match(value):
            self.error(f"{path}.{key}", f"{value!r} is not a valid Kubernetes name (lower-case letters, digits, '-')")
            return default
        return value


def _describe(value: object) -> str:
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return f"boolean {str(value).lower()}"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return f"{type(value).__name__} {value!r}"


_LOOP_KEYS = ("interval", "history", "step", "replay_workers")
MAX_REPLAY_WORKERS = 64  # more is a typo: each worker is a process with the forecaster's libraries loaded
_PROFILE_KEYS = (
    "model", "horizon", "history", "refit", "quantile", "warm_pool", "warm_pool_quantile", "scale_down_stabilization",
    "look_ahead", "slo_wait", "slo_attainment", "self_tune", "tune_quantiles", "reactive_utilisation",
    "tune_utilisations", "token_weights",
)
_COLD_START_KEYS = ("pod_startup", "node_startup", "percentile", "min_samples")
_PROMETHEUS_KEYS = ("url", "bearer_token_file", "ca_file", "timeout", "retries", "arrival_rate_query", "queries")
_LEADER_KEYS = ("lease_name", "lease_namespace", "lease_duration")
_PRICING_KEYS = ("default_gpu_hour", "capacity_type", "instance_types", "gpu_types", "nodepools")
_INSTANCE_KEYS = ("gpus", "on_demand", "spot")
_GPU_TYPE_KEYS = ("on_demand", "spot")
_NODEPOOL_PRICING_KEYS = ("instance_type", "gpus_per_node", "capacity_type", "gpu_hour")
_CEILING_KEYS = ("cluster", "teams", "keep_order")
_ALERTS_KEYS = ("alertmanager_url", "cluster", "expire_after", "bearer_token_file", "ca_file", "basic_auth", "timeout")
_BASIC_AUTH_KEYS = ("username", "password_file")
_KARPENTER_KEYS = ("enabled", "headroom", "namespace", "spare_replicas", "headroom_quantile")
_TOP_KEYS = ("loop", "profiles", "cold_start", "prometheus", "namespaces", "leader_election", "pricing", "ceilings",
             "alerts", "karpenter")
_CAPACITY_TYPES = ("on-demand", "spot")
_TEAM = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")


def _parse_loop(p: _Parser, data: Mapping[str, Any]) -> LoopConfig:
    raw = p.section(data, "loop", _LOOP_KEYS)
    d = LoopConfig()
    return LoopConfig(
        interval_seconds=p.duration(raw, "interval", "loop", d.interval_seconds),
        history_seconds=p.duration(raw, "history", "loop", d.history_seconds),
        step_seconds=p.duration(raw, "step", "loop", d.step_seconds),
        replay_workers=p.integer(raw, "replay_workers", "loop", d.replay_workers, 0, MAX_REPLAY_WORKERS),
    )


def _parse_profile(p: _Parser, name: str, raw: Mapping[str, Any], base: ForecastProfile) -> ForecastProfile:
    path = f"profiles.{name}"
    model = p.string(raw, "model", path, base.model)
    if model not in MODEL_NAMES:
        p.error(f"{path}.model", f"unknown model {model!r}{did_you_mean(model, MODEL_NAMES)}; "
                                 f"choose one of {', '.join(MODEL_NAMES)}")
        model = base.model
    warm_pool: WarmPool = base.warm_pool
    if "warm_pool" in raw:
        value = raw["warm_pool"]
        if value == "auto" or (isinstance(value, int) and not isinstance(value, bool) and value >= 0):
            warm_pool = value
        else:
            p.error(f"{path}.warm_pool", f"expected \"auto\" or an integer >= 0, got {_describe(value)}")
    quantile = p.integer(raw, "quantile", path, base.quantile, 1, 99)
    warm_pool_quantile = p.integer(raw, "warm_pool_quantile", path, max(base.warm_pool_quantile, quantile), 1, 99)
    if warm_pool_quantile < quantile:
        p.error(f"{path}.warm_pool_quantile", f"{warm_pool_quantile} is below quantile {quantile}: the warm pool "
                                              "covers the tail above the replicas' band, so it must be >= quantile")
        warm_pool_quantile = quantile
    return ForecastProfile(
        name=name,
        model=model,
        horizon_seconds=p.duration(raw, "horizon", path, base.horizon_seconds),
        history_seconds=p.duration(raw, "history", path, base.history_seconds),
        refit_seconds=p.duration(raw, "refit", path, base.refit_seconds),
        quantile=quantile,
        warm_pool=warm_pool,
        warm_pool_quantile=warm_pool_quantile,
        scale_down_stabilization_seconds=p.duration(
            raw, "scale_down_stabilization", path, base.scale_down_stabilization_seconds
        ),
        look_ahead_seconds=p.duration(raw, "look_ahead", path, base.look_ahead_seconds),
        **_parse_slo(p, raw, path, base),
    )


def _parse_slo(p: _Parser, raw: Mapping[str, Any], path: str, base: ForecastProfile) -> dict[str, Any]:
    """A profile's latency objective and self-tuning keys (``slo_wait``, ``slo_attainment`` as a percentage,
    ``self_tune``, ``tune_quantiles``, ``reactive_utilisation``, ``tune_utilisations``)."""
    out: dict[str, Any] = {}
    if "slo_wait" in raw:
        out["slo_wait_seconds"] = p.duration(raw, "slo_wait", path, base.slo_wait_seconds)
    if "slo_attainment" in raw:
        value = raw["slo_attainment"]
        if isinstance(value, bool) or not isinstance(value, int | float) or not 1 <= value < 100:
            hint = f" (did you mean {value * 100:g}?)" if isinstance(value, float) and 0 < value < 1 else ""
            p.error(f"{path}.slo_attainment", f"expected a percentage in [1, 100), e.g. 99 or 99.9, got "
                                              f"{_describe(value)}{hint}")
        else:
            out["slo_attainment"] = float(value) / 100
    if "self_tune" in raw:
        if isinstance(raw["self_tune"], bool):
            out["self_tune"] = raw["self_tune"]
        else:
            p.error(f"{path}.self_tune", f"expected true or false, got {_describe(raw['self_tune'])}")
    if "tune_quantiles" in raw:
        values = raw["tune_quantiles"]
        if (not isinstance(values, list) or not values
                or any(isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= 99 for v in values)):
            p.error(f"{path}.tune_quantiles", f"expected a non-empty list of integers between 1 and 99, got "
                                              f"{_describe(values)}")
        else:
            out["tune_quantiles"] = tuple(sorted(set(values)))
    if "reactive_utilisation" in raw:
        value = raw["reactive_utilisation"]
        if _utilisation(value):
            out["reactive_utilisation"] = float(value)
        else:
            p.error(f"{path}.reactive_utilisation", f"expected a utilisation in (0, 1], e.g. 0.8, got "
                                                    f"{_describe(value)}")
    if "tune_utilisations" in raw:
        values = raw["tune_utilisations"]
        if not isinstance(values, list) or not all(_utilisation(v) for v in values):
            p.error(f"{path}.tune_utilisations", f"expected a list of utilisations in (0, 1], e.g. [0.85, 0.7], got "
                                                 f"{_describe(values)}")
        else:
            out["tune_utilisations"] = tuple(sorted({float(v) for v in values}, reverse=True))
    if "token_weights" in raw:
        value = raw["token_weights"]
        keys = ("input", "output")
        if not isinstance(value, dict) or set(value) - set(keys) or not value:
            p.error(f"{path}.token_weights", f"expected a mapping with input and/or output, e.g. {{input: 1, output: "
                                             f"1}}, got {_describe(value)}")
        else:
            try:
                out["token_weights"] = TokenWeights(*(value.get(k, getattr(base.token_weights, k)) for k in keys))
            except ValueError as exc:
                p.error(f"{path}.token_weights", str(exc))
    return out


def _utilisation(value: object) -> bool:
    return (not isinstance(value, bool) and isinstance(value, int | float) and math.isfinite(value)
            and 0 < value <= 1)


def _parse_profiles(p: _Parser, data: Mapping[str, Any]) -> dict[str, ForecastProfile]:
    raw = data.get("profiles")
    if raw is None:
        return {"default": ForecastProfile()}
    if not isinstance(raw, dict):
        p.error("profiles", f"expected a mapping of profile names to settings, got {_describe(raw)}")
        return {"default": ForecastProfile()}
    if "default" not in raw:
        p.error("profiles", f"a 'default' profile is required (found: {', '.join(map(str, raw)) or 'none'})")
    out: dict[str, ForecastProfile] = {}
    # "default" first: the others inherit from it.
    for name in sorted(raw, key=lambda n: (n != "default", str(n))):
        body = raw[name]
        if not isinstance(name, str) or not DNS_LABEL.match(name):
            p.error(f"profiles.{name}", "profile names must be lower-case letters, digits and '-' "
                                        "(they are used in annotations)")
            continue
        if body is None:
            body = {}
        if not isinstance(body, dict):
            p.error(f"profiles.{name}", f"expected a mapping, got {_describe(body)}")
            continue
        p.unknown_keys(body, _PROFILE_KEYS, f"profiles.{name}")
        base = out.get("default", ForecastProfile())
        out[name] = _parse_profile(p, name, body, base)
    out.setdefault("default", ForecastProfile())
    return out


def _parse_cold_start(p: _Parser, data: Mapping[str, Any]) -> ColdStartConfig:
    raw = p.section(data, "cold_start", _COLD_START_KEYS)
    d = ColdStartConfig()
    return ColdStartConfig(
        pod_startup_seconds=p.duration(raw, "pod_startup", "cold_start", d.pod_startup_seconds),
        node_startup_seconds=p.duration(raw, "node_startup", "cold_start", d.node_startup_seconds),
        percentile=p.integer(raw, "percentile", "cold_start", d.percentile, 1, 100),
        min_samples=p.integer(raw, "min_samples", "cold_start", d.min_samples, 1, None),
    )


def check_promql_template(template: str) -> str | None:
    """Why ``template`` is not a usable PromQL template, or ``None`` when it is.

    The template is rendered by ``autoscaler.promql.render`` with harmless values for each of its
    placeholders, so every rule the controller will apply at query time (namespace restriction,
    label placeholders inside quotes, durations outside them, unknown placeholders) fails here, at
    load time, with the key path, instead of on every tick.
    """
    if not template.strip():
        return "empty query"
    names = promql.placeholders(template)
    unknown = [n for n in names if n not in PROMQL_PLACEHOLDERS]
    if unknown:
        hint = did_you_mean(unknown[0], PROMQL_PLACEHOLDERS)
        return (f"unknown placeholder(s) {', '.join('{' + u + '}' for u in unknown)}{hint}; "
                f"allowed: {', '.join('{' + a + '}' for a in sorted(PROMQL_PLACEHOLDERS))}")
    samples: dict[str, str] = {
        promql.NAMESPACE_PLACEHOLDER: "default",
        promql.FLEET_PLACEHOLDER: promql.namespace_regex(["default"]),
        "pods": promql.deployment_pods_regex("example"),
        **{d: "5m" for d in promql.DURATION_PLACEHOLDERS},
    }
    try:
        promql.render(template, **{n: samples[n] for n in names})
    except promql.TemplateError as exc:
        return str(exc)
    return None


def _parse_prometheus(p: _Parser, data: Mapping[str, Any]) -> PrometheusConfig:
    raw = p.section(data, "prometheus", _PROMETHEUS_KEYS)
    d = PrometheusConfig()
    url = p.string(raw, "url", "prometheus", d.url)
    if not re.match(r"^https?://[^/\s:]+(:\d+)?(/\S*)?$", url):
        p.error("prometheus.url", f"{url!r} is not an http:// or https:// URL")
        url = d.url
    queries = dict(d.queries)
    raw_queries = raw.get("queries")
    if raw_queries is not None and not isinstance(raw_queries, dict):
        p.error("prometheus.queries", f"expected a mapping of query names to PromQL, got {_describe(raw_queries)}")
    elif raw_queries:
        for qname, template in raw_queries.items():
            where = f"prometheus.queries.{qname}"
            if not isinstance(template, str):
                p.error(where, f"expected a PromQL string, got {_describe(template)}")
                continue
            problem = check_promql_template(template)
            if problem:
                p.error(where, problem)
                continue
            queries[str(qname)] = template.strip()
    arrival = p.string(raw, "arrival_rate_query", "prometheus", d.arrival_rate_query)
    if arrival not in queries:
        p.error("prometheus.arrival_rate_query", f"no query named {arrival!r} under prometheus.queries"
                                                 f"{did_you_mean(arrival, queries)}")
        arrival = d.arrival_rate_query
    return PrometheusConfig(
        url=url,
        bearer_token_file=p.optional_path(raw, "bearer_token_file", "prometheus"),
        ca_file=p.optional_path(raw, "ca_file", "prometheus"),
        timeout_seconds=p.duration(raw, "timeout", "prometheus", d.timeout_seconds),
        retries=p.integer(raw, "retries", "prometheus", d.retries, 0, 20),
        arrival_rate_query=arrival,
        queries=MappingProxyType(queries),
    )


def _parse_namespaces(p: _Parser, data: Mapping[str, Any]) -> tuple[str, ...]:
    raw = data.get("namespaces")
    if raw is None:
        return ()
    if not isinstance(raw, list):
        p.error("namespaces", f"expected a list of namespace names, got {_describe(raw)}")
        return ()
    out: list[str] = []
    for i, ns in enumerate(raw):
        if not isinstance(ns, str) or not DNS_LABEL.match(ns):
            p.error(f"namespaces[{i}]", f"{ns!r} is not a valid namespace name")
        elif ns in out:
            p.error(f"namespaces[{i}]", f"duplicate namespace {ns!r}")
        else:
            out.append(ns)
    return tuple(out)


def _parse_leader(p: _Parser, data: Mapping[str, Any]) -> LeaderElectionConfig:
    raw = p.section(data, "leader_election", _LEADER_KEYS)
    d = LeaderElectionConfig()
    return LeaderElectionConfig(
        lease_name=p.name(raw, "lease_name", "leader_election", d.lease_name, DNS_SUBDOMAIN),
        lease_namespace=p.name(raw, "lease_namespace", "leader_election", d.lease_namespace, DNS_LABEL),
        lease_duration_seconds=p.duration(raw, "lease_duration", "leader_election", d.lease_duration_seconds),
    )


def _dollars(p: _Parser, raw: Mapping[str, Any], key: str, path: str, default: float | None,
             *, nullable: bool = False) -> float | None:
    """A price or ceiling in dollars per hour (a number >= 0; null allowed where ``nullable``)."""
    if key not in raw:
        return default
    value = raw[key]
    if value is None and nullable:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        what = "a number of dollars per hour >= 0" + (" or null" if nullable else "")
        p.error(f"{path}.{key}", f"expected {what}, got {_describe(value)}")
        return default
    return float(value)


def _capacity_type(p: _Parser, raw: Mapping[str, Any], path: str, default: str | None) -> Any:
    if "capacity_type" not in raw or raw["capacity_type"] is None:
        return default
    value = raw["capacity_type"]
    if value not in _CAPACITY_TYPES:
        p.error(f"{path}.capacity_type", f"expected on-demand or spot, got {_describe(value)}")
        return default
    return value


def _entries(p: _Parser, raw: Mapping[str, Any], key: str, path: str, allowed: tuple[str, ...]
             ) -> list[tuple[str, str, Mapping[str, Any]]]:
    """``(name, key path, body)`` for each entry of a mapping of named mappings, unknown keys reported."""
    section = raw.get(key)
    where = f"{path}.{key}"
    if section is None:
        return []
    if not isinstance(section, dict):
        p.error(where, f"expected a mapping of names to settings, got {_describe(section)}")
        return []
    out: list[tuple[str, str, Mapping[str, Any]]] = []
    for name, body in section.items():
        if not isinstance(body, dict):
            p.error(f"{where}.{name}", f"expected a mapping ({', '.join(allowed)}), got {_describe(body)}")
            continue
        p.unknown_keys(body, allowed, f"{where}.{name}")
        out.append((str(name), f"{where}.{name}", body))
    return out


def _parse_pricing(p: _Parser, data: Mapping[str, Any]) -> PriceTable:
    raw = p.section(data, "pricing", _PRICING_KEYS)
    d = default_pricing()
    types = dict(d.instance_types)
    for name, where, body in _entries(p, raw, "instance_types", "pricing", _INSTANCE_KEYS):
        gpus = p.integer(body, "gpus", where, 0, 1, None)
        if "gpus" not in body:
            p.error(f"{where}.gpus", "required: the number of GPUs of one node of this type")
        on_demand = _dollars(p, body, "on_demand", where, None)
        if on_demand is None:
            if "on_demand" not in body:
                p.error(f"{where}.on_demand", "required: the on-demand price of one node in dollars per hour")
            continue
        if gpus >= 1:
            types[name] = InstanceType(name, gpus, on_demand, _dollars(p, body, "spot", where, None, nullable=True))
    gpu_types = {}
    for name, where, body in _entries(p, raw, "gpu_types", "pricing", _GPU_TYPE_KEYS):
        on_demand = _dollars(p, body, "on_demand", where, None)
        if on_demand is None:
            if "on_demand" not in body:
                p.error(f"{where}.on_demand", "required: the on-demand price of one GPU in dollars per hour")
            continue
        gpu_types[name] = GpuType(name, on_demand, _dollars(p, body, "spot", where, None, nullable=True))
    pools = {}
    for name, where, body in _entries(p, raw, "nodepools", "pricing", _NODEPOOL_PRICING_KEYS):
        if not DNS_SUBDOMAIN.match(name):
            p.error(where, "not a valid NodePool name (a DNS subdomain)")
            continue
        instance = body.get("instance_type")
        if instance is not None and instance not in types:
            p.error(f"{where}.instance_type", f"unknown instance type {instance!r}{did_you_mean(str(instance), types)}"
                                              f"; add it under pricing.instance_types")
            instance = None
        gpn = p.integer(body, "gpus_per_node", where, 0, 1, None) if body.get("gpus_per_node") is not None else None
        pools[name] = NodePoolPricing(
            instance_type=instance,
            gpus_per_node=gpn or None,
            capacity_type=_capacity_type(p, body, where, None),
            gpu_hour=_dollars(p, body, "gpu_hour", where, None, nullable=True),
        )
    default_gpu_hour = _dollars(p, raw, "default_gpu_hour", "pricing", d.default_gpu_hour)
    return PriceTable(
        default_gpu_hour=d.default_gpu_hour if default_gpu_hour is None else default_gpu_hour,
        capacity_type=_capacity_type(p, raw, "pricing", d.capacity_type),
        instance_types=MappingProxyType(types),
        gpu_types=MappingProxyType(gpu_types),
        nodepools=MappingProxyType(pools),
    )


def _parse_ceilings(p: _Parser, data: Mapping[str, Any]) -> Ceilings:
    raw = p.section(data, "ceilings", _CEILING_KEYS)
    cluster = _dollars(p, raw, "cluster", "ceilings", None, nullable=True)
    teams: dict[str, float] = {}
    raw_teams = raw.get("teams")
    if raw_teams is not None and not isinstance(raw_teams, dict):
        p.error("ceilings.teams", f"expected a mapping of team names to dollars per hour, got {_describe(raw_teams)}")
    elif raw_teams:
        for team in raw_teams:
            if not isinstance(team, str) or not _TEAM.match(team):
                p.error(f"ceilings.teams.{team}", "not a valid team name (letters, digits, '-', '_', '.')")
                continue
            value = _dollars(p, raw_teams, team, "ceilings.teams", None)
            if value is not None:
                teams[team] = value
    order = DEFAULT_KEEP_ORDER
    raw_order = raw.get("keep_order")
    if raw_order is not None:
        if not isinstance(raw_order, list) or not raw_order:
            p.error("ceilings.keep_order", f"expected a non-empty list such as [inference>=production, "
                                           f"training_admitted, warm_pool, '*'], got {_describe(raw_order)}")
        else:
            parsed: list[KeepClass] = []
            for i, entry in enumerate(raw_order):
                try:
                    klass = KeepClass.parse(entry)
                except ValueError as exc:
                    p.error(f"ceilings.keep_order[{i}]", str(exc))
                    continue
                if klass in parsed:
                    p.error(f"ceilings.keep_order[{i}]", f"duplicate entry {str(klass)!r}")
                    continue
                parsed.append(klass)
            order = tuple(parsed)
    return Ceilings(cluster=cluster, teams=MappingProxyType(teams), keep_order=order)


def _parse_alerts(p: _Parser, data: Mapping[str, Any]) -> AlertsConfig:
    raw = p.section(data, "alerts", _ALERTS_KEYS)
    d = AlertsConfig()
    url = raw.get("alertmanager_url")
    if url is not None and (not isinstance(url, str) or not HTTP_URL.match(url)):
        p.error("alerts.alertmanager_url", f"expected an http:// or https:// URL or null, got {_describe(url)}")
        url = None
    cluster = p.string(raw, "cluster", "alerts", d.cluster)
    if not LABEL_VALUE.match(cluster):
        p.error("alerts.cluster", f"{cluster!r} is not a usable cluster name (letters, digits, '-', '_', '.')")
        cluster = d.cluster
    expire = p.duration(raw, "expire_after", "alerts", d.expire_after_seconds)
    if expire < 1:
        p.error("alerts.expire_after", "must be at least 1s")
        expire = d.expire_after_seconds
    token_file = p.optional_path(raw, "bearer_token_file", "alerts")
    basic_auth = _parse_basic_auth(p, raw)
    if token_file is not None and basic_auth is not None:
        p.error("alerts.basic_auth", "give bearer_token_file or basic_auth, not both (one way to authenticate)")
        basic_auth = None
    timeout = None
    if raw.get("timeout") is not None:  # parse_duration refuses 0 and negative durations itself
        before = len(p.errors)
        timeout = p.duration(raw, "timeout", "alerts", 0)
        timeout = timeout if len(p.errors) == before else None
    return AlertsConfig(alertmanager_url=url, cluster=cluster, expire_after_seconds=expire,
                        bearer_token_file=token_file, ca_file=p.optional_path(raw, "ca_file", "alerts"),
                        basic_auth=basic_auth, timeout_seconds=timeout)


def _parse_basic_auth(p: _Parser, alerts: Mapping[str, Any]) -> BasicAuthConfig | None:
    if alerts.get("basic_auth") is None:
        return None
    where = "alerts.basic_auth"
    raw = p.section(alerts, "basic_auth", _BASIC_AUTH_KEYS, "alerts.")
    if not isinstance(alerts["basic_auth"], dict):
        return None  # reported by section()
    before = len(p.errors)
    for key in _BASIC_AUTH_KEYS:
        if raw.get(key) is None:
            p.error(f"{where}.{key}", "required when basic_auth is set (basic_auth: null for none)")
    username = p.string(raw, "username", where, "") if raw.get("username") is not None else ""
    if ":" in username:
        p.error(f"{where}.username", f"{username!r} contains ':', which HTTP basic auth cannot carry")
    password_file = p.optional_path(raw, "password_file", where)
    if len(p.errors) > before or password_file is None:
        return None
    return BasicAuthConfig(username=username, password_file=password_file)


def _parse_karpenter(p: _Parser, data: Mapping[str, Any]) -> KarpenterConfig:
    raw = p.section(data, "karpenter", _KARPENTER_KEYS)
    d = KarpenterConfig()
    enabled = raw.get("enabled", d.enabled)
    if not isinstance(enabled, bool):
        p.error("karpenter.enabled", f"expected true or false, got {_describe(enabled)}")
        enabled = d.enabled
    spare = raw.get("spare_replicas", d.spare_replicas)
    if not isinstance(spare, bool):
        p.error("karpenter.spare_replicas", f"expected true or false, got {_describe(spare)}")
        spare = d.spare_replicas
    headroom = raw.get("headroom", d.headroom)
    if headroom is False:  # YAML 1.1 reads a bare `off` as false
        headroom = "off"
    if headroom not in HEADROOM_SETTINGS:
        p.error("karpenter.headroom", f"expected one of {', '.join(HEADROOM_SETTINGS)}, got {_describe(headroom)}"
                                      f"{did_you_mean(str(headroom), HEADROOM_SETTINGS)}")
        headroom = d.headroom
    quantile = raw.get("headroom_quantile")
    if quantile is not None and (isinstance(quantile, bool) or not isinstance(quantile, int | float)
                                 or not 0.5 <= quantile < 1):
        p.error("karpenter.headroom_quantile", f"expected a share in [0.5, 1) such as 0.95, or null (the pool's "
                                               f"strictest objective), got {_describe(quantile)}")
        quantile = None
    return KarpenterConfig(
        enabled=enabled,
        headroom=headroom,
        namespace=p.name(raw, "namespace", "karpenter", d.namespace, DNS_LABEL),
        spare_replicas=spare,
        headroom_quantile=None if quantile is None else float(quantile),
    )


def _cross_checks(p: _Parser, cfg: Config) -> None:
    """Rules that span keys: errors for settings that cannot work, warnings for ones that probably will not."""
    if cfg.loop.step_seconds > cfg.loop.interval_seconds * 10:
        p.warnings.append(f"loop.step: {format_duration(cfg.loop.step_seconds)} is much coarser than "
                          f"loop.interval {format_duration(cfg.loop.interval_seconds)}; ticks will see stale data")
    if cfg.loop.step_seconds >= cfg.loop.history_seconds:
        p.error("loop.step", f"{format_duration(cfg.loop.step_seconds)} must be shorter than loop.history "
                             f"({format_duration(cfg.loop.history_seconds)})")
    if cfg.alerts.alertmanager_url is not None and cfg.alerts.expire_after_seconds <= cfg.loop.interval_seconds:
        p.error("alerts.expire_after", f"{format_duration(cfg.alerts.expire_after_seconds)} must be longer than "
                                       f"loop.interval ({format_duration(cfg.loop.interval_seconds)}): alerts are "
                                       f"re-sent every tick and would flap between ticks")
    if cfg.alerts.alertmanager_url is not None and cfg.alerts.alertmanager_url.startswith("http://"):
        if cfg.alerts.ca_file is not None:
            p.warnings.append("alerts.ca_file: has no effect, alerts.alertmanager_url is http:// (not https://)")
        if cfg.alerts.bearer_token_file is not None or cfg.alerts.basic_auth is not None:
            p.warnings.append("alerts.alertmanager_url: credentials are sent unencrypted over http://; use https://")
    lead = cfg.cold_start.pod_startup_seconds + cfg.cold_start.node_startup_seconds
    for name, prof in cfg.profiles.items():
        path = f"profiles.{name}"
        if prof.history_seconds > cfg.loop.history_seconds:
            p.error(f"{path}.history", f"{format_duration(prof.history_seconds)} is longer than the fetched "
                                       f"loop.history ({format_duration(cfg.loop.history_seconds)})")
        if prof.horizon_seconds < cfg.loop.step_seconds:
            p.error(f"{path}.horizon", f"{format_duration(prof.horizon_seconds)} is shorter than one "
                                       f"loop.step ({format_duration(cfg.loop.step_seconds)})")
        if prof.look_ahead_seconds > prof.horizon_seconds:
            p.error(f"{path}.look_ahead", f"{format_duration(prof.look_ahead_seconds)} reaches beyond the "
                                          f"horizon ({format_duration(prof.horizon_seconds)})")
        if prof.horizon_seconds < lead:
            p.warnings.append(
                f"{path}.horizon: {format_duration(prof.horizon_seconds)} is shorter than the cold-start priors "
                f"(pod {format_duration(cfg.cold_start.pod_startup_seconds)} + node "
                f"{format_duration(cfg.cold_start.node_startup_seconds)}); capacity ordered now may arrive "
                f"after the forecast ends"
            )
        if prof.model == "holt_winters" and prof.history_seconds < 2 * 86_400:
            p.warnings.append(f"{path}.history: holt_winters needs two full daily seasons (2d), got "
                              f"{format_duration(prof.history_seconds)}; a simpler model will be used")


def parse_config(data: object, source: str = "") -> Config:
    """Validate already-parsed YAML data into a ``Config``; ``ConfigError`` lists every mistake with its path."""
    p = _Parser()
    if not isinstance(data, dict):
        raise ConfigError(source, [f"expected a mapping of sections ({', '.join(_TOP_KEYS)}), got {_describe(data)}"])
    p.unknown_keys(data, _TOP_KEYS, "")
    cfg = Config(
        loop=_parse_loop(p, data),
        profiles=MappingProxyType(_parse_profiles(p, data)),
        cold_start=_parse_cold_start(p, data),
        prometheus=_parse_prometheus(p, data),
        namespaces=_parse_namespaces(p, data),
        leader_election=_parse_leader(p, data),
        pricing=_parse_pricing(p, data),
        ceilings=_parse_ceilings(p, data),
        alerts=_parse_alerts(p, data),
        karpenter=_parse_karpenter(p, data),
    )
    if not p.errors:
        _cross_checks(p, cfg)
    if p.errors:
        raise ConfigError(source, p.errors)
    return Config(**{f.name: getattr(cfg, f.name) for f in fields(cfg) if f.name != "warnings"},
                  warnings=tuple(p.warnings))


MAX_YAML_NODES = 100_000  # the default config has about 600 values; aliases that expand past this are a bomb


class _StrictLoader(yaml.SafeLoader):
    """A SafeLoader that rejects duplicate keys (PyYAML silently keeps the last one) and aliases that expand a
    document beyond :data:`MAX_YAML_NODES` values (a "billion laughs" under any key: the controller reads the same
    file from a ConfigMap that anyone with edit rights on it can write, and every error message quoting such a
    value would be hundreds of megabytes)."""

    def compose_document(self) -> yaml.Node | None:
        node: yaml.Node | None = super().compose_document()
        if node is not None:
            _check_expansion(node)
        return node


def _check_expansion(root: yaml.Node) -> None:
    """Raise when the document, with every alias expanded, has more than ``MAX_YAML_NODES`` nodes (or is recursive).

    Counted on the composed graph, where an alias is the anchored node itself (shared, not copied), with one
    memoised count per node: linear in the file's size, whatever the expansion."""
    sizes: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        children: list[yaml.Node] = []
        if isinstance(node, yaml.SequenceNode):
            children = list(node.value)
        elif isinstance(node, yaml.MappingNode):
            children = [n for pair in node.value for n in pair]
        if done:
            on_path.discard(key)
            sizes[key] = 1 + sum(sizes[id(c)] for c in children)
            if sizes[key] > MAX_YAML_NODES:
                mark = node.start_mark
                raise yaml.constructor.ConstructorError(
                    None, None, f"aliases expand this document past {MAX_YAML_NODES:,} values (refused)", mark)
            continue
        if key in sizes:
            continue
        if key in on_path:
            raise yaml.constructor.ConstructorError(None, None, "a recursive alias (refused)", node.start_mark)
        on_path.add(key)
        stack.append((node, True))
        stack.extend((c, False) for c in children if id(c) not in sizes)


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            mark = key_node.start_mark
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", mark)
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def parse_config_text(text: str, source: str = "") -> Config:
    """Parse and validate YAML text. YAML syntax errors become a one-line ``ConfigError`` with line and column."""
    try:
        data = yaml.load(text, Loader=_StrictLoader)  # a SafeLoader subclass
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        problem = exc.problem or str(exc)
        raise ConfigError(source, [f"{where}invalid YAML: {problem}"]) from None
    except yaml.YAMLError as exc:
        raise ConfigError(source, [f"invalid YAML: {exc}"]) from None
    if data is None:
        raise ConfigError(source, ["file is empty; expected a mapping of sections (write {} for all defaults)"])
    return parse_config(data, source)


def resolve_config_file(path: str | Path) -> Path:
    """The file to read: ``path`` itself, or ``path/config.yaml`` when ``path`` is a mounted ConfigMap directory."""
    p = Path(path)
    return p / CONFIGMAP_KEY if p.is_dir() else p


def read_config_file(path: str | Path) -> tuple[Path, bytes]:
    file = resolve_config_file(path)
    try:
        return file, file.read_bytes()
    except FileNotFoundError:
        raise ConfigError(str(file), ["no such file"]) from None
    except OSError as exc:
        raise ConfigError(str(file), [f"cannot read: {exc.strerror or exc}"]) from None


def decode_config(file: Path, raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(str(file), [f"not UTF-8 text (byte {exc.start})"]) from None


def load_config(path: str | Path = DEFAULT_CONFIG_PATH) -> Config:
    """Load and validate a config file (or a ConfigMap directory holding ``config.yaml``)."""
    file, raw = read_config_file(path)
    return parse_config_text(decode_config(file, raw), str(file))
