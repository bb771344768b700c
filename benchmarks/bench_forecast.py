"""Backtest of ``isocompute forecast`` (issue 44, item 2): truncate runs that reached their budget, forecast the end.

Each run is cut at 10, 20, 30 and 50 % of its budget's compute; the forecast of the target at the budget (the mean
training reward over (0.75 C, C], or the validation nearest C: docs/SCALING.md) is compared with what the run then
logged. Per fraction: the share of runs forecast at all, the coverage of the run intervals and of the group
intervals (nominal ``--level``), their mean width, the mean absolute error, and the same error for two naive
baselines on the same runs: the last value carried forward (the mean over the last quarter of the logged
compute) and a straight line in ln C through the run's logged points.

Two suites:

- synthetic, known truth (:mod:`verl_isocompute.scaling.forecast_suite`): sweeps of saturating curves with
  run-to-run and binomial sampling noise, from seed ``HELD_OUT`` on, none of which tuned the intervals;
- real: the committed runs that reach their budget (the n* sweep, the 3-run pilot, the learning run),
  whose coverage is given with its Clopper-Pearson 95 % interval (a handful of runs: a wide one).

``--replay`` replays the sequential pilot (the plan's defaults: checks every 5 % of the budget from 20 % to 60 %,
level 0.9, at the schedule's measured per-check level, :func:`verl_isocompute.scaling.pilot.check_rule`) as if
the sweep had run that way, every run progressing in step: on the committed n* sweep, on synthetic sweeps with a
clear winner and with a late crossing, and on held-out random sweeps of the tuning suite's kind (a stop of the
group with the best mean target at the budget there is a wrong stop). Per replay: the rollouts it spends (a
stopped group's runs stop at the check), and whether it picks the same n at the budget as the full sweep, the n
whose runs show the highest mean target there among the groups it kept (the full sweep: among all). Then, on the
held-out random sweeps' groups, how often the per-check intervals missed the truth at some check of the
schedule, above and below: a wrong stop needs one of the two.

``--tune`` re-derives the interval's calibration table and the check schedule's measured per-check levels from the
tuning seeds and writes them into the package.

    python benchmarks/bench_forecast.py            # 400 synthetic sweeps, ~1 min
    python benchmarks/bench_forecast.py --full     # 2000 synthetic sweeps
    python benchmarks/bench_forecast.py --replay   # the sequential pilot replayed, 100 per row, ~2 min (--sweeps N)
    python benchmarks/bench_forecast.py --tune     # rewrite verl_isocompute/scaling/forecast_calibration.json, ~12 min
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from verl_isocompute.scaling.forecast import CALIBRATION, forecast, load_calibration, is_validation_metric, target_value
from verl_isocompute.scaling.forecast_suite import (
    CLEAR_WINNER, FRACTIONS, HELD_OUT, LATE_CROSSING, calibration_table, curve_sweep, schedule_errors,
    schedule_misses, schedule_table, standardized_errors, suite_sweep, truncated,
)
from verl_isocompute.scaling.pilot import SCHEDULE, check_rule, stops_at
from verl_isocompute.scaling.points import validation_points
from verl_isocompute.scaling.run_logs import load_runs

ROOT = Path(__file__).resolve().parent.parent
# (name, run directories, metric): committed runs that reach their budget.
REAL = [
    ("n* sweep", ["tests/fixtures/nstar_cpu/cells"], "train/reward"),
    ("pilot", ["tests/fixtures/real_pilot/cells"], "train/reward"),
    ("pilot", ["tests/fixtures/real_pilot/cells"], "val/avg@2"),
    ("learning run", ["docs/evidence/learning/runs"], "train/reward"),
]
TUNING_SEEDS = 2000


def baselines(part: pd.DataFrame, at: float) -> tuple[float, float]:
    """(last value carried forward, straight line in ln C) for one run's logged points."""
    c_obs = part["C"].max()
    last = float(part.loc[part["C"] > 0.75 * c_obs, "reward"].mean())
    x, y = np.log(part["C"].to_numpy()), part["reward"].to_numpy()
    line = float(np.polyval(np.polyfit(x, y, 1), np.log(at))) if len(set(x)) > 1 else float(y[-1])
    return last, line


