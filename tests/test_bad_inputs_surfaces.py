"""Bad input on the sweep's dry run, the entry point, curve files, input logs and written files (issue 22,
section 6): one row per class, one clear line, nothing lost.

- Sweep rows: ``isocompute sweep --dry-run`` with a plan that the run itself would refuse before Ray starts.
  The dry run calls the same function as the entry point (``training.config.check_config``), so each
  settings row is also run through the entry point's own ``prepare`` (in this process, on the recipe and
  overrides of the plan's cell): both refuse it with the same message, and the entry point before anything
  is built or started.
- Curve rows: ``isocompute allocate --compare`` with a curve file whose per-n reward curves are impossible.
- Unreadable-log rows: ``isocompute fit`` on a log it cannot read names that log, not the output directory.
- Written files: every writer of ``verl_isocompute.atomic`` leaves the mode a plain write would, under two umasks.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
import yaml
from test_bad_inputs_workflow import _check  # exit status and the one error line

from verl_isocompute.commands.cli import main

BASE = {"recipe": "cpu_demo", "budget_rollouts": 64, "b_problem": [2], "n": [4], "overrides": ["isocompute.model=tiny"]}


# --- the sweep's dry run and the entry point: one check ------------------------------------------------

def _plan(overrides=(), **changes):
    return {**BASE, "overrides": [*BASE["overrides"], *overrides], **changes}


# (id, plan, piece of the one error line, refused by the entry point too)
SWEEP_ROWS = [
    ("warm-up schedule key", _plan(["actor_rollout_ref.actor.optim.lr_scheduler_type=constant"]),
     "optim.lr_scheduler_type=constant: the isocompute trainer runs update k", True),
    ("unknown lr rule", _plan(["isocompute.lr.rule=cube"]), "isocompute.lr.rule='cube': use one of sqrt, constant, linear", True),
    ("unknown zero-variance mode", _plan(["isocompute.zero_variance.mode=grups"]),
     "isocompute.zero_variance.mode='grups': use one of off, groups, regularizers", True),
    ("unknown estimator", _plan(["algorithm.adv_estimator=grpo_typo"]),
     "algorithm.adv_estimator=grpo_typo is not an estimator verl knows", True),
    ("n < 2 with a GRPO estimator", _plan(n=[1, 4]),
     "cell b2_n1: algorithm.adv_estimator=isocompute_grpo compares rollouts of the same problem", True),
    ("piece that needs our trainer", _plan(["trainer.v1.trainer_mode=sync", "+isocompute=[zero_variance]"]),
     "is applied by the isocompute trainer only", True),
    ("reuse of log-probs off-policy", _plan(["actor_rollout_ref.actor.ppo_epochs=2"]),
     "isocompute.reuse_rollout_log_probs=true needs a fully on-policy recipe", True),
    # issue 46: a misspelt rollout passed every check off the CPU platform and stopped a Ray worker after the model loaded
    ("rollout name typo, platform auto", _plan(["isocompute.platform=auto", "actor_rollout_ref.rollout.name=vlm"]),
     "actor_rollout_ref.rollout.name=vlm is not a rollout verl or this plugin provides (hf, vllm, sglang, trtllm): use vllm",
     True),
    ("rollout name typo, CPU platform", _plan(["actor_rollout_ref.rollout.name=vlm"]),
     "actor_rollout_ref.rollout.name=vlm is not a rollout verl or this plugin provides (hf, vllm, sglang, trtllm): use hf "
     "or vllm", True),
    # issue 46: the seeds verl hands to torch, numpy and vLLM after Ray has started
    ("data.seed past the samplers' range", _plan(["data.seed=99999999999999999999"]),
     "data.seed=99999999999999999999: use a whole number from 0 to 4294967295", True),
    ("a negative rollout seed", _plan(["actor_rollout_ref.rollout.seed=-1"]),
     "actor_rollout_ref.rollout.seed=-1: use a whole number from 0 to 4294967295", True),
    ("absurd budget", _plan(budget_rollouts="1e30"), "pays cell b2_n4 for 1.25e+29 steps of 8 rollouts, more than 10,000,000", False),
    ("sweep_dir is a file", _plan(sweep_dir="a_file"), "a_file is a file; set sweep_dir in the plan", False),
    ("sweep_dir under a file", _plan(sweep_dir="a_file/sweep"), "cannot be made: ", False),
]


@pytest.mark.parametrize(("plan", "message", "entry_point"), [pytest.param(*r[1:], id=r[0]) for r in SWEEP_ROWS])
def test_the_dry_run_refuses_what_the_run_refuses(tmp_path, monkeypatch, capsys, plan, message, entry_point):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("VERL_PLATFORM", raising=False)
    (tmp_path / "a_file").write_text("not a directory\n")
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(plan).replace("'1e30'", "1e30"))  # as a user writes it, unquoted
    rc = main(["sweep", "--plan", str(path), "--dry-run"])
    out, err = capsys.readouterr()
    _check(rc, out, err, 2, message, "isocompute sweep")
    if entry_point:
        _entry_point_refuses(tmp_path, monkeypatch, plan, message.split(": ", 1)[-1] if message.startswith("cell ") else message)


def _entry_point_refuses(tmp_path, monkeypatch, plan, message):
    """``python -m verl_isocompute.main`` on the plan's (first refused) cell: prepare() raises the same line
    before it builds the model (nothing appears in the model cache) or starts Ray (run_ppo is never reached)."""
    from verl_isocompute import main as entry
    from verl_isocompute.training import config, prepare
    from verl_isocompute.workflow.sweep.grid import cell_overrides
    from verl_isocompute.workflow.sweep.plan import parse_plan
    from verl_isocompute.workflow.sweep.preflight import compose

    monkeypatch.setattr(prepare, "prepare_model", lambda cfg: pytest.fail("the model was prepared before the check"))
    parsed = parse_plan(plan, base_dir=tmp_path)
    cell = parsed.runnable()[0]
    cfg = compose(parsed.recipe, cell_overrides(parsed, cell, tmp_path / "run"))
    environ = dict(os.environ)  # prepare() sets the platform's variables for the run it would start
    try:
        with pytest.raises(config.RecipeError) as info:
            entry.run(cfg)
    finally:
        os.environ.clear()
        os.environ.update(environ)
    assert message in str(info.value) and "\n" not in str(info.value)
    assert not (tmp_path / "run").exists()


def _answers_file(path: Path, answers: list[str], data_source: str = "my_dataset") -> str:
    import pandas as pd

    rows = [{"data_source": data_source, "prompt": [{"role": "user", "content": f"q{i}"}],
             "reward_model": {"style": "rule", "ground_truth": a}, "extra_info": {"index": i}} for i, a in enumerate(answers)]
    pd.DataFrame(rows).to_parquet(path)
    return str(path)


@pytest.mark.parametrize(("answer", "refused"), [("literal", True), ("auto", False), ("equivalent", False)])
def test_literal_grading_of_answers_that_are_not_numbers_is_refused_before_ray(tmp_path, monkeypatch, capsys, answer,
                                                                               refused):
    """Issue 46: ``isocompute.reward.answer=literal`` on reference answers such as ``\\frac{1}{3}`` passed every check
    and raised on the first graded sample, in verl's reward worker after the model had loaded. The data files are
    read before Ray: the sweep's dry run and the entry point refuse it in one line naming the file and the row;
    ``auto`` (math-verify on a dataset of the user's) and ``equivalent`` grade them and pass."""
    from verl_isocompute.training import config, prepare
    from verl_isocompute.workflow.sweep.grid import cell_overrides
    from verl_isocompute.workflow.sweep.plan import parse_plan
    from verl_isocompute.workflow.sweep.preflight import compose

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("VERL_PLATFORM", raising=False)
    data = _answers_file(tmp_path / "train.parquet", ["12", "-3", "\\frac{1}{3}", "7"])
    plan = _plan([f"isocompute.reward.answer={answer}"], data={"train_files": data, "val_files": data})
    (tmp_path / "plan.yaml").write_text(yaml.safe_dump(plan))
    rc = main(["sweep", "--plan", str(tmp_path / "plan.yaml"), "--dry-run"])
    out, err = capsys.readouterr()
    message = (f"isocompute.reward.answer=literal grades numbers, but data.train_files {data}, row 2: the reference "
               "answer is '\\\\frac{1}{3}': set isocompute.reward.answer=equivalent (math-verify) for this data")
    _check(rc, out, err, 2 if refused else 0, message if refused else "budget", "isocompute sweep")
    # the entry point on the same cell: prepare(), which runs before verl is imported and Ray starts, refuses it
    monkeypatch.setattr(prepare, "prepare_model", lambda cfg: None)  # the built-in model: not what is checked here
    parsed = parse_plan(plan, base_dir=tmp_path)
    cfg = compose(parsed.recipe, cell_overrides(parsed, parsed.runnable()[0], tmp_path / "run"))
    environ = dict(os.environ)
    try:
        if refused:
            with pytest.raises(config.RecipeError) as info:
                prepare.prepare(cfg)
            assert str(info.value) == message
        else:
            prepare.prepare(cfg)
    finally:
        os.environ.clear()
        os.environ.update(environ)


def test_a_sweep_dir_flag_naming_a_file_is_refused(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a_file").write_text("x")
    (tmp_path / "plan.yaml").write_text(yaml.safe_dump(BASE))
    rc = main(["sweep", "--plan", str(tmp_path / "plan.yaml"), "--dry-run", "--sweep-dir", "a_file"])
    out, err = capsys.readouterr()
    _check(rc, out, err, 2, "a_file is a file", "isocompute sweep")


# --- per-n reward curves in a curve file -------------------------------------------------------------

def _curve(field_change=None, entry_change=None, extra=None) -> dict:
    """The paper's Easy sigmoid with two per-n reward curves as `isocompute fit` writes them, then changed."""
    from verl_isocompute.scaling import load_curve
    from verl_isocompute.scaling.reward_curves import RewardCurve, reward_curves_field
    from verl_isocompute.scaling.saturating import SaturatingCurve

    curves = [RewardCurve(8, 32, SaturatingCurve(0.2, 0.6, 1e4, 1.0), (1e3, 1e6), 2),
              RewardCurve(16, 32, SaturatingCurve(0.2, 0.7, 3e4, 1.0), (2e3, 1e6), 2)]
    field = reward_curves_field(curves)
    field.update(field_change or {})
    field["curves"][1].update(entry_change or {})
    field["curves"].extend(extra or [])
    return {**load_curve("paper:qwen2.5-7b-easy").to_dict(), "reward_curves": field}


CURVE_ROWS = [
    ("well formed", _curve(), 0, "C_n(R*)"),
    ("asymptote above the metric's range", _curve(entry_change={"A": 1.7}),
     2, "curves[1] (n=16): R0 = 0.2 and A = 1.7 must lie in [0, 1], the range of val/avg@4"),
    ("reward falling with compute", _curve(entry_change={"R0": 0.8}), 2, "curves[1] (n=16) needs C_mid > 0, beta > 0, R0 <= A"),
    ("two curves for one n", _curve(entry_change={"n": 8}), 2, "curves[1] (n=8): a second curve for n=8 (curves[0] is the first)"),
    ("two curves for one (n, b_problem)", _curve({"group_by": "n,b_problem"}, {"n": 8}), 2,
     "a second curve for n=8, b_problem=32"),
    ("fractional n", _curve(entry_change={"n": 12.5}), 2, "n, b_problem and runs must be positive integers"),
    ("n as a string", _curve(entry_change={"n": "16"}), 2, "got n='16'"),
    ("boolean reward", _curve(entry_change={"A": True}), 2, "must be finite numbers"),
]


@pytest.mark.parametrize(("curve", "status", "message"), [pytest.param(*r[1:], id=r[0]) for r in CURVE_ROWS])
def test_allocate_compare_refuses_impossible_reward_curves(tmp_path, capsys, curve, status, message):
    path = tmp_path / "curve.json"
    path.write_text(json.dumps(curve))
    rc = main(["allocate", "--curve", str(path), "--budget", "1e5", "--compare", "all"])
    out, err = capsys.readouterr()
    _check(rc, out, err, status, message, "isocompute allocate")
    if status:  # refused on load: allocate without --compare, and fit --compare, read the same file
        assert main(["allocate", "--curve", str(path), "--budget", "1e5"]) == 2
        assert message in capsys.readouterr().err


# --- an input log that cannot be read ----------------------------------------------------------------

def _unreadable(path: Path) -> None:
    """A file whose read fails: mode 000 for a user; for root (who reads any mode) a link to /proc/self/mem,
    a regular file whose read fails with EIO."""
    if os.geteuid() == 0:
        path.symlink_to("/proc/self/mem")
    else:
        path.write_text('{"header": {}}\n')
        path.chmod(0)


@pytest.mark.parametrize("given", ["run directory", "isocompute.jsonl", "verl file-logger .jsonl"])
def test_fit_names_an_unreadable_input_log_not_the_output(tmp_path, capsys, given):
    from verl_isocompute.scaling import load_curve
    from verl_isocompute.scaling.synthetic import curves_for, synthetic_sweep, write_run_logs

    write_run_logs(synthetic_sweep(curves_for(load_curve("paper:qwen2.5-7b-easy")), points_per_run=12, seed=1),
                   tmp_path / "runs")
    run = next(p for p in sorted((tmp_path / "runs").iterdir()))
    bad = run / ("isocompute.jsonl" if given != "verl file-logger .jsonl" else "verl_metrics.jsonl")
    if given == "verl file-logger .jsonl":
        (run / "isocompute.jsonl").unlink()
    else:
        bad.unlink()
    _unreadable(bad)
    runs = {"run directory": tmp_path / "runs"}.get(given, bad)
    out_dir = tmp_path / "fit"
    rc = main(["fit", str(runs), "--out", str(out_dir), "--bootstrap", "0"])
    out, err = capsys.readouterr()
    _check(rc, out, err, 2, f"{bad}: cannot read it (", "isocompute fit")
    assert "cannot write" not in err and not out_dir.exists()


# --- files written through atomic.py keep the umask ------------------------------------------------

def _writers(folder: Path):
    from verl_isocompute import atomic, jsonl, runlog

    def replacing(path):
        with atomic.replacing(path) as tmp:
            tmp.write_text("x")

    return {
        "write_text": lambda: atomic.write_text(folder / "a.txt", "x"),
        "write_json (curve.json, reports, state)": lambda: atomic.write_json(folder / "curve.json", {"a": 1}),
        "replacing (parquet, plots)": lambda: replacing(folder / "set.parquet"),
        "staged_dir (fit outputs)": lambda: _staged(atomic, folder),
        "run log": lambda: runlog.write_run_log(folder, {}, []),
        "gzip JSON lines (traces)": lambda: jsonl.write_jsonl(folder / "traces.jsonl.gz", [{"a": 1}]),
    }


def _staged(atomic, folder: Path) -> None:
    with atomic.staged_dir(folder / "fit") as staging:
        atomic.write_text(staging / "report.md", "ok")


@pytest.mark.parametrize("umask", [0o022, 0o007], ids=["umask 022", "umask 007"])
def test_written_files_honour_the_umask_as_a_plain_write_would(tmp_path, umask):
    before = os.umask(umask)
    try:
        (tmp_path / "plain.txt").write_text("x")  # what a plain write leaves
        expected = stat.S_IMODE((tmp_path / "plain.txt").stat().st_mode)
        assert expected == 0o666 & ~umask
        for name, write in _writers(tmp_path).items():
            write()
            write()  # a second write replaces the first: the same mode again
        written = [p for p in tmp_path.rglob("*") if p.is_file() and p.name != "plain.txt"]
        assert len(written) == 6, written
        modes = {str(p.relative_to(tmp_path)): oct(stat.S_IMODE(p.stat().st_mode)) for p in written}
        assert set(modes.values()) == {oct(expected)}, modes
    finally:
        os.umask(before)
