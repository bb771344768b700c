"""The prefix-search rules (verl_isocompute.guided.search_rules): POPE's shortest success, PrefixRL's band, resuming."""

from __future__ import annotations

import pytest

from verl_isocompute.guided import search_rules as S


def rec(pid, rung, correct, k=8):
    return {"id": pid, "rung": rung, "k": k, "correct": correct}


def test_pope_climbs_to_the_first_success():
    assert S.decide({}, 3) == S.Decision(S.PENDING, 1)
    assert S.decide({1: rec("a", 1, 0)}, 3) == S.Decision(S.PENDING, 2)
    assert S.decide({1: rec("a", 1, 0), 2: rec("a", 2, 1)}, 3) == S.Decision(S.CHOSEN, 2)
    assert S.decide({1: rec("a", 1, 0), 2: rec("a", 2, 0), 3: rec("a", 3, 0)}, 3) == S.Decision(S.EXHAUSTED, None)
    assert S.decide({}, 0) == S.Decision(S.EXHAUSTED, None)  # no prefix within the cap


@pytest.mark.parametrize(("corrects", "expected"), [
    ([0, 4], S.Decision(S.CHOSEN, 2)),   # climbs past a too-hard rung into the band
    ([8], S.Decision(S.CHOSEN, 1)),      # already too easy at the shortest prefix: nothing shorter exists
    ([1, 8], S.Decision(S.CHOSEN, 1)),   # jumped over [0.25, 0.75]: 1/8 is 0.125 below, 8/8 is 0.25 above
    ([0, 7], S.Decision(S.CHOSEN, 2)),   # 0 is 0.25 below, 7/8 is 0.125 above
    ([0, 1, 0], S.Decision(S.EXHAUSTED, None)),
])
def test_band_rule(corrects, expected):
    outcomes = {r: rec("a", r, c) for r, c in enumerate(corrects, start=1)}
    assert S.decide(outcomes, 3, rule=S.BAND, band=(0.25, 0.75)) == expected


def test_rounds_resume_from_the_records():
    ladders = {"a": 3, "b": 2, "c": 0}
    records = []
    assert S.next_rungs(ladders, records) == {"a": 1, "b": 1}
    records += [rec("a", 1, 0), rec("b", 1, 2)]
    assert S.next_rungs(ladders, records) == {"a": 2}  # b is chosen; a climbs
    records += [rec("a", 2, 0), rec("a", 3, 0), rec("zzz", 1, 1)]  # a record of an unknown problem is ignored
    final = S.decisions(ladders, records)
    assert final == {"a": S.Decision(S.EXHAUSTED, None), "b": S.Decision(S.CHOSEN, 1), "c": S.Decision(S.EXHAUSTED, None)}
    assert S.next_rungs(ladders, records) == {}


@pytest.mark.parametrize(("kw", "match"), [({"rule": "greedy"}, "rule"), ({"band": (0.8, 0.2)}, "band")])
def test_bad_rule_or_band(kw, match):
    with pytest.raises(ValueError, match=match):
        S.decide({}, 2, **kw)
