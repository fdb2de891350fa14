"""What users feel: a first-in-first-out queue in front of the Deployment's Ready replicas.

Why it exists: counting every request above Ready capacity as lost (``unserved_fraction``) treats a
one-minute wobble like a cold start during a ramp. A vLLM replica queues the excess instead, so a
wobble costs a little waiting and a late scale-up costs minutes of queue and, past the gateway's
timeout, dropped requests. Inference teams state their objective in exactly those terms ("99% of
requests start within 2 s"), so the simulator scores every policy on it.

The model is a *fluid* FIFO queue (requests are a continuous mass; with hundreds of requests per
tick the granularity of single requests is below anything scored here):

* Arrivals come at the per-tick rate ``a`` (req/s, constant inside a tick; ``NaN`` ticks carry no
  arrivals). The Ready replicas serve at ``c = ready * capacity_per_replica`` req/s; a request
  *starts* when the server takes it. While requests wait the server works at ``c``; with no one
  waiting arrivals start at once while ``a <= c``.
* A request still waiting ``timeout`` seconds after it arrived is dropped (a gateway gives up). The
  head of the queue is always the oldest request, so drops also leave from the head: departures
  (starts + drops) stay in arrival order.
* So the backlog ``Q`` is a doubly reflected process: ``Q' = a - c`` between the floor 0 and the
  ceiling ``U(t) = A(t) - A(t - timeout)`` (everything that arrived in the last ``timeout``
  seconds; ``A`` is cumulative arrivals). At the floor the server idles; at the ceiling the head is
  exactly ``timeout`` old and requests arriving ``timeout`` ago leave at rate ``b`` (the arrival
  rate then): ``c`` of them start (with a wait of exactly ``timeout``), ``b - c`` are dropped.

The math is exact for this fluid model, not a per-request simulation. Time is cut into *segments*:
the tick grid plus the tick grid shifted by ``timeout`` (where ``b`` changes), so ``a``, ``b`` and
``c`` are constant inside each segment and ``U`` is linear. In a segment ``Q`` moves at slope
``a - c`` and can meet at most one barrier (meeting 0 needs ``a < c``; meeting ``U`` needs
``b > c``, and then ``U`` stays above 0 because requests arrived ``timeout`` ago), so

    ``Q_end = min(max(0, Q_start + (a - c) * length), U_end)``

is exact at segment ends, and the one kink inside a segment (where it met a barrier) is computed in
closed form. Departures ``D = A - Q`` are then piecewise linear, and the wait of the request at
arrival position ``x`` is ``D^-1(x) - A^-1(x)`` (when the cumulative departure curve reaches it
minus when it arrived). Between consecutive breakpoints of ``A`` and ``D`` (in request space) that
wait is linear in ``x`` and the requests are uniform in ``x``, so the waits are a mixture of uniform
distributions, one piece per breakpoint interval: the share that started within ``w`` and the p99
wait come from that mixture exactly (the quantile by bisection), vectorised over all pieces.

After the trace ends the replay goes on for ``timeout`` more seconds with no arrivals and the last
tick's Ready capacity, so every request is either started or dropped and none is left unscored.

Scores (``QueueOutcome``): ``slo_attainment`` is the share of requests that started within
``slo_wait`` (dropped ones are misses); ``wait_p99_seconds`` is the 99th percentile of the wait over
all requests, a dropped request counted at the timeout (so a p99 equal to the timeout means more
than 1% were dropped or waited that long); ``dropped_fraction`` is dropped requests over all.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from models.types import FloatArray

IntArray = NDArray[np.int64]
DEFAULT_TIMEOUT_SECONDS = 60.0
DEFAULT_SLO_WAIT_SECONDS = 2.0
P99 = 0.99
WAIT_RESOLUTION = 1e-6  # seconds: waits closer than this to 0 or to the timeout are snapped to it


@dataclass(frozen=True)
class QueueConfig:
    """The gateway's timeout and the latency objective, in seconds."""

    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS
    slo_wait_seconds: float = DEFAULT_SLO_WAIT_SECONDS

    def __post_init__(self) -> None:
        if not (math.isfinite(self.timeout_seconds) and self.timeout_seconds > 0):
            raise ValueError(f"queue timeout must be a finite number of seconds > 0, got {self.timeout_seconds!r}")
        if not (math.isfinite(self.slo_wait_seconds) and self.slo_wait_seconds >= 0):
            raise ValueError(f"SLO wait must be a finite number of seconds >= 0, got {self.slo_wait_seconds!r}")


