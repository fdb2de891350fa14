"""Self-tuning choice rules replayed on the days the tuner recorded, in milliseconds instead of a fortnight's run each.

``python -m benchmarks.tuner_rules`` (writes the ``tuner rules`` section of docs/BENCHMARKS.md; ``--draws`` picks the
synthetic draws, default 1-8). Why it exists: whether the self-tuned default is dominated by an HPA target depends on
which operating point its rule chose on each day, and a rule tried by re-running the frontier costs minutes per trace,
so a handful of variants covers a handful of traces, and a rule that wins there may only have fitted them. But each
tuning already replays *every* operating point on the day behind it (``tuning.Day``), and a replay is what that point
does on that day: measured on the social stream's draw 2, the live run's GPU-hours on each day equal the replay of the
point that ran, to 0.1 GPU-h. So the fortnight of any rule is the sum, over the recorded days, of the replay of the
point the rule would have run, and dozens of rules run on dozens of traces in seconds.

How: ``record`` runs the frontier's self-tuned default (its settings: ``benchmarks.frontier``) on a trace and keeps
every tuning's newest day, the points chosen, the live result and the HPA targets' results. ``replay`` feeds a rule the
days as the tuner holds them (``tuning.extend_record``: an overlapping day dropped, four weeks kept; each day's
``ran`` the point the rule chose the day before), and sums the replays of what it ran. ``current_rule`` is the tuner's
own choice (``tuning.decide``: the self-check, else ``choose``), and replaying it must give the choices the live
tuner made (checked on every trace: a rule replayed here is the rule the tuner runs, or the table says so).
``estimate`` turns a replayed sum into the fortnight: the live run of the current rule minus the replay of the same
rule is what the replay leaves out (the start point's first day, the hours around the first tunings, the hours after
the last), and it is taken as the same for every rule and added back (exact for the current rule; for a variant it
is off by what the variant would have run in the hours after the last tuning, under a day of the fourteen).

Every rule is measured on the synthetic shapes' draws (``synthetic_traces(draw)``; draw 0, the frontier's own, is
left out: it is what the frontier section measures live), counting the runs an HPA target dominates (no more
GPU-hours and no less attainment) and how far (the most GPU-hours over a target that attained as much, in % of it),
and the runs that meet the 99% objective. The rules other than ``current_rule`` are variants: a variant wins here
before it is built into ``autoscaler.simulation.tuning`` and measured again with the frontier.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, replace
from itertools import pairwise
from typing import Any

import numpy as np

from autoscaler.simulation.engine import TickPolicy, simulate
from autoscaler.simulation.predictive import PredictivePolicy
from autoscaler.simulation.tuning import (
    DEFAULT_MARGIN,
    DEFAULT_POOL_DAYS,
    LEAD_ONLY_QUANTILE,
    Candidate,
    Day,
    Tuning,
    assume,
    budget_requirement,
    choose,
    decide,
    does_better,
    extend_record,
    lived,
    meets,
    misses,
    pool,
    start_target,
)
from autoscaler.traces import Trace
from benchmarks.backtest import draw_numbers, synthetic_traces
from benchmarks.frontier import DAYS, OBJECTIVE, POD_STARTUP_SECONDS, first_days, frontier_config, self_tuned
from benchmarks.report import machine, update_section

Point = tuple[int, float]
# A choice rule: the days behind (oldest first, each with the point that ran on it) and the objective -> the point
# that runs next.
Rule = Callable[[Sequence[Day], float], Point]


@dataclass(frozen=True)
class Recorded:
    """One self-tuned run, as ``record`` kept it."""

    trace: str
    days: tuple[Day, ...]  # each tuning's newest replayed day, in order
    chosen: tuple[Point, ...]  # what each tuning chose
    tuned: tuple[float, float]  # the live run: GPU-hours, attainment
    requests: float  # the live run's requests
    hpa: tuple[tuple[str, float, float], ...]  # each HPA target: name, GPU-hours, attainment


@dataclass(frozen=True)
class Replayed:
    """A rule's fortnight on the recorded days: GPU-hours, missed requests, the points it ran."""

    gpu_hours: float
    missed: float
    choices: tuple[Point, ...]


