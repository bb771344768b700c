"""GRPO estimators (verl_isocompute.training.advantage) against verl's own, and the decoupled-baseline subsample."""

import numpy as np
import pytest
import torch
from scipy import stats
from verl.trainer.ppo import core_algos

from verl_isocompute.training import advantage


def make_batch(num_groups, n, seed, binary=True, T=6, shuffle=True):
    """verl-shaped inputs: uid strings, outcome reward on the last response token, ragged response masks."""
    gen = torch.Generator().manual_seed(seed)
    N = num_groups * n
    index = np.array([f"uid-{seed}-{g}" for g in range(num_groups)], dtype=object).repeat(n)
    if shuffle:
        index = index[np.random.default_rng(seed).permutation(N)]
    scores = (torch.rand(N, generator=gen) < 0.5).float() if binary else torch.randn(N, generator=gen)
    length = torch.randint(1, T + 1, (N,), generator=gen)
    mask = (torch.arange(T)[None, :] < length[:, None]).long()
    rewards = torch.zeros(N, T)
    rewards[torch.arange(N), length - 1] = scores
    return rewards, mask, index, scores


def test_register_is_idempotent_and_selects_our_functions():
    advantage.register()
    advantage.register()
    assert core_algos.get_adv_estimator_fn("isocompute_grpo") is advantage.compute_isocompute_grpo
    assert core_algos.get_adv_estimator_fn("isocompute_grpo_decoupled") is advantage.compute_isocompute_grpo_decoupled


@pytest.mark.parametrize("norm", [True, False])
@pytest.mark.parametrize("binary", [True, False])
@pytest.mark.parametrize("seed", range(6))
def test_equals_verl_grpo(seed, binary, norm):
    n = [2, 3, 4, 8, 16, 5][seed]
    rewards, mask, index, _ = make_batch(num_groups=7 + seed, n=n, seed=seed, binary=binary)
    ours, ours_returns = advantage.compute_isocompute_grpo(rewards, mask, index, norm_adv_by_std_in_grpo=norm)
    theirs, _ = core_algos.compute_grpo_outcome_advantage(rewards, mask, index, norm_adv_by_std_in_grpo=norm)
    # Same formula; the group sums are accumulated in a different order, so allow a float32 ulp or two.
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6)
    assert ours_returns is ours
    assert ((ours != 0) <= (mask != 0)).all()


def test_zero_variance_groups_get_exactly_zero():
    # All-correct, all-wrong, and a constant non-binary score whose float mean does not round-trip.
    index = np.array(["a"] * 4 + ["b"] * 4 + ["c"] * 3 + ["d"] * 2, dtype=object)
    scores = torch.tensor([1.0] * 4 + [0.0] * 4 + [0.1] * 3 + [0.0, 1.0])
    rewards = scores[:, None].repeat(1, 3) / 3
    mask = torch.ones(13, 3, dtype=torch.long)
    for norm in (True, False):
        adv, _ = advantage.compute_isocompute_grpo(rewards, mask, index, norm_adv_by_std_in_grpo=norm)
        assert (adv[:11] == 0).all()
        assert (adv[11:] != 0).all()
    # verl agrees on the binary groups; on group c it returns ~7e-3, a rounding residue of the mean / epsilon.
    theirs, _ = core_algos.compute_grpo_outcome_advantage(rewards, mask, index)
    assert (theirs[:8] == 0).all()


def test_hand_computed_example():
    # Group a: scores 1, 0, 0, 1 -> mean 0.5, std (Bessel) = sqrt(1/3). Group b: 1, 0 -> mean 0.5, std sqrt(1/2).
    index = np.array(["a", "a", "b", "a", "b", "a"], dtype=object)
    scores = torch.tensor([1.0, 0.0, 1.0, 0.0, 0.0, 1.0])
    mask = torch.tensor([[1, 1, 0]] * 6)
    rewards = torch.zeros(6, 3)
    rewards[:, 1] = scores
    adv, _ = advantage.compute_isocompute_grpo(rewards, mask, index, epsilon=0.0)
    a, b = 0.5 / np.sqrt(1 / 3), 0.5 / np.sqrt(1 / 2)
    expected = torch.tensor([a, -a, b, -a, -b, a], dtype=torch.float32)
    torch.testing.assert_close(adv, expected[:, None] * mask)
    raw, _ = advantage.compute_isocompute_grpo(rewards, mask, index, norm_adv_by_std_in_grpo=False)
    torch.testing.assert_close(raw[:, 0], torch.tensor([0.5, -0.5, 0.5, -0.5, -0.5, 0.5]))


def test_norm_flag_comes_from_verl_algorithm_config():
    rewards, mask, index, _ = make_batch(5, 4, seed=1)
    plain, _ = advantage.compute_isocompute_grpo(rewards, mask, index, norm_adv_by_std_in_grpo=False)
    via_config, _ = advantage.compute_isocompute_grpo(rewards, mask, index, config={"norm_adv_by_std_in_grpo": False})
    default, _ = advantage.compute_isocompute_grpo(rewards, mask, index)
    torch.testing.assert_close(plain, via_config)
    assert not torch.equal(default, plain)


def test_group_of_one_is_a_configuration_error():
    rewards, mask, index, _ = make_batch(3, 1, seed=0)
    with pytest.raises(ValueError, match=r"actor_rollout_ref\.rollout\.n >= 2"):
        advantage.compute_isocompute_grpo(rewards, mask, index)
    with pytest.raises(ValueError, match=r"rollout\.n >= 2"):
        advantage.compute_isocompute_grpo_decoupled(rewards, mask, index, n_train=1, seed=0)


