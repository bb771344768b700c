"""Fit the compute-optimal frontier and the n*(C) sigmoid from run logs (arXiv 2603.12151, section 4).

RUNS are run directories (holding isocompute.jsonl), log files (isocompute.jsonl, verl file-logger
.jsonl, a wandb/tensorboard .csv export), tensorboard event-file directories, wandb run directories, or
directories searched recursively. n and B_problem of a run come from its log, a --run-table, --n /
--b-problem, the run's hydra config file (.hydra/config.yaml; for tensorboard_log/<project>/<experiment>, the
record of that experiment next to tensorboard_log) or its name (..._n16_bp32), in that order.
Writes curve.json, frontier.csv, records.csv, fits.csv, report.md, frontier.png, n_star.png and
compare.json/.csv/.png (what each fixed n costs) into --out, atomically.

Exit status: 0 fitted (also when one n is n* at every C: curve.json is then flat, L = 0); 1 no curve
(n*(C) could not be determined or a fit did not converge: the message says which; with one value of n the
frontier is still written and an older curve.json in --out is renamed curve.stale.json); 2 bad input, one
line naming the file, line or option (nothing written).
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from verl_isocompute.scaling.curve import COMPUTE_UNITS
from verl_isocompute.scaling.fit_defaults import BOOTSTRAP_OVER
from verl_isocompute.scaling.pipeline import REPLACED_EMA, FitConfig, run_fit
from verl_isocompute.settings import add_setting, from_args

PROG = "isocompute fit"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("runs", nargs="+", metavar="RUNS", help="run directories, log files, or directories to search")
    parser.add_argument("--out", required=True, type=Path, metavar="DIR", help="output directory (created if needed)")
    add_setting(parser, FitConfig, "metric")
    add_setting(parser, FitConfig, "compute", choices=COMPUTE_UNITS)
    add_setting(parser, FitConfig, "bucket", type=float)
    add_setting(parser, FitConfig, "group_by", choices=("n", "n,b_problem"), metavar="{n | n,b_problem}")
    add_setting(parser, FitConfig, "fit_on", choices=("all", "records"))
    add_setting(parser, FitConfig, "shared_r0", "--per-group-r0", action="store_true", default=False,
                help="fit R0 (reward at C -> 0) per group instead of sharing one across groups")
    add_setting(parser, FitConfig, "half_life", type=float, metavar="C")
    parser.add_argument("--ema", default=None, help=argparse.SUPPRESS)  # removed: refused naming its replacement
    add_setting(parser, FitConfig, "window", type=int)
    add_setting(parser, FitConfig, "k_max", type=float)
    add_setting(parser, FitConfig, "bootstrap", type=int)
    add_setting(parser, FitConfig, "bootstrap_over", choices=BOOTSTRAP_OVER)
    add_setting(parser, FitConfig, "seed", type=int)
    add_setting(parser, FitConfig, "run_table", metavar="FILE")
    add_setting(parser, FitConfig, "n", type=int)
    add_setting(parser, FitConfig, "b_problem", type=int)
    add_setting(parser, FitConfig, "derive_compute", action="store_true")
    parser.add_argument("--compare", default=None, metavar="CURVE",
                        help="a curve to compare with in the report and plot: paper:<name> or a curve.json")


def options_from_args(args: argparse.Namespace) -> FitConfig:
    return from_args(FitConfig, args, shared_r0=not args.per_group_r0)


def run(args: argparse.Namespace) -> int:
    from verl_isocompute.commands.cli import error
    from verl_isocompute.scaling.curve import STALE_CURVE_FILE, load_curve
    from verl_isocompute.scaling.errors import FitError

    if getattr(args, "ema", None) is not None:
        return error(PROG, REPLACED_EMA)
    try:
        compare = load_curve(args.compare) if args.compare else None
        outcome = run_fit(args.runs, args.out, options_from_args(args), compare=compare,
                          compare_label=args.compare, command=_command(args))
    except FitError as exc:  # exit 1, not 2: the input was good, the fit did not converge
        error(PROG, f"{exc}\nNothing was written; previous outputs in {args.out} are untouched.")
        return 1
    except OSError as exc:
        if exc.filename and not _inside(exc.filename, args.out):  # an input, read where run_logs.py does not look
            return error(PROG, f"cannot read {exc.filename}: {exc.strerror or exc}; nothing was written")
        return error(PROG, f"cannot write to {args.out}: {exc}; previous outputs are untouched")
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
        error(PROG, f"{result.summary()}. The frontier was written to {args.out}.{aside}")
        return 1
    print(result.summary())
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m verl_isocompute.commands.fit``: the same as ``isocompute fit``."""
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(argv)
    args.argv = argv
    from verl_isocompute.commands.cli import run_command

    return run_command(PROG, run, args)


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


if __name__ == "__main__":
    sys.exit(main())
