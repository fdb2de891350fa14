"""Spare replicas on GPUs a NodePool already pays for: a warm pool the bill does not see.

Why it exists: Karpenter bills whole nodes. When the pods of a NodePool hold a number of GPUs that is not a multiple
of the node's, the last node's free GPUs are paid for and idle: on the fleet of ``benchmarks/fleet_simulate.py``
(four Deployments, 8-GPU nodes) 13% of the self-tuned default's bill. A replica started there is Ready when a burst
the forecast did not see arrives, for no extra dollar; HPA + Karpenter leave those GPUs idle, and no Deployment's own
forecast can see them (they are the fleet's). So after the decisions and the ceilings, each NodePool's paid slack is
lent to its Deployments as spare replicas, and taken back as soon as a plan needs it.

The rules (``lend``: ``pool_slack``, then ``spare_replicas``), per NodePool read this tick, after the plan:

* the slack is the last node's remainder of the GPUs the pool's pods will hold (``-used mod gpus_per_node``), and no
  more than the nodes that hold pods have free: a spare never keeps a node that could empty (the scale-down marks
  empty the emptiest node first, ``domain.scaledown``) and never asks for a node;
* none while a pod of the pool waits for a node: the pool is short, and its free GPUs are the scale-up's;
* members are the Deployments we scale (not advisory) with a forecast and a capacity, below their ``max_replicas``,
  whose team has no cost ceiling (a spare is billed to its team even though the cluster's bill does not move);
* spares already held stay first (moving one throws away a model load; a Deployment holds spares when it requests
  more replicas than its plan), then one replica at a time goes to the Deployment whose forecast's top band over
  its node lead needs the most replicas above its plan (``exposure``): where a miss is likeliest;
* recomputed every tick from the plan: when a plan needs the GPUs (its own or another Deployment's scale-up), the
  slack shrinks and spares are the first replicas to go.

Measured on ``python -m benchmarks.fleet_simulate`` (docs/BENCHMARKS.md, ``## fleet simulate``). Pure: the money
step (``engine.money.lend_spares``, the controller) and the fleet simulator (``simulation.fleet``) call ``lend``,
each with the counts of its own world.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from autoscaler.domain.capacity import select_window
from autoscaler.ports import PoolGpus
from models.types import Forecast


@dataclass(frozen=True)
class SpareMember:
    """One Deployment of a pool. ``planned``: the replicas its plan asks (after the ceilings); ``requested``: the
    replicas it requests now (spares included); ``room``: spares it may take (0: none, e.g. no forecast, advisory,
    at its ``max_replicas``, or a team under a ceiling; it still counts in the pool's GPUs); ``exposure``: replicas
    its forecast's top band needs above ``planned`` (``exposure``)."""

    key: str
    gpus_per_replica: int
    planned: int
    requested: int
    room: int
    exposure: float


def exposure(forecast: Forecast | None, now: int, lead_seconds: float, capacity: float, planned: int) -> float | None:
    """Replicas the forecast's top band needs over ``[now, now + lead]`` above ``planned`` (negative: the plan
    covers the top band by that many); None without a usable forecast or capacity."""
    if forecast is None or forecast.horizon == 0 or not forecast.quantiles or not capacity > 0:
        return None
    top = max(forecast.quantiles)
    peak = select_window(forecast, now, 0.0, lead_seconds).max_of(forecast.band_list(top))
    if not math.isfinite(peak):
        return None
    return max(0.0, peak) / capacity - planned


def held_spares(requested: int, planned: int, spares: int) -> int:
    """The spares lent at the last lending (``spares``, on top of its plan ``planned``) a Deployment still holds now
    that it requests ``requested``: the GPUs a pool shows its next decisions free on top of its read (a spare is
    given back as soon as a plan needs its GPU)."""
    return max(0, min(spares, requested - planned))


def slack_gpus(gpus_per_node: int, used_gpus: int, busy_nodes: int, waiting_pods: int) -> int:
    """The pool's paid, idle GPUs spares may take: the last node's remainder of ``used_gpus`` (what its pods will
    hold after the plan), within the ``busy_nodes`` (nodes holding pods) capacity; 0 while ``waiting_pods`` wait for
    a node."""
    if waiting_pods > 0 or gpus_per_node < 1 or used_gpus <= 0:
        return 0
    return max(0, min((-used_gpus) % gpus_per_node, busy_nodes * gpus_per_node - used_gpus))


def pool_slack(read: PoolGpus, gpus_per_node: int, change_gpus: int, waiting_pods: int) -> int:
    """The GPUs one NodePool may lend this tick (``slack_gpus``), from the tick's read of its nodes (taken before the
    plan) and ``change_gpus``, what the plan changes in the GPUs of its Deployments (planned less requested, in GPUs);
    ``waiting_pods``: their pods waiting for a node."""
    used = read.busy_nodes * gpus_per_node - read.partial_free + change_gpus
    return slack_gpus(gpus_per_node, used, read.busy_nodes, waiting_pods)


class PoolCount(NamedTuple):
    """One Deployment of ours on a pool, as its plan leaves it: ``planned`` replicas (after the ceilings) against the
    ``requested`` ones now (spares included), of ``gpus_per_replica`` GPUs. (A tuple: the fleet simulator makes one
    per Deployment at every decision.)"""

    key: str
    gpus_per_replica: int
    planned: int
    requested: int


def lend(read: PoolGpus, gpus_per_node: int, counts: Sequence[PoolCount], waiting_pods: int,
         terms: Callable[[PoolCount], tuple[int, float]]) -> dict[str, int]:
    """Spare replicas per Deployment of one NodePool this tick (only those given one): the slack the plan leaves on the
    pool (``pool_slack`` of the read, taken before the plan, and what the plan changes in ``counts``' GPUs), then
    ``spare_replicas``; ``terms(count)`` gives a Deployment's room and exposure (``SpareMember``), asked only when there
    is slack to lend."""
    change = sum((c.planned - c.requested) * c.gpus_per_replica for c in counts)
    slack = pool_slack(read, gpus_per_node, change, waiting_pods)
    if not slack:
        return {}
    members = [SpareMember(c.key, c.gpus_per_replica, c.planned, c.requested, *terms(c)) for c in counts]
    return spare_replicas(slack, members)


def spare_replicas(slack: int, members: Sequence[SpareMember]) -> dict[str, int]:
    """Spare replicas per member key (only those given one): the spares held stay first, then the most exposed
    member gets one at a time (ties: the key), while ``slack`` GPUs last (module docstring)."""
    out: dict[str, int] = {}
    left = max(0, slack)
    members = [m for m in members if m.gpus_per_replica >= 1]
    room = {m.key: max(0, m.room) for m in members}
    ranked = sorted(members, key=lambda m: (-m.exposure, m.key))
    for m in ranked:  # spares held now stay where they are
        keep = min(max(0, m.requested - m.planned), room[m.key], left // max(1, m.gpus_per_replica))
        if keep > 0:
            out[m.key] = keep
            room[m.key] -= keep
            left -= keep * m.gpus_per_replica
    need = {m.key: m.exposure - out.get(m.key, 0) for m in members}
    while left > 0:
        fits = [m for m in ranked if room[m.key] > 0 and m.gpus_per_replica <= left]
        if not fits:
            break
        m = min(fits, key=lambda x: (-need[x.key], x.key))
        out[m.key] = out.get(m.key, 0) + 1
        room[m.key] -= 1
        need[m.key] -= 1
        left -= m.gpus_per_replica
    return out
