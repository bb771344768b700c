"""End to end: the CPU demo with the allocation hook on (a real verl run with the tiny model)."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

from verl_isocompute.commands import cli

pytestmark = pytest.mark.e2e


ALLOCATION = ["isocompute.allocation.curve=paper:qwen2.5-7b-easy", "isocompute.allocation.budget_rollouts=100",
              "isocompute.allocation.b_problem=4"]


def test_demo_runs_the_allocated_plan(tmp_path, capsys, isocompute_cache, tiny_model_path):
    run_dir = tmp_path / "demo"
    cmd = [
        sys.executable, "-m", "verl_isocompute.commands.cli", "demo", "--model", "tiny", "--run-dir", str(run_dir),
        "isocompute.allocation.enable=true", *ALLOCATION,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    log = (run_dir / "verl.log").read_text()
    # n*(100 rollouts) on the Easy curve is 2^2.73 ~ 6.6 -> n = 8; 4 problems x 8 = 32 per step; 100 // 32 = 3 steps
    decision = next(line for line in log.splitlines() if line.startswith("[isocompute] allocation:"))
    assert "n=8" in decision.replace(" ", "") or "n = 8" in decision, decision
    header = json.loads((run_dir / "isocompute.jsonl").read_text().splitlines()[0])["header"]
    assert (header["n"], header["b_problem"], header["total_training_steps"]) == (8, 4, 3)
    assert header["lr"] == pytest.approx(1e-5 * math.sqrt(32 / 1024))  # cpu_demo's base_lr, the same sqrt rule
    # `isocompute allocate` over the same recipe and overrides prints the plan and the lr this run used
    assert cli.main(["allocate", "--recipe", "cpu_demo", *ALLOCATION, "--format", "json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert (printed["n"], printed["b_problem"], printed["steps"]) == (8, 4, 3)
    assert (printed["lr"], printed["warmup_steps"]) == (header["lr"], header["lr_warmup_steps"])
    rows = [json.loads(line) for line in (run_dir / "isocompute.jsonl").read_text().splitlines()[1:]]
    assert [r["rollouts"] for r in rows if r["step"] > 0] == [32, 64, 96]  # never more than the budget
    summary = json.loads((run_dir / "demo_summary.json").read_text())
    assert summary["steps"] == 3 and summary["rollouts"] == 96
    assert "rollouts: 96" in proc.stdout
    assert decision in proc.stdout  # the decision is shown to the user, not only written to the log
    # the dtype choice with its reason, and progress inside the steps (phase and elapsed time, then the time left)
    assert "[isocompute] dtype: " in proc.stdout and "isocompute.cpu.dtype=" in proc.stdout
    for status in ("validation before training ... ", "step 1/3: ", "step 3/3: ", "left="):
        assert status in proc.stderr, status  # tqdm's line, on stderr
