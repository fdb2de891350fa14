from __future__ import annotations

import gzip
import io
import zipfile
from pathlib import Path

import numpy as np
import pytest

from autoscaler import traces
from autoscaler.traces import TraceError, format_span, gaps, load_trace, parse_duration, trace_from_rates, write_trace
from models.types import TrafficSeries


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "t.csv"
    p.write_text(text)
    return p


@pytest.mark.parametrize("step", [60, 90, 600, 3600])
def test_whole_counts_are_written_whole_and_read_back_as_the_same_rates(tmp_path: Path, step: int) -> None:
    # (count / step) * step is not always the count in floating point; the file still says 7, not 7.000000000000001
    counts = np.arange(0, 5000, dtype=np.float64)
    assert np.any((counts / step) * step != counts)  # the case this guards exists at this step
    trace = trace_from_rates("t", TrafficSeries(counts / step, step, 1_700_000_000))
    out = io.StringIO()
    write_trace(trace, out)
    rows = out.getvalue().splitlines()[1:]
    assert [row.split(",")[1] for row in rows] == [str(int(c)) for c in counts]
    p = tmp_path / "t.csv"
    p.write_text(out.getvalue())
    assert np.array_equal(load_trace(p).requests.values, trace.requests.values)


def test_a_count_that_is_not_whole_keeps_its_exact_spelling(tmp_path: Path) -> None:
    rates = np.array([0.123, 1 / 7, 2.5e-9, 1e6 / 7])
    trace = trace_from_rates("t", TrafficSeries(rates, 60, 0))
    out = io.StringIO()
    write_trace(trace, out)
    written = [row.split(",")[1] for row in out.getvalue().splitlines()[1:]]
    assert all("." in w or "e" in w for w in written)  # none of them rounded to a whole count
    p = tmp_path / "t.csv"
    p.write_text(out.getvalue())
    assert np.array_equal(load_trace(p).requests.values, trace.requests.values)


def test_gaps_become_nan_and_tokens_are_read(tmp_path: Path) -> None:
    p = write(tmp_path, "timestamp,requests,input_tokens,output_tokens\n0,6,60,6\n60,12,120,12\n180,0,0,0\n")
    trace = load_trace(p)
    assert trace.requests.values.tolist()[:2] == [0.1, 0.2]
    assert np.isnan(trace.requests.values[2])
    assert trace.requests.values[3] == 0.0
    assert set(trace.tokens) == {"input_tokens", "output_tokens"}


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("time,requests\n0,1\n60,2\n", "missing column(s) timestamp"),
        ("timestamp,requests\n60,1\n0,2\n", "not sorted"),
        ("timestamp,requests\n0,1\n0,2\n", "duplicate timestamp 0"),
        ("timestamp,requests\n0,1\n60,abc\n", "non-numeric"),
        ("timestamp,requests\n0,1\n60,-3\n", "negative"),
        ("timestamp,requests\n0,1\n", "at least two rows"),
        ("timestamp,requests\n0,1\n60,1\n150,1\n", "irregular"),
        ("", "empty"),
    ],
)
def test_bad_traces_raise_one_clear_line(tmp_path: Path, text: str, needle: str) -> None:
    with pytest.raises(TraceError) as info:
        load_trace(write(tmp_path, text))
    assert needle in str(info.value)
    assert "\n" not in str(info.value)


def test_parse_duration() -> None:
    assert parse_duration("15m") == 900
    assert parse_duration("90s") == 90
    assert parse_duration("2h") == 7200
    assert parse_duration("120") == 120
    with pytest.raises(ValueError, match="invalid duration"):
        parse_duration("soon")
    with pytest.raises(ValueError, match="positive"):
        parse_duration("0m")


# -- files as a new user has them --------------------------------------------------------------------------

CSV = "timestamp,requests\n0,6\n60,12\n120,18\n"
LONG_CSV = "timestamp,requests\n" + "".join(f"{60 * i},{i * 7919 % 1000}\n" for i in range(2000))


