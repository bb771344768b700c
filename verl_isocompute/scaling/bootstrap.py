"""Bootstrap intervals of the n*(C) sigmoid (arXiv 2603.12151, section 4): runs resampled with replacement,
steps 3 to 5 redone on every resample together.

What is resampled (``settings["bootstrap_over"]``): ``"seeds"`` draws each group's runs from that group's own
runs, as many as it has, so every resample holds every n and the spread of the answer is the run-to-run
variation at fixed n (seeds), the noise a rerun of the sweep would show. ``"runs"`` draws from all runs
together, as before 0.2.0: a resample can then drop an n, and its spread mixes which n were run with that
noise. With one run per group, the seeds bootstrap has nothing to draw: no resamples are made (the fit says
the run-to-run variation is not measured).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from verl_isocompute.scaling.envelope import envelope, log_grid
from verl_isocompute.scaling.groups import RunGroup
from verl_isocompute.scaling.resolved import on_grid, resolved_winners
from verl_isocompute.scaling.saturating import MIN_POINTS, bin_ids, bin_points, refit_batch
from verl_isocompute.scaling.sigmoid_fit import sigmoid_batch


def bootstrap_curves(frontier, groups, curves, free_r0, settings):
    """Step 3 on every resample: runs resampled with replacement (module docstring: within each group or all
    together), every group's curve refitted on its resampled runs. Returns ``(params, cover)``: (resamples,
    groups, 4) rows (R0, A, ln C_mid, beta), NaN where a group could not be refitted, and (resamples, groups, 2)
    the C range its resampled runs cover; ``(None, None)`` when nothing is resampled (no resamples asked, or
    over seeds with one run per group).

    A run drawn twice counts twice; each refit starts from the full-data curve; with a shared R0, the
    resample's R0 is re-estimated as the fit estimates it (issue 43): each group refitted on the resample with R0
    free, the median of those R0, then every group refitted with it. Holding the full-data R0 fixed made the
    intervals too narrow (R0's own uncertainty never entered them). All resamples are done
    together: the binned data of every (resample, group) is a product of the resample's run counts with each
    run's binned sums, and the refits run in lock step (:func:`verl_isocompute.scaling.lsq.least_squares_batch`).
    With ``fit_on="records"`` a group is fitted to the record-breaking points of its resampled runs' own records
    (:func:`~verl_isocompute.scaling.points.record_mask`): dropping a rival run can promote a point. The per-n
    intervals of :mod:`~verl_isocompute.scaling.compare` read these curves; :func:`bootstrap_sigmoid` goes on to
    steps 4 and 5 with them.
    """
    resamples, fit_on = settings["bootstrap"], settings["fit_on"]
    by_seed = settings["bootstrap_over"] == "seeds"
    if resamples <= 0 or (by_seed and all(len(g.runs) == 1 for g in groups)):
        return None, None
    rng = np.random.default_rng(settings["seed"])
    runs = sorted({run for g in groups for run in g.runs})
    index = {run: i for i, run in enumerate(runs)}
    pools = [[index[r] for r in g.runs] for g in groups] if by_seed else [list(range(len(runs)))]
    counts = np.zeros((resamples, len(runs)))
    rows = np.arange(resamples)[:, None]
    for pool in pools:  # each pool's runs drawn from the pool, as many as it holds
        drawn = np.asarray(pool)[rng.integers(0, len(pool), size=(resamples, len(pool)))]
        np.add.at(counts, (np.broadcast_to(rows, drawn.shape), drawn), 1.0)

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
    b_idx, g_idx = np.nonzero(fittable)
    if free_r0 is not None:
        starts = [_with_r0(curves[groups[j].key], free_r0[groups[j].key]) for j in g_idx]
        free = np.full((resamples, G), np.nan)
        free[b_idx, g_idx] = refit_batch(u[b_idx, g_idx], y[b_idx, g_idx], w[b_idx, g_idx], None, starts)[:, 0]
        r0_by_group = np.array([free_r0[g.key] for g in groups])
        fallback = np.nanmedian(np.where(present, r0_by_group, np.nan), axis=1)  # no group refitted: the fit's R0
        with np.errstate(all="ignore"):
            r0 = np.where(np.isfinite(free).any(axis=1), np.nanmedian(np.where(np.isfinite(free), free, np.nan)
                                                                      if free.size else free, axis=1), fallback)
    fits = refit_batch(u[b_idx, g_idx], y[b_idx, g_idx], w[b_idx, g_idx],
                        None if r0 is None else r0[b_idx], [curves[groups[j].key] for j in g_idx])
    curve_params = np.full((resamples, G, 4), np.nan)
    curve_params[b_idx, g_idx] = fits
    return curve_params, cover


def _with_r0(curve, r0):
    """The full-data curve with the group's own first-pass R0: where a free-R0 refit starts."""
    from dataclasses import replace

    return replace(curve, R0=min(float(r0), curve.A))


def bootstrap_sigmoid(frontier, groups, curves, free_r0, params, n_range, settings, resampled=None, half=None):
    """Resample runs with replacement and redo steps 3 to 5 (:func:`bootstrap_curves`, or its result passed as
    ``resampled``; then :func:`envelope` and the sigmoid, from the full-data sigmoid); returns (params of every
    resample that has an answer, counts).

    Every resample counts (issue 43): one on which n* does not move over its range is a flat n*(C), drawn as the
    flat curve (L = 0, b = log2 of its n; k and log10_C0 placeholders), not skipped. Skipping them made the
    intervals conditional on n* moving (a truly flat sweep read "n* rises" with 83 of 200 flat resamples dropped).
    With ``half`` (the full-data grid of C and the per-n interval half-widths on it), whether n* moves on a resample
    is decided as the fit decides it (:mod:`~verl_isocompute.scaling.resolved`: only resolved wins count).
    ``stats``: ``requested``, ``succeeded`` (moving and flat), ``flat`` (of them), ``failed`` (no envelope, or a
    sigmoid refit that did not converge)."""
    stats = {"requested": int(settings["bootstrap"]), "succeeded": 0, "failed": 0, "flat": 0}
    found = resampled_envelopes(frontier, groups, curves, free_r0, settings, resampled)
    if found is None:
        return np.empty((0, 4)), stats
    grid, covered, winners, smoothed, ok = found[:5]
    decided = winners if half is None else _resolved(found, groups, half)
    top = np.nanmax(np.where(np.isfinite(decided), decided, -np.inf), axis=1, initial=-np.inf)
    moves = top > np.nanmin(np.where(np.isfinite(decided), decided, np.inf), axis=1, initial=np.inf)
    flat = ok & ~moves
    ok &= moves
    draws = np.empty((0, 4))
    if ok.any():
        x = np.log10(np.where(covered[ok], grid[ok], 1.0))
        draws, converged = sigmoid_batch(x, np.where(covered[ok], smoothed[ok], 0.0), covered[ok].astype(float),
                                          params, n_range, settings["k_max"])
        draws = draws[converged]
    flat_draws = np.column_stack([np.zeros(int(flat.sum())), np.full(int(flat.sum()), params[1]),
                                  np.full(int(flat.sum()), params[2]), top[flat]])
    draws = np.concatenate([draws, flat_draws])
    stats["succeeded"], stats["flat"] = len(draws), len(flat_draws)
    stats["failed"] = int(stats["requested"] - len(draws))
    return draws, stats


def bootstrap_flat(frontier, groups, curves, free_r0, log2_n_star, settings, resampled=None, half=None) -> dict[str, int]:
    """For a fit whose n* is one n at every C: on how many resamples (steps 3 and 4 redone) that same n wins at
    every C the resample covers: ``requested``, ``succeeded`` (resamples with an envelope), ``failed`` and
    ``flat`` (of the succeeded, those with the same n everywhere). A flat curve has no sigmoid parameters to
    give intervals for; this is the bootstrap's word on how firm the flat n* is. With ``half`` (as
    :func:`bootstrap_sigmoid`) only resolved wins count: a resample is flat when no other n wins a C resolved."""
    stats = {"requested": int(settings["bootstrap"]), "succeeded": 0, "failed": int(settings["bootstrap"]), "flat": 0}
    found = resampled_envelopes(frontier, groups, curves, free_r0, settings, resampled)
    if found is None:
        return stats
    _, covered, winners, _, ok = found[:5]
    decided = winners if half is None else _resolved(found, groups, half)
    same = np.where(np.isfinite(decided), decided == log2_n_star, True).all(axis=1)
    stats["succeeded"], stats["flat"] = int(ok.sum()), int((ok & same).sum())
    stats["failed"] = stats["requested"] - stats["succeeded"]
    return stats


# A minority of resamples of the other kind at least this large: the fit cannot tell flat from moving, and says so.
FLAT_UNSETTLED = 0.2


def flat_vs_moving(stats: dict[str, int], moving_fit: bool) -> list[str]:
    """The bootstrap's word on flat vs moving, every resample counted: the share of resamples on which n* stays at
    one n, for a fit whose n* moves (``moving_fit``) or is flat, and that the runs cannot tell when the other kind
    holds at least :data:`FLAT_UNSETTLED` of them."""
    if not stats.get("succeeded"):
        return []
    other = stats.get("flat", 0) if moving_fit else stats["succeeded"] - stats.get("flat", 0)
    if not other:
        return []
    share = other / stats["succeeded"]
    kind = "stays at one n over the whole range" if moving_fit else "moves (or another n wins somewhere)"
    counted = "; they count in the intervals as a flat n*(C), L = 0" if moving_fit else ""
    unsettled = ": the runs cannot tell a moving n* from a flat one" if share >= FLAT_UNSETTLED else ""
    return [f"n* {kind} on {other} of {stats['succeeded']} bootstrap resamples ({share:.0%}){counted}{unsettled}"]


def resampled_envelopes(frontier, groups, curves, free_r0, settings, resampled=None):
    """Step 4 on every resample of :func:`bootstrap_curves` (or ``resampled``, its result): each resample's log
    grid of C, which grid points some curve covers, the winning log2 n there (NaN elsewhere), the smoothed
    log2 n*, which resamples have an envelope at all (two distinct n refitted, four covered points), and the
    resampled curves and covered ranges behind them. None when nothing was resampled."""
    curve_params, cover = resampled or bootstrap_curves(frontier, groups, curves, free_r0, settings)
    if curve_params is None:
        return None
    resamples = curve_params.shape[0]
    log2_n = np.log2([float(g.key[0]) for g in groups])
    has_curve = ~np.isnan(curve_params[:, :, 0])
    distinct_n = np.array([len(set(log2_n[row])) for row in has_curve])
    cover = np.where(has_curve[:, :, None], cover, np.nan)
    top = settings.get("grid_top", np.inf)  # where the full-data grid ends (envelope.grid_top)
    grids = [log_grid(float(np.nanmin(c[:, 0])), min(float(np.nanmax(c[:, 1])), top), settings["grid_per_decade"])
             if ok else np.array([]) for c, ok in zip(cover, distinct_n >= 2)]
    grid = np.full((resamples, max(len(g) for g in grids)), np.nan)
    for i, g in enumerate(grids):
        grid[i, : len(g)] = g
    _, winner, smoothed = envelope(curve_params, np.nan_to_num(cover, nan=-1.0), log2_n, grid, settings["window"])
    covered = winner >= 0
    winners = np.where(covered, log2_n[np.maximum(winner, 0)], np.nan)
    ok = (distinct_n >= 2) & (covered.sum(axis=1) >= 4)
    return grid, covered, winners, smoothed, ok, curve_params, np.nan_to_num(cover, nan=-1.0)


def _resolved(found, groups, half):
    """The resolved n* (:func:`~verl_isocompute.scaling.resolved.resolved_winners`) on every resample of ``found``
    (:func:`resampled_envelopes`), with the full-data half-widths ``half`` = (grid of C, (G, K) half-widths)."""
    grid, curve_params, cover = found[0], found[5], found[6]
    log2_n = np.log2([float(g.key[0]) for g in groups])
    return resolved_winners(curve_params, cover, log2_n, np.where(np.isnan(grid), -1.0, grid), on_grid(half[1], half[0], grid))


def _resampled_bins(g: RunGroup, counts: np.ndarray, fit_on: str, bucket: float):
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
    ids = bin_ids(log_c)
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
    from verl_isocompute.scaling.points import record_mask

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
