"""End to end (issue 21): the n schedule in real verl runs on CPU, tiny model.

Through ``python -m verl_isocompute.main``: the schedule on a hand-made curve (log2 n*(c) = 1 + 2 sigma(3.5
(log10 c - 1.63)), grid 2, 4, 8), B_problem 8, budget 100 rollouts; then the same run resumed with the budget
raised to 200 (an anytime run extended). n, lr, C and the end of each run are predicted by hand.

Per-prompt n through verl's own ``python -m verl.trainer.main_ppo`` (each step's n_i are those the allocation
gives for its prompts) is checked on the stock pieces run of tests/test_stock_e2e.py, the same command at the same
sizes: one verl start-up for both.
"""

from __future__ import annotations

import json
import math

import pytest
from verl_runs import PARITY_REWARD, run_recipe

pytestmark = pytest.mark.e2e
B_PROBLEM, WARMUP = 8, 2
CURVE = {"L": 2.0, "k": 3.5, "log10_C0": 1.63, "b": 1.0, "compute_unit": "rollouts", "metric": "val/avg@4",
         "c_range": [10, 1000], "n_grid": [2, 4, 8], "provenance": {"source": "tests/test_adaptive_e2e.py"}}


def crossing(log2_n: float) -> float:
    """The c at which log2 n*(c) of CURVE reaches ``log2_n``, the sigmoid solved by hand."""
    return 10 ** (1.63 - math.log(2 / (log2_n - 1) - 1) / 3.5)


def scheduled_n(c: float) -> int:
    """n for c rollouts spent, c only growing: 2 until log2 n* passes the 2|4 midpoint (1.5) by the margin 0.1
    (c = 24.4), 4 until it passes 2.5 + 0.1 (c = 106.2), then 8."""
    return 2 if c <= crossing(1.6) else 4 if c <= crossing(2.6) else 8


@pytest.fixture(scope="module")
def scheduled(tmp_path_factory, isocompute_cache, tiny_model_path):
    root = tmp_path_factory.mktemp("schedule")
    curve = root / "curve.json"
    curve.write_text(json.dumps(CURVE))
    run_dir = root / "run"
    args = ["isocompute_hard", run_dir, "+platform=cpu", PARITY_REWARD, "isocompute.schedule.enable=true",
            f"isocompute.schedule.curve={curve}", f"isocompute.lr.warmup_steps={WARMUP}", "trainer.val_before_train=false",
            "trainer.save_freq=100",  # a checkpoint only at verl's last step: the one the schedule marks
            "trainer.test_freq=-1"]  # no validation: nothing here reads it (the curve is given, not fitted)
    first = run_recipe(*args, "isocompute.schedule.budget_rollouts=100")
    first_log = (run_dir / "isocompute.jsonl").read_text()
    resumed = run_recipe(*args, "isocompute.schedule.budget_rollouts=200")
    return first, first_log, resumed


def test_n_follows_the_curve_and_each_run_ends_at_its_budget(scheduled):
    first, first_log, resumed = scheduled
    rows = [json.loads(line) for line in first_log.splitlines()][1:]
    # budget 100: steps at c = 0, 16 (n 2), 32, 64 (n 4); after step 4 (96 spent) a step of 32 no longer fits
    assert [(r["step"], r["n"], r["rollouts"]) for r in rows] == [(1, 2, 16), (2, 2, 32), (3, 4, 64), (4, 4, 96)]
    rows = resumed.run_log[1:]
    # resumed at step 4 with budget 200: step 5 at c = 96 (n 4), step 6 at c = 128 > 106.2 (n 8); 192 + 64 > 200
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5, 6] and rows[-1]["rollouts"] == 192
    c = 0
    for row in rows:  # C exact: every step adds B_problem x n_t, and n_t is n*(c_t) on the grid
        assert row["n"] == scheduled_n(c) and row["rollouts"] == c + B_PROBLEM * row["n"]
        c = row["rollouts"]
    assert "[isocompute] schedule: step 3 runs at n = 4" in first.stdout
    assert "[isocompute] schedule: step 6 runs at n = 8" in resumed.stdout
    # a resumed run keeps the header its first attempt wrote (runlog.RunLog.write_header): the extended budget
    # is in the checkpoint's schedule state (the test below) and in the rows, not in the header
    header = resumed.run_log[0]["header"]
    assert header["schedule"]["budget_rollouts"] == 100 and header["schedule"]["n_grid"] == [2, 4, 8]


def test_lr_follows_the_rule_at_each_steps_batch_with_the_warm_up_in_updates(scheduled):
    _, _, resumed = scheduled
    verl = {r["step"]: r["data"] for r in resumed.train_rows}
    for row in resumed.run_log[1:]:
        k, peak = row["step"], 1e-6 * math.sqrt(B_PROBLEM * row["n"] / 1024)
        assert row["lr"] == pytest.approx(peak * min(1, k / WARMUP), rel=1e-9) and row["peak_lr"] == pytest.approx(peak)
        if k in verl:  # the actor workers' own scheduler: the next update's rate, at this step's peak
            assert verl[k]["actor/lr_next"] == pytest.approx(peak * min(1, (k + 1) / WARMUP), rel=1e-9)
            assert verl[k]["isocompute/rollouts"] == row["rollouts"]


def test_the_schedule_state_is_in_the_checkpoint_of_each_runs_last_step(scheduled):
    _, _, resumed = scheduled
    checkpoints = resumed.run_dir / "checkpoints"
    assert sorted(p.name for p in checkpoints.glob("global_step_*")) == ["global_step_4", "global_step_6"]
    state = json.loads((checkpoints / "global_step_6" / "isocompute_adaptive.json").read_text())["schedule"]
    assert [(c["step"], c["old_n"], c["new_n"]) for c in state["changes"]] == [(1, None, 2), (3, 2, 4), (6, 4, 8)]
    assert state["budget_rollouts"] == 200 and state["n"] == 8
