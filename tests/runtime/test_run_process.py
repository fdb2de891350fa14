"""``predictive-autoscaler run`` as a real process: the loop, its HTTP endpoints, SIGTERM and the Lease.

The controller runs in a subprocess (``python -m autoscaler.cli run``) against the recording fake API
server and the real Prometheus, with a one-second loop. It uses the wall clock, so Prometheus (2023
history) answers with no series: every workload is held, which is what a standby-to-leader handover
should look like anyway. What is checked is the process's contract: /readyz after the first tick,
/healthz, /metrics with the loop's series, the Lease held while running and released on SIGTERM,
exit status 0, and a second replica that stands by until the first one lets go.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from autoscaler.domain.annotations import PREFIX
from tests.kube.fakeapi import FakeKubeAPI
from tests.runtime.conftest import write_config, write_kubeconfig
from tests.servers import PrometheusServer, free_port

pytestmark = pytest.mark.prometheus

LEASE = ("leases", "predictive-autoscaler", "predictive-autoscaler")
STARTUP_SECONDS = 90.0


class Controller:
    def __init__(self, proc: subprocess.Popen[bytes], url: str, log: Path) -> None:
        self.proc, self.url, self.log = proc, url, log

    def get(self, path: str) -> httpx.Response:
        return httpx.get(self.url + path, timeout=5.0)

    def metric(self, name: str) -> float | None:
        for line in self.get("/metrics").text.splitlines():
            if line.startswith(name + " ") or line.startswith(name + "{"):
                return float(line.rsplit(" ", 1)[1])
        return None

    def output(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")


def wait_for(condition: Callable[[], bool], what: str, controller: Controller, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if controller.proc.poll() is not None:
            pytest.fail(f"controller exited with {controller.proc.returncode} while waiting for {what}:\n"
                        f"{controller.output()[-3000:]}")
        try:
            if condition():
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    pytest.fail(f"timed out waiting for {what}:\n{controller.output()[-3000:]}")


@pytest.fixture
def start(
    tmp_path: Path, fleet: FakeKubeAPI, prometheus_server: PrometheusServer
) -> Iterator[Callable[[str], Controller]]:
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", fleet.url)
    config = write_config(tmp_path / "config.yaml", prometheus_server.url)
    started: list[Controller] = []

    def launch(identity: str) -> Controller:
        port = free_port()
        log = tmp_path / f"{identity}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "autoscaler.cli", "run", "--kubeconfig", str(kubeconfig), "--config",
                 str(config), "--listen", f"127.0.0.1:{port}", "--identity", identity],
                stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        controller = Controller(proc, f"http://127.0.0.1:{port}", log)
        started.append(controller)
        return controller

    yield launch
    for c in started:
        if c.proc.poll() is None:
            c.proc.kill()
            c.proc.wait(timeout=10)


def holder(fake: FakeKubeAPI) -> str | None:
    lease = fake.get(*LEASE)
    return None if lease is None else lease["spec"].get("holderIdentity")


def test_the_loop_serves_its_endpoints_and_releases_the_lease_on_sigterm(
    start: Callable[[str], Controller], fleet: FakeKubeAPI, tmp_path: Path
) -> None:
    config_path = tmp_path / "config.yaml"
    a = start("ctl-a")
    wait_for(lambda: a.get("/readyz").status_code == 200, "/readyz", a, STARTUP_SECONDS)

    health = a.get("/healthz")
    assert (health.status_code, health.text) == (200, "ok\n")
    assert a.get("/nope").status_code == 404
    assert a.metric("predictive_autoscaler_is_leader") == 1
    assert a.metric("predictive_autoscaler_metrics_source_up") == 1
    assert a.metric('predictive_autoscaler_workloads{state="managed"}') == 3
    ticks = a.metric("predictive_autoscaler_tick_duration_seconds_count")
    assert ticks is not None
    assert ticks >= 1
    assert holder(fleet) == "ctl-a"
    # The loop keeps ticking at its one-second interval, renewing the Lease.
    wait_for(lambda: (a.metric("predictive_autoscaler_tick_duration_seconds_count") or 0) >= ticks + 2,
             "two more ticks", a, 30)
    renewals = [c for c in fleet.calls("PUT", r"/leases/predictive-autoscaler$")
                if c.body["spec"]["holderIdentity"] == "ctl-a"]
    assert len(renewals) >= 2

    # The config file is re-read while running: a new prometheus.url takes effect without a restart.
    write_config(config_path, f"http://127.0.0.1:{free_port()}")
    wait_for(lambda: a.metric("predictive_autoscaler_metrics_source_up") == 0, "the new url to be used", a, 30)
    assert a.get("/healthz").status_code == 200, "an outage is not a reason to restart the controller"

    a.proc.send_signal(signal.SIGTERM)
    assert a.proc.wait(timeout=30) == 0, a.output()[-3000:]
    assert holder(fleet) is None, "released, so a standby takes over at once"
    assert "controller stopped" in a.output()
    # Several ticks of Prometheus and API requests, and not one library request line: those are DEBUG.
    assert "HTTP Request:" not in a.output()
    with pytest.raises(httpx.TransportError):
        a.get("/healthz")


def test_a_standby_waits_and_takes_over_when_the_leader_stops(
    start: Callable[[str], Controller], fleet: FakeKubeAPI
) -> None:
    # A malformed annotation: the acting replica posts one InvalidAnnotation Event for it.
    dep = fleet.get("deployments", "research", "qwen-eval")
    assert dep is not None
    dep["metadata"]["annotations"][PREFIX + "mode"] = "turbo"
    fleet.add("deployments", dep)

    def reporters() -> list[str]:
        return [e["reportingInstance"] for e in fleet.all("events") if e["reason"] == "InvalidAnnotation"]

    a = start("ctl-a")
    wait_for(lambda: reporters() == ["ctl-a"], "ctl-a to lead and warn", a, STARTUP_SECONDS)
    b = start("ctl-b")
    wait_for(lambda: b.get("/readyz").status_code == 200, "ctl-b /readyz", b, STARTUP_SECONDS)
    assert b.metric("predictive_autoscaler_is_leader") == 0
    # ctl-b ticks as a standby: it sees the same problem but leaves the Event to the leader.
    wait_for(lambda: (b.metric("predictive_autoscaler_tick_duration_seconds_count") or 0) >= 2, "ctl-b ticks", b, 30)
    assert b.metric('predictive_autoscaler_workloads{state="invalid"}') == 1
    assert reporters() == ["ctl-a"]
    assert holder(fleet) == "ctl-a"

    a.proc.send_signal(signal.SIGTERM)
    assert a.proc.wait(timeout=30) == 0
    wait_for(lambda: holder(fleet) == "ctl-b", "ctl-b to take over", b, 15)
    wait_for(lambda: b.metric("predictive_autoscaler_is_leader") == 1, "ctl-b is_leader", b, 15)
    # The new leader has not told anyone yet, so it does, once.
    wait_for(lambda: reporters() == ["ctl-a", "ctl-b"], "ctl-b to warn", b, 15)
    b.proc.send_signal(signal.SIGTERM)
    assert b.proc.wait(timeout=30) == 0
