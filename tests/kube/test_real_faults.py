"""The controller against a real kube-apiserver that misbehaves: two replicas, a vanished API, conflicts, an outage.

Why it exists: the recording fake (``fakeapi.py``) answers what we taught it. A real server decides for itself
what a Lease race, a deleted CRD, a concurrent writer or a restart looks like on the wire, and what the real
CRD schemas (with their CEL rules) accept. Each test here breaks one thing and checks the three things that
matter for an unattended controller: it does not crash, it says so once (a log line, an Event, a tick error,
``errors_total``), and the rest of the fleet is still served.

* Leader election with two ``run`` processes (``python -m autoscaler.cli run``) as the controller's own
  ServiceAccount (``deploy/`` applied), each with a TokenRequest token of its own: only the Lease holder writes
  (the server's audit log names the token behind every write: scale, status annotation, Events, the Lease;
  Events also carry ``reportingInstance``), SIGKILL of the holder hands over within the lease duration plus a
  tick, SIGTERM releases the Lease so the standby takes over at once, and an outage longer than the Lease ends
  with exactly one leader. These use the wall clock, where Prometheus (a 2023 backfill) has no series: every
  workload is held, and the writes come from ``min-replicas`` raised above the current count.
* Faults, with the controller wired as ``run`` wires it (``KubeCluster``, ``KarpenterCapacity``,
  ``TrainingReader``, ``MoneyStage``, ``LeaderElector``) and ticked in-process at times inside the
  Prometheus backfill (time is data), so decisions are real forecasts: CRDs deleted between ticks, 409s from a
  concurrent writer (interposed at the controller's HTTP layer, so it writes exactly between the controller's
  read and its write; the 409 is the real server's), the API server stopped and started again between ticks,
  mid-tick and under a running process (etcd kept), NodePools edited into shapes the controller did not expect.

Servers: this module starts its own kube-apiserver (``running_kube_server``; CRDs and ``deploy/`` installed,
an audit log on) rather than the session's, because the controller manages cluster-scoped NodePools and the
cluster-wide Lease, and because some tests stop and restart the API server. The CRD-deletion test starts one
more, to throw away. Restarting keeps etcd: only the kube-apiserver process is stopped and re-executed with its
own argv (``stop`` + ``start`` of ``../shared/kube`` would wipe etcd).
"""

from __future__ import annotations

import base64
import json
import logging
import os
import signal
import ssl
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from autoscaler.adapters.karpenter import GPU, KarpenterCapacity
from autoscaler.adapters.kube import KubeCluster
from autoscaler.adapters.prometheus import PrometheusSource
from autoscaler.adapters.training import TrainingReader
from autoscaler.config.parser import parse_config_text
from autoscaler.config.schema import Config
from autoscaler.domain.annotations import PREFIX
from autoscaler.domain.status import STATUS_DATA_KEY, status_object_name
from autoscaler.runtime.clock import utc
from autoscaler.runtime.leader import LeaderElector
from autoscaler.runtime.loop import Controller, TickReport
from autoscaler.runtime.metrics import ControllerMetrics
from autoscaler.runtime.money import MoneyStage
from tests.kube.conftest import deployment, nodepool
from tests.kubeserver import (
    KubeServer,
    apply,
    deploy_objects,
    ensure_namespace,
    install_crds,
    running_kube_server,
)
from tests.servers import PrometheusServer, free_port

pytestmark = [pytest.mark.kube, pytest.mark.prometheus]

SA_NAMESPACE = "predictive-autoscaler"  # deploy/: the controller's namespace, ServiceAccount and Lease
SA_NAME = "predictive-autoscaler"
LEASE_NAME = "predictive-autoscaler"
STARTUP_SECONDS = 120.0  # a process's imports and first tick on a busy 2-core machine
SLACK_SECONDS = 5.0  # on top of a 1 s tick: scheduling on a shared machine, the standby's own tick time


# ---------------------------------------------------------------------------------------------- servers


# kube-apiservers this module re-executed (ApiServerProcess.start): ``stop`` ends them by their pid file; they
# are reaped once the server that owns them has been stopped.
_RESPAWNED: list[subprocess.Popen[bytes]] = []


# Every write the server accepts or refuses, with who sent it: each controller process authenticates with a token
# of its own, and the audit event names the token (``credential-id`` = its ``jti``), so a write can be traced to
# the replica that sent it even though both replicas are the same ServiceAccount.
AUDIT_POLICY = """\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
  - level: Metadata
    verbs: ["create", "update", "patch", "delete"]
  - level: None
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeServer]:
    """This module's own API server (audited): every CRD of ../shared/crds and the deploy/ kustomization installed."""
    state = tmp_path_factory.mktemp("kube-faults")
    policy, log = state / "audit-policy.yaml", state / "audit.log"
    policy.write_text(AUDIT_POLICY)
    for s in running_kube_server(state, [f"--audit-policy-file={policy}", f"--audit-log-path={log}"]):
        with s.admin() as api:
            install_crds(api)
            apply(api, deploy_objects())
        yield s
    _reap()


@dataclass(frozen=True)
class Write:
    """One write request in the audit log."""

    who: str  # the process identity whose token sent it ("" for anyone else)
    at: float  # Unix seconds the server received it
    verb: str
    resource: str  # "deployments/scale", "events", "leases", ...
    namespace: str
    name: str
    code: int


def audited_writes(server: KubeServer, tokens: dict[str, str]) -> list[Write]:
    """The audit log's write requests, attributed to processes by their token's ``jti`` (``tokens``: jti -> who)."""
    out: list[Write] = []
    assert server.state is not None  # this module's own server, started here
    path = server.state / "audit.log"
    for line in path.read_text().splitlines() if path.exists() else ():
        event = json.loads(line)
        if event.get("stage") != "ResponseComplete":
            continue
        extra = (event.get("user") or {}).get("extra") or {}
        credential = (extra.get("authentication.kubernetes.io/credential-id") or [""])[0]
        ref = event.get("objectRef") or {}
        resource = ref.get("resource", "") + (f"/{ref['subresource']}" if ref.get("subresource") else "")
        received = datetime.fromisoformat(event["requestReceivedTimestamp"].replace("Z", "+00:00")).timestamp()
        code = (event.get("responseStatus") or {}).get("code", 0)
        out.append(Write(tokens.get(credential.removeprefix("JTI="), ""), received, event["verb"], resource,
                         ref.get("namespace", ""), ref.get("name", ""), code))
    return out


def token_id(kubeconfig: Path) -> str:
    """The ``jti`` of the ServiceAccount token in a kubeconfig written by ``KubeServer.kubeconfig_as``."""
    token = yaml.safe_load(kubeconfig.read_text())["users"][0]["user"]["token"]
    payload = token.split(".")[1]
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    return str(claims["jti"])


def _reap() -> None:
    """Collect the re-executed apiservers once ``stop`` has ended them (no zombie, no ResourceWarning)."""
    while _RESPAWNED:
        proc = _RESPAWNED.pop()
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)


@pytest.fixture
def admin(server: KubeServer) -> Iterator[client.ApiClient]:
    with server.admin() as api:
        yield api


