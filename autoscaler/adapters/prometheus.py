"""The Prometheus metrics adapter: traffic history and current values for the whole fleet.

Why a module of its own: it is the only code that talks to Prometheus (httpx, over its HTTP API),
so every odd answer gets one explicit policy here instead of a surprise in the planner (KEDA's
lesson). The transport is injected (``httpx.MockTransport`` in the error-matrix tests, the real
server in the others), so nothing is monkeypatched.

Policies (each has a test):

* **Empty answer**: a Deployment without series is *absent* from the result. Callers treat absence
  as "missing metrics" (hold, report), never as zero traffic.
* **NaN, +Inf, -Inf** values become NaN (missing), like a bin Prometheus had no sample for.
* **Several series for one (namespace, deployment)** in a fleet answer: the Deployment is
  *dropped* (treated as missing) and the reason recorded in ``FleetHistory.dropped``. The default
  templates aggregate ``by (namespace, deployment)`` and cannot produce this; a configured template
  that keeps another label (``job``, ``model_name``, a relabelled ``deployment`` clash) can.
  Summing was rejected: when the extra label is a second scrape job of the same pods, a sum doubles
  the demand and silently doubles the GPU bill. A template that means to merge series must say so
  by aggregating ``by (namespace, deployment)`` itself.
* **Where each bin's value came from** (``demand_source``, :data:`autoscaler.promql.SOURCE_LABEL`): a
  fleet template may label its series with it, ``full`` for its complete formula and any other value
  (a sentence, shown to people) for a fallback, such as the built-in ``arrival_rate``'s completion
  rate alone where a Deployment lacks the queue gauges. In a range answer, series of one Deployment
  that differ only in that label are *one* series: merged bin by bin, the label of each bin kept in
  ``FleetHistory.sources``. Two of them with a value in the same bin are ambiguous (the template's
  branches must exclude each other, ``A or on (namespace, deployment) B``): the Deployment is dropped,
  as above.
* Series without a ``deployment`` (pods not named ``<deployment>-<hash>-<suffix>``) or outside the
  allowed namespaces are dropped with a warning (the namespace check is defence in depth: the
  query is already restricted by :mod:`autoscaler.promql`).
* **HTTP 4xx** (except 429): :class:`PrometheusQueryError` carrying Prometheus's own error
  message; not retried, since the same query fails the same way.
* **HTTP 5xx, 429, timeouts, refused connections**: retried ``retries`` times with exponential
  backoff (``backoff_seconds * 2**attempt``), then :class:`PrometheusUnavailable`. A failed TLS
  certificate verification is :class:`PrometheusUnavailable` at once: retrying cannot fix it.
* The response's ``warnings`` field is recorded: ``last_warnings`` after every call, and
  ``FleetHistory.warnings`` for fleet queries.

Per-pod instant answers (:meth:`PrometheusSource.pod_instant`, the in-flight requests a scale-down ranks pods
by) follow the same policies keyed by ``(namespace, pod)``: absent means unknown, never zero.

Range queries are split into requests of at most ``max_points_per_request`` evaluation times
(Prometheus refuses more than 11,000 points per series); chunks share no timestamp by
construction, and the stitching also drops any duplicate a server might return at an edge.

Time convention of :meth:`PrometheusSource.fleet_history` (bins vs. evaluation times): a
``TrafficSeries`` bin ``i`` covers ``[start + i*step, start + (i+1)*step)``, while Prometheus
evaluates ``rate(x[w])`` at ``t`` over ``[t - w, t]``. So bin ``i`` is the value evaluated at its
*end*, ``start + (i+1)*step``, with a window of one step: the average rate over the bin itself.
"""

from __future__ import annotations

import math
import ssl
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from autoscaler import promql
from autoscaler.adapters.httpcommon import SecretFileError, StrPath, read_secret, tls_verification_error
from models.types import FloatArray, TrafficSeries

__all__ = [
    "MAX_POINTS_PER_SERIES",
    "DeploymentKey",
    "FleetHistory",
    "PrometheusError",
    "PrometheusQueryError",
    "PrometheusSource",
    "PrometheusUnavailable",
    "Sample",
    "Series",
]

# Prometheus refuses a range query with (end - start) / step > 11,000, i.e. more than 11,001 points.
MAX_POINTS_PER_SERIES = 11_000

