"""What a fixed choice of n costs against the compute-optimal one, from a fit's per-n reward curves.

The IsoCompute playbook (arXiv 2603.12151, section 4) fits one saturating curve per n,
R_n(C) = R0 + (A_n - R0) / (1 + (C_mid,n / C)^beta_n) (ScaleRL's form, arXiv 2510.13786), and calls the
upper envelope of these curves the compute-optimal frontier. At a budget C the compute-optimal
allocation reaches R* = max_n R_n(C) (the best n at C, the argmax that n*(C) summarises); a rule of
thumb that fixes n reaches R_n(C) <= R* instead. This module answers, for each fixed n of the sweep:

(a) the compute C_n(R*) that n needs to reach R*, and the multiplier C_n(R*) / C. The curve inverts in
    closed form, C_n(R) = C_mid,n * ((R - R0) / (A_n - R))^(1 / beta_n) for R0 < R < A_n, and
    C*(R*) = C by the definition of R*, so the multiplier is the playbook's C_n(R) / C*(R): how many
    times the compute-optimal budget the fixed n spends for the same reward;
(b) the reward R_n(C) the fixed n reaches at C.

A fitted curve describes its n only over the compute its runs covered ([C_min, C_max] of its validation
points); the frontier of :mod:`verl_isocompute.scaling.fit` lets a curve compete only there, and so does
R* here. Nothing is extrapolated silently:

- R_n(C) for C outside n's range is not given (``reward_status`` says below / above the fitted range);
- when n does not reach R* by the end of its range, the multiplier is only bounded from below by
  C_max,n / C (``reach_status`` "not reached within fitted range"; when even the curve's asymptote A_n
  is below R*, n never reaches it on the fit: ``never_reached``);
- when n already beats R* where its range starts (C_min,n > C), the multiplier is bounded from above by
  C_min,n / C ("reached before its fitted range");
- a budget no curve covers has no R* ("budget outside fitted range").

Paper presets carry only the n*(C) sigmoid, not per-n curves: they say which n is compute-optimal at C,
not what another n costs (:func:`~verl_isocompute.scaling.reward_curves.reward_curves_from` says so in one
line). ``isocompute fit`` stores the per-n curves in ``curve.json`` under ``reward_curves`` (the optional field
of the curve-file contract, :func:`~verl_isocompute.scaling.reward_curves.reward_curves_field`; the curves
themselves: :mod:`verl_isocompute.scaling.reward_curves`) and writes ``compare.json``, ``compare.csv`` and
``compare.png``; ``isocompute allocate --compare`` prints the table at its budget. Pure: no verl, no torch.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from verl_isocompute import _compat
from verl_isocompute.jsonl import plain
from verl_isocompute.scaling.curve import Curve
from verl_isocompute.scaling.envelope import envelope
from verl_isocompute.scaling.fit import FrontierFit, nice_budgets
from verl_isocompute.scaling.reward_curves import (
    EDGE,
    FORM,
    CompareError,
    RewardCurve,
    compute_to_reach,
    reward_curves,
    reward_curves_from,
    select,
)
from verl_isocompute.scaling.compare_spread import NO_SPREAD, interval_text, resampled

if TYPE_CHECKING:
    from matplotlib.figure import Figure

COMPARE_JSON, COMPARE_CSV, COMPARE_PNG = "compare.json", "compare.csv", "compare.png"
COMPARE_DPI = 100  # an overview of two panels: 1200 x 500 pixels
# Status words, written once: the CSV/JSON cells and the printed table use them.
FITTED, BELOW, ABOVE = "fitted", "below fitted range", "above fitted range"
REACHED, NOT_REACHED, BEFORE, NO_BUDGET = (
    "reached",
    "not reached within fitted range",
    "reached before its fitted range",
    "budget outside fitted range",
)

# Names that lived here until 0.2; the old path works for one release.
_MOVED = {
    **dict.fromkeys(("reward_curves_field",), "verl_isocompute.scaling.reward_curves"),
    **dict.fromkeys(("REWARD_CURVES_KEY", "PRESET_PREFIX", "reward_curve_entries"), "verl_isocompute.scaling.curve"),
    **dict.fromkeys(("SaturatingCurve",), "verl_isocompute.scaling.saturating"),
}

__getattr__ = _compat.moved_names(__name__, _MOVED)


# --- the comparison ---------------------------------------------------------------------------------


def optimum(curves: Sequence[RewardCurve], compute: float | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """R*(C), the best fitted reward among the curves covering C, and the index of the winning curve
    (NaN and -1 where no curve covers C): the envelope that defines the compute-optimal n."""
    c = np.atleast_1d(np.asarray(compute, dtype=float))
    # the fit's own envelope (each curve only inside its covered range), so R* is the frontier's reward
    params = np.array([[rc.curve.R0, rc.curve.A, math.log(rc.curve.C_mid), rc.curve.beta] for rc in curves])
    cover = np.array([rc.c_range for rc in curves], dtype=float)
    log2_n = np.log2([float(rc.n) for rc in curves])
    best, winner, _ = envelope(params[None], cover[None], log2_n, c[None], window=1)
    best, winner = best[0], winner[0]
    return np.where(winner >= 0, best, np.nan), winner


def compare_at(
    curves: Sequence[RewardCurve], budgets: Sequence[float], n_values: Sequence[RewardCurve] | None = None
) -> pd.DataFrame:
    """One row per (budget C, fixed n): what that n reaches at C and what it needs to reach R*(C).

    R* is taken over all ``curves`` (the whole sweep); ``n_values`` (default: all) picks the rows.
    Columns: ``C``, ``n``, ``b_problem``, ``C_min``, ``C_max``, ``reward`` (R_n(C), NaN outside n's
    range), ``reward_status``, ``R_star``, ``n_best`` / ``b_problem_best`` (the group whose curve gives R*),
    ``optimal`` (this row is that group), ``compute_needed``
    (C_n(R*), NaN unless reached), ``multiplier`` (C_n(R*) / C, NaN unless reached), ``multiplier_bound``
    (C_max / C as a lower bound, or C_min / C as an upper bound, see ``reach_status``), ``reach_status``,
    ``never_reached`` (R* >= the curve's asymptote A).

    When the curves carry the fit's bootstrap (each n's curve refitted on resamples of its runs, the seeds:
    :func:`~verl_isocompute.scaling.bootstrap.bootstrap_curves`), the comparison is redone on every resample
    (:func:`~verl_isocompute.scaling.compare_spread.resampled`): ``reward_low`` / ``reward_high`` a 95% t interval
    (``compare_spread.t_interval``; NaN with one run), ``multiplier_low`` / ``multiplier_high`` 95%
    intervals from the resamples' percentiles, expanded for few seeds (``compare_spread.expanded_percentiles``;
    inf: on some resamples this n does not reach R* within its fitted range),
    ``best_share`` the share of resamples in which this n gives R*, ``resamples`` how many were used; NaN (0)
    without a bootstrap.
    """
    if not curves:
        raise CompareError("no fitted per-n curves to compare")
    rows_for = list(curves if n_values is None else n_values)
    budgets = np.asarray(budgets, dtype=float)
    r_star, winner = optimum(curves, budgets)
    spread = resampled(curves, budgets)
    rows = []
    for i, (c, r, w) in enumerate(zip(budgets, r_star, winner)):
        for rc in rows_for:
            lo, hi = rc.c_range
            inside = bool(rc.covers(np.array([c]))[0])
            row = {
                "C": c,
                "n": rc.n,
                "b_problem": rc.b_problem,
                "C_min": lo,
                "C_max": hi,
                "reward": float(rc.curve(c)) if inside else np.nan,
                "reward_status": FITTED if inside else (BELOW if c < lo else ABOVE),
                "R_star": r,
                "n_best": curves[w].n if w >= 0 else None,
                "b_problem_best": curves[w].b_problem if w >= 0 else None,
                "optimal": bool(w >= 0 and curves[w] is rc),
                "compute_needed": np.nan,
                "multiplier": np.nan,
                "multiplier_bound": np.nan,
                "never_reached": bool(np.isfinite(r) and r >= rc.curve.A),
            }
            if w < 0:
                row["reach_status"] = NO_BUDGET
            elif curves[w] is rc:
                # The winner reaches R* at C by definition. Its inverse would say so only up to rounding, and
                # not at all on a curve already at its asymptote (R* = A to float precision: "never").
                row.update(reach_status=REACHED, compute_needed=c, multiplier=1.0, never_reached=False)
            else:
                needed = float(compute_to_reach(rc.curve, r))
                if needed > hi * (1 + EDGE):
                    row.update(reach_status=NOT_REACHED, multiplier_bound=hi / c)
                elif needed < lo * (1 - EDGE):
                    row.update(reach_status=BEFORE, multiplier_bound=lo / c)
                else:
                    row.update(reach_status=REACHED, compute_needed=needed, multiplier=needed / c)
            row.update(spread(i, curves.index(rc)) if spread else NO_SPREAD)
            rows.append(row)
    return pd.DataFrame(rows)


def default_budgets(curves: Sequence[RewardCurve]) -> list[float]:
    """A few budgets across the C range the curves cover: the powers of ten inside it, else 1, 2, 5 x 10^k,
    else three log-spaced values."""
    lo = min(rc.c_range[0] for rc in curves)
    hi = max(rc.c_range[1] for rc in curves)
    nice = nice_budgets(lo, hi)
    decades = [c for c in nice if math.log10(c).is_integer()]
    for budgets in (decades, nice):
        if len(budgets) >= 3:
            return budgets
    return [float(c) for c in np.geomspace(lo, hi, 3)]


def multiplier_text(row: dict[str, Any]) -> str:
    """The multiplier cell a reader sees: "2.35x", "> 8.1x" (not reached by the end of n's fitted range;
    "(never)": the curve's asymptote A is below R*), "<= 1.4x" (reached where n's runs start), "-"."""
    status = row["reach_status"]
    if status == REACHED:
        return f"{row['multiplier']:.2f}x"
    if status == NOT_REACHED:
        return f"> {row['multiplier_bound']:.3g}x" + (" (never)" if row["never_reached"] else "")
    if status == BEFORE:
        return f"<= {row['multiplier_bound']:.3g}x"
    return "-"


def format_table(table: pd.DataFrame, metric: str, compute_unit: str, chosen_n: int | None = None) -> str:
    """The comparison at each budget as text: one block per budget, one line per fixed n; with the fit's
    bootstrap, each figure's 95% interval over the resamples and the share of them in which n is compute-optimal."""
    spread = "resamples" in table and (table["resamples"] > 0).any()
    if spread:
        return _format_spread(table, metric, compute_unit, chosen_n)
    lines = []
    for c, part in table.groupby("C", sort=True):
        first = part.iloc[0]
        if first["reach_status"] == NO_BUDGET:
            lo, hi = part["C_min"].min(), part["C_max"].max()
            lines.append(
                f"C = {c:.4g} {compute_unit}: {NO_BUDGET} [{lo:.3g}, {hi:.3g}]: no fitted n was evaluated there, "
                "nothing is compared (no extrapolation)"
            )
            continue
        lines.append(
            f"C = {c:.4g} {compute_unit}: the compute-optimal n = {int(first['n_best'])}"
            + (f" (b_problem = {int(first['b_problem_best'])})" if part["n"].duplicated().any() else "")
            + f" reaches {metric} = {first['R_star']:.4f}"
        )
        header = f"  {'n':>6}  {'b_problem':>9}  {'reward at C':>20}  {'compute for R*':>24}  {'C_n(R*)/C':>24}"
        lines.append(header)
        for row in part.to_dict("records"):
            reward = f"{row['reward']:.4f}" if row["reward_status"] == FITTED else f"({row['reward_status']})"
            if row["reach_status"] == REACHED:
                needed = f"{row['compute_needed']:.4g}"
            elif row["reach_status"] == NOT_REACHED:
                needed = f"> {row['C_max']:.4g} (fit ends)"
            else:
                needed = f"<= {row['C_min']:.4g} (fit starts)"
            mark = "  <- compute-optimal" if row["optimal"] else ""
            mark += "  <- allocated" if chosen_n is not None and row["n"] == chosen_n else ""
            b = "-" if row["b_problem"] is None or pd.isna(row["b_problem"]) else str(int(row["b_problem"]))
            lines.append(f"  {row['n']:>6}  {b:>9}  {reward:>20}  {needed:>24}  {multiplier_text(row):>24}{mark}")
    return "\n".join(lines)