@dataclass
class ApiServerProcess:
    """The kube-apiserver of a ``start``-ed state directory, stopped and re-executed with the same argv.

    Its etcd is left alone, so everything stored survives; the port, certificates and flags are the same, so
    every client (tokens included) reconnects as before.
    """

    server: KubeServer
    argv: list[str] = field(default_factory=list)
    cwd: str = "/"

    @property
    def pid_file(self) -> Path:
        assert self.server.state is not None
        return self.server.state / "run" / "kube-apiserver.pid"

    def pid(self) -> int:
        return int(self.pid_file.read_text().strip())

    def stop(self, timeout: float = 30.0) -> None:
        pid = self.pid()
        self.argv = [a.decode() for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") if a]
        self.cwd = os.readlink(f"/proc/{pid}/cwd")
        assert Path(self.argv[0]).name == "kube-apiserver", self.argv
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        killed = False
        while _alive(pid):
            if time.monotonic() > deadline:
                if killed:
                    pytest.fail(f"kube-apiserver (pid {pid}) survived SIGKILL", pytrace=False)
                os.kill(pid, signal.SIGKILL)
                killed, deadline = True, time.monotonic() + 10
            time.sleep(0.1)
        for proc in _RESPAWNED:  # one of ours: reap it
            if proc.pid == pid:
                proc.wait(timeout=10)

    def start(self, timeout: float = 120.0) -> None:
        assert self.argv, "stop() first"
        assert self.server.state is not None
        log = (self.server.state / "run" / "kube-apiserver.log").open("ab")
        with log:
            proc = subprocess.Popen(self.argv, cwd=self.cwd, stdin=subprocess.DEVNULL, stdout=log,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        _RESPAWNED.append(proc)
        self.pid_file.write_text(f"{proc.pid}\n")  # so ../shared/kube/stop stops this one
        env = self.server.env
        token = Path(env["ADMIN_TOKEN_FILE"]).read_text().strip()
        ca = ssl.create_default_context(cafile=env["CA_FILE"])
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                pytest.fail(f"kube-apiserver exited with {proc.returncode} on restart", pytrace=False)
            try:
                answer = httpx.get(env["APISERVER_URL"] + "/readyz", verify=ca,
                                   headers={"Authorization": f"Bearer {token}"}, timeout=3.0)
                if answer.status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"kube-apiserver not ready {timeout:.0f}s after a restart", pytrace=False)
            time.sleep(0.2)


def _alive(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "\nState:\tZ" not in status and "\nState:\tX" not in status


@pytest.fixture
def apiserver(server: KubeServer) -> Iterator[ApiServerProcess]:
    """The module server's kube-apiserver, restartable; always running again after the test."""
    process = ApiServerProcess(server)
    yield process
    if process.argv and not _alive(process.pid()):
        process.start()


# ---------------------------------------------------------------------------------------------- objects


def fleet_deployment(namespace: str, name: str, *, replicas: int, capacity: str = "5", min_replicas: int = 1,
                     extra: dict[str, str] | None = None, gpus: int = 1) -> dict[str, Any]:
    obj = deployment(namespace, name, replicas=replicas, gpus=gpus, annotations={
        PREFIX + "capacity-per-replica": capacity, PREFIX + "max-replicas": "20",
        PREFIX + "min-replicas": str(min_replicas), **(extra or {}),
    })
    obj.pop("status")  # the server owns status (there is no deployment controller to write it)
    return obj


def create(api: client.ApiClient, obj: dict[str, Any]) -> None:
    apply(api, [obj])


def annotate(api: client.ApiClient, namespace: str, name: str, annotations: dict[str, str | None]) -> None:
    client.AppsV1Api(api).patch_namespaced_deployment(name, namespace, {"metadata": {"annotations": annotations}})


def replicas_of(api: client.ApiClient, namespace: str, name: str) -> int:
    spec = client.AppsV1Api(api).read_namespaced_deployment_scale(name, namespace).spec
    assert spec is not None
    return int(spec.replicas or 0)


def status_of(api: client.ApiClient, namespace: str, name: str) -> dict[str, Any] | None:
    """What the controller published for Deployment ``name``: its status object's JSON (None: there is none)."""
    try:
        cm = client.CoreV1Api(api).read_namespaced_config_map(status_object_name(name), namespace)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
    text = (cm.data or {}).get(STATUS_DATA_KEY)
    return None if text is None else dict(json.loads(text))


def events(api: client.ApiClient, namespace: str, reason: str | None = None) -> list[client.CoreV1Event]:
    items = client.CoreV1Api(api).list_namespaced_event(namespace).items or []
    return sorted((e for e in items if reason is None or e.reason == reason),
                  key=lambda e: (e.metadata.creation_timestamp, e.metadata.name))


def lease_spec(api: client.ApiClient) -> client.V1LeaseSpec | None:
    try:
        lease = client.CoordinationV1Api(api).read_namespaced_lease(LEASE_NAME, SA_NAMESPACE)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
    return lease.spec


def holder(api: client.ApiClient) -> str | None:
    spec = lease_spec(api)
    return None if spec is None else spec.holder_identity


def delete_lease(api: client.ApiClient) -> None:
    try:
        client.CoordinationV1Api(api).delete_namespaced_lease(LEASE_NAME, SA_NAMESPACE)
    except ApiException as exc:
        if exc.status != 404:
            raise


def set_nodepool_status(api: client.ApiClient, name: str, status: dict[str, Any]) -> None:
    client.CustomObjectsApi(api).patch_cluster_custom_object_status(
        "karpenter.sh", "v1", "nodepools", name, {"status": status})


def gpu_limit_of(api: client.ApiClient, name: str) -> Any:
    obj = client.CustomObjectsApi(api).get_cluster_custom_object("karpenter.sh", "v1", "nodepools", name)
    assert isinstance(obj, dict)
    return (obj["spec"].get("limits") or {}).get(GPU)


# ---------------------------------------------------------------------------------------------- processes


PROCESS_CONFIG = """\
loop: {{interval: 1s, history: 1d, step: 1m}}
profiles:
  default: {{history: 1d, horizon: 15m}}
prometheus: {{url: "{prometheus}", retries: 0, timeout: 10s}}
namespaces: [{namespace}]
leader_election: {{lease_namespace: {lease_namespace}, lease_duration: {lease}s}}
karpenter: {{enabled: false}}
"""


class Process:
    """One ``predictive-autoscaler run`` process and its /metrics."""

    def __init__(self, identity: str, proc: subprocess.Popen[bytes], url: str, log: Path) -> None:
        self.identity, self.proc, self.url, self.log = identity, proc, url, log

    def get(self, path: str) -> httpx.Response:
        return httpx.get(self.url + path, timeout=5.0)

    def metric(self, name: str) -> float | None:
        for line in self.get("/metrics").text.splitlines():
            if line.startswith(name + " ") or line.startswith(name + "{"):
                return float(line.rsplit(" ", 1)[1])
        return None

    def ticks(self) -> float:
        return self.metric("predictive_autoscaler_tick_duration_seconds_count") or 0.0

    def output(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")


def wait_for(condition: Callable[[], bool], what: str, timeout: float, *watch: Process) -> float:
    """Poll ``condition`` every 0.1 s; the monotonic time it first held. Fails if a watched process exits."""
    deadline = time.monotonic() + timeout
    while True:
        for p in watch:
            if p.proc.poll() is not None:
                pytest.fail(f"{p.identity} exited with {p.proc.returncode} while waiting for {what}:\n"
                            f"{p.output()[-3000:]}")
        try:
            if condition():
                return time.monotonic()
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            tails = "\n".join(f"--- {p.identity}:\n{p.output()[-2000:]}" for p in watch)
            pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}\n{tails}")
        time.sleep(0.1)


@dataclass
class Launcher:
    """Starts ``run`` processes, each as the controller's ServiceAccount with a token of its own."""

    tmp: Path
    server: KubeServer
    prometheus: str
    started: list[Process] = field(default_factory=list)
    tokens: dict[str, str] = field(default_factory=dict)  # token jti -> process identity

    def __call__(self, identity: str, namespace: str, lease_seconds: int) -> Process:
        kubeconfig = self.server.kubeconfig_as(SA_NAMESPACE, SA_NAME, self.tmp / f"{identity}.kubeconfig")
        self.tokens[token_id(kubeconfig)] = identity
        config = self.tmp / f"config-{identity}.yaml"
        config.write_text(PROCESS_CONFIG.format(prometheus=self.prometheus, namespace=namespace,
                                                lease_namespace=SA_NAMESPACE, lease=lease_seconds))
        port = free_port()
        log = self.tmp / f"{identity}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "autoscaler.cli", "run", "--kubeconfig", str(kubeconfig), "--config",
                 str(config), "--listen", f"127.0.0.1:{port}", "--identity", identity],
                stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        p = Process(identity, proc, f"http://127.0.0.1:{port}", log)
        self.started.append(p)
        return p

    def writes(self, namespace: str) -> list[Write]:
        """Write requests of these processes to ``namespace`` (Deployments, their scale, Events) and the Lease."""
        return [w for w in audited_writes(self.server, self.tokens) if w.who and
                (w.namespace == namespace or (w.namespace, w.resource, w.name) == (SA_NAMESPACE, "leases",
                                                                                    LEASE_NAME))]


@pytest.fixture
def launch(tmp_path: Path, server: KubeServer, admin: client.ApiClient,
           prometheus_server: PrometheusServer) -> Iterator[Launcher]:
    """Start ``run`` processes as the controller's ServiceAccount; kills whatever is left at the end."""
    delete_lease(admin)  # no Lease left over from another test of this module
    launcher = Launcher(tmp_path, server, prometheus_server.url)
    yield launcher
    for p in launcher.started:
        if p.proc.poll() is None:
            p.proc.kill()
        p.proc.wait(timeout=30)
    delete_lease(admin)


def reporters(api: client.ApiClient, namespace: str, reason: str) -> list[str]:
    return [str(e.reporting_instance) for e in events(api, namespace, reason)]


def process_fleet(api: client.ApiClient) -> str:
    """A namespace with ``chat`` (1 replica below ``min-replicas`` 2: the acting replica scales it up, with
    no metrics needed) and ``bad`` (an unknown mode: the acting replica posts one InvalidAnnotation Event)."""
    ns = ensure_namespace(api, f"pa-faults-{uuid.uuid4().hex[:6]}")
    create(api, fleet_deployment(ns, "chat", replicas=1, min_replicas=2))
    create(api, fleet_deployment(ns, "bad", replicas=1, extra={PREFIX + "mode": "turbo"}))
    return ns


# ---------------------------------------------------------------------------------------------- 1. leader election


def test_only_the_lease_holder_writes_and_sigkill_hands_over_within_the_lease(
    launch: Launcher, admin: client.ApiClient
) -> None:
    lease = 4
    ns = process_fleet(admin)
    a = launch("ctl-a", ns, lease)
    wait_for(lambda: reporters(admin, ns, "ScaledUp") == ["ctl-a"], "ctl-a to lead and scale chat 1 -> 2",
             STARTUP_SECONDS, a)
    assert holder(admin) == "ctl-a"
    assert replicas_of(admin, ns, "chat") == 2
    wait_for(lambda: reporters(admin, ns, "InvalidAnnotation") == ["ctl-a"], "ctl-a to warn about bad", 30, a)
    # The status annotation is written after the scale and the Events of the same tick: wait for it too.
    wait_for(lambda: status_of(admin, ns, "chat") is not None, "ctl-a to write chat's status", 30, a)
    status = status_of(admin, ns, "chat")
    assert status is not None
    assert status["desiredReplicas"] == 2

    b = launch("ctl-b", ns, lease)
    wait_for(lambda: b.get("/readyz").status_code == 200, "ctl-b /readyz", STARTUP_SECONDS, a, b)
    seen = b.ticks()
    # ctl-b ticks as a standby: it plans (its metrics say what it would do) but writes nothing.
    annotate(admin, ns, "chat", {PREFIX + "min-replicas": "3"})
    wait_for(lambda: replicas_of(admin, ns, "chat") == 3, "chat scaled to the new minimum 3", 30, a, b)
    wait_for(lambda: b.ticks() >= seen + 3, "three standby ticks of ctl-b", 30, a, b)
    assert b.metric("predictive_autoscaler_is_leader") == 0
    assert a.metric("predictive_autoscaler_is_leader") == 1
    assert b.metric(f'predictive_autoscaler_desired_replicas{{deployment="chat",namespace="{ns}"}}') == 3
    assert {e.reporting_instance for e in events(admin, ns)} == {"ctl-a"}, "every write so far is ctl-a's"
    assert reporters(admin, ns, "ScaledUp") == ["ctl-a", "ctl-a"]
    assert holder(admin) == "ctl-a"

    # SIGKILL: no release. ctl-b may take over only once the Lease has expired, and must within a tick of that.
    renewed = lease_spec(admin)
    assert renewed is not None
    # The audit log: every write so far (scale, the status annotation, Events, the Lease) was sent with ctl-a's
    # token; ctl-b, ticking all along, has sent no write of any kind.
    before = launch.writes(ns)
    assert {w.who for w in before} == {"ctl-a"}
    assert {(w.verb, w.resource) for w in before} >= {
        ("patch", "deployments/scale"), ("patch", "deployments"), ("create", "events"), ("update", "leases")}
    killed_at = time.time()
    a.proc.send_signal(signal.SIGKILL)
    killed = time.monotonic()
    assert a.proc.wait(timeout=10) == -signal.SIGKILL
    took_over = wait_for(lambda: holder(admin) == "ctl-b", "ctl-b to take the Lease", 4 * lease + 30, b) - killed
    spec = lease_spec(admin)
    assert spec is not None
    assert spec.lease_transitions == (renewed.lease_transitions or 0) + 1
    # Within the lease duration and a tick (1 s), plus slack for a busy machine; never before the Lease expired,
    # which the audit log times exactly: ctl-a's last renewal to ctl-b's takeover, both as the server saw them.
    assert took_over <= lease + 1 + SLACK_SECONDS, f"handover took {took_over:.1f}s for a {lease}s Lease"
    lease_writes = [w for w in launch.writes(ns) if w.resource == "leases" and w.code < 300]
    last_renewal = max(w.at for w in lease_writes if w.who == "ctl-a")
    takeover = min(w.at for w in lease_writes if w.who == "ctl-b")
    assert takeover - last_renewal >= lease - 0.5, "ctl-b took the Lease before it expired"
    print(f"SIGKILL handover: {took_over:.2f}s after the kill, {takeover - last_renewal:.2f}s after the last "
          f"renewal (lease {lease}s, interval 1s)")

    wait_for(lambda: b.metric("predictive_autoscaler_is_leader") == 1, "ctl-b is_leader", 10, b)
    annotate(admin, ns, "chat", {PREFIX + "min-replicas": "4"})
    wait_for(lambda: replicas_of(admin, ns, "chat") == 4, "the new leader to scale chat to 4", 30, b)
    wait_for(lambda: reporters(admin, ns, "ScaledUp") == ["ctl-a", "ctl-a", "ctl-b"], "ctl-b's ScaledUp", 30, b)
    # The new leader had never told anyone about `bad`, so it does, once.
    wait_for(lambda: reporters(admin, ns, "InvalidAnnotation") == ["ctl-a", "ctl-b"], "ctl-b's warning", 30, b)
    b.proc.send_signal(signal.SIGTERM)
    assert b.proc.wait(timeout=30) == 0, b.output()[-3000:]
    writes = launch.writes(ns)
    assert [w for w in writes if w.who == "ctl-b" and w.at < killed_at] == [], "a standby writes nothing"
    assert [w for w in writes if w.who == "ctl-a" and w.at > killed_at] == []
    after = [w for w in writes if w.at > killed_at]
    assert {(w.verb, w.resource) for w in after} >= {("patch", "deployments/scale"), ("create", "events")}
    assert all(w.code < 300 for w in writes if w.resource != "leases"), [w for w in writes if w.code >= 300]


def test_sigterm_releases_the_lease_and_the_standby_takes_over_at_once(
    launch: Launcher, admin: client.ApiClient
) -> None:
    lease = 15
    ns = process_fleet(admin)
    a = launch("ctl-a", ns, lease)
    wait_for(lambda: reporters(admin, ns, "ScaledUp") == ["ctl-a"], "ctl-a to lead", STARTUP_SECONDS, a)
    b = launch("ctl-b", ns, lease)
    wait_for(lambda: b.get("/readyz").status_code == 200, "ctl-b /readyz", STARTUP_SECONDS, a, b)
    wait_for(lambda: b.ticks() >= 2, "ctl-b standby ticks", 30, a, b)
    assert holder(admin) == "ctl-a"

    a.proc.send_signal(signal.SIGTERM)
    stopped = time.monotonic()
    assert a.proc.wait(timeout=30) == 0, a.output()[-3000:]
    stopped_at = time.time()
    assert "controller stopped" in a.output()
    spec = lease_spec(admin)
    assert spec is not None
    assert spec.holder_identity in (None, "ctl-b"), "released on the way out"
    took_over = wait_for(lambda: holder(admin) == "ctl-b", "ctl-b to take the released Lease", lease, b) - stopped
    assert took_over < 1 + SLACK_SECONDS < lease, f"took {took_over:.1f}s: a released Lease is taken at once"
    print(f"SIGTERM handover: {took_over:.2f}s (lease {lease}s, interval 1s)")
    annotate(admin, ns, "chat", {PREFIX + "min-replicas": "3"})
    wait_for(lambda: reporters(admin, ns, "ScaledUp") == ["ctl-a", "ctl-b"], "ctl-b to act", 30, b)
    assert replicas_of(admin, ns, "chat") == 3
    lease_writes = [w for w in launch.writes(ns) if w.resource == "leases"]
    first_b = next(i for i, w in enumerate(lease_writes) if w.who == "ctl-b")
    assert {w.who for w in lease_writes[:first_b]} == {"ctl-a"}, "ctl-b wrote the Lease only to take it over"
    assert lease_writes[first_b - 1].at <= stopped_at, "ctl-a's last Lease write: the release, as it stopped"


# ---------------------------------------------------------------------------------------------- in-process rig


RIG_CONFIG = """\
loop: {{interval: 60s, history: 1d, step: 1m}}
profiles:
  default: {{history: 1d, horizon: 15m}}
prometheus: {{url: "{prometheus}", retries: 0, timeout: 10s}}
namespaces: [{namespaces}]
leader_election: {{lease_namespace: {lease_namespace}, lease_name: {lease_name}, lease_duration: 120s}}
karpenter: {{enabled: true, headroom: auto, namespace: {lease_namespace}}}
ceilings: {{cluster: {ceiling}}}
"""


@dataclass
class Rig:
    """A controller wired as ``run`` wires it (Kubernetes, Karpenter, Kueue/Volcano adapters, the Lease), ticked
    at chosen times. ``dry_run`` makes the twin that reads the same server and writes nothing."""

    controller: Controller
    leader: LeaderElector
    source: PrometheusSource
    config: Config
    dry_run: bool = False
    reports: list[TickReport] = field(default_factory=list)

    def tick(self, now: float) -> TickReport:
        acting = self.dry_run or self.leader.try_acquire_or_renew(utc(now))
        report = self.controller.tick(now, acting=acting)
        self.reports.append(report)
        return report

    def errors(self, kind: str) -> float:
        value = self.controller.metrics.registry.get_sample_value("predictive_autoscaler_errors_total",
                                                                  {"kind": kind})
        return value or 0.0

    def workload(self, report: TickReport, name: str) -> dict[str, Any]:
        (found,) = [w.to_dict() for w in report.workloads if w.name == name]
        return found


@pytest.fixture
def make_rig(prometheus_server: PrometheusServer) -> Iterator[Callable[..., Rig]]:
    rigs: list[Rig] = []

    def make(api: client.ApiClient, namespaces: list[str], *, identity: str = "ctl-rig", dry_run: bool = False,
             ceiling: float = 200.0, lease_name: str | None = None) -> Rig:
        cfg = parse_config_text(RIG_CONFIG.format(
            prometheus=prometheus_server.url, namespaces=", ".join(namespaces), lease_namespace=SA_NAMESPACE,
            lease_name=lease_name or f"faults-{uuid.uuid4().hex[:8]}", ceiling=ceiling,
        ), "rig.yaml")
        source = PrometheusSource(cfg.prometheus.url, retries=0, timeout_seconds=10)
        money = MoneyStage(capacity=KarpenterCapacity(api, namespace=cfg.karpenter.namespace),
                           training=TrainingReader(api, namespaces=cfg.namespaces or None))
        controller = Controller(KubeCluster(api, instance=identity), source, lambda: cfg, metrics=ControllerMetrics(),
                                dry_run=dry_run, money=money)
        le = cfg.leader_election
        leader = LeaderElector(api, le.lease_namespace, le.lease_name, identity, le.lease_duration_seconds)
        rig = Rig(controller, leader, source, cfg, dry_run)
        rigs.append(rig)
        return rig

    yield make
    for rig in rigs:
        rig.source.close()


def serving_fleet(api: client.ApiClient, *, nodepool_name: str | None = None) -> None:
    """The Deployments the Prometheus backfill has traffic for (``serving/llama-chat`` needs more replicas than
    its 2; ``serving/mistral-code`` holds), and ``serving/broken`` with a malformed annotation."""
    ensure_namespace(api, "serving")
    pool = {PREFIX + "nodepool": nodepool_name} if nodepool_name else {}
    create(api, fleet_deployment("serving", "llama-chat", replicas=2, capacity="0.4", extra=pool))
    create(api, fleet_deployment("serving", "mistral-code", replicas=1, capacity="5", extra=pool))
    create(api, fleet_deployment("serving", "broken", replicas=1, extra={PREFIX + "mode": "turbo"}))


def ready_pods(api: client.ApiClient, namespace: str, app: str, count: int, startup_seconds: int) -> None:
    """``count`` pods of ``app`` that became Ready ``startup_seconds`` after creation (written as a kubelet would,
    there being none): the start-ups the controller learns its lead time from."""
    core = client.CoreV1Api(api)
    for i in range(count):
        created = core.create_namespaced_pod(namespace, {  # type: ignore[arg-type]
            "metadata": {"name": f"{app}-{i}", "labels": {"app": app}},
            "spec": {"containers": [{"name": "server", "image": "vllm/vllm-openai:v0.6.0"}]},
        })
        assert created.metadata is not None
        assert created.metadata.creation_timestamp is not None
        ready: datetime = created.metadata.creation_timestamp + timedelta(seconds=startup_seconds)
        stamp = ready.strftime("%Y-%m-%dT%H:%M:%SZ")
        core.patch_namespaced_pod_status(f"{app}-{i}", namespace, {"status": {
            "phase": "Running",
            "conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": stamp},
                           {"type": "Ready", "status": "True", "lastTransitionTime": stamp}],
            "containerStatuses": [{"name": "server", "image": "vllm/vllm-openai:v0.6.0", "imageID": "",
                                   "ready": True, "restartCount": 0, "started": True,
                                   "state": {"running": {"startedAt": stamp}}}],
        }})


