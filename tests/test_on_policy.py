"""Reusing the rollout's log-probs: allowed only for a fully on-policy recipe without the settings with which verl's
bypass mode trains differently, and then with the recipe's own TIS."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from verl_isocompute.training.config import RecipeError, compose_recipe
from verl_isocompute.training.on_policy import on_policy_problems, prepare_reuse_rollout_log_probs


def test_the_demo_recipe_reuses_rollout_log_probs_with_its_tis_settings():
    cfg = compose_recipe("cpu_demo")
    assert on_policy_problems(cfg) == []
    assert prepare_reuse_rollout_log_probs(cfg) is True
    loss = cfg.actor_rollout_ref.actor.policy_loss
    assert cfg.algorithm.rollout_correction.bypass_mode is True and loss.loss_mode == "bypass_mode"
    # REINFORCE with the recipe's truncated IS: w = min(pi_theta / pi_rollout, 2) per token (pi_theta == pi_old here)
    assert loss.rollout_correction.loss_type == "reinforce"
    assert (loss.rollout_correction.rollout_is, loss.rollout_correction.rollout_is_threshold) == ("token", 2.0)


def test_the_other_recipes_keep_the_old_log_prob_pass():
    cfg = compose_recipe("isocompute_hard")
    assert prepare_reuse_rollout_log_probs(cfg) is False
    assert cfg.algorithm.rollout_correction.bypass_mode is False
    assert cfg.actor_rollout_ref.actor.policy_loss.loss_mode == "vanilla"


@pytest.mark.parametrize(
    ("override", "named"),
    [
        ("actor_rollout_ref.actor.ppo_mini_batch_size=4", "ppo_mini_batch_size=4"),
        ("actor_rollout_ref.actor.ppo_epochs=2", "ppo_epochs=2"),
        ("actor_rollout_ref.actor.policy_loss.loss_mode=gspo", "loss_mode=gspo"),
        ("actor_rollout_ref.rollout.calculate_log_probs=false", "calculate_log_probs=false"),
    ],
)
def test_not_fully_on_policy_is_refused_with_the_reason(override, named):
    cfg = compose_recipe("cpu_demo", [override])
    with pytest.raises(ValueError, match=rf"isocompute\.reuse_rollout_log_probs=true needs a fully on-policy recipe, but .*{named}"):
        prepare_reuse_rollout_log_probs(cfg)
    assert cfg.algorithm.rollout_correction.bypass_mode is False  # nothing half-applied


# Settings with which verl's bypass loss trains differently from the recomputing path (training/on_policy.py).
RS = ("algorithm.rollout_correction.rollout_rs=token_k1", "algorithm.rollout_correction.rollout_rs_threshold=0.5_2.0")


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        ((*RS, "actor_rollout_ref.actor.use_kl_loss=true"), r"rollout_rs=token_k1 with actor_rollout_ref\.actor\.use_kl_loss=True"),
        ((*RS, "actor_rollout_ref.actor.entropy_coeff=0.001"), r"rollout_rs=token_k1 with actor_rollout_ref\.actor\.entropy_coeff=0\.001"),
        (("algorithm.rollout_correction.rollout_is_batch_normalize=true",), r"rollout_is_batch_normalize=true \(bypass mode normalises"),
        (("algorithm.use_kl_in_reward=true",), r"use_kl_in_reward=true \(its penalty would read the rollout's log-probs"),
    ],
)
def test_settings_whose_bypass_gradient_differs_are_refused(overrides, named):
    cfg = compose_recipe("cpu_demo", list(overrides))
    with pytest.raises(ValueError, match=rf"^isocompute\.reuse_rollout_log_probs=true needs a fully on-policy recipe, but "
                                         rf".*{named}.*set isocompute\.reuse_rollout_log_probs=false"):
        prepare_reuse_rollout_log_probs(cfg)
    assert cfg.algorithm.rollout_correction.bypass_mode is False


def test_rejection_sampling_without_regularisers_keeps_the_reuse():
    """Without KL / entropy the rejection acts on the policy gradient alone in both paths (same tokens, same
    normaliser: verl counts the loss_mask, which rejection does not touch)."""
    cfg = compose_recipe("cpu_demo", list(RS))
    assert on_policy_problems(cfg) == [] and prepare_reuse_rollout_log_probs(cfg) is True
    assert cfg.actor_rollout_ref.actor.policy_loss.rollout_correction.rollout_rs == "token_k1"


def test_prepare_turns_the_refusal_into_a_recipe_error(monkeypatch, tmp_path):
    from verl_isocompute.training import prepare

    monkeypatch.setenv("VERL_PLATFORM", "cpu")  # what prepare_platform would set
    cfg = compose_recipe("cpu_demo", ["actor_rollout_ref.actor.ppo_epochs=2", "isocompute.model=tiny",
                                      f"isocompute.run_dir={tmp_path}"])
    for step in ("prepare_platform", "prepare_model", "prepare_data", "prepare_run_dir"):
        monkeypatch.setattr(prepare, step, lambda *a, **k: None)
    with pytest.raises(RecipeError, match="ppo_epochs=2"):
        prepare.prepare(cfg)
    assert OmegaConf.select(cfg, "actor_rollout_ref.actor.policy_loss.loss_mode") == "vanilla"


def test_a_config_not_prepared_by_our_entry_point_says_reuse_is_not_applied():
    from omegaconf import OmegaConf

    from verl_isocompute.training.on_policy import unapplied_reuse_notice

    cfg = OmegaConf.create({"isocompute": {"reuse_rollout_log_probs": True},
                            "algorithm": {"rollout_correction": {"bypass_mode": False}}})
    assert "recomputes the old log-probs" in unapplied_reuse_notice(cfg)
    cfg.algorithm.rollout_correction.bypass_mode = True  # what prepare_reuse_rollout_log_probs sets
    assert unapplied_reuse_notice(cfg) is None
    cfg.isocompute.reuse_rollout_log_probs = False
    assert unapplied_reuse_notice(cfg) is None
