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
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_learning  # noqa: E402  (the training run and its validation points)
from bench_learning import BenchError  # noqa: E402

ARMS = ("fixed", "schedule", "per_prompt")
PILOT_CURVE = Path("runs/pilot_cpu/fit/curve.json")
ZERO_VAR = "isocompute/zero_var_rollout_share"  # the trainer's metric (training/trainer.py)
EXPECTED_ZERO_VAR = ("isocompute/expected_zero_var_share", "isocompute/expected_zero_var_share_fixed_n")  # per-prompt n's


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


# --- the report ----------------------------------------------------------------------------------------


def _mean_se(values) -> tuple[float, float]:
    """Mean and its standard error (sample std / sqrt(count); NaN below 2 values)."""
    values = [float(v) for v in values if v is not None and not math.isnan(float(v))]
    if not values:
        return float("nan"), float("nan")
    mean = sum(values) / len(values)
    if len(values) < 2:
        return mean, float("nan")
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1) / len(values))


def train_seconds(run_dir: Path) -> float | None:
    """The run's time in training steps: verl's ``timing_s/step`` summed over steps (of a step a resume logged twice,
    the last record), so without start-up and validations, whose number differs between arms of different steps."""
    from verl_isocompute.jsonl import read_jsonl
    from verl_isocompute.runlog import STEP_TIMING, VERL_METRICS, is_training_step, verl_line

    if not (run_dir / VERL_METRICS).is_file():
        return None
    lines = [verl_line(obj) for _, obj in read_jsonl(run_dir / VERL_METRICS, report=False).objects]
    per_step = {step: float(data[STEP_TIMING]) for step, data in filter(None, lines) if is_training_step(data)}
    return sum(per_step.values()) if per_step else None


def run_figures(run_dir: Path) -> dict:
    """One run: its last validation (avg@k per problem), C, n per step, zero-variance shares per step, wall time."""
    log = bench_learning.read_log(run_dir)
    rows = [r for _, r in log.rows if r["step"] > 0]
    points = bench_learning.validation_points(run_dir)
    if not rows or not points or points[-1]["step"] == 0:
        raise BenchError(f"{run_dir}: no training step or no validation after training logged; run --stage train to "
                         "finish it")
    info = json.loads((run_dir / "learning_run.json").read_text()) if (run_dir / "learning_run.json").is_file() else {}
    last = points[-1]
    return {
        "run": run_dir.name, "finished": bool(info), "k": int(log.header.get("val_n") or 4),
        "steps": len(rows), "rollouts": rows[-1]["rollouts"], "n_per_step": [r["n"] for r in rows],
        "zero_var_share": [r.get(ZERO_VAR) for r in rows],
        **{key.split("/")[1]: [r.get(key) for r in rows] for key in EXPECTED_ZERO_VAR if any(key in r for r in rows)},
        "final": {k: last[k] for k in ("step", "rollouts", "avg", "se", "problems")},
        "per_problem": last["per_problem"], "per_problem_at_c": {p["rollouts"]: p["per_problem"] for p in points},
        "wall_s": info.get("wall_s"), "train_s": train_seconds(run_dir), "machine": info.get("machine"),
        "validation": [{k: v for k, v in p.items() if k != "per_problem"} for p in points],
    }


