"""Benchmark of the scaling toolkit (``isocompute fit``) on synthetic sweeps of 50 and 500 runs.

Each run has 200 validation points (plus the step-0 one); the runs are spread over 10 values of n
(2 ... 1024, B_problem = 32) with per-n curves built from the playbook's Easy sigmoid
(verl_isocompute.scaling.synthetic), written as isocompute.jsonl run logs (validation rows only), then
timed in one process, phase by phase:

  load       parse the run logs (load_runs)
  frontier   validation points and record-breaking points (build_frontier)
  fits       per-n curves, envelope, n*(C) and its sigmoid, no bootstrap (fit_frontier, bootstrap=0)
  bootstrap  the same with 200 resamples over runs, minus the fits alone
  plots      both figures rendered and saved as PNG
  pipeline   load + frontier + fits with bootstrap + plots (what `isocompute fit` does by default)

Target: fits alone under 1 s. Run: ``python benchmarks/bench_scaling.py`` (about 15 s on 2 cores).
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from verl_isocompute.scaling import (
    build_frontier,
    fit_frontier,
    load_curve,
    load_runs,
    plot_frontier,
    save_plots,
)
from verl_isocompute.scaling.synthetic import (
    curves_for,
    synthetic_sweep,
    write_run_logs,
)

N_GRID = [2**i for i in range(1, 11)]
POINTS_PER_RUN = 200
BOOTSTRAP = 200
TARGET_FITS_S = 1.0


def bench(runs: int, folder: Path) -> dict[str, float]:
    truth = load_curve("paper:qwen2.5-7b-easy")
    sweep = synthetic_sweep(
        curves_for(truth, N_GRID), runs_per_n=runs // len(N_GRID), points_per_run=POINTS_PER_RUN, noise=0.01, seed=0
    )
    write_run_logs(sweep, folder / "runs")

    times: dict[str, float] = {}
    start = time.perf_counter()
    logs = load_runs([folder / "runs"])
    times["load"] = time.perf_counter() - start

    start = time.perf_counter()
    frontier = build_frontier(logs)
    times["frontier"] = time.perf_counter() - start

    start = time.perf_counter()
    fit_frontier(frontier, bootstrap=0)
    times["fits"] = time.perf_counter() - start

    start = time.perf_counter()
    result = fit_frontier(frontier, bootstrap=BOOTSTRAP)
    times["bootstrap"] = time.perf_counter() - start - times["fits"]

    start = time.perf_counter()
    save_plots(plot_frontier(result), folder)
    times["plots"] = time.perf_counter() - start

    times["pipeline"] = times["load"] + times["frontier"] + times["fits"] + times["bootstrap"] + times["plots"]
    assert len(logs.runs) == runs and result.curve is not None
    c = result.curve
    print(
        f"{runs:>4} runs x {POINTS_PER_RUN} points: fitted L={c.L:.2f} k={c.k:.2f} log10_C0={c.log10_C0:.2f} "
        f"b={c.b:.2f} (paper: L={truth.L} k={truth.k} log10_C0={truth.log10_C0} b={truth.b})"
    )
    return times


def main() -> None:
    results = {}
    for runs in (50, 500):
        with tempfile.TemporaryDirectory() as folder:
            results[runs] = bench(runs, Path(folder))
    phases = list(results[50])
    print()
    print(f"{'phase':<10} {'50 runs':>9} {'500 runs':>9} {'growth':>7}")
    for phase in phases:
        small, big = results[50][phase], results[500][phase]
        print(f"{phase:<10} {small:>8.2f}s {big:>8.2f}s {big / small:>6.1f}x")
    fits = results[500]["fits"]
    verdict = "meets" if fits < TARGET_FITS_S else "MISSES"
    print(f"\nfits alone at 500 runs: {fits:.2f} s ({verdict} the {TARGET_FITS_S:.0f} s target); "
          f"bootstrap: {BOOTSTRAP} resamples over runs")


if __name__ == "__main__":
    main()
