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
     refitted with it, from the same several starts as the first pass (one start from the first-pass
     curve stopped at a local optimum on the real CPU pilot, docs/EVIDENCE.md). With R0 free, noise in the
     first evaluations decides n* at small C, where all curves lie within noise of each other: worst error
     1.05 doublings against 0.42.
   Points are pooled in bins of 1/50 decade of C first (:func:`bin_points`): exact when a bin holds
   one point, the same fit up to the curve's change within 5% of C otherwise, and fast for 500 runs.
   A least-squares optimum is not a measurement of every parameter: each curve is flagged
   (:class:`~verl_isocompute.scaling.saturating.FitFlags`) when a parameter sits on the box the fit allows
   (beta in [0.02, 20], C_mid within 3 decades of the points, lo <= R0 <= A <= hi), when C_mid lies outside
   the C range of its points, and when R0 is not measured (fewer than two points below C_mid; with a shared
   R0: in no group's first-pass fit). The report and curve.json carry the flags.
4. The frontier is the upper envelope of the fitted curves on a log grid of C, and n*(C) = argmax_n R_n(C).
   A curve competes only inside the C range its runs cover: below it the run has not been evaluated, past
   it the curve would be extrapolated. log2 n*(C) is then smoothed by a centred running average over
   ``window`` grid points (chosen: 5 points at 20 points per decade, a quarter of a decade).
5. The sigmoid printed on the playbook's figures, C in the compute unit, log10 for C, log2 for n:

       log2 n*(C) = L / (1 + exp(-k (log10 C - log10 C0))) + b

   fitted to the smoothed n*(C) with bounds (k <= 50 by default: the playbook's Hard joint fit printed
   k = 50.00, evidently a bound), reported with R^2, residuals, and bootstrap confidence intervals: runs are
   resampled with replacement and steps 3 to 5 redone on each resample. ``bootstrap_over="seeds"`` (default)
   draws each group's runs from that group's own runs (its seeds), so every resample has every n and the
   spread is run-to-run variation; a group with one run then contributes none, and with one run per group
   the variation is not measured: the fit says so and gives no intervals. ``bootstrap_over="runs"`` draws
   from all runs together (before 0.2.0 the only way): a resample can leave an n out, so the spread also
   says which n were run.

A fit that does not converge raises :class:`FitError` rather than returning a bogus curve. When n*(C)
cannot be fitted at all (one value of n, or too few points) the result has ``curve=None`` and says why in
``no_curve_reason``; the frontier and the per-n fits are still there. When one n is n* at every C the runs
cover, that is the answer over the range: the curve is flat (L = 0; k and C0 are placeholders, marked not
identified), ``flat`` holds the bootstrap's support for it (on how many resamples the same n wins
everywhere), and a warning says when that n is the largest (or, above 2, the smallest) n run, where the
compute-optimal n may lie beyond the runs.

One module per step: :mod:`~verl_isocompute.scaling.groups` (the groups of runs),
:mod:`~verl_isocompute.scaling.saturating` (step 3), :mod:`~verl_isocompute.scaling.envelope` (step 4),
:mod:`~verl_isocompute.scaling.sigmoid_fit` (step 5), :mod:`~verl_isocompute.scaling.bootstrap` (the
intervals); :func:`fit_frontier` here runs them in order.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Sequence

import numpy as np
import pandas as pd

from verl_isocompute import _compat
from verl_isocompute.scaling.bootstrap import bootstrap_curves, bootstrap_flat, bootstrap_sigmoid, flat_vs_moving
from verl_isocompute.scaling.curve import Curve, sigmoid_log2_n
from verl_isocompute.scaling.envelope import GRID_PER_DECADE, edge_switches, empty_grid, envelope_table, grid_top, log_grid
from verl_isocompute.scaling.errors import FitError, ScalingError
from verl_isocompute.scaling.fit_defaults import (
    BOOTSTRAP_OVER,
    DEFAULT_BOOTSTRAP,
    DEFAULT_BOOTSTRAP_OVER,
    DEFAULT_WINDOW,
    K_MAX,
)
from verl_isocompute.scaling.points import Frontier
from verl_isocompute.scaling.groups import flag_warnings, group_flags, group_keys, group_label, group_row, make_groups
from verl_isocompute.scaling.provenance import flat_provenance, sigmoid_provenance
from verl_isocompute.scaling.resolved import decide
from verl_isocompute.scaling.saturating import MIN_POINTS, FitFlags, SaturatingCurve
from verl_isocompute.scaling.sigmoid_fit import fit_sigmoid

FIT_ON = ("records", "all")
# A flat n*(C) (one n best at every C) is the curve L = 0, where k and C0 change nothing; the contract still
# asks for k > 0 and a finite C0: k = 1 and C0 in the middle of the fitted range, marked not identified.
FLAT_K = 1.0

