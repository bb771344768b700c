"""The recipe entry point: composing the CPU recipe and refusing bad settings with the fix named."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from hydra import compose, initialize_config_module

from verl_isocompute.main import RecipeError, check_group_size, prepare_model, prepare_platform


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
