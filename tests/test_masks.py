"""The per-step masks (verl_isocompute.rules.masks): pure numpy, no verl, no torch, no Ray."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from verl_isocompute.rules import masks
from verl_isocompute.rules.names import GROUPS, OFF, REGULARIZERS


def shuffled_groups(num_groups, n, seed):
    index = np.array([f"uid-{seed}-{g}" for g in range(num_groups)], dtype=object).repeat(n)
    return index[np.random.default_rng(seed).permutation(index.size)]


def test_accuracy_prefers_the_rewards_acc_over_a_shaped_score():
    extra = [{"reward_extra_info": {"acc": True}}, {"reward_extra_info": {"acc": 0}}, {"reward_extra_info": {"acc": None}},
             {}, None]
    # without acc the score decides, > 0.5 (rules.metrics.is_correct): 0.5 is not correct
    assert masks.accuracy(extra, [0.1, 1.2, 0.5, 0.0, 2.0]).tolist() == [1.0, 0.0, 0.0, 0.0, 1.0]


def test_group_has_variance_uses_accuracy_and_ignores_padding():
    uids = np.array(["a"] * 3 + ["b"] * 3 + ["c"] * 2 + ["pad"] * 2, dtype=object)
    acc = np.array([1, 1, 1, 0, 1, 0, 0, 0, 1, 0], dtype=float)
    real = np.array([True] * 8 + [False] * 2)
    expected = [False] * 3 + [True] * 3 + [False] * 4  # the padding "group" differs, but never counts
    assert masks.group_has_variance(acc, uids, real).tolist() == expected
    shaped = acc + np.array([0.1, 0, 0.2, 0, 0, 0, 0.3, 0, 0, 0])  # e.g. a format bonus
    assert masks.group_has_variance(shaped, uids, real).tolist() != expected  # why callers pass acc
    # a real row of group c hidden as padding leaves c with one real row: no variance
    assert not masks.group_has_variance([0, 1], ["c", "c"], [True, False]).any()


@pytest.mark.parametrize("n_est, n_train", [(8, 1), (8, 3), (16, 16), (5, 4)])
def test_decoupled_mask_takes_exactly_n_train_distinct_rollouts_per_group(n_est, n_train):
    index = shuffled_groups(20, n_est, seed=n_est)
    mask = masks.decoupled_train_mask(index, n_train, seed=7)
    assert mask.dtype == bool and mask.shape == (20 * n_est,)
    per_group = {uid: int(mask[index == uid].sum()) for uid in np.unique(index)}
    assert set(per_group.values()) == {n_train}  # exactly n_train of distinct rollouts: no replacement


def test_decoupled_mask_takes_what_a_short_group_has_and_never_padding():
    uids = np.array(["a"] * 4 + ["b"] * 1 + ["c"] * 2 + ["pad"] * 3, dtype=object)
    real = np.array([True] * 7 + [False] * 3)
    mask = masks.decoupled_train_mask(uids, 3, seed=(1, 2), real=real)
    counts = {u: int(mask[uids == u].sum()) for u in ("a", "b", "c", "pad")}
    assert counts == {"a": 3, "b": 1, "c": 2, "pad": 0}  # min(n_train, group size), padding never drawn


def test_decoupled_mask_is_seeded():
    index = shuffled_groups(10, 8, seed=0)
    first = masks.decoupled_train_mask(index, 3, seed=(42, 5))
    assert np.array_equal(first, masks.decoupled_train_mask(index.copy(), 3, seed=(42, 5)))
    assert not np.array_equal(first, masks.decoupled_train_mask(index, 3, seed=(42, 6)))  # next step


def test_decoupled_mask_is_uniform_over_positions():
    # Each of the n_est positions of a group should be picked with probability n_train / n_est.
    n_est, n_train, num_groups, draws = 8, 3, 4, 500
    index = np.arange(num_groups).repeat(n_est)
    picks = sum(masks.decoupled_train_mask(index, n_train, seed=(0, s)).astype(int) for s in range(draws))
    counts = picks.reshape(num_groups, n_est).sum(0)
    expected = np.full(n_est, num_groups * draws * n_train / n_est)
    assert stats.chisquare(counts, expected).pvalue > 1e-3
    # Pairs too (a uniform subset, not a uniform marginal with a fixed pattern): P(0 and 1 both kept) =
    # C(6, 1) / C(8, 3) = 3/28.
    both = sum(int(masks.decoupled_train_mask(index, n_train, seed=(1, s)).reshape(num_groups, n_est)[:, :2].all(1).sum())
               for s in range(draws))
    assert abs(both / (num_groups * draws) - 3 / 28) < 0.03


def test_decoupled_mask_needs_a_positive_n_train():
    with pytest.raises(ValueError, match=r"isocompute\.decoupled\.n_train must be >= 1"):
        masks.decoupled_train_mask(["a", "a"], 0, seed=0)


# A step with a varying group (a), an all-correct group (b), a real row left alone in its group (c: its
# three siblings failed) and three padding rows sharing one uid, as verl's padding helper makes them.
UIDS = np.array(["a", "b", "a", "b", "c", "a", "b", "a", "b", "pad", "pad", "pad"], dtype=object)
ACC = np.array([1, 1, 0, 1, 1, 1, 1, 0, 1, 1, 1, 1], dtype=float)  # padding copies the first row's acc
REAL = np.array([True] * 9 + [False] * 3)


@pytest.mark.parametrize(
    "mode, keep, reg",
    [
        (OFF, [1, 1, 1, 1, 0, 1, 1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 0, 1, 1, 1, 1, 0, 0, 0]),
        (GROUPS, [1, 0, 1, 0, 0, 1, 0, 1, 0, 0, 0, 0], [1, 0, 1, 0, 0, 1, 0, 1, 0, 0, 0, 0]),
        (REGULARIZERS, [1, 1, 1, 1, 0, 1, 1, 1, 1, 0, 0, 0], [1, 0, 1, 0, 0, 1, 0, 1, 0, 0, 0, 0]),
    ],
)
def test_step_masks_per_mode(mode, keep, reg):
    m = masks.step_masks(UIDS, ACC, REAL, mode)
    assert m.keep.astype(int).tolist() == keep
    assert m.reg_mask.astype(int).tolist() == reg
    assert m.varies.astype(int).tolist() == [1, 0, 1, 0, 0, 1, 0, 1, 0, 0, 0, 0]
    assert m.seq_count == sum(keep)
    assert (m.padding_rows, m.singleton_rows, m.groups, m.varying_groups) == (3, 1, 3, 1)
    assert m.trained_per_group.tolist() == [sum(k for u, k in zip(UIDS, keep) if u == g) for g in ("a", "b", "c")]


def test_step_masks_decoupled_subset_is_the_estimators():
    m = masks.step_masks(UIDS, ACC, REAL, OFF, n_train=2, seed=(0, 3))
    subset = masks.decoupled_train_mask(UIDS, 2, (0, 3), REAL)
    assert np.array_equal(m.keep, subset & np.isin(UIDS, ["a", "b"]))  # c has no baseline, padding never trains
    assert m.trained_per_group.tolist() == [2, 2, 0] and m.seq_count == 4
    with pytest.raises(ValueError, match="seed"):
        masks.step_masks(UIDS, ACC, REAL, OFF, n_train=2)


def test_step_masks_without_padding_tags_and_bad_input():
    m = masks.step_masks(UIDS[:9], ACC[:9], None, OFF)
    assert m.padding_rows == 0 and m.real.all()
    with pytest.raises(ValueError, match="zero_variance.mode='drop'.*off, groups, regularizers"):
        masks.step_masks(UIDS, ACC, REAL, "drop")
    with pytest.raises(ValueError, match="real has 3 entries but the batch has 12"):
        masks.step_masks(UIDS, ACC, [True] * 3, OFF)


def test_row_ids_are_stable_20_bit_hashes():
    keys = ["u1_0_0", "u1_1_0", "pad0_0_0"]
    ids = masks.row_ids(keys)
    assert ids.dtype == np.float64 and ((ids >= 0) & (ids < 2**20)).all()
    assert np.array_equal(ids, masks.row_ids(list(keys))) and len(set(ids.tolist())) == 3
