"""Demand when a Deployment's vLLM queue gauges are absent: the completion rate alone, said so.

Against a real Prometheus of its own (``serve_backfill``: a small backfill, so the session fixture's series, and
every other test's input, stay as they are). Its pods, all in ``serving`` unless said:

* ``full-chat``: every metric (the full formula, unchanged);
* ``bare-chat``: only ``vllm:request_success_total`` (no ``num_requests_waiting``/``running``);
* ``half-chat``: ``num_requests_waiting`` but no ``num_requests_running``;
* ``late-chat``: both gauges only from minute ``LATE`` on;
* ``mixed-chat``: two pods, one without the gauges (the full formula: its completions count, its growth cannot);
* ``other-team/bare-chat``: same name, a namespace never allowed.

Expected values come from the backfill's ground truth (``Backfill.completion_rate``/``arrival_rate``), bin by bin.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from kubernetes import client

from autoscaler.adapters.kube import KubeCluster
from autoscaler.adapters.prometheus import PrometheusSource
from autoscaler.config.parser import parse_config_text
from autoscaler.domain.annotations import PREFIX
from autoscaler.promql import DEGRADED_SOURCES, SOURCE_FULL
from autoscaler.runtime.loop import Controller, TickReport
from autoscaler.runtime.metrics import ControllerMetrics
from tests.kube.conftest import deployment, stored_status
from tests.kube.fakeapi import FakeKubeAPI
from tests.runtime.conftest import RecordingTransport, Rig, loop_config_text
from tests.servers import BACKFILL_START, Backfill, FakePod, PrometheusServer, pytest_cache, serve_backfill

pytestmark = pytest.mark.prometheus

STEP = 60
MINUTES = 240
LATE = MINUTES - 30  # late-chat's gauges are written from this minute on
NAMES = ("full-chat", "bare-chat", "half-chat", "late-chat", "mixed-chat")
BOTH, RUNNING, WINDOW = DEGRADED_SOURCES["both"], DEGRADED_SOURCES["running"], DEGRADED_SOURCES["window"]


def build_degraded_backfill(seed: int = 9) -> Backfill:
    rng = np.random.default_rng(seed)
    n = MINUTES
    always = np.ones(n, dtype=bool)
    never = np.zeros(n, dtype=bool)
    late = np.arange(n) >= LATE

    def pod(namespace: str, name: str, waiting: np.ndarray | None = None, running: np.ndarray | None = None) -> FakePod:
        return FakePod(
            namespace=namespace,
            pod=name,
            model="llama-3-8b",
            completions={"stop": rng.poisson(60.0, n).astype(np.int64)},  # ~1 request/s
            waiting=rng.poisson(3.0, n).astype(np.int64),
            running=rng.poisson(6.0, n).astype(np.int64),
            present=always,
            waiting_present=waiting,
            running_present=running,
        )

    pods = (
        pod("serving", "full-chat-7d9f8b6c5d-aaaaa"),
        pod("serving", "bare-chat-5b7c9d8f4-bbbbb", never, never),
        pod("serving", "half-chat-6c8d7f9b5-ccccc", None, never),
        pod("serving", "late-chat-7d9f8b6c5d-ddddd", late, late),
        pod("serving", "mixed-chat-5b7c9d8f4-eeeee"),
        pod("serving", "mixed-chat-5b7c9d8f4-fffff", never, never),
        pod("other-team", "bare-chat-5b7c9d8f4-ggggg", never, never),
    )
    # Thirty days after the session fixture's history: nothing of it in this server either way.
    return Backfill(BACKFILL_START + 30 * 86_400, n, pods)


@pytest.fixture(scope="module")
def degraded_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[PrometheusServer]:
    with serve_backfill(build_degraded_backfill(), tmp_path_factory.mktemp("prometheus-degraded"),
                        pytest_cache(request)) as server:
        yield server


def assert_same(actual: np.ndarray, expected: np.ndarray) -> None:
    np.testing.assert_array_equal(np.isnan(actual), np.isnan(expected))
    np.testing.assert_allclose(actual[~np.isnan(actual)], expected[~np.isnan(expected)], rtol=1e-9, atol=1e-9)


def test_each_deployment_gets_the_full_formula_where_it_can_and_the_completion_rate_elsewhere(
    degraded_server: PrometheusServer,
) -> None:
    backfill = degraded_server.backfill
    end = backfill.start + STEP * (backfill.minutes - 1)
    with PrometheusSource(degraded_server.url) as src:
        history = src.fleet_history("arrival_rate", ["serving"], backfill.start, end, STEP)
    assert set(history) == {("serving", name) for name in NAMES}, "other-team stays out; nobody is missing"
    assert history.dropped == {}
    n = backfill.minutes - 1
    bins = np.arange(n)

    def source(key: str) -> list[str | None]:
        return list(history.sources["serving", key])

    # All three metrics: the full formula, the same values as before the fallback existed.
    assert_same(history["serving", "full-chat"].values, backfill.arrival_rate("serving", "full-chat"))
    assert backfill.full_formula_bins("serving", "full-chat").all()
    assert source("full-chat") == [SOURCE_FULL] * n

    # Only the success counter: the completion rate, bin by bin, labelled with why.
    bare = history["serving", "bare-chat"].values
    assert not np.isnan(bare).any()
    assert_same(bare, backfill.completion_rate("serving", "bare-chat"))
    assert source("bare-chat") == [BOTH] * n
    assert_same(history["serving", "half-chat"].values, backfill.completion_rate("serving", "half-chat"))
    assert source("half-chat") == [RUNNING] * n

    # Gauges from minute LATE: completions alone before, the full formula from the first bin with both edges.
    late = history["serving", "late-chat"].values
    full = backfill.full_formula_bins("serving", "late-chat")
    assert (full == (bins >= LATE)).all()
    assert_same(late[~full], backfill.completion_rate("serving", "late-chat")[~full])
    assert_same(late[full], backfill.arrival_rate("serving", "late-chat")[full])
    growth = backfill.arrival_rate("serving", "late-chat") - backfill.completion_rate("serving", "late-chat")
    assert np.abs(growth[full]).max() > 0, "the full formula differs from completions alone (queue growth)"
    # The bin that ends as the gauges appear has one gauge sample in its window: not yet the full formula.
    assert source("late-chat") == [BOTH] * (LATE - 1) + [WINDOW] + [SOURCE_FULL] * (n - LATE)

    # One pod without gauges in a Deployment whose other pod has them: the full formula over what exists.
    assert_same(history["serving", "mixed-chat"].values, backfill.arrival_rate("serving", "mixed-chat"))
    assert source("mixed-chat") == [SOURCE_FULL] * n


# ---- the control loop ------------------------------------------------------------------------------------


@pytest.fixture
def make_rig(
    fake_api: FakeKubeAPI, api_client: client.ApiClient, degraded_server: PrometheusServer
) -> Iterator[Callable[[str], Rig]]:
    """A controller over the five Deployments and this server, with the given config text."""
    for name in NAMES:
        fake_api.add("deployments", deployment(
            "serving", name, replicas=1,
            annotations={PREFIX + "capacity-per-replica": "5", PREFIX + "max-replicas": "20"},
        ))
        dep = fake_api.get("deployments", "serving", name)
        assert dep is not None
        dep["status"]["readyReplicas"] = 1
        fake_api.add("deployments", dep)
    sources: list[PrometheusSource] = []

    def make(config_text: str) -> Rig:
        transport = RecordingTransport()
        config = parse_config_text(config_text, "test-config.yaml")
        # As `run` builds it: the config's named queries (the built-in ones, or an operator's).
        sources.append(PrometheusSource(degraded_server.url, retries=0, timeout_seconds=10, transport=transport,
                                        queries=config.prometheus.queries))
        metrics = ControllerMetrics()
        controller = Controller(KubeCluster(api_client, instance="test-controller"), sources[-1], lambda: config,
                                metrics=metrics)
        return Rig(controller, fake_api, transport, sources[-1], metrics)

    yield make
    for source in sources:
        source.close()


@pytest.fixture
def degraded_rig(make_rig: Callable[[str], Rig], degraded_server: PrometheusServer) -> Rig:
    return make_rig(loop_config_text(degraded_server.url))


def status_of(rig: Rig, name: str) -> dict[str, Any]:
    return stored_status(rig.fake, "serving", name)


def events(rig: Rig, reason: str) -> list[str]:
    return sorted(e["involvedObject"]["name"] for e in rig.events() if e["reason"] == reason)


def labels(name: str) -> dict[str, str]:
    return {"namespace": "serving", "deployment": name}


def newest_bin(backfill: Backfill, now: int) -> int:
    return (now - STEP - backfill.start) // STEP


def tick(rig: Rig, now: int) -> TickReport:
    report = rig.controller.tick(now)
    assert report.ok, report.errors
    return report


def test_a_deployment_without_queue_gauges_is_scaled_on_its_completion_rate_and_says_so(
    degraded_rig: Rig, degraded_server: PrometheusServer, caplog: pytest.LogCaptureFixture
) -> None:
    rig, backfill = degraded_rig, degraded_server.backfill
    minute = LATE - 10
    now0 = backfill.start + STEP * minute
    caplog.set_level(logging.INFO, logger="autoscaler.runtime.loop")

    report = tick(rig, now0)

    assert len(rig.transport.range_queries()) == 1, "still one fleet query per tick"
    k = newest_bin(backfill, now0)
    for w in report.workloads:
        assert w.decision is not None
        assert w.decision.missing_metrics == (), f"{w.name} held: {w.decision.missing_metrics}"
        assert "no current demand metric" not in json.dumps(w.decision.to_dict())
    expected_source = {"full-chat": SOURCE_FULL, "bare-chat": BOTH, "half-chat": RUNNING, "late-chat": BOTH,
                       "mixed-chat": SOURCE_FULL}
    for name, source in expected_source.items():
        degraded = source != SOURCE_FULL
        truth = (backfill.completion_rate if degraded else backfill.arrival_rate)("serving", name)[k]
        assert rig.metric("predictive_autoscaler_demand_requests_per_second", labels(name)) == pytest.approx(
            truth, rel=1e-9)
        assert rig.metric("predictive_autoscaler_demand_degraded", labels(name)) == (1 if degraded else 0)
        status = status_of(rig, name)
        assert (status["demandSource"], status["demandDegraded"]) == (source, degraded)
        (outcome,) = [w for w in report.workloads if w.name == name]
        assert outcome.demand_source == source
        assert outcome.to_dict()["demand_source"] == source
    assert status_of(rig, "bare-chat")["demandSource"] == (
        "completions only: vllm:num_requests_waiting and vllm:num_requests_running absent")
    assert status_of(rig, "half-chat")["demandSource"] == "completions only: vllm:num_requests_running absent"
    assert events(rig, "DemandDegraded") == ["bare-chat", "half-chat", "late-chat"]
    (half,) = [e for e in rig.events(name="half-chat") if e["reason"] == "DemandDegraded"]
    assert half["type"] == "Warning"
    assert "(completions only: vllm:num_requests_running absent)" in half["message"]

    # Later ticks: nothing new to say while it stays so; late-chat's gauges appear at minute LATE, and the bin
    # ending then still has one gauge sample (degraded, another reason: no second Event); full from LATE + 1.
    for m in (minute + 1, LATE):
        tick(rig, backfill.start + STEP * m)
    assert status_of(rig, "late-chat")["demandSource"] == WINDOW
    assert rig.metric("predictive_autoscaler_demand_degraded", labels("late-chat")) == 1
    assert events(rig, "DemandDegraded") == ["bare-chat", "half-chat", "late-chat"]
    assert events(rig, "DemandRestored") == []

    for m in (LATE + 1, LATE + 2):
        tick(rig, backfill.start + STEP * m)
    now = backfill.start + STEP * (LATE + 2)
    truth = backfill.arrival_rate("serving", "late-chat")[newest_bin(backfill, now)]
    assert rig.metric("predictive_autoscaler_demand_requests_per_second", labels("late-chat")) == pytest.approx(
        truth, rel=1e-9)
    assert rig.metric("predictive_autoscaler_demand_degraded", labels("late-chat")) == 0
    assert (status_of(rig, "late-chat")["demandSource"], status_of(rig, "late-chat")["demandDegraded"]) == (
        SOURCE_FULL, False)
    assert events(rig, "DemandRestored") == ["late-chat"]
    assert events(rig, "DemandDegraded") == ["bare-chat", "half-chat", "late-chat"]
    assert rig.metric("predictive_autoscaler_demand_degraded", labels("bare-chat")) == 1
    assert len(rig.transport.range_queries()) == 5

    # One log line per transition, not one per tick.
    lines = [r.getMessage() for r in caplog.records if r.name == "autoscaler.runtime.loop"]
    assert sorted(line.split(":")[0] for line in lines if "completion rate alone" in line) == [
        "serving/bare-chat", "serving/half-chat", "serving/late-chat"]
    assert [line for line in lines if "full formula again" in line] == ["serving/late-chat: demand is the full "
                                                                        "formula again"]


def test_a_custom_query_without_the_label_is_not_called_degraded(
    make_rig: Callable[[str], Rig], degraded_server: PrometheusServer
) -> None:
    """An operator's own arrival query (no demand_source label) keeps working: its demand is not flagged."""
    degraded_rig = make_rig(loop_config_text(degraded_server.url).replace(
        "  retries: 0\n",
        "  retries: 0\n  arrival_rate_query: completions\n  queries:\n    completions: >-\n"
        "      sum by (namespace, deployment) (label_replace(rate(vllm:request_success_total"
        '{namespace=~"{namespaces}"}[{window}]), "deployment", "$1", "pod", "^(.+)-[a-z0-9]{5,10}-[a-z0-9]{5}$"))\n',
    ))
    backfill = degraded_server.backfill
    now = backfill.start + STEP * (LATE - 10)
    tick(degraded_rig, now)
    k = newest_bin(backfill, now)
    for name in ("bare-chat", "full-chat"):
        assert degraded_rig.metric("predictive_autoscaler_demand_requests_per_second", labels(name)) == pytest.approx(
            backfill.completion_rate("serving", name)[k], rel=1e-9)
        assert degraded_rig.metric("predictive_autoscaler_demand_degraded", labels(name)) == 0
        assert status_of(degraded_rig, name)["demandSource"] is None
    assert events(degraded_rig, "DemandDegraded") == []
