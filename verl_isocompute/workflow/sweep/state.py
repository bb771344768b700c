"""A sweep's state on disk: ``<sweep dir>/sweep_state.json``, one record per cell, rewritten atomically.

A record holds the cell's status (:data:`PENDING` -> :data:`RUNNING` -> :data:`FINISHED` /
:data:`FAILED` / :data:`INTERRUPTED`, or :data:`SKIPPED` / :data:`STOPPED` with a reason), its attempts, timings, where it
ran (executor, pid or Ray job id) and its ``spec``: what defines the run (recipe, shape, overrides). A
finished cell whose spec differs from the plan's means the plan was edited mid-sweep. The file is
replaced whole (temporary file + ``os.replace``, :mod:`verl_isocompute.atomic`) after every transition,
so a kill at any moment leaves either the old state or the new one.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

from verl_isocompute import atomic
from verl_isocompute.errors import IsoComputeError
from verl_isocompute.workflow.sweep.grid import Cell, Plan, cell_overrides

STATE_FILE = "sweep_state.json"
STATE_VERSION = 1
CELLS_DIR = "cells"
ATTEMPTS_DIR = "attempts"
FIT_DIR = "fit"
FINISHED, RUNNING, FAILED, INTERRUPTED, PENDING, SKIPPED = "done", "running", "failed", "interrupted", "pending", "skipped"
STOPPED = "stopped"  # by the sequential pilot (early_stop): kept so on a rerun; the fit reads its logged steps


class SweepError(IsoComputeError, RuntimeError):
    """A sweep that cannot start or continue; the message names the fix."""


class SweepState:
    """``sweep_state.json``: one record per cell (status, attempts, timings, the exact configuration)."""

    def __init__(self, sweep_dir: Path) -> None:
        self.path = Path(sweep_dir) / STATE_FILE
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

    def counts(self) -> dict[str, int]:
        """Cells per status."""
        out: dict[str, int] = {}
        for record in self.cells.values():
            out[record["status"]] = out.get(record["status"], 0) + 1
        return out


def cell_spec(plan: Plan, cell: Cell, dataset_size: int | None) -> dict[str, Any]:
    """What defines a cell's run; a finished cell with another spec means the plan changed."""
    overrides = [o for o in cell_overrides(plan, cell, "RUN_DIR", dataset_size) if not o.startswith("isocompute.run_dir=")]
    return {"recipe": plan.recipe, "b_problem": cell.b_problem, "n": cell.n, "steps": cell.steps, "overrides": overrides}


def spec_diff(old: dict[str, Any], new: dict[str, Any]) -> str:
    """The first difference between two cell specs, for the error message."""
    for key in ("recipe", "b_problem", "n", "steps"):
        if old.get(key) != new.get(key):
            return f"{key} {old.get(key)} -> {new.get(key)}"
    removed = sorted(set(old.get("overrides", [])) - set(new["overrides"]))
    added = sorted(set(new["overrides"]) - set(old.get("overrides", [])))
    return f"overrides removed {removed}, added {added}"


def clear_sweep(sweep_dir: Path) -> None:
    """Remove a sweep's outputs (for --restart): cells, attempts, fit and the state file."""
    for name in (CELLS_DIR, ATTEMPTS_DIR, FIT_DIR):
        shutil.rmtree(sweep_dir / name, ignore_errors=True)
    (sweep_dir / STATE_FILE).unlink(missing_ok=True)
