"""The sequential pilot in the sweep runner (issue 44, item 3): plan option, dry run, checks, stops, resume, fit.

The runner is driven by an executor that replays known-truth training curves into each cell's run log, a few
steps per poll, as a running verl job appends its steps (the Executor protocol: a place to run cells). Real verl
on CPU runs the same path in test_early_stop_e2e.py.
"""

from __future__ import annotations

import json
import zlib

import numpy as np
import pytest

from verl_isocompute.runlog import write_run_log
from verl_isocompute.scaling.saturating import SaturatingCurve
from verl_isocompute.workflow.sweep.executors import CellHandle, Outcome
from verl_isocompute.workflow.sweep.grid import PlanError, describe
from verl_isocompute.workflow.sweep.plan import parse_plan
from verl_isocompute.workflow.sweep.runner import Sweep
from verl_isocompute.workflow.sweep.state import FINISHED, STOPPED

BUDGET = 4096
# n = 2 rises early to a low ceiling; n = 8 to a high one: n = 2 cannot win at the budget.
CURVES = {2: SaturatingCurve(0.2, 0.35, 300.0, 1.5), 8: SaturatingCurve(0.2, 0.85, 600.0, 1.5)}


def _plan(tmp_path, **extra):
    raw = {"recipe": "cpu_demo", "budget_rollouts": BUDGET, "b_problem": [8], "n": [2, 8], "seeds": [0, 1, 2],
           "sweep_dir": str(tmp_path / "sweep"), "early_stop": {"checks": [0.2, 0.4, 0.6], "level": 0.9}, **extra}
    return parse_plan(raw, tmp_path)


