"""Which rollouts of a step each loss term sees: the IsoCompute recipe's masks as pure functions.

A training step holds B_problem groups of rollouts (one group per problem, verl's ``uid``). Before the
actor update our trainer decides, per rollout:

* **real or padding.** verl pads a batch whose row count is not a multiple of what the update needs
  (``upsample_batch_to_divisible_size``: rows of an all-EOS dummy sequence, tagged ``is_padding``, sharing
  one fresh uid, with the first real row's reward info copied in). Padding rows never train and never
  enter group statistics, counts or the accuracy.
* **groups of one.** A group with fewer than 2 real rollouts has no baseline: its advantage is 0 and it is
  not trained (verl's ``grpo`` would hand it its raw score instead). With the recipe's replay buffer a
  failed rollout evicts its whole group (see the trainer), so this happens only if verl pads.
* **the decoupled subset** (appendix C): under ``isocompute_grpo_decoupled`` the baseline comes from all
  rollouts of a group and the gradient from a seeded uniform subset of min(n_train, group size) of them.
* **one output per rollout.** verl's v1 agent loop may return several outputs for one session (one of the
  n samples of a problem; a multi-turn loop) and keys each ``{uid}_{session}_{output}``; its ``grpo``
  estimator then takes the baseline over each session's final output only. Every mask here, our
  estimators and compute C count a row as one rollout, so :func:`multi_output_sessions` lets the trainer
  refuse such a batch rather than weigh a session by its number of outputs.
* **the zero-variance filter** (section 2), judged on the binary accuracy: ``groups`` drops all-correct /
  all-wrong groups from every loss term; ``regularizers`` keeps the policy gradient everywhere but applies
  KL and entropy only to groups whose accuracy varies.

:func:`step_masks` turns (uid, acc, real, mode, n_train, seed) into ``keep`` (rows left in every loss term
and in the normalisers), the regulariser mask, per-group trained counts and the sequence count the
``seq-mean-*`` normaliser needs; the trainer only moves these into verl's TransferQueue, and the
estimators of :mod:`verl_isocompute.training.advantage` draw the decoupled subset with the same
:func:`decoupled_train_mask`. Pure numpy/pandas: no verl, no torch.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from verl_isocompute.rules.metrics import is_correct
from verl_isocompute.rules.names import GROUPS, REGULARIZERS, ZERO_VARIANCE_MODES


def group_codes(uids: Any) -> np.ndarray:
    """Contiguous group ids 0..G-1 (int64) for per-rollout group labels (uid strings or ints).

    Hash-based (``pandas.factorize``): O(N), where sorting the uid strings is not.
    """
    values = uids.detach().cpu().numpy() if hasattr(uids, "detach") else np.asarray(uids)
    codes, _ = pd.factorize(values.reshape(-1))
    return codes.astype(np.int64, copy=False)


def real_rows(real: Any, size: int) -> np.ndarray:
    """``real`` as a bool array of ``size`` rows (None: every row is real); a length mismatch is an error."""
    if real is None:
        return np.ones(size, dtype=bool)
    real = np.asarray(real, dtype=bool).reshape(-1)
    if real.size != size:
        raise ValueError(f"real has {real.size} entries but the batch has {size} rollouts")
    return real


def accuracy(extra_fields: Iterable[Any], scores: Iterable[float]) -> np.ndarray:
    """Binary accuracy per rollout (:func:`verl_isocompute.rules.metrics.is_correct`: the reward's ``acc``
    in verl's ``reward_extra_info`` when it gives one, else score > 0.5). Variance is judged on this, never
    on a shaped score: a group whose scores differ only by a format bonus is still all-correct or all-wrong
    and carries no learning signal."""
    acc = []
    for extra, score in zip(extra_fields, scores, strict=True):
        info = extra.get("reward_extra_info", {}) if isinstance(extra, dict) else {}
        acc.append(float(is_correct(score, info.get("acc"))))
    return np.asarray(acc, dtype=np.float64)


def group_has_variance(acc: Any, uids: Any, real: Any = None) -> np.ndarray:
    """Per rollout, True iff it is real and its group's real rollouts hold both correct and incorrect
    answers (bool array, shape (N,)). Pass the binary accuracy (:func:`accuracy`)."""
    acc = np.asarray(acc, dtype=np.float64).reshape(-1)
    codes = group_codes(uids)
    if acc.size != codes.size:
        raise ValueError(f"acc has {acc.size} entries but uids has {codes.size}")
    real = real_rows(real, codes.size)
    if codes.size == 0:
        return np.zeros(0, dtype=bool)
    lo = np.full(codes.max() + 1, np.inf)
    hi = np.full(codes.max() + 1, -np.inf)
    np.minimum.at(lo, codes[real], acc[real])
    np.maximum.at(hi, codes[real], acc[real])
    return real & (hi != lo)[codes]


def decoupled_train_mask(uids: Any, n_train: int, seed: int | Sequence[int], real: Any = None) -> np.ndarray:
    """Which rollouts to train on under the decoupled baseline: min(n_train, group size) real rollouts
    per group, uniform, without replacement.

    Args:
        uids: (N,) group label per rollout (verl's ``uid``).
        n_train: rollouts trained on per group (``isocompute.decoupled.n_train``), >= 1. A group with fewer
            real rollouts (failures, padding) trains on all it has.
        seed: an int or a sequence of ints, e.g. ``(data_loader_seed, global_step)`` so each step draws anew.
        real: (N,) bool, False for verl's padding rows (never drawn); default all real.

    Returns:
        Bool array (N,); a function of (uids, n_train, seed, real) only, so the estimator and the trainer
        draw the same subset.
    """
    if int(n_train) < 1:
        raise ValueError(f"isocompute.decoupled.n_train must be >= 1, got {n_train}")
    codes = group_codes(uids)
    real = real_rows(real, codes.size)
    if codes.size == 0:
        return np.zeros(0, dtype=bool)
    # A uniformly random order of the real rollouts, then a stable sort by group: within each group the
    # rollouts appear in uniformly random order, and the first n_train of each form the subsample.
    perm = np.random.default_rng(seed).permutation(codes.size)
    perm = perm[real[perm]]
    order = perm[np.argsort(codes[perm], kind="stable")]
    count = np.bincount(codes[real], minlength=codes.max() + 1)
    group_start = np.cumsum(count) - count
    rank = np.full(codes.size, np.iinfo(np.int64).max)
    rank[order] = np.arange(order.size) - group_start[codes[order]]
    return rank < int(n_train)


@dataclass(frozen=True)
class StepMasks:
    """What one step trains on (arrays are per rollout, shape (N,))."""

    real: np.ndarray  # False: verl's padding row
    varies: np.ndarray  # real, and its group's accuracy varies
    keep: np.ndarray  # in every loss term and in the normalisers (the trainer zeroes the others' masks)
    reg_mask: np.ndarray  # KL and entropy act on it (``regularizers``: keep & varies; otherwise keep)
    trained_per_group: np.ndarray  # kept rollouts per group with real rollouts, in order of first appearance
    seq_count: int  # kept rollouts in the step: the seq-mean-* normaliser
    padding_rows: int
    singleton_rows: int  # real rollouts alone in their group (no baseline, not trained)
    groups: int  # groups with real rollouts
    varying_groups: int


def step_masks(
    uids: Any,
    acc: Any,
    real: Any,
    mode: str,
    n_train: int | None = None,
    seed: int | Sequence[int] | None = None,
) -> StepMasks:
    """The masks of one training step.

    Args:
        uids: (N,) group label per rollout; acc: (N,) binary accuracy (:func:`accuracy`).
        real: (N,) bool, False for verl's padding rows (``tag["is_padding"]``); None: all real.
        mode: zero-variance mode, one of ``off``, ``groups``, ``regularizers``.
        n_train, seed: the decoupled baseline's subset (:func:`decoupled_train_mask`); None: train on all.
    """
    if mode not in ZERO_VARIANCE_MODES:
        raise ValueError(f"isocompute.zero_variance.mode={mode!r}: use one of {', '.join(ZERO_VARIANCE_MODES)}")
    codes = group_codes(uids)
    real = real_rows(real, codes.size)
    num_groups = int(codes.max()) + 1 if codes.size else 0
    size = np.bincount(codes[real], minlength=num_groups)  # real rollouts per group
    in_group = real & (size[codes] >= 2)
    varies = group_has_variance(acc, uids, real)
    keep = in_group.copy()
    if n_train is not None:
        if seed is None:
            raise ValueError("the decoupled subset needs a seed")
        keep &= decoupled_train_mask(uids, n_train, seed, real)
    if mode == GROUPS:
        keep &= varies
    reg_mask = keep & varies if mode == REGULARIZERS else keep
    has_real = size > 0
    return StepMasks(
        real=real,
        varies=varies,
        keep=keep,
        reg_mask=reg_mask,
        trained_per_group=np.bincount(codes[keep], minlength=num_groups)[has_real],
        seq_count=int(keep.sum()),
        padding_rows=int((~real).sum()),
        singleton_rows=int((real & ~in_group).sum()),
        groups=int(has_real.sum()),
        varying_groups=int(np.unique(codes[varies]).size),
    )


def row_ids(keys: Iterable[str]) -> np.ndarray:
    """A 20-bit hash of each sample's TransferQueue key (``{uid}_{session}_{index}``), as float64.

    The trainer sends it with the masks and the loss reports sums of (id + 1) and (id + 1)^2 over the rows
    it masked: exact in float64, and checkable against the keys of verl's rollout dump.
    """
    return np.array([zlib.crc32(str(key).encode()) & 0xFFFFF for key in keys], dtype=np.float64)


def multi_output_sessions(keys: Iterable[str]) -> list[str]:
    """The sessions (``{uid}_{session}``) of a step that have more than one output, in order of appearance.

    verl's v1 agent loop keys every output ``{uid}_{session}_{output}`` (output 0, 1, ... of one session;
    padding rows are ``{pad uid}_{i}_0``), and its ``grpo`` splits a key with ``rsplit("_", 2)``, as here. A
    key that does not end in ``_{session}_{output}`` counts as one session of one output.
    """
    outputs: dict[str, int] = {}
    for key in keys:
        parts = str(key).rsplit("_", 2)
        session = f"{parts[0]}_{parts[1]}" if len(parts) == 3 and parts[2].isdigit() else str(key)
        outputs[session] = outputs.get(session, 0) + 1
    return [session for session, count in outputs.items() if count > 1]


def check_one_output_per_session(keys: Iterable[str], step: int) -> None:
    """Refuse a step in which a session returned several outputs (ValueError naming one and the fix)."""
    sessions = multi_output_sessions(keys)
    if sessions:
        raise ValueError(
            f"step {step}: {len(sessions)} rollout session(s) returned several outputs (e.g. {sessions[0]}_0 and "
            f"{sessions[0]}_1: a multi-output agent loop); the isocompute trainer and estimators count one output "
            "per rollout (GRPO groups, zero-variance masks, compute C), where verl's `grpo` takes each session's "
            "final output: use an agent loop that returns one output per session, or verl's own trainer "
            "(trainer.v1.trainer_mode=sync) with algorithm.adv_estimator=grpo"
        )
