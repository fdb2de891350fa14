"""A scale-down marks the idlest pods (``pod-deletion-cost``) before the scale write, and later ticks clear the marks:
the loop over the recording fake API server and the real Prometheus, with its failure policy (a per-pod query that
fails never blocks the scale-down; a mark not in place holds it a bounded time) and the dry run (marks nothing,
says what it would mark).

What the marks are for is which pods *go*, and that is decided by the ReplicaSet and Deployment controllers: the
tests marked so run their model (``tests/kube/replicaset_model.py``) over the fake API server after each tick and
assert on the pods deleted: during a rollout (more than one ReplicaSet with pods) the scale-down is held, or,
when the rollout is stuck, each ReplicaSet removes its own idlest; a pod measured idle goes before one whose load
nobody measured; a team's own deletion cost is said everywhere; marks are cleared when the Deployment leaves the
controller's care.

``serving/mistral-code`` is set to 4 replicas (``min-replicas`` 2): its demand needs one, and the step limit
removes half, so every test scales it 4 -> 2. Its pods belong to ReplicaSet ``mistral-code-5b7c9d8f4``: the
backfilled ``...-m2n3b`` (busy: in-flight requests in Prometheus), ``...-aaaaa`` not Ready, ``...-bbbbb`` Ready
for an hour without a series (unknown load: never marked) and ``...-ccccc`` Ready 30 s ago (not scraped yet).
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import UTC, datetime
from typing import Any

import pytest
from kubernetes import client

from autoscaler.adapters.kube import NODEPOOL_LABEL, KubeCluster
from autoscaler.adapters.prometheus import PrometheusSource
from autoscaler.commands.explain import explain
from autoscaler.config.parser import parse_config_text
from autoscaler.config.schema import Config
from autoscaler.domain.annotations import ENABLED_LABEL, PREFIX
from autoscaler.domain.scaledown import (
    DELETION_COST_ANNOTATION,
    MARK_ANNOTATION,
    MARK_CONFIRM_SECONDS,
    MARK_LABEL,
    MARK_TTL_SECONDS,
)
from autoscaler.domain.status import status_object_name
from autoscaler.runtime.loop import Controller, TickReport
from autoscaler.runtime.metrics import ControllerMetrics
from autoscaler.runtime.state import WorkloadOutcome
from models.types import TrafficSeries
from tests.kube.conftest import hpa, pod, stored_status
from tests.kube.fakeapi import FakeKubeAPI
from tests.kube.replicaset_model import DeploymentModel
from tests.runtime.conftest import loop_config_text, make_source
from tests.servers import PrometheusServer

pytestmark = pytest.mark.prometheus

NS, DEP, RS = "serving", "mistral-code", "mistral-code-5b7c9d8f4"
BUSY, NOT_READY, UNKNOWN, FRESH = (f"{RS}-{s}" for s in ("m2n3b", "aaaaa", "bbbbb", "ccccc"))


@pytest.fixture
def now0(prometheus_server: PrometheusServer) -> int:
    return prometheus_server.now - 1800


@pytest.fixture
def shrinking(fleet: FakeKubeAPI, now0: int) -> FakeKubeAPI:
    dep = fleet.get("deployments", NS, DEP)
    assert dep is not None
    dep["metadata"]["annotations"][PREFIX + "min-replicas"] = "2"
    dep["spec"]["replicas"] = 4
    dep["status"].update(replicas=4, readyReplicas=4)
    fleet.add("deployments", dep)
    t0 = datetime.fromtimestamp(now0, tz=UTC)
    hour_ago = datetime.fromtimestamp(now0 - 3600, tz=UTC)
    for name, ready_at in ((BUSY, hour_ago), (NOT_READY, None), (UNKNOWN, hour_ago),
                           (FRESH, datetime.fromtimestamp(now0 - 30, tz=UTC))):
        obj = pod(NS, name, DEP, created=hour_ago if ready_at == hour_ago else t0.replace(minute=0),
                  ready_at=ready_at, phase="Running" if ready_at else "Pending")
        obj["metadata"]["labels"]["pod-template-hash"] = RS.rsplit("-", 1)[1]
        obj["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": RS,
                                               "uid": "rs-uid", "controller": True}]
        fleet.add("pods", obj)
    return fleet


OPEN: list[PrometheusSource] = []


@pytest.fixture(autouse=True)
def _close_sources() -> Iterator[None]:
    yield
    while OPEN:
        OPEN.pop().close()


class PodLoads:
    """The real Prometheus for the demand, with the in-flight requests per pod a test sets (pod name -> value; a
    pod absent has no series): the ``PodLoadSource`` the loop marks by."""

    def __init__(self, inner: PrometheusSource, loads: Mapping[str, float]) -> None:
        self.inner = inner
        self.loads = dict(loads)

    def fleet_history(self, query: str, namespaces: Iterable[str], start: int, end: int,
                      step_seconds: int) -> Mapping[tuple[str, str], TrafficSeries]:
        return self.inner.fleet_history(query, namespaces, start, end, step_seconds)

    def pod_instant(self, query: str, namespaces: Iterable[str], at: float) -> Mapping[tuple[str, str], float]:
        return {(NS, name): v for name, v in self.loads.items()} if NS in set(namespaces) else {}


def controller(api_client: client.ApiClient, config: Config | Callable[[], Config], url: str, *,
               dry_run: bool = False, queries: dict[str, str] | None = None,
               loads: Mapping[str, float] | None = None) -> tuple[Controller, ControllerMetrics]:
    metrics = ControllerMetrics()
    source = make_source(url)
    OPEN.append(source)
    source.queries = {**source.queries, **(queries or {})}  # as prometheus.queries of the config would
    loop_source: PrometheusSource | PodLoads = source if loads is None else PodLoads(source, loads)
    current = config if callable(config) else (lambda: config)
    return Controller(KubeCluster(api_client, instance="t"), loop_source, current, metrics=metrics,
                      dry_run=dry_run), metrics


@pytest.fixture
def config(prometheus_server: PrometheusServer) -> Config:
    """The loop tests' configuration with a one-minute scale-down stabilisation window: a first tick holds (nothing
    shows the window agreed yet), a tick more than a minute later scales down (see ``prime``)."""
    text = loop_config_text(prometheus_server.url).replace("    horizon: 15m\n",
                                                             "    horizon: 15m\n    scale_down_stabilization: 1m\n")
    assert "scale_down_stabilization" in text
    return parse_config_text(text, "test-config.yaml")


@pytest.fixture
def ctl(shrinking: FakeKubeAPI, api_client: client.ApiClient, config: Config,
        prometheus_server: PrometheusServer) -> tuple[Controller, ControllerMetrics]:
    return controller(api_client, config, prometheus_server.url)


def prime(controller_: Controller, now0: int) -> None:
    """A tick two minutes before ``now0``: it holds (first decision) and starts the stabilisation window, which has
    passed by ``now0``; no pod is marked or written."""
    report = controller_.tick(now0 - 120)
    assert mistral(report).decision is not None
    assert mistral(report).scale_down_marks is None


def mistral(report: TickReport) -> WorkloadOutcome:
    (found,) = [w for w in report.workloads if w.name == DEP]
    return found


def pod_annotations(fake: FakeKubeAPI, name: str) -> dict[str, str]:
    obj = fake.get("pods", NS, name)
    assert obj is not None
    found: dict[str, str] = obj["metadata"].get("annotations") or {}
    return found


def pod_patches(fake: FakeKubeAPI) -> list[tuple[str, Any]]:
    return [(c.path.rsplit("/", 1)[1], c.body) for c in fake.calls("PATCH", r"/pods/")]


def labels(fake: FakeKubeAPI, name: str) -> dict[str, str]:
    obj = fake.get("pods", NS, name)
    assert obj is not None
    found: dict[str, str] = obj["metadata"].get("labels") or {}
    return found


def cost(fake: FakeKubeAPI, name: str) -> str | None:
    return pod_annotations(fake, name).get(DELETION_COST_ANNOTATION)


def replicas(fake: FakeKubeAPI) -> int:
    dep = fake.get("deployments", NS, DEP)
    assert dep is not None
    return int(dep["spec"]["replicas"])


def status(fake: FakeKubeAPI) -> dict[str, Any]:
    return stored_status(fake, NS, DEP)


def explained(fake: FakeKubeAPI) -> list[str]:
    dep = fake.get("deployments", NS, DEP)
    assert dep is not None
    return explain(dep, status_object=fake.get("configmaps", NS, status_object_name(DEP)))


def events(fake: FakeKubeAPI, reason: str) -> list[dict[str, Any]]:
    return [e for e in fake.all("events", NS) if e["involvedObject"]["name"] == DEP and e["reason"] == reason]


def unmarked(metrics: ControllerMetrics, reason: str) -> float | None:
    return metrics.registry.get_sample_value("predictive_autoscaler_scale_down_unmarked_total",
                                             {"namespace": NS, "deployment": DEP, "reason": reason})


def test_the_idlest_pods_are_marked_before_the_scale_write_and_cleared_once_it_landed(
    shrinking: FakeKubeAPI, ctl: tuple[Controller, ControllerMetrics], now0: int
) -> None:
    controller_, _ = ctl
    prime(controller_, now0)
    assert shrinking.calls("PATCH", r"/pods/") == []
    report = controller_.tick(now0)
    assert report.ok, report.errors
    outcome = mistral(report)
    assert outcome.decision is not None
    assert outcome.decision.desired_replicas == 2
    # Not Ready first, then the pod Ready 30 s ago (not scraped yet); the busy one and the unknown one stay.
    assert (cost(shrinking, NOT_READY), cost(shrinking, FRESH)) == ("-2", "-1")
    assert cost(shrinking, BUSY) is None
    assert cost(shrinking, UNKNOWN) is None
    assert json.loads(pod_annotations(shrinking, NOT_READY)[MARK_ANNOTATION]) == {"cost": -2, "markedAt": now0}
    patches = shrinking.calls("PATCH", r"/pods/")
    assert [c.content_type for c in patches] == ["application/merge-patch+json"] * 2
    assert {p for p, _ in pod_patches(shrinking)} == {NOT_READY, FRESH}, "pods that stay are not written"
    order = [(c.method, c.path) for c in shrinking.calls()]
    scale = order.index(("PATCH", f"/apis/apps/v1/namespaces/{NS}/deployments/{DEP}/scale"))
    marked_at = max(order.index(("PATCH", f"/api/v1/namespaces/{NS}/pods/{p}")) for p in (NOT_READY, FRESH))
    assert marked_at < scale
    assert ("GET", f"/api/v1/namespaces/{NS}/pods") in order[marked_at:scale], \
        "the pods are read again after the marks are written and before the scale: the read shows them in place"
    assert labels(shrinking, NOT_READY)[MARK_LABEL] == "true", "one label-selected list finds every marked pod"
    assert outcome.scale_down_marks is not None
    assert outcome.scale_down_marks.unknown == (UNKNOWN,)
    assert f"mark pod {NOT_READY} -2 (not Ready)" in outcome.actions
    (event,) = [e for e in shrinking.all("events", NS) if e["involvedObject"]["name"] == DEP]
    assert event["reason"] == "ScaledDown"
    assert f"idlest pods marked for removal: {NOT_READY} (not Ready), {FRESH} (" in event["message"]

    # The ReplicaSet has not acted yet (4 pods for 2 replicas): the marks stay, nothing is written.
    before = len(shrinking.calls("PATCH", r"/pods/"))
    report = controller_.tick(now0 + 60)
    assert report.ok, report.errors
    assert len(shrinking.calls("PATCH", r"/pods/")) == before
    assert cost(shrinking, FRESH) == "-1"

    # It removes two pods, not both marked ones (as a ReplicaSet may: say FRESH failed its probe meanwhile...
    # it does not matter why): the surviving mark is cleared, the pods of others are untouched.
    for name in (NOT_READY, UNKNOWN):
        del shrinking.objects[("pods", NS, name)]
    dep = shrinking.get("deployments", NS, DEP)
    assert dep is not None
    dep["status"].update(replicas=2, readyReplicas=2)
    shrinking.add("deployments", dep)
    report = controller_.tick(now0 + 120)
    assert report.ok, report.errors
    assert pod_patches(shrinking)[before:] == [
        (FRESH, {"metadata": {"annotations": {DELETION_COST_ANNOTATION: None, MARK_ANNOTATION: None},
                              "labels": {MARK_LABEL: None}}})]
    assert pod_annotations(shrinking, FRESH).keys() == set()
    assert MARK_LABEL not in labels(shrinking, FRESH)
    assert mistral(report).actions[:1] == (f"clear the mark of pod {FRESH}",)

    report = controller_.tick(now0 + 180)
    assert len(pod_patches(shrinking)) == before + 1, "nothing left to clear: no pod written"
    assert mistral(report).scale_down_marks is None


def test_a_mark_not_in_place_holds_the_scale_down_a_bounded_time_then_it_goes_ahead_and_says_so(
    shrinking: FakeKubeAPI, ctl: tuple[Controller, ControllerMetrics], now0: int
) -> None:
    """Scale only after a read shows the marks: a failed pod patch (or a mark someone removed) holds the
    scale-down for the tick, and it is retried; after ``MARK_CONFIRM_SECONDS`` it goes ahead without relying on
    the marks (the ReplicaSet's default order is no worse than without them), and says so."""
    controller_, metrics = ctl
    prime(controller_, now0)
    shrinking.fail("PATCH", r"/pods/", 500, times=100)
    report = controller_.tick(now0)
    assert not report.ok
    assert sum(f"marking pod {p} for the scale-down failed" in e
               for e in report.errors for p in (NOT_READY, FRESH)) == 2
    assert metrics.registry.get_sample_value("predictive_autoscaler_errors_total", {"kind": "pod_mark"}) == 2
    assert replicas(shrinking) == 4, "the marks are not in place: no scale this tick"
    outcome = mistral(report)
    assert outcome.decision is not None
    assert outcome.decision.steps[-1].name == "marks_unconfirmed"
    assert outcome.decision.desired_replicas == 4
    assert "not in place" in outcome.decision.steps[-1].detail
    assert [s["name"] for s in status(shrinking)["steps"]][-1] == "marks_unconfirmed"

    controller_.tick(now0 + MARK_CONFIRM_SECONDS - 30)
    assert replicas(shrinking) == 4, "still within the bound: retried, not scaled"

    report = controller_.tick(now0 + MARK_CONFIRM_SECONDS)
    assert replicas(shrinking) == 2, "the bound passed: scaled without relying on the marks"
    assert unmarked(metrics, "marks_unconfirmed") == 1
    (event,) = events(shrinking, "ScaledDown")
    assert "marks_unconfirmed" in event["message"]
    assert status(shrinking)["scaleDown"]["unmarked"] == "marks_unconfirmed"


def test_marks_in_place_scale_at_once_and_a_retried_mark_needs_no_new_write(
    shrinking: FakeKubeAPI, ctl: tuple[Controller, ControllerMetrics], now0: int
) -> None:
    """One transient failure holds one tick; the next tick writes the missing mark, reads it back, and scales."""
    controller_, metrics = ctl
    prime(controller_, now0)
    shrinking.fail("PATCH", rf"/pods/{FRESH}$", 500, times=1)
    controller_.tick(now0)
    assert replicas(shrinking) == 4
    assert cost(shrinking, NOT_READY) == "-2"
    writes = len(shrinking.calls("PATCH", r"/pods/"))
    report = controller_.tick(now0 + 30)
    assert report.ok, report.errors
    assert replicas(shrinking) == 2
    assert [c.path.rsplit("/", 1)[1] for c in shrinking.calls("PATCH", r"/pods/")[writes:]] == [FRESH], \
        "the mark already in place is not written again"
    assert unmarked(metrics, "marks_unconfirmed") is None


def test_unknown_in_flight_marks_no_pod_says_so_and_still_scales(
    shrinking: FakeKubeAPI, api_client: client.ApiClient, config: Config, prometheus_server: PrometheusServer,
    now0: int,
) -> None:
    broken = 'sum by (namespace, pod) (vllm:num_requests_running{namespace=~"{namespaces}"}'  # a parse error
    controller_, metrics = controller(api_client, config, prometheus_server.url,
                                      queries={"pod_in_flight": broken})
    prime(controller_, now0)
    report = controller_.tick(now0)
    assert any(e.startswith("in-flight requests per pod unknown, scale-downs mark no pod") for e in report.errors)
    assert metrics.registry.get_sample_value("predictive_autoscaler_errors_total", {"kind": "pod_load"}) == 1
    assert shrinking.calls("PATCH", r"/pods/") == []
    marks = mistral(report).scale_down_marks
    assert marks is not None
    assert marks.marks == ()
    assert marks.note is not None
    assert "query failed" in marks.note
    dep = shrinking.get("deployments", NS, DEP)
    assert dep is not None
    assert dep["spec"]["replicas"] == 2


def test_an_unmarked_scale_down_is_logged_once_per_reason_and_counted_every_time(
    shrinking: FakeKubeAPI, api_client: client.ApiClient, config: Config, prometheus_server: PrometheusServer,
    now0: int, caplog: pytest.LogCaptureFixture,
) -> None:
    # Without a per-pod query every scale-down is unmarked: the log says so once (a fleet would write a line per
    # Deployment per scale-down), the metric and the ScaledDown Event count each one.
    broken = 'sum by (namespace, pod) (vllm:num_requests_running{namespace=~"{namespaces}"}'  # a parse error
    controller_, metrics = controller(api_client, config, prometheus_server.url,
                                      queries={"pod_in_flight": broken})
    prime(controller_, now0)
    with caplog.at_level(logging.WARNING, logger="autoscaler.runtime.loop"):
        report = controller_.tick(now0)
        marks = mistral(report).scale_down_marks
        assert marks is not None
        assert marks.unmarked is not None
        (view,) = [v for v in controller_.cluster.list_workloads() if (v.namespace, v.name) == (NS, DEP)]
        text = controller_._scaled_down(view, 1, marks, now0 + 60)  # the next scale-down, unmarked for the same reason
    assert "the marks do not choose the pods removed" in text
    warnings = [r for r in caplog.records if "not (fully) steered by the marks" in r.getMessage()]
    assert len(warnings) == 1
    assert unmarked(metrics, marks.unmarked) == 2


def test_a_dry_run_marks_nothing_and_says_what_it_would_mark(
    shrinking: FakeKubeAPI, api_client: client.ApiClient, config: Config, prometheus_server: PrometheusServer,
    now0: int,
) -> None:
    controller_, _ = controller(api_client, config, prometheus_server.url, dry_run=True)
    prime(controller_, now0)
    report = controller_.tick(now0)
    assert report.ok, report.errors
    assert shrinking.writes() == []
    outcome = mistral(report)
    assert outcome.actions[0] == f"would mark pod {NOT_READY} -2 (not Ready)"
    assert outcome.actions[1].startswith(f"would mark pod {FRESH} -1 (Ready 30s ago, not scraped yet")
    assert outcome.actions[2:] == ("would scale 4 -> 2",)
    planned = outcome.to_dict()["scale_down_marks"]
    assert [(m["pod"], m["cost"]) for m in planned["marked"]] == [(NOT_READY, -2), (FRESH, -1)]
    assert planned["unknown_load"] == [UNKNOWN]


# ---------------------------------------------------------------------------------------------- which pods go

NEW_RS = f"{DEP}-6f8d0b2a1"


def at(t: float) -> datetime:
    return datetime.fromtimestamp(t, tz=UTC)


def rs_pod(name: str, replicaset: str, now0: int, *, ready_ago: float | None, created_ago: float = 10_800,
           annotations: dict[str, str] | None = None) -> dict[str, Any]:
    """A pod of ``replicaset`` as the ReplicaSet controller makes it, on a node of its own (Ready ``ready_ago``
    seconds before ``now0``; None: Running, not Ready yet)."""
    obj = pod(NS, name, DEP, created=at(now0 - created_ago),
              ready_at=None if ready_ago is None else at(now0 - ready_ago))
    obj["metadata"]["labels"]["pod-template-hash"] = replicaset.rsplit("-", 1)[1]
    obj["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": replicaset,
                                           "uid": replicaset, "controller": True}]
    obj["metadata"]["uid"] = name
    obj["spec"]["nodeName"] = f"gpu-{name.rsplit('-', 1)[1]}"
    if annotations:
        obj["metadata"]["annotations"] = annotations
    return obj


