"""``predictive-autoscaler simulate``: replay a trace through a simulated GPU cluster under each policy.

Why it exists: before an operator lets the controller act, they want to see, on *their* traffic,
what it would have cost and how many requests it would have dropped compared with the HPA they
run today, and how far it is from perfect foresight. It is also the project's main demo: with no
arguments it replays two weeks of synthetic traffic (``autoscaler.synth``, seeded, so the run is reproducible;
the output says it is synthetic and how to replay real traffic instead). The model of the cluster (start-ups, nodes,
what is billed) is documented in ``autoscaler/simulation/cluster.py`` and ``engine.py``; ``--help``
says the essentials.

Sizing: ``--peak-replicas N`` (default 20) sets the per-replica capacity so that the trace's
busiest bin needs exactly N replicas; ``--capacity-per-replica R`` gives it in requests/s instead. With
``--demand tokens`` (``--token-weights IN,OUT``, ``autoscaler.domain.demand``) the demand replayed is the trace's
weighted tokens/s, so both are in tokens/s and the queue holds tokens.

Assumptions: the cluster is the one the controller plans for. Pod and node start-up, the GPU price and the SLO
wait come from the operator config (``--config``; the built-in :data:`DEFAULT_CONFIG` otherwise, whose values are
``config/default.yaml``'s): ``cold_start.pod_startup``/``node_startup``, ``pricing.default_gpu_hour`` and the
profile's ``slo_wait``, unless a flag (or the scenario file) sets them. The JSON states them all in ``cluster``,
with the replica's size, GPUs and the timeout, so a result can be reproduced from its own file; ``units`` says
what ``cold_start_requests`` and the fractions count (tokens with ``--demand tokens``).

Bad input before long work: the SLO wait must be positive and shorter than the timeout; a trace more than half
missing, or replaying to more than :data:`MAX_SIMULATED_TICKS` ticks, is refused; a gap longer than
:data:`LONG_GAP_SECONDS` gets a warning line (a gap is missing data: see :func:`check_gaps`). The plot is drawn
after the table is printed, so a plot that cannot be written at the end costs the picture, not the results.

Money (``autoscaler/simulation/money.py`` has the rules): ``--ceiling-usd-per-hour X`` holds every
policy under a cost ceiling on the whole simulated cluster, ``--gang gpus=16,at=48h,hours=4,window=24h``
(repeatable; optional ``priority=``, ``name=``) adds training gangs reserved whole or not at all. The JSON
always carries ``ceiling_breaches``, ``gangs_split``, ``gang_wait_hours``, ``ceiling_unserved_fraction``,
``gangs_missed`` and ``gangs_preempted`` per policy (0 without a ceiling or gangs).

Scenario files: ``--scenario FILE.yaml`` holds any of the options below under their long names
(``ceiling_usd_per_hour: 120``, ``gpus_per_node: 8``, ``gangs: [{gpus: 16, at: 48h, hours: 4, window: 24h}]``;
dashes or underscores), ``trace`` relative to the file. A flag given on the command line overrides the file's
value; ``--gang`` flags replace the file's ``gangs`` list. A bad key or value is a one-line error naming it.

Tuning on your own history: ``--config FILE --profile NAME`` runs the predictive policy with the operator
config the controller reads (the profile is mapped to the planner exactly as the controller maps it,
``ForecastProfile.scaling_policy``; the loop interval is the decision interval). ``--sweep KEY=V1,V2,...``
adds one predictive run per value of one profile key, named ``predictive@KEY=V`` and scored like the others
(the HPA and oracle run once): the rows are points on the predictive policy's cost/risk curve, set against
the HPA's at the same GPU-hours. Why a sweep and not one "best" setting: the simulator cannot know what an
unserved request costs the operator; the curve shows the trade, the operator picks the point. With the
default automatic warm pool, ``warm_pool_quantile`` (not ``quantile``) is the knob that moves the point.
With the profile's ``self_tune`` (the default) the ``predictive`` row picks its own point along that curve, as the
controller does: after each daily refit it replays its last day (``autoscaler/simulation/tuning.py``) for the
objective ``--slo-wait`` at the profile's ``slo_attainment``; a swept quantile or warm pool is pinned instead.

The queue (``autoscaler/simulation/queue.py``): requests above Ready capacity wait first in first out and are
dropped after ``--timeout`` (default 60 s); every policy reports ``slo_attainment`` (started within ``--slo-wait``,
default the profile's ``slo_wait``, 2 s), ``wait_p99_seconds`` and ``dropped_fraction`` next to
``unserved_fraction`` (the capacity shortfall, unchanged). The anchors run under the same queue: the HPA on
utilisation (``reactive@T``), the HPA as the vLLM reference deploys it (``hpa-queue@N``:
``vllm:num_requests_waiting`` averaged over pods, ``--queue-targets``, default 10), vLLM production-stack's HPA
(``prodstack-queue@1``: the Object metric ``sum(vllm:num_requests_waiting)``, target value 1) and its KEDA
ScaledObject (``keda-queue@5``: threshold 5 on the same sum; ``autoscaler/simulation/reactive.py``), our planner
with a last-value forecast (``predictive-persistence``) and the oracle. ``--bin-shape`` says how a bin's rate is
spread over its 15 s ticks (``autoscaler/simulation/traffic.py``: ``auto`` spreads bins longer than a minute
linearly, keeping each bin's count, and replays shorter ones flat).

Why the predictive policy decides every ``--decision-interval`` (default 30 s, the controller's
default loop interval) and not every 15 s tick, while the HPA keeps its 15 s sync: it is what the
controller does. Measured on the NASA and ServeGen m_small traces, 15 s changes neither the unserved fraction nor the
GPU-hours (to 0.1 %) and costs twice the planner time.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from autoscaler.cli import add_demand_arguments, demand_flags, duration_flag, plot_flag, warn
from autoscaler.config.parser import load_config, parse_config
from autoscaler.config.schema import Config, ConfigError, ForecastProfile, format_duration
from autoscaler.domain.demand import DemandUnit, unit_label
from autoscaler.errors import UserError
from autoscaler.history import add_arguments, check_source_flags, trace_from_args, wants_prometheus
from autoscaler.plot_files import write_plot
from autoscaler.progress import Heartbeat
from autoscaler.runtime.clock import SystemClock
from autoscaler.simulation.cluster import ClusterConfig
from autoscaler.simulation.engine import (
    DEFAULT_QUEUE_TARGETS,
    DEFAULT_REACTIVE_TARGETS,
    POLICY_NAMES,
    PolicyResult,
    PredictiveFactory,
    SimulationConfig,
    SimulationResult,
    hpa_a_user_picks,
    reactive_at,
    reactive_metric_at,
    tick_seconds_for,
)
from autoscaler.simulation.money import GangSpec, MoneyConfig, parse_priority
from autoscaler.simulation.queue import QueueConfig
from autoscaler.simulation.traffic import BIN_SHAPES
from autoscaler.traces import MOSTLY_MISSING, Trace, demand_series, format_span, gaps, load_trace
from models.base import Forecaster

POLICIES = POLICY_NAMES
DEFAULT_PEAK_REPLICAS = 20
# The built-in operator config (its defaults are config/default.yaml's, a test in test_config keeps them equal):
# without --config the simulated cluster starts up, bills and keeps its objective as the controller's defaults say.
DEFAULT_CONFIG = Config()
# The most 15 s ticks (or shorter ones, for bins that are not a multiple of 15 s) one replay may hold: measured at
# about 0.9 kB a tick with every policy, this bounds a run near 2 GB (347 days of 15 s ticks, in about 10 minutes).
MAX_SIMULATED_TICKS = 2_000_000
# A gap (missing bins) longer than this gets a warning: every policy but the oracle holds its replicas through it,
# and they are billed, so GPU-hours over a long gap say little.
LONG_GAP_SECONDS = 86_400
# Options a scenario file may set, with the defaults used when neither the file nor a flag sets them
# (the flags default to None so that "given on the command line" can be told apart from "default").
DEFAULTS: dict[str, Any] = {
    "trace": None,
    "policies": ",".join(POLICIES),
    "capacity_per_replica": None,
    "peak_replicas": None,
    "pod_startup": None,  # None: from the operator config (assumptions_from_config), built-in or --config
    "node_startup": None,
    "gpus_per_replica": 1,
    "gpus_per_node": 8,
    "gpu_hour_price": None,
    "reactive_targets": ",".join(f"{t:g}" for t in DEFAULT_REACTIVE_TARGETS),
    "queue_targets": ",".join(f"{t:g}" for t in DEFAULT_QUEUE_TARGETS),
    "slo_wait": None,
    "timeout": "60s",
    "bin_shape": "auto",
    "config": None,
    "profile": "default",
    "model": None,
    "decision_interval": None,
    "sweep": None,
    "ceiling_usd_per_hour": None,
    "inference_priority": "production",
    "gang": None,
    "demand": None,
    "token_weights": None,
    "taken_over": None,
}
SCENARIO_KEYS = (*(k for k in DEFAULTS if k != "gang"), "gangs")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "simulate",
        help="replay a trace through a simulated GPU cluster: predictive vs reactive HPA vs oracle",
        description=(
            "Replay a traffic trace through a simulated GPU cluster under our predictive policy, a Kubernetes HPA "
            "at several utilisation targets, the HPA on vLLM's waiting-requests gauge as the vLLM reference deploys "
            "it (hpa-queue), vLLM production-stack's HPA and KEDA ScaledObject on the summed queue (prodstack-queue, "
            "keda-queue), our planner with a last-value forecast (predictive-persistence), and an oracle with "
            "perfect foresight. A replica asked for at t is "
            "Ready at t + pod start-up (+ node start-up when no node has a free GPU); a replica's GPUs are billed "
            "from ask to release; empty nodes are removed 60 s after they empty. Requests above Ready capacity "
            "wait in a FIFO queue and are dropped after --timeout. Reports GPU-hours, cost, SLO attainment (the "
            "share of requests that started within --slo-wait), the p99 wait, the share dropped, the "
            "fraction of requests that found no Ready capacity, and how many of those were lost to start-up. "
            "With --ceiling-usd-per-hour every policy is held under a cost ceiling (replicas + gangs, never below "
            "min replicas); --gang adds training gangs reserved whole or not at all (the predictive policy places "
            "them in its forecast's trough, the HPA first-fit), and the scores gain ceiling_breaches, gangs_split, "
            "gang_wait_hours and ceiling_unserved_fraction (always in the JSON)."
        ),
    )
    parser.add_argument(
        "--fleet", type=Path, default=None, metavar="FLEET.yaml",
        help="replay a fleet: many Deployments (each with its trace or a synth shape, objective, team, priority and "
        "NodePool) on shared NodePools under cluster and team ceilings as billed, under our policy with "
        "forecast-sized node headroom, without it, and HPA + Karpenter at each --reactive-targets "
        "(docs/commands.md; examples/fleet.yaml)",
    )
    parser.add_argument(
        "--scenario", type=Path, default=None, metavar="FILE.yaml",
        help="YAML file holding any of these options (ceiling, gangs, ...); flags override it",
    )
    parser.add_argument(
        "--trace", type=Path, default=None,
        help="CSV timestamp,requests[,...] (default: two weeks of synthetic traffic, autoscaler/synth.py; or "
        "Prometheus with --deployment)",
    )
    parser.add_argument(
        "--keep-outages",
        action="store_true",
        help="replay bins that look like metrics outages (zero amid traffic) as real zero demand; by default they "
        "are missing data, as in backtest (a collection gap is not a moment without users)",
    )
    parser.add_argument(
        "--policies", default=None, help=f"comma-separated subset of {','.join(POLICIES)} (default: all)"
    )
    add_demand_arguments(parser, capacity_flag=True)
    size = parser.add_mutually_exclusive_group()
    size.add_argument(
        "--capacity-per-replica", type=float, default=None, metavar="R",
        help="requests/s one replica serves (tokens/s with --demand tokens)",
    )
    size.add_argument(
        "--peak-replicas",
        type=int,
        default=None,
        metavar="N",
        help=f"size replicas so the trace's peak needs N of them (default {DEFAULT_PEAK_REPLICAS})",
    )
    parser.add_argument(
        "--pod-startup", default=None, metavar="DURATION",
        help="pod creation -> Ready: image pull + model load (default: cold_start.pod_startup of --config, "
        f"{format_duration(DEFAULT_CONFIG.cold_start.pod_startup_seconds)} built in)",
    )
    parser.add_argument(
        "--node-startup", default=None, metavar="DURATION",
        help="extra wait when a new node must be provisioned (default: cold_start.node_startup of --config, "
        f"{format_duration(DEFAULT_CONFIG.cold_start.node_startup_seconds)} built in)",
    )
    parser.add_argument("--gpus-per-replica", type=int, default=None, help="(default 1)")
    parser.add_argument("--gpus-per-node", type=int, default=None, help="(default 8)")
    parser.add_argument(
        "--gpu-hour-price", type=float, default=None,
        help="USD per GPU-hour (default: pricing.default_gpu_hour of --config, "
        f"{DEFAULT_CONFIG.pricing.default_gpu_hour:g} built in)",
    )
    parser.add_argument(
        "--reactive-targets",
        default=None,
        help="HPA utilisation targets to run, comma-separated, each in (0, 1] (default "
        + ",".join(f"{t:g}" for t in DEFAULT_REACTIVE_TARGETS) + ")",
    )
    parser.add_argument(
        "--queue-targets", default=None, metavar="N[,N...]",
        help="hpa-queue: the HPA on the Pods metric vllm:num_requests_waiting, one run per averageValue target "
        f"(waiting requests per pod; default {','.join(f'{t:g}' for t in DEFAULT_QUEUE_TARGETS)}, as the vLLM "
        "reference deploys it)",
    )
    parser.add_argument(
        "--slo-wait", default=None, metavar="DURATION",
        help="the latency objective: a request meets it when it starts within this wait, shorter than --timeout "
        "(default: slo_wait of the --config profile, 2s built in; 500ms and fractions are allowed, a bare number is "
        "seconds); slo_attainment is the share that did",
    )
    parser.add_argument(
        "--timeout", default=None, metavar="DURATION",
        help="a request still waiting after this long is dropped, like a gateway's timeout (default 60s; a bare "
        "number is seconds)",
    )
    parser.add_argument(
        "--bin-shape", default=None, metavar="{" + ",".join(BIN_SHAPES) + "}",
        help="how a bin's rate is spread over its ticks, the same for every policy: linear (interpolated "
        "between bin centres, each bin keeping its count), flat, or auto (default: linear for bins longer "
        "than a minute, flat otherwise)",
    )
    parser.add_argument(
        "--config", type=Path, default=None, metavar="FILE.yaml",
        help="the controller's operator config (the same file or ConfigMap directory that 'run --config' reads): the "
        "predictive policy runs with its forecast profile and loop interval, the cluster with its start-ups "
        "(cold_start), GPU price (pricing.default_gpu_hour) and the profile's slo_wait, unless a flag says "
        "otherwise, and --deployment reads Prometheus with its URL, queries, auth and TLS (default: the built-in "
        "defaults, which are config/default.yaml's)",
    )
    parser.add_argument(
        "--profile", default=None, help="which forecast profile of the config to run (default: default)"
    )
    parser.add_argument(
        "--sweep", default=None, metavar="KEY=V1,V2,...",
        help="also run the predictive policy once per value of one profile key (quantile, warm_pool, "
        "warm_pool_quantile, look_ahead, scale_down_stabilization, model, refit, history), e.g. "
        "warm_pool_quantile=90,95,99: one row each ('predictive@warm_pool_quantile=90', ...), scored like the "
        "others, to see the cost/attainment curve on your own history (a swept quantile or warm pool is pinned; "
        "the 'predictive' row self-tunes along the curve when the profile's self_tune is on, the default)",
    )
    parser.add_argument(
        "--model", default=None, help="forecast model for the predictive policy (default: the profile's model)"
    )
    parser.add_argument(
        "--taken-over", default=None, metavar="DURATION",
        help="the controller takes the Deployment over this far into the trace, as one an HPA scaled before (its "
        "history is in Prometheus): every policy runs the whole trace and is scored on what follows; ours runs its "
        "start point until then, and its first tuning replays the history before it at once (default: from the "
        "trace's start, a new Deployment)",
    )
    parser.add_argument(
        "--decision-interval", default=None,
        help="how often the predictive policy decides (default: the config's loop interval, 30s)",
    )
    parser.add_argument(
        "--ceiling-usd-per-hour", type=float, default=None, metavar="X",
        help="cost ceiling on the simulated cluster (replica GPUs + reserved gangs); every policy runs under it, "
        "never below min replicas",
    )
    parser.add_argument(
        "--gang", action="append", default=None, metavar="SPEC",
        help="a training gang, repeatable: gpus=16,at=48h,hours=4,window=24h[,priority=batch][,name=x]; at and "
        "window need a unit (s, m, h, d; 0 alone is zero), hours is a number of hours (or give duration=90m "
        "instead); reserved whole or not at all within [at, at+window]; the predictive policy places it in its "
        "forecast's trough",
    )
    parser.add_argument(
        "--inference-priority", default=None,
        help="priority of the simulated Deployment against gangs under the ceiling (tier or 0..1000; default "
        "production: it outranks every gang)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    parser.add_argument(
        "--plot", type=Path, default=None, metavar="OUT.png",
        help="also draw demand against each policy's capacity; the suffix picks the format "
        "(.png, .svg, .pdf, .jpg, .webp)",
    )
    add_arguments(parser, config=False)  # --config above also gives the Prometheus queries, auth and TLS
    parser.set_defaults(handler=run)


def _policies(spec: str) -> tuple[str, ...]:
    names = tuple(dict.fromkeys(n.strip() for n in spec.split(",") if n.strip()))
    if not names:
        raise UserError(f"--policies: no policy named; choose from {', '.join(POLICIES)}")
    for name in names:
        if name not in POLICIES:
            raise UserError(f"--policies: unknown policy {name!r}; choose from {', '.join(POLICIES)}")
    return names


def _numbers(flag: str, spec: str, ok: Callable[[float], bool], out_of_range: str, example: str) -> tuple[float, ...]:
    """A comma-separated list of numbers for ``flag`` (sorted, without repeats); one-line errors."""
    values: list[float] = []
    for raw in spec.split(","):
        if not raw.strip():
            continue
        try:
            value = float(raw)
        except ValueError:
            raise UserError(f"{flag}: {raw.strip()!r} is not a number (e.g. {example})") from None
        if not (math.isfinite(value) and ok(value)):
            raise UserError(f"{flag}: {raw.strip()} is out of range; {out_of_range}")
        values.append(value)
    if not values:
        raise UserError(f"{flag}: no target given (e.g. {example.split(' or ')[0]})")
    return tuple(sorted(set(values)))


def _targets(spec: str) -> tuple[float, ...]:
    return _numbers("--reactive-targets", spec, lambda v: 0 < v <= 1, "a utilisation target is in (0, 1]",
                    "0.5,0.7,0.9")


def _queue_targets(spec: str) -> tuple[float, ...]:
    return _numbers("--queue-targets", spec, lambda v: v > 0, "a waiting-requests target is > 0", "10 or 5,10,20")


def _bin_shape(value: str) -> str:
    if value not in BIN_SHAPES:
        raise UserError(f"--bin-shape: unknown shape {value!r}; choose from {', '.join(BIN_SHAPES)}")
    return value


_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def seconds_flag(flag: str, text: str) -> float:
    """A positive duration that may be fractional (``2s``, ``500ms``, ``1.5s``, ``1m``; a bare number is seconds:
    for a wait or a timeout, seconds are what a bare number means)."""
    s = str(text).strip().lower()
    unit = next((u for u in ("ms", "s", "m", "h") if s.endswith(u)), "")
    try:
        value = float(s[: len(s) - len(unit)]) * _SECONDS.get(unit, 1.0)
    except ValueError:
        raise UserError(f"{flag}: invalid duration {str(text).strip()!r} (use e.g. 2s, 500ms, 1m)") from None
    if not math.isfinite(value) or value <= 0:
        raise UserError(f"{flag}: must be positive, got {str(text).strip()}")
    return value


def _scenario_value(key: str, value: Any, base: Path) -> Any:
    """A scenario value converted to what the flag would hold; ``ValueError`` naming what is wrong."""
    if key == "trace":
        if not isinstance(value, str) or not value.strip():
            raise ValueError("expected a path to a trace CSV")
        path = Path(value)
        return path if path.is_absolute() else base / path
    if key in ("policies", "reactive_targets", "queue_targets"):
        if isinstance(value, list | tuple):
            return ",".join(str(v) for v in value)
        if isinstance(value, str | float | int) and not isinstance(value, bool):
            return str(value)
        raise ValueError("expected a list or a comma-separated string")
    if key == "config":
        if not isinstance(value, str) or not value.strip():
            raise ValueError("expected a path to a config file")
        path = Path(value)
        return path if path.is_absolute() else base / path
    if key in ("slo_wait", "timeout"):
        if isinstance(value, str | int | float) and not isinstance(value, bool):
            return str(value)
        raise ValueError(f"expected a duration (e.g. 2s, 500ms), got {value!r}")
    if key == "token_weights":
        if isinstance(value, list | tuple) and len(value) == 2:
            return ",".join(str(v) for v in value)
        if isinstance(value, Mapping) and set(value) <= {"input", "output"}:
            return f"{value.get('input', 1)},{value.get('output', 1)}"
        if isinstance(value, str):
            return value
        raise ValueError(f"expected [IN, OUT], {{input: IN, output: OUT}} or 'IN,OUT', got {value!r}")
    if key in ("pod_startup", "node_startup", "decision_interval", "model", "inference_priority", "profile", "sweep",
               "demand", "taken_over"):
        if isinstance(value, str | int) and not isinstance(value, bool):
            return str(value)
        raise ValueError(f"expected a string, got {value!r}")
    if key == "bin_shape":
        if isinstance(value, str) and value in BIN_SHAPES:
            return value
        raise ValueError(f"expected one of {', '.join(BIN_SHAPES)}, got {value!r}")
    if key in ("peak_replicas", "gpus_per_replica", "gpus_per_node"):
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise ValueError(f"expected an integer, got {value!r}")
    if key in ("capacity_per_replica", "gpu_hour_price", "ceiling_usd_per_hour"):
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        raise ValueError(f"expected a number, got {value!r}")
    raise AssertionError(key)  # pragma: no cover - keys are checked first


def _scenario_gangs(value: Any) -> list[GangSpec]:
    if not isinstance(value, list):
        raise ValueError("expected a list of gangs (mappings or gpus=..,at=..,hours=.. strings)")
    gangs: list[GangSpec] = []
    for i, item in enumerate(value):
        try:
            if isinstance(item, str):
                gangs.append(GangSpec.parse(item, f"gang-{i + 1}"))
            elif isinstance(item, Mapping):
                gangs.append(GangSpec.from_mapping({str(k): v for k, v in item.items()}, f"gang-{i + 1}"))
            else:
                raise ValueError(f"expected a mapping, got {item!r}")
        except ValueError as exc:
            raise ValueError(f"[{i}]: {exc}") from None
    return gangs


def apply_scenario(args: argparse.Namespace) -> argparse.Namespace:
    """Fill the options not given as flags from ``--scenario`` (if any), then from ``DEFAULTS``; parse gangs."""
    scenario: dict[str, Any] = {}
    gangs: list[GangSpec] | None = None
    if args.scenario is not None:
        where = f"--scenario {args.scenario}"
        try:
            raw = yaml.safe_load(Path(args.scenario).read_text())
        except OSError as exc:
            raise UserError(f"{where}: cannot read: {exc.strerror or exc}") from None
        except UnicodeDecodeError as exc:
            byte = exc.object[exc.start]
            raise UserError(f"{where}: not a YAML text file (byte 0x{byte:02x} is not UTF-8)") from None
        except yaml.YAMLError as exc:
            raise UserError(f"{where}: not valid YAML: {' '.join(str(exc).split())}") from None
        if raw is None:
            raw = {}
        if not isinstance(raw, Mapping):
            raise UserError(f"{where}: expected a mapping of options (e.g. ceiling_usd_per_hour: 120)")
        base = Path(args.scenario).resolve().parent
        for raw_key, value in raw.items():
            key = str(raw_key).replace("-", "_")
            if key not in SCENARIO_KEYS:
                raise UserError(f"{where}: unknown key {raw_key!r} (use {', '.join(SCENARIO_KEYS)})")
            try:
                if key == "gangs":
                    gangs = _scenario_gangs(value)
                else:
                    scenario[key] = _scenario_value(key, value, base)
            except ValueError as exc:
                sep = "" if str(exc).startswith("[") else ": "
                raise UserError(f"{where}: {key}{sep}{exc}") from None
        if "capacity_per_replica" in scenario and "peak_replicas" in scenario:
            raise UserError(f"{where}: capacity_per_replica and peak_replicas: give one, not both")
    if args.capacity_per_replica is not None or args.peak_replicas is not None:
        scenario.pop("capacity_per_replica", None)
        scenario.pop("peak_replicas", None)
    for key, default in DEFAULTS.items():
        if getattr(args, key) is None:
            setattr(args, key, scenario.get(key, default))
    if args.gang is not None:
        gangs = []
        for i, spec in enumerate(args.gang):
            try:
                gangs.append(GangSpec.parse(spec, f"gang-{i + 1}"))
            except ValueError as exc:
                raise UserError(f"--gang {spec!r}: {exc}") from None
    args.gangs = tuple(gangs or ())
    return args


# ``--sweep`` keys: the profile keys of the operator config, and the ``ForecastProfile`` field each sets.
SWEEP_KEYS: dict[str, str] = {
    "quantile": "quantile",
    "warm_pool": "warm_pool",
    "warm_pool_quantile": "warm_pool_quantile",
    "look_ahead": "look_ahead_seconds",
    "scale_down_stabilization": "scale_down_stabilization_seconds",
    "model": "model",
    "refit": "refit_seconds",
    "history": "history_seconds",
    "reactive_utilisation": "reactive_utilisation",
}


@dataclass(frozen=True)
class Tuning:
    """What the predictive policy runs with: the operator's profile, its decision interval, and the sweep."""

    profile: ForecastProfile
    interval_seconds: int
    sweep: tuple[tuple[str, ForecastProfile], ...] = ()  # (policy name, profile) per swept value


