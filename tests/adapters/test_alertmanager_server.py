"""The real Alertmanager fixture works: an alert posted through the v2 API can be read back.

Proves the fixture for the cost-alerts adapter to come (it will post the same way).
"""

from __future__ import annotations

import time

import httpx
import pytest

from tests.servers import AlertmanagerServer

pytestmark = pytest.mark.alertmanager


def test_alert_round_trip_through_v2_api(alertmanager_server: AlertmanagerServer) -> None:
    alert = {
        "labels": {"alertname": "GpuCostCeilingNear", "namespace": "serving", "severity": "warning"},
        "annotations": {"summary": "forecast spend reaches 95% of the ceiling"},
        "generatorURL": "http://predictive-autoscaler.test/explain",
    }
    with httpx.Client(base_url=alertmanager_server.url, timeout=5) as client:
        posted = client.post("/api/v2/alerts", json=[alert])
        assert posted.status_code == 200, posted.text
        deadline = time.monotonic() + 15
        while True:
            answer = client.get("/api/v2/alerts", params={"filter": 'alertname="GpuCostCeilingNear"'})
            assert answer.status_code == 200, answer.text
            alerts = answer.json()
            if (alerts and alerts[0]["status"]["state"] == "active") or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        (got,) = alerts
        assert got["labels"] == alert["labels"]
        assert got["annotations"] == alert["annotations"]
        assert got["status"]["state"] == "active"
        assert [r["name"] for r in got["receivers"]] == ["default"]
        # A filter that matches nothing returns nothing: the read-back is not just "everything".
        none = client.get("/api/v2/alerts", params={"filter": 'alertname="NoSuchAlert"'})
        assert none.json() == []
