"""Synthetic sweeps with a known answer, for tests, benchmarks and trying ``isocompute fit`` out.

Per-n reward curves are built in the saturating form of the fitting step, R_n(C) = R0 + (A_n - R0) /
(1 + (C_mid,n / C)^beta), so that the best n at each budget follows a given n*(C) sigmoid (by default
the playbook's fitted values, arXiv 2603.12151): all curves start from the base model's reward R0, a
larger n reaches a higher asymptote A_n later, and consecutive curves n and 2n cross exactly where the
sigmoid's log2 n* passes log2 n + 1/2, the point where rounding n* to the power-of-two grid switches
from n to 2n. Solving R_n(c) = R_2n(c) for C_mid,2n makes the crossing exact. Values of n the sigmoid
never reaches get curves that stay below their neighbour's everywhere.

A sweep then samples each run's validation metric at log-spaced steps with Gaussian noise.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd
from scipy.special import expit, logit

from verl_isocompute.runlog import DEFAULT_METRIC, write_run_log
from verl_isocompute.scaling.curve import Curve
from verl_isocompute.scaling.saturating import SaturatingCurve

PAPER_N_GRID = (8, 16, 32, 64, 128, 256, 512, 1024)


def crossover(curve: Curve, n: int) -> float | None:
    """The budget C where log2 n*(C) = log2 n + 1/2 (n hands over to 2n), or None if never."""
    y = math.log2(n) + 0.5
    if not curve.b < y < curve.b + curve.L:
        return None
    return 10.0 ** (curve.log10_C0 - math.log(curve.L / (y - curve.b) - 1.0) / curve.k)


def curves_for(
    curve: Curve,
    n_grid: Sequence[int] = PAPER_N_GRID,
    r0: float = 0.45,
    asymptotes: tuple[float, float] = (0.60, 0.69),
    beta: float = 0.8,
) -> dict[int, SaturatingCurve]:
    """Per-n curves whose upper envelope switches n exactly where ``curve`` rounds to the next n.

    ``asymptotes`` spans A_n over the values of n that are optimal somewhere (linearly in log2 n);
    ``beta`` is the common steepness (0.8: a curve rises over about two decades of C).
    """
    n_grid = sorted(n_grid)
    cuts = {n: crossover(curve, n) for n in n_grid}
    # n is optimal somewhere iff the sigmoid's range of log2 n* meets [log2 n - 1/2, log2 n + 1/2).
    optimal = [n for n in n_grid if math.log2(n) + 0.5 > curve.b and math.log2(n) - 0.5 < curve.b + curve.L]
    if len(optimal) < 2:
        raise ValueError("the sigmoid selects fewer than two values of this n grid")
    a_lo, a_hi = asymptotes
    A = dict(zip(optimal, np.linspace(a_lo, a_hi, len(optimal))))
    first = cuts[optimal[0]]
    c_mid = {optimal[0]: first / 4.0}
    for n, n_next in zip(optimal, optimal[1:]):
        c = cuts[n]
        share = (A[n] - r0) / (A[n_next] - r0) * expit(beta * math.log(c / c_mid[n]))
        c_mid[n_next] = c * math.exp(-logit(share) / beta)
    out = {n: SaturatingCurve(R0=r0, A=float(A[n]), C_mid=float(c_mid[n]), beta=beta) for n in optimal}
    for n in n_grid:
        if n < optimal[0]:  # same timing as the floor's curve, lower asymptote: dominated
            ref = out[optimal[0]]
            out[n] = SaturatingCurve(r0, ref.A - 0.01 * math.log2(optimal[0] / n), ref.C_mid, beta)
        elif n > optimal[-1]:  # later and lower than the ceiling's curve: dominated
            ref = out[optimal[-1]]
            steps = math.log2(n / optimal[-1])
            out[n] = SaturatingCurve(r0, ref.A - 0.005 * steps, ref.C_mid * 2.0**steps, beta)
    return dict(sorted(out.items()))


def validation_steps(last_step: int, points: int) -> np.ndarray:
    """``points`` distinct steps in [1, last_step], log-spaced (all steps if there are fewer)."""
    if last_step <= points:
        return np.arange(1, last_step + 1)
    num = points
    while True:
        steps = np.unique(np.round(np.geomspace(1, last_step, num)).astype(int))
        if len(steps) >= points:
            return steps[np.round(np.linspace(0, len(steps) - 1, points)).astype(int)]
        num = int(num * 1.5) + 1


def synthetic_sweep(
    curves: dict[int, SaturatingCurve],
    b_problem: int = 32,
    runs_per_n: int = 1,
    points_per_run: int = 200,
    c_max: float = 3e7,
    noise: float = 0.01,
    tokens_per_rollout: float = 500.0,
    seed: int = 0,
    metric: str = DEFAULT_METRIC,
) -> pd.DataFrame:
    """Validation rows of a sweep: one run per (n, seed), each trained to ``c_max`` rollouts.

    Columns: ``run``, ``n``, ``b_problem``, ``step``, ``rollouts``, ``tokens`` and ``metric``; a step-0 row
    (before training, C = 0) starts every run.
    """
    rng = np.random.default_rng(seed)
    frames = []
    for n, reward_curve in curves.items():
        per_step = n * b_problem
        steps = np.concatenate([[0], validation_steps(max(1, int(math.ceil(c_max / per_step))), points_per_run)])
        rollouts = steps * float(per_step)
        clean = np.where(rollouts > 0, reward_curve(np.maximum(rollouts, 1.0)), reward_curve.R0)
        for replica in range(runs_per_n):
            reward = np.clip(clean + rng.normal(0.0, noise, size=len(steps)), 0.0, 1.0)
            frames.append(
                pd.DataFrame({
                    "run": f"n{n}_bp{b_problem}_s{replica}", "n": n, "b_problem": b_problem, "step": steps,
                    "rollouts": rollouts, "tokens": rollouts * tokens_per_rollout, metric: reward,
                })
            )
    return pd.concat(frames, ignore_index=True)


def write_run_logs(sweep: pd.DataFrame, out_dir: str | Path, dataset_size: int = 6000) -> list[Path]:
    """Write a sweep as run directories ``<out_dir>/<run>/isocompute.jsonl`` in the run-log contract."""
    out_dir = Path(out_dir)
    written = []
    metrics = [c for c in sweep.columns if c not in ("run", "n", "b_problem", "step", "rollouts", "tokens")]
    for run, rows in sweep.groupby("run", sort=True):
        n, b_problem = int(rows["n"].iloc[0]), int(rows["b_problem"].iloc[0])
        header = {
            "recipe": "synthetic", "model": "synthetic", "dataset_size": dataset_size, "n": n,
            "b_problem": b_problem, "b_max": 65536, "verl_version": None,
        }
        records = []
        for row in rows.to_dict("records"):
            record = {
                "step": int(row["step"]), "n": n, "b_problem": b_problem, "rollouts": float(row["rollouts"]),
                "tokens": float(row["tokens"]), "epoch": row["step"] * b_problem / dataset_size, "lr": 1e-6,
            }
            record.update({m: float(row[m]) for m in metrics})
            if metrics:  # training reward, logged on the samples trained on: a biased copy, never fitted
                record["train/reward"] = float(row[metrics[0]]) + 0.05
            records.append(record)
        path = write_run_log(out_dir / str(run), header, records)
        written.append(path)
    return written
