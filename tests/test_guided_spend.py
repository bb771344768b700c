"""The spend file: stages set (never added twice on a re-run), summed over files, bad files named."""

import json

import pytest

from verl_isocompute.guided import spend


def test_write_sets_stage_totals_and_keeps_other_stages(tmp_path):
    spend.write(tmp_path, spend.REJECTION_SAMPLING, spend.Spend(100, 5000))
    spend.write(tmp_path, spend.PREFIX_SEARCH, spend.Spend(40, 900))
    spend.write(tmp_path, spend.REJECTION_SAMPLING, spend.Spend(120, 6000))  # a resumed run: recomputed totals
    assert spend.read(tmp_path) == {"rejection_sampling": spend.Spend(120, 6000), "prefix_search": spend.Spend(40, 900)}
    assert spend.read(tmp_path / "spend.json") == spend.read(tmp_path)


def test_total_sums_files_once(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    spend.write(a, spend.CURATION, spend.Spend(10, 100))
    spend.write(b, spend.CURATION, spend.Spend(5, 50))
    spend.write(b, spend.PREFIX_SEARCH, spend.Spend(7, 70))
    assert spend.total([a, b, a / "spend.json"]) == {"curation": spend.Spend(15, 150), "prefix_search": spend.Spend(7, 70)}
    assert spend.total([tmp_path / "none"]) == {}


def test_bad_file_and_bad_stage_are_named(tmp_path):
    (tmp_path / "spend.json").write_text(json.dumps({"stages": {"curation": {"rollouts": "x"}}}))
    with pytest.raises(spend.SpendError, match="spend.json: not a spend file"):
        spend.read(tmp_path)
    with pytest.raises(ValueError, match="stage='training'"):
        spend.write(tmp_path / "new", "training", spend.Spend(1, 1))
    with pytest.raises(ValueError, match=">= 0"):
        spend.write(tmp_path / "new", spend.CURATION, spend.Spend(-1, 0))
