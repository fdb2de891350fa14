"""Model names -> forecasters and fallback chains, and persisted states -> forecasters.

Why it exists: configs, the CLI, the backtest and the controller name models by string; this is
the one place those strings are defined, the one place that knows which fallbacks make sense
after each model, and the one dispatcher that turns a saved state back into a model. Prophet and
our default model are imported lazily: importing Prophet costs about a second and the controller
may never use it.

Fallback order is by history needed: Holt-Winters (two days) -> seasonal naive (one day) ->
persistence (one bin); Prophet, seasonal naive and the default model fall back to persistence.
"""

from __future__ import annotations

from typing import Any

from models.base import Forecaster
from models.chain import CHAIN_STATE, FallbackChain

MODEL_NAMES: tuple[str, ...] = ("default", "persistence", "seasonal_naive", "holt_winters", "prophet")

FALLBACKS: dict[str, tuple[str, ...]] = {
    "default": ("persistence",),
    "persistence": (),
    "seasonal_naive": ("persistence",),
    "holt_winters": ("seasonal_naive", "persistence"),
    "prophet": ("persistence",),
}


class UnknownModelError(ValueError):
    """A model name that is not in ``MODEL_NAMES``; the message lists the valid names."""

    def __init__(self, name: object) -> None:
        super().__init__(f"unknown model {name!r}; valid names: {', '.join(MODEL_NAMES)}")
        self.name = name


def _model_class(name: str) -> Any:
    if name == "persistence":
        from models.naive import Persistence

        return Persistence
    if name == "seasonal_naive":
        from models.naive import SeasonalNaive

        return SeasonalNaive
    if name == "holt_winters":
        from models.ets import HoltWinters

        return HoltWinters
    if name == "prophet":
        from models.prophet_model import ProphetForecaster

        return ProphetForecaster
    if name == "default":
        from models.default import DefaultForecaster

        return DefaultForecaster
    raise UnknownModelError(name)


def make(name: str) -> Forecaster:
    """A new, unfitted model with its default hyper-parameters."""
    if not isinstance(name, str) or name not in MODEL_NAMES:
        raise UnknownModelError(name)
    model: Forecaster = _model_class(name)()
    return model


def make_chain(name: str) -> FallbackChain:
    """``name``'s model followed by its fallbacks (always ending in persistence)."""
    if not isinstance(name, str) or name not in MODEL_NAMES:
        raise UnknownModelError(name)
    return FallbackChain([make(name), *(make(f) for f in FALLBACKS[name])])


def from_state(state: dict[str, Any]) -> Forecaster:
    """Rebuild a fitted model (or chain) from its ``to_state()`` dict, by its ``"model"`` key."""
    if not isinstance(state, dict):
        raise ValueError(f"model state must be a dict, got {type(state).__name__}")
    # every model here writes "model"; models.default writes "alias" (accepted too, so both dispatch)
    name = state.get("model", state.get("alias"))
    if name == CHAIN_STATE:
        return FallbackChain.from_state(state)
    if not isinstance(name, str) or name not in MODEL_NAMES:
        valid = ", ".join((*MODEL_NAMES, CHAIN_STATE))
        raise ValueError(f"model state has unknown 'model' key {name!r}; valid: {valid}")
    model: Forecaster = _model_class(name).from_state(state)
    return model