def parse_sweep(spec: str, base: ForecastProfile, config: Config) -> tuple[tuple[str, ForecastProfile], ...]:
    """``KEY=V1,V2,...`` -> one profile per value, each validated by the config parser (same messages)."""
    key, sep, values = spec.partition("=")
    key = key.strip().replace("-", "_")
    if not sep or not key:
        raise UserError(f"--sweep {spec!r}: expected KEY=V1,V2,... (e.g. quantile=75,90,95)")
    if key not in SWEEP_KEYS:
        raise UserError(f"--sweep: unknown profile key {key!r}; choose one of {', '.join(SWEEP_KEYS)}")
    raw_values = list(dict.fromkeys(v.strip() for v in values.split(",") if v.strip()))
    if not raw_values:
        raise UserError(f"--sweep {key}=: no value given (e.g. {key}=75,90,95)")
    # The base profile in the file's own spelling, so that each value is checked against the rest of it
    # (e.g. warm_pool_quantile >= quantile) with the config's own messages.
    as_file = Config(loop=config.loop, profiles={"default": replace(base, name="default")}).to_dict()
    out: list[tuple[str, ForecastProfile]] = []
    for raw in raw_values:
        try:
            value = yaml.safe_load(raw)
            profile_raw = {**as_file["profiles"]["default"], key: value}
            parsed = parse_config({"loop": as_file["loop"], "profiles": {"default": profile_raw}}, "--sweep")
        except yaml.YAMLError:
            raise UserError(f"--sweep {key}={raw}: not a valid value") from None
        except ConfigError as exc:
            raise UserError(f"--sweep {key}={raw}: {exc.errors[0] if exc.errors else exc}") from None
        field_name = SWEEP_KEYS[key]
        # A swept row is pinned at its value: self-tuning would move the very knob being swept.
        pinned = base.self_tune and field_name in ("quantile", "warm_pool", "warm_pool_quantile",
                                                   "reactive_utilisation")
        out.append((f"predictive@{key}={raw}", replace(base, **{field_name: getattr(parsed.profile("default"),
                                                                                   field_name)},
                                                       self_tune=base.self_tune and not pinned)))
    return tuple(out)


