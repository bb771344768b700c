"""Fact groups of arithmetic problems, and splits that keep every fact on one side. Pure (pandas only).

A held-out set measures skill only if its problems' answers cannot be recalled from training. Two problems
share their *answer-determining fact* when one's answer follows from the other's without new arithmetic:

- reorderings: ``3 * 4`` and ``4 * 3``; ``2 + 5`` and ``5 + 2`` (the same multiset of operands);
- identity variants: ``3 * 4 * 1`` is ``3 * 4`` (factors 1 dropped), ``2 + 5 + 0`` is ``2 + 5`` (addends 0 dropped).

:func:`fact_group` maps a question to its group: the operator and the sorted operands left once identities
are dropped. Some groups need no arithmetic at all (*trivial*): a product with a factor 0 (the answer is 0
whatever the rest), or one operand left (``7 * 1``, ``7 + 0``). Expressions mixing operators, or with a
minus or a division (not commutative), are grouped by their exact operand sequence, with no merging.

:func:`split_by_fact` assigns whole groups to named sets (e.g. tune / dev / test) in seeded random order
until each holds its share of the problems, so a fact never appears in two sets; trivial groups go to a set
of their own (:data:`TRIVIAL`), to be left out or reported apart. :func:`first_of_each_fact` keeps one
problem per group, for a pool whose problems share no fact at all.
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping

import pandas as pd

TRIVIAL = "trivial"
# The expression of a question: numbers (optionally signed, bracketed) joined by + - * / (reasoning-gym's
# "Calculate 3 + 4." and "Solve the following multiplication: 3 * 4. ...", our worked "Calculate 47 + 86 - 39.").
_EXPRESSION = re.compile(r"\(?\s*-?\d+\s*\)?(?:\s*[-+*/]\s*\(?\s*-?\d+\s*\)?)+")
_OPERAND = re.compile(r"-?\d+")
_OPERATOR = re.compile(r"(?<=[\d)])\s*([-+*/])")
# Per commutative operator: the identity operand dropped, and the absorbing one that makes the group trivial.
_IDENTITY = {"*": 1, "+": 0}
_ABSORBING = {"*": 0}


def fact_group(question: str) -> str:
    """The fact group of an arithmetic question (the module docstring): e.g. ``*:3,4`` for "3 * 4", "4 * 3" and
    "1 * 3 * 4"; :data:`TRIVIAL` for one that needs no arithmetic; the question itself when it has no expression."""
    match = _EXPRESSION.search(question)
    if match is None:
        return question.strip()
    expression = match.group()
    operators = set(_OPERATOR.findall(expression))
    operands = [int(x) for x in _OPERAND.findall(expression)]
    if len(operators) != 1 or (op := operators.pop()) not in _IDENTITY:
        return "seq:" + ",".join(map(str, operands)) + ":" + "".join(_OPERATOR.findall(expression))
    if op in _ABSORBING and _ABSORBING[op] in operands:
        return TRIVIAL
    kept = sorted(x for x in operands if x != _IDENTITY[op])
    if len(kept) <= 1:
        return TRIVIAL
    return f"{op}:" + ",".join(map(str, kept))


def first_of_each_fact(problems: pd.DataFrame, question: str = "question", keep_trivial: bool = False) -> pd.DataFrame:
    """The first problem of each fact group (rows in order; a ``fact_group`` column added); trivial ones left
    out unless ``keep_trivial``."""
    groups = problems[question].map(fact_group)
    keep = ~groups.duplicated() & (keep_trivial | (groups != TRIVIAL))
    return problems.assign(fact_group=groups)[keep].reset_index(drop=True)


def split_by_fact(problems: pd.DataFrame, shares: Mapping[str, float], seed: int = 0,
                  question: str = "question") -> pd.DataFrame:
    """``problems`` with columns ``fact_group`` and ``split``: whole groups go to the sets of ``shares`` (name ->
    share of the non-trivial problems, summing to 1) in a seeded random order, each set filled in turn up to its
    share; trivial groups get the split :data:`TRIVIAL`."""
    if not shares or any(v <= 0 for v in shares.values()) or abs(sum(shares.values()) - 1) > 1e-9:
        raise ValueError(f"split shares {dict(shares)}: give positive shares summing to 1")
    if TRIVIAL in shares:
        raise ValueError(f"{TRIVIAL!r} is the trivial problems' own split; name the sets otherwise")
    frame = problems.assign(fact_group=problems[question].map(fact_group), split=TRIVIAL)
    sizes = frame.loc[frame["fact_group"] != TRIVIAL].groupby("fact_group", sort=True).size()
    order = list(sizes.index)
    random.Random(seed).shuffle(order)
    targets = {name: share * int(sizes.sum()) for name, share in shares.items()}
    names, filled, current = list(shares), dict.fromkeys(shares, 0), 0
    assignment = {}
    for group in order:
        # the first set not yet at its share (the last takes what remains)
        while current < len(names) - 1 and filled[names[current]] + sizes[group] / 2 > targets[names[current]]:
            current += 1
        assignment[group] = names[current]
        filled[names[current]] += int(sizes[group])
    frame.loc[frame["fact_group"] != TRIVIAL, "split"] = frame["fact_group"].map(assignment)
    return frame