DeploymentKey = tuple[str, str]


class PrometheusError(Exception):
    """Any failure to get an answer from Prometheus."""


class PrometheusQueryError(PrometheusError):
    """Prometheus refused the request (HTTP 4xx) or sent an answer we cannot use; not retried."""

    def __init__(self, message: str, *, status_code: int | None = None, error_type: str | None = None) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.error_type = error_type


class PrometheusUnavailable(PrometheusError):
    """Prometheus could not be reached or kept failing (5xx, timeouts) after all retries."""


@dataclass(frozen=True)
class Series:
    """One series of a range query: timestamps (Unix seconds) and values (NaN = missing)."""

    labels: Mapping[str, str]
    timestamps: FloatArray
    values: FloatArray


@dataclass(frozen=True)
class Sample:
    """One element of an instant query's answer (NaN for NaN/Inf)."""

    labels: Mapping[str, str]
    timestamp: float
    value: float


class FleetHistory(dict[DeploymentKey, TrafficSeries]):
    """``(namespace, deployment) -> TrafficSeries``, plus what was dropped and why.

    ``dropped`` maps Deployments that had series but were left out (ambiguous answer) to the
    reason; ``warnings`` holds Prometheus's warnings and our own notes about dropped series.
    ``sources`` holds, for Deployments whose series carry the ``demand_source`` label, that label
    per bin (None for a bin without a sample): ``full``, or why a fallback formula gave the value.
    """

    def __init__(
        self,
        items: Mapping[DeploymentKey, TrafficSeries] | None = None,
        *,
        dropped: Mapping[DeploymentKey, str] | None = None,
        warnings: Sequence[str] = (),
        sources: Mapping[DeploymentKey, tuple[str | None, ...]] | None = None,
    ) -> None:
        super().__init__(items or {})
        self.dropped: dict[DeploymentKey, str] = dict(dropped or {})
        self.warnings: tuple[str, ...] = tuple(warnings)
        self.sources: dict[DeploymentKey, tuple[str | None, ...]] = dict(sources or {})

    def latest_source(self, key: DeploymentKey) -> tuple[bool, str | None]:
        """``(found, source)`` of ``key``'s newest bin with a finite value.

        ``found`` is False when there is no such bin (nothing to say about the source); ``source`` is
        None when the query does not label its series with ``demand_source``.
        """
        series = self.get(key)
        if series is None:
            return False, None
        finite = np.flatnonzero(np.isfinite(series.values))
        if not len(finite):
            return False, None
        sources = self.sources.get(key)
        return True, None if sources is None else sources[int(finite[-1])]


