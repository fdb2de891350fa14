"""``export``, and ``backtest``/``simulate`` with ``--prometheus-url --deployment``.

Against the real Prometheus with the backfilled vLLM metrics (``tests/servers.py``; its time is 2023, so every
command passes ``--until``): the exported CSV is the adapter's fleet answer and the backfill's truth bin by bin,
over all eight days (a counter reset, a 30-minute scrape gap that stays a gap, two chunks of requests); token
columns are the vLLM token counters; the file reads back as the very trace ``backtest``/``simulate`` replay from
Prometheus, so both commands give the same results either way. Each mistake is one line on stderr and exit 2.
The controller side (the loop's own history equals the export) is ``tests/runtime/test_export_history.py``.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import math
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from autoscaler import history
from autoscaler.adapters.prometheus import FleetHistory, PrometheusSource
from autoscaler.cli import main
from autoscaler.traces import load_trace, trace_from_rates, write_trace
from models.types import TrafficSeries
from tests.servers import BACKFILL_START, GAP_MINUTES, RESET_MINUTE, PrometheusServer, free_port
from tests.test_cli_errors import one_line_error

STEP = 60


class TerminalBuffer(io.StringIO):
    def isatty(self) -> bool:
        return True


class CountingTransport(httpx.HTTPTransport):
    def __init__(self) -> None:
        super().__init__()
        self.requests = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.requests += 1
        return super().handle_request(request)


def config_file(tmp_path: Path, url: str = "http://127.0.0.1:9", extra: str = "") -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(f"prometheus:\n  url: {url}\n  retries: 0\n  timeout: 10s\n{extra}", encoding="utf-8")
    return path


def export(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(["export", *argv]) == 0
    out, err = capsys.readouterr()
    assert err == ""  # no progress bar when stderr is not a terminal
    return out


def rows_of(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text)))


def column(rows: list[dict[str, str]], name: str) -> np.ndarray:
    return np.array([float(r[name]) if r[name] else math.nan for r in rows])


# -- no server needed --------------------------------------------------------------------------------------------


def test_a_trace_from_rates_is_what_its_csv_reads_back_as(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    rates = rng.random(3000) * rng.choice([0.1, 1, 10, 1000], 3000)
    rates[[0, 7, 8, 2999]] = np.nan
    series = TrafficSeries(rates, STEP, 1_700_000_000)
    trace = trace_from_rates("x", series, {"output_tokens": TrafficSeries(rates * 120, STEP, series.start)})
    # (rate x 60) / 60 is not always the rate in floating point: trace_from_rates does that arithmetic once, so
    # the trace replayed from the source and the one read back from its CSV are the same to the last bit.
    ok = ~np.isnan(rates)
    assert np.any((rates * STEP / STEP)[ok] != rates[ok])
    path = tmp_path / "t.csv"
    with path.open("w", encoding="utf-8", newline="") as fh:
        assert write_trace(trace, fh) == 3000
    back = load_trace(path)
    assert (back.requests.start, back.step_seconds, len(back.requests)) == (series.start, STEP, 3000)
    np.testing.assert_array_equal(back.requests.values, trace.requests.values)
    np.testing.assert_array_equal(back.tokens["output_tokens"].values, trace.tokens["output_tokens"].values)
    np.testing.assert_allclose(back.requests.values, rates, rtol=1e-15)
    assert path.read_text().splitlines()[1] == "1700000000,,"  # a missing bin is an empty cell, not a zero


class FakeFleet:
    """Answers like the adapter (a ``FleetHistory``) from fixed per-bin values; ``b`` is ambiguous from ``t=600``."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, int]] = []

    def fleet_history(
        self, query: str, namespaces: Iterable[str], start: int, end: int, step_seconds: int
    ) -> FleetHistory:
        self.calls.append((start, end))
        t = np.arange(start, end, step_seconds)
        a = TrafficSeries(np.where(t % 300 == 0, np.nan, t / 60.0), step_seconds, start)
        labels = tuple(None if math.isnan(v) else ("full" if tt < 400 else "completions only")
                       for tt, v in zip(t.tolist(), a.values.tolist(), strict=True))
        dropped = {("ns", "b"): "2 series for ns/b"} if end > 600 else {}
        values = {("ns", "a"): a} if start < 800 else {}
        if not dropped:
            values["ns", "b"] = TrafficSeries(np.ones(len(t)), step_seconds, start)
        return FleetHistory(values, dropped=dropped, warnings=["w"], sources={("ns", "a"): labels} if values else {})


