"""The takeover benchmark (``benchmarks/takeover.py``): its verdicts and its command line (the scores of the days after
a takeover are the engine's: ``tests/test_simulate.py``)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from autoscaler.simulation.engine import PolicyResult
from benchmarks.takeover import Row, draws, markdown

DAY = 86_400


def _result(name: str, gpu_hours: float, attained: float) -> PolicyResult:
    empty = np.zeros(1, dtype=np.int64)
    return PolicyResult(name, gpu_hours, 0.0, 0.0, 0.0, 0, 1, empty, empty, slo_attainment=attained)


def test_the_table_says_which_hpa_target_dominates_and_whether_the_objective_was_met() -> None:
    hpa = (_result("reactive@0.5", 120.0, 0.999), _result("reactive@0.7", 90.0, 0.992))
    beaten = Row("a", _result("taken over", 95.0, 0.991), _result("new Deployment", 85.0, 0.993), hpa, (), 1.0)
    short = Row("b", _result("taken over", 100.0, 0.985), _result("new Deployment", 100.0, 0.995), hpa, (), 1.0)
    text = markdown([beaten, short], 7, (0, 1), 10.0)
    assert "| a | 95 | 99.100% | reactive@0.7 | yes | 85 | 99.300% | no | yes | reactive@0.7: 90 GPU-h, 99.200% |" \
        in text
    assert "| b | 100 | 98.500% | reactive@0.7 | **no** | 100 | 99.500% | no | yes |" in text
    assert ("taken over: dominated on 2 of 2, the objective met on 1 of 2; new Deployment: dominated on 0 of 2, the "
            "objective met on 2 of 2.") in text
    # where no HPA target meets the objective, it is not counted
    hopeless = tuple(replace(h, slo_attainment=0.9) for h in hpa)
    text = markdown([replace(short, hpa=hopeless)], 7, (0,), 1.0)
    assert "the objective met on 0 of 0" in text
    assert "n/a (no HPA target meets it)" in text


def test_draws_are_numbered_from_zero() -> None:
    assert draws("0,1,2") == (0, 1, 2)
    with pytest.raises(SystemExit, match="numbered from 0"):
        draws("-1")
    with pytest.raises(SystemExit, match="expected draw numbers"):
        draws("a")
