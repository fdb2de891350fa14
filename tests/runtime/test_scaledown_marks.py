"""A scale-down marks the idlest pods (``pod-deletion-cost``) before the scale write, and later ticks clear the marks:
the loop over the recording fake API server and the real Prometheus, with its failure policy (a failed pod patch
or per-pod query never blocks the scale-down) and the dry run (marks nothing, says what it would mark).

``serving/mistral-code`` is set to 4 replicas (``min-replicas`` 2): its demand needs one, and the step limit
removes half, so every test scales it 4 -> 2. Its pods belong to ReplicaSet ``mistral-code-5b7c9d8f4``: the
backfilled ``...-m2n3b`` (busy: in-flight requests in Prometheus), ``...-aaaaa`` not Ready, ``...-bbbbb`` Ready
for an hour without a series (unknown load: never marked) and ``...-ccccc`` Ready 30 s ago (not scraped yet).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from kubernetes import client

from autoscaler.adapters.kube import KubeCluster
from autoscaler.adapters.prometheus import PrometheusSource
from autoscaler.config import Config, parse_config_text
from autoscaler.domain.annotations import PREFIX
from autoscaler.domain.scaledown import DELETION_COST_ANNOTATION, MARK_ANNOTATION
from autoscaler.runtime.loop import Controller, TickReport, WorkloadOutcome
from autoscaler.runtime.metrics import ControllerMetrics
from tests.kube.conftest import pod
from tests.kube.fakeapi import FakeKubeAPI
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


def controller(api_client: client.ApiClient, config: Config, url: str, *, dry_run: bool = False,
               queries: dict[str, str] | None = None) -> tuple[Controller, ControllerMetrics]:
    metrics = ControllerMetrics()
    source = make_source(url)
    OPEN.append(source)
    source.queries = {**source.queries, **(queries or {})}  # as prometheus.queries of the config would
    return Controller(KubeCluster(api_client, instance="t"), source, lambda: config, metrics=metrics,
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


def annotations(fake: FakeKubeAPI, name: str) -> dict[str, str]:
    obj = fake.get("pods", NS, name)
    assert obj is not None
    found: dict[str, str] = obj["metadata"].get("annotations") or {}
    return found


def pod_patches(fake: FakeKubeAPI) -> list[tuple[str, Any]]:
    return [(c.path.rsplit("/", 1)[1], c.body) for c in fake.calls("PATCH", r"/pods/")]


def cost(fake: FakeKubeAPI, name: str) -> str | None:
    return annotations(fake, name).get(DELETION_COST_ANNOTATION)


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
    assert json.loads(annotations(shrinking, NOT_READY)[MARK_ANNOTATION]) == {"cost": -2, "markedAt": now0}
    patches = shrinking.calls("PATCH", r"/pods/")
    assert [c.content_type for c in patches] == ["application/merge-patch+json"] * 2
    assert {p for p, _ in pod_patches(shrinking)} == {NOT_READY, FRESH}, "pods that stay are not written"
    order = [c.path for c in shrinking.requests if c.method == "PATCH"]
    scale = f"/apis/apps/v1/namespaces/{NS}/deployments/{DEP}/scale"
    assert order.index(scale) > max(order.index(f"/api/v1/namespaces/{NS}/pods/{p}") for p in (NOT_READY, FRESH))
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
        (FRESH, {"metadata": {"annotations": {DELETION_COST_ANNOTATION: None, MARK_ANNOTATION: None}}})]
    assert annotations(shrinking, FRESH).keys() == set()
    assert mistral(report).actions[:1] == (f"clear the mark of pod {FRESH}",)

    report = controller_.tick(now0 + 180)
    assert len(pod_patches(shrinking)) == before + 1, "nothing left to clear: no pod written"
    assert mistral(report).scale_down_marks is None


def test_a_failed_pod_patch_is_reported_and_the_scale_down_still_happens(
    shrinking: FakeKubeAPI, ctl: tuple[Controller, ControllerMetrics], now0: int
) -> None:
    controller_, metrics = ctl
    prime(controller_, now0)
    shrinking.fail("PATCH", r"/pods/", 500, times=10)
    report = controller_.tick(now0)
    assert not report.ok
    assert sum(f"marking pod {p} for the scale-down failed (scaling anyway" in e
               for e in report.errors for p in (NOT_READY, FRESH)) == 2
    assert metrics.registry.get_sample_value("predictive_autoscaler_errors_total", {"kind": "pod_mark"}) == 2
    dep = shrinking.get("deployments", NS, DEP)
    assert dep is not None
    assert dep["spec"]["replicas"] == 2


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
    assert outcome.actions == (f"would mark pod {NOT_READY} -2 (not Ready)",
                               f"would mark pod {FRESH} -1 (Ready 30s ago, not scraped yet)",
                               "would scale 4 -> 2")
    planned = outcome.to_dict()["scale_down_marks"]
    assert [(m["pod"], m["cost"]) for m in planned["marked"]] == [(NOT_READY, -2), (FRESH, -1)]
    assert planned["unknown_load"] == [UNKNOWN]
