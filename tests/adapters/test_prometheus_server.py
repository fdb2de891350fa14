"""The Prometheus adapter against the real ``prometheus`` binary with backfilled vLLM history.

Expected values come from the fixture's ground truth (``Backfill``: the per-minute increments and
gauges that were written), never from numbers copied out of a previous run. The server holds
historical data only (``BACKFILL_START`` in 2023), so every query passes its time explicitly.
"""

from __future__ import annotations

import httpx
import numpy as np
import pytest

from autoscaler.adapters.prometheus import (
    MAX_POINTS_PER_SERIES,
    PrometheusQueryError,
    PrometheusSource,
    PrometheusUnavailable,
)
from autoscaler.promql import DEFAULT_QUERIES, namespace_regex, render
from tests.servers import GAP_MINUTES, RESET_MINUTE, SHORT_MINUTES, PrometheusServer, TlsPrometheusServer, free_port

pytestmark = pytest.mark.prometheus

LONG_POD = "llama-chat-7d9f8b6c5d-q9w4z"
ALLOWED = ("serving", "research")
# Deployment-shaped pods in the allowed namespaces (the bare pod "vllm-standalone" is not one).
EXPECTED_FLEET = {("serving", "llama-chat"), ("serving", "mistral-code"), ("research", "qwen-eval")}


class CountingTransport(httpx.HTTPTransport):
    """The real HTTP transport, counting requests (to check how a range was split)."""

    def __init__(self) -> None:
        super().__init__()
        self.requests = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.requests += 1
        return super().handle_request(request)


