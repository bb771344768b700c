"""Each upstreamable diff in patches/ still applies to the installed verl, and the patched files compile."""

from __future__ import annotations

import py_compile
import shutil
import subprocess
from pathlib import Path

import pytest
import verl

PATCHES = sorted((Path(__file__).parent.parent / "patches").glob("*.patch"))
SITE = Path(verl.__file__).parent.parent


def test_there_are_patches_with_headers():
    assert len(PATCHES) >= 5
    for p in PATCHES:
        head = p.read_text().split("\n---\n", 1)[0]
        assert head.startswith("Target: verl 0.9.1") and "Why:" in head and "Runtime equivalent" in head, p.name


@pytest.mark.parametrize("patch", PATCHES, ids=lambda p: p.name)
def test_patch_applies_to_installed_verl(patch):
    proc = subprocess.run(["patch", "--dry-run", "-p1", "-f", "-d", str(SITE), "-i", str(patch)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_patched_verl_compiles(tmp_path):
    shutil.copytree(SITE / "verl", tmp_path / "verl", ignore=shutil.ignore_patterns("__pycache__"))
    touched = []
    for patch in PATCHES:
        proc = subprocess.run(["patch", "-p1", "-f", "-d", str(tmp_path), "-i", str(patch)], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        touched += [line.split()[1][2:] for line in patch.read_text().splitlines() if line.startswith("+++ ")]
    for rel in touched:
        py_compile.compile(str(tmp_path / rel), doraise=True)