def scene(fleet: FakeKubeAPI, pods: list[dict[str, Any]], *, replicas: int = 4) -> FakeKubeAPI:
    """``serving/mistral-code`` at ``replicas`` (min 2: the loop's demand scales it to 2) with exactly ``pods``."""
    dep = fleet.get("deployments", NS, DEP)
    assert dep is not None
    dep["metadata"]["annotations"][PREFIX + "min-replicas"] = "2"
    dep["spec"]["replicas"] = replicas
    fleet.add("deployments", dep)
    for obj in pods:
        fleet.add("pods", obj)
    DeploymentModel.from_pods(fleet, NS, DEP, max_surge=1).settle(at(0))  # the status counts, as the controllers keep
    return fleet


OLD_BUSY, OLD_IDLE1, OLD_IDLE2 = (f"{RS}-{s}" for s in ("busy1", "idle1", "idle2"))
NEW_1, NEW_2, NEW_3, NEW_4 = (f"{NEW_RS}-{s}" for s in ("new01", "new02", "new03", "new04"))
ROLLING_LOADS = {OLD_BUSY: 6.0, OLD_IDLE1: 0.0, OLD_IDLE2: 0.0}  # the new pods are not Ready: no series yet


@pytest.fixture
def rolling(fleet: FakeKubeAPI, now0: int) -> FakeKubeAPI:
    """A rollout under way (maxSurge 1 of 4): three Ready pods of the old ReplicaSet, the busiest the most recently
    Ready, and two pods of the new one, not Ready yet."""
    return scene(fleet, [
        rs_pod(OLD_BUSY, RS, now0, ready_ago=600),
        rs_pod(OLD_IDLE1, RS, now0, ready_ago=7200),
        rs_pod(OLD_IDLE2, RS, now0, ready_ago=10_000),
        rs_pod(NEW_1, NEW_RS, now0, ready_ago=None, created_ago=300),
        rs_pod(NEW_2, NEW_RS, now0, ready_ago=None, created_ago=240),
    ])


