"""The self-tuned default against the HPA on LLM-serving traffic without a daily cycle: never dominated.

The first target of never being worse than the HPA, on the shape where it used to fail (the HPA at 0.8 cheaper and
better than the self-tuned default): five days of the seeded synthetic LLM-serving series of
``benchmarks/backtest.py`` (10-minute bins, a wandering level, bursts three times a day, a daily collection outage),
simulated as ``benchmarks.frontier`` does (replicas sized so the peak needs 20, 120 s pod start-up, 99% of requests
within 2 s). The self-tuned run must not be dominated by any HPA target: no target may cost no more GPU-hours and
attain no less, one of them strictly. Measured (2026-11-26): 480.0 GPU-h at 98.62%, against the HPA at 0.7's 501.0 at
98.57% and 0.8's 456.6 at 98.00%. It fails with the tuner's old start (the profile's own point, p95 bands on a young
model, for the first two days): 489.5 GPU-h at 97.77%, dominated by the HPA at 0.8. Five days, so that the days the
start point runs are not the whole run.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from autoscaler.config.schema import ForecastProfile
from autoscaler.simulation.engine import SimulationConfig, simulate
from autoscaler.simulation.predictive import factory
from autoscaler.simulation.tuning import retuner
from benchmarks.backtest import synthetic_traces
from models import registry
from models.clean import prepare
from models.types import SECONDS_PER_DAY

DAYS = 5
TARGETS = (0.5, 0.6, 0.7, 0.8, 0.9)


def test_the_self_tuned_default_is_not_dominated_by_any_hpa_target_on_llm_serving_without_a_daily_cycle() -> None:
    trace = next(t for t in synthetic_traces() if t.name.startswith("synthetic: LLM serving, no daily cycle, bursts"))
    series = prepare(trace.requests)
    series = series.slice(0, DAYS * SECONDS_PER_DAY // series.step_seconds)
    assert series.step_seconds == 600
    config = SimulationConfig(capacity_per_replica=float(np.nanmax(series.values)) / 20, reactive_targets=TARGETS,
                              max_replicas=80, bin_shape="auto", policies=("reactive", "predictive"))
    config = replace(config, queue=replace(config.queue, slo_wait_seconds=2.0),
                     cluster=replace(config.cluster, pod_startup_seconds=120))
    profile = ForecastProfile()
    hook = retuner(lambda: registry.make_chain("default"), quantiles=profile.tune_quantiles,
                   utilisations=profile.tune_utilisations, slo_wait_seconds=2.0, slo_attainment=0.99,
                   warmup_seconds=profile.history_seconds)
    result = simulate(series, config, trace.name,
                      predictive=factory(lambda: registry.make_chain("default"), profile=profile, retune=hook))
    tuned = result.policies["predictive"]
    assert any("self-tuned daily" in n for n in result.notes)  # it did tune
    hpa = [r for n, r in result.policies.items() if n.startswith("reactive@")]
    assert len(hpa) == len(TARGETS)
    beaten = [(h.name, round(h.gpu_hours, 1), round(h.slo_attainment, 5)) for h in hpa
              if h.gpu_hours <= tuned.gpu_hours and h.slo_attainment >= tuned.slo_attainment
              and (h.gpu_hours < tuned.gpu_hours or h.slo_attainment > tuned.slo_attainment)]
    assert not beaten, (round(tuned.gpu_hours, 1), round(tuned.slo_attainment, 5), beaten)
