"""Pure functions that turn messy traffic into a series the forecasters can trust.

Why it exists: real metrics lie in a few recurring ways, and a forecaster that learns from a lie
provisions for it. A metrics-collection outage reads as zero requests, which a model would
happily learn as "quiet at this hour" and then scale down for; a counter restarts from 0 when a
pod does; scrapes go missing. Each case gets one explicit policy, here, instead of ad-hoc fixes in
every model:

- ``prepare``: infinite or negative rates become NaN (missing). *Outage zeros* become NaN too: a
  bin whose count (rate x step) is near zero (at most ``fraction`` of the reference) although a
  Poisson count at the median rate of the neighbouring hours would be near zero with probability
  below ``p_max`` (1e-6). The reference is a centred rolling median over ``window_seconds`` on each
  side, recomputed with the already-marked bins excluded (so a four-hour outage does not hide
  itself by dragging the median down). Because real traffic is burstier than Poisson, the drop must
  also be a 4.75-sigma outlier in ``sqrt(count)`` against the local noise (upper quartile of absolute
  successive differences, which ignores the daily cycle): a bursty trace with genuine empty minutes between
  bursts keeps them. Real quiet periods of a sparse series survive: at a median
  of a few requests per bin, an empty bin is ordinary (P(0) = e^-3 = 0.05 at 3 per bin).
- ``counter_to_rate``: a cumulative counter sampled at scrape times -> per-second rates per bin;
  a drop means the counter restarted from 0 (the increase is the new value, as Prometheus's
  ``rate()`` assumes); a gap of up to ``max_gap_bins`` bins is bridged with the average rate over
  it, a longer one stays NaN.
- ``continuation``: the values that follow what a model has seen, with a gap padded with NaN; the
  models' ``update`` uses it so they all treat misaligned updates the same way.

Measured on the public traces of ../shared/traces (tests pin the first three): ServeGen m_mid 102 bins marked
and m_small 37, exactly the outages their SOURCES.md documents; the 70%-empty Alibaba LoRA trace 0; NASA
July 1995 210 (server hiccups: runs of 0-4 requests in a 40-per-minute afternoon); Azure code 0
(bursty, its empty minutes are real); Azure conv 1 (its truncated last minute); Mooncake 0.
The medians are computed only where a bin could be an outage (at most ``fraction`` of its window's
maximum, which bounds the median), when that is cheaper than the rolling pass over every bin: 22 ms
against 32 ms on NASA's last 14 days (20,160 one-minute bins, what a fit cleans), 0.5-1 ms against
2 ms on ServeGen's 2,016; ~68 ms either way on the whole 40,000-bin NASA trace; a sparse series,
whose empty bins all could be outages, takes the rolling pass (the same numbers: a test holds the
two to each other).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd
from numpy.typing import NDArray
from scipy.ndimage import maximum_filter1d

from models.types import FloatArray, TrafficSeries

OUTAGE_WINDOW_SECONDS = 6 * 3600
OUTAGE_FRACTION = 0.05
OUTAGE_P_MAX = 1e-6
MAX_PASSES = 5
# Outages are looked for bin by bin (instead of by the rolling pass) while the windows to partition hold at most
# this many values per bin of the series. Measured: bin by bin wins below ~40 (NASA's 14 days: 19, 18 against
# 32 ms), the rolling pass far above (a sparse series, or the short context of an update: 460-620, 10-16x slower).
TARGETED_VALUES_PER_BIN = 32
_Z_ONE_SIDED = 4.75  # standard normal: P(Z < -4.75) ~ 1e-6
_POISSON_SQRT_SD = 0.5  # sd of sqrt(Poisson count), any rate


def sanitize(values: FloatArray) -> FloatArray:
    """A copy with infinite and negative values replaced by NaN."""
    out = np.array(values, dtype=np.float64, copy=True)
    # No errstate around it: comparing NaN sets no floating-point flag, and entering one costs more than the rest on
    # the one bin of an update (sanitized on every update of every model).
    out[~np.isfinite(out) | (out < 0)] = np.nan
    return out


def _poisson_log_cdf_bound(k: FloatArray, lam: FloatArray) -> FloatArray:
    """An upper bound on ``log P(X <= k)`` for ``X ~ Poisson(lam)`` with ``0 <= k < lam``.

    The pmf ratio ``p(j-1)/p(j) = j/lam <= k/lam`` for ``j <= k`` makes the left tail a geometric
    series: ``P(X <= k) <= p(k) / (1 - k/lam)``. ``k`` may be fractional (expected counts).
    """
    lgam = np.array([math.lgamma(float(x) + 1.0) for x in k], dtype=np.float64)
    with np.errstate(divide="ignore"):
        log_pmf = k * np.log(lam) - lam - lgam
        out: FloatArray = log_pmf - np.log1p(-k / lam)
    return out


def _sqrt_noise(counts: FloatArray, half: int, min_periods: int, at: NDArray[np.intp] | None = None) -> FloatArray:
    """Local noise (sd) of ``sqrt(count)`` from the upper quartile of absolute successive differences.

    Successive differences ignore the daily cycle. The upper quartile (not the median) is used so that
    burstiness shows even when only a quarter of the differences touch a burst or an empty bin, while
    an outage run adds just two large differences. For a Poisson count the result is about 0.5;
    bursty (overdispersed) traffic has more, and then an empty bin is less surprising than Poisson says.
    """
    root = np.sqrt(counts)
    step_diff = np.abs(np.diff(root, prepend=np.nan))
    if at is not None:  # at those bins only (``_window_quantile``)
        q75 = _window_quantile(step_diff, at, half, min_periods, 0.75)
    else:
        q75 = (
            pd.Series(step_diff)
            .rolling(2 * half + 1, center=True, min_periods=min_periods)
            .quantile(0.75)
            .to_numpy(dtype=np.float64)
        )
    # |N(0, 2 sd^2)| has upper quartile 1.1503 * sqrt(2) * sd
    out: FloatArray = q75 / (1.1503 * math.sqrt(2.0))
    return out


def _window_quantile(x: FloatArray, idx: NDArray[np.intp], half: int, min_periods: int, q: float) -> FloatArray:
    """The ``q``-quantile of the finite values of ``x`` in the centred window ``[i - half, i + half]`` at each
    ``i`` of ``idx`` (NaN with fewer than ``min_periods``): pandas' ``rolling(2 * half + 1, center=True,
    min_periods=min_periods).quantile(q)`` (linear; ``q = 0.5`` is its ``median``), same arithmetic, at those
    bins only. Why: the rolling pass costs O(n log window) over the whole series, and it is needed only where
    a bin could be an outage, which is rarely more than a few bins."""
    width = 2 * half + 1
    padded = np.concatenate((np.full(half, np.nan), x, np.full(half, np.nan)))
    windows = np.lib.stride_tricks.sliding_window_view(padded, width)[idx]
    count = np.isfinite(windows).sum(axis=1)
    # Only the order statistics at the quantile's position are needed: a partition (linear) per group of windows
    # with the same number of values (NaN sorts last), not a sort.
    ordered = windows
    for c in np.unique(count).tolist():
        group = count == c
        at = math.floor(q * max(c - 1, 0))
        ordered[group] = np.partition(windows[group], sorted({at, min(at + 1, width - 1)}), axis=1)
    rows = np.arange(idx.size)
    pos = q * np.maximum(count - 1, 0)
    low = np.floor(pos).astype(np.intp)
    below = ordered[rows, low]
    if q == 0.5:  # pandas' median: the middle value, or the mean of the two middle ones
        value = np.where(count % 2 == 1, below, (below + ordered[rows, np.minimum(low + 1, width - 1)]) / 2)
    else:
        above = ordered[rows, np.minimum(low + 1, width - 1)]
        value = np.where(pos == low, below, below + (above - below) * (pos - low))
    out: FloatArray = np.where(count >= min_periods, value, np.nan)
    return out


def outage_mask(
    series: TrafficSeries,
    *,
    window_seconds: int = OUTAGE_WINDOW_SECONDS,
    fraction: float = OUTAGE_FRACTION,
    p_max: float = OUTAGE_P_MAX,
) -> NDArray[np.bool_]:
    """Bins that look like collection outages (see the module docstring); ``True`` = outage."""
    if not 0 < fraction < 1:
        raise ValueError(f"fraction must be in (0, 1), got {fraction}")
    if not 0 < p_max < 1:
        raise ValueError(f"p_max must be in (0, 1), got {p_max}")
    values = sanitize(series.values)
    n = values.shape[0]
    step = series.step_seconds
    half = max(1, window_seconds // step)
    min_periods = max(3, min(half // 2, n // 2))
    mask = np.zeros(n, dtype=bool)
    if n == 0:
        return mask
    log_p_max = math.log(p_max)
    finite = np.isfinite(values)
    # A window's median is at most its maximum: only bins at most ``fraction`` of their window's maximum can be
    # outages, and the medians are needed there alone (the whole rolling pass when they are many).
    budget = TARGETED_VALUES_PER_BIN * n // (2 * half + 1)  # windows worth partitioning instead of rolling
    with np.errstate(invalid="ignore"):
        # The series' maximum bounds every window's: far past the budget by it (a sparse series, mostly empty
        # bins), the windows' own maxima will not bring it back; within it, they are not needed.
        possible = np.flatnonzero(finite & (values <= fraction * np.nanmax(values))) if finite.any() else np.arange(0)
        if budget < possible.size <= 4 * budget:
            peak = maximum_filter1d(np.where(finite, values, -np.inf), 2 * half + 1, mode="constant", cval=-np.inf)
            possible = np.flatnonzero(finite & (peak > 0) & (values <= fraction * peak))
    targeted = possible.size <= budget
    for _ in range(MAX_PASSES):
        ref_input = values.copy()
        ref_input[mask] = np.nan
        if targeted:
            ref = np.full(n, np.nan)
            ref[possible] = _window_quantile(ref_input, possible, half, min_periods, 0.5)
        else:
            rolling = pd.Series(ref_input).rolling(2 * half + 1, center=True, min_periods=min_periods)
            ref = rolling.median().to_numpy(dtype=np.float64)
        with np.errstate(invalid="ignore"):
            candidate = finite & np.isfinite(ref) & (ref > 0) & (values <= fraction * ref)
        idx = np.flatnonzero(candidate)
        new_mask = np.zeros(n, dtype=bool)
        if idx.size:
            counts, ref_counts = values[idx] * step, ref[idx] * step
            poisson_ok = _poisson_log_cdf_bound(counts, ref_counts) < log_p_max
            noise = (_sqrt_noise(ref_input * step, half, min_periods, idx) if targeted
                     else _sqrt_noise(ref_input * step, half, min_periods)[idx])
            drop = np.sqrt(ref_counts) - np.sqrt(counts)
            z_ok = drop > _Z_ONE_SIDED * np.fmax(noise, _POISSON_SQRT_SD)
            new_mask[idx[poisson_ok & z_ok]] = True
        if np.array_equal(new_mask, mask):
            break
        mask = new_mask
    return mask


def prepare(
    series: TrafficSeries,
    *,
    window_seconds: int = OUTAGE_WINDOW_SECONDS,
    fraction: float = OUTAGE_FRACTION,
    p_max: float = OUTAGE_P_MAX,
) -> TrafficSeries:
    """The series with inf/negative values and outage zeros replaced by NaN (missing)."""
    values = sanitize(series.values)
    clean = TrafficSeries(values, series.step_seconds, series.start)
    mask = outage_mask(clean, window_seconds=window_seconds, fraction=fraction, p_max=p_max)
    values[mask] = np.nan
    return TrafficSeries(values, series.step_seconds, series.start)


def prepare_tail(context: FloatArray, new: FloatArray, step_seconds: int, start: int) -> FloatArray:
    """``prepare`` of ``context`` followed by ``new``, returning only the ``new`` part.

    The incremental form used on every ``update`` of a fitted chain. A bin can only be marked as an
    outage when it is at most ``OUTAGE_FRACTION`` of its rolling median, and a rolling median never
    exceeds the window's maximum; so when every new bin is above that fraction of the maximum, none
    of them can be marked and the (pandas) rolling pass is skipped. The result is identical to the
    full pass (a property test checks it); the point is speed: most updates carry ordinary traffic.
    """
    joined = np.concatenate([context, new])
    # the largest observed value in one pass (both parts are sanitized: finite or NaN; NaN when none is observed)
    top = float(np.fmax.reduce(joined)) if joined.size else math.nan
    if math.isnan(top) or not np.any(new <= OUTAGE_FRACTION * top):
        return new
    cleaned = prepare(TrafficSeries(joined, step_seconds, start)).values
    return cleaned[-new.shape[0] :] if new.shape[0] else cleaned[:0]


def counter_to_rate(
    timestamps: Sequence[float] | NDArray[np.int64] | FloatArray,
    counter_values: Sequence[float] | FloatArray,
    *,
    step_seconds: int | None = None,
    max_gap_bins: int = 5,
) -> TrafficSeries:
    """Per-second rates from samples of a cumulative counter.

    Bin ``i`` covers ``[t0 + i*step, t0 + (i+1)*step)`` and receives the increase between the samples
    around it. A NaN counter value is a missed scrape (the interval around it is bridged like a gap).
    Raises ``ValueError`` naming the bad input (lengths, order, negative counters, off-grid times).
    """
    t = np.asarray(timestamps, dtype=np.float64)
    c = np.asarray(counter_values, dtype=np.float64)
    if t.ndim != 1 or c.ndim != 1 or t.shape != c.shape:
        raise ValueError(f"timestamps and counter_values must be 1-D of equal length, got {t.shape} and {c.shape}")
    if not np.all(np.isfinite(t)) or np.any(t != np.round(t)):
        raise ValueError("timestamps must be whole numbers of seconds")
    if np.any(np.isinf(c)):
        raise ValueError("counter_values must be finite (NaN marks a missed scrape)")
    if np.any(c < 0):
        raise ValueError(f"counter_values must be >= 0, got {float(c[c < 0][0])}")
    if max_gap_bins < 1:
        raise ValueError(f"max_gap_bins must be >= 1, got {max_gap_bins}")
    ts = t.astype(np.int64)
    if ts.size < 2:
        raise ValueError(f"need at least two counter samples, got {ts.size}")
    diffs = np.diff(ts)
    if np.any(diffs <= 0):
        i = int(np.argmax(diffs <= 0))
        raise ValueError(f"timestamps must be strictly increasing ({ts[i]} is followed by {ts[i + 1]})")
    step = int(diffs.min()) if step_seconds is None else int(step_seconds)
    if step <= 0:
        raise ValueError(f"step_seconds must be positive, got {step}")
    offsets = ts - ts[0]
    if np.any(offsets % step != 0):
        i = int(np.argmax(offsets % step != 0))
        raise ValueError(f"timestamp {ts[i]} is not on the {step}s grid starting at {ts[0]}")
    n_bins = int(offsets[-1] // step)
    valid = np.flatnonzero(np.isfinite(c))
    out = np.full(n_bins, np.nan)
    if valid.size < 2:
        return TrafficSeries(out, step, int(ts[0]))
    a, b = valid[:-1], valid[1:]
    ca, cb = c[a], c[b]
    increase = np.where(cb >= ca, cb - ca, cb)  # a drop: the counter restarted from 0
    seconds = (ts[b] - ts[a]).astype(np.float64)
    bins = ((ts[b] - ts[a]) // step).astype(np.int64)
    rate = np.where(bins <= max_gap_bins, increase / seconds, np.nan)
    lo = int(offsets[valid[0]] // step)
    filled = np.repeat(rate, bins)
    out[lo : lo + filled.shape[0]] = filled
    return TrafficSeries(out, step, int(ts[0]))


def continuation(seen_end: int, step_seconds: int, new: TrafficSeries) -> FloatArray:
    """The sanitized values of ``new``, preceded by NaN for any bins between ``seen_end`` and ``new.start``.

    Raises ``ValueError`` if ``new`` has another step, overlaps what was seen, or is off the grid.
    """
    if new.step_seconds != step_seconds:
        raise ValueError(f"update has step {new.step_seconds}s, the model was fitted at {step_seconds}s")
    if new.start < seen_end:
        raise ValueError(f"update starts at {new.start}, before the end of what the model has seen ({seen_end})")
    if (new.start - seen_end) % step_seconds != 0:
        raise ValueError(f"update starts at {new.start}, off the {step_seconds}s grid that ends at {seen_end}")
    gap = (new.start - seen_end) // step_seconds
    values = sanitize(new.values)
    if gap == 0:
        return values
    return np.concatenate([np.full(gap, np.nan), values])
