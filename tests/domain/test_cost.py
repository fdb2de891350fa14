"""Cost ceilings: table cases for the keep order and the trail, hypothesis properties for the ceiling's invariants."""

from __future__ import annotations

import math
import random
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autoscaler.domain import cost
from autoscaler.domain.annotations import WorkloadSpec
from autoscaler.domain.cost import (
    DEFAULT_KEEP_ORDER,
    Ceilings,
    CostReport,
    GpuPrices,
    KeepClass,
    WorkloadAsk,
    enforce_ceilings,
    fits_ceilings,
)
from autoscaler.domain.gangs import Gang
from autoscaler.domain.types import ScalingDecision, Step

PRICES = GpuPrices({"a100": 4.0, "l4": 1.0}, default=2.0)


def ask(key: str, desired: int, *, prio: int = 100, gpus: int = 1, lo: int = 0, warm: int = 0, team: str = "t",
        pool: str | None = "a100", warm_as: str = "replicas") -> WorkloadAsk:
    return WorkloadAsk(key, team, prio, gpus, lo, desired, warm, warm_as, pool)  # type: ignore[arg-type]


def gang(name: str, gpus: int, *, admitted: bool = False, prio: int = 50, team: str = "t",
         pool: str | None = "a100") -> Gang:
    return Gang("Workload", "ml", name, gpus, max(1, gpus), admitted, prio, team=team, nodepool=pool)


def kept(report: CostReport, key: str) -> int:
    outcome = report.outcome(key)
    assert outcome is not None
    return outcome.gpus


# ---------------------------------------------------------------------------------------------- tables


def test_no_ceiling_prices_the_plan_and_cuts_nothing() -> None:
    report = enforce_ceilings([ask("a/x", 3, gpus=2), ask("b/y", 2, pool="l4")], [gang("g", 4)], Ceilings(), PRICES)
    assert report.cluster_dollars_per_hour == pytest.approx(3 * 2 * 4.0 + 2 * 1.0 + 4 * 4.0)
    assert report.asked_dollars_per_hour == report.cluster_dollars_per_hour
    assert not report.binds
    assert not report.cut_inference
    assert report.cuts == ()
    assert [o.detail for o in report.workloads] == ["", ""]  # no ceiling in scope: no step
    assert report.gpus_by_pool == {"a100": 10, "l4": 2}
    assert report.cluster_slack_dollars_per_hour is None


def test_default_order_keeps_production_then_admitted_training_then_warm_pools_then_lower_tiers() -> None:
    asks = [
        ask("p/chat", 4, prio=100, warm=1),  # 3 serving + 1 warm
        ask("s/embed", 2, prio=50),
    ]
    gangs = [gang("running", 2, admitted=True, prio=10), gang("queued", 2, admitted=False, prio=1000)]
    # 10 GPUs asked at $4; budget for 6: chat's 3 serving, the admitted gang (2), chat's warm replica (1).
    report = enforce_ceilings(asks, gangs, Ceilings(cluster=24.0), PRICES)
    assert kept(report, "p/chat") == 4
    assert kept(report, "s/embed") == 0
    assert [g.name for g in report.gangs_reserved] == ["running"]
    assert [g.name for g in report.gangs_deferred] == ["queued"]
    assert report.cluster_dollars_per_hour == pytest.approx(24.0)
    assert report.cut_inference  # embed's serving replicas were cut: the loud case


def test_keep_order_is_configurable() -> None:
    asks = [ask("p/chat", 3, prio=100, warm=1)]
    gangs = [gang("running", 2, admitted=True)]
    budget = 4.0 * 4  # 4 GPUs for: 2 serving + 1 warm replica, and a 2-GPU admitted gang
    warm_first = Ceilings(cluster=budget, keep_order=tuple(KeepClass.parse(s) for s in ("warm_pool", "*")))
    report = enforce_ceilings(asks, gangs, warm_first, PRICES)
    assert kept(report, "p/chat") == 3
    assert report.gangs_deferred
    default = enforce_ceilings(asks, gangs, Ceilings(cluster=budget), PRICES)
    assert kept(default, "p/chat") == 2
    assert default.gangs_reserved
    assert [c.kind for c in default.cuts] == ["warm_pool"]


