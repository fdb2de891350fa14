"""AlertmanagerSink over https and with credentials: CA bundle, basic auth, bearer token, timeout.

TLS and basic auth are checked against the real Alertmanager started with ``--web.config.file``
(``alertmanager_tls_server``). Alertmanager cannot check bearer tokens (that is an auth proxy's job), so the
header is checked on a small recording HTTP server of our own that answers like Alertmanager's v2 API.
Every file problem must surface as an ``AlertDeliveryError`` of the push (the money stage counts it and
re-sends next tick), never as a construction failure that would stop the controller.
"""

from __future__ import annotations

import base64
import os
import re
import shutil
import ssl
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from autoscaler.adapters.alertmanager import AlertDeliveryError, AlertmanagerSink
from autoscaler.commands.run import _sink
from autoscaler.config.parser import parse_config
from autoscaler.ports import Alert
from tests.servers import TlsAlertmanagerServer, make_test_ca

GPUS = Alert("GPUsUnavailable", "warning", "2 replicas of serving/llama wait for GPUs",
             labels={"namespace": "serving", "deployment": "llama"})
T0 = datetime(2025, 3, 1, 12, 0, 0, tzinfo=UTC)


def replace_file(path: Path, text: str) -> None:
    """Write the way the kubelet updates a mounted Secret: a new file renamed over the old one."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


# ---------------------------------------------------------------------------------------------- real server


def read_back(server: TlsAlertmanagerServer, alertname: str, done: Any, timeout: float = 15.0) -> list[Any]:
    deadline = time.monotonic() + timeout
    verify = ssl.create_default_context(cafile=str(server.ca_file))
    while True:
        answer = httpx.get(f"{server.url}/api/v2/alerts", params={"filter": f'alertname="{alertname}"'},
                           auth=(server.username, server.password), verify=verify, timeout=5)
        assert answer.status_code == 200, answer.text
        alerts: list[Any] = answer.json()
        if done(alerts) or time.monotonic() > deadline:
            return alerts
        time.sleep(0.1)


@pytest.fixture
def password_file(tmp_path: Path, alertmanager_tls_server: TlsAlertmanagerServer) -> Path:
    path = tmp_path / "password"
    path.write_text(alertmanager_tls_server.password + "\n", encoding="utf-8")  # Secrets often end in a newline
    return path


@pytest.mark.alertmanager
def test_https_with_the_ca_and_basic_auth_delivers_and_resolves(
    alertmanager_tls_server: TlsAlertmanagerServer, password_file: Path
) -> None:
    server = alertmanager_tls_server
    with AlertmanagerSink(server.url, cluster="tls-1", ca_file=server.ca_file,
                          basic_auth=(server.username, password_file)) as sink:
        sink.fire([GPUS], datetime.now(UTC))
        (got,) = read_back(server, GPUS.name, lambda a: len(a) == 1)
        assert got["labels"] == {"alertname": GPUS.name, "severity": "warning", "cluster": "tls-1",
                                 "namespace": "serving", "deployment": "llama"}
        assert got["status"]["state"] == "active"
        sink.resolve([GPUS], datetime.now(UTC))
        assert read_back(server, GPUS.name, lambda a: a == []) == []


@pytest.mark.alertmanager
def test_https_without_the_ca_fails_at_once_with_a_clear_error(
    alertmanager_tls_server: TlsAlertmanagerServer, password_file: Path, tmp_path: Path
) -> None:
    server = alertmanager_tls_server
    other_ca, _, _ = make_test_ca(tmp_path)  # a CA that did not sign the server's certificate
    for ca_file in (None, other_ca):
        sleeps: list[float] = []
        sink = AlertmanagerSink(server.url, cluster="c1", ca_file=ca_file, basic_auth=(server.username, password_file),
                                sleep=sleeps.append)
        with sink, pytest.raises(AlertDeliveryError) as err:
            sink.fire([GPUS], T0)
        message = str(err.value)
        assert message.startswith(f"Alertmanager {server.url}/api/v2/alerts (fire GPUsUnavailable): TLS verification")
        assert "wrong or missing alerts.ca_file?" in message
        assert "certificate verify failed" in message
        assert "\n" not in message
        assert sleeps == []  # not retried: a retry cannot fix a certificate


@pytest.mark.alertmanager
def test_a_wrong_or_missing_password_is_reported_as_401_and_a_fixed_file_is_picked_up(
    alertmanager_tls_server: TlsAlertmanagerServer, password_file: Path
) -> None:
    server = alertmanager_tls_server
    anonymous = AlertmanagerSink(server.url, cluster="c1", ca_file=server.ca_file, sleep=lambda _: None)
    with anonymous, pytest.raises(AlertDeliveryError, match=r"rejected, HTTP 401: Unauthorized"):
        anonymous.fire([GPUS], T0)

    replace_file(password_file, "not-the-password\n")
    sleeps: list[float] = []
    with AlertmanagerSink(server.url, cluster="c1", ca_file=server.ca_file,
                          basic_auth=(server.username, password_file), sleep=sleeps.append) as sink:
        with pytest.raises(AlertDeliveryError) as err:
            sink.fire([GPUS], datetime.now(UTC))
        assert "rejected, HTTP 401: Unauthorized (check alerts.bearer_token_file / basic_auth)" in str(err.value)
        assert sleeps == []
        replace_file(password_file, server.password)  # the Secret is fixed: the next push reads it
        sink.fire([GPUS], datetime.now(UTC))
        assert len(read_back(server, GPUS.name, lambda a: len(a) == 1)) == 1
        sink.resolve([GPUS], datetime.now(UTC))
        assert read_back(server, GPUS.name, lambda a: a == []) == []


@pytest.mark.alertmanager
def test_a_ca_file_mounted_late_or_rotated_is_loaded_at_the_next_push(
    alertmanager_tls_server: TlsAlertmanagerServer, password_file: Path, tmp_path: Path
) -> None:
    server = alertmanager_tls_server
    ca_file = tmp_path / "mounted" / "ca.pem"
    # Construction reads no file: a Secret not mounted yet must not stop the controller.
    with AlertmanagerSink(server.url, cluster="c1", ca_file=ca_file,
                          basic_auth=(server.username, password_file)) as sink:
        with pytest.raises(AlertDeliveryError) as err:
            sink.fire([GPUS], T0)
        assert str(err.value) == (f"Alertmanager {server.url}/api/v2/alerts (fire GPUsUnavailable): not sent, "
                                  f"cannot load the Alertmanager CA file {ca_file}: No such file or directory")
        ca_file.parent.mkdir()
        ca_file.write_text("", encoding="utf-8")
        with pytest.raises(AlertDeliveryError, match=r"not sent, the Alertmanager CA file .* is empty"):
            sink.fire([GPUS], T0)
        replace_file(ca_file, "not a certificate\n")
        with pytest.raises(AlertDeliveryError, match=r"not sent, cannot load the Alertmanager CA file .*no start line"):
            sink.fire([GPUS], T0)
        other_ca, _, _ = make_test_ca(tmp_path)
        replace_file(ca_file, other_ca.read_text(encoding="utf-8"))
        with pytest.raises(AlertDeliveryError, match="TLS verification failed"):
            sink.fire([GPUS], T0)
        shutil.copyfile(server.ca_file, ca_file)  # the right CA: the client is re-made with it
        sink.fire([GPUS], datetime.now(UTC))
        assert len(read_back(server, GPUS.name, lambda a: len(a) == 1)) == 1
        sink.resolve([GPUS], datetime.now(UTC))
        assert read_back(server, GPUS.name, lambda a: a == []) == []


# ---------------------------------------------------------------------------------------------- recording server


@dataclass
class Recorder:
    """What our stand-in for an auth proxy in front of Alertmanager received; ``delay`` slows its answers."""

    url: str
    requests: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    delay: float = 0.0


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    state = Recorder(url="")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            state.requests.append((self.path, {k.lower(): v for k, v in self.headers.items()}))
            time.sleep(state.delay)
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def test_the_bearer_token_is_sent_and_a_rotated_token_is_picked_up(recorder: Recorder, tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("token-one\n", encoding="utf-8")
    with AlertmanagerSink(recorder.url, cluster="c1", bearer_token_file=token_file) as sink:
        sink.fire([GPUS], T0)
        replace_file(token_file, "token-two")
        sink.resolve([GPUS], T0 + timedelta(minutes=1))
    assert [(path, h["authorization"]) for path, h in recorder.requests] == [
        ("/api/v2/alerts", "Bearer token-one"),
        ("/api/v2/alerts", "Bearer token-two"),
    ]


def test_a_missing_or_empty_token_file_is_reported_and_nothing_is_sent(recorder: Recorder, tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    with AlertmanagerSink(recorder.url, cluster="c1", bearer_token_file=token_file) as sink:
        with pytest.raises(AlertDeliveryError) as err:
            sink.fire([GPUS], T0)
        assert str(err.value).startswith(f"Alertmanager {recorder.url}/api/v2/alerts (fire GPUsUnavailable): "
                                         f"not sent, cannot read bearer token file {token_file}: ")
        assert "No such file or directory" in str(err.value)
        token_file.write_text("  \n", encoding="utf-8")
        empty = f"not sent, bearer token file {re.escape(str(token_file))} is empty$"
        with pytest.raises(AlertDeliveryError, match=empty):
            sink.resolve([GPUS], T0)
        assert recorder.requests == []
        token_file.write_text("token-one", encoding="utf-8")
        sink.fire([GPUS], T0)
    assert [h["authorization"] for _, h in recorder.requests] == ["Bearer token-one"]


def test_basic_auth_password_is_read_from_its_file_without_the_trailing_newline(
    recorder: Recorder, tmp_path: Path
) -> None:
    password_file = tmp_path / "password"
    with AlertmanagerSink(recorder.url, cluster="c1", basic_auth=("oncall", password_file)) as sink:
        with pytest.raises(AlertDeliveryError, match="not sent, cannot read basic auth password file"):
            sink.fire([GPUS], T0)
        password_file.write_text("pa:ss wörd\n", encoding="utf-8")
        sink.fire([GPUS], T0)
    ((_, headers),) = recorder.requests
    assert base64.b64decode(headers["authorization"].removeprefix("Basic ")).decode() == "oncall:pa:ss wörd"


def test_the_timeout_bounds_each_attempt(recorder: Recorder) -> None:
    recorder.delay = 1.0
    with AlertmanagerSink(recorder.url, cluster="c1", timeout_seconds=0.2, max_attempts=2,
                          sleep=lambda _: None) as sink:
        started = time.perf_counter()
        with pytest.raises(AlertDeliveryError, match=r"failed after 2 attempts, last ReadTimeout"):
            sink.fire([GPUS], T0)
        assert time.perf_counter() - started < 1.5  # two 0.2s attempts, not two 1s answers
    assert len(recorder.requests) == 2


def test_the_controller_builds_the_sink_from_the_alerts_section(recorder: Recorder, tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("from-config", encoding="utf-8")
    cfg = parse_config({"alerts": {"alertmanager_url": recorder.url, "cluster": "eu-1",
                                   "bearer_token_file": str(token_file), "timeout": 3}})
    sink = _sink(cfg.alerts)
    assert sink is not None
    with sink:
        sink.fire([GPUS], T0)
    assert [h["authorization"] for _, h in recorder.requests] == ["Bearer from-config"]
    # A CA file that is not there yet does not stop the controller: the sink is built, pushes report it.
    late = parse_config({"alerts": {"alertmanager_url": "https://am.monitoring:9093", "ca_file": "/absent/ca.pem",
                                    "basic_auth": {"username": "u", "password_file": "/absent/password"}}})
    absent = _sink(late.alerts)
    assert absent is not None
    with absent, pytest.raises(AlertDeliveryError, match=r"cannot load the Alertmanager CA file /absent/ca\.pem"):
        absent.fire([GPUS], T0)
