"""The contract with inference teams: which Deployments we manage and how, read from labels and annotations.

Why it exists: a team opts a Deployment in and tunes it with annotations; those strings are user input
that arrives on every tick. Parsing is a pure function over plain dicts (labels, annotations, the pod
template as the API serves it) so every rule is table- and property-testable without a cluster, and so
the control loop can turn every mistake into a Warning Event the team sees with ``kubectl describe``.

Contract (prefix ``predictive-autoscaler.io/``):

* label ``enabled: "true"`` opts a Deployment in (any other value, or no label: not ours);
* required annotations ``min-replicas`` (integer >= 0) and ``max-replicas`` (integer >= 1, >= min);
* optional: ``capacity-per-replica`` (requests/s one replica serves within its SLO, a finite number > 0, or
  ``auto``; default ``auto`` = ``None``: learned from the Deployment's own vLLM history by
  ``autoscaler.domain.learned_capacity``), ``mode`` (``scale`` | ``advisory``; default ``scale``),
  ``cold-start`` (prior start-up duration: ``180``, ``180s``, ``3m``, ``1m30s``, ``1h``; default 180 s),
  ``warm-pool`` (integer >= 0 or ``auto``; default ``auto`` = ``None``, the planner sizes it),
  ``forecast-profile`` (operator profile name; default ``default``), ``team`` (default: the namespace),
  ``priority`` (default ``standard``), ``nodepool`` (Karpenter NodePool name; default none), ``slo-wait`` (the
  latency objective: how long a request may wait before it starts, a duration such as ``2s`` or ``500ms``;
  default: the profile's) and ``slo-attainment`` (the share of requests that must start within it, a
  percentage such as ``99%`` or ``99.5``; default: the profile's) and ``demand-unit`` (``requests`` | ``tokens``:
  what demand and ``capacity-per-replica`` are counted in, requests/s or weighted tokens/s of prompt + generation,
  ``autoscaler.domain.demand``; default ``requests``);
* ``status`` was written by older versions of the controller itself (the status now lives in a ConfigMap beside
  the Deployment, ``autoscaler.domain.status``, which moves it there) and is therefore a known key.

Priority: an integer 0..1000 (higher = more important: the cost ceiling sheds lower priorities first)
or one of the named tiers in ``PRIORITY_TIERS``: ``critical`` 1000, ``production`` 100, ``standard``
50, ``batch`` 10. Names exist so teams need not agree on numbers; integers let an operator put a
workload between two tiers.

GPUs per replica come from the pod template's ``nvidia.com/gpu`` limits (requests when no limit is
given; for extended resources the two must be equal), summed over containers, following the
scheduler's effective-request rule for init containers: ``max(sum(containers) + sum(sidecars),
max(init containers))``.

A choice (why): unknown keys under our prefix (typos like ``max-replica``) are
*warnings*, not errors: the Deployment is still managed when everything required parses, because
refusing to scale a production workload over a stray annotation would be worse than the typo. The
result therefore carries a spec *and* problems (``ParseResult``) instead of "a spec or a list".
Every problem names the key and the offending value; every bad key is reported, not just the first.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Literal

from autoscaler.domain.demand import DEMAND_UNITS, DemandUnit

PREFIX = "predictive-autoscaler.io/"
ENABLED_LABEL = PREFIX + "enabled"
STATUS_ANNOTATION = PREFIX + "status"
GPU_RESOURCE = "nvidia.com/gpu"
EVENT_REASON_INVALID = "InvalidAnnotation"
EVENT_MESSAGE_LIMIT = 1024  # the API server rejects longer Event messages

DEFAULT_COLD_START_SECONDS = 180
DEFAULT_PROFILE = "default"
DEFAULT_PRIORITY_TIER = "standard"
PRIORITY_TIERS: Mapping[str, int] = {"critical": 1000, "production": 100, "standard": 50, "batch": 10}
MAX_PRIORITY = 1000

# Short keys (after the prefix).
MIN_REPLICAS = "min-replicas"
MAX_REPLICAS = "max-replicas"
CAPACITY = "capacity-per-replica"
MODE = "mode"
COLD_START = "cold-start"
WARM_POOL = "warm-pool"
PROFILE = "forecast-profile"
TEAM = "team"
PRIORITY = "priority"
NODEPOOL = "nodepool"
SLO_WAIT = "slo-wait"
SLO_ATTAINMENT = "slo-attainment"
DEMAND_UNIT = "demand-unit"
STATUS = "status"
KNOWN_KEYS = (
    MIN_REPLICAS,
    MAX_REPLICAS,
    CAPACITY,
    MODE,
    COLD_START,
    WARM_POOL,
    PROFILE,
    TEAM,
    PRIORITY,
    NODEPOOL,
    SLO_WAIT,
    SLO_ATTAINMENT,
    DEMAND_UNIT,
    STATUS,
)
REQUIRED_KEYS = (MIN_REPLICAS, MAX_REPLICAS)
CAPACITY_AUTO = "auto"

Severity = Literal["error", "warning"]

_UINT = re.compile(r"^[0-9]+$")
_NEG_INT = re.compile(r"^-[0-9]+$")
_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(h|m|s)")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
_TEAM = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")


class Mode(StrEnum):
    """``scale`` actuates; ``advisory`` forecasts and publishes status/metrics but never writes replicas."""

    SCALE = "scale"
    ADVISORY = "advisory"


@dataclass(frozen=True)
class AnnotationError:
    """One problem with one key. ``key`` is the full annotation key (or the pod-template path for GPUs)."""

    key: str
    value: str | None
    message: str
    severity: Severity = "error"

    def __str__(self) -> str:
        shown = "<missing>" if self.value is None else repr(self.value)
        return f"{self.key}={shown}: {self.message}"


@dataclass(frozen=True)
class WorkloadSpec:
    """A Deployment's validated scaling contract."""

    namespace: str
    name: str
    min_replicas: int
    max_replicas: int
    # None = ``auto``: learned from the Deployment's history (the controller holds its replicas until it is).
    capacity_per_replica: float | None
    mode: Mode = Mode.SCALE
    cold_start_seconds: float = DEFAULT_COLD_START_SECONDS
    warm_pool: int | None = None  # None = "auto": the planner sizes the warm pool
    forecast_profile: str = DEFAULT_PROFILE
    team: str = ""
    priority: int = PRIORITY_TIERS[DEFAULT_PRIORITY_TIER]
    nodepool: str | None = None
    gpus_per_replica: int = 0
    # The latency objective (None: the profile's): the wait a request may have before it starts, and the
    # share of requests that must start within it (a fraction in (0, 1)).
    slo_wait_seconds: float | None = None
    slo_attainment: float | None = None
    # What demand and capacity_per_replica are counted in: requests/s, or weighted tokens/s (the profile's weights).
    demand_unit: DemandUnit = DemandUnit.REQUESTS

    @property
    def advisory(self) -> bool:
        return self.mode is Mode.ADVISORY


