"""Named, escaped PromQL templates: the only way the controller builds a query.

Why a module of its own (llm-d's ``query_template.go`` lesson): a query assembled by string
concatenation is an injection bug waiting for a namespace or Deployment name with a quote in it,
and a query that forgets its namespace matcher silently reads (and scales on) another team's
traffic. Here every query is a named template with ``{placeholders}``; :func:`render` escapes each
value for the PromQL string literal it sits in, refuses unknown and missing placeholders, and
refuses any template that is not restricted to a namespace. The module is pure (no I/O).

Placeholders come in two kinds:

* label values (``{namespace}``, ``{namespaces}``, ``{pods}``, ...) must sit inside a
  double-quoted string literal of the template; the value is escaped for it (backslash, double
  quote, newline, other control characters);
* durations (``{window}``, ``{resolution}``) sit outside strings and must look like a PromQL
  duration (``60s``, ``5m``, ``1h30m``); they are validated, not escaped.

Namespace restriction: a template must take ``{namespace}`` (one namespace, exact match) or
``{namespaces}`` (the fleet: a regex of allowed namespaces). The regex must be built by
:func:`namespace_regex`, which escapes RE2 metacharacters in each name, so ``team.a`` never matches
``teamXa``; Prometheus anchors label regexes, so the alternation matches whole names only. An empty
namespace value is refused: ``namespace=""`` would match series that have *no* namespace label.

Pods map to Deployments without kube-state-metrics: a Deployment's pods are named
``<deployment>-<replicaset hash>-<5-char suffix>``, so ``label_replace`` on the ``pod`` label with
:data:`POD_TO_DEPLOYMENT_REGEX` recovers the Deployment. Pods with other names (StatefulSets, bare
pods) get an empty ``deployment`` label; the adapter drops and reports them.

The default templates sum over a Deployment's pods, so Prometheus must scrape each pod once: two
scrape jobs for the same pods would be counted twice (Prometheus cannot tell a duplicate scrape
from a second engine in the same pod).

Arrival rate is completions plus growth of what is in the system (waiting + running), over the
same window: requests that arrived but are still queued are demand too, and a saturated server's
completion rate alone would under-report exactly when capacity is short. It is clamped at 0
(a draining queue can make the sum negative).

When a Deployment's pods do not export the gauges, ``A + B`` has no series for it (PromQL binary
operators drop unmatched series) and the Deployment would be held forever on "no current demand".
So ``arrival_rate`` falls back, per Deployment and evaluation time, to the completion rate alone:
branches joined with ``or on (namespace, deployment)`` (each answers only the Deployments no earlier
branch answered), still one query for the fleet. Every branch labels its series ``demand_source``
(:data:`SOURCE_LABEL`): ``full`` (:data:`SOURCE_FULL`), or one of :data:`DEGRADED_SOURCES` saying
which gauge is absent (or that the gauges exist now but not yet over the whole window). The adapter
merges a Deployment's series that differ only in that label and keeps the label per bin.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from types import MappingProxyType

__all__ = [
    "CAPACITY_QUERIES",
    "DEFAULT_QUERIES",
    "DEGRADED_SOURCES",
    "DURATION_PLACEHOLDERS",
    "FLEET_PLACEHOLDER",
    "NAMESPACE_PLACEHOLDER",
    "PER_POD_QUERIES",
    "POD_TO_DEPLOYMENT_REGEX",
    "SOURCE_FULL",
    "SOURCE_LABEL",
    "NamespaceRegex",
    "TemplateError",
    "deployment_pods_regex",
    "duration",
    "escape_regex",
    "escape_string",
    "namespace_regex",
    "placeholders",
    "render",
]


class TemplateError(ValueError):
    """A template or a value given to it is unusable; the message names the bad part."""


NAMESPACE_PLACEHOLDER = "namespace"
FLEET_PLACEHOLDER = "namespaces"
DURATION_PLACEHOLDERS = frozenset({"window", "resolution"})

POD_TO_DEPLOYMENT_REGEX = "^(.+)-[a-z0-9]{5,10}-[a-z0-9]{5}$"

_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
_DURATION = re.compile(r"(?:[0-9]+(?:ms|s|m|h|d|w|y))+")
# RE2 metacharacters outside a character class.
_REGEX_META = frozenset("\\.+*?()|[]{}^$")
_STRING_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}


class NamespaceRegex(str):
    """A regex of allowed namespaces, as built by :func:`namespace_regex` (a marker type).

    :func:`render` accepts only this type for ``{namespaces}``, so a hand-written ``".*"`` cannot
    slip in as the fleet restriction by accident.
    """

    __slots__ = ()


def _escape_char(ch: str) -> str:
    if ch in _STRING_ESCAPES:
        return _STRING_ESCAPES[ch]
    if ch < " " or ch == "\x7f":
        return f"\\u{ord(ch):04x}"
    return ch


def escape_string(value: str) -> str:
    """Escape ``value`` for the inside of a double-quoted PromQL string literal.

    Backslash, double quote, newline, carriage return and tab get their short escapes; other
    control characters ``\\uXXXX`` (PromQL strings take Go's escapes).
    """
    return "".join(_escape_char(ch) for ch in value)


def escape_regex(value: str) -> str:
    """Escape RE2 metacharacters so ``value`` matches itself literally (before string escaping)."""
    return "".join("\\" + ch if ch in _REGEX_META else ch for ch in value)


def namespace_regex(namespaces: Iterable[str]) -> NamespaceRegex:
    """The regex matching exactly the given namespaces (sorted, deduplicated).

    Raises :class:`TemplateError` for no namespaces or an empty name: either would let the
    matcher accept series without a namespace label.
    """
    names = sorted(set(namespaces))
    if not names:
        raise TemplateError("no namespaces given: a fleet query must be restricted to at least one namespace")
    if "" in names:
        raise TemplateError("empty namespace name: it would match series without a namespace label")
    return NamespaceRegex("|".join(escape_regex(n) for n in names))


def deployment_pods_regex(deployment: str) -> str:
    """The regex matching the pods of one Deployment (``<name>-<hash>-<suffix>``)."""
    if not deployment:
        raise TemplateError("empty Deployment name")
    return escape_regex(deployment) + "-[a-z0-9]{5,10}-[a-z0-9]{5}"


def duration(seconds: int) -> str:
    """A PromQL duration for a whole, positive number of seconds."""
    if isinstance(seconds, bool) or not isinstance(seconds, int) or seconds <= 0:
        raise TemplateError(f"duration must be a positive whole number of seconds, got {seconds!r}")
    return f"{seconds}s"


def _string_mask(template: str) -> list[str | None]:
    """For each character: the quote of the PromQL string literal it lies in, or None."""
    mask: list[str | None] = []
    quote: str | None = None
    escaped = False
    for ch in template:
        if quote is None:
            mask.append(None)
            if ch in "\"'`":
                quote = ch
            continue
        if escaped:
            escaped = False
        elif ch == "\\" and quote != "`":
            escaped = True
        elif ch == quote:
            mask.append(None)
            quote = None
            continue
        mask.append(quote)
    if quote is not None:
        raise TemplateError(f"template has an unterminated {quote} string literal: {template[:80]!r}")
    return mask


def placeholders(template: str) -> list[str]:
    """Names of the template's placeholders, in order of first use."""
    seen: dict[str, None] = {}
    for m in _PLACEHOLDER.finditer(template):
        seen.setdefault(m.group(1), None)
    return list(seen)


def render(template: str, **labels: str) -> str:
    """Fill ``template``'s placeholders with escaped ``labels``.

    Refuses (:class:`TemplateError`): a placeholder without a value, a value without a
    placeholder, a template not restricted to a namespace, a label placeholder outside a
    double-quoted string, a duration placeholder inside one or with a non-duration value, an
    empty namespace, and a ``namespaces`` value not built by :func:`namespace_regex`.
    """
    names = placeholders(template)
    missing = [n for n in names if n not in labels]
    if missing:
        raise TemplateError(f"missing value for placeholder(s) {', '.join(missing)} (template takes {names})")
    unknown = sorted(set(labels) - set(names))
    if unknown:
        raise TemplateError(f"unknown placeholder(s) {', '.join(unknown)} (template takes {names})")
    if NAMESPACE_PLACEHOLDER not in names and FLEET_PLACEHOLDER not in names:
        raise TemplateError(
            "template is not restricted to a namespace: it must take {namespace} or {namespaces}: "
            f"{template[:80]!r}"
        )
    for name, value in labels.items():
        if not isinstance(value, str):
            raise TemplateError(f"value for {{{name}}} must be a string, got {type(value).__name__}")
    if NAMESPACE_PLACEHOLDER in labels and not labels[NAMESPACE_PLACEHOLDER]:
        raise TemplateError("empty namespace: it would match series without a namespace label")
    if FLEET_PLACEHOLDER in labels and not isinstance(labels[FLEET_PLACEHOLDER], NamespaceRegex):
        raise TemplateError("{namespaces} must be built by namespace_regex([...]), not given as a plain string")

    mask = _string_mask(template)
    out: list[str] = []
    pos = 0
    for m in _PLACEHOLDER.finditer(template):
        name = m.group(1)
        value = labels[name]
        quote = mask[m.start()]
        if name in DURATION_PLACEHOLDERS:
            if quote is not None:
                raise TemplateError(f"duration placeholder {{{name}}} must not be inside a string literal")
            if not _DURATION.fullmatch(value):
                raise TemplateError(f"{{{name}}} must be a PromQL duration like 60s or 5m, got {value!r}")
            text = value
        else:
            if quote != '"':
                raise TemplateError(f"label placeholder {{{name}}} must be inside a double-quoted string literal")
            text = escape_string(value)
        out.append(template[pos : m.start()])
        out.append(text)
        pos = m.end()
    out.append(template[pos:])
    return "".join(out)


# --- default templates over vLLM's metrics -------------------------------------------------------

_FLEET = f'namespace=~"{{{FLEET_PLACEHOLDER}}}"'


def _by_deployment(expr: str) -> str:
    """Sum ``expr`` (which keeps a ``pod`` label) by (namespace, deployment)."""
    return (
        "sum by (namespace, deployment) ("
        f'label_replace({expr}, "deployment", "$1", "pod", "{POD_TO_DEPLOYMENT_REGEX}"))'
    )


def _counter_rate(metric: str) -> str:
    return _by_deployment(f"rate({metric}{{{_FLEET}}}[{{window}}])")


_IN_SYSTEM = (
    f"sum by (namespace, pod) (vllm:num_requests_waiting{{{_FLEET}}})"
    f" + sum by (namespace, pod) (vllm:num_requests_running{{{_FLEET}}})"
)

SOURCE_LABEL = "demand_source"
SOURCE_FULL = "full"
_WAITING = "vllm:num_requests_waiting"
_RUNNING = "vllm:num_requests_running"
DEGRADED_SOURCES: Mapping[str, str] = MappingProxyType(
    {
        "both": f"completions only: {_WAITING} and {_RUNNING} absent",
        "running": f"completions only: {_RUNNING} absent",
        "waiting": f"completions only: {_WAITING} absent",
        "window": f"completions only: {_WAITING} + {_RUNNING} not both present over the whole window",
    }
)


def _with_source(expr: str, source: str) -> str:
    """``expr`` with its ``demand_source`` label set to ``source`` (a constant; no placeholder in it)."""
    return f'label_replace({expr}, "{SOURCE_LABEL}", "{source}", "", "")'


def _present(metric: str) -> str:
    """Per (namespace, deployment) with at least one series of ``metric`` now: how many (an instant selector)."""
    return (
        "count by (namespace, deployment) ("
        f'label_replace({metric}{{{_FLEET}}}, "deployment", "$1", "pod", "{POD_TO_DEPLOYMENT_REGEX}"))'
    )


_SUCCESS_RATE = _counter_rate("vllm:request_success_total")
_ON_DEPLOYMENT = " or on (namespace, deployment) "


def _arrival_rate() -> str:
    """Completions plus queue growth; per Deployment and bin, completions alone when the gauges are missing.

    ``A + B`` is empty for a Deployment without ``B`` (PromQL drops unmatched series), so the full formula is
    followed by completion-rate branches joined with ``or on (namespace, deployment)``: a branch answers only
    for the Deployments (at each evaluation time) that no earlier branch answered. Each branch labels its
    series ``demand_source``: ``full``, or why the completion rate stands alone (both gauges absent now,
    ``running`` absent, ``waiting`` absent, or present now but not over the whole window, as just after they
    appeared). (A variant computing the completion rate once and taking the reason with ``group_left`` from
    a vector of reasons was measured no faster on the test server.)
    """
    full = f"{_SUCCESS_RATE} + {_by_deployment(f'deriv(({_IN_SYSTEM})[{{window}}:{{resolution}}])')}"
    unless = f"{_SUCCESS_RATE} unless on (namespace, deployment) "
    branches = [
        _with_source(full, SOURCE_FULL),
        _with_source(f"{unless}({_present(_WAITING)} or {_present(_RUNNING)})", DEGRADED_SOURCES["both"]),
        _with_source(unless + _present(_RUNNING), DEGRADED_SOURCES["running"]),
        _with_source(unless + _present(_WAITING), DEGRADED_SOURCES["waiting"]),
        _with_source(_SUCCESS_RATE, DEGRADED_SOURCES["window"]),
    ]
    return f"clamp_min({_ON_DEPLOYMENT.join(branches)}, 0)"


# The series the capacity estimate reads (autoscaler.domain.learned_capacity; autoscaler.history.CAPACITY_INPUTS),
# besides completion_rate. Per Deployment and bin: what the replicas did, and whether they were saturated.
_KV_CACHE_OLD = "vllm:gpu_cache_usage_perc"  # vLLM before 0.10
_KV_CACHE_NEW = "vllm:kv_cache_usage_perc"


def _kv_cache_usage() -> str:
    """KV-cache usage (0..1 per pod, averaged over the bin) summed over the Deployment's pods; per pod the older
    metric name where it is exported, else the newer (a pod exporting both is counted once)."""
    def per_pod(metric: str) -> str:
        return f"max by (namespace, pod) (avg_over_time({metric}{{{_FLEET}}}[{{window}}]))"

    return _by_deployment(f"({per_pod(_KV_CACHE_OLD)} or on (namespace, pod) {per_pod(_KV_CACHE_NEW)})")


CAPACITY_QUERIES: Mapping[str, str] = MappingProxyType(
    {
        # Pods of the Deployment exporting vLLM's running gauge: the replicas serving.
        "serving_replicas": _by_deployment(f"group by (namespace, pod) ({_RUNNING}{{{_FLEET}}})"),
        # Requests waiting, averaged over the bin, summed over the Deployment's pods.
        "requests_waiting": _by_deployment(f"avg_over_time({_WAITING}{{{_FLEET}}}[{{window}}])"),
        # KV-cache usage summed over the pods (divide by serving_replicas for the mean).
        "kv_cache_usage": _kv_cache_usage(),
        # 90th percentile of time-to-first-token over the bin, seconds (NaN without requests).
        "ttft_p90": (
            "histogram_quantile(0.9, sum by (namespace, deployment, le) (label_replace(rate("
            f'vllm:time_to_first_token_seconds_bucket{{{_FLEET}}}[{{window}}]), "deployment", "$1", "pod", '
            f'"{POD_TO_DEPLOYMENT_REGEX}")))'
        ),
    }
)

DEFAULT_QUERIES: Mapping[str, str] = MappingProxyType(
    {
        # Requests per second arriving: completions plus growth of waiting + running, clamped at 0; completions
        # alone for a Deployment (and bin) whose gauges are missing, labelled demand_source (see _arrival_rate).
        "arrival_rate": _arrival_rate(),
        # Requests per second completed successfully.
        "completion_rate": _counter_rate("vllm:request_success_total"),
        # Tokens per second.
        "prompt_token_rate": _counter_rate("vllm:prompt_tokens_total"),
        "generation_token_rate": _counter_rate("vllm:generation_tokens_total"),
        # Current values (instant queries): requests waiting, and waiting + running.
        "queue_depth": _by_deployment(f"vllm:num_requests_waiting{{{_FLEET}}}"),
        "in_flight": _by_deployment(f"({_IN_SYSTEM})"),
        # Per pod (not per Deployment): requests waiting + running now, by (namespace, pod). A scale-down marks the
        # idlest pods with it (autoscaler.domain.scaledown); a pod lacking either gauge is absent (unknown load).
        "pod_in_flight": f"({_IN_SYSTEM})",
        # One Deployment: requests waiting + running now ({pods} from deployment_pods_regex).
        "deployment_in_flight": (
            'sum(vllm:num_requests_waiting{namespace="{namespace}", pod=~"{pods}"})'
            ' + sum(vllm:num_requests_running{namespace="{namespace}", pod=~"{pods}"})'
        ),
        # The capacity estimate's series (above): serving_replicas, requests_waiting, kv_cache_usage, ttft_p90.
        **CAPACITY_QUERIES,
    }
)


# Default queries answered per (namespace, pod) rather than per (namespace, deployment).
PER_POD_QUERIES = frozenset({"pod_in_flight"})
