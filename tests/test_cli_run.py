"""``predictive-autoscaler run --once`` through ``autoscaler.cli.main``: exit codes, ``--dry-run``, the Lease.

The command reads a kubeconfig file pointing at the recording fake API server and a config file
whose ``prometheus.url`` is the real, backfilled Prometheus. ``--at`` pins the tick's time inside
the backfill (time is data), so the decisions are the ones the history implies.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from autoscaler.cli import main
from autoscaler.domain.annotations import STATUS_ANNOTATION
from tests.kube.conftest import stored_status
from tests.kube.fakeapi import FakeKubeAPI
from tests.runtime import conftest as runtime
from tests.servers import PrometheusServer, free_port

# Fixtures shared with tests/runtime (assigned, not imported, so ruff sees them as used).
fake_api = runtime.fake_api
fleet = runtime.fleet

pytestmark = pytest.mark.prometheus

LEASE = ("leases", "predictive-autoscaler", "predictive-autoscaler")


@pytest.fixture
def files(tmp_path: Path, fleet: FakeKubeAPI, prometheus_server: PrometheusServer) -> tuple[str, str]:
    kubeconfig = runtime.write_kubeconfig(tmp_path / "kubeconfig", fleet.url)
    config = runtime.write_config(tmp_path / "config.yaml", prometheus_server.url)
    return str(kubeconfig), str(config)


@pytest.fixture
def at(prometheus_server: PrometheusServer) -> int:
    return prometheus_server.now - 1800


def test_dry_run_prints_the_plan_and_writes_nothing(
    files: tuple[str, str], fleet: FakeKubeAPI, at: int, capsys: pytest.CaptureFixture[str]
) -> None:
    kubeconfig, config = files

    code = main(["run", "--once", "--dry-run", "--kubeconfig", kubeconfig, "--config", config, "--at", str(at)])

    out = capsys.readouterr().out
    assert code == 0
    assert fleet.writes() == [], "no scale, no status, no Event, no Lease"
    plan = json.loads(out)
    assert plan["dry_run"] is True
    assert plan["now"] == at
    assert plan["metrics_ok"] is True
    assert plan["errors"] == []
    by_name = {w["name"]: w for w in plan["workloads"]}
    assert set(by_name) == {"llama-chat", "mistral-code", "qwen-eval"}
    llama = by_name["llama-chat"]
    desired = llama["desired_replicas"]
    assert desired > llama["current_replicas"] == 2
    assert llama["actions"] == [f"would scale 2 -> {desired}"]
    assert llama["decision"]["steps"][-1] == {"name": "min_max_clamp", "replicas": desired,
                                              "detail": f"{desired} within [1, 20]"}
    assert llama["forecast"]["at"] == at + 900
    assert by_name["qwen-eval"]["actions"] == []


def test_once_exits_0_after_acting_as_leader_and_releases_the_lease(
    files: tuple[str, str], fleet: FakeKubeAPI, at: int, capsys: pytest.CaptureFixture[str]
) -> None:
    kubeconfig, config = files

    iso = datetime.fromtimestamp(at, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")  # --at takes ISO 8601 too
    code = main(["run", "--once", "--kubeconfig", kubeconfig, "--config", config, "--at", iso,
                 "--identity", "ctl-once"])

    assert code == 0, capsys.readouterr().err
    dep = fleet.get("deployments", "serving", "llama-chat")
    assert dep is not None
    assert dep["spec"]["replicas"] > 2
    assert STATUS_ANNOTATION not in dep["metadata"]["annotations"]
    status = stored_status(fleet, "serving", "llama-chat")
    assert status["time"] == datetime.fromtimestamp(at, tz=UTC).isoformat()
    (create,) = fleet.calls("POST", r"/leases$")
    assert create.body["spec"]["holderIdentity"] == "ctl-once"
    lease = fleet.get(*LEASE)
    assert lease is not None
    assert lease["spec"].get("holderIdentity") is None, "released on exit"
    assert capsys.readouterr().out == "", "without --dry-run nothing is printed"


def test_once_runs_its_replays_in_its_own_tick_even_with_replay_workers(
    files: tuple[str, str], fleet: FakeKubeAPI, at: int, capsys: pytest.CaptureFixture[str]
) -> None:
    """A ``--once`` process exits after its tick: replays handed to workers would never come back."""
    kubeconfig, config = files
    text = Path(config).read_text(encoding="utf-8")
    Path(config).write_text(text.replace("  step: 1m\n", "  step: 1m\n  replay_workers: 2\n"), encoding="utf-8")
    assert "replay_workers: 2" in Path(config).read_text(encoding="utf-8")

    code = main(["run", "--once", "--no-leader-election", "--kubeconfig", kubeconfig, "--config", config,
                 "--at", str(at)])

    assert code == 0, capsys.readouterr().err
    tuning = stored_status(fleet, "serving", "llama-chat")["tuning"]
    assert tuning is not None  # replayed (a day of history is too little to choose on: it says so)
    assert "not enough history to tune" in tuning["reason"]


def test_once_exits_1_when_metrics_fail_and_holds_replicas(
    files: tuple[str, str], fleet: FakeKubeAPI, at: int, capsys: pytest.CaptureFixture[str]
) -> None:
    kubeconfig, config = files
    closed = f"http://127.0.0.1:{free_port()}"

    code = main(["run", "--once", "--no-leader-election", "--kubeconfig", kubeconfig, "--config", config,
                 "--prometheus-url", closed, "--at", str(at)])

    err = capsys.readouterr().err
    assert code == 1
    assert "metrics fetch failed, holding replicas" in err
    assert closed in err
    assert fleet.calls("PATCH", r"/scale$") == []
    assert fleet.calls(None, r"/leases") == [], "--no-leader-election touches no Lease"
    reasons = sorted(e["reason"] for e in fleet.all("events"))
    assert reasons == ["MetricsUnavailable"] * 3


def test_once_without_at_uses_the_wall_clock_and_succeeds_on_an_empty_answer(
    files: tuple[str, str], fleet: FakeKubeAPI, capsys: pytest.CaptureFixture[str]
) -> None:
    # The backfill is in 2023: at the current time Prometheus answers with no series, which is
    # "missing metrics" for each workload (held), not a failed fetch.
    kubeconfig, config = files
    code = main(["run", "--once", "--dry-run", "--kubeconfig", kubeconfig, "--config", config])
    assert code == 0
    plan = json.loads(capsys.readouterr().out)
    for w in plan["workloads"]:
        assert w["desired_replicas"] == w["current_replicas"]
        assert w["forecast"] is None
        assert "hold_missing_metrics" in [s["name"] for s in w["decision"]["steps"]]
    assert fleet.writes() == []


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--at", "1700000000"], "--at needs --once"),
        (["--listen", "localhost"], "--listen: expected HOST:PORT"),
    ],
    ids=["at-without-once", "bad-listen"],
)
def test_bad_flags_are_one_line_errors(
    files: tuple[str, str], fleet: FakeKubeAPI, extra: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    kubeconfig, config = files
    code = main(["run", "--no-leader-election", "--kubeconfig", kubeconfig, "--config", config, *extra])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1
    assert message in err
    assert fleet.writes() == []


def test_at_must_have_a_zone(files: tuple[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    kubeconfig, config = files
    with pytest.raises(SystemExit) as exit_info:
        main(["run", "--once", "--kubeconfig", kubeconfig, "--config", config, "--at", "2023-11-21T12:00:00"])
    assert exit_info.value.code == 2
    assert "has no zone" in capsys.readouterr().err


def test_a_missing_kubeconfig_is_a_one_line_error(
    tmp_path: Path, prometheus_server: PrometheusServer, capsys: pytest.CaptureFixture[str]
) -> None:
    config = runtime.write_config(tmp_path / "config.yaml", prometheus_server.url)
    missing = tmp_path / "nope" / "kubeconfig"
    code = main(["run", "--once", "--kubeconfig", str(missing), "--config", str(config)])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1
    assert str(missing) in err