def arm_summary(runs: list[dict], fixed: list[dict] | None) -> dict:
    """Figures over one arm's seeds; with ``fixed`` (the fixed arm's runs), the paired difference from it."""
    from verl_isocompute.rules import metrics

    finals = [r["final"]["avg"] for r in runs]
    avg, se_seeds = _mean_se(finals)
    problems = sorted(set.intersection(*(set(r["per_problem"]) for r in runs)))
    per_problem = {p: sum(r["per_problem"][p] for r in runs) / len(runs) for p in problems}
    zero = [_mean_se(r["zero_var_share"])[0] for r in runs]
    steps = max(r["steps"] for r in runs)
    per_step = [_mean_se(r["zero_var_share"][i] for r in runs if i < r["steps"])[0] for i in range(steps)]
    out = {
        "seeds": [r["run"] for r in runs], "rollouts": [r["rollouts"] for r in runs], "steps": [r["steps"] for r in runs],
        "n_per_step": runs[0]["n_per_step"], "avg": avg, "se_seeds": se_seeds,
        "se_problems": metrics.stderr_over_problems(per_problem.values()), "problems": len(problems),
        "k": runs[0]["k"], "zero_var_share": _mean_se(zero), "zero_var_share_per_step": per_step,
        "wall_s": _mean_se(r["wall_s"] for r in runs), "train_s": _mean_se(r["train_s"] for r in runs),
    }
    for key in ("expected_zero_var_share", "expected_zero_var_share_fixed_n"):
        if all(key in r for r in runs):
            out[key] = _mean_se(_mean_se(r[key])[0] for r in runs)
    out["at_c"] = []
    for c in sorted(set.intersection(*(set(r["per_problem_at_c"]) for r in runs))):
        mean, se = _mean_se(sum(per.values()) / len(per) for per in (r["per_problem_at_c"][c] for r in runs))
        out["at_c"].append({"C": c, "avg": mean, "se_seeds": se})
    if fixed is not None:
        by_seed = {r["run"].rsplit("-", 1)[1]: r for r in fixed}
        paired = [(r, by_seed[r["run"].rsplit("-", 1)[1]]) for r in runs if r["run"].rsplit("-", 1)[1] in by_seed]
        if paired:
            out["vs_fixed"] = change_from_fixed([(a["per_problem"], f["per_problem"]) for a, f in paired])
            shared = set.intersection(*(set(a["per_problem_at_c"]) & set(f["per_problem_at_c"]) for a, f in paired))
            out["vs_fixed_at_c"] = [  # the anytime comparison: at every C both arms validated at
                {"C": c, **change_from_fixed([(a["per_problem_at_c"][c], f["per_problem_at_c"][c]) for a, f in paired])}
                for c in sorted(shared)]
    return out


def change_from_fixed(pairs: list[tuple[dict, dict]]) -> dict:
    """An arm against the fixed arm, from (the arm's per-problem avg@k, the fixed arm's) of each paired seed: the
    paired change over the problems both validated, of the per-problem means over seeds, and the SE of the
    per-seed changes."""
    from verl_isocompute.rules import metrics

    common = sorted(set.intersection(*(set(mine) & set(theirs) for mine, theirs in pairs)))
    mine, theirs = ({p: sum(per[p] for per in side) / len(pairs) for p in common} for side in zip(*pairs))
    change = metrics.paired_change(theirs, mine)
    per_seed = [sum(a[p] - f[p] for p in common) / len(common) for a, f in pairs]
    return {"fixed": change.before, "arm": change.after, "change": change.change, "se_problems": change.change_se,
            "z_problems": change.z, "se_seeds": _mean_se(per_seed)[1], "seeds": len(pairs), "problems": change.problems,
            "words": metrics.describe_change(change)}


def report(args) -> dict:
    from verl_isocompute import atomic

    runs_dir = args.runs_dir
    found = {arm: [run_figures(d) for d in sorted(runs_dir.glob(f"{arm}-s*")) if (d / "isocompute.jsonl").is_file()]
             for arm in ARMS}
    found = {arm: runs for arm, runs in found.items() if runs}
    if not found:
        raise BenchError(f"{runs_dir}: no runs of {', '.join(ARMS)}; run --stage train first")
    fixed = found.get("fixed")
    arms = {arm: arm_summary(runs, fixed if arm != "fixed" else None) for arm, runs in found.items()}
    unfinished = [r["run"] for runs in found.values() for r in runs if not r["finished"]]
    machine = next((r["machine"] for runs in found.values() for r in runs if r["machine"]), None)
    summary = {"runs_dir": str(runs_dir.absolute()), "machine": machine, "unfinished": unfinished, "arms": arms,
               "runs": {arm: [{k: v for k, v in r.items() if not k.startswith("per_problem")} for r in runs]
                        for arm, runs in found.items()}}
    atomic.write_json(runs_dir / "adaptive_summary.json", summary)
    print_report(summary)
    print(f"summary: {runs_dir / 'adaptive_summary.json'}")
    return summary


