"""The prefix search: each problem's prefix length chosen with the base model (POPE, PrefixRL).

POPE (arXiv 2601.18779) guides a hard problem with the *shortest* prefix of its oracle solution with which
the base model gets at least one of k samples right, the prefix capped around a quarter of the solution;
PrefixRL (arXiv 2601.18795) sets the difficulty of a guided problem by its prefix length. This module
drives that choice per problem, with the recipe's rollout servers (the same sampling as curation,
:mod:`verl_isocompute.workflow.rollouts`):

1. every problem of verl parquet files gets its prefix ladder from its solution column
   (:func:`verl_isocompute.guided.prefixes.prefix_ladder`: rung r = the first r steps); problems without a
   usable ladder are skipped with the reason;
2. rounds: :func:`verl_isocompute.guided.search.next_rungs` names the next rung of every problem still
   pending (the rules, ``pope`` and ``band``, are there); k guided responses are sampled at each, scored,
   and one record per (problem, rung) is appended to ``rungs.jsonl``; until nothing is pending. Ray and the
   rollout replicas are started once for all rounds (and not at all when the cache already decides).

Guided prompts are exactly what training sees: ``user`` placement -> the chat template over
:func:`verl_isocompute.guided.placement.user_turn`'s messages; ``assistant`` placement -> the unguided
prompt's ids + the prefix's ids (:func:`verl_isocompute.guided.agent_loop.continuation_prompt_ids`, the
function the training agent loop uses). The reward scores the response only, i.e. the continuation, as in
training. A rung whose guided prompt is longer than ``data.max_prompt_length`` ends the ladder there
(longer rungs are longer prompts).

Resume: the records alone say where each problem stands, so a rerun continues from ``rungs.jsonl``.
``prefix_search.json`` keeps what makes records comparable (model, sampling, k, reward, placement,
solution key): a rerun with any of these changed is an error naming ``--restart``. The rule, the band and
``max_fraction`` may change between runs: rung r is the same prefix under any cap, so the records serve
any rule (e.g. a POPE search continued as a band search samples only the rungs it still needs).

Outputs (``out``): ``prefixes.parquet`` (one row per problem: status chosen / exhausted / skipped, the
reason, the chosen rung, its text and fraction, the guided avg@k there, the ladder length), ``report.md``,
``prefix_search.png`` and ``spend.json`` (stage ``prefix_search``, recomputed from every record, so a
resumed search never counts a sample twice; :mod:`verl_isocompute.guided.spend`). ``isocompute guide
--prefixes OUT`` / ``isocompute.guided.prefixes`` then guide each problem at its chosen prefix.

Pure parts (tables, spend, report, plot) need no verl; sampling imports verl only when there is work.
"""

from __future__ import annotations

import json
import math
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from verl_isocompute import atomic
from verl_isocompute.guided import spend
from verl_isocompute.guided.placement import (
    ASSISTANT,
    NO_USER_TURN,
    PLACEMENTS,
    USER,
    user_turn,
)
from verl_isocompute.guided.prefixes import (
    DEFAULT_MAX_FRACTION,
    Prefix,
    lookup,
    prefix_ladder,
    skip_reason,
)
from verl_isocompute.guided.search import (
    CHOSEN,
    EXHAUSTED,
    PENDING,
    POPE,
    RULES,
    Decision,
    decisions,
    next_rungs,
)
from verl_isocompute.workflow.curate import (
    DEFAULT_K,
    CurateError,
    SampleCache,
    _plain,
    _write_parquet_atomic,
    ground_truth_of,
    load_parquet,
    messages_of,
    screen,
)

RECORDS_FILE = "rungs.jsonl"
SETTINGS_FILE = "prefix_search.json"
PREFIXES_FILE = "prefixes.parquet"
PLOT_FILE = "prefix_search.png"
SKIPPED = "skipped"
PROMPT_TOO_LONG = "prompt_too_long"  # even rung 1's guided prompt is longer than data.max_prompt_length
NO_SUCCESS = "no_success"  # pope: no rung had a correct sample
NOT_IN_BAND = "no_rung_in_band"  # band: every rung's guided avg@k stayed below the band
DEFAULT_BAND = (0.25, 0.75)
COLUMNS = ["problem_id", "status", "reason", "rung", "prefix", "prefix_fraction", "guided_avg_at_k", "k",
           "n_rungs", "rungs_sampled", "placement"]


class PrefixSearchError(CurateError):
    """Input or settings the prefix search cannot use; the message names the fix."""


# --- pure parts: problems, records -> table, spend ---------------------------------------------------