def _format_spread(table: pd.DataFrame, metric: str, compute_unit: str, chosen_n: int | None) -> str:
    """:func:`format_table` with the bootstrap's intervals (one line per fixed n, the figures as without them)."""
    lines = []
    for c, part in table.groupby("C", sort=True):
        first = part.iloc[0]
        if first["reach_status"] == NO_BUDGET:
            lines.append(f"C = {c:.4g} {compute_unit}: {NO_BUDGET} [{part['C_min'].min():.3g}, {part['C_max'].max():.3g}]: "
                         "nothing is compared (no extrapolation)")
            continue
        lines.append(f"C = {c:.4g} {compute_unit}: the compute-optimal n = {int(first['n_best'])} reaches {metric} = "
                     f"{first['R_star']:.4f}")
        lines.append(f"  {'n':>6}  {'reward at C [95%]':>26}  {'C_n(R*)/C [95%]':>34}  {'n* in':>6}")
        for row in part.to_dict("records"):
            reward = (f"{row['reward']:.4f}" + interval_text(row["reward_low"], row["reward_high"], ".3f")
                      if row["reward_status"] == FITTED else f"({row['reward_status']})")
            multiplier = multiplier_text(row) + interval_text(row["multiplier_low"], row["multiplier_high"], ".2f", "x",
                                                              floor=row["C_min"] / row["C"] if row["C_min"] > row["C"] else None)
            mark = "  <- compute-optimal" if row["optimal"] else ""
            mark += "  <- allocated" if chosen_n is not None and row["n"] == chosen_n else ""
            mark += f"  (b_problem = {int(row['b_problem'])})" if part["n"].duplicated(keep=False).any() else ""
            lines.append(f"  {row['n']:>6}  {reward:>26}  {multiplier:>34}  {row['best_share']:>6.0%}{mark}")
    used = int(table["resamples"].max())
    lines.append(f"[95%]: reward: t interval on seeds - 1 df, SE from {used} bootstrap resamples of each n's runs (seeds; "
                 "`isocompute fit --bootstrap`); multiplier: their percentiles, expanded for few seeds; n* in: the share "
                 "of resamples in which that n gives R* (not a probability that it is n*)")
    return "\n".join(lines)