# ---------------------------------------------------------------------------------------------- 2c. restart


def test_the_api_server_stops_and_starts_again_and_no_decision_history_is_lost(
    admin: client.ApiClient, apiserver: ApiServerProcess, make_rig: Callable[..., Rig],
    prometheus_server: PrometheusServer,
) -> None:
    serving_fleet(admin)
    ready_pods(admin, "serving", "llama-chat", 6, 95)
    real = make_rig(admin, ["serving"], identity="ctl-real")
    # The twin never writes; it reads what `real` reads, at the same times, but skips the outage: what `real`
    # decides after the restart must be what an uninterrupted controller decides.
    twin = make_rig(admin, ["serving"], identity="ctl-twin", dry_run=True)
    t0 = prometheus_server.now - 3600

    twin.tick(t0)
    first = real.tick(t0)
    assert first.ok, first.errors
    scaled = real.workload(first, "llama-chat")["desired_replicas"]
    assert scaled > 2
    assert replicas_of(admin, "serving", "llama-chat") == scaled
    assert len(events(admin, "serving", "InvalidAnnotation")) == 1
    (lead,) = [s for s in real.workload(first, "llama-chat")["decision"]["steps"] if s["name"] == "lead_time"]
    assert "pod 95s = p90 of 6 observed start-ups" in lead["detail"], "the learned cold start, not the prior"
    lease = real.leader
    assert lease.is_leader
    held = client.CoordinationV1Api(admin).read_namespaced_lease(lease.name, SA_NAMESPACE).spec
    assert held is not None
    transitions = held.lease_transitions

    apiserver.stop()
    for k in (1, 2):  # two ticks with the API server gone
        down = real.tick(t0 + 60 * k)
        assert not down.acting, "a replica that cannot renew its Lease does not act"
        assert lease.last_error is not None
        assert "cannot reach the API server" in lease.last_error
        assert len(down.errors) == 1, down.errors
        assert down.errors[0].startswith("listing Deployments failed")
        assert "cannot reach the API server" in down.errors[0]
    assert real.errors("kube_read") == 2
    apiserver.start()

    t = t0 + 180
    expected = twin.tick(t)
    back = real.tick(t)
    assert back.acting, lease.last_error
    assert back.ok, back.errors
    renewed = client.CoordinationV1Api(admin).read_namespaced_lease(lease.name, SA_NAMESPACE).spec
    assert renewed is not None
    assert (renewed.holder_identity, renewed.lease_transitions) == ("ctl-real", transitions), "renewed, not retaken"
    # The same decision as the uninterrupted twin, numbers and all: the fitted model (updated, not refitted),
    # the fetched history and the stabilisation window all survived the outage.
    # The learned start-ups (the lead time) too: the decision's lead_time step is part of the comparison.
    for name in ("llama-chat", "mistral-code"):
        assert real.workload(back, name)["decision"] == twin.workload(expected, name)["decision"]
        assert real.workload(back, name)["forecast"] == twin.workload(expected, name)["forecast"]
    assert len(events(admin, "serving", "InvalidAnnotation")) == 1, "already told before the outage: not again"

    # Demand per replica jumps 100x: the recommendation collapses, but the scale-up recorded before the outage
    # is still in the stabilisation window, so the count holds (a controller that had lost it would also hold,
    # but only because it seeds the window with the current count: the twin shows which one this is).
    annotate(admin, "serving", "llama-chat", {PREFIX + "capacity-per-replica": "40"})
    t = t0 + 240
    expected = twin.tick(t)
    after = real.tick(t)
    assert after.ok, after.errors
    decision = real.workload(after, "llama-chat")["decision"]
    assert decision == twin.workload(expected, "llama-chat")["decision"]
    assert decision["desired_replicas"] == scaled
    stabilization = [s for s in decision["steps"] if s["name"] == "stabilization"]
    assert stabilization, decision["steps"]
    assert stabilization[0]["replicas"] == scaled
    assert "no history passed in" not in stabilization[0]["detail"]
    assert replicas_of(admin, "serving", "llama-chat") == scaled


