"""Seeded synthetic inference traffic: the trace ``simulate`` and ``backtest`` replay when given none.

Why it exists: the main job (``predictive-autoscaler simulate`` with no arguments) must run on a fresh clone with
nothing beside it, and the project ships no one else's data. So the default traffic is made here, from numbers
written down below, each with the published or measured statistic it imitates. It has what a forecaster and a
planner must cope with in LLM serving traffic: a daily cycle, a quieter weekend, bursts no forecast sees coming,
a level shift part way through (a new tenant, a launch), minute-to-minute noise, and prompt and output token
counts per request. It is a stand-in, not evidence: scores on it say how the policies behave on traffic *shaped
like* inference traffic. For real traffic use ``--trace FILE.csv`` (``trace from-log`` makes one from an access
log; the public traces in ``../shared/traces`` beside a clone are real), or ``--deployment NS/NAME`` to read a
Deployment's own history from Prometheus (``export --deployment`` saves it).

Pure code: numpy, a ``numpy.random.Generator`` seeded with ``seed`` (the same seed, shape, days, step and start
give the same trace, bit for bit), and time passed in as ``start`` (default :data:`START`, a fixed Monday); no
clock is read and nothing is written.

How a trace is made. Times are UTC. The expected request rate at time ``t`` is

    WEEKDAY_REQUESTS_PER_SECOND x daily(hour) x weekly(day) x regime(t) x noise(minute) x bursts(t)

* ``daily``: a smooth cycle (a cosine and its second harmonic, peak at :data:`PEAK_HOUR`) whose peak is
  ``peak_to_trough`` times its trough, scaled to average 1 over a day;
* ``weekly``: Saturday and Sunday run at ``weekend_factor`` of a weekday;
* ``regime``: 1 until :data:`REGIME_CHANGE_AT` of the span, then ramps linearly over :data:`REGIME_RAMP_SECONDS`
  to ``regime_shift``, and stays there;
* ``noise``: ``exp(x)`` with ``x`` a first-order autoregression per minute, correlation time :data:`NOISE_MINUTES`,
  scaled to mean 1 and coefficient of variation ``noise_cv``;
* ``bursts``: ``1 + sum_k A_k exp(-(t - t_k) / tau_k)`` after each burst's onset ``t_k`` (Poisson, ``bursts_per_day``
  a day, anywhere in the span), ``A_k`` lognormal with median ``burst_median_extra`` (so a burst's peak is
  ``1 + A_k`` times the rate it lands on) and spread :data:`BURST_SIGMA`, ``tau_k`` exponential with mean
  :data:`BURST_MINUTES`.

Each bin's request count is Poisson with the rate's integral over the bin as its mean (the rate is evaluated on
a sub-grid of ``gcd(step, 60)`` seconds). Each request is a code request with probability :data:`CODE_SHARE`,
else a conversation; its prompt and output token counts are lognormal with the means and medians below (rounded
to whole tokens, at least 1), and a bin's ``input_tokens``/``output_tokens`` are the sums over its requests.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from autoscaler.traces import MAX_TRACE_BINS, Trace, trace_from_rates
from models.types import FloatArray, TrafficSeries

START = 1_709_510_400  # Monday 2024-03-04 00:00:00 UTC: a fixed start, so the default trace never changes
DEFAULT_SEED = 1
DEFAULT_DAYS = 14.0
DEFAULT_STEP_SECONDS = 60
DEFAULT_SHAPE = "diurnal"

# The level: the mean request rate over a weekday, before the regime change. The Azure LLM inference traces of
# 2023 (the Splitwise paper's, an hour each) run at 5.4 requests/s (conversation) and 2.5 requests/s (code); the
# absolute level matters little (``simulate`` sizes a replica from the trace's peak), but it sets the Poisson noise.
WEEKDAY_REQUESTS_PER_SECOND = 5.0

# The daily cycle. Measured as the busiest hour-of-day's mean over the quietest one's: NASA-HTTP (1995, four
# weeks) 4.0, ServeGen's m_small model (Alibaba Model Studio, two weeks) 2.2, ServeGen m_mid 1.4; production LLM
# services report peaks of a few times their night-time trough. 3.0 sits in that range.
DAILY_PEAK_TO_TROUGH = 3.0
PEAK_HOUR = 14.0  # the middle of the busy day (UTC), as in NASA-HTTP's local time; the trough is at 02:00
DAILY_SECOND_HARMONIC = -0.25  # widens the daytime peak into a plateau and narrows the night trough (0: a cosine)

# The weekly cycle: NASA-HTTP's weekends carry 0.59 of its weekdays' traffic (0.46-0.84 day by day); ServeGen
# m_small's weekly cycle is milder. Enterprise and developer traffic (code completion) drops most on weekends.
WEEKEND_FACTOR = 0.65

# Bursts. NASA-HTTP's busiest minutes reach 8.5x its mean and 1.2% of its minutes are more than twice their hour's
# mean; in the Azure 2023 code trace the busiest minute of the hour is 3.9x the hour's mean. A burst here doubles
# the rate at its median (``burst_median_extra`` 1.0), a few times a day, and decays over about ten minutes.
BURSTS_PER_DAY = 3.0
BURST_MEDIAN_EXTRA = 1.0  # a burst's peak adds this multiple of the rate it lands on (median)
BURST_SIGMA = 0.5  # spread of the burst size (lognormal sigma): one in six bursts adds more than 1.65x
BURST_MAX_EXTRA = 8.0  # cap on one burst's extra multiple (NASA-HTTP's highest minute is 8.5x its mean)
BURST_MINUTES = 10.0  # mean decay time of a burst
# The bursty shape: hourly bursts, larger, on noisier traffic; the Azure 2023 code trace's minute counts have a
# coefficient of variation of 1.0 within its hour (the conversation trace's 0.28).
BURSTY_BURSTS_PER_DAY = 24.0
BURSTY_MEDIAN_EXTRA = 1.5

# Minute-to-minute noise about the cycle (beyond Poisson): its coefficient of variation and correlation time.
# NASA-HTTP's minute counts vary about their hour's mean by 0.37 (coefficient of variation), bursts included, of
# which Poisson explains 0.15; the Azure 2023 conversation trace's by 0.28 over its hour, trend included.
NOISE_CV = 0.15
BURSTY_NOISE_CV = 0.35
NOISE_MINUTES = 5.0

# The regime change: at 60% of the span the level ramps up by half over two hours and stays there. ServeGen
# m_small's daily mean moves from 0.8 to 1.2 of its two-week average (1.5x) within its 14 days; a new tenant or a
# launch moves a model's level like this, and a forecaster fitted on the weeks before must catch up.
REGIME_CHANGE_AT = 0.6
REGIME_SHIFT = 1.5
REGIME_RAMP_SECONDS = 2 * 3600

# Tokens per request, from the Azure LLM inference traces of 2023 (Splitwise, ISCA 2024): medians as published,
# means as measured on the public traces' sums. Code: prompts median 1,500, mean 2,048; outputs median 13, mean 28.
# Conversation: prompts median 1,020, mean 1,155; outputs median 129, mean 211. Code is 32% of their requests
# (2.5 of 7.9 requests/s). Each length is lognormal with that median and mean.
CODE_SHARE = 0.32
CODE_PROMPT_MEDIAN, CODE_PROMPT_MEAN = 1_500.0, 2_048.0
CODE_OUTPUT_MEDIAN, CODE_OUTPUT_MEAN = 13.0, 28.0
CONVERSATION_PROMPT_MEDIAN, CONVERSATION_PROMPT_MEAN = 1_020.0, 1_155.0
CONVERSATION_OUTPUT_MEDIAN, CONVERSATION_OUTPUT_MEAN = 129.0, 211.0

_DAY = 86_400
_WEEK = 7 * _DAY
_MONDAY_OFFSET_DAYS = 3  # 1970-01-01 was a Thursday: (days since the epoch + 3) % 7 is 0 on Mondays


@dataclass(frozen=True)
class Shape:
    """The knobs of one kind of traffic; :data:`SHAPES` names them."""

    peak_to_trough: float  # the daily cycle's peak over its trough (1: no daily cycle)
    weekend_factor: float  # Saturday and Sunday over a weekday (1: no weekly cycle)
    bursts_per_day: float
    burst_median_extra: float
    noise_cv: float
    regime_shift: float  # the level after the regime change over the level before (1: none)


SHAPES: dict[str, Shape] = {
    # Inference traffic as the constants above describe it.
    "diurnal": Shape(DAILY_PEAK_TO_TROUGH, WEEKEND_FACTOR, BURSTS_PER_DAY, BURST_MEDIAN_EXTRA, NOISE_CV,
                     REGIME_SHIFT),
    # The same cycles with hourly, larger bursts on noisier traffic: where a reactive margin must do the work.
    "bursty": Shape(DAILY_PEAK_TO_TROUGH, WEEKEND_FACTOR, BURSTY_BURSTS_PER_DAY, BURSTY_MEDIAN_EXTRA,
                    BURSTY_NOISE_CV, REGIME_SHIFT),
    # A constant level with the minute-to-minute noise alone: no cycle, burst or shift, nothing to foresee.
    "flat": Shape(1.0, 1.0, 0.0, BURST_MEDIAN_EXTRA, NOISE_CV, 1.0),
}

REAL_TRAFFIC_HINT = (
    "To replay real traffic: --trace FILE.csv (a trace CSV; 'predictive-autoscaler trace from-log ACCESS.log' makes "
    "one from a web server or gateway access log), or --deployment NS/NAME to read a Deployment's history from "
    "Prometheus ('predictive-autoscaler export --deployment NS/NAME' saves it as a CSV)."
)


def synth_name(shape: str = DEFAULT_SHAPE, seed: int = DEFAULT_SEED, days: float = DEFAULT_DAYS) -> str:
    """The trace's name, which says it is synthetic and how to make it again: ``synthetic:diurnal:seed=1:days=14``."""
    return f"synthetic:{shape}:seed={seed}:days={days:g}"


