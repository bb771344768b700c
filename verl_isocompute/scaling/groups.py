"""The runs grouped for the fit: by n, or by (n, B_problem) for the joint question (arXiv 2603.12151,
section 4); each group's validation points and the points its curve is fitted to.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import pandas as pd

from verl_isocompute.scaling.errors import ScalingError
from verl_isocompute.scaling.points import record_breaking
from verl_isocompute.scaling.saturating import SaturatingCurve, bin_points, fit_saturating

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