def test_a_chunked_fetch_is_the_single_fetch_bin_by_bin() -> None:
    one, chunked = FakeFleet(), FakeFleet()
    whole = history.fetch_fleet(one, "q", ["ns"], 0, 1200, 60)
    done: list[int] = []
    parts = history.fetch_fleet(chunked, "q", ["ns"], 0, 1200, 60, chunk_bins=7, progress=done.append)
    assert one.calls == [(0, 1200)]
    assert chunked.calls == [(0, 420), (420, 840), (840, 1200)]
    assert done == [7, 14, 20]
    assert isinstance(whole, FleetHistory)
    assert isinstance(parts, FleetHistory)
    # ns/a is absent from the last chunk: NaN there (missing), its demand_source labels kept where it answered.
    np.testing.assert_array_equal(parts["ns", "a"].values[:14], whole["ns", "a"].values[:14])
    assert np.isnan(parts["ns", "a"].values[14:]).all()
    assert parts.sources["ns", "a"][:14] == whole.sources["ns", "a"][:14]
    assert parts.latest_source(("ns", "a")) == (True, "completions only")
    # ns/b is ambiguous in one chunk: dropped over the whole window, as one request says.
    assert ("ns", "b") not in parts
    assert parts.dropped == whole.dropped == {("ns", "b"): "2 series for ns/b"}
    assert parts.warnings == ("w",)
    missing = history.series_of(parts, ("ns", "b"), 0, 1200, 60)
    assert (missing.start, len(missing)) == (0, 20)
    assert np.isnan(missing.values).all()


@pytest.mark.parametrize("command", ["backtest", "simulate", "export"])
@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--deployment", "llama-chat"], "--deployment: expected NAMESPACE/NAME (e.g. serving/llama-chat), got "
                                         "'llama-chat'"),
        (["--deployment", "serving/"], "--deployment: expected NAMESPACE/NAME"),
        (["--deployment", "a/b/c"], "--deployment: expected NAMESPACE/NAME"),
        (["--prometheus-url", "http://127.0.0.1:9"], "--prometheus-url needs --deployment NAMESPACE/NAME"),
        (["--since", "-14d", "--deployment", "a/b"], "--since: must be positive, got -14d"),
        (["--since", "0", "--deployment", "a/b"], "--since: must be positive, got 0"),
        (["--step", "fortnight", "--deployment", "a/b"], "--step: invalid duration 'fortnight' (use e.g. 90s, 15m"),
        (["--step", "-1m", "--deployment", "a/b"], "--step: must be positive, got -1m"),
        (["--since", "30s", "--step", "1m", "--deployment", "a/b"], "--since 30s is shorter than one --step 1m"),
        (["--until", "yesterday", "--deployment", "a/b"], "--until: not Unix seconds or an ISO 8601 time"),
        (["--until", "2024-05-01T12:00:00", "--deployment", "a/b"], "has no zone (add Z or +00:00)"),
        (["--deployment", "a/b", "--prometheus-url", "prometheus:9090"], "--prometheus-url: 'prometheus:9090' is "
                                                                         "not an http:// or https:// URL"),
        (["--deployment", "a/b", "--prometheus-url", "http://host:port"], "--prometheus-url: 'http://host:port' is "
                                                                          "not a valid URL"),
    ],
)
def test_bad_prometheus_flags_are_one_line_before_anything_is_read(
    capsys: pytest.CaptureFixture[str], command: str, argv: list[str], needle: str
) -> None:
    err = one_line_error(capsys, [command, *argv])
    assert err.startswith(f"predictive-autoscaler {command}: error: ")
    assert needle in err


@pytest.mark.parametrize("command", ["backtest", "simulate"])
def test_trace_and_prometheus_are_mutually_exclusive(
    capsys: pytest.CaptureFixture[str], command: str, tmp_path: Path
) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text("timestamp,requests\n0,1\n60,2\n")
    for extra in (["--prometheus-url", "http://127.0.0.1:9"], []):
        err = one_line_error(capsys, [command, "--trace", str(trace), "--deployment", "a/b", *extra])
        assert "--trace and --prometheus-url/--deployment are mutually exclusive" in err
    if command == "backtest":  # its --config is for Prometheus only: said, rather than silently ignored
        err = one_line_error(capsys, [command, "--trace", str(trace), "--config", str(config_file(tmp_path))])
        assert "--config is read for --prometheus-url/--deployment only" in err


