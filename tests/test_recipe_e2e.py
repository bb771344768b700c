"""End to end: the IsoCompute recipes in real CPU verl runs (tiny model, a reward that varies).

Four runs: the Easy recipe (KL and entropy on) with the regulariser-only zero-variance filter, then resumed
from its step-2 checkpoint; the Hard recipe in ``groups`` mode with seq-mean aggregation; the decoupled
baseline, also with seq-mean aggregation. The tiny random model never solves a problem, so the runs score
with tests/fixtures/parity_reward.py (1 for a response of odd length): groups then vary or not by chance.
What the actor workers trained on is read from our loss's reports (``actor/isocompute/*``: counts and
checksums of row ids, exact totals) and compared with the groups of verl's rollout dump.
"""

from __future__ import annotations

import json
import math
import shutil
from collections import defaultdict

import pytest
from verl_runs import PARITY_REWARD, Run, run_recipe

from verl_isocompute.training.masks import row_ids
from verl_isocompute.training.trainer import CHECKED_PROBES

pytestmark = pytest.mark.e2e
B_PROBLEM, N = 8, 4  # the CPU overlay's batch: 8 problems x 4 rollouts
BASE_LR, WARMUP = 1e-3, 2
RULE = BASE_LR * math.sqrt(B_PROBLEM * N / 1024)
EASY = ("+platform=cpu", PARITY_REWARD, "isocompute.zero_variance.mode=regularizers", "trainer.total_training_steps=4",
        f"isocompute.lr.base_lr={BASE_LR}", f"isocompute.lr.warmup_steps={WARMUP}")


def probe(data: dict, name: str) -> float:
    return data["actor/isocompute/" + name]


def varying_rows(run: Run, step: int) -> tuple[list[str], int]:
    """Keys of the rollouts in groups whose score varies (verl's dump of the step), and the number of groups."""
    samples = [json.loads(x) for x in (run.run_dir / "rollouts" / f"{step}.jsonl").read_text().splitlines()]
    assert len(samples) == B_PROBLEM * N
    groups = defaultdict(list)
    for s in samples:
        groups[s["uid"].rsplit("_", 2)[0]].append(s)  # key: {prompt uid}_{session}_{output}
    return [s["uid"] for g in groups.values() if len({s["score"] for s in g}) > 1 for s in g], len(groups)


def checksum(keys: list[str]) -> tuple[float, float]:
    ids = row_ids(keys) + 1
    return float(ids.sum()), float((ids**2).sum())


@pytest.fixture(scope="module")
def easy_run(tmp_path_factory, isocompute_cache, tiny_model_path) -> Run:
    run_dir = tmp_path_factory.mktemp("easy") / "run"
    return run_recipe("isocompute_easy", run_dir, *EASY, "trainer.save_freq=2", f"trainer.rollout_data_dir={run_dir}/rollouts")


def test_logged_lr_is_the_rate_each_update_used(easy_run):
    rows = {r["step"]: r["data"] for r in easy_run.train_rows}
    assert sorted(rows) == [1, 2, 3, 4]
    for k, data in rows.items():  # update k runs at RULE * min(1, k / W): update 1 is not at 0
        assert data["actor/lr"] == pytest.approx(RULE * min(1, k / WARMUP), rel=1e-9)
        assert data["actor/lr_next"] == pytest.approx(RULE * min(1, (k + 1) / WARMUP), rel=1e-9)  # verl's reading
    assert [r["lr"] for r in easy_run.run_log[2:]] == [rows[k]["actor/lr"] for k in sorted(rows)]
    header = easy_run.run_log[0]["header"]
    assert header["lr"] == pytest.approx(RULE) and header["lr_batch_rollouts"] == B_PROBLEM * N
    assert header["lr_warmup_steps"] == WARMUP


def test_kl_and_entropy_are_active_on_easy(easy_run):
    rows = easy_run.train_rows
    assert all(r["data"]["actor/entropy_loss"] > 0 for r in rows)
    assert all("actor/kl_loss" in r["data"] for r in rows)
    assert any(r["data"]["actor/kl_loss"] > 0 for r in rows if r["step"] > 1)  # the policy left the reference


