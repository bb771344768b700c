"""The statistics of docs/EVIDENCE.md and its section 4's registered rules, apart from the pipeline that
produces the files (benchmarks/bench_evidence.py): t intervals over seeds, per-problem validation counts, the
go / no-go check (b) and the n* decision rule, each exactly as section 4 registered it."""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path

import numpy as np
from run_files import BenchError, cell_seed, read_json, read_log

# The per-problem counts of validation_problems.jsonl and the rate each becomes (rules/format_metrics.py).
RATES = {"correct": "strict accuracy", "lenient": "lenient accuracy", "answered": "answer rate", "echo": "echo rate"}


def t_interval(values: list[float], level: float = 0.95) -> dict:
    """Mean over seeds, its SE, and the t interval with its degrees of freedom (NaN below 2 seeds)."""
    from scipy import stats

    count = len(values)
    mean = sum(values) / count
    if count < 2:
        return {"mean": mean, "se": math.nan, "df": 0, "low": math.nan, "high": math.nan}
    se = math.sqrt(sum((v - mean) ** 2 for v in values) / (count - 1) / count)
    half = float(stats.t.ppf(0.5 + level / 2, count - 1)) * se
    return {"mean": mean, "se": se, "df": count - 1, "low": mean - half, "high": mean + half}


def seeds_by_problems_interval(table, level: float = 0.95) -> dict:
    """The mean of a seeds x problems table and its t interval counting both sources of noise.

    A figure averaged over the runs of several seeds that all validate the same problems (a test-set change per
    seed and problem, say) varies with the seeds and with the problems drawn: an SE over seeds alone treats the
    problems as fixed and is too narrow for a claim about the task. This is the crossed random-effects model
    y[s, p] = mu + a_s + b_p + e_sp (seeds and problems each a random sample), estimated by the ANOVA method of
    moments for a balanced table: Var(mean) = s2_a / S + s2_b / P + s2_e / (S P) with s2_a = (MS_seeds - MS_resid) / P,
    s2_b = (MS_problems - MS_resid) / S, s2_e = MS_resid (a negative component is set to 0), and the interval's
    degrees of freedom by Satterthwaite's approximation. ``tests/test_evidence_intervals.py`` checks on tables of
    known mean that the 95 % interval covers it 95 % of the time. One seed: the problems' spread alone (a t
    interval over problems), as the per-seed paired SE."""
    from scipy import stats

    y = np.asarray(table, dtype=float)
    seeds, problems = y.shape
    mean = float(y.mean())
    if seeds < 2:
        single = t_interval(list(y.mean(axis=0)), level)
        return {**single, "seeds": seeds, "problems": problems}
    seed_means, problem_means = y.mean(axis=1), y.mean(axis=0)
    ms = {  # mean square, degrees of freedom
        "seeds": (problems * float(np.sum((seed_means - mean) ** 2)) / (seeds - 1), seeds - 1),
        "problems": (seeds * float(np.sum((problem_means - mean) ** 2)) / (problems - 1), problems - 1),
        "resid": (float(np.sum((y - seed_means[:, None] - problem_means[None, :] + mean) ** 2))
                  / ((seeds - 1) * (problems - 1)), (seeds - 1) * (problems - 1)),
    }
    # Var(mean) as a combination of the mean squares: each kept component adds its MS and takes one MS_resid off
    weights = {"seeds": 0.0, "problems": 0.0, "resid": 1.0}
    for effect in ("seeds", "problems"):
        if ms[effect][0] > ms["resid"][0]:
            weights[effect], weights["resid"] = 1.0, weights["resid"] - 1.0
    variance = sum(w * ms[k][0] for k, w in weights.items()) / (seeds * problems)
    terms = sum((w * ms[k][0]) ** 2 / ms[k][1] for k, w in weights.items() if w)
    df = (variance * seeds * problems) ** 2 / terms if terms > 0 else math.inf
    se = math.sqrt(max(variance, 0.0))
    half = float(stats.t.ppf(0.5 + level / 2, df)) * se
    return {"mean": mean, "se": se, "df": df, "low": mean - half, "high": mean + half, "seeds": seeds, "problems": problems}


