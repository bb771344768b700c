"""Fitting: per-n reward curves, their upper envelope, n*(C), and the n*(C) sigmoid.

Steps 3 to 5 of the playbook's fitting workflow (arXiv 2603.12151, section 4):

3. For each n (or each (n, B_problem) cell for the joint question), a monotone saturating curve of
   reward against compute, in ScaleRL's form (arXiv 2510.13786)

       R(C) = R0 + (A - R0) / (1 + (C_mid / C)^beta),     beta > 0,  lo <= R0 <= A <= hi

   with [lo, hi] = [0, 1] for a reward (wider, from the data, for a metric outside [0, 1]). It is fitted
   by bounded least squares (scipy's ``least_squares``) from several starts, keeping the best. Two
   choices the playbook leaves open, settled on synthetic sweeps with a known answer (synthetic.py;
   worst error on log2 n*(C) over C in [1e5, 1e7], 10 seeds x the Easy and Hard presets, noise 0.01):
   - fitted to all validation points of the group (``fit_on="all"``, default), which estimates the
     expected reward at C. The group's record-breaking points (``fit_on="records"``) are a running
     maximum of noisy evaluations, biased upwards the more evaluations a run had: worst error 1.4
     doublings against 0.42 for all points.
   - one R0 for all groups (``shared_r0=True``, default): every run starts from the same base model, so
     R(C -> 0) is one number. It is the median of the groups' own R0 (first pass), then every group is
     refitted with it. With R0 free, noise in the first evaluations decides n* at small C, where all
     curves lie within noise of each other: worst error 1.05 doublings against 0.42.
   Points are pooled in bins of 1/50 decade of C first (:func:`bin_points`): exact when a bin holds
   one point, the same fit up to the curve's change within 5% of C otherwise, and fast for 500 runs.
4. The frontier is the upper envelope of the fitted curves on a log grid of C, and n*(C) = argmax_n R_n(C).
   A curve competes only inside the C range its runs cover: below it the run has not been evaluated, past
   it the curve would be extrapolated. log2 n*(C) is then smoothed by a centred running average over
   ``window`` grid points (chosen: 5 points at 20 points per decade, a quarter of a decade).
5. The sigmoid printed on the playbook's figures, C in the compute unit, log10 for C, log2 for n:

       log2 n*(C) = L / (1 + exp(-k (log10 C - log10 C0))) + b

   fitted to the smoothed n*(C) with bounds (k <= 50 by default: the playbook's Hard joint fit printed
   k = 50.00, evidently a bound), reported with R^2, residuals, and bootstrap confidence intervals over runs:
   runs are resampled with replacement and steps 3 to 5 redone on each resample.

A fit that does not converge raises :class:`FitError` rather than returning a bogus curve. When n*(C)
cannot be fitted at all (one value of n, or n* constant over the range) the result has ``curve=None`` and
says why in ``no_curve_reason``; the frontier and the per-n fits are still there.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Sequence

import numpy as np
import pandas as pd
from scipy.optimize import least_squares
from scipy.special import expit

from verl_isocompute.scaling.curve import Curve, sigmoid_log2_n, sigmoid_log2_n_jacobian
from verl_isocompute.scaling.errors import FitError, ScalingError
from verl_isocompute.scaling.frontier import Frontier, record_breaking
from verl_isocompute.scaling.lsq import least_squares_batch

GROUP_BYS = {"n": ("n",), "n,b_problem": ("n", "b_problem")}
FIT_ON = ("records", "all")
DEFAULT_WINDOW = 5
GRID_PER_DECADE = 20
K_MAX = 50.0
K_MIN = 1e-3  # the sigmoid's k is fitted in [K_MIN, k_max]
DEFAULT_BOOTSTRAP = 200
MIN_POINTS = 4  # the saturating curve has 4 parameters
BINS_PER_DECADE = 50  # points pooled within 1/50 decade (~5%) of C before fitting, see bin_points
_LN10 = math.log(10.0)


# --- step 3: one saturating curve per group ----------------------------------------------------------


@dataclass(frozen=True)
class SaturatingCurve:
    """R(C) = R0 + (A - R0) / (1 + (C_mid / C)^beta), ScaleRL's reward-vs-compute form."""

    R0: float
    A: float
    C_mid: float
    beta: float

    def __call__(self, compute: float | np.ndarray) -> np.ndarray:
        return saturating_reward(np.log(np.asarray(compute, dtype=float)), self.R0, self.A, math.log(self.C_mid), self.beta)


def saturating_reward(log_c: Any, R0: Any, A: Any, log_c_mid: Any, beta: Any) -> np.ndarray:
    """R0 + (A - R0) / (1 + (C_mid / C)^beta) written in u = ln C: the one place ScaleRL's form is written.

    (C_mid / C)^beta = exp(-beta (u - ln C_mid)), so the curve is a logistic in ln C. Arguments broadcast,
    so one call evaluates many curves (the envelope, the bootstrap).
    """
    return R0 + (A - R0) * expit(beta * (log_c - log_c_mid))


