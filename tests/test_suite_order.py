"""The suite's own scheduling: conftest puts the long e2e files first so the two workers of the README's test
command (``-n 2 --dist loadfile``) stay busy to the end."""

from pathlib import Path

import pytest

from conftest import LONGEST_FIRST


def test_the_longest_first_order_names_test_files_that_exist():
    """A renamed file would drop out of the order silently and could run last, alone on one worker."""
    tests = Path(__file__).parent
    assert [name for name in LONGEST_FIRST if not (tests / name).is_file()] == []
    assert len(set(LONGEST_FIRST)) == len(LONGEST_FIRST)


def test_collection_puts_the_listed_files_first_in_their_order(pytestconfig):
    """What this very session collected (any subset of the suite): listed files first, in the listed order."""
    files = list(dict.fromkeys(item.path.name for item in pytestconfig.pluginmanager.get_plugin("session").items))
    listed = [name for name in files if name in LONGEST_FIRST]
    assert files[:len(listed)] == sorted(listed, key=LONGEST_FIRST.index)


def test_xdist_keeps_the_collection_order(pytestconfig):
    """Left on, xdist's --dist loadfile sorts files by their number of tests, undoing LONGEST_FIRST."""
    pytest.importorskip("xdist")
    assert pytestconfig.option.loadscopereorder is False
