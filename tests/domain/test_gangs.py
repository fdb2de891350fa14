"""Gang parsing from Kueue Workloads and Volcano PodGroups (examples validated against the CRDs); trough placement."""

from __future__ import annotations

import copy
from collections.abc import Callable
from functools import cache
from typing import Any

import jsonschema
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from autoscaler.domain.gangs import (
    Gang,
    GangError,
    parse_gang,
    parse_kueue_workload,
    parse_volcano_podgroup,
    place_gang,
)
from tests.shared import require_shared

Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@cache
def crd_validator(file: str, version: str) -> Any:
    """A validator for one CRD version's openAPIV3Schema, built once (``jsonschema.validate`` re-checks the
    1.4 MB Kueue schema on every call). Skips the calling test when ../shared/crds is absent."""
    crd = yaml.load((require_shared("crds") / file).read_text(), Loader=Loader)
    (ver,) = [v for v in crd["spec"]["versions"] if v["name"] == version]
    schema: dict[str, Any] = ver["schema"]["openAPIV3Schema"]
    return jsonschema.validators.validator_for(schema)(schema)


def valid(obj: dict[str, Any]) -> dict[str, Any]:
    """Validate an example against its CRD (by apiVersion) so the tests read objects the API server would serve."""
    group, version = obj["apiVersion"].split("/")
    file = {"kueue.x-k8s.io": "kueue.x-k8s.io_workloads.yaml",
            "scheduling.volcano.sh": "scheduling.volcano.sh_podgroups.yaml"}[group]
    crd_validator(file, version).validate(obj)
    return obj


def pod(gpus: int | str | None, *, init: int | None = None, sidecar: int | None = None,
        pool: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "train", "image": "trainer:1"}]}
    if gpus is not None:
        spec["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": gpus}}
    inits = []
    if init is not None:
        inits.append({"name": "warmup", "image": "x", "resources": {"requests": {"nvidia.com/gpu": init}}})
    if sidecar is not None:
        inits.append({"name": "proxy", "image": "x", "restartPolicy": "Always",
                      "resources": {"limits": {"nvidia.com/gpu": sidecar}}})
    if inits:
        spec["initContainers"] = inits
    if pool:
        spec["nodeSelector"] = {"karpenter.sh/nodepool": pool}
    return {"spec": spec}


def workload(*pod_sets: tuple[str, int, dict[str, Any]], version: str = "v1beta2", priority: int | None = 100,
             conditions: tuple[tuple[str, str], ...] = (), admitted_counts: dict[str, int] | None = None,
             annotations: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": f"kueue.x-k8s.io/{version}",
        "kind": "Workload",
        "metadata": {"name": "llama-ft", "namespace": "ml", "annotations": annotations or {}},
        "spec": {"queueName": "gpu", "podSets": [{"name": n, "count": c, "template": t} for n, c, t in pod_sets],
                 **spec},
    }
    if priority is not None:
        obj["spec"]["priority"] = priority
    if conditions or admitted_counts:
        obj["status"] = {"conditions": [
            {"type": t, "status": s, "reason": "Test", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}
            for t, s in conditions
        ]}
        if admitted_counts:
            obj["status"]["admission"] = {
                "clusterQueue": "cq",
                "podSetAssignments": [{"name": n, "count": c} for n, c in admitted_counts.items()],
            }
    return valid(obj)


