"""Skip verl's old-log-prob pass when the recipe is fully on-policy and the result is the same.

verl's decoupled PPO keeps three policies: the rollout's (pi_rollout, whose log-probs the sampler
returns), the "old" policy pi_old (a separate forward pass over the whole batch before the update) and
the trained one pi_theta. The recipe's loss per token is ``-A * ratio * w`` with ratio = pi_theta / pi_old
(PPO-clipped) and the truncated-IS weight w = min(pi_old / pi_rollout, C) (TIS, C = 2, arXiv 2603.12151
section 2). With a single optimizer step per rollout batch (``ppo_mini_batch_size == train_batch_size``,
``ppo_epochs == 1``) the update runs on the very weights pi_old was computed with, so at the update
pi_theta == pi_old: the ratio is 1 (the clip never acts) and the gradient is ``-A * w * grad log pi_theta``.

verl's *bypass* mode with the REINFORCE loss computes this policy-gradient term without the extra pass: it
takes pi_old := pi_rollout and, inside the loss, the weight w = min(pi_theta / pi_rollout, C) from the
update's own forward pass (detached), giving ``-A * w * log pi_theta``: the same weight (pi_theta ==
pi_old) and the same gradient, with the same TIS thresholds applied by the same verl function. For the CPU
demo (SmolLM2, 2 cores) the pass took 10 s of an 85 s step; on a GPU it is a smaller share but still a
full forward over the batch.

The two paths apply the rollout-correction settings at different places, so the gradient is the same only
when those places do not matter; :func:`on_policy_problems` refuses every setting where they do:

- several mini-batches or epochs: later mini-batches train on updated weights, pi_theta != pi_old;
- ``rollout_rs`` (rejection sampling) with a KL loss or an entropy bonus: recomputing, verl removes the
  rejected tokens from the batch's ``response_mask``, so from every loss term; in bypass mode the rejection
  acts inside the policy-gradient term only, and KL / entropy still act on the rejected tokens (the two
  gradients differed by 1.4 % in a measured run);
- ``rollout_is_batch_normalize``: recomputing, the weights are normalised to mean 1 over the whole batch
  (every row, before the zero-variance masks); in bypass mode over each micro-batch's trained rows (4.6 %
  apart measured with several micro-batches; apart also with one, as soon as a row is dropped);
- ``algorithm.use_kl_in_reward``: its penalty reads the old log-probs, which bypass mode replaces with the
  rollout's (a different number wherever rollout and trainer differ, e.g. in bf16);
- a policy loss other than vanilla PPO, or no rollout log-probs.

What changes otherwise: the per-step metrics of the skipped pass are not logged (``actor/entropy`` of the old
policy, ``training/rollout_probs_diff_*``); verl logs its ``rollout_corr/*`` metrics (pi_theta vs
pi_rollout) from the loss instead. A micro-batch with no token to train (all of its rows dropped by the
zero-variance filter, the decoupled baseline or verl's padding) trains on nothing and reports loss 0
(:func:`verl_isocompute.training.regularizers.isocompute_ppo_loss`; verl's bypass loss would raise).
"""

from __future__ import annotations

from functools import partial

from omegaconf import DictConfig, OmegaConf, open_dict

from verl_isocompute.training.conf import flag, select

REUSE_KEY = "isocompute.reuse_rollout_log_probs"
ACTOR = "actor_rollout_ref.actor"
CORRECTION = "algorithm.rollout_correction"


