"""Guided rows next to the unguided originals: a pure dataset transform on verl's RL parquet format.

POPE (arXiv 2601.18779) trains on-policy on hard problems augmented with an oracle prefix *mixed with the
unguided originals, 1:1 in the paper*; PrefixRL (arXiv 2601.18795) runs on-policy RL on the continuation of
a prefix. Both keep the prefix out of the training target. This module writes such a mixture as ONE dataset
(so guided and unguided rows share every batch), in one of two placements:

- ``user`` (POPE): the prefix goes into the last user turn after an instruction to continue it; the
  assistant turn the policy writes is all its own.
- ``assistant`` (PrefixRL): the prompt ends with an assistant message holding the prefix and the row names
  our agent loop (``agent_name`` = :data:`PREFIX_AGENT`, :mod:`verl_isocompute.training.guided_agent_loop`), which
  appends the prefix's tokens to the *prompt* ids after the generation prompt, so the policy continues the
  assistant turn and the prefix is never part of the response (nor of ``response_mask``, the loss, the
  log-probs or TIS). Unguided rows name verl's ``single_turn_agent``.

What the mixture holds. Every problem with a usable prefix gets ``copies`` guided rows at different prefix
lengths (PrefixRL varies h; POPE uses one); the unguided originals kept are ``all`` of them (so "1:1" only
when every problem has a prefix: the real ratio is in :meth:`GuidedDataset.summary` and the run log),
``prefixed`` (only those of the guided problems: POPE's stated 1:1 over the problems that have a prefix) or
``none`` (PrefixRL's training on prefixed problems only, whose back-generalisation to unguided problems the
paper reports).

Every output row is marked in ``extra_info``: ``guided`` (bool), ``prefix_fraction`` (share of the
solution's characters, or of the trace's tokens for a token cut; 0 when unguided), ``placement`` ("" when
unguided), ``guide_prefix`` (the text), ``problem_id`` (the original's id, :mod:`verl_isocompute.data.problems`:
what the spend of the guided data is matched by) and, for token cuts, ``guide_prefix_ids``. Validation sets
stay unguided: POPE measures transfer back to the unguided problems, so only training files go through
this transform.

Pure pandas: no verl, torch or tokenizer import.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

import pandas as pd

from verl_isocompute.data.problems import row_problem_id
from verl_isocompute.guided.prefixes import DEFAULT_MAX_FRACTION, Prefix, lookup, prefixes_at, skip_reason
from verl_isocompute.rules.names import PREFIX_AGENT

USER, ASSISTANT = "user", "assistant"
PLACEMENTS = (USER, ASSISTANT)
DEFAULT_AGENT = "single_turn_agent"  # verl's default agent loop (rollout.agent.default_agent_loop)
NO_USER_TURN = "no_user_turn"  # a row whose prompt has no user message to put a POPE prefix in
NO_TRACE = "no_trace"  # with traces as the source: the problem has no kept correct response (guided/traces.py)
NO_PREFIX_FOUND = "no_prefix_found"  # the prefix search found no rung for the problem (guided.search_tables)
NOT_SEARCHED = "not_searched"  # the problem is not in the prefix search's table
# The continue instruction of the user placement (our wording; POPE's exact prompt is not reproduced).
CONTINUE_INSTRUCTION = "Below is the beginning of a correct solution. Continue it from where it stops, without repeating it."


# Which unguided originals the mixture keeps (``originals``).
ALL, PREFIXED, NONE = "all", "prefixed", "none"
ORIGINALS = (ALL, PREFIXED, NONE)
# What a problem the prefix search found no prefix for gets (``unsearched``).
SKIP, FRACTION = "skip", "fraction"
UNSEARCHED = (SKIP, FRACTION)


@dataclass
class GuidedDataset:
    """The mixed dataset and what went into it."""

    frame: pd.DataFrame
    unguided: int  # unguided rows in the mixture
    guided: int  # guided rows in the mixture
    eligible: int  # problems with a usable prefix
    wanted: int  # problems the ratio asked to guide
    skipped: Counter = field(default_factory=Counter)  # reason -> problems without a usable prefix
    problems: int = 0  # problems in the input
    problems_guided: int = 0  # problems with at least one guided copy
    originals: str = ALL
    fallback: int = 0  # problems guided at the fixed fraction because the search found them no prefix
    copies: int = 1  # guided rows asked per guided problem
    copies_made: tuple[int, int] = (1, 1)  # fewest and most guided rows a guided problem got

    @property
    def ratio(self) -> float:
        """Guided rows per unguided row of the mixture (inf when it has no unguided row)."""
        return self.guided / self.unguided if self.unguided else math.inf

    def summary(self) -> str:
        reasons = ", ".join(f"{k} {v}" for k, v in sorted(self.skipped.items())) or "none"
        asked = f" (the ratio asked for {self.wanted})" if self.wanted < self.problems else ""
        short = f"; only {self.eligible} problems have a usable prefix{asked}" if self.problems_guided < self.wanted else ""
        ratio = "no unguided row" if not self.unguided else f"{self.ratio:.2f} guided per unguided"
        fallback = f", {self.fallback} of them at the fixed fraction (no searched prefix)" if self.fallback else ""
        return (f"{self.unguided} unguided + {self.guided} guided rows ({ratio}: {self.problems_guided} of {self.problems} "
                f"problems guided{fallback}{short}; originals {self.originals}{self._fewer_copies()}); skipped problems: {reasons}")

    def _fewer_copies(self) -> str:
        """Why a guided problem got fewer than ``copies`` rows: each copy is a prefix of another length, and a
        solution has only so many lengths within the fraction (text cuts end at a line or sentence end, token cuts
        at a token), so the copies run out before the count asked for."""
        low, high = self.copies_made
        if not self.problems_guided or low >= self.copies:
            return ""
        made = str(low) if low == high else f"{low} to {high}"
        return (f"; copies {self.copies} asked, {made} made per problem: a prefix ends at a line or sentence end (a "
                "token with cut=tokens) within the fraction, so a solution has only that many lengths; raise fraction "
                "and max_fraction (--fraction, --max-fraction) for more")


def user_turn(messages: list[dict], prefix: str) -> list[dict]:
    """POPE placement: the last user message, then the instruction to continue, then the prefix."""
    out = [dict(m) for m in messages]
    last = max(i for i, m in enumerate(out) if m.get("role") == "user")
    out[last]["content"] = f"{out[last]['content']}\n\n{CONTINUE_INSTRUCTION}\n\n{prefix}"
    return out


def assistant_turn(messages: list[dict], prefix: str) -> list[dict]:
    """PrefixRL placement: the prompt ends with the start of the assistant turn, which the policy continues."""
    return [dict(m) for m in messages] + [{"role": "assistant", "content": prefix}]


def _marked(extra_info, guided: bool, prefix: Prefix | None, placement: str, problem: str | None, tokens: bool) -> dict:
    info = dict(extra_info) if isinstance(extra_info, dict) else {}
    info.update(
        guided=guided,
        prefix_fraction=prefix.fraction if prefix else 0.0,
        placement=placement if guided else "",
        guide_prefix=prefix.text if prefix else "",
        problem_id=problem or "",
    )
    if tokens:  # a token cut: the agent loop appends these ids, not the text re-tokenised
        info["guide_prefix_ids"] = list(prefix.token_ids) if prefix and prefix.token_ids else []
    return info


def _row_prefixes(row, i, solution_key, placement, fraction, max_fraction, copies, solutions, searched, token_cuts, unsearched):
    """(the row's guided prefixes, None) or ([], the reason it has none); bool: guided by the fallback."""
    if token_cuts is not None:
        cut = token_cuts[i]
        prefixes, reason = (cut, None) if isinstance(cut, list) else ([], cut or NO_TRACE)
    elif searched is not None:
        chosen = searched.get(row_problem_id(row), NOT_SEARCHED)
        if isinstance(chosen, Prefix):
            prefixes, reason = [chosen], None
        elif chosen == NO_PREFIX_FOUND and unsearched == FRACTION:
            solution = lookup(row, solution_key) if solutions is None else solutions[i]
            prefixes = prefixes_at(solution, fraction, max_fraction, copies)
            reason = None if prefixes else NO_PREFIX_FOUND
            return prefixes, reason, bool(prefixes)
        else:
            prefixes, reason = [], chosen
    else:
        solution = lookup(row, solution_key) if solutions is None else solutions[i]
        reason = NO_TRACE if solutions is not None and solution is None else skip_reason(solution, max_fraction)
        prefixes = [] if reason else prefixes_at(solution, fraction, max_fraction, copies)
    if reason is None and placement == USER and not any(m.get("role") == "user" for m in row["prompt"]):
        prefixes, reason = [], NO_USER_TURN
    return prefixes, reason, False


def guided_dataset(
    frame: pd.DataFrame,
    solution_key: str,
    placement: str = USER,
    ratio: float = 1.0,
    fraction: float = DEFAULT_MAX_FRACTION,
    max_fraction: float = DEFAULT_MAX_FRACTION,
    seed: int = 0,
    solutions: list | None = None,
    searched: Mapping[str, Prefix | str] | None = None,
    copies: int = 1,
    originals: str = ALL,
    token_cuts: list | None = None,
    unsearched: str = SKIP,
) -> GuidedDataset:
    """``frame`` (verl rows) with guided copies of ``ratio`` x len(frame) of its problems (those with a usable prefix).

    ``solution_key`` is a column or a dotted path into one (``extra_info.solution``). Each guided problem gets
    ``copies`` guided rows at different prefix lengths (:func:`verl_isocompute.guided.prefixes.prefixes_at`:
    evenly spread up to ``fraction``, capped at ``max_fraction``; PrefixRL varies the prefix length h; fewer when
    its ladder is shorter). When fewer problems than asked have a usable prefix, all of them are guided (see
    :meth:`GuidedDataset.summary`); which problems are guided when there are more is a seeded draw.
    ``solutions`` (one per row) replaces the ``solution_key`` column, e.g. PrefixRL traces
    (:func:`verl_isocompute.training.guided_mixture.trace_solutions`); a None entry is counted as :data:`NO_TRACE`.
    ``token_cuts`` (one per row: a list of token-cut prefixes, :func:`verl_isocompute.guided.prefixes.token_prefixes`,
    or the reason there is none) replaces both: the rows then carry the cut's token ids (``guide_prefix_ids``),
    which the assistant placement's agent loop appends as they are.

    ``searched`` (:func:`verl_isocompute.guided.search_tables.read_chosen`: problem id -> chosen prefix or the
    reason there is none) replaces the fixed ``fraction``: each problem gets the prefix the search chose for
    it (one copy), and a problem without one is skipped with the search's reason (``no_prefix_found``,
    ``not_searched``), or, with ``unsearched="fraction"``, a problem the search found no prefix for is guided at
    the fixed ``fraction`` instead.

    ``originals``: which unguided originals the mixture keeps: ``all`` (every row of ``frame``), ``prefixed``
    (those of the guided problems only: POPE's 1:1 over the problems that have a prefix), ``none`` (guided rows
    only: PrefixRL's training on prefixed problems only)."""
    if placement not in PLACEMENTS:
        raise ValueError(f"placement={placement!r}: use {' or '.join(PLACEMENTS)}")
    if not 0 < ratio <= 1:
        raise ValueError(f"ratio={ratio}: share of the problems to guide, in (0, 1] (POPE guides every hard problem, ratio=1)")
    if originals not in ORIGINALS:
        raise ValueError(f"originals={originals!r}: use all (every problem unguided too), prefixed (POPE's 1:1 over the "
                         "problems with a prefix) or none (PrefixRL: prefixed problems only)")
    if unsearched not in UNSEARCHED:
        raise ValueError(f"unsearched={unsearched!r}: use skip (no guided copy) or fraction (the fixed fraction)")
    if searched is not None and copies != 1:
        raise ValueError(f"copies={copies} with searched prefixes: the search chooses one prefix per problem; use copies=1")
    if token_cuts is not None and placement != ASSISTANT:
        raise ValueError("token cuts append kept token ids to the prompt: they need placement=assistant")
    if "prompt" not in frame.columns:
        raise ValueError(f"no 'prompt' column (columns: {list(frame.columns)}): write the dataset in verl's RL format")
    rows = frame.to_dict("records")
    skipped: Counter = Counter()
    usable: list[tuple[int, list[Prefix]]] = []
    fallbacks: set[int] = set()
    for i, row in enumerate(rows):
        prefixes, reason, fallback = _row_prefixes(row, i, solution_key, placement, fraction, max_fraction, copies,
                                                   solutions, searched, token_cuts, unsearched)
        if reason is not None:
            skipped[reason] += 1
            continue
        usable.append((i, prefixes))
        if fallback:
            fallbacks.add(i)
    wanted = round(ratio * len(rows))
    chosen = sorted(random.Random(seed).sample(usable, min(wanted, len(usable))))
    guided_ids = {i for i, _ in chosen}

    place = user_turn if placement == USER else assistant_turn
    tokens = token_cuts is not None
    ids = [row_problem_id(row) for row in rows]
    out = []
    for i, row in enumerate(rows):
        if originals == NONE or (originals == PREFIXED and i not in guided_ids):
            continue
        out.append({**row, "extra_info": _marked(row.get("extra_info"), False, None, placement, ids[i], tokens)})
        if placement == ASSISTANT:
            out[-1]["agent_name"] = DEFAULT_AGENT
    unguided = len(out)
    for i, prefixes in chosen:
        row = rows[i]
        for prefix in prefixes:
            guided = {**row, "prompt": place(list(row["prompt"]), prefix.text),
                      "extra_info": _marked(row.get("extra_info"), True, prefix, placement, ids[i], tokens)}
            if placement == ASSISTANT:
                guided["agent_name"] = PREFIX_AGENT
            out.append(guided)
    return GuidedDataset(pd.DataFrame(out), unguided=unguided, guided=len(out) - unguided, eligible=len(usable),
                         wanted=wanted, skipped=skipped, problems=len(rows), problems_guided=len(chosen),
                         originals=originals, fallback=len(fallbacks & guided_ids), copies=copies,
                         copies_made=(min(made), max(made)) if (made := [len(p) for _, p in chosen]) else (0, 0))


def write_guided(train_file, out_file, solution_key: str, **options) -> GuidedDataset:
    """Read a verl training parquet, mix in guided rows (:func:`guided_dataset`), write ``out_file`` atomically."""
    from verl_isocompute import atomic

    result = guided_dataset(pd.read_parquet(train_file), solution_key, **options)
    atomic.write_parquet(out_file, result.frame)
    return result
