"""Run a pilot sweep: every cell a real verl run, locally one after another or as Ray jobs, resumable.

Each cell is ``python -m verl_isocompute.main --config-name RECIPE <plan overrides> <cell shape>`` with
its run directory ``<sweep dir>/cells/<cell id>`` (run log ``isocompute.jsonl``, verl's metrics, hydra's
record of the config, ``verl.log``). Two executors:

- local: one cell at a time in a child process of its own session (so a stop reaches verl's Ray
  processes too). Each child starts a private Ray instance (``RAY_ADDRESS=local``): a cluster someone
  else started on this machine is never joined by accident.
- Ray jobs: cells are submitted to an existing cluster through Ray's job API
  (:class:`ray.job_submission.JobSubmissionClient`), several at a time. The job's verl driver joins the
  cluster instead of starting Ray, so the recipe's logical ``num_cpus``/``num_gpus`` are dropped from
  ``ray_init`` (the cluster must offer them: ``ray start --head --num-gpus=... --num-cpus=...``), and the
  environment the cell's Ray workers need is passed in the job's runtime_env. The sweep directory must be
  on a filesystem the cluster's nodes share with this machine: the cells write their logs there.

The sweep state lives in ``<sweep dir>/sweep_state.json``, rewritten atomically (temp file +
``os.replace``) after every transition. A re-run skips finished cells, and restarts unfinished ones
cleanly: the old run directory is moved to ``<sweep dir>/attempts/`` first, so the fit never sees
duplicated or partial steps. A finished cell is one whose process succeeded *and* whose log reaches the
planned last step. SIGTERM/SIGINT stop the running cells (their process groups or Ray jobs), mark them
unfinished and save the state. A cell whose recorded configuration differs from the plan's is an error
(a plan edited mid-sweep), not a silent rerun. At the end the fit of :mod:`verl_isocompute.scaling` runs
on the finished cells and writes ``<sweep dir>/fit``.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import socket
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable
from urllib.parse import urlparse

from verl_isocompute import atomic
from verl_isocompute.runlog import CONSOLE_LOG, RUN_LOG, VERL_METRICS, logged_steps  # noqa: F401  (re-exported)
from verl_isocompute.workflow import launch
from verl_isocompute.workflow.launch import Interrupted, ray_session_processes  # noqa: F401  (re-exported)
from verl_isocompute.workflow.sweep.plan import Cell, Plan, cell_overrides

STATE_FILE = "sweep_state.json"
STATE_VERSION = 1
CELLS_DIR = "cells"
ATTEMPTS_DIR = "attempts"
FIT_DIR = "fit"
CONNECT_TIMEOUT_S = 10.0
FINISHED, RUNNING, FAILED, INTERRUPTED, PENDING, SKIPPED = "done", "running", "failed", "interrupted", "pending", "skipped"


class SweepError(RuntimeError):
    """A sweep that cannot start or continue; the message names the fix."""


# --- logs -------------------------------------------------------------------------------------------


def _tail(path: Path, lines: int = 15) -> str:
    if not path.is_file():
        return ""
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


# --- state ------------------------------------------------------------------------------------------


class SweepState:
    """``sweep_state.json``: one record per cell (status, attempts, timings, the exact configuration)."""

    def __init__(self, sweep_dir: Path) -> None:
        self.path = sweep_dir / STATE_FILE
        self.data: dict[str, Any] = {"version": STATE_VERSION, "cells": {}, "fit": None}
        if self.path.is_file():
            try:
                self.data = json.loads(self.path.read_text())
            except json.JSONDecodeError as exc:
                raise SweepError(f"{self.path} is not valid JSON ({exc}); move it away to start the sweep afresh") from None

    @property
    def cells(self) -> dict[str, dict[str, Any]]:
        return self.data["cells"]

    def save(self) -> None:
        self.data["updated"] = time.time()
        atomic.write_json(self.path, self.data)


def cell_spec(plan: Plan, cell: Cell, dataset_size: int | None) -> dict[str, Any]:
    """What defines a cell's run; a finished cell with another spec means the plan changed."""
    overrides = [o for o in cell_overrides(plan, cell, "RUN_DIR", dataset_size) if not o.startswith("isocompute.run_dir=")]
    return {"recipe": plan.recipe, "b_problem": cell.b_problem, "n": cell.n, "steps": cell.steps, "overrides": overrides}


