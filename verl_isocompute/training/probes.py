"""What the isocompute loss reports back from the actor workers, checked against what the trainer masked.

The trainer sends each step's masks to the workers through TransferQueue fields; our loss
(:func:`verl_isocompute.training.regularizers.isocompute_ppo_loss`) reports, as ``actor/isocompute/*``, the rows
it trained on: counts, token sums and sums of (row id + 1) and its square over the rows in each mask.
:func:`probe_values` is what those reports must be for the trainer's masks, :func:`check_probes` stops the run
when they differ, and :func:`log_regularisers` turns the reports into means comparable across zero-variance modes.
"""

from __future__ import annotations

import math

import numpy as np

from verl_isocompute.runlog import metric_key
from verl_isocompute.rules.masks import StepMasks
from verl_isocompute.training.regularizers import PROBE_PREFIX

# What the trainer sent and the loss reports back (regularizers.PROBE_PREFIX + name), compared every step.
CHECKED_PROBES = ("loss_seqs", "loss_tokens", "loss_rowsum", "reg_seqs", "reg_tokens", "reg_rowsum", "reg_rowsqsum")


def probe_values(masks: StepMasks, tokens: np.ndarray, ids: np.ndarray) -> dict[str, float]:
    """What the loss should report (regularizers._probes) for these masks: rows carrying loss tokens, and
    among them the rows the regularisers act on; ``tokens`` are each row's response tokens after masking."""
    loss = masks.keep & (tokens > 0)
    reg = masks.reg_mask & loss
    ids = ids + 1.0
    return {
        "loss_seqs": float(loss.sum()), "loss_tokens": float(tokens[loss].sum()), "loss_rowsum": float(ids[loss].sum()),
        "reg_seqs": float(reg.sum()), "reg_tokens": float(tokens[reg].sum()), "reg_rowsum": float(ids[reg].sum()),
        "reg_rowsqsum": float((ids[reg] ** 2).sum()),
    }


def check_probes(expected: dict[str, float], metrics: dict, step: int) -> None:
    """The rows the workers trained on (reported by our loss) must be the ones the trainer masked."""
    for name in CHECKED_PROBES:
        sent, seen = expected[name], metrics.get(PROBE_PREFIX + name)
        if seen is None or not math.isclose(sent, seen, rel_tol=1e-9, abs_tol=1e-6):
            raise RuntimeError(
                f"step {step}: the actor workers report {name}={seen} but the trainer's masks give "
                f"{sent}: the isocompute loss or its TransferQueue fields did not reach the workers"
            )


def log_regularisers(metrics: dict) -> None:
    """Means over the tokens KL / entropy act on, and their share: comparable across zero-variance modes
    (verl's actor/entropy_loss and actor/kl_loss divide by all trained tokens). 0 when none is masked in."""
    reg_tokens, reg_seqs = metrics[PROBE_PREFIX + "reg_tokens"], metrics[PROBE_PREFIX + "reg_seqs"]
    loss_tokens, loss_seqs = metrics[PROBE_PREFIX + "loss_tokens"], metrics[PROBE_PREFIX + "loss_seqs"]
    metrics[metric_key("reg_token_share")] = reg_tokens / loss_tokens if loss_tokens else 0.0
    metrics[metric_key("reg_seq_share")] = reg_seqs / loss_seqs if loss_seqs else 0.0
    for term in ("entropy", "kl"):
        total = metrics.get(f"{PROBE_PREFIX}reg_{term}_sum")
        if total is not None:
            metrics[metric_key(f"reg_{term}_mean")] = total / reg_tokens if reg_tokens else 0.0
