"""How a trace's bins are replayed tick by tick: the traffic every policy is simulated against.

Why it exists: a trace gives one rate per bin, the simulator runs in 15 s ticks. Replaying a
10-minute mean as a flat rate puts a cliff at every bin edge: an aggregate of thousands of clients
has no such cliffs, but a queue forms the instant one hits, so flat replay would charge every policy
waits the traffic never had (and the HPA, which reacts to the edge, would look worse than it is).

The choice (``--bin-shape``; the CLI and the benchmark use ``auto``, every policy of a run sees the
same ticks):

* ``linear`` (``auto`` for bins longer than a minute): the rate is continuous and piecewise linear
  between the bin centres, through centre values chosen so that each bin keeps exactly its request
  count (so the totals, and with them ``unserved_fraction`` and GPU-hours, stay comparable with flat
  replay). Plain interpolation between the bin means would move a quarter of every difference into
  the neighbouring bin and shave every peak; keeping the counts instead lets a peak bin run a little
  above its mean in the middle (a mean above its neighbours had a peak above itself somewhere
  inside) and makes a sharp step ring by about a fifth of its height in the bin either side. A bin
  next to a missing bin is flat on that side; an empty bin stays empty.
* ``flat`` (``auto`` for bins of a minute or less): each tick gets its bin's rate. A one-minute bin is
  the controller's own resolution (``loop.step``), and in the one-minute traces the jumps from
  minute to minute are measured counts, not an artefact; flat replay also keeps their results
  exactly comparable with earlier runs.

Why not noise (Poisson or gamma at a stated coefficient of variation): none of the real traces
states one. ServeGen's counts are *expected* counts summed over clients; at its ~1000 req/s the
Poisson noise over a 15 s tick is under 1%, below anything the replicas resolve, and any other CV
would be invented. Noise would also make a score depend on a seed. Interpolation is deterministic.
"""

from __future__ import annotations

import numpy as np

from models.types import FloatArray

BIN_SHAPES = ("auto", "flat", "linear")
FLAT_UP_TO_SECONDS = 60  # ``auto`` replays bins up to this long flat, longer ones linear


def resolve(shape: str, step_seconds: int) -> str:
    """``flat`` or ``linear``: what ``shape`` means for bins of ``step_seconds``."""
    if shape not in BIN_SHAPES:
        raise ValueError(f"unknown bin shape {shape!r} (choose from {', '.join(BIN_SHAPES)})")
    if shape == "auto":
        return "linear" if step_seconds > FLAT_UP_TO_SECONDS else "flat"
    return shape


def _centre_values(means: FloatArray, alpha: float, iterations: int = 60) -> FloatArray:
    """Rates at the bin centres whose linear interpolation gives every finite bin its mean.

    A bin's mean under the interpolation is ``(1 - 2 alpha) v + alpha (v_left + v_right)`` (a missing or
    absent neighbour counts as the bin's own value), ``alpha = 1/8`` for an even number of ticks. Solved by
    Jacobi iteration (the system is diagonally dominant: the error shrinks at least threefold per step),
    kept >= 0 at each step.
    """
    finite = np.isfinite(means)
    m = np.where(finite, means, 0.0)
    v = m.copy()
    has_left = np.concatenate(([False], finite[:-1])) & finite
    has_right = np.concatenate((finite[1:], [False])) & finite
    count = has_left.astype(np.float64) + has_right.astype(np.float64)
    for _ in range(iterations):
        left = np.where(has_left, np.concatenate(([0.0], v[:-1])), 0.0)
        right = np.where(has_right, np.concatenate((v[1:], [0.0])), 0.0)
        v = np.maximum((m - alpha * (left + right)) / (1.0 - alpha * count), 0.0)
    v[~finite] = np.nan
    return v


def spread(values: FloatArray, per_bin: int, shape: str) -> FloatArray:
    """Per-tick rates for bins of ``per_bin`` ticks (``shape`` is ``flat`` or ``linear``; NaN bins stay NaN).

    ``linear``: continuous and piecewise linear between the bin centres, through centre values chosen so
    that each bin keeps exactly its mean (``_centre_values``); a bin next to a missing one is flat on
    that side. Where keeping a count would need a negative rate (an empty bin next to a busy one) the
    rate is 0 and the bin's ticks are rescaled to its count (an empty bin stays empty).
    """
    v = np.asarray(values, dtype=np.float64)
    if shape == "flat" or per_bin <= 1 or v.size == 0:
        flat: FloatArray = np.repeat(v, per_bin)
        return flat
    if shape != "linear":
        raise ValueError(f"unknown bin shape {shape!r}")
    # each tick's centre as an offset from its bin's centre, in bins: (-0.5, 0.5)
    offset = (np.arange(per_bin, dtype=np.float64) + 0.5) / per_bin - 0.5
    weight = np.abs(offset)
    alpha = float(weight[offset < 0].sum()) / per_bin  # a neighbour's weight in the bin's mean
    centre = _centre_values(v, alpha)
    nan = np.array([np.nan])
    left = np.concatenate((nan, centre[:-1]))
    right = np.concatenate((centre[1:], nan))
    neighbour = np.where(offset[None, :] < 0, left[:, None], right[:, None])
    own = np.broadcast_to(centre[:, None], neighbour.shape)
    neighbour = np.where(np.isfinite(neighbour), neighbour, own)
    shaped = (1.0 - weight[None, :]) * own + weight[None, :] * neighbour
    mean = shaped.mean(axis=1)
    finite = np.isfinite(v)
    scale = np.divide(v, mean, out=np.zeros_like(v), where=finite & (mean > 0))
    out = shaped * scale[:, None]
    out[~finite] = np.nan
    result: FloatArray = out.ravel()
    return result
