"""End to end: the IsoCompute recipes in real CPU verl runs (tiny model, a reward that varies).

Four runs: the Easy recipe (KL and entropy on) with the regulariser-only zero-variance filter, started in a
directory another run wrote to, killed (SIGKILL, a crash) after its step-2 checkpoint and resumed from it;
the Hard recipe in ``groups`` mode with seq-mean aggregation, with an agent loop that fails for some samples
(tests/fixtures/failing_agent_loop.py); the decoupled baseline, also with seq-mean aggregation, started with
checkpoints in its directory that verl is told not to load. The tiny random model never solves a problem, so the runs score
with tests/fixtures/parity_reward.py (1 for a response of odd length): groups then vary or not by chance. The Easy
run scores with tests/fixtures/half_constant_reward.py instead: its even-index problems never vary, so every step
has groups the regularisers must leave out, and its assertions branch on what the rollout dump says varied.
What the actor workers trained on is read from our loss's reports (``actor/isocompute/*``: counts and
checksums of row ids, exact totals) and compared with the groups of verl's rollout dump.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from dataclasses import dataclass

import pytest
from verl_runs import HALF_CONSTANT_REWARD, PARITY_REWARD, Run, fixture_env, run_recipe, run_until_killed

from verl_isocompute.runlog import read_run_log
from verl_isocompute.scaling.run_logs import load_runs

from verl_isocompute.rules.masks import row_ids
from verl_isocompute.training.probes import CHECKED_PROBES

pytestmark = pytest.mark.e2e
B_PROBLEM, N = 8, 4  # the CPU overlay's batch: 8 problems x 4 rollouts
BASE_LR, WARMUP = 1e-3, 2
RULE = BASE_LR * math.sqrt(B_PROBLEM * N / 1024)
EASY = ("+platform=cpu", HALF_CONSTANT_REWARD, "isocompute.zero_variance.mode=regularizers", "trainer.total_training_steps=4",
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


def write_stale_run(run_dir):
    """What an earlier run (n = 99) left in ``run_dir``: a run log, verl's metrics, validation generations."""
    (run_dir / "validation").mkdir(parents=True)
    (run_dir / "isocompute.jsonl").write_text(
        json.dumps({"header": {"n": 99, "b_problem": 1}}) + "\n" + json.dumps({"step": 0, "n": 99, "b_problem": 1,
                                                                               "rollouts": 0, "tokens": 0, "epoch": 0}) + "\n")
    (run_dir / "verl_metrics.jsonl").write_text(json.dumps({"step": 0, "data": {"stale": 1.0}}) + "\n")
    (run_dir / "validation" / "9.jsonl").write_text("{}\n")


def verl_steps(run_dir) -> set[int]:
    """Training steps verl's file logger has written so far."""
    path = run_dir / "verl_metrics.jsonl"
    if not path.is_file():
        return set()
    return {json.loads(line)["step"] for line in path.read_text().splitlines() if line.endswith("}") and "timing_s/step" in line}


@dataclass
class KilledAndResumed(Run):
    killed_output: str = ""
    killed_run_log: list | None = None  # isocompute.jsonl as the kill left it


@pytest.fixture(scope="module")
def easy_run(tmp_path_factory, isocompute_cache, tiny_model_path) -> KilledAndResumed:
    """Killed once step 3 is logged (after the step-2 checkpoint, before step 4's), then resumed: the same
    command again, which finds the checkpoint (trainer.resume_mode=auto) and runs steps 3 and 4 again."""
    run_dir = tmp_path_factory.mktemp("easy") / "run"
    write_stale_run(run_dir)
    args = (*EASY, "trainer.save_freq=2", f"trainer.rollout_data_dir={run_dir}/rollouts")
    killed = run_until_killed("isocompute_easy", run_dir, *args, when=lambda: 3 in verl_steps(run_dir),
                              log_path=run_dir.parent / "killed.log")
    latest = (run_dir / "checkpoints" / "latest_checkpointed_iteration.txt").read_text().strip()
    assert latest == "2", f"the kill came after the step-{latest} checkpoint"
    killed_log = [json.loads(line) for line in (run_dir / "isocompute.jsonl").read_text().splitlines() if line.endswith("}")]
    resumed = run_recipe("isocompute_easy", run_dir, *args)
    return KilledAndResumed(run_dir, resumed.stdout, killed_output=killed, killed_run_log=killed_log)


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
    """Entropy acts at every step with a varying group, and only there (regularizers mode masks the rest)."""
    rows = easy_run.train_rows
    for r in rows:
        varying, _ = varying_rows(easy_run, r["step"])
        assert (r["data"]["actor/entropy_loss"] > 0) == bool(varying), (r["step"], len(varying))
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
        assert len(varying) < B_PROBLEM * N  # the even-index problems' groups never vary
        mixed_steps += 0 < len(varying)
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
    # the histogram of the epoch so far: since the resume, steps 3 and 4 (n_problems says how many)
    assert "train/pass_rate_hist" in rows[-1] and rows[-1]["train/pass_rate_hist"]["n_problems"] == 2 * B_PROBLEM


