"""Our loss: KL and entropy act on exactly the sequences of groups whose accuracy varies."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict
from verl.trainer.ppo.core_algos import kl_penalty
from verl.utils import tensordict_utils as tu
from verl.workers.config import ActorConfig
from verl.workers.utils.losses import ppo_loss
from verl.workers.utils.padding import no_padding_2_padding

from verl_isocompute.training.regularizers import REG_MASK_FIELD, isocompute_ppo_loss


def value(metric) -> torch.Tensor:
    """The single value a verl Metric recorded for this micro-batch."""
    (v,) = metric.values
    return torch.as_tensor(v)

B, P, R = 6, 3, 5


def _config():
    return ActorConfig(
        strategy="fsdp2", ppo_mini_batch_size=B, ppo_micro_batch_size_per_gpu=B, rollout_n=1, use_kl_loss=True,
        kl_loss_coef=0.5, kl_loss_type="low_var_kl", entropy_coeff=0.3, loss_agg_mode="token-mean",
    )


def _batch(seed=0, reg_mask=None):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.tensor([5, 3, 4, 5, 2, 5])
    response_mask = (torch.arange(R)[None, :] < lengths[:, None]).float()
    data = TensorDict(
        {
            "prompts": torch.ones(B, P, dtype=torch.long),
            "responses": torch.ones(B, R, dtype=torch.long),
            "attention_mask": torch.cat([torch.ones(B, P), response_mask], dim=1).long(),
            "response_mask": response_mask,
            "old_log_probs": -torch.rand(B, R, generator=g),
            "ref_log_prob": -torch.rand(B, R, generator=g),
            "advantages": torch.randn(B, R, generator=g),
        },
        batch_size=B,
    )
    if reg_mask is not None:
        data[REG_MASK_FIELD] = torch.tensor(reg_mask, dtype=torch.float32)
    nnz = int(data["attention_mask"].sum())
    tu.assign_non_tensor(data, dp_size=1, batch_num_tokens=int(response_mask.sum()), global_batch_size=B)
    output = {"log_probs": -torch.rand(nnz, generator=g), "entropy": torch.rand(nnz, generator=g) * 3}
    return data, output


def _expected(data, output, reg_mask):
    mask = data["response_mask"]
    total = mask.sum()
    seq = torch.tensor(reg_mask, dtype=torch.float32)[:, None]
    entropy = no_padding_2_padding(output["entropy"], data)
    log_prob = no_padding_2_padding(output["log_probs"], data)
    kld = kl_penalty(logprob=log_prob, ref_logprob=data["ref_log_prob"], kl_penalty="low_var_kl")
    return (entropy * seq * mask).sum() / total, (kld * seq * mask).sum() / total


def test_regularisers_only_on_varying_groups():
    reg_mask = [1, 1, 0, 0, 1, 0]
    data, output = _batch(reg_mask=reg_mask)
    loss, metrics = isocompute_ppo_loss(_config(), output, data)
    want_entropy, want_kl = _expected(data, output, reg_mask)
    assert torch.allclose(value(metrics["actor/entropy_loss"]), want_entropy, atol=1e-6)
    assert torch.allclose(value(metrics["kl_loss"]), want_kl, atol=1e-6)
    # the policy-gradient term is verl's, over every sequence
    plain_data, _ = _batch()
    _, plain_metrics = ppo_loss(ActorConfig(strategy="fsdp2", ppo_mini_batch_size=B, ppo_micro_batch_size_per_gpu=B,
                                            rollout_n=1, loss_agg_mode="token-mean"),
                                {"log_probs": output["log_probs"]}, plain_data)
    assert torch.allclose(value(metrics["actor/pg_loss"]), value(plain_metrics["actor/pg_loss"]))
    expected_loss = value(plain_metrics["actor/pg_loss"]) - 0.3 * want_entropy + 0.5 * want_kl
    assert torch.allclose(loss, expected_loss, atol=1e-6)


def test_all_zero_variance_gives_zero_regulariser_loss_not_nan():
    data, output = _batch(reg_mask=[0] * B)
    loss, metrics = isocompute_ppo_loss(_config(), output, data)
    assert value(metrics["actor/entropy_loss"]).item() == 0.0 and value(metrics["kl_loss"]).item() == 0.0
    assert torch.isfinite(loss)


def test_without_the_mask_it_is_verls_loss():
    data, output = _batch()
    ours, our_metrics = isocompute_ppo_loss(_config(), output, data)
    data2, _ = _batch()
    theirs, their_metrics = ppo_loss(_config(), output, data2)
    assert torch.equal(ours, theirs)
    assert value(our_metrics["kl_loss"]) == value(their_metrics["kl_loss"])


@pytest.mark.parametrize("reg_mask", [[1] * B, [1, 0, 1, 0, 1, 0]])
def test_full_mask_matches_verl_and_partial_mask_lowers_both_terms(reg_mask):
    data, output = _batch(reg_mask=reg_mask)
    _, metrics = isocompute_ppo_loss(_config(), output, data)
    data2, _ = _batch()
    _, verl_metrics = ppo_loss(_config(), output, data2)
    if all(reg_mask):
        assert torch.allclose(value(metrics["actor/entropy_loss"]), value(verl_metrics["actor/entropy_loss"]))
        assert torch.allclose(value(metrics["kl_loss"]), value(verl_metrics["kl_loss"]))
    else:
        assert value(metrics["actor/entropy_loss"]) < value(verl_metrics["actor/entropy_loss"])


@pytest.mark.parametrize("reg_mask", [None, [1, 0, 1, 0, 1, 0]])
def test_truncated_importance_weights_reach_the_policy_gradient(reg_mask):
    """The TIS weights verl's rollout correction writes (rollout_is_weights) scale the PG term in our loss."""
    cfg = _config()
    losses = {}
    for w in (1.0, 2.0):
        data, output = _batch(reg_mask=reg_mask)
        data["rollout_is_weights"] = torch.full((B, R), w)
        _, metrics = isocompute_ppo_loss(cfg, output, data)
        losses[w] = value(metrics["actor/pg_loss"])
    assert torch.allclose(losses[2.0], 2 * losses[1.0]) and losses[1.0] != 0
