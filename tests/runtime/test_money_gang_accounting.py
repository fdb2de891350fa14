"""Gangs are counted where the plan puts them: a pending gang the ceiling defers does not count as always
running under a scheduled gang's placement, so it cannot keep a held gang from ever fitting (which made every
``run --once`` exit 1 under a binding ceiling)."""

from __future__ import annotations

from typing import Any

from autoscaler.runtime.metrics import ControllerMetrics
from autoscaler.runtime.money import MoneyStage
from tests.domain.test_money import planned
from tests.runtime.test_gang_placement_cache import KEY, NOW, H, RecordingForecasts, RecordingGangs, gang
from tests.runtime.test_money import config, kueue_workload


def pending_unscheduled(gpus: int = 16) -> dict[str, Any]:
    return kueue_workload("big-pretrain", pods=2, gpus=gpus // 2, admitted=False, pool="h100")


def test_a_deferred_pending_gang_does_not_block_a_held_scheduled_one() -> None:
    # $4/GPU-h, ceiling $100: 25 GPUs. Inference holds 12 now (production, outranks pending training), so the
    # pending 16-GPU gang is deferred (12 + 16 > 25). The scheduled 8-GPU gang's trough has 4 inference GPUs:
    # 4 + 8 fits; counting the deferred gang as running there would make it 4 + 16 + 8 = 28 > 25 everywhere.
    cfg = config("http://127.0.0.1:1", ceilings={"cluster": 100.0})
    stage = MoneyStage(training=RecordingGangs([gang(), pending_unscheduled()]))
    inference = planned("chat", replicas=12, desired=12, pool="h100", priority=100, min_replicas=4)
    errors: list[str] = []
    out = stage.run([inference], cfg, NOW, write=False, horizon_seconds=900, metrics=ControllerMetrics(),
                    errors=errors, gang_forecasts=RecordingForecasts())
    assert errors == []
    placed = out.placements[KEY]
    assert (placed.start, placed.fits, placed.peak_gpus) == (NOW + 10 * H, True, 12.0)
    assert [g.name for g in out.report.gangs_deferred] == ["big-pretrain"]
    assert out.decisions[inference.key].desired_replicas == 12
