"""The fleet in the simulator: shared nodes, headroom nodes, consolidation, ceilings as billed, the fleet file's
errors, the command end to end, and the sameness of a one-Deployment fleet with ``simulate``."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import yaml

from autoscaler.cli import main
from autoscaler.config.schema import ForecastProfile
from autoscaler.simulation.cluster import EMPTIEST_NODE_FIRST, NEWEST_FIRST, Cluster, ClusterConfig, NodePool, ScaleIn
from autoscaler.simulation.engine import SimulationConfig, TickPolicy, simulate
from autoscaler.simulation.fleet import DeploymentSpec, FleetConfig, PolicyBuilder, PoolSpec, run_fleet
from autoscaler.simulation.predictive import LEGEND_NOTE, POINT_LEGEND, PredictivePolicy, factory, legend_once
from autoscaler.simulation.reactive import ReactiveHPA
from autoscaler.synth import synth_trace
from models import registry
from models.types import TrafficSeries

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "fleet.yaml"


def _pool(consolidate: int = 60, max_nodes: int | None = None) -> NodePool:
    return NodePool(gpus_per_node=8, node_startup_seconds=180, consolidate_after_seconds=consolidate,
                    tick_seconds=15, max_nodes=max_nodes)


def _cfg(gpr: int = 1, pod: int = 120) -> ClusterConfig:
    return ClusterConfig(pod_startup_seconds=pod, node_startup_seconds=180, gpus_per_replica=gpr, gpus_per_node=8)


# -- shared nodes ---------------------------------------------------------------------------------------------


def test_the_free_gpus_read_are_on_ready_nodes_less_what_this_tick_claimed() -> None:
    """What the controller reads of a named pool (``ports.PoolNodes``): a node still provisioning is no Node yet, and
    the free GPUs a Deployment's decision took this tick are not shown to the next one."""
    pool = _pool()
    pool.name = "gpu"
    Cluster(_cfg(), 3, pool).advance(0)  # one Ready node, 3 of its 8 GPUs used
    pool.provision(0, 1)  # Ready at 180 s (tick 12)
    assert pool.ready_free_gpus(0, 1) == 5
    assert pool.ready_free_gpus(0, 2) == 4  # two 2-GPU replicas fit in 5 free GPUs
    pool.claim(0, 4)
    pool.claim(0, 4)
    assert pool.ready_free_gpus(0, 1) == 0  # never below zero
    assert pool.ready_free_gpus(1, 1) == 5  # claims last one tick
    assert pool.ready_free_gpus(12, 1) == 13  # the provisioned node is Ready


def test_policies_of_a_named_pool_observe_its_free_gpus_and_a_private_pool_none() -> None:
    series = synth_trace(days=0.2, seed=3, step_seconds=60).requests
    sim = SimulationConfig(capacity_per_replica=float(np.nanmax(series.values)) / 10)
    build = factory(lambda: registry.make_chain("persistence"), profile=ForecastProfile(self_tune=False))
    named = _pool()
    named.name = "gpu"
    for pool, expect in ((named, 7), (None, None)):
        cluster = Cluster(_cfg(), 1, pool)
        cluster.advance(0)
        policy = build(series, sim, _cfg())
        assert isinstance(policy, PredictivePolicy)
        assert policy.observed(0, cluster).free_gpus == expect


def test_two_deployments_pods_share_a_node() -> None:
    pool = _pool()
    a = Cluster(_cfg(gpr=2), 2, pool)  # 4 GPUs on one node
    b = Cluster(_cfg(gpr=1), 0, pool)
    for c in (a, b):
        c.advance(0)
    b.scale_to(0, 3)  # fits on the free 4 GPUs: no node, Ready after the pod start-up alone (8 ticks)
    assert pool.node_count == 1
    assert b.free_gpus() == 1
    assert a.free_gpus() == 0  # one GPU left: no room for a 2-GPU replica
    b.advance(8)
    assert b.ready == 3
    a.advance(8)
    a.scale_to(8, 3)  # a's third replica does not fit: a node is provisioned, node + pod start-up
    assert pool.node_count == 2
    for k in (27, 28):
        a.advance(k)
    assert a.ready == 3
    assert a.pod_startups[-1] == 20


