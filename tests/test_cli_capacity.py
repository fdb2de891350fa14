"""``capacity NS/NAME`` and the capacity read path (``history.read_capacity_inputs``) against the real Prometheus.

Two synthetic vLLM Deployments of known capacity (``tests/synthetic_vllm.py``, a queueing model) are backfilled with
promtool into a Prometheus of their own: ``serving/busy-llm`` (3 req/s per replica, two replicas, six overload
spells; KV cache under vLLM's older metric name) and ``serving/calm-llm`` (5 req/s per replica, never above 60% of
it; KV cache under the newer name). Read back through the adapter, the series are the model's truth bin by bin; the
command's estimate is within 10% for the busy one and "not enough evidence" (exit 0) for the calm one. Every
mistake is one line on stderr, exit 2.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from autoscaler import history
from autoscaler.cli import main
from autoscaler.config.schema import PrometheusConfig
from autoscaler.domain.learned_capacity import estimate_capacity
from tests.servers import PrometheusServer, free_port
from tests.synthetic_vllm import (
    BUSY_CAPACITY,
    CALM_CAPACITY,
    CAPACITY_MINUTES,
    CapacityServer,
    DeploymentHistory,
)
from tests.test_cli_errors import one_line_error

MINUTES = CAPACITY_MINUTES


@pytest.fixture
def server(capacity_prometheus: CapacityServer) -> PrometheusServer:
    return capacity_prometheus.server


@pytest.fixture
def busy(capacity_prometheus: CapacityServer) -> DeploymentHistory:
    return capacity_prometheus.busy


def capacity(capsys: pytest.CaptureFixture[str], server: PrometheusServer, *argv: str) -> str:
    code = main(["capacity", *argv, "--prometheus-url", server.url, "--since", "2d", "--until", str(server.now)])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert err == ""
    return out


@pytest.mark.prometheus
def test_the_series_read_back_are_the_queueing_models_truth(server: PrometheusServer,
                                                             busy: DeploymentHistory) -> None:
    source = history.prometheus_source(PrometheusConfig(retries=0), server.url)
    with source:
        got = history.read_capacity_inputs(source, PrometheusConfig(), ["serving"], server.now - MINUTES * 60 + 60,
                                           server.now, 60)
    assert set(got) == {("serving", "busy-llm"), ("serving", "calm-llm")}
    inputs = got["serving", "busy-llm"]
    # Bin i covers minute i+1 -> i+2 of the backfill (the window starts a minute in: rate needs both edges); the
    # last bin ends a minute after the last sample (the backfill's "now"), so its rate is missing.
    np.testing.assert_allclose(inputs.completed[:-1], busy.completed_rate()[1:], rtol=1e-9)
    assert np.isnan(inputs.completed[-1])
    np.testing.assert_array_equal(inputs.replicas, np.full(MINUTES - 1, 2.0))
    waiting = np.sum([p.waiting for p in busy.pods], axis=0).astype(float)
    np.testing.assert_allclose(inputs.waiting[:-1], (waiting[1:-1] + waiting[2:]) / 2)  # avg_over_time: both edges
    kv = np.sum([p.kv_cache for p in busy.pods], axis=0)
    np.testing.assert_allclose(inputs.kv_cache[:-1], (kv[1:-1] + kv[2:]) / 2)
    served = inputs.completed > 0
    assert np.isfinite(inputs.ttft[served]).all()
    assert np.isnan(inputs.ttft[~served]).all()  # no request, no quantile: missing, not zero
    # The calm Deployment exports the newer KV-cache name: read all the same.
    assert np.isfinite(got["serving", "calm-llm"].kv_cache).all()
    assert estimate_capacity(inputs).estimate is not None


@pytest.mark.prometheus
def test_capacity_of_a_saturated_deployment_is_within_ten_percent(
    server: PrometheusServer, capsys: pytest.CaptureFixture[str]
) -> None:
    out = json.loads(capacity(capsys, server, "serving/busy-llm", "--json"))
    assert out["deployment"] == "serving/busy-llm"
    assert out["enough_evidence"] is True
    assert abs(out["estimate"] - BUSY_CAPACITY) / BUSY_CAPACITY < 0.10, out
    assert out["episodes"] >= 6
    assert out["lower_bound"] < BUSY_CAPACITY
    assert out["slo_wait_seconds"] == 2
    assert all(n > 0 for n in out["signals"].values())  # waiting, KV cache and TTFT all saw the overloads
    text = capacity(capsys, server, "serving/busy-llm")
    first = text.splitlines()[0]
    assert first.startswith(f"serving/busy-llm: {out['estimate']:.4g} req/s per replica (confidence ")
    assert "evidence: " in text
    assert f"from Prometheus at {server.url}" in text
    # --deployment, as backtest, simulate and export take it, is the same Deployment
    assert json.loads(capacity(capsys, server, "--deployment", "serving/busy-llm", "--json")) == out


@pytest.mark.prometheus
def test_capacity_without_saturation_is_not_enough_evidence_with_exit_zero(
    server: PrometheusServer, capsys: pytest.CaptureFixture[str]
) -> None:
    text = capacity(capsys, server, "serving/calm-llm")
    assert text.startswith("serving/calm-llm: not enough evidence: the replicas were never saturated")
    assert "(a lower bound)" in text
    out = json.loads(capacity(capsys, server, "serving/calm-llm", "--json"))
    assert out["estimate"] is None
    assert out["enough_evidence"] is False
    assert out["saturated_bins"] == 0
    assert out["lower_bound"] < CALM_CAPACITY


@pytest.mark.prometheus
def test_a_tight_latency_objective_counts_slow_first_tokens_as_saturation(
    server: PrometheusServer, capsys: pytest.CaptureFixture[str]
) -> None:
    # Prefill alone takes ~0.15 s: with a 0.1 s objective every bin is "saturated" by TTFT, and the calm history's
    # rates spread far too wide (a daily cycle, not a ceiling) for an estimate to be trusted.
    out = json.loads(capacity(capsys, server, "serving/calm-llm", "--slo-wait", "0.1", "--json"))
    assert out["slo_wait_seconds"] == 0.1
    assert out["signals"]["ttft"] > 0
    assert out["estimate"] is None
    assert "spread" in out["reason"]


@pytest.mark.prometheus
def test_capacity_errors_are_one_line(server: PrometheusServer, capsys: pytest.CaptureFixture[str],
                                      tmp_path: Path) -> None:
    base = ["--prometheus-url", server.url, "--until", str(server.now)]
    err = one_line_error(capsys, ["capacity", "serving/busy-lm", *base])
    assert f"no series for Deployment serving/busy-lm in Prometheus at {server.url} over the last 7d" in err
    assert "(query completion_rate; Deployments with series in namespace serving: busy-llm, calm-llm)" in err
    err = one_line_error(capsys, ["capacity", "busy-llm", *base])
    assert err == ("predictive-autoscaler capacity: error: expected NAMESPACE/NAME (e.g. serving/llama-chat), got "
                   "'busy-llm'")
    err = one_line_error(capsys, ["capacity", "serving/busy-llm", "--since", "-1d", *base])
    assert err.endswith("--since: must be positive, got -1d")
    err = one_line_error(capsys, ["capacity", "serving/busy-llm", "--slo-wait", "soon", *base])
    assert "--slo-wait: invalid duration 'soon'" in err
    err = one_line_error(capsys, ["capacity", "serving/busy-llm", "--prometheus-url", "ftp://x", "--until", "0"])
    assert "--prometheus-url: 'ftp://x' is not an http:// or https:// URL" in err
    url = f"http://127.0.0.1:{free_port()}"
    err = one_line_error(capsys, ["capacity", "serving/busy-llm", "--prometheus-url", url, "--config",
                                  str(_config(tmp_path, url))])
    assert f"cannot read from Prometheus: Prometheus at {url} unavailable after 1 attempts" in err
    broken = _config(tmp_path, server.url,
                     "  queries:\n    ttft_p90: 'histogram_quantile(0.9, x{namespace=~\"{namespaces}\"}'\n")
    err = one_line_error(capsys, ["capacity", "serving/busy-llm", "--config", str(broken), "--until", str(server.now)])
    assert "query ttft_p90 for serving/busy-llm: Prometheus refused the query (HTTP 400)" in err


def _config(tmp_path: Path, url: str, extra: str = "") -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(f"prometheus:\n  url: {url}\n  retries: 0\n  timeout: 10s\n{extra}", encoding="utf-8")
    return path