@dataclass(frozen=True)
class ParseResult:
    """``spec`` is None exactly when there is at least one error; warnings never block."""

    spec: WorkloadSpec | None
    problems: tuple[AnnotationError, ...] = field(default=())

    @property
    def errors(self) -> tuple[AnnotationError, ...]:
        return tuple(p for p in self.problems if p.severity == "error")

    @property
    def warnings(self) -> tuple[AnnotationError, ...]:
        return tuple(p for p in self.problems if p.severity == "warning")

    @property
    def ok(self) -> bool:
        return self.spec is not None


def is_enabled(labels: Mapping[str, str] | None) -> bool:
    """The opt-in label, exactly ``"true"`` (what the list call's label selector matches too)."""
    return (labels or {}).get(ENABLED_LABEL) == "true"


def parse_duration_seconds(text: str) -> float:
    """``'180'``, ``'180s'``, ``'3m'``, ``'1m30s'``, ``'1.5h'`` -> seconds. Raises ValueError with the reason."""
    s = text.strip().lower()
    if not s:
        raise ValueError("empty duration")
    try:
        value = float(s)
    except ValueError:
        pos = 0
        value = 0.0
        for match in _DURATION_PART.finditer(s):
            if match.start() != pos:
                break
            value += float(match.group(1)) * {"h": 3600, "m": 60, "s": 1}[match.group(2)]
            pos = match.end()
        if pos != len(s) or pos == 0:
            raise ValueError("not a duration (use e.g. 180s, 3m, 1m30s)") from None
    if not math.isfinite(value) or value < 0:
        raise ValueError("must be a non-negative duration")
    return value


