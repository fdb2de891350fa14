"""Read traffic traces (``timestamp,requests[,input_tokens,output_tokens]``) into rate series, and write them.

Why it exists: the backtest and the simulator replay operators' own history from CSV files, and
a trace is user input. Every way a file can be wrong gets one clear sentence in a
``TraceError`` (the CLI prints it and exits non-zero) instead of a pandas traceback or, worse, a
silently misaligned series.

Defined behaviour for messy files:
- missing required column, non-numeric, negative or infinite value, unsorted or duplicate timestamps,
  irregular steps that are not multiples of the base step, fewer than two rows: ``TraceError``;
- a directory, a binary file, a zip archive (an ``.xlsx``), text that is not UTF-8: ``TraceError``;
- absent rows (gaps on the regular grid): filled with ``NaN`` (missing, not zero);
- empty cells (and ``nan``): ``NaN``; the ``nan`` values are counted (``Trace.nan_values``) so that the commands
  can say how many became gaps (an empty cell is the format's own way to write a gap, ``nan`` is not);
- timestamps in milliseconds, microseconds or nanoseconds (after the year 2200 as seconds, or a step that is a
  whole number of seconds in milliseconds but no sensible bin in seconds): ``TraceError`` saying which unit
  they look like, since read as seconds they make bins of hours or a grid of millennia;
- a grid (first to last timestamp, in steps) of more than :data:`MAX_TRACE_BINS` bins: ``TraceError`` naming
  the span and the longest gap, checked before the grid is allocated (a stray row a year late, or a
  one-second row among minutes, must not cost gigabytes).
Accepted as they are: gzip-compressed files (``.csv.gz``; recognised by their magic bytes, whatever the
name), a UTF-8 byte-order mark (spreadsheet exports), UTF-16 with a byte-order mark.
The bin size is the smallest difference between consecutive timestamps.

Writing (``export``): :func:`write_trace` writes one row per bin, ``timestamp`` the bin's start, each column the
*count* in the bin (rate x step, the format's unit), a missing bin an empty cell (so a gap stays a gap, and the
grid is explicit). Counts are written with Python's shortest exact float spelling (a whole number when that reads
back as the same rate), so the file reads back to the same rates; but ``(rate x step) / step`` is not always
``rate`` in floating point (one rate in a dozen differs in its last bit at 60 s bins). So a trace made from rates
is built by :func:`trace_from_rates`, which does that arithmetic once: ``export`` (and ``trace synth``, ``trace
from-log``) writes its counts and ``backtest``/``simulate`` replay its rates, and a trace written then loaded is bit
for bit the trace replayed straight from the source.
"""

from __future__ import annotations

import csv
import gzip
import math
import zlib
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, TextIO

import numpy as np

from autoscaler.domain.demand import DemandUnit, TokenWeights, token_demand
from models.types import TrafficSeries

REQUIRED = ("timestamp", "requests")
TOKEN_COLUMNS = ("input_tokens", "output_tokens")

# The most bins a trace's grid may hold (first to last timestamp, in steps), so that any trace costs at most
# 80 MB a column (3 columns: 240 MB) before anything else is done with it: about 19 years of 1-minute bins, or
# 115 days of 1-second bins. Checked before the grid is allocated; ``trace from-log`` uses the same bound.
MAX_TRACE_BINS = 10_000_000

# A replay of a trace with more of its grid missing than this is refused by ``backtest`` and ``simulate``: it says
# more about a stray row or a wrong file than about the traffic (a gap is missing data, not zeros, so such a
# replay would mostly score nothing, or bill replicas held through the void).
MOSTLY_MISSING = 0.5

# Timestamps after this (2200-01-01T00:00:00Z) are not Unix seconds of a real trace: they are almost always
# milliseconds (a 2020s time in ms reads as the year ~55,000) or micro/nanoseconds.
LATEST_PLAUSIBLE_SECONDS = 7_258_118_400
# From this (1990-01-01) on, timestamps read as dates in seconds: their step is a step, not milliseconds.
EARLIEST_PLAUSIBLE_SECONDS = 631_152_000
_SUBSECOND_UNITS = ((1_000, "milliseconds"), (1_000_000, "microseconds"), (1_000_000_000, "nanoseconds"))