def record(trace: Trace, days: int = DAYS, pod_startup_seconds: int = POD_STARTUP_SECONDS) -> Recorded:
    """The frontier's self-tuned default on the first ``days`` of ``trace``, with every tuning kept."""
    series = first_days(trace, days)
    base = frontier_config(series, pod_startup_seconds, ("reactive",))
    hpa = simulate(series, base, trace.name).policies
    made: list[TickPolicy] = []
    make = self_tuned()

    def keep(*args: Any, **kwargs: Any) -> TickPolicy:
        policy = make(*args, **kwargs)
        made.append(policy)
        return policy

    live = simulate(series, replace(base, policies=("predictive",)), trace.name, predictive=keep).policies["predictive"]
    tuned = made[0]
    if not isinstance(tuned, PredictivePolicy):
        raise TypeError(f"the self-tuned policy is a {type(tuned).__name__}")
    tunings = [t for t in tuned.tunings if isinstance(t, Tuning)]
    return Recorded(
        trace.name, tuple(t.days[-1] for t in tunings),
        tuple((int(t.chosen), t.chosen_utilisation) for t in tunings if t.chosen is not None),
        (live.gpu_hours, live.slo_attainment), float(np.nansum(series.values)) * series.step_seconds,
        tuple((n, r.gpu_hours, r.slo_attainment) for n, r in sorted(hpa.items()) if n.startswith("reactive@")))


def start_point() -> Point:
    """The point a self-tuned Deployment runs before its first tuning (``tuning.start_policy``)."""
    target = start_target()
    if target is None:
        raise ValueError("no HPA targets: no start point")
    return LEAD_ONLY_QUANTILE, target


def replay(rec: Recorded, rule: Rule, target: float = OBJECTIVE[1]) -> Replayed:
    """``rule`` over ``rec``'s days, kept as the tuner keeps them; the first day (the start point's) is not counted."""
    held: tuple[Day, ...] = ()
    ran = start_point()
    gpu = missed = 0.0
    choices: list[Point] = []
    for i, day in enumerate(rec.days):
        lived = Day(day.end, day.candidates, ran)
        if i > 0:
            c = lived.realised()
            if c is None:
                raise ValueError(f"{rec.trace}: the point {ran} was not replayed on the day ending {day.end}")
            gpu += c.gpu_hours
            missed += c.requests * (1.0 - c.slo_attainment)
        held = extend_record(held, lived)
        if i < len(rec.days) - 1:
            ran = rule(held, target)
            choices.append(ran)
    return Replayed(gpu, missed, tuple(choices))


def estimate(rec: Recorded, rule: Rule) -> tuple[float, float, tuple[Point, ...]]:
    """``rule``'s fortnight (GPU-hours, attainment, its choices): its replay plus what the replay of the current rule
    leaves out of the live run."""
    now = replay(rec, current_rule)
    other = replay(rec, rule)
    gpu = other.gpu_hours + rec.tuned[0] - now.gpu_hours
    missed = other.missed + (1.0 - rec.tuned[1]) * rec.requests - now.missed
    return gpu, 1.0 - missed / rec.requests, other.choices


def excess(rec: Recorded, gpu_hours: float, attainment: float) -> float:
    """The most GPU-hours over an HPA target that attained at least as much, as a share of its (<= 0: dominated by
    none; -1 when no target attained as much)."""
    over = [gpu_hours / g - 1.0 for _, g, a in rec.hpa if a >= attainment]
    return max(over, default=-1.0)


def current_rule(days: Sequence[Day], target: float) -> Point:
    """The tuner's own choice (``autoscaler.simulation.tuning.decide``, which ``tune`` calls)."""
    return decide(days, target).best.point


def without_self_check(days: Sequence[Day], target: float) -> Point:
    """The tuner's choice before the self-check (until 2026-11-26): ``choose`` on the newest ``DEFAULT_POOL_DAYS``,
    held to the error budget's requirement."""
    kept = days[-DEFAULT_POOL_DAYS:]
    return choose(pool([d.candidates for d in kept]), budget_requirement(kept, target), DEFAULT_MARGIN, kept)[0].point


def fewest_misses_within(days: Sequence[Day], target: float, factor: float = 2.0) -> Point:
    """The tuner's choice, except when ``choose`` finds no point meeting the objective on the pool: then the
    cheapest point whose misses are at most ``factor`` times the fewest any point had (not the safest at any
    price)."""
    decision = decide(days, target)
    if decision.beaten is not None or choose(decision.pooled, decision.budget, DEFAULT_MARGIN, decision.days)[1]:
        return decision.best.point
    fewest = min(misses(c) for c in decision.pooled)
    return min((c for c in decision.pooled if misses(c) <= factor * fewest + 1e-9),
               key=lambda c: (c.gpu_hours, -c.slo_attainment)).point


