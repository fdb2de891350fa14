"""Web server and gateway access logs read as traffic: one request per line, counted per bin.

Why it exists: the traffic worth replaying is an operator's own, and the record most services already keep is an
access log (nginx, Apache, an API gateway, an inference router), not a metrics history. ``trace from-log`` turns
one into a trace CSV (``timestamp,requests[,input_tokens,output_tokens]``) that ``backtest`` and ``simulate``
replay with ``--trace``. A public log works the same way: the NASA Kennedy Space Center HTTP logs of July 1995
(Common Log Format) become the per-minute NASA trace the benchmarks use.

Formats (``--format``; by default detected from the first :data:`DETECT_LINES` non-blank lines, the format most of
them parse in):

* ``clf``, the Common Log Format: ``host ident user [01/Jul/1995:00:00:01 -0400] "GET / HTTP/1.0" 200 1839``;
* ``combined``, the Combined Log Format: the same followed by ``"referer" "user-agent"`` (and anything after);
* ``json``, JSON lines: one object a line with a timestamp in ``--timestamp-field`` (default: the first of
  :data:`TIME_FIELDS` present; a dotted name reaches into nested objects), as ISO 8601 text (a time without an
  offset is UTC), as the access log's own ``01/Jul/1995:00:00:01 -0400``, or as a Unix epoch number (or numeric
  text) in seconds, milliseconds, microseconds or nanoseconds, told apart by size. When every such line also
  carries prompt and completion token counts (:data:`INPUT_TOKEN_FIELDS`, :data:`OUTPUT_TOKEN_FIELDS`, e.g. an
  OpenAI-style ``usage`` object), the trace gets ``input_tokens``/``output_tokens``.

A line that does not parse in the format (garbled, truncated, a stray header) is skipped and counted, never fatal;
a log with no line that parses is one ``TraceError``. Timezone offsets are applied, so timestamps are UTC.

Binning: a request belongs to the bin ``[k x step, (k + 1) x step)`` (Unix seconds) that holds its time; the trace
runs from the first request's bin to the last one's, and **a bin without a request in between is zero**, not a
gap: an access log writes a line for every request, so a minute without a line is a minute without a request
(unlike a metrics history, where a missing sample is missing data). Lines need not be in time order.
"""

from __future__ import annotations

import calendar
import json
import math
import re
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from autoscaler.traces import MAX_TRACE_BINS, Trace, TraceError, iso_time, open_text, trace_from_rates
from models.types import TrafficSeries

FORMATS = ("clf", "combined", "json")
FORMAT_NAMES = {"clf": "CLF", "combined": "Combined Log Format", "json": "JSON lines with a timestamp"}
DETECT_LINES = 100
TIME_FIELDS = ("time", "timestamp", "@timestamp", "ts", "time_local", "time_iso8601", "datetime", "date")
INPUT_TOKEN_FIELDS = ("prompt_tokens", "input_tokens", "usage.prompt_tokens", "usage.input_tokens")
OUTPUT_TOKEN_FIELDS = ("completion_tokens", "output_tokens", "usage.completion_tokens", "usage.output_tokens")
MAX_BINS = MAX_TRACE_BINS  # a log spanning more bins is refused (a stray year-1970 line, or a tiny --step)

_CORE = r'^\S+ \S+ \S+ \[(?P<time>[^\]]+)\] "(?P<request>.*{lazy})" (?P<status>\d{{3}}) (?P<bytes>\d+|-)'
CLF_LINE = re.compile(_CORE.format(lazy="") + r"\s*$")
COMBINED_LINE = re.compile(_CORE.format(lazy="?") + r' "(?P<referer>[^"]*)" "(?P<agent>.*?)"(?:\s.*)?$')
_CLF_TIME = re.compile(r"^(\d{1,2})/([A-Za-z]{3})/(\d{4}):(\d{2}):(\d{2}):(\d{2})(?:\s*([+-])(\d{2}):?(\d{2}))?$")
_MONTHS = {m.lower(): i for i, m in enumerate(calendar.month_abbr) if m}
_NUMBER = re.compile(r"^[+-]?\d+(?:\.\d*)?(?:[eE][+-]?\d+)?$")


