"""Unbiased validation estimators (failed samples counted as wrong), pass-rate histogram, epochs and evicted
compute (verl_isocompute.rules.metrics)."""

import itertools
from fractions import Fraction
from math import comb

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from verl_isocompute.rules import metrics


def brute_force(outcomes, k):
    """Average of any-correct / all-correct over every k-subset of one problem's samples."""
    subsets = list(itertools.combinations(outcomes, k))
    return np.mean([max(s) for s in subsets]), np.mean([min(s) for s in subsets])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.booleans(), min_size=1, max_size=10), st.data())
def test_estimators_equal_enumeration_over_all_k_subsets(outcomes, data):
    k = data.draw(st.integers(1, len(outcomes)))
    n, c = len(outcomes), sum(outcomes)
    best, worst = brute_force([int(o) for o in outcomes], k)
    assert metrics.best_at_k([n], [c], k)[0] == pytest.approx(best, abs=1e-12)
    assert metrics.worst_at_k([n], [c], k)[0] == pytest.approx(worst, abs=1e-12)


def test_estimators_are_vectorised_and_stable_for_large_n():
    # C(2048, 1024) overflows a float; the product form must still match exact rational arithmetic.
    n = np.array([2048, 2048, 2048, 2048, 1500])
    c = np.array([0, 1, 37, 2048, 1400])
    k = 1024
    exact_best = [1 - Fraction(comb(ni - ci, k), comb(ni, k)) for ni, ci in zip(n.tolist(), c.tolist())]
    exact_worst = [Fraction(comb(ci, k), comb(ni, k)) for ni, ci in zip(n.tolist(), c.tolist())]
    np.testing.assert_allclose(metrics.best_at_k(n, c, k), [float(x) for x in exact_best], rtol=1e-9, atol=1e-300)
    np.testing.assert_allclose(metrics.worst_at_k(n, c, k), [float(x) for x in exact_worst], rtol=1e-9, atol=1e-300)
    assert metrics.best_at_k(n, c, k)[1] == pytest.approx(0.5)


def test_k_equal_n_gives_share_of_problems_with_any_and_all_correct():
    # The paper's definition at k = n = 4: best@4 = share with >= 1 correct, worst@4 = share with all 4.
    acc = [[1, 0, 0, 0], [1, 1, 1, 1], [0, 0, 0, 0], [1, 1, 0, 1]]
    records = [
        {"uid": f"p{p}", "data_source": "math", "acc": a} for p, row in enumerate(acc) for a in row
    ]
    out = metrics.validation_metrics(records)
    assert out["val/avg@4"] == pytest.approx(np.mean(acc))
    assert out["val/best@4"] == pytest.approx(3 / 4)
    assert out["val/worst@4"] == pytest.approx(1 / 4)


def test_unbiased_where_bootstrap_with_replacement_is_not():
    # One problem, 2 of 4 correct, k = 4: every 4-subset of the 4 samples holds a correct one.
    frame = pd.DataFrame({"uid": ["a"] * 4, "data_source": ["s"] * 4, "acc": [1, 1, 0, 0]})
    out = metrics.validation_metrics(frame)
    assert out["val/best@4"] == 1.0 and out["val/worst@4"] == 0.0
    # Sampling 4 with replacement (verl's bootstrap) misses every correct sample 1/16 of the time.
    assert 1 - 0.5**4 < out["val/best@4"]


def test_per_data_source_keys_and_overall_is_mean_over_problems():
    records = {
        "uid": ["a"] * 4 + ["b"] * 4 + ["c"] * 4,
        "data_source": ["easy"] * 8 + ["hard"] * 4,
        "acc": [1, 1, 1, 0] + [1, 0, 0, 0] + [0, 0, 0, 0],
    }
    out = metrics.validation_metrics(records, k=2)
    assert set(out) == {
        f"val/{m}@2{s}" for m in ("avg", "best", "worst") for s in ("", "/easy", "/hard")
    } | {"val/avg@2_se"}
    assert out["val/avg@2/easy"] == pytest.approx((3 / 4 + 1 / 4) / 2)
    assert out["val/avg@2/hard"] == 0.0
    assert out["val/avg@2"] == pytest.approx((3 / 4 + 1 / 4 + 0) / 3)
    # best@2: a = 1 - C(1,2)/C(4,2) = 1, b = 1 - C(3,2)/C(4,2) = 1/2; worst@2: a = C(3,2)/C(4,2) = 1/2.
    assert out["val/best@2/easy"] == pytest.approx(0.75)
    assert out["val/worst@2/easy"] == pytest.approx(0.25)
    assert out["val/best@2"] == pytest.approx(0.5)


