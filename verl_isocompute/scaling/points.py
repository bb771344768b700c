"""The points a fit starts from: each run's validation points and the record-breaking points over all runs.

Steps 1 and 2 of the playbook's fitting workflow (arXiv 2603.12151, section 4). The record-breaking points
are the empirical compute-optimal frontier (:class:`Frontier`, the best reward reached at compute <= C); the
fitted frontier, the upper envelope of the per-n curves and n*(C), is steps 3 to 5
(:mod:`verl_isocompute.scaling.fit`, :mod:`verl_isocompute.scaling.envelope`).

1. Per run, the validation metric (``val/avg@4`` by default; any logged metric works, higher is better)
   against cumulative compute C (rollouts, or generated tokens). Points at C = 0 (the validation before
   training) are kept out: C lives on a log scale from here on.
2. Record-breaking points. The frontier is f(C) = max of R_j over points with C_j <= C, and a point is
   record-breaking iff R_i > max_{C_j < C_i} R_j; the frontier computed from the record-breakers alone is
   the frontier of all points, so later steps only need them. The playbook bucketises the reward first
   (bin width 0.01, a chosen value) and keeps the first point of each new, higher bucket, so that noise
   within a bucket does not count as progress; the frontier of the record-breakers then stays within one
   bucket of the exact one, and is still strictly increasing.

Checks on the way (each an error naming the file and the step, never a silently different point):
compute must be cumulative, not negative and at most :data:`~verl_isocompute.scaling.curve.MAX_COMPUTE`
(1e20); a metric that is a share of samples (:func:`~verl_isocompute.scaling.curve.metric_range`: our ``val/avg@k``, ``val/best@k``,
``val/worst@k``, overall or per data source, and verl's ``.../acc/...``) must lie in [0, 1]. Other metrics
(verl's reward means, a loss) are not range-checked.

Where a point sits. A validation point of step t measures the policy after step t's update: it sits at C_t,
the compute logged with it. A training metric of step t (``train/reward``, verl's ``critic/score/mean``, ...)
measures step t's own rollouts, drawn from the policy trained on the rollouts of the steps before: it sits at
C_(t-1), the compute logged at the run's previous step (0 for step 1). Left at C_t, a step of n = 8 would be
credited with 4x the rollouts of a step of n = 2 that it never used, a lag in compute of one batch that grows
with n and biases every comparison against larger n.

Points with equal C are ordered best first, then by run name and step, so the result never depends on
the order runs were given in. Optional smoothing (off by default) works in compute, never in steps: an
exponential kernel of half-life ``half_life`` (in units of C) over each run's piecewise-linear curve, the same
window for every n (:func:`smooth_in_compute`). A smoothing per logged step (the EMA of earlier releases)
lags by 4x the compute at n = 8 as at n = 2 and so favours small n on a sweep where every n is the same.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from verl_isocompute.runlog import DEFAULT_METRIC, WITH_CURATION, WITH_GUIDANCE
from verl_isocompute.scaling.curve import COMPUTE_UNITS, MAX_COMPUTE, metric_range
from verl_isocompute.scaling.errors import ScalingError
from verl_isocompute.scaling.fit_defaults import DEFAULT_BUCKET
from verl_isocompute.scaling.run_logs import PARTIAL_SPEND, RESPONSE_LENGTH, RunLogs, name_runs

# How compute was derived for runs that did not log it (see run_logs.py), as the report says it.
_DERIVED = {
    "rollouts": {
        "derived": "rollouts not logged: C derived as step x n x b_problem",
        "--derive-compute": "--derive-compute: C derived as step x n x b_problem, logged counters ignored",
    },
    "tokens": {"derived": f"tokens not logged: C derived as the running sum of {RESPONSE_LENGTH} x n x b_problem"},
    WITH_GUIDANCE["rollouts"]: {
        "rollouts": "no guidance spend logged (an unguided run, or no isocompute.guided.spend): C = its rollouts",
        "derived": "rollouts_with_guidance not logged and rollouts derived as step x n x b_problem",
        "--derive-compute": "--derive-compute: C derived as step x n x b_problem, plus the logged guidance spend",
    },
    WITH_CURATION["rollouts"]: {
        "rollouts": "no spend logged (no isocompute.guided.spend): C = its rollouts",
        "derived": "rollouts_with_curation not logged and rollouts derived as step x n x b_problem",
        "--derive-compute": "--derive-compute: C derived as step x n x b_problem, plus the logged spend with curation",
    },
}


@dataclass
class Frontier:
    """Validation points of every run and the record-breaking points over all of them.

    ``points``: one row per validation point with ``run``, ``n``, ``b_problem``, ``step``, ``C``,
    ``reward`` (smoothed in compute when ``half_life`` > 0; the logged value is in ``reward_raw``).
    ``records``: the record-breaking points over all runs, increasing in C and in reward; each row keeps
    its run's n and b_problem, so it is also the empirical n*(C).
    """

    metric: str
    compute_unit: str
    bucket: float
    half_life: float
    points: pd.DataFrame
    records: pd.DataFrame
    runs: pd.DataFrame
    notes: list[str] = field(default_factory=list)

    def value(self, compute: float | np.ndarray) -> np.ndarray:
        """The frontier f(C): best reward reached at compute <= C (NaN before the first point)."""
        return frontier_value(self.records, compute)


def is_training_metric(metric: str) -> bool:
    """A metric logged on a step's own rollouts (anything not validation: ``val/...``, ``val-core/...``, ...)."""
    return not metric.split("/", 1)[0].lower().startswith("val")


