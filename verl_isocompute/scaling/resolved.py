"""Flat vs moving n*(C) decided on the differences the runs resolve (issue 43, item 3).

Every n starts from the same base model, so at small C all per-n curves lie within noise of each other, and the
plain envelope's argmax there is picked by the noise: on the calibration's truly flat case
(:mod:`verl_isocompute.scaling.calibration`, "flat") a larger n won a stretch of small C by noise and the fit read
"n* rises" on 1 to 2 of 10 noisy datasets. Here a win counts only where the runs resolve it: at a value C of the grid,
the envelope's n is the *resolved* n* when its lead over every other n whose runs cover C is resolved: larger
than the half-widths of the two 90 % reward intervals (t intervals over seeds, as
:func:`~verl_isocompute.scaling.compare_spread.t_interval`) added in quadrature: a one-sided 95 % test that the lead is
above 0 (the groups' seeds are resampled apart; one-sided, since the question is which n is ahead). Otherwise C is a tie,
and ties do not make n* move. (Requiring the two 95 % intervals themselves to be apart read the calibration's
rising case flat on 9 of 10 datasets; the one-sided test reads it rising on 11 of 20 with 5 seeds, and the flat case
flat on 20 of 20: ``python benchmarks/bench_calibration.py``, last two lines.) A C that
only one n's runs cover is that n's (as in the plain envelope: a larger n spends more on its first step).

n*(C) moves when the resolved n* takes two different values over the range, and is flat otherwise (at its one
resolved value). When no C is resolved at all the runs cannot tell which n is best, and the fit says so. Without
intervals (no bootstrap, or one run per n) nothing can be resolved and the plain envelope decides, as before.

On a bootstrap resample the same rule is applied to the resampled curves with the full-data interval half-widths
(interpolated in log C onto the resample's grid), so the share of flat resamples answers the same question.
"""

from __future__ import annotations

import numpy as np
from scipy.stats import t as student_t

from verl_isocompute.scaling.envelope import curve_values, stacked
from verl_isocompute.scaling.saturating import saturating_reward

LEVEL = 0.90  # two-sided level of the half-widths: a lead is resolved by a one-sided 95 % test (module docstring)


def t_half_width(draws: np.ndarray, seeds: int, level: float = 0.95) -> np.ndarray:
    """The half-width of :func:`~verl_isocompute.scaling.compare_spread.t_interval` from bootstrap draws along axis 0
    (NaN ignored; NaN with fewer than 2 seeds)."""
    if seeds < 2:
        return np.full(np.shape(draws)[1:], np.nan)
    with np.errstate(invalid="ignore"):
        se = np.nanstd(np.asarray(draws, dtype=float), axis=0, ddof=1) * np.sqrt(seeds / (seeds - 1))
    return float(student_t.ppf(0.5 + level / 2, seeds - 1)) * se


def half_widths(groups, curve_draws, grid: np.ndarray) -> np.ndarray | None:
    """(G, K): each group's :data:`LEVEL` reward interval half-width at every C of ``grid`` from its bootstrap curves (inf
    where it has none: one run, or no draws), or None when no group has one (nothing can then be resolved)."""
    out = np.full((len(groups), len(grid)), np.inf)
    for j, g in enumerate(groups):
        draws = curve_draws.get(g.key)
        if draws is None or len(g.runs) < 2:
            continue
        with np.errstate(invalid="ignore"):
            values = saturating_reward(np.log(grid)[None, :], *(draws[:, i, None] for i in range(4)))
        out[j] = t_half_width(values, len(g.runs), LEVEL)
    out[~np.isfinite(out)] = np.inf
    return out if np.isfinite(out).any() else None


def resolved_winners(params, cover, log2_n, grid, half) -> np.ndarray:
    """(B, K) log2 of the resolved n* at every C of each fit's grid (NaN: a tie, or no curve covers C).

    ``params``, ``cover``, ``log2_n``, ``grid`` as :func:`~verl_isocompute.scaling.envelope.envelope` takes them;
    ``half``: (B or 1, G, K) interval half-widths. The envelope's n wins C when its lead over every other covering n
    exceeds the two half-widths added in quadrature (a one-sided 95 % test with ``half`` at :data:`LEVEL`)."""
    values = curve_values(params, cover, grid)  # (B, G, K), -inf outside a group's covered range
    half = np.broadcast_to(half, values.shape)
    winner = values.argmax(axis=1)
    best = np.take_along_axis(values, winner[:, None, :], axis=1)
    with np.errstate(invalid="ignore"):
        # the difference's interval: the t intervals' half-widths added in quadrature (the groups' runs are
        # resampled apart); a rival not covering C (-inf) is beaten outright
        need = np.hypot(np.take_along_axis(half, winner[:, None, :], axis=1), half)
        beaten = (best - values > need) | ~np.isfinite(values)
    rival = np.arange(values.shape[1])[None, :, None] != winner[:, None, :]
    resolved = np.isfinite(best[:, 0, :]) & np.where(rival, beaten, True).all(axis=1)
    return np.where(resolved, log2_n[winner], np.nan)


def on_grid(half: np.ndarray, grid_c: np.ndarray, grids: np.ndarray) -> np.ndarray:
    """``half`` (G, K) at the full-data grid, interpolated in log C onto every resample's grid (B, K'): (B, G, K')."""
    x = np.log(grid_c)
    logs = np.log(np.where(np.isnan(grids), grid_c[0], grids))
    finite = np.where(np.isfinite(half), half, 1e9)  # interp cannot carry inf; 1e9 never separates rewards
    return np.stack([np.interp(logs, x, h) for h in finite], axis=1)


def decide(groups, curves, curve_draws, grid_c, table) -> tuple[int | None, np.ndarray | None, list[str]]:
    """The full-data decision: (the flat n, or None when n* moves; the half-widths used, or None; warnings).

    ``table``: the plain envelope (:func:`~verl_isocompute.scaling.envelope.envelope_table`), which decides alone
    when there are no intervals."""
    raw = table["n_star"].to_numpy()
    half = half_widths(groups, curve_draws, grid_c)
    if half is None:
        return (int(raw[0]) if len(set(raw)) < 2 else None), None, []
    params, cover, log2_n = stacked(groups, curves)
    resolved = resolved_winners(params[None], cover[None], log2_n, grid_c[None], half[None])[0]
    values = resolved[np.isfinite(resolved)]
    if len(set(values)) > 1:
        return None, half, []
    if not len(values):
        counts = {int(n): int((raw == n).sum()) for n in set(raw)}
        only = max(counts, key=counts.get)
        return only, half, [f"the runs resolve no difference between the n at any C (no lead passes a one-sided "
                            f"95 % t test over seeds): they cannot tell which n is n*; n = {only}, the fitted curves' "
                            "best over most of the range, is written as a flat curve"]
    only = int(round(2 ** values[0]))
    notes = []
    if len(set(raw)) > 1:
        ties = sorted(int(n) for n in set(raw) - {only})
        notes.append(f"n = {', '.join(map(str, ties))} is best on the fitted curves only where the runs do not "
                     f"resolve its lead (ties, which do not make n* move): n* = {only} wherever the runs resolve a "
                     "difference, so n*(C) is read as flat")
    return only, half, notes