def _saturating_terms(p: np.ndarray, u: np.ndarray, lo: Any, r0: Any) -> tuple[np.ndarray, np.ndarray]:
    """The model and its Jacobian in the fitted parameters, for one parameter vector or rows of them.

    Free R0 (``r0`` None): p = (A, f, ln C_mid, beta) with R0 = A - f (A - lo), so that lo <= R0 <= A <= hi
    is a box (what bounded least squares accepts) and every curve is non-decreasing. Shared R0: p = (A,
    ln C_mid, beta). ``p`` (P,) against ``u`` (M,), or (N, P) against (N, M) with ``lo`` / ``r0`` (N, 1).
    """
    cols = [p[..., i, None] for i in range(p.shape[-1])]
    if r0 is None:
        A, f, um, beta = cols
        R0 = A - f * (A - lo)
    else:
        (A, um, beta), R0 = cols, r0
    value = saturating_reward(u, R0, A, um, beta)
    e = expit(beta * (u - um))
    slope = (A - R0) * e * (1.0 - e)
    if r0 is None:
        grads = [1.0 - f * (1.0 - e), -(A - lo) * (1.0 - e), -slope * beta, slope * (u - um)]
    else:
        grads = [e, -slope * beta, slope * (u - um)]
    return value, np.stack(np.broadcast_arrays(*grads), axis=-1)


def _saturating_box(u_min: Any, u_max: Any, lo: Any, hi: Any, r0: Any) -> tuple[list, list]:
    """Bounds of the fitted parameters: C_mid within 3 decades of the data, beta in [0.02, 20]."""
    um_lo, um_hi = u_min - 3 * _LN10, u_max + 3 * _LN10
    if r0 is None:
        return [lo, 0.0 * lo, um_lo, 0.02 + 0.0 * lo], [hi, 1.0 + 0.0 * hi, um_hi, 20.0 + 0.0 * hi]
    return [r0, um_lo, 0.02 + 0.0 * lo], [hi, um_hi, 20.0 + 0.0 * hi]


def _reward_bounds(reward: np.ndarray) -> tuple[float, float]:
    lo, hi = float(np.min(reward)), float(np.max(reward))
    if lo >= 0.0 and hi <= 1.0:
        return 0.0, 1.0
    span = max(hi - lo, abs(hi) * 0.1, 1e-9)
    return lo - span, hi + span


