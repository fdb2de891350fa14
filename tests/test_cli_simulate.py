"""``predictive-autoscaler simulate`` end to end: JSON contract, table, plot, sizing and one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from autoscaler.cli import main

KEYS = [
    "gpu_hours", "cost_usd", "unserved_fraction", "cold_start_requests", "scale_events", "max_replicas",
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
    assert set(out) == {"trace", "policies"}
    assert out["trace"] == "hump.csv"
    assert set(out["policies"]) == {"predictive", "oracle", "reactive@0.6", "reactive@0.8"}
    for name, scores in out["policies"].items():
        assert list(scores) == KEYS, name
    assert out["policies"]["oracle"]["unserved_fraction"] == 0.0
    # a lower target holds more replicas
    assert out["policies"]["reactive@0.6"]["gpu_hours"] > out["policies"]["reactive@0.8"]["gpu_hours"]


def test_peak_replicas_sizes_the_replica_to_the_trace_peak(trace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--trace", str(trace), "--json", "--policies", "oracle", "--peak-replicas", "7"]) == 0
    oracle = json.loads(capsys.readouterr().out)["policies"]["oracle"]
    assert oracle["max_replicas"] == 7  # the oracle holds exactly what the peak needs


def test_price_and_gpus_per_replica_scale_the_bill(trace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = ["simulate", "--trace", str(trace), "--json", "--policies", "oracle"]
    assert main(base) == 0
    one = json.loads(capsys.readouterr().out)["policies"]["oracle"]
    assert main([*base, "--gpus-per-replica", "2", "--gpu-hour-price", "1.5"]) == 0
    two = json.loads(capsys.readouterr().out)["policies"]["oracle"]
    assert one["cost_usd"] == pytest.approx(3.0 * one["gpu_hours"], abs=0.01)
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
