"""Fact groups and fact-grouped splits (verl_isocompute.data.facts), and the generator's distinct_facts option."""

import pandas as pd
import pytest

from verl_isocompute.data.arithmetic import ArithmeticConfig, _problems
from verl_isocompute.data.facts import TRIVIAL, fact_group, first_of_each_fact, split_by_fact

PRODUCT = "Solve the following multiplication: {}. Give only the result as your final answer."

GROUPS = [
    (PRODUCT.format("3 * 4"), "*:3,4"),
    (PRODUCT.format("4 * 3"), "*:3,4"),  # a reordering
    (PRODUCT.format("1 * 4 * 3"), "*:3,4"),  # a x1 variant
    (PRODUCT.format("2 * 2 * 3"), "*:2,2,3"),  # a multiset, not a set
    (PRODUCT.format("0 * 9 * 8"), TRIVIAL),  # x0: the answer is 0 whatever the rest
    (PRODUCT.format("7 * 1"), TRIVIAL),  # one factor left
    ("Calculate 5 + 0 + 2.", "+:2,5"),  # a +0 variant of 2 + 5
    ("Calculate 2 + 5.", "+:2,5"),
    ("Calculate 7 - 2.", "seq:7,2:-"),  # not commutative: no merging
    ("Calculate 2 - 7.", "seq:2,7:-"),
    ("Calculate 2 - -1.", "seq:2,-1:-"),
    ("Calculate 47 + 86 - 39.", "seq:47,86,39:+-"),  # mixed operators
]


@pytest.mark.parametrize("question, group", GROUPS)
def test_fact_group(question, group):
    assert fact_group(question) == group


def _pool() -> pd.DataFrame:
    questions = [PRODUCT.format(f"{a} * {b}") for a in range(0, 10) for b in range(0, 10)]
    return pd.DataFrame({"question": questions, "answer": [str(eval(q.split(": ")[1].split(".")[0])) for q in questions]})


def test_a_split_never_shares_a_fact_and_sets_trivial_ones_apart():
    split = split_by_fact(_pool(), {"tune": 0.2, "dev": 0.3, "test": 0.5}, seed=1)
    assert split.groupby("fact_group")["split"].nunique().max() == 1  # 3 * 4 and 4 * 3 on one side
    trivial = split[split["split"] == TRIVIAL]
    assert set(trivial["fact_group"]) == {TRIVIAL} and len(trivial) == 19 + 17  # a factor 0; a factor 1 (1 * 1 too)
    sizes = split[split["split"] != TRIVIAL]["split"].value_counts()
    assert sizes.sum() == 64
    for name, share in {"tune": 0.2, "dev": 0.3, "test": 0.5}.items():
        assert abs(sizes[name] - share * 64) <= 2, (name, sizes[name])  # groups hold 1 or 2 problems


def test_a_split_is_seeded():
    shares = {"dev": 0.5, "test": 0.5}
    assert split_by_fact(_pool(), shares, seed=3).equals(split_by_fact(_pool(), shares, seed=3))
    assert not split_by_fact(_pool(), shares, seed=3).equals(split_by_fact(_pool(), shares, seed=4))


@pytest.mark.parametrize("shares", [{}, {"dev": 0.5, "test": 0.6}, {"dev": 1.0, TRIVIAL: 0.0}, {"dev": 0.0, "test": 1.0}])
def test_bad_shares_are_refused(shares):
    with pytest.raises(ValueError, match="split"):
        split_by_fact(_pool(), shares)


def test_first_of_each_fact_keeps_one_problem_per_non_trivial_fact():
    kept = first_of_each_fact(_pool())
    assert len(kept) == 36 and kept["fact_group"].is_unique and TRIVIAL not in set(kept["fact_group"])
    assert kept["question"].iloc[0] == PRODUCT.format("2 * 2")


def test_the_generator_draws_problems_with_distinct_facts():
    spec = ArithmeticConfig(task="products", max_digits=2, distinct_facts=True, prompt="worked_example")
    groups = [fact_group(p["question"]) for p in _problems(spec, 60)]
    assert len(set(groups)) == 60 and TRIVIAL not in groups
    assert spec.name.endswith("-facts") and not ArithmeticConfig(task="products").name.endswith("-facts")


def test_a_generator_space_with_too_few_facts_names_the_fix():
    spec = ArithmeticConfig(task="products", max_digits=1, distinct_facts=True)
    with pytest.raises(ValueError, match="distinct_facts: .* ask for fewer problems"):
        _problems(spec, 100)  # one-digit pairs hold 36 non-trivial facts
