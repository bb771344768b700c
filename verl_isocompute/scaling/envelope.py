"""Step 4 of the fit (arXiv 2603.12151, section 4): the upper envelope of the per-group curves on a log grid
of C, n*(C) = argmax_n R_n(C), and log2 n*(C) smoothed by a centred running average.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from verl_isocompute.scaling.fit_defaults import DEFAULT_WINDOW
from verl_isocompute.scaling.groups import group_b
from verl_isocompute.scaling.saturating import saturating_reward

GRID_PER_DECADE = 20


def log_grid(c_lo: float, c_hi: float, per_decade: int) -> np.ndarray:
    """A log grid over [c_lo, c_hi] with ``per_decade`` points per decade of C."""
    if c_hi <= c_lo:
        return np.array([c_lo])
    num = max(2, int(math.ceil(math.log10(c_hi / c_lo) * per_decade)) + 1)
    return np.logspace(math.log10(c_lo), math.log10(c_hi), num)


def grid_top(groups) -> float:
    """The largest C of the n*(C) grid: the last C every group's points reach when the runs were budgeted alike,
    else the last C any reaches.

    A training metric's point sits at the compute before its step (:mod:`verl_isocompute.scaling.points`), so runs
    of one budget end one step apart: n = 8 at 960 of 1,024 rollouts, n = 2 at 1,008 (b_problem 8). Past a group's
    last point its n was not run, not beaten; giving those C to the n whose points go on wrote n = 2 at the top and
    capped the calibration's truly rising n* at 7.6 (issue 43). The runs count as budgeted alike when every group's
    last point plus its own step (the spacing of its points) reaches the last point of all. Runs of unequal budgets
    (the same steps for every n, say) keep the whole range, where the fit says which changes of n* are only where
    an n's runs end (:func:`edge_switches`).
    """
    ends = {g.key: np.unique(g.points["C"].to_numpy(dtype=float)) for g in groups}  # sorted
    last = max(c[-1] for c in ends.values())
    step = {k: float(np.median(np.diff(c))) if len(c) > 1 else 0.0 for k, c in ends.items()}
    alike = all(c[-1] + step[k] * (1 + 1e-9) >= last for k, c in ends.items())
    return min(c[-1] for c in ends.values()) if alike else last


def envelope(
    params: np.ndarray, cover: np.ndarray, log2_n: np.ndarray, grid: np.ndarray, window: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Step 4 for a batch of fits at once: the upper envelope of the per-group curves and n*(C), smoothed.

    ``params``: (B, G, 4) rows (R0, A, ln C_mid, beta) of G group curves in each of B fits (NaN: the group
    is not in that fit); ``cover``: (B, G, 2) the C range each group's runs cover: a curve competes only
    inside it (below it the runs were not evaluated, past it the curve would be extrapolated);
    ``log2_n``: (G,) each group's log2 n; ``grid``: (B, K) values of C (NaN: padding). Returns the best
    fitted reward (B, K), the index of the winning group (B, K; -1 where no curve covers C) and log2 n*
    smoothed by a centred running average of ``window`` points over the covered grid points (NaN
    elsewhere). The fit calls it with B = 1, its bootstrap with one row per resample.
    """
    values = curve_values(params, cover, grid)
    winner = values.argmax(axis=1)
    best = np.take_along_axis(values, winner[:, None, :], axis=1)[:, 0, :]
    covered = np.isfinite(best)
    winner = np.where(covered, winner, -1)
    smoothed = running_mean(np.where(covered, log2_n[np.maximum(winner, 0)], 0.0), covered, window)
    return best, winner, smoothed


