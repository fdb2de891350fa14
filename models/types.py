"""Value types shared by every forecaster: a regular traffic series and a banded forecast.

Why a module of its own: the backtest, the planner, the simulator and the controller all exchange
these two objects, so their invariants (regular step, rate units, quantile keys as percentiles)
are checked once, here, instead of in every consumer.

Units: ``values`` are *rates per second* (requests/s or tokens/s), whatever the bin size of the
source. A trace of per-minute counts is divided by 60 on load; Prometheus answers ``rate()`` in
per-second units already. Missing observations are ``NaN`` (never zero: a zero is a real
observation of no traffic).

Bands are one-sided upper quantiles keyed by percent: ``quantiles[90]`` is the level that demand
stays at or below with probability 0.9. Capacity is sized against an upper quantile, so a
symmetric interval would spend half its width on a side nobody provisions for.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property

import numpy as np
from numpy.typing import NDArray

FloatArray = NDArray[np.float64]

SECONDS_PER_DAY = 86_400
SECONDS_PER_WEEK = 7 * SECONDS_PER_DAY


@dataclass(frozen=True)
class TrafficSeries:
    """A regular series of per-second rates.

    ``start`` is the Unix time (seconds) of the first bin's start; bin ``i`` covers
    ``[start + i*step, start + (i+1)*step)``.
    """

    values: FloatArray
    step_seconds: int
    start: int = 0

    def __post_init__(self) -> None:
        if self.step_seconds <= 0:
            raise ValueError(f"step_seconds must be positive, got {self.step_seconds}")
        arr = np.asarray(self.values, dtype=np.float64)
        if arr.ndim != 1:
            raise ValueError(f"values must be one-dimensional, got shape {arr.shape}")
        object.__setattr__(self, "values", arr)

    def __len__(self) -> int:
        return int(self.values.shape[0])

    @property
    def end(self) -> int:
        """Timestamp just after the last bin: where a forecast starts."""
        return self.start + len(self) * self.step_seconds

    def timestamps(self) -> NDArray[np.int64]:
        return self.start + self.step_seconds * np.arange(len(self), dtype=np.int64)

    def head(self, n: int) -> TrafficSeries:
        """The first ``n`` bins (the history before origin ``n``)."""
        return TrafficSeries(self.values[:n], self.step_seconds, self.start)

    def slice(self, lo: int, hi: int) -> TrafficSeries:
        return TrafficSeries(self.values[lo:hi], self.step_seconds, self.start + lo * self.step_seconds)

    def season_length(self, period_seconds: int = SECONDS_PER_DAY) -> int:
        """Bins per seasonal period (a day by default); at least 1."""
        return max(1, period_seconds // self.step_seconds)


@dataclass(frozen=True)
class Forecast:
    """``h`` future steps of a point forecast and upper quantile bands.

    ``fallbacks`` lists, in order, the models that were tried before ``model`` and why they were
    skipped or failed (e.g. ``"holt_winters: needs 2880 bins, has 60"``), so a forecast always
    says when it is not the one that was asked for.
    """

    start: int
    step_seconds: int
    mean: FloatArray
    quantiles: Mapping[int, FloatArray]
    model: str
    fallbacks: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        mean = np.asarray(self.mean, dtype=np.float64)
        object.__setattr__(self, "mean", mean)
        qs = {int(k): np.asarray(v, dtype=np.float64) for k, v in self.quantiles.items()}
        for k, v in qs.items():
            if not 0 < k < 100:
                raise ValueError(f"quantile level must be a percentile in (0, 100), got {k}")
            if v.shape != mean.shape:
                raise ValueError(f"band p{k} has shape {v.shape}, mean has {mean.shape}")
        object.__setattr__(self, "quantiles", qs)

    @cached_property
    def horizon(self) -> int:
        return int(self.mean.shape[0])

    def band(self, level: int) -> FloatArray:
        """The ``level`` percent upper band; raises ``KeyError`` naming what exists."""
        try:
            return self.quantiles[level]
        except KeyError:
            raise KeyError(f"no p{level} band in forecast (has {sorted(self.quantiles)})") from None

    def timestamps(self) -> NDArray[np.int64]:
        return self.start + self.step_seconds * np.arange(self.horizon, dtype=np.int64)

    def band_list(self, level: int | None = None) -> list[float]:
        """The ``level`` band (None: the mean) as a list of floats, made once per band: the planner reads a few
        values of a band at every decision, and on arrays this short numpy's cost per call is most of the work.
        Raises ``KeyError`` like ``band``."""
        lists = self._lists
        out = lists.get(level)
        if out is None:
            out = lists[level] = (self.mean if level is None else self.band(level)).tolist()
        return out

    @cached_property
    def _lists(self) -> dict[int | None, list[float]]:
        return {}

    @cached_property
    def is_finite(self) -> bool:
        """Whether every value is finite (computed once: the planner asks on every decision, and a forecast serves
        every decision until the next bin; one pass over the values joined, which on arrays this short costs a
        fifth of one pass per band)."""
        return bool(np.isfinite(np.concatenate((self.mean, *self.quantiles.values()))).all())

    def with_fallbacks(self, fallbacks: tuple[str, ...]) -> Forecast:
        """This forecast saying ``fallbacks``, with what was computed of it (``is_finite``) carried over: the values
        are the same arrays; this forecast itself when it already says them (a value: nothing changes it)."""
        if fallbacks == self.fallbacks:
            return self
        out = replace(self, fallbacks=fallbacks)
        if "is_finite" in self.__dict__:
            out.__dict__["is_finite"] = self.__dict__["is_finite"]
        return out
