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
from pathlib import Path

from verl_isocompute.guided.placement import ORIGINALS, PLACEMENTS, UNSEARCHED
from verl_isocompute.training.guided_mixture import CUTS, GuideConfig, write_mixture
from verl_isocompute.settings import add_setting, from_args

PROG = "isocompute guide"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("train", nargs="+", type=Path, metavar="TRAIN", help="training parquet file(s) in verl's RL format")
    parser.add_argument("--out", "-o", required=True, type=Path, help="the guided training parquet to write")
    add_setting(parser, GuideConfig, "solution_key")
    add_setting(parser, GuideConfig, "placement", choices=PLACEMENTS)
    add_setting(parser, GuideConfig, "traces", metavar="CURATE_OUT")
    add_setting(parser, GuideConfig, "ratio", type=float)
    add_setting(parser, GuideConfig, "copies", type=int)
    add_setting(parser, GuideConfig, "originals", choices=ORIGINALS)
    add_setting(parser, GuideConfig, "cut", choices=CUTS)
    add_setting(parser, GuideConfig, "unsearched", choices=UNSEARCHED)
    add_setting(parser, GuideConfig, "fraction", type=float)
    add_setting(parser, GuideConfig, "max_fraction", type=float)
    add_setting(parser, GuideConfig, "prefixes", metavar="DIR")
    add_setting(parser, GuideConfig, "seed", type=int)


def run(args: argparse.Namespace) -> int:
    from verl_isocompute.commands.cli import error

    missing = [str(p) for p in args.train if not p.is_file()]
    if missing:
        return error(PROG, f"{', '.join(missing)} not found; pass training parquet files")
    if args.out.is_dir():
        return error(PROG, f"-o {args.out} is a directory; give the parquet file to write")
    options = from_args(GuideConfig, args)
    try:
        result = write_mixture([str(p) for p in args.train], args.out, options)
    except ValueError as exc:  # the guided rules raise ValueError naming the option and the fix
        return error(PROG, str(exc))
    except OSError as exc:
        return error(PROG, f"cannot write -o {args.out}: {exc.strerror or exc}")
    print(f"wrote {args.out}: {result.summary()}")
    return 0
