"""The tuner-rules benchmark: replaying a rule on the recorded days must be what the tuner does live.

The benchmark's every number rests on two claims: that replaying the tuner's own rule on the days it recorded gives
the choices the live tuner made (else a variant is measured against a copy), and that the variants decide as their
docstrings say. The self-check itself (``tuning.beaten_by``, ``tuning.decide``) is tested in ``test_tuning``.
"""

from __future__ import annotations

from autoscaler.simulation.tuning import LEAD_ONLY_QUANTILE, MIN_BAND_DAYS, Candidate, Day
from benchmarks.backtest import synthetic_traces
from benchmarks.tuner_rules import (
    Recorded,
    bands_on_the_curve,
    current_rule,
    escape,
    estimate,
    fewest_misses_within,
    hold_hpa_point,
    objective_first,
    record,
    replay,
    start_point,
    takeover,
    takeover_row,
    with_margin,
    without_gate,
    without_self_check,
)

HPA = (LEAD_ONLY_QUANTILE, 0.7)
BAND = (90, 1.0)


def _day(end: int, ran: tuple[int, float] | None, hpa: tuple[float, float], band: tuple[float, float]) -> Day:
    """A day with the HPA's point at 0.7 and a band point: (GPU-hours, attainment) each, 1000 requests."""
    return Day(end, (Candidate(HPA[0], hpa[0], hpa[1], 0.0, 0.0, 1000.0, HPA[1]),
                     Candidate(BAND[0], band[0], band[1], 0.0, 0.0, 1000.0, BAND[1])), ran)


def test_replaying_the_current_rule_on_the_recorded_days_gives_the_live_tuners_choices() -> None:
    trace = next(t for t in synthetic_traces() if "bursts" in t.name)
    rec = record(trace, days=5)
    assert len(rec.days) >= 3, "a 5-day run tunes at least three times"
    replayed = replay(rec, current_rule)
    assert replayed.choices == rec.chosen[:len(rec.days) - 1]
    gpu, attained, _ = estimate(rec, current_rule)
    assert (round(gpu, 6), round(attained, 9)) == (round(rec.tuned[0], 6), round(rec.tuned[1], 9))
    # a rule that always runs a point the tuner never chose replays other GPU-hours than the tuner's choices did
    never = next(c.point for c in rec.days[0].candidates if c.point not in {*replayed.choices, start_point()})
    assert replay(rec, lambda days, target: never).gpu_hours != replayed.gpu_hours


def test_with_nothing_meeting_the_objective_the_cheapest_within_twice_the_fewest_misses_runs() -> None:
    # the HPA point misses 3%, the band point 2%: nothing meets 99%; 3% <= 2 x 2%, and the HPA point is cheaper
    days = [_day(86400 * (i + 1), HPA, (10.0, 0.97), (14.0, 0.98)) for i in range(MIN_BAND_DAYS)]
    assert fewest_misses_within(days, 0.99) == HPA
    assert current_rule(days, 0.99) == without_self_check(days, 0.99) == BAND  # the tuner runs the safest
    # 5% is more than twice 2%: the band point runs
    worse = [_day(86400 * (i + 1), HPA, (10.0, 0.95), (14.0, 0.98)) for i in range(MIN_BAND_DAYS)]
    assert fewest_misses_within(worse, 0.99) == BAND


def test_before_three_replayed_days_the_cheapest_meeting_is_one_of_the_hpas_own_points() -> None:
    # the band point is the cheapest meeting 99% on every day: it runs once the record holds MIN_BAND_DAYS days
    days = [_day(86400 * (i + 1), HPA, (14.0, 0.999), (12.0, 0.999)) for i in range(MIN_BAND_DAYS)]
    for n in range(1, MIN_BAND_DAYS):
        assert current_rule(days[:n], 0.99) == HPA
        assert without_gate(days[:n], 0.99) == BAND
    assert current_rule(days, 0.99) == without_gate(days, 0.99) == BAND
    # when no point meets the objective the gate stands aside: the safest runs if it beat the HPA's safest every day
    # (as on a trace where only the bands come near the objective)
    short = [_day(86400 * (i + 1), HPA, (10.0, 0.95), (14.0, 0.98)) for i in range(MIN_BAND_DAYS - 1)]
    assert current_rule(short, 0.99) == current_rule(short[:1], 0.99) == BAND