def records(table: pd.DataFrame) -> list[dict[str, Any]]:
    """The table as JSON-ready records (NaN -> None)."""
    return [plain(row, nan_to_none=True) for row in table.astype(object).to_dict("records")]


def to_json(table: pd.DataFrame, metric: str, compute_unit: str) -> dict[str, Any]:
    """``compare.json``: what was compared and how, then one entry per budget with its rows."""
    budgets = []
    for c, part in table.groupby("C", sort=True):
        first = part.iloc[0]
        budgets.append(
            {
                "C": float(c),
                "R_star": None if pd.isna(first["R_star"]) else float(first["R_star"]),
                "n_best": None if first["n_best"] is None or pd.isna(first["n_best"]) else int(first["n_best"]),
                "b_problem_best": records(part)[0]["b_problem_best"],
                "rows": [
                    {k: v for k, v in row.items() if k not in ("C", "R_star", "n_best", "b_problem_best")}
                    for row in records(part)
                ],
            }
        )
    return {
        "metric": metric,
        "compute_unit": compute_unit,
        "form": FORM,
        "reference": "R* = the best fitted per-n curve covering C (the compute-optimal n at C); multiplier = C_n(R*) / C",
        **({"intervals": "reward_low/high: 95% t interval on (runs of that n) - 1 df around the fitted reward, its SE "
                         "from `resamples` bootstrap resamples of each n's runs (seeds); multiplier_low/high: 95% "
                         "percentiles of those resamples expanded for few seeds (Hesterberg 2015), the comparison "
                         "redone on each (multiplier_high null: past the fitted range on some); best_share: the "
                         "share of them in which that n gives R* (a resampling share, not the probability that n is "
                         "n*)"}
           if "resamples" in table and (table["resamples"] > 0).any() else {}),
        "budgets": budgets,
    }


