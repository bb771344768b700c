"""GRPO estimators (verl_isocompute.training.advantage) against verl's own, and the decoupled-baseline subsample."""

import numpy as np
import pytest
import torch
from verl.trainer.ppo import core_algos

from verl_isocompute.training import advantage
from verl_isocompute.rules.masks import decoupled_train_mask
from verl_isocompute.rules.names import DECOUPLED_ESTIMATOR, GRPO_ESTIMATOR


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
    assert core_algos.get_adv_estimator_fn(GRPO_ESTIMATOR) is advantage.compute_isocompute_grpo
    assert core_algos.get_adv_estimator_fn(DECOUPLED_ESTIMATOR) is advantage.compute_isocompute_grpo_decoupled


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


def test_groups_of_one_get_zero_advantage_where_verl_gives_the_raw_score():
    # a: a full group; b: one rollout left (its siblings failed). verl: b's advantage = its score / (1 + eps).
    index = np.array(["a", "a", "a", "b"], dtype=object)
    scores = torch.tensor([1.0, 0.0, 1.0, 1.0])
    rewards, mask = scores[:, None] * torch.tensor([[0.0, 1.0]]), torch.ones(4, 2, dtype=torch.long)
    theirs, _ = core_algos.compute_grpo_outcome_advantage(rewards, mask, index)
    assert theirs[3, 0].item() == pytest.approx(1.0, rel=1e-5)
    ours, _ = advantage.compute_isocompute_grpo(rewards, mask, index)
    assert (ours[3] == 0).all()
    torch.testing.assert_close(ours[:3], theirs[:3])
    decoupled, _ = advantage.compute_isocompute_grpo_decoupled(rewards, mask, index, n_train=3, seed=0)
    torch.testing.assert_close(decoupled, ours)  # n_train 3 = all of a; b has no baseline
    only_singletons, _ = advantage.compute_isocompute_grpo(*make_batch(3, 1, seed=0)[:3])
    assert (only_singletons == 0).all()


@pytest.mark.parametrize("via_context", [False, True])
def test_padding_rows_are_left_out_of_the_group_statistics(via_context):
    rewards, mask, index, _ = make_batch(6, 4, seed=5)
    real = np.ones(24, dtype=bool)
    real[index == index[0]] = False  # one group entirely padding ...
    real[np.flatnonzero(index == index[-1])[0]] = False  # ... and one row of another group
    if via_context:
        with advantage.estimator_context(real=real):
            adv, _ = advantage.compute_isocompute_grpo(rewards, mask, index)
    else:
        adv, _ = advantage.compute_isocompute_grpo(rewards, mask, index, real=real)
    assert (adv[torch.from_numpy(~real)] == 0).all()
    expected, _ = advantage.compute_isocompute_grpo(rewards[real], mask[real], index[real])
    torch.testing.assert_close(adv[torch.from_numpy(real)], expected)  # as if the padding were not there
    with pytest.raises(ValueError, match="real has 3 entries but the batch has 24"):
        advantage.compute_isocompute_grpo(rewards, mask, index, real=real[:3])


def test_integer_and_tensor_indices():
    rewards, mask, index, _ = make_batch(6, 4, seed=3)
    codes = np.unique(index, return_inverse=True)[1]
    by_str, _ = advantage.compute_isocompute_grpo(rewards, mask, index)
    by_int, _ = advantage.compute_isocompute_grpo(rewards, mask, codes)
    by_tensor, _ = advantage.compute_isocompute_grpo(rewards, mask, torch.from_numpy(codes))
    assert torch.equal(by_str, by_int) and torch.equal(by_str, by_tensor)


# ---- decoupled baseline (appendix C); the subset itself is tested in test_masks.py ----


def test_decoupled_advantages_use_all_n_est_for_the_baseline():
    rewards, mask, index, scores = make_batch(12, 8, seed=4)
    train = torch.from_numpy(decoupled_train_mask(index, 3, seed=11))
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