def _pm(pair: tuple[float, float], digits: int = 3, scale: float = 1.0) -> str:
    mean, se = pair
    return f"{mean * scale:.{digits}f}" + ("" if math.isnan(se) else f" ± {se * scale:.{digits}f}")


def print_report(summary: dict) -> None:
    arms = summary["arms"]
    if summary["machine"]:
        m = summary["machine"]
        print(f"CPU: {m['cpu_capability']}, native bf16: {', '.join(m['native_bf16']) or 'none'}, {m['cores']} cores")
    if summary["unfinished"]:
        print(f"unfinished runs (their last validation so far): {', '.join(summary['unfinished'])}")
    k = next(iter(arms.values()))["k"]
    print(f"\n{'arm':<11}{'seeds':>6}{'C (rollouts)':>14}{'steps':>7}  {'n per step':<18}{f'avg@{k}':>7}{'SE seeds':>10}"
          f"{'SE problems':>13}  {'vs fixed (SE problems; SE seeds)':<34}{'zero-var share':>16}{'wall (min)':>14}"
          f"{'in steps (min)':>16}")
    for arm, s in arms.items():
        c = f"{min(s['rollouts']):g}" + ("" if min(s["rollouts"]) == max(s["rollouts"]) else f"-{max(s['rollouts']):g}")
        ns = sorted({n for n in s["n_per_step"]})
        n_text = str(ns[0]) if len(ns) == 1 else "->".join(map(str, ns))
        vs = s.get("vs_fixed")
        vs_text = "" if vs is None else f"{vs['change']:+.3f} ({vs['se_problems']:.3f}; {vs['se_seeds']:.3f})"
        print(f"{arm:<11}{len(s['seeds']):>6}{c:>14}{max(s['steps']):>7}  {n_text:<18}{s['avg']:>7.3f}{s['se_seeds']:>10.3f}"
              f"{s['se_problems']:>13.3f}  {vs_text:<34}{_pm(s['zero_var_share']):>16}{_pm(s['wall_s'], 1, 1 / 60):>14}"
              f"{_pm(s['train_s'], 1, 1 / 60):>16}")
    print("\nzero-variance share of rollouts per step (mean over seeds):")
    for arm, s in arms.items():
        line = " ".join("  -  " if math.isnan(v) else f"{v:.2f}" for v in s["zero_var_share_per_step"])
        extra = ""
        if "expected_zero_var_share" in s:
            extra = (f"  (expected under the split {_pm(s['expected_zero_var_share'])}, under a fixed n "
                     f"{_pm(s['expected_zero_var_share_fixed_n'])})")
        print(f"  {arm:<11}{line}{extra}")
    for arm, s in arms.items():
        if "vs_fixed" in s:
            print(f"{arm} vs fixed n at equal C: {s['vs_fixed']['words']}")
    for arm, s in arms.items():
        if s.get("vs_fixed_at_c"):
            print(f"\n{arm} vs fixed n at every C both validated at (avg@{k}, mean over seeds; change with SE over "
                  "problems; SE over seeds):")
            for row in s["vs_fixed_at_c"]:
                seeds = "-" if math.isnan(row["se_seeds"]) else f"{row['se_seeds']:.3f}"
                noise = "  before training: the same model, so noise alone" if row["C"] == 0 else ""
                print(f"  C {row['C']:>6g}: fixed {row['fixed']:.3f}, {arm} {row['arm']:.3f}, {row['change']:+.3f} "
                      f"({row['se_problems']:.3f}; {seeds}){noise}")


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
