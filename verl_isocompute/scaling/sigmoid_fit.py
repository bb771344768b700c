"""Step 5 of the fit (arXiv 2603.12151, section 4): the n*(C) sigmoid, log2 n*(C) = L / (1 + exp(-k (log10 C -
log10 C0))) + b, fitted to the smoothed envelope by bounded least squares (:func:`fit_sigmoid`), or to
many envelopes at once (:func:`sigmoid_batch`, the bootstrap).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from verl_isocompute.scaling.curve import sigmoid_log2_n, sigmoid_log2_n_jacobian
from verl_isocompute.scaling.errors import FitError
from verl_isocompute.scaling.fit_defaults import K_MAX
from verl_isocompute.scaling.lsq import least_squares_batch
from verl_isocompute.scaling.saturating import best_of_starts, params_at_bounds

K_MIN = 1e-3  # the sigmoid's k is fitted in [K_MIN, k_max]


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
    best = best_of_starts(residual, jacobian, starts, lower, upper, max_nfev, margin=1e-9)
    if best is None:
        raise FitError(
            f"the n*(C) sigmoid fit did not converge from {len(starts)} starts; no curve was written. "
            "Check n*(C) in the report: it needs a rise from small to large n within the C range of the runs"
        )
    names = ("L", "k", "log10_C0", "b")
    at_bounds = tuple(params_at_bounds(names, best.x, lower, upper, rtol=1e-6))
    ss_res = float(np.sum(best.fun**2))
    ss_tot = float(np.sum((y - y.mean()) ** 2))
    return SigmoidFit(
        *(float(v) for v in best.x),
        r2=1.0 - ss_res / ss_tot if ss_tot > 0 else float("nan"),
        rmse=float(np.sqrt(np.mean(best.fun**2))),
        residuals=best.fun.copy(),
        at_bounds=at_bounds,
    )


def sigmoid_batch(x, y, w, start, n_range, k_max) -> tuple[np.ndarray, np.ndarray]:
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