def tuning(args: argparse.Namespace, config: Config) -> Tuning:
    """The profile (``--profile`` of ``config``, ``--model``), decision interval and sweep of ``args``."""
    try:
        profile = config.profile(str(args.profile))
    except ConfigError as exc:
        raise UserError(f"--profile: {exc.errors[0] if exc.errors else exc}") from None
    if args.model is not None:
        _model_factory(str(args.model))  # a one-line error for an unknown model
        profile = replace(profile, model=str(args.model))
    interval = (
        duration_flag("--decision-interval", args.decision_interval)
        if args.decision_interval is not None
        else config.loop.interval_seconds
    )
    sweep = parse_sweep(str(args.sweep), profile, config) if args.sweep is not None else ()
    return Tuning(profile, interval, sweep)


def money_config(args: argparse.Namespace) -> MoneyConfig:
    """The ceiling and gangs of ``args`` (after ``apply_scenario``)."""
    ceiling = args.ceiling_usd_per_hour
    if ceiling is not None and not (math.isfinite(ceiling) and ceiling > 0):
        raise UserError(f"--ceiling-usd-per-hour: must be a number of dollars per hour > 0, got {ceiling:g}")
    try:
        priority = parse_priority(args.inference_priority, "--inference-priority")
        return MoneyConfig(ceiling, tuple(args.gangs), priority)
    except ValueError as exc:
        message = str(exc)
        raise UserError(message if message.startswith("--") else f"--gang: {message}") from None


