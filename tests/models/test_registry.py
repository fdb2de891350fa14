"""Registry: names, chains by history need, and state dispatch."""

from __future__ import annotations

import json

import numpy as np
import pytest

from models.base import Forecaster
from models.chain import FallbackChain
from models.registry import MODEL_NAMES, UnknownModelError, from_state, make, make_chain
from models.types import TrafficSeries
from tests.models._synthetic import DAY0


def test_model_names() -> None:
    assert MODEL_NAMES == ("default", "persistence", "seasonal_naive", "holt_winters", "prophet")


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_make_gives_an_unfitted_forecaster_with_that_alias(name: str) -> None:
    model = make(name)
    assert isinstance(model, Forecaster)
    assert model.alias == name
    assert make(name) is not model


@pytest.mark.parametrize(
    ("name", "members"),
    [
        ("holt_winters", ["holt_winters", "seasonal_naive", "persistence"]),
        ("prophet", ["prophet", "persistence"]),
        ("seasonal_naive", ["seasonal_naive", "persistence"]),
        ("default", ["default", "persistence"]),
        ("persistence", ["persistence"]),
    ],
)
def test_make_chain_orders_fallbacks_by_history_need(name: str, members: list[str]) -> None:
    chain = make_chain(name)
    assert isinstance(chain, FallbackChain)
    assert [m.alias for m in chain.models] == members
    assert chain.alias == name
    needs = [m.min_history(60) for m in chain.models[1:]]
    assert needs == sorted(needs, reverse=True)
    assert chain.models[-1].min_history(60) == 1


@pytest.mark.parametrize("bad", ["arima", "", "Persistence", None, 3])
def test_unknown_names_list_the_valid_ones(bad: object) -> None:
    for factory in (make, make_chain):
        with pytest.raises(UnknownModelError, match="valid names: default, persistence, seasonal_naive") as info:
            factory(bad)  # type: ignore[arg-type]
        assert isinstance(info.value, ValueError)


@pytest.mark.parametrize("state", [{"model": "arima"}, {}, {"model": None}])
def test_from_state_rejects_unknown_models(state: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="unknown 'model' key"):
        from_state(state)


def test_from_state_rejects_non_dicts() -> None:
    with pytest.raises(ValueError, match="must be a dict"):
        from_state([])  # type: ignore[arg-type]


def test_from_state_dispatches_each_fitted_model() -> None:
    series = TrafficSeries(np.abs(np.sin(np.arange(3 * 144) / 20)) * 10 + 1, 600, DAY0)
    for name in ("persistence", "seasonal_naive", "holt_winters", "default"):
        model = make(name).fit(series)
        restored = from_state(json.loads(json.dumps(model.to_state())))
        assert type(restored) is type(model)
        assert np.array_equal(restored.predict(7).mean, model.predict(7).mean)
