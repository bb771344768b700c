"""Benchmark of the scaling toolkit (``isocompute fit``) on a synthetic sweep of 500 runs x 200 points.

The runs are spread over 10 values of n (2 ... 1024, B_problem = 32) with per-n curves built from the
playbook's Easy sigmoid (verl_isocompute.scaling.synthetic), written as isocompute.jsonl run logs, then
timed in one process:

  pipeline   the whole of `isocompute fit` with its defaults (200 bootstrap resamples): load, frontier,
             fits, bootstrap, plots, the comparison and the atomic write of every output
             (scaling.pipeline.run_fit).
             Target: under 2 s.

and stage by stage, each next to the straightforward way of doing the same work (the way this code
did it before; same inputs, same library pieces), so the ratios come from one run on one machine:

  load       the run logs into one table: per file, an array per key, vs a pandas DataFrame per file
  frontier   validation points and record-breaking points (no reference: one pandas pass)
  fits       per-n curves, envelope, n*(C) and its sigmoid, no bootstrap (scipy, several starts)
  bootstrap  200 resamples over runs: all refits batched (scaling.lsq) vs one scipy least_squares per
             refit (each group's curve on each resample, then the sigmoid)
  plots      both figures drawn and saved as PNG: one marker line per n vs one scatter with a colour per point
  compare    the fixed-n comparison every fit writes: its table at 40 budgets and compare.png

The timed process never imports torch (the fit is torch-free); the CPU is named at the end from a
subprocess, as ``torch.backends.cpu.get_cpu_capability()`` when torch is installed, and from
/proc/cpuinfo. Run: ``python benchmarks/bench_scaling.py`` (about 30 s on 2 cores; ``--runs 50`` for a quick look).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from verl_isocompute.runlog import RUN_LOG
from verl_isocompute.scaling import (
    build_frontier,
    fit_frontier,
    load_curve,
    load_runs,
    plot_frontier,
    save_plots,
)
from verl_isocompute.scaling.envelope import envelope
from verl_isocompute.scaling.groups import make_groups
from verl_isocompute.scaling.saturating import bin_points, fit_saturating
from verl_isocompute.scaling.sigmoid_fit import fit_sigmoid
from verl_isocompute.scaling.pipeline import FitConfig, run_fit
from verl_isocompute.scaling.synthetic import (
    curves_for,
    synthetic_sweep,
    write_run_logs,
)

N_GRID = [2**i for i in range(1, 11)]
POINTS_PER_RUN = 200
BOOTSTRAP = 200
TARGET_PIPELINE_S = 2.0


def timed(fn, *args, **kwargs):
    start = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - start


# --- the straightforward ways, for the side-by-side ratios --------------------------------------------

def load_with_frames(folder: Path):
    """Per run log, a pandas DataFrame of its lines (what the loader did before it read arrays)."""
    import pandas as pd

    frames = []
    for path in sorted(folder.glob(f"*/{RUN_LOG}")):
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        frame = pd.DataFrame.from_records([r for r in rows if "header" not in r]).astype(float)
        frame = frame.sort_values("step", kind="stable").reset_index(drop=True)
        frame["run"] = path.parent.name
        frames.append(frame)
    return pd.concat(frames, ignore_index=True)


def bootstrap_one_by_one(frontier, result, resamples: int, seed: int = 0) -> np.ndarray:
    """The fit's bootstrap with one scipy least_squares per refit (what it did before batching)."""
    settings = result.settings
    groups = [g for g in make_groups(frontier.points, result.group_by, frontier.bucket, "all") if g.key in result.curves]
    r0 = settings.get("r0")
    runs = sorted({r for g in groups for r in g.runs})
    by_run = {run: pts for g in groups for run, pts in g.points.groupby("run", sort=False)}
    group_of = {run: j for j, g in enumerate(groups) for run in g.runs}
    log2_n = np.log2([float(g.key[0]) for g in groups])
    n_range = (float(log2_n.min()), float(log2_n.max()))
    start = [result.curve.L, result.curve.k, result.curve.log10_C0, result.curve.b]
    rng = np.random.default_rng(seed)
    draws = []
    for _ in range(resamples):
        counts = np.bincount(rng.integers(0, len(runs), size=len(runs)), minlength=len(runs))
        params = np.full((1, len(groups), 4), np.nan)
        cover = np.full((1, len(groups), 2), -1.0)
        for j, g in enumerate(groups):
            chosen = [i for i, run in enumerate(runs) if counts[i] and group_of[run] == j]
            if not chosen:
                continue
            c = np.concatenate([by_run[runs[i]]["C"].to_numpy() for i in chosen])
            y = np.concatenate([by_run[runs[i]]["reward"].to_numpy() for i in chosen])
            w = np.concatenate([np.full(len(by_run[runs[i]]), float(counts[i])) for i in chosen])
            curve, _ = fit_saturating(*bin_points(c, y, w), r0=r0, start=result.curves[g.key])
            params[0, j] = [curve.R0, curve.A, math.log(curve.C_mid), curve.beta]
            cover[0, j] = [c.min(), c.max()]
        lo, hi = cover[0][cover[0, :, 0] > 0, 0].min(), cover[0, :, 1].max()
        grid = np.logspace(math.log10(lo), math.log10(hi), math.ceil(math.log10(hi / lo) * 20) + 1)
        _, winner, smoothed = envelope(params, cover, log2_n, grid[None], settings["window"])
        keep = winner[0] >= 0
        fit = fit_sigmoid(np.log10(grid[keep]), smoothed[0, keep], n_range, k_max=settings["k_max"], start=start)
        draws.append([fit.L, fit.k, fit.log10_C0, fit.b])
    return np.array(draws)