@pytest.mark.parametrize("name", ["t.csv.gz", "t.csv"])  # gzip is recognised by its magic bytes, not its name
def test_gzipped_traces_are_read(tmp_path: Path, name: str) -> None:
    p = tmp_path / name
    p.write_bytes(gzip.compress(CSV.encode()))
    assert load_trace(p).requests.values.tolist() == [0.1, 0.2, 0.3]


@pytest.mark.parametrize(
    "data",
    [b"\xef\xbb\xbf" + CSV.encode(), CSV.encode("utf-16"), gzip.compress(b"\xef\xbb\xbf" + CSV.encode())],
    ids=["utf8-bom", "utf16-bom", "gzip-utf8-bom"],
)
def test_spreadsheet_exports_with_a_byte_order_mark_are_read(tmp_path: Path, data: bytes) -> None:
    p = tmp_path / "export.csv"
    p.write_bytes(data)
    assert load_trace(p).requests.values.tolist() == [0.1, 0.2, 0.3]


def _zip() -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("xl/workbook.xml", "<workbook/>")
    return buf.getvalue()


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        (bytes(range(256)) * 8, "not a text CSV"),
        (b"\x89PNG\r\n\x1a\n" + bytes(200), "not a text CSV"),
        ("timestamp,requests\n0,1\n60,2\n# café\n".encode("latin-1"), "not a text CSV"),
        (_zip(), "zip archive"),
        (gzip.compress(LONG_CSV.encode())[:300], "not a valid gzip file"),
        (gzip.compress(CSV.encode())[:12], "truncated"),
        (b"timestamp;requests\n0;1\n60;2\n", "separated by ';'"),
        (b"timestamp,requests\n0,1\n60,inf\n", "infinite value 'inf'"),
    ],
    ids=["binary", "png", "latin1", "xlsx", "corrupt-gzip", "truncated-gzip", "semicolons", "infinite"],
)
def test_files_that_are_not_trace_csvs_are_one_line(tmp_path: Path, data: bytes, needle: str) -> None:
    p = tmp_path / "upload.csv"
    p.write_bytes(data)
    with pytest.raises(TraceError) as info:
        load_trace(p)
    message = str(info.value)
    assert needle in message
    assert str(p) in message
    assert "\n" not in message


def test_a_directory_is_not_a_trace(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="is a directory"):
        load_trace(tmp_path)


# -- timestamps that are not seconds, grids that would not fit, files that cannot be read ------------------------

MINUTES = [1_700_000_000 + 60 * i for i in range(5)]


@pytest.mark.parametrize(("scale", "unit"), [(1_000, "milliseconds"), (1_000_000, "microseconds"),
                                             (1_000_000_000, "nanoseconds")])
def test_timestamps_after_2200_say_which_unit_they_look_like(tmp_path: Path, scale: int, unit: str) -> None:
    p = write(tmp_path, "timestamp,requests\n" + "".join(f"{t * scale},5\n" for t in MINUTES))
    with pytest.raises(TraceError) as info:
        load_trace(p)
    message = str(info.value)
    assert f"timestamps look like {unit} since 1970" in message
    assert f"divide by {scale:,}" in message
    assert "\n" not in message


def test_millisecond_offsets_are_caught_by_their_step(tmp_path: Path) -> None:
    # offsets from 0 in milliseconds are not in the future; a step of 60,000 "seconds" (16.7h) is a minute in ms
    p = write(tmp_path, "timestamp,requests\n" + "".join(f"{60_000 * i},5\n" for i in range(5)))
    with pytest.raises(TraceError, match="look like milliseconds: the step between rows is 60,000s"):
        load_trace(p)


