"""Self-tuning in the control loop: each Deployment replays its own history from the real Prometheus, runs the
cheapest operating point meeting its objective, publishes the candidates, and says when none can.

``serving/llama-chat`` has eight days of backfilled history; the loop here keeps three (the profile fits on two),
so a full replay (a day of warm-up before a day replayed) is possible for it and for no other Deployment.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from kubernetes import client

from autoscaler.adapters.kube import KubeCluster
from autoscaler.config.parser import parse_config_text
from autoscaler.config.schema import Config
from autoscaler.domain.annotations import PREFIX, STATUS_ANNOTATION
from autoscaler.domain.status import STATUS_DATA_KEY, status_object_name
from autoscaler.runtime.loop import Controller
from autoscaler.runtime.metrics import ControllerMetrics
from autoscaler.runtime.replay_pool import ReplayPool
from autoscaler.runtime.state import Replay
from autoscaler.simulation.tuning import TuneJob, Tuning
from tests.kube.conftest import stored_status
from tests.kube.fakeapi import FakeKubeAPI
from tests.runtime.conftest import RecordingTransport, Rig, make_source
from tests.servers import PrometheusServer

pytestmark = pytest.mark.prometheus

CONFIG = """\
loop:
  interval: 30s
  history: 3d
  step: 1m
profiles:
  default:
    history: 2d
    horizon: 15m
    tune_quantiles: [80, 95, 99]
    tune_utilisations: [0.8]
prometheus:
  url: {url}
  retries: 0
  timeout: 20s
