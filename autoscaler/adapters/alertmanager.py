"""``AlertSink`` over Alertmanager's v2 API: the controller pushes cost and capacity alerts for on-call.

Why it exists: a cost ceiling that cuts inference, or GPUs that cannot be had, must be loud: nobody should
trust a plan that a limit quietly held back (docs/ARCHITECTURE.md, "Limits are loud"). Events reach the team
that owns a Deployment; Alertmanager reaches on-call, with routing, grouping and silences the controller should
not reinvent.

How alerts live and die:

* ``fire`` posts each alert with ``endsAt = now + expire_after`` (a few ticks). The loop re-sends active
  alerts every tick, which pushes ``endsAt`` forward; if the controller stops (crash, lost leadership) the
  alert clears by itself instead of paging forever about a state nobody is watching.
* ``resolve`` posts ``endsAt = now``: the condition ended, Alertmanager sends the "resolved" notification
  right away instead of waiting for the expiry.
* ``startsAt`` is the alert's ``starts_at`` (when the condition began) or ``now``. Alertmanager keeps the
  earliest ``startsAt`` of a de-duplicated alert, so re-sending with ``now`` is harmless, but passing the
  real start shows on-call how long it has been going on.

``now`` is always passed in (the decision never reads a clock); only the retry back-off sleeps, through an
injectable ``sleep``. Transport errors, ``429`` and ``5xx`` are retried with exponential back-off; other
``4xx`` mean a malformed alert and are reported at once. Every failure raises ``AlertDeliveryError`` with
one line naming Alertmanager's URL, the HTTP status and its message: an alert is never dropped silently.

TLS and credentials (production Alertmanagers sit behind https with a private CA, often behind an auth
proxy), as the Prometheus adapter handles them: ``ca_file`` is the CA bundle httpx verifies against;
``bearer_token_file`` or ``basic_auth`` (username, password file) are re-read on every push, so a rotated
projected token or Secret is picked up without a restart. One departure: the CA bundle is loaded at the first
push, not in the constructor, and re-loaded when its content changes. A missing, empty or unreadable file is
then an ``AlertDeliveryError`` of that push (counted and retried next tick by the caller), never a crash of
the controller at start-up or on a config reload; the Secret may be mounted later. A failed certificate
verification is reported at once (retrying cannot fix it), and ``401``/``403`` name the credentials to check.

The PrometheusRule in ``deploy/prometheusrule.yaml`` raises the same alert names from the controller's
metrics, so on-call is still paged when this push path is down; an Alertmanager route that groups by
``[alertname, team, cluster]`` folds both into one notification.
"""

from __future__ import annotations

import base64
import re
import ssl
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx

from autoscaler.adapters.httpcommon import SecretFileError, StrPath, read_secret, tls_verification_error
from autoscaler.ports import Alert

# Alert names the controller pushes; deploy/prometheusrule.yaml raises the same ones from the metrics
# (tests/test_alert_rules.py keeps the two in step).
PROJECTED_BREACH = "GPUCostCeilingProjectedBreach"
CUTTING_INFERENCE = "GPUCostCeilingCuttingInference"
GPUS_UNAVAILABLE = "GPUsUnavailable"
ALERT_NAMES = (PROJECTED_BREACH, CUTTING_INFERENCE, GPUS_UNAVAILABLE)

ALERTS_PATH = "/api/v2/alerts"
RESERVED_LABELS = ("alertname", "severity", "cluster")
SEVERITIES = ("info", "warning", "critical")
LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")  # the classic rule every Alertmanager version accepts
RETRYABLE_STATUS = {429, 500, 502, 503, 504}
DEFAULT_TIMEOUT_SECONDS = 10.0


class AlertDeliveryError(Exception):
    """Alertmanager did not take the alerts (after retries, or it rejected them); the message is one line."""


def rfc3339(t: datetime) -> str:
    """UTC with millisecond precision and a ``Z``, as Alertmanager prints it back."""
    if t.tzinfo is None:
        raise ValueError(f"alert time must be timezone-aware (UTC), got naive {t.isoformat()}")
    return t.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class _CredentialError(SecretFileError):
    """A CA, token or password file could not be used; becomes an ``AlertDeliveryError`` naming the push."""


