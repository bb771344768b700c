"""Zero-variance filtering of the regularisers: KL and entropy only where a group's rewards vary.

A GRPO group whose n rollouts are all correct or all wrong has zero advantage everywhere: it gives the
policy gradient nothing, but the KL and entropy terms still act on it, pulling those sequences toward
the reference policy or toward higher entropy with no task signal to balance them. The IsoCompute
playbook (arXiv 2603.12151, section 2 / Figure 3) studies two filters:

- ``groups``: drop all-correct / all-wrong groups from every loss term (their tokens also leave the
  token normaliser). The trainer does this by zeroing their response and loss masks.
- ``regularizers``: keep the policy gradient on every sequence, apply KL and entropy only to sequences
  of groups with non-zero variance. On Hard sets this damped entropy blow-ups, though removing both
  regularisers was the most stable choice (our Hard recipe).

The ``regularizers`` mode is this module's loss. It is verl's ``ppo_loss`` with the KL and entropy loss
matrices multiplied by a per-sequence mask before aggregation. The aggregation keeps verl's global token
normaliser (all response tokens of the mini-batch), so the policy-gradient term is unchanged and masked
sequences contribute exactly zero to the regularisers; a batch where every group has zero variance gives
a regulariser loss of exactly 0, never NaN. Variance is judged on the reward's binary ``acc``, not on a
shaped score. The mask travels with each sample through verl's TransferQueue as the field
``isocompute_reg_mask`` (written by our trainer), so the loss sees exactly the sequences it masks.
"""

from __future__ import annotations

import dataclasses

import torch

REG_MASK_FIELD = "isocompute_reg_mask"
MODES = ("off", "groups", "regularizers")


def isocompute_ppo_loss(config, model_output, data, dp_group=None):
    """verl's PPO loss, with KL and entropy restricted to the sequences in ``data[REG_MASK_FIELD]``.

    Without that field (mode ``off`` or ``groups``) this is exactly ``verl.workers.utils.losses.ppo_loss``.
    """
    from verl.trainer.ppo.core_algos import agg_loss, kl_penalty
    from verl.utils.metric import Metric
    from verl.workers.utils.losses import ppo_loss
    from verl.workers.utils.padding import no_padding_2_padding

    if REG_MASK_FIELD not in data.keys():
        return ppo_loss(config, model_output, data, dp_group)

    # Policy gradient (and its metrics, and the global batch info) from verl itself, regularisers off.
    pg_only = dataclasses.replace(config, use_kl_loss=False)
    pg_output = {k: v for k, v in model_output.items() if k != "entropy"}
    policy_loss, metrics = ppo_loss(pg_only, pg_output, data, dp_group)
    aggregation = metrics["actor/pg_loss"].aggregation
    batch_info = pg_only.global_batch_info  # filled by ppo_loss: the global token normaliser, dp size, ...

    reg_mask = data[REG_MASK_FIELD].to(torch.float32)
    response_mask = data.select("response_mask").to_padded_tensor()["response_mask"].to(bool)
    seq_mask = reg_mask.reshape(-1, 1).to(response_mask.device)
    agg = dict(loss_mask=response_mask, loss_agg_mode=config.loss_agg_mode, **batch_info)

    entropy = model_output.get("entropy", None)
    if entropy is not None:
        entropy = no_padding_2_padding(entropy, data)
        entropy_loss = agg_loss(loss_mat=entropy * seq_mask, **agg)
        policy_loss = policy_loss - config.entropy_coeff * entropy_loss
        metrics["actor/entropy_loss"] = Metric(value=entropy_loss, aggregation=aggregation)

    if config.use_kl_loss:
        log_prob = no_padding_2_padding(model_output["log_probs"], data)
        ref_log_prob = data.select("ref_log_prob").to_padded_tensor()["ref_log_prob"]
        kld = kl_penalty(logprob=log_prob, ref_logprob=ref_log_prob, kl_penalty=config.kl_loss_type)
        kl_loss = agg_loss(loss_mat=kld * seq_mask, **agg)
        policy_loss = policy_loss + kl_loss * config.kl_loss_coef
        metrics["kl_loss"] = Metric(value=kl_loss, aggregation=aggregation)
        metrics["kl_coef"] = config.kl_loss_coef
    return policy_loss, metrics