class Segments:
    """The replay's time cut where the arrival rate, the rate ``timeout`` ago or the tick changes.

    Built once from the arrivals (they do not depend on the policy); ``FluidQueue`` then steps the
    backlog through them for any capacity. Times are seconds since the start of the trace.
    """

    def __init__(self, arrivals: FloatArray, tick_seconds: float, timeout_seconds: float) -> None:
        if tick_seconds <= 0:
            raise ValueError(f"tick must be positive, got {tick_seconds!r}")
        if not (math.isfinite(timeout_seconds) and timeout_seconds > 0):
            raise ValueError(f"queue timeout must be > 0 seconds, got {timeout_seconds!r}")
        rate = np.nan_to_num(np.asarray(arrivals, dtype=np.float64), nan=0.0)
        if rate.size and float(rate.min()) < 0:
            raise ValueError("arrival rates must be >= 0")
        self.ticks = int(rate.shape[0])  # ticks of the trace
        self.drain_ticks = math.ceil(timeout_seconds / tick_seconds - 1e-9)  # after it, no arrivals
        n = self.ticks + self.drain_ticks
        dt, timeout = float(tick_seconds), float(timeout_seconds)
        self.tick_seconds, self.timeout = dt, timeout
        self.rate = np.concatenate((rate, np.zeros(self.drain_ticks)))
        self.tick_times = dt * np.arange(n + 1, dtype=np.float64)
        self.cum_arrivals = np.concatenate(([0.0], np.cumsum(self.rate * dt)))  # A at each tick boundary
        self.total = float(self.cum_arrivals[self.ticks])
        shifted = self.tick_times + timeout
        edges = np.unique(np.concatenate((self.tick_times, shifted[shifted < self.tick_times[-1]])))
        self.edges = edges
        self.length = np.diff(edges)
        # rates are constant inside a segment: read them at its middle (edges may carry rounding)
        middle = 0.5 * (edges[:-1] + edges[1:])
        self.tick_of = np.clip(np.searchsorted(self.tick_times, middle, side="right") - 1, 0, n - 1).astype(np.int64)
        self.a = self.rate[self.tick_of]
        back = middle - timeout
        back_tick = np.clip(np.searchsorted(self.tick_times, back, side="right") - 1, 0, n - 1)
        self.b = np.where(back >= 0, self.rate[back_tick], 0.0)  # the arrival rate ``timeout`` ago
        self.cum_at_edges = self.arrived(edges)
        self.ceiling = np.maximum(self.cum_at_edges - self.arrived(edges - timeout), 0.0)  # U at each edge
        # segments [first[k], first[k + 1]) belong to tick k
        self.first = np.searchsorted(edges, self.tick_times, side="left").astype(np.int64)
        # plain lists for the per-tick loop (indexing numpy scalars one by one is slow)
        self._inflow: list[float] = (self.a * self.length).tolist()
        self._length: list[float] = self.length.tolist()
        self._ceiling: list[float] = self.ceiling.tolist()
        self._first: list[int] = self.first.tolist()

    def arrived(self, t: FloatArray) -> FloatArray:
        """Cumulative arrivals ``A(t)`` (0 before the start)."""
        out: FloatArray = np.interp(t, self.tick_times, self.cum_arrivals, left=0.0)
        return out


class FluidQueue:
    """The backlog stepped tick by tick (a policy that reads the queue sees it as the run goes)."""

    def __init__(self, segments: Segments) -> None:
        self.segments = segments
        self.backlog = np.zeros(segments.edges.shape[0], dtype=np.float64)  # Q at every segment edge
        self._q: list[float] = [0.0] * segments.edges.shape[0]
        self._next_tick = 0

    @property
    def waiting(self) -> float:
        """Requests waiting now (at the start of the next tick to be stepped)."""
        return self._q[self.segments._first[self._next_tick]]

    def advance(self, k: int, capacity: float) -> None:
        """Serve tick ``k`` with ``capacity`` req/s (the Ready replicas' rate); ticks go in order."""
        if k != self._next_tick:
            raise ValueError(f"queue ticks go in order: expected tick {self._next_tick}, got {k}")
        seg = self.segments
        q = self._q
        inflow, length, ceiling = seg._inflow, seg._length, seg._ceiling
        value = q[seg._first[k]]
        for i in range(seg._first[k], seg._first[k + 1]):
            value += inflow[i] - capacity * length[i]
            if value < 0.0:
                value = 0.0
            elif value > ceiling[i + 1]:
                value = ceiling[i + 1]
            q[i + 1] = value
        self._next_tick = k + 1

    def finish(self, capacity: float) -> FloatArray:
        """Step the drain after the trace (no arrivals, ``capacity`` req/s); the backlog at every edge."""
        total = self.segments.ticks + self.segments.drain_ticks
        for k in range(self._next_tick, total):
            self.advance(k, capacity)
        self.backlog = np.asarray(self._q, dtype=np.float64)
        return self.backlog


