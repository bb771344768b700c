"""The figures of docs/EVIDENCE.md section 1, from the files ``bench_evidence.py --stage publish`` commits: the
``report`` stage of that script, apart from the pipeline that produces the files.

Every figure is recomputed from a directory (``--from``): per seed, strict and lenient accuracy, answer and echo
rates before and after training with paired SEs over problems; over seeds, t intervals with their degrees of
freedom (:mod:`evidence_rules`); the first-visit training reward per step; the base model on each tune set. The
files are read through :mod:`run_files`, so a missing or unreadable one (``sets.csv``, a run's
``learning_run.json``, its run log or validation counts) is one line naming it, exit status 2.
"""

from __future__ import annotations

import json
from pathlib import Path

from evidence_rules import RATES, go_no_go, read_counts, t_interval
from run_files import BenchError, read_csv, read_json, read_log

SETS = ("tune", "dev", "test", "train")
EASY = (0.3, 0.6)  # the playbook's Easy band of avg@k (arXiv 2603.12151, section 3)
# What each file must hold for the report (learning_run.json: bench_learning.train writes it).
RUN_INFO = ("wall_s", "machine", "command")
TUNE_SAMPLE = ("correct", "k", "answers")
REWARD = "train/reward"  # the first-visit training reward of each step (every training problem is new)


def run_report(run: Path) -> dict:
    """One run: each rate before (first validation) and after (last), with the paired change over problems; the
    training reward per step."""
    from verl_isocompute.rules import metrics

    counts = read_counts(run)
    first, last = min(counts), max(counts)
    if first == last:
        raise BenchError(f"{run}: one validation only; the report compares before and after training")
    rates = {}
    for rate in RATES:
        change = metrics.paired_change(counts[first][rate], counts[last][rate])
        rates[rate] = {"before": change.before, "before_se": change.before_se, "after": change.after,
                       "after_se": change.after_se, "change": change.change, "change_se": change.change_se,
                       "problems": change.problems}
    log = read_log(run, header=("n", "b_problem", "lr"))
    rows = [r for _, r in log.rows if r["step"] > 0]
    for line, row in log.rows:
        if row["step"] > 0 and not isinstance(row.get(REWARD), (int, float)):
            raise BenchError(f"{log.path}, line {line}: step {row['step']} has no {REWARD}; a run log of our trainer logs "
                             "it at every training step: train the run again")
    info = read_json(run / "learning_run.json", RUN_INFO)
    return {"run": run.name, "steps": [first, last], "rollouts": rows[-1]["rollouts"] if rows else 0,
            "epochs": rows[-1].get("epoch") if rows else 0,
            "lr": log.header.get("lr"), "n": log.header.get("n"), "b_problem": log.header.get("b_problem"),
            "train_reward": [r[REWARD] for r in rows], "wall_s": info.get("wall_s"),
            "machine": info.get("machine"), "command": info.get("command"), "rates": rates}


def tune_report(samples: Path) -> dict:
    """The base model on a tune set (curation's samples.jsonl): accuracy, answer rate, the share of problems in
    each band."""
    from verl_isocompute.jsonl import read_jsonl

    rows = read_jsonl(samples, report=False).dicts()
    for no, row in enumerate(rows, 1):
        if any(key not in row for key in TUNE_SAMPLE) or not isinstance(row["k"], int) or row["k"] < 1:
            raise BenchError(f"{samples}: record {no} is not one of curation's samples (it needs {', '.join(TUNE_SAMPLE)}, "
                             "k >= 1); publish the tune samples again")
    if not rows:
        raise BenchError(f"{samples}: no samples in it; publish the tune samples again (--stage publish)")
    acc = [r["correct"] / r["k"] for r in rows]
    return {"problems": len(rows), "k": rows[0]["k"], "accuracy": sum(acc) / len(acc),
            "answer_rate": sum(sum(a not in (None, "") for a in r["answers"]) for r in rows) / sum(r["k"] for r in rows),
            "easy_share": sum(EASY[0] <= a <= EASY[1] for a in acc) / len(acc),
            "never_share": sum(a == 0 for a in acc) / len(acc), "always_share": sum(a == 1 for a in acc) / len(acc),
            "some_share": sum(0 < a < 1 for a in acc) / len(acc)}


def report(source: Path) -> dict:
    """Every figure of EVIDENCE.md section 1 from the files in ``source``; writes report.json and report.md there."""
    from verl_isocompute import atomic

    if not source.is_dir():
        raise BenchError(f"{source}: no such folder; name the evidence files (--from docs/evidence/learning)")
    runs = sorted(p for p in (source / "runs").glob("*-s*") if (p / "learning_run.json").is_file())
    if not runs:
        raise BenchError(f"{source}: no finished run under runs/; train (--stage train) or name the published files "
                         "(--from docs/evidence/learning)")
    per_run = [run_report(r) for r in runs]
    sets = read_csv(source / "sets.csv", ("set", "fact_group"))
    train_facts = set(sets.loc[sets["set"] == "train", "fact_group"])
    split = runs[0].name.rsplit("-", 1)[0]
    shared = int(sets.loc[sets["set"] == split, "fact_group"].isin(train_facts).sum())
    over_seeds = {rate: {key: t_interval([r["rates"][rate][key] for r in per_run]) for key in ("before", "after", "change")}
                  for rate in RATES}
    steps = max(len(r["train_reward"]) for r in per_run)
    reward = [t_interval([r["train_reward"][i] for r in per_run if i < len(r["train_reward"])]) for i in range(steps)]
    summary = {"split": split, "set_sizes": sets["set"].value_counts().reindex(list(SETS)).fillna(0).astype(int).to_dict(),
               "validated_facts_in_train": shared, "runs": per_run,
               "over_seeds": over_seeds, "train_reward": reward,
               "tune": {p.stem.split("-", 1)[1]: tune_report(p) for p in sorted(source.glob("tune_samples-*.jsonl"))}}
    atomic.write_text(source / "report.json", json.dumps(summary, indent=1, sort_keys=True, default=float) + "\n")
    text = render(summary) + "\n" + pilot_report()
    gates = source.parent / "go_no_go"
    if (gates / "runs").is_dir():  # section 4's go / no-go runs, published beside section 1's files
        text += "\n# Evidence, section 4: the go / no-go (b)\n\n```text\n" + "\n".join(
            line for row in go_no_go(gates, quiet=True) for line in [row["line"]]) + "\n```\n"
    atomic.write_text(source / "report.md", text)
    print(text)
    return summary


