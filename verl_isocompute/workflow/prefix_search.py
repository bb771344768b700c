"""The prefix search as a driver: each problem's prefix length chosen with the base model (POPE, PrefixRL).

POPE (arXiv 2601.18779) guides a hard problem with the *shortest* prefix of its oracle solution with which
the base model gets at least one of k samples right, the prefix capped around a quarter of the solution;
PrefixRL (arXiv 2601.18795) sets the difficulty of a guided problem by its prefix length, cut from a
successful trace of the base model. This driver runs that choice with the recipe's rollout servers (the same
sampling as curation, :mod:`verl_isocompute.workflow.rollouts`):

1. every problem of verl parquet files gets its prefix ladder (rung r = the first r steps,
   :func:`verl_isocompute.guided.prefixes.prefix_ladder`) from its solution column, or, with ``traces``, from
   the trace curation kept for it (``isocompute curate --keep-correct``; the shortest usable one, as
   :func:`verl_isocompute.guided.traces.choose_trace` picks for training); problems without a usable ladder
   are skipped with the reason;
2. every rung's guided prompt is built and measured as training will: ``user`` placement -> the chat template
   over :func:`verl_isocompute.guided.placement.user_turn`'s messages; ``assistant`` -> the unguided prompt's ids
   + the prefix's ids (:func:`verl_isocompute.training.guided_agent_loop.continuation_prompt_ids`, the training agent
   loop's function). The recipe is composed as a guided run of it (``isocompute.guided.enable=true``), so
   ``data.max_prompt_length`` is the one a guided run uses (the CPU overlay's is longer then). A rung fits
   only if verl's ``filter_overlong_prompts`` would keep its row
   (:mod:`verl_isocompute.guided.lengths`: for the assistant placement verl measures more than is sent), so
   a chosen prefix is never dropped by the training run; the ladder ends at the first rung that does not fit,
   and a search in which no rung of any problem fits stops with one line naming ``data.max_prompt_length``;
3. rounds: :func:`verl_isocompute.guided.search_rules.next_rungs` names the next rung of every problem still pending;
   k guided responses are sampled at each, scored (the reward sees the continuation only, as in training),
   and one outcome per (problem, rung) is appended to ``rungs.jsonl``; until nothing is pending. Ray and the
   rollout replicas are started once for all rounds, and not at all when the cache already decides.

Resume: an outcome counts for its rung only while its prompt ids are the rung's prompt ids now (a changed
solution, trace choice or tokenizer makes it stale; it still counts in the spend). ``prefix_search.json``
keeps what makes outcomes comparable (model, sampling, k, reward, placement, source): a rerun with any of
these changed is an error naming ``--restart``. The rule, band and ``max_fraction`` may change between runs.

The outputs and every pure part (tables, spend, report, plot) are :mod:`verl_isocompute.guided.search_tables`.
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from verl_isocompute import _compat
from verl_isocompute.data.difficulty import DEFAULT_K
from verl_isocompute.data.problem_sets import load_parquet, screen
from verl_isocompute.errors import CurateError
from verl_isocompute.guided.placement import ASSISTANT, PLACEMENTS, USER, assistant_turn, user_turn
from verl_isocompute.guided.search_tables import (
    DEFAULT_BAND,
    PROMPT_TOO_LONG,
    RUNGS_FILE,
    SETTINGS_FILE,
    Problem,
    prefixes_table,
    problems_of,
    sampled_in,
    write_outputs,
)
from verl_isocompute.guided.prefixes import DEFAULT_MAX_FRACTION
from verl_isocompute.guided.search_rules import CHOSEN, EXHAUSTED, PENDING, POPE, RULES, Decision, decisions, next_rungs
from verl_isocompute.settings import setting
from verl_isocompute.workflow.sample_cache import SampleCache

GUIDED_ENABLE = "isocompute.guided.enable"


class PrefixSearchError(CurateError):
    """Input or settings the prefix search cannot use; the message names the fix."""


# The settings classes' one suffix (0.2): the old name works for one release.
__getattr__ = _compat.moved_names(__name__, {}, renamed={"PrefixSearchSettings": "PrefixSearchConfig"})


@dataclass(frozen=True)
class PrefixSearchConfig:
    """Every choice of a prefix search, each with its help text (``isocompute prefix-search --help`` is built
    from them)."""

    out: Path = setting(help="output directory (also the rung cache)")
    data: tuple[str, ...] = setting(
        (), "verl-format parquet files with an oracle solution column, then any key=value overrides of the recipe "
        "(verl-style, e.g. isocompute.model=tiny or the reward function)",
    )
    recipe: str = setting("cpu_demo", "recipe giving model, rollout, sampling and reward")
    model: str | None = setting(None, "tiny | smollm2 | a local checkpoint path, as curate --model",
                                default_help="default: the recipe's")
    rule: str = setting(POPE, "pope: shortest prefix with >= 1 correct of k; band: guided avg@k in the band")
    k: int = setting(DEFAULT_K, "samples per rung (curation's k)")
    band: tuple[float, float] = setting(DEFAULT_BAND, "target guided avg@k of the band rule")
    max_fraction: float = setting(DEFAULT_MAX_FRACTION, "longest prefix, as a share of the solution's characters (POPE's quarter)")
    placement: str | None = setting(
        None, "user: POPE's user-turn prefix; assistant: PrefixRL's assistant-turn prefix",
        default_help="default user; assistant with traces",
    )
    solution_key: str = setting("extra_info.solution", "column (or dotted path into one) with the oracle solution")
    traces: str | None = setting(
        None, "cut the ladders from the base model's correct responses that `isocompute curate --keep-correct --out "
        "CURATE_OUT` kept (PrefixRL; the shortest usable trace per problem) instead of the solution key",
    )
    concurrency: int = setting(64, "rungs in flight at once")
    ray_address: str | None = setting(None, "join this running Ray cluster instead of starting a private instance")
    check_answers: bool = setting(True, "skip problems whose reference answer math-verify cannot parse (off for non-math rewards)")
    restart: bool = setting(False, "discard the cached rung samples in the output directory")
    overrides: tuple[str, ...] = setting((), "verl-style key=value overrides of the recipe")

    @property
    def chosen_placement(self) -> str:
        return self.placement or (ASSISTANT if self.traces else USER)

    @property
    def source(self) -> str:
        """Where the ladders come from, as the records' identity keeps it."""
        return f"traces:{Path(self.traces).expanduser().absolute()}" if self.traces else self.solution_key

    def check(self) -> None:
        """Raise :class:`PrefixSearchError` naming the flag and the fix; before any model or Ray start-up."""
        if not self.data:
            raise PrefixSearchError("give the problems: isocompute prefix-search DATA.parquet ... -o DIR")
        missing = [str(d) for d in self.data if not Path(d).is_file()]
        if missing:
            raise PrefixSearchError(f"{', '.join(missing)} not found; pass parquet files in verl's format")
        out = Path(self.out)
        if out.exists() and not out.is_dir():
            raise PrefixSearchError(f"-o {out} is a file; give a directory (it is created if needed)")
        if self.rule not in RULES:
            raise PrefixSearchError(f"--rule {self.rule}: use {' or '.join(RULES)}")
        if self.placement is not None and self.placement not in PLACEMENTS:
            raise PrefixSearchError(f"--placement {self.placement}: use {' or '.join(PLACEMENTS)}")
        for flag, value in (("--k", self.k), ("--concurrency", self.concurrency)):
            if value < 1:
                raise PrefixSearchError(f"{flag} must be at least 1, got {value}")
        if not 0 < self.max_fraction <= 1:
            raise PrefixSearchError(f"--max-fraction must be in (0, 1] (POPE: about {DEFAULT_MAX_FRACTION}), got {self.max_fraction}")
        low, high = self.band
        if not 0 <= low <= high <= 1:
            raise PrefixSearchError(f"--band {low} {high}: need 0 <= LOW <= HIGH <= 1 (guided avg@k)")
        if not self.solution_key:
            raise PrefixSearchError("--solution-key is empty; name the oracle solution column, e.g. extra_info.solution")
        if self.traces:
            from verl_isocompute.guided.traces import traces_path

            if not traces_path(self.traces).is_file():
                raise PrefixSearchError(f"--traces {self.traces}: no {traces_path(self.traces).name} there; run "
                                        f"`isocompute curate --keep-correct --out {self.traces}` first")


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _round_line(n: int, decided: Mapping[str, Decision], skipped: int) -> str:
    counts = Counter(d.status for d in decided.values())
    return (f"[prefix-search] round {n}: pending {counts[PENDING]}, chosen {counts[CHOSEN]}, "
            f"exhausted {counts[EXHAUSTED]}, skipped {skipped}")


