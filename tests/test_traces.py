from __future__ import annotations

import gzip
import io
import zipfile
from pathlib import Path

import numpy as np
import pytest

from autoscaler.traces import TraceError, load_trace, parse_duration, trace_from_rates, write_trace
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
