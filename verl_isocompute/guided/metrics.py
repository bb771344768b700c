"""Training accuracy of guided and unguided rows, apart (pure numpy).

POPE (arXiv 2601.18779) and PrefixRL (arXiv 2601.18795) train on guided and unguided rows in one batch;
the unguided rows' accuracy is the signal that guidance transfers back, and averaging it with the (higher)
guided accuracy would hide it. Rows are told apart by ``extra_info.guided``
(:mod:`verl_isocompute.guided.placement`). Datasets with no such mark get no metrics.
"""

from __future__ import annotations

import numpy as np


def guided_metrics(extra_infos: list, acc: np.ndarray, real: np.ndarray) -> dict[str, float]:
    """``isocompute/{guided,unguided}_rows`` (rollouts of each kind in the step) and, for a kind present,
    ``isocompute/{guided,unguided}/train_acc`` (their mean accuracy). Padding rows (``real`` False) are left out."""
    infos = [info if isinstance(info, dict) else {} for info in extra_infos]
    if not any("guided" in info for info in infos):
        return {}
    guided = np.array([bool(info.get("guided", False)) for info in infos], dtype=bool)
    out: dict[str, float] = {}
    for kind, rows in (("guided", guided & real), ("unguided", ~guided & real)):
        out[f"isocompute/{kind}_rows"] = int(rows.sum())
        if rows.any():
            out[f"isocompute/{kind}/train_acc"] = float(np.asarray(acc, dtype=float)[rows].mean())
    return out