def test_integer_and_tensor_indices():
    rewards, mask, index, _ = make_batch(6, 4, seed=3)
    codes = np.unique(index, return_inverse=True)[1]
    by_str, _ = advantage.compute_isocompute_grpo(rewards, mask, index)
    by_int, _ = advantage.compute_isocompute_grpo(rewards, mask, codes)
    by_tensor, _ = advantage.compute_isocompute_grpo(rewards, mask, torch.from_numpy(codes))
    assert torch.equal(by_str, by_int) and torch.equal(by_str, by_tensor)


def test_group_has_variance_uses_accuracy():
    index = np.array(["a"] * 3 + ["b"] * 3 + ["c"] * 2, dtype=object)
    acc = torch.tensor([1.0, 1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0])
    shaped = acc + torch.tensor([0.1, 0.0, 0.2, 0.0, 0.0, 0.0, 0.3, 0.0])  # e.g. a format bonus
    expected = [False] * 3 + [True] * 3 + [False] * 2
    assert advantage.group_has_variance(acc, index).tolist() == expected
    assert advantage.group_has_variance(acc.numpy().astype(bool), index).tolist() == expected
    assert advantage.group_has_variance(shaped, index).tolist() != expected  # why callers must pass acc


# ---- decoupled baseline (appendix C) ----


@pytest.mark.parametrize("n_est, n_train", [(8, 1), (8, 3), (16, 16), (5, 4)])
def test_decoupled_mask_takes_exactly_n_train_distinct_rollouts_per_group(n_est, n_train):
    _, _, index, _ = make_batch(20, n_est, seed=n_est)
    mask = advantage.decoupled_train_mask(index, n_train, seed=7)
    assert mask.dtype == torch.bool and mask.shape == (20 * n_est,)
    per_group = {uid: int(mask[torch.from_numpy(index == uid)].sum()) for uid in np.unique(index)}
    assert set(per_group.values()) == {n_train}  # exactly n_train of distinct rollouts: no replacement


def test_decoupled_mask_is_seeded():
    _, _, index, _ = make_batch(10, 8, seed=0)
    first = advantage.decoupled_train_mask(index, 3, seed=(42, 5))
    assert torch.equal(first, advantage.decoupled_train_mask(index.copy(), 3, seed=(42, 5)))
    assert not torch.equal(first, advantage.decoupled_train_mask(index, 3, seed=(42, 6)))  # next step


def test_decoupled_mask_is_uniform_over_positions():
    # Each of the n_est positions of a group should be picked with probability n_train / n_est.
    n_est, n_train, num_groups, draws = 8, 3, 4, 500
    index = np.arange(num_groups).repeat(n_est)
    picks = sum(advantage.decoupled_train_mask(index, n_train, seed=(0, s)).long() for s in range(draws))
    counts = picks.reshape(num_groups, n_est).sum(0).numpy()
    expected = np.full(n_est, num_groups * draws * n_train / n_est)
    assert stats.chisquare(counts, expected).pvalue > 1e-3
    # Pairs too (a uniform subset, not a uniform marginal with a fixed pattern): P(0 and 1 both kept) =
    # C(6, 1) / C(8, 3) = 3/28.
    masks = [advantage.decoupled_train_mask(index, n_train, seed=(1, s)) for s in range(draws)]
    both = sum(int((m.reshape(num_groups, n_est)[:, :2]).all(dim=1).sum()) for m in masks)
    assert abs(both / (num_groups * draws) - 3 / 28) < 0.03


def test_decoupled_advantages_use_all_n_est_for_the_baseline():
    rewards, mask, index, scores = make_batch(12, 8, seed=4)
    train = advantage.decoupled_train_mask(index, 3, seed=11)
    adv, returns = advantage.compute_isocompute_grpo_decoupled(rewards, mask, index, n_train=3, seed=11)
    full, _ = advantage.compute_isocompute_grpo(rewards, mask, index)
    assert returns is adv
    assert (adv[~train] == 0).all()  # excluded rollouts carry no advantage
    torch.testing.assert_close(adv[train], full[train])  # kept ones: baseline from all 8, not from the 3
    subset_only, _ = advantage.compute_isocompute_grpo(rewards[train], mask[train], index[train.numpy()])
    assert not torch.allclose(adv[train], subset_only)


def test_decoupled_with_n_train_equal_n_est_is_plain_grpo():
    rewards, mask, index, _ = make_batch(6, 4, seed=2)
    adv, _ = advantage.compute_isocompute_grpo_decoupled(rewards, mask, index, n_train=4, seed=0)
    torch.testing.assert_close(adv, advantage.compute_isocompute_grpo(rewards, mask, index)[0])


def test_decoupled_errors_name_the_setting():
    rewards, mask, index, _ = make_batch(3, 4, seed=0)
    with pytest.raises(ValueError, match=r"isocompute\.decoupled\.n_train"):
        advantage.compute_isocompute_grpo_decoupled(rewards, mask, index)
    with pytest.raises(ValueError, match=r"n_train must be in \[1, n_est\]"):
        advantage.decoupled_train_mask(index, 5, seed=0)
    with pytest.raises(ValueError, match=r"n_train must be in \[1, n_est\]"):
        advantage.decoupled_train_mask(index, 0, seed=0)
