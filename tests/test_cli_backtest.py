"""``predictive-autoscaler backtest`` end to end: real traces on disk, the real registry models.

Runs through ``autoscaler.cli.main`` (capturing stdout/stderr) and, once, through the installed
console script in a subprocess. Traces are small synthetic CSVs (a daily cycle with Poisson noise,
10-minute bins) so every model, Prophet included, finishes in seconds.
"""

from __future__ import annotations

import gzip
import io
import json
import math
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from autoscaler.cli import main
from autoscaler.plotting import plot_backtest
from autoscaler.synth import synth_name
from models.evaluation import ModelResult

MODEL_NAMES = ("default", "persistence", "seasonal_naive", "holt_winters", "prophet")
METRIC_KEYS = {"wape", "pinball", "coverage", "bias", "fit_seconds", "predict_seconds", "fallbacks"}


def write_trace(path: Path, days: float = 4, step: int = 600, tokens: bool = False, seed: int = 7) -> Path:
    rng = np.random.default_rng(seed)
    n = int(days * 86_400 // step)
    t = 1_700_000_000 + step * np.arange(n)
    rate = 2.0 * (1.0 + 0.6 * np.sin(2 * np.pi * (t % 86_400) / 86_400))  # requests/s
    counts = rng.poisson(rate * step)
    lines = ["timestamp,requests" + (",input_tokens,output_tokens" if tokens else "")]
    for ts, c in zip(t, counts, strict=True):
        lines.append(f"{ts},{c}" + (f",{c * 900},{c * 120}" if tokens else ""))
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    return write_trace(tmp_path / "cycle_10min.csv")


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, object]:
    assert main(["backtest", *argv, "--json"]) == 0
    out, err = capsys.readouterr()
    assert err == ""  # no progress bar when stderr is not a terminal
    payload = json.loads(out)  # exactly one JSON document and nothing else
    assert isinstance(payload, dict)
    return payload


def test_json_reports_every_model_with_the_documented_keys(capsys: pytest.CaptureFixture[str], trace: Path) -> None:
    payload = run_json(capsys, "--trace", str(trace), "--origin-every", "1h")
    assert set(payload) == {"trace", "horizon_seconds", "level", "models"}
    assert payload["trace"] == str(trace)
    assert payload["horizon_seconds"] == 1200  # 15m rounded up to two 10-minute bins
    assert payload["level"] == 90
    models = payload["models"]
    assert isinstance(models, dict)
    assert list(models) == list(MODEL_NAMES)
    for name, m in models.items():
        assert set(m) == METRIC_KEYS, name
        assert 0 < m["wape"] < 1, name
        assert 0 <= m["coverage"] <= 1, name
        assert m["pinball"] > 0, name
        assert m["fit_seconds"] > 0, name
        assert m["predict_seconds"] > 0, name
        assert isinstance(m["fallbacks"], int), name


