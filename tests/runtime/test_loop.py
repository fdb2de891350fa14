"""The control loop end to end: real HTTP to a recording fake API server and to the real Prometheus.

Every tick gets ``now`` as data (inside the backfilled history), so what the loop fetched, decided and
wrote is checked exactly: the range query's window, the scale subresource PATCH, the status object
(a ConfigMap beside each Deployment), the Events, the exported metrics and the ``TickReport``. Expected
demand comes from the backfill's ground truth, not from a previous run.
"""

from __future__ import annotations

import json
import logging
import math
from datetime import UTC, datetime
from typing import Any

import pytest
from kubernetes import client

from autoscaler.adapters.kube import KubeCluster
from autoscaler.config.schema import Config
from autoscaler.domain.annotations import PREFIX
from autoscaler.domain.status import STATUS_DATA_KEY, status_object_name
from autoscaler.engine.deciding import (
    CURRENT_DEMAND_RESOLUTION_SECONDS,
    CURRENT_DEMAND_WIDE_WINDOW_SECONDS,
    CURRENT_DEMAND_WINDOW_SECONDS,
)
from autoscaler.runtime.loop import Controller, TickReport
from autoscaler.runtime.metrics import ControllerMetrics
from autoscaler.runtime.state import WorkloadOutcome
from tests.kube.conftest import pod, stored_status
from tests.kube.fakeapi import FakeKubeAPI
from tests.runtime.conftest import Rig, make_source
from tests.servers import PrometheusServer, free_port

pytestmark = pytest.mark.prometheus

STEP = 60
DAY = 86_400


@pytest.fixture
def now0(prometheus_server: PrometheusServer) -> int:
    """Half an hour before the backfill ends: later ticks still find fresh samples."""
    return prometheus_server.now - 1800


def scale_patches(fake: FakeKubeAPI, name: str) -> list[Any]:
    return [c.body for c in fake.calls("PATCH", rf"/deployments/{name}/scale$")]


def status_writes(fake: FakeKubeAPI, namespace: str, name: str) -> list[Any]:
    """The writes of Deployment ``name``'s status object (create, then replace)."""
    obj = status_object_name(name)
    return [c for c in fake.calls(path=rf"^/api/v1/namespaces/{namespace}/configmaps")
            if c.method in ("POST", "PUT") and (c.body or {}).get("metadata", {}).get("name") == obj]


def published(fake: FakeKubeAPI, namespace: str, name: str) -> dict[str, Any]:
    return stored_status(fake, namespace, name)


def replicas(fake: FakeKubeAPI, namespace: str, name: str) -> int:
    dep = fake.get("deployments", namespace, name)
    assert dep is not None
    return int(dep["spec"]["replicas"])


def outcome(report: TickReport, name: str) -> WorkloadOutcome:
    (found,) = [w for w in report.workloads if w.name == name]
    return found


def reasons(rig: Rig, name: str | None = None) -> list[tuple[str, str, str]]:
    """(deployment, type, reason) of every Event posted, in order."""
    return [(e["involvedObject"]["name"], e["type"], e["reason"]) for e in rig.events(name=name)]


