"""Run a pilot sweep from a plan: a B_problem x n grid under B_max, every cell a real verl run, then the fit.

The plan (YAML, schema in docs/WORKFLOW.md) names the recipe, overrides, data, the budget per cell in
rollouts and the grid, and optionally seeds (every cell once per seed, as <cell id>-s<seed>). Each cell runs
floor(budget / (B_problem * n)) steps and writes its run log to <sweep dir>/cells/<cell id>/. Cells run one
after another on this machine, or as Ray jobs on an existing cluster (--ray-address, several at a time). The
state is kept in <sweep dir>/sweep_state.json: rerun the same command to resume (finished cells are skipped,
unfinished ones restarted cleanly). When every cell has run, the frontier and n*(C) are fitted into
<sweep dir>/fit (curve.json when n*(C) could be fitted, a flat one when one n is best at every C).

Exit status: 0 every cell finished; 1 some cell failed (the others ran; rerun to retry); 2 bad plan or
input (nothing ran); 128+signal when stopped by SIGTERM/SIGINT (rerun to resume).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

PROG = "isocompute sweep"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--plan", required=True, type=Path, metavar="PLAN.yaml", help="the sweep plan")
    parser.add_argument("--dry-run", action="store_true",
                        help="check the plan and every cell's config as the run does before Ray starts, print the cells, "
                             "steps and total rollouts; run nothing")
    parser.add_argument("--ray-address", default=None, metavar="URL",
                        help="submit cells as Ray jobs to this cluster's dashboard (e.g. http://127.0.0.1:8265); "
                             "default: the plan's ray.address, else run locally")
    parser.add_argument("--max-concurrent", type=int, default=None,
                        help="Ray jobs running at once (default: the plan's ray.max_concurrent, 2)")
    parser.add_argument("--sweep-dir", type=Path, default=None, help="override the plan's sweep_dir")
    parser.add_argument("--no-fit", action="store_true", help="do not fit at the end")
    parser.add_argument("--restart", action="store_true", help="discard the sweep's cells, state and fit, and start over")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar (log lines only)")


def run(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from verl_isocompute.workflow.sweep.grid import PlanError, describe
    from verl_isocompute.workflow.sweep.plan import load_plan
    from verl_isocompute.workflow.sweep.preflight import preflight

    plan = load_plan(args.plan)
    if args.sweep_dir is not None:
        plan = replace(plan, sweep_dir=str(args.sweep_dir.absolute()))
    if args.max_concurrent is not None and args.max_concurrent < 1:
        raise PlanError(f"--max-concurrent must be at least 1, got {args.max_concurrent}")
    # the whole plan, before the first cell (and in a dry run): data, recipe, overrides, fit and ray
    checked = preflight(plan)
    print(describe(plan))
    if args.dry_run:
        return 0
    return _run_sweep(plan, checked, args)


def _run_sweep(plan, checked, args: argparse.Namespace) -> int:
    import signal

    from verl_isocompute.workflow.sweep import runner
    from verl_isocompute.workflow.sweep.executors import LocalExecutor, RayJobExecutor
    from verl_isocompute.workflow.sweep.preflight import ray_options
    from verl_isocompute.workflow.sweep.state import clear_sweep

    sweep_dir = Path(plan.sweep_dir)
    address = args.ray_address or plan.ray.get("address")
    if address:
        options = ray_options(plan, checked.cfg, address, args.max_concurrent)
        executor = RayJobExecutor(options)
        executor.connect()  # an unreachable cluster fails in seconds, before anything is written
        print(f"[sweep] submitting to the Ray cluster at {options.address} ({options.mode} Ray instance per cell, "
              f"{options.num_gpus} GPU(s) each), {executor.max_concurrent} at a time", file=sys.stderr)
    else:
        executor = LocalExecutor()
    if args.restart:
        clear_sweep(sweep_dir)
    sweep = runner.Sweep(plan, executor, progress=not args.no_progress, cell_check=checked.cell_check)

    try:
        summary = sweep.run()
    except runner.Interrupted as exc:
        print(f"{PROG}: stopped by {exc}; the running cells and their Ray processes are stopped; kept the sweep "
              f"state {sweep.state.path} and the finished cells: rerun the same command to resume", file=sys.stderr)
        return exc.exit_code

    counts = summary["counts"]
    print(f"[sweep] cells: {counts.get(runner.FINISHED, 0)} done, {counts.get(runner.FAILED, 0)} failed, "
          f"{counts.get(runner.SKIPPED, 0)} skipped", file=sys.stderr)
    for cell_id, reason in summary["skipped"].items():
        print(f"[sweep] skipped {cell_id}: {reason}", file=sys.stderr)
    for cell_id, reason in summary["failed"].items():
        print(f"[sweep] FAILED {cell_id}: {reason}", file=sys.stderr)

    if not args.no_fit:
        # the fit is quick; a signal here ends the command the usual way
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        fit = sweep.fit()
        if fit["status"] == "fitted":
            print(f"[sweep] fit: {fit['summary']}; wrote {sweep_dir / runner.FIT_DIR}")
        else:
            print(f"[sweep] fit {fit['status']}: {fit.get('reason')}"
                  + (f"; frontier and report in {sweep_dir / runner.FIT_DIR}" if fit["status"] == "no_curve" else ""))
    return 1 if summary["failed"] else 0
