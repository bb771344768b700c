"""The literal grader and the format diagnostics (verl_isocompute.rules.answers, format_metrics), through the
reward verl calls, and the setting's path from the recipe to verl's reward worker."""

import pytest

from verl_isocompute.rules import answers, format_metrics, reward
from verl_isocompute.training.config import RecipeError, check_config, compose_recipe
from verl_isocompute.rules.metrics import validation_samples

OURS = "isocompute/arithmetic"
QUESTION = "Solve the following multiplication: 3 * 4. Give only the result as your final answer."

# (case, response, ground truth, score under literal, score under equivalent, answered, echo, lenient)
CASES = [
    ("echo in prose", "The answer is 3 * 4.", "12", 0, 1, 1, 1, 0),
    ("echo boxed", "\\boxed{3 * 4}", "12", 0, 1, 1, 1, 0),
    ("echo reordered", "\\boxed{4*3}", "12", 0, 1, 1, 1, 0),
    ("equation in the box", "\\boxed{3*4=12}", "12", 0, 1, 1, 1, 1),
    ("another expression", "\\boxed{2*6}", "12", 0, 1, 1, 0, 0),
    ("bare number", "12", "12", 1, 1, 1, 0, 1),
    ("bare number, final period", "12.", "12", 1, 1, 1, 0, 1),
    ("boxed", "3 * 4 = 12. The answer is \\boxed{12}.", "12", 1, 1, 1, 0, 1),
    ("answer marker", "3 * 4 = 12. The answer is 12.", "12", 1, 1, 1, 0, 1),
    ("wrong", "\\boxed{13}", "12", 0, 0, 1, 0, 0),
    ("right number, no answer form", "3 * 4 = 12", "12", 0, 0, 0, 0, 1),
    ("no answer", "I cannot do this.", "12", 0, 0, 0, 0, 0),
    ("negative", "\\boxed{-5}", "-5", 1, 1, 1, 0, 1),
    ("negative, wrong sign", "\\boxed{5}", "-5", 0, 0, 1, 0, 0),
    ("negative after a binary minus", "2 - 7 = -5. The answer is -5.", "-5", 1, 1, 1, 0, 1),
    ("decimal", "The answer is 2.50", "2.5", 1, 1, 1, 0, 1),
    ("decimal for an integer", "\\boxed{12.0}", "12", 1, 1, 1, 0, 1),
    ("thousands commas", "\\boxed{1,234}", "1234", 1, 1, 1, 0, 1),
]


@pytest.mark.parametrize("case, response, truth, literal, equivalent, answered, echo, lenient", CASES,
                         ids=[c[0] for c in CASES])
def test_literal_and_equivalent_grading(case, response, truth, literal, equivalent, answered, echo, lenient):
    info = {"question": QUESTION, "index": 7}
    ours = reward.compute_score(data_source=OURS, solution_str=response, ground_truth=truth, extra_info=info)
    assert ours["score"] == literal and ours["acc"] == bool(literal)
    # the diagnostics do not depend on the grading
    assert (ours["answered"], ours["echo"], ours["lenient"], ours["problem"]) == (answered, echo, lenient, "7")
    users = reward.compute_score(data_source="gsm8k", solution_str=response, ground_truth=truth, extra_info=info)
    assert users["score"] == equivalent
    forced = reward.compute_score(data_source="gsm8k", solution_str=response, ground_truth=truth, answer="literal")
    assert forced["score"] == literal


def test_the_issue_examples_score_0_on_every_generated_source():
    for source in answers.LITERAL_SOURCES:
        for response, truth in (("The answer is 3 * 4.", "12"), ("\\boxed{3 * 4}", "12"), ("\\boxed{4*1*7}", "28"),
                                ("\\boxed{2+3}", "5")):
            assert reward.compute_score(source, response, truth)["score"] == 0.0, (source, response)
        # the setting forces math-verify back on
        assert reward.compute_score(source, "\\boxed{3 * 4}", "12", answer="equivalent")["score"] == 1.0


def test_answer_mode_defaults_per_source_and_refuses_unknown_values():
    assert answers.answer_mode(None, OURS) == answers.answer_mode("auto", OURS) == "literal"
    assert answers.answer_mode("auto", "reasoning_gym/products") == "literal"
    assert answers.answer_mode("auto", "openai/gsm8k") == "equivalent"
    assert answers.answer_mode("equivalent", OURS) == "equivalent"
    with pytest.raises(answers.RewardSettingError, match=r"isocompute.reward.answer='exact': use one of auto"):
        answers.answer_mode("exact", OURS)


