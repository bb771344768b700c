"""Mix guided copies of hard problems into a training set: oracle-solution prefixes as context.

POPE (arXiv 2601.18779): ``--placement user`` puts the first part of the problem's reference solution into
the user turn with an instruction to continue it. PrefixRL (arXiv 2601.18795): ``--placement assistant``
makes it the start of the assistant turn, continued by the policy (our agent loop keeps it in the prompt).
In both the prefix is context, never a training target. The output holds every original row plus
``--ratio`` x as many guided rows (1:1 by default, as in POPE), marked in ``extra_info`` (guided,
prefix_fraction, placement, guide_prefix). Train on it with ``data.train_files=OUT``; keep validation on
the unguided set. Problems whose solution is missing or has no usable prefix are skipped and counted.
``--traces CURATE_OUT`` cuts the prefixes from the base model's own correct responses kept by
``isocompute curate --keep-correct`` instead (PrefixRL's traces); problems without one count as no_trace.
With --prefixes DIR (the output of ``isocompute prefix-search``) each problem gets the prefix the search
chose for it with the base model instead of the fixed --fraction. PrefixRL's own choices: --copies C guided
rows per problem at different prefix lengths, --originals none (train on prefixed problems only; prefixed:
POPE's 1:1 over the problems with a prefix), --cut tokens (with --traces: the first h kept token ids of the
trace, not the text re-tokenised; needs the assistant placement). The summary line says the real mixture
(guided rows per unguided row): 1:1 only when every problem has a prefix.

Exit status: 0 written; 2 bad input, or no guided row would be written (nothing written).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from verl_isocompute.guided.placement import ORIGINALS, PLACEMENTS, UNSEARCHED
from verl_isocompute.guided.recipe import CUTS, GuideConfig, write_mixture

DEFAULTS = GuideConfig()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("train", nargs="+", type=Path, metavar="TRAIN", help="training parquet file(s) in verl's RL format")
    parser.add_argument("--out", "-o", required=True, type=Path, help="the guided training parquet to write")
    parser.add_argument("--solution-key", default=DEFAULTS.solution_key,
                        help=f"column (or dotted path into one) with the oracle solution (default {DEFAULTS.solution_key})")
    parser.add_argument("--placement", choices=PLACEMENTS, default=DEFAULTS.placement,
                        help="user: POPE's user-turn prefix; assistant: PrefixRL's assistant-turn prefix "
                             "(default user; assistant with --traces; the search's own with --prefixes)")
    parser.add_argument("--traces", default=DEFAULTS.traces, metavar="CURATE_OUT",
                        help="cut the prefixes from the base model's correct responses that `isocompute curate "
                             "--keep-correct --out CURATE_OUT` kept (PrefixRL; the shortest usable one per problem) "
                             "instead of --solution-key")
    parser.add_argument("--ratio", type=float, default=DEFAULTS.ratio,
                        help="share of the problems with a usable prefix to guide, in (0, 1] (default 1: every one)")
    parser.add_argument("--copies", type=int, default=DEFAULTS.copies,
                        help="guided rows per guided problem, at evenly spread prefix lengths up to --fraction "
                             "(PrefixRL varies the prefix length; default 1)")
    parser.add_argument("--originals", choices=ORIGINALS, default=DEFAULTS.originals,
                        help="unguided originals kept: all (default), prefixed (only the guided problems': POPE's 1:1 "
                             "over the problems with a prefix), none (PrefixRL: prefixed problems only)")
    parser.add_argument("--cut", choices=CUTS, default=DEFAULTS.cut,
                        help="with --traces: text (cut at line / sentence ends, default) or tokens (the first h kept "
                             "token ids of the trace; assistant placement)")
    parser.add_argument("--unsearched", choices=UNSEARCHED, default=DEFAULTS.unsearched,
                        help="with --prefixes: a problem the search found no prefix for gets no guided copy (skip, "
                             "default) or one at the fixed --fraction (fraction)")
    parser.add_argument("--fraction", type=float, default=DEFAULTS.fraction,
                        help="prefix length as a share of the solution's characters, cut at a line/sentence end (default 0.25)")
    parser.add_argument("--max-fraction", type=float, default=DEFAULTS.max_fraction,
                        help="cap on the prefix share (default 0.25, POPE's quarter)")
    parser.add_argument("--prefixes", default=None, metavar="DIR",
                        help="an `isocompute prefix-search` output dir (or its prefixes.parquet): each problem gets its "
                             "searched prefix, problems without one are skipped (default: the fixed --fraction)")
    parser.add_argument("--seed", type=int, default=DEFAULTS.seed, help="which problems are guided when ratio < 1 (default 0)")


def run(args: argparse.Namespace) -> int:
    missing = [str(p) for p in args.train if not p.is_file()]
    if missing:
        print(f"isocompute guide: error: {', '.join(missing)} not found; pass training parquet files", file=sys.stderr)
        return 2
    if args.out.is_dir():
        print(f"isocompute guide: error: -o {args.out} is a directory; give the parquet file to write", file=sys.stderr)
        return 2
    options = GuideConfig(args.solution_key, args.placement, args.ratio, args.fraction, args.max_fraction, args.seed,
                           traces=args.traces, prefixes=args.prefixes, copies=args.copies, originals=args.originals,
                           cut=args.cut, unsearched=args.unsearched)
    try:
        result = write_mixture([str(p) for p in args.train], args.out, options)
    except ValueError as exc:
        print(f"isocompute guide: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"isocompute guide: error: cannot write -o {args.out}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    print(f"wrote {args.out}: {result.summary()}")
    return 0