def test_decoupled_reads_n_train_and_seed_from_the_trainers_context():
    rewards, mask, index, _ = make_batch(6, 4, seed=8)
    explicit, _ = advantage.compute_isocompute_grpo_decoupled(rewards, mask, index, n_train=2, seed=(3, 1))
    with advantage.estimator_context(n_train=2, seed=(3, 1)):
        from_context, _ = advantage.compute_isocompute_grpo_decoupled(rewards, mask, index)
        other_seed, _ = advantage.compute_isocompute_grpo_decoupled(rewards, mask, index, seed=(3, 2))  # keyword wins
    torch.testing.assert_close(from_context, explicit)
    assert not torch.equal(other_seed, explicit)
    # n_train above a group's size (failures) trains on what is there
    short, _ = advantage.compute_isocompute_grpo_decoupled(rewards, mask, index, n_train=9, seed=0)
    torch.testing.assert_close(short, advantage.compute_isocompute_grpo(rewards, mask, index)[0])


def test_decoupled_without_n_train_names_the_setting():
    rewards, mask, index, _ = make_batch(3, 4, seed=0)
    with pytest.raises(ValueError, match=r"isocompute\.decoupled\.n_train.*trainer_mode=isocompute"):
        advantage.compute_isocompute_grpo_decoupled(rewards, mask, index)


def _sessions_batch(keys, scores, T=3):
    """verl's v1 rows for TransferQueue ``keys`` ``{uid}_{session}_{output}``: the prompt uid per row, the
    score on the last response token (verl copies a session's final score to its earlier outputs)."""
    from verl import DataProto

    rewards = torch.zeros(len(keys), T)
    rewards[:, -1] = torch.tensor(scores, dtype=torch.float32)
    uids = np.array([key.rsplit("_", 2)[0] for key in keys], dtype=object)
    return DataProto.from_dict(tensors={"token_level_rewards": rewards, "response_mask": torch.ones(len(keys), T),
                                        "token_level_scores": rewards.clone()}, non_tensors={"uid": uids})


def test_several_outputs_per_session_are_refused_where_verls_grpo_takes_the_final_output():
    """verl's v1 trainer keys each output of a session ``{uid}_{session}_{output}``, and its ``grpo`` (only that
    estimator) baselines on each session's final output; ours would count every output as a group member.
    The isocompute trainer refuses such a step before verl's advantage step, naming a session."""
    from types import SimpleNamespace

    from verl.trainer.ppo.v1.utils import compute_advantage_for_multi_trajectories

    from verl_isocompute.rules.masks import multi_output_sessions
    from verl_isocompute.training.trainer import IsoComputeTrainer

    one_each = ["a_0_0", "a_1_0", "a_2_0", "b_0_0", "b_1_0", "b_2_0", "pad-uid_0_0", "pad-uid_1_0"]
    several = ["a_0_0", "a_1_0", "a_1_1", "a_1_2", "a_2_0", "b_0_0", "b_1_0", "b_2_0"]
    scores = [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 1.0, 1.0]

    def verl_grpo(keys):
        data = compute_advantage_for_multi_trajectories(_sessions_batch(keys, scores[: len(keys)]), keys, "grpo", num_repeat=3)
        return data.batch["advantages"]

    def ours(keys):
        batch = _sessions_batch(keys, scores[: len(keys)])
        return advantage.compute_isocompute_grpo(batch.batch["token_level_rewards"], batch.batch["response_mask"],
                                                 batch.non_tensor_batch["uid"], norm_adv_by_std_in_grpo=True)[0]

    # one output per session: every row is a group member, for verl's grpo as for ours (groups of 3 here)
    assert multi_output_sessions(one_each) == []
    torch.testing.assert_close(ours(one_each[:6]), verl_grpo(one_each[:6]))
    # session a_1 returned three outputs: verl's group a is {a_0, a_1 (final), a_2}; ours would have 5 members
    assert multi_output_sessions(several) == ["a_1"]
    assert not torch.allclose(ours(several), verl_grpo(several))
    stand_in = SimpleNamespace(global_steps=3)
    batch = SimpleNamespace(keys=several, tags=[{}] * len(several), partition_id="train")
    with pytest.raises(ValueError, match=r"^step 3: 1 rollout session\(s\) returned several outputs \(e.g. a_1_0 and a_1_1"):
        IsoComputeTrainer._compute_advantage(stand_in, batch, {})
