"""End to end (issue 21): the n schedule and per-prompt n in real verl runs on CPU, tiny model.

1. Through ``python -m verl_isocompute.main``: the schedule on a hand-made curve (log2 n*(c) = 1 + 2 sigma(3.5
   (log10 c - 1.63)), grid 2, 4, 8), B_problem 8, budget 100 rollouts; then the same run resumed with the budget
   raised to 200 (an anytime run extended). n, lr, C and the end of each run are predicted by hand.
2. Through verl's own ``python -m verl.trainer.main_ppo`` on its ``ppo_trainer`` with our pieces and per-prompt n,
   on data whose rows carry curation's avg@k: each step's n_i are those the allocation gives for its prompts,
   they sum to B_problem x n, and C counts every rollout.
3. The schedule with injected failed rollouts (issue 35): groups verl evicts in step 1 spend the budget that was
   planned to pay for two more steps; step 1 is then the last, with its checkpoint and validation, and its row
   records by how much C passed the budget; the header has step 1's n and lr, not the config's.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pandas as pd
import pytest
from verl_runs import PARITY_REWARD, fixture_env, run_recipe

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


def schedule_overrides(root) -> list[str]:
    """The CPU recipe with the schedule on CURVE (written into ``root``) and a warm-up of WARMUP updates."""
    curve = root / "curve.json"
    curve.write_text(json.dumps(CURVE))
    return ["+platform=cpu", PARITY_REWARD, "isocompute.schedule.enable=true", f"isocompute.schedule.curve={curve}",
            f"isocompute.lr.warmup_steps={WARMUP}"]


@pytest.fixture(scope="module")
def scheduled(tmp_path_factory, isocompute_cache, tiny_model_path):
    root = tmp_path_factory.mktemp("schedule")
    run_dir = root / "run"
    args = ["isocompute_hard", run_dir, *schedule_overrides(root), "trainer.val_before_train=false",
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


# -- evicted groups spend the budget -------------------------------------------------------------------
BUDGET = 48


@pytest.fixture(scope="module")
def evicted(tmp_path_factory, isocompute_cache, tiny_model_path):
    root = tmp_path_factory.mktemp("schedule_evicted")
    failures = root / "failures.jsonl"
    return run_recipe(
        "isocompute_hard", root / "run", *schedule_overrides(root), f"isocompute.schedule.budget_rollouts={BUDGET}",
        "data.shuffle=false",
        "trainer.save_freq=100", "trainer.test_freq=100",  # neither hits step 1: only verl's last step saves, validates
        "actor_rollout_ref.rollout.agent.default_agent_loop=isocompute_test_failing",
        # problems 0, 1, 2, 4, 5, 6, ... fail: step 1 evicts 3 groups for each of its 8 trained ones
        env=fixture_env("failing_agent_loop", ISOCOMPUTE_FAILURE_LOG=str(failures), ISOCOMPUTE_FAILING_RESIDUES="0,1,2"),
    ), [json.loads(line) for line in failures.read_text().splitlines()]


def test_evicted_groups_spending_the_budget_end_the_run_with_a_checkpoint_validation_and_the_excess_logged(evicted):
    run, failures = evicted
    header, rows = run.run_log[0]["header"], run.run_log[1:]
    # step 1 at c = 0: n*(0) on the grid is 2, the config's n 4; its 16 rollouts left 32, two more steps at n = 2
    assert (header["n"], header["lr_batch_rollouts"], header["schedule"]["budget_rollouts"]) == (2, 16, BUDGET)
    assert header["lr"] == pytest.approx(1e-6 * math.sqrt(B_PROBLEM * 2 / 1024))
    assert [(r["step"], r["n"]) for r in rows] == [(0, 2), (1, 2)]  # the validation before training: step 1's n too
    last = rows[1]
    evicted_groups, evicted_rollouts = last["isocompute/evicted_groups"], last["isocompute/evicted_rollouts"]
    assert {f["step"] for f in failures} == {1} and evicted_groups >= len(failures) > 0
    assert evicted_rollouts == 2 * evicted_groups and last["rollouts"] == B_PROBLEM * 2 + evicted_rollouts
    # verl's last step: the checkpoint (with the schedule's state, so a larger budget can extend the run) and a
    # validation, although neither frequency hits step 1
    state = json.loads((run.run_dir / "checkpoints" / "global_step_1" / "isocompute_adaptive.json").read_text())
    assert (state["schedule"]["step"], state["schedule"]["n"]) == (1, 2)
    assert "val/avg@4" in last and "val/avg@4" in rows[0]
    # C passed the budget by the evicted rollouts of that step, never more, and the row says by how much
    assert last["budget_rollouts"] == BUDGET and last["rollouts_over_budget"] == last["rollouts"] - BUDGET > 0
    assert last["rollouts_over_budget"] <= evicted_rollouts
    assert "groups evicted in step 1 spent the budget of 48 rollouts" in run.stdout


# -- per-prompt n through verl's own main_ppo ---------------------------------------------------------
AVG_AT_16 = (0.5, 0.0625, 0.9375, 0.25)  # curation's avg@16 of row i is AVG_AT_16[i % 4]
N, STEPS = 4, 2


@pytest.fixture(scope="module")
def per_prompt(tmp_path_factory, isocompute_cache, tiny_model_path):
    from verl_isocompute.data.arithmetic import ArithmeticConfig, write_arithmetic_dataset

    root = tmp_path_factory.mktemp("per_prompt")
    train, val = write_arithmetic_dataset(root / "data", ArithmeticConfig(train_size=32, val_size=8))
    frame = pd.read_parquet(train)
    frame["extra_info"] = [{**info, "difficulty_avg_at_k": AVG_AT_16[i % 4], "difficulty_k": 16}
                           for i, info in enumerate(frame["extra_info"])]
    frame.to_parquet(train)
    run_dir = root / "run"
    cmd = [sys.executable, "-m", "verl.trainer.main_ppo", "+platform=cpu",
           "+isocompute=[estimator,lr_rule,run_log,per_prompt_n]", f"actor_rollout_ref.model.path={tiny_model_path}",
           f"data.train_files={train}", f"data.val_files={val}", f"data.train_batch_size={B_PROBLEM}",
           "data.max_prompt_length=96", "data.max_response_length=48", "data.dataloader_num_workers=0",
           "data.shuffle=false", f"actor_rollout_ref.rollout.n={N}", f"actor_rollout_ref.actor.ppo_mini_batch_size={B_PROBLEM}",
           "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8", "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=8",
           "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8", "actor_rollout_ref.rollout.agent.num_workers=1",
           "reward.num_workers=1", "transfer_queue.backend.SimpleStorage.num_data_storage_units=1",
           "trainer.logger=[console,file]", f"trainer.total_training_steps={STEPS}",
           "trainer.val_before_train=false", "trainer.test_freq=-1", PARITY_REWARD, f"isocompute.run_dir={run_dir}"]
    base = {k: v for k, v in os.environ.items() if k != "VERL_FILE_LOGGER_PATH"}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env={**base, "VERL_PLATFORM": "cpu"},
                          cwd=root)
    assert proc.returncode == 0, f"{' '.join(cmd)}\n{proc.stdout[-3000:]}\n{proc.stderr[-4000:]}"
    lines = [json.loads(line) for line in (run_dir / "isocompute.jsonl").read_text().splitlines()]
    return frame, lines[0]["header"], lines[1:]


def test_each_steps_n_i_are_the_allocation_for_its_prompts_and_sum_to_the_budget(per_prompt):
    from verl_isocompute.scaling.adaptive import AdaptiveN
    from verl_isocompute.scaling.per_prompt_n import allocate_rollouts, prior_from_curation

    frame, header, rows = per_prompt
    assert header["per_prompt_n"] == {"n_min": 2, "n_max": None, "curation_weight": 1.0}
    assert [r["step"] for r in rows] == list(range(1, STEPS + 1))
    for row in rows:  # data.shuffle=false: step t trains rows 8(t-1) .. 8t-1, each seen for the first time
        infos = frame["extra_info"].iloc[B_PROBLEM * (row["step"] - 1): B_PROBLEM * row["step"]]
        expected = allocate_rollouts([prior_from_curation(info) for info in infos], B_PROBLEM * N, 2, 4 * N)
        assert row["group_n_hist"] == AdaptiveN.histogram(expected) and len(row["group_n_hist"]) > 1
        assert sum(int(n) * count for n, count in row["group_n_hist"].items()) == B_PROBLEM * N
        assert row["isocompute/group_n_mean"] == N and row["isocompute/trained_per_group_max"] == max(expected)
        assert row["isocompute/expected_nonzero_groups"] >= row["isocompute/expected_nonzero_groups_fixed_n"]
        assert 0 <= row["isocompute/zero_var_rollout_share"] <= 1
    # C counts every rollout sampled: B_problem x n a step, whatever the split
    assert [r["rollouts"] for r in rows] == [B_PROBLEM * N * (s + 1) for s in range(STEPS)]
