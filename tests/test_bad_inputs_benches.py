"""Bad input to the bench scripts (benchmarks/bench_adaptive.py, bench_learning.py, bench_evidence.py,
bench_tis.py; issue 35, item 2; issue 46): one line on stderr, exit status 2, no traceback, nothing started or
written, as the ``isocompute`` commands refuse theirs (every script runs through
:func:`verl_isocompute.commands.cli.run_command`, and reads its runs back through benchmarks/run_files.py).

Each row is (script, arguments, a piece of the one error line). The settings rows run a stage that would start a
run or a curation: any subprocess started fails the test. The report, go / no-go and verdict rows read run
directories written by hand: missing, empty, garbage, holding no validation after training, a run-log header
without n, a cell folder whose name carries no seed, no sets.csv, a run's JSON file that is not JSON, verl's
metrics with a line that is not JSON or without the metric the report needs, a sweep whose cells miss the first
quarter's steps.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from test_bad_inputs_workflow import _check  # exit status and the one error line

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import bench_adaptive  # noqa: E402
import bench_evidence  # noqa: E402
import bench_learning  # noqa: E402
import bench_tis  # noqa: E402

# tests/test_bench_adaptive.py's curve: n 2 -> 4 -> 8 below the budget 512, the allocation's n 8
CURVE = {"L": 2.0, "k": 3.5, "log10_C0": 1.63, "b": 1.0, "compute_unit": "rollouts", "metric": "val/avg@4",
         "c_range": [10, 1000], "n_grid": [2, 4, 8]}
HEADER = json.dumps({"header": {"val_n": 4, "n": 8, "b_problem": 8, "lr": 2e-5}})
STEP0 = json.dumps({"step": 0, "n": 8, "b_problem": 8, "rollouts": 0, "tokens": 0, "epoch": 0.0})
STEP1 = json.dumps({"step": 1, "n": 8, "b_problem": 8, "rollouts": 64, "tokens": 640, "epoch": 0.125})
SAMPLE = json.dumps({"input": "problem 0", "acc": True, "score": 1.0})


def _run(root: Path, name: str, log: str | None, validations: dict[int, str]) -> None:
    """A run directory ``root/name`` with ``log`` as its isocompute.jsonl and verl's validation dumps."""
    run = root / name
    (run / "validation").mkdir(parents=True)
    if log is not None:
        (run / "isocompute.jsonl").write_text(log)
    for step, text in validations.items():
        (run / "validation" / f"{step}.jsonl").write_text(text)


def _log(header: dict, n: int = 8, steps: int = 1, reward: float | None = 0.5) -> str:
    """A run log of ``steps`` training steps of 8 problems x n rollouts, with ``header``."""
    rows = [{"header": header}] + [
        {"step": s, "n": n, "b_problem": 8, "rollouts": 8 * n * s, "tokens": 0, "epoch": 0.0,
         **({"train/reward": reward} if reward is not None and s > 0 else {})} for s in range(steps + 1)]
    return "".join(json.dumps(row) + "\n" for row in rows)


def _evidence_run(root: Path, header: dict | None = None, info: str | None = None) -> None:
    """A finished run of bench_evidence's train stage under ``root``/runs/test-s0: its log, validation counts before
    and after, and learning_run.json (``info``: its text)."""
    run = root / "runs" / "test-s0"
    run.mkdir(parents=True)
    (run / "isocompute.jsonl").write_text(_log(header if header is not None else {"n": 8, "b_problem": 8, "lr": 2e-5}))
    counts = [{"step": step, "problem": f"p{i}", "k": 4, "correct": c, "answered": 4, "echo": 0, "lenient": c}
              for step in (0, 1) for i, c in enumerate([1, 2, 3])]
    (run / "validation_problems.jsonl").write_text("".join(json.dumps(c) + "\n" for c in counts))
    (run / "learning_run.json").write_text(info if info is not None else json.dumps(
        {"command": ["python"], "wall_s": 1.0, "machine": {"cpu_capability": "AVX2", "cores": 2, "loadavg": [0.0]}}))


