"""The controller's endpoints over real HTTP, with a fake clock driving the stall detection."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from prometheus_client import CONTENT_TYPE_LATEST

from autoscaler.runtime.clock import FakeClock
from autoscaler.runtime.http import HealthState, serve
from autoscaler.runtime.metrics import ControllerMetrics


@pytest.fixture
def endpoints() -> Iterator[tuple[str, FakeClock, HealthState, ControllerMetrics]]:
    clock = FakeClock()
    health = HealthState(clock.now, stall_after=120)
    metrics = ControllerMetrics()
    server = serve(metrics.registry, health, "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", clock, health, metrics
    finally:
        server.shutdown()
        server.server_close()


def test_ready_after_the_first_tick_and_unhealthy_only_when_ticks_stall(
    endpoints: tuple[str, FakeClock, HealthState, ControllerMetrics],
) -> None:
    url, clock, health, _ = endpoints
    assert (httpx.get(url + "/readyz").status_code, httpx.get(url + "/readyz").text) == (
        503, "first tick not finished\n"
    )
    assert httpx.get(url + "/healthz").status_code == 200, "starting up is not a stall"

    health.tick_finished()
    assert httpx.get(url + "/readyz").status_code == 200
    clock.advance(120)
    assert httpx.get(url + "/healthz").status_code == 200
    clock.advance(1)
    stalled = httpx.get(url + "/healthz")
    assert (stalled.status_code, stalled.text) == (503, "no tick finished for 121s (limit 120s)\n")
    assert httpx.get(url + "/readyz").status_code == 200, "ready stays ready: a restart is /healthz's call"

    health.tick_finished()
    assert httpx.get(url + "/healthz").status_code == 200


def test_metrics_are_served_in_the_prometheus_text_format(
    endpoints: tuple[str, FakeClock, HealthState, ControllerMetrics],
) -> None:
    url, _, _, metrics = endpoints
    metrics.metrics_up.set(0)
    metrics.errors.labels("metrics_unavailable").inc()
    response = httpx.get(url + "/metrics?x=1")
    assert response.status_code == 200
    assert response.headers["content-type"] == CONTENT_TYPE_LATEST
    lines = response.text.splitlines()
    assert "predictive_autoscaler_metrics_source_up 0.0" in lines
    assert 'predictive_autoscaler_errors_total{kind="metrics_unavailable"} 1.0' in lines
    assert httpx.get(url + "/other").status_code == 404
