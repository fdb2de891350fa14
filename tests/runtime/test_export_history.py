"""``export`` writes the history the controller forecasts, bin by bin.

The controller here is the real loop (``rig``: the fake API server over HTTP, the real Prometheus with the
backfilled vLLM metrics); after one tick its memory holds the history it forecasts from. ``export`` for the same
Deployment and window (``--until`` the tick's time, ``--since`` the loop's history, the loop's config file) must
write exactly that series: the same bins, the same values (as counts per bin: rate x step), the same gaps. The
loop fetches the whole fleet (``namespace=~"research|serving"``) in one query; export reads one namespace in
12-hour chunks, so the test also shows that neither the namespace restriction nor the chunking changes a
Deployment's series.
"""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path

import numpy as np
import pytest

from autoscaler.cli import main
from tests.runtime.conftest import Rig, write_config
from tests.servers import PrometheusServer

pytestmark = pytest.mark.prometheus

STEP = 60
DAY = 86_400


def exported_rows(capsys: pytest.CaptureFixture[str], argv: list[str]) -> list[dict[str, str]]:
    assert main(["export", *argv]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    return list(csv.DictReader(io.StringIO(out)))


@pytest.mark.parametrize("name", [("serving", "llama-chat"), ("serving", "mistral-code"), ("research", "qwen-eval")])
def test_export_writes_the_history_the_controller_forecasts(
    rig: Rig, prometheus_server: PrometheusServer, capsys: pytest.CaptureFixture[str], tmp_path: Path,
    name: tuple[str, str],
) -> None:
    now = prometheus_server.now - 1800
    report = rig.controller.tick(now)
    assert report.ok, report.errors
    seen = rig.controller._memory[name].history
    assert seen is not None
    assert seen.step_seconds == STEP
    assert seen.end == now

    config = write_config(tmp_path / "config.yaml", prometheus_server.url)  # the loop's: 1d of 1m bins
    capsys.readouterr()
    rows = exported_rows(capsys, ["--deployment", "/".join(name), "--config", str(config), "--until", str(now)])

    stamps = [int(r["timestamp"]) for r in rows]
    first = (stamps[0] - seen.start) // STEP
    assert stamps == list(range(stamps[0], stamps[0] + STEP * len(rows), STEP)), "one row per bin, no row skipped"
    controller = seen.values[first : first + len(rows)]
    counts = np.array([float(r["requests"]) if r["requests"] else math.nan for r in rows])
    # Bin by bin: the count written reads back (count / step, as the loader does) to the controller's rate taken
    # through a count (rate x step / step, ``trace_from_rates``), exactly; an empty cell where it has NaN.
    np.testing.assert_array_equal(np.isnan(counts), np.isnan(controller))
    np.testing.assert_array_equal(counts[~np.isnan(counts)] / STEP, controller[~np.isnan(controller)] * STEP / STEP)
    # What is left out is only what the controller has no value for (before the first and after the last), and the
    # oldest bin: the controller keeps the loop's history of settled bins, one more than `export --since` it.
    assert np.isnan(seen.values[1:first]).all()
    assert np.isnan(seen.values[first + len(rows) :]).all()
    assert not np.isnan(counts[0])
    assert not np.isnan(counts[-1])
    # And it is the truth that was written into Prometheus.
    backfill = prometheus_server.backfill
    k = (stamps[0] - backfill.start) // STEP
    truth = backfill.arrival_rate(*name)[k : k + len(rows)]
    np.testing.assert_array_equal(np.isnan(counts), np.isnan(truth))
    np.testing.assert_allclose(counts[~np.isnan(counts)] / STEP, truth[~np.isnan(truth)], rtol=1e-9, atol=1e-9)
    if name == ("serving", "llama-chat"):
        assert len(rows) == DAY // STEP  # a full day of the eight
    else:
        assert len(rows) < 120  # the short Deployments: the last two hours only, not a day of empty rows
