"""Forecast each run's and each group's metric at a target budget C from the part of the runs logged so far.

The target (docs/SCALING.md, "Forecasting a run's end"), what a finished run would show: for a validation metric,
the value at the validation point nearest to C; for a training metric, the mean over the run's points whose
compute (as :func:`~verl_isocompute.scaling.points.validation_points` places them, the fit's own placement)
falls in (0.75 C, C].

The method, a damped straight line in ln C (the fit's axis, arXiv 2603.12151 section 4):

1. Per group (n, b_problem), the points of the recent half of the logged range (in ln C) of every run are
   fitted by least squares with one level per run, a_i at the run's last logged compute c_i, and one slope b
   shared by the group's runs (runs of one setting differ in where they are, not in how fast they learn, as
   far as a few points can tell).
2. Ahead of c_i, the curve keeps rising at a share d of that slope: forecast = a_i + d b h_i, h_i = ln(C /
   c_i). The reward curves the playbook fits (ScaleRL's saturating form, arXiv 2510.13786) bend: a run past
   its midpoint slows (d < 1), one before it may speed up (d > 1), and a few points cannot tell which.
   d is the shape prior, D_MEAN +- D_SD: set on a known-truth tuning suite of saturating curves
   (:mod:`~verl_isocompute.scaling.forecast_suite`, seeds apart from the ones the backtest reports); its
   spread enters every interval as (b h D_SD)^2. A straight line (d = 1) and the last value carried
   forward (d = 0) are the backtest's two naive baselines.
3. The model's standard deviation of a run's target adds: the slope's and the level's standard errors; the
   shape term above; run-to-run noise, the spread of the runs' own slopes about the shared one (tau^2,
   pooled over the sweep's groups: the strength borrowed from the other runs), which grows as h^2; and the
   sampling noise of the target itself (the residual variance over the number of points the target
   averages). A group's target is the mean of its runs' values: the shared terms stay, the per-run ones
   shrink with the number of runs. The interval is predicted + z x sd with z the quantiles of the
   standardized error (truth - predicted) / sd on the tuning suite, per cell of horizon h and of the group's
   slope t = b / se(b) (split-conformal calibration by cell, "Mondrian",
   :func:`~verl_isocompute.scaling.forecast_suite.calibration_table`): the errors of a bent curve are skewed
   (a run before its midpoint overshoots any line), which a Student-t would not cover, and how skewed depends
   on how clearly the curve is rising: with one table for every t, groups with t >= 6 held 72.5 % of their
   80 % intervals (200 held-out sweeps) and the rest more than 80 %. The table lives in
   ``forecast_calibration.json``, rewritten by ``python benchmarks/bench_forecast.py --tune``.
4. A run is not forecast, with one line saying why, when its logged part has fewer than MIN_POINTS points
   in its recent half, or when its group's slope is not above its noise (t < 1: no rise yet, so no
   honest extrapolation). A run already past C reports its logged target (interval of zero width).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from importlib import resources

import numpy as np
import pandas as pd
from scipy import stats

from verl_isocompute.scaling.curve import metric_range
from verl_isocompute.scaling.errors import ScalingError
from verl_isocompute.scaling.points import is_training_metric

D_MEAN = 0.6  # shape prior: share of the recent slope kept ahead (tuning suite, see module docstring)
D_SD = 0.35
MIN_POINTS = 4  # per run, in the recent half of its logged range
MIN_T = 1.0  # a group's slope must be at least this many standard errors above 0
TARGET_WINDOW = 0.75  # a training metric's target: the mean over points with C in (0.75 C, C]
LEVELS = (0.5, 0.98)  # the interval levels the calibration table covers
CALIBRATION = "forecast_calibration.json"


def load_calibration() -> dict:
    """The standardized-error quantiles per cell of slope t and horizon h (``benchmarks/bench_forecast.py --tune``)."""
    return json.loads((resources.files("verl_isocompute.scaling") / CALIBRATION).read_text())


def is_validation_metric(metric: str) -> bool:
    """A metric measured on held-out problems after a step: not a training metric, as the fit tells them apart."""
    return not is_training_metric(metric)


@dataclass
class Forecast:
    """One forecast: a run (``run`` set) or a group (``runs`` set). ``why`` is set when there is none."""

    n: int
    b_problem: int
    fitted_upto: float
    predicted: float | None = None
    low: float | None = None
    high: float | None = None
    run: str | None = None
    runs: list[str] = field(default_factory=list)
    why: str | None = None
    sd: float | None = None  # the model's standard deviation of the target (before calibration)
    h: float | None = None  # ln(C / fitted_upto): how far ahead
    t: float | None = None  # the group's slope over its standard error: how clearly it is rising


@dataclass
class Forecasts:
    at: float
    metric: str
    level: float
    runs: list[Forecast]
    groups: list[Forecast]

    def as_json(self) -> dict:
        def num(x: float | None) -> float | None:
            return None if x is None else float(x)

        def one(f: Forecast, group: bool) -> dict:
            out = {"run": f.run} if not group else {}
            out.update({"n": f.n, "b_problem": f.b_problem})
            if group:
                out["runs"] = list(f.runs)
            out.update({"fitted_upto": num(f.fitted_upto), "predicted": num(f.predicted), "low": num(f.low),
                        "high": num(f.high)})
            if f.why:
                out["why"] = f.why
            return out

        return {"at": self.at, "metric": self.metric, "level": self.level,
                "runs": [one(f, False) for f in self.runs], "groups": [one(f, True) for f in self.groups]}


def target_value(points: pd.DataFrame, at: float, validation: bool) -> float | None:
    """The target of one run's points (columns C, reward) at budget ``at`` (module docstring); None if unlogged."""
    if validation:
        if points.empty:
            return None
        return float(points["reward"].to_numpy()[np.argmin(np.abs(np.log(points["C"].to_numpy()) - math.log(at)))])
    inside = points[(points["C"] > TARGET_WINDOW * at) & (points["C"] <= at)]
    return float(inside["reward"].mean()) if len(inside) else None


