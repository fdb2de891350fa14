"""The money stage's own logic, without servers: the alert lifecycle (through a recording ``AlertSink``, a fake
of our own port), pricing and cutting without ports, and the adapters swapped on a config reload. The pure
decisions it calls are tested in tests/domain/test_money.py."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

import pytest

from autoscaler.config.parser import parse_config
from autoscaler.config.schema import Config
from autoscaler.domain.money import CUTTING_INFERENCE, GPUS_UNAVAILABLE, PROJECTED_BREACH, PlannedWorkload
from autoscaler.ports import Alert
from autoscaler.runtime.metrics import ControllerMetrics
from autoscaler.runtime.money import MoneyStage
from tests.domain.test_money import NOW, planned

# ---------------------------------------------------------------------------------------------- alerts


class RecordingSink:
    """An ``AlertSink`` that records what it was asked to send; ``fail`` makes the next calls raise."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, list[Alert], datetime]] = []
        self.fail = 0

    def _record(self, what: str, alerts: Sequence[Alert], now: datetime) -> None:
        if self.fail:
            self.fail -= 1
            raise ConnectionError("alertmanager down")
        self.sent.append((what, list(alerts), now))

    def fire(self, alerts: Sequence[Alert], now: datetime) -> None:
        self._record("fire", alerts, now)

    def resolve(self, alerts: Sequence[Alert], now: datetime) -> None:
        self._record("resolve", alerts, now)


def cfg(team_ceiling: float) -> Config:
    return parse_config({"ceilings": {"teams": {"ml": team_ceiling}}, "pricing": {"default_gpu_hour": 1.0}})


def run(stage: MoneyStage, plans: list[PlannedWorkload], config: Config, now: int, metrics: ControllerMetrics,
        *, write: bool = True) -> list[str]:
    errors: list[str] = []
    stage.run(plans, config, now, write=write, horizon_seconds=900, metrics=metrics, errors=errors)
    return errors


def test_alerts_fire_while_the_condition_holds_keep_their_start_and_resolve_when_it_clears() -> None:
    sink = RecordingSink()
    stage = MoneyStage(alerts=sink)
    metrics = ControllerMetrics()
    plans = [planned("a", replicas=4, desired=4, unschedulable=1)]
    assert run(stage, plans, cfg(2.0), NOW, metrics) == []
    ((what, alerts, at),) = sink.sent
    assert what == "fire"
    assert {a.name for a in alerts} == {PROJECTED_BREACH, CUTTING_INFERENCE, GPUS_UNAVAILABLE}
    began = at
    assert run(stage, plans, cfg(2.0), NOW + 30, metrics) == []
    assert all(a.starts_at == began for a in sink.sent[-1][1])  # re-sent with the original start

    # A standby sends nothing and forgets nothing.
    assert run(stage, plans, cfg(100.0), NOW + 60, metrics, write=False) == []
    assert len(sink.sent) == 2

    # The ceiling is raised: the cost alerts are resolved, the GPU one keeps firing.
    sink.fail = 1  # the fire fails; the resolve still goes out and is not lost
    errors = run(stage, plans, cfg(100.0), NOW + 90, metrics)
    assert errors == ["alerts not delivered (re-sent next tick): alertmanager down"]
    assert metrics.registry.get_sample_value("predictive_autoscaler_errors_total", {"kind": "alert"}) == 1
    what, resolved, at = sink.sent[-1]
    assert what == "resolve"
    assert {a.name for a in resolved} == {PROJECTED_BREACH, CUTTING_INFERENCE}
    assert at == began + timedelta(seconds=90)

    # Everything clears, but Alertmanager is down: the resolve is retried on the next tick.
    clear = [planned("a", replicas=4, desired=4)]
    sink.fail = 1
    assert run(stage, clear, cfg(100.0), NOW + 120, metrics) == [
        "alert resolutions not delivered (retried next tick): alertmanager down"]
    assert run(stage, clear, cfg(100.0), NOW + 150, metrics) == []
    what, resolved, _ = sink.sent[-1]
    assert (what, [a.name for a in resolved]) == ("resolve", [GPUS_UNAVAILABLE])
    assert run(stage, clear, cfg(100.0), NOW + 180, metrics) == []
    assert sink.sent[-1][0] == "resolve"  # nothing new was sent after the retry
    assert len(sink.sent) == 4


@pytest.mark.parametrize("write", [True, False])
def test_without_ports_the_stage_only_prices_and_cuts(write: bool) -> None:
    stage = MoneyStage()
    metrics = ControllerMetrics()
    plans = [planned("a", replicas=2, desired=5, priority=100), planned("b", replicas=2, desired=5)]
    errors: list[str] = []
    out = stage.run(plans, cfg(6.0), NOW, write=write, horizon_seconds=900, metrics=metrics, errors=errors)
    assert errors == []
    assert {k: d.desired_replicas for k, d in out.decisions.items()} == {"serving/a": 5, "serving/b": 1}
    assert out.decisions["serving/b"].steps[-1].name == "cost_ceiling"
    assert out.headroom == {}
    assert out.limits == {}
    assert out.actions == ()
    sample = metrics.registry.get_sample_value
    assert sample("predictive_autoscaler_projected_cost_dollars_per_hour", {"scope": "team", "team": "ml"}) == 10
    assert sample("predictive_autoscaler_ceiling_cuts_total", {"team": "ml", "kind": "inference"}) == 4


def test_a_config_reload_swaps_only_the_adapters_whose_section_changed() -> None:
    from kubernetes import client

    from autoscaler.adapters.alertmanager import AlertmanagerSink
    from autoscaler.adapters.karpenter import KarpenterCapacity
    from autoscaler.commands.run import _rewire

    api = client.ApiClient(client.Configuration())
    old = parse_config({})
    capacity = KarpenterCapacity(api, namespace="predictive-autoscaler")
    stage = MoneyStage(capacity=capacity)
    new = parse_config({"alerts": {"alertmanager_url": "http://am.monitoring:9093", "cluster": "eu"}})
    _rewire(stage, api, old, new)
    assert isinstance(stage.alerts, AlertmanagerSink)
    assert (stage.alerts.url, stage.alerts.cluster) == ("http://am.monitoring:9093", "eu")
    assert stage.capacity is capacity  # karpenter section unchanged: same adapter (and discovery cache)
    newer = parse_config({"karpenter": {"enabled": False}})
    _rewire(stage, api, new, newer)
    ports: tuple[object, object] = (stage.alerts, stage.capacity)
    assert ports == (None, None)
