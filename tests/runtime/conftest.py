"""Fixtures for the control-loop tests: the recording fake API server, the real Prometheus, a fleet.

The fleet is three opted-in Deployments named like the backfilled fake vLLM pods in
``tests/servers.py`` (``serving/llama-chat`` with eight days of history, ``serving/mistral-code`` and
``research/qwen-eval`` with the last two hours), so the loop reads real rates for exactly the
Deployments it manages. ``llama-chat`` serves little per replica (its forecast needs more replicas
than it has); the other two are sized so that holding is right.

Time is data: the backfill ends at ``prometheus_server.now`` (2023), so ticks pass ``now`` inside it.
Prometheus requests are counted by a transport wrapped around the real one (no mock), which records
each request's form (query, start, end, step).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import httpx
import pytest
from kubernetes import client

from autoscaler.adapters.kube import KubeCluster
from autoscaler.adapters.prometheus import PrometheusSource
from autoscaler.config.parser import parse_config_text
from autoscaler.config.schema import Config
from autoscaler.domain.annotations import PREFIX
from autoscaler.runtime.loop import Controller
from autoscaler.runtime.metrics import ControllerMetrics
from tests.kube.conftest import api_client, deployment, fake_api
from tests.kube.fakeapi import CONTROLLER_TOKEN, FakeKubeAPI
from tests.servers import PrometheusServer

__all__ = [
    "FLEET",
    "RecordingTransport",
    "Rig",
    "api_client",
    "deployment",
    "fake_api",
    "fleet",
    "loop_config",
    "make_source",
    "rig",
    "write_config",
    "write_kubeconfig",
]

# (namespace, name, replicas, capacity-per-replica): llama-chat carries ~2.5 req/s on average, far more
# than 2 replicas of 0.4 req/s; the other two carry < 1 req/s, which one replica of 5 req/s covers.
FLEET: tuple[tuple[str, str, int, str], ...] = (
    ("serving", "llama-chat", 2, "0.4"),
    ("serving", "mistral-code", 1, "5"),
    ("research", "qwen-eval", 1, "5"),
)

# One day of history at one-minute steps: one range request per fleet query (< 11,000 points), and
# a forecaster fit that stays cheap on the shared test machine.
LOOP_CONFIG_YAML = """\
loop:
  interval: 1s
  history: 1d
  step: 1m
profiles:
  default:
    history: 1d
    horizon: 15m
prometheus:
  url: {url}
  retries: 0
  timeout: 10s
leader_election:
  lease_namespace: predictive-autoscaler
  lease_duration: 15s
"""


def loop_config_text(url: str) -> str:
    return LOOP_CONFIG_YAML.format(url=url)


def write_kubeconfig(path: Path, server: str) -> Path:
    """A kubeconfig whose only context points at ``server`` (the fake API server) with the token the fake knows as
    the controller's ServiceAccount (held to deploy/rbac.yaml)."""
    path.write_text(
        "apiVersion: v1\nkind: Config\n"
        f"clusters:\n- name: fake\n  cluster:\n    server: {server}\n"
        f"users:\n- name: tester\n  user:\n    token: {CONTROLLER_TOKEN}\n"
        "contexts:\n- name: fake\n  context:\n    cluster: fake\n    user: tester\n"
        "current-context: fake\n",
        encoding="utf-8",
    )
    return path


def write_config(path: Path, prometheus_url: str) -> Path:
    path.write_text(loop_config_text(prometheus_url), encoding="utf-8")
    return path


@pytest.fixture
def loop_config(prometheus_server: PrometheusServer) -> Config:
    return parse_config_text(loop_config_text(prometheus_server.url), "test-config.yaml")


@pytest.fixture
def fleet(fake_api: FakeKubeAPI) -> FakeKubeAPI:
    for namespace, name, replicas, capacity in FLEET:
        fake_api.add(
            "deployments",
            deployment(
                namespace,
                name,
                replicas=replicas,
                annotations={PREFIX + "capacity-per-replica": capacity, PREFIX + "max-replicas": "20"},
            ),
        )
        # Every replica Ready: the loop then reads pods only on its start-up recheck cadence.
        dep = fake_api.get("deployments", namespace, name)
        assert dep is not None
        dep["status"]["readyReplicas"] = replicas
        fake_api.add("deployments", dep)
    return fake_api


class RecordingTransport(httpx.HTTPTransport):
    """The real HTTP transport, recording the form of every request it sends."""

    def __init__(self) -> None:
        super().__init__()
        self.forms: list[dict[str, str]] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        form = {k: v[0] for k, v in parse_qs(request.read().decode()).items()}
        self.forms.append({"path": request.url.path, **form})
        return super().handle_request(request)

    def range_queries(self) -> list[dict[str, str]]:
        return [f for f in self.forms if f["path"] == "/api/v1/query_range"]


@dataclass
class Rig:
    """A controller wired to the fake API server and a Prometheus source, and the parts to inspect."""

    controller: Controller
    fake: FakeKubeAPI
    transport: RecordingTransport
    source: PrometheusSource
    metrics: ControllerMetrics

    def metric(self, name: str, labels: dict[str, str] | None = None) -> float | None:
        value = self.metrics.registry.get_sample_value(name, labels or {})
        return value

    def events(self, namespace: str | None = None, name: str | None = None) -> list[dict[str, Any]]:
        return [
            e
            for e in self.fake.all("events", namespace)
            if name is None or e["involvedObject"]["name"] == name
        ]


def make_source(url: str, transport: httpx.BaseTransport | None = None) -> PrometheusSource:
    return PrometheusSource(url, retries=0, timeout_seconds=10, transport=transport)


@pytest.fixture
def rig(
    fleet: FakeKubeAPI, api_client: client.ApiClient, prometheus_server: PrometheusServer, loop_config: Config
) -> Iterator[Rig]:
    transport = RecordingTransport()
    source = make_source(prometheus_server.url, transport)
    metrics = ControllerMetrics()
    cluster = KubeCluster(api_client, instance="test-controller")
    controller = Controller(cluster, source, lambda: loop_config, metrics=metrics)
    yield Rig(controller, fleet, transport, source, metrics)
    source.close()
