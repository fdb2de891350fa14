from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from autoscaler.traces import TraceError, bundled_trace_path, load_trace, parse_duration


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "t.csv"
    p.write_text(text)
    return p


def test_bundled_trace_loads_as_rates() -> None:
    trace = load_trace(bundled_trace_path())
    assert trace.step_seconds == 60
    assert len(trace.requests) == 20160
    # first bin of the NASA trace is 42 requests in a minute
    assert trace.requests.values[0] == pytest.approx(42 / 60)


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
