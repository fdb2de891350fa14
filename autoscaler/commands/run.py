"""``predictive-autoscaler run``: the controller process.

``--once`` runs one tick and exits 0 when it succeeded (metrics fetched, every write landed), 1
otherwise; ``--dry-run`` prints the plan as JSON and writes nothing (no scale, no status, no
Event, no Lease). A ``--once`` that cannot act because it does not get the Lease (another instance
holds it, or taking it failed: the namespace does not exist, RBAC refuses, the API server is unreachable)
runs no tick, says why in one line on stderr (naming the holder, or the API server's answer) and exits 1:
it did nothing, so it must not look like success. Without ``--once`` it loops every ``loop.interval`` until
SIGTERM/SIGINT, which lets the current tick finish and then releases the Lease so a standby takes over at once.

Besides the Deployments, the controller reads Karpenter NodePools (``karpenter``: their GPU limits and
headroom) and Kueue/Volcano training gangs, and pushes alerts to Alertmanager when ``alerts.alertmanager_url``
is set; a configuration reload that changes those sections swaps the adapters in place.

Only the Lease holder acts; a standby still ticks (forecasts stay warm, metrics stay exported) so
a takeover does not start from cold models.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import socket
import sys
import threading
import time
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from kubernetes import client

from autoscaler.adapters.alertmanager import DEFAULT_TIMEOUT_SECONDS, AlertmanagerSink
from autoscaler.adapters.karpenter import KarpenterCapacity
from autoscaler.adapters.kube import KubeCluster, KubeError, api_client_from_config
from autoscaler.adapters.training import TrainingReader
from autoscaler.config.schema import DEFAULT_CONFIG_PATH, AlertsConfig, Config, ConfigError, KarpenterConfig
from autoscaler.config.store import ConfigStore
from autoscaler.errors import UserError
from autoscaler.history import prometheus_source
from autoscaler.runtime.clock import SystemClock, utc
from autoscaler.runtime.http import HealthState, serve
from autoscaler.runtime.leader import LeaderElector
from autoscaler.runtime.loop import Controller, TickReport
from autoscaler.runtime.money import MoneyStage

log = logging.getLogger("predictive_autoscaler")


# For --help: plain text for the operator (the module docstring is for developers).
DESCRIPTION = (
    "Run the controller: every loop interval it reads request rates from Prometheus, forecasts the demand of "
    "each opted-in Deployment and scales it ahead of the forecast. Only the holder of the leader Lease acts; "
    "the others keep their forecasts warm so a takeover starts from warm models. --once runs one tick and exits "
    "0 when it succeeded, 1 otherwise; --dry-run prints the plan as JSON and changes nothing in the cluster. "
    "Serves /metrics, /healthz and /readyz on --listen. SIGTERM or Ctrl-C lets the current tick finish and "
    "releases the Lease."
)


def register(sub: Any) -> None:
    p = sub.add_parser("run", help="run the controller against a cluster", description=DESCRIPTION)
    p.add_argument("--once", action="store_true", help="run one tick and exit (0 = it succeeded)")
    p.add_argument("--dry-run", action="store_true", help="print the plan as JSON; write nothing")
    p.add_argument("--kubeconfig", help="kubeconfig path (default: in-cluster, then $KUBECONFIG, then ~/.kube/config)")
    p.add_argument("--prometheus-url", help="override prometheus.url from the config")
    p.add_argument("--config", default=str(DEFAULT_CONFIG_PATH), help="config file or ConfigMap directory")
    p.add_argument("--listen", default="0.0.0.0:8080", help="address for /metrics, /healthz, /readyz")
    p.add_argument("--identity", default=os.environ.get("POD_NAME") or socket.gethostname(),
                   help="this replica's name in the leader Lease")
    p.add_argument("--no-leader-election", action="store_true", help="act without holding the Lease")
    p.add_argument("--at", metavar="TIME", type=_timestamp,
                   help="with --once: decide as of TIME (Unix seconds or ISO 8601, e.g. 2024-05-01T12:00:00Z) "
                        "instead of now, to replay a past decision against the metrics of that time")
    p.set_defaults(handler=run)


def _timestamp(text: str) -> float:
    """``--at``: Unix seconds or an ISO 8601 time with a zone (a naive time would be ambiguous)."""
    try:
        return float(text)
    except ValueError:
        pass
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not Unix seconds or an ISO 8601 time: {text!r}") from None
    if parsed.tzinfo is None:
        raise argparse.ArgumentTypeError(f"time {text!r} has no zone (add Z or +00:00)")
    return parsed.timestamp()


def _listen(text: str) -> tuple[str, int]:
    """``--listen HOST:PORT`` (``:PORT`` means all interfaces)."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise UserError(f"--listen: expected HOST:PORT (e.g. 0.0.0.0:8080), got {text!r}")
    return host.strip("[]") or "0.0.0.0", int(port)


