"""Cost ceilings and training gangs in the simulator: the controller's money stage, replayed on trace time.

Why it exists: a ceiling in dollars per hour and training gangs sharing the GPUs change what every policy can
hold, and an operator wants to see, before setting a ceiling, how much inference it would cut and how long
training would wait. The decisions are the controller's own: at every decision the ledger calls
``autoscaler.engine.money.money_step``, the step the controller's money stage calls each tick, over the whole simulated
cluster (the one inference Deployment + the gangs), then applies it. This module only keeps what a cluster would
(a gang submitted, its nodes coming once it is reserved, it running once started, it ending) and records what
happened; it decides nothing itself.

The rules (``simulate --help`` and docs/BENCHMARKS.md say the same):

* **Ceiling** (``--ceiling-usd-per-hour``): on the whole simulated cluster. At every decision of a policy (the
  predictive planner every ``--decision-interval``, the HPA every 15 s sync, the oracle every tick) the cost
  of what it would hold (replica GPUs + the GPUs of gangs reserved or starting, at ``--gpu-hour-price``) is
  held under the ceiling by ``enforce_ceilings``; with ``MoneyConfig.whole_nodes`` (the simulate-money benchmark)
  it is billed as Karpenter bills and the controller prices it, in whole nodes: the replicas' GPUs rounded up to
  ``--gpus-per-node`` nodes, each gang on whole nodes of its own (``ceil(gpus / per node)``), a node at
  ``per node x --gpu-hour-price``; without it, per GPU (the ``simulate`` command). Replicas beyond it are not
  asked for, never below
  ``min_replicas``. Between decisions nothing is added, so the held cost can only fall. The simulated
  Deployment is a ``production`` workload unless ``--inference-priority`` says otherwise; the predictive
  policy's warm-pool replicas are passed as such (they rank after admitted training, as in the controller).
* **Gangs** (``--gang gpus=16,at=48h,hours=4,window=24h[,priority=batch][,name=x]``): submitted ``at`` after
  the trace's start as the controller sees a held Kueue Workload, with ``start-after = at``, ``deadline = at +
  window`` and its run time. The money step places its *start* in that window (the controller's placement,
  ``engine.money.place_scheduled``: recomputed every 15 minutes and after a refit, frozen one node start-up before
  the start; capacity = the GPUs the ceiling buys), counts its GPUs from one node start-up before the start, and
  reserves it whole or not at all. A reserved gang's nodes are provisioned like any other (``nodes_for`` whole
  nodes, node start-up); at its start (the step's ``activate``) it is started and runs, once its nodes are up, for
  ``hours``; its GPUs are paid from the reservation to the end of the run (they count in ``gpu_hours`` and
  ``cost_usd``). *Where* it is placed depends on the policy: the predictive policy places it in the trough of its
  own (median) forecast, the oracle with perfect foresight of its own schedule, the HPA has no forecast and places
  it at the earliest start. A gang whose placement does not fit when it comes to count is retried at every
  decision after (first fit). Under the ceiling the keep order decides who yields: with the default order a
  production Deployment outranks every gang, so a running gang is *preempted* (all its GPUs released; the run is
  lost, there is no checkpoint) when inference needs its budget (a reserved one not started yet only gives its
  budget back); it is placed again and may restart while its window is open. A gang that has not started one node
  start-up after its window closed (the controller's grace for an activation at the deadline) is *missed*.

Scores (``PolicyResult``; always present, 0 without a ceiling or gangs):

* ``ceiling_breaches``: ticks where the held cost (replicas + reserved gangs) exceeded the ceiling. It can only
  be non-zero when ``min_replicas`` alone cost more than the ceiling (``enforce_ceilings`` never cuts below
  the minimum); the run's notes then say so;
* ``gangs_split``: ticks where a gang held some but not all of its GPUs (0 by construction; counted from the
  per-node GPU ledger so a regression would show);
* ``gang_wait_hours``: over all gangs, the time spent submitted but not holding GPUs, from ``at`` until the
  run that completes is reserved, the window closes (missed), or the trace ends;
* ``ceiling_unserved_fraction``: the demand left unserved *because of the ceiling*, over all demand:
  ``sum_t min(max(0, d_t - R_t c), max(0, min(d_t, W_t c) - A_t c)) / sum_t d_t`` where ``d`` is demand (req/s),
  ``c`` the capacity of one replica, ``R`` the Ready replicas, ``A`` the replicas held (what the ceiling
  allowed) and ``W`` the policy's standing decision before the ceiling (its last decision, held between
  decisions). In words: of the requests that found no Ready replica, those that lay between the capacity the
  ceiling allowed and the capacity the policy asked for. It is part of ``unserved_fraction``;
* ``gangs_missed`` and ``gangs_preempted``: gangs whose window closed before a run started, and runs lost.

The gangs are placed around the one Deployment's forecast (``GangPlacer.inference_gpus_ahead``, the keeper's
``gpu_points`` the controller asks too), whatever their pool: they share the ceiling with it. Node pools are one pool
of ``--gpus-per-node`` nodes; gang nodes are whole nodes of the same shape that no replica shares (training pods
usually take whole nodes). ``tests/engine/test_sameness.py`` holds placements, reservations and preemptions equal
to the controller's.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from autoscaler.domain.annotations import MAX_PRIORITY, PRIORITY_TIERS
from autoscaler.domain.cost import Ceilings, GpuPrices, WorkloadAsk, fits_ceilings
from autoscaler.domain.gangs import Gang, format_gpus
from autoscaler.domain.nodes import nodes_for
from autoscaler.engine.money import MoneyPlan, MoneySnapshot, MoneyState, money_step
from autoscaler.traces import parse_duration

SIM_NAMESPACE = "simulated"
INFERENCE_KEY = f"{SIM_NAMESPACE}/inference"
DEFAULT_GANG_PRIORITY = PRIORITY_TIERS["standard"]
DEFAULT_INFERENCE_PRIORITY = PRIORITY_TIERS["production"]
GANG_KEYS = ("gpus", "at", "hours", "duration", "window", "priority", "name")
INFERENCE_POOL = "inference"
GANG_POOL = "gang/"
_MICRO = 1_000_000


def _micro(dollars: float) -> int:
    """Micro-dollars, rounded exactly as ``domain.cost`` rounds a unit's price (so both agree on "fits")."""
    return round(dollars * _MICRO)


