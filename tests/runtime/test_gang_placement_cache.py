"""The money stage's placement cache, through a recording fake of the ``TrainingGangs`` port and a recording
``GangForecasts``: placements are computed only when scheduled gangs exist, reused until the gangs, a model or the
refresh period change, frozen one node start-up before the start; a gang that fits nowhere is reported once."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from autoscaler.config.schema import Config
from autoscaler.domain.annotations import PREFIX
from autoscaler.engine.money import PLACEMENT_REFRESH_SECONDS
from autoscaler.ports import CustomObjects, EventType, PriorityClasses
from autoscaler.runtime.metrics import ControllerMetrics
from autoscaler.runtime.money import MoneyOutcome, MoneyStage
from tests.runtime.test_money import config, kueue_workload

H = 3600
NOW = 1_700_000_000
NODE_STARTUP = 2 * H  # ``config``'s cold_start.node_startup
KEY = "Workload/training/nightly"


class RecordingGangs:
    """``TrainingGangs`` over a list of objects (Kueue Workloads; neither Volcano nor Kueue's queues served); records
    every patch and Event."""

    def __init__(self, objects: list[dict[str, Any]]) -> None:
        self.objects = objects
        self.patches: list[tuple[str, str, str, Mapping[str, Any]]] = []
        self.events: list[tuple[str, str, str, str, str]] = []  # kind, namespace, name, type, reason

    def list_kueue_workloads(self) -> CustomObjects:
        return CustomObjects("kueue.x-k8s.io/v1beta1", "Workload", items=tuple(self.objects))

    def list_volcano_podgroups(self) -> CustomObjects:
        return CustomObjects("scheduling.volcano.sh/v1beta1", "PodGroup", installed=False)

    def patch_gang(self, kind: str, namespace: str, name: str, patch: Mapping[str, Any]) -> None:
        self.patches.append((kind, namespace, name, patch))

    def priority_classes(self) -> PriorityClasses:
        return PriorityClasses()

    def list_kueue_queues(self) -> tuple[CustomObjects, CustomObjects]:
        return (CustomObjects("kueue.x-k8s.io/v1beta1", "LocalQueue", installed=False),
                CustomObjects("kueue.x-k8s.io/v1beta1", "ClusterQueue", installed=False))

    def post_gang_event(self, kind: str, namespace: str, name: str, uid: str, type: EventType, reason: str,
                        message: str, now: datetime) -> None:
        self.events.append((kind, namespace, name, type, reason))


class RecordingForecasts:
    """A day of inference GPUs in pool h100 (busy by day, a trough at night); counts the forecasts asked for."""

    def __init__(self) -> None:
        self.calls = 0
        self.model_version = 1

    def points(self, pool: str | None, start: int, end: int) -> Sequence[tuple[int, float]] | None:
        self.calls += 1
        return [(NOW, 20.0), (NOW + 10 * H, 4.0), (NOW + 16 * H, 20.0)] if pool == "h100" else None

    def version(self, pool: str | None) -> int:
        return self.model_version


def gang(deadline: int = NOW + 20 * H) -> dict[str, Any]:
    obj = kueue_workload("nightly", pods=1, gpus=8, admitted=False, pool="h100")
    obj["metadata"]["annotations"].update({PREFIX + "start-after": str(NOW), PREFIX + "deadline": str(deadline),
                                           PREFIX + "duration": "4h"})
    return obj


def tick(stage: MoneyStage, cfg: Config, now: int, forecasts: RecordingForecasts,
         errors: list[str] | None = None) -> MoneyOutcome:
    return stage.run([], cfg, now, write=False, horizon_seconds=900, metrics=ControllerMetrics(),
                     errors=[] if errors is None else errors, gang_forecasts=forecasts)


def test_placements_are_cached_recomputed_when_due_and_frozen_before_the_start() -> None:
    cfg = config("http://127.0.0.1:1")
    port = RecordingGangs([])
    stage = MoneyStage(training=port)
    forecasts = RecordingForecasts()
    assert tick(stage, cfg, NOW, forecasts).placements == {}
    assert forecasts.calls == 0  # no scheduled gang: no long forecast

    port.objects.append(gang())
    first = tick(stage, cfg, NOW, forecasts).placements[KEY]
    assert first.start == NOW + 10 * H  # the trough, not start-after
    assert forecasts.calls == 1
    tick(stage, cfg, NOW + 600, forecasts)
    assert forecasts.calls == 1  # cached
    tick(stage, cfg, NOW + PLACEMENT_REFRESH_SECONDS, forecasts)
    assert forecasts.calls == 2  # the refresh period
    forecasts.model_version = 2
    tick(stage, cfg, NOW + PLACEMENT_REFRESH_SECONDS + 30, forecasts)
    assert forecasts.calls == 3  # a model was refit
    port.objects[0] = gang(deadline=NOW + 19 * H)
    tick(stage, cfg, NOW + PLACEMENT_REFRESH_SECONDS + 60, forecasts)
    assert forecasts.calls == 4  # the window changed

    # One node start-up before the start it is frozen: a later forecast no longer moves it.
    frozen = tick(stage, cfg, first.start - NODE_STARTUP, forecasts).placements[KEY]
    assert frozen.frozen
    forecasts.model_version = 3
    later = tick(stage, cfg, first.start - NODE_STARTUP + PLACEMENT_REFRESH_SECONDS, forecasts).placements[KEY]
    assert (later.start, later.frozen) == (first.start, True)


def test_a_gang_that_fits_nowhere_is_placed_at_the_lowest_peak_and_reported_once() -> None:
    cfg = config("http://127.0.0.1:1", ceilings={"cluster": 40.0})  # $4/GPU-h: 10 GPUs, the trough needs 12
    stage = MoneyStage(training=RecordingGangs([gang()]))
    forecasts = RecordingForecasts()
    errors: list[str] = []
    outcome = tick(stage, cfg, NOW, forecasts, errors)
    placed = outcome.placements[KEY]
    assert (placed.start, placed.fits, placed.peak_gpus, placed.capacity_gpus) == (NOW + 10 * H, False, 12.0, 10.0)
    (error,) = errors
    assert error.startswith(f"{KEY}: no start in its window fits the 10 GPU(s) the ceiling buys in NodePool h100")
    assert outcome.to_dict()["gang_placements"][KEY]["fits"] is False
    errors.clear()
    tick(stage, cfg, NOW + PLACEMENT_REFRESH_SECONDS, forecasts, errors)
    assert errors == []  # the same placement is not reported again