class ReplayExecutor:
    """Each poll appends 1/40 of a cell's steps of its known curve (binomial noise) to its run log."""

    name = "replay"
    max_concurrent = 6

    def __init__(self):
        self.started, self.stopped, self.logged = [], [], {}

    def connect(self):
        pass

    def start(self, plan, cell, run_dir, overrides):
        self.started.append(cell.id)
        # a seed of the cell's name that is the same in every process (str hashes are salted per process: with
        # hash(), about 1 process in 60 drew noise under which the lagging test's check did not find n = 2 beaten)
        self.logged[run_dir] = (cell, 0, np.random.default_rng(zlib.crc32(cell.id.encode())))
        return CellHandle(run_dir)

    def poll(self, handle):
        cell, done, rng = self.logged[handle.run_dir]
        upto = min(cell.steps, done + max(1, cell.steps // 40))
        per_step = cell.batch_rollouts
        rows = []
        for step in range(1, upto + 1):
            p = float(CURVES[cell.n](max(1.0, (step - 1) * per_step)))
            rows.append({"step": step, "n": cell.n, "b_problem": cell.b_problem, "rollouts": step * per_step,
                         "tokens": step * per_step * 10.0, "epoch": 0.0, "train/reward": rng.binomial(per_step, p) / per_step})
        write_run_log(handle.run_dir, {"n": cell.n, "b_problem": cell.b_problem}, rows)
        self.logged[handle.run_dir] = (cell, upto, rng)
        return Outcome(ok=True, returncode=0) if upto >= cell.steps else None

    def stop(self, handle):
        self.stopped.append(handle.run_dir.name)

    def finish(self, handle):
        pass

    def reattach(self, record, run_dir):
        return None


def test_plan_reads_early_stop_and_the_dry_run_says_where_it_checks(tmp_path):
    plan = _plan(tmp_path)
    assert plan.early_stop == {"checks": [0.2, 0.4, 0.6], "level": 0.9, "metric": "train/reward"}
    text = describe(plan)
    assert "early stop: checks at 20% (4915 rollouts), 40% (9830 rollouts), 60% (14746 rollouts)" in text
    assert "(96.7% intervals at each check: 90% over 3 checks, Bonferroni)" in text
    assert "early stop" not in describe(_plan(tmp_path, early_stop=None))
    default = _plan(tmp_path, early_stop={"level": 0.9})
    assert default.early_stop["checks"] == [0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6]
    assert "(97.5% intervals at each check: 90% over the calibrated schedule's checks, measured)" in describe(default)


@pytest.mark.parametrize("block, says", [
    ({"checks": [0.6, 0.2]}, "increasing fractions"),
    ({"checks": [0.2], "level": 1.5}, "early_stop.level"),
    ({"when": 3}, "early_stop must be a mapping"),
    ({"checks": [0.1, 0.2, 0.3, 0.4, 0.5, 0.6], "level": 0.9}, "asks 0.983 of each check"),
])
def test_bad_early_stop_blocks_are_one_clear_error(tmp_path, block, says):
    with pytest.raises(PlanError, match=says):
        _plan(tmp_path, early_stop=block)


@pytest.fixture()
def swept(tmp_path):
    plan = _plan(tmp_path)
    executor = ReplayExecutor()
    lines = []
    sweep = Sweep(plan, executor, progress=False, poll_s=0.0, echo=lines.append)
    sweep.run()
    return plan, sweep, executor, lines


def test_the_beaten_n_is_stopped_and_the_winner_runs_to_the_end(swept):
    plan, sweep, executor, lines = swept
    status = {cell_id: r["status"] for cell_id, r in sweep.state.cells.items()}
    assert {status[f"b8_n8-s{s}"] for s in range(3)} == {FINISHED}
    assert {status[f"b8_n2-s{s}"] for s in range(3)} == {STOPPED}
    assert sorted(executor.stopped) == ["b8_n2-s0", "b8_n2-s1", "b8_n2-s2"]
    record = sweep.state.cells["b8_n2-s0"]
    assert record["reason"].startswith("early stop at ") and 0 < record["last_step"] < record["steps"]
    early = sweep.state.data["early_stop"]
    assert early["checks_done"][0] == 0.2
    assert any(d["stopped"] and d["stopped"][0]["n"] == 2 for d in early["decisions"])
    assert any("early stop: check at" in line for line in lines)


def test_a_rerun_keeps_the_stopped_runs_stopped_and_the_fit_reads_their_logged_steps(swept):
    plan, sweep, _, _ = swept
    again = ReplayExecutor()
    lines = []
    Sweep(plan, again, progress=False, poll_s=0.0, echo=lines.append).run()
    assert again.started == []
    state = json.loads((sweep.dir / "sweep_state.json").read_text())
    assert {state["cells"][f"b8_n2-s{s}"]["status"] for s in range(3)} == {STOPPED}
    assert any(line.startswith("[sweep] b8_n2-s0: stopped: early stop at") for line in lines)
    fitted = {p.name for p in sweep.finished_run_dirs()}
    assert {"b8_n2-s0", "b8_n8-s0"} <= fitted  # the stopped run as the truncated run it is


class LaggingExecutor(ReplayExecutor):
    """n = 2's cells log every step on their first poll and then stay running (as verl does while it validates and
    saves the last checkpoint after logging the last step); n = 8's progress as in :class:`ReplayExecutor`."""

    def poll(self, handle):
        cell, done, rng = self.logged[handle.run_dir]
        if cell.n != 2:
            return super().poll(handle)
        if done == 0:
            self.logged[handle.run_dir] = (cell, cell.steps - cell.steps // 40, rng)
            super().poll(handle)  # the last slice: every step logged
        finished = all(d >= c.steps for c, d, _ in self.logged.values() if c.n == 8) and len(self.logged) == 6
        return Outcome(ok=True, returncode=0) if finished else None


def test_a_run_whose_last_step_is_logged_is_let_finish_though_its_n_is_beaten(tmp_path):
    """The check finds n = 2 beaten while its runs have logged their last step and are still finishing: nothing is
    left to save, so they finish (not stopped, never killed), and the decision is on record."""
    plan = _plan(tmp_path)
    executor = LaggingExecutor()
    sweep = Sweep(plan, executor, progress=False, poll_s=0.0, echo=lambda line: None)
    sweep.run()
    decisions = sweep.state.data["early_stop"]["decisions"]
    assert any(s["n"] == 2 for d in decisions for s in d["stopped"]), decisions  # the check did find n = 2 beaten
    assert {sweep.state.cells[f"b8_n2-s{s}"]["status"] for s in range(3)} == {FINISHED}
    assert {sweep.state.cells[f"b8_n8-s{s}"]["status"] for s in range(3)} == {FINISHED}
    assert executor.stopped == []