def _target_count(run_points: pd.DataFrame, at: float, validation: bool) -> float:
    """How many points the target averages: 1 for validation; for training, (0.25 C) / the run's spend per point."""
    if validation:
        return 1.0
    c = np.sort(run_points["C"].to_numpy())
    per_point = float(np.median(np.diff(c))) if len(c) > 1 else float(c[-1])
    return max(1.0, (1.0 - TARGET_WINDOW) * at / max(per_point, 1e-12))


def forecast(points: pd.DataFrame, at: float, metric: str, level: float = 0.8,
             calibration: dict | None = None) -> Forecasts:
    """Forecasts at ``at`` from ``points`` (run, n, b_problem, C, reward: the logged part of each run).

    ``calibration``: the standardized-error quantiles (:func:`load_calibration`, the default); ``{}`` gives
    bare forecasts with their model sd (``Forecast.sd``) and no interval, what the calibration is made from.
    """
    if not (math.isfinite(at) and at > 0):
        raise ScalingError(f"--at must be a budget > 0 in units of C, got {at}")
    if not LEVELS[0] <= level <= LEVELS[1]:
        raise ScalingError(f"--level must be in [{LEVELS[0]}, {LEVELS[1]}] (the calibrated range), e.g. 0.8, got {level}")
    points = points[points["C"] > 0]
    # A share of samples, or a reward every logged value of which lies in [0, 1] (the fit's convention,
    # saturating._reward_bounds): intervals stay in [0, 1].
    bounds = metric_range(metric)
    if bounds is None and len(points) and points["reward"].between(0.0, 1.0).all():
        bounds = (0.0, 1.0)
    table = dict(load_calibration() if calibration is None else calibration, bounds=bounds)
    validation = is_validation_metric(metric)
    fits, why = {}, {}
    for key, group in points.groupby(["n", "b_problem"], sort=True):
        fits[key] = _fit_group(group)
        why.update(fits[key].pop("why"))
    tau2 = _pooled_tau2(fits)
    runs_out, groups_out = [], []
    for (n, b_problem), fit in fits.items():
        group_pts = points[(points["n"] == n) & (points["b_problem"] == b_problem)]
        members = []
        for run, run_pts in group_pts.groupby("run", sort=True):
            c_obs = float(run_pts["C"].max())
            f = Forecast(int(n), int(b_problem), c_obs, run=str(run))
            if c_obs >= at:
                f.predicted = f.low = f.high = target_value(run_pts, at, validation)
                f.sd, f.h = 0.0, 0.0
            elif run in why:
                f.why = why[run]
            else:
                f.h = math.log(at / c_obs)
                m = _target_count(run_pts, at, validation)
                b = fit["b"]
                shared = (D_MEAN * f.h * fit["se_b"]) ** 2 + (b * f.h * D_SD) ** 2
                own = fit["se_a"][run] ** 2 + tau2 * f.h**2 + fit["s2"] / m
                f.predicted, f.sd = fit["a"][run] + D_MEAN * b * f.h, math.sqrt(shared + own)
                f.t = b / fit["se_b"]
                _interval(f, table.get("run"), table, level)
                members.append((f, shared, own))
            runs_out.append(f)
        mine = [f for f in runs_out if f.n == n and f.b_problem == b_problem]
        groups_out.append(_group(int(n), int(b_problem), mine, members, table, level))
    return Forecasts(at=float(at), metric=metric, level=float(level), runs=runs_out, groups=groups_out)


def calibration_bin(edges: list[float], value: float) -> int:
    """The calibration cell along one axis: the last edge at or below ``value`` (values below the first edge
    take the first cell)."""
    return int(np.clip(np.searchsorted(edges, value, side="right") - 1, 0, len(edges) - 1))


def interval_z(row: list[float], percent: list[float], level: float) -> tuple[float, float]:
    """The standardized errors bounding a ``level`` interval, from one calibration cell's quantiles ``row``."""
    z_lo, z_hi = np.interp([50.0 - 50.0 * level, 50.0 + 50.0 * level], percent, row)
    return float(z_lo), float(z_hi)