# Names that lived here until 0.2 and moved with their step; the old path works for one release.
_MOVED = {
    **dict.fromkeys(("saturating_reward", "bin_points", "fit_saturating", "BINS_PER_DECADE"), "verl_isocompute.scaling.saturating"),
    **dict.fromkeys(("SigmoidFit", "K_MIN"), "verl_isocompute.scaling.sigmoid_fit"),
    **dict.fromkeys(("envelope",), "verl_isocompute.scaling.envelope"),
    **dict.fromkeys(("GROUP_BYS",), "verl_isocompute.scaling.groups"),
}

__getattr__ = _compat.moved_names(__name__, _MOVED)


# --- steps 3 to 5 together -----------------------------------------------------------------------------


@dataclass
class FrontierFit:
    """Everything ``fit_frontier`` found; plain tables and values, ready for a notebook.

    ``groups``: one row per group (n, or (n, b_problem)) with its runs, points, covered C range, fitted
    R0 / A / C_mid / beta, RMSE, status, and its flags as text (``at_bounds``: "beta=upper", ...;
    ``not_identified``: "R0, C_mid"). ``curves``: group key -> :class:`SaturatingCurve`; ``flags``: group
    key -> :class:`FitFlags`.
    ``grid``: one row per grid value of C: ``C``, ``reward`` (the envelope), ``n_star``, ``b_problem_star``,
    ``log2_n_star``, ``log2_n_star_smoothed``, ``log2_n_star_fit``, ``residual``, and the bootstrap band
    ``log2_n_star_low`` / ``log2_n_star_high``. ``curve``: the fitted :class:`Curve` (None when n*(C)
    could not be fitted: ``no_curve_reason`` says why). ``ci``: one row per sigmoid parameter with its
    estimate and 95% bootstrap interval. ``bootstrap_params``: (resamples, 4) array of L, k, log10_C0, b.
    ``curve_draws``: group key -> (resamples, 4) rows (R0, A, ln C_mid, beta) of its curve refitted on each
    bootstrap resample (NaN: not refitted there; the same resamples for every group, empty without a bootstrap).
    ``flat``: set when one n is n* at every C (``curve`` is then flat, L = 0): the bootstrap's support for it
    (:func:`~verl_isocompute.scaling.bootstrap.bootstrap_flat`); None otherwise.
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
    flags: dict[tuple, FitFlags] = field(default_factory=dict)
    curve_draws: dict[tuple, np.ndarray] = field(default_factory=dict)
    flat: dict[str, int] | None = None

    @property
    def n_star_flat(self) -> int | None:
        """The n that is n* at every C, when the curve is flat (``flat``: the bootstrap's support); else None."""
        return None if self.flat is None or self.curve is None else round(self.curve.n_floor)

    def summary(self) -> str:
        """One line on n*(C), as ``isocompute fit`` and ``isocompute sweep`` print it (None curve: the reason)."""
        c = self.curve
        if c is None:
            return f"no n*(C) curve: {self.no_curve_reason}"
        span = f"C in [{c.c_range[0]:.3g}, {c.c_range[1]:.3g}] {c.compute_unit}"
        if self.flat is not None:
            support = (f"; the same n in {self.flat['flat']} of {self.flat['succeeded']} bootstrap resamples"
                       if self.flat["succeeded"] else "")
            return f"n*(C) = {self.n_star_flat} at every {span} (a flat curve, L = 0{support})"
        return (f"n*(C): L={c.L:.3f} k={c.k:.3f} log10_C0={c.log10_C0:.3f} b={c.b:.3f} (R^2={self.r2:.3f}); "
                f"n* from {c.n_floor:.0f} to {c.n_ceiling:.0f} over {span}")

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
    bootstrap_over: str = DEFAULT_BOOTSTRAP_OVER,
) -> FrontierFit:
    """Per-group curves, their envelope, n*(C) and its sigmoid, with bootstrap intervals over seeds or runs.

    Raises :class:`FitError` when a fit does not converge; returns ``curve=None`` (with the reason) when
    the runs cannot determine n*(C) (one value of n, too few points), and a flat curve when the same n is
    best at every C.
    """
    keys = group_keys(group_by)
    if fit_on not in FIT_ON:
        raise ScalingError(f"fit_on must be one of {', '.join(FIT_ON)}, got {fit_on!r}")
    if window < 1 or grid_per_decade < 1:
        raise ScalingError("window and grid_per_decade must be positive integers")
    if not k_max > 0:
        raise ScalingError(f"k_max must be positive, got {k_max}")
    if bootstrap_over not in BOOTSTRAP_OVER:
        raise ScalingError(f"bootstrap_over must be one of {', '.join(BOOTSTRAP_OVER)}, got {bootstrap_over!r}")
    points = frontier.points
    warnings: list[str] = []
    if keys == ("n",) and points["b_problem"].nunique() > 1:
        warnings.append(
            f"runs use several b_problem values ({', '.join(str(b) for b in sorted(points['b_problem'].unique()))}) "
            "and are grouped by n alone; use --group-by n,b_problem for the joint question"
        )
    groups = make_groups(points, keys, frontier.bucket, fit_on)
    runs_per_group = {len(g.runs) for g in groups}
    if fit_on == "records" and len(runs_per_group) > 1:
        warnings.append(
            f"groups have different numbers of runs ({min(runs_per_group)} to {max(runs_per_group)}): the "
            "record-breaking points of a group with more runs are a best-of-more-seeds, biased upwards; "
            "consider --fit-on all"
        )
    settings = dict(
        group_by=",".join(keys), fit_on=fit_on, shared_r0=shared_r0, bucket=frontier.bucket, half_life=frontier.half_life,
        window=window, grid_per_decade=grid_per_decade, k_max=k_max, bootstrap=bootstrap, seed=seed,
        bootstrap_over=bootstrap_over,
    )

    # Step 3, first pass: each group on its own (R0 free).
    rows, free, failures = [], {}, []
    for g in groups:
        row = group_row(g, keys)
        try:
            free[g.key] = g.fit(max_nfev=max_nfev)
            row["status"] = "fitted"
        except FitError as exc:
            row["status"] = "did not converge"
            failures.append(f"{group_label(g.key, keys)}: {exc}")
        except ScalingError:
            row["status"] = f"too few points ({len(g.fit_points)})"
            points = f"{len(g.fit_points)} {'record-breaking ' if fit_on == 'records' else ''}points"
            if (distinct := g.distinct_c()) < len(g.fit_points):  # seeds validated at the same C count once
                points += f" at {distinct} value{'s' if distinct != 1 else ''} of C"
            warnings.append(
                f"{group_label(g.key, keys)}: only {points}, need {MIN_POINTS} values of C: not fitted"
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
            results[g.key] = g.fit(r0=r0, max_nfev=max_nfev)
        settings["r0"] = r0
    curves = {key: curve for key, (curve, _) in results.items()}
    flags = group_flags(fitted, free, curves, r0)
    warnings.extend(flag_warnings(fitted, curves, flags, keys, r0))
    for row, g in zip(rows, groups):
        if g.key in results:
            curve, rmse = results[g.key]
            row.update(R0=curve.R0, A=curve.A, C_mid=curve.C_mid, beta=curve.beta, rmse=rmse)
        f = flags.get(g.key, FitFlags({}, ()))
        row.update(at_bounds=", ".join(f"{name}={side}" for name, side in f.at_bounds.items()),
                   not_identified=", ".join(f.not_identified))
    group_table = pd.DataFrame(rows)
    # The bootstrap's step 3 once, before n*(C) is known: the per-n intervals of the comparison need it even
    # when n*(C) has no sigmoid (the same n best everywhere), and the sigmoid's bootstrap reuses it.
    free_r0 = {key: c.R0 for key, (c, _) in free.items()} if r0 is not None else None
    resampled = bootstrap_curves(frontier, fitted, curves, free_r0, settings) if fitted else (None, None)
    curve_draws = {} if resampled[0] is None else {g.key: resampled[0][:, j] for j, g in enumerate(fitted)}

    def result(grid, **kw):
        return FrontierFit(frontier, keys, group_table, curves, grid, settings=settings, warnings=warnings,
                           flags=flags, curve_draws=curve_draws, **kw)

    if not fitted:
        reason = f"no group has the {MIN_POINTS} validation points at C > 0 that a curve needs"
        return result(empty_grid(), curve=None, no_curve_reason=reason)
    settings["grid_top"] = grid_top(fitted)  # the resamples' grids end there too (bootstrap.resampled_envelopes)
    grid_c = log_grid(min(float(g.points["C"].min()) for g in fitted), settings["grid_top"], grid_per_decade)
    table = envelope_table(fitted, curves, grid_c, keys, window)
    n_values = sorted({g.key[0] for g in groups})
    fitted_n = sorted({g.key[0] for g in fitted})
    if len(fitted_n) < 2:
        reason = (
            f"only one value of n ({n_values[0]}) in the runs" if len(n_values) < 2
            else f"only the runs with n={fitted_n[0]} have enough points for a curve"
        ) + ": the frontier is there, but n*(C) needs fitted curves for at least two values of n"
        return result(table, curve=None, no_curve_reason=reason)
    single = [group_label(g.key, keys) for g in fitted if len(g.runs) == 1]
    if bootstrap and bootstrap_over == "seeds" and len(single) == len(fitted):
        warnings.append("every group has a single run: the run-to-run variation is not measured, so the fit has no "
                        "bootstrap intervals; run two or more seeds per n (--bootstrap-over runs only leaves whole "
                        "groups out, which shows which n were run, not the noise)")
    elif bootstrap and bootstrap_over == "seeds" and single:
        warnings.append(f"{', '.join(single)}: a single run, which the bootstrap over seeds cannot resample: the "
                        "intervals leave out the run-to-run variation of these groups; run two or more seeds per n")
    elif bootstrap and len(single) == len(fitted):
        # A resample of runs can then only leave whole groups out (or repeat the data): its spread says how
        # the answer depends on which n were run, not how noisy the points are. On the real CPU pilot (3
        # groups, docs/EVIDENCE.md) the resamples that fit are the data again and the intervals collapse.
        warnings.append("every group has a single run, so the bootstrap over runs can only leave whole groups out: "
                        "its intervals do not show the noise of the points; run several seeds per n for that")

    only, half, notes = decide(fitted, curves, curve_draws, grid_c, table)  # only resolved wins count (issue 43)
    warnings.extend(notes)
    if only is not None:
        # One n wins wherever the runs resolve a difference: an answer, not a failed fit, written as the flat curve
        # L = 0 (k and C0 then change nothing); the bootstrap says on how many resamples that n wins everywhere.
        half = None if half is None else (grid_c, half)
        flat = bootstrap_flat(frontier, fitted, curves, free_r0, math.log2(only), settings, resampled, half)
        warnings.extend(_flat_warnings(only, fitted_n) + flat_vs_moving(flat, moving_fit=False))  # the n in the envelope: an unfitted n was not compared
        table["log2_n_star_fit"] = math.log2(only)
        table["residual"] = table["log2_n_star_smoothed"] - table["log2_n_star_fit"]
        c_range = (float(grid_c[0]), float(grid_c[-1]))
        curve = Curve(L=0.0, k=FLAT_K, log10_C0=float(np.mean(np.log10(c_range))), b=math.log2(only),
                      compute_unit=frontier.compute_unit, metric=frontier.metric, c_range=c_range,
                      n_grid=tuple(int(n) for n in n_values), provenance=flat_provenance(frontier, groups, settings, flat))
        return result(table, curve=curve, rmse=0.0, bootstrap=flat, flat=flat)

    edges, crossings = edge_switches(fitted, curves, grid_c)
    if edges and not crossings:
        warnings.append(
            f"n* changes only where the runs of an n begin or end (near C = {', '.join(f'{c:.3g}' for c in edges)}), "
            "never where one n's curve overtakes another's: there the sigmoid shows which n were run at that C (a "
            "larger n spends more on its first step), not that a larger n pays off at larger C. Where both were run, "
            "compare the curves themselves: compare.csv, or isocompute allocate --compare"
        )

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
    draws, stats = bootstrap_sigmoid(frontier, fitted, curves, free_r0, params, n_range, settings, resampled,
                                     None if half is None else (grid_c, half))
    ci = None
    if len(draws):
        low, high = np.percentile(draws, [2.5, 97.5], axis=0)
        ci = pd.DataFrame({"param": ["L", "k", "log10_C0", "b"], "estimate": params, "low": low, "high": high})
        band = sigmoid_log2_n(x[None, :], *(draws.T[:, :, None]))
        table["log2_n_star_low"] = np.percentile(band, 2.5, axis=0)
        table["log2_n_star_high"] = np.percentile(band, 97.5, axis=0)
    if bootstrap and stats["failed"]:
        warnings.append(f"{stats['failed']} of {bootstrap} bootstrap resamples could not be fitted and were skipped")
    warnings.extend(flat_vs_moving(stats, moving_fit=True))
    curve = Curve(
        L=fit.L, k=fit.k, log10_C0=fit.log10_C0, b=fit.b,
        compute_unit=frontier.compute_unit, metric=frontier.metric,
        c_range=(float(grid_c[0]), float(grid_c[-1])),
        n_grid=tuple(int(n) for n in n_values),
        provenance=sigmoid_provenance(frontier, groups, settings, fit, ci, stats),
    )
    return result(table, curve=curve, r2=fit.r2, rmse=fit.rmse, ci=ci, bootstrap_params=draws, bootstrap=stats)


def _flat_warnings(only: int, n_values: list[int]) -> list[str]:
    """Where a flat n* may be cut off by the grid of n compared: the truth can lie beyond its edge."""
    if only == max(n_values):
        return [f"n* is the largest n run ({only}) at every C: the compute-optimal n may be larger, which these runs "
                f"cannot show, so the flat curve holds n at {only}; add runs with larger n"]
    if only == min(n_values) and only > 2:
        return [f"n* is the smallest n run ({only}) at every C: a smaller n (down to 2, the least a group baseline "
                "allows) may be better; add runs with smaller n"]
    return []
