"""The controller reads the free GPUs of the NodePool a Deployment names and plans on them: new replicas that fit on
free GPUs are planned a pod start-up ahead; a Deployment that names no NodePool, or a failed read, is planned as
before nodes were read (a new replica waits for a node), never closer. Over the fake API server, held to
deploy/rbac.yaml, and a real Prometheus."""

from __future__ import annotations

import re

import pytest

from autoscaler.adapters.kube import NODEPOOL_LABEL
from autoscaler.domain.annotations import PREFIX
from autoscaler.runtime.loop import TickReport
from autoscaler.runtime.state import WorkloadOutcome
from tests.runtime.conftest import Rig
from tests.servers import PrometheusServer


@pytest.fixture
def now0(prometheus_server: PrometheusServer) -> int:
    return prometheus_server.now - 1800


def outcome(report: TickReport, name: str) -> WorkloadOutcome:
    (found,) = [w for w in report.workloads if w.name == name]
    return found


def name_pool(rig: Rig, namespace: str, name: str, pool: str) -> None:
    dep = rig.fake.get("deployments", namespace, name)
    assert dep is not None
    dep["metadata"]["annotations"][PREFIX + "nodepool"] = pool
    rig.fake.add("deployments", dep)


def add_nodes(rig: Rig, pool: str, count: int) -> None:
    for i in range(count):
        rig.fake.add("nodes", {
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": f"{pool}-{i}", "labels": {NODEPOOL_LABEL: pool}},
            "status": {"allocatable": {"nvidia.com/gpu": "8"}, "conditions": [{"type": "Ready", "status": "True"}]},
        })


def test_free_gpus_of_the_named_pool_make_new_replicas_a_pod_start_up_away(rig: Rig, now0: int) -> None:
    name_pool(rig, "serving", "llama-chat", "gpu")
    add_nodes(rig, "gpu", 5)  # 40 free GPUs: room for every replica the scale-up adds

    report = rig.controller.tick(now0)

    assert report.ok, report.errors
    llama = outcome(report, "llama-chat").decision
    assert llama is not None
    assert llama.desired_replicas > 2  # it scales up (as without the read: ~2.5 req/s at 0.4 per replica)
    assert not llama.needs_node
    assert "40 free GPU(s) >= 1 per replica: no node needed" in llama.steps[0].detail
    others = [w.decision for w in report.workloads if w.name != "llama-chat" and w.decision is not None]
    assert others
    assert all(d.needs_node for d in others)
    (listed,) = rig.fake.calls("GET", r"^/api/v1/nodes$")
    assert listed.query["labelSelector"] == [f"{NODEPOOL_LABEL} in (gpu)"]


def test_no_nodepool_named_reads_no_node(rig: Rig, now0: int) -> None:
    add_nodes(rig, "gpu", 5)
    report = rig.controller.tick(now0)
    assert report.ok, report.errors
    assert not rig.fake.calls("GET", r"^/api/v1/nodes$")
    assert all(w.decision is None or w.decision.needs_node for w in report.workloads)


def test_a_failed_read_plans_as_waiting_for_a_node_and_says_so(rig: Rig, now0: int) -> None:
    name_pool(rig, "serving", "llama-chat", "gpu")
    add_nodes(rig, "gpu", 5)
    rig.fake.fail("GET", r"^/api/v1/nodes$", 500, times=1)

    report = rig.controller.tick(now0)

    llama = outcome(report, "llama-chat").decision
    assert llama is not None
    assert llama.needs_node  # never planned closer on a read that failed
    assert any("reading the nodes of NodePool(s) gpu failed" in e for e in report.errors), report.errors
    assert rig.metric("predictive_autoscaler_errors_total", {"kind": "kube_read"}) == 1.0


def test_deployments_of_one_pool_are_not_shown_the_gpus_an_earlier_plan_took(rig: Rig, now0: int) -> None:


    for name in ("llama-chat", "mistral-code"):
        name_pool(rig, "serving", name, "gpu")
    add_nodes(rig, "gpu", 1)  # 8 free GPUs for both

    report = rig.controller.tick(now0)

    assert report.ok, report.errors
    shown = {}
    for name in ("llama-chat", "mistral-code"):
        decision = outcome(report, name).decision
        assert decision is not None
        found = re.search(r"(\d+) free GPU\(s\)", decision.steps[0].detail)
        assert found is not None
        took = min(int(found.group(1)), max(0, decision.desired_replicas - outcome(report, name).current_replicas))
        shown[name] = (int(found.group(1)), took)
    # planned in listing order while no model is staler than another: llama-chat first, which scales up onto some
    seen, took = shown["llama-chat"]
    assert seen == 8
    assert 0 < took < 8
    assert shown["mistral-code"][0] == 8 - took  # what llama-chat left, not the 8 it was shown