def bin_points(
    compute: np.ndarray, reward: np.ndarray, weight: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pool points into bins of 1/BINS_PER_DECADE decade of C: (C, mean reward, total weight) per bin.

    A weighted least-squares fit to the bin means has the same minimiser as the fit to the points as
    long as the curve is flat within a bin (5% of C), and costs the same whether 1 run or 50 runs share
    a bin: this is what keeps fits of 500-run sweeps and their bootstrap fast. A bin holding one point
    is that point, exactly.
    """
    compute = np.asarray(compute, dtype=float)
    reward = np.asarray(reward, dtype=float)
    w = np.ones_like(reward) if weight is None else np.asarray(weight, dtype=float)
    log_c = np.log(compute)
    ids = _bin_ids(log_c)
    ids -= ids.min()
    total = np.bincount(ids, weights=w)
    used = total > 0
    total = total[used]
    mean_log_c = np.bincount(ids, weights=w * log_c)[used] / total
    mean = np.bincount(ids, weights=w * reward)[used] / total
    return np.exp(mean_log_c), mean, total


def _bin_ids(log_c: np.ndarray) -> np.ndarray:
    return np.floor(log_c * (BINS_PER_DECADE / _LN10)).astype(np.int64)


def _best_of_starts(residual, jacobian, starts, lower, upper, max_nfev, margin):
    """Bounded least squares from several starts (nudged ``margin`` inside the bounds); the lowest-cost
    converged solution, or None when no start converged."""
    best = None
    for x0 in starts:
        x0 = np.clip(x0, np.add(lower, margin), np.subtract(upper, margin))
        res = least_squares(residual, x0, jac=jacobian, bounds=(lower, upper), max_nfev=max_nfev)
        if res.status > 0 and np.all(np.isfinite(res.x)) and (best is None or res.cost < best.cost):
            best = res
    return best


def fit_saturating(
    compute: np.ndarray,
    reward: np.ndarray,
    weight: np.ndarray | None = None,
    r0: float | None = None,
    start: SaturatingCurve | None = None,
    max_nfev: int | None = None,
) -> tuple[SaturatingCurve, float]:
    """Fit R(C) by bounded (weighted) least squares from several starts; returns the curve and its RMSE.

    Free R0: the parameters are (A, f, ln C_mid, beta) with R0 = A - f (A - lo), so that
    lo <= R0 <= A <= hi is a box (what least_squares accepts) and every fitted curve is non-decreasing.
    Given ``r0``: the parameters are (A, ln C_mid, beta) with r0 <= A <= hi. ``start`` replaces the
    default starts by one (a refit starts from an earlier fit).
    """
    u = np.log(np.asarray(compute, dtype=float))
    y = np.asarray(reward, dtype=float)
    if len(y) < MIN_POINTS:
        raise ScalingError(f"{len(y)} points, need at least {MIN_POINTS} to fit a saturating curve")
    sqrt_w = np.ones_like(y) if weight is None else np.sqrt(np.asarray(weight, dtype=float))
    lo, hi = _reward_bounds(y)
    if r0 is not None:
        lo, hi = min(lo, r0), max(hi, r0)
    lower, upper = _saturating_box(float(u.min()), float(u.max()), lo, hi, r0)
    if start is not None:
        starts = [_pack(start, lo, r0)]
    else:
        mids = [float(np.quantile(u, q)) for q in (0.2, 0.5, 0.8)]
        A0 = float(y.max())
        f0 = (A0 - float(y.min())) / (A0 - lo) if A0 > lo else 0.5
        head = [A0, f0] if r0 is None else [A0]
        starts = [head + [um, beta] for um in mids for beta in (0.5, 2.0)]

    def residual(p):
        return (_saturating_terms(p, u, lo, r0)[0] - y) * sqrt_w

    def jacobian(p):
        return _saturating_terms(p, u, lo, r0)[1] * sqrt_w[:, None]

    best = _best_of_starts(residual, jacobian, starts, lower, upper, max_nfev, margin=1e-12)
    if best is None:
        if start is not None:
            return fit_saturating(compute, reward, weight, r0=r0, max_nfev=max_nfev)
        raise FitError(f"the saturating fit did not converge from {len(starts)} starts")
    curve = _unpack(best.x, lo, r0)
    return curve, float(np.sqrt(np.sum(best.fun**2) / np.sum(sqrt_w**2)))


def _pack(curve: SaturatingCurve, lo: float, r0: float | None) -> list[float]:
    """A curve as the fitted parameters of :func:`_saturating_terms` (a start for a refit)."""
    if r0 is None:
        gain = curve.A - lo
        return [curve.A, (curve.A - curve.R0) / gain if gain > 0 else 0.5, math.log(curve.C_mid), curve.beta]
    return [max(curve.A, r0), math.log(curve.C_mid), curve.beta]


def _unpack(p: np.ndarray, lo: float, r0: float | None) -> SaturatingCurve:
    if r0 is None:
        A, f, um, beta = (float(v) for v in p)
        return SaturatingCurve(R0=A - f * (A - lo), A=A, C_mid=math.exp(um), beta=beta)
    A, um, beta = (float(v) for v in p)
    return SaturatingCurve(R0=float(r0), A=A, C_mid=math.exp(um), beta=beta)


# --- step 5: the n*(C) sigmoid ------------------------------------------------------------------------


@dataclass(frozen=True)
class SigmoidFit:
    L: float
    k: float
    log10_C0: float
    b: float
    r2: float
    rmse: float
    residuals: np.ndarray
    at_bounds: tuple[str, ...]


def _sigmoid_box(x_min: Any, x_max: Any, log2_n_range: tuple[float, float], k_max: float) -> tuple[list, list]:
    """Bounds of (L, k, log10 C0, b): C0 within a decade of the C fitted on, the floor 2^b at most 3
    doublings below the smallest n and the ceiling at most 3 above the largest."""
    n_lo, n_hi = log2_n_range
    ones = np.ones_like(np.asarray(x_min, dtype=float))
    return (
        [0.0 * ones, K_MIN * ones, x_min - 1.0, (n_lo - 3.0) * ones],
        [(n_hi - n_lo + 3.0) * ones, float(k_max) * ones, x_max + 1.0, n_hi * ones],
    )


def fit_sigmoid(
    log10_c: np.ndarray,
    log2_n: np.ndarray,
    log2_n_range: tuple[float, float],
    k_max: float = K_MAX,
    start: Sequence[float] | None = None,
    max_nfev: int | None = None,
) -> SigmoidFit:
    """Fit (L, k, log10 C0, b) to log2 n*(C) by bounded least squares from several starts.

    ``log2_n_range`` is (log2 of the smallest n, log2 of the largest n) of the sweep: the floor 2^b may
    sit below the smallest n (the playbook's Easy fit has b = 2.73 with n >= 8), by at most 3 doublings.
    """
    x = np.asarray(log10_c, dtype=float)
    y = np.asarray(log2_n, dtype=float)
    lower, upper = _sigmoid_box(float(x.min()), float(x.max()), log2_n_range, k_max)

    def residual(p):
        return sigmoid_log2_n(x, *p) - y

    def jacobian(p):
        return sigmoid_log2_n_jacobian(x, *p)

    if start is not None:
        starts = [list(start)]
    else:
        span = max(float(y.max() - y.min()), 0.5)
        starts = [[span, k0, float(np.quantile(x, q)), float(y.min())] for q in (0.25, 0.5, 0.75) for k0 in (2.0, 8.0)]
    best = _best_of_starts(residual, jacobian, starts, lower, upper, max_nfev, margin=1e-9)
    if best is None:
        raise FitError(
            f"the n*(C) sigmoid fit did not converge from {len(starts)} starts; no curve was written. "
            "Check n*(C) in the report: it needs a rise from small to large n within the C range of the runs"
        )
    names = ("L", "k", "log10_C0", "b")
    at_bounds = tuple(
        name for name, v, lo, hi in zip(names, best.x, lower, upper) if min(v - lo, hi - v) <= 1e-6 * max(1.0, abs(v))
    )
    ss_res = float(np.sum(best.fun**2))
    ss_tot = float(np.sum((y - y.mean()) ** 2))
    return SigmoidFit(
        *(float(v) for v in best.x),
        r2=1.0 - ss_res / ss_tot if ss_tot > 0 else float("nan"),
        rmse=float(np.sqrt(np.mean(best.fun**2))),
        residuals=best.fun.copy(),
        at_bounds=at_bounds,
    )


# --- steps 3 to 5 together -----------------------------------------------------------------------------


@dataclass
class FrontierFit:
    """Everything ``fit_frontier`` found; plain tables and values, ready for a notebook.

    ``groups``: one row per group (n, or (n, b_problem)) with its runs, points, covered C range, fitted
    R0 / A / C_mid / beta, RMSE and status. ``curves``: group key -> :class:`SaturatingCurve`.
    ``grid``: one row per grid value of C: ``C``, ``reward`` (the envelope), ``n_star``, ``b_problem_star``,
    ``log2_n_star``, ``log2_n_star_smoothed``, ``log2_n_star_fit``, ``residual``, and the bootstrap band
    ``log2_n_star_low`` / ``log2_n_star_high``. ``curve``: the fitted :class:`Curve` (None when n*(C)
    could not be fitted: ``no_curve_reason`` says why). ``ci``: one row per sigmoid parameter with its
    estimate and 95% bootstrap interval. ``bootstrap_params``: (resamples, 4) array of L, k, log10_C0, b.
    """

    frontier: Frontier
    group_by: tuple[str, ...]
    groups: pd.DataFrame
    curves: dict[tuple, SaturatingCurve]
    grid: pd.DataFrame
    curve: Curve | None
    r2: float | None = None
    rmse: float | None = None
    ci: pd.DataFrame | None = None
    bootstrap_params: np.ndarray | None = None
    bootstrap: dict[str, int] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    no_curve_reason: str | None = None

    def n_star_table(self, compute: Sequence[float] | None = None) -> pd.DataFrame:
        """n* at chosen budgets (default: 1, 2, 5 x 10^k inside the fitted range): from the data
        (smoothed envelope argmax), from the sigmoid, and the sigmoid's 95% bootstrap interval."""
        grid = self.grid
        if compute is None:
            compute = nice_budgets(float(grid["C"].iloc[0]), float(grid["C"].iloc[-1]))
        compute = np.asarray(compute, dtype=float)
        smoothed = np.interp(np.log10(compute), np.log10(grid["C"].to_numpy()), grid["log2_n_star_smoothed"].to_numpy())
        table = pd.DataFrame({"C": compute, "n_star_data": np.exp2(smoothed)})
        if self.curve is not None:
            table["n_star_fit"] = self.curve.n_star(compute)
            if self.bootstrap_params is not None and len(self.bootstrap_params):
                draws = sigmoid_log2_n(np.log10(compute)[None, :], *(self.bootstrap_params.T[:, :, None]))
                table["n_star_low"] = np.exp2(np.percentile(draws, 2.5, axis=0))
                table["n_star_high"] = np.exp2(np.percentile(draws, 97.5, axis=0))
        return table


def nice_budgets(c_lo: float, c_hi: float) -> list[float]:
    """1, 2 and 5 x 10^k inside [c_lo, c_hi] (the playbook quotes n* at 1e5, 5e5, 1e6, 2e6, 1e7)."""
    out = []
    for exponent in range(int(math.floor(math.log10(c_lo))), int(math.ceil(math.log10(c_hi))) + 1):
        for mantissa in (1.0, 2.0, 5.0):
            value = mantissa * 10.0**exponent
            if c_lo <= value <= c_hi:
                out.append(value)
    return out


@dataclass
class _Group:
    key: tuple
    runs: list[str]
    points: pd.DataFrame  # the group's validation points
    fit_points: pd.DataFrame  # what the curve is fitted to (records or all points)

    def fit(self, **kwargs) -> tuple[SaturatingCurve, float]:
        """Fit this group's curve (to its binned fit points); the RMSE is over the points themselves."""
        c, y = self.fit_points["C"].to_numpy(), self.fit_points["reward"].to_numpy()
        curve, _ = fit_saturating(*bin_points(c, y), **kwargs)
        return curve, float(np.sqrt(np.mean((curve(c) - y) ** 2)))


def _group_keys(group_by: str | Sequence[str]) -> tuple[str, ...]:
    if isinstance(group_by, str):
        if group_by not in GROUP_BYS:
            raise ScalingError(f"group_by must be one of {', '.join(GROUP_BYS)}, got {group_by!r}")
        return GROUP_BYS[group_by]
    keys = tuple(group_by)
    if keys not in GROUP_BYS.values():
        raise ScalingError(f"group_by must be one of {', '.join(GROUP_BYS)}, got {group_by!r}")
    return keys


def fit_frontier(
    frontier: Frontier,
    group_by: str | Sequence[str] = "n",
    fit_on: str = "all",
    shared_r0: bool = True,
    window: int = DEFAULT_WINDOW,
    grid_per_decade: int = GRID_PER_DECADE,
    k_max: float = K_MAX,
    bootstrap: int = DEFAULT_BOOTSTRAP,
    seed: int = 0,
    max_nfev: int | None = None,
) -> FrontierFit:
    """Per-group curves, their envelope, n*(C) and its sigmoid, with bootstrap intervals over runs.

    Raises :class:`FitError` when a fit does not converge; returns ``curve=None`` (with the reason) when
    the runs cannot determine n*(C) (one value of n, or the same n best at every C).
    """
    keys = _group_keys(group_by)
    if fit_on not in FIT_ON:
        raise ScalingError(f"fit_on must be one of {', '.join(FIT_ON)}, got {fit_on!r}")
    if window < 1 or grid_per_decade < 1:
        raise ScalingError("window and grid_per_decade must be positive integers")
    if not k_max > 0:
        raise ScalingError(f"k_max must be positive, got {k_max}")
    points = frontier.points
    warnings: list[str] = []
    if keys == ("n",) and points["b_problem"].nunique() > 1:
        warnings.append(
            f"runs use several b_problem values ({', '.join(str(b) for b in sorted(points['b_problem'].unique()))}) "
            "and are grouped by n alone; use --group-by n,b_problem for the joint question"
        )
    groups = _make_groups(points, keys, frontier.bucket, fit_on)
    runs_per_group = {len(g.runs) for g in groups}
    if fit_on == "records" and len(runs_per_group) > 1:
        warnings.append(
            f"groups have different numbers of runs ({min(runs_per_group)} to {max(runs_per_group)}): the "
            "record-breaking points of a group with more runs are a best-of-more-seeds, biased upwards; "
            "consider --fit-on all"
        )
    settings = dict(
        group_by=",".join(keys), fit_on=fit_on, shared_r0=shared_r0, bucket=frontier.bucket, ema=frontier.ema,
        window=window, grid_per_decade=grid_per_decade, k_max=k_max, bootstrap=bootstrap, seed=seed,
    )

    # Step 3, first pass: each group on its own (R0 free).
    rows, free, failures = [], {}, []
    for g in groups:
        row = _group_row(g, keys)
        try:
            free[g.key] = g.fit(max_nfev=max_nfev)
            row["status"] = "fitted"
        except FitError as exc:
            row["status"] = "did not converge"
            failures.append(f"{_label(g.key, keys)}: {exc}")
        except ScalingError:
            row["status"] = f"too few points ({len(g.fit_points)})"
            warnings.append(
                f"{_label(g.key, keys)}: only {len(g.fit_points)} {'record-breaking ' if fit_on == 'records' else ''}"
                f"points, need {MIN_POINTS}: not fitted"
                + (" (use --fit-on all or a smaller --bucket)" if fit_on == "records" else "")
            )
        rows.append(row)
    fitted = [g for g in groups if g.key in free]
    if len(fitted) < 2 and failures:
        raise FitError("per-group fits did not converge: " + "; ".join(failures))
    warnings.extend(f"{failure}: left out of the envelope" for failure in failures)

    # Second pass: one R0 for all groups (why: see the module docstring).
    r0 = None
    results = dict(free)
    if shared_r0 and len(fitted) >= 2:
        r0 = float(np.median([free[g.key][0].R0 for g in fitted]))
        for g in fitted:
            results[g.key] = g.fit(r0=r0, start=free[g.key][0], max_nfev=max_nfev)
        settings["r0"] = r0
    curves = {key: curve for key, (curve, _) in results.items()}
    for row, g in zip(rows, groups):
        if g.key in results:
            curve, rmse = results[g.key]
            row.update(R0=curve.R0, A=curve.A, C_mid=curve.C_mid, beta=curve.beta, rmse=rmse)
    group_table = pd.DataFrame(rows)

    def result(grid, **kw):
        return FrontierFit(frontier, keys, group_table, curves, grid, settings=settings, warnings=warnings, **kw)

    if not fitted:
        reason = f"no group has the {MIN_POINTS} validation points at C > 0 that a curve needs"
        return result(_empty_grid(), curve=None, no_curve_reason=reason)
    grid_c = _grid(
        min(float(g.points["C"].min()) for g in fitted), max(float(g.points["C"].max()) for g in fitted), grid_per_decade
    )
    table = _envelope_table(fitted, curves, grid_c, keys, window)
    n_values = sorted({g.key[0] for g in groups})
    fitted_n = sorted({g.key[0] for g in fitted})
    if len(fitted_n) < 2:
        reason = (
            f"only one value of n ({n_values[0]}) in the runs" if len(n_values) < 2
            else f"only the runs with n={fitted_n[0]} have enough points for a curve"
        ) + ": the frontier is there, but n*(C) needs fitted curves for at least two values of n"
        return result(table, curve=None, no_curve_reason=reason)
    if table["log2_n_star"].nunique() < 2:
        only = int(table["n_star"].iloc[0])
        reason = (
            f"n* is {only} at every C in [{grid_c[0]:.3g}, {grid_c[-1]:.3g}]: the sigmoid's L, k and C0 are not "
            "determined. Add runs with other n, or runs that reach larger/smaller C"
        )
        return result(table, curve=None, no_curve_reason=reason)

    # Step 5.
    n_range = (math.log2(min(n_values)), math.log2(max(n_values)))
    x = np.log10(table["C"].to_numpy())
    fit = fit_sigmoid(x, table["log2_n_star_smoothed"].to_numpy(), n_range, k_max=k_max, max_nfev=max_nfev)
    table["log2_n_star_fit"] = sigmoid_log2_n(x, fit.L, fit.k, fit.log10_C0, fit.b)
    table["residual"] = fit.residuals
    for name in fit.at_bounds:
        hint = " (the switch is sharper than the grid of n resolves; the playbook's Hard joint fit hit k = 50 too)" if name == "k" else ""
        warnings.append(f"sigmoid parameter {name} sits at its bound{hint}")
    if fit.r2 < 0.5:
        warnings.append(f"the sigmoid explains little of n*(C) (R^2 = {fit.r2:.2f}); read n*(C) from frontier.csv")

    params = np.array([fit.L, fit.k, fit.log10_C0, fit.b])
    draws, stats = _bootstrap(
        frontier, fitted, curves, {key: c.R0 for key, (c, _) in free.items()} if r0 is not None else None,
        params, n_range, settings,
    )
    ci = None
    if len(draws):
        low, high = np.percentile(draws, [2.5, 97.5], axis=0)
        ci = pd.DataFrame({"param": ["L", "k", "log10_C0", "b"], "estimate": params, "low": low, "high": high})
        band = sigmoid_log2_n(x[None, :], *(draws.T[:, :, None]))
        table["log2_n_star_low"] = np.percentile(band, 2.5, axis=0)
        table["log2_n_star_high"] = np.percentile(band, 97.5, axis=0)
    if bootstrap and stats["failed"]:
        warnings.append(f"{stats['failed']} of {bootstrap} bootstrap resamples could not be fitted and were skipped")

    curve = Curve(
        L=fit.L, k=fit.k, log10_C0=fit.log10_C0, b=fit.b,
        compute_unit=frontier.compute_unit, metric=frontier.metric,
        c_range=(float(grid_c[0]), float(grid_c[-1])),
        n_grid=tuple(int(n) for n in n_values),
        provenance=_provenance(frontier, groups, settings, fit, ci, stats),
    )
    return result(table, curve=curve, r2=fit.r2, rmse=fit.rmse, ci=ci, bootstrap_params=draws, bootstrap=stats)


def _label(key: tuple, keys: tuple[str, ...]) -> str:
    return ", ".join(f"{k}={v}" for k, v in zip(keys, key))


def _make_groups(points: pd.DataFrame, keys: tuple[str, ...], bucket: float, fit_on: str) -> list[_Group]:
    groups = []
    for key, pts in points.groupby(list(keys), sort=True):
        key = tuple(int(k) for k in (key if isinstance(key, tuple) else (key,)))
        fit_points = record_breaking(pts, bucket) if fit_on == "records" else pts
        groups.append(_Group(key, sorted(pts["run"].unique()), pts, fit_points))
    return groups


def _group_row(g: _Group, keys: tuple[str, ...]) -> dict[str, Any]:
    row: dict[str, Any] = dict(zip(keys, g.key))
    if "b_problem" not in row:
        values = sorted(g.points["b_problem"].unique())
        row["b_problem"] = int(values[0]) if len(values) == 1 else ",".join(str(v) for v in values)
    row.update(
        runs=len(g.runs), points=len(g.points), fit_points=len(g.fit_points),
        C_min=float(g.points["C"].min()), C_max=float(g.points["C"].max()),
        best_reward=float(g.points["reward"].max()),
        R0=np.nan, A=np.nan, C_mid=np.nan, beta=np.nan, rmse=np.nan,
    )
    return row


def _grid(c_lo: float, c_hi: float, per_decade: int) -> np.ndarray:
    """A log grid over [c_lo, c_hi] with ``per_decade`` points per decade of C."""
    if c_hi <= c_lo:
        return np.array([c_lo])
    num = max(2, int(math.ceil(math.log10(c_hi / c_lo) * per_decade)) + 1)
    return np.logspace(math.log10(c_lo), math.log10(c_hi), num)


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
    c = grid[:, None, :]
    inside = (c >= cover[:, :, :1] * (1 - 1e-9)) & (c <= cover[:, :, 1:] * (1 + 1e-9)) & ~np.isnan(params[:, :, :1])
    with np.errstate(invalid="ignore"):
        values = saturating_reward(np.log(c), *(params[:, :, i, None] for i in range(4)))
    values = np.where(inside, values, -np.inf)
    winner = values.argmax(axis=1)
    best = np.take_along_axis(values, winner[:, None, :], axis=1)[:, 0, :]
    covered = np.isfinite(best)
    winner = np.where(covered, winner, -1)
    smoothed = _running_mean(np.where(covered, log2_n[np.maximum(winner, 0)], 0.0), covered, window)
    return best, winner, smoothed


def _running_mean(values: np.ndarray, valid: np.ndarray, window: int) -> np.ndarray:
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


def _envelope_table(groups, curves, grid, keys, window) -> pd.DataFrame:
    """:func:`envelope` of the full-data fit, as the table ``frontier.csv`` holds (uncovered C left out)."""
    params = np.array([[c.R0, c.A, math.log(c.C_mid), c.beta] for c in (curves[g.key] for g in groups)])
    cover = np.array([(g.points["C"].min(), g.points["C"].max()) for g in groups], dtype=float)
    log2_n = np.log2([float(g.key[0]) for g in groups])
    best, winner, smoothed = envelope(params[None], cover[None], log2_n, grid[None], window)
    keep = winner[0] >= 0
    grid, best, winner, smoothed = grid[keep], best[0, keep], winner[0, keep], smoothed[0, keep]
    n_star = np.array([groups[i].key[0] for i in winner], dtype=float)
    table = pd.DataFrame({"C": grid, "reward": best, "n_star": n_star.astype(int)})
    if keys == ("n", "b_problem"):
        table["b_problem_star"] = [groups[i].key[1] for i in winner]
    else:
        table["b_problem_star"] = [_group_b(groups[i]) for i in winner]
    table["log2_n_star"] = np.log2(n_star)
    table["log2_n_star_smoothed"] = smoothed
    table["log2_n_star_fit"] = np.nan
    table["residual"] = np.nan
    return table


def _group_b(g: _Group):
    values = g.points["b_problem"].unique()
    return int(values[0]) if len(values) == 1 else np.nan


def _empty_grid() -> pd.DataFrame:
    return pd.DataFrame(columns=["C", "reward", "n_star", "b_problem_star", "log2_n_star", "log2_n_star_smoothed"])


def _bootstrap(frontier, groups, curves, free_r0, params, n_range, settings):
    """Resample runs with replacement and redo steps 3 to 5; returns (successful params, counts).

    On each resample every group's curve is refitted on the resampled runs (a run drawn twice counts
    twice), starting from the full-data curve; with a shared R0, the resample's R0 is the median of the
    first-pass R0 of the groups it contains. Then :func:`envelope` and the sigmoid, from the full-data
    sigmoid. All resamples are done together: the binned data of every (resample, group) is a product of
    the resample's run counts with each run's binned sums, and the refits run in lock step
    (:func:`verl_isocompute.scaling.lsq.least_squares_batch`). With ``fit_on="records"`` a group is fitted
    to the record-breaking points of its resampled runs' own records
    (:func:`~verl_isocompute.scaling.frontier.record_mask`): dropping a rival run can promote a point.
    """
    resamples, fit_on = settings["bootstrap"], settings["fit_on"]
    stats = {"requested": int(resamples), "succeeded": 0, "failed": 0}
    if resamples <= 0:
        return np.empty((0, 4)), stats
    rng = np.random.default_rng(settings["seed"])
    runs = sorted({run for g in groups for run in g.runs})
    index = {run: i for i, run in enumerate(runs)}
    drawn = rng.integers(0, len(runs), size=(resamples, len(runs)))
    counts = np.bincount((np.arange(resamples)[:, None] * len(runs) + drawn).ravel(), minlength=resamples * len(runs))
    counts = counts.reshape(resamples, len(runs)).astype(float)

    # Step 3 on every (resample, group): binned data, then one batched refit.
    G = len(groups)
    data = [_resampled_bins(g, counts[:, [index[r] for r in g.runs]], fit_on, frontier.bucket) for g in groups]
    width = max(u.shape[1] for u, _, _, _ in data)
    u, y, w, cover = (np.zeros((resamples, G, width)), np.zeros((resamples, G, width)), np.zeros((resamples, G, width)),
                      np.zeros((resamples, G, 2)))
    for j, (gu, gy, gw, gcover) in enumerate(data):
        u[:, j, : gu.shape[1]], y[:, j, : gu.shape[1]], w[:, j, : gu.shape[1]] = gu, gy, gw
        cover[:, j] = gcover
    fittable = (w > 0).sum(axis=2) >= MIN_POINTS
    present = w.sum(axis=2) > 0
    r0 = None
    if free_r0 is not None:
        r0_by_group = np.array([free_r0[g.key] for g in groups])
        r0 = np.nanmedian(np.where(present, r0_by_group, np.nan), axis=1)  # (resamples,)
    b_idx, g_idx = np.nonzero(fittable)
    fits = _refit_batch(u[b_idx, g_idx], y[b_idx, g_idx], w[b_idx, g_idx],
                        None if r0 is None else r0[b_idx], [curves[groups[j].key] for j in g_idx])
    curve_params = np.full((resamples, G, 4), np.nan)
    curve_params[b_idx, g_idx] = fits

    # Steps 4 and 5 on every resample.
    log2_n = np.log2([float(g.key[0]) for g in groups])
    has_curve = ~np.isnan(curve_params[:, :, 0])
    distinct_n = np.array([len(set(log2_n[row])) for row in has_curve])
    cover = np.where(has_curve[:, :, None], cover, np.nan)
    grids = [_grid(float(np.nanmin(c[:, 0])), float(np.nanmax(c[:, 1])), settings["grid_per_decade"])
             if ok else np.array([]) for c, ok in zip(cover, distinct_n >= 2)]
    grid = np.full((resamples, max(len(g) for g in grids)), np.nan)
    for i, g in enumerate(grids):
        grid[i, : len(g)] = g
    _, winner, smoothed = envelope(curve_params, np.nan_to_num(cover, nan=-1.0), log2_n, grid, settings["window"])
    covered = winner >= 0
    winners = np.where(covered, log2_n[np.maximum(winner, 0)], np.nan)
    ok = (distinct_n >= 2) & (covered.sum(axis=1) >= 4) & (np.nanmax(winners, axis=1, initial=-np.inf)
                                                             > np.nanmin(winners, axis=1, initial=np.inf))
    draws = np.empty((0, 4))
    if ok.any():
        x = np.log10(np.where(covered[ok], grid[ok], 1.0))
        draws, converged = _sigmoid_batch(x, np.where(covered[ok], smoothed[ok], 0.0), covered[ok].astype(float),
                                          params, n_range, settings["k_max"])
        draws = draws[converged]
    stats["succeeded"] = len(draws)
    stats["failed"] = int(resamples - len(draws))
    return draws, stats


def _resampled_bins(g: _Group, counts: np.ndarray, fit_on: str, bucket: float):
    """One group's binned fit data on every resample: (ln C, mean reward, weight) as (resamples, bins)
    arrays (weight 0 = empty bin) and the (resamples, 2) C range its resampled runs cover.

    ``counts``: (resamples, runs of the group), how often each run was drawn.
    """
    pts = g.points
    run_ids = pd.Categorical(pts["run"], categories=g.runs).codes.astype(np.int64)  # g.runs: every run of the group
    c, reward = pts["C"].to_numpy(dtype=float), pts["reward"].to_numpy(dtype=float)
    chosen = counts > 0
    run_lo = np.full(len(g.runs), np.inf)
    run_hi = np.full(len(g.runs), -np.inf)
    np.minimum.at(run_lo, run_ids, c)
    np.maximum.at(run_hi, run_ids, c)
    cover = np.stack([np.where(chosen, run_lo, np.inf).min(axis=1), np.where(chosen, run_hi, -np.inf).max(axis=1)], axis=1)
    if fit_on == "records":
        return (*_resampled_record_bins(run_ids, c, reward, counts, bucket), cover)
    # fit_on == "all": each run's sums per bin, weighted by how often the resample drew the run.
    log_c = np.log(c)
    ids = _bin_ids(log_c)
    bins, local = np.unique(ids, return_inverse=True)
    flat = run_ids * len(bins) + local
    shape = (len(g.runs), len(bins))
    per_run = [np.bincount(flat, weights=v, minlength=shape[0] * shape[1]).reshape(shape)
               for v in (np.ones_like(c), log_c, reward)]
    # einsum, not @: a BLAS matmul this small is slower than its own thread start-up on a busy machine
    total, sum_log_c, sum_reward = (np.einsum("rk,kb->rb", counts, m) for m in per_run)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_log_c = np.where(total > 0, sum_log_c / total, 0.0)
        mean = np.where(total > 0, sum_reward / total, 0.0)
    return mean_log_c, mean, total, cover


def _resampled_record_bins(run_ids, c, reward, counts, bucket):
    """``fit_on="records"``: per resample, the record-breaking points of the union of the drawn runs'
    own records (a record counts once, however often its run was drawn), binned."""
    from verl_isocompute.scaling.frontier import record_mask

    own = np.zeros(len(c), dtype=bool)
    for run in np.unique(run_ids):
        at = np.flatnonzero(run_ids == run)
        own[at[record_mask(c[at], reward[at], bucket)]] = True
    run_ids, c, reward = run_ids[own], c[own], reward[own]
    rows = []
    for drawn in counts > 0:
        take = drawn[run_ids]
        keep = record_mask(c[take], reward[take], bucket)
        rows.append(bin_points(c[take][keep], reward[take][keep]) if keep.sum() else (np.ones(1), np.zeros(1), np.zeros(1)))
    width = max(len(r[0]) for r in rows)
    out = [np.zeros((len(rows), width)) for _ in range(3)]
    for i, (bc, by, bw) in enumerate(rows):
        out[0][i, : len(bc)], out[1][i, : len(bc)], out[2][i, : len(bc)] = np.log(bc), by, bw
    return tuple(out)


def _refit_batch(u, y, w, r0, starts: list[SaturatingCurve]) -> np.ndarray:
    """Refit N saturating curves (rows of binned data, weight 0 = padding) from ``starts``; rows of
    (R0, A, ln C_mid, beta), NaN where a refit did not converge."""
    if not len(u):
        return np.empty((0, 4))
    valid = w > 0
    u_min = np.where(valid, u, np.inf).min(axis=1)
    u_max = np.where(valid, u, -np.inf).max(axis=1)
    y_min = np.where(valid, y, np.inf).min(axis=1)
    y_max = np.where(valid, y, -np.inf).max(axis=1)
    share = (y_min >= 0.0) & (y_max <= 1.0)  # _reward_bounds, row by row
    span = np.maximum(np.maximum(y_max - y_min, np.abs(y_max) * 0.1), 1e-9)
    lo, hi = np.where(share, 0.0, y_min - span), np.where(share, 1.0, y_max + span)
    if r0 is not None:
        lo, hi = np.minimum(lo, r0), np.maximum(hi, r0)
    lower, upper = (np.stack(np.broadcast_arrays(*bounds), axis=1) for bounds in _saturating_box(u_min, u_max, lo, hi, r0))
    start = np.array([_pack(curve, lo[i], None if r0 is None else r0[i]) for i, curve in enumerate(starts)])
    lo_col, r0_col = lo[:, None], None if r0 is None else r0[:, None]
    u = np.where(valid, u, u_min[:, None])  # padding: any finite C (its weight is 0)

    def problem(p, rows):
        value, jac = _saturating_terms(p, u[rows], lo_col[rows], None if r0_col is None else r0_col[rows])
        return value - y[rows], jac

    fitted, _, converged = least_squares_batch(problem, start, lower, upper, w)
    if r0 is None:
        A, f, um, beta = fitted.T
        out = np.stack([A - f * (A - lo), A, um, beta], axis=1)
    else:
        A, um, beta = fitted.T
        out = np.stack([r0, A, um, beta], axis=1)
    out[~converged] = np.nan
    return out


def _sigmoid_batch(x, y, w, start, n_range, k_max) -> tuple[np.ndarray, np.ndarray]:
    """Refit the n*(C) sigmoid to N smoothed envelopes (rows, weight 0 = padding) from ``start``."""
    valid = w > 0
    x_min = np.where(valid, x, np.inf).min(axis=1)
    x_max = np.where(valid, x, -np.inf).max(axis=1)
    lower, upper = (np.stack(np.broadcast_arrays(*bounds), axis=1) for bounds in _sigmoid_box(x_min, x_max, n_range, k_max))
    x = np.where(valid, x, x_min[:, None])

    def problem(p, rows):
        L, k, x0, b = (p[:, i, None] for i in range(4))
        return sigmoid_log2_n(x[rows], L, k, x0, b) - y[rows], sigmoid_log2_n_jacobian(x[rows], L, k, x0, b)

    fitted, _, converged = least_squares_batch(problem, np.broadcast_to(start, lower.shape).copy(), lower, upper, w)
    return fitted, converged & np.all(np.isfinite(fitted), axis=1)


def _provenance(frontier, groups, settings, fit, ci, stats) -> dict[str, Any]:
    from verl_isocompute import __version__

    runs = sorted({run for g in groups for run in g.runs})
    prov: dict[str, Any] = {
        "source": "isocompute fit (IsoCompute playbook workflow, arXiv 2603.12151 section 4)",
        "tool_version": __version__,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "num_runs": len(runs),
        "runs": runs,
        "b_problem": sorted(int(b) for b in frontier.points["b_problem"].unique()),
        **settings,
        "r2": fit.r2,
        "rmse_log2_n": fit.rmse,
        "at_bounds": list(fit.at_bounds),
        "bootstrap_succeeded": stats["succeeded"],
    }
    if ci is not None:
        prov["ci95"] = {row.param: [float(row.low), float(row.high)] for row in ci.itertuples()}
    return prov
