"""Measure each problem's difficulty with the base model and cut the playbook's Easy / Hard / mixed sets.

For every problem (verl parquet files, or a built-in reasoning-gym generator) k responses are sampled
(default 16 at temperature 0.6) through verl's rollout servers (--rollout: the recipe's backend, hf on
CPU recipes, vllm on GPUs) and scored with the recipe's reward. Writes into --out: difficulty.parquet
(per problem: k, correct, avg@k, pass@k), splits/{easy,hard,extremely_hard,very_easy}.parquet,
mixtures/{hard_only,dual,tri}.parquet, sets/<set>/{train,val}.parquet, difficulty.png, report.md.
Samples are cached per problem (samples.jsonl): rerun the same command to resume an interrupted
curation, or to re-cut the sets with other thresholds without sampling again.

Trailing key=value arguments are verl-style overrides of the recipe (e.g. the reward function).
Exit status: 0 done; 2 bad input or settings (nothing sampled).
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
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
    from verl_isocompute.workflow import curate as c

    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--data", nargs="+", metavar="FILE", help="verl-format parquet files (prompt, reward_model.ground_truth, ...)")
    source.add_argument("--generate", metavar="TASK", help="a reasoning-gym task to generate problems from, e.g. basic_arithmetic")
    parser.add_argument("--size", type=int, default=200, help="problems to generate with --generate (default %(default)s)")
    parser.add_argument("--gen-arg", type=_gen_arg, action="append", default=[], metavar="KEY=VALUE",
                        help="generator option, repeatable (e.g. --gen-arg max_digits=3)")
    parser.add_argument("--out", required=True, type=Path, metavar="DIR", help="output directory (also the sample cache)")
    parser.add_argument("--recipe", default="cpu_demo", help="recipe giving model, rollout and reward (default %(default)s)")
    parser.add_argument("--model", default=None, help="tiny | smollm2 | a local checkpoint path (default: the recipe's)")
    parser.add_argument("--rollout", choices=("hf", "vllm"), default=None,
                        help="rollout backend (default: the recipe's; hf on CPU recipes, vllm needs GPUs)")
    parser.add_argument("--k", type=int, default=c.DEFAULT_K, help="samples per problem (default %(default)s, the paper's avg@16)")
    parser.add_argument("--temperature", type=float, default=c.DEFAULT_TEMPERATURE, help="sampling temperature (default %(default)s)")
    parser.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling (default %(default)s)")
    parser.add_argument("--top-k", type=int, default=-1, help="top-k sampling, -1 = off (default %(default)s)")
    parser.add_argument("--max-response-length", type=int, default=None, help="response tokens (default: the recipe's)")
    t = c.Thresholds()
    parser.add_argument("--easy", type=_band, default=t.easy, metavar="LO,HI", help="avg@k band of Easy (default 0.3,0.6)")
    parser.add_argument("--hard", type=_band, default=t.hard, metavar="LO,HI", help="avg@k band of Hard (default 0,0.0625)")
    parser.add_argument("--very-easy", type=_band, default=t.very_easy, metavar="LO,HI", help="avg@k band of Very easy (default 0.6,0.9)")
    parser.add_argument("--extremely-hard-max-pass", type=float, default=t.extremely_hard_max_pass, metavar="P",
                        help="Extremely hard: pass@k <= P (default 0: no sample correct)")
    parser.add_argument("--mixture-size", type=int, default=c.DEFAULT_MIXTURE_SIZE, help="target size of each mixture (default %(default)s)")
    parser.add_argument("--sets", default=",".join(c.SETS), help="sets to write train/val splits for (default: all)")
    parser.add_argument("--val-size", type=int, default=c.DEFAULT_VAL_SIZE, help="validation problems per set (default %(default)s)")
    parser.add_argument("--max-val-fraction", type=float, default=c.DEFAULT_MAX_VAL_FRACTION,
                        help="at most this share of a set is held out (default %(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the generator, mixtures and splits (default %(default)s)")
    parser.add_argument("--concurrency", type=int, default=64, help="problems in flight at once (default %(default)s)")
    parser.add_argument("--ray-address", default=None, metavar="ADDR",
                        help="join this running Ray cluster, as ray.init takes it (host:6379 or auto), instead of "
                             "starting a private instance; it must offer the replicas' GPUs")
    parser.add_argument("--no-answer-check", action="store_true",
                        help="do not skip problems whose reference answer math-verify cannot parse (non-math rewards)")
    parser.add_argument("--restart", action="store_true", help="discard cached samples in --out")
    parser.add_argument("overrides", nargs="*", metavar="key=value", help="verl-style overrides of the recipe")


def _error(message: str) -> int:
    print(f"{PROG}: error: {message}", file=sys.stderr)
    return 2


def _recipe_overrides(args: argparse.Namespace) -> list[str]:
    from verl_isocompute.cpu.models import MODEL_NAMES

    out = list(args.overrides)
    if args.model in MODEL_NAMES:
        out.append(f"isocompute.model={args.model}")
    elif args.model:
        out += ["isocompute.model=null", f"actor_rollout_ref.model.path={Path(args.model).expanduser().absolute()}"]
    if args.rollout:
        out.append(f"actor_rollout_ref.rollout.name={args.rollout}")
    out += [
        f"actor_rollout_ref.rollout.temperature={args.temperature}",
        f"actor_rollout_ref.rollout.top_p={args.top_p}",
        f"actor_rollout_ref.rollout.top_k={args.top_k}",
    ]
    if args.max_response_length is not None:
        out.append(f"data.max_response_length={args.max_response_length}")
    return out


def run(args: argparse.Namespace) -> int:
    import pandas as pd

    from verl_isocompute.training.config import RecipeError
    from verl_isocompute.workflow import curate as c

    try:
        from verl_isocompute.cpu.models import ModelError

        thresholds = c.Thresholds(args.easy, args.hard, args.very_easy, args.extremely_hard_max_pass)
        sets = [s.strip() for s in args.sets.split(",") if s.strip()]
        unknown = sorted(set(sets) - set(c.SETS))
        if unknown:
            raise c.CurateError(f"--sets {','.join(unknown)}: choose from {','.join(c.SETS)}")
        for flag, value in (("--k", args.k), ("--mixture-size", args.mixture_size), ("--val-size", args.val_size),
                            ("--concurrency", args.concurrency), ("--size", args.size)):
            if value < 1:
                raise c.CurateError(f"{flag} must be at least 1, got {value}")
        if not 0 < args.max_val_fraction < 1:
            raise c.CurateError(f"--max-val-fraction must be in (0, 1), got {args.max_val_fraction}")
        if args.data:
            df = c.load_parquet(args.data)
            source = {"data": [str(Path(p).absolute()) for p in args.data]}
        else:
            df = c.generate(args.generate, args.size, args.seed, **dict(args.gen_arg))
            source = {"generate": args.generate, "size": args.size, "seed": args.seed, **dict(args.gen_arg)}

        # screen first: a dataset with nothing usable fails before any model or recipe is touched
        problems, skipped = c.screen(df, check_answers=not args.no_answer_check)
        if problems.empty:
            raise c.CurateError(f"no usable problem among {len(df)}: {skipped['reason'].value_counts().to_dict()}")

        from verl_isocompute.training.config import (
            compose_recipe,
            prepare_model,
            prepare_platform,
        )

        cfg = compose_recipe(args.recipe, _recipe_overrides(args))
        prepare_platform(cfg)
        prepare_model(cfg)
        # As in main.run: register our plugin now that VERL_PLATFORM is final (verl swallows a plugin
        # that failed while verl was being imported, e.g. through verl_isocompute.cpu.models).
        from verl_isocompute.plugin import register_all

        register_all()
        rollout = cfg.actor_rollout_ref.rollout
        reward = cfg.reward.get("custom_reward_function") or {}
        settings = {
            "model": str(cfg.actor_rollout_ref.model.path), "rollout": str(rollout.name), "k": args.k,
            "temperature": float(rollout.temperature), "top_p": float(rollout.top_p), "top_k": int(rollout.top_k),
            "max_response_length": int(rollout.response_length),
            "reward": f"{reward.get('path')}:{reward.get('name')}" if reward.get("path") else "verl_isocompute.training.reward:compute_score",
        }
        cache = c.SampleCache(args.out, settings, restart=args.restart)
    except (c.CurateError, RecipeError, ModelError) as exc:
        return _error(str(exc))
    print(f"[curate] {len(df)} problems: {len(problems)} usable, {len(skipped)} skipped"
          + (f" ({skipped['reason'].value_counts().to_dict()})" if len(skipped) else ""), file=sys.stderr)
    records = cache.load()
    pending_rows = problems[~problems["problem_id"].isin(records)]
    print(f"[curate] {len(problems) - len(pending_rows)} cached, {len(pending_rows)} to sample "
          f"(k = {args.k}, {settings['rollout']} rollout, model {settings['model']})", file=sys.stderr)
    too_long = []
    if len(pending_rows):
        too_long = _sample(cfg, args, pending_rows, cache, records)
        if too_long is None:
            return 130
    else:
        cache.close()
    if too_long:
        skipped = pd.concat([skipped, pd.DataFrame(too_long)], ignore_index=True)
    problems = problems[problems["problem_id"].isin(records)].reset_index(drop=True)
    difficulty = c.difficulty_table(problems, records, args.k)
    summary = c.write_outputs(
        args.out, problems, difficulty, skipped, {**settings, "source": source}, thresholds,
        mixture_size=args.mixture_size, sets=sets, val_size=args.val_size,
        max_val_fraction=args.max_val_fraction, seed=args.seed,
    )
    print(f"[curate] splits: {summary['splits']}", file=sys.stderr)
    print(f"[curate] mixtures: { {k: v['size'] for k, v in summary['mixtures'].items()} }", file=sys.stderr)
    print(f"wrote {args.out}/report.md, difficulty.parquet, difficulty.png, splits/, mixtures/, sets/")
    return 0


def _sample(cfg, args, pending_rows, cache, records) -> list[dict] | None:
    """Sample the pending problems into the cache; returns the too-long skips, or None if interrupted."""
    from tqdm import tqdm

    from verl_isocompute.workflow import curate as c
    from verl_isocompute.workflow.rollouts import KSampler, ProblemTooLong, sample

    sampler = KSampler(cfg, args.k, args.concurrency)
    ready, too_long = [], []
    for row in pending_rows.to_dict("records"):
        messages = c.messages_of(row["prompt"])
        try:
            prompt_ids = sampler.prompt_ids(messages)
        except ProblemTooLong as exc:
            too_long.append({"row": -1, "reason": "prompt longer than data.max_prompt_length",
                             "detail": f"{row['problem_id']}: {exc}"})
            continue
        ready.append({
            "problem_id": row["problem_id"], "messages": messages, "prompt_ids": prompt_ids,
            "ground_truth": c.ground_truth_of(row["reward_model"]), "data_source": row.get("data_source"),
            "extra_info": c._plain(row.get("extra_info")),
        })
    if not ready:
        return too_long
    bar = tqdm(total=len(ready), unit="problem", desc=f"sampling k={args.k}", file=sys.stderr, dynamic_ncols=True)

    def done(record: dict) -> None:
        cache.append(record)
        records[record["id"]] = record
        bar.update(1)

    # SIGTERM ends the curation like Ctrl-C: Ray is shut down and what was sampled stays cached.
    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
    started = time.perf_counter()
    try:
        sample(sampler, ready, done, ray_address=args.ray_address)
    except KeyboardInterrupt:
        print(f"\n{PROG}: interrupted; {bar.n} problems sampled this time are cached in {cache.path}: "
              "rerun the same command to resume", file=sys.stderr)
        return None
    finally:
        signal.signal(signal.SIGTERM, previous)
        bar.close()
        cache.close()
    print(f"[curate] sampled {len(ready)} problems x {args.k} in {time.perf_counter() - started:.0f} s", file=sys.stderr)
    return too_long
