"""docs/PAPERS.md, the paper index: every file, code name and test it cites exists, and every claim names a test.

A row's test cell holds pytest node ids (``tests/test_x.py::test_name``); a renamed or deleted test, or a moved
module, breaks the index here rather than silently.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
INDEX = ROOT / "docs" / "PAPERS.md"
CITED = re.compile(r"`((?:verl_isocompute|tests|recipes|docs|run_examples|benchmarks)/[^`\s]+)`")


def _names(path: Path) -> set[str]:
    """Top-level names a Python file defines (functions, classes, assignments) and ``Class::method``."""
    names: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.ClassDef):
            names.add(node.name)
            names |= {f"{node.name}::{m.name}" for m in node.body if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))}
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {t.id for t in targets if isinstance(t, ast.Name)}
    return names


def missing(text: str, root: Path = ROOT) -> list[str]:
    """The cited paths and names of ``text`` that do not exist under ``root``."""
    gone = []
    for cited in sorted(set(CITED.findall(text))):
        path, _, name = cited.partition("::")
        if not (root / path).exists():
            gone.append(cited)
        elif name and name.split("[")[0] not in _names(root / path):
            gone.append(cited)
    return gone


def rows_without_a_test(text: str) -> list[str]:
    """Rows of the tables with a ``test`` column whose test cell cites no test."""
    bad, column = [], None
    for line in text.splitlines():
        if not line.startswith("|"):
            column = None
            continue
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]  # `\|` is a cell's own bar
        if column is None:
            column = cells.index("test") if "test" in cells else -1
        elif column >= 0 and not set(cells[0]) <= set("-") and not re.search(r"`tests/[^`]+::", cells[column]):
            bad.append(cells[0])
    return bad


def test_every_cited_file_code_name_and_test_exists():
    assert missing(INDEX.read_text()) == []


def test_every_claim_names_a_test():
    text = INDEX.read_text()
    assert rows_without_a_test(text) == []
    assert len(re.findall(r"`tests/[^`]+::", text)) >= 45


def test_the_checks_catch_a_renamed_test_and_a_row_without_one(tmp_path):
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_a.py").write_text("def test_kept():\n    pass\n")
    text = (
        "| claim | test |\n|---|---|\n| kept | `tests/test_a.py::test_kept` |\n| renamed | `tests/test_a.py::test_old` |\n"
        "| untested | `tests/test_a.py` |\n"
    )
    assert missing(text, tmp_path) == ["tests/test_a.py::test_old"]
    assert rows_without_a_test(text) == ["untested"]
