"""Per-prompt n (scaling/per_prompt_n.py): the Knapsack RL value, the Beta posterior, the greedy split of a
step's rollouts (checked by hand and against brute force) and the expected zero-variance share."""

from __future__ import annotations

import itertools
import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from verl_isocompute.scaling.per_prompt_n import (
    PassRate,
    PassRateTracker,
    PerPromptNError,
    allocate_rollouts,
    expected_nonzero_groups,
    expected_zero_variance_share,
    nonzero_advantage_prob,
    prior_from_curation,
)

M = 1e7  # Beta(p M, (1 - p) M) is a point mass at p to ~1e-6: the paper's plug-in pass rate


def point(p: float) -> PassRate:
    return PassRate(p * M, (1 - p) * M)


objective = expected_nonzero_groups


def test_the_value_of_n_rollouts_is_the_chance_of_a_non_zero_advantage():
    assert nonzero_advantage_prob(0.5, 2) == 0.5
    assert nonzero_advantage_prob(0.5, 4) == 1 - 2 / 16
    assert nonzero_advantage_prob(0.02, 8) == pytest.approx(1 - 0.98**8 - 0.02**8) == pytest.approx(0.149237, abs=1e-6)
    assert nonzero_advantage_prob(0.0, 16) == 0 and nonzero_advantage_prob(0.3, 1) == 0


def test_beta_moments_match_the_hand_computed_ones():
    # Beta(1, 1): E[p^n] = 1 / (n + 1), so P(all agree) = 2 / (n + 1) and the value (n - 1) / (n + 1)
    assert PassRate().value(2) == pytest.approx(1 / 3) and PassRate().value(3) == pytest.approx(0.5)
    # Beta(2, 1): E[p^2] = 2*3 / (3*4) = 1/2, E[(1-p)^2] = 1*2 / (3*4) = 1/6
    assert PassRate(2, 1).zero_variance_prob(2) == pytest.approx(0.5 + 1 / 6)
    # never solved in 16 tries, Beta(1, 17): E[(1-p)^16] = 17 / 33, E[p^16] = 16! 17! / 33! ~ 8.6e-10;
    # still worth sampling, where the plug-in p = 0 says 0
    assert PassRate(1, 17).value(16) == pytest.approx(16 / 33, abs=1e-9)
    assert point(0.5).value(6) == pytest.approx(nonzero_advantage_prob(0.5, 6), abs=1e-6)
    assert PassRate().value(1) == 0 and PassRate().value(0) == 0


def test_an_easy_and_a_hard_prompt_split_sixteen_rollouts_as_computed_by_hand():
    """p = 0.5 gains 0.5^n per extra rollout (0.25, 0.125, 0.0625, 0.03125, then 0.0156), p = 0.02 gains
    ~0.02 * 0.98^n (0.0192 at n = 2, still 0.0167 at n = 9): from (2, 2), the easy prompt takes the first four
    extra rollouts, the hard one the other eight."""
    posteriors = [point(0.5), point(0.02)]
    ns = allocate_rollouts(posteriors, budget=16, n_min=2, n_max=16)
    assert ns == [6, 10]
    # expected groups with a gradient: 1 - 2/64 + 1 - 0.98^10 = 1.15168, against 1.14142 at n = 8 each
    assert objective(posteriors, ns) == pytest.approx(2 - 2 / 64 - 0.98**10, abs=1e-5)
    assert objective(posteriors, [8, 8]) == pytest.approx(2 - 2 / 256 - 0.98**8, abs=1e-5)
    # the share of *rollouts* in zero-variance groups rises (hard prompts fail more often in bigger groups):
    # (6 * 2/64 + 10 * 0.98^10) / 16 = 0.5224 against (8 * 2/256 + 8 * 0.98^8) / 16 = 0.4293
    assert expected_zero_variance_share(posteriors, ns) == pytest.approx((6 * 2 / 64 + 10 * 0.98**10) / 16, abs=1e-5)
    assert expected_zero_variance_share(posteriors, [8, 8]) == pytest.approx((8 * 2 / 256 + 8 * 0.98**8) / 16, abs=1e-5)


def test_caps_and_ties():
    # n_max binds: the hard prompt would take 10 but stops at 8, the easy one takes the rest
    assert allocate_rollouts([point(0.5), point(0.02)], budget=16, n_min=2, n_max=8) == [8, 8]
    # identical prompts: an even split, the remainder to the prompts listed first
    assert allocate_rollouts([PassRate()] * 3, budget=10) == [4, 3, 3]
    # prompts with no value left (p ~ 0 and p ~ 1) still get exactly the budget
    assert sum(allocate_rollouts([point(0.0 + 1e-9), point(1 - 1e-9)], budget=9, n_max=5)) == 9


