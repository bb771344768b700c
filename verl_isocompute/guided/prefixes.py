"""Prefixes of an oracle solution: the guidance of POPE (arXiv 2601.18779) and PrefixRL (arXiv 2601.18795).

Both methods condition a hard problem on the beginning of a known-good solution so that the policy, which
never solves the problem alone, sometimes finishes it and the group gets a non-zero advantage. This module
only *cuts* solutions; choosing the prefix per problem with the base model is
the prefix search (:mod:`verl_isocompute.workflow.prefix_search`, its rules :mod:`verl_isocompute.guided.search_rules`).

Where a solution is cut. A prefix ends at a **line** boundary, and a solution written on one line is cut at
**sentence** boundaries instead:

- worked solutions (MATH/GSM8K references, model traces) put one step per line, so a line cut never splits an
  equation, a number or a LaTeX display, and the continuation starts on a fresh line: the prefix's last token
  is a newline in every common tokenizer, so the prompt tokens of a prefix are the same whether it is
  tokenised alone or inside the solution (what the ``assistant`` placement relies on);
- a token cut would tie a dataset to one tokenizer and can end mid-number, handing the policy half a step;
- one-paragraph solutions have no inner line breaks; sentences (``.``, ``!`` or ``?`` then whitespace) are
  the next natural step boundary there, except after an abbreviation (``e.g.``, ``Dr.``, ``Fig.``, ...) or an
  initial (``J. Smith``), which end no sentence.

PrefixRL (arXiv 2601.18795) cuts its traces by tokens instead (the first h tokens of a successful trace) and
varies h to make several prefixed problems per problem. :func:`prefixes_at` gives ``copies`` text prefixes at
different lengths, :func:`token_prefixes` cuts kept token ids (no re-tokenisation: the ids are the trace's own).

Prefix length is measured as the fraction ``f`` of the solution's characters (tokenizer-free; for a given
tokenizer the token fraction is close to it). The ladder never contains the whole solution: it would hand
over the answer. POPE keeps guidance short (around a quarter of the solution), hence the default cap
``max_fraction = 0.25``; a problem whose first step is already longer than the cap has no usable prefix.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

DEFAULT_MAX_FRACTION = 0.25  # POPE caps the oracle prefix around a quarter of the solution (arXiv 2601.18779)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
# A period after these ends no sentence ("e.g. the sum", "Dr. Smith"); compared lower-case, with the period.
ABBREVIATIONS = frozenset({"e.g.", "i.e.", "etc.", "vs.", "cf.", "al.", "approx.", "resp.", "dr.", "mr.", "mrs.",
                           "ms.", "prof.", "st.", "fig.", "figs.", "eq.", "eqs.", "no.", "vol.", "p.", "pp."})
_INITIAL = re.compile(r"^[A-Z]\.$")  # "J." of "J. Smith"

# Why a problem got no prefix (counted, never raised: one bad row must not stop a dataset).
MISSING = "missing"  # the solution column (or a level of the dotted key) is absent or null
NOT_TEXT = "not_text"  # the value is not a string
EMPTY = "empty"  # only whitespace
ONE_STEP = "one_step"  # no inner line or sentence boundary: any prefix would be the whole solution
OVER_CAP = "over_cap"  # the first step alone is longer than max_fraction of the solution
SKIP_REASONS = (MISSING, NOT_TEXT, EMPTY, ONE_STEP, OVER_CAP)


@dataclass(frozen=True)
class Prefix:
    """The first ``steps`` steps of a solution: ``text`` and its share ``fraction`` of the solution's characters.
    A token cut (:func:`token_prefixes`) holds the first ``steps`` token ids of a trace in ``token_ids`` and its
    share of the trace's tokens in ``fraction``."""

    text: str
    steps: int
    fraction: float
    token_ids: tuple[int, ...] | None = None


def lookup(row: Mapping, key: str):
    """The value at a dotted ``key`` (``extra_info.solution``) of a dataset row; None when any level is missing."""
    value = row
    for part in key.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return None
        value = value[part]
    return value


def split_steps(solution: str) -> list[str]:
    """The solution's steps, each with its trailing separator, so ``"".join(steps) == solution``.

    Lines when the solution has more than one non-empty line, else sentences. Blank lines stay attached to
    the step before them (a blank line is not a step)."""
    lines = solution.splitlines(keepends=True)
    steps: list[str] = []
    for line in lines:
        if steps and not line.strip():
            steps[-1] += line
        else:
            steps.append(line)
    if sum(1 for s in steps if s.strip()) > 1:
        return _leading_blank_into_first(steps)
    return _split_sentences(solution)


def _leading_blank_into_first(steps: list[str]) -> list[str]:
    if len(steps) > 1 and not steps[0].strip():
        return [steps[0] + steps[1], *steps[2:]]
    return steps


def _ends_sentence(text: str, at: int) -> bool:
    """Whether the period (or ! ?) just before ``at`` ends a sentence: not after an abbreviation or an initial."""
    word = text[:at].rsplit(None, 1)[-1]
    return word.lower() not in ABBREVIATIONS and not _INITIAL.match(word)