def pilot_report() -> str:
    """Section 2's figures, from the pilot sweep's committed logs (tests/fixtures/real_pilot; tests/real_pilot.py)."""
    import importlib.util

    path = Path(__file__).resolve().parent.parent / "tests" / "real_pilot.py"
    spec = importlib.util.spec_from_file_location("real_pilot", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return "# Evidence, section 2: the pilot sweep's figures\n\n```text\n" + module.report() + "\n```\n"


def pm(x: dict) -> str:
    """A mean over seeds with its SE and t interval, in one phrase."""
    return f"{x['mean']:+.3f} (SE {x['se']:.3f}; 95% t interval [{x['low']:+.3f}, {x['high']:+.3f}], {x['df']} df)"


def _verdict(x: dict) -> str:
    """A paired change in words: up / down by z SE when beyond two SEs, else what the set could have seen."""
    if not x["change_se"] > 0:
        return "no change in any problem" if x["change"] == 0 else "no spread to measure"
    z = x["change"] / x["change_se"]
    if abs(z) >= 2:
        return f"{'up' if z > 0 else 'down'} by {abs(z):.1f} SE"
    return f"within noise: this set sees changes beyond ±{2 * x['change_se']:.2f}"


def render(s: dict) -> str:
    """The report as markdown (the tables EVIDENCE.md quotes)."""
    first = s["runs"][0]
    lines = ["# Evidence, section 1: the figures", "",
             f"Sets: {', '.join(f'{k} {v}' for k, v in s['set_sizes'].items())} problems; validated on `{s['split']}`; "
             f"{s['validated_facts_in_train']} of its problems share a fact with the train set.", ""]
    if s["tune"]:
        lines += ["The base model on each candidate task's tune set (share of problems solved never / sometimes / "
                  "always, and in the Easy band [0.3, 0.6] of avg@k):", "",
                  "| task | problems x k | accuracy | answer rate | never | sometimes | always | Easy |",
                  "|---|---|---|---|---|---|---|---|"]
        for task, t in s["tune"].items():
            lines.append(f"| {task} | {t['problems']} x {t['k']} | {t['accuracy']:.3f} | {t['answer_rate']:.3f} | "
                         f"{t['never_share']:.2f} | {t['some_share']:.2f} | {t['always_share']:.2f} | {t['easy_share']:.2f} |")
        lines.append("")
    seeds = len(s["runs"])
    lines += [f"Runs: {seeds} seed{'s' if seeds > 1 else ''}, n {first['n']}, B_problem {first['b_problem']}, lr {first['lr']:.3g}, "
              f"{first['rollouts']} rollouts, validation at steps {first['steps'][0]} and {first['steps'][1]}; the "
              f"training set read {max(r['epochs'] for r in s['runs']):.3f} times over at most (below 1: no training "
              "problem seen twice).", "",
              "Per seed (mean over problems ± SE over problems; change paired over problems):", "",
              "| seed | rate | before | after | change | reading |", "|---|---|---|---|---|---|"]
    for r in s["runs"]:
        for rate, name in RATES.items():
            x = r["rates"][rate]
            lines.append(f"| {r['run']} | {name} | {x['before']:.3f} ± {x['before_se']:.3f} | {x['after']:.3f} ± "
                         f"{x['after_se']:.3f} | {x['change']:+.3f} ± {x['change_se']:.3f} | {_verdict(x)} |")
    if seeds > 1:
        lines += ["", "Over seeds (mean of the seeds' values, SE over seeds, t interval):", "",
                  "| rate | before | after | change |", "|---|---|---|---|"]
        for rate, name in RATES.items():
            o = s["over_seeds"][rate]
            lines.append(f"| {name} | {o['before']['mean']:.3f} | {o['after']['mean']:.3f} | {pm(o['change'])} |")
    else:
        lines += ["", "One seed: no interval over seeds (the SEs above are over problems; run-to-run variation is not "
                      "measured)."]
    lines += ["", "Training reward per step (each step's problems seen for the first time)"
              + (", mean over seeds (SE):" if seeds > 1 else ":"), "", "| step | reward |", "|---|---|"]
    for i, x in enumerate(s["train_reward"], 1):
        lines.append(f"| {i} | {x['mean']:.3f}" + (f" ({x['se']:.3f}) |" if seeds > 1 else " |"))
    machine = first.get("machine") or {}
    walls = [r["wall_s"] for r in s["runs"] if r["wall_s"]]
    span = f"{min(walls) / 60:.1f}" + (f"-{max(walls) / 60:.1f}" if len(walls) > 1 else "") if walls else "?"
    lines += ["", f"CPU capability `{machine.get('cpu_capability')}`, {machine.get('cores')} cores; wall time per run "
              f"{span} min (load average at the end {', '.join(f'{x:.1f}' for x in machine.get('loadavg', []))})."]
    return "\n".join(lines) + "\n"


