"""The LR rule and warm-up (verl_isocompute.rules.lr): pure, no verl, no torch."""

from __future__ import annotations

import math

import pytest

from verl_isocompute.rules import lr


def test_sqrt_rule_and_its_ablations():
    assert lr.scaled_lr(1024) == 1e-6
    assert lr.scaled_lr(8192) == pytest.approx(2.83e-6, rel=1e-3)  # the paper's B = 8192 rate
    assert lr.scaled_lr(8192, rule="constant") == 1e-6 and lr.scaled_lr(8192, rule="linear") == pytest.approx(8e-6)
    with pytest.raises(ValueError, match="unknown lr rule 'cubic'"):
        lr.scaled_lr(1024, rule="cubic")
    with pytest.raises(ValueError, match="batch_rollouts must be a positive finite number"):
        lr.scaled_lr(0)


def test_decoupled_baseline_counts_the_rollouts_trained_on():
    # the example: B_problem 128, n_est 256, n_train 64 -> B = 8192, not 32768
    decoupled = lr.resolve_lr(128, 256, n_train=64)
    assert decoupled.batch_rollouts == 128 * 64 and decoupled.lr == pytest.approx(2.83e-6, rel=1e-3)
    assert lr.resolve_lr(128, 256).lr == pytest.approx(5.66e-6, rel=1e-3)
    assert lr.rule_batch_rollouts(32, 16) == 512 and lr.rule_batch_rollouts(32, 16, n_train=16) == 512
    with pytest.raises(ValueError, match=r"n_train must be in \[1, n=4\], got 5"):
        lr.rule_batch_rollouts(8, 4, n_train=5)


@pytest.mark.parametrize("warmup", [1, 2, 4, 10])
def test_update_k_runs_at_peak_times_k_over_w(warmup):
    rates = [lr.lr_for_update(k, 3e-6, warmup) for k in range(1, 2 * warmup + 2)]
    assert rates[0] == pytest.approx(3e-6 / warmup) and rates[0] > 0  # update 1 already moves the weights
    assert rates[warmup - 1] == 3e-6 and max(rates) == 3e-6  # the peak is reached at update W, never passed
    assert all(b > a for a, b in zip(rates[: warmup - 1], rates[1:warmup]))  # linear, strictly rising
    assert all(math.isclose(r, 3e-6 * min(1, k / warmup)) for k, r in enumerate(rates, start=1))


def test_no_warmup_and_bad_update_index():
    assert lr.lr_for_update(1, 2e-6, 0) == 2e-6 and lr.lr_for_update(1, 2e-6, -1) == 2e-6
    with pytest.raises(ValueError, match="counted from 1"):
        lr.lr_for_update(0, 1e-6, 10)
