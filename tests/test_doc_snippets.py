"""Every shell and Python snippet of README.md and docs/ runs as written, or is marked with a reason this test
checks (issue 19, section 5): a documented command cannot drift from the code again.

How each mode is tested: tests/doc_snippets.py. Cheap by design: `isocompute` commands run in this process,
verl launches are composed and resolved in this process (`--cfg job --resolve`, no Ray), Python blocks run in
a sandbox with a synthetic sweep and its fits. The snippets that train are run for real by the e2e tests named
in their markers (tests/test_stock_e2e.py, tests/test_e2e_cpu.py, tests/test_user_config_e2e.py), in the runs
those tests make anyway.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from doc_snippets import (
    PLACEHOLDERS,
    REASONS,
    ROOT,
    Command,
    Snippet,
    commands,
    is_verl_launch,
    placeholders,
    snippets,
    substitute,
)
from hydra_apps import run_app

SNIPPETS = snippets()


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory, tiny_model_path, isocompute_cache) -> tuple[Path, dict[str, str]]:
    """A working directory with what the snippets name: a synthetic Easy sweep (runs/easy_sweep, runs/synthetic)
    and its fits (fits/easy, fits/synthetic), the repository's tests/ (its fixtures) and benchmarks/, and the
    placeholders' model and data."""
    from verl_isocompute.data.arithmetic import ArithmeticConfig, write_arithmetic_dataset
    from verl_isocompute.scaling import load_curve
    from verl_isocompute.scaling.pipeline import FitConfig, run_fit
    from verl_isocompute.scaling.synthetic import curves_for, synthetic_sweep, write_run_logs

    root = tmp_path_factory.mktemp("docs")
    sweep = synthetic_sweep(curves_for(load_curve("paper:qwen2.5-7b-easy")), noise=0.01)
    for name in ("easy_sweep", "synthetic"):
        write_run_logs(sweep, root / "runs" / name)
    run_fit([root / "runs" / "easy_sweep"], root / "fits" / "easy", FitConfig(bootstrap=0))
    run_fit([root / "runs" / "synthetic"], root / "fits" / "synthetic", FitConfig())  # as ALLOCATION.md's example
    (root / "tests").symlink_to(ROOT / "tests")  # committed fixtures, named from the repository's root
    (root / "benchmarks").symlink_to(ROOT / "benchmarks")  # scripts whose figures the docs quote
    train, val = write_arithmetic_dataset(isocompute_cache / "docs-data", ArithmeticConfig(train_size=64, val_size=8))
    return root, {"M": str(tiny_model_path), "T": str(train), "V": str(val)}


def test_every_snippet_is_marked():
    unmarked = [s.id for s in SNIPPETS if s.mode is None]
    assert not unmarked, f"add a <!-- snippet: MODE --> line before these blocks (tests/doc_snippets.py): {unmarked}"
    assert len(SNIPPETS) > 20


@pytest.mark.parametrize("snip", SNIPPETS, ids=[s.id for s in SNIPPETS])
def test_snippet(snip: Snippet, sandbox, monkeypatch):
    root, values = sandbox
    monkeypatch.chdir(root)
    if snip.mode == "e2e":
        _check_e2e(snip)
    elif snip.mode == "parse":
        _check_parse(snip, values)
    elif snip.mode == "output":
        _check_output(snip, values)
    elif snip.language == "python":
        assert snip.mode == "run", snip.id
        exec(compile(snip.text, snip.id, "exec"), {"__name__": "__snippet__"})
    else:
        assert snip.mode in ("run", "resolve"), snip.id
        for command in commands(snip.text):
            result = _run(command, values, resolve=snip.mode == "resolve")
            assert result.code == 0, f"{snip.id}: {command.text}\n{result.out[-2000:]}\n{result.err[-3000:]}"


# --- modes ---------------------------------------------------------------------------------------------


class _Result:
    def __init__(self, code: int, out: str, err: str) -> None:
        self.code, self.out, self.err = code, out, err


def _run(command: Command, values: dict[str, str], resolve: bool) -> _Result:
    outputs = [_run(inner, values, resolve).out for inner in (commands(c)[0] for c in command.substitutions)]
    argv = placeholders(substitute(command.argv, outputs), values)
    assert "..." not in argv, f"{command.text}: '...' is not a value a test can run; write M, T, V or a real value"
    if argv[0] == "isocompute":
        return _isocompute(argv[1:], command.env)
    if is_verl_launch(argv):
        assert resolve, f"{command.text}: a verl launch needs the resolve mode (or e2e)"
        extra = [] if "--cfg" in argv else ["--cfg", "job", "--resolve"]
        result = run_app(argv[2], argv[3:] + extra, env=command.env)
        if result.code == 0:
            yaml.safe_load(result.out.split("\n", 1)[1] if result.out.startswith("[isocompute]") else result.out)
        return _Result(result.code, result.out, result.err)
    # python -c, or one of the repository's scripts (a benchmark's fast figures), in this interpreter
    if argv[0] in ("python", "python3") and len(argv) > 1 and (argv[1] == "-c" or argv[1].startswith(("benchmarks/", "tests/"))):
        proc = subprocess.run([sys.executable, *argv[1:]], capture_output=True, text=True, env={**os.environ, **command.env})
        return _Result(proc.returncode, proc.stdout, proc.stderr)
    raise AssertionError(f"{command.text}: not runnable by this test; mark the snippet `parse REASON` or e2e")


