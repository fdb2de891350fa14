"""The controller with ``capacity-per-replica: auto`` (and with an annotation beside a learned estimate).

Against the real Prometheus serving the capacity backfill (``tests/synthetic_vllm.py``: ``serving/busy-llm``
saturated six times at 3 req/s per replica, ``serving/calm-llm`` never saturated) and the recording fake API
server. Without enough evidence the replicas are held (no scale request at all), the decision says why, one
Warning Event says so (not one per tick), the status and ``capacity_unknown`` too; with it, the Deployment is
planned on the learned capacity. The evidence is read at start and then daily, not every tick.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import pytest
from kubernetes import client

from autoscaler.adapters.kube import KubeCluster
from autoscaler.adapters.prometheus import PrometheusSource
from autoscaler.config.parser import parse_config_text
from autoscaler.config.schema import Config
from autoscaler.domain.annotations import PREFIX
from autoscaler.runtime import reads
from autoscaler.runtime.loop import Controller, TickReport
from autoscaler.runtime.metrics import ControllerMetrics
from autoscaler.runtime.state import CAPACITY_EVERY_SECONDS, CAPACITY_RETRY_SECONDS, WorkloadOutcome
from models.types import TrafficSeries
from tests.kube.conftest import deployment, stored_status
from tests.kube.fakeapi import FakeKubeAPI
from tests.runtime.conftest import RecordingTransport
from tests.synthetic_vllm import BUSY_CAPACITY, CapacityServer

pytestmark = pytest.mark.prometheus

CONFIG = """\
loop:
  interval: 30s
  history: 2d
  step: 1m
profiles:
  default:
    history: 1d
    horizon: 15m
