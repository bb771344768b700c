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


def doctor() -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("VERL_PLATFORM", "VERL_USE_EXTERNAL_PLUGINS")}
    return subprocess.run([sys.executable, "-m", "verl_isocompute.commands.cli", "doctor"], capture_output=True, text=True,
                          env=env, timeout=600)


def doctor_here(monkeypatch, capsys, **env: str) -> tuple[int, str]:
    """`isocompute doctor` run in this process (its checks still start their own fresh processes, which inherit
    ``env``): the exit status and the table. The CPU backend and reward checks, two of the four processes it starts
    and not what the tests calling this are about, pass without running; test_healthy_install runs them all."""
    from verl_isocompute.commands import doctor as checks
    from verl_isocompute.commands.cli import main

    for name in ("VERL_PLATFORM", "VERL_USE_EXTERNAL_PLUGINS"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(checks, "check_cpu_backend", lambda: checks.Check("CPU backend", True, "not run here"))
    monkeypatch.setattr(checks, "check_reward_thread", lambda: checks.Check("reward off the main thread", True, "not run here"))
    return main(["doctor"]), capsys.readouterr().out


def test_healthy_install():  # the command as a user runs it, in a process of its own
    proc = doctor()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert all(line.startswith("ok ") for line in lines) and len(lines) == 5
    assert "7 registrations visible" in proc.stdout and "collectives=gloo" in proc.stdout


def test_plugin_disabled_names_the_variable(monkeypatch, capsys):
    rc, out = doctor_here(monkeypatch, capsys, VERL_USE_EXTERNAL_PLUGINS="none")
    assert rc == 1
    assert "VERL_USE_EXTERNAL_PLUGINS=none keeps verl from loading this plugin" in out
    assert "fix: unset VERL_USE_EXTERNAL_PLUGINS" in out


def test_broken_plugin_import_is_surfaced(tmp_path, monkeypatch, capsys):
    (tmp_path / "sitecustomize.py").write_text(BREAK_TRAINER)  # breaks the import in the checks' processes
    rc, out = doctor_here(monkeypatch, capsys, PYTHONPATH=str(tmp_path))
    assert rc == 1
    bad = [line for line in out.splitlines() if line.startswith("BAD")]
    assert bad and "trainer isocompute" in bad[0]  # what is missing ...
    assert "simulated: a dependency of verl_isocompute.training.trainer is missing" in bad[0]  # ... and why
    assert "fix: reinstall" in out
