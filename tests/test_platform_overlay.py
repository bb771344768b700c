"""`+platform=cpu` on someone else's config (issue 19, section 3) and our checks before Ray under verl's own
main_ppo (section 4).

The user's config is a file of their own, as a verl user writes it: ``hydra.searchpath`` to verl's configs,
``defaults: [ppo_trainer, _self_]`` and their own sizes, names and loggers. Composed as verl's main_ppo composes
it (``--config-path``/``--config-name``), with and without our pieces. The runs go through main_ppo in this
process (tests/hydra_apps.py) and are stopped by a check before Ray could start.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import verl  # noqa: F401  (loads our plugin: resolvers and search path, as in main_ppo)
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra_apps import run_app
from omegaconf import OmegaConf

USER_CONFIG = """\
hydra:
  searchpath: [pkg://verl.trainer.config]
defaults:
  - ppo_trainer
  - _self_
algorithm:
  adv_estimator: grpo
data:
  train_batch_size: 16
  max_prompt_length: 64
  max_response_length: 32
actor_rollout_ref:
  actor:
    ppo_mini_batch_size: 16
    ppo_micro_batch_size_per_gpu: 4
  ref:
    log_prob_micro_batch_size_per_gpu: 4
  rollout:
    n: 8
    log_prob_micro_batch_size_per_gpu: 4
trainer:
  total_training_steps: 7
  project_name: my_project
  experiment_name: my_experiment
  logger: [console]
"""
MINE = {"data.train_batch_size": 16, "actor_rollout_ref.rollout.n": 8, "trainer.total_training_steps": 7,
        "trainer.project_name": "my_project", "trainer.experiment_name": "my_experiment", "trainer.logger": ["console"],
        "data.max_response_length": 32, "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": 4}
CPU_NEEDS = {"isocompute.platform": "cpu", "actor_rollout_ref.rollout.name": "hf", "actor_rollout_ref.actor.strategy": "fsdp2",
             "actor_rollout_ref.model.use_remove_padding": False, "trainer.device": "cpu", "trainer.n_gpus_per_node": 1}


@pytest.fixture
def user_config(tmp_path) -> Path:
    folder = tmp_path / "conf"
    folder.mkdir()
    (folder / "my_trainer.yaml").write_text(USER_CONFIG)
    return folder


@pytest.fixture
def data_files(isocompute_cache):
    from verl_isocompute.data.arithmetic import ArithmeticConfig, write_arithmetic_dataset

    return write_arithmetic_dataset(isocompute_cache / "overlay-data", ArithmeticConfig(train_size=64, val_size=8))


def compose_user(folder: Path, *overrides: str):
    GlobalHydra.instance().clear()
    with initialize_config_dir(str(folder), version_base=None):
        return compose(config_name="my_trainer", overrides=list(overrides))


@pytest.mark.parametrize("pieces", [[], ["+isocompute=[estimator,lr_rule,run_log]"]], ids=["own config", "with our pieces"])
def test_the_overlay_keeps_the_users_sizes_and_names(user_config, tiny_model_path, data_files, monkeypatch, tmp_path, pieces):
    monkeypatch.setenv("VERL_PLATFORM", "cpu")
    monkeypatch.setenv("ISOCOMPUTE_LAUNCH_DIR", str(tmp_path))  # where the run was started: runs/<experiment> is there
    cfg = compose_user(user_config, "+platform=cpu", *pieces, f"actor_rollout_ref.model.path={tiny_model_path}",
                       f"data.train_files={data_files[0]}", f"data.val_files={data_files[1]}")
    resolved = OmegaConf.create(OmegaConf.to_container(cfg, resolve=True))  # no isocompute.run_dir needed without run_log
    for key, value in {**MINE, **CPU_NEEDS}.items():
        assert OmegaConf.select(resolved, key) == value, key
    if pieces:
        optim = resolved.actor_rollout_ref.actor.optim
        assert optim.lr == pytest.approx(1e-6 * math.sqrt(16 * 8 / 1024))  # the LR rule at the user's batch
        assert resolved.isocompute.run_dir == str(tmp_path / "runs" / "my_experiment")


def _main_ppo(user_config: Path, *args: str, env: dict | None = None, cwd: Path | None = None):
    return run_app("verl.trainer.main_ppo", ["--config-path", str(user_config), "--config-name", "my_trainer", *args],
                   env={"VERL_PLATFORM": "cpu", **(env or {})}, cwd=str(cwd) if cwd else None)


def test_the_overlay_says_what_it_changed_in_one_line(user_config, tiny_model_path, tmp_path):
    result = _main_ppo(user_config, "+platform=cpu", f"actor_rollout_ref.model.path={tiny_model_path}",
                       "data.train_files=missing.parquet", "data.val_files=missing.parquet", cwd=tmp_path)
    lines = [line for line in result.out.splitlines() if line.startswith("[isocompute] +platform=cpu changed")]
    assert len(lines) == 1, result.out
    line = lines[0]
    for change in ("actor_rollout_ref.rollout.name: ??? -> hf", "actor_rollout_ref.actor.strategy: fsdp -> fsdp2",
                   "actor_rollout_ref.actor.fsdp_config.dtype: bfloat16 -> float32", "trainer.device: cuda -> cpu",
                   "trainer.n_gpus_per_node: 8 -> 1"):
        assert change in line, line
    for kept in ("rollout.n:", "train_batch_size:", "experiment_name:", "project_name:", "total_training_steps:", "logger:"):
        assert kept not in line, line
    # then the run stops before Ray, on the missing data file, in one line
    assert result.code == 2 and result.err.strip().splitlines()[-1].startswith("isocompute: error: data.train_files:")


def test_our_recipes_still_get_their_cpu_sizes_and_the_line_lists_them(tmp_path):
    result = run_app("verl.trainer.main_ppo", ["--config-name", "isocompute_hard", "+platform=cpu",
                                               "data.train_files=missing.parquet", "data.val_files=missing.parquet"],
                     env={"VERL_PLATFORM": "cpu"}, cwd=str(tmp_path))
    (line,) = [line for line in result.out.splitlines() if "+platform=cpu changed" in line]
    assert "actor_rollout_ref.rollout.n: 16 -> 4" in line and "data.train_batch_size: 32 -> 8" in line
    assert "data.max_response_length: 8192 -> 48" in line and "isocompute.model: None -> tiny" in line
    assert result.code == 2


def test_isocompute_model_on_a_config_with_its_own_model_path_is_refused(user_config, tmp_path):
    result = _main_ppo(user_config, "+platform=cpu", "+isocompute.model=tiny", "actor_rollout_ref.model.path=/m",
                       "data.train_files=x", "data.val_files=x", cwd=tmp_path)
    assert result.code == 2
    (last,) = result.err.strip().splitlines()[-1:]
    assert last.startswith("isocompute: error: isocompute.model=tiny would be ignored") and "${isocompute.model_path:}" in last


# --- section 4: our pieces' guard errors before Ray, in one line, under verl's own main_ppo ----------------

GUARDS = [
    (["+isocompute=[zero_variance]"], "is applied by the isocompute trainer only"),
    (["+isocompute=[lr_rule,run_log,decoupled]"], "needs isocompute.decoupled.n_train"),
    (["+isocompute=[run_log]"], "lr_scheduler_type=constant: the isocompute trainer runs update k at"),
    (["+isocompute=[lr_rule,run_log]", "+isocompute.zero_variance.mode=group"], "isocompute.zero_variance.mode='group': use one of"),
    (["+isocompute=[estimator]", "actor_rollout_ref.rollout.n=1"], "set actor_rollout_ref.rollout.n to 2 or more"),
]


@pytest.mark.parametrize(("pieces", "message"), GUARDS, ids=[g[1][:40] for g in GUARDS])
def test_a_pieces_guard_is_one_line_before_ray(user_config, tiny_model_path, data_files, tmp_path, pieces, message):
    result = _main_ppo(user_config, "+platform=cpu", *pieces, f"actor_rollout_ref.model.path={tiny_model_path}",
                       f"data.train_files={data_files[0]}", f"data.val_files={data_files[1]}", cwd=tmp_path)
    assert result.code == 2, result.err[-3000:]
    err = [line for line in result.err.strip().splitlines() if not line.startswith(("WARNING", "INFO", "  warnings.warn", "/"))]
    assert len(err) == 1 and err[0].startswith("isocompute: error: ") and message in err[0], result.err[-3000:]
    assert "Traceback" not in result.err and "ray init kwargs" not in result.out


def test_zero_variance_with_nothing_to_mask_warns_once(user_config, tiny_model_path, data_files, tmp_path):
    """verl's stock actor: no KL loss, no entropy bonus. The run goes on (here: to where Ray would start)."""
    result = _main_ppo(user_config, "+platform=cpu", "+isocompute=[lr_rule,run_log,zero_variance]",
                       f"actor_rollout_ref.model.path={tiny_model_path}", f"data.train_files={data_files[0]}",
                       f"data.val_files={data_files[1]}", cwd=tmp_path)
    warnings = [line for line in result.out.splitlines() if "zero_variance.mode=regularizers masks" in line]
    assert len(warnings) == 1 and "the filter does nothing" in warnings[0]
    assert "would start Ray here" in result.err  # a warning, not a refusal
    # the hydra config file lands in the run dir (the run_log piece), as documented
    assert (tmp_path / "runs" / "my_experiment" / ".hydra" / "config.yaml").is_file()
    with_kl = _main_ppo(user_config, "+platform=cpu", "+isocompute=[lr_rule,run_log,zero_variance]",
                        "actor_rollout_ref.actor.use_kl_loss=true", f"actor_rollout_ref.model.path={tiny_model_path}",
                        f"data.train_files={data_files[0]}", f"data.val_files={data_files[1]}", cwd=tmp_path)
    assert "zero_variance.mode=regularizers masks" not in with_kl.out
