"""Sweep plans (pure arithmetic) and the sweep runner's bookkeeping with a fake executor (no verl runs)."""

from __future__ import annotations

import json
import math
import signal
import subprocess
import sys

import pytest
import yaml

from verl_isocompute.runlog import RUN_LOG
from verl_isocompute.workflow.sweep import runner
from verl_isocompute.workflow.sweep.executors import RayJobExecutor, RayConfig
from verl_isocompute.workflow.sweep.grid import (
    PAPER_B_MAX,
    PAPER_B_PROBLEM,
    PAPER_N,
    Cell,
    PlanError,
    cell_overrides,
    describe,
    grid,
)
from verl_isocompute.workflow.sweep.plan import load_plan, parse_plan

# --- plan arithmetic --------------------------------------------------------------------------------


def test_paper_grid_has_39_cells_under_65536_and_27_under_16384():
    assert PAPER_B_PROBLEM == (32, 64, 128, 256, 512, 1024)
    assert PAPER_N == (8, 16, 32, 64, 128, 256, 512, 1024, 2048)
    assert len(grid(PAPER_B_PROBLEM, PAPER_N, PAPER_B_MAX["easy"])) == 39
    assert len(grid(PAPER_B_PROBLEM, PAPER_N, PAPER_B_MAX["hard"])) == 27
    assert len(grid(PAPER_B_PROBLEM, PAPER_N, None)) == 54
    # every kept cell respects the cap, and the largest ones sit exactly on it
    cells = grid(PAPER_B_PROBLEM, PAPER_N, 16_384)
    assert max(b * n for b, n in cells) == 16_384
    assert (1024, 16) in cells and (1024, 32) not in cells and (32, 512) in cells and (32, 1024) not in cells


def test_default_plan_grid_is_the_papers():
    plan = parse_plan({"recipe": "isocompute_easy", "budget_rollouts": 10**7, "b_max": 65_536})
    assert len(plan.cells()) == 39
    assert plan.b_problem == PAPER_B_PROBLEM and plan.n == PAPER_N


def test_steps_floor_the_budget_and_cells_below_one_step_are_reported():
    plan = parse_plan({"recipe": "r", "budget_rollouts": 1000, "b_problem": [4, 8], "n": [16, 128]})
    by_id = {c.id: c for c in plan.cells()}
    assert by_id["b4_n16"].steps == 15 and by_id["b4_n16"].rollouts_used == 960  # floor(1000 / 64)
    assert by_id["b8_n16"].steps == 7
    assert by_id["b8_n128"].steps == 0  # 1024 rollouts per step > budget
    assert [c.id for c in plan.too_small()] == ["b8_n128"]
    assert {c.id for c in plan.runnable()} == {"b4_n16", "b8_n16", "b4_n128"}
    text = describe(plan)
    assert "b8_n128" in text and "skipped: one step takes 1024 rollouts > budget 1000" in text
    assert "3 cells to run (1 skipped" in text and f"{960 + 896 + 512} rollouts in total" in text


def test_cells_run_small_batches_first():
    assert grid([64, 32], [16, 8]) == [(32, 8), (32, 16), (64, 8), (64, 16)]


def test_empty_grid_names_the_constraint():
    with pytest.raises(PlanError, match=r"b_problem x n <= b_max = 100.*32 x 8 = 256.*at least 256"):
        parse_plan({"recipe": "r", "budget_rollouts": 10**6, "b_max": 100})


def test_budget_below_every_cell_says_so():
    with pytest.raises(PlanError, match=r"budget_rollouts = 100 does not pay for one step.*256"):
        parse_plan({"recipe": "r", "budget_rollouts": 100, "b_problem": [32], "n": [8, 16]})


