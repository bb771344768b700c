"""Fixed n, the anytime n schedule and per-prompt n at one rollout budget: does either beat the allocation's n?

The comparison of docs/SCALING.md, "Beyond one n", on a CPU. Three arms, each a training run of
``bench_learning.py`` (SmolLM2-135M-Instruct, the ``isocompute_hard`` recipe on its curated Easy set, validated
on the held-out split; every training flag of that benchmark is a flag here too) with the same budget C rollouts
and the same B_problem:

- ``fixed``: one n for the whole run, the allocation's (``isocompute allocate``: n*(C) of the curve at the
  budget, on the curve's grid), steps = C // (B_problem x n);
- ``schedule``: ``isocompute.schedule.enable=true`` with the same curve and budget: n follows n*(c) of the
  rollouts c spent so far, lr by the LR rule at each step's batch; the run ends when no step fits the budget;
- ``per_prompt``: the fixed arm's n and steps with ``isocompute.per_prompt_n.enable=true``: each step's
  B_problem x n rollouts split across its prompts by pass rate (Knapsack RL, arXiv 2509.25849).

Each arm runs ``--seeds`` times (seed s sets ``data.seed``, the data order, and ``actor_rollout_ref.rollout.seed``,
the sampling; seed s of every arm sees the same data order), seed by seed, so that a stop leaves whole seeds.

1. ``train``: the runs one after the other under ``--runs-dir``/<arm>-s<seed>; a finished run (its
   ``learning_run.json``) is skipped, a stopped one resumes from its last checkpoint. ``--dry-run`` prints the
   plan and the command lines and runs nothing.
2. ``report``: per arm, the last validation's avg@k (at the C the run spent: the budget, less what no step of
   the run's n fitted) with standard errors over seeds and over problems, its paired difference from the fixed
   arm (same problems, same seeds), the share of rollouts in zero-variance groups per step (the trainer's
   ``isocompute/zero_var_rollout_share``; per-prompt n also logs the share expected under its split and under a
   fixed n), the wall time and the time in training steps (verl's ``timing_s/step`` summed: no start-up and no
   validations, which differ in number when the arms run different numbers of steps), side by side; then each
   arm against fixed n at every C both validated at (the anytime comparison the schedule is for: with
   ``--test-freq`` dividing each n's steps, the schedule and fixed n validate at some of the same C; the row
   before training compares the same model, so it measures noise alone); writes ``adaptive_summary.json``.

The curve (``--curve``, a curve.json or ``paper:<preset>``): by default the CPU pilot sweep's fit
(``isocompute sweep --plan run_examples/pilot_cpu.yaml`` writes runs/pilot_cpu/fit/curve.json), else a preset
whose fitted compute range covers the budget (the Qwen2.5-7B presets start at 1e5 rollouts: none covers a CPU
budget of hundreds).

An arm that cannot differ from the fixed arm is refused before anything runs, since it would measure only
run-to-run noise: per-prompt n at n <= n_min (every prompt already at its floor) and a schedule whose n never
changes over the budget. The pilot's fit is flat (n* = 2 at every C): there, pass ``--n 4`` or more for
``per_prompt`` and a ``--curve`` whose n*(c) changes below the budget for ``schedule``, such as
``run_examples/schedule_cpu_curve.json``: a stated curve, not a fit, on which the schedule runs 8 steps at n 2,
4 at n 4 and 4 at n 8 and the allocation's fixed n at 512 rollouts is 8.

Settings a run would fail on or that would measure nothing (``--seeds 0``, ``--n 1``, ``--test-freq 0``, an
``isocompute.per_prompt_n`` override the trainer refuses, checked by its own rules: :func:`per_prompt_settings`) and
run directories that cannot be read are refused before anything runs, in one line with exit status 2, as the
``isocompute`` commands refuse theirs.

    python benchmarks/bench_learning.py --stage curate     # the learning set, once
    python benchmarks/bench_adaptive.py --dry-run          # the plan and the 9 command lines
    python benchmarks/bench_adaptive.py                    # train (resumable), then report
    python benchmarks/bench_adaptive.py --arms fixed,schedule --curve run_examples/schedule_cpu_curve.json --test-freq 4
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_learning  # noqa: E402  (the training run)
from adaptive_report import ARMS, report  # noqa: E402  (the report stage)
from run_files import BenchError  # noqa: E402

PILOT_CURVE = Path("runs/pilot_cpu/fit/curve.json")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    bench_learning.add_arguments(parser)  # the learning set (--out), the recipe and every training setting
    parser.set_defaults(n=None, steps=None)
    parser.add_argument("--runs-dir", type=Path, default=Path("runs/adaptive"), help="where the runs go (default %(default)s)")
    parser.add_argument("--arms", default=",".join(ARMS), help="comma-separated, of " + ", ".join(ARMS) + " (default all)")
    parser.add_argument("--seeds", type=int, default=3, help="seeds per arm (default %(default)s)")
    parser.add_argument("--budget", type=int, default=512,
                        help="rollouts per run, every arm (default %(default)s, the pilot sweep's budget per cell)")
    parser.add_argument("--curve", default=None,
                        help=f"the n*(C) curve of the fixed arm's n and of the schedule (default {PILOT_CURVE}, else a "
                             "preset whose fitted range covers the budget)")
    parser.add_argument("--dry-run", action="store_true", help="print the plan and the command lines, run nothing")


# --- the plan ------------------------------------------------------------------------------------------


def choose_curve(spec: str | None, budget: int):
    """(curve, spec) from ``--curve``, else the pilot sweep's fit, else a preset covering ``budget``."""
    from verl_isocompute.scaling.curve import CurveError, load_curve, preset_names

    if spec is None and PILOT_CURVE.is_file():
        spec = str(PILOT_CURVE)
    if spec is None:
        covering = [f"paper:{name}" for name in preset_names()
                    if (c := load_curve(f"paper:{name}")).compute_unit == "rollouts" and c.c_range[0] <= budget <= c.c_range[1]]
        if not covering:
            raise BenchError(f"no curve: {PILOT_CURVE} does not exist and no preset's fitted range covers a budget of "
                             f"{budget:,} rollouts; run the pilot sweep (isocompute sweep --plan run_examples/pilot_cpu.yaml) "
                             "or pass --curve")
        spec = covering[0]
    try:
        return load_curve(spec), spec if spec.startswith("paper:") else str(Path(spec).absolute())
    except (CurveError, OSError) as exc:
        raise BenchError(f"--curve {spec}: {exc}") from None


