"""Every recipe composes with hydra on top of the installed verl, and says what the playbook prescribes."""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_module
from omegaconf import OmegaConf

from verl_isocompute.rules.lr import VERL_WARMUP_SCHEDULE
from verl_isocompute.rules.names import GRPO_ESTIMATOR, TRAINER, ZERO_VARIANCE_MODES

RECIPES = ["isocompute_easy", "isocompute_hard", "isocompute_hard_guided", "isocompute_mixed", "cpu_demo"]


def compose_recipe(name: str, overrides: list[str] | None = None):
    with initialize_config_module(config_module="verl_isocompute.recipes", version_base=None):
        return compose(config_name=name, overrides=overrides or [])


@pytest.mark.parametrize("name", RECIPES)
def test_recipe_composes_and_is_the_healthy_recipe(name, tiny_model_path, monkeypatch):
    monkeypatch.setenv("VERL_PLATFORM", "cpu")  # cpu_demo's trainer.device insists on it
    given = (["isocompute.model=tiny"] if name == "cpu_demo" else
             ["actor_rollout_ref.model.path=/models/m", "data.train_files=/d/train.parquet", "data.val_files=/d/val.parquet"])
    cfg = compose_recipe(name, given)
    OmegaConf.to_container(cfg, resolve=True)  # every interpolation resolves
    actor, rollout = cfg.actor_rollout_ref.actor, cfg.actor_rollout_ref.rollout
    assert cfg.isocompute.recipe == name
    # the YAML spells our registered names; they must be the ones the code registers
    assert cfg.trainer.v1.trainer_mode == TRAINER and cfg.algorithm.adv_estimator == GRPO_ESTIMATOR
    assert cfg.isocompute.zero_variance.mode in ZERO_VARIANCE_MODES
    assert {key: actor.optim[key] for key in VERL_WARMUP_SCHEDULE} == VERL_WARMUP_SCHEDULE  # update k at lr * k / W
    assert actor.ppo_mini_batch_size == cfg.data.train_batch_size and actor.ppo_epochs == 1  # on-policy
    assert rollout.temperature == 0.6 and rollout.top_p == 1.0
    assert rollout.val_kwargs.temperature == 0.6 and rollout.val_kwargs.n == 4
    assert cfg.algorithm.rollout_correction.rollout_is == "token"
    assert cfg.algorithm.rollout_correction.rollout_is_threshold == 2.0 and rollout.calculate_log_probs
    assert cfg.isocompute.lr.rule == "sqrt" and cfg.isocompute.lr.b_ref == 1024
    assert cfg.reward.custom_reward_function.path == "pkg://verl_isocompute.rules.reward"


def test_gpu_recipes_keep_the_paper_sizes():
    for name in ("isocompute_easy", "isocompute_hard", "isocompute_hard_guided", "isocompute_mixed"):
        cfg = compose_recipe(name)
        assert cfg.data.max_response_length == 8192
        assert cfg.isocompute.lr.base_lr == 1e-6 and cfg.isocompute.lr.warmup_steps == 10
        assert cfg.isocompute.platform == "auto"


def test_regularisers_on_for_easy_off_for_hard_and_mixed():
    easy = compose_recipe("isocompute_easy").actor_rollout_ref.actor
    assert easy.use_kl_loss and easy.kl_loss_coef == 0.001 and easy.kl_loss_type == "low_var_kl"
    assert easy.entropy_coeff == 0.001
    for name in ("isocompute_hard", "isocompute_hard_guided", "isocompute_mixed"):
        actor = compose_recipe(name).actor_rollout_ref.actor
        assert not actor.use_kl_loss and actor.entropy_coeff == 0


def test_any_recipe_runs_on_cpu_with_the_platform_overlay():
    cfg = compose_recipe("isocompute_easy", ["+platform=cpu"])
    assert cfg.isocompute.platform == "cpu" and cfg.actor_rollout_ref.rollout.name == "hf"
    assert cfg.actor_rollout_ref.actor.use_kl_loss  # the recipe itself is kept
    assert cfg.ray_kwargs.ray_init.num_gpus == 1


@pytest.mark.parametrize("script", ["qwen2.5-7b-easy.sh", "qwen2.5-7b-hard.sh"])
def test_gpu_run_examples_compose(script):
    """The paper-run scripts name only keys that exist: compose exactly the command they would run."""
    import subprocess
    from pathlib import Path

    path = Path(__file__).parent.parent / "run_examples" / script
    out = subprocess.run(["bash", str(path)], env={"DRY_RUN": "1", "PATH": "/usr/bin:/bin", "HOME": "/home/x"},
                         capture_output=True, text=True, check=True).stdout.splitlines()
    assert out[:4] == ["python", "-m", "verl_isocompute.main", "--config-name"]
    cfg = compose_recipe(out[4], out[5:])
    assert cfg.actor_rollout_ref.rollout.name == "vllm" and cfg.data.train_batch_size == 32
    assert cfg.actor_rollout_ref.actor.use_kl_loss == (out[4] == "isocompute_easy")
    assert cfg.actor_rollout_ref.rollout.n == (128 if "easy" in script else 64)


def test_guided_recipe_is_hard_plus_guidance():
    """isocompute_hard_guided repeats Hard's settings (hydra cannot layer two primary recipes): the same config
    but for the guided block, the recipe name and the longer prompts."""
    given = ["actor_rollout_ref.model.path=/models/m", "data.train_files=/d/t.parquet", "data.val_files=/d/v.parquet"]
    hard = OmegaConf.to_container(compose_recipe("isocompute_hard", [*given, "data.max_prompt_length=2048"]), resolve=True)
    guided = OmegaConf.to_container(compose_recipe("isocompute_hard_guided", given), resolve=True)
    assert guided["isocompute"].pop("guided") == {**hard["isocompute"].pop("guided"), "enable": True}  # POPE's 1:1, quarter cap
    assert (guided["isocompute"].pop("recipe"), hard["isocompute"].pop("recipe")) == ("isocompute_hard_guided", "isocompute_hard")
    assert guided == hard
