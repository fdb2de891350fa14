"""``TrainingGangs`` over the official client: Kueue Workloads and Volcano PodGroups as raw API JSON.

Why it exists: training jobs hold GPUs all-or-nothing (a gang); the cost ceiling must count them whole and
never plan to split one. Which parts of these objects matter (pod sets, counts, minMember, admission,
phase) is a domain decision, so this reader does no parsing: it returns the objects as the API serves
them (``autoscaler.domain.gangs`` reads them), with ``apiVersion``/``kind`` set on every item so the parser
can tell the shape it has.

Versions read: ``kueue.x-k8s.io/v1beta1`` ``workloads`` and ``scheduling.volcano.sh/v1beta1``
``podgroups``. Kueue also serves ``v1beta2`` (its storage version since 0.15); the API server converts, so
reading v1beta1 works while Kueue serves it, and one shape is simpler for the parser. Change
``KUEUE``/``VOLCANO`` (or pass ``kueue_version``) when a release drops v1beta1.

A cluster without Kueue or Volcano is normal: ``404`` on the resource (the group/version is not served)
gives an empty ``CustomObjects`` with ``installed=False`` and a one-line note, not an error. Any other
failure (``403`` from missing RBAC, ``5xx``, an unreachable server) raises ``KubeReadError``: a tick must
not plan with gangs silently missing. Lists are paged (``limit``/``continue``) and can be confined to the
namespaces the controller is allowed to see.

PriorityClasses (``scheduling.k8s.io/v1``, cluster-scoped; the built-in API, so read with the typed
``SchedulingV1Api``): Volcano ranks a PodGroup by the value of its ``spec.priorityClassName``, so
``priority_classes`` lists them all (paged) with the ``globalDefault`` class. Two global defaults (possible only
through a race, the API server refuses a second one) resolve as Kubernetes' admission does: the lower value wins.
Any failure, ``403`` included, raises ``KubeReadError`` (the group is always served, so ``404`` is no "not
installed"); how often to read and what to do on a failure is the money stage's policy (it caches the map).

Kueue's queues (``list_kueue_queues``: ``localqueues`` in the namespaces the controller sees, ``clusterqueues``,
cluster-scoped: the same /apis/GROUP/VERSION/PLURAL path) say whether a pending Workload can be admitted at all
(``autoscaler.domain.kueue``); ``post_gang_event`` writes a core/v1 Event on a Workload or PodGroup.

One write: ``patch_gang`` JSON-merge-patches a Workload or PodGroup (the ``planned-start`` annotation of a
placed gang; ``spec.active: true`` when the controller starts a held Workload). A 409 is retried like the
other writes; anything else raises ``KubeWriteError`` naming the object, and the money stage reports it and
tries again next tick.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from autoscaler.adapters.kube import (
    COMPONENT,
    MERGE_PATCH,
    KubeReadError,
    api_message,
    api_write,
    core_event,
    list_all,
)
from autoscaler.ports import CustomObjects, EventType, PriorityClasses

KUEUE = ("kueue.x-k8s.io", "v1beta1", "workloads", "Workload")
LOCAL_QUEUES = ("kueue.x-k8s.io", "v1beta1", "localqueues", "LocalQueue")
CLUSTER_QUEUES = ("kueue.x-k8s.io", "v1beta1", "clusterqueues", "ClusterQueue")
VOLCANO = ("scheduling.volcano.sh", "v1beta1", "podgroups", "PodGroup")
PRIORITY_CLASSES = "scheduling.k8s.io/v1 priorityclasses"


class TrainingReader:
    """The ``TrainingGangs`` port over one ``ApiClient``; ``namespaces`` None reads all namespaces."""

    def __init__(
        self,
        api_client: client.ApiClient,
        *,
        namespaces: Sequence[str] | None = None,
        kueue_version: str = KUEUE[1],
        page_size: int = 500,
        request_timeout_seconds: float = 30.0,
        max_conflict_retries: int = 3,
        conflict_backoff_seconds: float = 0.1,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if page_size < 1:
            raise ValueError(f"page_size must be >= 1, got {page_size}")
        self._api = api_client
        self._custom = client.CustomObjectsApi(api_client)
        self._scheduling = client.SchedulingV1Api(api_client)
        self._core = client.CoreV1Api(api_client)
        self._namespaces = None if namespaces is None else sorted(set(namespaces))
        self._kueue = (KUEUE[0], kueue_version, KUEUE[2], KUEUE[3])
        self._page = page_size
        self._timeout = request_timeout_seconds
        self._retries = max_conflict_retries
        self._backoff = conflict_backoff_seconds
        self._sleep = sleep

    def list_kueue_workloads(self) -> CustomObjects:
        return self._list(*self._kueue, installs="Kueue")

    def list_volcano_podgroups(self) -> CustomObjects:
        return self._list(*VOLCANO, installs="Volcano")

    def list_kueue_queues(self) -> tuple[CustomObjects, CustomObjects]:
        """LocalQueues (in the namespaces the controller sees) and ClusterQueues (cluster-scoped)."""
        local = self._list(self._kueue[0], self._kueue[1], *LOCAL_QUEUES[2:], installs="Kueue")
        cluster = self._list(self._kueue[0], self._kueue[1], *CLUSTER_QUEUES[2:], installs="Kueue",
                             cluster_scoped=True)
        return local, cluster

    def post_gang_event(
        self, kind: str, namespace: str, name: str, uid: str, type: EventType, reason: str, message: str,
        now: datetime,
    ) -> None:
        if kind == self._kueue[3]:
            api_version = f"{self._kueue[0]}/{self._kueue[1]}"
        elif kind == VOLCANO[3]:
            api_version = f"{VOLCANO[0]}/{VOLCANO[1]}"
        else:
            raise ValueError(f"post_gang_event: unknown gang kind {kind!r} (Workload or PodGroup)")
        event = core_event(api_version, kind, namespace, name, uid, type, reason, message, now, COMPONENT)

        def once() -> bool:
            self._core.create_namespaced_event(namespace, event, _request_timeout=self._timeout)
            return True

        api_write(self._api.configuration.host, f"post {type} event {reason} on {kind} {namespace}/{name}", once,
                  retries=self._retries, backoff_seconds=self._backoff, sleep=self._sleep)

    def priority_classes(self) -> PriorityClasses:
        values: dict[str, int] = {}
        defaults: list[tuple[int, str]] = []
        for pc in list_all(
            self._api.configuration.host, f"list {PRIORITY_CLASSES}",
            lambda token: self._scheduling.list_priority_class(
                limit=self._page, _continue=token, _request_timeout=self._timeout,
            ),
        ):
            name = pc.metadata.name if pc.metadata is not None else None
            if not name or pc.value is None:  # the API server requires both: the answer is not trustworthy
                raise KubeReadError(f"list {PRIORITY_CLASSES}: an item without a name or value ({name!r})")
            value = int(pc.value)
            values[name] = value
            if pc.global_default:
                defaults.append((value, name))
        return PriorityClasses(values, min(defaults)[1] if defaults else None)

    def patch_gang(self, kind: str, namespace: str, name: str, patch: Mapping[str, Any]) -> None:
        if kind == self._kueue[3]:
            group, version, plural = self._kueue[:3]
        elif kind == VOLCANO[3]:
            group, version, plural = VOLCANO[:3]
        else:
            raise ValueError(f"patch_gang: unknown gang kind {kind!r} (Workload or PodGroup)")
        what = f"patch {group}/{version} {plural} {namespace}/{name}"

        def once() -> bool:
            self._custom.patch_namespaced_custom_object(
                group, version, namespace, plural, name, dict(patch),
                field_manager=COMPONENT, _content_type=MERGE_PATCH, _request_timeout=self._timeout,
            )
            return True

        api_write(self._api.configuration.host, what, once, retries=self._retries, backoff_seconds=self._backoff,
                  sleep=self._sleep)

    def _list(self, group: str, version: str, plural: str, kind: str, *, installs: str,
              cluster_scoped: bool = False) -> CustomObjects:
        api_version = f"{group}/{version}"
        items: list[Mapping[str, Any]] = []
        scopes: list[str | None] = [None] if self._namespaces is None or cluster_scoped else list(self._namespaces)
        for namespace in scopes:
            where = "all namespaces" if namespace is None else f"namespace {namespace}"
            token: str | None = None
            while True:
                try:
                    page = self._page_of(group, version, plural, namespace, token)
                except ApiException as exc:
                    if exc.status == 404:
                        return CustomObjects(
                            api_version, kind, installed=False,
                            note=f"{api_version} {plural} is not served by the API server ({installs} not "
                            f"installed?): no {installs} gangs counted",
                        )
                    raise KubeReadError(f"list {api_version} {plural} in {where}: {api_message(exc)}") from exc
                except urllib3.exceptions.HTTPError as exc:
                    raise KubeReadError(
                        f"list {api_version} {plural} in {where}: cannot reach the API server at "
                        f"{self._api.configuration.host}"
                    ) from exc
                if not isinstance(page, dict):
                    raise KubeReadError(f"list {api_version} {plural} in {where}: the answer is not a JSON object")
                for item in page.get("items") or []:
                    items.append({**item, "apiVersion": item.get("apiVersion") or api_version,
                                  "kind": item.get("kind") or kind})
                token = (page.get("metadata") or {}).get("continue") or None
                if not token:
                    break
        return CustomObjects(api_version, kind, items=tuple(items))

    def _page_of(self, group: str, version: str, plural: str, namespace: str | None, token: str | None) -> object:
        call: Callable[..., object]
        if namespace is None:
            call = self._custom.list_custom_object_for_all_namespaces
            return call(group, version, plural, limit=self._page, _continue=token, _request_timeout=self._timeout)
        call = self._custom.list_namespaced_custom_object
        return call(group, version, namespace, plural, limit=self._page, _continue=token,
                    _request_timeout=self._timeout)
