"""Headroom has the replicas' memory: the ahead count it stands for gets the same scale-down
stabilisation, so a forecast wobble neither creates and deletes a buffer a minute later nor resizes it 2 -> 3 -> 2;
replicas that land still take it away at once (fulfilled, not a wobble). Through ``KarpenterCapacity`` on the
recording fake API server."""

from __future__ import annotations

from kubernetes import client

from autoscaler.adapters.karpenter import KarpenterCapacity, placeholder_name
from autoscaler.domain.money import stabilize_ahead
from autoscaler.runtime.metrics import ControllerMetrics
from autoscaler.runtime.money import MoneyStage
from tests.domain.test_money import NOW, planned
from tests.kube.fakeapi import FakeKubeAPI
from tests.runtime.test_money import CONTROLLER_NS, NODEPOOL_CRD, config, crd, nodepool

WINDOW = 600  # the default profile's scale_down_stabilization


def test_the_ahead_count_falls_only_to_the_highest_of_the_window() -> None:
    held: dict[str, int] = {}
    history: dict[str, tuple[tuple[int, int], ...]] = {}
    counts = []
    for dt, ahead in ((0, 3), (60, 1), (120, 4), (180, 3), (300, 2), (721, 2), (781, 1)):
        plans, history = stabilize_ahead([planned("a", replicas=1, desired=1, ahead=ahead)], held, history, NOW + dt,
                                         {"serving/a": WINDOW})
        held = {p.key: p.ahead_replicas for p in plans}
        counts.append(held["serving/a"])
    # 3 held through the dip to 1; 4 at once; held at 4 until the 4 leaves the window (t=120 + 600), then the
    # highest count left in it.
    assert counts == [3, 3, 4, 4, 4, 3, 2]
    # Never below the decision; a gone workload's memory is dropped.
    plans, history = stabilize_ahead([planned("b", replicas=5, desired=5, ahead=5)], held, history, NOW + 900,
                                     {"serving/b": WINDOW})
    assert [p.ahead_replicas for p in plans] == [5]
    assert set(history) == {"serving/b"}


def test_placeholder_nodes_are_not_churned_by_a_wobbling_forecast_but_go_when_the_replicas_land(
    fake_api: FakeKubeAPI, api_client: client.ApiClient
) -> None:
    fake_api.install_crd(crd(NODEPOOL_CRD))
    fake_api.add("nodepools.karpenter.sh", nodepool("l4", "g6.xlarge", 1, gpus_in_use=1))
    stage = MoneyStage(capacity=KarpenterCapacity(api_client, namespace=CONTROLLER_NS))
    cfg = config("http://127.0.0.1:1", karpenter={"headroom": "placeholder"})
    metrics = ControllerMetrics()

    def tick(dt: int, ahead: int, *, replicas: int = 1) -> int:
        errors: list[str] = []
        stage.run([planned("chat", replicas=replicas, desired=replicas, ahead=ahead, pool="l4")], cfg, NOW + dt,
                  write=True, horizon_seconds=900, metrics=metrics, errors=errors)
        assert errors == []
        dep = fake_api.get("deployments", CONTROLLER_NS, placeholder_name("l4"))
        return 0 if dep is None else int(dep["spec"]["replicas"])

    assert tick(0, 3) == 2  # 3 replicas ahead, 1 runs on the pool's one node: 2 spare nodes
    assert tick(60, 1) == 2  # the forecast dips a minute later: kept, not deleted
    assert tick(120, 4) == 3  # a rise applies at once
    assert tick(180, 3) == 3  # and is not taken back at the next wobble (no 2 -> 3 -> 2)
    writes = [c for c in fake_api.writes() if "/deployments" in c.path]
    assert len(writes) == 2, [(c.method, c.path) for c in writes]  # created once, resized once
    assert tick(721, 1) == 2  # once the 4 has left the window: the highest ahead count left in it (3)
    assert tick(1400, 1) == 0  # a whole window of 1: removed
    # Replicas that land take the headroom at once: fulfilled, not a wobble.
    assert tick(1460, 4) == 3
    pool = fake_api.get("nodepools.karpenter.sh", "", "l4")
    assert pool is not None
    pool["status"]["resources"]["nvidia.com/gpu"] = "4"
    fake_api.add("nodepools.karpenter.sh", pool)
    assert tick(1520, 4, replicas=4) == 0
