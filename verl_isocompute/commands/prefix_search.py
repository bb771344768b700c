"""Choose each hard problem's oracle-prefix length with the base model (POPE / PrefixRL prefix search).

For every problem of the verl parquet files, the solution (--solution-key), or with --traces CURATE_OUT the
problem's kept correct response (PrefixRL's trace), is cut into a ladder of prefixes at line / sentence ends,
at most --max-fraction of it. A rung whose guided prompt verl's filter_overlong_prompts would drop from
training (at the data.max_prompt_length of a guided run of the recipe) ends the ladder; when no rung fits at
all the search stops, naming data.max_prompt_length. Rounds of k guided samples per pending rung then climb
each ladder through the recipe's rollout servers (hf on CPU recipes, vLLM on GPUs), with the
prompts training will see (--placement user: POPE's instruction + prefix in the user turn; assistant:
PrefixRL's prefix as the start of the assistant turn) and the reward scoring the continuation only.
--rule pope (arXiv 2601.18779): the shortest prefix with at least one of k correct. --rule band (PrefixRL,
arXiv 2601.18795): the first rung whose guided avg@k is in [LOW, HIGH]. The samples are drawn in the
rollout's dtype (the report says which), which need not be the dtype a training run computes in.

Writes into OUT: prefixes.parquet (per problem: status chosen / exhausted / skipped, reason, rung, prefix,
prefix_fraction, guided avg@k, n_rungs), report.md, prefix_search.png, spend.json (stage prefix_search, in
total and per problem).
Samples are cached per rung (rungs.jsonl): rerun the same command to resume. Then:
isocompute guide TRAIN -o GUIDED --prefixes OUT --placement PLACEMENT.

Trailing key=value arguments are verl-style overrides of the recipe (e.g. isocompute.model=tiny, the reward).
Exit status: 0 done; 2 bad input or settings (nothing sampled); 128 + signal number when stopped by
SIGTERM / SIGINT (Ray is shut down; what was sampled stays cached).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

PROG = "isocompute prefix-search"
TRAILING = "data"  # key=value overrides may follow the options (commands/cli.py)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from verl_isocompute.guided.placement import PLACEMENTS
    from verl_isocompute.guided.search import RULES
    from verl_isocompute.workflow import prefix_search as ps

    d = ps.PrefixSearchConfig(out=Path("."))
    parser.add_argument("data", nargs="+", metavar="DATA",
                        help="verl-format parquet files with an oracle solution column, then any key=value overrides "
                             "of the recipe (verl-style, e.g. isocompute.model=tiny or the reward function)")
    parser.add_argument("--out", "-o", required=True, type=Path, metavar="OUT", help="output directory (also the rung cache)")
    parser.add_argument("--recipe", default=d.recipe, help="recipe giving model, rollout, sampling and reward (default %(default)s)")
    parser.add_argument("--model", default=None, help="tiny | smollm2 | a local checkpoint path (default: the recipe's), as curate --model")
    parser.add_argument("--rule", choices=RULES, default=d.rule,
                        help="pope: shortest prefix with >= 1 correct of k; band: guided avg@k in --band (default %(default)s)")
    parser.add_argument("--k", type=int, default=d.k, help="samples per rung (default %(default)s, curation's k)")
    parser.add_argument("--band", type=float, nargs=2, default=d.band, metavar=("LOW", "HIGH"),
                        help="target guided avg@k of --rule band (default 0.25 0.75)")
    parser.add_argument("--max-fraction", type=float, default=d.max_fraction,
                        help="longest prefix, as a share of the solution's characters (default %(default)s, POPE's quarter)")
    parser.add_argument("--placement", choices=PLACEMENTS, default=d.placement,
                        help="user: POPE's user-turn prefix; assistant: PrefixRL's assistant-turn prefix "
                             "(default user; assistant with --traces)")
    parser.add_argument("--solution-key", default=d.solution_key,
                        help="column (or dotted path into one) with the oracle solution (default %(default)s)")
    parser.add_argument("--traces", default=None, metavar="CURATE_OUT",
                        help="cut the ladders from the base model's correct responses that `isocompute curate --keep-correct "
                             "--out CURATE_OUT` kept (PrefixRL; the shortest usable trace per problem) instead of --solution-key")
    parser.add_argument("--concurrency", type=int, default=d.concurrency, help="rungs in flight at once (default %(default)s)")
    parser.add_argument("--ray-address", default=None, metavar="ADDR",
                        help="join this running Ray cluster instead of starting a private instance")
    parser.add_argument("--no-answer-check", action="store_true",
                        help="do not skip problems whose reference answer math-verify cannot parse (non-math rewards)")
    parser.add_argument("--restart", action="store_true", help="discard the cached rung samples in OUT")


def run(args: argparse.Namespace) -> int:
    from verl_isocompute.commands.cli import error
    from verl_isocompute.errors import IsoComputeError
    from verl_isocompute.guided.prefix_search import PLOT_FILE, PREFIXES_FILE, RECORDS_FILE
    from verl_isocompute.workflow import prefix_search as ps
    from verl_isocompute.workflow.launch import Interrupted

    # one positional list: argparse cannot split two of them around options; an override has "=" and is no file
    overrides = [a for a in args.data if "=" in a and not Path(a).exists()]
    data = [a for a in args.data if a not in overrides]
    settings = ps.PrefixSearchConfig(
        out=args.out, data=tuple(data), recipe=args.recipe, model=args.model, rule=args.rule, k=args.k, band=tuple(args.band),
        max_fraction=args.max_fraction, placement=args.placement, solution_key=args.solution_key, traces=args.traces,
        concurrency=args.concurrency, ray_address=args.ray_address, check_answers=not args.no_answer_check,
        restart=args.restart, overrides=tuple(overrides),
    )
    try:
        settings.check()  # before any start-up: a bad flag costs nothing
    except IsoComputeError as exc:
        return error(PROG, str(exc))

    try:
        summary = ps.prefix_search(settings)
    except IsoComputeError as exc:  # a recipe, model or search error: one line
        return error(PROG, str(exc))
    except Interrupted as exc:
        records = settings.out / RECORDS_FILE
        kept = (f"kept the rungs sampled so far in {records}" if records.is_file() and records.stat().st_size
                else "nothing was sampled yet")
        print(f"{PROG}: stopped by {exc}; Ray is stopped; {kept}: rerun the same command to resume", file=sys.stderr)
        return exc.exit_code
    print(f"[prefix-search] {summary['status']}; spent {summary['rollouts']} rollouts", file=sys.stderr)
    print(f"wrote {args.out}/{PREFIXES_FILE}, report.md, {PLOT_FILE}, spend.json")
    return 0