def _sink(cfg: AlertsConfig) -> AlertmanagerSink | None:
    if cfg.alertmanager_url is None:
        return None
    try:
        return AlertmanagerSink(
            cfg.alertmanager_url,
            cluster=cfg.cluster,
            expire_after=timedelta(seconds=cfg.expire_after_seconds),
            timeout_seconds=DEFAULT_TIMEOUT_SECONDS if cfg.timeout_seconds is None else cfg.timeout_seconds,
            ca_file=cfg.ca_file,
            bearer_token_file=cfg.bearer_token_file,
            basic_auth=None if cfg.basic_auth is None else (cfg.basic_auth.username, cfg.basic_auth.password_file),
        )
    except ValueError as exc:
        raise UserError(f"alerts: {exc}") from None


def _capacity(api: client.ApiClient, cfg: KarpenterConfig) -> KarpenterCapacity | None:
    # The adapter discovers CapacityBuffers itself ("auto"); the stage applies a forced mode or "off" per tick.
    return KarpenterCapacity(api, namespace=cfg.namespace) if cfg.enabled else None


def _training(api: client.ApiClient, cfg: Config) -> TrainingReader:
    return TrainingReader(api, namespaces=cfg.namespaces or None)


def _rewire(money: MoneyStage, api: client.ApiClient, old: Config, new: Config) -> None:
    """Swap the money stage's adapters whose configuration changed (its memory stays)."""
    if new.alerts != old.alerts:
        if isinstance(money.alerts, AlertmanagerSink):
            money.alerts.close()
        money.alerts = _sink(new.alerts)
    if new.karpenter != old.karpenter:
        money.capacity = _capacity(api, new.karpenter)
    if new.namespaces != old.namespaces:
        money.training = _training(api, new)


def _not_acting(leader: LeaderElector) -> str:
    """Why a ``--once`` run did not get the Lease, in one line."""
    lease = f"Lease {leader.namespace}/{leader.name}"
    if leader.last_error is not None:
        return f"--once did nothing: could not take the {lease} ({leader.last_error})"
    if leader.holder is not None:
        return (f"--once did nothing: the {lease} is held by {leader.holder!r}, the acting controller "
                "(it stays the leader while it renews the Lease)")
    return f"--once did nothing: another instance took the {lease} at the same moment"


def _print(report: TickReport) -> None:
    print(json.dumps(report.to_dict(), indent=2, sort_keys=False))


# HTTP client libraries log every request at INFO (httpx: dozens of lines a tick per Deployment), which buries the
# controller's own warnings; their request lines belong at DEBUG, their warnings still show.
QUIET_LIBRARIES = ("httpx", "httpcore", "urllib3", "kubernetes")