def _unusable(problems: list[Problem], screened, settings: PrefixSearchConfig) -> str:
    reasons = dict(Counter(p.reason for p in problems) + Counter(screened["reason"].tolist()))
    if settings.traces:
        return (f"no problem has a usable trace in --traces {settings.traces} ({reasons}); curate these problems "
                "there with `isocompute curate --keep-correct [--pass-k K]`")
    return (f"no problem has a usable prefix at --solution-key {settings.solution_key} ({reasons}); point "
            "--solution-key at the oracle solution column")


def prefix_search(settings: PrefixSearchConfig, log: Callable[[str], None] = _stderr, progress: bool = True) -> dict[str, Any]:
    """Search every problem's prefix and write the outputs into ``settings.out``; returns the summary.

    Raises :class:`PrefixSearchError` (or the recipe's / model's own error) on bad input, and
    :class:`~verl_isocompute.workflow.launch.Interrupted` after SIGTERM / SIGINT once Ray is shut down (the
    outcomes sampled so far stay in rungs.jsonl: run again to resume)."""
    settings.check()
    out, placement = Path(settings.out), settings.chosen_placement
    frame, screened = screen(load_parquet(settings.data), check_answers=settings.check_answers)
    solutions = None
    if settings.traces:
        from verl_isocompute.training.guided_mixture import trace_solutions
        from verl_isocompute.guided.traces import TracesError

        try:
            solutions = trace_solutions(frame, settings.traces, settings.max_fraction)
        except TracesError as exc:
            raise PrefixSearchError(str(exc)) from None
    problems = problems_of(frame, settings.solution_key, placement, settings.max_fraction, solutions)
    if not any(p.reason is None for p in problems):
        raise PrefixSearchError(_unusable(problems, screened, settings))

    from verl_isocompute.workflow.sampling import model_overrides, sampling_config, sampling_dtype, sampling_identity
    from verl_isocompute.workflow.rollouts import KSampler

    # composed as a guided run of the recipe: its data.max_prompt_length is the one the guided rows must fit
    cfg = sampling_config(settings.recipe, [f"{GUIDED_ENABLE}=true", *model_overrides(settings.model), *settings.overrides])
    identity = {**sampling_identity(cfg, settings.k), "placement": placement, "solution_key": settings.source}
    sampler = KSampler(cfg, settings.k, settings.concurrency)
    searchable = sum(p.reason is None for p in problems)
    prompts = guided_prompts(problems, sampler, placement)
    if not any(p.reason is None for p in problems):
        raise PrefixSearchError(too_long_line(problems, sampler, searchable))
    cache = SampleCache(out, identity, restart=settings.restart, samples_file=RUNGS_FILE, settings_file=SETTINGS_FILE)
    searched = {p.problem_id: len(p.ladder) for p in problems if p.reason is None}
    skipped = len(problems) - len(searched)
    outcomes = cache.outcomes()
    log(f"[prefix-search] {len(problems) + len(screened)} problems: {len(searched)} to search ({settings.rule}, k = {settings.k}, "
        f"placement {placement}, sampling{sampled_in(sampling_dtype(cfg))}), {skipped + len(screened)} skipped"
        + (f" ({dict(Counter(p.reason for p in problems if p.reason))})" if skipped else "")
        + f"; {len(outcomes)} rung samplings cached")
    rounds = 0
    try:
        rounds = _rounds(settings, sampler, problems, prompts, cache, outcomes, log, progress)
    finally:
        cache.close()
    table = prefixes_table(problems, current(outcomes, prompts), settings.rule, settings.band, placement)
    report_settings = {**identity, "rule": settings.rule, "band": list(settings.band), "max_fraction": settings.max_fraction,
                       "dtype": sampling_dtype(cfg)}
    return write_outputs(out, table, outcomes, screened, report_settings, rounds)


