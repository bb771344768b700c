"""Our pieces added one at a time to verl's own ``ppo_trainer`` config (``'+isocompute=[...]'``), composed as
``python -m verl.trainer.main_ppo`` composes them; a piece that needs another says so."""

from __future__ import annotations

import math

import pytest
import verl  # noqa: F401  (loads our plugin: resolvers and search path, as in main_ppo)
from hydra import compose, initialize_config_module
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

from verl_isocompute.training.config import RecipeError, check_warmup_schedule
from verl_isocompute.rules.lr import VERL_WARMUP_SCHEDULE

USER = ["data.train_batch_size=64", "actor_rollout_ref.rollout.n=8"]  # the user's own batch, B = 512 rollouts


def stock(*overrides: str):
    GlobalHydra.instance().clear()
    with initialize_config_module("verl.trainer.config", version_base=None):
        return compose(config_name="ppo_trainer", overrides=[*USER, *overrides])


def resolved(cfg) -> dict:
    return OmegaConf.to_container(cfg, resolve=True)


def test_each_piece_changes_only_what_it_names():
    plain = resolved(stock())
    estimator = resolved(stock("+isocompute=[estimator]"))
    assert estimator["algorithm"]["adv_estimator"] == "isocompute_grpo"
    assert {**estimator, "algorithm": plain["algorithm"]} == plain
    lr_rule = resolved(stock("+isocompute=[lr_rule]"))
    optim = lr_rule["actor_rollout_ref"]["actor"]["optim"]
    assert optim["lr"] == pytest.approx(1e-6 * math.sqrt(64 * 8 / 1024)) and optim["lr_warmup_steps"] == 10
    assert {key: optim[key] for key in VERL_WARMUP_SCHEDULE} == VERL_WARMUP_SCHEDULE
    assert lr_rule["trainer"] == plain["trainer"] and lr_rule["algorithm"] == plain["algorithm"]


def test_lr_rule_and_run_log_select_our_trainer_with_a_run_dir():
    cfg = stock("+isocompute=[lr_rule,run_log]", "trainer.experiment_name=mine")
    assert cfg.trainer.v1.trainer_mode == "isocompute"
    assert cfg.isocompute.run_dir.endswith("/runs/mine") and cfg.isocompute.run_dir.startswith("/")
    check_warmup_schedule(cfg)
    assert stock("+isocompute=[lr_rule,run_log]", "actor_rollout_ref.actor.optim.lr=5e-7").actor_rollout_ref.actor.optim.lr == 5e-7


def test_run_log_without_the_lr_rule_names_it():
    with pytest.raises(RecipeError, match=r"lr_scheduler_type=constant.*\+isocompute=\[lr_rule,run_log\]"):
        check_warmup_schedule(stock("+isocompute=[run_log]"))


@pytest.mark.parametrize(("piece", "why"), [
    ("zero_variance", "it masks groups in the trainer's update"),
    ("decoupled", "it masks the rollouts not trained on in the trainer's update"),
    ("schedule", "the trainer sets each step's n and lr"),
    ("per_prompt_n", "the trainer gives each prompt its own n"),
])
def test_pieces_applied_by_our_trainer_need_it(piece, why):
    """The error names the piece's own reason and the pieces that make it run (run_log alone would be refused
    for want of lr_rule: test_run_log_without_the_lr_rule_names_it); the named pieces then resolve."""
    extra = ["isocompute.decoupled.n_train=4"] if piece == "decoupled" else []
    with pytest.raises(Exception, match=r"applied by the isocompute trainer only") as info:
        resolved(stock(f"+isocompute=[{piece}]", *extra))
    assert f"isocompute.{piece} is applied by the isocompute trainer only ({why})" in str(info.value)
    assert f"`+isocompute=[lr_rule,run_log,{piece}]` (trainer.v1.trainer_mode=isocompute)" in str(info.value)
    cfg = resolved(stock(f"+isocompute=[lr_rule,run_log,{piece}]", *extra))
    check_warmup_schedule(OmegaConf.create(cfg))
    if piece == "decoupled":  # B of the LR rule counts the n_train rollouts trained on
        assert cfg["algorithm"]["adv_estimator"] == "isocompute_grpo_decoupled"
        assert cfg["actor_rollout_ref"]["actor"]["optim"]["lr"] == pytest.approx(1e-6 * math.sqrt(64 * 4 / 1024))
    elif piece == "zero_variance":
        assert cfg["isocompute"]["zero_variance"]["mode"] == "regularizers"
    else:
        assert cfg["isocompute"][piece]["enable"] is True and cfg["isocompute"][piece]["needs"] == f"isocompute.{piece}"


def test_decoupled_piece_needs_n_train():
    with pytest.raises(Exception, match="needs isocompute.decoupled.n_train"):
        resolved(stock("+isocompute=[lr_rule,run_log,decoupled]"))


ALLOCATE = ["isocompute.allocation.curve=paper:qwen2.5-7b-easy", "isocompute.allocation.budget_rollouts=1e6",
            "isocompute.allocation.dataset_size=5000"]


def test_allocation_piece_sets_n_batch_steps_and_lr():
    from verl_isocompute.scaling.allocation import allocate

    cfg = resolved(stock_without_user_batch("+isocompute=[allocation]", *ALLOCATE))
    chosen = allocate("paper:qwen2.5-7b-easy", 1e6, dataset_size=5000)
    assert (cfg["actor_rollout_ref"]["rollout"]["n"], cfg["data"]["train_batch_size"]) == (chosen.n, chosen.b_problem)
    assert cfg["trainer"]["total_training_steps"] == chosen.steps
    assert cfg["actor_rollout_ref"]["actor"]["ppo_mini_batch_size"] == chosen.b_problem
    assert cfg["actor_rollout_ref"]["actor"]["optim"]["lr"] == pytest.approx(chosen.lr)


def stock_without_user_batch(*overrides: str):
    GlobalHydra.instance().clear()
    with initialize_config_module("verl.trainer.config", version_base=None):
        return compose(config_name="ppo_trainer", overrides=list(overrides))


def test_allocation_contradicting_the_command_line_is_one_error():
    with pytest.raises(Exception, match=r"actor_rollout_ref.rollout.n=8 \(allocation: \d+\).*Drop those settings"):
        resolved(stock("+isocompute=[allocation]", *ALLOCATE))
    # every sized key plain on the command line: only the lr still reads the decision, and it refuses the mix
    sizes = ["actor_rollout_ref.rollout.n=3", "data.train_batch_size=5", "trainer.total_training_steps=7",
             "trainer.total_epochs=1"]
    with pytest.raises(Exception, match=r"actor_rollout_ref.rollout.n=3 \(allocation: \d+\).*Drop those settings"):
        resolved(stock_without_user_batch("+isocompute=[allocation]", *ALLOCATE, *sizes))
    with pytest.raises(Exception, match="allocation.enable=false, but the allocation piece replaced"):
        resolved(stock_without_user_batch("+isocompute=[allocation]", "isocompute.allocation.enable=false"))


def test_all_pieces_together_pass_verls_own_validation(tiny_model_path):
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    cfg = stock_without_user_batch("+isocompute=[estimator,lr_rule,run_log,zero_variance,allocation]", *ALLOCATE,
                                   f"actor_rollout_ref.model.path={tiny_model_path}", "trainer.n_gpus_per_node=1",
                                   "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1",
                                   "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=1",
                                   "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=1")
    validate_config(config=cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))