def test_a_running_controller_rides_out_an_api_server_restart(
    launch: Launcher, admin: client.ApiClient, apiserver: ApiServerProcess
) -> None:
    ns = process_fleet(admin)
    a = launch("ctl-a", ns, 15)
    wait_for(lambda: reporters(admin, ns, "ScaledUp") == ["ctl-a"], "ctl-a to lead", STARTUP_SECONDS, a)
    before = lease_spec(admin)
    assert before is not None

    apiserver.stop()
    down = time.monotonic()
    failed = a.metric('predictive_autoscaler_errors_total{kind="kube_read"}') or 0.0
    wait_for(lambda: (a.metric('predictive_autoscaler_errors_total{kind="kube_read"}') or 0) >= failed + 2,
             "two ticks that cannot list Deployments", 60, a)
    assert a.metric("predictive_autoscaler_is_leader") == 0, "cannot renew, so it stops acting"
    assert a.get("/healthz").status_code == 200, "an API outage is not a reason to restart the controller"
    apiserver.start()
    outage = time.monotonic() - down

    # It catches up by itself: renews its own Lease (no takeover), and acts on what changed meanwhile.
    wait_for(lambda: a.metric("predictive_autoscaler_is_leader") == 1, "ctl-a to lead again", 30, a)
    annotate(admin, ns, "chat", {PREFIX + "min-replicas": "3"})
    back = wait_for(lambda: replicas_of(admin, ns, "chat") == 3, "ctl-a to scale after the restart", 30, a)
    assert reporters(admin, ns, "ScaledUp") == ["ctl-a", "ctl-a"]
    assert reporters(admin, ns, "InvalidAnnotation") == ["ctl-a"], "told once, before the outage"
    after = lease_spec(admin)
    assert after is not None
    assert (after.holder_identity, after.lease_transitions) == ("ctl-a", before.lease_transitions)
    log = a.output()
    assert "tick failed" not in log, log[-3000:]
    assert "Traceback" not in log, log[-3000:]
    assert "listing Deployments failed" in log
    print(f"API server down {outage:.1f}s; scaled {back - down - outage:.1f}s after it was back")
    a.proc.send_signal(signal.SIGTERM)
    assert a.proc.wait(timeout=30) == 0, a.output()[-3000:]


