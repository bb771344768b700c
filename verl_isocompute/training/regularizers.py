"""The actor loss of the isocompute trainer: verl's PPO loss, with the masks the IsoCompute recipe needs.

A GRPO group whose n rollouts are all correct or all wrong has zero advantage everywhere: it gives the
policy gradient nothing, but the KL and entropy terms still act on it, pulling those sequences toward
the reference policy or toward higher entropy with no task signal to balance them. The IsoCompute
playbook (arXiv 2603.12151, section 2 / Figure 3) studies two filters:

- ``groups``: drop all-correct / all-wrong groups from every loss term. The trainer zeroes their
  ``response_mask`` and ``loss_mask``, so they leave the numerators and verl's token normaliser.
- ``regularizers``: keep the policy gradient on every sequence, apply KL and entropy only to sequences
  of groups with non-zero variance. On Hard sets this damped entropy blow-ups, though removing both
  regularisers was the most stable choice (our Hard recipe).

``regularizers`` is this module's masked loss: verl's ``ppo_loss`` with the KL and entropy loss matrices
multiplied by a per-sequence mask (the TransferQueue field ``isocompute_reg_mask``, written by the
trainer) before aggregation. The aggregation keeps verl's normalisers (all kept response tokens of the
mini-batch), so the policy-gradient term is unchanged and masked sequences contribute exactly zero to
the regularisers. ``actor/entropy_loss`` and ``actor/kl_loss`` are therefore sums over the masked
sequences divided by *all* tokens; the trainer also logs the means over the masked tokens and their
share (``isocompute/reg_entropy_mean``, ``reg_kl_mean``, ``reg_token_share``, ``reg_seq_share``), which are
comparable across modes.

Normalisers. Rows the trainer drops (``groups`` mode, the decoupled baseline's unused rollouts, groups of
one, verl's padding) must leave the normaliser too, per aggregation mode (verl's ``agg_loss``):

- ``token-mean`` (the recipes): verl divides by the mini-batch's ``loss_mask`` tokens; zeroing a row's
  ``loss_mask`` removes it. When no token is left (a ``groups`` step with no varying group) verl would
  divide 0 by 0 and log NaN losses; this loss divides by 1 instead, so the step logs loss 0 (its gradient
  is 0 either way).
- ``seq-mean-token-sum``, ``seq-mean-token-mean``, ``seq-mean-token-sum-norm``: verl divides by the
  constant ``ppo_mini_batch_size * rollout.n``, counting dropped rows, so the loss would shrink by the kept
  fraction. This loss divides by the number of kept sequences of the step instead (the field
  ``isocompute_seq_count``, at least 1). That count is per step, so it is right only when the step is one
  mini-batch (``ppo_mini_batch_size == data.train_batch_size``, as in every recipe); the trainer refuses
  ``groups`` mode or the decoupled baseline with seq-mean aggregation otherwise.
- ``token-sum``: no normaliser; dropped rows add 0.

A micro-batch can be left with no token at all (all its rows dropped). verl's vanilla loss then gives 0;
its bypass loss (``isocompute.reuse_rollout_log_probs``, :mod:`verl_isocompute.training.on_policy`) raises
("response_mask must contain at least one valid token") while computing the rollout-correction weights.
For that micro-batch this loss runs verl's bypass loss on a stand-in, the dropped rows' own tokens with
advantage 0 and the regularisers masked out: the loss and its gradient are exactly 0, and verl reports the
same metrics as for any micro-batch (the correction weights of those tokens; every rank and micro-batch
must report the same metric names for verl to aggregate them).

The loss also reports what it saw, so a run shows (and the trainer checks) that the masks reached the
workers: counts, tokens and a checksum of the rows the regularisers act on and of the rows that carry
loss, and the normalisers it used (``actor/isocompute/*``; summed exactly over micro-batches and ranks).
"""

from __future__ import annotations

import dataclasses

import torch

from verl_isocompute.rules.names import REG_MASK_FIELD, ROW_ID_FIELD, SEQ_COUNT_FIELD

PROBE_PREFIX = "actor/isocompute/"


def _fix_normalisers(config, data) -> None:
    """Point verl's normalisers at the rows the trainer kept (see the module docstring)."""
    from verl.utils import tensordict_utils as tu

    if SEQ_COUNT_FIELD in data.keys() and config.loss_agg_mode.startswith("seq-mean"):
        tu.assign_non_tensor(data, global_batch_size=max(1, int(data[SEQ_COUNT_FIELD][0].item())))
    if data["batch_num_tokens"] is not None and int(data["batch_num_tokens"]) == 0:
        tu.assign_non_tensor(data, batch_num_tokens=1)


def _regulariser_terms(config, model_output, data):
    """Per-token entropy and KL matrices (padded to the response), or None when the term is off."""
    from verl.trainer.ppo.core_algos import kl_penalty
    from verl.workers.utils.padding import no_padding_2_padding

    entropy = model_output.get("entropy", None)
    if entropy is not None:
        entropy = no_padding_2_padding(entropy, data)
    kld = None
    if config.use_kl_loss:
        log_prob = no_padding_2_padding(model_output["log_probs"], data)
        ref_log_prob = data.select("ref_log_prob").to_padded_tensor()["ref_log_prob"]
        kld = kl_penalty(logprob=log_prob, ref_logprob=ref_log_prob, kl_penalty=config.kl_loss_type)
    return entropy, kld


