"""The sequential pilot's decision (issue 44, item 3): stop only a group beaten with confidence at the budget."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from verl_isocompute.scaling.errors import ScalingError
from verl_isocompute.scaling.forecast_suite import truncated
from verl_isocompute.scaling.pilot import check_fractions, stops_at
from verl_isocompute.scaling.saturating import SaturatingCurve

BUDGET = 4096.0


def _sweep(curves: dict[int, SaturatingCurve], seed: int, runs: int = 3) -> pd.DataFrame:
    """Training reward of runs that follow ``curves`` (binomial noise per step), at the compute before each step."""
    rng = np.random.default_rng(seed)
    frames = []
    for n, curve in curves.items():
        per_step = n * 8
        c = np.arange(1, int(BUDGET // per_step)) * float(per_step)
        for replica in range(runs):
            reward = rng.binomial(per_step, np.clip(curve(c), 0, 1)) / per_step
            frames.append(pd.DataFrame({"run": f"n{n}-s{replica}", "n": n, "b_problem": 8, "C": c, "reward": reward}))
    return pd.concat(frames, ignore_index=True)


def test_a_clear_loser_is_stopped_by_the_second_check():
    curves = {2: SaturatingCurve(0.2, 0.35, 300.0, 1.5), 8: SaturatingCurve(0.2, 0.85, 600.0, 1.5)}
    stopped = []
    for seed in range(10):
        sweep = _sweep(curves, seed)
        stopped.append({s.n for frac in (0.2, 0.4) for s in stops_at(truncated(sweep, frac * BUDGET), BUDGET, "train/reward")})
    assert sum(s == {2} for s in stopped) >= 8  # n = 2 stopped, n = 8 never


def test_a_late_crossing_never_stops_the_arm_that_wins_at_the_budget():
    """n = 8 is behind at every check (it starts later) and wins at the budget: it must never be stopped."""
    curves = {2: SaturatingCurve(0.2, 0.5, 150.0, 1.5), 8: SaturatingCurve(0.2, 0.75, 1500.0, 1.5)}
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
