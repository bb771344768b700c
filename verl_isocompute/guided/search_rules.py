"""Choosing each problem's prefix from base-model samples: the decision rules of the search (pure).

Each problem has a prefix ladder (:func:`verl_isocompute.guided.prefixes.prefix_ladder`); rung ``r`` is its
``r``-th prefix, shortest first (1-based). The search samples k guided responses at one rung at a time and
keeps each rung's outcome ``{"id", "rung", "k", "correct"}``. Two rules decide from those outcomes:

- ``pope`` (arXiv 2601.18779): the **shortest** prefix with at least one success in k samples, up to the
  cap (the ladder holds only prefixes within ``max_fraction``). The search climbs from rung 1 and stops at
  the first success; a problem with no success on any rung is ``exhausted``.
- ``band`` (PrefixRL, arXiv 2601.18795: the prefix length sets the difficulty): a rung whose guided avg@k
  lies in ``[low, high]``. It climbs while avg@k < low and stops at the first rung in the band; when one
  rung is below and the next above the band, the one nearer the band is chosen; a rung 1 above the band is
  chosen as it is (no shorter prefix exists).

Both only ever move up the ladder from rung 1, so a problem needs at most one new rung per round, and the
outcomes alone say where each problem stands: a search resumed from its cache of outcomes continues where it
stopped (:func:`next_rungs`). Sampling is not here: the driver is
:mod:`verl_isocompute.workflow.prefix_search` (``isocompute prefix-search``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

POPE, BAND = "pope", "band"
RULES = (POPE, BAND)
CHOSEN, EXHAUSTED, PENDING = "chosen", "exhausted", "pending"


@dataclass(frozen=True)
class Decision:
    """Where one problem's search stands: ``chosen`` (at ``rung``), ``exhausted`` (no rung fits), or
    ``pending`` (sample ``rung`` next)."""

    status: str
    rung: int | None


def _avg(outcome: Mapping) -> float:
    return outcome["correct"] / outcome["k"]


def decide(outcomes: Mapping[int, Mapping], n_rungs: int, rule: str = POPE, band: tuple[float, float] = (0.25, 0.75)) -> Decision:
    """The decision for one problem from its per-rung outcomes ``{rung: {"k", "correct"}}`` and ladder length."""
    if rule not in RULES:
        raise ValueError(f"rule={rule!r}: use {' or '.join(RULES)}")
    low, high = band
    if not 0 <= low <= high <= 1:
        raise ValueError(f"band={band}: need 0 <= low <= high <= 1 (guided avg@k)")
    if n_rungs < 1:
        return Decision(EXHAUSTED, None)
    for rung in range(1, n_rungs + 1):
        if rung not in outcomes:
            return Decision(PENDING, rung)
        avg = _avg(outcomes[rung])
        if rule == POPE:
            if outcomes[rung]["correct"] >= 1:
                return Decision(CHOSEN, rung)
            continue
        if avg < low:
            continue
        if avg <= high or rung == 1:
            return Decision(CHOSEN, rung)
        below = _avg(outcomes[rung - 1])  # jumped over the band: the nearer side wins
        return Decision(CHOSEN, rung if avg - high <= low - below else rung - 1)
    return Decision(EXHAUSTED, None)


def decisions(ladders: Mapping[str, int], outcomes: Iterable[Mapping], rule: str = POPE,
              band: tuple[float, float] = (0.25, 0.75)) -> dict[str, Decision]:
    """:func:`decide` for every problem ``{id: ladder length}`` from the search's outcomes (later outcomes of the
    same problem and rung replace earlier ones)."""
    by_problem: dict[str, dict[int, Mapping]] = {pid: {} for pid in ladders}
    for outcome in outcomes:
        if outcome["id"] in by_problem:
            by_problem[outcome["id"]][int(outcome["rung"])] = outcome
    return {pid: decide(by_problem[pid], n, rule, band) for pid, n in ladders.items()}


def next_rungs(ladders: Mapping[str, int], outcomes: Iterable[Mapping], rule: str = POPE,
               band: tuple[float, float] = (0.25, 0.75)) -> dict[str, int]:
    """The rung to sample next for every problem still pending: one search round."""
    return {pid: d.rung for pid, d in decisions(ladders, outcomes, rule, band).items() if d.status == PENDING}
