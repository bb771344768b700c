"""Bad input on the command-line surfaces of issue 35 (item 2): `fit --run-table`, `fit --compute
rollouts_with_curation`, `guide --copies` and `allocate`, each refused in one line naming the fix or handled
right, and said so.

- Run-table rows: a sweep of four runs (n = 8, 32, 128, 512) in verl's file-logger format, whose logs say nothing
  of n, laid out twice: ``dup/x<i>/run_a.jsonl`` (every run's last path component is ``run_a``) and
  ``verl/r<i>/verl_metrics.jsonl`` (verl's file logger in a run directory). A row that matched several runs used
  to be applied to all of them; of two columns naming n, one was dropped; a table that gave no n for a run was
  ignored by the message, which said "pass --run-table".
- The other rows run the real command in this process and check the exit status, the one error line or the line
  that says what was done.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from test_bad_inputs_workflow import _check  # exit status and the one error line

from verl_isocompute.commands.cli import main
from verl_isocompute.scaling import load_curve
from verl_isocompute.scaling.synthetic import curves_for, synthetic_sweep, write_run_logs

EASY = load_curve("paper:qwen2.5-7b-easy")
NS = (128, 32, 512, 8)  # n of dup/x0 ... dup/x3 (and verl/r0 ... verl/r3): the synthetic runs in name order


@pytest.fixture(scope="module")
def logs(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("file_logger")
    sweep = synthetic_sweep({n: c for n, c in curves_for(EASY).items() if n in NS}, points_per_run=12, noise=0.0)
    for i, (_, part) in enumerate(sweep.groupby("run")):
        assert part["n"].iloc[0] == NS[i]
        lines = "".join(json.dumps({"step": int(r.step), "data": {"val/avg@4": r["val/avg@4"], "isocompute/rollouts": r.rollouts}})
                        + "\n" for _, r in part.iterrows())
        for path in (root / "dup" / f"x{i}" / "run_a.jsonl", root / "verl" / f"r{i}" / "verl_metrics.jsonl"):
            path.parent.mkdir(parents=True)
            path.write_text(lines)
    return root


def _csv(header: str, cells: list[str]) -> str:
    return header + "\n" + "".join(f"dup/x{i}/run_a,{cell}\n" for i, cell in enumerate(cells))


FULL = [f"{n},32" for n in NS]
# (id, runs, table file name, its text, exit status, piece of the one line: the error, or of the fitted n grid)
RUN_TABLE_ROWS = [
    ("a key matching several runs", "dup", "runs.csv", "run,n,b_problem\nrun_a,8,32\n", 2,
     "runs.csv, line 2: run 'run_a' matches 4 runs (dup/x0/run_a, dup/x1/run_a, dup/x2/run_a, dup/x3/run_a); key each "
     "row by the run's full name as the fit shows it (e.g. 'dup/x0/run_a')"),
    ("verl_metrics keys every file-logger run", "verl", "runs.csv", "run,n,b_problem\nverl_metrics,8,32\n", 2,
     "run 'verl_metrics' matches 4 runs (verl/r0/verl_metrics, verl/r1/verl_metrics"),
    ("conflicting n columns", "dup", "runs.csv",
     _csv("run,n,actor_rollout_ref.rollout.n,b_problem", ["128,64,32", *[f"{n},{n},32" for n in NS[1:]]]), 2,
     "runs.csv, line 2: run 'dup/x0/run_a' has n=128 and actor_rollout_ref.rollout.n=64; the two columns name one setting"),
    ("agreeing n columns, one cell empty", "dup", "runs.csv",
     _csv("run,n,actor_rollout_ref.rollout.n,b_problem", ["128,128,32", "32,,32", *[f"{n},{n},32" for n in NS[2:]]]), 0,
     "[8, 32, 128, 512]"),
    ("no n column", "dup", "runs.csv", _csv("run,b_problem", ["32"] * 4), 2,
     "dup/x0/run_a: the log does not say n, and --run-table {table} has no n column; add one (or pass --n"),
    ("an empty n cell", "dup", "runs.csv", _csv("run,n,b_problem", [",32", *FULL[1:]]), 2,
     "dup/x0/run_a: the log does not say n, and --run-table {table}, line 2 gives no n for it (an empty cell, null or .nan)"),
    ("YAML .nan", "dup", "runs.yaml",
     "".join(f"dup/x{i}/run_a: {{n: {'.nan' if i == 0 else n}, b_problem: 32}}\n" for i, n in enumerate(NS)), 2,
     "--run-table {table}, run 'dup/x0/run_a' gives no n for it"),
    ("a missing row", "dup", "runs.csv", "run,n,b_problem\n" + "".join(f"dup/x{i}/run_a,{n},32\n" for i, n in enumerate(NS) if i), 2,
     "dup/x0/run_a: the log does not say n, and --run-table {table} has no row for it"),
    ("a typo row", "dup", "runs.csv", _csv("run,n,b_problem", FULL).replace("x0/run_a", "x0/run_b"), 2,
     "runs.csv, line 2: run 'dup/x0/run_b' matches no run given"),
    ("full names", "dup", "runs.csv", _csv("run,n,b_problem", FULL), 0, "[8, 32, 128, 512]"),
]


@pytest.mark.parametrize(("runs", "name", "text", "status", "message"), [pytest.param(*r[1:], id=r[0]) for r in RUN_TABLE_ROWS])
def test_fit_run_table(logs, tmp_path, monkeypatch, capsys, runs, name, text, status, message):
    monkeypatch.chdir(logs)  # run names are shown relative to the working directory: dup/x0/run_a
    (tmp_path / name).write_text(text)
    rc = main(["fit", runs, "--run-table", str(tmp_path / name), "--out", str(tmp_path / "fit"), "--bootstrap", "0"])
    out, err = capsys.readouterr()
    if status:
        _check(rc, out, err, status, message.format(table=tmp_path / name), "isocompute fit")
        assert not (tmp_path / "fit").exists()
    else:
        assert rc == 0, err
        assert str(json.loads((tmp_path / "fit" / "curve.json").read_text())["n_grid"]) == message


# --- fit --compute with a spend column the logs do not hold ----------------------------------------------

@pytest.mark.parametrize(("compute", "status"), [("rollouts_with_curation", 2), ("rollouts_with_guidance", 0)])
def test_fit_on_curation_spend_of_logs_with_only_guidance_spend(tmp_path, capsys, compute, status):
    """Runs that log rollouts_with_guidance (an older log, or one written elsewhere) and not rollouts_with_curation:
    fitting on the latter used to count their rollouts alone, dropping the logged spend, with a note "no spend
    logged"; refused now, naming the column to fit on, which works."""
    sweep = synthetic_sweep({n: c for n, c in curves_for(EASY).items() if n in (16, 64, 256, 1024)}, points_per_run=20, seed=4)
    sweep["rollouts_with_guidance"] = np.where(sweep["n"].isin([64, 1024]), sweep["rollouts"] + 5e5, sweep["rollouts"])
    write_run_logs(sweep, tmp_path / "runs")
    rc = main(["fit", str(tmp_path / "runs"), "--out", str(tmp_path / "fit"), "--compute", compute, "--bootstrap", "0"])
    out, err = capsys.readouterr()
    if status:
        _check(rc, out, err, 2, "logs rollouts_with_guidance but not rollouts_with_curation, so the spend before "
               "training that rollouts_with_curation counts is unknown (its rollouts alone would drop the logged spend); "
               "fit --compute rollouts_with_guidance", "isocompute fit")
    else:
        assert rc in (0, 1), err  # fitted: a curve, or (exit 1) the frontier with the reason there is none
        assert (tmp_path / "fit" / "frontier.csv").is_file() and "Traceback" not in err


