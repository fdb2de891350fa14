"""Model names -> forecasters and fallback chains, and persisted states -> forecasters.

Why it exists: configs, the CLI, the backtest and the controller name models by string; this is
the one place they go to make a model or a fallback chain and to turn a saved state back into
either. The names themselves, their fallbacks and the single models live in ``models.catalog``
(which the chain uses too, so the chain and this module do not import each other).

Fallback order is by history needed: Holt-Winters (two days) -> seasonal naive (one day) ->
persistence (one bin); Prophet, seasonal naive and the default model fall back to persistence.
"""

from __future__ import annotations

from typing import Any

from models.base import Forecaster
from models.catalog import FALLBACKS, MODEL_NAMES, UnknownModelError, make, member_from_state
from models.chain import CHAIN_STATE, FallbackChain

__all__ = ["FALLBACKS", "MODEL_NAMES", "UnknownModelError", "from_state", "make", "make_chain"]


def make_chain(name: str) -> FallbackChain:
    """``name``'s model followed by its fallbacks (always ending in persistence)."""
    if not isinstance(name, str) or name not in MODEL_NAMES:
        raise UnknownModelError(name)
    return FallbackChain([make(name), *(make(f) for f in FALLBACKS[name])])


def from_state(state: dict[str, Any]) -> Forecaster:
    """Rebuild a fitted model (or chain) from its ``to_state()`` dict, by its ``"model"`` key."""
    if not isinstance(state, dict):
        raise ValueError(f"model state must be a dict, got {type(state).__name__}")
    name = state.get("model", state.get("alias"))
    if name == CHAIN_STATE:
        return FallbackChain.from_state(state)
    if not isinstance(name, str) or name not in MODEL_NAMES:
        valid = ", ".join((*MODEL_NAMES, CHAIN_STATE))
        raise ValueError(f"model state has unknown 'model' key {name!r}; valid: {valid}")
    return member_from_state(state)