def loads_of(controller_: Controller) -> PodLoads:
    assert isinstance(controller_.source, PodLoads)
    return controller_.source


def test_a_rollout_holds_the_scale_down_says_so_once_and_the_marks_decide_once_it_is_over(
    rolling: FakeKubeAPI, api_client: client.ApiClient, config: Config, prometheus_server: PrometheusServer,
    now0: int,
) -> None:
    """Scaled down during a rollout, the Deployment controller splits the cut across both ReplicaSets and the old
    one deletes its most recently Ready pod, the busy one, whatever the marks (the model shows it). So the
    scale-down is held, in the decision, the status, ``explain`` and one Event, and no mark is written for it;
    once one ReplicaSet is left it goes ahead and the pods removed are the marked, idlest ones."""
    controller_, _ = controller(api_client, config, prometheus_server.url, loads=ROLLING_LOADS)
    model = DeploymentModel.from_pods(rolling, NS, DEP, max_surge=1)
    prime(controller_, now0)
    report = controller_.tick(now0)
    assert report.ok, report.errors
    assert model.settle(at(now0)) == [], "nothing is removed during the rollout"
    assert replicas(rolling) == 4
    outcome = mistral(report)
    assert outcome.decision is not None
    step = outcome.decision.steps[-1]
    assert (step.name, step.replicas, outcome.decision.desired_replicas) == ("rollout_hold", 4, 4)
    assert RS in step.detail
    assert NEW_RS in step.detail
    assert rolling.calls("PATCH", r"/pods/") == [], "no mark for a scale-down that is not about to happen"
    assert [s["name"] for s in status(rolling)["steps"]][-1] == "rollout_hold"
    assert any("rollout_hold" in line and "ReplicaSets have pods" in line for line in explained(rolling))
    (held,) = events(rolling, "ScaleDownHeld")
    assert "held" in held["message"]
    assert held["type"] == "Normal"

    report = controller_.tick(now0 + 60)
    assert report.ok, report.errors
    assert replicas(rolling) == 4
    assert len(events(rolling, "ScaleDownHeld")) == 1, "one Event per transition, not one per tick"

    # The rollout ends: the old ReplicaSet's pods are gone, the new one has four Ready pods, two of them idle.
    for name in (OLD_BUSY, OLD_IDLE1, OLD_IDLE2):
        obj = rolling.get("pods", NS, name)
        assert obj is not None
        obj["metadata"]["deletionTimestamp"] = at(now0 + 70).strftime("%Y-%m-%dT%H:%M:%SZ")
        rolling.add("pods", obj)
    for name in (NEW_1, NEW_2, NEW_3, NEW_4):
        rolling.add("pods", rs_pod(name, NEW_RS, now0, ready_ago=-70, created_ago=300))
    loads_of(controller_).loads = {NEW_1: 3.0, NEW_2: 0.0, NEW_3: 5.0, NEW_4: 0.0}
    model = DeploymentModel.from_pods(rolling, NS, DEP, max_surge=1)
    model.settle(at(now0 + 70))

    report = controller_.tick(now0 + 240)
    assert report.ok, report.errors
    assert replicas(rolling) == 2
    assert sorted(model.settle(at(now0 + 240))) == [NEW_2, NEW_4], "the two idle pods, and only they"
    assert len(events(rolling, "ScaleDownHeld")) == 1


