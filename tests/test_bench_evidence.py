"""The evidence pipeline of docs/EVIDENCE.md section 1 (benchmarks/bench_evidence.py; issue 33): the task's
generator, fact-disjoint sets, the statistics, and the committed report recomputed from the committed files."""

from __future__ import annotations

import argparse
import math
import shutil
import sys
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
import bench_evidence  # noqa: E402
import evidence_rules  # noqa: E402

from verl_isocompute.data.arithmetic import OWN_TASKS, WORKED_EXAMPLES, own_task_problems  # noqa: E402
from verl_isocompute.data.facts import fact_group  # noqa: E402
from verl_isocompute.data.problems import row_problem_id  # noqa: E402

PUBLISHED = ROOT / "docs" / "evidence" / "learning"


@pytest.mark.parametrize("task", OWN_TASKS)
def test_own_tasks_draw_distinct_facts_never_the_examples(task):
    problems = own_task_problems(task, 500, seed=3)
    groups = [fact_group(p["question"]) for p in problems]
    assert len(set(groups)) == 500 and "trivial" not in groups
    assert fact_group(WORKED_EXAMPLES[task][0]) not in groups
    for p in problems:  # the answer is the expression's value
        a, op, b = p["question"].removeprefix("Calculate ").rstrip(".").split()
        assert int(p["answer"]) == (int(a) + int(b) if op == "+" else int(a) * int(b))
    assert own_task_problems(task, 500, seed=3) == problems  # seeded


def test_own_task_with_too_few_facts_is_refused():
    with pytest.raises(ValueError, match="719 distinct facts; 800 problems"):
        own_task_problems("two_digit_products", 800, seed=0)


def _args(tmp_path, **kw) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    bench_evidence.add_arguments(parser)
    args = parser.parse_args(["--out", str(tmp_path), "--pool-size", "120", "--tune-size", "10", "--dev-size", "10",
                              "--test-size", "20"])
    return argparse.Namespace(**{**vars(args), **kw})


def test_sets_are_fact_disjoint_sized_and_reproducible(tmp_path):
    args = _args(tmp_path / "a")
    bench_evidence.make_sets(args)
    table = pd.read_csv(tmp_path / "a" / "sets.csv", dtype=str)
    assert table["set"].value_counts().to_dict() == {"train": 80, "test": 20, "tune": 10, "dev": 10}
    assert table.groupby("fact_group")["set"].nunique().max() == 1  # no fact in two sets
    for name in bench_evidence.SETS:  # the rows carry the id the validation records are keyed by
        rows = pd.read_parquet(tmp_path / "a" / "sets" / f"{name}.parquet")
        assert [r["extra_info"]["problem_id"] for _, r in rows.iterrows()] == [row_problem_id(r) for _, r in rows.iterrows()]
        assert list(rows["extra_info"].map(lambda e: e["split"])) == [name] * len(rows)
        assert rows["prompt"].iloc[0][1]["content"] == WORKED_EXAMPLES["two_digit_sums"][1]
    bench_evidence.make_sets(_args(tmp_path / "b"))
    assert (tmp_path / "b" / "sets.csv").read_text() == (tmp_path / "a" / "sets.csv").read_text()


def test_a_pool_too_small_for_the_steps_is_refused(tmp_path):
    with pytest.raises(bench_evidence.BenchError, match="--pool-size 120: the sets and 20 steps"):
        bench_evidence.check_settings(_args(tmp_path, steps=20))


def test_t_interval_carries_its_degrees_of_freedom():
    x = evidence_rules.t_interval([1.0, 2.0, 3.0])
    assert x["mean"] == 2.0 and x["df"] == 2
    assert x["se"] == pytest.approx(1 / math.sqrt(3))
    assert x["high"] - x["mean"] == pytest.approx(4.302653 / math.sqrt(3), rel=1e-6)  # t(0.975, 2 df), not 1.96
    assert math.isnan(evidence_rules.t_interval([0.5])["se"])


