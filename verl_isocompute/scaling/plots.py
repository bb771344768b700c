"""The two figures of the playbook's fitting workflow (arXiv 2603.12151, section 4).

``frontier``: the metric against compute C for every run (points coloured by n), each group's fitted
saturating curve over the C range its runs cover, the record-breaking points, and the frontier (upper
envelope of the fits) coloured by the n that wins there, n*(C).
``n_star``: n*(C) from the envelope (raw argmax and its running average in log2 space), the fitted
sigmoid with its bootstrap band, and optionally a curve to compare with (e.g. a ``paper:`` preset).

Figures are built on matplotlib's object API with the Agg canvas (no pyplot, no display, no global
state), so this works in scripts, on servers, and returns figures a notebook shows as they are.
"""

from __future__ import annotations

import functools
import re
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from verl_isocompute.scaling.curve import Curve
    from verl_isocompute.scaling.fit import FrontierFit

PLOT_FILES = {"frontier": "frontier.png", "n_star": "n_star.png"}
FIGSIZE = (8.0, 5.2)  # inches


def plot_frontier(
    result: "FrontierFit", compare: "Curve | None" = None, compare_label: str | None = None
) -> dict[str, "Figure"]:
    """The ``frontier`` and ``n_star`` figures of a fit, as matplotlib figures keyed by name.

    ``compare`` (e.g. ``load_curve("paper:qwen2.5-7b-easy")``) is drawn on the n* figure when its
    compute unit matches the fit's; ``compare_label`` names it in the legend.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.colors import LogNorm
    from matplotlib.figure import Figure

    n_values = sorted(int(n) for n in result.frontier.points["n"].unique())
    norm = LogNorm(vmin=min(n_values), vmax=max(n_values) * (1.0001 if len(n_values) == 1 else 1.0))
    figures = {}
    for name, draw in (("frontier", _draw_frontier), ("n_star", _draw_n_star)):
        # Fixed margins rather than a layout engine: the figures' furniture is known (title, axis labels,
        # a colorbar on the right of one), and constrained layout measured every tick label on each save,
        # a third of the time of `isocompute fit` at 500 runs.
        fig = Figure(figsize=FIGSIZE)
        fig.subplots_adjust(left=0.09, right=0.86 if name == "frontier" else 0.97, bottom=0.1, top=0.93)
        FigureCanvasAgg(fig)
        draw(fig, result, norm, n_values, (compare, compare_label or "compare"))
        finish_figure(fig)
        figures[name] = fig
    return figures


_SUPERSCRIPT = str.maketrans("0123456789-", "⁰¹²³⁴⁵⁶⁷⁸⁹⁻")
# What matplotlib's LogFormatterSciNotation writes: $\mathdefault{10^{3}}$, $\mathdefault{2\times10^{3}}$
_MATHTEXT_POWER = re.compile(r"\$\\mathdefault\{(-?)(?:([0-9.]+)\\times)?([0-9.]+)(?:\^\{(-?[0-9]+)\})?\}\$")


def finish_figure(fig: Figure) -> None:
    """Make ``fig`` cheaper to save without changing what it shows; call it once everything is drawn.

    * Log axes are labelled in plain text (10³, 2×10³) rather than mathtext ($10^{3}$), in the same font:
      mathtext parses each label with pyparsing (its grammar is built on first use), which was a tenth
      of ``isocompute fit`` at 500 runs. Axes whose labels were set explicitly are left alone, and a
      label the pattern does not cover stays mathtext.
    * Titles are pinned where matplotlib puts them when nothing is above the axes (y = 1): otherwise
      every save measures each axis's tick labels once more to see whether the title must move up.
      Our axes have no ticks on top; an offset text on the y axis (e.g. "1e6") sits at the left.
    """
    from matplotlib.ticker import LogFormatterSciNotation

    plain = _plain_log_formatter()
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            if axis.get_scale() != "log":
                continue
            base = axis.get_transform().base
            if type(axis.get_major_formatter()) is LogFormatterSciNotation:
                axis.set_major_formatter(plain(base))
            if type(axis.get_minor_formatter()) is LogFormatterSciNotation:
                axis.set_minor_formatter(plain(base, labelOnlyBase=False))
        if ax.get_title():
            ax.set_title(ax.get_title(), y=1.0)


@functools.cache
def _plain_log_formatter() -> type:
    from matplotlib.ticker import LogFormatterSciNotation

    class PlainLogFormatter(LogFormatterSciNotation):
        """LogFormatterSciNotation's labels as plain text (see :func:`finish_figure`)."""

        def __call__(self, x, pos=None):
            label = super().__call__(x, pos)
            match = _MATHTEXT_POWER.fullmatch(label)
            if match is None:
                return label
            sign, coeff, base, exponent = match.groups()
            text = ("\N{MINUS SIGN}" if sign else "") + (f"{coeff}\N{MULTIPLICATION SIGN}" if coeff else "") + base
            return text + (exponent.translate(_SUPERSCRIPT) if exponent is not None else "")

    return PlainLogFormatter


def save_plots(figures: dict[str, "Figure"], out_dir: str | Path, dpi: int = 130) -> list[Path]:
    """Write figures as PNG files (``frontier.png``, ``n_star.png``) into ``out_dir``."""
    out_dir = Path(out_dir)
    paths = []
    for name, fig in figures.items():
        path = out_dir / PLOT_FILES.get(name, f"{name}.png")
        fig.savefig(path, dpi=dpi)
        paths.append(path)
    return paths