def _split_sentences(text: str) -> list[str]:
    steps, start = [], 0
    for match in _SENTENCE_END.finditer(text):
        if not _ends_sentence(text, match.start()):
            continue
        steps.append(text[start : match.end()])
        start = match.end()
    if start < len(text):
        steps.append(text[start:])
    return steps


def prefix_ladder(solution: str, max_fraction: float = DEFAULT_MAX_FRACTION) -> list[Prefix]:
    """Every proper step prefix of ``solution`` with at most ``max_fraction`` of its characters, shortest first."""
    _check_fraction("max_fraction", max_fraction)
    steps = split_steps(solution)
    total = len(solution)
    ladder, end = [], 0
    for k, step in enumerate(steps[:-1], start=1):  # never the whole solution
        end += len(step)
        if end / total > max_fraction:
            break
        ladder.append(Prefix(solution[:end], k, end / total))
    return ladder


def skip_reason(solution, max_fraction: float = DEFAULT_MAX_FRACTION) -> str | None:
    """Why ``solution`` has no prefix within the cap (one of :data:`SKIP_REASONS`), or None if it has one."""
    if solution is None:
        return MISSING
    if not isinstance(solution, str):
        return NOT_TEXT
    if not solution.strip():
        return EMPTY
    if len(split_steps(solution)) < 2:
        return ONE_STEP
    if not prefix_ladder(solution, max_fraction):
        return OVER_CAP
    return None


def prefix_at(solution, fraction: float, max_fraction: float = DEFAULT_MAX_FRACTION) -> Prefix | None:
    """The longest prefix with at most ``min(fraction, max_fraction)`` of the solution; when even the first step
    is longer than ``fraction`` (but within the cap), that first step. None when the solution has no prefix."""
    _check_fraction("fraction", fraction)
    if skip_reason(solution, max_fraction) is not None:
        return None
    ladder = prefix_ladder(solution, max_fraction)
    within = [p for p in ladder if p.fraction <= fraction]
    return within[-1] if within else ladder[0]


def _spread(ladder: list[Prefix], copies: int) -> list[Prefix]:
    """``copies`` prefixes of ``ladder`` (shortest first) at evenly spaced lengths, ending at its longest; fewer
    when the ladder is shorter than ``copies``."""
    n = len(ladder)
    picks = sorted({math.ceil(n * j / copies) - 1 for j in range(1, copies + 1)})
    return [ladder[i] for i in picks]


def prefixes_at(solution, fraction: float, max_fraction: float = DEFAULT_MAX_FRACTION, copies: int = 1) -> list[Prefix]:
    """Up to ``copies`` prefixes of different lengths for one problem (PrefixRL varies the prefix length h):
    the ladder's rungs within ``min(fraction, max_fraction)`` (or the first rung, as :func:`prefix_at`), evenly
    spread and ending at :func:`prefix_at`'s prefix, so ``copies=1`` is that prefix. Empty without a prefix."""
    _check_copies(copies)
    first = prefix_at(solution, fraction, max_fraction)
    if first is None:
        return []
    within = [p for p in prefix_ladder(solution, max_fraction) if p.fraction <= first.fraction]
    return _spread(within, copies)


def token_prefixes(token_ids, fraction: float, max_fraction: float = DEFAULT_MAX_FRACTION, copies: int = 1,
                   decode=None) -> list[Prefix] | str:
    """PrefixRL's token cut (arXiv 2601.18795: the first h tokens of a successful trace): the first
    h_j = floor(n * min(fraction, max_fraction) * j / copies) of a trace's n kept token ids, j = 1..copies (at
    least one token, never the whole trace), with ``decode(ids)`` as the prefix's text; or the reason there is
    none (``empty``: no ids; ``over_cap``: one token is already more than the cap)."""
    _check_fraction("fraction", fraction)
    _check_fraction("max_fraction", max_fraction)
    _check_copies(copies)
    ids = tuple(int(t) for t in token_ids)
    n = len(ids)
    if n == 0:
        return EMPTY
    if n < 2 or 1 / n > max_fraction:
        return OVER_CAP
    share = min(fraction, max_fraction)
    lengths = sorted({min(n - 1, max(1, math.floor(n * share * j / copies))) for j in range(1, copies + 1)})
    text = decode or (lambda part: "")
    return [Prefix(text(list(ids[:h])), h, h / n, ids[:h]) for h in lengths]


def prefixes_for(solutions: Iterable, fraction: float, max_fraction: float = DEFAULT_MAX_FRACTION) -> tuple[list[Prefix | None], Counter]:
    """:func:`prefix_at` for each solution, and how many were skipped for each reason of :data:`SKIP_REASONS`."""
    out, skipped = [], Counter()
    for solution in solutions:
        reason = skip_reason(solution, max_fraction)
        if reason is not None:
            skipped[reason] += 1
            out.append(None)
        else:
            out.append(prefix_at(solution, fraction, max_fraction))
    return out, skipped


def _check_copies(copies: int) -> None:
    if int(copies) != copies or copies < 1:
        raise ValueError(f"copies={copies}: guided copies per problem, an integer >= 1 (PrefixRL varies the prefix length)")


def _check_fraction(name: str, value: float) -> None:
    if not 0 < value <= 1:
        raise ValueError(f"{name}={value}: a share of the solution, in (0, 1] (POPE uses about {DEFAULT_MAX_FRACTION})")