def test_the_committed_report_is_what_the_committed_files_give(tmp_path):
    """EVIDENCE.md quotes report.md; recomputing it from the committed sets, tune samples, run files, the pilot's
    logs and the go / no-go runs must give the same text, figure for figure."""
    import shutil

    committed = (PUBLISHED / "report.md").read_text()
    copy = tmp_path / "learning"
    shutil.copytree(PUBLISHED, copy)
    shutil.copytree(PUBLISHED.parent / "go_no_go", tmp_path / "go_no_go")  # section 4's runs, beside section 1's
    (copy / "report.md").unlink()
    bench_evidence.report(copy)
    assert (copy / "report.md").read_text() == committed


def test_the_tables_evidence_md_quotes_are_the_reports():
    """Each table EVIDENCE.md marks as taken from report.md is in it, line for line."""
    report = (PUBLISHED / "report.md").read_text()
    text = (ROOT / "docs" / "EVIDENCE.md").read_text()
    marker = "<!-- from docs/evidence/learning/report.md -->\n"
    blocks = [part.split("\n\n", 1)[0] for part in text.split(marker)[1:]]
    assert len(blocks) >= 2
    for block in blocks:
        assert block.strip() and block in report, block


def test_bad_settings_and_an_empty_report_dir_are_one_line_each(tmp_path, capsys):
    assert bench_evidence.main(["--steps", "0", "--out", str(tmp_path)]) == 2
    assert bench_evidence.main(["--stage", "report", "--from", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["bench_evidence: error: --steps 0: give a whole number >= 1",
                   f"bench_evidence: error: {tmp_path}: no finished run under runs/; train (--stage train) or name the "
                   "published files (--from docs/evidence/learning)"]


def test_the_sweeps_training_set_shares_no_fact_with_tune_dev_or_test(tmp_path):
    args = _args(tmp_path, sweep_train_size=300)
    with pytest.raises(bench_evidence.BenchError, match="sets.csv does not exist: draw the sets first"):
        bench_evidence.make_sweep_train(args)
    bench_evidence.make_sets(args)
    rows = pd.read_parquet(bench_evidence.make_sweep_train(args))
    held = pd.read_csv(tmp_path / "sets.csv", dtype=str).query("set != 'train'")["fact_group"]
    facts = rows["extra_info"].map(lambda e: fact_group(e["question"]))
    assert len(rows) == 300 and facts.nunique() == 300 and not facts.isin(set(held)).any()
    with pytest.raises(bench_evidence.BenchError, match="--sweep-train-size 5000: two_digit_sums has 4054 facts"):
        bench_evidence.make_sweep_train(_args(tmp_path, sweep_train_size=5000))


def _tune_run(root: Path, name: str, correct: dict[int, list[int]], base_lr: str = "6.4e-4") -> None:
    import json

    run = root / "runs" / name
    run.mkdir(parents=True)
    (run / "learning_run.json").write_text(json.dumps({"command": ["python", f"isocompute.lr.base_lr={base_lr}"]}))
    lines = [{"step": step, "data_source": "isocompute/arithmetic", "problem": f"p{i}", "k": 4, "correct": c,
              "answered": 4, "echo": 0, "lenient": c} for step, counts in correct.items() for i, c in enumerate(counts)]
    (run / "validation_problems.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))


def test_go_no_go_needs_a_gain_beyond_two_paired_ses_still_rising_at_the_end(tmp_path):
    # 10 problems x 4 samples; a gain of 0.5 with every problem up by 1-3 is many SEs; the second run's
    # gain is as large but it fell between its last two validations
    _tune_run(tmp_path, "tune-s0", {0: [0, 1] * 5, 4: [1, 2] * 5, 8: [2, 3] * 5})
    _tune_run(tmp_path, "tune-s1", {0: [0, 1] * 5, 4: [3, 4] * 5, 8: [2, 3] * 5}, base_lr="1.6e-4")
    _tune_run(tmp_path, "tune-s2", {0: [0, 1] * 5, 4: [0, 1] * 5, 8: [1, 0] * 5})
    # registration 3's (b'): still improving, by a gain far inside the noise (+0.025, problems moving by +-1)
    _tune_run(tmp_path, "tune-s3", {0: [0, 4] * 5, 4: [0, 4] * 5, 8: [4, 0] * 4 + [4, 1]})
    rows = evidence_rules.go_no_go(tmp_path)
    assert [(r["base_lr"], r["go"], r["go_b_prime"]) for r in rows] == [
        ("6.4e-4", True, True), ("1.6e-4", False, False), ("6.4e-4", False, False), ("6.4e-4", False, True)]
    assert rows[0]["strict"] == {0: 0.125, 4: 0.375, 8: 0.625} and rows[0]["change"] == 0.5
    assert rows[3]["line"].endswith("+0.025: NO-GO; (b') GO") and rows[3]["change"] == pytest.approx(0.025)


def _sweep_run(root: Path, n: int, seed: int, rewards: list[float], budget: int = 1024, b_problem: int = 8) -> None:
    import json

    cell = root / "cells" / f"b{b_problem}_n{n}-s{seed}"
    cell.mkdir(parents=True)
    per_step = b_problem * n
    rows = [{"header": {"n": n, "b_problem": b_problem}}] + [
        {"step": i, "n": n, "b_problem": b_problem, "rollouts": i * per_step, "tokens": 0, "epoch": 0.0,
         "train/reward": r} for i, r in enumerate(rewards, 1)]
    (cell / "isocompute.jsonl").write_text("".join(json.dumps(x) + "\n" for x in rows))


def _curve(first: float, last: float, steps: int) -> list[float]:
    return [first + (last - first) * i / (steps - 1) for i in range(steps)]


@pytest.mark.parametrize(("small", "large", "verdict"), [
    ((0.5, 0.6), (0.3, 0.8), "n* rises with C"),       # n = 2 ahead early, n = 8 ahead late: the paper's direction
    ((0.3, 0.8), (0.5, 0.6), "n* falls with C"),
    ((0.5, 0.5), (0.6, 0.6), "n* stays put"),          # flat curves: Delta 0, whatever the gap between n
])
def test_the_registered_rule_reads_the_sweep_as_written(tmp_path, small, large, verdict):
    for seed in range(3):
        jitter = 0.01 * seed  # seeds differ a little, so the intervals have a width
        _sweep_run(tmp_path, 2, seed, [r + jitter for r in _curve(*small, 64)])
        _sweep_run(tmp_path, 8, seed, [r - jitter / 2 for r in _curve(*large, 16)])
    result = evidence_rules.nstar_verdict(tmp_path)
    assert result["verdict"] == verdict and result["seeds"] == [0, 1, 2] and result["Delta"]["df"] == 2
    q1_n2 = [r for r in _curve(*small, 64)][:16]  # C in (0, 256]: n = 2's first 16 steps of 16 rollouts
    assert result["runs"]["n2-s0"]["q1"] == pytest.approx(sum(q1_n2) / 16)


def test_cells_of_another_b_problem_are_left_out_and_named_not_mixed_in(tmp_path, capsys):
    """Issue 46: cells of B_problem 16 sharing (n, seed) with the registered B_problem 8 replaced them in the rule
    (one cell kept per (n, seed)): the verdict moved. The rule compares n at one B_problem; the others are named."""
    for seed in range(3):
        jitter = 0.01 * seed
        _sweep_run(tmp_path / "b8", 2, seed, [r + jitter for r in _curve(0.5, 0.6, 64)])
        _sweep_run(tmp_path / "b8", 8, seed, [r - jitter / 2 for r in _curve(0.3, 0.8, 16)])
    alone = evidence_rules.nstar_verdict(tmp_path / "b8")
    shutil.copytree(tmp_path / "b8", tmp_path / "mixed")
    for seed in range(3):  # B_problem 16: n = 8 far ahead early, so mixed in they would flip the sign of D_q1
        _sweep_run(tmp_path / "mixed", 2, seed, [0.1] * 32, b_problem=16)
        _sweep_run(tmp_path / "mixed", 8, seed, [0.9] * 8, b_problem=16)
    assert evidence_rules.nstar_verdict(tmp_path / "mixed") == alone
    assert alone["verdict"] == "n* rises with C"
    assert bench_evidence.main(["--stage", "verdict", "--from", str(tmp_path / "mixed")]) == 0
    out = capsys.readouterr().out
    assert "left out (B_problem 16, not 8): b16_n2-s0, b16_n2-s1, b16_n2-s2, b16_n8-s0, b16_n8-s1, b16_n8-s2" in out
    assert out.rstrip().endswith(f"n* rises with C (B_problem 8, seeds [0, 1, 2]; Delta {bench_evidence.pm(alone['Delta'])})")
    with pytest.raises(bench_evidence.BenchError, match=r"no finished cell of B_problem 4 \(B_problem 16, not 4: "):
        evidence_rules.nstar_verdict(tmp_path / "mixed", b_problem=4)
    result = evidence_rules.nstar_verdict(tmp_path / "mixed", b_problem=16, budget=1024)
    assert result["runs"]["n8-s0"] == {"q1": 0.9, "q4": 0.9}  # --b-problem 16 reads the other cells alone


def test_the_rule_waits_for_three_finished_seeds_of_both_n(tmp_path):
    for seed in range(3):
        _sweep_run(tmp_path, 2, seed, [0.5] * 64)
    for seed in range(2):
        _sweep_run(tmp_path, 8, seed, [0.5] * 16)
    _sweep_run(tmp_path, 8, 2, [0.5] * 15)  # stopped one step short of the budget
    with pytest.raises(bench_evidence.BenchError,
                       match=r"both finished seeds \[0, 1\] at B_problem 8; the registered rule needs at least 3"):
        evidence_rules.nstar_verdict(tmp_path)


def test_seeds_that_disagree_read_underpowered(tmp_path):
    for seed, large in enumerate([(0.3, 0.7), (0.7, 0.3), (0.5, 0.5)]):
        _sweep_run(tmp_path, 2, seed, [0.5] * 64)
        _sweep_run(tmp_path, 8, seed, _curve(*large, 16))
    result = evidence_rules.nstar_verdict(tmp_path)
    assert result["verdict"] == "underpowered"
    assert result["Delta"]["low"] < 0 < result["Delta"]["high"] and result["Delta"]["high"] - result["Delta"]["low"] > 0.1


def test_the_registered_sweep_plan_is_the_one_section_4_describes():
    """run_examples/nstar_cpu.yaml was committed with the pre-registration: n in {2, 8}, B_problem 8, 1,024 rollouts,
    seeds 0-4, trained on the sweep's own set, validated on test, fitted on first-visit training reward."""
    import yaml

    from verl_isocompute.workflow.sweep.plan import parse_plan

    path = ROOT / "run_examples" / "nstar_cpu.yaml"
    plan = parse_plan(yaml.safe_load(path.read_text()), base_dir=path.parent)
    runs = [(c.n, c.b_problem, c.seed) for c in plan.cells()]
    assert runs == [(n, 8, s) for s in range(5) for n in (2, 8)]
    assert plan.budget_rollouts == 1024 and plan.fit["metric"] == "train/reward" and plan.fit["bootstrap_over"] == "seeds"
    assert plan.train_files[0].endswith("sets/sweep_train.parquet") and plan.val_files[0].endswith("sets/test.parquet")
    assert "actor_rollout_ref.rollout.name=vllm" in plan.overrides  # the amendment of the same day
