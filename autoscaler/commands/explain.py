"""``predictive-autoscaler explain NAMESPACE/DEPLOYMENT``: why a Deployment has the replicas it has.

Reads what the controller published for the Deployment (its status object, a ConfigMap beside it:
``autoscaler.domain.status``; the decision's steps, the forecast at the horizon, and a 4-hour track of
forecasts and actuals) and prints it for a person. It reads that one Deployment and that one ConfigMap with a
``GET`` each in their namespace (not a cluster-wide list), so an inference team can run it with its own
namespace-scoped read access (the ``view`` role reads both). A Deployment an older version of the controller
wrote its status on (the ``predictive-autoscaler.io/status`` annotation) and the running one has not moved yet
is read from that annotation. ``render`` is pure, so the wording is tested without a cluster.

The "forecast vs actual" table lines each tracked time up with the forecast that was made *for*
that time (one horizon earlier), so a person sees how far the forecast was off, not two unrelated
numbers.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from autoscaler.adapters.kube import KubeError, api_client_from_config
from autoscaler.cli import add_target_arguments, target_of
from autoscaler.domain.annotations import ENABLED_LABEL, STATUS_ANNOTATION, is_enabled, parse_workload
from autoscaler.domain.status import STATUS_DATA_KEY, DeploymentStatus, first_sight, status_object_name
from autoscaler.errors import UserError
from autoscaler.simulation.tuning import LEAD_ONLY_QUANTILE, Tuning, start_target, versus_hpa

# Track points are about 5 minutes apart: a forecast counts as "for" a point when it targeted a time
# within half that spacing (a forecast for five minutes later is not a forecast of this point).
MATCH_SECONDS = 150


# For --help: plain text for the user (the module docstring is for developers).
DESCRIPTION = (
    "Show why a Deployment has the replicas it has: each rule the controller's last decision went through, with "
    "its numbers, and the forecast against what actually arrived over the last hours. It reads the status the "
    "controller published for that one Deployment (the ConfigMap <deployment>-predictive-autoscaler beside it), so "
    "read access to Deployments and ConfigMaps in its namespace is enough."
)


def register(sub: Any) -> None:
    p = sub.add_parser("explain", help="show why a Deployment has its replicas", description=DESCRIPTION)
    add_target_arguments(p, "inference/llama-70b")
    p.add_argument("--kubeconfig", help="kubeconfig path (default: in-cluster, then $KUBECONFIG, then ~/.kube/config)")
    p.add_argument("--json", action="store_true", help="print the published status as JSON")
    p.set_defaults(handler=run)


def _hhmm(ts: Any) -> str:
    return datetime.fromtimestamp(int(ts), tz=UTC).strftime("%H:%M") if isinstance(ts, int | float) else "  -  "


def _num(x: Any) -> str:
    return f"{x:8.2f}" if isinstance(x, int | float) else "       -"


def render(namespace: str, name: str, status: DeploymentStatus, problems: list[str]) -> list[str]:
    """The explanation as lines of text (pure: tested without a cluster)."""
    lines = [f"{namespace}/{name}  mode={status.mode}  as of {status.time or '?'}"]
    if status.scaled_by:
        lines.append(f"scaled by HorizontalPodAutoscaler {', '.join(status.scaled_by)}: the controller writes no "
                     "replicas while one does (two autoscalers undo each other's changes)")
    tokens = status.demand_unit == "tokens"
    unit = "tokens/s" if tokens else "req/s"
    if tokens:
        w = status.token_weights or {}
        lines.append(f"demand in tokens/s: prompt tokens x {w.get('input', '?')} + generated tokens x "
                     f"{w.get('output', '?')} (demand-unit: tokens)")
    lines.append(
        f"replicas: desired {status.desired_replicas}, current {status.current_replicas}, "
        f"ready {status.ready_replicas}; lead time {status.lead_seconds}s; warm pool "
        f"{status.warm_pool_replicas} ({status.warm_pool_as})"
    )
    fc = status.forecast
    if fc:
        bands = ", ".join(f"{k} {v}" for k, v in (fc.get("bands") or {}).items())
        fallback = f" (fell back: {'; '.join(fc['fallbacks'])})" if fc.get("fallbacks") else ""
        lines.append(
            f"forecast ({fc.get('model')}{fallback}) for {_hhmm(fc.get('at'))} UTC: "
            f"mean {fc.get('mean')} {unit}; {bands}"
        )
    else:
        lines.append("forecast: none (metrics missing: replicas are held, never scaled down blindly)")
    lines.extend(_capacity_lines(status.capacity, unit))
    lines.append("why:")
    for i, step in enumerate(status.steps, 1):
        lines.append(f"  {i}. {step.name!s:<22} -> {step.replicas!s:>4}  {step.detail}")
    lines.extend(_tuning_lines(status.tuning))
    lines.extend(_scale_down_lines(status.scale_down))
    for p in problems:
        lines.append(f"problem: {p}")
    track = [e for e in status.track if isinstance(e.get("t"), int | float)]
    if track:
        lines.append(f"forecast vs actual ({unit}, UTC):")
        lines.append("   time    actual  forecast     upper")
        forecasts = [e for e in track if isinstance(e.get("at"), int | float)]
        for e in track:
            made = min(forecasts, key=lambda f: abs(f["at"] - e["t"]), default=None)
            close = made is not None and abs(made["at"] - e["t"]) < MATCH_SECONDS
            lines.append(
                f"  {_hhmm(e['t'])}  {_num(e.get('actual'))}  {_num(made.get('mean') if close and made else None)}"
                f"  {_num(made.get('upper') if close and made else None)}"
            )
    return lines


def _tuning_lines(tuning: Any) -> list[str]:
    """The self-tuned operating point: the objective, each candidate replayed (GPU-hours, attainment), the choice."""
    if not isinstance(tuning, dict):
        return []
    wait, target = tuning.get("slo_wait_seconds"), tuning.get("slo_attainment")
    objective = (f"{target * 100:g}% of requests start within {wait:g}s"
                 if isinstance(wait, int | float) and isinstance(target, int | float) else "?")
    at = tuning.get("at")
    lines = [f"self-tuning (objective: {objective}; replayed up to {_hhmm(at)} UTC): {tuning.get('reason')}"]
    if tuning.get("chosen") is None:
        lines.append(f"   until a replay chooses, it runs the tuner's start point: a reactive autoscaler at "
                     f"{start_target()} utilisation that starts early (the forecast adds only the lead)")
    elif tuning.get("chosen") == LEAD_ONLY_QUANTILE:
        lines.append(f"   running as a reactive autoscaler at {tuning.get('chosen_utilisation')} utilisation that "
                     "starts early: the forecast adds only the lead (warm_pool_quantile 50 = the HPA's own point)")
    candidates = [c for c in tuning.get("candidates") or [] if isinstance(c, dict)]
    if candidates:
        days = tuning.get("days_pooled")
        lines.append("   warm_pool_quantile  utilisation    GPU-h   attained   wait p99"
                     + (f"   (pooled over {days} replayed day(s))" if isinstance(days, int) else ""))
        chosen = (tuning.get("chosen"), tuning.get("chosen_utilisation", 1.0))
        for c in candidates:
            util = c.get("reactive_utilisation", 1.0)
            mark = "  <- chosen" if (c.get("warm_pool_quantile"), util) == chosen else ""
            attained = c.get("slo_attainment")
            shown = f"{attained * 100:8.2f}%" if isinstance(attained, int | float) else "       -"
            lines.append(f"   {c.get('warm_pool_quantile')!s:>18}  {util!s:>11} {_num(c.get('gpu_hours'))}  {shown}  "
                         f"{_num(c.get('wait_p99_seconds'))}s{mark}")
    return lines + _record_lines(tuning)


def _record_lines(tuning: dict[str, Any]) -> list[str]:
    """The record (up to four weeks of replayed days): what ran against each of the HPA's own points on the same
    days, the comparison a team makes with the HPA it would otherwise run. Nothing for a record it cannot read."""
    try:
        versus = versus_hpa(Tuning.from_dict(tuning).days)
    except ValueError:
        return []
    if versus is None or not versus.hpa:
        return []
    assumed = (f" ({versus.assumed} of them replayed before the controller ran it: what its rule would have run "
               "there)" if versus.assumed else "")
    lines = [f"   over the record's {versus.days} replayed day(s){assumed}: what ran {versus.gpu_hours:.1f} GPU-h, "
             f"{versus.attainment * 100:.2f}% on time; the HPA's own points (started early) on the same days:"]
    for c in versus.hpa:
        more = (c.gpu_hours / versus.gpu_hours - 1.0) * 100 if versus.gpu_hours > 0 else math.nan
        better = "  <- did better than what ran" if c in versus.beaten else ""
        lines.append(f"   {c.label:>18}  {c.gpu_hours:9.1f} GPU-h ({more:+.0f}%)  "
                     f"{c.slo_attainment * 100:7.2f}%{better}")
    return lines


def _scale_down_lines(last: Any) -> list[str]:
    """The last scale-down applied: the pods marked for removal, or why the marks did not choose the pods removed
    (a team's own deletion cost, loads unknown, a rollout, ...): the one place a person sees that after the Event
    has aged out."""
    if not isinstance(last, dict):
        return []
    lines = [f"last scale-down: {last.get('from')} -> {last.get('to')} at {last.get('at', '?')}"]
    marked = [m for m in last.get("marked") or [] if isinstance(m, dict)]
    if marked:
        lines.append("  marked for removal: " + ", ".join(f"{m.get('pod')} ({m.get('cost')}: {m.get('why')})"
                                                          for m in marked))
    if last.get("unmarked"):
        lines.append(f"  the marks did not choose {'all ' if marked else ''}the pods removed ({last['unmarked']}): "
                     f"{last.get('note')}")
    elif not marked:
        lines.append("  no pod marked" + (f": {last['note']}" if last.get("note") else ""))
    return lines


def _capacity_lines(capacity: Any, unit: str = "req/s") -> list[str]:
    """Requests/s (or tokens/s) per replica, where it came from, and the learned estimate with its evidence."""
    if not isinstance(capacity, dict):
        return []
    used, source = capacity.get("perReplica"), capacity.get("source")
    learned = capacity.get("learned") if isinstance(capacity.get("learned"), dict) else None
    if isinstance(used, int | float):
        lines = [f"capacity: {used:g} {unit} per replica ({source})"]
    else:
        lines = [f"{capacity.get('note') or 'capacity not learned yet'} (replicas held, never scaled on a guess)"]
    if learned is not None:
        signals = ", ".join(f"{k} {v}" for k, v in (learned.get("signals") or {}).items())
        lines.append(f"  learned ({learned.get('at', '?')}): {learned.get('reason')}")
        lines.append(f"  evidence: {learned.get('saturated_bins')} saturated bins of {learned.get('usable_bins')} "
                     f"({learned.get('step_seconds')}s each) in {learned.get('episodes')} episode(s), by signal "
                     f"{signals or '-'}; confidence {learned.get('confidence')}")
    return lines


def _read_deployment(api: client.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    """The Deployment as API JSON; one GET in its namespace (namespace-scoped read access is enough)."""
    apps = client.AppsV1Api(api)
    try:
        dep = apps.read_namespaced_deployment(name, namespace, _request_timeout=30)
    except ApiException as exc:
        if exc.status == 404:
            raise UserError(f"deployment {namespace}/{name} not found") from None
        detail = f"HTTP {exc.status} {exc.reason or ''}".strip()
        raise UserError(f"reading deployment {namespace}/{name} failed: {detail}") from None
    except urllib3.exceptions.HTTPError:
        raise UserError(f"cannot reach the API server at {api.configuration.host}") from None
    out: dict[str, Any] = api.sanitize_for_serialization(dep)  # type: ignore[no-untyped-call]
    return out


def _read_status_object(
    api: client.ApiClient, namespace: str, name: str, annotated: bool,
) -> dict[str, Any] | None:
    """The Deployment's status object as API JSON, None when there is none; one GET in its namespace.

    Without read access to ConfigMaps there, the status an older controller left in the annotation is shown when
    the Deployment has one (``annotated``); otherwise the error says which grant is missing."""
    core = client.CoreV1Api(api)
    obj_name = status_object_name(name)
    try:
        cm = core.read_namespaced_config_map(obj_name, namespace, _request_timeout=30)
    except ApiException as exc:
        if exc.status == 404 or (exc.status == 403 and annotated):
            return None
        detail = f"HTTP {exc.status} {exc.reason or ''}".strip()
        hint = (f": explain needs get on configmaps in namespace {namespace}, where the controller keeps the status"
                if exc.status == 403 else "")
        raise UserError(f"reading configmap {namespace}/{obj_name} failed: {detail}{hint}") from None
    except urllib3.exceptions.HTTPError:
        raise UserError(f"cannot reach the API server at {api.configuration.host}") from None
    out: dict[str, Any] = api.sanitize_for_serialization(cm)  # type: ignore[no-untyped-call]
    return out


def published(deployment: Mapping[str, Any], status_object: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The status the controller published for ``deployment``, chosen as the controller itself resumes from it
    (``autoscaler.domain.status.first_sight``): its status object, or the annotation an older version wrote when that
    is newer; an object owned by an earlier Deployment of the same name is not this one's (None: nothing readable
    published). ``UserError`` when what is published cannot be read."""
    meta = deployment.get("metadata") or {}
    name = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
    uid = str(meta.get("uid") or "")
    text = owner = None
    if status_object is not None:
        obj_meta = status_object.get("metadata") or {}
        owners = [str(o.get("uid") or "") for o in obj_meta.get("ownerReferences") or []
                  if isinstance(o, dict) and o.get("kind") == "Deployment"]
        owner = uid if uid in owners else (owners[0] if owners else None)
        found = (status_object.get("data") or {}).get(STATUS_DATA_KEY)
        text = found if isinstance(found, str) else None
    raw = (meta.get("annotations") or {}).get(STATUS_ANNOTATION)
    sight = first_sight(uid, raw if isinstance(raw, str) else None, text, owner)
    if sight.saved is None and sight.problems:
        raise UserError(f"{name}: {sight.problems[0]}")
    return sight.saved


def explain(
    deployment: Mapping[str, Any], as_json: bool = False, status_object: Mapping[str, Any] | None = None,
) -> list[str]:
    """The lines ``explain`` prints for a Deployment (API JSON) and its status object (API JSON, None: none read);
    ``UserError`` when the Deployment is not ours."""
    meta = deployment.get("metadata") or {}
    namespace, name = str(meta.get("namespace", "")), str(meta.get("name", ""))
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    if not is_enabled(labels):
        raise UserError(
            f"{namespace}/{name} is not an opted-in Deployment (label {ENABLED_LABEL}=\"true\")"
        )
    parsed = parse_workload(namespace, name, labels, annotations, (deployment.get("spec") or {}).get("template"))
    problems = [str(p) for p in parsed.problems]
    status = published(deployment, status_object)
    if status is None:
        return [f"{namespace}/{name}: the controller has not published a decision yet",
                *(f"problem: {p}" for p in problems)]
    if as_json:
        return [json.dumps(status, indent=2)]
    try:
        typed = DeploymentStatus.from_dict(status)
    except ValueError as exc:
        raise UserError(f"{namespace}/{name}: the published status cannot be read ({exc})") from None
    return render(namespace, name, typed, problems)


def parse_target(target: str) -> tuple[str, str]:
    namespace, sep, name = target.partition("/")
    if not sep or not namespace or not name or "/" in name:
        raise UserError(f"expected NAMESPACE/DEPLOYMENT, got {target!r}")
    return namespace, name


def run(args: argparse.Namespace) -> int:
    namespace, name = parse_target(target_of(args))
    try:
        api = api_client_from_config(args.kubeconfig)
    except KubeError as exc:
        raise UserError(str(exc)) from None
    with api:
        deployment = _read_deployment(api, namespace, name)
        meta = deployment.get("metadata") or {}
        annotated = STATUS_ANNOTATION in (meta.get("annotations") or {})
        # one not opted in is refused by explain() without a second read
        status_object = (_read_status_object(api, namespace, name, annotated)
                         if is_enabled(meta.get("labels") or {}) else None)
    print("\n".join(explain(deployment, args.json, status_object)))
    return 0