@pytest.mark.parametrize(
    "raw, message",
    [
        ({"budget_rollouts": 10}, "needs 'recipe'"),
        ({"recipe": "r"}, "needs 'budget_rollouts'"),
        ({"recipe": "r", "budget_rollouts": 10, "bmax": 4}, "unknown plan key"),
        ({"recipe": "r", "budget_rollouts": 10, "n": [8, 0]}, "integer >= 1"),
        ({"recipe": "r", "budget_rollouts": 10, "n": [8, 8]}, "twice"),
        ({"recipe": "r", "budget_rollouts": -5}, "positive integer"),
        ({"recipe": "r", "budget_rollouts": 10, "overrides": ["data.train_batch_size=8"]}, "sets for each cell"),
        ({"recipe": "r", "budget_rollouts": 10, "overrides": ["actor_rollout_ref.rollout.n=8"]}, "sets for each cell"),
        ({"recipe": "r", "budget_rollouts": 10, "overrides": ["data.train_files=x"]}, "data: block"),
        ({"recipe": "r", "budget_rollouts": 10, "overrides": "a=b"}, "list of key=value"),
        ({"recipe": "r", "budget_rollouts": 10, "data": {"train_files": "t.parquet"}}, "both train_files and val_files"),
        ({"recipe": "r", "budget_rollouts": 10, "fit": {"metrc": "x"}}, "unknown fit key"),
        ({"recipe": "r", "budget_rollouts": 10, "ray": {"max_concurrent": 0}}, "ray.max_concurrent"),
        ({"recipe": "r", "budget_rollouts": 10, "seeds": 3}, r"seeds must be a list of seeds such as seeds: \[0, 1, 2\], got 3"),
        ({"recipe": "r", "budget_rollouts": 10, "seeds": []}, r"seeds must be a non-empty list"),
        ({"recipe": "r", "budget_rollouts": 10, "seeds": [0, 1, 0]}, r"seeds lists a value twice"),
        ({"recipe": "r", "budget_rollouts": 10, "seeds": [0, -1]}, r"seeds holds -1; every value must be an integer >= 0"),
        ({"recipe": "r", "budget_rollouts": 10, "seeds": [0.5]}, r"seeds holds 0.5"),
        ({"recipe": "r", "budget_rollouts": 10, "seeds": [True]}, r"seeds holds True"),
        ({"recipe": "r", "budget_rollouts": 10, "seeds": [0], "overrides": ["data.seed=3"]},
         r"overrides sets data.seed, which seeds: \[0\] sets for each run: the plan contradicts itself"),
        ({"recipe": "r", "budget_rollouts": 10, "seeds": [0], "overrides": ["++actor_rollout_ref.rollout.seed=3"]},
         r"overrides sets actor_rollout_ref.rollout.seed, which seeds"),
    ],
)
def test_bad_plans_name_the_field(raw, message):
    raw = {"b_problem": [1], "n": [2], **raw} if "n" not in raw else {"b_problem": [1], **raw}
    with pytest.raises(PlanError, match=message):
        parse_plan(raw)


def test_settings_defaults_are_written_once():
    """A plan's ray: block takes RayConfig's fields and defaults; a plan's fit: block and isocompute fit's
    flags take FitConfig's defaults, which are the fitting functions' own keyword defaults."""
    import dataclasses
    import inspect

    from verl_isocompute.scaling import fit, points
    from verl_isocompute.scaling.pipeline import FitConfig
    from verl_isocompute.workflow.sweep import plan as plan_module

    assert plan_module._RAY_KEYS == {f.name for f in dataclasses.fields(RayConfig)}
    assert parse_plan({"recipe": "cpu_demo", "budget_rollouts": 4096}).ray["max_concurrent"] == RayConfig.max_concurrent
    fitting = {**inspect.signature(fit.fit_frontier).parameters, **inspect.signature(points.build_frontier).parameters}
    for name in ("bucket", "window", "k_max", "bootstrap"):
        assert getattr(FitConfig(), name) == fitting[name].default, name


def test_relative_paths_resolve_against_the_plan_file(tmp_path):
    (tmp_path / "plans").mkdir()
    path = tmp_path / "plans" / "pilot.yaml"
    path.write_text(yaml.safe_dump({
        "recipe": "cpu_demo", "budget_rollouts": 64, "b_problem": [2], "n": [4],
        "data": {"train_files": "../data/train.parquet", "val_files": ["../data/val.parquet"]},
    }))
    plan = load_plan(path)
    assert plan.name == "pilot"
    assert plan.sweep_dir == str(tmp_path / "plans" / "runs" / "pilot")
    assert plan.train_files == (str(tmp_path / "plans" / "../data/train.parquet"),)


