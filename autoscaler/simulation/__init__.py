"""Trace-driven cluster simulator behind ``predictive-autoscaler simulate`` and ``benchmarks/simulate.py``."""
