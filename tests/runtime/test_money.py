"""The money stage inside the running loop: real HTTP to the fake API server, the real Prometheus and Alertmanager.

Each test drives ``Controller.tick`` with ``now`` as data and checks what reached the API server (scale
patches, status objects, NodePool limits, CapacityBuffers, placeholder Deployments), what reached
Alertmanager (read back through its v2 API), and the exported metrics. Dollar figures are derived from the
configured prices and the plan the controller made, not copied from an earlier run.

Times: ``RECENT`` is half an hour before the backfill ends (every fleet Deployment has data); ``TROUGH`` is the
last daily low of ``serving/llama-chat`` with six hours of data after it, so the demand one node start-up
(2h here) beyond the plan's lead is clearly higher than at the lead: a forecast scale-up to hold nodes for.
Alert tests use the wall clock, because Alertmanager judges expiry against its own.
"""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from kubernetes import client

from autoscaler.adapters.alertmanager import ALERT_NAMES, AlertmanagerSink
from autoscaler.adapters.karpenter import GPU, KarpenterCapacity, buffer_name, placeholder_name
from autoscaler.adapters.kube import NODEPOOL_LABEL, KubeCluster
from autoscaler.adapters.training import TrainingReader
from autoscaler.config.parser import parse_config
from autoscaler.config.schema import Config
from autoscaler.domain import money as money_module
from autoscaler.domain.annotations import PREFIX
from autoscaler.runtime.loop import Controller, TickReport
from autoscaler.runtime.metrics import ControllerMetrics
from autoscaler.runtime.money import MoneyStage
from autoscaler.runtime.state import STATUS_REFRESH_SECONDS, WorkloadOutcome
from tests.kube.conftest import deployment, pod, stored_status
from tests.kube.conftest import nodepool as kube_nodepool
from tests.kube.fakeapi import FakeKubeAPI
from tests.runtime.conftest import make_source
from tests.servers import BACKFILL_START, AlertmanagerServer, PrometheusServer, free_port
from tests.shared import require_shared

pytestmark = pytest.mark.prometheus

NODEPOOL_CRD = "karpenter.sh_nodepools.yaml"
BUFFER_CRD = "autoscaling.x-k8s.io_capacitybuffers.yaml"
KUEUE_CRD = "kueue.x-k8s.io_workloads.yaml"
CONTROLLER_NS = "predictive-autoscaler"
TROUGH = BACKFILL_START + 60 * (1080 + 1440 * 7)  # 18:00 on day 8: sin(2*pi*m/1440) at its minimum
PRICE = 4.0  # default $/GPU-hour: pools the config and the cluster do not describe


def crd(name: str) -> Path:
    """``../shared/crds/<name>``; a test that installs a CRD skips when ../shared/crds is absent."""
    return require_shared("crds") / name


def config(prometheus_url: str, **sections: Any) -> Config:
    data: dict[str, Any] = {
        "loop": {"interval": "1s", "history": "2d", "step": "1m"},
        "profiles": {"default": {"model": "seasonal_naive", "history": "2d", "horizon": "15m", "warm_pool": 0}},
        "cold_start": {"pod_startup": "3m", "node_startup": "2h"},
        "prometheus": {"url": prometheus_url, "retries": 0, "timeout": "10s"},
        "pricing": {"default_gpu_hour": PRICE},
        "karpenter": {"namespace": CONTROLLER_NS},
    }
    for key, value in sections.items():
        data[key] = {**data.get(key, {}), **value}
    return parse_config(data, "test-money-config")


def gpu_deployment(
    namespace: str, name: str, *, replicas: int, capacity: str, min_replicas: int = 1, max_replicas: int = 20,
    priority: str = "standard", team: str | None = None, nodepool: str | None = None, ready: int | None = None,
    slo_attainment: str | None = None,
) -> dict[str, Any]:
    annotations = {
        PREFIX + "capacity-per-replica": capacity,
        PREFIX + "min-replicas": str(min_replicas),
        PREFIX + "max-replicas": str(max_replicas),
        PREFIX + "priority": priority,
    }
    if team:
        annotations[PREFIX + "team"] = team
    if nodepool:
        annotations[PREFIX + "nodepool"] = nodepool
    if slo_attainment:
        annotations[PREFIX + "slo-attainment"] = slo_attainment
    dep = deployment(namespace, name, replicas=replicas, annotations=annotations, gpus=1)
    dep["metadata"]["uid"] = str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{namespace}.{name}"))
    dep["status"]["readyReplicas"] = replicas if ready is None else ready
    return dep


def nodepool(name: str, instance_type: str, gpus_per_node: int, *, limit: int | None = None,
             gpus_in_use: int | None = None) -> dict[str, Any]:
    """One instance type's pool with no nodes yet (``tests.kube.conftest.nodepool``, schema-checked)."""
    return kube_nodepool(name, instance_types=(instance_type,), gpu_counts=(str(gpus_per_node),), gpu_limit=limit,
                         gpus_in_use=gpus_in_use, nodes=0)


def kueue_workload(name: str, *, pods: int, gpus: int, admitted: bool, pool: str) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "Workload",
        "metadata": {"name": name, "namespace": "training", "annotations": {PREFIX + "team": "ml"}},
        "spec": {
            "queueName": "gpu-queue",
            "podSets": [{
                "name": "workers",
                "count": pods,
                "template": {"spec": {
                    "nodeSelector": {"karpenter.sh/nodepool": pool},
                    "containers": [{"name": "trainer", "image": "nvcr.io/nvidia/pytorch:24.05-py3",
                                    "resources": {"limits": {GPU: str(gpus)}}}],
                }},
            }],
        },
    }
    if admitted:
        obj["status"] = {
            "admission": {"clusterQueue": "gpu", "podSetAssignments": [{"name": "workers", "count": pods}]},
            "conditions": [{"type": "Admitted", "status": "True", "reason": "Admitted", "message": "admitted",
                            "lastTransitionTime": "2023-11-21T00:00:00Z"}],
        }
    return obj


@dataclass
class MoneyRig:
    fake: FakeKubeAPI
    api: client.ApiClient
    prometheus_url: str
    metrics: ControllerMetrics
    stage: MoneyStage
    controller: Controller
    cfg: Config

    def configure(self, **sections: Any) -> None:
        self.cfg = config(self.prometheus_url, **sections)

    def tick(self, now: float, *, acting: bool = True) -> TickReport:
        return self.controller.tick(now, acting=acting)

    def metric(self, name: str, labels: dict[str, str] | None = None) -> float | None:
        value: float | None = self.metrics.registry.get_sample_value(name, labels or {})
        return value

    def status(self, namespace: str, name: str) -> dict[str, Any]:
        return stored_status(self.fake, namespace, name)

    def replicas(self, namespace: str, name: str) -> int:
        dep = self.fake.get("deployments", namespace, name)
        assert dep is not None
        return int(dep["spec"]["replicas"])