def plan_arms(args) -> list[dict]:
    """Each arm's n, steps, the rollouts it will spend and its overrides (the same budget and B_problem for all)."""
    from verl_isocompute.scaling.allocation import AllocationError, allocate
    from verl_isocompute.scaling.schedule import NSchedule, ScheduleError

    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    unknown = sorted(set(arms) - set(ARMS))
    if unknown or not arms:
        raise BenchError(f"--arms {args.arms}: use some of {', '.join(ARMS)}")
    curve, spec = choose_curve(args.curve, args.budget)
    b, budget, why = args.b_problem, args.budget, "--n"
    n = args.n
    try:
        if n is None:
            found = allocate(curve, budget, b_problem=b, b_problem_floor=None, b_max=None, min_steps=1,
                             n_grid=curve.n_grid, base_lr=args.base_lr, warmup_steps=args.warmup_steps)
            if found.b_problem != b:
                raise BenchError(f"the allocation lowers B_problem to {found.b_problem} at a budget of {budget:,}: raise "
                                 "--budget or lower --b-problem")
            n, why = found.n, f"the allocation's: n*({budget:,}) = {found.n_star:.2f}"
        schedule = NSchedule(curve, b, budget, base_lr=args.base_lr, warmup_steps=args.warmup_steps)
    except (AllocationError, ScheduleError) as exc:
        raise BenchError(f"{spec} at a budget of {budget:,}: {exc}") from None
    if budget < b * n:
        raise BenchError(f"--budget {budget:,} does not pay for one step of B_problem {b} x n {n}; raise it")
    steps = budget // (b * n)
    # An arm that cannot differ from the fixed arm measures only run-to-run noise: refuse it and say what would
    # let it differ (a CPU pilot's flat curve gives n = 2 for the whole budget, which leaves both with no room).
    n_min = per_prompt_settings(args.overrides, b, n).n_min if "per_prompt" in arms else None
    if n_min is not None and n <= n_min:
        raise BenchError(f"per_prompt at n {n}: every prompt already gets n_min {n_min}, so the split has no room and the "
                         "arm would repeat the fixed arm; pass --n 4 or more (both arms use it) or drop per_prompt "
                         "from --arms")
    if "schedule" in arms and schedule_ns(copy.deepcopy(schedule)) == {n}:
        raise BenchError(f"schedule on {spec}: n*(c) stays at n {n} over the whole budget of {budget:,}, so the arm "
                         "would repeat the fixed arm; pass a --curve whose n*(c) changes below the budget or drop "
                         "schedule from --arms")
    fixed = {"n": n, "steps": steps, "rollouts": steps * b * n, "why_n": why, "overrides": []}
    planned = {
        "fixed": fixed,
        "per_prompt": {**fixed, "overrides": ["isocompute.per_prompt_n.enable=true"]},
        # rollout.n: the first step's; steps: the most the budget pays for (all at the grid's smallest n), the
        # schedule ends the run sooner when n grows (verl needs a number before the run starts)
        "schedule": {"n": schedule.next_n(0), "steps": schedule.steps_left(0, min(schedule.grid)), "rollouts": None,
                     "why_n": f"n*(c) on the grid {list(schedule.grid)}", "overrides": [
                         "isocompute.schedule.enable=true", f"isocompute.schedule.curve={spec}",
                         f"isocompute.schedule.budget_rollouts={budget}"]},
    }
    return [{"arm": arm, "curve": spec, **planned[arm]} for arm in arms]


