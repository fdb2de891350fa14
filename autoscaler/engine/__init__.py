"""The decision core that the controller and the simulator both call.

Why it exists: every number ``simulate`` publishes (the frontier, the self-tuning choice, GPU-hours against
the HPA) is read as a statement about the controller. It is one only if the simulator runs the controller's
own decision code, not a second program that re-composes the same domain pieces its own way. So whatever
the controller decides on its own (when to refit a forecaster, which bins it has absorbed, how far ahead it
forecasts) lives here, once: ``autoscaler.runtime`` feeds it from Prometheus and the Kubernetes API on the
wall clock, ``autoscaler.simulation`` feeds it from a trace on trace time, and a test replays one trace
through both and requires the same forecasts at every tick.

Pure, like ``autoscaler.domain``: no I/O and no clock reads. Time is passed in, so the same call means the
same thing in a tick of ``run`` and in a tick of ``simulate``.
"""
