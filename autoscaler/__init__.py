"""predictive-autoscaler: pre-scale GPU inference ahead of forecast demand, under a cost ceiling.

Layers (enforced by import-linter, see ``pyproject.toml``):
- ``autoscaler.domain``: pure decisions (planner, stabilisation, cost), no I/O, no clock reads;
- ``autoscaler.adapters``: all network I/O (Prometheus, Kubernetes, Alertmanager);
- ``autoscaler.runtime``: the control loop that joins them;
- ``autoscaler.commands``: one module per CLI subcommand, dispatched by ``autoscaler.cli``.
"""

__version__ = "0.1.0"
