"""``predictive-autoscaler simulate --fleet FLEET.yaml``: a fleet of Deployments on shared NodePools.

Why it exists: an operator's question is rarely "what would one Deployment cost" but "what would the cluster
pay, and would every team keep its latency objective, under the cluster's ceilings", and the baseline they run is
one HPA per Deployment with Karpenter buying a node when a pod does not fit. This command replays that fleet
(``autoscaler.simulation.fleet``) under:

* ``predictive``: every Deployment on the project's own policy (``simulation.predictive``, self-tuned as the
  controller runs it, for its own objective) with forecast-sized node headroom per NodePool
  (``autoscaler.engine.headroom``);
* ``predictive-no-headroom``: the same without the node buffer;
* ``reactive``: HPA + Karpenter, one HPA per Deployment at each utilisation target (``reactive_targets``), no
  buffer: pods that do not fit wait for a node; empty nodes go after the NodePool's ``consolidateAfter``.

The file (``examples/fleet.yaml`` is one that runs with nothing beside the clone; ``docs/commands.md`` documents
every key): ``nodepools`` (name, ``gpus_per_node``, ``usd_per_node_hour``, ``node_startup``,
``consolidate_after``, ``gpu_limit``), ``deployments`` (name, ``trace`` relative to the file or ``synth``,
``nodepool``, ``team``, ``priority``, ``capacity_per_replica`` or ``peak_replicas``, ``gpus_per_replica``,
``min_replicas``, ``max_replicas``, ``slo: {wait, attainment}``, ``pod_startup``), ``ceilings`` (``cluster``,
``teams``; dollars per hour as billed), and optionally ``days``, ``timeout``, ``bin_shape``, ``policies``,
``reactive_targets``, ``headroom: {quantile}``, ``spare_replicas`` (the controller's ``karpenter.spare_replicas``:
spare replicas of our policy on the pools' paid, idle GPUs, ``autoscaler.engine.spare``). Every bad key or value is
refused before any replay, in one line that names it.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import math
import sys
from collections.abc import Callable, Mapping
from concurrent.futures import Executor
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from autoscaler.cli import duration_flag, plot_flag
from autoscaler.config.schema import ForecastProfile
from autoscaler.domain.annotations import parse_duration_seconds
from autoscaler.errors import UserError
from autoscaler.plot_files import write_plot
from autoscaler.progress import Heartbeat
from autoscaler.simulation.cluster import ClusterConfig
from autoscaler.simulation.engine import (
    DEFAULT_REACTIVE_TARGETS,
    PolicyResult,
    SimulationConfig,
    TickPolicy,
    reactive_metric_at,
)
from autoscaler.simulation.fleet import (
    KARPENTER_CONSOLIDATE_AFTER_SECONDS,
    DeploymentSpec,
    FleetConfig,
    FleetRun,
    PolicyBuilder,
    PoolSpec,
    run_fleet,
    tuning_notes,
)
from autoscaler.simulation.money import parse_priority
from autoscaler.simulation.traffic import BIN_SHAPES
from models.types import SECONDS_PER_DAY

FLEET_POLICIES = ("predictive", "predictive-no-headroom", "reactive")
TOP_KEYS = ("nodepools", "deployments", "ceilings", "days", "timeout", "bin_shape", "policies", "reactive_targets",
            "headroom", "spare_replicas")
POOL_KEYS = ("name", "gpus_per_node", "usd_per_node_hour", "node_startup", "consolidate_after", "gpu_limit")
DEPLOYMENT_KEYS = ("name", "trace", "synth", "nodepool", "team", "priority", "capacity_per_replica", "peak_replicas",
                   "gpus_per_replica", "min_replicas", "max_replicas", "slo", "pod_startup")
SYNTH_KEYS = ("shape", "seed", "scale", "days", "step")
MAX_DEPLOYMENTS = 500
DEFAULT_PEAK_REPLICAS = 20
# Flags of the single-Deployment replay that say nothing about a fleet (each Deployment's trace and size are in the
# file): given with --fleet they are refused rather than silently ignored.
_SINGLE_ONLY = ("trace", "scenario", "capacity_per_replica", "peak_replicas", "gpus_per_replica", "gpus_per_node",
                "pod_startup", "node_startup", "gpu_hour_price", "ceiling_usd_per_hour", "gang", "sweep",
                "queue_targets", "slo_wait", "demand", "token_weights", "inference_priority", "keep_outages",
                "prometheus_url", "deployment", "since", "step", "until", "taken_over")


class _Where:
    """Names the place in the file an error is about: ``FLEET.yaml: deployments[2] (chat): ...``."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def error(self, where: str, message: str) -> UserError:
        return UserError(f"--fleet {self.path}: {where}: {message}")


