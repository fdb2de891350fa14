"""Where the controller keeps what it decided for a Deployment: one ConfigMap per Deployment, in its namespace.

Why not on the Deployment (where older versions kept it, as the ``predictive-autoscaler.io/status``
annotation): the Deployment controller copies a Deployment's annotations onto its ReplicaSet, so every status
write (2 KB, about 5 KB with the self-tuning days) was also a ReplicaSet update, a conflict retry in
kube-controller-manager and an event for every watcher of ReplicaSets. The inputs a team sets (``min-replicas``
and the rest) stay annotations on the Deployment; only what the controller writes moves. (Since the self-tuning
record keeps four weeks of replayed days, a status is about 20 KB.)

Why a ConfigMap and not a custom resource (the VPA keeps its checkpoints in objects of their own; KEDA keeps
its state in its custom resource's status): a CRD must be installed and upgraded with the controller and read
with a grant nobody has by default, while ConfigMaps exist everywhere and the ``view`` role a team already has
in its namespace reads them, which is what ``explain`` needs. The object carries an owner reference to its
Deployment (not a controller reference, ``blockOwnerDeletion`` false: nothing waits on it), so the garbage
collector deletes it with the Deployment and the controller needs no ``delete``.

The object (``autoscaler.adapters.kube`` writes it; ``explain`` reads it):

* name: ``<deployment>-predictive-autoscaler`` (:func:`status_object_name`; a Deployment name too long for the
  suffix is cut and a hash of the whole name keeps it unique);
* labels: ``app.kubernetes.io/managed-by: predictive-autoscaler`` and ``predictive-autoscaler.io/deployment``
  naming the Deployment (cut and hashed past the 63 characters a label value may have), so one label-selected
  list per namespace (:data:`STATUS_SELECTOR`) finds them all;
* ``data["status.json"]``: the status as compact JSON with sorted keys (:func:`encode_status`), so the same
  status is the same text and an unchanged status is not written again.

Upgrading from the annotation (:func:`first_sight`, pure): the first time the controller sees a Deployment it
resumes from the newer of the two (by their ``time``), copies the annotation's status to the object when the
annotation is the newer one, and removes the annotation from the Deployment. A ReplicaSet made before the
upgrade keeps its stale copy (the Deployment controller adds annotations to a ReplicaSet, it never removes
them), which no longer changes; a rollback that copies it back onto the Deployment has it removed again.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from autoscaler.domain.annotations import PREFIX

STATUS_DATA_KEY = "status.json"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "predictive-autoscaler"
DEPLOYMENT_LABEL = PREFIX + "deployment"
# Ours, and a status object (the controller may label other objects it manages the same way).
STATUS_SELECTOR = f"{MANAGED_BY_LABEL}={MANAGED_BY},{DEPLOYMENT_LABEL}"
NAME_SUFFIX = "-predictive-autoscaler"
MAX_NAME = 253  # a ConfigMap's name is a DNS subdomain
MAX_LABEL_VALUE = 63
HASH_CHARS = 10


def _cut(name: str, room: int) -> str:
    """``name`` when it fits in ``room`` characters, else its head and a hash of the whole name (still unique, and
    still a DNS subdomain: the head loses the separators it would end on)."""
    if len(name) <= room:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:HASH_CHARS]
    return name[: room - HASH_CHARS - 1].rstrip("-.") + "-" + digest


def status_object_name(deployment: str) -> str:
    """The name of the ConfigMap that holds ``deployment``'s status (same namespace)."""
    return _cut(deployment, MAX_NAME - len(NAME_SUFFIX)) + NAME_SUFFIX


def deployment_label(deployment: str) -> str:
    """The value of :data:`DEPLOYMENT_LABEL`: the Deployment's name, cut and hashed past 63 characters (for people
    and ``kubectl -l``; the controller finds an object by its name)."""
    return _cut(deployment, MAX_LABEL_VALUE)


def encode_status(status: Mapping[str, Any]) -> str:
    """The status as the object holds it: compact JSON, sorted keys; ``ValueError`` on NaN or infinity (the API
    server's JSON has neither, and a reader could not parse it)."""
    return json.dumps(status, sort_keys=True, separators=(",", ":"), allow_nan=False)


def decode_status(text: str) -> dict[str, Any]:
    """A status read back; ``ValueError`` when it is not a JSON object."""
    value = json.loads(text)
    if not isinstance(value, dict):
        raise ValueError(f"a JSON {type(value).__name__}, not an object")
    return value


