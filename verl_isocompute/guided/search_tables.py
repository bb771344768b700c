"""The prefix search's tables, spend, report and plot: each problem's prefix chosen with the base model (POPE, PrefixRL).

POPE (arXiv 2601.18779) guides a hard problem with the *shortest* prefix of its oracle solution with which
the base model gets at least one of k samples right, the prefix capped around a quarter of the solution;
PrefixRL (arXiv 2601.18795) sets the difficulty of a guided problem by its prefix length. The search itself
(sampling rung after rung through the recipe's rollout servers) is the driver
:mod:`verl_isocompute.workflow.prefix_search`; this module holds what needs no sampling:

- :func:`problems_of`: each problem's prefix ladder (:func:`verl_isocompute.guided.prefixes.prefix_ladder`:
  rung r = the first r steps) from its solution column or its PrefixRL trace, or the reason it has none;
- :func:`prefixes_table`: the outcomes of the sampled rungs -> one row per problem under a rule of
  :mod:`verl_isocompute.guided.search_rules` (``pope`` / ``band``); :func:`spend_of`: the rollouts they cost;
- :func:`read_chosen` / :func:`searched_placement`: the table read back by ``isocompute guide --prefixes`` and
  ``isocompute.guided.prefixes``, each problem guided at its chosen prefix;
- :func:`write_outputs`: ``prefixes.parquet`` (one row per problem: status chosen / exhausted / skipped, the
  reason, the chosen rung, its text and fraction, the guided avg@k there, the ladder length), ``report.md``,
  ``prefix_search.png``, ``summary.json`` and ``spend.json`` (stage ``prefix_search``, recomputed from every
  outcome and kept per problem, so a resumed search never counts a sample twice and a run counts only its
  training problems; :mod:`verl_isocompute.guided.spend`).

Pure: pandas, numpy and matplotlib; no verl, torch or Ray.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from verl_isocompute import _compat, atomic
from verl_isocompute.data.problems import ground_truth_of, messages_of
from verl_isocompute.guided import spend
from verl_isocompute.guided.placement import NO_TRACE, NO_USER_TURN, USER
from verl_isocompute.guided.prefixes import DEFAULT_MAX_FRACTION, Prefix, lookup, prefix_ladder, skip_reason
from verl_isocompute.guided.search_rules import CHOSEN, EXHAUSTED, POPE, Decision, decisions
from verl_isocompute.jsonl import plain

RUNGS_FILE = "rungs.jsonl"  # the cache of rung outcomes, one line per sampled (problem, rung)
SETTINGS_FILE = "prefix_search.json"
PREFIXES_FILE = "prefixes.parquet"
PLOT_FILE = "prefix_search.png"
SKIPPED = "skipped"
PROMPT_TOO_LONG = "prompt_too_long"  # even rung 1's guided prompt is longer than data.max_prompt_length
NO_SUCCESS = "no_success"  # pope: no rung had a correct sample
NOT_IN_BAND = "no_rung_in_band"  # band: every rung's guided avg@k stayed below the band
DEFAULT_BAND = (0.25, 0.75)
# RECORDS_FILE until 0.2 ("records" are the fit's record-breaking points); the old name works for one release.
__getattr__ = _compat.moved_names(__name__, {}, renamed={"RECORDS_FILE": "RUNGS_FILE"})

COLUMNS = ["problem_id", "status", "reason", "rung", "prefix", "prefix_fraction", "guided_avg_at_k", "k",
           "n_rungs", "rungs_sampled", "placement"]


# --- pure parts: problems, outcomes -> table, spend ---------------------------------------------------


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
    too_long_by: int | None = None  # prompt_too_long: the token length of its shortest guided prompt


def problems_of(frame: pd.DataFrame, solution_key: str, placement: str, max_fraction: float,
                solutions: list | None = None) -> list[Problem]:
    """Screened rows (with ``problem_id``) as :class:`Problem`, each with its ladder or a skip reason.
    ``solutions`` (one text or None per row, e.g. each problem's PrefixRL trace) replaces the ``solution_key``
    column; a None entry is skipped as ``no_trace``."""
    out = []
    for i, row in enumerate(frame.to_dict("records")):
        row = plain(row)
        messages = messages_of(row["prompt"])
        solution = lookup(row, solution_key) if solutions is None else solutions[i]
        reason = NO_TRACE if solutions is not None and solution is None else skip_reason(solution, max_fraction)
        if reason is None and placement == USER and not any(m["role"] == "user" for m in messages):
            reason = NO_USER_TURN
        ladder = () if reason else tuple(prefix_ladder(solution, max_fraction))
        out.append(Problem(row["problem_id"], messages, ground_truth_of(row["reward_model"]), row.get("data_source"),
                           row.get("extra_info"), ladder, reason))
    return out


def latest(outcomes: Iterable[Mapping]) -> dict[tuple[str, int], Mapping]:
    """The outcome of each (problem, rung); a later outcome replaces an earlier one."""
    return {(r["id"], int(r["rung"])): r for r in outcomes}


def spend_of(outcomes: Iterable[Mapping]) -> spend.Spend:
    """Rollouts (sum of k) and generated tokens over every outcome: all the sampling the search did."""
    return sum(spend.per_problem(outcomes).values(), spend.Spend())


def prefixes_table(problems: list[Problem], outcomes: Iterable[Mapping], rule: str = POPE,
                   band: tuple[float, float] = DEFAULT_BAND, placement: str = USER) -> pd.DataFrame:
    """One row per problem: status (chosen / exhausted / skipped, or pending for an unfinished search),
    reason, chosen rung with its prefix text and fraction, guided avg@k at that rung, k, ladder length."""
    by_rung = latest(outcomes)
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
                outcome, prefix = by_rung[(p.problem_id, d.rung)], p.ladder[d.rung - 1]
                row.update(rung=d.rung, prefix=prefix.text, prefix_fraction=prefix.fraction,
                           guided_avg_at_k=outcome["correct"] / outcome["k"], k=int(outcome["k"]))
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


def summary_of(table: pd.DataFrame, outcomes: list[Mapping], screened: pd.DataFrame, rounds: int) -> dict[str, Any]:
    chosen = table[table["status"] == CHOSEN]
    fractions = chosen["prefix_fraction"]
    total = spend_of(outcomes)
    return {
        "problems": int(len(table) + len(screened)),
        "status": {s: int(n) for s, n in table["status"].value_counts().items()},
        "reasons": {f"{s}: {r}": int(n) for (s, r), n in table[table["reason"] != ""].groupby(["status", "reason"]).size().items()},
        "screened_out": {str(r): int(n) for r, n in screened["reason"].value_counts().items()} if len(screened) else {},
        "chosen_fraction": ({q: float(fractions.quantile(v)) for q, v in (("min", 0), ("median", 0.5), ("max", 1))}
                            | {"mean": float(fractions.mean())}) if len(chosen) else None,
        "chosen_rungs": {int(r): int(n) for r, n in chosen["rung"].value_counts().sort_index().items()},
        "mean_guided_avg_at_k": float(chosen["guided_avg_at_k"].mean()) if len(chosen) else None,
        "rounds": rounds, "rollouts": total.rollouts, "tokens": total.tokens, "records": len(outcomes),  # summary.json's key
    }


def sampled_in(dtype: str | None) -> str:
    """`` in float32 (the rollout's dtype ...)`` for a report line (curation's and the search's), or nothing
    when unknown: curation and the search sample in the rollout's dtype, which need not be the training run's."""
    return f" in {dtype} (the rollout's dtype; a training run computes in its own recipe's)" if dtype else ""


def render_report(summary: Mapping[str, Any], settings: Mapping[str, Any]) -> str:
    rule = settings["rule"]
    what = ("POPE (arXiv 2601.18779): the shortest prefix with >= 1 correct of k" if rule == POPE else
            f"band (PrefixRL, arXiv 2601.18795): guided avg@k in [{settings['band'][0]:g}, {settings['band'][1]:g}]")
    lines = [
        "# Prefix search", "",
        f"Base model `{settings['model']}`, k = {settings['k']} samples per rung at temperature {settings['temperature']} "
        f"(top_p {settings['top_p']}, at most {settings['max_response_length']} response tokens), rollout "
        f"`{settings['rollout']}`{sampled_in(settings.get('dtype'))}, reward `{settings['reward']}`. Rule {what}; prefixes cut from "
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
    lines += ["", f"Files: {PREFIXES_FILE}, {PLOT_FILE}, spend.json, {RUNGS_FILE} (the per-rung cache), "
              f"{SETTINGS_FILE} (its settings). Guide with them: `isocompute guide TRAIN -o OUT --prefixes <this dir> "
              f"--placement {settings['placement']}`.", ""]
    return "\n".join(lines)


def plot_prefixes(table: pd.DataFrame, k: int, path: Path, max_fraction: float = DEFAULT_MAX_FRACTION) -> Path:
    """Left: how many problems got each prefix fraction; right: guided avg@k at the chosen rung vs fraction."""
    from verl_isocompute.figures import agg_figure

    chosen = table[table["status"] == CHOSEN]
    fig = agg_figure(figsize=(10, 4))
    left, right = fig.subplots(1, 2)
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
    return atomic.save_figure(path, fig, dpi=100)


def write_outputs(out: Path, table: pd.DataFrame, outcomes: list[Mapping], screened: pd.DataFrame,
                  settings: Mapping[str, Any], rounds: int) -> dict[str, Any]:
    """prefixes.parquet, report.md, prefix_search.png, spend.json (set from every outcome) and summary.json."""
    out = Path(out)
    atomic.write_parquet(out / PREFIXES_FILE, table)
    spend.write(out, spend.PREFIX_SEARCH, spend.per_problem(outcomes))
    summary = summary_of(table, outcomes, screened, rounds)
    plot_prefixes(table, int(settings["k"]), out / PLOT_FILE, float(settings["max_fraction"]))
    atomic.write_text(out / "report.md", render_report(summary, settings))
    atomic.write_text(out / "summary.json", json.dumps(summary, indent=2) + "\n")
    return summary
