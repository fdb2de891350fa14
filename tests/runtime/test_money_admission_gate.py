"""Kueue's admission gate as the hold of a scheduled gang: a Workload whose
``kueue.x-k8s.io/admission-gated-by`` names ``predictive-autoscaler.io/gang-scheduler`` is counted, placed and started
exactly like one created with ``spec.active: false``; at its planned start the controller removes its own name from
the gate (other controllers' names stay) instead of touching ``spec.active``."""

from __future__ import annotations

from typing import Any

from autoscaler.domain.annotations import PREFIX
from autoscaler.domain.gangs import ACTIVATED_ANNOTATION, ADMISSION_GATE, ADMISSION_GATED_BY, parse_gang
from autoscaler.runtime.metrics import ControllerMetrics
from autoscaler.runtime.money import MoneyOutcome, MoneyStage
from tests.runtime.test_gang_placement_cache import KEY, NOW, H, RecordingForecasts, RecordingGangs, gang
from tests.runtime.test_money import config


def gated(gates: str, *, active: bool | None = None, start_after: bool = True) -> dict[str, Any]:
    obj = gang()
    obj["metadata"]["annotations"][ADMISSION_GATED_BY] = gates
    if not start_after:
        for key in ("start-after", "deadline", "duration"):
            del obj["metadata"]["annotations"][PREFIX + key]
    if active is not None:
        obj["spec"]["active"] = active
    return obj


def tick(stage: MoneyStage, now: int) -> MoneyOutcome:
    errors: list[str] = []
    out = stage.run([], config("http://127.0.0.1:1"), now, write=True, horizon_seconds=900,
                    metrics=ControllerMetrics(), errors=errors, gang_forecasts=RecordingForecasts())
    assert errors == []
    return out


def test_a_gated_workload_is_held_like_an_inactive_one() -> None:
    g = parse_gang(gated(f"example.com/other, {ADMISSION_GATE}"))
    assert (g.held, g.gated, g.gates, g.inactive, g.deactivated) == (
        True, True, ("example.com/other", ADMISSION_GATE), False, False)
    assert not parse_gang(gated("example.com/other")).held  # someone else's gate: not ours to hold or release
    assert parse_gang(gated(ADMISSION_GATE, active=False)).held  # both holds at once
    assert not parse_gang(gated(ADMISSION_GATE, start_after=False)).held  # no window: nothing to place it in


def test_at_its_planned_start_the_controller_removes_only_its_own_name_from_the_gate() -> None:
    port = RecordingGangs([gated(f"example.com/other,{ADMISSION_GATE}")])
    stage = MoneyStage(training=port)
    first = tick(stage, NOW)
    placed = first.placements[KEY]
    assert placed.start == NOW + 10 * H  # placed in the trough like a spec.active: false gang
    assert first.to_dict()["gang_placements"][KEY]["held"] is True
    assert [p[3]["metadata"]["annotations"].keys() for p in port.patches] == [{PREFIX + "planned-start"}]
    port.objects[0]["metadata"]["annotations"][PREFIX + "planned-start"] = str(placed.start)
    tick(stage, placed.start - 60)
    assert len(port.patches) == 1  # still held a minute before
    out = tick(stage, placed.start)
    (_, _, name, patch) = port.patches[-1]
    assert name == "nightly"
    assert "spec" not in patch  # spec.active is left alone
    annotations = patch["metadata"]["annotations"]
    assert annotations[ADMISSION_GATED_BY] == "example.com/other"
    assert ACTIVATED_ANNOTATION in annotations
    assert any(a.startswith(f"{KEY} activated at its planned start") for a in out.actions)


def test_the_last_name_removes_the_annotation_and_both_holds_are_released_together() -> None:
    port = RecordingGangs([gated(ADMISSION_GATE, active=False)])
    stage = MoneyStage(training=port)
    start = tick(stage, NOW).placements[KEY].start
    tick(stage, start)
    patch = port.patches[-1][3]
    assert patch["metadata"]["annotations"][ADMISSION_GATED_BY] is None  # merge patch: the key is removed
    assert patch["spec"] == {"active": True}


def test_a_gated_workload_without_a_window_is_released_at_once() -> None:
    port = RecordingGangs([gated(ADMISSION_GATE, start_after=False)])
    out = tick(MoneyStage(training=port), NOW)
    (_, _, _, patch) = port.patches[-1]
    assert patch["metadata"]["annotations"][ADMISSION_GATED_BY] is None
    assert any("released at once" in a for a in out.actions)
