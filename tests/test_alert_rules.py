"""The on-call alert rules in deploy/prometheusrule.yaml: promtool accepts them and they fire when they should.

The rule groups are taken out of the PrometheusRule into a plain rule file; ``promtool check rules`` lints
them and ``promtool test rules`` runs unit tests with synthetic input series (built here, so the expected
alerts sit next to the series that cause them). Every series name the rules use must be one the controller
exports (``ControllerMetrics``), so a rename cannot silently disarm an alert.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from autoscaler.adapters.alertmanager import ALERT_NAMES
from autoscaler.runtime.metrics import ControllerMetrics
from tests.conftest import require_binary

REPO = Path(__file__).resolve().parent.parent
RULE_FILE = REPO / "deploy" / "prometheusrule.yaml"

PUSHED_BY_THE_CONTROLLER = set(ALERT_NAMES)


def prometheus_rule() -> dict[str, Any]:
    doc = yaml.safe_load(RULE_FILE.read_text(encoding="utf-8"))
    assert isinstance(doc, dict)
    return doc


def all_rules() -> list[dict[str, Any]]:
    return [rule for group in prometheus_rule()["spec"]["groups"] for rule in group["rules"]]


@pytest.fixture
def rules_file(tmp_path: Path) -> Path:
    path = tmp_path / "predictive-autoscaler.rules.yml"
    path.write_text(yaml.safe_dump({"groups": prometheus_rule()["spec"]["groups"]}, sort_keys=False))
    return path


def run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=120, check=False)


# ---------------------------------------------------------------------------------------------- static


def test_prometheus_rule_object_shape() -> None:
    doc = prometheus_rule()
    assert (doc["apiVersion"], doc["kind"]) == ("monitoring.coreos.com/v1", "PrometheusRule")
    assert doc["metadata"]["namespace"] == "predictive-autoscaler"
    assert set(doc["spec"]) == {"groups"}
    names = [g["name"] for g in doc["spec"]["groups"]]
    assert len(names) == len(set(names))


def test_every_alert_has_severity_summary_and_description() -> None:
    alerts = [r for r in all_rules() if "alert" in r]
    assert {r["alert"] for r in alerts} >= PUSHED_BY_THE_CONTROLLER | {
        "PredictiveAutoscalerMetricsSourceDown",
        "PredictiveAutoscalerNotTicking",
    }
    for rule in alerts:
        assert rule["labels"]["severity"] in {"info", "warning", "critical"}, rule["alert"]
        assert set(rule["annotations"]) == {"summary", "description"}, rule["alert"]
        assert set(rule) <= {"alert", "expr", "for", "labels", "annotations"}, rule["alert"]


def exported_series_names() -> set[str]:
    names: set[str] = set()
    for family in ControllerMetrics().registry.collect():
        suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum")}.get(family.type, ("",))
        names |= {family.name + s for s in suffixes}
    return names


def test_rules_only_use_series_the_controller_exports() -> None:
    used = {name for rule in all_rules() for name in re.findall(r"predictive_autoscaler_[a-z_]+", rule["expr"])}
    assert used
    assert used <= exported_series_names(), used - exported_series_names()
    templated = {
        name
        for rule in all_rules()
        for text in rule.get("annotations", {}).values()
        for name in re.findall(r"predictive_autoscaler_[a-z_]+", text)
    }
    assert templated <= exported_series_names()


def test_the_controller_pushes_the_same_alert_names() -> None:
    """The push path and the rule path must agree on names, or on-call routing sees two different alerts."""
    assert {r.get("alert") for r in all_rules()} >= PUSHED_BY_THE_CONTROLLER
    assert sorted(PUSHED_BY_THE_CONTROLLER) == [
        "GPUCostCeilingCuttingInference", "GPUCostCeilingProjectedBreach", "GPUsUnavailable"
    ]


# ---------------------------------------------------------------------------------------------- promtool


@pytest.mark.prometheus
def test_promtool_check_rules(rules_file: Path) -> None:
    promtool = require_binary("promtool")
    done = run([promtool, "check", "rules", str(rules_file)], rules_file.parent)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(all_rules())} rules found" in done.stdout


@pytest.mark.prometheus
def test_promtool_check_catches_a_broken_rule(tmp_path: Path) -> None:
    """Control: the check above can fail."""
    promtool = require_binary("promtool")
    groups = prometheus_rule()["spec"]["groups"]
    groups[0]["rules"][0]["expr"] = "max by (team (predictive_autoscaler_projected_cost_dollars_per_hour)"
    bad = tmp_path / "bad.yml"
    bad.write_text(yaml.safe_dump({"groups": groups}))
    done = run([promtool, "check", "rules", str(bad)], tmp_path)
    assert done.returncode != 0


def series(labels: dict[str, str], values: str, name: str) -> dict[str, str]:
    inner = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return {"series": f"{name}{{{inner}}}", "values": values}


A = {"job": "predictive-autoscaler-metrics", "instance": "10.0.0.1:8080"}  # the leader
B = {"job": "predictive-autoscaler-metrics", "instance": "10.0.0.2:8080"}  # the standby

PROJECTED = "predictive_autoscaler_projected_cost_dollars_per_hour"
CEILING = "predictive_autoscaler_cost_ceiling_dollars_per_hour"
CUTS = "predictive_autoscaler_ceiling_cuts_total"
OVERWRITTEN = "predictive_autoscaler_replicas_overwritten_total"


def breach_annotations(team: str, dollars: str, ceiling: str) -> dict[str, str]:
    return {
        "summary": f"Projected GPU spend of team {team} is above its ceiling",
        "description": f"The plan needs ${dollars}/h within the forecast horizon; the team ceiling is "
        f"${ceiling}/h. Lower-priority replicas and headroom will be held back at the ceiling.",
    }


def llama_alert(summary: str, description: str) -> dict[str, Any]:
    """An expected warning about the Deployment serving/llama."""
    return {"exp_labels": {"severity": "warning", "namespace": "serving", "deployment": "llama"},
            "exp_annotations": {"summary": summary, "description": description}}


def unit_tests(rules: Path) -> dict[str, Any]:
    """Input series (one sample per minute) and the alerts expected at chosen times."""
    cost_inputs = [
        # Team ml goes over its $400/h ceiling at minute 10; both replicas export it (one alert expected).
        *(series({**r, "scope": "team", "team": "ml"}, "100x9 412.5x30", PROJECTED) for r in (A, B)),
        *(series({**r, "scope": "team", "team": "ml"}, "400x40", CEILING) for r in (A, B)),
        # The cluster stays under its ceiling; team cv has no ceiling at all (no alert, whatever it spends).
        series({**A, "scope": "cluster"}, "900x40", PROJECTED),
        series({**A, "scope": "cluster"}, "1000x40", CEILING),
        series({**A, "scope": "team", "team": "cv"}, "5000x40", PROJECTED),
        # The ceiling cuts inference at minutes 11-12, and headroom from minute 6 on.
        series({**A, "team": "ml", "kind": "inference"}, "0x10 1 2 3x30", CUTS),
        series({**A, "team": "ml", "kind": "headroom"}, "0x5 1x40", CUTS),
        # serving/llama waits for 3 GPUs from minute 6 to 25; serving/mistral only briefly.
        series({**A, "namespace": "serving", "deployment": "llama"}, "0x5 3x20 0x15",
               "predictive_autoscaler_gpus_unavailable"),
        series({**A, "namespace": "serving", "deployment": "mistral"}, "2x3 0x40",
               "predictive_autoscaler_gpus_unavailable"),
    ]
    controller_inputs = [
        series(A, "1x40", "predictive_autoscaler_is_leader"),
        series(B, "0x40", "predictive_autoscaler_is_leader"),
        # The leader loses Prometheus from minute 6 to 25; the standby never had it (it must not page).
        series(A, "1x5 0x20 1x15", "predictive_autoscaler_metrics_source_up"),
        series(B, "0x40", "predictive_autoscaler_metrics_source_up"),
        # The leader's last tick stops at t=600s (minute 10); the standby keeps ticking.
        series(A, "0+60x10 600x30", "predictive_autoscaler_last_tick_timestamp_seconds"),
        series(B, "0+60x40", "predictive_autoscaler_last_tick_timestamp_seconds"),
    ]
    ml_breach = {"exp_labels": {"severity": "warning", "scope": "team", "team": "ml"},
                 "exp_annotations": breach_annotations("ml", "412.50", "400.00")}
    llama = llama_alert(
        "serving/llama is waiting for 3 GPUs",
        "Replicas of serving/llama have been unschedulable for 10 minutes (NodePool limit, quota or no cloud "
        "capacity). The controller stops adding Pending replicas; see the Deployment's GPUsUnavailable Events.",
    )
    source_down = {
        "exp_labels": {"severity": "warning", **A},
        "exp_annotations": {
            "summary": "The predictive autoscaler cannot read its metrics source",
            "description": f"The acting controller ({A['instance']}) has not fetched demand from Prometheus for 5 "
            "minutes. It holds replicas (never scales down on missing data) and does not pre-scale.",
        },
    }
    not_ticking = {
        "exp_labels": {"severity": "critical", **A},
        "exp_annotations": {
            "summary": "The predictive autoscaler has stopped deciding",
            "description": f"The acting controller ({A['instance']}) finished no tick for over 5 minutes but still "
            "holds leadership; nothing is pre-scaled. Check its logs and restart it.",
        },
    }
    cutting = {
        "exp_labels": {"severity": "critical", "team": "ml"},
        "exp_annotations": {
            "summary": "The cost ceiling is cutting inference replicas of team ml",
            "description": "Within the last 15 minutes the ceiling withheld inference scale-ups the forecast "
            "needed; latency objectives are at risk. Raise the ceiling or stop lower-priority training.",
        },
    }
    binding = {
        "exp_labels": {"severity": "warning", "team": "ml", "kind": "headroom"},
        "exp_annotations": {
            "summary": "The cost ceiling of team ml keeps holding back headroom",
            "description": "For at least 10 minutes the ceiling has withheld headroom capacity the forecast asked "
            "for. Inference is still served; raise the ceiling if this is expected demand.",
        },
    }

    overwritten = llama_alert(
        "serving/llama: another writer keeps setting its replicas back",
        "The replicas the predictive autoscaler wrote to serving/llama were changed by someone else about 2 times in "
        "the last hour: a GitOps sync of a manifest that sets replicas (Argo CD self-heal, Flux), a script or a "
        "person. Each undone scale-up is a cold start lost. Leave replicas out of the manifest (or have the GitOps "
        "tool ignore it), or annotate the Deployment mode: advisory; see its ReplicasOverwritten Events.",
    )

    def at(minute: str, alert: str, *expected: dict[str, Any]) -> dict[str, Any]:
        return {"eval_time": minute, "alertname": alert, "exp_alerts": list(expected)}

    return {
        "rule_files": [rules.name],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": cost_inputs + controller_inputs,
                "alert_rule_test": [
                    at("9m", "GPUCostCeilingProjectedBreach"),
                    at("13m", "GPUCostCeilingProjectedBreach"),  # pending: for 5m
                    at("16m", "GPUCostCeilingProjectedBreach", ml_breach),
                    at("30m", "GPUCostCeilingProjectedBreach", ml_breach),
                    at("9m", "GPUCostCeilingCuttingInference"),
                    at("12m", "GPUCostCeilingCuttingInference", cutting),  # at once: no "for"
                    at("24m", "GPUCostCeilingCuttingInference", cutting),
                    at("30m", "GPUCostCeilingCuttingInference"),  # no cut for 15 minutes
                    at("12m", "GPUCostCeilingBinding"),
                    at("18m", "GPUCostCeilingBinding", binding),
                    at("25m", "GPUCostCeilingBinding"),
                    at("14m", "GPUsUnavailable"),
                    at("20m", "GPUsUnavailable", llama),
                    at("30m", "GPUsUnavailable"),
                    at("9m", "PredictiveAutoscalerMetricsSourceDown"),
                    at("15m", "PredictiveAutoscalerMetricsSourceDown", source_down),
                    at("30m", "PredictiveAutoscalerMetricsSourceDown"),
                    at("19m", "PredictiveAutoscalerNotTicking"),
                    at("25m", "PredictiveAutoscalerNotTicking", not_ticking),
                    at("30m", "PredictiveAutoscalerNoLeader"),
                    at("30m", "PredictiveAutoscalerAbsent"),
                ],
            },
            {
                # Both replicas standing by; then nothing at all is scraped.
                "interval": "1m",
                "input_series": [
                    series(A, "0x20", "predictive_autoscaler_is_leader"),
                    series(B, "0x20", "predictive_autoscaler_is_leader"),
                    series(A, "0+60x20", "predictive_autoscaler_last_tick_timestamp_seconds"),
                ],
                "alert_rule_test": [
                    at("3m", "PredictiveAutoscalerNoLeader"),
                    at("10m", "PredictiveAutoscalerNoLeader", {
                        "exp_labels": {"severity": "warning", "job": A["job"]},
                        "exp_annotations": {
                            "summary": "No predictive autoscaler replica is acting",
                            "description": "All controller replicas run as standby for 5 minutes (leader election "
                            "cannot renew its Lease?); nothing is pre-scaled.",
                        },
                    }),
                    at("10m", "PredictiveAutoscalerNotTicking"),  # a standby's stale tick is not paged
                    at("10m", "PredictiveAutoscalerAbsent"),
                    at("45m", "PredictiveAutoscalerAbsent", {
                        "exp_labels": {"severity": "critical"},
                        "exp_annotations": {
                            "summary": "The predictive autoscaler exports no metrics",
                            "description": "No controller replica has been scraped for 10 minutes (not running, or "
                            "not scraped); its other alerts cannot fire while it is gone.",
                        },
                    }),
                ],
            },
            {
                # serving/llama's replicas are set back at minutes 10 and 30 (a GitOps sync fighting the controller,
                # then a leader change: the new leader counts from 0); serving/mistral's once.
                "interval": "1m",
                "input_series": [
                    series({**A, "namespace": "serving", "deployment": "llama"}, "0x9 1x20 2x20 _x80", OVERWRITTEN),
                    series({**B, "namespace": "serving", "deployment": "llama"}, "_x50 0x80", OVERWRITTEN),
                    series({**A, "namespace": "serving", "deployment": "mistral"}, "0x9 1x120", OVERWRITTEN),
                ],
                "alert_rule_test": [
                    at("20m", "PredictiveAutoscalerReplicasOverwritten"),  # once is not a fight
                    at("31m", "PredictiveAutoscalerReplicasOverwritten", overwritten),
                    at("55m", "PredictiveAutoscalerReplicasOverwritten", overwritten),  # the leader changed at 50
                    at("120m", "PredictiveAutoscalerReplicasOverwritten"),  # a quiet hour
                ],
            },
        ],
    }


@pytest.mark.prometheus
def test_promtool_unit_tests(rules_file: Path) -> None:
    promtool = require_binary("promtool")
    tests = rules_file.parent / "alerts.test.yml"
    tests.write_text(yaml.safe_dump(unit_tests(rules_file), sort_keys=False))
    done = run([promtool, "test", "rules", tests.name], rules_file.parent)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


@pytest.mark.prometheus
def test_promtool_unit_tests_can_fail(rules_file: Path) -> None:
    """Control: a wrong expectation (the ceiling reported as $399) makes promtool fail."""
    promtool = require_binary("promtool")
    spec = unit_tests(rules_file)
    case = spec["tests"][0]["alert_rule_test"][2]
    assert case["alertname"] == "GPUCostCeilingProjectedBreach"
    case["exp_alerts"][0]["exp_annotations"] = breach_annotations("ml", "412.50", "399.00")
    tests = rules_file.parent / "wrong.test.yml"
    tests.write_text(yaml.safe_dump(spec, sort_keys=False))
    done = run([promtool, "test", "rules", tests.name], rules_file.parent)
    assert done.returncode != 0
    assert "GPUCostCeilingProjectedBreach" in done.stdout + done.stderr