class _Collector:
    def __init__(self) -> None:
        self.problems: list[AnnotationError] = []

    def error(self, key: str, value: str | None, message: str) -> None:
        self.problems.append(AnnotationError(key, value, message, "error"))

    def warning(self, key: str, value: str | None, message: str) -> None:
        self.problems.append(AnnotationError(key, value, message, "warning"))


# Kubernetes' published scalability limits: 150,000 pods and 5,000 nodes a cluster. More replicas than a cluster
# can hold pods is always a mistake (a typo, or milliseconds pasted where a count goes); more than it has nodes
# (one GPU node can hold several replicas) is legal but worth a word.
CLUSTER_POD_LIMIT = 150_000
CLUSTER_NODE_LIMIT = 5_000


def _count(c: _Collector, key: str, raw: str, minimum: int) -> int | None:
    s = raw.strip()
    if _UINT.match(s):
        n = int(s)
        if n < minimum:
            c.error(PREFIX + key, raw, f"must be an integer >= {minimum}")
            return None
        if n > CLUSTER_POD_LIMIT:
            c.error(PREFIX + key, raw, f"{n:,} replicas is more than a Kubernetes cluster can run "
                    f"({CLUSTER_POD_LIMIT:,} pods); a typo?")
            return None
        if n > CLUSTER_NODE_LIMIT:
            c.warning(PREFIX + key, raw, f"{n:,} replicas is more than the {CLUSTER_NODE_LIMIT:,} nodes a Kubernetes "
                      "cluster supports; check it is meant")
        return n
    if _NEG_INT.match(s):
        c.error(PREFIX + key, raw, f"must not be negative (an integer >= {minimum})")
    else:
        c.error(PREFIX + key, raw, f"not an integer (expected an integer >= {minimum})")
    return None


def _capacity(c: _Collector, raw: str) -> float | None:
    """A number > 0, or None for ``auto`` (and after an error, which ``c`` then holds)."""
    key = PREFIX + CAPACITY
    if raw.strip().lower() == CAPACITY_AUTO:
        return None
    try:
        value = float(raw.strip())
    except ValueError:
        c.error(key, raw, "not a number (requests/s one replica serves within its SLO, e.g. 12.5)")
        return None
    if not math.isfinite(value):
        c.error(key, raw, "must be a finite number of requests/s")
        return None
    if value <= 0:
        c.error(key, raw, "must be > 0 requests/s")
        return None
    return value


def _slo_wait(c: _Collector, raw: str) -> float | None:
    key = PREFIX + SLO_WAIT
    text = raw.strip().lower()
    try:
        millis = text.endswith("ms") and bool(text[:-2].strip())
        value = float(text[:-2]) / 1000 if millis else parse_duration_seconds(text)
    except ValueError:
        c.error(key, raw, "not a duration (how long a request may wait to start, e.g. 2s, 500ms, 1m)")
        return None
    if not math.isfinite(value) or value <= 0:
        c.error(key, raw, "must be a wait > 0 (e.g. 2s)")
        return None
    return value


def _slo_attainment(c: _Collector, raw: str) -> float | None:
    key = PREFIX + SLO_ATTAINMENT
    text = raw.strip()
    number = text[:-1].strip() if text.endswith("%") else text
    try:
        value = float(number)
    except ValueError:
        c.error(key, raw, "not a percentage (the share of requests that must start within slo-wait, e.g. 99%)")
        return None
    if not math.isfinite(value) or not 1 <= value < 100:
        hint = f" (did you mean {value * 100:g}%?)" if math.isfinite(value) and 0 < value < 1 else ""
        c.error(key, raw, f"must be a percentage in [1, 100), e.g. 99% or 99.9{hint}")
        return None
    return value / 100


def _priority(c: _Collector, raw: str) -> int | None:
    s = raw.strip().lower()
    if s in PRIORITY_TIERS:
        return PRIORITY_TIERS[s]
    if _UINT.match(s) and int(s) <= MAX_PRIORITY:
        return int(s)
    tiers = ", ".join(PRIORITY_TIERS)
    c.error(PREFIX + PRIORITY, raw, f"expected an integer 0..{MAX_PRIORITY} or one of {tiers}")
    return None


