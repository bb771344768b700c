"""The pre-registered n* sweep (docs/EVIDENCE.md section 4) as the second real fixture: its logs, the registered
rule's verdict on them, the fit's per-n curves and the comparison with intervals over seeds, recorded.

``tests/fixtures/nstar_cpu/cells/`` holds, for every run of ``isocompute sweep --plan run_examples/nstar_cpu.yaml``
(seeds 0-4) and of registration 6's ``run_examples/nstar_cpu_r6.yaml`` (seeds 5-10) that the rule read (those both
arms finished by the registered time), its run log (``isocompute.jsonl``), its per-problem test-set validations
(``validation_problems.jsonl``, before training and at the end) and, for registration 6's runs, the problems each
step trained on (``train_problems.jsonl``);
``expected.json`` the figures below as they were when the fixture was made. ``tests/test_nstar_sweep.py``
recomputes them from the logs. To publish a sweep's runs and record (after an intended change of the fit, record
only)::

    python tests/nstar_sweep.py --publish runs/nstar_cpu_r6   # add the runs the rule reads, then record
    python tests/nstar_sweep.py                            # re-record from the committed logs
    python tests/nstar_sweep.py --report                   # the figures EVIDENCE.md quotes
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = Path(__file__).parent / "fixtures" / "nstar_cpu"
EXPECTED = FIXTURE / "expected.json"
PLAN = ROOT / "run_examples" / "nstar_cpu.yaml"
BUDGET = 1024.0  # the registered rollouts per run
FILES = ("isocompute.jsonl", "validation_problems.jsonl", "train_problems.jsonl")
sys.path.insert(0, str(ROOT / "benchmarks"))


def options():
    """The fit options of the sweep's plan (its ``fit:`` block)."""
    from verl_isocompute.workflow.sweep.plan import fit_options

    return fit_options(yaml.safe_load(PLAN.read_text())["fit"])


def publish(sweep_dir: Path) -> list[str]:
    """Copy the runs the rule reads from a sweep directory into the fixture, beside the runs already there (each
    registration's sweep has its own directory; a run of the same name is replaced): every seed both arms have
    finished (run log up to the budget), with the files of :data:`FILES` it has (runs made before 0.2 have no
    ``train_problems.jsonl``)."""
    import run_files

    finished = {}
    for cell in sorted((sweep_dir / "cells").glob("*-s*")):
        if not (cell / "isocompute.jsonl").is_file():
            continue
        rows = [r for _, r in run_files.read_log(cell).rows if r["step"] > 0]
        if rows and rows[-1]["rollouts"] >= BUDGET:
            finished[cell.name] = cell
    seeds = {name.rsplit("-s", 1)[1] for name in finished}
    both = sorted(seeds & {s for s in seeds if all(f"b8_n{n}-s{s}" in finished for n in (2, 8))}, key=int)
    names = [f"b8_n{n}-s{s}" for s in both for n in (2, 8)]
    for name in names:
        target = FIXTURE / "cells" / name
        if target.exists():
            shutil.rmtree(target)
        target.mkdir(parents=True)
        for file in FILES:
            if (finished[name] / file).is_file():
                shutil.copy2(finished[name] / file, target / file)
    return names


def test_set() -> dict:
    """The registered secondary figures: each run's test-set strict and lenient accuracy before training and at
    the end (4 samples a problem), and per n the mean change over seeds and problems. Every seed validates the
    same 64 problems, so the interval counts both sources of noise (``seeds_by_problems_interval``: crossed random
    effects, Satterthwaite degrees of freedom); the t interval over seeds alone, which takes the problems as fixed,
    is kept beside it for comparison."""
    from evidence_rules import read_counts, seeds_by_problems_interval, t_interval

    runs, changes, tables = {}, {}, {}
    for cell in sorted((FIXTURE / "cells").iterdir()):
        counts = read_counts(cell)
        first, last = min(counts), max(counts)
        figures = {}
        for rate in ("correct", "lenient"):
            before, after = (float(np.mean(list(counts[s][rate].values()))) for s in (first, last))
            figures[rate] = {"before": before, "after": after, "change": after - before}
        runs[cell.name] = figures
        n = cell.name.split("_n", 1)[1].split("-s", 1)[0]
        changes.setdefault(n, []).append(figures["correct"]["change"])
        problems = sorted(counts[first]["correct"])
        tables.setdefault(n, []).append([counts[last]["correct"][q] - counts[first]["correct"][q] for q in problems])
    return {"runs": runs, "strict_change_over_seeds": {n: t_interval(v) for n, v in sorted(changes.items())},
            "strict_change_over_seeds_and_problems": {n: seeds_by_problems_interval(v) for n, v in sorted(tables.items())}}


