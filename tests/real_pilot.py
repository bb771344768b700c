"""The real CPU pilot sweep as a regression fixture: fit its logs, and the tolerance of every figure.

``tests/fixtures/real_pilot/`` holds the logs of a real ``isocompute sweep`` (run_examples/pilot_cpu.yaml:
SmolLM2-135M-Instruct on a curated Easy set, one cell per n; docs/EVIDENCE.md) and ``expected.json``, the
fit's figures recorded when the sweep ran, each with an interval. ``tests/test_real_pilot.py`` refits the
logs and checks every figure against its interval.

Where the intervals come from (a parametric bootstrap over the validation noise, not a hand-picked
tolerance): every validation point of the sweep is a mean over the held-out problems, logged with its
standard error over problems (``val/avg@k_se``). One resample redraws each point as
reward + N(0, SE) (clipped to [0, 1]) and refits the whole pipeline; the interval of a figure is the 2.5 and
97.5 percentiles over :data:`RESAMPLES` resamples. A change of the fit that moves a figure outside it moves
the answer by more than the evaluation noise of the data: that is a real change of what the tool reports
on these logs, and the test says which figure moved. To re-record after an intended change:
``python tests/real_pilot.py`` (it then prints the figures docs/EVIDENCE.md quotes; ``--report`` prints them
without re-recording).
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import numpy as np

FIXTURE = Path(__file__).parent / "fixtures" / "real_pilot"
EXPECTED = FIXTURE / "expected.json"
RESAMPLES = 200
SEED = 0


def options():
    """The fit options the sweep's plan used (recorded with the fixture)."""
    from verl_isocompute.scaling.pipeline import FitConfig

    return FitConfig.from_dict(json.loads(EXPECTED.read_text())["options"])


def figures(result, budget: float) -> dict:
    """The figures the test checks, from a fit: the frontier (envelope reward and log2 n* on its C grid),
    each n's fitted reward at a few C inside its runs, the sigmoid when there is one, and what each n
    costs at ``budget`` (C_n(R*)/C)."""
    from verl_isocompute.scaling import compare

    grid = result.grid
    out = {
        "frontier": {"C": grid["C"].tolist(), "reward": grid["reward"].tolist(),
                     "log2_n_star": grid["log2_n_star"].tolist()},
        "curves": {},
        "sigmoid": None,
        "compare": {},
    }
    for key, curve in sorted(result.curves.items()):
        c = np.geomspace(*_c_range(result, key), 5)
        out["curves"][str(key[0])] = {"C": c.tolist(), "reward": curve(c).tolist()}
    if result.curve is not None:
        out["sigmoid"] = {"L": result.curve.L, "k": result.curve.k, "log10_C0": result.curve.log10_C0, "b": result.curve.b}
    curves = compare.reward_curves(result)
    if curves:
        table = compare.compare_at(curves, [budget])
        for row in table.to_dict("records"):
            multiplier = row["multiplier"]  # NaN when R* is not reached within the n's fitted range: JSON null
            out["compare"][str(row["n"])] = {"reward": row["reward"],
                                             "multiplier": float(multiplier) if np.isfinite(multiplier) else None}
    return out


def _c_range(result, key) -> tuple[float, float]:
    row = result.groups.set_index(list(result.group_by)).loc[key if len(key) > 1 else key[0]]
    return float(row["C_min"]), float(row["C_max"])


def fit(points_reward=None, opts=None):
    """The pipeline on the fixture's logs (optionally with the validation rewards replaced)."""
    from verl_isocompute.scaling.fit import fit_frontier
    from verl_isocompute.scaling.points import build_frontier, record_breaking
    from verl_isocompute.scaling.run_logs import load_runs

    opts = opts or options()
    logs = load_runs([FIXTURE / "cells"], derive_compute=opts.derive_compute)
    frontier = build_frontier(logs, metric=opts.metric, compute=opts.compute, bucket=opts.bucket, half_life=opts.half_life)
    if points_reward is not None:
        points = frontier.points.assign(reward=points_reward)
        frontier = dataclasses.replace(frontier, points=points, records=record_breaking(points, opts.bucket))
    bootstrap = opts.bootstrap if points_reward is None else 0
    return frontier, fit_frontier(frontier, group_by=opts.group_by, fit_on=opts.fit_on, shared_r0=opts.shared_r0,
                                  window=opts.window, k_max=opts.k_max, bootstrap=bootstrap, seed=opts.seed)


def point_se(frontier, se_metric: str) -> np.ndarray:
    """Each validation point's standard error over problems, from the logs (``val/avg@k_se``)."""
    from verl_isocompute.scaling.run_logs import load_runs

    logs = load_runs([FIXTURE / "cells"])
    steps = logs.steps.set_index(["run", "step"])[se_metric]
    return np.array([steps.loc[(r, s)] for r, s in zip(frontier.points["run"], frontier.points["step"])], dtype=float)


