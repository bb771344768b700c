"""The report of ``bench_adaptive.py``: each arm's figures over its seeds, side by side, and each arm against fixed n.

Per arm: the last validation's avg@k at the C the run spent, with standard errors over seeds and over problems;
its paired difference from the fixed arm (same problems, same seeds); the share of rollouts in zero-variance groups
per step (the trainer's ``isocompute/zero_var_rollout_share``; per-prompt n also logs the share expected under
its split and under a fixed n); the wall time and the time in training steps (verl's ``timing_s/step`` summed);
then each arm against fixed n at every C both validated at. The runs' files are read through :mod:`run_files`:
one that cannot be read is one line naming it, exit status 2.
"""

from __future__ import annotations

import math
from pathlib import Path

from run_files import BenchError, read_json, read_log, validation_points, verl_metrics

ARMS = ("fixed", "schedule", "per_prompt")
ZERO_VAR = "isocompute/zero_var_rollout_share"  # the trainer's metric (training/trainer.py)
EXPECTED_ZERO_VAR = ("isocompute/expected_zero_var_share", "isocompute/expected_zero_var_share_fixed_n")  # per-prompt n's


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
    from verl_isocompute.runlog import STEP_TIMING, VERL_METRICS

    if not (run_dir / VERL_METRICS).is_file():
        return None
    per_step = {step: float(data[STEP_TIMING]) for step, data in verl_metrics(run_dir, (STEP_TIMING,), STEP_TIMING)}
    return sum(per_step.values()) if per_step else None


def run_figures(run_dir: Path) -> dict:
    """One run: its last validation (avg@k per problem), C, n per step, zero-variance shares per step, wall time."""
    log = read_log(run_dir)
    rows = [r for _, r in log.rows if r["step"] > 0]
    points = validation_points(run_dir)
    if not rows or not points or points[-1]["step"] == 0:
        raise BenchError(f"{run_dir}: no training step or no validation after training logged; run --stage train to "
                         "finish it")
    info = read_json(run_dir / "learning_run.json", ("wall_s", "machine")) if (run_dir / "learning_run.json").is_file() else {}
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


