"""End to end: a real verl GRPO run on CPU through `python -m verl_isocompute.main` (tiny model).

Ray, TransferQueue, the v1 trainer, FSDP2 on gloo, the agent loop, our hf rollout, weight sync, the reward
loop and validation all run for real. About a minute on 2 cores.
"""

from __future__ import annotations

import json

import pytest
from verl_runs import PARITY_REWARD, run_recipe

pytestmark = pytest.mark.e2e
STEPS = 3


@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory, isocompute_cache, tiny_model_path):
    run = run_recipe(
        "cpu_demo", tmp_path_factory.mktemp("e2e") / "run",
        "isocompute.model=tiny", PARITY_REWARD,
        "actor_rollout_ref.rollout.n=4", f"trainer.total_training_steps={STEPS}", f"trainer.test_freq={STEPS}",
        # fp32 everywhere, so the rollout/trainer gap measures the implementation, not bf16 rounding
        "actor_rollout_ref.actor.fsdp_config.dtype=float32", "actor_rollout_ref.ref.fsdp_config.dtype=float32",
        "actor_rollout_ref.rollout.dtype=float32",
        # a large step (lr = 0.05 * sqrt(32 / 1024) ~ 9e-3): without a weight sync the rollout would fall far behind
        "isocompute.lr.base_lr=0.05",
    )
    return run.run_dir, run.verl_rows


def _train_rows(rows):
    return [r for r in rows if "timing_s/step" in r["data"]]


def test_training_steps_ran_and_moved_the_policy(cpu_run):
    _, rows = cpu_run
    train = _train_rows(rows)
    assert [r["step"] for r in train] == list(range(1, STEPS + 1))
    assert all(r["data"]["actor/grad_norm"] > 0 for r in train)  # real gradients, so weights changed


def test_validation_ran_before_and_after(cpu_run):
    _, rows = cpu_run
    val_steps = [r["step"] for r in rows if any(k.startswith("val-core/") for k in r["data"])]
    assert val_steps == [0, STEPS]


def test_rollout_logprobs_match_trainer(cpu_run):
    _, rows = cpu_run
    for r in _train_rows(rows):
        assert r["data"]["training/rollout_probs_diff_valid"] == 1
        assert r["data"]["training/rollout_probs_diff_max"] < 1e-3, r["step"]


def test_run_directory_holds_the_run(cpu_run):
    run_dir, _ = cpu_run
    for name in (".hydra/config.yaml", ".hydra/overrides.yaml", "verl_metrics.jsonl", "validation/0.jsonl", f"validation/{STEPS}.jsonl"):
        assert (run_dir / name).is_file(), name
    generations = [json.loads(line) for line in (run_dir / "validation/0.jsonl").read_text().splitlines()]
    assert len(generations) == 16 * 4  # every validation problem, 4 samples each