@dataclass(frozen=True)
class QueueOutcome:
    """The waits of every request of one run, as a mixture of uniform pieces, and what was dropped."""

    total: float  # requests that arrived
    dropped: float  # requests dropped at the timeout
    timeout: float
    piece_mass: FloatArray  # requests per piece
    piece_served: FloatArray  # of them, the ones that started
    wait_lo: FloatArray  # each piece's waits are uniform on [wait_lo, wait_hi]
    wait_hi: FloatArray
    peak_backlog: float
    backlog_end_of_tick: FloatArray  # requests waiting at the end of each tick of the trace

    @property
    def dropped_fraction(self) -> float:
        return self.dropped / self.total if self.total > 0 else 0.0

    @staticmethod
    def _cdf(wait: float, weights: FloatArray, lo: FloatArray, hi: FloatArray) -> float:
        """Requests (of ``weights`` per piece) that waited at most ``wait``."""
        width = hi - lo
        flat = width <= 1e-12
        share = np.where(flat, (lo <= wait).astype(np.float64),
                         np.clip((wait - lo) / np.where(flat, 1.0, width), 0.0, 1.0))
        return float(np.dot(weights, share))

    def attainment(self, slo_wait: float) -> float:
        """Share of requests that started within ``slo_wait`` seconds (dropped ones never start)."""
        if self.total <= 0:
            return 1.0
        met = self._cdf(slo_wait, self.piece_served, self.wait_lo, self.wait_hi)
        return min(1.0, max(0.0, met / self.total))

    def wait_quantile(self, q: float) -> float:
        """The ``q`` quantile (0..1) of the wait over all requests, a dropped request counted at the timeout."""
        if self.total <= 0 or not self.piece_mass.size:
            return 0.0
        goal = q * self.total
        waited = self.wait_hi > 0  # the pieces that moved; the rest started at once
        at_once = float(self.piece_mass[~waited].sum())
        if at_once >= goal:
            return 0.0
        mass, lo_w, hi_w = self.piece_mass[waited], self.wait_lo[waited], self.wait_hi[waited]

        def cdf(wait: float) -> float:
            return at_once + self._cdf(wait, mass, lo_w, hi_w)

        lo, hi = 0.0, self.timeout
        if cdf(hi * (1 - 1e-12)) < goal:
            return self.timeout
        for _ in range(60):
            mid = 0.5 * (lo + hi)
            if cdf(mid) >= goal:
                hi = mid
            else:
                lo = mid
            if hi - lo <= 1e-6:
                break
        return hi


def _inverse(values: FloatArray, times: FloatArray, x: FloatArray, side: str) -> FloatArray:
    """For a non-decreasing piecewise-linear curve through ``(times, values)``: ``inf{t: V(t) >= x}``
    (``side="left"``) or ``sup{t: V(t) <= x}`` (``side="right"``), for ``x`` within its range."""
    last = values.shape[0] - 1
    if side == "left":
        i = np.clip(np.searchsorted(values, x, side="left"), 1, last)
        j0, j1 = i - 1, i
    else:
        j = np.clip(np.searchsorted(values, x, side="right") - 1, 0, last - 1)
        j0, j1 = j, j + 1
    v0, v1 = values[j0], values[j1]
    t0, t1 = times[j0], times[j1]
    rise = v1 - v0
    frac = np.clip(np.divide(x - v0, rise, out=np.zeros_like(x), where=rise > 0), 0.0, 1.0)
    if side == "left":
        frac = np.where(rise > 0, frac, 1.0)  # on a plateau at x: the first time it is reached
    out: FloatArray = t0 + frac * (t1 - t0)
    return out


def capacity_per_tick(segments: Segments, capacity: FloatArray) -> FloatArray:
    """The trace's per-tick capacity (req/s) extended over the drain with its last value."""
    cap = np.asarray(capacity, dtype=np.float64)
    if cap.shape[0] != segments.ticks:
        raise ValueError(f"capacity has {cap.shape[0]} ticks, the arrivals {segments.ticks}")
    last = float(cap[-1]) if cap.size else 0.0
    out: FloatArray = np.concatenate((cap, np.full(segments.drain_ticks, last)))
    return out


def replay(segments: Segments, capacity: FloatArray) -> QueueOutcome:
    """Run the queue over the whole trace with ``capacity`` req/s per tick and score every request."""
    cap = capacity_per_tick(segments, capacity)
    queue = FluidQueue(segments)
    for k, c in enumerate(cap.tolist()):
        queue.advance(k, c)
    return outcome(segments, cap, queue.finish(float(cap[-1]) if cap.size else 0.0))


