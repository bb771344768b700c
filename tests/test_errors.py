"""One error base: every error of the package meant for the user is an IsoComputeError, and ``isocompute``
reports one that a subcommand did not in one line with exit status 2."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

from verl_isocompute.commands import cli
from verl_isocompute.errors import IsoComputeError

PACKAGE = Path(__file__).resolve().parent.parent / "verl_isocompute"
# Errors that are not bad input: a broken invariant of a running verl step (a bug, with its traceback), and
# a signal the rollout code catches itself.
NOT_FOR_THE_USER = {"StaleRolloutError", "PrefixCheckError", "ProblemTooLong"}


def _error_classes() -> list[tuple[str, str]]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__")
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ClassDef) and node.name.endswith("Error") and node.name != "IsoComputeError":
                found.append((module, node.name))
    return found


def test_every_error_for_the_user_is_an_isocompute_error_and_keeps_its_builtin_base():
    classes = _error_classes()
    assert len(classes) >= 15
    for module, name in classes:
        cls = getattr(importlib.import_module(module), name)
        if name in NOT_FOR_THE_USER:
            continue
        assert issubclass(cls, IsoComputeError), f"{module}.{name}"
        assert issubclass(cls, (ValueError, RuntimeError)), f"{module}.{name}"


def test_the_command_reports_an_error_a_subcommand_raised_in_one_line(monkeypatch, capsys):
    from verl_isocompute.commands import doctor
    from verl_isocompute.scaling.curve import CurveError

    def run(args):
        raise CurveError("curve.json: no 'L'; refit with isocompute fit")

    monkeypatch.setattr(doctor, "run", run)
    assert cli.main(["doctor"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == "isocompute doctor: error: curve.json: no 'L'; refit with isocompute fit\n"


def test_other_exceptions_are_not_swallowed(monkeypatch):
    from verl_isocompute.commands import doctor

    def run(args):
        raise KeyError("a bug")

    monkeypatch.setattr(doctor, "run", run)
    with pytest.raises(KeyError):
        cli.main(["doctor"])


def test_only_the_command_catches_the_package_errors_and_prints_refusals():
    """The subcommands leave an IsoComputeError to ``isocompute`` (commands.cli.run_command) and print a refusal
    only through commands.cli.error: no ``except IsoComputeError`` and no hand-written ``PROG: error:`` line."""
    found = []
    for path in sorted((PACKAGE / "commands").glob("*.py")):
        if path.name == "cli.py":
            continue
        text = path.read_text()
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ExceptHandler) and node.type is not None:
                names = [n.id for n in ast.walk(node.type) if isinstance(n, ast.Name)]
                if "IsoComputeError" in names:
                    found.append(f"{path.name}:{node.lineno} catches IsoComputeError")
        if ": error: " in text:
            found.append(f"{path.name} prints its own error line")
    assert found == []


def test_fit_run_as_a_module_reports_a_package_error_in_one_line(tmp_path, capsys):
    from verl_isocompute.commands import fit

    assert fit.main([str(tmp_path / "missing"), "--out", str(tmp_path / "out"), "--compare", "paper:no-such-curve"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("isocompute fit: error: ") and err.count("\n") == 1
