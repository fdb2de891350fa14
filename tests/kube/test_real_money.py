"""The money stage end to end, on a real kube-apiserver with the real Karpenter and Kueue CRDs: the controller, run
as its own ServiceAccount (``run --once``) under a binding $73.74/h ceiling on a p4d-like pool (8 GPUs, $32.77/h a
node), keeps NodePool limits, replicas, gang reservations and headroom within the ceiling as whole nodes; holds no
nodes for a gang Kueue cannot admit; starts the held gang through Kueue's admission gate at its planned start; and
never writes a GPU limit on a static NodePool.

The fleet is ``real_fleet``'s (``scene``), moved onto the p4d pool: llama-chat (1 GPU a replica; the forecast wants
more than 16) and mistral-code; the seeded gangs of the p5 pool (whose $98.32 node the ceiling cannot buy) are
replaced by two Kueue Workloads on the p4d pool.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from kubernetes import client

from autoscaler.adapters.kube import MERGE_PATCH
from autoscaler.domain.annotations import PREFIX
from autoscaler.domain.gangs import ACTIVATED_ANNOTATION, ADMISSION_GATE, ADMISSION_GATED_BY
from tests.kube import test_real_controller as real
from tests.kube.conftest import nodepool
from tests.kube.real_fleet import (
    GPU,
    KARPENTER,
    KUEUE,
    PODGROUP,
    SA_USER,
    SERVING,
    TRAINING,
    VOLCANO,
    WORKLOAD,
    as_dict,
    audit_events,
    gang_annotations,
    write_config,
)
from tests.kube.test_real_controller import Scene

controller_cluster, scene = real.controller_cluster, real.scene  # the fixtures (a server private to this module)

pytestmark = [pytest.mark.kube, pytest.mark.prometheus]

P4D, STATIC = "p4d-pool", "static-pool"
NODE = 32.7726  # p4d.24xlarge, 8 GPUs, from the packaged price table
CEILING = 73.74  # 2 nodes ($65.55) fit, 3 ($98.32) do not
GATED, ORPHAN = "gated-finetune", "orphan-pretrain"


def create_pool(custom: client.CustomObjectsApi, obj: dict[str, Any]) -> None:
    status = obj.pop("status")
    custom.create_cluster_custom_object(*KARPENTER, obj)
    custom.patch_cluster_custom_object_status(*KARPENTER, obj["metadata"]["name"], {"status": status},
                                              _content_type=MERGE_PATCH)


def workload(name: str, *, pods: int, queue: str, annotations: dict[str, str]) -> dict[str, Any]:
    trainer = {"name": "trainer", "image": "nvcr.io/nvidia/pytorch:24.05-py3",
               "resources": {"requests": {GPU: "8"}, "limits": {GPU: "8"}}}
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "Workload",
        "metadata": {"name": name, "namespace": TRAINING, "annotations": annotations},
        "spec": {"queueName": queue, "podSets": [{"name": "workers", "count": pods, "template": {"spec": {
            "nodeSelector": {"karpenter.sh/nodepool": P4D}, "restartPolicy": "Never", "containers": [trainer]}}}]},
    }


def p4d_fleet(scene: Scene) -> None:
    custom = scene.custom()
    create_pool(custom, nodepool(P4D, gpu_limit=None, gpus_in_use=0, nodes=0, instance_types=("p4d.24xlarge",)))
    static = nodepool(STATIC, gpu_limit=None, gpus_in_use=8, nodes=1, instance_types=("p4d.24xlarge",))
    static["spec"].pop("weight")  # the CRD refuses weight and any limit but nodes on a static pool
    static["spec"]["replicas"] = 1
    static["spec"]["limits"] = {"nodes": "1"}
    create_pool(custom, static)
    for name in ("llama-chat", "mistral-code"):
        scene.apps().patch_namespaced_deployment(name, SERVING, {"metadata": {"annotations": {
            PREFIX + "nodepool": P4D}}})
    # ~2.5 req/s at 0.1 req/s per replica: llama-chat wants far more than the 16 GPUs two nodes hold.
    scene.apps().patch_namespaced_deployment("llama-chat", SERVING, {"metadata": {"annotations": {
        PREFIX + "capacity-per-replica": "0.1"}}})
    # The p5 pool's gangs go: its $98.32 node is above the ceiling, so they could never be placed.
    custom.delete_namespaced_custom_object(*KUEUE[:2], TRAINING, KUEUE[2], WORKLOAD)
    custom.delete_namespaced_custom_object(*VOLCANO[:2], TRAINING, VOLCANO[2], PODGROUP)
    # Pending, unscheduled, and its LocalQueue does not exist: Kueue will never admit it.
    custom.create_namespaced_custom_object(*KUEUE[:2], TRAINING, KUEUE[2], workload(
        ORPHAN, pods=2, queue="no-such-queue", annotations={}))


def billed(gpus: int) -> float:
    return math.ceil(gpus / 8) * NODE


def test_under_a_binding_ceiling_everything_fits_as_whole_p4d_nodes(scene: Scene) -> None:
    p4d_fleet(scene)
    config = write_config(scene.tmp / "config-p4d.yaml", scene.prometheus.url, ceiling=CEILING)

    plan = scene.dry_run(scene.t1, config=config)
    cost = plan["cost"]
    assert cost["cluster_dollars_per_hour"] <= CEILING
    workloads = {w["name"]: w for w in plan["workloads"]}
    inference = sum(workloads[n]["desired_replicas"] for n in ("llama-chat", "mistral-code"))
    assert billed(inference) <= CEILING
    # The plan wanted more than two nodes hold, and the trail says whole nodes cost the replicas.
    steps = [s for s in workloads["llama-chat"]["decision"]["steps"] if s["name"] == "cost_ceiling"]
    assert steps, workloads["llama-chat"]["decision"]["steps"]
    assert "GPU(s) need" in steps[-1]["detail"]
    assert steps[-1]["detail"].startswith("CUT")
    assert ": 16 GPU(s) on 2 node(s)" in steps[-1]["detail"]
    # Limits: whole nodes the ceiling buys (2 p4d nodes; no $98.32 p5 node), none on the static pool.
    limits = cost["nodepool_limits"]
    assert limits[P4D] == 16
    assert all(billed(v) <= CEILING or v == 0 for k, v in limits.items() if k == P4D)
    assert STATIC not in limits
    # Headroom (the pool's idle nodes as a CapacityBuffer of llama-chat replicas) fits the same two nodes with the
    # plan (the ceiling's slack is what the kept plan leaves); none for the orphan gang.
    buffered = cost["headroom"].get(f"CapacityBuffer {SERVING}/llama-chat", 0)
    assert billed(inference + buffered) <= CEILING
    assert f"Deployment {P4D}" not in cost["headroom"]
    assert cost["gang_headroom_blocked"][f"Workload/{TRAINING}/{ORPHAN}"] == \
        f"LocalQueue {TRAINING}/no-such-queue does not exist"

    scene.once(scene.t1, config=config)
    custom = scene.custom()
    pool = as_dict(custom.get_cluster_custom_object(*KARPENTER, P4D))
    assert pool["spec"]["limits"] == {GPU: "16"}
    static = as_dict(custom.get_cluster_custom_object(*KARPENTER, STATIC))
    assert static["spec"]["limits"] == {"nodes": "1"}
    llama = scene.apps().read_namespaced_deployment("llama-chat", SERVING).spec.replicas
    mistral = scene.apps().read_namespaced_deployment("mistral-code", SERVING).spec.replicas
    assert llama is not None
    assert mistral is not None
    assert int(llama) + int(mistral) == inference

    # Demand falls (at most 7 llama-chat replicas): one node of inference leaves room for a gang's node. A gang
    # held by Kueue's admission gate is submitted for the single instant workload_start (its queue has 16 GPUs):
    # placed, its node asked for one node start-up ahead, and released through the gate at its planned start.
    scene.apps().patch_namespaced_deployment("llama-chat", SERVING, {"metadata": {"annotations": {
        PREFIX + "max-replicas": "7"}}})
    scene.apps().patch_namespaced_deployment_scale("llama-chat", SERVING, {"spec": {"replicas": 7}})
    custom.create_namespaced_custom_object(*KUEUE[:2], TRAINING, KUEUE[2], workload(
        GATED, pods=1, queue="gpu-queue",
        annotations={ADMISSION_GATED_BY: f"example.com/other,{ADMISSION_GATE}",
                     **gang_annotations(scene.workload_start, "1h")}))
    plan = scene.dry_run(scene.workload_start - 60, config=config)
    placement = plan["cost"]["gang_placements"][f"Workload/{TRAINING}/{GATED}"]
    assert (placement["planned_start_unix"], placement["held"], placement["fits"]) == (
        scene.workload_start, True, True)
    assert plan["cost"]["cluster_dollars_per_hour"] <= CEILING
    scene.once(scene.workload_start - 60, config=config)
    gated = as_dict(custom.get_namespaced_custom_object(*KUEUE[:2], TRAINING, KUEUE[2], GATED))
    assert gated["metadata"]["annotations"][ADMISSION_GATED_BY] == f"example.com/other,{ADMISSION_GATE}"
    scene.once(scene.workload_start, config=config)
    gated = as_dict(custom.get_namespaced_custom_object(*KUEUE[:2], TRAINING, KUEUE[2], GATED))
    assert gated["metadata"]["annotations"][ADMISSION_GATED_BY] == "example.com/other"
    assert ACTIVATED_ANNOTATION in gated["metadata"]["annotations"]
    assert "active" not in gated["spec"] or gated["spec"]["active"] is True
    plan = scene.dry_run(scene.workload_start, config=config)  # started, pending admission: still counted
    assert plan["cost"]["cluster_dollars_per_hour"] <= CEILING
    assert [g["key"] for g in plan["cost"]["gangs"] if g["reserved"]] == [f"Workload/{TRAINING}/{GATED}"]
    orphan = as_dict(custom.get_namespaced_custom_object(*KUEUE[:2], TRAINING, KUEUE[2], ORPHAN))
    assert PREFIX + "planned-start" not in orphan["metadata"].get("annotations", {})

    # The static pool was never written; nothing was refused.
    writes = [e for e in audit_events(scene.cluster.audit_log, offset=scene.audit_offset)
              if e["user"]["username"] == SA_USER and e["verb"] in ("patch", "update")
              and e["requestURI"].startswith(f"/apis/karpenter.sh/v1/nodepools/{STATIC}")]
    assert writes == []
    assert scene.refused() == []
