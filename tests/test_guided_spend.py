"""The spend file: stages set per problem (never added twice on a re-run), summed over files, restricted to the
problems a run trains on, bad and old files named."""

import json

import pytest

from verl_isocompute.guided import spend

S = spend.Spend


def test_write_sets_stage_totals_and_keeps_other_stages(tmp_path):
    spend.write(tmp_path, spend.REJECTION_SAMPLING, {"a": S(60, 3000), "b": S(40, 2000)})
    spend.write(tmp_path, spend.PREFIX_SEARCH, {"a": S(40, 900)})
    spend.write(tmp_path, spend.REJECTION_SAMPLING, {"a": S(80, 4000), "b": S(40, 2000)})  # a resumed run: recomputed
    assert spend.read(tmp_path) == {"rejection_sampling": S(120, 6000), "prefix_search": S(40, 900)}
    assert spend.read(tmp_path / "spend.json") == spend.read(tmp_path)
    assert spend.read_problems(tmp_path)["rejection_sampling"] == {"a": S(80, 4000), "b": S(40, 2000)}


def test_per_problem_sums_records_by_id():
    records = [{"id": "a", "k": 4, "response_tokens": [1, 2, 3, 4]}, {"id": "b", "k": 2, "response_tokens": [5, 5]},
               {"id": "a", "k": 4, "response_tokens": [1, 1, 1, 1]}]
    assert spend.per_problem(records) == {"a": S(8, 14), "b": S(2, 10)}


def test_total_sums_files_once_and_counts_only_the_problems_asked(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    spend.write(a, spend.CURATION, {"p": S(4, 40), "q": S(6, 60)})
    spend.write(b, spend.CURATION, {"p": S(5, 50)})
    spend.write(b, spend.PREFIX_SEARCH, {"q": S(7, 70), "r": S(1, 1)})
    assert spend.total([a, b, a / "spend.json"]) == {"curation": S(15, 150), "prefix_search": S(8, 71)}
    assert spend.total([a, b], problems={"p"}) == {"curation": S(9, 90), "prefix_search": S(0, 0)}
    assert spend.total([tmp_path / "none"]) == {}


def test_columns_add_guidance_then_curation():
    stages = {"curation": S(100, 1000), "rejection_sampling": S(10, 200), "prefix_search": S(5, 50)}
    assert spend.with_guidance(40, 400, stages) == {
        "rollouts_with_guidance": 55, "tokens_with_guidance": 650, "rollouts_with_curation": 155, "tokens_with_curation": 1650}
    assert spend.with_guidance(40, 400, {"curation": S(100, 1000)}) == {  # an unguided baseline with its curation
        "rollouts_with_guidance": 40, "tokens_with_guidance": 400, "rollouts_with_curation": 140, "tokens_with_curation": 1400}


def test_bad_file_old_file_and_bad_stage_are_named(tmp_path):
    (tmp_path / "spend.json").write_text(json.dumps({"stages": {"curation": {"rollouts": "x"}}}))
    with pytest.raises(spend.SpendError, match="spend.json: not a spend file"):
        spend.read(tmp_path)
    old = tmp_path / "old"
    old.mkdir()
    (old / "spend.json").write_text(json.dumps({"stages": {"curation": {"rollouts": 4, "tokens": 40}}}))
    assert spend.total([old]) == {"curation": S(4, 40)}
    with pytest.raises(spend.SpendError, match="no per-problem spend .*re-run the tool that wrote it"):
        spend.total([old], problems={"p"})
    with pytest.raises(ValueError, match="stage='training'"):
        spend.write(tmp_path / "new", "training", {"p": S(1, 1)})
    with pytest.raises(ValueError, match=">= 0"):
        spend.write(tmp_path / "new", spend.CURATION, {"p": S(-1, 0)})
