"""Fit the compute-optimal frontier and the n*(C) sigmoid from run logs (arXiv 2603.12151, section 4).

RUNS are run directories (holding isocompute.jsonl), log files (isocompute.jsonl, verl file-logger
.jsonl, a wandb/tensorboard .csv export), tensorboard event-file directories, wandb run directories, or
directories searched recursively. n and B_problem of a run come from its log, a --run-table, --n /
--b-problem, the run's hydra record (.hydra/config.yaml; for tensorboard_log/<project>/<experiment>, the
record of that experiment next to tensorboard_log) or its name (..._n16_bp32), in that order.
Writes curve.json, frontier.csv, records.csv, fits.csv, report.md, frontier.png, n_star.png and
compare.json/.csv/.png (what each fixed n costs) into --out, atomically.

Exit status: 0 fitted; 1 no curve (n*(C) could not be determined or a fit did not converge: the
message says which; with one value of n the frontier is still written and an older curve.json in --out
is renamed curve.stale.json); 2 bad input, one line naming the file, line or option (nothing written).
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from verl_isocompute.scaling.curve import COMPUTE_UNITS
from verl_isocompute.scaling.pipeline import FitConfig, run_fit

PROG = "isocompute fit"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("runs", nargs="+", metavar="RUNS", help="run directories, log files, or directories to search")
    parser.add_argument("--out", required=True, type=Path, metavar="DIR", help="output directory (created if needed)")
    parser.add_argument("--metric", default=FitConfig.metric,
                        help="logged metric to maximise (default: val/avg@k, with the k the runs validated with: val/avg@4 "
                             "in our recipes, val/avg@1 with our pieces on verl's ppo_trainer; val/best@4 or val/worst@4 "
                             "give their own n*)")
    parser.add_argument("--compute", choices=COMPUTE_UNITS, default=FitConfig.compute,
                        help="compute unit C: cumulative rollouts (default), generated tokens, rollouts_with_guidance "
                             "(plus the rollouts spent before training to find the guidance, PrefixRL's count) or "
                             "rollouts_with_curation (plus curation too: both arms of a comparison spend it); "
                             "spend on the training problems only (docs/GUIDED.md)")
    parser.add_argument("--bucket", type=float, default=FitConfig.bucket,
                        help="reward bucket width for record-breaking points (default 0.01; 0 = none)")
    parser.add_argument("--group-by", choices=("n", "n,b_problem"), default=FitConfig.group_by, metavar="{n | n,b_problem}",
                        help="one curve per n (B_problem fixed, default) or per (n, B_problem) for the joint sweep")
    parser.add_argument("--fit-on", choices=("all", "records"), default=FitConfig.fit_on,
                        help="fit each group's curve to all validation points (default) or to its record-breaking points")
    parser.add_argument("--per-group-r0", action="store_true",
                        help="fit R0 (reward at C -> 0) per group instead of sharing one across groups")
    parser.add_argument("--ema", type=float, default=FitConfig.ema,
                        help="per-run EMA smoothing of the metric, weight of the past in [0, 1) (default 0 = off)")
    parser.add_argument("--window", type=int, default=FitConfig.window,
                        help="running-average window over the n*(C) grid, in grid points (default 5 = 1/4 decade)")
    parser.add_argument("--k-max", type=float, default=FitConfig.k_max, help="upper bound on the sigmoid's k (default 50)")
    parser.add_argument("--bootstrap", type=int, default=FitConfig.bootstrap,
                        help="bootstrap resamples over runs for confidence intervals (default 200; 0 = none)")
    parser.add_argument("--seed", type=int, default=FitConfig.seed, help="bootstrap seed (default 0)")
    parser.add_argument("--run-table", default=None, metavar="FILE",
                        help="n and B_problem per run, for logs that do not record them: a CSV with columns run,n,b_problem "
                             "or a YAML run: {n: N, b_problem: B}; run = the run's name as fit shows it or its last "
                             "path component (a tensorboard run: its experiment name)")
    parser.add_argument("--n", type=int, default=None,
                        help="n for every run whose log, run table and hydra record do not say it (verl file logs, "
                             "tensorboard, CSVs)")
    parser.add_argument("--b-problem", type=int, default=None,
                        help="B_problem (data.train_batch_size) for every run whose log, run table and hydra record do not say it")
    parser.add_argument("--derive-compute", action="store_true",
                        help="ignore logged compute counters; use C = step x n x b_problem")
    parser.add_argument("--compare", default=None, metavar="CURVE",
                        help="a curve to compare with in the report and plot: paper:<name> or a curve.json")


def options_from_args(args: argparse.Namespace) -> FitConfig:
    return FitConfig(
        metric=args.metric, compute=args.compute, bucket=args.bucket, group_by=args.group_by, fit_on=args.fit_on,
        shared_r0=not args.per_group_r0, ema=args.ema, window=args.window, k_max=args.k_max,
        bootstrap=args.bootstrap, seed=args.seed, n=args.n, b_problem=args.b_problem, run_table=args.run_table,
        derive_compute=args.derive_compute,
    )


def run(args: argparse.Namespace) -> int:
    from verl_isocompute.commands.cli import error
    from verl_isocompute.errors import IsoComputeError
    from verl_isocompute.scaling.curve import STALE_CURVE_FILE, load_curve
    from verl_isocompute.scaling.errors import FitError

    try:
        compare = load_curve(args.compare) if args.compare else None
        outcome = run_fit(args.runs, args.out, options_from_args(args), compare=compare,
                          compare_label=args.compare, command=_command(args))
    except FitError as exc:
        _error(f"{exc}\nNothing was written; previous outputs in {args.out} are untouched.")
        return 1
    except IsoComputeError as exc:  # a scaling or curve error: one line
        return error(PROG, str(exc))
    except OSError as exc:
        if exc.filename and not _inside(exc.filename, args.out):  # an input, read where records.py does not look
            _error(f"cannot read {exc.filename}: {exc.strerror or exc}; nothing was written")
        else:
            _error(f"cannot write to {args.out}: {exc}; previous outputs are untouched")
        return 2
    result, written = outcome.result, outcome.written

    for note in result.frontier.notes:
        print(f"note: {note}", file=sys.stderr)
    for warning in result.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    for path in written:
        print(f"wrote {path}")
    if result.curve is None:
        stale = next((p for p in written if p.name == STALE_CURVE_FILE), None)
        aside = f" The older curve.json there describes other runs: it was renamed {stale}." if stale else ""
        _error(f"no n*(C) curve: {result.no_curve_reason}. The frontier was written to {args.out}.{aside}")
        return 1
    c = result.curve
    print(
        f"n*(C): L={c.L:.3f} k={c.k:.3f} log10_C0={c.log10_C0:.3f} b={c.b:.3f} (R^2={result.r2:.3f}); "
        f"n* from {c.n_floor:.0f} to {c.n_ceiling:.0f} over C in [{c.c_range[0]:.3g}, {c.c_range[1]:.3g}] {c.compute_unit}"
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m verl_isocompute.commands.fit``: the same as ``isocompute fit``."""
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(argv)
    args.argv = argv
    from verl_isocompute.commands.cli import closed_pipe_safe

    with closed_pipe_safe():
        return run(args)


def _command(args: argparse.Namespace) -> str | None:
    """The command line, for provenance: from ``main`` here, or from the ``isocompute`` console script."""
    argv = getattr(args, "argv", None)
    if argv is not None:
        return shlex.join(["isocompute", "fit", *argv])
    if Path(sys.argv[0]).name == "isocompute":
        return shlex.join(["isocompute", *sys.argv[1:]])
    return None


def _inside(path: str, folder: Path) -> bool:
    return Path(path).absolute().is_relative_to(folder.absolute())


def _error(message: str) -> None:
    print(f"{PROG}: error: {message}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
