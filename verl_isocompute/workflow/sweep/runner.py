"""Run a pilot sweep's cells with an executor, resumably: the scheduling, nothing else.

Where a cell runs is an executor's job (:mod:`.executors`: local child processes or Ray jobs); the
state on disk is :mod:`.state`; the plan and each cell's overrides are :mod:`.plan`; the fit at the end
is :func:`verl_isocompute.scaling.pipeline.run_fit`, the one ``isocompute fit`` runs.

A re-run skips finished cells, and restarts unfinished ones cleanly: the old run directory is moved to
``<sweep dir>/attempts/`` first, so the fit never sees duplicated or partial steps. A finished cell is
one whose process succeeded *and* whose log reaches the planned last step. SIGTERM/SIGINT stop the
running cells (their process groups or Ray jobs), mark them unfinished and save the state. A cell whose
recorded configuration differs from the plan's is an error (a plan edited mid-sweep), not a silent rerun.
"""

from __future__ import annotations

import os
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from verl_isocompute import _compat
from verl_isocompute.runlog import CONSOLE_LOG, last_logged_step, logged_steps
from verl_isocompute.workflow import launch
from verl_isocompute.workflow.launch import Interrupted
from verl_isocompute.workflow.sweep.executors import CellHandle, Executor, Outcome
from verl_isocompute.workflow.sweep.grid import Cell, Plan, cell_overrides, counted
from verl_isocompute.workflow.sweep.preflight import dataset_size
from verl_isocompute.workflow.sweep.state import (
    ATTEMPTS_DIR,
    CELLS_DIR,
    FAILED,
    FINISHED,
    FIT_DIR,
    INTERRUPTED,
    PENDING,
    RUNNING,
    SKIPPED,
    STATE_FILE,
    STOPPED,
    SweepError,
    SweepState,
    cell_spec,
    spec_diff,
)

# Names this module re-exported until 0.2 (0.1's runner held them); the old path works for one release.
_MOVED = {
    **dict.fromkeys(("RUN_LOG", "VERL_METRICS"), "verl_isocompute.runlog"),
    **dict.fromkeys(("ray_session_processes",), "verl_isocompute.workflow.launch"),
    **dict.fromkeys(("CONNECT_TIMEOUT_S", "LocalExecutor", "RayJobExecutor", "RayConfig", "check_reachable", "dashboard_address"),
                    "verl_isocompute.workflow.sweep.executors"),
    **dict.fromkeys(("STATE_VERSION", "clear_sweep"), "verl_isocompute.workflow.sweep.state"),
}

__getattr__ = _compat.moved_names(__name__, _MOVED)


def _tail(path: Path, lines: int = 15) -> str:
    if not path.is_file():
        return ""
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


# --- the sweep --------------------------------------------------------------------------------------