def _time(status: Mapping[str, Any]) -> datetime | None:
    """When a status was written (its ``time``), None when it does not say (such a status counts as the older)."""
    raw = status.get("time")
    try:
        at = datetime.fromisoformat(raw) if isinstance(raw, str) else None
    except ValueError:
        return None
    return at if at is not None and at.tzinfo is not None else None


@dataclass(frozen=True)
class FirstSight:
    """What the controller does with the status a Deployment left, the first time it sees the Deployment.

    ``saved``: the status to resume from (self-tuning days and the like), None when there is none;
    ``copy``: a status to write to the status object before the annotation goes (the annotation's, when it is the
    newer), None when the object already holds the newer one; ``remove_annotation``: the Deployment still carries
    the old annotation; ``problems``: what could not be read, one line each (the status starts over without it).
    """

    saved: dict[str, Any] | None
    copy: dict[str, Any] | None
    remove_annotation: bool
    problems: tuple[str, ...] = ()


def first_sight(uid: str, annotation: str | None, stored: str | None, stored_owner: str | None) -> FirstSight:
    """Choose between the status object's text (``stored``, owned by ``stored_owner``) and the old annotation's.

    An object owned by another Deployment of the same name (deleted and created again before the garbage
    collector came by) is not this one's: it is neither resumed from nor kept (the next write takes it over). The
    newer of the two by ``time`` wins; on a tie, or when neither says, the object (it is what this version wrote).
    """
    problems: list[str] = []
    ours: dict[str, Any] | None = None
    if stored is not None and (not stored_owner or not uid or stored_owner == uid):
        try:
            ours = decode_status(stored)
        except ValueError as exc:
            problems.append(f"the status object holds no readable status ({exc})")
    old: dict[str, Any] | None = None
    if annotation is not None:
        try:
            old = decode_status(annotation)
        except ValueError as exc:
            problems.append(f"the status annotation holds no readable status ({exc})")
    newer = old is not None and (ours is None or _newer(old, ours))
    return FirstSight(saved=old if newer else ours, copy=old if newer else None,
                      remove_annotation=annotation is not None, problems=tuple(problems))


