"""AlertmanagerSink: alerts posted to the real Alertmanager are read back, resolved, and expire by themselves.

Alertmanager judges "resolved" against its own wall clock, so the real-server tests pass the wall clock as
``now`` (the adapter itself never reads it). Retry and rejection policies are checked with
``httpx.MockTransport`` (an injected transport, not a patched object) and against a closed port.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import httpx
import pytest

from autoscaler.adapters.alertmanager import AlertDeliveryError, AlertmanagerSink, rfc3339
from autoscaler.ports import Alert, AlertSink
from tests.servers import AlertmanagerServer, free_port

T0 = datetime(2025, 3, 1, 12, 0, 0, tzinfo=UTC)

BREACH = Alert(
    name="GPUCostCeilingProjectedBreach",
    severity="warning",
    summary="Team ml-platform projected at $412.50/h, ceiling $400.00/h",
    description="Forecast demand over the next 30m needs 17 H100s ($412.50/h); the ceiling is $400.00/h.",
    labels={"team": "ml-platform"},
)


def parse_time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def read_alerts(url: str, alertname: str) -> list[dict[str, Any]]:
    answer = httpx.get(f"{url}/api/v2/alerts", params={"filter": f'alertname="{alertname}"'}, timeout=5)
    assert answer.status_code == 200, answer.text
    alerts = answer.json()
    assert isinstance(alerts, list)
    return alerts


def wait_for(url: str, alertname: str, done: Any, timeout: float = 15.0) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while True:
        alerts = read_alerts(url, alertname)
        if done(alerts) or time.monotonic() > deadline:
            return alerts
        time.sleep(0.1)


@pytest.fixture
def sleeps() -> list[float]:
    return []


@pytest.fixture
def sink(alertmanager_server: AlertmanagerServer, sleeps: list[float]) -> Iterator[AlertmanagerSink]:
    with AlertmanagerSink(
        alertmanager_server.url,
        cluster="prod-eu-1",
        expire_after=timedelta(minutes=2),
        generator_url="http://predictive-autoscaler.test/explain",
        sleep=sleeps.append,
    ) as s:
        yield s


def test_sink_satisfies_the_port(sink: AlertmanagerSink) -> None:
    port: AlertSink = sink
    assert port is sink


# ---------------------------------------------------------------------------------------------- real server


@pytest.mark.alertmanager
def test_fired_alert_is_active_with_labels_annotations_and_expiry(
    alertmanager_server: AlertmanagerServer, sink: AlertmanagerSink
) -> None:
    now = datetime.now(UTC)
    began = now - timedelta(minutes=7)
    alert = Alert(**{**BREACH.__dict__, "starts_at": began})
    sink.fire([alert], now)

    (got,) = wait_for(alertmanager_server.url, alert.name, lambda a: a and a[0]["status"]["state"] == "active")
    assert got["labels"] == {
        "alertname": "GPUCostCeilingProjectedBreach",
        "severity": "warning",
        "cluster": "prod-eu-1",
        "team": "ml-platform",
    }
    assert got["annotations"] == {"summary": BREACH.summary, "description": BREACH.description}
    assert "$412.50/h" in got["annotations"]["summary"]
    assert got["status"]["state"] == "active"
    assert got["generatorURL"] == "http://predictive-autoscaler.test/explain"
    assert abs(parse_time(got["startsAt"]) - began) < timedelta(milliseconds=2)
    assert abs(parse_time(got["endsAt"]) - (now + timedelta(minutes=2))) < timedelta(milliseconds=2)

    # Re-sending a tick later (with now as startsAt) keeps the earlier start and pushes endsAt forward.
    later = now + timedelta(seconds=30)
    sink.fire([BREACH], later)
    (again,) = wait_for(
        alertmanager_server.url, alert.name, lambda a: a and parse_time(a[0]["endsAt"]) > parse_time(got["endsAt"])
    )
    assert abs(parse_time(again["startsAt"]) - began) < timedelta(milliseconds=2)
    assert abs(parse_time(again["endsAt"]) - (later + timedelta(minutes=2))) < timedelta(milliseconds=2)

    sink.resolve([BREACH], datetime.now(UTC))
    assert wait_for(alertmanager_server.url, alert.name, lambda a: a == []) == []


@pytest.mark.alertmanager
def test_resolve_clears_only_the_alert_with_the_same_labels(
    alertmanager_server: AlertmanagerServer, sink: AlertmanagerSink
) -> None:
    name = "GPUCostCeilingCuttingInference"
    teams = [
        Alert(name, "critical", f"ceiling cut inference of {team}", labels={"team": team}) for team in ("a", "b")
    ]
    sink.fire(teams, datetime.now(UTC))
    assert len(wait_for(alertmanager_server.url, name, lambda a: len(a) == 2)) == 2

    sink.resolve([teams[0]], datetime.now(UTC))
    left = wait_for(alertmanager_server.url, name, lambda a: len(a) == 1)
    assert [a["labels"]["team"] for a in left] == ["b"]
    sink.resolve([teams[1]], datetime.now(UTC))
    assert wait_for(alertmanager_server.url, name, lambda a: a == []) == []


@pytest.mark.alertmanager
def test_alert_not_sent_again_clears_by_itself(alertmanager_server: AlertmanagerServer) -> None:
    name = "GPUsUnavailable"
    with AlertmanagerSink(alertmanager_server.url, cluster="c1", expire_after=timedelta(seconds=2)) as short:
        now = datetime.now(UTC)
        short.fire([Alert(name, "warning", "3 replicas of serving/llama wait for GPUs",
                          labels={"namespace": "serving", "deployment": "llama"})], now)
        (got,) = wait_for(alertmanager_server.url, name, lambda a: len(a) == 1)
        assert got["status"]["state"] == "active"
        assert abs(parse_time(got["endsAt"]) - (now + timedelta(seconds=2))) < timedelta(milliseconds=2)
        assert wait_for(alertmanager_server.url, name, lambda a: a == [], timeout=10) == []
        assert datetime.now(UTC) >= now + timedelta(seconds=2)


@pytest.mark.alertmanager
def test_unreachable_alertmanager_is_retried_with_backoff_then_reported(sleeps: list[float]) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    dead = AlertmanagerSink(url, cluster="c1", max_attempts=4, backoff_seconds=0.5, sleep=sleeps.append)
    with dead, pytest.raises(AlertDeliveryError) as err:
        dead.fire([BREACH], T0)
    assert sleeps == [0.5, 1.0, 2.0]
    message = str(err.value)
    assert url in message
    assert "GPUCostCeilingProjectedBreach" in message
    assert "after 4 attempts" in message
    assert "ConnectError" in message
    assert "\n" not in message


# ---------------------------------------------------------------------------------------------- policies


def scripted(statuses: list[int], seen: list[httpx.Request]) -> httpx.MockTransport:
    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        status = statuses[min(len(seen), len(statuses)) - 1]
        text = "" if status == 200 else '{"code":400,"message":"start time must be before end time"}'
        return httpx.Response(status, text=text)

    return httpx.MockTransport(handle)


def test_server_errors_are_retried_and_success_stops_retrying(sleeps: list[float]) -> None:
    seen: list[httpx.Request] = []
    with AlertmanagerSink("http://am.test", cluster="c1", transport=scripted([503, 502, 200], seen),
                          sleep=sleeps.append, backoff_seconds=1.0) as s:
        s.fire([BREACH], T0)
    assert len(seen) == 3
    assert sleeps == [1.0, 2.0]
    assert all(r.method == "POST" and r.url.path == "/api/v2/alerts" for r in seen)


def test_backoff_is_capped(sleeps: list[float]) -> None:
    seen: list[httpx.Request] = []
    s = AlertmanagerSink("http://am.test", cluster="c1", transport=scripted([500], seen), sleep=sleeps.append,
                         max_attempts=6, backoff_seconds=1.0, max_backoff_seconds=3.0)
    with s, pytest.raises(AlertDeliveryError, match=r"failed after 6 attempts, last HTTP 500"):
        s.fire([BREACH], T0)
    assert sleeps == [1.0, 2.0, 3.0, 3.0, 3.0]


def test_a_rejected_alert_is_not_retried_and_the_message_is_reported(sleeps: list[float]) -> None:
    seen: list[httpx.Request] = []
    s = AlertmanagerSink("http://am.test", cluster="c1", transport=scripted([400], seen), sleep=sleeps.append)
    with s, pytest.raises(AlertDeliveryError, match=r"rejected, HTTP 400: .*start time must be before end time"):
        s.resolve([BREACH], T0)
    assert len(seen) == 1
    assert sleeps == []


def test_wire_body_for_fire_and_resolve() -> None:
    seen: list[httpx.Request] = []
    with AlertmanagerSink("http://am.test/", cluster="c1", transport=scripted([200], seen),
                          expire_after=timedelta(seconds=90)) as s:
        s.fire([BREACH], T0)
        s.resolve([BREACH], T0 + timedelta(minutes=5))
        s.fire([], T0)  # nothing to say: no request
    fired, resolved = (json.loads(r.content) for r in seen)
    assert fired == [
        {
            "labels": {"alertname": BREACH.name, "severity": "warning", "cluster": "c1", "team": "ml-platform"},
            "annotations": {"summary": BREACH.summary, "description": BREACH.description},
            "startsAt": "2025-03-01T12:00:00.000Z",
            "endsAt": "2025-03-01T12:01:30.000Z",
        }
    ]
    assert resolved[0]["startsAt"] == resolved[0]["endsAt"] == "2025-03-01T12:05:00.000Z"
    assert seen[0].headers["content-type"] == "application/json"


@pytest.mark.parametrize(
    ("alert", "now", "message"),
    [
        (Alert("", "warning", "s"), T0, "alertname"),
        (Alert("X", "page", "s"), T0, "severity must be one of"),  # type: ignore[arg-type]
        (Alert("X", "info", "s", labels={"cluster": "other"}), T0, "'cluster' is set by the sink"),
        (Alert("X", "info", "s", labels={"team-name": "a"}), T0, "'team-name' is not a valid"),
        (Alert("X", "info", "s", starts_at=T0 + timedelta(seconds=1)), T0, "is after now"),
        (Alert("X", "info", "s"), datetime(2025, 3, 1, 12), "timezone-aware"),  # noqa: DTZ001
    ],
)
def test_bad_alerts_are_refused_with_a_clear_message(alert: Alert, now: datetime, message: str) -> None:
    s = AlertmanagerSink("http://am.test", cluster="c1", transport=scripted([200], []))
    with s, pytest.raises(ValueError, match=message):
        s.fire([alert], now)


def test_empty_label_values_are_dropped_and_times_are_utc() -> None:
    with AlertmanagerSink("http://am.test", cluster="c1", transport=scripted([200], [])) as s:
        (body,) = s.payload([Alert("X", "info", "s", labels={"team": ""})], T0, resolved=False)
    assert "team" not in body["labels"]
    assert rfc3339(T0.astimezone(ZoneInfo("Europe/Berlin"))) == "2025-03-01T12:00:00.000Z"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"url": "am:9093"}, "must start with http"),
        ({"cluster": ""}, "cluster name"),
        ({"expire_after": timedelta(0)}, "expire_after must be positive"),
        ({"max_attempts": 0}, "max_attempts"),
        ({"timeout_seconds": 0}, "timeout_seconds must be positive"),
        ({"bearer_token_file": "/t", "basic_auth": ("u", "/p")}, "give bearer_token_file or basic_auth, not both"),
        ({"basic_auth": ("a:b", "/p")}, "username must be non-empty and without ':'"),
    ],
)
def test_bad_construction_is_refused(kwargs: dict[str, Any], message: str) -> None:
    args: dict[str, Any] = {"url": "http://am.test", "cluster": "c1", **kwargs}
    url = args.pop("url")
    with pytest.raises(ValueError, match=message):
        AlertmanagerSink(url, **args)