@dataclass
class _Grouped:
    """Series of a fleet answer grouped by Deployment, after the drop policies."""

    kept: dict[DeploymentKey, list[int]] = field(default_factory=dict)  # one series, or one per source
    dropped: dict[DeploymentKey, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


def _finite_or_nan(raw: object) -> float:
    try:
        value = float(str(raw))
    except ValueError:
        raise PrometheusQueryError(f"Prometheus sent a non-numeric sample value {raw!r}") from None
    return value if math.isfinite(value) else math.nan


def _fmt_time(t: float) -> str:
    return str(int(t)) if float(t).is_integer() else repr(float(t))


def _labels(raw: object) -> dict[str, str]:
    if not isinstance(raw, dict):
        raise PrometheusQueryError(f"Prometheus sent a series without a label map: {raw!r:.120}")
    return {str(k): str(v) for k, v in raw.items()}


def _pairs(raw: object) -> list[tuple[float, float]]:
    if not isinstance(raw, list):
        raise PrometheusQueryError(f"Prometheus sent a series without a value list: {raw!r:.120}")
    out: list[tuple[float, float]] = []
    for pair in raw:
        if not isinstance(pair, list) or len(pair) != 2:
            raise PrometheusQueryError(f"Prometheus sent a malformed sample {pair!r:.120}")
        out.append((float(pair[0]), _finite_or_nan(pair[1])))
    return out


def _differ_only_in_source(labels: Sequence[Mapping[str, str]]) -> bool:
    """Every label set has a distinct ``demand_source`` and they are equal without it."""
    label = promql.SOURCE_LABEL
    if not all(label in ls for ls in labels) or len({ls[label] for ls in labels}) != len(labels):
        return False
    rest = [{k: v for k, v in ls.items() if k != label} for ls in labels]
    return all(r == rest[0] for r in rest)


class PrometheusSource:
    """Reads traffic from Prometheus's HTTP API (``/api/v1/query`` and ``/api/v1/query_range``).

    ``bearer_token`` or ``bearer_token_file`` (re-read before every request: projected service
    account tokens rotate); ``ca_file``: a CA bundle for a private Prometheus certificate.
    ``queries`` adds named templates to (or replaces some of) :data:`autoscaler.promql.DEFAULT_QUERIES`.
    ``sleep`` is injectable so tests can record the backoff instead of waiting it out.
    """

    def __init__(
        self,
        url: str,
        *,
        bearer_token: str | None = None,
        bearer_token_file: StrPath | None = None,
        ca_file: StrPath | None = None,
        timeout_seconds: float = 10,
        retries: int = 3,
        backoff_seconds: float = 0.5,
        max_points_per_request: int = MAX_POINTS_PER_SERIES,
        queries: Mapping[str, str] | None = None,
        transport: httpx.BaseTransport | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"Prometheus url must start with http:// or https://, got {url!r}")
        if bearer_token is not None and bearer_token_file is not None:
            raise ValueError("give bearer_token or bearer_token_file, not both")
        if bearer_token is not None and not bearer_token.strip():
            raise ValueError("bearer_token is empty")
        if timeout_seconds <= 0:
            raise ValueError(f"timeout_seconds must be positive, got {timeout_seconds}")
        if retries < 0:
            raise ValueError(f"retries must be >= 0, got {retries}")
        if backoff_seconds < 0:
            raise ValueError(f"backoff_seconds must be >= 0, got {backoff_seconds}")
        if not 2 <= max_points_per_request <= MAX_POINTS_PER_SERIES + 1:
            raise ValueError(
                f"max_points_per_request must be in [2, {MAX_POINTS_PER_SERIES + 1}], got {max_points_per_request}"
            )
        verify: ssl.SSLContext | bool = True
        if ca_file is not None:
            try:
                verify = ssl.create_default_context(cafile=str(ca_file))
            except (OSError, ssl.SSLError) as exc:
                raise ValueError(f"cannot load CA bundle {ca_file}: {exc}") from None
        self.url = url.rstrip("/")
        self._bearer_token = bearer_token.strip() if bearer_token is not None else None
        self._bearer_token_file = Path(bearer_token_file) if bearer_token_file is not None else None
        self.timeout_seconds = timeout_seconds
        self.retries = retries
        self.backoff_seconds = backoff_seconds
        self.max_points_per_request = max_points_per_request
        self.queries: Mapping[str, str] = {**promql.DEFAULT_QUERIES, **(queries or {})}  # named templates
        self._sleep = sleep
        self._client = httpx.Client(transport=transport, verify=verify, timeout=timeout_seconds)
        self.last_warnings: tuple[str, ...] = ()

    # --- lifecycle ---------------------------------------------------------------------------

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> PrometheusSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- HTTP -------------------------------------------------------------------------------

    def _headers(self) -> dict[str, str]:
        token = self._bearer_token
        if self._bearer_token_file is not None:
            try:
                token = read_secret(self._bearer_token_file, "bearer token file")
            except SecretFileError as exc:
                raise PrometheusError(str(exc)) from None
        return {"Authorization": f"Bearer {token}"} if token else {}

    def _post(self, path: str, form: Mapping[str, str]) -> tuple[Any, list[str]]:
        """POST ``form`` to ``path``; the ``data`` field and the warnings, after retries."""
        url = self.url + path
        last_error = ""
        for attempt in range(self.retries + 1):
            if attempt:
                self._sleep(self.backoff_seconds * 2 ** (attempt - 1))
            try:
                response = self._client.post(url, data=dict(form), headers=self._headers())
            except httpx.TransportError as exc:
                tls = tls_verification_error(exc)
                if tls is not None:
                    raise PrometheusUnavailable(
                        f"TLS verification of {self.url} failed (wrong or missing ca_file?): {tls}"
                    ) from None
                last_error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
                continue
            if response.status_code >= 500 or response.status_code == 429:
                last_error = f"HTTP {response.status_code}: {self._error_message(response)}"
                continue
            if response.status_code >= 400:
                body = self._json(response, strict=False)
                raise PrometheusQueryError(
                    f"Prometheus refused the query (HTTP {response.status_code}): {self._error_message(response)}; "
                    f"query: {form.get('query', '')[:200]}",
                    status_code=response.status_code,
                    error_type=str(body.get("errorType")) if isinstance(body, dict) and "errorType" in body else None,
                )
            return self._data(response)
        raise PrometheusUnavailable(
            f"Prometheus at {self.url} unavailable after {self.retries + 1} attempts: {last_error}"
        )

    @staticmethod
    def _json(response: httpx.Response, *, strict: bool) -> Any:
        try:
            return response.json()
        except ValueError:
            if strict:
                raise PrometheusQueryError(
                    f"Prometheus sent a non-JSON answer (HTTP {response.status_code}): {response.text[:200]!r}"
                ) from None
            return None

    def _error_message(self, response: httpx.Response) -> str:
        body = self._json(response, strict=False)
        if isinstance(body, dict) and "error" in body:
            return str(body["error"])
        return response.text[:200].strip() or response.reason_phrase

    def _data(self, response: httpx.Response) -> tuple[Any, list[str]]:
        body = self._json(response, strict=True)
        if not isinstance(body, dict) or body.get("status") != "success" or "data" not in body:
            raise PrometheusQueryError(f"Prometheus sent an unexpected answer: {response.text[:200]!r}")
        warnings = body.get("warnings") or []
        return body["data"], [str(w) for w in warnings] if isinstance(warnings, list) else [str(warnings)]

    # --- queries ----------------------------------------------------------------------------

    def query_range(self, query: str, start: float, end: float, step_seconds: float) -> list[Series]:
        """Evaluate ``query`` at ``start, start + step, ... <= end``, in as many requests as needed."""
        if step_seconds <= 0:
            raise ValueError(f"step_seconds must be positive, got {step_seconds}")
        if end < start:
            raise ValueError(f"end ({end}) is before start ({start})")
        n_points = math.floor((end - start) / step_seconds + 1e-9) + 1
        merged: dict[tuple[tuple[str, str], ...], tuple[dict[str, str], dict[float, float]]] = {}
        warnings: list[str] = []
        for first in range(0, n_points, self.max_points_per_request):
            last = min(first + self.max_points_per_request, n_points) - 1
            form = {
                "query": query,
                "start": _fmt_time(start + first * step_seconds),
                "end": _fmt_time(start + last * step_seconds),
                "step": _fmt_time(step_seconds),
                "timeout": _fmt_time(self.timeout_seconds),
            }
            data, chunk_warnings = self._post("/api/v1/query_range", form)
            warnings.extend(w for w in chunk_warnings if w not in warnings)
            if not isinstance(data, dict) or data.get("resultType") != "matrix":
                raise PrometheusQueryError(f"range query did not return a matrix: {str(data)[:200]!r}")
            for raw in data.get("result") or []:
                if not isinstance(raw, dict):
                    raise PrometheusQueryError(f"Prometheus sent a malformed series {raw!r:.120}")
                labels = _labels(raw.get("metric", {}))
                key = tuple(sorted(labels.items()))
                points = merged.setdefault(key, (labels, {}))[1]
                for t, v in _pairs(raw.get("values", [])):
                    points.setdefault(t, v)  # keep the first answer for a timestamp seen twice
        self.last_warnings = tuple(warnings)
        out: list[Series] = []
        for labels, points in merged.values():
            ts = np.array(sorted(points), dtype=np.float64)
            out.append(Series(labels, ts, np.array([points[t] for t in ts.tolist()], dtype=np.float64)))
        return out

    def instant(self, query: str, at: float) -> list[Sample]:
        """Evaluate ``query`` at time ``at``: one sample per series (a scalar has no labels)."""
        form = {"query": query, "time": _fmt_time(at), "timeout": _fmt_time(self.timeout_seconds)}
        data, warnings = self._post("/api/v1/query", form)
        self.last_warnings = tuple(warnings)
        if not isinstance(data, dict):
            raise PrometheusQueryError(f"instant query returned no data object: {str(data)[:200]!r}")
        kind = data.get("resultType")
        result = data.get("result")
        if kind == "scalar":
            ((t, v),) = _pairs([result])
            return [Sample({}, t, v)]
        if kind != "vector" or not isinstance(result, list):
            raise PrometheusQueryError(f"instant query returned {kind!r}, expected a vector or scalar")
        samples: list[Sample] = []
        for raw in result:
            if not isinstance(raw, dict):
                raise PrometheusQueryError(f"Prometheus sent a malformed sample {raw!r:.120}")
            ((t, v),) = _pairs([raw.get("value")])
            samples.append(Sample(_labels(raw.get("metric", {})), t, v))
        return samples

    # --- fleet ------------------------------------------------------------------------------

    def _fleet_query(self, template_or_name: str, namespaces: Iterable[str], **durations: str) -> str:
        template = self.queries.get(template_or_name, template_or_name)
        names = promql.placeholders(template)
        if promql.FLEET_PLACEHOLDER not in names:
            raise promql.TemplateError(
                f"{template_or_name[:80]!r} is neither a known query name ({', '.join(sorted(self.queries))}) "
                "nor a fleet template taking {namespaces}"
            )
        used = {k: v for k, v in durations.items() if k in names}
        return promql.render(template, namespaces=promql.namespace_regex(namespaces), **used)

    @staticmethod
    def _group(
        labels_list: Sequence[Mapping[str, str]], allowed: frozenset[str], *, by_source: bool = False
    ) -> _Grouped:
        """Series indices per Deployment. ``by_source``: several series that differ only in their
        ``demand_source`` label are kept together (a range answer, merged bin by bin by the caller)."""
        grouped = _Grouped()
        seen: dict[DeploymentKey, list[int]] = {}
        for i, labels in enumerate(labels_list):
            ns, dep = labels.get("namespace", ""), labels.get("deployment", "")
            if ns not in allowed:
                grouped.warnings.append(f"dropped a series outside the allowed namespaces: {dict(labels)}")
                continue
            if not dep:
                grouped.warnings.append(
                    f"dropped a series without a deployment label in namespace {ns!r} "
                    "(pods not named <deployment>-<hash>-<suffix>?)"
                )
                continue
            seen.setdefault((ns, dep), []).append(i)
        for key, idx in seen.items():
            if len(idx) == 1 or (by_source and _differ_only_in_source([labels_list[i] for i in idx])):
                grouped.kept[key] = idx
            else:
                reason = (
                    f"{len(idx)} series for {key[0]}/{key[1]} where one was expected "
                    f"(labels: {[dict(labels_list[i]) for i in idx]}); treated as missing"
                )
                grouped.dropped[key] = reason
                grouped.warnings.append(reason)
        return grouped

    def fleet_history(
        self,
        query: str,
        namespaces: Iterable[str],
        start: int,
        end: int,
        step_seconds: int,
        *,
        window_seconds: int | None = None,
        resolution_seconds: int | None = None,
    ) -> FleetHistory:
        """Per-Deployment rates on the grid ``[start, end)``: one query for the whole fleet per chunk.

        ``query`` is a name in ``self.queries`` or a fleet template taking ``{namespaces}``.
        ``window_seconds`` (rate window) and ``resolution_seconds`` (subquery step) default to
        the step, so bin ``i`` is the average over ``[start + i*step, start + (i+1)*step)``; the
        window must span at least two scrapes or ``rate`` has nothing to say (all NaN).
        Bins without a sample are NaN; Deployments without series are absent.
        """
        for name, value in (("start", start), ("end", end), ("step_seconds", step_seconds)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"{name} must be whole Unix seconds, got {value!r}")
        if step_seconds <= 0:
            raise ValueError(f"step_seconds must be positive, got {step_seconds}")
        if end <= start or (end - start) % step_seconds:
            raise ValueError(
                f"[start, end) = [{start}, {end}) must be a positive whole number of {step_seconds}s steps"
            )
        allowed = frozenset(namespaces)
        window = window_seconds if window_seconds is not None else step_seconds
        text = self._fleet_query(
            query,
            allowed,
            window=promql.duration(window),
            resolution=promql.duration(resolution_seconds if resolution_seconds is not None else window),
        )
        n_bins = (end - start) // step_seconds
        series = self.query_range(text, start + step_seconds, end, step_seconds)
        prometheus_warnings = list(self.last_warnings)
        grouped = self._group([s.labels for s in series], allowed, by_source=True)
        result: dict[DeploymentKey, TrafficSeries] = {}
        sources: dict[DeploymentKey, tuple[str | None, ...]] = {}
        for key, idx in grouped.kept.items():
            values = np.full(n_bins, np.nan)
            filled = np.zeros(n_bins, dtype=bool)
            labelled = np.full(n_bins, None, dtype=object)
            for i in idx:
                bins = np.rint((series[i].timestamps - start) / step_seconds).astype(np.int64) - 1
                inside = (bins >= 0) & (bins < n_bins)
                bins = bins[inside]
                if filled[bins].any():
                    clash = sorted({str(series[j].labels.get(promql.SOURCE_LABEL)) for j in idx})
                    reason = (
                        f"{len(idx)} series for {key[0]}/{key[1]} have a value in the same bin (demand_source "
                        f"{clash}); a template's fallback branches must exclude each other "
                        "(A or on (namespace, deployment) B); treated as missing"
                    )
                    grouped.dropped[key] = reason
                    grouped.warnings.append(reason)
                    break
                values[bins] = series[i].values[inside]
                filled[bins] = True
                labelled[bins] = series[i].labels.get(promql.SOURCE_LABEL)
            else:
                result[key] = TrafficSeries(values, step_seconds, start)
                if any(promql.SOURCE_LABEL in series[i].labels for i in idx):
                    sources[key] = tuple(labelled.tolist())
        history = FleetHistory(
            result, dropped=grouped.dropped, warnings=prometheus_warnings + grouped.warnings, sources=sources
        )
        self.last_warnings = history.warnings
        return history

    def fleet_instant(
        self, query: str, namespaces: Iterable[str], at: float, *, window_seconds: int = 60,
        resolution_seconds: int | None = None,
    ) -> dict[DeploymentKey, float]:
        """Current per-Deployment values at ``at`` (same policies as :meth:`fleet_history`): the rates over the last
        ``window_seconds``, a subquery in the template evaluated every ``resolution_seconds`` (default: the window).

        Ambiguous Deployments are absent; ``last_warnings`` says why.
        """
        allowed = frozenset(namespaces)
        window = promql.duration(window_seconds)
        resolution = promql.duration(resolution_seconds or window_seconds)
        text = self._fleet_query(query, allowed, window=window, resolution=resolution)
        samples = self.instant(text, at)
        grouped = self._group([s.labels for s in samples], allowed)
        self.last_warnings = self.last_warnings + tuple(grouped.warnings)
        return {key: samples[i].value for key, (i,) in grouped.kept.items()}

    def pod_instant(self, query: str, namespaces: Iterable[str], at: float) -> dict[tuple[str, str], float]:
        """Current per-pod values at ``at``: ``(namespace, pod) -> value`` (the ``pod_in_flight`` query, say).

        ``query`` is a name in ``self.queries`` or a fleet template taking ``{namespaces}`` that keeps the
        ``pod`` label. Same policies as the fleet reads: a pod without a series is absent (unknown, never 0);
        NaN/Inf values are absent; series outside the allowed namespaces or without a ``pod`` label are dropped,
        and so are pods answered by more than one series (ambiguous), with the reason in ``last_warnings``.
        """
        allowed = frozenset(namespaces)
        text = self._fleet_query(query, allowed, window=promql.duration(60), resolution=promql.duration(60))
        samples = self.instant(text, at)
        warnings = list(self.last_warnings)
        seen: dict[tuple[str, str], list[float]] = {}
        for sample in samples:
            ns, pod = sample.labels.get("namespace", ""), sample.labels.get("pod", "")
            if ns not in allowed or not pod:
                warnings.append(f"dropped a per-pod series outside the allowed namespaces or without a pod label: "
                                f"{dict(sample.labels)}")
                continue
            seen.setdefault((ns, pod), []).append(sample.value)
        out: dict[tuple[str, str], float] = {}
        for key, values in seen.items():
            if len(values) > 1:
                warnings.append(f"{len(values)} series for pod {key[0]}/{key[1]} where one was expected; "
                                "treated as unknown")
            elif math.isfinite(values[0]):
                out[key] = values[0]
        self.last_warnings = tuple(warnings)
        return out
