"""TrainingReader.priority_classes over real HTTP: every ``scheduling.k8s.io/v1`` PriorityClass, paged, with the
``globalDefault`` class (two defaults: the lower value, as Kubernetes' admission picks); failures raise
``KubeReadError`` naming the list, a 403 and a 404 included (the group is always served).
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from autoscaler.adapters.kube import KubeReadError
from autoscaler.adapters.training import TrainingReader
from autoscaler.ports import PriorityClasses
from tests.kube.fakeapi import FakeKubeAPI


def priority_class(name: str, value: int, *, global_default: bool = False) -> dict[str, Any]:
    obj: dict[str, Any] = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                           "metadata": {"name": name}, "value": value}
    if global_default:
        obj["globalDefault"] = True
    return obj


def test_every_class_comes_back_with_its_value_and_the_global_default(
    fake_api: FakeKubeAPI, api_client: client.ApiClient
) -> None:
    fake_api.add("priorityclasses", priority_class("training-high", 1_000_000))
    fake_api.add("priorityclasses", priority_class("training-low", 100))
    fake_api.add("priorityclasses", priority_class("everyday", 7, global_default=True))
    fake_api.add("priorityclasses", priority_class("system-cluster-critical", 2_000_000_000))
    fake_api.add("priorityclasses", priority_class("placeholder", -10))
    answer = TrainingReader(api_client, page_size=2).priority_classes()
    assert answer == PriorityClasses(
        {"everyday": 7, "placeholder": -10, "system-cluster-critical": 2_000_000_000, "training-high": 1_000_000,
         "training-low": 100},
        global_default="everyday",
    )
    calls = fake_api.calls("GET", r"priorityclasses")
    assert {c.path for c in calls} == {"/apis/scheduling.k8s.io/v1/priorityclasses"}
    assert [c.query.get("continue") for c in calls] == [None, ["2"], ["4"]]  # 5 classes, pages of 2
    assert all(c.query["limit"] == ["2"] for c in calls)


def test_no_global_default_and_no_classes(fake_api: FakeKubeAPI, api_client: client.ApiClient) -> None:
    reader = TrainingReader(api_client)
    assert reader.priority_classes() == PriorityClasses({}, None)
    fake_api.add("priorityclasses", priority_class("training-low", 100))
    assert reader.priority_classes() == PriorityClasses({"training-low": 100}, None)


def test_two_global_defaults_resolve_to_the_lower_value(fake_api: FakeKubeAPI, api_client: client.ApiClient) -> None:
    fake_api.add("priorityclasses", priority_class("a-high-default", 500, global_default=True))
    fake_api.add("priorityclasses", priority_class("z-low-default", 20, global_default=True))
    assert TrainingReader(api_client).priority_classes().global_default == "z-low-default"


@pytest.mark.parametrize(("status", "message"), [(403, "HTTP 403 Forbidden"), (404, "HTTP 404"), (500, "HTTP 500")])
def test_failures_are_read_errors(
    fake_api: FakeKubeAPI, api_client: client.ApiClient, status: int, message: str
) -> None:
    fake_api.fail("GET", r"/priorityclasses$", status)
    with pytest.raises(KubeReadError, match=rf"^list scheduling.k8s.io/v1 priorityclasses: {message}") as caught:
        TrainingReader(api_client).priority_classes()
    assert getattr(caught.value.__cause__, "status", None) == status  # what the money stage tells a 403 by


def test_a_failure_on_a_later_page_is_a_read_error(fake_api: FakeKubeAPI, api_client: client.ApiClient) -> None:
    for i in range(3):
        fake_api.add("priorityclasses", priority_class(f"pc{i}", i))
    fake_api.fail("GET", r"/priorityclasses$", 503, times=0)  # disarmed: armed while the first page is served
    fake_api.before("GET", r"/priorityclasses$", lambda api: setattr(api.faults[0], "times", 1))
    with pytest.raises(KubeReadError, match="HTTP 503"):
        TrainingReader(api_client, page_size=2).priority_classes()
    assert [c.query.get("continue") for c in fake_api.calls("GET", r"priorityclasses")] == [None, ["2"]]


@pytest.mark.kube
def test_real_server_serves_the_built_in_classes(real_api_client: client.ApiClient) -> None:
    classes = TrainingReader(real_api_client).priority_classes()
    assert classes.values["system-cluster-critical"] == 2_000_000_000  # every cluster has the built-in classes
    assert classes.global_default is None or classes.global_default in classes.values