class TraceError(ValueError):
    """A trace file that cannot be used; the message is one line a person can act on."""


@dataclass(frozen=True)
class Trace:
    """A loaded trace: request rate and, when present, token rates, on one regular grid."""

    name: str
    requests: TrafficSeries
    tokens: dict[str, TrafficSeries]
    nan_values: int = 0  # cells written as ``nan`` (read as missing, like an empty cell)

    @property
    def step_seconds(self) -> int:
        return self.requests.step_seconds

    @property
    def duration_seconds(self) -> int:
        return len(self.requests) * self.requests.step_seconds


def _parse_float(raw: str, column: str, line: int, path: str) -> float:
    if raw.strip() == "":
        return math.nan
    try:
        value = float(raw)
    except ValueError:
        raise TraceError(f"{path}:{line}: column '{column}' has non-numeric value {raw!r}") from None
    if value < 0:
        raise TraceError(f"{path}:{line}: column '{column}' has negative value {raw!r}")
    if math.isinf(value):
        raise TraceError(f"{path}:{line}: column '{column}' has infinite value {raw!r}")
    return value


GZIP_MAGIC = b"\x1f\x8b"
ZIP_MAGIC = b"PK\x03\x04"


def open_text(p: Path, what: str = "trace file", errors: str = "strict") -> IO[str]:
    """The trace (or, ``what`` says, another text file) as text: gzip by its magic bytes, the encoding by its
    byte-order mark (default UTF-8), undecodable bytes handled by ``errors`` (as in :func:`open`).

    ``TraceError`` for what is not a text file: a zip archive (``.xlsx`` too), a directory, a missing file.
    """
    if p.is_dir():
        raise TraceError(f"{p}: is a directory, not a {what}")
    if not p.exists():
        raise TraceError(f"{p}: no such {what}")
    compressed = False  # until the magic bytes are read: an unreadable file is not a gzip error
    try:
        with p.open("rb") as fh:
            head = fh.read(4)
        compressed = head[:2] == GZIP_MAGIC
        if compressed:
            with gzip.open(p, "rb") as gz:
                head = gz.read(4)
    except OSError as exc:  # unreadable, or a truncated/corrupt gzip stream
        reason = "not a valid gzip file" if compressed else f"cannot read: {exc.strerror or exc}"
        raise TraceError(f"{p}: {reason}") from None
    except EOFError:
        raise TraceError(f"{p}: gzip file is truncated") from None
    if head.startswith(ZIP_MAGIC):
        if what != "trace file":
            raise TraceError(f"{p}: is a zip archive, not a {what}; unzip it first")
        raise TraceError(f"{p}: is a zip archive (a spreadsheet?), not a text CSV; export it as CSV")
    encoding = "utf-16" if head[:2] in (b"\xff\xfe", b"\xfe\xff") else "utf-8-sig"
    # Returned open: the caller closes it (``with open_text(p) as fh``).
    if compressed:
        return gzip.open(p, "rt", encoding=encoding, errors=errors, newline="")
    return p.open(encoding=encoding, errors=errors, newline="")


