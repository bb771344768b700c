"""Installing this plugin changes nothing for verl where it is not selected.

verl ships its CPU tests (``*_on_cpu.py``) in the wheel. They run here exactly as a verl developer runs
them, with our plugin auto-loaded by ``import verl`` (and ``VERL_PLATFORM`` unset); every test that does
not pass is run again, alone (by its node id, not its whole file), with plugins disabled
(``VERL_USE_EXTERNAL_PLUGINS=none``) and must fail there too. Most of its time is the first pass.
"""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import verl

pytestmark = pytest.mark.e2e
SITE = Path(verl.__file__).parent.parent


def _run(test_ids: list[str], junit: Path, plugins: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "VERL_PLATFORM"}
    env["VERL_USE_EXTERNAL_PLUGINS"] = plugins
    subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(SITE), "-c", os.devnull,
         f"--junitxml={junit}", *test_ids],
        cwd=SITE, env=env, capture_output=True, text=True, timeout=1200,
    )
    outcomes = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        node = f"{case.get('classname')}::{case.get('name')}"
        failed = any(child.tag in ("failure", "error") for child in case)
        skipped = any(child.tag == "skipped" for child in case)
        outcomes[node] = "failed" if failed else "skipped" if skipped else "passed"
    return outcomes


def test_verl_cpu_tests_pass_the_same_with_our_plugin(tmp_path):
    files = sorted(str(p.relative_to(SITE)) for p in (SITE / "tests").rglob("*_on_cpu.py"))
    assert len(files) >= 20, "verl's wheel no longer ships its CPU tests"
    with_plugin = _run(files, tmp_path / "with.xml", plugins="auto")
    assert sum(o == "passed" for o in with_plugin.values()) >= 300
    not_passed = sorted(node for node, outcome in with_plugin.items() if outcome == "failed")
    if not_passed:
        without = _run([_node_id(node) for node in not_passed], tmp_path / "without.xml", plugins="none")
        changed = [node for node in not_passed if without.get(node) != "failed"]
        assert not changed, f"these verl tests fail only with our plugin installed: {changed}"


def _node_id(node: str) -> str:
    """junit ``classname::name`` (dotted module, maybe a class after it) -> pytest's node id, the test file
    relative to site-packages: ``path/test_x_on_cpu.py::Class::test[param]``."""
    classname, name = node.split("::", 1)
    parts = classname.split(".")
    for end in range(len(parts), 0, -1):
        candidate = Path(*parts[:end]).with_suffix(".py")
        if (SITE / candidate).is_file():
            return "::".join([str(candidate), *parts[end:], name])
    raise AssertionError(f"no test file for {classname}")