"""


def _config(url: str, extra: str = "") -> Config:
    return parse_config_text(CONFIG.format(url=url) + extra, "tuning-config.yaml")


@pytest.fixture
def tuning_rig(fleet: FakeKubeAPI, api_client: client.ApiClient, prometheus_server: PrometheusServer) -> Iterator[Rig]:
    transport = RecordingTransport()
    source = make_source(prometheus_server.url, transport)
    metrics = ControllerMetrics()
    cfg = _config(prometheus_server.url)
    controller = Controller(KubeCluster(api_client, instance="test-controller"), source, lambda: cfg, metrics=metrics)
    controller.fit_budget_seconds = 120.0  # the shared test machine: never let the budgets decide these tests
    controller.tune_budget_seconds = 120.0
    yield Rig(controller, fleet, transport, source, metrics)
    source.close()


def _status(fake: FakeKubeAPI, namespace: str, name: str) -> dict[str, Any]:
    return stored_status(fake, namespace, name)


def _annotate(fake: FakeKubeAPI, namespace: str, name: str, **annotations: str) -> None:
    dep = fake.get("deployments", namespace, name)
    assert dep is not None
    dep["metadata"]["annotations"].update({PREFIX + k.replace("_", "-"): v for k, v in annotations.items()})
    fake.add("deployments", dep)


def test_a_deployment_with_enough_history_runs_its_tuned_point_and_shows_the_candidates(
    tuning_rig: Rig, prometheus_server: PrometheusServer,
) -> None:
    rig = tuning_rig
    now = prometheus_server.now - 1800
    rig.controller.tick(now)  # first tick: models are fitted first, tuning follows once a model exists
    rig.controller.tick(now + 30)
    status = _status(rig.fake, "serving", "llama-chat")
    tuning = status["tuning"]
    assert tuning is not None
    points = [(c["warm_pool_quantile"], c["reactive_utilisation"]) for c in tuning["candidates"]]
    assert (tuning["chosen"], tuning["chosen_utilisation"]) in points
    # each quantile, the lowest with a margin, and the HPA's own points (the forecast adding only the lead)
    assert [p for p in points if p[0] != 50] == [(80, 1.0), (80, 0.8), (95, 1.0), (99, 1.0)]
    assert sorted(u for q, u in points if q == 50) == [0.5, 0.6, 0.7, 0.8, 0.9]
    assert (tuning["slo_wait_seconds"], tuning["slo_attainment"]) == (2.0, 0.99)  # the profile's defaults
    by_point = {p: c for p, c in zip(points, tuning["candidates"], strict=True)}
    gpu_hours = [by_point[q, 1.0]["gpu_hours"] for q in (80, 95, 99)]
    assert gpu_hours == sorted(gpu_hours)  # more spare, more GPU-hours
    assert by_point[80, 0.8]["gpu_hours"] >= by_point[80, 1.0]["gpu_hours"]  # and a margin over demand too
    # the forecast is asked for the chosen band, and the chosen point is exported
    assert f"p{tuning['chosen']}" in status["forecast"]["bands"]
    labels = {"namespace": "serving", "deployment": "llama-chat"}
    assert rig.metric("predictive_autoscaler_slo_tuned_quantile", labels) == tuning["chosen"]
    assert rig.metric("predictive_autoscaler_slo_tuned_utilisation", labels) == tuning["chosen_utilisation"]
    assert rig.metric("predictive_autoscaler_slo_tuning_met", labels) == (1.0 if tuning["met"] else 0.0)
    # the record: the newest day, on which the start point ran (the HPA at 0.7 started early), and the whole day
    # before it, which the history held and the first tuning replayed at once (what ran on it is not known; what the
    # rule would have run there, the start point with nothing before it, is assumed)
    backfilled, day = tuning["days"]
    assert backfilled["ran"] is None
    assert backfilled["assumed"] == [50, 0.7]
    assert day["ran"] == [50, 0.7]
    assert "assumed" not in day
    assert "1 earlier day(s) of the history replayed at once" in tuning["reason"]
    # against the HPA's own points both days count (the self-check reads the rule's record, the assumed day too):
    # what ran is the start point's replay on both
    record: dict[float, tuple[float, float, float]] = {}
    for d in (backfilled, day):
        for q, u, day_gpu_hours, attained, _wait, _dropped, requests in d["points"]:
            if q == 50:
                g, late, n = record.get(u, (0.0, 0.0, 0.0))
                record[u] = (g + day_gpu_hours, late + requests * (1 - attained), n + requests)
    assert sorted(record) == [0.5, 0.6, 0.7, 0.8, 0.9]
    for u, (record_gpu_hours, late, n) in record.items():
        point = {**labels, "point": f"hpa@{u:g}+lead"}
        assert rig.metric("predictive_autoscaler_slo_record_gpu_hours", point) == pytest.approx(record_gpu_hours,
                                                                                                 abs=2e-3)
        assert rig.metric("predictive_autoscaler_slo_record_attainment", point) == pytest.approx(1 - late / n, abs=1e-6)
    ran = {**labels, "point": "ran"}
    assert rig.metric("predictive_autoscaler_slo_record_gpu_hours", ran) == pytest.approx(record[0.7][0], abs=2e-3)
    assert rig.metric("predictive_autoscaler_slo_record_attainment", ran) == pytest.approx(
        1 - record[0.7][1] / record[0.7][2], abs=1e-6)
    # beaten when one of the others had no more GPU-hours and no more late requests than the start point, one fewer
    ours = record[0.7]
    beaten = any(g <= ours[0] and late <= ours[1] and (g < ours[0] - 1e-6 or late < ours[1] - 1e-6)
                 for u, (g, late, _n) in record.items() if u != 0.7)
    assert rig.metric("predictive_autoscaler_slo_beaten_by_hpa", labels) == (1.0 if beaten else 0.0)
    rig.metrics.forget("serving", "llama-chat")  # as when it leaves the controller's care: no stale record series
    assert [s.name for f in rig.metrics.registry.collect() for s in f.samples
            if "slo_record" in s.name or "beaten_by_hpa" in s.name] == []
    # the others have one day of history or less: nothing replayed, they say why and run the tuner's start point (the
    # HPA's own point: the median band only)
    short_status = _status(rig.fake, "serving", "mistral-code")
    short = short_status["tuning"]
    assert short["chosen"] is None
    assert "not enough history to tune" in short["reason"]
    assert set(short_status["forecast"]["bands"]) == {"p50"}
    # a later tick within the day does not replay again
    at = tuning["at"]
    rig.controller.tick(now + 60)
    assert _status(rig.fake, "serving", "llama-chat")["tuning"]["at"] == at


def test_an_objective_no_point_meets_runs_the_safest_with_one_warning_and_recovers(
    tuning_rig: Rig, prometheus_server: PrometheusServer,
) -> None:
    rig = tuning_rig
    now = prometheus_server.now - 1800
    # llama-chat carries ~2.5 req/s; two replicas of 0.4 req/s can never serve it: no point meets any objective
    _annotate(rig.fake, "serving", "llama-chat", max_replicas="2")
    # one tick (a ``run --once`` process): its replay runs last, and what it found is published before the tick ends
    rig.controller.tick(now)
    tuning = _status(rig.fake, "serving", "llama-chat")["tuning"]
    assert tuning["met"] is False
    best = max(tuning["candidates"], key=lambda c: (c["slo_attainment"], -c["gpu_hours"]))
    assert (tuning["chosen"], tuning["chosen_utilisation"]) == (best["warm_pool_quantile"],
                                                                 best["reactive_utilisation"])
    warnings = [e for e in rig.events("serving", "llama-chat") if e["reason"] == "SLOUnreachable"]
    assert len(warnings) == 1
    assert warnings[0]["type"] == "Warning"
    assert "no operating point meets 99% within 2s" in warnings[0]["message"]
    labels = {"namespace": "serving", "deployment": "llama-chat"}
    assert rig.metric("predictive_autoscaler_slo_tuning_met", labels) == 0.0
    rig.controller.tick(now + 60)
    assert len([e for e in rig.events("serving", "llama-chat") if e["reason"] == "SLOUnreachable"]) == 1
    # the team raises max-replicas and states a looser objective: re-tuned at once, met, and an Event says so
    _annotate(rig.fake, "serving", "llama-chat", max_replicas="20", slo_wait="5s", slo_attainment="95%")
    rig.controller.tick(now + 90)
    tuning = _status(rig.fake, "serving", "llama-chat")["tuning"]
    assert tuning["met"] is True
    assert (tuning["slo_wait_seconds"], tuning["slo_attainment"]) == (5.0, 0.95)
    assert [e["type"] for e in rig.events("serving", "llama-chat") if e["reason"] == "SLOReachable"] == ["Normal"]
    assert rig.metric("predictive_autoscaler_slo_tuning_met", labels) == 1.0


def test_self_tune_false_or_a_fixed_warm_pool_keeps_the_profile_as_it_is(
    fleet: FakeKubeAPI, api_client: client.ApiClient, prometheus_server: PrometheusServer,
) -> None:
    source = make_source(prometheus_server.url)
    cfg = parse_config_text(CONFIG.format(url=prometheus_server.url).replace(
        "    tune_quantiles: [80, 95, 99]\n", "    self_tune: false\n"), "pinned.yaml")
    controller = Controller(KubeCluster(api_client, instance="test-controller"), source, lambda: cfg)
    now = prometheus_server.now - 1800
    controller.tick(now)
    controller.tick(now + 30)
    status = _status(fleet, "serving", "llama-chat")
    assert status["tuning"] is None
    assert set(status["forecast"]["bands"]) == {"p50", "p90", "p95"}  # the profile's quantile and warm pool band
    source.close()


def test_replays_wait_for_what_the_fits_leave_and_apply_from_the_next_tick(
    tuning_rig: Rig, prometheus_server: PrometheusServer,
) -> None:
    rig = tuning_rig
    now = prometheus_server.now - 1800
    rig.controller.fit_budget_seconds = 0.0  # no time left after (deferred) fits: no model, and no replay
    rig.controller.tick(now)
    rig.controller.tick(now + 30)
    assert _status(rig.fake, "serving", "llama-chat")["tuning"] is None  # due, not run: the profile's point runs
    assert rig.metric("predictive_autoscaler_slo_tuned_quantile", {"namespace": "serving",
                                                                   "deployment": "llama-chat"}) is None
    rig.controller.fit_budget_seconds = 120.0
    rig.controller.tick(now + 60)  # fitted first, then the replay runs once this tick's plans are written ...
    status = _status(rig.fake, "serving", "llama-chat")
    assert status["tuning"]["chosen"] is not None  # its status written again at once
    rig.controller.tick(now + 90)  # ... and the chosen point decides from the next one (its band is forecast)
    status = _status(rig.fake, "serving", "llama-chat")
    assert f"p{status['tuning']['chosen']}" in status["forecast"]["bands"]


def test_a_tick_writes_its_scale_ups_before_it_runs_a_replay(
    tuning_rig: Rig, prometheus_server: PrometheusServer,
) -> None:
    """A replay takes seconds (a first one, with its week of history, several): it runs once the tick's plans are
    written, so it never holds a scale-up back."""
    rig = tuning_rig
    now = prometheus_server.now - 1800
    scales_seen: list[int] = []

    class Watched(ReplayPool[tuple[Replay, Tuning | None]]):
        def run(self, jobs: Sequence[TuneJob]) -> list[Tuning | Exception]:
            scales_seen.append(len(rig.fake.calls("PATCH", r"/deployments/llama-chat/scale$")))
            return super().run(jobs)

    rig.controller.replay_pool = Watched()
    rig.controller.tick(now)
    assert rig.fake.calls("PATCH", r"/deployments/llama-chat/scale$")  # the first tick scales it up ...
    assert scales_seen[:1] == [1]  # ... and its first replay ran after that write


def test_a_bug_in_running_the_replays_is_reported_and_the_statuses_are_still_written(
    tuning_rig: Rig, prometheus_server: PrometheusServer,
) -> None:
    rig = tuning_rig

    class Broken(ReplayPool[tuple[Replay, Tuning | None]]):
        def run(self, jobs: Sequence[TuneJob]) -> list[Tuning | Exception]:
            raise RuntimeError("a bug")

    rig.controller.replay_pool = Broken()
    report = rig.controller.tick(prometheus_server.now - 1800)
    assert "self-tuning replays not run this tick (RuntimeError: a bug)" in report.errors
    assert rig.metric("predictive_autoscaler_errors_total", {"kind": "tuning"}) == 1
    assert all("status written" in w.actions for w in report.workloads)  # the tick's own work is all there
    assert _status(rig.fake, "serving", "llama-chat")["tuning"] is None


def test_a_tight_tuning_budget_runs_one_replay_a_tick_and_the_rest_later(
    tuning_rig: Rig, prometheus_server: PrometheusServer,
) -> None:
    rig = tuning_rig
    now = prometheus_server.now - 1800
    rig.controller.tune_budget_seconds = 1e-6  # shorter than any replay: one starts per tick, no second one
    # mistral-code holds four GPUs, llama-chat two (more once the first tick scales it), qwen-eval one
    dep = rig.fake.get("deployments", "serving", "mistral-code")
    assert dep is not None
    dep["spec"]["replicas"] = dep["status"]["replicas"] = dep["status"]["readyReplicas"] = 4
    rig.fake.add("deployments", dep)
    names = [("serving", "mistral-code"), ("serving", "llama-chat"), ("research", "qwen-eval")]

    def tuned() -> list[str]:
        return [name for ns, name in names if _status(rig.fake, ns, name)["tuning"] is not None]

    for i in range(3):
        rig.controller.tick(now + 30 * i)
        # the dearest first: a large fleet's first tunings take hours, and how far behind they are is exported
        assert tuned() == [name for _, name in names[:i + 1]]
        assert rig.metric("predictive_autoscaler_tuning_replays_waiting", {}) == 2 - i
    assert rig.metric("predictive_autoscaler_tuning_replays_in_workers", {}) == 0


def test_replay_workers_run_the_replays_in_the_background(
    fleet: FakeKubeAPI, api_client: client.ApiClient, prometheus_server: PrometheusServer,
) -> None:
    cfg = parse_config_text(CONFIG.format(url=prometheus_server.url).replace("  step: 1m\n",
                                                                             "  step: 1m\n  replay_workers: 2\n"),
                            "tuning-config.yaml")
    source = make_source(prometheus_server.url)
    metrics = ControllerMetrics()
    controller = Controller(KubeCluster(api_client, instance="test-controller"), source, lambda: cfg, metrics=metrics)
    controller.fit_budget_seconds = 120.0
    now = prometheus_server.now - 1800
    names = [("serving", "llama-chat"), ("serving", "mistral-code"), ("research", "qwen-eval")]

    def tuned() -> int:
        return sum(_status(fleet, ns, name)["tuning"] is not None for ns, name in names)

    try:
        report = controller.tick(now)
        assert report.ok, report.errors
        # two workers, no replay back yet to time them by: one each (the dearest first), and the tick went on
        assert len(controller.replay_pool.running()) == 2
        assert ("serving", "llama-chat") in controller.replay_pool.running()
        assert tuned() == 0
        assert metrics.registry.get_sample_value("predictive_autoscaler_tuning_replays_in_workers") == 2
        assert metrics.registry.get_sample_value("predictive_autoscaler_tuning_replays_waiting") == 1
        # the ticks go on while they run; each takes back what finished and hands the third to an idle worker
        t, waited = now, time.monotonic() + 180
        while tuned() < 3 and time.monotonic() < waited:
            time.sleep(0.5)
            t += 30
            assert controller.tick(t).ok
        assert tuned() == 3
        status = _status(fleet, "serving", "llama-chat")["tuning"]
        assert status["chosen"] is not None
        assert status["candidates"]
    finally:
        controller.close()
        source.close()
    assert controller.replay_pool.started == 0  # the workers stop with the controller


def test_a_restarted_controller_continues_the_pooled_days_and_the_choice_from_the_status(
    tuning_rig: Rig, api_client: client.ApiClient, prometheus_server: PrometheusServer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    rig = tuning_rig
    now = prometheus_server.now - 1800
    yesterday = now - 86_400
    rig.controller.tick(yesterday)
    rig.controller.tick(yesterday + 30)
    before = _status(rig.fake, "serving", "llama-chat")["tuning"]
    assert before["chosen"] is not None
    assert [d["ran"] is None for d in before["days"]] == [True, False]  # the day before replayed from the history

    def restart() -> Rig:  # a new process (an upgrade, a new leader): nothing in memory but what the status holds
        metrics = ControllerMetrics()
        cfg = _config(prometheus_server.url)
        controller = Controller(KubeCluster(api_client, instance="test-controller"), rig.source, lambda: cfg,
                                metrics=metrics)
        controller.fit_budget_seconds = 120.0
        return Rig(controller, rig.fake, rig.transport, rig.source, metrics)

    again = restart()
    again.controller.tick(now)
    # from its first tick the plan runs the choice it found (the replay due that tick applies from the next decision)
    labels = {"namespace": "serving", "deployment": "llama-chat"}
    assert f"p{before['chosen']}" in _status(rig.fake, "serving", "llama-chat")["forecast"]["bands"]
    again.controller.tick(now + 30)
    after = _status(rig.fake, "serving", "llama-chat")["tuning"]
    # the replay due on that first tick (after its plans) chose again, on both days: exported, and in the status
    assert again.metric("predictive_autoscaler_slo_tuned_quantile", labels) == after["chosen"]
    # today's replay is pooled with yesterday's record, as if the controller had never stopped (nothing replayed twice)
    assert [d["end"] for d in after["days"]] == [*(d["end"] for d in before["days"]), after["at"]]
    assert after["days"][:2] == before["days"]
    assert after["days_pooled"] == 3

    # a status spoiled by hand is logged and tuning starts over from the history: its newest day and the one before
    cm = rig.fake.get("configmaps", "serving", status_object_name("llama-chat"))
    assert cm is not None
    spoiled = json.loads(cm["data"][STATUS_DATA_KEY])
    spoiled["tuning"]["days"] = "lost"
    cm["data"][STATUS_DATA_KEY] = json.dumps(spoiled)
    rig.fake.add("configmaps", cm)
    third = restart()
    with caplog.at_level("WARNING"):
        third.controller.tick(now + 60)
        third.controller.tick(now + 90)
    assert "serving/llama-chat: the self-tuning state in the status cannot be read" in caplog.text
    assert _status(rig.fake, "serving", "llama-chat")["tuning"]["days_pooled"] == 2


def test_a_standby_replays_nothing_and_takes_over_the_leaders_record(
    tuning_rig: Rig, api_client: client.ApiClient, prometheus_server: PrometheusServer,
) -> None:
    """The leader tunes; a standby, which writes nothing, would only spend the same CPU again: it replays nothing,
    and when it takes over it continues the record the leader's status holds."""
    rig = tuning_rig
    now = prometheus_server.now - 1800
    cfg = _config(prometheus_server.url)
    metrics = ControllerMetrics()
    standby = Controller(KubeCluster(api_client, instance="test-controller"), rig.source, lambda: cfg,
                         metrics=metrics)
    standby.fit_budget_seconds = standby.tune_budget_seconds = 120.0
    for t in (now, now + 30):
        standby.tick(t, acting=False)  # first, so its first sight of the statuses finds none
        rig.controller.tick(t)
    led = _status(rig.fake, "serving", "llama-chat")["tuning"]
    assert led["chosen"] is not None
    labels = {"namespace": "serving", "deployment": "llama-chat"}
    assert metrics.registry.get_sample_value("predictive_autoscaler_slo_tuned_quantile", labels) is None
    assert standby.tick(now + 60).ok  # the leader is gone: the standby acts, on the leader's choice
    assert metrics.registry.get_sample_value("predictive_autoscaler_slo_tuned_quantile", labels) == led["chosen"]
    status = _status(rig.fake, "serving", "llama-chat")
    assert status["tuning"]["days"] == led["days"]  # the leader's record, not one of its own
    assert f"p{led['chosen']}" in status["forecast"]["bands"]