def _read_rows(fh: IO[str], p: Path) -> tuple[list[int], dict[str, list[float]], int]:
    """Timestamps, each column's values, and how many cells said ``nan`` (empty cells are not counted)."""
    reader = csv.reader(fh)
    try:
        header = [h.strip() for h in next(reader)]
    except StopIteration:
        raise TraceError(f"{p}: file is empty (expected header {','.join(REQUIRED)})") from None
    if any("\x00" in h for h in header):
        raise TraceError(f"{p}: not a text CSV (it contains NUL bytes)")
    missing = [c for c in REQUIRED if c not in header]
    if missing:
        hint = ""
        if len(header) == 1:
            for sep in (";", "\t", "|"):
                if sep in header[0]:
                    hint = f" (fields are separated by {sep!r}; use commas)"
                    break
        shown = ",".join(header)
        shown = shown if len(shown) <= 80 else shown[:77] + "..."
        raise TraceError(
            f"{p}: missing column(s) {', '.join(missing)}; header is {shown!r}{hint}, "
            f"expected timestamp,requests[,input_tokens,output_tokens]"
        )
    cols = {c: header.index(c) for c in (*REQUIRED, *TOKEN_COLUMNS) if c in header}
    ts: list[int] = []
    data: dict[str, list[float]] = {c: [] for c in cols if c != "timestamp"}
    nans = 0
    for lineno, row in enumerate(reader, start=2):
        if not row or all(not cell.strip() for cell in row):
            continue
        if len(row) < len(header):
            raise TraceError(f"{p}:{lineno}: expected {len(header)} fields, got {len(row)}")
        raw_ts = row[cols["timestamp"]].strip()
        try:
            t = float(raw_ts)
        except ValueError:
            shown_ts = raw_ts if len(raw_ts) <= 40 else raw_ts[:37] + "..."
            raise TraceError(f"{p}:{lineno}: timestamp {shown_ts!r} is not a number of seconds") from None
        if not math.isfinite(t) or t != int(t):
            raise TraceError(f"{p}:{lineno}: timestamp {raw_ts!r} is not an integer number of seconds")
        if abs(t) >= 2**62:  # past any unit of Unix time (and past what the grid's integers hold)
            raise TraceError(f"{p}:{lineno}: timestamp {raw_ts!r} is not a time in Unix seconds")
        ts.append(int(t))
        for c in data:
            raw = row[cols[c]]
            value = _parse_float(raw, c, lineno, str(p))
            if value != value and raw.strip():
                nans += 1
            data[c].append(value)
    return ts, data, nans