def _spec_diff(old: dict[str, Any], new: dict[str, Any]) -> str:
    for key in ("recipe", "b_problem", "n", "steps"):
        if old.get(key) != new.get(key):
            return f"{key} {old.get(key)} -> {new.get(key)}"
    removed = sorted(set(old.get("overrides", [])) - set(new["overrides"]))
    added = sorted(set(new["overrides"]) - set(old.get("overrides", [])))
    return f"overrides removed {removed}, added {added}"


# --- executors --------------------------------------------------------------------------------------


@dataclass
class Outcome:
    """How a cell's process ended: ``ok`` is the exit status only; the log check comes after."""

    ok: bool
    message: str = ""
    returncode: int | None = None


class LocalExecutor:
    """One cell at a time, as a child process in a session of its own."""

    max_concurrent = 1
    name = "local"

    def __init__(self, python: str = sys.executable) -> None:
        self.python = python

    def command(self, plan: Plan, overrides: list[str]) -> list[str]:
        return [self.python, "-m", "verl_isocompute.main", "--config-name", plan.recipe, *overrides]

    def start(self, plan: Plan, cell: Cell, run_dir: Path, overrides: list[str]) -> dict[str, Any]:
        proc = launch.start(self.command(plan, overrides), run_dir / CONSOLE_LOG)
        return {"proc": proc, "run_dir": run_dir, "pid": proc.pid}

    def poll(self, handle: dict[str, Any]) -> Outcome | None:
        rc = handle["proc"].poll()
        if rc is None:
            return None
        if rc == 0:
            return Outcome(True, returncode=0)
        return Outcome(False, f"verl exited with status {rc}", returncode=rc)

    def stop(self, handle: dict[str, Any]) -> None:
        launch.stop(handle["proc"])

    def reattach(self, record: dict[str, Any]) -> None:
        return None  # a local child does not outlive its sweep process

    def finish(self, handle: dict[str, Any]) -> None:
        return None  # verl's output already went to verl.log


def dashboard_address(address: str) -> str:
    """Ray's job API speaks HTTP to the dashboard: accept ``host:port`` and add the scheme."""
    address = address.strip()
    if "://" not in address:
        address = "http://" + address
    return address


def check_reachable(address: str, timeout: float = CONNECT_TIMEOUT_S) -> None:
    """Fail fast (``timeout`` s) on an address nobody listens on, instead of hanging in the client."""
    url = urlparse(address)
    if url.scheme not in ("http", "https") or not url.hostname:
        raise SweepError(
            f"--ray-address {address!r}: give the Ray dashboard's HTTP address, e.g. http://127.0.0.1:8265 "
            "(the job API; not the GCS port 6379 and not ray://)"
        )
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        with socket.create_connection((url.hostname, port), timeout=timeout):
            pass
    except OSError as exc:
        raise SweepError(
            f"cannot reach a Ray cluster at {address} ({exc}); start one (ray start --head) or pass the "
            "dashboard address it printed with --ray-address"
        ) from None


