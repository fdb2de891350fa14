"""The annotation contract: table cases for each rule and hypothesis properties over arbitrary input."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from autoscaler.domain.annotations import (
    ENABLED_LABEL,
    EVENT_MESSAGE_LIMIT,
    EVENT_REASON_INVALID,
    PREFIX,
    PRIORITY_TIERS,
    AnnotationError,
    Mode,
    ParseResult,
    event_payloads,
    is_enabled,
    parse_duration_seconds,
    parse_workload,
)

LABELS = {ENABLED_LABEL: "true", "app": "llm"}
BASE = {PREFIX + "min-replicas": "1", PREFIX + "max-replicas": "8", PREFIX + "capacity-per-replica": "12.5"}


def template(*containers: dict[str, Any], init: tuple[dict[str, Any], ...] = ()) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": list(containers)}
    if init:
        spec["initContainers"] = list(init)
    return {"metadata": {"labels": {"app": "llm"}}, "spec": spec}


def gpu(name: str, limits: Any = None, requests: Any = None, **extra: Any) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if limits is not None:
        resources["limits"] = {"nvidia.com/gpu": limits, "memory": "64Gi"}
    if requests is not None:
        resources["requests"] = {"nvidia.com/gpu": requests, "cpu": "4"}
    return {"name": name, "image": "vllm", "resources": resources, **extra}


def parse(
    annotations: dict[str, str], tmpl: dict[str, Any] | None = None, labels: dict[str, str] | None = None
) -> ParseResult:
    return parse_workload("ml", "llama", LABELS if labels is None else labels, annotations, tmpl or template())


def test_minimal_annotations_get_documented_defaults() -> None:
    result = parse(BASE, template(gpu("server", limits="2")))
    assert result.problems == ()
    spec = result.spec
    assert spec is not None
    assert (spec.namespace, spec.name) == ("ml", "llama")
    assert (spec.min_replicas, spec.max_replicas, spec.capacity_per_replica) == (1, 8, 12.5)
    assert spec.mode is Mode.SCALE
    assert not spec.advisory
    assert spec.cold_start_seconds == 180
    assert spec.warm_pool is None
    assert spec.forecast_profile == "default"
    assert spec.team == "ml"  # defaults to the namespace
    assert spec.priority == PRIORITY_TIERS["standard"]
    assert spec.nodepool is None
    assert spec.gpus_per_replica == 2


def test_every_optional_annotation_is_read() -> None:
    ann = {
        **BASE,
        PREFIX + "mode": "advisory",
        PREFIX + "cold-start": "3m",
        PREFIX + "warm-pool": "2",
        PREFIX + "forecast-profile": "weekly-llm",
        PREFIX + "team": "search-ranking",
        PREFIX + "priority": "production",
        PREFIX + "nodepool": "gpu-a100",
        PREFIX + "status": '{"replicas": 3}',  # ours, written by the controller: not an unknown key
    }
    result = parse(ann)
    assert result.problems == ()
    spec = result.spec
    assert spec is not None
    assert spec.advisory
    assert spec.cold_start_seconds == 180
    assert spec.warm_pool == 2
    assert spec.forecast_profile == "weekly-llm"
    assert spec.team == "search-ranking"
    assert spec.priority == 100
    assert spec.nodepool == "gpu-a100"


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("180", 180), ("180s", 180), ("3m", 180), ("1m30s", 90), ("1h", 3600), ("1.5m", 90), (" 2M ", 120), ("0s", 0)],
)
def test_durations(raw: str, expected: float) -> None:
    assert parse_duration_seconds(raw) == expected


@pytest.mark.parametrize("raw", ["", "abc", "3 minutes", "m3", "-5s", "1d", "3m-", "inf", "nan"])
def test_bad_durations_raise(raw: str) -> None:
    with pytest.raises(ValueError, match=r"."):
        parse_duration_seconds(raw)


@pytest.mark.parametrize(("raw", "expected"), [("batch", 10), ("Production", 100), ("critical", 1000), ("275", 275)])
def test_priority_tiers_and_integers(raw: str, expected: int) -> None:
    spec = parse({**BASE, PREFIX + "priority": raw}).spec
    assert spec is not None
    assert spec.priority == expected


@pytest.mark.parametrize(
    ("key", "value", "fragment"),
    [
        ("min-replicas", "two", "not an integer"),
        ("min-replicas", "-1", "must not be negative"),
        ("min-replicas", "1.5", "not an integer"),
        ("max-replicas", "0", "integer >= 1"),
        ("max-replicas", "", "not an integer"),
        ("max-replicas", "1000000000", "more than a Kubernetes cluster can run"),
        ("min-replicas", "150001", "more than a Kubernetes cluster can run"),
        ("capacity-per-replica", "fast", "not a number"),
        ("capacity-per-replica", "0", "must be > 0"),
        ("capacity-per-replica", "-3", "must be > 0"),
        ("capacity-per-replica", "inf", "finite"),
        ("mode", "turbo", "unknown mode"),
        ("cold-start", "soon", "not a duration"),
        ("warm-pool", "-2", "must not be negative"),
        ("warm-pool", "some", "'auto'"),
        ("priority", "urgent", "production"),
        ("priority", "5000", "0..1000"),
        ("forecast-profile", "Bad_Profile", "profile name"),
        ("nodepool", "GPU pool", "NodePool"),
        ("team", "", "team name"),
    ],
)
def test_each_bad_value_is_an_error_naming_key_and_value(key: str, value: str, fragment: str) -> None:
    result = parse({**BASE, PREFIX + key: value})
    assert result.spec is None
    assert len(result.errors) == 1
    err = result.errors[0]
    assert err.key == PREFIX + key
    assert err.value == value
    assert fragment in err.message
    assert PREFIX + key in str(err)
    assert repr(value) in str(err)


def test_more_replicas_than_a_cluster_has_nodes_is_legal_but_warned() -> None:
    result = parse({**BASE, PREFIX + "max-replicas": "6000"})
    assert result.spec is not None
    assert result.spec.max_replicas == 6000
    (warning,) = result.warnings
    assert warning.key == PREFIX + "max-replicas"
    assert "more than the 5,000 nodes" in warning.message
    assert parse({**BASE, PREFIX + "max-replicas": "5000"}).warnings == ()


def test_min_greater_than_max() -> None:
    result = parse({**BASE, PREFIX + "min-replicas": "9", PREFIX + "max-replicas": "4"})
    assert result.spec is None
    (err,) = result.errors
    assert err.key == PREFIX + "min-replicas"
    assert "greater than max-replicas 4" in err.message


def test_every_missing_required_key_is_reported() -> None:
    result = parse({PREFIX + "mode": "scale"})
    assert result.spec is None
    required = ("min-replicas", "max-replicas")  # capacity-per-replica is optional: auto (learned) by default
    assert {e.key for e in result.errors} == {PREFIX + k for k in required}
    assert all(e.value is None and "missing" in e.message for e in result.errors)
    assert "<missing>" in str(result.errors[0])


@pytest.mark.parametrize("raw", [None, "auto", " AUTO ", "Auto"])
def test_capacity_is_auto_when_absent_or_said(raw: str | None) -> None:
    ann = {k: v for k, v in BASE.items() if k != PREFIX + "capacity-per-replica"}
    if raw is not None:
        ann[PREFIX + "capacity-per-replica"] = raw
    result = parse(ann)
    assert result.problems == ()
    assert result.spec is not None
    assert result.spec.capacity_per_replica is None  # None = auto: learned, never guessed


def test_a_given_capacity_is_kept_and_a_bad_one_is_still_an_error() -> None:
    spec = parse(BASE).spec
    assert spec is not None
    assert spec.capacity_per_replica == 12.5
    (err,) = parse({**BASE, PREFIX + "capacity-per-replica": "automatic"}).errors
    assert err.key == PREFIX + "capacity-per-replica"
    assert err.message.startswith("not a number")


def test_all_bad_keys_reported_together() -> None:
    ann = {
        PREFIX + "min-replicas": "x",
        PREFIX + "max-replicas": "-1",
        PREFIX + "capacity-per-replica": "0",
        PREFIX + "mode": "auto",
        PREFIX + "max-replica": "8",
    }
    result = parse(ann)
    assert result.spec is None
    assert [e.key.removeprefix(PREFIX) for e in result.errors] == [
        "min-replicas",
        "max-replicas",
        "capacity-per-replica",
        "mode",
    ]
    (typo,) = result.warnings
    assert typo.key == PREFIX + "max-replica"
    assert "did you mean predictive-autoscaler.io/max-replicas?" in typo.message


def test_unknown_key_warns_but_does_not_block() -> None:
    result = parse({**BASE, PREFIX + "warmpool": "3", PREFIX + "enabled": "true", "other.io/x": "y"})
    assert result.spec is not None
    assert result.ok
    assert [w.key for w in result.warnings] == [PREFIX + "enabled", PREFIX + "warmpool"]
    assert "is a label" in result.warnings[0].message
    assert "did you mean predictive-autoscaler.io/warm-pool?" in result.warnings[1].message
    assert result.errors == ()


def test_opt_in_label() -> None:
    assert is_enabled({ENABLED_LABEL: "true"})
    assert not is_enabled({ENABLED_LABEL: "True"})
    assert not is_enabled(None)
    result = parse(BASE, labels={ENABLED_LABEL: "yes"})
    assert result.spec is None
    assert result.errors[0].key == ENABLED_LABEL


@pytest.mark.parametrize(
    ("tmpl", "expected"),
    [
        (template(gpu("a")), 0),
        (template(gpu("a", limits="1"), gpu("b", limits=2)), 3),
        (template(gpu("a", requests="4")), 4),  # requests alone count
        (template(gpu("a", limits="2", requests="2")), 2),
        (template(gpu("a", limits="1"), init=(gpu("warm", limits="4"),)), 4),  # init container peak
        (template(gpu("a", limits="1"), init=(gpu("warm", limits="1"),)), 1),
        (template(gpu("a", limits="1"), init=(gpu("side", limits="1", restartPolicy="Always"),)), 2),  # sidecar adds
        ({}, 0),
    ],
)
def test_gpus_per_replica(tmpl: dict[str, Any], expected: int) -> None:
    spec = parse(BASE, tmpl).spec
    assert spec is not None
    assert spec.gpus_per_replica == expected


@pytest.mark.parametrize(
    ("container", "fragment"),
    [(gpu("srv", limits="0.5"), "whole number"), (gpu("srv", limits="1", requests="2"), "must be equal")],
)
def test_bad_gpu_quantities_name_the_container(container: dict[str, Any], fragment: str) -> None:
    result = parse(BASE, template(container))
    assert result.spec is None
    (err,) = result.errors
    assert "containers[srv]" in err.key
    assert "nvidia.com/gpu" in err.key
    assert fragment in err.message


def test_event_payloads_name_key_and_value() -> None:
    problems = [
        AnnotationError(PREFIX + "max-replicas", "lots", "not an integer (expected an integer >= 1)"),
        AnnotationError(PREFIX + "max-replica", "8", "unknown annotation, ignored", "warning"),
        AnnotationError(PREFIX + "team", "x" * 5000, "too long"),
    ]
    payloads = event_payloads(problems)
    assert [r for r, _ in payloads] == [EVENT_REASON_INVALID] * 3
    assert payloads[0][1] == "predictive-autoscaler.io/max-replicas='lots': not an integer (expected an integer >= 1)"
    assert payloads[1][1].startswith("ignored: predictive-autoscaler.io/max-replica='8'")
    assert len(payloads[2][1].encode()) <= EVENT_MESSAGE_LIMIT
    assert payloads[2][1].endswith("...")


# ---- properties ---------------------------------------------------------------------------------

ANY_TEXT = st.text(max_size=12)
KEYS = st.sampled_from(
    ["min-replicas", "max-replicas", "capacity-per-replica", "mode", "cold-start", "warm-pool", "priority", "team"]
)


@given(st.dictionaries(KEYS, ANY_TEXT, max_size=8))
def test_parser_never_raises_and_errors_name_keys(raw: dict[str, str]) -> None:
    annotations = {PREFIX + k: v for k, v in raw.items()}
    result = parse_workload("ns", "d", LABELS, annotations, template())
    assert (result.spec is None) == bool(result.errors)
    for err in result.errors:
        assert err.key.startswith(PREFIX)
        assert err.value == annotations.get(err.key)
    # Each bad key is reported (at least) once, each missing required key exactly once.
    for key in ("min-replicas", "max-replicas"):
        if key not in raw:
            assert sum(e.key == PREFIX + key for e in result.errors) == 1


@given(
    lo=st.integers(0, 500),
    hi=st.integers(1, 500),
    capacity=st.floats(min_value=1e-3, max_value=1e6, allow_nan=False),
)
def test_valid_numbers_round_trip(lo: int, hi: int, capacity: float) -> None:
    ann = {
        PREFIX + "min-replicas": str(lo),
        PREFIX + "max-replicas": str(hi),
        PREFIX + "capacity-per-replica": repr(capacity),
    }
    result = parse_workload("ns", "d", LABELS, ann, template())
    if lo <= hi:
        assert result.spec is not None
        assert result.spec.min_replicas <= result.spec.max_replicas
        assert (result.spec.min_replicas, result.spec.max_replicas) == (lo, hi)
        assert result.spec.capacity_per_replica == capacity
    else:
        assert result.spec is None
        assert [e.key for e in result.errors] == [PREFIX + "min-replicas"]


@given(st.text(min_size=1, max_size=20).filter(lambda s: s.strip() != ""))
def test_unknown_keys_are_warnings_never_errors(suffix: str) -> None:
    key = PREFIX + "x-" + suffix
    result = parse_workload("ns", "d", LABELS, {**BASE, key: "1"}, template())
    assert result.spec is not None
    assert [w.key for w in result.warnings] == [key]


# ---- the latency objective (slo-wait, slo-attainment) ------------------------------------------------------


def test_an_slo_is_optional_and_read_as_a_wait_and_a_fraction() -> None:
    spec = parse(BASE).spec
    assert spec is not None
    assert spec.slo_wait_seconds is None
    assert spec.slo_attainment is None
    for wait, seconds in (("2s", 2.0), ("500ms", 0.5), ("1m", 60.0), ("1.5", 1.5)):
        for share, fraction in (("99%", 0.99), ("99.9", 0.999), (" 95 % ", 0.95)):
            spec = parse({**BASE, PREFIX + "slo-wait": wait, PREFIX + "slo-attainment": share}).spec
            assert spec is not None
            assert spec.slo_wait_seconds == pytest.approx(seconds)
            assert spec.slo_attainment == pytest.approx(fraction)


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("slo-wait", "fast", "not a duration"),
        ("slo-wait", "0s", "must be a wait > 0"),
        ("slo-wait", "-2s", "not a duration"),
        ("slo-wait", "xms", "not a duration"),
        ("slo-attainment", "high", "not a percentage"),
        ("slo-attainment", "100%", "must be a percentage in [1, 100)"),
        ("slo-attainment", "0.99", "did you mean 99%?"),
        ("slo-attainment", "nan", "must be a percentage"),
    ],
)
def test_a_bad_slo_is_an_error_naming_key_and_value(key: str, value: str, message: str) -> None:
    result = parse({**BASE, PREFIX + key: value})
    assert result.spec is None
    (problem,) = result.errors
    assert problem.key == PREFIX + key
    assert problem.value == value
    assert message in problem.message


def test_demand_unit_defaults_to_requests_and_reads_tokens() -> None:
    from autoscaler.domain.demand import DemandUnit

    spec = parse(BASE).spec
    assert spec is not None
    assert spec.demand_unit is DemandUnit.REQUESTS
    for raw in ("tokens", " Tokens "):
        result = parse({**BASE, PREFIX + "demand-unit": raw})
        assert result.problems == ()
        assert result.spec is not None
        assert result.spec.demand_unit is DemandUnit.TOKENS
    assert parse({**BASE, PREFIX + "demand-unit": "requests"}).spec.demand_unit is DemandUnit.REQUESTS  # type: ignore[union-attr]


@pytest.mark.parametrize("raw", ["token", "tokens/s", "", "bytes"])
def test_a_bad_demand_unit_is_an_error_naming_key_and_value(raw: str) -> None:
    result = parse({**BASE, PREFIX + "demand-unit": raw})
    assert result.spec is None
    (problem,) = result.errors
    assert problem.key == PREFIX + "demand-unit"
    assert problem.value == raw
    assert "expected 'requests' or 'tokens'" in problem.message


def test_a_demand_unit_typo_gets_a_did_you_mean() -> None:
    result = parse({**BASE, PREFIX + "demand-units": "tokens"})
    (warning,) = result.warnings
    assert "did you mean predictive-autoscaler.io/demand-unit?" in warning.message