def parse_priority(value: Any, what: str) -> int:
    """A tier name (``production``) or an integer 0..1000; ``ValueError`` naming ``what``."""
    if isinstance(value, str) and value.strip().lower() in PRIORITY_TIERS:
        return PRIORITY_TIERS[value.strip().lower()]
    try:
        number = int(str(value).strip()) if not isinstance(value, bool) else -1
    except ValueError:
        number = -1
    if not 0 <= number <= MAX_PRIORITY:
        raise ValueError(f"{what}: expected 0..{MAX_PRIORITY} or one of {', '.join(PRIORITY_TIERS)}, got {value!r}")
    return number


def gang_duration(value: Any, what: str) -> int:
    """A gang's ``at``/``window``/``duration``: a duration *with its unit* (``48h``, ``90m``, ``3600s``) or zero.

    A bare non-zero number is refused: ``hours=4`` means hours, so ``at=48`` read as seconds (as plain
    durations elsewhere) would silently put the gang 48 seconds in.
    """
    if not isinstance(value, bool) and isinstance(value, int | float | str):
        text = str(value).strip()
        try:
            number = float(text)
        except ValueError:
            number = None
        if number is not None and number != 0:
            raise ValueError(f"{what}: {text} has no unit; write {what}={text}h (or {text}m, {text}s)")
    return duration_or_zero(value, what)


