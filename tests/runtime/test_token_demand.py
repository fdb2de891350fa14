"""A Deployment sized on tokens/s (annotation ``demand-unit: tokens``), through the real loop.

The rig is the real loop against the fake API server and the real Prometheus, whose backfill gives every fake vLLM
pod ``vllm:prompt_tokens_total`` (300 per completed request) and ``vllm:generation_tokens_total`` (120 per request):
a Deployment's token demand is therefore its completion rate x (300 w_in + 120 w_out), which the loop must read,
forecast and plan on with ``capacity-per-replica`` in tokens/s.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from autoscaler.config.schema import Config
from autoscaler.domain.annotations import PREFIX
from autoscaler.domain.demand import TokenWeights
from autoscaler.runtime.loop import TickReport
from autoscaler.runtime.state import WorkloadOutcome
from tests.kube.conftest import stored_status
from tests.runtime.conftest import Rig, make_source
from tests.servers import PrometheusServer, free_port

pytestmark = pytest.mark.prometheus

STEP = 60
PROMPT, GENERATED = 300, 120  # tokens per completed request in the backfill (tests/servers.py)


@pytest.fixture
def now0(prometheus_server: PrometheusServer) -> int:
    return prometheus_server.now - 1800


def annotate(rig: Rig, namespace: str, name: str, **annotations: str) -> None:
    dep = rig.fake.get("deployments", namespace, name)
    assert dep is not None
    dep["metadata"]["annotations"].update({PREFIX + k.replace("_", "-"): v for k, v in annotations.items()})
    rig.fake.add("deployments", dep)


def outcome(report: TickReport, name: str) -> WorkloadOutcome:
    (found,) = [w for w in report.workloads if w.name == name]
    return found


def published(rig: Rig, namespace: str, name: str) -> dict[str, Any]:
    return stored_status(rig.fake, namespace, name)


def token_queries(rig: Rig) -> list[dict[str, str]]:
    return [q for q in rig.transport.range_queries() if "tokens_total" in q["query"]]


def use_weights(rig: Rig, config: Config, weights: TokenWeights) -> None:
    profile = replace(config.profiles["default"], token_weights=weights)
    changed = replace(config, profiles={**config.profiles, "default": profile})
    rig.controller._config = lambda: changed


def test_a_tokens_deployment_is_read_and_planned_on_weighted_tokens(
    rig: Rig, prometheus_server: PrometheusServer, loop_config: Config, now0: int
) -> None:
    # mistral-code carries < 1 req/s: one replica of 5 req/s holds it. On tokens, one replica serves 100 tokens/s,
    # so the same traffic (x 300 prompt + 120 generated tokens per request) needs several.
    annotate(rig, "serving", "mistral-code", demand_unit="tokens", capacity_per_replica="100")
    use_weights(rig, loop_config, TokenWeights(1.0, 0.5))
    report = rig.controller.tick(now0)
    assert report.ok, report.errors

    # One fleet query per token series, over the namespace of the tokens Deployment only, next to the arrival query.
    queries = token_queries(rig)
    assert len(queries) == 2
    assert any("vllm:prompt_tokens_total" in q["query"] for q in queries)
    assert any("vllm:generation_tokens_total" in q["query"] for q in queries)
    assert all('namespace=~"serving"' in q["query"] for q in queries)
    assert len(rig.transport.range_queries()) == 3

    # The history is the weighted token rate the backfill wrote, bin by bin.
    seen = rig.controller._memory[("serving", "mistral-code")].history
    assert seen is not None
    backfill = prometheus_server.backfill
    first = (seen.start - backfill.start) // STEP
    expected = backfill.completion_rate("serving", "mistral-code")[first : first + len(seen)] * (PROMPT + GENERATED / 2)
    np.testing.assert_array_equal(np.isnan(seen.values), np.isnan(expected))
    assert np.isfinite(seen.values).sum() > 60
    np.testing.assert_allclose(seen.values[np.isfinite(seen.values)], expected[np.isfinite(expected)], rtol=1e-6)

    mistral = outcome(report, "mistral-code")
    assert mistral.decision is not None
    demand = float(seen.values[-1])
    assert mistral.decision.desired_replicas >= math.ceil(demand / 100) > 1
    status = published(rig, "serving", "mistral-code")
    assert status["demandUnit"] == "tokens"
    assert status["tokenWeights"] == {"input": 1.0, "output": 0.5}
    assert status["capacity"]["perReplica"] == 100
    assert status["capacity"]["unit"] == "tokens/s"
    assert status["track"][-1]["actual"] == pytest.approx(demand)
    # The other Deployments stay on requests: qwen-eval (same capacity annotation, 5) still holds one replica.
    assert published(rig, "research", "qwen-eval")["demandUnit"] == "requests"
    assert outcome(report, "qwen-eval").decision.desired_replicas == 1  # type: ignore[union-attr]
    # On /metrics the same gauge names, told apart by the unit series
    unit = "predictive_autoscaler_demand_unit_info"
    assert rig.metric(unit, {"namespace": "serving", "deployment": "mistral-code", "unit": "tokens"}) == 1
    assert rig.metric(unit, {"namespace": "serving", "deployment": "mistral-code", "unit": "requests"}) is None
    assert rig.metric(unit, {"namespace": "research", "deployment": "qwen-eval", "unit": "requests"}) == 1

    # The next tick reads the newest bins of each series, once each.
    rig.controller.tick(now0 + STEP)
    assert len(token_queries(rig)) == 4
    assert int(token_queries(rig)[-1]["start"]) > now0 - 10 * STEP

    # Back on requests: the tokens series is replaced, not left beside it.
    annotate(rig, "serving", "mistral-code", demand_unit="requests")
    rig.controller.tick(now0 + 2 * STEP)
    assert rig.metric(unit, {"namespace": "serving", "deployment": "mistral-code", "unit": "tokens"}) is None
    assert rig.metric(unit, {"namespace": "serving", "deployment": "mistral-code", "unit": "requests"}) == 1


def test_the_same_traffic_needs_more_replicas_with_more_token_weight(
    rig: Rig, loop_config: Config, now0: int
) -> None:
    annotate(rig, "serving", "mistral-code", demand_unit="tokens", capacity_per_replica="100")
    use_weights(rig, loop_config, TokenWeights(0.0, 1.0))  # generated tokens alone: 120 per request
    light = outcome(rig.controller.tick(now0), "mistral-code").decision
    assert light is not None
    light_history = rig.controller._memory[("serving", "mistral-code")].history
    assert light_history is not None
    use_weights(rig, loop_config, TokenWeights(1.0, 1.0))  # 420 per request: the history is read afresh
    heavy = outcome(rig.controller.tick(now0), "mistral-code").decision
    assert heavy is not None
    heavy_history = rig.controller._memory[("serving", "mistral-code")].history
    assert heavy_history is not None
    ok = np.isfinite(light_history.values) & np.isfinite(heavy_history.values)
    np.testing.assert_allclose(heavy_history.values[ok], light_history.values[ok] * 420 / 120, rtol=1e-6)
    assert heavy.desired_replicas > light.desired_replicas


def test_no_token_query_when_no_deployment_is_on_tokens(rig: Rig, now0: int) -> None:
    assert rig.controller.tick(now0).ok
    assert token_queries(rig) == []
    assert len(rig.transport.range_queries()) == 1


def test_a_tokens_deployment_without_a_capacity_number_is_held_and_told(rig: Rig, now0: int) -> None:
    # Capacity is learned in requests/s only: even a controller that learns capacities never plans tokens on it.
    rig.controller.learn_capacity = True
    annotate(rig, "serving", "llama-chat", demand_unit="tokens", capacity_per_replica="auto")
    report = rig.controller.tick(now0)
    llama = outcome(report, "llama-chat")
    assert llama.decision is not None
    assert llama.decision.desired_replicas == llama.current_replicas == 2
    (step,) = [s for s in llama.decision.steps if s.name == "capacity_unknown"]
    assert "sized on tokens" in step.detail
    assert "tokens/s one replica serves" in step.detail
    assert rig.fake.calls("PATCH", r"/deployments/llama-chat/scale$") == []
    (event,) = [e for e in rig.events(name="llama-chat") if e["reason"] == "CapacityNotLearned"]
    assert event["type"] == "Warning"
    assert "demand-unit: tokens" in event["message"]
    status = published(rig, "serving", "llama-chat")
    assert status["capacity"]["perReplica"] is None
    assert "sized on tokens" in status["capacity"]["note"]
    assert rig.metric("predictive_autoscaler_capacity_unknown",
                      {"namespace": "serving", "deployment": "llama-chat"}) == 1
    # No capacity is estimated for it (a requests/s estimate would be in the wrong unit); mistral-code, on requests
    # in the same namespace, is estimated.
    assert rig.controller._memory[("serving", "llama-chat")].capacity is None
    assert rig.controller._memory[("serving", "mistral-code")].capacity is not None


def test_a_token_metrics_outage_holds_and_never_scales_down(rig: Rig, now0: int) -> None:
    annotate(rig, "serving", "mistral-code", demand_unit="tokens", capacity_per_replica="100000")
    dep = rig.fake.get("deployments", "serving", "mistral-code")
    assert dep is not None
    dep["spec"]["replicas"] = dep["status"]["replicas"] = dep["status"]["readyReplicas"] = 5
    rig.fake.add("deployments", dep)
    down = make_source(f"http://127.0.0.1:{free_port()}")
    rig.controller.source = down
    try:
        reports = [rig.controller.tick(now0 + k * STEP) for k in range(12)]
    finally:
        down.close()
    for report in reports:
        assert not report.metrics_ok
        mistral = outcome(report, "mistral-code")
        assert mistral.decision is not None
        assert mistral.decision.desired_replicas == 5
        assert mistral.decision.missing_metrics
    assert rig.fake.calls("PATCH", r"/deployments/mistral-code/scale$") == []
