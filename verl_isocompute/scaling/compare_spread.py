"""The comparison of :mod:`verl_isocompute.scaling.compare` on every bootstrap resample of the runs: 95%
intervals of each fixed n's reward and multiplier, and the share of resamples in which it is the compute-optimal n.

The fit's bootstrap over seeds refits each n's curve on resamples of that n's own runs
(:func:`~verl_isocompute.scaling.bootstrap.bootstrap_curves`); ``curve.json`` keeps those curves, so the intervals
can be redone at any budget (``isocompute allocate --compare``). They carry the run-to-run variation the seeds
show, which a comparison from the full-data curves alone cannot. Pure: no verl, no torch.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

import numpy as np
from scipy.stats import norm
from scipy.stats import t as student_t

from verl_isocompute.scaling.envelope import envelope
from verl_isocompute.scaling.resolved import t_half_width
from verl_isocompute.scaling.reward_curves import EDGE, RewardCurve, compute_to_reach
from verl_isocompute.scaling.saturating import saturating_reward

LEVEL = 0.95  # the level of every interval of the comparison
# the interval columns of a comparison made without a bootstrap
NO_SPREAD = {"reward_low": np.nan, "reward_high": np.nan, "multiplier_low": np.nan, "multiplier_high": np.nan,
             "best_share": np.nan, "resamples": 0}


def resampled(curves: Sequence[RewardCurve], budgets: np.ndarray):
    """The comparison on every bootstrap resample the curves share: a function (budget index, curve index) -> the
    interval columns of :func:`~verl_isocompute.scaling.compare.compare_at`, or None when the curves carry no common
    bootstrap.

    On resample b, R*_b(C) is the envelope of the resampled curves (each inside its full-data range, as
    :func:`~verl_isocompute.scaling.compare.optimum`), n's reward is R_n,b(C), and its multiplier is 1 where it gives R*_b, else C_n,b(R*_b) / C,
    inf when that lies past n's range and C_min / C (an upper bound) when before it. Resamples where any curve
    could not be refitted are left out."""
    draws = [rc.draws for rc in curves]
    if any(d is None for d in draws) or len({len(d) for d in draws}) != 1 or not len(draws[0]):
        return None
    params = np.stack(draws, axis=1)  # (resamples, curves, 4)
    params = params[~np.isnan(params).any(axis=(1, 2))]
    if not len(params):
        return None
    m = len(params)
    cover = np.broadcast_to(np.array([rc.c_range for rc in curves], dtype=float), (m, len(curves), 2))
    log2_n = np.log2([float(rc.n) for rc in curves])
    best, winner, _ = envelope(params, cover, log2_n, np.broadcast_to(budgets, (m, len(budgets))), window=1)
    seeds = min(rc.runs for rc in curves)  # a multiplier depends on every curve through R*: the fewest seeds

    def columns(i: int, j: int) -> dict[str, Any]:
        c, rc = budgets[i], curves[j]
        lo, hi = rc.c_range
        r_star, wins = best[:, i], winner[:, i] == j
        out = dict(NO_SPREAD, best_share=float(wins.mean()), resamples=m)
        p = params[:, j]
        if rc.covers(np.array([c]))[0]:
            reward = saturating_reward(np.log(c), p[:, 0], p[:, 1], p[:, 2], p[:, 3])
            out["reward_low"], out["reward_high"] = t_interval(float(rc.curve(c)), reward, rc.runs)
        if (winner[:, i] >= 0).all():
            curve = SimpleNamespace(R0=p[:, 0], A=p[:, 1], C_mid=np.exp(p[:, 2]), beta=p[:, 3])  # one per resample
            with np.errstate(invalid="ignore"):
                needed = compute_to_reach(curve, r_star)
            needed = np.where(needed > hi * (1 + EDGE), np.inf, np.maximum(needed, lo))
            multiplier = np.where(wins, 1.0, needed / c)
            out["multiplier_low"], out["multiplier_high"] = expanded_percentiles(multiplier, seeds)
        return out

    return columns


def t_interval(estimate: float, draws: np.ndarray, seeds: int, level: float = LEVEL) -> tuple[float, float]:
    """A ``level`` interval around ``estimate`` from its bootstrap draws over ``seeds`` runs: estimate +- t(seeds - 1)
    x SE, SE the draws' standard deviation x sqrt(seeds / (seeds - 1)); NaN with fewer than 2 seeds.

    Why not the draws' percentiles: with 3-10 seeds they are too narrow (79.5 % of nominal 95 % intervals held the
    truth on known-truth sweeps, issue 43). A resample of k seeds has the variance of a mean over k with divisor k,
    not k - 1 (the sqrt corrects it), and the SE itself is estimated from k seeds, so the quantile is Student's t on
    k - 1 degrees of freedom, as for a mean over seeds. The interval is symmetric and holds its estimate.
    """
    if seeds < 2 or not np.isfinite(estimate):
        return float("nan"), float("nan")
    draws = np.asarray(draws, dtype=float)
    half = float(t_half_width(draws[np.isfinite(draws)], seeds, level))
    return estimate - half, estimate + half


def expanded_percentiles(values: np.ndarray, seeds: int, level: float = LEVEL) -> tuple[float, float]:
    """A ``level`` interval from bootstrap ``values`` over ``seeds`` runs: their percentiles at a level expanded for
    few seeds (values may be inf; without interpolation, so an end is always a resampled value).

    The multiplier cannot take :func:`t_interval`: it is bounded below and often infinite ("past fit"), which no SE
    describes. Plain 2.5 / 97.5 percentiles share the t interval's flaw, though: with k seeds a resample has the
    spread of a mean with divisor k, and the tails are those of a normal, not of Student's t on k - 1 df; on the
    calibration suite they held 90 % with 3 seeds (issue 43). The expanded percentile interval (Hesterberg, "What
    Teachers Should Know About the Bootstrap", The American Statistician 69(4), 2015) corrects both and keeps the
    percentiles' invariance to any monotone transform: take the percentiles at the normal tail probability
    Phi(-z'), z' = sqrt(k / (k - 1)) t(k - 1) at the nominal level. With 5 seeds that is the 0.1 / 99.9
    percentiles (z' = 3.10), with 10 seeds 0.86 / 99.14 (z' = 2.38); with few resamples it is their min and max.
    """
    if seeds < 2:
        return float("nan"), float("nan")
    z = np.sqrt(seeds / (seeds - 1)) * float(student_t.ppf(0.5 + level / 2, seeds - 1))
    tail = float(norm.sf(z))
    low, high = np.quantile(values, [tail, 1 - tail], method="inverted_cdf")
    return float(low), float(high)


def interval_text(low: float, high: float, fmt: str, suffix: str = "", floor: float | None = None) -> str:
    """" [low, high]" of a bootstrap interval; an infinite end reads "past fit" (not reached within the range), and
    an end at ``floor`` (a multiplier's C_min / C: reached where n's runs start, so at most that) reads "<= floor"
    (issue 43: at C = 16 the n = 8 row read "<= 4x [4.00x, 9.83x]", a bound printed as a value)."""
    if not np.isfinite(low) and not np.isfinite(high):
        return " [past fit]" if low == high == np.inf else ""

    def end(value: float) -> str:
        if value == np.inf:
            return "past fit"
        at_floor = floor is not None and value <= floor * (1 + EDGE)
        return f"{'<= ' if at_floor else ''}{value:{fmt}}{suffix}"

    return f" [{end(low)}, {end(high)}]"