def configure_logging() -> None:
    """The controller's log: its own decisions and warnings at INFO; HTTP libraries only from WARNING up."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for name in QUIET_LIBRARIES:
        logging.getLogger(name).setLevel(logging.WARNING)


def run(args: argparse.Namespace) -> int:
    configure_logging()
    if args.at is not None and not args.once:
        raise UserError("--at needs --once (a running controller decides at the current time)")
    try:
        store = ConfigStore(args.config)
    except ConfigError as exc:
        raise UserError(str(exc)) from None
    try:
        api = api_client_from_config(args.kubeconfig)
    except KubeError as exc:
        raise UserError(str(exc)) from None
    cfg: Config = store.current()
    source = prometheus_source(cfg.prometheus, args.prometheus_url)
    money = MoneyStage(capacity=_capacity(api, cfg.karpenter), training=_training(api, cfg), alerts=_sink(cfg.alerts))

    def in_one_tick() -> Config:
        """``--once``: the config with the replays in the tick's own process (one tick would hand them to workers and
        exit before they came back, its tunings lost)."""
        now = store.current()
        return replace(now, loop=replace(now.loop, replay_workers=0))

    controller = Controller(KubeCluster(api, instance=args.identity), source,
                            in_one_tick if args.once else store.current, dry_run=args.dry_run, money=money,
                            learn_capacity=True)
    clock = SystemClock()
    leader = None
    if not (args.dry_run or args.no_leader_election):
        le = cfg.leader_election
        # --once reports the Lease's outcome itself, in one line (_not_acting), rather than through the log.
        leader = LeaderElector(api, le.lease_namespace, le.lease_name, args.identity, le.lease_duration_seconds,
                               clock=lambda: utc(clock.now()), quiet=args.once)

    def acting() -> bool:
        return True if leader is None else leader.try_acquire_or_renew()

    if args.once:
        try:
            if leader is not None and not leader.try_acquire_or_renew():
                print(f"predictive-autoscaler run: error: {_not_acting(leader)}", file=sys.stderr)
                return 1
            report = controller.tick(clock.now() if args.at is None else args.at, acting=True)
            if leader is not None and leader.is_leader and not leader.release():
                print(f"predictive-autoscaler run: warning: {leader.last_error or 'the Lease changed hands'}; "
                      f"it expires by itself after {leader.lease_duration_seconds}s", file=sys.stderr)
        finally:
            controller.close()
            source.close()
            if isinstance(money.alerts, AlertmanagerSink):
                money.alerts.close()
        if args.dry_run:
            _print(report)
        for e in report.errors:
            print(f"error: {e}", file=sys.stderr)
        return 0 if report.ok else 1

    host, port = _listen(args.listen)
    health = HealthState(clock.now, stall_after=max(120.0, 4.0 * cfg.loop.interval_seconds))
    try:
        server = serve(controller.metrics.registry, health, host, port)
    except OSError as exc:
        source.close()
        raise UserError(f"--listen {args.listen}: cannot listen there ({exc.strerror or exc})") from None
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    log.info("controller %s started; metrics on %s", args.identity, args.listen)
    config_failures = store.reload_failures
    try:
        while not stop.is_set():
            started = time.monotonic()
            if store.maybe_reload():
                new = store.current()
                if new.prometheus != cfg.prometheus:
                    source.close()
                    source = prometheus_source(new.prometheus, args.prometheus_url)
                    controller.source = source
                try:
                    _rewire(money, api, cfg, new)
                except UserError as exc:  # parse_config validated the URL; a failure here is reported, not fatal
                    log.error("%s", exc)
                    controller.metrics.errors.labels("config").inc()
                cfg = new
                log.info("configuration reloaded (generation %d)", store.generation)
            if store.reload_failures > config_failures:
                controller.metrics.errors.labels("config").inc(store.reload_failures - config_failures)
                config_failures = store.reload_failures
            try:
                report = controller.tick(clock.now(), acting=acting())
            except Exception:  # a bug in one tick must not end the controller; /healthz reports a stall
                log.exception("tick failed")
                controller.metrics.errors.labels("tick").inc()
            else:
                if args.dry_run:
                    _print(report)
                health.tick_finished()
            clock.sleep(cfg.loop.interval_seconds - (time.monotonic() - started), stop)
    finally:
        if leader is not None and leader.is_leader:
            leader.release()
        server.shutdown()
        server.server_close()
        controller.close()
        source.close()
        if isinstance(money.alerts, AlertmanagerSink):
            money.alerts.close()
        log.info("controller stopped")
    return 0
