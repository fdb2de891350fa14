"""The lower bound: what perfect foresight of demand would cost under the same start-up delays.

Why it exists: "predictive beats reactive" says nothing about how much is left on the table. The
oracle knows every future bin, is never short of Ready capacity, and holds the fewest GPU-hours it
can: it asks for each replica exactly one lead time before demand needs it and releases it as soon
as it is not needed again before a re-ask could be Ready.

It is computed offline, replica by replica, instead of through the tick loop, because it is a bound,
not a controller. Replicas are numbered ``1..n`` in order of need (replica ``j`` is needed on every
tick where ``ceil(demand / capacity) >= j``; the need of ``j + 1`` implies the need of ``j``) and
packed onto nodes in that order (``replicas_per_node`` consecutive numbers share a node), which is
the cluster model's bin-packing. For replica ``j``, each run of ticks where it is needed is covered
by asking at ``start - lead``, where lead is:

* the pod start-up when its node exists at the ask (the node's lowest-numbered replica is asked,
  or was released less than ``consolidate_after`` ago);
* node + pod start-up otherwise (only the lowest-numbered replica of a node can face this; the
  others are needed only while it is, so their node is up and Ready).

When the re-ask would come no later than the release, the replica is simply kept. A Deployment has a
replica *count*, not named replicas, and a new replica takes a free GPU before a new node is
provisioned, so the count at each tick is the highest replica number asked for (asking for replica
``j`` early to open a node means holding ``1..j``). The count is then replayed through the same
cluster model as every other policy, which gives its Ready replicas and bill; a property test checks
that it is never short. The simulation starts warm: replicas needed within the first node + pod lead
are Ready at the first tick, as in every other policy.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from autoscaler.simulation.cluster import ClusterConfig

IntArray = NDArray[np.int64]


def _runs(mask: NDArray[np.bool_]) -> tuple[IntArray, IntArray]:
    """Start and end (exclusive) ticks of each run of True."""
    padded = np.concatenate(([False], mask, [False]))
    edges = np.flatnonzero(np.diff(padded.astype(np.int8)))
    return edges[0::2].astype(np.int64), edges[1::2].astype(np.int64)


def oracle_schedule(need: IntArray, config: ClusterConfig) -> IntArray:
    """The oracle's replica count per tick for the demand-need profile ``need`` (replicas per tick)."""
    n_ticks = int(need.shape[0])
    pod = config.ticks(config.pod_startup_seconds)
    full = config.ticks(config.node_startup_seconds + config.pod_startup_seconds)
    consolidate = config.ticks(config.consolidate_after_seconds)
    per_node = config.replicas_per_node
    requested = np.zeros(n_ticks, dtype=np.int64)
    top = int(need.max()) if n_ticks else 0
    for j in range(1, top + 1):
        starts, ends = _runs(need >= j)
        first_on_node = (j - 1) % per_node == 0
        blocks: list[tuple[int, int, int]] = []  # (ask, ready, release) ticks
        for s, e in zip(starts.tolist(), ends.tolist(), strict=True):
            if not blocks:
                if s <= full:
                    blocks.append((0, 0, e))  # warm start: needed within the first lead, Ready at tick 0
                else:
                    lead = full if first_on_node else pod
                    blocks.append((s - lead, s, e))
                continue
            ask0, ready0, end0 = blocks[-1]
            node_up = not first_on_node or s - pod < end0 + consolidate
            lead = pod if node_up else full
            if s - lead <= end0:
                blocks[-1] = (ask0, ready0, e)  # a re-ask would not come before the release: keep it
            else:
                blocks.append((s - lead, s, e))
        for ask, _ready_at, end in blocks:
            # a Deployment has a count, not named replicas: asking for replica j means holding j
            requested[ask:end] = np.maximum(requested[ask:end], j)
    return requested