def _unknown_key_message(short: str) -> str:
    if short == "enabled":
        return "'enabled' is a label, not an annotation; set it under metadata.labels"
    close = difflib.get_close_matches(short, KNOWN_KEYS, n=1, cutoff=0.6)
    hint = f"; did you mean {PREFIX}{close[0]}?" if close else f"; known keys: {', '.join(KNOWN_KEYS)}"
    return "unknown annotation, ignored" + hint


def _quantity_int(raw: Any) -> int | None:
    """A GPU count (an integral Kubernetes quantity) or None when it is not one."""
    if isinstance(raw, bool):
        return None
    if isinstance(raw, int):
        return raw if raw >= 0 else None
    if isinstance(raw, float):
        return int(raw) if raw.is_integer() and raw >= 0 else None
    if isinstance(raw, str) and _UINT.match(raw.strip()):
        return int(raw.strip())
    return None


def _container_gpus(c: _Collector, container: Any, path: str) -> int:
    if not isinstance(container, Mapping):
        return 0
    resources = container.get("resources") or {}
    if not isinstance(resources, Mapping):
        return 0
    values: dict[str, int] = {}
    for kind in ("limits", "requests"):
        section = resources.get(kind) or {}
        if isinstance(section, Mapping) and GPU_RESOURCE in section:
            raw = section[GPU_RESOURCE]
            n = _quantity_int(raw)
            if n is None:
                c.error(f"{path}.resources.{kind}[{GPU_RESOURCE}]", str(raw), "GPU count must be a whole number >= 0")
                return 0
            values[kind] = n
    if "limits" in values and "requests" in values and values["limits"] != values["requests"]:
        c.error(
            f"{path}.resources[{GPU_RESOURCE}]",
            f"requests={values['requests']}, limits={values['limits']}",
            "GPU requests and limits must be equal",
        )
        return 0
    return values.get("limits", values.get("requests", 0))


def _gpus_per_replica(c: _Collector, template: Mapping[str, Any] | None) -> int:
    spec = (template or {}).get("spec") or {}
    if not isinstance(spec, Mapping):
        return 0

    def named(kind: str, i: int, ctr: Any) -> str:
        name = ctr.get("name") if isinstance(ctr, Mapping) else None
        return f"spec.template.spec.{kind}[{name if name else i}]"

    containers: Sequence[Any] = spec.get("containers") or []
    inits: Sequence[Any] = spec.get("initContainers") or []
    total = sum(_container_gpus(c, ctr, named("containers", i, ctr)) for i, ctr in enumerate(containers))
    init_peak = 0
    for i, ctr in enumerate(inits):
        n = _container_gpus(c, ctr, named("initContainers", i, ctr))
        if isinstance(ctr, Mapping) and ctr.get("restartPolicy") == "Always":
            total += n  # a sidecar runs for the pod's whole life
        else:
            init_peak = max(init_peak, n)
    return max(total, init_peak)