@pytest.fixture
def money_rig(fake_api: FakeKubeAPI, api_client: client.ApiClient, prometheus_server: PrometheusServer
              ) -> Iterator[MoneyRig]:
    metrics = ControllerMetrics()
    stage = MoneyStage()
    source = make_source(prometheus_server.url)
    holder: list[MoneyRig] = []
    controller = Controller(KubeCluster(api_client, instance="money-test"), source, lambda: holder[0].cfg,
                            metrics=metrics, money=stage)
    rig = MoneyRig(fake_api, api_client, prometheus_server.url, metrics, stage, controller,
                   config(prometheus_server.url))
    holder.append(rig)
    yield rig
    source.close()
    if isinstance(stage.alerts, AlertmanagerSink):
        stage.alerts.close()


def outcome(report: TickReport, name: str) -> WorkloadOutcome:
    (found,) = [w for w in report.workloads if w.name == name]
    return found


def desired(report: TickReport, name: str) -> int:
    decision = outcome(report, name).decision
    assert decision is not None
    return decision.desired_replicas


# ---------------------------------------------------------------------------------------------- ceilings


def test_team_ceiling_cuts_the_lower_priority_deployment_first_never_below_min(
    money_rig: MoneyRig, prometheus_server: PrometheusServer
) -> None:
    rig = money_rig
    # a second into a minute: the ticks at now and now + 1 read the same samples (the demand of the last two minutes)
    now = prometheus_server.now - 1800 + 1
    rig.fake.add("deployments", gpu_deployment("serving", "llama-chat", replicas=2, capacity="0.4",
                                               priority="production", team="ml"))
    rig.fake.add("deployments", gpu_deployment("serving", "mistral-code", replicas=2, capacity="0.05",
                                               min_replicas=2, priority="batch", team="ml"))
    # A standby tick learns what the plan asks (and writes nothing).
    learn = rig.tick(now, acting=False)
    assert learn.ok, learn.errors
    assert rig.fake.writes() == []
    llama, mistral = desired(learn, "llama-chat"), desired(learn, "mistral-code")
    assert min(llama, mistral) > 2, (llama, mistral)  # both want to grow: the ceiling has something to cut
    assert rig.metric("predictive_autoscaler_projected_cost_dollars_per_hour", {"scope": "team", "team": "ml"}) \
        == PRICE * (llama + mistral)

    # Room for all of llama-chat and mistral-code's minimum, plus half a GPU-hour: not one more mistral replica.
    ceiling = PRICE * (llama + 2) + PRICE / 2
    rig.configure(ceilings={"teams": {"ml": ceiling}})
    report = rig.tick(now)
    assert report.ok, report.errors
    assert desired(report, "llama-chat") == llama
    assert desired(report, "mistral-code") == 2
    assert rig.replicas("serving", "llama-chat") == llama
    assert rig.replicas("serving", "mistral-code") == 2

    steps = rig.status("serving", "mistral-code")["steps"]
    assert steps[-1]["name"] == "cost_ceiling"
    assert steps[-1]["replicas"] == 2
    assert steps[-1]["detail"].startswith(f"CUT {mistral} -> 2 replicas")
    assert "team ml" in steps[-1]["detail"]
    llama_step = rig.status("serving", "llama-chat")["steps"][-1]
    assert (llama_step["name"], llama_step["replicas"]) == ("cost_ceiling", llama)
    assert llama_step["detail"].startswith("within ceilings")

    assert report.money is not None
    assert report.money.breaches == {"team ml": (PRICE * (llama + mistral), ceiling)}
    assert report.to_dict()["cost"]["team_dollars_per_hour"] == {"ml": PRICE * (llama + 2)}
    assert rig.metric("predictive_autoscaler_cost_ceiling_dollars_per_hour", {"scope": "team", "team": "ml"}) \
        == ceiling
    assert rig.metric("predictive_autoscaler_ceiling_cuts_total", {"team": "ml", "kind": "inference"}) \
        == mistral - 2
    assert rig.metric("predictive_autoscaler_cost_ceiling_dollars_per_hour", {"scope": "cluster", "team": ""}) is None

    # A ceiling even the minimums exceed: everyone at min_replicas, never below, and said so.
    rig.configure(ceilings={"teams": {"ml": 1.0}})
    report = rig.tick(now + 1)
    assert (desired(report, "llama-chat"), desired(report, "mistral-code")) == (1, 2)
    # mistral-code's decision is unchanged (2, cut by the ceiling): its status is not rewritten at once ...
    assert "CANNOT be met" not in rig.status("serving", "mistral-code")["steps"][-1]["detail"]
    report = rig.tick(now + 1 + STATUS_REFRESH_SECONDS)  # ... but at the next periodic refresh
    assert (desired(report, "llama-chat"), desired(report, "mistral-code")) == (1, 2)
    assert "CANNOT be met" in rig.status("serving", "mistral-code")["steps"][-1]["detail"]


def test_kueue_gang_reserved_whole_and_a_second_one_deferred(
    money_rig: MoneyRig, prometheus_server: PrometheusServer
) -> None:
    rig = money_rig
    now = prometheus_server.now - 1800
    rig.fake.install_crd(crd(KUEUE_CRD))
    rig.stage.training = TrainingReader(rig.api)
    rig.fake.add("deployments", gpu_deployment("serving", "llama-chat", replicas=2, capacity="0.4",
                                               priority="production", nodepool="h100"))
    rig.fake.add("workloads.kueue.x-k8s.io", kueue_workload("ft-admitted", pods=2, gpus=4, admitted=True,
                                                            pool="h100"))
    rig.fake.add("workloads.kueue.x-k8s.io", kueue_workload("ft-pending", pods=4, gpus=8, admitted=False,
                                                            pool="h100"))
    learn = rig.tick(now, acting=False)
    llama = desired(learn, "llama-chat")
    assert learn.money is not None
    assert learn.money.report.gangs_deferred == ()

    # Room for llama-chat, the admitted 8-GPU gang and 5 more GPUs: the pending 32-GPU gang cannot fit.
    rig.configure(ceilings={"cluster": PRICE * (llama + 8 + 5)})
    report = rig.tick(now)
    assert report.ok, report.errors
    assert report.money is not None
    gangs = {g["key"]: g for g in report.to_dict()["cost"]["gangs"]}
    assert gangs["Workload/training/ft-admitted"]["reserved"] is True
    assert gangs["Workload/training/ft-admitted"]["gpus"] == 8
    assert gangs["Workload/training/ft-pending"]["reserved"] is False
    assert gangs["Workload/training/ft-pending"]["reason"].startswith("deferred whole: cluster ceiling")
    # Whole or nothing: the pool counts all 8 GPUs of one gang and none of the other's 32.
    assert dict(report.money.report.gpus_by_pool) == {"h100": llama + 8}
    assert rig.metric("predictive_autoscaler_gang_reserved_gpus") == 8
    assert rig.metric("predictive_autoscaler_ceiling_cuts_total", {"team": "ml", "kind": "training"}) == 1
    assert desired(report, "llama-chat") == llama  # production inference ranks before both gangs


