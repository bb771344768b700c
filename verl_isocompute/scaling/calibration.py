"""Known-truth sweeps for calibrating the fit's intervals (issue 43, item 2): the coverage of the per-n reward
intervals, the share of datasets whose 95 % interval holds the true R_n(C).

Each case is a small sweep whose per-n curves are known (ScaleRL's form, arXiv 2510.13786, as the fit assumes;
the playbook's fitting workflow, arXiv 2603.12151, section 4). A run of n logs, at every step t, the training
reward as verl logs it: the mean over its n x B_problem rollouts (binomial) of the policy trained on C_(t-1), plus a
per-run offset (seeds differ by more than sampling noise: a run's problems and its luck early on). The fit then
places each point at C_(t-1) (:mod:`verl_isocompute.scaling.points`), so the truth at C is R_n(C).

The cases (:data:`CASES`): rising (n = 8 overtakes n = 2 late), a clear rise (the same by a wider margin), flat
(n = 2 ahead everywhere), an exact tie (one curve), a late crossing, unequal run lengths (n = 8 stops at half the
budget), 1, 3, 5 and 10 seeds, and curves at the fit's bounds (an asymptote at 1).
``benchmarks/bench_calibration.py`` prints coverage per case and pooled. Pure: no verl, no torch.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from verl_isocompute.runlog import write_run_log
from verl_isocompute.scaling.saturating import SaturatingCurve

B_PROBLEM = 8
SEED_SD = 0.015  # run-to-run spread of a run's level (a per-run offset), about the n* sweep's
BUDGETS = (256.0, 448.0, 900.0)  # where intervals are checked: either side of the rising cases' crossing, and the end


@dataclass(frozen=True)
class Case:
    """A known-truth sweep: one curve per n, how many seeds, how many rollouts each n's runs spend."""

    name: str
    curves: dict[int, SaturatingCurve]
    seeds: int = 5
    budget: dict[int, int] = field(default_factory=lambda: {2: 1024, 8: 1024})


_BASE = SaturatingCurve(R0=0.37, A=0.66, C_mid=300.0, beta=1.3)
CASES = (
    Case("rising", {2: _BASE, 8: SaturatingCurve(0.37, 0.76, 450.0, 1.3)}),  # n = 8 ahead by 0.046 at C = 960
    Case("clear rise", {2: _BASE, 8: SaturatingCurve(0.37, 0.80, 450.0, 1.3)}),  # ... by 0.075
    Case("flat", {2: _BASE, 8: SaturatingCurve(0.37, 0.62, 400.0, 1.3)}),
    Case("tie", {2: _BASE, 8: _BASE}),
    Case("late crossing", {2: _BASE, 8: SaturatingCurve(0.37, 0.72, 600.0, 1.6)}),
    Case("unequal lengths", {2: _BASE, 8: _BASE}, budget={2: 1024, 8: 512}),
    Case("1 seed", {2: _BASE, 8: _BASE}, seeds=1),
    Case("3 seeds", {2: _BASE, 8: _BASE}, seeds=3),
    Case("10 seeds", {2: _BASE, 8: _BASE}, seeds=10),
    Case("at bounds", {2: _BASE, 8: SaturatingCurve(0.37, 1.0, 2000.0, 1.0)}),
)