def test_resumed_run_continues_compute(easy_run):
    before = {r["step"]: r for r in easy_run.killed_run_log[1:]}
    assert sorted(before) == [0, 1, 2, 3]  # the killed attempt had logged step 3
    header, *rows = easy_run.run_log
    header, killed_header = header["header"], easy_run.killed_run_log[0]["header"]
    assert "ended_at" not in killed_header and header["ended_at"] >= header["started_at"]  # killed: no end written
    assert {k: v for k, v in header.items() if k != "ended_at"} == killed_header  # the resume keeps its first start
    assert [r["step"] for r in rows] == [0, 1, 2, 3, 4]  # step 3 replaced, nothing duplicated
    assert [r["rollouts"] for r in rows] == [s * B_PROBLEM * N for s in range(5)]
    assert rows[:3] == [before[s] for s in range(3)]  # kept as they were
    assert rows[3]["tokens"] > before[2]["tokens"]  # counted on from the checkpoint, not from zero
    assert rows[3]["lr"] == pytest.approx(RULE)  # the restored schedule continues at update 3
    assert "[isocompute] resuming from the checkpoint of step 2: the run log keeps steps 0-2" in easy_run.stdout


def test_a_killed_and_resumed_run_keeps_every_step_of_verls_metrics(easy_run):
    """verl's file logger reopens its file from scratch on the resume; steps 0-2 of the killed attempt are
    written back, step 3 is the resumed attempt's, and fit's reader sees every step."""
    rows = easy_run.verl_rows
    assert [r["step"] for r in rows] == [0, 1, 2, 2, 3, 4]  # the resume validates at step 2 before training on
    assert [r["step"] for r in easy_run.train_rows] == [1, 2, 3, 4]
    log = {r["step"]: r for r in easy_run.run_log[1:]}
    for r in easy_run.train_rows:  # each row is the attempt whose run-log row survived
        assert r["data"]["isocompute/tokens"] == log[r["step"]]["tokens"], r["step"]
    assert not list(easy_run.run_dir.glob("verl_metrics.jsonl.*"))
    steps = load_runs([easy_run.run_dir / "verl_metrics.jsonl"], n=N, b_problem=B_PROBLEM).steps
    assert steps["step"].tolist() == [0, 1, 2, 3, 4]
    assert steps["rollouts"].tolist()[1:] == [s * B_PROBLEM * N for s in range(1, 5)]  # step 0 (validation) logs no C
    assert load_runs([easy_run.run_dir]).steps["step"].tolist() == [0, 1, 2, 3, 4]  # the run log, same steps


def test_a_new_run_moved_the_previous_runs_records_aside(easy_run):
    """The killed attempt was a new run (no checkpoint yet) in a directory an n = 99 run had written to."""
    (previous,) = (easy_run.run_dir / "previous").iterdir()
    assert read_run_log(previous / "isocompute.jsonl").header["n"] == 99
    assert (previous / "verl_metrics.jsonl").is_file() and (previous / "validation" / "9.jsonl").is_file()
    assert easy_run.run_log[0]["header"]["n"] == N and not (easy_run.run_dir / "validation" / "9.jsonl").exists()
    assert [r["step"] for r in easy_run.run_log[1:]].count(0) == 1  # one step-0 row: this run's
    moved = [line for line in easy_run.killed_output.splitlines() if "which held another run's files" in line]
    assert len(moved) == 1 and "moved isocompute.jsonl, verl_metrics.jsonl, validation/" in moved[0] and str(previous) in moved[0]


@pytest.fixture(scope="module")
def groups_run(tmp_path_factory, isocompute_cache, tiny_model_path) -> Run:
    """Also the failed-rollouts run: session 1 of every problem whose index is a multiple of 4 fails."""
    run_dir = tmp_path_factory.mktemp("groups") / "run"
    return run_recipe(
        "isocompute_hard", run_dir, "+platform=cpu", PARITY_REWARD, "isocompute.zero_variance.mode=groups",
        "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean",
        "isocompute.cpu.dtype=bfloat16",  # the one bf16 run (the others run the overlay's fp32)
        "trainer.total_training_steps=2", "trainer.val_before_train=false", f"trainer.rollout_data_dir={run_dir}/rollouts",
        "trainer.test_freq=-1",  # no validation: nothing here reads it (the Easy run checks validation)
        "actor_rollout_ref.rollout.agent.default_agent_loop=isocompute_test_failing",
        env=fixture_env("failing_agent_loop", ISOCOMPUTE_FAILURE_LOG=str(run_dir.parent / "failures.jsonl")),
    )


