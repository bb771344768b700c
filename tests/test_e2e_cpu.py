"""End to end: a real verl GRPO run on CPU through `python -m verl_isocompute.main` (tiny model).

Ray, TransferQueue, the v1 trainer, FSDP2 on gloo, the agent loop, our hf rollout, weight sync, the reward
loop and validation all run for real; each step saves its weights, to show the update changed them, and
validates. The recipe is the demo's, so the rollout's log-probs are reused (no old-log-prob pass) and each
step announces its phases; it runs in ``groups`` zero-variance mode with one sequence per micro-batch, so
micro-batches with nothing to train occur every step. A second run, the same command except that it skips
the weight sync after step 2, must stop before training on the stale rollouts of step 3; until that sync it
is the first run again, so the two also show that the same seed gives the same rollouts and validations
(the CPU rollout's reproducible sampling, docs/EVIDENCE.md). About four and a half minutes on 2 cores.
"""

from __future__ import annotations

import json

import pytest
import torch
from omegaconf import OmegaConf
from doc_snippets import commands, snippet
from verl_runs import HALF_CONSTANT_REWARD, Run, fixture_env, run_recipe

pytestmark = pytest.mark.e2e
STEPS = 3
B_PROBLEM, N = 8, 4


def readme_command() -> tuple[str, list[str]]:
    """The README's "same run without the wrapper" command: the recipe and its overrides (this test runs it)."""
    (command,) = commands(snippet("readme-cpu-demo").text)
    assert command.argv[:4] == ["python", "-m", "verl_isocompute.main", "--config-name"]
    return command.argv[4], command.argv[5:]


def demo_run(run_dir, *extra: str, **kwargs) -> Run:
    """The README's demo command as these tests run it, validating after every step and dumping the training
    rollouts, plus ``extra`` overrides (``kwargs``: :func:`run_recipe`'s)."""
    recipe, given = readme_command()
    assert {f"trainer.total_training_steps={STEPS}", "isocompute.model=tiny", f"actor_rollout_ref.rollout.n={N}"} <= set(given)
    return run_recipe(
        recipe, run_dir, *given, "trainer.test_freq=1", f"trainer.rollout_data_dir={run_dir / 'rollouts'}",
        # training scored so that groups vary, validation by our reward (tests/fixtures/half_constant_reward.py)
        HALF_CONSTANT_REWARD, "reward.custom_reward_function.name=compute_score_with_our_validation",
        # the demo's reuse of the rollout's log-probs in groups mode: the even-index problems' groups never vary
        # and leave the loss, and one sequence per micro-batch makes each of their rows a micro-batch with no token
        "isocompute.zero_variance.mode=groups", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1",
        # fp32 everywhere (weights, the update's compute, the rollout), so the rollout/trainer gap measures
        # the implementation, not rounding
        "isocompute.cpu.dtype=float32",
        # a large step (lr = 0.05 * sqrt(32 / 1024) ~ 9e-3): without a weight sync the rollout would fall far behind
        "isocompute.lr.base_lr=0.05",
        *extra, **kwargs,
    )


@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory, isocompute_cache, tiny_model_path) -> Run:
    run = demo_run(
        tmp_path_factory.mktemp("e2e") / "run",
        # the trained weights of every step, as a Hugging Face checkpoint (no sharded optimizer state needed)
        "trainer.save_freq=1", "actor_rollout_ref.actor.checkpoint.save_contents=[hf_model]",
    )
    (run.run_dir / "driver_stdout.log").write_text(run.stdout)  # what Ray forwarded from the trainer
    return run


@pytest.fixture(scope="module")
def skip_sync_run(tmp_path_factory, isocompute_cache, tiny_model_path) -> Run:
    """tests/fixtures/skip_sync_trainer.py keeps the weights of update STEPS - 1 from the rollout server."""
    return demo_run(
        tmp_path_factory.mktemp("skip_sync") / "run", "trainer.v1.trainer_mode=isocompute_skip_sync",
        env=fixture_env("skip_sync_trainer", ISOCOMPUTE_SKIP_SYNC_AFTER=str(STEPS - 1)), check=False,
    )


def _weights(path):
    from safetensors.torch import load_file

    (file,) = path.glob("*.safetensors")
    return load_file(file)


def test_every_step_changed_the_weights(cpu_run, tiny_model_path):
    """grad_norm > 0 alone does not show an update happened: compare the weights saved after each step."""
    assert [r["step"] for r in cpu_run.train_rows] == list(range(1, STEPS + 1))
    before = _weights(tiny_model_path)
    for step in range(1, STEPS + 1):
        after = _weights(cpu_run.run_dir / "checkpoints" / f"global_step_{step}" / "actor" / "huggingface")
        assert set(after) <= set(before)
        moved = [name for name in after if not torch.equal(after[name].float(), before[name].float())]
        assert len(moved) > len(after) // 2, f"step {step} changed only {moved}"
        before = after