def podgroup(min_member: int, gpus: int | str | None, *, phase: str | None = None, priority_class: str | None = None,
             annotations: dict[str, str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"minMember": min_member, "queue": "default"}
    if gpus is not None:
        spec["minResources"] = {"nvidia.com/gpu": gpus, "cpu": "16"}
    if priority_class:
        spec["priorityClassName"] = priority_class
    obj: dict[str, Any] = {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": "resnet", "namespace": "vision", "annotations": annotations or {}},
        "spec": spec,
    }
    if phase:
        obj["status"] = {"phase": phase}
    return valid(obj)


# ---------------------------------------------------------------------------------------------- Kueue


@pytest.mark.parametrize(
    ("make", "gpus", "pods", "admitted", "inactive"),
    [
        (lambda: workload(("workers", 4, pod(8))), 32, 4, False, False),
        (lambda: workload(("launcher", 1, pod(None)), ("workers", 3, pod("2"))), 6, 4, False, False),
        (lambda: workload(("w", 2, pod(1, init=4))), 8, 2, False, False),  # init container peak 4 > 1
        (lambda: workload(("w", 2, pod(1, sidecar=1))), 4, 2, False, False),  # sidecars run alongside
        (lambda: workload(("w", 4, pod(8)), conditions=(("QuotaReserved", "True"),)), 32, 4, False, False),
        (lambda: workload(("w", 4, pod(8)), conditions=(("QuotaReserved", "True"), ("Admitted", "True"))),
         32, 4, True, False),
        # partial admission: the admitted count is what is reserved
        (lambda: workload(("w", 4, pod(8)), conditions=(("Admitted", "True"),), admitted_counts={"w": 3}),
         24, 3, True, False),
        (lambda: workload(("w", 4, pod(8)), conditions=(("Admitted", "True"), ("Finished", "True"))),
         32, 4, True, True),
        (lambda: workload(("w", 4, pod(8)), active=False), 32, 4, False, True),
        (lambda: workload(("w", 2, pod(8)), version="v1beta1", priority=None), 16, 2, False, False),
    ],
    ids=["one-podset", "launcher+workers", "init-peak", "sidecar", "quota-only", "admitted", "partial",
         "finished", "deactivated", "v1beta1"],
)
def test_kueue_workload_table(make: Callable[[], dict[str, Any]], gpus: int, pods: int, admitted: bool,
                              inactive: bool) -> None:
    g = parse_kueue_workload(make())
    assert (g.kind, g.namespace, g.name, g.key) == ("Workload", "ml", "llama-ft", "Workload/ml/llama-ft")
    assert (g.gpus, g.pods, g.admitted, g.inactive) == (gpus, pods, admitted, inactive)
    assert g.team == "ml"  # the namespace when no team annotation


def test_kueue_priority_nodepool_window_and_annotations() -> None:
    obj = workload(("w", 2, pod(4, pool="a100-spot")), priority=100000, maximumExecutionTimeSeconds=7200)
    g = parse_gang(obj)
    assert g.priority == 1000  # clamped from Kueue's int32 to the 0..1000 scale
    assert (g.nodepool, g.duration_seconds, g.start_after, g.deadline) == ("a100-spot", 7200, None, None)
    annotated = workload(("w", 2, pod(4)), priority=5, annotations={
        "predictive-autoscaler.io/priority": "production", "predictive-autoscaler.io/team": "research",
        "predictive-autoscaler.io/nodepool": "h100", "predictive-autoscaler.io/start-after": "2026-01-31T22:00:00Z",
        "predictive-autoscaler.io/deadline": "1769929200", "predictive-autoscaler.io/duration": "3h"})
    g = parse_gang(annotated)
    assert (g.priority, g.team, g.nodepool, g.duration_seconds) == (100, "research", "h100", 3 * 3600)
    assert (g.start_after, g.deadline) == (1769896800, 1769929200)
    assert parse_gang(workload(("w", 1, pod(1)), priority=-5)).priority == 0


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda o: o["spec"].pop("podSets"), "Workload ml/llama-ft: spec.podSets: expected a non-empty list"),
        (lambda o: o["spec"]["podSets"][0].update(count="2"), "spec.podSets[0].count: expected an integer >= 0"),
        (lambda o: o["spec"]["podSets"][0].pop("template"), "spec.podSets[0].template: missing"),
        (lambda o: o["spec"]["podSets"][0]["template"]["spec"]["containers"][0]["resources"]["limits"].update(
            {"nvidia.com/gpu": "1.5"}), "spec.podSets[0].template.spec.containers[0].resources.limits[nvidia.com/gpu]"),
        (lambda o: o["spec"]["podSets"][0]["template"]["spec"]["containers"][0]["resources"].update(
            requests={"nvidia.com/gpu": 2}), "nvidia.com/gpu requests 2 != limits 8"),
        (lambda o: o["metadata"].pop("namespace"), "Workload llama-ft: metadata.namespace: missing"),
        (lambda o: o["spec"].update(priority="high"), "spec.priority: expected an integer"),
        (lambda o: o["metadata"]["annotations"].update({"predictive-autoscaler.io/deadline": "tomorrow"}),
         "deadline]: expected RFC 3339"),
        (lambda o: o["metadata"]["annotations"].update({"predictive-autoscaler.io/start-after": "2026-01-31T22:00:00"}),
         "expected RFC 3339 with a zone"),
        (lambda o: o["metadata"]["annotations"].update({"predictive-autoscaler.io/priority": "urgent"}),
         "priority]: expected 0..1000 or one of critical"),
        (lambda o: o["metadata"]["annotations"].update({"predictive-autoscaler.io/duration": "soon"}),
         "duration]: not a duration"),
        (lambda o: o["metadata"]["annotations"].update({"predictive-autoscaler.io/start-after": "200",
                                                        "predictive-autoscaler.io/deadline": "100"}),
         "deadline]: 100 is before start-after 200"),
    ],
)
def test_malformed_workloads_name_the_object_and_field(mutate: Callable[[dict[str, Any]], Any], message: str) -> None:
    obj = copy.deepcopy(workload(("w", 4, pod(8))))
    mutate(obj)
    with pytest.raises(GangError, match=message.replace("[", r"\[").replace("]", r"\]").replace(".", r"\.")):
        parse_kueue_workload(obj)


