"""Bad input as a new user meets it, across every command: each mistake is one line on stderr and
exit status 2 (no traceback, no argparse usage block), and every ``--help`` is written for users."""

from __future__ import annotations

from pathlib import Path

import pytest

from autoscaler.cli import COMMANDS, build_parser, join_negative_values, main
from tests.runtime import conftest as runtime

# Every duration-valued option of every command (run and explain have none).
DURATION_FLAGS = {
    "backtest": ("--horizon", "--refit-every", "--origin-every", "--window", "--min-train", "--since", "--step"),
    "simulate": ("--pod-startup", "--node-startup", "--decision-interval", "--since", "--step"),
    "export": ("--since", "--step"),
}


def one_line_error(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    """Run the CLI, expect exit 2 and exactly one line on stderr; return that line."""
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's own errors exit from parse_args
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    assert code == 2, (argv, out, err)
    assert out == ""
    assert err.count("\n") == 1, err
    assert "Traceback" not in err
    assert "usage:" not in err
    return err.strip()


@pytest.mark.parametrize(
    ("command", "flag"), [(c, f) for c, flags in DURATION_FLAGS.items() for f in flags]
)
@pytest.mark.parametrize("value", ["-15m", "-2", "0", "0s", "-1.5h"])
def test_negative_or_zero_durations_are_one_line(
    capsys: pytest.CaptureFixture[str], command: str, flag: str, value: str
) -> None:
    # no --trace: the durations are checked before the (synthetic default) trace or any model loads
    err = one_line_error(capsys, [command, flag, value])
    assert err == f"predictive-autoscaler {command}: error: {flag}: must be positive, got {value}"


def test_the_equals_spelling_gives_the_same_line(capsys: pytest.CaptureFixture[str]) -> None:
    err = one_line_error(capsys, ["backtest", "--horizon=-15m"])
    assert err.endswith("--horizon: must be positive, got -15m")


def test_unparsable_durations_name_the_flag_and_show_the_form(capsys: pytest.CaptureFixture[str]) -> None:
    err = one_line_error(capsys, ["simulate", "--node-startup", "3 minutes"])
    assert "--node-startup: invalid duration '3 minutes' (use e.g. 90s, 15m, 2h, 1d)" in err


def test_only_values_after_value_flags_are_joined() -> None:
    parser = build_parser()
    assert join_negative_values(parser, ["backtest", "--horizon", "-15m", "--json"]) == [
        "backtest", "--horizon=-15m", "--json"]
    # a flag without a value keeps its neighbour; "--" ends the options
    assert join_negative_values(parser, ["backtest", "--json", "-15m"]) == ["backtest", "--json", "-15m"]
    assert join_negative_values(parser, ["x", "--", "--horizon", "-1"]) == ["x", "--", "--horizon", "-1"]


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["simulate", "--peak-replicas", "abc"], "argument --peak-replicas: invalid int value: 'abc'"),
        (["simulate", "--capacity-per-replica", "-1e3", "--peak-replicas", "2"], "not allowed with"),
        (["simulate", "--frobnicate"], "simulate: error: unrecognized arguments: --frobnicate"),
        (["backtest", "--horizon"], "argument --horizon: expected one argument"),
        (["run", "--once", "--at", "yesterday"], "argument --at: not Unix seconds or an ISO 8601 time"),
        (["teleport"], "invalid choice: 'teleport'"),
        ([], "no command given; choose one of backtest, simulate, export, trace, capacity, run, explain"),
    ],
)
def test_argparse_errors_are_one_line_without_the_usage_block(
    capsys: pytest.CaptureFixture[str], argv: list[str], needle: str
) -> None:
    err = one_line_error(capsys, argv)
    assert needle in err
    assert "--help" in err  # where to look next


# -- kubeconfig -----------------------------------------------------------------------------------------------


@pytest.fixture
def no_kube_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """Not in a pod, no $KUBECONFIG, a home without ~/.kube/config."""
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("KUBECONFIG", raising=False)
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    return home


def _run_config(tmp_path: Path) -> Path:
    return runtime.write_config(tmp_path / "config.yaml", "http://127.0.0.1:9")


def _command(name: str, tmp_path: Path) -> list[str]:
    if name == "explain":
        return ["explain", "team/llama"]
    return ["run", "--once", "--no-leader-election", "--config", str(_run_config(tmp_path))]


@pytest.mark.parametrize("command", ["explain", "run"])
def test_a_kubeconfig_that_does_not_exist_is_named(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, no_kube_env: Path, command: str
) -> None:
    missing = tmp_path / "nope" / "kubeconfig"
    err = one_line_error(capsys, [*_command(command, tmp_path), "--kubeconfig", str(missing)])
    assert err == f"predictive-autoscaler {command}: error: kubeconfig {missing} does not exist"


@pytest.mark.parametrize("command", ["explain", "run"])
def test_no_kubernetes_config_at_all_says_so(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, no_kube_env: Path, command: str
) -> None:
    err = one_line_error(capsys, _command(command, tmp_path))
    assert "no Kubernetes config: not running in a cluster, $KUBECONFIG is not set and ~/.kube/config" in err
    assert "pass --kubeconfig PATH" in err


def test_a_kubeconfig_variable_naming_missing_files_is_named(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, no_kube_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "gone.yaml"))
    err = one_line_error(capsys, ["explain", "team/llama"])
    assert f"$KUBECONFIG is {tmp_path / 'gone.yaml'}, which does not exist" in err


