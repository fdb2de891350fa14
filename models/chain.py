"""A fallback chain of forecasters, itself a forecaster: the first model that can, forecasts.

Why it exists: a controller must produce a forecast for every Deployment on every tick, including
the one created an hour ago (too short for Holt-Winters), the one whose metrics had an outage,
and the one on which a model blows up. KEDA's answer is fallback replicas after N failures;
statsforecast's is a fallback model when the primary raises. This is the latter, by history
length, with every substitution written into ``Forecast.fallbacks`` so nobody mistakes a
persistence forecast for the model they configured.

Behaviour:
- ``fit`` cleans the series (``models.clean.prepare``: outage zeros and junk -> NaN), then fits
  every model whose ``min_history`` is at most the number of *observed* bins; the rest are
  recorded as skipped (``"holt_winters: needs 2880 bins, has 60"``). A model that raises in
  ``fit`` or gives a non-finite or negative probe forecast is recorded as failed
  (``"holt_winters: ValueError: ..."``). The fallbacks are fitted as well as the first model (they
  are the cheap ones), so a model that fails later, in ``predict``, falls through at once with no
  history kept around to refit from.
- ``predict`` asks the fitted models in order; a model that raises or answers NaN/inf/negative
  is skipped, with the reason appended to the forecast's ``fallbacks``.
- ``update`` cleans the new bins against the last six hours it has seen (so an outage zero that
  arrives live is caught as it arrives: the reference is then one-sided) and forwards them to
  every fitted model; a model whose update raises is dropped from the chain with a note.
- if no model can be fitted (e.g. an all-missing series), ``fit`` raises
  ``InsufficientHistoryError`` listing why each model was passed over: the last model of every
  registry chain is ``Persistence``, which only refuses when there is no observation at all
  (forecasting 0 then would scale a live service to nothing on missing data).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Self

import numpy as np

from models._residuals import check_horizon, check_state, floats_from_json, floats_to_json
from models.base import DEFAULT_LEVELS, Forecaster, InsufficientHistoryError, NotFittedError
from models.catalog import make, member_from_state
from models.clean import OUTAGE_WINDOW_SECONDS, continuation, prepare, prepare_tail, sanitize
from models.types import Forecast, TrafficSeries

CHAIN_STATE = "chain"


class ChainExhaustedError(RuntimeError):
    """Every model of a fitted chain failed to forecast (the message lists why)."""


def _describe(alias: str, exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{alias}: {type(exc).__name__}: {text}" if text else f"{alias}: {type(exc).__name__}"


def _forecast_problem(fc: Forecast) -> str | None:
    if not fc.is_finite:
        return "forecast is not finite"
    if np.any(fc.mean < 0):
        return "forecast is negative"
    return None


class FallbackChain:
    """Try ``models`` in order; the last should be one that never fails (``Persistence``)."""

    def __init__(self, models: Sequence[Forecaster], *, clean: bool = True) -> None:
        if not models:
            raise ValueError("FallbackChain needs at least one model")
        self.models: list[Forecaster] = list(models)
        self.alias: str = self.models[0].alias
        self.clean = clean
        self._fitted: list[bool] = [False] * len(self.models)
        self._notes: list[str | None] = [None] * len(self.models)  # why a model is not usable
        self._context = np.zeros(0)
        self._step = 0
        self._end = 0
        self._is_fit = False

    @property
    def active(self) -> Forecaster | None:
        """The first fitted model (the one ``predict`` asks first), or ``None`` before ``fit``."""
        for model, ok in zip(self.models, self._fitted, strict=True):
            if ok:
                return model
        return None

    @property
    def notes(self) -> tuple[str, ...]:
        """Why models were skipped or dropped, in chain order."""
        return tuple(n for n in self._notes if n is not None)

    def min_history(self, step_seconds: int) -> int:
        return min(m.min_history(step_seconds) for m in self.models)

    def fit(self, series: TrafficSeries) -> Self:
        if self.clean:
            cleaned = prepare(series)
        else:
            cleaned = TrafficSeries(sanitize(series.values), series.step_seconds, series.start)
        observed = int(np.isfinite(cleaned.values).sum())
        step = series.step_seconds
        fitted = [False] * len(self.models)
        notes: list[str | None] = [None] * len(self.models)
        for i, model in enumerate(self.models):
            need = model.min_history(step)
            if need > observed:
                notes[i] = f"{model.alias}: needs {need} bins, has {observed}"
                continue
            try:
                model.fit(cleaned)
                problem = _forecast_problem(model.predict(1))
            except Exception as exc:  # any model failure falls through to the next model, recorded
                notes[i] = _describe(model.alias, exc)
                continue
            if problem is not None:
                notes[i] = f"{model.alias}: {problem}"
                continue
            fitted[i] = True
        if not any(fitted):
            reasons = "; ".join(n for n in notes if n is not None)
            raise InsufficientHistoryError(f"no model of the {self.alias} chain could be fitted ({reasons})")
        self._fitted, self._notes = fitted, notes
        keep = max(1, OUTAGE_WINDOW_SECONDS // step)
        self._context = sanitize(series.values[-keep:])
        self._step, self._end = step, series.end
        self._is_fit = True
        return self

    def update(self, new: TrafficSeries) -> Self:
        if not self._is_fit:
            raise NotFittedError(f"{self.alias} chain: update() before fit()")
        values = continuation(self._end, self._step, new)
        if values.shape[0] == 0:
            return self
        keep = max(1, OUTAGE_WINDOW_SECONDS // self._step)
        joined = np.concatenate([self._context, values])
        if self.clean:
            context_start = self._end - self._context.shape[0] * self._step
            cleaned = prepare_tail(self._context, values, self._step, context_start)
        else:
            cleaned = values
        chunk = TrafficSeries(cleaned, self._step, self._end)
        for i, model in enumerate(self.models):
            if not self._fitted[i]:
                continue
            try:
                model.update(chunk)
            except Exception as exc:  # a model that cannot absorb data leaves the chain, recorded
                self._fitted[i] = False
                self._notes[i] = f"{_describe(model.alias, exc)} (in update)"
        self._context = joined[-keep:]
        self._end = chunk.end
        return self

    def predict(self, h: int, levels: Sequence[int] = DEFAULT_LEVELS) -> Forecast:
        if not self._is_fit:
            raise NotFittedError(f"{self.alias} chain: predict() before fit()")
        h = check_horizon(h)
        tried: list[str] = []
        for i, model in enumerate(self.models):
            if not self._fitted[i]:
                note = self._notes[i]
                if note is not None:
                    tried.append(note)
                continue
            try:
                fc = model.predict(h, levels)
            except Exception as exc:  # fall through to the next model, recorded in the forecast
                tried.append(_describe(model.alias, exc))
                continue
            problem = _forecast_problem(fc)
            if problem is not None:
                tried.append(f"{model.alias}: {problem}")
                continue
            return fc.with_fallbacks((*tried, *fc.fallbacks))
        raise ChainExhaustedError(f"every model of the {self.alias} chain failed: {'; '.join(tried)}")

    def to_state(self) -> dict[str, Any]:
        if not self._is_fit:
            raise NotFittedError(f"{self.alias} chain: to_state() before fit()")
        members: list[dict[str, Any]] = []
        for model, ok, note in zip(self.models, self._fitted, self._notes, strict=True):
            members.append({"alias": model.alias, "state": model.to_state() if ok else None, "note": note})
        return {
            "model": CHAIN_STATE,
            "clean": self.clean,
            "members": members,
            "context": floats_to_json(self._context),
            "step_seconds": self._step,
            "end": self._end,
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> Self:
        check_state(state, CHAIN_STATE)
        try:
            models: list[Forecaster] = []
            fitted: list[bool] = []
            notes: list[str | None] = []
            for member in state["members"]:
                if member["state"] is None:
                    models.append(make(str(member["alias"])))
                    fitted.append(False)
                else:
                    models.append(member_from_state(member["state"]))
                    fitted.append(True)
                notes.append(None if member["note"] is None else str(member["note"]))
            chain = cls(models, clean=bool(state["clean"]))
            chain._fitted, chain._notes = fitted, notes
            chain._context = floats_from_json(state["context"])
            chain._step = int(state["step_seconds"])
            chain._end = int(state["end"])
        except (KeyError, TypeError) as exc:
            raise ValueError(f"chain: invalid state: {exc}") from None
        chain._is_fit = True
        return chain
