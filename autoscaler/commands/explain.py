"""``predictive-autoscaler explain NAMESPACE/DEPLOYMENT``: why a Deployment has the replicas it has.

Reads what the controller published on the Deployment (the ``predictive-autoscaler.io/status``
annotation: the decision's steps, the forecast at the horizon, and a 4-hour track of forecasts
and actuals) and prints it for a person. It needs only read access to Deployments, so an
inference team can run it with its own namespace-scoped credentials.
"""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime
from typing import Any

from autoscaler.adapters.kube import KubeCluster, KubeError, api_client_from_config
from autoscaler.cli import UserError
from autoscaler.domain.annotations import STATUS_ANNOTATION, parse_workload
from autoscaler.ports import Cluster


def register(sub: Any) -> None:
    p = sub.add_parser("explain", help="show why a Deployment has its replicas", description=__doc__)
    p.add_argument("target", metavar="NAMESPACE/DEPLOYMENT")
    p.add_argument("--kubeconfig", help="kubeconfig path (default: in-cluster, then $KUBECONFIG)")
    p.add_argument("--json", action="store_true", help="print the published status as JSON")
    p.set_defaults(handler=run)


def _hhmm(ts: Any) -> str:
    return datetime.fromtimestamp(int(ts), tz=UTC).strftime("%H:%M") if isinstance(ts, int | float) else "  -  "


def _num(x: Any) -> str:
    return f"{x:8.2f}" if isinstance(x, int | float) else "       -"


def render(namespace: str, name: str, status: dict[str, Any], problems: list[str]) -> list[str]:
    """The explanation as lines of text (pure: tested without a cluster)."""
    lines = [f"{namespace}/{name}  mode={status.get('mode')}  as of {status.get('time', '?')}"]
    lines.append(
        f"replicas: desired {status.get('desiredReplicas')}, current {status.get('currentReplicas')}, "
        f"ready {status.get('readyReplicas')}; lead time {status.get('leadSeconds')}s; warm pool "
        f"{(status.get('warmPool') or {}).get('replicas')} ({(status.get('warmPool') or {}).get('as')})"
    )
    fc = status.get("forecast")
    if fc:
        bands = ", ".join(f"{k} {v}" for k, v in (fc.get("bands") or {}).items())
        fallback = f" (fell back: {'; '.join(fc['fallbacks'])})" if fc.get("fallbacks") else ""
        lines.append(
            f"forecast ({fc.get('model')}{fallback}) for {_hhmm(fc.get('at'))} UTC: "
            f"mean {fc.get('mean')} req/s; {bands}"
        )
    else:
        lines.append("forecast: none (metrics missing: replicas are held, never scaled down blindly)")
    lines.append("why:")
    for i, step in enumerate(status.get("steps") or [], 1):
        lines.append(f"  {i}. {step.get('name'):<22} -> {step.get('replicas'):>4}  {step.get('detail')}")
    for p in problems:
        lines.append(f"problem: {p}")
    track = status.get("track") or []
    if track:
        lines.append("forecast vs actual (req/s, UTC):")
        lines.append("   time    actual  forecast     upper")
        forecasts = [e for e in track if e.get("at") is not None]
        for e in track:
            made = min(forecasts, key=lambda f: abs(f["at"] - e["t"]), default=None)
            close = made is not None and abs(made["at"] - e["t"]) <= 300
            lines.append(
                f"  {_hhmm(e['t'])}  {_num(e.get('actual'))}  {_num(made['mean'] if close and made else None)}"
                f"  {_num(made['upper'] if close and made else None)}"
            )
    return lines


def explain(cluster: Cluster, target: str, as_json: bool = False) -> list[str]:
    namespace, sep, name = target.partition("/")
    if not sep or not namespace or not name:
        raise UserError(f"expected NAMESPACE/DEPLOYMENT, got {target!r}")
    try:
        views = cluster.list_workloads()
    except KubeError as exc:
        raise UserError(str(exc)) from None
    view = next((v for v in views if v.namespace == namespace and v.name == name), None)
    if view is None:
        raise UserError(
            f"{namespace}/{name} is not an opted-in Deployment (label predictive-autoscaler.io/enabled=\"true\")"
        )
    raw = view.annotations.get(STATUS_ANNOTATION)
    parsed = parse_workload(namespace, name, view.labels, view.annotations, view.pod_template)
    problems = [str(p) for p in parsed.problems]
    if raw is None:
        return [f"{namespace}/{name}: the controller has not published a decision yet", *problems]
    try:
        status = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise UserError(f"{namespace}/{name}: status annotation is not JSON ({exc})") from None
    if as_json:
        return [json.dumps(status, indent=2)]
    return render(namespace, name, status, problems)


def run(args: argparse.Namespace) -> int:
    try:
        cluster = KubeCluster(api_client_from_config(args.kubeconfig))
    except KubeError as exc:
        raise UserError(str(exc)) from None
    print("\n".join(explain(cluster, args.target, args.json)))
    return 0
