"""The sequential pilot's decision (issue 44, item 3): which groups of a running sweep cannot win at the budget.

Why not "stop the arm that is behind now": the central finding of arXiv 2603.12151 is that a larger n loses at
small C and wins at large C, so the arm behind at a fifth of the budget is often the one to keep. A group (n,
b_problem) is stopped only when its whole forecast interval for the target at the budget
(:func:`~verl_isocompute.scaling.forecast.forecast`, a group's interval covers the mean of its runs' targets) lies
below the whole interval of the group forecast best. A group that cannot be forecast (too few points, no rise
yet) is never stopped: nothing says it loses. Several checks are several chances to stop the wrong arm, so
each check's intervals are wider than the plan's level (:func:`check_level`): a wrong stop needs the winner's
truth above its interval or the best arm's below its own, and the per-check level is set so that, over all the
checks, that happens at most 1 - level of the time. Checks within the calibrated schedule (every 5 % of the
budget from 20 % to 60 %, the default) use the level measured on the tuning suite for the whole schedule;
others, Bonferroni's 1 - (1 - level) / len(checks).
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
# The calibrated check schedule and the plan's default checks: every 5 % of the budget from 20 % to 60 %. The
# chance that some check's interval misses is measured over the whole schedule (:func:`check_rule`), so any part
# of it is covered too; before a fifth of the budget the leading arm has too few points to beat anything, and
# past 60 % a stop saves little.
SCHEDULE = (0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6)


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


def check_rule(level: float, checks: list[float]) -> tuple[float, str]:
    """The interval level of each check for a plan's ``level`` over its ``checks``, and how it was set.

    Two rules each keep the chance that some check stops the arm that wins at the budget below 1 - level; the
    lower per-check level of the two applies (which one is fixed by the checks alone, before any data):

    - Bonferroni, 1 - (1 - level) / len(checks), for any checks, as far as each check's intervals hold their
      level;
    - for checks within the calibrated schedule (:data:`SCHEDULE`), the lowest per-check level at which the
      tuning suite's groups missed their truth at some check of the whole schedule, above or below, at most
      1 - level of the time (``schedule`` in the calibration file,
      :func:`~verl_isocompute.scaling.forecast_suite.schedule_table`). Successive checks see mostly the same
      runs, so their misses come together and the measured level is below Bonferroni's for many checks (nine
      checks at level 0.9: 0.989 by Bonferroni, outside the calibrated range).
    """
    from verl_isocompute.scaling.forecast import LEVELS, load_calibration

    plural = "s" if len(checks) > 1 else ""
    rules = [(1.0 - (1.0 - level) / len(checks), f"{level:.0%} over {len(checks)} check{plural}, Bonferroni")]
    schedule = load_calibration().get("schedule")
    if schedule and all(any(abs(c - s) < 1e-9 for s in schedule["checks"]) for c in checks):
        held = [p for p, f in zip(schedule["per_check"], schedule["family"]) if f >= level]
        if held:
            rules.append((min(held), f"{level:.0%} over the calibrated schedule's checks, measured"))
    each, how = min(rules)
    if not LEVELS[0] <= each <= LEVELS[1]:
        most = f" and hold a level up to {max(schedule['family']):.2f}" if schedule else ""
        raise ScalingError(f"early_stop.level {level} over {len(checks)} checks asks {each:.3f} of each check, outside "
                           f"the forecast's calibrated [{LEVELS[0]}, {LEVELS[1]}]: lower the level or use fewer checks "
                           f"(the default checks, every 5 % from 20 % to 60 % of the budget, are calibrated together"
                           f"{most})")
    return each, how


def check_level(level: float, checks: list[float]) -> float:
    """The interval level of each check (:func:`check_rule`)."""
    return check_rule(level, checks)[0]


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
