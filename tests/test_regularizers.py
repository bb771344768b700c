"""Our loss: KL and entropy act on exactly the sequences of groups whose accuracy varies; the normalisers
count only the kept rows; the loss reports which rows it saw."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from tensordict import TensorDict
from verl.trainer.ppo.core_algos import kl_penalty
from verl.utils import tensordict_utils as tu
from verl.workers.config import ActorConfig
from verl.workers.utils.losses import ppo_loss
from verl.workers.utils.padding import no_padding_2_padding

from verl_isocompute.rules.names import REG_MASK_FIELD, ROW_ID_FIELD, SEQ_COUNT_FIELD
from verl_isocompute.training.regularizers import isocompute_ppo_loss


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


def _with(data, **fields):
    for name, value in fields.items():
        data[name] = torch.as_tensor(value, dtype=torch.float64 if name == ROW_ID_FIELD else torch.float32)
    return data


@pytest.mark.parametrize("mode", ["seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"])
def test_seq_mean_divides_by_the_kept_sequences_not_verls_constant(mode):
    """groups mode / decoupled baseline: rows 1 and 3 were dropped (masks zeroed); verl would still divide by 6."""
    cfg = dataclasses.replace(_config(), loss_agg_mode=mode, use_kl_loss=False, entropy_coeff=0.0)
    kept = torch.tensor([1, 0, 1, 0, 1, 1], dtype=torch.float32)[:, None]
    data, output = _batch()
    data["response_mask"] = data["response_mask"] * kept
    _, ours = isocompute_ppo_loss(cfg, output, _with(data, **{SEQ_COUNT_FIELD: [4.0] * B}))
    reference, _ = _batch()
    reference["response_mask"] = reference["response_mask"] * kept
    tu.assign_non_tensor(reference, global_batch_size=4)  # what the loss must divide by: the 4 kept sequences
    _, want = ppo_loss(cfg, {"log_probs": output["log_probs"]}, reference)
    torch.testing.assert_close(value(ours["actor/pg_loss"]), value(want["actor/pg_loss"]))
    verl_data, _ = _batch()
    verl_data["response_mask"] = verl_data["response_mask"] * kept
    _, verl = ppo_loss(cfg, {"log_probs": output["log_probs"]}, verl_data)  # global_batch_size 6
    torch.testing.assert_close(value(verl["actor/pg_loss"]) * 6 / 4, value(ours["actor/pg_loss"]))


def test_seq_count_leaves_token_mean_alone():
    data, output = _batch()
    ours, _ = isocompute_ppo_loss(_config(), output, _with(data, **{SEQ_COUNT_FIELD: [2.0] * B}))
    theirs, _ = ppo_loss(_config(), output, _batch()[0])
    assert torch.equal(ours, theirs)


@pytest.mark.parametrize("reg_mask", [None, [0] * B])
def test_a_step_with_nothing_kept_logs_loss_zero_not_nan(reg_mask):
    """groups mode when no group varies: every mask is zero, verl's token normaliser is 0."""
    data, output = _batch(reg_mask=reg_mask)
    data["response_mask"] = torch.zeros(B, R)
    tu.assign_non_tensor(data, batch_num_tokens=0)
    verl_data, _ = _batch()
    verl_data["response_mask"] = torch.zeros(B, R)
    tu.assign_non_tensor(verl_data, batch_num_tokens=0)
    _, verl = ppo_loss(_config(), output, verl_data)
    assert torch.isnan(value(verl["actor/pg_loss"]))  # what verl alone would log
    loss, metrics = isocompute_ppo_loss(_config(), output, data)
    for key in ("actor/pg_loss", "actor/entropy_loss", "kl_loss"):
        assert value(metrics[key]).item() == 0.0, key
    assert loss.item() == 0.0