@dataclass
class Problem:
    """One screened problem: its id, what the sampler needs, and its ladder (or why it has none)."""

    problem_id: str
    messages: list[dict[str, str]]
    ground_truth: str
    data_source: Any = None
    extra_info: Any = None
    ladder: tuple[Prefix, ...] = ()
    reason: str | None = None  # why it is skipped (None: searched)


def problems_of(frame: pd.DataFrame, solution_key: str, placement: str, max_fraction: float) -> list[Problem]:
    """Screened rows (with ``problem_id``) as :class:`Problem`, each with its ladder or a skip reason."""
    out = []
    for row in frame.to_dict("records"):
        row = _plain(row)
        messages = messages_of(row["prompt"])
        solution = lookup(row, solution_key)
        reason = skip_reason(solution, max_fraction)
        if reason is None and placement == USER and not any(m["role"] == "user" for m in messages):
            reason = NO_USER_TURN
        ladder = () if reason else tuple(prefix_ladder(solution, max_fraction))
        out.append(Problem(row["problem_id"], messages, ground_truth_of(row["reward_model"]), row.get("data_source"),
                           row.get("extra_info"), ladder, reason))
    return out


def latest(records: Iterable[Mapping]) -> dict[tuple[str, int], Mapping]:
    """The record of each (problem, rung); a later record replaces an earlier one."""
    return {(r["id"], int(r["rung"])): r for r in records}


def spend_of(records: Iterable[Mapping]) -> spend.Spend:
    """Rollouts (sum of k) and generated tokens over every record: all the sampling the search did."""
    records = list(records)
    return spend.Spend(int(sum(r["k"] for r in records)), int(sum(sum(r.get("response_tokens") or ()) for r in records)))


def prefixes_table(problems: list[Problem], records: Iterable[Mapping], rule: str = POPE,
                   band: tuple[float, float] = DEFAULT_BAND, placement: str = USER) -> pd.DataFrame:
    """One row per problem: status (chosen / exhausted / skipped, or pending for an unfinished search),
    reason, chosen rung with its prefix text and fraction, guided avg@k at that rung, k, ladder length."""
    by_rung = latest(records)
    searched = {p.problem_id: len(p.ladder) for p in problems if p.reason is None}
    decided: dict[str, Decision] = decisions(searched, by_rung.values(), rule, band)
    rows = []
    for p in problems:
        sampled = sum(1 for r in range(1, len(p.ladder) + 1) if (p.problem_id, r) in by_rung)
        row = {"problem_id": p.problem_id, "status": SKIPPED, "reason": p.reason or "", "rung": 0, "prefix": "",
               "prefix_fraction": 0.0, "guided_avg_at_k": math.nan, "k": 0, "n_rungs": len(p.ladder),
               "rungs_sampled": sampled, "placement": placement}
        if p.reason is None:
            d = decided[p.problem_id]
            row["status"] = d.status
            if d.status == EXHAUSTED:
                row["reason"] = NO_SUCCESS if rule == POPE else NOT_IN_BAND
            elif d.status == CHOSEN:
                record, prefix = by_rung[(p.problem_id, d.rung)], p.ladder[d.rung - 1]
                row.update(rung=d.rung, prefix=prefix.text, prefix_fraction=prefix.fraction,
                           guided_avg_at_k=record["correct"] / record["k"], k=int(record["k"]))
        rows.append(row)
    return pd.DataFrame(rows, columns=COLUMNS)


def _chosen_table(path: str | Path) -> tuple[Path, pd.DataFrame]:
    """A search's prefixes.parquet (``path``: the search's output dir or the file), checked to be one."""
    path = Path(path).expanduser()
    file = path / PREFIXES_FILE if path.is_dir() else path
    if not file.is_file():
        raise ValueError(f"prefixes={path}: no {PREFIXES_FILE} there; run `isocompute prefix-search DATA -o DIR` "
                         "and pass DIR")
    table = pd.read_parquet(file)
    missing = sorted(set(COLUMNS) - set(table.columns))
    if missing:
        raise ValueError(f"prefixes={file}: not a prefix-search table (no {missing}); pass the output of isocompute prefix-search")
    return file, table


def searched_placement(path: str | Path) -> str | None:
    """The placement a search's prompts were made with (None for a table without a searched problem)."""
    used = set(_chosen_table(path)[1]["placement"])
    return min(used) if used else None


