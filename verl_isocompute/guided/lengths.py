"""Guided prompts measured the way verl measures them, so that no guided row is lost on the way to training.

A guided prompt is longer than its problem by the prefix (and, for POPE's user placement, the instruction).
verl decides what survives by length before training starts:

- with ``data.filter_overlong_prompts`` (the CPU overlay sets it), ``RLHFDataset.maybe_filter_out_long_prompts``
  drops every row whose chat-template rendering, generation prompt included, is longer than
  ``data.max_prompt_length``: ``len(tokenizer.apply_chat_template(messages, add_generation_prompt=True,
  tokenize=True, **data.apply_chat_template_kwargs))`` (:func:`filter_length`). A user-placed row is sent
  exactly so. An assistant-placed row is *measured* with the prefix as a closed assistant message followed by
  a new generation prompt, which is longer (6 tokens with ChatML templates) than the prompt our agent loop
  sends: the unguided prompt, then the prefix's ids (:func:`sent_length`,
  :mod:`verl_isocompute.training.guided_agent_loop`). So a guided row survives the filter only if its *filter* length
  fits;
- without the filter, the agent loop left-truncates a prompt longer than ``rollout.prompt_length`` (the start
  of the problem is lost) and trains on it: the guided row then survives, but not as it was made.

:func:`overlong` counts the guided rows of a dataset that one of the two would drop or cut, with the longest
length, for the one-line refusal before training (:func:`verl_isocompute.training.guided_training_set.check_guided_lengths`);
the prefix search measures every rung the same way (a rung that does not fit ends the ladder).

Pure: a tokenizer object is passed in; no verl, torch or transformers import.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from verl_isocompute.guided.check import prefix_token_ids
from verl_isocompute.guided.placement import ASSISTANT


def _ids(rendered) -> list[int]:
    ids = rendered["input_ids"] if isinstance(rendered, Mapping) else rendered
    return [int(t) for t in ids]


def render(tokenizer, messages: Sequence[Mapping], chat_kwargs: Mapping | None = None) -> list[int]:
    """The chat template over ``messages`` with the generation prompt, as token ids (verl's filter and its
    agent loop's prompt builder for a plain row)."""
    kwargs = {k: v for k, v in dict(chat_kwargs or {}).items() if k not in ("tokenize", "return_dict", "return_tensors")}
    return _ids(tokenizer.apply_chat_template([dict(m) for m in messages], add_generation_prompt=True, tokenize=True,
                                              return_dict=False, **kwargs))


def filter_length(tokenizer, messages: Sequence[Mapping], chat_kwargs: Mapping | None = None) -> int:
    """The length verl's ``filter_overlong_prompts`` compares with ``data.max_prompt_length``."""
    return len(render(tokenizer, messages, chat_kwargs))


def sent_length(tokenizer, messages: Sequence[Mapping], chat_kwargs: Mapping | None = None,
                placement: str = "", prefix_ids: Sequence[int] | None = None) -> int:
    """The length of the prompt the agent loop sends: for an assistant-placed row the messages before the
    prefix, rendered, then the prefix's ids (``prefix_ids``, or the final message's text tokenised alone)."""
    if placement != ASSISTANT:
        return filter_length(tokenizer, messages, chat_kwargs)
    ids = list(prefix_ids) if prefix_ids is not None and len(prefix_ids) else prefix_token_ids(tokenizer, messages[-1]["content"])
    return filter_length(tokenizer, messages[:-1], chat_kwargs) + len(ids)


@dataclass(frozen=True)
class Overlong:
    """Guided rows that would not reach training as made: ``count`` of ``rows``, the ``longest`` length."""

    count: int
    rows: int
    longest: int
    filtered: bool  # True: verl's filter drops them; False: the agent loop left-truncates them


def overlong(rows: Sequence[Mapping], tokenizer, max_prompt_length: int, chat_kwargs: Mapping | None = None,
             filtered: bool = True) -> Overlong:
    """Of the guided rows (``extra_info.guided`` true) of verl ``rows``, how many are longer than
    ``max_prompt_length`` as verl's filter measures them (``filtered``) or as the agent loop sends them
    (filter off: it would cut them), and the longest such length over all guided rows."""
    count = total = longest = 0
    for row in rows:
        info = row.get("extra_info")
        if not (isinstance(info, Mapping) and info.get("guided")):
            continue
        messages = list(row["prompt"])
        if filtered:
            length = filter_length(tokenizer, messages, chat_kwargs)
        else:
            length = sent_length(tokenizer, messages, chat_kwargs, str(info.get("placement") or ""),
                                 info.get("guide_prefix_ids"))
        total += 1
        longest = max(longest, length)
        count += length > max_prompt_length
    return Overlong(count, total, longest, filtered)
