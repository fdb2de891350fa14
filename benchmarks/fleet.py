"""Fleet-scale benchmark of one controller tick: fetch, forecast, plan, apply for 100 to 5,000 Deployments.

Why it exists: the product brief asks that one controller handle 1,000 opted-in Deployments with two
weeks of 1-minute history each, a whole tick (with cached fitted models) in under 30 s on two cores and
in under 1 GiB, and that we say how cost grows with the fleet. This command measures exactly that with
the real ``Controller`` (``autoscaler.runtime.loop``), the real default forecaster chain and planner, and
the default configuration, driven through the ``Cluster`` and ``MetricsSource`` ports by the in-process
fleet of ``benchmarks.fleet_fakes`` (real-trace traffic, recorded writes).

What is *not* in the tick figures (why): Prometheus and the Kubernetes API server. A real Prometheus
answering a 1,000 x 20,160-point fleet query would be measuring itself. Their client-side cost is
measured separately: the PromQL fleet query rendering, and the parsing of Prometheus's JSON answer by
``PrometheusSource.fleet_history`` (canned answers served in-process through ``httpx.MockTransport``, so
only our client code is timed). The tick report gives Kubernetes write counts so an API latency can be
applied to them.

Run: ``python -m benchmarks.fleet`` (from the repository root). Each fleet size runs in a fresh
subprocess (so peak RSS is per size) with a wall-clock cap (``--cap N=SECONDS``); a capped run reports
what it finished and labels any extrapolation as such. ``--sizes 100`` for a quick look (the page is
only rewritten by a run that includes 1,000, unless ``--write``); ``--no-write`` to only print.

Ticks per size: a cold tick (first fetch of 14 days, first fit of every forecaster), then ten ticks 30 s
apart (the loop interval; every second one crosses into a new 1-minute bin, so every forecaster absorbs
one bin with ``update``; the tick five minutes on also re-reads pod start-ups and refreshes every
status), one more bin-crossing tick under cProfile for the hotspot table, then, for sizes up to
``--refit-max``, the tick one day on, when every cached model is due for its daily refit at once (they were
all fitted in the cold tick). Phase times come from timing the controller's own phase methods on the instance
(no edit of the loop).

What a steady tick holds besides the tick's own work (*tune*): the self-tuning replays. Every Deployment's first
replay is due once its model is fitted, and the controller runs them once the plans are written, least recently
tuned first (the dearest Deployments first among those), within the tuning budget (a tenth of the loop interval:
3 s; ``runtime.tuning_schedule``): one replay a tick whatever it costs, more only while they fit in the budget. A
Deployment's first replay also replays up to a week of the history it had before (``tuning.tune``'s backfill), which
takes longer than the budget, so until every Deployment has had one a steady tick is the tick's own work plus one
such replay (and the first few at N=1,000 fit what the cold tick's fitting budget deferred); the daily refits'
replays are of one day each. The phase table and the findings keep them apart, and say how long the fleet's first
tunings take at that pace. With ``--replay-workers N`` (``loop.replay_workers``, print only) the replays run in the
background in N worker processes, so the steady ticks are paced at the loop interval in real time (the workers
replay between them), and the findings say how many came back a tick.

Every figure is also given as a ratio against anchors measured in the same process: one default-chain
fit + predict on 14 days (what a cold tick must do per Deployment), one chain ``update`` of one bin +
predict (what a steady tick must do), and one reactive HPA-style decision ``ceil(demand / capacity)``.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import math
import pstats
import resource
import statistics
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from autoscaler.config.parser import load_config
from autoscaler.config.schema import Config
from autoscaler.history import FLEET_POINTS_PER_REQUEST
from autoscaler.runtime.loop import Controller, TickReport
from autoscaler.runtime.state import TUNE_BUDGET_SHARE
from benchmarks.fleet_fakes import STEP, TRACES_DIR, RecordingCluster, SyntheticFleet, SyntheticSource
from benchmarks.report import machine, require_traces, update_section
from models.registry import make_chain
from models.types import TrafficSeries

COMMAND = "python -m benchmarks.fleet"
SIZES = (100, 1000, 5000)
DEFAULT_CAPS = {100: 600, 1000: 2400, 5000: 900}
TARGET_N = 1000
TARGET_TICK_SECONDS = 30.0
TARGET_RSS_BYTES = 1 << 30
T0 = 1_767_225_600  # 2026-01-01T00:00:00Z; any whole day works, the traffic is cyclic
COLD_NOW = T0 + 15  # 15 s into a minute: ticks 30 s apart alternate between crossing a bin and not
STEADY_TICKS = 10
DEFERRED_FIT_SECONDS = 1.0  # a steady tick forecasting longer than this is fitting what an earlier tick deferred
DAY = 86_400
PAGE = 4096
# The controller's phase methods, timed per call on the instance (names as in autoscaler/runtime/: loop, reads, apply,
# export).
PHASE_METHODS = (
    "_parse", "_report_problems", "_fetch", "_report_outage", "_plan", "_conclude",
    "_forecast", "_startups", "_apply", "_export", "_replay_due", "_publish",
)


# ---------------------------------------------------------------------------------------------- measuring


def rss_bytes() -> int:
    """Current resident set size (Linux /proc; 0 elsewhere)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * PAGE
    except OSError:
        return 0


def peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