def describe(trace: Trace) -> str:
    """One sentence for a report: the traffic is synthetic, what it holds, and how to use real traffic instead."""
    return (f"The traffic is synthetic ({trace.name}: a daily and weekly cycle, bursts, a level shift at "
            f"{REGIME_CHANGE_AT:.0%} of the span, token counts; made by autoscaler/synth.py), not a real trace. "
            f"{REAL_TRAFFIC_HINT}")


def regime_change_time(start: int, days: float) -> int:
    """When the level starts to move: :data:`REGIME_CHANGE_AT` of the span after ``start``."""
    return start + round(REGIME_CHANGE_AT * days * _DAY)


def _daily(seconds_of_day: FloatArray, peak_to_trough: float) -> FloatArray:
    """The daily factor: peak over trough ``peak_to_trough``, mean 1 over a day."""
    def raw(s: FloatArray) -> FloatArray:
        theta = 2 * np.pi * (s / 3600 - PEAK_HOUR) / 24
        a = DAILY_SECOND_HARMONIC
        unit = np.cos(theta) + a * np.cos(2 * theta) - a  # from -1 (trough) to 1 (peak) for |a| <= 1/4
        out: FloatArray = np.exp(0.5 * math.log(peak_to_trough) * unit)
        return out

    day_mean = float(raw(np.arange(0, _DAY, 60, dtype=np.float64)).mean())
    return raw(seconds_of_day) / day_mean


