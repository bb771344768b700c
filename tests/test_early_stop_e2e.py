"""The sequential pilot for real (issue 44, item 3): verl on CPU with the tiny model stops a beaten arm mid-run,
and the sweep, run again, keeps it recorded as stopped.

Two cells, b_problem 4, n 2 and 4, 192 rollouts each (24 and 12 steps), run one after the other (the local
executor runs one at a time), so n = 2 has finished when n = 4 starts. The n = 2 cell is given as finished: the
sweep directory starts with its run log (``tests/fixtures/early_stop/b4_n2.jsonl``, written by a real run of this
cell, its model path shortened) and its record, as a sweep resumed after that cell would find them; n = 4 then
runs for real. Checks every 5 % of the sweep's rollouts from 50 % on forecast each arm at the budget from its
logged steps (the first checks may find too few steps of n = 4 to forecast it: it is then kept). The metric is
the logged ``epoch`` (step x b_problem / training problems = C / (n x problems)), which rises with compute at a
rate set by n and not by what the model learns, so the committed log is what a run of the n = 2 cell logs and
the outcome is known in advance: n = 4 ends at half of n = 2's, and a check stops it. Whether the forecast is
right on real rewards is the backtest's question (benchmarks/bench_forecast.py); this test is about the sweep: a
real cell stopped, recorded, kept on a rerun.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from verl_runs import PARITY_REWARD

pytestmark = pytest.mark.e2e
CHECKS = [0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9]
N2_LOG = Path(__file__).parent / "fixtures" / "early_stop" / "b4_n2.jsonl"


def _n2_finished(plan_path: Path) -> None:
    """The sweep directory as the sweep leaves it after the n = 2 cell: its run log and its record."""
    from verl_isocompute.workflow.sweep.plan import load_plan
    from verl_isocompute.workflow.sweep.preflight import dataset_size
    from verl_isocompute.workflow.sweep.state import FINISHED, SweepState, cell_spec

    plan = load_plan(plan_path)
    cell = next(c for c in plan.cells() if c.n == 2)
    (Path(plan.sweep_dir) / "cells" / cell.id).mkdir(parents=True)
    shutil.copy2(N2_LOG, Path(plan.sweep_dir) / "cells" / cell.id / "isocompute.jsonl")
    state = SweepState(Path(plan.sweep_dir))
    state.cells[cell.id] = {"status": FINISHED, "attempts": 1, "b_problem": cell.b_problem, "n": cell.n,
                            "steps": cell.steps, "rollouts": cell.rollouts_used, "run_dir": f"cells/{cell.id}",
                            "spec": cell_spec(plan, cell, dataset_size(plan)), "last_step": cell.steps}
    state.save()


def _sweep(plan, timeout=600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "verl_isocompute.commands.cli", "sweep", "--plan", str(plan)],
                          capture_output=True, text=True, timeout=timeout)


def test_a_beaten_arm_is_stopped_mid_run_and_stays_stopped_on_resume(tmp_path, tiny_model_path):
    plan = tmp_path / "pilot.yaml"
    plan.write_text(yaml.safe_dump({
        "name": "pilot", "recipe": "cpu_demo", "overrides": ["isocompute.model=tiny", PARITY_REWARD],
        "budget_rollouts": 192, "b_problem": [4], "n": [2, 4], "test_freq": 1000, "fit": {"bootstrap": 0},
        "early_stop": {"checks": CHECKS, "level": 0.8, "metric": "epoch"},  # 97.8 % at each of the 9 checks
    }))
    _n2_finished(plan)
    first = _sweep(plan)
    assert first.returncode == 0, first.stderr[-4000:]
    assert "1 cell already finished: b4_n2" in first.stderr and "b4_n2: started" not in first.stderr
    state = json.loads((tmp_path / "runs" / "pilot" / "sweep_state.json").read_text())
    n4, n2 = state["cells"]["b4_n4"], state["cells"]["b4_n2"]
    assert n2["status"] == "done"
    assert n4["status"] == "stopped", first.stderr[-4000:]
    # decided mid-run; the step being trained while it was stopped may still have been logged (a loaded machine)
    assert 0 < n4["decided_at_step"] < 12 and n4["decided_at_step"] <= n4["last_step"] <= 12
    assert n4["reason"].startswith("early stop at ") and ": n = 4:" in n4["reason"]
    assert "of the sweep's rollouts: n = 4: 98% interval" in first.stderr
    assert state["early_stop"]["checks_done"] == CHECKS[: len(state["early_stop"]["checks_done"])]

    again = _sweep(plan)
    assert again.returncode == 0, again.stderr[-4000:]
    assert "b4_n4: stopped: early stop at " in again.stderr and "started" not in again.stderr
    resumed = json.loads((tmp_path / "runs" / "pilot" / "sweep_state.json").read_text())
    assert resumed["cells"]["b4_n4"] == n4 and resumed["cells"]["b4_n2"]["attempts"] == 1