def per_prompt_settings(overrides: list[str], b_problem: int, n: int):
    """The per_prompt arm's :class:`~verl_isocompute.scaling.adaptive.PerPromptSettings`: the
    ``isocompute.per_prompt_n.*`` overrides given, read as hydra reads them and checked in one call by the trainer's
    own rules (:func:`~verl_isocompute.training.adaptive_config.build_adaptive`: known keys, their types, n_min >= 2),
    so a setting the run would refuse at start is refused here, before any run."""
    from omegaconf import OmegaConf

    from verl_isocompute import verl_keys
    from verl_isocompute.training.adaptive_config import PER_PROMPT, build_adaptive

    given = [o.lstrip("+") for o in overrides if o.lstrip("+").startswith(f"{PER_PROMPT}.")]
    block = OmegaConf.from_dotlist([*given, f"{PER_PROMPT}.enable=true", f"{verl_keys.B_PROBLEM}={b_problem}",
                                    f"{verl_keys.N}={n}"])
    return build_adaptive(block).per_prompt


def schedule_ns(schedule) -> set[int]:
    """Every n ``schedule`` (a fresh NSchedule, which this advances) runs at over its budget, planned step by step
    as the trainer plans them."""
    ns, c, step = set(), 0, 0
    while schedule.steps_left(c) > 0:
        step += 1
        plan = schedule.plan(step, c)
        ns.add(plan.n)
        c += plan.batch_rollouts
    return ns


def run_args(args, arm: dict, seed: int) -> argparse.Namespace:
    """bench_learning's settings for one run: the arm's n and steps, its overrides, the seed, one mini-batch."""
    run = copy.copy(args)
    run.n, run.steps = arm["n"], arm["steps"]
    run.overrides = [*arm["overrides"], f"data.seed={seed}", f"actor_rollout_ref.rollout.seed={seed}",
                     # one mini-batch per step, which per-step n needs (verl sizes it ppo_mini_batch_size x rollout.n);
                     # the fixed arm alike, so that the arms differ only in n
                     f"actor_rollout_ref.actor.ppo_mini_batch_size={args.b_problem}", *args.overrides]
    return run


def train(args) -> None:
    arms = plan_arms(args)
    for arm in arms:
        spend = f"{arm['rollouts']:,} rollouts" if arm["rollouts"] else f"<= {args.budget:,} rollouts"
        print(f"{arm['arm']}: n {arm['n']} ({arm['why_n']}), B_problem {args.b_problem}, up to {arm['steps']} steps, "
              f"{spend}")
    for arm in arms:  # each arm's settings as its runs will check them, before the first run starts
        bench_learning.check_command(bench_learning.train_command(run_args(args, arm, 0), args.runs_dir / arm["arm"]))
    for seed in range(args.seeds):
        for arm in arms:
            run_dir = (args.runs_dir / f"{arm['arm']}-s{seed}").absolute()
            run = run_args(args, arm, seed)
            if args.dry_run:
                done = " (done: skipped)" if (run_dir / "learning_run.json").is_file() else ""
                print(f"$ {' '.join(bench_learning.train_command(run, run_dir))}{done}")
                continue
            bench_learning.train(run, run_dir)


def run(args) -> int:
    if args.stage == "curate":
        raise BenchError("the learning set is bench_learning.py's: python benchmarks/bench_learning.py --stage curate")
    if args.steps is not None or args.run is not None:
        raise BenchError("--steps / --run: the budget decides each arm's steps and the arms name the runs; drop them")
    bench_learning.check_settings(args)
    if args.seeds < 1:
        raise BenchError(f"--seeds {args.seeds}: each arm runs once per seed; give 1 or more")
    if args.runs_dir.exists() and not args.runs_dir.is_dir():
        raise BenchError(f"--runs-dir {args.runs_dir} is a file; give a directory (it is created if needed)")
    if args.stage in ("all", "train"):
        train(args)
    if args.stage in ("all", "report") and not args.dry_run:
        report(args)
    return 0


def main(argv: list[str] | None = None) -> int:
    return bench_learning.script_main("bench_adaptive", __doc__, add_arguments, run, argv)


if __name__ == "__main__":
    sys.exit(main())