prometheus:
  url: {url}
  retries: 0
  timeout: 10s
{extra}"""


def config(url: str, extra: str = "") -> Config:
    return parse_config_text(CONFIG.format(url=url, extra=extra), "test-config.yaml")


def add(fake: FakeKubeAPI, name: str, replicas: int, capacity: str | None) -> None:
    dep = deployment("serving", name, replicas=replicas, annotations={PREFIX + "max-replicas": "20"})
    del dep["metadata"]["annotations"][PREFIX + "capacity-per-replica"]
    if capacity is not None:
        dep["metadata"]["annotations"][PREFIX + "capacity-per-replica"] = capacity
    dep["status"] = {"replicas": replicas, "readyReplicas": replicas}
    fake.add("deployments", dep)


class Rig:
    def __init__(self, fake: FakeKubeAPI, api: client.ApiClient, cfg: Config, *, learn: bool = True) -> None:
        self.fake = fake
        self.transport = RecordingTransport()
        # The source as ``run`` builds it: with the config's named queries.
        self.source = PrometheusSource(cfg.prometheus.url, retries=0, timeout_seconds=10, transport=self.transport,
                                       queries=cfg.prometheus.queries)
        self.metrics = ControllerMetrics()
        self.controller = Controller(KubeCluster(api, instance="t"), self.source, lambda: cfg, metrics=self.metrics,
                                     learn_capacity=learn)

    def tick(self, now: int) -> TickReport:
        return self.controller.tick(now)

    def events(self, name: str) -> list[tuple[str, str, str]]:
        return [(e["type"], e["reason"], e["message"]) for e in self.fake.all("events", "serving")
                if e["involvedObject"]["name"] == name]

    def status(self, name: str) -> dict[str, Any]:
        return stored_status(self.fake, "serving", name)

    def gauge(self, name: str, **labels: str) -> float | None:
        value = self.metrics.registry.get_sample_value(name, {"namespace": "serving", **labels})
        return value

    def evidence_reads(self) -> int:
        return sum("time_to_first_token" in q["query"] for q in self.transport.range_queries())


@pytest.fixture
def make_rig(fake_api: FakeKubeAPI, api_client: client.ApiClient) -> Iterator[Any]:
    rigs: list[Rig] = []

    def build(cfg: Config, *, learn: bool = True) -> Rig:
        rigs.append(Rig(fake_api, api_client, cfg, learn=learn))
        return rigs[-1]

    yield build
    for r in rigs:
        r.source.close()


def outcome(report: TickReport, name: str) -> WorkloadOutcome:
    (found,) = [w for w in report.workloads if w.name == name]
    return found


def test_auto_capacity_without_evidence_holds_the_replicas_and_says_why_once(
    capacity_prometheus: CapacityServer, fake_api: FakeKubeAPI, make_rig: Any
) -> None:
    server = capacity_prometheus.server
    add(fake_api, "calm-llm", 2, None)  # no annotation: auto
    add(fake_api, "busy-llm", 1, "auto")
    rig = make_rig(config(server.url))
    now = server.now - 600

    first = rig.tick(now)
    assert first.ok, first.errors
    calm = outcome(first, "calm-llm")
    assert calm.decision is not None
    assert calm.decision.desired_replicas == 2
    step = calm.decision.steps[0]
    assert step.name == "capacity_unknown"
    assert step.detail.startswith("capacity not learned yet: not enough evidence: the replicas were never saturated")
    assert "never scaled on a guessed capacity" in step.detail
    assert calm.forecast is not None  # still forecast, for people: only the replica count is not derived
    assert fake_api.calls("PATCH", r"/deployments/calm-llm/scale$") == []
    status = rig.status("calm-llm")
    assert status["desiredReplicas"] == 2
    assert status["capacity"]["source"] is None
    assert status["capacity"]["perReplica"] is None
    assert status["capacity"]["note"].startswith("capacity not learned yet: not enough evidence")
    assert status["capacity"]["learned"]["saturated_bins"] == 0
    assert status["capacity"]["learned"]["lower_bound"] > 0
    assert rig.gauge("predictive_autoscaler_capacity_unknown", deployment="calm-llm") == 1
    assert rig.gauge("predictive_autoscaler_capacity_per_replica", deployment="calm-llm", source="learned") is None
    ((kind, reason, message),) = rig.events("calm-llm")
    assert (kind, reason) == ("Warning", "CapacityNotLearned")
    assert "replicas are held at 2, never scaled on a guess" in message

    # busy-llm learned its capacity at the same start: planned on it, and told once.
    busy = outcome(first, "busy-llm")
    assert busy.decision is not None
    assert all(s.name != "capacity_unknown" for s in busy.decision.steps)
    learned = rig.status("busy-llm")["capacity"]
    assert learned["source"] == "learned"
    assert abs(learned["perReplica"] - BUSY_CAPACITY) / BUSY_CAPACITY < 0.10
    assert learned["learned"]["enough_evidence"] is True
    gauge = rig.gauge("predictive_autoscaler_capacity_per_replica", deployment="busy-llm", source="learned")
    assert gauge == pytest.approx(learned["perReplica"])
    assert rig.gauge("predictive_autoscaler_capacity_unknown", deployment="busy-llm") == 0
    assert [(k, r) for k, r, _ in rig.events("busy-llm") if r.startswith("Capacity")] == [
        ("Normal", "CapacityLearned")]

    # Later ticks: still held, no second Event, and the evidence is not read again until a day has passed.
    assert rig.evidence_reads() == 1
    for later in (now + 30, now + 60):
        report = rig.tick(later)
        decision = outcome(report, "calm-llm").decision
        assert decision is not None
        assert decision.desired_replicas == 2
    assert len(rig.events("calm-llm")) == 1
    assert rig.evidence_reads() == 1
    assert fake_api.calls("PATCH", r"/deployments/calm-llm/scale$") == []
    rig.tick(now + CAPACITY_EVERY_SECONDS)
    assert rig.evidence_reads() == 2


def test_an_annotated_capacity_is_planned_with_and_the_learned_one_shown_beside_it(
    capacity_prometheus: CapacityServer, fake_api: FakeKubeAPI, make_rig: Any
) -> None:
    server = capacity_prometheus.server
    add(fake_api, "busy-llm", 2, "2.5")
    rig = make_rig(config(server.url))
    report = rig.tick(server.now - 600)
    assert report.ok, report.errors
    status = rig.status("busy-llm")["capacity"]
    assert (status["source"], status["perReplica"]) == ("annotation", 2.5)
    assert abs(status["learned"]["estimate"] - BUSY_CAPACITY) / BUSY_CAPACITY < 0.10
    assert rig.gauge("predictive_autoscaler_capacity_per_replica", deployment="busy-llm", source="annotation") == 2.5
    learned = rig.gauge("predictive_autoscaler_capacity_per_replica", deployment="busy-llm", source="learned")
    assert learned is not None
    assert rig.gauge("predictive_autoscaler_capacity_saturated_bins", deployment="busy-llm") > 0
    assert [r for _, r, _ in rig.events("busy-llm") if r.startswith("Capacity")] == []  # nothing to announce
    decision = outcome(report, "busy-llm").decision
    assert decision is not None
    assert any("/ 2.5 req/s per replica" in s.detail for s in decision.steps)


def test_a_failed_evidence_read_holds_an_auto_deployment_and_is_reported(
    capacity_prometheus: CapacityServer, fake_api: FakeKubeAPI, make_rig: Any
) -> None:
    server = capacity_prometheus.server
    add(fake_api, "busy-llm", 2, None)
    broken = "  queries:\n    ttft_p90: 'histogram_quantile(0.9, x{namespace=~\"{namespaces}\"}'\n"
    rig = make_rig(config(server.url, broken))
    report = rig.tick(server.now - 600)
    (error,) = report.errors
    assert error.startswith("reading the capacity evidence failed (the last estimates stand; retried in 10m): "
                            "query ttft_p90: Prometheus refused the query (HTTP 400)")
    decision = outcome(report, "busy-llm").decision
    assert decision is not None
    assert decision.steps[0].detail.startswith("capacity not learned yet: its evidence could not be read (query "
                                               "ttft_p90")
    assert decision.desired_replicas == 2
    assert rig.metrics.registry.get_sample_value("predictive_autoscaler_errors_total",
                                                 {"kind": "capacity_estimate"}) == 1
    rig.tick(server.now - 570)
    assert rig.metrics.registry.get_sample_value("predictive_autoscaler_errors_total",
                                                 {"kind": "capacity_estimate"}) == 1  # retried later, not per tick


def test_a_controller_that_does_not_learn_holds_auto_deployments(
    capacity_prometheus: CapacityServer, fake_api: FakeKubeAPI, make_rig: Any
) -> None:
    server = capacity_prometheus.server
    add(fake_api, "busy-llm", 3, None)
    rig = make_rig(config(server.url), learn=False)
    report = rig.tick(server.now - 600)
    assert report.ok, report.errors
    decision = outcome(report, "busy-llm").decision
    assert decision is not None
    assert decision.desired_replicas == 3
    assert "this controller does not learn capacities; annotate capacity-per-replica" in decision.steps[0].detail
    assert rig.evidence_reads() == 0


def test_a_new_latency_objective_is_re_estimated_soon_not_a_day_later(
    capacity_prometheus: CapacityServer, fake_api: FakeKubeAPI, make_rig: Any
) -> None:
    server = capacity_prometheus.server
    add(fake_api, "busy-llm", 2, "2.5")
    rig = make_rig(config(server.url))
    now = server.now - 3600
    rig.tick(now)
    assert rig.evidence_reads() == 1
    dep = fake_api.get("deployments", "serving", "busy-llm")
    assert dep is not None
    dep["metadata"]["annotations"][PREFIX + "slo-wait"] = "10m"  # no first token took that long: TTFT says nothing
    fake_api.add("deployments", dep)
    rig.tick(now + 60)
    assert rig.evidence_reads() == 1  # not at once: at most every CAPACITY_RETRY_SECONDS
    rig.tick(now + CAPACITY_RETRY_SECONDS)
    assert rig.evidence_reads() == 2
    learned = rig.status("busy-llm")["capacity"]["learned"]
    assert learned["signals"]["ttft"] == 0


class NamespaceRecorder:
    """A metrics source with no series at all, recording which namespaces each capacity evidence query asked for."""

    def __init__(self) -> None:
        self.evidence: list[tuple[str, ...]] = []

    def fleet_history(self, query: str, namespaces: Iterable[str], start: int, end: int,
                      step_seconds: int) -> Mapping[tuple[str, str], TrafficSeries]:
        if query == "ttft_p90":
            self.evidence.append(tuple(sorted(namespaces)))
        return {}


def test_a_large_fleet_reads_its_evidence_a_batch_of_whole_namespaces_per_tick(
    fake_api: FakeKubeAPI, api_client: client.ApiClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(reads, "CAPACITY_BATCH", 3)
    for namespace in ("team-a", "team-b", "team-c"):
        for name in ("one", "two"):
            dep = deployment(namespace, name, replicas=1)
            del dep["metadata"]["annotations"][PREFIX + "capacity-per-replica"]
            fake_api.add("deployments", dep)
    source = NamespaceRecorder()
    cfg = config("http://127.0.0.1:9")
    controller = Controller(KubeCluster(api_client, instance="t"), source, lambda: cfg, learn_capacity=True)
    for i in range(4):
        report = controller.tick(1_700_000_000 + 30 * i)
        assert all(w.decision is not None and w.decision.desired_replicas == 1 for w in report.workloads)
    # Whole namespaces are taken until the batch (3) is reached: a namespace is never split, so the first tick reads
    # two (4 Deployments), the next the rest, and later ticks nothing until a day has passed.
    assert source.evidence == [("team-a", "team-b"), ("team-c",)]