def objective_first(days: Sequence[Day], target: float) -> Point:
    """The tuner's choice, except that the self-check gives way when the HPA point it holds does not meet the objective
    on the pool and another point does: then the choice before the self-check (``without_self_check``). Why tried:
    where the tuner misses an objective some HPA target meets (most often at 300 s pod start-up), the self-check holds
    a cheap point that beat a poor record; it can only move to points cheaper than the record."""
    decision = decide(days, target)
    if (decision.beaten is None or meets(decision.best, target)
            or not any(meets(c, decision.budget) for c in decision.pooled)):
        return decision.best.point
    return without_self_check(days, target)


def with_margin(days: Sequence[Day], target: float, margin: float = 0.25) -> Point:
    """The tuner's choice with a quarter of the error budget in hand on the replay (99.25% for a 99% objective), on top
    of the next day's lower quartile: the default ``margin`` until 2026-11-27."""
    return decide(days, target, margin=margin).best.point


def without_gate(days: Sequence[Day], target: float) -> Point:
    """The tuner's choice as it was before 2026-11-26's gate: any point may run from the first replayed day
    (``tuning.decide`` with ``min_band_days`` 1), not the HPA's own points alone until three days are replayed."""
    return decide(days, target, min_band_days=1).best.point


def escape(days: Sequence[Day], target: float) -> Point:
    """The tuner's choice, unless running it one more day (at its mean day over the pooled days) would leave the record
    dominated by one of the HPA's own points (each at its own mean day); then the point nearest in GPU-hours whose day
    would not, else the one that leaves the record least dominated. Why tried: the self-check's remedy (run the point
    that beat the record) keeps the record's deficit against that point for good."""
    decision = decide(days, target)
    ran = lived(days)
    if ran is None:
        return decision.best.point
    gpu, missed, _ = ran
    n = len(decision.days)
    day = {c.point: (c.gpu_hours / n, misses(c) / n) for c in decision.pooled}
    hpa = [(c.gpu_hours + day[c.point][0], misses(c) + day[c.point][1])
           for c in pool([d.candidates for d in days]) if c.lead_only]

    def over(point: Point) -> float:
        g, m = gpu + day[point][0], missed + day[point][1]
        return max((g / h_g - 1.0 + 1e-12 for h_g, h_m in hpa if h_g <= g and h_m <= m), default=0.0)

    if over(decision.best.point) == 0.0:
        return decision.best.point
    free = [p for p in day if over(p) == 0.0]
    if not free:
        return min(day, key=over)
    return min(free, key=lambda p: abs(day[p][0] - day[decision.best.point][0]))


def hold_hpa_point(days: Sequence[Day], target: float, saving: float = 0.05) -> Point:
    """The tuner's choice, except between two of the HPA's own points: the one that ran yesterday runs again while it
    meets the error budget's requirement on the pool, unless the choice saves more than ``saving`` of its GPU-hours
    (the self-check's choice is always taken). Why tried: on the LLM series with bursts the dominated fortnights ran
    one HPA target most days and a day each at four others, and a mix of points on the HPA's bending curve costs more
    than the fixed target that attains as much."""
    decision = decide(days, target)
    ran = days[-1].ran if days else None
    held = next((c for c in decision.pooled if c.point == ran), None)
    if decision.beaten is not None or held is None or held.point == decision.best.point or not (
            held.lead_only and decision.best.lead_only) or not meets(held, decision.budget, DEFAULT_MARGIN):
        return decision.best.point
    if decision.best.gpu_hours > held.gpu_hours or decision.best.gpu_hours >= (1.0 - saving) * held.gpu_hours:
        return held.point
    return decision.best.point


