"""Cutting oracle solutions into prefixes (verl_isocompute.guided.prefixes): boundaries, cap, skipped rows."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from verl_isocompute.guided import prefixes as P

SOLUTION = "Let x = 3.\nThen 2x = 6.\nAdd 1: 7.\nCheck: 7 - 1 = 6.\nSo 2x + 1 = 7.\nThe answer is \\boxed{7}.\n"


def test_lines_are_the_steps_and_join_back():
    steps = P.split_steps(SOLUTION)
    assert steps[0] == "Let x = 3.\n" and len(steps) == 6
    assert "".join(steps) == SOLUTION


def test_blank_lines_stay_with_the_step_before():
    text = "\nStep one.\n\nStep two.\n"
    assert P.split_steps(text) == ["\nStep one.\n\n", "Step two.\n"]


def test_one_line_falls_back_to_sentences():
    text = "First we add. Then we check! Is it right? Yes it is."
    assert P.split_steps(text) == ["First we add. ", "Then we check! ", "Is it right? ", "Yes it is."]


def test_ladder_is_capped_shortest_first_and_never_whole():
    ladder = P.prefix_ladder(SOLUTION, max_fraction=0.5)
    assert [p.steps for p in ladder] == list(range(1, len(ladder) + 1))
    assert all(p.fraction <= 0.5 for p in ladder)
    assert all(SOLUTION.startswith(p.text) and p.text.endswith("\n") for p in ladder)
    assert all(p.fraction == pytest.approx(len(p.text) / len(SOLUTION)) for p in ladder)
    assert len(P.prefix_ladder(SOLUTION, max_fraction=1.0)) == len(P.split_steps(SOLUTION)) - 1


def test_prefix_at_takes_the_longest_within_the_fraction_and_the_cap():
    ladder = P.prefix_ladder(SOLUTION, max_fraction=1.0)
    f = (ladder[1].fraction + ladder[2].fraction) / 2
    assert P.prefix_at(SOLUTION, f, max_fraction=1.0) == ladder[1]
    assert P.prefix_at(SOLUTION, 1.0, max_fraction=0.25).fraction <= 0.25  # the cap wins over the asked fraction
    assert P.prefix_at(SOLUTION, 0.01, max_fraction=1.0) == ladder[0]  # shortest natural prefix


@pytest.mark.parametrize(
    ("solution", "reason"),
    [
        (None, P.MISSING),
        (3.5, P.NOT_TEXT),
        ("   \n", P.EMPTY),
        ("x = 7", P.ONE_STEP),
        ("A very long first line that is most of the text.\nok\n", P.OVER_CAP),
    ],
)
def test_unusable_solutions_are_counted_not_raised(solution, reason):
    assert P.skip_reason(solution) == reason
    assert P.prefix_at(solution, 0.25) is None
    out, skipped = P.prefixes_for([solution, SOLUTION], fraction=0.25)
    assert out[0] is None and out[1] is not None and skipped == {reason: 1}


def test_dotted_lookup():
    row = {"extra_info": {"solution": "s"}, "answer": None}
    assert P.lookup(row, "extra_info.solution") == "s"
    assert P.lookup(row, "extra_info.missing") is None and P.lookup(row, "answer.x") is None


@pytest.mark.parametrize("bad", [0, -0.1, 1.5])
def test_bad_fraction_names_the_argument(bad):
    with pytest.raises(ValueError, match="fraction"):
        P.prefix_at(SOLUTION, bad)


@given(st.lists(st.text(alphabet="ab .\n", min_size=0, max_size=12), min_size=1, max_size=8), st.floats(0.05, 1.0))
def test_every_prefix_is_a_proper_prefix_within_the_cap(parts, cap):
    solution = "".join(parts)
    assert "".join(P.split_steps(solution)) == solution
    if P.skip_reason(solution, cap) is None:
        for p in P.prefix_ladder(solution, cap):
            assert solution.startswith(p.text) and 0 < len(p.text) < len(solution) and p.fraction <= cap


def test_abbreviations_and_initials_end_no_sentence():
    """A one-line solution is cut at sentence ends, not inside "e.g. ", "Dr. ", "i.e. " or an initial "J. "."""
    text = "We add the tens first, e.g. 40 + 30. Dr. Who checks it, i.e. 70 is right. J. Smith agrees. So 70."
    assert P.split_steps(text) == ["We add the tens first, e.g. 40 + 30. ", "Dr. Who checks it, i.e. 70 is right. ",
                                   "J. Smith agrees. ", "So 70."]
    assert "".join(P.split_steps(text)) == text


def test_copies_spread_over_the_ladder_and_end_at_the_fixed_fraction():
    """PrefixRL varies the prefix length: copies at evenly spread rungs, the longest being prefix_at's."""
    one = P.prefixes_at(SOLUTION, 0.7, 0.7)
    assert one == [P.prefix_at(SOLUTION, 0.7, 0.7)]
    rungs = len([p for p in P.prefix_ladder(SOLUTION, 0.7)])
    two = P.prefixes_at(SOLUTION, 0.7, 0.7, copies=2)
    assert [p.steps for p in two] == [(rungs + 1) // 2, rungs] and two[-1] == one[0]
    assert [p.steps for p in P.prefixes_at(SOLUTION, 0.7, 0.7, copies=99)] == list(range(1, rungs + 1))  # fewer when short
    assert P.prefixes_at("no steps", 0.5) == []
    with pytest.raises(ValueError, match="copies=0"):
        P.prefixes_at(SOLUTION, 0.5, copies=0)


def test_token_cuts_keep_the_first_h_ids():
    """PrefixRL's token cut: the first h of n kept ids, h = floor(n * fraction * j / copies), text decoded."""
    cuts = P.token_prefixes(range(100, 140), 0.5, 0.5, copies=2, decode=lambda ids: f"<{len(ids)}>")
    assert [(c.steps, c.fraction, c.text) for c in cuts] == [(10, 0.25, "<10>"), (20, 0.5, "<20>")]
    assert cuts[0].token_ids == tuple(range(100, 110))
    assert P.token_prefixes(range(40), 0.9, 0.25)[0].steps == 10  # capped at max_fraction
    assert P.token_prefixes([], 0.25) == P.EMPTY and P.token_prefixes([1, 2, 3], 0.25) == P.OVER_CAP
