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
* with forecast-sized node headroom (``engine.headroom``), the pool pays for the room its buffer keeps for
  scale-ups as well: the slack is then that room rounded up to whole nodes (``ceil((used + buffer) / gpus per node)``
  nodes, less what the pods hold), on the busy nodes and the headroom's idle nodes that are Ready. The headroom's
  placeholders hold only the idle nodes the spares leave empty (``Lent.idle_nodes``), so Karpenter adds no node for
  them; a scale-up takes a spare's GPU back as it would a placeholder's;
* none while a pod of the pool waits for a node: the pool is short, and its free GPUs are the scale-up's;
* members are the Deployments we scale (not advisory) with a forecast and a capacity, below their ``max_replicas``,
  whose team has no cost ceiling (a spare is billed to its team even though the cluster's bill does not move); one
  whose decision holds on missing evidence keeps the spares it holds (``member_terms``: never a scale-down on
  missing data);
* spares already held stay first (moving one throws away a model load; a Deployment holds spares when it requests
  more replicas than its plan), then one replica at a time goes to the Deployment whose forecast's top band over
  its node lead needs the most replicas above its plan (``exposure``): where a miss is likeliest;
* recomputed every tick from the plan: when a plan needs the GPUs (its own or another Deployment's scale-up), the
  slack shrinks and spares are the first replicas to go.

Measured on ``python -m benchmarks.fleet_simulate`` (docs/BENCHMARKS.md, ``## fleet simulate``): an idle headroom
node is as billed as the last node's remainder, and Ready spares on it cut misses that an empty node does not.
Pure: the money step (``engine.money.lend_spares``, the controller) and the fleet simulator (``simulation.fleet``)
call ``lend``, each with the counts of its own world.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from autoscaler.domain.capacity import select_window
from autoscaler.ports import PoolGpus
from models.types import Forecast

_EPS = 1e-9


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


def member_terms(expo: float | None, max_replicas: int, planned: int, requested: int,
                 holding: bool) -> tuple[int, float]:
    """A Deployment's room and exposure for the lending (``SpareMember``), from its ``exposure`` (None: no forecast or
    capacity): up to its ``max_replicas``; none without an exposure, except that a
    Deployment whose decision holds on missing evidence (``holding``) keeps the spares it holds (``requested`` above
    ``planned``): a spare is never taken back on missing data, only for a plan's need."""
    room = max(0, max_replicas - planned)
    if expo is None:
        return (min(room, max(0, requested - planned)), 0.0) if holding else (0, 0.0)
    return room, expo


SPARE_STEP = "spare"  # the decision step that adds a pool's spares (``engine.money.lend_spares``)


def lent_in(trail: Sequence[tuple[str | None, int | None]]) -> tuple[int, int]:
    """``(planned, spares)`` of a decision whose steps (name, count after it) are ``trail``: the count before the
    spares step and the spares it added, when its last step lent some; ``(0, 0)`` otherwise. Why: a restarted
    controller reads them from the status it left, so its first decision plans on the Deployment's own replicas (seen
    as its own, the spares would be held as planned through the stabilisation window, their GPUs shown busy to every
    other Deployment of the pool)."""
    if len(trail) < 2 or trail[-1][0] != SPARE_STEP:
        return 0, 0
    before, after = trail[-2][1], trail[-1][1]
    if before is None or after is None or after <= before:
        return 0, 0
    return before, after - before


def held_spares(requested: int, planned: int, spares: int) -> int:
    """The spares lent at the last lending (``spares``, on top of its plan ``planned``) a Deployment still holds now
    that it requests ``requested``: the GPUs a pool shows its next decisions free on top of its read (a spare is
    given back as soon as a plan needs its GPU)."""
    return max(0, min(spares, requested - planned))


def slack_gpus(gpus_per_node: int, used_gpus: int, busy_nodes: int, waiting_pods: int, room_gpus: float = 0.0,
               idle_nodes: int = 0) -> int:
    """The pool's paid, idle GPUs spares may take: the room the pool keeps beyond ``used_gpus`` (what its pods will
    hold after the plan), rounded up to whole nodes (``room_gpus``: the node headroom's buffer; 0: the last node's
    remainder), within the capacity of the ``busy_nodes`` (nodes holding pods) and the headroom's Ready
    ``idle_nodes``; 0 while ``waiting_pods`` wait for a node."""
    if waiting_pods > 0 or gpus_per_node < 1 or used_gpus <= 0:
        return 0
    kept = math.ceil((used_gpus + max(0.0, room_gpus)) / gpus_per_node - _EPS) * gpus_per_node
    return max(0, min(kept, (busy_nodes + max(0, idle_nodes)) * gpus_per_node) - used_gpus)


def pool_slack(read: PoolGpus, gpus_per_node: int, change_gpus: int, waiting_pods: int, room_gpus: float = 0.0,
               idle_nodes: int = 0) -> int:
    """The GPUs one NodePool may lend this tick (``slack_gpus``), from the tick's read of its nodes (taken before the
    plan) and ``change_gpus``, what the plan changes in the GPUs of its Deployments (planned less requested, in GPUs);
    ``waiting_pods``: their pods waiting for a node; ``room_gpus`` and ``idle_nodes``: the node headroom's buffer and
    idle nodes (``engine.headroom.HeadroomDecision``), of which those the read shows empty and Ready count."""
    used = read.busy_nodes * gpus_per_node - read.partial_free + change_gpus
    return slack_gpus(gpus_per_node, used, read.busy_nodes, waiting_pods, room_gpus,
                      min(idle_nodes, idle_ready_nodes(read, gpus_per_node)))


def idle_ready_nodes(read: PoolGpus, gpus_per_node: int) -> int:
    """Nodes of the read that are Ready and hold no pod (our placeholders excepted): their GPUs are ``free`` and not
    ``partial_free``."""
    return max(0, read.free - read.partial_free) // max(1, gpus_per_node)


class PoolCount(NamedTuple):
    """One Deployment of ours on a pool, as its plan leaves it: ``planned`` replicas (after the ceilings) against the
    ``requested`` ones now (spares included), of ``gpus_per_replica`` GPUs. (A tuple: the fleet simulator makes one
    per Deployment at every decision.)"""

    key: str
    gpus_per_replica: int
    planned: int
    requested: int


class Lent(NamedTuple):
    """One pool's lending: ``spares`` per Deployment key (only those given one); ``idle_nodes``, the headroom's idle
    nodes the spares leave empty (what its placeholders must hold: a spare on an idle node is that node's room
    already); ``busy_free``, the GPUs left free on its busy nodes after the plan and the spares (room a CapacityBuffer
    can count)."""

    spares: dict[str, int]
    idle_nodes: int
    busy_free: int


def lend(read: PoolGpus, gpus_per_node: int, counts: Sequence[PoolCount], waiting_pods: int,
         terms: Callable[[PoolCount], tuple[int, float]], room_gpus: float = 0.0, idle_nodes: int = 0) -> Lent:
    """Spare replicas of one NodePool this tick: the slack the plan leaves on the pool (``pool_slack`` of the read,
    taken before the plan, what the plan changes in ``counts``' GPUs, and the headroom's ``room_gpus`` and
    ``idle_nodes``), then ``spare_replicas``; ``terms(count)`` gives a Deployment's room and exposure
    (``SpareMember``), asked only when there is slack to lend. The idle nodes left empty: ``idle_nodes`` less the
    whole nodes the spares take beyond the room the plan leaves on the busy nodes."""
    change = sum((c.planned - c.requested) * c.gpus_per_replica for c in counts)
    slack = pool_slack(read, gpus_per_node, change, waiting_pods, room_gpus, idle_nodes)
    busy_room = max(0, read.partial_free - change)  # free on the busy nodes once the plan is applied
    if not slack:
        return Lent({}, idle_nodes, busy_room)
    members = [SpareMember(c.key, c.gpus_per_replica, c.planned, c.requested, *terms(c)) for c in counts]
    spares = spare_replicas(slack, members)
    over = sum(spares.get(c.key, 0) * c.gpus_per_replica for c in counts) - busy_room
    return Lent(spares, max(0, idle_nodes - math.ceil(max(0, over) / gpus_per_node)), max(0, -over))


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