def figures(out_dir: Path | None = None) -> dict:
    """Everything recorded: the rule's verdict, the fit (per-n curves, their flags, n*(C) or why there is none)
    and the comparison at the budget with intervals over seeds, and the test-set figures."""
    from evidence_rules import nstar_verdict

    from verl_isocompute.jsonl import plain
    from verl_isocompute.scaling.compare import compare_at
    from verl_isocompute.scaling.pipeline import run_fit
    from verl_isocompute.scaling.reward_curves import reward_curves

    outcome = run_fit([FIXTURE / "cells"], out_dir, options())
    result = outcome.result
    curves = reward_curves(result)
    # The comparison at the largest C every arm measures: a training reward sits at the compute before its step's
    # own rollouts (docs/SCALING.md), so n = 8's last point is at 1,024 - 64 = 960, n = 2's at 1,008; comparing at
    # the budget itself would read both curves past their data.
    at = min(rc.c_range[1] for rc in curves) if curves else BUDGET
    table = compare_at(curves, [at])
    keep = ("n", "reward", "reward_low", "reward_high", "multiplier", "multiplier_bound", "multiplier_low",
            "multiplier_high", "best_share", "resamples", "reach_status", "optimal")
    rows = [{k: _json_value(v) for k, v in plain(row).items() if k in keep} for row in table.to_dict("records")]
    fit = {
        "curves": {str(rc.n): {"R0": rc.curve.R0, "A": rc.curve.A, "C_mid": rc.curve.C_mid, "beta": rc.curve.beta,
                               "runs": rc.runs, "at_bounds": dict(rc.at_bounds), "not_identified": list(rc.not_identified)}
                   for rc in curves},
        "sigmoid": None if result.curve is None else {k: getattr(result.curve, k) for k in ("L", "k", "log10_C0", "b")},
        "no_curve_reason": result.no_curve_reason,
        "flat": result.flat,
        "summary": result.summary(),
        "compare_at": at,
        "compare": rows,
    }
    return {"budget": BUDGET, "verdict": nstar_verdict(FIXTURE, budget=BUDGET), "fit": fit, "test_set": test_set()}


def _json_value(value):
    """JSON has no inf or NaN: a multiplier past the fitted range is written as words, a missing figure as null."""
    if isinstance(value, float) and np.isinf(value):
        return "past fit"
    return None if isinstance(value, float) and np.isnan(value) else value


def record() -> dict:
    saved = figures()
    EXPECTED.write_text(json.dumps(saved, indent=1, allow_nan=False, default=float) + "\n")
    return saved


def _pm(x: dict) -> str:
    return f"{x['mean']:+.3f} (SE {x['se']:.3f}; 95% t [{x['low']:+.3f}, {x['high']:+.3f}], {x['df']} df)"


def _times(value) -> str:
    return value if isinstance(value, str) else f"{value:.2f}x"  # "past fit" is recorded as words


def report() -> str:
    """The figures docs/EVIDENCE.md quotes, from ``expected.json`` (the test checks it against the logs)."""
    saved = json.loads(EXPECTED.read_text())
    v = saved["verdict"]
    lines = [f"verdict: {v['verdict']} (seeds {v['seeds']}, budget {saved['budget']:.0f} rollouts)"]
    lines.append("R_q = mean first-visit training reward, q1: C in (0, 256], q4: C in (768, 1024]:")
    for run, r in v["runs"].items():
        lines.append(f"  {run}: R_q1 {r['q1']:.3f}, R_q4 {r['q4']:.3f}")
    lines.append(f"D_q1 = R_q1(n=2) - R_q1(n=8): {_pm(v['D_q1'])}")
    lines.append(f"D_q4 = R_q4(n=2) - R_q4(n=8): {_pm(v['D_q4'])}")
    lines.append(f"Delta = D_q4 - D_q1: {_pm(v['Delta'])}; width {v['Delta']['high'] - v['Delta']['low']:.3f}")
    fit = saved["fit"]
    for n, c in fit["curves"].items():
        flags = ", ".join(f"{k}={s}" for k, s in c["at_bounds"].items()) or "none"
        lines.append(f"fit n = {n}: R0 {c['R0']:.3f}, A {c['A']:.3f}, C_mid {c['C_mid']:.3g}, beta {c['beta']:.3g} "
                     f"({c['runs']} runs; at bounds: {flags}; not identified: {', '.join(c['not_identified']) or 'none'})")
    lines.append(fit["summary"])
    for row in fit["compare"]:
        interval = "" if row["reward_low"] is None else f" [{row['reward_low']:.3f}, {row['reward_high']:.3f}]"
        low, high = (row[f"multiplier_{end}"] for end in ("low", "high"))
        multiplier = "-" if low is None else f"[{_times(low)}, {_times(high)}]"
        reward = "-" if row["reward"] is None else f"{row['reward']:.3f}"
        lines.append(f"compare at C = {fit.get('compare_at', saved['budget']):.0f}, n = {row['n']}: reward {reward}{interval}, "
                     f"{row['reach_status']}, multiplier 95% {multiplier}, n* in {row['best_share']:.0%} of "
                     f"{row['resamples']} resamples")
    ts = saved["test_set"]
    for n, x in ts["strict_change_over_seeds_and_problems"].items():
        seeds_only = ts["strict_change_over_seeds"][n]
        lines.append(f"test set, n = {n}: strict accuracy change C = 0 -> {saved['budget']:.0f}: {x['mean']:+.3f} "
                     f"(SE {x['se']:.3f} over {x['seeds']} seeds x {x['problems']} problems; 95% t [{x['low']:+.3f}, "
                     f"{x['high']:+.3f}], {x['df']:.1f} df; over seeds alone SE {seeds_only['se']:.3f})")
    return "\n".join(lines)


if __name__ == "__main__":
    if sys.argv[1:] == ["--report"]:
        print(report())
        sys.exit(0)
    if sys.argv[1:2] == ["--publish"]:
        print("published:", ", ".join(publish(Path(sys.argv[2]))))
    elif sys.argv[1:]:
        sys.exit("usage: python tests/nstar_sweep.py [--publish SWEEP_DIR | --report]")
    record()
    print(report())
