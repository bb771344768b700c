"""Coverage on Hard problems, unguided vs guided at the searched prefix (POPE arXiv 2601.18779, PrefixRL
arXiv 2601.18795): the mechanism of guided exploration, measured without training.

On a Hard set a GRPO group where no rollout is correct carries no advantage; guidance helps exactly when a
prefix of the oracle solution turns some of those problems into problems with >= 1 correct rollout. This
benchmark measures that share on SmolLM2-135M-Instruct with the plugin's own tools:

1. multi-term arithmetic with a worked solution per problem (:mod:`verl_isocompute.data.worked`);
2. ``curate``: k unguided samples per problem; the Hard set kept is the problems with 0 of k correct;
3. ``prefix-search`` (POPE's rule, same k, same sampling) on those problems;
4. a fresh draw of k guided samples at each chosen prefix: the search's own coverage is a best-of-rungs
   figure (it climbs until a success), the fresh draw says how often the chosen prefix succeeds again.

Printed side by side, on the same problems and k: the share with >= 1 correct unguided (0 by construction),
guided at the chosen prefix (search, and fresh draw), the chosen-fraction distribution and the rollouts
each stage spent. All sampling goes through verl's rollout servers (our hf backend on CPU).

A rung must never hold the last computation (whose result is the answer): the benchmark refuses settings
whose capped ladder would (with 6 terms and the 0.5 cap a prefix holds at most 3 of the 5 steps).

    python benchmarks/bench_guided_coverage.py [--problems 32] [--terms 6] [--digits 2] [--k 8] \
        [--max-fraction 0.5] [--placement assistant] [--response-length 64] [--work DIR]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import pandas as pd


def fresh_coverage(search_dir: Path, hard_file: Path, args, overrides: list[str]) -> tuple[int, int, int]:
    """k new guided samples at every chosen prefix: (problems with >= 1 correct, problems, rollouts)."""
    from verl_isocompute.data.problem_sets import load_parquet, screen
    from verl_isocompute.guided import search_tables as ps
    from verl_isocompute.workflow.prefix_search import guided_prompts
    from verl_isocompute.workflow.rollouts import KSampler, running
    from verl_isocompute.workflow.sampling import sampling_config

    table = pd.read_parquet(search_dir / ps.PREFIXES_FILE).set_index("problem_id")
    chosen = table[table["status"] == "chosen"]
    if chosen.empty:
        return 0, 0, 0
    frame, _ = screen(load_parquet([hard_file]))
    problems = [p for p in ps.problems_of(frame, "extra_info.solution", args.placement, args.max_fraction)
                if p.problem_id in chosen.index]
    cfg = sampling_config("cpu_demo", overrides)
    sampler = KSampler(cfg, args.k)
    prompts = guided_prompts(problems, sampler, args.placement)
    batch = [{"problem_id": p.problem_id, "request_id": f"fresh-{p.problem_id}", "ground_truth": p.ground_truth,
              "prompt_ids": prompts[(p.problem_id, int(chosen.at[p.problem_id, "rung"]))],
              "data_source": p.data_source, "extra_info": p.extra_info} for p in problems]
    records: list[dict] = []
    with running(sampler) as sample_batch:
        sample_batch(batch, records.append)
    return sum(r["correct"] > 0 for r in records), len(records), sum(r["k"] for r in records)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--problems", type=int, default=32)
    parser.add_argument("--terms", type=int, default=6)
    parser.add_argument("--digits", type=int, default=2)
    parser.add_argument("--k", type=int, default=8)
    parser.add_argument("--max-fraction", type=float, default=0.5)
    parser.add_argument("--placement", default="assistant", choices=["user", "assistant"])
    parser.add_argument("--response-length", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--work", type=Path, default=None, help="keep the outputs here (default: a temporary dir)")
    args = parser.parse_args()

    import torch

    from verl_isocompute.data.worked import worked_arithmetic
    from verl_isocompute.guided import search_tables as ps
    from verl_isocompute.guided import spend
    from verl_isocompute.workflow import prefix_search as search
    from verl_isocompute.guided.prefixes import prefix_ladder
    from verl_isocompute.workflow import curate as c

    work = args.work or Path(tempfile.mkdtemp(prefix="bench_guided_"))
    work.mkdir(parents=True, exist_ok=True)
    data = work / "worked.parquet"
    problems = worked_arithmetic(args.problems, args.terms, args.digits, args.seed)
    longest = max(len(prefix_ladder(i["solution"], args.max_fraction)) for i in problems["extra_info"])
    if longest >= args.terms - 1:
        raise SystemExit(f"--max-fraction {args.max_fraction} lets a prefix hold all {args.terms - 1} steps (the answer); "
                         "lower it or raise --terms")
    problems.to_parquet(data, index=False)
    overrides = ["isocompute.model=smollm2", f"data.max_response_length={args.response_length}",
                 "data.max_prompt_length=256"]
    times = {}

    started = time.perf_counter()
    c.curate(c.CurateConfig(out=work / "curate", data=(str(data),), model="smollm2", k=args.k,
                              max_response_length=args.response_length, sets=("extremely_hard",),
                              overrides=("data.max_prompt_length=256",)), progress=False)
    times["curate"] = time.perf_counter() - started
    difficulty = pd.read_parquet(work / "curate" / "difficulty.parquet")
    hard_file = work / "curate" / "splits" / "extremely_hard.parquet"
    hard = pd.read_parquet(hard_file)
    unguided_rollouts = int(difficulty["k"].sum())

    started = time.perf_counter()
    summary = search.prefix_search(search.PrefixSearchConfig(
        out=work / "search", data=(str(hard_file),), k=args.k, max_fraction=args.max_fraction,
        placement=args.placement, overrides=tuple(overrides)), progress=False)
    times["search"] = time.perf_counter() - started
    table = pd.read_parquet(work / "search" / ps.PREFIXES_FILE)
    chosen = table[table["status"] == "chosen"]

    started = time.perf_counter()
    fresh_hit, _, fresh_rollouts = fresh_coverage(work / "search", hard_file, args, overrides)
    times["fresh"] = time.perf_counter() - started

    n_hard = len(hard)
    unguided_hit = int((difficulty.set_index("problem_id").loc[table["problem_id"], "correct"] > 0).sum()) if n_hard else 0
    search_spend = spend.read(work / "search")[spend.PREFIX_SEARCH]
    print(f"\nguided coverage on SmolLM2-135M-Instruct, CPU capability {torch.backends.cpu.get_cpu_capability()}, "
          f"{torch.get_num_threads()} threads")
    print(f"data: {args.problems} chains of {args.terms} numbers of {args.digits} digits (seed {args.seed}); k = {args.k}, "
          f"temperature 0.6, <= {args.response_length} response tokens; placement {args.placement}, "
          f"max prefix {args.max_fraction:g} of the solution (at most {longest} of {args.terms - 1} steps)")
    print(f"unguided: mean avg@{args.k} {difficulty['avg@k'].mean():.3f}; Hard set (0 of {args.k} correct): "
          f"{n_hard} of {len(difficulty)} problems")
    if not n_hard:
        print("no Hard problem: raise --terms or --digits")
        return
    print(f"\n{'on the ' + str(n_hard) + ' Hard problems':<44}{'>= 1 correct of k':>18}{'share':>8}{'rollouts':>10}")
    print(f"{'unguided (curation)':<44}{unguided_hit:>18}{unguided_hit / n_hard:>8.2f}{n_hard * args.k:>10}")
    print(f"{'guided at the chosen prefix (search)':<44}{len(chosen):>18}{len(chosen) / n_hard:>8.2f}{search_spend.rollouts:>10}")
    print(f"{'guided at the chosen prefix (fresh k)':<44}{fresh_hit:>18}{fresh_hit / n_hard:>8.2f}{fresh_rollouts:>10}")
    if len(chosen):
        f = chosen["prefix_fraction"]
        print(f"\nchosen prefix fraction: min {f.min():.2f}, median {f.median():.2f}, max {f.max():.2f}; rungs "
              f"{summary['chosen_rungs']}; mean guided avg@{args.k} at the chosen rung {chosen['guided_avg_at_k'].mean():.3f}")
    print(f"search: {summary['status']}, {summary['records']} rung samplings in {summary['rounds']} rounds, "
          f"{search_spend.rollouts} rollouts / {search_spend.tokens} tokens (spend.json); unguided curation "
          f"{unguided_rollouts} rollouts")
    print(f"wall time: curate {times['curate']:.0f} s, search {times['search']:.0f} s, fresh draw {times['fresh']:.0f} s; "
          f"outputs in {work}")


if __name__ == "__main__":
    main()