def _mapping(w: _Where, where: str, value: Any, keys: tuple[str, ...]) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise w.error(where, f"expected a mapping of {', '.join(keys)}, got {type(value).__name__}")
    unknown = [str(k) for k in value if str(k).replace("-", "_") not in keys]
    if unknown:
        raise w.error(where, f"unknown key {unknown[0]!r} (known: {', '.join(keys)})")
    return {str(k).replace("-", "_"): v for k, v in value.items()}


def _int(w: _Where, where: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise w.error(where, f"must be an integer >= {minimum}, got {value!r}")
    return value


def _number(w: _Where, where: str, value: Any, ok: Callable[[float], bool], what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or not ok(value):
        raise w.error(where, f"must be {what}, got {value!r}")
    return float(value)


def _seconds(w: _Where, where: str, value: Any, positive: bool = False) -> float:
    """A duration with its unit (``120s``, ``3m``, ``500ms``); a bare 0 is allowed."""
    text = str(value).strip().lower()
    if isinstance(value, bool) or (not text.endswith(("s", "m", "h")) and text not in ("0", "0.0")):
        raise w.error(where, f"expected a duration with its unit (e.g. 120s, 3m), got {value!r}")
    try:
        seconds = float(text[:-2]) / 1000 if text.endswith("ms") else parse_duration_seconds(text)
    except ValueError as exc:
        raise w.error(where, f"{value!r}: {exc}") from None
    if not math.isfinite(seconds) or seconds < 0 or (positive and seconds <= 0):
        raise w.error(where, f"must be a {'positive' if positive else 'non-negative'} duration, got {value!r}")
    return seconds


def _named(w: _Where, where: str, raw: Any, keys: tuple[str, ...]) -> tuple[Mapping[str, Any], str, str]:
    """A list entry that must be a mapping with a name: the mapping, its name and where it is ("list[i] (name)")."""
    m = _mapping(w, where, raw, keys)
    name = m.get("name")
    if not isinstance(name, str) or not name.strip():
        raise w.error(where, "needs a name")
    return m, name, f"{where} ({name})"


def _pool(w: _Where, i: int, raw: Any) -> PoolSpec:
    m, name, where = _named(w, f"nodepools[{i}]", raw, POOL_KEYS)
    if "usd_per_node_hour" not in m:
        raise w.error(where, "needs usd_per_node_hour (what one node costs an hour, as Karpenter bills it)")
    gpn = _int(w, f"{where}.gpus_per_node", m.get("gpus_per_node", 8), 1)
    limit = m.get("gpu_limit")
    if limit is not None:
        limit = _int(w, f"{where}.gpu_limit", limit, gpn)
    return PoolSpec(
        name=name, gpus_per_node=gpn,
        node_usd_per_hour=_number(w, f"{where}.usd_per_node_hour", m["usd_per_node_hour"], lambda x: x > 0,
                                  "a number of dollars > 0"),
        node_startup_seconds=round(_seconds(w, f"{where}.node_startup", m.get("node_startup", "180s"))),
        consolidate_after_seconds=round(_seconds(
            w, f"{where}.consolidate_after", m.get("consolidate_after", f"{KARPENTER_CONSOLIDATE_AFTER_SECONDS}s"))),
        gpu_limit=limit,
    )


def _series(w: _Where, where: str, m: Mapping[str, Any], base: Path, days: float | None) -> Any:
    from autoscaler.traces import TraceError, load_trace

    has_trace, has_synth = "trace" in m, "synth" in m
    if has_trace == has_synth:
        raise w.error(where, "give exactly one of trace (a CSV, relative to this file) or synth")
    if has_trace:
        if not isinstance(m["trace"], str) or not m["trace"].strip():
            raise w.error(f"{where}.trace", "expected a path to a trace CSV")
        path = Path(m["trace"])
        path = path if path.is_absolute() else base / path
        if not path.is_file():
            raise w.error(f"{where}.trace", f"no such file: {path}")
        try:
            series = load_trace(path).requests
        except TraceError as exc:
            raise w.error(f"{where}.trace", str(exc)) from None
        from models.clean import prepare  # deferred: pandas

        series = prepare(series)
    else:
        from autoscaler.synth import SHAPES, synth_trace

        s = _mapping(w, f"{where}.synth", m["synth"] if m["synth"] is not None else {}, SYNTH_KEYS)
        shape = s.get("shape", "diurnal")
        if shape not in SHAPES:
            raise w.error(f"{where}.synth.shape", f"unknown shape {shape!r}; choose from {', '.join(SHAPES)}")
        seed = _int(w, f"{where}.synth.seed", s.get("seed", 1), 0)
        scale = _number(w, f"{where}.synth.scale", s.get("scale", 1.0), lambda x: x > 0, "a number > 0")
        span = _number(w, f"{where}.synth.days", s.get("days", days if days is not None else 14.0),
                       lambda x: 0 < x <= 60, "a number of days in (0, 60]")
        step = round(_seconds(w, f"{where}.synth.step", s.get("step", "60s"), positive=True))
        try:
            series = synth_trace(days=span, seed=seed, shape=shape, step_seconds=step, tokens=False).requests
        except ValueError as exc:
            raise w.error(f"{where}.synth", str(exc)) from None
        series = replace(series, values=series.values * scale)
    if days is not None:
        series = series.slice(0, max(2, int(days * SECONDS_PER_DAY // series.step_seconds)))
    if not np.any(np.isfinite(series.values)):
        raise w.error(where, "the trace has no data")
    return series


def _deployment(w: _Where, i: int, raw: Any, base: Path, days: float | None, pools: Mapping[str, PoolSpec],
                timeout: float) -> DeploymentSpec:
    m, name, where = _named(w, f"deployments[{i}]", raw, DEPLOYMENT_KEYS)
    pool = m.get("nodepool")
    if pool is None and len(pools) == 1:
        pool = next(iter(pools))
    if not isinstance(pool, str) or pool not in pools:
        raise w.error(f"{where}.nodepool", f"{pool!r} is not one of the nodepools ({', '.join(pools) or 'none'})")
    gpr = _int(w, f"{where}.gpus_per_replica", m.get("gpus_per_replica", 1), 1)
    if gpr > pools[pool].gpus_per_node:
        raise w.error(f"{where}.gpus_per_replica", f"{gpr} GPUs do not fit a node of {pool} "
                                                   f"({pools[pool].gpus_per_node}): it could never be scheduled")
    series = _series(w, where, m, base, days)
    peak = float(np.nanmax(series.values))
    if "capacity_per_replica" in m and "peak_replicas" in m:
        raise w.error(where, "give capacity_per_replica or peak_replicas, not both")
    if "capacity_per_replica" in m:
        cap = _number(w, f"{where}.capacity_per_replica", m["capacity_per_replica"], lambda x: x > 0,
                      "a number of requests/s > 0")
    else:
        n = _int(w, f"{where}.peak_replicas", m.get("peak_replicas", DEFAULT_PEAK_REPLICAS), 1)
        if peak <= 0:
            raise w.error(where, "the trace has no traffic, so peak_replicas cannot size a replica; give "
                                 "capacity_per_replica")
        cap = peak / n
    lo = _int(w, f"{where}.min_replicas", m.get("min_replicas", 1), 0)
    peak_need = math.ceil(peak / cap) if peak > 0 else 1
    hi = _int(w, f"{where}.max_replicas", m.get("max_replicas", max(100, 4 * peak_need)), max(1, lo))
    slo = _mapping(w, f"{where}.slo", m.get("slo") or {}, ("wait", "attainment"))
    wait = _seconds(w, f"{where}.slo.wait", slo.get("wait", "2s"), positive=True)
    if wait >= timeout:
        raise w.error(f"{where}.slo.wait", f"{wait:g}s is not shorter than the timeout {timeout:g}s: a request is "
                                           "dropped at the timeout, so the objective could not be missed by waiting")
    share = _number(w, f"{where}.slo.attainment", slo.get("attainment", 0.99), lambda x: 0 < x < 1,
                    "a share in (0, 1), e.g. 0.99")
    try:
        priority = parse_priority(m.get("priority", "production"), f"{where}.priority")
    except ValueError as exc:
        raise UserError(f"--fleet {w.path}: {exc}") from None
    team = m.get("team", "default")
    if not isinstance(team, str) or not team:
        raise w.error(f"{where}.team", f"expected a team name, got {team!r}")
    return DeploymentSpec(
        name=name, series=series, pool=pool, capacity_per_replica=cap, gpus_per_replica=gpr, min_replicas=lo,
        max_replicas=hi, team=team, priority=priority, slo_wait_seconds=wait, slo_attainment=share,
        pod_startup_seconds=round(_seconds(w, f"{where}.pod_startup", m.get("pod_startup", "120s"))),
    )


def load_fleet(path: Path) -> tuple[FleetConfig, tuple[str, ...], tuple[float, ...]]:
    """The fleet of ``path``: its config, the policies to run and the HPA targets; a ``UserError`` on bad input."""
    w = _Where(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise UserError(f"--fleet {path}: cannot read: {exc.strerror or exc}") from None
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark is not None else ""
        raise UserError(f"--fleet {path}: not valid YAML{at}") from None
    top = _mapping(w, "the file", raw, TOP_KEYS)
    days = top.get("days")
    if days is not None:
        days = _number(w, "days", days, lambda x: x > 0, "a number of days > 0")
    timeout = _seconds(w, "timeout", top.get("timeout", "60s"), positive=True)
    shape = top.get("bin_shape", "auto")
    if shape not in BIN_SHAPES:
        raise w.error("bin_shape", f"unknown {shape!r}; choose from {', '.join(BIN_SHAPES)}")
    raw_pools = top.get("nodepools")
    if not isinstance(raw_pools, list) or not raw_pools:
        raise w.error("nodepools", "expected a list of at least one NodePool")
    pools: dict[str, PoolSpec] = {}
    for i, rp in enumerate(raw_pools):
        try:
            p = _pool(w, i, rp)
        except ValueError as exc:
            raise UserError(f"--fleet {path}: {exc}") from None
        if p.name in pools:
            raise w.error(f"nodepools[{i}]", f"NodePool {p.name!r} is listed twice")
        pools[p.name] = p
    raw_deps = top.get("deployments")
    if not isinstance(raw_deps, list) or not raw_deps:
        raise w.error("deployments", "expected a list of at least one Deployment")
    if len(raw_deps) > MAX_DEPLOYMENTS:
        raise w.error("deployments", f"{len(raw_deps)} Deployments; at most {MAX_DEPLOYMENTS} per fleet")
    deps: list[DeploymentSpec] = []
    seen: set[str] = set()
    for i, rd in enumerate(raw_deps):
        try:
            d = _deployment(w, i, rd, path.parent, days, pools, timeout)
        except ValueError as exc:
            raise UserError(f"--fleet {path}: deployments[{i}]: {exc}") from None
        if d.name in seen:
            raise w.error(f"deployments[{i}]", f"Deployment {d.name!r} is listed twice")
        seen.add(d.name)
        deps.append(d)
    ceilings = _mapping(w, "ceilings", top.get("ceilings") or {}, ("cluster", "teams"))
    cluster = ceilings.get("cluster")
    if cluster is not None:
        cluster = _number(w, "ceilings.cluster", cluster, lambda x: x > 0, "dollars per hour > 0")
    teams_raw = ceilings.get("teams") or {}
    if not isinstance(teams_raw, Mapping):
        raise w.error("ceilings.teams", "expected a mapping of team -> dollars per hour")
    teams = {str(t): _number(w, f"ceilings.teams.{t}", v, lambda x: x > 0, "dollars per hour > 0")
             for t, v in teams_raw.items()}
    known_teams = {d.team for d in deps}
    stray = [t for t in teams if t not in known_teams]
    if stray:
        raise w.error(f"ceilings.teams.{stray[0]}", f"no Deployment has team {stray[0]!r} "
                                                    f"(teams: {', '.join(sorted(known_teams))})")
    head = _mapping(w, "headroom", top.get("headroom") or {}, ("quantile",))
    # absent: each pool covers its Deployments' strictest objective, as the controller's headroom does
    quantile = None if head.get("quantile") is None else _number(
        w, "headroom.quantile", head["quantile"], lambda x: 0.5 <= x < 1, "a share in [0.5, 1), e.g. 0.95")
    spares = top.get("spare_replicas", True)
    if not isinstance(spares, bool):
        raise w.error("spare_replicas", f"expected true or false, got {spares!r}")
    policies = top.get("policies", list(FLEET_POLICIES))
    if isinstance(policies, str):
        policies = [p.strip() for p in policies.split(",") if p.strip()]
    if not isinstance(policies, list) or not policies or any(p not in FLEET_POLICIES for p in policies):
        raise w.error("policies", f"expected a list from {', '.join(FLEET_POLICIES)}, got {policies!r}")
    targets = top.get("reactive_targets", list(DEFAULT_REACTIVE_TARGETS))
    if not isinstance(targets, list) or not targets:
        raise w.error("reactive_targets", "expected a list of utilisation targets in (0, 1]")
    target_values = tuple(_number(w, "reactive_targets", t, lambda x: 0 < x <= 1, "in (0, 1]") for t in targets)
    try:
        config = FleetConfig(tuple(deps), tuple(pools.values()), cluster_ceiling=cluster, team_ceilings=teams,
                             timeout_seconds=timeout, bin_shape=shape, headroom_quantile=quantile,
                             spare_replicas=spares)
    except ValueError as exc:
        raise UserError(f"--fleet {path}: {exc}") from None
    return config, tuple(dict.fromkeys(policies)), target_values


def check_flags(args: argparse.Namespace) -> None:
    """Flags of the single-Deployment replay are refused with ``--fleet`` (the file holds them per Deployment)."""
    for name in _SINGLE_ONLY:
        value = getattr(args, name, None)
        if value not in (None, False, []):
            flag = "--" + name.replace("_", "-")
            raise UserError(f"{flag} and --fleet are mutually exclusive: a fleet file sets each Deployment's trace, "
                            "size and objective, and its NodePools and ceilings")


def predictive_builder(profile: ForecastProfile, interval_seconds: int, model: str = "default",
                       executor: Executor | None = None) -> PolicyBuilder:
    """Each Deployment on ``simulation.predictive.factory`` (self-tuned for its own objective when the profile
    says so, as ``simulate`` builds it). ``executor``: a pool of worker processes where the self-tuning replays
    run, those due at the same tick at once (``simulation.tuning.retuner``; the same choices, None: each in this
    process in turn)."""
    from autoscaler.simulation.predictive import factory
    from models import registry

    make = functools.partial(registry.make_chain, model)  # pickles, for the pool's workers

    def build(i: int, d: DeploymentSpec, sim: SimulationConfig, cluster: ClusterConfig) -> TickPolicy:
        retune = None
        if profile.self_tune and profile.warm_pool == "auto":
            from autoscaler.simulation.tuning import retuner

            retune = retuner(make, quantiles=profile.tune_quantiles, utilisations=profile.tune_utilisations,
                             slo_wait_seconds=d.slo_wait_seconds, slo_attainment=d.slo_attainment,
                             warmup_seconds=profile.history_seconds, gpus_per_node=cluster.gpus_per_node,
                             timeout_seconds=sim.queue.timeout_seconds, executor=executor,
                             horizon_seconds=profile.horizon_seconds)
        # no decision's steps are read in a fleet (its report is counts, bills and attainment): none are kept
        return factory(make, decision_interval_seconds=interval_seconds, profile=profile, retune=retune,
                       explain=False)(d.series, sim, cluster)

    return build


def hpa_builder(target: float) -> PolicyBuilder:
    from autoscaler.simulation.reactive import ReactiveHPA

    def build(i: int, d: DeploymentSpec, sim: SimulationConfig, cluster: ClusterConfig) -> TickPolicy:
        return ReactiveHPA(target, d.capacity_per_replica, cluster.tick_seconds, d.min_replicas, d.max_replicas)

    return build


def _pct(x: float) -> str:
    return f"{100 * x:.3f}%"


def format_table(runs: list[FleetRun], config: FleetConfig) -> str:
    """The fleet table (one row per run), then one row per Deployment per run, then the comparison lines."""
    days = config.ticks() * config.tick_seconds / SECONDS_PER_DAY
    lines = [f"Fleet: {len(config.deployments)} Deployment(s) on {len(config.pools)} NodePool(s), "
             f"{days:.2f} days; ceilings: cluster "
             f"{'none' if config.cluster_ceiling is None else f'${config.cluster_ceiling:g}/h'}"
             + "".join(f", team {t} ${v:g}/h" for t, v in sorted(config.team_ceilings.items()))
             + " (as billed: whole nodes)", ""]
    header = (f"{'policy':<26}{'node-h':>10}{'$ billed':>12}{'GPU-h billed':>14}{'replica GPU-h':>15}"
              f"{'SLO attained':>14}{'SLO misses':>14}{'objectives met':>16}{'breaches':>10}")
    lines += [header, "-" * len(header)]
    for r in runs:
        lines.append(f"{r.name:<26}{r.node_hours:>10.1f}{r.cost_usd:>12,.0f}{r.billed_gpu_hours:>14.1f}"
                     f"{r.gpu_hours:>15.1f}{_pct(r.slo_attainment):>14}{r.slo_misses:>14,.0f}"
                     f"{f'{r.objectives_met}/{len(r.deployments)}':>16}{r.ceiling_breaches:>10}")
    lines += ["", "Per Deployment (GPU-h: GPUs its pods held; $: that share at its pool's GPU price):"]
    sub = (f"{'policy':<26}{'deployment':<20}{'team':<12}{'pool':<10}{'GPU-h':>10}{'$':>10}{'SLO attained':>14}"
           f"{'objective':>16}{'wait p99 s':>12}")
    lines += [sub, "-" * len(sub)]
    for r in runs:
        for d in r.deployments:
            objective = f"{d.spec.slo_attainment * 100:g}%/{d.spec.slo_wait_seconds:g}s"
            mark = "" if d.result.slo_attainment >= d.spec.slo_attainment else " miss"
            lines.append(f"{r.name:<26}{d.spec.name[:19]:<20}{d.spec.team[:11]:<12}{d.spec.pool[:9]:<10}"
                         f"{d.result.gpu_hours:>10.1f}{d.result.cost_usd:>10,.0f}{_pct(d.result.slo_attainment):>14}"
                         f"{objective + mark:>16}{d.result.wait_p99_seconds:>12.1f}")
    lines += comparison_lines(runs)
    return "\n".join(lines)


def comparison_lines(runs: list[FleetRun]) -> list[str]:
    """Each predictive run against the HPA + Karpenter curve: misses at equal billed GPU-hours, and the GPU-hours
    the curve needs for the same attainment."""
    hpa = [r.as_policy_result() for r in runs if r.name.startswith("reactive@")]
    if not hpa:
        return []
    out = [""]
    for r in runs:
        if r.name.startswith("reactive@"):
            continue
        mine = r.as_policy_result()
        att = reactive_metric_at(mine.gpu_hours, hpa, "slo_attainment")
        xs = [h.gpu_hours for h in hpa]
        inside = min(xs) <= mine.gpu_hours <= max(xs)
        parts = [f"{r.name}: {mine.gpu_hours:,.0f} billed GPU-h at {_pct(mine.slo_attainment)}"]
        if att is not None and inside and att < 1:
            parts.append(f"HPA + Karpenter at the same GPU-h: {_pct(att)} "
                         f"(misses cut {100 * (1 - (1 - mine.slo_attainment) / (1 - att)):.0f}%)")
        equal = gpu_hours_at(mine.slo_attainment, hpa)
        if equal is not None:
            parts.append(f"the HPA curve needs {equal:,.0f} GPU-h for that attainment "
                         f"(saved {100 * (1 - mine.gpu_hours / equal):.0f}%)")
        else:
            parts.append("the HPA curve does not reach that attainment at the targets run")
        out.append("; ".join(parts))
    return out


def gpu_hours_at(attainment: float, curve: list[PolicyResult]) -> float | None:
    """The GPU-hours at which the curve reaches ``attainment`` (linear between its points; None outside them)."""
    runs = sorted(curve, key=lambda r: r.slo_attainment)
    atts = [r.slo_attainment for r in runs]
    if not runs or attainment > atts[-1] or attainment < atts[0]:
        return None
    return float(np.interp(attainment, atts, [r.gpu_hours for r in runs]))


def run(args: argparse.Namespace) -> int:
    """``simulate --fleet FILE``: load, check, replay each policy, print the table or the JSON, draw the plot."""
    check_flags(args)
    if args.plot is not None:
        plot_flag(args.plot)
    from autoscaler.commands.simulate import operator_config, tuning

    operator = operator_config(args)
    if args.profile is None:
        args.profile = "default"
    tune = tuning(args, operator)
    config, policies, targets = load_fleet(Path(args.fleet))
    if args.policies is not None:
        policies = tuple(p.strip() for p in str(args.policies).split(",") if p.strip())
        bad = [p for p in policies if p not in FLEET_POLICIES]
        if bad or not policies:
            raise UserError(f"--policies: with --fleet choose from {', '.join(FLEET_POLICIES)}"
                            + (f", got {bad[0]!r}" if bad else ""))
    if args.reactive_targets is not None:
        from autoscaler.commands.simulate import _targets

        targets = _targets(str(args.reactive_targets))
    if args.bin_shape is not None:
        config = replace(config, bin_shape=str(args.bin_shape))
    if args.timeout is not None:
        timeout = duration_flag("--timeout", str(args.timeout))
        try:
            config = replace(config, timeout_seconds=float(timeout))
        except ValueError as exc:
            raise UserError(f"--timeout: {exc}") from None
    plan: list[tuple[str, PolicyBuilder, bool]] = []
    if "predictive" in policies:
        plan.append(("predictive", predictive_builder(tune.profile, tune.interval_seconds, tune.profile.model), True))
    if "predictive-no-headroom" in policies:
        plan.append(("predictive-no-headroom",
                     predictive_builder(tune.profile, tune.interval_seconds, tune.profile.model), False))
    if "reactive" in policies:
        plan += [(f"reactive@{t:g}", hpa_builder(t), False) for t in targets]
    state: dict[str, Any] = {"name": "", "i": 0, "done": 0, "total": config.ticks()}

    def status() -> str:
        return (f"simulating {state['name']} (run {state['i']} of {len(plan)}, "
                f"{100 * state['done'] / max(1, state['total']):.0f}% of its ticks)")

    def progress(done: int, total: int) -> None:
        state["done"], state["total"] = done, total

    heartbeat = Heartbeat(sys.stderr, "simulate", status) if not sys.stderr.isatty() else contextlib.nullcontext()
    runs: list[FleetRun] = []
    with heartbeat:
        for i, (name, build, headroom) in enumerate(plan, 1):
            state["name"], state["i"], state["done"] = name, i, 0
            if sys.stderr.isatty():
                print(f"simulating {name} ...", file=sys.stderr, flush=True)
            try:
                runs.append(run_fleet(config, build, name, headroom=headroom,
                                      headroom_every=max(1, round(tune.interval_seconds / config.tick_seconds)),
                                      progress=progress))
            except ValueError as exc:
                raise UserError(str(exc)) from None
    if args.json:
        payload = {
            "fleet": str(args.fleet),
            "days": round(config.ticks() * config.tick_seconds / SECONDS_PER_DAY, 4),
            "tick_seconds": config.tick_seconds,
            "nodepools": {p.name: {"gpus_per_node": p.gpus_per_node, "usd_per_node_hour": p.node_usd_per_hour,
                                   "node_startup_seconds": p.node_startup_seconds,
                                   "consolidate_after_seconds": p.consolidate_after_seconds,
                                   "gpu_limit": p.gpu_limit} for p in config.pools},
            "ceilings": {"cluster": config.cluster_ceiling, "teams": dict(config.team_ceilings)},
            "timeout_seconds": config.timeout_seconds,
            "runs": {r.name: r.to_json() for r in runs},
        }
        print(json.dumps(payload), flush=True)
    else:
        print(format_table(runs, config), flush=True)
        notes = [n for r in runs for n in r.notes if "failure" in n or "capped" in n][:10] + tuning_notes(runs)
        for n in notes:
            print(f"note: {n}")
    if args.plot is not None:
        from autoscaler.fleet_plot import plot_fleet

        return write_plot(lambda: plot_fleet(runs, config, args.plot), args.plot, "simulate", quiet=args.json)
    return 0