# ---------------------------------------------------------------------------------------------- NodePool limits


def test_nodepool_gpu_limit_follows_the_ceiling_and_never_drops_below_running(
    money_rig: MoneyRig, prometheus_server: PrometheusServer
) -> None:
    rig = money_rig
    now = prometheus_server.now - 1800
    rig.fake.install_crd(crd(NODEPOOL_CRD))
    rig.fake.add("nodepools.karpenter.sh", nodepool("h100", "p5.48xlarge", 8, limit=64, gpus_in_use=8))
    rig.stage.capacity = KarpenterCapacity(rig.api, namespace=CONTROLLER_NS)
    rig.fake.add("deployments", gpu_deployment("serving", "llama-chat", replicas=2, capacity="0.4",
                                               priority="production", nodepool="h100"))
    cluster = 200.0
    rig.configure(ceilings={"cluster": cluster}, karpenter={"headroom": "off"})
    node_hour = 98.32  # p5.48xlarge (8 GPUs) from the packaged price table
    expected = math.floor(cluster / node_hour) * 8  # the whole 8-GPU nodes the ceiling buys: 2 x $98.32 <= $200

    # A standby reads but does not write the limit.
    rig.tick(now, acting=False)
    assert rig.fake.calls("PATCH", r"/nodepools/h100$") == []

    report = rig.tick(now)
    assert report.ok, report.errors
    (patch,) = rig.fake.calls("PATCH", r"/nodepools/h100$")
    assert patch.content_type == "application/merge-patch+json"
    assert patch.body["spec"] == {"limits": {GPU: str(expected)}}
    stored = rig.fake.get("nodepools.karpenter.sh", "", "h100")
    assert stored is not None
    assert stored["spec"]["limits"][GPU] == str(expected) == "16"
    # The projected cost is the pool's whole nodes at its instance type's price, not GPUs at the default.
    llama = desired(report, "llama-chat")
    assert rig.metric("predictive_autoscaler_projected_cost_dollars_per_hour", {"scope": "cluster", "team": ""}) \
        == pytest.approx(math.ceil(llama / 8) * node_hour)
    projected = rig.metric("predictive_autoscaler_projected_cost_dollars_per_hour", {"scope": "cluster", "team": ""})
    assert projected is not None
    assert projected <= cluster

    # Steady state writes nothing.
    rig.tick(now + 1)
    assert len(rig.fake.calls("PATCH", r"/nodepools/h100$")) == 1

    # Karpenter now runs 24 GPUs (three nodes): the limit follows them up, never below.
    stored["status"]["resources"][GPU] = "24"
    rig.fake.add("nodepools.karpenter.sh", stored)
    report = rig.tick(now + 2)
    assert report.ok, report.errors
    assert rig.fake.get("nodepools.karpenter.sh", "", "h100")["spec"]["limits"][GPU] == "24"  # type: ignore[index]


# ---------------------------------------------------------------------------------------------- headroom


def node(name: str, pool: str, gpus: int) -> dict[str, Any]:
    """A Ready Node of a Karpenter NodePool with ``gpus`` allocatable."""
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {NODEPOOL_LABEL: pool}},
            "status": {"allocatable": {GPU: str(gpus)}, "conditions": [{"type": "Ready", "status": "True"}]}}


def bound_pod(name: str, node_name: str, gpus: int) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "serving"},
            "spec": {"nodeName": node_name, "containers": [{"name": "c", "image": "x",
                                                            "resources": {"requests": {GPU: str(gpus)}}}]},
            "status": {"phase": "Running"}}


@pytest.fixture(params=[True, False], ids=["capacitybuffer", "placeholder"])
def buffers_served(request: pytest.FixtureRequest) -> bool:
    """Whether the cluster serves the CapacityBuffer CRD: headroom is then a CapacityBuffer, else placeholder pods."""
    return bool(request.param)


def _one_gpu_pool(rig: MoneyRig, buffers_served: bool, nodes: int, capacity: str,
                  slo_attainment: str | None = None) -> None:
    """NodePool ``l4`` of ``nodes`` Ready 1-GPU nodes, the first two holding llama-chat's two replicas (``capacity``
    req/s each, production priority, the objective ``slo_attainment``: the quantile its pool's headroom covers); the
    CapacityBuffer CRD served or not."""
    rig.fake.install_crd(crd(NODEPOOL_CRD))
    if buffers_served:
        rig.fake.install_crd(crd(BUFFER_CRD))
    rig.fake.add("nodepools.karpenter.sh", nodepool("l4", "g6.xlarge", 1, gpus_in_use=2))
    for i in range(nodes):
        rig.fake.add("nodes", node(f"l4-{i}", "l4", 1))
    for i in range(2):
        rig.fake.add("pods", bound_pod(f"llama-chat-{i}", f"l4-{i}", 1))
    rig.stage.capacity = KarpenterCapacity(rig.api, namespace=CONTROLLER_NS)
    rig.fake.add("deployments", gpu_deployment("serving", "llama-chat", replicas=2, capacity=capacity,
                                               priority="production", nodepool="l4", max_replicas=60,
                                               slo_attainment=slo_attainment))