def validation_points(
    logs: RunLogs, metric: str = DEFAULT_METRIC, compute: str = "rollouts", half_life: float = 0.0
) -> tuple[pd.DataFrame, list[str]]:
    """The (C, reward) points of every run for ``metric``, placed where their compute is (module docstring),
    smoothed in compute when ``half_life`` > 0, and notes on what was dropped."""
    if compute not in COMPUTE_UNITS:
        raise ScalingError(f"compute must be one of {', '.join(COMPUTE_UNITS)}, got {compute!r}")
    steps = logs.steps
    if metric in logs.text_cells:  # a run would be left out for want of a number: refused, not a note
        raise ScalingError(f"{logs.text_cells[metric]}, not a number: {metric} holds no number in that run; fix the log")
    dropped_nonfinite = int(logs.nonfinite.get(metric, 0))
    if metric not in steps or not steps[metric].notna().any():
        if dropped_nonfinite:
            raise ScalingError(f"every logged value of {metric!r} is NaN or inf ({dropped_nonfinite} values)")
        raise ScalingError(f"metric {metric!r} is not in the logs; pass --metric, logged metrics: {_list_metrics(logs.metrics)}")
    if compute == "tokens":
        logged = steps["tokens"].notna().groupby(steps["run"]).any()
        missing = logged.index[~logged].tolist()
        if missing:
            tokenish = [m for m in logs.metrics if "token" in m.lower()]
            raise ScalingError(
                f"generated tokens are not logged (nor derivable from response_length/mean) for {len(missing)} "
                f"run(s), e.g. {missing[0]}: looked for 'tokens' and 'isocompute/tokens', found token-like keys: "
                f"{', '.join(tokenish[:10]) or '(none)'}; use --compute rollouts"
            )
    _check_increasing(steps, compute, logs.runs)
    _check_range(steps, metric, logs.runs)

    notes = []
    sources = logs.runs.set_index("run").get(f"{compute}_source", pd.Series(dtype=object))
    partial = sources.index[sources == PARTIAL_SPEND].tolist()
    if partial:
        other = WITH_CURATION["rollouts"] if compute == WITH_GUIDANCE["rollouts"] else WITH_GUIDANCE["rollouts"]
        raise ScalingError(
            f"{name_runs(partial)}: logs {other} but not {compute}, so the spend before training that {compute} "
            f"counts is unknown (its rollouts alone would drop the logged spend); fit --compute {other}, or leave "
            "the run out of RUNS"
        )
    for source, how in _DERIVED[compute].items():
        runs = sources.index[sources == source].tolist()
        if runs:
            notes.append(f"{how}: {name_runs(runs)}")
    if dropped_nonfinite:
        notes.append(f"dropped {dropped_nonfinite} NaN/inf values of {metric}")
    rows = steps.loc[steps[metric].notna(), ["run", "n", "b_problem", "step", compute, metric]]
    rows = rows.rename(columns={compute: "C", metric: "reward"})
    if is_training_metric(metric):
        rows = _before_the_step(steps, rows, compute)
        notes.append(f"{metric} is a training metric: each point sits at the compute before its step's own rollouts "
                     "(the policy that drew them was trained on that much)")
    no_compute = int(rows["C"].isna().sum())
    if no_compute:
        notes.append(f"dropped {no_compute} points of {metric} logged without {compute}")
    rows = rows[rows["C"].notna()]
    if half_life:
        rows = smooth_in_compute(rows, half_life)
        notes.append(f"{metric} smoothed per run in compute (exponential kernel, half-life {half_life:g} {compute})")
    at_zero = int((rows["C"] == 0).sum())
    if at_zero:
        notes.append(f"kept {at_zero} points at C = 0 (before any training) out of the log-scale fits")
    points = rows[rows["C"] > 0].reset_index(drop=True)
    if points.empty:
        raise ScalingError(f"no points of {metric} at C > 0: the runs validated only before training")
    left_out = sorted(set(logs.runs["run"]) - set(points["run"].unique()))
    if left_out:
        notes.append(f"no values of {metric} at C > 0, run left out: {name_runs(left_out)}")
    points["reward"] = points["reward"].astype(float)
    points["C"] = points["C"].astype(float)
    if "reward_raw" not in points:
        points["reward_raw"] = points["reward"]
    return points, notes