def test_a_stuck_rollout_no_longer_holds_and_each_replicaset_removes_its_own_idlest_pods(
    rolling: FakeKubeAPI, api_client: client.ApiClient, config: Config, prometheus_server: PrometheusServer,
    now0: int, caplog: pytest.LogCaptureFixture,
) -> None:
    """A rollout the Deployment controller reports stuck (``ProgressDeadlineExceeded``) must not hold a scale-down
    for ever: it goes ahead with a Warning, and the idlest pods of each ReplicaSet are marked, so whatever share
    of the cut the Deployment controller gives a ReplicaSet, that ReplicaSet removes its own idlest pods."""
    dep = rolling.get("deployments", NS, DEP)
    assert dep is not None
    dep["status"]["conditions"] = [{"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded",
                                    "message": f'ReplicaSet "{NEW_RS}" has timed out progressing.'}]
    rolling.add("deployments", dep)
    controller_, metrics = controller(api_client, config, prometheus_server.url, loads=ROLLING_LOADS)
    model = DeploymentModel.from_pods(rolling, NS, DEP, max_surge=1)
    prime(controller_, now0)
    with caplog.at_level(logging.WARNING, logger="autoscaler.runtime.loop"):
        report = controller_.tick(now0)
    assert report.ok, report.errors
    assert replicas(rolling) == 2
    gone = set(model.settle(at(now0)))
    assert gone & {OLD_BUSY, OLD_IDLE1, OLD_IDLE2}, "the split cuts the old ReplicaSet too"
    assert OLD_BUSY not in gone, "the busy pod of the old ReplicaSet stays: its idle ones go first"

    outcome = mistral(report)
    assert outcome.decision is not None
    assert outcome.decision.steps[-1].name == "rollout_stuck"
    assert "ProgressDeadlineExceeded" in outcome.decision.steps[-1].detail
    (warning,) = events(rolling, "ScaleDownDuringRollout")
    assert warning["type"] == "Warning"
    assert unmarked(metrics, "rollout") == 1
    assert "rollout" in events(rolling, "ScaledDown")[0]["message"]
    assert any("ProgressDeadlineExceeded" in r.getMessage() for r in caplog.records)
    controller_.tick(now0 + 60)
    assert len(events(rolling, "ScaleDownDuringRollout")) == 1


