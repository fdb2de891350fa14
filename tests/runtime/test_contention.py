"""Another autoscaler on a Deployment the loop would scale: it runs as advisory until the HPA is gone; another writer
that is not an HPA is counted and, when it keeps setting the replicas back, said.

Through the fake API server (held to deploy/rbac.yaml) and the real Prometheus of ``tests/runtime/conftest.py``:
``llama-chat`` is the Deployment the first tick scales up, so a tick that leaves it alone shows the HPA was seen.
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from autoscaler.adapters.kube import KubeCluster
from autoscaler.config.schema import Config
from autoscaler.domain.annotations import PREFIX
from autoscaler.domain.contention import EVENT_REASON_CONTENDED, EVENT_REASON_OVERWRITTEN, EVENT_REASON_RESOLVED
from autoscaler.runtime.loop import Controller
from autoscaler.runtime.metrics import ControllerMetrics
from tests.kube.conftest import hpa, stored_status
from tests.runtime.conftest import Rig
from tests.servers import PrometheusServer

STEP = 60


@pytest.fixture
def now0(prometheus_server: PrometheusServer) -> int:
    return prometheus_server.now - 1800


def llama_replicas(rig: Rig) -> int:
    dep = rig.fake.get("deployments", "serving", "llama-chat")
    assert dep is not None
    return int(dep["spec"]["replicas"])


def published(rig: Rig) -> dict[str, Any]:
    """llama-chat's status as its status object holds it."""
    return stored_status(rig.fake, "serving", "llama-chat")


def contention_events(rig: Rig) -> list[tuple[str, str, str]]:
    return [(e["type"], e["reason"], e["message"]) for e in rig.events("serving", "llama-chat")
            if e["reason"] in (EVENT_REASON_CONTENDED, EVENT_REASON_RESOLVED)]


def test_a_deployment_an_hpa_scales_runs_as_advisory_until_the_hpa_is_gone(rig: Rig, now0: int) -> None:
    rig.fake.add("horizontalpodautoscalers", hpa("serving", "llama-cpu", "llama-chat"))
    rig.fake.add("horizontalpodautoscalers", hpa("serving", "mistral-cpu", "mistral-code-old"))  # another target

    for k in range(2):
        report = rig.controller.tick(now0 + k * STEP)
        assert report.ok, report.errors
        (llama,) = [w for w in report.workloads if w.name == "llama-chat"]
        assert llama.decision is not None
        assert llama.decision.desired_replicas > 2
    assert rig.fake.calls("PATCH", r"/deployments/llama-chat/scale$") == []
    assert llama_replicas(rig) == 2
    status = published(rig)
    assert (status["mode"], status["scaledBy"]) == ("advisory", ["llama-cpu"])
    ((kind, reason, message),) = contention_events(rig)  # once, not every tick
    assert (kind, reason) == ("Warning", EVENT_REASON_CONTENDED)
    assert message.startswith("HorizontalPodAutoscaler llama-cpu also scales this Deployment")
    labels = {"namespace": "serving", "deployment": "llama-chat"}
    assert rig.metric("predictive_autoscaler_decisions_total", {**labels, "outcome": "advisory"}) == 2
    assert rig.metric("predictive_autoscaler_workloads", {"state": "contended"}) == 1
    # the other Deployments are scaled as before; no HPA names them
    assert not [e for e in rig.events() if e["involvedObject"]["name"] != "llama-chat"
                and e["reason"] == EVENT_REASON_CONTENDED]

    rig.fake.remove("horizontalpodautoscalers", "serving", "llama-cpu")
    report = rig.controller.tick(now0 + 2 * STEP)
    assert report.ok, report.errors
    assert llama_replicas(rig) > 2
    assert published(rig)["mode"] == "scale"
    assert "scaledBy" not in published(rig)
    assert [e[:2] for e in contention_events(rig)] == [("Warning", EVENT_REASON_CONTENDED),
                                                       ("Normal", EVENT_REASON_RESOLVED)]
    assert rig.metric("predictive_autoscaler_workloads", {"state": "contended"}) == 0
    rig.controller.tick(now0 + 3 * STEP)
    assert len(contention_events(rig)) == 2


