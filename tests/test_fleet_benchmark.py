"""The fleet benchmark's in-process fleet and its report: the parts whose mistakes would skew the figures.

A source that served different values for the same bin on two calls, ignored the namespace restriction
or gave every Deployment the same series would make the benchmark measure something other than a fleet;
a phase split that did not add up, or a capped run reported without its "extrapolated" label, would
publish wrong numbers. One real controller tick over three Deployments checks that the fake ports are
what the loop expects.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import numpy as np
import pytest

from autoscaler.config.parser import load_config
from autoscaler.config.schema import ForecastProfile, LoopConfig
from autoscaler.runtime.loop import Controller
from benchmarks.fleet import PhaseClock, SizeResult, instrument, phases, summarise
from benchmarks.fleet_fakes import STEP, RecordingCluster, SyntheticFleet, SyntheticSource

NOW = 1_767_225_600


@pytest.fixture(scope="module")
def fleet() -> SyntheticFleet:
    return SyntheticFleet(40, seed=3)


def test_same_bin_same_value_across_calls(fleet: SyntheticFleet) -> None:
    source = SyntheticSource(fleet)
    namespaces = sorted({w.namespace for w in fleet.workloads})
    long = source.fleet_history("q", namespaces, NOW - 600 * STEP, NOW, STEP)
    short = source.fleet_history("q", namespaces, NOW - 3 * STEP, NOW, STEP)
    for key, series in short.items():
        np.testing.assert_array_equal(series.values, long[key].values[-3:])
        assert series.start == NOW - 3 * STEP
    assert source.calls == 2
    assert source.bins_served == 40 * 600 + 40 * 3


def test_only_the_asked_namespaces_are_served(fleet: SyntheticFleet) -> None:
    source = SyntheticSource(fleet)
    got = source.fleet_history("q", ["team-01"], NOW - 10 * STEP, NOW, STEP)
    assert got
    assert {ns for ns, _ in got} == {"team-01"}
    assert len(got) == sum(1 for w in fleet.workloads if w.namespace == "team-01")


def test_deployments_get_different_traffic(fleet: SyntheticFleet) -> None:
    series = [fleet.values(w, NOW // STEP - 1440, 1440) for w in fleet.workloads]
    assert all(np.all(np.isfinite(s)) and np.all(s >= 0) for s in series)
    means = [float(np.mean(s)) for s in series]
    assert max(means) / min(means) > 5  # rescaled, not one trace repeated
    same_shape = [w for w in fleet.workloads if w.shape == 0]
    a, b = (fleet.values(w, NOW // STEP - 1440, 1440) for w in same_shape[:2])
    assert np.corrcoef(a, b)[0, 1] < 0.99  # phase-shifted and with its own noise


def test_source_refuses_a_grid_it_cannot_serve(fleet: SyntheticFleet) -> None:
    with pytest.raises(ValueError, match="whole 60s bins"):
        SyntheticSource(fleet).fleet_history("q", ["team-00"], NOW + 1, NOW + 61, STEP)


def test_cluster_scales_at_once_and_counts_writes(fleet: SyntheticFleet) -> None:
    seen: list[int] = []
    cluster = RecordingCluster(fleet, on_status=seen.append)
    w = fleet.workloads[0]
    assert cluster.scale(w.namespace, w.name, 5) is True
    assert cluster.scale(w.namespace, w.name, 5) is False
    view = next(v for v in cluster.list_workloads() if v.name == w.name)
    assert (view.replicas, view.ready_replicas) == (5, 5)
    first = cluster.write_status(w.namespace, w.name, view.uid, {"desiredReplicas": 5}, None)
    assert first.written
    assert not cluster.write_status(w.namespace, w.name, view.uid, {"desiredReplicas": 5}, first.stored).written
    assert cluster.list_statuses(w.namespace) == {first.stored.name: first.stored}
    assert (cluster.counts.scales, cluster.counts.statuses, seen) == (2, 2, [1, 2])


def test_phase_split_adds_up() -> None:
    clock = PhaseClock()
    clock.seconds.update(
        _parse=0.1, _report_problems=0.1, _fetch=1.0, _report_outage=0.05, _plan=4.0, _conclude=1.0, _forecast=3.0,
        _startups=0.2, _apply=0.5, _export=0.3, _replay_due=0.6, _publish=0.2,
    )
    p = phases(clock, 7.8, 0.4, 0.1)
    assert p["plan"] == pytest.approx(5.0 - 3.0 - 0.5 - 0.3)  # start-ups are counted with planning
    assert p["apply"] == pytest.approx(0.5 + 0.05 + 0.2)  # the status writes, after the replays, are applying too
    parts = p["read"] + p["fetch"] + p["forecast"] + p["plan"] + p["apply"] + p["export"] + p["tune"] + p["other"]
    assert parts == pytest.approx(7.8)


def test_a_real_tick_over_the_fake_fleet() -> None:
    """Three Deployments, one day of history: every one is forecast, planned and given a status."""
    small = SyntheticFleet(3, seed=1)
    base = load_config()
    cfg = replace(
        base,
        loop=LoopConfig(interval_seconds=30, history_seconds=86_400, step_seconds=STEP),
        profiles={"default": ForecastProfile(history_seconds=86_400)},
    )
    cluster = RecordingCluster(small)
    source = SyntheticSource(small)
    controller = Controller(cluster, source, lambda: cfg)
    clock, missing = instrument(controller)
    report = controller.tick(NOW + 15)
    assert missing == []
    assert not report.errors
    assert all(w.forecast is not None and w.decision is not None for w in report.workloads)
    assert cluster.counts.statuses == 3
    assert clock.calls["_forecast"] == 3
    assert source.queries[0][1:] == (NOW - 86_400 - STEP, NOW, STEP)  # a day to fit on and the newest ended bin
    report = controller.tick(NOW + 75)  # one new bin: a short re-fetch, not another day
    assert source.queries[-1][1] >= NOW - 3 * STEP
    assert datetime.fromtimestamp(report.now, UTC).second == 15


def test_a_capped_run_is_reported_as_extrapolated() -> None:
    records = [
        {"kind": "anchors", "fit_predict": 0.2, "update_predict": 0.002, "reactive_decision": 1e-6},
        {"kind": "ready", "t": 10.0, "rss": 100 << 20, "peak_rss": 100 << 20},
        {"kind": "progress", "statuses": 500, "t": 110.0, "rss": 900 << 20},
    ]
    text, verdicts = summarise([SizeResult(5000, records, capped=True)], None, "today")
    assert "capped: 500/5,000 planned after 100 s; whole tick ~1,000 s *extrapolated*" in text
    assert verdicts == []  # no verdict without the target size