def truth(prometheus_server: PrometheusServer, namespace: str, name: str, bin_start: int) -> float:
    backfill = prometheus_server.backfill
    return float(backfill.arrival_rate(namespace, name)[(bin_start - backfill.start) // STEP])


def test_first_tick_fetches_the_fleet_once_scales_the_short_deployment_and_publishes_why(
    rig: Rig, prometheus_server: PrometheusServer, now0: int, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="autoscaler.runtime.loop"):
        report = rig.controller.tick(now0)

    assert report.ok, report.errors
    # One fleet query for all three Deployments in both namespaces, over the configured day of history and the newest
    # ended bin (which the model is not fitted on until it settles): a day of bins to fit on
    (query,) = rig.transport.range_queries()
    assert 'namespace=~"research|serving"' in query["query"]
    assert int(query["start"]) == now0 - DAY  # bin [now0 - 1d - 60, now0 - 1d) is evaluated at its end
    assert int(query["end"]) == now0

    # llama-chat: ~2.5 req/s against 0.4 req/s per replica -> scaled up through the scale subresource.
    llama = outcome(report, "llama-chat")
    assert llama.decision is not None
    desired = llama.decision.desired_replicas
    observed = truth(prometheus_server, "serving", "llama-chat", now0 - STEP)
    assert desired >= math.ceil(observed / 0.4) > 2
    (scale,) = rig.fake.calls("PATCH", r"/deployments/llama-chat/scale$")
    assert scale.path == "/apis/apps/v1/namespaces/serving/deployments/llama-chat/scale"
    assert scale.content_type == "application/merge-patch+json"
    assert scale.body == {"spec": {"replicas": desired}}
    assert replicas(rig.fake, "serving", "llama-chat") == desired

    # The status, in the Deployment's status object (created): the Deployment itself is written only through its
    # scale subresource.
    (create,) = status_writes(rig.fake, "serving", "llama-chat")
    assert (create.method, create.path) == ("POST", "/api/v1/namespaces/serving/configmaps")
    assert rig.fake.calls("PATCH", r"/deployments/llama-chat$") == []
    status = json.loads(create.body["data"][STATUS_DATA_KEY])
    assert status == published(rig.fake, "serving", "llama-chat")
    assert status["desiredReplicas"] == desired
    assert status["currentReplicas"] == 2
    assert status["mode"] == "scale"
    assert status["time"] == datetime.fromtimestamp(now0, tz=UTC).isoformat()
    forecast = status["forecast"]
    assert forecast["at"] == now0 + 900  # the profile's 15-minute horizon
    # the first tick runs the self-tuner's start point (the HPA's own point: the median only); a replay chooses the
    # point the next ticks run
    assert set(forecast["bands"]) == {"p50"}
    assert forecast["bands"]["p50"] >= 0
    assert next(s["name"] for s in status["steps"]) == "lead_time"
    assert [s["name"] for s in status["steps"]][-1] == "min_max_clamp"
    assert status["steps"][-1]["replicas"] == desired
    (entry,) = status["track"]
    assert entry["t"] == now0
    assert entry["actual"] == pytest.approx(observed, rel=1e-6)
    assert entry["mean"] == forecast["mean"]

    # The other two need one replica: held, no scale request, but their status is published too.
    for namespace, name in (("serving", "mistral-code"), ("research", "qwen-eval")):
        assert scale_patches(rig.fake, name) == []
        assert replicas(rig.fake, namespace, name) == 1
        assert published(rig.fake, namespace, name)["desiredReplicas"] == 1

    # Exactly one Event: Normal ScaledUp on llama-chat, saying from what to what.
    assert reasons(rig) == [("llama-chat", "Normal", "ScaledUp")]
    (event,) = rig.events()
    assert event["message"].startswith(f"replicas 2 -> {desired} (")
    assert any(f"({s.name}: {s.detail})" in event["message"] for s in llama.decision.steps if s.replicas == desired)
    assert event["involvedObject"]["namespace"] == "serving"
    # The log says the same decision once: the scale it acted on, not the held Deployments.
    decisions = [r.getMessage() for r in caplog.records if "replicas" in r.getMessage()]
    assert decisions == [f"serving/llama-chat: {event['message']}"]

    # Metrics: the observed demand is the real rate of the newest bin; desired and current exported.
    labels = {"namespace": "serving", "deployment": "llama-chat"}
    assert rig.metric("predictive_autoscaler_demand_requests_per_second", labels) == pytest.approx(observed, rel=1e-9)
    assert rig.metric("predictive_autoscaler_desired_replicas", labels) == desired
    assert rig.metric("predictive_autoscaler_decisions_total", {**labels, "outcome": "up"}) == 1
    assert rig.metric("predictive_autoscaler_metrics_source_up") == 1
    assert rig.metric("predictive_autoscaler_workloads", {"state": "managed"}) == 3


def test_later_ticks_fetch_only_the_newest_bins(rig: Rig, prometheus_server: PrometheusServer, now0: int) -> None:
    rig.controller.tick(now0)
    for k in (1, 2, 3):
        now = now0 + k * STEP
        report = rig.controller.tick(now)
        assert report.ok, report.errors
        query = rig.transport.range_queries()[-1]
        # The previous end re-fetched two bins back (late scrapes may still land), nothing older.
        assert int(query["start"]) == now - 2 * STEP
        assert int(query["end"]) == now
    assert len(rig.transport.range_queries()) == 4, "one fleet query per tick"
    # The history the loop keeps is still the real one, newest bin included.
    observed = truth(prometheus_server, "serving", "mistral-code", now0 + 2 * STEP)
    labels = {"namespace": "serving", "deployment": "mistral-code"}
    assert rig.metric("predictive_autoscaler_demand_requests_per_second", labels) == pytest.approx(observed, rel=1e-9)


def test_a_tick_within_the_same_step_refetches_without_growing_the_history(rig: Rig, now0: int) -> None:
    rig.controller.tick(now0)
    report = rig.controller.tick(now0 + 30)  # same minute: the grid end is unchanged
    assert report.ok
    query = rig.transport.range_queries()[-1]
    assert (int(query["start"]), int(query["end"])) == (now0 - STEP, now0)


def test_advisory_mode_never_scales_but_publishes_its_decision(rig: Rig, now0: int) -> None:
    dep = rig.fake.get("deployments", "serving", "llama-chat")
    assert dep is not None
    dep["metadata"]["annotations"][PREFIX + "mode"] = "advisory"
    rig.fake.add("deployments", dep)

    for k in range(3):
        report = rig.controller.tick(now0 + k * STEP)
        assert report.ok, report.errors

    assert scale_patches(rig.fake, "llama-chat") == []
    assert replicas(rig.fake, "serving", "llama-chat") == 2
    status = published(rig.fake, "serving", "llama-chat")
    assert status["mode"] == "advisory"
    assert status["desiredReplicas"] > status["currentReplicas"] == 2
    assert not [r for r in reasons(rig) if r[2].startswith("Scaled")]
    labels = {"namespace": "serving", "deployment": "llama-chat"}
    assert rig.metric("predictive_autoscaler_decisions_total", {**labels, "outcome": "advisory"}) == 3
    assert rig.metric("predictive_autoscaler_desired_replicas", labels) == status["desiredReplicas"]


@pytest.mark.parametrize(
    ("annotations", "key", "value"),
    [
        ({"min-replicas": "8", "max-replicas": "3"}, "min-replicas", "8"),
        ({"max-replicas": "ten"}, "max-replicas", "ten"),
        ({"mode": "turbo"}, "mode", "turbo"),
    ],
    ids=["min-above-max", "non-numeric", "unknown-mode"],
)
def test_a_malformed_annotation_warns_once_on_that_deployment_only(
    rig: Rig, now0: int, annotations: dict[str, str], key: str, value: str
) -> None:
    # mistral-code would need many replicas at 0.05 req/s each, if its annotations were valid.
    dep = rig.fake.get("deployments", "serving", "mistral-code")
    assert dep is not None
    dep["metadata"]["annotations"].update({PREFIX + "capacity-per-replica": "0.05"})
    dep["metadata"]["annotations"].update({PREFIX + k: v for k, v in annotations.items()})
    rig.fake.add("deployments", dep)

    first = rig.controller.tick(now0)
    second = rig.controller.tick(now0 + STEP)

    warnings = [e for e in rig.events() if e["type"] == "Warning"]
    (warning,) = warnings
    assert warning["involvedObject"]["name"] == "mistral-code"
    assert warning["reason"] == "InvalidAnnotation"
    assert f"{PREFIX}{key}={value!r}" in warning["message"]
    # Not scaled and nothing written on it; the valid ones go on (llama-chat is scaled up).
    assert rig.fake.calls("PATCH", r"/deployments/mistral-code") == []
    assert replicas(rig.fake, "serving", "mistral-code") == 1
    assert scale_patches(rig.fake, "llama-chat")
    assert replicas(rig.fake, "serving", "llama-chat") > 2
    for report in (first, second):
        broken = outcome(report, "mistral-code")
        assert broken.decision is None
        assert any(f"{PREFIX}{key}" in p for p in broken.problems)
        assert outcome(report, "llama-chat").decision is not None
    assert rig.metric("predictive_autoscaler_workloads", {"state": "invalid"}) == 1
    assert rig.metric("predictive_autoscaler_errors_total", {"kind": "invalid_annotation"}) == 1


def test_a_fixed_annotation_that_breaks_again_is_reported_again(rig: Rig, now0: int) -> None:
    def set_mode(mode: str) -> None:
        dep = rig.fake.get("deployments", "research", "qwen-eval")
        assert dep is not None
        dep["metadata"]["annotations"][PREFIX + "mode"] = mode
        rig.fake.add("deployments", dep)

    set_mode("turbo")
    rig.controller.tick(now0)
    set_mode("scale")
    rig.controller.tick(now0 + STEP)
    set_mode("turbo")
    rig.controller.tick(now0 + 2 * STEP)
    assert reasons(rig, "qwen-eval") == [("qwen-eval", "Warning", "InvalidAnnotation")] * 2


def test_prometheus_outage_holds_replicas_warns_once_and_recovers_by_itself(
    rig: Rig, prometheus_server: PrometheusServer, now0: int
) -> None:
    # qwen-eval is over-provisioned (6 replicas for < 1 req/s at 5 req/s each): only evidence may shrink it.
    dep = rig.fake.get("deployments", "research", "qwen-eval")
    assert dep is not None
    dep["spec"]["replicas"] = dep["status"]["replicas"] = dep["status"]["readyReplicas"] = 6
    rig.fake.add("deployments", dep)
    assert rig.controller.tick(now0).ok
    llama_before = replicas(rig.fake, "serving", "llama-chat")
    events_before = len(rig.events())

    down = make_source(f"http://127.0.0.1:{free_port()}")  # nothing listens there; retries=0
    rig.controller.source = down
    outage = [rig.controller.tick(now0 + k * STEP) for k in range(1, 13)]  # 11 minutes > 10 m stabilisation
    down.close()

    for report in outage:
        assert not report.ok
        assert not report.metrics_ok
        assert any("metrics fetch failed" in e for e in report.errors)
        for w in report.workloads:
            assert w.decision is not None
            assert w.decision.desired_replicas == w.current_replicas
            assert w.decision.missing_metrics
    assert replicas(rig.fake, "research", "qwen-eval") == 6
    assert replicas(rig.fake, "serving", "llama-chat") == llama_before
    assert rig.metric("predictive_autoscaler_metrics_source_up") == 0
    assert rig.metric("predictive_autoscaler_errors_total", {"kind": "metrics_unavailable"}) == len(outage)
    # No stale numbers that look live: demand and forecast series are gone while metrics are missing.
    qwen = {"namespace": "research", "deployment": "qwen-eval"}
    assert rig.metric("predictive_autoscaler_demand_requests_per_second", qwen) is None
    assert rig.metric("predictive_autoscaler_forecast_requests_per_second", {**qwen, "band": "p50"}) is None
    assert rig.metric("predictive_autoscaler_desired_replicas", qwen) == 6
    new_events = rig.events()[events_before:]
    assert sorted((e["involvedObject"]["name"], e["type"], e["reason"]) for e in new_events) == [
        ("llama-chat", "Warning", "MetricsUnavailable"),
        ("mistral-code", "Warning", "MetricsUnavailable"),
        ("qwen-eval", "Warning", "MetricsUnavailable"),
    ]
    status = published(rig.fake, "research", "qwen-eval")
    assert status["forecast"] is None
    assert "hold_missing_metrics" in [s["name"] for s in status["steps"]]

    # Back: the real server again. The gap is fetched in one query and every workload hears about it once.
    rig.controller.source = rig.source
    recovered_at = now0 + 13 * STEP
    report = rig.controller.tick(recovered_at)
    assert report.ok, report.errors
    query = rig.transport.range_queries()[-1]
    assert int(query["start"]) == now0 - STEP  # from the last good history end, two bins back
    assert int(query["end"]) == recovered_at
    assert rig.metric("predictive_autoscaler_metrics_source_up") == 1
    assert rig.metric("predictive_autoscaler_demand_requests_per_second", qwen) is not None
    assert rig.metric("predictive_autoscaler_forecast_requests_per_second", {**qwen, "band": "p50"}) is not None
    recovered = [r for r in reasons(rig) if r[2] == "MetricsRecovered"]
    assert sorted(recovered) == [
        ("llama-chat", "Normal", "MetricsRecovered"),
        ("mistral-code", "Normal", "MetricsRecovered"),
        ("qwen-eval", "Normal", "MetricsRecovered"),
    ]
    # One fresh sample after an outage is not evidence enough to give GPUs back.
    assert replicas(rig.fake, "research", "qwen-eval") == 6
    rig.controller.tick(recovered_at + STEP)
    assert len([r for r in reasons(rig) if r[2].startswith("Metrics")]) == 6, "no repeats"


def test_a_controller_restarted_during_an_outage_does_not_warn_again_and_tells_the_recovery(
    rig: Rig, now0: int, api_client: client.ApiClient, loop_config: Config,
) -> None:
    """What the Events told is in the status (``told``): a new process (an upgrade, a new leader) does not post
    MetricsUnavailable again while the outage lasts, and does post MetricsRecovered when it ends."""
    assert rig.controller.tick(now0).ok
    down = make_source(f"http://127.0.0.1:{free_port()}")  # nothing listens there; retries=0
    rig.controller.source = down
    assert not rig.controller.tick(now0 + STEP).ok
    unavailable = [r for r in reasons(rig) if r[2] == "MetricsUnavailable"]
    assert len(unavailable) == 3
    assert published(rig.fake, "serving", "llama-chat")["told"]["outage"] is True

    def restart(source: Any) -> Controller:  # in memory only what the status holds
        return Controller(KubeCluster(api_client, instance="test-controller"), source, lambda: loop_config,
                          metrics=ControllerMetrics())

    assert not restart(down).tick(now0 + 2 * STEP).ok  # still down: nothing new to tell
    down.close()
    assert [r for r in reasons(rig) if r[2] == "MetricsUnavailable"] == unavailable
    assert restart(rig.source).tick(now0 + 3 * STEP).ok  # back, seen by yet another process: told once
    assert sorted(r for r in reasons(rig) if r[2] == "MetricsRecovered") == [
        ("llama-chat", "Normal", "MetricsRecovered"),
        ("mistral-code", "Normal", "MetricsRecovered"),
        ("qwen-eval", "Normal", "MetricsRecovered"),
    ]
    assert published(rig.fake, "serving", "llama-chat")["told"]["outage"] is False


def test_a_failed_scale_is_reported_counted_and_retried_next_tick(rig: Rig, now0: int) -> None:
    rig.fake.fail("PATCH", r"/deployments/llama-chat/scale$", 500)

    first = rig.controller.tick(now0)

    assert not first.ok
    assert first.metrics_ok
    (error,) = first.errors
    assert "serving/llama-chat" in error
    assert "HTTP 500" in error
    desired = outcome(first, "llama-chat").decision
    assert desired is not None
    assert f"to {desired.desired_replicas}" in error
    assert not any(a.startswith("scaled") for a in outcome(first, "llama-chat").actions)
    assert replicas(rig.fake, "serving", "llama-chat") == 2
    assert rig.metric("predictive_autoscaler_errors_total", {"kind": "kube_write"}) == 1
    assert not [r for r in reasons(rig) if r[2] == "ScaledUp"], "no ScaledUp for a scale that did not happen"

    second = rig.controller.tick(now0 + STEP)
    assert second.ok, second.errors
    assert len(scale_patches(rig.fake, "llama-chat")) == 2
    assert replicas(rig.fake, "serving", "llama-chat") > 2
    assert [r for r in reasons(rig) if r[2] == "ScaledUp"] == [("llama-chat", "Normal", "ScaledUp")]


def test_a_failed_event_is_posted_again_next_tick(rig: Rig, now0: int) -> None:
    dep = rig.fake.get("deployments", "research", "qwen-eval")
    assert dep is not None
    dep["metadata"]["annotations"][PREFIX + "mode"] = "turbo"
    rig.fake.add("deployments", dep)
    rig.fake.fail("POST", r"/namespaces/research/events$", 500)

    first = rig.controller.tick(now0)
    assert any("posting Event InvalidAnnotation failed" in e for e in first.errors)
    assert reasons(rig, "qwen-eval") == []
    rig.controller.tick(now0 + STEP)
    assert reasons(rig, "qwen-eval") == [("qwen-eval", "Warning", "InvalidAnnotation")]


def test_a_standby_never_writes_and_the_leader_then_acts(rig: Rig, now0: int) -> None:
    dep = rig.fake.get("deployments", "research", "qwen-eval")
    assert dep is not None
    dep["metadata"]["annotations"][PREFIX + "mode"] = "turbo"
    rig.fake.add("deployments", dep)

    for k in range(3):
        report = rig.controller.tick(now0 + k * STEP, acting=False)
        assert report.ok
        assert not report.acting
        llama = outcome(report, "llama-chat")
        assert llama.decision is not None
        assert llama.decision.desired_replicas > 2, "the standby still forecasts"
        assert llama.actions == (f"would scale 2 -> {llama.decision.desired_replicas}",)
    assert rig.fake.writes() == []
    assert rig.metric("predictive_autoscaler_is_leader") == 0

    report = rig.controller.tick(now0 + 3 * STEP, acting=True)
    assert report.ok
    assert rig.metric("predictive_autoscaler_is_leader") == 1
    assert replicas(rig.fake, "serving", "llama-chat") > 2
    # The problem the standby saw is posted by the leader, once.
    assert reasons(rig, "qwen-eval") == [("qwen-eval", "Warning", "InvalidAnnotation")]


def test_pending_unschedulable_pods_hold_the_scale_up_and_warn_once(
    rig: Rig, prometheus_server: PrometheusServer, now0: int
) -> None:
    created = datetime.fromtimestamp(now0 - 300, tz=UTC)
    rig.fake.add("pods", pod("serving", "llama-chat-7d9f8b6c5d-aaaaa", "llama-chat", created=created,
                             ready_at=created))
    rig.fake.add("pods", pod("serving", "llama-chat-7d9f8b6c5d-bbbbb", "llama-chat", created=created,
                             phase="Pending", scheduled=False))
    dep = rig.fake.get("deployments", "serving", "llama-chat")
    assert dep is not None
    dep["status"]["readyReplicas"] = 1  # one of the two replicas is the Pending pod
    rig.fake.add("deployments", dep)

    reports = [rig.controller.tick(now0 + k * STEP) for k in range(3)]

    assert scale_patches(rig.fake, "llama-chat") == []
    assert replicas(rig.fake, "serving", "llama-chat") == 2
    for report in reports:
        llama = outcome(report, "llama-chat")
        assert llama.decision is not None
        assert llama.decision.desired_replicas == 2
        step = llama.decision.steps[-1]
        assert step.name == "gpus_unavailable"
        assert "1 pod(s) Pending unschedulable" in step.detail
    assert reasons(rig, "llama-chat") == [("llama-chat", "Warning", "GPUsUnavailable")]
    assert published(rig.fake, "serving", "llama-chat")["steps"][-1]["name"] == "gpus_unavailable"

    # The pod gets its GPU: the held scale-up goes ahead, and a later shortage is reported again.
    ready = datetime.fromtimestamp(now0 + 3 * STEP, tz=UTC)
    rig.fake.add("pods", pod("serving", "llama-chat-7d9f8b6c5d-bbbbb", "llama-chat", created=created, ready_at=ready))
    dep = rig.fake.get("deployments", "serving", "llama-chat")
    assert dep is not None
    dep["status"]["readyReplicas"] = 2
    rig.fake.add("deployments", dep)
    rig.controller.tick(now0 + 4 * STEP)
    assert replicas(rig.fake, "serving", "llama-chat") > 2
    assert [r[2] for r in reasons(rig, "llama-chat")] == ["GPUsUnavailable", "ScaledUp"]


def test_a_deployment_that_opts_out_leaves_no_stale_metrics(rig: Rig, now0: int) -> None:
    rig.controller.tick(now0)
    labels = {"namespace": "research", "deployment": "qwen-eval"}
    assert rig.metric("predictive_autoscaler_desired_replicas", labels) == 1
    assert rig.metric("predictive_autoscaler_decisions_total", {**labels, "outcome": "hold"}) == 1
    dep = rig.fake.get("deployments", "research", "qwen-eval")
    assert dep is not None
    del dep["metadata"]["labels"][PREFIX + "enabled"]
    rig.fake.add("deployments", dep)

    report = rig.controller.tick(now0 + STEP)

    assert [w.name for w in report.workloads] == ["llama-chat", "mistral-code"]
    series = [s for family in rig.metrics.registry.collect() for s in family.samples]
    assert [s for s in series if s.labels.get("deployment") == "qwen-eval"] == []
    assert any(s.labels.get("deployment") == "llama-chat" for s in series)


def test_a_deployment_that_opts_in_later_gets_its_own_full_fetch(rig: Rig, now0: int) -> None:
    qwen = rig.fake.get("deployments", "research", "qwen-eval")
    assert qwen is not None
    del qwen["metadata"]["labels"][PREFIX + "enabled"]
    rig.fake.add("deployments", qwen)
    rig.controller.tick(now0)
    (first,) = rig.transport.range_queries()
    assert 'namespace=~"serving"' in first["query"]

    qwen["metadata"]["labels"][PREFIX + "enabled"] = "true"
    rig.fake.add("deployments", qwen)
    now = now0 + STEP
    report = rig.controller.tick(now)

    assert report.ok, report.errors
    fresh, known = rig.transport.range_queries()[1:]
    assert 'namespace=~"research"' in fresh["query"]
    assert (int(fresh["start"]), int(fresh["end"])) == (now - DAY, now)
    assert 'namespace=~"serving"' in known["query"]
    assert (int(known["start"]), int(known["end"])) == (now - 2 * STEP, now)  # as in any later tick
    qwen_outcome = outcome(report, "qwen-eval")
    assert qwen_outcome.forecast is not None


def test_an_unknown_annotation_key_is_a_warning_and_the_deployment_is_still_managed(rig: Rig, now0: int) -> None:
    dep = rig.fake.get("deployments", "serving", "llama-chat")
    assert dep is not None
    dep["metadata"]["annotations"][PREFIX + "max-replica"] = "30"  # typo of max-replicas
    rig.fake.add("deployments", dep)

    rig.controller.tick(now0)
    rig.controller.tick(now0 + STEP)

    assert replicas(rig.fake, "serving", "llama-chat") > 2
    warnings = [e for e in rig.events(name="llama-chat") if e["type"] == "Warning"]
    (warning,) = warnings
    assert warning["reason"] == "InvalidAnnotation"
    assert warning["message"].startswith(f"ignored: {PREFIX}max-replica='30'")
    assert rig.metric("predictive_autoscaler_errors_total", {"kind": "invalid_annotation"}) is None


def test_a_failed_deployment_list_writes_nothing_and_the_next_tick_proceeds(rig: Rig, now0: int) -> None:
    rig.fake.fail("GET", r"^/apis/apps/v1/deployments$", 500)

    report = rig.controller.tick(now0)

    assert not report.ok
    (error,) = report.errors
    assert error.startswith("listing Deployments failed:")
    assert "HTTP 500" in error
    assert report.workloads == ()
    assert rig.fake.writes() == []
    assert rig.transport.forms == [], "no metrics fetched without a trustworthy snapshot"
    assert rig.metric("predictive_autoscaler_errors_total", {"kind": "kube_read"}) == 1
    assert rig.controller.tick(now0 + STEP).ok
    assert replicas(rig.fake, "serving", "llama-chat") > 2


def test_a_scale_someone_else_already_made_is_not_announced(rig: Rig, now0: int) -> None:
    plan = outcome(rig.controller.tick(now0, acting=False), "llama-chat").decision
    assert plan is not None
    desired = plan.desired_replicas

    def other_writer(fake: FakeKubeAPI) -> None:  # e.g. a person with kubectl, between our list and our write
        dep = fake.objects[("deployments", "serving", "llama-chat")]
        fake.store_unlocked("deployments", {**dep, "spec": {**dep["spec"], "replicas": desired}})

    rig.fake.before("GET", r"/deployments/llama-chat/scale$", other_writer)
    report = rig.controller.tick(now0)

    assert report.ok, report.errors
    assert f"already at {desired}" in outcome(report, "llama-chat").actions
    assert scale_patches(rig.fake, "llama-chat") == []
    assert [r for r in reasons(rig) if r[2] == "ScaledUp"] == []


def test_fits_past_the_tick_budget_wait_for_a_later_tick_and_nothing_scales_down(rig: Rig, now0: int) -> None:
    rig.controller.fit_budget_seconds = 0.0  # every fit is over budget
    report = rig.controller.tick(now0)
    managed = [w for w in report.workloads if w.decision is not None]
    assert managed
    assert rig.metric("predictive_autoscaler_deferred_fits") == len(managed)
    assert all(w.forecast is None for w in managed)
    assert all(w.decision is not None and w.decision.desired_replicas >= w.current_replicas for w in managed)

    rig.controller.fit_budget_seconds = None  # the default budget: a third of the interval, at least 5 s
    report = rig.controller.tick(now0 + STEP)
    assert rig.metric("predictive_autoscaler_deferred_fits") == 0
    assert all(w.forecast is not None for w in report.workloads if w.decision is not None)


def test_the_reactive_floor_reads_the_demand_of_the_last_minute_not_the_newest_bin(
    rig: Rig, prometheus_server: PrometheusServer, now0: int
) -> None:
    """Between two bin ends the newest ended bin is up to a step old; the floor's evidence is one instant query of the
    arrival rate over the last minute at ``now`` (as fresh as an HPA adapter's metric), for the whole fleet, and one
    over two minutes for what it leaves unanswered: this Prometheus holds a sample a minute, one in a minute's
    window, so here the wide one answers."""
    source = make_source(prometheus_server.url)

    def instant(at: int, window: int) -> float | None:
        return source.fleet_instant("arrival_rate", ["serving"], at, window_seconds=window,
                                    resolution_seconds=CURRENT_DEMAND_RESOLUTION_SECONDS).get(("serving", "llama-chat"))

    # half-way into a minute (the window straddles the newest ended bins and the one in progress), at the first
    # minute of the last three hours where the two readings differ by more than the detail's rounding can hide
    now = next(t for t in range(now0 - 3 * 3600 + 30, now0, STEP)
               if abs((instant(t, CURRENT_DEMAND_WIDE_WINDOW_SECONDS) or 0.0)
                      - truth(prometheus_server, "serving", "llama-chat", t - 30 - STEP)) > 0.15)
    assert instant(now, CURRENT_DEMAND_WINDOW_SECONDS) is None  # one sample in the last minute: no rate
    expected = instant(now, CURRENT_DEMAND_WIDE_WINDOW_SECONDS)
    assert expected is not None
    source.close()
    report = rig.controller.tick(now)
    assert report.ok, report.errors
    instants = [f for f in rig.transport.forms
                if f["path"] == "/api/v1/query" and "vllm:request_success_total" in f["query"]]
    assert [("[60s]" in f["query"], "[120s]" in f["query"], float(f["time"])) for f in instants] == [
        (True, False, now), (False, True, now)]
    decision = outcome(report, "llama-chat").decision
    assert decision is not None
    floor = {s.name: s for s in decision.steps}["reactive_floor"]
    assert f"observed {expected:.1f} req/s" in floor.detail
