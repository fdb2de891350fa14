"""The demand unit a Deployment is sized on: requests/s (the default) or weighted tokens/s.

Why it exists: an LLM replica's capacity is bound by the tokens it processes, not by the number of requests;
a workload whose prompts grow needs more replicas at the same request rate. A Deployment (annotation
``demand-unit: tokens``) or a replay (``--demand tokens``) can therefore be forecast and planned on

    tokens/s = input (prompt) tokens/s x w_in + output (generation) tokens/s x w_out

(weights 1 and 1 by default; a prefill-heavy server might weigh prompt tokens less than generated ones). With
tokens, ``capacity-per-replica`` is tokens/s. Pure arithmetic, shared by the CLI replays and the controller, so
both size on exactly the same number.

Missing data stays missing: a bin where a weighted series has no value has no token demand (``NaN``); a series
with weight 0 is not read at all (its gaps do not matter).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum

import numpy as np
import numpy.typing as npt


class DemandUnit(StrEnum):
    """What a Deployment's demand and ``capacity-per-replica`` are counted in."""

    REQUESTS = "requests"
    TOKENS = "tokens"


DEMAND_UNITS = tuple(u.value for u in DemandUnit)


def unit_label(unit: DemandUnit) -> str:
    """``req/s`` or ``tokens/s``: how a rate in ``unit`` is printed."""
    return "req/s" if unit is DemandUnit.REQUESTS else "tokens/s"


@dataclass(frozen=True)
class TokenWeights:
    """Weights of prompt (input) and generation (output) tokens in the token demand; each finite, >= 0, not both 0."""

    input: float = 1.0
    output: float = 1.0

    def __post_init__(self) -> None:
        for name, w in (("input", self.input), ("output", self.output)):
            if not (isinstance(w, int | float) and not isinstance(w, bool) and math.isfinite(w) and w >= 0):
                raise ValueError(f"token weight {name} must be a finite number >= 0, got {w!r}")
        if self.input == 0 and self.output == 0:
            raise ValueError("token weights: input and output cannot both be 0")

    @classmethod
    def parse(cls, text: str) -> TokenWeights:
        """``'1,0.5'`` (input, output) -> weights; ``ValueError`` with one line saying what is wrong."""
        parts = [p.strip() for p in str(text).split(",")]
        if len(parts) != 2 or not all(parts):
            raise ValueError(f"expected IN,OUT (two numbers, e.g. 1,1), got {text!r}")
        try:
            w_in, w_out = float(parts[0]), float(parts[1])
        except ValueError:
            raise ValueError(f"expected IN,OUT (two numbers, e.g. 1,1), got {text!r}") from None
        return cls(w_in, w_out)

    def describe(self) -> str:
        return f"input x {self.input:g} + output x {self.output:g}"


def token_demand(
    input_rate: npt.ArrayLike, output_rate: npt.ArrayLike, weights: TokenWeights
) -> npt.NDArray[np.float64]:
    """Weighted tokens/s per bin: ``input x w_in + output x w_out`` (``NaN`` where a weighted series is missing)."""
    a = np.asarray(input_rate, dtype=np.float64)
    b = np.asarray(output_rate, dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(f"input and output token series differ in shape: {a.shape} vs {b.shape}")
    out = np.zeros(a.shape, dtype=np.float64)
    if weights.input:
        out = out + a * weights.input
    if weights.output:
        out = out + b * weights.output
    return out
