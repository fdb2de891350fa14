"""Read traffic traces (``timestamp,requests[,input_tokens,output_tokens]``) into rate series.

Why it exists: the backtest and the simulator replay operators' own history from CSV files, and
a trace is user input. Every way a file can be wrong gets one clear sentence in a
``TraceError`` (the CLI prints it and exits non-zero) instead of a pandas traceback or, worse, a
silently misaligned series.

Defined behaviour for messy files:
- missing required column, non-numeric or negative value, unsorted or duplicate timestamps,
  irregular steps that are not multiples of the base step, fewer than two rows: ``TraceError``;
- absent rows (gaps on the regular grid): filled with ``NaN`` (missing, not zero);
- empty cells: ``NaN``.
The bin size is the smallest difference between consecutive timestamps.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np

from models.types import TrafficSeries

REQUIRED = ("timestamp", "requests")
TOKEN_COLUMNS = ("input_tokens", "output_tokens")
BUNDLED_TRACE = "nasa_http_1995_jul_2w_1min.csv"


class TraceError(ValueError):
    """A trace file that cannot be used; the message is one line a person can act on."""


@dataclass(frozen=True)
class Trace:
    """A loaded trace: request rate and, when present, token rates, on one regular grid."""

    name: str
    requests: TrafficSeries
    tokens: dict[str, TrafficSeries]

    @property
    def step_seconds(self) -> int:
        return self.requests.step_seconds

    @property
    def duration_seconds(self) -> int:
        return len(self.requests) * self.requests.step_seconds


def bundled_trace_path() -> Path:
    """Path of the trace shipped with the package (used when no ``--trace`` is given)."""
    return Path(str(resources.files("autoscaler") / "data" / BUNDLED_TRACE))


def _parse_float(raw: str, column: str, line: int, path: str) -> float:
    if raw.strip() == "":
        return math.nan
    try:
        value = float(raw)
    except ValueError:
        raise TraceError(f"{path}:{line}: column '{column}' has non-numeric value {raw!r}") from None
    if value < 0:
        raise TraceError(f"{path}:{line}: column '{column}' has negative value {raw!r}")
    return value


def load_trace(path: str | Path) -> Trace:
    """Load and validate a trace CSV. Raises ``TraceError`` with one clear line on bad input."""
    p = Path(path)
    if not p.is_file():
        raise TraceError(f"{p}: no such trace file")
    with p.open(newline="") as fh:
        reader = csv.reader(fh)
        try:
            header = [h.strip() for h in next(reader)]
        except StopIteration:
            raise TraceError(f"{p}: file is empty (expected header {','.join(REQUIRED)})") from None
        missing = [c for c in REQUIRED if c not in header]
        if missing:
            raise TraceError(
                f"{p}: missing column(s) {', '.join(missing)}; header is {','.join(header)!r}, "
                f"expected timestamp,requests[,input_tokens,output_tokens]"
            )
        cols = {c: header.index(c) for c in (*REQUIRED, *TOKEN_COLUMNS) if c in header}
        ts: list[int] = []
        data: dict[str, list[float]] = {c: [] for c in cols if c != "timestamp"}
        for lineno, row in enumerate(reader, start=2):
            if not row or all(not cell.strip() for cell in row):
                continue
            if len(row) < len(header):
                raise TraceError(f"{p}:{lineno}: expected {len(header)} fields, got {len(row)}")
            raw_ts = row[cols["timestamp"]].strip()
            try:
                t = float(raw_ts)
            except ValueError:
                raise TraceError(f"{p}:{lineno}: timestamp {raw_ts!r} is not a number of seconds") from None
            if not math.isfinite(t) or t != int(t):
                raise TraceError(f"{p}:{lineno}: timestamp {raw_ts!r} is not an integer number of seconds")
            ts.append(int(t))
            for c in data:
                data[c].append(_parse_float(row[cols[c]], c, lineno, str(p)))
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
    if np.any(diffs % step != 0):
        i = int(np.argmax(diffs % step != 0))
        raise TraceError(
            f"{p}: irregular timestamps: step {step}s inferred, but {t_arr[i]} -> {t_arr[i + 1]} is not a multiple"
        )
    n = int((t_arr[-1] - t_arr[0]) // step) + 1
    idx = ((t_arr - t_arr[0]) // step).astype(np.int64)

    def grid(column: str) -> TrafficSeries:
        out = np.full(n, np.nan)
        out[idx] = np.asarray(data[column], dtype=np.float64) / step
        return TrafficSeries(out, step, int(t_arr[0]))

    return Trace(
        name=p.name,
        requests=grid("requests"),
        tokens={c: grid(c) for c in TOKEN_COLUMNS if c in data},
    )


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
