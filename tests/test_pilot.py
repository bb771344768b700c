"""The sequential pilot's decision (issue 44, item 3): stop only a group beaten with confidence at the budget."""

from __future__ import annotations

import pandas as pd
import pytest

from verl_isocompute.scaling.errors import ScalingError
from verl_isocompute.scaling.forecast_suite import CLEAR_WINNER, LATE_CROSSING, curve_sweep, truncated
from verl_isocompute.scaling.pilot import check_fractions, stops_at
from verl_isocompute.scaling.saturating import SaturatingCurve

BUDGET = 4096.0


def _sweep(curves: dict[int, SaturatingCurve], seed: int) -> pd.DataFrame:
    return curve_sweep(curves, seed, BUDGET)


def test_a_clear_loser_is_stopped_by_the_second_check():
    curves = CLEAR_WINNER
    stopped = []
    for seed in range(10):
        sweep = _sweep(curves, seed)
        stopped.append({s.n for frac in (0.2, 0.4) for s in stops_at(truncated(sweep, frac * BUDGET), BUDGET, "train/reward")})
    assert all(8 not in s for s in stopped)  # the winner never
    assert sum({2, 4} <= s for s in stopped) >= 8  # both losers, nearly always


def test_a_late_crossing_never_stops_the_arm_that_wins_at_the_budget():
    """n = 8 is behind at every check (it starts later) and wins at the budget: it must never be stopped."""
    curves = LATE_CROSSING
    assert curves[8](BUDGET) > curves[2](BUDGET) and curves[8](0.2 * BUDGET) < curves[2](0.2 * BUDGET) - 0.1
    for seed in range(10):
        sweep = _sweep(curves, seed)
        for frac in (0.2, 0.4, 0.6):
            assert 8 not in {s.n for s in stops_at(truncated(sweep, frac * BUDGET), BUDGET, "train/reward")}


def test_level_tied_arms_are_not_stopped():
    same = SaturatingCurve(0.2, 0.6, 800.0, 1.2)
    for seed in range(10):
        assert stops_at(truncated(_sweep({2: same, 8: same}, seed), 0.4 * BUDGET), BUDGET, "train/reward") == []


@pytest.mark.parametrize("checks", [[], [0.4, 0.2], [0.2, 1.0], [0.0, 0.5]])
def test_bad_checks_are_refused(checks):
    with pytest.raises(ScalingError, match="early_stop.checks"):
        check_fractions(checks)