@pytest.mark.parametrize(("scale_in", "nodes_left"), [(NEWEST_FIRST, 3), (EMPTIEST_NODE_FIRST, 2)])
def test_a_scale_down_that_takes_the_emptiest_nodes_pods_lets_a_node_go(scale_in: ScaleIn, nodes_left: int) -> None:
    """Two Deployments share 8-GPU nodes and ``a`` scales 11 -> 10. Its newest replica sits on a node ``b`` fills, an
    older one alone on a third node. The ReplicaSet's own order removes the newest, and three nodes stay billed; the
    controller's marks take the pods of the emptiest nodes first (``domain.scaledown``): the lone one goes, its node
    empties and is consolidated."""
    pool = _pool(consolidate=0)
    a = Cluster(_cfg(), 8, pool, scale_in)  # node 1: 8 of a
    b = Cluster(_cfg(), 0, pool)

    def advance(k: int) -> None:
        for c in (a, b):
            c.advance(k)

    advance(0)
    a.scale_to(0, 9)  # node 2
    b.scale_to(0, 7)  # node 2, full
    a.scale_to(0, 10)  # node 3, alone
    for k in range(1, 26):
        advance(k)  # all Ready (node + pod start-up: 20 ticks)
    b.scale_to(25, 6)  # a GPU frees on node 2 ...
    a.scale_to(25, 11)  # ... and a's newest takes it (the fullest Ready node with room)
    for k in range(26, 40):
        advance(k)
    assert (a.ready, b.ready, pool.node_count) == (11, 6, 3)
    a.scale_to(40, 10)
    advance(41)
    assert pool.node_count == nodes_left
    assert a.ready == 10
    assert pool.used_gpus() == 16


def test_a_buffer_node_makes_a_scale_up_pay_only_the_pod_startup() -> None:
    pool = _pool(consolidate=0)
    c = Cluster(_cfg(), 8, pool)  # one full node
    c.advance(0)
    pool.reserve = 1
    assert pool.provision(0, 1) == 1  # an idle node, Ready at 180 s (tick 12)
    for k in range(1, 40):
        c.advance(k)
    assert pool.node_count == 2  # reserved: not consolidated although consolidateAfter is 0s
    c.scale_to(40, 12)
    for k in range(41, 49):
        c.advance(k)
    assert c.ready == 12
    assert c.pod_startups[-4:] == [8, 8, 8, 8]  # 120 s: no node start-up


def test_empty_nodes_go_after_consolidate_after_unless_reserved() -> None:
    pool = _pool(consolidate=120)  # 8 ticks
    c = Cluster(_cfg(), 12, pool)  # two nodes
    c.advance(0)
    c.scale_to(0, 8)  # the second node empties at tick 0
    for k in range(1, 8):
        c.advance(k)
        assert pool.node_count == 2
    c.advance(8)
    assert pool.node_count == 1
    c.scale_to(8, 0)
    pool.reserve = 1
    for k in range(9, 40):
        c.advance(k)
    assert pool.node_count == 1  # reserved
    pool.reserve = 0
    c.advance(40)
    assert pool.node_count == 1  # consolidateAfter starts when the reservation ends
    c.advance(48)
    assert pool.node_count == 0


def test_a_pod_that_finds_no_node_under_the_limit_waits_pending_and_holds_no_gpu() -> None:
    pool = _pool(max_nodes=1)
    a = Cluster(_cfg(), 8, pool)
    a.advance(0)
    a.scale_to(0, 9)
    assert (a.requested, a.placed, pool.node_count) == (9, 8, 1)
    a.scale_to(0, 7)  # the Pending one goes first, then a Ready one: a GPU frees
    a.scale_to(0, 8)
    assert a.placed == 8
    assert a.pod_startups == []
    for k in range(1, 9):
        a.advance(k)
    assert a.ready == 8


# -- the fleet ------------------------------------------------------------------------------------------------


def _series(seed: int, hours: float, shape: str = "bursty") -> TrafficSeries:
    return synth_trace(days=hours / 24, seed=seed, shape=shape).requests


def _hpa(target: float) -> PolicyBuilder:
    def build(i: int, d: DeploymentSpec, sim: SimulationConfig, cluster: ClusterConfig) -> TickPolicy:
        return ReactiveHPA(target, d.capacity_per_replica, cluster.tick_seconds, d.min_replicas, d.max_replicas)

    return build


