"""``predictive-autoscaler simulate`` end to end: JSON contract, table, plot, sizing and one-line errors."""

from __future__ import annotations

import gzip
import json
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from autoscaler.cli import main

KEYS = [
    "gpu_hours", "cost_usd", "slo_attainment", "wait_p99_seconds", "dropped_fraction", "unserved_fraction",
    "cold_start_requests", "scale_events", "max_replicas",
    "ceiling_breaches", "gangs_split", "gang_wait_hours", "ceiling_unserved_fraction", "gangs_missed",
    "gangs_preempted",
]


def _write_trace(path: Path, counts: np.ndarray, step: int = 60) -> Path:
    lines = ["timestamp,requests"] + [f"{1_700_000_000 + i * step},{int(c)}" for i, c in enumerate(counts)]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    # 8 hours of 1-minute bins: a slow hump from 60 to 600 requests/minute and back, with a short spike
    minutes = np.arange(8 * 60)
    counts = 60 + 540 * np.sin(np.pi * minutes / minutes.size) ** 2
    counts[300:303] *= 1.8
    return _write_trace(tmp_path / "hump.csv", np.round(counts))


def test_json_has_exactly_the_documented_keys(trace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["simulate", "--trace", str(trace), "--json", "--reactive-targets", "0.6,0.8"])
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) == {"trace", "queue", "policies", "cluster", "units", "objective"}  # objective: self-tuned
    assert set(out["objective"]) == {"slo_attainment", "slo_wait_seconds", "met", "hpa_pick"}
    assert out["trace"] == "hump.csv"
    assert out["queue"] == {"slo_wait_seconds": 2.0, "timeout_seconds": 60.0, "bin_shape": "flat"}
    assert set(out["policies"]) == {"predictive", "predictive-persistence", "oracle", "reactive@0.6", "reactive@0.8",
                                    "hpa-queue@10", "prodstack-queue@1", "keda-queue@5"}
    for name, scores in out["policies"].items():
        assert list(scores) == KEYS, name
        assert 0.0 <= scores["slo_attainment"] <= 1.0, name
        assert 0.0 <= scores["wait_p99_seconds"] <= 60.0, name
        assert 0.0 <= scores["dropped_fraction"] <= scores["unserved_fraction"] + 1e-12, name
    assert out["policies"]["oracle"]["unserved_fraction"] == 0.0
    assert out["policies"]["oracle"]["slo_attainment"] == 1.0
    # a lower target holds more replicas
    assert out["policies"]["reactive@0.6"]["gpu_hours"] > out["policies"]["reactive@0.8"]["gpu_hours"]


def test_peak_replicas_sizes_the_replica_to_the_trace_peak(trace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--trace", str(trace), "--json", "--policies", "oracle", "--peak-replicas", "7"]) == 0
    oracle = json.loads(capsys.readouterr().out)["policies"]["oracle"]
    assert oracle["max_replicas"] == 7  # the oracle holds exactly what the peak needs


def test_price_and_gpus_per_replica_scale_the_bill(trace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = ["simulate", "--trace", str(trace), "--json", "--policies", "oracle"]
    assert main(base) == 0
    out = json.loads(capsys.readouterr().out)
    one, price = out["policies"]["oracle"], out["cluster"]["gpu_price_per_hour"]
    assert main([*base, "--gpus-per-replica", "2", "--gpu-hour-price", "1.5"]) == 0
    two = json.loads(capsys.readouterr().out)["policies"]["oracle"]
    assert one["cost_usd"] == pytest.approx(price * one["gpu_hours"], abs=0.01)
    assert two["gpu_hours"] >= 2 * one["gpu_hours"]  # twice the GPUs, and more node start-ups to wait through
    assert two["cost_usd"] == pytest.approx(1.5 * two["gpu_hours"], abs=0.01)


def test_table_and_plot(trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    png = tmp_path / "out" / "sim.png"
    assert main(["simulate", "--trace", str(trace), "--plot", str(png)]) == 0
    text = capsys.readouterr().out
    for needle in ("policy", "GPU-hours", "predictive", "oracle", "reactive@0.7", "Predictive vs reactive HPA"):
        assert needle in text
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(data) > 20_000


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--reactive-targets", "0.5,1.5"], "--reactive-targets"),
        (["--reactive-targets", "x"], "--reactive-targets"),
        (["--policies", "predictive,magic"], "--policies"),
        (["--pod-startup", "soon"], "--pod-startup"),
        (["--peak-replicas", "0"], "--peak-replicas"),
        (["--capacity-per-replica", "-1"], "--capacity-per-replica"),
        (["--gpus-per-node", "1", "--gpus-per-replica", "2"], "--gpus-per-node"),
        (["--model", "crystal_ball"], "--model"),
        (["--slo-wait", "soon"], "--slo-wait"),
        (["--slo-wait", "-1s"], "--slo-wait"),
        (["--timeout", "0"], "--timeout"),
        (["--queue-targets", "0"], "--queue-targets"),
        (["--queue-targets", "ten"], "--queue-targets"),
        (["--bin-shape", "wavy"], "--bin-shape"),
        (["--taken-over", "2"], "--taken-over"),
        (["--taken-over", "9h"], "at or after the trace's end"),
        (["--taken-over", "1h", "--ceiling-usd-per-hour", "40"], "run them apart"),
    ],
)
def test_bad_flags_are_one_line_errors(
    trace: Path, capsys: pytest.CaptureFixture[str], args: list[str], needle: str
) -> None:
    assert main(["simulate", "--trace", str(trace), *args]) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err
    assert len(err.splitlines()) == 1


def test_capacity_flags_are_mutually_exclusive(trace: Path) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["simulate", "--trace", str(trace), "--capacity-per-replica", "2", "--peak-replicas", "5"])
    assert exc.value.code == 2