def test_probes_report_exact_step_totals_of_what_the_loss_masked():
    reg_mask, ids = [1, 0, 1, 1, 0, 0], [10.0, 20.0, 30.0, 40.0, 50.0, 60.0]
    data, output = _batch(reg_mask=reg_mask)
    data["response_mask"][3] = 0  # a dropped row: carries no loss even though its reg flag is set
    tu.assign_non_tensor(data, dp_size=2)  # verl averages SUM metrics over ranks: the probes pre-multiply
    _, metrics = isocompute_ppo_loss(_config(), output, _with(data, **{ROW_ID_FIELD: ids}))
    tokens = data["response_mask"].sum(-1)
    reg = torch.tensor(reg_mask, dtype=torch.float32) * (tokens > 0)
    probe = {k.removeprefix("actor/isocompute/"): value(v).item() for k, v in metrics.items() if k.startswith("actor/isocompute/")}
    assert probe["loss_seqs"] == 2 * 5 and probe["loss_tokens"] == 2 * tokens.sum().item()
    assert probe["loss_rowsum"] == 2 * (11 + 21 + 31 + 51 + 61)
    assert probe["reg_seqs"] == 2 * 2 and probe["reg_tokens"] == 2 * (tokens * reg).sum().item()
    assert probe["reg_rowsum"] == 2 * (11 + 31) and probe["reg_rowsqsum"] == 2 * (11**2 + 31**2)
    assert probe["token_normaliser"] == data["batch_num_tokens"] and probe["seq_normaliser"] == B
    entropy = no_padding_2_padding(output["entropy"], data)
    token_mask = reg[:, None] * data["response_mask"]
    assert probe["reg_entropy_sum"] == pytest.approx(2 * (entropy * token_mask).sum().item(), rel=1e-6)
    # the logged entropy loss is the masked sum over all tokens (x dp): = kept mean x kept share
    mean, share = probe["reg_entropy_sum"] / probe["reg_tokens"], probe["reg_tokens"] / (2 * data["batch_num_tokens"])
    assert value(metrics["actor/entropy_loss"]).item() == pytest.approx(2 * mean * share, rel=1e-5)
    assert "reg_kl_sum" in probe


def _bypass_config(**overrides):
    """What isocompute.reuse_rollout_log_probs sets (training/on_policy.py): verl's bypass loss, REINFORCE, token TIS."""
    from verl.trainer.config.algorithm import RolloutCorrectionConfig
    from verl.workers.config.actor import PolicyLossConfig

    correction = RolloutCorrectionConfig(rollout_is="token", rollout_is_threshold=2.0, bypass_mode=True, loss_type="reinforce")
    return dataclasses.replace(_config(), policy_loss=PolicyLossConfig(loss_mode="bypass_mode", rollout_correction=correction),
                               **overrides)


@pytest.mark.parametrize("reg_mask", [None, [0] * B])
def test_bypass_micro_batch_with_nothing_to_train_is_loss_zero_not_an_error(reg_mask):
    """Reusing the rollout's log-probs (verl's bypass loss) with groups mode: a micro-batch whose rows were all
    dropped has no token left. verl's bypass loss raises there; ours trains on nothing (loss and gradient 0) and
    reports the metrics of any other micro-batch (verl aggregates them per name over micro-batches and ranks)."""
    data, output = _batch(reg_mask=reg_mask)
    data["response_mask"] = torch.zeros(B, R)
    tu.assign_non_tensor(data, batch_num_tokens=0)
    output["log_probs"].requires_grad_(True)
    with pytest.raises(ValueError, match="at least one valid token"):
        ppo_loss(_bypass_config(), output, data.copy())
    loss, metrics = isocompute_ppo_loss(_bypass_config(), output, _with(data, **{ROW_ID_FIELD: [1.0] * B}))
    loss.backward()
    assert loss.item() == 0.0 and torch.count_nonzero(output["log_probs"].grad) == 0
    for key in ("actor/pg_loss", "actor/entropy_loss", "kl_loss"):
        assert value(metrics[key]).item() == 0.0, key
    assert value(metrics["actor/isocompute/loss_seqs"]).item() == 0 and value(metrics["actor/isocompute/reg_seqs"]).item() == 0
    trained, trained_output = _batch(reg_mask=reg_mask)
    _, usual = isocompute_ppo_loss(_bypass_config(), trained_output, _with(trained, **{ROW_ID_FIELD: [1.0] * B}))
    assert set(metrics) == set(usual) and "actor/rollout_corr/rollout_is_mean" not in usual  # same names as usual
    assert any(key.startswith("rollout_corr/") for key in usual)