def pivot_markdown(table: pd.DataFrame) -> list[str]:
    """report.md lines: multiplier per n (rows) and budget (columns)."""
    budgets = sorted(table["C"].unique())
    header = "| n | " + " | ".join(f"C = {c:.3g}" for c in budgets) + " |"
    lines = [header, "|" + "---|" * (len(budgets) + 1)]
    for n, part in table.groupby("n", sort=True):
        cells = {row["C"]: multiplier_text(row) for row in part.to_dict("records")}
        lines.append(f"| {n} | " + " | ".join(cells.get(c, "-") for c in budgets) + " |")
    return lines


# --- the plot -----------------------------------------------------------------------------------------


def plot_compare(curves: Sequence[RewardCurve], metric: str, compute_unit: str, points: int = 40) -> Figure:
    """Left: C_n(R*)/C against C for each fixed n (dotted: a lower bound, n did not reach R* within its
    fitted range). Right: R_n(C) over each n's fitted range and R*(C). Agg canvas, no pyplot."""
    from matplotlib import colormaps
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.colors import LogNorm
    from matplotlib.figure import Figure
    from matplotlib.ticker import NullLocator

    from verl_isocompute.scaling.plots import finish_figure

    lo = min(rc.c_range[0] for rc in curves)
    hi = max(rc.c_range[1] for rc in curves)
    grid = np.geomspace(lo, hi, points)
    table = compare_at(curves, grid)
    n_values = sorted({rc.n for rc in curves})
    norm = LogNorm(vmin=min(n_values), vmax=max(n_values) * (1.0001 if len(n_values) == 1 else 1.0))
    cmap = colormaps["viridis"]
    fig = Figure(figsize=(12.0, 5.0))
    FigureCanvasAgg(fig)
    left, right = fig.subplots(1, 2)
    # fixed margins: constrained layout measures every tick label on each save (most of the plot's time)
    fig.subplots_adjust(left=0.06, right=0.985, bottom=0.1, top=0.93, wspace=0.2)
    for i, rc in enumerate(curves):
        rows = table.iloc[i :: len(curves)]
        color = cmap(norm(rc.n))
        label = f"n={rc.n}" + (f", b_problem={rc.b_problem}" if len({r.n for r in curves}) < len(curves) else "")
        left.plot(rows["C"], rows["multiplier"], color=color, lw=1.6, label=label)
        bound = rows["reach_status"] == NOT_REACHED
        left.plot(rows["C"][bound], rows["multiplier_bound"][bound], ":", color=color, lw=1.2)
        c = np.geomspace(*rc.c_range, 100)
        right.plot(c, rc.curve(c), color=color, lw=1.4, label=label)
    r_star, _ = optimum(curves, grid)
    right.plot(grid, r_star, color="black", lw=2.5, alpha=0.6, label="R*(C): compute-optimal n")
    left.plot([], [], ":", color="0.4", label="> bound: R* not reached within the fitted range")
    left.set_xscale("log")
    left.set_yscale("log")
    left.set_xlabel(f"budget C ({compute_unit})")
    left.set_ylabel("C_n(R*) / C")
    left.set_title("compute a fixed n needs for the compute-optimal reward")
    right.set_xscale("log")
    right.set_xlabel(f"compute C ({compute_unit})")
    right.set_ylabel(metric)
    right.set_title("reward of each fixed n (over its fitted range) and R*")
    # fixed legend corners: "best" tests every position against every line on each save
    for ax, corner in ((left, "upper right"), (right, "lower right")):
        ax.grid(True, which="major", alpha=0.3)
        # decades only on the budget axes (they span several; a gridline per decade): minor ticks there
        # were 130 tick artists, a tenth of the figure's save time
        ax.xaxis.set_minor_locator(NullLocator())
        ax.legend(loc=corner, fontsize=7)
    finish_figure(fig)
    return fig