class Sweep:
    """Runs a plan's cells with an executor, keeping ``sweep_state.json`` current."""

    def __init__(self, plan: Plan, executor: Executor, progress: bool = True,
                 poll_s: float = 2.0, echo: Callable[[str], None] | None = None,
                 cell_check: Callable[[Cell], str | None] | None = None) -> None:
        """``cell_check(cell)`` returns why a cell cannot run (it is then skipped with that reason), or None."""
        self.plan = plan
        self.cell_check = cell_check
        self.executor = executor
        self.dir = Path(plan.sweep_dir)
        self.poll_s = poll_s
        self.progress = progress
        self.echo = echo or (lambda msg: print(msg, file=sys.stderr, flush=True))
        self.dir.mkdir(parents=True, exist_ok=True)
        self.state = SweepState(self.dir)
        self.state.data["plan"] = {"name": plan.name, "source": plan.source, "recipe": plan.recipe,
                                   "budget_rollouts": plan.budget_rollouts, "b_max": plan.b_max}
        self.dataset_size = dataset_size(plan)
        self._register_cells()

    def run_dir(self, cell: Cell) -> Path:
        return self.dir / CELLS_DIR / cell.id

    def _register_cells(self) -> None:
        cells = self.state.cells
        for cell in self.plan.cells():
            record = cells.get(cell.id)
            if cell.steps < 1:
                cells[cell.id] = {
                    "status": SKIPPED, "b_problem": cell.b_problem, "n": cell.n, "steps": 0, "attempts": 0,
                    "reason": f"budget_rollouts = {cell.budget_rollouts} is less than one step "
                              f"({cell.b_problem} x {cell.n} = {cell.batch_rollouts} rollouts)",
                }
                continue
            if self.dataset_size is not None and self.dataset_size < cell.b_problem:
                cells[cell.id] = {
                    "status": SKIPPED, "b_problem": cell.b_problem, "n": cell.n, "steps": cell.steps, "attempts": 0,
                    "reason": f"b_problem = {cell.b_problem} exceeds the {self.dataset_size} training problems",
                }
                continue
            issue = self.cell_check(cell) if self.cell_check else None
            if issue:
                cells[cell.id] = {"status": SKIPPED, "b_problem": cell.b_problem, "n": cell.n, "steps": cell.steps,
                                  "attempts": 0, "reason": issue}
                continue
            spec = cell_spec(self.plan, cell, self.dataset_size)
            if record is not None and record.get("status") == FINISHED and record.get("spec") != spec:
                raise SweepError(
                    f"cell {cell.id} finished with another configuration ({spec_diff(record.get('spec', {}), spec)}): "
                    f"the plan changed since {self.dir} was run. Use a new sweep_dir, or move "
                    f"{self.dir / CELLS_DIR / cell.id} and its entry in {STATE_FILE} away to rerun it"
                )
            if record is None or record.get("status") == SKIPPED:
                record = {"status": PENDING, "attempts": 0}
            record.update({"b_problem": cell.b_problem, "n": cell.n, "steps": cell.steps,
                           "rollouts": cell.rollouts_used, "spec": spec})
            cells[cell.id] = record
        self.state.save()

    # -- one cell ----------------------------------------------------------------------------------
    def _prepare_run_dir(self, cell: Cell, record: dict[str, Any]) -> Path:
        run_dir = self.run_dir(cell)
        if run_dir.exists():
            # an earlier, unfinished attempt: keep it for debugging, out of the fit's way
            target = self.dir / ATTEMPTS_DIR / f"{cell.id}-attempt{record.get('attempts', 0)}"
            if target.exists():
                target = target.with_name(f"{target.name}-{uuid.uuid4().hex[:6]}")
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(run_dir, target)
        run_dir.mkdir(parents=True)
        return run_dir

    def _start(self, cell: Cell) -> CellHandle:
        record = self.state.cells[cell.id]
        run_dir = self._prepare_run_dir(cell, record)
        overrides = cell_overrides(self.plan, cell, run_dir, self.dataset_size)
        handle = self.executor.start(self.plan, cell, run_dir, overrides)
        record.update({
            "status": RUNNING, "attempts": record.get("attempts", 0) + 1, "started": time.time(),
            "executor": self.executor.name, "job_id": handle.job_id, "pid": handle.pid,
            "run_dir": str(run_dir.relative_to(self.dir)),
        })
        record.pop("reason", None)
        self.state.save()
        self.echo(f"[sweep] {cell.id}: started (attempt {record['attempts']}, {cell.steps} steps of "
                  f"{cell.b_problem} x {cell.n} rollouts)")
        return handle

    def _finish(self, cell: Cell, handle: CellHandle, outcome: Outcome) -> None:
        self.executor.finish(handle)
        record = self.state.cells[cell.id]
        run_dir = self.run_dir(cell)
        steps = logged_steps(run_dir)
        record["finished"] = time.time()
        record["wall_s"] = round(record["finished"] - record.get("started", record["finished"]), 1)
        record["returncode"] = outcome.returncode
        record["last_step"] = max(steps) if steps else 0
        if outcome.ok and steps and max(steps) >= cell.steps:
            record["status"] = FINISHED
            self.echo(f"[sweep] {cell.id}: done in {record['wall_s']:.0f} s ({cell.steps} steps, {cell.rollouts_used} rollouts)")
        else:
            record["status"] = FAILED
            why = outcome.message if not outcome.ok else f"the run ended at step {record['last_step']} of {cell.steps}"
            record["reason"] = f"{why}; see {run_dir / CONSOLE_LOG}"
            tail = _tail(run_dir / CONSOLE_LOG, 8)
            self.echo(f"[sweep] {cell.id}: FAILED: {record['reason']}" + (f"\n{tail}" if tail else ""))
        self.state.save()

    # -- the loop ----------------------------------------------------------------------------------
    def todo(self) -> list[Cell]:
        return [c for c in self.plan.runnable() if self.state.cells[c.id]["status"] not in (FINISHED, SKIPPED, STOPPED)]

    def run(self) -> dict[str, Any]:
        """Run every unfinished cell; returns a summary. Raises :class:`Interrupted` on SIGTERM/SIGINT."""
        from tqdm import tqdm

        for cell in self.plan.cells():
            record = self.state.cells[cell.id]
            if record["status"] in (SKIPPED, STOPPED):
                self.echo(f"[sweep] {cell.id}: {record['status']}: {record['reason']}")
        queue = self.todo()
        done_before = [c.id for c in self.plan.runnable() if self.state.cells[c.id]["status"] == FINISHED]
        unit = "run" if self.plan.seeds else "cell"  # with seeds, an id names one seed's run of a cell
        if done_before:
            self.echo(f"[sweep] {counted(len(done_before), unit)} already finished: {', '.join(done_before)}")
        runnable = [c for c in self.plan.runnable() if self.state.cells[c.id]["status"] != SKIPPED]
        total_steps = sum(c.steps for c in runnable)
        running: dict[str, tuple[Cell, CellHandle]] = {}

        # cells a previous sweep process left running as Ray jobs: follow them
        for cell in list(queue):
            record = self.state.cells[cell.id]
            if record["status"] == RUNNING:
                handle = self.executor.reattach(record, self.run_dir(cell))
                if handle is not None:
                    running[cell.id] = (cell, handle)
                    queue.remove(cell)
                    self.echo(f"[sweep] {cell.id}: following Ray job {handle.job_id} left running by an earlier sweep")

        bar = tqdm(total=total_steps, unit="step", desc=f"sweep {self.plan.name}", disable=not self.progress,
                   file=sys.stderr, dynamic_ncols=True)
        # Signals only set a latch; the loop acts on it between steps, so a cell being started or
        # finished is always fully registered in the state before it is stopped.
        with launch.deferred_signals() as latch:
            try:
                while queue or running:
                    while queue and len(running) < self.executor.max_concurrent and not latch.received:
                        cell = queue.pop(0)
                        running[cell.id] = (cell, self._start(cell))
                    latch.check()
                    time.sleep(self.poll_s)
                    latch.check()
                    for cell_id, (cell, handle) in list(running.items()):
                        outcome = self.executor.poll(handle)
                        if outcome is not None:
                            del running[cell_id]
                            self._finish(cell, handle, outcome)
                    if self.plan.early_stop:
                        self._early_stop(runnable, queue, running)
                    self._update_bar(bar, runnable, running)
            except Interrupted as exc:
                self.echo(f"[sweep] {exc}: stopping {counted(len(running), unit)} in progress; rerun the same command to resume")
                for cell_id, (cell, handle) in running.items():
                    self.executor.stop(handle)
                    record = self.state.cells[cell_id]
                    record.update({"status": INTERRUPTED, "finished": time.time(), "reason": f"stopped by {exc}"})
                    record["last_step"] = last_logged_step(self.run_dir(cell))
                self.state.save()
                raise
            finally:
                bar.close()
        return self.summary()

    def _early_stop(self, runnable: list[Cell], queue: list[Cell], running: dict) -> None:
        """Make the checks the sweep's spend has reached; stop the groups they find beaten (:mod:`.early_stop`)."""
        from verl_isocompute.workflow.sweep import early_stop

        total = sum(c.rollouts_used for c in runnable)
        for fraction in early_stop.due(self.plan, self.state, early_stop.spent(runnable, self.state, self.run_dir), total):
            decisions = early_stop.check(self.plan, self.state, runnable, self.run_dir, fraction)
            self.echo(f"[sweep] early stop: check at {fraction:.0%} of the sweep's rollouts: "
                      + ("; ".join(d.reason for d in decisions) if decisions else "no n is beaten with confidence"))
            for d in decisions:
                for cell in [c for c in runnable if (c.n, c.b_problem) == (d.n, d.b_problem)]:
                    record = self.state.cells[cell.id]
                    if record["status"] in (FINISHED, SKIPPED, STOPPED):
                        continue
                    seen = last_logged_step(self.run_dir(cell))  # what the decision saw
                    if seen >= cell.steps:
                        continue  # its last step is logged: nothing left to save, let it finish
                    if cell.id in running:
                        self.executor.stop(running.pop(cell.id)[1])
                    elif cell in queue:
                        queue.remove(cell)
                    # last_step: what is on disk once it stopped (a step may end while it is being stopped)
                    record.update({"status": STOPPED, "finished": time.time(), "reason": f"early stop at {fraction:.0%}: {d.reason}",
                                   "decided_at_step": seen, "last_step": last_logged_step(self.run_dir(cell))})
                    self.echo(f"[sweep] {cell.id}: stopped at step {record['last_step']} of {cell.steps}")
            self.state.save()

    def _update_bar(self, bar, runnable: list[Cell], running: dict) -> None:
        if bar.disable:
            return
        done = 0
        for cell in runnable:
            record = self.state.cells[cell.id]
            if record["status"] == FINISHED:
                done += cell.steps
            elif cell.id in running:
                done += min(cell.steps, last_logged_step(self.run_dir(cell)))
        counts = self.counts()
        view = (done, tuple(running), counts.get(FINISHED, 0), counts.get(FAILED, 0))
        if view == getattr(bar, "_isocompute_view", None):
            return  # redraw only on change: in a log file every redraw is a line
        bar._isocompute_view = view
        bar.n = done
        bar.set_postfix(running=",".join(running) or "-", done=view[2], failed=view[3], refresh=False)
        bar.refresh()

    def counts(self) -> dict[str, int]:
        return self.state.counts()

    def finished_run_dirs(self) -> list[Path]:
        """The runs the fit reads: finished ones, and the logged part of those the early stop stopped."""
        return [self.run_dir(c) for c in self.plan.runnable()
                if self.state.cells[c.id]["status"] == FINISHED
                or (self.state.cells[c.id]["status"] == STOPPED and last_logged_step(self.run_dir(c)) > 0)]

    def summary(self) -> dict[str, Any]:
        return {"sweep_dir": str(self.dir), "counts": self.counts(),
                "failed": {k: r.get("reason") for k, r in self.state.cells.items() if r["status"] == FAILED},
                "skipped": {k: r.get("reason") for k, r in self.state.cells.items() if r["status"] == SKIPPED}}

    # -- the fit -----------------------------------------------------------------------------------
    def fit(self) -> dict[str, Any]:
        """Fit the frontier and n*(C) on the finished cells (``verl_isocompute.scaling``); record the outcome."""
        from verl_isocompute.scaling.errors import FitError, ScalingError
        from verl_isocompute.scaling.pipeline import run_fit
        from verl_isocompute.workflow.sweep.plan import fit_options

        runs = self.finished_run_dirs()
        out_dir = self.dir / FIT_DIR
        record: dict[str, Any] = {"out": FIT_DIR, "runs": len(runs), "time": time.time()}
        if not runs:
            record.update(status="skipped", reason="no finished cell to fit")
        else:
            try:
                outcome = run_fit([str(r) for r in runs], out_dir, fit_options(dict(self.plan.fit)),
                                  command=f"isocompute sweep --plan {self.plan.source}")
            except (ScalingError, FitError, ValueError) as exc:
                record.update(status="failed", reason=str(exc))
            else:
                if outcome.curve is None:
                    record.update(status="no_curve", reason=outcome.result.no_curve_reason)
                else:
                    c = outcome.curve
                    record.update(status="fitted", curve=str(out_dir / "curve.json"), summary=outcome.result.summary(),
                                  params={"L": c.L, "k": c.k, "log10_C0": c.log10_C0, "b": c.b})
        self.state.data["fit"] = record
        self.state.save()
        return record
