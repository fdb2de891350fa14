"""``predictive-autoscaler explain``: the pure ``render`` on a status dict, and the command against the
recording fake API server after a real tick (fake API server + real Prometheus): it reads the Deployment's status
object (a ConfigMap), or the annotation an older controller wrote when there is none."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from autoscaler.cli import main
from autoscaler.commands.explain import render as render_status
from autoscaler.domain.annotations import ENABLED_LABEL, PREFIX, STATUS_ANNOTATION
from autoscaler.domain.status import STATUS_DATA_KEY, DeploymentStatus, status_object_name
from autoscaler.simulation.tuning import LEAD_ONLY_QUANTILE, Candidate, Day, Tuning, pool
from tests.kube.conftest import stored_status
from tests.kube.fake_rbac import ADMIN
from tests.kube.fakeapi import ADMIN_TOKEN, CONTROLLER_TOKEN, FakeKubeAPI
from tests.runtime import conftest as runtime
from tests.servers import PrometheusServer

# Fixtures shared with tests/runtime (assigned, not imported, so ruff sees them as used).
fake_api = runtime.fake_api
api_client = runtime.api_client
fleet = runtime.fleet
loop_config = runtime.loop_config
rig = runtime.rig

T0 = 1_700_000_100  # 2023-11-14T22:15:00Z


def hhmm(t: int) -> str:
    return datetime.fromtimestamp(t, tz=UTC).strftime("%H:%M")


def status_dict() -> dict[str, Any]:
    # Seven track points 5 minutes apart; each forecast is made for 15 minutes later (three points on).
    track = [
        {"t": T0 + 300 * k, "actual": 1.0 + k, "at": T0 + 300 * k + 900, "mean": 10.0 + k, "upper": 20.0 + k}
        for k in range(7)
    ]
    return {
        "mode": "scale",
        "time": "2023-11-14T22:45:00+00:00",
        "desiredReplicas": 7,
        "currentReplicas": 2,
        "readyReplicas": 2,
        "leadSeconds": 420.0,
        "warmPool": {"replicas": 1, "as": "replicas"},
        "forecast": {"model": "default", "fallbacks": [], "at": T0 + 2700, "horizon_seconds": 900, "mean": 2.1,
                     "bands": {"p50": 2.1, "p90": 2.5, "p99": 2.8}},
        "steps": [
            {"name": "lead_time", "replicas": 2, "detail": "lead 420s"},
            {"name": "forecast", "replicas": 7, "detail": "p90 demand 2.5 req/s / 0.4 req/s per replica -> 7"},
        ],
        "track": track,
    }


def test_render_shows_the_decision_the_steps_and_forecast_against_actual() -> None:
    status = status_dict()
    lines = render("serving", "llama-chat", status, ["predictive-autoscaler.io/team='x y': not a valid team name"])

    assert lines[0] == "serving/llama-chat  mode=scale  as of 2023-11-14T22:45:00+00:00"
    assert lines[1] == "replicas: desired 7, current 2, ready 2; lead time 420.0s; warm pool 1 (replicas)"
    assert lines[2] == f"forecast (default) for {hhmm(T0 + 2700)} UTC: mean 2.1 req/s; p50 2.1, p90 2.5, p99 2.8"
    assert lines[3] == "why:"
    assert lines[4].split() == ["1.", "lead_time", "->", "2", "lead", "420s"]
    assert lines[5].split()[:4] == ["2.", "forecast", "->", "7"]
    assert lines[5].endswith(status["steps"][1]["detail"])
    assert lines[6] == "problem: predictive-autoscaler.io/team='x y': not a valid team name"
    assert lines[7] == "forecast vs actual (req/s, UTC):"
    rows = [line.split() for line in lines[9:]]
    assert len(rows) == 7
    for k, row in enumerate(rows):
        assert row[0] == hhmm(T0 + 300 * k)
        assert float(row[1]) == 1.0 + k
        if k < 3:  # nothing was forecast for the first three points (the track starts at T0)
            assert row[2:] == ["-", "-"]
        else:  # the forecast made three points earlier, for this time
            assert (float(row[2]), float(row[3])) == (10.0 + k - 3, 20.0 + k - 3)


def test_render_without_a_forecast_says_replicas_are_held() -> None:
    status = {**status_dict(), "forecast": None, "track": [{"t": T0, "actual": None}]}
    lines = render("serving", "llama-chat", status, [])
    assert "forecast: none (metrics missing: replicas are held, never scaled down blindly)" in lines
    assert lines[-1].split() == [hhmm(T0), "-", "-", "-"]


def test_render_tolerates_a_status_from_another_version() -> None:
    lines = render("a", "b", {"steps": [{"detail": "no name"}], "track": [{"actual": 3}, "junk"]}, [])
    assert lines[0] == "a/b  mode=None  as of ?"
    assert lines[4].split() == ["1.", "None", "->", "None", "no", "name"]
    assert "forecast vs actual (req/s, UTC):" not in lines



def render(namespace: str, name: str, status: dict[str, Any], problems: list[str]) -> list[str]:
    """``explain``'s lines for a published status as the JSON holds it (read as explain reads it)."""
    return render_status(namespace, name, DeploymentStatus.from_dict(status), problems)