# ---------------------------------------------------------------------------------------------- 2b. conflicts


class ConcurrentWriter:
    """Another client that writes the same object just before the controller's write of it reaches the server.

    It sits in the controller's ApiClient at the last step before the wire (``rest_client.request``), so the
    interleaving is exact: the controller has read the object, the other client changes it, then the
    controller's write arrives and the real server judges it (a stale ``resourceVersion`` precondition is a real
    ``409 Conflict``). Requests are forwarded unchanged; ``writes`` counts the controller's writes it saw.
    """

    def __init__(self, api: client.ApiClient, method: str, path: str, interfere: Callable[[], None],
                 times: int) -> None:
        self._rest = api.rest_client
        self._inner: Callable[..., Any] = self._rest.request
        self.method, self.path, self.interfere, self.remaining = method, path, interfere, times
        self.writes = 0
        setattr(self._rest, "request", self._request)  # noqa: B010 - mypy forbids assigning to a method

    def _request(self, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        if method == self.method and url.split("?", 1)[0].endswith(self.path):
            self.writes += 1
            if self.remaining > 0:
                self.remaining -= 1
                self.interfere()
        return self._inner(method, url, *args, **kwargs)

    def close(self) -> None:
        setattr(self._rest, "request", self._inner)  # noqa: B010


def conflict_pool(api: client.ApiClient, name: str, *, limit: str) -> None:
    obj = nodepool(name, gpu_limit=limit, gpus_in_use=None)
    obj.pop("status")
    create(api, obj)
    set_nodepool_status(api, name, {"nodes": 0, "resources": {"cpu": "0", GPU: "0"}})


def delete_pools(api: client.ApiClient, *names: str) -> None:
    for name in names:
        try:
            client.CustomObjectsApi(api).delete_cluster_custom_object("karpenter.sh", "v1", "nodepools", name)
        except ApiException as exc:
            if exc.status != 404:
                raise


def test_a_concurrent_writer_causes_conflicts_that_are_retried_or_reported_once(
    server: KubeServer, admin: client.ApiClient, make_rig: Callable[..., Rig], prometheus_server: PrometheusServer,
) -> None:
    ns = ensure_namespace(admin, f"pa-conflict-{uuid.uuid4().hex[:6]}")
    create(admin, fleet_deployment(ns, "chat", replicas=1, min_replicas=2))
    pool = f"gpu-{uuid.uuid4().hex[:6]}"
    conflict_pool(admin, pool, limit="1000")
    with server.admin() as other:  # the concurrent writer: its own client, a label bump per write
        bumps = 0

        def bump() -> None:
            nonlocal bumps
            bumps += 1
            client.CustomObjectsApi(other).patch_cluster_custom_object(
                "karpenter.sh", "v1", "nodepools", pool, {"metadata": {"labels": {"touched": str(bumps)}}})

        try:
            with server.admin() as api:
                rig = make_rig(api, [ns], identity="ctl-conflict")
                t = prometheus_server.now
                # One write in between: the lowered limit (sent with the resourceVersion it was checked against)
                # is refused with 409, re-read, re-checked and sent again.
                writer = ConcurrentWriter(api, "PATCH", f"/nodepools/{pool}", bump, times=1)
                first = rig.tick(t)
                writer.close()
                assert first.ok, first.errors
                limit = first.money.limits[pool] if first.money is not None else None
                assert limit is not None
                assert limit < 1000
                assert (writer.writes, bumps) == (2, 1), "one 409, one retry"
                assert gpu_limit_of(admin, pool) == str(limit)
                assert replicas_of(admin, ns, "chat") == 2

                # A writer that gets in before every attempt: the write is given up after the bounded retries,
                # reported once in the tick, and the rest of the fleet is still served in that same tick.
                set_limit = {"spec": {"limits": {GPU: "900"}}}
                client.CustomObjectsApi(admin).patch_cluster_custom_object("karpenter.sh", "v1", "nodepools",
                                                                           pool, set_limit)
                annotate(admin, ns, "chat", {PREFIX + "min-replicas": "3"})
                writer = ConcurrentWriter(api, "PATCH", f"/nodepools/{pool}", bump, times=100)
                second = rig.tick(t + 60)
                writer.close()
                assert writer.writes == 4, "the first attempt and three retries"
                (error,) = second.errors
                assert error.startswith(f"NodePool {pool}: setting the GPU limit to {limit} failed")
                assert "HTTP 409" in error
                assert "(after 4 attempts)" in error
                assert rig.errors("kube_write") == 1
                assert gpu_limit_of(admin, pool) == "900"
                assert replicas_of(admin, ns, "chat") == 3, "the fleet is served in the tick that hit the conflicts"
                assert reporters(admin, ns, "ScaledUp") == ["ctl-conflict", "ctl-conflict"]

                # The writer is gone: the next tick sets the limit, nothing is reported.
                third = rig.tick(t + 120)
                assert third.ok, third.errors
                assert gpu_limit_of(admin, pool) == str(limit)

                # The Lease: someone else writes it between the renewal's read and its PUT. That tick the real
                # server refuses the renewal (409) and the replica does not act; it renews on the next.
                lease_path = f"/leases/{rig.leader.name}"

                def touch_lease() -> None:
                    client.CoordinationV1Api(other).patch_namespaced_lease(
                        rig.leader.name, SA_NAMESPACE, {"metadata": {"annotations": {"touched": str(time.time())}}})

                annotate(admin, ns, "chat", {PREFIX + "min-replicas": "4"})
                writer = ConcurrentWriter(api, "PUT", lease_path, touch_lease, times=1)
                fourth = rig.tick(t + 180)
                writer.close()
                assert not fourth.acting
                assert replicas_of(admin, ns, "chat") == 3, "a replica whose renewal failed writes nothing"
                assert holder_of(admin, rig.leader.name) == "ctl-conflict", "still ours: nobody else took it"
                fifth = rig.tick(t + 240)
                assert fifth.acting
                assert fifth.ok, fifth.errors
                assert replicas_of(admin, ns, "chat") == 4

                # The Deployment: its owner edits an annotation between the status write's read and its patch.
                # The status is a merge patch of one key (no precondition, no 409), so neither write is lost.
                def owner_edits() -> None:
                    annotate(other, ns, "chat", {PREFIX + "max-replicas": "30"})

                writer = ConcurrentWriter(api, "PATCH", f"/namespaces/{ns}/deployments/chat", owner_edits, times=1)
                sixth = rig.tick(t + 540)  # past the status refresh period: the status is written again
                writer.close()
                assert sixth.ok, sixth.errors
                assert writer.writes == 1
                meta = client.AppsV1Api(admin).read_namespaced_deployment("chat", ns).metadata
                assert meta is not None
                assert (meta.annotations or {})[PREFIX + "max-replicas"] == "30", "the owner's edit survived"
                status = status_of(admin, ns, "chat")
                assert status is not None
                assert status["time"] == utc(t + 540).isoformat(), "and so did the controller's"
        finally:
            delete_pools(admin, pool)


def holder_of(api: client.ApiClient, lease: str) -> str | None:
    spec = client.CoordinationV1Api(api).read_namespaced_lease(lease, SA_NAMESPACE).spec
    return None if spec is None else spec.holder_identity


# ---------------------------------------------------------------------------------------------- 2d. odd NodePools


def odd_pools(suffix: str) -> dict[str, dict[str, Any]]:
    """NodePools as people edit them, each accepted by the real CRD schema (and its CEL rules)."""
    def pool(name: str, **kw: Any) -> dict[str, Any]:
        obj = nodepool(f"{name}-{suffix}", gpus_in_use=None, **kw)
        obj.pop("status")
        return obj

    no_limits = pool("no-limits", gpu_limit=None)
    no_limits["spec"].pop("limits", None)
    kilo = pool("kilo", gpu_limit="1k")
    milli = pool("milli", gpu_limit="500m")
    # No instance type and no GPU count: nothing says what a node is or costs.
    unknown = pool("unknown", gpu_limit=8)
    unknown["spec"]["template"]["spec"]["requirements"] = [
        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}]
    # A static NodePool (Karpenter 1.6+): a fixed node count; only limits.nodes is allowed, weight is not.
    static = pool("static", gpu_limit=None)
    static["spec"].pop("weight")
    static["spec"]["replicas"] = 2
    static["spec"]["limits"] = {"nodes": 4}
    return {"no_limits": no_limits, "kilo": kilo, "milli": milli, "unknown": unknown, "static": static}


