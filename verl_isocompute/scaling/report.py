"""The outputs of ``isocompute fit``: curve.json, tables, report.md and plots, written atomically.

Files (all in the output directory):

* ``curve.json``: the n*(C) sigmoid in the curve-file contract (:mod:`verl_isocompute.scaling.curve`),
  only when n*(C) could be fitted (a flat one, L = 0, when one n is n* at every C);
* ``frontier.csv``: one row per grid value of C: the envelope reward, n* (raw, smoothed, fitted),
  the winning B_problem, the residual and the bootstrap band;
* ``records.csv``: the record-breaking points over all runs (the empirical frontier) with their run, n
  and B_problem;
* ``fits.csv``: one row per group (n, or (n, B_problem)) with its fitted saturating curve;
* ``compare.json``, ``compare.csv``, ``compare.png``: what each fixed n costs against the compute-optimal
  n at a few budgets (:mod:`verl_isocompute.scaling.compare`); curve.json carries the per-n curves
  (``reward_curves``) so that ``isocompute allocate --compare`` can redo it at any budget;
* ``report.md``: the fitted values with intervals, n* at round budgets (optionally next to a paper
  preset), the per-group fits, the residuals, and every warning and data note;
* ``frontier.png``, ``n_star.png``: see :mod:`verl_isocompute.scaling.plots`.

Everything is first written into a temporary directory beside the output directory, then each file is
moved into place with ``os.replace``: a failure while writing leaves the previous outputs as they were.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import replace
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from verl_isocompute import atomic
from verl_isocompute.jsonl import plain
from verl_isocompute.scaling.curve import CURVE_FILE, STALE_CURVE_FILE, Curve
from verl_isocompute.scaling.fit import FrontierFit

FRONTIER_FILE = "frontier.csv"
RECORDS_FILE = "records.csv"
FITS_FILE = "fits.csv"
REPORT_FILE = "report.md"


def write_outputs(
    result: FrontierFit,
    out_dir: str | Path,
    compare: Curve | None = None,
    compare_label: str | None = None,
    command: str | None = None,
) -> list[Path]:
    """Write every output of a fit into ``out_dir`` atomically; returns the paths written.

    Without a fitted curve (``result.curve is None``) no ``curve.json`` is written and an existing one,
    which describes other runs, is renamed ``curve.stale.json`` (the report says so), so that a later
    ``isocompute allocate`` of this directory's ``curve.json`` stops with a message naming it instead of
    using it unknowingly.
    """
    from verl_isocompute.scaling import compare as cmp
    from verl_isocompute.scaling.curve import REWARD_CURVES_KEY
    from verl_isocompute.scaling.reward_curves import reward_curves, reward_curves_field
    from verl_isocompute.scaling.plots import plot_frontier, save_plots

    out_dir = Path(out_dir)
    stale_curve = result.curve is None and (out_dir / CURVE_FILE).exists()
    comparison = cmp.outputs(result)
    with atomic.staged_dir(out_dir) as staging:
        if result.curve is not None:
            curve = result.curve
            if command:
                curve = replace(curve, provenance={**curve.provenance, "command": command})
            curve = replace(curve, extra={**curve.extra, REWARD_CURVES_KEY: reward_curves_field(
                reward_curves(result), result.group_by)})
            (staging / CURVE_FILE).write_text(json.dumps(plain(curve.to_dict(), nan_to_none=True), indent=2) + "\n")
        result.grid.to_csv(staging / FRONTIER_FILE, index=False)
        result.frontier.records.to_csv(staging / RECORDS_FILE, index=False)
        result.groups.to_csv(staging / FITS_FILE, index=False)
        figures = plot_frontier(result, compare=compare, compare_label=compare_label)
        save_plots(figures, staging)
        if comparison is not None:
            (staging / cmp.COMPARE_JSON).write_text(json.dumps(plain(comparison[0], nan_to_none=True), indent=2) + "\n")
            comparison[1].to_csv(staging / cmp.COMPARE_CSV, index=False)
            comparison[2].savefig(staging / cmp.COMPARE_PNG, dpi=cmp.COMPARE_DPI)
        report = render_report(result, compare, compare_label, command, stale_curve=stale_curve)
        if comparison is not None:
            report += "\n".join(_compare_section(comparison[1])) + "\n"
        (staging / REPORT_FILE).write_text(report)
        written = [out_dir / path.name for path in sorted(staging.iterdir())]
    if stale_curve:
        os.replace(out_dir / CURVE_FILE, out_dir / STALE_CURVE_FILE)
        written.append(out_dir / STALE_CURVE_FILE)
    return written


def render_report(
    result: FrontierFit,
    compare: Curve | None = None,
    compare_label: str | None = None,
    command: str | None = None,
    stale_curve: bool = False,
) -> str:
    """report.md as a string."""
    fr = result.frontier
    s = result.settings
    label = compare_label or "compare"
    lines = [f"# Compute-optimal n*(C): {fr.metric} against {fr.compute_unit}", ""]
    if result.flat is not None:
        c = result.curve
        f = result.flat
        support = (f" The same n wins at every C on {f['flat']} of {f['succeeded']} bootstrap resamples."
                   if f["succeeded"] else "")
        lines += [
            f"n*(C) = {result.n_star_flat} at every C in [{c.c_range[0]:.3g}, {c.c_range[1]:.3g}] {fr.compute_unit}: "
            f"one n is best wherever the runs reach.{support} `{CURVE_FILE}` holds it as a flat curve (L = 0, "
            f"b = log2 {result.n_star_flat}; k and C0 are placeholders), so `isocompute allocate` gives "
            f"n = {result.n_star_flat} at any budget; a budget outside this range is an extrapolation.",
            "",
        ]
    elif result.curve is not None:
        c = result.curve
        lines += [
            f"log2 n*(C) = {c.L:.3f} / (1 + exp(-{c.k:.3f} (log10 C - {c.log10_C0:.3f}))) + {c.b:.3f}, "
            f"C in {fr.compute_unit}, fitted on C in [{c.c_range[0]:.3g}, {c.c_range[1]:.3g}]: "
            f"n* rises from {c.n_floor:.0f} to {c.n_ceiling:.0f} (R^2 = {result.r2:.3f}).",
            "",
        ]
    else:
        lines += [f"**No n*(C) curve was fitted**: {result.no_curve_reason}. The frontier below is complete.", ""]
        if stale_curve:
            lines += [
                (f"An older `{CURVE_FILE}` in this directory does not describe these runs: it was renamed "
                 f"`{STALE_CURVE_FILE}`, and `isocompute allocate` of `{CURVE_FILE}` here now says so."),
                "",
            ]
    if command:
        lines += [f"Command: `{command}`", ""]
    n_values = sorted(int(n) for n in fr.points["n"].unique())
    r0_note = " (not identified by the data: see the warnings)" if any("R0" in f.not_identified for f in result.flags.values()) else ""
    b_values = sorted(int(b) for b in fr.points["b_problem"].unique())
    lines += [
        f"- runs: {fr.points['run'].nunique()} ({len(fr.points)} validation points at C > 0); "
        f"n in {{{', '.join(map(str, n_values))}}}, b_problem in {{{', '.join(map(str, b_values))}}}",
        f"- grouped by {' and '.join(result.group_by)}; per-group curves fitted on "
        f"{'all validation points' if s['fit_on'] == 'all' else 'record-breaking points'}; "
        + (f"R0 shared by all groups = {s['r0']:.4f}{r0_note}" if "r0" in s else "R0 fitted per group"),
        f"- reward bucket {fr.bucket:g}; smoothing {'off' if not fr.half_life else f'half-life {fr.half_life:g} ' + fr.compute_unit}; n* smoothing window "
        f"{s['window']} grid points at {s['grid_per_decade']} per decade; k <= {s['k_max']:g}; "
        + _bootstrap_line(result),
        "",
    ]
    if result.warnings:
        lines += ["## Warnings", ""] + [f"- {w}" for w in result.warnings] + [""]
    if fr.notes:
        lines += ["## Notes on the data", ""] + [f"- {note}" for note in fr.notes] + [""]

    if result.curve is not None and result.flat is None:
        c = result.curve
        ci = result.ci.set_index("param") if result.ci is not None else None
        rows = []
        for name in ("L", "k", "log10_C0", "b"):
            interval = f"[{ci.loc[name, 'low']:.3f}, {ci.loc[name, 'high']:.3f}]" if ci is not None else "-"
            row = [name, f"{getattr(c, name):.3f}", interval]
            if compare is not None:
                row.append(f"{getattr(compare, name):.3f}")
            rows.append(row)
        headers = ["parameter", "value", "95% CI"] + ([label] if compare is not None else [])
        lines += ["## n*(C) sigmoid", "", _md_table(headers, rows), ""]
        resid = result.grid["residual"].to_numpy()
        lines += [
            f"- floor n* = 2^b = {c.n_floor:.1f}; ceiling n* = 2^(L+b) = {c.n_ceiling:.1f}",
            f"- R^2 = {result.r2:.4f}; RMSE = {result.rmse:.3f} and max |residual| = {np.max(np.abs(resid)):.3f} "
            f"(in log2 n, over {len(resid)} grid points)",
            "",
        ]
        lines += _residual_table(result)

    if len(result.grid):
        table = result.n_star_table()
        if len(table):
            headers = ["C", "n* (data)"]
            if result.curve is not None:
                headers += ["n* (fit)", "95% CI"]
            if compare is not None:
                headers += [f"n* ({label})"]
            rows = []
            for row in table.to_dict("records"):
                cells = [f"{row['C']:.3g}", f"{row['n_star_data']:.0f}"]
                if result.curve is not None:
                    cells.append(f"{row['n_star_fit']:.0f}")
                    cells.append(f"[{row['n_star_low']:.0f}, {row['n_star_high']:.0f}]" if "n_star_low" in row else "-")
                if compare is not None:
                    cells.append(f"{compare.n_star(row['C']):.0f}" if compare.compute_unit == fr.compute_unit else "-")
                rows.append(cells)
            lines += ["## n* at round budgets", "", _md_table(headers, rows), ""]
    if compare is not None and compare.compute_unit != fr.compute_unit:
        lines += [f"({label} counts C in {compare.compute_unit}, this fit in {fr.compute_unit}: n* not compared.)", ""]
    if compare is not None and compare.metric != fr.metric:
        lines += [f"({label} was fitted on {compare.metric}, this fit on {fr.metric}.)", ""]

    lines += ["## Per-group fits", "", "R(C) = R0 + (A - R0) / (1 + (C_mid / C)^beta)", ""]
    headers = list(result.group_by) + (["b_problem"] if "b_problem" not in result.group_by else []) + [
        "runs", "points", "C range", "best", "R0", "A", "C_mid", "beta", "RMSE", "status", "at a bound", "not identified"]
    rows = []
    for g in result.groups.to_dict("records"):
        rows.append(
            [str(g[k]) for k in result.group_by]
            + ([str(g["b_problem"])] if "b_problem" not in result.group_by else [])
            + [str(g["runs"]), f"{g['points']} ({g['fit_points']} fitted)", f"{g['C_min']:.3g} - {g['C_max']:.3g}",
               f"{g['best_reward']:.4f}"]
            + [_num(g[k]) for k in ("R0", "A", "C_mid", "beta", "rmse")]
            + [str(g["status"]), g["at_bounds"] or "-", g["not_identified"] or "-"]
        )
    lines += [_md_table(headers, rows), ""]
    if any(f.at_bounds or f.not_identified for f in result.flags.values()):
        lines += [
            "A parameter *at a bound* sits on the box the fit allows (beta in [0.02, 20], C_mid within 3 decades of "
            "the points, R0 <= A <= the metric's top): the points did not choose it. *Not identified*: C_mid outside "
            "the C range of the group's points (the rise is not seen), R0 with fewer than two points below C_mid on a "
            "rising curve (extrapolated). Read such a curve as a summary of its points, not as the parameters of a "
            "learning curve.",
            "",
        ]
    lines += [
        "## Files",
        "",
        f"- `{CURVE_FILE}`: the n*(C) curve (feeds `isocompute allocate`)" if result.curve is not None else
        f"- `{CURVE_FILE}`: not written (no n*(C) fit)",
        f"- `{FRONTIER_FILE}`: envelope reward and n* on the grid of C",
        f"- `{RECORDS_FILE}`: record-breaking points over all runs (the empirical frontier)",
        f"- `{FITS_FILE}`: per-group saturating fits",
        "- `frontier.png`, `n_star.png`: the plots",
        "- `compare.json`, `compare.csv`, `compare.png`: what each fixed n costs (below)",
        "",
    ]
    return "\n".join(lines)


def _bootstrap_line(result: FrontierFit) -> str:
    s = result.settings
    if s["bootstrap_over"] == "runs":
        return f"bootstrap {result.bootstrap.get('succeeded', 0)}/{s['bootstrap']} resamples over all runs (seed {s['seed']})"
    if s["bootstrap"] and len(result.groups) and (result.groups["runs"] == 1).all():
        return "bootstrap over the seeds of each group: none made, one run per group (run-to-run variation not measured)"
    return (f"bootstrap {result.bootstrap.get('succeeded', 0)}/{s['bootstrap']} resamples over the seeds of each group "
            f"(run-to-run variation; seed {s['seed']})")


def _compare_section(table) -> list[str]:
    from verl_isocompute.scaling.compare import COMPARE_CSV, pivot_markdown

    return [
        "", "## What the choice of n costs", "",
        "Compute a fixed n needs to reach the reward R* the compute-optimal n reaches at budget C, as a multiple "
        "of C (C_n(R*) / C from the per-n fits; `> x`: not reached within that n's fitted range, x = its last C / C, "
        f"`(never)`: its fitted asymptote A is below R*; `<= x`: already reached where its runs start). Rewards and details: `{COMPARE_CSV}`.", "",
        *pivot_markdown(table),
    ]


def _residual_table(result: FrontierFit) -> list[str]:
    grid = result.grid
    decade = np.floor(np.log10(grid["C"].to_numpy()) * 2) / 2  # half-decades
    rows = []
    for start, part in grid.groupby(decade, sort=True):
        r = part["residual"].to_numpy()
        rows.append([f"{10**start:.3g} - {10**(start + 0.5):.3g}", str(len(r)), f"{r.mean():+.3f}", f"{np.abs(r).max():.3f}"])
    return ["Residuals (fit - smoothed data, log2 n) by half-decade of C:", "",
            _md_table(["C", "grid points", "mean", "max |r|"], rows), ""]


def _md_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    out += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(out)


def _num(value: Any) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    return f"{value:.4g}"
