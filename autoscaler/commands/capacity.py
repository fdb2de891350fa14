"""``predictive-autoscaler capacity NS/NAME``: the requests/s one replica serves, learned from Prometheus.

Why it exists: ``capacity-per-replica: auto`` has the controller learn a Deployment's capacity from its own vLLM
history (``autoscaler.domain.learned_capacity``) and hold its replicas until the evidence is enough. An inference
team wants to see that number, and why it is (not yet) trusted, before the controller acts on it, or to choose a
fixed annotation: this command runs the same estimate on the same series (``autoscaler.history.
read_capacity_inputs``, the loop's read: same queries, namespace restriction, pod-to-Deployment mapping and
missing-data policies) and prints the estimate and its evidence.

"Not enough evidence" is an answer, not an error (exit 0): the Deployment was read, and what it lacks is
saturation. Errors (a bad flag or URL, Prometheus unreachable, a refused query, no such Deployment) are one line
on stderr and exit 2, through the same messages as ``export``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from datetime import UTC, datetime

from autoscaler.cli import add_target_arguments, target_of
from autoscaler.domain.annotations import parse_duration_seconds
from autoscaler.domain.learned_capacity import EvidenceRules, LearnedCapacity, estimate_capacity
from autoscaler.errors import UserError
from autoscaler.history import (
    CAPACITY_INPUTS,
    FLEET_POINTS_PER_REQUEST,
    DeploymentHistory,
    HistoryArgs,
    no_series,
    parse_args,
    prometheus_errors,
    prometheus_source,
    read_capacity_inputs,
)
from autoscaler.progress import progress_for
from autoscaler.runtime.clock import SystemClock

DEFAULT_SINCE = "7d"

DESCRIPTION = (
    "Estimate the requests/s one Ready replica of a Deployment serves within its latency objective, from its own "
    "vLLM metrics in Prometheus, as the controller does for capacity-per-replica: auto. The estimate is the "
    "completed requests per replica in the intervals where the replicas were saturated (requests waiting, KV cache "
    "nearly full, or time-to-first-token over --slo-wait); intervals without saturation only give a lower bound. "
    "Prints the estimate and its evidence, or 'not enough evidence: ...' with why (exit status 0 either way: the "
    "controller then holds the Deployment's replicas instead of guessing). Errors exit 2 with one line on stderr."
)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "capacity", help="estimate a Deployment's requests/s per replica from its vLLM history",
        description=DESCRIPTION,
    )
    add_target_arguments(parser, "serving/llama-chat")
    parser.add_argument("--prometheus-url", default=None, metavar="URL",
                        help="Prometheus to read from (default: prometheus.url of --config)")
    parser.add_argument("--config", default=None, metavar="FILE.yaml",
                        help="the controller's config file or ConfigMap directory: custom queries, bearer token "
                             "file, CA bundle, timeout, retries, the default profile's slo_wait")
    parser.add_argument("--since", default=DEFAULT_SINCE, metavar="DURATION",
                        help=f"how much history, ending now (default: {DEFAULT_SINCE})")
    parser.add_argument("--step", default=None, metavar="DURATION",
                        help="bin size (default: the config's loop.step, 1m)")
    parser.add_argument("--until", default=None, metavar="TIME",
                        help="end of the history instead of now: Unix seconds or ISO 8601 with a zone")
    parser.add_argument("--slo-wait", default=None, metavar="DURATION",
                        help="the latency objective: time-to-first-token above it counts as saturated (default: "
                             "the default profile's slo_wait, 2s)")
    parser.add_argument("--json", action="store_true", help="print the estimate and its evidence as JSON")
    parser.set_defaults(handler=run)


def _target(text: str) -> tuple[str, str]:
    namespace, sep, name = text.strip().partition("/")
    if not sep or not namespace or not name or "/" in name:
        raise UserError(f"expected NAMESPACE/NAME (e.g. serving/llama-chat), got {text!r}")
    return namespace, name


def _iso(t: int) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _slo_wait(args: argparse.Namespace, h: HistoryArgs) -> float:
    """``--slo-wait`` in seconds (fractions allowed: ``500ms``, ``0.5s``), else the default profile's."""
    if args.slo_wait is None:
        return float(h.config.profile("default").slo_wait_seconds)
    text = str(args.slo_wait).strip().lower()
    try:
        value = float(text[:-2]) / 1000 if text.endswith("ms") else parse_duration_seconds(text)
    except ValueError:
        raise UserError(f"--slo-wait: invalid duration {args.slo_wait!r} (use e.g. 2s, 500ms)") from None
    if not math.isfinite(value) or value <= 0:
        raise UserError(f"--slo-wait: must be positive, got {args.slo_wait}")
    return value


def render(who: str, got: LearnedCapacity, url: str, h: HistoryArgs, slo_wait: float) -> list[str]:
    """The lines printed for a person (pure)."""
    window = f"{_iso(h.start)} to {_iso(h.end)} in {h.step}s bins, from Prometheus at {url}"
    if not got.enough:
        return [f"{who}: {got.reason}", f"  read {window}; latency objective {slo_wait:g}s"]
    assert got.estimate is not None
    signals = ", ".join(f"{name} {n}" for name, n in got.signals)
    return [
        f"{who}: {got.estimate:.4g} req/s per replica (confidence {got.confidence:.2f})",
        f"  evidence: {got.reason}",
        f"  saturated bins by signal: {signals}; {got.saturated_bins} of {got.usable_bins} bins with data",
        f"  read {window}; latency objective {slo_wait:g}s",
    ]


def run(args: argparse.Namespace) -> int:
    namespace, name = _target(target_of(args))
    args.deployment = f"{namespace}/{name}"
    h = parse_args(args, now=SystemClock().now())
    slo_wait = _slo_wait(args, h)
    source = prometheus_source(h.config.prometheus, h.url)
    n_bins = (h.end - h.start) // h.step
    queries = list(CAPACITY_INPUTS.values())
    bar = progress_for(n_bins * len(queries), queries, sys.stderr, "capacity")
    try:
        with prometheus_errors(h, source.url), source:
            inputs = read_capacity_inputs(source, h.config.prometheus, [namespace], h.start, h.end, h.step,
                                          chunk_bins=FLEET_POINTS_PER_REQUEST, progress=bar)
    finally:
        bar.close()
    key = (namespace, name)
    if key not in inputs:
        others = tuple(sorted(d for ns, d in inputs if ns == namespace))
        raise no_series(h, source.url, DeploymentHistory(namespace, name, h.start, h.end, h.step, None,
                                                         others=others), query=CAPACITY_INPUTS["completed"])
    got = estimate_capacity(inputs[key], EvidenceRules(slo_wait_seconds=slo_wait))
    who = f"{namespace}/{name}"
    if args.json:
        print(json.dumps({"deployment": who, "prometheus": source.url, "start": h.start, "end": h.end,
                          "step_seconds": h.step, "slo_wait_seconds": slo_wait, **got.to_dict()}, indent=2))
    else:
        print("\n".join(render(who, got, source.url, h, slo_wait)))
    return 0