def test_nodepools_edited_into_unexpected_shapes_are_handled_or_reported_once(
    admin: client.ApiClient, make_rig: Callable[..., Rig], prometheus_server: PrometheusServer,
) -> None:
    suffix = uuid.uuid4().hex[:6]
    pools = odd_pools(suffix)
    names = {k: p["metadata"]["name"] for k, p in pools.items()}
    ns = ensure_namespace(admin, f"pa-pools-{suffix}")
    create(admin, fleet_deployment(ns, "chat", replicas=1, min_replicas=2))
    try:
        for obj in pools.values():
            create(admin, obj)
        set_nodepool_status(admin, names["kilo"], {"nodes": 1, "resources": {GPU: "1500m"}})  # odd usage too
        set_nodepool_status(admin, names["static"], {"nodes": 2, "resources": {GPU: "16"}})
        rig = make_rig(admin, [ns], identity="ctl-pools", ceiling=400.0)
        t = prometheus_server.now

        first = rig.tick(t)
        assert replicas_of(admin, ns, "chat") == 2, "the fleet is served whatever the NodePools look like"
        assert first.money is not None
        limits = first.money.limits
        # Managed where the pool is understood: a limit where there was none, a kilo-limit lowered, a milli-limit
        # (0 GPUs) raised; never below what runs (2 GPUs for the 1500m in use).
        assert gpu_limit_of(admin, names["no_limits"]) == str(limits[names["no_limits"]])
        assert gpu_limit_of(admin, names["kilo"]) == str(limits[names["kilo"]])
        assert 2 <= limits[names["kilo"]] < 1000
        assert gpu_limit_of(admin, names["milli"]) == str(limits[names["milli"]])
        assert limits[names["milli"]] > 0
        # Not understood: reported (once), left alone.
        assert names["unknown"] not in limits
        assert gpu_limit_of(admin, names["unknown"]) == 8
        unknown = [e for e in first.errors if names["unknown"] in e]
        assert len(unknown) == 1, first.errors
        assert "not priced" in unknown[0]
        # A static pool has a fixed node count: a GPU limit is not Karpenter's to apply there (its CEL rule
        # refuses one), so the controller does not ask for one.
        assert names["static"] not in limits
        static = client.CustomObjectsApi(admin).get_cluster_custom_object("karpenter.sh", "v1", "nodepools",
                                                                          names["static"])
        assert isinstance(static, dict)
        assert static["spec"]["limits"] == {"nodes": 4}
        assert [e for e in first.errors if names["static"] in e] == []
        assert len(first.errors) == 1, first.errors

        second = rig.tick(t + 60)
        assert second.ok, second.errors  # standing problems are not repeated every tick
        assert second.money is not None
        assert not [a for a in second.money.actions if "GPU limit" in a], "steady state writes nothing"

        # The template is changed under it: another instance type (another price) -> another limit.
        client.CustomObjectsApi(admin).patch_cluster_custom_object(
            "karpenter.sh", "v1", "nodepools", names["no_limits"],
            [{"op": "replace", "path": "/spec/template/spec/requirements/0/values", "value": ["g6.48xlarge"]}],
            _content_type="application/json-patch+json")
        third = rig.tick(t + 120)
        assert third.ok, third.errors
        assert third.money is not None
        assert third.money.limits[names["no_limits"]] > limits[names["no_limits"]], "cheaper GPUs, more of them"
        assert gpu_limit_of(admin, names["no_limits"]) == str(third.money.limits[names["no_limits"]])
    finally:
        delete_pools(admin, *names.values())