def test_trace_without_traffic_cannot_be_sized_by_peak(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = _write_trace(tmp_path / "zeros.csv", np.zeros(30))
    assert main(["simulate", "--trace", str(empty), "--policies", "oracle"]) == 2
    assert "--capacity-per-replica" in capsys.readouterr().err


def test_missing_trace_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--trace", str(tmp_path / "nope.csv")]) == 2
    assert "nope.csv" in capsys.readouterr().err


# -- ceiling, gangs and scenario files ----------------------------------------------------------------

FAST = ["--json", "--policies", "oracle,reactive", "--reactive-targets", "0.7", "--peak-replicas", "10"]


def test_ceiling_and_gang_flags_reach_every_policy(trace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # the hump peaks at 10 replicas; $21/h at $3/GPU-h = 7 GPUs: the peak is cut, the 4-GPU gang waits for room
    args = ["simulate", "--trace", str(trace), *FAST, "--ceiling-usd-per-hour", "21", "--gpu-hour-price", "3",
            "--gang", "gpus=4,at=1h,hours=1,window=5h"]
    assert main(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) == {"trace", "queue", "policies", "cluster", "units"}
    for name, scores in out["policies"].items():
        assert list(scores) == KEYS, name
        assert scores["max_replicas"] <= 7, name
        assert scores["ceiling_breaches"] == 0
        assert scores["gangs_split"] == 0
        assert scores["ceiling_unserved_fraction"] > 0, name
        assert scores["gang_wait_hours"] > 0, name


def test_scenario_file_equals_the_flags_and_flags_override_it(
    trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    flags = ["simulate", *FAST, "--trace", str(trace), "--ceiling-usd-per-hour", "21",
             "--gang", "gpus=4,at=1h,hours=1,window=5h"]
    assert main(flags) == 0
    by_flags = json.loads(capsys.readouterr().out)
    scenario = tmp_path / "s.yaml"
    scenario.write_text(
        "trace: hump.csv\n"  # relative to the scenario file
        "policies: [oracle, reactive]\nreactive-targets: [0.7]\npeak_replicas: 10\n"
        "ceiling_usd_per_hour: 21\n"
        "gangs:\n  - {gpus: 4, at: 1h, hours: 1, window: 5h}\n"
    )
    assert main(["simulate", "--scenario", str(scenario), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == by_flags
    # a flag wins over the file: no gang from the file once --gang is given, a higher ceiling from the flag
    assert main(["simulate", "--scenario", str(scenario), "--json", "--ceiling-usd-per-hour", "300",
                 "--gang", "gpus=1,at=0,hours=1"]) == 0
    loose = json.loads(capsys.readouterr().out)["policies"]["oracle"]
    assert loose["ceiling_unserved_fraction"] == 0.0
    assert loose["gang_wait_hours"] == 0.0
    assert loose["max_replicas"] == 10


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--gang", "gpus=x,at=1h,hours=1"], "--gang 'gpus=x,at=1h,hours=1': gpus"),
        (["--gang", "gpus=8,at=1h"], "hours: missing"),
        (["--gang", "gpus=8,at=1h,hours=1,colour=red"], "colour"),
        (["--gang", "gpus=8,at=1h,hours=1", "--gang", "gpus=8,at=1h,hours=1,name=gang-1"], "gang-1"),
        (["--ceiling-usd-per-hour", "-5"], "--ceiling-usd-per-hour"),
        (["--inference-priority", "vip"], "--inference-priority"),
    ],
)
def test_bad_money_flags_are_one_line_errors(
    trace: Path, capsys: pytest.CaptureFixture[str], args: list[str], needle: str
) -> None:
    assert main(["simulate", "--trace", str(trace), "--policies", "oracle", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err
    assert len(err.splitlines()) == 1


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("ceiling: 20\n", "unknown key 'ceiling'"),
        ("ceiling_usd_per_hour: lots\n", "ceiling_usd_per_hour: expected a number"),
        ("gangs:\n  - {gpus: 4, at: 1h}\n", "gangs[0]: hours: missing"),
        ("gangs:\n  - gpus=4,at=1h,hours=1\n  - {gpus: two, at: 1h, hours: 1}\n", "gangs[1]: gpus"),
        ("gangs: {gpus: 4}\n", "gangs: expected a list"),
        ("- just\n- a list\n", "expected a mapping"),
        ("peak_replicas: 5\ncapacity_per_replica: 2\n", "give one, not both"),
        ("gpus_per_node: [8]\n", "gpus_per_node: expected an integer"),
        ("key: [unclosed\n", "not valid YAML"),
    ],
)
def test_bad_scenario_files_are_one_line_errors_naming_the_key(
    trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, needle: str
) -> None:
    scenario = tmp_path / "bad.yaml"
    scenario.write_text(text)
    assert main(["simulate", "--trace", str(trace), "--policies", "oracle", "--scenario", str(scenario)]) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err
    assert str(scenario) in err
    assert len(err.splitlines()) == 1


def test_missing_scenario_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--scenario", str(tmp_path / "nope.yaml")]) == 2
    assert "nope.yaml" in capsys.readouterr().err


def test_table_shows_the_ceiling_and_the_gang_columns(trace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--trace", str(trace), "--policies", "oracle", "--peak-replicas", "10", "--gpu-hour-price",
                 "3", "--ceiling-usd-per-hour", "21", "--gang", "gpus=4,at=1h,hours=1,window=5h,name=ft"]) == 0
    text = capsys.readouterr().out
    for needle in ("Cost ceiling $21.00/h", "= 7.0 GPUs", "Gang ft: 4 GPUs at +1h for 1h, window 5h",
                   "ceiling-unserved", "gang wait h", "oracle: ft placed at"):
        assert needle in text


def test_metrics_outages_are_missing_data_unless_kept(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A 30-minute collection gap (zeros amid steady traffic) is not a moment without users by default."""
    rng = np.random.default_rng(7)
    counts = rng.poisson(6000, 2 * 144).astype(float)  # two days of 10-minute bins, ~10 req/s
    counts[150:153] = 0.0
    path = _write_trace(tmp_path / "gap.csv", counts, step=600)
    base = ["simulate", "--trace", str(path), "--policies", "reactive", "--reactive-targets", "0.5", "--json"]

    def unserved(extra: list[str]) -> float:
        assert main([*base, *extra]) == 0
        return float(json.loads(capsys.readouterr().out)["policies"]["reactive@0.5"]["unserved_fraction"])

    # kept as zero demand, the HPA scales in during the gap and is short while the traffic's replicas restart
    assert unserved(["--keep-outages"]) > 0.001
    assert unserved([]) < 1e-9  # as missing data it holds through the gap


def test_sweep_runs_one_scored_predictive_row_per_value(
    trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Refit hourly: with the controller's daily refit, eight hours are all forecast by the model fitted on the
    # first settled bin, whose bands coincide, and a sweep of bands would have nothing to move.
    config = tmp_path / "config.yaml"
    # Pinned (self_tune: false): eight hours are too few to tune, and a self-tuned run would run the tuner's start
    # point (the HPA's own point), not the profile's.
    config.write_text("profiles:\n  default:\n    refit: 1h\n    self_tune: false\n")
    args = ["simulate", "--trace", str(trace), "--config", str(config), "--json", "--reactive-targets", "0.7",
            "--sweep", "warm_pool_quantile=90,99"]
    assert main(args) == 0
    policies = json.loads(capsys.readouterr().out)["policies"]
    assert set(policies) == {"predictive", "predictive-persistence", "oracle", "reactive@0.7", "hpa-queue@10",
                             "prodstack-queue@1", "keda-queue@5", "predictive@warm_pool_quantile=90",
                             "predictive@warm_pool_quantile=99"}
    for name, scores in policies.items():
        assert list(scores) == KEYS, name
    # the default profile's warm pool covers p95: a row at that value is the same run as the base policy
    assert main([*args[:-1], "warm_pool_quantile=95"]) == 0
    same = json.loads(capsys.readouterr().out)["policies"]["predictive@warm_pool_quantile=95"]
    assert same == policies["predictive"]
    # covering only p90 (no warm pool above the replicas' band) holds fewer GPU-hours, p99 more
    gpu_hours = [policies[f"predictive@warm_pool_quantile={q}"]["gpu_hours"] for q in (90, 99)]
    assert gpu_hours[0] < policies["predictive"]["gpu_hours"] < gpu_hours[1]


def test_config_profile_drives_the_predictive_policy_like_the_sweep(
    trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "config.yaml"
    # refit hourly, as in the sweep test: eight hours of the controller's daily refit have no bands to choose from
    # (pinned, as there: a self-tuned run of eight hours runs the tuner's start point, not the profile's)
    config.write_text("profiles:\n  default: {refit: 1h, self_tune: false}\n"
                      "  lean:\n    quantile: 75\n    warm_pool: 0\n    refit: 1h\n")
    base = ["simulate", "--trace", str(trace), "--json", "--policies", "predictive"]
    assert main([*base, "--config", str(config), "--profile", "lean"]) == 0
    lean = json.loads(capsys.readouterr().out)["policies"]["predictive"]
    assert main([*base, "--config", str(config), "--sweep", "quantile=75"]) == 0
    swept = json.loads(capsys.readouterr().out)["policies"]
    assert main([*base, "--config", str(config), "--sweep", "warm_pool=0"]) == 0
    no_pool = json.loads(capsys.readouterr().out)["policies"]["predictive@warm_pool=0"]
    # the sweep keeps the rest of the profile (warm pool auto -> p95): changing quantile alone moves nothing
    # above it, while the profile without a pool holds less than the default
    assert swept["predictive@quantile=75"]["gpu_hours"] == pytest.approx(swept["predictive"]["gpu_hours"], rel=0.05)
    assert lean["gpu_hours"] <= no_pool["gpu_hours"] < swept["predictive"]["gpu_hours"]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--sweep", "quantile=150"], "--sweep quantile=150: profiles.default.quantile: must be between 1 and 99"),
        (["--sweep", "warm_pool_quantile=80"], "80 is below quantile 90"),
        (["--sweep", "quantil=90"], "unknown profile key 'quantil'"),
        (["--sweep", "quantile"], "expected KEY=V1,V2"),
        (["--sweep", "quantile=90", "--policies", "oracle"], "keep 'predictive' in --policies"),
        (["--profile", "nope"], "--profile: unknown forecast profile 'nope'"),
        (["--config", "/nonexistent/config.yaml"], "--config: /nonexistent/config.yaml"),
    ],
)
def test_bad_tuning_flags_are_one_line_errors(
    trace: Path, args: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["simulate", "--trace", str(trace), *args]) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err
    assert len(err.splitlines()) == 1


def test_a_closed_pipe_is_not_a_traceback(trace: Path) -> None:
    # `simulate | head`: the reader is gone before the table is written
    with subprocess.Popen(
        [sys.executable, "-m", "autoscaler.cli", "simulate", "--trace", str(trace), "--policies", "oracle"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    ) as proc:
        assert proc.stdout is not None
        assert proc.stderr is not None
        proc.stdout.close()
        err = proc.stderr.read().decode()
        assert proc.wait(timeout=120) == 128 + 13, err
    assert "Traceback" not in err
    assert "BrokenPipeError" not in err


# -- bad input as a new user meets it -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "line"),
    [
        ("gpus=16,at=48,hours=4,window=24h", "at: 48 has no unit; write at=48h (or 48m, 48s)"),
        ("gpus=16,at=48h,hours=4,window=24", "window: 24 has no unit; write window=24h (or 24m, 24s)"),
        ("gpus=16,at=48h,duration=90", "duration: 90 has no unit; write duration=90h (or 90m, 90s)"),
        ("gpus=16,at=48h,hours=4,duration=4h", "hours and duration both give the run's length; keep one"),
        ("gpus=16,at=48h,hours=90m",
         "hours: expected a number of hours > 0, got '90m' (for another unit, give duration=90m instead)"),
    ],
)
def test_gang_durations_need_their_unit(trace: Path, capsys: pytest.CaptureFixture[str], spec: str,
                                        line: str) -> None:
    assert main(["simulate", "--trace", str(trace), "--policies", "oracle", "--gang", spec]) == 2
    err = capsys.readouterr().err
    assert err == f"predictive-autoscaler simulate: error: --gang {spec!r}: {line}\n"


def test_gang_units_are_read_as_written(trace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # bare 0 is zero; hours=N is hours; duration= takes any unit
    assert main(["simulate", "--trace", str(trace), "--policies", "oracle", "--gang", "gpus=2,at=0,hours=1,name=a",
                 "--gang", "gpus=2,at=90m,duration=30m,window=2h,name=b"]) == 0
    out = capsys.readouterr().out
    assert "Gang a: 2 GPUs at +0h for 1h, window 0h." in out
    assert "Gang b: 2 GPUs at +1.5h for 0.5h, window 2h." in out


def test_a_scenario_gang_without_units_names_the_fix(trace: Path, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    scenario = tmp_path / "s.yaml"
    scenario.write_text("gangs:\n  - {gpus: 4, at: 48, hours: 1}\n")
    assert main(["simulate", "--trace", str(trace), "--scenario", str(scenario)]) == 2
    assert "gangs[0]: at: 48 has no unit; write at=48h" in capsys.readouterr().err


def test_a_binary_scenario_file_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    scenario = tmp_path / "s.yaml"
    scenario.write_bytes(bytes(range(128, 256)))
    assert main(["simulate", "--scenario", str(scenario)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "not a YAML text file" in err


MAGIC: dict[str, Callable[[bytes], bool]] = {
    "jpg": lambda b: b[:3] == b"\xff\xd8\xff",
    "JPEG": lambda b: b[:3] == b"\xff\xd8\xff",
    "svg": lambda b: b"<svg" in b[:1000],
    "pdf": lambda b: b[:5] == b"%PDF-",
    "webp": lambda b: b[:4] == b"RIFF" and b[8:12] == b"WEBP",
    "png": lambda b: b[:8] == b"\x89PNG\r\n\x1a\n",
}


@pytest.mark.parametrize("suffix", sorted(MAGIC))
def test_plot_is_written_in_the_format_its_suffix_names(
    trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], suffix: str
) -> None:
    out = tmp_path / f"sim.{suffix}"
    assert main(["simulate", "--trace", str(trace), "--policies", "oracle", "--json", "--plot", str(out)]) == 0
    assert MAGIC[suffix](out.read_bytes())


@pytest.mark.parametrize(
    ("target", "needle"),
    [
        ("sim.bmp", "cannot write .bmp images; use one of .png, .svg, .pdf, .jpg, .jpeg, .webp"),
        ("sim", "has no file suffix"),
        (".", "is a directory; give a file name such as"),
        ("a-file/sim.png", "a-file is not a directory"),
    ],
)
def test_a_plot_that_cannot_be_written_is_refused_before_the_run(
    trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], target: str, needle: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    (tmp_path / "a-file").write_text("")
    import autoscaler.simulation.engine as engine

    def no_run(*_: object, **__: object) -> None:
        raise AssertionError("simulated before checking --plot")

    monkeypatch.setattr(engine, "simulate", no_run)
    assert main(["simulate", "--trace", str(trace), "--plot", str(tmp_path / target)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("predictive-autoscaler simulate: error: --plot: ")
    assert needle in err


def test_plot_of_a_trace_shorter_than_an_hour(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    short = _write_trace(tmp_path / "short.csv", np.array([60, 120, 90, 30]))
    png = tmp_path / "short.png"
    assert main(["simulate", "--trace", str(short), "--policies", "oracle", "--plot", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (None, "is a directory, not a trace file"),
        (b"", "file is empty"),
        (b"timestamp,requests\n", "needs at least two rows of data, found 0"),
        (b"timestamp,requests\n0,1\n60,lots\n", "column 'requests' has non-numeric value 'lots'"),
        (bytes(range(256)), "not a text CSV"),
    ],
)
def test_bad_trace_files_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes | None, needle: str
) -> None:
    path = tmp_path / "trace.csv"
    if content is None:
        path.mkdir()
    else:
        path.write_bytes(content)
    assert main(["simulate", "--trace", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert str(path) in err
    assert needle in err


def test_a_gzipped_trace_simulates_like_the_plain_one(trace: Path, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    packed = tmp_path / "hump.csv.gz"
    packed.write_bytes(gzip.compress(trace.read_bytes()))
    assert main(["simulate", "--trace", str(trace), "--policies", "oracle", "--json"]) == 0
    plain = json.loads(capsys.readouterr().out)["policies"]
    assert main(["simulate", "--trace", str(packed), "--policies", "oracle", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["policies"] == plain


# -- the queue --------------------------------------------------------------------------------------------------


QUEUE_FAST = ["--json", "--policies", "oracle,reactive,hpa-queue", "--reactive-targets", "0.9", "--peak-replicas", "10"]


def test_queue_flags_reach_the_scores(trace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def run(*extra: str) -> dict[str, dict[str, float]]:
        assert main(["simulate", "--trace", str(trace), *QUEUE_FAST, *extra]) == 0
        out = json.loads(capsys.readouterr().out)
        policies: dict[str, dict[str, float]] = out["policies"]
        return policies

    base = run()
    assert set(base) == {"oracle", "reactive@0.9", "hpa-queue@10"}
    # the HPA at 0.9 runs short during the hump's rise: requests wait, some past the SLO
    assert base["reactive@0.9"]["slo_attainment"] < 1.0
    loose = run("--slo-wait", "30s")
    tight = run("--slo-wait", "500ms")
    for name in base:
        assert tight[name]["slo_attainment"] <= base[name]["slo_attainment"] <= loose[name]["slo_attainment"], name
        # the objective changes the score, not the run
        assert loose[name]["gpu_hours"] == base[name]["gpu_hours"], name
    assert run("--timeout", "5s")["reactive@0.9"]["dropped_fraction"] >= base["reactive@0.9"]["dropped_fraction"]
    two = run("--queue-targets", "5,20")
    assert {"hpa-queue@5", "hpa-queue@20"} <= set(two)
    assert two["hpa-queue@5"]["gpu_hours"] >= two["hpa-queue@20"]["gpu_hours"]


def test_coarse_bins_are_spread_linearly_unless_asked_flat(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    hours = np.arange(48 * 6)
    counts = 6000 + 5000 * np.sin(2 * np.pi * hours / (24 * 6))
    path = _write_trace(tmp_path / "ten.csv", np.round(counts), step=600)
    args = ["simulate", "--trace", str(path), "--json", "--policies", "oracle,reactive", "--reactive-targets", "0.8"]
    assert main(args) == 0
    auto = json.loads(capsys.readouterr().out)
    assert main([*args, "--bin-shape", "flat"]) == 0
    flat = json.loads(capsys.readouterr().out)
    assert auto["queue"]["bin_shape"] == "linear"
    assert flat["queue"]["bin_shape"] == "flat"
    # a smooth daily curve: flat replay jumps at every 10-minute edge and the HPA waits more for it
    assert auto["policies"]["reactive@0.8"]["slo_attainment"] >= flat["policies"]["reactive@0.8"]["slo_attainment"]


def test_the_table_shows_the_queue_columns(trace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--trace", str(trace), "--policies", "oracle,reactive,hpa-queue",
                 "--reactive-targets", "0.9", "--slo-wait", "1.5s"]) == 0
    text = capsys.readouterr().out
    for needle in ("SLO attained", "wait p99 s", "dropped", "hpa-queue@10", "start within 1.5s", "timeout 60s"):
        assert needle in text


def test_queue_options_in_a_scenario_file_equal_the_flags(trace: Path, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    scenario = tmp_path / "queue.yaml"
    scenario.write_text("slo_wait: 1.5\ntimeout: 20s\nqueue_targets: [5]\nbin_shape: flat\n")
    assert main(["simulate", "--trace", str(trace), *QUEUE_FAST, "--scenario", str(scenario)]) == 0
    from_file = json.loads(capsys.readouterr().out)
    assert main(["simulate", "--trace", str(trace), *QUEUE_FAST, "--slo-wait", "1500ms", "--timeout", "20",
                 "--queue-targets", "5", "--bin-shape", "flat"]) == 0
    from_flags = json.loads(capsys.readouterr().out)
    assert from_file == from_flags
    assert from_file["queue"] == {"slo_wait_seconds": 1.5, "timeout_seconds": 20.0, "bin_shape": "flat"}
    assert "hpa-queue@5" in from_file["policies"]


@pytest.mark.parametrize(("flag", "value", "message"), [
    ("--timeout", "-15m", "must be positive, got -15m"),
    ("--timeout", "0s", "must be positive, got 0s"),
    ("--slo-wait", "-1.5s", "must be positive, got -1.5s"),
    ("--slo-wait", "2 seconds", "invalid duration '2 seconds' (use e.g. 2s, 500ms, 1m)"),
])
def test_queue_durations_are_checked_before_the_trace_loads(capsys: pytest.CaptureFixture[str], flag: str,
                                                            value: str, message: str) -> None:
    assert main(["simulate", flag, value]) == 2  # no --trace: the synthetic default would take half a minute
    err = capsys.readouterr().err.strip()
    assert err == f"predictive-autoscaler simulate: error: {flag}: {message}"
    assert len(err.splitlines()) == 1


def test_the_predictive_row_self_tunes_like_the_controller_and_a_pinned_profile_does_not(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # four days of 10-minute bins with a daily cycle and noise: a day of warm-up before each replayed day
    rng = np.random.default_rng(5)
    t = np.arange(4 * 144)
    counts = rng.poisson(600 + 450 * np.sin(2 * np.pi * t / 144))
    trace = _write_trace(tmp_path / "daily.csv", counts, step=600)
    base = ["simulate", "--trace", str(trace), "--reactive-targets", "0.7", "--policies", "predictive"]
    assert main([*base, "--sweep", "warm_pool_quantile=90,99"]) == 0
    out = capsys.readouterr().out
    (note,) = [line for line in out.splitlines() if "self-tuned daily" in line]
    assert "objective 99% within 2s" in note
    # what a new Deployment ran before a day could be replayed, then the points chosen, named as explain names them
    assert re.search(r"ran the start point hpa@0\.7\+lead for its first \d+\.\d days \(no day of history to "
                     r"replay yet\), then (hpa@[\d.]+\+lead|q\d+(/u[\d.]+)?) x\d", note), note
    pinned = tmp_path / "pinned.yaml"
    pinned.write_text("profiles:\n  default:\n    self_tune: false\n")
    assert main([*base, "--config", str(pinned), "--json", "--sweep", "warm_pool_quantile=95"]) == 0
    policies = json.loads(capsys.readouterr().out)["policies"]
    assert policies["predictive"] == policies["predictive@warm_pool_quantile=95"]  # pinned: the profile as set
    assert main([*base, "--config", str(pinned)]) == 0
    assert "self-tuned" not in capsys.readouterr().out


# -- objectives that can be measured ----------------------------------------------------------------------------


@pytest.mark.parametrize(("args", "line"), [
    (["--slo-wait", "30s", "--timeout", "10s"], "--slo-wait 30s is not shorter than --timeout 10s"),
    (["--slo-wait", "60s"], "--slo-wait 60s is not shorter than --timeout 60s"),
    (["--slo-wait", "0"], "--slo-wait: must be positive, got 0"),
    (["--slo-wait", "0ms"], "--slo-wait: must be positive, got 0ms"),
])
def test_an_objective_that_cannot_be_measured_is_refused_before_the_trace_loads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], line: str
) -> None:
    assert main(["simulate", "--trace", str(tmp_path / "missing.csv"), *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith(f"predictive-autoscaler simulate: error: {line}")


def test_a_profile_objective_past_the_timeout_names_the_profile(
    trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("profiles:\n  default:\n    slo_wait: 90s\n")
    assert main(["simulate", "--trace", str(trace), "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "the slo_wait of profile 'default' in --config (--slo-wait) 90s is not shorter than --timeout 60s" in err


# -- defaults that agree with the controller's -------------------------------------------------------------------

ORACLE = ["--json", "--policies", "oracle"]


def _cluster(trace: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> dict[str, object]:
    assert main(["simulate", "--trace", str(trace), *ORACLE, *extra]) == 0
    cluster: dict[str, object] = json.loads(capsys.readouterr().out)["cluster"]
    return cluster


def test_the_built_in_assumptions_are_the_packaged_configs(trace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from autoscaler.config.parser import load_config
    from autoscaler.config.schema import DEFAULT_CONFIG_PATH

    packaged = load_config(DEFAULT_CONFIG_PATH)
    built_in = _cluster(trace, capsys)
    assert built_in == _cluster(trace, capsys, "--config", str(DEFAULT_CONFIG_PATH))
    assert built_in["pod_startup_seconds"] == packaged.cold_start.pod_startup_seconds
    assert built_in["node_startup_seconds"] == packaged.cold_start.node_startup_seconds
    assert built_in["gpu_price_per_hour"] == packaged.pricing.default_gpu_hour
    assert built_in["slo_wait_seconds"] == packaged.profile("default").slo_wait_seconds


def test_with_a_config_every_assumption_comes_from_it_unless_a_flag_says_otherwise(
    trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("cold_start: {pod_startup: 7m, node_startup: 9m}\npricing: {default_gpu_hour: 2.5}\n"
                      "profiles:\n  default: {}\n  strict: {slo_wait: 1s}\n")
    from_config = _cluster(trace, capsys, "--config", str(config), "--profile", "strict")
    assert from_config["pod_startup_seconds"] == 7 * 60
    assert from_config["node_startup_seconds"] == 9 * 60
    assert from_config["gpu_price_per_hour"] == 2.5
    assert from_config["slo_wait_seconds"] == 1.0
    flags = _cluster(trace, capsys, "--config", str(config), "--pod-startup", "90s", "--gpu-hour-price", "6",
                     "--slo-wait", "500ms")
    assert (flags["pod_startup_seconds"], flags["node_startup_seconds"]) == (90, 9 * 60)
    assert (flags["gpu_price_per_hour"], flags["slo_wait_seconds"]) == (6.0, 0.5)


def test_a_result_can_be_reproduced_from_its_own_cluster_section(
    trace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["simulate", "--trace", str(trace), "--json", "--policies", "oracle,reactive", "--reactive-targets", "0.8"]
    assert main(args) == 0
    first = json.loads(capsys.readouterr().out)
    c = first["cluster"]
    assert set(c) == {"pod_startup_seconds", "node_startup_seconds", "gpu_price_per_hour", "capacity_per_replica",
                      "capacity_unit", "gpus_per_replica", "gpus_per_node", "slo_wait_seconds", "timeout_seconds"}
    again = [*args, "--pod-startup", f"{c['pod_startup_seconds']}s", "--node-startup", f"{c['node_startup_seconds']}s",
             "--gpu-hour-price", repr(c["gpu_price_per_hour"]),
             "--capacity-per-replica", repr(c["capacity_per_replica"]),
             "--gpus-per-replica", str(c["gpus_per_replica"]), "--gpus-per-node", str(c["gpus_per_node"]),
             "--slo-wait", f"{c['slo_wait_seconds']!r}s", "--timeout", f"{c['timeout_seconds']!r}s"]
    assert main(again) == 0
    assert json.loads(capsys.readouterr().out) == first


# -- output a person reads ----------------------------------------------------------------------------------------


def test_token_demand_names_its_unit_in_the_table_and_the_json(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "tok.csv"
    counts = np.round(60 + 540 * np.sin(np.pi * np.arange(120) / 120) ** 2).astype(int)
    path.write_text("timestamp,requests,input_tokens,output_tokens\n" + "".join(
        f"{1_700_000_000 + 60 * i},{c},{c * 900},{c * 100}\n" for i, c in enumerate(counts)))
    base = ["simulate", "--trace", str(path), "--policies", "oracle,reactive", "--reactive-targets", "0.9"]
    assert main([*base, "--demand", "tokens"]) == 0
    table = capsys.readouterr().out
    header = next(line for line in table.splitlines() if line.startswith("policy"))
    assert "cold-start tokens" in header
    assert "cold-start req" not in table
    assert main([*base, "--demand", "tokens", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["units"] == {"demand": "tokens/s", "capacity_per_replica": "tokens/s", "cold_start_requests": "tokens",
                            "fractions_of": "tokens"}
    assert out["cluster"]["capacity_unit"] == "tokens/s"
    assert main([*base, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["units"]["cold_start_requests"] == "requests"


@pytest.mark.parametrize(("bins", "step", "span"), [(60, 60, "60 minutes"), (6 * 60, 60, "6.0 hours"),
                                                     (3 * 144, 600, "3.0 days")])
def test_the_span_is_said_in_a_unit_that_fits(tmp_path: Path, capsys: pytest.CaptureFixture[str], bins: int,
                                              step: int, span: str) -> None:
    path = _write_trace(tmp_path / "t.csv", 100 + np.arange(bins) % 13, step=step)
    assert main(["simulate", "--trace", str(path), "--policies", "oracle"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith(f"Simulated t.csv: {span} of ")


def _bursty(tmp_path: Path) -> Path:
    """Four days of 10-minute bins with a daily cycle and unforecastable bursts (3% of bins at three times)."""
    rng = np.random.default_rng(3)
    t = np.arange(4 * 144)
    rate = 600 + 450 * np.sin(2 * np.pi * t / 144)
    rate[rng.random(t.size) < 0.03] *= 3
    return _write_trace(tmp_path / "bursty.csv", rng.poisson(rate), step=600)


@pytest.mark.parametrize("attainment", ["99.9", "50"])
def test_the_verdict_says_whether_the_self_tuned_row_met_its_objective(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], attainment: str
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(f"profiles:\n  default:\n    slo_attainment: {attainment}\n")
    base = ["simulate", "--trace", str(_bursty(tmp_path)), "--policies", "predictive", "--config", str(config)]
    assert main([*base, "--json"]) == 0
    reached = json.loads(capsys.readouterr().out)["policies"]["predictive"]["slo_attainment"]
    assert main(base) == 0
    out = capsys.readouterr().out
    (verdict,) = [line for line in out.splitlines() if line.startswith("Predictive ") and "objective" in line]
    met = reached >= float(attainment) / 100
    assert verdict.startswith(f"Predictive {'met' if met else 'MISSED'} the objective it tunes itself for, "
                              f"{attainment}% of requests started within 2s: {100 * reached:.3f}% did")
    assert ("points short" in verdict) is not met
    assert out.index(verdict) < out.index("Notes:")  # in the verdict, above the notes


def test_the_verdict_names_the_hpa_target_a_user_would_pick_for_the_objective(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["simulate", "--trace", str(_bursty(tmp_path)), "--policies", "predictive,reactive",
            "--reactive-targets", "0.3,0.9"]
    assert main([*base, "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    runs, objective = payload["policies"], payload["objective"]
    assert (objective["slo_attainment"], objective["slo_wait_seconds"]) == (0.99, 2.0)
    assert objective["met"] is (runs["predictive"]["slo_attainment"] >= 0.99)
    hpa = {name: run for name, run in runs.items() if name.startswith("reactive@")}
    meeting = [name for name, run in hpa.items() if run["slo_attainment"] >= 0.99]
    # the cheapest target that met the objective, else the one that attained most
    expected = (min(meeting, key=lambda n: hpa[n]["gpu_hours"]) if meeting
                else max(hpa, key=lambda n: hpa[n]["slo_attainment"]))
    assert objective["hpa_pick"] == {"policy": expected, "met": bool(meeting)}
    assert main(base) == 0
    out = capsys.readouterr().out
    (line,) = [x for x in out.splitlines() if x.startswith("Predictive vs the HPA target a user would pick")]
    assert f": {expected} at {hpa[expected]['gpu_hours']:.1f} GPU-hours" in line
    ratio = runs["predictive"]["gpu_hours"] / hpa[expected]["gpu_hours"]
    held = f"{100 * (1 - ratio):.0f}% fewer" if ratio <= 1 else f"{100 * (ratio - 1):.0f}% MORE"
    assert line.endswith(f"-> predictive held {held} GPU-hours.")
    assert ("the cheapest that met the objective" in line) is bool(meeting)


def test_a_pinned_profile_has_no_objective_verdict(trace: Path, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    pinned = tmp_path / "pinned.yaml"
    pinned.write_text("profiles:\n  default:\n    self_tune: false\n")
    assert main(["simulate", "--trace", str(trace), "--policies", "predictive", "--config", str(pinned)]) == 0
    out = capsys.readouterr().out
    assert "the objective it tunes itself for" not in out
    assert "the HPA target a user would pick" not in out


def test_progress_is_a_line_every_few_seconds_without_a_terminal(
    trace: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import autoscaler.progress as progress

    monkeypatch.setattr(progress, "LINE_EVERY_SECONDS", 0.01)
    assert main(["simulate", "--trace", str(trace), "--json", "--policies", "predictive,oracle"]) == 0
    out, err = capsys.readouterr()
    json.loads(out)
    lines = err.splitlines()
    assert lines
    assert all(line.startswith("simulate: simulating ") and line.endswith("s elapsed") for line in lines), lines
    assert any("predictive (run 1 of 2)" in line for line in lines)


def test_a_plot_that_fails_at_the_end_still_prints_the_table(
    trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import autoscaler.simulation.engine as engine

    plot = tmp_path / "later" / "sim.png"  # a directory the plot would create: fine when checked
    real = engine.simulate

    def then_block_the_directory(*args: object, **kwargs: object) -> object:
        result = real(*args, **kwargs)  # type: ignore[arg-type]
        (tmp_path / "later").write_text("")  # something took the directory's name during the run
        return result

    monkeypatch.setattr(engine, "simulate", then_block_the_directory)
    code = main(["simulate", "--trace", str(trace), "--policies", "oracle", "--plot", str(plot)])
    out, err = capsys.readouterr()
    assert code == 1
    assert "oracle" in out
    assert "Plot written" not in out
    assert err.count("\n") == 1
    assert err.startswith(f"predictive-autoscaler simulate: error: --plot: cannot write {plot}: ")


# -- gaps and NaN values ------------------------------------------------------------------------------------------


def test_a_gap_longer_than_a_day_is_replayed_with_a_warning(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    counts = np.round(600 + 400 * np.sin(2 * np.pi * np.arange(6 * 144) / 144))
    counts[2 * 144 : 4 * 144] = np.nan  # two days without rows amid six: a third of the grid missing
    path = tmp_path / "gap.csv"
    path.write_text("timestamp,requests\n" + "".join(
        f"{1_700_000_000 + 600 * i},{int(c)}\n" for i, c in enumerate(counts) if np.isfinite(c)))
    assert main(["simulate", "--trace", str(path), *ORACLE]) == 0
    out, err = capsys.readouterr()
    json.loads(out)
    assert err.count("\n") == 1
    assert err.startswith(f"predictive-autoscaler simulate: warning: {path}: 33% of the ")
    assert "the longest gap is 2d" in err
    assert "every policy but the oracle holds its replicas through a gap" in err


def test_a_replay_past_the_tick_bound_is_refused_before_it_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from autoscaler.commands.simulate import MAX_SIMULATED_TICKS

    hours = MAX_SIMULATED_TICKS // 240 + 1  # hourly bins replay as 240 ticks of 15 s each
    path = _write_trace(tmp_path / "hourly.csv", 3600 + np.arange(hours) % 24, step=3600)
    assert main(["simulate", "--trace", str(path), "--policies", "oracle"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert f"ticks of 15s, more than the {MAX_SIMULATED_TICKS:,} one replay may hold" in err


def test_nan_values_are_said_in_one_line(trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = trace.read_text().splitlines()
    for i in (5, 50, 150, 250):
        rows[i] = rows[i].split(",")[0] + ",nan"
    path = tmp_path / "nan.csv"
    path.write_text("\n".join(rows) + "\n")
    assert main(["simulate", "--trace", str(path), *ORACLE]) == 0
    assert capsys.readouterr().err == (f"predictive-autoscaler simulate: warning: {path}: 4 values are NaN; they are "
                                       "replayed as missing data (gaps), not as zeros\n")


def test_a_takeover_scores_what_follows_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # three days of a daily hump in 10-minute bins, the controller taking over after two
    bins = np.arange(3 * 144)
    counts = 600 + 5400 * np.sin(np.pi * (bins % 144) / 144) ** 2
    path = _write_trace(tmp_path / "days.csv", np.round(counts), step=600)
    args = ["simulate", "--trace", str(path), "--policies", "predictive,reactive", "--reactive-targets", "0.6"]
    assert main([*args, "--json"]) == 0
    whole = json.loads(capsys.readouterr().out)
    assert "taken_over_seconds" not in whole
    assert main([*args, "--json", "--taken-over", "2d"]) == 0
    after = json.loads(capsys.readouterr().out)
    assert after["taken_over_seconds"] == 2 * 86_400
    # the HPA ran the same: its last day is a third of its three (the same hump each day), give or take the first
    hpa, hpa_after = whole["policies"]["reactive@0.6"], after["policies"]["reactive@0.6"]
    assert hpa_after["gpu_hours"] == pytest.approx(hpa["gpu_hours"] / 3, rel=0.05)
    assert main([*args, "--taken-over", "2d"]) == 0
    out = capsys.readouterr().out
    assert "Taken over after 2.0 days (--taken-over): every policy ran the whole trace; the scores below are of the " \
           "24.0 hours after it." in out
    assert "(the controller took it over on day 2)" in out