def test_validation_ran_before_training_and_after_every_step(cpu_run):
    val_steps = [r["step"] for r in cpu_run.verl_rows if any(k.startswith("val-core/") for k in r["data"])]
    assert val_steps == list(range(STEPS + 1))


def test_rollout_logprobs_match_trainer(cpu_run):
    """The demo reuses the rollout's log-probs (fully on-policy, isocompute.reuse_rollout_log_probs): no
    old-log-prob pass runs, and the update's own forward pass compares pi_theta with pi_rollout through the
    TIS weights it applies (verl's bypass loss). In fp32 the trainer and the rollout compute the same
    function up to summation order: every token's weight pi_theta / pi_rollout within 1e-4 of 1 (measured
    ~1e-6) and KL ~ 0. Were the update computing in bf16 (verl's FSDP default when mixed_precision is unset)
    the weights would reach ~1.03 at step 1 and the KL 2e-4."""
    for r in cpu_run.train_rows:
        d = r["data"]
        assert "training/rollout_probs_diff_valid" not in d and d["timing_s/old_log_prob"] < 0.5, r["step"]
        assert abs(d["actor/rollout_corr/kl"]) < 1e-6, (r["step"], d["actor/rollout_corr/kl"])
        lo, hi = d["actor/rollout_corr/rollout_is_min"], d["actor/rollout_corr/rollout_is_max"]
        assert 1 - 1e-4 < lo <= hi < 1 + 1e-4, (r["step"], lo, hi)


def test_reused_log_probs_in_groups_mode_train_on_nothing_where_nothing_varies(cpu_run):
    """The documented behaviour holds with the rollout's log-probs reused (verl's bypass loss, which raises on a
    micro-batch with no valid token): the dropped rows' micro-batches train on nothing, the others on exactly
    the kept rows, with a finite loss.

    The even-index problems' groups never vary (tests/fixtures/half_constant_reward.py), so every step drops rows.
    Whether an odd-index group varies is up to the samples: each step is checked against the share of its
    groups that the logs say varied, and at least one step must have trained on some rows (the reward hashes
    the response text, so a group of distinct responses is constant with probability 1/8, and all of the run's
    odd-index groups, ten with verl's default data seed, about 8^-10)."""
    trained = []
    for r in cpu_run.train_rows:
        d = r["data"]
        varied = 1 - d["isocompute/zero_var_group_frac"]
        assert varied <= 0.5, (r["step"], varied)  # the even-index half never varies: rows were dropped
        kept = d["isocompute/trained_frac"] * B_PROBLEM * N
        assert kept == varied * B_PROBLEM * N, (r["step"], kept, varied)  # groups mode keeps exactly the varied groups
        assert d["actor/isocompute/loss_seqs"] == d["isocompute/loss_seqs"] == kept, r["step"]
        assert abs(d["actor/pg_loss"]) < float("inf"), r["step"]
        trained.append(kept)
    assert max(trained) > 0, trained  # some micro-batches trained on rows, the rest on nothing

def test_every_rollout_was_sampled_with_the_trainers_weights(cpu_run):
    """The weight version verl stamps on each rollout is checked before every update (and logged)."""
    assert [r["data"]["isocompute/rollout_weight_version"] for r in cpu_run.train_rows] == list(range(STEPS))


def test_a_step_whose_rollouts_missed_a_weight_sync_stops_the_run(skip_sync_run):
    """Step STEPS's rollouts come from the weights of update STEPS - 2 while the trainer is at STEPS - 1: the run
    stops before the update."""
    run = skip_sync_run
    assert run.returncode != 0
    assert (f"step {STEPS}: the trainer's weights are version {STEPS - 1} (its number of updates so far), but of "
            f"{B_PROBLEM * N} rollouts {B_PROBLEM * N} from version {STEPS - 2}: a weight sync did not reach the "
            "rollout servers") in run.stdout
    assert [r["step"] for r in run.run_log[1:]] == list(range(STEPS))  # the earlier steps passed the same check


def _responses(run: Run, name: str) -> list[tuple[str, str]]:
    """(prompt, response) of every sample in a dump, sorted: verl orders a dump by its random problem uids, and
    a prompt's samples are the same set but may sit in its rows in another order when the agent loop sent
    them in two waves (cpu/hf_rollout.py)."""
    rows = [json.loads(line) for line in (run.run_dir / name).read_text().splitlines()]
    return sorted((row["input"], row["output"]) for row in rows)