def _before_the_step(steps: pd.DataFrame, rows: pd.DataFrame, compute: str) -> pd.DataFrame:
    """``rows`` (a training metric) moved to C_(t-1): the compute the run had logged at its previous step.

    Step 1 (or a run's first logged step) with no earlier row: C_t less the step's own spend, C_(t+1) - C_t
    of the run's next step (its batch; 0 for step 1 of a run logged from step 1 on), never below 0.
    """
    logged = steps.loc[steps[compute].notna(), ["run", "step", compute]].sort_values(["run", "step"], kind="mergesort")
    logged = logged.drop_duplicates(["run", "step"], keep="last")
    before = logged.groupby("run", sort=False)[compute].shift(1)
    spend = logged.groupby("run", sort=False)[compute].shift(-1) - logged[compute]
    first = (logged[compute] - spend).clip(lower=0.0)
    logged = logged.assign(C_before=before.fillna(first))
    out = rows.merge(logged[["run", "step", "C_before"]], on=["run", "step"], how="left", validate="many_to_one")
    out["C"] = out.pop("C_before")
    return out


def smooth_in_compute(points: pd.DataFrame, half_life: float) -> pd.DataFrame:
    """Each run's ``reward`` smoothed with an exponential kernel of half-life ``half_life`` in C (0 = off).

    The kernel weighs the run's curve, taken as piecewise linear between its points, at the compute behind
    each point: S(C_i) = integral of exp(-lambda (C_i - c)) f(c) dc over [C_first, C_i], divided by the integral
    of the weight (lambda = ln 2 / half_life). Integrated exactly segment by segment, so the window is the
    same in compute however far apart a run's points are (n = 8's steps are 4x n = 2's): no n is favoured.
    The first point of a run keeps its value. The logged value is kept in ``reward_raw``.
    """
    if not (np.isfinite(half_life) and half_life >= 0):
        raise ScalingError(f"half_life must be a finite number >= 0 (in units of C; 0 = off), got {half_life}")
    out = points.sort_values(["run", "C", "step"], kind="mergesort").reset_index(drop=True)
    out["reward_raw"] = out["reward"].astype(float)
    if half_life == 0:
        return out
    rate = math.log(2.0) / half_life
    smoothed = np.empty(len(out))
    for _, index in out.groupby("run", sort=False).indices.items():
        c, f = out["C"].to_numpy(float)[index], out["reward_raw"].to_numpy(float)[index]
        total, weight = 0.0, 0.0
        smoothed[index[0]] = f[0]
        for k in range(1, len(index)):
            gap = c[k] - c[k - 1]
            decay = math.exp(-rate * gap)
            slope = (f[k] - f[k - 1]) / gap if gap > 0 else 0.0
            # integral over the segment of exp(-rate s) (f_k - slope s), s = C_k - c in [0, gap]
            mass = (1.0 - decay) / rate
            total = decay * total + f[k] * mass - slope * (1.0 - decay * (1.0 + rate * gap)) / rate**2
            weight = decay * weight + mass
            smoothed[index[k]] = total / weight if weight > 0 else f[k]
    out["reward"] = smoothed
    return out