def test_regularisers_acted_on_exactly_the_varying_groups(easy_run):
    mixed_steps = 0
    for row in easy_run.train_rows:
        data, (varying, groups) = row["data"], varying_rows(easy_run, row["step"])
        # what the workers' loss masked in, against the groups of verl's own rollout dump ...
        assert probe(data, "reg_seqs") == len(varying)
        assert (probe(data, "reg_rowsum"), probe(data, "reg_rowsqsum")) == checksum(varying)
        assert probe(data, "loss_seqs") == B_PROBLEM * N  # the policy gradient still sees every rollout
        # ... and against the trainer's own masks
        assert all(probe(data, name) == data[f"isocompute/{name}"] for name in CHECKED_PROBES)
        assert probe(data, "token_normaliser") == probe(data, "loss_tokens")  # all trained tokens
        assert data["isocompute/reg_active_frac"] == pytest.approx(len(varying) / (B_PROBLEM * N))
        assert data["isocompute/zero_var_group_frac"] == pytest.approx(1 - len(varying) / N / groups)
        assert data["isocompute/trained_per_group_min"] == N  # regularizers mode drops nothing
        # verl's losses are sums over the masked tokens / all tokens = kept-token mean x kept share
        share = data["isocompute/reg_token_share"]
        assert share == pytest.approx(probe(data, "reg_tokens") / probe(data, "loss_tokens"))
        assert data["actor/entropy_loss"] == pytest.approx(data["isocompute/reg_entropy_mean"] * share, rel=1e-4, abs=1e-9)
        assert data["actor/kl_loss"] == pytest.approx(data["isocompute/reg_kl_mean"] * share, rel=1e-4, abs=1e-12)
        assert data["isocompute/reg_seq_share"] == pytest.approx(len(varying) / (B_PROBLEM * N))
        mixed_steps += 0 < len(varying) < B_PROBLEM * N
    assert mixed_steps > 0  # some step had both kinds of groups, so the mask was not all ones or all zeros


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
        assert r["val/worst@4"] <= r["val/avg@4"] <= r["val/best@4"] and r["val/failed_samples"] == 0
    for r in rows[1:]:  # failed-sample bookkeeping and the regulariser metrics, per step
        assert r["isocompute/padding_rows"] == r["isocompute/singleton_rows"] == r["isocompute/evicted_groups"] == 0
        assert {"isocompute/reg_entropy_mean", "isocompute/reg_kl_mean", "isocompute/reg_token_share"} <= set(r)
    assert "train/pass_rate_hist" in rows[-1] and rows[-1]["train/pass_rate_hist"]["n_problems"] == 4 * B_PROBLEM


def test_resumed_run_continues_compute(easy_run):
    ckpt = easy_run.run_dir / "checkpoints"
    before = {r["step"]: r for r in easy_run.run_log[1:]}
    shutil.rmtree(ckpt / "global_step_4")
    (ckpt / "latest_checkpointed_iteration.txt").write_text("2")
    resumed = run_recipe("isocompute_easy", easy_run.run_dir, *EASY, "trainer.save_freq=-1")
    header, *rows = resumed.run_log
    assert [r["step"] for r in rows] == [0, 1, 2, 3, 4]  # steps 3-4 replaced, nothing duplicated
    assert [r["rollouts"] for r in rows] == [s * B_PROBLEM * N for s in range(5)]
    assert rows[2] == before[2]  # kept as it was
    assert rows[3]["tokens"] > before[2]["tokens"]  # counted on from the checkpoint, not from zero
    assert rows[3]["lr"] == pytest.approx(RULE)  # the restored schedule continues at update 3


@pytest.fixture(scope="module")
def groups_run(tmp_path_factory, isocompute_cache, tiny_model_path) -> Run:
    run_dir = tmp_path_factory.mktemp("groups") / "run"
    return run_recipe(
        "isocompute_hard", run_dir, "+platform=cpu", PARITY_REWARD, "isocompute.zero_variance.mode=groups",
        "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean",
        "isocompute.cpu.dtype=bfloat16",  # the one bf16 run (the others run the overlay's fp32)
        "trainer.total_training_steps=2", "trainer.val_before_train=false", f"trainer.rollout_data_dir={run_dir}/rollouts",
    )


