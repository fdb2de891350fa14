"""Volcano PodGroups rank by their PriorityClass in the money stage, over real HTTP to the fake API server.

Two pending 8-GPU PodGroups compete for a cluster ceiling that buys one: whichever ranks higher is reserved, the
other deferred whole. Their names are chosen so that a tie (no priority read) reserves the wrong one: ``a-...``
sorts first. Covered: a class value (1000000 clamped to 1000) outranks a lower one; the ``globalDefault`` class
applies to a PodGroup without a class (and to one naming a class that does not exist), as in Volcano; our
``priority`` annotation still overrides; the map is cached for ``PRIORITY_CLASS_REFRESH_SECONDS``, read only when
there are PodGroups, kept on a failed read (reported and counted, retried next tick), and a 403 is reported once.
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from autoscaler.adapters.training import TrainingReader
from autoscaler.config.schema import Config
from autoscaler.domain.annotations import PREFIX
from autoscaler.runtime.metrics import ControllerMetrics
from autoscaler.runtime.money import PRIORITY_CLASS_REFRESH_SECONDS, MoneyStage
from tests.kube.fakeapi import FakeKubeAPI, load_crd, schema_errors
from tests.runtime.test_money import PRICE, config
from tests.shared import require_shared

VOLCANO_CRD = require_shared("crds") / "scheduling.volcano.sh_podgroups.yaml"  # the module skips without ../shared
PODGROUPS = "podgroups.scheduling.volcano.sh"
NOW = 1_700_000_000
LOW, HIGH = "PodGroup/training/a-low", "PodGroup/training/z-high"


def podgroup(name: str, priority_class: str | None, *, annotation: str | None = None) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "training", "annotations": {PREFIX + "team": "ml"}},
        "spec": {"minMember": 1, "minResources": {"nvidia.com/gpu": "8"}, "queue": "training"},
        "status": {"phase": "Pending"},
    }
    if priority_class is not None:
        obj["spec"]["priorityClassName"] = priority_class
    if annotation is not None:
        obj["metadata"]["annotations"][PREFIX + "priority"] = annotation
    (crd,) = [c for c in load_crd(VOLCANO_CRD) if c.version == "v1beta1"]
    assert crd.schema is not None
    assert schema_errors(obj, crd.schema, strict=True) == []
    return obj


def priority_class(name: str, value: int, *, global_default: bool = False) -> dict[str, Any]:
    return {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name},
            "value": value, "globalDefault": global_default}


class Rig:
    """A money stage reading gangs through ``TrainingReader``; a cluster ceiling with room for one 8-GPU gang."""

    def __init__(self, fake: FakeKubeAPI, api: client.ApiClient) -> None:
        self.fake = fake
        fake.install_crd(VOLCANO_CRD)
        self.stage = MoneyStage(training=TrainingReader(api))
        self.metrics = ControllerMetrics()
        self.cfg: Config = config("http://127.0.0.1:1", ceilings={"cluster": PRICE * 8 + PRICE / 2})

    def tick(self, now: int) -> tuple[dict[str, bool], list[str]]:
        """Which gangs were reserved, and the errors of the tick."""
        errors: list[str] = []
        outcome = self.stage.run([], self.cfg, now, write=False, horizon_seconds=900, metrics=self.metrics,
                                 errors=errors)
        return {g["key"]: g["reserved"] for g in outcome.report.to_dict()["gangs"]}, errors

    def reserved(self, now: int) -> str:
        """The one gang the ceiling reserves (the tick must have no errors)."""
        gangs, errors = self.tick(now)
        assert errors == []
        (key,) = [k for k, r in gangs.items() if r]
        return key

    def class_reads(self) -> int:
        return len(self.fake.calls("GET", r"/apis/scheduling\.k8s\.io/v1/priorityclasses$"))

    def read_errors(self) -> float | None:
        value: float | None = self.metrics.registry.get_sample_value("predictive_autoscaler_errors_total",
                                                                     {"kind": "kube_read"})
        return value


@pytest.fixture
def rig(fake_api: FakeKubeAPI, api_client: client.ApiClient) -> Rig:
    fake_api.add("priorityclasses", priority_class("training-high", 1_000_000))
    fake_api.add("priorityclasses", priority_class("training-low", 20))
    return Rig(fake_api, api_client)


def test_without_priority_classes_the_tie_reserves_the_first_key(rig: Rig) -> None:
    """The control for the tests below: two standard PodGroups tie, and the tie goes to ``a-low``."""
    rig.fake.add(PODGROUPS, podgroup("a-low", None))
    rig.fake.add(PODGROUPS, podgroup("z-high", None))
    assert rig.reserved(NOW) == LOW


def test_a_higher_priority_class_outranks_a_lower_one(rig: Rig) -> None:
    rig.fake.add(PODGROUPS, podgroup("a-low", "training-low"))
    rig.fake.add(PODGROUPS, podgroup("z-high", "training-high"))
    gangs, errors = rig.tick(NOW)
    assert errors == []
    assert gangs == {HIGH: True, LOW: False}
    assert rig.class_reads() == 1


def test_the_clamped_class_value_ranks_against_inference_tiers(rig: Rig) -> None:
    """1000000 clamps to 1000 (critical); 20 stays 20, below standard (50): a plain annotated gang sits between."""
    rig.fake.add(PODGROUPS, podgroup("a-low", "training-low"))
    rig.fake.add(PODGROUPS, podgroup("m-standard", None, annotation="standard"))
    assert rig.reserved(NOW) == "PodGroup/training/m-standard"
    rig.fake.add(PODGROUPS, podgroup("z-high", "training-high", annotation=None))
    assert rig.reserved(NOW + 1) == HIGH


def test_the_global_default_applies_to_a_podgroup_without_a_known_class(rig: Rig) -> None:
    rig.fake.add("priorityclasses", priority_class("everyday", 5, global_default=True))
    rig.fake.add("priorityclasses", priority_class("training-mid", 30))
    rig.fake.add(PODGROUPS, podgroup("a-low", None))  # standard (50) without the default; 5 with it
    rig.fake.add(PODGROUPS, podgroup("z-high", "training-mid"))
    assert rig.reserved(NOW) == HIGH
    # A class that does not exist gets the default's value too (Volcano's rule), not ``standard``.
    rig.fake.add(PODGROUPS, podgroup("a-low", "deleted-class"))
    assert rig.reserved(NOW + 1) == HIGH


def test_our_annotation_overrides_the_class(rig: Rig) -> None:
    rig.fake.add(PODGROUPS, podgroup("a-low", "training-low"))  # 20
    rig.fake.add(PODGROUPS, podgroup("z-high", "training-high", annotation="batch"))  # 10, not 1000
    assert rig.reserved(NOW) == LOW


def test_the_map_is_cached_and_read_only_when_there_are_podgroups(rig: Rig) -> None:
    assert rig.tick(NOW) == ({}, [])
    assert rig.class_reads() == 0  # no PodGroups: nothing to rank

    rig.fake.add(PODGROUPS, podgroup("a-low", "training-low"))
    rig.fake.add(PODGROUPS, podgroup("z-high", "training-high"))
    assert rig.reserved(NOW) == HIGH
    # The classes are swapped (deleted and re-created: a value is immutable) ...
    rig.fake.add("priorityclasses", priority_class("training-high", 1))
    rig.fake.add("priorityclasses", priority_class("training-low", 900))
    assert rig.reserved(NOW + PRIORITY_CLASS_REFRESH_SECONDS - 1) == HIGH  # ... unseen within the period
    assert rig.class_reads() == 1
    assert rig.reserved(NOW + PRIORITY_CLASS_REFRESH_SECONDS) == LOW  # ... and seen after it
    assert rig.class_reads() == 2


def test_a_failed_read_keeps_the_last_map_is_reported_and_retried_next_tick(rig: Rig) -> None:
    rig.fake.add(PODGROUPS, podgroup("a-low", "training-low"))
    rig.fake.add(PODGROUPS, podgroup("z-high", "training-high"))
    assert rig.reserved(NOW) == HIGH

    rig.fake.fail("GET", r"/priorityclasses$", 503)
    later = NOW + PRIORITY_CLASS_REFRESH_SECONDS
    gangs, errors = rig.tick(later)
    assert gangs == {HIGH: True, LOW: False}  # the last good map, not a tie
    (error,) = errors
    assert error.startswith("reading PriorityClasses failed (retried next tick); ranking PodGroups with the 2 "
                            "PriorityClass(es) of the last good read: list scheduling.k8s.io/v1 priorityclasses: "
                            "HTTP 503")
    assert rig.read_errors() == 1

    assert rig.reserved(later + 1) == HIGH  # retried at once, and read
    assert rig.class_reads() == 3
    assert rig.read_errors() == 1


def test_a_failed_first_read_ranks_by_annotation_and_tier_only(rig: Rig) -> None:
    rig.fake.add(PODGROUPS, podgroup("a-low", "training-low"))
    rig.fake.add(PODGROUPS, podgroup("z-high", "training-high"))
    rig.fake.fail("GET", r"/priorityclasses$", 500)
    gangs, errors = rig.tick(NOW)
    assert gangs == {LOW: True, HIGH: False}  # nothing known yet: both standard, the tie
    (error,) = errors
    assert "with the 0 PriorityClass(es) of the last good read" in error
    assert rig.reserved(NOW + 1) == HIGH


def test_a_forbidden_read_is_reported_once_until_a_read_succeeds(rig: Rig) -> None:
    rig.fake.add(PODGROUPS, podgroup("a-low", "training-low"))
    rig.fake.add(PODGROUPS, podgroup("z-high", "training-high"))
    rig.fake.fail("GET", r"/priorityclasses$", 403, times=2)
    gangs, errors = rig.tick(NOW)
    assert gangs == {LOW: True, HIGH: False}
    (error,) = errors
    assert error.startswith("reading PriorityClasses is forbidden (grant list on scheduling.k8s.io priorityclasses, "
                            "deploy/rbac.yaml)")
    assert "HTTP 403 Forbidden" in error
    assert rig.read_errors() == 1

    assert rig.tick(NOW + 60) == ({LOW: True, HIGH: False}, [])  # not re-asked within the period, not re-reported
    assert rig.class_reads() == 1
    assert rig.tick(NOW + PRIORITY_CLASS_REFRESH_SECONDS) == ({LOW: True, HIGH: False}, [])  # re-asked, still 403
    assert rig.class_reads() == 2
    assert rig.read_errors() == 1

    assert rig.reserved(NOW + 2 * PRIORITY_CLASS_REFRESH_SECONDS) == HIGH  # RBAC fixed: read
    rig.fake.fail("GET", r"/priorityclasses$", 403)
    _, errors = rig.tick(NOW + 3 * PRIORITY_CLASS_REFRESH_SECONDS)  # revoked again: a new problem, reported
    (error,) = errors
    assert error.startswith("reading PriorityClasses is forbidden")
    assert "the 2 PriorityClass(es) of the last good read" in error
    assert rig.read_errors() == 2