def bucket_index(reward: np.ndarray | pd.Series, bucket: float) -> np.ndarray:
    """Which reward bucket of width ``bucket`` each value falls in (``bucket`` = 0: the value itself).

    Rounding before the floor puts 0.29 in bucket 29, not 28 (0.29 / 0.01 = 28.999...).
    """
    values = np.asarray(reward, dtype=float)
    if bucket < 0:
        raise ScalingError(f"bucket must be >= 0 (0 = no bucketisation), got {bucket}")
    if bucket == 0:
        return values
    return np.floor(np.round(values / bucket, 9))


def record_breaking(points: pd.DataFrame, bucket: float = DEFAULT_BUCKET, by: list[str] | None = None) -> pd.DataFrame:
    """The record-breaking points (first point of each new, higher reward bucket, in order of C).

    With ``by`` (e.g. ``["n"]``), records are taken within each group: the per-n frontier.
    """
    keys = list(by or [])
    order = points.sort_values(
        keys + ["C", "reward", "run", "step"],
        ascending=[True] * len(keys) + [True, False, True, True],
        kind="mergesort",
    )
    if not keys:
        return order[record_mask(order["C"].to_numpy(), order["reward"].to_numpy(), bucket)].reset_index(drop=True)
    level = pd.Series(bucket_index(order["reward"], bucket), index=order.index)
    groups = [order[k] for k in keys]
    best_before = level.groupby(groups, sort=False).cummax().groupby(groups, sort=False).shift(1)
    is_record = best_before.isna().to_numpy() | (level.to_numpy() > best_before.to_numpy())
    return order[is_record].reset_index(drop=True)


def record_mask(compute: np.ndarray, reward: np.ndarray, bucket: float = DEFAULT_BUCKET) -> np.ndarray:
    """Which of the points (arrays, in any order) are record-breaking: :func:`record_breaking` on bare
    arrays, for the fit's bootstrap. Equal C: the best first, then the order given."""
    compute, reward = np.asarray(compute, dtype=float), np.asarray(reward, dtype=float)
    order = np.lexsort((-reward, compute))  # stable: ties keep the order given
    level = bucket_index(reward[order], bucket)
    best_before = np.concatenate([[-np.inf], np.maximum.accumulate(level)[:-1]])
    mask = np.zeros(len(compute), dtype=bool)
    mask[order] = level > best_before
    return mask


def frontier_value(points: pd.DataFrame, compute: float | np.ndarray) -> np.ndarray:
    """f(C) = max reward over ``points`` with C_j <= C, for each C in ``compute`` (NaN before any point)."""
    ordered = points.sort_values("C", kind="mergesort")
    c_sorted = ordered["C"].to_numpy(dtype=float)
    best = np.maximum.accumulate(ordered["reward"].to_numpy(dtype=float)) if len(ordered) else np.array([])
    idx = np.searchsorted(c_sorted, np.atleast_1d(np.asarray(compute, dtype=float)), side="right") - 1
    out = np.where(idx >= 0, best[np.clip(idx, 0, None)] if len(best) else np.nan, np.nan)
    return out