def current(outcomes: list[Mapping], prompts: Mapping[tuple[str, int], list[int]]) -> list[Mapping]:
    """The outcomes that still describe their rung: sampled with the prompt ids the rung has now."""
    return [r for r in outcomes if prompts.get((r["id"], int(r["rung"]))) == r.get("prompt_ids")]


def too_long_line(problems: list[Problem], sampler, searchable: int) -> str:
    """The one line of a search in which no rung fits: the key, the count and the length that would."""
    shortest = min((p.too_long_by for p in problems if p.reason == PROMPT_TOO_LONG and p.too_long_by), default=None)
    need = f"; the shortest guided prompt has {shortest} tokens, set data.max_prompt_length={shortest} or more" if shortest else ""
    return (f"data.max_prompt_length={sampler.prompt_length} is shorter than every guided prompt of the {searchable} "
            f"problems with a prefix (as verl's filter_overlong_prompts measures them), so training would drop every "
            f"guided row{need}")


def guided_prompts(problems: list[Problem], sampler, placement: str) -> dict[tuple[str, int], list[int]]:
    """The guided prompt ids of every rung, as training sends them; a ladder ends at its first rung whose row
    verl's filter would drop (a problem with none left is skipped as ``prompt_too_long``, with the length of
    its shortest guided prompt in ``too_long_by``)."""
    from verl_isocompute.training.guided_agent_loop import continuation_prompt_ids
    from verl_isocompute.guided.lengths import filter_length, render

    limit = sampler.prompt_length
    prompts: dict[tuple[str, int], list[int]] = {}
    for p in problems:
        if p.reason is not None:
            continue
        base = render(sampler.tokenizer, p.messages, sampler.chat_kwargs)
        fits = []
        for rung, prefix in enumerate(p.ladder, start=1):
            if placement == ASSISTANT:
                ids = continuation_prompt_ids(base, prefix.text, sampler.tokenizer)
                measured = filter_length(sampler.tokenizer, assistant_turn(p.messages, prefix.text), sampler.chat_kwargs)
            else:
                ids = render(sampler.tokenizer, user_turn(p.messages, prefix.text), sampler.chat_kwargs)
                measured = len(ids)
            if max(measured, len(ids)) > limit:
                if rung == 1:
                    p.too_long_by = max(measured, len(ids))
                break
            prompts[(p.problem_id, rung)] = ids
            fits.append(prefix)
        p.ladder = tuple(fits)
        if not fits:
            p.reason = PROMPT_TOO_LONG
    return prompts