def test_escape_runs_the_point_that_leaves_a_dominated_record_least_dominated() -> None:
    # the band point ran three days: 36 GPU-h, 6 late; the HPA at 0.7 would have cost 30 for 3 late (it beats the
    # record: the self-check runs it), the HPA at 0.9 18 for 15 late
    cheap = (LEAD_ONLY_QUANTILE, 0.9)

    def day(end: int) -> Day:
        return Day(end, (Candidate(HPA[0], 10.0, 0.999, 0.0, 0.0, 1000.0, HPA[1]),
                         Candidate(cheap[0], 6.0, 0.995, 0.0, 0.0, 1000.0, cheap[1]),
                         Candidate(BAND[0], 12.0, 0.998, 0.0, 0.0, 1000.0, BAND[1])), BAND)

    days = [day(86400 * (i + 1)) for i in range(3)]
    assert current_rule(days, 0.99) == HPA
    # a day more of the HPA at 0.7 keeps the record 15% over it (46 GPU-h against 40); of the HPA at 0.9, 5% (42 for
    # 11 late against 40 for 4): no point frees the record, and the one that leaves it least dominated runs
    assert escape(days, 0.99) == cheap


def test_a_takeover_chooses_first_on_that_day_alone_or_on_the_week_before_it_too() -> None:
    # the band point is cheaper and meets 99% every day: a record of one day is gated to the HPA's own point, a
    # backfilled week is not
    days = tuple(_day(86400 * (i + 1), None, (14.0, 0.999), (12.0, 0.999)) for i in range(10))
    rec = Recorded("t", days, (), (0.0, 1.0), 10_000.0, ())
    alone, backfilled = takeover(rec, 6, False), takeover(rec, 6, True)
    assert alone.choices[0] == HPA
    assert backfilled.choices[0] == BAND
    # scored on the days after the first tuning: three days of what ran
    assert backfilled.gpu_hours == 3 * 12.0
    assert alone.gpu_hours == sum(14.0 if p == HPA else 12.0 for p in alone.choices[:3])
    # the table counts a run an HPA point does better than as dominated: the HPA point costs more here
    assert takeover_row([rec], 6) == "| end of day 8 | 0 | 1 | 0 | 1 | 0 | 1 |"


def _points(end: int, ran: tuple[int, float] | None, *points: tuple[int, float, float, float]) -> Day:
    """A day of (quantile, utilisation, GPU-hours, attainment) points, 1000 requests each."""
    return Day(end, tuple(Candidate(q, g, a, 0.0, 0.0, 1000.0, u) for q, u, g, a in points), ran)


def test_holding_the_hpa_point_that_ran_switches_only_for_more_than_the_saving() -> None:
    dear, cheap = (LEAD_ONLY_QUANTILE, 0.6), (LEAD_ONLY_QUANTILE, 0.7)
    # the HPA at 0.7 is 2% cheaper and misses more (so it does not beat the record): both meet 99% every day
    days = [_points(86400 * (i + 1), dear, (*dear, 10.0, 0.999), (*cheap, 9.8, 0.998)) for i in range(3)]
    assert current_rule(days, 0.99) == cheap
    assert hold_hpa_point(days, 0.99) == dear
    # 10% cheaper: more than the saving, so it runs
    saves = [_points(86400 * (i + 1), dear, (*dear, 10.0, 0.999), (*cheap, 9.0, 0.998)) for i in range(3)]
    assert hold_hpa_point(saves, 0.99) == current_rule(saves, 0.99) == cheap
    # the point that ran no longer meets the objective: the choice runs, dearer or not
    short = [_points(86400 * (i + 1), cheap, (*dear, 10.0, 0.999), (*cheap, 9.8, 0.97)) for i in range(3)]
    assert hold_hpa_point(short, 0.99) == current_rule(short, 0.99) == dear