# --- guide --copies more than the prefixes can give ------------------------------------------------------

@pytest.mark.parametrize(("args", "made"), [
    # 4-step worked solutions: one step fits the default fraction 0.25, four within 0.8 (the fifth is the answer)
    (["--copies", "50"], "copies 50 asked, 1 made per problem: a prefix ends at a line or sentence end"),
    (["--copies", "50", "--fraction", "0.8", "--max-fraction", "0.8"], "copies 50 asked, 4 made per problem"),
    (["--copies", "2", "--fraction", "0.8", "--max-fraction", "0.8"], None),
])
def test_guide_says_when_a_problem_gets_fewer_copies_than_asked(tmp_path, monkeypatch, capsys, args, made):
    import pandas as pd

    from verl_isocompute.data.worked import worked_arithmetic

    monkeypatch.chdir(tmp_path)
    worked_arithmetic(3, terms=5).to_parquet("train.parquet")
    rc = main(["guide", "train.parquet", "-o", "g.parquet", *args])
    out, err = capsys.readouterr()
    assert rc == 0 and err == "", err
    guided = pd.read_parquet("g.parquet")["extra_info"].map(lambda e: e["guided"]).sum()
    assert out.count("\n") == 1 and f"+ {guided} guided rows" in out
    if made is None:
        assert guided == 6 and "asked" not in out
    else:
        assert made in out and "raise fraction and max_fraction (--fraction, --max-fraction) for more" in out


# --- allocate: never n = 1; a curve counting the spend before training ---------------------------------

def _curve(tmp: Path, **change) -> str:
    path = tmp / "curve.json"
    path.write_text(json.dumps({**EASY.to_dict(), **change}))
    return str(path)


