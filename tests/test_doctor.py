"""`isocompute doctor`: healthy exits 0; a plugin verl did not load, or that breaks on import, exits 1 with the fix."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.e2e  # each test runs the command, which checks verl in fresh processes

BREAK_TRAINER = """
import importlib.abc, sys
class _Broken(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "verl_isocompute.training.trainer":
            raise ImportError("simulated: a dependency of verl_isocompute.training.trainer is missing")
sys.meta_path.insert(0, _Broken())
"""


def doctor(env_extra: dict[str, str] | None = None, tmp_path=None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("VERL_PLATFORM", "VERL_USE_EXTERNAL_PLUGINS")}
    env.update(env_extra or {})
    return subprocess.run([sys.executable, "-m", "verl_isocompute.commands.cli", "doctor"], capture_output=True, text=True,
                          env=env, timeout=600)


def test_healthy_install():
    proc = doctor()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert all(line.startswith("ok ") for line in lines) and len(lines) == 5
    assert "7 registrations visible" in proc.stdout and "collectives=gloo" in proc.stdout


def test_plugin_disabled_names_the_variable():
    proc = doctor({"VERL_USE_EXTERNAL_PLUGINS": "none"})
    assert proc.returncode == 1
    assert "VERL_USE_EXTERNAL_PLUGINS=none keeps verl from loading this plugin" in proc.stdout
    assert "fix: unset VERL_USE_EXTERNAL_PLUGINS" in proc.stdout


def test_broken_plugin_import_is_surfaced(tmp_path):
    (tmp_path / "sitecustomize.py").write_text(BREAK_TRAINER)
    proc = doctor({"PYTHONPATH": str(tmp_path)})
    assert proc.returncode == 1
    bad = [line for line in proc.stdout.splitlines() if line.startswith("BAD")]
    assert bad and "trainer isocompute" in bad[0]  # what is missing ...
    assert "simulated: a dependency of verl_isocompute.training.trainer is missing" in bad[0]  # ... and why
    assert "fix: reinstall" in proc.stdout