def test_an_upgrade_resumes_from_the_annotation_an_older_version_left_and_moves_it(
    tuning_rig: Rig, api_client: client.ApiClient, prometheus_server: PrometheusServer,
) -> None:
    """What an older version left on the Deployment (the status annotation, no status object) is resumed from, copied
    to the status object, and then removed from the Deployment in one merge patch: its ReplicaSets' copy of the
    Deployment's annotations stops changing."""
    rig = tuning_rig
    now = prometheus_server.now - 1800
    rig.controller.tick(now - 86_400)
    rig.controller.tick(now - 86_400 + 30)
    before = _status(rig.fake, "serving", "llama-chat")["tuning"]
    assert before["chosen"] is not None
    obj = status_object_name("llama-chat")
    cm = rig.fake.objects.pop(("configmaps", "serving", obj))
    dep = rig.fake.get("deployments", "serving", "llama-chat")
    assert dep is not None
    dep["metadata"]["annotations"][STATUS_ANNOTATION] = cm["data"][STATUS_DATA_KEY]
    rig.fake.add("deployments", dep)
    seen = len(rig.fake.requests)

    cfg = _config(prometheus_server.url)
    metrics = ControllerMetrics()
    upgraded = Controller(KubeCluster(api_client, instance="test-controller"), rig.source, lambda: cfg, metrics=metrics)
    upgraded.fit_budget_seconds = 120.0
    assert upgraded.tick(now).ok

    calls = rig.fake.requests[seen:]
    lists = [c for c in calls if c.method == "GET" and c.path.endswith("/configmaps")]
    assert sorted(c.path for c in lists) == ["/api/v1/namespaces/research/configmaps",
                                             "/api/v1/namespaces/serving/configmaps"], "one list per namespace"
    (copy, *_) = [i for i, c in enumerate(calls) if c.method == "POST" and c.body["metadata"].get("name") == obj]
    (patch,) = [(i, c) for i, c in enumerate(calls) if c.method == "PATCH" and c.path.endswith("/llama-chat")]
    assert copy < patch[0], "the status object holds the status before the annotation goes"
    assert json.loads(calls[copy].body["data"][STATUS_DATA_KEY]) == json.loads(cm["data"][STATUS_DATA_KEY])
    assert patch[1].body == {"metadata": {"annotations": {STATUS_ANNOTATION: None}}}
    assert not [c for c in calls if c.method == "PATCH" and c.path.endswith(("/mistral-code", "/qwen-eval"))]
    moved = rig.fake.get("deployments", "serving", "llama-chat")
    assert moved is not None
    assert STATUS_ANNOTATION not in moved["metadata"]["annotations"]
    labels = {"namespace": "serving", "deployment": "llama-chat"}

    assert upgraded.tick(now + 30).ok
    after = _status(rig.fake, "serving", "llama-chat")["tuning"]
    # the replay due on the first tick (after its plans) chose again on both days
    assert metrics.registry.get_sample_value("predictive_autoscaler_slo_tuned_quantile", labels) == after["chosen"]
    assert after["days_pooled"] == len(before["days"]) + 1, "yesterday's record, resumed, is pooled with today's"
    assert after["days"][:-1] == before["days"]