def test_problems_without_a_data_source_still_count_overall():
    records = {"uid": ["a", "a", "b", "b"], "data_source": ["s", "s", None, None], "acc": [1, 1, 0, 0]}
    assert metrics.validation_metrics(records)["val/avg@2"] == 0.5


def test_bool_acc_and_custom_prefix():
    records = [{"uid": "a", "data_source": "s", "acc": v} for v in (True, False)]
    assert metrics.validation_metrics(records, prefix="test")["test/best@2"] == 1.0


def test_too_few_samples_names_the_fix():
    records = {"uid": ["a", "a", "b"], "data_source": ["s"] * 3, "acc": [1, 0, 1]}
    with pytest.raises(ValueError, match=r"val_kwargs\.n >= 2"):
        metrics.validation_metrics(records, k=2)
    with pytest.raises(ValueError, match="pass k explicitly"):
        metrics.validation_metrics(records)


@pytest.mark.parametrize(
    "records, match",
    [
        ({"uid": ["a", "a"], "data_source": ["s"] * 2, "acc": [0.5, 1.0]}, "binary"),
        ({"uid": ["a"], "acc": [1]}, "missing"),
        ({"uid": [], "data_source": [], "acc": []}, "no validation samples"),
    ],
)
def test_bad_records_raise(records, match):
    with pytest.raises(ValueError, match=match):
        metrics.validation_metrics(records)


def test_estimator_argument_errors():
    with pytest.raises(ValueError, match="n >= k"):
        metrics.best_at_k([3], [1], 4)
    with pytest.raises(ValueError, match="c <= n"):
        metrics.worst_at_k([3], [4], 2)
    with pytest.raises(ValueError, match="k must be"):
        metrics.best_at_k([3], [1], 0)


def test_pass_rate_histogram():
    records = {
        "uid": ["a"] * 4 + ["b"] * 4 + ["c"] * 2 + ["d"] * 2,
        "acc": [0, 0, 0, 0] + [1, 1, 1, 1] + [1, 0] + [1, 0],
    }
    hist = metrics.pass_rate_histogram(records, bins=4)
    assert hist["edges"] == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert hist["counts"] == [1, 0, 2, 1]  # 0 -> first bin, 0.5 -> third, 1.0 -> last (closed)
    assert hist["n_problems"] == 4
    assert hist["frac_zero"] == 0.25 and hist["frac_one"] == 0.25
    assert sum(hist["counts"]) == hist["n_problems"]
    with pytest.raises(ValueError, match="bins"):
        metrics.pass_rate_histogram(records, bins=0)


def test_epochs():
    assert metrics.epochs(150, 32, 4800) == 1.0
    assert metrics.epochs(0, 32, 6000) == 0.0
    with pytest.raises(ValueError, match="dataset_size"):
        metrics.epochs(10, 32, 0)


def test_evicted_groups_count_every_eviction_verl_logs():
    step = {"training/rollout_failure/evicted_samples": 2.0, "training/filter_groups/evicted_samples": 1,
            "validation/rollout_failure/evicted_samples": 5, "actor/lr": 1e-6}
    assert metrics.evicted_groups(step) == 3 and metrics.evicted_groups({}) == 0


