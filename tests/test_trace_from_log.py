"""``predictive-autoscaler trace from-log``: access logs (CLF, Combined, JSON lines; plain or gzip) into traces.

The logs are written here, in ``tmp_path``, from request times chosen by each test; the expected counts per bin
are computed from those times (in UTC, whatever offset a line carries), never copied from the command's output.
"""

from __future__ import annotations

import gzip
import json
from collections import Counter
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pytest

from autoscaler.access_log import parse_clf_time, parse_time_value
from autoscaler.cli import main
from autoscaler.synth import synth_trace
from autoscaler.traces import load_trace

T0 = datetime(1995, 7, 1, 0, 0, 1, tzinfo=timezone(timedelta(hours=-4)))  # NASA-HTTP's first second, local time


def clf(when: datetime, path: str = "/history/apollo/", status: int = 200, size: str = "6245") -> str:
    stamp = when.strftime("%d/%b/%Y:%H:%M:%S %z")
    return f'199.72.81.55 - - [{stamp}] "GET {path} HTTP/1.0" {status} {size}'


def combined(when: datetime) -> str:
    return clf(when) + ' "http://www.example.com/start.html" "Mozilla/4.08 [en] (Win98; I ;Nav)"'


def expected_counts(times: list[datetime], step: int = 60) -> tuple[int, list[int]]:
    """The first bin's start and every bin's count, from ``times`` (any offsets) in UTC."""
    bins = Counter(int(t.timestamp()) // step for t in times)
    first, last = min(bins), max(bins)
    return first * step, [bins.get(b, 0) for b in range(first, last + 1)]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["trace", "from-log", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def rows(csv_text: str) -> tuple[list[str], list[list[str]]]:
    lines = csv_text.splitlines()
    return lines[0].split(","), [line.split(",") for line in lines[1:]]


def one_line_error(err: str) -> str:
    assert err.count("\n") == 1, err
    assert "Traceback" not in err
    assert err.startswith("predictive-autoscaler trace from-log: error: ")
    return err.strip()


def test_clf_with_timezone_offsets_is_binned_in_utc_with_zeros_between(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    minus4 = [T0, T0 + timedelta(seconds=5), T0 + timedelta(minutes=2, seconds=11), T0 + timedelta(minutes=7)]
    # the same instants written by a server two hours east of UTC, and one more request
    plus2 = [t.astimezone(timezone(timedelta(hours=2))) for t in minus4[:2]] + [T0 + timedelta(minutes=3)]
    times = minus4 + plus2
    log = tmp_path / "access.log"
    log.write_text("\n".join(clf(t) for t in times) + "\n")

    code, out, err = run(capsys, str(log))

    assert code == 0
    assert err == ""
    header, body = rows(out)
    assert header == ["timestamp", "requests"]
    start, counts = expected_counts(times)
    assert [int(r[0]) for r in body] == [start + 60 * i for i in range(len(counts))]
    assert [int(r[1]) for r in body] == counts
    assert start == int(T0.timestamp()) // 60 * 60 == 804_571_200  # 04:00 UTC: the offset was applied
    assert 0 in counts  # minutes without a request are zero, not missing
    assert all(r[1] != "" for r in body)


def test_the_clf_time_parser_applies_the_offset_and_refuses_impossible_dates() -> None:
    for offset in (-4, 0, 2, 5.5):
        when = datetime(2024, 2, 29, 23, 59, 58, tzinfo=timezone(timedelta(hours=offset)))
        assert parse_clf_time(when.strftime("%d/%b/%Y:%H:%M:%S %z")) == when.timestamp()
    assert parse_clf_time("29/Feb/2024:23:59:58") == datetime(2024, 2, 29, 23, 59, 58, tzinfo=UTC).timestamp()
    assert parse_clf_time("31/Feb/2024:00:00:00 +0000") is None
    assert parse_clf_time("01/Foo/2024:00:00:00 +0000") is None
    assert parse_clf_time("01/Jul/1995:25:00:00 -0400") is None


def test_combined_log_format_is_detected_and_its_own_format_refuses_clf_lines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    times = [T0 + timedelta(seconds=s) for s in (0, 30, 61, 200, 201)]
    log = tmp_path / "combined.log"
    log.write_text("\n".join(combined(t) for t in times) + "\n")
    code, out, err = run(capsys, str(log))
    assert code == 0
    assert err == ""
    assert [int(r[1]) for r in rows(out)[1]] == expected_counts(times)[1]
    assert run(capsys, str(log), "--format", "combined")[1] == out

    plain = tmp_path / "plain.log"
    plain.write_text("\n".join(clf(t) for t in times) + "\n")
    code, out, err = run(capsys, str(plain), "--format", "combined")
    assert code == 2
    assert out == ""
    expected = (f"predictive-autoscaler trace from-log: error: {plain}: none of its 5 lines is Combined Log Format; "
                f"the first line is {clf(times[0])[:40]!r}")
    assert one_line_error(err).startswith(expected[:-1])


def test_garbled_lines_are_counted_on_one_stderr_line_and_not_fatal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    times = [T0 + timedelta(seconds=17 * i) for i in range(40)]
    lines = [clf(t) for t in times]
    garbage = ["GET /index.html", 'host - - [01/Jul/1995:00:00:09 -0400] "GET / HTTP/1.0" 200',  # no size
               'host - - [41/Jul/1995:00:00:09 -0400] "GET / HTTP/1.0" 200 12', "\x00\x01binary"]
    for i, bad in enumerate(garbage):
        lines.insert(3 + 7 * i, bad)
    log = tmp_path / "messy.log"
    log.write_text("\n".join(lines) + "\n\n")  # blank lines are not lines of the log

    code, out, err = run(capsys, str(log), "--format", "clf")

    assert code == 0
    assert err.count("\n") == 1
    assert err.startswith(f"skipped {len(garbage)} of {len(lines)} lines that were not CLF (the first: ")
    assert [int(r[1]) for r in rows(out)[1]] == expected_counts(times)[1]


def test_json_lines_with_iso_and_epoch_times_and_token_counts(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    base = datetime(2024, 3, 4, 10, 0, 5, tzinfo=UTC)
    entries: list[tuple[dict[str, object], datetime, int, int]] = [
        ({"time": base.isoformat().replace("+00:00", "Z")}, base, 100, 20),
        ({"time": (base + timedelta(seconds=40)).astimezone(timezone(timedelta(hours=2))).isoformat()},
         base + timedelta(seconds=40), 50, 5),
        ({"time": (base + timedelta(minutes=1)).replace(tzinfo=None).isoformat()}, base + timedelta(minutes=1), 7, 3),
        ({"time": (base + timedelta(minutes=3)).timestamp()}, base + timedelta(minutes=3), 1, 1),
        ({"time": int((base + timedelta(minutes=3, seconds=1)).timestamp() * 1000)},
         base + timedelta(minutes=3, seconds=1), 2, 2),
        ({"time": str(int((base + timedelta(minutes=4)).timestamp()))}, base + timedelta(minutes=4), 3, 3),
    ]
    lines = []
    for i, (fields, _, prompt, completion) in enumerate(entries):
        usage = {"usage": {"prompt_tokens": prompt, "completion_tokens": completion}} if i % 2 else \
            {"prompt_tokens": prompt, "completion_tokens": completion}
        lines.append(json.dumps({**fields, "path": "/v1/chat/completions", **usage}))
    log = tmp_path / "gateway.jsonl"
    log.write_text("\n".join(lines) + "\n")

    code, out, err = run(capsys, str(log))

    assert code == 0
    assert err == ""
    header, body = rows(out)
    assert header == ["timestamp", "requests", "input_tokens", "output_tokens"]
    times = [when for _, when, _, _ in entries]
    start, counts = expected_counts(times)
    assert int(body[0][0]) == start
    assert [int(r[1]) for r in body] == counts
    inputs: Counter[int] = Counter()
    outputs: Counter[int] = Counter()
    for _, when, prompt, completion in entries:
        inputs[int(when.timestamp()) // 60 * 60] += prompt
        outputs[int(when.timestamp()) // 60 * 60] += completion
    assert [int(r[2]) for r in body] == [inputs.get(int(r[0]), 0) for r in body]
    assert [int(r[3]) for r in body] == [outputs.get(int(r[0]), 0) for r in body]


def test_token_columns_are_left_out_with_a_note_when_some_lines_lack_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "partial.jsonl"
    log.write_text("\n".join([json.dumps({"timestamp": 1_709_546_405, "prompt_tokens": 5, "completion_tokens": 1}),
                              json.dumps({"timestamp": 1_709_546_470})]) + "\n")
    code, out, err = run(capsys, str(log))
    assert code == 0
    assert rows(out)[0] == ["timestamp", "requests"]
    assert err == "token columns left out: 1 of 2 requests have no prompt and completion token counts\n"


def test_a_named_timestamp_field_reaches_into_nested_objects(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    stamps = [1_709_546_405.25, 1_709_546_406.0, 1_709_546_530.9]
    log = tmp_path / "nested.jsonl"
    log.write_text("".join(json.dumps({"time": "not a time", "request": {"start": s}}) + "\n" for s in stamps))
    code, out, err = run(capsys, str(log), "--timestamp-field", "request.start", "--format", "json")
    assert code == 0
    assert err == ""
    bins = Counter(int(s) // 60 for s in stamps)
    assert [int(r[1]) for r in rows(out)[1]] == [bins.get(b, 0) for b in range(min(bins), max(bins) + 1)]
    code, out, err = run(capsys, str(log))  # "time" is there but holds no time: nothing parses
    assert code == 2
    assert out == ""
    assert "no line is an access log entry" in one_line_error(err)


def test_time_values_iso_epoch_and_their_units() -> None:
    when = datetime(2024, 3, 4, 10, 0, 5, 500_000, tzinfo=UTC)
    seconds = when.timestamp()
    assert parse_time_value("2024-03-04T10:00:05.5Z") == seconds
    assert parse_time_value("2024-03-04 12:00:05.5+02:00") == seconds
    assert parse_time_value("2024-03-04T10:00:05.5") == seconds  # no offset: UTC
    assert parse_time_value(seconds) == seconds
    assert parse_time_value(seconds * 1e3) == pytest.approx(seconds)
    assert parse_time_value(int(seconds * 1e6)) == pytest.approx(seconds)
    assert parse_time_value(str(int(seconds * 1e9))) == pytest.approx(seconds)
    assert parse_time_value("04/Mar/2024:12:00:05 +0200") == int(seconds)
    for bad in (True, None, "yesterday", -5, float("nan"), [1], {"t": 1}):
        assert parse_time_value(bad) is None


def test_a_gzipped_log_reads_as_the_plain_one(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = "\n".join(clf(T0 + timedelta(seconds=29 * i)) for i in range(50)) + "\n"
    plain = tmp_path / "access.log"
    plain.write_text(text)
    packed = tmp_path / "access.log.gz"
    packed.write_bytes(gzip.compress(text.encode()))
    hidden = tmp_path / "rotated.1"  # gzip recognised by its bytes, whatever the name
    hidden.write_bytes(gzip.compress(text.encode()))
    expected = run(capsys, str(plain))[1]
    assert run(capsys, str(packed))[1] == expected
    assert run(capsys, str(hidden))[1] == expected
    truncated = tmp_path / "cut.log.gz"
    truncated.write_bytes(gzip.compress(text.encode())[:-30])
    code, _, err = run(capsys, str(truncated))
    assert code == 2
    assert one_line_error(err).endswith(f"{truncated}: not a valid gzip file (corrupt or truncated)")


@pytest.mark.parametrize(("content", "message"), [
    ("", "the log is empty (no line to count)"),
    ("\n  \n", "the log is empty (no line to count)"),
    ("timestamp,requests\n0,1\n60,2\n", "no line is an access log entry"),
    ("just some words\nand more\n", "no line is an access log entry"),
])
def test_a_log_with_no_parseable_line_is_one_error_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, message: str
) -> None:
    log = tmp_path / "bad.log"
    log.write_text(content)
    code, out, err = run(capsys, str(log))
    assert code == 2
    assert out == ""
    assert message in one_line_error(err)


def test_missing_files_directories_and_bad_flags_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "access.log"
    log.write_text(clf(T0) + "\n")
    cases = [
        ([str(tmp_path / "absent.log")], "no such log file"),
        ([str(tmp_path)], "is a directory, not a log file"),
        ([str(log), "--format", "w3c"], "--format: unknown format 'w3c'; choose from clf, combined, json"),
        ([str(log), "--step", "0"], "--step: must be positive, got 0"),
        ([str(log), "--format", "clf", "--timestamp-field", "ts"], "--timestamp-field: names a field of JSON lines"),
        ([str(log), "--timestamp-field", "ts"], f"but {log} is CLF"),
    ]
    for argv, message in cases:
        code, out, err = run(capsys, *argv)
        assert (code, out) == (2, ""), argv
        assert message in one_line_error(err), argv


def test_a_stray_time_far_from_the_rest_is_refused_not_a_billion_bins(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "stray.log"
    log.write_text(f"{clf(T0)}\n{clf(T0.replace(year=2095))}\n")
    code, out, err = run(capsys, str(log))
    assert code == 2
    assert out == ""
    assert "use a larger --step, or remove the lines with stray times" in one_line_error(err)


def test_a_log_within_one_bin_is_refused_not_written_as_a_trace_nothing_can_replay(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "one-minute.log"
    log.write_text(f"{clf(T0)}\n{clf(T0 + timedelta(seconds=30))}\n")
    code, out, err = run(capsys, str(log))
    assert code == 2
    assert out == ""
    assert "every request falls in one 60s bin" in one_line_error(err)


def test_output_file_and_step(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    times = [T0 + timedelta(seconds=37 * i) for i in range(200)]
    log = tmp_path / "access.log"
    log.write_text("\n".join(clf(t) for t in reversed(times)) + "\n")  # order does not matter
    out_path = tmp_path / "trace.csv.gz"
    code, out, err = run(capsys, str(log), "--step", "5m", "-o", str(out_path))
    assert code == 0
    assert err == ""
    assert str(out_path) in out
    assert "200 requests (CLF)" in out
    trace = load_trace(out_path)
    start, counts = expected_counts(times, step=300)
    assert trace.step_seconds == 300
    assert trace.requests.start == start
    assert np.allclose(trace.requests.values * 300, counts, rtol=0, atol=1e-9)


def test_a_log_written_from_a_trace_rebuilds_the_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Every request of a synthetic trace written as a CLF line somewhere in its minute comes back bin for bin."""
    trace = synth_trace(days=0.05, seed=9)
    per_bin = np.rint(trace.requests.values * 60).astype(int)
    rng = np.random.default_rng(0)
    east = timezone(timedelta(hours=5, minutes=30))
    lines = []
    for start, n in zip(trace.requests.timestamps().tolist(), per_bin.tolist(), strict=True):
        for offset in sorted(rng.integers(0, 60, n).tolist()):
            lines.append(clf(datetime.fromtimestamp(start + offset, east)))
    log = tmp_path / "access.log.gz"
    log.write_bytes(gzip.compress(("\n".join(lines) + "\n").encode()))
    out_path = tmp_path / "rebuilt.csv"
    code, _, err = run(capsys, str(log), "-o", str(out_path))
    assert code == 0
    assert err == ""
    rebuilt = load_trace(out_path)
    first = int(np.argmax(per_bin > 0))
    assert rebuilt.requests.start == trace.requests.start + 60 * first
    assert np.array_equal(rebuilt.requests.values, trace.requests.values[first:first + len(rebuilt.requests)])