def test_literal_grading_of_a_non_numeric_reference_names_the_fix():
    with pytest.raises(answers.RewardSettingError, match="set isocompute.reward.answer=equivalent"):
        reward.compute_score("mine", "\\boxed{x+1}", "x+1", answer="literal")


def test_echo_needs_the_questions_numbers_and_an_operator():
    assert answers.echoes_question("4 * 1 * 7", "Calculate 4 * 1 * 7.")
    assert answers.echoes_question("-9 - 8", "Calculate ( -9 - 8 ).")
    assert not answers.echoes_question("4 * 7", "Calculate 4 * 1 * 7.")  # a different expression
    assert not answers.echoes_question("28", "Calculate 4 * 1 * 7.")  # the value
    assert not answers.echoes_question("3 * 4", None)  # no question to compare with


def test_the_recipe_hands_the_setting_to_verls_reward_worker():
    cfg = compose_recipe("cpu_demo")
    assert cfg.reward.custom_reward_function.reward_kwargs.answer == "auto"
    cfg = compose_recipe("cpu_demo", ["isocompute.reward.answer=equivalent"])
    assert cfg.reward.custom_reward_function.reward_kwargs.answer == "equivalent"
    with pytest.raises(RecipeError, match="isocompute.reward.answer='exact'"):
        check_config(compose_recipe("isocompute_hard", ["isocompute.reward.answer=exact"]))


def _samples():
    """Two problems x 2 samples (one sample of problem b failed), with the reward's flags."""
    flags = {"answered": [1.0, 1.0, 0.0], "echo": [1.0, 0.0, 0.0], "lenient": [0.0, 1.0, 1.0], "problem": ["3", "3", "5"]}
    samples, failed = validation_samples(["a", "a", "b"], ["s"] * 3, [0.0, 1.0, 0.0], default_n=2, extra=flags)
    assert failed == 1
    return samples


def test_format_rates_count_a_failed_sample_as_unanswered_and_wrong():
    rates = format_metrics.format_metrics(_samples())
    assert rates["val/strict_acc"] == 0.25
    assert rates["val/answer_rate"] == 0.5
    assert rates["val/echo_rate"] == 0.25
    assert rates["val/lenient_acc"] == 0.5
    assert rates["val/lenient_acc/s"] == 0.5


def test_problem_counts_one_record_per_problem_with_its_stable_label():
    assert format_metrics.problem_counts(_samples(), step=4) == [
        {"step": 4, "data_source": "s", "problem": "3", "k": 2, "correct": 1, "answered": 2, "echo": 1, "lenient": 1},
        {"step": 4, "data_source": "s", "problem": "5", "k": 2, "correct": 0, "answered": 0, "echo": 0, "lenient": 1},
    ]


def test_a_reward_without_flags_gets_no_format_metrics():
    samples, _ = validation_samples(["a"], ["s"], [1.0], default_n=1)
    assert not format_metrics.has_flags(samples)


def test_a_users_reward_function_without_the_answer_keyword_is_refused_before_ray(tmp_path):
    """The recipes pass ``answer`` to the reward function; one written to verl's documented signature (no
    ``**kwargs``) would fail in every reward worker, so it is refused in one line naming both fixes."""
    (tmp_path / "plain.py").write_text("def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
                                       "    return 0.0\n")
    (tmp_path / "kw.py").write_text("def compute_score(data_source, solution_str, ground_truth, **kwargs):\n"
                                    "    return 0.0\n")
    base = ["+platform=cpu", "isocompute.model=tiny", f"isocompute.run_dir={tmp_path}/run"]
    path = f"reward.custom_reward_function.path={tmp_path}/plain.py"
    with pytest.raises(RecipeError, match=r"takes no keyword 'answer'.*~reward\.custom_reward_function\.reward_kwargs\.answer"):
        check_config(compose_recipe("isocompute_hard", [*base, path]))
    check_config(compose_recipe("isocompute_hard", [*base, path, "~reward.custom_reward_function.reward_kwargs.answer"]))
    check_config(compose_recipe("isocompute_hard", [*base, f"reward.custom_reward_function.path={tmp_path}/kw.py"]))