def test_cell_overrides_set_the_run_shape(tmp_path):
    plan = parse_plan({"name": "p", "recipe": "cpu_demo", "budget_rollouts": 100, "b_problem": [2], "n": [4],
                       "overrides": ["isocompute.model=tiny"], "val_points": 4,
                       "data": {"train_files": "/d/t.parquet", "val_files": "/d/v.parquet"}})
    cell = plan.cells()[0]
    assert cell.steps == 12 and plan.test_freq_for(cell) == 3
    out = cell_overrides(plan, cell, tmp_path / "run", dataset_size=10)
    assert out[0] == "isocompute.model=tiny"
    assert "data.train_files=['/d/t.parquet']" in out and "++isocompute.data.source=files" in out
    for item in ("actor_rollout_ref.rollout.n=4", "data.train_batch_size=2", "actor_rollout_ref.actor.ppo_mini_batch_size=2",
                 "trainer.total_training_steps=12", "trainer.test_freq=3", "trainer.experiment_name=p-b2_n4",
                 f"isocompute.run_dir={tmp_path / 'run'}"):
        assert item in out
    assert "trainer.total_epochs=3" in out  # 12 steps at floor(10 / 2) = 5 steps per epoch
    assert "trainer.total_epochs=12" in cell_overrides(plan, cell, tmp_path / "run")  # D unknown: 1 step per epoch
    with pytest.raises(PlanError, match="exceeds the 1 training problems"):
        cell_overrides(plan, cell, tmp_path / "run", dataset_size=1)
    assert not any("optim.lr" in o for o in out)  # the recipe's LR rule sets the lr from n and B_problem


def test_seeds_run_every_cell_once_per_seed_seed_major(tmp_path):
    raw = {"name": "p", "recipe": "cpu_demo", "budget_rollouts": 64, "b_problem": [4, 2], "n": [2]}
    plan = parse_plan({**raw, "seeds": [1, 0]})
    assert plan.seeds == (0, 1)
    # all cells of seed 0 before any of seed 1: a sweep stopped early leaves whole seeds
    assert [c.id for c in plan.cells()] == ["b2_n2-s0", "b4_n2-s0", "b2_n2-s1", "b4_n2-s1"]
    for cell in plan.cells():
        out = cell_overrides(plan, cell, tmp_path / "cells" / cell.id)
        assert out[-2:] == [f"data.seed={cell.seed}", f"actor_rollout_ref.rollout.seed={cell.seed}"]
        assert f"trainer.experiment_name=p-{cell.id}" in out and f"isocompute.run_dir={tmp_path / 'cells' / cell.id}" in out
    # without seeds: one run per cell, named as before, and the recipe's seeds (or the plan's own) stand
    plain = parse_plan({**raw, "overrides": ["data.seed=7"]})
    assert [c.id for c in plain.cells()] == ["b2_n2", "b4_n2"]
    out = cell_overrides(plain, plain.cells()[0], tmp_path / "run")
    assert [o for o in out if o.split("=")[0].endswith(".seed")] == ["data.seed=7"]


def test_seeds_reach_the_recipes_config(tmp_path):
    """The seed keys exist in verl's config as our recipes compose it (a renamed key would fail every run)."""
    from verl_isocompute.workflow.sweep.preflight import compose, preflight

    plan = _plan(tmp_path, b_problem=[2], n=[4], seeds=[0, 3])
    assert preflight(plan).cfg.data.seed == 0  # the first run's config; every run's is checked the same way
    cfg = compose(plan.recipe, cell_overrides(plan, plan.cells()[1], tmp_path / "run"))
    assert (cfg.data.seed, cfg.actor_rollout_ref.rollout.seed, cfg.trainer.experiment_name) == (3, 3, "t-b2_n4-s3")