def test_min_replicas_are_kept_above_the_ceiling_and_reported_unmeetable() -> None:
    report = enforce_ceilings([ask("p/chat", 5, lo=3, gpus=2), ask("b/x", 2, prio=10)], [gang("g", 1, admitted=True)],
                              Ceilings(cluster=10.0), PRICES)
    assert kept(report, "p/chat") == 6  # 3 x 2 GPUs, nothing above the minimum
    assert kept(report, "b/x") == 0
    assert report.gangs_deferred
    assert report.unmeetable == ("cluster",)
    assert report.binds
    outcome = report.outcome("p/chat")
    assert outcome is not None
    assert "CANNOT be met" in outcome.detail
    assert report.cluster_slack_dollars_per_hour == 0.0


def test_team_ceiling_cuts_only_that_team() -> None:
    asks = [ask("a/1", 4, team="a"), ask("b/1", 4, team="b", prio=10)]
    report = enforce_ceilings(asks, [], Ceilings(teams={"a": 8.0}), PRICES)
    assert kept(report, "a/1") == 2
    assert kept(report, "b/1") == 4
    assert report.team_dollars_per_hour == {"a": 8.0, "b": 16.0}
    (cut,) = report.cuts
    assert (cut.key, cut.kind, cut.count, cut.gpus, cut.ceiling) == ("a/1", "replicas", 2, 2, "team a")
    assert cut.dollars_per_hour == pytest.approx(8.0)


def test_equal_workloads_lose_replicas_evenly() -> None:
    report = enforce_ceilings([ask("a/1", 4), ask("a/2", 4)], [], Ceilings(cluster=4.0 * 5), PRICES)
    assert sorted((kept(report, "a/1"), kept(report, "a/2"))) == [2, 3]


def test_a_gang_that_does_not_fit_is_deferred_whole_and_smaller_units_use_the_budget() -> None:
    report = enforce_ceilings([ask("b/x", 3, prio=10)], [gang("big", 8, admitted=True)], Ceilings(cluster=4.0 * 7),
                              PRICES)
    assert report.gangs_deferred[0].name == "big"
    assert kept(report, "b/x") == 3
    (fate,) = report.gangs
    assert fate.reason.startswith("deferred whole: cluster ceiling would go over")


def test_warm_pool_kept_as_nodes_is_cut_as_spare_capacity_not_replicas() -> None:
    report = enforce_ceilings([ask("p/x", 2, warm=2, warm_as="nodes")], [], Ceilings(cluster=4.0 * 3), PRICES)
    outcome = report.outcome("p/x")
    assert outcome is not None
    assert (outcome.allowed_replicas, outcome.allowed_warm_pool, outcome.gpus) == (2, 1, 3)
    assert not report.cut_inference
    assert report.binds


def test_apply_writes_a_cost_ceiling_step_with_the_dollars() -> None:
    spec = WorkloadSpec("ml", "chat", 1, 10, 5.0, team="ml", priority=50, nodepool="a100", gpus_per_replica=2)
    decision = ScalingDecision(6, 30.0, 240.0, 1, "replicas", 2, (Step("min_max_clamp", 6, "6 within [1, 10]"),),
                               (), now=1000)
    report = enforce_ceilings([WorkloadAsk.from_decision(spec, decision)], [], Ceilings(teams={"ml": 24.0}), PRICES)
    cut = report.apply("ml/chat", decision)
    assert cut.desired_replicas == 3
    assert cut.warm_pool_replicas == 0
    step = cut.steps[-1]
    assert step.name == "cost_ceiling"
    assert step.replicas == 3
    assert "$24.00/h" in step.detail
    assert "team ml" in step.detail
    assert "CUT 6 -> 3" in step.detail
    assert report.apply("other/key", decision) is decision
    assert cut.steps[:-1] == decision.steps