def test_a_pod_measured_idle_is_removed_before_pods_nobody_has_measured(
    fleet: FakeKubeAPI, api_client: client.ApiClient, config: Config, prometheus_server: PrometheusServer,
    now0: int,
) -> None:
    """Two pods just Ready without a series yet may be serving already: the pod measured at 0 goes first, and the
    busy one stays (the default order, most recently Ready first, would remove the two new ones)."""
    idle, busy, fresh1, fresh2 = (f"{RS}-{s}" for s in ("mzero", "mbusy", "fres1", "fres2"))
    scene(fleet, [rs_pod(idle, RS, now0, ready_ago=3600), rs_pod(busy, RS, now0, ready_ago=3000),
                  rs_pod(fresh1, RS, now0, ready_ago=30, created_ago=200),
                  rs_pod(fresh2, RS, now0, ready_ago=60, created_ago=200)])
    controller_, _ = controller(api_client, config, prometheus_server.url, loads={idle: 0.0, busy: 7.0})
    model = DeploymentModel.from_pods(fleet, NS, DEP, max_surge=1)
    prime(controller_, now0)
    report = controller_.tick(now0)
    assert report.ok, report.errors
    assert replicas(fleet) == 2
    gone = set(model.settle(at(now0)))
    assert len(gone) == 2
    assert idle in gone, "the pod measured idle goes before any pod whose load is unknown"
    assert busy not in gone