@pytest.mark.parametrize("step", [1, 15, 60, 300, 3600, 18_000, 36_000, 86_400])
def test_ordinary_steps_in_seconds_are_not_taken_for_milliseconds(tmp_path: Path, step: int) -> None:
    p = write(tmp_path, "timestamp,requests\n" + "".join(f"{1_700_006_400 + step * i},5\n" for i in range(5)))
    assert load_trace(p).step_seconds == step


def test_a_grid_larger_than_the_bound_is_refused_before_it_is_allocated(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a stray row 10^9 seconds after one-second rows: a grid of 8 GB a column
    p = write(tmp_path, "timestamp,requests\n0,1\n1,1\n1000000000,1\n")

    def no_grid(*_: object, **__: object) -> None:
        raise AssertionError("the grid was allocated")

    monkeypatch.setattr(np, "full", no_grid)  # the numpy module autoscaler.traces uses
    with pytest.raises(TraceError) as info:
        load_trace(p)
    message = str(info.value)
    assert f"more than the {traces.MAX_TRACE_BINS:,} a trace may hold" in message
    assert "the longest gap is" in message
    assert "between rows 3 and 4" in message


def test_the_bound_is_the_number_of_bins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(traces, "MAX_TRACE_BINS", 10)
    assert len(load_trace(write(tmp_path, "timestamp,requests\n0,1\n60,1\n540,1\n")).requests) == 10
    with pytest.raises(TraceError, match="11 bins, more than the 10"):
        load_trace(write(tmp_path, "timestamp,requests\n0,1\n60,1\n600,1\n"))


def test_an_unreadable_file_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # root reads a chmod 000 file: refuse the open itself, as the kernel does for anyone else
    p = write(tmp_path, CSV)
    real_open = Path.open

    def refuse(self: Path, *args: object, **kwargs: object) -> object:
        if self == p:
            raise PermissionError(13, "Permission denied", str(self))
        return real_open(self, *args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr(Path, "open", refuse)
    with pytest.raises(TraceError) as info:
        load_trace(p)
    assert str(info.value) == f"{p}: cannot read: Permission denied"


@pytest.mark.skipif(not Path("/proc/self/mem").exists(), reason="needs Linux's /proc/self/mem (reading it fails)")
def test_a_file_whose_read_fails_is_one_line() -> None:
    with pytest.raises(TraceError, match="/proc/self/mem: cannot read: "):
        load_trace("/proc/self/mem")


def test_nan_values_are_counted_and_empty_cells_are_not(tmp_path: Path) -> None:
    p = write(tmp_path, "timestamp,requests,input_tokens,output_tokens\n0,6,nan,6\n60,NaN,,12\n120,,1,1\n180,1,1,1\n")
    trace = load_trace(p)
    assert trace.nan_values == 2
    assert np.isnan(trace.requests.values[1:3]).all()
    assert load_trace(write(tmp_path, "timestamp,requests\n0,6\n60,\n120,1\n")).nan_values == 0


def test_gaps_name_the_missing_share_and_the_longest_run() -> None:
    values = np.array([1, np.nan, 2, np.nan, np.nan, np.nan, 3, 4], dtype=float)
    found = gaps(TrafficSeries(values, 60, 1_700_000_000))
    assert (found.bins, found.missing, found.longest_bins) == (8, 4, 3)
    assert found.longest_start == 1_700_000_000 + 3 * 60
    assert found.longest_seconds == 180
    assert found.describe() == "50% of the 8 bins are missing; the longest gap is 3m, from 2023-11-14T22:16:20Z"
    none = gaps(TrafficSeries(np.ones(4), 60, 0))
    assert (none.missing, none.longest_bins, none.share) == (0, 0, 0.0)


@pytest.mark.parametrize(("seconds", "text"), [(45, "45s"), (900, "15m"), (5400, "1.5h"), (86_400, "1d"),
                                               (365 * 86_400, "365d")])
def test_format_span(seconds: int, text: str) -> None:
    assert format_span(seconds) == text
