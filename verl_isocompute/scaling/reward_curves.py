"""The per-n reward curves a comparison reads: R_n(C) of each fixed n with the compute range its runs
covered, from a fit (:func:`reward_curves`) or from the ``reward_curves`` field of a curve file
(:func:`reward_curves_from`), and C_n(R), the compute n needs to reach a reward. The comparison itself:
:mod:`verl_isocompute.scaling.compare`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from verl_isocompute.scaling.curve import PRESET_PREFIX, REWARD_CURVES_KEY, Curve, reward_curve_entries
from verl_isocompute.scaling.errors import ScalingError
from verl_isocompute.scaling.saturating import SaturatingCurve

if TYPE_CHECKING:
    from verl_isocompute.scaling.fit import FrontierFit

FORM = "R0 + (A - R0) / (1 + (C_mid / C)^beta)"
EDGE = 1e-9  # relative slack when testing C against a range (grid ends are the range's ends)


class CompareError(ScalingError):
    """A comparison that cannot be made (no per-n curves, an n not in the sweep); the message names the fix."""


@dataclass(frozen=True)
class RewardCurve:
    """One fixed n's fitted reward curve, the compute range its runs covered, and what its points do not
    determine (:class:`~verl_isocompute.scaling.saturating.FitFlags`: parameter -> the bound it sits on, and
    the parameters not identified)."""

    n: int
    b_problem: int | None
    curve: SaturatingCurve
    c_range: tuple[float, float]
    runs: int = 1
    at_bounds: dict[str, str] = field(default_factory=dict)
    not_identified: tuple[str, ...] = ()
    # (resamples, 4) rows (R0, A, ln C_mid, beta) refitted on the fit's bootstrap resamples of the runs, NaN where
    # not refitted; None without a bootstrap. Every curve of one fit holds the same resamples.
    draws: np.ndarray | None = field(default=None, compare=False, repr=False)

    def covers(self, compute: np.ndarray) -> np.ndarray:
        lo, hi = self.c_range
        return (compute >= lo * (1 - EDGE)) & (compute <= hi * (1 + EDGE))


def compute_to_reach(curve: SaturatingCurve, reward: float | np.ndarray) -> np.ndarray:
    """C(R), the inverse of R(C): C_mid * ((R - R0) / (A - R))^(1 / beta); inf for R >= A, 0 for R <= R0."""
    r = np.asarray(reward, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = (r - curve.R0) / (curve.A - r)
        out = curve.C_mid * np.power(ratio, 1.0 / curve.beta)
    out = np.where(r >= curve.A, np.inf, out)
    return np.where(r <= curve.R0, 0.0, out)


# --- where the per-n curves come from ---------------------------------------------------------------


def reward_curves(result: FrontierFit) -> list[RewardCurve]:
    """The fitted per-group curves of a fit (groups that did not fit are left out), ordered by n."""
    out = []
    for row in result.groups.to_dict("records"):
        key = (int(row["n"]), int(row["b_problem"])) if result.group_by == ("n", "b_problem") else (int(row["n"]),)
        curve = result.curves.get(key)
        if curve is None:
            continue
        b = row.get("b_problem")
        b_problem = int(b) if isinstance(b, (int, np.integer)) or (isinstance(b, float) and b.is_integer()) else None
        flags = result.flags.get(key)
        out.append(RewardCurve(key[0], b_problem, curve, (float(row["C_min"]), float(row["C_max"])), int(row["runs"]),
                               dict(flags.at_bounds) if flags else {}, flags.not_identified if flags else (),
                               result.curve_draws.get(key)))
    return sorted(out, key=lambda rc: (rc.n, rc.b_problem or 0))


def reward_curves_field(curves: Sequence[RewardCurve], group_by: Sequence[str] = ("n",)) -> dict[str, Any]:
    """The ``reward_curves`` field of ``curve.json``: the form, the grouping, and per group
    ``n``, ``b_problem`` (null when the group mixed several), ``R0``, ``A``, ``C_mid``, ``beta``,
    ``c_range`` ([C_min, C_max] its runs covered), ``runs``, ``at_bounds`` ({parameter: "lower" | "upper"}),
    ``not_identified`` (["R0", "C_mid"] or part of it) and, when the fit bootstrapped, ``bootstrap`` (the curve on
    each resample, [R0, A, C_mid, beta] or null)."""
    return {
        "form": FORM,
        "group_by": ",".join(group_by),
        "curves": [
            {
                "n": rc.n,
                "b_problem": rc.b_problem,
                "R0": rc.curve.R0,
                "A": rc.curve.A,
                "C_mid": rc.curve.C_mid,
                "beta": rc.curve.beta,
                "c_range": list(rc.c_range),
                "runs": rc.runs,
                "at_bounds": dict(rc.at_bounds),
                "not_identified": list(rc.not_identified),
                **({} if rc.draws is None else {"bootstrap": _draws_field(rc.draws)}),
            }
            for rc in curves
        ],
    }


def reward_curves_from(curve: Curve, source: str, budget: float | None = None) -> list[RewardCurve]:
    """The per-n curves stored in a curve file; a one-line :class:`CompareError` for a preset or a file
    without them (saying what such a curve can and cannot compare), :class:`CurveError` for a bad field."""
    field = curve.extra.get(REWARD_CURVES_KEY)
    if field is None:
        at = ""
        if budget is not None:
            at = f" (here n* = {curve.n_star(budget):.0f} at C = {budget:.3g} {curve.compute_unit})"
        what = (
            "a paper preset carries only the n*(C) sigmoid"
            if source.startswith(PRESET_PREFIX)
            else f"this curve file has no '{REWARD_CURVES_KEY}' (written before 0.2.0, or by hand)"
        )
        raise CompareError(
            f"{source}: {what}: it says which n is compute-optimal{at}, not what another n costs; --compare needs "
            "the per-n reward curves that `isocompute fit` (0.2.0+) stores in curve.json: fit your sweep and pass that file"
        )
    return [
        RewardCurve(e["n"], e["b_problem"], SaturatingCurve(e["R0"], e["A"], e["C_mid"], e["beta"]), e["c_range"], e["runs"],
                    e["at_bounds"], e["not_identified"], None if e["bootstrap"] is None else _draws_array(e["bootstrap"]))
        for e in reward_curve_entries(field, curve.metric, source)
    ]


def _draws_field(draws: np.ndarray) -> list:
    """Bootstrap rows (R0, A, ln C_mid, beta) as the curve file holds them: [R0, A, C_mid, beta], null if not refitted."""
    return [None if np.isnan(row).any() else [float(row[0]), float(row[1]), float(np.exp(row[2])), float(row[3])]
            for row in np.asarray(draws, dtype=float)]


def _draws_array(rows: list) -> np.ndarray:
    """The inverse of :func:`_draws_field`."""
    return np.array([[np.nan] * 4 if row is None else [row[0], row[1], np.log(row[2]), row[3]] for row in rows],
                    dtype=float).reshape(-1, 4)


def select(curves: Sequence[RewardCurve], spec: str | None) -> list[RewardCurve]:
    """The curves of the n values named by ``spec`` ("all", "n=8,16,64" or "8,16,64")."""
    if spec is None or spec.strip().lower() in ("", "all", "n=all"):
        return list(curves)
    text = spec.strip()
    text = text[2:] if text.lower().startswith("n=") else text
    sweep = sorted({rc.n for rc in curves})
    try:
        wanted = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise CompareError(f"--compare expects n=N,N,... such as n=8,16,64 (or all), got {spec!r}") from None
    missing = [n for n in wanted if n not in sweep]
    if missing or not wanted:
        raise CompareError(
            f"--compare n={','.join(map(str, missing or wanted))}: not a fitted n of the sweep; "
            f"fitted n: {', '.join(map(str, sweep))}"
        )
    return [rc for rc in curves if rc.n in wanted]