def test_the_pools_idle_nodes_are_sized_by_pools_headroom_and_held_as_buffer_or_placeholder_nodes(
    money_rig: MoneyRig, prometheus_server: PrometheusServer, buffers_served: bool
) -> None:
    rig = money_rig
    # One GPU per node: the pool's two nodes hold the two replicas; any headroom is a whole idle node more.
    _one_gpu_pool(rig, buffers_served, nodes=2, capacity="0.1")
    backfill = prometheus_server.backfill
    truth = backfill.arrival_rate("serving", "llama-chat")
    at = (TROUGH - backfill.start) // 60
    assert truth[at + 240 : at + 250].mean() > 1.5 * truth[at + 120 : at + 130].mean()  # demand rises over the day

    report = rig.tick(TROUGH)
    assert report.ok, report.errors
    assert report.money is not None
    idle = report.money.pool_headroom["l4"]
    assert idle > 0  # the pooled forecast one node lead ahead rises above what the pods hold
    if buffers_served:  # room for as many of the pool's top Deployment's pods (1 GPU each, none free on busy nodes)
        buf = rig.fake.get("capacitybuffers.autoscaling.x-k8s.io", "serving", buffer_name("llama-chat"))
        assert buf is not None
        assert buf["spec"] == {"scalableRef": {"apiGroup": "apps", "kind": "Deployment", "name": "llama-chat"},
                               "replicas": idle}
        assert rig.fake.all("deployments", CONTROLLER_NS) == []
        assert report.money.headroom == {"CapacityBuffer serving/llama-chat": idle}
    else:  # one placeholder pod per idle node
        dep = rig.fake.get("deployments", CONTROLLER_NS, placeholder_name("l4"))
        assert dep is not None
        assert dep["spec"]["replicas"] == idle
        container = dep["spec"]["template"]["spec"]["containers"][0]
        assert container["resources"]["requests"][GPU] == "1"
        assert dep["spec"]["template"]["spec"]["nodeSelector"] == {"karpenter.sh/nodepool": "l4"}
        assert report.money.headroom == {"Deployment l4": idle}

    # The pools' nodes cannot be read (a controller confined to namespaces lists no nodes): no headroom is sized,
    # and what is held stays as it is (never resized as if the pool were empty), told once.
    rig.cfg = replace(rig.cfg, namespaces=("serving",))
    report = rig.tick(TROUGH + 1)
    assert report.money is not None
    assert report.money.pool_headroom == {}
    held = (rig.fake.get("capacitybuffers.autoscaling.x-k8s.io", "serving", buffer_name("llama-chat"))
            if buffers_served else rig.fake.get("deployments", CONTROLLER_NS, placeholder_name("l4")))
    assert held is not None
    assert held["spec"]["replicas"] == idle


def _half_used_node(rig: MoneyRig) -> None:
    """One 8-GPU node of NodePool a100 holding llama-chat's three pods: five GPUs paid for and idle."""
    rig.fake.install_crd(crd(NODEPOOL_CRD))
    rig.fake.add("nodepools.karpenter.sh", nodepool("a100", "p4d.24xlarge", 8, gpus_in_use=3))
    rig.fake.add("nodes", node("a100-0", "a100", 8))
    for i in range(3):
        rig.fake.add("pods", bound_pod(f"llama-chat-{i}", "a100-0", 1))
    rig.stage.capacity = KarpenterCapacity(rig.api, namespace=CONTROLLER_NS)
    rig.fake.add("deployments", gpu_deployment("serving", "llama-chat", replicas=3, capacity="50",
                                               nodepool="a100", max_replicas=20))


def _fill_the_node(rig: MoneyRig) -> None:
    """The ReplicaSet and the scheduler bring llama-chat's eight replicas up on the node: all Ready."""
    for i in range(3, 8):
        rig.fake.add("pods", bound_pod(f"llama-chat-{i}", "a100-0", 1))
    dep = rig.fake.get("deployments", "serving", "llama-chat")
    assert dep is not None
    dep["status"]["readyReplicas"] = dep["status"]["replicas"] = 8
    rig.fake.add("deployments", dep)


@pytest.mark.parametrize("setting", ["lends", "team ceiling", "off"])
def test_the_last_nodes_idle_gpus_hold_spare_replicas_whose_gpus_the_next_plan_sees_free(
    money_rig: MoneyRig, prometheus_server: PrometheusServer, setting: str
) -> None:
    rig = money_rig
    _half_used_node(rig)
    if setting == "team ceiling":
        rig.configure(ceilings={"teams": {"serving": 1000.0}})
    elif setting == "off":
        rig.configure(karpenter={"namespace": CONTROLLER_NS, "spare_replicas": False})
    now = prometheus_server.now - 1800

    report = rig.tick(now)
    assert report.ok, report.errors
    assert report.money is not None
    decision = outcome(report, "llama-chat").decision
    assert decision is not None
    planned = decision.desired_replicas - report.money.spares.get("serving/llama-chat", 0)
    assert 1 <= planned < 8  # its plan fits on the node with room to spare (50 req/s a replica)
    if setting != "lends":  # a spare is billed to its team; or the operator turned them off
        assert report.money.spares == {}
        assert decision.steps[-1].name != "spare"
        assert rig.replicas("serving", "llama-chat") == planned
        assert rig.metric("predictive_autoscaler_spare_replicas", {"namespace": "serving",
                                                                   "deployment": "llama-chat"}) == 0
        return
    # the node's idle GPUs hold spares: the plan's pods and the spares fill it, and no node more is asked for
    assert report.money.spares == {"serving/llama-chat": 8 - planned}
    assert decision.steps[-1].name == "spare"
    assert decision.steps[-1].replicas == 8
    assert rig.replicas("serving", "llama-chat") == 8
    assert report.money.to_dict()["spare_replicas"] == {"serving/llama-chat": 8 - planned}
    labels = {"namespace": "serving", "deployment": "llama-chat"}
    assert rig.metric("predictive_autoscaler_spare_replicas", labels) == 8 - planned

    # the ReplicaSet and the scheduler bring the pods up on the node: the spares stay where they are, and the
    # decision is shown their GPUs as free (a replica it adds would take one back and start with the pod lead alone)
    _fill_the_node(rig)
    report = rig.tick(now + 30)
    assert report.ok, report.errors
    assert report.money is not None
    decision = outcome(report, "llama-chat").decision
    assert decision is not None
    assert not decision.needs_node  # without the lent GPUs the node has none free
    # it plans on its own replicas: the spares are the pool's (counted, the lead gap would keep them as planned)
    assert decision.steps[0].name == "lead_time"
    assert decision.steps[0].replicas == planned
    assert report.money.spares == {"serving/llama-chat": 8 - decision.steps[-2].replicas}
    assert rig.replicas("serving", "llama-chat") == 8

    # Prometheus goes away: no forecast, no demand. The decision holds its own replicas and the spares it holds stay
    # (never a scale-down on missing data; a spare goes back only for a plan's need)
    down = make_source("http://127.0.0.1:1")  # nothing listens there; retries=0
    rig.controller.source = down
    report = rig.tick(now + 60)
    down.close()
    assert report.money is not None
    decision = outcome(report, "llama-chat").decision
    assert decision is not None
    assert decision.missing_metrics
    assert rig.replicas("serving", "llama-chat") == 8
    assert decision.desired_replicas == 8
    assert report.money.spares.get("serving/llama-chat", 0) == 8 - decision.steps[-2].replicas > 0