def test_a_band_point_below_the_hpas_curve_over_the_record_is_left_out() -> None:
    low, high, band = (LEAD_ONLY_QUANTILE, 0.7), (LEAD_ONLY_QUANTILE, 0.5), (90, 1.0)
    # the HPA at 0.7 misses 2%, at 0.5 nothing for half as much again; the band point meets 99% more cheaply, but at
    # 14 GPU-h the line between the two HPA points misses 4 of 1000 and the band 7.5: a mix of them does better
    days = [_points(86400 * (i + 1), None, (*low, 10.0, 0.98), (*high, 15.0, 1.0), (*band, 14.0, 0.9925))
            for i in range(MIN_BAND_DAYS)]
    assert current_rule(days, 0.99) == band
    assert bands_on_the_curve(days, 0.99) == high
    # above the line (2 misses of 1000) it stays, and runs
    above = [_points(86400 * (i + 1), None, (*low, 10.0, 0.98), (*high, 15.0, 1.0), (*band, 14.0, 0.998))
             for i in range(MIN_BAND_DAYS)]
    assert bands_on_the_curve(above, 0.99) == current_rule(above, 0.99) == band


def test_the_margin_of_before_asks_the_replay_for_a_quarter_of_the_error_budget_more() -> None:
    cheap, dear = (LEAD_ONLY_QUANTILE, 0.7), (LEAD_ONLY_QUANTILE, 0.6)
    # the HPA at 0.7 attains 99.1% every day: it meets 99% (no spread), but not 99.25%
    days = [_points(86400 * (i + 1), None, (*cheap, 9.0, 0.991), (*dear, 10.0, 0.999)) for i in range(MIN_BAND_DAYS)]
    assert current_rule(days, 0.99) == cheap
    assert with_margin(days, 0.99) == dear


def test_the_self_check_gives_way_only_to_a_point_that_meets_the_objective() -> None:
    cheap, dear = (LEAD_ONLY_QUANTILE, 0.7), (LEAD_ONLY_QUANTILE, 0.5)
    # a band point ran and did poorly: the HPA at 0.7 beat it (cheaper, fewer misses) but misses 99% too; the HPA at
    # 0.5 meets it at more GPU-hours than what ran
    days = [_points(86400 * (i + 1), BAND, (*BAND, 12.0, 0.95), (*cheap, 10.0, 0.97), (*dear, 15.0, 0.999))
            for i in range(MIN_BAND_DAYS + 1)]
    assert current_rule(days, 0.99) == cheap  # the self-check holds the point that beat the record
    assert objective_first(days, 0.99) == dear
    # when the point the self-check holds meets the objective, it stays
    met = [_points(86400 * (i + 1), BAND, (*BAND, 12.0, 0.95), (*cheap, 10.0, 0.995), (*dear, 15.0, 0.999))
           for i in range(MIN_BAND_DAYS + 1)]
    assert objective_first(met, 0.99) == current_rule(met, 0.99) == cheap


def test_the_takeover_table_counts_a_run_that_held_one_hpa_point_as_tying_with_it_not_dominated() -> None:
    # the HPA's point and a band point cost and attain the same every day: a run on either ties with the HPA's
    # point, which did no better (counting ties as dominated had put such runs among the dominated ones)
    days = tuple(_day(86400 * (i + 1), None, (12.0, 0.999), (12.0, 0.999)) for i in range(10))
    rec = Recorded("t", days, (), (0.0, 1.0), 10_000.0, ())
    assert takeover_row([rec], 6) == "| end of day 8 | 0 | 1 | 0 | 1 | 0 | 1 |"