@dataclass
class ParsedLog:
    """What a log held: each parsed request's time (Unix seconds) and, where its line had them, its tokens."""

    format: str
    lines: int = 0  # non-blank lines read
    times: list[float] = field(default_factory=list)
    input_tokens: list[float] = field(default_factory=list)  # per parsed line, NaN where the line had none
    output_tokens: list[float] = field(default_factory=list)
    first_skipped: str | None = None  # the first line that did not parse, for the error message

    @property
    def skipped(self) -> int:
        return self.lines - len(self.times)

    @property
    def has_tokens(self) -> bool:
        """Every parsed line carried both token counts."""
        return bool(self.times) and not (np.isnan(self.input_tokens).any() or np.isnan(self.output_tokens).any())

    @property
    def lines_with_tokens(self) -> int:
        return int(np.sum(np.isfinite(self.input_tokens) & np.isfinite(self.output_tokens))) if self.times else 0


_day_cache: dict[tuple[int, int, int], int] = {}


def parse_clf_time(text: str) -> float | None:
    """``01/Jul/1995:00:00:01 -0400`` -> Unix seconds (UTC), or ``None``. No offset means UTC."""
    m = _CLF_TIME.match(text.strip())
    if m is None:
        return None
    day, mon, year, hh, mm, ss, sign, tzh, tzm = m.groups()
    month = _MONTHS.get(mon.lower())
    if month is None:
        return None
    key = (int(year), month, int(day))
    midnight = _day_cache.get(key)
    if midnight is None:
        try:
            midnight = calendar.timegm(datetime(key[0], key[1], key[2], tzinfo=UTC).timetuple())
        except ValueError:  # 31/Feb
            return None
        _day_cache[key] = midnight
    h, mi, s = int(hh), int(mm), int(ss)
    if h > 23 or mi > 59 or s > 60:
        return None
    offset = 0 if sign is None else (1 if sign == "+" else -1) * (int(tzh) * 3600 + int(tzm) * 60)
    return float(midnight + h * 3600 + mi * 60 + s - offset)


def _epoch(number: float) -> float | None:
    """An epoch number in seconds, milliseconds, microseconds or nanoseconds (by size) -> seconds."""
    if not math.isfinite(number) or number < 0:
        return None
    for scale in (1.0, 1e3, 1e6, 1e9):
        if number < 1e11 * scale:  # 1e11 s is the year 5138
            return number / scale
    return None