@dataclass
class PhaseClock:
    """Accumulates seconds per wrapped method; reset per tick."""

    seconds: dict[str, float] = field(default_factory=dict)
    calls: dict[str, int] = field(default_factory=dict)

    def wrap(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - started
                self.calls[name] = self.calls.get(name, 0) + 1

        return timed

    def reset(self) -> None:
        self.seconds.clear()
        self.calls.clear()


def instrument(controller: Controller) -> tuple[PhaseClock, list[str]]:
    """Time the controller's phase methods by wrapping them on the instance; returns the names not found."""
    clock = PhaseClock()
    missing = []
    for name in PHASE_METHODS:
        method = getattr(controller, name, None)
        if method is None:
            missing.append(name)
            continue
        setattr(controller, name, clock.wrap(name, method))
    return clock, missing


def phases(clock: PhaseClock, total: float, source_seconds: float, cluster_seconds: float) -> dict[str, float]:
    """The tick's wall time split into read/fetch/forecast/plan/apply/other (seconds)."""
    s = clock.seconds.get
    # Planning is two passes around the money stage: _plan, then _conclude applies.
    plan_and_apply = s("_plan", 0.0) + s("_conclude", 0.0)
    forecast = s("_forecast", 0.0)
    startups = s("_startups", 0.0)
    publish = s("_publish", 0.0)  # the status writes, after the replays
    apply_ = s("_apply", 0.0) + s("_report_outage", 0.0) + publish
    export = s("_export", 0.0)
    tune = s("_replay_due", 0.0)  # the self-tuning replays the tick's plans found due, within the tuning budget
    read = s("_parse", 0.0) + s("_report_problems", 0.0)
    fetch = s("_fetch", 0.0)
    plan = plan_and_apply - forecast - startups - s("_apply", 0.0) - export
    return {
        "read": read,
        "fetch": fetch,
        "fetch_source": source_seconds,
        "forecast": forecast,
        "plan": plan + startups,
        "apply": apply_,
        "export": export,
        "cluster_calls": cluster_seconds,
        "tune": tune,
        "other": total - read - fetch - plan_and_apply - s("_report_outage", 0.0) - tune - publish,
    }


def emit(kind: str, **data: Any) -> None:
    print(json.dumps({"kind": kind, **data}), flush=True)


def _median_seconds(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def anchors(fleet: SyntheticFleet, cfg: Config, n: int) -> dict[str, float]:
    """Per-Deployment reference costs on this machine, now: fit+predict, update+predict, reactive decision."""
    profile = cfg.profiles["default"]
    bins = profile.history_seconds // STEP
    w = next(w for w in fleet.workloads if w.shape == 0)  # a NASA-shaped Deployment
    first = (COLD_NOW // STEP) - bins
    train = TrafficSeries(fleet.values(w, first, bins), STEP, first * STEP)
    h = math.ceil(profile.horizon_seconds / STEP) + 1
    levels = [50, profile.quantile]

    def fit_predict() -> None:
        make_chain(profile.model).fit(train).predict(h, levels)

    fit = _median_seconds(fit_predict, 3)
    chain = make_chain(profile.model).fit(train)
    nxt = [TrafficSeries(fleet.values(w, first + bins + i, 1), STEP, (first + bins + i) * STEP) for i in range(200)]
    it: Iterator[TrafficSeries] = iter(nxt)

    def update_predict() -> None:
        chain.update(next(it))
        chain.predict(h, levels)

    update = _median_seconds(update_predict, 100)
    demand = {(x.namespace, x.name): x.mean_rate for x in fleet.workloads}
    caps = [(x.namespace, x.name, x.capacity) for x in fleet.workloads]

    def reactive() -> None:
        for ns, name, capacity in caps:
            min(max(math.ceil(demand[(ns, name)] / capacity), 1), 64)

    hpa = _median_seconds(reactive, 5) / n
    return {"fit_predict": fit, "update_predict": update, "reactive_decision": hpa}


# ---------------------------------------------------------------------------------------------- worker


def _tick(
    controller: Controller, clock: PhaseClock, source: SyntheticSource, cluster: RecordingCluster, now: int,
    label: str, n: int,
) -> TickReport:
    clock.reset()
    src0, cl0, counts0 = source.seconds, cluster.seconds, cluster.counts.copy()
    cpu0 = time.process_time()
    started = time.perf_counter()
    report = controller.tick(now)
    wall = time.perf_counter() - started
    cpu = time.process_time() - cpu0
    counts = cluster.counts.since(counts0)
    forecasts = sum(1 for w in report.workloads if w.forecast is not None)
    memory = getattr(controller, "_memory", {})
    emit(
        "tick", label=label, n=n, now=now, wall=wall, cpu=cpu,
        phases=phases(clock, wall, source.seconds - src0, cluster.seconds - cl0),
        calls=dict(clock.calls), writes=counts.__dict__, errors=len(report.errors),
        error_sample=list(report.errors[:3]), forecasts=forecasts, workloads=len(report.workloads),
        # self-tuning replays run in this tick, and Deployments with no replay yet (each is due one after its first
        # fit; they run a tuning budget's worth per tick, least recently tuned first)
        replays=sum(1 for m in memory.values() if m.tuning_tried == now),
        untuned=sum(1 for m in memory.values() if m.tuning_tried == -math.inf),
        rss=rss_bytes(), peak_rss=peak_rss_bytes(),
    )
    return report


def _repo_path(file: str) -> str:
    """``file`` relative to the repository when it is in it (the hotspot table names no machine's checkout)."""
    root = Path(__file__).resolve().parents[1]
    try:
        return str(Path(file).resolve().relative_to(root))
    except ValueError:
        return file


def _history_bytes(controller: Controller) -> int:
    memory = getattr(controller, "_memory", {})
    total = 0
    for m in memory.values():
        h = getattr(m, "history", None)
        if h is not None:
            total += h.values.nbytes
    return total


def worker(n: int, refit: bool, profile_top: int, replay_workers: int = 0) -> None:
    cfg = load_config()
    if replay_workers:
        cfg = replace(cfg, loop=replace(cfg.loop, replay_workers=replay_workers))
    fleet = SyntheticFleet(n)
    emit("start", n=n, rss=rss_bytes(), peak_rss=peak_rss_bytes(), replay_workers=replay_workers)
    emit("anchors", n=n, **anchors(fleet, cfg, n))
    source = SyntheticSource(fleet)
    every = max(1, n // 10)

    cold = [True]

    def progress(statuses: int) -> None:  # only during the cold tick: a print inside a timed tick costs time
        if cold[0] and statuses % every == 0:
            emit("progress", n=n, statuses=statuses, t=time.perf_counter(), rss=rss_bytes())

    cluster = RecordingCluster(fleet, on_status=progress)
    controller = Controller(cluster, source, lambda: cfg)
    clock, missing = instrument(controller)
    base = rss_bytes()
    emit("ready", n=n, rss=base, peak_rss=peak_rss_bytes(), missing_phase_methods=missing, t=time.perf_counter())
    _tick(controller, clock, source, cluster, COLD_NOW, "cold", n)
    cold[0] = False
    emit("memory", n=n, rss=rss_bytes(), base_rss=base, history_bytes=_history_bytes(controller))
    now = COLD_NOW
    for _ in range(STEADY_TICKS):
        previous, now = now, now + cfg.loop.interval_seconds
        crosses = now // STEP != previous // STEP
        started = time.perf_counter()
        _tick(controller, clock, source, cluster, now, "steady-bin" if crosses else "steady", n)
        if replay_workers:  # the workers replay between ticks: the ticks keep the loop's pace in real time
            time.sleep(max(0.0, cfg.loop.interval_seconds - (time.perf_counter() - started)))
    if profile_top:
        # One more bin, every forecaster updates: a steady tick like those above. Before the refit tick, not after
        # it: the tick after a refit tick fits what that tick's budget deferred, which no steady tick does.
        now = now + STEP
        profiler = cProfile.Profile()
        profiler.enable()
        controller.tick(now)
        profiler.disable()
        out = io.StringIO()
        stats = pstats.Stats(profiler, stream=out)
        rows = []
        for (file, line, func), (_, ncalls, tottime, cumtime, _) in stats.stats.items():  # type: ignore[attr-defined]
            rows.append({"where": f"{_repo_path(file)}:{line}({func})", "calls": ncalls,
                         "tottime": tottime, "cumtime": cumtime})
        rows.sort(key=lambda r: -r["tottime"])
        emit("profile", n=n, label="steady-bin", rows=rows[:profile_top])
    if refit:
        now = COLD_NOW + cfg.profiles["default"].refit_seconds
        _tick(controller, clock, source, cluster, now, "refit", n)
    emit("done", n=n, rss=rss_bytes(), peak_rss=peak_rss_bytes(), history_bytes=_history_bytes(controller))
    controller.close()  # its replay workers, if any


# ---------------------------------------------------------------------------------------------- parent


def run_worker(n: int, cap: float, refit: bool, profile_top: int,
               replay_workers: int = 0) -> tuple[list[dict[str, Any]], bool]:
    """Run one fleet size in a fresh interpreter; returns its records and whether it hit the cap."""
    cmd = [sys.executable, "-m", "benchmarks.fleet", "--worker", str(n), "--profile-top", str(profile_top),
           "--replay-workers", str(replay_workers)]
    if refit:
        cmd.append("--refit")
    records: list[dict[str, Any]] = []
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    try:
        out, _ = proc.communicate(timeout=cap)
        capped = False
    except subprocess.TimeoutExpired:
        proc.kill()  # the child we started, by its own handle
        out, _ = proc.communicate()
        capped = True
    for line in out.splitlines():
        if line.startswith("{"):
            records.append(json.loads(line))
    if proc.returncode not in (0, None) and not capped:
        raise RuntimeError(f"fleet worker for N={n} failed with exit code {proc.returncode}")
    records.append({"kind": "wall", "n": n, "seconds": time.perf_counter() - started, "capped": capped})
    return records, capped


def promql_client_costs() -> dict[str, Any]:
    """Client-side cost of the Prometheus path: query rendering and answer parsing, with canned answers."""
    import httpx

    from autoscaler import promql
    from autoscaler.adapters.prometheus import PrometheusSource

    template = promql.DEFAULT_QUERIES["arrival_rate"]
    namespaces = [f"team-{i:02d}" for i in range(20)]
    render = _median_seconds(
        lambda: promql.render(template, namespaces=promql.namespace_regex(namespaces), window="1m", resolution="1m"),
        200,
    )
    cache: dict[tuple[str, str, int], bytes] = {}

    def answer(deployments: int) -> Callable[[httpx.Request], httpx.Response]:
        def handler(request: httpx.Request) -> httpx.Response:
            form = dict(httpx.QueryParams(request.content.decode()))
            key = (form["start"], form["end"], deployments)
            if key not in cache:
                start, end, step = float(form["start"]), float(form["end"]), float(form["step"])
                ts = [start + i * step for i in range(round((end - start) / step) + 1)]
                result = [
                    {
                        "metric": {"namespace": namespaces[d % 20], "deployment": f"llm-{d:05d}"},
                        "values": [[t, f"{1.0 + (d + i) % 97 / 10:.6g}"] for i, t in enumerate(ts)],
                    }
                    for d in range(deployments)
                ]
                body = {"status": "success", "data": {"resultType": "matrix", "result": result}}
                cache[key] = json.dumps(body).encode()
            return httpx.Response(200, content=cache[key], headers={"content-type": "application/json"})

        return handler

    end = (COLD_NOW // STEP) * STEP
    out: dict[str, Any] = {"render": render}
    for label, deployments, bins in (("cold", 50, 14 * DAY // STEP), ("steady", 1000, 3)):
        source = PrometheusSource("http://prometheus.invalid:9090", transport=httpx.MockTransport(answer(deployments)))
        start = end - bins * STEP

        def fetch(source: PrometheusSource = source, start: int = start, deployments: int = deployments) -> None:
            got = source.fleet_history("arrival_rate", namespaces, start, end, STEP)
            assert len(got) == deployments

        fetch()  # fills the canned answers; the timed calls only parse them
        seconds = _median_seconds(fetch, 3)
        tracemalloc.start()
        fetch()
        out[f"{label}_peak_bytes"] = float(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
        out[f"{label}_seconds"] = seconds
        out[f"{label}_deployments"] = deployments
        out[f"{label}_points"] = deployments * bins
        source.close()
    return out


def kube_client_costs(deployments: int = 50) -> dict[str, float]:
    """Client-side cost of the Kubernetes path: ``KubeCluster`` through the official client over real HTTP.

    The server is the project's recording fake API server (``tests/kube/fakeapi.py``) in this process, so
    the figures include its (GIL-sharing) handling but no network or API-server latency.
    """
    from kubernetes import client

    from autoscaler.adapters.kube import KubeCluster
    from autoscaler.ports import StatusObject
    from tests.kube.conftest import deployment
    from tests.kube.fakeapi import FakeKubeAPI

    api = FakeKubeAPI()
    api.start()
    try:
        uids = [api.add("deployments", deployment("team-00", f"llm-{i:05d}"))["metadata"]["uid"]
                for i in range(deployments)]
        last: list[StatusObject | None] = [None] * deployments
        cfg = client.Configuration()
        cfg.host = api.url
        status: dict[str, Any] = {
            "mode": "scale", "desiredReplicas": 3, "currentReplicas": 3, "readyReplicas": 3, "leadSeconds": 180.0,
            "forecast": {"model": "default", "mean": 12.3, "bands": {"p50": 12.3, "p90": 15.1}},
            "steps": [{"name": "forecast", "replicas": 3, "detail": "x" * 200}] * 6,
            "track": [{"t": 1, "actual": 1.0, "at": 2, "mean": 1.0, "upper": 2.0}] * 20,
        }
        writes, lists = [], []
        with client.ApiClient(cfg) as api_client:
            cluster = KubeCluster(api_client, instance="fleet-benchmark")
            for rep in range(3):
                started = time.perf_counter()
                for i in range(deployments):
                    last[i] = cluster.write_status("team-00", f"llm-{i:05d}", uids[i],
                                                   {**status, "desiredReplicas": rep * 100 + i}, last[i]).stored
                writes.append((time.perf_counter() - started) / deployments)
                started = time.perf_counter()
                listed = cluster.list_workloads()
                lists.append((time.perf_counter() - started) / len(listed))
        return {"write_status": statistics.median(writes), "list_per_deployment": statistics.median(lists),
                "deployments": float(deployments)}
    finally:
        api.stop()


def _by(records: list[dict[str, Any]], kind: str, label: str | None = None) -> list[dict[str, Any]]:
    return [r for r in records if r["kind"] == kind and (label is None or r.get("label") == label)]


def _fmt_s(x: float) -> str:
    if x >= 100:
        return f"{x:,.0f} s"
    return f"{x:.3g} s" if x >= 0.1 else f"{x * 1000:.3g} ms"


def _mib(b: float) -> str:
    return f"{b / 2**20:,.0f} MiB"


@dataclass
class SizeResult:
    n: int
    records: list[dict[str, Any]]
    capped: bool

    def one(self, kind: str) -> dict[str, Any] | None:
        rows = _by(self.records, kind)
        return rows[-1] if rows else None

    def ticks(self, label: str) -> list[dict[str, Any]]:
        return _by(self.records, "tick", label)


def _tick_cell(ticks: list[dict[str, Any]], anchor: float, anchor_name: str, n: int) -> str:
    """Median wall (and CPU) of these ticks, and wall per Deployment as a multiple of the anchor."""
    if not ticks:
        return "-"
    t = sorted(ticks, key=lambda x: x["wall"])[(len(ticks) - 1) // 2]
    return f"{_fmt_s(t['wall'])} (CPU {_fmt_s(t['cpu'])}; {t['wall'] / n / anchor:.2f}x {anchor_name})"


def _tune_cell(tick: dict[str, Any]) -> str:
    """The tick's self-tuning replays: seconds and count ("-" in a run saved before they were timed apart)."""
    if "tune" not in tick["phases"]:
        return "-"
    return f"{_fmt_s(tick['phases']['tune'])} ({tick.get('replays', 0):,})"


def summarise(results: list[SizeResult], prom: dict[str, Any] | None, date: str) -> tuple[str, list[str]]:
    lines: list[str] = []
    verdicts: list[str] = []
    kube = (prom or {}).get("kube")
    lines += [
        "## Fleet tick (controller at fleet scale)",
        "",
        f"Command: `{COMMAND}` · {date} · {machine()} · 2 cores shared with other jobs: wall-clock seconds are",
        "inflated by contention, so CPU seconds of the tick are given too, and ratios use anchors measured in the",
        "same process just before the ticks.",
        "",
        "Setup: the real `Controller` with the default configuration (1-minute step, 14 days of history, default",
        "model chain, daily refit, 30 s interval) driven through the `Cluster`/`MetricsSource` ports by the",
        "in-process fleet of `benchmarks/fleet_fakes.py`: each Deployment's traffic is a real trace (NASA-HTTP 40 %,",
        "ServeGen m_small 25 %, m_mid 25 %, Alibaba LoRA 10 %) rescaled to its own mean (0.5-50 req/s), phase-shifted",
        "and with its own noise. **Prometheus and the API server are not in these ticks** (a real Prometheus",
        "answering 1,000 x 20,160 points would measure itself); their client-side costs are measured below.",
        "",
        "Anchors per Deployment: *fit* = one default-chain fit + predict on 14 days; *update* = one chain update of",
        "one bin + predict; *HPA* = one reactive decision `ceil(demand / capacity)` clamped to min/max.",
        "Ticks: *cold* = first tick (fetch 14 days, first fit of every model); *same bin* = 30 s later, no new",
        "1-minute bin (predict only); *new bin* = every model absorbs one bin (`update`) then predicts; *5-min* = the",
        "tick that also re-reads pod start-ups; *refit* = one day on, when every model (all fitted in the cold",
        "tick) is due for its daily refit at once. Median of 5 for same/new bin. The steady ticks also run the",
        "self-tuning replays then due, within their budget (*tune* below), and the first of them the fits the cold",
        "tick's budget deferred (see where the time goes).",
        "",
        "| N | cold tick | same-bin tick | new-bin tick | 5-min tick | daily refit tick | peak RSS "
        "| RSS per Deployment |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        anchors_ = r.one("anchors") or {}
        fit = anchors_.get("fit_predict", math.nan)
        upd = anchors_.get("update_predict", math.nan)
        cells = []
        if r.ticks("cold"):
            cells.append(_tick_cell(r.ticks("cold"), fit, "fit", r.n))
        else:
            prog = _by(r.records, "progress")
            ready = r.one("ready")
            if prog and ready:
                done, at = prog[-1]["statuses"], prog[-1]["t"] - ready["t"]
                cells.append(f"capped: {done:,}/{r.n:,} planned after {_fmt_s(at)}; whole tick "
                             f"~{_fmt_s(at * r.n / done)} *extrapolated*")
            else:
                cells.append("capped before any Deployment was planned")
        cells.append(_tick_cell(r.ticks("steady"), upd, "update", r.n))
        cells.append(_tick_cell(r.ticks("steady-bin"), upd, "update", r.n))
        fivemin = [t for t in r.ticks("steady") + r.ticks("steady-bin") if t["writes"]["pod_reads"] > 0]
        cells.append(_tick_cell(fivemin, upd, "update", r.n))
        cells.append(_tick_cell(r.ticks("refit"), fit, "fit", r.n) if r.ticks("refit") else "not run")
        done_rec = r.one("done")
        mem = r.one("memory")
        peak = max((max(x.get("peak_rss", 0), x.get("rss", 0)) for x in r.records), default=0)
        cells.append(_mib(peak) + ("" if done_rec is not None else " (when capped)"))
        if mem:
            cells.append(f"{(mem['rss'] - mem['base_rss']) / r.n / 1024:.0f} KiB "
                         f"({mem['history_bytes'] / r.n / 1024:.0f} KiB history)")
        else:
            prog = _by(r.records, "progress")
            ready = r.one("ready")
            cells.append(f"{(prog[-1]['rss'] - ready['rss']) / r.n / 1024:.0f} KiB (capped, mid-tick)"
                         if prog and ready else "-")
        lines.append(f"| {r.n:,} | " + " | ".join(cells) + " |")
    lines.append("")
    lines += ["Phase shares of the median tick of each kind (wall seconds; *fetch* includes splicing into the cached",
              "history, in brackets the synthetic source alone; *plan* includes the start-up read; *apply* includes",
              "serialising every status to JSON as the real adapter does; *export* = the controller's own metrics;",
              "*tune* = the self-tuning replays run once the plans are written, within the tuning budget, and how "
              "many):",
              "",
              "| N | tick | wall | read | fetch (source) | forecast | plan | apply | export | tune (replays) | other |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        for label in ("cold", "steady", "steady-bin", "refit"):
            ticks = r.ticks(label)
            if not ticks:
                continue
            t = sorted(ticks, key=lambda x: x["wall"])[(len(ticks) - 1) // 2]
            p = t["phases"]
            lines.append(
                f"| {r.n:,} | {label} | {_fmt_s(t['wall'])} | {_fmt_s(p['read'])} | {_fmt_s(p['fetch'])} "
                f"({_fmt_s(p['fetch_source'])}) | {_fmt_s(p['forecast'])} | {_fmt_s(p['plan'])} | {_fmt_s(p['apply'])} "
                f"| {_fmt_s(p['export'])} | {_tune_cell(t)} | {_fmt_s(p['other'])} |"
            )
    lines.append("")
    lines += ["Kubernetes calls per tick (most of any tick of that kind; the fake answers at once):", "",
              "| N | tick | pod reads | scales | status writes | status KiB | Events |",
              "|---|---|---|---|---|---|---|"]
    for r in results:
        for label in ("cold", "steady", "steady-bin", "refit"):
            ticks = r.ticks(label)
            if not ticks:
                continue
            w = max(ticks, key=lambda x: x["writes"]["statuses"])["writes"]
            lines.append(f"| {r.n:,} | {label} | {w['pod_reads']:,} | {w['scales']:,} | {w['statuses']:,} | "
                         f"{w['status_bytes'] / 1024:,.0f} | {w['events']:,} |")
    lines.append("")
    for r in results:
        a = r.one("anchors")
        cross = [t["wall"] for t in r.ticks("steady-bin")]
        if a:
            line = (f"- N={r.n:,}: anchors fit {_fmt_s(a['fit_predict'])}, update {_fmt_s(a['update_predict'])}, "
                    f"HPA decision {a['reactive_decision'] * 1e6:.2f} µs")
            if cross:
                per = statistics.median(cross) / r.n
                line += (f"; a new-bin tick costs {per * 1000:.2f} ms per Deployment = "
                         f"{per / a['reactive_decision']:,.0f}x a reactive HPA decision")
            lines.append(line + ".")
    lines.append("")
    if kube:
        lines += [
            "Kubernetes client path (not in the ticks above): `KubeCluster` through the official client over real",
            "HTTP to the project's fake API server (`tests/kube/fakeapi.py`, same process, so no network or API",
            f"server latency): one status write (its ConfigMap replaced) {_fmt_s(kube['write_status'])}, listing "
            f"{_fmt_s(kube['list_per_deployment'])} per Deployment. The loop rewrites the status of almost every",
            "Deployment on every tick (the status embeds the forecast, which moves every tick), so *estimated*",
            "tick = in-process tick + status writes x write cost + N x list cost:",
            "",
        ]
        for r in results:
            cross = r.ticks("steady-bin")
            if cross:
                t = sorted(cross, key=lambda x: x["wall"])[(len(cross) - 1) // 2]
                est = t["wall"] + t["writes"]["statuses"] * kube["write_status"] + r.n * kube["list_per_deployment"]
                lines.append(f"- N={r.n:,}: new-bin tick {_fmt_s(t['wall'])} in-process -> ~{_fmt_s(est)} "
                             "*estimated* with the Kubernetes client;")
        lines.append("")
    if prom:
        per_point = prom["cold_seconds"] / prom["cold_points"]
        per_byte = prom["cold_peak_bytes"] / prom["cold_points"]
        lines += [
            "Prometheus client path (not in the ticks above; canned answers through `httpx.MockTransport`, so only",
            "our rendering and parsing in `PrometheusSource.fleet_history` are timed):",
            "",
            f"- rendering the fleet query for 20 namespaces: {prom['render'] * 1e6:.0f} µs;",
            f"- parsing a 14-day answer: {prom['cold_deployments']:.0f} Deployments x 20,160 points in "
            f"{_fmt_s(prom['cold_seconds'])} = {per_point * 1e6:.2f} µs per point; at N=1,000 that is "
            f"~{_fmt_s(per_point * 1000 * 20160)} *extrapolated* on top of the cold tick (Prometheus's own time not "
            "included);",
            f"- memory allocated while parsing it (tracemalloc peak): {_mib(prom['cold_peak_bytes'])} = {per_byte:.0f} "
            f"bytes per point; `run` asks in requests of {FLEET_POINTS_PER_REQUEST} evaluation times "
            f"(`autoscaler/commands/run.py`), so one request of 1,000 Deployments peaks near "
            f"~{_mib(per_byte * 1000 * FLEET_POINTS_PER_REQUEST)} *extrapolated* (a single 14-day request would be "
            f"~{_mib(per_byte * 1000 * 20160)});",
            f"- parsing a steady answer (1,000 Deployments x 3 bins): {_fmt_s(prom['steady_seconds'])}.",
            "",
        ]
    target = next((r for r in results if r.n == TARGET_N), None)
    if target is not None and target.ticks("steady-bin"):
        t = sorted(target.ticks("steady-bin"), key=lambda x: x["wall"])[(len(target.ticks("steady-bin")) - 1) // 2]
        prof_rows = (target.one("profile") or {}).get("rows", [])
        clean = next((r for r in prof_rows if "outage_mask" in r["where"]), None)
        findings = [
            f"- In a new-bin tick at N=1,000 forecasting is {t['phases']['forecast'] / t['wall']:.0%} of the wall time"
            + (f"; under cProfile the chain's update-time cleaning (`models/clean.py` `outage_mask`, pandas rolling "
               f"median over the last 6 hours, run for every one-bin update) is {_fmt_s(clean['cumtime'])} "
               "cumulative of it." if clean else "."),
            *_tune_findings(target),
            f"- Status writes in that tick at N=1,000: {t['writes']['statuses']:,}. A status is written when the "
            "decision changes or every 5 minutes; in these first ticks the fleet is still warming up (models are "
            "being fitted, so decisions move), which is why the count is high here.",
        ]
        for label, what in (("cold", "the first tick starts fitting every model"),
                            ("refit", "every model fitted in the first ticks falls due for its daily refit together")):
            for tk in target.ticks(label):
                findings.append(f"- {label} tick at N=1,000: {_fmt_s(tk['wall'])}: {what}, but fits stop being "
                                "started once the tick's fitting budget (a third of the loop interval, at least 5 s) "
                                "is spent; the rest are fitted in the next ticks, stalest first, and until then a "
                                "due model keeps updating (a model-less Deployment holds its replicas) "
                                f"({tk['phases']['forecast'] / tk['wall']:.0%} of the tick is forecasting).")
        lines += ["Where the time goes:", "", *findings, ""]
    if target is not None:
        ticks = target.ticks("steady") + target.ticks("steady-bin")
        peak = max((max(x.get("peak_rss", 0), x.get("rss", 0)) for x in target.records), default=0)
        if ticks:
            worst = max(t["wall"] for t in ticks)
            verdicts.append(f"{'PASS' if worst < TARGET_TICK_SECONDS else 'FAIL'}: steady tick at N=1,000 with "
                            f"cached models, in-process, worst of {len(ticks)}: {_fmt_s(worst)} (target < 30 s)")
        for label, what in (("cold", "cold tick (fitting within the tick's budget)"),
                            ("refit", "daily refit tick (every model due at once; fitting within the budget)")):
            for t in target.ticks(label):
                verdicts.append(f"{'PASS' if t['wall'] < TARGET_TICK_SECONDS else 'FAIL'}: {what} at N=1,000: "
                                f"{_fmt_s(t['wall'])}")
        if peak:
            done = target.one("done") is not None
            verdicts.append(f"{'PASS' if peak < TARGET_RSS_BYTES else 'FAIL'}: peak RSS at N=1,000, in-process: "
                            f"{_mib(peak)} (target < 1 GiB){'' if done else ' - run capped, so far'}")
        if prom:
            parse_peak = prom["cold_peak_bytes"] / prom["cold_points"] * 1000 * FLEET_POINTS_PER_REQUEST
            verdicts.append(f"{'PASS' if parse_peak + peak < TARGET_RSS_BYTES else 'FAIL'} (*extrapolated*): memory "
                            f"of a cold start through `PrometheusSource` at N=1,000: ~{_mib(parse_peak)} for parsing "
                            f"one {FLEET_POINTS_PER_REQUEST}-point fleet answer, on top of the above")
    if verdicts:
        lines += ["Verdicts:", ""] + [f"- {v}" for v in verdicts] + [""]
    profiled = [(r.n, r.one("profile")) for r in results if r.one("profile")]
    if profiled:
        n, prof = max(profiled, key=lambda x: x[0] if x[0] <= TARGET_N else -x[0])
        assert prof is not None
        lines += [f"Hotspots of one new-bin tick at N={n:,} (cProfile, top by own time):", "",
                  "| function | calls | own | cumulative |", "|---|---|---|---|"]
        for row in [r for r in prof["rows"] if not r["where"].startswith("benchmarks/")][:12]:
            where = row["where"].split("site-packages/")[-1].split("/lib/python3.11/")[-1]
            lines.append(f"| `{where}` | {row['calls']:,} | {_fmt_s(row['tottime'])} | {_fmt_s(row['cumtime'])} |")
        lines.append("")
    return "\n".join(lines), verdicts


def _tune_findings(result: SizeResult) -> list[str]:
    """What the steady ticks spent besides their own work: fits the cold tick's budget deferred, and self-tuning
    replays (empty for a run saved before the replays were timed apart)."""
    steady = [t for t in result.ticks("steady") + result.ticks("steady-bin") if "tune" in t["phases"]]
    if not steady:
        return []
    fitting = [t for t in steady if t["phases"]["forecast"] > DEFERRED_FIT_SECONDS]
    rest = [t for t in steady if t["phases"]["forecast"] <= DEFERRED_FIT_SECONDS]
    lines = []
    if fitting:
        lines.append(f"- The first {len(fitting)} of the {len(steady)} steady ticks at N={result.n:,} fit what the "
                     "cold tick's fitting budget deferred (forecasting "
                     f"{_fmt_s(statistics.median(t['phases']['forecast'] for t in fitting))} of "
                     f"{_fmt_s(statistics.median(t['wall'] for t in fitting))}, median): the budget spreads the "
                     "fleet's first fits over the ticks after the cold one.")
    if not rest:
        return lines
    workers = int((result.one("start") or {}).get("replay_workers", 0))
    pace = sum(t.get("replays", 0) for t in rest) / len(rest)  # replays a tick, once the first fits are made
    untuned = steady[-1].get("untuned", 0)
    interval_seconds = load_config().loop.interval_seconds  # what the ticks ran with (the default config)
    eta = (f"the fleet's first tunings take about {untuned / pace:,.0f} more ticks "
           f"(~{untuned / pace * interval_seconds / 3600:.1f} h)" if pace > 0 and untuned else "")
    if workers:
        lines.append(
            f"- The other {len(rest)} (median), paced at the loop interval in real time with `loop.replay_workers: "
            f"{workers}`: {_fmt_s(statistics.median(t['wall'] for t in rest))} a tick, of which "
            f"{_fmt_s(statistics.median(t['phases']['tune'] for t in rest))} handing replays to the workers and taking "
            f"back the finished ones; the workers replay between ticks, {pace:.1f} replays came back a tick "
            f"({sum(t.get('replays', 0) for t in rest):,} in these ticks; {untuned:,} Deployments still without one "
            "after the last)" + (f". At that pace {eta}." if eta else "."))
        return lines
    replays = sum(t.get("replays", 0) for t in steady)
    per = sum(t["phases"]["tune"] for t in steady) / replays if replays else math.nan
    own = statistics.median(t["wall"] - t["phases"]["tune"] for t in rest)
    tune = statistics.median(t["phases"]["tune"] for t in rest)
    budget = interval_seconds * TUNE_BUDGET_SHARE
    lines.append(
        f"- The other {len(rest)} (median): {_fmt_s(own)} of the tick's own work and {_fmt_s(tune)} of "
        f"self-tuning replays ({replays:,} replays in these ticks, {_fmt_s(per)} each; "
        f"{untuned:,} Deployments still without one after the last). Every Deployment's first replay falls due "
        "once its model is fitted; they run once the plans are written, one a tick whatever it costs and more "
        f"only within the tuning budget ({_fmt_s(budget)}, a tenth of the loop interval)"
        + (f", so a first replay, which also replays up to a week of the history before it, overruns the budget "
           f"by {per / budget:.1f}x" if per > budget else "")
        + (f". At {pace:.1f} a tick {eta}, while those Deployments run the start point (the HPA's own point started "
           "early)." if eta else "."))
    return lines


def parse_caps(values: list[str]) -> dict[int, float]:
    caps: dict[int, float] = dict(DEFAULT_CAPS)
    for v in values:
        n, _, seconds = v.partition("=")
        try:
            caps[int(n)] = float(seconds)
        except ValueError:
            raise SystemExit(f"--cap wants N=SECONDS, got {v!r}") from None
    return caps


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--sizes", default=",".join(str(s) for s in SIZES), help="fleet sizes, comma-separated")
    parser.add_argument("--cap", action="append", default=[], metavar="N=SECONDS", help="wall-clock cap per size")
    parser.add_argument("--refit-max", type=int, default=1000, help="run the daily refit tick up to this size")
    parser.add_argument("--profile-top", type=int, default=15, help="hotspot rows from a profiled steady tick")
    parser.add_argument("--no-write", action="store_true", help="print only; do not touch docs/BENCHMARKS.md")
    parser.add_argument("--write", action="store_true", help="rewrite the page even without N=1000")
    parser.add_argument("--json", metavar="PATH", help="also save every raw record as JSON")
    parser.add_argument("--from-json", metavar="PATH", action="append",
                        help="re-render runs saved with --json (repeatable; later files win per size; no measuring)")
    parser.add_argument("--note", help="with --from-json: a paragraph appended to the section (e.g. code versions)")
    parser.add_argument("--replay-workers", type=int, default=0, metavar="N",
                        help="the controller's loop.replay_workers (default 0, the default config's); other values "
                        "print only")
    parser.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--refit", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--worker-prometheus", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker_prometheus:
        emit("prometheus", **promql_client_costs(), kube=kube_client_costs())
        return 0
    if args.worker is not None:
        worker(args.worker, args.refit, args.profile_top, args.replay_workers)
        return 0
    if args.from_json:
        by_size: dict[int, SizeResult] = {}
        dates: list[str] = []
        prom_saved: dict[str, Any] | None = None
        for path in args.from_json:  # a later file's result for a size replaces an earlier one
            with open(path) as f:
                saved = json.load(f)
            dates.append(saved["date"] + " (N=" + ", ".join(f"{r['n']:,}" for r in saved["results"]) + ")")
            prom_saved = saved["prometheus"]
            for r in saved["results"]:
                by_size[r["n"]] = SizeResult(r["n"], r["records"], r["capped"])
        loaded = [by_size[n] for n in sorted(by_size)]
        text, _ = summarise(loaded, prom_saved, "; ".join(dates))
        if args.note:
            text += "\n\nNote on this page: " + args.note + "\n"
        print(text)
        if not args.no_write and (args.write or any(r.n == TARGET_N for r in loaded)):
            update_section("fleet", text)
            print("wrote the 'fleet' section of docs/BENCHMARKS.md", file=sys.stderr)
        return 0
    try:
        sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    except ValueError:
        parser.error(f"--sizes wants integers, got {args.sizes!r}")
    caps = parse_caps(args.cap)
    require_traces(TRACES_DIR, COMMAND)  # the fleet's traffic shapes are real traces (--from-json needs none)
    date = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    results: list[SizeResult] = []
    for n in sizes:
        print(f"N={n}: running (cap {caps.get(n, 1800):.0f} s) ...", file=sys.stderr, flush=True)
        records, capped = run_worker(n, caps.get(n, 1800), n <= args.refit_max, args.profile_top,
                                     args.replay_workers)
        results.append(SizeResult(n, records, capped))
        for rec in records:
            if rec["kind"] == "tick":
                print(f"  {rec['label']:<10} wall {rec['wall']:8.3f} s  rss {_mib(rec['rss'])}", file=sys.stderr)
        print(f"  {'capped' if capped else 'done'} after {records[-1]['seconds']:.0f} s", file=sys.stderr)
    done = subprocess.run([sys.executable, "-m", "benchmarks.fleet", "--worker-prometheus"], capture_output=True,
                          text=True, check=True, timeout=600)
    prom = next(json.loads(x) for x in done.stdout.splitlines() if x.startswith('{"kind": "prometheus"'))
    if args.json:  # saved before summarising, so a run is never lost; --from-json re-renders it
        with open(args.json, "w") as f:
            json.dump({"date": date, "machine": machine(), "results": [r.__dict__ for r in results],
                       "prometheus": prom}, f)
    text, _ = summarise(results, prom, date)
    print(text)
    if not args.no_write and not args.replay_workers and (args.write or TARGET_N in sizes):
        update_section("fleet", text)
        print("wrote the 'fleet' section of docs/BENCHMARKS.md", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