def _weekly(times: FloatArray, weekend_factor: float) -> FloatArray:
    weekday = (np.floor(times / _DAY).astype(np.int64) + _MONDAY_OFFSET_DAYS) % 7
    return np.where(weekday >= 5, weekend_factor, 1.0)


def _regime(times: FloatArray, change: int, shift: float) -> FloatArray:
    progress = np.clip((times - change) / REGIME_RAMP_SECONDS, 0.0, 1.0)
    out: FloatArray = 1.0 + (shift - 1.0) * progress
    return out


def _noise(rng: np.random.Generator, minutes: int, cv: float) -> FloatArray:
    """Mean-1 lognormal factors per minute, their logs an AR(1) with correlation time :data:`NOISE_MINUTES`."""
    sigma = math.sqrt(math.log1p(cv * cv))
    phi = math.exp(-1.0 / NOISE_MINUTES)
    shocks = rng.standard_normal(minutes) * sigma * math.sqrt(1 - phi * phi)
    x = np.empty(minutes)
    previous = rng.standard_normal() * sigma  # the stationary distribution, so the first minutes are not special
    for i, shock in enumerate(shocks.tolist()):
        previous = phi * previous + shock
        x[i] = previous
    out: FloatArray = np.exp(x - sigma * sigma / 2)
    return out


def _bursts(rng: np.random.Generator, times: FloatArray, shape: Shape) -> FloatArray:
    """The burst factor on ``times`` (regular, ascending): 1 plus each burst's decaying extra."""
    out = np.ones_like(times)
    if shape.bursts_per_day <= 0 or len(times) == 0:
        return out
    first, dt = float(times[0]), float(times[1] - times[0]) if len(times) > 1 else 1.0
    span = float(times[-1] - first) + dt
    count = int(rng.poisson(shape.bursts_per_day * span / _DAY))
    onsets = first + rng.uniform(0.0, span, count)
    extras = np.minimum(shape.burst_median_extra * np.exp(BURST_SIGMA * rng.standard_normal(count)), BURST_MAX_EXTRA)
    taus = 60.0 * np.maximum(rng.exponential(BURST_MINUTES, count), 1.0)
    for onset, extra, tau in zip(onsets.tolist(), extras.tolist(), taus.tolist(), strict=True):
        lo = math.ceil((onset - first) / dt)
        hi = min(len(times), int((onset - first + 10 * tau) / dt) + 1)
        if lo < hi:
            out[lo:hi] += extra * np.exp(-(times[lo:hi] - onset) / tau)
    return out