def write_case(case: Case, out: Path, rng: np.random.Generator) -> None:
    """One dataset of ``case``: a run directory per (n, seed) under ``out``."""
    for n, truth in case.curves.items():
        per_step = n * B_PROBLEM
        for seed in range(case.seeds):
            offset = rng.normal(0.0, SEED_SD)
            rows = [{"step": 0, "n": n, "b_problem": B_PROBLEM, "rollouts": 0.0, "tokens": 0.0, "epoch": 0.0}]
            for t in range(1, case.budget[n] // per_step + 1):
                p = float(np.clip(truth(max((t - 1) * per_step, 1e-9)) + offset, 0.0, 1.0))
                rows.append({"step": t, "n": n, "b_problem": B_PROBLEM, "rollouts": float(t * per_step),
                             "tokens": 0.0, "epoch": 0.0, "train/reward": rng.binomial(per_step, p) / per_step})
            header = {"recipe": "synthetic", "model": "synthetic", "dataset_size": 4096, "n": n, "b_problem": B_PROBLEM}
            write_run_log(out / f"b8_n{n}-s{seed}", header, rows)


def coverage(case: Case, datasets: int, budgets=BUDGETS, bootstrap: int = 200, seed: int = 0) -> dict:
    """Over ``datasets`` noisy datasets of ``case``: how many 95 % per-n reward intervals at ``budgets`` were given
    and how many held the truth (``given``, ``held``), how many were not given (``none``: one seed), how many
    datasets could not be fitted (``failed``), and the same for the multiplier's 95 % intervals (``m_given``,
    ``m_held``): where the true curves give n a multiplier (it reaches the true R* inside its fitted range), whether
    the interval holds it. The true multiplier is the comparison redone on the true curves over the fitted ranges."""
    from dataclasses import replace

    from verl_isocompute.scaling.compare import compare_at
    from verl_isocompute.scaling.errors import FitError
    from verl_isocompute.scaling.pipeline import FitConfig, run_fit
    from verl_isocompute.scaling.reward_curves import reward_curves

    rng = np.random.default_rng(seed)
    out = dict.fromkeys(("given", "held", "none", "failed", "m_given", "m_held"), 0)
    options = FitConfig(metric="train/reward", compute="rollouts", group_by="n", bootstrap=bootstrap)
    for k in range(datasets):
        with tempfile.TemporaryDirectory() as tmp:
            write_case(case, Path(tmp), rng)
            try:
                result = run_fit([Path(tmp)], None, FitConfig(**{**options.__dict__, "seed": seed * 1000 + k})).result
            except FitError:  # no fit, no interval: counted apart, as a user would see it
                out["failed"] += 1
                continue
        curves = reward_curves(result)
        truth = compare_at([replace(rc, curve=case.curves[rc.n], draws=None) for rc in curves], list(budgets))
        for row, true in zip(compare_at(curves, list(budgets)).to_dict("records"), truth.to_dict("records")):
            if np.isfinite(row["multiplier_low"]) and np.isfinite(true["multiplier"]):
                out["m_given"] += 1
                out["m_held"] += bool(row["multiplier_low"] * (1 - 1e-9) <= true["multiplier"]
                                      <= row["multiplier_high"] * (1 + 1e-9))
            if not np.isfinite(row["reward"]):
                continue
            if not np.isfinite(row["reward_low"]):
                out["none"] += 1
                continue
            out["given"] += 1
            out["held"] += bool(row["reward_low"] <= float(case.curves[row["n"]](row["C"])) <= row["reward_high"])
    return out


def reads(case: Case, datasets: int, bootstrap: int = 200, seed: int = 0) -> dict:
    """Over ``datasets`` noisy datasets of ``case``: how many fits read n*(C) flat (``flat``) and moving (``moving``),
    as the fit decides it (:mod:`verl_isocompute.scaling.resolved`), and on how many the direct test
    (:func:`direct_test`) finds the largest n ahead at the end (``direct``): the power the same data give a plain
    test, against which the fit's share of moving reads is read (issue 43 item 3)."""
    from verl_isocompute.scaling.pipeline import FitConfig, run_fit

    rng, out = np.random.default_rng(seed), {"flat": 0, "moving": 0, "direct": 0}
    for k in range(datasets):
        with tempfile.TemporaryDirectory() as tmp:
            write_case(case, Path(tmp), rng)
            config = FitConfig(metric="train/reward", compute="rollouts", group_by="n", bootstrap=bootstrap, seed=k)
            out["flat" if run_fit([Path(tmp)], None, config).result.flat is not None else "moving"] += 1
            out["direct"] += direct_test(Path(tmp), case)
    return out


def direct_test(runs: Path, case: Case, level: float = 0.95) -> bool:
    """Whether a one-sided Welch t test (at ``level``) over seeds finds the largest n of ``case`` ahead of the
    smallest at the end of the budget: each run contributes its mean training reward over the steps whose policy
    was trained on the last quarter of its budget (C_(t-1) >= 0.75 x budget). No curve, no fit: a yardstick of how
    much a dataset can tell, so that a rising case the fit reads flat is known for underpowered, not missed."""
    from scipy.stats import ttest_ind

    from verl_isocompute.runlog import read_run_log

    means: dict[int, list[float]] = {n: [] for n in case.curves}
    for log in sorted(runs.glob("*/isocompute.jsonl")):
        rows = [r for _, r in read_run_log(log).rows if "train/reward" in r]
        n = int(rows[0]["n"])
        before = [r["rollouts"] - n * B_PROBLEM for r in rows]  # the compute the step's policy was trained on
        means[n].append(float(np.mean([r["train/reward"] for r, c in zip(rows, before) if c >= 0.75 * case.budget[n]])))
    large, small = max(means), min(means)
    if min(len(means[large]), len(means[small])) < 2:
        return False
    return bool(ttest_ind(means[large], means[small], equal_var=False, alternative="greater").pvalue < 1 - level)