def read_chosen(path: str | Path, placement: str) -> dict[str, Prefix | str]:
    """A search's choice per problem id: the chosen :class:`Prefix`, or why there is none (the skip reason,
    or ``no_prefix_found`` when the search found no rung). ``path`` is the search's output dir or its
    prefixes.parquet; a search made with another placement is an error (its prompts were other prompts)."""
    from verl_isocompute.guided.placement import NO_PREFIX_FOUND

    file, table = _chosen_table(path)
    used = set(table["placement"])
    if used and used != {placement}:
        raise ValueError(f"prefixes={file}: prefixes were searched with placement {min(used)}, not {placement}; "
                         f"use placement {min(used)} or search again with --placement {placement}")
    out: dict[str, Prefix | str] = {}
    for row in table.itertuples(index=False):
        if row.status == CHOSEN:
            out[row.problem_id] = Prefix(row.prefix, int(row.rung), float(row.prefix_fraction))
        else:
            out[row.problem_id] = row.reason if row.status == SKIPPED else NO_PREFIX_FOUND
    return out


def summary_of(table: pd.DataFrame, records: list[Mapping], screened: pd.DataFrame, rounds: int) -> dict[str, Any]:
    chosen = table[table["status"] == CHOSEN]
    fractions = chosen["prefix_fraction"]
    total = spend_of(records)
    return {
        "problems": int(len(table) + len(screened)),
        "status": {s: int(n) for s, n in table["status"].value_counts().items()},
        "reasons": {f"{s}: {r}": int(n) for (s, r), n in table[table["reason"] != ""].groupby(["status", "reason"]).size().items()},
        "screened_out": {str(r): int(n) for r, n in screened["reason"].value_counts().items()} if len(screened) else {},
        "chosen_fraction": ({q: float(fractions.quantile(v)) for q, v in (("min", 0), ("median", 0.5), ("max", 1))}
                            | {"mean": float(fractions.mean())}) if len(chosen) else None,
        "chosen_rungs": {int(r): int(n) for r, n in chosen["rung"].value_counts().sort_index().items()},
        "mean_guided_avg_at_k": float(chosen["guided_avg_at_k"].mean()) if len(chosen) else None,
        "rounds": rounds, "rollouts": total.rollouts, "tokens": total.tokens, "records": len(records),
    }


def render_report(summary: Mapping[str, Any], settings: Mapping[str, Any]) -> str:
    rule = settings["rule"]
    what = ("POPE (arXiv 2601.18779): the shortest prefix with >= 1 correct of k" if rule == POPE else
            f"band (PrefixRL, arXiv 2601.18795): guided avg@k in [{settings['band'][0]:g}, {settings['band'][1]:g}]")
    lines = [
        "# Prefix search", "",
        f"Base model `{settings['model']}`, k = {settings['k']} samples per rung at temperature {settings['temperature']} "
        f"(top_p {settings['top_p']}, at most {settings['max_response_length']} response tokens), rollout "
        f"`{settings['rollout']}`, reward `{settings['reward']}`. Rule {what}; prefixes cut from "
        f"`{settings['solution_key']}` at line / sentence ends, at most {settings['max_fraction']:g} of the solution; "
        f"placement `{settings['placement']}`.", "",
        f"Problems: {summary['problems']}; " + ", ".join(f"{s} {n}" for s, n in sorted(summary["status"].items()))
        + (f"; screened out {summary['screened_out']}" if summary["screened_out"] else "") + ".", "",
        f"Spent: {summary['rollouts']} rollouts, {summary['tokens']} response tokens in {summary['records']} rung "
        f"samplings ({summary['rounds']} rounds this run); spend.json, stage `prefix_search`.", "",
        "## Chosen prefixes", "",
    ]
    if summary["chosen_fraction"] is None:
        lines.append("None chosen.")
    else:
        f = summary["chosen_fraction"]
        lines += [
            f"Prefix fraction of the solution: min {f['min']:.3f}, median {f['median']:.3f}, mean {f['mean']:.3f}, "
            f"max {f['max']:.3f}. Mean guided avg@{settings['k']} at the chosen rung: {summary['mean_guided_avg_at_k']:.3f}.", "",
            "| rung | problems |", "|---|---|",
            *[f"| {r} | {n} |" for r, n in summary["chosen_rungs"].items()],
        ]
    lines += ["", "## Without a prefix", ""]
    if summary["reasons"]:
        lines += ["| status: reason | problems |", "|---|---|", *[f"| {r} | {n} |" for r, n in summary["reasons"].items()]]
    else:
        lines.append("None.")
    lines += ["", f"Files: {PREFIXES_FILE}, {PLOT_FILE}, spend.json, {RECORDS_FILE} (the per-rung cache), "
              f"{SETTINGS_FILE} (its settings). Guide with them: `isocompute guide TRAIN -o OUT --prefixes <this dir> "
              f"--placement {settings['placement']}`.", ""]
    return "\n".join(lines)


