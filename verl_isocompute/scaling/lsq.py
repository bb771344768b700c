"""Many small bounded least-squares problems solved together: the bootstrap's refits.

The bootstrap of ``isocompute fit`` (:mod:`verl_isocompute.scaling.fit`) refits every group's saturating
curve on each resample of runs, then the n*(C) sigmoid on each resample's envelope: thousands of fits of
3 or 4 parameters, each starting next to its answer (the full-data fit). One
``scipy.optimize.least_squares`` call per fit spends most of its ~2 ms in Python overhead, so here the
same problems are stacked and solved in lock step with a Levenberg-Marquardt iteration on numpy arrays
(Marquardt's scaled damping, More 1978, "The Levenberg-Marquardt algorithm: implementation and theory"),
each problem keeping its own damping and stopping on its own. Bounds are kept by projecting every step
onto the box; a step that does not lower a problem's cost is rejected and its damping raised.

A refit may need many steps: where the data do not pin a curve down (a flat ridge, C_mid not identified) the
cost falls slowly all the way to its minimum. 100 steps left about 40% of such refits unconverged, and the
bootstrap leaves an unconverged refit out, so the intervals were taken over the resamples that happened to be
easy; 1,000 let every one of them finish (``tests/test_nstar_sweep.py``) for a fraction of a second more.

The full-data fits stay with scipy's ``least_squares`` (several starts, trust-region reflective): this
module is only for refits from a good start, where both converge to the same minimum.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

# fun(params (K, P), rows (K,)) -> (residuals (K, M), jacobian (K, M, P)) of the problems numbered ``rows``
Problem = Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]


def least_squares_batch(
    fun: Problem,
    start: np.ndarray,
    lower: np.ndarray,
    upper: np.ndarray,
    weight: np.ndarray,
    max_iter: int = 1000,
    rtol: float = 1e-8,  # scipy least_squares' default ftol
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Minimise 1/2 sum_m weight[n, m] * r[n, m]^2 for each problem n within lower <= p <= upper.

    ``start``, ``lower``, ``upper``: (N, P); ``weight``: (N, M), 0 for padding. ``fun`` is asked only for
    the problems still running. Returns (params (N, P), cost (N,), converged (N,)): a problem has
    converged when a step lowered its cost by less than ``rtol`` of it, or when no step can lower or
    move it any more (at a bound, or at the minimum to machine precision).
    """
    lower = np.broadcast_to(lower, start.shape)
    upper = np.broadcast_to(upper, start.shape)
    params = np.clip(start, lower, upper)
    everyone = np.arange(len(params))
    residual, jac = fun(params, everyone)
    cost = 0.5 * (weight * residual**2).sum(axis=1)
    damping = np.full(len(params), 1e-3)
    converged = np.zeros(len(params), dtype=bool)
    running = everyone[np.isfinite(cost)]
    eye = np.eye(params.shape[1])
    for _ in range(max_iter):
        if not len(running):
            break
        # The problems still running, packed: residual and jac hold exactly these rows.
        w, p, lam = weight[running], params[running], damping[running]
        wj_t = (jac * w[:, :, None]).transpose(0, 2, 1)  # (K, P, M): batched matmuls beat einsum here
        gradient = (wj_t @ residual[:, :, None])[:, :, 0]
        hessian = wj_t @ jac
        scale = np.maximum(np.diagonal(hessian, axis1=1, axis2=2), 1e-12)
        system = hessian + lam[:, None, None] * scale[:, :, None] * eye
        try:
            step = np.linalg.solve(system, -gradient[:, :, None])[:, :, 0]
        except np.linalg.LinAlgError:  # one singular system: solve one by one, leaving the bad one still
            step = np.stack([_solve_or_zero(a, -g) for a, g in zip(system, gradient)])
        trial = np.clip(p + step, lower[running], upper[running])
        # A step that no longer moves any parameter (at the minimum, or pushing against a bound) ends the problem.
        still = np.all(np.abs(trial - p) <= 1e-12 * (np.abs(p) + 1e-12), axis=1)
        trial_residual, trial_jac = fun(trial, running)
        trial_cost = 0.5 * (w * trial_residual**2).sum(axis=1)
        old_cost = cost[running]
        better = ~still & np.isfinite(trial_cost) & (trial_cost < old_cost)
        small_gain = better & (old_cost - trial_cost <= rtol * np.maximum(old_cost, 1e-300))
        params[running[better]] = trial[better]
        cost[running[better]] = trial_cost[better]
        damping[running] = np.where(better, lam / 3.0, lam * 4.0)
        residual = np.where(better[:, None], trial_residual, residual)
        jac = np.where(better[:, None, None], trial_jac, jac)
        done = still | small_gain | (~better & (damping[running] > 1e12))
        converged[running[done]] = True
        running, residual, jac = running[~done], residual[~done], jac[~done]
    return params, cost, converged


def _solve_or_zero(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    try:
        return np.linalg.solve(a, b)
    except np.linalg.LinAlgError:
        return np.zeros_like(b)