def parse_workload(
    namespace: str,
    name: str,
    labels: Mapping[str, str] | None,
    annotations: Mapping[str, str] | None,
    pod_template: Mapping[str, Any] | None,
) -> ParseResult:
    """Validate one Deployment's contract. Pure; reports every bad key at once."""
    c = _Collector()
    ann = {k[len(PREFIX) :]: v for k, v in (annotations or {}).items() if k.startswith(PREFIX)}
    for short in sorted(set(ann) - set(KNOWN_KEYS)):
        c.warning(PREFIX + short, ann[short], _unknown_key_message(short))
    if not is_enabled(labels):
        raw = (labels or {}).get(ENABLED_LABEL)
        c.error(ENABLED_LABEL, raw, 'the opt-in label must be exactly "true"')

    for key in REQUIRED_KEYS:
        if key not in ann:
            c.error(PREFIX + key, None, "required annotation is missing")
    lo = _count(c, MIN_REPLICAS, ann[MIN_REPLICAS], 0) if MIN_REPLICAS in ann else None
    hi = _count(c, MAX_REPLICAS, ann[MAX_REPLICAS], 1) if MAX_REPLICAS in ann else None
    if lo is not None and hi is not None and lo > hi:
        c.error(PREFIX + MIN_REPLICAS, ann[MIN_REPLICAS], f"min-replicas {lo} is greater than max-replicas {hi}")
    capacity = _capacity(c, ann[CAPACITY]) if CAPACITY in ann else None

    mode = Mode.SCALE
    if MODE in ann:
        try:
            mode = Mode(ann[MODE].strip().lower())
        except ValueError:
            c.error(PREFIX + MODE, ann[MODE], "unknown mode (expected 'scale' or 'advisory')")

    cold_start: float = DEFAULT_COLD_START_SECONDS
    if COLD_START in ann:
        try:
            cold_start = parse_duration_seconds(ann[COLD_START])
        except ValueError as exc:
            c.error(PREFIX + COLD_START, ann[COLD_START], str(exc))

    warm_pool: int | None = None
    if WARM_POOL in ann and ann[WARM_POOL].strip().lower() != "auto":
        s = ann[WARM_POOL].strip()
        if _UINT.match(s):
            warm_pool = int(s)
        elif _NEG_INT.match(s):
            c.error(PREFIX + WARM_POOL, ann[WARM_POOL], "must not be negative (an integer >= 0 or 'auto')")
        else:
            c.error(PREFIX + WARM_POOL, ann[WARM_POOL], "expected an integer >= 0 or 'auto'")

    profile = DEFAULT_PROFILE
    if PROFILE in ann:
        profile = ann[PROFILE].strip()
        if not _DNS_LABEL.match(profile):
            c.error(PREFIX + PROFILE, ann[PROFILE], "not a valid profile name (lower-case letters, digits and '-')")

    team = namespace
    if TEAM in ann:
        team = ann[TEAM].strip()
        if not _TEAM.match(team):
            c.error(PREFIX + TEAM, ann[TEAM], "not a valid team name (letters, digits, '-', '_', '.'; <= 63 chars)")

    priority = _priority(c, ann[PRIORITY]) if PRIORITY in ann else PRIORITY_TIERS[DEFAULT_PRIORITY_TIER]

    nodepool: str | None = None
    if NODEPOOL in ann:
        nodepool = ann[NODEPOOL].strip()
        if not _DNS_SUBDOMAIN.match(nodepool):
            c.error(PREFIX + NODEPOOL, ann[NODEPOOL], "not a valid NodePool name (a DNS subdomain)")

    slo_wait = _slo_wait(c, ann[SLO_WAIT]) if SLO_WAIT in ann else None
    slo_attainment = _slo_attainment(c, ann[SLO_ATTAINMENT]) if SLO_ATTAINMENT in ann else None

    demand_unit = DemandUnit.REQUESTS
    if DEMAND_UNIT in ann:
        try:
            demand_unit = DemandUnit(ann[DEMAND_UNIT].strip().lower())
        except ValueError:
            c.error(PREFIX + DEMAND_UNIT, ann[DEMAND_UNIT],
                    f"unknown demand unit (expected {' or '.join(repr(u) for u in DEMAND_UNITS)}: what demand and "
                    "capacity-per-replica are counted in)")

    gpus = _gpus_per_replica(c, pod_template)

    if any(p.severity == "error" for p in c.problems):
        return ParseResult(None, tuple(c.problems))
    if lo is None or hi is None or priority is None:  # pragma: no cover - each logged an error
        raise AssertionError("unreachable: a missing value without an error")
    spec = WorkloadSpec(
        namespace=namespace,
        name=name,
        min_replicas=lo,
        max_replicas=hi,
        capacity_per_replica=capacity,
        mode=mode,
        cold_start_seconds=cold_start,
        warm_pool=warm_pool,
        forecast_profile=profile,
        team=team,
        priority=priority,
        nodepool=nodepool,
        gpus_per_replica=gpus,
        slo_wait_seconds=slo_wait,
        slo_attainment=slo_attainment,
        demand_unit=demand_unit,
    )
    return ParseResult(spec, tuple(c.problems))


def fit_event_message(message: str) -> str:
    """``message`` cut to the API server's 1024-byte limit for an Event (with a visible ellipsis), so an Event is
    never rejected for carrying a long user value."""
    encoded = message.encode()
    if len(encoded) <= EVENT_MESSAGE_LIMIT:
        return message
    return encoded[: EVENT_MESSAGE_LIMIT - 3].decode(errors="ignore") + "..."


def event_payloads(problems: Sequence[AnnotationError]) -> list[tuple[str, str]]:
    """(reason, message) pairs for Warning Events on the Deployment: one per problem, key and value named.

    Messages are cut to the API server's limit (``fit_event_message``).
    """
    return [(EVENT_REASON_INVALID, fit_event_message(("ignored: " if p.severity == "warning" else "") + str(p)))
            for p in problems]