def duration_or_zero(value: Any, what: str) -> int:
    """``'48h'``, ``'90m'``, plain seconds, or zero (``0``, ``'0h'``) -> seconds; ``ValueError`` naming ``what``."""
    if isinstance(value, bool):
        raise ValueError(f"{what}: expected a duration like 24h, got {value!r}")
    text = str(value).strip()
    try:
        return parse_duration(text)
    except ValueError:
        pass
    try:
        if float(text.rstrip("smhdw") or "x") == 0:
            return 0
    except ValueError:
        pass
    raise ValueError(f"{what}: expected a duration like 24h, 90m or seconds >= 0, got {value!r}")


@dataclass(frozen=True)
class GangSpec:
    """One training gang of the scenario: ``gpus`` asked ``at_seconds`` into the trace, running ``run_seconds``,
    allowed to be reserved up to ``window_seconds`` later."""

    gpus: int
    at_seconds: int
    run_seconds: int
    window_seconds: int = 0
    priority: int = DEFAULT_GANG_PRIORITY
    name: str = ""

    def __post_init__(self) -> None:
        if isinstance(self.gpus, bool) or not isinstance(self.gpus, int) or self.gpus < 1:
            raise ValueError(f"gpus: expected an integer >= 1, got {self.gpus!r}")
        if self.at_seconds < 0:
            raise ValueError(f"at: must be >= 0, got {self.at_seconds}")
        if self.run_seconds <= 0:
            raise ValueError(f"hours: must be > 0, got {self.run_seconds / 3600:g}")
        if self.window_seconds < 0:
            raise ValueError(f"window: must be >= 0, got {self.window_seconds}")
        if not 0 <= self.priority <= MAX_PRIORITY:
            raise ValueError(f"priority: expected 0..{MAX_PRIORITY}, got {self.priority}")

    @classmethod
    def from_mapping(cls, fields: Mapping[str, Any], default_name: str) -> GangSpec:
        """From ``{gpus, at, hours | duration, window?, priority?, name?}``; ``ValueError`` naming the bad key.

        ``at``, ``window`` and ``duration`` need a unit (``48h``, ``90m``, ``30s``; a bare ``0`` is zero);
        ``hours`` is a number of hours, as its name says."""
        unknown = [k for k in fields if k not in GANG_KEYS]
        if unknown:
            raise ValueError(f"unknown key {unknown[0]!r} (use {', '.join(GANG_KEYS)})")
        for key in ("gpus", "at"):
            if key not in fields:
                raise ValueError(f"{key}: missing (e.g. gpus=16,at=48h,hours=4,window=24h)")
        if "hours" not in fields and "duration" not in fields:
            raise ValueError("hours: missing, the run's length (e.g. gpus=16,at=48h,hours=4,window=24h)")
        if "hours" in fields and "duration" in fields:
            raise ValueError("hours and duration both give the run's length; keep one")
        raw_gpus = fields["gpus"]
        try:
            gpus = int(str(raw_gpus).strip()) if not isinstance(raw_gpus, bool | float) else -1
        except ValueError:
            gpus = -1
        if gpus < 1:
            raise ValueError(f"gpus: expected an integer >= 1, got {raw_gpus!r}")
        if "duration" in fields:
            run_seconds = gang_duration(fields["duration"], "duration")
            if run_seconds <= 0:
                raise ValueError(f"duration: must be > 0, got {fields['duration']!r}")
        else:
            raw_hours = fields["hours"]
            try:
                hours = float(str(raw_hours).strip().removesuffix("h")) if not isinstance(raw_hours, bool) else -1.0
            except ValueError:
                hours = -1.0
            if not (math.isfinite(hours) and hours > 0):
                example = str(raw_hours).strip() if str(raw_hours).strip()[-1:] in ("s", "m", "d") else "90m"
                raise ValueError(f"hours: expected a number of hours > 0, got {raw_hours!r} (for another unit, "
                                 f"give duration={example} instead)")
            run_seconds = max(1, round(hours * 3600))
        name = str(fields.get("name", default_name)).strip()
        if not name or any(c in name for c in ", /="):
            raise ValueError(f"name: expected a plain name, got {name!r}")
        return cls(
            gpus=gpus,
            at_seconds=gang_duration(fields["at"], "at"),
            run_seconds=run_seconds,
            window_seconds=gang_duration(fields.get("window", 0), "window"),
            priority=parse_priority(fields.get("priority", DEFAULT_GANG_PRIORITY), "priority"),
            name=name,
        )

    @classmethod
    def parse(cls, text: str, default_name: str = "gang-1") -> GangSpec:
        """``'gpus=16,at=48h,hours=4,window=24h'`` (optional ``priority=``, ``name=``); ValueError names the key."""
        fields: dict[str, str] = {}
        for part in text.split(","):
            if not part.strip():
                continue
            key, sep, value = part.partition("=")
            key = key.strip()
            if not sep or not key or "=" in value or " " in key:
                raise ValueError(f"{part.strip()!r} is not one KEY=VALUE; separate fields with commas "
                                 "(e.g. gpus=16,at=48h,hours=4,window=24h)")
            if key in fields:
                raise ValueError(f"{key}: given twice")
            fields[key] = value.strip()
        return cls.from_mapping(fields, default_name)

    def describe(self) -> str:
        return (f"{self.name}: {self.gpus} GPUs at +{self.at_seconds / 3600:g}h for {self.run_seconds / 3600:g}h, "
                f"window {self.window_seconds / 3600:g}h")


