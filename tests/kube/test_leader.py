"""Leader election over real HTTP with a fake clock: create, renew, stand by, take over after expiry,
lose races with 409, release on stop, and keep the MicroTime format the API server demands."""

from __future__ import annotations

import json
import logging
import re
from datetime import datetime, timedelta

import pytest
from kubernetes import client

from autoscaler.runtime.leader import LeaderElector
from tests.kube.conftest import T0
from tests.kube.fakeapi import MICROTIME, FakeKubeAPI

NS = "predictive-autoscaler"  # the controller's namespace: deploy/rbac.yaml grants its Lease there only
LEASE_PATH = f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/predictive-autoscaler"


class Clock:
    """A fake clock: a function returning an aware UTC datetime that moves only when told to."""

    def __init__(self, start: datetime) -> None:
        self.now = start

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


@pytest.fixture
def clock() -> Clock:
    return Clock(T0.replace(microsecond=0))  # whole seconds: isoformat() would drop the fraction


def elector(api: client.ApiClient, identity: str, clock: Clock, namespace: str = NS) -> LeaderElector:
    return LeaderElector(api, namespace, "predictive-autoscaler", identity, lease_duration_seconds=15, clock=clock)


def lease_spec(fake_api: FakeKubeAPI) -> dict[str, object]:
    lease = fake_api.get("leases", NS, "predictive-autoscaler")
    assert lease is not None
    spec: dict[str, object] = lease["spec"]
    return spec


def test_first_replica_creates_the_lease(fake_api: FakeKubeAPI, api_client: client.ApiClient, clock: Clock) -> None:
    a = elector(api_client, "pod-a", clock)
    assert a.try_acquire_or_renew() is True
    assert a.is_leader

    (create,) = fake_api.calls("POST")
    assert create.path == "/apis/coordination.k8s.io/v1/namespaces/predictive-autoscaler/leases"
    assert create.body["metadata"]["name"] == "predictive-autoscaler"
    spec = create.body["spec"]
    assert spec["holderIdentity"] == "pod-a"
    assert spec["leaseDurationSeconds"] == 15
    assert spec["leaseTransitions"] == 0
    assert spec["renewTime"] == "2025-03-01T12:00:00.000000Z"  # MicroTime: six digits even at whole seconds
    assert MICROTIME.match(spec["acquireTime"])


def test_holder_renews_and_standby_waits(fake_api: FakeKubeAPI, api_client: client.ApiClient, clock: Clock) -> None:
    a, b = elector(api_client, "pod-a", clock), elector(api_client, "pod-b", clock)
    assert a.try_acquire_or_renew()
    clock.advance(10)
    assert a.try_acquire_or_renew()  # renew
    (put,) = fake_api.calls("PUT", LEASE_PATH)
    assert put.body["spec"]["renewTime"] == "2025-03-01T12:00:10.000000Z"
    assert put.body["spec"]["acquireTime"] == "2025-03-01T12:00:00.000000Z"  # unchanged by a renewal
    assert put.body["metadata"]["resourceVersion"]  # optimistic concurrency on every write

    clock.advance(14)  # 14 s after the renewal: still valid
    assert b.try_acquire_or_renew() is False
    assert b.holder == "pod-a"
    assert not b.is_leader
    assert len(fake_api.calls("PUT")) == 1  # standing by writes nothing


def test_takeover_after_expiry(fake_api: FakeKubeAPI, api_client: client.ApiClient, clock: Clock) -> None:
    a, b = elector(api_client, "pod-a", clock), elector(api_client, "pod-b", clock)
    assert a.try_acquire_or_renew()
    clock.advance(15)
    assert b.try_acquire_or_renew() is False  # renewTime + 15 s == now: not yet expired
    clock.advance(1)
    assert b.try_acquire_or_renew() is True  # a stopped renewing: b takes over
    spec = lease_spec(fake_api)
    assert spec["holderIdentity"] == "pod-b"
    assert spec["leaseTransitions"] == 1
    assert spec["acquireTime"] == "2025-03-01T12:00:16.000000Z"

    assert a.try_acquire_or_renew() is False  # the old leader finds out and stands by
    assert a.holder == "pod-b"
    assert not a.is_leader


def test_race_for_an_expired_lease_has_one_winner(
    fake_api: FakeKubeAPI, api_client: client.ApiClient, clock: Clock
) -> None:
    a, b = elector(api_client, "pod-a", clock), elector(api_client, "pod-b", clock)
    assert a.try_acquire_or_renew()
    clock.advance(60)
    # b read the Lease, then someone else wrote it before b's PUT: the API server answers 409.
    c = elector(api_client, "pod-c", clock)
    assert c.try_acquire_or_renew() is True
    fake_api.fail("PUT", LEASE_PATH + "$", 409)
    assert b.try_acquire_or_renew() is False
    assert not b.is_leader
    assert lease_spec(fake_api)["holderIdentity"] == "pod-c"


def test_racer_writing_between_read_and_put_wins(
    fake_api: FakeKubeAPI, api_client: client.ApiClient, clock: Clock
) -> None:
    """No injected error: c renews the Lease between b's read and b's PUT, so b's resourceVersion is stale."""
    a, b = elector(api_client, "pod-a", clock), elector(api_client, "pod-b", clock)
    assert a.try_acquire_or_renew()
    clock.advance(60)

    def c_takes_over(api: FakeKubeAPI) -> None:
        lease = api.objects[("leases", NS, "predictive-autoscaler")]
        api.store_unlocked("leases", {**lease, "spec": {**lease["spec"], "holderIdentity": "pod-c"}})

    fake_api.before("PUT", LEASE_PATH + "$", c_takes_over)
    assert b.try_acquire_or_renew() is False
    assert not b.is_leader
    (put,) = fake_api.calls("PUT")
    assert put.body["spec"]["holderIdentity"] == "pod-b"  # b tried...
    assert lease_spec(fake_api)["holderIdentity"] == "pod-c"  # ...and lost on resourceVersion


