"""The recipe entry point: composing the CPU recipe and refusing bad settings with the fix named."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from hydra import compose, initialize_config_module

from verl_isocompute.training.config import (
    RecipeError,
    check_group_size,
    prepare_model,
    prepare_platform,
)


def compose_recipe(name: str, overrides: list[str] | None = None):
    with initialize_config_module(config_module="verl_isocompute.recipes", version_base=None):
        return compose(config_name=name, overrides=overrides or [])


@pytest.fixture(autouse=True)
def _restore_platform_env():
    before = os.environ.get("VERL_PLATFORM")
    yield
    if before is None:
        os.environ.pop("VERL_PLATFORM", None)
    else:
        os.environ["VERL_PLATFORM"] = before


def test_cpu_demo_composes_on_top_of_verl():
    cfg = compose_recipe("cpu_demo")
    assert cfg.actor_rollout_ref.rollout.name == "hf"
    assert cfg.actor_rollout_ref.actor.ppo_mini_batch_size == cfg.data.train_batch_size  # on-policy
    assert cfg.actor_rollout_ref.actor.ppo_epochs == 1
    assert "critic" in cfg and "ray_kwargs" in cfg  # verl's ppo_trainer underneath


def test_gpu_only_rollout_on_cpu_platform_is_refused():
    cfg = compose_recipe("cpu_demo", ["actor_rollout_ref.rollout.name=vllm"])
    with pytest.raises(RecipeError, match="rollout.name=vllm needs a GPU.*rollout.name=hf"):
        prepare_platform(cfg)
    assert os.environ["VERL_PLATFORM"] == "cpu"


def test_fsdp1_on_cpu_platform_is_refused():
    cfg = compose_recipe("cpu_demo", ["actor_rollout_ref.actor.strategy=fsdp"])
    with pytest.raises(RecipeError, match="actor.strategy=fsdp2"):
        prepare_platform(cfg)


def test_group_estimator_needs_two_rollouts():
    cfg = compose_recipe("cpu_demo", ["actor_rollout_ref.rollout.n=1"])
    with pytest.raises(RecipeError, match="rollout.n to 2 or more"):
        check_group_size(cfg)


def test_unknown_model_path_names_the_fix(tmp_path):
    from verl_isocompute.cpu.models import ModelError

    cfg = compose_recipe("cpu_demo", ["isocompute.model=null", f"actor_rollout_ref.model.path={tmp_path}/missing"])
    with pytest.raises(ModelError, match="not a local transformers checkpoint"):
        prepare_model(cfg)


def test_command_line_error_is_one_clear_line():
    proc = subprocess.run(
        [sys.executable, "-m", "verl_isocompute.main", "--config-name", "cpu_demo", "actor_rollout_ref.rollout.name=sglang"],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].startswith("isocompute: error: actor_rollout_ref.rollout.name=sglang needs a GPU")
    assert "Traceback" not in proc.stderr


def test_missing_local_data_file_is_refused_remote_paths_are_left_to_verl(tmp_path):
    from verl_isocompute.training.config import prepare_data

    cfg = compose_recipe("isocompute_hard", [f"data.train_files={tmp_path}/nope.parquet", f"data.val_files={tmp_path}/nope.parquet"])
    with pytest.raises(RecipeError, match="data.train_files: .*nope.parquet does not exist"):
        prepare_data(cfg)
    prepare_data(compose_recipe("isocompute_hard", ["data.train_files=hdfs://cluster/train.parquet",
                                                    "data.val_files=hdfs://cluster/val.parquet"]))


def test_explicit_lr_conflicts_with_the_lr_rule():
    from verl_isocompute.training.config import prepare_lr

    cfg = compose_recipe("isocompute_hard", ["actor_rollout_ref.actor.optim.lr=3e-6"])
    with pytest.raises(RecipeError, match=r"optim.lr=3e-06 given on the command line.*sets .*optim.lr=7.07107e-07.*isocompute.lr.rule=null"):
        prepare_lr(cfg, {"actor_rollout_ref.actor.optim.lr"})
    # the value the rule gives (as `isocompute allocate --format overrides` prints it) is not a conflict
    same = compose_recipe("isocompute_hard", ["actor_rollout_ref.actor.optim.lr=7.0710678118654755e-07"])
    prepare_lr(same, {"actor_rollout_ref.actor.optim.lr"})
    cfg = compose_recipe("isocompute_hard", ["actor_rollout_ref.actor.optim.lr=3e-6", "isocompute.lr.rule=null"])
    prepare_lr(cfg, {"actor_rollout_ref.actor.optim.lr"})
    assert cfg.actor_rollout_ref.actor.optim.lr == 3e-6


def test_lr_rule_is_written_into_verls_optimizer_config():
    from verl_isocompute.training.config import prepare_lr

    cfg = compose_recipe("isocompute_easy", ["data.train_batch_size=64", "actor_rollout_ref.rollout.n=128"])
    prepare_lr(cfg, set())
    optim = cfg.actor_rollout_ref.actor.optim
    assert optim.lr == pytest.approx(1e-6 * (64 * 128 / 1024) ** 0.5)  # 2.83e-6 at B = 8192, as in the paper
    assert optim.lr_warmup_steps == 10 and optim.lr_scheduler_type == "constant"


def test_verl_platform_cpu_in_the_environment_with_a_gpu_recipe_is_refused(monkeypatch):
    monkeypatch.setenv("VERL_PLATFORM", "cpu")
    cfg = compose_recipe("isocompute_hard")  # a GPU recipe: vLLM rollout
    with pytest.raises(RecipeError, match="rollout.name=vllm needs a GPU.*VERL_PLATFORM=cpu.*rollout.name=hf"):
        prepare_platform(cfg)