def read_counts(run: Path) -> dict[int, dict[str, dict[str, float]]]:
    """step -> rate -> problem -> share of its k samples (validation_problems.jsonl; the last record of a step wins)."""
    from verl_isocompute.jsonl import read_jsonl
    from verl_isocompute.runlog import VAL_PROBLEMS

    path = run / VAL_PROBLEMS
    if not path.is_file():
        raise BenchError(f"{run}: no {VAL_PROBLEMS}; train the run (--stage train) or publish it again")
    by_step: dict[int, dict[str, dict[str, float]]] = {}
    for no, record in read_jsonl(path, report=False).objects:
        keys = ("step", "problem", "k", *RATES)
        whole = isinstance(record, dict) and all(_count(record.get(key)) for key in ("step", "k", *RATES))
        if not whole or "problem" not in record or record["k"] < 1:
            raise BenchError(f"{path}, line {no}: not a per-problem validation record ({', '.join(keys)}, whole "
                             "numbers, k >= 1); train the run again or publish it again")
        step = by_step.setdefault(int(record["step"]), {rate: {} for rate in RATES})
        for rate in RATES:
            step[rate][record["problem"]] = record[rate] / record["k"]
    if not by_step:
        raise BenchError(f"{path}: no validation record in it; train the run again or publish it again")
    return by_step