def _colorbar(fig, ax, norm, n_values):
    from matplotlib.cm import ScalarMappable

    right = ax.get_position().x1
    bar = fig.colorbar(ScalarMappable(norm=norm, cmap="viridis"), cax=fig.add_axes((right + 0.015, 0.1, 0.022, 0.83)))
    bar.set_ticks(n_values)
    bar.set_ticklabels([str(n) for n in n_values])
    bar.minorticks_off()
    bar.set_label("n (rollouts per problem)")


def _draw_frontier(fig, result, norm, n_values, _compare) -> None:
    from matplotlib import colormaps
    from matplotlib.collections import LineCollection

    cmap = colormaps["viridis"]
    frontier = result.frontier
    ax = fig.add_subplot()
    pts = frontier.points
    dense = len(pts) > 2000  # many runs: small faint dots, so the fits and the frontier stay visible
    # One marker line per n rather than one scatter with a colour per point: the same picture, drawn
    # with one cached marker per colour (Agg's fast path), which keeps 100,000 points well under a second.
    for n, part in pts.groupby("n", sort=True):
        ax.plot(part["C"].to_numpy(), part["reward"].to_numpy(), linestyle="none", marker="o",
                ms=2.0 if dense else 3.7, mew=0, color=cmap(norm(n)), alpha=0.25 if dense else 0.7, rasterized=True)
    for row in result.groups.itertuples(index=False):
        key = (row.n, row.b_problem) if result.group_by == ("n", "b_problem") else (row.n,)
        curve = result.curves.get(key)
        if curve is None:
            continue
        c = np.geomspace(row.C_min, row.C_max, 200)
        ax.plot(c, curve(c), color=cmap(norm(row.n)), lw=1.2, alpha=0.9)
    grid = result.grid
    if len(grid) > 1:
        c, r = grid["C"].to_numpy(), grid["reward"].to_numpy()
        segments = np.stack([np.column_stack([c[:-1], r[:-1]]), np.column_stack([c[1:], r[1:]])], axis=1)
        ax.add_collection(LineCollection(segments, colors="black", linewidths=5.5, zorder=3))
        line = LineCollection(segments, cmap=cmap, norm=norm, linewidths=3.5, zorder=4)
        line.set_array(grid["n_star"].to_numpy()[:-1].astype(float))
        ax.add_collection(line)
        ax.plot([], [], color="black", lw=3.5, label="frontier: envelope of the fits, coloured by n*")
    rec = frontier.records
    ax.scatter(rec["C"], rec["reward"], facecolors="none", edgecolors="black", s=22, lw=0.8, zorder=5,
               label=f"record-breaking points (bucket {frontier.bucket:g})")
    ax.set_xscale("log")
    ax.set_xlabel(f"compute C ({frontier.compute_unit})")
    ax.set_ylabel(frontier.metric)
    ax.set_title(f"{frontier.metric} against compute, fitted per {' and '.join(result.group_by)}")
    ax.legend(loc="upper left", fontsize=8)
    ax.grid(True, which="major", alpha=0.3)
    _colorbar(fig, ax, norm, n_values)


def _draw_n_star(fig, result, norm, n_values, compare_with) -> None:
    compare, compare_label = compare_with
    ax = fig.add_subplot()
    grid = result.grid
    frontier = result.frontier
    if len(grid):
        c = grid["C"].to_numpy()
        ax.step(c, grid["n_star"], where="mid", color="0.6", lw=1.0, label="n* = argmax of the fitted curves")
        ax.plot(c, np.exp2(grid["log2_n_star_smoothed"]), "o", ms=3, color="tab:blue",
                label=f"n*(C), running average in log2 (window {result.settings.get('window')})")
        if "log2_n_star_low" in grid:
            ax.fill_between(c, np.exp2(grid["log2_n_star_low"]), np.exp2(grid["log2_n_star_high"]),
                            color="tab:orange", alpha=0.2, lw=0, label="95% bootstrap band (over runs)")
        if result.flat is not None:
            ax.plot(c, result.curve.n_star(c), color="tab:orange", lw=2.2,
                    label=f"flat: n* = {result.n_star_flat} at every C (L = 0)")
        elif result.curve is not None:
            fit = result.curve
            ax.plot(c, fit.n_star(c), color="tab:orange", lw=2.2,
                    label=f"sigmoid: L={fit.L:.2f} k={fit.k:.2f} log10 C0={fit.log10_C0:.2f} b={fit.b:.2f}"
                    f" (R²={result.r2:.3f})")
        if compare is not None and compare.compute_unit == frontier.compute_unit:
            ax.plot(c, compare.n_star(c), "--", color="tab:red", lw=1.5,
                    label=f"{compare_label} (L={compare.L:.2f} k={compare.k:.2f} "
                    f"log10 C0={compare.log10_C0:.2f} b={compare.b:.2f})")
    if result.curve is None:
        reason = textwrap.fill(result.no_curve_reason or "", 70)
        ax.text(0.5, 0.5, "no n*(C) fit:\n" + reason, transform=ax.transAxes, ha="center", va="center", fontsize=9,
                bbox={"facecolor": "white", "alpha": 0.8, "edgecolor": "0.7"})
    ax.set_xscale("log")
    ax.set_yscale("log", base=2)
    ax.set_yticks(n_values)
    ax.set_yticklabels([str(n) for n in n_values])
    ax.minorticks_off()
    ax.set_xlabel(f"compute C ({frontier.compute_unit})")
    ax.set_ylabel("compute-optimal n*")
    ax.set_title(f"n*(C) for {frontier.metric}")
    ax.grid(True, alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="upper left", fontsize=8)
