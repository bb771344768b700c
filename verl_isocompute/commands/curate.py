"""Measure each problem's difficulty with the base model and cut the playbook's Easy / Hard / mixed sets.

For every problem (verl parquet files, or a built-in reasoning-gym generator) k responses are sampled
(default 16 at temperature 0.6) through verl's rollout servers (--rollout: the recipe's backend, hf on
CPU recipes, vllm on GPUs) and scored with the recipe's reward. Writes into --out: difficulty.parquet
(per problem: k, correct, avg@k, pass@k), splits/{easy,hard,extremely_hard,very_easy}.parquet,
mixtures/{hard_only,dual,tri}.parquet, sets/<set>/{train,val}.parquet (and tune.parquet with --tune-size), difficulty.png, report.md,
spend.json (the rollouts spent). Samples are cached per problem (samples.jsonl): rerun the same command
to resume an interrupted curation, or to re-cut the sets with other thresholds without sampling again.
--keep-correct keeps the correct responses as PrefixRL traces (traces.jsonl.gz) and --pass-k K samples
problems without one further (rejection sampling, rejection.jsonl), resumable the same way.

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
    from dataclasses import fields

    from verl_isocompute.workflow.curate import CurateConfig

    # every default is CurateConfig's own, so the command line and the library agree (written once)
    default = {f.name: f.default for f in fields(CurateConfig)}

    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--data", nargs="+", metavar="FILE", help="verl-format parquet files (prompt, reward_model.ground_truth, ...)")
    source.add_argument("--generate", metavar="TASK", help="a reasoning-gym task to generate problems from, e.g. basic_arithmetic; or worked: arithmetic "
                             "chains with a worked solution per problem (--gen-arg terms=5 --gen-arg digits=2), for "
                             "prefix-search and guided training")
    parser.add_argument("--size", type=int, default=default["size"], help="problems to generate with --generate (default %(default)s)")
    parser.add_argument("--gen-arg", type=_gen_arg, action="append", default=[], metavar="KEY=VALUE",
                        help="generator option, repeatable (e.g. --gen-arg max_digits=3)")
    parser.add_argument("--out", required=True, type=Path, metavar="DIR", help="output directory (also the sample cache)")
    parser.add_argument("--recipe", default=default["recipe"], help="recipe giving model, rollout and reward (default %(default)s)")
    parser.add_argument("--model", default=None, help="tiny | smollm2 | a local checkpoint path (default: the recipe's)")
    parser.add_argument("--rollout", choices=("hf", "vllm"), default=None,
                        help="rollout backend (default: the recipe's; hf on CPU recipes, vllm needs GPUs)")
    parser.add_argument("--k", type=int, default=default["k"], help="samples per problem (default %(default)s, the paper's avg@16)")
    parser.add_argument("--temperature", type=float, default=default["temperature"], help="sampling temperature (default %(default)s)")
    parser.add_argument("--top-p", type=float, default=default["top_p"], help="nucleus sampling (default %(default)s)")
    parser.add_argument("--top-k", type=int, default=default["top_k"], help="top-k sampling, -1 = off (default %(default)s)")
    parser.add_argument("--max-response-length", type=int, default=None, help="response tokens (default: the recipe's)")
    t = default["thresholds"]
    parser.add_argument("--easy", type=_band, default=t.easy, metavar="LO,HI", help="avg@k band of Easy (default 0.3,0.6)")
    parser.add_argument("--hard", type=_band, default=t.hard, metavar="LO,HI", help="avg@k band of Hard (default 0,0.0625)")
    parser.add_argument("--very-easy", type=_band, default=t.very_easy, metavar="LO,HI", help="avg@k band of Very easy (default 0.6,0.9)")
    parser.add_argument("--extremely-hard-max-pass", type=float, default=t.extremely_hard_max_pass, metavar="P",
                        help="Extremely hard: pass@k <= P (default 0: no sample correct)")
    parser.add_argument("--mixture-size", type=int, default=default["mixture_size"], help="target size of each mixture (default %(default)s)")
    parser.add_argument("--sets", default=",".join(default["sets"]), help="sets to write train/val splits for (default: all)")
    parser.add_argument("--val-size", type=int, default=default["val_size"], help="validation problems per set (default %(default)s)")
    parser.add_argument("--max-val-fraction", type=float, default=default["max_val_fraction"],
                        help="at most this share of a set is held out (default %(default)s)")
    parser.add_argument("--tune-size", type=int, default=default["tune_size"],
                        help="also hold out this many of each set's training problems as sets/<set>/tune.parquet, to choose "
                             "settings on without touching the validation problems (default %(default)s: none)")
    parser.add_argument("--seed", type=int, default=default["seed"], help="seed of the generator, mixtures and splits (default %(default)s)")
    parser.add_argument("--concurrency", type=int, default=default["concurrency"], help="problems in flight at once (default %(default)s)")
    parser.add_argument("--ray-address", default=None, metavar="ADDR",
                        help="join this running Ray cluster, as ray.init takes it (host:6379 or auto), instead of "
                             "starting a private instance; it must offer the replicas' GPUs")
    parser.add_argument("--no-answer-check", action="store_true",
                        help="do not skip problems whose reference answer math-verify cannot parse (non-math rewards)")
    parser.add_argument("--restart", action="store_true", help="discard cached samples (and kept traces) in --out")
    parser.add_argument("--keep-correct", action="store_true",
                        help="keep the correct responses (text + token ids) in --out/traces.jsonl.gz: PrefixRL's traces "
                             "for `isocompute guide --traces` (docs/GUIDED.md)")
    parser.add_argument("--pass-k", type=int, default=None, metavar="K",
                        help="with --keep-correct: sample problems with no correct response in more rounds of --k, until "
                             "the first success or K samples in all (rejection sampling; avg@k and the sets still use "
                             "the first k only)")
    parser.add_argument("--resample-untraced", action="store_true",
                        help="with --keep-correct on a cache made without it: sample again the cached problems whose "
                             "correct responses were not kept (their avg@k is measured anew)")
    parser.add_argument("overrides", nargs="*", metavar="key=value", help="verl-style overrides of the recipe")


def settings_from_args(args: argparse.Namespace):
    """The command line as a :class:`~verl_isocompute.workflow.curate.CurateConfig`."""
    from verl_isocompute.workflow import curate as c

    return c.CurateConfig(
        out=args.out, data=tuple(args.data or ()), generate=args.generate, size=args.size,
        gen_args=dict(args.gen_arg), recipe=args.recipe, model=args.model, rollout=args.rollout, k=args.k,
        temperature=args.temperature, top_p=args.top_p, top_k=args.top_k,
        max_response_length=args.max_response_length,
        thresholds=c.Thresholds(args.easy, args.hard, args.very_easy, args.extremely_hard_max_pass),
        mixture_size=args.mixture_size, sets=tuple(s.strip() for s in args.sets.split(",") if s.strip()),
        val_size=args.val_size, max_val_fraction=args.max_val_fraction, tune_size=args.tune_size, seed=args.seed,
        concurrency=args.concurrency, ray_address=args.ray_address, check_answers=not args.no_answer_check,
        restart=args.restart, keep_correct=args.keep_correct, pass_k=args.pass_k,
        resample_untraced=args.resample_untraced, overrides=tuple(args.overrides),
    )


def run(args: argparse.Namespace) -> int:
    from verl_isocompute.commands.cli import error
    from verl_isocompute.errors import IsoComputeError
    from verl_isocompute.workflow import curate as c
    from verl_isocompute.workflow.launch import Interrupted
    from verl_isocompute.workflow.sample_cache import SAMPLES_FILE

    try:
        settings = settings_from_args(args)
        settings.check()  # before any start-up: a bad flag costs nothing
    except IsoComputeError as exc:
        return error(PROG, str(exc))

    try:
        summary = c.curate(settings)
    except IsoComputeError as exc:  # a recipe, model, traces or curation error: one line
        return error(PROG, str(exc))
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