def test_persistence_matches_an_independent_computation(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = write_trace(tmp_path / "t.csv", days=3)
    payload = run_json(
        capsys, "--trace", str(path), "--models", "persistence", "--horizon", "30m", "--origin-every", "20m"
    )
    y = np.loadtxt(path, delimiter=",", skiprows=1)[:, 1] / 600
    h, first, every = 3, (len(y) - 3) // 2, 2  # defaults on a 3-day trace: first origin at half of n - h
    origins = np.arange(first, len(y) - h + 1, every)
    actual, point = y[origins + h - 1], y[origins - 1]
    m = payload["models"]["persistence"]  # type: ignore[index]
    assert m["wape"] == pytest.approx(np.abs(actual - point).sum() / actual.sum())
    assert m["bias"] == pytest.approx((point.sum() - actual.sum()) / actual.sum())
    assert payload["horizon_seconds"] == 1800


def test_table_output_is_readable(capsys: pytest.CaptureFixture[str], trace: Path) -> None:
    assert main(["backtest", "--trace", str(trace), "--models", "default,persistence"]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    lines = out.splitlines()
    assert "cycle_10min.csv" in lines[0]
    assert "horizon 20m (15m rounded up to whole 10m bins)" in lines[0]
    header = next(line for line in lines if line.startswith("model"))
    for column in ("WAPE", "pinball", "p90 cover", "bias", "fit s", "predict ms", "fallbacks"):
        assert column in header
    rows = {line.split()[0]: line.split() for line in lines if line.split() and line.split()[0] in MODEL_NAMES}
    assert set(rows) == {"default", "persistence"}
    assert all(math.isfinite(float(v)) for v in rows["default"][1:5])


def test_token_series_can_be_backtested(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = write_trace(tmp_path / "tok.csv", tokens=True)
    req = run_json(capsys, "--trace", str(path), "--models", "persistence")
    tok = run_json(capsys, "--trace", str(path), "--models", "persistence", "--series", "input_tokens")
    # tokens are requests x 900 here, so the scale-free metrics agree and the series really changed
    r, t = req["models"]["persistence"], tok["models"]["persistence"]  # type: ignore[index]
    assert t["wape"] == pytest.approx(r["wape"])
    assert t["pinball"] == pytest.approx(r["pinball"])


def test_levels_changes_the_band_scored(capsys: pytest.CaptureFixture[str], trace: Path) -> None:
    low = run_json(capsys, "--trace", str(trace), "--models", "default", "--levels", "50")
    high = run_json(capsys, "--trace", str(trace), "--models", "default", "--levels", "99")
    assert low["level"] == 50
    assert high["level"] == 99
    assert high["models"]["default"]["coverage"] > low["models"]["default"]["coverage"]  # type: ignore[index]


def test_synthetic_traffic_is_the_default(capsys: pytest.CaptureFixture[str]) -> None:
    payload = run_json(capsys, "--models", "persistence", "--origin-every", "1h")
    assert payload["trace"] == synth_name()
    assert str(payload["trace"]).startswith("synthetic:diurnal:seed=")
    assert payload["horizon_seconds"] == 900
    assert payload["models"]["persistence"]["wape"] > 0  # type: ignore[index]


def test_the_table_says_the_default_traffic_is_synthetic_and_how_to_replay_real_traffic(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["backtest", "--models", "persistence", "--origin-every", "6h"]) == 0
    out = capsys.readouterr().out
    first = out.splitlines()[0]
    assert first.startswith(f"The traffic is synthetic ({synth_name()}")
    for how in ("--trace FILE.csv", "trace from-log", "export --deployment"):
        assert how in first


class TerminalBuffer(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_bar_only_on_a_terminal(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, trace: Path
) -> None:
    terminal = TerminalBuffer()
    monkeypatch.setattr(sys, "stderr", terminal)
    assert main(["backtest", "--trace", str(trace), "--models", "persistence", "--json"]) == 0
    out, _ = capsys.readouterr()
    json.loads(out)
    drawn = terminal.getvalue()
    assert "backtest [" in drawn
    assert "100%" in drawn
    assert drawn.endswith("\r")  # the bar is erased, leaving the terminal clean


def read_png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    return int(width), int(height)


def test_plot_writes_a_readable_png(capsys: pytest.CaptureFixture[str], trace: Path, tmp_path: Path) -> None:
    out_png = tmp_path / "plots" / "bt.png"
    argv = ["backtest", "--trace", str(trace), "--models", "default,persistence,seasonal_naive", "--plot", str(out_png)]
    assert main(argv) == 0
    out, _ = capsys.readouterr()
    assert f"plot written to {out_png}" in out
    width, height = read_png_size(out_png)
    assert width >= 1000
    assert height >= 500
    assert 30_000 < out_png.stat().st_size < 5_000_000


def test_plot_to_an_unwritable_place_is_one_line(capsys: pytest.CaptureFixture[str], trace: Path) -> None:
    target = trace.parent / "a-file"
    target.write_text("")
    code = main(["backtest", "--trace", str(trace), "--models", "persistence", "--plot", str(target / "x.png")])
    _, err = capsys.readouterr()
    assert code == 2
    assert err.count("\n") == 1
    assert "--plot: cannot write" in err


BAD_TRACES = {
    "missing_column": ("time,requests\n0,1\n600,2\n", "missing column(s) timestamp"),
    "unsorted": ("timestamp,requests\n600,1\n0,2\n1200,3\n", "not sorted"),
    "duplicate": ("timestamp,requests\n0,1\n0,2\n600,3\n", "duplicate timestamp 0"),
}


@pytest.mark.parametrize("case", sorted(BAD_TRACES))
def test_bad_trace_files_exit_2_with_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path, case: str) -> None:
    text, needle = BAD_TRACES[case]
    path = tmp_path / f"{case}.csv"
    path.write_text(text)
    assert main(["backtest", "--trace", str(path), "--models", "persistence"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("\n") == 1
    assert err.startswith("predictive-autoscaler backtest: error: ")
    assert needle in err


@pytest.mark.parametrize(
    ("extra", "needles"),
    [
        (["--models", "persistence,arima"], ["arima", *MODEL_NAMES]),
        (["--models", ","], ["no model named", "persistence"]),
        (["--levels", "abc"], ["--levels", "1..99"]),
        (["--levels", "0"], ["--levels", "1..99"]),
        (["--levels", "100"], ["--levels", "1..99"]),
        (["--levels", "90,99"], ["--levels", "1..99"]),
        (["--horizon", "soon"], ["--horizon", "invalid duration 'soon'"]),
        (["--horizon=-5m"], ["--horizon", "must be positive"]),
        (["--refit-every", "daily"], ["--refit-every", "invalid duration"]),
        (["--origin-every", "0"], ["--origin-every", "must be positive"]),
        (["--series", "input_tokens"], ["no input_tokens column", "requests"]),
        (["--series", "latency"], ["--series", "requests, input_tokens, output_tokens"]),
        (["--horizon", "4d"], ["too little history", "needs at least", "the series has 576"]),
        (["--min-train", "4d"], ["too little history", "the series has 576 (4d)"]),
    ],
)
def test_bad_arguments_exit_2_with_one_clear_line(
    capsys: pytest.CaptureFixture[str], trace: Path, extra: list[str], needles: list[str]
) -> None:
    argv = ["backtest", "--trace", str(trace), "--models", "persistence", *extra]
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("\n") == 1, err
    for needle in needles:
        assert needle in err


def test_console_script_runs_and_fails_cleanly(tmp_path: Path, trace: Path) -> None:
    # The console script installed beside this interpreter (the venv's bin/, activated or not).
    exe = shutil.which("predictive-autoscaler", path=str(Path(sys.executable).parent))
    assert exe is not None, "the package's console script is not installed (bash scripts/install.sh --dev)"
    ok = subprocess.run(
        [exe, "backtest", "--trace", str(trace), "--models", "persistence,default", "--json"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert ok.returncode == 0, ok.stderr
    assert ok.stderr == ""
    assert set(json.loads(ok.stdout)["models"]) == {"persistence", "default"}

    short = write_trace(tmp_path / "short.csv", days=0.1)  # 14 bins of 10 minutes
    bad = subprocess.run(
        [exe, "backtest", "--trace", str(short), "--horizon", "3h"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert bad.returncode == 2
    assert bad.stdout == ""
    assert bad.stderr.count("\n") == 1
    assert "too little history" in bad.stderr
    assert "the series has 14" in bad.stderr


def test_metrics_outages_are_not_scored_unless_asked(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = write_trace(tmp_path / "outage.csv", days=4)
    rows = path.read_text().splitlines()
    for i in range(400, 412):  # two hours of zeros in the middle of ~1,200 requests per bin: a collection outage
        ts = rows[i + 1].split(",")[0]
        rows[i + 1] = f"{ts},0"
    path.write_text("\n".join(rows) + "\n")
    argv = ["backtest", "--trace", str(path), "--models", "persistence"]
    assert main(argv) == 0
    out, _ = capsys.readouterr()
    assert "12 bins look like metrics outages" in out
    clean = run_json(capsys, *argv[1:])
    raw = run_json(capsys, *argv[1:], "--score-outages")
    # scoring forecasts of real demand against the outage zeros can only add error
    assert raw["models"]["persistence"]["wape"] > clean["models"]["persistence"]["wape"]  # type: ignore[index]


def _result(name: str, n: int, start: int, step: int, wape: float) -> ModelResult:
    actual = 1.0 + np.sin(np.arange(n) / 20.0) ** 2
    return ModelResult(
        name=name,
        wape=wape,
        pinball=0.1,
        coverage=0.9,
        bias=0.0,
        fit_seconds=0.1,
        predict_seconds=0.001,
        fallbacks=0,
        n_forecasts=n,
        target_timestamps=start + step * np.arange(n, dtype=np.int64),
        actual=actual,
        point=actual * 0.95,
        upper=actual * 1.3,
    )


@pytest.mark.parametrize("start", [0, 1_700_000_000])  # offsets from trace start, and Unix time
def test_plot_backtest_directly(tmp_path: Path, start: int) -> None:
    results = {
        "persistence": _result("persistence", 500, start, 600, 0.2),
        "other": _result("other", 500, start, 600, math.nan),  # undefined WAPE is drawn as n/a, not a crash
    }
    out_png = tmp_path / "p.png"
    plot_backtest(results, out_png, trace_name="t.csv", horizon_seconds=900, level=90)
    assert read_png_size(out_png)[0] >= 1000
    with pytest.raises(ValueError, match="no model results"):
        plot_backtest({}, out_png, trace_name="t.csv", horizon_seconds=900, level=90)
    with pytest.raises(ValueError, match="none of"):
        plot_backtest(results, out_png, trace_name="t.csv", horizon_seconds=900, level=90, show=["prophet"])


def test_default_origin_cadence_is_every_bin(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = write_trace(tmp_path / "t.csv", days=4, step=60)
    assert main(["backtest", "--trace", str(path), "--models", "persistence"]) == 0
    out, _ = capsys.readouterr()
    # 5,760 bins, first origin at half of what the 15-bin horizon leaves (2,872): origins 2,872..5,745
    assert out.splitlines()[1].startswith("2874 origins per model, every 1m after the first 2.0d")
    assert main(["backtest", "--trace", str(path), "--models", "persistence", "--origin-every", "5m"]) == 0
    out, _ = capsys.readouterr()
    assert out.splitlines()[1].startswith("575 origins per model, every 5m")


# -- bad input as a new user meets it -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("suffix", "magic"),
    [("jpg", b"\xff\xd8\xff"), ("pdf", b"%PDF-"), ("svg", b"<?xml"), ("PNG", b"\x89PNG\r\n\x1a\n")],
)
def test_plot_is_written_in_the_format_its_suffix_names(
    capsys: pytest.CaptureFixture[str], trace: Path, tmp_path: Path, suffix: str, magic: bytes
) -> None:
    out = tmp_path / f"bt.{suffix}"
    assert main(["backtest", "--trace", str(trace), "--models", "persistence", "--origin-every", "1h",
                 "--plot", str(out)]) == 0
    assert f"plot written to {out}" in capsys.readouterr().out
    assert out.read_bytes().startswith(magic)


def test_an_unsupported_plot_suffix_is_refused_before_the_backtest(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # the synthetic two-week default and every model would take minutes: the error must come first
    code = main(["backtest", "--plot", str(tmp_path / "bt.gif")])
    _, err = capsys.readouterr()
    assert code == 2
    assert err == (f"predictive-autoscaler backtest: error: --plot: {tmp_path / 'bt.gif'}: cannot write .gif images; "
                   "use one of .png, .svg, .pdf, .jpg, .jpeg, .webp\n")
    assert not (tmp_path / "bt.gif").exists()


def test_a_gzipped_trace_with_a_byte_order_mark(capsys: pytest.CaptureFixture[str], trace: Path,
                                                 tmp_path: Path) -> None:
    packed = tmp_path / "export.csv.gz"
    packed.write_bytes(gzip.compress(b"\xef\xbb\xbf" + trace.read_bytes()))
    plain = run_json(capsys, "--trace", str(trace), "--models", "persistence", "--origin-every", "1h")
    again = run_json(capsys, "--trace", str(packed), "--models", "persistence", "--origin-every", "1h")
    assert again["models"]["persistence"]["wape"] == plain["models"]["persistence"]["wape"]  # type: ignore[index]


def test_a_binary_trace_is_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "trace.parquet"
    path.write_bytes(b"PAR1" + bytes(range(256)) * 4)
    assert main(["backtest", "--trace", str(path), "--models", "persistence"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith(f"predictive-autoscaler backtest: error: {path}: not a text CSV")
    assert err.count("\n") == 1


# -- gaps, NaN values, a plot that fails at the end, progress in a log ------------------------------------------------


def _with_gap(path: Path, days_before: float, gap_days: float, days_after: float, step: int = 600) -> Path:
    """A daily cycle, then nothing for ``gap_days`` (rows absent: missing data), then the cycle again."""
    before = write_trace(path.with_name("before.csv"), days=days_before, step=step)
    after = write_trace(path.with_name("after.csv"), days=days_after, step=step, seed=8)
    shift = int((days_before + gap_days) * 86_400)
    rows = before.read_text().splitlines()
    for row in after.read_text().splitlines()[1:]:
        ts, count = row.split(",")
        rows.append(f"{int(ts) + shift},{count}")
    path.write_text("\n".join(rows) + "\n")
    return path


def test_a_gap_as_long_as_the_fit_window_is_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = _with_gap(tmp_path / "gap.csv", days_before=3, gap_days=3, days_after=3)
    argv = ["backtest", "--trace", str(path), "--models", "persistence", "--origin-every", "1h"]
    assert main([*argv, "--window", "2d"]) == 2  # after the gap, a 2-day window holds nothing to fit on
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("\n") == 1
    assert "the longest gap is 3d" in err
    assert "as long as the fit window (2d, --window)" in err
    payload = run_json(capsys, *argv[1:], "--window", "4d")  # a window longer than the gap: scored around it
    assert payload["models"]["persistence"]["wape"] > 0  # type: ignore[index]


def test_nan_values_are_said_in_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = write_trace(tmp_path / "nan.csv", days=3)
    rows = path.read_text().splitlines()
    for i in (10, 20, 30):
        rows[i] = rows[i].split(",")[0] + ",nan"
    path.write_text("\n".join(rows) + "\n")
    assert main(["backtest", "--trace", str(path), "--models", "persistence", "--json"]) == 0
    out, err = capsys.readouterr()
    json.loads(out)
    assert err == (f"predictive-autoscaler backtest: warning: {path}: 3 values are NaN; they are read as missing data "
                   "(gaps, not scored), not as zeros\n")


def test_a_plot_that_fails_at_the_end_still_prints_the_table(
    capsys: pytest.CaptureFixture[str], trace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import autoscaler.commands.backtest as command
    from models.evaluation import backtest as real  # what the command calls (command.backtest)

    plot = tmp_path / "later" / "bt.png"  # a directory the plot would create: fine when checked

    def then_block_the_directory(*args: object, **kwargs: object) -> object:
        result = real(*args, **kwargs)  # type: ignore[arg-type]
        (tmp_path / "later").write_text("")  # something took the directory's name during the run
        return result

    monkeypatch.setattr(command, "backtest", then_block_the_directory)
    code = main(["backtest", "--trace", str(trace), "--models", "persistence", "--origin-every", "1h",
                 "--plot", str(plot)])
    out, err = capsys.readouterr()
    assert code == 1
    assert "persistence" in out  # the scores are out
    assert "plot written" not in out
    assert err.count("\n") == 1
    assert err.startswith(f"predictive-autoscaler backtest: error: --plot: cannot write {plot}: ")


def test_progress_is_a_line_every_few_seconds_without_a_terminal(
    capsys: pytest.CaptureFixture[str], trace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import autoscaler.progress as progress

    monkeypatch.setattr(progress, "LINE_EVERY_SECONDS", 0.0)  # a line at every step instead of every 10 s
    assert main(["backtest", "--trace", str(trace), "--models", "persistence", "--origin-every", "6h",
                 "--json"]) == 0
    out, err = capsys.readouterr()
    json.loads(out)
    lines = err.splitlines()
    assert lines
    assert "\r" not in err  # no terminal bar in a log
    assert all(line.startswith("backtest: ") and line.endswith("s elapsed") for line in lines), lines
    assert "(persistence)" in lines[-1]
    assert "100%" in lines[-1]


def test_a_model_left_without_history_during_the_run_is_one_line(
    capsys: pytest.CaptureFixture[str], trace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import autoscaler.commands.backtest as command
    from models.base import InsufficientHistoryError

    def no_history(*_: object, **__: object) -> None:
        raise InsufficientHistoryError("no model of the persistence chain could be fitted (persistence: needs 1 "
                                       "bins, has 0)")

    monkeypatch.setattr(command, "backtest", no_history)
    assert main(["backtest", "--trace", str(trace), "--models", "persistence"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == (f"predictive-autoscaler backtest: error: {trace.name}: no model of the persistence chain could be "
                   "fitted (persistence: needs 1 bins, has 0)\n")
