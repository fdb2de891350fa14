"""The synthetic traffic generator (``autoscaler.synth``) and ``predictive-autoscaler trace synth``.

Each property the module documents is measured on the traces it makes, against its own constants: the daily
peak-to-trough, the weekend, the bursts, the regime change, the token lengths, how the shapes differ, and that a
seed fixes the trace. The CLI writes a file that ``load_trace`` reads back to the very trace, and the main job's
default path (``simulate`` with no trace) says its traffic is synthetic.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import SupportsInt, cast

import numpy as np
import pandas as pd
import pytest

from autoscaler import synth
from autoscaler.cli import main
from autoscaler.synth import SHAPES, START, regime_change_time, synth_name, synth_trace
from autoscaler.traces import Trace, load_trace

DAY = 86_400


@pytest.fixture(scope="module")
def traces() -> dict[str, Trace]:
    """The default two weeks of each shape."""
    return {shape: synth_trace(shape=shape) for shape in SHAPES}


def counts(trace: Trace) -> np.ndarray:
    return trace.requests.values * trace.step_seconds


def weekday(times: np.ndarray) -> np.ndarray:
    return (times // DAY + 3) % 7  # 0 = Monday (1970-01-01 was a Thursday)


def before_the_change(trace: Trace) -> np.ndarray:
    return trace.requests.timestamps() < regime_change_time(trace.requests.start, trace.duration_seconds / DAY)


def hour_of_day_medians(trace: Trace) -> pd.Series:
    """The median count per hour of day, over the weekdays before the regime change (bursts barely move a median)."""
    t = trace.requests.timestamps()
    keep = before_the_change(trace) & (weekday(t) < 5)
    return pd.Series(counts(trace)[keep]).groupby((t[keep] % DAY) // 3600).median()


def share_above_the_local_median(trace: Trace, factor: float = 1.8) -> float:
    """The share of bins above ``factor`` times the median of the two hours around them: burst minutes."""
    c = counts(trace)
    local = pd.Series(c).rolling(121, center=True, min_periods=30).median().to_numpy()
    return float(np.mean(c > factor * local))


def test_the_same_seed_gives_the_same_trace_and_another_seed_another() -> None:
    a = synth_trace(days=2, seed=3)
    b = synth_trace(days=2, seed=3)
    c = synth_trace(days=2, seed=4)
    assert np.array_equal(a.requests.values, b.requests.values)
    for column in ("input_tokens", "output_tokens"):
        assert np.array_equal(a.tokens[column].values, b.tokens[column].values)
    assert not np.array_equal(a.requests.values, c.requests.values)
    assert np.mean(a.requests.values != c.requests.values) > 0.9
    assert a.name == "synthetic:diurnal:seed=3:days=2" == synth_name("diurnal", 3, 2)


def test_the_default_is_two_weeks_of_one_minute_bins_from_a_fixed_monday(traces: dict[str, Trace]) -> None:
    trace = traces["diurnal"]
    assert trace.step_seconds == synth.DEFAULT_STEP_SECONDS == 60
    assert len(trace.requests) == 14 * 1440
    assert trace.requests.start == START
    assert weekday(np.array([START]))[0] == 0
    assert trace.name == synth_name()
    assert not np.isnan(trace.requests.values).any()
    assert np.allclose(counts(trace), np.round(counts(trace)), rtol=0, atol=1e-6)  # whole requests per bin


def test_the_daily_cycle_has_the_documented_peak_to_trough(traces: dict[str, Trace]) -> None:
    medians = hour_of_day_medians(traces["diurnal"])
    ratio = medians.max() / medians.min()
    assert ratio == pytest.approx(synth.DAILY_PEAK_TO_TROUGH, rel=0.15)
    busiest = int(cast(SupportsInt, medians.idxmax()))  # cast: an hour of the index (pandas-stubs: Hashable)
    assert abs(busiest - synth.PEAK_HOUR) <= 3  # a plateau around the peak hour
    quietest = int(cast(SupportsInt, medians.idxmin()))
    assert min(abs(quietest - (synth.PEAK_HOUR + 12) % 24), 24 - abs(quietest - (synth.PEAK_HOUR + 12) % 24)) <= 3


def test_weekends_are_quieter_by_the_documented_factor(traces: dict[str, Trace]) -> None:
    trace = traces["diurnal"]
    t = trace.requests.timestamps()
    first_week = t < START + 7 * DAY  # before the regime change
    c = counts(trace)
    weekend = c[first_week & (weekday(t) >= 5)].mean()
    weekdays = c[first_week & (weekday(t) < 5)].mean()
    assert weekend / weekdays == pytest.approx(synth.WEEKEND_FACTOR, abs=0.08)


def test_the_level_shifts_by_the_documented_factor_part_way_through(traces: dict[str, Trace]) -> None:
    for shape, expected in (("diurnal", synth.REGIME_SHIFT), ("flat", 1.0)):
        trace = traces[shape]
        t = trace.requests.timestamps()
        after = regime_change_time(START, 14) + synth.REGIME_RAMP_SECONDS
        window = (t >= after) & (t < after + 2 * DAY)
        week_before = (t >= after - 7 * DAY) & (t < after - 5 * DAY)  # the same hours of the same weekdays
        ratio = counts(trace)[window].mean() / counts(trace)[week_before].mean()
        assert ratio == pytest.approx(expected, rel=0.12), shape


def test_bursts_are_present_and_the_bursty_shape_has_many_more(traces: dict[str, Trace]) -> None:
    flat = share_above_the_local_median(traces["flat"])
    diurnal = share_above_the_local_median(traces["diurnal"])
    bursty = share_above_the_local_median(traces["bursty"])
    assert flat < 0.001  # the noise alone almost never doubles the rate
    assert diurnal > 5 * max(flat, 1 / len(traces["flat"].requests))
    assert bursty > 4 * diurnal
    c = counts(traces["diurnal"])
    assert c.max() > 2 * np.median(c)


def test_the_shapes_differ_flat_has_no_cycle_and_bursty_the_highest_variation(traces: dict[str, Trace]) -> None:
    flat = hour_of_day_medians(traces["flat"])
    assert flat.max() / flat.min() < 1.25  # noise only, far from the daily cycle's 3x
    bursty = hour_of_day_medians(traces["bursty"])
    assert bursty.max() / bursty.min() > 0.8 * synth.DAILY_PEAK_TO_TROUGH  # the same cycle (its hours raised by bursts)

    def cv(trace: Trace) -> float:
        c = counts(trace)
        return float(c.std() / c.mean())

    def local_cv(trace: Trace) -> float:  # about the hour's median: the cycle left out
        c = counts(trace)
        local = pd.Series(c).rolling(61, center=True, min_periods=30).median().to_numpy()
        return float(np.nanstd(c / local))

    assert cv(traces["flat"]) < cv(traces["diurnal"]) < cv(traces["bursty"])
    assert local_cv(traces["bursty"]) > 2 * local_cv(traces["diurnal"])
    assert local_cv(traces["flat"]) == pytest.approx(synth.NOISE_CV, rel=0.25)  # the noise, Poisson adding little


def test_without_tokens_the_requests_are_the_same_and_no_token_column() -> None:
    for shape in SHAPES:
        full = synth_trace(days=2, seed=5, shape=shape)
        bare = synth_trace(days=2, seed=5, shape=shape, tokens=False)
        assert np.array_equal(bare.requests.values, full.requests.values)
        assert (bare.name, bare.requests.start) == (full.name, full.requests.start)
        assert not bare.tokens


def test_token_columns_have_the_documented_lengths_per_request(traces: dict[str, Trace]) -> None:
    share = synth.CODE_SHARE
    prompt = share * synth.CODE_PROMPT_MEAN + (1 - share) * synth.CONVERSATION_PROMPT_MEAN
    output = share * synth.CODE_OUTPUT_MEAN + (1 - share) * synth.CONVERSATION_OUTPUT_MEAN
    for trace in traces.values():
        requests = counts(trace)
        inputs = trace.tokens["input_tokens"].values * 60
        outputs = trace.tokens["output_tokens"].values * 60
        assert inputs.sum() / requests.sum() == pytest.approx(prompt, rel=0.03)
        assert outputs.sum() / requests.sum() == pytest.approx(output, rel=0.05)
        assert np.all(inputs >= requests)
        assert np.all(outputs >= requests)
        assert np.allclose(inputs, np.round(inputs), rtol=0, atol=1e-6)  # whole tokens
        # a bin's tokens follow its requests: the busiest bins carry the most tokens
        assert np.corrcoef(requests, inputs)[0, 1] > 0.9


def test_a_coarser_step_keeps_the_level_and_the_bin_size() -> None:
    fine = synth_trace(days=2, step_seconds=60)
    coarse = synth_trace(days=2, step_seconds=600)
    odd = synth_trace(days=2, step_seconds=45)
    assert (coarse.step_seconds, len(coarse.requests)) == (600, 2 * 144)
    assert (odd.step_seconds, len(odd.requests)) == (45, 2 * DAY // 45)
    for other in (coarse, odd):
        assert np.mean(other.requests.values) == pytest.approx(np.mean(fine.requests.values), rel=0.1)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"shape": "spiky"}, "unknown shape 'spiky'"),
    ({"days": 0.0}, "days must be a positive number"),
    ({"days": 1 / 86_400}, "fewer than two bins"),
    ({"step_seconds": 0}, "at least a second"),
    ({"days": 1e6, "step_seconds": 86_400}, "more than the 10,000,000 a trace may hold"),  # bounded before allocating
])
def test_bad_arguments_are_value_errors(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        synth_trace(**kwargs)  # type: ignore[arg-type]


def test_the_cli_writes_a_file_that_loads_back_as_the_same_trace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "synth.csv"
    assert main(["trace", "synth", "--days", "1", "--seed", "5", "--shape", "bursty", "-o", str(out)]) == 0
    said = capsys.readouterr().out
    assert str(out) in said
    assert "synthetic:bursty:seed=5:days=1" in said
    loaded = load_trace(out)
    made = synth_trace(days=1, seed=5, shape="bursty")
    assert loaded.step_seconds == 60
    assert np.array_equal(loaded.requests.values, made.requests.values)
    for column in ("input_tokens", "output_tokens"):
        assert np.array_equal(loaded.tokens[column].values, made.tokens[column].values)
    header, first = out.read_text().splitlines()[:2]
    assert header == "timestamp,requests,input_tokens,output_tokens"
    assert first.split(",")[0] == str(START)
    assert "." not in first  # whole counts are written whole

    packed = tmp_path / "synth.csv.gz"
    assert main(["trace", "synth", "--days", "1", "--seed", "5", "--shape", "bursty", "-o", str(packed)]) == 0
    assert gzip.decompress(packed.read_bytes()) == out.read_bytes()


def test_the_cli_writes_to_stdout_with_the_step_asked_for(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["trace", "synth", "--days", "0.5", "--step", "10m"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "timestamp,requests,input_tokens,output_tokens"
    assert len(lines) == 1 + 72
    assert int(lines[2].split(",")[0]) - int(lines[1].split(",")[0]) == 600


@pytest.mark.parametrize(("argv", "message"), [
    (["--days", "0"], "--days: must be positive, got 0"),
    (["--days", "-2"], "--days: must be positive, got -2"),
    (["--days", "two"], "--days: 'two' is not a number of days"),
    (["--seed", "-1"], "--seed: must be >= 0, got -1"),
    (["--seed", "1.5"], "--seed: '1.5' is not an integer"),
    (["--shape", "spiky"], "--shape: unknown shape 'spiky'; choose from diurnal, bursty, flat"),
    (["--step", "0.2s"], "--step: must be at least 1s, got 0.2s"),
])
def test_bad_flags_are_one_line_and_exit_2(capsys: pytest.CaptureFixture[str], argv: list[str],
                                           message: str) -> None:
    assert main(["trace", "synth", *argv]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == f"predictive-autoscaler trace synth: error: {message}\n"


def test_trace_without_a_subcommand_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["trace"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "synth, from-log" in err


def test_simulate_without_a_trace_replays_the_synthetic_default_and_says_so(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["simulate", "--json", "--policies", "oracle"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["trace"] == synth_name()
    assert payload["trace"].startswith("synthetic:diurnal:seed=")

    assert main(["simulate", "--policies", "oracle"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"The traffic is synthetic ({synth_name()}")
    for how in ("--trace FILE.csv", "trace from-log", "--deployment NS/NAME", "export --deployment"):
        assert how in lines[0]
    assert any(line.startswith(f"Simulated {synth_name()}: 14.0 days of 1-minute bins") for line in lines)


def test_simulate_with_a_trace_does_not_call_it_synthetic(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "mine.csv"
    assert main(["trace", "synth", "--days", "1", "--shape", "flat", "-o", str(path)]) == 0
    capsys.readouterr()
    assert main(["simulate", "--trace", str(path), "--policies", "oracle"]) == 0
    out = capsys.readouterr().out
    assert "The traffic is synthetic" not in out
    assert out.startswith("Simulated mine.csv")
