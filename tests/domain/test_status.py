"""``autoscaler.domain.status``: the status object's name and labels, its JSON, and which status a Deployment seen
for the first time resumes from (the object, or the annotation an older version wrote)."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from autoscaler.domain.status import (
    DeploymentStatus,
    decode_status,
    deployment_label,
    encode_status,
    first_sight,
    status_object_name,
)

DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")

label = st.from_regex(r"[a-z0-9]([-a-z0-9]{0,20}[a-z0-9])?", fullmatch=True)
names = st.lists(label, min_size=1, max_size=12).map(".".join).filter(lambda n: len(n) <= 253)


def test_a_short_name_reads_as_the_deployments() -> None:
    assert status_object_name("llama-70b") == "llama-70b-predictive-autoscaler"
    assert deployment_label("llama-70b") == "llama-70b"


@given(names)
def test_every_deployment_name_gives_a_valid_object_name_and_label(name: str) -> None:
    obj = status_object_name(name)
    assert len(obj) <= 253
    assert DNS_SUBDOMAIN.match(obj), obj
    value = deployment_label(name)
    assert len(value) <= 63
    assert LABEL_VALUE.match(value), value


def test_long_names_stay_unique_by_their_hash() -> None:
    a, b = "a" * 240 + "-x", "a" * 240 + "-y"
    assert status_object_name(a) != status_object_name(b)
    assert status_object_name(a).startswith("a" * 100)
    dotted = "a" * 229 + ".b" + "c" * 20  # the cut lands next to the dot: it is not kept
    assert DNS_SUBDOMAIN.match(status_object_name(dotted))
    assert deployment_label("x" * 64) != deployment_label("x" * 65)


def test_the_json_is_canonical_and_refuses_nan() -> None:
    assert encode_status({"b": 1, "a": [1.5, None]}) == '{"a":[1.5,null],"b":1}'
    with pytest.raises(ValueError, match="Out of range float"):
        encode_status({"x": float("inf")})
    assert decode_status('{"a":1}') == {"a": 1}
    with pytest.raises(ValueError, match="not an object"):
        decode_status("[1]")


OLD = json.dumps({"time": "2025-03-01T12:00:00+00:00", "tuning": {"days_pooled": 5}})
NEW = json.dumps({"time": "2025-03-01T12:05:00+00:00", "tuning": {"days_pooled": 6}})


def test_the_object_is_resumed_from_and_the_annotation_only_removed() -> None:
    sight = first_sight("u1", OLD, NEW, "u1")
    assert sight.saved == json.loads(NEW)
    assert (sight.copy, sight.remove_annotation, sight.problems) == (None, True, ())


def test_an_annotation_without_an_object_is_copied_then_removed() -> None:
    sight = first_sight("u1", OLD, None, None)
    assert sight.saved == sight.copy == json.loads(OLD)
    assert sight.remove_annotation


def test_an_annotation_newer_than_the_object_wins() -> None:
    """A controller rolled back to a version that wrote the annotation, then upgraded again."""
    sight = first_sight("u1", NEW, OLD, "u1")
    assert sight.saved == sight.copy == json.loads(NEW)


def test_an_object_of_an_earlier_deployment_of_that_name_is_not_resumed_from() -> None:
    assert first_sight("u2", None, NEW, "u1").saved is None
    assert first_sight("u2", OLD, NEW, "u1").saved == json.loads(OLD)


def test_nothing_left_is_nothing_to_do() -> None:
    sight = first_sight("u1", None, None, None)
    assert (sight.saved, sight.copy, sight.remove_annotation, sight.problems) == (None, None, False, ())
    assert first_sight("u1", None, NEW, "u1").remove_annotation is False


def test_unreadable_statuses_are_problems_and_an_unreadable_annotation_still_goes() -> None:
    sight = first_sight("u1", "not json", "[]", "u1")
    assert (sight.saved, sight.copy, sight.remove_annotation) == (None, None, True)
    assert len(sight.problems) == 2
    assert "status object" in sight.problems[0]
    assert "annotation" in sight.problems[1]


# ---------------------------------------------------------------------------------------------- the typed status


def _published() -> dict[str, Any]:
    return {
        "mode": "scale", "desiredReplicas": 5, "currentReplicas": 4, "readyReplicas": 3, "leadSeconds": 360.0,
        "warmPool": {"replicas": 1, "as": "replicas"}, "forecast": {"model": "default", "mean": 4.2},
        "demandSource": "full", "demandDegraded": False, "demandUnit": "requests", "tokenWeights": None,
        "steps": [{"name": "forecast", "replicas": 5, "detail": "p90 ..."}], "track": [{"t": 1, "actual": 2.0}],
        "capacity": {"perReplica": 2.0, "source": "annotation"}, "tuning": None, "scaleDown": None,
        "time": "2026-11-25T12:00:00+00:00",
    }


def test_the_status_reads_back_what_it_wrote() -> None:
    status = DeploymentStatus.from_dict(_published())
    assert status.desired_replicas == 5
    assert status.warm_pool_as == "replicas"
    assert status.steps[0].name == "forecast"
    assert status.to_dict() == _published()
    assert DeploymentStatus.from_dict(json.loads(encode_status(status.to_dict()))) == status


def test_the_hpas_that_also_scale_it_are_published_only_when_there_are_any() -> None:
    assert "scaledBy" not in DeploymentStatus.from_dict(_published()).to_dict()
    contended = DeploymentStatus.from_dict({**_published(), "mode": "advisory", "scaledBy": ["llama-cpu"]})
    assert contended.scaled_by == ("llama-cpu",)
    assert contended.to_dict()["scaledBy"] == ["llama-cpu"]
    assert contended.decided() != DeploymentStatus.from_dict({**_published(), "mode": "advisory"}).decided()
    with pytest.raises(ValueError, match="scaledBy"):
        DeploymentStatus.from_dict({**_published(), "scaledBy": "llama-cpu"})


def test_what_the_events_told_is_kept_and_an_entry_of_another_kind_is_left_out() -> None:
    assert "told" not in DeploymentStatus.from_dict(_published()).to_dict()
    told = DeploymentStatus.from_dict({**_published(), "told": {"outage": True, "rollout": "held", "odd": [1]}})
    assert told.told == {"outage": True, "rollout": "held"}
    assert told.to_dict()["told"] == {"outage": True, "rollout": "held"}
    assert told.decided() != DeploymentStatus.from_dict(_published()).decided()  # a transition is written
    with pytest.raises(ValueError, match="told"):
        DeploymentStatus.from_dict({**_published(), "told": ["outage"]})


def test_an_older_status_without_newer_keys_reads_with_their_defaults() -> None:
    old = {k: v for k, v in _published().items() if k not in ("demandUnit", "tokenWeights", "scaleDown", "capacity")}
    status = DeploymentStatus.from_dict(old)
    assert (status.demand_unit, status.token_weights, status.scale_down, status.capacity) == (
        "requests", None, None, None)


@pytest.mark.parametrize(("key", "value"), [("desiredReplicas", "5"), ("warmPool", [1]), ("leadSeconds", True),
                                            ("demandDegraded", "no"), ("steps", {"name": "x"}), ("tuning", "weekly")])
def test_a_status_with_a_key_of_the_wrong_type_is_refused_naming_the_key(key: str, value: Any) -> None:
    with pytest.raises(ValueError, match=key):
        DeploymentStatus.from_dict({**_published(), key: value})


def test_what_is_written_on_change_leaves_out_what_moves_every_bin() -> None:
    a = DeploymentStatus.from_dict(_published())
    moved = DeploymentStatus.from_dict({**_published(), "forecast": {"mean": 9.9}, "track": [], "leadSeconds": 1.0})
    assert a.decided() == moved.decided()
    rescaled = DeploymentStatus.from_dict({**_published(), "desiredReplicas": 6})
    assert a.decided() != rescaled.decided()
    rerouted = DeploymentStatus.from_dict({**_published(), "steps": [{"name": "reactive_floor", "replicas": 5}]})
    assert a.decided() != rerouted.decided()
