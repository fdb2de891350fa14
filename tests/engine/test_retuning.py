"""The self-tuning schedule both drivers follow: hourly until a point is chosen, then daily and after each refit."""

from __future__ import annotations

import math

from autoscaler.engine.retuning import TUNE_EVERY_SECONDS, TUNE_RETRY_SECONDS, tuning_due

NEVER = -math.inf


def test_the_first_attempt_is_at_once_and_an_attempt_that_chose_nothing_is_retried_an_hour_later() -> None:
    assert tuning_due(1_000.0, NEVER, chosen=False, refit_at=0.0)
    assert not tuning_due(1_000.0 + TUNE_RETRY_SECONDS - 1, 1_000.0, chosen=False, refit_at=2_000.0)
    assert tuning_due(1_000.0 + TUNE_RETRY_SECONDS, 1_000.0, chosen=False, refit_at=0.0)


def test_a_chosen_point_is_chosen_again_daily_or_after_a_refit_not_hourly() -> None:
    tried = 10_000.0
    assert not tuning_due(tried + TUNE_RETRY_SECONDS, tried, chosen=True, refit_at=tried - 1)
    assert tuning_due(tried + 60, tried, chosen=True, refit_at=tried + 30)  # the forecast it was chosen for changed
    assert tuning_due(tried + TUNE_EVERY_SECONDS, tried, chosen=True, refit_at=tried - 1)
