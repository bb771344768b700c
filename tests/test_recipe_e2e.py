"""End to end: the IsoCompute recipes in real CPU verl runs (tiny model, a reward that varies).

Four runs: the easy recipe (then resumed from its step-2 checkpoint), the hard recipe with the
regulariser-only zero-variance filter, and the decoupled baseline.
"""

from __future__ import annotations

import math
import shutil
from collections import defaultdict

import pytest
from verl_runs import PARITY_REWARD, Run, run_recipe

pytestmark = pytest.mark.e2e
B_PROBLEM, N = 8, 4  # the CPU overlay's batch: 8 problems x 4 rollouts
BASE_LR, WARMUP = 1e-3, 2


@pytest.fixture(scope="module")
def easy_run(tmp_path_factory, isocompute_cache, tiny_model_path) -> Run:
    return run_recipe(
        "isocompute_easy", tmp_path_factory.mktemp("easy") / "run", "+platform=cpu", PARITY_REWARD,
        "trainer.total_training_steps=4", "trainer.save_freq=2",
        f"isocompute.lr.base_lr={BASE_LR}", f"isocompute.lr.warmup_steps={WARMUP}",
    )


def test_logged_lr_follows_the_sqrt_rule_after_warmup(easy_run):
    rule = BASE_LR * math.sqrt(B_PROBLEM * N / 1024)
    lrs = {r["step"]: r["data"]["actor/lr"] for r in easy_run.train_rows}
    assert all(lrs[s] == pytest.approx(rule, rel=1e-9) for s in lrs if s >= WARMUP)
    assert all(0 < lrs[s] < rule for s in lrs if s < WARMUP)
    assert [r["lr"] for r in easy_run.run_log[2:]] == [lrs[s] for s in sorted(lrs)]
    assert easy_run.run_log[0]["header"]["lr"] == pytest.approx(rule)


def test_kl_and_entropy_are_active_on_easy(easy_run):
    rows = easy_run.train_rows
    assert all(r["data"]["actor/entropy_loss"] > 0 for r in rows)
    assert all("actor/kl_loss" in r["data"] for r in rows)
    assert any(r["data"]["actor/kl_loss"] > 0 for r in rows if r["step"] > 1)  # the policy left the reference


def test_truncated_importance_sampling_metrics_present(easy_run):
    for r in easy_run.train_rows:
        assert "rollout_corr/rollout_is_mean" in r["data"] and r["data"]["rollout_corr/rollout_is_max"] <= 2.0 + 1e-6


def test_run_log_rows_are_consistent(easy_run):
    header, *rows = easy_run.run_log
    assert header["header"]["n"] == N and header["header"]["b_problem"] == B_PROBLEM
    assert [r["step"] for r in rows] == [0, 1, 2, 3, 4]
    assert [r["rollouts"] for r in rows] == [s * B_PROBLEM * N for s in range(5)]  # C grows by B_problem * n
    assert all(b["tokens"] > a["tokens"] for a, b in zip(rows, rows[1:]))
    dataset_size = header["header"]["dataset_size"]
    assert all(r["epoch"] == pytest.approx(r["step"] * B_PROBLEM / dataset_size) for r in rows)
    for r in (rows[0], rows[-1]):  # validation before training and after the last step
        assert {"val/avg@4", "val/best@4", "val/worst@4", "val/avg@4/isocompute/arithmetic"} <= set(r)
        assert r["val/worst@4"] <= r["val/avg@4"] <= r["val/best@4"]
    assert "train/pass_rate_hist" in rows[-1] and rows[-1]["train/pass_rate_hist"]["n_problems"] == 4 * B_PROBLEM


def test_resumed_run_continues_compute(easy_run):
    ckpt = easy_run.run_dir / "checkpoints"
    before = {r["step"]: r for r in easy_run.run_log[1:]}
    shutil.rmtree(ckpt / "global_step_4")
    (ckpt / "latest_checkpointed_iteration.txt").write_text("2")
    resumed = run_recipe(
        "isocompute_easy", easy_run.run_dir, "+platform=cpu", PARITY_REWARD,
        "trainer.total_training_steps=4", "trainer.save_freq=-1",
        f"isocompute.lr.base_lr={BASE_LR}", f"isocompute.lr.warmup_steps={WARMUP}",
    )
    header, *rows = resumed.run_log
    assert [r["step"] for r in rows] == [0, 1, 2, 3, 4]  # steps 3-4 replaced, nothing duplicated
    assert [r["rollouts"] for r in rows] == [s * B_PROBLEM * N for s in range(5)]
    assert rows[2] == before[2]  # kept as it was
    assert rows[3]["tokens"] > before[2]["tokens"]  # counted on from the checkpoint, not from zero


@pytest.fixture(scope="module")
def regularizer_run(tmp_path_factory, isocompute_cache, tiny_model_path) -> Run:
    run_dir = tmp_path_factory.mktemp("hard") / "run"
    return run_recipe(
        "isocompute_hard", run_dir, "+platform=cpu", PARITY_REWARD, "isocompute.zero_variance.mode=regularizers",
        "trainer.total_training_steps=2", "trainer.val_before_train=false", f"trainer.rollout_data_dir={run_dir}/rollouts",
    )


def test_reg_active_frac_is_the_share_of_varying_groups(regularizer_run):
    import json

    for row in regularizer_run.train_rows:
        samples = [json.loads(x) for x in (regularizer_run.run_dir / "rollouts" / f"{row['step']}.jsonl").read_text().splitlines()]
        groups = defaultdict(list)
        for s in samples:
            groups[s["uid"].rsplit("_", 2)[0]].append(s["score"])  # key: {prompt uid}_{sample}_{output}
        varying = sum(len(g) for g in groups.values() if len(set(g)) > 1)
        assert row["data"]["isocompute/reg_active_frac"] == pytest.approx(varying / len(samples))
        zero_var_groups = sum(1 for g in groups.values() if len(set(g)) == 1)
        assert row["data"]["isocompute/zero_var_group_frac"] == pytest.approx(zero_var_groups / len(groups))
        assert row["data"]["isocompute/trained_per_group_min"] == N  # regularizers mode drops nothing


@pytest.fixture(scope="module")
def decoupled_run(tmp_path_factory, isocompute_cache, tiny_model_path) -> Run:
    return run_recipe(
        "isocompute_hard", tmp_path_factory.mktemp("decoupled") / "run", "+platform=cpu", PARITY_REWARD,
        "algorithm.adv_estimator=isocompute_grpo_decoupled", "isocompute.decoupled.n_train=2",
        "trainer.total_training_steps=2", "trainer.val_before_train=false",
    )


def test_decoupled_trains_on_n_train_and_charges_n_est(decoupled_run):
    for row in decoupled_run.train_rows:
        # what the actor workers read from the TransferQueue: exactly n_train sequences per group carry loss
        assert row["data"]["isocompute/trained_per_group_min"] == 2
        assert row["data"]["isocompute/trained_per_group_max"] == 2
    header, *rows = decoupled_run.run_log
    assert header["header"]["n_train"] == 2 and header["header"]["adv_estimator"] == "isocompute_grpo_decoupled"
    assert [r["rollouts"] for r in rows] == [B_PROBLEM * N, 2 * B_PROBLEM * N]  # all n_est rollouts are charged