def assert_same(actual: np.ndarray, expected: np.ndarray) -> None:
    np.testing.assert_array_equal(np.isnan(actual), np.isnan(expected))
    np.testing.assert_allclose(actual[~np.isnan(actual)], expected[~np.isnan(expected)], rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("max_points", [MAX_POINTS_PER_SERIES, 997])
def test_chunked_range_query_returns_exactly_the_backfilled_samples(
    prometheus_server: PrometheusServer, max_points: int
) -> None:
    backfill = prometheus_server.backfill
    (pod,) = [p for p in backfill.pods if p.pod == LONG_POD]
    last = backfill.start + 60 * (backfill.minutes - 1)
    transport = CountingTransport()
    with PrometheusSource(prometheus_server.url, transport=transport, max_points_per_request=max_points) as src:
        (series,) = src.query_range(
            f'vllm:num_requests_running{{namespace="serving",pod="{LONG_POD}"}}', backfill.start, last, 60
        )
    n = backfill.minutes
    assert n > MAX_POINTS_PER_SERIES
    assert transport.requests == -(-n // max_points)
    minutes = np.rint((series.timestamps - backfill.start) / 60).astype(int)
    assert np.all(np.diff(minutes) > 0), "sorted, no duplicates at chunk edges"
    # Every written sample comes back, with its exact value.
    present = np.flatnonzero(pod.present)
    got = dict(zip(minutes.tolist(), series.values.tolist(), strict=True))
    assert all(got[k] == pod.running[k] for k in present.tolist())
    # The only other points are in the scrape gap: Prometheus's 5-minute lookback repeating the last sample.
    extra = sorted(set(got) - set(present.tolist()))
    assert extra, "the gap starts with lookback repeats"
    assert set(extra) <= set(range(GAP_MINUTES.start, GAP_MINUTES.start + 5))
    assert all(got[k] == pod.running[GAP_MINUTES.start - 1] for k in extra)


def test_fleet_arrival_rate_is_one_series_per_deployment_with_the_true_rate(
    prometheus_server: PrometheusServer,
) -> None:
    backfill = prometheus_server.backfill
    end = backfill.start + 60 * (backfill.minutes - 1)  # the last bin ends at the last sample
    transport = CountingTransport()
    with PrometheusSource(prometheus_server.url, transport=transport) as src:
        history = src.fleet_history("arrival_rate", ALLOWED, backfill.start, end, 60)
    assert set(history) == EXPECTED_FLEET
    assert transport.requests == 2  # 11,519 evaluation times: two chunks for the whole fleet
    for (namespace, deployment), series in history.items():
        assert (series.start, series.step_seconds, len(series)) == (backfill.start, 60, backfill.minutes - 1)
        assert_same(series.values, backfill.arrival_rate(namespace, deployment))
    chat = history["serving", "llama-chat"].values
    assert np.isnan(chat[GAP_MINUTES.start - 1 : GAP_MINUTES.stop]).all(), "the scrape gap is missing, not zero"
    assert not np.isnan(chat[RESET_MINUTE - 1]), "a counter reset is not a gap"
    short = history["serving", "mistral-code"].values
    assert np.isnan(short[:-SHORT_MINUTES]).all()
    assert not np.isnan(short[-SHORT_MINUTES + 1 :]).any()
    # The bare pod cannot be mapped to a Deployment: dropped, and said so.
    assert any("without a deployment label in namespace 'serving'" in w for w in history.warnings)
    assert history.dropped == {}


@pytest.mark.parametrize(("query", "tokens_per_request"), [("prompt_token_rate", 300), ("generation_token_rate", 120)])
def test_fleet_token_rates(prometheus_server: PrometheusServer, query: str, tokens_per_request: int) -> None:
    backfill = prometheus_server.backfill
    now = prometheus_server.now - 60
    start = now - 60 * (SHORT_MINUTES - 1)
    with PrometheusSource(prometheus_server.url) as src:
        history = src.fleet_history(query, ALLOWED, start, now, 60)
    assert set(history) == EXPECTED_FLEET
    first = (start - backfill.start) // 60
    for (namespace, deployment), series in history.items():
        pods = backfill.pods_of(namespace, deployment)
        per_minute = np.sum([p.total_completions()[first + 1 : first + 1 + len(series)] for p in pods], axis=0)
        assert_same(series.values, per_minute * tokens_per_request / 60)


def test_namespace_restriction_holds(prometheus_server: PrometheusServer) -> None:
    backfill = prometheus_server.backfill
    now = prometheus_server.now - 60
    with PrometheusSource(prometheus_server.url) as src:
        only_research = src.fleet_history("arrival_rate", ["research"], now - 3600, now, 60)
        current = src.fleet_instant("in_flight", ["serving"], at=now)
    assert set(only_research) == {("research", "qwen-eval")}
    # other-team/llama-chat exists (same Deployment name as serving's) but is never allowed.
    assert ("other-team", "llama-chat") not in current
    assert set(current) == {("serving", "llama-chat"), ("serving", "mistral-code")}
    k = (now - backfill.start) // 60
    expected = sum(int(p.waiting[k] + p.running[k]) for p in backfill.pods_of("serving", "llama-chat"))
    assert current["serving", "llama-chat"] == expected


def test_hostile_namespace_names_are_escaped_and_match_nothing(prometheus_server: PrometheusServer) -> None:
    now = prometheus_server.now - 60
    hostile = ['serving"}) or vector(1', "serv.ng", "back\\slash\nnewline", "serving|research"]
    with PrometheusSource(prometheus_server.url) as src:
        assert src.fleet_history("arrival_rate", hostile, now - 600, now, 60) == {}
        raw = render(DEFAULT_QUERIES["in_flight"], namespaces=namespace_regex(hostile))
        assert src.instant(raw, at=now) == []


def test_empty_answers(prometheus_server: PrometheusServer) -> None:
    backfill = prometheus_server.backfill
    # (A fractional timeout also goes to Prometheus as its `timeout` parameter, which must accept it.)
    with PrometheusSource(prometheus_server.url, timeout_seconds=2.5) as src:
        assert src.fleet_history("arrival_rate", ["nobody-here"], backfill.start, backfill.start + 3600, 60) == {}
        before = backfill.start - 86_400
        assert src.fleet_history("arrival_rate", ALLOWED, before, before + 3600, 60) == {}
        assert src.query_range("vllm:no_such_metric", backfill.start, backfill.start + 600, 60) == []


def test_bad_query_is_refused_with_prometheus_message(prometheus_server: PrometheusServer) -> None:
    with PrometheusSource(prometheus_server.url) as src, pytest.raises(PrometheusQueryError) as caught:
        src.instant("sum(rate(vllm:request_success_total[5m]", at=prometheus_server.now)
    assert caught.value.status_code == 400
    assert caught.value.error_type == "bad_data"
    assert "parse error" in str(caught.value)


def test_unreachable_server_is_unavailable_after_retries() -> None:
    sleeps: list[float] = []
    port = free_port()  # nothing listens there: connection refused
    src = PrometheusSource(f"http://127.0.0.1:{port}", retries=2, backoff_seconds=0.01, sleep=sleeps.append)
    with src, pytest.raises(PrometheusUnavailable, match=r"after 3 attempts: ConnectError"):
        src.instant("up", at=0)
    assert sleeps == [0.01, 0.02]


def test_https_with_ca_bundle(prometheus_tls_server: TlsPrometheusServer) -> None:
    with PrometheusSource(prometheus_tls_server.url, ca_file=prometheus_tls_server.ca_file) as src:
        (sample,) = src.instant("vector(42)", at=1_700_000_000)
    assert sample.value == 42


def test_https_without_the_ca_fails_at_once(prometheus_tls_server: TlsPrometheusServer) -> None:
    sleeps: list[float] = []
    src = PrometheusSource(prometheus_tls_server.url, retries=3, sleep=sleeps.append)
    with src, pytest.raises(PrometheusUnavailable, match=r"TLS verification .* failed .*ca_file"):
        src.instant("vector(1)", at=1_700_000_000)
    assert sleeps == [], "a certificate problem is not retried"