def bands_on_the_curve(days: Sequence[Day], target: float) -> Point:
    """The tuner's choice among the points the record does not rule out: a forecast band point whose replays over the
    whole record (up to four weeks) missed as many requests as one of the HPA's own points at no fewer GPU-hours, or
    more than the line between the two HPA points nearest in GPU-hours (a mix of them), is left out. Why tried: on
    ``simulate``'s default traffic the tuner ran p99 for two days after a bad day, chosen on the week's pool, where
    over the record p99 cost more than the HPA at 0.6 and attained less."""
    pooled = pool([d.candidates for d in days])
    hpa = sorted((c for c in pooled if c.lead_only), key=lambda c: c.gpu_hours)

    def below(c: Candidate) -> bool:
        if any(h.gpu_hours <= c.gpu_hours and misses(h) <= misses(c) for h in hpa):
            return True
        for a, b in pairwise(hpa):
            if a.gpu_hours <= c.gpu_hours <= b.gpu_hours and b.gpu_hours > a.gpu_hours:
                w = (c.gpu_hours - a.gpu_hours) / (b.gpu_hours - a.gpu_hours)
                return misses(c) > (1.0 - w) * misses(a) + w * misses(b)
        return False

    out = {c.point for c in pooled if not c.lead_only and below(c)}
    kept = tuple(Day(d.end, tuple(c for c in d.candidates if c.point not in out), d.ran) for d in days)
    return decide(kept if out else days, target).best.point


# The days at which a Deployment is taken over by the controller with its history already in Prometheus (``takeover``).
TAKEOVER_DAYS = (2, 3, 4, 5, 6, 7)


def takeover(rec: Recorded, start: int, backfill: bool, target: float = OBJECTIVE[1], assumed: bool = True) -> Replayed:
    """The current rule on ``rec``'s days when the controller first tunes the Deployment at the replay whose newest
    day is ``rec.days[start]`` (an HPA scaled it before; the start point is taken to have run on that day), its
    record then made of that day alone (``backfill`` False: the tuner before the backfill) or of it and the whole days
    before it up to a pool's worth (``tune``'s ``backfill_days``: each the replay a tuning at its end recorded, which
    is what the backfill replays, with what ran unknown, and what the rule would have run there assumed, as ``tune``
    assumes it: ``tuning.assume``; ``assumed`` False: nothing assumed, the tuner before 2026-11-27). Summed over the
    days after ``start``."""
    held: tuple[Day, ...] = ()
    if backfill:
        earlier = [Day(d.end, d.candidates, None) for d in rec.days[max(0, start - DEFAULT_POOL_DAYS + 1):start]]
        held = assume((), earlier, target, start_point()) if assumed else tuple(earlier)
    ran = start_point()
    gpu = missed = 0.0
    choices: list[Point] = []
    for i in range(start, len(rec.days)):
        lived = Day(rec.days[i].end, rec.days[i].candidates, ran)
        if i > start:
            c = lived.realised()
            if c is None:
                raise ValueError(f"{rec.trace}: the point {ran} was not replayed on the day ending {lived.end}")
            gpu += c.gpu_hours
            missed += misses(c)
        held = extend_record(held, lived)
        ran = current_rule(held, target)
        choices.append(ran)
    return Replayed(gpu, missed, tuple(choices))


def takeover_row(recs: Sequence[Recorded], start: int) -> str:
    """One row of the takeover table: per way of starting, the runs an HPA point replayed on the same days dominates
    (no more GPU-hours, no more late requests, one of them fewer: ``tuning.does_better``, as the self-check reads its
    record) and the runs whose days after ``start`` met the objective."""
    cells = []
    for backfill, assumed in ((False, False), (True, False), (True, True)):
        dominated = met = 0
        for r in recs:
            run = takeover(r, start, backfill, assumed=assumed)
            after = pool([d.candidates for d in r.days[start + 1:]])
            requests = after[0].requests if after else 0.0
            dominated += any(c.lead_only and does_better(c, run.gpu_hours, run.missed) for c in after)
            met += requests > 0 and 1.0 - run.missed / requests >= OBJECTIVE[1]
        cells.append(f"{dominated} | {met}")
    # ``rec.days[i]`` ends with day i + 2 of the run (the first replay is of the second day)
    return f"| end of day {start + 2} | {' | '.join(cells)} |"


RULES: dict[str, Rule] = {
    "before the self-check": without_self_check,
    "the self-check, any point from the first day": without_gate,
    "current (the self-check; the HPA's points until 3 days)": current_rule,
    "current + fewest misses x2": fewest_misses_within,
    "current + escape a dominated record": escape,
    "current + hold the HPA point that ran (5%)": hold_hpa_point,
    "current + bands only on or above the HPA's curve": bands_on_the_curve,
    "current + a quarter of the error budget in hand (before 2026-11-27)": with_margin,
    "current, the self-check giving way to a point that meets the objective": objective_first,
}