def _count(value) -> bool:
    """A whole number >= 0 as JSON gives it."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def go_no_go(source: Path, quiet: bool = False) -> list[dict]:
    """EVIDENCE.md section 4's go / no-go for each run under ``source``/runs: strict accuracy at every validation;
    (b), registrations 1-2: the last exceeds the first by more than two paired SEs over problems and exceeds the one
    before it; (b'), registration 3: the last exceeds both the first and the one before it (still improving)."""
    from verl_isocompute.rules import metrics

    rows = []
    runs = sorted(p for p in (source / "runs").glob("*-s*") if (p / "learning_run.json").is_file())
    if not runs:
        raise BenchError(f"{source}: no finished run under runs/ (runs/<split>-s<seed> with its learning_run.json); "
                         "train them first (--stage train --split tune --test-freq 4), or name their folder with --from")
    for run in runs:
        counts = read_counts(run)
        steps = sorted(counts)
        if len(steps) < 3:
            raise BenchError(f"{run}: validations at steps {steps}; the go / no-go needs three (e.g. --test-freq 4)")
        strict = {step: counts[step]["correct"] for step in steps}
        change = metrics.paired_change(strict[steps[0]], strict[steps[-1]])
        late = metrics.paired_change(strict[steps[-2]], strict[steps[-1]])
        command = read_json(run / "learning_run.json", ("command",))["command"]
        base_lr = next((a.split("=", 1)[1] for a in command if str(a).startswith("isocompute.lr.base_lr=")), "?")
        passed = change.change > 2 * change.change_se and late.change > 0
        improving = change.change > 0 and late.change > 0
        accuracy = {s: sum(v.values()) / len(v) for s, v in strict.items()}
        line = (f"{run.name} base_lr {base_lr}: strict accuracy " + ", ".join(f"step {s} {v:.3f}" for s, v in accuracy.items())
                + f"; first -> last {change.change:+.3f} ± {change.change_se:.3f} (paired SE), last two "
                f"{late.change:+.3f}: {'GO' if passed else 'NO-GO'}; (b') {'GO' if improving else 'NO-GO'}")
        rows.append({"run": run.name, "base_lr": base_lr, "strict": accuracy, "change": change.change,
                     "change_se": change.change_se, "late_change": late.change, "go": passed,
                     "go_b_prime": improving, "line": line})
        if not quiet:
            print(line)
    return rows


QUARTERS = {"q1": (0.0, 0.25), "q4": (0.75, 1.0)}  # EVIDENCE.md section 4: shares of the budget, (low, high]
NARROW = 0.10  # section 4: an interval of Delta narrower than this that holds 0 reads "n* stays put"


def sweep_cells(sweep_dir: Path, budget: float = 1024, b_problem: int = 8) -> tuple[dict, dict[str, list[str]]]:
    """The finished runs of a sweep at one B_problem, ``{(n, seed): {quarter: mean training reward}}`` (see
    :func:`nstar_verdict`), and the cells left out, by why: another B_problem, or unfinished.

    Which n, seed and B_problem a cell ran is read from its run log, never guessed: a folder that is no sweep
    directory, a cell name without its seed, a header without n, two cells of one (n, seed), or a finished run
    with no step in a quarter (a log missing its first steps) is an error naming it, never a NaN verdict."""
    cells_dir = sweep_dir / "cells"
    if not cells_dir.is_dir():
        raise BenchError(f"{sweep_dir}: no cells/ folder there, so no sweep to judge; name the sweep's folder with --from "
                         "(the plan's sweep_dir, e.g. runs/nstar_cpu)")
    runs: dict[tuple[int, int], dict[str, float]] = {}
    cell_of: dict[tuple[int, int], Path] = {}
    left_out: dict[str, list[str]] = defaultdict(list)
    for cell in sorted(p for p in cells_dir.iterdir() if p.is_dir()):
        seed = cell_seed(cell)
        log = read_log(cell, header=("n", "b_problem"))
        n, cell_b = int(log.header["n"]), int(log.header["b_problem"])
        if cell_b != b_problem:
            left_out[f"B_problem {cell_b}, not {b_problem}"].append(cell.name)
            continue
        rows = [r for _, r in log.rows if r["step"] > 0 and r.get("train/reward") is not None]
        if not rows or rows[-1]["rollouts"] < budget:
            left_out["unfinished"].append(cell.name)  # the rule uses finished runs only
            continue
        if (n, seed) in cell_of:
            raise BenchError(f"{cell} and {cell_of[(n, seed)].name}: two runs of n = {n}, seed {seed}, B_problem "
                             f"{b_problem}; keep one")
        cell_of[(n, seed)] = cell
        quarters = {}
        for q, (lo, hi) in QUARTERS.items():
            rewards = [r["train/reward"] for r in rows if lo * budget < r["rollouts"] <= hi * budget]
            if not rewards:
                raise BenchError(f"{log.path}: no training step with C in ({lo * budget:g}, {hi * budget:g}], quarter "
                                 f"{q} of the budget {budget:g} (logged C from {rows[0]['rollouts']:g} to "
                                 f"{rows[-1]['rollouts']:g}); the rule needs both quarters: train the cell again")
            quarters[q] = float(np.mean(rewards))
        runs[(n, seed)] = quarters
    if not runs and left_out:
        raise BenchError(f"{sweep_dir}: no finished cell of B_problem {b_problem} ("
                         + "; ".join(f"{why}: {', '.join(cells)}" for why, cells in left_out.items())
                         + "); pass --b-problem for another B_problem, or finish the cells")
    return runs, dict(left_out)


def nstar_verdict(sweep_dir: Path, small: int = 2, large: int = 8, budget: float = 1024, b_problem: int = 8) -> dict:
    """EVIDENCE.md section 4's decision rule, as registered, on a sweep's runs (``<sweep_dir>/cells/<cell>-s<seed>``).

    R_q: a run's mean training reward over the steps whose cumulative rollouts C fall in quarter q of ``budget``
    (every training problem is new, so this is held-out accuracy). Per seed, D_q = R_q(n=small) - R_q(n=large) and
    Delta = D_q4 - D_q1; over the seeds both n finished, means and two-sided 95 % t intervals. The rule compares n
    at one B_problem (the registered sweep's 8): the runs are :func:`sweep_cells`'."""
    runs, _ = sweep_cells(sweep_dir, budget, b_problem)
    seeds = sorted(s for (n, s) in runs if n == small and (large, s) in runs)
    if len(seeds) < 3:
        raise BenchError(f"{sweep_dir}: n = {small} and n = {large} both finished seeds {seeds} at B_problem {b_problem}; "
                         "the registered rule needs at least 3")
    d = {q: [runs[(small, s)][q] - runs[(large, s)][q] for s in seeds] for q in QUARTERS}
    delta = t_interval([b - a for a, b in zip(d["q1"], d["q4"])])
    d1, d4 = (t_interval(d[q]) for q in QUARTERS)
    if d1["mean"] > 0 > d4["mean"] and delta["high"] < 0:
        verdict = "n* rises with C"
    elif d1["mean"] < 0 < d4["mean"] and delta["low"] > 0:
        verdict = "n* falls with C"
    elif delta["low"] <= 0 <= delta["high"] and delta["high"] - delta["low"] < NARROW:
        verdict = "n* stays put"
    else:
        verdict = "underpowered"
    return {"seeds": seeds, "runs": {f"n{n}-s{s}": r for (n, s), r in sorted(runs.items())},
            "D_q1": d1, "D_q4": d4, "Delta": delta, "verdict": verdict}
