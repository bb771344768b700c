"""Atomic writes: the previous file survives a failed write; staging stays inside the output dir."""

import os
import stat

import pytest

from verl_isocompute import atomic


def test_failed_write_leaves_the_previous_file_and_no_temporary(tmp_path):
    target = tmp_path / "curve.json"
    atomic.write_json(target, {"a": 1})
    with pytest.raises(RuntimeError):
        with atomic.replacing(target) as tmp:
            tmp.write_text("half")
            raise RuntimeError("disk full")
    assert target.read_text() == '{\n  "a": 1\n}\n'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["curve.json"]


def test_replace_is_a_rename_not_an_in_place_write(tmp_path):
    target = tmp_path / "state.json"
    atomic.write_json(target, {"a": 1})
    before = os.stat(target).st_ino
    atomic.write_json(target, {"a": 2})
    # a plain write keeps the inode; a rename of a new file gives another one
    assert os.stat(target).st_ino != before and target.read_text() == '{\n  "a": 2\n}\n'


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores directory permissions")
def test_staged_dir_works_under_a_read_only_parent(tmp_path):
    out = tmp_path / "parent" / "out"
    out.mkdir(parents=True)
    os.chmod(out.parent, stat.S_IRUSR | stat.S_IXUSR)
    try:
        with atomic.staged_dir(out) as staging:
            (staging / "report.md").write_text("ok")
        assert (out / "report.md").read_text() == "ok"
    finally:
        os.chmod(out.parent, stat.S_IRWXU)


def test_staged_dir_changes_nothing_on_error(tmp_path):
    (tmp_path / "curve.json").write_text("old")
    with pytest.raises(ValueError):
        with atomic.staged_dir(tmp_path) as staging:
            (staging / "curve.json").write_text("new")
            raise ValueError
    assert sorted(p.name for p in tmp_path.iterdir()) == ["curve.json"]
    assert (tmp_path / "curve.json").read_text() == "old"