@settings(max_examples=200, deadline=None)
@given(a=st.floats(0.05, 60), b=st.floats(0.05, 60), n=st.integers(2, 300))
def test_the_value_is_concave_in_n_from_two_on(a, b, n):
    post = PassRate(a, b)
    gain, next_gain = post.value(n + 1) - post.value(n), post.value(n + 2) - post.value(n + 1)
    assert gain >= -1e-12 and next_gain <= gain + 1e-12


def test_concavity_fails_below_two_which_is_why_n_min_is_two():
    # v(0) = v(1) = 0 and v(2) = 2p(1-p): the first rollout is worth nothing, the second a lot
    p = 0.3
    gains = [nonzero_advantage_prob(p, n + 1) - nonzero_advantage_prob(p, n) for n in range(1, 3)]
    assert nonzero_advantage_prob(p, 1) == 0 and gains[0] == pytest.approx(2 * p * (1 - p)) and gains[0] > 0
    with pytest.raises(PerPromptNError, match="2 <= n_min"):
        allocate_rollouts([PassRate()], budget=4, n_min=1)


@settings(max_examples=150, deadline=None)
@given(
    beliefs=st.lists(st.tuples(st.floats(0.1, 30), st.floats(0.1, 30)), min_size=1, max_size=4),
    n_max=st.integers(2, 7),
    data=st.data(),
)
def test_greedy_matches_brute_force(beliefs, n_max, data):
    posteriors = [PassRate(a, b) for a, b in beliefs]
    budget = data.draw(st.integers(2 * len(posteriors), n_max * len(posteriors)))
    ns = allocate_rollouts(posteriors, budget, n_min=2, n_max=n_max)
    assert sum(ns) == budget and all(2 <= n <= n_max for n in ns)
    best = max(objective(posteriors, c) for c in itertools.product(range(2, n_max + 1), repeat=len(posteriors))
               if sum(c) == budget)
    assert objective(posteriors, ns) >= best - 1e-9


def test_the_prior_reads_curation_and_the_tracker_adds_the_runs_own_groups():
    info = {"difficulty_avg_at_k": 0.25, "difficulty_k": 16}
    assert prior_from_curation(info) == PassRate(5, 13)  # 1 + 4 correct, 1 + 12 wrong
    assert prior_from_curation(info, weight=0.5) == PassRate(3, 7)
    assert prior_from_curation(None) == PassRate() == prior_from_curation({"other": 1})
    tracker = PassRateTracker()
    tracker.observe("p1", [True, False, False, False])
    tracker.observe("p1", [False, False])
    assert tracker.posterior("p1", info) == PassRate(6, 18) and tracker.posterior("p2") == PassRate()
    restored = PassRateTracker()
    restored.load_state_dict(json.loads(json.dumps(tracker.state_dict())))
    assert restored.posterior("p1", info) == PassRate(6, 18)


@pytest.mark.parametrize("call, words", [
    (lambda: allocate_rollouts([PassRate()] * 3, budget=5), "cannot give 3 prompts between 2 and 5"),
    (lambda: allocate_rollouts([PassRate()] * 2, budget=20, n_max=8), "(4..16)"),
    (lambda: allocate_rollouts([PassRate()], budget=4, n_min=4, n_max=3), "2 <= n_min <= n_max"),
    (lambda: allocate_rollouts([], budget=4), "no prompts"),
    (lambda: prior_from_curation({"difficulty_avg_at_k": 1.5, "difficulty_k": 16}), "avg@k must be in [0, 1]"),
    (lambda: PassRate(0, 1), "a, b > 0"),
    (lambda: PassRateTracker().load_state_dict({"counts": {"p": [1]}}), "counts {prompt id: [successes, failures]}"),
    (lambda: expected_zero_variance_share([PassRate()], [4, 4]), "one n >= 1 per prompt"),
    (lambda: expected_nonzero_groups([PassRate()] * 2, [4]), "one n per prompt"),
    (lambda: PassRateTracker().load_state_dict({"counts": {}, "curation_weight": -1}), "curation_weight -1"),
])
def test_bad_settings_are_refused_in_one_line(call, words):
    with pytest.raises(PerPromptNError) as info:
        call()
    assert words in str(info.value) and "\n" not in str(info.value)


def test_a_large_step_is_split_quickly_and_exactly():
    posteriors = [PassRate(1 + i % 17, 1 + (i * 7) % 13) for i in range(256)]
    ns = allocate_rollouts(posteriors, budget=256 * 64, n_min=2, n_max=1024)
    assert sum(ns) == 256 * 64 and min(ns) >= 2 and max(ns) <= 1024
    assert not math.isnan(expected_zero_variance_share(posteriors, ns))
