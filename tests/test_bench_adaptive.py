"""benchmarks/bench_adaptive.py without its SmolLM2 runs: the train stage's plan and command lines (``--dry-run``,
each arm's config composed and checked as the run would check it) and the report stage on small run directories
written in the trainer's formats (run log, verl's validation dumps, the benchmark's learning_run.json), its
figures computed by hand."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import bench_adaptive  # noqa: E402

# log2 n*(c) = 1 + 2 sigma(3.5 (log10 c - 1.63)) on the grid 2, 4, 8 (tests/test_adaptive_e2e.py's curve). At the
# budget 512: 1 + 2 sigma(3.5 x 1.079) = 2.955 (n* 7.76), nearest 8 in log2; at c = 0 (clamped to 10): 1.20, so n = 2.
CURVE = {"L": 2.0, "k": 3.5, "log10_C0": 1.63, "b": 1.0, "compute_unit": "rollouts", "metric": "val/avg@4",
         "c_range": [10, 1000], "n_grid": [2, 4, 8]}

# the hf rollout: these dry runs check the plan, also where vLLM (the default rollout) is not installed
HF = ["--rollout", "hf"]


def _dry_run(tmp_path, capsys, *extra):
    curve = tmp_path / "curve.json"
    curve.write_text(json.dumps(CURVE))
    runs = tmp_path / "adaptive"
    (runs / "fixed-s1").mkdir(parents=True)
    (runs / "fixed-s1" / "learning_run.json").write_text("{}")  # finished: skipped
    code = bench_adaptive.main(["--stage", "train", "--dry-run", *HF, "--curve", str(curve), "--runs-dir", str(runs),
                                "--out", str(tmp_path / "learning")])
    out, err = capsys.readouterr()
    return code, out, err, curve, runs


def test_the_dry_run_prints_three_arms_at_one_budget_seed_by_seed_and_runs_nothing(tmp_path, capsys):
    code, out, err, curve, runs = _dry_run(tmp_path, capsys)
    assert code == 0, err
    assert "fixed: n 8 (the allocation's: n*(512) = 7.76), B_problem 8, up to 8 steps, 512 rollouts" in out
    assert "per_prompt: n 8 (the allocation's: n*(512) = 7.76), B_problem 8, up to 8 steps, 512 rollouts" in out
    assert "schedule: n 2 (n*(c) on the grid [2, 4, 8]), B_problem 8, up to 32 steps, <= 512 rollouts" in out
    commands = [line[2:] for line in out.splitlines() if line.startswith("$ ")]
    names = [next(a for a in shlex.split(c) if a.startswith("trainer.experiment_name=")).split("=")[1] for c in commands]
    assert names == [f"{arm}-s{s}" for s in range(3) for arm in ("fixed", "schedule", "per_prompt")]
    for command, name in zip(commands, names):
        args = shlex.split(command.removesuffix(" (done: skipped)"))
        arm, seed = name.rsplit("-s", 1)
        assert f"data.seed={seed}" in args and f"actor_rollout_ref.rollout.seed={seed}" in args
        assert "data.train_batch_size=8" in args and "actor_rollout_ref.actor.ppo_mini_batch_size=8" in args
        assert f"isocompute.run_dir={(runs / name).absolute()}" in args
        expected = {"fixed": ["actor_rollout_ref.rollout.n=8", "trainer.total_training_steps=8"],
                    "per_prompt": ["actor_rollout_ref.rollout.n=8", "trainer.total_training_steps=8",
                                   "isocompute.per_prompt_n.enable=true"],
                    "schedule": ["actor_rollout_ref.rollout.n=2", "trainer.total_training_steps=32",
                                 "isocompute.schedule.enable=true", f"isocompute.schedule.curve={curve.absolute()}",
                                 "isocompute.schedule.budget_rollouts=512"]}[arm]
        assert set(expected) <= set(args), (arm, args)
        assert ("isocompute.schedule.enable=true" in args) == (arm == "schedule")
        assert ("isocompute.per_prompt_n.enable=true" in args) == (arm == "per_prompt")
        assert command.endswith("(done: skipped)") == (name == "fixed-s1")
    assert sorted(p.name for p in runs.iterdir()) == ["fixed-s1"]  # nothing run, nothing made


def test_each_arms_command_is_a_config_the_trainer_accepts(tmp_path, capsys):
    """The printed overrides composed on the recipe and checked as the run checks them before Ray starts
    (the one mini-batch per-step n needs, the schedule's curve and budget, the LR rule)."""
    from verl_isocompute.training.config import check_config, compose_recipe
    from verl_isocompute.training.adaptive_config import build_adaptive

    code, out, _, _, _ = _dry_run(tmp_path, capsys)
    assert code == 0
    for line in [line for line in out.splitlines() if line.startswith("$ ")][:3]:
        args = shlex.split(line[2:])
        recipe = args[args.index("--config-name") + 1]
        overrides = [a for a in args[args.index("--config-name") + 2:] if not a.startswith(("data.train_files=", "data.val_files="))]
        cfg = compose_recipe(recipe, overrides)
        check_config(cfg)
        adaptive = build_adaptive(cfg)
        name = next(a for a in overrides if a.startswith("trainer.experiment_name=")).split("=")[1]
        if name.startswith("fixed"):
            assert adaptive is None
        elif name.startswith("schedule"):
            assert adaptive.schedule.budget_rollouts == 512 and adaptive.schedule.grid == (2, 4, 8)
        else:
            assert adaptive.per_prompt is not None and adaptive.schedule is None and adaptive.n == 8


def test_without_a_curve_it_says_where_one_comes_from(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no runs/pilot_cpu/fit/curve.json here
    code = bench_adaptive.main(["--stage", "train", "--dry-run", *HF])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert "no preset's fitted range covers a budget of 512 rollouts" in err and "--curve" in err



@pytest.mark.parametrize("arms, extra, words", [
    ("fixed,per_prompt", [], "per_prompt at n 2: every prompt already gets n_min 2, so the split has no room"),
    ("fixed,per_prompt", ["isocompute.per_prompt_n.n_min=4", "--n", "4"], "per_prompt at n 4: every prompt already gets n_min 4"),
    ("fixed,schedule", [], "n*(c) stays at n 2 over the whole budget of 512, so the arm would repeat the fixed arm"),
    ("fixed,per_prompt", ["isocompute.per_prompt_n.n_min=two"], "isocompute.per_prompt_n.n_min='two': use a whole "
     "number >= 2"),
])
def test_an_arm_that_cannot_differ_from_the_fixed_arm_is_refused(tmp_path, capsys, arms, extra, words):
    """On a flat curve (n* = 2 at every C, as the CPU pilot's fit) the allocation's n is 2: per-prompt n has no
    rollout to move (each prompt already at n_min) and the schedule never leaves n = 2."""
    curve = tmp_path / "flat.json"
    curve.write_text(json.dumps({**CURVE, "L": 0.0}))
    code = bench_adaptive.main(["--stage", "train", "--dry-run", *HF, "--curve", str(curve), "--arms", arms,
                                "--runs-dir", str(tmp_path / "runs"), "--out", str(tmp_path / "learning"), *extra])
    out, err = capsys.readouterr()
    assert code == 2 and err.count("\n") == 1 and words in err, err
    assert "$ " not in out and not (tmp_path / "runs").exists()


def test_with_room_to_differ_the_same_flat_curve_is_planned(tmp_path, capsys):
    """--n 4: per-prompt n can move rollouts between prompts (n_min 2), and the schedule (n = 2) differs from n = 4."""
    curve = tmp_path / "flat.json"
    curve.write_text(json.dumps({**CURVE, "L": 0.0}))
    code = bench_adaptive.main(["--stage", "train", "--dry-run", *HF, "--curve", str(curve), "--n", "4",
                                "--runs-dir", str(tmp_path / "runs"), "--out", str(tmp_path / "learning")])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "per_prompt: n 4 (--n), B_problem 8, up to 16 steps, 512 rollouts" in out
    assert "schedule: n 2 (n*(c) on the grid [2, 4, 8])" in out

# --- the report -----------------------------------------------------------------------------------------

# per arm and seed: correct samples of 4 per problem at the last validation, n per step, zero-variance share per step
RUNS = {
    "fixed": {0: ([4, 2, 0, 2], [8, 8], [0.5, 0.25]), 1: ([4, 2, 0, 0], [8, 8], [0.25, 0.25])},
    "schedule": {0: ([4, 4, 0, 2], [2, 2, 4], [0.5, 0.5, 0.25]), 1: ([4, 2, 2, 2], [2, 2, 4], [0.5, 0.25, 0.0])},
    "per_prompt": {0: ([4, 2, 0, 2], [8, 8], [0.75, 0.5]), 1: ([4, 2, 0, 0], [8, 8], [0.5, 0.25])},
}
B_PROBLEM = 8
# validations before the last (step: correct samples of 4 per problem): the fixed arm's at C = 64, where the
# schedule's runs end, for the comparison at every C both arms validated at
MID = {("fixed", 0): {1: [4, 2, 0, 0]}, ("fixed", 1): {1: [2, 2, 0, 0]}}


def _write_run(root: Path, arm: str, seed: int, correct: list[int], ns: list[int], zero: list[float]) -> None:
    from verl_isocompute.runlog import write_run_log

    run = root / f"{arm}-s{seed}"
    rows, c = [{"step": 0, "n": ns[0], "b_problem": B_PROBLEM, "rollouts": 0, "tokens": 0, "epoch": 0.0}], 0
    for step, (n, share) in enumerate(zip(ns, zero), start=1):
        c += B_PROBLEM * n
        row = {"step": step, "n": n, "b_problem": B_PROBLEM, "rollouts": c, "tokens": 20 * c, "epoch": step / 8,
               "lr": 1e-6, "train/reward": 0.5, "isocompute/zero_var_rollout_share": share}
        if arm == "per_prompt":
            row |= {"isocompute/expected_zero_var_share": share + 0.1, "isocompute/expected_zero_var_share_fixed_n": share}
        rows.append(row)
    write_run_log(run, {"n": ns[0], "b_problem": B_PROBLEM, "val_n": 4}, rows)
    (run / "validation").mkdir()
    validations = {0: [2, 2, 0, 0], **MID.get((arm, seed), {}), len(ns): correct}
    for step, hits in validations.items():  # verl's dump: one line per sample
        lines = [{"input": f"problem {p}", "acc": i < h, "score": float(i < h)} for p, h in enumerate(hits) for i in range(4)]
        (run / "validation" / f"{step}.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    timing = [{"step": step, "data": {"timing_s/step": 30.0, "timing_s/gen": 10.0}} for step in range(1, len(ns) + 1)]
    if (arm, seed) == ("fixed", 1):  # a resumed run logs its first step again; the second record counts
        timing.insert(1, {"step": 1, "data": {"timing_s/step": 60.0}})
    (run / "verl_metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in timing))
    (run / "learning_run.json").write_text(json.dumps({"wall_s": 600.0 + 60 * seed, "started_unix": 0.0, "machine": {
        "cpu_capability": "AVX512", "native_bf16": [], "cores": 2, "loadavg": [1.0, 1.0, 1.0]}}))


@pytest.fixture
def summary(tmp_path, capsys):
    for arm, seeds in RUNS.items():
        for seed, figures in seeds.items():
            _write_run(tmp_path, arm, seed, *figures)
    assert bench_adaptive.main(["--stage", "report", "--runs-dir", str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    return json.loads((tmp_path / "adaptive_summary.json").read_text()), printed


def test_the_report_gives_avg_at_k_at_equal_c_with_both_standard_errors(summary):
    data, printed = summary
    fixed, schedule = data["arms"]["fixed"], data["arms"]["schedule"]
    # fixed: seeds 0.5 and 0.375 -> 0.4375, SE over seeds |0.5 - 0.375| / 2; per problem (1, 0.5, 0, 0.25): SE 0.2135
    assert fixed["avg"] == pytest.approx(0.4375) and fixed["se_seeds"] == pytest.approx(0.0625)
    assert fixed["se_problems"] == pytest.approx(0.21347, abs=1e-5) and fixed["problems"] == 4 and fixed["k"] == 4
    assert fixed["rollouts"] == [128, 128] and "vs_fixed" not in fixed
    # schedule: 0.625 both seeds; C = 8 x (2 + 2 + 4) = 64; paired on problems (0, .25, .25, .25): +0.1875 ± 0.0625,
    # on seeds (+0.125, +0.25): SE 0.0625
    assert schedule["avg"] == pytest.approx(0.625) and schedule["se_seeds"] == pytest.approx(0.0)
    assert schedule["rollouts"] == [64, 64] and schedule["n_per_step"] == [2, 2, 4]
    vs = schedule["vs_fixed"]
    assert vs["change"] == pytest.approx(0.1875) and vs["se_problems"] == pytest.approx(0.0625)
    assert vs["se_seeds"] == pytest.approx(0.0625) and vs["seeds"] == 2 and vs["z_problems"] == pytest.approx(3.0)
    assert data["arms"]["per_prompt"]["vs_fixed"]["change"] == pytest.approx(0.0)
    assert "schedule vs fixed n at equal C: +0.188 ± 0.062 (paired SE over 4 problems): up by 3.0 SE" in printed


def test_the_report_gives_the_zero_variance_share_per_step_and_the_wall_time(summary):
    data, printed = summary
    fixed, schedule, per_prompt = (data["arms"][a] for a in ("fixed", "schedule", "per_prompt"))
    assert fixed["zero_var_share"] == pytest.approx([0.3125, 0.0625])  # run means 0.375 and 0.25
    assert fixed["zero_var_share_per_step"] == pytest.approx([0.375, 0.25])
    assert schedule["zero_var_share_per_step"] == pytest.approx([0.5, 0.375, 0.125])
    # expected under the split: run means 0.725 and 0.475; under a fixed n (the logged shares): 0.625 and 0.375
    assert per_prompt["expected_zero_var_share"] == pytest.approx([0.6, 0.125])
    assert per_prompt["expected_zero_var_share_fixed_n"] == pytest.approx([0.5, 0.125])
    assert fixed["wall_s"] == pytest.approx([630.0, 30.0])
    row = next(line for line in printed.splitlines() if line.startswith("schedule "))
    assert "2->4" in row and "0.625" in row and "+0.188 (0.062; 0.062)" in row and "10.5 ± 0.5" in row
    assert "  fixed      0.38 0.25" in printed
    assert "expected under the split 0.600 ± 0.125, under a fixed n 0.500 ± 0.125" in printed
    assert data["machine"]["cpu_capability"] == "AVX512" and data["unfinished"] == []


def test_the_report_compares_each_arm_with_fixed_n_at_every_c_both_validated_at(summary):
    data, printed = summary
    fixed, schedule = data["arms"]["fixed"], data["arms"]["schedule"]
    # fixed validated at C = 0, 64 and 128; the schedule at 0 and 64 (where its budget of 3 steps ends)
    assert [row["C"] for row in fixed["at_c"]] == [0, 64, 128]
    assert fixed["at_c"][1]["avg"] == pytest.approx(0.3125) and fixed["at_c"][1]["se_seeds"] == pytest.approx(0.0625)
    # at C = 64: per problem, fixed (0.75, 0.5, 0, 0) and schedule (1, 0.75, 0.25, 0.5) over the two seeds: the
    # change is 0.3125 with SE std(0.25, 0.25, 0.25, 0.5) / 2; per seed 0.625 - 0.375 and 0.625 - 0.25
    before, row = schedule["vs_fixed_at_c"]
    # before training both arms validated the same model: what differs there is sampling noise (here none)
    assert before["C"] == 0 and before["change"] == pytest.approx(0.0) and before["se_seeds"] == pytest.approx(0.0)
    assert "C      0: fixed 0.250, schedule 0.250, +0.000 (0.000; 0.000)  before training: the same model" in printed
    assert row["C"] == 64 and row["fixed"] == pytest.approx(0.3125) and row["arm"] == pytest.approx(0.625)
    assert row["change"] == pytest.approx(0.3125) and row["se_problems"] == pytest.approx(0.0625)
    assert row["se_seeds"] == pytest.approx(0.0625) and row["problems"] == 4
    assert "C     64: fixed 0.312, schedule 0.625, +0.312 (0.062; 0.062)" in printed
    assert "vs_fixed_at_c" not in fixed and all("per_problem_at_c" not in r for r in data["runs"]["fixed"])


def test_the_report_gives_the_time_in_training_steps_without_the_validations(summary):
    data, printed = summary
    # verl's timing_s/step per step (30 s; the fixed arm's seed 1 logged step 1 twice, a resume: the last counts)
    assert data["arms"]["fixed"]["train_s"] == pytest.approx([75.0, 15.0])  # 60 s and 90 s
    assert data["arms"]["schedule"]["train_s"] == pytest.approx([90.0, 0.0])
    row = next(line for line in printed.splitlines() if line.startswith("fixed "))
    assert row.endswith("1.2 ± 0.2")