@pytest.fixture
def kubeconfig(tmp_path: Path, fleet: FakeKubeAPI) -> str:
    """A person's kubeconfig (explain is not run as the controller): the admin, who reads Deployments and ConfigMaps
    as the ``view`` role does."""
    path = runtime.write_kubeconfig(tmp_path / "kubeconfig", fleet.url)
    path.write_text(path.read_text().replace(CONTROLLER_TOKEN, ADMIN_TOKEN), encoding="utf-8")
    return str(path)



@pytest.fixture
def no_configmaps_kubeconfig(tmp_path: Path, fleet: FakeKubeAPI) -> str:
    """Someone who may read Deployments but no ConfigMap (the controller's own ServiceAccount is such a one)."""
    return str(runtime.write_kubeconfig(tmp_path / "sa-kubeconfig", fleet.url))


@pytest.mark.prometheus
def test_explain_after_a_tick_prints_what_the_controller_published(
    rig: runtime.Rig, prometheus_server: PrometheusServer, kubeconfig: str, capsys: pytest.CaptureFixture[str]
) -> None:
    now = prometheus_server.now - 1800
    report = rig.controller.tick(now)
    assert report.ok
    (llama,) = [w for w in report.workloads if w.name == "llama-chat"]
    assert llama.decision is not None

    assert main(["explain", "serving/llama-chat", "--kubeconfig", kubeconfig]) == 0
    lines = capsys.readouterr().out.splitlines()

    assert lines[0].startswith("serving/llama-chat  mode=scale  as of 2023-")
    assert lines[1].startswith(f"replicas: desired {llama.decision.desired_replicas}, current 2,")
    assert lines[2].startswith(f"forecast (default) for {hhmm(now + 900)} UTC: mean ")
    why = lines.index("why:")
    steps = lines[why + 1 : why + 1 + len(llama.decision.steps)]
    for i, (line, step) in enumerate(zip(steps, llama.decision.steps, strict=True), 1):
        assert line.split()[:4] == [f"{i}.", step.name, "->", str(step.replicas)]
        assert line.endswith(step.detail)
    assert lines[-1].split()[0] == hhmm(now)  # the track's one point so far
    # Reading it took one GET of that Deployment and one of its status object: no list.
    reads = [c.path for c in rig.fake.calls("GET") if c.user == ADMIN.name]
    assert reads == ["/apis/apps/v1/namespaces/serving/deployments/llama-chat",
                     f"/api/v1/namespaces/serving/configmaps/{status_object_name('llama-chat')}"]

    assert main(["explain", "serving/llama-chat", "--kubeconfig", kubeconfig, "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == stored_status(rig.fake, "serving", "llama-chat")
    # --deployment, as backtest, simulate and export take it, is the same Deployment
    assert main(["explain", "--deployment", "serving/llama-chat", "--kubeconfig", kubeconfig, "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == stored_status(rig.fake, "serving", "llama-chat")


def _status_object(
    fake: FakeKubeAPI, namespace: str, name: str, status: dict[str, Any], uid: str | None = None,
) -> None:
    dep = fake.get("deployments", namespace, name)
    assert dep is not None
    fake.add("configmaps", {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": status_object_name(name), "namespace": namespace,
                     "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": name,
                                          "uid": uid or dep["metadata"]["uid"]}]},
        "data": {STATUS_DATA_KEY: json.dumps(status)},
    })


def _annotate_status(fake: FakeKubeAPI, namespace: str, name: str, status: dict[str, Any]) -> None:
    dep = fake.get("deployments", namespace, name)
    assert dep is not None
    dep["metadata"]["annotations"][STATUS_ANNOTATION] = json.dumps(status)
    fake.add("deployments", dep)


def test_explain_reads_the_status_object_before_an_older_annotation(
    fleet: FakeKubeAPI, kubeconfig: str, capsys: pytest.CaptureFixture[str]
) -> None:
    _annotate_status(fleet, "serving", "llama-chat", {**status_dict(), "time": "2023-11-14T20:00:00+00:00"})
    _status_object(fleet, "serving", "llama-chat", status_dict())
    assert main(["explain", "serving/llama-chat", "--kubeconfig", kubeconfig]) == 0
    assert capsys.readouterr().out.splitlines()[0] == "serving/llama-chat  mode=scale  as of 2023-11-14T22:45:00+00:00"


def test_explain_shows_what_the_controller_resumes_from_a_newer_annotation_than_the_object(
    fleet: FakeKubeAPI, kubeconfig: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Mid-upgrade (or after a rollback wrote the annotation again): the newer status wins, as the controller's."""
    _status_object(fleet, "serving", "llama-chat", {**status_dict(), "time": "2023-11-14T20:00:00+00:00"})
    _annotate_status(fleet, "serving", "llama-chat", status_dict())
    assert main(["explain", "serving/llama-chat", "--kubeconfig", kubeconfig]) == 0
    assert capsys.readouterr().out.splitlines()[0] == "serving/llama-chat  mode=scale  as of 2023-11-14T22:45:00+00:00"


def test_explain_falls_back_to_the_annotation_an_older_controller_wrote(
    fleet: FakeKubeAPI, kubeconfig: str, capsys: pytest.CaptureFixture[str]
) -> None:
    _annotate_status(fleet, "serving", "llama-chat", status_dict())
    assert main(["explain", "serving/llama-chat", "--kubeconfig", kubeconfig, "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == status_dict()


def test_explain_ignores_the_status_object_of_an_earlier_deployment_of_that_name(
    fleet: FakeKubeAPI, kubeconfig: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Deleted and created again before the garbage collector removed the old one's status object."""
    _status_object(fleet, "serving", "llama-chat", status_dict(), uid="0b1d-earlier")
    assert main(["explain", "serving/llama-chat", "--kubeconfig", kubeconfig]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "serving/llama-chat: the controller has not published a decision yet"]


def test_explain_without_read_access_to_configmaps_says_which_grant_it_needs(
    fleet: FakeKubeAPI, no_configmaps_kubeconfig: str, capsys: pytest.CaptureFixture[str]
) -> None:
    fleet.expect_refusals()  # the 403s are the point
    _status_object(fleet, "serving", "llama-chat", status_dict())
    assert main(["explain", "serving/llama-chat", "--kubeconfig", no_configmaps_kubeconfig]) == 2
    obj = status_object_name("llama-chat")
    assert capsys.readouterr().err == (
        f"predictive-autoscaler explain: error: reading configmap serving/{obj} failed: HTTP 403 Forbidden: "
        "explain needs get on configmaps in namespace serving, where the controller keeps the status\n")
    # a Deployment an older controller annotated is still explained from the annotation
    _annotate_status(fleet, "serving", "llama-chat", status_dict())
    assert main(["explain", "serving/llama-chat", "--kubeconfig", no_configmaps_kubeconfig, "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == status_dict()


def test_explain_before_the_first_decision(
    fleet: FakeKubeAPI, kubeconfig: str, capsys: pytest.CaptureFixture[str]
) -> None:
    dep = fleet.get("deployments", "research", "qwen-eval")
    assert dep is not None
    dep["metadata"]["annotations"][PREFIX + "mode"] = "turbo"
    fleet.add("deployments", dep)
    assert main(["explain", "research/qwen-eval", "--kubeconfig", kubeconfig]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "research/qwen-eval: the controller has not published a decision yet",
        f"problem: {PREFIX}mode='turbo': unknown mode (expected 'scale' or 'advisory')",
    ]


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("serving/nope", "deployment serving/nope not found"),
        ("serving/opted-out", f'serving/opted-out is not an opted-in Deployment (label {ENABLED_LABEL}="true")'),
        ("llama-chat", "expected NAMESPACE/DEPLOYMENT, got 'llama-chat'"),
        ("", "which Deployment? give NAMESPACE/NAME (or --deployment NAMESPACE/NAME)"),
        ("serving/a --deployment serving/b",
         "two Deployments given ('serving/a' and --deployment 'serving/b'); give one"),
    ],
    ids=["unknown", "not-opted-in", "no-namespace", "none", "two"],
)
def test_explain_errors_are_one_line_with_exit_2(
    fleet: FakeKubeAPI, kubeconfig: str, target: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    fleet.add("deployments", runtime.deployment("serving", "opted-out", enabled=False))
    assert main(["explain", *target.split(), "--kubeconfig", kubeconfig]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == f"predictive-autoscaler explain: error: {message}\n"


def test_render_shows_the_self_tuned_point_its_candidates_and_the_objective() -> None:
    status = {
        "mode": "scale", "desiredReplicas": 4, "steps": [],
        "tuning": {
            "chosen": 95, "met": True, "slo_wait_seconds": 2.0, "slo_attainment": 0.99, "at": 1_700_000_000,
            "reason": "warm_pool_quantile 95: cheapest of 3 meeting 99% within 2s on the last 24 h",
            "candidates": [
                {"warm_pool_quantile": 80, "gpu_hours": 70.0, "slo_attainment": 0.981, "wait_p99_seconds": 4.2},
                {"warm_pool_quantile": 95, "gpu_hours": 82.5, "slo_attainment": 0.9951, "wait_p99_seconds": 0.0},
                {"warm_pool_quantile": 99, "gpu_hours": 99.0, "slo_attainment": 1.0, "wait_p99_seconds": 0.0},
                {"warm_pool_quantile": 80, "reactive_utilisation": 0.85, "gpu_hours": 90.0, "slo_attainment": 0.999,
                 "wait_p99_seconds": 0.0},
            ],
            "days_pooled": 3,
        },
    }
    lines = render("ns", "llm", status, [])
    text = "\n".join(lines)
    assert "self-tuning (objective: 99% of requests start within 2s; replayed up to 22:13 UTC): warm_pool_quantile 95" \
        in text
    (chosen,) = [line for line in lines if "<- chosen" in line]
    assert chosen.split()[:4] == ["95", "1.0", "82.50", "99.51%"]
    assert any(line.split()[:4] == ["80", "1.0", "70.00", "98.10%"] for line in lines)  # older statuses: 1.0
    assert any(line.split()[:4] == ["80", "0.85", "90.00", "99.90%"] for line in lines)
    assert "(pooled over 3 replayed day(s))" in text
    # no tuning (self_tune off, or a status from an older controller): nothing about it
    assert not any("self-tuning" in line for line in render("ns", "llm", {"mode": "scale"}, []))
    # nothing replayed yet: why, and what runs meanwhile (the tuner's start point)
    young = {"mode": "scale", "steps": [], "tuning": {
        "chosen": None, "met": False, "slo_wait_seconds": 2.0, "slo_attainment": 0.99, "at": 1_700_000_000,
        "reason": "not enough history to tune: 5.0 h observed, needs 48 h", "candidates": []}}
    text = "\n".join(render("ns", "llm", young, []))
    assert "not enough history to tune: 5.0 h observed, needs 48 h" in text
    assert "runs the tuner's start point: a reactive autoscaler at 0.7 utilisation that starts early" in text


def test_render_shows_the_capacity_planned_with_and_the_learned_evidence() -> None:
    learned = {"estimate": 2.98, "reason": "2.98 req/s per replica from 15.8 h saturated in 6 episode(s)",
               "saturated_bins": 949, "usable_bins": 2879, "step_seconds": 60, "episodes": 6,
               "signals": {"waiting": 943, "kv_cache": 916, "ttft": 943}, "confidence": 0.92,
               "at": "2023-11-16T00:00:00+00:00"}
    lines = render("ns", "llm", {"capacity": {"perReplica": 2.98, "source": "learned", "learned": learned}}, [])
    assert "capacity: 2.98 req/s per replica (learned)" in lines
    assert ("  learned (2023-11-16T00:00:00+00:00): 2.98 req/s per replica from 15.8 h saturated in 6 "
            "episode(s)") in lines
    assert ("  evidence: 949 saturated bins of 2879 (60s each) in 6 episode(s), by signal waiting 943, kv_cache 916, "
            "ttft 943; confidence 0.92") in lines
    held = {"perReplica": None, "source": None, "learned": None,
            "note": "capacity not learned yet: not enough evidence: the replicas were never saturated"}
    lines = render("ns", "llm", {"capacity": held}, [])
    assert ("capacity not learned yet: not enough evidence: the replicas were never saturated (replicas held, never "
            "scaled on a guess)") in lines
    assert not any(line.startswith("capacity") for line in render("ns", "llm", {"mode": "scale"}, []))


def test_render_says_the_demand_unit_of_a_tokens_deployment() -> None:
    status = {
        "mode": "scale", "demandUnit": "tokens", "tokenWeights": {"input": 1.0, "output": 0.5},
        "forecast": {"model": "default", "at": 0, "mean": 900.0, "bands": {"p90": 1200.0}},
        "capacity": {"perReplica": 400, "source": "annotation", "unit": "tokens/s"},
        "track": [{"t": 0, "actual": 880.0}],
    }
    text = "\n".join(render("ns", "llm", status, []))
    assert "demand in tokens/s: prompt tokens x 1.0 + generated tokens x 0.5" in text
    assert "mean 900.0 tokens/s" in text
    assert "capacity: 400 tokens/s per replica (annotation)" in text
    assert "forecast vs actual (tokens/s, UTC)" in text
    plain = "\n".join(render("ns", "llm", {**status, "demandUnit": "requests"}, []))
    assert "tokens" not in plain
    assert "capacity: 400 req/s per replica" in plain


def test_render_shows_the_last_scale_down_and_why_the_marks_did_not_choose_its_pods() -> None:
    marked = {**status_dict(), "scaleDown": {
        "at": "2023-11-14T22:40:00+00:00", "from": 4, "to": 2, "unmarked": None, "note": None,
        "marked": [{"pod": "llama-chat-5b7c-aaaaa", "cost": -2, "why": "not Ready"},
                   {"pod": "llama-chat-5b7c-bbbbb", "cost": -1, "why": "0 in flight"}]}}
    lines = render("serving", "llama-chat", marked, [])
    assert "last scale-down: 4 -> 2 at 2023-11-14T22:40:00+00:00" in lines
    assert ("  marked for removal: llama-chat-5b7c-aaaaa (-2: not Ready), llama-chat-5b7c-bbbbb (-1: 0 in flight)"
            in lines)
    foreign = {**status_dict(), "scaleDown": {
        "at": "2023-11-14T22:40:00+00:00", "from": 4, "to": 2, "marked": [], "unmarked": "foreign_cost",
        "note": "1 pod(s) carry a controller.kubernetes.io/pod-deletion-cost the controller did not set"}}
    lines = render("serving", "llama-chat", foreign, [])
    assert ("  the marks did not choose the pods removed (foreign_cost): 1 pod(s) carry a "
            "controller.kubernetes.io/pod-deletion-cost the controller did not set") in lines
    assert lines[-1].split()[0] == hhmm(T0 + 1800), "the track stays last"
    assert not any(line.startswith("last scale-down") for line in render("serving", "llama-chat", status_dict(), []))


def test_explain_says_when_the_controller_runs_as_the_hpa_started_early() -> None:
    status: dict[str, Any] = {
        "mode": "scale", "desiredReplicas": 4, "steps": [],
        "tuning": {
            "chosen": 50, "chosen_utilisation": 0.7, "met": True, "slo_wait_seconds": 2.0, "slo_attainment": 0.99,
            "at": 1_700_000_000, "reason": "a reactive autoscaler at 0.7 utilisation that starts early (...)",
            "candidates": [
                {"warm_pool_quantile": 90, "gpu_hours": 90.0, "slo_attainment": 0.995, "wait_p99_seconds": 0.0},
                {"warm_pool_quantile": 50, "reactive_utilisation": 0.7, "gpu_hours": 80.0, "slo_attainment": 0.996,
                 "wait_p99_seconds": 0.0},
            ],
        },
    }
    text = "\n".join(render("ns", "llm", status, []))
    assert "running as a reactive autoscaler at 0.7 utilisation that starts early" in text
    assert "the forecast adds only the lead" in text
    status["tuning"]["chosen"], status["tuning"]["chosen_utilisation"] = 90, 1.0
    assert "running as a reactive autoscaler" not in "\n".join(render("ns", "llm", status, []))


def test_explain_shows_what_ran_over_the_record_against_each_hpa_point() -> None:
    def day(end: int, ran: tuple[int, float], band: float, cheap: float) -> Day:
        """1000 requests: p90 at 12 GPU-h (``band`` on time), the HPA at 0.9 started early at 10 (``cheap``)."""
        return Day(end, (Candidate(90, 12.0, band, 0.0, 0.0, 1000.0),
                         Candidate(LEAD_ONLY_QUANTILE, 10.0, cheap, 0.0, 0.0, 1000.0, 0.9)), ran)

    record = (day(86_400, (90, 1.0), 0.99, 0.995), day(172_800, (90, 1.0), 0.99, 0.995))
    tuning = Tuning(LEAD_ONLY_QUANTILE, True, pool([d.candidates for d in record]), 2.0, 0.99, 0.9925, 86_400,
                    172_800, "self-check: ...", days=record, chosen_utilisation=0.9, beaten=True)
    lines = render("ns", "llm", {"mode": "scale", "steps": [], "tuning": tuning.to_dict()}, [])
    assert "   over the record's 2 replayed day(s): what ran 24.0 GPU-h, 99.00% on time; the HPA's own points " \
           "(started early) on the same days:" in lines
    (hpa,) = [line for line in lines if "hpa@0.9+lead" in line]
    assert hpa.split() == ["hpa@0.9+lead", "20.0", "GPU-h", "(-17%)", "99.50%", "<-", "did", "better", "than",
                           "what", "ran"]
    # a day replayed before the controller ran it reads as what the rule would have run there, and says so
    taken_over = (Day(86_400, record[0].candidates, None, (90, 1.0)), record[1])
    lines = render("ns", "llm", {"mode": "scale", "steps": [],
                                 "tuning": replace(tuning, days=taken_over).to_dict()}, [])
    assert "   over the record's 2 replayed day(s) (1 of them replayed before the controller ran it: what its rule " \
           "would have run there): what ran 24.0 GPU-h, 99.00% on time; the HPA's own points (started early) on the " \
           "same days:" in lines
    # a record it cannot read (an older controller's status, a hand edit) shows nothing of it
    spoiled = {**tuning.to_dict(), "days": "?"}
    assert not any("over the record" in line for line in render("ns", "llm", {"tuning": spoiled}, []))


def test_render_says_which_hpa_also_scales_it() -> None:
    lines = render("serving", "llama-chat", {"mode": "advisory", "scaledBy": ["llama-cpu", "keda-hpa-llama"]}, [])
    assert lines[1] == ("scaled by HorizontalPodAutoscaler llama-cpu, keda-hpa-llama: the controller writes no "
                        "replicas while one does (two autoscalers undo each other's changes)")
    assert not any("HorizontalPodAutoscaler" in line for line in render("serving", "llama-chat", {"mode": "scale"}, []))