def test_a_restarted_controller_knows_the_spares_it_lent_from_the_status(
    money_rig: MoneyRig, prometheus_server: PrometheusServer
) -> None:
    rig = money_rig
    _half_used_node(rig)  # the plan's replicas and spares fill it at the first tick
    now = prometheus_server.now - 1800
    report = rig.tick(now)
    assert report.ok, report.errors
    assert report.money is not None
    planned = 8 - report.money.spares["serving/llama-chat"]
    assert rig.replicas("serving", "llama-chat") == 8
    _fill_the_node(rig)

    # a new process (an upgrade, a new leader): nothing in memory but what the status holds
    stage = MoneyStage()
    stage.capacity = KarpenterCapacity(rig.api, namespace=CONTROLLER_NS)
    source = make_source(prometheus_server.url)
    controller = Controller(KubeCluster(rig.api, instance="money-test"), source, lambda: rig.cfg,
                            metrics=ControllerMetrics(), money=stage)
    report = controller.tick(now + 30)
    source.close()
    assert report.ok, report.errors
    assert report.money is not None
    decision = outcome(report, "llama-chat").decision
    assert decision is not None
    # it plans on its own replicas from its first tick, the spares' GPUs shown free (as seen as its own, the
    # stabilisation window would hold them as planned for five minutes, and their node busy for the pool)
    assert decision.steps[0].name == "lead_time"
    assert decision.steps[0].replicas == planned
    assert not decision.needs_node
    assert report.money.spares == {"serving/llama-chat": 8 - decision.steps[-2].replicas}
    assert rig.replicas("serving", "llama-chat") == 8


def test_spares_fill_the_headrooms_idle_node_and_its_objects_hold_only_the_room_left_free(
    money_rig: MoneyRig, prometheus_server: PrometheusServer, buffers_served: bool
) -> None:
    rig = money_rig
    # One GPU per node: two nodes hold the two replicas, a third is Ready and empty (the headroom held it); the
    # demand rises over the next node lead, so the pool's headroom keeps at least one idle node. A 95% objective: the
    # headroom covers the pool's p95 error, which keeps its idle nodes the same over these ticks (at p99 the prior's
    # wider error crosses a node between them)
    _one_gpu_pool(rig, buffers_served, nodes=3, capacity="0.8", slo_attainment="95%")

    def held_by_objects() -> int:
        """What the headroom objects hold: a CapacityBuffer's pods (1 GPU each, none free on busy nodes here) or the
        placeholder pods (one per idle node)."""
        if buffers_served:
            buf = rig.fake.get("capacitybuffers.autoscaling.x-k8s.io", "serving", buffer_name("llama-chat"))
            return int(buf["spec"]["replicas"]) if buf is not None else 0
        dep = rig.fake.get("deployments", CONTROLLER_NS, placeholder_name("l4"))
        return int(dep["spec"]["replicas"]) if dep is not None else 0

    report = rig.tick(TROUGH)
    assert report.ok, report.errors
    assert report.money is not None
    decision = outcome(report, "llama-chat").decision
    assert decision is not None
    spares = report.money.spares.get("serving/llama-chat", 0)
    planned = decision.desired_replicas - spares
    assert planned == 2  # the plan fits on the busy nodes (0.8 req/s a replica)
    # the idle node is paid for the headroom's room: a spare stands on it, Ready when the rise comes
    assert spares == 3 - planned
    assert decision.steps[-1].name == "spare"
    assert "1 of its idle headroom node(s)" in decision.steps[-1].detail
    assert rig.replicas("serving", "llama-chat") == 3
    # the headroom's objects hold only the room the spares left free: no pod of theirs (real or virtual) waits for
    # the node a spare took, so neither Karpenter nor Cluster Autoscaler adds a node for it
    held = report.money.pool_headroom["l4"]
    assert held_by_objects() == held

    # the scheduler puts the spare on the idle node; then the operator turns spares off: while the spare stands
    # there its GPU is the room (a scale-up would take it back), and once it is gone the objects hold the node
    rig.fake.add("pods", bound_pod("llama-chat-2", "l4-2", 1))
    _set_replicas(rig, "serving", "llama-chat", 3)
    rig.configure(karpenter={"namespace": CONTROLLER_NS, "spare_replicas": False})
    report = rig.tick(TROUGH + 30)
    assert report.ok, report.errors
    assert report.money is not None
    assert report.money.spares == {}
    assert report.money.pool_headroom["l4"] == held
    rig.fake.remove("pods", "serving", "llama-chat-2")
    _set_replicas(rig, "serving", "llama-chat", 2)
    report = rig.tick(TROUGH + 60)
    assert report.ok, report.errors
    assert report.money is not None
    assert report.money.pool_headroom["l4"] == held + 1
    assert held_by_objects() == held + 1


def _set_replicas(rig: MoneyRig, namespace: str, name: str, replicas: int) -> None:
    """What the ReplicaSet controller reports once the pods are there (the fake runs none)."""
    dep = rig.fake.get("deployments", namespace, name)
    assert dep is not None
    dep["spec"]["replicas"] = dep["status"]["readyReplicas"] = dep["status"]["replicas"] = replicas
    rig.fake.add("deployments", dep)


# ---------------------------------------------------------------------------------------------- alerts


def read_alerts(url: str, cluster: str) -> list[dict[str, Any]]:
    answer = httpx.get(f"{url}/api/v2/alerts", params={"filter": f'cluster="{cluster}"'}, timeout=5)
    answer.raise_for_status()
    alerts: list[dict[str, Any]] = answer.json()
    return alerts


def wait_for(url: str, cluster: str, done: Any, timeout: float = 15.0) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while True:
        alerts = read_alerts(url, cluster)
        if done(alerts) or time.monotonic() > deadline:
            return alerts
        time.sleep(0.1)


