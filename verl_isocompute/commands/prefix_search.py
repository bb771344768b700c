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
    from verl_isocompute.guided.search_rules import RULES
    from verl_isocompute.workflow import prefix_search as ps

    from verl_isocompute.settings import add_setting

    config = ps.PrefixSearchConfig
    add_setting(parser, config, "data", "data", nargs="+", metavar="DATA", default=None)
    add_setting(parser, config, "out", "--out", "-o", required=True, type=Path, metavar="OUT")
    add_setting(parser, config, "recipe")
    add_setting(parser, config, "model")
    add_setting(parser, config, "rule", choices=RULES)
    add_setting(parser, config, "k", type=int)
    add_setting(parser, config, "band", type=float, nargs=2, metavar=("LOW", "HIGH"))
    add_setting(parser, config, "max_fraction", type=float)
    add_setting(parser, config, "placement", choices=PLACEMENTS)
    add_setting(parser, config, "solution_key")
    add_setting(parser, config, "traces", metavar="CURATE_OUT")
    add_setting(parser, config, "concurrency", type=int)
    add_setting(parser, config, "ray_address", metavar="ADDR")
    add_setting(parser, config, "check_answers", "--no-answer-check", action="store_true", default=False,
                help="do not skip problems whose reference answer math-verify cannot parse (non-math rewards)")
    add_setting(parser, config, "restart", action="store_true")


def run(args: argparse.Namespace) -> int:
    from verl_isocompute.guided.search_tables import PLOT_FILE, PREFIXES_FILE, RUNGS_FILE
    from verl_isocompute.settings import from_args
    from verl_isocompute.workflow import prefix_search as ps
    from verl_isocompute.workflow.launch import Interrupted

    # one positional list: argparse cannot split two of them around options; an override has "=" and is no file
    overrides = [a for a in args.data if "=" in a and not Path(a).exists()]
    data = [a for a in args.data if a not in overrides]
    settings = from_args(ps.PrefixSearchConfig, args, data=tuple(data), band=tuple(args.band),
                         check_answers=not args.no_answer_check, overrides=tuple(overrides))
    settings.check()  # before any start-up: a bad flag costs nothing
    try:
        summary = ps.prefix_search(settings)
    except Interrupted as exc:
        outcomes = settings.out / RUNGS_FILE
        kept = (f"kept the rungs sampled so far in {outcomes}" if outcomes.is_file() and outcomes.stat().st_size
                else "nothing was sampled yet")
        print(f"{PROG}: stopped by {exc}; Ray is stopped; {kept}: rerun the same command to resume", file=sys.stderr)
        return exc.exit_code
    print(f"[prefix-search] {summary['status']}; spent {summary['rollouts']} rollouts", file=sys.stderr)
    print(f"wrote {args.out}/{PREFIXES_FILE}, report.md, {PLOT_FILE}, spend.json")
    return 0