def test_groups_mode_trains_exactly_the_varying_groups(groups_run):
    for row in groups_run.train_rows:
        data, (varying, groups) = row["data"], varying_rows(groups_run, row["step"])
        assert probe(data, "loss_seqs") == len(varying)  # every other rollout left every loss term
        assert probe(data, "loss_rowsum") == checksum(varying)[0]
        assert all(probe(data, name) == data[f"isocompute/{name}"] for name in CHECKED_PROBES)
        # seq-mean aggregation divides by the kept sequences, not verl's B_problem * n
        assert probe(data, "seq_normaliser") == max(1, len(varying))
        assert data["isocompute/trained_per_group_max"] == (N if varying else 0)
        assert data["isocompute/trained_per_group_min"] == (N if len(varying) == B_PROBLEM * N else 0)
        assert data["isocompute/zero_var_group_frac"] == pytest.approx(1 - len(varying) / N / groups)
        assert math.isfinite(data["actor/pg_loss"]) and data["isocompute/reg_seq_share"] == (1.0 if varying else 0.0)


@pytest.fixture(scope="module")
def decoupled_run(tmp_path_factory, isocompute_cache, tiny_model_path) -> Run:
    return run_recipe(
        "isocompute_hard", tmp_path_factory.mktemp("decoupled") / "run", "+platform=cpu", PARITY_REWARD,
        "algorithm.adv_estimator=isocompute_grpo_decoupled", "isocompute.decoupled.n_train=2",
        "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-sum",
        "trainer.total_training_steps=2", "trainer.val_before_train=false",
    )


def test_decoupled_trains_on_n_train_and_charges_n_est(decoupled_run):
    for row in decoupled_run.train_rows:
        # what the actor workers read from the TransferQueue: exactly n_train sequences per group carry loss
        assert row["data"]["isocompute/trained_per_group_min"] == 2
        assert row["data"]["isocompute/trained_per_group_max"] == 2
        assert probe(row["data"], "loss_seqs") == probe(row["data"], "seq_normaliser") == B_PROBLEM * 2
    header, *rows = decoupled_run.run_log
    assert header["header"]["n_train"] == 2 and header["header"]["adv_estimator"] == "isocompute_grpo_decoupled"
    # the LR rule counts the rollouts trained on (B_problem x n_train); compute C counts all n_est
    assert header["header"]["lr_batch_rollouts"] == B_PROBLEM * 2
    assert header["header"]["lr"] == pytest.approx(1e-6 * math.sqrt(B_PROBLEM * 2 / 1024))
    assert [r["rollouts"] for r in rows] == [B_PROBLEM * N, 2 * B_PROBLEM * N]


def _token_weight_range(run: Run) -> list[tuple[float, float]]:
    """Per step, the smallest and largest per-token pi_trainer / pi_rollout (verl's rollout-correction
    metrics, from the old-log-prob pass these runs recompute)."""
    return [(r["data"]["rollout_corr/rollout_is_min"], r["data"]["rollout_corr/rollout_is_max"]) for r in run.train_rows]


def test_a_float32_run_computes_the_rollouts_log_probs_exactly(decoupled_run):
    """The overlay's fp32 governs the trainer's compute too (FSDP mixed precision): per-token weights within
    1e-4 of 1 (measured 1e-6). With verl's default mixed precision the trainer would compute in bf16 and the
    weights would spread as in the bf16 run below."""
    for lo, hi in _token_weight_range(decoupled_run):
        assert 1 - 1e-4 < lo <= hi < 1 + 1e-4, (lo, hi)
    assert "[isocompute] dtype: float32 for the trainer's" in decoupled_run.stdout


def test_a_bfloat16_run_computes_in_bfloat16(groups_run):
    """``isocompute.cpu.dtype=bfloat16``: the trainer and the rollout both compute in bf16, in different
    kernels (full-sequence forward vs batched decode), so their log-probs differ by bf16 rounding: per-token
    weights ~0.97-1.03 on the tiny model (SmolLM2: gaps up to ~0.2, README), never the fp32 run's 1e-6."""
    for lo, hi in _token_weight_range(groups_run):
        assert hi - lo > 1e-3, (lo, hi)  # rounding visible: it did not silently run in fp32
        assert 0.8 < lo <= hi < 1.25, (lo, hi)
    assert "[isocompute] dtype: bfloat16 for the trainer's" in groups_run.stdout