def test_the_same_seed_gives_the_same_rollouts_and_validations(cpu_run, skip_sync_run):
    """Up to the sync it skips (after step STEPS - 1, before that step's validation) the skip-sync run is the
    demo run again: the same rollouts of the steps before, the same validations before training and after
    an update."""
    for name in ("validation/0.jsonl", "validation/1.jsonl", "rollouts/1.jsonl", f"rollouts/{STEPS - 1}.jsonl"):
        responses = _responses(cpu_run, name)
        assert responses == _responses(skip_sync_run, name), name
        assert len({r for _, r in responses}) > 1, name  # real samples, not one repeated string


def test_format_metrics_are_logged_at_every_validation(cpu_run):
    """Our reward's format metrics reach the run log, verl's metrics and the per-problem file (the run scores
    its validations with our reward)."""
    header, *rows = cpu_run.run_log
    assert header["header"]["rollout_dtype"] == "float32" and header["header"]["rollout_seed"] is not None
    validated = [row for row in rows if "val/avg@4" in row]
    assert [row["step"] for row in validated] == list(range(STEPS + 1))
    for row in validated:
        for rate in ("val/strict_acc", "val/answer_rate", "val/echo_rate", "val/lenient_acc"):
            assert 0.0 <= row[rate] <= 1.0, rate
        assert row["val/strict_acc"] == pytest.approx(row["val/avg@4"])
    verl_keys = set().union(*(r["data"] for r in cpu_run.verl_rows))
    assert {"val/answer_rate", "val/lenient_acc"} <= verl_keys
    records = [json.loads(line) for line in (cpu_run.run_dir / "validation_problems.jsonl").read_text().splitlines()]
    val_size = len(records) // (STEPS + 1)
    assert [r["step"] for r in records] == [step for step in range(STEPS + 1) for _ in range(val_size)]
    assert all(r["problem"] != "" and 0 <= r["correct"] <= r["answered"] <= r["k"] == 4 for r in records)


def test_progress_markers_name_every_phase(cpu_run):
    """What `isocompute demo` shows inside a step: the trainer's phase markers, in the order verl runs them."""
    from verl_isocompute.rules import progress

    lines = (cpu_run.run_dir / "driver_stdout.log").read_text().splitlines()
    phases = [p for p in map(progress.parse_phase, lines) if p is not None]
    per_step = [p.name for p in phases if p.step == 1 and p.name != progress.VALIDATION]
    assert per_step == [progress.ROLLOUT, progress.OLD_LOG_PROB, progress.ADVANTAGE, progress.UPDATE, progress.WEIGHT_SYNC]
    assert [p.step for p in phases if p.name == progress.VALIDATION] == list(range(STEPS + 1))


def test_train_problems_name_each_steps_problems_and_the_header_when_the_run_ran(cpu_run):
    """train_problems.jsonl: every step's B_problem groups, each a distinct problem of this one-epoch run with its n
    rollouts; the counts are the step's training accuracy; and each label is its group's own problem: the test
    reward pays nothing on even-index problems, so their records must have no correct rollout. The header's
    started_at / ended_at are UTC times in order."""
    from datetime import datetime

    records = [json.loads(line) for line in (cpu_run.run_dir / "train_problems.jsonl").read_text().splitlines()]
    header, rows = cpu_run.run_log[0]["header"], [r for r in cpu_run.run_log[1:] if r["step"] > 0]
    assert sorted({r["step"] for r in records}) == [r["step"] for r in rows] == list(range(1, STEPS + 1))
    for row in rows:
        step = [r for r in records if r["step"] == row["step"]]
        assert len(step) == B_PROBLEM and {r["k"] for r in step} == {N}
        assert sum(r["correct"] for r in step) / sum(r["k"] for r in step) == pytest.approx(row["isocompute/train_acc"])
    problems = [r["problem"] for r in records]
    assert all(isinstance(p, str) and p.isdigit() for p in problems) and len(set(problems)) == len(problems)
    assert [r for r in records if int(r["problem"]) % 2 == 0 and r["correct"]] == []
    assert any(r["correct"] for r in records if int(r["problem"]) % 2)  # the odd ones can pay: the check can fail
    started, ended = (datetime.strptime(header[key], "%Y-%m-%dT%H:%M:%SZ") for key in ("started_at", "ended_at"))
    assert started <= ended


def test_run_directory_holds_the_run(cpu_run):
    run_dir = cpu_run.run_dir
    for name in (".hydra/config.yaml", ".hydra/overrides.yaml", "verl_metrics.jsonl", "validation/0.jsonl", f"validation/{STEPS}.jsonl"):
        assert (run_dir / name).is_file(), name
    generations = [json.loads(line) for line in (run_dir / "validation/0.jsonl").read_text().splitlines()]
    val_size = OmegaConf.load(run_dir / ".hydra/config.yaml").isocompute.data.val_size
    assert len(generations) == val_size * 4  # every validation problem, 4 samples each