@dataclass(frozen=True)
class MoneyConfig:
    """The ceiling ($/h on the whole simulated cluster, None = none) and the gangs of a scenario."""

    ceiling_usd_per_hour: float | None = None
    gangs: tuple[GangSpec, ...] = ()
    inference_priority: int = DEFAULT_INFERENCE_PRIORITY
    # Bill whole nodes, as Karpenter does and the controller's ceiling does (the simulate-money benchmark); False: per
    # GPU (the ``simulate`` command's ceiling until it grows a flag for it).
    whole_nodes: bool = False

    def __post_init__(self) -> None:
        c = self.ceiling_usd_per_hour
        if c is not None and (isinstance(c, bool) or not math.isfinite(c) or c <= 0):
            raise ValueError(f"ceiling: must be a finite number of dollars per hour > 0, got {c!r}")
        names = [g.name for g in self.gangs]
        if len(set(names)) != len(names):
            dup = next(n for n in names if names.count(n) > 1)
            raise ValueError(f"gang name {dup!r} is used twice")
        if not 0 <= self.inference_priority <= MAX_PRIORITY:
            raise ValueError(f"inference priority must be 0..{MAX_PRIORITY}, got {self.inference_priority}")

    @property
    def active(self) -> bool:
        return self.ceiling_usd_per_hour is not None or bool(self.gangs)


class GangPlacer(Protocol):
    """A policy that can say what inference GPUs it expects ahead (the predictive forecast, the oracle's plan)."""

    def inference_gpus_ahead(self, k: int, seconds: int) -> Sequence[tuple[int, float]] | None: ...