def test_a_ceiling_as_billed_is_never_exceeded() -> None:
    deps = tuple(DeploymentSpec(f"d{i}", _series(i + 1, 6), "p", capacity_per_replica=0.4, team=f"t{i % 2}",
                                max_replicas=60, min_replicas=0, priority=100 - i) for i in range(3))
    price = 10.0
    ceiling = 55.0  # five nodes and a half: the HPAs ask for more at peaks
    config = FleetConfig(deps, (PoolSpec("p", 8, price, consolidate_after_seconds=60),), cluster_ceiling=ceiling,
                         team_ceilings={"t1": 30.0})
    run = run_fleet(config, _hpa(0.5), "reactive@0.5")
    nodes = run.nodes["p"]
    assert nodes.max() * price <= ceiling
    assert nodes.max() == 5  # the ceiling binds
    assert run.ceiling_breaches == 0
    assert float(run.team_usd["t1"].max()) <= 30.0 + 1e-9
    assert run.cost_usd == pytest.approx(float(nodes.sum()) * 15 / 3600 * price)


def _two_on_a_pool_of_4_gpu_nodes() -> tuple[FleetConfig, PolicyBuilder]:
    """Two Deployments of our policy (persistence forecasts) on one pool of 4-GPU nodes, headroom on evidence soon."""
    deps = tuple(DeploymentSpec(f"d{i}", _series(i + 1, 8), "p", capacity_per_replica=0.5, max_replicas=60)
                 for i in range(2))
    config = FleetConfig(deps, (PoolSpec("p", 4, 10.0),), headroom_min_residuals=10)
    profile = ForecastProfile()

    def build(i: int, d: DeploymentSpec, sim: SimulationConfig, cluster: ClusterConfig) -> TickPolicy:
        return factory(lambda: registry.make_chain("persistence"), profile=profile)(d.series, sim, cluster)

    return config, build


def test_headroom_keeps_idle_nodes_and_cuts_node_waits() -> None:
    config, build = _two_on_a_pool_of_4_gpu_nodes()
    off = run_fleet(config, build, "off")
    on = run_fleet(config, build, "on", headroom=True)
    assert on.headroom_nodes["p"].max() >= 1
    assert on.node_hours > off.node_hours  # idle nodes are billed
    assert on.slo_misses < off.slo_misses


def test_spares_fill_the_room_node_headroom_keeps_and_its_placeholders_hold_what_they_leave_empty() -> None:
    config, build = _two_on_a_pool_of_4_gpu_nodes()
    on = run_fleet(config, build, "on", headroom=True)
    off = run_fleet(replace(config, spare_replicas=False), build, "off", headroom=True)
    # the idle nodes held empty are fewer: spares stand on the room they kept, Ready when a rise comes
    assert float(on.headroom_nodes["p"].mean()) < float(off.headroom_nodes["p"].mean())
    lent = np.sum([r.result.requested - r.decisions for r in on.deployments], axis=0)
    assert int(lent.max()) > 3  # more spares at once than the last node's remainder (4-GPU nodes) could hold
    assert on.slo_misses < off.slo_misses


def test_spares_on_the_pools_paid_gpus_cut_misses_and_hpa_deployments_get_none() -> None:
    deps = tuple(DeploymentSpec(f"d{i}", _series(i + 1, 8), "p", capacity_per_replica=0.5, max_replicas=60)
                 for i in range(3))
    config = FleetConfig(deps, (PoolSpec("p", 8, 10.0),))
    profile = ForecastProfile()

    def build(i: int, d: DeploymentSpec, sim: SimulationConfig, cluster: ClusterConfig) -> TickPolicy:
        if i == 2:  # an HPA's Deployment on the same pool: it counts in the pool's GPUs, and is lent none
            return ReactiveHPA(0.6, d.capacity_per_replica, cluster.tick_seconds, d.min_replicas, d.max_replicas)
        return factory(lambda: registry.make_chain("persistence"), profile=profile)(d.series, sim, cluster)

    on = run_fleet(config, build, "on")
    off = run_fleet(replace(config, spare_replicas=False), build, "off")
    lent = [r.result.requested - r.decisions for r in on.deployments]
    assert all(int(x.max()) > 0 for x in lent[:2])  # our Deployments held spares above their decisions
    assert int(np.abs(lent[2]).max()) == 0
    assert all(np.array_equal(r.result.requested, r.decisions) for r in off.deployments)
    assert on.slo_misses < off.slo_misses


