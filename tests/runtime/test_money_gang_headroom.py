"""No idle nodes for a gang that will not start (they cost as much as busy ones), through ``TrainingReader`` and
``KarpenterCapacity`` on the recording fake API server: placeholder nodes are held for a pending Kueue Workload only
while Kueue can admit it (its LocalQueue exists, its ClusterQueue has the GPU quota free), and only for a limited
time; past it they are released with a Warning Event on the Workload and a metric."""

from __future__ import annotations

from typing import Any

from kubernetes import client

from autoscaler.adapters.karpenter import KarpenterCapacity, placeholder_name
from autoscaler.adapters.training import TrainingReader
from autoscaler.engine.money import GANG_HEADROOM_LIMIT_STARTUPS
from autoscaler.runtime.metrics import ControllerMetrics
from autoscaler.runtime.money import MoneyOutcome, MoneyStage
from tests.domain.test_kueue import cluster_queue, local_queue
from tests.kube.fakeapi import FakeKubeAPI
from tests.runtime.test_money import (
    CONTROLLER_NS,
    KUEUE_CRD,
    NODEPOOL_CRD,
    config,
    crd,
    kueue_workload,
    nodepool,
)

NOW = 1_700_000_000
NODE_STARTUP = 2 * 3600  # ``config``'s cold_start.node_startup
KEY = "Workload/training/pretrain"


class Rig:
    def __init__(self, fake: FakeKubeAPI, api: client.ApiClient) -> None:
        self.fake = fake
        for name in (NODEPOOL_CRD, KUEUE_CRD, "kueue.x-k8s.io_localqueues.yaml", "kueue.x-k8s.io_clusterqueues.yaml"):
            fake.install_crd(crd(name))
        fake.add("nodepools.karpenter.sh", nodepool("h100", "p5.48xlarge", 8))
        workload = kueue_workload("pretrain", pods=2, gpus=8, admitted=False, pool="h100")
        workload["metadata"]["uid"] = "uid-pretrain"
        fake.add("workloads.kueue.x-k8s.io", workload)
        self.stage = MoneyStage(capacity=KarpenterCapacity(api, namespace=CONTROLLER_NS), training=TrainingReader(api))
        self.metrics = ControllerMetrics()
        self.cfg = config("http://127.0.0.1:1", karpenter={"headroom": "placeholder"})

    def tick(self, now: int) -> MoneyOutcome:
        errors: list[str] = []
        out = self.stage.run([], self.cfg, now, write=True, horizon_seconds=900, metrics=self.metrics, errors=errors)
        assert errors == []
        return out

    def placeholders(self) -> int:
        dep = self.fake.get("deployments", CONTROLLER_NS, placeholder_name("h100"))
        return 0 if dep is None else int(dep["spec"]["replicas"])

    def metric(self, name: str, labels: dict[str, str]) -> float | None:
        value: float | None = self.metrics.registry.get_sample_value(name, labels)
        return value


def add_queues(fake: FakeKubeAPI, **quota: Any) -> None:
    fake.add("localqueues.kueue.x-k8s.io", local_queue("training", "gpu-queue", "gpu"))
    fake.add("clusterqueues.kueue.x-k8s.io", cluster_queue("gpu", **quota))


def test_no_nodes_for_a_workload_whose_local_queue_does_not_exist(fake_api: FakeKubeAPI,
                                                                  api_client: client.ApiClient) -> None:
    rig = Rig(fake_api, api_client)
    out = rig.tick(NOW)
    assert [g.key for g in out.report.gangs_reserved] == [KEY]  # the ceiling still counts it (no ceiling here)
    assert rig.placeholders() == 0
    assert out.to_dict()["gang_headroom_blocked"] == {KEY: "LocalQueue training/gpu-queue does not exist"}
    assert rig.metric("predictive_autoscaler_gang_headroom_blocked", {"gang": KEY, "team": "ml"}) == 1
    # The queue exists but its ClusterQueue's quota is smaller than the gang: never admitted, still no nodes.
    add_queues(fake_api, gpus=8)
    assert rig.tick(NOW + 30).gang_headroom_blocked[KEY].startswith("ClusterQueue gpu can admit at most 8 GPU(s)")
    assert rig.placeholders() == 0
    # Quota that is all reserved by others: it waits; no nodes until the quota is free.
    add_queues(fake_api, gpus=32, reserved=24)
    assert rig.tick(NOW + 60).gang_headroom_blocked[KEY].startswith("ClusterQueue gpu has 8 of 32 GPU(s) free")
    assert rig.placeholders() == 0
    # Admittable now: its two nodes are held.
    add_queues(fake_api, gpus=32)
    out = rig.tick(NOW + 90)
    assert out.gang_headroom_blocked == {}
    assert rig.placeholders() == 2
    assert rig.metric("predictive_autoscaler_gang_headroom_blocked", {"gang": KEY, "team": "ml"}) is None
    reads = [c.path for c in fake_api.calls("GET") if "queues" in c.path]
    assert any(p.endswith("/localqueues") for p in reads)
    assert any(p.endswith("/clusterqueues") for p in reads)


def test_nodes_held_for_a_gang_that_does_not_start_are_released_with_an_event(
    fake_api: FakeKubeAPI, api_client: client.ApiClient
) -> None:
    rig = Rig(fake_api, api_client)
    add_queues(fake_api, gpus=32)
    rig.tick(NOW)
    assert rig.placeholders() == 2
    limit = GANG_HEADROOM_LIMIT_STARTUPS * NODE_STARTUP
    rig.tick(NOW + limit)
    assert rig.placeholders() == 2  # at the limit: still held
    out = rig.tick(NOW + limit + 30)
    assert rig.placeholders() == 0
    assert "has not started: released after 4.0 h" in out.gang_headroom_blocked[KEY]
    assert any(a.startswith(f"{KEY}: headroom released") for a in out.actions)
    (event,) = fake_api.all("events", "training")
    assert (event["reason"], event["type"]) == ("GangHeadroomExpired", "Warning")
    assert event["involvedObject"] == {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "Workload",
                                       "name": "pretrain", "namespace": "training", "uid": "uid-pretrain"}
    assert rig.metric("predictive_autoscaler_gang_headroom_expired_total", {"team": "ml"}) == 1
    # Reported once; the nodes stay released while it stays pending.
    rig.tick(NOW + limit + 60)
    assert len(fake_api.all("events", "training")) == 1
    assert rig.placeholders() == 0
    assert rig.metric("predictive_autoscaler_gang_headroom_expired_total", {"team": "ml"}) == 1