def curve_values(params: np.ndarray, cover: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """(B, G, K): every group's fitted reward at every C of each fit's grid, -inf where the group does not compete
    (outside its covered range, or not in that fit); arguments as :func:`envelope` takes them."""
    c = grid[:, None, :]
    inside = (c >= cover[:, :, :1] * (1 - 1e-9)) & (c <= cover[:, :, 1:] * (1 + 1e-9)) & ~np.isnan(params[:, :, :1])
    with np.errstate(invalid="ignore"):
        values = saturating_reward(np.log(c), *(params[:, :, i, None] for i in range(4)))
    return np.where(inside, values, -np.inf)


def running_mean(values: np.ndarray, valid: np.ndarray, window: int) -> np.ndarray:
    """Per row, a centred running mean over the valid entries only (as pandas' ``rolling(window,
    center=True, min_periods=1)`` of the row with the invalid entries removed); NaN at invalid entries.

    Centred as pandas centres: position i averages positions i - window // 2 ... i + (window - 1) // 2.
    """
    rows, width = values.shape
    order = np.argsort(~valid, axis=1, kind="stable")  # valid entries first, in their order
    count = valid.sum(axis=1, keepdims=True)
    packed = np.take_along_axis(values, order, axis=1)
    position = np.arange(width)[None, :]
    packed = np.where(position < count, packed, 0.0)
    cumulative = np.concatenate([np.zeros((rows, 1)), np.cumsum(packed, axis=1)], axis=1)
    lo = np.clip(position - window // 2, 0, None).repeat(rows, axis=0)
    hi = np.minimum(position + (window - 1) // 2 + 1, count)
    total = np.take_along_axis(cumulative, hi, axis=1) - np.take_along_axis(cumulative, np.minimum(lo, hi), axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = total / (hi - lo)
    out = np.full((rows, width), np.nan)
    np.put_along_axis(out, order, np.where(position < count, mean, np.nan), axis=1)
    return out


def envelope_table(groups, curves, grid, keys, window) -> pd.DataFrame:
    """:func:`envelope` of the full-data fit, as the table ``frontier.csv`` holds (uncovered C left out)."""
    params, cover, log2_n = stacked(groups, curves)
    best, winner, smoothed = envelope(params[None], cover[None], log2_n, grid[None], window)
    keep = winner[0] >= 0
    grid, best, winner, smoothed = grid[keep], best[0, keep], winner[0, keep], smoothed[0, keep]
    n_star = np.array([groups[i].key[0] for i in winner], dtype=float)
    table = pd.DataFrame({"C": grid, "reward": best, "n_star": n_star.astype(int)})
    if keys == ("n", "b_problem"):
        table["b_problem_star"] = [groups[i].key[1] for i in winner]
    else:
        table["b_problem_star"] = [group_b(groups[i]) for i in winner]
    table["log2_n_star"] = np.log2(n_star)
    table["log2_n_star_smoothed"] = smoothed
    table["log2_n_star_fit"] = np.nan
    table["residual"] = np.nan
    return table


def edge_switches(groups, curves, grid) -> tuple[list[float], int]:
    """Where n*(C) changes between neighbouring grid values of C, whether one curve overtook another or a curve's
    runs began or ended there. Returns the C values of the latter kind and the number of the former.

    A curve competes only over the C its runs cover (:func:`envelope`), and a larger n spends more rollouts on its
    first step: below that C only the smaller n were run, so n* there is a smaller n whatever the curves do. A
    change of n* is a crossing only when both n's runs cover the C on both sides of it.
    """
    params, cover, log2_n = stacked(groups, curves)
    winner = envelope(params[None], cover[None], log2_n, grid[None], window=1)[1][0]
    inside = (grid[None, :] >= cover[:, :1] * (1 - 1e-9)) & (grid[None, :] <= cover[:, 1:] * (1 + 1e-9))
    edges, crossings = [], 0
    for i in np.flatnonzero((winner[1:] >= 0) & (winner[:-1] >= 0)) + 1:
        before, after = winner[i - 1], winner[i]
        if log2_n[before] == log2_n[after]:
            continue
        if inside[[before, after]][:, [i - 1, i]].all():
            crossings += 1
        else:
            edges.append(float(grid[i]))
    return edges, crossings


def stacked(groups, curves) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The full-data fit as :func:`envelope` takes it: (G, 4) curve rows, (G, 2) covered C ranges, (G,) log2 n."""
    params = np.array([[c.R0, c.A, math.log(c.C_mid), c.beta] for c in (curves[g.key] for g in groups)])
    cover = np.array([(g.points["C"].min(), g.points["C"].max()) for g in groups], dtype=float)
    return params, cover, np.log2([float(g.key[0]) for g in groups])


def empty_grid() -> pd.DataFrame:
    return pd.DataFrame(columns=["C", "reward", "n_star", "b_problem_star", "log2_n_star", "log2_n_star_smoothed"])