def capacity_for(trace: Trace, args: argparse.Namespace) -> float:
    """Requests/s (tokens/s with ``--demand tokens``: then ``trace.requests`` holds the token demand) per replica
    from ``--capacity-per-replica`` or ``--peak-replicas``."""
    if args.capacity_per_replica is not None:
        cap = float(args.capacity_per_replica)
        if not (math.isfinite(cap) and cap > 0):
            what = "tokens/s" if getattr(args, "demand", None) == "tokens" else "requests/s"
            raise UserError(f"--capacity-per-replica: must be a positive number of {what}, got {cap:g}")
        return cap
    peak_replicas = DEFAULT_PEAK_REPLICAS if args.peak_replicas is None else int(args.peak_replicas)
    if peak_replicas < 1:
        raise UserError(f"--peak-replicas: must be an integer >= 1, got {peak_replicas}")
    values = trace.requests.values
    peak = float(np.nanmax(values)) if np.any(np.isfinite(values)) else 0.0
    if peak <= 0:
        raise UserError(f"{trace.name}: the trace has no traffic, so --peak-replicas cannot size a replica; "
                        "use --capacity-per-replica")
    return peak / peak_replicas


def _model_factory(name: str) -> Callable[[], Forecaster]:
    from models import registry  # deferred: model modules import statsmodels/prophet

    try:
        registry.make_chain(name)
    except registry.UnknownModelError as exc:
        raise UserError(f"--model: {exc}") from None

    def make() -> Forecaster:
        return registry.make_chain(name)

    return make