def test_a_teams_own_deletion_cost_is_said_in_the_event_the_status_the_log_and_the_metrics(
    shrinking: FakeKubeAPI, ctl: tuple[Controller, ControllerMetrics], now0: int, caplog: pytest.LogCaptureFixture,
) -> None:
    obj = shrinking.get("pods", NS, BUSY)
    assert obj is not None
    obj["metadata"]["annotations"] = {DELETION_COST_ANNOTATION: "100"}  # the team's, e.g. from its pod template
    shrinking.add("pods", obj)
    controller_, metrics = ctl
    prime(controller_, now0)
    with caplog.at_level(logging.WARNING, logger="autoscaler.runtime.loop"):
        report = controller_.tick(now0)
    assert report.ok, report.errors
    assert replicas(shrinking) == 2
    assert shrinking.calls("PATCH", r"/pods/") == [], "the team's order is kept: nothing marked"
    (event,) = events(shrinking, "ScaledDown")
    assert "foreign_cost" in event["message"]
    assert "did not set" in event["message"]
    assert BUSY in event["message"]
    last = status(shrinking)["scaleDown"]
    assert (last["from"], last["to"], last["unmarked"], last["marked"]) == (4, 2, "foreign_cost", [])
    assert any("foreign_cost" in r.getMessage() and r.levelno == logging.WARNING for r in caplog.records)
    assert unmarked(metrics, "foreign_cost") == 1
    assert any("foreign_cost" in line for line in explained(shrinking))
    marks = mistral(report).scale_down_marks
    assert marks is not None
    assert marks.unmarked == "foreign_cost"