def _masked_regularisers_loss(config, model_output, data, dp_group, response_mask, seq_mask, entropy, kld):
    """verl's ppo_loss with the KL and entropy matrices multiplied by ``seq_mask`` (N, 1) before aggregation."""
    from verl.trainer.ppo.core_algos import agg_loss
    from verl.utils.metric import Metric
    from verl.workers.utils.losses import ppo_loss

    # Policy gradient (and its metrics, and the global batch info) from verl itself, regularisers off.
    pg_only = dataclasses.replace(config, use_kl_loss=False)
    pg_output = {k: v for k, v in model_output.items() if k != "entropy"}
    policy_loss, metrics = ppo_loss(pg_only, pg_output, data, dp_group)
    aggregation = metrics["actor/pg_loss"].aggregation
    agg = dict(loss_mask=response_mask, loss_agg_mode=config.loss_agg_mode, **pg_only.global_batch_info)
    if entropy is not None:
        entropy_loss = agg_loss(loss_mat=entropy * seq_mask, **agg)
        policy_loss = policy_loss - config.entropy_coeff * entropy_loss
        metrics["actor/entropy_loss"] = Metric(value=entropy_loss, aggregation=aggregation)
    if kld is not None:
        kl_loss = agg_loss(loss_mat=kld * seq_mask, **agg)
        policy_loss = policy_loss + kl_loss * config.kl_loss_coef
        metrics["kl_loss"] = Metric(value=kl_loss, aggregation=aggregation)
        metrics["kl_coef"] = config.kl_loss_coef
    return policy_loss, metrics


def _probes(data, response_mask, reg_rows, entropy, kld) -> dict:
    """What this micro-batch trained on, as sums that verl turns into exact step totals.

    verl averages a SUM metric over dp ranks and sums it over micro-batches, so ``value * dp_size`` gives
    the total over the mini-batch (the step, with one mini-batch per step).
    """
    from verl.utils.metric import AggregationType, Metric

    dp = float(data["dp_size"])
    tokens = response_mask.sum(dim=-1).double()
    loss_rows = (tokens > 0).double()
    reg = reg_rows.double() * loss_rows
    ids = data[ROW_ID_FIELD].double().to(tokens.device) + 1.0

    def total(value):
        return Metric(AggregationType.SUM, float(value) * dp)

    probes = {
        "loss_seqs": total(loss_rows.sum()),
        "loss_tokens": total(tokens.sum()),
        "loss_rowsum": total((loss_rows * ids).sum()),
        "reg_seqs": total(reg.sum()),
        "reg_tokens": total((reg * tokens).sum()),
        "reg_rowsum": total((reg * ids).sum()),
        "reg_rowsqsum": total((reg * ids * ids).sum()),
        "token_normaliser": Metric(AggregationType.MAX, float(data["batch_num_tokens"])),
        "seq_normaliser": Metric(AggregationType.MAX, float(data["global_batch_size"])),
    }
    token_mask = reg[:, None] * response_mask
    if entropy is not None:
        probes["reg_entropy_sum"] = total((entropy.double() * token_mask).sum())
    if kld is not None:
        probes["reg_kl_sum"] = total((kld.double() * token_mask).sum())
    return {PROBE_PREFIX + name: value for name, value in probes.items()}


def isocompute_ppo_loss(config, model_output, data, dp_group=None):
    """verl's PPO loss with our normalisers, and KL and entropy restricted to the sequences in
    ``data[REG_MASK_FIELD]`` when the trainer sends that field (``regularizers`` mode).

    Without our fields (a batch from another trainer) this is exactly ``verl.workers.utils.losses.ppo_loss``.
    """
    from verl.workers.utils.losses import ppo_loss

    _fix_normalisers(config, data)
    keys = data.keys()
    response_mask = data.select("response_mask").to_padded_tensor()["response_mask"].to(bool)
    if config.policy_loss.get("loss_mode", "vanilla") == "bypass_mode" and not response_mask.any():
        return _untrained_bypass_loss(config, model_output, data, dp_group, response_mask)
    if REG_MASK_FIELD not in keys and ROW_ID_FIELD not in keys:
        return ppo_loss(config, model_output, data, dp_group)
    if REG_MASK_FIELD in keys:
        reg_rows = data[REG_MASK_FIELD].to(torch.float32).to(response_mask.device)
    else:
        reg_rows = torch.ones(response_mask.shape[0], device=response_mask.device)
    entropy, kld = _regulariser_terms(config, model_output, data)
    if REG_MASK_FIELD in keys:
        loss, metrics = _masked_regularisers_loss(
            config, model_output, data, dp_group, response_mask, reg_rows.reshape(-1, 1), entropy, kld
        )
    else:
        loss, metrics = ppo_loss(config, model_output, data, dp_group)
    if ROW_ID_FIELD in keys:
        metrics.update(_probes(data, response_mask, reg_rows, entropy, kld))
    return loss, metrics


def _untrained_bypass_loss(config, model_output, data, dp_group, response_mask):
    """Loss 0 (and a zero gradient) for a micro-batch with no token to train, in verl's bypass mode, with the
    metrics verl's bypass loss reports (module docstring)."""
    stand_in = data.copy()
    stand_in["response_mask"] = torch.ones_like(data["response_mask"])  # the dropped rows' own tokens
    stand_in["advantages"] = torch.zeros_like(data["advantages"])
    tokens = stand_in.select("response_mask").to_padded_tensor()["response_mask"].to(bool)
    entropy, kld = _regulariser_terms(config, model_output, stand_in)
    no_rows = torch.zeros(tokens.shape[0], 1, device=tokens.device)
    loss, metrics = _masked_regularisers_loss(config, model_output, stand_in, dp_group, tokens, no_rows, entropy, kld)
    if ROW_ID_FIELD in data.keys():
        metrics.update(_probes(data, response_mask, no_rows.reshape(-1), entropy, kld))
    return loss, metrics