def build_config(trace: Trace, args: argparse.Namespace) -> SimulationConfig:
    if args.gpus_per_replica < 1:
        raise UserError(f"--gpus-per-replica: must be an integer >= 1, got {args.gpus_per_replica}")
    if args.gpus_per_node < args.gpus_per_replica:
        raise UserError(
            f"--gpus-per-node: {args.gpus_per_node} is fewer than --gpus-per-replica {args.gpus_per_replica}; "
            "a replica could never be scheduled"
        )
    price = float(args.gpu_hour_price)
    if not (math.isfinite(price) and price >= 0):
        raise UserError(f"--gpu-hour-price: must be a number >= 0, got {args.gpu_hour_price:g}")
    cluster = ClusterConfig(
        pod_startup_seconds=duration_flag("--pod-startup", args.pod_startup),
        node_startup_seconds=duration_flag("--node-startup", args.node_startup),
        gpus_per_replica=args.gpus_per_replica,
        gpus_per_node=args.gpus_per_node,
    )
    cap = capacity_for(trace, args)
    values = trace.requests.values
    peak_need = math.ceil(float(np.nanmax(values)) / cap) if np.any(np.isfinite(values)) else 1
    taken_over = 0 if args.taken_over is None else duration_flag("--taken-over", args.taken_over)
    if taken_over >= trace.duration_seconds:
        raise UserError(f"--taken-over {args.taken_over}: at or after the trace's end "
                        f"({span_text(trace.duration_seconds)}); nothing would be scored")
    money = money_config(args)
    if taken_over and money.active:
        raise UserError("--taken-over scores the days after the takeover; a cost ceiling or gangs are scored on the "
                        "whole trace: run them apart")
    return SimulationConfig(
        capacity_per_replica=cap,
        cluster=cluster,
        gpu_hour_price=price,
        min_replicas=1,
        # high enough never to bind: the comparison is about timing, not a replica cap
        max_replicas=max(100, 4 * peak_need),
        reactive_targets=_targets(args.reactive_targets),
        policies=_policies(args.policies),
        money=money,
        queue=queue_config(args),
        queue_targets=_queue_targets(str(args.queue_targets)),
        bin_shape=_bin_shape(str(args.bin_shape)),
        taken_over_seconds=taken_over,
    )


def queue_config(args: argparse.Namespace) -> QueueConfig:
    """``--slo-wait`` and ``--timeout`` (after ``apply_scenario`` and ``assumptions_from_config``).

    The SLO wait must be shorter than the timeout: a request is dropped at the timeout, so an objective at or past
    it would count every request that was served at all as on time (99.97% "attained" with a 10 s timeout and a
    30 s objective), a number that measures nothing.
    """
    timeout = seconds_flag("--timeout", str(args.timeout))
    slo_wait = seconds_flag("--slo-wait", str(args.slo_wait))
    if slo_wait >= timeout:
        where = "--slo-wait" if getattr(args, "slo_wait_from", None) is None else args.slo_wait_from
        raise UserError(f"{where} {_seconds_text(slo_wait)} is not shorter than --timeout {_seconds_text(timeout)}: a "
                        "request is dropped at the timeout, so the objective could not be missed by waiting; give an "
                        "SLO wait under the timeout")
    return QueueConfig(timeout_seconds=timeout, slo_wait_seconds=slo_wait)


def _seconds_text(seconds: float) -> str:
    return f"{seconds * 1000:g}ms" if seconds < 1 else f"{seconds:g}s"


def operator_config(args: argparse.Namespace) -> Config:
    """The operator config of ``--config`` (the built-in defaults without it); a one-line error when it is bad."""
    if args.config is None:
        return DEFAULT_CONFIG
    try:
        return load_config(args.config)
    except ConfigError as exc:
        raise UserError(f"--config: {exc}") from None