@pytest.mark.alertmanager
def test_alerts_reach_alertmanager_and_are_resolved_when_the_condition_clears(
    money_rig: MoneyRig, alertmanager_server: AlertmanagerServer
) -> None:
    rig = money_rig
    cluster = f"money-{uuid.uuid4().hex[:8]}"
    rig.stage.alerts = AlertmanagerSink(alertmanager_server.url, cluster=cluster, expire_after=timedelta(minutes=2))
    # Wall-clock time: Prometheus has no data then, so the plan holds the 4 replicas there are.
    now = datetime.now(UTC).timestamp()
    rig.fake.add("deployments", gpu_deployment("serving", "llama-chat", replicas=4, capacity="1", ready=3))
    # Pending unschedulable for longer than a node start-up (the rig's 2 h): no node is coming for it
    created = datetime.fromtimestamp(now - 3 * 3600, UTC)
    rig.fake.add("pods", pod("serving", "llama-chat-abc12-pend1", "llama-chat", created=created, phase="Pending",
                             scheduled=False))
    rig.configure(ceilings={"teams": {"serving": PRICE * 2}})

    report = rig.tick(now)
    assert report.ok, report.errors
    assert desired(report, "llama-chat") == 2  # cut by the ceiling from the 4 it holds
    fired = wait_for(alertmanager_server.url, cluster, lambda a: len(a) == 3)
    by_name = {a["labels"]["alertname"]: a for a in fired}
    assert set(by_name) == set(ALERT_NAMES)
    breach = by_name["GPUCostCeilingProjectedBreach"]
    assert breach["labels"] == {"alertname": "GPUCostCeilingProjectedBreach", "severity": "warning",
                                "cluster": cluster, "scope": "team", "team": "serving"}
    assert f"${PRICE * 4:,.2f}/h > ${PRICE * 2:,.2f}/h" in breach["annotations"]["summary"]
    assert by_name["GPUCostCeilingCuttingInference"]["labels"]["severity"] == "critical"
    assert "serving/llama-chat -2 replica(s)" in by_name["GPUCostCeilingCuttingInference"]["annotations"]["description"]
    assert by_name["GPUsUnavailable"]["labels"]["deployment"] == "llama-chat"
    assert all(a["status"]["state"] == "active" for a in fired)
    assert rig.metric("predictive_autoscaler_gpus_unavailable", {"namespace": "serving", "deployment": "llama-chat"}) \
        == 1

    # The ceiling is raised and the Pending pod scheduled: every alert is resolved at once (endsAt = now).
    rig.configure(ceilings={"teams": {"serving": PRICE * 10}})
    rig.fake.add("pods", pod("serving", "llama-chat-abc12-pend1", "llama-chat", created=created,
                             ready_at=created + timedelta(seconds=90)))
    report = rig.tick(datetime.now(UTC).timestamp())
    assert not any("alert" in e for e in report.errors), report.errors
    assert wait_for(alertmanager_server.url, cluster, lambda a: a == []) == []
    assert rig.metric("predictive_autoscaler_errors_total", {"kind": "alert"}) is None


def test_undeliverable_alerts_are_reported_not_dropped(money_rig: MoneyRig) -> None:
    rig = money_rig
    dead = f"http://127.0.0.1:{free_port()}"
    rig.stage.alerts = AlertmanagerSink(dead, cluster="c1", max_attempts=1)
    rig.fake.add("deployments", gpu_deployment("serving", "llama-chat", replicas=4, capacity="1"))
    rig.configure(ceilings={"cluster": PRICE})
    now = datetime.now(UTC).timestamp()
    report = rig.tick(now)
    (error,) = [e for e in report.errors if "alert" in e]
    assert error.startswith("alerts not delivered (re-sent next tick): Alertmanager " + dead)
    assert not report.ok
    assert rig.metric("predictive_autoscaler_errors_total", {"kind": "alert"}) == 1
    report = rig.tick(now + 1)  # still failing: reported again, never silently dropped
    assert rig.metric("predictive_autoscaler_errors_total", {"kind": "alert"}) == 2


# ---------------------------------------------------------------------------------------------- no writes


@pytest.mark.parametrize("mode", ["dry_run", "standby"])
def test_dry_run_and_standby_write_nothing_but_report_the_money_plan(
    fake_api: FakeKubeAPI, api_client: client.ApiClient, prometheus_server: PrometheusServer, mode: str
) -> None:
    for name in (NODEPOOL_CRD, BUFFER_CRD, KUEUE_CRD):
        fake_api.install_crd(crd(name))
    fake_api.add("nodepools.karpenter.sh", nodepool("l4", "g6.xlarge", 1, limit=100, gpus_in_use=2))
    fake_api.add("deployments", gpu_deployment("serving", "llama-chat", replicas=2, capacity="0.1",
                                               priority="production", nodepool="l4", max_replicas=60))
    fake_api.add("workloads.kueue.x-k8s.io", kueue_workload("ft", pods=1, gpus=8, admitted=False, pool="l4"))
    dead = f"http://127.0.0.1:{free_port()}"  # any attempt to alert would show up as an error
    stage = MoneyStage(capacity=KarpenterCapacity(api_client, namespace=CONTROLLER_NS),
                       training=TrainingReader(api_client), alerts=AlertmanagerSink(dead, cluster="c", max_attempts=1))
    cfg = config(prometheus_server.url, ceilings={"cluster": 3.0})
    source = make_source(prometheus_server.url)
    controller = Controller(KubeCluster(api_client, instance="t"), source, lambda: cfg, dry_run=mode == "dry_run",
                            money=stage)
    try:
        report = controller.tick(TROUGH, acting=mode == "dry_run")
    finally:
        source.close()
    assert report.errors == ()
    assert fake_api.writes() == []
    cost = report.to_dict()["cost"]
    assert cost["binds"] is True
    assert cost["breaches"]
    assert cost["nodepool_limits"] == {"l4": 3}  # what it would set: floor($3 / $0.8048) = 3 GPUs, above running 2
    assert [g["reserved"] for g in cost["gangs"]] == [False]


def test_alert_names_match_the_adapter() -> None:
    assert (money_module.PROJECTED_BREACH, money_module.CUTTING_INFERENCE, money_module.GPUS_UNAVAILABLE) \
        == ALERT_NAMES


# ---------------------------------------------------------------------------------------------- failures