def parse_time_value(value: Any) -> float | None:
    """A JSON timestamp (ISO 8601 text, CLF time text, epoch number or numeric text) -> Unix seconds, or ``None``."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return _epoch(float(value))
    if not isinstance(value, str):
        return None
    text = value.strip()
    if _NUMBER.match(text):
        return _epoch(float(text))
    if "/" in text:
        return parse_clf_time(text)
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.timestamp()


def _lookup(obj: dict[str, Any], name: str) -> Any:
    """``obj[name]``, or through nested objects for a dotted name; ``None`` when absent."""
    if name in obj:
        return obj[name]
    value: Any = obj
    for part in name.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def _count(obj: dict[str, Any], names: tuple[str, ...]) -> float:
    for name in names:
        value = _lookup(obj, name)
        if isinstance(value, bool) or value is None:
            continue
        if isinstance(value, str) and _NUMBER.match(value.strip()):
            value = float(value)
        if isinstance(value, int | float) and math.isfinite(value) and value >= 0:
            return float(value)
    return math.nan


def parse_line(line: str, fmt: str, time_field: str | None = None) -> tuple[float, float, float] | None:
    """One log line in format ``fmt`` -> ``(unix seconds, input tokens, output tokens)`` (NaN tokens where the line
    has none), or ``None`` when the line is not in that format."""
    if fmt == "json":
        text = line.strip()
        if not text.startswith("{"):
            return None
        try:
            obj = json.loads(text)
        except (ValueError, RecursionError):
            return None
        if not isinstance(obj, dict):
            return None
        if time_field is not None:
            raw = _lookup(obj, time_field)
        else:
            raw = next((v for v in (_lookup(obj, f) for f in TIME_FIELDS) if v is not None), None)
        t = None if raw is None else parse_time_value(raw)
        if t is None:
            return None
        return t, _count(obj, INPUT_TOKEN_FIELDS), _count(obj, OUTPUT_TOKEN_FIELDS)
    pattern = CLF_LINE if fmt == "clf" else COMBINED_LINE
    m = pattern.match(line)
    if m is None:
        return None
    t = parse_clf_time(m.group("time"))
    return None if t is None else (t, math.nan, math.nan)


def detect_format(lines: Iterable[str], time_field: str | None = None) -> str | None:
    """The format most of ``lines`` parse in (``combined`` before ``clf`` before ``json`` on a tie), or ``None``."""
    sample = list(lines)
    scores = {fmt: sum(parse_line(line, fmt, time_field) is not None for line in sample) for fmt in
              ("combined", "clf", "json")}
    best = max(scores, key=lambda fmt: scores[fmt])
    return best if scores[best] else None


def _non_blank(fh: Iterable[str]) -> Iterator[str]:
    for line in fh:
        stripped = line.rstrip("\r\n")
        if stripped.strip():
            yield stripped


def read_log(path: str | Path, fmt: str | None = None, time_field: str | None = None) -> ParsedLog:
    """Parse an access log (plain or gzip); ``fmt`` ``None`` detects it. ``TraceError`` when nothing parses."""
    p = Path(path)
    if fmt is not None and fmt not in FORMATS:
        raise TraceError(f"unknown log format {fmt!r}; choose from {', '.join(FORMATS)}")
    try:
        with open_text(p, what="log file", errors="replace") as fh:
            lines = _non_blank(fh)
            head = [line for _, line in zip(range(DETECT_LINES), lines, strict=False)]
            if not head:
                raise TraceError(f"{p}: the log is empty (no line to count)")
            chosen = fmt if fmt is not None else detect_format(head, time_field)
            if chosen is None:
                raise TraceError(f"{p}: no line is an access log entry (CLF, Combined Log Format, or JSON with a "
                                 f"{_time_field_text(time_field)}); the first line is {_shown(head[0])}")
            parsed = ParsedLog(chosen)
            for line in _chain(head, lines):
                parsed.lines += 1
                entry = parse_line(line, chosen, time_field)
                if entry is None:
                    if parsed.first_skipped is None:
                        parsed.first_skipped = line
                    continue
                parsed.times.append(entry[0])
                parsed.input_tokens.append(entry[1])
                parsed.output_tokens.append(entry[2])
    except (OSError, EOFError, zlib.error):
        raise TraceError(f"{p}: not a valid gzip file (corrupt or truncated)") from None
    if not parsed.times:
        raise TraceError(f"{p}: none of its {parsed.lines:,} lines is {FORMAT_NAMES[parsed.format]}"
                         f"{_field_note(parsed.format, time_field)}; the first line is {_shown(head[0])}")
    return parsed


def _chain(head: list[str], rest: Iterator[str]) -> Iterator[str]:
    yield from head
    yield from rest


def _time_field_text(time_field: str | None) -> str:
    return f"timestamp in {time_field!r}" if time_field else f"timestamp field: {', '.join(TIME_FIELDS)}"


def _field_note(fmt: str, time_field: str | None) -> str:
    return f" (timestamp field {time_field!r})" if fmt == "json" and time_field else ""


def _shown(line: str) -> str:
    return repr(line if len(line) <= 80 else line[:77] + "...")


def log_trace(parsed: ParsedLog, step_seconds: int, name: str) -> Trace:
    """Requests (and, when every line had them, tokens) per ``step_seconds`` bin, zeros between requests."""
    if step_seconds < 1:
        raise ValueError(f"the step must be at least a second, got {step_seconds}")
    bins = np.floor(np.asarray(parsed.times, dtype=np.float64) / step_seconds).astype(np.int64)
    first, last = int(bins.min()), int(bins.max())
    n = last - first + 1
    if n < 2:  # what simulate and backtest would refuse: say it here, before writing a file nothing can replay
        raise TraceError(f"{name}: every request falls in one {step_seconds}s bin ({iso_time(first * step_seconds)}); "
                         "a trace needs at least two: use a smaller --step or a longer log")
    if n > MAX_BINS:
        span = f"{iso_time(first * step_seconds)} to {iso_time(last * step_seconds)}"
        raise TraceError(f"{name}: its requests span {span}, "
                         f"{n:,} bins of {step_seconds}s (at most {MAX_BINS:,}); use a larger --step, or remove "
                         "the lines with stray times")
    index = bins - first
    start = first * step_seconds

    def series(weights: list[float] | None) -> TrafficSeries:
        counts = np.bincount(index, weights=weights, minlength=n).astype(np.float64)
        return TrafficSeries(counts / step_seconds, step_seconds, start)

    tokens = ({"input_tokens": series(parsed.input_tokens), "output_tokens": series(parsed.output_tokens)}
              if parsed.has_tokens else None)
    return trace_from_rates(name, series(None), tokens)