def build_frontier(
    logs: RunLogs,
    metric: str = DEFAULT_METRIC,
    compute: str = "rollouts",
    bucket: float = DEFAULT_BUCKET,
    half_life: float = 0.0,
) -> Frontier:
    """The points of ``metric`` against ``compute``, optionally smoothed in compute, and their frontier."""
    points, notes = validation_points(logs, metric, compute, half_life=half_life)
    records = record_breaking(points, bucket)
    return Frontier(
        metric=metric,
        compute_unit=compute,
        bucket=bucket,
        half_life=half_life,
        points=points,
        records=records,
        runs=logs.runs,
        notes=list(logs.notes) + notes,
    )


def _where(runs: pd.DataFrame, run: str) -> str:
    """A run's log file, for messages (the run name when the file is not known)."""
    paths = runs.loc[runs["run"] == run, "path"] if "path" in runs else pd.Series(dtype=object)
    return str(paths.iloc[0]) if len(paths) else str(run)


def _check_range(steps: pd.DataFrame, metric: str, runs: pd.DataFrame) -> None:
    bounds = metric_range(metric)
    if bounds is None:
        return
    values = steps[metric].to_numpy(dtype=float)
    outside = np.flatnonzero((values < bounds[0] - 1e-9) | (values > bounds[1] + 1e-9))
    if len(outside):
        row = steps.iloc[outside[0]]
        raise ScalingError(
            f"{_where(runs, row['run'])}: step {row['step']:g}: {metric} = {row[metric]:g} is outside "
            f"[{bounds[0]:g}, {bounds[1]:g}] (a share of samples): fix the log, or fit another metric with --metric"
        )


def _check_increasing(steps: pd.DataFrame, compute: str, runs: pd.DataFrame) -> None:
    rows = steps.loc[steps[compute].notna(), ["run", "step", compute]].sort_values(["run", "step"], kind="mergesort")
    previous = rows.groupby("run", sort=False)[compute].shift(1)
    bad = rows[compute].to_numpy() <= previous.to_numpy()
    negative = rows[compute].to_numpy() < 0
    if negative.any():
        row = rows[negative].iloc[0]
        raise ScalingError(
            f"{_where(runs, row['run'])}: {compute} is negative ({row[compute]:g}) at step {row['step']:g}; it counts "
            "the compute spent so far"
        )
    huge = rows[compute].to_numpy() > MAX_COMPUTE
    if huge.any():
        row = rows[huge].iloc[0]
        raise ScalingError(
            f"{_where(runs, row['run'])}: {compute} = {row[compute]:g} at step {row['step']:g} is above {MAX_COMPUTE:g}, "
            f"the most this toolkit fits; check the counter (its unit, or a corrupted value)"
        )
    if bad.any():
        at = np.flatnonzero(bad)[0]
        row, before = rows.iloc[at], rows.iloc[at - 1]
        raise ScalingError(
            f"{_where(runs, row['run'])}: {compute} does not increase with step ({before[compute]:g} at step {before['step']:g}, "
            f"{row[compute]:g} at step {row['step']:g}); it must be cumulative. If the counter restarted when "
            "the run resumed, pass --derive-compute (C = step x n x b_problem)"
        )


def _list_metrics(metrics: list[str], limit: int = 40) -> str:
    """Every validation metric (``val/...``, verl's ``val-core/...``, ``val-aux/...``: what a user means to fit),
    then as many others as fit in ``limit``, and how many were left out."""
    if not metrics:
        return "(none)"
    validation = [m for m in metrics if m.split("/", 1)[0].lower().startswith("val")]
    others = [m for m in metrics if m not in set(validation)]
    shown = validation + others[: max(0, limit - len(validation))]
    left = len(metrics) - len(shown)
    return ", ".join(shown) + (f", ... and {left} training metrics ({len(metrics)} in all)" if left else "")