def backtest(sweeps: list[tuple[pd.DataFrame, float, str]], level: float) -> pd.DataFrame:
    """One row per (fraction, kind, forecast): covered, width, error, and the baselines' errors for runs."""
    rows = []
    for points, budget, metric in sweeps:
        validation = is_validation_metric(metric)
        truth = {run: target_value(pts, budget, validation) for run, pts in points.groupby("run")}
        for fraction in FRACTIONS:
            part = truncated(points, fraction * budget)
            if part.empty:
                continue
            out = forecast(part, budget, metric, level)
            for f in out.runs:
                rows.append(_row(fraction, "run", f, truth[f.run], part[part["run"] == f.run], budget))
            for g in out.groups:
                rows.append(_row(fraction, "group", g, float(np.mean([truth[r] for r in g.runs])), None, budget))
    return pd.DataFrame(rows)


def _row(fraction: float, kind: str, f, truth: float, part: pd.DataFrame | None, budget: float) -> dict:
    row = {"fraction": fraction, "kind": kind, "made": f.predicted is not None and f.low is not None}
    if row["made"]:
        row.update(covered=f.low <= truth <= f.high, width=f.high - f.low, error=abs(f.predicted - truth))
        if part is not None and not part.empty:
            last, line = baselines(part, budget)
            row.update(last=abs(last - truth), line=abs(line - truth))
    return row


def table(rows: pd.DataFrame, level: float, small_sample: bool) -> list[str]:
    head = ("| logged | forecast made | run coverage | group coverage | mean width | MAE | MAE last value | "
            "MAE line in ln C |")
    lines = [head, "|" + "---|" * 8]
    for fraction, at in rows.groupby("fraction"):
        runs, groups = at[(at["kind"] == "run") & at["made"]], at[(at["kind"] == "group") & at["made"]]
        made = f"{len(runs)} / {int((at['kind'] == 'run').sum())}"
        lines.append(f"| {fraction:.0%} | {made} | {_share(runs, small_sample)} | {_share(groups, small_sample)} | "
                     f"{_mean(runs, 'width')} | {_mean(runs, 'error')} | {_mean(runs, 'last')} | {_mean(runs, 'line')} |")
    return lines


def _share(rows: pd.DataFrame, small_sample: bool) -> str:
    k, n = int(rows["covered"].astype(bool).sum()) if len(rows) else 0, len(rows)
    if n == 0:
        return "-"
    if not small_sample:
        return f"{k / n:.1%}"
    ci = stats.binomtest(k, n).proportion_ci(0.95, method="exact")
    return f"{k}/{n} [{ci.low:.2f}, {ci.high:.2f}]"


def _mean(rows: pd.DataFrame, column: str) -> str:
    return f"{rows[column].mean():.3f}" if column in rows and rows[column].notna().any() else "-"


def real_sweeps() -> list[tuple[str, list[tuple[pd.DataFrame, float, str]]]]:
    out = []
    for name, dirs, metric in REAL:
        logs = load_runs([ROOT / d for d in dirs])
        points, _ = validation_points(logs, metric, "rollouts")
        budget = float(logs.steps.groupby("run")["rollouts"].max().min())
        runs = logs.steps["run"].nunique()
        out.append((f"{name} ({runs} runs), {metric}, C = {budget:g}", [(points, budget, metric)]))
    return out


CHECKS, LEVEL = list(SCHEDULE), 0.9  # the plan's defaults
CHECK_LEVEL, CHECK_RULE = check_rule(LEVEL, CHECKS)


def replay(points: pd.DataFrame, budget: float, metric: str) -> dict:
    """One sweep replayed under the sequential rule: rollouts (full, sequential), the n each picks, stops."""
    validation = is_validation_metric(metric)
    target = {key: float(np.mean([target_value(p, budget, validation) for _, p in g.groupby("run")]))
              for key, g in points.groupby(["n", "b_problem"])}
    runs = points.groupby("run")[["n", "b_problem"]].first()
    stopped_at: dict = {}
    for fraction in CHECKS:
        live = points[[(n, b) not in stopped_at for n, b in zip(points["n"], points["b_problem"])]]
        for d in stops_at(truncated(live, fraction * budget), budget, metric, CHECK_LEVEL):
            stopped_at[(d.n, d.b_problem)] = fraction
    spent = sum(budget * stopped_at.get((r.n, r.b_problem), 1.0) for r in runs.itertuples())
    kept = {key: value for key, value in target.items() if key not in stopped_at}
    return {"full": budget * len(runs), "sequential": spent, "full_pick": max(target, key=target.get),
            "pick": max(kept, key=kept.get), "stopped": sorted(stopped_at)}