def test_a_restarted_controller_remembers_the_hpa_it_told_of_from_the_status(
    rig: Rig, now0: int, api_client: client.ApiClient, loop_config: Config
) -> None:
    rig.fake.add("horizontalpodautoscalers", hpa("serving", "llama-cpu", "llama-chat"))
    assert rig.controller.tick(now0).ok
    assert [e[1] for e in contention_events(rig)] == [EVENT_REASON_CONTENDED]

    def restart() -> Controller:  # a new process (an upgrade, a new leader): in memory only what the status holds
        return Controller(KubeCluster(api_client, instance="test-controller"), rig.source, lambda: loop_config,
                          metrics=ControllerMetrics())

    # its first HPA list fails: the status's read holds, so the Deployment is not scaled by both
    again = restart()
    rig.fake.fail("GET", r"^/apis/autoscaling/v2/horizontalpodautoscalers$", 500)
    assert not again.tick(now0 + STEP).ok
    assert rig.fake.calls("PATCH", r"/deployments/llama-chat/scale$") == []
    assert [e[1] for e in contention_events(rig)] == [EVENT_REASON_CONTENDED]  # not told twice

    third = restart()
    assert third.tick(now0 + 2 * STEP).ok
    assert [e[1] for e in contention_events(rig)] == [EVENT_REASON_CONTENDED]
    rig.fake.remove("horizontalpodautoscalers", "serving", "llama-cpu")
    assert third.tick(now0 + 3 * STEP).ok
    assert [e[1] for e in contention_events(rig)] == [EVENT_REASON_CONTENDED, EVENT_REASON_RESOLVED]
    assert llama_replicas(rig) > 2


def test_an_advisory_deployment_beside_its_hpa_is_what_advisory_is_for(rig: Rig, now0: int) -> None:
    dep = rig.fake.get("deployments", "serving", "llama-chat")
    assert dep is not None
    dep["metadata"]["annotations"][PREFIX + "mode"] = "advisory"
    rig.fake.add("deployments", dep)
    rig.fake.add("horizontalpodautoscalers", hpa("serving", "llama-cpu", "llama-chat"))

    assert rig.controller.tick(now0).ok
    assert contention_events(rig) == []
    assert rig.metric("predictive_autoscaler_workloads", {"state": "contended"}) == 0
    assert published(rig)["scaledBy"] == ["llama-cpu"]  # explain names it

    # annotated advisory after a contended tick: neither told again nor told that the HPA is gone (it is not)
    dep["metadata"]["annotations"][PREFIX + "mode"] = "scale"
    rig.fake.add("deployments", dep)
    assert rig.controller.tick(now0 + STEP).ok
    dep = rig.fake.get("deployments", "serving", "llama-chat")
    assert dep is not None
    dep["metadata"]["annotations"][PREFIX + "mode"] = "advisory"
    rig.fake.add("deployments", dep)
    assert rig.controller.tick(now0 + 2 * STEP).ok
    assert [e[1] for e in contention_events(rig)] == [EVENT_REASON_CONTENDED]


def test_a_failed_hpa_list_keeps_the_last_read_and_is_reported(rig: Rig, now0: int) -> None:
    rig.fake.add("horizontalpodautoscalers", hpa("serving", "llama-cpu", "llama-chat"))
    assert rig.controller.tick(now0).ok
    rig.fake.remove("horizontalpodautoscalers", "serving", "llama-cpu")
    rig.fake.fail("GET", r"^/apis/autoscaling/v2/horizontalpodautoscalers$", 500)

    report = rig.controller.tick(now0 + STEP)

    assert not report.ok
    (error,) = report.errors
    assert error.startswith("listing HorizontalPodAutoscalers failed (the last read holds; retried next tick):")
    assert llama_replicas(rig) == 2  # not scaled by both because a list failed
    assert rig.metric("predictive_autoscaler_errors_total", {"kind": "kube_read"}) == 1
    assert rig.controller.tick(now0 + 2 * STEP).ok  # read again: the HPA is gone
    assert llama_replicas(rig) > 2