class RayJobExecutor:
    """Cells as Ray jobs on an existing cluster, ``max_concurrent`` at a time.

    Two ways for a cell to use the cluster:

    - ``private`` (default for single-node cells): the job reserves the cell's GPUs on the cluster
      (``entrypoint_num_gpus``; Ray then restricts the job to them) and its verl driver starts a Ray
      instance of its own on that node (``RAY_ADDRESS=local``). The cluster schedules and isolates cells,
      so several run at once. This is needed because verl 0.9.1's trainer always starts TransferQueue,
      whose controller is a named actor global to a Ray cluster (``TransferQueueController`` in namespace
      ``transfer_queue``): two verl runs joined to one cluster share it and the second one hangs.
    - ``join``: the verl driver joins the cluster (multi-node cells need this); because of the shared
      TransferQueue controller, cells then run one at a time.
    """

    name = "ray"
    MODES = ("private", "join")

    def __init__(self, address: str, max_concurrent: int, python: str = "python", env_vars: dict[str, str] | None = None,
                 mode: str = "private", num_gpus: float | None = None, num_cpus: float | None = None) -> None:
        from ray.job_submission import JobSubmissionClient

        if mode not in self.MODES:
            raise SweepError(f"ray.mode={mode!r}: use private (each cell its own Ray instance) or join")
        self.address = dashboard_address(address)
        check_reachable(self.address)
        try:
            self.client = JobSubmissionClient(self.address)
        except Exception as exc:  # the client raises ConnectionError / RuntimeError with Ray's own message
            raise SweepError(f"cannot use the Ray job API at {self.address}: {exc}") from None
        self.mode = mode
        self.max_concurrent = max_concurrent if mode == "private" else 1
        self.python = python
        self.env_vars = dict(env_vars or {})
        self.num_gpus = num_gpus
        self.num_cpus = num_cpus

    def entrypoint(self, plan: Plan, overrides: list[str]) -> str:
        command = [self.python, "-m", "verl_isocompute.main", "--config-name", plan.recipe, *overrides]
        if self.mode == "join":
            # the driver joins the cluster: ray.init must not be given resources (Ray refuses them)
            return shlex.join(command + ["++ray_kwargs.ray_init.num_cpus=null", "++ray_kwargs.ray_init.num_gpus=null"])
        # the job supervisor points RAY_ADDRESS at the cluster; the cell starts its own instance instead
        return "RAY_ADDRESS=local " + shlex.join(command)

    def runtime_env(self, run_dir: Path) -> dict[str, Any]:
        env = {
            # verl's file logger reads its path in the TaskRunner, a Ray worker (of the cluster in join mode)
            "VERL_FILE_LOGGER_PATH": str(run_dir / VERL_METRICS),
            **{k: os.environ[k] for k in ("VERL_PLATFORM", "ISOCOMPUTE_CACHE") if k in os.environ},
            **self.env_vars,
        }
        return {"env_vars": env}

    def start(self, plan: Plan, cell: Cell, run_dir: Path, overrides: list[str]) -> dict[str, Any]:
        submission_id = f"isocompute-{plan.name}-{cell.id}-{uuid.uuid4().hex[:8]}"
        resources = {}
        if self.mode == "private":
            resources = {"entrypoint_num_gpus": self.num_gpus or None, "entrypoint_num_cpus": self.num_cpus or None}
        self.client.submit_job(
            entrypoint=self.entrypoint(plan, overrides), submission_id=submission_id,
            runtime_env=self.runtime_env(run_dir), metadata={"isocompute_sweep": plan.name, "cell": cell.id},
            **resources,
        )
        return {"job_id": submission_id, "run_dir": run_dir}

    def poll(self, handle: dict[str, Any]) -> Outcome | None:
        from ray.job_submission import JobStatus

        info = self.client.get_job_info(handle["job_id"])
        if not info.status.is_terminal():
            return None
        if info.status == JobStatus.SUCCEEDED:
            return Outcome(True, returncode=0)
        rc = getattr(info, "driver_exit_code", None)
        return Outcome(False, f"Ray job {handle['job_id']} {info.status.value}: {info.message or ''}".strip(), returncode=rc)

    def finish(self, handle: dict[str, Any]) -> None:
        try:
            logs = self.client.get_job_logs(handle["job_id"])
        except Exception as exc:  # logs are a convenience; the run log is what counts
            logs = f"(could not fetch the job's logs: {exc})\n"
        (handle["run_dir"] / CONSOLE_LOG).write_text(logs)

    def stop(self, handle: dict[str, Any]) -> None:
        try:
            self.client.stop_job(handle["job_id"])
        except Exception:
            return
        deadline = time.monotonic() + launch.STOP_GRACE_S + 10
        while time.monotonic() < deadline:
            if self.client.get_job_status(handle["job_id"]).is_terminal():
                break
            time.sleep(1.0)
        self.finish(handle)

    def reattach(self, record: dict[str, Any]) -> dict[str, Any] | None:
        """A job a previous sweep process submitted and left running: follow it instead of restarting."""
        job_id = record.get("job_id")
        if not job_id or record.get("executor") != self.name:
            return None
        try:
            status = self.client.get_job_status(job_id)
        except Exception:
            return None
        if status.is_terminal() and status.value != "SUCCEEDED":
            return None
        return {"job_id": job_id, "run_dir": None}


