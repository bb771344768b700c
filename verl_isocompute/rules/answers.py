"""Is a final answer the number asked for? The literal grader and the diagnostics that tell format from skill.

Pure: the standard library only. The reward (:mod:`verl_isocompute.rules.reward`) extracts the final
answer; this module judges it.

Two ways to grade (``isocompute.reward.answer``, one function reads it: :func:`answer_mode`):

- ``equivalent``: math-verify decides whether the answer is mathematically equal to the reference. Right for
  data whose answers are expressions (``\\frac{1}{2}``, ``2\\sqrt{3}``, intervals): any equal form counts.
- ``literal``: the answer must be a number written out (an integer or a decimal, with an optional sign and
  optional thousands commas) whose value is the reference's. Right for arithmetic, where the question *is* an
  expression equal to the answer: under ``equivalent`` copying the question back (``\\boxed{3 * 4}``, "The
  answer is 3 * 4.") or writing ``\\boxed{3*4=12}`` scores 1 without doing the arithmetic, a full-reward policy
  that learns nothing. Under ``literal`` those score 0; ``12``, ``12.0`` and ``\\boxed{12}`` score 1.
- ``auto`` (the default) picks per data source: ``literal`` for the numeric sources our generators write
  (:data:`LITERAL_SOURCES`), ``equivalent`` for every other (a user's dataset).

Diagnostics, per response, for the validation metrics (docs/EVIDENCE.md): whether it gave a final answer at
all (``answered``), whether that answer repeats the question's expression (``echo``: its numbers, before any
"=", are the question's numbers and it contains an operator), and whether the last number anywhere in the
response is the right value, format ignored (``lenient``). Strict accuracy (the reward) below lenient
accuracy is answers the model computed but did not write in the answer form; a high echo rate is a policy
copying the question.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from verl_isocompute.errors import IsoComputeError

ANSWER_KEY = "isocompute.reward.answer"
# Where verl's reward worker reads it: the recipes set this keyword of the reward function to ANSWER_KEY.
REWARD_KWARG = "reward.custom_reward_function.reward_kwargs.answer"
AUTO, LITERAL, EQUIVALENT = "auto", "literal", "equivalent"
ANSWER_SETTINGS = (AUTO, LITERAL, EQUIVALENT)
# The data sources our generators write, whose reference answers are integers: reasoning-gym's arithmetic as
# the recipes generate it (data/arithmetic.py: basic_arithmetic and products), our worked chains
# (data/worked.py), and the same reasoning-gym tasks through `isocompute curate --generate`.
LITERAL_SOURCES = frozenset({
    "isocompute/arithmetic",
    "isocompute/worked_arithmetic",
    "reasoning_gym/basic_arithmetic",
    "reasoning_gym/products",
})

_NUMBER = r"(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?"
_LITERAL = re.compile(rf"[+\-−]?{_NUMBER}")
# A number in running text; a minus is its sign only where it cannot be a binary minus ("7-2" is 7 and 2).
_IN_TEXT = re.compile(rf"(?:(?<![\w.)\]}}])[\-−])?(?<![\d.,]){_NUMBER}(?![\d,]*\d)")
_UNSIGNED = re.compile(r"\d+(?:\.\d+)?")
# An arithmetic operator between two numbers, or a LaTeX one.
_OPERATOR = re.compile(r"[\d)]\s*[-+*/×÷·^−]\s*[\d(\-−]|\\(?:times|cdot|div|frac)")


class RewardSettingError(IsoComputeError, ValueError):
    """A reward setting that cannot be applied (unknown value, or literal grading of a non-numeric reference)."""


def answer_mode(setting: Any, data_source: Any) -> str:
    """``literal`` or ``equivalent`` for one sample: ``setting`` is ``isocompute.reward.answer`` (None = auto)."""
    setting = AUTO if setting is None else str(setting)
    if setting == AUTO:
        return LITERAL if str(data_source) in LITERAL_SOURCES else EQUIVALENT
    if setting not in (LITERAL, EQUIVALENT):
        raise RewardSettingError(f"{ANSWER_KEY}={setting!r}: use one of {', '.join(ANSWER_SETTINGS)}")
    return setting


def number_value(text: str) -> Fraction | None:
    """The value of ``text`` if it is exactly one number written out (``-3``, ``2.50``, ``1,234``), else None."""
    text = text.strip()
    if not _LITERAL.fullmatch(text):
        return None
    return Fraction(text.replace(",", "").replace("−", "-"))


def literal_reference(ground_truth: str, where: str = "a reference answer") -> Fraction:
    """The value of a reference answer ``literal`` grading compares with; one that is not a number written out is
    a :class:`RewardSettingError` naming it (``where``: where it was found)."""
    gold = number_value(ground_truth)
    if gold is None:
        raise RewardSettingError(
            f"{ANSWER_KEY}=literal grades numbers, but {where} is {ground_truth[:60]!r}: "
            f"set {ANSWER_KEY}=equivalent (math-verify) for this data"
        )
    return gold


def literal_correct(pred: str, ground_truth: str) -> bool:
    """Is the extracted answer ``pred`` a number written out with the reference's value?"""
    gold = literal_reference(ground_truth)
    value = number_value(pred)
    return value is not None and value == gold


def bare_number(solution: str) -> str | None:
    """The response itself when it is one number and nothing else (a final period allowed), else None."""
    text = solution.strip().removesuffix(".").strip()
    return text if number_value(text) is not None else None


def echoes_question(pred: str, question: str | None) -> bool:
    """Does the final answer repeat the question's expression: an operator, and, before any "=", the same
    numbers as the question (order and signs ignored)? ``\\boxed{4*3}`` or ``3*4=12`` for "3 * 4" do."""
    if not question or not _OPERATOR.search(pred):
        return False
    left = re.split(r"=|\\approx", pred, maxsplit=1)[0]
    asked = sorted(_UNSIGNED.findall(question), key=Fraction)
    return len(asked) >= 2 and sorted(_UNSIGNED.findall(left), key=Fraction) == asked


def last_number_correct(solution: str, ground_truth: str) -> bool:
    """Lenient accuracy: is the last number anywhere in the response the reference's value (format ignored)?
    False when the reference is not a number."""
    gold = number_value(ground_truth)
    numbers = _IN_TEXT.findall(solution)
    return gold is not None and bool(numbers) and number_value(numbers[-1]) == gold


def problem_label(extra_info: Mapping | None) -> str:
    """A validation problem's name that stays the same across validations: ``extra_info.problem_id`` when the
    row carries one, else its ``extra_info.index`` ("" when it has neither)."""
    info = extra_info if isinstance(extra_info, Mapping) else {}
    for key in ("problem_id", "index"):
        if info.get(key) is not None:
            return str(info[key])
    return ""


def diagnostics(pred: str, solution: str, ground_truth: str, extra_info: Mapping | None) -> dict[str, Any]:
    """The reward's format diagnostics of one response (the module docstring): ``answered``, ``echo`` (against
    ``extra_info.question``; 0 when the row has none), ``lenient`` as 0/1, and the ``problem`` label."""
    info = extra_info if isinstance(extra_info, Mapping) else {}
    return {
        "answered": float(bool(pred)),
        "echo": float(echoes_question(pred, info.get("question"))),
        "lenient": float(last_number_correct(solution, ground_truth)),
        "problem": problem_label(info),
    }
