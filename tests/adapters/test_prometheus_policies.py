"""The Prometheus adapter's policies, one by one, over ``httpx.MockTransport``.

MockTransport is a real httpx transport whose answers come from a function: here a small fake
Prometheus (``FakePrometheus``) that records each request and answers from a script, so every
odd answer and failure can be produced on demand. The happy paths against the real server are in
test_prometheus_server.py.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import httpx
import numpy as np
import pytest

from autoscaler.adapters.prometheus import (
    MAX_POINTS_PER_SERIES,
    PrometheusError,
    PrometheusQueryError,
    PrometheusSource,
    PrometheusUnavailable,
)
from autoscaler.promql import SOURCE_FULL, SOURCE_LABEL, TemplateError

URL = "http://prometheus.test:9090"
Answer = Callable[[dict[str, str]], httpx.Response]


def ok(data: dict[str, Any], warnings: list[str] | None = None) -> httpx.Response:
    body: dict[str, Any] = {"status": "success", "data": data}
    if warnings is not None:
        body["warnings"] = warnings
    return httpx.Response(200, json=body)


def matrix(*series: tuple[dict[str, str], Sequence[tuple[float, str]]]) -> dict[str, Any]:
    return {
        "resultType": "matrix",
        "result": [{"metric": labels, "values": [[t, v] for t, v in values]} for labels, values in series],
    }


def error(status: int, error_type: str, message: str) -> httpx.Response:
    return httpx.Response(status, json={"status": "error", "errorType": error_type, "error": message})


class FakePrometheus:
    """Answers requests from a list of scripted answers (the last one repeats); records requests."""

    def __init__(self, *answers: Answer | httpx.Response | Exception) -> None:
        self.answers = list(answers)
        self.requests: list[httpx.Request] = []
        self.forms: list[dict[str, str]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        form = {k: v[0] for k, v in parse_qs(request.content.decode()).items()}
        self.forms.append(form)
        answer = self.answers[min(len(self.requests), len(self.answers)) - 1]
        if isinstance(answer, Exception):
            raise answer
        if isinstance(answer, httpx.Response):
            return answer
        return answer(form)


def source(fake: FakePrometheus, sleeps: list[float] | None = None, **kwargs: Any) -> PrometheusSource:
    record = sleeps if sleeps is not None else []
    return PrometheusSource(URL, transport=httpx.MockTransport(fake), sleep=record.append, **kwargs)


def grid_answer(value: Callable[[float], str], labels: dict[str, str] | None = None) -> Answer:
    """A fake range-query server: one series valued ``value(t)`` on exactly the requested grid."""

    def answer(form: dict[str, str]) -> httpx.Response:
        start, end, step = float(form["start"]), float(form["end"]), float(form["step"])
        assert (end - start) / step <= MAX_POINTS_PER_SERIES, "Prometheus would refuse this range"
        times = [start + i * step for i in range(round((end - start) / step) + 1)]
        return ok(matrix((labels or {"__name__": "x"}, [(t, value(t)) for t in times])))

    return answer


# --- errors and retries ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "error_type", "message"),
    [
        (400, "bad_data", '1:5: parse error: unexpected "}"'),
        (422, "execution", "exceeded maximum resolution of 11,000 points per timeseries"),
        (403, "forbidden", "namespace not allowed"),
    ],
)
def test_4xx_is_a_query_error_with_prometheus_message_not_retried(status: int, error_type: str, message: str) -> None:
    fake = FakePrometheus(error(status, error_type, message))
    sleeps: list[float] = []
    with pytest.raises(PrometheusQueryError) as caught:
        source(fake, sleeps).instant("up{", at=1000)
    assert message in str(caught.value)
    assert caught.value.status_code == status
    assert caught.value.error_type == error_type
    assert len(fake.requests) == 1
    assert sleeps == []


def test_4xx_without_json_body_still_names_the_status() -> None:
    fake = FakePrometheus(httpx.Response(404, text="404 page not found"))
    with pytest.raises(PrometheusQueryError, match=r"HTTP 404.*404 page not found"):
        source(fake).instant("up", at=1000)


@pytest.mark.parametrize(
    "failure",
    [
        httpx.Response(503, json={"status": "error", "errorType": "timeout", "error": "query timed out"}),
        httpx.Response(500, text="internal error"),
        httpx.Response(502, text="bad gateway"),
        httpx.Response(429, text="slow down"),
        httpx.ConnectError("connection refused"),
        httpx.ReadTimeout("timed out"),
    ],
    ids=["503", "500", "502", "429", "connect", "timeout"],
)
def test_transient_failures_are_retried_then_succeed(failure: httpx.Response | Exception) -> None:
    fake = FakePrometheus(failure, ok({"resultType": "vector", "result": []}))
    sleeps: list[float] = []
    assert source(fake, sleeps, backoff_seconds=0.25).instant("up", at=1000) == []
    assert len(fake.requests) == 2
    assert sleeps == [0.25]


def test_persistent_failure_gives_unavailable_after_retries_with_exponential_backoff() -> None:
    fake = FakePrometheus(error(503, "unavailable", "TSDB not ready"))
    sleeps: list[float] = []
    with pytest.raises(PrometheusUnavailable, match=r"after 4 attempts: HTTP 503: TSDB not ready"):
        source(fake, sleeps, retries=3, backoff_seconds=0.5).instant("up", at=1000)
    assert len(fake.requests) == 4
    assert sleeps == [0.5, 1.0, 2.0]


def test_no_retries_means_one_attempt() -> None:
    fake = FakePrometheus(httpx.ConnectError("refused"))
    with pytest.raises(PrometheusUnavailable, match="after 1 attempts: ConnectError"):
        source(fake, retries=0).instant("up", at=1000)
    assert len(fake.requests) == 1


@pytest.mark.parametrize(
    "answer",
    [
        httpx.Response(200, text="<html>proxy login</html>"),
        httpx.Response(200, json={"status": "success"}),
        ok({"resultType": "string", "result": [1, "x"]}),
    ],
    ids=["not-json", "no-data", "string-result"],
)
def test_unusable_200_answers_are_query_errors(answer: httpx.Response) -> None:
    with pytest.raises(PrometheusQueryError):
        source(FakePrometheus(answer)).instant("up", at=1000)


# --- values ------------------------------------------------------------------------------------


def test_nan_and_infinities_become_nan() -> None:
    fake = FakePrometheus(ok(matrix(({"a": "1"}, [(60, "1.5"), (120, "NaN"), (180, "+Inf"), (240, "-Inf")]))))
    (series,) = source(fake).query_range("x", 60, 240, 60)
    assert series.timestamps.tolist() == [60, 120, 180, 240]
    assert series.values[0] == 1.5
    assert np.isnan(series.values[1:]).all()


def test_instant_vector_and_scalar() -> None:
    vector = ok({"resultType": "vector", "result": [{"metric": {"pod": "p"}, "value": [1000, "+Inf"]}]})
    scalar = ok({"resultType": "scalar", "result": [1000, "2.5"]})
    fake = FakePrometheus(vector, scalar)
    src = source(fake)
    (sample,) = src.instant("x", at=1000)
    assert sample.labels == {"pod": "p"}
    assert sample.timestamp == 1000
    assert math.isnan(sample.value)
    (value,) = src.instant("scalar(x)", at=1000)
    assert value.labels == {}
    assert value.value == 2.5
    assert fake.forms[0] == {"query": "x", "time": "1000", "timeout": "10"}


def test_warnings_are_recorded() -> None:
    answer = ok({"resultType": "vector", "result": []}, warnings=["partial response from store-b"])
    src = source(FakePrometheus(answer))
    src.instant("x", at=1000)
    assert src.last_warnings == ("partial response from store-b",)


# --- chunking ------------------------------------------------------------------------------------


def test_query_range_splits_into_chunks_without_gaps_or_duplicates() -> None:
    fake = FakePrometheus(grid_answer(lambda t: str(t / 10)))
    (series,) = source(fake, max_points_per_request=7).query_range("x", 1000, 1000 + 19 * 15, 15)
    assert len(fake.requests) == 3  # 20 points in chunks of 7, 7, 6
    assert [(f["start"], f["end"]) for f in fake.forms] == [("1000", "1090"), ("1105", "1195"), ("1210", "1285")]
    expected = 1000 + 15 * np.arange(20)
    np.testing.assert_array_equal(series.timestamps, expected)
    np.testing.assert_array_equal(series.values, expected / 10)


def test_default_chunk_respects_prometheus_limit() -> None:
    fake = FakePrometheus(grid_answer(lambda t: "1"))
    (series,) = source(fake).query_range("x", 0, 60 * 25_000, 60)
    assert len(series.timestamps) == 25_001
    assert len(fake.requests) == 3  # grid_answer asserts each request is within the 11,000-step limit


def test_overlapping_chunk_answers_are_deduplicated() -> None:
    # A server (or proxy) that answers one step beyond the requested end: the edge point comes twice.
    def beyond(form: dict[str, str]) -> httpx.Response:
        start, end = int(form["start"]), int(form["end"]) + 60
        return ok(matrix(({"a": "1"}, [(t, str(t)) for t in range(start, end + 1, 60)])))

    fake = FakePrometheus(beyond)
    (series,) = source(fake, max_points_per_request=3).query_range("x", 0, 600, 60)
    np.testing.assert_array_equal(series.timestamps, np.arange(0, 661, 60))
    assert len(set(series.timestamps.tolist())) == len(series.timestamps)


def test_series_missing_from_one_chunk_keep_their_other_points() -> None:
    def answer(form: dict[str, str]) -> httpx.Response:
        start = int(form["start"])
        pts = [(t, "1") for t in range(start, int(form["end"]) + 1, 60)]
        both = [({"pod": "a"}, pts)] + ([({"pod": "b"}, pts)] if start == 0 else [])
        return ok(matrix(*both))

    series = source(FakePrometheus(answer), max_points_per_request=5).query_range("x", 0, 540, 60)
    by_pod = {s.labels["pod"]: s for s in series}
    assert len(by_pod["a"].timestamps) == 10
    assert by_pod["b"].timestamps.tolist() == [0, 60, 120, 180, 240]


# --- fleet -------------------------------------------------------------------------------------


def fleet_answer(*series: tuple[dict[str, str], dict[int, str]]) -> Answer:
    """Per series: timestamp -> value; only timestamps within the requested range are sent."""

    def answer(form: dict[str, str]) -> httpx.Response:
        lo, hi = float(form["start"]), float(form["end"])
        return ok(matrix(*[(labels, [(t, v) for t, v in pts.items() if lo <= t <= hi]) for labels, pts in series]))

    return answer


def test_fleet_history_maps_evaluation_times_to_bins_with_nan_for_missing() -> None:
    serving = {"namespace": "serving", "deployment": "chat"}
    # Bins [0,60), [60,120), [120,180) are evaluated at their ends 60, 120, 180; 120 has no sample.
    fake = FakePrometheus(fleet_answer((serving, {60: "1", 180: "3"})))
    history = source(fake).fleet_history("arrival_rate", ["serving"], 0, 180, 60)
    assert list(history) == [("serving", "chat")]
    ts = history["serving", "chat"]
    assert (ts.start, ts.step_seconds, len(ts)) == (0, 60, 3)
    np.testing.assert_array_equal(ts.values, [1.0, np.nan, 3.0])
    (form,) = fake.forms
    assert (form["start"], form["end"], form["step"]) == ("60", "180", "60")
    assert 'namespace=~"serving"' in form["query"]
    assert "[60s:60s]" in form["query"]  # window and subquery resolution default to the step


def test_fleet_history_is_one_request_per_chunk_for_the_whole_fleet() -> None:
    names = [f"ns{i}" for i in range(30)]
    series = [({"namespace": n, "deployment": "d"}, {t: "1" for t in range(60, 601, 60)}) for n in names]
    fake = FakePrometheus(fleet_answer(*series))
    history = source(fake, max_points_per_request=4).fleet_history("completion_rate", names, 0, 600, 60)
    assert len(history) == 30
    assert len(fake.requests) == 3  # 10 evaluation times in chunks of 4: not one request per Deployment
    assert all(np.all(ts.values == 1.0) for ts in history.values())


def test_fleet_empty_answer_means_absent_not_zero() -> None:
    fake = FakePrometheus(ok(matrix()))
    history = source(fake).fleet_history("arrival_rate", ["serving"], 0, 600, 60)
    assert dict(history) == {}
    assert history.dropped == {}


def test_fleet_duplicate_series_drop_the_deployment_and_say_why() -> None:
    dup_a = {"namespace": "serving", "deployment": "chat", "job": "vllm"}
    dup_b = {"namespace": "serving", "deployment": "chat", "job": "vllm-again"}
    fine = {"namespace": "serving", "deployment": "code"}
    pts = {60: "1", 120: "2"}
    fake = FakePrometheus(fleet_answer((dup_a, pts), (dup_b, pts), (fine, pts)))
    history = source(fake).fleet_history(
        'sum by (namespace, deployment, job) (x{namespace=~"{namespaces}"})', ["serving"], 0, 120, 60
    )
    assert list(history) == [("serving", "code")]
    assert "2 series for serving/chat" in history.dropped["serving", "chat"]
    assert any("serving/chat" in w for w in history.warnings)


def test_fleet_series_that_differ_only_in_demand_source_are_merged_bin_by_bin() -> None:
    # The built-in arrival query answers completions alone until a Deployment's gauges appear, then the full
    # formula: two series for one Deployment over a range, never both in one bin.
    chat = {"namespace": "serving", "deployment": "chat"}
    fallback, full = {**chat, SOURCE_LABEL: "completions only: x absent"}, {**chat, SOURCE_LABEL: SOURCE_FULL}
    unlabelled = {"namespace": "serving", "deployment": "code"}
    fake = FakePrometheus(fleet_answer((fallback, {60: "1", 120: "2"}), (full, {240: "4"}),
                                       (unlabelled, {60: "5"})))
    history = source(fake).fleet_history("arrival_rate", ["serving"], 0, 240, 60)
    assert history.dropped == {}
    np.testing.assert_array_equal(history["serving", "chat"].values, [1.0, 2.0, np.nan, 4.0])
    assert history.sources["serving", "chat"] == ("completions only: x absent",) * 2 + (None, SOURCE_FULL)
    assert history.latest_source(("serving", "chat")) == (True, SOURCE_FULL)
    # A query without the label: no sources, and nothing to say for a Deployment without a value.
    assert ("serving", "code") not in history.sources
    assert history.latest_source(("serving", "code")) == (True, None)
    assert history.latest_source(("serving", "nobody")) == (False, None)


def test_fleet_demand_sources_in_the_same_bin_drop_the_deployment_and_say_why() -> None:
    chat = {"namespace": "serving", "deployment": "chat"}
    both = [({**chat, SOURCE_LABEL: s}, {60: "1", 120: "2"}) for s in (SOURCE_FULL, "completions only")]
    fine = ({"namespace": "serving", "deployment": "code", SOURCE_LABEL: SOURCE_FULL}, {60: "1"})
    history = source(FakePrometheus(fleet_answer(*both, fine))).fleet_history(
        "arrival_rate", ["serving"], 0, 120, 60
    )
    assert list(history) == [("serving", "code")]
    assert "or on (namespace, deployment)" in history.dropped["serving", "chat"]
    assert any("serving/chat" in w for w in history.warnings)
    # Another label besides demand_source: still two series where one was expected.
    other = [({**chat, SOURCE_LABEL: s, "job": s}, {60: "1"}) for s in (SOURCE_FULL, "completions only")]
    history = source(FakePrometheus(fleet_answer(*other))).fleet_history("arrival_rate", ["serving"], 0, 60, 60)
    assert "2 series for serving/chat where one was expected" in history.dropped["serving", "chat"]


def test_fleet_drops_series_outside_allowed_namespaces_or_without_deployment() -> None:
    pts = {60: "1"}
    fake = FakePrometheus(
        fleet_answer(
            ({"namespace": "other-team", "deployment": "chat"}, pts),
            ({"namespace": "serving", "deployment": ""}, pts),
            ({"namespace": "serving"}, pts),
            ({"namespace": "serving", "deployment": "chat"}, pts),
        ),
    )
    history = source(fake).fleet_history("arrival_rate", ["serving"], 0, 60, 60)
    assert list(history) == [("serving", "chat")]
    assert sum("outside the allowed namespaces" in w for w in history.warnings) == 1
    assert sum("without a deployment label" in w for w in history.warnings) == 2


def test_fleet_instant_applies_the_same_policies() -> None:
    vector = ok(
        {
            "resultType": "vector",
            "result": [
                {"metric": {"namespace": "serving", "deployment": "chat"}, "value": [1000, "7"]},
                {"metric": {"namespace": "serving", "deployment": "code"}, "value": [1000, "1"]},
                {"metric": {"namespace": "serving", "deployment": "code"}, "value": [1000, "2"]},
                {"metric": {"namespace": "serving", "deployment": "idle"}, "value": [1000, "NaN"]},
            ],
        }
    )
    src = source(FakePrometheus(vector))
    values = src.fleet_instant("in_flight", ["serving"], at=1000)
    assert values.keys() == {("serving", "chat"), ("serving", "idle")}
    assert values["serving", "chat"] == 7
    assert math.isnan(values["serving", "idle"])
    assert any("2 series for serving/code" in w for w in src.last_warnings)


@pytest.mark.parametrize(
    ("start", "end", "step", "message"),
    [
        (0, 0, 60, "positive whole number"),
        (0, 90, 60, "positive whole number"),
        (0, 120, 0, "step_seconds must be positive"),
        (0.5, 120, 60, "whole Unix seconds"),
    ],
)
def test_fleet_history_refuses_bad_grids(start: Any, end: int, step: int, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        source(FakePrometheus(ok(matrix()))).fleet_history("arrival_rate", ["serving"], start, end, step)


def test_fleet_history_refuses_unknown_names_and_unrestricted_templates() -> None:
    src = source(FakePrometheus(ok(matrix())))
    with pytest.raises(TemplateError, match="neither a known query name"):
        src.fleet_history("arival_rate", ["serving"], 0, 60, 60)
    with pytest.raises(TemplateError, match="no namespaces"):
        src.fleet_history("arrival_rate", [], 0, 60, 60)


# --- auth and TLS ------------------------------------------------------------------------------


def test_bearer_token_from_string() -> None:
    fake = FakePrometheus(ok({"resultType": "vector", "result": []}))
    source(fake, bearer_token="s3cret\n").instant("up", at=1)
    assert fake.requests[0].headers["Authorization"] == "Bearer s3cret"


def test_no_token_no_header() -> None:
    fake = FakePrometheus(ok({"resultType": "vector", "result": []}))
    source(fake).instant("up", at=1)
    assert "Authorization" not in fake.requests[0].headers


def test_bearer_token_file_is_reread_on_every_request(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("first\n")
    fake = FakePrometheus(ok({"resultType": "vector", "result": []}))
    src = source(fake, bearer_token_file=token)
    src.instant("up", at=1)
    token.write_text("rotated")
    src.instant("up", at=2)
    assert [r.headers["Authorization"] for r in fake.requests] == ["Bearer first", "Bearer rotated"]


def test_bearer_token_file_problems_are_clear(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.write_text("  \n")
    fake = FakePrometheus(ok({"resultType": "vector", "result": []}))
    with pytest.raises(PrometheusError, match=r"bearer token file .*empty is empty"):
        source(fake, bearer_token_file=empty).instant("up", at=1)
    with pytest.raises(PrometheusError, match=r"cannot read bearer token file .*missing"):
        source(fake, bearer_token_file=tmp_path / "missing").instant("up", at=1)
    assert fake.requests == []


def test_constructor_refuses_bad_settings(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not both"):
        PrometheusSource(URL, bearer_token="a", bearer_token_file=tmp_path / "t")
    with pytest.raises(ValueError, match="cannot load CA bundle"):
        PrometheusSource(URL, ca_file=tmp_path / "missing.pem")
    bad = tmp_path / "bad.pem"
    bad.write_text("not a certificate")
    with pytest.raises(ValueError, match="cannot load CA bundle"):
        PrometheusSource(URL, ca_file=bad)
    with pytest.raises(ValueError, match="http:// or https://"):
        PrometheusSource("prometheus:9090")
    with pytest.raises(ValueError, match="max_points_per_request"):
        PrometheusSource(URL, max_points_per_request=20_000)


def test_configured_queries_add_to_the_defaults() -> None:
    custom = 'sum by (namespace, deployment) (my_rps{namespace=~"{namespaces}"})'
    fake = FakePrometheus(ok(matrix()))
    src = source(fake, queries={"my_rps": custom})
    src.fleet_history("my_rps", ["serving"], 0, 60, 60)
    src.fleet_history("arrival_rate", ["serving"], 0, 60, 60)
    assert fake.forms[0]["query"] == 'sum by (namespace, deployment) (my_rps{namespace=~"serving"})'
    assert fake.forms[1]["query"].startswith("clamp_min(")
