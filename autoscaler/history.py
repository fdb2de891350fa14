"""A Deployment's traffic history as the controller reads it from Prometheus: for the loop and for the CLI.

Why a module of its own: ``backtest``, ``simulate`` and ``export`` take ``--prometheus-url --deployment NS/NAME``
and promise *exactly the series the controller forecasts* for that Deployment. That holds by construction when
both read through the same function, so the loop's fetch (``autoscaler.runtime.loop``) and the commands call
:func:`fetch_fleet` here, with the same inputs:

* the same named query, ``prometheus.arrival_rate_query`` of the operator's config (``--config``; the built-in
  ``arrival_rate`` by default), with its custom templates, bearer token file, CA bundle, timeout and retries;
* the same template rendering (:mod:`autoscaler.promql`): restricted to the Deployment's namespace (a fleet
  query over one namespace), label values escaped, pods mapped to their Deployment by name;
* the same grid: ``end`` is ``now`` rounded down to a whole step, bin ``i`` covers ``[start + i*step,
  start + (i+1)*step)`` and is evaluated at its end with a one-step window (the adapter's time convention);
* the same policies of the adapter (``autoscaler.adapters.prometheus``): a Deployment without series is absent
  (never zero), NaN/Inf and bins without samples stay NaN, so a scrape outage is a gap in the history, not a
  quiet spell. Outage *zeros* are cleaned downstream, by the forecaster (``models.chain``) in the controller and
  by ``models.clean.prepare`` in ``backtest`` and ``simulate``, never here, so an exported trace replays what
  the controller saw.

Range requests are chunked as the controller chunks them (:data:`FLEET_POINTS_PER_REQUEST` evaluation times
each, the one constant both use): the commands split the window
here, one request per chunk, so that a progress bar can follow; the loop leaves the split to the adapter. Every
bin is evaluated at the same time either way (a subquery's steps are aligned to the epoch, not to the range), so
the answers are equal bin by bin.

The command-line side (flags, one-line errors, progress: a bar on a terminal, a line every few seconds
elsewhere) is at the end of the module.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol, TextIO
from urllib.parse import urlsplit

import numpy as np

from autoscaler import promql
from autoscaler.adapters.prometheus import (
    FleetHistory,
    PrometheusError,
    PrometheusQueryError,
    PrometheusSource,
    PrometheusUnavailable,
)
from autoscaler.cli import duration_flag
from autoscaler.config.parser import load_config
from autoscaler.config.schema import Config, ConfigError, PrometheusConfig
from autoscaler.domain.learned_capacity import CapacityInputs
from autoscaler.errors import UserError
from autoscaler.progress import progress_for
from autoscaler.traces import MAX_TRACE_BINS, Trace, trace_from_rates
from models.types import TrafficSeries

__all__ = [
    "CAPACITY_INPUTS",
    "FLEET_POINTS_PER_REQUEST",
    "TOKEN_QUERIES",
    "DeploymentHistory",
    "FleetSource",
    "HistoryArgs",
    "QueryFailed",
    "add_arguments",
    "check_source_flags",
    "fetch_fleet",
    "history_window",
    "no_series",
    "parse_args",
    "parse_deployment",
    "parse_time",
    "prometheus_errors",
    "prometheus_source",
    "read_capacity_inputs",
    "read_deployment",
    "read_from_args",
    "series_of",
    "trace_from_args",
    "wants_prometheus",
]

Key = tuple[str, str]

# Evaluation times per range request, for the controller (``run``) and the commands alike. A fleet answer holds
# one series per Deployment, and parsing it peaks at ~220 bytes a point: a first 14-day fetch of 1,000
# Deployments in Prometheus's maximal 11,000-point requests would peak near 4 GiB; at 720 points (12 hours of
# 1-minute bins) a request peaks near 160 MiB.
FLEET_POINTS_PER_REQUEST = 720

# Trace column -> the named query (``prometheus.queries``) that gives it, per second.
TOKEN_QUERIES: Mapping[str, str] = {"input_tokens": "prompt_token_rate", "output_tokens": "generation_token_rate"}


class FleetSource(Protocol):
    """What is read (``PrometheusSource`` is one): per-Deployment rates on ``[start, end)``, one query per call."""

    def fleet_history(
        self, query: str, namespaces: Iterable[str], start: int, end: int, step_seconds: int
    ) -> Mapping[Key, TrafficSeries]: ...


class QueryFailed(PrometheusError):
    """A named query was refused (Prometheus's message) or could not be rendered; ``query`` says which."""

    def __init__(self, query: str, cause: Exception) -> None:
        super().__init__(f"query {query}: {cause}")
        self.query = query
        self.cause = cause


def history_window(now: float, step: int, seconds: int) -> tuple[int, int]:
    """``(start, end)`` of the newest ``seconds`` of whole ``step`` bins before ``now``: the loop's grid."""
    end = (int(now) // step) * step
    return end - (seconds // step) * step, end


def series_of(answer: Mapping[Key, TrafficSeries], key: Key, start: int, end: int, step: int) -> TrafficSeries:
    """``key``'s series in a fleet answer over ``[start, end)``, or all NaN when it has none (missing, not zero)."""
    got = answer.get(key)
    return got if got is not None else TrafficSeries(np.full((end - start) // step, np.nan), step, start)


def _merge(parts: list[tuple[int, int, Mapping[Key, TrafficSeries]]], start: int, end: int, step: int) -> FleetHistory:
    """One answer over ``[start, end)`` from answers over consecutive chunks ``(lo, hi, answer)``."""
    n = (end - start) // step
    keys: dict[Key, None] = {}
    dropped: dict[Key, str] = {}
    warnings: list[str] = []
    for _, _, answer in parts:
        keys.update(dict.fromkeys(answer))
        if isinstance(answer, FleetHistory):
            dropped.update(answer.dropped)
            warnings.extend(w for w in answer.warnings if w not in warnings)
    values: dict[Key, TrafficSeries] = {}
    sources: dict[Key, tuple[str | None, ...]] = {}
    for key in keys:
        if key in dropped:  # ambiguous in one chunk: missing over the whole window, as one request would say
            continue
        out = np.full(n, np.nan)
        labels: list[str | None] = [None] * n
        labelled = False
        for lo, hi, answer in parts:
            first = (lo - start) // step
            got = answer.get(key)
            if got is not None:
                out[first : first + (hi - lo) // step] = got.values
            if isinstance(answer, FleetHistory) and key in answer.sources:
                labels[first : first + (hi - lo) // step] = answer.sources[key]
                labelled = True
        values[key] = TrafficSeries(out, step, start)
        if labelled:
            sources[key] = tuple(labels)
    return FleetHistory(values, dropped=dropped, warnings=warnings, sources=sources)


def fetch_fleet(
    source: FleetSource,
    query: str,
    namespaces: Iterable[str],
    start: int,
    end: int,
    step: int,
    *,
    chunk_bins: int | None = None,
    progress: Callable[[int], None] | None = None,
) -> Mapping[Key, TrafficSeries]:
    """Per-Deployment rates of ``query`` on ``[start, end)``: the loop's fetch and the commands'.

    Without ``chunk_bins``, one ``fleet_history`` call (the adapter splits it into requests). With it, one call
    per ``chunk_bins`` bins, ``progress(bins done)`` after each, and the answers merged into one
    ``FleetHistory`` (a Deployment ambiguous in any chunk is dropped over the whole window).
    """
    namespaces = sorted(set(namespaces))
    if chunk_bins is None:
        answer = source.fleet_history(query, namespaces, start, end, step)
        if progress is not None:
            progress((end - start) // step)
        return answer
    if chunk_bins < 1:
        raise ValueError(f"chunk_bins must be >= 1, got {chunk_bins}")
    parts: list[tuple[int, int, Mapping[Key, TrafficSeries]]] = []
    lo = start
    while lo < end:
        hi = min(end, lo + chunk_bins * step)
        parts.append((lo, hi, source.fleet_history(query, namespaces, lo, hi, step)))
        if progress is not None:
            progress((hi - start) // step)
        lo = hi
    return _merge(parts, start, end, step)


@dataclass(frozen=True)
class DeploymentHistory:
    """One Deployment's series over ``[start, end)`` (full window, NaN where nothing was read).

    ``tokens``: trace column (``input_tokens``, ``output_tokens``) -> tokens/s, for the token queries that
    answered for this Deployment. ``others``: Deployments of the same namespace that the arrival query answered
    for (for a "did you mean" when ``requests`` is None). ``dropped``: why the adapter left the Deployment out.
    """

    namespace: str
    name: str
    start: int
    end: int
    step: int
    requests: TrafficSeries | None
    tokens: dict[str, TrafficSeries] = field(default_factory=dict)
    others: tuple[str, ...] = ()
    dropped: str | None = None
    sources: tuple[str | None, ...] | None = None


def read_deployment(
    source: FleetSource,
    prometheus: PrometheusConfig,
    namespace: str,
    name: str,
    start: int,
    end: int,
    step: int,
    *,
    tokens: bool = False,
    chunk_bins: int | None = FLEET_POINTS_PER_REQUEST,
    progress: Callable[[int], None] | None = None,
) -> DeploymentHistory:
    """What the controller reads for ``namespace/name`` on ``[start, end)``; with ``tokens``, the token rates too.

    ``progress`` gets the bins done over all the queries run (``n_bins`` for the arrival rate, then ``n_bins``
    more per token query).
    """
    key = (namespace, name)
    n_bins = (end - start) // step

    def fetch(query: str, base: int) -> Mapping[Key, TrafficSeries]:
        def done(bins: int) -> None:
            if progress is not None:
                progress(base + bins)

        try:
            return fetch_fleet(source, query, [namespace], start, end, step, chunk_bins=chunk_bins, progress=done)
        except (PrometheusQueryError, promql.TemplateError) as exc:
            raise QueryFailed(query, exc) from exc

    answer = fetch(prometheus.arrival_rate_query, 0)
    dropped = answer.dropped.get(key) if isinstance(answer, FleetHistory) else None
    if key not in answer:
        others = tuple(sorted(d for ns, d in answer if ns == namespace))
        return DeploymentHistory(namespace, name, start, end, step, None, others=others, dropped=dropped)
    sources = answer.sources.get(key) if isinstance(answer, FleetHistory) else None
    token_series: dict[str, TrafficSeries] = {}
    if tokens:
        for i, (column, query) in enumerate(TOKEN_QUERIES.items(), start=1):
            got = fetch(query, i * n_bins).get(key)
            if got is not None and np.isfinite(got.values).any():
                token_series[column] = got
    return DeploymentHistory(namespace, name, start, end, step, answer[key], token_series, sources=sources)


# CapacityInputs field -> the named query (``prometheus.queries``) that gives it, per Deployment and bin.
CAPACITY_INPUTS: Mapping[str, str] = {
    "completed": "completion_rate",
    "replicas": "serving_replicas",
    "waiting": "requests_waiting",
    "kv_cache": "kv_cache_usage",
    "ttft": "ttft_p90",
}


def read_capacity_inputs(
    source: FleetSource,
    prometheus: PrometheusConfig,
    namespaces: Iterable[str],
    start: int,
    end: int,
    step: int,
    *,
    chunk_bins: int | None = None,
    progress: Callable[[int], None] | None = None,
) -> dict[Key, CapacityInputs]:
    """The capacity estimator's series (:data:`CAPACITY_INPUTS`) on ``[start, end)`` for every Deployment of
    ``namespaces`` that has completions (the others are absent), one fleet query per series: the loop's read and
    the ``capacity`` command's, with the same mapping, restriction and missing-data policies as the demand's. A
    series a Deployment lacks (an engine without the KV-cache gauge, say) is all NaN: one signal fewer.
    ``progress`` gets the bins done over all the queries. Raises :class:`QueryFailed` for a refused query."""
    n_bins = (end - start) // step
    answers: dict[str, Mapping[Key, TrafficSeries]] = {}
    for i, (field_name, query) in enumerate(CAPACITY_INPUTS.items()):
        def done(bins: int, base: int = i * n_bins) -> None:
            if progress is not None:
                progress(base + bins)

        try:
            answers[field_name] = fetch_fleet(source, query, namespaces, start, end, step, chunk_bins=chunk_bins,
                                              progress=done)
        except (PrometheusQueryError, promql.TemplateError) as exc:
            raise QueryFailed(query, exc) from exc
    out: dict[Key, CapacityInputs] = {}
    for key in answers["completed"]:
        series = {f: series_of(answers[f], key, start, end, step).values for f in CAPACITY_INPUTS}
        out[key] = CapacityInputs(start, step, **series)
    return out


def prometheus_source(cfg: PrometheusConfig, url: str | None = None, *,
                      max_points_per_request: int = FLEET_POINTS_PER_REQUEST) -> PrometheusSource:
    """The adapter as the controller builds it from its config (``url`` overrides ``prometheus.url``)."""
    chosen = cfg.url if url is None else url
    where = "--prometheus-url" if url is not None else "prometheus.url"
    try:
        parts = urlsplit(chosen)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError as exc:
        raise UserError(f"{where}: {chosen!r} is not a valid URL ({exc})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UserError(f"{where}: {chosen!r} is not an http:// or https:// URL with a host "
                        "(e.g. http://prometheus.monitoring:9090)")
    try:
        return PrometheusSource(
            chosen,
            bearer_token_file=cfg.bearer_token_file,
            ca_file=cfg.ca_file,
            timeout_seconds=cfg.timeout_seconds,
            retries=cfg.retries,
            queries=cfg.queries,
            max_points_per_request=max_points_per_request,
        )
    except ValueError as exc:
        raise UserError(f"prometheus: {exc}") from None


# ------------------------------------------------------------------------------------------- command line


def add_arguments(parser: argparse.ArgumentParser, *, config: bool = True, trace: bool = True) -> None:
    """``--prometheus-url``, ``--deployment``, ``--since``, ``--step``, ``--until`` (and ``--config`` unless the
    command has its own); ``trace``: the command also takes ``--trace``."""
    group = parser.add_argument_group(
        "history from Prometheus" + (" (instead of --trace)" if trace else ""),
        "read the arrival rate the controller forecasts for one Deployment: the same query, pod-to-Deployment "
        "mapping, namespace restriction and missing-data handling (a scrape outage stays a gap)",
    )
    group.add_argument("--prometheus-url", default=None, metavar="URL",
                       help="Prometheus to read from (default: prometheus.url of --config)")
    group.add_argument("--deployment", default=None, metavar="NS/NAME",
                       help="the Deployment whose history to read, e.g. serving/llama-chat")
    group.add_argument("--since", default=None, metavar="DURATION",
                       help="how much history, ending now (default: the config's loop.history, 14d)")
    group.add_argument("--step", default=None, metavar="DURATION",
                       help="bin size (default: the config's loop.step, 1m)")
    group.add_argument("--until", default=None, metavar="TIME",
                       help="end of the history instead of now: Unix seconds or ISO 8601 with a zone "
                            "(2024-05-01T12:00:00Z)")
    if config:
        group.add_argument("--config", default=None, metavar="FILE.yaml",
                           help="the controller's config file or ConfigMap directory: custom queries, bearer token "
                                "file, CA bundle, timeout, retries (default: the built-in defaults)")


def wants_prometheus(args: argparse.Namespace) -> bool:
    """Whether any flag of :func:`add_arguments` (other than ``--config``) was given."""
    return any(getattr(args, f, None) is not None for f in ("prometheus_url", "deployment", "since", "step", "until"))


def check_source_flags(args: argparse.Namespace, trace: object) -> None:
    """One source of history: ``--trace`` or Prometheus (``--prometheus-url``/``--deployment``), not both; and
    the Prometheus flags need ``--deployment``."""
    for flag in ("since", "step"):  # a bad duration gets its own line, whatever else is wrong
        if getattr(args, flag, None) is not None:
            duration_flag(f"--{flag}", str(getattr(args, flag)))
    if not wants_prometheus(args):
        return
    if trace is not None:
        raise UserError("--trace and --prometheus-url/--deployment are mutually exclusive: read the history from a "
                        "file or from Prometheus, not both")
    if args.deployment is None:
        given = next(f"--{f.replace('_', '-')}" for f in ("prometheus_url", "since", "step", "until")
                     if getattr(args, f, None) is not None)
        raise UserError(f"{given} needs --deployment NAMESPACE/NAME (the Deployment whose history to read)")


def parse_deployment(text: str) -> Key:
    """``--deployment NS/NAME`` -> ``(namespace, name)``."""
    namespace, sep, name = text.strip().partition("/")
    if not sep or not namespace or not name or "/" in name:
        raise UserError(f"--deployment: expected NAMESPACE/NAME (e.g. serving/llama-chat), got {text!r}")
    return namespace, name


def parse_time(flag: str, text: str) -> float:
    """Unix seconds or an ISO 8601 time with a zone."""
    try:
        value = float(text)
    except ValueError:
        try:
            parsed = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
        except ValueError:
            raise UserError(f"{flag}: not Unix seconds or an ISO 8601 time: {text!r}") from None
        if parsed.tzinfo is None:
            raise UserError(f"{flag}: time {text!r} has no zone (add Z or +00:00)") from None
        return parsed.timestamp()
    if not math.isfinite(value):
        raise UserError(f"{flag}: not Unix seconds or an ISO 8601 time: {text!r}")
    return value


def _human(seconds: float) -> str:
    for unit, size in (("d", 86_400), ("h", 3_600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:g}{unit}" if seconds % size == 0 else f"{seconds / size:.1f}{unit}"
    return f"{seconds:g}s"


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


@dataclass(frozen=True)
class HistoryArgs:
    """The parsed Prometheus flags of a command."""

    config: Config
    url: str | None
    namespace: str
    name: str
    since: int
    step: int
    start: int
    end: int


def parse_args(args: argparse.Namespace, config: Config | None = None, *, now: float) -> HistoryArgs:
    """Every Prometheus flag checked (one line each) before anything is read. ``now``: the command's wall clock
    (the default ``--until``); read by the command, the edge, so this module reads no clock."""
    namespace, name = parse_deployment(str(args.deployment))
    if config is None:
        config = Config()
        if getattr(args, "config", None) is not None:
            try:
                config = load_config(args.config)
            except ConfigError as exc:
                raise UserError(f"--config: {exc}") from None
    since = config.loop.history_seconds if args.since is None else duration_flag("--since", str(args.since))
    step = config.loop.step_seconds if args.step is None else duration_flag("--step", str(args.step))
    if since < step:
        raise UserError(f"--since {_human(since)} is shorter than one --step {_human(step)}")
    if since // step > MAX_TRACE_BINS:  # the same bound as a trace file's, before anything is requested
        raise UserError(f"--since {_human(since)} in --step {_human(step)} bins is {since // step:,} bins, more than "
                        f"the {MAX_TRACE_BINS:,} a trace may hold; use a larger --step or a shorter --since")
    if args.until is not None:
        now = parse_time("--until", str(args.until))
    start, end = history_window(now, step, since)
    return HistoryArgs(config, args.prometheus_url, namespace, name, since, step, start, end)


def no_series(h: HistoryArgs, url: str, history: DeploymentHistory, *, query: str | None = None) -> UserError:
    """The one line for a Deployment ``query`` (default: the arrival rate query) has no series for."""
    who = f"{h.namespace}/{h.name}"
    if history.dropped is not None:
        return UserError(f"Deployment {who}: {_one_line(history.dropped)}")
    if history.others:
        shown = ", ".join(history.others[:10]) + (", ..." if len(history.others) > 10 else "")
        seen = f"Deployments with series in namespace {h.namespace}: {shown}"
    else:
        seen = f"no Deployment in namespace {h.namespace} has series"
    return UserError(
        f"no series for Deployment {who} in Prometheus at {url} over the last {_human(h.since)} "
        f"(query {query or h.config.prometheus.arrival_rate_query}; {seen}): check the namespace and name, and that "
        f"its pods are named {h.name}-<hash>-<suffix> and their vLLM metrics carry the namespace and pod labels"
    )


@contextlib.contextmanager
def prometheus_errors(h: HistoryArgs, url: str) -> Iterator[None]:
    """Every failure of a read from Prometheus at ``url`` for ``h``'s Deployment as a one-line ``UserError``."""
    try:
        yield
    except PrometheusUnavailable as exc:
        raise UserError(f"cannot read from Prometheus: {_one_line(str(exc))}") from None
    except QueryFailed as exc:
        where = f"prometheus.queries.{exc.query}" if isinstance(exc.cause, promql.TemplateError) else (
            f"query {exc.query} for {h.namespace}/{h.name}")
        raise UserError(f"{where}: {_one_line(str(exc.cause))}") from None
    except PrometheusError as exc:
        raise UserError(f"Prometheus at {url}: {_one_line(str(exc))}") from None


def read_from_args(
    h: HistoryArgs, *, tokens: bool, stream: TextIO | None = None, title: str = "prometheus"
) -> tuple[DeploymentHistory, str]:
    """Read the Deployment named by ``h`` (a progress bar on ``stream`` when it is a terminal); every failure is a
    one-line ``UserError``. Returns the history and the URL read."""
    stream = sys.stderr if stream is None else stream
    source = prometheus_source(h.config.prometheus, h.url)
    n_bins = (h.end - h.start) // h.step
    queries = [h.config.prometheus.arrival_rate_query, *(TOKEN_QUERIES.values() if tokens else ())]
    bar = progress_for(n_bins * len(queries), queries, stream, title)
    try:
        with prometheus_errors(h, source.url), source:
            history = read_deployment(source, h.config.prometheus, h.namespace, h.name, h.start, h.end, h.step,
                                      tokens=tokens, progress=bar)
    finally:
        bar.close()
    if history.requests is None:
        raise no_series(h, source.url, history)
    return history, source.url


def trace_from_args(
    args: argparse.Namespace, *, now: float, tokens: bool, config: Config | None = None, min_bins: int = 2,
    stream: TextIO | None = None, title: str = "prometheus",
) -> tuple[Trace, str]:
    """The trace a command replays (named ``NS/NAME``), read from Prometheus as the flags say, and the URL read:
    the Deployment's history from its first bin with a value to its last (leading and
    trailing bins without any are left out; gaps inside stay NaN), as rates that a CSV of counts per bin reads
    back as exactly (``traces.trace_from_rates``). Fewer than ``min_bins`` bins with a value: a ``UserError``
    saying how many were found."""
    h = parse_args(args, config, now=now)
    history, url = read_from_args(h, tokens=tokens, stream=stream, title=title)
    assert history.requests is not None
    values = history.requests.values
    finite = np.flatnonzero(np.isfinite(values))
    found = len(finite)
    if found < min_bins:
        span = "no bin" if found == 0 else f"only {found} bin"
        raise UserError(
            f"too little history for {h.namespace}/{h.name} in Prometheus at {url}: {span} with a value in the "
            f"last {_human(h.since)} (at {_human(h.step)} steps); at least {min_bins} are needed"
        )
    lo, hi = int(finite[0]), int(finite[-1]) + 1
    trace = trace_from_rates(
        f"{h.namespace}/{h.name}",
        history.requests.slice(lo, hi),
        {c: s.slice(lo, hi) for c, s in history.tokens.items() if np.isfinite(s.values[lo:hi]).any()},
    )
    return trace, url