def markdown(recs: Sequence[Recorded], seconds: float, draws: Sequence[int]) -> str:
    target = OBJECTIVE[1]
    names = list(RULES)
    same = sum(replay(r, current_rule).choices == r.chosen[:len(r.days) - 1] for r in recs)
    lines = [
        "## tuner rules",
        "",
        f"`python -m benchmarks.tuner_rules --draws {','.join(map(str, draws))}`: the self-tuned default recorded on "
        f"{len(recs)} runs (the synthetic shapes' draws {', '.join(map(str, draws))}; 14 days, 120 s pod start-up, "
        "99% / 2 s, the frontier's settings), then each choice rule of `benchmarks/tuner_rules.py` replayed on the "
        "recorded days (every operating point's replay of every day, which equals what the point does live). "
        f"Replaying the current rule gives the live tuner's choices on {same} of {len(recs)} runs. Per rule: the runs "
        "an HPA target dominates, the GPU-hours over the target that dominates it most (summed, and the worst), and "
        f"the runs that meet the objective (of those where some HPA target meets it). {machine()}; "
        f"{seconds:.0f} s.",
        "",
        "| rule | dominated by an HPA target | GPU-h over it: sum, worst | objective met |",
        "|---|---|---|---|",
    ]
    for name in names:
        dominated, total, worst, met, can = 0, 0.0, 0.0, 0, 0
        for r in recs:
            gpu, att, _ = estimate(r, RULES[name])
            e = excess(r, gpu, att)
            if e > 0:
                dominated += 1
                total += e
                worst = max(worst, e)
            if any(a >= target for _, _, a in r.hpa):
                can += 1
                met += att >= target
        lines.append(f"| {name} | {dominated} of {len(recs)} | {100 * total:.1f}%, {100 * worst:.1f}% | "
                     f"{met} of {can} |")
    lines += [
        "",
        f"Taken over with history: the controller first tunes a Deployment an HPA scaled before at the end of day N of "
        f"these runs, and the current rule runs from there; scored on the days after it against each of the "
        f"HPA's own points replayed on the same days (dominated: one of them had no more GPU-hours and no more late "
        "requests, one of them fewer, as the self-check counts it; met: the days after attained the objective), "
        f"of {len(recs)} runs, with the record the first "
        "tuning starts from: that day alone, or that day and the whole days before it, up to a week "
        "(`tuning.tune`'s `backfill_days`), with nothing assumed of what ran on them (before 2026-11-27) or, as "
        "the self-check reads them now, what the rule would have run there (`tuning.assume`, the default).",
        "",
        "| first tuned at | one day: dominated | met | backfilled: dominated | met | backfilled and assumed: dominated "
        "| met |",
        "|---|---|---|---|---|---|---|",
        *(takeover_row(recs, start) for start in TAKEOVER_DAYS),
        "",
        READING,
    ]
    return "\n".join(lines)