def assumptions_from_config(args: argparse.Namespace, config: Config) -> None:
    """Fill the cluster's start-ups, GPU price and the SLO wait that neither a flag nor the scenario gave from the
    operator config, so that the simulated cluster is the one the controller plans for: ``cold_start`` (the
    start-up priors the controller plans with), ``pricing.default_gpu_hour`` and the profile's ``slo_wait``."""
    if args.pod_startup is None:
        args.pod_startup = format_duration(config.cold_start.pod_startup_seconds)
    if args.node_startup is None:
        args.node_startup = format_duration(config.cold_start.node_startup_seconds)
    if args.gpu_hour_price is None:
        args.gpu_hour_price = config.pricing.default_gpu_hour
    args.slo_wait_from = None
    if args.slo_wait is None:
        try:
            profile = config.profile(str(args.profile))
        except ConfigError as exc:
            raise UserError(f"--profile: {exc.errors[0] if exc.errors else exc}") from None
        args.slo_wait = f"{profile.slo_wait_seconds}s"
        args.slo_wait_from = (f"the slo_wait of profile {profile.name!r}" + (" in --config" if args.config else "")
                              + " (--slo-wait)")


def _pct(x: float) -> str:
    return f"{100 * x:.3f}%"


def summary_lines(result: SimulationResult) -> list[str]:
    """The comparison lines under the table: predictive vs the HPA at equal GPU-hours, and vs the oracle."""
    lines: list[str] = []
    oracle = result.policies.get("oracle")
    for name, pred in result.policies.items():
        if name == "predictive" or name.startswith("predictive@"):
            lines += _comparison(name, pred, result.reactive(), oracle)
    return lines


def _comparison(name: str, pred: PolicyResult, reactive: list[PolicyResult], oracle: PolicyResult | None) -> list[str]:
    lines: list[str] = []
    label = "Predictive" if name == "predictive" else name
    same = reactive_at(pred.gpu_hours, reactive)
    if same is not None:
        where = (
            f"outside the targets' range, nearest {same.between[0]}"
            if same.extrapolated
            else f"interpolated between {same.between[0]} and {same.between[1]}"
        )
        verdict = _cut_text(pred.unserved_fraction, same.unserved_fraction, "unserved requests",
                            "the HPA served everything at this spend")
        lines.append(
            f"{label} vs reactive HPA at the same {pred.gpu_hours:.1f} GPU-hours ({where}): unserved "
            f"{_pct(pred.unserved_fraction)} vs {_pct(same.unserved_fraction)} -> {verdict}."
        )
        hpa_attained = reactive_metric_at(pred.gpu_hours, reactive, "slo_attainment")
        if hpa_attained is not None:
            slo = _cut_text(1 - pred.slo_attainment, 1 - hpa_attained, "SLO misses",
                            "the HPA met the SLO for every request at this spend")
            lines.append(
                f"{label} vs reactive HPA at the same GPU-hours, under the queue: SLO attainment "
                f"{_pct(pred.slo_attainment)} vs {_pct(hpa_attained)} -> {slo}."
            )
    if oracle is not None and oracle.gpu_hours > 0:
        lines.append(
            f"{label} holds {pred.gpu_hours / oracle.gpu_hours:.2f}x the oracle's GPU-hours "
            f"(perfect foresight, never short: {oracle.gpu_hours:.1f})."
        )
    return lines


def _cut_text(ours: float, theirs: float, what: str, none_to_cut: str) -> str:
    """``N% fewer <what>`` (or ``N% MORE <what>``) of ``ours`` against ``theirs``; ``none_to_cut`` when theirs is 0."""
    if theirs <= 0:
        return none_to_cut
    cut = 1 - ours / theirs
    return f"{100 * cut:.0f}% fewer {what}" if cut >= 0 else f"{-100 * cut:.0f}% MORE {what}"


def span_text(seconds: int) -> str:
    """``'14.0 days'``, ``'6.0 hours'``, ``'45 minutes'``: a trace's length in the unit a person reads it in (an
    hour-long trace is not "0.0 days")."""
    if seconds >= 2 * 86_400:
        return f"{seconds / 86_400:.1f} days"
    if seconds >= 2 * 3600:
        return f"{seconds / 3600:.1f} hours"
    if seconds >= 120:
        return f"{seconds / 60:.0f} minutes"
    return f"{seconds} seconds"


def objective_line(result: SimulationResult, objective: tuple[float, float] | None, what: str = "requests") -> str:
    """The verdict on the self-tuned ``predictive`` row's own objective (``attainment`` within ``wait`` seconds):
    met, or MISSED, with the attainment it reached; ``''`` when the row did not tune for one."""
    pred = result.policies.get("predictive")
    if objective is None or pred is None:
        return ""
    attainment, wait = objective
    met = pred.slo_attainment >= attainment
    verdict = "met" if met else "MISSED"
    return (f"Predictive {verdict} the objective it tunes itself for, {100 * attainment:g}% of {what} started within "
            f"{_seconds_text(wait)}: {_pct(pred.slo_attainment)} did"
            f"{'' if met else f', {100 * (attainment - pred.slo_attainment):.3f} points short'}.")


def hpa_pick_line(result: SimulationResult, objective: tuple[float, float] | None) -> str:
    """The self-tuned ``predictive`` row against the HPA target a user would pick for its objective
    (``engine.hpa_a_user_picks``: the cheapest that met it, else the one that attained most): the GPU-hours each
    held. ``''`` when the row did not tune for an objective or no HPA target ran."""
    pred = result.policies.get("predictive")
    picked = hpa_a_user_picks(result.reactive(), objective[0]) if objective is not None else None
    if pred is None or picked is None or picked[0].gpu_hours <= 0:
        return ""
    hpa, met = picked
    which = ("the cheapest that met the objective" if met
             else "none met the objective, so the one that attained most")
    ratio = pred.gpu_hours / hpa.gpu_hours
    held = f"{100 * (1 - ratio):.0f}% fewer GPU-hours" if ratio <= 1 else f"{100 * (ratio - 1):.0f}% MORE GPU-hours"
    return (f"Predictive vs the HPA target a user would pick, {which}: {hpa.name} at {hpa.gpu_hours:.1f} GPU-hours "
            f"and {_pct(hpa.slo_attainment)} -> predictive held {held}.")


def objective_json(result: SimulationResult, objective: tuple[float, float]) -> dict[str, Any]:
    """The JSON's ``objective`` (the self-tuned ``predictive`` row's): the share and wait it tunes for, whether it
    met it, and the HPA target a user would pick (``engine.hpa_a_user_picks``) with whether that one met it."""
    attainment, wait = objective
    pred = result.policies.get("predictive")
    picked = hpa_a_user_picks(result.reactive(), attainment)
    return {
        "slo_attainment": attainment,
        "slo_wait_seconds": wait,
        "met": pred is not None and pred.slo_attainment >= attainment,
        "hpa_pick": None if picked is None else {"policy": picked[0].name, "met": picked[1]},
    }