def test_pod_sets_on_different_pools_need_an_annotation() -> None:
    obj = workload(("a", 1, pod(1, pool="p1")), ("b", 1, pod(1, pool="p2")))
    with pytest.raises(GangError, match="pod sets select different NodePools"):
        parse_kueue_workload(obj)
    obj["metadata"]["annotations"]["predictive-autoscaler.io/nodepool"] = "p1"
    assert parse_kueue_workload(obj).nodepool == "p1"


# ---------------------------------------------------------------------------------------------- Volcano


@pytest.mark.parametrize(
    ("obj", "kwargs", "gpus", "pods", "admitted", "inactive"),
    [
        (lambda: podgroup(4, 32), {}, 32, 4, False, False),
        (lambda: podgroup(4, "16", phase="Inqueue"), {}, 16, 4, True, False),
        (lambda: podgroup(2, 16, phase="Running"), {}, 16, 2, True, False),
        (lambda: podgroup(2, 16, phase="Pending"), {}, 16, 2, False, False),
        (lambda: podgroup(2, 16, phase="Completed"), {}, 16, 2, False, True),
        (lambda: podgroup(3, None), {"gpus_per_pod": 4}, 12, 3, False, False),
        (lambda: podgroup(3, 2), {"gpus_per_pod": 4}, 2, 3, False, False),  # minResources wins
    ],
    ids=["pending-no-status", "inqueue", "running", "pending", "completed", "min-member-x-per-pod", "min-resources"],
)
def test_volcano_podgroup_table(obj: Callable[[], dict[str, Any]], kwargs: dict[str, Any], gpus: int, pods: int,
                                admitted: bool, inactive: bool) -> None:
    g = parse_gang(obj(), **kwargs)
    assert (g.kind, g.key, g.team) == ("PodGroup", "PodGroup/vision/resnet", "vision")
    assert (g.gpus, g.pods, g.admitted, g.inactive) == (gpus, pods, admitted, inactive)


def test_volcano_priority_comes_from_the_priority_class_values() -> None:
    obj = podgroup(2, 8, priority_class="training-high")
    assert parse_volcano_podgroup(obj, priority_classes={"training-high": 100}).priority == 100
    assert parse_volcano_podgroup(obj, priority_classes={"training-high": 2_000_000}).priority == 1000
    assert parse_volcano_podgroup(obj).priority == 50  # unknown class: the default tier


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        (lambda: podgroup(2, None), r"spec\.minResources\[nvidia\.com/gpu\]: missing, and no per-pod GPU count"),
        (lambda: {**podgroup(2, 8), "spec": {"minMember": -1}}, r"spec\.minMember: expected an integer >= 0"),
        (lambda: {**podgroup(2, 8), "status": {"phase": "Sleeping"}}, "status.phase: unknown phase 'Sleeping'"),
        (lambda: {**podgroup(2, 8), "spec": {"minResources": {"nvidia.com/gpu": "2Gi"}}},
         "expected a whole number of GPUs, got '2Gi'"),
        (lambda: {"apiVersion": "v1", "kind": "Pod", "metadata": {}}, "not a gang: apiVersion 'v1' kind 'Pod'"),
        (lambda: {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup"}, "metadata: expected a mapping"),
    ],
)
def test_malformed_podgroups_are_clear_errors(obj: Callable[[], dict[str, Any]], message: str) -> None:
    with pytest.raises(GangError, match=message):
        parse_gang(obj())