def _isocompute(argv: list[str], env: dict[str, str]) -> _Result:
    from verl_isocompute.commands import cli

    out, err = io.StringIO(), io.StringIO()
    saved = dict(os.environ)
    os.environ.update(env)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = cli.main(argv)
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 1
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return _Result(code, out.getvalue(), err.getvalue())


def _check_output(snip: Snippet, values: dict[str, str]) -> None:
    lines = snip.text.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("$ ")]
    for k, start in enumerate(starts):
        (command,) = commands(lines[start][2:])
        result = _run(command, values, resolve=False)
        assert result.code == 0, result.err
        got = {" ".join(line.split()) for line in result.out.splitlines()}
        shown = lines[start + 1 : starts[k + 1] if k + 1 < len(starts) else len(lines)]
        for line in shown:
            if line.strip() and line.strip() != "...":
                assert " ".join(line.split()) in got, f"{snip.id}: `{lines[start][2:]}` no longer prints:\n{line}\n\n{result.out}"


def _check_e2e(snip: Snippet) -> None:
    test_file, name = (snip.args.split() + [None])[:2]
    assert name, f"{snip.id}: name the snippet: <!-- snippet: e2e TEST_FILE NAME -->"
    source = (ROOT / test_file).read_text()
    assert f'"{name}"' in source, f"{snip.id}: {test_file} does not run the snippet {name!r}"
    assert "pytest.mark.e2e" in source


def _check_parse(snip: Snippet, values: dict[str, str]) -> None:
    reason, _, why = snip.args.partition(":")
    assert reason in REASONS and why.strip(), f"{snip.id}: write `parse REASON: why`, REASON one of {REASONS}"
    text = snip.text
    if reason == "gpu":  # a GPU recipe, vLLM, GPUs per node or a 7B checkpoint
        assert re.search(r"isocompute_(easy|hard|mixed|hard_guided)\b|vllm|n_gpus_per_node=[2-9]|/models/|7[bB]", text), snip.id
    elif reason == "minutes":  # SmolLM2, a whole workflow, a benchmark, a verl start-up
        assert re.search(r"smollm2|isocompute (demo|curate|sweep|prefix-search)|workflow_cpu\.sh|benchmarks/|curate\(", text), snip.id
    elif reason == "install":  # the CI runs this very line
        ci = (ROOT / ".ci" / "run").read_text()
        assert all(line in ci for line in text.strip().splitlines()), f"{snip.id}: .ci/run does not run it"
    elif reason == "account":
        assert "wandb.Api(" in text, snip.id
    if snip.language == "python":
        tree = compile(text, snip.id, "exec", flags=0x400)  # ast.PyCF_ONLY_AST: the imports must exist
        import ast

        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)) and not (isinstance(node, ast.Import) and node.names[0].name == "wandb"):
                exec(compile(ast.Module([node], []), snip.id, "exec"), {})
        return
    if reason == "install":
        return
    for command in commands(text):
        _parse(snip, command, values)


def _parse(snip: Snippet, command: Command, values: dict[str, str]) -> None:
    from verl_isocompute.commands import cli

    argv = placeholders(substitute(command.argv, ["X"] * len(command.substitutions)), values)
    if argv[0] == "isocompute":
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()) as err:
            try:
                cli.parse_args(argv[1:])
            except SystemExit as exc:
                raise AssertionError(f"{snip.id}: {command.text}\n{err.getvalue()}") from exc
    elif is_verl_launch(argv):
        args = [a for a in argv[3:] if a != "..."]
        result = run_app(argv[2], [*args, "--cfg", "job"], env={**command.env, "VERL_PLATFORM": "cpu"})
        assert result.code == 0, f"{snip.id}: {command.text}\n{result.err[-3000:]}"
    elif argv[0] == "bash":
        script = ROOT / argv[1]
        assert script.is_file(), f"{snip.id}: {argv[1]} does not exist"
        subprocess.run(["bash", "-n", str(script)], check=True)
    elif argv[0] in ("python", "python3") and argv[1].startswith("benchmarks/"):
        assert (ROOT / argv[1]).is_file(), f"{snip.id}: {argv[1]} does not exist"
    elif argv[0] in ("pip", ".", "source") or argv[:3] in (["python3", "-m", "venv"], ["python", "-m", "pytest"]):
        pass  # setting up the environment: what the CI's own .ci/run does
    else:
        raise AssertionError(f"{snip.id}: {command.text}: no parser for {argv[0]!r}")


def test_placeholders_are_said():
    """A doc whose snippets use the placeholders says what they stand for."""
    for doc in {s.doc for s in SNIPPETS if any(re.search(rf"=\b{p}\b(\s|$)", s.text) for p in PLACEHOLDERS)}:
        assert "M: a model" in doc.read_text(), f"{doc.name}: say what M, T and V stand for (M: a model ...)"