def format_table(result: SimulationResult, trace: Trace, config: SimulationConfig, sizing: str = "",
                 unit: str = "req/s", objective: tuple[float, float] | None = None) -> str:
    """The table a person reads; ``objective`` (attainment, wait) is the self-tuned predictive row's, when it has
    one, for the verdict line."""
    c = config.cluster
    tokens = unit != "req/s"
    step = trace.step_seconds
    step_text = f"{step // 60}-minute" if step % 60 == 0 else f"{step}-second"
    head = [
        f"Simulated {trace.name}: {span_text(trace.duration_seconds)} of {step_text} bins, {result.tick_seconds}s "
        "ticks.",
        f"Replica = {config.capacity_per_replica:.4g} {unit}{sizing}.",
        f"Pod start-up {c.pod_startup_seconds}s, node start-up {c.node_startup_seconds}s, "
        f"{c.gpus_per_replica} GPU/replica, {c.gpus_per_node} GPUs/node, ${config.gpu_hour_price:.2f}/GPU-hour.",
        f"Queue: FIFO in front of the Ready replicas, timeout {config.queue.timeout_seconds:g}s; SLO: start within "
        f"{config.queue.slo_wait_seconds:g}s. Bins replayed {result.bin_shape} inside (--bin-shape).",
        "",
    ]
    if config.taken_over_seconds:
        head.insert(1, f"Taken over after {span_text(config.taken_over_seconds)} (--taken-over): every policy ran the "
                       f"whole trace; the scores below are of the {span_text(len(result.demand) * result.tick_seconds)}"
                       " after it. Ours ran its start point until then, and its first tuning replayed the history "
                       "before it at once, as for a Deployment an HPA scaled before.")
    money = config.money
    if money.ceiling_usd_per_hour is not None:
        head.insert(-1, f"Cost ceiling ${money.ceiling_usd_per_hour:,.2f}/h on the simulated cluster "
                        f"(= {money.ceiling_usd_per_hour / config.gpu_hour_price:.1f} GPUs)."
                    if config.gpu_hour_price > 0 else f"Cost ceiling ${money.ceiling_usd_per_hour:,.2f}/h.")
    for gang in money.gangs:
        head.insert(-1, f"Gang {gang.describe()}.")
    cold = "cold-start tokens" if tokens else "cold-start req"
    cols: tuple[str, ...] = ("policy", "GPU-hours", "cost $", "SLO attained", "wait p99 s", "dropped", "unserved",
                             cold, "scale events", "max replicas")
    if money.active:
        cols += ("ceiling-unserved", "breaches", "gangs split", "gang wait h", "missed", "preempted")
    rows = [cols]
    for name, r in result.policies.items():
        row: tuple[str, ...] = (
            name,
            f"{r.gpu_hours:.1f}",
            f"{r.cost_usd:,.0f}",
            _pct(r.slo_attainment),
            f"{r.wait_p99_seconds:.1f}",
            _pct(r.dropped_fraction),
            _pct(r.unserved_fraction),
            f"{r.cold_start_requests:,.0f}",
            str(r.scale_events),
            str(r.max_replicas),
        )
        if money.active:
            row += (_pct(r.ceiling_unserved_fraction), str(r.ceiling_breaches), str(r.gangs_split),
                    f"{r.gang_wait_hours:.1f}", str(r.gangs_missed), str(r.gangs_preempted))
        rows.append(row)
    widths = [max(len(row[i]) for row in rows) for i in range(len(cols))]
    body = [
        "  ".join(
            cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(zip(row, widths, strict=True))
        )
        for row in rows
    ]
    body.insert(1, "  ".join("-" * w for w in widths))
    verdict = [line for line in (objective_line(result, objective, "tokens" if tokens else "requests"),
                                 hpa_pick_line(result, objective)) if line]
    summary = [*summary_lines(result), *verdict]
    notes = ["", *summary] if summary else []
    legend = [
        "",
        f"SLO attained: requests that started within {config.queue.slo_wait_seconds:g}s of arriving, over all "
        "requests (dropped ones are misses).",
        f"wait p99 s: the 99th percentile wait (a dropped request counts as the {config.queue.timeout_seconds:g}s "
        "timeout); dropped: requests still waiting at the timeout.",
        "unserved: requests that arrived above Ready capacity, over all requests (no queue: the capacity shortfall).",
        f"{cold}: of those, the {'tokens' if tokens else 'requests'} that replicas already asked for but still "
        "starting would have served.",
        "GPU-hours: each replica's GPUs from the moment it is asked for until it is released.",
    ]
    if unit != "req/s":
        legend.append(f"Demand in {unit}: the queue holds tokens, so SLO attained, wait, dropped and unserved are "
                      "shares of tokens (a request's tokens stand for the request).")
    if money.active:
        legend += [
            "GPU-hours and cost include the gangs' GPUs, from reservation to the end of the run.",
            "ceiling-unserved: of the unserved requests, those between the capacity the ceiling allowed and the "
            "capacity the policy asked for.",
            "gang wait h: time gangs were submitted but held no GPUs; missed: window closed before a run started; "
            "preempted: runs lost to inference under the ceiling.",
        ]
    return "\n".join(head + body + notes + legend + [f"Notes: {n}" for n in result.notes])


def cluster_json(config: SimulationConfig, unit: DemandUnit) -> dict[str, Any]:
    """Every assumption a run was made under (the JSON's ``cluster``), so that a result can be reproduced from its
    own file: start-ups, price, replica size and GPUs, and the queue's objective and timeout."""
    c = config.cluster
    return {
        "pod_startup_seconds": c.pod_startup_seconds,
        "node_startup_seconds": c.node_startup_seconds,
        "gpu_price_per_hour": config.gpu_hour_price,
        "capacity_per_replica": config.capacity_per_replica,
        "capacity_unit": units_json(unit)["capacity_per_replica"],
        "gpus_per_replica": c.gpus_per_replica,
        "gpus_per_node": c.gpus_per_node,
        "slo_wait_seconds": config.queue.slo_wait_seconds,
        "timeout_seconds": config.queue.timeout_seconds,
    }


def units_json(unit: DemandUnit) -> dict[str, str]:
    """What the JSON's unit-bearing numbers count: with ``--demand tokens`` the queue holds tokens, so
    ``cold_start_requests`` is a number of tokens and the fractions are shares of tokens."""
    what = "tokens" if unit is DemandUnit.TOKENS else "requests"
    return {"demand": f"{what}/s", "capacity_per_replica": f"{what}/s", "cold_start_requests": what,
            "fractions_of": what}


