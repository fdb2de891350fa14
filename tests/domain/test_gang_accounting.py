"""Gangs are counted where the plan puts them: ``unplaced_deferred`` says which pending gangs the ceiling
defers, and ``place_gangs`` leaves them out of the constant under a scheduled gang's placement."""

from __future__ import annotations

from autoscaler.domain.cost import Ceilings, GpuPrices, WorkloadAsk
from autoscaler.domain.gangs import Gang, place_gangs
from autoscaler.domain.money import unplaced_deferred

H = 3600
NOW = 1_700_000_000


def test_a_pending_gang_the_ceiling_reserves_still_counts_under_the_placement() -> None:
    asks = [WorkloadAsk("serving/chat", "ml", 100, 1, 1, 4, nodepool="h100")]
    pending = Gang("Workload", "training", "big", 16, 2, False, 50, nodepool="h100")
    held = Gang("Workload", "training", "nightly", 8, 1, False, 50, nodepool="h100", start_after=NOW,
                deadline=NOW + 20 * H, duration_seconds=4 * H, held=True)
    prices = GpuPrices(default=4.0)
    assert unplaced_deferred(asks, [pending, held], Ceilings(cluster=100.0), prices, NOW, 900) == frozenset()
    assert unplaced_deferred(asks, [pending, held], Ceilings(cluster=70.0), prices, NOW, 900) == {pending.key}
    assert unplaced_deferred(asks, [pending, held], Ceilings(), prices, NOW, 900) == frozenset()
    # nothing to place: nothing to leave out
    assert unplaced_deferred(asks, [pending], Ceilings(cluster=70.0), prices, NOW, 900) == frozenset()
    forecast: dict[str | None, list[tuple[int, float]]] = {"h100": [(NOW, 4.0)]}
    counted = place_gangs([pending, held], forecast, {"h100": 25.0}, NOW)[held.key]
    assert (counted.peak_gpus, counted.fits) == (28.0, False)
    absent = place_gangs([pending, held], forecast, {"h100": 25.0}, NOW, absent={pending.key})[held.key]
    assert (absent.peak_gpus, absent.fits) == (12.0, True)


def test_gpu_counts_print_rounded() -> None:
    from autoscaler.domain.gangs import format_gpus, place_gang

    assert [format_gpus(x) for x in (18.0004, 17.96, 12.25, 8.0, float("inf"))] == ["18", "18", "12.2", "8",
                                                                                      "unlimited"]
    gang = Gang("Workload", "training", "ft", 8, 1, False, 50, start_after=NOW, deadline=NOW, duration_seconds=H)
    placed = place_gang(gang, [(NOW, 10.0004)], 16.00001, NOW, NOW)
    assert "lowest peak 18 GPU(s); EXCEEDS capacity 16 at every start" in placed.detail