def outputs(result: FrontierFit) -> tuple[dict[str, Any], pd.DataFrame, Figure] | None:
    """What ``isocompute fit`` writes for the comparison (JSON, CSV table, figure), or None when no
    per-n curve was fitted."""
    curves = reward_curves(result)
    if not curves:
        return None
    metric, unit = result.frontier.metric, result.frontier.compute_unit
    table = compare_at(curves, default_budgets(curves))
    return to_json(table, metric, unit), table, plot_compare(curves, metric, unit)


def for_allocation(
    curve_spec: str | Curve, allocation: Any, spec: str | None, fmt: str = "table"
) -> str | dict[str, Any]:
    """``isocompute allocate --compare``: the comparison at the allocation's budget (in the curve's unit),
    as text (``fmt="table"``, the allocated n marked) or as a JSON object (``fmt="json"``). The rows are
    the n values of ``spec`` plus the compute-optimal n and the allocated n (when the sweep has them)."""
    from verl_isocompute.scaling.curve import load_curve

    if fmt == "overrides":
        raise CompareError("--compare prints a table, not verl overrides: use --format table or --format json")
    curve = curve_spec if isinstance(curve_spec, Curve) else load_curve(curve_spec)
    budget = allocation.budget_tokens if curve.compute_unit == "tokens" else float(allocation.budget_rollouts)
    curves = reward_curves_from(curve, str(curve_spec), budget)
    table = compare_at(curves, [budget])
    # the reference (the compute-optimal n) and the allocated n are always shown next to the n asked for
    shown = {rc.n for rc in select(curves, spec)} | {allocation.n} | set(table["n_best"].dropna())
    table = table[table["n"].isin(shown)].reset_index(drop=True)
    if fmt == "json":
        out = to_json(table, curve.metric, curve.compute_unit)
        return {**{k: out[k] for k in ("metric", "compute_unit", "reference")}, **out["budgets"][0]}
    return format_table(table, curve.metric, curve.compute_unit, chosen_n=allocation.n)
