"""The decision core that the controller and the simulator both call.

Why it exists: every number ``simulate`` publishes (the frontier, the self-tuning choice, GPU-hours against
the HPA) is read as a statement about the controller. It is one only if the simulator runs the controller's
own decision code, not a second program that re-composes the same domain pieces its own way. So whatever
the controller decides on its own lives here, once:

- ``forecasting``: one Deployment's forecaster and its cadence (when it is refit, which bins it has absorbed,
  how far ahead it forecasts) and the GPUs ahead a training gang is placed around;
- ``deciding``: one Deployment's decision at one tick from what the tick observed (the demand of the newest
  ended bin, the pods waiting for a node), with the holds (capacity not learned, no node coming) and the
  replicas one node start-up ahead;
- ``money``: the money step of a tick for the whole cluster (gang placements, the ceilings' cuts, NodePool
  limits, headroom objects, alerts, which held gangs start), and forecast-sized node headroom per NodePool
  (``headroom``'s rule over the pool's Deployments), for the controller's money stage, the simulator's ledger and
  the fleet simulator.

``autoscaler.runtime`` feeds it from Prometheus and the Kubernetes API on the wall clock,
``autoscaler.simulation`` feeds it from a trace and a simulated cluster on trace time, and a test
(``tests/engine/test_sameness.py``) replays one trace through both and requires the same forecast and the same
decision at every tick.

Pure, like ``autoscaler.domain``: no I/O and no clock reads. Time is passed in, so the same call means the
same thing in a tick of ``run`` and in a tick of ``simulate``.
"""
