"""The package's one set of number checks (verl_isocompute.numeric), as a plan, a curve file and the
allocation read them: YAML 1.1's "1e6" string, bools, NaN and integral floats."""

from __future__ import annotations

import math

import pytest

from verl_isocompute.numeric import as_count, integral, is_positive, is_real, yaml_number
from verl_isocompute.workflow.sweep.plan import PlanError, parse_plan


@pytest.mark.parametrize("value, expected", [("1e6", 1e6), (" 1_000 ", 1000.0), ("6.5e4", 65000.0), ("abc", "abc"),
                                             (3, 3), (None, None), (True, True)])
def test_yaml_number_reads_a_string_written_as_a_number(value, expected):
    assert yaml_number(value) == expected and type(yaml_number(value)) is type(expected)


def test_bools_nan_and_infinity_are_not_numbers():
    assert is_real(0) and is_real(-2.5) and not any(map(is_real, (True, math.nan, math.inf, "6.0", None)))
    assert is_positive(1e-9) and not any(map(is_positive, (0, -1, True, math.inf)))


def test_a_count_may_be_an_integral_float():
    assert integral(6.5e4) == 65000 and type(integral(6.5e4)) is int and integral(6.5) == 6.5
    assert as_count(8.0) == 8 and as_count(0, minimum=0) == 0
    assert [as_count(v) for v in (0, 0.0, 6.5, True, "8", math.nan, math.inf)] == [None] * 7


def test_a_plan_reads_a_yaml_1e6_budget_and_names_a_bad_one():
    plan = parse_plan({"recipe": "cpu_demo", "budget_rollouts": "1e6"})
    assert plan.budget_rollouts == 1_000_000
    with pytest.raises(PlanError, match=r"budget_rollouts must be a positive integer.*got 0$"):
        parse_plan({"recipe": "cpu_demo", "budget_rollouts": "0.0"})
