"""Fixtures that start the real Prometheus and Alertmanager on 127.0.0.1 for the adapter tests.

Why a module of its own: the Prometheus adapter is tested against the real server, not a mock
(docs/ARCHITECTURE.md, "How each layer is tested"), and later features (cost alerts, the runtime loop) need the same
servers. Import the fixtures into a ``conftest.py`` (``from tests.servers import prometheus_server``).

Prometheus history is backfilled with ``promtool tsdb create-blocks-from openmetrics`` *before* the
server starts, at fixed historical timestamps (``BACKFILL_START``), so tests pass ``now`` explicitly
and never depend on the wall clock. The ground truth (per-pod counter increments and gauges) is
kept in :class:`Backfill`, so tests compute expected answers from the same numbers that were
written, not from hard-coded results. What is in it:

* ``serving/llama-chat``: two pods, eight days at 1-minute resolution, a daily cycle; pod
  ``...-x7k2p`` restarts (counter reset) at minute ``RESET_MINUTE``; both pods miss ``GAP_MINUTES``
  (a scrape outage);
* ``serving/mistral-code`` and ``research/qwen-eval`` (two ``finished_reason`` values): the last
  two hours only;
* ``other-team/llama-chat``: same Deployment name in a namespace the tests never allow;
* ``serving/vllm-standalone``: a pod whose name is not ``<deployment>-<hash>-<suffix>``.

A test that needs other series (without changing every other test's input) starts its own
server over its own, smaller backfill with :func:`serve_backfill` (``FakePod.waiting_present`` and
``running_present`` leave a pod's gauges out, or start them late). Servers get free ports and temp
directories; a server that does not become ready within the time limit fails the fixture with the
tail of its log. Missing binaries skip locally and fail under
``CI=true`` (``require_binary``).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import socket
import ssl
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np
import pytest

from tests.conftest import in_ci, require_binary

__all__ = [
    "BACKFILL_MINUTES",
    "BACKFILL_START",
    "GAP_MINUTES",
    "RESET_MINUTE",
    "SHORT_MINUTES",
    "AlertmanagerServer",
    "Backfill",
    "FakePod",
    "PrometheusServer",
    "TlsAlertmanagerServer",
    "TlsPrometheusServer",
    "alertmanager_server",
    "alertmanager_tls_server",
    "build_backfill",
    "free_port",
    "make_test_ca",
    "prometheus_server",
    "prometheus_tls_server",
    "serve_backfill",
    "start_process",
    "write_openmetrics",
]

BACKFILL_START = 1_699_920_000  # 2023-11-14T00:00:00Z, a whole minute (and day)
BACKFILL_MINUTES = 8 * 24 * 60  # eight days: 11,520 one-minute samples, > 11,000 points per query
SHORT_MINUTES = 120  # the short-history Deployments: the last two hours
RESET_MINUTE = 5_000  # pod ...-x7k2p of serving/llama-chat restarts: its counters start again from 0
GAP_MINUTES = range(9_000, 9_030)  # no samples at all for serving/llama-chat's pods
READY_TIMEOUT_SECONDS = 60.0


@dataclass(frozen=True)
class FakePod:
    """One fake vLLM pod and the truth behind what it exposes.

    Arrays are indexed by minute ``k`` (timestamp ``BACKFILL_START + 60*k``) over the whole
    backfill; ``present[k]`` says whether a sample was written at ``k``. ``completions[k]`` is the
    number of requests finished during minute ``(k-1, k]`` per ``finished_reason``; counters are
    the running sums (reset to 0 at ``reset_minute``).
    """

    namespace: str
    pod: str
    model: str
    completions: dict[str, np.ndarray]  # finished_reason -> per-minute increments
    waiting: np.ndarray
    running: np.ndarray
    present: np.ndarray
    reset_minute: int | None = None
    # Where each gauge is written, within ``present`` (None: wherever the pod is). For pods that do not
    # export a gauge at all, or start exporting it late (the completions-only fallback of the arrival rate).
    waiting_present: np.ndarray | None = None
    running_present: np.ndarray | None = None
    # Optional series (written only when given, so the other backfills stay byte for byte as they were): KV-cache
    # usage (0..1) under ``kv_cache_metric``, and the time-to-first-token histogram as per-minute increments of
    # each cumulative bucket (columns: ``ttft_le`` then +Inf) with its ``_sum`` increments.
    kv_cache: np.ndarray | None = None
    kv_cache_metric: str = "vllm:gpu_cache_usage_perc"
    ttft_le: tuple[float, ...] = ()
    ttft_buckets: np.ndarray | None = None
    ttft_sum: np.ndarray | None = None

    def gauge_present(self, gauge: str) -> np.ndarray:
        """Minutes at which gauge ``waiting`` or ``running`` has a sample."""
        own = self.waiting_present if gauge == "waiting" else self.running_present
        return self.present if own is None else self.present & own

    def in_system_present(self) -> np.ndarray:
        """Minutes at which both gauges have a sample (waiting + running is defined)."""
        both: np.ndarray = self.gauge_present("waiting") & self.gauge_present("running")
        return both

    @property
    def deployment(self) -> str | None:
        parts = self.pod.rsplit("-", 2)
        return parts[0] if len(parts) == 3 and len(parts[2]) == 5 and 5 <= len(parts[1]) <= 10 else None

    def total_completions(self) -> np.ndarray:
        return np.asarray(np.sum(list(self.completions.values()), axis=0), dtype=np.int64)

    def counter(self, increments: np.ndarray) -> np.ndarray:
        """Counter values written at each minute, with the reset applied."""
        values = np.cumsum(increments).astype(np.float64)
        if self.reset_minute is not None:
            r = self.reset_minute
            values[r:] = np.cumsum(increments[r:])
        return values


@dataclass(frozen=True)
class Backfill:
    start: int
    minutes: int
    pods: tuple[FakePod, ...]

    @property
    def end(self) -> int:
        """Timestamp of the last written minute plus one minute: a natural ``now``."""
        return self.start + 60 * self.minutes

    def pods_of(self, namespace: str, deployment: str) -> list[FakePod]:
        return [p for p in self.pods if p.namespace == namespace and p.deployment == deployment]

    def arrival_rate(self, namespace: str, deployment: str) -> np.ndarray:
        """Expected per-bin arrival rate (bin ``i`` = minute ``i`` to ``i+1``), NaN where undefined.

        Completions over the bin plus growth of waiting + running over the bin, per second,
        clamped at 0. ``rate`` over a one-step window needs a sample at both edges of the bin, so
        a bin is defined where the Deployment's pods have both edges; the fixture never has one pod
        with both edges while another has only one (the answer would then depend on lookback).
        Growth counts only where a pod has both gauges at both edges of the bin (where no pod of the
        Deployment has, the query falls back to completions alone: :meth:`full_formula_bins`); a gauge
        never stops once written (a gap would be bridged by Prometheus's lookback).
        """
        pods = self.pods_of(namespace, deployment)
        n = self.minutes - 1
        total = np.zeros(n)
        covered = np.zeros(n, dtype=bool)
        partial = np.zeros(n, dtype=bool)
        for p in pods:
            both = p.present[:-1] & p.present[1:]
            partial |= (p.present[:-1] | p.present[1:]) & ~both
            gauges = p.in_system_present()
            if np.any(gauges[:-1] & ~gauges[1:] & p.present[1:]):
                raise AssertionError(f"{p.pod}: a gauge stops while the pod goes on (lookback would bridge it)")
            growth = gauges[:-1] & gauges[1:]
            in_system = (p.waiting + p.running).astype(np.float64)
            completed = np.where(both, p.total_completions()[1:] / 60, 0.0)
            total += completed + np.where(growth, np.diff(in_system) / 60, 0.0)
            covered |= both
        if np.any(covered & partial):
            raise AssertionError(f"{namespace}/{deployment}: some pods have a bin's both edges, others one")
        return np.where(covered, np.maximum(total, 0.0), np.nan)

    def completion_rate(self, namespace: str, deployment: str) -> np.ndarray:
        """Expected per-bin completion rate (requests/s), NaN where a bin lacks a sample at an edge."""
        pods = self.pods_of(namespace, deployment)
        total = np.zeros(self.minutes - 1)
        covered = np.zeros(self.minutes - 1, dtype=bool)
        for p in pods:
            both = p.present[:-1] & p.present[1:]
            total += np.where(both, p.total_completions()[1:] / 60, 0.0)
            covered |= both
        return np.where(covered, total, np.nan)

    def full_formula_bins(self, namespace: str, deployment: str) -> np.ndarray:
        """Bins where queue growth is defined for some pod of the Deployment (the arrival rate's full formula)."""
        full = np.zeros(self.minutes - 1, dtype=bool)
        for p in self.pods_of(namespace, deployment):
            gauges = p.in_system_present()
            full |= gauges[:-1] & gauges[1:]
        return full


def build_backfill(seed: int = 20231114) -> Backfill:
    rng = np.random.default_rng(seed)
    n = BACKFILL_MINUTES
    minute = np.arange(n)
    daily = 1.0 + 0.8 * np.sin(2 * np.pi * minute / (24 * 60))  # a daily cycle, always >= 0.2
    short = np.zeros(n, dtype=bool)
    short[n - SHORT_MINUTES :] = True
    long_present = np.ones(n, dtype=bool)
    long_present[GAP_MINUTES.start : GAP_MINUTES.stop] = False

    def pod(namespace: str, name: str, model: str, level: float, present: np.ndarray, **kw: object) -> FakePod:
        reasons = ("stop", "length") if kw.pop("two_reasons", False) else ("stop",)
        completions = {r: rng.poisson(level * daily / len(reasons)).astype(np.int64) for r in reasons}
        reset = kw.pop("reset_minute", None)
        assert not kw
        return FakePod(
            namespace=namespace,
            pod=name,
            model=model,
            completions=completions,
            waiting=rng.poisson(2.0 * daily).astype(np.int64),
            running=rng.poisson(6.0, n).astype(np.int64),
            present=present,
            reset_minute=reset if isinstance(reset, int) else None,
        )

    pods = (
        pod("serving", "llama-chat-7d9f8b6c5d-x7k2p", "llama-3-8b", 90.0, long_present, reset_minute=RESET_MINUTE),
        pod("serving", "llama-chat-7d9f8b6c5d-q9w4z", "llama-3-8b", 60.0, long_present),
        pod("serving", "mistral-code-5b7c9d8f4-m2n3b", "mistral-7b", 30.0, short),
        pod("serving", "vllm-standalone", "phi-3", 10.0, short),
        pod("research", "qwen-eval-6c8d7f9b5-h4j5k", "qwen-2-7b", 20.0, short, two_reasons=True),
        pod("other-team", "llama-chat-7d9f8b6c5d-a1b2c", "llama-3-70b", 50.0, short),
    )
    return Backfill(BACKFILL_START, n, pods)


def write_openmetrics(backfill: Backfill, directory: Path, window_minutes: int = 1440) -> list[Path]:
    """Write the backfill as OpenMetrics files, one per ``window_minutes`` of samples.

    Split because promtool re-parses its whole input once per 2-hour block it writes: two weeks in
    one file took 168 parses (84 s on the shared CI machine); split by day, about one parse in all.
    """
    times = [str(backfill.start + 60 * k) for k in range(backfill.minutes)]
    files: list[Path] = []
    for first in range(0, backfill.minutes, window_minutes):
        window = slice(first, min(first + window_minutes, backfill.minutes))
        lines: list[str] = []

        def series(
            name: str, labels: str, values: np.ndarray, present: np.ndarray, w: slice = window, out: list[str] = lines
        ) -> None:
            texts = [str(v) for v in values[w].tolist()]
            out.extend(
                f"{name}{{{labels}}} {texts[k]} {times[w.start + k]}" for k in np.flatnonzero(present[w]).tolist()
            )

        def base(p: FakePod) -> str:
            return f'namespace="{p.namespace}",pod="{p.pod}",model_name="{p.model}"'

        lines.append("# TYPE vllm:request_success counter")
        for p in backfill.pods:
            for reason, inc in p.completions.items():
                labels = f'{base(p)},finished_reason="{reason}"'
                series("vllm:request_success_total", labels, p.counter(inc), p.present)
        for family, per_request in (("vllm:prompt_tokens", 300), ("vllm:generation_tokens", 120)):
            lines.append(f"# TYPE {family} counter")
            for p in backfill.pods:
                series(f"{family}_total", base(p), p.counter(p.total_completions() * per_request), p.present)
        for gauge, attr in (("vllm:num_requests_waiting", "waiting"), ("vllm:num_requests_running", "running")):
            lines.append(f"# TYPE {gauge} gauge")
            for p in backfill.pods:
                series(gauge, base(p), getattr(p, attr), p.gauge_present(attr))
        for metric in sorted({p.kv_cache_metric for p in backfill.pods if p.kv_cache is not None}):
            lines.append(f"# TYPE {metric} gauge")
            for p in backfill.pods:
                if p.kv_cache is not None and p.kv_cache_metric == metric:
                    series(metric, base(p), p.kv_cache, p.present)
        if any(p.ttft_buckets is not None for p in backfill.pods):
            family = "vllm:time_to_first_token_seconds"
            lines.append(f"# TYPE {family} histogram")
            for p in backfill.pods:
                if p.ttft_buckets is None or p.ttft_sum is None:
                    continue
                cumulative = np.cumsum(p.ttft_buckets, axis=0)
                for j, le in enumerate([*(f"{b:g}" for b in p.ttft_le), "+Inf"]):
                    series(f"{family}_bucket", f'{base(p)},le="{le}"', cumulative[:, j], p.present)
                series(f"{family}_count", base(p), cumulative[:, -1], p.present)
                series(f"{family}_sum", base(p), np.cumsum(p.ttft_sum), p.present)
        lines.append("# EOF")
        path = directory / f"backfill-{first:06d}.om.txt"
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        files.append(path)
    return files


def free_port() -> int:
    """A port that was free a moment ago on 127.0.0.1 (the server binds it right after)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _log_tail(log: Path, lines: int = 20) -> str:
    try:
        return "\n".join(log.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def start_process(
    argv: list[str], ready_url: str, log: Path, verify: ssl.SSLContext | bool = True
) -> subprocess.Popen[bytes]:
    """Start ``argv`` (output to ``log``) and wait until ``ready_url`` answers 200."""
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + READY_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"{argv[0]} exited with {proc.returncode} before ready:\n{_log_tail(log)}")
        try:
            if httpx.get(ready_url, timeout=1.0, verify=verify).status_code == 200:
                return proc
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    stop_process(proc)
    pytest.fail(f"{argv[0]} not ready at {ready_url} after {READY_TIMEOUT_SECONDS}s:\n{_log_tail(log)}")


def stop_process(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def _backfilled_blocks(cache: pytest.Cache | None, promtool: str, backfill: Backfill, scratch: Path) -> Path:
    """TSDB blocks for ``backfill`` made by promtool, cached in pytest's cache by content hash.

    promtool writes one block per 2 hours and takes tens of seconds on a busy machine; the blocks
    depend only on the OpenMetrics text and the promtool version, so a re-run reuses them.
    """
    openmetrics = scratch / "openmetrics"
    openmetrics.mkdir()
    files = write_openmetrics(backfill, openmetrics)
    digest = hashlib.sha256(subprocess.run([promtool, "--version"], capture_output=True, check=False).stdout)
    for f in files:
        digest.update(f.read_bytes())
    name = f"prometheus-backfill-{digest.hexdigest()[:20]}"
    cached = cache.mkdir(name) / "blocks" if cache is not None else None
    if cached is not None and cached.is_dir():
        return cached
    blocks = scratch / "blocks"
    blocks.mkdir()
    for metrics in files:
        created = subprocess.run(
            [promtool, "tsdb", "create-blocks-from", "openmetrics", "--quiet", str(metrics), str(blocks)],
            capture_output=True,
            text=True,
            check=False,
        )
        if created.returncode != 0:
            pytest.fail(f"promtool backfill of {metrics.name} failed ({created.returncode}): {created.stderr[-2000:]}")
    if cached is None:
        return blocks
    staging = cached.parent / f"blocks.{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree(blocks, staging)
    try:
        staging.rename(cached)  # atomic: a concurrent session sees all blocks or none
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)  # another session won the race; its blocks are equal
    return cached


@dataclass(frozen=True)
class PrometheusServer:
    url: str
    now: int  # the backfill's end: pass it as ``now``/``at``, never the wall clock
    backfill: Backfill
    storage: Path


@dataclass(frozen=True)
class TlsPrometheusServer:
    url: str  # https://127.0.0.1:<port>, certificate for IP 127.0.0.1 signed by ``ca_file``
    ca_file: Path


@dataclass(frozen=True)
class AlertmanagerServer:
    url: str
    config: Path


@dataclass(frozen=True)
class TlsAlertmanagerServer:
    url: str  # https://127.0.0.1:<port>, certificate for IP 127.0.0.1 signed by ``ca_file``
    ca_file: Path
    username: str  # every endpoint, /-/ready included, wants basic auth with these
    password: str


@contextlib.contextmanager
def serve_backfill(backfill: Backfill, root: Path, cache: pytest.Cache | None = None) -> Iterator[PrometheusServer]:
    """A real Prometheus on 127.0.0.1 serving ``backfill`` (blocks made by promtool) from ``root``, stopped on exit.

    The session's :func:`prometheus_server` is one; a test that needs other series (so as not to change every
    other test's input) starts its own with its own, smaller backfill.
    """
    prometheus = require_binary("prometheus")
    promtool = require_binary("promtool")
    storage = root / "data"
    storage.mkdir()
    for block in _backfilled_blocks(cache, promtool, backfill, root).iterdir():
        shutil.copytree(block, storage / block.name)
    config = root / "prometheus.yml"
    config.write_text("global:\n  scrape_interval: 1m\n  evaluation_interval: 1m\nscrape_configs: []\n")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = start_process(
        [
            prometheus,
            f"--config.file={config}",
            f"--storage.tsdb.path={storage}",
            "--storage.tsdb.retention.time=10y",
            # min = max block duration: no background compaction of the backfilled blocks (CPU).
            "--storage.tsdb.min-block-duration=2h",
            "--storage.tsdb.max-block-duration=2h",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        f"{url}/-/ready",
        root / "prometheus.log",
    )
    try:
        yield PrometheusServer(url=url, now=backfill.end, backfill=backfill, storage=storage)
    finally:
        stop_process(proc)


def pytest_cache(request: pytest.FixtureRequest) -> pytest.Cache | None:
    """pytest's cache, or None when the cache plugin is off (``-p no:cacheprovider``): the backfill is then made
    afresh, as on a first run, instead of failing the fixture."""
    cache: pytest.Cache | None = getattr(request.config, "cache", None)
    return cache


@pytest.fixture(scope="session")
def prometheus_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[PrometheusServer]:
    """A real Prometheus serving two weeks of backfilled vLLM metrics (see the module docstring)."""
    with serve_backfill(build_backfill(), tmp_path_factory.mktemp("prometheus"), pytest_cache(request)) as server:
        yield server


def make_test_ca(directory: Path) -> tuple[Path, Path, Path]:
    """A throw-away CA and a server certificate for IP 127.0.0.1 (openssl CLI): (ca, cert, key)."""
    openssl = require_binary("openssl")
    ca, ca_key = directory / "ca.pem", directory / "ca.key"
    cert, key, csr = directory / "server.pem", directory / "server.key", directory / "server.csr"
    ext = directory / "server.ext"
    ext.write_text("subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n", encoding="utf-8")
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    sign = ["-CA", ca, "-CAkey", ca_key, "-CAcreateserial", "-out", cert, "-days", "2", "-extfile", ext]
    steps = [
        [openssl, "req", "-x509", *ec, "-keyout", ca_key, "-out", ca, "-days", "2", "-subj", "/CN=autoscaler-test-ca"],
        [openssl, "req", *ec, "-keyout", key, "-out", csr, "-subj", "/CN=127.0.0.1"],
        [openssl, "x509", "-req", "-in", csr, *sign],
    ]
    for argv in steps:
        done = subprocess.run([str(a) for a in argv], capture_output=True, text=True, check=False)
        if done.returncode != 0:
            pytest.fail(f"openssl {argv[1]} failed: {done.stderr[-1000:]}")
    return ca, cert, key


@pytest.fixture(scope="session")
def prometheus_tls_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsPrometheusServer]:
    """A real Prometheus (empty storage) serving HTTPS with a certificate from a test CA."""
    prometheus = require_binary("prometheus")
    root = tmp_path_factory.mktemp("prometheus-tls")
    ca, cert, key = make_test_ca(root)
    web = root / "web.yml"
    web.write_text(f"tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n", encoding="utf-8")
    config = root / "prometheus.yml"
    config.write_text("global:\n  scrape_interval: 1m\nscrape_configs: []\n", encoding="utf-8")
    port = free_port()
    url = f"https://127.0.0.1:{port}"
    proc = start_process(
        [
            prometheus,
            f"--config.file={config}",
            f"--storage.tsdb.path={root / 'data'}",
            f"--web.config.file={web}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        f"{url}/-/ready",
        root / "prometheus.log",
        verify=ssl.create_default_context(cafile=str(ca)),
    )
    try:
        yield TlsPrometheusServer(url=url, ca_file=ca)
    finally:
        stop_process(proc)


ALERTMANAGER_CONFIG = """\
route:
  receiver: default
  group_wait: 1s
  group_interval: 1s
  repeat_interval: 1h
receivers:
  - name: default
"""


@pytest.fixture(scope="session")
def alertmanager_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AlertmanagerServer]:
    """A real Alertmanager with gossip off and a single no-op ``default`` receiver."""
    alertmanager = require_binary("prometheus-alertmanager")
    root = tmp_path_factory.mktemp("alertmanager")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc, config = _start_alertmanager(alertmanager, root, port, [], f"{url}/-/ready")
    try:
        yield AlertmanagerServer(url=url, config=config)
    finally:
        stop_process(proc)


def _start_alertmanager(
    binary: str, root: Path, port: int, extra: list[str], ready_url: str, verify: ssl.SSLContext | bool = True
) -> tuple[subprocess.Popen[bytes], Path]:
    """Alertmanager on 127.0.0.1:``port`` with gossip off and the no-op receiver; (process, config file)."""
    config = root / "alertmanager.yml"
    config.write_text(ALERTMANAGER_CONFIG, encoding="utf-8")
    (root / "data").mkdir()
    argv = [binary, f"--config.file={config}", f"--storage.path={root / 'data'}", *extra,
            f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address="]
    return start_process(argv, ready_url, root / "alertmanager.log", verify=verify), config


@pytest.fixture(scope="session")
def alertmanager_tls_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsAlertmanagerServer]:
    """A real Alertmanager serving HTTPS (test CA) and requiring basic auth (``--web.config.file``)."""
    alertmanager = require_binary("prometheus-alertmanager")
    try:
        import bcrypt  # a dev extra; imported here so the other fixtures work without it
    except ImportError:
        message = "bcrypt is not installed (pip install -e '.[dev]'): cannot hash the basic auth password"
        if in_ci():
            pytest.fail(message)
        pytest.skip(message)
    root = tmp_path_factory.mktemp("alertmanager-tls")
    ca, cert, key = make_test_ca(root)
    username, password = "autoscaler", "s3cret-test-password"
    hashed = bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=4)).decode()  # cost 4: cheap per request
    web = root / "web.yml"
    web.write_text(
        f"tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\nbasic_auth_users:\n  {username}: '{hashed}'\n",
        encoding="utf-8",
    )
    port = free_port()
    url = f"https://127.0.0.1:{port}"
    proc, _ = _start_alertmanager(
        alertmanager, root, port, [f"--web.config.file={web}"],
        f"https://{username}:{password}@127.0.0.1:{port}/-/ready",  # httpx sends URL userinfo as basic auth
        verify=ssl.create_default_context(cafile=str(ca)),
    )
    try:
        yield TlsAlertmanagerServer(url=url, ca_file=ca, username=username, password=password)
    finally:
        stop_process(proc)