def test_a_standby_that_takes_over_tells_only_what_the_leader_did_not(
    rig: Rig, now0: int, api_client: client.ApiClient, loop_config: Config
) -> None:
    """The standby wrote and told nothing; what the leader told is in the statuses, which it reads again when it
    takes over: no second Warning for the HPA the leader already named, and the HPA's going is told."""
    standby = Controller(KubeCluster(api_client, instance="test-controller"), rig.source, lambda: loop_config,
                         metrics=ControllerMetrics())
    assert standby.tick(now0, acting=False).ok  # first sight of the statuses: nothing told yet
    rig.fake.add("horizontalpodautoscalers", hpa("serving", "llama-cpu", "llama-chat"))
    assert rig.controller.tick(now0 + STEP).ok  # the leader names the HPA once
    assert standby.tick(now0 + STEP, acting=False).ok
    assert [e[1] for e in contention_events(rig)] == [EVENT_REASON_CONTENDED]
    assert standby.tick(now0 + 2 * STEP).ok  # the leader's lease is lost: the standby acts
    assert [e[1] for e in contention_events(rig)] == [EVENT_REASON_CONTENDED]
    rig.fake.remove("horizontalpodautoscalers", "serving", "llama-cpu")
    assert standby.tick(now0 + 3 * STEP).ok
    assert [e[1] for e in contention_events(rig)] == [EVENT_REASON_CONTENDED, EVENT_REASON_RESOLVED]


def test_a_standby_says_nothing_and_scales_nothing(rig: Rig, now0: int) -> None:
    rig.fake.add("horizontalpodautoscalers", hpa("serving", "llama-cpu", "llama-chat"))
    assert rig.controller.tick(now0, acting=False).ok
    assert contention_events(rig) == []
    assert rig.fake.writes() == []


def set_llama_replicas(rig: Rig, replicas: int) -> None:
    """Another writer (a GitOps sync, a script) sets llama-chat's replicas between two ticks."""
    dep = rig.fake.get("deployments", "serving", "llama-chat")
    assert dep is not None
    dep["spec"]["replicas"] = replicas
    rig.fake.add("deployments", dep)


def overwrite_events(rig: Rig) -> list[tuple[str, str]]:
    return [(e["type"], e["message"]) for e in rig.events("serving", "llama-chat")
            if e["reason"] == EVENT_REASON_OVERWRITTEN]


def test_replicas_another_writer_keeps_setting_back_are_counted_and_said_once(
    rig: Rig, prometheus_server: PrometheusServer
) -> None:
    now0 = prometheus_server.now - 2 * 3600  # an hour and more of ticks inside the backfilled history
    labels = {"namespace": "serving", "deployment": "llama-chat"}
    assert rig.controller.tick(now0).ok
    ours = llama_replicas(rig)
    assert ours > 2
    set_llama_replicas(rig, 2)  # a GitOps sync puts the manifest's 2 back
    assert rig.controller.tick(now0 + STEP).ok
    assert rig.metric("predictive_autoscaler_replicas_overwritten_total", labels) == 1
    assert overwrite_events(rig) == []  # once may be a person trying something
    ours = llama_replicas(rig)
    assert ours > 2  # the plan is written again, as an HPA would

    set_llama_replicas(rig, 2)
    assert rig.controller.tick(now0 + 2 * STEP).ok
    assert rig.metric("predictive_autoscaler_replicas_overwritten_total", labels) == 2
    ((kind, message),) = overwrite_events(rig)
    assert kind == "Warning"
    assert message.startswith(f"spec.replicas was set to 2 after predictive-autoscaler set it to {ours} (2 times in "
                              "the last 60 minutes)")

    set_llama_replicas(rig, 2)
    assert rig.controller.tick(now0 + 3 * STEP).ok
    assert rig.metric("predictive_autoscaler_replicas_overwritten_total", labels) == 3
    assert len(overwrite_events(rig)) == 1  # once per transition, not per overwrite
    # a quiet hour resets the latch: the next fight is said again
    for k in range(4, 4 + 62):
        assert rig.controller.tick(now0 + k * STEP).ok
    for k in (66, 67):
        set_llama_replicas(rig, 2)
        assert rig.controller.tick(now0 + k * STEP).ok
    assert len(overwrite_events(rig)) == 2


def test_a_deployment_nobody_else_writes_counts_no_overwrite(rig: Rig, now0: int) -> None:
    for k in range(4):
        assert rig.controller.tick(now0 + k * STEP).ok
    assert rig.metric("predictive_autoscaler_replicas_overwritten_total",
                      {"namespace": "serving", "deployment": "llama-chat"}) in (None, 0)
    assert overwrite_events(rig) == []