def plot_prefixes(table: pd.DataFrame, k: int, path: Path, max_fraction: float = DEFAULT_MAX_FRACTION) -> Path:
    """Left: how many problems got each prefix fraction; right: guided avg@k at the chosen rung vs fraction."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    chosen = table[table["status"] == CHOSEN]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    bins = np.linspace(0, max(max_fraction, float(chosen["prefix_fraction"].max()) if len(chosen) else 0), 21)
    left.hist(chosen["prefix_fraction"], bins=bins, color="#4c72b0", zorder=2)
    left.set_xlabel("chosen prefix (share of the solution's characters)")
    left.set_ylabel("problems")
    counts = table["status"].value_counts()
    left.set_title(", ".join(f"{s} {counts.get(s, 0)}" for s in (CHOSEN, EXHAUSTED, SKIPPED)))
    right.scatter(chosen["prefix_fraction"], chosen["guided_avg_at_k"], s=14, alpha=0.6, color="#c44e52", zorder=2)
    right.set_xlabel("chosen prefix fraction")
    right.set_ylabel(f"guided avg@{k} at the chosen rung")
    right.set_ylim(-0.05, 1.05)
    right.set_xlim(bins[0], bins[-1] if bins[-1] > 0 else 1)
    right.set_title("guided difficulty")
    for ax in (left, right):
        ax.grid(alpha=0.3, zorder=0)
    fig.tight_layout()
    with atomic.replacing(path) as tmp:
        fig.savefig(tmp, dpi=100, format="png")
    plt.close(fig)
    return path


def write_outputs(out: Path, table: pd.DataFrame, records: list[Mapping], screened: pd.DataFrame,
                  settings: Mapping[str, Any], rounds: int) -> dict[str, Any]:
    """prefixes.parquet, report.md, prefix_search.png, spend.json (set from every record) and summary.json."""
    out = Path(out)
    _write_parquet_atomic(table, out / PREFIXES_FILE)
    total = spend_of(records)
    spend.write(out, spend.PREFIX_SEARCH, total)
    summary = summary_of(table, records, screened, rounds)
    plot_prefixes(table, int(settings["k"]), out / PLOT_FILE, float(settings["max_fraction"]))
    atomic.write_text(out / "report.md", render_report(summary, settings))
    atomic.write_text(out / "summary.json", json.dumps(summary, indent=2) + "\n")
    return summary


# --- the whole search -------------------------------------------------------------------------------


@dataclass(frozen=True)
class PrefixSearchSettings:
    """Every choice of a prefix search; ``isocompute prefix-search --help`` describes each."""

    out: Path
    data: tuple[str, ...] = ()
    recipe: str = "cpu_demo"
    rule: str = POPE
    k: int = DEFAULT_K
    band: tuple[float, float] = DEFAULT_BAND
    max_fraction: float = DEFAULT_MAX_FRACTION
    placement: str = USER
    solution_key: str = "extra_info.solution"
    concurrency: int = 64
    ray_address: str | None = None
    check_answers: bool = True
    restart: bool = False
    overrides: tuple[str, ...] = ()

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
        if self.placement not in PLACEMENTS:
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


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _round_line(n: int, decided: Mapping[str, Decision], skipped: int) -> str:
    counts = Counter(d.status for d in decided.values())
    return (f"[prefix-search] round {n}: pending {counts[PENDING]}, chosen {counts[CHOSEN]}, "
            f"exhausted {counts[EXHAUSTED]}, skipped {skipped}")


def prefix_search(settings: PrefixSearchSettings, log: Callable[[str], None] = _stderr, progress: bool = True) -> dict[str, Any]:
    """Search every problem's prefix and write the outputs into ``settings.out``; returns the summary.

    Raises :class:`PrefixSearchError` (or the recipe's / model's own error) on bad input, and
    :class:`~verl_isocompute.workflow.launch.Interrupted` after SIGTERM / SIGINT once Ray is shut down (the
    records sampled so far stay in rungs.jsonl: run again to resume)."""
    settings.check()
    out = Path(settings.out)
    frame, screened = screen(load_parquet(settings.data), check_answers=settings.check_answers)
    problems = problems_of(frame, settings.solution_key, settings.placement, settings.max_fraction)
    if not any(p.reason is None for p in problems):
        reasons = Counter(p.reason for p in problems) + Counter(screened["reason"].tolist())
        raise PrefixSearchError(f"no problem has a usable prefix at --solution-key {settings.solution_key} "
                                f"({dict(reasons)}); point --solution-key at the oracle solution column")

    from verl_isocompute.workflow.curate import sampling_config, sampling_identity
    from verl_isocompute.workflow.rollouts import KSampler

    cfg = sampling_config(settings.recipe, list(settings.overrides))
    identity = {**sampling_identity(cfg, settings.k), "placement": settings.placement, "solution_key": settings.solution_key}
    cache = SampleCache(out, identity, restart=settings.restart, samples_file=RECORDS_FILE, settings_file=SETTINGS_FILE)
    sampler = KSampler(cfg, settings.k, settings.concurrency)
    prompts = guided_prompts(problems, sampler, settings.placement)
    searched = {p.problem_id: len(p.ladder) for p in problems if p.reason is None}
    skipped = len(problems) - len(searched)
    records = cache.records()
    log(f"[prefix-search] {len(problems) + len(screened)} problems: {len(searched)} to search ({settings.rule}, k = {settings.k}, "
        f"placement {settings.placement}), {skipped + len(screened)} skipped; {len(records)} rung samplings cached")
    rounds = 0
    try:
        rounds = _rounds(settings, sampler, problems, prompts, cache, records, log, progress)
    finally:
        cache.close()
    table = prefixes_table(problems, records, settings.rule, settings.band, settings.placement)
    report_settings = {**identity, "rule": settings.rule, "band": list(settings.band), "max_fraction": settings.max_fraction}
    return write_outputs(out, table, records, screened, report_settings, rounds)


def guided_prompts(problems: list[Problem], sampler, placement: str) -> dict[tuple[str, int], list[int]]:
    """The guided prompt ids of every rung, as training builds them; a ladder is cut at its first rung
    whose prompt is too long (problems with none left are skipped as ``prompt_too_long``)."""
    from verl_isocompute.guided.agent_loop import continuation_prompt_ids
    from verl_isocompute.workflow.rollouts import ProblemTooLong

    prompts: dict[tuple[str, int], list[int]] = {}
    for p in problems:
        if p.reason is not None:
            continue
        try:
            base = sampler.prompt_ids(p.messages) if placement == ASSISTANT else None
        except ProblemTooLong:
            p.ladder, p.reason = (), PROMPT_TOO_LONG
            continue
        fits = []
        for rung, prefix in enumerate(p.ladder, start=1):
            if placement == ASSISTANT:
                ids = continuation_prompt_ids(base, prefix.text, sampler.tokenizer)
                if len(ids) > sampler.prompt_length:
                    break
            else:
                try:
                    ids = sampler.prompt_ids(user_turn(p.messages, prefix.text))
                except ProblemTooLong:
                    break
            prompts[(p.problem_id, rung)] = ids
            fits.append(prefix)
        p.ladder = tuple(fits)
        if not fits:
            p.reason = PROMPT_TOO_LONG
    return prompts


def _rounds(settings: PrefixSearchSettings, sampler, problems: list[Problem], prompts: Mapping[tuple[str, int], list[int]],
            cache: SampleCache, records: list, log: Callable[[str], None], progress: bool) -> int:
    """Sample rounds until no problem is pending; Ray and the replicas start only if something is pending."""
    from tqdm import tqdm

    from verl_isocompute.workflow import launch
    from verl_isocompute.workflow.rollouts import running

    rule, band = settings.rule, settings.band
    searched = {p.problem_id: len(p.ladder) for p in problems if p.reason is None}
    skipped = len(problems) - len(searched)
    by_id = {p.problem_id: p for p in problems}
    pending = next_rungs(searched, records, rule, band)
    if not pending:
        log(_round_line(0, decisions(searched, records, rule, band), skipped) + " (all decided by the cache)")
        return 0
    rounds = 0
    try:
        with launch.stopping_ray(), running(sampler, settings.ray_address) as sample_batch:
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

                def done(record: dict, bar=bar) -> None:
                    cache.append(record)
                    records.append(record)
                    bar.update(1)

                started = time.perf_counter()
                try:
                    sample_batch(batch, done)
                finally:
                    bar.close()
                decided = decisions(searched, records, rule, band)
                log(_round_line(rounds, decided, skipped) + f" ({len(batch)} rungs x {settings.k} in {time.perf_counter() - started:.0f} s)")
                pending = {pid: d.rung for pid, d in decided.items() if d.status == PENDING}
    except launch.Interrupted:
        launch.shutdown_ray()
        raise
    return rounds

