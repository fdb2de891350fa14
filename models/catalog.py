"""The single models by name: which names exist, their fallbacks, how to make one and how to restore one.

Why a module apart from ``models.registry``: the fallback chain (``models.chain``) restores its members from their
saved states by name, and the registry makes and restores chains. With the names in the registry, chain and
registry imported each other (a lazy import in ``FallbackChain.from_state`` hid the circle). Here the names need
neither: ``models.chain`` imports this module, ``models.registry`` imports both and adds the chains. The model
classes are imported lazily: importing Prophet costs about a second and the controller may never use it.
"""

from __future__ import annotations

from typing import Any

from models.base import Forecaster

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


def member_from_state(state: dict[str, Any]) -> Forecaster:
    """Rebuild one fitted single model (not a chain) from its ``to_state()`` dict, by its ``"model"`` key."""
    # every model here writes "model"; models.default writes "alias" (accepted too, so both dispatch)
    name = state.get("model", state.get("alias"))
    if not isinstance(name, str) or name not in MODEL_NAMES:
        raise ValueError(f"model state has unknown 'model' key {name!r}; valid: {', '.join(MODEL_NAMES)}")
    model: Forecaster = _model_class(name).from_state(state)
    return model