def test_a_one_deployment_fleet_without_headroom_decides_as_simulate() -> None:
    # the fleet's Deployment names its NodePool, so the single replay names it too: both observe its free GPUs
    series = _series(3, 10)
    cap = float(np.nanmax(series.values)) / 20
    cluster = ClusterConfig()  # simulate's defaults: 120 s pod, 180 s node, 8 GPUs a node, consolidateAfter 60 s
    single = SimulationConfig(capacity_per_replica=cap, cluster=cluster, policies=("predictive",), bin_shape="flat",
                              nodepool="p")
    profile = ForecastProfile()
    make = factory(lambda: registry.make_chain("default"), profile=profile)
    alone = simulate(series, single, predictive=make).policies["predictive"]
    fleet = FleetConfig(
        (DeploymentSpec("only", series, "p", cap, min_replicas=single.min_replicas, max_replicas=single.max_replicas,
                        pod_startup_seconds=cluster.pod_startup_seconds),),
        (PoolSpec("p", cluster.gpus_per_node, 24.0, cluster.node_startup_seconds,
                  cluster.consolidate_after_seconds),),
        bin_shape="flat", spare_replicas=False)  # a single replay bills its pods: spares are the fleet's

    def build(i: int, d: DeploymentSpec, sim: SimulationConfig, c: ClusterConfig) -> TickPolicy:
        return make(d.series, sim, c)

    run = run_fleet(fleet, build, "predictive")
    only = run.deployments[0]
    assert np.array_equal(only.decisions, alone.requested)
    assert np.array_equal(only.result.ready, alone.ready)
    assert only.result.slo_attainment == alone.slo_attainment
    assert only.result.gpu_hours == pytest.approx(alone.gpu_hours)


def test_a_fleet_decides_the_same_without_the_planners_steps() -> None:
    # A fleet's policies keep no planner steps (nothing in a fleet reads them; ``predictive_builder``): the same
    # decisions, nodes and bill as with every step kept, in a shared pool where free GPUs may take new replicas.
    deps = tuple(DeploymentSpec(f"d{i}", _series(i + 1, 8, shape), "p", capacity_per_replica=0.5, max_replicas=60)
                 for i, shape in enumerate(("diurnal", "bursty")))
    config = FleetConfig(deps, (PoolSpec("p", 8, 10.0),))
    profile = ForecastProfile()
    built: dict[bool, list[PredictivePolicy]] = {True: [], False: []}

    def builder(explain: bool) -> PolicyBuilder:
        def build(i: int, d: DeploymentSpec, sim: SimulationConfig, cluster: ClusterConfig) -> TickPolicy:
            policy = factory(lambda: registry.make_chain("default"), profile=profile, explain=explain)(
                d.series, sim, cluster)
            assert isinstance(policy, PredictivePolicy)
            built[explain].append(policy)
            return policy

        return build

    kept = run_fleet(config, builder(True), "kept", headroom=True)
    bare = run_fleet(config, builder(False), "bare", headroom=True)
    for a, b in zip(kept.deployments, bare.deployments, strict=True):
        assert np.array_equal(a.decisions, b.decisions)
        assert np.array_equal(a.result.ready, b.result.ready)
    assert np.array_equal(kept.nodes["p"], bare.nodes["p"])
    assert np.array_equal(kept.headroom_nodes["p"], bare.headroom_nodes["p"])
    assert all(p.decision is not None and p.decision.steps for p in built[True])
    assert not any(p.decision is not None and p.decision.steps for p in built[False])


def test_tunings_in_worker_processes_choose_and_decide_as_in_one_process() -> None:
    # Two Deployments whose daily self-tuning falls due at the same ticks: in a pool of two workers the replays of
    # one tick run at once, and each is applied at the tick it fell due, so nothing any Deployment does changes.
    from concurrent.futures import ProcessPoolExecutor

    from autoscaler.commands.simulate_fleet import predictive_builder

    deps = tuple(DeploymentSpec(f"d{i}", _series(i + 1, 60, shape), "p", capacity_per_replica=0.5, max_replicas=80)
                 for i, shape in enumerate(("diurnal", "bursty")))
    config = FleetConfig(deps, (PoolSpec("p", 8, 24.0),))
    profile = ForecastProfile()
    alone = run_fleet(config, predictive_builder(profile, 30), "one process", headroom=True)
    with ProcessPoolExecutor(max_workers=2) as pool:
        pooled = run_fleet(config, predictive_builder(profile, 30, executor=pool), "pool", headroom=True)
    tuned = [n for n in alone.notes if "self-tuned" in n]
    assert len(tuned) == 2
    for a, b in zip(alone.deployments, pooled.deployments, strict=True):
        assert np.array_equal(a.decisions, b.decisions)
        assert np.array_equal(a.result.ready, b.result.ready)
    assert [n.split("; met on")[0] for n in pooled.notes] == [n.split("; met on")[0] for n in alone.notes]
    assert pooled.billed_gpu_hours == alone.billed_gpu_hours