# ---------------------------------------------------------------------------------------------- 2a. API removed


@pytest.fixture
def throwaway(tmp_path: Path) -> Iterator[KubeServer]:
    """A server of this test's own, whose CRDs the test deletes."""
    for s in running_kube_server(tmp_path / "kube"):
        with s.admin() as api:
            install_crds(api)
            ensure_namespace(api, SA_NAMESPACE)
        yield s


CRD_NAMES = {
    "capacitybuffers": "capacitybuffers.autoscaling.x-k8s.io",
    "podgroups": "podgroups.scheduling.volcano.sh",
    "workloads": "workloads.kueue.x-k8s.io",
    "nodepools": "nodepools.karpenter.sh",
}


def delete_crd(api: client.ApiClient, plural: str, timeout: float = 60.0) -> None:
    """Delete a CRD and wait until its API answers 404 (its objects are deleted with it)."""
    name = CRD_NAMES[plural]
    group = name.split(".", 1)[1]
    ext = client.ApiextensionsV1Api(api)
    version = ext.read_custom_resource_definition(name).spec.versions[0].name
    ext.delete_custom_resource_definition(name)
    deadline = time.monotonic() + timeout
    while True:
        try:
            client.CustomObjectsApi(api).list_cluster_custom_object(group, version, plural, limit=1)
        except ApiException as exc:
            if exc.status == 404:
                return
            raise
        if time.monotonic() > deadline:
            raise TimeoutError(f"{plural} still served {timeout:.0f}s after deleting CRD {name}")
        time.sleep(0.2)