# ---------------------------------------------------------------------------------------------- marks nobody keeps


def leave(fake: FakeKubeAPI, how: str, holder: list[Config]) -> None:
    dep = fake.get("deployments", NS, DEP)
    assert dep is not None
    if how == "label removed":
        del dep["metadata"]["labels"][ENABLED_LABEL]
    elif how == "advisory":
        dep["metadata"]["annotations"][PREFIX + "mode"] = "advisory"
    elif how == "annotations invalid":
        dep["metadata"]["annotations"][PREFIX + "min-replicas"] = "a few"
    elif how == "namespace excluded":
        holder[0] = dataclasses.replace(holder[0], namespaces=("research",))
    elif how == "an HPA scales it":
        fake.add("horizontalpodautoscalers", hpa(NS, f"{DEP}-cpu", DEP))
    fake.add("deployments", dep)


def assert_unmarked(fake: FakeKubeAPI, *names: str) -> None:
    for name in names:
        assert DELETION_COST_ANNOTATION not in pod_annotations(fake, name), name
        assert MARK_ANNOTATION not in pod_annotations(fake, name), name
        assert MARK_LABEL not in labels(fake, name), name


@pytest.mark.parametrize("how", ["label removed", "advisory", "annotations invalid", "namespace excluded",
                                 "an HPA scales it"])
def test_marks_are_cleared_as_soon_as_the_deployment_leaves_the_controllers_care(
    shrinking: FakeKubeAPI, api_client: client.ApiClient, config: Config, prometheus_server: PrometheusServer,
    now0: int, how: str,
) -> None:
    """A mark nothing maintains steers the next ``kubectl scale``: it is cleared on the next tick, both
    annotations and the label, while the ReplicaSet still has the pods."""
    holder = [config]
    controller_, _ = controller(api_client, lambda: holder[0], prometheus_server.url)
    prime(controller_, now0)
    controller_.tick(now0)
    assert (cost(shrinking, NOT_READY), cost(shrinking, FRESH)) == ("-2", "-1")
    leave(shrinking, how, holder)
    report = controller_.tick(now0 + 30)
    assert report.ok, report.errors
    assert_unmarked(shrinking, NOT_READY, FRESH)
    writes = len(shrinking.writes())
    controller_.tick(now0 + 60)
    assert not shrinking.calls("PATCH", r"/pods/")[writes:], "nothing left to clear"


def test_a_restarted_controller_clears_the_marks_of_a_deployment_opted_out_while_it_was_stopped(
    shrinking: FakeKubeAPI, api_client: client.ApiClient, config: Config, prometheus_server: PrometheusServer,
    now0: int,
) -> None:
    first, _ = controller(api_client, config, prometheus_server.url)
    prime(first, now0)
    first.tick(now0)
    assert cost(shrinking, FRESH) == "-1"
    leave(shrinking, "label removed", [config])
    second, _ = controller(api_client, config, prometheus_server.url)
    report = second.tick(now0 + 600)
    assert report.ok, report.errors
    assert_unmarked(shrinking, NOT_READY, FRESH)
    listed = shrinking.calls("GET", r"^/api/v1/pods$")
    assert listed, "one label-selected list across namespaces finds them"
    assert listed[0].query["labelSelector"] == [MARK_LABEL]


