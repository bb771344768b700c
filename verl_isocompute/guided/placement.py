"""Guided rows next to the unguided originals: a pure dataset transform on verl's RL parquet format.

POPE (arXiv 2601.18779) trains on-policy on hard problems augmented with an oracle prefix *mixed with the
unguided originals, 1:1 in the paper*; PrefixRL (arXiv 2601.18795) runs on-policy RL on the continuation of
a prefix. Both keep the prefix out of the training target. This module writes such a mixture as ONE dataset
(so guided and unguided rows share every batch), in one of two placements:

- ``user`` (POPE): the prefix goes into the last user turn after an instruction to continue it; the
  assistant turn the policy writes is all its own.
- ``assistant`` (PrefixRL): the prompt ends with an assistant message holding the prefix and the row names
  our agent loop (``agent_name`` = :data:`PREFIX_AGENT`, :mod:`verl_isocompute.guided.agent_loop`), which
  appends the prefix's tokens to the *prompt* ids after the generation prompt, so the policy continues the
  assistant turn and the prefix is never part of the response (nor of ``response_mask``, the loss, the
  log-probs or TIS). Unguided rows name verl's ``single_turn_agent``.

Every output row is marked in ``extra_info``: ``guided`` (bool), ``prefix_fraction`` (share of the
solution's characters, 0 when unguided), ``placement`` ("" when unguided), ``guide_prefix`` (the text).
Validation sets stay unguided: POPE measures transfer back to the unguided problems, so only training
files go through this transform.

Pure pandas: no verl, torch or tokenizer import.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

import pandas as pd

from verl_isocompute.guided.prefixes import DEFAULT_MAX_FRACTION, Prefix, lookup, prefix_at, skip_reason

USER, ASSISTANT = "user", "assistant"
PLACEMENTS = (USER, ASSISTANT)
PREFIX_AGENT = "isocompute_prefix_continuation"  # our registered agent loop for the assistant placement
DEFAULT_AGENT = "single_turn_agent"  # verl's default agent loop (rollout.agent.default_agent_loop)
NO_USER_TURN = "no_user_turn"  # a row whose prompt has no user message to put a POPE prefix in
NO_TRACE = "no_trace"  # with traces as the source: the problem has no kept correct response (guided/traces.py)
NO_PREFIX_FOUND = "no_prefix_found"  # the prefix search found no rung for the problem (guided.prefix_search)
NOT_SEARCHED = "not_searched"  # the problem is not in the prefix search's table
# The continue instruction of the user placement (our wording; POPE's exact prompt is not reproduced).
CONTINUE_INSTRUCTION = "Below is the beginning of a correct solution. Continue it from where it stops, without repeating it."


@dataclass
class GuidedDataset:
    """The mixed dataset and what went into it."""

    frame: pd.DataFrame
    unguided: int
    guided: int
    eligible: int  # problems with a usable prefix
    wanted: int  # guided rows the ratio asked for
    skipped: Counter = field(default_factory=Counter)  # reason -> problems without a usable prefix

    def summary(self) -> str:
        reasons = ", ".join(f"{k} {v}" for k, v in sorted(self.skipped.items())) or "none"
        short = f" (ratio asked for {self.wanted}; only {self.eligible} problems have a usable prefix)" if self.guided < self.wanted else ""
        return f"{self.unguided} unguided + {self.guided} guided rows{short}; skipped problems: {reasons}"


def user_turn(messages: list[dict], prefix: str) -> list[dict]:
    """POPE placement: the last user message, then the instruction to continue, then the prefix."""
    out = [dict(m) for m in messages]
    last = max(i for i, m in enumerate(out) if m.get("role") == "user")
    out[last]["content"] = f"{out[last]['content']}\n\n{CONTINUE_INSTRUCTION}\n\n{prefix}"
    return out


def assistant_turn(messages: list[dict], prefix: str) -> list[dict]:
    """PrefixRL placement: the prompt ends with the start of the assistant turn, which the policy continues."""
    return [dict(m) for m in messages] + [{"role": "assistant", "content": prefix}]


def _marked(extra_info, guided: bool, prefix: Prefix | None, placement: str) -> dict:
    info = dict(extra_info) if isinstance(extra_info, dict) else {}
    info.update(
        guided=guided,
        prefix_fraction=prefix.fraction if prefix else 0.0,
        placement=placement if guided else "",
        guide_prefix=prefix.text if prefix else "",
    )
    return info


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
) -> GuidedDataset:
    """``frame`` (verl rows) plus guided copies of ``ratio`` x len(frame) of its problems (those with a usable prefix).

    ``solution_key`` is a column or a dotted path into one (``extra_info.solution``). Each guided copy gets the
    prefix of :func:`verl_isocompute.guided.prefixes.prefix_at` (``fraction``, capped at ``max_fraction``).
    When fewer problems than asked have a usable prefix, all of them are guided (see :meth:`GuidedDataset.summary`);
    which problems are guided when there are more is a seeded draw. ``solutions`` (one per row) replaces the
    ``solution_key`` column, e.g. PrefixRL traces (:func:`verl_isocompute.guided.recipe.trace_solutions`); a None
    entry is counted as :data:`NO_TRACE`.

    ``searched`` (:func:`verl_isocompute.guided.prefix_search.read_chosen`: problem id -> chosen prefix or the
    reason there is none) replaces the fixed ``fraction``: each problem gets the prefix the search chose for
    it, and a problem without one is skipped with the search's reason (``no_prefix_found``, ``not_searched``)."""
    if placement not in PLACEMENTS:
        raise ValueError(f"placement={placement!r}: use {' or '.join(PLACEMENTS)}")
    if not 0 < ratio <= 1:
        raise ValueError(f"ratio={ratio}: guided rows per unguided row, in (0, 1] (POPE mixes 1:1, ratio=1)")
    if "prompt" not in frame.columns:
        raise ValueError(f"no 'prompt' column (columns: {list(frame.columns)}): write the dataset in verl's RL format")
    rows = frame.to_dict("records")
    skipped: Counter = Counter()
    usable: list[tuple[int, Prefix]] = []
    for i, row in enumerate(rows):
        if searched is None:
            solution = lookup(row, solution_key) if solutions is None else solutions[i]
            reason = NO_TRACE if solutions is not None and solution is None else skip_reason(solution, max_fraction)
            prefix = None if reason else prefix_at(solution, fraction, max_fraction)
        else:
            prefix = searched.get(row_problem_id(row), NOT_SEARCHED)
            prefix, reason = (prefix, None) if isinstance(prefix, Prefix) else (None, prefix)
        if reason is None and placement == USER and not any(m.get("role") == "user" for m in row["prompt"]):
            reason = NO_USER_TURN
        if reason is not None:
            skipped[reason] += 1
            continue
        usable.append((i, prefix))
    wanted = round(ratio * len(rows))
    chosen = sorted(random.Random(seed).sample(usable, min(wanted, len(usable))))

    place = user_turn if placement == USER else assistant_turn
    out = []
    for row in rows:
        out.append({**row, "extra_info": _marked(row.get("extra_info"), False, None, placement)})
        if placement == ASSISTANT:
            out[-1]["agent_name"] = DEFAULT_AGENT
    for i, prefix in chosen:
        row = rows[i]
        guided = {**row, "prompt": place(list(row["prompt"]), prefix.text), "extra_info": _marked(row.get("extra_info"), True, prefix, placement)}
        if placement == ASSISTANT:
            guided["agent_name"] = PREFIX_AGENT
        out.append(guided)
    return GuidedDataset(pd.DataFrame(out), unguided=len(rows), guided=len(chosen), eligible=len(usable), wanted=wanted, skipped=skipped)


def row_problem_id(row: Mapping) -> str | None:
    """The row's id as curation, its traces and the prefix search compute it (prompt messages + ground truth)."""
    from verl_isocompute.workflow.curate import ground_truth_of, messages_of, problem_id

    messages, truth = messages_of(row.get("prompt")), ground_truth_of(row.get("reward_model"))
    return None if messages is None or truth is None else problem_id(messages, truth)


def write_guided(train_file, out_file, solution_key: str, **options) -> GuidedDataset:
    """Read a verl training parquet, mix in guided rows (:func:`guided_dataset`), write ``out_file`` atomically."""
    from verl_isocompute import atomic

    result = guided_dataset(pd.read_parquet(train_file), solution_key, **options)
    with atomic.replacing(out_file) as tmp:
        result.frame.to_parquet(tmp, index=False)
    return result
