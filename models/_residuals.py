"""Upper quantile bands from a model's own empirical k-step-ahead errors, in square-root space.

Why it exists: persistence, seasonal naive, Holt-Winters and Prophet have no shared likelihood,
and their analytic intervals (where they exist) assume Gaussian, homoscedastic errors, which
request counts are not. Every one of them can, however, replay itself over recent history and
say how wrong it was ``k`` steps ahead. This module turns those errors into bands, once, for all.

Method:
- errors are measured in square-root space, ``e = sqrt(actual) - sqrt(forecast)``. For counts the
  square root is variance-stabilising (Poisson noise has a constant spread there), so one error
  quantile serves quiet nights and busy peaks, and the band ``(sqrt(mean) + q_k)^2`` is naturally
  wider at high traffic;
- ``q_k`` is the empirical quantile of the errors at horizon ``k`` over the sampled origins, for a
  fixed grid of levels (a JSON state of a few hundred numbers, not the raw errors); a requested
  level between grid points is interpolated linearly;
- monotonicity is enforced rather than hoped for: offsets are made non-decreasing in level
  (bands never cross), non-decreasing in ``k`` (uncertainty does not shrink with the horizon;
  conservative for capacity), and ``q_k >= 0`` for levels >= 50 (a band is never below the mean);
- with no usable errors (a one-point history, a constant or all-zero series) the offsets are
  zero: a zero-width band, stated rather than invented.

Why not an existing band method: statsforecast's conformal intervals are the closest relative
(symmetric, raw space); ours are one-sided and in sqrt space because capacity is sized against the
upper side of a count process (docs/ARCHITECTURE.md, "Forecast bands").
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
from numpy.typing import NDArray

from models.types import FloatArray

IntArray = NDArray[np.int64]
ForecastAt = Callable[[IntArray, IntArray], FloatArray]

# Percent levels at which offsets are stored; a requested level in between is interpolated.
LEVEL_GRID: tuple[float, ...] = (
    1.0,
    5.0,
    10.0,
    20.0,
    30.0,
    40.0,
    50.0,
    60.0,
    70.0,
    75.0,
    80.0,
    85.0,
    90.0,
    93.0,
    95.0,
    97.5,
    99.0,
    99.5,
    99.9,
)
MAX_ORIGINS = 1500
MIN_SAMPLES = 5


def horizon_grid(max_k: int) -> tuple[int, ...]:
    """Horizons (in bins) at which offsets are stored: every k up to 10, then ~30 geometric steps."""
    max_k = max(1, int(max_k))
    dense = np.arange(1, min(max_k, 10) + 1)
    sparse = np.unique(np.round(np.geomspace(10, max_k, 30)).astype(np.int64)) if max_k > 10 else np.array([], np.int64)
    return tuple(int(k) for k in np.unique(np.concatenate([dense, sparse])))


def sample_origins(first: int, last: int, max_origins: int = MAX_ORIGINS) -> IntArray:
    """At most ``max_origins`` evenly spaced origin indices in ``[first, last]`` (empty if none)."""
    if last < first:
        return np.array([], dtype=np.int64)
    count = min(max_origins, last - first + 1)
    return np.unique(np.round(np.linspace(first, last, count)).astype(np.int64))


def sqrt_errors(actual: FloatArray, forecast: FloatArray) -> FloatArray:
    """``sqrt(max(actual,0)) - sqrt(max(forecast,0))``; NaN where either side is missing."""
    with np.errstate(invalid="ignore"):
        return np.sqrt(np.maximum(actual, 0.0)) - np.sqrt(np.maximum(forecast, 0.0))


@dataclass(frozen=True)
class ErrorBands:
    """Sqrt-space error quantiles ``offsets[level_index][k_index]`` on the two grids."""

    horizons: tuple[int, ...]
    levels: tuple[float, ...]
    offsets: tuple[tuple[float, ...], ...]

    @classmethod
    def zero(cls) -> ErrorBands:
        """No evidence: zero-width bands."""
        return cls((1,), LEVEL_GRID, tuple((0.0,) for _ in LEVEL_GRID))

    @classmethod
    def from_errors(cls, errors: FloatArray, horizons: Sequence[int]) -> ErrorBands:
        """``errors`` has one column per horizon in ``horizons`` and one row per origin (NaN = none)."""
        errs = np.asarray(errors, dtype=np.float64)
        hs = tuple(int(k) for k in horizons)
        if errs.ndim != 2 or errs.shape[1] != len(hs):
            raise ValueError(f"errors must have shape (origins, {len(hs)}), got {errs.shape}")
        if not hs:
            return cls.zero()
        table = np.full((len(LEVEL_GRID), len(hs)), np.nan)
        for j in range(len(hs)):
            col = errs[:, j]
            col = col[np.isfinite(col)]
            if col.size >= MIN_SAMPLES:
                table[:, j] = np.quantile(col, np.asarray(LEVEL_GRID) / 100.0)
        have = np.where(np.isfinite(table[0]))[0]
        if have.size == 0:
            return cls.zero()
        # horizons without enough samples borrow from the nearest horizon that has them
        for j in range(len(hs)):
            if not np.isfinite(table[0, j]):
                nearest = have[np.argmin(np.abs(have - j))]
                table[:, j] = table[:, nearest]
        table = np.maximum.accumulate(table, axis=0)  # non-decreasing in level
        table = np.maximum.accumulate(table, axis=1)  # non-decreasing in horizon
        upper = np.asarray(LEVEL_GRID) >= 50.0
        table[upper] = np.maximum(table[upper], 0.0)
        return cls(hs, LEVEL_GRID, tuple(tuple(float(x) for x in row) for row in table))

    @cached_property
    def _arrays(self) -> tuple[FloatArray, FloatArray, FloatArray]:
        table = np.asarray(self.offsets, dtype=np.float64)
        return table, np.asarray(self.levels, dtype=np.float64), np.asarray(self.horizons, dtype=np.float64)

    def offsets_for(self, level: int, h: int) -> FloatArray:
        """Offsets for horizons ``1..h`` at ``level`` percent (interpolated on both grids)."""
        if not 0 < level < 100:
            raise ValueError(f"quantile level must be a percentile in (0, 100), got {level}")
        table, lv, hs = self._arrays
        x = min(max(float(level), float(lv[0])), float(lv[-1]))  # outside the grid: the nearest end
        i = int(np.clip(np.searchsorted(lv, x, side="right") - 1, 0, lv.shape[0] - 2)) if lv.shape[0] > 1 else 0
        if lv.shape[0] > 1:
            w = (x - lv[i]) / (lv[i + 1] - lv[i])
            per_k = (1.0 - w) * table[i] + w * table[i + 1]
        else:
            per_k = table[0]
        ks = np.arange(1, h + 1, dtype=np.float64)
        out: FloatArray = np.interp(ks, hs, per_k)
        if level >= 50:
            out = np.maximum(out, 0.0)
        return out

    def apply(self, mean: FloatArray, levels: Sequence[int]) -> dict[int, FloatArray]:
        """Bands ``(sqrt(max(mean,0)) + q_k)^2`` for each level (clipped so the root is >= 0)."""
        floor = np.maximum(np.asarray(mean, dtype=np.float64), 0.0)
        root = np.sqrt(floor)
        h = root.shape[0]
        bands: dict[int, FloatArray] = {}
        for level in sorted({int(x) for x in levels}):
            q = self.offsets_for(level, h)
            band = np.square(np.maximum(root + q, 0.0))
            if level >= 50:
                band = np.maximum(band, floor)  # exactly >= the mean (sqrt(x)**2 may round below x)
            bands[level] = band
        # enforce ordering across requested levels exactly (interpolation keeps it, rounding might not)
        prev: FloatArray | None = None
        for level in sorted(bands):
            if prev is not None:
                bands[level] = np.maximum(bands[level], prev)
            prev = bands[level]
        return bands

    def to_state(self) -> dict[str, Any]:
        offsets = [list(row) for row in self.offsets]
        return {"horizons": list(self.horizons), "levels": list(self.levels), "offsets": offsets}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> ErrorBands:
        try:
            return cls(
                tuple(int(k) for k in state["horizons"]),
                tuple(float(x) for x in state["levels"]),
                tuple(tuple(float(x) for x in row) for row in state["offsets"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"invalid error-band state: {exc}") from None


def bands_from_path(
    values: FloatArray,
    forecast_at: ForecastAt,
    max_k: int,
    first_origin: int,
    max_origins: int = MAX_ORIGINS,
) -> ErrorBands:
    """Replay a model over history and collect its k-step errors.

    ``forecast_at(origins, ks)`` returns an array ``(len(origins), len(ks))``: the forecast made with
    data up to and including bin ``origin`` for bin ``origin + k``. Origins are sampled so that the
    longest horizon still has targets inside ``values``.
    """
    n = values.shape[0]
    ks = np.asarray(horizon_grid(max_k), dtype=np.int64)
    origins = sample_origins(first_origin, n - 2, max_origins)
    if origins.size == 0:
        return ErrorBands.zero()
    fc = np.asarray(forecast_at(origins, ks), dtype=np.float64)
    targets = origins[:, None] + ks[None, :]
    inside = targets < n
    actual = np.full(targets.shape, np.nan)
    actual[inside] = values[targets[inside]]
    return ErrorBands.from_errors(sqrt_errors(actual, fc), ks.tolist())


# --- small helpers shared by the model wrappers -------------------------------------------------

BAND_HORIZON_SECONDS = 86_400  # bands are measured up to a day ahead; further horizons reuse the last
BAND_HISTORY_SECONDS = 14 * 86_400  # errors are replayed over at most the last two weeks


def band_max_k(n: int, step_seconds: int) -> int:
    """Longest horizon (bins) whose errors are measured on a history of ``n`` bins."""
    return max(1, min(BAND_HORIZON_SECONDS // step_seconds, n // 2))


def check_horizon(h: int) -> int:
    if isinstance(h, bool) or not isinstance(h, int | np.integer) or h < 1:
        raise ValueError(f"horizon h must be a positive integer, got {h!r}")
    return int(h)


def floats_to_json(values: FloatArray) -> list[float | None]:
    """A JSON-safe list: NaN becomes ``None`` (strict JSON has no NaN)."""
    return [None if not np.isfinite(x) else float(x) for x in np.asarray(values, dtype=np.float64)]


def floats_from_json(values: Sequence[float | None]) -> FloatArray:
    return np.array([np.nan if x is None else float(x) for x in values], dtype=np.float64)


def check_state(state: dict[str, Any], alias: str) -> None:
    """Raise a one-line ``ValueError`` unless ``state`` was written by ``alias``'s ``to_state``."""
    if not isinstance(state, dict):
        raise ValueError(f"{alias}: state must be a dict, got {type(state).__name__}")
    found = state.get("model")
    if found != alias:
        raise ValueError(f"{alias}: state is for model {found!r}, not {alias!r}")