def test_export_needs_a_deployment(capsys: pytest.CaptureFixture[str]) -> None:
    err = one_line_error(capsys, ["export"])
    assert err == ("predictive-autoscaler export: error: export needs --deployment NAMESPACE/NAME (the Deployment "
                   "whose history to write)")


def test_unreachable_prometheus_is_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    for command in ("export", "backtest", "simulate"):
        err = one_line_error(capsys, [command, "--deployment", "serving/llama-chat", "--prometheus-url", url,
                                      "--config", str(config_file(tmp_path))])
        assert f"cannot read from Prometheus: Prometheus at {url} unavailable after 1 attempts: ConnectError" in err


def test_a_bad_config_is_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    bad = config_file(tmp_path, extra="  retires: 2\n")
    err = one_line_error(capsys, ["export", "--deployment", "a/b", "--config", str(bad)])
    assert "--config: " in err
    assert "prometheus.retires" in err
    assert "did you mean" in err


# -- against the real Prometheus ---------------------------------------------------------------------------------


@pytest.mark.prometheus
def test_export_is_the_controllers_series_over_eight_days_gap_and_reset_included(
    prometheus_server: PrometheusServer, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    backfill = prometheus_server.backfill
    now = backfill.end
    out = tmp_path / "llama-chat.csv"
    argv = ["--prometheus-url", prometheus_server.url, "--deployment", "serving/llama-chat", "--since", "8d",
            "--until", str(now), "-o", str(out)]
    printed = export(capsys, *argv)
    assert f"of serving/llama-chat from Prometheus at {prometheus_server.url} to {out}" in printed
    assert "requests, input_tokens, output_tokens" in printed
    assert f"{len(GAP_MINUTES) + 1} bins without a value" in printed  # the scrape gap: 30 minutes, 31 bins
    rows = rows_of(out.read_text())
    assert list(rows[0]) == ["timestamp", "requests", "input_tokens", "output_tokens"]
    stamps = [int(r["timestamp"]) for r in rows]
    assert stamps[0] == BACKFILL_START  # the first bin with a value: the eight days' first minute
    assert stamps == list(range(BACKFILL_START, BACKFILL_START + STEP * len(rows), STEP))
    assert len(rows) == backfill.minutes - 1  # every bin with both of its edges scraped

    # The adapter's fleet answer, in its own requests (no chunking of ours, two namespaces): the same series.
    with PrometheusSource(prometheus_server.url) as src:
        fleet = src.fleet_history("arrival_rate", ["research", "serving"], BACKFILL_START,
                                  BACKFILL_START + STEP * len(rows), STEP)
    controller = fleet["serving", "llama-chat"].values
    counts = column(rows, "requests")
    np.testing.assert_array_equal(np.isnan(counts), np.isnan(controller))
    # Bit for bit as the loader reads it (count / step): a count within rounding of a whole number is written whole.
    np.testing.assert_array_equal(counts[~np.isnan(counts)] / STEP, controller[~np.isnan(controller)] * STEP / STEP)
    # ... which is the truth written into Prometheus: the gap is a gap (empty cells), the counter reset is not.
    truth = backfill.arrival_rate("serving", "llama-chat")
    np.testing.assert_array_equal(np.isnan(counts), np.isnan(truth))
    np.testing.assert_allclose(counts[~np.isnan(counts)], truth[~np.isnan(truth)] * STEP, rtol=1e-9, atol=1e-9)
    assert all(rows[k]["requests"] == "" for k in range(GAP_MINUTES.start - 1, GAP_MINUTES.stop))
    assert rows[RESET_MINUTE - 1]["requests"] != ""
    # Token columns: vLLM's prompt and generation token counters, per bin (300 and 120 tokens a request).
    completed = np.sum([p.total_completions()[1:] for p in backfill.pods_of("serving", "llama-chat")], axis=0)
    for name, per_request in (("input_tokens", 300), ("output_tokens", 120)):
        tokens = column(rows, name)
        np.testing.assert_array_equal(np.isnan(tokens), np.isnan(counts))
        ok = ~np.isnan(tokens)
        np.testing.assert_allclose(tokens[ok], completed[ok] * per_request, rtol=1e-9, atol=1e-6)


@pytest.mark.prometheus
def test_export_to_stdout_gzip_and_without_tokens(
    prometheus_server: PrometheusServer, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    until = str(prometheus_server.now)
    base = ["--prometheus-url", prometheus_server.url, "--deployment", "research/qwen-eval", "--until", until]
    plain = export(capsys, *base)
    rows = rows_of(plain)
    assert 100 < len(rows) < 120  # the last two hours, not 14 days of empty rows
    gz = tmp_path / "qwen.csv.gz"
    export(capsys, *base, "--output", str(gz))
    assert gzip.decompress(gz.read_bytes()).decode() == plain
    first = gz.read_bytes()
    export(capsys, *base, "--output", str(gz))
    assert gz.read_bytes() == first, "the same history gives the same bytes (no timestamp in the gzip header)"
    assert not list(tmp_path.glob(".*tmp")), "no temporary file left behind"
    bare = export(capsys, *base, "--no-tokens", "--step", "2m")
    assert bare.splitlines()[0] == "timestamp,requests"
    assert {int(r["timestamp"]) % 120 for r in rows_of(bare)} == {0}
    # A step is a step: two one-minute bins make one two-minute bin of the same requests (to rounding).
    one = dict((int(r["timestamp"]), float(r["requests"])) for r in rows)
    for r in rows_of(bare)[1:-1]:
        t = int(r["timestamp"])
        assert float(r["requests"]) == pytest.approx(one[t] + one[t + 60], rel=1e-9)


@pytest.mark.prometheus
def test_progress_bar_only_on_a_terminal(
    prometheus_server: PrometheusServer, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    terminal = TerminalBuffer()
    monkeypatch.setattr(sys, "stderr", terminal)
    assert main(["export", "--prometheus-url", prometheus_server.url, "--deployment", "serving/llama-chat",
                 "--since", "2d", "--until", str(prometheus_server.now)]) == 0
    out, _ = capsys.readouterr()
    assert out.startswith("timestamp,requests,input_tokens,output_tokens\n")
    drawn = terminal.getvalue()
    assert "export [" in drawn
    assert "100%" in drawn
    assert "generation_token_rate" in drawn
    assert drawn.endswith("\r")  # erased, and nothing of it on stdout


@pytest.mark.prometheus
def test_requests_are_chunked_as_the_controller_chunks_them(
    prometheus_server: PrometheusServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    transport = CountingTransport()
    real = history.prometheus_source

    def counted(*args: Any, **kwargs: Any) -> PrometheusSource:
        source = real(*args, **kwargs)
        source._client = httpx.Client(transport=transport)
        return source

    monkeypatch.setattr(history, "prometheus_source", counted)
    assert main(["export", "--prometheus-url", prometheus_server.url, "--deployment", "serving/llama-chat",
                 "--since", "2d", "--no-tokens", "--until", str(prometheus_server.now)]) == 0
    assert transport.requests == 2 * 86_400 // STEP // history.FLEET_POINTS_PER_REQUEST  # 4 requests of 12 hours


def _without(payload: Any, keys: set[str]) -> Any:
    if isinstance(payload, dict):
        return {k: _without(v, keys) for k, v in payload.items() if k not in keys}
    return payload


@pytest.mark.prometheus
def test_backtest_from_prometheus_equals_backtest_of_the_export(
    prometheus_server: PrometheusServer, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    source = ["--prometheus-url", prometheus_server.url, "--deployment", "serving/llama-chat", "--since", "3d",
              "--until", str(prometheus_server.now)]
    trace = tmp_path / "llama.csv.gz"
    export(capsys, *source, "-o", str(trace))
    args = ["--models", "persistence,seasonal_naive", "--origin-every", "1h", "--min-train", "1d", "--json"]
    results = []
    for how in (source, ["--trace", str(trace)], [*source, "--series", "output_tokens"],
                ["--trace", str(trace), "--series", "output_tokens"]):
        assert main(["backtest", *how, *args]) == 0
        out, err = capsys.readouterr()
        assert err == ""
        results.append(json.loads(out))
    assert results[0]["trace"] == f"serving/llama-chat from Prometheus at {prometheus_server.url}"
    timings = {"trace", "fit_seconds", "predict_seconds"}
    assert _without(results[0], timings) == _without(results[1], timings)
    assert _without(results[2], timings) == _without(results[3], timings)
    assert results[0]["models"]["persistence"]["wape"] > 0


@pytest.mark.prometheus
def test_simulate_from_prometheus_equals_simulate_of_the_export(
    prometheus_server: PrometheusServer, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    source = ["--prometheus-url", prometheus_server.url, "--deployment", "serving/llama-chat", "--since", "1d",
              "--until", str(prometheus_server.now - 7200)]
    trace = tmp_path / "llama.csv"
    export(capsys, *source, "-o", str(trace))
    args = ["--policies", "predictive,reactive,oracle", "--reactive-targets", "0.7", "--model", "seasonal_naive",
            "--json"]
    results = []
    for how in (source, ["--trace", str(trace)]):
        assert main(["simulate", *how, *args]) == 0
        out, err = capsys.readouterr()
        assert err == ""
        results.append(json.loads(out))
    assert results[0]["trace"] == "serving/llama-chat"
    assert results[1]["trace"] == "llama.csv"
    assert _without(results[0], {"trace"}) == _without(results[1], {"trace"})
    assert results[0]["policies"]["predictive"]["gpu_hours"] > 0


@pytest.mark.prometheus
def test_no_such_deployment_names_it_and_the_ones_there_are(
    prometheus_server: PrometheusServer, capsys: pytest.CaptureFixture[str]
) -> None:
    until = str(prometheus_server.now)
    for command in ("export", "backtest", "simulate"):
        err = one_line_error(capsys, [command, "--prometheus-url", prometheus_server.url,
                                      "--deployment", "serving/llama-chta", "--until", until])
        assert (f"no series for Deployment serving/llama-chta in Prometheus at {prometheus_server.url} over the "
                "last 14d") in err
        assert "Deployments with series in namespace serving: llama-chat, mistral-code" in err
        assert "pods are named llama-chta-<hash>-<suffix>" in err
    # A namespace the name exists in, but not this one: the namespace restriction holds.
    err = one_line_error(capsys, ["export", "--prometheus-url", prometheus_server.url,
                                  "--deployment", "research/llama-chat", "--until", until])
    assert "no series for Deployment research/llama-chat" in err
    assert "namespace research: qwen-eval" in err
    err = one_line_error(capsys, ["export", "--prometheus-url", prometheus_server.url,
                                  "--deployment", 'nobody"}/x', "--until", until])
    assert 'no Deployment in namespace nobody"} has series' in err


@pytest.mark.prometheus
def test_too_little_history_says_how_much_was_found(
    prometheus_server: PrometheusServer, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["--prometheus-url", prometheus_server.url, "--until", str(prometheus_server.now)]
    err = one_line_error(capsys, ["backtest", *base, "--deployment", "serving/mistral-code", "--min-train", "1d"])
    assert "serving/mistral-code: too little history: backtesting a 15m horizon needs at least 1455 bins" in err
    assert err.endswith(f"the series has 119 (2.0h) (read from Prometheus at {prometheus_server.url}, first to last "
                        "bin with a value)")
    # The window ends before the short Deployment began: nothing found in it.
    early = ["--prometheus-url", prometheus_server.url, "--deployment", "serving/mistral-code", "--since", "1h",
             "--until", str(prometheus_server.now - 86_400)]
    for command in ("export", "simulate"):
        err = one_line_error(capsys, [command, *early])
        assert "no series for Deployment serving/mistral-code" in err or "too little history" in err
    err = one_line_error(capsys, ["export", *base, "--deployment", "serving/llama-chat", "--since", "1m",
                                  "--until", str(prometheus_server.now - 600)])
    assert err.endswith("too little history for serving/llama-chat in Prometheus at "
                        f"{prometheus_server.url}: only 1 bin with a value in the last 1m (at 1m steps); at least 2 "
                        "are needed")


@pytest.mark.prometheus
def test_a_query_error_is_prometheuss_one_line(
    prometheus_server: PrometheusServer, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    broken = config_file(tmp_path, prometheus_server.url, extra=(
        "  queries:\n"
        "    arrival_rate: >-\n"
        '      sum by (namespace, deployment) (rate(vllm:request_success_total{namespace=~"{namespaces}"}[{window}])\n'
    ))
    for command in ("export", "backtest"):
        err = one_line_error(capsys, [command, "--config", str(broken), "--deployment", "serving/llama-chat",
                                      "--until", str(prometheus_server.now)])
        assert "query arrival_rate for serving/llama-chat: Prometheus refused the query (HTTP 400)" in err
        assert "parse error" in err