def test_a_new_objective_after_a_restart_is_tuned_afresh(
    tuning_rig: Rig, api_client: client.ApiClient, prometheus_server: PrometheusServer,
) -> None:
    rig = tuning_rig
    now = prometheus_server.now - 1800
    rig.controller.tick(now - 86_400)
    rig.controller.tick(now - 86_400 + 30)
    assert _status(rig.fake, "serving", "llama-chat")["tuning"]["days_pooled"] == 2  # and the day before, replayed
    _annotate(rig.fake, "serving", "llama-chat", slo_wait="5s")  # the team changed its objective meanwhile
    cfg = _config(prometheus_server.url)
    controller = Controller(KubeCluster(api_client, instance="test-controller"), rig.source, lambda: cfg)
    controller.fit_budget_seconds = 120.0
    controller.tick(now)
    controller.tick(now + 30)
    tuning = _status(rig.fake, "serving", "llama-chat")["tuning"]
    # yesterday's days were for 2 s: the new objective's record is made afresh, from the history (today's day and
    # the one before it, replayed at once)
    assert (tuning["slo_wait_seconds"], tuning["days_pooled"]) == (5.0, 2)
    assert [d["ran"] is None for d in tuning["days"]] == [True, False]



def test_running_as_an_hpa_started_early_is_said_once_and_so_is_the_return_to_the_forecast(
    tuning_rig: Rig, prometheus_server: PrometheusServer,
) -> None:
    # The backfill's own choice is said as it is; then the replay's outcome is swapped for one that chose a point of
    # the forecast's bands and for one that chose an HPA point (the tuner's choice is tested in test_tuning): what is
    # tested here is what the controller says about each, and when.
    rig = tuning_rig
    now = prometheus_server.now - 1800
    key = ("serving", "llama-chat")

    def said(reason: str) -> list[str]:
        return [e["message"] for e in rig.events(*key) if e["reason"] == reason and e["type"] == "Normal"]

    rig.controller.tick(now)
    rig.controller.tick(now + 30)
    rig.controller.tick(now + 45)
    memory = rig.controller._memory[key]
    tuned = memory.tuning
    assert tuned is not None
    ran = next(c for c in tuned.candidates if c.point == (tuned.chosen, tuned.chosen_utilisation))
    # the forecast is assumed in use from the start: only the HPA's own point is news
    assert said("ForecastAddsOnlyLead") == ([tuned.reason] if ran.lead_only else [])
    assert said("ForecastInUse") == []

    band = next(c for c in tuned.candidates if not c.lead_only)
    in_use = dataclasses.replace(tuned, chosen=band.warm_pool_quantile, chosen_utilisation=band.reactive_utilisation,
                                 reason=f"warm_pool_quantile {band.warm_pool_quantile}: cheapest meeting the objective")
    hpa = next(c for c in tuned.candidates if c.lead_only and c.reactive_utilisation == 0.7)
    lead_only = dataclasses.replace(tuned, chosen=hpa.warm_pool_quantile, chosen_utilisation=hpa.reactive_utilisation,
                                    reason="a reactive autoscaler at 0.7 utilisation that starts early")
    rig.controller._note_tuning(key, memory, in_use)
    rig.controller.tick(now + 50)
    assert said("ForecastInUse") == ([in_use.reason] if ran.lead_only else [])  # back to the forecast, if it left
    leads, uses = len(said("ForecastAddsOnlyLead")), len(said("ForecastInUse"))

    rig.controller._note_tuning(key, memory, lead_only)
    rig.controller.tick(now + 60)
    assert said("ForecastAddsOnlyLead")[leads:] == [lead_only.reason]
    rig.controller._note_tuning(key, memory, lead_only)  # the next day chooses it again: nothing new to say
    rig.controller.tick(now + 90)
    assert len(said("ForecastAddsOnlyLead")) == leads + 1
    assert len(said("ForecastInUse")) == uses

    rig.controller._note_tuning(key, memory, in_use)  # the forecast earns its place again: said once
    rig.controller.tick(now + 120)
    rig.controller.tick(now + 150)
    assert said("ForecastInUse")[uses:] == [in_use.reason]
    assert len(said("ForecastAddsOnlyLead")) == leads + 1