def _rounds(settings: PrefixSearchConfig, sampler, problems: list[Problem], prompts: Mapping[tuple[str, int], list[int]],
            cache: SampleCache, outcomes: list, log: Callable[[str], None], progress: bool) -> int:
    """Sample rounds until no problem is pending; Ray and the replicas start only if something is pending."""
    from tqdm import tqdm

    from verl_isocompute.workflow import launch
    from verl_isocompute.workflow.rollouts import running

    rule, band = settings.rule, settings.band
    searched = {p.problem_id: len(p.ladder) for p in problems if p.reason is None}
    skipped = len(problems) - len(searched)
    by_id = {p.problem_id: p for p in problems}
    valid = current(outcomes, prompts)
    pending = next_rungs(searched, valid, rule, band)
    if not pending:
        log(_round_line(0, decisions(searched, valid, rule, band), skipped) + " (all decided by the cached rung samplings)")
        return 0
    rounds = 0
    with launch.shutting_down_ray_on_error(), running(sampler, settings.ray_address) as sample_batch:
        while pending:
            rounds += 1
            batch = []
            for pid, rung in pending.items():
                p = by_id[pid]
                batch.append({
                    "problem_id": pid, "request_id": f"prefix-{pid}-r{rung}", "prompt_ids": prompts[(pid, rung)],
                    "ground_truth": p.ground_truth, "data_source": p.data_source, "extra_info": p.extra_info,
                    "carry": {"rung": rung, "fraction": p.ladder[rung - 1].fraction, "prompt_ids": prompts[(pid, rung)]},
                })
            bar = tqdm(total=len(batch), unit="rung", desc=f"round {rounds}: k={settings.k}", file=sys.stderr,
                       dynamic_ncols=True, disable=not progress)

            def done(outcome: dict, bar=bar) -> None:
                cache.append(outcome)
                outcomes.append(outcome)
                valid.append(outcome)
                bar.update(1)

            started = time.perf_counter()
            try:
                sample_batch(batch, done)
            finally:
                bar.close()
            decided = decisions(searched, valid, rule, band)
            log(_round_line(rounds, decided, skipped) + f" ({len(batch)} rungs x {settings.k} in {time.perf_counter() - started:.0f} s)")
            pending = {pid: d.rung for pid, d in decided.items() if d.status == PENDING}
    return rounds
