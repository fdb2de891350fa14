"""The one small API every forecaster implements (after statsforecast's model interface).

Why a protocol and not a base class: the baselines, the statsmodels and Prophet wrappers and our
default model share no code, only a contract; a ``Protocol`` lets the backtest, the fallback
chain and the controller accept any of them (and test doubles) without inheritance.

Contract:
- ``alias``: the stable name used in configs, JSON output and benchmarks.
- ``min_history(step_seconds)``: how many bins the model needs before ``fit`` makes sense
  (Holt-Winters needs two full seasons; persistence needs one observation). The fallback chain
  reads it to pick a model for a short history.
- ``fit(series) -> self``: learn from a regular series (NaN = missing).
- ``update(new) -> self``: absorb observations that follow the fitted ones, without a refit,
  where the model can (state-space filters, levels); a model that cannot simply keeps its fit.
  ``new.start`` must equal the end of what the model has seen.
- ``predict(h, levels) -> Forecast``: ``h`` steps after the last observation, with upper bands
  at each percentile in ``levels``. Pure: calling it twice gives the same answer.
- ``to_state()`` / ``from_state()``: JSON-safe persistence of the fitted state, so a controller
  restart (or a fleet of 1,000 Deployments) does not refit everything.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, Self, runtime_checkable

from models.types import Forecast, TrafficSeries

DEFAULT_LEVELS: tuple[int, ...] = (50, 90, 99)


class NotFittedError(RuntimeError):
    """``predict``/``update`` was called before ``fit``."""


class InsufficientHistoryError(ValueError):
    """The series is shorter than the model's ``min_history``."""


@runtime_checkable
class Forecaster(Protocol):
    alias: str

    def min_history(self, step_seconds: int) -> int: ...

    def fit(self, series: TrafficSeries) -> Self: ...

    def update(self, new: TrafficSeries) -> Self: ...

    def predict(self, h: int, levels: Sequence[int] = DEFAULT_LEVELS) -> Forecast: ...

    def to_state(self) -> dict[str, Any]: ...

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> Self: ...