def replay_report(count: int) -> list[str]:
    logs = load_runs([ROOT / "tests/fixtures/nstar_cpu/cells"])
    nstar, _ = validation_points(logs, "train/reward", "rollouts")
    suites = [("n* sweep (committed, train/reward, C = 1024)", [replay(nstar, 1024.0, "train/reward")])]
    seeds = range(HELD_OUT, HELD_OUT + count)
    for name, curves in (("clear winner (synthetic)", CLEAR_WINNER), ("late crossing (synthetic)", LATE_CROSSING)):
        suites.append((name, [replay(curve_sweep(curves, seed), 4096.0, "train/reward") for seed in seeds]))
    suites.append(("random suite sweeps (synthetic, held out)",
                   [replay(suite_sweep(seed), 4096.0, "train/reward") for seed in seeds]))
    lines = [f"Sequential pilot replayed: checks at {', '.join(f'{c:.0%}' for c in CHECKS)} of the budget, "
             f"level {LEVEL} ({CHECK_LEVEL:.3f} at each check: {CHECK_RULE})\n",
             "| sweep | replays | rollouts full / sequential | same n at the budget | replays with an n stopped | "
             "the full sweep's pick stopped (wrong stops) |", "|" + "---|" * 6]
    for name, results in suites:
        ratio = sum(r["full"] for r in results) / sum(r["sequential"] for r in results)
        same = np.mean([r["pick"] == r["full_pick"] for r in results])
        stopped = sum(bool(r["stopped"]) for r in results)
        lost = sum(r["full_pick"] in r["stopped"] for r in results)
        lines.append(f"| {name} | {len(results)} | {ratio:.2f} | {same:.0%} | {stopped} | {lost} ({lost / len(results):.0%}) |")
    errors = schedule_errors(seeds)
    [(above, below)] = schedule_misses(errors, load_calibration(), [CHECK_LEVEL])
    groups = errors.groupby(["seed", "n"]).ngroups
    lines += ["", f"Held-out random sweeps, {groups} groups, {CHECK_LEVEL:.3f} intervals at every check of the "
              f"schedule: missed above at some check {_share_of(above, groups)}, below {_share_of(below, groups)}; a "
              f"wrong stop needs one of the two, so at most {above + below:.1%} (the plan's level {LEVEL} allows "
              f"{1 - LEVEL:.0%})"]
    return lines


def _share_of(share: float, count: int) -> str:
    k = round(share * count)
    ci = stats.binomtest(k, count).proportion_ci(0.95, method="exact")
    return f"{k}/{count} [{ci.low:.3f}, {ci.high:.3f}]"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench_forecast", description=__doc__.split("\n\n")[0])
    parser.add_argument("--sweeps", type=int, default=None,
                        help="held-out synthetic sweeps (default 400; with --replay, replays per synthetic row, default 100)")
    parser.add_argument("--full", action="store_true", help="2000 synthetic sweeps")
    parser.add_argument("--level", type=float, default=0.8)
    parser.add_argument("--tune", action="store_true",
                        help="rewrite the calibration table and the check schedule's levels from the tuning seeds")
    parser.add_argument("--replay", action="store_true", help="replay the sequential pilot instead of the backtest")
    args = parser.parse_args(argv)
    if args.tune:
        path = ROOT / "verl_isocompute" / "scaling" / CALIBRATION
        table = calibration_table(standardized_errors(range(TUNING_SEEDS)))
        table["schedule"] = schedule_table(schedule_errors(range(TUNING_SEEDS)), table)
        path.write_text(json.dumps(table) + "\n")
        print(f"wrote {path.relative_to(ROOT)} from seeds 0-{TUNING_SEEDS - 1}")
        return 0
    count = args.sweeps if args.sweeps is not None else 100 if args.replay else 2000 if args.full else 400
    if count < 1 or not 0.5 <= args.level <= 0.98:
        print("bench_forecast: error: --sweeps must be >= 1 and --level in [0.5, 0.98]", file=sys.stderr)
        return 2
    if args.replay:
        print("\n".join(replay_report(count)))
        return 0
    budget = 4096.0
    synthetic = [(suite_sweep(seed, budget), budget, "train/reward") for seed in range(HELD_OUT, HELD_OUT + count)]
    print(f"Synthetic suite: {count} held-out sweeps (seeds {HELD_OUT}-{HELD_OUT + count - 1}), 2 n x 3 runs, "
          f"C = {budget:g}, train/reward, nominal {args.level:.0%}\n")
    print("\n".join(table(backtest(synthetic, args.level), args.level, small_sample=False)))
    for name, sweeps in real_sweeps():
        print(f"\nReal: {name}; coverage k/n [Clopper-Pearson 95 %]\n")
        print("\n".join(table(backtest(sweeps, args.level), args.level, small_sample=True)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