# -- the command ----------------------------------------------------------------------------------------------


def _small_example(tmp_path: Path) -> Path:
    raw = yaml.safe_load(EXAMPLE.read_text())
    raw["days"] = 0.125
    raw["reactive_targets"] = [0.6, 0.8]
    out = tmp_path / "fleet.yaml"
    out.write_text(yaml.safe_dump(raw))
    return out


def test_the_example_fleet_runs_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _small_example(tmp_path)
    assert main(["simulate", "--fleet", str(path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out["runs"]) == {"predictive", "predictive-no-headroom", "reactive@0.6", "reactive@0.8"}
    for run in out["runs"].values():
        assert set(run["deployments"]) == {"chat", "code", "embed"}
        assert run["fleet"]["ceiling_breaches"] == 0
        assert run["fleet"]["cost_usd"] <= 1300 * 3 + 1e-6  # three hours under a $1300/h ceiling
        fleet_gpu = sum(d["gpu_hours"] for d in run["deployments"].values())
        assert fleet_gpu == pytest.approx(run["fleet"]["gpu_hours"], abs=0.01)
        assert run["fleet"]["billed_gpu_hours"] >= run["fleet"]["gpu_hours"]
    plot = tmp_path / "fleet.png"
    assert main(["simulate", "--fleet", str(path), "--policies", "predictive,reactive", "--reactive-targets",
                 "0.7", "--plot", str(plot)]) == 0
    text = capsys.readouterr().out
    assert "HPA + Karpenter" in text or "HPA curve" in text
    assert plot.stat().st_size > 0


def _one_line_error(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 2, (out, err)
    assert err.count("\n") == 1, err
    assert "Traceback" not in err
    return err.strip()


GOOD = {
    "days": 0.05,
    "nodepools": [{"name": "a", "gpus_per_node": 8, "usd_per_node_hour": 20}],
    "deployments": [{"name": "x", "synth": {"seed": 1}}],
}


@pytest.mark.parametrize(("change", "needle"), [
    ({"nodepools": []}, "nodepools: expected a list of at least one NodePool"),
    ({"nodepools": [{"name": "a", "gpus_per_node": 8}]}, "needs usd_per_node_hour"),
    ({"nodepools": [{"name": "a", "usd_per_node_hour": 5, "gpus": 8}]}, "unknown key 'gpus'"),
    ({"nodepools": [{"name": "a", "usd_per_node_hour": 5, "node_startup": 180}]}, "with its unit"),
    ({"nodepools": [{"name": "a", "usd_per_node_hour": 5, "gpu_limit": 4}]}, "gpu_limit: must be an integer >= 8"),
    ({"deployments": [{"name": "x"}]}, "exactly one of trace"),
    ({"deployments": [{"name": "x", "trace": "nope.csv"}]}, "no such file"),
    ({"deployments": [{"name": "x", "synth": {"shape": "spiky"}}]}, "unknown shape 'spiky'"),
    ({"deployments": [{"name": "x", "synth": {}, "nodepool": "b"}]}, "'b' is not one of the nodepools"),
    ({"deployments": [{"name": "x", "synth": {}, "gpus_per_replica": 16}]}, "do not fit a node"),
    ({"deployments": [{"name": "x", "synth": {}, "slo": {"wait": "90s"}}]}, "not shorter than the timeout"),
    ({"deployments": [{"name": "x", "synth": {}, "slo": {"attainment": 99}}]}, "a share in (0, 1)"),
    ({"deployments": [{"name": "x", "synth": {}, "priority": "urgent"}]}, "priority: expected 0..1000"),
    ({"deployments": [{"name": "x", "synth": {}}, {"name": "x", "synth": {}}]}, "listed twice"),
    ({"deployments": [{"name": "x", "synth": {}, "min_replicas": 5, "max_replicas": 2}]}, "max_replicas"),
    ({"ceilings": {"cluster": -1}}, "ceilings.cluster: must be dollars per hour > 0"),
    ({"ceilings": {"teams": {"ghost": 10}}}, "no Deployment has team 'ghost'"),
    ({"policies": ["oracle"]}, "policies: expected a list from"),
    ({"headroom": {"quantile": 1.5}}, "headroom.quantile"),
    ({"spare_replicas": "yes"}, "spare_replicas"),
    ({"colour": "red"}, "unknown key 'colour'"),
])
def test_bad_fleet_files_are_one_line_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                             change: dict[str, object], needle: str) -> None:
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump({**GOOD, **change}))
    err = _one_line_error(capsys, ["simulate", "--fleet", str(path)])
    assert err.startswith(f"predictive-autoscaler simulate: error: --fleet {path}")
    assert needle in err


def test_single_deployment_flags_are_refused_with_a_fleet(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(GOOD))
    err = _one_line_error(capsys, ["simulate", "--fleet", str(path), "--peak-replicas", "5"])
    assert "--peak-replicas and --fleet are mutually exclusive" in err
    err = _one_line_error(capsys, ["simulate", "--fleet", str(path), "--policies", "oracle"])
    assert "--policies: with --fleet choose from" in err


def test_not_yaml_and_missing_files_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("nodepools: [\n")
    assert "not valid YAML" in _one_line_error(capsys, ["simulate", "--fleet", str(bad)])
    assert "cannot read" in _one_line_error(capsys, ["simulate", "--fleet", str(tmp_path / "none.yaml")])


def test_our_controller_writes_its_scale_downs_first_with_spares_off_too(monkeypatch: pytest.MonkeyPatch) -> None:
    # The controller orders its writes so that a GPU one Deployment gives back is free for a replica another adds in
    # the same tick (``runtime.loop``), whether or not it lends spares; the fleet simulator must write in that order.
    config, build = _two_on_a_pool_of_4_gpu_nodes()
    writes: list[tuple[int, int]] = []  # (tick, change) of every scale written, in the order written
    real = Cluster.scale_to

    def spy(self: Cluster, k: int, desired: int) -> None:
        writes.append((k, desired - self.requested))
        real(self, k, desired)

    monkeypatch.setattr(Cluster, "scale_to", spy)
    run_fleet(replace(config, spare_replicas=False), build, "off")
    ticks: dict[int, list[int]] = {}
    for k, change in writes:
        ticks.setdefault(k, []).append(change)
    both = [changes for changes in ticks.values() if min(changes) < 0 < max(changes)]
    assert both  # ticks where one Deployment scaled down while the other scaled up
    assert all(changes == sorted(changes) for changes in both)


def test_a_report_of_many_runs_says_the_points_legend_once() -> None:
    # each self-tuned run's note names its points with the legend (simulate prints one such note); a fleet's notes,
    # one per Deployment, say it once, at the end
    notes = [f"d{i}: predictive self-tuned daily (13 replays): ran hpa@0.5+lead x9, q95 x4 ({POINT_LEGEND}); met on 13"
             for i in range(3)] + ["d0: predictive forecasts: default 40 bins (3 fits)"]
    out = legend_once(notes)
    assert out[:3] == [f"d{i}: predictive self-tuned daily (13 replays): ran hpa@0.5+lead x9, q95 x4; met on 13"
                       for i in range(3)]
    assert out[3:] == [notes[3], LEGEND_NOTE]
    assert legend_once(notes[3:]) == notes[3:]  # no point named: no legend


def test_the_command_says_what_each_deployments_tuner_ran(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # three days: each Deployment's tuner replays its second and third days; the table's notes say what it ran (one
    # line each, the points' legend once) and the JSON keeps every run's notes
    raw = yaml.safe_load(EXAMPLE.read_text())
    raw["days"] = 3
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(raw))
    assert main(["simulate", "--fleet", str(path), "--policies", "predictive"]) == 0
    notes = [line for line in capsys.readouterr().out.splitlines() if line.startswith("note: ")]
    tuned = [n for n in notes if "self-tuned daily" in n]
    assert sorted(n.split(":")[1].strip() for n in tuned) == ["chat", "code", "embed"]
    assert all("ran the start point hpa@0.7+lead" in n and POINT_LEGEND not in n for n in tuned)
    assert notes.count(f"note: {LEGEND_NOTE}") == 1
    assert main(["simulate", "--fleet", str(path), "--policies", "predictive", "--json"]) == 0
    run = json.loads(capsys.readouterr().out)["runs"]["predictive"]
    assert sum("self-tuned daily" in n for n in run["notes"]) == 3
    assert run["notes"].count(LEGEND_NOTE) == 1