# b = 0 and C far below the switch: n*(C) = 2^0 = 1
N_ONE = {"b": 0.0, "n_grid": [1, 2, 4]}
ALLOCATE_ROWS = [
    ("n grid holding 1", N_ONE, ["--n-grid", "1,2,4", "--format", "overrides"], 0, "actor_rollout_ref.rollout.n=2 "),
    ("n grid holding 1: the reason", N_ONE, ["--n-grid", "1,2,4"], 0,
     "reason: n = 2 rather than 1: GRPO's advantage compares the rollouts of one problem, so every recipe refuses rollout.n=1"),
    ("n grid of 1 alone", N_ONE, ["--n-grid", "1"], 2, "n_grid [1] has no n >= 2: GRPO's advantage compares the rollouts"),
    ("a curve counting rollouts_with_guidance", {"compute_unit": "rollouts_with_guidance"}, [], 0,
     "reason: the curve counts rollouts_with_guidance, C with the rollouts spent before training (on the guidance): n*(C) "
     "is read at C = the budget, and every rollout of the budget goes to training steps; a run that spends S rollouts "
     "before training sits at budget + S on this curve"),
    ("a curve counting rollouts_with_curation", {"compute_unit": "rollouts_with_curation"}, [], 0,
     "the curve counts rollouts_with_curation, C with the rollouts spent before training (on the guidance, and curation)"),
    # issue 46: a config group set to null was a traceback from hydra's defaults list
    ("--recipe with isocompute=null", {}, ["--recipe", "cpu_demo", "isocompute=null"], 2,
     "recipe 'cpu_demo' with overrides ['isocompute=null']: isocompute=null: isocompute is the group of our recipe pieces"),
]


# --- the entry point and the recipe loader: an override the recipe cannot take is one line (issue 46) -------

ISOCOMPUTE_NULL = ("isocompute=null: isocompute is the group of our recipe pieces (allocation, decoupled, estimator, "
                   "lr_rule, per_prompt_n, run_log, schedule, zero_variance: add some with +isocompute=[allocation,...]) "
                   "and our settings block (set one with isocompute.KEY=VALUE); a config group cannot be null")
# (id, recipe, override, piece of the one line): hydra's hint kept, and which recipes declare the key
ENTRY_ROWS = [
    ("our group set to null", "isocompute_hard", "isocompute=null", ISOCOMPUTE_NULL),
    ("verl's group set to null", "cpu_demo", "data=null", "data=null: data is a config group, which cannot be null"),
    ("a setting no recipe writes, without +", "isocompute_hard", "isocompute.data.task=products",
     "Could not override 'isocompute.data.task': recipe isocompute_hard has no such key. To append to your config use "
     "+isocompute.data.task=products; isocompute.data.task is a setting of ours (training/schema.py) that no recipe writes"),
    ("a setting other recipes declare", "isocompute_hard", "isocompute.cpu.dtype=float32",
     "Could not override 'isocompute.cpu.dtype': recipe isocompute_hard has no such key. To append to your config use "
     "+isocompute.cpu.dtype=float32; isocompute.cpu.dtype is declared by recipe cpu_demo, +platform=cpu"),
    ("a misspelt setting", "cpu_demo", "isocompute.modl=tiny",
     "Could not override 'isocompute.modl': it is not a setting of ours; did you mean isocompute.model?"),
]


@pytest.mark.parametrize(("recipe", "override", "message"), [pytest.param(*r[1:], id=r[0]) for r in ENTRY_ROWS])
def test_the_entry_point_refuses_an_override_its_recipe_cannot_take_in_one_line(monkeypatch, capsys, recipe, override,
                                                                                message):
    """``python -m verl_isocompute.main`` (its ``entry``, in this process): one line, exit status 2, nothing run."""
    import os

    from verl_isocompute import main as entry_point

    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)
    monkeypatch.setattr(entry_point, "run", lambda cfg: pytest.fail("the run started"))
    argv = ["--config-name", recipe, override]
    monkeypatch.setattr("sys.argv", ["main.py", *argv])
    with pytest.raises(SystemExit) as info:
        entry_point.entry(argv)
    out, err = capsys.readouterr()
    _check(info.value.code, out, err, 2, message, "isocompute")
    assert "HYDRA_FULL_ERROR" not in os.environ  # set only while hydra composed the recipe


@pytest.mark.parametrize(("recipe", "override", "message"), [pytest.param(*r[1:], id=r[0]) for r in ENTRY_ROWS])
def test_the_recipe_loader_says_the_same(recipe, override, message):
    """compose_recipe (the sweep, curation, allocate --recipe, the bench scripts): the same line, with the recipe and
    the overrides it was given."""
    from verl_isocompute.training.config import RecipeError, compose_recipe

    with pytest.raises(RecipeError) as info:
        compose_recipe(recipe, [override])
    line = str(info.value)
    assert line.startswith(f"recipe {recipe!r} with overrides {[override]}: ") and message in line and "\n" not in line


@pytest.mark.parametrize(("change", "args", "status", "message"), [pytest.param(*r[1:], id=r[0]) for r in ALLOCATE_ROWS])
def test_allocate(tmp_path, capsys, change, args, status, message):
    rc = main(["allocate", "--curve", _curve(tmp_path, **change), "--budget", "1e4", *args])
    out, err = capsys.readouterr()
    _check(rc, out, err, status, message, "isocompute allocate")
