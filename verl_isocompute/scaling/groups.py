"""The runs grouped for the fit: by n, or by (n, B_problem) for the joint question (arXiv 2603.12151,
section 4); each group's validation points and the points its curve is fitted to, and what those points do
not determine about its curve (:func:`group_flags`, :func:`flag_warnings`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import pandas as pd

from verl_isocompute.scaling.errors import ScalingError
from verl_isocompute.scaling.points import record_breaking
from verl_isocompute.scaling.saturating import FitFlags, SaturatingCurve, bin_points, fit_flags, fit_saturating

GROUP_BYS = {"n": ("n",), "n,b_problem": ("n", "b_problem")}


@dataclass
class RunGroup:
    key: tuple
    runs: list[str]
    points: pd.DataFrame  # the group's validation points
    fit_points: pd.DataFrame  # what the curve is fitted to (records or all points)

    def fit(self, **kwargs) -> tuple[SaturatingCurve, float]:
        """Fit this group's curve (to its binned fit points); the RMSE is over the points themselves."""
        c, y = self.fit_points["C"].to_numpy(), self.fit_points["reward"].to_numpy()
        curve, _ = fit_saturating(*bin_points(c, y), **kwargs)
        return curve, float(np.sqrt(np.mean((curve(c) - y) ** 2)))

    def distinct_c(self) -> int:
        """How many values of C the curve is fitted to: its points pooled in bins of 1/50 decade (five seeds
        validated at the same C are one value; a curve of four parameters needs four)."""
        return len(bin_points(self.fit_points["C"].to_numpy(), self.fit_points["reward"].to_numpy())[0])

    def flags(self, curve: SaturatingCurve, r0: float | None = None) -> FitFlags:
        """What this group's points do not determine about ``curve`` (fitted by :meth:`fit` with ``r0``)."""
        c, y, _ = bin_points(self.fit_points["C"].to_numpy(), self.fit_points["reward"].to_numpy())
        return fit_flags(curve, c, y, r0=r0)


def group_keys(group_by: str | Sequence[str]) -> tuple[str, ...]:
    if isinstance(group_by, str):
        if group_by not in GROUP_BYS:
            raise ScalingError(f"group_by must be one of {', '.join(GROUP_BYS)}, got {group_by!r}")
        return GROUP_BYS[group_by]
    keys = tuple(group_by)
    if keys not in GROUP_BYS.values():
        raise ScalingError(f"group_by must be one of {', '.join(GROUP_BYS)}, got {group_by!r}")
    return keys


def group_label(key: tuple, keys: tuple[str, ...]) -> str:
    return ", ".join(f"{k}={v}" for k, v in zip(keys, key))


def make_groups(points: pd.DataFrame, keys: tuple[str, ...], bucket: float, fit_on: str) -> list[RunGroup]:
    groups = []
    for key, pts in points.groupby(list(keys), sort=True):
        key = tuple(int(k) for k in (key if isinstance(key, tuple) else (key,)))
        fit_points = record_breaking(pts, bucket) if fit_on == "records" else pts
        groups.append(RunGroup(key, sorted(pts["run"].unique()), pts, fit_points))
    return groups


def group_row(g: RunGroup, keys: tuple[str, ...]) -> dict[str, Any]:
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


def group_b(g: RunGroup):
    values = g.points["b_problem"].unique()
    return int(values[0]) if len(values) == 1 else np.nan


def group_flags(fitted, free, curves, r0) -> dict[tuple, FitFlags]:
    """Each fitted group's :class:`FitFlags`. A shared R0 is fixed in the refit: it is measured when the
    first-pass fit of at least one group measured its own R0."""
    flags = {g.key: g.flags(curves[g.key], r0=r0) for g in fitted}
    if r0 is not None:
        measured = any("R0" not in g.flags(free[g.key][0]).not_identified for g in fitted)
        for key, f in flags.items():
            rest = tuple(name for name in f.not_identified if name != "R0")
            flags[key] = FitFlags(f.at_bounds, rest if measured else ("R0", *rest))
    return flags


def flag_warnings(fitted, curves, flags, keys, r0) -> list[str]:
    """The flags in words: the curves on a bound of the fit, then each parameter the data do not identify."""
    def groups_with(test):
        return ", ".join(group_label(g.key, keys) for g in fitted if test(flags[g.key]))

    out = []
    hits = [
        group_label(g.key, keys) + " (" + ", ".join(
            f"{name} = {getattr(curves[g.key], name):.4g}, its {side} bound" for name, side in flags[g.key].at_bounds.items()
        ) + ")"
        for g in fitted if flags[g.key].at_bounds
    ]
    if hits:
        out.append(f"per-group curves sit on a bound of the fit: {'; '.join(hits)}; the points do not determine "
                   "these parameters: the fit stopped at the edge of what it allows")
    no_r0 = groups_with(lambda f: "R0" in f.not_identified)
    if r0 is not None and no_r0:
        out.append(f"R0 (the reward at C -> 0, shared = {r0:.4g}) is not identified by the data: no group's own fit "
                   "has two points below its C_mid on a rising curve, so R0 is extrapolated below the first "
                   "validation at C > 0")
    elif no_r0:
        out.append(f"R0 is not identified by the data for {no_r0}: fewer than two points below C_mid on a rising "
                   "curve, so R0 is extrapolated below the first validation at C > 0")
    no_mid = groups_with(lambda f: "C_mid" in f.not_identified)
    if no_mid:
        out.append(f"C_mid is not identified by the data for {no_mid}: it lies outside the C range of the group's "
                   "points, so where the curve rises (and how steeply, beta) is not seen")
    return out