def _snap(wait: FloatArray, timeout: float) -> FloatArray:
    """Waits within a microsecond of 0 or of the timeout are exactly that (times of weeks in seconds carry
    rounding of ~1e-9 s, which must not turn "started at once" into a miss of an SLO of 0 s)."""
    out: FloatArray = np.clip(wait, 0.0, timeout)
    out = np.where(out < WAIT_RESOLUTION, 0.0, out)
    out = np.where(out > timeout - WAIT_RESOLUTION, timeout, out)
    return out


def outcome(segments: Segments, capacity: FloatArray, backlog: FloatArray) -> QueueOutcome:
    """Every request's wait from the per-tick capacity (trace + drain, ``capacity_per_tick``) and the
    backlog at each segment edge (``FluidQueue.finish``)."""
    seg = segments
    a, b, length = seg.a, seg.b, seg.length
    cap = np.asarray(capacity, dtype=np.float64)[seg.tick_of]
    q0, q1 = backlog[:-1], backlog[1:]
    u0 = seg.ceiling[:-1]
    free = q0 + (a - cap) * length
    # at most one kink per segment: the backlog empties (a < c), or it meets the ceiling (b > c)
    empties = (a < cap) & (free < 0)
    tau_empty = np.divide(q0, cap - a, out=np.zeros_like(q0), where=empties)
    gap = np.maximum(u0 - q0, 0.0)
    meets = ~empties & (b > cap) & (gap < (b - cap) * length)
    tau_meet = np.divide(gap, b - cap, out=np.zeros_like(q0), where=meets)
    tau = np.where(empties, tau_empty, np.where(meets, tau_meet, length))
    tau = np.clip(tau, 0.0, length)
    q_kink = np.where(empties, 0.0, np.where(meets, np.minimum(u0 + (a - b) * tau, q0 + (a - cap) * tau), q1))
    drops = np.where(meets, np.maximum(b - cap, 0.0) * (length - tau), 0.0)
    starts = seg.edges[:-1]
    m = starts.shape[0]
    times = np.empty(2 * m + 1)
    times[0:-1:2], times[1:-1:2], times[-1] = starts, starts + tau, seg.edges[-1]
    dep = np.empty(2 * m + 1)
    dep[0:-1:2] = seg.cum_at_edges[:-1] - q0
    dep[1:-1:2] = seg.cum_at_edges[:-1] + a * tau - q_kink
    dep[-1] = seg.cum_at_edges[-1] - backlog[-1]
    dep = np.maximum.accumulate(np.maximum(dep, 0.0))
    piece_drops = np.zeros(2 * m)
    piece_drops[1::2] = drops  # a segment's drops are all after its kink
    total = seg.total
    cum_a = seg.cum_arrivals
    xs = np.unique(np.concatenate((cum_a, dep)))
    xs = xs[(xs >= 0.0) & (xs <= total)]
    if xs.size < 2 or total <= 0:
        empty = np.zeros(0)
        return QueueOutcome(total, 0.0, seg.timeout, empty, empty, empty, empty, 0.0, q1[: seg.ticks])
    x_lo, x_hi = xs[:-1], xs[1:]
    mass = x_hi - x_lo
    wait_lo = _inverse(dep, times, x_lo, "right") - _inverse(cum_a, seg.tick_times, x_lo, "right")
    wait_hi = _inverse(dep, times, x_hi, "left") - _inverse(cum_a, seg.tick_times, x_hi, "left")
    wait_lo, wait_hi = _snap(wait_lo, seg.timeout), _snap(wait_hi, seg.timeout)
    piece = np.clip(np.searchsorted(dep, x_lo, side="right") - 1, 0, 2 * m - 1)
    rise = dep[piece + 1] - dep[piece]
    share = np.clip(np.divide(piece_drops[piece], rise, out=np.zeros_like(rise), where=rise > 0), 0.0, 1.0)
    served = mass * (1.0 - share)
    lo, hi = np.minimum(wait_lo, wait_hi), np.maximum(wait_lo, wait_hi)
    end_of_tick = backlog[seg.first[1 : seg.ticks + 1]]
    return QueueOutcome(
        total=total,
        dropped=float(drops.sum()),
        timeout=seg.timeout,
        piece_mass=mass,
        piece_served=served,
        wait_lo=lo,
        wait_hi=hi,
        peak_backlog=float(backlog.max()) if backlog.size else 0.0,
        backlog_end_of_tick=end_of_tick,
    )