def _sweep(root: Path, cells: dict[str, str]) -> None:
    """A sweep directory: ``cells`` maps a cell folder's name to its run log's text."""
    for name, text in cells.items():
        (root / "cells" / name).mkdir(parents=True)
        (root / "cells" / name / "isocompute.jsonl").write_text(text)


def _cells(missing_first_quarter: str | None = None) -> dict[str, str]:
    """Three seeds of n = 2 (64 steps) and n = 8 (16 steps) to the budget of 1,024 rollouts; one cell's log can lack
    the steps of the first quarter (a log that lost its first lines)."""
    cells = {}
    for seed in range(3):
        for n, steps in ((2, 64), (8, 16)):
            text = _log({"n": n, "b_problem": 8}, n=n, steps=steps)
            if f"b8_n{n}-s{seed}" == missing_first_quarter:
                lines = text.splitlines(keepends=True)
                text = lines[0] + "".join(lines[2 + steps // 4:])
            cells[f"b8_n{n}-s{seed}"] = text
    return cells


def _tis(root: Path, metrics: str, info: str | None = None) -> None:
    (root / "hf").mkdir(parents=True)
    (root / "hf" / "verl_metrics.jsonl").write_text(metrics)
    if info is not None:
        (root / "hf" / "tis_run.json").write_text(info)


TIS_STEP = {f"actor/rollout_corr/{k}": v for k, v in {
    "rollout_is_mean": 1.0, "rollout_is_max": 1.5, "rollout_is_min": 0.6, "rollout_is_seq_max": 1.02, "kl": 1e-3,
    "rollout_is_ratio_fraction_high": 0.0}.items()}


def _runs(root: Path) -> None:
    _run(root / "learning", "garbage", "not json\nnor this\n", {})
    _run(root / "learning", "no_keys", f"{HEADER}\n{json.dumps({'step': 1, 'n': 8})}\n", {})
    _run(root / "learning", "garbage_dump", f"{HEADER}\n{STEP0}\n{STEP1}\n", {0: SAMPLE + "\n", 1: "junk\nmore junk\n"})
    _run(root / "learning", "before_training_only", f"{HEADER}\n{STEP0}\n{STEP1}\n", {0: SAMPLE + "\n"})
    (root / "learning" / "empty").mkdir()
    _run(root / "adaptive", "fixed-s0", f"{HEADER}\n{STEP0}\n{STEP1}\n", {0: SAMPLE + "\n"})
    _run(root / "garbage_arm", "fixed-s0", "not json\nnor this\n", {})
    (root / "a_file").write_text("not a directory\n")
    (root / "curve.json").write_text(json.dumps(CURVE))
    _run(root / "learning", "no_n", _log({"val_n": 4, "b_problem": 8, "lr": 2e-5}), {0: SAMPLE + "\n", 1: SAMPLE + "\n"})
    _run(root / "learning", "bad_info", f"{HEADER}\n{STEP0}\n{STEP1}\n", {0: SAMPLE + "\n", 1: SAMPLE + "\n"})
    (root / "learning" / "bad_info" / "learning_run.json").write_text("{not json")
    _run(root / "adaptive_bad_info", "fixed-s0", f"{HEADER}\n{STEP0}\n{STEP1}\n", {0: SAMPLE + "\n", 1: SAMPLE + "\n"})
    (root / "adaptive_bad_info" / "fixed-s0" / "learning_run.json").write_text("[1, 2")
    _run(root / "adaptive_bad_metrics", "fixed-s0", f"{HEADER}\n{STEP0}\n{STEP1}\n", {0: SAMPLE + "\n", 1: SAMPLE + "\n"})
    (root / "adaptive_bad_metrics" / "fixed-s0" / "verl_metrics.jsonl").write_text(
        json.dumps({"step": 1, "data": {"timing_s/step": 3.0}}) + "\nnot json\n" + json.dumps({"step": 2, "data": {}}) + "\n")
    _evidence_run(root / "evidence_no_sets")
    _evidence_run(root / "evidence_bad_info", info="{'command': ['python']}")
    (root / "evidence_bad_info" / "sets.csv").write_text("problem_id,set,question,answer,fact_group\n")
    _evidence_run(root / "evidence_no_n", header={"b_problem": 8, "lr": 2e-5})
    (root / "evidence_no_n" / "sets.csv").write_text("problem_id,set,question,answer,fact_group\n")
    _evidence_run(root / "evidence_bad_sets")
    (root / "evidence_bad_sets" / "sets.csv").write_text("problem_id;set;question\n")
    (root / "empty_folder").mkdir()
    _sweep(root / "sweep_unnamed", {"b8_n2": _log({"n": 2, "b_problem": 8}, n=2, steps=64)})
    _sweep(root / "sweep_no_n", {"b8_n2-s0": _log({"b_problem": 8}, n=2, steps=64)})
    _sweep(root / "sweep_garbage", {"b8_n2-s0": "this is not a run log\n"})
    _sweep(root / "sweep_first_quarter_missing", _cells(missing_first_quarter="b8_n8-s1"))
    _tis(root / "tis_bad_line", json.dumps({"step": 1, "data": TIS_STEP}) + "\n{oops\n" + json.dumps({"step": 2, "data": TIS_STEP}) + "\n")
    _tis(root / "tis_no_metric", json.dumps({"step": 1, "data": {k: v for k, v in TIS_STEP.items() if not k.endswith("high")}}) + "\n")
    _tis(root / "tis_bad_info", json.dumps({"step": 1, "data": TIS_STEP}) + "\n", info="wall_s: 3\n")


# --rollout hf: the rows check other settings, also where vLLM (the default rollout) is not installed
ADAPTIVE = ["--stage", "train", "--dry-run", "--curve", "curve.json", "--runs-dir", "runs", "--out", "learning", "--rollout", "hf"]
LEARNING = ["--out", "learning", "--rollout", "hf"]
ROWS = [
    ("adaptive: --seeds 0", bench_adaptive, [*ADAPTIVE, "--seeds", "0"], "--seeds 0: each arm runs once per seed"),
    ("adaptive: --n 1", bench_adaptive, [*ADAPTIVE, "--n", "1"],
     "--n 1: GRPO's advantage compares the rollouts of one problem, so n must be >= 2"),
    ("adaptive: n_min=1", bench_adaptive, [*ADAPTIVE, "isocompute.per_prompt_n.n_min=1"],
     "isocompute.per_prompt_n.n_min=1 is out of range: use a whole number >= 2"),
    ("adaptive: n_min typo", bench_adaptive, [*ADAPTIVE, "--n", "4", "isocompute.per_prompt_n.n_mn=3"],
     "unknown key isocompute.per_prompt_n.n_mn: did you mean isocompute.per_prompt_n.n_min?"),
    # the whole isocompute block is checked by the schema, as the run would check it, before the first run
    ("adaptive: fixed arm, a scalar n_grid", bench_adaptive, [*ADAPTIVE, "--arms", "fixed", "--n", "8",
                                                               "isocompute.schedule.n_grid=8"],
     "isocompute.schedule.n_grid=8 is one value where a list is expected"),
    ("adaptive: fixed arm, an infinite curation weight", bench_adaptive, [*ADAPTIVE, "--arms", "fixed", "--n", "8",
                                                                          "isocompute.per_prompt_n.curation_weight=inf"],
     "isocompute.per_prompt_n.curation_weight=inf: use a finite number >= 0"),
    ("learning: a switch that is not a boolean", bench_learning, [*LEARNING, "--stage", "train",
                                                                  "isocompute.per_prompt_n.enable=maybe"],
     "isocompute.per_prompt_n.enable='maybe': use true or false"),
    ("adaptive: --test-freq 0", bench_adaptive, [*ADAPTIVE, "--test-freq", "0"],
     "--test-freq 0: the run would validate only before training, and the report would compare untrained models"),
    ("adaptive: --runs-dir a file", bench_adaptive, [*ADAPTIVE[:-6], "--runs-dir", "a_file", "--rollout", "hf"],
     "--runs-dir a_file is a file; give a directory"),
    ("adaptive: report, --runs-dir a file", bench_adaptive, ["--stage", "report", "--runs-dir", "a_file"],
     "--runs-dir a_file is a file"),
    ("adaptive: report, garbage run log", bench_adaptive, ["--stage", "report", "--runs-dir", "garbage_arm"],
     "garbage_arm/fixed-s0/isocompute.jsonl, line 1: not valid JSON"),
    ("adaptive: report, validated before training only", bench_adaptive, ["--stage", "report", "--runs-dir", "adaptive"],
     "adaptive/fixed-s0: no training step or no validation after training logged"),
    ("learning: --rollout sglang", bench_learning, [*LEARNING, "--stage", "train", "--rollout", "sglang"],
     "--rollout sglang: use one of hf, vllm"),
    ("adaptive: --rollout sglang", bench_adaptive, [*ADAPTIVE, "--rollout", "sglang"], "--rollout sglang: use one of hf, vllm"),
    ("learning: --k 0", bench_learning, [*LEARNING, "--stage", "curate", "--k", "0"], "--k 0: give a whole number >= 1"),
    ("learning: --n 1", bench_learning, [*LEARNING, "--stage", "train", "--n", "1"], "--n 1: GRPO's advantage"),
    ("learning: --test-freq 0", bench_learning, [*LEARNING, "--stage", "train", "--test-freq", "0"],
     "--test-freq 0: the run would validate only before training"),
    ("learning: --out a file", bench_learning, ["--out", "a_file", "--stage", "train"], "--out a_file is a file"),
    ("learning: report, missing run", bench_learning, [*LEARNING, "--stage", "report", "--run", "missing"],
     "learning/missing: no isocompute.jsonl there; train it first (--stage train)"),
    ("learning: report, empty run dir", bench_learning, [*LEARNING, "--stage", "report", "--run", "empty"],
     "learning/empty: no isocompute.jsonl there"),
    ("learning: report, garbage run log", bench_learning, [*LEARNING, "--stage", "report", "--run", "garbage"],
     "learning/garbage/isocompute.jsonl, line 1: not valid JSON"),
    ("learning: report, rows without the contract's keys", bench_learning,
     [*LEARNING, "--stage", "report", "--run", "no_keys"],
     "no_keys/isocompute.jsonl, line 2: b_problem, rollouts, tokens, epoch missing or not a number"),
    ("learning: report, garbage validation dump", bench_learning, [*LEARNING, "--stage", "report", "--run", "garbage_dump"],
     "garbage_dump/validation/1.jsonl: no validation sample in it"),
    ("learning: report, validated before training only", bench_learning,
     [*LEARNING, "--stage", "report", "--run", "before_training_only"], "before_training_only: no validation after training"),
    # issue 46: every report / go-no-go / verdict stage on unreadable input: one line naming the file, exit 2
    ("learning: report, a run-log header without n", bench_learning, [*LEARNING, "--stage", "report", "--run", "no_n"],
     "no_n/isocompute.jsonl: its header has no n (or not a number)"),
    ("learning: report, learning_run.json not JSON", bench_learning, [*LEARNING, "--stage", "report", "--run", "bad_info"],
     "bad_info/learning_run.json: not JSON"),
    ("adaptive: report, learning_run.json not JSON", bench_adaptive, ["--stage", "report", "--runs-dir", "adaptive_bad_info"],
     "adaptive_bad_info/fixed-s0/learning_run.json: not JSON"),
    ("adaptive: report, verl_metrics.jsonl with a line not JSON", bench_adaptive,
     ["--stage", "report", "--runs-dir", "adaptive_bad_metrics"],
     "adaptive_bad_metrics/fixed-s0/verl_metrics.jsonl, line 2: not valid JSON"),
    ("evidence: report, no sets.csv", bench_evidence, ["--stage", "report", "--from", "evidence_no_sets"],
     "evidence_no_sets/sets.csv: missing"),
    ("evidence: report, sets.csv without its columns", bench_evidence, ["--stage", "report", "--from", "evidence_bad_sets"],
     "evidence_bad_sets/sets.csv: no column set, fact_group"),
    ("evidence: report, learning_run.json not JSON", bench_evidence, ["--stage", "report", "--from", "evidence_bad_info"],
     "evidence_bad_info/runs/test-s0/learning_run.json: not JSON"),
    ("evidence: report, a run-log header without n", bench_evidence, ["--stage", "report", "--from", "evidence_no_n"],
     "evidence_no_n/runs/test-s0/isocompute.jsonl: its header has no n (or not a number)"),
    ("evidence: report, a folder that does not exist", bench_evidence, ["--stage", "report", "--from", "MISSING"],
     "MISSING: no such folder"),
    ("evidence: go-no-go on a folder with no runs", bench_evidence, ["--stage", "go-no-go", "--from", "empty_folder"],
     "empty_folder: no finished run under runs/"),
    ("evidence: verdict on a folder that does not exist", bench_evidence, ["--stage", "verdict", "--from", "MISSING"],
     "MISSING: no cells/ folder there"),
    ("evidence: verdict, a cell folder without its seed", bench_evidence, ["--stage", "verdict", "--from", "sweep_unnamed"],
     "sweep_unnamed/cells/b8_n2: a cell folder is named <cell>-s<seed>"),
    ("evidence: verdict, a run-log header without n", bench_evidence, ["--stage", "verdict", "--from", "sweep_no_n"],
     "sweep_no_n/cells/b8_n2-s0/isocompute.jsonl: its header has no n"),
    ("evidence: verdict, a cell log that is one line of text", bench_evidence, ["--stage", "verdict", "--from", "sweep_garbage"],
     "sweep_garbage/cells/b8_n2-s0/isocompute.jsonl, line 1: not valid JSON"),
    ("evidence: verdict, a log missing the first quarter", bench_evidence,
     ["--stage", "verdict", "--from", "sweep_first_quarter_missing"],
     "b8_n8-s1/isocompute.jsonl: no training step with C in (0, 256], quarter q1 of the budget 1024"),
    ("tis: report, verl_metrics.jsonl with a line not JSON", bench_tis, ["--from", "tis_bad_line"],
     "tis_bad_line/hf/verl_metrics.jsonl, line 2: not valid JSON"),
    ("tis: report, a step without a metric the report needs", bench_tis, ["--from", "tis_no_metric"],
     "tis_no_metric/hf/verl_metrics.jsonl, line 1 (step 1): actor/rollout_corr/rollout_is_ratio_fraction_high missing"),
    ("tis: report, tis_run.json not JSON", bench_tis, ["--from", "tis_bad_info"], "tis_bad_info/hf/tis_run.json: not JSON"),
]


@pytest.mark.parametrize(("script", "args", "message"), [pytest.param(*r[1:], id=r[0]) for r in ROWS])
def test_bad_bench_input_is_one_line_and_starts_nothing(tmp_path, monkeypatch, capsys, script, args, message):
    monkeypatch.chdir(tmp_path)
    _runs(tmp_path)
    before = sorted(str(p) for p in tmp_path.rglob("*"))
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: pytest.fail(f"started {a[0][:4]}"))
    rc = script.main(args)
    out, err = capsys.readouterr()
    prog = script.__name__
    _check(rc, out, err, 2, message, prog)
    assert sorted(str(p) for p in tmp_path.rglob("*")) == before  # nothing written


def test_the_rollout_flag_picks_verls_rollout_for_training():
    """--rollout goes to the training run as actor_rollout_ref.rollout.name; without it, the default named in
    bench_learning (the faster on this workload, README)."""
    import argparse

    def command(*args):
        parser = argparse.ArgumentParser()
        bench_learning.add_arguments(parser)
        return bench_learning.train_command(parser.parse_args(list(args)), Path("run"))

    assert "actor_rollout_ref.rollout.name=vllm" in command("--rollout", "vllm")
    assert f"actor_rollout_ref.rollout.name={bench_learning.DEFAULT_ROLLOUT}" in command()


def test_training_with_the_default_rollout_without_vllm_is_one_line(tmp_path, monkeypatch, capsys):
    """vLLM is the default rollout; where it is not installed, training is refused naming both fixes."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(bench_learning, "vllm_problem", lambda: "vLLM is not installed; install PyPI's CPU build")
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: pytest.fail(f"started {a[0][:4]}"))
    rc = bench_learning.main(["--out", "learning", "--stage", "train"])
    out, err = capsys.readouterr()
    _check(rc, out, err, 2, "--rollout vllm (the default): vLLM is not installed; install PyPI's CPU build; or train "
           "with --rollout hf", "bench_learning")