# --- the sweep --------------------------------------------------------------------------------------


def dataset_size(plan: Plan) -> int | None:
    """Training problems in the plan's data files (parquet metadata only), or None for recipe data."""
    if not plan.train_files:
        return None
    import pyarrow.parquet as pq

    total = 0
    for f in plan.train_files + plan.val_files:
        if not Path(f).is_file():
            raise SweepError(f"data file {f} does not exist; fix data.train_files / data.val_files in {plan.source or 'the plan'}")
    for f in plan.train_files:
        total += pq.ParquetFile(f).metadata.num_rows
    return total


class Sweep:
    """Runs a plan's cells with an executor, keeping ``sweep_state.json`` current."""

    def __init__(self, plan: Plan, executor: LocalExecutor | RayJobExecutor, progress: bool = True,
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
                    f"cell {cell.id} finished with another configuration ({_spec_diff(record.get('spec', {}), spec)}): "
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

    def _start(self, cell: Cell) -> dict[str, Any]:
        record = self.state.cells[cell.id]
        run_dir = self._prepare_run_dir(cell, record)
        overrides = cell_overrides(self.plan, cell, run_dir, self.dataset_size)
        handle = self.executor.start(self.plan, cell, run_dir, overrides)
        record.update({
            "status": RUNNING, "attempts": record.get("attempts", 0) + 1, "started": time.time(),
            "executor": self.executor.name, "job_id": handle.get("job_id"), "pid": handle.get("pid"),
            "run_dir": str(run_dir.relative_to(self.dir)),
        })
        record.pop("reason", None)
        self.state.save()
        self.echo(f"[sweep] {cell.id}: started (attempt {record['attempts']}, {cell.steps} steps of "
                  f"{cell.b_problem} x {cell.n} rollouts)")
        return handle

    def _finish(self, cell: Cell, handle: dict[str, Any], outcome: Outcome) -> None:
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
        return [c for c in self.plan.runnable() if self.state.cells[c.id]["status"] not in (FINISHED, SKIPPED)]

    def run(self) -> dict[str, Any]:
        """Run every unfinished cell; returns a summary. Raises :class:`Interrupted` on SIGTERM/SIGINT."""
        from tqdm import tqdm

        for cell in self.plan.cells():
            record = self.state.cells[cell.id]
            if record["status"] == SKIPPED:
                self.echo(f"[sweep] {cell.id}: skipped: {record['reason']}")
        queue = self.todo()
        done_before = [c.id for c in self.plan.runnable() if self.state.cells[c.id]["status"] == FINISHED]
        if done_before:
            self.echo(f"[sweep] {len(done_before)} cell(s) already finished: {', '.join(done_before)}")
        runnable = [c for c in self.plan.runnable() if self.state.cells[c.id]["status"] != SKIPPED]
        total_steps = sum(c.steps for c in runnable)
        running: dict[str, tuple[Cell, dict[str, Any]]] = {}

        # cells a previous sweep process left running as Ray jobs: follow them
        for cell in list(queue):
            record = self.state.cells[cell.id]
            if record["status"] == RUNNING:
                handle = self.executor.reattach(record)
                if handle is not None:
                    handle["run_dir"] = self.run_dir(cell)
                    running[cell.id] = (cell, handle)
                    queue.remove(cell)
                    self.echo(f"[sweep] {cell.id}: following Ray job {handle['job_id']} left running by an earlier sweep")

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
                    self._update_bar(bar, runnable, running)
            except Interrupted as exc:
                self.echo(f"[sweep] {exc}: stopping {len(running)} running cell(s); rerun the same command to resume")
                for cell_id, (cell, handle) in running.items():
                    self.executor.stop(handle)
                    record = self.state.cells[cell_id]
                    record.update({"status": INTERRUPTED, "finished": time.time(), "reason": f"stopped by {exc}"})
                    record["last_step"] = max(logged_steps(self.run_dir(cell)), default=0)
                self.state.save()
                raise
            finally:
                bar.close()
        return self.summary()

    def _update_bar(self, bar, runnable: list[Cell], running: dict) -> None:
        if bar.disable:
            return
        done = 0
        for cell in runnable:
            record = self.state.cells[cell.id]
            if record["status"] == FINISHED:
                done += cell.steps
            elif cell.id in running:
                done += min(cell.steps, max(logged_steps(self.run_dir(cell)), default=0))
        counts = self.counts()
        view = (done, tuple(running), counts.get(FINISHED, 0), counts.get(FAILED, 0))
        if view == getattr(bar, "_isocompute_view", None):
            return  # redraw only on change: in a log file every redraw is a line
        bar._isocompute_view = view
        bar.n = done
        bar.set_postfix(running=",".join(running) or "-", done=view[2], failed=view[3], refresh=False)
        bar.refresh()

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for record in self.state.cells.values():
            out[record["status"]] = out.get(record["status"], 0) + 1
        return out

    def finished_run_dirs(self) -> list[Path]:
        return [self.run_dir(c) for c in self.plan.runnable() if self.state.cells[c.id]["status"] == FINISHED]

    def summary(self) -> dict[str, Any]:
        return {"sweep_dir": str(self.dir), "counts": self.counts(),
                "failed": {k: r.get("reason") for k, r in self.state.cells.items() if r["status"] == FAILED},
                "skipped": {k: r.get("reason") for k, r in self.state.cells.items() if r["status"] == SKIPPED}}

    # -- the fit -----------------------------------------------------------------------------------
    def fit(self) -> dict[str, Any]:
        """Fit the frontier and n*(C) on the finished cells (``verl_isocompute.scaling``); record the outcome."""
        from verl_isocompute.scaling.errors import FitError, ScalingError
        from verl_isocompute.scaling.pipeline import FitOptions, run_fit

        runs = self.finished_run_dirs()
        out_dir = self.dir / FIT_DIR
        record: dict[str, Any] = {"out": FIT_DIR, "runs": len(runs), "time": time.time()}
        if not runs:
            record.update(status="skipped", reason="no finished cell to fit")
        else:
            try:
                outcome = run_fit([str(r) for r in runs], out_dir, FitOptions.from_dict(dict(self.plan.fit)),
                                  command=f"isocompute sweep --plan {self.plan.source}")
            except (ScalingError, FitError, ValueError) as exc:
                record.update(status="failed", reason=str(exc))
            else:
                if outcome.curve is None:
                    record.update(status="no_curve", reason=outcome.result.no_curve_reason)
                else:
                    c = outcome.curve
                    record.update(status="fitted", curve=str(out_dir / "curve.json"),
                                  params={"L": c.L, "k": c.k, "log10_C0": c.log10_C0, "b": c.b})
        self.state.data["fit"] = record
        self.state.save()
        return record


def clear_sweep(sweep_dir: Path) -> None:
    """Remove a sweep's outputs (for --restart): cells, attempts, fit and the state file."""
    for name in (CELLS_DIR, ATTEMPTS_DIR, FIT_DIR):
        shutil.rmtree(sweep_dir / name, ignore_errors=True)
    (sweep_dir / STATE_FILE).unlink(missing_ok=True)
