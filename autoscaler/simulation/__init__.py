"""Trace-driven cluster simulator behind ``predictive-autoscaler simulate`` and ``benchmarks/simulate.py``.

Why a package: the cluster model, the baseline HPA, the oracle bound and our policy are four
separately testable pieces that the engine runs under one set of rules and one bill.

- ``cluster``: replicas, nodes, start-up delays, consolidation of empty nodes, what is billed;
- ``reactive``: a faithful Kubernetes HPA (autoscaling/v2 defaults), on utilisation and on vLLM's
  waiting-requests gauge (as the vLLM reference deploys it);
- ``queue``: a fluid FIFO queue in front of the Ready replicas, with a timeout: what users feel
  (SLO attainment, p99 wait, dropped requests), exact from cumulative arrival/departure curves;
- ``traffic``: how a bin's rate is spread over the ticks, the same for every policy;
- ``oracle``: perfect foresight at the fewest GPU-hours, replayed through the same cluster;
- ``predictive``: the controller's engine (``autoscaler.engine``) on a trace, observing what the controller would;
- ``money``: a cost ceiling and training gangs over the whole simulated cluster, decided by the
  controller's domain functions (``enforce_ceilings``, ``place_gang``) between each policy's decision
  and the cluster;
- ``engine``: ``simulate(series, SimulationConfig, ...) -> SimulationResult`` and the scores.
- ``fleet``: many Deployments, each on its own policy, sharing NodePools (``cluster.NodePool``) under cluster and
  team ceilings as billed, with forecast-sized node headroom (``autoscaler.engine.headroom``).

How it relates to the controller: docs/ARCHITECTURE.md, "The simulator".
"""
