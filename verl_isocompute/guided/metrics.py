"""Training accuracy of guided and unguided rows, apart (pure numpy).

POPE (arXiv 2601.18779) and PrefixRL (arXiv 2601.18795) train on guided and unguided rows in one batch;
the unguided rows' accuracy is the signal that guidance transfers back, and averaging it with the (higher)
guided accuracy would hide it. Rows are told apart by ``extra_info.guided``
(:mod:`verl_isocompute.guided.placement`). Datasets with no such mark get no metrics.

A dataset may mix both placements (POPE's user turn and PrefixRL's assistant turn, ``extra_info.placement``):
the guided rows are then split again per placement, since the two condition the policy differently and
their accuracies need not agree.
"""

from __future__ import annotations

import numpy as np

from verl_isocompute.guided.placement import PLACEMENTS
from verl_isocompute.runlog import metric_key


def _rows_key(kind: str) -> str:
    return metric_key(f"{kind}_rows")


def _acc_key(kind: str) -> str:
    return metric_key(f"{kind}/train_acc")


_KINDS = ("guided", "unguided")
_PLACED_KINDS = tuple(f"guided_{p}" for p in PLACEMENTS)
# Every key guided_metrics can return (the trainer copies them into the run log).
GUIDED_METRICS = (*map(_rows_key, _KINDS), *map(_acc_key, _KINDS), *map(_rows_key, _PLACED_KINDS),
                  *map(_acc_key, _PLACED_KINDS))


def guided_metrics(extra_infos: list, acc: np.ndarray, real: np.ndarray) -> dict[str, float]:
    """``isocompute/{guided,unguided}_rows`` (rollouts of each kind in the step) and, for a kind present,
    ``isocompute/{guided,unguided}/train_acc`` (their mean accuracy); when guided rows of more than one
    placement are in the step, also ``isocompute/guided_{user,assistant}_rows`` and, for a placement
    present, ``isocompute/guided_{user,assistant}/train_acc``. Padding rows (``real`` False) are left out."""
    infos = [info if isinstance(info, dict) else {} for info in extra_infos]
    if not any("guided" in info for info in infos):
        return {}
    guided = np.array([bool(info.get("guided", False)) for info in infos], dtype=bool)
    placement = np.array([str(info.get("placement") or "") for info in infos], dtype=object)
    kinds = list(zip(_KINDS, (guided & real, ~guided & real)))
    placed = [guided & real & (placement == p) for p in PLACEMENTS]
    if sum(rows.any() for rows in placed) > 1:
        kinds += list(zip(_PLACED_KINDS, placed))
    out: dict[str, float] = {}
    for kind, rows in kinds:
        out[_rows_key(kind)] = int(rows.sum())
        if rows.any():
            out[_acc_key(kind)] = float(np.asarray(acc, dtype=float)[rows].mean())
    return out


def mixture_counts(extra_infos: list) -> dict | None:
    """The mixture a run trains on, for the run-log header (``guided_mixture``): guided and unguided rows, guided
    rows per unguided row (None without unguided rows), distinct problems and guided problems (by
    ``extra_info.problem_id``, when the mixture wrote it), and guided rows per placement. None for a dataset
    without the guided marks."""
    infos = [info if isinstance(info, dict) else {} for info in extra_infos]
    if not any("guided" in info for info in infos):
        return None
    guided = [info for info in infos if info.get("guided")]
    unguided = len(infos) - len(guided)
    ids = {info.get("problem_id") for info in infos if info.get("problem_id")}
    return {
        "guided": len(guided), "unguided": unguided, "ratio": round(len(guided) / unguided, 4) if unguided else None,
        "problems": len(ids) or None, "problems_guided": len({info.get("problem_id") for info in guided if info.get("problem_id")}) or None,
        "placements": {p: n for p in PLACEMENTS if (n := sum(1 for info in guided if info.get("placement") == p))},
    }
