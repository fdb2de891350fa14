"""Forecasting and capacity models: pure numeric code.

This package never performs I/O and never reads the clock: every function takes its data (and any
timestamp) as arguments, so the same code runs in the controller, the backtest, the simulator and
the benchmarks, and is tested with plain tables and hypothesis properties.
"""