def test_stale_resource_version_gets_409(fake_api: FakeKubeAPI, api_client: client.ApiClient, clock: Clock) -> None:
    """The fake enforces resourceVersion like the API server: a write based on an old read gets 409."""
    a = elector(api_client, "pod-a", clock)
    assert a.try_acquire_or_renew()
    old = fake_api.get("leases", NS, "predictive-autoscaler")
    assert old is not None
    clock.advance(1)
    assert a.try_acquire_or_renew()  # bumps resourceVersion
    old["spec"]["holderIdentity"] = "intruder"
    status, answer = fake_api.handle("PUT", LEASE_PATH, "application/json", json.dumps(old).encode())
    assert (status, answer["reason"]) == (409, "Conflict")
    assert lease_spec(fake_api)["holderIdentity"] == "pod-a"


def test_whole_second_isoformat_is_rejected_like_the_real_server(
    fake_api: FakeKubeAPI, api_client: client.ApiClient, clock: Clock
) -> None:
    """Why the elector formats MicroTime itself: the client's own serialisation of a Lease read back."""
    fake_api.expect_refusals()
    a = elector(api_client, "pod-a", clock)
    assert a.try_acquire_or_renew()
    api = client.CoordinationV1Api(api_client)
    lease = api.read_namespaced_lease("predictive-autoscaler", NS)
    with pytest.raises(client.ApiException) as info:
        api.replace_namespaced_lease("predictive-autoscaler", NS, lease)
    assert info.value.status == 400
    assert "2006-01-02T15:04:05.000000Z07:00" in str(info.value.body)


def test_losing_the_create_race(fake_api: FakeKubeAPI, api_client: client.ApiClient, clock: Clock) -> None:
    fake_api.fail("GET", LEASE_PATH + "$", 404)  # b sees no Lease...
    a, b = elector(api_client, "pod-a", clock), elector(api_client, "pod-b", clock)
    fake_api.add(
        "leases",
        {
            "metadata": {"name": "predictive-autoscaler", "namespace": NS},
            "spec": {"holderIdentity": "pod-a", "leaseDurationSeconds": 15, "renewTime": "2025-03-01T12:00:00.000000Z"},
        },
    )  # ...but a created it meanwhile
    assert b.try_acquire_or_renew() is False
    (create,) = fake_api.calls("POST")
    assert create.body["spec"]["holderIdentity"] == "pod-b"
    assert lease_spec(fake_api)["holderIdentity"] == "pod-a"
    assert a.try_acquire_or_renew() is True


def test_release_hands_over_at_once(fake_api: FakeKubeAPI, api_client: client.ApiClient, clock: Clock) -> None:
    a, b = elector(api_client, "pod-a", clock), elector(api_client, "pod-b", clock)
    assert a.try_acquire_or_renew()
    clock.advance(2)
    assert b.try_acquire_or_renew() is False
    assert a.release() is True
    assert not a.is_leader
    assert "holderIdentity" not in lease_spec(fake_api)
    assert b.try_acquire_or_renew() is True  # no need to wait 15 s
    assert lease_spec(fake_api)["holderIdentity"] == "pod-b"
    assert a.release() is False  # not ours any more: nothing written
    assert lease_spec(fake_api)["holderIdentity"] == "pod-b"


def test_api_errors_mean_not_leading_and_are_reported(
    fake_api: FakeKubeAPI, api_client: client.ApiClient, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    a = elector(api_client, "pod-a", clock)
    assert a.try_acquire_or_renew()
    fake_api.fail("PUT", LEASE_PATH + "$", 500)
    clock.advance(5)
    with caplog.at_level(logging.WARNING, logger="autoscaler.runtime.leader"):
        assert a.try_acquire_or_renew() is False
    assert not a.is_leader
    assert a.last_error is not None
    assert re.fullmatch(r"renew lease predictive-autoscaler/predictive-autoscaler: HTTP 500 .*", a.last_error)
    assert a.last_error in caplog.text
    clock.advance(5)
    assert a.try_acquire_or_renew() is True  # still the holder once the API server answers again
    assert a.last_error is None


def test_rejects_naive_clock(api_client: client.ApiClient) -> None:
    naive = LeaderElector(api_client, NS, "x", "pod-a", clock=lambda: datetime(2025, 1, 1))  # noqa: DTZ001
    with pytest.raises(ValueError, match="aware UTC datetime"):
        naive.try_acquire_or_renew()


@pytest.mark.kube
def test_real_server_election(real_api_client: client.ApiClient, real_namespace: str) -> None:
    clock = Clock(T0.replace(microsecond=0))
    a = elector(real_api_client, "pod-a", clock, real_namespace)
    b = elector(real_api_client, "pod-b", clock, real_namespace)
    assert a.try_acquire_or_renew(), a.last_error
    assert not b.try_acquire_or_renew()
    clock.advance(16)
    assert b.try_acquire_or_renew(), b.last_error
    assert not a.try_acquire_or_renew()
    assert b.release(), b.last_error
    assert a.try_acquire_or_renew(), a.last_error