def test_failed_validation_samples_count_as_wrong():
    # problem p1: 4 requested, 2 came back (both right); p2: all 4 failed; p3: 4 of 4, one right
    uids = ["p1", "p1", "p3", "p3", "p3", "p3"]
    records, failed = metrics.validation_samples(uids, ["d"] * 6, [1, 1, 0, 1, 0, 0],
                                                 expected_counts={("d", "p1"): 4, ("d", "p2"): 4, ("d", "p3"): 4})
    assert failed == 6 and len(records) == 12
    assert records.groupby("uid")["acc"].agg(["size", "sum"]).to_dict("index") == {
        "p1": {"size": 4, "sum": 2.0}, "p2": {"size": 4, "sum": 0.0}, "p3": {"size": 4, "sum": 1.0}}
    with pytest.raises(ValueError, match="never submitted"):
        metrics.validation_samples(["p9"], ["d"], [1], expected_counts={("d", "p1"): 4})
    with pytest.raises(ValueError, match="1 more validation samples than were requested"):
        metrics.validation_samples(["p1"] * 3, ["d"] * 3, [1, 1, 1], expected_counts={("d", "p1"): 2})
    # without verl's counts: every problem that came back was asked for default_n samples
    records, failed = metrics.validation_samples(["p1", "p1"], ["d", "d"], [1, 0], default_n=4)
    assert failed == 2 and metrics.validation_metrics(records, k=4)["val/avg@4"] == 0.25


# --- one verdict of "correct" ---------------------------------------------------------------------------

# A reward that is not 0/1: a format bonus of 0.1 for a well-formed wrong answer, 1.1 for a right one (no
# `acc`), as a bare number and as a dict; +-1 and 0/1 with and without `acc`.
SHAPED = [0.0, 0.1, 0.5, 0.6, 1.0, 1.1, -1.0, {"score": 0.1}, {"score": 1.1, "pred": "7"},
          {"score": 1.0, "acc": False}, {"score": -1.0, "acc": True}, {"score": 0.1, "acc": None}]


@pytest.mark.parametrize("result", SHAPED, ids=[str(r) for r in SHAPED])
def test_curation_training_and_validation_call_the_same_samples_correct(result):
    """Curation (difficulty sets: workflow.rollouts.correct) and training (zero-variance masks and training
    accuracy: rules.masks.accuracy, which verl hands the reward's dict keys as reward_extra_info; the
    trainer's validation uses is_correct directly) give one verdict for any reward."""
    from verl_isocompute.rules.masks import accuracy
    from verl_isocompute.workflow.rollouts import correct

    score = result["score"] if isinstance(result, dict) else result
    extra = {"reward_extra_info": {k: v for k, v in result.items() if k != "score"}} if isinstance(result, dict) else {}
    curated = correct(result)[0]
    trained = bool(accuracy([extra], [score])[0])
    assert curated == trained
    if not isinstance(result, dict) or result.get("acc") is None:
        assert curated == (score > 0.5)  # the format bonus 0.1 is not a correct answer, 1.1 is
    assert curated == metrics.is_correct(score, extra.get("reward_extra_info", {}).get("acc"))


# --- noise: standard errors over problems, the paired change, and its wording --------------------------


def test_validation_se_is_the_sample_std_of_per_problem_avg_over_sqrt_problems():
    # per-problem avg@4: 1/4, 3/4, 1, 0 -> mean 1/2; sample variance (ddof 1) = (1/16+1/16+1/4+1/4)/3 = 5/24
    acc = [[1, 0, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1], [0, 0, 0, 0]]
    records = [{"uid": f"p{p}", "data_source": "s", "acc": a} for p, row in enumerate(acc) for a in row]
    out = metrics.validation_metrics(records)
    assert out["val/avg@4"] == 0.5
    assert out["val/avg@4_se"] == pytest.approx((5 / 24) ** 0.5 / 2)


def test_se_of_one_problem_is_nan_not_zero():
    assert np.isnan(metrics.stderr_over_problems([0.5]))
    assert np.isnan(metrics.validation_metrics([{"uid": "a", "data_source": "s", "acc": 1}])["val/avg@1_se"])