def plots_with_scatter(result, folder: Path) -> None:
    """The frontier figure's points as one scatter with a colour per point (what it drew before)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.colors import LogNorm
    from matplotlib.figure import Figure

    figures = plot_frontier(result)
    pts = result.frontier.points
    fig = Figure(figsize=(8.0, 5.2), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    ax.scatter(pts["C"], pts["reward"], c=pts["n"], cmap="viridis", norm=LogNorm(min(N_GRID), max(N_GRID)), s=4,
               alpha=0.25, lw=0, rasterized=True)
    ax.set_xscale("log")
    figures["frontier"] = fig  # its points only: a lower bound on the old figure's cost
    folder.mkdir(parents=True, exist_ok=True)
    save_plots(figures, folder)


def save_compare(result, path: Path) -> None:
    """The comparison as ``isocompute fit`` writes it: the table and the figure, saved as PNG."""
    from verl_isocompute.scaling import compare

    _, _, figure = compare.outputs(result)
    figure.savefig(path, dpi=compare.COMPARE_DPI)


# --- the run -------------------------------------------------------------------------------------------

def cpu_description() -> str:
    """torch's CPU capability (asked in a subprocess: the timed process stays torch-free) and the CPU model."""
    try:
        capability = subprocess.run(
            [sys.executable, "-c", "import torch; print(torch.backends.cpu.get_cpu_capability())"],
            capture_output=True, text=True, timeout=120, check=True,
        ).stdout.strip()
    except (subprocess.SubprocessError, OSError):
        capability = "unknown (torch not importable)"
    model, cores = platform.processor() or "unknown CPU", None
    try:
        info = Path("/proc/cpuinfo").read_text()
        model = next(line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("model name"))
        cores = info.count("processor\t:")
    except (OSError, StopIteration):
        pass
    return f"torch.backends.cpu.get_cpu_capability() = {capability}; {model}" + (f", {cores} cores" if cores else "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=500, help="runs in the synthetic sweep (default 500)")
    args = parser.parse_args()

    truth = load_curve("paper:qwen2.5-7b-easy")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        sweep = synthetic_sweep(curves_for(truth, N_GRID), runs_per_n=args.runs // len(N_GRID),
                                points_per_run=POINTS_PER_RUN, noise=0.01, seed=0)
        write_run_logs(sweep, folder / "runs")

        load_before = os.getloadavg()[0]
        cpu_start = time.process_time()
        outcome, pipeline = timed(run_fit, [folder / "runs"], folder / "out", FitConfig(bootstrap=BOOTSTRAP))
        pipeline_cpu = time.process_time() - cpu_start
        assert outcome.curve is not None and "torch" not in sys.modules

        rows = []
        logs, after = timed(load_runs, [folder / "runs"])
        _, before = timed(load_with_frames, folder / "runs")
        rows.append(("load", before, after, "arrays per file vs a DataFrame per file"))
        frontier, after = timed(build_frontier, logs)
        rows.append(("frontier", None, after, ""))
        result, fits = timed(fit_frontier, frontier, bootstrap=0)
        rows.append(("fits", None, fits, "scipy least_squares, several starts"))
        result, with_bootstrap = timed(fit_frontier, frontier, bootstrap=BOOTSTRAP)
        _, before = timed(bootstrap_one_by_one, frontier, result, BOOTSTRAP)
        rows.append(("bootstrap", before, with_bootstrap - fits, "batched refits vs one scipy call per refit"))
        _, before = timed(plots_with_scatter, result, folder / "before")
        _, after = timed(lambda: save_plots(plot_frontier(result), folder))
        rows.append(("plots", before, after, "a marker line per n vs a colour per point"))
        _, after = timed(save_compare, result, folder / "compare.png")
        rows.append(("compare", None, after, "table, figure and its PNG"))

    c = result.curve
    print(f"{args.runs} runs x {POINTS_PER_RUN} points, {BOOTSTRAP} bootstrap resamples: fitted L={c.L:.2f} k={c.k:.2f} "
          f"log10_C0={c.log10_C0:.2f} b={c.b:.2f} (paper: L={truth.L} k={truth.k} log10_C0={truth.log10_C0} b={truth.b})")
    print()
    print(f"{'stage':<10} {'before':>8} {'after':>8} {'speed-up':>9}  how")
    for name, before, after, how in rows:
        ratio = f"{before / after:>8.1f}x" if before else f"{'-':>9}"
        shown = f"{before:>7.2f}s" if before else f"{'-':>8}"
        print(f"{name:<10} {shown} {after:>7.2f}s {ratio}  {how}")
    verdict = "meets" if pipeline < TARGET_PIPELINE_S else "MISSES"
    print(f"\nwhole pipeline (run_fit: load, fits, bootstrap, plots, compare, write; first call, matplotlib import "
          f"included): {pipeline:.2f} s wall, {pipeline_cpu:.2f} s CPU ({verdict} the {TARGET_PIPELINE_S:.0f} s target)")
    print(f"load average when it started: {load_before:.1f} (on a shared machine, wall time above CPU time is waiting)")
    print(cpu_description())


if __name__ == "__main__":
    main()