def _newer(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    ta, tb = _time(a), _time(b)
    return ta is not None and (tb is None or ta > tb)


# ---------------------------------------------------------------------------------------------- the status itself


def _opt(data: Mapping[str, Any], key: str, kind: type | tuple[type, ...], what: str) -> Any:
    """``data[key]`` when it is of ``kind`` (never a bool for a number), None when absent or null; ``ValueError``
    naming the key otherwise."""
    value = data.get(key)
    if value is None:
        return None
    if (isinstance(value, bool) and kind is not bool) or not isinstance(value, kind):
        raise ValueError(f"{key} is {value!r}, not {what}")
    return value


def _list_of_maps(data: Mapping[str, Any], key: str) -> tuple[Mapping[str, Any], ...]:
    """The objects of a list (entries of another kind, as another version may write, are left out)."""
    value = data.get(key)
    if value is None:
        return ()
    if not isinstance(value, list):
        raise ValueError(f"{key} is a JSON {type(value).__name__}, not a list")
    return tuple(v for v in value if isinstance(v, Mapping))


@dataclass(frozen=True)
class StatusStep:
    """One rule of the decision as published: its name, the count after it, and why."""

    name: str | None
    replicas: int | None
    detail: str


@dataclass(frozen=True)
class DeploymentStatus:
    """What the controller publishes for a Deployment each time its decision changes (and every few minutes): the
    one type ``apply`` writes and both ``explain`` and a restarted controller read (``from_dict``).

    The parts a person reads as a whole and that have their own writers (the forecast summary, the capacity and
    its evidence, the self-tuning state, the last scale-down, the forecast track) stay JSON objects here; the
    self-tuning state is typed where it is resumed (``autoscaler.simulation.tuning.Tuning.from_dict``).

    ``from_dict`` accepts what older versions published (a key they did not write is absent: its default; a step or
    track entry of another shape is shown as far as it can be) and raises ``ValueError`` naming the first key of the
    wrong type.
    """

    mode: str | None
    desired_replicas: int | None
    current_replicas: int | None
    ready_replicas: int | None
    lead_seconds: float | None
    warm_pool_replicas: int | None
    warm_pool_as: str | None
    steps: tuple[StatusStep, ...] = ()
    forecast: Mapping[str, Any] | None = None
    demand_source: str | None = None  # "full", or the fallback and why (None: the query does not say)
    demand_degraded: bool = False
    demand_unit: str = "requests"  # what demand, forecast, track and capacity are counted in (or "tokens")
    token_weights: Mapping[str, Any] | None = None
    track: tuple[Mapping[str, Any], ...] = ()
    capacity: Mapping[str, Any] | None = None
    tuning: Mapping[str, Any] | None = None
    scale_down: Mapping[str, Any] | None = None
    time: str | None = None  # when it was written (ISO 8601, UTC)
    # The HorizontalPodAutoscalers that also scale it (``autoscaler.domain.contention``): while there are any, a
    # Deployment annotated ``mode: scale`` runs as advisory.
    scaled_by: tuple[str, ...] = ()
    # What its Events last told of each condition still in force (``runtime.notices``: the metrics outage, GPUs that
    # do not come, a rollout holding a scale-down, ...), so that a restarted controller tells only what changed.
    told: Mapping[str, bool | str] | None = None

    def decided(self) -> dict[str, Any]:
        """The part that changes only when the decision does (counts, mode, warm pool, which rules set which count,
        demand source, tuning, capacity, the last scale-down): written on change, the rest (the forecast's numbers
        move every bin) only every few minutes."""
        out = self.to_dict()
        for key in ("leadSeconds", "forecast", "demandDegraded", "steps", "track", "time"):
            out.pop(key, None)
        out["trail"] = [(s.name, s.replicas) for s in self.steps]
        return out

    def to_dict(self) -> dict[str, Any]:
        """The published JSON (the keys ``explain`` and the dashboard read)."""
        out: dict[str, Any] = {
            "mode": self.mode,
            "desiredReplicas": self.desired_replicas,
            "currentReplicas": self.current_replicas,
            "readyReplicas": self.ready_replicas,
            "leadSeconds": self.lead_seconds,
            "warmPool": {"replicas": self.warm_pool_replicas, "as": self.warm_pool_as},
            "forecast": None if self.forecast is None else dict(self.forecast),
            "demandSource": self.demand_source,
            "demandDegraded": self.demand_degraded,
            "demandUnit": self.demand_unit,
            "tokenWeights": None if self.token_weights is None else dict(self.token_weights),
            "steps": [{"name": s.name, "replicas": s.replicas, "detail": s.detail} for s in self.steps],
            "track": [dict(e) for e in self.track],
            "capacity": None if self.capacity is None else dict(self.capacity),
            "tuning": None if self.tuning is None else dict(self.tuning),
            "scaleDown": None if self.scale_down is None else dict(self.scale_down),
        }
        if self.scaled_by:
            out["scaledBy"] = list(self.scaled_by)
        if self.told:
            out["told"] = dict(self.told)
        if self.time is not None:
            out["time"] = self.time
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> DeploymentStatus:
        warm = _opt(data, "warmPool", Mapping, "an object") or {}
        steps = []
        for raw in _list_of_maps(data, "steps"):
            name, detail, replicas = raw.get("name"), raw.get("detail"), raw.get("replicas")
            steps.append(StatusStep(name if isinstance(name, str) else None,
                                    replicas if isinstance(replicas, int) and not isinstance(replicas, bool) else None,
                                    detail if isinstance(detail, str) else ""))
        lead = _opt(data, "leadSeconds", (int, float), "a number")
        return cls(
            mode=_opt(data, "mode", str, "a string"),
            desired_replicas=_opt(data, "desiredReplicas", int, "a whole number"),
            current_replicas=_opt(data, "currentReplicas", int, "a whole number"),
            ready_replicas=_opt(data, "readyReplicas", int, "a whole number"),
            lead_seconds=None if lead is None else float(lead),
            warm_pool_replicas=_opt(warm, "replicas", int, "a whole number"),
            warm_pool_as=_opt(warm, "as", str, "a string"),
            steps=tuple(steps),
            forecast=_opt(data, "forecast", Mapping, "an object"),
            demand_source=_opt(data, "demandSource", str, "a string"),
            demand_degraded=bool(_opt(data, "demandDegraded", bool, "true or false")),
            demand_unit=_opt(data, "demandUnit", str, "a string") or "requests",
            token_weights=_opt(data, "tokenWeights", Mapping, "an object"),
            track=_list_of_maps(data, "track"),
            capacity=_opt(data, "capacity", Mapping, "an object"),
            tuning=_opt(data, "tuning", Mapping, "an object"),
            scale_down=_opt(data, "scaleDown", Mapping, "an object"),
            time=_opt(data, "time", str, "a string"),
            scaled_by=tuple(n for n in _opt(data, "scaledBy", list, "a list") or () if isinstance(n, str)),
            told={k: v for k, v in (_opt(data, "told", Mapping, "an object") or {}).items()
                  if isinstance(k, str) and isinstance(v, (bool, str))} or None,
        )
