"""Forecast each run's and each group's (n, b_problem) metric at a budget C from the part of the runs logged so far.

RUNS are what ``isocompute fit`` reads (run directories, our isocompute.jsonl, verl's file-logger .jsonl, wandb or
tensorboard exports and directories); a running or stopped run is an ordinary input. The target, the method
and its backtest: docs/SCALING.md, "Forecasting a run's end". A run whose logged part cannot support a forecast
gets one line saying why, and no interval.

Exit status: 0 forecasts printed (also when some runs could not be forecast); 2 bad input, one line.
"""

from __future__ import annotations

import argparse
import json

from verl_isocompute.numeric import is_real

PROG = "isocompute forecast"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("runs", nargs="+", metavar="RUNS", help="run directories, log files, or directories to search")
    parser.add_argument("--at", required=True, type=float, metavar="C", help="the budget to forecast at, in rollouts")
    parser.add_argument("--metric", default=None, help="logged metric (default: the val/avg@k the runs log)")
    parser.add_argument("--level", type=float, default=0.8, help="prediction interval level in [0.5, 0.98] (default 0.8)")
    parser.add_argument("--format", choices=("table", "json"), default="table")
    parser.add_argument("--n", type=int, default=None, help="n for logs that do not carry it")
    parser.add_argument("--b-problem", type=int, default=None, help="B_problem for logs that do not carry it")


def run(args: argparse.Namespace) -> int:
    from verl_isocompute.scaling.errors import ScalingError
    from verl_isocompute.scaling.forecast import forecast
    from verl_isocompute.scaling.pipeline import logged_avg_at_k
    from verl_isocompute.scaling.points import validation_points
    from verl_isocompute.scaling.run_logs import load_runs

    if not is_real(args.at) or args.at <= 0:
        raise ScalingError(f"--at must be a budget > 0 in rollouts, got {args.at}")
    logs = load_runs(args.runs, n=args.n, b_problem=args.b_problem)
    metric = args.metric or logged_avg_at_k(logs)[0]
    points, _ = validation_points(logs, metric, "rollouts")
    out = forecast(points, args.at, metric, args.level)
    if args.format == "json":
        print(json.dumps(out.as_json(), indent=1))
        return 0
    print(f"{metric} at C = {args.at:g}, {args.level:.0%} prediction intervals")
    print(f"{'run':<40} {'n':>4} {'b_problem':>9} {'logged to':>10} {'predicted':>9}  interval")
    for f in out.runs + out.groups:
        name = f.run if f.run is not None else f"group ({len(f.runs)} runs)"
        name = name if len(name) <= 40 else "..." + name[-37:]
        head = f"{name:<40} {f.n:>4} {f.b_problem:>9} {f.fitted_upto:>10g}"
        if f.why:
            print(f"{head} {f.why}")
        else:
            print(f"{head} {f.predicted:>9.3f}  [{f.low:.3f}, {f.high:.3f}]")
    return 0
