"""Bad input to `isocompute sweep --dry-run` and `isocompute curate`: one clear line, exit 2, nothing started.

Each row is (arguments, plan written to plan.yaml or None) -> (exit status, a piece of the one error line).
The plan rows check the whole plan the way a real sweep does before its first cell (issue 9, section 6):
the recipe composes with the plan's overrides, the data files exist, the ``fit:`` block is what
``isocompute fit`` accepts, the ``ray:`` block is usable. The curate rows are refused by the argument
checks, before any model, recipe or Ray start-up. Run in-process through the CLI's ``main``.
"""

from __future__ import annotations

import pytest
import yaml

from verl_isocompute.commands.cli import main

BASE = {"recipe": "cpu_demo", "budget_rollouts": 64, "b_problem": [2], "n": [4], "overrides": ["isocompute.model=tiny"]}


def _plan(**changes):
    plan = {**BASE, **changes}
    return {k: v for k, v in plan.items() if v is not None}


SWEEP_ROWS = [
    # (id, plan, extra args, exit status, piece of the message)
    ("unknown recipe", _plan(recipe="isocompute_nope"), [], 2, "recipe 'isocompute_nope'"),
    ("override typo", _plan(overrides=["isocompute.modl=tiny"]), [], 2, "Could not override 'isocompute.modl'"),
    ("missing data", _plan(data={"train_files": "nope.parquet", "val_files": "nope.parquet"}), [], 2,
     "nope.parquet does not exist; fix data.train_files"),
    ("data is a directory", _plan(data={"train_files": ".", "val_files": "."}), [], 2, "is a directory; fix data.train_files"),
    ("ray mode", _plan(ray={"mode": "shared"}), [], 2, "ray.mode='shared': use auto, private"),
    ("ray unknown key", _plan(ray={"adress": "http://h:8265"}), [], 2, "unknown ray key(s) ['adress']"),
    ("ray not a mapping", _plan(ray=["http://h:8265"]), [], 2, "ray must be a mapping"),
    ("ray max_concurrent", _plan(ray={"max_concurrent": 0}), [], 2, "ray.max_concurrent must be a positive integer"),
    ("ray num_gpus", _plan(ray={"num_gpus": -1}), [], 2, "ray.num_gpus must be a number >= 0 or null"),
    ("ray num_cpus", _plan(ray={"num_cpus": "many"}), [], 2, "ray.num_cpus must be a number >= 0 or null"),
    ("ray env_vars", _plan(ray={"env_vars": ["A=1"]}), [], 2, "ray.env_vars must map names to values"),
    ("ray python", _plan(ray={"python": 3}), [], 2, "ray.python must be a string"),
    ("fit unknown key", _plan(fit={"groupby": "n"}), [], 2, "unknown fit key(s) ['groupby']"),
    ("fit not a mapping", _plan(fit=["bootstrap=0"]), [], 2, "fit must be a mapping"),
    ("fit group_by typo", _plan(fit={"group_by": "nn"}), [], 2, "group-by"),
    ("fit compute", _plan(fit={"compute": "flops"}), [], 2, "compute"),
    ("fit bootstrap 2", _plan(fit={"bootstrap": 2}), [], 2, "bootstrap must be 0 (no intervals) or at least 40, got 2"),
    # issue 46: a seed no sampler takes passed the dry run and failed after Ray started
    ("seed past the samplers' range", _plan(seeds=[0, 99999999999999999999]), [], 2,
     "seeds holds 99999999999999999999; every value must be at most 4,294,967,295 (each run's data.seed, "
     "actor_rollout_ref.rollout.seed"),
    ("budget not a number", _plan(budget_rollouts="lots"), [], 2, "budget_rollouts must be a positive integer, got 'lots'"),
    ("budget below a step", _plan(budget_rollouts=4), [], 2, "raise budget_rollouts to at least 8"),
    ("max-concurrent flag", _plan(), ["--max-concurrent", "0"], 2, "--max-concurrent must be at least 1"),
    # not errors: YAML 1.1 reads 1e6 as a string; it is the number allocate --budget 1e6 takes
    ("budget 1e6", _plan(budget_rollouts="1e6"), [], 0, "budget 1000000 rollouts per cell"),
]


@pytest.mark.parametrize(("plan", "extra", "status", "message"), [
    pytest.param(*row[1:5], id=row[0], marks=row[5:]) for row in SWEEP_ROWS
])
def test_bad_sweep_plans_fail_the_dry_run_with_one_line(tmp_path, monkeypatch, capsys, plan, extra, status, message):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(plan).replace("'1e6'", "1e6"))  # as a user writes it, unquoted
    rc = main(["sweep", "--plan", str(path), "--dry-run", *extra])
    out, err = capsys.readouterr()
    _check(rc, out, err, status, message, "isocompute sweep")


def test_a_plan_path_that_is_a_directory_says_so(tmp_path, capsys):
    rc = main(["sweep", "--plan", str(tmp_path), "--dry-run"])
    out, err = capsys.readouterr()
    _check(rc, out, err, 2, f"plan {tmp_path} is a directory; pass the plan's YAML file", "isocompute sweep")


CURATE_ROWS = [
    ("out is a file", ["--out", "{file}"], "--out {file} is a file; give a directory"),
    ("temperature 0", ["--temperature", "0"], "--temperature must be > 0"),
    ("temperature negative", ["--temperature", "-0.5"], "--temperature must be > 0"),
    ("temperature nan", ["--temperature", "nan"], "--temperature must be > 0"),
    ("top-p 0", ["--top-p", "0"], "--top-p must be in (0, 1]"),
    ("top-p above 1", ["--top-p", "1.5"], "--top-p must be in (0, 1]"),
    ("top-k 0", ["--top-k", "0"], "--top-k must be -1 (off) or at least 1"),
    ("max-response-length 0", ["--max-response-length", "0"], "--max-response-length must be at least 1 token"),
    ("k 0", ["--k", "0"], "--k must be at least 1"),
    ("unknown set", ["--sets", "easy,medium"], "--sets medium: choose from"),
    ("val fraction", ["--max-val-fraction", "1"], "--max-val-fraction must be in (0, 1)"),
    ("band", ["--easy", "0.6,0.3"], "--easy 0.6,0.3: need 0 <= low <= high <= 1"),
]


@pytest.mark.parametrize(("args", "message"), [pytest.param(r[1], r[2], id=r[0]) for r in CURATE_ROWS])
def test_bad_curate_arguments_fail_before_any_start_up(tmp_path, capsys, monkeypatch, args, message):
    from verl_isocompute.workflow import curate

    def started(settings, **kwargs):
        raise AssertionError("the curation started although its arguments are bad")

    monkeypatch.setattr(curate, "curate", started)
    file = tmp_path / "existing.txt"
    file.write_text("not a directory\n")
    base = ["curate", "--generate", "basic_arithmetic", "--size", "4", "--out", str(tmp_path / "out")]
    args = [a.format(file=file) for a in args]
    rc = main(base + args)
    out, err = capsys.readouterr()
    _check(rc, out, err, 2, message.format(file=file), "isocompute curate")
    assert not (tmp_path / "out").exists()  # nothing written


def _check(rc, out, err, status, message, prog):
    assert "Traceback" not in err
    if status == 0:
        assert rc == 0, err
        assert message in out
        return
    lines = [line for line in err.splitlines() if line.strip()]
    assert rc == status and len(lines) == 1, err
    assert lines[0].startswith(f"{prog}: error: ") and message in lines[0], lines[0]
