"""The sequential pilot's decision (issue 44, item 3): which groups of a running sweep cannot win at the budget.

Why not "stop the arm that is behind now": the central finding of arXiv 2603.12151 is that a larger n loses at
small C and wins at large C, so the arm behind at a fifth of the budget is often the one to keep. A group (n,
b_problem) is stopped only when its whole forecast interval for the target at the budget
(:func:`~verl_isocompute.scaling.forecast.forecast`, a group's interval covers the mean of its runs' targets) lies
below the whole interval of the group forecast best. A group that cannot be forecast (too few points, no rise
yet) is never stopped: nothing says it loses. Several checks are several chances to stop the wrong arm, so
each check uses the Bonferroni level 1 - (1 - level) / len(checks) (:func:`check_level`): the chance that any
check stops the group that would have won stays below 1 - level as far as the intervals are calibrated (a
stop needs the winner above its interval or the best below its own, each at most (1 - level) / 2 per check, split
over the checks).
On 100 held-out late-crossing replays it never stops the winner (``python benchmarks/bench_forecast.py --replay``).
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from verl_isocompute.scaling.errors import ScalingError
from verl_isocompute.scaling.forecast import Forecasts, forecast


# The metric a check forecasts unless the plan names one: logged at every step (validation, a few times a run,
# gives too few points for an early forecast).
DEFAULT_METRIC = "train/reward"


@dataclass(frozen=True)
class StopDecision:
    n: int
    b_problem: int
    reason: str


def check_fractions(checks: list[float]) -> list[float]:
    """The plan's ``early_stop.checks``: fractions of the budget in (0, 1), increasing."""
    if not checks or any(not 0.0 < c < 1.0 for c in checks) or sorted(set(checks)) != list(checks):
        raise ScalingError(f"early_stop.checks must be increasing fractions of the budget in (0, 1), e.g. [0.2, 0.4, 0.6]; got {checks}")
    return list(checks)


def check_level(level: float, checks: list[float]) -> float:
    """The interval level of each check: ``level`` shared over the checks (Bonferroni), within the calibrated range."""
    from verl_isocompute.scaling.forecast import LEVELS

    each = 1.0 - (1.0 - level) / len(checks)
    if not LEVELS[0] <= each <= LEVELS[1]:
        raise ScalingError(f"early_stop.level {level} over {len(checks)} checks asks {each:.3f} of each check, outside "
                           f"the forecast's calibrated [{LEVELS[0]}, {LEVELS[1]}]: lower the level or use fewer checks")
    return each


def decide(forecasts: Forecasts) -> list[StopDecision]:
    """The groups whose interval lies wholly below the best group's (best = highest predicted)."""
    made = [g for g in forecasts.groups if g.why is None and g.low is not None]
    if len(made) < 2:
        return []
    best = max(made, key=lambda g: g.predicted)
    return [
        StopDecision(g.n, g.b_problem, f"n = {g.n}: {forecasts.level:.0%} interval [{g.low:.3f}, {g.high:.3f}] of "
                     f"{forecasts.metric} at C = {forecasts.at:g} lies below n = {best.n}'s [{best.low:.3f}, {best.high:.3f}]")
        for g in made if g is not best and g.high < best.low
    ]


def stops_at(points: pd.DataFrame, budget: float, metric: str, level: float = 0.9) -> list[StopDecision]:
    """One check: forecast every group from ``points`` (the sweep's logged part) at ``budget`` and decide.

    ``level`` is this check's own (:func:`check_level` of the plan's level and checks)."""
    return decide(forecast(points, budget, metric, level))
