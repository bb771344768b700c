"""Sampling compute spent *outside* training to make guided data: the spend file (pure standard library).

Guided training (docs/GUIDED.md) rests on rollouts the base model generated before the run: curation's
k samples per problem (its difficulty; their correct responses become PrefixRL traces), extra pass@K
rejection sampling for problems with no success yet, and the per-problem prefix search. PrefixRL's headline
comparison ("Reuse your FLOPs", arXiv 2601.18795) counts the compute that found its prefixes, so a guided run
must be able to report its sampling compute C with and without it.

Every tool that spends such rollouts writes its stage into ``<its output dir>/spend.json``, in total and per
problem (curation's problem id, :mod:`verl_isocompute.data.problems`)::

    {"stages":   {"rejection_sampling": {"rollouts": 4096, "tokens": 310000}, "prefix_search": {...}},
     "problems": {"rejection_sampling": {"<problem id>": [rollouts, tokens], ...}, "prefix_search": {...}}}

A stage is *set*, not added: each tool recomputes it from its own cache of samples, so a resumed or repeated
run never counts a sample twice. A run counts only the spend on the problems it trains on (:func:`total` with
``problems``): curation also measured problems that were not Hard and the validation problems, and rejection
sampling ran on validation problems too, none of which the run trains on. Curation itself is spent by an
unguided baseline on the same set as well, so the run log keeps it in a column of its own
(:func:`with_guidance`): ``*_with_guidance`` adds the guidance stages (rejection sampling, prefix search),
``*_with_curation`` adds curation on top, a column both arms of a comparison can log.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping

from verl_isocompute import atomic
from verl_isocompute.errors import IsoComputeError
from verl_isocompute.runlog import WITH_CURATION, WITH_GUIDANCE

SPEND = "spend.json"
CURATION, REJECTION_SAMPLING, PREFIX_SEARCH = "curation", "rejection_sampling", "prefix_search"
STAGES = (CURATION, REJECTION_SAMPLING, PREFIX_SEARCH)
GUIDANCE_STAGES = (REJECTION_SAMPLING, PREFIX_SEARCH)  # what makes the guidance; curation is both arms' spend


class SpendError(IsoComputeError, ValueError):
    """A spend file that cannot be read as one; the message names the file and the fix."""


@dataclass(frozen=True)
class Spend:
    """Rollouts and generated tokens spent by one stage (or a sum of stages)."""

    rollouts: int = 0
    tokens: int = 0

    def __add__(self, other: "Spend") -> "Spend":
        return Spend(self.rollouts + other.rollouts, self.tokens + other.tokens)


def per_problem(outcomes: Iterable[Mapping]) -> dict[str, Spend]:
    """Rollouts (each record's ``k``) and generated tokens (its ``response_tokens``) per problem ``id``, over
    sampling outcomes (curation's, a rejection round's, a prefix-search rung's)."""
    out: dict[str, Spend] = {}
    for outcome in outcomes:
        pid = str(outcome["id"])
        out[pid] = out.get(pid, Spend()) + Spend(int(outcome["k"]), int(sum(outcome.get("response_tokens") or ())))
    return out


def path_of(where: str | os.PathLike) -> Path:
    """The spend file meant by ``where``: the file itself, or ``spend.json`` in a directory."""
    where = Path(os.path.expanduser(str(where)))
    return where / SPEND if where.is_dir() or where.suffix != ".json" else where


def _load(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
        stages = {str(stage): Spend(int(v["rollouts"]), int(v["tokens"])) for stage, v in data["stages"].items()}
        problems = {str(stage): {str(pid): Spend(int(r), int(t)) for pid, (r, t) in per.items()}
                    for stage, per in data.get("problems", {}).items()} if "problems" in data else None
        if problems is not None and set(stages) - set(problems):
            problems = None  # a stage without its per-problem spend: as an older file
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise SpendError(f"{path}: not a spend file ({exc!r}); delete it and re-run the tool that wrote it") from None
    return {"stages": stages, "problems": problems}


def read(where: str | os.PathLike) -> dict[str, Spend]:
    """The stages' totals of a spend file (``where`` is the file or its directory); ``{}`` when there is none."""
    path = path_of(where)
    return _load(path)["stages"] if path.exists() else {}


def read_problems(where: str | os.PathLike) -> dict[str, dict[str, Spend]]:
    """The stages' spend per problem id (``{}`` when there is no file); a file written before the spend was
    kept per problem is a :class:`SpendError` naming the fix."""
    path = path_of(where)
    if not path.exists():
        return {}
    problems = _load(path)["problems"]
    if problems is None:
        raise SpendError(f"{path} has no per-problem spend (written by an older version): re-run the tool that wrote "
                         "it (curate or prefix-search, same command: it recomputes spend.json from its cache, sampling nothing)")
    return problems


def write(where: str | os.PathLike, stage: str, per_problem: Mapping[str, Spend]) -> Path:
    """Set ``stage`` in the spend file of ``where`` (other stages kept), atomically: its spend per problem id
    and their total."""
    if stage not in STAGES:
        raise ValueError(f"stage={stage!r}: use one of {', '.join(STAGES)}")
    if any(s.rollouts < 0 or s.tokens < 0 for s in per_problem.values()):
        raise ValueError(f"spend must be >= 0, got {[s for s in per_problem.values() if s.rollouts < 0 or s.tokens < 0][0]}")
    path = path_of(where)
    loaded = _load(path) if path.exists() else {"stages": {}, "problems": {}}
    stages, problems = loaded["stages"], loaded["problems"] or {}
    stages[stage] = sum(per_problem.values(), Spend())
    problems[stage] = dict(per_problem)
    path.parent.mkdir(parents=True, exist_ok=True)
    return atomic.write_json(path, {"stages": as_json(stages), "problems": {
        name: {pid: [s.rollouts, s.tokens] for pid, s in per.items()} for name, per in problems.items()}})


def total(wheres: Iterable[str | os.PathLike], problems: Iterable[str] | None = None) -> dict[str, Spend]:
    """Per-stage sums over several spend files (a file listed twice is counted once); with ``problems``
    (problem ids), only the spend on those problems."""
    wanted = None if problems is None else set(problems)
    seen: set[Path] = set()
    out: dict[str, Spend] = {}
    for where in wheres:
        path = path_of(where).absolute()
        if path in seen:
            continue
        seen.add(path)
        if wanted is None:
            stages = read(path)
        else:
            stages = {stage: sum((s for pid, s in per.items() if pid in wanted), Spend())
                      for stage, per in read_problems(path).items()}
        for stage, spend in stages.items():
            out[stage] = out.get(stage, Spend()) + spend
    return out


def as_json(stages: dict[str, Spend]) -> dict[str, dict[str, int]]:
    """``{stage: {"rollouts": ..., "tokens": ...}}``: the spend file's ``stages`` and the run-log header's
    ``guidance_spend``."""
    return {stage: {"rollouts": s.rollouts, "tokens": s.tokens} for stage, s in stages.items()}


def with_guidance(rollouts: int, tokens: int, stages: dict[str, Spend]) -> dict[str, int]:
    """A run-log row's C and tokens with the spend before training added (``rollouts`` / ``tokens`` stay
    training-only): ``rollouts_with_guidance`` / ``tokens_with_guidance`` add the guidance stages (rejection
    sampling, prefix search); ``rollouts_with_curation`` / ``tokens_with_curation`` add curation on top."""
    guidance = sum((s for stage, s in stages.items() if stage in GUIDANCE_STAGES), Spend())
    curation = stages.get(CURATION, Spend())
    return {WITH_GUIDANCE["rollouts"]: int(rollouts) + guidance.rollouts, WITH_GUIDANCE["tokens"]: int(tokens) + guidance.tokens,
            WITH_CURATION["rollouts"]: int(rollouts) + guidance.rollouts + curation.rollouts,
            WITH_CURATION["tokens"]: int(tokens) + guidance.tokens + curation.tokens}