# ---------------------------------------------------------------------------------------------- placement


def scheduled(gpus: int, duration: int) -> Gang:
    return Gang("Workload", "ml", "nightly", gpus, 1, False, 50, duration_seconds=duration)


# A day of inference GPUs in hours: busy by day, a trough from 01:00 to 05:00.
DAY = [(h * 3600, g) for h, g in enumerate([6, 3, 2, 2, 2, 3, 8, 12, 14, 14, 14, 13, 12, 12, 13, 14, 14, 13, 12,
                                            11, 10, 9, 8, 7])]


def test_a_gang_is_placed_in_the_trough() -> None:
    p = place_gang(scheduled(8, 3 * 3600), DAY, capacity=16, earliest=0, latest=20 * 3600)
    assert p.start == 2 * 3600
    assert p.peak_gpus == 10
    assert p.fits
    assert "lowest peak 10" in p.detail


def test_the_window_is_respected_and_ties_go_to_the_earliest_start() -> None:
    p = place_gang(scheduled(8, 3600), DAY, capacity=16, earliest=9 * 3600, latest=15 * 3600)
    assert p.start == 12 * 3600
    assert p.peak_gpus == 20
    assert not p.fits
    q = place_gang(scheduled(1, 1800), DAY, capacity=16, earliest=90, latest=90)
    assert q.start == 90
    assert q.peak_gpus == 7


def test_run_past_the_forecast_end_holds_the_last_value() -> None:
    p = place_gang(scheduled(4, 6 * 3600), [(0, 1.0), (3600, 9.0)], capacity=100, earliest=0, latest=3600)
    assert p.peak_gpus == 13  # both starts overlap the 9-GPU tail


def test_placement_errors() -> None:
    with pytest.raises(ValueError, match="without a run time"):
        place_gang(Gang("Workload", "ml", "x", 1, 1, False, 50), DAY, 16, 0, 10)
    with pytest.raises(ValueError, match="empty window"):
        place_gang(scheduled(1, 60), DAY, 16, 10, 0)
    with pytest.raises(ValueError, match="empty GPU forecast"):
        place_gang(scheduled(1, 60), [], 16, 0, 10)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(0, 32), min_size=1, max_size=48),
    st.integers(1, 16),
    st.integers(1, 12),
    st.integers(0, 47),
    st.integers(0, 47),
)
def test_placement_minimises_the_peak_over_every_start_in_the_window(
    gpus: list[int], gang_gpus: int, hours: int, a: int, b: int
) -> None:
    """Brute force over every minute in the window: no start has a lower peak than the one chosen."""
    step = 3600
    forecast = [(i * step, float(g)) for i, g in enumerate(gpus)]
    earliest, latest = min(a, b) * step, max(a, b) * step
    gang = scheduled(gang_gpus, hours * step)
    p = place_gang(gang, forecast, capacity=1e9, earliest=earliest, latest=latest)

    def peak(start: int) -> float:
        end = start + hours * step
        in_force = [g for t, g in forecast if t <= start][-1:] or [forecast[0][1]]
        return max(in_force + [g for t, g in forecast if start < t < end]) + gang_gpus

    assert earliest <= p.start <= latest
    assert p.peak_gpus == peak(p.start)
    for start in range(earliest, latest + 1, 600):
        assert p.peak_gpus <= peak(start)


def test_the_schema_check_is_real() -> None:
    """The examples above are only as good as the validation: a wrong type must be rejected."""
    with pytest.raises(jsonschema.ValidationError):
        valid({**podgroup(2, 8), "spec": {"minMember": "two"}})
    with pytest.raises(jsonschema.ValidationError):
        workload(("w", -1, pod(1)))