def test_missing_karpenter_is_not_an_error_but_a_failing_read_is_and_writes_nothing(money_rig: MoneyRig) -> None:
    rig = money_rig
    rig.stage.capacity = KarpenterCapacity(rig.api, namespace=CONTROLLER_NS)
    rig.fake.add("deployments", gpu_deployment("serving", "llama-chat", replicas=2, capacity="1", nodepool="h100"))
    rig.configure(ceilings={"cluster": 100.0})
    now = datetime.now(UTC).timestamp()
    report = rig.tick(now)  # no NodePool CRD: Karpenter is not installed, prices come from the config
    assert report.ok, report.errors

    rig.fake.install_crd(crd(NODEPOOL_CRD))
    rig.fake.add("nodepools.karpenter.sh", nodepool("h100", "p5.48xlarge", 8, limit=64, gpus_in_use=8))
    rig.fake.fail("GET", r"/apis/karpenter\.sh/v1/nodepools$", 500)
    report = rig.tick(now + 1)
    (error,) = report.errors
    assert error.startswith("reading NodePools failed (prices from the config; no limits or headroom this tick)")
    assert rig.metric("predictive_autoscaler_errors_total", {"kind": "kube_read"}) == 1
    assert rig.fake.calls("PATCH", r"/nodepools/") == []
    assert report.money is not None
    assert report.money.limits == {}

    report = rig.tick(now + 2)  # the API server is back: the limit is set
    assert report.ok, report.errors
    assert len(rig.fake.calls("PATCH", r"/nodepools/h100$")) == 1


def test_a_failed_gang_read_keeps_the_last_gangs_and_a_malformed_one_is_reported_once(money_rig: MoneyRig) -> None:
    rig = money_rig
    rig.fake.install_crd(crd(KUEUE_CRD))
    rig.stage.training = TrainingReader(rig.api)
    rig.fake.add("workloads.kueue.x-k8s.io", kueue_workload("ft", pods=2, gpus=4, admitted=True, pool="h100"))
    bad = kueue_workload("two-pools", pods=1, gpus=1, admitted=False, pool="h100")
    bad["spec"]["podSets"].append({**bad["spec"]["podSets"][0], "name": "other"})
    bad["spec"]["podSets"][1]["template"] = {"spec": {**bad["spec"]["podSets"][0]["template"]["spec"],
                                                      "nodeSelector": {"karpenter.sh/nodepool": "a10"}}}
    rig.fake.add("workloads.kueue.x-k8s.io", bad)
    now = datetime.now(UTC).timestamp()
    report = rig.tick(now)
    (error,) = report.errors
    assert error.startswith("training gang skipped: Workload training/two-pools: spec.podSets[*]")
    assert rig.metric("predictive_autoscaler_gang_reserved_gpus") == 8
    assert rig.tick(now + 1).errors == ()  # reported once, not every tick

    rig.fake.fail("GET", r"/workloads$", 503)
    report = rig.tick(now + 2)
    (error,) = report.errors
    assert error.startswith("reading training gangs failed; planning with the 1 gang(s) of the last good read")
    assert rig.metric("predictive_autoscaler_gang_reserved_gpus") == 8


# ---------------------------------------------------------------------------------------------- scheduled gangs

HOUR = 3600
NODE_STARTUP = 2 * HOUR  # cold_start.node_startup of ``config``


def scheduled_workload(name: str, *, gpus: int, start_after: int, deadline: int, duration: str, pool: str,
                       held: bool = True) -> dict[str, Any]:
    """A Kueue Workload submitted for the controller to start: held, with a window and a run time."""
    obj = kueue_workload(name, pods=1, gpus=gpus, admitted=False, pool=pool)
    obj["metadata"]["annotations"].update({
        PREFIX + "start-after": datetime.fromtimestamp(start_after, UTC).isoformat().replace("+00:00", "Z"),
        PREFIX + "deadline": str(deadline),
        PREFIX + "duration": duration,
    })
    if held:
        obj["spec"]["active"] = False
    return obj


def placement(report: TickReport, key: str) -> dict[str, Any]:
    found: dict[str, Any] = report.to_dict()["cost"]["gang_placements"][key]
    return found