def check_gaps(trace: Trace, source: str) -> None:
    """What a gap means here, decided before the replay: a gap is missing data (no demand to score; every policy
    but the oracle holds its replicas through it, billed). A trace mostly missing is refused (a stray row or a
    wrong file); a gap longer than :data:`LONG_GAP_SECONDS` is replayed with a warning; a replay of more than
    :data:`MAX_SIMULATED_TICKS` ticks is refused before anything is allocated for it."""
    holes = gaps(trace.requests)
    if holes.share > MOSTLY_MISSING:
        raise UserError(f"{source}: {holes.describe()}; a replay would mostly hold replicas through missing data: "
                        "cut the trace to the part with data")
    step = trace.step_seconds
    tick = tick_seconds_for(step)
    ticks = len(trace.requests) * (step // tick)
    if ticks > MAX_SIMULATED_TICKS:
        raise UserError(f"{source}: {format_span(trace.duration_seconds)} in {format_span(step)} bins is {ticks:,} "
                        f"ticks of {tick}s, more than the {MAX_SIMULATED_TICKS:,} one replay may hold (about 2 GB): "
                        "simulate a shorter part of the trace")
    if holes.longest_seconds > LONG_GAP_SECONDS:
        warn("simulate", f"{source}: {holes.describe()}; replayed as missing data: every policy but the oracle holds "
                         "its replicas through a gap, and GPU-hours count them")


def run(args: argparse.Namespace) -> int:
    from autoscaler.simulation.engine import simulate
    from autoscaler.simulation.predictive import factory

    if getattr(args, "fleet", None) is not None:
        from autoscaler.commands import simulate_fleet

        return simulate_fleet.run(args)
    check_source_flags(args, args.trace)
    args = apply_scenario(args)
    from_prometheus = wants_prometheus(args)
    if from_prometheus and args.trace is not None:
        raise UserError(f"--scenario {args.scenario}: its trace and --prometheus-url/--deployment are mutually "
                        "exclusive: read the history from a file or from Prometheus, not both")
    # Every flag that can be checked without the trace is checked before it loads (a long run must not end
    # in a bad-flag error).
    for flag, value in (("--pod-startup", args.pod_startup), ("--node-startup", args.node_startup),
                        ("--decision-interval", args.decision_interval), ("--taken-over", args.taken_over)):
        if value is not None:
            duration_flag(flag, str(value))
    operator = operator_config(args)
    assumptions_from_config(args, operator)
    queue_config(args)
    _queue_targets(str(args.queue_targets))
    policies = _policies(str(args.policies))
    _bin_shape(str(args.bin_shape))
    if args.plot is not None:
        plot_flag(args.plot)
    unit, weights = demand_flags(args)
    tune = tuning(args, operator)
    if tune.sweep and "predictive" not in policies:
        raise UserError("--sweep varies the predictive policy: keep 'predictive' in --policies")
    synthetic = not from_prometheus and args.trace is None
    if from_prometheus:
        trace, url = trace_from_args(args, now=SystemClock().now(), tokens=unit is DemandUnit.TOKENS,
                                     config=operator, title="fetch")
        source = f"{trace.name} from Prometheus at {url}"
    elif args.trace is not None:
        source = str(args.trace)
        trace = load_trace(args.trace)
    else:
        from autoscaler.synth import synth_trace

        trace = synth_trace()
        source = trace.name
    if trace.nan_values:
        warn("simulate", f"{source}: {trace.nan_values:,} values are NaN; they are replayed as missing data (gaps), "
                         "not as zeros")
    # With --demand tokens the replay sizes on weighted tokens/s: the demand series every policy sees (and the
    # queue serves, a token at a time) is the token rate, and a replica's capacity is tokens/s.
    trace = replace(trace, requests=demand_series(trace, unit, weights, source=source))
    check_gaps(trace, source)
    if not args.keep_outages:
        from models.clean import prepare  # deferred: pandas, paid only when the command runs

        trace = replace(trace, requests=prepare(trace.requests))
    config = build_config(trace, args)

    def predictive_for(profile: ForecastProfile) -> PredictiveFactory:
        make_model = _model_factory(profile.model)
        retune = None
        if profile.self_tune and profile.warm_pool == "auto":
            from autoscaler.simulation.tuning import retuner

            # The objective scored here (--slo-wait) at the profile's attainment, as the controller tunes it.
            retune = retuner(make_model, quantiles=profile.tune_quantiles, utilisations=profile.tune_utilisations,
                             slo_wait_seconds=config.queue.slo_wait_seconds, slo_attainment=profile.slo_attainment,
                             warmup_seconds=profile.history_seconds, gpus_per_node=config.cluster.gpus_per_node,
                             timeout_seconds=config.queue.timeout_seconds, horizon_seconds=profile.horizon_seconds)
        return factory(make_model, decision_interval_seconds=tune.interval_seconds, profile=profile, retune=retune)

    predictive = predictive_for(tune.profile) if "predictive" in config.policies else None
    persistence = (
        factory(_model_factory("persistence"), decision_interval_seconds=tune.interval_seconds,
                profile=replace(tune.profile, model="persistence"), name="predictive-persistence")
        if "predictive-persistence" in config.policies else None
    )
    runs = _run_count(config) + len(tune.sweep)
    state: dict[str, Any] = {"name": "", "done": 0}

    def progress(name: str) -> None:
        state["name"], state["done"] = name, state["done"] + 1
        if sys.stderr.isatty():
            print(f"simulating {name} ...", file=sys.stderr, flush=True)

    def status() -> str:
        return f"simulating {state['name']} (run {state['done']} of {runs})"

    heartbeat = contextlib.nullcontext() if sys.stderr.isatty() else Heartbeat(sys.stderr, "simulate", status)
    try:
        with heartbeat:
            result = simulate(trace.requests, config, trace.name, predictive=predictive, progress=progress,
                              persistence=persistence)
            only_predictive = replace(config, policies=("predictive",))
            for name, profile in tune.sweep:
                progress(name)
                extra = simulate(trace.requests, only_predictive, trace.name, predictive=predictive_for(profile))
                result.policies[name] = extra.policies["predictive"]
    except ValueError as exc:
        raise UserError(str(exc)) from None
    objective = (tune.profile.slo_attainment, config.queue.slo_wait_seconds) \
        if predictive is not None and tune.profile.self_tune and tune.profile.warm_pool == "auto" else None
    if args.json:
        payload = {**result.to_json(), "cluster": cluster_json(config, unit), "units": units_json(unit)}
        if config.taken_over_seconds:  # the scores are of what follows it
            payload["taken_over_seconds"] = config.taken_over_seconds
        if objective is not None:
            payload["objective"] = objective_json(result, objective)
        if unit is DemandUnit.TOKENS:
            payload = {**payload, "demand": unit.value, "token_weights": {"input": weights.input,
                                                                          "output": weights.output},
                       "capacity_per_replica": config.capacity_per_replica}
        print(json.dumps(payload), flush=True)
    else:
        if synthetic:
            from autoscaler.synth import describe

            print(describe(trace))
            print()
        sizing = f" (tokens: {weights.describe()})" if unit is DemandUnit.TOKENS else ""
        if args.capacity_per_replica is None:
            n = DEFAULT_PEAK_REPLICAS if args.peak_replicas is None else args.peak_replicas
            sizing += f" (the trace's busiest bin needs {n} replicas; set --peak-replicas or --capacity-per-replica)"
        print(format_table(result, trace, config, sizing, unit_label(unit), objective), flush=True)
    if args.plot is not None:
        from autoscaler.sim_plot import plot_simulation

        return write_plot(
            lambda: plot_simulation(result, args.plot, unit="tokens/s" if unit is DemandUnit.TOKENS else "requests/s"),
            args.plot, "simulate", quiet=args.json)
    return 0


def _run_count(config: SimulationConfig) -> int:
    """How many policy runs one ``simulate`` call makes (for the progress lines)."""
    count = sum(name in config.policies for name in ("predictive", "predictive-persistence", "oracle"))
    count += len(config.reactive_targets) if "reactive" in config.policies else 0
    count += len(config.prodstack_targets) if "prodstack-queue" in config.policies else 0
    count += len(config.keda_thresholds) if "keda-queue" in config.policies else 0
    return count + (len(config.queue_targets) if "hpa-queue" in config.policies else 0)
