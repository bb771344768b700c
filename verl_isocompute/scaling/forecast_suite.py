"""Known-truth sweeps for the forecast's calibration: training reward of runs that follow saturating curves.

Each sweep has one base reward R0 (every run starts from the same model) and two groups, n = 2 and n = 8 at
b_problem = 8, trained to a budget of ``budget`` rollouts. A group's curve is ScaleRL's saturating form
(arXiv 2510.13786), R(C) = R0 + (A - R0) / (1 + (C_mid / C)^beta), drawn at random: A - R0 in [0.1, 0.4],
C_mid from 20x below to 1.6x above the budget, beta in [0.7, 2.5] (curves still rising at the budget, ones
nearly done, and ones that barely started). Each run perturbs its group's A and C_mid (run-to-run noise);
each step logs the share of its n x b_problem rollouts that were correct (binomial sampling noise), placed
at the compute before the step, where the fit places a training metric. The truth is what the run logs, so
the forecast must cover its sampling noise too.

Seeds below :data:`HELD_OUT` tuned the forecast's shape prior; the backtest reports seeds from it on.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from verl_isocompute.scaling.pilot import SCHEDULE
from verl_isocompute.scaling.saturating import SaturatingCurve, saturating_reward

HELD_OUT = 10_000
B_PROBLEM = 8


def suite_sweep(seed: int, budget: float = 4096.0, runs_per_n: int = 3, n_values: tuple[int, ...] = (2, 8)) -> pd.DataFrame:
    """One known-truth sweep's training-reward points: run, n, b_problem, step, C, reward (to the budget)."""
    rng = np.random.default_rng(seed)
    r0 = rng.uniform(0.15, 0.45)
    frames = []
    for n in n_values:
        gain = rng.uniform(0.1, 0.4)
        log_mid = math.log(budget) + rng.uniform(math.log(1 / 20), math.log(1.6))
        beta = rng.uniform(0.7, 2.5)
        per_step = n * B_PROBLEM
        steps = np.arange(1, int(budget // per_step) + 1)
        c_before = (steps - 1) * float(per_step)
        for replica in range(runs_per_n):
            a = min(0.97, r0 + gain + rng.normal(0.0, 0.02))
            mid = log_mid + rng.normal(0.0, 0.15)
            p = np.clip(saturating_reward(np.log(np.maximum(c_before, 1.0)), r0, a, mid, beta), 0.0, 1.0)
            p[c_before == 0] = r0
            reward = rng.binomial(per_step, p) / per_step
            frames.append(pd.DataFrame({"run": f"n{n}-s{replica}", "n": n, "b_problem": B_PROBLEM, "step": steps,
                                        "C": c_before, "reward": reward}))
    out = pd.concat(frames, ignore_index=True)
    return out[out["C"] > 0].reset_index(drop=True)


FRACTIONS = (0.1, 0.2, 0.3, 0.5)  # of the budget's compute logged when the backtest forecasts
H_EDGES = [0.0, 0.9, 1.4, 2.0]  # horizon bins ln(C / logged C): ~50 %, 30 %, 20 %, <= 13 % logged
T_EDGES = [0.0, 3.0, 6.0]  # bins of the group's slope over its standard error: barely, clearly, steeply rising
MIN_CELL = 100  # fewer tuning errors than this in a cell: it takes the errors of every t bin up to its own
PERCENT = [1, 2, 2.5, 5, 7.5, 10, 15, 20, 25, 30, 40, 50, 60, 70, 75, 80, 85, 90, 92.5, 95, 97.5, 98, 99]


def truncated(sweep: pd.DataFrame, upto: float) -> pd.DataFrame:
    """The part of a sweep logged by compute ``upto`` (a running pilot's view)."""
    return sweep[sweep["C"] <= upto].reset_index(drop=True)


def standardized_errors(seeds: range, budget: float = 4096.0) -> pd.DataFrame:
    """(kind, h, t, z) for every forecast of the sweeps ``seeds`` at every fraction, z = (truth - predicted) / sd.

    The truth of a run is its logged target; of a group, the mean of its runs' (split-conformal calibration:
    these seeds' errors set the interval, other seeds' test it).
    """
    from verl_isocompute.scaling.forecast import forecast, target_value

    rows = []
    for seed in seeds:
        sweep = suite_sweep(seed, budget)
        truth = {run: target_value(pts, budget, False) for run, pts in sweep.groupby("run")}
        for fraction in FRACTIONS:
            out = forecast(truncated(sweep, fraction * budget), budget, "train/reward", calibration={})
            for kind, items in (("run", out.runs), ("group", out.groups)):
                for f in items:
                    if f.predicted is None or not f.sd:
                        continue
                    value = truth[f.run] if kind == "run" else float(np.mean([truth[r] for r in f.runs]))
                    rows.append((kind, f.h, f.t, (value - f.predicted) / f.sd))
    return pd.DataFrame(rows, columns=["kind", "h", "t", "z"])


def calibration_table(errors: pd.DataFrame) -> dict:
    """Quantiles (at :data:`PERCENT`) of the standardized errors per cell of slope t and horizon h, for runs and
    for groups: ``table[kind][t bin][h bin]``.

    A cell with fewer than :data:`MIN_CELL` errors (a steep slope seen from a small part of the budget, far
    ahead, is rare) pools the errors of the lower t bins at its horizon, so no quantile comes from a handful of
    points.
    """
    table: dict = {"t_edges": T_EDGES, "h_edges": H_EDGES, "percent": PERCENT}
    h_bin = np.searchsorted(H_EDGES, errors["h"].to_numpy(), side="right") - 1
    t_bin = np.clip(np.searchsorted(T_EDGES, errors["t"].to_numpy(), side="right") - 1, 0, len(T_EDGES) - 1)
    for kind in ("run", "group"):
        mine = (errors["kind"] == kind).to_numpy()
        rows = []
        for i in range(len(T_EDGES)):
            row = []
            for j in range(len(H_EDGES)):
                cell = mine & (h_bin == j) & (t_bin == i)
                if cell.sum() < MIN_CELL:
                    cell = mine & (h_bin == j) & (t_bin <= i)
                row.append(np.percentile(errors["z"][cell], PERCENT).round(4).tolist())
            rows.append(row)
        table[kind] = rows
    return table


def curve_sweep(curves: dict, seed: int, budget: float = 4096.0, runs_per_n: int = 3) -> pd.DataFrame:
    """A sweep whose groups follow given curves (n -> callable of C): binomial training reward per step, at the
    compute before the step (for the sequential pilot's tests and replay: a clear winner, a late crossing)."""
    rng = np.random.default_rng(seed)
    frames = []
    for n, curve in curves.items():
        per_step = n * B_PROBLEM
        c_before = np.arange(1, int(budget // per_step)) * float(per_step)
        for replica in range(runs_per_n):
            reward = rng.binomial(per_step, np.clip(curve(c_before), 0.0, 1.0)) / per_step
            frames.append(pd.DataFrame({"run": f"n{n}-s{replica}", "n": n, "b_problem": B_PROBLEM,
                                        "step": np.arange(2, len(c_before) + 2), "C": c_before, "reward": reward}))
    return pd.concat(frames, ignore_index=True)


# Two known answers for the sequential pilot (budget 4096, b_problem 8): n = 2 and 4 rise early to low ceilings
# and n = 8 to a high one (a clear winner); n = 2 leads until ~40 % of the budget and n = 8 wins at it (a late
# crossing).
CLEAR_WINNER = {2: SaturatingCurve(0.2, 0.35, 300.0, 1.5), 4: SaturatingCurve(0.2, 0.45, 400.0, 1.5),
                8: SaturatingCurve(0.2, 0.85, 600.0, 1.5)}
LATE_CROSSING = {2: SaturatingCurve(0.2, 0.5, 150.0, 1.5), 8: SaturatingCurve(0.2, 0.75, 1500.0, 1.5)}


PER_CHECK = [round(0.5 + 0.005 * i, 3) for i in range(97)]  # the per-check levels tried: 0.5 to 0.98


def schedule_errors(seeds: range, budget: float = 4096.0) -> pd.DataFrame:
    """(seed, n, fraction, h, t, z) of every group forecast of the sweeps ``seeds`` at every check of the
    sequential pilot's calibrated schedule (:data:`~verl_isocompute.scaling.pilot.SCHEDULE`), z = (truth -
    predicted) / sd, the group's truth the mean of its runs' targets."""
    from verl_isocompute.scaling.forecast import forecast, target_value

    rows = []
    for seed in seeds:
        sweep = suite_sweep(seed, budget)
        truth = {run: target_value(pts, budget, False) for run, pts in sweep.groupby("run")}
        for fraction in SCHEDULE:
            for g in forecast(truncated(sweep, fraction * budget), budget, "train/reward", calibration={}).groups:
                if g.predicted is not None and g.sd:
                    z = (float(np.mean([truth[r] for r in g.runs])) - g.predicted) / g.sd
                    rows.append((seed, g.n, fraction, g.h, g.t, z))
    return pd.DataFrame(rows, columns=["seed", "n", "fraction", "h", "t", "z"])


def schedule_misses(errors: pd.DataFrame, table: dict, per_check: list[float]) -> list[tuple[float, float]]:
    """For each per-check level, the shares of groups whose interval missed their truth at some check, (above,
    below).

    A check stops the arm that wins at the budget only if that arm's truth lies above its interval or the best
    arm's below its own (scaling.pilot), so above + below bounds the chance of a wrong stop over the checks."""
    from verl_isocompute.scaling.forecast import calibration_bin, interval_z

    t_bin = np.array([calibration_bin(table["t_edges"], t) for t in errors["t"]])
    h_bin = np.array([calibration_bin(table["h_edges"], h) for h in errors["h"]])
    z, out = errors["z"].to_numpy(), []
    for level in per_check:
        # the bounds of every calibration cell at this level (as forecast._interval), then each forecast's own
        bounds = np.array([[interval_z(row, table["percent"], level) for row in rows] for rows in table["group"]])
        miss = pd.DataFrame({"seed": errors["seed"], "n": errors["n"], "above": z > bounds[t_bin, h_bin, 1],
                             "below": z < bounds[t_bin, h_bin, 0]})
        per_group = miss.groupby(["seed", "n"])[["above", "below"]].any()
        out.append((float(per_group["above"].mean()), float(per_group["below"].mean())))
    return out


def schedule_table(errors: pd.DataFrame, table: dict) -> dict:
    """For each per-check level of :data:`PER_CHECK`, the measured chance that no check of the schedule stops
    wrongly, 1 - (above + below) (:func:`schedule_misses`): what a plan's ``early_stop.level`` is read against."""
    family = [1.0 - above - below for above, below in schedule_misses(errors, table, PER_CHECK)]
    return {"checks": list(SCHEDULE), "per_check": PER_CHECK, "family": np.round(family, 4).tolist(),
            "groups": int(errors.groupby(["seed", "n"]).ngroups)}