def _interval(draws: list, estimate):
    """Percentile interval of each leaf of ``estimate`` over the draws (same nested shape)."""
    if isinstance(estimate, dict):
        return {k: _interval([d[k] if d and k in d else None for d in draws], v) for k, v in estimate.items()}
    if isinstance(estimate, list):
        return [_interval([d[i] if d is not None and i < len(d) else None for d in draws], v) for i, v in enumerate(estimate)]
    values = np.array([np.nan if d is None else float(d) for d in draws], dtype=float)
    values = values[np.isfinite(values)]
    if estimate is None or not np.isfinite(estimate) or not len(values):
        return None
    low, high = np.percentile(values, [2.5, 97.5])
    return [float(min(low, estimate)), float(max(high, estimate))]


def record() -> dict:
    """Fit the logs, bootstrap the validation noise, write ``expected.json`` (keeps its ``options``)."""
    saved = json.loads(EXPECTED.read_text())
    opts = options()
    frontier, result = fit()
    budget = float(frontier.points["C"].max())
    estimate = figures(result, budget)
    k = opts.metric.split("@")[-1]
    se = point_se(frontier, f"val/avg@{k}_se")
    rng = np.random.default_rng(SEED)
    draws = []
    share_at = {str(int(c)): c for c in (64.0, 128.0, 256.0, 512.0) if c <= budget}  # label -> C
    n_star_counts: dict[str, dict[str, int]] = {label: {} for label in share_at}
    for _ in range(RESAMPLES):
        reward = np.clip(frontier.points["reward"].to_numpy() + rng.normal(0.0, se), 0.0, 1.0)
        try:
            _, resampled = fit(reward, opts)
        except Exception:  # a resample the fit cannot fit is left out, as the fit's own bootstrap does
            draws.append(None)
            continue
        draws.append(_on_grid(figures(resampled, budget), estimate))
        grid_c = resampled.grid["C"].to_numpy()
        for label, c in share_at.items():  # the envelope's n* at the grid point nearest C (EVIDENCE's share table)
            n = str(int(resampled.grid["n_star"].iloc[int(np.argmin(np.abs(np.log(grid_c / c))))]))
            n_star_counts[label][n] = n_star_counts[label].get(n, 0) + 1
    saved.update({"budget": budget, "resamples": RESAMPLES, "failed_resamples": sum(d is None for d in draws),
                  "estimate": estimate, "interval": _interval(draws, estimate),
                  "n_star_counts": {c: dict(sorted(v.items(), key=lambda kv: int(kv[0]))) for c, v in n_star_counts.items()}})
    EXPECTED.write_text(json.dumps(saved, indent=1, allow_nan=False) + "\n")  # strict JSON: no NaN
    return saved


def _on_grid(drawn: dict, estimate: dict) -> dict:
    """A resample's figures at the estimate's C values (its own grid may differ)."""
    out = dict(drawn)
    f, e = drawn["frontier"], estimate["frontier"]
    log_c = np.log10(f["C"])
    out["frontier"] = {
        "C": e["C"],
        "reward": np.interp(np.log10(e["C"]), log_c, f["reward"], left=np.nan, right=np.nan).tolist(),
        "log2_n_star": np.interp(np.log10(e["C"]), log_c, f["log2_n_star"], left=np.nan, right=np.nan).tolist(),
    }
    return out


def report() -> str:
    """The figures docs/EVIDENCE.md quotes from the committed logs: each cell's validation metric ± SE at each
    C, and from ``expected.json`` the share of fitted resamples in which each n is the envelope's n*."""
    from verl_isocompute.scaling.run_logs import load_runs

    saved = json.loads(EXPECTED.read_text())
    metric = saved["options"]["metric"]
    logs = load_runs([FIXTURE / "cells"])
    lines = [f"{metric} ± SE over problems, at C (rollouts):"]
    for run, steps in logs.steps.dropna(subset=[metric]).groupby("run", sort=False):
        n = int(logs.runs.set_index("run").loc[run, "n"])
        cells = [f"{c:.0f}: {r:.3f} ± {e:.3f}" for c, r, e in zip(steps["rollouts"], steps[metric], steps[f"{metric}_se"])]
        lines.append(f"  n = {n}: " + ", ".join(cells))
    fitted = saved["resamples"] - saved["failed_resamples"]
    lines.append(f"n* under the validation noise ({fitted} of {saved['resamples']} resamples fitted):")
    for c, counts in saved["n_star_counts"].items():
        lines.append(f"  C = {c}: " + ", ".join(f"n* = {n} in {100 * k / fitted:.0f}%" for n, k in counts.items()))
    return "\n".join(lines)


if __name__ == "__main__":
    if sys.argv[1:] == ["--report"]:
        print(report())
    else:
        saved = record()
        print(json.dumps({k: saved[k] for k in ("budget", "resamples", "failed_resamples")}))
        print(report())
    sys.exit(0)