def test_a_scheduled_gang_is_placed_in_the_forecast_trough_reserved_ahead_and_activated_at_its_start(
    money_rig: MoneyRig, prometheus_server: PrometheusServer
) -> None:
    rig = money_rig
    for name in (NODEPOOL_CRD, KUEUE_CRD):
        rig.fake.install_crd(crd(name))
    rig.fake.add("nodepools.karpenter.sh", nodepool("h100", "p5.48xlarge", 8))
    rig.stage.capacity = KarpenterCapacity(rig.api, namespace=CONTROLLER_NS)
    rig.stage.training = TrainingReader(rig.api)
    # Advisory: its replicas stay as they are, so any headroom in the pool is the gang's.
    dep = gpu_deployment("serving", "llama-chat", replicas=2, capacity="0.4", priority="production",
                         nodepool="h100")
    dep["metadata"]["annotations"][PREFIX + "mode"] = "advisory"
    rig.fake.add("deployments", dep)
    now = TROUGH - 20 * HOUR  # the next daily low of llama-chat's demand is inside the 24 h window
    rig.fake.add("workloads.kueue.x-k8s.io", scheduled_workload(
        "nightly", gpus=8, start_after=now, deadline=now + 24 * HOUR, duration="2h", pool="h100"))
    key = "Workload/training/nightly"

    report = rig.tick(now)
    assert report.ok, report.errors
    first = placement(report, key)
    start = first["planned_start_unix"]
    # Judged on the demand that really came: the replicas llama-chat needed over the gang's 2 h run.
    truth = prometheus_server.backfill.arrival_rate("serving", "llama-chat")
    replicas = [min(max(math.ceil(r / 0.4) if math.isfinite(r) else 1, 1), 20) for r in truth]

    def run_peak(at: int) -> int:
        i = (at - prometheus_server.backfill.start) // 60
        return max(replicas[i : i + 120])

    best = min(run_peak(now + 60 * m) for m in range(0, 24 * 60 + 1, 5))
    assert run_peak(start) <= best + 1, (run_peak(start), best)  # in the trough (one replica of forecast error) ...
    assert run_peak(now) > best + 2  # ... where starting at start-after would not be
    assert (first["fits"], first["counting"], first["held"]) == (True, False, True)
    assert rig.metric("predictive_autoscaler_gang_planned_start_timestamp_seconds",
                      {"gang": key, "team": "ml"}) == start
    # Not counted yet: no ceiling reservation, no nodes asked for it.
    assert report.to_dict()["cost"]["gangs"] == []
    assert rig.fake.all("deployments", CONTROLLER_NS) == []
    stored = rig.fake.get("workloads.kueue.x-k8s.io", "training", "nightly")
    assert stored is not None
    assert stored["metadata"]["annotations"][PREFIX + "planned-start"] == datetime.fromtimestamp(start, UTC).isoformat()
    assert stored["spec"]["active"] is False

    # Just before one node start-up ahead of its start (placements are recomputed as the forecast moves).
    report = rig.tick(start - NODE_STARTUP - 600)
    assert report.ok, report.errors
    start = placement(report, key)["planned_start_unix"]
    assert placement(report, key)["counting"] is False
    assert report.to_dict()["cost"]["gangs"] == []
    assert rig.fake.all("deployments", CONTROLLER_NS) == []

    # One node start-up ahead: frozen, reserved by the ceiling stage, and its node is asked for.
    report = rig.tick(start - NODE_STARTUP)
    assert report.ok, report.errors
    now_placement = placement(report, key)
    assert (now_placement["planned_start_unix"], now_placement["frozen"], now_placement["counting"]) == \
        (start, True, True)
    assert [(g["key"], g["reserved"]) for g in report.to_dict()["cost"]["gangs"]] == [(key, True)]
    decision = outcome(report, "llama-chat").decision
    assert decision is not None
    inference = max(2, decision.desired_replicas)  # 1 GPU per replica, advisory: no headroom of its own
    placeholder = rig.fake.get("deployments", CONTROLLER_NS, placeholder_name("h100"))
    assert placeholder is not None
    assert placeholder["spec"]["replicas"] == math.ceil((inference + 8) / 8) - math.ceil(inference / 8)
    assert rig.fake.get("workloads.kueue.x-k8s.io", "training", "nightly")["spec"]["active"] is False  # type: ignore[index]

    # A minute before its start: still held.
    report = rig.tick(start - 60)
    assert report.ok, report.errors
    assert rig.fake.calls("PATCH", r"/workloads/nightly$")[-1].body.get("spec") is None

    # At its start the activation fails once: reported, not dropped, retried at the next tick.
    rig.fake.fail("PATCH", r"/workloads/nightly$", 500)
    report = rig.tick(start)
    (error,) = report.errors
    assert error.startswith(f"activating {key} failed (retried next tick)")
    assert rig.fake.get("workloads.kueue.x-k8s.io", "training", "nightly")["spec"]["active"] is False  # type: ignore[index]
    report = rig.tick(start + 30)
    assert report.ok, report.errors
    patch = rig.fake.calls("PATCH", r"/workloads/nightly$")[-1]
    assert patch.content_type == "application/merge-patch+json"
    assert patch.body["spec"] == {"active": True}
    activated = rig.fake.get("workloads.kueue.x-k8s.io", "training", "nightly")
    assert activated is not None
    assert activated["spec"]["active"] is True
    assert PREFIX + "activated-at" in activated["metadata"]["annotations"]
    assert any(a.startswith(f"{key} activated at its planned start") for a in report.money.actions)  # type: ignore[union-attr]
    # Activated and pending admission: still counted, never activated twice.
    report = rig.tick(start + 60)
    assert report.ok, report.errors
    assert [g["key"] for g in report.to_dict()["cost"]["gangs"]] == [key]
    assert len([c for c in rig.fake.calls("PATCH", r"/workloads/nightly$") if c.body.get("spec")]) == 2


def test_dry_run_places_and_reports_a_scheduled_gang_but_writes_nothing(
    fake_api: FakeKubeAPI, api_client: client.ApiClient, prometheus_server: PrometheusServer
) -> None:
    fake_api.install_crd(crd(KUEUE_CRD))
    fake_api.add("deployments", gpu_deployment("serving", "llama-chat", replicas=2, capacity="0.4",
                                               priority="production", nodepool="h100"))
    now = TROUGH - 20 * HOUR
    fake_api.add("workloads.kueue.x-k8s.io", scheduled_workload(
        "nightly", gpus=8, start_after=now - 24 * HOUR, deadline=now + 4 * HOUR, duration="2h", pool="h100"))
    source = make_source(prometheus_server.url)
    cfg = config(prometheus_server.url)
    controller = Controller(KubeCluster(api_client, instance="t"), source, lambda: cfg, dry_run=True,
                            money=MoneyStage(training=TrainingReader(api_client)))
    try:
        report = controller.tick(now)
        later = controller.tick(now + 4 * HOUR)  # its latest start: would be activated if this were not a dry run
    finally:
        source.close()
    assert (report.errors, later.errors) == ((), ())
    assert fake_api.writes() == []
    shown = placement(report, "Workload/training/nightly")
    assert now <= shown["planned_start_unix"] <= now + 4 * HOUR
    assert shown["held"] is True
    assert shown["counting"] is (shown["planned_start_unix"] - NODE_STARTUP <= now)
    assert placement(later, "Workload/training/nightly")["counting"] is True
    assert [g["reserved"] for g in later.to_dict()["cost"]["gangs"]] == [True]


def test_the_pools_headroom_covers_its_deployments_strictest_objective(
    money_rig: MoneyRig, buffers_served: bool
) -> None:
    rig = money_rig
    _one_gpu_pool(rig, buffers_served, nodes=2, capacity="0.8", slo_attainment="95%")
    rig.configure(karpenter={"namespace": CONTROLLER_NS, "spare_replicas": False})  # the idle nodes held, no spares
    report = rig.tick(TROUGH)
    assert report.ok, report.errors
    assert report.money is not None
    at_95 = report.money.pool_headroom["l4"]
    dep = rig.fake.get("deployments", "serving", "llama-chat")
    assert dep is not None
    dep["metadata"]["annotations"][PREFIX + "slo-attainment"] = "99%"
    rig.fake.add("deployments", dep)
    report = rig.tick(TROUGH + 30)
    assert report.ok, report.errors
    assert report.money is not None
    assert report.money.pool_headroom["l4"] > at_95  # a 99% objective: the pool's p99 error, more idle nodes
    # the operator's cost knob overrides the objective's quantile
    rig.configure(karpenter={"namespace": CONTROLLER_NS, "spare_replicas": False, "headroom_quantile": 0.95})
    report = rig.tick(TROUGH + 60)
    assert report.ok, report.errors
    assert report.money is not None
    assert report.money.pool_headroom["l4"] == at_95