class _PlacerForecasts:
    """``engine.money.GangForecasts`` over a policy's own forecast: the one Deployment's GPUs for every pool (the
    gangs have whole nodes of their own, but they share the ceiling with the inference they are placed around), and
    a version that changes when its model is refit (as the controller's ``_GangForecasts.version``)."""

    def __init__(self, placer: GangPlacer, start: int, tick: int) -> None:
        self.placer = placer
        self.start = start
        self.tick = tick

    def points(self, pool: str | None, start: int, end: int) -> Sequence[tuple[int, float]] | None:
        return self.placer.inference_gpus_ahead((start - self.start) // self.tick, end - start)

    def version(self, pool: str | None) -> int:
        keeper = getattr(self.placer, "keeper", None)
        if keeper is None:
            return 0
        return -1 if keeper.model is None else int(keeper.fitted_at)


@dataclass
class _GangRun:
    spec: GangSpec
    gang: Gang  # as the controller reads it: a Kueue Workload created held, with its window and run time
    at_tick: int
    micro: int
    # future -> waiting -> reserved -> running -> done; reserved -> waiting (the ceiling took the budget back before
    # it started); running -> waiting (preempted: the run is lost); waiting -> missed (its window and grace passed)
    state: str = "future"
    reserved_tick: int = -1
    run_tick: int = -1  # when its pods run: activated, on nodes that are up
    end_tick: int = -1
    wait_ticks: int = 0
    preemptions: int = 0
    node_gpus: list[int] = field(default_factory=list)  # GPUs held on each of its nodes (the split ledger)

    @property
    def holds(self) -> bool:
        return self.state in ("reserved", "running")


@dataclass(frozen=True)
class MoneyOutcome:
    """What the ceiling and the gangs did in one policy's run (per-tick arrays are plain lists)."""

    wanted: list[int]  # the policy's standing decision before the ceiling, per tick
    gang_gpus: list[int]  # GPUs held by gangs per tick (reserved, starting or running)
    ceiling_breaches: int
    gangs_split: int
    gang_wait_hours: float
    gangs_missed: int
    gangs_preempted: int
    notes: tuple[str, ...]
    reserved_ticks: tuple[tuple[str, int], ...] = ()  # (gang, tick) each time the ceiling reserved it
    preempted_ticks: tuple[tuple[str, int], ...] = ()  # (gang, tick) each time a running gang lost its run


class MoneyLedger:
    """The money stage of one policy's run: the ceiling and the gangs, tick by tick.

    Per tick, ``step`` is called after the policy decided and before the cluster is scaled; ``record`` after. The
    decisions are ``engine.money.money_step``'s, the controller's own; the ledger keeps what a real cluster would:
    a gang is submitted, its nodes come when it is reserved, it runs once started, it ends.
    """

    def __init__(
        self,
        money: MoneyConfig,
        *,
        policy_name: str,
        gpu_hour_price: float,
        gpus_per_replica: int,
        gpus_per_node: int,
        min_replicas: int,
        tick_seconds: int,
        node_startup_ticks: int,
        start: int,
        placer: GangPlacer | None = None,
        node_startup_seconds: float | None = None,
    ) -> None:
        self.money = money
        self.name = policy_name
        self.price = gpu_hour_price
        self.gpr = gpus_per_replica
        self.gpn = gpus_per_node
        self.min_replicas = min_replicas
        self.tick = tick_seconds
        self.lead = node_startup_ticks
        self.lead_seconds = float(node_startup_ticks * tick_seconds if node_startup_seconds is None
                                  else node_startup_seconds)
        self.start = start
        self.forecasts = None if placer is None else _PlacerForecasts(placer, start, tick_seconds)
        ceiling = money.ceiling_usd_per_hour
        self.ceiling_micro = None if ceiling is None else _micro(ceiling)
        self.ceilings = Ceilings(cluster=ceiling)
        # Whole nodes (the controller's rule): the replicas share one pool of gpus_per_node nodes, each gang has whole
        # nodes of its own (no replica shares them), so every gang is a pool of its own to enforce_ceilings.
        self.node_gpus = gpus_per_node if money.whole_nodes else 1
        pools = [INFERENCE_POOL, *(GANG_POOL + g.name for g in money.gangs)]
        self.prices = GpuPrices(by_pool={p: gpu_hour_price for p in pools}, default=gpu_hour_price,
                                gpus_per_node={p: self.node_gpus for p in pools})
        self.node_micro = _micro(gpu_hour_price * self.node_gpus)
        self.runs = [
            _GangRun(
                spec=g,
                gang=Gang(kind="Workload", namespace=SIM_NAMESPACE, name=g.name, gpus=g.gpus, pods=nodes_for(
                    g.gpus, gpus_per_node), admitted=False, priority=g.priority, team=SIM_NAMESPACE,
                    duration_seconds=g.run_seconds, nodepool=GANG_POOL + g.name, held=True,
                    start_after=start + g.at_seconds, deadline=start + g.at_seconds + g.window_seconds),
                at_tick=math.ceil(g.at_seconds / tick_seconds),
                micro=nodes_for(g.gpus, gpus_per_node if money.whole_nodes else 1) * _micro(
                    gpu_hour_price * (gpus_per_node if money.whole_nodes else 1)),
            )
            for g in money.gangs
        ]
        self.state = MoneyState()
        self.plan: MoneyPlan | None = None  # of the last decision (None: no gang, and it fitted every ceiling)
        self.wanted_now = 0
        self.wanted: list[int] = []
        self.gang_gpus: list[int] = []
        self.breaches = 0
        self.split = 0
        self.notes: list[str] = []
        self.reserved_ticks: list[tuple[str, int]] = []
        self.preempted_ticks: list[tuple[str, int]] = []
        self._placed: dict[str, int] = {}  # gang -> the planned start last noted
        self._unmeetable_noted = False

    def replica_bill(self, replicas: int) -> int:
        """Micro-dollars per hour of the nodes ``replicas`` replicas take (whole nodes, or GPUs when per GPU)."""
        return nodes_for(replicas * self.gpr, self.node_gpus) * self.node_micro

    # ---------------------------------------------------------------- gang life cycle (what the cluster does)

    def _reserve(self, run: _GangRun, k: int) -> None:
        full, rest = divmod(run.spec.gpus, self.gpn)
        run.node_gpus = [self.gpn] * full + ([rest] if rest else [])
        run.state, run.reserved_tick = "reserved", k
        self.reserved_ticks.append((run.spec.name, k))

    def _run(self, run: _GangRun, k: int) -> None:
        """Started (Kueue admits it): its pods run once its nodes are up, for its run time."""
        run.state = "running"
        run.run_tick = max(k, run.reserved_tick + self.lead)
        run.end_tick = run.run_tick + math.ceil(run.spec.run_seconds / self.tick)

    def _release(self, run: _GangRun, state: str) -> None:
        run.node_gpus = []
        run.state = state

    def _past(self, run: _GangRun, k: int) -> bool:
        """Its window and the grace after it passed (``domain.gangs.holds_gpus``): it no longer counts."""
        deadline = run.gang.deadline if run.gang.deadline is not None else math.inf
        return self.start + k * self.tick > deadline + self.lead_seconds

    def _advance(self, k: int) -> None:
        for run in self.runs:
            if run.state == "running" and k >= run.end_tick:
                self._release(run, "done")
            if run.state == "future" and k >= run.at_tick:
                run.state = "waiting"
            if run.state == "waiting" and self._past(run, k):
                run.state = "missed"

    def _gang(self, run: _GangRun) -> Gang:
        if run.state == "running":
            return replace(run.gang, admitted=True, held=False)
        return run.gang

    # ---------------------------------------------------------------- the tick

    def step(self, k: int, current: int, desired: int, decides: bool, warm: int = 0) -> int:
        """The replicas to hold at tick ``k``: ``desired`` under the ceiling (gangs reserved, started or preempted)."""
        self._advance(k)
        if not decides:
            return current  # no decision: nothing is asked, gangs wait for the next decision
        self.wanted_now = desired
        # a missed gang is still there for the controller too (its Workload is not deleted): it no longer counts, but
        # its frozen placement stays
        live = [r for r in self.runs if r.state in ("waiting", "reserved", "running", "missed")]
        min_r = min(self.min_replicas, desired)
        ask = WorkloadAsk(key=INFERENCE_KEY, team=SIM_NAMESPACE, priority=self.money.inference_priority,
                          gpus_per_replica=self.gpr, min_replicas=min_r, desired_replicas=desired,
                          warm_pool_replicas=max(0, min(warm, desired - min_r)), nodepool=INFERENCE_POOL)
        if not live and fits_ceilings((ask,), (), self.ceilings, self.prices):
            self.plan = None
            return desired  # nothing to place, start or cut (the test ``enforce_ceilings`` starts with)
        now = self.start + k * self.tick
        plan, self.state = money_step(MoneySnapshot(
            now=now, horizon_seconds=0, node_startup_seconds=self.lead_seconds, ceilings=self.ceilings,
            prices=self.prices, asks=(ask,), gangs=tuple(self._gang(r) for r in live), pools=None,
            gang_forecasts=self.forecasts), self.state)
        self.plan = plan
        self.notes.extend(f"{self.name}: {p}" for p in plan.placement_problems)
        for key, p in plan.placements.items():
            if key not in self._placed:  # the first placement (it moves as the forecast does; the start is what counts)
                self._placed[key] = p.start
                name = key.rsplit("/", 1)[-1]
                self.notes.append(f"{self.name}: {name} placed at +{(p.start - self.start) / 3600:.2f}h "
                                  f"(its start; peak {format_gpus(p.peak_gpus)} GPUs incl. the gang; "
                                  f"{'fits' if p.fits else 'does NOT fit'})")
        granted = {g.key for g in plan.reserved}
        activate = set(plan.activate)
        for r in live:
            key = r.gang.key
            if key in granted:
                if r.state == "waiting":
                    self._reserve(r, k)
                if r.state == "reserved" and key in activate:
                    self._run(r, k)
            elif r.state == "reserved":  # not started yet: the budget goes back, nothing is lost
                self._release(r, "missed" if self._past(r, k) else "waiting")
            elif r.state == "running":
                r.preemptions += 1
                self.preempted_ticks.append((r.spec.name, k))
                self._release(r, "missed" if self._past(r, k) else "waiting")
        return plan.allowed(INFERENCE_KEY, desired)

    def record(self, k: int, requested: int) -> None:
        """After the cluster was scaled at tick ``k``: the bill, the breach and split checks, the waiting."""
        gang_gpus = 0
        gang_micro = 0
        for r in self.runs:
            held = sum(r.node_gpus)
            if 0 < held < r.spec.gpus:
                self.split += 1
            gang_gpus += held
            gang_micro += r.micro if held else 0
            if r.state == "waiting":
                r.wait_ticks += 1
        self.gang_gpus.append(gang_gpus)
        self.wanted.append(max(self.wanted_now, requested))
        if self.ceiling_micro is not None and self.replica_bill(requested) + gang_micro > self.ceiling_micro:
            self.breaches += 1
            if not self._unmeetable_noted:
                self._unmeetable_noted = True
                self.notes.append(
                    f"{self.name}: the ceiling ${self.money.ceiling_usd_per_hour:,.2f}/h is below the cost of "
                    f"{requested} replica(s) (min replicas {self.min_replicas}); it cannot be met (first at tick {k})"
                )

    def outcome(self) -> MoneyOutcome:
        notes = list(self.notes)
        for r in self.runs:
            if r.state == "future":
                notes.append(f"{self.name}: {r.spec.name} is asked after the trace ends; not simulated")
            elif r.holds:
                notes.append(f"{self.name}: {r.spec.name} still {r.state} when the trace ends")
            elif r.state == "waiting":
                notes.append(f"{self.name}: {r.spec.name} still waiting when the trace ends")
        return MoneyOutcome(
            wanted=self.wanted,
            gang_gpus=self.gang_gpus,
            ceiling_breaches=self.breaches,
            gangs_split=self.split,
            gang_wait_hours=sum(r.wait_ticks for r in self.runs) * self.tick / 3600,
            gangs_missed=sum(r.state == "missed" for r in self.runs),
            gangs_preempted=sum(r.preemptions for r in self.runs),
            notes=tuple(notes),
            reserved_ticks=tuple(self.reserved_ticks),
            preempted_ticks=tuple(self.preempted_ticks),
        )
