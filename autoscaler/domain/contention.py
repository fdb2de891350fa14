"""Another autoscaler on the same Deployment: found, and what the controller does about it.

Why it exists: a team adopting the controller usually has an HPA on the Deployment already (or a KEDA ScaledObject,
which scales through an HPA of its own). Both would write ``spec.replicas``: the HPA every 15 s to its own
recommendation, the controller every loop to its plan, so each undoes the other's change, pods are created and
deleted in turn, and every replica created is a cold start paid for nothing. KEDA refuses a second ScaledObject
on a workload an HPA already scales for this reason. The controller cannot remove a team's HPA, so while one
scales the Deployment it runs the Deployment as advisory (forecasts, status, metrics and the record of what each
operating point would have cost: what a team reads before it switches its HPA off), writes no replicas, holds no
nodes for it, says why once with a Warning Event, and scales it again once the HPA is gone. A Deployment annotated
``mode: advisory`` is left as it is: running beside the HPA it may replace is what that mode is for.

A writer that is not an HPA (a GitOps tool syncing a manifest that sets ``replicas``, a script, a person) is not
listed anywhere; it shows as the replicas the controller wrote found changed at the next list, and when that happens
``OVERWRITES_TO_WARN`` times within an hour a ``ReplicasOverwritten`` Warning Event says so (the controller still
writes its plan, as an HPA does: the team decides which writer stays).

Pure: the scalers are read by the adapter (``autoscaler.ports.Cluster.list_scalers``), the loop asks here.
"""

from __future__ import annotations

from collections.abc import Iterable

from autoscaler.ports import ScalerView

EVENT_REASON_CONTENDED = "ScaledByAnotherAutoscaler"
EVENT_REASON_RESOLVED = "NoOtherAutoscaler"
# Why the sweep of scale-down marks clears those of a contended Deployment (its log line).
CONTENDED_NOTE = "another autoscaler scales it (a HorizontalPodAutoscaler)"


def scalers_of(namespace: str, name: str, scalers: Iterable[ScalerView]) -> tuple[str, ...]:
    """The names of the HorizontalPodAutoscalers in ``namespace`` whose scale target is the Deployment ``name``
    (``apps`` or the old ``extensions`` group, any version), sorted."""
    return tuple(sorted(
        s.name for s in scalers
        if s.namespace == namespace and s.target_kind == "Deployment" and s.target_name == name
        and s.target_api_version.partition("/")[0] in ("apps", "extensions")))


def contended_message(names: Iterable[str]) -> str:
    """The Warning Event's message for a Deployment the HPAs ``names`` also scale."""
    listed = ", ".join(names)
    return (f"HorizontalPodAutoscaler {listed} also scales this Deployment: two autoscalers writing spec.replicas undo "
            "each other's changes, so predictive-autoscaler runs it as advisory (forecasts, status and metrics; no "
            "replica writes, no nodes held ahead) until it is removed. Delete the HPA (or the KEDA ScaledObject that "
            "made it) to let predictive-autoscaler scale, or annotate mode: advisory to compare them side by side")


def resolved_message() -> str:
    """The Normal Event's message once no other HorizontalPodAutoscaler scales the Deployment."""
    return "no HorizontalPodAutoscaler scales this Deployment any more: predictive-autoscaler scales it again"


# Another writer that is not an HPA (a GitOps sync of a manifest that sets replicas, a CronJob, a person): seen as the
# replicas the controller wrote found changed at the next list. Said once it happened this often within the window.
OVERWRITE_WINDOW_SECONDS = 3600
OVERWRITES_TO_WARN = 2
EVENT_REASON_OVERWRITTEN = "ReplicasOverwritten"


def recent_overwrites(times: Iterable[float], now: float,
                      window: float = OVERWRITE_WINDOW_SECONDS) -> tuple[float, ...]:
    """The overwrites of ``times`` within ``window`` seconds before ``now`` (oldest first)."""
    return tuple(t for t in times if now - t < window)


def overwritten_message(seen: int, written: int, count: int) -> str:
    """The Warning Event's message when the replicas written were set to ``seen`` by someone else, ``count`` times
    within the window. Why a Warning and not a fight: the controller cannot tell who writes; it writes its plan again
    next tick, as an HPA would, and the team decides which writer stays."""
    return (f"spec.replicas was set to {seen} after predictive-autoscaler set it to {written} ({count} times in the "
            f"last {OVERWRITE_WINDOW_SECONDS // 60} minutes): another writer undoes its changes, such as a GitOps sync "
            "of a manifest that sets replicas (Argo CD self-heal, Flux), a script or a person. Leave replicas out of "
            "the manifest (or have the GitOps tool ignore it), or annotate mode: advisory while the other writer "
            "scales")