def test_api_groups_removed_between_ticks_are_noticed_once_and_the_fleet_goes_on(
    throwaway: KubeServer, make_rig: Callable[..., Rig], prometheus_server: PrometheusServer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    from tests.kube.test_training import podgroup, workload

    with throwaway.admin() as api:
        pool = nodepool("gpu", gpus_in_use=None)
        pool.pop("status")
        create(api, pool)
        set_nodepool_status(api, "gpu", {"nodes": 1, "resources": {GPU: "8"}})
        serving_fleet(api, nodepool_name="gpu")
        for gang in (workload("serving", "finetune", gpus=8, count=1, admitted=False),
                     podgroup("serving", "pretrain", min_member=1, gpus=8)):
            gang.pop("status", None)
            if gang["kind"] == "Workload":
                gang["spec"]["priority"] = 100  # Kueue's CEL rule: a priorityClassName comes with its value
            create(api, gang)
        rig = make_rig(api, ["serving"], identity="ctl-crds", ceiling=2000.0)
        t = prometheus_server.now - 3600
        step = 300  # a tick every 5 minutes of data: the status is refreshed on each one

        def tick_and_check(what: str) -> TickReport:
            nonlocal t
            t += step
            report = rig.tick(t)
            assert report.acting
            for name in ("llama-chat", "mistral-code"):
                status = status_of(api, "serving", name)
                assert status is not None
                assert status["time"] == utc(t).isoformat(), f"{name} not served in the tick after {what}"
            return report

        first = tick_and_check("start")
        assert first.ok, first.errors
        assert first.money is not None
        assert len(first.money.report.gangs_reserved) == 2, "the Kueue Workload and the Volcano PodGroup count"
        assert rig.controller.money.capacity is not None
        assert rig.controller.money.capacity.headroom_mode() == "capacitybuffer"
        kinds_before = {k: rig.errors(k) for k in ("kube_read", "kube_write")}

        # CapacityBuffers go away (the cluster-autoscaler add-on uninstalled): headroom falls back to placeholder
        # pods at once instead of failing every tick until the discovery cache expires.
        delete_crd(api, "capacitybuffers")
        caplog.clear()
        reports = [tick_and_check("CapacityBuffers were removed") for _ in range(3)]
        assert all(r.ok for r in reports), [r.errors for r in reports]
        assert rig.controller.money.capacity.headroom_mode() == "placeholder"
        told = [r.getMessage() for r in caplog.records if "capacitybuffers" in r.getMessage()]
        assert told == ["autoscaling.x-k8s.io/v1beta1 capacitybuffers are no longer served: headroom is held as "
                        "placeholder pods from now on"]

        # Volcano and Kueue go away: no gangs of theirs any more, no error (a cluster without them is normal).
        caplog.set_level(logging.INFO)
        delete_crd(api, "podgroups")
        delete_crd(api, "workloads")
        gone = [tick_and_check("Kueue and Volcano were removed") for _ in range(2)]
        assert all(r.ok for r in gone), [r.errors for r in gone]
        assert gone[-1].money is not None
        assert gone[-1].money.report.gangs_reserved == ()
        for api_version, installs in (("kueue.x-k8s.io/v1beta1 workloads", "Kueue"),
                                      ("scheduling.volcano.sh/v1beta1 podgroups", "Volcano")):
            notes = [r for r in caplog.records if r.getMessage().startswith(f"{api_version} is not served")]
            assert len(notes) == 1, f"{installs}: said once, not every tick"

        # Karpenter goes away: prices from the config, no limits, no headroom, no error.
        delete_crd(api, "nodepools")
        last = [tick_and_check("NodePools were removed") for _ in range(2)]
        assert all(r.ok for r in last), [r.errors for r in last]
        notes = [r for r in caplog.records if r.getMessage().startswith("karpenter.sh/v1 NodePools are not served")]
        assert len(notes) == 1
        assert last[-1].money is not None
        assert last[-1].money.limits == {}
        assert rig.errors("kube_write") == kinds_before["kube_write"]
        assert rig.errors("kube_read") - kinds_before["kube_read"] <= 1


def test_two_replicas_through_an_outage_longer_than_the_lease_end_with_one_leader(
    launch: Launcher, admin: client.ApiClient, apiserver: ApiServerProcess
) -> None:
    lease = 4
    ns = process_fleet(admin)
    a = launch("ctl-a", ns, lease)
    wait_for(lambda: reporters(admin, ns, "ScaledUp") == ["ctl-a"], "ctl-a to lead", STARTUP_SECONDS, a)
    b = launch("ctl-b", ns, lease)
    wait_for(lambda: b.ticks() >= 2, "ctl-b standby ticks", STARTUP_SECONDS, a, b)

    apiserver.stop()
    def failed_twice(p: Process) -> Callable[[], bool]:
        return lambda: (p.metric('predictive_autoscaler_errors_total{kind="kube_read"}') or 0) >= 2

    for p in (a, b):
        wait_for(failed_twice(p), f"{p.identity} to fail to list", 60, a, b)
    time.sleep(lease + 1)  # the Lease has expired by now: both may try for it when the server is back
    assert a.metric("predictive_autoscaler_is_leader") == 0
    assert b.metric("predictive_autoscaler_is_leader") == 0
    apiserver.start()
    restarted_at = time.time()

    def one_leader() -> bool:
        flags = [p.metric("predictive_autoscaler_is_leader") for p in (a, b)]
        return flags in ([0, 1], [1, 0])

    wait_for(one_leader, "exactly one replica to lead", 30, a, b)
    leader = holder(admin)
    assert leader in ("ctl-a", "ctl-b")
    for _ in range(5):  # and it stays that way, tick after tick
        time.sleep(1)
        assert one_leader()
        assert holder(admin) == leader
    annotate(admin, ns, "chat", {PREFIX + "min-replicas": "3"})
    wait_for(lambda: replicas_of(admin, ns, "chat") == 3, "the leader to scale", 30, a, b)
    assert reporters(admin, ns, "ScaledUp") == ["ctl-a", leader]
    # The audit log: after the restart every accepted write, the Lease's included, came from the one leader (a
    # loser of the race for the expired Lease gets a 409 from the server, and writes nothing else).
    after = [w for w in launch.writes(ns) if w.at >= restarted_at - 1]
    assert {w.who for w in after if w.code < 300} == {leader}, after
    assert all(w.resource == "leases" and w.code == 409 for w in after if w.who != leader), after
    races = [(w.who, w.code) for w in after if w.resource == "leases"][:3]
    print(f"after the outage: {leader} leads; first Lease writes {races}")


def test_the_api_server_goes_away_in_the_middle_of_a_tick(
    admin: client.ApiClient, apiserver: ApiServerProcess, make_rig: Callable[..., Rig], server: KubeServer,
    prometheus_server: PrometheusServer,
) -> None:
    ns = ensure_namespace(admin, f"pa-midtick-{uuid.uuid4().hex[:6]}")
    create(admin, fleet_deployment(ns, "chat", replicas=1, min_replicas=2))
    create(admin, fleet_deployment(ns, "steady", replicas=1))
    with server.admin() as api:
        rig = make_rig(api, [ns], identity="ctl-midtick")
        # The API server stops right when the scale is sent: everything read, nothing written yet.
        writer = ConcurrentWriter(api, "PATCH", "/deployments/chat/scale", apiserver.stop, times=1)
        t = prometheus_server.now
        try:
            broken = rig.tick(t)
        finally:
            writer.close()
            apiserver.start()
        assert broken.acting
        assert broken.errors
        assert broken.errors[0].startswith(f"{ns}/chat: scaling to 2 failed")
        for error in broken.errors:
            assert "cannot reach the API server" in error, broken.errors
        assert rig.errors("kube_write") == len(broken.errors)
        assert replicas_of(admin, ns, "chat") == 1
        assert status_of(admin, ns, "chat") is None

        # The next tick does what the broken one could not, once.
        back = rig.tick(t + 60)
        assert back.ok, back.errors
        assert replicas_of(admin, ns, "chat") == 2
        assert reporters(admin, ns, "ScaledUp") == ["ctl-midtick"]
        for name in ("chat", "steady"):
            status = status_of(admin, ns, name)
            assert status is not None
            assert status["time"] == utc(t + 60).isoformat()
        again = rig.tick(t + 120)
        assert again.ok, again.errors
        assert reporters(admin, ns, "ScaledUp") == ["ctl-midtick"]
