"""Difficulty of a problem and the sets cut from it (arXiv 2603.12151, section 3): the base model's avg@k per
problem, the Easy / Hard / extremely hard / very easy splits (closed intervals), the Hard-only / Dual / Tri
mixtures and the train / validation split. Pure: numpy and pandas. The bands and mixtures are described in
:mod:`verl_isocompute.workflow.curate`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from verl_isocompute.errors import CurateError
from verl_isocompute.settings import setting

DEFAULT_K = 16
DEFAULT_TEMPERATURE = 0.6
DEFAULT_VAL_SIZE = 300
DEFAULT_MAX_VAL_FRACTION = 0.2
DEFAULT_MIXTURE_SIZE = 5000
SPLITS = ("easy", "hard", "extremely_hard", "very_easy")
# component, share; the order is the priority when pools overlap
MIXTURES: dict[str, tuple[tuple[str, float], ...]] = {
    "hard_only": (("hard", 1.0),),
    "dual": (("hard", 0.5), ("easy", 0.5)),
    "tri": (("hard", 0.5), ("easy", 0.25), ("very_easy", 0.25)),
}
SETS = SPLITS + tuple(MIXTURES)
_EPS = 1e-9  # c / k is compared with closed interval ends written as decimals (0.3 = 3/10)


@dataclass(frozen=True)
class Thresholds:
    """Difficulty bands on avg@k (closed intervals) and the pass@k bound of the extremely hard split."""

    easy: tuple[float, float] = setting((0.3, 0.6), "avg@k band of Easy")
    hard: tuple[float, float] = setting((0.0, 1.0 / 16), "avg@k band of Hard")
    very_easy: tuple[float, float] = setting((0.6, 0.9), "avg@k band of Very easy")
    extremely_hard_max_pass: float = setting(0.0, "Extremely hard: pass@k <= P; 0: no sample correct")

    def __post_init__(self) -> None:
        for name in ("easy", "hard", "very_easy"):
            lo, hi = getattr(self, name)
            if not 0.0 <= lo <= hi <= 1.0:
                raise CurateError(f"--{name.replace('_', '-')} {lo},{hi}: need 0 <= low <= high <= 1")
        if not 0.0 <= self.extremely_hard_max_pass < 1.0:
            raise CurateError("the extremely hard pass@k bound must be in [0, 1)")


def difficulty_table(problems: pd.DataFrame, outcomes: dict[str, dict[str, Any]], k: int) -> pd.DataFrame:
    """One row per sampled problem: k, correct, avg@k, pass@k, mean response tokens, truncated share."""
    from verl_isocompute.rules.metrics import best_at_k

    rows = []
    for pid, source in zip(problems["problem_id"], problems.get("data_source", pd.Series([None] * len(problems)))):
        outcome = outcomes.get(pid)
        if outcome is None:
            continue
        tokens = outcome.get("response_tokens") or [0]
        rows.append({
            "problem_id": pid, "data_source": source, "k": outcome["k"], "correct": outcome["correct"],
            "mean_response_tokens": float(np.mean(tokens)), "truncated": outcome.get("truncated", 0) / outcome["k"],
        })
    table = pd.DataFrame(rows, columns=["problem_id", "data_source", "k", "correct", "mean_response_tokens", "truncated"])
    table.insert(4, "avg@k", table["correct"] / table["k"])
    table.insert(5, "pass@k", best_at_k(table["k"], table["correct"], k) if len(table) else [])
    return table


def _in(values: pd.Series, band: tuple[float, float]) -> pd.Series:
    return (values >= band[0] - _EPS) & (values <= band[1] + _EPS)


def assign_splits(difficulty: pd.DataFrame, thresholds: Thresholds = Thresholds()) -> dict[str, list[str]]:
    """Problem ids of each split (they may overlap: extremely hard lies inside hard, see the module doc)."""
    avg, passed = difficulty["avg@k"], difficulty["pass@k"]
    masks = {
        "easy": _in(avg, thresholds.easy),
        "hard": _in(avg, thresholds.hard),
        "extremely_hard": passed <= thresholds.extremely_hard_max_pass + _EPS,
        "very_easy": _in(avg, thresholds.very_easy),
    }
    return {name: difficulty.loc[mask, "problem_id"].tolist() for name, mask in masks.items()}


@dataclass
class Mixture:
    ids: list[str]
    counts: dict[str, int]
    note: str


def build_mixtures(splits: dict[str, list[str]], size: int = DEFAULT_MIXTURE_SIZE, seed: int = 0) -> dict[str, Mixture]:
    """The paper's mixtures, each of ``size`` problems or the largest size the pools allow."""
    if size < 1:
        raise CurateError(f"--mixture-size must be at least 1, got {size}")
    out = {}
    for name, parts in MIXTURES.items():
        # make the pools disjoint in priority order, so no problem is drawn twice
        taken: set[str] = set()
        pools = {}
        for component, _ in parts:
            pools[component] = [p for p in splits[component] if p not in taken]
            taken.update(pools[component])
        limits = {c: math.floor(len(pools[c]) / share + _EPS) for c, share in parts}
        actual = min([size, *limits.values()])
        counts = {c: int(round(actual * share)) for c, share in parts}
        counts[parts[0][0]] = actual - sum(v for c, v in counts.items() if c != parts[0][0])
        rng = np.random.default_rng(seed)
        ids: list[str] = []
        for component, _ in parts:
            ids += rng.permutation(pools[component])[: counts[component]].tolist()
        ids = rng.permutation(ids).tolist() if ids else []
        if actual < size:
            limiting = min(limits, key=limits.get)
            note = (f"{actual} of the {size} asked: only {len(pools[limiting])} {limiting} problems "
                    f"for a {dict(parts)[limiting]:.0%} share")
        else:
            note = f"{actual} problems"
        out[name] = Mixture(ids, counts, note)
    return out


def train_val_split(ids: list[str], val_size: int = DEFAULT_VAL_SIZE, max_val_fraction: float = DEFAULT_MAX_VAL_FRACTION,
                    seed: int = 0) -> tuple[list[str], list[str]]:
    """Disjoint (train, val) ids: ``val_size`` held out, at most ``max_val_fraction`` of the set, at least one.

    A set of fewer than two problems cannot be split: both lists come back empty.
    """
    if len(ids) < 2:
        return [], []
    n_val = max(1, min(val_size, int(math.floor(len(ids) * max_val_fraction))))
    order = np.random.default_rng(seed).permutation(len(ids))
    shuffled = [ids[i] for i in order]
    return shuffled[n_val:], shuffled[:n_val]