def test_a_directory_as_kubeconfig(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    err = one_line_error(capsys, ["explain", "team/llama", "--kubeconfig", str(tmp_path)])
    assert f"kubeconfig {tmp_path} is a directory" in err


# -- --help ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("command", [*COMMANDS, None])
def test_help_is_plain_text_for_users(capsys: pytest.CaptureFixture[str], command: str | None) -> None:
    with pytest.raises(SystemExit) as exc:
        main([command, "--help"] if command else ["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    prog = "predictive-autoscaler" + (f" {command}" if command else "")
    assert out.startswith(f"usage: {prog} ")
    for markup in ("``", ":func:", ":class:", ":mod:", "Why it exists", "Why the predictive policy"):
        assert markup not in out, (command, markup)


# -- a bare number where a unit is meant -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "flag"), [(c, f) for c, flags in DURATION_FLAGS.items() for f in flags]
)
def test_a_bare_number_for_a_duration_is_refused_with_the_fix(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, command: str, flag: str
) -> None:
    # a trace that does not exist: the flag must be refused before anything is read
    trace = [] if command == "export" else ["--trace", str(tmp_path / "missing.csv")]
    err = one_line_error(capsys, [command, flag, "15", *trace])
    prefix = f"predictive-autoscaler {command}: error: {flag}: 15 has no unit; write {flag} 15"
    assert err.startswith(prefix), err
    suggested = err[len(prefix)]
    assert suggested in "smhd"
    assert err.endswith(f" (or {', '.join(f'15{u}' for u in 'smhd' if u != suggested)})")


def test_a_bare_horizon_suggests_minutes(capsys: pytest.CaptureFixture[str]) -> None:
    err = one_line_error(capsys, ["backtest", "--horizon", "15"])
    assert "--horizon: 15 has no unit; write --horizon 15m (or 15s, 15h, 15d)" in err


def test_a_bare_step_for_a_synthetic_trace_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    err = one_line_error(capsys, ["trace", "synth", "--step", "60"])
    assert err.startswith("predictive-autoscaler trace synth: error: --step: 60 has no unit; write --step 60s")


# -- traces that are not what they seem, in the commands that replay them --------------------------------------------


def _trace(tmp_path: Path, timestamps: list[int], name: str = "t.csv") -> Path:
    path = tmp_path / name
    path.write_text("timestamp,requests\n" + "".join(f"{t},{100 + i % 7}\n" for i, t in enumerate(timestamps)))
    return path


@pytest.mark.parametrize("command", ["backtest", "simulate"])
def test_millisecond_timestamps_are_one_line_before_any_work(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, command: str
) -> None:
    # three days of minutes, in milliseconds: read as seconds, bins of 16.7 hours over 8 years
    ms = _trace(tmp_path, [(1_700_000_000 + 60 * i) * 1000 for i in range(3 * 1440)])
    err = one_line_error(capsys, [command, "--trace", str(ms)])
    assert err.startswith(f"predictive-autoscaler {command}: error: {ms}: timestamps look like milliseconds since 1970")
    assert err.endswith("write seconds (divide by 1,000)")


@pytest.mark.parametrize("command", ["backtest", "simulate"])
def test_a_stray_row_far_away_is_one_line_before_any_work(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, command: str
) -> None:
    # one-second rows, then a row 10^9 seconds later: a grid of 8 GB a column if it were allocated
    far = _trace(tmp_path, [0, 1, 2, 10**9])
    err = one_line_error(capsys, [command, "--trace", str(far)])
    assert "a trace may hold; the longest gap is" in err


@pytest.mark.parametrize("command", ["backtest", "simulate"])
def test_a_trace_mostly_missing_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path, command: str) -> None:
    # three days of minutes, and a last row a year later
    start = 1_700_000_000
    sparse = _trace(tmp_path, [start + 60 * i for i in range(3 * 1440)] + [start + 368 * 86_400])
    err = one_line_error(capsys, [command, "--trace", str(sparse)])
    assert "% of the " in err
    assert "bins are missing; the longest gap is 365d" in err
    assert "cut the trace to the part with data" in err


@pytest.mark.parametrize("command", ["backtest", "simulate"])
def test_an_unreadable_trace_is_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: str
) -> None:
    trace = _trace(tmp_path, [0, 60, 120])
    real_open = Path.open

    def refuse(self: Path, *args: object, **kwargs: object) -> object:
        if self == trace:
            raise PermissionError(13, "Permission denied", str(self))
        return real_open(self, *args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr(Path, "open", refuse)
    err = one_line_error(capsys, [command, "--trace", str(trace)])
    assert err == f"predictive-autoscaler {command}: error: {trace}: cannot read: Permission denied"


@pytest.mark.parametrize("command", ["backtest", "simulate", "export"])
def test_a_prometheus_window_past_the_trace_bound_is_refused_before_any_request(
    capsys: pytest.CaptureFixture[str], command: str
) -> None:
    # a thousand days of one-second bins: 86.4 million bins a query
    err = one_line_error(capsys, [command, "--prometheus-url", "http://127.0.0.1:9", "--deployment", "a/b",
                                  "--since", "1000d", "--step", "1s"])
    assert "--since 1000d in --step 1s bins is 86,400,000 bins, more than the " in err
    assert "use a larger --step or a shorter --since" in err