def _first_line(text: str, limit: int = 300) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line[:limit]


class AlertmanagerSink:
    """Posts alerts to one Alertmanager (or a load balancer in front of an HA pair).

    ``ca_file``: a CA bundle for an https Alertmanager with a private certificate. ``bearer_token_file`` or
    ``basic_auth=(username, password_file)``: credentials read from their files before every push.
    """

    def __init__(
        self,
        url: str,
        *,
        cluster: str,
        expire_after: timedelta = timedelta(minutes=2),
        generator_url: str | None = None,
        timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS,
        max_attempts: int = 4,
        backoff_seconds: float = 0.5,
        max_backoff_seconds: float = 8.0,
        headers: Mapping[str, str] | None = None,
        verify: bool | ssl.SSLContext = True,
        ca_file: StrPath | None = None,
        bearer_token_file: StrPath | None = None,
        basic_auth: tuple[str, StrPath] | None = None,
        transport: httpx.BaseTransport | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"Alertmanager URL must start with http:// or https://, got {url!r}")
        if not cluster:
            raise ValueError("cluster name for alerts must not be empty")
        if expire_after <= timedelta(0):
            raise ValueError(f"expire_after must be positive, got {expire_after}")
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {max_attempts}")
        if timeout_seconds <= 0:
            raise ValueError(f"timeout_seconds must be positive, got {timeout_seconds}")
        if bearer_token_file is not None and basic_auth is not None:
            raise ValueError("give bearer_token_file or basic_auth, not both")
        if basic_auth is not None and (not basic_auth[0] or ":" in basic_auth[0]):
            raise ValueError(f"basic auth username must be non-empty and without ':', got {basic_auth[0]!r}")
        self.url = url.rstrip("/")
        self.cluster = cluster
        self.expire_after = expire_after
        self.generator_url = generator_url
        self._attempts = max_attempts
        self._backoff = backoff_seconds
        self._max_backoff = max_backoff_seconds
        self._sleep = sleep
        self._bearer_token_file = Path(bearer_token_file) if bearer_token_file is not None else None
        self._basic_auth = (basic_auth[0], Path(basic_auth[1])) if basic_auth is not None else None
        self._ca_file = Path(ca_file) if ca_file is not None else None
        self._ca_loaded: bytes | None = None  # the CA bundle the current client trusts
        self._client_args: dict[str, Any] = {
            "base_url": self.url, "timeout": timeout_seconds, "headers": dict(headers or {}), "transport": transport,
        }
        # Without a CA file the client is made now; with one, on the first push (see _client).
        self._http: httpx.Client | None = None if self._ca_file else httpx.Client(verify=verify, **self._client_args)

    # ---- port ------------------------------------------------------------------------------------

    def fire(self, alerts: Sequence[Alert], now: datetime) -> None:
        self._post(self.payload(alerts, now, resolved=False), "fire")

    def resolve(self, alerts: Sequence[Alert], now: datetime) -> None:
        self._post(self.payload(alerts, now, resolved=True), "resolve")

    # ---- wire format -----------------------------------------------------------------------------

    def payload(self, alerts: Sequence[Alert], now: datetime, *, resolved: bool) -> list[dict[str, Any]]:
        """The JSON body for ``POST /api/v2/alerts`` (``postableAlerts``); raises ValueError on a bad alert."""
        rfc3339(now)  # validates now
        out: list[dict[str, Any]] = []
        for alert in alerts:
            starts = alert.starts_at if alert.starts_at is not None else now
            if starts > now:
                raise ValueError(f"alert {alert.name}: starts_at {rfc3339(starts)} is after now {rfc3339(now)}")
            ends = now if resolved else now + self.expire_after
            body: dict[str, Any] = {
                "labels": self._labels(alert),
                "annotations": {
                    k: v for k, v in (("summary", alert.summary), ("description", alert.description)) if v
                },
                "startsAt": rfc3339(starts),
                "endsAt": rfc3339(ends),
            }
            if self.generator_url:
                body["generatorURL"] = self.generator_url
            out.append(body)
        return out

    def _labels(self, alert: Alert) -> dict[str, str]:
        if not alert.name:
            raise ValueError("alert name (alertname) must not be empty")
        if alert.severity not in SEVERITIES:
            raise ValueError(f"alert {alert.name}: severity must be one of {', '.join(SEVERITIES)}, "
                             f"got {alert.severity!r}")
        labels = {"alertname": alert.name, "severity": alert.severity, "cluster": self.cluster}
        for key, value in alert.labels.items():
            if key in RESERVED_LABELS:
                raise ValueError(f"alert {alert.name}: label {key!r} is set by the sink, do not pass it")
            if not LABEL_NAME.match(key):
                raise ValueError(f"alert {alert.name}: label name {key!r} is not a valid Prometheus label name")
            if value:  # an empty label value means "no label" to Alertmanager; drop it explicitly
                labels[key] = value
        return labels

    # ---- transport -------------------------------------------------------------------------------

    def _client(self) -> httpx.Client:
        """The HTTP client, (re)made when the CA bundle's content changed (a rotated Secret) or was unreadable."""
        if self._ca_file is None:
            assert self._http is not None
            return self._http
        try:
            pem = self._ca_file.read_bytes()
            if not pem.strip():
                raise _CredentialError(f"the Alertmanager CA file {self._ca_file} is empty")
            if self._http is None or pem != self._ca_loaded:
                context = ssl.create_default_context(cadata=pem.decode("ascii", errors="replace"))
                if self._http is not None:
                    self._http.close()
                self._http = httpx.Client(verify=context, **self._client_args)
                self._ca_loaded = pem
        except (OSError, ssl.SSLError, ValueError) as exc:
            detail = exc.strerror if isinstance(exc, OSError) and exc.strerror else _first_line(str(exc))
            raise _CredentialError(f"cannot load the Alertmanager CA file {self._ca_file}: {detail}") from None
        return self._http

    def _auth_headers(self) -> dict[str, str]:
        """Authorization read from its file on every push: projected tokens and Secrets rotate under us."""
        if self._bearer_token_file is not None:
            return {"Authorization": f"Bearer {read_secret(self._bearer_token_file, 'bearer token file')}"}
        if self._basic_auth is not None:
            user, password_file = self._basic_auth
            password = read_secret(password_file, "basic auth password file")
            return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode("ascii")}
        return {}

    def _post(self, body: list[dict[str, Any]], what: str) -> None:
        if not body:
            return
        names = ",".join(sorted({b["labels"]["alertname"] for b in body}))
        where = f"Alertmanager {self.url}{ALERTS_PATH} ({what} {names})"
        try:
            http, headers = self._client(), self._auth_headers()
        except SecretFileError as exc:  # a CA, token or password file (``_CredentialError`` included)
            raise AlertDeliveryError(f"{where}: not sent, {exc}") from None
        last = ""
        for attempt in range(self._attempts):
            if attempt:
                self._sleep(min(self._max_backoff, self._backoff * 2 ** (attempt - 1)))
            try:
                response = http.post(ALERTS_PATH, json=body, headers=headers)
            except httpx.TransportError as exc:
                tls = tls_verification_error(exc)
                if tls is not None:  # retrying cannot fix a certificate
                    raise AlertDeliveryError(
                        f"{where}: TLS verification failed (wrong or missing alerts.ca_file?): {tls}"
                    ) from None
                last = f"{type(exc).__name__}: {_first_line(str(exc)) or 'no detail'}"
                continue
            if response.status_code == 200:
                return
            last = f"HTTP {response.status_code}: {_first_line(response.text) or response.reason_phrase}"
            if response.status_code in (401, 403):
                raise AlertDeliveryError(f"{where}: rejected, {last} (check alerts.bearer_token_file / basic_auth)")
            if response.status_code not in RETRYABLE_STATUS:
                raise AlertDeliveryError(f"{where}: rejected, {last}")
        raise AlertDeliveryError(f"{where}: failed after {self._attempts} attempts, last {last}")

    def close(self) -> None:
        if self._http is not None:
            self._http.close()

    def __enter__(self) -> AlertmanagerSink:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
