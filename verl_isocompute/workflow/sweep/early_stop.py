"""The sequential pilot in a running sweep: the checks of a plan's ``early_stop`` block (issue 44, item 3).

At each fraction f of ``checks``, once the sweep has spent f of the rollouts its runnable cells plan in total,
the runner forecasts every group (n, b_problem) at the plan's budget from whatever its runs have logged so far
and stops the groups that cannot win (:func:`verl_isocompute.scaling.pilot.decide`: a group's whole interval
below the best group's, each check's intervals at the per-check level that keeps the plan's level over all its
checks, :func:`~verl_isocompute.scaling.pilot.check_rule`). A stopped group's running cells are stopped and its
pending cells never start; both are recorded as :data:`~verl_isocompute.workflow.sweep.state.STOPPED` with the
check's reason, and a rerun of the sweep keeps them so (the checks done are recorded too, so none is repeated).
The fit reads a stopped run as the truncated run it is: its logged steps, never a forecast.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from verl_isocompute.runlog import last_logged_step
from verl_isocompute.workflow.sweep.grid import Cell, Plan
from verl_isocompute.workflow.sweep.state import FINISHED, INTERRUPTED, RUNNING, STOPPED, SweepState


def spent(cells: list[Cell], state: SweepState, run_dir: Callable[[Cell], Path]) -> int:
    """Rollouts the sweep has spent: finished cells whole, the others as far as their logs go."""
    total = 0
    for cell in cells:
        status = state.cells[cell.id]["status"]
        if status == FINISHED:
            total += cell.rollouts_used
        elif status in (RUNNING, STOPPED, INTERRUPTED):
            total += min(cell.steps, last_logged_step(run_dir(cell))) * cell.batch_rollouts
    return total


def due(plan: Plan, state: SweepState, spent_now: int, total: int) -> list[float]:
    """The checks not yet made whose fraction of ``total`` the sweep has spent."""
    done = state.data.setdefault("early_stop", {"checks_done": [], "decisions": []})["checks_done"]
    return [f for f in plan.early_stop["checks"] if f not in done and spent_now >= f * total]


def check(plan: Plan, state: SweepState, cells: list[Cell], run_dir: Callable[[Cell], Path], fraction: float) -> list[Any]:
    """Forecast every group from the logged runs and return the groups to stop; records the check."""
    from verl_isocompute.scaling.errors import ScalingError
    from verl_isocompute.scaling.pilot import check_level, stops_at
    from verl_isocompute.scaling.points import validation_points
    from verl_isocompute.scaling.run_logs import load_runs

    record = state.data.setdefault("early_stop", {"checks_done": [], "decisions": []})
    record["checks_done"].append(fraction)
    dirs = [str(run_dir(c)) for c in cells if last_logged_step(run_dir(c)) > 0]
    stop = plan.early_stop
    try:
        logs = load_runs(dirs)
        points, _ = validation_points(logs, stop["metric"], "rollouts")
        decisions = stops_at(points, float(plan.budget_rollouts), stop["metric"], check_level(stop["level"], stop["checks"]))
    except ScalingError as exc:  # nothing to forecast from yet: no group is stopped
        record["decisions"].append({"check": fraction, "stopped": [], "note": str(exc)})
        state.save()
        return []
    record["decisions"].append({"check": fraction, "stopped": [{"n": d.n, "b_problem": d.b_problem, "reason": d.reason}
                                                               for d in decisions]})
    state.save()
    return decisions
