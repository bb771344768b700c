"""A problem's identity in verl's RL parquet format: its chat messages, its ground truth and a stable id.

Curation (:mod:`verl_isocompute.workflow.curate`), its PrefixRL traces, the guided mixture and the prefix
search all match rows to problems by the same id, a hash of the prompt messages and the ground truth, so a
problem keeps its id across files, reordering and tools. Pure: the standard library only.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from typing import Any

from verl_isocompute.jsonl import plain


def messages_of(prompt: Any) -> list[dict[str, str]] | None:
    """The chat messages of a verl prompt (a list of {role, content}), or None if it is not one."""
    prompt = plain(prompt)
    if not isinstance(prompt, list) or not prompt:
        return None
    if not all(isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str) for m in prompt):
        return None
    return [{"role": m["role"], "content": m["content"]} for m in prompt]


def ground_truth_of(reward_model: Any) -> str | None:
    """``reward_model.ground_truth`` as a string, or None when missing or empty."""
    reward_model = plain(reward_model)
    if not isinstance(reward_model, dict):
        return None
    truth = reward_model.get("ground_truth")
    if truth is None or (isinstance(truth, float) and math.isnan(truth)):
        return None
    truth = str(truth).strip() if not isinstance(truth, list) else json.dumps(truth)
    return truth or None


def problem_id(messages: list[dict[str, str]], ground_truth: str) -> str:
    """Stable id: sha256 of the prompt messages and the ground truth (16 hex digits)."""
    blob = json.dumps({"prompt": messages, "ground_truth": ground_truth}, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def row_problem_id(row: Mapping) -> str | None:
    """The id of a verl row (prompt messages + ground truth), or None when it has neither."""
    messages, truth = messages_of(row.get("prompt")), ground_truth_of(row.get("reward_model"))
    return None if messages is None or truth is None else problem_id(messages, truth)
