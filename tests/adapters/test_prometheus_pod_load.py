"""In-flight requests per pod (``pod_in_flight``), the numbers a scale-down ranks pods by: real Prometheus, and the
policies on scripted answers (absent = unknown, never 0; namespace restriction; ambiguous pods dropped)."""

from __future__ import annotations

import httpx
import pytest

from autoscaler.adapters.prometheus import PrometheusSource
from autoscaler.promql import DEFAULT_QUERIES
from tests.adapters.test_prometheus_policies import FakePrometheus, ok, source
from tests.servers import PrometheusServer


def expected(prometheus_server: PrometheusServer, namespace: str, at: int) -> dict[tuple[str, str], float]:
    """waiting + running of each backfilled pod of ``namespace`` at ``at`` (a written minute), from the truth."""
    backfill = prometheus_server.backfill
    k = (at - backfill.start) // 60
    return {(p.namespace, p.pod): float(p.waiting[k] + p.running[k]) for p in backfill.pods
            if p.namespace == namespace and p.in_system_present()[k]}


@pytest.mark.prometheus
def test_pod_in_flight_is_waiting_plus_running_per_pod_in_the_namespaces(prometheus_server: PrometheusServer) -> None:
    at = prometheus_server.now - 1800
    with PrometheusSource(prometheus_server.url, retries=0) as src:
        loads = src.pod_instant("pod_in_flight", ["serving"], at)
        # A quote in a namespace name is escaped, not injected; the other team's pods never answer.
        assert src.pod_instant("pod_in_flight", ['we"ird', "research"], at) == expected(prometheus_server, "research",
                                                                                         at)
    assert loads == expected(prometheus_server, "serving", at)
    assert ("serving", "llama-chat-7d9f8b6c5d-x7k2p") in loads
    assert ("serving", "vllm-standalone") in loads, "per pod: no Deployment mapping needed"
    assert not any(ns == "other-team" for ns, _ in loads)


def test_pod_instant_keeps_only_finite_unambiguous_pods_of_the_allowed_namespaces() -> None:
    vector = ok({"resultType": "vector", "result": [
        {"metric": {"namespace": "serving", "pod": "a-1234567-aaaaa"}, "value": [1000, "3"]},
        {"metric": {"namespace": "serving", "pod": "b-1234567-bbbbb"}, "value": [1000, "NaN"]},
        {"metric": {"namespace": "serving", "pod": "c-1234567-ccccc"}, "value": [1000, "1"]},
        {"metric": {"namespace": "serving", "pod": "c-1234567-ccccc", "job": "twice"}, "value": [1000, "1"]},
        {"metric": {"namespace": "elsewhere", "pod": "d-1234567-ddddd"}, "value": [1000, "0"]},
        {"metric": {"namespace": "serving"}, "value": [1000, "0"]},
    ]})
    fake = FakePrometheus(vector)
    src = source(fake)
    assert src.pod_instant("pod_in_flight", ["serving"], at=1000) == {("serving", "a-1234567-aaaaa"): 3.0}
    assert any("2 series for pod serving/c-1234567-ccccc" in w for w in src.last_warnings)
    assert sum("dropped a per-pod series" in w for w in src.last_warnings) == 2
    (form,) = fake.forms
    assert form["query"] == DEFAULT_QUERIES["pod_in_flight"].replace("{namespaces}", "serving")
    assert form["time"] == "1000"


def test_a_configured_pod_in_flight_query_replaces_the_default() -> None:
    fake = FakePrometheus(ok({"resultType": "vector", "result": []}))
    template = 'sum by (namespace, pod) (my_in_flight{namespace=~"{namespaces}"})'
    src = PrometheusSource("http://prometheus.test:9090", transport=httpx.MockTransport(fake),
                           queries={"pod_in_flight": template})
    assert src.pod_instant("pod_in_flight", ["a", "b"], at=5) == {}
    assert fake.forms[0]["query"] == 'sum by (namespace, pod) (my_in_flight{namespace=~"a|b"})'