def _lognormal_sums(rng: np.random.Generator, counts: np.ndarray, median: float, mean: float) -> FloatArray:
    """Per bin, the sum of ``counts[i]`` whole-token lengths drawn lognormal with this median and mean."""
    sigma = math.sqrt(2 * math.log(mean / median))
    lengths = np.maximum(1, np.rint(rng.lognormal(math.log(median), sigma, int(counts.sum())))).astype(np.int64)
    ends = np.cumsum(counts)
    totals = np.concatenate(([0], np.cumsum(lengths)))
    out: FloatArray = (totals[ends] - totals[ends - counts]).astype(np.float64)
    return out


def synth_trace(days: float = DEFAULT_DAYS, seed: int = DEFAULT_SEED, shape: str = DEFAULT_SHAPE,
                step_seconds: int = DEFAULT_STEP_SECONDS, start: int = START, *, tokens: bool = True) -> Trace:
    """A synthetic trace of ``days`` in ``step_seconds`` bins from ``start`` (see the module docstring).

    Requests and ``input_tokens``/``output_tokens`` per bin, no missing bin; named :func:`synth_name`. The same
    arguments give the same trace. ``ValueError`` for an unknown shape, or a span shorter than two bins.
    ``tokens=False``: the requests alone (the same requests: the token lengths are drawn after them), for callers
    that replay requests only; drawing a length for every request is most of the work.
    """
    if shape not in SHAPES:
        raise ValueError(f"unknown shape {shape!r}; choose from {', '.join(SHAPES)}")
    if not (math.isfinite(days) and days > 0):
        raise ValueError(f"days must be a positive number, got {days:g}")
    if step_seconds < 1:
        raise ValueError(f"the step must be at least a second, got {step_seconds}")
    bins = int(days * _DAY // step_seconds)
    if bins < 2:
        raise ValueError(f"{days:g} days hold fewer than two bins of {step_seconds}s")
    knobs = SHAPES[shape]
    rng = np.random.default_rng(seed)
    sub = math.gcd(step_seconds, 60)  # sub-grid: minutes split evenly, bins made of whole sub-steps
    per_bin = step_seconds // sub
    if bins * per_bin > MAX_TRACE_BINS:  # bounded before anything is allocated, as a trace file is
        raise ValueError(f"{days:g} days in {step_seconds}s bins are {bins * per_bin:,} sub-steps to generate, more "
                         f"than the {MAX_TRACE_BINS:,} a trace may hold; ask for fewer days")
    times = start + sub * np.arange(bins * per_bin, dtype=np.float64)  # each sub-step's start
    minute = ((times - start) // 60).astype(np.int64)
    rate = (WEEKDAY_REQUESTS_PER_SECOND
            * _daily(np.mod(times, _DAY), knobs.peak_to_trough)
            * _weekly(times, knobs.weekend_factor)
            * _regime(times, regime_change_time(start, days), knobs.regime_shift)
            * _noise(rng, int(minute[-1]) + 1, knobs.noise_cv)[minute]
            * _bursts(rng, times, knobs))
    expected = (rate * sub).reshape(bins, per_bin).sum(axis=1)
    counts = rng.poisson(expected).astype(np.int64)

    def series(per_bin_counts: np.ndarray) -> TrafficSeries:
        return TrafficSeries(per_bin_counts.astype(np.float64) / step_seconds, step_seconds, start)

    if not tokens:
        return trace_from_rates(synth_name(shape, seed, days), series(counts))
    code = rng.binomial(counts, CODE_SHARE).astype(np.int64)
    conversation = counts - code
    input_tokens = (_lognormal_sums(rng, code, CODE_PROMPT_MEDIAN, CODE_PROMPT_MEAN)
                    + _lognormal_sums(rng, conversation, CONVERSATION_PROMPT_MEDIAN, CONVERSATION_PROMPT_MEAN))
    output_tokens = (_lognormal_sums(rng, code, CODE_OUTPUT_MEDIAN, CODE_OUTPUT_MEAN)
                     + _lognormal_sums(rng, conversation, CONVERSATION_OUTPUT_MEDIAN, CONVERSATION_OUTPUT_MEAN))
    return trace_from_rates(synth_name(shape, seed, days), series(counts),
                            {"input_tokens": series(input_tokens), "output_tokens": series(output_tokens)})
