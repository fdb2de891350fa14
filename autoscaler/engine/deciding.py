"""One Deployment's decision at one tick, from what the tick saw: the step the controller and the simulator share.

Why it exists: the controller's tick and the simulator each used to turn a forecast and an observation into a
replica count in their own code, and they fed the planner different things: the simulator showed it the demand
of the bin still in progress (which no Prometheus query can answer yet) and the free GPUs of its node model
(which the controller did not read then), and it had no "capacity not learned yet" hold and no hold for pods that no
node came for. So ``simulate`` scored a better-informed controller than the one that runs. Both drivers now build
an ``Observed`` from their own world (the controller from the Kubernetes API and Prometheus, the simulator from
its trace and simulated cluster) and call ``decide``; what differs between them is only how the snapshot is read.

The rules, given the forecast the ``ForecastKeeper`` served and the tick's observation:

* the demand is the rate over the last minute at ``now`` (``CURRENT_DEMAND_WINDOW_SECONDS``: what an instant query
  of the arrival rate answers, as fresh as an HPA adapter's metric; over two minutes where scrapes are a minute
  apart), or the newest *ended* bin when that cannot be read (None when both are missing): the reactive floor and
  the surprise check use it;
* free GPUs are those of the Deployment's NodePool, read by each driver (the controller from the pool's Ready
  nodes and the pods bound to them, the fleet simulator from its shared pool): when every replica the plan adds
  at the node lead fits on them, the plan is made again with the pod lead alone (a replica placed on a free GPU
  is Ready one pod start-up after it is asked for), so it asks later and lets go sooner; when the plan adds more
  than fit, those beyond wait for a node and the node-lead plan stands. Free GPUs not read (``None``: the
  Deployment names no NodePool, or the read failed) are never a reason to plan closer: a new replica is assumed
  to wait for a node, as before nodes were read. The Deployments of one pool share its free GPUs: each decision's
  new replicas take free GPUs first (``Decided.claimed_gpus``: the scheduler places them where GPUs are free), and
  the drivers take those off what the next Deployment of the pool is shown in the same tick, so two Deployments
  never plan a pod start-up away on the same GPU (the one that lost the race would wait for a node it did not plan
  for);
* a Deployment whose capacity per replica is ``auto`` and not learned yet holds its replicas (within its
  min/max), never scaled on a guessed capacity (``capacity_hold``);
* otherwise ``domain.planner.plan_replicas``;
* pods Pending unschedulable for longer than a node start-up (the learned node lead) mean no node is coming (a
  NodePool limit, a quota, no GPU of that kind to be had): a scale-up is held at the current count so Pending
  replicas do not pile up (a ``gpus_unavailable`` step). Pods younger than that are waiting for the node
  Karpenter is provisioning for them, which is the normal path of every scale-up onto a new node; holding
  then would freeze scale-ups for a node start-up after each one that needed a node.

Node headroom is not decided here: the pool's idle nodes are sized from the pooled forecast error of its
Deployments (``engine.money.pools_headroom``), from each decision's forecast and node lead (``Decided``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from autoscaler.domain.coldstart import ColdStartProfile
from autoscaler.domain.planner import plan_replicas
from autoscaler.domain.types import ScalingDecision, ScalingPolicy, Step, WorkloadState
from autoscaler.domain.values import quick_init
from models.types import Forecast

Recommendations = tuple[tuple[int, int], ...]
# The reactive floor's evidence: the demand over the last minute at the decision (an instant rate query in the
# controller, the trace's last minute in the simulator), not the newest ended bin, which is up to a step older. A rate
# needs two samples in its window: where a 60 s scrape interval (a managed Prometheus's default) leaves one in a
# minute, the controller asks again over two minutes for those Deployments (as HPA adapters and KEDA triggers are
# usually given ``rate(...[2m])``).
CURRENT_DEMAND_WINDOW_SECONDS = 60
CURRENT_DEMAND_WIDE_WINDOW_SECONDS = 120
CURRENT_DEMAND_RESOLUTION_SECONDS = 15  # the subquery step inside the window


@quick_init
@dataclass(frozen=True)
class Observed:
    """What one tick saw of one Deployment: the snapshot ``decide`` plans on.

    ``replicas`` and ``ready``: its own, the spare replicas its pool lent it excepted (``engine.spare``: they are the
    pool's, lent and taken back by the money step; counted here, a rule that keeps the current count, such as the
    lead gap or the scale-down step limit, would turn them into planned replicas and keep the nodes they stand on).
    ``demand``: the demand over the last minute, else the newest ended bin's (None: missing or not read).
    ``waiting_for_node``: the ages, in seconds, of its pods Pending unschedulable (no node to run on yet).
    ``free_gpus``: GPUs free on the Ready nodes of its NodePool (None: not read; then a new replica is planned as
    waiting for a node).
    """

    replicas: int
    ready: int
    demand: float | None
    gpus_per_replica: int
    waiting_for_node: tuple[float, ...] = ()
    free_gpus: int | None = None

    def __post_init__(self) -> None:
        if self.free_gpus is not None and self.free_gpus < 0:
            raise ValueError(f"Observed.free_gpus must be None or >= 0, got {self.free_gpus}")


@quick_init
@dataclass(frozen=True)
class Decided:
    """``decide``'s answer: the decision (every step explained), how many pods have waited longer than a node
    start-up for a node (0: none; then scale-ups are held), the forecast and policy it was made from, and its node
    lead (node start-up + pod start-up: what the pool's node headroom looks ahead by, ``engine.money``)."""

    decision: ScalingDecision
    stuck: int
    forecast: Forecast | None
    policy: ScalingPolicy
    node_lead_seconds: float

    claimed_gpus: int = 0  # free GPUs its new replicas take (what the pool's next Deployment is not shown)


def capacity_hold(replicas: int, min_replicas: int, max_replicas: int, reason: str, recommendations: Recommendations,
                  lead_seconds: float, now: int) -> ScalingDecision:
    """The decision for a Deployment whose capacity is auto and not learned yet: its replicas as they are (within
    its own min/max), never a count derived from a guessed capacity. ``missing_metrics`` says why, so the money
    stage asks for no headroom ahead of it either."""
    held = min(max(replicas, min_replicas), max_replicas)
    why = f"capacity not learned yet: {reason}"
    steps = [Step("capacity_unknown", replicas,
                  f"{why}; holding {replicas} replicas (never scaled on a guessed capacity)")]
    if held != replicas:
        steps.append(Step("min_max_clamp", held, f"clamped to [min {min_replicas}, max {max_replicas}] "
                                                 "(the Deployment's own bounds)"))
    return ScalingDecision(
        desired_replicas=held, forecast_demand=None, lead_seconds=lead_seconds, warm_pool_replicas=0,
        warm_pool_as="replicas", reactive_replicas=0, steps=tuple(steps), recommendations=recommendations, now=now,
        raw_replicas=replicas, missing_metrics=(why,),
    )


def fitting_replicas(observed: Observed) -> int:
    """New replicas that fit on the free GPUs observed (0 when none were read)."""
    if observed.free_gpus is None or observed.gpus_per_replica < 1:
        return 0
    return observed.free_gpus // observed.gpus_per_replica


def stuck_pods(observed: Observed, cold: ColdStartProfile) -> int:
    """Pods that have waited for a node longer than a node start-up: no node is coming for them."""
    limit = cold.node_lead_seconds()
    return sum(1 for age in observed.waiting_for_node if age > limit)


def decide(forecast: Forecast | None, observed: Observed, policy: ScalingPolicy, cold: ColdStartProfile, now: int,
           recommendations: Recommendations, *, capacity_unknown: str | None = None, explain: bool = True) -> Decided:
    """The replica decision for one Deployment at ``now`` (see the module docstring for the rules).

    ``recommendations`` is the stabilisation history the previous decision returned (``decision.recommendations``
    is the one to keep for the next). ``capacity_unknown``: why the capacity per replica is not known yet (then the
    replicas are held); None when ``policy.capacity_per_replica`` is the capacity to plan with. ``explain=False``:
    the planner's steps are not kept (``plan_replicas``; a self-tuning replay reads none).
    """
    now = int(now)
    if capacity_unknown is not None:
        decision = capacity_hold(observed.replicas, policy.min_replicas, policy.max_replicas, capacity_unknown,
                                 recommendations, cold.lead_seconds(False), now)
    else:
        state = WorkloadState(
            current_replicas=observed.replicas,
            ready_replicas=observed.ready,
            current_demand=observed.demand,
            gpus_per_replica=observed.gpus_per_replica,
            recommendations=recommendations,
        )
        decision = plan_replicas(forecast, state, policy, cold, now, explain=explain)
        fit = fitting_replicas(observed)
        if fit and decision.desired_replicas - observed.replicas <= fit:
            # every replica the node-lead plan adds fits on a free GPU: a pod start-up is the whole lead
            decision = plan_replicas(forecast, replace(state, free_gpus=fit * observed.gpus_per_replica), policy,
                                     cold, now, explain=explain)
    stuck = stuck_pods(observed, cold)
    if stuck and decision.desired_replicas > observed.replicas:
        held = observed.replicas
        decision = replace(decision, desired_replicas=held, steps=(*decision.steps, Step(
            "gpus_unavailable", held,
            f"{stuck} pod(s) Pending unschedulable for longer than a node start-up "
            f"({cold.node_lead_seconds():.0f}s): holding at {held} instead of {decision.desired_replicas} so "
            "Pending replicas do not pile up",
        )))
    claimed = 0
    if observed.free_gpus:
        claimed = min(observed.free_gpus,
                      max(0, decision.desired_replicas - observed.replicas) * observed.gpus_per_replica)
    return Decided(decision, stuck, forecast, policy, cold.node_lead_seconds(), claimed)
