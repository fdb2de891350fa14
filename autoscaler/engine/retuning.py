"""When a Deployment's operating point is chosen again: the self-tuning schedule the controller and the simulator share.

Why it exists: a self-tuning replay (``autoscaler.simulation.tuning``) is the costliest thing after fitting, and when
it runs decides which point runs when. The simulator used to re-tune after every refit while nothing could be chosen
yet, about ten replays on a Deployment's first day (the young history is refit each time it doubles), and once a
day after that; the controller retried hourly and re-tuned after any refit once a point was chosen. So the
simulator replayed a schedule the controller does not run, and spent most of a fleet replay on it.

The rule (pure: times are passed in, seconds):

* nothing chosen yet (too little history to replay, or no replay yet): due ``TUNE_RETRY_SECONDS`` (an hour) after
  the last attempt, the first attempt at once;
* a point chosen: due ``TUNE_EVERY_SECONDS`` (a day) after the last replay, or as soon as the model was refit since
  (the forecast the point was chosen for changed).

A changed objective or sizing is re-tuned at once by the controller (its own rule: the inputs are its memory).
"""

from __future__ import annotations

TUNE_EVERY_SECONDS = 86_400
TUNE_RETRY_SECONDS = 3_600


def tuning_due(now: float, tried_at: float, chosen: bool, refit_at: float) -> bool:
    """Whether a replay is due at ``now``: ``tried_at`` is when the last one ran (``-inf``: never), ``chosen`` whether
    a point was chosen by it, ``refit_at`` when the Deployment's model was last fitted."""
    if not chosen:
        return now - tried_at >= TUNE_RETRY_SECONDS
    return now - tried_at >= TUNE_EVERY_SECONDS or refit_at > tried_at