def _interval(f: Forecast, quantiles: list | None, table: dict, level: float) -> None:
    """low / high = predicted + (the calibration's standardized-error quantiles in f's cell of t and h) x sd."""
    if not quantiles:
        return
    row = quantiles[calibration_bin(table["t_edges"], f.t)][calibration_bin(table["h_edges"], f.h)]
    z_lo, z_hi = interval_z(row, table["percent"], level)
    low, high = table.get("bounds") or (-math.inf, math.inf)  # a share of samples stays in [0, 1]
    f.low, f.high = max(low, f.predicted + z_lo * f.sd), min(high, f.predicted + z_hi * f.sd)


def _group(n: int, b_problem: int, runs: list[Forecast], members: list[tuple], table: dict, level: float) -> Forecast:
    """The mean of the group's run targets: shared terms as they are, per-run terms shrunk by the count."""
    g = Forecast(n, b_problem, min(f.fitted_upto for f in runs), runs=[str(f.run) for f in runs])
    if any(f.why for f in runs):
        bad = [f for f in runs if f.why]
        g.why = f"cannot forecast: {len(bad)} of its {len(runs)} runs cannot be (e.g. {bad[0].run}: {bad[0].why[17:]})"
        return g
    k = len(runs)
    g.predicted = float(np.mean([f.predicted for f in runs]))
    if not members:  # every run already past C: the logged mean
        g.low = g.high = g.predicted
        g.sd, g.h = 0.0, 0.0
        return g
    shared = float(np.mean([math.sqrt(m[1]) for m in members])) ** 2
    own = sum(m[2] for m in members) / k**2
    g.sd, g.h = math.sqrt(shared + own), float(np.mean([m[0].h for m in members]))
    g.t = members[0][0].t  # one slope per group
    _interval(g, table.get("group"), table, level)
    return g


def _fit_group(group: pd.DataFrame) -> dict:
    """Levels a_i (at each run's last compute), one shared slope b in ln C, and their standard errors."""
    rows, why = [], {}
    for run, pts in group.groupby("run", sort=True):
        x = np.log(pts["C"].to_numpy(dtype=float))
        recent = x >= (x.min() + x.max()) / 2.0
        if recent.sum() < MIN_POINTS:
            why[run] = (f"cannot forecast: {int(recent.sum())} points in the recent half of its logged range "
                        f"(up to C = {math.exp(x.max()):g}; needs {MIN_POINTS})")
            continue
        rows.append(pd.DataFrame({"run": run, "u": x[recent] - x.max(), "y": pts["reward"].to_numpy(float)[recent]}))
    out = {"why": why, "a": {}, "se_a": {}, "b": 0.0, "se_b": math.inf, "s2": 0.0, "df": 1, "slopes": []}
    if not rows:
        return out
    data = pd.concat(rows, ignore_index=True)
    names = sorted(data["run"].unique())
    design = np.column_stack([(data["run"] == r).to_numpy(float) for r in names] + [data["u"].to_numpy()])
    y = data["y"].to_numpy()
    df = len(y) - design.shape[1]
    if df < 1:
        for r in names:
            why[r] = "cannot forecast: too few points to estimate the slope and its noise"
        return out
    coef, *_ = np.linalg.lstsq(design, y, rcond=None)
    resid = y - design @ coef
    s2 = float(resid @ resid / df)
    cov = s2 * np.linalg.pinv(design.T @ design)
    b, se_b = float(coef[-1]), float(math.sqrt(cov[-1, -1]))
    if not b > MIN_T * se_b:
        for r in names:
            why[r] = (f"cannot forecast: no rise yet (slope in ln C {b:+.3g} +- {se_b:.2g}, not above its noise; "
                      f"logged up to C = {float(group.loc[group['run'] == r, 'C'].max()):g})")
        return out
    slopes = []
    for r in names:  # each run's own slope, for the run-to-run spread (tau^2)
        part = data[data["run"] == r]
        if part["u"].nunique() >= 3:
            fit = stats.linregress(part["u"], part["y"])
            slopes.append((fit.slope, fit.stderr**2))
    out.update(a=dict(zip(names, coef[:-1].tolist())), se_a=dict(zip(names, np.sqrt(np.diag(cov)[:-1]).tolist())),
               b=b, se_b=se_b, s2=s2, df=df, slopes=slopes)
    return out


def _pooled_tau2(fits: dict) -> float:
    """Run-to-run spread of slopes beyond their sampling noise, pooled over groups with >= 2 runs (moments).

    No group with two runs: the spread is taken as half the mean slope (a wide stand-in, said in the docs)."""
    excess, weights, slopes_all = 0.0, 0, []
    for fit in fits.values():
        slopes = fit.get("slopes", [])
        slopes_all += [s for s, _ in slopes]
        if len(slopes) >= 2:
            values = np.array([s for s, _ in slopes])
            noise = np.mean([v for _, v in slopes])
            excess += (len(values) - 1) * max(0.0, float(np.var(values, ddof=1)) - noise)
            weights += len(values) - 1
    if weights:
        return excess / weights
    return (0.5 * float(np.mean(np.abs(slopes_all)))) ** 2 if slopes_all else 0.0