def on_policy_problems(cfg: DictConfig) -> list[str]:
    """Why the old-log-prob pass cannot be skipped for ``cfg`` (empty: it can). Pure."""
    sel = partial(select, cfg)  # the one dotted-key reader, bound to this config
    problems = []
    if sel(f"{ACTOR}.ppo_mini_batch_size") != sel("data.train_batch_size"):
        problems.append(f"{ACTOR}.ppo_mini_batch_size={sel(f'{ACTOR}.ppo_mini_batch_size')} differs from "
                        f"data.train_batch_size={sel('data.train_batch_size')} (several optimizer steps per batch)")
    if sel(f"{ACTOR}.ppo_epochs") != 1:
        problems.append(f"{ACTOR}.ppo_epochs={sel(f'{ACTOR}.ppo_epochs')} (more than one pass over the batch)")
    if sel(f"{ACTOR}.policy_loss.loss_mode") not in ("vanilla", "bypass_mode"):
        problems.append(f"{ACTOR}.policy_loss.loss_mode={sel(f'{ACTOR}.policy_loss.loss_mode')} (only the vanilla PPO loss "
                        "has the bypass equivalent)")
    if not sel("actor_rollout_ref.rollout.calculate_log_probs"):
        problems.append("actor_rollout_ref.rollout.calculate_log_probs=false (the rollout's log-probs are needed)")
    regularised = [f"{ACTOR}.{key}={value}" for key, value in (("use_kl_loss", sel(f"{ACTOR}.use_kl_loss")),
                                                              ("entropy_coeff", sel(f"{ACTOR}.entropy_coeff")))
                   if value]
    if sel(f"{CORRECTION}.rollout_rs") and regularised:
        problems.append(f"{CORRECTION}.rollout_rs={sel(f'{CORRECTION}.rollout_rs')} with {' and '.join(regularised)} "
                        "(bypass mode rejects tokens from the policy gradient only, KL / entropy would still act on them)")
    if sel(f"{CORRECTION}.rollout_is_batch_normalize"):
        problems.append(f"{CORRECTION}.rollout_is_batch_normalize=true (bypass mode normalises the weights per "
                        "micro-batch of trained rows, not over the batch)")
    if sel("algorithm.use_kl_in_reward"):
        problems.append("algorithm.use_kl_in_reward=true (its penalty would read the rollout's log-probs instead of the trainer's)")
    return problems


def check_reuse(cfg: DictConfig) -> None:
    """With ``isocompute.reuse_rollout_log_probs=true``, a ValueError naming the fix unless the recipe is fully
    on-policy (:func:`on_policy_problems`). Changes nothing."""
    problems = on_policy_problems(cfg) if flag(cfg, REUSE_KEY) else []
    if problems:
        raise ValueError(
            f"{REUSE_KEY}=true needs a fully on-policy recipe, but {'; '.join(problems)}; "
            f"set {REUSE_KEY}=false to recompute the old log-probs"
        )


def prepare_reuse_rollout_log_probs(cfg: DictConfig) -> bool:
    """With ``isocompute.reuse_rollout_log_probs=true``: switch verl to bypass mode with the REINFORCE loss and
    the recipe's own TIS/rejection settings. Raises ValueError naming the fix when the recipe is not fully
    on-policy or uses a setting with which bypass mode trains differently (module docstring). Returns whether it
    switched."""
    if not flag(cfg, REUSE_KEY):
        return False
    check_reuse(cfg)
    correction = OmegaConf.to_container(cfg.algorithm.rollout_correction, resolve=True)
    correction.update(bypass_mode=True, loss_type="reinforce")
    with open_dict(cfg):
        cfg.algorithm.rollout_correction.bypass_mode = True
        OmegaConf.update(cfg, f"{ACTOR}.policy_loss.loss_mode", "bypass_mode", merge=False)
        OmegaConf.update(cfg, f"{ACTOR}.policy_loss.rollout_correction", correction, merge=False)
    print("[isocompute] old log-probs: reused from the rollout (fully on-policy: one optimizer step per batch, "
          f"TIS weights from the update's forward pass; {REUSE_KEY}=false recomputes them)", flush=True)
    return True


def unapplied_reuse_notice(cfg: DictConfig) -> str | None:
    """One line when the recipe asks for reuse but the config was not prepared by our entry point (verl's
    stock ``main_ppo``, which does not run :func:`prepare_reuse_rollout_log_probs`), else None."""
    if flag(cfg, REUSE_KEY) and not select(cfg, f"{CORRECTION}.bypass_mode", False):
        return (f"[isocompute] {REUSE_KEY}=true is applied by `python -m verl_isocompute.main` only: this run "
                "recomputes the old log-probs (same training, one more forward pass per step)")
    return None
