"""Step 3 of the fit (arXiv 2603.12151, section 4): one saturating reward-vs-compute curve per group of runs.

ScaleRL's form (arXiv 2510.13786), R(C) = R0 + (A - R0) / (1 + (C_mid / C)^beta), fitted by bounded least
squares from several starts (:func:`fit_saturating`), to points pooled in bins of 1/50 decade of C
(:func:`bin_points`); :func:`refit_batch` refits many curves in lock step (the bootstrap). Why these
choices: :mod:`verl_isocompute.scaling.fit`. :func:`fit_flags` says what of a fitted curve its points do not
determine.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.optimize import least_squares
from scipy.special import expit

from verl_isocompute.scaling.errors import FitError, ScalingError
from verl_isocompute.scaling.lsq import least_squares_batch

MIN_POINTS = 4  # the saturating curve has 4 parameters
# A fitted parameter within this share of its value (at least of 1) of a bound of the fit's box sits on it: loose
# enough for a solver that stops just short of a bound on a flat cost (beta = 19.96 for the pilot's n = 2 fitted alone).
BOUND_RTOL = 5e-3
# R0 is measured only by points on the lower half of the curve: with fewer than this many below C_mid, R0 and
# C_mid trade off against each other (one low point is met by any step through it), so R0 is extrapolated.
MIN_POINTS_BELOW_MID = 2
BINS_PER_DECADE = 50  # points pooled within 1/50 decade (~5%) of C before fitting, see bin_points
_LN10 = math.log(10.0)


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
    ids = bin_ids(log_c)
    ids -= ids.min()
    total = np.bincount(ids, weights=w)
    used = total > 0
    total = total[used]
    mean_log_c = np.bincount(ids, weights=w * log_c)[used] / total
    mean = np.bincount(ids, weights=w * reward)[used] / total
    return np.exp(mean_log_c), mean, total


def bin_ids(log_c: np.ndarray) -> np.ndarray:
    return np.floor(log_c * (BINS_PER_DECADE / _LN10)).astype(np.int64)


def params_at_bounds(names, x, lower, upper, rtol: float) -> dict[str, str]:
    """The parameters of a bounded least-squares solution that sit on a bound: name -> "lower" | "upper"."""
    out = {}
    for name, v, lo, hi in zip(names, x, lower, upper):
        slack = rtol * max(1.0, abs(float(v)))
        if v - lo <= slack or hi - v <= slack:
            out[name] = "lower" if v - lo <= hi - v else "upper"
    return out


def best_of_starts(residual, jacobian, starts, lower, upper, max_nfev, margin):
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

    best = best_of_starts(residual, jacobian, starts, lower, upper, max_nfev, margin=1e-12)
    if best is None:
        if start is not None:
            return fit_saturating(compute, reward, weight, r0=r0, max_nfev=max_nfev)
        raise FitError(f"the saturating fit did not converge from {len(starts)} starts")
    curve = _unpack(best.x, lo, r0)
    return curve, float(np.sqrt(np.sum(best.fun**2) / np.sum(sqrt_w**2)))


@dataclass(frozen=True)
class FitFlags:
    """What the points of a group do not determine about its fitted curve (reported, and kept in curve.json).

    ``at_bounds``: curve parameter -> the bound of the fit's box it sits on ("R0" at its upper bound means
    R0 = A, a flat curve; "A" at its lower bound the same with a shared R0); the optimum is then the box's edge,
    not a value the data chose. ``not_identified``: "C_mid" when it lies outside the C range of the points (the
    rise is not seen, so neither is beta), "R0" when fewer than :data:`MIN_POINTS_BELOW_MID` points lie below
    C_mid (R0 is extrapolated below the data) or R0 sits on a bound (R0 = A: a flat curve shows no start).
    """

    at_bounds: dict[str, str]
    not_identified: tuple[str, ...]


def fit_flags(curve: SaturatingCurve, compute: np.ndarray, reward: np.ndarray, r0: float | None = None) -> FitFlags:
    """:class:`FitFlags` of ``curve`` fitted by :func:`fit_saturating` to (binned) ``compute``, ``reward``
    (with the same ``r0``): its parameters tested against the same box the fit used."""
    u = np.log(np.asarray(compute, dtype=float))
    lo, hi = _reward_bounds(np.asarray(reward, dtype=float))
    if r0 is not None:
        lo, hi = min(lo, r0), max(hi, r0)
    lower, upper = _saturating_box(float(u.min()), float(u.max()), lo, hi, r0)
    # the packed parameters are (A, f, ln C_mid, beta) or (A, ln C_mid, beta); f = 1 is R0 = lo, f = 0 is R0 = A
    names = ("A", "R0", "C_mid", "beta") if r0 is None else ("A", "C_mid", "beta")
    hits = params_at_bounds(names, _pack(curve, lo, r0), lower, upper, BOUND_RTOL)
    if "R0" in hits:
        hits["R0"] = "upper" if hits["R0"] == "lower" else "lower"
    not_identified = []
    if "R0" in hits or (u < math.log(curve.C_mid)).sum() < MIN_POINTS_BELOW_MID:
        not_identified.append("R0")
    if not u.min() <= math.log(curve.C_mid) <= u.max():
        not_identified.append("C_mid")
    return FitFlags({name: hits[name] for name in ("R0", "A", "C_mid", "beta") if name in hits}, tuple(not_identified))


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


def refit_batch(u, y, w, r0, starts: list[SaturatingCurve]) -> np.ndarray:
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
