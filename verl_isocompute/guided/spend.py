"""Sampling compute spent *outside* training to make guided data: the spend file (pure standard library).

Guided training (docs/GUIDED.md) rests on rollouts the base model generated before the run: curation's
k samples per problem whose correct responses become PrefixRL traces, extra pass@K rejection sampling for
problems with no success yet, and the per-problem prefix search. PrefixRL's headline comparison
("Reuse your FLOPs", arXiv 2601.18795) counts that compute, so a guided run must be able to report its
sampling compute C both with and without it.

Every tool that spends such rollouts writes the totals of its stage into ``<its output dir>/spend.json``::

    {"stages": {"rejection_sampling": {"rollouts": 4096, "tokens": 310000}, "prefix_search": {...}}}

A stage's totals are *set*, not added: each tool recomputes them from its own cache of samples, so a
resumed or repeated run never counts a sample twice. A guided run reads the spend files of the data it
trains on (:func:`total`) and reports C with and without them (the run log's header and rows).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from verl_isocompute import atomic
from verl_isocompute.runlog import WITH_GUIDANCE

SPEND = "spend.json"
CURATION, REJECTION_SAMPLING, PREFIX_SEARCH = "curation", "rejection_sampling", "prefix_search"
STAGES = (CURATION, REJECTION_SAMPLING, PREFIX_SEARCH)


class SpendError(ValueError):
    """A spend file that cannot be read as one; the message names the file and the fix."""


@dataclass(frozen=True)
class Spend:
    """Rollouts and generated tokens spent by one stage (or a sum of stages)."""

    rollouts: int = 0
    tokens: int = 0

    def __add__(self, other: "Spend") -> "Spend":
        return Spend(self.rollouts + other.rollouts, self.tokens + other.tokens)


def path_of(where: str | os.PathLike) -> Path:
    """The spend file meant by ``where``: the file itself, or ``spend.json`` in a directory."""
    where = Path(os.path.expanduser(str(where)))
    return where / SPEND if where.is_dir() or where.suffix != ".json" else where


def read(where: str | os.PathLike) -> dict[str, Spend]:
    """The stages of a spend file (``where`` is the file or its directory); ``{}`` when there is none."""
    path = path_of(where)
    if not path.exists():
        return {}
    try:
        stages = json.loads(path.read_text())["stages"]
        return {str(stage): Spend(int(v["rollouts"]), int(v["tokens"])) for stage, v in stages.items()}
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise SpendError(f"{path}: not a spend file ({exc!r}); delete it and re-run the tool that wrote it") from None


def write(where: str | os.PathLike, stage: str, spend: Spend) -> Path:
    """Set ``stage``'s totals in the spend file of ``where`` (other stages kept), atomically."""
    if stage not in STAGES:
        raise ValueError(f"stage={stage!r}: use one of {', '.join(STAGES)}")
    if spend.rollouts < 0 or spend.tokens < 0:
        raise ValueError(f"spend must be >= 0, got {spend}")
    path = path_of(where)
    stages = read(path)
    stages[stage] = spend
    path.parent.mkdir(parents=True, exist_ok=True)
    return atomic.write_json(path, {"stages": as_json(stages)})


def total(wheres: Iterable[str | os.PathLike]) -> dict[str, Spend]:
    """Per-stage sums over several spend files (a file listed twice is counted once)."""
    seen: set[Path] = set()
    out: dict[str, Spend] = {}
    for where in wheres:
        path = path_of(where).absolute()
        if path in seen:
            continue
        seen.add(path)
        for stage, spend in read(path).items():
            out[stage] = out.get(stage, Spend()) + spend
    return out


def as_json(stages: dict[str, Spend]) -> dict[str, dict[str, int]]:
    """``{stage: {"rollouts": ..., "tokens": ...}}``: the spend file's ``stages`` and the run-log header's
    ``guidance_spend``."""
    return {stage: {"rollouts": s.rollouts, "tokens": s.tokens} for stage, s in stages.items()}


def with_guidance(rollouts: int, tokens: int, stages: dict[str, Spend]) -> dict[str, int]:
    """A run-log row's C and tokens with the guidance spend added: ``rollouts_with_guidance`` and
    ``tokens_with_guidance`` (``rollouts`` / ``tokens`` stay training-only)."""
    spent = sum(stages.values(), Spend())
    return {WITH_GUIDANCE["rollouts"]: int(rollouts) + spent.rollouts, WITH_GUIDANCE["tokens"]: int(tokens) + spent.tokens}
