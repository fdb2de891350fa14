"""Leader election with a ``coordination.k8s.io/v1`` Lease, so only one controller replica actuates.

Why it exists: the controller runs with two replicas for availability, but two replicas scaling the same
Deployment from slightly different forecasts would fight. The Lease protocol is client-go's, reduced to
one call per tick:

* no Lease: create it holding it (a ``409 AlreadyExists`` means another replica won the race);
* we hold it: renew (``renewTime = now``);
* someone else holds it and ``renewTime + leaseDurationSeconds < now``, or nobody holds it (released):
  take it over, ``leaseTransitions + 1``;
* otherwise: stand by.

Every write is a ``PUT`` carrying the ``resourceVersion`` we read, so of two replicas racing for an
expired Lease exactly one wins; the other gets ``409 Conflict`` and stands by. ``release()`` clears
``holderIdentity`` on shutdown so a standby takes over on its next tick instead of waiting out the Lease.

Departures from client-go, and why: expiry is judged from the Lease's ``renewTime`` against our own
clock, like every other time-based rule (docs/ARCHITECTURE.md, "Leader election"), rather than from the
local time we last saw the record change; this needs clocks synchronised to well within
``leaseDurationSeconds`` (NTP gives milliseconds; the default is 15 s).
There is no separate renew deadline: ``try_acquire_or_renew`` returns True only when this call's write
succeeded, and the loop acts only on True, so a replica that cannot renew stops acting at once.
API errors other than 409 are logged and kept in ``last_error`` (with the API server's message, e.g. ``namespaces
"x" not found``) and answer False (not leading), never raised: an unreachable API server must not crash the
standby. ``quiet=True`` keeps them in ``last_error`` without logging, for a caller that reports the outcome itself
(``run --once`` says in one line why it did not act).

Lease times are ``MicroTime``: the API server accepts exactly six fractional digits, and the client
serialises ``datetime.isoformat()``, which drops them at whole seconds; ``_MicroTime`` fixes the format.

Time comes from an injected clock (a function returning an aware UTC datetime), so tests drive
expiry with a fake clock.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from autoscaler.adapters.kube import api_message
from autoscaler.runtime.clock import SystemClock, utc

log = logging.getLogger(__name__)


class _MicroTime(datetime):
    """A datetime that serialises as Kubernetes MicroTime (``2006-01-02T15:04:05.000000Z``)."""

    def isoformat(self, sep: str = "T", timespec: str = "auto") -> str:
        return self.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _micro(t: datetime) -> _MicroTime:
    return _MicroTime.combine(t.date(), t.timetz())


def system_utc_clock() -> datetime:
    return utc(SystemClock().now())


class LeaderElector:
    """One replica's view of a Lease. Not thread-safe: call it from the control loop only."""

    def __init__(
        self,
        api_client: client.ApiClient,
        namespace: str,
        name: str,
        identity: str,
        lease_duration_seconds: int = 15,
        clock: Callable[[], datetime] = system_utc_clock,
        request_timeout_seconds: float = 10.0,
        quiet: bool = False,
    ) -> None:
        if lease_duration_seconds < 1:
            raise ValueError(f"lease_duration_seconds must be >= 1, got {lease_duration_seconds}")
        if not identity:
            raise ValueError("identity must be a non-empty string (e.g. the pod name)")
        self._api = client.CoordinationV1Api(api_client)
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.lease_duration_seconds = lease_duration_seconds
        self._clock = clock
        self._timeout = request_timeout_seconds
        self._quiet = quiet
        self.is_leader = False
        self.holder: str | None = None
        self.last_error: str | None = None

    def _now(self, now: datetime | None) -> datetime:
        t = self._clock() if now is None else now
        if t.tzinfo is None:
            raise ValueError(f"the clock must return an aware UTC datetime, got naive {t.isoformat()}")
        return t

    def _spec(self, now: datetime, acquire: datetime, transitions: int) -> client.V1LeaseSpec:
        return client.V1LeaseSpec(
            holder_identity=self.identity,
            lease_duration_seconds=self.lease_duration_seconds,
            acquire_time=_micro(acquire),
            renew_time=_micro(now),
            lease_transitions=transitions,
        )

    def _result(self, leading: bool, holder: str | None) -> bool:
        if leading != self.is_leader:
            change = "acquired" if leading else f"lost (holder: {holder or 'none'})"
            log.info("lease %s/%s %s by %s", self.namespace, self.name, change, self.identity)
        self.is_leader, self.holder = leading, holder
        return leading

    def _failed(self, what: str, exc: Exception) -> bool:
        if isinstance(exc, ApiException):
            detail = api_message(exc)
        else:
            detail = f"cannot reach the API server ({type(exc).__name__})"
        self.last_error = f"{what} lease {self.namespace}/{self.name}: {detail}"
        if not self._quiet:
            log.warning("%s", self.last_error)
        self.is_leader = False
        return False

    def try_acquire_or_renew(self, now: datetime | None = None) -> bool:
        """One election round at ``now`` (default: the injected clock). True iff we hold the Lease now."""
        t = self._now(now)
        try:
            lease = self._api.read_namespaced_lease(self.name, self.namespace, _request_timeout=self._timeout)
        except ApiException as exc:
            if exc.status != 404:
                return self._failed("read", exc)
            return self._create(t)
        except urllib3.exceptions.HTTPError as exc:
            return self._failed("read", exc)

        spec = lease.spec or client.V1LeaseSpec()
        holder = spec.holder_identity or None
        transitions = spec.lease_transitions or 0
        if holder == self.identity:
            acquire = spec.acquire_time or t
            return self._replace(lease, self._spec(t, acquire, transitions), "renew")
        duration = spec.lease_duration_seconds or self.lease_duration_seconds
        renewed = spec.renew_time
        expired = renewed is None or renewed + timedelta(seconds=duration) < t
        if holder is not None and not expired:
            return self._result(False, holder)
        return self._replace(lease, self._spec(t, t, transitions + 1), "take over")

    def _create(self, t: datetime) -> bool:
        body = client.V1Lease(
            metadata=client.V1ObjectMeta(name=self.name, namespace=self.namespace),
            spec=self._spec(t, t, 0),
        )
        try:
            self._api.create_namespaced_lease(self.namespace, body, _request_timeout=self._timeout)
        except ApiException as exc:
            if exc.status == 409:  # another replica created it first
                return self._result(False, None)
            return self._failed("create", exc)
        except urllib3.exceptions.HTTPError as exc:
            return self._failed("create", exc)
        self.last_error = None
        return self._result(True, self.identity)

    def _replace(self, lease: client.V1Lease, spec: client.V1LeaseSpec, what: str, *, leading: bool = True) -> bool:
        meta = lease.metadata or client.V1ObjectMeta()
        body = client.V1Lease(
            metadata=client.V1ObjectMeta(
                name=self.name,
                namespace=self.namespace,
                resource_version=meta.resource_version,
                labels=meta.labels,
                annotations=meta.annotations,
            ),
            spec=spec,
        )
        try:
            self._api.replace_namespaced_lease(self.name, self.namespace, body, _request_timeout=self._timeout)
        except ApiException as exc:
            if exc.status == 409:  # someone else wrote the Lease since we read it: they won
                self._result(False, None)
                return False
            return self._failed(what, exc)
        except urllib3.exceptions.HTTPError as exc:
            return self._failed(what, exc)
        self.last_error = None
        self._result(leading, self.identity if leading else None)
        return True

    def release(self, now: datetime | None = None) -> bool:
        """Give the Lease up (on shutdown) so a standby takes over at once. True iff we released it."""
        t = self._now(now)
        try:
            lease = self._api.read_namespaced_lease(self.name, self.namespace, _request_timeout=self._timeout)
        except (ApiException, urllib3.exceptions.HTTPError) as exc:
            return self._failed("release", exc)
        spec = lease.spec or client.V1LeaseSpec()
        if spec.holder_identity != self.identity:
            self._result(False, spec.holder_identity or None)
            return False
        released = client.V1LeaseSpec(
            holder_identity=None,
            lease_duration_seconds=1,
            acquire_time=_micro(t),
            renew_time=_micro(t),
            lease_transitions=spec.lease_transitions or 0,
        )
        return self._replace(lease, released, "release", leading=False)