def test_dry_run_lists_cells_x_seeds_and_totals():
    plan = parse_plan({"name": "p", "recipe": "r", "budget_rollouts": 1024, "b_problem": [8], "n": [2, 8, 256],
                       "seeds": [0, 1, 2]})
    lines = describe(plan).splitlines()
    assert "seeds [0, 1, 2]" in lines[0]
    assert [line.split()[0] for line in lines[2:-1]] == [f"b8_n{n}-s{s}" for s in range(3) for n in (2, 8, 256)]
    assert lines[2].split() == ["b8_n2-s0", "8", "2", "16", "64", "8", "1024"]
    assert lines[6].split()[:7] == ["b8_n8-s1", "8", "8", "64", "16", "2", "1024"]
    assert "skipped: one step takes 2048 rollouts > budget 1024" in lines[4]
    assert lines[-1] == ("6 runs to run (2 cells x 3 seeds; 3 runs skipped: budget below one step), "
                         f"{3 * (64 + 16)} steps, {6 * 1024} rollouts in total")
    one = parse_plan({"name": "p", "recipe": "r", "budget_rollouts": 64, "b_problem": [8], "n": [8], "seeds": [0, 1]})
    assert describe(one).splitlines()[-1] == ("2 runs to run (1 cell x 2 seeds; 0 runs skipped: budget below one step), "
                                              "2 steps, 128 rollouts in total")