def load_trace(path: str | Path) -> Trace:
    """Load and validate a trace CSV. Raises ``TraceError`` with one clear line on bad input."""
    p = Path(path)
    with open_text(p) as fh:
        try:
            ts, data, nans = _read_rows(fh, p)
        except UnicodeDecodeError as exc:
            kind = "UTF-16" if "16" in exc.encoding else "UTF-8"
            raise TraceError(
                f"{p}: not a text CSV (binary, or not {kind} text: byte 0x{exc.object[exc.start]:02x})"
            ) from None
        except (OSError, EOFError, zlib.error):
            raise TraceError(f"{p}: not a valid gzip file (corrupt or truncated)") from None
        except csv.Error as exc:
            raise TraceError(f"{p}: not a text CSV ({exc})") from None
    if len(ts) < 2:
        raise TraceError(f"{p}: needs at least two rows of data, found {len(ts)}")
    t_arr = np.asarray(ts, dtype=np.int64)
    diffs = np.diff(t_arr)
    if np.any(diffs == 0):
        i = int(np.argmax(diffs == 0))
        raise TraceError(f"{p}: duplicate timestamp {t_arr[i]} (rows {i + 2} and {i + 3})")
    if np.any(diffs < 0):
        i = int(np.argmax(diffs < 0))
        raise TraceError(f"{p}: timestamps are not sorted ({t_arr[i]} is followed by {t_arr[i + 1]} at row {i + 3})")
    step = int(diffs.min())
    _check_seconds(p, t_arr, step)
    if np.any(diffs % step != 0):
        i = int(np.argmax(diffs % step != 0))
        raise TraceError(
            f"{p}: irregular timestamps: step {step}s inferred, but {t_arr[i]} -> {t_arr[i + 1]} is not a multiple"
        )
    n = int((t_arr[-1] - t_arr[0]) // step) + 1
    if n > MAX_TRACE_BINS:
        i = int(np.argmax(diffs))
        raise TraceError(
            f"{p}: its rows span {format_span(int(t_arr[-1] - t_arr[0]))} ({iso_time(int(t_arr[0]))} to "
            f"{iso_time(int(t_arr[-1]))}) in {format_span(step)} steps: {n:,} bins, more than the {MAX_TRACE_BINS:,} a "
            f"trace may hold; the longest gap is {format_span(int(diffs[i]))} between rows {i + 2} and {i + 3} "
            f"({t_arr[i]} -> {t_arr[i + 1]}): remove the stray rows or split the trace"
        )
    idx = ((t_arr - t_arr[0]) // step).astype(np.int64)

    def grid(column: str) -> TrafficSeries:
        out = np.full(n, np.nan)
        out[idx] = np.asarray(data[column], dtype=np.float64) / step
        return TrafficSeries(out, step, int(t_arr[0]))

    return Trace(
        name=p.name,
        requests=grid("requests"),
        tokens={c: grid(c) for c in TOKEN_COLUMNS if c in data},
        nan_values=nans,
    )


def iso_time(t: int) -> str:
    """Unix seconds as ``2024-05-01T12:00:00Z`` (or the year alone, past what a date can hold)."""
    try:
        return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    except (ValueError, OverflowError, OSError):
        return f"the year {1970 + t / 31_556_952:,.0f}"


def _check_seconds(p: Path, t: np.ndarray, step: int) -> None:
    """``TraceError`` when the timestamps are plainly not Unix seconds (see the module docstring)."""
    last = int(t[-1])
    if last > LATEST_PLAUSIBLE_SECONDS:
        for scale, unit in _SUBSECOND_UNITS:
            if last // scale <= LATEST_PLAUSIBLE_SECONDS:
                raise TraceError(
                    f"{p}: timestamps look like {unit} since 1970 ({last} read as seconds is {iso_time(last)}; as "
                    f"{unit}, {iso_time(last // scale)}); write seconds (divide by {scale:,})"
                )
        raise TraceError(f"{p}: timestamp {last} is {iso_time(last)} read as seconds; write Unix seconds")
    if int(t[0]) >= EARLIEST_PLAUSIBLE_SECONDS:
        return  # dates that read right in seconds: a step of whole hours (18000 s = 5 h) is a step, not ms
    for scale, unit in reversed(_SUBSECOND_UNITS):
        # A step that is a sensible bin (a divisor of an hour, or whole hours dividing a day) once divided by
        # ``scale``, but no whole divisor of a day in seconds: 60000 "seconds" are a minute in milliseconds.
        if step % scale == 0 and (3600 % (step // scale) == 0 or 86_400 % (step // scale) == 0):
            raise TraceError(
                f"{p}: timestamps look like {unit}: the step between rows is {step:,}s ({format_span(step)}) read as "
                f"seconds, {format_span(step // scale)} as {unit}; write seconds (divide by {scale:,})"
            )


def format_span(seconds: float) -> str:
    """``90`` -> ``'90s'``, ``900`` -> ``'15m'``, ``3600`` -> ``'1h'``, ``5400`` -> ``'1.5h'``, ``31_622_400`` ->
    ``'366d'``: the largest unit that fits, one decimal when not whole (for messages a person reads)."""
    for unit, size in (("d", 86_400), ("h", 3_600), ("m", 60)):
        if abs(seconds) >= size:
            value = seconds / size
            return f"{value:,.0f}{unit}" if value == int(value) else f"{value:,.1f}{unit}"
    return f"{seconds:g}s"


@dataclass(frozen=True)
class Gaps:
    """The missing bins (NaN) of a series: how many, and its longest run (a gap), to decide what a command does
    with them before a long run."""

    bins: int
    missing: int
    longest_bins: int
    longest_start: int  # Unix seconds of the longest gap's first bin (the series' start when there is none)
    step_seconds: int

    @property
    def share(self) -> float:
        return self.missing / self.bins if self.bins else 0.0

    @property
    def longest_seconds(self) -> int:
        return self.longest_bins * self.step_seconds

    def describe(self) -> str:
        """``'62% of the 4,321 bins are missing; the longest gap is 2d, from 2024-05-01T00:00:00Z'``."""
        text = f"{100 * self.share:.0f}% of the {self.bins:,} bins are missing"
        if self.longest_bins:
            text += f"; the longest gap is {format_span(self.longest_seconds)}, from {iso_time(self.longest_start)}"
        return text


def gaps(series: TrafficSeries) -> Gaps:
    """The missing bins of ``series`` and its longest gap (a run of NaN)."""
    missing = np.isnan(series.values)
    count = int(missing.sum())
    longest, start = 0, 0
    if count:
        edges = np.diff(np.concatenate(([0], missing.astype(np.int8), [0])))
        starts, ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
        i = int(np.argmax(ends - starts))
        longest, start = int(ends[i] - starts[i]), int(starts[i])
    return Gaps(len(series), count, longest, series.start + start * series.step_seconds, series.step_seconds)


def trace_from_rates(name: str, requests: TrafficSeries, tokens: dict[str, TrafficSeries] | None = None) -> Trace:
    """The trace that a CSV of these rates (written by :func:`write_trace`) loads as, bit for bit.

    Each rate becomes a count per bin (rate x step) and back (count / step): the loader's own arithmetic.
    Every series must be on ``requests``' grid; ``tokens`` keys are ``input_tokens``/``output_tokens``.
    """
    tokens = dict(tokens or {})
    unknown = sorted(set(tokens) - set(TOKEN_COLUMNS))
    if unknown:
        raise ValueError(f"unknown token column(s) {', '.join(unknown)}; expected {', '.join(TOKEN_COLUMNS)}")
    grid = (requests.start, requests.step_seconds, len(requests))

    def through_counts(series: TrafficSeries) -> TrafficSeries:
        if (series.start, series.step_seconds, len(series)) != grid:
            raise ValueError("every series of a trace must be on the same grid (start, step, length)")
        step = series.step_seconds
        return TrafficSeries((series.values * step) / step, step, series.start)

    return Trace(name, through_counts(requests), {c: through_counts(tokens[c]) for c in TOKEN_COLUMNS if c in tokens})


def _count_text(count: float, step: int) -> str:
    """Shortest text that reads back as the same rate (``count / step``); ``''`` for a missing bin; ``12`` rather
    than ``12.0``, and rather than ``12.000000000000002`` when ``12 / step`` is that same rate (a whole count
    divided by the step and multiplied back is not always whole in floating point)."""
    if not math.isfinite(count):
        return ""
    whole = round(count)
    if whole != count and abs(whole - count) < 1e-6 and whole / step == count / step:
        return str(whole)
    text = repr(float(count))
    return text[:-2] if text.endswith(".0") else text


def write_trace(trace: Trace, out: TextIO) -> int:
    """Write ``trace`` as CSV (``timestamp,requests[,input_tokens,output_tokens]``, counts per bin) to ``out``.

    One row per bin of the grid, a missing value an empty cell; :func:`load_trace` reads it back as ``trace``
    when ``trace`` came from :func:`trace_from_rates` (or from :func:`load_trace`). Returns the rows written.
    """
    step = trace.step_seconds
    columns = [trace.requests, *(trace.tokens[c] for c in TOKEN_COLUMNS if c in trace.tokens)]
    header = ["timestamp", "requests", *(c for c in TOKEN_COLUMNS if c in trace.tokens)]
    counts = [(s.values * step).tolist() for s in columns]
    out.write(",".join(header) + "\n")
    start = trace.requests.start
    for i in range(len(trace.requests)):
        out.write(",".join([str(start + i * step), *(_count_text(c[i], step) for c in counts)]) + "\n")
    return len(trace.requests)


def demand_series(trace: Trace, unit: DemandUnit, weights: TokenWeights, source: str | None = None) -> TrafficSeries:
    """The series a replay sizes on: ``trace.requests``, or weighted tokens/s (``autoscaler.domain.demand``).

    ``TraceError`` naming the file (``source``, else the trace's name) and the missing columns when ``unit`` is
    tokens and the trace has no token columns (only the columns with a non-zero weight are needed).
    """
    if unit is DemandUnit.REQUESTS:
        return trace.requests
    needed = [c for c, w in zip(TOKEN_COLUMNS, (weights.input, weights.output), strict=True) if w]
    missing = [c for c in needed if c not in trace.tokens]
    if missing:
        raise TraceError(f"{source or trace.name}: --demand tokens needs column(s) {', '.join(missing)}, which the "
                         f"trace does not have (it has: {', '.join(['requests', *trace.tokens])})")
    nan = np.full(len(trace.requests), np.nan)
    values = token_demand(trace.tokens["input_tokens"].values if weights.input else nan,
                          trace.tokens["output_tokens"].values if weights.output else nan, weights)
    return TrafficSeries(values, trace.step_seconds, trace.requests.start)


def parse_duration(text: str) -> int:
    """``'15m'``, ``'90s'``, ``'2h'``, ``'1d'`` or plain seconds -> seconds (positive int)."""
    s = text.strip().lower()
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
    try:
        value = float(s[:-1]) * units[s[-1]] if s and s[-1] in units else float(s)
    except ValueError:
        raise ValueError(f"invalid duration {text!r} (use e.g. 90s, 15m, 2h, 1d)") from None
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"invalid duration {text!r}: must be positive")
    return round(value)