def failed_groups(run: Run) -> dict[int, set[str]]:
    """Per step, the prompt uids whose agent loop the fixture made fail."""
    out = defaultdict(set)
    for line in (run.run_dir.parent / "failures.jsonl").read_text().splitlines():
        failure = json.loads(line)
        out[failure["step"]].add(failure["uid"])
    return out


def test_groups_with_a_failed_rollout_are_evicted_refilled_and_charged(groups_run):
    """A rollout whose agent loop raised: verl evicts its group and samples a fresh problem in its place; every
    trained group keeps its n rollouts, no rollout of an evicted group is trained on, and C counts the evicted
    groups' n rollouts too. (If verl trained the short groups, or renamed its eviction counter, this fails.)"""
    failed = failed_groups(groups_run)
    assert sum(map(len, failed.values())) > 0  # the seeded data has problems with such an index
    rows = {r["step"]: r for r in groups_run.run_log[1:]}
    rollouts = 0
    for row in groups_run.train_rows:
        step, data = row["step"], row["data"]
        evicted = len(failed[step])
        assert data.get("training/rollout_failure/evicted_samples", 0) == evicted  # verl's counter, by its name
        assert data["isocompute/evicted_groups"] == evicted and data["isocompute/evicted_rollouts"] == evicted * N
        rollouts += (B_PROBLEM + evicted) * N
        assert rows[step]["rollouts"] == data["isocompute/rollouts"] == rollouts
        assert rows[step]["isocompute/evicted_groups"] == evicted
        samples = [json.loads(x) for x in (groups_run.run_dir / "rollouts" / f"{step}.jsonl").read_text().splitlines()]
        groups = defaultdict(int)
        for sample in samples:
            groups[sample["uid"].rsplit("_", 2)[0]] += 1
        assert sorted(groups.values()) == [N] * B_PROBLEM  # B_problem whole groups
        assert not set(groups) & failed[step]  # none of them evicted
        assert data["isocompute/padding_rows"] == data["isocompute/singleton_rows"] == 0


def test_verl_still_writes_the_metrics_we_read(easy_run):
    """Canary: the names of verl's step metrics our trainer and run log read (reward, lr, response length,
    the rollout/trainer gap of the old-log-prob pass, step time) are in every training row of a real run."""
    for row in easy_run.train_rows:
        for name in ("critic/score/mean", "actor/lr", "response_length/mean", "training/rollout_probs_diff_max", "timing_s/step"):
            assert name in row["data"], (row["step"], name)


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
    """Started in a directory with another run's files and a checkpoint that verl is told not to load."""
    run_dir = tmp_path_factory.mktemp("decoupled") / "run"
    write_stale_run(run_dir)
    (run_dir / "checkpoints" / "global_step_1").mkdir(parents=True)  # empty: loading it would fail
    (run_dir / "checkpoints" / "latest_checkpointed_iteration.txt").write_text("1")
    return run_recipe(
        "isocompute_hard", run_dir, "+platform=cpu", PARITY_REWARD,
        "algorithm.adv_estimator=isocompute_grpo_decoupled", "isocompute.decoupled.n_train=2",
        "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-sum",
        "trainer.total_training_steps=2", "trainer.val_before_train=false", "trainer.resume_mode=disable",
        "trainer.test_freq=-1",  # no validation: nothing here reads it
    )


def test_a_run_that_loads_no_checkpoint_is_a_new_run(decoupled_run):
    """trainer.resume_mode=disable: a new run although the directory holds a checkpoint. Its log starts with its
    own header; the previous run's files and checkpoints are moved aside, not mixed in."""
    header, *rows = decoupled_run.run_log
    assert header["header"]["n"] == N and [r["step"] for r in rows] == [1, 2]
    (previous,) = (decoupled_run.run_dir / "previous").iterdir()
    assert read_run_log(previous / "isocompute.jsonl").header["n"] == 99
    assert (previous / "checkpoints" / "global_step_1").is_dir() and not (decoupled_run.run_dir / "checkpoints").exists()
    assert "[isocompute] a new run (trainer.resume_mode=disable, no checkpoint loaded)" in decoupled_run.stdout


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