def test_dry_run_cli_prints_cells_without_importing_verl(tmp_path):
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump({"recipe": "isocompute_hard", "budget_rollouts": 10**6, "b_max": 16_384}))
    code = (
        "import sys; from verl_isocompute.commands.cli import main; rc = main(['sweep', '--plan', sys.argv[1], '--dry-run']); "
        "assert 'verl' not in sys.modules and 'torch' not in sys.modules, 'dry run imported verl/torch'; sys.exit(rc)"
    )
    proc = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "27 cells to run" in proc.stdout and "b1024_n16" in proc.stdout and "b1024_n32" not in proc.stdout
    path.write_text(yaml.safe_dump({"recipe": "isocompute_hard", "budget_rollouts": 10**6, "b_max": 10}))
    proc = subprocess.run([sys.executable, "-m", "verl_isocompute.commands.cli", "sweep", "--plan", str(path), "--dry-run"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "b_max = 10" in proc.stderr and "Traceback" not in proc.stderr


# --- the runner's bookkeeping, with a fake executor ---------------------------------------------------


class FakeExecutor:
    """Runs a cell instantly by writing its run log; can fail a cell, stop mid-run, or be interrupted."""

    name = "fake"
    max_concurrent = 1

    def __init__(self, fail=(), interrupt_at=None, short=()):
        self.fail, self.interrupt_at, self.short = set(fail), interrupt_at, set(short)
        self.started: list[str] = []
        self.stopped: list[str] = []

    def start(self, plan, cell, run_dir, overrides):
        self.started.append(cell.id)
        assert f"isocompute.run_dir={run_dir}" in overrides
        (run_dir / runner.CONSOLE_LOG).write_text("console\n")
        handle = runner.CellHandle(run_dir)
        handle.cell = cell
        return handle

    def _write(self, cell, run_dir, upto):
        lines = [json.dumps({"header": {"n": cell.n, "b_problem": cell.b_problem}})]
        for step in range(0, upto + 1):
            c = step * cell.batch_rollouts
            # made-up saturating curves: larger n saturates higher but later, so n* grows with C
            ceiling = 0.4 + 0.1 * math.log2(cell.n)
            reward = 0.1 + (ceiling - 0.1) / (1 + 8.0 * cell.n / max(c, 1))
            if cell.seed is not None:  # seeds differ by a little noise, as reruns of one cell would
                reward += 0.01 * ((3 * cell.seed + step) % 5 - 2)
            lines.append(json.dumps({"step": step, "n": cell.n, "b_problem": cell.b_problem, "rollouts": c,
                                     "tokens": c * 10.0, "val/avg@4": reward}))
        (run_dir / RUN_LOG).write_text("\n".join(lines) + "\n")

    def poll(self, handle):
        cell = handle.cell
        if self.interrupt_at == cell.id:
            self._write(cell, handle.run_dir, 1)
            raise runner.Interrupted(signal.SIGTERM)
        if cell.id in self.fail:
            return runner.Outcome(False, "verl exited with status 1", 1)
        self._write(cell, handle.run_dir, cell.steps - (1 if cell.id in self.short else 0))
        return runner.Outcome(True, returncode=0)

    def stop(self, handle):
        self.stopped.append(handle.cell.id)

    def finish(self, handle):
        pass

    def connect(self):
        pass

    def reattach(self, record, run_dir):
        return None


def _plan(tmp_path, **extra):
    raw = {"name": "t", "recipe": "cpu_demo", "budget_rollouts": 64, "b_problem": [2, 4], "n": [2, 4],
           "sweep_dir": str(tmp_path / "sweep"), "fit": {"bootstrap": 0}, **extra}
    return parse_plan(raw, base_dir=tmp_path)


def _sweep(plan, executor):
    return runner.Sweep(plan, executor, progress=False, poll_s=0.0, echo=lambda msg: None)


def test_sweep_runs_every_cell_once_and_resumes_without_rerunning(tmp_path):
    plan = _plan(tmp_path)
    first = FakeExecutor(fail={"b4_n2"}, short={"b4_n4"})
    summary = _sweep(plan, first).run()
    assert first.started == ["b2_n2", "b2_n4", "b4_n2", "b4_n4"]
    state = json.loads((tmp_path / "sweep" / runner.STATE_FILE).read_text())
    assert state["cells"]["b2_n2"]["status"] == "done" and state["cells"]["b2_n2"]["steps"] == 16
    assert runner.logged_steps(tmp_path / "sweep" / "cells" / "b2_n2") == list(range(1, 17))
    assert state["cells"]["b4_n2"]["status"] == "failed" and "status 1" in state["cells"]["b4_n2"]["reason"]
    assert state["cells"]["b4_n4"]["status"] == "failed" and "ended at step 3 of 4" in state["cells"]["b4_n4"]["reason"]
    assert set(summary["failed"]) == {"b4_n2", "b4_n4"}
    done_log = (tmp_path / "sweep" / "cells" / "b2_n2" / RUN_LOG).read_text()

    second = FakeExecutor()
    _sweep(plan, second).run()
    assert second.started == ["b4_n2", "b4_n4"]  # finished cells are not run again
    state = json.loads((tmp_path / "sweep" / runner.STATE_FILE).read_text())
    assert all(r["status"] == "done" for r in state["cells"].values())
    assert state["cells"]["b2_n2"]["attempts"] == 1 and state["cells"]["b4_n4"]["attempts"] == 2
    assert (tmp_path / "sweep" / "cells" / "b2_n2" / RUN_LOG).read_text() == done_log
    # the failed attempts were moved aside, so each cell's log holds each step once
    assert sorted(p.name for p in (tmp_path / "sweep" / runner.ATTEMPTS_DIR).iterdir()) == ["b4_n2-attempt1", "b4_n4-attempt1"]
    steps = runner.logged_steps(tmp_path / "sweep" / "cells" / "b4_n4")
    assert steps == [1, 2, 3, 4]


def test_interrupted_sweep_marks_the_cell_unfinished_and_resumes_it(tmp_path):
    plan = _plan(tmp_path)
    executor = FakeExecutor(interrupt_at="b2_n4")
    with pytest.raises(runner.Interrupted):
        _sweep(plan, executor).run()
    assert executor.stopped == ["b2_n4"]
    state = json.loads((tmp_path / "sweep" / runner.STATE_FILE).read_text())
    assert state["cells"]["b2_n2"]["status"] == "done"
    assert state["cells"]["b2_n4"]["status"] == "interrupted" and state["cells"]["b2_n4"]["last_step"] == 1
    assert state["cells"]["b4_n2"]["status"] == "pending"

    again = FakeExecutor()
    _sweep(plan, again).run()
    assert again.started == ["b2_n4", "b4_n2", "b4_n4"]
    assert runner.logged_steps(tmp_path / "sweep" / "cells" / "b2_n4") == list(range(1, 9))


def test_changed_plan_is_an_error_not_a_silent_rerun(tmp_path):
    _sweep(_plan(tmp_path), FakeExecutor()).run()
    with pytest.raises(runner.SweepError, match=r"b2_n2 finished with another configuration \(steps 16 -> 32\)"):
        _sweep(_plan(tmp_path, budget_rollouts=128), FakeExecutor())
    with pytest.raises(runner.SweepError, match="overrides removed"):
        _sweep(_plan(tmp_path, overrides=["trainer.val_before_train=false"]), FakeExecutor())
    # adding grid values is fine: only the new cells run
    extra = FakeExecutor()
    _sweep(_plan(tmp_path, n=[2, 4, 8]), extra).run()
    assert extra.started == ["b2_n8", "b4_n8"]


def test_too_small_and_too_big_cells_are_skipped_with_a_reason(tmp_path):
    import pandas as pd

    data = tmp_path / "data"
    data.mkdir()
    pd.DataFrame({"x": range(3)}).to_parquet(data / "train.parquet")
    pd.DataFrame({"x": range(2)}).to_parquet(data / "val.parquet")
    plan = _plan(tmp_path, budget_rollouts=12, data={"train_files": "data/train.parquet", "val_files": "data/val.parquet"})
    executor = FakeExecutor()
    sweep = _sweep(plan, executor)
    sweep.run()
    state = sweep.state.cells
    assert executor.started == ["b2_n2", "b2_n4"]
    assert state["b4_n2"]["status"] == "skipped" and "exceeds the 3 training problems" in state["b4_n2"]["reason"]
    assert state["b4_n4"]["status"] == "skipped" and "less than one step" in state["b4_n4"]["reason"]


def test_missing_data_file_is_reported(tmp_path):
    plan = _plan(tmp_path, data={"train_files": "nope.parquet", "val_files": "nope.parquet"})
    with pytest.raises(PlanError, match="nope.parquet does not exist"):
        _sweep(plan, FakeExecutor())


def test_fit_runs_on_finished_cells(tmp_path):
    plan = _plan(tmp_path, budget_rollouts=1024, b_problem=[2], n=[2, 4, 8, 16])
    sweep = _sweep(plan, FakeExecutor(fail={"b2_n16"}))
    sweep.run()
    fit = sweep.fit()  # 3 finished cells; the failed one is left out
    assert fit["runs"] == 3
    sweep = _sweep(plan, FakeExecutor())
    sweep.run()
    fit = sweep.fit()
    assert fit["runs"] == 4 and fit["status"] == "fitted", fit
    for name in ("curve.json", "frontier.csv", "records.csv", "fits.csv", "report.md", "n_star.png"):
        assert (tmp_path / "sweep" / "fit" / name).is_file(), name
    # n* rises from the smallest n to about the largest over the swept compute
    assert 0.0 < fit["params"]["b"] < 2.0 and 3.0 < fit["params"]["L"] + fit["params"]["b"] < 5.0
    assert json.loads((tmp_path / "sweep" / runner.STATE_FILE).read_text())["fit"]["status"] == "fitted"


def test_seeded_sweep_resumes_per_cell_and_seed(tmp_path):
    plan = _plan(tmp_path, b_problem=[2], seeds=[0, 1])
    first = FakeExecutor(fail={"b2_n2-s1"}, interrupt_at="b2_n4-s1")
    with pytest.raises(runner.Interrupted):
        _sweep(plan, first).run()
    assert first.started == ["b2_n2-s0", "b2_n4-s0", "b2_n2-s1", "b2_n4-s1"]
    cells = json.loads((tmp_path / "sweep" / runner.STATE_FILE).read_text())["cells"]
    assert {k: r["status"] for k, r in cells.items()} == {
        "b2_n2-s0": "done", "b2_n4-s0": "done", "b2_n2-s1": "failed", "b2_n4-s1": "interrupted"}
    assert "data.seed=1" in cells["b2_n2-s1"]["spec"]["overrides"]

    again = FakeExecutor()
    _sweep(plan, again).run()
    assert again.started == ["b2_n2-s1", "b2_n4-s1"]  # the finished (cell, seed) runs are not run again
    cells = json.loads((tmp_path / "sweep" / runner.STATE_FILE).read_text())["cells"]
    assert all(r["status"] == "done" for r in cells.values())
    assert sorted(p.name for p in (tmp_path / "sweep" / runner.ATTEMPTS_DIR).iterdir()) == [
        "b2_n2-s1-attempt1", "b2_n4-s1-attempt1"]
    for run, steps in (("b2_n2-s0", 16), ("b2_n4-s1", 8)):
        assert runner.logged_steps(tmp_path / "sweep" / "cells" / run) == list(range(1, steps + 1))


def test_fit_reads_the_seeds_of_one_n_as_seeds(tmp_path):
    import pandas as pd

    plan = _plan(tmp_path, budget_rollouts=1024, b_problem=[2], n=[2, 4, 8, 16], seeds=[0, 1, 2],
                 fit={"bootstrap": 40, "bootstrap_over": "seeds"})
    sweep = _sweep(plan, FakeExecutor())
    sweep.run()
    fit = sweep.fit()
    assert fit["runs"] == 12 and fit["status"] == "fitted", fit
    fits = pd.read_csv(tmp_path / "sweep" / "fit" / "fits.csv")
    assert fits["n"].tolist() == [2, 4, 8, 16] and fits["runs"].tolist() == [3, 3, 3, 3]  # one group per n: its seeds
    provenance = json.loads((tmp_path / "sweep" / "fit" / "curve.json").read_text())["provenance"]
    assert provenance["bootstrap_over"] == "seeds" and provenance["bootstrap_succeeded"] > 0
    assert "cells/b2_n8-s2" in " ".join(provenance["runs"])
    report = (tmp_path / "sweep" / "fit" / "report.md").read_text()
    assert "resamples over the seeds of each group" in report and "single run" not in report


def test_unreachable_ray_address_fails_fast():
    import time

    start = time.monotonic()
    executor = RayJobExecutor(RayConfig("127.0.0.1:9"))  # building it connects to nothing
    with pytest.raises(runner.SweepError, match="cannot reach a Ray cluster at http://127.0.0.1:9"):
        executor.connect()
    assert time.monotonic() - start < 5
    with pytest.raises(runner.SweepError, match="dashboard's HTTP address"):
        RayConfig("ray://127.0.0.1:10001")


def test_ray_job_entrypoints():
    plan = parse_plan({"recipe": "cpu_demo", "budget_rollouts": 8, "b_problem": [2], "n": [4]})
    executor = RayJobExecutor(RayConfig("127.0.0.1:8265", mode="private"))  # no cluster needed
    command = executor.entrypoint(plan, ["a=1", "b=x y"])
    assert command == "RAY_ADDRESS=local python -m verl_isocompute.main --config-name cpu_demo a=1 'b=x y'"
    executor = RayJobExecutor(RayConfig("127.0.0.1:8265", max_concurrent=4, mode="join"))
    assert executor.max_concurrent == 1  # one verl run per cluster at a time in join mode
    assert executor.entrypoint(plan, ["a=1"]).endswith(
        "a=1 ++ray_kwargs.ray_init.num_cpus=null ++ray_kwargs.ray_init.num_gpus=null")


def test_micro_batch_check_skips_cells_verl_would_reject(tmp_path):
    from verl_isocompute.workflow.sweep.grid import micro_batch_issue

    sizes = {"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": 8, "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": None}
    assert micro_batch_issue(Cell(2, 4, 64), 1, sizes) is None
    assert "4 rollouts per step (4 per rank) is not a multiple of actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8" in \
        micro_batch_issue(Cell(2, 2, 64), 1, sizes)
    assert micro_batch_issue(Cell(32, 8, 10**6), 8, sizes) is None  # 256 / 8 ranks = 32 per rank
    assert "do not split over 8 training ranks" in micro_batch_issue(Cell(2, 2, 64), 8, sizes)
    plan = _plan(tmp_path)
    executor = FakeExecutor()
    sweep = runner.Sweep(plan, executor, progress=False, poll_s=0.0, echo=lambda msg: None,
                         cell_check=lambda cell: micro_batch_issue(cell, 1, sizes))
    sweep.run()
    assert executor.started == ["b2_n4", "b4_n2", "b4_n4"]
    assert sweep.state.cells["b2_n2"]["status"] == "skipped" and "not a multiple" in sweep.state.cells["b2_n2"]["reason"]


def test_cell_id():
    assert Cell(32, 8, 1000).id == "b32_n8"


def test_transfer_queue_controller_is_global_to_a_ray_cluster():
    """Why Ray cells run in private Ray instances by default (RayJobExecutor): if TransferQueue ever
    names its controller per run, verl runs could share a cluster and this can be revisited."""
    import inspect

    import transfer_queue.interface as tq

    assert 'name="TransferQueueController", namespace="transfer_queue"' in inspect.getsource(tq)
