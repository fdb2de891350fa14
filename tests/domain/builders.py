"""Small constructors shared by the domain tests: forecasts with chosen bands at chosen times."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from models.types import Forecast


def forecast(
    p90: Sequence[float] | np.ndarray,
    *,
    start: int = 0,
    step: int = 60,
    mean: Sequence[float] | np.ndarray | None = None,
    p99: Sequence[float] | np.ndarray | None = None,
) -> Forecast:
    """A forecast with a p90 band (and optionally p99); the mean defaults to the p90 band (no spread)."""
    band = np.asarray(p90, dtype=np.float64)
    quantiles = {90: band}
    if p99 is not None:
        quantiles[99] = np.asarray(p99, dtype=np.float64)
    return Forecast(
        start=start,
        step_seconds=step,
        mean=band.copy() if mean is None else np.asarray(mean, dtype=np.float64),
        quantiles=quantiles,
        model="test",
    )


def peak_at(t: int, value: float, *, base: float = 0.0, start: int = 0, step: int = 60, horizon: int = 60) -> Forecast:
    """A flat p90 band of ``base`` with a single step of ``value`` whose bin starts at time ``t``."""
    band = np.full(horizon, base)
    band[(t - start) // step] = value
    return forecast(band, start=start, step=step)