def test_inactive_gangs_cost_nothing_and_zero_gpu_workloads_are_free() -> None:
    done = Gang("PodGroup", "ml", "old", 64, 8, True, 50, inactive=True)
    report = enforce_ceilings([ask("c/cpu", 5, gpus=0)], [done], Ceilings(cluster=1.0), PRICES)
    assert report.gangs == ()
    assert kept(report, "c/cpu") == 0
    outcome = report.outcome("c/cpu")
    assert outcome is not None
    assert outcome.allowed_replicas == 5


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("inference>=production", KeepClass("inference", 100)),
        ("training_admitted", KeepClass("training_admitted")),
        ("* >= 42", KeepClass("*", 42)),
        ("training", KeepClass("training")),
    ],
)
def test_keep_class_parses_and_prints_back(text: str, expected: KeepClass) -> None:
    parsed = KeepClass.parse(text)
    assert parsed == expected
    assert KeepClass.parse(str(parsed)) == parsed


@pytest.mark.parametrize(
    ("text", "message"),
    [("inference>=urgent", "unknown priority tier 'urgent'"), ("gpus", "unknown kind 'gpus'"),
     ("inference>>3", "cannot read keep-order entry"), ("* >= 5000", "priority bound must be 0..1000")],
)
def test_keep_class_errors_name_the_problem(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        KeepClass.parse(text)


def test_bad_inputs_are_one_line_errors() -> None:
    with pytest.raises(ValueError, match="duplicate workload key 'a/x'"):
        enforce_ceilings([ask("a/x", 1), ask("a/x", 2)], [], Ceilings(), PRICES)
    with pytest.raises(ValueError, match="min_replicas 3 > desired_replicas 2"):
        ask("a/x", 2, lo=3)
    with pytest.raises(ValueError, match=r"ceilings\.teams\.x must be a finite number"):
        Ceilings(teams={"x": -1.0})
    with pytest.raises(ValueError, match=r"ceilings\.cluster"):
        Ceilings(cluster=math.nan)


# ---------------------------------------------------------------------------------------------- properties

TIERS = st.sampled_from([1000, 100, 50, 10, 0])


@st.composite
def plans(draw: st.DrawFn) -> tuple[list[WorkloadAsk], list[Gang]]:
    asks = []
    for i in range(draw(st.integers(0, 5))):
        lo = draw(st.integers(0, 3))
        desired = lo + draw(st.integers(0, 6))
        asks.append(ask(f"ns/w{i}", desired, prio=draw(TIERS), gpus=draw(st.integers(0, 4)), lo=lo,
                        warm=draw(st.integers(0, 3)), team=draw(st.sampled_from("ab")),
                        pool=draw(st.sampled_from(["a100", "l4", None])),
                        warm_as=draw(st.sampled_from(["replicas", "nodes"]))))
    gangs = [
        gang(f"g{i}", draw(st.integers(0, 16)), admitted=draw(st.booleans()), prio=draw(TIERS),
             team=draw(st.sampled_from("ab")), pool=draw(st.sampled_from(["a100", "l4"])))
        for i in range(draw(st.integers(0, 3)))
    ]
    return asks, gangs


ORDERS = st.sampled_from([DEFAULT_KEEP_ORDER, (KeepClass("*"),), (KeepClass("training"), KeepClass("inference"))])
budgets = st.one_of(st.none(), st.integers(0, 200).map(float))


def min_cost(asks: list[WorkloadAsk], team: str | None = None) -> float:
    return sum(a.min_replicas * a.gpus_per_replica * PRICES.per_gpu_hour(a.nodepool)
               for a in asks if team is None or a.team == team)


@settings(max_examples=100, deadline=None)
@given(plans(), budgets, budgets, ORDERS)
def test_invariants_hold_for_any_plan(plan: tuple[list[WorkloadAsk], list[Gang]], cluster: float | None,
                                      team_a: float | None, order: tuple[KeepClass, ...]) -> None:
    asks, gangs = plan
    ceilings = Ceilings(cluster=cluster, teams={} if team_a is None else {"a": team_a}, keep_order=order)
    report = enforce_ceilings(asks, gangs, ceilings, PRICES)
    # cost <= ceiling whenever the minimums fit under it
    if cluster is not None and min_cost(asks) <= cluster:
        assert report.cluster_dollars_per_hour <= cluster + 1e-6
        assert "cluster" not in report.unmeetable
    if team_a is not None and min_cost(asks, "a") <= team_a:
        assert report.team_dollars_per_hour.get("a", 0.0) <= team_a + 1e-6
    # nothing below its min, nothing above its ask
    for a in asks:
        o = report.outcome(a.key)
        assert o is not None
        assert a.min_replicas <= o.allowed_replicas <= a.desired_replicas
        assert 0 <= o.allowed_warm_pool <= a.warm_pool_replicas
        assert o.gpus >= a.min_replicas * a.gpus_per_replica
    # a gang is all in or all out
    by_key = {g.key: g for g in gangs}
    for fate in report.gangs:
        assert fate.gang == by_key[fate.gang.key]
    reserved = sum(g.gpus for g in report.gangs_reserved)
    assert reserved + sum(o.gpus for o in report.workloads) == sum(report.gpus_by_pool.values())
    assert {g.key for g in report.gangs_reserved} | {g.key for g in report.gangs_deferred} == set(by_key)
    # every cut is on the trail when a ceiling is in scope
    for c in report.cuts:
        if c.kind != "gang":
            o = report.outcome(c.key)
            assert o is not None
            assert o.detail.startswith("CUT")


@settings(max_examples=100, deadline=None)
@given(plans(), st.integers(0, 200).map(float))
def test_higher_priority_is_never_cut_while_a_lower_one_holds_gpus(
    plan: tuple[list[WorkloadAsk], list[Gang]], cluster: float
) -> None:
    """With a pure-priority order and one ceiling: a cut replica means no lower priority keeps any unit above min,
    except a lower-priority claim may use budget a (larger) deferred gang left."""
    asks, gangs = plan
    report = enforce_ceilings(asks, gangs, Ceilings(cluster=cluster, keep_order=(KeepClass("*"),)), PRICES)
    prio = {a.key: a.priority for a in asks} | {g.key: g.priority for g in gangs}
    cut_replica_prios = [prio[c.key] for c in report.cuts if c.kind != "gang" and c.gpus > 0]
    if not cut_replica_prios:
        return
    highest_cut = max(cut_replica_prios)
    for a in asks:
        o = report.outcome(a.key)
        assert o is not None
        if a.priority < highest_cut and a.gpus_per_replica > 0:
            assert o.gpus == a.min_replicas * a.gpus_per_replica, (a, o)
    for g in report.gangs_reserved:
        assert g.priority >= highest_cut or g.gpus == 0


@settings(max_examples=100, deadline=None)
@given(plans(), st.integers(0, 150), st.integers(1, 60), ORDERS)
def test_more_budget_never_gives_anyone_fewer_gpus_without_gangs(
    plan: tuple[list[WorkloadAsk], list[Gang]], budget: int, extra: int, order: tuple[KeepClass, ...]
) -> None:
    asks, _ = plan
    less = enforce_ceilings(asks, [], Ceilings(cluster=float(budget), keep_order=order), PRICES)
    more = enforce_ceilings(asks, [], Ceilings(cluster=float(budget + extra), keep_order=order), PRICES)
    for a in asks:
        assert kept(more, a.key) >= kept(less, a.key)
    assert more.cluster_dollars_per_hour >= less.cluster_dollars_per_hour


@settings(max_examples=100, deadline=None)
@given(plans(), st.integers(0, 150), st.integers(1, 60), st.randoms(use_true_random=False))
def test_with_gangs_more_budget_improves_the_grant_lexicographically_in_rank_order(
    plan: tuple[list[WorkloadAsk], list[Gang]], budget: int, extra: int, rnd: random.Random
) -> None:
    """Every claim at its own priority, pure-priority order: the highest-ranked claim whose GPUs change gains.

    (Per claim, not per total: budget $7 runs seven $1 replicas, budget $8 an $8 gang ranked above them.)
    """
    asks, gangs = plan
    distinct = rnd.sample(range(1001), len(asks) + len(gangs))
    asks = [replace(a, priority=p) for a, p in zip(asks, distinct, strict=False)]
    gangs = [replace(g, priority=p) for g, p in zip(gangs, distinct[len(asks):], strict=True)]
    order = (KeepClass("*"),)
    less = enforce_ceilings(asks, gangs, Ceilings(cluster=float(budget), keep_order=order), PRICES)
    more = enforce_ceilings(asks, gangs, Ceilings(cluster=float(budget + extra), keep_order=order), PRICES)

    def grants(r: CostReport) -> dict[int, int]:
        out = {a.priority: kept(r, a.key) for a in asks}
        out.update({f.gang.priority: f.gang.gpus if f.reserved else 0 for f in r.gangs})
        return out

    g_less, g_more = grants(less), grants(more)
    changed = sorted((p for p in g_less if g_less[p] != g_more[p]), reverse=True)
    if changed:
        assert g_more[changed[0]] > g_less[changed[0]], (changed, g_less, g_more)


@settings(max_examples=60, deadline=None)
@given(plans(), budgets)
def test_report_is_deterministic_and_order_of_inputs_does_not_matter(
    plan: tuple[list[WorkloadAsk], list[Gang]], cluster: float | None
) -> None:
    asks, gangs = plan
    a = enforce_ceilings(asks, gangs, Ceilings(cluster=cluster), PRICES)
    b = enforce_ceilings(list(reversed(asks)), list(reversed(gangs)), Ceilings(cluster=cluster), PRICES)
    assert a.to_dict() == b.to_dict()
    assert {o.key: o for o in a.workloads} == {o.key: o for o in b.workloads}


WHOLE_NODES = GpuPrices({"a100": 4.0, "l4": 1.0}, default=2.0, gpus_per_node={"a100": 8, "l4": 4})


@settings(max_examples=150, deadline=None)
@given(plans(), budgets, budgets, st.sampled_from([PRICES, WHOLE_NODES]))
def test_the_cheap_fit_test_says_exactly_whether_the_ceilings_cut_anything(
    plan: tuple[list[WorkloadAsk], list[Gang]], cluster: float | None, team_a: float | None, prices: GpuPrices,
) -> None:
    # the drivers that decide every simulated tick skip the money step when fits_ceilings says the plan fits
    asks, gangs = plan
    ceilings = Ceilings(cluster=cluster, teams={} if team_a is None else {"a": team_a})
    report = enforce_ceilings(asks, gangs, ceilings, prices)
    if fits_ceilings(asks, gangs, ceilings, prices):
        assert not report.binds
        assert all(o.allowed_replicas == o.asked_replicas for o in report.workloads)
        assert not report.gangs_deferred
        if cluster is not None:  # and the bill the report prices itself is under every ceiling
            assert report.cluster_dollars_per_hour <= cluster + 1e-6
        if team_a is not None:
            assert report.team_dollars_per_hour.get("a", 0.0) <= team_a + 1e-6
    else:
        assert report.binds or report.gangs_deferred
    # When the whole plan fits, enforce_ceilings grants it at once instead of unit by unit: the same report either way
    # (every grant, note, dollar and reserved gang), so the shortcut cannot change what a driver decides.
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(cost, "fits_ceilings", lambda *_: False)  # the unit-by-unit path, whatever the plan
        slow = enforce_ceilings(asks, gangs, ceilings, prices)
    assert report.to_dict() == slow.to_dict()
    assert report.workloads == slow.workloads
    assert report.gangs == slow.gangs
