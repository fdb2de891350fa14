"""Sizing on tokens/s: the weighted token demand, and ``backtest``/``simulate --demand tokens`` on traces."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from autoscaler.cli import main
from autoscaler.domain.demand import DemandUnit, TokenWeights, token_demand
from autoscaler.traces import TraceError, demand_series, load_trace
from tests.servers import PrometheusServer
from tests.shared import require_shared
from tests.test_cli_errors import one_line_error

TOKEN_TRACES = ("azure_llm2023_code_1min.csv", "azure_llm2023_conv_1min.csv", "mooncake_conversation_1min.csv")


def test_token_demand_weighs_input_and_output() -> None:
    got = token_demand([100.0, 200.0], [10.0, 20.0], TokenWeights(0.5, 2.0))
    assert got.tolist() == [70.0, 140.0]
    assert token_demand([3.0], [4.0], TokenWeights()).tolist() == [7.0]


def test_missing_stays_missing_but_a_zero_weight_series_is_not_read() -> None:
    got = token_demand([1.0, math.nan], [math.nan, 2.0], TokenWeights(1, 1))
    assert np.isnan(got).all()
    assert token_demand([5.0, 6.0], [math.nan, math.nan], TokenWeights(1, 0)).tolist() == [5.0, 6.0]


@pytest.mark.parametrize(("text", "expected"), [("1,1", (1.0, 1.0)), (" 0.25 , 4 ", (0.25, 4.0)), ("0,1", (0.0, 1.0))])
def test_weights_parse(text: str, expected: tuple[float, float]) -> None:
    w = TokenWeights.parse(text)
    assert (w.input, w.output) == expected


@pytest.mark.parametrize("text", ["1", "1,2,3", "a,1", "-1,1", "0,0", "inf,1", ","])
def test_bad_weights_are_rejected(text: str) -> None:
    with pytest.raises(ValueError, match=r"token weight|expected IN,OUT"):
        TokenWeights.parse(text)


def _token_trace(path: Path, requests: np.ndarray, input_tokens: np.ndarray, output_tokens: np.ndarray) -> Path:
    rows = ["timestamp,requests,input_tokens,output_tokens"] + [
        f"{1_700_000_000 + 60 * i},{int(r)},{int(a)},{int(b)}"
        for i, (r, a, b) in enumerate(zip(requests, input_tokens, output_tokens, strict=True))
    ]
    path.write_text("\n".join(rows) + "\n")
    return path


@pytest.fixture
def growing_prompts(tmp_path: Path) -> Path:
    """Six hours of a constant 60 requests/minute whose prompts grow from 1,000 to 4,000 tokens; 100 out each."""
    n = 6 * 60
    requests = np.full(n, 60.0)
    prompt = np.linspace(1000, 4000, n)
    return _token_trace(tmp_path / "growing.csv", requests, np.round(requests * prompt), requests * 100)


def test_demand_series_on_a_trace(growing_prompts: Path) -> None:
    trace = load_trace(growing_prompts)
    assert demand_series(trace, DemandUnit.REQUESTS, TokenWeights()) is trace.requests
    tokens = demand_series(trace, DemandUnit.TOKENS, TokenWeights(1, 2))
    assert (tokens.step_seconds, tokens.start) == (60, trace.requests.start)
    assert tokens.values[0] == pytest.approx((60 * 1000 + 2 * 60 * 100) / 60)
    assert tokens.values[-1] == pytest.approx((60 * 4000 + 2 * 60 * 100) / 60)


def test_demand_series_without_token_columns_names_the_file_and_columns(tmp_path: Path) -> None:
    path = tmp_path / "plain.csv"
    path.write_text("timestamp,requests\n0,1\n60,2\n")
    with pytest.raises(TraceError, match=r"plain\.csv: --demand tokens needs column\(s\) input_tokens, output_tokens"):
        demand_series(load_trace(path), DemandUnit.TOKENS, TokenWeights(), source=str(path))
    # a weight of 0 does not need its column
    half = tmp_path / "half.csv"
    half.write_text("timestamp,requests,output_tokens\n0,1,60\n60,2,120\n")
    assert demand_series(load_trace(half), DemandUnit.TOKENS, TokenWeights(0, 1)).values.tolist() == [1.0, 2.0]


def _oracle(capsys: pytest.CaptureFixture[str], argv: list[str]) -> dict[str, object]:
    assert main(["simulate", "--policies", "oracle", "--json", *argv]) == 0
    out: dict[str, object] = json.loads(capsys.readouterr().out)
    return out


def test_growing_prompts_need_more_replicas_on_tokens(growing_prompts: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    # Sized alike at the start: 0.25 req/s = 250 prompt tokens/s at 1,000-token prompts, so 4 replicas either way.
    on_requests = _oracle(capsys, ["--trace", str(growing_prompts), "--capacity-per-replica", "0.25"])
    on_tokens = _oracle(capsys, ["--trace", str(growing_prompts), "--demand", "tokens", "--token-weights", "1,0",
                                 "--capacity-per-replica", "250"])
    assert on_requests["policies"]["oracle"]["max_replicas"] == 4  # type: ignore[index]
    assert on_tokens["policies"]["oracle"]["max_replicas"] == 16  # type: ignore[index]
    assert on_tokens["policies"]["oracle"]["gpu_hours"] > 2 * on_requests["policies"]["oracle"]["gpu_hours"]  # type: ignore[index]
    assert on_tokens["demand"] == "tokens"
    assert on_tokens["token_weights"] == {"input": 1.0, "output": 0.0}
    assert "demand" not in on_requests
    # the weights move the sizing: half-weight prompts need half the replicas at the peak
    halved = _oracle(capsys, ["--trace", str(growing_prompts), "--demand", "tokens", "--token-weights", "0.5,0",
                              "--capacity-per-replica", "250"])
    assert halved["policies"]["oracle"]["max_replicas"] == 8  # type: ignore[index]


def test_peak_replicas_sizes_from_the_token_peak(growing_prompts: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = _oracle(capsys, ["--trace", str(growing_prompts), "--demand", "tokens", "--peak-replicas", "10"])
    peak = (60 * 4000 + 60 * 100) / 60
    assert out["capacity_per_replica"] == pytest.approx(peak / 10)
    assert out["policies"]["oracle"]["max_replicas"] == 10  # type: ignore[index]


@pytest.mark.parametrize("name", TOKEN_TRACES)
def test_simulate_and_backtest_the_shared_token_traces(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    require_shared("traces")  # one reason for all three when ../shared is absent
    path = require_shared("traces", name)
    trace = load_trace(path)
    tokens = demand_series(trace, DemandUnit.TOKENS, TokenWeights())
    out = _oracle(capsys, ["--trace", str(path), "--demand", "tokens", "--peak-replicas", "10"])
    assert out["capacity_per_replica"] == pytest.approx(float(np.nanmax(tokens.values)) / 10)
    assert out["policies"]["oracle"]["max_replicas"] == 10  # type: ignore[index]
    assert main(["backtest", "--trace", str(path), "--demand", "tokens", "--models", "persistence", "--horizon", "5m",
                 "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["demand"] == "tokens"
    assert 0 <= result["models"]["persistence"]["wape"] < 5


def test_backtest_scores_the_weighted_series(growing_prompts: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # persistence on a linear ramp is off by one bin's rise: its bias shows which series was forecast
    argv = ["backtest", "--trace", str(growing_prompts), "--models", "persistence", "--horizon", "1m", "--json"]
    assert main(argv) == 0
    on_requests = json.loads(capsys.readouterr().out)["models"]["persistence"]
    assert main([*argv, "--demand", "tokens"]) == 0
    on_tokens = json.loads(capsys.readouterr().out)["models"]["persistence"]
    assert on_requests["wape"] == 0
    assert on_tokens["wape"] > 0
    assert on_tokens["bias"] < 0


def test_a_trace_without_token_columns_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "plain.csv"
    path.write_text("timestamp,requests\n" + "".join(f"{60 * i},{10 + i}\n" for i in range(200)))
    for command in ("simulate", "backtest"):
        err = one_line_error(capsys, [command, "--trace", str(path), "--demand", "tokens"])
        assert err == (f"predictive-autoscaler {command}: error: {path}: --demand tokens needs column(s) "
                       "input_tokens, output_tokens, which the trace does not have (it has: requests)")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--demand", "bytes"], "--demand: unknown unit 'bytes'; choose from requests, tokens"),
        (["--token-weights", "1,1"], "--token-weights: weighs token demand; add --demand tokens"),
        (["--demand", "tokens", "--token-weights", "1"], "--token-weights: expected IN,OUT (two numbers, e.g. 1,1)"),
        (["--demand", "tokens", "--token-weights", "-1,1"], "--token-weights: token weight input must be"),
        (["--demand", "tokens", "--token-weights", "0,0"], "--token-weights: token weights: input and output cannot"),
    ],
)
@pytest.mark.parametrize("command", ["simulate", "backtest"])
def test_bad_demand_flags_are_one_line(
    command: str, argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    err = one_line_error(capsys, [command, *argv])
    assert err.startswith(f"predictive-autoscaler {command}: error: {message}"), err


def test_backtest_demand_tokens_and_a_series_are_exclusive(growing_prompts: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    err = one_line_error(capsys, ["backtest", "--trace", str(growing_prompts), "--demand", "tokens",
                                  "--series", "input_tokens"])
    assert "give one or the other" in err


@pytest.mark.prometheus
def test_tokens_from_prometheus_equal_tokens_of_the_export(
    prometheus_server: PrometheusServer, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # The backfill writes 300 prompt and 120 generated tokens per completed request (tests/servers.py).
    until = prometheus_server.now - 7200
    source = ["--prometheus-url", prometheus_server.url, "--deployment", "serving/llama-chat", "--since", "1d",
              "--until", str(until)]
    trace_path = tmp_path / "llama.csv"
    assert main(["export", *source, "-o", str(trace_path)]) == 0
    capsys.readouterr()
    trace = load_trace(trace_path)
    tokens = demand_series(trace, DemandUnit.TOKENS, TokenWeights(1, 0.5))
    backfill = prometheus_server.backfill
    first = (trace.requests.start - backfill.start) // 60
    truth = backfill.completion_rate("serving", "llama-chat")[first : first + len(tokens)] * (300 + 120 * 0.5)
    ok = np.isfinite(tokens.values)
    assert ok.sum() > 1000
    np.testing.assert_allclose(tokens.values[ok], truth[ok], rtol=1e-6)
    results = []
    for how in (source, ["--trace", str(trace_path)]):
        results.append(_oracle(capsys, [*how, "--demand", "tokens", "--token-weights", "1,0.5",
                                        "--peak-replicas", "10"]))
    assert results[0]["capacity_per_replica"] == pytest.approx(float(np.nanmax(tokens.values)) / 10)
    assert {k: v for k, v in results[0].items() if k != "trace"} == {k: v for k, v in results[1].items()
                                                                       if k != "trace"}


def test_a_scenario_file_may_set_the_demand(growing_prompts: Path, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    scenario = tmp_path / "s.yaml"
    scenario.write_text(f"trace: {growing_prompts}\ndemand: tokens\ntoken_weights: {{input: 0.5, output: 0}}\n"
                        "capacity_per_replica: 250\n")
    out = _oracle(capsys, ["--scenario", str(scenario)])
    assert out["token_weights"] == {"input": 0.5, "output": 0.0}
    assert out["policies"]["oracle"]["max_replicas"] == 8  # type: ignore[index]
    scenario.write_text("token_weights: 3\n")
    err = one_line_error(capsys, ["simulate", "--scenario", str(scenario)])
    assert "token_weights: expected [IN, OUT]" in err