def test_marks_the_replicaset_never_acted_on_expire(
    shrinking: FakeKubeAPI, ctl: tuple[Controller, ControllerMetrics], now0: int
) -> None:
    """A ReplicaSet that never removes the pods (a stalled controller-manager, say) must not leave marks to steer
    a later scale-down: they go after ``MARK_TTL_SECONDS``."""
    controller_, _ = ctl
    prime(controller_, now0)
    controller_.tick(now0)
    assert cost(shrinking, FRESH) == "-1"
    controller_.tick(now0 + MARK_TTL_SECONDS - 60)
    assert cost(shrinking, FRESH) == "-1", "4 pods for 2 replicas: the ReplicaSet is still removing"
    report = controller_.tick(now0 + MARK_TTL_SECONDS)
    assert report.ok, report.errors
    assert_unmarked(shrinking, NOT_READY, FRESH)


@pytest.mark.parametrize("loads_read", [True, False], ids=["loads read", "in-flight query failed"])
def test_with_its_nodepool_read_a_scale_down_takes_the_pods_of_the_emptiest_nodes_so_a_node_empties(
    fleet: FakeKubeAPI, api_client: client.ApiClient, config: Config, prometheus_server: PrometheusServer,
    now0: int, loads_read: bool,
) -> None:
    """The Deployment names its NodePool, so the tick reads the GPUs in use on each of its nodes: the scale-down takes
    the pod alone on its node (busier than the two idle pods on a full node) and the pod on the half-used node, so a
    whole node empties and Karpenter can remove it. By load alone it would take the two idle pods and free two GPUs
    of a node that stays billed (``domain.scaledown``). With the per-pod in-flight query failing the nodes still
    choose (the loads are unknown either way to the ReplicaSet's own order), and the outcome says so."""
    lone, half, idle0, idle1 = (f"{RS}-{s}" for s in ("lone1", "half1", "idle0", "idle1"))
    where = {lone: "gpu-a", half: "gpu-b", idle0: "gpu-c", idle1: "gpu-c"}
    pods = [rs_pod(p, RS, now0, ready_ago=3600 + i) for i, p in enumerate((lone, half, idle0, idle1))]
    others = {"gpu-b": 3, "gpu-c": 6}  # GPUs other teams' pods hold on those nodes
    for obj in pods:
        obj["spec"]["nodeName"] = where[obj["metadata"]["name"]]
        obj["spec"]["containers"][0]["resources"] = {"requests": {"nvidia.com/gpu": "1"},
                                                     "limits": {"nvidia.com/gpu": "1"}}
    for n in ("gpu-a", "gpu-b", "gpu-c"):
        fleet.add("nodes", {"apiVersion": "v1", "kind": "Node",
                            "metadata": {"name": n, "labels": {NODEPOOL_LABEL: "gpu"}},
                            "status": {"allocatable": {"nvidia.com/gpu": "8"},
                                       "conditions": [{"type": "Ready", "status": "True"}]}})
    scene(fleet, pods)
    for n in others:
        other = pod("batch", f"other-{n}", "other", created=at(now0 - 7200), ready_at=at(now0 - 7000))
        other["spec"]["nodeName"] = n
        other["spec"]["containers"][0]["resources"] = {"requests": {"nvidia.com/gpu": str(others[n])},
                                                       "limits": {"nvidia.com/gpu": str(others[n])}}
        fleet.add("pods", other)
    dep = fleet.get("deployments", NS, DEP)
    assert dep is not None
    dep["metadata"]["annotations"][PREFIX + "nodepool"] = "gpu"
    fleet.add("deployments", dep)
    broken = 'sum by (namespace, pod) (vllm:num_requests_running{namespace=~"{namespaces}"}'  # a parse error
    if loads_read:
        controller_, _ = controller(api_client, config, prometheus_server.url,
                                    loads={lone: 4.0, half: 2.0, idle0: 0.0, idle1: 0.5})
    else:
        controller_, _ = controller(api_client, config, prometheus_server.url, queries={"pod_in_flight": broken})
    model = DeploymentModel.from_pods(fleet, NS, DEP, max_surge=1)
    prime(controller_, now0)
    report = controller_.tick(now0)
    assert report.ok == loads_read, report.errors
    assert replicas(fleet) == 2
    outcome = mistral(report)
    assert outcome.scale_down_marks is not None
    assert [(m.pod, m.cost) for m in outcome.scale_down_marks.marks] == [(lone, -2), (half, -1)]
    assert "on gpu-a with 1 GPU(s) in use" in outcome.scale_down_marks.marks[0].why
    if not loads_read:
        assert any(e.startswith("in-flight requests per pod unknown") for e in report.errors)
        assert outcome.scale_down_marks.unmarked == "no_pod_loads"
        assert "load unknown" in outcome.scale_down_marks.marks[0].why
    gone = set(model.settle(at(now0)))
    assert gone == {lone, half}
    assert {p for p, n in where.items() if n == "gpu-a"} <= gone, "node gpu-a is left without a pod: Karpenter can go"