READING = """Reading (2026-11-26). Before the self-check the tuner was dominated by an HPA target on 11 of these 32 \
runs, by up to a fifth more GPU-hours than a target that attained as much: on bursty traffic a daily re-choice runs a \
cheap point before a burst it cannot see and, once the burst is in its pool, the safest one for a week, and that mix \
costs more than one point of the HPA's bending curve. No choice rule knows the burst coming (measured while designing \
this: longer pools, hysteresis, a ladder of one step a day, trimming the worst day, choosing once and holding, none \
below 5 of 24 on draws 0-4, and the best of them no better than the old rule on draws 5-8); what the tuner can know is \
its own record. The self-check (``tuning.beaten_by``, ``decide``: run the HPA point that did strictly better than what \
ran over four weeks, unless the week is spending its error budget) is the default since 2026-11-26: 6 of 32 dominated, \
by at most 8%. Designed on draws 0-4 of the shapes with the start-ups of 30-300 s and checked on draws 5-8 before it \
was built: 16 of 60 dominated before, 9 of 60 with it. Its price is the objective: it settles on the HPA point that \
beat a poor record, which can be a cheap one. The first days' gate (``decide``, ``MIN_BAND_DAYS``: the first two \
replays choose the cheapest point meeting the objective among the HPA's own points only) is the default since the same \
day: here 6 of 32 either way and the objective met on 21 of 24 instead of 20; designed on draws 0-8 recorded at pod \
start-ups of 30, 120 and 300 s (108 fortnights): dominated on 21 instead of 24 (8 instead of 10 at 30 s), the \
objective met on 66 of 81 instead of 62. Gating the safest point too, when nothing meets the objective, gained nothing \
there and cost the Alibaba LoRA trace 1.4 points. Measured, not adopted: running the cheapest point within twice the \
fewest misses when nothing meets the objective (5 of 32, two more runs below the objective; on the 108, 24 dominated \
and 57 met); escaping a dominated record by the point whose next day, at its pooled mean, would leave the record \
undominated (9 of 32; on the 108, 32 and 65: a mean day is not the next day, and the switching it adds is what the \
self-check removes); and the HPA's own point sized with the HPA's 10% tolerance (``domain.planner``), which makes it \
tie the HPA and lose the ties (14 of 36 on draws 0-8 at 120 s, from 6). What is left are ties with the HPA's curve \
within a day's noise, on shapes where the forecast adds about nothing to the HPA's own point. The backfill \
(``tuning.tune``'s ``backfill_days``, the default since 2026-11-26; the takeover table): a Deployment an HPA scaled \
until the controller first tunes it used to choose on that one day, gated to the HPA's own points for two more, and \
build its record a day at a time; it now replays the whole days its history holds before that one, up to a week, and \
chooses on them at once. Over the six takeover days of the table (192 takeovers) the days after were dominated by an \
HPA point on 54 instead of 64 and met the objective on 130 instead of 121; designed on the synthetic shapes' draws 0-4 \
and the four trace files (144 takeovers: 41 instead of 45, 98 instead of 92) before this run. Not uniformly: taken \
over at the end of day 8 it is dominated on 11 instead of 9 (a week with a burst in it chooses dear points, as the \
tuner does in its steady state). The simulator's own runs start with no history and tune daily, so nothing is \
backfilled there and every other figure of this page is unchanged. **Counted again 2026-11-27** (the takeover \
table): a takeover counted as dominated when one of the HPA's points had no more GPU-hours and no more late requests \
than it, so a run that held that very point counted (a tie), and sums of the same replays in another order decided \
some in their last bits, both ways; it now counts as the self-check does (``tuning.does_better``: one of them fewer, \
beyond the last bits). The first two pairs of columns moved from 11, 9, 8, 12, 11, 12 and 6, 8, 8, 12, 11, 8 to \
the table's. **Adopted the same day** (the last pair): the self-check reads the backfilled days as running what the \
tuner's own rule would have run there (``tuning.assume``: replayed day by day from the start point, as ``tune`` \
would have chosen at each day's end); the error budget still leaves them out (what users got there is not known). \
Without it a Deployment taken over with a week of history had no record for the self-check to read, and its daily \
re-choice chased bursts for its first days (a cheap point before a burst, a dear one for days after it, on days when \
the HPA point it had left would have served as well): the days after were dominated on 62 of the 192 takeovers \
here, and are on 15, the objective met on 128 instead of 130. Replayed on recordings of other sets the same day: \
draws 9-16, 28 instead of 74 (met on 134 instead of 135); draws 1-8 at 30 s pod start-up, 29 instead of 73 (134 \
instead of 131); at 300 s, 26 instead of 50 (95 instead of 104: the self-check's known price where start-ups are \
long, a cheap HPA point held that beat a poor record); the four trace files, 1 of 24 instead of 5 (22 instead of \
16). Measured 2026-11-27, not adopted (the last two \
rows): holding the HPA point that ran while it meets the requirement unless the choice saves more than 5% of its \
GPU-hours (7 of 32: the switches between the HPA's points in the dominated fortnights are almost all forced, the point \
that ran no longer meeting the requirement; the run it adds, the social stream's draw 5, held a dear point a burst had \
chosen); and leaving out the band points whose replays over the whole record lie below the HPA's curve (7 of 32). The \
second was tried on ``simulate``'s default traffic, where the tuner ran p99 for two days after a bad day, chosen on \
the week's pool, and over the record p99 cost more than the HPA at 0.6 for less: without it the HPA at 0.5 started \
early runs instead, and that fortnight (2,873 GPU-h at 99.51%, replayed as here) is dominated by the HPA at 0.5 (2,854 \
at 99.63%), where the tuner's own (2,779 at 99.43%) is not. What the dominated runs share: the HPA's own point with \
the lead costs about 5% more GPU-hours than the HPA at its target for 0.03-0.12 points (pinned for a fortnight: the \
diurnal shape's draw 4 at 0.5, 2,187 GPU-h at 99.554% against 2,084 at 99.522%; the default traffic at 0.5, 2,982 at \
99.752% against 2,854 at 99.629%, at 0.6 2,512 at 99.311% against 2,403 at 99.218%), about what the HPA's curve sells, \
so it lies on the curve and a fortnight that mixes it with the start point's two days falls just below it. Adopted \
2026-11-27, and the table above re-recorded with it: when no point meets the objective, a forecast band runs as the \
safest point only if it cuts at least a quarter of the misses of the HPA's safest point on the pool \
(``tuning.choose``, ``BAND_MISS_SHARE``). Found on draws 9-16, recorded that day with the rule before: 9 of their 32 \
fortnights were dominated, four of them the social stream's (draws 11, 13, 14 and 15), whose first tunings ran p99, \
which on the pooled days attained 0.03-4.7 points more than the HPA at 0.5 started early (less than a quarter of its \
misses) at 1.5-12 times its GPU-hours, and left the fortnight up to 28% dearer than an HPA target that attained as \
much. Replayed on those recordings with the rule: 7 of 32 dominated, the objective met as often (23 of 24); on draws \
1-8 (these 32) 6 became 5, met 21 of 24 either way; the four trace files made the same choices but one day (the \
Alibaba LoRA trace, where p99 cuts most of the HPA's misses, still runs it: 98.65% at 3.28x the oracle in the frontier \
section, from 98.70%); the takeover table moved by one run in either direction on both sets. A share of a tenth or a \
half gave the same counts on draws 1-8 and 9-16; a cut by GPU-hours instead (a band at most 5-50% dearer than the \
HPA's safest point) or by the line through the HPA's two safest points, measured beside it, also cut the Alibaba LoRA \
trace's p99 (98.70% to 91-94%). Adopted later on 2026-11-27, and the table above re-recorded with it: no margin on top \
of the next day's lower quartile (``tuning.DEFAULT_MARGIN`` 0; before, a replay had to reach a quarter of the error \
budget more, 99.25% for a 99% objective; the last row). On recordings made with the margin, 128 fortnights (draws 1-16 \
at 120 s pod start-up, draws 1-8 at 30 s and at 300 s), an HPA target dominated 21 instead of 25 (4 instead of 5 on \
draws 1-8, 4 instead of 6 on draws 9-16, 7 instead of 8 at 30 s, 6 either way at 300 s), the objective was met on as \
many (82 of 96), for 0.5% fewer GPU-hours; the four trace files made the same choices; recorded again without it (the \
table), the margin replayed is dominated on 6 of the 32. The quartile and the every-day tier (``holds``) already hold \
what a day's noise needs; the margin only made the tuner run a dearer point than the one they pass, and the HPA's \
curve sells that attainment for less. A tenth of the error budget changed nothing on draws 1-16 at 120 s; a twentieth \
gave 4 and 5. Measured the same day, not adopted (the last row): the self-check giving way when the HPA point it holds \
misses the objective on the pool and another point meets it. Where the tuner misses an objective that some HPA target \
meets (most often at 300 s pod start-up: met on 16 of the 24 fortnights where a target meets it), the self-check holds \
a cheap point that beat a poor record, and it can only move to points cheaper than the record. On the 128 fortnights \
it met the objective on 86 of 96 instead of 82, but was dominated on 30 instead of 21, for 1-3.4% more GPU-hours: on \
bursty shapes the two targets pull against each other, and the tuner keeps the self-check."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--draws", default="1,2,3,4,5,6,7,8", metavar="N[,N...]",
                        help="the synthetic shapes' draws to record (default 1-8)")
    parser.add_argument("--jobs", type=int, default=2, help="runs recorded at once (default 2)")
    args = parser.parse_args(argv)
    draws = draw_numbers(args.draws)
    t0 = time.perf_counter()
    recs: list[Recorded] = []
    with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as workers:
        futures = [workers.submit(record, t) for n in draws for t in synthetic_traces(n)]
        for future in as_completed(futures):
            recs.append(future.result())
            print(f"recorded: {recs[-1].trace}", flush=True)
    recs.sort(key=lambda r: r.trace)
    text = markdown(recs, time.perf_counter() - t0, draws)
    print(text)
    update_section("tuner-rules", text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
