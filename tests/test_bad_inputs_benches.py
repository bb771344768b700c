"""Bad input to the bench scripts (benchmarks/bench_adaptive.py, bench_learning.py; issue 35, item 2): one line on
stderr, exit status 2, no traceback, nothing started or written, as the ``isocompute`` commands refuse theirs (both
scripts run through :func:`verl_isocompute.commands.cli.run_command`).

Each row is (script, arguments, a piece of the one error line). The settings rows run a stage that would start a
run or a curation: any subprocess started fails the test. The report rows read run directories written by hand:
missing, empty, garbage, or holding no validation after training.
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
import bench_learning  # noqa: E402

# tests/test_bench_adaptive.py's curve: n 2 -> 4 -> 8 below the budget 512, the allocation's n 8
CURVE = {"L": 2.0, "k": 3.5, "log10_C0": 1.63, "b": 1.0, "compute_unit": "rollouts", "metric": "val/avg@4",
         "c_range": [10, 1000], "n_grid": [2, 4, 8]}
HEADER = json.dumps({"header": {"val_n": 4}})
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