def test_paired_change_cancels_problem_difficulty():
    # Every problem improves by exactly 1/4: the paired SE is 0 although the problems differ widely.
    before = {"a": 0.0, "b": 0.5, "c": 0.75}
    after = {"a": 0.25, "b": 0.75, "c": 1.0}
    change = metrics.paired_change(before, after)
    assert change.problems == 3
    assert change.change == pytest.approx(0.25) and change.change_se == 0.0
    assert change.before_se == pytest.approx(metrics.stderr_over_problems([0, 0.5, 0.75]))
    assert change.z == np.inf
    assert "up by inf SE" in metrics.describe_change(change)


def test_paired_change_by_hand_and_only_shared_problems():
    # differences 0.25, -0.25, 0.5, 0 (problem "x" is in one validation only and is left out):
    # mean 1/8; sample variance = (1/64 + 9/64 + 9/64 + 1/64)/3 = 5/48; SE = sqrt(5/48)/2 = 0.1614
    before = {"a": 0.25, "b": 0.5, "c": 0.25, "d": 0.5, "x": 1.0}
    after = {"a": 0.5, "b": 0.25, "c": 0.75, "d": 0.5}
    change = metrics.paired_change(before, after)
    assert change.problems == 4
    assert change.before == pytest.approx(0.375) and change.after == pytest.approx(0.5)
    assert change.change == pytest.approx(0.125)
    assert change.change_se == pytest.approx((5 / 48) ** 0.5 / 2)
    assert change.z == pytest.approx(0.125 / ((5 / 48) ** 0.5 / 2))  # 0.77 SE
    text = metrics.describe_change(change)
    assert text.startswith("+0.125 ± 0.161 (paired SE over 4 problems)")
    assert "within noise" in text


@pytest.mark.parametrize(("diffs", "words"), [
    # mean 0.3, sample std sqrt(0.04 / 3) = 0.1155 over 4 problems -> SE 0.0577, z = 5.2
    ([0.2, 0.4, 0.2, 0.4], "up by 5.2 SE, more than noise"),
    ([-0.2, -0.4, -0.2, -0.4], "down by 5.2 SE, more than noise"),
    # mean 0.05, SE 0.0289 -> z = 1.73 < 2
    ([0.0, 0.1, 0.0, 0.1], "within noise"),
])
def test_describe_change_wording(diffs, words):
    change = metrics.paired_change({i: 0.0 for i in range(4)}, dict(enumerate(diffs)))
    assert words in metrics.describe_change(change)


def test_describe_change_two_se_is_the_line():
    # z exactly at the threshold counts as more than noise; just below it does not
    change = metrics.ValidationChange(problems=64, before=0.4, before_se=0.03, after=0.5, after_se=0.03,
                                      change=0.1, change_se=0.05)
    assert change.z == 2.0 and "up by 2.0 SE" in metrics.describe_change(change)
    assert "within noise" in metrics.describe_change(change, noise_z=2.5)
    nothing = metrics.ValidationChange(64, 0.4, 0.03, 0.4, 0.03, 0.0, 0.0)
    assert nothing.z == 0.0 and "within noise" in metrics.describe_change(nothing)


def test_paired_change_needs_shared_problems():
    with pytest.raises(ValueError, match="share no problem"):
        metrics.paired_change({"a": 1.0}, {"b": 0.0})


def test_step_problem_counts_groups_by_uid_in_order_and_leaves_padding_out():
    uids = ["b", "b", "a", "a", "a", "c"]
    acc = [1, 0, 1, 1, 0, 1]
    real = [True, True, True, True, False, True]  # a padding row of group a: not a rollout
    labels = ["7", "7", "3", "3", "3", ""]
    assert metrics.step_problem_counts(uids, acc, real, labels) == [
        {"problem": "7", "k": 2, "correct": 1},
        {"problem": "3", "k": 2, "correct": 2},
        {"problem": None, "k": 1, "correct": 1},  # rows without a label: no problem named
    ]
    assert [r["problem"] for r in metrics.step_problem_counts(uids, acc, real, None)] == [None, None, None]
    with pytest.raises(ValueError, match="5 labels for 6 rows"):
        metrics.step_problem_counts(uids, acc, real, labels[:5])
